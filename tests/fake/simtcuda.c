/*
** tests/fake/simtcuda.c — a test double of the CUDA driver that RUNS the plan's kernels on the CPU, built as
** build/simtcuda/libcuda.so.1. Unlike tests/fake/cuda.c (which runs nothing), glmrun --device cuda on it
** computes real logits through its whole GPU path (runtime/exec/cuda.c: buffers, the launch list, graph
** capture and replay, the sampler), so tests/simt_gpu.sh can compare them with --device cpu on a machine
** without a GPU.
**
** The module image (NVRTC's cubin) is read only for its kernels' static shared memory (its .nv.shared
** sections' sizes, as the real driver reports them; SIMTCUDA_SHARED_LESS=N reports them N bytes short, for
** the persistent pool's negative test) and whether it is the persistent kernel's:
** cuModuleLoadData opens the shared object named by GLM_SIMT_SO, the plan's source built for tests/simt by tests/tools/simtsrc, and a kernel NAME is its
** NAME_simt adaptor, which runs the grid as fibers (block after block, on the OS thread that launches it).
** "Device" memory is host memory, filled with 0xff bytes (NaN as float and bf16) when allocated, so a kernel
** that reads what nothing wrote shows in the logits; a kernel's dynamic shared memory is poisoned the same way.
** A stream capture records kernel launches (their parameter values copied, as the real driver does),
** asynchronous copies (their pointers: the bytes are read at replay) and host operations (simtcuda_host_op,
** below); a graph launch replays them in order. As the real driver does for a thread-local capture, a
** synchronous copy or memset during one is an error, and a launch asking for more dynamic shared memory than
** cuFuncSetAttribute allowed fails. No cuLaunchKernelEx (glmrun then launches without PDL).
**
** SIMTCUDA_NDEV GPUs (default 1, at most SC_MAXDEV), for glmrun's tensor-parallel path (tests/simt_tp.sh):
** one primary context each, current per OS thread (cuCtxSetCurrent), and peer access between every pair
** (all memory is one process's, so a kernel reads and writes a peer's buffers directly). A module, a
** function and a stream belong to the context current when they were made; a launch on another context's
** stream or of another context's function fails, as it does on the driver. glmrun's ranks launch at the same
** time from their own threads, and a simt shared object is not reentrant (its fibers, threadIdx and the
** statics standing in for __shared__ are globals), so device 0 opens GLM_SIMT_SO itself and device d > 0 a
** private copy of it (written to $TMPDIR and unlinked once open): every plan's kernel source is the same for
** all ranks (a rank learns its number from a kernel argument, KA_RANK), so one shared object serves them
** all. A copy shares nothing with the original only if the object has no STB_GNU_UNIQUE symbols (g++ makes
** template functions' static locals unique, which glibc binds process-wide whatever RTLD_LOCAL says): build
** it with -fno-gnu-unique; a copy of one without is refused.
**
** The interface to tests/fake/simtnccl.c (the NCCL double that really sums), which finds it by dlsym:
**   CUresult simtcuda_host_op(CUstream st, CUresult (*fn)(void *arg), const void *arg, size_t n)
** runs fn(arg) in stream order: at once (everything before it on the stream has run: launches are
** synchronous), or, while st is being captured, at each replay of that graph, with a copy of arg's n bytes
** taken now (as a launch's parameter values are). A non-success result fails the replay.
**
** The persistent decode kernel (glmrun --decode persistent) is a second module: an image whose ELF symbols
** name glm_persist loads the shared object GLM_SIMT_PSO (simtsrc --persist), per device as GLM_SIMT_SO is.
** Blocks still run one after another, except glm_persist's, whose adaptor keeps every worker alive together
** (simt_launch_concurrent: workers wait on each other's counters as on a GPU). The occupancy query answers as
** an H100 SM would for the threads and dynamic shared memory asked (registers not counted), and the GPU has
** 132 SMs.
*/
#include <cuda.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { SC_MAXDEV = 8 };

/* A kernel: the adaptor tests/tools/simtsrc wrote for it, its parameter sizes, its shared memory limit, and
** the device whose module it came from. */
typedef struct {
	void (*run)(const unsigned *grid, unsigned block, void *dsm, unsigned dsm_bytes, void **params);
	const int *argsz;
	const int *status;           /* glm_persist's: nonzero after a failed concurrent launch (simtsrc --persist) */
	int dsm_max;
	int dev;
	int shared;                  /* its static shared memory in the module's cubin (CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) */
} ScFn;

