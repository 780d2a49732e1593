/*
** tests/gpu/test_kernels.cu — every CUDA kernel template in ops/kernels.cuh against the float32 CPU
** references of ops/ref.c, for each activation type A (float, bf16) and weight type W (float, bf16, f16).
** Runs on the GPU machine only (tests/gpu/build_kernels_test.sh builds it; CI never runs it).
**
** Inputs are fresh random values from a fixed-seed generator; 16-bit inputs are rounded first and the
** reference gets exactly the rounded values the GPU sees. Every GPU output is poisoned with NaN (bytes
** 0xFF) before the launch, so an element the kernel skips fails. Tolerances (relative L2 error):
**   - 1e-5 with float activations (any weight type: the weights are exact in float). The references
**     accumulate in double; the GPU accumulates in float in another order, which for dot products of
**     K <= 4224 random terms gives about sqrt(K)·2^-24 ≈ 1e-6 relative, and the GPU's expf/erfcf/
**     cosf differ from glibc's by an ulp or two. 1e-5 leaves a 10x margin and still catches any
**     missing or doubled term (an error of order 1/sqrt(K) >= 1.5e-2).
**   - 2e-2 with bf16 activations (DESIGN.md's bf16 bound): the bf16 output alone costs ~2^-9.
**   - exact (bits) for conversions, embedding, copies, permute, the cache writes, argmax (and the greedy
**     sampler's, split over SAMPLE_NB blocks a row), topk, and the element-wise binary ops (one IEEE
**     float operation on both sides, then the same rounding).
** Sampling is checked by its contract: greedy = argmax, top_k = 1 = argmax, same seed = same token,
** different seeds / steps differ on a flat distribution, draws stay inside the kept set (a logit at or
** above the k-th largest: top_k keeps every logit equal to the k-th, as HF does), and the
** frequencies of 4000 draws match softmax(logits/temperature) within 0.03 (about 4 standard deviations).
**
** Prints "ok - NAME" or "FAIL - NAME: detail" per check and "N passed, N failed"; exits non-zero on any
** failure.
*/
#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"
#include "../../ops/quant.cuh"
#include "../../ops/prefill.cuh"
#include "../../ops/moe_tc.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <set>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <time.h>
#include <type_traits>
#include <vector>

#include "../tap.h"

extern "C" {
#include "ref.h"
}

#include "../moe_tc_check.h"
#include "../attn_p16.h"

/* ---- CUDA errors (the checks: tests/tap.h) ---- */

