/*
** ops/kernels.cuh — CUDA kernel templates, one family per op. glmc embeds this file and, for every node
** of a plan, emits a small extern "C" __global__ wrapper that instantiates one template with the node's
** types and constants; NVRTC compiles the lot to a cubin. The file is self-contained (no #include, so
** NVRTC needs no header paths): bf16 and f16 are our own 16-bit structs with exact conversions.
**
** Conventions: all tensors are contiguous row-major; accumulation is in float; A is the activation type
** (float or bf16), W a stored weight type (float, bf16 or f16). Every template is a __device__ function
** that reads blockIdx/threadIdx itself; its comment gives the launch geometry the emitter must use.
** Integers that can exceed 2^31 (element counts) are long long.
**
** Block-wide reductions below assume blockDim.x is a multiple of 32 (every documented geometry is) and
** that every thread of the block reaches them (they contain __syncthreads).
*/
#pragma once

/* A kernel template's shared arrays: GLM_SH(type, name, [dims]) (GLM_SH16, GLM_SH128: so aligned) declares the
** first, GLM_SH_AFTER(prev, type, name, [dims]) each next one (empty dims: a scalar). Here they are plain
** static __shared__ declarations; in the persistent program (ops/persist.cuh, defined first) they are views
** of one pool from its start, prev's end giving the next one's place, so that the bodies of many templates
** in one kernel reuse the same bytes instead of adding up past ptxas's 48 KiB. Small helpers (block_sum's
** part[32]) and arrays of helpers called while their caller's arrays live stay static. */
#ifndef GLM_SH
#define GLM_SH(T, name, dims) __shared__ T name dims
#define GLM_SH16(T, name, dims) __shared__ __align__(16) T name dims
#define GLM_SH_AFTER(prev, T, name, dims) __shared__ T name dims
#define GLM_SH16_AFTER(prev, T, name, dims) __shared__ __align__(16) T name dims
#define GLM_SH128(T, name, dims) __shared__ __align__(128) T name dims
#define GLM_SH128_AFTER(prev, T, name, dims) __shared__ __align__(128) T name dims
#endif
/* A helper's small array (the block reductions): plain here; one a lane in the persistent program, whose lanes
** run blocks at once (persist.cuh). Templates with block-sized plain __shared__ arrays of their own (the decode
** attention's merge) run without lanes (runtime/core/sched.c sched_lanes_ok). */
#ifndef GLM_SH_LANE
#define GLM_SH_LANE(T, name, dims) __shared__ T name dims
#endif

struct bf16 { unsigned short x; };
struct f16 { unsigned short x; };

/* ---- conversions (exact widening; round-to-nearest-even narrowing, NaN stays NaN) ---- */

/* Identity, so templates can convert any element type uniformly. */
__device__ __forceinline__ float to_f(float v)
{
	return v;
}

/* bfloat16 is the top half of a float32. */
__device__ __forceinline__ float to_f(bf16 v)
{
	return __uint_as_float((unsigned)v.x << 16);
}

/* IEEE half to float, bit for bit as ref_f16_to_f32: subnormals are m·2^-24 (exact in float), inf and
** NaN keep sign and payload. Finite values take the hardware's exact widening, one cvt, which keeps f16
** GEMVs nearer the bandwidth than an integer form or a rescaling multiply (bench/NOTES.md entry 13,
** figures in entry 54). Inf and NaN are formed
** from the bits, so no payload depends on the hardware. */
__device__ __forceinline__ float to_f(f16 v)
{
	unsigned h = v.x;
	if ((h & 0x7c00u) == 0x7c00u)
		return __uint_as_float((h & 0x8000u) << 16 | 0x7f800000u | (h & 0x3ffu) << 13);
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x));
	return f;
#else
	unsigned sign = (h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
	if (e == 0)
		return __uint_as_float(__float_as_uint((float)m * 5.9604644775390625e-8f) | sign);
	return __uint_as_float(sign | (e + 112) << 23 | m << 13);
#endif
}

template <typename T> __device__ __forceinline__ T from_f(float v);   /* float, bf16, f16 */

template <> __device__ __forceinline__ float from_f<float>(float v)
{
	return v;
}

/* Round to nearest even on the low 16 bits (a carry into the exponent gives inf on overflow); NaN
** becomes a quiet NaN with its sign, as ref_f32_to_bf16. */
template <> __device__ __forceinline__ bf16 from_f<bf16>(float v)
{
	unsigned u = __float_as_uint(v);
	bf16 r;
	if ((u & 0x7fffffffu) > 0x7f800000u) {
		r.x = (unsigned short)(u >> 16 | 0x40u);
		return r;
	}
	u += 0x7fffu + ((u >> 16) & 1u);
	r.x = (unsigned short)(u >> 16);
	return r;
}

/* Float to IEEE half with round to nearest even, in integers only (so no float mode can change it), bit
** for bit as ref_f32_to_f16: |v| >= 65520 becomes inf; below 2^-14 the result is a subnormal, the
** 24-bit significand shifted to units of 2^-24 and rounded; NaN stays a quiet NaN. */
template <> __device__ __forceinline__ f16 from_f<f16>(float v)
{
	unsigned u = __float_as_uint(v), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u, h;
	if (a > 0x7f800000u) {
		h = 0x7e00u | ((a >> 13) & 0x3ffu);
	} else if (a >= 0x477ff000u) {
		h = 0x7c00u;
	} else if (a < 0x38800000u) {
		/* v = m·2^(e-150) = (m >> (126 - e)) units of 2^-24; a shift of 25 or more leaves < 1/2 unit */
		unsigned e = a >> 23, m = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
		if (sh >= 25) {
			h = 0;
		} else {
			unsigned rem = m & ((1u << sh) - 1), half = 1u << (sh - 1);
			h = m >> sh;
			if (rem > half || (rem == half && (h & 1u)))
				h++;
		}
	} else {
		unsigned rem = a & 0x1fffu;
		h = ((a >> 23) - 112) << 10 | ((a >> 13) & 0x3ffu);
		if (rem > 0x1000u || (rem == 0x1000u && (h & 1u)))
			h++;
	}
	f16 r;
	r.x = (unsigned short)(sign | h);
	return r;
}

/* ---- helpers: reductions and orderings shared by the kernels ---- */

/* -inf without <math.h>. */
__device__ __forceinline__ float neg_inf()
{
	return __uint_as_float(0xff800000u);
}