/* One captured operation: a launch (fn set; args holds its parameter values), a host operation (host set;
** args holds a copy of its argument) or an asynchronous copy. */
typedef struct {
	ScFn *fn;
	CUresult (*host)(void *);
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

/* A stream: its device and the graph being captured on it, or NULL. */
typedef struct {
	int dev;
	ScGraph *capture;
} ScStream;

static pthread_mutex_t sc_mu = PTHREAD_MUTEX_INITIALIZER; /* the modules and the peer table */
static void *sc_so[SC_MAXDEV], *sc_pso[SC_MAXDEV];
static unsigned char sc_peer[SC_MAXDEV][SC_MAXDEV]; /* [a][b]: a's context may reach b's memory */
static _Thread_local int sc_cur = -1;                 /* the device of this thread's current context, or -1 */
static _Thread_local int sc_tl_captures;             /* captures begun on this thread and not yet ended */
static int sc_event_tag;                          /* every event */

/* SIMTCUDA_NDEV, or 0 when it is not a count in 1..SC_MAXDEV (cuInit says so). */
static int sc_ndev(void)
{
	const char *s = getenv("SIMTCUDA_NDEV");
	if (!s || !*s)
		return 1;
	char *end;
	long v = strtol(s, &end, 10);
	return *end || v < 1 || v > SC_MAXDEV ? 0 : (int)v;
}

CUresult cuInit(unsigned flags)
{
	(void)flags;
	if (!sc_ndev()) {
		fprintf(stderr, "simtcuda: SIMTCUDA_NDEV=%s: not a GPU count in 1..%d\n", getenv("SIMTCUDA_NDEV"), SC_MAXDEV);
		return CUDA_ERROR_INVALID_VALUE;
	}
	return CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult r, const char **s)
{
	*s = r == CUDA_SUCCESS ? "no error" : "simt driver error (tests/fake/simtcuda.c)";
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *n)
{
	*n = sc_ndev();
	return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice *d, int i)
{
	if (i < 0 || i >= sc_ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	*d = i;
	return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char *name, int len, CUdevice d)
{
	snprintf(name, (size_t)len, "simt CPU %d (tests/fake/simtcuda.c)", (int)d);
	return CUDA_SUCCESS;
}

/* An H200's compute capability and shared memory; 1 for anything else asked. */
CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
	(void)d;
	*v = a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR   ? 9
	     : a == CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR ? 0
	     : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN ? 232448
	     : a == CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR ? 233472 /* an H100's */
	     : a == CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT             ? 132
	                                                               : 1;
	return CUDA_SUCCESS;
}

/* Device d's primary context is d + 1. */
CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	if (d < 0 || d >= sc_ndev())
		return CUDA_ERROR_INVALID_DEVICE;
	*c = (CUcontext)(intptr_t)(d + 1);
	return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d)
{
	(void)d;
	return CUDA_SUCCESS;
}

/* The device of context c, or -1 when c is none of them. */
static int sc_ctx_dev(CUcontext c)
{
	intptr_t d = (intptr_t)c - 1;
	return d >= 0 && d < sc_ndev() ? (int)d : -1;
}

/* Per OS thread, as the driver's current context is. */
CUresult cuCtxSetCurrent(CUcontext c)
{
	if (c && sc_ctx_dev(c) < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	sc_cur = c ? sc_ctx_dev(c) : -1;
	return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext *c)
{
	*c = sc_cur < 0 ? NULL : (CUcontext)(intptr_t)(sc_cur + 1);
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
	if (sc_tl_captures)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	memcpy((void *)d, s, n);
	return CUDA_SUCCESS;
}

CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)
{
	if (sc_tl_captures)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	memcpy(d, (const void *)s, n);
	return CUDA_SUCCESS;
}

CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	if (sc_tl_captures)
		return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
	memset((void *)d, v, n);
	return CUDA_SUCCESS;
}

/* The graph being captured on st, or NULL (also for the legacy stream, NULL, which glmrun never uses). */
static ScGraph *sc_capturing(CUstream st)
{
	return st ? ((ScStream *)st)->capture : NULL;
}

/* The next operation slot of graph g. */
static ScOp *sc_record(ScGraph *g)
{
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
static CUresult sc_copy(void *d, const void *s, size_t n, CUstream st)
{
	ScGraph *g = sc_capturing(st);
	if (!g) {
		memcpy(d, s, n);
		return CUDA_SUCCESS;
	}
	ScOp *o = sc_record(g);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	o->dst = d, o->src = s, o->n = n;
	return CUDA_SUCCESS;
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream st)
{
	return sc_copy((void *)d, s, n, st);
}

CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream st)
{
	return sc_copy(d, (const void *)s, n, st);
}