/* Any CUDA error ends the run as a failed check that names the call, file and line. */
static void cuda_check(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return;
	printf("FAIL - cuda: %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
	n_fail++;
	exit(finish());
}
#define CK(call) cuda_check((call), #call, __FILE__, __LINE__)

/* A launch is checked twice: its configuration (cudaGetLastError) and its execution (synchronize). */
#define CK_LAUNCH()                                \
	do {                                       \
		CK(cudaGetLastError());            \
		CK(cudaDeviceSynchronize());       \
	} while (0)

/* printf into a std::string, for check names. */
/* ---- host-side types, random data, device buffers ---- */

static float h_to_f(float v) { return v; }
static float h_to_f(bf16 v) { return ref_bf16_to_f32(v.x); }
static float h_to_f(f16 v) { return ref_f16_to_f32(v.x); }

template <typename T> static T h_from_f(float v);
template <> float h_from_f<float>(float v) { return v; }
template <> bf16 h_from_f<bf16>(float v)
{
	bf16 b;
	b.x = ref_f32_to_bf16(v);
	return b;
}
template <> f16 h_from_f<f16>(float v)
{
	f16 h;
	h.x = ref_f32_to_f16(v);
	return h;
}

template <typename T> static const char *tname();
template <> const char *tname<float>() { return "f32"; }
template <> const char *tname<bf16>() { return "bf16"; }
template <> const char *tname<f16>() { return "f16"; }

/* The tolerance for outputs of activation type A (see the header comment). */
template <typename A> static double tol()
{
	return std::is_same<A, float>::value ? 1e-5 : 2e-2;
}

template <typename T> static std::vector<T> to_type(const std::vector<float> &f)
{
	std::vector<T> v(f.size());
	for (size_t i = 0; i < f.size(); i++)
		v[i] = h_from_f<T>(f[i]);
	return v;
}

template <typename T> static std::vector<float> to_float(const std::vector<T> &v)
{
	std::vector<float> f(v.size());
	for (size_t i = 0; i < v.size(); i++)
		f[i] = h_to_f(v[i]);
	return f;
}

/* Rounds float values through T and back: what a T tensor holding them contains. */
template <typename T> static std::vector<float> through(const std::vector<float> &f)
{
	return to_float(to_type<T>(f));
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

/* xorshift64: 64 random bits. */
static uint64_t rand64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/* Uniform in [lo, hi). */
static float frand(float lo, float hi)
{
	return lo + (hi - lo) * (float)((rand64() >> 11) * (1.0 / 9007199254740992.0));
}

static std::vector<float> rnd(size_t n, float lo = -1.0f, float hi = 1.0f)
{
	std::vector<float> v(n);
	for (auto &x : v)
		x = frand(lo, hi);
	return v;
}

/* Device buffers live until the end of the current test (free_all). */
static std::vector<void *> allocs;

template <typename T> static T *upload(const std::vector<T> &h)
{
	T *p;
	CK(cudaMalloc(&p, std::max<size_t>(h.size(), 1) * sizeof(T)));
	allocs.push_back(p);
	if (!h.empty())
		CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
	return p;
}

/* An output buffer filled with 0xFF bytes: NaN as float and bf16, -1 as int. */
template <typename T> static T *poisoned(size_t n)
{
	T *p;
	CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
	allocs.push_back(p);
	CK(cudaMemset(p, 0xFF, std::max<size_t>(n, 1) * sizeof(T)));
	return p;
}

template <typename T> static std::vector<T> download(const T *p, size_t n)
{
	std::vector<T> h(n);
	if (n)
		CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
	return h;
}

static void free_all(void)
{
	for (void *p : allocs)
		CK(cudaFree(p));
	allocs.clear();
}

/* ---- comparisons ---- */

/* ‖a−b‖/‖b‖; NaN anywhere (or a size mismatch) gives +inf so it never passes. */
static double rel_l2(const std::vector<float> &a, const std::vector<float> &b)
{
	if (a.size() != b.size())
		return INFINITY;
	double num = 0, den = 0;
	for (size_t i = 0; i < a.size(); i++) {
		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		double d = (double)a[i] - b[i];
		num += d * d;
		den += (double)b[i] * b[i];
	}
	if (den == 0)
		return num == 0 ? 0 : INFINITY;
	return sqrt(num / den);
}

static void check_close(const std::string &name, const std::vector<float> &got, const std::vector<float> &want,
			double tolerance)
{
	double e = rel_l2(got, want);
	size_t bad = 0;
	while (bad < got.size() && !isnan(got[bad]))
		bad++;
	std::string why = fmt("rel-L2 %.3g > %.3g", e, tolerance);
	if (bad < got.size())
		why += fmt(" (NaN at %zu)", bad);
	check(e <= tolerance, name, why);
}

/* Byte-exact comparison of two arrays of T. */
template <typename T>
static void check_exact(const std::string &name, const std::vector<T> &got, const std::vector<T> &want)
{
	if (got.size() != want.size()) {
		check(false, name, fmt("size %zu, want %zu", got.size(), want.size()));
		return;
	}
	for (size_t i = 0; i < got.size(); i++)
		if (memcmp(&got[i], &want[i], sizeof(T))) {
			unsigned g = 0, w = 0;
			memcpy(&g, &got[i], sizeof(T) < 4 ? sizeof(T) : 4);
			memcpy(&w, &want[i], sizeof(T) < 4 ? sizeof(T) : 4);
			check(false, name, fmt("element %zu: bits 0x%x, want 0x%x", i, g, w));
			return;
		}
	check(true, name);
}

/* ---- __global__ wrappers, as glmc's emitter writes them ---- */

template <typename A, typename W>
__global__ void __launch_bounds__(256) g_embedding(A *y, const W *t, const int *ids, int T, int C)
{
	k_embedding<A, W>(y, t, ids, T, C);
}

template <typename A, typename W, bool HB, int RB, int TR>
__global__ void __launch_bounds__(256) g_gemv(A *y, const A *x, const W *w, const A *b, int T, int K, int N)
{
	k_linear_gemv<A, W, HB, RB, TR>(y, x, w, b, T, K, N);
}


template <typename A, typename W, bool HB>
__global__ void __launch_bounds__(256) g_gemm(A *y, const A *x, const W *w, const A *b, int T, int K, int N)
{
	k_linear_gemm<A, W, HB>(y, x, w, b, T, K, N);
}

template <typename A, typename B_>
__global__ void __launch_bounds__(256) g_matmul(A *y, const A *a, const B_ *b, int M, int K, int N)
{
	k_matmul<A, B_>(y, a, b, M, K, N);
}

template <typename A, typename B_, int OP>
__global__ void __launch_bounds__(256) g_binary(A *y, const A *a, const B_ *b, long long n, long long nb)
{
	k_binary<A, B_, OP>(y, a, b, n, nb);
}

template <typename A, int OP>
__global__ void __launch_bounds__(256) g_unary(A *y, const A *x, long long n, float s)
{
	k_unary<A, OP>(y, x, n, s);
}

template <typename A> __global__ void __launch_bounds__(256) g_swiglu(A *y, const A *g, const A *u, long long n)
{
	k_swiglu<A>(y, g, u, n);
}

template <typename A> __global__ void __launch_bounds__(256) g_softmax(A *y, const A *x, int N)
{
	k_softmax<A>(y, x, N);
}

template <typename A, typename W, bool HW>
__global__ void __launch_bounds__(256) g_rmsnorm(A *y, const A *x, const W *w, int N, float eps)
{
	k_rmsnorm<A, W, HW>(y, x, w, N, eps);
}

/* k_rmsnorm's long-row path (walk_row twice) run whatever N is, so the register path for rows of up to
** 32 elements a thread can be checked bit for bit against it. */
template <typename A, typename W, bool HW>
__global__ void __launch_bounds__(256) g_rmsnorm_walk(A *y, const A *x, const W *w, int N, float eps)
{
	const A *xr = x + (long long)blockIdx.x * N;
	A *yr = y + (long long)blockIdx.x * N;
	float ss = 0.0f;
	walk_row(xr, N, [&](int, float v) { ss += v * v; });
	float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
	walk_row(xr, N, [&](int i, float v) {
		v *= inv;
		if (HW)
			v *= to_f(w[i]);
		yr[i] = from_f<A>(v);
	});
}

template <typename A, typename W, bool HW, bool HB>
__global__ void __launch_bounds__(256) g_layernorm(A *y, const A *x, const W *w, const W *b, int N, float eps)
{
	k_layernorm<A, W, HW, HB>(y, x, w, b, N, eps);
}

template <typename A, bool IL>
__global__ void __launch_bounds__(128)
	g_rope(A *y, const A *x, const int *pos, const float *inv_freq, float cs, int H, int D, int R)
{
	k_rope<A, IL>(y, x, pos, inv_freq, cs, H, D, R);
}

/* Every token in sequence slot 0 (the slot arithmetic is covered end to end by tests/batch.sh). */
__device__ int g_zero_seq[1 << 16];

template <typename A>
__global__ void __launch_bounds__(256)
	g_kv_write(A *kc, A *vc, const A *k, const A *v, const int *pos, int KW, int VW)
{
	k_kv_write<A>(kc, vc, k, v, pos, KW, VW, g_zero_seq, 0);
}

template <typename A, int NW>
__global__ void __launch_bounds__(32 * NW) g_attention(A *y, const A *q, const A *kc, const A *vc, const int *pos,
						       int H, int G, int Dk, int Dv, float scale)
{
	k_attention<A, NW>(y, q, kc, vc, pos, H, G, Dk, Dv, scale, g_zero_seq, 0);
}

template <int D>
__global__ void __launch_bounds__(128) g_attn_tc(bf16 *y, const bf16 *q, const bf16 *kc, const bf16 *vc, const int *pos,
                                                 int H, int G, float scale, const int *seq, int S, int T)
{
	k_attn_tc<D>(y, q, kc, vc, pos, H, G, scale, seq, S, T);
}

template <int DS, int NZ, int RG>
__global__ void __launch_bounds__(32 * RG * NZ) g_dsa_tc(bf16 *y, const bf16 *q, const bf16 *cache, const int *pos, const int *sel,
                                                int nsel, int vfirst, int H, int Dk, int Dv, float scale)
{
	extern __shared__ __align__(128) unsigned char g_dsm[];
	k_dsa_tc<DS, NZ, RG>(y, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale, g_zero_seq, 0, g_dsm);
}

template <int DS, int NZ, int RG>
__global__ void __launch_bounds__(32 * RG * NZ) g_mla_split_tc(float *pacc, float *pml, const bf16 *q, const bf16 *cache,
                                                               const int *pos, int H, int Dk, int Dv, float scale)
{
	extern __shared__ __align__(128) unsigned char g_dsm[];
	k_mla_split_tc<DS, NZ, RG>(pacc, pml, q, cache, pos, nullptr, 0, 0, H, Dk, Dv, scale, g_zero_seq, 0, g_dsm);
}

template <bool WKT>
__global__ void __launch_bounds__(256) g_mla_xkv(bf16 *kx, bf16 *vx, const bf16 *cache, const bf16 *wk, const bf16 *wv,
                                                 const int *pos, int H, int Dn, int Dv, int L, int Dk, int S, int T)
{
	k_mla_xkv<WKT>(kx, vx, cache, wk, wv, pos, H, Dn, Dv, L, Dk, g_zero_seq, S, T);
}

template <int DK, int DS>
__global__ void __launch_bounds__(128) g_mla_xattn(bf16 *y, const bf16 *q3, const bf16 *qr, const bf16 *kx, const bf16 *vx,
                                                   const bf16 *cache, const int *pos, int H, int Dn, int Dr, int Dv, int L,
                                                   int Dk, float scale, int S, int T)
{
	extern __shared__ __align__(128) unsigned char g_dsm[];
	k_mla_xattn<DK, DS>(y, q3, qr, kx, vx, cache, pos, H, Dn, Dr, Dv, L, Dk, scale, g_zero_seq, S, T, g_dsm);
}

template <bool HB>
__global__ void __launch_bounds__(256) g_gemm_tc(bf16 *y, const bf16 *x, const bf16 *w, const bf16 *b, int T, int K, int N)
{
	k_gemm_tc<HB>(y, x, w, b, T, K, N);
}

template <typename A, int ROWB>
__global__ void __launch_bounds__(512) g_attn_step(A *y, const A *q, const A *kc, const A *vc, const int *pos, int H,
						   int G, int Dk, int Dv, float scale)
{
	k_attn_step<A, ROWB>(y, q, kc, vc, pos, H, G, Dk, Dv, scale, g_zero_seq, 0);
}

template <typename A> __global__ void __launch_bounds__(256) g_argmax(int *y, const A *x, int N)
{
	k_argmax<A>(y, x, N);
}

template <typename A> __global__ void __launch_bounds__(256) g_topk(int *y, const A *x, int N, int k)
{
	k_topk<A>(y, x, N, k);
}

template <typename E>
__global__ void __launch_bounds__(256) g_copy_slab(E *y, const E *x, long long outer, long long inner, long long len,
						   long long sax, long long sat, long long dax, long long dat)
{
	k_copy_slab<E>(y, x, outer, inner, len, sax, sat, dax, dat);
}

template <typename E>
__global__ void __launch_bounds__(256)
	g_permute(E *y, const E *x, int d0, int d1, int d2, int d3, int p0, int p1, int p2, int p3)
{
	k_permute<E>(y, x, d0, d1, d2, d3, p0, p1, p2, p3);
}

template <typename A>
__global__ void __launch_bounds__(1024) g_sample(int *out, int cap, int *nt, int *np, int *step, const A *logits,
						 int V, const float *params, float *part_v, int *part_i, unsigned *done)
{
	k_sample<A>(out, cap, nt, np, step, logits, V, params, g_zero_seq, part_v, part_i, done);
}

/* The conversions themselves, one element per thread. */
template <typename T> __global__ void g_widen(float *y, const T *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = to_f(x[i]);
}

template <typename T> __global__ void g_narrow(T *y, const float *x, int n)
{
	int i = blockIdx.x * blockDim.x + threadIdx.x;
	if (i < n)
		y[i] = from_f<T>(x[i]);
}

static unsigned blocks(long long n, int per)
{
	return (unsigned)((n + per - 1) / per);
}

/* ---- tests ---- */

static float u2f(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Widening of every 16-bit pattern, and narrowing of special values, both rounding boundaries and
** random bit patterns, bit for bit against ref.c's conversions (NaN payloads included). */
template <typename T> static void test_conversions(uint16_t (*ref_narrow)(float), float (*ref_widen)(uint16_t))
{
	std::vector<T> all(65536);
	for (int i = 0; i < 65536; i++)
		all[i].x = (unsigned short)i;
	std::vector<float> want(65536);
	for (int i = 0; i < 65536; i++)
		want[i] = ref_widen((uint16_t)i);
	float *dy = poisoned<float>(65536);
	g_widen<T><<<blocks(65536, 256), 256>>>(dy, upload(all), 65536);
	CK_LAUNCH();
	check_exact(fmt("to_f(%s) all 65536 patterns", tname<T>()), download(dy, 65536), want);

	std::vector<float> x;
	const uint32_t special[] = {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001,
				    0x7fbfffff, 0x00000001, 0x807fffff, 0x7f7fffff, 0xff7fffff, 0x477fe000, 0x477ff000,
				    0x477fefff, 0x477ff001, 0x47800000, 0x38800000, 0x387fffff, 0x33800000, 0x33000000,
				    0x33000001, 0x32ffffff, 0x337fffff, 0x3f800000, 0x3f801000, 0x3f803000, 0x3f808000,
				    0x3f818000, 0x3f807fff, 0x3f800001, 0xbf808001};
	for (uint32_t u : special)
		x.push_back(u2f(u));
	/* every f16 value's neighbourhood: just below, at and just above each halfway point */
	for (uint32_t h = 0; h < 0x7c00; h++) {
		float lo = ref_f16_to_f32((uint16_t)h), hi = ref_f16_to_f32((uint16_t)(h + 1));
		float mid = lo + (hi - lo) / 2; /* exact: adjacent halves differ by a power of two */
		x.push_back(mid);
		x.push_back(nextafterf(mid, 0));
		x.push_back(nextafterf(mid, INFINITY));
		x.push_back(-mid);
	}
	for (int i = 0; i < (1 << 20); i++)
		x.push_back(u2f((uint32_t)(rand64() >> 32)));
	int n = (int)x.size();
	std::vector<T> want_n(n);
	for (int i = 0; i < n; i++)
		want_n[i].x = ref_narrow(x[i]);
	T *dn = poisoned<T>(n);
	g_narrow<T><<<blocks(n, 256), 256>>>(dn, upload(x), n);
	CK_LAUNCH();
	check_exact(fmt("from_f<%s> %d values (specials, halfway points, random bits)", tname<T>(), n), download(dn, n),
		    want_n);
	free_all();
}

template <typename A, typename W> static void test_embedding()
{
	int T = 3, C = 300, V = 50;
	std::vector<W> tab = to_type<W>(rnd((size_t)V * C));
	std::vector<float> tabf = to_float(tab), want((size_t)T * C);
	std::vector<int> ids = {7, 0, 49};
	ref_embedding(want.data(), tabf.data(), ids.data(), T, C);
	A *dy = poisoned<A>((size_t)T * C);
	g_embedding<A, W><<<dim3(blocks(C, 256), T), 256>>>(dy, upload(tab), upload(ids), T, C);
	CK_LAUNCH();
	check_exact(fmt("embedding A=%s W=%s T=%d C=%d", tname<A>(), tname<W>(), T, C),
		    to_float(download(dy, (size_t)T * C)), through<A>(want));
	free_all();
}

/* ---- tensor parallelism: vocab-parallel embedding, the allgather reorder, the one-shot allreduce ---- */

template <typename A, typename W>
__global__ void __launch_bounds__(256) g_embedding_vp(A *y, const W *t, const int *ids, int T, int C, int V, int rank)
{
	k_embedding_vp<A, W>(y, t, ids, T, C, V, rank);
}

template <typename E>
__global__ void __launch_bounds__(256) g_gather_interleave(E *y, const E *src, long long outer, long long part, int tp)
{
	k_gather_interleave<E>(y, src, outer, part, tp);
}

template <typename A>
__global__ void __launch_bounds__(512) g_p2p_allreduce(A *y, const A *x, long long n, const P2pCtl *c)
{
	k_p2p_allreduce<A>(y, x, n, c);
}

/* Rank 1 of 3 holds rows [50, 100) of a 150-row vocabulary: its rows are copied, every other id gives 0. */
template <typename A, typename W> static void test_embedding_vp()
{
	int T = 6, C = 300, V = 50, rank = 1;
	std::vector<W> tab = to_type<W>(rnd((size_t)V * C));
	std::vector<float> tabf = to_float(tab), want((size_t)T * C, 0.0f);
	std::vector<int> ids = {7, 60, 99, 100, 149, 50};
	for (int t = 0; t < T; t++)
		if (ids[t] >= rank * V && ids[t] < (rank + 1) * V)
			memcpy(&want[(size_t)t * C], &tabf[(size_t)(ids[t] - rank * V) * C], sizeof(float) * C);
	A *dy = poisoned<A>((size_t)T * C);
	g_embedding_vp<A, W><<<dim3(blocks(C, 256), T), 256>>>(dy, upload(tab), upload(ids), T, C, V, rank);
	CK_LAUNCH();
	check_exact(fmt("vocab-parallel embedding A=%s W=%s (rank 1 of 3)", tname<A>(), tname<W>()),
		    to_float(download(dy, (size_t)T * C)), through<A>(want));
	free_all();
}

/* NCCL's rank-major [tp][outer][part] into the gathered [outer][tp][part], bit for bit. */
template <typename E> static void test_gather_interleave(long long outer, long long part, int tp)
{
	size_t n = (size_t)(outer * part * tp);
	std::vector<E> src(n), want(n);
	for (auto &v : src)
		v = (E)rand64();
	for (long long r = 0; r < tp; r++)
		for (long long o = 0; o < outer; o++)
			for (long long p = 0; p < part; p++)
				want[(size_t)((o * tp + r) * part + p)] = src[(size_t)((r * outer + o) * part + p)];
	E *dy = poisoned<E>(n);
	g_gather_interleave<E><<<blocks((long long)n, 256), 256>>>(dy, upload(src), outer, part, tp);
	CK_LAUNCH();
	check_exact(fmt("gather interleave %zu-byte elements outer %lld part %lld tp %d", sizeof(E), outer, part, tp),
		    download(dy, n), want);
	free_all();
}

/* Wait for every stream, at most 20 s: a protocol bug shows as a kernel spinning for ever. */
static bool wait_streams(const std::vector<cudaStream_t> &st)
{
	for (int i = 0; i < 2000; i++) {
		bool done = true;
		for (cudaStream_t s : st) {
			cudaError_t e = cudaStreamQuery(s);
			if (e != cudaErrorNotReady)
				CK(e);
			done &= e == cudaSuccess;
		}
		if (done)
			return true;
		struct timespec ts = {0, 10000000};
		nanosleep(&ts, NULL);
	}
	return false;
}

/* The sum over ranks in rank order from 0, as k_p2p_allreduce forms it, rounded to A. */
template <typename A> static std::vector<A> rank_sum(const std::vector<std::vector<A>> &x)
{
	std::vector<A> y(x[0].size());
	for (size_t i = 0; i < y.size(); i++) {
		float acc = 0.0f;
		for (const auto &v : x)
			acc += h_to_f(v[i]);
		y[i] = h_from_f<A>(acc);
	}
	return y;
}

/* tp simulated ranks on this GPU: a stream each, a mailbox each (cap bytes a sender and slot, cleared),
** and each rank's control block addressing all the mailboxes. */
static void p2p_ranks(int tp, long long cap, std::vector<cudaStream_t> &st, std::vector<P2pCtl *> &ctl)
{
	std::vector<char *> mbox(tp);
	for (int r = 0; r < tp; r++) {
		CK(cudaStreamCreateWithFlags(&st[r], cudaStreamNonBlocking));
		CK(cudaMalloc(&mbox[r], P2P_FLAGS_BYTES + 2 * (size_t)tp * cap));
		CK(cudaMemset(mbox[r], 0, P2P_FLAGS_BYTES + 2 * (size_t)tp * cap));
		allocs.push_back(mbox[r]);
	}
	for (int r = 0; r < tp; r++) {
		unsigned *counters = upload(std::vector<unsigned>(2, 0u));
		P2pCtl c = {};
		for (int q = 0; q < tp; q++)
			c.mbox[q] = mbox[q];
		c.seq = counters, c.arrive = counters + 1, c.rank = r, c.tp = tp, c.cap = cap;
		ctl[r] = upload(std::vector<P2pCtl>(1, c));
	}
}

/*
** tp simulated ranks on one GPU, each with its own stream, mailbox and control block, run the one-shot
** allreduce concurrently (peer access is not needed when the mailboxes share a device, the protocol is
** the same): three eager calls with fresh inputs (both slots, reused), then a CUDA graph per rank of
** three chained calls, replayed three times with the intermediate buffers poisoned in between. Every
** rank must get exactly the rank-ordered sum.
*/
template <typename A> static void test_p2p_allreduce(int tp, long long n)
{
	std::string name = fmt("P2P allreduce %s tp %d, %lld bytes", tname<A>(), tp, n * (long long)sizeof(A));
	long long bytes = n * (long long)sizeof(A), cap = (bytes + 255) / 256 * 256, nv = bytes / 16;
	unsigned nb = (unsigned)std::min<long long>(P2P_NBMAX, std::max<long long>(1, (nv + 511) / 512));
	std::vector<cudaStream_t> st(tp);
	std::vector<P2pCtl *> ctl(tp);
	p2p_ranks(tp, cap, st, ctl);
	bool ok = true;
	std::string why;
	std::vector<A *> dx(tp), dy(tp), dz(tp), dw(tp);
	for (int round = 0; round < 3 && ok; round++) {
		std::vector<std::vector<A>> x(tp);
		for (int r = 0; r < tp; r++) {
			x[r] = to_type<A>(rnd((size_t)n));
			dx[r] = upload(x[r]), dy[r] = poisoned<A>((size_t)n);
		}
		for (int r = 0; r < tp; r++)
			g_p2p_allreduce<A><<<nb, 512, 0, st[r]>>>(dy[r], dx[r], n, ctl[r]);
		CK(cudaGetLastError());
		if (!wait_streams(st)) {
			check(false, name, fmt("eager call %d did not finish within 20 s", round + 1));
			exit(finish());
		}
		std::vector<A> want = rank_sum(x);
		for (int r = 0; r < tp && ok; r++) {
			std::vector<A> got = download(dy[r], (size_t)n);
			for (size_t i = 0; i < got.size() && ok; i++)
				if (memcmp(&got[i], &want[i], sizeof(A)))
					ok = false, why = fmt("eager call %d, rank %d, element %zu: %g, want %g", round + 1, r, i,
							      h_to_f(got[i]), h_to_f(want[i]));
		}
	}
	/* Graphs: y = allreduce(x), z = allreduce(y), w = allreduce(z) on every rank. */
	std::vector<std::vector<A>> x(tp);
	for (int r = 0; r < tp; r++) {
		x[r] = to_type<A>(rnd((size_t)n));
		dx[r] = upload(x[r]), dy[r] = poisoned<A>((size_t)n), dz[r] = poisoned<A>((size_t)n), dw[r] = poisoned<A>((size_t)n);
	}
	std::vector<A> y = rank_sum(x);
	std::vector<std::vector<A>> ys(tp, y);
	std::vector<A> z = rank_sum(ys);
	std::vector<std::vector<A>> zs(tp, z);
	std::vector<A> w = rank_sum(zs);
	std::vector<cudaGraphExec_t> exec(tp);
	for (int r = 0; r < tp && ok; r++) {
		cudaGraph_t gr;
		CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
		g_p2p_allreduce<A><<<nb, 512, 0, st[r]>>>(dy[r], dx[r], n, ctl[r]);
		g_p2p_allreduce<A><<<nb, 512, 0, st[r]>>>(dz[r], dy[r], n, ctl[r]);
		g_p2p_allreduce<A><<<nb, 512, 0, st[r]>>>(dw[r], dz[r], n, ctl[r]);
		CK(cudaStreamEndCapture(st[r], &gr));
		CK(cudaGraphInstantiate(&exec[r], gr, 0));
		CK(cudaGraphDestroy(gr));
	}
	for (int rep = 0; rep < 3 && ok; rep++) {
		for (int r = 0; r < tp; r++) {
			CK(cudaMemsetAsync(dy[r], 0xFF, (size_t)n * sizeof(A), st[r]));
			CK(cudaMemsetAsync(dz[r], 0xFF, (size_t)n * sizeof(A), st[r]));
			CK(cudaMemsetAsync(dw[r], 0xFF, (size_t)n * sizeof(A), st[r]));
			CK(cudaGraphLaunch(exec[r], st[r]));
		}
		if (!wait_streams(st)) {
			check(false, name, fmt("graph replay %d did not finish within 20 s", rep + 1));
			exit(finish());
		}
		for (int r = 0; r < tp && ok; r++) {
			std::vector<A> got = download(dw[r], (size_t)n);
			for (size_t i = 0; i < got.size() && ok; i++)
				if (memcmp(&got[i], &w[i], sizeof(A)))
					ok = false, why = fmt("graph replay %d, rank %d, element %zu: %g, want %g", rep + 1, r, i,
							      h_to_f(got[i]), h_to_f(w[i]));
		}
	}
	for (int r = 0; r < tp; r++) {
		if (exec[r])
			CK(cudaGraphExecDestroy(exec[r]));
		CK(cudaStreamDestroy(st[r]));
	}
	check(ok, name + " (eager x3, graph of 3 chained calls x3)", why);
	free_all();
}

template <typename A, typename W, bool HW>
__global__ void __launch_bounds__(256) g_add_rmsnorm_ar(A *sum, A *y, A *b, const A *a, const A *part, const W *w, int N,
							float eps, const P2pCtl *c)
{
	k_add_rmsnorm_ar<A, W, HW>(sum, y, b, a, part, w, N, eps, c);
}

/*
** k_add_rmsnorm_ar (ops/fused.cuh) on tp simulated ranks of one GPU, as test_p2p_allreduce: each rank's
** graph is the fused kernel doing the allreduce of its part (T rows of N) into b, then sum = a + b (in
** place over a, or not) and y = rmsnorm(sum); then a plain one-shot allreduce (the epoch it shares); then
** the fused kernel again on fresh parts. Replayed twice with every output poisoned. b must be the
** rank-ordered sum exactly, sum exactly a + b rounded to A, y within tol of the float64 norm, on every
** rank. Then the same kernel without a control block (b holds the sum: glmrun ran NCCL) on rank 0.
*/
template <typename A, typename W, bool HW> static void test_add_rmsnorm_ar(int tp, int T, int N, bool inplace)
{
	std::string name = fmt("add_rmsnorm_ar %s W=%s%s tp %d T=%d N=%d%s", tname<A>(), tname<W>(), HW ? "" : " no-weight", tp,
			       T, N, inplace ? " in place" : "");
	size_t n = (size_t)T * N;
	long long cap = ((long long)n * (long long)sizeof(A) + 255) / 256 * 256;
	std::vector<cudaStream_t> st(tp);
	std::vector<P2pCtl *> ctl(tp);
	p2p_ranks(tp, cap, st, ctl);
	/* two fused calls (parts p1, then p2 on the first's sum) around a plain allreduce of q */
	std::vector<std::vector<A>> p1(tp), p2(tp), q(tp);
	std::vector<A> a = to_type<A>(rnd(n));
	std::vector<W> w = to_type<W>(rnd((size_t)N, 0.5f, 1.5f));
	std::vector<A *> da(tp), db1(tp), ds1(tp), dy1(tp), dq(tp), dqs(tp), db2(tp), ds2(tp), dy2(tp), dp1(tp), dp2(tp);
	W *dw = HW ? upload(w) : nullptr;
	A *da0 = upload(a);
	for (int r = 0; r < tp; r++) {
		p1[r] = to_type<A>(rnd(n)), p2[r] = to_type<A>(rnd(n)), q[r] = to_type<A>(rnd(n));
		dp1[r] = upload(p1[r]), dp2[r] = upload(p2[r]), dq[r] = upload(q[r]), da[r] = upload(a);
		db1[r] = poisoned<A>(n), dy1[r] = poisoned<A>(n), dqs[r] = poisoned<A>(n), db2[r] = poisoned<A>(n);
		dy2[r] = poisoned<A>(n);
		ds1[r] = inplace ? da[r] : poisoned<A>(n);
		ds2[r] = inplace ? ds1[r] : poisoned<A>(n);
	}
	/* the references: b exact, sum exact, y in float64 from the rounded sum */
	auto refs = [&](const std::vector<A> &x, const std::vector<std::vector<A>> &p, std::vector<A> &b, std::vector<A> &sm,
			std::vector<float> &y) {
		b = rank_sum(p);
		sm.resize(n);
		for (size_t i = 0; i < n; i++)
			sm[i] = h_from_f<A>(h_to_f(x[i]) + h_to_f(b[i]));
		y.resize(n);
		std::vector<float> sf = to_float(sm), wf = to_float(w);
		ref_rmsnorm(y.data(), sf.data(), HW ? wf.data() : NULL, T, N, 1e-5f);
	};
	std::vector<A> b1, s1, b2, s2, qs = rank_sum(q);
	std::vector<float> y1, y2;
	refs(a, p1, b1, s1, y1);
	refs(s1, p2, b2, s2, y2);
	std::vector<cudaGraphExec_t> exec(tp);
	for (int r = 0; r < tp; r++) {
		cudaGraph_t gr;
		CK(cudaStreamBeginCapture(st[r], cudaStreamCaptureModeThreadLocal));
		if (inplace) /* the graph replays: put a back first */
			CK(cudaMemcpyAsync(da[r], da0, n * sizeof(A), cudaMemcpyDeviceToDevice, st[r]));
		g_add_rmsnorm_ar<A, W, HW><<<T, 256, 0, st[r]>>>(ds1[r], dy1[r], db1[r], da[r], dp1[r], dw, N, 1e-5f, ctl[r]);
		g_p2p_allreduce<A><<<1, 512, 0, st[r]>>>(dqs[r], dq[r], (long long)n, ctl[r]);
		g_add_rmsnorm_ar<A, W, HW><<<T, 256, 0, st[r]>>>(ds2[r], dy2[r], db2[r], ds1[r], dp2[r], dw, N, 1e-5f, ctl[r]);
		CK(cudaStreamEndCapture(st[r], &gr));
		CK(cudaGraphInstantiate(&exec[r], gr, 0));
		CK(cudaGraphDestroy(gr));
	}
	bool ok = true;
	std::string why;
	auto same = [&](const char *what, int rep, int r, const std::vector<A> &got, const std::vector<A> &want) {
		for (size_t i = 0; i < n && ok; i++)
			if (memcmp(&got[i], &want[i], sizeof(A)))
				ok = false, why = fmt("replay %d, rank %d, %s element %zu: %g, want %g", rep, r, what, i, h_to_f(got[i]),
						     h_to_f(want[i]));
	};
	for (int rep = 1; rep <= 2 && ok; rep++) {
		for (int r = 0; r < tp; r++) {
			for (A *p : {db1[r], dy1[r], dqs[r], db2[r], dy2[r]})
				CK(cudaMemsetAsync(p, 0xFF, n * sizeof(A), st[r]));
			if (!inplace)
				for (A *p : {ds1[r], ds2[r]})
					CK(cudaMemsetAsync(p, 0xFF, n * sizeof(A), st[r]));
			CK(cudaGraphLaunch(exec[r], st[r]));
		}
		if (!wait_streams(st)) {
			check(false, name, fmt("graph replay %d did not finish within 20 s", rep));
			exit(finish());
		}
		for (int r = 0; r < tp && ok; r++) {
			same("b", rep, r, download(db1[r], n), b1);
			if (!inplace) /* in place, the second call overwrote it (its sum checks it) */
				same("sum", rep, r, download(ds1[r], n), s1);
			same("plain allreduce", rep, r, download(dqs[r], n), qs);
			same("second b", rep, r, download(db2[r], n), b2);
			same("second sum", rep, r, download(ds2[r], n), s2);
			double e1 = rel_l2(to_float(download(dy1[r], n)), y1), e2 = rel_l2(to_float(download(dy2[r], n)), y2);
			if (ok && !(e1 <= tol<A>() && e2 <= tol<A>()))
				ok = false, why = fmt("replay %d, rank %d: norm rel-L2 %.3g and %.3g (tol %g)", rep, r, e1, e2, tol<A>());
		}
	}
	for (int r = 0; r < tp; r++) {
		CK(cudaGraphExecDestroy(exec[r]));
		CK(cudaStreamDestroy(st[r]));
	}
	check(ok, name + " (graph of fused, plain, fused x2)", why);
	/* without a control block: b already holds the sum */
	A *db = upload(b1), *dx = upload(a), *ds = inplace ? dx : poisoned<A>(n), *dy = poisoned<A>(n);
	g_add_rmsnorm_ar<A, W, HW><<<T, 256>>>(ds, dy, db, dx, db1[0], dw, N, 1e-5f, nullptr);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	std::vector<A> got = download(ds, n);
	check(!memcmp(got.data(), s1.data(), n * sizeof(A)), name + " without a control block: sum", "differs");
	check_close(name + " without a control block: norm", to_float(download(dy, n)), y1, tol<A>());
	free_all();
}

template <typename A> static void tp_suite()
{
	test_embedding_vp<A, float>();
	test_embedding_vp<A, bf16>();
	test_p2p_allreduce<A>(2, 2048 / sizeof(A));
	test_p2p_allreduce<A>(3, 3108 * 4 / sizeof(A));
	test_p2p_allreduce<A>(4, 65536 / sizeof(A));
	test_p2p_allreduce<A>(8, 262144 / sizeof(A));
	test_add_rmsnorm_ar<A, float, true>(2, 1, 6144, true);
	test_add_rmsnorm_ar<A, bf16, true>(2, 3, 2048, false);
	test_add_rmsnorm_ar<A, float, false>(4, 1, 8192, false);
	test_add_rmsnorm_ar<A, bf16, true>(8, 17, 4096, true);
	test_add_rmsnorm_ar<A, float, true>(3, 2, 64, false);
}

/* k_linear_gemv with RB columns per block and bt threads (0, 0: the shape glmc emits), one row per
** pass for T = 1 and 8 otherwise, as glmc emits it. */
template <typename A, typename W, bool HB>
static void launch_gemv(int rb, int bt, A *y, const A *x, const W *w, const A *b, int T, int K, int N)
{
	if (!rb)
		gemv_shape_h(K, N, sizeof(W), GEMV_SMS_SM90, &bt, &rb);
	auto k = rb == 4 ? (T == 1 ? g_gemv<A, W, HB, 4, 1> : g_gemv<A, W, HB, 4, 8>)
		 : rb == 2 ? (T == 1 ? g_gemv<A, W, HB, 2, 1> : g_gemv<A, W, HB, 2, 8>)
			   : (T == 1 ? g_gemv<A, W, HB, 1, 1> : g_gemv<A, W, HB, 1, 8>);
	k<<<blocks(N, rb), bt>>>(y, x, w, b, T, K, N);
}

/* One linear layer through the GEMV (gemm = false) or GEMM kernel. misalign offsets the weight pointer
** by one element, which forces the GEMV's scalar path. rb, bt: the GEMV's columns per block and threads
** (0: the shape glmc emits). */
template <typename A, typename W>
static void test_linear(bool gemm, int T, int K, int N, bool bias, bool misalign = false, int rb = 0, int bt = 0)
{
	std::vector<A> x = to_type<A>(rnd((size_t)T * K)), b = to_type<A>(rnd(N));
	std::vector<W> w = to_type<W>(rnd((size_t)N * K + 1));
	std::vector<float> xf = to_float(x), wf = to_float(w), bf = to_float(b), want((size_t)T * N);
	int off = misalign ? 1 : 0;
	ref_linear(want.data(), xf.data(), wf.data() + off, bias ? bf.data() : NULL, T, K, N);
	A *dy = poisoned<A>((size_t)T * N), *dx = upload(x), *db = upload(b);
	W *dw = upload(w) + off;
	if (!gemm && bias)
		launch_gemv<A, W, true>(rb, bt, dy, dx, dw, db, T, K, N);
	else if (!gemm)
		launch_gemv<A, W, false>(rb, bt, dy, dx, dw, nullptr, T, K, N);
	else if (bias)
		g_gemm<A, W, true><<<dim3(blocks(N, 64), blocks(T, 64)), 256>>>(dy, dx, dw, db, T, K, N);
	else
		g_gemm<A, W, false><<<dim3(blocks(N, 64), blocks(T, 64)), 256>>>(dy, dx, dw, nullptr, T, K, N);
	CK_LAUNCH();
	check_close(fmt("%s A=%s W=%s T=%d K=%d N=%d%s%s%s", gemm ? "linear_gemm" : "linear_gemv", tname<A>(), tname<W>(), T,
			K, N, bias ? " bias" : "", misalign ? " misaligned-w" : "",
			rb ? fmt(" rb=%d bt=%d", rb, bt).c_str() : ""),
		    to_float(download(dy, (size_t)T * N)), want, tol<A>());
	free_all();
}

template <typename A, typename B_> static void test_matmul()
{
	int B = 2, M = 3, K = 70, N = 300;
	std::vector<A> a = to_type<A>(rnd((size_t)B * M * K));
	std::vector<B_> b = to_type<B_>(rnd((size_t)B * K * N));
	std::vector<float> af = to_float(a), bf = to_float(b), want((size_t)B * M * N);
	ref_matmul(want.data(), af.data(), bf.data(), B, M, K, N);
	A *dy = poisoned<A>(want.size());
	g_matmul<A, B_><<<dim3(blocks(N, 256), M, B), 256>>>(dy, upload(a), upload(b), M, K, N);
	CK_LAUNCH();
	check_close(fmt("matmul A=%s B=%s B=%d M=%d K=%d N=%d", tname<A>(), tname<B_>(), B, M, K, N),
		    to_float(download(dy, want.size())), want, tol<A>());
	free_all();
}

template <typename A, typename B_, int OP> static void test_binary()
{
	static const char *names[] = {"add", "sub", "mul", "div"};
	long long n = 1000, nb = 40;
	std::vector<A> a = to_type<A>(rnd(n));
	std::vector<float> braw = rnd(nb);
	if (OP == 3) /* keep divisors away from zero */
		for (auto &v : braw)
			v = (v < 0 ? -1.0f : 1.0f) * (0.5f + fabsf(v));
	std::vector<B_> b = to_type<B_>(braw);
	std::vector<float> af = to_float(a), bf = to_float(b), want(n);
	if (OP == 0)
		ref_add(want.data(), af.data(), bf.data(), n, nb);
	else if (OP == 1)
		ref_sub(want.data(), af.data(), bf.data(), n, nb);
	else if (OP == 2)
		ref_mul(want.data(), af.data(), bf.data(), n, nb);
	else
		ref_div(want.data(), af.data(), bf.data(), n, nb);
	A *dy = poisoned<A>(n);
	g_binary<A, B_, OP><<<blocks(n, 256), 256>>>(dy, upload(a), upload(b), n, nb);
	CK_LAUNCH();
	check_exact(fmt("binary %s A=%s B=%s n=%lld nb=%lld", names[OP], tname<A>(), tname<B_>(), n, nb),
		    to_float(download(dy, n)), through<A>(want));
	free_all();
}

template <typename A, int OP> static void test_unary()
{
	static const char *names[] = {"scale", "silu", "gelu_erf", "gelu_tanh", "sigmoid"};
	long long n = 1000;
	float s = 0.37f;
	std::vector<A> x = to_type<A>(rnd(n, -6.0f, 6.0f));
	std::vector<float> xf = to_float(x), want(n);
	if (OP == 0)
		ref_scale(want.data(), xf.data(), n, s);
	else if (OP == 1)
		ref_silu(want.data(), xf.data(), n);
	else if (OP == 2 || OP == 3)
		ref_gelu(want.data(), xf.data(), n, OP == 3);
	else
		ref_sigmoid(want.data(), xf.data(), n);
	A *dy = poisoned<A>(n);
	g_unary<A, OP><<<blocks(n, 256), 256>>>(dy, upload(x), n, s);
	CK_LAUNCH();
	check_close(fmt("unary %s A=%s n=%lld", names[OP], tname<A>(), n), to_float(download(dy, n)), want, tol<A>());
	free_all();
}

template <typename A> static void test_swiglu()
{
	long long n = 1000;
	std::vector<A> g = to_type<A>(rnd(n, -6.0f, 6.0f)), u = to_type<A>(rnd(n));
	std::vector<float> gf = to_float(g), uf = to_float(u), want(n);
	ref_swiglu(want.data(), gf.data(), uf.data(), n);
	A *dy = poisoned<A>(n);
	g_swiglu<A><<<blocks(n, 256), 256>>>(dy, upload(g), upload(u), n);
	CK_LAUNCH();
	check_close(fmt("swiglu A=%s n=%lld", tname<A>(), n), to_float(download(dy, n)), want, tol<A>());
	free_all();
}

template <typename A> static void test_softmax(int R, int N)
{
	std::vector<A> x = to_type<A>(rnd((size_t)R * N, -5.0f, 5.0f));
	std::vector<float> xf = to_float(x), want(x.size());
	ref_softmax(want.data(), xf.data(), R, N);
	A *dy = poisoned<A>(x.size());
	g_softmax<A><<<R, 256>>>(dy, upload(x), N);
	CK_LAUNCH();
	check_close(fmt("softmax A=%s rows=%d N=%d", tname<A>(), R, N), to_float(download(dy, x.size())), want, tol<A>());
	free_all();
}

template <typename A, typename W, bool HW> static void test_rmsnorm(int R, int N)
{
	float eps = 1e-6f;
	std::vector<A> x = to_type<A>(rnd((size_t)R * N));
	std::vector<W> w = to_type<W>(rnd(N, 0.5f, 1.5f));
	std::vector<float> xf = to_float(x), wf = to_float(w), want(x.size());
	ref_rmsnorm(want.data(), xf.data(), HW ? wf.data() : NULL, R, N, eps);
	A *dy = poisoned<A>(x.size());
	g_rmsnorm<A, W, HW><<<R, 256>>>(dy, upload(x), HW ? upload(w) : nullptr, N, eps);
	CK_LAUNCH();
	std::vector<A> got = download(dy, x.size());
	check_close(fmt("rmsnorm A=%s W=%s%s rows=%d N=%d", tname<A>(), tname<W>(), HW ? "" : " (no weight)", R, N),
		    to_float(got), want, tol<A>());
	A *dw = poisoned<A>(x.size());
	g_rmsnorm_walk<A, W, HW><<<R, 256>>>(dw, upload(x), HW ? upload(w) : nullptr, N, eps);
	CK_LAUNCH();
	check_exact(fmt("rmsnorm A=%s W=%s%s rows=%d N=%d: bit for bit the two-pass walk", tname<A>(), tname<W>(),
			HW ? "" : " (no weight)", R, N), got, download(dw, x.size()));
	/* in place (y == x), as glmc may plan it */
	A *dx = upload(x);
	g_rmsnorm<A, W, HW><<<R, 256>>>(dx, dx, HW ? upload(w) : nullptr, N, eps);
	CK_LAUNCH();
	check_exact(fmt("rmsnorm A=%s W=%s%s rows=%d N=%d in place", tname<A>(), tname<W>(), HW ? "" : " (no weight)", R, N),
		    download(dx, x.size()), got);
	free_all();
}

template <typename A, typename W, bool HW, bool HB> static void test_layernorm(int R, int N)
{
	float eps = 1e-5f;
	std::vector<A> x = to_type<A>(rnd((size_t)R * N, 2.0f, 4.0f)); /* a large mean tests the two passes */
	std::vector<W> w = to_type<W>(rnd(N, 0.5f, 1.5f)), b = to_type<W>(rnd(N));
	std::vector<float> xf = to_float(x), wf = to_float(w), bf = to_float(b), want(x.size());
	ref_layernorm(want.data(), xf.data(), HW ? wf.data() : NULL, HB ? bf.data() : NULL, R, N, eps);
	A *dy = poisoned<A>(x.size());
	g_layernorm<A, W, HW, HB><<<R, 256>>>(dy, upload(x), HW ? upload(w) : nullptr, HB ? upload(b) : nullptr, N, eps);
	CK_LAUNCH();
	check_close(fmt("layernorm A=%s W=%s%s%s rows=%d N=%d", tname<A>(), tname<W>(), HW ? " weight" : "",
			HB ? " bias" : "", R, N),
		    to_float(download(dy, x.size())), want, tol<A>());
	free_all();
}

/* Rope against ref_rope with the same RefRope; inv_freq and cs_scale come from ref_rope_freqs as glmc
** will pass them. in_place runs with y == x. */
template <typename A, bool IL>
static void test_rope(int T, int H, int D, int R, int sc, std::vector<int> pos, bool in_place)
{
	RefRope r = {};
	r.head_dim = D;
	r.rot_dim = R;
	r.interleaved = IL;
	r.theta = 10000;
	r.scaling = sc;
	r.factor = sc == ROPE_LLAMA3 ? 8 : 4, r.orig_ctx = sc == ROPE_LLAMA3 ? 64 : 4096; /* llama3: most pairs scaled */
	r.low_freq_factor = 1, r.high_freq_factor = 4;
	std::vector<float> inv(R / 2);
	float cs;
	ref_rope_freqs(&r, inv.data(), &cs);
	std::vector<A> x = to_type<A>(rnd((size_t)T * H * D));
	std::vector<float> xf = to_float(x), want(x.size());
	ref_rope(want.data(), xf.data(), pos.data(), T, H, &r);
	A *dx = upload(x), *dy = in_place ? dx : poisoned<A>(x.size());
	g_rope<A, IL><<<T * H, 128>>>(dy, dx, upload(pos), upload(inv), cs, H, D, R);
	CK_LAUNCH();
	check_close(fmt("rope A=%s %s T=%d H=%d D=%d R=%d%s%s (cs_scale %.4f)", tname<A>(),
			IL ? "interleaved" : "split-half", T, H, D, R, sc ? fmt(" %s", ref_rope_scaling_name(sc)).c_str() : "", in_place ? " in-place" : "",
			cs),
		    to_float(download(dy, x.size())), want, tol<A>());
	free_all();
}

/*
** A prefill of `prefill` tokens, then `steps` single-token steps, each through k_kv_write and
** k_attention, against ref_attention run the same way on its own caches. The GPU caches start
** poisoned, so reading a row past pos[t] gives NaN; at the end the written rows must equal the
** reference caches exactly and the rest must still hold the poison.
*/
/* The worst |got − want| / (one bf16 unit of want + floor) over all elements (NaN: infinite): at most 1
** when got is want rounded to bf16 after an error below floor. */
static double worst_units(const std::vector<float> &got, const std::vector<float> &want, double floor)
{
	double worst = 0;
	for (size_t i = 0; i < got.size(); i++) {
		if (isnan(got[i]))
			return INFINITY;
		int e;
		frexp(want[i] == 0 ? 1e-30 : (double)want[i], &e);
		double d = fabs((double)got[i] - want[i]) / (ldexp(1.0, e - 8) + floor);
		worst = d > worst ? d : worst;
	}
	return worst;
}

/* ops/prefill.cuh's k_attn_tc: a prefill of T tokens after ctx cached rows (one slot), against
** tests/attn_p16.h's reference on the same bf16 values (the probabilities rounded to bf16 in 32-key tiles):
** within a bf16 unit plus 1.5e-5 plus its slack, as tests/simt/test_prefill.cc holds the CPU stand-in. */
template <int D> static void test_attn_tc(int H, int G, int T, int ctx, float scale)
{
	int S = ctx + T;
	size_t KW = (size_t)G * D;
	std::vector<float> kc = through<bf16>(rnd(S * KW)), vc = through<bf16>(rnd(S * KW));
	std::vector<float> q = through<bf16>(rnd((size_t)T * H * D)), want((size_t)T * H * D), slack(want.size());
	std::vector<int> pos(T), seq(T, 0);
	std::vector<double> sc(S), out(D), sl(D);
	for (int t = 0; t < T; t++) {
		pos[t] = ctx + t;
		for (int h = 0; h < H; h++) {
			size_t kv0 = (size_t)(h / (H / G)) * D;
			for (int j = 0; j <= pos[t]; j++) {
				double a = 0;
				for (int d = 0; d < D; d++)
					a += (double)q[((size_t)t * H + h) * D + d] * kc[kv0 + j * KW + d];
				sc[j] = a * scale;
			}
			attn_p16_row(out.data(), sl.data(), sc.data(), pos[t] + 1, 32, &vc[kv0], KW, D);
			for (int d = 0; d < D; d++)
				want[((size_t)t * H + h) * D + d] = (float)out[d], slack[((size_t)t * H + h) * D + d] = (float)sl[d];
		}
	}
	bf16 *dy = poisoned<bf16>(want.size());
	g_attn_tc<D><<<dim3(H, (T + 63) / 64), 128>>>(dy, upload(to_type<bf16>(q)), upload(to_type<bf16>(kc)),
	                                               upload(to_type<bf16>(vc)), upload(pos), H, G, scale, upload(seq), S, T);
	CK_LAUNCH();
	std::vector<float> got = to_float(download(dy, want.size()));
	double u = attn_p16_worst(got.data(), want.data(), slack.data(), got.size(), 1.5e-5);
	check(u <= 1.0, fmt("attn_tc D=%d H=%d G=%d T=%d after %d rows", D, H, G, T, ctx), fmt("worst %.2f units", u));
}

/* ops/prefill.cuh's k_dsa_tc: a DSA prefill of T tokens after ctx cached rows (one slot) with the
** indexer's kind of selection (vfirst): a context within nsel lists its rows (in random order) then -1s,
** a longer one nsel distinct visible rows in random order, every 9th -1; against ref_mla with the same
** selection on the same bf16 values, within a bf16 unit plus 1.5e-5 as test_attn_tc. */
template <int DS, int NZ, int RG> static void test_dsa_tc(int H, int Dk, int Dv, int ctx, int T, int nsel, float scale)
{
	int S = ctx + T;
	std::vector<float> cache = through<bf16>(rnd((size_t)S * Dk)), q = through<bf16>(rnd((size_t)T * H * Dk, -0.3f, 0.3f));
	std::vector<float> kv(cache.begin() + (size_t)ctx * Dk, cache.end()), cr = cache, want((size_t)T * H * Dv);
	std::vector<int> pos(T), sel((size_t)T * nsel, -1);
	for (int t = 0; t < T; t++) {
		int p = pos[t] = ctx + t, n = p + 1 < nsel ? p + 1 : nsel;
		std::vector<int> rows(p + 1);
		for (int r = 0; r <= p; r++)
			rows[r] = r;
		for (int i = 0; i < n; i++) /* the first n of a random permutation */
			std::swap(rows[i], rows[i + (int)(rand64() % (uint64_t)(p + 1 - i))]);
		for (int i = 0; i < n; i++)
			sel[(size_t)t * nsel + i] = n == nsel && i % 9 == 8 ? -1 : rows[i];
	}
	ref_mla(want.data(), q.data(), kv.data(), cr.data(), pos.data(), sel.data(), nsel, T, H, Dk, Dv, S, scale);
	bf16 *dy = poisoned<bf16>(want.size());
	int smem = (16 * RG + 64) * (Dk + 8) * 2;
	CK(cudaFuncSetAttribute(g_dsa_tc<DS, NZ, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	g_dsa_tc<DS, NZ, RG><<<dim3(T, Dv / (DS * NZ), (H + 16 * RG - 1) / (16 * RG)), 32 * RG * NZ, smem>>>(dy, upload(to_type<bf16>(q)), upload(to_type<bf16>(cache)),
	                                                             upload(pos), upload(sel), nsel, 1, H, Dk, Dv, scale);
	CK_LAUNCH();
	double u = worst_units(to_float(download(dy, want.size())), want, 1.5e-5);
	check(u <= 1.0, fmt("dsa_tc<%d, %d, %d> H=%d Dk=%d Dv=%d T=%d after %d rows, nsel %d", DS, NZ, RG, H, Dk, Dv, T, ctx, nsel),
	      fmt("worst %.2f units", u));
}

/* ops/prefill.cuh's k_mla_split_tc: a decode row at position ctx over its dense context, NS ranges; the
** states (poisoned first) merged here as k_mla_vabsorb merges them, against ref_mla on the same bf16
** values, within a bf16 unit plus 1.5e-5 as test_dsa_tc. */
template <int DS, int NZ, int RG> static void test_mla_split_tc(int H, int Dk, int Dv, int ctx, int NS, float scale)
{
	int S = ctx + 1;
	std::vector<float> cache = through<bf16>(rnd((size_t)S * Dk)), q = through<bf16>(rnd((size_t)H * Dk, -0.3f, 0.3f));
	std::vector<float> kv(cache.begin() + (size_t)ctx * Dk, cache.end()), cr = cache, want((size_t)H * Dv);
	std::vector<int> pos = {ctx};
	ref_mla(want.data(), q.data(), kv.data(), cr.data(), pos.data(), NULL, 0, 1, H, Dk, Dv, S, scale);
	float *acc = poisoned<float>((size_t)NS * H * Dv), *ml = poisoned<float>((size_t)NS * H * 2);
	int smem = (16 * RG + 64) * (Dk + 8) * 2, nz = Dv / (DS * NZ), HG = (H + 16 * RG - 1) / (16 * RG);
	CK(cudaFuncSetAttribute(g_mla_split_tc<DS, NZ, RG>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	g_mla_split_tc<DS, NZ, RG><<<dim3(NS, nz * HG, 1), 32 * RG * NZ, smem>>>(acc, ml, upload(to_type<bf16>(q)),
	                                                                       upload(to_type<bf16>(cache)), upload(pos), H, Dk, Dv, scale);
	CK_LAUNCH();
	std::vector<float> a = download(acc, (size_t)NS * H * Dv), m = download(ml, (size_t)NS * H * 2), got((size_t)H * Dv);
	int nr = mla_split_tc_ranges(ctx + 1, NS);
	bool empty = true;
	for (int h = 0; h < H; h++) {
		double M = -INFINITY;
		for (int x = 0; x < NS; x++) {
			const float *mx = &m[((size_t)x * H + h) * 2];
			if (x >= nr)
				empty = empty && mx[0] == -INFINITY && mx[1] == 0.0f;
			else
				M = mx[0] > M ? mx[0] : M;
		}
		for (int d = 0; d < Dv; d++) {
			double num = 0, den = 0;
			for (int x = 0; x < nr; x++) {
				const float *mx = &m[((size_t)x * H + h) * 2];
				double w = mx[0] == -INFINITY ? 0 : exp(mx[0] - M);
				num += w * a[((size_t)x * H + h) * Dv + d], den += w * mx[1];
			}
			got[(size_t)h * Dv + d] = ref_bf16_to_f32(ref_f32_to_bf16((float)(num / den)));
		}
	}
	double u = empty ? worst_units(got, want, 1.5e-5) : INFINITY;
	check(u <= 1.0, fmt("mla_split_tc<%d, %d, %d> H=%d Dk=%d Dv=%d at %d rows, NS %d", DS, NZ, RG, H, Dk, Dv, ctx + 1, NS),
	      empty ? fmt("worst %.2f units", u) : std::string("a range past the last is not empty"));
}

/* ops/prefill.cuh's expanded MLA prefill: k_mla_xkv against a double GEMM of the same bf16 values (one
** bf16 unit plus 1e-5), then k_mla_xattn against a double causal softmax over the GPU's own expanded rows
** (tests/attn_p16.h: the probabilities rounded in 32-key tiles; one unit plus 1.5e-5 plus its slack): T
** tokens after ctx cached rows, one sequence. wkt: W_UK uploaded as GGUF's
** split attn_k_b, [H, L, Dn]. */
template <int DK, int DS> static void test_mla_x(int T, int ctx, int H, int Dn, int Dr, int Dv, int L, bool wkt = false)
{
	int S = ctx + T, Dk = L + Dr, DQ = Dn + Dr, kn = ctx + T;
	std::vector<float> q3 = through<bf16>(rnd((size_t)T * H * DQ, -0.5f, 0.5f)), qr = through<bf16>(rnd((size_t)T * H * Dr, -0.5f, 0.5f));
	std::vector<float> c = through<bf16>(rnd((size_t)S * Dk)), wk = through<bf16>(rnd((size_t)H * Dn * L, -0.3f, 0.3f));
	std::vector<float> wv = through<bf16>(rnd((size_t)H * Dv * L, -0.3f, 0.3f));
	std::vector<int> pos(T);
	for (int t = 0; t < T; t++)
		pos[t] = ctx + t;
	bf16 *dkx = poisoned<bf16>((size_t)S * H * Dn), *dvx = poisoned<bf16>((size_t)S * H * Dv), *dy = poisoned<bf16>((size_t)T * H * Dv);
	bf16 *dc = upload(to_type<bf16>(c));
	int *dpos = upload(pos);
	std::vector<float> wkg(wk.size());
	for (int h = 0; h < H; h++)
		for (int d = 0; d < Dn; d++)
			for (int l = 0; l < L; l++)
				wkg[((size_t)h * L + l) * Dn + d] = wk[((size_t)h * Dn + d) * L + l];
	dim3 gx((H * (Dn > Dv ? Dn : Dv) + 127) / 128, (S + 127) / 128, 2);
	if (wkt)
		g_mla_xkv<true><<<gx, 256>>>(dkx, dvx, dc, upload(to_type<bf16>(wkg)), upload(to_type<bf16>(wv)), dpos, H, Dn, Dv, L, Dk, S, T);
	else
		g_mla_xkv<false><<<gx, 256>>>(dkx, dvx, dc, upload(to_type<bf16>(wk)), upload(to_type<bf16>(wv)), dpos, H, Dn, Dv, L, Dk, S, T);
	CK_LAUNCH();
	std::vector<float> kx = to_float(download(dkx, (size_t)kn * H * Dn)), vx = to_float(download(dvx, (size_t)kn * H * Dv));
	std::vector<float> kw((size_t)kn * H * Dn), vw((size_t)kn * H * Dv);
	for (int j = 0; j < kn; j++)
		for (int n = 0; n < H * (Dn + Dv); n++) {
			bool isk = n < H * Dn;
			const float *w = isk ? &wk[(size_t)n * L] : &wv[(size_t)(n - H * Dn) * L];
			double a = 0;
			for (int l = 0; l < L; l++)
				a += (double)w[l] * c[(size_t)j * Dk + l];
			(isk ? kw[(size_t)j * H * Dn + n] : vw[(size_t)j * H * Dv + n - H * Dn]) = (float)a;
		}
	double uk = worst_units(kx, kw, 1e-5), uv = worst_units(vx, vw, 1e-5);
	check(uk <= 1.0 && uv <= 1.0, fmt("mla_xkv%s T=%d after %d rows H=%d Dn=%d Dv=%d L=%d", wkt ? " (split W_UK)" : "", T, ctx, H, Dn, Dv, L),
	      fmt("worst %.2f / %.2f units", uk, uv));
	float scale = 1.0f / sqrtf((float)DQ);
	int smem = (64 + 64) * (DK + 8) * 2 + 64 * (DS + 8) * 2;
	CK(cudaFuncSetAttribute(g_mla_xattn<DK, DS>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
	g_mla_xattn<DK, DS><<<dim3(H, (T + 63) / 64, Dv / DS), 128, smem>>>(dy, upload(to_type<bf16>(q3)), upload(to_type<bf16>(qr)),
	                                                                   dkx, dvx, dc, dpos, H, Dn, Dr, Dv, L, Dk, scale, S, T);
	CK_LAUNCH();
	std::vector<float> want((size_t)T * H * Dv), slack(want.size());
	std::vector<double> p(kn), out(Dv), sl(Dv);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++) {
			for (int j = 0; j <= pos[t]; j++) {
				double a = 0;
				for (int d = 0; d < Dn; d++)
					a += (double)q3[((size_t)t * H + h) * DQ + d] * kx[((size_t)j * H + h) * Dn + d];
				for (int d = 0; d < Dr; d++)
					a += (double)qr[((size_t)t * H + h) * Dr + d] * c[(size_t)j * Dk + L + d];
				p[j] = a * scale;
			}
			attn_p16_row(out.data(), sl.data(), p.data(), pos[t] + 1, 32, &vx[(size_t)h * Dv], (size_t)H * Dv, Dv);
			for (int e = 0; e < Dv; e++)
				want[((size_t)t * H + h) * Dv + e] = (float)out[e], slack[((size_t)t * H + h) * Dv + e] = (float)sl[e];
		}
	std::vector<float> got = to_float(download(dy, want.size()));
	double u = attn_p16_worst(got.data(), want.data(), slack.data(), got.size(), 1.5e-5);
	check(u <= 1.0, fmt("mla_xattn<%d, %d> T=%d after %d rows H=%d Dn=%d Dr=%d Dv=%d", DK, DS, T, ctx, H, Dn, Dr, Dv),
	      fmt("worst %.2f units", u));
}

/* ops/prefill.cuh's k_gemm_tc against ref_linear on the same bf16 values: within a bf16 unit of the f32
** sum plus what the f32 sums of K terms may differ by (1e-5 of Σ|x·w| ≈ K/4). */
template <bool HB> static void test_gemm_tc(int T, int K, int N)
{
	std::vector<float> x = through<bf16>(rnd((size_t)T * K)), w = through<bf16>(rnd((size_t)N * K)),
			   b = through<bf16>(rnd(N)), want((size_t)T * N);
	ref_linear(want.data(), x.data(), w.data(), HB ? b.data() : NULL, T, K, N);
	bf16 *dy = poisoned<bf16>(want.size());
	g_gemm_tc<HB><<<dim3((N + 127) / 128, (T + 127) / 128), 256>>>(dy, upload(to_type<bf16>(x)), upload(to_type<bf16>(w)),
	                                                              upload(to_type<bf16>(b)), T, K, N);
	CK_LAUNCH();
	double u = worst_units(to_float(download(dy, want.size())), want, 1e-5 * K / 4);
	check(u <= 1.0, fmt("gemm_tc T=%d K=%d N=%d%s", T, K, N, HB ? " bias" : ""), fmt("worst %.2f units", u));
}

template <typename A> static void test_attention(int H, int G, int Dk, int Dv, int prefill, int steps, float scale)
{
	int S = prefill + steps + 3;
	size_t KW = (size_t)G * Dk, VW = (size_t)G * Dv;
	std::vector<float> kc_ref(S * KW, NAN), vc_ref(S * VW, NAN);
	A *kc = poisoned<A>(S * KW), *vc = poisoned<A>(S * VW);
	std::string cfg = fmt("A=%s H=%d G=%d Dk=%d Dv=%d", tname<A>(), H, G, Dk, Dv);
	int p0 = 0;
	for (int call = 0; call <= steps; call++) {
		int T = call == 0 ? prefill : 1;
		std::vector<int> pos(T);
		for (int t = 0; t < T; t++)
			pos[t] = p0 + t;
		std::vector<A> q = to_type<A>(rnd((size_t)T * H * Dk)), k = to_type<A>(rnd(T * KW)),
			       v = to_type<A>(rnd(T * VW));
		std::vector<float> qf = to_float(q), kf = to_float(k), vf = to_float(v), want((size_t)T * H * Dv);
		ref_attention(want.data(), qf.data(), kf.data(), vf.data(), kc_ref.data(), vc_ref.data(), pos.data(), T, H,
			      G, Dk, Dv, S, scale);
		int *dpos = upload(pos);
		A *dy = poisoned<A>(want.size());
		g_kv_write<A><<<T, 256>>>(kc, vc, upload(k), upload(v), dpos, (int)KW, (int)VW);
		CK_LAUNCH();
		/* as glmc emits it: 16 warps for steps of up to 8 tokens, 4 above */
		if (T <= 8)
			g_attention<A, 16><<<dim3(H, T), 512>>>(dy, upload(q), kc, vc, dpos, H, G, Dk, Dv, scale);
		else
			g_attention<A, 4><<<dim3(H, T), 128>>>(dy, upload(q), kc, vc, dpos, H, G, Dk, Dv, scale);
		CK_LAUNCH();
		check_close(call == 0 ? fmt("attention %s prefill T=%d", cfg.c_str(), T)
				      : fmt("attention %s step %d (pos %d)", cfg.c_str(), call, p0),
			    to_float(download(dy, want.size())), want, tol<A>());
		/* k_attn_step, which glmc emits instead for steps when a row is 128, 256 or 512 bytes; once
		** more with q one element off 16-byte alignment (its k_attention fallback) */
		int rowb = Dk * (int)sizeof(A);
		if (T <= 8 && Dk == Dv && (rowb == 128 || rowb == 256 || rowb == 512)) {
			for (int shift = 0; shift < 2; shift++) {
				std::vector<A> qs((shift ? 1 : 0) + q.size());
				std::copy(q.begin(), q.end(), qs.begin() + shift);
				A *dq = upload(qs) + shift, *ds = poisoned<A>(want.size());
				auto f = rowb == 128 ? g_attn_step<A, 128> : rowb == 256 ? g_attn_step<A, 256> : g_attn_step<A, 512>;
				f<<<dim3(H, T), 512>>>(ds, dq, kc, vc, dpos, H, G, Dk, Dv, scale);
				CK_LAUNCH();
				check_close(fmt("attn_step %s%s step %d (pos %d)", cfg.c_str(), shift ? " unaligned q" : "", call, p0),
					    to_float(download(ds, want.size())), want, tol<A>());
			}
		}
		p0 += T;
	}
	/* rows 0..p0-1 as the reference wrote them; rows p0..S-1 untouched (0xFF bytes) */
	std::vector<A> kwant = to_type<A>(kc_ref), vwant = to_type<A>(vc_ref);
	memset((void *)(kwant.data() + p0 * KW), 0xFF, (S - p0) * KW * sizeof(A));
	memset((void *)(vwant.data() + p0 * VW), 0xFF, (S - p0) * VW * sizeof(A));
	check_exact(fmt("kv_write %s k cache after %d positions", cfg.c_str(), p0), download(kc, S * KW), kwant);
	check_exact(fmt("kv_write %s v cache after %d positions", cfg.c_str(), p0), download(vc, S * VW), vwant);
	free_all();
}

/* Rows of N with awkward content: random, a tied max (indices 10 and N/2), two NaNs, all equal. */
static std::vector<float> awkward_rows(int N)
{
	std::vector<float> x = rnd((size_t)4 * N);
	float *r1 = &x[N], *r2 = &x[2 * N], *r3 = &x[3 * N];
	r1[10] = r1[N / 2] = 2.0f;
	r2[N / 3] = r2[2 * N / 3] = NAN;
	for (int i = 0; i < N; i++)
		r3[i] = 0.25f;
	return x;
}

template <typename A> static void test_argmax(int N)
{
	int R = 4;
	std::vector<A> x = to_type<A>(awkward_rows(N));
	std::vector<float> xf = to_float(x);
	std::vector<int> want(R);
	ref_argmax(want.data(), xf.data(), R, N);
	int *dy = poisoned<int>(R);
	g_argmax<A><<<R, 256>>>(dy, upload(x), N);
	CK_LAUNCH();
	check_exact(fmt("argmax A=%s rows=%d N=%d (ties, NaN)", tname<A>(), R, N), download(dy, R), want);
	free_all();
}

template <typename A> static void test_topk(int N, int k)
{
	int R = 4;
	std::vector<float> raw = awkward_rows(N);
	for (int i = 0; i < N; i += 7) /* more ties in row 1, above the random values */
		raw[N + i] = 1.5f;
	std::vector<A> x = to_type<A>(raw);
	std::vector<float> xf = to_float(x);
	std::vector<int> want((size_t)R * k);
	ref_topk(want.data(), xf.data(), R, N, k);
	int *dy = poisoned<int>(want.size());
	g_topk<A><<<R, 256>>>(dy, upload(x), N, k);
	CK_LAUNCH();
	check_exact(fmt("topk A=%s rows=%d N=%d k=%d (ties, NaN)", tname<A>(), R, N, k), download(dy, want.size()), want);
	free_all();
}

/* A slice (dst_at = 0, len = dst_ax) and a concat part (src_at = 0, len = src_ax) against plain loops;
** elements outside the slab keep the poison. */
template <typename E> static void test_copy_slab()
{
	long long outer = 3, inner = 7;
	struct {
		long long sax, sat, len, dax, dat;
		const char *what;
	} cases[] = {{10, 4, 5, 5, 0, "slice"}, {4, 0, 4, 10, 6, "concat part"}};
	for (auto &c : cases) {
		std::vector<E> x = to_type<E>(rnd(outer * c.sax * inner));
		size_t ny = outer * c.dax * inner;
		std::vector<E> want(ny);
		memset((void *)want.data(), 0xFF, ny * sizeof(E));
		for (long long o = 0; o < outer; o++)
			for (long long i = 0; i < c.len * inner; i++)
				want[(o * c.dax + c.dat) * inner + i] = x[(o * c.sax + c.sat) * inner + i];
		E *dy = poisoned<E>(ny);
		g_copy_slab<E><<<blocks(outer * c.len * inner, 256), 256>>>(dy, upload(x), outer, inner, c.len, c.sax, c.sat,
									    c.dax, c.dat);
		CK_LAUNCH();
		check_exact(fmt("copy_slab %s E=%s outer=%lld inner=%lld len=%lld", c.what, tname<E>(), outer, inner, c.len),
			    download(dy, ny), want);
		free_all();
	}
}

/* Permutes of 4-, 3- and 2-dim tensors (padded with leading 1s) against ref_permute. */
template <typename E> static void test_permute()
{
	struct {
		int ndim;
		int64_t shape[4];
		int perm[4];
	} cases[] = {
		{4, {2, 3, 4, 5}, {0, 2, 1, 3}}, {4, {2, 3, 4, 5}, {3, 2, 1, 0}}, {4, {2, 3, 4, 5}, {1, 0, 3, 2}},
		{4, {2, 3, 4, 5}, {0, 1, 2, 3}}, {3, {5, 7, 3}, {2, 0, 1}},       {2, {33, 70}, {1, 0}},
	};
	for (auto &c : cases) {
		int pad = 4 - c.ndim, d[4] = {1, 1, 1, 1}, p[4] = {0, 1, 2, 3};
		size_t n = 1;
		for (int i = 0; i < c.ndim; i++) {
			d[pad + i] = (int)c.shape[i];
			p[pad + i] = pad + c.perm[i];
			n *= c.shape[i];
		}
		std::vector<E> x = to_type<E>(rnd(n)), want(n);
		ref_permute(want.data(), x.data(), c.ndim, c.shape, c.perm, sizeof(E));
		E *dy = poisoned<E>(n);
		g_permute<E><<<blocks(n, 256), 256>>>(dy, upload(x), d[0], d[1], d[2], d[3], p[0], p[1], p[2], p[3]);
		CK_LAUNCH();
		std::string shape, perm;
		for (int i = 0; i < c.ndim; i++) {
			shape += fmt(i ? "x%lld" : "%lld", (long long)c.shape[i]);
			perm += fmt(i ? ",%d" : "%d", c.perm[i]);
		}
		check_exact(fmt("permute E=%s %s perm (%s)", tname<E>(), shape.c_str(), perm.c_str()), download(dy, n), want);
		free_all();
	}
}

/* ---- sampling ---- */

/* Random logits in [-3, 2) with m distinct larger values 2 + step·(j+1) planted at random indices. */
static std::vector<float> planted(int V, int m, float step)
{
	std::vector<float> x = rnd(V, -3.0f, 2.0f);
	for (int j = 0; j < m; j++) {
		int i;
		do
			i = (int)(rand64() % V);
		while (x[i] > 2.0f);
		x[i] = 2.0f + step * (j + 1);
	}
	return x;
}

/* The per-sequence state k_sample reads and writes, on the device, for `rows` rows (sequences): each
** row's ring of cap tokens, token, position and step, and the greedy split's partials and counters (the
** counters zero, as glmrun clears them once). */
struct Sampler {
	int *out, *token, *pos, *step, *part_i;
	float *params, *part_v;
	unsigned *done;
	int cap;
};

static Sampler sampler(int cap, int rows = 1)
{
	Sampler s;
	s.cap = cap;
	s.out = poisoned<int>((size_t)cap * rows);
	s.token = poisoned<int>(rows);
	s.pos = poisoned<int>(rows);
	s.step = poisoned<int>(rows);
	s.params = poisoned<float>(4);
	s.part_v = poisoned<float>((size_t)SAMPLE_NB * rows);
	s.part_i = poisoned<int>((size_t)SAMPLE_NB * rows);
	s.done = upload(std::vector<unsigned>(rows, 0u));
	return s;
}

/* One sampler launch as glmrun's: grid (rows, SAMPLE_NB), block 1024, with ring capacity cap. */
template <typename A> static void sample_launch(Sampler &s, int cap, const A *logits, int V, int rows = 1)
{
	g_sample<A><<<dim3(rows, SAMPLE_NB), 1024>>>(s.out, cap, s.token, s.pos, s.step, logits, V, s.params, s.part_v,
						      s.part_i, s.done);
}

/* Sets the parameters and the counters (pos, step) before a run of draws. */
static void sampler_set(Sampler &s, float temp, int top_k, float top_p, uint32_t seed, int pos, int step)
{
	float p[4] = {temp, (float)top_k, top_p, u2f(seed)};
	CK(cudaMemcpy(s.params, p, sizeof p, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s.pos, &pos, sizeof pos, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s.step, &step, sizeof step, cudaMemcpyHostToDevice));
}

/* n back-to-back draws (the kernel advances step itself); returns the ring's first n entries, which hold
** the draws in order when the run started at step 0 and n <= cap. */
template <typename A> static std::vector<int> draws(Sampler &s, const A *logits, int V, int n)
{
	for (int i = 0; i < n; i++)
		sample_launch(s, s.cap, logits, V);
	CK_LAUNCH();
	return download(s.out, n);
}

/* One draw at (seed, step). */
template <typename A> static int draw_at(Sampler &s, const A *logits, int V, float temp, int top_k, float top_p,
					 uint32_t seed, int step)
{
	sampler_set(s, temp, top_k, top_p, seed, 0, step);
	sample_launch(s, s.cap, logits, V);
	CK_LAUNCH();
	return download(s.token, 1)[0];
}

/* The k-th largest value of x. */
static float kth_largest(const std::vector<float> &x, int k)
{
	std::vector<float> v = x;
	std::nth_element(v.begin(), v.begin() + (k - 1), v.end(), [](float a, float b) { return a > b; });
	return v[k - 1];
}

/* n draws from step 0 must all have a logit >= floor (the kept set, ties included, as the kernel keeps
** every logit equal to the top_k-th) and at least `distinct` different tokens. */
template <typename A>
static void check_in_top(const std::string &name, Sampler &s, const A *logits, const std::vector<float> &lf, float temp,
			 int top_k, float top_p, uint32_t seed, int n, float floor, size_t distinct)
{
	sampler_set(s, temp, top_k, top_p, seed, 0, 0);
	std::vector<int> d = draws(s, logits, (int)lf.size(), n);
	std::set<int> seen;
	bool outside = false;
	int bad = 0;
	for (int t : d) {
		if (t < 0 || t >= (int)lf.size() || lf[t] < floor) {
			outside = true;
			bad = t;
		}
		seen.insert(t);
	}
	std::string why;
	if (outside)
		why = fmt("token %d (logit %g) is outside the kept set (floor %g)", bad,
			  bad >= 0 && bad < (int)lf.size() ? lf[bad] : NAN, floor);
	else
		why = fmt("only %zu distinct tokens in %d draws (want >= %zu)", seen.size(), n, distinct);
	check(!outside && seen.size() >= distinct, name, why);
}

/* Counts tokens; the frequency of each wanted token must be within 0.03 of its probability and no
** other token may appear. */
static void check_freq(const std::string &name, const std::vector<int> &got, const std::vector<int> &idx,
		       const std::vector<double> &p)
{
	std::vector<int> cnt(idx.size(), 0);
	int other = -1;
	for (int t : got) {
		size_t j = std::find(idx.begin(), idx.end(), t) - idx.begin();
		if (j < idx.size())
			cnt[j]++;
		else if (other < 0)
			other = t;
	}
	std::string why;
	bool ok = other < 0;
	if (!ok)
		why = fmt("token %d is outside the kept set; ", other);
	for (size_t j = 0; j < idx.size(); j++) {
		double f = (double)cnt[j] / got.size();
		if (fabs(f - p[j]) > 0.03)
			ok = false;
		why += fmt("token %d: %.3f want %.3f; ", idx[j], f, p[j]);
	}
	check(ok, name, why);
}

template <typename A> static void test_sample()
{
	const char *an = tname<A>();
	Sampler s = sampler(4096);

	/* greedy: argmax, and the bookkeeping (ring slot, next token, next position, step). The logits get
	** 8 planted distinct top values (exact in bf16), since random bf16 logits tie at the top and top_k
	** keeps every logit equal to the k-th largest (as HF's TopK). */
	int V = 50000;
	std::vector<A> lg = to_type<A>(planted(V, 8, 0.125f));
	std::vector<float> lgf = to_float(lg);
	int amax;
	ref_argmax(&amax, lgf.data(), 1, V);
	A *dlg = upload(lg);
	sampler_set(s, 0.0f, 0, 1.0f, 1234, 41, 7);
	sample_launch(s, 16, dlg, V);
	CK_LAUNCH();
	int tok = download(s.token, 1)[0], ring = download(s.out, 16)[7], np = download(s.pos, 1)[0],
	    st = download(s.step, 1)[0];
	check(tok == amax && ring == amax && np == 42 && st == 8,
	      fmt("sample A=%s greedy V=%d = argmax, state advanced", an, V),
	      fmt("token %d ring[7] %d (argmax %d), next_pos %d (want 42), step %d (want 8)", tok, ring, amax, np, st));

	/* top_k = 1 is argmax whatever the seed */
	bool ok = true;
	for (uint32_t seed = 0; seed < 16; seed++)
		ok &= draw_at(s, dlg, V, 0.8f, 1, 1.0f, seed * 2654435761u, (int)seed) == amax;
	check(ok, fmt("sample A=%s top_k=1 temperature 0.8 = argmax for 16 seeds", an), "a draw differs from argmax");

	/* a flat distribution: determinism, and variation with seed and step */
	int Vf = 1000;
	A *dflat = upload(to_type<A>(rnd(Vf, -0.01f, 0.01f)));
	ok = true;
	for (int i = 0; i < 8; i++) {
		uint32_t seed = (uint32_t)(rand64() >> 32);
		int step = (int)(rand64() % 1000);
		ok &= draw_at(s, dflat, Vf, 1.0f, 0, 1.0f, seed, step) == draw_at(s, dflat, Vf, 1.0f, 0, 1.0f, seed, step);
	}
	check(ok, fmt("sample A=%s same seed and step give the same token", an), "two draws differ");
	std::set<int> by_seed, by_step;
	for (uint32_t seed = 0; seed < 16; seed++)
		by_seed.insert(draw_at(s, dflat, Vf, 1.0f, 0, 1.0f, 1000 + seed, 5));
	check(by_seed.size() >= 12, fmt("sample A=%s different seeds differ on a flat distribution", an),
	      fmt("%zu distinct tokens in 16 draws", by_seed.size()));
	sampler_set(s, 1.0f, 0, 1.0f, 99, 0, 0);
	for (int t : draws(s, dflat, Vf, 16))
		by_step.insert(t);
	check(by_step.size() >= 12, fmt("sample A=%s consecutive steps differ on a flat distribution", an),
	      fmt("%zu distinct tokens in 16 draws", by_step.size()));

	/* the ring wraps: cap 3, five draws from step 0 */
	sampler_set(s, 1.0f, 0, 1.0f, 7, 10, 0);
	std::vector<int> seq;
	for (int i = 0; i < 5; i++) {
		sample_launch(s, 3, dflat, Vf);
		CK_LAUNCH();
		seq.push_back(download(s.token, 1)[0]);
	}
	std::vector<int> r3 = download(s.out, 3);
	np = download(s.pos, 1)[0];
	st = download(s.step, 1)[0];
	check(r3[0] == seq[3] && r3[1] == seq[4] && r3[2] == seq[2] && np == 15 && st == 5,
	      fmt("sample A=%s ring of capacity 3 after 5 draws", an),
	      fmt("ring %d %d %d (want %d %d %d), next_pos %d (want 15), step %d (want 5)", r3[0], r3[1], r3[2], seq[3],
		  seq[4], seq[2], np, st));

	/* top_k = 5 (the candidate-list path): every draw among the 5 largest, more than one of them drawn */
	check_in_top(fmt("sample A=%s top_k=5: 200 draws among the 5 largest", an), s, dlg, lgf, 1.0f, 5, 1.0f, 4242, 200,
		     kth_largest(lgf, 5), 3);
	/* top_k = 2000 (above 1024: the whole-row path): draws at or above the 2000th largest logit */
	check_in_top(fmt("sample A=%s top_k=2000 (whole-row path): 200 draws in the top 2000", an), s, dlg, lgf, 1.0f, 2000,
		     1.0f, 4343, 200, kth_largest(lgf, 2000), 100);

	/* a large vocabulary with top_k and top_p together: draws within the top 40 */
	int Vb = 151936;
	std::vector<A> lb = to_type<A>(planted(Vb, 60, 1.0f / 32));
	std::vector<float> lbf = to_float(lb);
	check_in_top(fmt("sample A=%s V=%d top_k=40 top_p=0.9 temperature 0.7: draws in the top 40", an, Vb), s, upload(lb),
		     lbf, 0.7f, 40, 0.9f, 77, 50, kth_largest(lbf, 40), 2);

	/* top_p alone on a flat distribution (the candidates' mass is too small: the whole-row path): the
	** kept set is the top tokens up to half the mass, about 500 of 1000 */
	std::vector<float> flatf = to_float(download(dflat, Vf)), sorted = flatf;
	std::sort(sorted.begin(), sorted.end(), [](float a, float b) { return a > b; });
	double z = 0, acc = 0;
	for (float v : sorted)
		z += exp((double)v - sorted[0]);
	size_t kept = 0;
	while (kept < sorted.size() && acc < 0.5 * z)
		acc += exp((double)sorted[kept++] - sorted[0]);
	check_in_top(fmt("sample A=%s top_p=0.5 on a flat distribution (whole-row path): draws in the top %zu", an, kept),
		     s, dflat, flatf, 1.0f, 0, 0.5f, 555, 200, sorted[std::min(kept + 1, sorted.size() - 1)], 100);

	/* a known distribution: four tokens with probabilities .4 .3 .2 .1, the rest at logit -100 */
	std::vector<int> idx = {100, 7, 999, 500};
	std::vector<float> lk(Vf, -100.0f);
	const double p4[4] = {0.4, 0.3, 0.2, 0.1};
	for (int j = 0; j < 4; j++)
		lk[idx[j]] = logf((float)p4[j]);
	std::vector<float> lkf = through<A>(lk);
	A *dk = upload(to_type<A>(lk));
	/* the exact softmax of the rounded logits at temperature tmp, over the first m of idx */
	auto probs = [&](double tmp, int m) {
		std::vector<double> p(m);
		double z = 0;
		for (int j = 0; j < m; j++)
			z += p[j] = exp(lkf[idx[j]] / tmp);
		for (auto &v : p)
			v /= z;
		return p;
	};
	sampler_set(s, 1.0f, 0, 1.0f, 2024, 0, 0);
	check_freq(fmt("sample A=%s temperature 1: frequencies of 4000 draws", an), draws(s, dk, Vf, 4000), idx, probs(1, 4));
	sampler_set(s, 2.0f, 0, 1.0f, 2025, 0, 0);
	check_freq(fmt("sample A=%s temperature 2: frequencies of 4000 draws", an), draws(s, dk, Vf, 4000), idx, probs(2, 4));
	/* top_p .65 keeps .4 and .3 (cumulative .7) */
	sampler_set(s, 1.0f, 0, 0.65f, 2026, 0, 0);
	check_freq(fmt("sample A=%s top_p=0.65 keeps 2 tokens: frequencies of 2000 draws", an), draws(s, dk, Vf, 2000),
		   std::vector<int>(idx.begin(), idx.begin() + 2), probs(1, 2));
	/* top_k 2 then top_p .5 over the kept pair: .4/.7 = .57 >= .5 keeps the first alone */
	sampler_set(s, 1.0f, 2, 0.5f, 2027, 0, 0);
	check_freq(fmt("sample A=%s top_k=2 then top_p=0.5 over the kept mass keeps 1 token", an), draws(s, dk, Vf, 500),
		   std::vector<int>(1, idx[0]), std::vector<double>(1, 1.0));
	/* top_k 3 keeps .4 .3 .2 */
	sampler_set(s, 1.0f, 3, 1.0f, 2028, 0, 0);
	check_freq(fmt("sample A=%s top_k=3: frequencies of 4000 draws", an), draws(s, dk, Vf, 4000),
		   std::vector<int>(idx.begin(), idx.begin() + 3), probs(1, 3));
	/* top_p 0 keeps the top token only */
	sampler_set(s, 1.0f, 0, 0.0f, 2029, 0, 0);
	check_freq(fmt("sample A=%s top_p=0 keeps the top token", an), draws(s, dk, Vf, 200), std::vector<int>(1, idx[0]),
		   std::vector<double>(1, 1.0));
	free_all();
}

/* The length of a greedy split's slices of a row of V logits (k_sample's split_argmax): ceil(V / SAMPLE_NB)
** in whole 16-byte vectors. */
template <typename A> static int split_len(int V)
{
	int ve = 16 / (int)sizeof(A);
	return ((V + SAMPLE_NB - 1) / SAMPLE_NB + ve - 1) / ve * ve;
}

/* Greedy sampling of `rows` rows of V logits (x as float, rounded through A by the caller or exact in A),
** launched `reps` times back to back: every launch's token must be the first index of the max, NaN first
** (ref_argmax, and the one-block k_argmax on the same rows, bit for bit), each row's state advances once
** per launch (ring slot, position, step) and the split's counters are zero again after each launch
** (graph replays reuse them). want, when not empty, is the expected index of each row as the case
** planted it. */
template <typename A>
static void check_split(const std::string &name, const std::vector<float> &x, int V, int rows,
			const std::vector<int> &want, int reps = 3)
{
	const int cap = 8;
	std::vector<A> xa = to_type<A>(x);
	std::vector<float> xf = to_float(xa);
	std::vector<int> ref(rows), one;
	ref_argmax(ref.data(), xf.data(), rows, V);
	A *dx = upload(xa);
	int *dy = poisoned<int>(rows);
	g_argmax<A><<<rows, 256>>>(dy, dx, V);
	CK_LAUNCH();
	one = download(dy, rows);
	Sampler s = sampler(cap, rows);
	float p[4] = {0.0f, 0.0f, 1.0f, 0.0f};
	std::vector<int> pos(rows), step(rows);
	for (int b = 0; b < rows; b++)
		pos[b] = 100 + b, step[b] = 3 * b;
	CK(cudaMemcpy(s.params, p, sizeof p, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s.pos, pos.data(), 4 * rows, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s.step, step.data(), 4 * rows, cudaMemcpyHostToDevice));
	std::string why;
	for (int r = 0; r < reps && why.empty(); r++) {
		sample_launch(s, cap, dx, V, rows);
		CK_LAUNCH();
		std::vector<int> tok = download(s.token, rows), np = download(s.pos, rows), st = download(s.step, rows);
		std::vector<int> ring = download(s.out, (size_t)cap * rows);
		std::vector<unsigned> done = download(s.done, rows);
		for (int b = 0; b < rows && why.empty(); b++) {
			int w = want.empty() ? ref[b] : want[b], slot = b * cap + (3 * b + r) % cap;
			if (ref[b] != w || one[b] != w)
				why = fmt("row %d: the case wants %d, ref_argmax gives %d, k_argmax %d", b, w, ref[b], one[b]);
			else if (tok[b] != w || ring[slot] != w)
				why = fmt("launch %d row %d: token %d, ring %d, want %d (slice %d; the token's %d)", r, b, tok[b],
					  ring[slot], w, w / split_len<A>(V), tok[b] >= 0 ? tok[b] / split_len<A>(V) : -1);
			else if (np[b] != 101 + b + r || st[b] != 3 * b + r + 1)
				why = fmt("launch %d row %d: next_pos %d (want %d), step %d (want %d)", r, b, np[b], 101 + b + r,
					  st[b], 3 * b + r + 1);
			else if (done[b] != 0)
				why = fmt("launch %d row %d: the split's counter is %u, not cleared", r, b, done[b]);
		}
	}
	check(why.empty(), fmt("sample A=%s greedy split V=%d rows=%d: %s", tname<A>(), V, rows, name.c_str()), why);
	free_all();
}

/* The greedy sampler's argmax split over SAMPLE_NB blocks a row: the max in the first, a middle and the
** last slice, at the last element, either side of a slice boundary; ties across slices and across a
** boundary (the first index wins); NaN in late slices above a larger finite max; rows not 16-byte
** aligned (V odd), V below the vector and slice sizes (empty slices), an all -inf row; several rows and
** repeated launches. Then the sampling path on the same grid (blocks y > 0 idle): top_k 1 on several rows
** is the argmax and advances each row once. Planted values (5, 6, 7) are exact in bf16, above the random
** ones in [-3, 2). */
template <typename A> static void test_sample_split()
{
	int Vg = 154880, Vl = 128256, L = split_len<A>(Vg), Ll = split_len<A>(Vl);
	std::vector<float> x = rnd((size_t)5 * Vg, -3.0f, 2.0f);
	std::vector<int> at = {3, 17 * L + 100, Vg - 1, 20 * L, 20 * L - 1};
	for (int b = 0; b < 5; b++)
		x[(size_t)b * Vg + at[b]] = 6.0f;
	check_split<A>("max in slices 0, 17, the last (at V-1), either side of the boundary of slices 19 and 20", x, Vg,
		       5, at);

	x = rnd((size_t)4 * Vl, -3.0f, 2.0f);
	x[2 * Ll + 7] = x[30 * Ll + 1] = 6.0f;                         /* row 0: a tie across slices */
	x[(size_t)Vl + Ll - 1] = x[(size_t)Vl + Ll] = 6.0f;             /* row 1: across a boundary */
	x[(size_t)2 * Vl + Vl - 2] = x[(size_t)2 * Vl + Vl - 1] = 7.0f; /* row 2: in the last slice, */
	x[(size_t)2 * Vl + 5 * Ll] = 5.0f;                             /* a smaller max before */
	for (int i = 0; i < Vl; i++)                                   /* row 3: all equal */
		x[(size_t)3 * Vl + i] = 0.25f;
	check_split<A>("ties across slices and a boundary, all equal", x, Vl, 4, {2 * Ll + 7, Ll - 1, Vl - 2, 0});

	x = rnd((size_t)3 * Vg, -3.0f, 2.0f);
	x[10] = 7.0f, x[40 * L + 5] = NAN;                        /* row 0: NaN late, a larger max early */
	x[(size_t)Vg + 30 * L + 3] = x[(size_t)Vg + 45 * L] = NAN; /* row 1: the first of two NaNs */
	x[(size_t)2 * Vg + 2] = 7.0f, x[(size_t)2 * Vg + Vg - 1] = NAN;
	check_split<A>("NaN in a late slice wins over a larger finite max", x, Vg, 3, {40 * L + 5, 30 * L + 3, Vg - 1});

	int Vo = 5003, Lo = split_len<A>(Vo); /* rows 1 and 2 start off a 16-byte boundary */
	x = rnd((size_t)3 * Vo, -3.0f, 2.0f);
	x[Vo - 1] = 6.0f;
	x[(size_t)Vo + 7 * Lo] = x[(size_t)Vo + 30 * Lo + 1] = 6.0f;
	x[(size_t)2 * Vo + Vo - 3] = 6.0f;
	check_split<A>("V odd, rows unaligned", x, Vo, 3, {Vo - 1, 7 * Lo, Vo - 3});

	x = rnd(2 * 37, -3.0f, 2.0f);
	x[36] = x[37 + 9] = 6.0f;
	check_split<A>("V 37, most slices empty", x, 37, 2, {36, 9});
	check_split<A>("V 1", {1.0f, -2.0f, 0.5f}, 1, 3, {0, 0, 0});
	check_split<A>("V 5, under one vector", {1.0f, 2.0f, 3.0f, 3.0f, -1.0f}, 5, 1, {2});
	check_split<A>("an all -inf row", std::vector<float>(1000, -INFINITY), 1000, 1, {0});

	/* sampling on the same grid: top_k 1 is the argmax, one advance per row (blocks y > 0 return) */
	int R = 3;
	x = rnd((size_t)R * Vl, -3.0f, 2.0f);
	std::vector<int> want = {5, Vl / 2, Vl - 1};
	for (int b = 0; b < R; b++)
		x[(size_t)b * Vl + want[b]] = 6.0f;
	Sampler s = sampler(8, R);
	float p[4] = {0.8f, 1.0f, 1.0f, 0.0f};
	std::vector<int> zero(R, 0);
	CK(cudaMemcpy(s.params, p, sizeof p, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s.pos, zero.data(), 4 * R, cudaMemcpyHostToDevice));
	CK(cudaMemcpy(s.step, zero.data(), 4 * R, cudaMemcpyHostToDevice));
	sample_launch(s, 8, upload(to_type<A>(x)), Vl, R);
	CK_LAUNCH();
	std::vector<int> tok = download(s.token, R), st = download(s.step, R), np = download(s.pos, R);
	bool ok = true;
	for (int b = 0; b < R; b++)
		ok &= tok[b] == want[b] && st[b] == 1 && np[b] == 1;
	check(ok, fmt("sample A=%s top_k=1 on %d rows of grid (rows, %d): argmax, one advance", tname<A>(), R, SAMPLE_NB),
	      fmt("tokens %d %d %d (want %d %d %d), steps %d %d %d, positions %d %d %d (want 1)", tok[0], tok[1], tok[2],
		  want[0], want[1], want[2], st[0], st[1], st[2], np[0], np[1], np[2]));
	free_all();
}

/* ---- MLA, the DSA indexer, MoE routing and experts, transposed matmul ---- */

template <typename A, typename B_>
__global__ void __launch_bounds__(256) g_matmul_tb(A *y, const A *a, const B_ *b, int M, int K, int N)
{
	k_matmul_tb<A, B_>(y, a, b, M, K, N);
}

template <typename A> __global__ void __launch_bounds__(256) g_mla_write(A *cache, const A *kv, const int *pos, int D)
{
	k_mla_write<A>(cache, kv, pos, D, g_zero_seq, 0);
}

template <typename A>
__global__ void __launch_bounds__(128) g_mla(A *y, const A *q, const A *cache, const int *pos, const int *sel, int nsel,
					     int H, int Dk, int Dv, float scale)
{
	k_mla<A>(y, q, cache, pos, sel, nsel, H, Dk, Dv, scale, g_zero_seq, 0);
}

template <typename A, int HB, bool MERGE>
__global__ void __launch_bounds__(256)
	g_mla_split(A *y, float *pacc, float *pml, int *done, const A *q, const A *cache, const int *pos, const int *sel,
		    int nsel, int vfirst, int H, int Dk, int Dv, float scale, const int *seq, int S)
{
	k_mla_split<A, HB, MERGE>(y, pacc, pml, done, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale, seq, S);
}

template <typename A, int ROWB, int HB> /* glmc's launch bounds (emit_cuda.c attn_split_minb) */
__global__ void __launch_bounds__(256, HB <= 4 ? 2 : 1) g_attn_split(A *y, float *pacc, float *pml, int *done, const A *q, const A *kc,
						    const A *vc, const int *pos, int H, int G, float scale,
						    const int *seq, int S)
{
	k_attn_split<A, ROWB, HB>(y, pacc, pml, done, q, kc, vc, pos, H, G, scale, seq, S);
}

template <typename A, int ROWB, int HB>
__global__ void __launch_bounds__(256, HB <= 4 ? 2 : 1)
	g_attn_split_rope(A *y, float *pacc, float *pml, int *done, A *kc, A *vc, const A *q, const A *k, const A *v,
			  const int *pos, const float *freq, float cs, int H, int G, int R, float scale, const int *seq, int S)
{
	k_attn_split_rope<A, ROWB, HB, false>(y, pacc, pml, done, kc, vc, q, k, v, pos, freq, freq, cs, cs, H, G, R, scale,
					     seq, S);
}

template <typename A, bool MERGED>
__global__ void __launch_bounds__(256) g_mla_vabsorb(A *out, const A *o, const A *wv, int T, int H, int Dv, int Do,
						     const float *pacc, const float *pml, int NS)
{
	k_mla_vabsorb<A, A, MERGED>(out, o, wv, T, H, Dv, Do, pacc, pml, NS);
}

/* k_mla_split at HB heads a block (1, 2, 4 or 8), with or without its own merge. */
template <typename A, bool MERGE>
static void launch_mla_split(int HB, dim3 grid, A *y, float *pacc, float *pml, int *done, const A *q, const A *cache,
			     const int *pos, const int *sel, int nsel, int vfirst, int H, int Dk, int Dv, float scale,
			     const int *seq, int S)
{
	if (HB == 1)
		g_mla_split<A, 1, MERGE><<<grid, 256>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale,
							seq, S);
	else if (HB == 2)
		g_mla_split<A, 2, MERGE><<<grid, 256>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale,
							seq, S);
	else if (HB == 4)
		g_mla_split<A, 4, MERGE><<<grid, 256>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale,
							seq, S);
	else
		g_mla_split<A, 8, MERGE><<<grid, 256>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale,
							seq, S);
}

template <typename A>
__global__ void __launch_bounds__(256) g_indexer_scores(float *score, const A *q, const A *w, const A *kc,
							const int *pos, int H, int D, int total, float scale)
{
	k_indexer_scores<A>(score, q, w, kc, pos, H, D, total, scale, g_zero_seq, 0);
}

template <typename A>
__global__ void __launch_bounds__(256) g_indexer_select(int *sel, float *score, int *scratch, const int *pos, int total,
						       int topk)
{
	k_indexer_select<A>(sel, score, scratch, pos, total, topk, g_zero_seq, 0);
}

template <typename A, typename B_>
__global__ void __launch_bounds__(32)
	g_moe_route(int *idx, const A *logits, const B_ *bias, int E, int k, int ng, int tg, int sig)
{
	k_moe_route<A, B_>(idx, logits, bias, E, k, ng, tg, sig);
}

template <typename A>
__global__ void __launch_bounds__(32)
	g_moe_weights(A *w, const A *logits, const int *idx, int E, int k, int sig, int norm, float scale)
{
	k_moe_weights<A>(w, logits, idx, E, k, sig, norm, scale);
}

template <typename A, typename W>
__global__ void __launch_bounds__(256)
	g_moe_up(float *hid, const A *x, const int *idx, const W *gate, const W *up, int C, int F, int k)
{
	k_moe_up<A, W>(hid, x, idx, gate, up, C, F, k);
}

template <typename A, typename W>
__global__ void __launch_bounds__(256)
	g_moe_down(A *y, const float *hid, const int *idx, const A *w, const W *down, int C, int F, int k)
{
	k_moe_down<A, W>(y, hid, idx, w, down, C, F, k);
}

/* A uniformly random permutation of v (Fisher-Yates on the test generator). */
template <typename T> static void shuffle(std::vector<T> &v)
{
	for (size_t i = v.size(); i > 1; i--)
		std::swap(v[i - 1], v[rand64() % i]);
}

template <typename A, typename B_> static void test_matmul_tb(int B, int M, int K, int N)
{
	std::vector<A> a = to_type<A>(rnd((size_t)B * M * K));
	std::vector<B_> b = to_type<B_>(rnd((size_t)B * N * K));
	std::vector<float> af = to_float(a), bf = to_float(b), want((size_t)B * M * N);
	ref_matmul_tb(want.data(), af.data(), bf.data(), B, M, K, N);
	A *dy = poisoned<A>(want.size());
	g_matmul_tb<A, B_><<<dim3(blocks(N, 8), M, B), 256>>>(dy, upload(a), upload(b), M, K, N);
	CK_LAUNCH();
	check_close(fmt("matmul_tb A=%s B=%s B=%d M=%d K=%d N=%d", tname<A>(), tname<B_>(), B, M, K, N),
		    to_float(download(dy, want.size())), want, tol<A>());
	free_all();
}

/*
** A prefill of `prefill` tokens, then `steps` single-token steps, each through k_mla_write and k_mla,
** against ref_mla run the same way on its own cache. With nsel > 0 each token gets a selection of nsel
** entries: distinct rows up to pos[t] + 2 (rows past pos[t], written later in the same call or never
** written and still poisoned, must be ignored), at least one visible, the rest -1, in random order.
** At the end the written cache rows must equal the reference's exactly and the rest hold the poison.
*/
template <typename A> static void test_mla(int H, int Dk, int Dv, int prefill, int steps, float scale, int nsel)
{
	int S = prefill + steps + 3;
	std::vector<float> c_ref((size_t)S * Dk, NAN);
	A *cache = poisoned<A>((size_t)S * Dk);
	std::string cfg = fmt("A=%s H=%d Dk=%d Dv=%d scale=%g%s", tname<A>(), H, Dk, Dv, scale,
			      nsel ? fmt(" sel of %d", nsel).c_str() : "");
	int p0 = 0;
	for (int call = 0; call <= steps; call++) {
		int T = call == 0 ? prefill : 1;
		std::vector<int> pos(T), sel;
		for (int t = 0; t < T; t++)
			pos[t] = p0 + t;
		for (int t = 0; t < T && nsel > 0; t++) {
			std::vector<int> cand;
			for (int s = 0; s <= pos[t] + 2; s++)
				cand.push_back(s);
			shuffle(cand);
			int m = std::min((int)cand.size(), nsel - 2), vis = 0;
			std::vector<int> row(nsel, -1);
			for (int i = 0; i < m; i++) {
				row[i] = cand[i];
				vis += cand[i] <= pos[t];
			}
			if (!vis)
				row[0] = pos[t];
			shuffle(row);
			sel.insert(sel.end(), row.begin(), row.end());
		}
		std::vector<A> q = to_type<A>(rnd((size_t)T * H * Dk)), kv = to_type<A>(rnd((size_t)T * Dk));
		std::vector<float> qf = to_float(q), kvf = to_float(kv), want((size_t)T * H * Dv);
		ref_mla(want.data(), qf.data(), kvf.data(), c_ref.data(), pos.data(), nsel ? sel.data() : NULL, nsel, T, H,
			Dk, Dv, S, scale);
		int *dpos = upload(pos);
		A *dy = poisoned<A>(want.size());
		g_mla_write<A><<<T, 256>>>(cache, upload(kv), dpos, Dk);
		CK_LAUNCH();
		g_mla<A><<<dim3(H, T), 128>>>(dy, upload(q), cache, dpos, nsel ? upload(sel) : nullptr, nsel, H, Dk, Dv,
					       scale);
		CK_LAUNCH();
		check_close(call == 0 ? fmt("mla %s prefill T=%d", cfg.c_str(), T)
				      : fmt("mla %s step %d (pos %d)", cfg.c_str(), call, p0),
			    to_float(download(dy, want.size())), want, tol<A>());
		p0 += T;
	}
	std::vector<A> cwant = to_type<A>(c_ref);
	memset((void *)(cwant.data() + (size_t)p0 * Dk), 0xFF, (size_t)(S - p0) * Dk * sizeof(A));
	check_exact(fmt("mla_write %s cache after %d positions", cfg.c_str(), p0), download(cache, (size_t)S * Dk), cwant);
	free_all();
}

/* Heads per block and ranges per token, as glmc's emit_mla_split (compiler/passes/emit_cuda.c) picks them. */
static void mla_split_geometry(int H, int &HB, int &NS)
{
	HB = mla_split_hb(H);
	NS = 64 / HB;
}

/* An output buffer filled with the byte b (0x7F: a large finite value in float and bf16). */
template <typename T> static T *filled(size_t n, int b)
{
	T *p;
	CK(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)));
	allocs.push_back(p);
	CK(cudaMemset(p, b, std::max<size_t>(n, 1) * sizeof(T)));
	return p;
}

/*
** The split attention without its own merge (k_mla_split<.., false>), followed by the value absorb that
** merges the range states itself (k_mla_vabsorb<.., true>), as glmc emits the pair for steps of up to 8
** tokens: against the absorb of the merging kernel's output y (k_mla_vabsorb<.., false>), bit for bit, and
** against the CPU's absorb of ref_mla's rows rounded to A (want). The states start as NaN (0xFF), so a
** range past a token's count that is not marked empty, or read anyway, shows. Do = 48: the second block's
** upper warps have no rows but take part in the merge's barriers.
*/
template <typename A>
static void test_mla_absorb_merged(const std::string &cfg, const std::vector<A> &y, const std::vector<float> &want,
				   int HB, int NS, const A *dq, const A *dc, const int *dpos, const int *dsel, int nsel,
				   int vfirst, int H, int Dk, int Dv, float scale, const int *dseq, int S, int T)
{
	const int Do = 48;
	std::vector<A> wv = to_type<A>(rnd((size_t)H * Do * Dv, -0.2f, 0.2f));
	std::vector<float> wf = to_float(wv), yf = to_float(y), ref((size_t)T * H * Do);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++)
			for (int j = 0; j < Do; j++) {
				double a = 0;
				for (int i = 0; i < Dv; i++)
					a += (double)h_to_f(h_from_f<A>(want[((size_t)t * H + h) * Dv + i])) *
					     wf[((size_t)h * Do + j) * Dv + i];
				ref[((size_t)t * H + h) * Do + j] = (float)a;
			}
	A *dw = upload(wv), *dy = upload(y), *o1 = poisoned<A>(ref.size()), *o2 = poisoned<A>(ref.size());
	float *pacc = poisoned<float>((size_t)T * NS * H * Dv), *pml = poisoned<float>((size_t)T * NS * H * 2);
	launch_mla_split<A, false>(HB, dim3(NS, (H + HB - 1) / HB, T), nullptr, pacc, pml, nullptr, dq, dc, dpos, dsel, nsel,
				   vfirst, H, Dk, Dv, scale, dseq, S);
	CK_LAUNCH();
	dim3 vg((Do + 8 * MLA_VR - 1) / (8 * MLA_VR), (T + 7) / 8, H);
	g_mla_vabsorb<A, true><<<vg, 256>>>(o1, nullptr, dw, T, H, Dv, Do, pacc, pml, NS);
	CK_LAUNCH();
	g_mla_vabsorb<A, false><<<vg, 256>>>(o2, dy, dw, T, H, Dv, Do, nullptr, nullptr, 0);
	CK_LAUNCH();
	std::vector<A> got = download(o1, ref.size());
	std::string nm = fmt("mla_split + absorb merged there %s", cfg.c_str());
	check_exact(nm + ": as the merging kernel's rows absorbed", got, download(o2, ref.size()));
	std::vector<float> g2, w2;
	for (size_t i = 0; i < ref.size(); i++)
		if (!isnan(ref[i])) /* a token that sees nothing: NaN in both, checked bit for bit above */
			g2.push_back(h_to_f(got[i])), w2.push_back(ref[i]);
	check_close(nm + ": against the CPU", g2, w2, tol<A>());
}

/*
** k_mla_split, glmc's attention for steps of up to 16 tokens, against ref_mla token by token. Token t
** reads slot seq[t] of a cache of S rows per slot at position pos[t] (several tokens may share a slot, as
** a short prefill does: rows past a token's own position are then written but must stay invisible to
** it). In every slot the rows past the highest position read there hold NaN, as do the partial-result
** buffers and the output before the launch, so a row, range or output that leaks in or is skipped
** fails. With nsel > 0 each token lists nsel entries: distinct rows up to pos + 2, two far out of range
** (S + 5 and 2^30), -1 for the rest, at least one visible, in random order; token `blind` (if >= 0)
** lists only invisible entries and must come out all NaN (the output then starts finite: 0x7F bytes).
** With vfirst the rows are listed as k_indexer_select lists them (rows 0..pos then -1s when nsel > pos,
** else nsel distinct rows <= pos in random order) and the kernel is told so (it deals out only the first
** min(nsel, pos + 1) entries); `blind` is not used with it.
** NS, HB = 0 take glmc's geometry; NS > 0 forces that many ranges (1: one block walks the whole context
** in passes of 32 rows), HB > 0 that many heads per block. The kernel runs twice on the same done
** counters, which must start and end at zero: the second run must give the same result.
*/
template <typename A>
static void test_mla_split(int H, int Dk, int Dv, std::vector<int> seq, std::vector<int> pos, int nsel, float scale,
			   int NS = 0, int HB = 0, int blind = -1, int vfirst = 0)
{
	int T = (int)seq.size(), hb0, ns0, slots = 0, S = 0;
	mla_split_geometry(H, hb0, ns0);
	if (!HB)
		HB = hb0, NS = NS ? NS : ns0;
	else if (!NS)
		NS = 64 / HB;
	for (int t = 0; t < T; t++)
		slots = std::max(slots, seq[t] + 1), S = std::max(S, pos[t] + 4);
	std::vector<int> top(slots, -1);
	for (int t = 0; t < T; t++)
		top[seq[t]] = std::max(top[seq[t]], pos[t]);
	std::vector<float> cf((size_t)slots * S * Dk, NAN);
	for (int sl = 0; sl < slots; sl++) {
		std::vector<float> r = through<A>(rnd((size_t)(top[sl] + 1) * Dk, -0.5f, 1.0f));
		std::copy(r.begin(), r.end(), cf.begin() + (size_t)sl * S * Dk);
	}
	std::vector<int> sel;
	for (int t = 0; t < T && nsel > 0 && vfirst; t++) {
		std::vector<int> row(nsel, -1), cand;
		for (int s = 0; s <= pos[t]; s++)
			cand.push_back(s);
		if (pos[t] + 1 > nsel)
			shuffle(cand);
		for (int i = 0; i < nsel && i <= pos[t]; i++)
			row[i] = cand[i];
		sel.insert(sel.end(), row.begin(), row.end());
	}
	for (int t = 0; t < T && nsel > 0 && !vfirst; t++) {
		std::vector<int> cand, row(nsel, -1);
		for (int s = 0; s <= pos[t] + 2; s++)
			cand.push_back(s);
		shuffle(cand);
		int m = std::min((int)cand.size(), nsel - 3), vis = 0, k = 0;
		for (int i = 0; i < m; i++)
			if (t != blind || cand[i] > pos[t])
				row[k++] = cand[i], vis += cand[i] <= pos[t];
		row[k++] = S + 5;
		row[k++] = 1 << 30;
		if (!vis && t != blind)
			row[0] = pos[t];
		shuffle(row);
		sel.insert(sel.end(), row.begin(), row.end());
	}
	std::vector<A> q = to_type<A>(rnd((size_t)T * H * Dk));
	std::vector<float> qf = to_float(q), want((size_t)T * H * Dv);
	for (int t = 0; t < T; t++) {
		std::vector<float> slot(cf.begin() + (size_t)seq[t] * S * Dk, cf.begin() + (size_t)(seq[t] + 1) * S * Dk);
		std::vector<float> kv(slot.begin() + (size_t)pos[t] * Dk, slot.begin() + (size_t)(pos[t] + 1) * Dk);
		ref_mla(want.data() + (size_t)t * H * Dv, qf.data() + (size_t)t * H * Dk, kv.data(), slot.data(), &pos[t],
			nsel ? sel.data() + (size_t)t * nsel : NULL, nsel, 1, H, Dk, Dv, S, scale);
	}
	int HG = (H + HB - 1) / HB;
	int *dpos = upload(pos), *dseq = upload(seq), *dsel = nsel ? upload(sel) : nullptr;
	int *done = filled<int>((size_t)T * HG, 0);
	A *dq = upload(q), *dc = upload(to_type<A>(cf));
	std::string cfg = fmt("A=%s H=%d (%d per block, %d ranges) Dk=%d Dv=%d scale=%g T=%d", tname<A>(), H, HB, NS, Dk,
			      Dv, scale, T);
	if (vfirst)
		cfg += ", visible first";
	for (int t = 0; t < T; t++)
		cfg += fmt("%s slot %d pos %d", t ? "," : ":", seq[t], pos[t]);
	if (nsel)
		cfg += fmt(", sel of %d", nsel);
	std::vector<A> y; /* the last run's output */
	for (int run = 1; run <= 2; run++) {
		float *pacc = poisoned<float>((size_t)T * NS * H * Dv), *pml = poisoned<float>((size_t)T * NS * H * 2);
		A *dy = blind >= 0 ? filled<A>(want.size(), 0x7F) : poisoned<A>(want.size());
		dim3 grid(NS, HG, T);
		launch_mla_split<A, true>(HB, grid, dy, pacc, pml, done, dq, dc, dpos, dsel, nsel, vfirst, H, Dk, Dv, scale,
					  dseq, S);
		CK_LAUNCH();
		std::string nm = fmt("mla_split %s (run %d)", cfg.c_str(), run);
		std::vector<int> left = download(done, (size_t)T * HG);
		check(std::all_of(left.begin(), left.end(), [](int c) { return c == 0; }), nm + ": done counters back at 0",
		      "a counter is left nonzero");
		y = download(dy, want.size());
		std::vector<float> got = to_float(y);
		if (blind < 0) {
			check_close(nm, got, want, tol<A>());
			continue;
		}
		std::vector<float> g2, w2;
		bool nan = true;
		for (int t = 0; t < T; t++)
			for (size_t i = (size_t)t * H * Dv; i < (size_t)(t + 1) * H * Dv; i++) {
				if (t == blind)
					nan &= isnan(got[i]) && isnan(want[i]);
				else
					g2.push_back(got[i]), w2.push_back(want[i]);
			}
		check_close(nm + ": the tokens that see rows", g2, w2, tol<A>());
		check(nan, fmt("%s: token %d sees nothing: NaN", nm.c_str(), blind), "an output of the blind token is not NaN");
	}
	if (NS <= 64 && Dv <= 512)
		test_mla_absorb_merged<A>(cfg, y, want, HB, NS, dq, dc, dpos, dsel, nsel, vfirst, H, Dk, Dv, scale, dseq, S, T);
	free_all();
}

/*
** ops/fused.cuh's k_attn_split, glmc's attention for decode steps of 1 to 8 tokens (rows of 128, 256 or 512
** bytes), against ref_attention token by token: token t reads rows 0..pos[t] of slot seq[t]; rows past the
** highest position read in a slot hold NaN, as do the range states and the output before each launch.
** NS ranges a token (glmc: ceil(2·SMs / (H / HB)), 33 for Llama-3-8B's 8 groups on 132 SMs). Runs twice on
** the same done counters, which must start and end at zero; the two runs must give the same bits (the
** merge's fixed range order, whichever block finished last). f32 also within 1e-4 absolute. At 8K rows or
** more the launch is timed (graph-free, 20 launches) and its cache bytes a second printed as a # line.
*/
template <typename A, int HB>
static void test_attn_split(int H, int G, int D, int NS, std::vector<int> seq, std::vector<int> pos)
{
	int T = (int)seq.size(), slots = 0, S = 0;
	for (int t = 0; t < T; t++)
		slots = std::max(slots, seq[t] + 1), S = std::max(S, pos[t] + 4);
	std::vector<int> top(slots, -1);
	for (int t = 0; t < T; t++)
		top[seq[t]] = std::max(top[seq[t]], pos[t]);
	size_t RW = (size_t)G * D;
	std::vector<float> kf((size_t)slots * S * RW, NAN), vf((size_t)slots * S * RW, NAN);
	for (int sl = 0; sl < slots; sl++) {
		std::vector<float> k = through<A>(rnd((size_t)(top[sl] + 1) * RW)), v = through<A>(rnd((size_t)(top[sl] + 1) * RW));
		std::copy(k.begin(), k.end(), kf.begin() + (size_t)sl * S * RW);
		std::copy(v.begin(), v.end(), vf.begin() + (size_t)sl * S * RW);
	}
	std::vector<A> q = to_type<A>(rnd((size_t)T * H * D, -2.0f, 2.0f));
	std::vector<float> qf = to_float(q), want((size_t)T * H * D);
	float scale = 1.0f / sqrtf((float)D);
	for (int t = 0; t < T; t++) {
		int p = pos[t];
		std::vector<float> ks(kf.begin() + (size_t)seq[t] * S * RW, kf.begin() + ((size_t)seq[t] * S + p + 1) * RW),
			vs(vf.begin() + (size_t)seq[t] * S * RW, vf.begin() + ((size_t)seq[t] * S + p + 1) * RW);
		std::vector<float> k1(ks.end() - RW, ks.end()), v1(vs.end() - RW, vs.end());
		ref_attention(want.data() + (size_t)t * H * D, qf.data() + (size_t)t * H * D, k1.data(), v1.data(), ks.data(),
			      vs.data(), &p, 1, H, G, D, D, p + 1, scale);
	}
	int HG = H / HB, ROWB = D * (int)sizeof(A);
	int *dpos = upload(pos), *dseq = upload(seq), *done = filled<int>((size_t)T * HG, 0);
	A *dq = upload(q), *dk = upload(to_type<A>(kf)), *dv = upload(to_type<A>(vf));
	float *pacc = poisoned<float>((size_t)T * NS * H * D), *pml = poisoned<float>((size_t)T * NS * H * 2);
	A *dy = poisoned<A>(want.size());
	dim3 grid(NS, HG, T);
	constexpr int ES = (int)sizeof(A); /* the kernel takes HB·D <= 1024: only those row sizes instantiate */
	auto run = [&] {
		if constexpr (HB * 128 / ES <= 1024)
			if (ROWB == 128)
				g_attn_split<A, 128, HB><<<grid, 256>>>(dy, pacc, pml, done, dq, dk, dv, dpos, H, G, scale, dseq, S);
		if constexpr (HB * 256 / ES <= 1024)
			if (ROWB == 256)
				g_attn_split<A, 256, HB><<<grid, 256>>>(dy, pacc, pml, done, dq, dk, dv, dpos, H, G, scale, dseq, S);
		if constexpr (HB * 512 / ES <= 1024)
			if (ROWB == 512)
				g_attn_split<A, 512, HB><<<grid, 256>>>(dy, pacc, pml, done, dq, dk, dv, dpos, H, G, scale, dseq, S);
	};
	std::string cfg = fmt("attn_split A=%s H=%d G=%d D=%d (%d heads a block, %d ranges) T=%d", tname<A>(), H, G, D, HB,
			      NS, T);
	for (int t = 0; t < T; t++)
		cfg += fmt("%s slot %d pos %d", t ? "," : ":", seq[t], pos[t]);
	std::vector<A> y1;
	for (int r = 1; r <= 2; r++) {
		CK(cudaMemset(dy, 0xFF, want.size() * sizeof(A)));
		CK(cudaMemset(pacc, 0xFF, (size_t)T * NS * H * D * sizeof(float)));
		CK(cudaMemset(pml, 0xFF, (size_t)T * NS * H * 2 * sizeof(float)));
		run();
		CK_LAUNCH();
		std::string nm = fmt("%s (run %d)", cfg.c_str(), r);
		std::vector<int> left = download(done, (size_t)T * HG);
		check(std::all_of(left.begin(), left.end(), [](int c) { return c == 0; }), nm + ": done counters back at 0",
		      "a counter is left nonzero");
		std::vector<A> y = download(dy, want.size());
		std::vector<float> got = to_float(y);
		check_close(nm, got, want, tol<A>());
		if (std::is_same<A, float>::value) {
			double worst = 0;
			for (size_t i = 0; i < got.size(); i++)
				worst = std::max(worst, isnan(got[i]) ? INFINITY : fabs((double)got[i] - want[i]));
			check(worst <= 1e-4, nm + ": within 1e-4", fmt("max |error| %.3g", worst));
		}
		if (r == 1)
			y1 = y;
		else
			check(!memcmp(y1.data(), y.data(), y.size() * sizeof(A)), nm + ": the same bits as run 1",
			      "the output depends on the order the blocks finished in");
	}
	int maxp = *std::max_element(pos.begin(), pos.end());
	if (maxp >= 8191) {
		cudaEvent_t e0, e1;
		CK(cudaEventCreate(&e0));
		CK(cudaEventCreate(&e1));
		CK(cudaEventRecord(e0));
		for (int i = 0; i < 20; i++)
			run();
		CK(cudaEventRecord(e1));
		CK_LAUNCH();
		float ms;
		CK(cudaEventElapsedTime(&ms, e0, e1));
		double bytes = 0;
		for (int t = 0; t < T; t++)
			bytes += 2.0 * (pos[t] + 1) * RW * sizeof(A);
		printf("# %s: %.1f us a launch, %.0f GB/s of k and v rows (%.1f MB)\n", cfg.c_str(), ms * 1000 / 20,
		       bytes / (ms / 20 * 1e-3) / 1e9, bytes / 1e6);
		CK(cudaEventDestroy(e0));
		CK(cudaEventDestroy(e1));
	}
	free_all();
}

/*
** k_attn_split_rope (a 1-token step with the rotary and the cache writes folded in) at position p of slot
** 1 of 2, the caches NaN outside rows 0..p-1 of the slot: against ref_rope + ref_attention; cache row p
** must hold the rotated k (within the tolerance: the GPU's sinf/cosf) and the raw v exactly.
*/
template <typename A, int HB> static void test_attn_split_rope(int H, int G, int D, int NS, int p)
{
	int S = p + 4, R = D;
	size_t RW = (size_t)G * D;
	RefRope rr = {};
	rr.head_dim = D, rr.rot_dim = R, rr.theta = 500000.0, rr.scaling = ROPE_LLAMA3, rr.factor = 8;
	rr.orig_ctx = 8192, rr.low_freq_factor = 1, rr.high_freq_factor = 4;
	std::vector<float> inv(R / 2);
	float cs;
	ref_rope_freqs(&rr, inv.data(), &cs);
	std::vector<A> q = to_type<A>(rnd((size_t)H * D, -2.0f, 2.0f)), k = to_type<A>(rnd(RW, -2.0f, 2.0f)),
		       v = to_type<A>(rnd(RW));
	std::vector<float> qf = to_float(q), kf = to_float(k), vf = to_float(v), wq(qf.size()), wk(kf.size());
	ref_rope(wq.data(), qf.data(), &p, 1, H, &rr);
	ref_rope(wk.data(), kf.data(), &p, 1, G, &rr);
	wq = through<A>(wq), wk = through<A>(wk);
	std::vector<float> kc((size_t)2 * S * RW, NAN), vc((size_t)2 * S * RW, NAN);
	std::vector<float> kr = through<A>(rnd((size_t)p * RW)), vr = through<A>(rnd((size_t)p * RW));
	std::copy(kr.begin(), kr.end(), kc.begin() + (size_t)S * RW);
	std::copy(vr.begin(), vr.end(), vc.begin() + (size_t)S * RW);
	std::vector<float> ks(kc.begin() + (size_t)S * RW, kc.end()), vs(vc.begin() + (size_t)S * RW, vc.end()),
		want((size_t)H * D);
	float scale = 1.0f / sqrtf((float)D);
	ref_attention(want.data(), wq.data(), wk.data(), vf.data(), ks.data(), vs.data(), &p, 1, H, G, D, D, S, scale);
	int seq = 1, *dpos = upload(std::vector<int>{p}), *dseq = upload(std::vector<int>{seq});
	int *done = filled<int>((size_t)(H / HB), 0);
	A *dkc = upload(to_type<A>(kc)), *dvc = upload(to_type<A>(vc)), *dq = upload(q), *dk = upload(k), *dv = upload(v);
	float *dinv = upload(inv), *pacc = poisoned<float>((size_t)NS * H * D), *pml = poisoned<float>((size_t)NS * H * 2);
	A *dy = poisoned<A>(want.size());
	dim3 grid(NS, H / HB, 1);
	constexpr int RB = 128 * (int)sizeof(A); /* D = 128 (Llama's heads) */
	if (D != 128) {
		check(false, fmt("attn_split_rope: D = %d", D), "this test takes 128-dim heads");
		return;
	}
	g_attn_split_rope<A, RB, HB><<<grid, 256>>>(dy, pacc, pml, done, dkc, dvc, dq, dk, dv, dpos, dinv, cs, H, G, R, scale,
						    dseq, S);
	CK_LAUNCH();
	std::string nm = fmt("attn_split_rope A=%s H=%d G=%d D=%d (%d heads a block, %d ranges) pos %d", tname<A>(), H, G, D,
			     HB, NS, p);
	check_close(nm, to_float(download(dy, want.size())), want, tol<A>());
	std::vector<A> kc2 = download(dkc, kc.size()), vc2 = download(dvc, vc.size());
	std::vector<float> krow = to_float(std::vector<A>(kc2.begin() + ((size_t)S + p) * RW, kc2.begin() + ((size_t)S + p + 1) * RW));
	check_close(nm + ": cache row p holds the rotated k", krow, wk, tol<A>());
	check_exact(nm + ": cache row p holds v", std::vector<A>(vc2.begin() + ((size_t)S + p) * RW,
								   vc2.begin() + ((size_t)S + p + 1) * RW), v);
	std::vector<int> left = download(done, (size_t)(H / HB));
	check(std::all_of(left.begin(), left.end(), [](int c) { return c == 0; }), nm + ": done counters back at 0",
	      "a counter is left nonzero");
	free_all();
}

/* The split decode attention over the shapes glmc gives it: Llama-3-8B's heads (32 of 128 dims, 8 kv
** heads: 4 a block, 33 ranges on 132 SMs) at contexts across the range boundaries and at 32K, steps of
** several tokens in several slots, MHA, a group of 8, 64-dim heads; the folded rotary at 32K. */
template <typename A> static void attn_split_suite()
{
	for (int ctx : {1, 64, 65, 128, 129, 1000, 32768})
		test_attn_split<A, 4>(32, 8, 128, 33, {0}, {ctx - 1});
	test_attn_split<A, 4>(32, 8, 128, 33, {0, 1, 2, 3}, {32767, 100, 5000, 63});
	test_attn_split<A, 4>(32, 8, 128, 33, {0, 0, 0, 0, 0, 0, 0, 0}, {16000, 16001, 16002, 16003, 16004, 16005, 16006, 16007});
	test_attn_split<A, 1>(16, 16, std::is_same<A, float>::value ? 128 : 64, 17, {0, 1}, {2000, 9000});
	test_attn_split<A, 8>(32, 4, 128, 66, {0}, {20000});
	test_attn_split<A, 8>(16, 2, 64, 33, {1, 0}, {4000, 700});
	test_attn_split_rope<A, 4>(32, 8, 128, 33, 32767);
	test_attn_split_rope<A, 4>(32, 8, 128, 33, 100);
}

/* The decode path of mla (k_mla_split) over the shapes glmc gives it, and every head-group size. */
template <typename A> static void mla_split_suite()
{
	/* GLM-4.7-Flash (20 heads), GLM-5 (64; 8 per GPU at tp 8) decode shapes, contexts 1, 7, 200, 3000 */
	for (int ctx : {1, 7, 200, 3000}) {
		test_mla_split<A>(20, 576, 512, {0}, {ctx - 1}, 0, 0.0625f);
		test_mla_split<A>(64, 576, 512, {0}, {ctx - 1}, 0, 0.0625f);
		test_mla_split<A>(8, 576, 512, {0}, {ctx - 1}, 0, 0.0625f);
	}
	/* DSA selections: -1 and out-of-range entries are skipped; GLM-5's 2048 of 3000 and of 200 */
	test_mla_split<A>(64, 576, 512, {0}, {2999}, 2048, 0.0625f);
	test_mla_split<A>(8, 576, 512, {0}, {199}, 2048, 0.0625f);
	test_mla_split<A>(8, 576, 512, {1, 0, 2}, {6, 199, 2999}, 40, 0.0625f);
	test_mla_split<A>(5, 576, 512, {0, 1}, {30, 3}, 12, 0.0625f);
	/* the indexer's selections (visible rows first): GLM-5 at contexts 200 and 3000, mixed steps */
	test_mla_split<A>(64, 576, 512, {0}, {199}, 2048, 0.0625f, 0, 0, -1, 1);
	test_mla_split<A>(64, 576, 512, {0}, {2999}, 2048, 0.0625f, 0, 0, -1, 1);
	test_mla_split<A>(8, 576, 512, {1, 0, 2}, {6, 199, 2999}, 40, 0.0625f, 0, 0, -1, 1);
	test_mla_split<A>(5, 576, 512, {0, 1}, {0, 3}, 12, 0.0625f, 0, 0, -1, 1);
	/* heads 1..64 with glmc's choice, partial last groups */
	for (int H : {1, 2, 3, 4, 5, 7, 11, 12, 13, 33, 63})
		test_mla_split<A>(H, 576, 512, {0}, {150}, 0, 0.0625f);
	/* every head-group size the kernel takes, 1 and 8 too */
	for (int HB : {1, 2, 4, 8}) {
		test_mla_split<A>(13, 576, 512, {0, 1}, {150, 40}, 0, 0.0625f, 0, HB);
		test_mla_split<A>(3, 72, 40, {0}, {300}, 9, 0.11785113f, 0, HB);
	}
	test_mla_split<A>(64, 576, 512, {0}, {2999}, 2048, 0.0625f, 8, 8);
	/* T = 2..8 rows, each its own slot and position; 4 tokens of one sequence (a short prefill) */
	test_mla_split<A>(20, 576, 512, {2, 0, 3, 1}, {0, 6, 199, 77}, 0, 0.0625f);
	test_mla_split<A>(20, 576, 512, {1, 1, 1, 1}, {10, 11, 12, 13}, 0, 0.0625f);
	test_mla_split<A>(3, 576, 512, {2, 1, 0}, {300, 7, 1}, 0, 0.0625f);
	test_mla_split<A>(64, 576, 512, {0, 1, 0, 1, 2, 3, 4, 5}, {40, 9, 41, 10, 0, 3000, 17, 600}, 0, 0.0625f);
	/* T = 9..16 (glmc's bound, MLA_SPLIT_TMAX 16): a batch of 16 sequences at their own positions, 12
	** tokens of one prefill, GLM-5's 13 sequences with DSA selections */
	test_mla_split<A>(20, 576, 512, {3, 0, 7, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15},
	                  {0, 6, 199, 77, 150, 3, 1000, 40, 41, 160, 2, 9, 300, 88, 17, 500}, 0, 0.0625f);
	test_mla_split<A>(20, 576, 512, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41},
	                  0, 0.0625f);
	test_mla_split<A>(64, 576, 512, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {5, 199, 2999, 40, 0, 700, 17, 600, 3,
	                  2100, 64, 128, 1}, 2048, 0.0625f, 0, 0, -1, 1);
	/* odd small shapes: Dk % 4 != 0 (scalar row reads), Dv % 4 != 0 (scalar merge), Dv = Dk, the largest dims */
	test_mla_split<A>(3, 37, 19, {0, 1}, {7, 200}, 0, 0.17f);
	test_mla_split<A>(2, 72, 40, {0}, {200}, 5, 0.11785113f);
	test_mla_split<A>(6, 64, 64, {1, 0}, {250, 31}, 0, 1.0f); /* large scores: the running max moves */
	test_mla_split<A>(2, 1024, 512, {0, 1}, {3, 500}, 0, 0.03125f);
	test_mla_split<A>(9, 1024, 512, {0}, {100}, 0, 0.03125f, 0, 8);
	/* few ranges: one block walks 200 or 3000 rows in passes of 32, or ranges of uneven length */
	test_mla_split<A>(4, 576, 512, {0, 1}, {199, 2999}, 0, 0.0625f, 1);
	test_mla_split<A>(4, 64, 32, {0}, {200}, 0, 1.0f, 3);
	test_mla_split<A>(20, 576, 512, {0}, {1000}, 300, 0.0625f, 7);
	test_mla_split<A>(20, 576, 512, {0}, {5000}, 0, 0.0625f, 256, 1); /* the most ranges the merge takes */
	/* nothing visible: NaN, as ref_mla's and k_mla's */
	test_mla_split<A>(4, 576, 512, {0, 1}, {50, 9}, 8, 0.0625f, 0, 0, 1);
	test_mla_split<A>(20, 576, 512, {0, 1, 2}, {3, 300, 30}, 64, 0.0625f, 0, 0, 2);
}