/* Sum and max over the 32 lanes of a warp (butterfly: every lane gets the result). */
__device__ __forceinline__ float warp_sum(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

__device__ __forceinline__ float warp_max(float v)
{
	for (int o = 16; o > 0; o >>= 1)
		v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
	return v;
}

/* Sums each of N values (N a power of two <= 32) over the 32 lanes of a warp in N-1 + N·(5 - log2 N)
** shuffles instead of N warp_sums' 5N: butterfly steps at or above N add all values, the ones below
** trade halves (a lane keeps the half its lane bit selects and sends the other). On return lane l holds
** in v[0] the warp's total of value l % N; the other entries are clobbered. Why: several dot products
** finished at once (k_mla_split's rows × heads) would otherwise spend more on shuffles than on FMAs. */
template <int N> __device__ __forceinline__ float warp_sum_n(float (&v)[N])
{
	int lane = threadIdx.x & 31;
	/* constant trip counts throughout, so that every index is static and v stays in registers */
#pragma unroll
	for (int k = 0; k < 5; k++) {
		const int o = 16 >> k;
		if (o >= N) {
#pragma unroll
			for (int i = 0; i < N; i++)
				v[i] += __shfl_xor_sync(0xffffffffu, v[i], o);
		} else {
			bool up = (lane & o) != 0;
#pragma unroll
			for (int i = 0; i < (N + 1) / 2; i++)
				if (i < o) {
					float send = up ? v[i] : v[i + o], keep = up ? v[i + o] : v[i];
					v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
				}
		}
	}
	return v[0];
}

/* Four consecutive weights as loaded (16 bytes of float, 8 of a 16-bit type) through the read-only cache,
** widened at use by unpack4: p must be aligned to four elements and not change while the kernel runs. Why:
** a kernel holding many rows in flight (the MLA query absorb) keeps 16-bit ones in half the registers. */
template <typename W> struct W4 {
	uint2 x;
};
template <> struct W4<float> {
	float4 x;
};

__device__ __forceinline__ void ldw4(const float *p, W4<float> &w)
{
	w.x = __ldg((const float4 *)p);
}

template <typename W> __device__ __forceinline__ void ldw4(const W *p, W4<W> &w)
{
	w.x = __ldg((const uint2 *)p);
}

__device__ __forceinline__ void unpack4(const W4<float> &w, float v[4])
{
	v[0] = w.x.x, v[1] = w.x.y, v[2] = w.x.z, v[3] = w.x.w;
}

__device__ __forceinline__ void unpack4(const W4<bf16> &w, float v[4])
{
	v[0] = __uint_as_float(w.x.x << 16), v[1] = __uint_as_float(w.x.x & 0xffff0000u);
	v[2] = __uint_as_float(w.x.y << 16), v[3] = __uint_as_float(w.x.y & 0xffff0000u);
}

__device__ __forceinline__ void unpack4(const W4<f16> &w, float v[4])
{
	f16 a, b, c, d;
	a.x = (unsigned short)(w.x.x & 0xffffu), b.x = (unsigned short)(w.x.x >> 16);
	c.x = (unsigned short)(w.x.y & 0xffffu), d.x = (unsigned short)(w.x.y >> 16);
	v[0] = to_f(a), v[1] = to_f(b), v[2] = to_f(c), v[3] = to_f(d);
}

/* Four consecutive elements as float from one load (ldw4 widened at once). Why: the bandwidth-bound MLA
** kernels read their weight and cache rows in vectors rather than 2-byte scalars. */
template <typename W> __device__ __forceinline__ void ld4(const W *p, float v[4])
{
	W4<W> w;
	ldw4(p, w);
	unpack4(w, v);
}

/* Block-wide sum; every thread gets the result. The leading __syncthreads keeps a previous call's
** readers of the scratch from racing with this call's writers, so calls can follow each other. */
__device__ __forceinline__ float block_sum(float v)
{
	GLM_SH_LANE(float, part, [32]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_sum(v);
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	return warp_sum(lane < nw ? part[lane] : 0.0f);
}

/* Block-wide max (NaN ignored, as fmaxf); every thread gets the result. */
__device__ __forceinline__ float block_max(float v)
{
	GLM_SH_LANE(float, part, [32]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	v = warp_max(v);
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	return warp_max(lane < nw ? part[lane] : neg_inf());
}

/* Block-wide integer sum; every thread gets the result. */
__device__ __forceinline__ int block_sum_int(int v)
{
	GLM_SH_LANE(int, part, [32]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	__syncthreads();
	if (lane == 0)
		part[warp] = v;
	__syncthreads();
	v = lane < nw ? part[lane] : 0;
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* The order of argmax and topk (ref.c's `before`): larger value first, NaN above everything, then the
** lower index. A strict total order on (value, index) pairs with distinct indices. */
__device__ __forceinline__ bool ranks_before(float va, int ia, float vb, int ib)
{
	bool na = va != va, nb = vb != vb;
	if (na || nb)
		return na && (!nb || ia < ib);
	return va > vb || (va == vb && ia < ib);
}

/* Keeps the better of (v, i) and (ov, oi). */
__device__ __forceinline__ void keep_best(float &v, int &i, float ov, int oi)
{
	if (ranks_before(ov, oi, v, i)) {
		v = ov;
		i = oi;
	}
}

/* Block-wide best (value, index) pair under ranks_before; every thread gets the result. Threads with
** no candidate pass (-inf, 0x7fffffff), which every real element outranks. */
__device__ __forceinline__ void block_best(float &v, int &i)
{
	GLM_SH_LANE(float, pv, [32]);
	GLM_SH_LANE(int, pi, [32]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	for (int o = 16; o > 0; o >>= 1)
		keep_best(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
	__syncthreads();
	if (lane == 0) {
		pv[warp] = v;
		pi[warp] = i;
	}
	__syncthreads();
	v = lane < nw ? pv[lane] : neg_inf();
	i = lane < nw ? pi[lane] : 0x7fffffff;
	for (int o = 16; o > 0; o >>= 1)
		keep_best(v, i, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, i, o));
}

/* Calls f(i, float(x[i])) for i = threadIdx.x, + blockDim.x, ... < n, in increasing i. Four elements are
** loaded before any is used, so a thread has four loads in flight (a plain loop that consumes each
** load at once waits a full memory latency per element). */
template <typename A, typename F>
__device__ __forceinline__ void walk_row(const A *x, int n, F f)
{
	int i = threadIdx.x, st = blockDim.x;
	for (; i + 3 * st < n; i += 4 * st) {
		float a = to_f(x[i]), b = to_f(x[i + st]), c = to_f(x[i + 2 * st]), d = to_f(x[i + 3 * st]);
		f(i, a);
		f(i + st, b);
		f(i + 2 * st, c);
		f(i + 3 * st, d);
	}
	for (; i < n; i += st)
		f(i, to_f(x[i]));
}

/* Calls f(i, float(x[i])) for every i < n once, in an order of its choosing: in 16-byte vectors (four in
** flight a thread) when x is 16-byte aligned, else as walk_row. For reductions whose result does not
** depend on the order (an argmax under ranks_before). Why: 2-byte loads over a 154880-logit row are 38
** dependent rounds of four a thread (bench/NOTES.md entries 17 and 54). */
template <typename A, typename F>
__device__ __forceinline__ void walk_row_vec(const A *x, int n, F f)
{
	const int VE = 16 / (int)sizeof(A);
	if (((unsigned long long)x & 15) != 0) {
		walk_row(x, n, f);
		return;
	}
	typedef union {
		uint4 q;
		A e[VE];
	} V;
	int nv = n / VE, j = threadIdx.x, st = blockDim.x;
	const uint4 *xv = (const uint4 *)x;
	for (; j + 3 * st < nv; j += 4 * st) {
		V v[4];
#pragma unroll
		for (int u = 0; u < 4; u++)
			v[u].q = xv[j + u * st];
#pragma unroll
		for (int u = 0; u < 4; u++)
#pragma unroll
			for (int e = 0; e < VE; e++)
				f((j + u * st) * VE + e, to_f(v[u].e[e]));
	}
	for (; j < nv; j += st) {
		V v;
		v.q = xv[j];
#pragma unroll
		for (int e = 0; e < VE; e++)
			f(j * VE + e, to_f(v.e[e]));
	}
	for (int i = nv * VE + threadIdx.x; i < n; i += st) /* the tail past the last whole vector */
		f(i, to_f(x[i]));
}

/* ---- programmatic dependent launch (PDL) ----
** glmrun launches a kernel that follows another of the plan's kernels with programmatic stream
** serialization, so its blocks may be scheduled while the kernel before is still running. Every
** emitted wrapper therefore calls glm_pdl_wait() before its template runs: it waits until the kernel
** before has completed and its writes are visible, then lets the kernel after be scheduled (so at most
** one kernel waits ahead). The decode GEMVs (gemv_core) do the two halves themselves: launched so
** (their pdl argument, KA_PDL), they ask L2 for their first weights before glm_pdl_wait_only (the
** weights are constant, so those reads overlap the kernel before; launched plainly the same requests
** only slow them: bench/NOTES.md entry 54), and they let the kernel after be scheduled
** (glm_pdl_trigger) only once a block has loaded its last group, so that its blocks wait during this
** one's tail, not all of it. emit_cuda.c leaves the call out of their wrappers. No-ops for a kernel
** launched without the attribute, and in the CPU emulator. */
__device__ __forceinline__ void glm_pdl_wait_only()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GLM_SIMT)
	asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void glm_pdl_trigger()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && !defined(GLM_SIMT)
	asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

__device__ __forceinline__ void glm_pdl_wait()
{
	glm_pdl_wait_only();
	glm_pdl_trigger();
}

/* Ask L2 for the line holding p (no register waits for it). A no-op in the CPU emulator. */
__device__ __forceinline__ void glm_prefetch_l2(const void *p)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#endif
}

/* The same into L1, for a line this thread's block reads soon (a no-op in the CPU emulator). */
__device__ __forceinline__ void glm_prefetch_l1(const void *p)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
#endif
}

/* ---- kernels ---- */

/* embedding: y[T,C] = table[ids[t], :]. grid (ceil(C/256), T), block 256. */
template <typename A, typename W>
__device__ void k_embedding(A *y, const W *table, const int *ids, int T, int C)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (c >= C || t >= T)
		return;
	y[(long long)t * C + c] = from_f<A>(to_f(table[(long long)ids[t] * C + c]));
}

/* Vocab-parallel k_embedding: this rank holds table rows [rank·V, (rank+1)·V); other ids give zeros,
** which the allreduce after it fills in from the rank that holds them. Same geometry. */
template <typename A, typename W>
__device__ void k_embedding_vp(A *y, const W *table, const int *ids, int T, int C, int V, int rank)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (c >= C || t >= T)
		return;
	long long r = (long long)ids[t] - (long long)rank * V;
	y[(long long)t * C + c] = r >= 0 && r < V ? from_f<A>(to_f(table[r * C + c])) : from_f<A>(0.0f);
}

/* Prologues of the decode GEMV (fuse.c's GP_*): how an element of its input is formed. */
#define GEMV_PRO_NONE 0
#define GEMV_PRO_RMSNORM 1
#define GEMV_PRO_SWIGLU 2
/* RMSNORM with the norm's scale applied after the dot products: y = inv·(W·(x ⊙ nw)), x and nw read at
** use and the sum of squares riding along in each group's reduction, so nothing stands between the
** kernel's start and its first weight loads (see gemv_core). */
#define GEMV_PRO_RMSLATE 3
/* Epilogue bits of the decode GEMV: bit m (m < 4) scales member m's result; GEMV_EPI_RES adds r to
** member 0's; GEMV_EPI_GLU (members 0 and 1 a SwiGLU's gate and up, N0 = N1) stores only
** silu(gate)·up, as y_0[T, N0]. */
#define GEMV_EPI_RES 16
#define GEMV_EPI_GLU 32

/* N input values of type A at p into f (as float): one or two 16-byte loads when vec (p 16-byte
** aligned), through the read-only cache when global (p in global memory; else shared), else element
** by element. */
template <typename A, int N>
__device__ __forceinline__ void gemv_ldx(const A *p, float *f, bool vec, bool global)
{
	if (vec && (int)sizeof(A) * N % 16 == 0) {
#pragma unroll
		for (int q = 0; q < (int)sizeof(A) * N / 16; q++) {
			union {
				uint4 bits;
				A e[16 / sizeof(A)];
			} v;
			v.bits = global ? __ldg((const uint4 *)p + q) : ((const uint4 *)p)[q];
#pragma unroll
			for (int j = 0; j < (int)(16 / sizeof(A)); j++)
				f[q * (16 / sizeof(A)) + j] = to_f(v.e[j]);
		}
	} else {
#pragma unroll
		for (int j = 0; j < N; j++)
			f[j] = to_f(p[j]);
	}
}

/* The inverse RMS of row xr[0..K) exactly as k_rmsnorm forms it (each thread sums its elements in order,
** then block_sum), so the normalised values match the unfused kernel's. Every thread gets it. */
template <typename A>
__device__ float gemv_row_inv_rms(const A *xr, int K, float eps)
{
	float ss = 0.0f;
	for (int i = threadIdx.x; i < K; i += blockDim.x) {
		float v = to_f(xr[i]);
		ss += v * v;
	}
	return 1.0f / sqrtf(block_sum(ss) / (float)K + eps);
}

/* GEMV_PRO_RMSLATE's stored norm: row xr's normalised values A(x·inv·nw) (k_rmsnorm's order of the
** products; nw may be nullptr) into hr, once the row's inverse RMS iv is known. The whole block. */
template <typename A, typename NW>
__device__ __forceinline__ void late_store_norm(A *hr, const A *xr, const NW *nw, int K, float iv)
{
	for (int k = threadIdx.x; k < K; k += blockDim.x) {
		float v = to_f(xr[k]) * iv;
		if (nw)
			v *= to_f(nw[k]);
		hr[k] = from_f<A>(v);
	}
}

/* The weight row of column i of group grp of a GEMV's members (w_m[N_m, K]): concatenated column
** grp·RB + i, or with GLU the pair layout (i < RB/2: gate row grp·RB/2 + i of w0, else the same row of
** w1). Past the last column, the last row (a valid address whose result is never stored). */
template <typename W, bool GLU, int RB>
__device__ __forceinline__ const W *gemv_wrow(int grp, int i, int Ntot, const W *w0, const W *w1, const W *w2,
                                              const W *w3, int N0, int N1, int N2, int K)
{
	if constexpr (GLU) {
		int n = grp * (RB / 2) + i % (RB / 2);
		return (i < RB / 2 ? w0 : w1) + (long long)(n < N0 ? n : N0 - 1) * K;
	}
	int c = grp * RB + i;
	if (c >= Ntot)
		c = Ntot - 1;
	int m = c < N0 ? 0 : c < N0 + N1 ? 1 : c < N0 + N1 + N2 ? 2 : 3;
	int n = c - (m > 0 ? N0 : 0) - (m > 1 ? N1 : 0) - (m > 2 ? N2 : 0);
	const W *w = m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3;
	return w + (long long)n * K;
}

/*
** The decode GEMV, shared by k_linear_gemv and k_gemv_fused: up to four linears that read the same
** input rows x[T, K], over their concatenated output columns (member m: weight w_m[N_m, K], optional
** bias b_m, output y_m[T, N_m]; absent members have N_m = 0). The columns go in groups of RB; block b
** computes groups b, b + gridDim.x, ... for all T rows. grid: up to ceil(ΣN_m / RB) (fewer blocks loop);
** block: any multiple of 32 (the emitter picks it from K so every thread streams about two 16-byte
** vectors of each row).
**
** Why this shape: at batch 1 the weights are the only big stream, so every thread issues its RB·U
** weight loads (16 bytes each) before it touches x, the threads of a block split K (so even a short
** row is streamed by the whole block), and the partial sums meet in one shared-memory reduction per
** group. Plain x is read straight from global memory (small; it stays in L1/L2). A prologue is formed
** once per block into shared memory (as A, exactly the values the unfused kernels store), which is
** why the emitter gives prologue kernels about two blocks per SM that loop over the groups:
**   NONE     x[t, k];
**   RMSNORM  A(x·inv·nw[k]) (nw may be nullptr when !HAS_NW), inv the row's inverse RMS summed as
**            k_rmsnorm sums (thread i takes i, i + blockDim.x, ...; then block_sum). With hs !=
**            nullptr block 0 also stores those rows.
**   SWIGLU   A(silu(x)·u) (x is the gate), as k_swiglu.
**   RMSLATE  no prologue: x·nw[k] at use (as NONE reads x), and each group's reduction also sums the
**            squares of x[t] that its threads read, so y = inv·(Σ w·x·nw) (+ bias). The same value as
**            RMSNORM but for one rounding: the normalised input is not rounded to A (exact for A =
**            float up to the order of the sums). For the one-token launch: its groups read x from L1.
**            A block that loops reads the row again for each group. With hs != nullptr block 0 stores
**            the normalised rows after its first group's reduction (late_store_norm).
** Rows that do not fit the 32 KB of shared memory (T·K·sizeof(A)) form the prologue per element
** instead (correct, slower). Each result is rounded to A as the linear stores it (bias first), then
** EPI bit m: y_m = A(s_m · that) (a scale node); GEMV_EPI_RES: y_0 = A(r + that) (the residual add);
** GEMV_EPI_GLU: the columns go in pairs (a group of RB takes gate rows n.. and the same up rows, so
** ΣN/RB groups still), and y_0[t, n] = A(silu(gate)·up) of the two rounded results (y_1 unused).
** In place: y_0 may equal r (the thread that writes y_0[t, n] read r[t, n] just before); no output may
** overlap x, u or hs. Weights are read in 16-byte vectors when every member's w is 16-byte aligned
** and K a multiple of the vector width, else one element at a time; x, u the same way when aligned.
** The rows go TR at a time (TR = 1 for the one-token step keeps the accumulators in few registers;
** 8 for batches).
*/
template <typename A, typename W, typename NW, int PRO, bool HAS_NW, int EPI, int RB, int TR>
__device__ void gemv_core(A *y0, A *y1, A *y2, A *y3, const W *w0, const W *w1, const W *w2, const W *w3,
                          const A *b0, const A *b1, const A *b2, const A *b3, const A *x, const A *u, const NW *nw,
                          A *hs, const A *r, int T, int K, int N0, int N1, int N2, int N3, float eps, float s0, float s1,
                          float s2, float s3, int pdl = 0)
{
	const int VEC = 16 / (int)sizeof(W), U = 2; /* weights per 16-byte load; loads per row in flight */
	constexpr bool LATE = PRO == GEMV_PRO_RMSLATE, STAGE = PRO == GEMV_PRO_RMSNORM || PRO == GEMV_PRO_SWIGLU;
	const int XCAP = STAGE ? 32768 / (int)sizeof(A) : 1; /* staged prologue values */
	constexpr bool GLU = (EPI & GEMV_EPI_GLU) != 0;
	static_assert(!GLU || (RB % 2 == 0 && (EPI & ~GEMV_EPI_GLU) == 0), "GLU: column pairs, no other epilogue");
	GLM_SH(float, red, [32][RB * TR + (LATE ? TR : 0) + 1]); /* LATE: each row's sum of squares after the dots */
	GLM_SH_AFTER(red, float, inv, [TR]);
	GLM_SH16_AFTER(inv, uint4, xs4, [(XCAP * sizeof(A) + 15) / 16]);
	A *xs = (A *)xs4;
	int tid = threadIdx.x, BT = blockDim.x, lane = tid & 31, warp = tid >> 5, nwarp = BT >> 5;
	int Ntot = N0 + N1 + N2 + N3, ngroups = (Ntot + RB - 1) / RB;
	bool kvec = K % VEC == 0;
	bool xal = ((unsigned long long)x & 15) == 0 && (PRO != GEMV_PRO_SWIGLU || ((unsigned long long)u & 15) == 0);

	/* Launched programmatically (pdl), the block may start while the kernel before runs, and only x, u, r
	** and the outputs are that kernel's business: its first step of weights (the U vectors of each of
	** the first group's RB rows a thread streams first) go towards L2 before glm_pdl_wait. L2, not
	** registers: holding them across the wait costs the plain GEMV 24 registers and half its blocks.
	** The kernel after is let in (glm_pdl_trigger) when the block has its last group's weights. Not in
	** plain launches, not even ahead of a prologue: there it slowed the fused QKV and gate/up GEMVs
	** (bench/NOTES.md entry 12). */
	if (pdl && kvec && (int)blockIdx.x < ngroups) {
#pragma unroll 1
		for (int i = 0; i < RB; i++) {
			const W *w = gemv_wrow<W, GLU, RB>(blockIdx.x, i, Ntot, w0, w1, w2, w3, N0, N1, N2, K);
#pragma unroll
			for (int j = 0; j < U; j++) {
				long long v = tid + j * BT;
				if (v < K / VEC)
					glm_prefetch_l2(w + v * VEC);
			}
		}
	}
	glm_pdl_wait_only();
	/* rows per pass: TR, or as many as xs holds when there is a prologue (at least one) */
	int P = !STAGE || TR * K <= XCAP ? TR : K <= XCAP ? XCAP / K : 1;
	for (int t0 = 0; t0 < T; t0 += P) {
		int tn = T - t0 < P ? T - t0 : P;
		bool staged = STAGE && tn * K <= XCAP;
		if (staged) {
			/* the prologue, once per block, into xs[t·K + k]: the inputs are read 8 values a load, four
			** loads in flight per thread (one value a load when unaligned or K % 8 != 0) */
			bool v8 = K % 8 == 0 && xal;
			int step = v8 ? 8 : 1, ne = tn * K / step;
			for (int e0 = tid; e0 < ne; e0 += 4 * BT) {
				float g[4][8], uu[4][8];
#pragma unroll
				for (int j = 0; j < 4; j++) {
					int e = e0 + j * BT < ne ? e0 + j * BT : e0;
					long long at = (long long)t0 * K + (long long)e * step;
					if (v8) {
						gemv_ldx<A, 8>(x + at, g[j], true, true);
						if (PRO == GEMV_PRO_SWIGLU)
							gemv_ldx<A, 8>(u + at, uu[j], true, true);
					} else {
						g[j][0] = to_f(x[at]);
						if (PRO == GEMV_PRO_SWIGLU)
							uu[j][0] = to_f(u[at]);
					}
				}
#pragma unroll
				for (int j = 0; j < 4; j++) {
					int e = e0 + j * BT;
					if (e >= ne)
						break;
#pragma unroll
					for (int q = 0; q < 8; q++) {
						if (q >= step)
							break;
						float v = g[j][q];
						if (PRO == GEMV_PRO_SWIGLU)
							v = v / (1.0f + expf(-v)) * uu[j][q];
						xs[e * step + q] = from_f<A>(v); /* RMSNORM: the raw row, normalised below */
					}
				}
			}
			__syncthreads();
			if (PRO == GEMV_PRO_RMSNORM) {
				/* normalise in place, the inverse RMS summed as k_rmsnorm sums; a thread's first eight
				** norm weights are asked for at once, before the sums (one round trip, not one each) */
				float nwv[8];
#pragma unroll
				for (int q = 0; q < 8; q++)
					nwv[q] = HAS_NW && tid + q * BT < K ? to_f(nw[tid + q * BT]) : 1.0f;
				for (int t = 0; t < tn; t++) {
					A *xr = xs + t * K;
					float iv = gemv_row_inv_rms(xr, K, eps);
					auto norm_at = [&](int k, float w) { /* value k normalised (times w with HAS_NW) */
						float v = to_f(xr[k]) * iv;
						if (HAS_NW)
							v *= w;
						A h = from_f<A>(v);
						xr[k] = h;
						if (hs && blockIdx.x == 0)
							hs[(long long)(t0 + t) * K + k] = h;
					};
#pragma unroll
					for (int q = 0; q < 8 && tid + q * BT < K; q++)
						norm_at(tid + q * BT, nwv[q]);
					for (int k = tid + 8 * BT; k < K; k += BT)
						norm_at(k, HAS_NW ? to_f(nw[k]) : 1.0f);
				}
				__syncthreads();
			}
		} else if (PRO == GEMV_PRO_RMSNORM) {
			/* rows too long to stage: the inverse RMS first, the prologue per element below */
			for (int t = 0; t < tn; t++) {
				float iv = gemv_row_inv_rms(x + (long long)(t0 + t) * K, K, eps);
				if (tid == 0)
					inv[t] = iv;
			}
			__syncthreads();
		}
		/* where row t's (formed) input is read: global x, or xs */
		const A *xin = staged ? xs : x + (long long)t0 * K;
		bool xvec = kvec && (staged || xal);
		/* the end of group grp: one shared-memory reduction over the warps, then thread i·TR + t
		** finishes column i, row t (GLU: pair i) with the epilogue */
		auto finish = [&](int grp, float (&acc)[RB][TR], float (&ss)[TR]) {
#pragma unroll
			for (int i = 0; i < RB; i++)
#pragma unroll
				for (int t = 0; t < TR; t++) {
					if (t >= tn)
						break;
					float s = warp_sum(acc[i][t]);
					if (lane == 0)
						red[warp][i * TR + t] = s;
				}
			if constexpr (LATE) {
#pragma unroll
				for (int t = 0; t < TR; t++) {
					if (t >= tn)
						break;
					float s = warp_sum(ss[t]);
					if (lane == 0)
						red[warp][RB * TR + t] = s;
				}
			}
			__syncthreads();
			/* LATE: row t's inverse RMS from the warps' sums of squares (every finishing thread) */
			auto late_inv = [&](int t) {
				float q = 0.0f;
				for (int w = 0; w < nwarp; w++)
					q += red[w][RB * TR + t];
				return 1.0f / sqrtf(q / (float)K + eps);
			};
			if constexpr (LATE)
				if (hs && blockIdx.x == 0 && grp == 0) /* other nodes read the norm: block 0 stores it */
					for (int t = 0; t < tn; t++)
						late_store_norm<A, NW>(hs + (long long)(t0 + t) * K, x + (long long)(t0 + t) * K,
						                       HAS_NW ? nw : nullptr, K, late_inv(t));
			if (GLU) {
				/* thread i·TR + t finishes pair i, row t: gate and up rounded as the linears store them,
				** then silu(gate)·up as k_swiglu stores it */
				const int H = RB / 2;
				int i = tid / TR, t = tid - i * TR, n = grp * H + i;
				if (tid < H * TR && t < tn && n < N0) {
					float sg = 0.0f, su = 0.0f;
					for (int q = 0; q < nwarp; q++)
						sg += red[q][i * TR + t], su += red[q][(i + H) * TR + t];
					if constexpr (LATE) {
						float iv = late_inv(t);
						sg *= iv, su *= iv;
					}
					if (b0)
						sg += to_f(b0[n]);
					if (b1)
						su += to_f(b1[n]);
					float gv = to_f(from_f<A>(sg)), uv = to_f(from_f<A>(su));
					y0[(long long)(t0 + t) * N0 + n] = from_f<A>(gv / (1.0f + expf(-gv)) * uv);
				}
			} else if (tid < RB * TR) {
				int i = tid / TR, t = tid - i * TR, c = grp * RB + i;
				if (t < tn && c < Ntot) {
					float s = 0.0f;
					for (int q = 0; q < nwarp; q++)
						s += red[q][tid];
					if constexpr (LATE)
						s *= late_inv(t);
					int m = c < N0 ? 0 : c < N0 + N1 ? 1 : c < N0 + N1 + N2 ? 2 : 3;
					int n = c - (m > 0 ? N0 : 0) - (m > 1 ? N1 : 0) - (m > 2 ? N2 : 0);
					int Nm = m == 0 ? N0 : m == 1 ? N1 : m == 2 ? N2 : N3;
					const A *bias = m == 0 ? b0 : m == 1 ? b1 : m == 2 ? b2 : b3;
					A *y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;
					if (bias)
						s += to_f(bias[n]);
					long long at = (long long)(t0 + t) * Nm + n;
					if ((EPI >> m) & 1) {
						float sc = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;
						s = sc * to_f(from_f<A>(s));
					} else if ((EPI & GEMV_EPI_RES) && m == 0) {
						s = to_f(r[at]) + to_f(from_f<A>(s));
					}
					y[at] = from_f<A>(s);
				}
			}
			__syncthreads(); /* red is reused by the next group */
		};
		/* The batch-1 step of a prologue GEMV (its ~2 blocks per SM loop over the groups) when one step
		** of the loop below covers a row (K·sizeof(W) <= BT·U·16: every thread's U vectors of each of the
		** RB rows are the whole group) and every row is aligned: the next group's weights are loaded
		** before this group's reduction, so the block keeps loads in flight across its groups (the loop
		** below drains them at every group's reduction). */
		bool wal = ((unsigned long long)w0 | (unsigned long long)(N1 ? w1 : w0) | (unsigned long long)(N2 ? w2 : w0) |
		            (unsigned long long)(N3 ? w3 : w0)) % 16 == 0;
		if constexpr (TR == 1 && STAGE) /* without staging (NONE, RMSLATE) a block has one group */
		if (kvec && wal && staged && K / VEC <= BT * U) {
			int nv = K / VEC;
			uint4 raw[RB][U];
			auto load = [&](int grp) {
#pragma unroll
				for (int i = 0; i < RB; i++) {
					const W *w = gemv_wrow<W, GLU, RB>(grp, i, Ntot, w0, w1, w2, w3, N0, N1, N2, K);
#pragma unroll
					for (int j = 0; j < U; j++) {
						int v = tid + j * BT < nv ? tid + j * BT : tid < nv ? tid : 0;
						raw[i][j] = __ldg((const uint4 *)(w + (long long)v * VEC));
					}
				}
			};
			if ((int)blockIdx.x < ngroups)
				load(blockIdx.x);
			for (int grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {
				float acc[RB][TR];
#pragma unroll
				for (int i = 0; i < RB; i++)
					acc[i][0] = 0.0f;
#pragma unroll
				for (int j = 0; j < U; j++) {
					int v = tid + j * BT;
					if (v >= nv)
						break;
					float xf[VEC];
					gemv_ldx<A, VEC>(xin + (long long)v * VEC, xf, xvec, !staged);
#pragma unroll
					for (int i = 0; i < RB; i++) {
						union {
							uint4 bits;
							W e[VEC];
						} wv;
						wv.bits = raw[i][j];
						float a = acc[i][0];
#pragma unroll
						for (int q = 0; q < VEC; q++)
							a += xf[q] * to_f(wv.e[q]);
						acc[i][0] = a;
					}
				}
				if (grp + (int)gridDim.x < ngroups)
					load(grp + gridDim.x); /* in flight during the reduction below */
				else if (t0 + P >= T)
					glm_pdl_trigger();
				float ss0[TR] = {}; /* no LATE here (it stages nothing) */
				finish(grp, acc, ss0);
			}
			__syncthreads(); /* xs and inv are reused by the next rows */
			continue;
		}
		for (int grp = blockIdx.x; grp < ngroups; grp += gridDim.x) {
			const W *wr[RB];
			bool vec = kvec;
#pragma unroll
			for (int i = 0; i < RB; i++) {
				wr[i] = gemv_wrow<W, GLU, RB>(grp, i, Ntot, w0, w1, w2, w3, N0, N1, N2, K);
				vec = vec && ((unsigned long long)wr[i] & 15) == 0;
			}
			vec = vec && (staged || !STAGE); /* a prologue per element: the scalar path */
			int nv = vec ? K / VEC : K; /* a thread's steps: vectors, or elements */
			float acc[RB][TR], ss[TR] = {}; /* ss: LATE's sums of squares of this thread's x */
#pragma unroll
			for (int i = 0; i < RB; i++)
#pragma unroll
				for (int t = 0; t < TR; t++)
					acc[i][t] = 0.0f;
			bool nwvec = ((unsigned long long)nw & 15) == 0;
			for (int v0 = tid; v0 < nv; v0 += BT * U) {
				if (vec) {
					/* every weight load of this step first, so RB·U are in flight */
					uint4 raw[RB][U];
#pragma unroll
					for (int j = 0; j < U; j++) {
						int v = v0 + j * BT < nv ? v0 + j * BT : v0;
#pragma unroll
						for (int i = 0; i < RB; i++)
							raw[i][j] = __ldg((const uint4 *)(wr[i] + (long long)v * VEC));
					}
#pragma unroll
					for (int j = 0; j < U; j++) {
						int v = v0 + j * BT;
						if (v >= nv)
							break;
						float gw[VEC]; /* LATE: the norm weights of these VEC values */
						if constexpr (LATE && HAS_NW)
							gemv_ldx<NW, VEC>(nw + (long long)v * VEC, gw, nwvec, true);
#pragma unroll
						for (int t = 0; t < TR; t++) {
							if (t >= tn)
								break;
							float xf[VEC];
							gemv_ldx<A, VEC>(xin + (long long)t * K + (long long)v * VEC, xf, xvec, !staged);
							if constexpr (LATE) {
#pragma unroll
								for (int q = 0; q < VEC; q++) {
									ss[t] += xf[q] * xf[q];
									if (HAS_NW)
										xf[q] *= gw[q];
								}
							}
#pragma unroll
							for (int i = 0; i < RB; i++) { /* weights widened here, per row: fewer registers */
								union {
									uint4 bits;
									W e[VEC];
								} wv;
								wv.bits = raw[i][j];
								float s = acc[i][t];
#pragma unroll
								for (int q = 0; q < VEC; q++)
									s += xf[q] * to_f(wv.e[q]);
								acc[i][t] = s;
							}
						}
					}
				} else {
					/* unaligned or ragged rows, or a prologue per element: element k = v0 + j·BT, one
					** at a time (not unrolled: this path is for correctness, and must not cost the
					** vector path registers) */
#pragma unroll 1
					for (int j = 0; j < U; j++) {
						int k = v0 + j * BT;
						if (k >= nv)
							break;
						float wf[RB];
#pragma unroll
						for (int i = 0; i < RB; i++)
							wf[i] = to_f(wr[i][k]);
#pragma unroll
						for (int t = 0; t < TR; t++) {
							if (t >= tn)
								break;
							long long at = (long long)t * K + k;
							float xf = to_f(xin[at]);
							if (LATE) {
								ss[t] += xf * xf;
								if (HAS_NW)
									xf *= to_f(nw[k]);
							} else if (!staged && PRO == GEMV_PRO_SWIGLU) {
								xf = to_f(from_f<A>(xf / (1.0f + expf(-xf)) * to_f(u[(long long)t0 * K + at])));
							} else if (!staged && PRO == GEMV_PRO_RMSNORM) {
								float h = xf * inv[t];
								if (HAS_NW)
									h *= to_f(nw[k]);
								A ha = from_f<A>(h);
								if (hs && grp == 0)
									hs[(long long)t0 * K + at] = ha;
								xf = to_f(ha);
							}
#pragma unroll
							for (int i = 0; i < RB; i++)
								acc[i][t] += xf * wf[i];
						}
					}
				}
			}
			if (grp + (int)gridDim.x >= ngroups && t0 + P >= T)
				glm_pdl_trigger();
			finish(grp, acc, ss);
		}
		__syncthreads(); /* xs and inv are reused by the next 8 rows */
	}
}

#ifndef __CUDACC_RTC__
#include "gemv_shape.h" /* the launch shapes glmc emits (NVRTC's source has it first: see the Makefile) */
#endif

/*
** Decode GEMV for few rows: y[T,N] = x[T,K]·w[N,K]ᵀ (+ bias[N]); T <= 8 is the intended use. gemv_core
** with one member, TR rows per pass: grid (ceil(N/RB)), block a multiple of 32 (gemv_shape.h).
** bias may be nullptr when !HAS_BIAS. pdl: launched programmatically (KA_PDL; see glm_pdl_wait).
*/
template <typename A, typename W, bool HAS_BIAS, int RB, int TR>
__device__ void k_linear_gemv(A *y, const A *x, const W *w, const A *bias, int T, int K, int N, int pdl = 0)
{
	gemv_core<A, W, A, GEMV_PRO_NONE, false, 0, RB, TR>(y, nullptr, nullptr, nullptr, w, nullptr, nullptr, nullptr,
	                                                HAS_BIAS ? bias : nullptr, nullptr, nullptr, nullptr, x, nullptr,
	                                                nullptr, nullptr, nullptr, T, K, N, 0, 0, 0, 0.0f, 1.0f, 1.0f, 1.0f,
	                                                1.0f, pdl);
}

/* Prefill GEMM, any T: same contract as k_linear_gemv. 64x64 output tile per block, K in steps of 32
** through shared memory. grid (ceil(N/64), ceil(T/64)), block 256.
**
** Both tiles are stored k-major as float ([32][64] padded to 68, so rows stay 16-byte aligned for the
** float4 reads): thread (ty, tx) = (tid / 16, tid % 16) computes rows ty*4..+3 by columns tx*4..+3 from
** one float4 of each tile per k. Out-of-range rows and k are loaded as 0. Needs exactly 256 threads.
*/
template <typename A, typename W, bool HAS_BIAS>
__device__ void k_linear_gemm(A *y, const A *x, const W *w, const A *bias, int T, int K, int N)
{
	const int LD = 68; /* padded row length of the tiles, a multiple of 4 floats */
	GLM_SH(float4, xs4, [32 * LD / 4]);
	GLM_SH_AFTER(xs4, float4, ws4, [32 * LD / 4]);
	float *xs = (float *)xs4, *ws = (float *)ws4;
	int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
	int n0 = blockIdx.x * 64, t0 = blockIdx.y * 64;
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;

	for (int k0 = 0; k0 < K; k0 += 32) {
		/* element e of a tile is row e/32, k e%32: a warp reads 32 consecutive k of one row. All 16
		** loads of a thread are issued before the stores, so they are in flight together. */
		float xv[8], wv[8];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = tid + 256 * j, r = e >> 5, kk = k0 + (e & 31), t = t0 + r, n = n0 + r;
			xv[j] = (t < T && kk < K) ? to_f(x[(long long)t * K + kk]) : 0.0f;
			wv[j] = (n < N && kk < K) ? to_f(w[(long long)n * K + kk]) : 0.0f;
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = tid + 256 * j, r = e >> 5, k = e & 31;
			xs[k * LD + r] = xv[j];
			ws[k * LD + r] = wv[j];
		}
		__syncthreads();
#pragma unroll 8
		for (int k = 0; k < 32; k++) {
			float4 a = *(const float4 *)(xs + k * LD + ty * 4);
			float4 b = *(const float4 *)(ws + k * LD + tx * 4);
			float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] += av[i] * bv[j];
		}
		__syncthreads(); /* the tiles are overwritten by the next step */
	}

#pragma unroll
	for (int i = 0; i < 4; i++) {
		int t = t0 + ty * 4 + i;
		if (t >= T)
			continue;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int n = n0 + tx * 4 + j;
			if (n < N) {
				float s = acc[i][j];
				if (HAS_BIAS)
					s += to_f(bias[n]);
				y[(long long)t * N + n] = from_f<A>(s);
			}
		}
	}
}

