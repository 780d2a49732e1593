/*
** ops/persist.cuh — the persistent decode kernel's worker loop (issue 47). Empty unless GLM_PERSIST is
** defined: glmc's persistent program (emit_cuda.c emit_cuda_persist) defines it at its top, and this file
** comes right after gemv_shape.h and before every kernel template, so that:
**
** - the worker loop below is compiled with the real threadIdx, blockIdx, gridDim, blockDim and __syncthreads;
** - every template after it sees a virtual block instead. A body of fewer threads than the worker block (a
**   128-thread GEMV in a 512-thread worker) runs in lanes, several of the task's blocks at once, lane k on
**   threads [k·block, (k + 1)·block): threadIdx becomes the index within the lane, blockIdx the lane's
**   block, gridDim and blockDim the launch's (the shared glm_pv_* values the loop sets), and __syncthreads
**   the lane's named barrier (bar.sync 1 + k) over its threads only. The templates' code is unchanged.
**   A body may return early only uniformly per block (every template does: see issue 47's audit in
**   emit_cuda.c), since a thread that left the body does not arrive at its named barrier;
** - the templates' shared arrays (GLM_SH, kernels.cuh) become views of dynamic shared memory, each lane's
**   own part, reused by every body from its start: glmrun sizes the lanes and the kernel's dynamic shared
**   memory from the bodies' own and their arrays' (GlmPLaunch);
** - __ldg becomes a plain load: the read-only path is only valid for data no block writes during the
**   kernel, and here one launch's outputs are the next one's inputs within the same kernel.
**
** A worker is one block; it runs its tasks (contiguous block ranges of one launch, Sched in glm.h) in order.
** Before a task its thread 0 waits until every launch the task's launch waits for has counted all its tasks
** done in this step (acquire loads), then the block synchronises; after the task the block synchronises and
** thread 0 publishes (fence, then an atomic add on the launch's counter). The counters and the epoch live
** across steps (a CUDA graph replays the kernel with the same arguments): in step e a launch of n tasks is
** done when its counter reached n·(e + 1), compared wrap-safely; the last worker to finish bumps the epoch.
**
** trace (glmrun --profile; nullptr otherwise): thread 0 writes, for task i of the table, trace[4i ..] = the
** time it began waiting, the time its waits were met (the body starts), the time its body ended, and the SM
** it ran on (glm_p_now: ns of %globaltimer, CLOCK_MONOTONIC under GLM_SIMT; %smid, 0 under GLM_SIMT).
*/
#pragma once
#ifdef GLM_PERSIST
#ifdef GLM_SIMT
#include <time.h>
#endif

/* A task as glmrun uploads it: SchedTask's layout (glm.h; `bytes` unused here). */
struct GlmPTask {
	int launch, blo, bhi;
	long long bytes;
};

/* Per launch of the plan, filled by glmrun for the step's T (64 bytes, 8-aligned). pre: the launch's first
** weight (nullptr: nothing to prefetch), pre_step: its bytes per block of the launch, so that a task of
** blocks [blo, bhi) asks L2 for the lines from pre + blo·pre_step on before it waits.
** Lanes: a body of fewer threads than the worker runs `lanes` of the task's blocks at once, lane k on
** threads [k·block, (k + 1)·block) with its own named barrier (1 + k), its own `own` bytes of dynamic
** shared memory (from the start of the kernel's) and its own `pool` bytes for the template's shared
** arrays (after all lanes' own memory), so that a 128-thread GEMV keeps a 512-thread worker busy. */
struct GlmPLaunch {
	long long arg;               /* byte offset of the launch's argument record in args */
	const unsigned char *pre;
	long long pre_step;
	unsigned grid[3];            /* its grid at T */
	unsigned block;              /* its threads (a multiple of 32, at most the worker's) */
	unsigned ntask;              /* Sched.ntask */
	int wait_lo, wait_hi;        /* the launches it waits for: wait[wait_lo .. wait_hi) */
	unsigned lanes;              /* blocks run at once, 1 .. GLM_P_LANES (0 counts as 1) */
	unsigned own, pool;          /* bytes a lane: its dynamic shared memory, its shared arrays (128-aligned;
	                             ** pool 0 with one lane: its arrays may use all of the kernel's after `own`) */
};
static_assert(sizeof(GlmPLaunch) == 64 && sizeof(GlmPTask) == 24, "the layouts glmrun writes");
#define GLM_P_LANES 8 /* named barriers 1 .. 8 of the 16 */

