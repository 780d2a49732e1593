/*
** tests/simt/simt.h — a CPU stand-in for the CUDA device environment, so that the warp-level kernel
** templates of ops/kernels.cuh and ops/fused.cuh can run against ops/ref.c on a machine without a GPU.
**
** Every CUDA thread of a block is a fiber (its own stack, switched to by simt.cc on one OS thread): the
** warp collectives (__shfl*_sync, __reduce_max_sync, __ballot_sync, __syncwarp) meet at a per-warp rendezvous of all 32
** lanes, __syncthreads at a block one, and a fiber that waits there hands the CPU to the next one. Blocks
** run one after the other, so __shared__ (mapped to a function-local static) is one block's shared memory.
** simt_launch_concurrent instead keeps every block's fibers alive together, for a persistent kernel whose
** blocks wait on each other: see the block of declarations at its end.
** The fibers are resumed in sweeps whose direction alternates, so a value read before the barrier that
** should have ordered it after another lane's write is read stale in one sweep or the other.
** This checks a kernel's logic and order of operations (its index arithmetic, tie rules, guards,
** collectives and rounding points, with glibc's exp where the GPU has its own); it cannot see timing,
** alignment faults, or the hardware's float intrinsics. A collective reached by only part of a warp
** (which the real kernels never do) is reported as a deadlock and aborts the test. A lane that spins on
** another lane's store with no collective in the loop would hang unless the loop calls simt_spin (below);
** the one-shot allreduce's flag waits call simt_peer_wait (below).
**
** Include this before ops/kernels.cuh and after every system header: it defines away `volatile` and
** `asm` (under GLM_SIMT the one-shot allreduce's flags are __atomic builtins instead).
*/
#pragma once
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <math.h>
#include <vector>

struct dim3 {
	unsigned x = 1, y = 1, z = 1;
};
extern dim3 threadIdx, blockIdx; /* the running fiber's (simt.cc swaps them) */
extern dim3 blockDim, gridDim;

struct uint4 {
	unsigned x, y, z, w;
};
struct uint2 {
	unsigned x, y;
};
struct float2 {
	float x, y;
};
struct float4 {
	float x, y, z, w;
};
static inline float4 make_float4(float a, float b, float c, float d)
{
	return float4{a, b, c, d};
}
static inline uint4 make_uint4(unsigned a, unsigned b, unsigned c, unsigned d)
{
	return uint4{a, b, c, d};
}

/* Hands the CPU to the next fiber of the launch (simt.cc); returns when the scheduler resumes this one. */
void simt_yield();
/* Records that a fiber moved on (arrived at or left a rendezvous): a sweep without any is a deadlock. */
extern int simt_progress;

/* A reusable barrier of n fibers: the last to arrive opens it, the others yield until it has opened. */
struct SimtBarrier {
	int n = 0, count = 0;
	unsigned gen = 0;
	void init(int k)
	{
		n = k;
		count = 0;
	}
	void wait()
	{
		unsigned g = gen;
		simt_progress = 1;
		if (++count == n) {
			count = 0;
			gen++;
			return;
		}
		while (g == gen)
			simt_yield();
	}
};

/* One warp's rendezvous and the 32 slots its lanes exchange values through. */
struct SimtWarp {
	SimtBarrier bar;
	uint64_t slot[32];
};
/* The running fiber's block: its warps (indexed by threadIdx.x / 32), its __syncthreads barrier and its
** 16 named barriers (simt_bar_sync). simt.cc points them at the block of the fiber it resumes. */
extern SimtWarp *simt_warps;
extern SimtBarrier *simt_block;
extern SimtBarrier *simt_named;