/* y[B,M,N] = a[B,M,K]·b[B,K,N]. grid (ceil(N/256), M, B), block 256.
** One output per thread: the a row is the same for the whole block (broadcast reads), b is read along
** its rows, coalesced over n. */
template <typename A, typename B_>
__device__ void k_matmul(A *y, const A *a, const B_ *b, int M, int K, int N)
{
	int n = blockIdx.x * blockDim.x + threadIdx.x, m = blockIdx.y;
	long long bi = blockIdx.z;
	if (n >= N)
		return;
	const A *ar = a + (bi * M + m) * K;
	const B_ *bc = b + bi * K * N + n;
	float s = 0.0f;
	for (int k = 0; k < K; k++)
		s += to_f(ar[k]) * to_f(bc[(long long)k * N]);
	y[(bi * M + m) * N + n] = from_f<A>(s);
}

/* Element-wise with the second operand broadcast: y[i] = a[i] OP b[i % nb]. OP: 0 add, 1 sub, 2 mul,
** 3 div. grid (ceil(n/256)), block 256. b's type may differ from A (a weight vector).
** One float operation (IEEE-rounded, as torch) then the conversion to A; y may equal a. */
template <typename A, typename B_, int OP>
__device__ void k_binary(A *y, const A *a, const B_ *b, long long n, long long nb)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	float u = to_f(a[i]), v = to_f(b[i % nb]), r;
	if (OP == 0)
		r = u + v;
	else if (OP == 1)
		r = u - v;
	else if (OP == 2)
		r = u * v;
	else
		r = u / v;
	y[i] = from_f<A>(r);
}

/* y = f(x). OP: 0 scale (y = s·x), 1 silu, 2 gelu (erf), 3 gelu (tanh), 4 sigmoid.
** grid (ceil(n/256)), block 256.
** Forms chosen to stay accurate at both ends: silu x/(1+e^-x); gelu erf 0.5·x·erfc(-x/√2) (no
** cancellation for negative x); gelu tanh via 0.5(1+tanh u) = 1/(1+e^-2u). */
template <typename A, int OP>
__device__ void k_unary(A *y, const A *x, long long n, float s)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	float v = to_f(x[i]), r;
	if (OP == 0) {
		r = s * v;
	} else if (OP == 1) {
		r = v / (1.0f + expf(-v));
	} else if (OP == 2) {
		r = 0.5f * v * erfcf(-v * 0.70710678118654752f);
	} else if (OP == 3) {
		float u = 0.79788456080286536f * (v + 0.044715f * v * v * v);
		r = v / (1.0f + expf(-2.0f * u));
	} else {
		r = 1.0f / (1.0f + expf(-v));
	}
	y[i] = from_f<A>(r);
}

/* y = silu(g)·u. grid (ceil(n/256)), block 256. */
template <typename A>
__device__ void k_swiglu(A *y, const A *g, const A *u, long long n)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	float gv = to_f(g[i]);
	y[i] = from_f<A>(gv / (1.0f + expf(-gv)) * to_f(u[i]));
}

/* Softmax over rows of N. grid (rows), block 256.
** Three passes over the row (max, sum of exp, write); each thread writes only elements it has just
** read, after the reductions, so y may equal x. */
template <typename A>
__device__ void k_softmax(A *y, const A *x, int N)
{
	const A *xr = x + (long long)blockIdx.x * N;
	A *yr = y + (long long)blockIdx.x * N;
	float m = neg_inf();
	walk_row(xr, N, [&](int, float v) { m = fmaxf(m, v); });
	m = block_max(m);
	float s = 0.0f;
	walk_row(xr, N, [&](int, float v) { s += expf(v - m); });
	float inv = 1.0f / block_sum(s);
	walk_row(xr, N, [&](int i, float v) { yr[i] = from_f<A>(expf(v - m) * inv); });
}

/* RMSNorm over rows of N, optional weight. grid (rows), block 256.
** y = x / sqrt(mean(x²) + eps) · w, with an IEEE square root and division (not rsqrtf). y may equal x.
** Rows of up to 32 elements a thread are read into registers with every load issued at once and summed in
** walk_row's order (thread i: i, i + blockDim.x, ...), so the result is bit for bit the walk's; the norm
** weights too, before any store (a load of w after a store to y that may alias it waits in line). Why: a
** decode step's one row otherwise reads its weights one dependent trip at a time (bench/NOTES.md 48). */
template <typename A, typename W, bool HAS_W>
__device__ void k_rmsnorm(A *y, const A *x, const W *w, int N, float eps)
{
	const A *xr = x + (long long)blockIdx.x * N;
	A *yr = y + (long long)blockIdx.x * N;
	const int st = blockDim.x, R = 32;
	if (N <= R * st) {
		float v[R], wv[R], ss = 0.0f;
#pragma unroll
		for (int j = 0; j < R; j++) {
			int i = threadIdx.x + j * st;
			v[j] = i < N ? to_f(xr[i]) : 0.0f;
			wv[j] = HAS_W && i < N ? to_f(w[i]) : 1.0f;
		}
#pragma unroll
		for (int j = 0; j < R; j++)
			if (threadIdx.x + j * st < N)
				ss += v[j] * v[j];
		float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
#pragma unroll
		for (int j = 0; j < R; j++) {
			int i = threadIdx.x + j * st;
			if (i < N) {
				float u = v[j] * inv;
				if (HAS_W)
					u *= wv[j];
				yr[i] = from_f<A>(u);
			}
		}
		return;
	}
	float ss = 0.0f;
	walk_row(xr, N, [&](int, float v) { ss += v * v; });
	float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
	walk_row(xr, N, [&](int i, float v) {
		v *= inv;
		if (HAS_W)
			v *= to_f(w[i]);
		yr[i] = from_f<A>(v);
	});
}

/* LayerNorm over rows of N, optional weight and bias (a bias only with a weight). grid (rows), block 256.
** Two passes (mean, then the biased variance of x - mean) for accuracy, as the reference. y may equal x. */
template <typename A, typename W, bool HAS_W, bool HAS_B>
__device__ void k_layernorm(A *y, const A *x, const W *w, const W *b, int N, float eps)
{
	const A *xr = x + (long long)blockIdx.x * N;
	A *yr = y + (long long)blockIdx.x * N;
	float s = 0.0f;
	walk_row(xr, N, [&](int, float v) { s += v; });
	float mean = block_sum(s) / (float)N;
	float sq = 0.0f;
	walk_row(xr, N, [&](int, float v) { sq += (v - mean) * (v - mean); });
	float inv = 1.0f / sqrtf(block_sum(sq) / (float)N + eps);
	walk_row(xr, N, [&](int i, float v) {
		v = (v - mean) * inv;
		if (HAS_W)
			v *= to_f(w[i]);
		if (HAS_W && HAS_B)
			v += to_f(b[i]);
		yr[i] = from_f<A>(v);
	});
}