/*
** Indexer inputs. RANDOM: q, k, w uniform in [-1, 1). ZEROS: many exactly tied zero scores: head weights
** all negative, q positive, and 60% of the keys all negative, whose every dot product is negative (score
** exactly 0, the best possible); the other keys score below 0. EXACT: H = 2, D = 1, q[t] = (1, -1),
** w[t] = (1, -1), scale 1, so the score of row s is exactly its key k[s] (relu(k) - relu(-k)) on both
** sides, and keys come from eight values (ties everywhere, -0 included): the selections must then agree
** in order, not just as sets.
*/
enum IdxMode { IDX_RANDOM, IDX_ZEROS, IDX_EXACT };

/* The scores ref_indexer ranks, recomputed here in double from the same inputs (its own are internal). */
static std::vector<float> host_scores(const std::vector<float> &q, const std::vector<float> &w, const float *kc,
				      const std::vector<int> &pos, int H, int D, int total, float scale)
{
	int T = (int)pos.size();
	std::vector<float> sc((size_t)T * total, -INFINITY);
	for (int t = 0; t < T; t++)
		for (int s = 0; s <= pos[t]; s++) {
			double acc = 0;
			for (int h = 0; h < H; h++) {
				double d = 0;
				for (int i = 0; i < D; i++)
					d += (double)q[((size_t)t * H + h) * D + i] * kc[(size_t)s * D + i];
				d *= scale;
				acc += (double)w[(size_t)t * H + h] * (d > 0 ? d : 0);
			}
			sc[(size_t)t * total + s] = (float)acc;
		}
	return sc;
}

