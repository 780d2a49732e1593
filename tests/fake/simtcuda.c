/*
** tests/fake/simtcuda.c — a test double of the CUDA driver that RUNS the plan's kernels on the CPU, built as
** build/simtcuda/libcuda.so.1. Unlike tests/fake/cuda.c (which runs nothing), glmrun --device cuda on it
** computes real logits through its whole GPU path (runtime/exec/cuda.c: buffers, the launch list, graph
** capture and replay, the sampler), so tests/simt_gpu.sh can compare them with --device cpu on a machine
** without a GPU.
**
** The module image (NVRTC's cubin) is ignored: cuModuleLoadData opens the shared object named by
** GLM_SIMT_SO, the plan's source built for tests/simt by tests/tools/simtsrc, and a kernel NAME is its
** NAME_simt adaptor, which runs the grid as fibers (block after block, one OS thread). One device; "device"
** memory is host memory, filled with 0xff bytes (NaN as float and bf16) when allocated, so a kernel that
** reads what nothing wrote shows in the logits; a kernel's dynamic shared memory is poisoned the same way.
** A stream capture records kernel launches (their parameter values copied, as the real driver does) and
** asynchronous copies (their pointers: the bytes are read at replay); a graph launch replays them in order.
** As the real driver does for a thread-local capture, a synchronous copy or memset during one is an error,
** and a launch asking for more dynamic shared memory than cuFuncSetAttribute allowed fails.
** No cuLaunchKernelEx (glmrun then launches without PDL), no peer access.
**
** The persistent decode kernel (glmrun --decode persistent) is a second module: an image whose ELF symbols
** name glm_persist loads the shared object GLM_SIMT_PSO (simtsrc --persist). Blocks still run one after
** another, except glm_persist's, whose adaptor keeps every worker alive together (simt_launch_concurrent:
** workers wait on each other's counters as on a GPU). The occupancy query answers as an H100 SM would for the threads and
** dynamic shared memory asked (registers not counted), and the GPU has 132 SMs.
*/
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A kernel: the adaptor tests/tools/simtsrc wrote for it, its parameter sizes, its shared memory limit. */
typedef struct {
	void (*run)(const unsigned *grid, unsigned block, void *dsm, void **params);
	const int *argsz;
	const int *status;           /* glm_persist's: nonzero after a failed concurrent launch (simtsrc --persist) */
	int dsm_max;
} ScFn;

/* One captured operation: a launch (fn set; args holds its parameter values) or an asynchronous copy. */
typedef struct {
	ScFn *fn;
	unsigned grid[3], block, shm;
	unsigned char *args;
	void *dst;
	const void *src;
	size_t n;
} ScOp;

typedef struct {
	ScOp *op;
	int n, cap;
} ScGraph;

static void *sc_so, *sc_pso;
static ScGraph *sc_capture; /* the graph being captured, or NULL */

CUresult cuInit(unsigned flags)
{
	(void)flags;
	return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_SUCCESS ? "no error" : "simt driver error (tests/fake/simtcuda.c)";
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = 1;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int i)
{
	if (i != 0)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = 0;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	(void)d;
	snprintf(name, (size_t)len, "simt CPU (tests/fake/simtcuda.c)");
	return CUDA_SUCCESS;
}

/* An H200's compute capability and shared memory; 1 for anything else asked. */
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	*v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
	     : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
	     : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? 232448
	     : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT             ? 132
	                                                               : 1;
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	*c = (CUcontext)(intptr_t)(d + 1);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext c)
{
	(void)c;
	return CUDA_SUCCESS;
}

CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total)
{
	*free_b = (size_t)64 << 30, *total = (size_t)80 << 30;
	return CUDA_SUCCESS;
}

/* Poisoned (0xff bytes): what no kernel or copy wrote reads as NaN. */
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n)
{
	size_t r = (n + 255) / 256 * 256;
	void *m = aligned_alloc(256, r ? r : 256);
	if (!m)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memset(m, 0xff, r);
	*p = (CUdeviceptr)m;
	return CUDA_SUCCESS;
}