/* The step counter: epoch counts finished steps, done the workers finished in this one (zero at first);
** pre_max, set by glmrun (--l2-prefetch) and never changed: the bytes of a task's first weight, from the task's
** first block on, that the worker asks L2 for before it waits for the task's inputs (0: none). */
struct GlmPCtl {
	unsigned epoch, done, pre_max;
};

/* The body dispatcher the program defines after the templates: run block glm_pv_b of `launch`. */
__device__ void glm_persist_run(int launch, const unsigned char *arg, unsigned char *dsm);

/* The task's virtual blocks, one a lane (each set by the lane's first thread before each of its blocks), the
** launch's grid and block, and where the lanes' shared arrays start (tests/simt's dim3 on the CPU). */
#ifdef GLM_SIMT
typedef dim3 GlmPV;
#else
typedef uint3 GlmPV;
#endif
__shared__ GlmPV glm_pv_b[GLM_P_LANES], glm_pv_g, glm_pv_d;
__shared__ unsigned glm_pv_pool_at, glm_pv_pool;

/* The worker thread's own index, for the accessors below (threadIdx itself becomes the lane's). */
__device__ __forceinline__ unsigned glm_p_tid()
{
	return threadIdx.x;
}

/* The lane of this thread while a body runs. */
__device__ __forceinline__ unsigned glm_pv_lane()
{
	return glm_p_tid() / glm_pv_d.x;
}

/* threadIdx as the body sees it: its index within its lane. */
__device__ __forceinline__ GlmPV glm_pv_tid()
{
	GlmPV t;
	t.x = glm_p_tid() % glm_pv_d.x, t.y = 0, t.z = 0;
	return t;
}

/* The lane's named barrier (1 + lane) over its glm_pv_d.x threads. */
__device__ __forceinline__ void glm_pv_lane_sync(unsigned lane)
{
#ifdef GLM_SIMT /* a rendezvous of the lane's fibers only */
	simt_bar_sync(1 + lane, glm_pv_d.x);
#else
	asm volatile("bar.sync %0, %1;" ::"r"(1 + lane), "r"(glm_pv_d.x) : "memory");
#endif
}

/* An acquire load at GPU scope: what the publishing worker wrote before its release is visible after it. */
__device__ __forceinline__ unsigned glm_p_acquire(const unsigned *p)
{
#ifdef GLM_SIMT
	return *p; /* fibers switch only at a rendezvous */
#else
	unsigned v;
	asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
#endif
}

/* The trace's clock: GPU-wide ns (%globaltimer), or the host's monotonic clock on the CPU stand-in. */
__device__ __forceinline__ unsigned long long glm_p_now()
{
#ifdef GLM_SIMT
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
#else
	unsigned long long t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
#endif
}

/* The SM this worker runs on (0 on the CPU stand-in). */
__device__ __forceinline__ unsigned long long glm_p_smid()
{
#ifdef GLM_SIMT
	return 0;
#else
	unsigned s;
	asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
	return s;
#endif
}