/*
** A prefill of `prefill` tokens then `steps` single-token steps through k_mla_write (the key cache),
** k_indexer_scores and k_indexer_select, against ref_indexer. With extra > 0 the cache has extra more
** rows and the score rows are the cache's capacity long (as glmc emits them), which must not change
** the selection: it ranks the pos[T-1] + 1 rows of the step, as ref_indexer. Scores: -inf exactly where s > pos[t],
** the rest within 1e-5 (rel-L2) of the double-accumulated reference (bit for bit in EXACT mode).
** Selections: per query the same set of rows as ref_indexer (RANDOM, ZEROS: float and double scores may
** differ in their last bit, which could only reorder near-equal rows), the identical sequence in EXACT.
*/
template <typename A>
static void test_indexer(IdxMode mode, int H, int D, int topk, int prefill, int steps, float scale, int extra = 0)
{
	static const char *mname[] = {"random", "tied zeros", "exact scores"};
	static const float vals[8] = {0.0f, -0.0f, 0.5f, -0.5f, 1.0f, -1.25f, 2.0f, 0.75f};
	if (mode == IDX_EXACT) {
		H = 2;
		D = 1;
		scale = 1.0f;
	}
	int S = prefill + steps + 2 + extra;
	std::vector<float> kc_ref((size_t)S * D, NAN);
	A *kc = poisoned<A>((size_t)S * D);
	std::string cfg = fmt("A=%s %s H=%d D=%d topk=%d%s", tname<A>(), mname[mode], H, D, topk,
			      extra ? fmt(" rows of S=%d", S).c_str() : "");
	int p0 = 0;
	for (int call = 0; call <= steps; call++) {
		int T = call == 0 ? prefill : 1, total = extra ? S : p0 + T; /* the score rows' length */
		std::vector<int> pos(T);
		for (int t = 0; t < T; t++)
			pos[t] = p0 + t;
		std::vector<float> qr, kr, wr;
		if (mode == IDX_RANDOM) {
			qr = rnd((size_t)T * H * D);
			kr = rnd((size_t)T * D);
			wr = rnd((size_t)T * H);
		} else if (mode == IDX_ZEROS) {
			qr = rnd((size_t)T * H * D, 0.1f, 1.0f);
			wr = rnd((size_t)T * H, -1.0f, -0.1f);
			kr = rnd((size_t)T * D);
			for (int t = 0; t < T; t++)
				if (frand(0.0f, 1.0f) < 0.6f)
					for (int i = 0; i < D; i++)
						kr[(size_t)t * D + i] = frand(-1.0f, -0.1f);
		} else {
			for (int t = 0; t < T; t++) {
				qr.push_back(1.0f);
				qr.push_back(-1.0f);
				wr.push_back(1.0f);
				wr.push_back(-1.0f);
				kr.push_back(vals[rand64() % 8]);
			}
		}
		std::vector<A> q = to_type<A>(qr), k = to_type<A>(kr), w = to_type<A>(wr);
		std::vector<float> qf = to_float(q), kf = to_float(k), wf = to_float(w);
		std::vector<int> want((size_t)T * topk);
		ref_indexer(want.data(), qf.data(), kf.data(), wf.data(), kc_ref.data(), pos.data(), T, H, D, S, topk,
			    scale);
		std::vector<float> swant = host_scores(qf, wf, kc_ref.data(), pos, H, D, total, scale);

		int *dpos = upload(pos);
		float *dscore = poisoned<float>((size_t)T * total);
		int *dscratch = poisoned<int>((size_t)T * 2 * total), *dsel = poisoned<int>((size_t)T * topk);
		g_mla_write<A><<<T, 256>>>(kc, upload(k), dpos, D);
		CK_LAUNCH();
		g_indexer_scores<A><<<dim3(blocks(total, 8), T), 256>>>(dscore, upload(q), upload(w), kc, dpos, H, D, total,
									scale);
		CK_LAUNCH();
		g_indexer_select<A><<<T, 256>>>(dsel, dscore, dscratch, dpos, total, topk);
		CK_LAUNCH();

		std::string at = call == 0 ? fmt("prefill T=%d", T) : fmt("step %d (pos %d)", call, p0);
		std::vector<float> sgot = download(dscore, (size_t)T * total), fin_got, fin_want;
		bool inf_ok = true;
		size_t bad = 0;
		for (size_t i = 0; i < sgot.size(); i++) {
			if (isinf(swant[i]) && swant[i] < 0) {
				if (!(isinf(sgot[i]) && sgot[i] < 0) && inf_ok) {
					inf_ok = false;
					bad = i;
				}
			} else {
				fin_got.push_back(sgot[i]);
				fin_want.push_back(swant[i]);
			}
		}
		check(inf_ok, fmt("indexer_scores %s %s: -inf past pos[t]", cfg.c_str(), at.c_str()),
		      fmt("score %zu is %g, want -inf", bad, sgot[bad]));
		if (mode == IDX_EXACT)
			check_exact(fmt("indexer_scores %s %s: bit-exact", cfg.c_str(), at.c_str()), fin_got, fin_want);
		else
			check_close(fmt("indexer_scores %s %s", cfg.c_str(), at.c_str()), fin_got, fin_want, 1e-5);

		std::vector<int> got = download(dsel, (size_t)T * topk);
		if (mode == IDX_EXACT) {
			check_exact(fmt("indexer_select %s %s total=%d: same sequence", cfg.c_str(), at.c_str(), total), got,
				    want);
		} else {
			int bad_t = -1;
			for (int t = 0; t < T && bad_t < 0; t++) {
				std::vector<int> g(got.begin() + (size_t)t * topk, got.begin() + (size_t)(t + 1) * topk),
					wv(want.begin() + (size_t)t * topk, want.begin() + (size_t)(t + 1) * topk);
				std::sort(g.begin(), g.end());
				std::sort(wv.begin(), wv.end());
				if (g != wv)
					bad_t = t;
			}
			int zeros = 0;
			if (mode == IDX_ZEROS)
				for (int s = 0; s < total; s++)
					zeros += swant[(size_t)(T - 1) * total + s] == 0.0f;
			check(bad_t < 0,
			      fmt("indexer_select %s %s total=%d: same sets%s", cfg.c_str(), at.c_str(), total,
				  mode == IDX_ZEROS ? fmt(" (%d tied zeros in the last row)", zeros).c_str() : ""),
			      fmt("query %d selects a different set", bad_t));
		}
		p0 += T;
	}
	free_all();
}