/* Each lane posts v, reads lane src(lane) once all have posted, and waits until all have read. */
template <typename T, typename S> static T simt_exchange(T v, S src)
{
	SimtWarp &w = simt_warps[threadIdx.x / 32];
	int lane = threadIdx.x & 31;
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	w.slot[lane] = b;
	w.bar.wait();
	uint64_t r = w.slot[src(lane) & 31];
	w.bar.wait();
	T o;
	memcpy(&o, &r, sizeof o);
	return o;
}
template <typename T> static T __shfl_xor_sync(unsigned, T v, int o)
{
	return simt_exchange(v, [o](int l) { return l ^ o; });
}
template <typename T> static T __shfl_sync(unsigned, T v, int s)
{
	return simt_exchange(v, [s](int) { return s; });
}
template <typename T> static T __shfl_up_sync(unsigned, T v, int o)
{
	return simt_exchange(v, [o](int l) { return l >= o ? l - o : l; });
}
static inline unsigned __reduce_max_sync(unsigned, unsigned v)
{
	SimtWarp &w = simt_warps[threadIdx.x / 32];
	w.slot[threadIdx.x & 31] = v;
	w.bar.wait();
	unsigned m = 0;
	for (int i = 0; i < 32; i++)
		m = (unsigned)w.slot[i] > m ? (unsigned)w.slot[i] : m;
	w.bar.wait();
	return m;
}
static inline unsigned __ballot_sync(unsigned, int pred)
{
	SimtWarp &w = simt_warps[threadIdx.x / 32];
	w.slot[threadIdx.x & 31] = pred != 0;
	w.bar.wait();
	unsigned b = 0;
	for (int i = 0; i < 32; i++)
		b |= (unsigned)(w.slot[i] != 0) << i;
	w.bar.wait();
	return b;
}
static inline int __ffs(unsigned x)
{
	return x ? __builtin_ctz(x) + 1 : 0;
}
/* The set bits of v. */
static inline int __popc(unsigned v)
{
	return __builtin_popcount(v);
}
static inline void __syncwarp(unsigned = 0xffffffffu)
{
	simt_warps[threadIdx.x / 32].bar.wait();
}
static inline void __syncthreads()
{
	simt_block->wait();
}
static inline float __uint_as_float(unsigned u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}
static inline unsigned __float_as_uint(float f)
{
	unsigned u;
	memcpy(&u, &f, 4);
	return u;
}
template <typename T> static T __ldg(const T *p)
{
	return *p;
}
template <typename T> static T __ldcg(const T *p)
{
	return *p;
}
static inline float __fmul_rn(float a, float b)
{
	return a * b;
}
static inline float __fadd_rn(float a, float b)
{
	return a + b;
}
static inline float __fsub_rn(float a, float b)
{
	return a - b;
}
/* Byte permute: result byte i is byte (s >> 4i) & 7 of the pair (y:x) (x bytes 0-3), or with bit 3 of
** that nibble set, that byte's sign bit replicated. */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s)
{
	uint64_t v = (uint64_t)y << 32 | x;
	unsigned r = 0;
	for (int i = 0; i < 4; i++) {
		unsigned n = (s >> (4 * i)) & 15u, b = (unsigned)(v >> (8 * (n & 7))) & 0xffu;
		if (n & 8)
			b = (b & 0x80u) ? 0xffu : 0u;
		r |= b << (8 * i);
	}
	return r;
}
/* The low word of (hi:lo) >> (n & 31). */
static inline unsigned __funnelshift_r(unsigned lo, unsigned hi, unsigned n)
{
	return (unsigned)((((uint64_t)hi << 32) | lo) >> (n & 31));
}
static inline int __clzll(long long v)
{
	return v ? __builtin_clzll((unsigned long long)v) : 64;
}
/* Round to the nearest integer, ties to even (the default rounding mode). */
static inline int __float2int_rn(float v)
{
	return (int)lrintf(v);
}
static inline float __fdiv_rn(float a, float b)
{
	return a / b;
}
static inline float __fsqrt_rn(float v)
{
	return sqrtf(v);
}
static inline void __threadfence() {}
static inline void __threadfence_system() {}
/* a kernel's contract broken: the emulated launch ends the test binary, as a trap ends a GPU launch */
static inline void __trap()
{
	fputs("simt: __trap() in a kernel\n", stderr);
	abort();
}
template <typename T> static T atomicAdd(T *p, T v)
{
	T o = *p; /* fibers switch only at a rendezvous: the read-modify-write is whole */
	*p += v;
	return o;
}