/* Worker blockIdx.x's tasks task[lo[w] .. hi[w]): all of its list when the step is one launch of the kernel
** (with tensor parallelism, its collectives P2P tasks: kernels.cuh glm_p_allreduce), or one segment's part
** when glmrun runs the collectives through NCCL between launches, each segment's list after the last's on the
** stream (runtime/core/sched.c). The epoch is the step's in every
** segment; `close` marks the step's last launch, whose last worker out bumps it. */
__device__ __forceinline__ void glm_persist_loop(const GlmPTask *task, const int *lo, const int *hi,
                                                 const GlmPLaunch *lt, const int *wait, unsigned *count,
                                                 GlmPCtl *ctl, const unsigned char *args, unsigned char *dsm,
                                                 unsigned long long *trace, int close)
{
	__shared__ unsigned epoch;
	int w = blockIdx.x, tid = threadIdx.x;
#ifdef GLM_SIMT
	if (tid == 0)
		simt_block_enter();
#endif
	if (tid == 0)
		epoch = glm_p_acquire(&ctl->epoch);
	__syncthreads();
	unsigned e1 = epoch + 1;
#ifdef GLM_SIMT
	__syncthreads();
	if (tid == 0)
		simt_block_leave();
#else
	const long long pre_max = ctl->pre_max;
#endif
	for (int i = lo[w]; i < hi[w]; i++) {
		GlmPTask tk = task[i];
		const GlmPLaunch *L = lt + tk.launch;
		/* this task's first pre_max weight bytes towards L2 while it waits (weights never change: safe early),
		** a 128-byte line a thread at a time */
#ifndef GLM_SIMT
		if (L->pre && pre_max) {
			long long lo = (long long)tk.blo * L->pre_step, hi = (long long)tk.bhi * L->pre_step;
			hi = hi < lo + pre_max ? hi : lo + pre_max;
			for (long long off = lo + (long long)tid * 128; off < hi; off += (long long)blockDim.x * 128)
				asm volatile("prefetch.global.L2 [%0];" ::"l"(L->pre + off));
		}
#endif
		if (tid == 0 && trace)
			trace[4 * i] = glm_p_now();
		if (tid == 0)
			for (int j = L->wait_lo; j < L->wait_hi; j++) {
				int d = wait[j];
				unsigned target = lt[d].ntask * e1;
				while ((int)(glm_p_acquire(count + d) - target) < 0)
					__nanosleep(64);
			}
#ifdef GLM_SIMT
		if (tid == 0)
			simt_block_enter();
#endif
		__syncthreads();
		if (tid == 0 && trace)
			trace[4 * i + 1] = glm_p_now();
		unsigned gx = L->grid[0], gxy = gx * L->grid[1], nb = L->block, lanes = L->lanes ? L->lanes : 1;
		if (tid == 0) {
			glm_pv_g.x = L->grid[0], glm_pv_g.y = L->grid[1], glm_pv_g.z = L->grid[2];
			glm_pv_d.x = nb, glm_pv_d.y = 1, glm_pv_d.z = 1;
			glm_pv_pool_at = lanes * L->own, glm_pv_pool = L->pool;
		}
		__syncthreads();
		unsigned lane = (unsigned)tid / nb;
		if (lane < lanes) /* lane k runs blocks blo + k, blo + k + lanes, ... of the task */
			for (int b = tk.blo + (int)lane; b < tk.bhi; b += (int)lanes) {
				if ((unsigned)tid % nb == 0)
					glm_pv_b[lane].x = b % gx, glm_pv_b[lane].y = (b % gxy) / gx, glm_pv_b[lane].z = b / gxy;
				glm_pv_lane_sync(lane);
				glm_persist_run(tk.launch, args + L->arg, dsm + lane * L->own);
				glm_pv_lane_sync(lane); /* the body's shared memory free, its block index free for the next */
			}
		__syncthreads(); /* every lane's writes done */
		if (tid == 0) {
			if (trace)
				trace[4 * i + 2] = glm_p_now(), trace[4 * i + 3] = glm_p_smid();
#ifdef GLM_SIMT
			simt_block_leave();
#endif
			__threadfence();
			atomicAdd(count + tk.launch, 1u);
		}
	}
	if (tid == 0 && close) { /* the last worker out closes the step */
		__threadfence();
		if (atomicAdd(&ctl->done, 1u) == gridDim.x - 1) {
			ctl->done = 0;
			__threadfence();
			atomicAdd(&ctl->epoch, 1u);
		}
	}
}

/* A body's __syncthreads: its lane's named barrier. */
__device__ __forceinline__ void glm_pv_sync()
{
	glm_pv_lane_sync(glm_pv_lane());
}