/* Routing of T rows of E logits against ref_moe_route (exact ids), then the weights of the reference's
** choice, normalised (scale 2.5) and not (scale 1), against ref_moe_weights. Row 0's logits are all
** equal and row 1's come in equal pairs, so the tie rule is exercised. */
template <typename A, typename B_>
static void test_moe_route(int T, int E, int k, int ng, int tg, int sig, bool use_bias)
{
	std::vector<float> lr = rnd((size_t)T * E, -3.0f, 3.0f);
	for (int e = 0; e < E; e++) {
		lr[e] = 0.5f;
		if (T > 1)
			lr[E + e] = lr[E + (e & ~1)];
	}
	std::vector<A> lg = to_type<A>(lr);
	std::vector<B_> bias = to_type<B_>(rnd(E, -0.2f, 0.2f));
	std::vector<float> lf = to_float(lg), bf = to_float(bias);
	std::vector<int> want((size_t)T * k);
	ref_moe_route(want.data(), lf.data(), use_bias ? bf.data() : NULL, T, E, k, ng, tg, sig);
	A *dl = upload(lg);
	int *didx = poisoned<int>(want.size());
	g_moe_route<A, B_><<<T, 32>>>(didx, dl, use_bias ? upload(bias) : nullptr, E, k, ng, tg, sig);
	CK_LAUNCH();
	std::string cfg = fmt("A=%s T=%d E=%d k=%d groups %d/%d %s%s", tname<A>(), T, E, k, ng, tg,
			      sig ? "sigmoid" : "softmax", use_bias ? fmt(" bias %s", tname<B_>()).c_str() : "");
	check_exact(fmt("moe_route %s", cfg.c_str()), download(didx, want.size()), want);
	int *dwant = upload(want);
	for (int norm = 1; norm >= 0; norm--) {
		float scale = norm ? 2.5f : 1.0f;
		std::vector<float> wwant(want.size());
		ref_moe_weights(wwant.data(), lf.data(), want.data(), T, E, k, sig, norm, scale);
		A *dw = poisoned<A>(want.size());
		g_moe_weights<A><<<T, 32>>>(dw, dl, dwant, E, k, sig, norm, scale);
		CK_LAUNCH();
		check_close(fmt("moe_weights %s%s scale %g", cfg.c_str(), norm ? " norm" : "", scale),
			    to_float(download(dw, want.size())), wwant, tol<A>());
	}
	free_all();
}