CUresult cuMemFree_v2(CUdeviceptr p)
{
	free((void *)p);
	return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void **p, size_t n)
{
	return (*p = malloc(n ? n : 1)) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

CUresult cuMemFreeHost(void *p)
{
	free(p);
	return CUDA_SUCCESS;
}

/* Synchronous calls are not allowed in a thread-local capture (the real driver invalidates it). */
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n)
{
	if (sc_capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	memcpy((void *)d, s, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
	if (sc_capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	memcpy(d, (const void *)s, n);
	return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	if (sc_capture)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	memset((void *)d, v, n);
	return CUDA_SUCCESS;
}

/* The next operation slot of the graph being captured. */
static ScOp *sc_record(void)
{
	ScGraph *g = sc_capture;
	if (g->n == g->cap) {
		int cap = g->cap ? 2 * g->cap : 64;
		ScOp *op = realloc(g->op, sizeof *op * (size_t)cap);
		if (!op)
			return NULL;
		g->op = op, g->cap = cap;
	}
	ScOp *o = &g->op[g->n++];
	memset(o, 0, sizeof *o);
	return o;
}

/* A copy now, or recorded (pointers only: a replay reads the source as it is then). */
static CUresult sc_copy(void *d, const void *s, size_t n)
{
	if (!sc_capture) {
		memcpy(d, s, n);
		return CUDA_SUCCESS;
	}
	ScOp *o = sc_record();
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->dst = d, o->src = s, o->n = n;
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	(void)st;
	return sc_copy((void *)d, s, n);
}

CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	(void)st;
	return sc_copy(d, (const void *)s, n);
}

/* Whether an NVRTC cubin (a 64-bit ELF image, its section headers last) names glm_persist. */
static int sc_is_persist(const void *image)
{
	const Elf64_Ehdr *eh = image;
	if (!image || memcmp(eh->e_ident, ELFMAG, SELFMAG))
		return 0;
	size_t n = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	return memmem(image, n, "glm_persist", 11) != NULL;
}

/* The plan's kernels: the shared object GLM_SIMT_SO names, or GLM_SIMT_PSO for the persistent kernel's
** program (the image is NVRTC's cubin, only looked at for that). */
CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	int pers = sc_is_persist(image);
	const char *env = pers ? "GLM_SIMT_PSO" : "GLM_SIMT_SO", *so = getenv(env);
	void **h = pers ? &sc_pso : &sc_so;
	if (!so) {
		fprintf(stderr, "simtcuda: %s is not set (the plan's %s built by tests/tools/simtsrc%s)\n", env,
		        pers ? "persistent kernel" : "kernels", pers ? " --persist" : "");
		return CUDA_ERROR_INVALID_IMAGE;
	}
	if (!*h && !(*h = dlopen(so, RTLD_NOW | RTLD_LOCAL))) {
		fprintf(stderr, "simtcuda: %s\n", dlerror());
		return CUDA_ERROR_INVALID_IMAGE;
	}
	*m = (CUmodule)*h;
	return CUDA_SUCCESS;
}

/* Workers an SM holds: an H100's 2048 threads, 32 blocks and 228 KiB of shared memory (registers not
** counted: the CPU has none to run out of). */
CUresult cuOccupancyMaxActiveBlocksPerMultiprocessor(int *n, CUfunction f, int block, size_t dsm)
{
	(void)f;
	if (block < 1 || block > 1024)
		return CUDA_ERROR_INVALID_VALUE;
	int k = 2048 / block;
	k = k > 32 ? 32 : k;
	if (dsm && (size_t)233472 / dsm < (size_t)k)
		k = (int)((size_t)233472 / dsm);
	*n = k;
	return CUDA_SUCCESS;
}

CUresult cuModuleUnload(CUmodule m)
{
	(void)m;
	return CUDA_SUCCESS;
}

/* NAME is NAME_simt and its size table in the shared object; the handle lives as long as the process. */
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	char s[256];
	ScFn fn = {0};
	snprintf(s, sizeof s, "%s_simt", name);
	*(void **)&fn.run = dlsym((void *)m, s);
	snprintf(s, sizeof s, "%s_simt_argsz", name);
	fn.argsz = dlsym((void *)m, s);
	snprintf(s, sizeof s, "%s_simt_status", name);
	fn.status = dlsym((void *)m, s);
	if (!fn.run || !fn.argsz)
		return CUDA_ERROR_NOT_FOUND;
	ScFn *p = malloc(sizeof *p);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	*p = fn;
	*f = (CUfunction)p;
	return CUDA_SUCCESS;
}

CUresult cuFuncGetAttribute(int *v, CUfunction_attribute a, CUfunction f)
{
	*v = a == CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK            ? 1024
	     : a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES ? ((ScFn *)f)->dsm_max
	                                                            : 0;
	return CUDA_SUCCESS;
}