/* __syncthreads_count / _or / _and over the body's threads (no template uses them today). */
__device__ __forceinline__ int glm_pv_sync_popc(int p)
{
#ifdef GLM_SIMT
	(void)p;
	__trap(); /* not emulated (no template uses it) */
	return 0;
#else
	int r;
	asm volatile("{ .reg .pred q; setp.ne.s32 q, %1, 0; bar.red.popc.u32 %0, %2, %3, q; }"
	             : "=r"(r) : "r"(p), "r"(1 + glm_pv_lane()), "r"(glm_pv_d.x) : "memory");
	return r;
#endif
}

/* The shared-array pool (GLM_SH in kernels.cuh): each lane's `pool` bytes of dynamic shared memory past all
** lanes' own (GlmPLaunch), 16-byte aligned places (128 for GLM_SH128_AFTER); an array past the lane's bytes
** (with one lane and pool 0, past the kernel's dynamic shared memory) traps. */
#if defined(GLM_SIMT) && !defined(GLM_SIMT_DSM) /* tests/simt's own programs: a static pool of this many bytes */
#ifndef GLM_SIMT_POOL
#define GLM_SIMT_POOL 262144
#endif
__shared__ __align__(128) unsigned char glm_psm[GLM_SIMT_POOL];
#endif
__device__ __forceinline__ unsigned char *glm_pool_at(const void *prev, unsigned prev_bytes, unsigned bytes,
                                                     unsigned align = 16)
{
#if defined(GLM_SIMT) && defined(GLM_SIMT_DSM) /* a plan's program on the driver double: the launch's, as here */
	unsigned char *glm_psm = glm_dsm;
	unsigned dyn = glm_dsm_bytes;
#elif defined(GLM_SIMT)
	unsigned dyn = GLM_SIMT_POOL;
#else
	extern __shared__ __align__(128) unsigned char glm_psm[];
	unsigned dyn;
	asm("mov.u32 %0, %%dynamic_smem_size;" : "=r"(dyn));
#endif
	unsigned base = glm_pv_pool_at + glm_pv_lane() * glm_pv_pool, end = glm_pv_pool ? base + glm_pv_pool : dyn;
	unsigned at = prev ? (unsigned)((const unsigned char *)prev - glm_psm) + prev_bytes : base;
	at = (at + align - 1) & ~(align - 1);
	if (at + bytes > end || end > dyn)
		__trap();
	return glm_psm + at;
}
#define GLM_SH(T, name, dims) T(&name) dims = *reinterpret_cast<T(*) dims>(glm_pool_at(nullptr, 0, sizeof(T dims)))
#define GLM_SH16(T, name, dims) GLM_SH(T, name, dims)
#define GLM_SH_AFTER(prev, T, name, dims) \
	T(&name) dims = *reinterpret_cast<T(*) dims>(glm_pool_at(&(prev), sizeof(prev), sizeof(T dims)))
#define GLM_SH16_AFTER(prev, T, name, dims) GLM_SH_AFTER(prev, T, name, dims)
#define GLM_SH128(T, name, dims) GLM_SH(T, name, dims) /* the pool's start is 128-byte aligned */
#define GLM_SH128_AFTER(prev, T, name, dims) \
	T(&name) dims = *reinterpret_cast<T(*) dims>(glm_pool_at(&(prev), sizeof(prev), sizeof(T dims), 128))

#define GLM_SH_LANE(T, name, dims) \
	__shared__ T name##_lanes[GLM_P_LANES] dims; \
	T(&name) dims = name##_lanes[glm_pv_lane()]
#define blockIdx glm_pv_b[glm_pv_lane()]
#define threadIdx glm_pv_tid()
#define gridDim glm_pv_g
#define blockDim glm_pv_d
#define __syncthreads() glm_pv_sync()
#define __syncthreads_count(p) glm_pv_sync_popc(p)
#define __syncthreads_or(p) (glm_pv_sync_popc(p) != 0)
#define __syncthreads_and(p) (glm_pv_sync_popc(p) == (int)glm_pv_d.x)
#define __ldg(p) (*(p))

#endif