/* Rotary embedding of x[T,H,D] at positions pos[T] (y may equal x). inv_freq[R/2] and cs_scale come from
** the host (the CPU reference computes them, so both paths agree); angle = float(pos) * inv_freq[i] in
** float, cos/sin in float times cs_scale. INTERLEAVED pairs (2i, 2i+1), else (i, i + R/2); dims >= R are
** copied. grid (T*H), block 128 (threads stride over the R/2 pairs and the tail).
** The rotation uses explicitly rounded products (__fmul_rn) so that no FMA is contracted and the result
** differs from ref_rope only through cosf/sinf's last-bit differences. One thread reads and writes both
** members of a pair, so in-place is safe. */
template <typename A, bool INTERLEAVED>
__device__ void k_rope(A *y, const A *x, const int *pos, const float *inv_freq, float cs_scale, int H, int D, int R)
{
	int row = blockIdx.x, t = row / H, half = R / 2;
	const A *xh = x + (long long)row * D;
	A *yh = y + (long long)row * D;
	float p = (float)pos[t];
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float a = __fmul_rn(p, inv_freq[i]);
		float c = __fmul_rn(cosf(a), cs_scale), s = __fmul_rn(sinf(a), cs_scale);
		int i0 = INTERLEAVED ? 2 * i : i, i1 = INTERLEAVED ? 2 * i + 1 : i + half;
		float x0 = to_f(xh[i0]), x1 = to_f(xh[i1]);
		yh[i0] = from_f<A>(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
		yh[i1] = from_f<A>(__fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
	}
	for (int d = 2 * half + threadIdx.x; d < D; d += blockDim.x)
		yh[d] = xh[d];
}

/* Write this step's k[T, G*Dk] and v[T, G*Dv] into the caches at rows pos[t] of sequence slot seq[t]
** (each slot holds S rows). grid (T), block 256. */
template <typename A>
__device__ void k_kv_write(A *kcache, A *vcache, const A *k, const A *v, const int *pos, int KW, int VW,
                           const int *seq, int S)
{
	int t = blockIdx.x;
	long long p = (long long)seq[t] * S + pos[t];
	for (int i = threadIdx.x; i < KW; i += blockDim.x)
		kcache[p * KW + i] = k[(long long)t * KW + i];
	for (int i = threadIdx.x; i < VW; i += blockDim.x)
		vcache[p * VW + i] = v[(long long)t * VW + i];
}

/* Causal attention over the cache: for token t and head h (kv head h / (H/G)), keys 0..pos[t].
** y[T, H*Dv]; q[T, H*Dk]; caches [slots*S, G*Dk] and [slots*S, G*Dv], token t reading the S rows of slot
** seq[t]. One block per (t, h) with an online
** (running max / sum) softmax so any context length works; Dk, Dv <= 256.
** grid (H, T), block 32·NW: NW = 4 for prefills (many blocks), 16 for decode steps, where the H blocks
** alone must cover the context (a warp's groups of keys run one after another: more warps, fewer each).
**
** Warp w takes keys in groups of four, 4w..4w+3, then 4·NW further on, and so on. Its lanes hold q and
** the output accumulator for dims lane + 32i (i < 8) in registers; a group's four k rows and four v
** rows are loaded together (eight rows in flight), four independent dot products end in shuffle sums,
** and the warp keeps its own running max m, sum l and accumulator, rescaled by exp(m_old - m_new)
** whenever the max grows. The warps' states are merged through shared memory at the end. Rows past
** pos[t] are never read. Needs exactly 32·NW threads.
*/
template <typename A, int NW>
__device__ void k_attention(A *y, const A *q, const A *kcache, const A *vcache, const int *pos, int H, int G,
                            int Dk, int Dv, float scale, const int *seq, int S)
{
	const int U = 4; /* keys per warp per group */
	GLM_SH(float, wm, [NW]);
	GLM_SH_AFTER(wm, float, wl, [NW]);
	GLM_SH_AFTER(wl, float, wacc, [NW][256]);
	int h = blockIdx.x, t = blockIdx.y, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int g = h / (H / G), n = pos[t] + 1;
	long long KW = (long long)G * Dk, VW = (long long)G * Dv;
	const A *qh = q + ((long long)t * H + h) * Dk;
	long long base = (long long)seq[t] * S;
	const A *kg = kcache + base * KW + (long long)g * Dk, *vg = vcache + base * VW + (long long)g * Dv;

	float qr[8], acc[8];
#pragma unroll
	for (int i = 0; i < 8; i++) {
		int d = lane + 32 * i;
		qr[i] = d < Dk ? to_f(qh[d]) : 0.0f;
		acc[i] = 0.0f;
	}
	float m = neg_inf(), l = 0.0f;
	int dk_last = Dk - 1, dv_last = Dv - 1;
	for (int j0 = warp * U; j0 < n; j0 += NW * U) {
		/* Load the group's k and v elements first, unconditionally: keys past n read row j0 instead
		** and dims past Dk / Dv re-read the last dim (their q and p factors are 0), so the loads carry
		** no predicates and all issue before the first use. */
		float kx[U][8], vv[U][8], s[U];
#pragma unroll
		for (int u = 0; u < U; u++) {
			int j = j0 + u < n ? j0 + u : j0;
			const A *kj = kg + j * KW, *vj = vg + j * VW;
#pragma unroll
			for (int i = 0; i < 8; i++) {
				int d = lane + 32 * i;
				kx[u][i] = to_f(kj[d < Dk ? d : dk_last]);
				vv[u][i] = to_f(vj[d < Dv ? d : dv_last]);
			}
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			s[u] = 0.0f;
#pragma unroll
			for (int i = 0; i < 8; i++)
				s[u] += qr[i] * kx[u][i]; /* qr is 0 past Dk */
		}
		float mn = m;
#pragma unroll
		for (int u = 0; u < U; u++) {
			s[u] = j0 + u < n ? warp_sum(s[u]) * scale : neg_inf();
			mn = fmaxf(mn, s[u]);
		}
		/* mn is finite: key j0 < n exists. c = 0 for the first group (m = -inf); p = 0 past n */
		float c = expf(m - mn), p[U];
		l *= c;
#pragma unroll
		for (int u = 0; u < U; u++) {
			p[u] = expf(s[u] - mn);
			l += p[u];
		}
#pragma unroll
		for (int i = 0; i < 8; i++) {
			int d = lane + 32 * i;
			if (d < Dv) {
				float a = acc[i] * c;
#pragma unroll
				for (int u = 0; u < U; u++)
					a += p[u] * vv[u][i]; /* p = 0 past n */
				acc[i] = a;
			}
		}
		m = mn;
	}

	if (lane == 0) {
		wm[warp] = m;
		wl[warp] = l;
	}
#pragma unroll
	for (int i = 0; i < 8; i++) {
		int d = lane + 32 * i;
		if (d < Dv)
			wacc[warp][d] = acc[i];
	}
	__syncthreads();
	/* a warp that saw no key has m = -inf, l = 0 and weight exp(-inf) = 0; key 0 always exists */
	float mx = neg_inf();
	for (int w = 0; w < NW; w++)
		mx = fmaxf(mx, wm[w]);
	float wt[NW], sum = 0.0f;
	for (int w = 0; w < NW; w++) {
		wt[w] = expf(wm[w] - mx);
		sum += wl[w] * wt[w];
	}
	A *yh = y + ((long long)t * H + h) * Dv;
	for (int d = threadIdx.x; d < Dv; d += blockDim.x) {
		float o = 0.0f;
		for (int w = 0; w < NW; w++)
			o += wacc[w][d] * wt[w];
		yh[d] = from_f<A>(o / sum);
	}
}

/*
** Causal attention for steps of up to 8 tokens when a head's k and v rows are each ROWB = 128, 256 or
** 512 bytes (Dk = Dv = ROWB / sizeof(A): 64 to 256 dims in bf16, 32 to 128 in f32; the emitter checks)
** and the caches and q are 16-byte aligned (else it runs k_attention<A, 16>); same contract and
** arguments as k_attention otherwise.
** grid (H, T), block 512.
**
** Why: k_attention's lanes hold strided dims, so a warp spends 8 scalar loads on each row and walks its
** keys four at a time; at a decode context of a few hundred keys its H blocks wait on four or more
** dependent rounds of loads. Here a row is ROWB / 16 lanes with one 16-byte load each, so a warp holds
** 32·16 / ROWB rows at once; each such segment of lanes is a worker with its own running max, sum and
** accumulator that takes U keys a round (their k and v rows all loaded before the first use). With
** bf16 128-dim heads the 32 workers cover 256 keys a round: one round of loads for a context of 256.
** The workers' states are merged through shared memory at the end (attn_step_keys and attn_step_merge
** are the two halves, shared with k_attn_step_rope in ops/fused.cuh).
*/
template <typename A, int ROWB>
struct AttnStep {
	static constexpr int D = ROWB / (int)sizeof(A), VEC = 16 / (int)sizeof(A), RL = ROWB / 16, NWK = 16 * (32 / RL);
	static constexpr int U = 8; /* keys per worker per round */
	static_assert(RL == 8 || RL == 16 || RL == 32, "rows of 128, 256 or 512 bytes");
};

/* k_attn_step's loop: this thread's worker (threadIdx.x / RL) takes its keys among rows [0, n) of the
** group's caches (kg, vg: row 0, already at the lane's 16 bytes; RW elements a row) into its running
** max m, sum l and accumulator acc[VEC] (the lane's dims of the value), against qr[VEC] (the lane's dims
** of q). The rows are 16-byte aligned. n = 0 reads nothing. */
template <typename A, int ROWB>
__device__ __forceinline__ void attn_step_keys(const A *kg, const A *vg, long long RW, int n, const float *qr,
                                               float scale, float &m, float &l, float *acc)
{
	using P = AttnStep<A, ROWB>;
	constexpr int VEC = P::VEC, RL = P::RL, NWK = P::NWK, U = P::U;
	int wk = threadIdx.x / RL;
	/* The rounds go by warp (j0 - seg·U, the warp's first key, is what the loop tests) so that all 32
	** lanes take the shuffles below together; a worker past the context sees only masked keys. */
	int seg = (threadIdx.x & 31) / RL;
	for (int j0 = wk * U; j0 - seg * U < n; j0 += NWK * U) {
		uint4 kr[U], vr[U];
#pragma unroll
		for (int u = 0; u < U; u++) { /* keys past n re-read row n - 1; their p is 0 */
			long long j = j0 + u < n ? j0 + u : n - 1;
			kr[u] = __ldg((const uint4 *)(kg + j * RW));
			vr[u] = __ldg((const uint4 *)(vg + j * RW));
		}
		float s[U], mn = m;
#pragma unroll
		for (int u = 0; u < U; u++) {
			union {
				uint4 bits;
				A e[VEC];
			} kv;
			kv.bits = kr[u];
			float d = 0.0f;
#pragma unroll
			for (int i = 0; i < VEC; i++)
				d += qr[i] * to_f(kv.e[i]);
#pragma unroll
			for (int o = RL / 2; o > 0; o >>= 1) /* the row's lanes: an aligned group of RL */
				d += __shfl_xor_sync(0xffffffffu, d, o);
			s[u] = j0 + u < n ? d * scale : neg_inf();
			mn = fmaxf(mn, s[u]);
		}
		/* c = 0 on a worker's first round with a key (m = -inf); mn = -inf: no key yet, nothing changes */
		float c = mn == neg_inf() ? 1.0f : expf(m - mn);
		l *= c;
#pragma unroll
		for (int i = 0; i < VEC; i++)
			acc[i] *= c;
#pragma unroll
		for (int u = 0; u < U; u++) {
			float p = s[u] == neg_inf() ? 0.0f : expf(s[u] - mn);
			union {
				uint4 bits;
				A e[VEC];
			} vv;
			vv.bits = vr[u];
			l += p;
#pragma unroll
			for (int i = 0; i < VEC; i++)
				acc[i] += p * to_f(vv.e[i]);
		}
		m = mn;
	}
}

/* The end of k_attn_step: the workers' states (m, l, acc as attn_step_keys leaves them) merged through
** shared memory into the head's output row yh[0..D). Every thread of the block calls it; at least one
** worker must have seen a key. */
template <typename A, int ROWB>
__device__ __forceinline__ void attn_step_merge(A *yh, float m, float l, const float *acc)
{
	using P = AttnStep<A, ROWB>;
	constexpr int D = P::D, VEC = P::VEC, RL = P::RL, NWK = P::NWK;
	__shared__ float wm[NWK], wl[NWK], wacc[NWK][D];
	int sl = (threadIdx.x & 31) % RL, wk = threadIdx.x / RL;
	if (sl == 0) {
		wm[wk] = m;
		wl[wk] = l;
	}
#pragma unroll
	for (int i = 0; i < VEC; i++)
		wacc[wk][sl * VEC + i] = acc[i];
	__syncthreads();
	/* a worker that saw no key has m = -inf, l = 0 and weight 0 */
	int d = threadIdx.x;
	if (d < D) {
		float mx = neg_inf();
		for (int w = 0; w < NWK; w++)
			mx = fmaxf(mx, wm[w]);
		float o = 0.0f, sum = 0.0f;
		for (int w = 0; w < NWK; w++) {
			float wt = expf(wm[w] - mx);
			sum += wl[w] * wt;
			o += wacc[w][d] * wt;
		}
		yh[d] = from_f<A>(o / sum);
	}
}

template <typename A, int ROWB>
__device__ void k_attn_step(A *y, const A *q, const A *kcache, const A *vcache, const int *pos, int H, int G,
                            int Dk, int Dv, float scale, const int *seq, int S)
{
	using P = AttnStep<A, ROWB>;
	constexpr int D = P::D, VEC = P::VEC, RL = P::RL;
	if (((unsigned long long)q | (unsigned long long)kcache | (unsigned long long)vcache) % 16) {
		k_attention<A, 16>(y, q, kcache, vcache, pos, H, G, Dk, Dv, scale, seq, S); /* unaligned: correct, slower */
		return;
	}
	int h = blockIdx.x, t = blockIdx.y, sl = (threadIdx.x & 31) % RL;
	int g = h / (H / G), n = pos[t] + 1;
	long long RW = (long long)G * D; /* cache row stride */
	long long base = (long long)seq[t] * S;
	const A *kg = kcache + base * RW + (long long)g * D + sl * VEC;
	const A *vg = vcache + base * RW + (long long)g * D + sl * VEC;
	float qr[VEC], acc[VEC];
	gemv_ldx<A, VEC>(q + ((long long)t * H + h) * D + sl * VEC, qr, true, true);
#pragma unroll
	for (int i = 0; i < VEC; i++)
		acc[i] = 0.0f;
	float m = neg_inf(), l = 0.0f;
	attn_step_keys<A, ROWB>(kg, vg, RW, n, qr, scale, m, l, acc);
	attn_step_merge<A, ROWB>(y + ((long long)t * H + h) * D, m, l, acc); /* key 0 always exists */
}

/* Block-wide index of the max of xr[0..N) under ranks_before (first on ties, NaN first); every thread
** gets it. */
template <typename A>
__device__ int block_argmax(const A *xr, int N)
{
	float bv = neg_inf();
	int bi = 0x7fffffff;
	walk_row_vec(xr, N, [&](int i, float v) { keep_best(bv, bi, v, i); });
	block_best(bv, bi);
	return bi;
}

/* Index of the max of each row of x[rows, N] (first on ties). grid (rows), block 256. */
template <typename A>
__device__ void k_argmax(int *y, const A *x, int N)
{
	int i = block_argmax(x + (long long)blockIdx.x * N, N);
	if (threadIdx.x == 0)
		y[blockIdx.x] = i;
}

/* Indices of the k largest per row, largest first, ties to the lower index; k <= 64.
** grid (rows), block 256.
** k rounds of a block-wide argmax; round r only considers elements that rank after round r-1's pick in
** the (value desc, NaN first, index asc) total order, so no marking is needed. With k > N the extra
** slots get -1. */
template <typename A>
__device__ void k_topk(int *y, const A *x, int N, int k)
{
	const A *xr = x + (long long)blockIdx.x * N;
	int *yr = y + (long long)blockIdx.x * k;
	float pv = 0.0f;
	int pi = -1; /* the previous pick; -1 before the first round */
	for (int r = 0; r < k; r++) {
		float bv = neg_inf();
		int bi = 0x7fffffff;
		for (int i = threadIdx.x; i < N; i += blockDim.x) {
			float v = to_f(xr[i]);
			if (pi < 0 || ranks_before(pv, pi, v, i))
				keep_best(bv, bi, v, i);
		}
		block_best(bv, bi);
		if (threadIdx.x == 0)
			yr[r] = bi < N ? bi : -1;
		pv = bv;
		pi = bi;
	}
}

/* Copy a slab: for o < outer, y[(o*dst_ax + dst_at)*inner + i] = x[(o*src_ax + src_at)*inner + i] for
** i < len*inner (slice: dst_at = 0, len = dst_ax; concat part: src_at = 0, len = src_ax).
** grid (ceil(outer*len*inner/256)), block 256. Elements are of type E (any 2- or 4-byte type). */
template <typename E>
__device__ void k_copy_slab(E *y, const E *x, long long outer, long long inner, long long len, long long src_ax,
                            long long src_at, long long dst_ax, long long dst_at)
{
	long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x, run = len * inner;
	if (e >= outer * run)
		return;
	long long o = e / run, i = e - o * run;
	y[(o * dst_ax + dst_at) * inner + i] = x[(o * src_ax + src_at) * inner + i];
}

/* Picks one of four values by index, without a local array. */
__device__ __forceinline__ long long pick4(long long a0, long long a1, long long a2, long long a3, int i)
{
	return i == 0 ? a0 : i == 1 ? a1 : i == 2 ? a2 : a3;
}

/* Permute x (ndim <= 4, dims d0..d3, unused dims 1) so y's axis i is x's axis p[i].
** grid (ceil(numel/256)), block 256.
** Each thread takes one output element in order, splits its index by the output dims d[p[i]] and
** gathers through x's strides s[p[i]] (as ref_permute). */
template <typename E>
__device__ void k_permute(E *y, const E *x, int d0, int d1, int d2, int d3, int p0, int p1, int p2, int p3)
{
	long long s3 = 1, s2 = d3, s1 = (long long)d2 * d3, s0 = (long long)d1 * d2 * d3;
	long long numel = s0 * d0;
	long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= numel)
		return;
	long long o1 = pick4(d0, d1, d2, d3, p1), o2 = pick4(d0, d1, d2, d3, p2), o3 = pick4(d0, d1, d2, d3, p3);
	long long r = e, c3 = r % o3;
	r /= o3;
	long long c2 = r % o2;
	r /= o2;
	long long c1 = r % o1, c0 = r / o1;
	long long src = c0 * pick4(s0, s1, s2, s3, p0) + c1 * pick4(s0, s1, s2, s3, p1) +
			c2 * pick4(s0, s1, s2, s3, p2) + c3 * pick4(s0, s1, s2, s3, p3);
	y[e] = x[src];
}

/* An allgather's parts put in place (see emit_allgather): NCCL leaves rank r's [outer, part] block at
** src + r·outer·part; the gathered tensor [outer, tp, part] wants it at y[o][r][·]. One thread per
** output element; grid ceil(outer·tp·part / 256) blocks of 256. */
template <typename E>
__device__ void k_gather_interleave(E *y, const E *src, long long outer, long long part, int tp)
{
	long long e = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (e >= outer * part * tp)
		return;
	long long p = e % part, r = (e / part) % tp, o = e / (part * tp);
	y[e] = src[(r * outer + o) * part + p];
}

/* ---- one-shot allreduce through peer memory (glmrun's alternative to NCCL for small messages) ---- */

#define P2P_MAXRANK 8
#define P2P_NBMAX 64
#define P2P_FLAGS_BYTES (2 * P2P_MAXRANK * P2P_NBMAX * 4)

/* One rank's view (runtime/cuda.c writes the same layout). A mailbox holds the flags
** [2 slots][P2P_MAXRANK senders][P2P_NBMAX blocks] of u32, then the data [2 slots][tp senders][cap bytes]. */
struct P2pCtl {
	char *mbox[P2P_MAXRANK];     /* every rank's mailbox as this rank addresses it (peer access) */
	unsigned *seq;               /* this rank's completed calls: the next call's epoch is seq + 1 */
	unsigned *arrive;            /* blocks of the current call that have finished */
	int rank, tp;
	long long cap;               /* bytes of one sender's part of one slot */
};

/* A flag write that publishes everything the block wrote before it, to every GPU. */
__device__ __forceinline__ void p2p_put_flag(unsigned *p, unsigned v)
{
#ifdef GLM_SIMT /* the CPU emulator: a release store between its threads */
	__atomic_store_n(p, v, __ATOMIC_RELEASE);
#else
	asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
#endif
}

__device__ __forceinline__ unsigned p2p_get_flag(const unsigned *p)
{
#ifdef GLM_SIMT /* the peer's store comes from another OS thread: let this block's other fibers run first */
	simt_peer_wait();
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
#else
	unsigned v;
	asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
	return v;
#endif
}

/* 16 bytes of A summed over the tp parts at base + q·stride + off, in rank order (so every rank gets
** the same bits), read through L2: peers write these bytes from outside this SM's L1. */
template <typename A>
__device__ __forceinline__ uint4 p2p_sum16(const char *base, long long stride, int tp, long long off)
{
	const int E = 16 / (int)sizeof(A);
	float acc[16 / sizeof(A)];
	for (int j = 0; j < E; j++)
		acc[j] = 0.0f;
	for (int q = 0; q < tp; q++) {
		uint4 v = __ldcg((const uint4 *)(base + q * stride + off));
		const A *e = (const A *)&v;
		for (int j = 0; j < E; j++)
			acc[j] += to_f(e[j]);
	}
	uint4 out;
	A *o = (A *)&out;
	for (int j = 0; j < E; j++)
		o[j] = from_f<A>(acc[j]);
	return out;
}

/* The exchange of block b of call e: its 16-byte units [lo, hi) of x into slot e&1 of every rank's mailbox as
** sender `rank`, its flag raised there, then (on return) every sender's flag for block b seen here. */
__device__ __forceinline__ void p2p_exchange(const uint4 *xv, long long lo, long long hi, unsigned e, int b,
                                             const P2pCtl *c)
{
	const int slot = (int)(e & 1u), tp = c->tp, me = c->rank;
	for (int q = 0; q < tp; q++) {
		uint4 *to = (uint4 *)(c->mbox[q] + P2P_FLAGS_BYTES + ((long long)slot * tp + me) * c->cap);
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x)
			to[i] = xv[i];
	}
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence_system();
		for (int q = 0; q < tp; q++)
			p2p_put_flag((unsigned *)c->mbox[q] + (slot * P2P_MAXRANK + me) * P2P_NBMAX + b, e);
	}
	if ((int)threadIdx.x < tp) {
		const unsigned *f = (const unsigned *)c->mbox[me] + (slot * P2P_MAXRANK + threadIdx.x) * P2P_NBMAX + b;
		while (p2p_get_flag(f) != e)
			;
	}
	__syncthreads();
}

/* The block is done with call e: the last block of the grid to finish advances seq for the next call. */
__device__ __forceinline__ void p2p_arrive(unsigned e, const P2pCtl *c)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		__threadfence();
		if (atomicAdd(c->arrive, 1u) == gridDim.x - 1) {
			*c->arrive = 0;
			*(volatile unsigned *)c->seq = e;
			__threadfence();
		}
	}
}

/*
** y = the sum over tp ranks of x (n elements), one launch on every rank with the same n and grid. Block
** b pushes its chunk of x into slot e&1 of every rank's mailbox (its own included) as sender `rank`,
** raises its flag there, waits until all tp senders' flags for block b in its own mailbox equal e,
** then sums its chunk of the tp parts in rank order. The epoch e = seq + 1 counts calls, which every
** rank makes in the same order, so a flag equal to e is this call's. Two slots suffice: a rank writes
** slot e&1 again only in call e+2, after waiting in call e+1 for every peer, each of which had finished
** call e (kernels on a stream run in order). The last block to finish advances seq for the next call.
** Needs n·sizeof(A) a multiple of 16 and at most cap, x and y 16-byte aligned, all grids co-resident
** (blocks spin): grid nb <= P2P_NBMAX blocks of 512.
*/
template <typename A>
__device__ void k_p2p_allreduce(A *y, const A *x, long long n, const P2pCtl *c)
{
	const unsigned e = *(volatile const unsigned *)c->seq + 1;
	const long long nv = n * (long long)sizeof(A) / 16, per = (nv + gridDim.x - 1) / gridDim.x;
	const long long lo = blockIdx.x * per, hi = lo + per < nv ? lo + per : nv;
	p2p_exchange((const uint4 *)x, lo, hi, e, blockIdx.x, c);
	const char *parts = c->mbox[c->rank] + P2P_FLAGS_BYTES + (long long)(e & 1u) * c->tp * c->cap;
	uint4 *yv = (uint4 *)y;
	for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x)
		yv[i] = p2p_sum16<A>(parts, c->cap, c->tp, i * 16);
	p2p_arrive(e, c);
}

/*
** y = the tp ranks' x (bytes each) one after another in rank order, NCCL's allgather through the same
** mailbox, slots, flags and epoch as k_p2p_allreduce (so the two may follow each other in any order): block
** b exchanges its chunk as there, then copies its chunk of each part to its place in y. Only the persistent
** decode kernel runs it (the logits' allgather as a task, below). Needs bytes a multiple of 16 and at most
** cap, x and y 16-byte aligned, all blocks co-resident; grid nb <= P2P_NBMAX.
*/
__device__ void k_p2p_allgather(char *y, const char *x, long long bytes, const P2pCtl *c)
{
	const unsigned e = *(volatile const unsigned *)c->seq + 1;
	const long long nv = bytes / 16, per = (nv + gridDim.x - 1) / gridDim.x;
	const long long lo = blockIdx.x * per, hi = lo + per < nv ? lo + per : nv;
	p2p_exchange((const uint4 *)x, lo, hi, e, blockIdx.x, c);
	const char *parts = c->mbox[c->rank] + P2P_FLAGS_BYTES + (long long)(e & 1u) * c->tp * c->cap;
	for (int q = 0; q < c->tp; q++) {
		const uint4 *from = (const uint4 *)(parts + q * c->cap);
		uint4 *yv = (uint4 *)(y + q * bytes);
		for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x)
			yv[i] = __ldcg(from + i);
	}
	p2p_arrive(e, c);
}

#ifdef GLM_PERSIST
/* A collective's argument record in the persistent kernel (glmrun writes it, 32 bytes): destination, source,
** the source's bytes on this rank, the P2P control block. */
struct GlmPColl {
	void *y;
	const void *x;
	long long bytes;
	const P2pCtl *c;
};
static_assert(sizeof(GlmPColl) == 32, "the layout glmrun writes");

/* The bodies of a tensor-parallel step's collectives as persistent tasks (emit_cuda_persist's dispatch). */
template <typename A>
__device__ void glm_p_allreduce(const unsigned char *arg)
{
	const GlmPColl *p = (const GlmPColl *)arg;
	k_p2p_allreduce<A>((A *)p->y, (const A *)p->x, p->bytes / (long long)sizeof(A), p->c);
}

__device__ void glm_p_allgather(const unsigned char *arg)
{
	const GlmPColl *p = (const GlmPColl *)arg;
	k_p2p_allgather((char *)p->y, (const char *)p->x, p->bytes, p->c);
}
#endif

/* murmur3's 32-bit finalizer: a bijective avalanche mix. */
__device__ __forceinline__ unsigned mix32(unsigned h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

/* A float's position in the total order of floats as an unsigned key (-0 taken as +0), so thresholds
** can be searched bit by bit: key(a) < key(b) iff a < b for non-NaN a, b. */
__device__ __forceinline__ unsigned order_key(float f)
{
	unsigned u = __float_as_uint(f);
	if (u == 0x80000000u)
		u = 0;
	return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/* Exclusive prefix sum of v over the block in thread order; *total gets the block's sum. Every thread
** gets its own prefix. */
__device__ __forceinline__ int block_scan_excl(int v, int *total)
{
	GLM_SH_LANE(int, part, [32]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	int incl = v;
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffffu, incl, o);
		if (lane >= o)
			incl += u;
	}
	__syncthreads();
	if (lane == 31)
		part[warp] = incl;
	__syncthreads();
	int w = lane < nw ? part[lane] : 0, wincl = w; /* every warp scans the warp totals itself */
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_up_sync(0xffffffffu, wincl, o);
		if (lane >= o)
			wincl += u;
	}
	*total = __shfl_sync(0xffffffffu, wincl, 31);
	return __shfl_sync(0xffffffffu, wincl - w, warp) + incl - v;
}