CUresult cuFuncSetAttribute(CUfunction f, CUfunction_attribute a, int v)
{
	if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
		((ScFn *)f)->dsm_max = v;
	return CUDA_SUCCESS;
}

/* Runs one launch: its dynamic shared memory poisoned, as the real one holds whatever was there. */
static CUresult sc_run(ScFn *fn, const unsigned *grid, unsigned block, unsigned shm, void **args)
{
	void *dsm = NULL;
	if (shm) {
		if (!(dsm = aligned_alloc(128, (shm + 127u) / 128u * 128u)))
			return CUDA_ERROR_OUT_OF_MEMORY;
		memset(dsm, 0xff, shm);
	}
	fn->run(grid, block, dsm, args);
	free(dsm);
	return fn->status && *fn->status ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}

/* Blocks are 1-D multiples of 32 threads (all glmc emits; tests/simt runs no other). */
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, CUstream st, void **args, void **extra)
{
	(void)st;
	ScFn *fn = (ScFn *)f;
	if (extra || !gx || !gy || !gz || by != 1 || bz != 1 || !bx || bx > 1024 || bx % 32 ||
	    (shm > 48u * 1024 && (int)shm > fn->dsm_max))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned grid[3] = {gx, gy, gz};
	if (!sc_capture)
		return sc_run(fn, grid, bx, shm, args);
	ScOp *o = sc_record();
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	size_t total = 0;
	int na = 0;
	while (fn->argsz[na])
		total += (size_t)fn->argsz[na++];
	if (!(o->args = malloc(total ? total : 1)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	for (int i = 0, at = 0; i < na; at += fn->argsz[i++])
		memcpy(o->args + at, args[i], (size_t)fn->argsz[i]);
	o->fn = fn, o->block = bx, o->shm = shm;
	memcpy(o->grid, grid, sizeof grid);
	return CUDA_SUCCESS;
}

static int stream_tag;

CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	(void)flags;
	*s = (CUstream)&stream_tag;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

CUresult cuStreamSynchronize(CUstream s)
{
	(void)s;
	return CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
	(void)s, (void)mode;
	if (sc_capture)
		return CUDA_ERROR_ILLEGAL_STATE;
	if (!(sc_capture = calloc(1, sizeof *sc_capture)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	(void)s;
	if (!sc_capture)
		return CUDA_ERROR_ILLEGAL_STATE;
	*g = (CUgraph)sc_capture;
	sc_capture = NULL;
	return CUDA_SUCCESS;
}

/* The executable graph is the captured one (glmrun destroys the exec before the graph). */
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	(void)flags;
	*e = (CUgraphExec)g;
	return CUDA_SUCCESS;
}

/* Replays the capture in order: each launch with its recorded parameter values. */
CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	(void)s;
	const ScGraph *g = (const ScGraph *)e;
	for (int i = 0; i < g->n; i++) {
		const ScOp *o = &g->op[i];
		if (!o->fn) {
			memcpy(o->dst, o->src, o->n);
			continue;
		}
		void *args[128];
		int na = 0;
		for (size_t at = 0; o->fn->argsz[na] && na < 128; at += (size_t)o->fn->argsz[na++])
			args[na] = o->args + at;
		CUresult r = sc_run(o->fn, o->grid, o->block, o->shm, args);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}

CUresult cuGraphExecDestroy(CUgraphExec e)
{
	(void)e;
	return CUDA_SUCCESS;
}

CUresult cuGraphDestroy(CUgraph g)
{
	ScGraph *p = (ScGraph *)g;
	for (int i = 0; i < p->n; i++)
		free(p->op[i].args);
	free(p->op);
	free(p);
	return CUDA_SUCCESS;
}

CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b)
{
	(void)a, (void)b;
	*can = 0;
	return CUDA_SUCCESS;
}

CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
	(void)peer, (void)flags;
	return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
}

/* Events (--profile, --bench): recorded, timing nothing. */
CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	(void)flags;
	*e = (CUevent)&stream_tag;
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

/* NVRTC 13 opens libcuda.so.1 while it compiles and asks for this private table; without it, it calls a
** null pointer. "Not supported" makes it go on without the driver (glmrun compiles the persistent kernel
** with the double loaded). */
CUresult cuGetExportTable(const void **table, const CUuuid *id)
{
	(void)id;
	*table = NULL;
	return CUDA_ERROR_NOT_SUPPORTED;
}