/* The NCCL double's way onto a stream (see the top of this file): fn(arg) now, or recorded with a copy of
** arg's n bytes for each replay of the graph being captured on st. */
CUresult simtcuda_host_op(CUstream st, CUresult (*fn)(void *arg), const void *arg, size_t n)
{
	ScGraph *g = sc_capturing(st);
	if (!g)
		return fn((void *)arg);
	ScOp *o = sc_record(g);
	if (!o)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (!(o->args = malloc(n ? n : 1))) {
		g->n--;
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(o->args, arg, n);
	o->host = fn;
	return CUDA_SUCCESS;
}

/* Kernel NAME's static shared memory in an NVRTC cubin: the size of its section .nv.shared.NAME less the
** 1 KiB an sm_90 block has reserved (counted in the section, not in what the driver reports), 0 when it has
** none or the image is not a 64-bit ELF file; so that glmrun sizes the persistent kernel's lanes
** (runtime/exec/cuda.c persist_module) from the driver's figures here. */
static int sc_shared_size(const void *image, const char *name)
{
	const Elf64_Ehdr *eh = image;
	if (!image || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shstrndx >= eh->e_shnum)
		return 0;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)((const char *)image + eh->e_shoff);
	const char *names = (const char *)image + sh[eh->e_shstrndx].sh_offset;
	char want[300];
	snprintf(want, sizeof want, ".nv.shared.%s", name);
	for (int i = 0; i < eh->e_shnum; i++)
		if (!strcmp(names + sh[i].sh_name, want))
			return sh[i].sh_size > 1024 ? (int)sh[i].sh_size - 1024 : 0;
	return 0;
}

/* A copy of the cubin each module was loaded from (glmrun may free its own after loading), [persistent][device]. */
static void *sc_image[2][SC_MAXDEV];

/* A copy of an NVRTC cubin (its section headers last), or NULL when it is not a 64-bit ELF image. */
static void *sc_image_copy(const void *image)
{
	const Elf64_Ehdr *eh = image;
	if (!image || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64)
		return NULL;
	size_t n = eh->e_shoff + (size_t)eh->e_shnum * eh->e_shentsize;
	void *c = malloc(n);
	return c ? memcpy(c, image, n) : NULL;
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

/* The number of STB_GNU_UNIQUE symbols in the dynamic symbol table of the ELF image m (n bytes), or -1 when
** it is not a well-formed 64-bit ELF file: those symbols would be shared between a shared object and its
** copy (glibc binds them process-wide), so a copy of an object with any is no private copy. */
static int sc_unique_syms(const unsigned char *m, size_t n)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
	if (n < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > n || (n - eh->e_shoff) / sizeof(Elf64_Shdr) < eh->e_shnum)
		return -1;
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(m + eh->e_shoff);
	int k = 0;
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_type != SHT_DYNSYM)
			continue;
		if (sh[i].sh_offset > n || sh[i].sh_size > n - sh[i].sh_offset)
			return -1;
		const Elf64_Sym *y = (const Elf64_Sym *)(m + sh[i].sh_offset);
		for (size_t j = 0; j < sh[i].sh_size / sizeof *y; j++)
			k += ELF64_ST_BIND(y[j].st_info) == STB_GNU_UNIQUE;
	}
	return k;
}

/* The whole file at path (malloc'd, *n bytes), or NULL after a line on stderr. */
static unsigned char *sc_read(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	unsigned char *m = NULL;
	long sz = -1;
	if (f && !fseek(f, 0, SEEK_END) && (sz = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) && (m = malloc((size_t)sz)) &&
	    fread(m, 1, (size_t)sz, f) == (size_t)sz) {
		fclose(f);
		*n = (size_t)sz;
		return m;
	}
	fprintf(stderr, "simtcuda: cannot read %s\n", path);
	free(m);
	if (f)
		fclose(f);
	return NULL;
}