/* Sorts one key per thread, descending, into keys[0..blockDim.x) (bitonic; blockDim.x a power of two).
** Every thread may read the whole result. */
__device__ __forceinline__ void block_sort_desc(unsigned *keys, unsigned mine)
{
	int tid = threadIdx.x, n = blockDim.x;
	__syncthreads(); /* earlier readers of keys are done */
	keys[tid] = mine;
	__syncthreads();
	for (int size = 2; size <= n; size <<= 1)
		for (int stride = size >> 1; stride > 0; stride >>= 1) {
			int j = tid ^ stride;
			if (j > tid) {
				unsigned a = keys[tid], b = keys[j];
				bool desc = (tid & size) == 0; /* the direction of this bitonic run */
				if (desc ? a < b : a > b) {
					keys[tid] = b;
					keys[j] = a;
				}
			}
			__syncthreads();
		}
}

/* Whether f is a NaN or an infinity (exponent bits all ones): k_sample's check of the logits. */
__device__ __forceinline__ int non_finite(float f)
{
	return (__float_as_uint(f) & 0x7f800000u) == 0x7f800000u;
}

/* The Gumbel noise of token i at step hash hs (k_sample step 3): -log(-log(u)), u in (0, 1). */
__device__ __forceinline__ float gumbel(unsigned hs, int i)
{
	unsigned h = mix32(hs ^ mix32((unsigned)i + 0x6a09e667u));
	float u = ((float)(h >> 9) + 0.5f) * 1.1920928955078125e-7f;
	return -logf(-logf(u));
}

/* The logits a sampling step visits: the whole row, or a candidate list compacted into shared memory.
** visit(f) calls f(index, logit) for each element of this thread's share. */
template <typename A>
struct SampleRow {
	const A *logits;
	int V;
	template <typename F> __device__ void visit(F f) const
	{
		walk_row(logits, V, f);
	}
};

struct SampleList {
	const float *l;
	const int *idx;
	int n;
	template <typename F> __device__ void visit(F f) const
	{
		for (int j = threadIdx.x; j < n; j += blockDim.x)
			f(idx[j], l[j]);
	}
};

/*
** Steps 1-3 of k_sample (see there) over `set`, which must hold every token that can be kept. lmax and
** imax are the row's max logit and its first index; hs the step hash. zall >= 0 is step 2's Z over the
** whole row, given when top_k is off and the set is a candidate list; else Z is summed here. Step 3
** skips, exactly, every token that cannot win: g <= gmax for every u, so a token with z + gmax + 1 <
** the best score so far (which starts at imax's own score) cannot reach it.
*/
template <typename Set>
__device__ int sample_kept(const Set &set, int V, float temp, int top_k, float top_p, float lmax, int imax,
                           unsigned hs, float zall)
{
	unsigned tau = 0;
	if (top_k > 0 && top_k < V) {
		for (int b = 31; b >= 0; b--) {
			unsigned c = tau | (1u << b);
			int cnt = 0;
			set.visit([&](int, float l) { cnt += order_key(l) >= c; });
			if (block_sum_int(cnt) >= top_k)
				tau = c;
		}
	}
	float M = lmax / temp;
	if (top_p < 1.0f) {
		float z = zall;
		if (z < 0.0f) {
			float zs = 0.0f;
			set.visit([&](int, float l) {
				if (order_key(l) >= tau)
					zs += expf(l / temp - M);
			});
			z = block_sum(zs);
		}
		float target = top_p * z;
		unsigned tp = 0;
		for (int b = 31; b >= 0; b--) {
			unsigned c = tp | (1u << b), lo = c > tau ? c : tau;
			float mass = 0.0f;
			set.visit([&](int, float l) {
				if (order_key(l) >= lo)
					mass += expf(l / temp - M);
			});
			if (block_sum(mass) >= target)
				tp = c;
		}
		unsigned kmax = order_key(lmax);
		tp = tp < kmax ? tp : kmax;
		tau = tau > tp ? tau : tp;
	}
	float gmax = -logf(-logf(((float)0x7fffff + 0.5f) * 1.1920928955078125e-7f)) + 1.0f;
	float bv = M + gumbel(hs, imax);
	int bi = imax;
	set.visit([&](int i, float l) {
		if (order_key(l) < tau)
			return;
		float z = l / temp;
		if (z + gmax < bv)
			return;
		keep_best(bv, bi, z + gumbel(hs, i), i);
	});
	block_best(bv, bi);
	return bi;
}

/*
** The greedy sampler's argmax of logits[0..V) (k_sample's row b = blockIdx.x), split over the row's
** gridDim.y blocks. Block y takes the best (value, index) under ranks_before of its slice [y·L, y·L + L)
** within [0, V), L = ceil(V / gridDim.y) rounded up to whole 16-byte vectors (so the slices of an
** aligned row are aligned and walk_row_vec loads them in vectors; an empty slice gives (-inf,
** 0x7fffffff), which every element outranks), stores it at part_v/part_i[b·gridDim.y + y] and counts
** itself in done[b] (the threadFenceReduction pattern, as k_mla_split: thread 0's fence orders the part
** before the count, the last block's fence orders the count before its reads). The row's last block
** to count clears done[b] for the next launch and takes the best of the parts (L2 reads, __ldcg).
** ranks_before is a strict total order on distinct indices, so the result is the one-block argmax's
** (block_argmax: the first index of the max, NaN first) whatever order the parts arrive in. Returns
** the token in every thread of the row's last block, -1 in the row's other blocks. done[] must start at
** zero (glmrun clears it once; every launch leaves it zero). Why: one block streaming a whole vocabulary
** row is slow (bench/NOTES.md entry 27); the slices are read at once, by as many SMs.
*/
template <typename A>
__device__ int split_argmax(const A *logits, int V, float *part_v, int *part_i, unsigned *done, int *nf)
{
	const int VE = 16 / (int)sizeof(A);
	int nb = gridDim.y, y = blockIdx.y;
	long long b = blockIdx.x;
	int L = ((V + nb - 1) / nb + VE - 1) / VE * VE;
	int lo = y * L < V ? y * L : V, hi = lo + L < V ? lo + L : V;
	float bv = neg_inf();
	int bi = 0x7fffffff;
	int nfc = 0; /* this thread's NaN and Inf count (k_sample's nf) */
	walk_row_vec(logits + lo, hi - lo, [&](int i, float v) {
		keep_best(bv, bi, v, lo + i);
		nfc += non_finite(v);
	});
	block_best(bv, bi);
	nfc = nf ? block_sum_int(nfc) : 0;
	GLM_SH_LANE(int, last, );
	if (threadIdx.x == 0) {
		if (nfc)
			atomicAdd(nf, nfc); /* counted before the block is, so the last block sees it */
		part_v[b * nb + y] = bv;
		part_i[b * nb + y] = bi;
		__threadfence();
		last = atomicAdd(done + b, 1u) == (unsigned)nb - 1;
		if (last)
			done[b] = 0; /* all nb blocks have counted */
	}
	__syncthreads();
	if (!last)
		return -1;
	__threadfence();
	if (nf && threadIdx.x == 0) { /* the row's verdict, and the count cleared for the next launch */
		nf[1] = __ldcg(nf) != 0;
		nf[0] = 0;
	}
	bv = neg_inf();
	bi = 0x7fffffff;
	for (int j = threadIdx.x; j < nb; j += blockDim.x)
		keep_best(bv, bi, __ldcg(part_v + b * nb + j), __ldcg(part_i + b * nb + j));
	block_best(bv, bi);
	return bi;
}

/*
** Sampling from the last row of logits[V] and the step advance, so a decode step needs no host round
** trip. params: [0] temperature (<= 0: greedy argmax), [1] top_k (<= 0: off), [2] top_p (>= 1: off),
** [3] seed (as float bits of a uint32 via __float_as_uint). step[0] counts sampled tokens (the RNG
** counter). Keeps tokens with logit/temp among the top_k and within top_p probability mass, then takes
** argmax(logit/temp + Gumbel noise) with noise from a counter-based hash of (seed, step[0], index) —
** deterministic for a seed. Writes the token to out[step[0]] (the generated-ids ring, capacity cap)
** and to next_token[0], sets next_pos[0] = pos + 1, and increments step[0].
** grid (rows, NB), block 1024; NB = SAMPLE_NB (gemv_shape.h) in glmrun, any NB >= 1 works. Greedy, the NB
** blocks of row b split its argmax (split_argmax) and the last of them to finish writes the token and
** advances the state; part_v and part_i hold NB·rows partial maxima, done rows counters, which must be
** zero before the first launch and are left zero. Otherwise block (b, 0) samples row b alone and the
** blocks y > 0 return at once.
**
** The algorithm exactly, so that a CPU twin can reproduce it. Blocks (b, .) sample row b of `logits` (rows
** of V) for the sequence in slot seq[b], with seed = seed + seq[b] and its own counters at index b of
** next_token, next_pos and step (and ring out + b·cap); below, for one row, l_i = float(logits[i]); s = step[0]; key(f) = order_key (the float's
** bits made monotone, -0 as +0); every tie goes to the lower index. Logits are assumed finite:
** with nf (two ints a row; [2b] zero before the first launch, left zero) nf[2b + 1] is set to 1 when row b
** holds a NaN or an Inf, else 0, for glmrun to refuse the token (the greedy split counts them per block).
**   Greedy (temperature <= 0 or NaN): token = the first index of the max of l (as k_argmax).
**   Otherwise, with z_i = l_i / temperature (IEEE float division):
**   1. tau = 0. If 0 < top_k < V: tau = the largest 32-bit value with #{i : key(l_i) >= tau} >= top_k,
**      found bit by bit from bit 31 down (tau |= bit while the count stays >= top_k): the key of the
**      top_k-th largest logit. All logits equal to it are kept (as HF's TopK).
**   2. If top_p < 1: M = (max_i l_i) / temperature; e_i = expf(z_i - M); Z = sum of e_i over key(l_i) >=
**      tau; tp = the largest 32-bit value with sum{e_i : key(l_i) >= max(tau, tp)} >= top_p * Z, again
**      bit by bit; tp = min(tp, key(max_i l_i)) so the top token always stays; tau = max(tau, tp). This
**      keeps the smallest top set whose probability reaches top_p (HF's TopP).
**   3. For each kept i (key(l_i) >= tau): h = mix32(mix32(mix32(seed ^ 0x9e3779b9) ^ s) ^
**      mix32(i + 0x6a09e667)) with mix32 = murmur3's fmix32; u = ((h >> 9) + 0.5) * 2^-23, exact in
**      float, in (0, 1); g = -logf(-logf(u)); token = the first index of the max of z_i + g (float).
** The sums in step 2 are float sums in an order of the GPU's choosing, so a twin (in float or double)
** agrees except where the mass sits within rounding of top_p·Z; logf's last bit can likewise split a
** near tie in step 3.
** Then: out[s % cap] = token (when cap > 0), next_token[0] = token, next_pos[0] += 1 (next_pos holds the
** position just evaluated, so it becomes pos + 1), step[0] = s + 1.
**
** Speed: greedy, the row's NB slices are read at once by NB blocks (with NB 48 and 1024 threads, one
** 16-byte load a thread for V up to 196608 f32 or 393216 bf16), then one block merges NB partials (an
** L2 round trip more). Sampling: one block walks the row, so each pass over V costs. With top_k or
** top_p on, a first pass takes the max and each thread's largest key; sorted, the k-th largest of those
** per-thread maxima is a key tau0 with at least k logits at or above it. With top_k (<= 1024) at k =
** top_k no token below tau0 can survive; with top_p alone k = 1024, 256, 64 are tried, and a tau0
** qualifies once the mass at or above it reaches top_p·Z. When at most 4096 logits reach tau0 they are
** compacted, in thread order, into shared memory and steps 1-3 run over that list; otherwise over the
** row (the same tokens, more passes: a broad distribution with top_p alone costs about 32 passes over
** V). Step 3 skips the hash and logs of tokens too far below the best score to win.
*/
template <typename A>
__device__ void k_sample(int *out, int cap, int *next_token, int *next_pos, int *step, const A *logits, int V,
                         const float *params, const int *seq, float *part_v, int *part_i, unsigned *done,
                         int *nf = nullptr)
{
	/* block b samples row b of the step (one sequence of a batch): its own token, position, step counter
	** and history ring; the seed is offset by the row's sequence slot, so slot 0 draws as a lone sequence */
	int b = blockIdx.x;
	logits += (long long)b * V;
	out += (long long)b * cap;
	next_token += b, next_pos += b, step += b;
	nf = nf ? nf + 2 * b : nf;
	const int CAP = 4096; /* candidate list capacity */
	__shared__ float cand_l[CAP];
	__shared__ int cand_i[CAP];
	__shared__ unsigned maxkeys[1024]; /* the per-thread maxima, sorted */
	float temp = params[0], top_p = params[2];
	int top_k = (int)params[1];
	unsigned seed = __float_as_uint(params[3]) + (unsigned)seq[b];
	int s = step[0];
	int token;

	if (!(temp > 0.0f)) {
		token = split_argmax(logits, V, part_v, part_i, done, nf);
		if (token < 0) /* not the row's last block: its part is counted */
			return;
	} else if (blockIdx.y > 0) { /* one block samples the row */
		return;
	} else {
		bool use_k = top_k > 0 && top_k < V, use_p = top_p < 1.0f;
		unsigned hs = mix32(mix32(seed ^ 0x9e3779b9u) ^ (unsigned)s);
		/* the row's max (value, first index) and this thread's largest key (0 when it has none) */
		float bv = neg_inf();
		int bi = 0x7fffffff, nfc = 0;
		walk_row(logits, V, [&](int i, float l) {
			keep_best(bv, bi, l, i);
			nfc += non_finite(l);
		});
		unsigned mykey = bi != 0x7fffffff ? order_key(bv) : 0;
		block_best(bv, bi);
		nfc = nf ? block_sum_int(nfc) : 0;
		if (nf && threadIdx.x == 0)
			nf[1] = nfc != 0;
		float lmax = bv;
		int imax = bi;
		SampleRow<A> row = {logits, V};

		if (!use_k && !use_p) {
			token = sample_kept(row, V, temp, top_k, top_p, lmax, imax, hs, -1.0f);
		} else {
			/* thresholds tau0 to try, most permissive first: the k-th largest per-thread max has at
			** least k logits at or above it. top_k: k = top_k (for k past blockDim.x the bound is 0,
			** the whole row); top_p alone: k = 1024, 256, 64, and the first whose logits fit in the
			** list and hold top_p·Z wins. */
			const int NTH = 3;
			int nt = blockDim.x;
			block_sort_desc(maxkeys, mykey);
			unsigned th[NTH];
#pragma unroll /* static indices keep the arrays in registers */
			for (int j = 0; j < NTH; j++) {
				int k = use_k ? top_k : 1024 >> (2 * j);
				th[j] = k <= nt ? maxkeys[k - 1] : 0;
			}
			float M = lmax / temp, za = 0.0f, mass[NTH];
			int cnt[NTH];
#pragma unroll
			for (int j = 0; j < NTH; j++) {
				cnt[j] = 0;
				mass[j] = 0.0f;
			}
			bool p_only = use_p && !use_k;
			walk_row(logits, V, [&](int, float l) {
				unsigned key = order_key(l);
				float e = p_only ? expf(l / temp - M) : 0.0f;
				za += e;
#pragma unroll
				for (int j = 0; j < NTH; j++) {
					cnt[j] += key >= th[j];
					mass[j] += key >= th[j] ? e : 0.0f;
				}
			});
			float zall = p_only ? block_sum(za) : -1.0f;
			int pick = -1, mycnt = 0;
#pragma unroll
			for (int j = 0; j < NTH; j++) {
				bool fits = block_sum_int(cnt[j]) <= CAP;
				if (p_only)
					fits = block_sum(mass[j]) >= top_p * zall && fits;
				if (fits && pick < 0) {
					pick = j;
					mycnt = cnt[j];
				}
			}
			if (pick >= 0) {
				/* compact the candidates in thread order (deterministic) into shared memory */
				unsigned tau0 = pick == 0 ? th[0] : pick == 1 ? th[1] : th[2];
				int total, off = block_scan_excl(mycnt, &total);
				walk_row(logits, V, [&](int i, float l) {
					if (order_key(l) >= tau0) {
						cand_l[off] = l;
						cand_i[off] = i;
						off++;
					}
				});
				__syncthreads();
				SampleList set = {cand_l, cand_i, total};
				token = sample_kept(set, V, temp, top_k, top_p, lmax, imax, hs, zall);
			} else {
				token = sample_kept(row, V, temp, top_k, top_p, lmax, imax, hs, -1.0f);
			}
		}
	}

	if (threadIdx.x == 0) {
		if (cap > 0)
			out[s % cap] = token;
		next_token[0] = token;
		next_pos[0] = next_pos[0] + 1;
		step[0] = s + 1;
	}
}

/* ---- MLA, the DSA indexer, MoE routing and experts, transposed matmul ---- */

/* y[z,M,N] = a[z,M,K]·b[z,N,K]ᵀ (the second operand stored like a linear weight), z = blockIdx.z.
** grid (ceil(N/8), M, B), block 256.
** One warp per output (m = blockIdx.y, n = blockIdx.x*8 + warp): the lanes stride over K, so both rows
** are read coalesced, and a shuffle sum finishes the dot product. */
template <typename A, typename B_>
__device__ void k_matmul_tb(A *y, const A *a, const B_ *b, int M, int K, int N)
{
	int lane = threadIdx.x & 31, n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5), m = blockIdx.y;
	long long z = blockIdx.z;
	if (n >= N) /* uniform per warp */
		return;
	const A *ar = a + (z * M + m) * K;
	const B_ *br = b + (z * N + n) * K;
	float s = 0.0f;
#pragma unroll 4
	for (int k = lane; k < K; k += 32)
		s += to_f(ar[k]) * to_f(br[k]);
	s = warp_sum(s);
	if (lane == 0)
		y[(z * M + m) * N + n] = from_f<A>(s);
}

/* Latent-cache write: cache[seq[t]*S + pos[t], :D] = kv[t, :D] (also the DSA indexer's key cache).
** grid (T), block 256. */
template <typename A>
__device__ void k_mla_write(A *cache, const A *kv, const int *pos, int D, const int *seq, int S)
{
	int t = blockIdx.x;
	long long p = (long long)seq[t] * S + pos[t];
	for (int i = threadIdx.x; i < D; i += blockDim.x)
		cache[p * D + i] = kv[(long long)t * D + i];
}

