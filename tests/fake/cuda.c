/*
** tests/fake/cuda.c — a test double of the CUDA driver for machines without a GPU, built as
** build/fake/libcuda.so.1. It runs NO kernels: "device" memory is host memory, copies and memsets are
** done at once, launches and graph replays do nothing. It exists so that tests/ranks.sh can drive
** glmrun's multi-GPU orchestration (a worker thread per rank, peer access, communicators, capture and
** replay in lockstep, the watchdog, the stall hook, clean-up) on CI; results computed "on" it mean
** nothing and no test reads them as numbers. FAKECUDA_NDEV sets the GPU count (default 2).
**
** It models one rule of the real pair that glmrun must obey at clean-up: a CUDA graph that captured
** NCCL calls holds a reference on their communicator until the graph is destroyed, and the real
** ncclCommDestroy waits for it (forever, if glmrun destroys the communicator first). The fake NCCL
** reports each collective (fakecuda_collective) and asks fakecuda_nccl_graphs before destroying; the
** counts are per thread, as each rank's worker captures and cleans up its own graphs.
*/
#include <cuda.h>
#include <stdlib.h>
#include <string.h>

static int ndev(void)
{
	const char *s = getenv("FAKECUDA_NDEV");
	return s ? atoi(s) : 2;
}

CUresult cuInit(unsigned flags)
{
	(void)flags;
	return ndev() > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_SUCCESS ? "no error" : "fake driver error";
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = ndev();
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int i)
{
	if (i < 0 || i >= ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	*d = i;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	(void)d;
	strncpy(name, "fake GPU (tests/fake/cuda.c: runs no kernels)", (size_t)len - 1);
	name[len - 1] = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	*v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
	     : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
	     : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? 232448 /* an H200's */
	                                                               : 1;
	return CUDA_SUCCESS;
}

/* One context per device, named by its ordinal + 1. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)(intptr_t)(d + 1);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c)
{
	(void)c;
	return CUDA_SUCCESS;
}

/* 64 GiB free of 80, or FAKECUDA_FREE_KIB (the out-of-memory message's tests). */
CUresult cuMemGetInfo(size_t *free_b, size_t *total)
{
	const char *s = getenv("FAKECUDA_FREE_KIB");
	*free_b = s ? (size_t)atoll(s) << 10 : (size_t)64 << 30, *total = (size_t)80 << 30;
	return CUDA_SUCCESS;
}

CUresult cuMemAlloc(CUdeviceptr *p, size_t n)
{
	void *m = aligned_alloc(256, (n + 255) / 256 * 256);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = (CUdeviceptr)m;
	return CUDA_SUCCESS;
}

CUresult cuMemFree(CUdeviceptr p)
{
	free((void *)p);
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost(void **p, size_t n)
{
	return (*p = malloc(n)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoD(CUdeviceptr d, const void *s, size_t n)
{
	memcpy((void *)d, s, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH(void *d, CUdeviceptr s, size_t n)
{
	memcpy(d, (const void *)s, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	(void)st;
	return cuMemcpyHtoD(d, s, n);
}

CUresult cuMemcpyDtoHAsync(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	(void)st;
	return cuMemcpyDtoH(d, s, n);
}

CUresult cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n)
{
	memset((void *)d, v, n);
	return CUDA_SUCCESS;
}

static int module_tag;

CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	(void)image;
	*m = (CUmodule)&module_tag;
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m)
{
	(void)m;
	return CUDA_SUCCESS;
}

/* Every name resolves (to a function that is never run). */
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	(void)m, (void)name;
	*f = (CUfunction)&module_tag;
	return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
	(void)f;
	*v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK ? 1024 : 0;
	return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
	(void)f, (void)a, (void)v;
	return CUDA_SUCCESS;
}

/* One block of up to 1024 threads an SM (the fake GPU has one SM), so a persistent plan compiled with --sms 1
** runs its launch sequence here. */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t dsm)
{
	(void)f, (void)dsm;
	*n = block > 0 && block <= 1024;
	return CUDA_SUCCESS;
}

CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, CUstream st, void **args, void **extra)
{
	(void)f, (void)shm, (void)st, (void)args, (void)extra;
	return gx && gy && gz && bx && by && bz && bx * by * bz <= 1024 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static int stream_tag, graph_tag;

CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	(void)flags;
	*s = (CUstream)&stream_tag;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

static _Thread_local int capturing, captured_nccl, nccl_graphs;

/* Called by the fake NCCL for every collective enqueued on this thread. */
void fakecuda_collective(void)
{
	captured_nccl |= capturing;
}

/* Graphs of this thread that captured NCCL calls and are not destroyed yet. */
int fakecuda_nccl_graphs(void)
{
	return nccl_graphs;
}

CUresult cuStreamBeginCapture(CUstream s, CUstreamCaptureMode mode)
{
	(void)s, (void)mode;
	capturing = 1, captured_nccl = 0;
	return CUDA_SUCCESS;
}

/* A graph that holds NCCL calls gets its own handle (freed by cuGraphDestroy); others share graph_tag. */
CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	(void)s;
	capturing = 0;
	if (captured_nccl) {
		*g = (CUgraph)malloc(16);
		if (!*g)
			return CUDA_ERROR_OUT_OF_MEMORY;
		nccl_graphs++;
	} else
		*g = (CUgraph)&graph_tag;
	return CUDA_SUCCESS;
}

CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	(void)g, (void)flags;
	*e = (CUgraphExec)&graph_tag;
	return CUDA_SUCCESS;
}

CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	(void)e, (void)s;
	return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec e)
{
	(void)e;
	return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph g)
{
	if (g != (CUgraph)&graph_tag)
		free(g), nccl_graphs--;
	return CUDA_SUCCESS;
}

/* FAKECUDA_NO_PEER=1: no pair of GPUs has peer access. */
CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b)
{
	const char *s = getenv("FAKECUDA_NO_PEER");
	*can = a != b && !(s && *s == '1');
	return CUDA_SUCCESS;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
	(void)peer, (void)flags;
	return CUDA_SUCCESS;
}

/* Events (glmrun --profile / --bench): created and recorded, timing nothing. */
CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	static int dummy;
	(void)flags;
	*e = (CUevent)&dummy;
	return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

CUresult cuEventRecord(CUevent e, CUstream s)
{
	(void)e, (void)s;
	return CUDA_SUCCESS;
}

CUresult cuEventRecordWithFlags(CUevent e, CUstream s, unsigned flags)
{
	(void)e, (void)s, (void)flags;
	return CUDA_SUCCESS;
}

CUresult cuEventSynchronize(CUevent e)
{
	(void)e;
	return CUDA_SUCCESS;
}

CUresult cuEventElapsedTime_v2(float *ms, CUevent a, CUevent b)
{
	(void)a, (void)b;
	*ms = 0;
	return CUDA_SUCCESS;
}

/* NVRTC 13 opens libcuda.so.1 while it compiles (glmrun's persistent kernel) and asks for this private
** table; without the symbol it calls a null pointer. "Not supported" makes it go on without the driver. */
CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	(void)id;
	*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