#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __shared__ static
#define __align__(n) __attribute__((aligned(n)))
#define __global__
#define asm(...) ((void)0)
#define volatile
#define __CUDA_ARCH__ 900
#define GLM_SIMT 1 /* kernels.cuh: PTX-only statements become no-ops */

/* Runs f as every thread of grid g with blocks of b.x threads (a multiple of 32), block by block. */
void simt_launch(dim3 g, dim3 b, const std::function<void()> &f);

/*
** Concurrent blocks, for a persistent kernel whose blocks wait on counters other blocks publish (issue 47).
** simt_launch_concurrent runs f as every thread of the grid with all blocks' fibers alive together
** (grid·block at most SIMT_MAX_FIBERS; block a multiple of 32), each sweep resuming every live fiber;
** warp collectives and __syncthreads stay per warp and per block. It returns 0, or -1 after a one-line
** message on stderr for a bad geometry or a deadlock (the fibers left are abandoned: the next launch
** starts afresh). On one OS thread a fiber runs alone until it yields, so plain loads, __atomic builtins
** and atomicAdd on the counters need no fence (the switch is an opaque call: memory is reloaded after it).
**
** __shared__ is still one static for all blocks (and a launch's dynamic shared memory one buffer), so
** blocks may interleave only outside the code that uses it: thread 0 of a block calls simt_block_enter()
** before the block's first shared-memory write (it waits, spinning, until no other block holds the
** section), the block synchronises, does its shared-memory work, synchronises again after the last read,
** and thread 0 calls simt_block_leave(). A block must not wait on another block while it holds the
** section. Both are no-ops under simt_launch.
**
** A thread that waits on another block's store calls simt_spin() in its loop (__nanosleep is one): it lets
** the others run. Deadlock (both modes): progress is a fiber reaching a rendezvous, finishing, taking or
** leaving the section, or spinning with other registers or stack bytes than at its previous spin (it left
** a wait loop and moved on; a fiber stuck in one spins in the same state every time). A sweep without
** progress is a deadlock, SIMT_SPIN_SWEEPS in a row when some fiber spins (a store made in one sweep is
** seen by every spinner in the next); so is SIMT_STALL_SWEEPS in a row with no rendezvous, finish or
** section (a wait loop that counts its turns never spins in the same state). The waited-on data must be
** memory the kernel reaches through a pointer or an escaped global (the switch is an opaque call).
*/
enum { SIMT_MAX_FIBERS = 8192, SIMT_SPIN_SWEEPS = 2, SIMT_STALL_SWEEPS = 1 << 18 };
int simt_launch_concurrent(dim3 g, dim3 b, const std::function<void()> &f);
void simt_spin();
void simt_block_enter();
void simt_block_leave();
/* A wait on a store another OS thread makes: the one-shot allreduce's flags (ops/kernels.cuh p2p_get_flag),
** which a peer rank's launch raises when tests/fake/simtcuda.c runs glmrun's ranks, each on its own thread.
** Called before every look at the flag, it hands the CPU to this launch's other fibers (the flag's own
** block may not have raised it yet) and to the OS, and counts as progress: the deadlock check cannot see
** the other thread (glmrun's watchdog can). */
void simt_peer_wait();
/* bar.sync id, n: the first n threads of the block (a multiple of 32) meet at named barrier id (0..15). */
void simt_bar_sync(unsigned id, unsigned n);
static inline void __nanosleep(unsigned)
{
	simt_spin();
}