/* Device dev's own instance of the shared object at path: a copy in $TMPDIR (unlinked once open), since
** dlopen of the same file again gives back the instance already open; see the top of this file. */
static void *sc_open_copy(const char *path, int dev)
{
	size_t n = 0;
	unsigned char *m = sc_read(path, &n);
	if (!m)
		return NULL;
	int u = sc_unique_syms(m, n);
	if (u != 0) {
		fprintf(stderr, "simtcuda: %s: %s; GPU %d needs its own copy of it (build it with g++ -fno-gnu-unique)\n",
		        path, u < 0 ? "not a 64-bit ELF shared object" : "has STB_GNU_UNIQUE symbols, shared by every copy",
		        dev);
		free(m);
		return NULL;
	}
	const char *dir = getenv("TMPDIR");
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s/simtcuda-gpu%d-XXXXXX", dir && *dir ? dir : "/tmp", dev);
	int fd = mkstemp(tmp);
	size_t done = 0;
	while (fd >= 0 && done < n) {
		ssize_t w = write(fd, m + done, n - done);
		if (w <= 0)
			break;
		done += (size_t)w;
	}
	free(m);
	if (fd < 0 || close(fd) || done < n) {
		fprintf(stderr, "simtcuda: cannot write a copy of %s for GPU %d in %s\n", path, dev, tmp);
		if (fd >= 0)
			unlink(tmp);
		return NULL;
	}
	void *h = dlopen(tmp, RTLD_NOW | RTLD_LOCAL);
	if (!h)
		fprintf(stderr, "simtcuda: %s\n", dlerror());
	unlink(tmp);
	return h;
}