/*
** Latent (MLA) attention in the absorbed form over one shared key/value row per position (MQA), as
** ref_mla: for token t = blockIdx.y and head h = blockIdx.x, over cache rows s <= pos[t] (when sel !=
** nullptr only the rows sel[t*nsel + j], j < nsel, that are >= 0 and <= pos[t]):
**   y[t, h*Dv + i] = sum_s softmax_s(scale · q[t, h*Dk : +Dk]·cache[s, :Dk]) · cache[s, i], i < Dv
** (the values are the first Dv entries of the key row); token t reads the S rows of slot seq[t].
** Dk <= 1024, Dv <= 4·blockDim.x (512).
** grid (H, T), block 128.
**
** q is kept in shared memory as float. The candidate rows go in chunks of 32: each warp scores 8 of
** them (lanes stride over Dk, a shuffle sum per row) into shared memory; then every thread folds the
** chunk into its own running max / sum (online softmax, so any context length works) and into its
** accumulators for outputs tid + 128·i (i < 4), reading the value rows coalesced across the block.
** Every thread computes the same max and sum, so no further reduction is needed.
** sel entries are taken as listed: they must be distinct (the indexer's top-k is); a repeated row
** would count twice where ref_mla counts it once. With no visible row at all the output is 0/0 = NaN,
** as ref_mla's. glmc runs this kernel for large steps only (many tokens fill the GPU by themselves);
** decode steps take k_mla_split, the same result spread over the context.
*/
template <typename A>
__device__ void k_mla(A *y, const A *q, const A *cache, const int *pos, const int *sel, int nsel, int H, int Dk,
                      int Dv, float scale, const int *seq, int S)
{
	const int CH = 32, NACC = 4; /* rows per chunk; outputs per thread */
	GLM_SH(float, qs, [1024]);
	GLM_SH_AFTER(qs, float, ps, [CH]);
	GLM_SH_AFTER(ps, int, rows, [CH]);
	int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	int nw = blockDim.x >> 5, p = pos[t];
	int n = sel ? nsel : p + 1; /* candidates */
	const int *st = sel ? sel + (long long)t * nsel : nullptr;
	const A *qh = q + ((long long)t * H + h) * Dk;
	cache += (long long)seq[t] * S * Dk;
	for (int i = tid; i < Dk; i += blockDim.x)
		qs[i] = to_f(qh[i]);

	float acc[NACC], m = neg_inf(), l = 0.0f;
#pragma unroll
	for (int i = 0; i < NACC; i++)
		acc[i] = 0.0f;
	for (int j0 = 0; j0 < n; j0 += CH) {
		__syncthreads(); /* qs is written; the previous chunk's ps and rows are read */
		for (int jj = warp; jj < CH; jj += nw) {
			int j = j0 + jj, s = -1;
			if (j < n) {
				s = st ? st[j] : j;
				s = s <= p ? s : -1;
			}
			float d = neg_inf();
			if (s >= 0) { /* uniform per warp */
				const A *kr = cache + (long long)s * Dk;
				float a = 0.0f;
#pragma unroll 4
				for (int i = lane; i < Dk; i += 32)
					a += qs[i] * to_f(kr[i]);
				d = warp_sum(a) * scale;
			}
			if (lane == 0) {
				ps[jj] = d;
				rows[jj] = s < 0 ? -1 : s;
			}
		}
		__syncthreads();
		float mn = m;
		for (int jj = 0; jj < CH; jj++)
			mn = fmaxf(mn, ps[jj]);
		if (mn == neg_inf()) /* nothing visible so far: the same decision in every thread */
			continue;
		float c = expf(m - mn); /* 0 while m = -inf */
		l *= c;
#pragma unroll
		for (int i = 0; i < NACC; i++)
			acc[i] *= c;
		for (int jj = 0; jj < CH; jj++) {
			int s = rows[jj];
			if (s < 0)
				continue;
			float e = expf(ps[jj] - mn);
			const A *vr = cache + (long long)s * Dk;
			l += e;
#pragma unroll
			for (int i = 0; i < NACC; i++) {
				int d = tid + i * blockDim.x;
				if (d < Dv)
					acc[i] += e * to_f(vr[d]);
			}
		}
		m = mn;
	}
	A *yh = y + ((long long)t * H + h) * Dv;
#pragma unroll
	for (int i = 0; i < NACC; i++) {
		int d = tid + i * blockDim.x;
		if (d < Dv)
			yh[d] = from_f<A>(acc[i] / l);
	}
}

/* The number of ranges the split MLA kernels cut n candidates into: at most ns (the launch's), and at
** least 16 candidates per range, so a short context is not spread over blocks that each do too little
** to pay for its partial result, whose merge costs the last block of a group more time per range.
** (32, one full pass of k_mla_split a range, was slower: bench/NOTES.md entry 17.) */
__host__ __device__ __forceinline__ int mla_split_ranges(int n, int ns)
{
	int r = (n + 15) / 16;
	return r < 1 ? 1 : r > ns ? ns : r;
}

/* One warp: the merge weights of nr <= 256 split-attention states of a head, (m, l) at ml[r·ms], read
** from L2 (written by other blocks) in one round, all loads in flight: wx[r] = exp(m_r - max m), 0 for
** m_r = -inf (a range with nothing visible); returns the denominator Σ wx[r]·l_r on every lane (lane
** order r = lane, lane + 32, ...). Shared by k_mla_split's merge and k_mla_vabsorb's, so that the two
** give the same bits. */
__device__ __forceinline__ float mla_merge_weights(const float *ml, int nr, long long ms, float *wx)
{
	int lane = threadIdx.x & 31;
	float mr[8], lr[8], m = neg_inf();
#pragma unroll
	for (int i = 0; i < 8; i++) {
		int r = lane + 32 * i;
		mr[i] = r < nr ? __ldcg(ml + r * ms) : neg_inf();
		lr[i] = r < nr ? __ldcg(ml + r * ms + 1) : 0.0f;
		m = fmaxf(m, mr[i]);
	}
	m = warp_max(m);
	float l = 0.0f;
#pragma unroll
	for (int i = 0; i < 8; i++) {
		float e = mr[i] == neg_inf() ? 0.0f : expf(mr[i] - m);
		if (lane + 32 * i < nr)
			wx[lane + 32 * i] = e;
		l += e * lr[i];
	}
	return warp_sum(l);
}

/* Σ_r w[r]·src[r·rs .. +3] over nr <= 256 split-attention ranges of one head's 4 output dims (float4),
** 16 ranges' loads in flight, then their products summed in range order; a range of weight 0 (nothing
** visible, or none at all: its acc may be stale, even NaN) is skipped, which gives the bits a 0·acc would
** for a finite acc. Shared by k_mla_split's merge and k_mla_vabsorb's, so that the two agree bit for bit. */
__device__ __forceinline__ float4 mla_merge_sum4(const float *src, long long rs, const float *w, int nr)
{
	float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
	for (int r0 = 0; r0 < nr; r0 += 16) {
		float4 a[16];
#pragma unroll
		for (int i = 0; i < 16; i++)
			a[i] = r0 + i < nr && w[r0 + i] != 0.0f ? __ldcg((const float4 *)(src + (r0 + i) * rs))
			                                        : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
		for (int i = 0; i < 16; i++) {
			float wr = r0 + i < nr ? w[r0 + i] : 0.0f;
			if (wr != 0.0f)
				sum.x += wr * a[i].x, sum.y += wr * a[i].y, sum.z += wr * a[i].z, sum.w += wr * a[i].w;
		}
	}
	return sum;
}

/* The same for one output dim (widths not a multiple of 4). */
__device__ __forceinline__ float mla_merge_sum1(const float *src, long long rs, const float *w, int nr)
{
	float sum = 0.0f;
	for (int r = 0; r < nr; r++)
		if (w[r] != 0.0f)
			sum += w[r] * __ldcg(src + r * rs);
	return sum;
}

/* k_mla_split's q rows as float: qs[e] = qb[e] for e < nq (the block's heads' rows), 0 up to HB·Dk (the
** missing heads of the last group score 0, unused). In 16-byte vectors when the rows allow, a thread's
** loads (up to 4) all issued before its first store: a loop that stores between its loads waits for each,
** and its generic pointer keeps pos's load behind them too (3 dependent round trips at GLM-4.7-Flash's
** 4 heads of 576; bench/NOTES.md entry 33). */
template <typename A, int HB>
__device__ __forceinline__ void mla_split_stage_q(float *qs, const A *qb, int nq, int Dk)
{
	constexpr int VA = 16 / (int)sizeof(A), NQ = 4;
	int tid = threadIdx.x, nt = blockDim.x, e0 = 0;
	if (((unsigned long long)qb & 15) == 0 && Dk % VA == 0) {
		union {
			uint4 bits;
			A e[VA];
		} qv[NQ];
#pragma unroll
		for (int i = 0; i < NQ; i++)
			if ((tid + i * nt) * VA < nq)
				qv[i].bits = __ldg((const uint4 *)qb + tid + i * nt);
#pragma unroll
		for (int i = 0; i < NQ; i++) {
			int e = (tid + i * nt) * VA;
			if (e < HB * Dk)
#pragma unroll
				for (int j = 0; j < VA; j++)
					qs[e + j] = e < nq ? to_f(qv[i].e[j]) : 0.0f;
		}
		e0 = NQ * nt * VA;
	}
	for (int e = e0 + tid; e < HB * Dk; e += nt)
		qs[e] = e < nq ? to_f(qb[e]) : 0.0f;
}