/*
** Logits for the routing matrix, row t by kind (t + shift) % 4: random in [-3, 3], all equal, in equal
** pairs, or drawn from {-1, 0, 1} (ties everywhere, inside groups and between them). With ties, the
** bias is drawn from {-0.1, 0, 0.1}, so choices still tie after it; else it is random in [-0.2, 0.2].
*/
static std::vector<float> route_logits(int T, int E, int shift)
{
	std::vector<float> l = rnd((size_t)T * E, -3.0f, 3.0f);
	for (int t = 0; t < T; t++)
		for (int e = 0; e < E; e++) {
			float *r = &l[(size_t)t * E];
			switch ((t + shift) % 4) {
			case 1: r[e] = 0.5f; break;
			case 2: r[e] = r[e & ~1]; break;
			case 3: r[e] = (float)(rand64() % 3) - 1.0f; break;
			}
		}
	return l;
}

static std::vector<float> route_bias(int E, bool ties)
{
	std::vector<float> b = rnd(E, -0.2f, 0.2f);
	if (ties)
		for (auto &v : b)
			v = 0.1f * ((float)(rand64() % 3) - 1.0f);
	return b;
}

/* Index of the first element of got that is not want rounded to A within one unit in A's last place
** (the weights are computed in double and rounded once, as the reference: only an ulp of the double
** exp may differ), or -1. */
template <typename A> static long first_off_ulp(const std::vector<float> &got, const std::vector<float> &want)
{
	int mant = std::is_same<A, float>::value ? 23 : 7;
	for (size_t i = 0; i < want.size(); i++) {
		float w = h_to_f(h_from_f<A>(want[i])), g = got[i];
		float ulp = w == 0.0f || !isfinite(w) ? 0.0f : ldexpf(1.0f, ilogbf(w) - mant);
		if (!(fabsf(g - w) <= ulp))
			return (long)i;
	}
	return -1;
}