/* The plan's kernels for the current context's device: the shared object GLM_SIMT_SO names, or GLM_SIMT_PSO
** for the persistent kernel's program (the image is NVRTC's cubin, only looked at for that). */
CUresult cuModuleLoadData(CUmodule *m, const void *image)
{
	int pers = sc_is_persist(image), dev = sc_cur;
	const char *env = pers ? "GLM_SIMT_PSO" : "GLM_SIMT_SO", *so = getenv(env);
	if (dev < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (!so) {
		fprintf(stderr, "simtcuda: %s is not set (the plan's %s built by tests/tools/simtsrc%s)\n", env,
		        pers ? "persistent kernel" : "kernels", pers ? " --persist" : "");
		return CUDA_ERROR_INVALID_IMAGE;
	}
	pthread_mutex_lock(&sc_mu);
	void **h = pers ? &sc_pso[dev] : &sc_so[dev];
	if (!*h && dev == 0 && !(*h = dlopen(so, RTLD_NOW | RTLD_LOCAL)))
		fprintf(stderr, "simtcuda: %s\n", dlerror());
	if (!*h && dev > 0)
		*h = sc_open_copy(so, dev);
	void *got = *h;
	free(sc_image[pers][dev]);
	sc_image[pers][dev] = sc_image_copy(image);
	pthread_mutex_unlock(&sc_mu);
	if (!got)
		return CUDA_ERROR_INVALID_IMAGE;
	*m = (CUmodule)got;
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

/* NAME is NAME_simt and its size table in the shared object; the handle lives as long as the process. The
** function belongs to the current context's device (a module is only ever that device's instance). */
CUresult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	char s[256];
	ScFn fn = {.dev = sc_cur};
	if (sc_cur < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	snprintf(s, sizeof s, "%s_simt", name);
	*(void **)&fn.run = dlsym((void *)m, s);
	snprintf(s, sizeof s, "%s_simt_argsz", name);
	fn.argsz = dlsym((void *)m, s);
	snprintf(s, sizeof s, "%s_simt_status", name);
	fn.status = dlsym((void *)m, s);
	if (!fn.run || !fn.argsz)
		return CUDA_ERROR_NOT_FOUND;
	fn.shared = sc_shared_size(sc_image[(void *)m == sc_pso[sc_cur]][sc_cur], name);
	/* SIMTCUDA_SHARED_LESS=N: the kernels' static shared memory reported N bytes short, so that glmrun sizes the
	** persistent kernel's lane pools too small and a test sees the pool's bound trap (tests/simt_persist.sh) */
	const char *less = getenv("SIMTCUDA_SHARED_LESS");
	if (less && (void *)m != sc_pso[sc_cur])
		fn.shared = fn.shared > atoi(less) ? fn.shared - atoi(less) : 0;
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
	     : a == CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES             ? ((ScFn *)f)->shared
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
	fn->run(grid, block, dsm, shm, args);
	free(dsm);
	return fn->status && *fn->status ? CUDA_ERROR_LAUNCH_FAILED : CUDA_SUCCESS;
}

/* Blocks are 1-D multiples of 32 threads (all glmc emits; tests/simt runs no other). The function and the
** stream must be the current context's, as the driver requires. */
CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shm, CUstream st, void **args, void **extra)
{
	ScFn *fn = (ScFn *)f;
	if (fn->dev != sc_cur || (st && ((ScStream *)st)->dev != sc_cur))
		return CUDA_ERROR_INVALID_HANDLE;
	if (extra || !gx || !gy || !gz || by != 1 || bz != 1 || !bx || bx > 1024 || bx % 32 ||
	    (shm > 48u * 1024 && (int)shm > fn->dsm_max))
		return CUDA_ERROR_INVALID_VALUE;
	unsigned grid[3] = {gx, gy, gz};
	ScGraph *g = sc_capturing(st);
	if (!g)
		return sc_run(fn, grid, bx, shm, args);
	ScOp *o = sc_record(g);
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

/* A stream of the current context. */
CUresult cuStreamCreate(CUstream *s, unsigned flags)
{
	(void)flags;
	if (sc_cur < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	ScStream *p = calloc(1, sizeof *p);
	if (!p)
		return CUDA_ERROR_OUT_OF_MEMORY;
	p->dev = sc_cur;
	*s = (CUstream)p;
	return CUDA_SUCCESS;
}

CUresult cuStreamDestroy_v2(CUstream s)
{
	free(s);
	return CUDA_SUCCESS;
}

/* Nothing is ever pending: every operation ran when it was issued or replayed. */
CUresult cuStreamSynchronize(CUstream s)
{
	return s && ((ScStream *)s)->capture ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode)
{
	(void)mode;
	ScStream *p = (ScStream *)s;
	if (!p || p->capture)
		return CUDA_ERROR_ILLEGAL_STATE;
	if (!(p->capture = calloc(1, sizeof *p->capture)))
		return CUDA_ERROR_OUT_OF_MEMORY;
	sc_tl_captures++;
	return CUDA_SUCCESS;
}

CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
	ScStream *p = (ScStream *)s;
	if (!p || !p->capture)
		return CUDA_ERROR_ILLEGAL_STATE;
	*g = (CUgraph)p->capture;
	p->capture = NULL;
	sc_tl_captures--;
	return CUDA_SUCCESS;
}

/* The executable graph is the captured one (glmrun destroys the exec before the graph). */
CUresult cuGraphInstantiateWithFlags(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	(void)flags;
	*e = (CUgraphExec)g;
	return CUDA_SUCCESS;
}

/* Replays the capture in order: each launch with its recorded parameter values, each host operation with
** its recorded argument. */
CUresult cuGraphLaunch(CUgraphExec e, CUstream s)
{
	const ScGraph *g = (const ScGraph *)e;
	if (s && ((ScStream *)s)->dev != sc_cur)
		return CUDA_ERROR_INVALID_HANDLE;
	for (int i = 0; i < g->n; i++) {
		const ScOp *o = &g->op[i];
		CUresult r = CUDA_SUCCESS;
		if (o->host)
			r = o->host(o->args);
		else if (!o->fn)
			memcpy(o->dst, o->src, o->n);
		else if (o->fn->dev != sc_cur)
			r = CUDA_ERROR_INVALID_HANDLE;
		else {
			void *args[128];
			int na = 0;
			for (size_t at = 0; o->fn->argsz[na] && na < 128; at += (size_t)o->fn->argsz[na++])
				args[na] = o->args + at;
			r = sc_run(o->fn, o->grid, o->block, o->shm, args);
		}
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

/* Every pair of distinct GPUs: all their memory is this process's. */
CUresult cuDeviceCanAccessPeer(int *can, CUdevice a, CUdevice b)
{
	int n = sc_ndev();
	if (a < 0 || a >= n || b < 0 || b >= n)
		return CUDA_ERROR_INVALID_DEVICE;
	*can = a != b;
	return CUDA_SUCCESS;
}

/* The current context reaches peer's memory from now on; asked twice, the driver's "already enabled". */
CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned flags)
{
	int b = sc_ctx_dev(peer), a = sc_cur;
	if (flags)
		return CUDA_ERROR_INVALID_VALUE;
	if (a < 0)
		return CUDA_ERROR_INVALID_CONTEXT;
	if (b < 0 || b == a)
		return CUDA_ERROR_INVALID_DEVICE;
	pthread_mutex_lock(&sc_mu);
	CUresult r = sc_peer[a][b] ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED : CUDA_SUCCESS;
	sc_peer[a][b] = 1;
	pthread_mutex_unlock(&sc_mu);
	return r;
}

/* Events (--profile, --bench): recorded, timing nothing. */
CUresult cuEventCreate(CUevent *e, unsigned flags)
{
	(void)flags;
	*e = (CUevent)&sc_event_tag;
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