/*
** Split-context ("flash-decoding") latent attention: k_mla's result, y[t, h*Dv + i] for token
** t = blockIdx.z, with the candidates (the context rows 0..pos[t], or the nsel entries of its sel row)
** dealt out to nr = mla_split_ranges(n, NS) ranges, NS = gridDim.x: range x = blockIdx.x takes candidates
** x, x + nr, x + 2·nr, ... Heads go in groups of HB, group blockIdx.y. Each block first writes, for each
** of its heads h, its range's softmax state into scratch:
**   pml[((t·NS + x)·H + h)·2 + {0, 1}] = the range's max score m and l = Σ exp(score - m),
**   pacc[((t·NS + x)·H + h)·Dv + i]   = Σ exp(score - m)·cache[s, i], i < Dv;
** (no visible row in the range: m = -inf, l = 0, acc = 0). Then it counts itself done in
** done[t·gridDim.y + blockIdx.y]; the last of the nr blocks of (t, group) to finish merges the nr states,
**   y[t, h*Dv + i] = Σ_x e_x·acc_x[i] / Σ_x e_x·l_x,  e_x = exp(m_x - max m) (0 for m_x = -inf),
** and puts the counter back to 0: `done` must be zero before the launch (a KA_ZERO region: T·gridDim.y
** ints) and is zero after it. With nothing visible anywhere y is 0/0 = NaN, as k_mla's. Blocks x >= nr
** exit at once, so one launch geometry (fixed at plan time, as CUDA graphs need) serves any position.
** Without MERGE the kernel stops after the states (y and done unused) and blocks x >= nr write an empty
** one (m = -inf, l = 0; acc not written): k_mla_vabsorb<.., true> merges all NS ranges of a head in each of
** its blocks, because this launch's last block alone took a large part of it (bench/NOTES.md entry 23).
** grid (NS, ceil(H/HB), T), block 256; HB in {1, 2, 4, 8}, NS <= 256; Dk <= 1024, Dv <= 2·blockDim.x.
**
** Why: k_mla runs one block per (head, token), H/tp blocks on a decode step, each walking the whole
** context; here a step has up to NS·ceil(H/HB) blocks, and each cache row read serves HB heads. The
** merge rides in the same launch (the last block of each group does it), so splitting costs no launch.
** With vfirst a selection row holds its visible entries first (as k_indexer_select writes it), so only
** the first min(nsel, pos[t] + 1) are dealt out: a 200-row context with a 2048-entry selection then
** takes 13 ranges of 16 rather than every range with 128 mostly invisible entries (bench/NOTES.md
** entry 15).
** Dealing candidates out round-robin rather than in contiguous ranges spreads a DSA selection's visible
** entries, which come first (a short context lists rows 0..pos, then -1s), over every range.
** The block's q rows are staged in shared memory as float. Candidates go in passes of 32: warp w scores
** candidates 4w..4w+3 of the pass against all HB heads at once (a q vector read serves 4 rows; rows are
** read in 4-element vectors when Dk % 4 == 0), and one transposed shuffle reduction (warp_sum_n) ends the
** 4·HB dot products. Warp h < HB folds head h's 32 scores into its running max and sum (online softmax)
** and turns them into weights; then every thread updates its accumulators for outputs tid and
** tid + blockDim.x of all HB heads, reading each value element once for the HB heads. Rows that are not
** visible (-1, past pos[t], or past the candidates) weigh 0 and are not read in that second step, so
** stale or poisoned cache rows cannot leak in. The merge reads the other blocks' states from L2
** (__ldcg, after the fence that pairs with their writers'), in float4 when Dv % 4 == 0.
*/
template <typename A, int HB, bool MERGE = true>
__device__ void k_mla_split(A *y, float *pacc, float *pml, int *done, const A *q, const A *cache, const int *pos,
                            const int *sel, int nsel, int vfirst, int H, int Dk, int Dv, float scale, const int *seq,
                            int S)
{
	const int RP = 4, CH = 32, NV = RP * HB; /* rows per warp and per pass; dot products per warp */
	GLM_SH16(float, qs, [HB * 1024]);
	GLM_SH16_AFTER(qs, float, ps, [HB * CH]);
	GLM_SH_AFTER(ps, float, mh, [HB]);
	GLM_SH_AFTER(mh, float, lh, [HB]);
	GLM_SH_AFTER(lh, float, corr, [HB]);
	GLM_SH_AFTER(corr, int, rows, [CH]);
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nt = blockDim.x;
	int NS = gridDim.x, x = blockIdx.x, h0 = blockIdx.y * HB, t = blockIdx.z;
	int hn = H - h0 < HB ? H - h0 : HB;
	/* pos and q first: their loads need nothing else, so they overlap (a block that exits below wasted them) */
	int p = pos[t];
	mla_split_stage_q<A, HB>(qs, q + ((long long)t * H + h0) * Dk, hn * Dk, Dk);
	/* vfirst: the selection lists its visible rows first (k_indexer_select's: rows 0..pos then -1s, or
	** nsel rows all <= pos), so only the first min(nsel, pos + 1) entries can be visible */
	int n = sel ? (vfirst && nsel > p + 1 ? p + 1 : nsel) : p + 1, nr = mla_split_ranges(n, NS);
	if (x >= nr) { /* uniform per block: this range does not exist for this token */
		if (!MERGE && tid < hn) { /* an empty state for the merge that reads all NS (k_mla_vabsorb's) */
			float *ml = pml + (((long long)t * NS + x) * H + h0 + tid) * 2;
			ml[0] = neg_inf(), ml[1] = 0.0f;
		}
		return;
	}
	int cnt = n > x ? (n - x + nr - 1) / nr : 0; /* this range's candidates */
	const int *st = sel ? sel + (long long)t * nsel : nullptr;
	cache += (long long)seq[t] * S * Dk;
	bool vec = Dk % 4 == 0 && ((unsigned long long)cache & (4 * sizeof(A) - 1)) == 0;
	if (tid < HB)
		mh[tid] = neg_inf(), lh[tid] = 0.0f;
	float acc[HB][2];
#pragma unroll
	for (int hh = 0; hh < HB; hh++)
		acc[hh][0] = acc[hh][1] = 0.0f;
	/* the cache row of this range's candidate i, or -1 when it is not visible */
	auto row_of = [&](int i) {
		int s = -1;
		if (i < cnt) {
			int j = x + i * nr;
			s = st ? st[j] : j;
			s = s >= 0 && s <= p ? s : -1;
		}
		return s;
	};
	{ /* the first pass's rows of this warp asked of L1 now, so the scores' loads after the barrier hit */
		int L = (Dk * (int)sizeof(A) + 127) / 128; /* 128-byte lines a row */
		for (int i = lane; i < RP * L; i += 32) {
			int s = row_of(RP * warp + i / L);
			if (s >= 0)
				glm_prefetch_l1((const char *)(cache + (long long)s * Dk) + 128 * (i % L));
		}
	}

	for (int c0 = 0; c0 < cnt; c0 += CH) {
		__syncthreads(); /* qs and the state are written; the previous pass's ps and rows are consumed */
		const A *kr[RP];
		bool any = false;
#pragma unroll
		for (int r = 0; r < RP; r++) {
			int s = row_of(c0 + RP * warp + r);
			any |= s >= 0;
			kr[r] = cache + (long long)(s < 0 ? 0 : s) * Dk;
		}
		/* this lane's entries: of the scores (row lane / HB, head lane % HB) and of rows (row lane) */
		int srow = row_of(c0 + RP * warp + lane / HB), sown = row_of(c0 + RP * warp + lane);
		if (any) { /* uniform per warp */
			float d[NV];
#pragma unroll
			for (int i = 0; i < NV; i++)
				d[i] = 0.0f;
			if (vec) {
#pragma unroll(HB <= 4 ? 2 : 1)
				for (int c = 4 * lane; c < Dk; c += 128) {
					float kv[RP][4];
#pragma unroll
					for (int r = 0; r < RP; r++)
						ld4(kr[r] + c, kv[r]);
#pragma unroll
					for (int hh = 0; hh < HB; hh++) {
						float4 qv = *(const float4 *)(qs + hh * Dk + c);
#pragma unroll
						for (int r = 0; r < RP; r++)
							d[r * HB + hh] += qv.x * kv[r][0] + qv.y * kv[r][1] + qv.z * kv[r][2] +
							                  qv.w * kv[r][3];
					}
				}
			} else {
				for (int c = lane; c < Dk; c += 32) {
					float kv[RP];
#pragma unroll
					for (int r = 0; r < RP; r++)
						kv[r] = to_f(kr[r][c]);
#pragma unroll
					for (int hh = 0; hh < HB; hh++) {
						float qv = qs[hh * Dk + c];
#pragma unroll
						for (int r = 0; r < RP; r++)
							d[r * HB + hh] += qv * kv[r];
					}
				}
			}
			float v = warp_sum_n<NV>(d); /* lane l < NV: row l / HB against head l % HB */
			if (lane < NV)
				ps[(lane % HB) * CH + RP * warp + lane / HB] = srow >= 0 ? v * scale : neg_inf();
		} else if (lane < NV) {
			ps[(lane % HB) * CH + RP * warp + lane / HB] = neg_inf();
		}
		if (lane < RP)
			rows[RP * warp + lane] = sown;
		__syncthreads();
		if (warp < HB) { /* head `warp`: online softmax over this pass's 32 scores, one per lane */
			float sc = ps[warp * CH + lane], mo = mh[warp];
			float mn = fmaxf(mo, warp_max(sc));
			float e = mn == neg_inf() ? 0.0f : expf(sc - mn); /* -inf scores weigh 0 */
			float c = mn == neg_inf() ? 1.0f : expf(mo - mn); /* 0 while mo = -inf */
			ps[warp * CH + lane] = e;
			float sum = warp_sum(e);
			__syncwarp();
			if (lane == 0)
				lh[warp] = lh[warp] * c + sum, mh[warp] = mn, corr[warp] = c;
		}
		__syncthreads();
#pragma unroll
		for (int hh = 0; hh < HB; hh++) {
			float c = corr[hh];
			acc[hh][0] *= c, acc[hh][1] *= c;
		}
		int jn = cnt - c0 < CH ? cnt - c0 : CH;
		for (int jj = 0; jj < jn; jj += 4) {
			int s4[4] = {rows[jj], rows[jj + 1], rows[jj + 2], rows[jj + 3]};
			if ((s4[0] & s4[1] & s4[2] & s4[3]) < 0) /* all four invisible (sign bits): nothing to add */
				continue;
			float v[4][2];
#pragma unroll
			for (int u = 0; u < 4; u++) {
				const A *vr = cache + (long long)(s4[u] < 0 ? 0 : s4[u]) * Dk;
#pragma unroll
				for (int i = 0; i < 2; i++) {
					int dd = tid + i * nt;
					v[u][i] = s4[u] >= 0 && dd < Dv ? to_f(vr[dd]) : 0.0f;
				}
			}
#pragma unroll
			for (int hh = 0; hh < HB; hh++) {
				float4 pv = *(const float4 *)(ps + hh * CH + jj);
#pragma unroll
				for (int i = 0; i < 2; i++)
					acc[hh][i] += pv.x * v[0][i] + pv.y * v[1][i] + pv.z * v[2][i] + pv.w * v[3][i];
			}
		}
	}
	long long b = ((long long)t * NS + x) * H + h0;
#pragma unroll
	for (int hh = 0; hh < HB; hh++) {
		if (hh < hn) {
#pragma unroll
			for (int i = 0; i < 2; i++) {
				int dd = tid + i * nt;
				if (dd < Dv)
					pacc[(b + hh) * Dv + dd] = acc[hh][i];
			}
		}
	}
	if (tid < hn)
		pml[(b + tid) * 2] = mh[tid], pml[(b + tid) * 2 + 1] = lh[tid];
	if (!MERGE) /* k_mla_vabsorb merges the states, each of its blocks its own head's */
		return;

	/* Count this range done; the last one of (t, group) merges them all (the threadFenceReduction
	** pattern: each block's fence orders its writes before its count, the last block's after it). */
	GLM_SH_AFTER(rows, int, last, );
	GLM_SH_AFTER(last, float, wx, [HB * 256]);
	GLM_SH_AFTER(wx, float, linv, [HB]);
	__threadfence();
	__syncthreads();
	if (tid == 0) {
		int *c = done + (long long)t * gridDim.y + blockIdx.y;
		last = atomicAdd(c, 1) == nr - 1;
		if (last)
			*c = 0; /* all nr ranges have counted: clear it for the next launch */
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	const float *ml = pml + ((long long)t * NS * H + h0) * 2, *pa = pacc + ((long long)t * NS * H + h0) * Dv;
	long long ms = (long long)H * 2, as = (long long)H * Dv; /* strides of one range */
	if (warp < hn) { /* head h0 + warp: the weights of the ranges and the denominator */
		float l = mla_merge_weights(ml + warp * 2, nr, ms, wx + warp * 256);
		if (lane == 0)
			linv[warp] = l;
	}
	__syncthreads();
	A *yb = y + ((long long)t * H + h0) * Dv;
	if (Dv % 4 == 0) {
		int D4 = Dv / 4;
		for (int e = tid; e < hn * D4; e += nt) {
			int hh = e / D4, d = 4 * (e - hh * D4);
			float4 sum = mla_merge_sum4(pa + hh * Dv + d, as, wx + hh * 256, nr);
			float l = linv[hh];
			A *o = yb + hh * Dv + d;
			o[0] = from_f<A>(sum.x / l), o[1] = from_f<A>(sum.y / l);
			o[2] = from_f<A>(sum.z / l), o[3] = from_f<A>(sum.w / l);
		}
	} else {
		for (int e = tid; e < hn * Dv; e += nt) {
			int hh = e / Dv, d = e - hh * Dv;
			float sum = mla_merge_sum1(pa + hh * Dv + d, as, wx + hh * 256, nr);
			yb[hh * Dv + d] = from_f<A>(sum / linv[hh]);
		}
	}
}

/*
** DSA lightning-indexer scores, as ref_indexer: for query t = blockIdx.y and key row s = blockIdx.x*8 +
** warp (< total), score[t*total + s] = sum_h w[t,h] · relu(scale · q[t, h*D : +D]·kcache[s, :D]) when
** s <= pos[t], else -inf. total is the score rows' length: the key cache's capacity S, or the number
** of rows the step ends with, pos[T-1] + 1 (k_indexer_select ranks only its sequence's, as ref_indexer, either
** way). Token t reads the S key rows of slot seq[t]. grid (ceil(total/8), T), block 256.
** One warp per score: lane l takes heads l, l + 32, ... whole (each dot product in index order, the
** key row read by all lanes at once), and one shuffle sum ends the score. (A warp summing each head's
** dot product across its lanes takes 32 dependent shuffle sums a score: bench/NOTES.md entry 15.)
** Accumulation is in float in the reference's order (dot,
** · scale, relu, · w, summed over h), where the reference uses double and rounds the sum once: a
** score may differ from ref_indexer's in its last bits. Exact zeros (every head's
** relu 0) and exactly representable cases agree bit for bit.
*/
template <typename A>
__device__ void k_indexer_scores(float *score, const A *q, const A *w, const A *kcache, const int *pos, int H, int D,
                                 int total, float scale, const int *seq, int S)
{
	int lane = threadIdx.x & 31, t = blockIdx.y;
	int s = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (s >= total) /* uniform per warp */
		return;
	float *out = score + (long long)t * total + s;
	if (s > pos[t]) {
		if (lane == 0)
			*out = neg_inf();
		return;
	}
	const A *kr = kcache + ((long long)seq[t] * S + s) * D;
	const A *qt = q + (long long)t * H * D;
	const A *wt = w + (long long)t * H;
	const int VEC = 16 / (int)sizeof(A);
	bool vec = D % VEC == 0 && (((unsigned long long)q | (unsigned long long)kcache) & 15) == 0;
	float acc = 0.0f;
	for (int h = lane; h < H; h += 32) { /* lane h: head h's whole dot product (the key row is broadcast) */
		const A *qh = qt + (long long)h * D;
		float d = 0.0f;
		if (vec) {
			for (int i = 0; i < D; i += VEC) {
				union {
					uint4 u;
					A e[VEC];
				} a, b;
				a.u = *(const uint4 *)(qh + i);
				b.u = *(const uint4 *)(kr + i);
#pragma unroll
				for (int j = 0; j < VEC; j++)
					d += to_f(a.e[j]) * to_f(b.e[j]);
			}
		} else {
			for (int i = 0; i < D; i++)
				d += to_f(qh[i]) * to_f(kr[i]);
		}
		d *= scale;
		acc += to_f(wt[h]) * (d > 0.0f ? d : 0.0f);
	}
	acc = warp_sum(acc);
	if (lane == 0)
		*out = acc;
}

/* torch's "greater" on top-k values (ref.c's tk_greater): larger value, NaN above every number. */
__device__ __forceinline__ bool tk_gt(float a, float b)
{
	return (a != a && b == b) || a > b;
}

/* The (value, index) pairs of the introselect below, as two arrays (value bits, index), and the
** primitives of ref.c's tk_* on slots of them. */
struct TkPairs {
	float *v;
	int *i;
	__device__ void swap(int a, int b)
	{
		float tv = v[a];
		int ti = i[a];
		v[a] = v[b];
		i[a] = i[b];
		v[b] = tv;
		i[b] = ti;
	}
};

/* ref.c's tk_insertion_sort on slots [first, last): unguarded inner loop, as libstdc++'s. */
__device__ void tk_insertion_sort(TkPairs q, int first, int last)
{
	if (first == last)
		return;
	for (int a = first + 1; a != last; a++) {
		float val = q.v[a];
		int vi = q.i[a];
		if (tk_gt(val, q.v[first])) {
			for (int b = a; b > first; b--) {
				q.v[b] = q.v[b - 1];
				q.i[b] = q.i[b - 1];
			}
			q.v[first] = val;
			q.i[first] = vi;
		} else {
			int j = a, prev = a - 1;
			while (tk_gt(val, q.v[prev])) {
				q.v[j] = q.v[prev];
				q.i[j] = q.i[prev];
				j = prev;
				prev--;
			}
			q.v[j] = val;
			q.i[j] = vi;
		}
	}
}

/* ref.c's tk_median_to_first: the median of slots a, b, c swapped into slot `result`. */
__device__ void tk_median_to_first(TkPairs q, int result, int a, int b, int c)
{
	float va = q.v[a], vb = q.v[b], vc = q.v[c];
	if (tk_gt(va, vb)) {
		if (tk_gt(vb, vc))
			q.swap(result, b);
		else if (tk_gt(va, vc))
			q.swap(result, c);
		else
			q.swap(result, a);
	} else if (tk_gt(va, vc))
		q.swap(result, a);
	else if (tk_gt(vb, vc))
		q.swap(result, c);
	else
		q.swap(result, b);
}

/* ref.c's tk_partition: unguarded Hoare partition of [first, last) around the value in slot pivot
** (outside the range, so it stays put). */
__device__ int tk_partition(TkPairs q, int first, int last, int pivot)
{
	float pv = q.v[pivot];
	for (;;) {
		while (tk_gt(q.v[first], pv))
			first++;
		last--;
		while (tk_gt(pv, q.v[last]))
			last--;
		if (!(first < last))
			return first;
		q.swap(first, last);
		first++;
	}
}

/* ref.c's tk_select (nth_element by introselect); false when the depth limit is hit. */
__device__ bool tk_select(TkPairs q, int first, int nth, int last)
{
	int depth = 0;
	for (int n = last - first; n > 1; n >>= 1)
		depth++;
	depth *= 2;
	while (last - first > 3) {
		if (depth-- == 0)
			return false;
		int mid = first + (last - first) / 2;
		tk_median_to_first(q, first, first + 1, mid, last - 1);
		int cut = tk_partition(q, first + 1, last, first);
		if (cut <= nth)
			first = cut;
		else
			last = cut;
	}
	tk_insertion_sort(q, first, last);
	return true;
}

/* ref.c's sift for ref_topk's heap of indices into x (root = the entry ranked last). */
__device__ void topk_sift(int *hp, int n, int i, const float *x)
{
	for (;;) {
		int c = 2 * i + 1;
		if (c >= n)
			return;
		if (c + 1 < n && ranks_before(x[hp[c]], hp[c], x[hp[c + 1]], hp[c + 1]))
			c++;
		if (!ranks_before(x[hp[i]], hp[i], x[hp[c]], hp[c]))
			return;
		int tmp = hp[i];
		hp[i] = hp[c];
		hp[c] = tmp;
		i = c;
	}
}

/* ref_topk on one row, by one thread: out[0..k) = the k best of x[0..n) under ranks_before, best first. */
__device__ void topk_heap(int *out, const float *x, int n, int k)
{
	for (int i = 0; i < k; i++)
		out[i] = i;
	for (int i = k / 2 - 1; i >= 0; i--)
		topk_sift(out, k, i, x);
	for (int i = k; i < n; i++)
		if (ranks_before(x[i], i, x[out[0]], out[0])) {
			out[0] = i;
			topk_sift(out, k, 0, x);
		}
	for (int m = k - 1; m > 0; m--) {
		int tmp = out[0];
		out[0] = out[m];
		out[m] = tmp;
		topk_sift(out, m, 0, x);
	}
}

/* A float as an unsigned key in the order of ranks_before (ref.c's `before`): larger keys rank first,
** every NaN above everything, -0 equal to +0. No float has key 0, which marks a taken or absent expert. */
__device__ __forceinline__ unsigned moe_key(float v)
{
	if (v != v)
		return 0xffffffffu;
	unsigned u = v == 0.0f ? 0u : __float_as_uint(v);
	return u & 0x80000000u ? ~u : u | 0x80000000u;
}

/*
** DSA top-k selection, as ref_indexer: for query t = blockIdx.x with n = pos[t] + 1 visible rows, when n <=
** topk sel[t*topk + j] = j < n ? j : -1; otherwise the topk best of the m = pos[e-1] + 1 rows the step ends
** with for t's sequence (rows t..e-1 the run of rows in slot seq[t], T = gridDim.x; the later ones at -inf
** for earlier queries), score[t*total .. +m), where total (>= m) is the rows' stride, e.g. the key cache's
** capacity. The chosen rows are written in increasing order, any row > pos[t] as -1 (they come last).
**
** The block finds the topk-th best score's key (moe_key: larger first, NaN above all) by a radix select,
** 8 bits a round from the top, each round a shared histogram of the keys still in the running: 4 passes
** over the m scores, then one more that writes the rows at or above that key through a block-wide count.
** That set is the reference's whenever the rows tied at the threshold key all make it. When only some of
** them do, which ones is a choice among rows of equal score: ref.c makes torch.topk's (CPU) choice, which
** depends on how many rows are ranked (topk_like_torch: introselect, unless topk*64 <= m, where it takes
** the lowest rows). Up to SEL_EXACT rows thread 0 makes that choice as the reference does, over scratch
** (2*total ints per query: the pairs (value, index) in index order, ref.c's introselect with nth = topk -
** 1, or ref_topk's order when topk*64 <= m or the depth limit is hit) and its rows are flagged in scratch;
** past SEL_EXACT rows (never a test fixture's; always GLM-5's, whose top-k is 2048) the lowest of the tied
** rows are taken, as the reference itself does past topk*64 rows, since one thread ranking m rows costs
** about 0.25 µs a row (8 ms a layer at 32K on an H100, bench/NOTES.md entry 64). A is unused (kept so the
** emitter instantiates every template alike). grid (T), block a multiple of 32 up to 1024.
**
** Cost: five passes over m scores (L2 hits; 16 rounds of 8 loads a thread at m = 32K and 256 threads).
*/
#define SEL_U 8       /* rows a thread takes at once in k_indexer_select's passes (loads in flight) */
#define SEL_EXACT 1024 /* rows up to which k_indexer_select splits a threshold tie as the reference does */
template <typename A>
__device__ void k_indexer_select(int *sel, float *score, int *scratch, const int *pos, int total, int topk,
                                 const int *seq, int S)
{
	(void)S;
	GLM_SH(int, hist, [256]);
	GLM_SH_AFTER(hist, int, sv, [4]); /* the rows ranked, then a round's want, equal keys and prefix */
	int &s_m = sv[0], &s_want = sv[1], &s_eq = sv[2];
	unsigned &s_pre = reinterpret_cast<unsigned &>(sv[3]);
	int t = blockIdx.x, n = pos[t] + 1, tid = threadIdx.x, nt = blockDim.x, lane = tid & 31, warp = tid >> 5;
	int *out = sel + (long long)t * topk;
	if (n <= topk) { /* every row: the block's threads write the list */
		for (int j = tid; j < topk; j += nt)
			out[j] = j < n ? j : -1;
		return;
	}
	/* The rows the step ends with for t's sequence: its run of rows in one slot ends at row e - 1 (the
	** CPU's slot_run; a step of several sequences ranks each its own way), found 32 rows at a time. */
	if (warp == 0) {
		int e = gridDim.x;
		for (int base = t + 1; base < (int)gridDim.x; base += 32) {
			int u = base + lane;
			unsigned b = __ballot_sync(0xffffffffu, u < (int)gridDim.x && seq[u] != seq[t]);
			if (b) {
				e = base + __ffs(b) - 1;
				break;
			}
		}
		int m = pos[e - 1] + 1;
		m = m > n ? m : n; /* positions are increasing in a run; never rank fewer rows than are visible */
		if (lane == 0)
			s_m = m < total ? m : total;
	}
	__syncthreads();
	int m = s_m;
	const float *x = score + (long long)t * total;
	/* the radix select: pre holds the threshold key's bits found so far (msk of them), want the rows still
	** to take among the keys that match them; each round narrows by 8 bits */
	unsigned pre = 0, msk = 0;
	int want = topk, eq = 0;
	for (int shift = 24; shift >= 0; shift -= 8) {
		for (int i = tid; i < 256; i += nt)
			hist[i] = 0;
		__syncthreads();
		for (int i0 = tid; i0 < m; i0 += SEL_U * nt) { /* SEL_U loads in flight, then their counts */
			float v[SEL_U];
#pragma unroll
			for (int u = 0; u < SEL_U; u++)
				v[u] = i0 + u * nt < m ? x[i0 + u * nt] : 0.0f;
#pragma unroll
			for (int u = 0; u < SEL_U; u++) {
				unsigned k = moe_key(v[u]);
				if (i0 + u * nt < m && (k & msk) == pre)
					atomicAdd(&hist[(k >> shift) & 255], 1);
			}
		}
		__syncthreads();
		if (tid == 0) { /* the keys in the running number want or more, so the walk stops at a bin */
			int above = 0, b = 255;
			while (above + hist[b] < want)
				above += hist[b--];
			s_want = want - above, s_eq = hist[b], s_pre = pre | (unsigned)b << shift;
		}
		__syncthreads();
		want = s_want, eq = s_eq, pre = s_pre, msk |= 255u << shift;
	}
	int *flag = scratch + (long long)t * 2 * total;
	/* only some of the rows at the threshold key are chosen: up to SEL_EXACT rows the reference's choice,
	** flagged; past it the lowest want of them, by their count in the passes below */
	bool tie = want < eq && m <= SEL_EXACT;
	if (tie) {
		if (tid == 0) {
			TkPairs q;
			q.v = (float *)flag;
			q.i = flag + total;
			bool fallback = (long long)topk * 64 <= m;
			if (!fallback) {
				for (int i = 0; i < m; i++) {
					q.v[i] = x[i];
					q.i[i] = i;
				}
				fallback = !tk_select(q, 0, topk - 1, m);
			}
			if (fallback)
				topk_heap(out, x, m, topk);
			else
				for (int j = 0; j < topk; j++)
					out[j] = q.i[j];
		}
		__syncthreads();
		for (int i = tid; i < m; i += nt)
			flag[i] = 0;
		__syncthreads();
		for (int j = tid; j < topk; j += nt)
			flag[out[j]] = 1;
		__syncthreads();
	}
	/* the chosen rows in increasing order, a tile of SEL_U·nt rows at a time, thread tid's the SEL_U rows from
	** i0 + SEL_U·tid. A row is above the threshold (key > pre, or flagged on the tie path) or at it (key ==
	** pre); a row at it is chosen while fewer than want rows at it come before, so a chosen row's place is
	** (rows above before it) + min(rows at it before, want): both counts by one block_scan_excl, packed as
	** above + (at << 16) (a tile is at most 8192 rows). */
	int base_a = 0, base_e = 0;
	for (int i0 = 0; i0 < m; i0 += SEL_U * nt) {
		int r0 = i0 + SEL_U * tid, na = 0, ne = 0;
		bool above[SEL_U], at[SEL_U];
#pragma unroll
		for (int u = 0; u < SEL_U; u++) {
			int i = r0 + u;
			unsigned k = i < m ? moe_key(x[i]) : 0u;
			above[u] = i < m && (tie ? flag[i] != 0 : k > pre), at[u] = i < m && !tie && k == pre;
			na += above[u], ne += at[u];
		}
		int tile, before = block_scan_excl(na + (ne << 16), &tile);
		int a = base_a + (before & 0xffff), e = base_e + (before >> 16);
#pragma unroll
		for (int u = 0; u < SEL_U; u++) {
			if (above[u] || (at[u] && e < want))
				out[a + (e < want ? e : want)] = r0 + u < n ? r0 + u : -1;
			a += above[u], e += at[u];
		}
		base_a += tile & 0xffff, base_e += tile >> 16;
	}
}

/*
** ---- MoE routing: one warp per token ----
**
** The router's logits row of a token is small (E <= 1024 experts), so one warp does all of it: lane l
** owns experts e = l, l + 32, l + 64, ... (their choices in shared memory, conflict-free), and every
** step follows ops/ref.c in the same precision: the scores in double, rounded once to float as
** ref_moe_route does, so the choices (and the ties among them) are the reference's; only the last bit
** of a double exp may differ from glibc's, which changes a float score only when it lies within a
** double ulp of a float rounding boundary. Loops over a lane's experts are unrolled by 8, so a lane
** has its (up to) 8 logit and bias loads in flight at once (E <= 256 is one pass).
*/


/* The warp's best (key, low) pair, larger key first, then larger low (low = ~index: the lower index);
** every lane gets it. Two redux instructions on sm_80+, a shuffle butterfly before. */
__device__ __forceinline__ void warp_best_key(unsigned &key, unsigned &low)
{
#if __CUDA_ARCH__ >= 800
	unsigned m = __reduce_max_sync(0xffffffffu, key);
	low = __reduce_max_sync(0xffffffffu, key == m ? low : 0u);
	key = m;
#else
	for (int o = 16; o > 0; o >>= 1) {
		unsigned ok = __shfl_xor_sync(0xffffffffu, key, o), ol = __shfl_xor_sync(0xffffffffu, low, o);
		if (ok > key || (ok == key && ol > low)) {
			key = ok;
			low = ol;
		}
	}
#endif
}

/* Sum over the warp in double; a butterfly, so every lane gets the same bits (a + b == b + a). */
__device__ __forceinline__ double warp_sum_d(double v)
{
	for (int o = 16; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* The row's max logit and softmax denominator, as ref.c's moe_scores: the max ignores NaN; the sum of
** exp(l - m) is in double, summed as a tree (its last bit may differ from the reference's sequential
** sum). With ex, each exp is kept there (ex[e]) for the scores. One warp; every lane gets m and z. */
template <typename A>
__device__ __forceinline__ void moe_softmax_mz(const A *l, int E, float &m, double &z, double *ex)
{
	int lane = threadIdx.x & 31;
	m = neg_inf();
#pragma unroll 8
	for (int e = lane; e < E; e += 32)
		m = fmaxf(m, to_f(l[e]));
	m = warp_max(m);
	z = 0.0;
#pragma unroll 8
	for (int e = lane; e < E; e += 32) {
		double v = exp((double)to_f(l[e]) - (double)m);
		if (ex)
			ex[e] = v;
		z += v;
	}
	z = warp_sum_d(z);
}

/*
** The chosen experts' weights of one token, as ref_moe_weights: w[j] = score(pick[j]) (sigmoid
** 1/(1 + exp(-l)) or softmax exp(l - m)/z, in double), divided by (the sum over the k picks + 1e-20)
** when norm, times scale, in double and rounded once. The scores go through sc (shared, k <= 1024) so
** that every thread sums them in slot order, as the reference. A pick outside [0, E) scores 0. The
** block's threads share the k picks (one warp in k_moe_weights, 256 in k_moe_route_weights); every
** thread must call it (a barrier).
*/
template <typename A>
__device__ void moe_weights_row(A *w, const int *pick, const A *l, int E, int k, int sigmoid, int norm, float scale,
                                float m, double z, double *sc)
{
	int tid = threadIdx.x, nt = blockDim.x;
	for (int j = tid; j < k; j += nt) {
		int e = pick[j];
		double s = 0.0;
		if (e >= 0 && e < E) {
			double v = (double)to_f(l[e]);
			s = sigmoid ? 1.0 / (1.0 + exp(-v)) : exp(v - (double)m) / z;
		}
		sc[j] = s;
	}
	__syncthreads();
	double sum = 0.0;
	if (norm)
		for (int j = 0; j < k; j++)
			sum += sc[j];
	for (int j = tid; j < k; j += nt) {
		double v = sc[j];
		if (norm)
			v /= sum + 1e-20;
		w[j] = from_f<A>((float)(v * (double)scale));
	}
}

/* Group-limited routing, step 1: group g (experts g·per ..) scores the sum in double of its two best
** choices (the top two of the group's multiset whatever the scan order, so each thread starts at a
** different bank). Thread tid of nt scores groups tid, tid + nt, ... */
__device__ __forceinline__ void moe_group_scores(double *gsc, const float *ch, int n_group, int per, int tid, int nt)
{
	for (int g = tid; g < n_group; g += nt) {
		const float *c = ch + g * per;
		float b1 = neg_inf(), b2 = neg_inf();
		int o = g % per;
#pragma unroll 4
		for (int q = 0; q < per; q++) {
			float v = c[o];
			o = o + 1 == per ? 0 : o + 1;
			if (v > b1) {
				b2 = b1;
				b1 = v;
			} else if (v > b2) {
				b2 = v;
			}
		}
		gsc[g] = (double)b1 + (per > 1 ? (double)b2 : 0.0);
	}
}

/* Step 2, after every score is written: keep[g] when fewer than topk_group groups rank before g (a
** higher score, or an equal one and a lower index). */
__device__ __forceinline__ void moe_group_keep(unsigned char *keep, const double *gsc, int n_group, int topk_group,
                                               int tid, int nt)
{
	for (int g = tid; g < n_group; g += nt) {
		double v = gsc[g];
		int better = 0;
		for (int h = 0; h < n_group; h++)
			better += gsc[h] > v || (gsc[h] == v && h < g);
		keep[g] = better < topk_group;
	}
}

/*
** Routing of token t = blockIdx.x by one warp: idx[t*k + j] as ref_moe_route and, when w is not null,
** w[t*k + j] as ref_moe_weights (with its own function wsigmoid) on that choice. E <= 1024, k <= E.
**  1. scores: sigmoid, or softmax over the row; choice = (float)score + bias (a float add, as ref).
**  2. groups (n_group > 1, topk_group < n_group): lane g scores group g as the sum in double of its two
**     best choices (the top two of the group's multiset whatever the scan order, so each lane starts
**     at a different bank), ranks it against the others (ties to the lower group), and the experts of
**     the groups not kept choose -inf.
**  3. each choice becomes a moe_key in place; each lane keeps its best (key, index).
**  4. k rounds: the warp's best pair (ties to the lower index) is written to idx; the lane that owned
**     it zeroes its key and rescans its own experts. A round that finds none (k > E) writes -1.
** Cost: k dependent rounds on one warp, slow at E = 256, k = 8 (bench/NOTES.md entry 17): the
** unfused k_moe_route keeps it; k_moe_route_weights (ops/fused.cuh), what plans run whenever routing and
** weights fuse, ranks with a thread an expert.
*/
union MoeRouteCh { /* moe_route_warp's candidates: values, then their sort keys */
	float f[1024];
	unsigned u[1024];
};

template <typename A, typename B_>
__device__ void moe_route_warp(int *idx, A *w, const A *logits, const B_ *bias, int E, int k, int n_group, int topk_group,
                               int sigmoid, int wsigmoid, int norm, float scale)
{
	GLM_SH(MoeRouteCh, ch, );
	GLM_SH_AFTER(ch, double, dsc, [1024]); /* softmax exps, then group scores, then the weights' scores */
	GLM_SH_AFTER(dsc, unsigned char, keep, [1024]);
	GLM_SH_AFTER(keep, int, pick, [1024]);
	int lane = threadIdx.x & 31, t = blockIdx.x;
	const A *l = logits + (long long)t * E;
	float m = 0.0f;
	double z = 1.0;
	if (!sigmoid || (w && !wsigmoid))
		moe_softmax_mz<A>(l, E, m, z, sigmoid ? nullptr : dsc);
#pragma unroll 8
	for (int e = lane; e < E; e += 32) {
		double s = sigmoid ? 1.0 / (1.0 + exp(-(double)to_f(l[e]))) : dsc[e] / z;
		ch.f[e] = (float)s + (bias ? to_f(bias[e]) : 0.0f);
	}
	bool grouped = n_group > 1 && topk_group < n_group;
	int per = grouped ? E / n_group : E;
	if (grouped) {
		__syncwarp();
		moe_group_scores(dsc, ch.f, n_group, per, lane, 32);
		__syncwarp();
		moe_group_keep(keep, dsc, n_group, topk_group, lane, 32);
		__syncwarp();
	}
	unsigned bk = 0u;
	int be = 0;
#pragma unroll 8
	for (int e = lane; e < E; e += 32) {
		unsigned kv = moe_key(grouped && !keep[e / per] ? neg_inf() : ch.f[e]);
		ch.u[e] = kv;
		if (kv > bk) {
			bk = kv;
			be = e;
		}
	}
	int *out = idx + (long long)t * k;
	for (int r = 0; r < k; r++) {
		unsigned key = bk, low = bk ? ~(unsigned)be : 0u;
		warp_best_key(key, low);
		int e = key ? (int)~low : -1;
		if (lane == 0) {
			out[r] = e;
			if (r < 1024)
				pick[r] = e;
		}
		if (e >= 0 && (e & 31) == lane) {
			ch.u[e] = 0u;
			bk = 0u;
			be = 0;
#pragma unroll 8
			for (int q = lane; q < E; q += 32) {
				unsigned kv = ch.u[q];
				if (kv > bk) {
					bk = kv;
					be = q;
				}
			}
		}
	}
	if (!w)
		return;
	__syncwarp(); /* lane 0's picks; every lane is past its reads of the group scores */
	moe_weights_row<A>(w + (long long)t * k, pick, l, E, k, wsigmoid, norm, scale, m, z, dsc);
}

/*
** MoE routing of row t = blockIdx.x, exactly as ref_moe_route: scores = softmax(logits) or
** sigmoid(logits) (sigmoid != 0); choice[e] = score[e] + bias[e] (bias may be nullptr); with n_group > 1
** and topk_group < n_group, group g (experts g*E/n_group ..) scores the sum of its two best choices and
** all but the topk_group best groups (ties to the lower group) are set to -inf; then idx[t*k + j] = the
** k best experts by choice, best first, ties to the lower index (NaN first, as ref_topk; -1 for slots
** past E). E <= 1024 (glmc refuses larger). grid (T), block 32: one warp per token (moe_route_warp).
*/
template <typename A, typename B_>
__device__ void k_moe_route(int *idx, const A *logits, const B_ *bias, int E, int k, int n_group, int topk_group,
                            int sigmoid)
{
	moe_route_warp<A, B_>(idx, (A *)nullptr, logits, bias, E, k, n_group, topk_group, sigmoid, sigmoid, 0, 1.0f);
}

/*
** The chosen experts' weights, as ref_moe_weights: w[t*k + j] = score[idx[t*k + j]] (the unbiased
** softmax or sigmoid score of row t = blockIdx.x, in double), divided by (the sum over the k chosen +
** 1e-20) when norm, times scale, rounded once. An index outside [0, E) gets weight 0 (and adds nothing
** to the sum). k <= 1024 (glmc refuses larger). grid (T), block 32: one warp per token.
*/
template <typename A>
__device__ void k_moe_weights(A *w, const A *logits, const int *idx, int E, int k, int sigmoid, int norm, float scale)
{
	GLM_SH(double, sc, [1024]);
	int t = blockIdx.x;
	const A *l = logits + (long long)t * E;
	float m = 0.0f;
	double z = 1.0;
	if (!sigmoid)
		moe_softmax_mz<A>(l, E, m, z, nullptr);
	moe_weights_row<A>(w + (long long)t * k, idx + (long long)t * k, l, E, k, sigmoid, norm, scale, m, z, sc);
}

/* N activations of type A from p in 16-byte loads (two for 32 bytes) or one 8-byte load, through the
** read-only path; p is aligned to the load width. For vectorized GEMV rows that read x from L1/L2
** instead of staging it in shared memory. */
template <typename A, int N> struct ActVec {
	union {
		uint4 q[(N * (int)sizeof(A) + 15) / 16];
		uint2 d[(N * (int)sizeof(A) + 7) / 8];
		A e[N];
	} v;
	__device__ __forceinline__ void load(const A *p)
	{
		if (N * (int)sizeof(A) >= 16) {
#pragma unroll
			for (int i = 0; i < N * (int)sizeof(A) / 16; i++)
				v.q[i] = __ldg((const uint4 *)p + i);
		} else {
			v.d[0] = __ldg((const uint2 *)p);
		}
	}
	/* the same from memory the read-only path must not take (shared memory, or what this kernel wrote) */
	__device__ __forceinline__ void load_plain(const A *p)
	{
		if (N * (int)sizeof(A) >= 16) {
#pragma unroll
			for (int i = 0; i < N * (int)sizeof(A) / 16; i++)
				v.q[i] = ((const uint4 *)p)[i];
		} else {
			v.d[0] = *(const uint2 *)p;
		}
	}
	__device__ __forceinline__ void zero()
	{
#pragma unroll
		for (int i = 0; i < (N * (int)sizeof(A) + 15) / 16; i++)
			v.q[i] = make_uint4(0u, 0u, 0u, 0u);
	}
};

/* ag += x·g and au += x·u over one 16-byte vector of each weight row (VEC elements), four products
** summed before each add, as the float accumulation of the other GEMVs. */
template <typename A, typename W, int VEC>
__device__ __forceinline__ void dot2_vec(float &ag, float &au, const uint4 &gb, const uint4 &ub, const ActVec<A, VEC> &x)
{
	union {
		uint4 bits;
		W e[VEC];
	} gv, uv;
	gv.bits = gb;
	uv.bits = ub;
#pragma unroll
	for (int c4 = 0; c4 < VEC / 4; c4++) {
		float x0 = to_f(x.v.e[4 * c4]), x1 = to_f(x.v.e[4 * c4 + 1]), x2 = to_f(x.v.e[4 * c4 + 2]),
		      x3 = to_f(x.v.e[4 * c4 + 3]);
		ag += x0 * to_f(gv.e[4 * c4]) + x1 * to_f(gv.e[4 * c4 + 1]) + x2 * to_f(gv.e[4 * c4 + 2]) +
		      x3 * to_f(gv.e[4 * c4 + 3]);
		au += x0 * to_f(uv.e[4 * c4]) + x1 * to_f(uv.e[4 * c4 + 1]) + x2 * to_f(uv.e[4 * c4 + 2]) +
		      x3 * to_f(uv.e[4 * c4 + 3]);
	}
}

/*
** Routed experts, first half: hid[(t*k + j)*F + f] = silu(gate[e, f, :]·x[t]) · (up[e, f, :]·x[t]) with
** e = idx[t*k + j] (hid = 0 where e < 0); gate and up are [E, F, C]. hid stays float; silu as
** ref_moe_ffn: g / (1 + expf(-g)), on the float dot products.
** grid (ceil(F/W), k, T), block 32·W (any W; glmc emits W = 4): one warp per f (f = blockIdx.x*W + warp,
** j = blockIdx.y, t = blockIdx.z), reading only the chosen expert's two rows; k·F/W blocks per token
** (1536 for GLM-4.7-Flash), so every SM holds several.
** A decode row pair is short (C = 2048: 8 KB of bf16 gate+up, 8 16-byte vectors per lane and row), so
** a warp's life is a few memory round trips, and nothing may wait on a barrier or a staged copy of x:
** each lane reads its own slice of x[t] straight from global memory (L1/L2 hits: the whole grid reads
** the same row). With 16-byte aligned rows and x and C a multiple of the vector width, the lane's
** vectors go in chunks of 8 (16 weight loads in flight); other shapes read one element per lane per step.
*/
template <typename A, typename W>
__device__ void k_moe_up(float *hid, const A *x, const int *idx, const W *gate, const W *up, int C, int F, int k)
{
	const int VEC = 16 / (int)sizeof(W);
	int lane = threadIdx.x & 31;
	int j = blockIdx.y, t = blockIdx.z, f = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (f >= F) /* uniform per warp; no barrier below */
		return;
	long long slot = (long long)t * k + j;
	int ex = idx[slot];
	float *hr = hid + slot * F;
	if (ex < 0) { /* uniform per block */
		if (lane == 0)
			hr[f] = 0.0f;
		return;
	}
	long long row = ((long long)ex * F + f) * C;
	const W *gr = gate + row, *ur = up + row;
	const A *xt = x + (long long)t * C;
	float ag = 0.0f, au = 0.0f;
	if ((((unsigned long long)gate | (unsigned long long)up | (unsigned long long)x) & 15) == 0 && C % VEC == 0) {
		/* the lane's vectors (lane + 32v) in chunks of 8: a chunk's 16 weight loads all in flight
		** together, then its 8 vectors of x (L1/L2); one chunk covers GLM-4.7-Flash's 2048 bf16 */
		int nv = C / VEC, nl = nv > lane ? (nv - lane + 31) >> 5 : 0;
		for (int v0 = 0; v0 < nl; v0 += 8) {
			const uint4 *gp = (const uint4 *)gr + lane + v0 * 32, *up4 = (const uint4 *)ur + lane + v0 * 32;
			uint4 ga[8], ua[8];
#pragma unroll
			for (int u = 0; u < 8; u++)
				if (v0 + u < nl) {
					ga[u] = __ldg(gp + u * 32);
					ua[u] = __ldg(up4 + u * 32);
				}
			/* x's vectors too, all asked for before the first is used: loaded at use, each waited for the
			** sums of the one before (8 dependent L1/L2 trips a chunk; bench/NOTES.md entry 35) */
			ActVec<A, VEC> xa[8];
#pragma unroll
			for (int u = 0; u < 8; u++)
				if (v0 + u < nl)
					xa[u].load(xt + (lane + (v0 + u) * 32) * VEC);
#pragma unroll
			for (int u = 0; u < 8; u++)
				if (v0 + u < nl)
					dot2_vec<A, W, VEC>(ag, au, ga[u], ua[u], xa[u]);
		}
	} else {
#pragma unroll 4
		for (int i = lane; i < C; i += 32) {
			float xv = to_f(xt[i]);
			ag += xv * to_f(gr[i]);
			au += xv * to_f(ur[i]);
		}
	}
	ag = warp_sum(ag);
	au = warp_sum(au);
	if (lane == 0)
		hr[f] = ag / (1.0f + expf(-ag)) * au;
}

/* s += h·d over one 16-byte vector of a down row (VEC weights) and its VEC floats of hid, four products
** summed before each add, as dot2_vec. */
template <typename W, int VEC>
__device__ __forceinline__ void dot1_vec(float &s, const uint4 &db, const ActVec<float, VEC> &h)
{
	union {
		uint4 bits;
		W e[VEC];
	} dv;
	dv.bits = db;
#pragma unroll
	for (int c4 = 0; c4 < VEC / 4; c4++)
		s += h.v.e[4 * c4] * to_f(dv.e[4 * c4]) + h.v.e[4 * c4 + 1] * to_f(dv.e[4 * c4 + 1]) +
		     h.v.e[4 * c4 + 2] * to_f(dv.e[4 * c4 + 2]) + h.v.e[4 * c4 + 3] * to_f(dv.e[4 * c4 + 3]);
}

/* Batch q of k_moe_down's vector path: expert slot j = q / nb, vectors (q % nb)*U .. +U-1 of this lane's
** nl vectors of the down row and of hid (zeros past nl, and for a skipped slot). Each load in its own
** guarded block (ptxas schedules within a basic block), so the batch is in flight at once. */
template <typename W, int U>
__device__ __forceinline__ void moe_down_batch(uint4 (&db)[U], ActVec<float, 16 / (int)sizeof(W)> (&hb)[U], const float *hid,
                                               const int *idx, const W *down, int C, int F, int k, int c, int t,
                                               int lane, int nl, int nb, int q)
{
	const int VEC = 16 / (int)sizeof(W);
	int j = q / nb, v0 = (q - j * nb) * U;
	long long slot = (long long)t * k + j;
	int ex = idx[slot];
	const W *dr = down + ((long long)(ex < 0 ? 0 : ex) * C + c) * F;
	const float *hr = hid + slot * F;
#pragma unroll
	for (int u = 0; u < U; u++) {
		int o = (lane + (v0 + u) * 32) * VEC;
		if (ex >= 0 && v0 + u < nl) {
			db[u] = __ldg((const uint4 *)(dr + o));
			hb[u].load(hr + o);
		} else {
			db[u] = make_uint4(0u, 0u, 0u, 0u);
			hb[u].zero();
		}
	}
}

/*
** Routed experts, second half: y[t, c] = sum_j w[t*k + j] · (down[e, c, :]·hid[(t*k + j)*F : +F]) with
** e = idx[t*k + j], skipping e < 0 (a row whose experts are all skipped is 0); down is [E, C, F].
** grid (ceil(C/8), T), block 256: one warp per c (c = blockIdx.x*8 + warp, t = blockIdx.y).
** When down and hid are 16-byte aligned and F is a multiple of the vector width, the k rows are one
** stream of batches of U = 4 16-byte vectors per lane (with the matching floats of hid; nb batches per
** row, the last one padded with zeros), the next batch loaded (of the next expert at a row's end)
** before the current one's math; else element by element. Each expert's dot product is finished
** (shuffle sum) before it is weighted, as ref_moe_ffn.
*/
template <typename A, typename W>
__device__ void k_moe_down(A *y, const float *hid, const int *idx, const A *w, const W *down, int C, int F, int k)
{
	const int VEC = 16 / (int)sizeof(W), U = 4;
	int lane = threadIdx.x & 31, t = blockIdx.y;
	int c = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (c >= C) /* uniform per warp */
		return;
	float acc = 0.0f;
	if ((((unsigned long long)down | (unsigned long long)hid) & 15) == 0 && F % VEC == 0) {
		/* nb from lane 0's count (the largest), so every lane finishes a row at the same batch */
		int nv = F / VEC, nl = nv > lane ? (nv - lane + 31) >> 5 : 0, nb = (((nv + 31) >> 5) + U - 1) / U;
		int nq = k * nb;
		uint4 db[U];
		ActVec<float, VEC> hb[U];
		float s = 0.0f;
		if (nq > 0)
			moe_down_batch<W, U>(db, hb, hid, idx, down, C, F, k, c, t, lane, nl, nb, 0);
		for (int q = 0; q < nq; q++) {
			uint4 dc[U];
			ActVec<float, VEC> hc[U];
#pragma unroll
			for (int u = 0; u < U; u++) {
				dc[u] = db[u];
				hc[u] = hb[u];
			}
			if (q + 1 < nq)
				moe_down_batch<W, U>(db, hb, hid, idx, down, C, F, k, c, t, lane, nl, nb, q + 1);
#pragma unroll
			for (int u = 0; u < U; u++)
				dot1_vec<W, VEC>(s, dc[u], hc[u]);
			if ((q + 1) % nb == 0) { /* the end of slot j's row (uniform per warp) */
				long long slot = (long long)t * k + q / nb;
				s = warp_sum(s);
				if (idx[slot] >= 0)
					acc += to_f(w[slot]) * s;
				s = 0.0f;
			}
		}
	} else {
		for (int j = 0; j < k; j++) {
			long long slot = (long long)t * k + j;
			int ex = idx[slot];
			if (ex < 0)
				continue;
			const W *dr = down + ((long long)ex * C + c) * F;
			const float *hr = hid + slot * F;
			float s = 0.0f;
			for (int i = lane; i < F; i += 32)
				s += to_f(dr[i]) * hr[i];
			s = warp_sum(s);
			acc += to_f(w[slot]) * s;
		}
	}
	if (lane == 0)
		y[(long long)t * C + c] = from_f<A>(acc);
}