/*
** Routing over a matrix of cases against ref_moe_route (ids exactly) and ref_moe_weights (per element
** within an ulp of A): k in {1, 2, 4, 8} (those the groups allow), T = 1..8 tokens, bias on and off,
** the weights normalised (scale 2.5) and not (scale 1), rows of every tie kind of route_logits. One
** check per (E, groups, function) naming the first case that differs.
*/
template <typename A, typename B_> static void test_moe_route_matrix(int E, int ng, int tg, int sig)
{
	std::string bad;
	int cases = 0;
	for (int k : {1, 2, 4, 8}) {
		if (k > tg * (E / ng))
			continue;
		for (int T = 1; T <= 8; T++)
			for (int use_bias = 0; use_bias < 2; use_bias++) {
				std::vector<A> lg = to_type<A>(route_logits(T, E, k + T));
				std::vector<B_> bias = to_type<B_>(route_bias(E, (T + k) % 2 == 1));
				std::vector<float> lf = to_float(lg), bf = to_float(bias);
				std::vector<int> want((size_t)T * k);
				ref_moe_route(want.data(), lf.data(), use_bias ? bf.data() : NULL, T, E, k, ng, tg, sig);
				A *dl = upload(lg);
				int *didx = poisoned<int>(want.size());
				g_moe_route<A, B_><<<T, 32>>>(didx, dl, use_bias ? upload(bias) : nullptr, E, k, ng, tg, sig);
				CK_LAUNCH();
				std::string at = fmt("k=%d T=%d%s", k, T, use_bias ? " bias" : "");
				std::vector<int> got = download(didx, want.size());
				for (size_t i = 0; i < got.size() && bad.empty(); i++)
					if (got[i] != want[i])
						bad = fmt("%s: id %zu (token %zu) is %d, want %d", at.c_str(), i, i / k, got[i], want[i]);
				int *dwant = upload(want);
				for (int norm = 1; norm >= 0; norm--) {
					float scale = norm ? 2.5f : 1.0f;
					std::vector<float> ww(want.size());
					ref_moe_weights(ww.data(), lf.data(), want.data(), T, E, k, sig, norm, scale);
					A *dw = poisoned<A>(want.size());
					g_moe_weights<A><<<T, 32>>>(dw, dl, dwant, E, k, sig, norm, scale);
					CK_LAUNCH();
					std::vector<float> gw = to_float(download(dw, want.size()));
					long off = first_off_ulp<A>(gw, ww);
					if (off >= 0 && bad.empty())
						bad = fmt("%s norm %d: weight %ld is %.9g, want %.9g", at.c_str(), norm, off, gw[off],
							  h_to_f(h_from_f<A>(ww[off])));
				}
				cases++;
				free_all();
			}
	}
	check(bad.empty(),
	      fmt("moe_route+moe_weights A=%s bias %s E=%d groups %d/%d %s: %d cases (k 1-8, T 1-8, ties, bias on/off, "
		  "norm on/off)", tname<A>(), tname<B_>(), E, ng, tg, sig ? "sigmoid" : "softmax", cases),
	      bad);
}

/* NaN and infinite logits (ids only: the weights are then NaN in both): the order puts NaN first (lower
** index first among them), softmax's max ignores NaN, as ref.c's. */
template <typename A> static void test_moe_route_special(int E, int k, int ng, int tg, int sig)
{
	const int T = 4;
	std::vector<float> lr = rnd((size_t)T * E, -3.0f, 3.0f);
	lr[3] = NAN, lr[E - 1] = NAN, lr[1] = INFINITY;                    /* token 0: two NaN, +inf */
	lr[E + 2] = -INFINITY, lr[E + 5] = INFINITY, lr[E + 6] = INFINITY; /* token 1: tied +inf */
	for (int e = 0; e < E; e += 2)
		lr[2 * E + e] = -INFINITY;                                    /* token 2: half -inf */
	lr[3 * E + E / 2] = NAN;                                          /* token 3: one NaN */
	std::vector<A> lg = to_type<A>(lr);
	std::vector<float> lf = to_float(lg), bf = route_bias(E, false);
	std::vector<int> want((size_t)T * k);
	ref_moe_route(want.data(), lf.data(), bf.data(), T, E, k, ng, tg, sig);
	int *didx = poisoned<int>(want.size());
	g_moe_route<A, float><<<T, 32>>>(didx, upload(lg), upload(bf), E, k, ng, tg, sig);
	CK_LAUNCH();
	check_exact(fmt("moe_route A=%s E=%d k=%d groups %d/%d %s: NaN and inf logits", tname<A>(), E, k, ng, tg,
			sig ? "sigmoid" : "softmax"),
		    download(didx, want.size()), want);
	free_all();
}

/* k_moe_up then k_moe_down against ref_moe_ffn. Each token picks k distinct experts; token 1 skips one
** slot (-1) and, with T >= 3, the last token skips them all (its output row must be 0). With shift_x,
** x starts one element past a 16-byte boundary (k_moe_up must take its element-wise path). */
template <typename A, typename W> static void test_moe_ffn(int T, int C, int F, int E, int k, bool shift_x = false)
{
	std::vector<A> x = to_type<A>(rnd((size_t)T * C)), w = to_type<A>(rnd((size_t)T * k, 0.1f, 1.0f));
	std::vector<W> gate = to_type<W>(rnd((size_t)E * F * C)), up = to_type<W>(rnd((size_t)E * F * C)),
		       down = to_type<W>(rnd((size_t)E * C * F));
	std::vector<int> idx;
	for (int t = 0; t < T; t++) {
		std::vector<int> ex(E);
		for (int e = 0; e < E; e++)
			ex[e] = e;
		shuffle(ex);
		for (int j = 0; j < k; j++)
			idx.push_back(t == 1 && j == 1 ? -1 : T >= 3 && t == T - 1 ? -1 : ex[j]);
	}
	std::vector<float> xf = to_float(x), wf = to_float(w), gf = to_float(gate), uf = to_float(up),
			   df = to_float(down), want((size_t)T * C);
	ref_moe_ffn(want.data(), xf.data(), idx.data(), wf.data(), gf.data(), uf.data(), df.data(), T, C, F, E, k);
	int *didx = upload(idx);
	float *dhid = poisoned<float>((size_t)T * k * F);
	A *dy = poisoned<A>(want.size());
	std::vector<A> xs = x;
	if (shift_x)
		xs.insert(xs.begin(), h_from_f<A>(0.0f));
	const A *dx = upload(xs) + (shift_x ? 1 : 0);
	g_moe_up<A, W><<<dim3(blocks(F, 8), k, T), 256>>>(dhid, dx, didx, upload(gate), upload(up), C, F, k);
	CK_LAUNCH();
	g_moe_down<A, W><<<dim3(blocks(C, 8), T), 256>>>(dy, dhid, didx, upload(w), upload(down), C, F, k);
	CK_LAUNCH();
	check_close(fmt("moe_up+moe_down A=%s W=%s T=%d C=%d F=%d E=%d k=%d (skipped slots)%s", tname<A>(), tname<W>(), T,
			C, F, E, k, shift_x ? " x unaligned" : ""),
		    to_float(download(dy, want.size())), want, tol<A>());
	free_all();
}

__global__ void __launch_bounds__(256) g_moe_group(int *meta, int *list, const int *idx, int n, int E)
{
	k_moe_group(meta, list, idx, n, E);
}

__global__ void __launch_bounds__(256) g_moe_up_tc(const int *meta, const int *list, bf16 *hid, const bf16 *x,
                                                   const bf16 *gate, const bf16 *up, int C, int F, int k, int E)
{
	extern __shared__ __align__(128) unsigned char dsm[];
	k_moe_up_tc<bf16, -1, -1, 4>(meta, list, hid, x, gate, up, C, F, k, E, dsm);
}

__global__ void __launch_bounds__(256) g_moe_down_tc(const int *meta, const int *list, const bf16 *hid, float *ys,
                                                     const bf16 *down, int C, int F, int E)
{
	extern __shared__ __align__(128) unsigned char dsm[];
	k_moe_down_tc<bf16, -1, 3>(meta, list, hid, ys, down, C, F, E, dsm);
}

__global__ void __launch_bounds__(256) g_moe_sum_tc(bf16 *y, const int *meta, const int *list, const bf16 *hid,
                                                    const float *ys, const int *idx, const bf16 *w, int T, int C, int k,
                                                    int E)
{
	k_moe_sum_tc<bf16>(y, meta, list, hid, ys, idx, w, T, C, k, E);
}

/*
** ops/moe_tc.cuh's grouped GEMM (k_moe_group, k_moe_up_tc, k_moe_down_tc, k_moe_sum_tc, launched as glmc
** does) against ref_moe_ffn on the same bf16 values, as tests/simt/test_moe_tc.cc holds the CPU stand-in:
** the grouping exact (offsets, tile starts, slots ascending within an expert); each output within a bf16
** unit plus 2^-14 of M = sum over the token's slots of |w|·sum_f |down·hid| (f32 sums in another order,
** hid as bf16 hi + lo). Skewed: slot 0 is expert 1 for every token (several row tiles), the rest among
** the lower half of the experts, every fifth slot empty (-1); else k distinct random experts a token.
*/
static void test_moe_tc(int T, int C, int F, int E, int k, bool skew)
{
	int n = T * k, rows = (n + MOE_TC_BM - 1) / MOE_TC_BM;
	std::vector<float> x = through<bf16>(rnd((size_t)T * C)), w = through<bf16>(rnd((size_t)n, 0.1f, 1.0f));
	std::vector<float> gate = through<bf16>(rnd((size_t)E * F * C, -0.25f, 0.25f)),
			   up = through<bf16>(rnd((size_t)E * F * C, -0.25f, 0.25f)),
			   down = through<bf16>(rnd((size_t)E * C * F, -0.25f, 0.25f));
	std::vector<int> idx;
	for (int t = 0; t < T; t++) {
		std::vector<int> ex(skew ? E / 2 : E);
		for (size_t e = 0; e < ex.size(); e++)
			ex[e] = (int)e;
		shuffle(ex);
		if (skew) /* expert 1 first, then the others in their shuffled order */
			for (size_t e = 0; e < ex.size(); e++)
				if (ex[e] == 1)
					std::swap(ex[e], ex[0]);
		for (int j = 0; j < k; j++)
			idx.push_back(skew && (t * k + j) % 5 == 4 ? -1 : ex[j]);
	}
	MoeTcWant want = moe_tc_want(x, w, gate, up, down, idx, T, C, F, E, k);
	int *didx = upload(idx), *meta = poisoned<int>(2 * E + 2), *list = poisoned<int>(n);
	bf16 *dhid = poisoned<bf16>((size_t)n * F);
	float *ys = poisoned<float>((size_t)n * C);
	bf16 *dy = poisoned<bf16>(want.y.size());
	g_moe_group<<<E, 256>>>(meta, list, didx, n, E);
	CK_LAUNCH();
	CK(cudaFuncSetAttribute(g_moe_up_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_TC_UP_SMEM(4)));
	g_moe_up_tc<<<dim3((F + 63) / 64, rows, 2), 256, MOE_TC_UP_SMEM(4)>>>(meta, list, dhid, upload(to_type<bf16>(x)),
	                                                                      upload(to_type<bf16>(gate)),
	                                                                      upload(to_type<bf16>(up)), C, F, k, E);
	CK_LAUNCH();
	CK(cudaFuncSetAttribute(g_moe_down_tc, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_TC_DOWN_SMEM(3)));
	g_moe_down_tc<<<dim3((C + 127) / 128, rows, 2), 256, MOE_TC_DOWN_SMEM(3)>>>(meta, list, dhid, ys,
	                                                                            upload(to_type<bf16>(down)), C, F, E);
	CK_LAUNCH();
	g_moe_sum_tc<<<blocks((long long)T * C, 1024), 256>>>(dy, meta, list, dhid, ys, didx, upload(to_type<bf16>(w)), T, C,
	                                                      k, E);
	CK_LAUNCH();
	std::string cfg = fmt("T=%d C=%d F=%d E=%d k=%d%s", T, C, F, E, k, skew ? " skewed" : "");
	check(moe_tc_grouped(want, download(meta, 2 * E + 2), download(list, n), E), "moe_group " + cfg,
	      "offsets, tiles or slot order differ");
	std::vector<float> got = to_float(download(dy, want.y.size())),
	                   hs = to_float(download(dhid, (size_t)want.off[E] * F));
	double wh = moe_tc_hid_worst(hs, want), worst = moe_tc_worst(got, hs, want), wr = moe_tc_ref_worst(got, want);
	check(wh <= 1.0 && worst <= 1.0 && wr <= 1.0, "moe grouped GEMM " + cfg,
	      fmt("worst %.2f units (hid %.2f, against ref_moe_ffn %.2f)", worst, wh, wr));
	free_all();
}

/* Every new template for activation type A. */
template <typename A> static void mla_moe_suite()
{
	test_matmul_tb<A, float>(2, 3, 70, 300);
	test_matmul_tb<A, bf16>(4, 1, 192, 512); /* the absorbed q_nope·W_UK shape, per head */
	test_matmul_tb<A, f16>(1, 5, 4224, 20);
	test_mla<A>(4, 576, 512, 5, 3, 0.0625f, 0); /* GLM-5's latent: 512 + 64 rope */
	test_mla<A>(4, 576, 512, 100, 2, 0.0625f, 40);
	test_mla<A>(3, 72, 40, 5, 3, 0.11785113f, 4);
	test_mla<A>(2, 64, 32, 200, 3, 1.0f, 0); /* long context, large scores: the running max moves */
	test_mla<A>(2, 1024, 512, 3, 2, 0.03125f, 0); /* the largest supported dims */
	test_indexer<A>(IDX_RANDOM, 4, 64, 32, 100, 3, 0.125f);
	test_indexer<A>(IDX_RANDOM, 3, 300, 8, 20, 2, 0.06f); /* D > 256: the key row's tail re-read */
	test_indexer<A>(IDX_ZEROS, 4, 64, 32, 200, 2, 0.125f);
	test_indexer<A>(IDX_EXACT, 0, 0, 16, 300, 3, 1.0f);  /* introselect: topk·64 > total */
	test_indexer<A>(IDX_EXACT, 0, 0, 4, 300, 2, 1.0f);   /* topk·64 <= total: largest first */
	test_indexer<A>(IDX_EXACT, 0, 0, 100, 150, 3, 1.0f); /* n <= topk for most of the prefill */
	test_indexer<A>(IDX_EXACT, 0, 0, 5, 300, 2, 1.0f, 100); /* 5·64 > the 302 rows ranked, <= S = 404 */
	test_indexer<A>(IDX_ZEROS, 4, 64, 32, 200, 2, 0.125f, 1900);
	test_moe_route<A, float>(5, 8, 2, 2, 1, 1, true);
	test_moe_route<A, bf16>(5, 8, 2, 2, 1, 1, true);
	test_moe_route<A, float>(5, 8, 2, 1, 1, 0, false);
	test_moe_route<A, float>(5, 8, 2, 4, 2, 0, false); /* row 0: every group ties */
	test_moe_route<A, float>(4, 256, 8, 8, 4, 1, true); /* DeepSeek-V3's routing */
	test_moe_route<A, f16>(3, 64, 4, 1, 1, 1, true);
	/* E of Mixtral, GLM-4.7-Flash, GLM-4.5, GLM-5 / DeepSeek-V3 (8 groups keep 4 there) */
	const int route_cfg[][3] = {{8, 1, 1}, {8, 4, 2}, {64, 1, 1}, {64, 8, 4}, {160, 1, 1}, {160, 8, 3},
				    {256, 1, 1}, {256, 8, 4}};
	for (auto &c : route_cfg)
		for (int sig = 0; sig < 2; sig++) {
			test_moe_route_matrix<A, float>(c[0], c[1], c[2], sig);
			if (c[0] == 256)
				test_moe_route_matrix<A, bf16>(c[0], c[1], c[2], sig);
		}
	test_moe_route_matrix<A, float>(1000, 1, 1, 1); /* the largest E: 32 experts per lane */
	test_moe_route_matrix<A, float>(1024, 32, 5, 0);
	for (int sig = 0; sig < 2; sig++) {
		test_moe_route_special<A>(64, 4, 1, 1, sig);
		test_moe_route_special<A>(256, 8, 8, 4, sig);
	}
	test_moe_ffn<A, float>(3, 256, 96, 8, 2);
	test_moe_ffn<A, bf16>(3, 256, 96, 8, 2);
	test_moe_ffn<A, f16>(3, 256, 96, 8, 2);
	test_moe_ffn<A, bf16>(4, 70, 50, 8, 2); /* unaligned rows: the scalar paths */
	test_moe_ffn<A, float>(2, 4224, 40, 8, 2);
	test_moe_ffn<A, bf16>(8, 2048, 40, 16, 4);  /* GLM-4.7-Flash's C, a batch of 8: two batches of 4 vectors */
	test_moe_ffn<A, bf16>(3, 2056, 24, 8, 2);   /* 257 vectors a row: lane 0 has one more */
	test_moe_ffn<A, float>(3, 2056, 24, 8, 2);  /* 514 float vectors a row */
	test_moe_ffn<A, f16>(1, 6144, 16, 16, 8);   /* GLM-5's C: 24 vectors a lane, k = 8 */
	test_moe_ffn<A, bf16>(1, 520, 24, 8, 2);    /* 65 vectors: most lanes have 2, one has 3 */
	test_moe_ffn<A, bf16>(3, 256, 24, 8, 2, true); /* x unaligned: the element-wise path */
}

/* ---- driver: every template with each relevant type combination ---- */

template <typename A, typename W> static void linear_suite()
{
	const int Ts[] = {1, 3, 8, 9}; /* 9 is past the documented T <= 8; the kernel takes 8 rows at a time */
	const int KN[][2] = {{70, 33}, {72, 40}, {4224, 24}};
	for (int T : Ts)
		for (auto &kn : KN)
			test_linear<A, W>(false, T, kn[0], kn[1], T % 2 == 1);
	test_linear<A, W>(false, 3, 72, 40, true, true);
	/* the emitted shapes with 2 and 4 columns per block, and forced shapes: a ragged last block, a
	** block wider than the row, threads that get no vector, 8 rows past one pass */
	test_linear<A, W>(false, 1, 1024, 1100, true);
	test_linear<A, W>(false, 2, 2048, 600, false);
	test_linear<A, W>(false, 5, 4096, 1059, true);
	test_linear<A, W>(false, 1, 520, 37, false, false, 4, 96);
	test_linear<A, W>(false, 9, 64, 50, true, false, 2, 256);
	test_linear<A, W>(false, 3, 4104, 21, false, false, 4, 32);
	test_linear<A, W>(false, 2, 70, 39, true, true, 4, 64);
	test_linear<A, W>(true, 67, 70, 33, true);
	test_linear<A, W>(true, 130, 100, 130, false);
	test_linear<A, W>(true, 1, 33, 65, true);
}

template <typename A, typename W> static void weight_suite()
{
	test_embedding<A, W>();
	linear_suite<A, W>();
	test_matmul<A, W>();
	test_binary<A, W, 0>();
	test_binary<A, W, 1>();
	test_binary<A, W, 2>();
	test_binary<A, W, 3>();
	test_rmsnorm<A, W, true>(3, 1000);
	test_rmsnorm<A, W, true>(2, 70);
	test_rmsnorm<A, W, true>(1, 6144); /* GLM-5's row before the LM head: registers */
	test_rmsnorm<A, W, true>(2, 8192); /* the last width held in registers */
	test_rmsnorm<A, W, true>(2, 8200); /* the walk */
	test_layernorm<A, W, true, true>(3, 1000);
	test_layernorm<A, W, true, false>(2, 70);
}

template <typename A> static void activation_suite()
{
	weight_suite<A, float>();
	weight_suite<A, bf16>();
	weight_suite<A, f16>();
	test_rmsnorm<A, float, false>(3, 1000);
	test_layernorm<A, float, false, false>(3, 1000);
	test_unary<A, 0>();
	test_unary<A, 1>();
	test_unary<A, 2>();
	test_unary<A, 3>();
	test_unary<A, 4>();
	test_swiglu<A>();
	test_softmax<A>(3, 1000);
	test_softmax<A>(2, 37);
	test_rope<A, false>(3, 2, 72, 64, ROPE_PLAIN, {0, 7, 1000}, false);
	test_rope<A, true>(3, 2, 72, 64, ROPE_PLAIN, {0, 7, 1000}, false);
	test_rope<A, false>(2, 3, 64, 64, ROPE_YARN, {3, 5000}, true);
	test_rope<A, true>(2, 3, 128, 64, ROPE_YARN, {3, 5000}, true);
	test_rope<A, false>(3, 2, 64, 64, ROPE_LLAMA3, {5, 70, 9000}, false);
	test_rope<A, true>(2, 2, 64, 32, ROPE_LINEAR, {3, 5000}, true);
	test_attention<A>(4, 1, 192, 128, 5, 3, 1.0f / sqrtf(192.0f));
	test_attention<A>(8, 2, 64, 64, 5, 3, 0.125f);
	test_attention<A>(2, 2, 256, 256, 5, 3, 0.0625f);
	test_attention<A>(6, 3, 72, 40, 5, 3, 0.11785113f);
	test_attention<A>(2, 1, 64, 32, 200, 3, 1.0f); /* long context, large scores: the running max moves */
	test_attention<A>(32, 8, 128, 128, 200, 2, 0.08838835f); /* Llama-3-8B's heads at a decode context */
	test_attention<A>(4, 2, 128, 128, 600, 2, 1.0f); /* k_attn_step over several rounds, the max moving */
	test_attention<A>(4, 1, 64, 64, 1100, 2, 1.0f);
	test_attention<A>(2, 1, 32, 32, 300, 2, 0.5f);
	if (std::is_same<A, bf16>::value) { /* the tensor-core prefill kernels: bf16 only */
		test_attn_tc<128>(32, 8, 300, 0, 0.08838835f); /* Llama-3-8B's heads, a prompt */
		test_attn_tc<128>(8, 2, 130, 1000, 0.08838835f); /* a chunk after 1000 cached rows */
		test_attn_tc<64>(4, 4, 65, 63, 0.125f);
		test_attn_tc<16>(4, 2, 9, 0, 1.0f); /* the first prefill step, large scores */
		test_attn_tc<128>(2, 1, 1000, 0, 1.0f); /* long, the running max moving */
		test_dsa_tc<128, 4, 4>(64, 576, 512, 3992, 8, 2048, 0.0625f); /* GLM-5: top-2048 of 4000 cached rows */
		test_dsa_tc<128, 4, 4>(64, 576, 512, 0, 130, 2048, 0.0625f);  /* a GLM-5 prompt: every row selected */
		test_dsa_tc<128, 4, 1>(8, 576, 512, 2040, 20, 2048, 0.0625f); /* tp 8's 8 heads, crossing 2048 rows */
		test_dsa_tc<64, 2, 4>(72, 144, 128, 60, 9, 32, 0.1f);   /* two head groups */
		test_dsa_tc<32, 1, 1>(4, 40, 32, 5, 20, 8, 0.2f);       /* the fixture's shape (top 8) */
		test_mla_split_tc<128, 4, 2>(20, 576, 512, 0, 64, 0.07f);     /* GLM-4.7-Flash's decode at 1 row */
		test_mla_split_tc<128, 4, 2>(20, 576, 512, 8191, 64, 0.07f);  /* and at 8K: 64 ranges of 128 */
		test_mla_split_tc<128, 4, 2>(64, 576, 512, 2100, 64, 0.07f);  /* GLM-5's 64 heads, two groups */
		test_mla_split_tc<32, 1, 1>(4, 40, 32, 70, 64, 0.2f);        /* the fixtures' shape, two ranges */
		test_mla_x<256, 256>(300, 2048, 20, 192, 64, 256, 512); /* GLM-4.7-Flash: a chunk after 2048 rows */
		test_mla_x<256, 256>(300, 700, 20, 192, 64, 256, 512, true); /* its GGUF: split W_UK */
		test_mla_x<192, 128>(130, 70, 16, 128, 64, 128, 512, true);
		test_mla_x<256, 128>(65, 0, 20, 192, 64, 256, 512);
		test_mla_x<192, 128>(130, 70, 16, 128, 64, 128, 512);   /* DeepSeek-V3 / GLM-5 at tp 8 */
		test_mla_x<32, 16>(63, 1, 4, 16, 8, 16, 32);            /* the fixtures' shape */
		test_gemm_tc<false>(300, 4096, 1024);
		test_gemm_tc<true>(9, 136, 200);
		test_gemm_tc<false>(513, 1000, 130);
		test_moe_tc(200, 1024, 768, 16, 4, false);  /* 800 slots over 16 experts: several tiles each */
		test_moe_tc(1000, 256, 136, 64, 8, false);  /* 8000 slots over 64 experts, about a tile each */
		test_moe_tc(64, 256, 64, 64, 2, false);     /* 128 slots, 64 experts on 2 grid rows: blocks walk tiles */
		test_moe_tc(2100, 64, 40, 16, 1, true);     /* expert 1: 14 row tiles; a block a tile */
		test_moe_tc(65, 72, 40, 8, 2, true);        /* C, F past the k step and the column tiles */
		test_moe_tc(1, 2048, 1536, 4, 4, false);    /* GLM-4.7-Flash's widths, one token */
	}
	test_argmax<A>(1000);
	test_argmax<A>(37);
	test_argmax<A>(5000);
	test_argmax<A>(5003);   /* row 0 in 16-byte vectors with a tail */
	test_argmax<A>(154880); /* GLM-5's vocabulary: the greedy sampler's row */
	test_topk<A>(1000, 1);
	test_topk<A>(1000, 5);
	test_topk<A>(1000, 64);
	test_topk<A>(37, 37);
	test_sample<A>();
	test_sample_split<A>();
}

int main(void)
{
	int dev;
	cudaDeviceProp prop;
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	printf("# device %d: %s (sm_%d%d)\n", dev, prop.name, prop.major, prop.minor);

	test_conversions<bf16>(ref_f32_to_bf16, ref_bf16_to_f32);
	test_conversions<f16>(ref_f32_to_f16, ref_f16_to_f32);
	activation_suite<float>();
	activation_suite<bf16>();
	test_copy_slab<float>();
	test_copy_slab<bf16>();
	test_permute<float>();
	test_permute<bf16>();
	mla_moe_suite<float>();
	mla_moe_suite<bf16>();
	mla_split_suite<float>();
	mla_split_suite<bf16>();
	attn_split_suite<float>();
	attn_split_suite<bf16>();
	tp_suite<float>();
	tp_suite<bf16>();
	test_gather_interleave<unsigned int>(3, 5, 4);
	test_gather_interleave<unsigned short>(7, 130, 2);
	test_gather_interleave<unsigned int>(1, 1000, 8);
	return finish();
}
