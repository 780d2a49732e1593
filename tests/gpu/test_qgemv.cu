/*
** tests/gpu/test_qgemv.cu — the kernels of ops/quant.cuh and ops/qfused.cuh on the GPU against the CPU
** references: GGUF blocks dequantized by ops/quant.c (bit-exact against ggml), then a float64 dot
** product. The fused kernels (k_qgemv_fused, k_qmoe_down_fused) are compared with the unfused chain they
** replace, every intermediate rounded to the activation type where the unfused kernels store it. Runs
** on the GPU machine only (`make gpu-bundle` builds build/gpu/test_qgemv; tests/gpu/run.sh runs it).
**
** Weights are random GGUF blocks made by the GPU generator (k_qrand), whose bytes must equal the CPU
** generator's (runtime/formats/weights.c weights_random_byte), and blocks written by the test-checkpoint
** quantizers (quant_q4_k etc.) from random floats, whose scales and minima look like real ones.
** Activations are fresh random values; every output is poisoned (0xFF bytes, NaN) before the launch.
** Tolerances (relative L2 error over all outputs): 1e-5 with float activations (the weights are exact
** in float; the GPU sums in float in another order), 2e-2 with bf16 activations; exact (bits) for
** dequantization, the embedding lookup and the generators. The denominator of the relative error is
** the larger of ‖want‖ and ‖s‖/sqrt(K), s_i = Σ_k |x_k·w_ik| (the expected size of a dot product of K
** random terms): with a handful of outputs (N = 1) one that cancels to near zero would otherwise turn
** float rounding into a large relative error (a plain sequential float dot of 256 random terms exceeds
** 1e-5 relative on 1-4% of single outputs).
**
** Prints "ok - NAME" or "FAIL - NAME: detail" per check and "N passed, N failed"; exits non-zero on any
** failure.
*/
#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"
#include "../../ops/quant.cuh"
#include "../../ops/qfused.cuh"
#include "../../ops/prefill.cuh"
#include "../../ops/moe_tc.cuh"

#include <cuda_runtime.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <vector>

#include "../tap.h"

#define _Noreturn __attribute__((noreturn)) /* glm.h is C11 */
extern "C" {
#include "glm.h"
#include "quant.h"
#include "ref.h"
#include "weights.h"
}

/* ---- CUDA errors (the checks: tests/tap.h) ---- */

static void cuda_check(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return;
	printf("FAIL - cuda: %s:%d: %s: %s\n", file, line, call, cudaGetErrorString(e));
	n_fail++;
	exit(finish());
}
#define CK(call) cuda_check((call), #call, __FILE__, __LINE__)
#define CK_LAUNCH()                          \
	do {                                 \
		CK(cudaGetLastError());      \
		CK(cudaDeviceSynchronize()); \
	} while (0)

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rand64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static std::vector<float> rnd(size_t n)
{
	std::vector<float> v(n);
	for (auto &x : v)
		x = (float)((rand64() >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
	return v;
}

static std::vector<void *> allocs;

template <typename T> static T *dalloc(size_t n, int fill)
{
	T *p;
	CK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
	allocs.push_back(p);
	CK(cudaMemset(p, fill, (n ? n : 1) * sizeof(T)));
	return p;
}

template <typename T> static T *upload(const std::vector<T> &h)
{
	T *p = dalloc<T>(h.size(), 0);
	if (!h.empty())
		CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
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
	f16 b;
	b.x = ref_f32_to_f16(v);
	return b;
}
template <typename T> static const char *tname();
template <> const char *tname<float>() { return "f32"; }
template <> const char *tname<bf16>() { return "bf16"; }
template <typename A> static double tol() { return sizeof(A) == 4 ? 1e-5 : 2e-2; }

/* ‖a−b‖ / max(‖b‖, ‖scale‖) (scale: ‖s‖/sqrt(K) per output, see the header; may be empty); NaN
** anywhere gives +inf. */
static double rel_l2(const std::vector<float> &a, const std::vector<double> &b, const std::vector<double> &scale = {})
{
	if (a.size() != b.size())
		return INFINITY;
	double num = 0, den = 0, sc = 0;
	for (size_t i = 0; i < a.size(); i++) {
		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		double d = a[i] - b[i];
		num += d * d;
		den += b[i] * b[i];
		sc += i < scale.size() ? scale[i] * scale[i] : 0;
	}
	den = den > sc ? den : sc;
	return den == 0 ? (num == 0 ? 0 : INFINITY) : sqrt(num / den);
}

template <typename A> static std::vector<float> widen(const std::vector<A> &v)
{
	std::vector<float> f(v.size());
	for (size_t i = 0; i < v.size(); i++)
		f[i] = h_to_f(v[i]);
	return f;
}

template <typename A> static std::vector<A> narrow(const std::vector<float> &v)
{
	std::vector<A> a(v.size());
	for (size_t i = 0; i < v.size(); i++)
		a[i] = h_from_f<A>(v[i]);
	return a;
}

static const char *qname(int qt) { return quant_type_name(qt); }

/* Values rounded through A and back: what an A tensor holding them contains. */
template <typename A> static float thru(float v) { return h_to_f(h_from_f<A>(v)); }

/* ---- wrappers, as glmc's emitter writes them ---- */

template <typename A, int QT, int WPR, int TM, bool HB, bool SW>
__global__ void __launch_bounds__(256) g_qgemv(A *y, const A *x, const A *u, const unsigned char *w, const A *b, int T,
                                               int K, int N)
{
	k_qgemv<A, QT, 2, WPR, TM, HB, SW>(y, x, u, w, b, T, K, N);
}

template <typename A, int QT, int WPR, bool HB, bool SW>
__global__ void __launch_bounds__(256, 2) g_qgemv_mma(A *y, const A *x, const A *u, const unsigned char *w, const A *b,
                                                      int T, int K, int N)
{
	k_qgemv_mma<A, QT, WPR, HB, SW>(y, x, u, w, b, T, K, N);
}

/* k_qgemv_sk over one member (bias, SwiGLU or none), its shared memory dynamic as glmrun gives it */
template <typename A, int QT, bool SW, int NWARP, int S>
__global__ void __launch_bounds__(NWARP * 32, 2) g_qgemv_sk(A *y, const A *x, const A *u, const unsigned char *w,
                                                          const A *b, int K, int N, float *part, int *cnt, int maxseg)
{
	extern __shared__ __align__(128) unsigned char sm[];
	k_qgemv_sk<A, QT, A, SW ? GEMV_PRO_SWIGLU : GEMV_PRO_NONE, 0, NWARP, S>(
	    y, nullptr, nullptr, nullptr, w, nullptr, nullptr, nullptr, b, nullptr, nullptr, nullptr, x, u, (const A *)nullptr,
	    nullptr, nullptr, 1, K, N, 0, 0, 0, 0.0f, 1.0f, 1.0f, 1.0f, 1.0f, part, cnt, maxseg, sm);
}

template <typename A, int QT, bool HB>
__global__ void __launch_bounds__(256) g_qgemm(A *y, const A *x, const unsigned char *w, const A *b, int T, int K, int N)
{
	k_qlinear_gemm<A, QT, HB>(y, x, w, b, T, K, N);
}

template <typename A, int QT>
__global__ void __launch_bounds__(256) g_qembedding(A *y, const unsigned char *w, const int *ids, int T, int C)
{
	k_qembedding<A, QT>(y, w, ids, T, C);
}

template <int QT>
__global__ void __launch_bounds__(256) g_qdequant(float *y, const unsigned char *w, long long n, int K)
{
	k_qdequant<float, QT>(y, w, n, K);
}

template <typename A, int QG, int QU>
__global__ void __launch_bounds__(256) g_qmoe_up(float *h, const A *x, const int *idx, const unsigned char *g,
                                                 const unsigned char *u, int C, int F, int k)
{
	k_qmoe_up<A, QG, QU>(h, x, idx, g, u, C, F, k);
}

template <typename A, int QT>
__global__ void __launch_bounds__(256, 2) g_qmoe_up_mma(float *h, const A *x, const int *idx, const unsigned char *g,
                                                        const unsigned char *u, int C, int F, int k)
{
	k_qmoe_up_mma<A, QT>(h, x, idx, g, u, C, F, k);
}

__global__ void __launch_bounds__(256) g_moe_group(int *meta, int *list, const int *idx, int n, int E)
{
	k_moe_group(meta, list, idx, n, E);
}

template <int QG, int QU>
__global__ void __launch_bounds__(256, 2) g_moe_up_tc(const int *meta, const int *list, bf16 *h, const bf16 *x,
                                                      const unsigned char *g, const unsigned char *u, int C, int F, int k,
                                                      int E)
{
	extern __shared__ __align__(128) unsigned char dsm[];
	k_moe_up_tc<unsigned char, QG, QU, 4>(meta, list, h, x, g, u, C, F, k, E, dsm);
}

template <int QD>
__global__ void __launch_bounds__(256, 2) g_moe_down_tc(const int *meta, const int *list, const bf16 *h, float *ys,
                                                        const unsigned char *d, int C, int F, int E)
{
	extern __shared__ __align__(128) unsigned char dsm[];
	k_moe_down_tc<unsigned char, QD, 3>(meta, list, h, ys, d, C, F, E, dsm);
}

__global__ void __launch_bounds__(256) g_moe_sum_tc(bf16 *y, const int *meta, const int *list, const bf16 *h,
                                                    const float *ys, const int *idx, const bf16 *w, int T, int C, int k,
                                                    int E)
{
	k_moe_sum_tc<bf16>(y, meta, list, h, ys, idx, w, T, C, k, E);
}

template <typename A, int QD>
__global__ void __launch_bounds__(256) g_qmoe_down(A *y, const float *h, const int *idx, const A *w,
                                                   const unsigned char *d, int C, int F, int k)
{
	k_qmoe_down<A, QD>(y, h, idx, w, d, C, F, k);
}

template <typename A, int Q0, int Q1, int Q2, int Q3, typename NW, int PRO, int EPI, int TM>
__global__ void __launch_bounds__(256)
	g_qgemv_fused(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1, const unsigned char *w2,
	              const unsigned char *w3, const A *b0, const A *b1, const A *b2, const A *b3, const A *x, const A *u,
	              const NW *nw, A *hs, const A *r, int T, int K, int N0, int N1, int N2, int N3, int P0, int P1, int P2,
	              int P3, int pro, int epi, float eps, float s0, float s1, float s2, float s3)
{
	k_qgemv_fused<A, Q0, Q1, Q2, Q3, NW, PRO, EPI, TM>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs, r, T,
	                                                   K, N0, N1, N2, N3, P0, P1, P2, P3, pro, epi, eps, s0, s1, s2, s3);
}

template <typename A, int QT, typename NW, int PRO, int EPI>
__global__ void __launch_bounds__(256, 2)
	g_qgemv_fused_mma(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1,
	                  const unsigned char *w2, const unsigned char *w3, const A *b0, const A *b1, const A *b2, const A *b3,
	                  const A *x, const A *u, const NW *nw, A *hs, const A *r, int T, int K, int N0, int N1, int N2,
	                  int N3, int P0, int P1, int P2, int P3, int pro, int epi, float eps, float s0, float s1, float s2,
	                  float s3)
{
	k_qgemv_fused_mma<A, QT, NW, PRO, EPI>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs, r, T, K, N0, N1, N2,
	                                   N3, P0, P1, P2, P3, pro, epi, eps, s0, s1, s2, s3);
}

template <typename A, int QD, int QS, bool SH, bool RES>
__global__ void __launch_bounds__(256)
	g_qmoe_down_fused(A *y, const float *hid, const int *idx, const A *w, const unsigned char *down, int C, int F, int k,
	                  const unsigned char *sdown, const A *g, const A *u, int Fs, const A *r)
{
	k_qmoe_down_fused<A, QD, QS, SH, RES>(y, hid, idx, w, down, C, F, k, sdown, g, u, Fs, r);
}

template <typename A, int QD, int QS, bool SH, bool RES>
__global__ void __launch_bounds__(256, 2)
	g_qmoe_down_mma(A *y, const float *hid, float *part, int *cnt, const int *idx, const A *w, const unsigned char *down,
	                int C, int F, int k, int G, const unsigned char *sdown, const A *g, const A *u, int Fs, const A *r)
{
	k_qmoe_down_mma<A, QD, QS, SH, RES>(y, hid, part, cnt, idx, w, down, C, F, k, G, sdown, g, u, Fs, r);
}

template <int QT>
__global__ void __launch_bounds__(256) g_qrand(unsigned char *d, long long rows, int bpr, long long st,
                                               unsigned long long seed, long long K, long long part, long long inner,
                                               int tp, int rank, int cp, int cr)
{
	k_qrand<QT>(d, rows, bpr, st, seed, K, part, inner, tp, rank, cp, cr);
}

template <typename W>
__global__ void __launch_bounds__(256) g_rand(W *d, long long n, unsigned long long seed, int cols, int vec,
                                              long long part, long long inner, int tp, int rank)
{
	k_rand_float<W>(d, n, seed, cols, vec, part, inner, tp, rank);
}

static unsigned blocks(long long n, int per) { return (unsigned)((n + per - 1) / per); }

template <typename NW, int PRO, bool HAS_NW, int EPI, int MT, int UC>
__global__ void __launch_bounds__(256) g_gemv_tc(bf16 *y0, bf16 *y1, bf16 *y2, bf16 *y3, const bf16 *w0, const bf16 *w1,
                                                 const bf16 *w2, const bf16 *w3, const bf16 *b0, const bf16 *b1,
                                                 const bf16 *b2, const bf16 *b3, const bf16 *x, const NW *nw,
                                                 const bf16 *r, int T, int K, int N0, int N1, int N2, int N3)
{
	k_gemv_tc<bf16, bf16, NW, PRO, HAS_NW, EPI, MT, 1, UC>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, nullptr, nw,
	                                                       nullptr, r, T, K, N0, N1, N2, N3, 1e-5f, 1, 1, 1, 1);
}

/* k_gemv_tc (the bf16 GEMV groups of 2..8-token steps on the tensor cores) at the launch glmc emits
** (gemv_shape_tc) over members N of K columns, bf16 data, outputs poisoned, against the same sums in
** double: with the late norm inv·Σ w·bf16(x·nw) (the kernel's own rounding of its input; NW f32 or bf16),
** bias, the residual in place, the GLU's silu(bf16 gate)·bf16 up, each result rounded to bf16 as the
** kernel stores it. rel-L2 2e-3: float sums in another order may round to the neighbouring bf16; a lost
** fragment, token or chunk is off by O(1). Then against the unfused nodes' own rounding (the norm
** rounded after the scale) at the bf16 tolerance. */
template <typename NW, int PRO, int EPI> static void test_gemv_tc(int T, int K, std::vector<int> Nv, bool bias)
{
	constexpr bool GLU = (EPI & GEMV_EPI_GLU) != 0, LATE = PRO == GEMV_PRO_RMSLATE;
	int M = (int)Nv.size(), N[4] = {0, 0, 0, 0};
	long long Ntot = 0;
	for (int m = 0; m < M; m++)
		N[m] = Nv[m], Ntot += Nv[m];
	auto bv = [](size_t n, float sc, float off) {
		std::vector<float> f = rnd(n);
		std::vector<bf16> v(n);
		for (size_t i = 0; i < n; i++)
			v[i] = h_from_f<bf16>(off + sc * f[i]);
		return v;
	};
	std::vector<bf16> x = bv((size_t)T * K, 2, 0);
	std::vector<float> nwf = rnd(K);
	std::vector<NW> nw(K);
	for (int k = 0; k < K; k++)
		nw[k] = h_from_f<NW>(1.0f + 0.5f * nwf[k]);
	std::vector<double> h((size_t)T * K), hu((size_t)T * K), inv(T, 1.0);
	for (int t = 0; t < T; t++) {
		double q = 0;
		for (int k = 0; k < K; k++)
			q += (double)h_to_f(x[(size_t)t * K + k]) * h_to_f(x[(size_t)t * K + k]);
		inv[t] = LATE ? 1.0 / sqrt(q / K + 1e-5) : 1.0;
		for (int k = 0; k < K; k++) {
			float v = h_to_f(x[(size_t)t * K + k]), g = h_to_f(nw[k]);
			h[(size_t)t * K + k] = LATE ? thru<bf16>(v * g) : v;
			hu[(size_t)t * K + k] = LATE ? thru<bf16>((float)(v * inv[t]) * g) : v; /* the unfused nodes' */
		}
	}
	std::vector<std::vector<bf16>> w(4), b(4);
	std::vector<std::vector<double>> want(4), wantu(4);
	std::vector<bf16> r;
	bf16 *dy[4] = {}, *dw[4] = {}, *db[4] = {}, *dr = nullptr;
	for (int m = 0; m < M; m++) {
		w[m] = bv((size_t)N[m] * K, 1, 0);
		b[m] = bv(N[m], 1, 0);
		want[m].resize((size_t)T * N[m]);
		wantu[m].resize((size_t)T * N[m]);
		for (int t = 0; t < T; t++)
			for (int n = 0; n < N[m]; n++) {
				double s = 0, su = 0;
				const bf16 *wr = &w[m][(size_t)n * K];
				for (int k = 0; k < K; k++) {
					double wv = h_to_f(wr[k]);
					s += wv * h[(size_t)t * K + k];
					su += wv * hu[(size_t)t * K + k];
				}
				s *= inv[t];
				if (bias)
					s += h_to_f(b[m][n]), su += h_to_f(b[m][n]);
				want[m][(size_t)t * N[m] + n] = thru<bf16>((float)s);
				wantu[m][(size_t)t * N[m] + n] = thru<bf16>((float)su);
			}
		dy[m] = dalloc<bf16>((size_t)T * N[m], 0xff); /* NaN */
		if (m == 0 && (EPI & GEMV_EPI_RES)) {
			r = bv(want[0].size(), 1, 0);
			for (size_t i = 0; i < r.size(); i++) {
				want[0][i] = thru<bf16>(h_to_f(r[i]) + (float)want[0][i]);
				wantu[0][i] = thru<bf16>(h_to_f(r[i]) + (float)wantu[0][i]);
			}
			dr = dy[0] = upload(r); /* in place, as the plans run it */
		}
		dw[m] = upload(w[m]);
		db[m] = bias ? upload(b[m]) : nullptr;
	}
	int MC = M;
	if (GLU) {
		for (auto *v : {&want, &wantu})
			for (size_t i = 0; i < (*v)[0].size(); i++) {
				double gv = (*v)[0][i], uv = (*v)[1][i];
				(*v)[0][i] = thru<bf16>((float)(gv / (1 + exp(-gv)) * uv));
			}
		dy[1] = nullptr;
		MC = 1;
	}
	int mt, uc, bt;
	long long grid;
	gemv_shape_tc(Ntot, K, GEMV_SMS_SM90, &mt, &uc, &bt, &grid);
	auto kern = mt == 2 ? g_gemv_tc<NW, PRO, PRO != GEMV_PRO_NONE, EPI, 2, 2> : g_gemv_tc<NW, PRO, PRO != GEMV_PRO_NONE, EPI, 1, 4>;
	kern<<<(unsigned)grid, bt>>>(dy[0], dy[1], dy[2], dy[3], dw[0], dw[1], dw[2], dw[3], db[0], db[1], db[2], db[3],
	                             upload(x), LATE ? upload(nw) : nullptr, dr, T, K, N[0], N[1], N[2], N[3]);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	std::string nm = fmt("gemv_tc T=%d K=%d N=%d+%d+%d+%d %s%s%s%s mt=%d uc=%d block=%d grid=%lld", T, K, N[0], N[1],
	                     N[2], N[3], LATE ? "late-norm" : "plain", sizeof(NW) == 4 && LATE ? "(f32 weight)" : "",
	                     (EPI & GEMV_EPI_RES) ? " residual" : GLU ? " glu" : "", bias ? " bias" : "", mt, uc, bt, grid);
	for (int m = 0; m < MC; m++) {
		std::vector<float> got = widen(download(dy[m], want[m].size()));
		double e = rel_l2(got, want[m]), eu = rel_l2(got, wantu[m]);
		check(e <= 2e-3, nm + fmt(" member %d", m), fmt("rel-L2 %.3g > 2e-3 against its own rounding", e));
		check(eu <= tol<bf16>(), nm + fmt(" member %d, unfused rounding", m), fmt("rel-L2 %.3g", eu));
	}
	free_all();
}

/* The shapes: Llama-3-8B's q/k/v (a late norm over three members), o and down (the residual, K 14336),
** gate/up (the GLU, two tiles a block), an LM-head-like 20000 rows; then members not whole tiles, K of
** 96 (warps with a chunk past K), a bf16 norm weight and biases; tokens 2..8. */
static void gemv_tc_suite()
{
	const int L = GEMV_PRO_RMSLATE, P = GEMV_PRO_NONE;
	for (int T : {2, 5, 8}) {
		test_gemv_tc<float, L, 0>(T, 4096, {4096, 1024, 1024}, false);
		test_gemv_tc<float, P, GEMV_EPI_RES>(T, 4096, {4096}, false);
		test_gemv_tc<float, L, GEMV_EPI_GLU>(T, 4096, {14336, 14336}, false);
		test_gemv_tc<float, P, GEMV_EPI_RES>(T, 14336, {4096}, false);
		test_gemv_tc<float, L, 0>(T, 4096, {20000}, false);
	}
	for (int T : {2, 3, 4, 6, 7}) {
		test_gemv_tc<bf16, L, 0>(T, 256, {40, 24, 24, 8}, true);
		test_gemv_tc<float, P, 0>(T, 96, {70}, true);
		test_gemv_tc<bf16, L, GEMV_EPI_GLU>(T, 512, {37, 37}, true);
		test_gemv_tc<float, P, GEMV_EPI_RES>(T, 1024, {9000}, true);
	}
}

/* A row of K values' GGUF bytes at src as the GPU keeps it (ops/quant.c quant_dev_spread). */
static std::vector<unsigned char> dev_row(int qt, const unsigned char *src, long long K)
{
	std::vector<unsigned char> r(quant_dev_row_bytes(qt, K), 0);
	memcpy(r.data(), src, quant_row_bytes(qt, K));
	quant_dev_spread(qt, r.data(), K);
	return r;
}

/* ---- quantized weights on both sides ---- */

/* A [rows, K] weight: its blocks at the device stride on the GPU and dequantized on the host. */
struct QW {
	int qt;
	long long rows, K, stride;
	unsigned char *dev;
	std::vector<float> f; /* dequantized, rows × K */
};

/* Random blocks by the GPU generator, checked byte for byte against the CPU generator. */
template <int QT> static QW qw_random(long long rows, long long K, const char *name)
{
	QW w;
	w.qt = QT, w.rows = rows, w.K = K, w.stride = (long long)quant_dev_row_bytes(QT, K);
	size_t rb = quant_row_bytes(QT, K);
	unsigned long long seed = weights_random_seed(name);
	w.dev = dalloc<unsigned char>((size_t)(rows * w.stride), 0xff);
	g_qrand<QT><<<blocks(rows * w.stride, 256), 256>>>(w.dev, rows, (int)(K / QGeo<QT>::BLCK), w.stride, seed, K, rows,
	                                                   1, 1, 0, 1, 0);
	CK_LAUNCH();
	std::vector<unsigned char> got = download(w.dev, (size_t)(rows * w.stride)), row(rb);
	w.f.resize((size_t)(rows * K));
	size_t bad = 0, first = 0;
	for (long long r = 0; r < rows; r++) {
		for (size_t b = 0; b < rb; b++)
			row[b] = weights_random_byte(QT, seed, K, (uint64_t)r * rb + b);
		std::vector<unsigned char> dr = dev_row(QT, row.data(), K); /* the blocks in their slots, zero padding */
		for (long long b = 0; b < w.stride; b++)
			if (got[(size_t)(r * w.stride + b)] != dr[(size_t)b] && !bad++)
				first = (size_t)(r * w.stride + b);
		quant_dequant(QT, row.data(), &w.f[(size_t)(r * K)], (size_t)K);
	}
	check(!bad, fmt("random %s blocks [%lld, %lld]: GPU bytes equal the CPU generator's", qname(QT), rows, K),
	      fmt("%zu bytes differ, first at %zu", bad, first));
	return w;
}

/* Blocks from the test-checkpoint quantizer of fresh random floats (uploaded at the device stride). */
static QW qw_quantized(int qt, long long rows, long long K)
{
	QW w;
	w.qt = qt, w.rows = rows, w.K = K, w.stride = (long long)quant_dev_row_bytes(qt, K);
	size_t rb = quant_row_bytes(qt, K);
	std::vector<float> x = rnd((size_t)(rows * K));
	for (long long r = 0; r < rows; r += 3) /* rows at other scales and one-signed rows */
		for (long long k = 0; k < K; k++)
			x[(size_t)(r * K + k)] = r % 2 ? fabsf(x[(size_t)(r * K + k)]) * 30 : x[(size_t)(r * K + k)] * 1e-3f;
	std::vector<unsigned char> q((size_t)rows * rb), pad((size_t)(rows * w.stride), 0);
	size_t n = qt == QT_Q8_0 ? quant_q8_0(x.data(), q.data(), x.size())
	           : qt == QT_Q4_K ? quant_q4_k(x.data(), q.data(), x.size())
	           : qt == QT_Q5_K ? quant_q5_k(x.data(), q.data(), x.size())
	                           : quant_q6_k(x.data(), q.data(), x.size());
	if (n != q.size())
		check(false, fmt("quantize %s", qname(qt)), "size");
	for (long long r = 0; r < rows; r++) {
		memcpy(&pad[(size_t)(r * w.stride)], &q[(size_t)r * rb], rb);
		quant_dev_spread(qt, &pad[(size_t)(r * w.stride)], K);
	}
	w.dev = upload(pad);
	w.f.resize(x.size());
	quant_dequant(qt, q.data(), w.f.data(), x.size());
	return w;
}

static QW qw_make(int qt, long long rows, long long K, bool random, const char *name)
{
	if (!random)
		return qw_quantized(qt, rows, K);
	switch (qt) {
	case 8: return qw_random<8>(rows, K, name);
	case 12: return qw_random<12>(rows, K, name);
	case 13: return qw_random<13>(rows, K, name);
	default: return qw_random<14>(rows, K, name);
	}
}

/* ---- GEMV ---- */

template <typename A, int QT, int WPR, int TM, bool HB, bool SW>
static void launch_qgemv(A *y, const A *x, const A *u, const unsigned char *w, const A *b, int T, int K, int N, int grid)
{
	const int RPB = 8 / WPR * 2;
	g_qgemv<A, QT, WPR, TM, HB, SW><<<grid ? grid : blocks(N, RPB), 256>>>(y, x, u, w, b, T, K, N);
}

/* y = x·wᵀ (+ bias), or swiglu(g, u)·wᵀ, by launch(y, x, u, w, bias) against float64 on the CPU. */
template <typename A, int QT, bool HB, bool SW, typename L>
static void qgemv_case(const std::string &name, L launch, int T, int K, int N, bool random, double tl)
{
	if (tl == 0)
		tl = tol<A>();
	QW w = qw_make(QT, N, K, random, "blk.0.ffn_down.weight");
	std::vector<A> x = narrow<A>(rnd((size_t)T * K)), u = narrow<A>(rnd((size_t)T * K)), b = narrow<A>(rnd(N));
	std::vector<float> xf = widen(x), uf = widen(u), bf = widen(b);
	if (SW) /* the input the kernel forms while staging: silu(g)·u rounded to A */
		for (size_t i = 0; i < xf.size(); i++)
			xf[i] = h_to_f(h_from_f<A>(xf[i] / (1.0f + expf(-xf[i])) * uf[i]));
	std::vector<double> want((size_t)T * N), scale((size_t)T * N);
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = HB ? bf[n] : 0, a = 0;
			for (int k = 0; k < K; k++) {
				s += (double)xf[(size_t)t * K + k] * w.f[(size_t)n * K + k];
				a += fabs((double)xf[(size_t)t * K + k] * w.f[(size_t)n * K + k]);
			}
			want[(size_t)t * N + n] = s;
			scale[(size_t)t * N + n] = a / sqrt((double)K);
		}
	A *dy = dalloc<A>((size_t)T * N, 0xff);
	launch(dy, upload(x), SW ? upload(u) : nullptr, w.dev, HB ? upload(b) : nullptr);
	CK_LAUNCH();
	double e = rel_l2(widen(download(dy, (size_t)T * N)), want, scale);
	check(e <= tl, name + fmt(" (%s blocks)", random ? "random" : "quantizer"), fmt("rel-L2 %.3g > %.3g", e, tl));
	free_all();
}

/* k_qgemv with (WPR, TM). */
template <typename A, int QT, int WPR, int TM, bool HB, bool SW>
static void test_qgemv(int T, int K, int N, bool random, double tl = 0, int grid = 0)
{
	qgemv_case<A, QT, HB, SW>(
	    fmt("qgemv %s A=%s T=%d K=%d N=%d WPR=%d TM=%d%s%s%s", qname(QT), tname<A>(), T, K, N, WPR, TM, HB ? " bias" : "",
	        SW ? " swiglu" : "", grid ? fmt(" grid %d", grid).c_str() : ""),
	    [&](A *y, const A *x, const A *u, const unsigned char *w, const A *b) {
		    launch_qgemv<A, QT, WPR, TM, HB, SW>(y, x, u, w, b, T, K, N, grid);
	    },
	    T, K, N, random, tl);
}

/* k_qgemv_mma (Q4_K or Q6_K on the tensor cores) with WPR (grid ceil(N / (128/WPR))
** unless given). */
template <typename A, int QT, int WPR, bool HB, bool SW>
static void test_qgemv_mma(int T, int K, int N, bool random, double tl = 0, int grid = 0)
{
	qgemv_case<A, QT, HB, SW>(
	    fmt("qgemv_mma %s A=%s T=%d K=%d N=%d WPR=%d%s%s%s", qname(QT), tname<A>(), T, K, N, WPR, HB ? " bias" : "",
	        SW ? " swiglu" : "", grid ? fmt(" grid %d", grid).c_str() : ""),
	    [&](A *y, const A *x, const A *u, const unsigned char *w, const A *b) {
		    g_qgemv_mma<A, QT, WPR, HB, SW><<<grid ? grid : blocks(N, 128 / WPR), 256>>>(y, x, u, w, b, T, K, N);
	    },
	    T, K, N, random, tl);
}

/* k_qgemv_sk (one token, the weights as one stream through cp.async rings) at glmc's shape (QSK_NWARP
** warps, QSK_SLOTS slots, the one-wave grid of qsk_grid at the blocks an SM qsk_bps gives), launched twice:
** the second launch must find the counts left zero by the first (its result is checked). */
template <typename A, int QT, bool HB, bool SW>
static void test_qgemv_sk(int K, int N, bool random)
{
	long long smem = qsk_smem(QT, K, QSK_NWARP, QSK_SLOTS), grid;
	int maxseg;
	qsk_grid((N + 15) / 16, K, QSK_NWARP, GEMV_SMS_SM90 * (long long)qsk_bps(smem, GEMV_SMEM_SM_SM90), &grid, &maxseg);
	auto kern = g_qgemv_sk<A, QT, SW, QSK_NWARP, QSK_SLOTS>;
	CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
	for (int run = 0; run < 2; run++)
		qgemv_case<A, QT, HB, SW>(
		    fmt("qgemv_sk %s A=%s K=%d N=%d grid %lld maxseg %d%s%s launch %d", qname(QT), tname<A>(), K, N, grid, maxseg,
		        HB ? " bias" : "", SW ? " swiglu" : "", run + 1),
		    [&](A *y, const A *x, const A *u, const unsigned char *w, const A *b) {
			    static float *part;
			    static int *cnt;
			    if (!part) { /* kept across the cases: the counts must stay zero between launches */
				    CK(cudaMalloc(&part, 64u << 20));
				    CK(cudaMalloc(&cnt, 1u << 20));
				    CK(cudaMemset(cnt, 0, 1u << 20));
			    }
			    kern<<<(unsigned)grid, 32 * QSK_NWARP, (size_t)smem>>>(y, x, u, w, b, K, N, part, cnt, maxseg);
		    },
		    1, K, N, random, 0);
}

/* The tensor-core path at every split: K of one block, not a multiple of 1024, two chunks; N = 1, odd,
** partial row groups; bias, SwiGLU, blocks looping over row groups; f32 at 1e-5, bf16 at 4e-3. */
template <int QT> static void qgemv_mma_suite(void)
{
	for (int K : {256, 1280, 4096, 4608, 14336})
		for (int N : {1, 37, 64, 300}) {
			bool rnd_w = (K / 256 + N) % 2 == 0;
			test_qgemv_mma<float, QT, 1, false, false>(1, K, N, rnd_w);
			test_qgemv_mma<float, QT, 2, true, false>(1, K, N, !rnd_w);
			test_qgemv_mma<float, QT, 4, false, true>(1, K, N, rnd_w);
			test_qgemv_mma<float, QT, 8, false, false>(1, K, N, !rnd_w);
			test_qgemv_mma<bf16, QT, 1, false, false>(1, K, N, rnd_w, 4e-3);
			test_qgemv_mma<bf16, QT, 8, true, true>(1, K, N, !rnd_w, 4e-3);
		}
	test_qgemv_mma<bf16, QT, 1, true, false>(1, 4096, 3000, true, 4e-3, 7);
	test_qgemv_mma<bf16, QT, 4, false, true>(1, 2048, 1333, false, 4e-3, 5);
	test_qgemv_mma<float, QT, 2, false, false>(1, 14336, 900, true, 0, 3);
	test_qgemv_mma<float, QT, 8, true, true>(3, 1024, 100, true);
	test_qgemv_mma<float, QT, 1, false, false>(1, 6144, 154880 / 64, true);
}

/* Q8_0 on the tensor cores, x as three digits of a fixed-point value scaled to the chunk's largest |x|:
** inputs spanning 2^-60 .. 2^60 within one row (each value a random sign times 2^e), one large value
** among small ones (the small ones then carry fewer digits), and a NaN or an inf in x (every output NaN,
** as a float dot gives, instead of a saturated integer). */
static void test_q8_mma_range(void)
{
	const int K = 2048, N = 40;
	for (int form = 0; form < 3; form++) {
		QW w = qw_make(QT_Q8_0, N, K, true, "blk.0.ffn_down.weight");
		std::vector<float> xf = rnd(K);
		for (int k = 0; k < K; k++) {
			if (form == 0) /* 2^-60 .. 2^60 */
				xf[k] = (xf[k] < 0 ? -1.0f : 1.0f) * ldexpf(1.0f, (int)((k * 7919u) % 121u) - 60);
			else if (form == 1 && k == 777)
				xf[k] = 3.0e4f;
		}
		std::vector<double> want(N), scale(N);
		for (int n = 0; n < N; n++) {
			double sm = 0, a = 0;
			for (int k = 0; k < K; k++)
				sm += (double)xf[k] * w.f[(size_t)n * K + k], a += fabs((double)xf[k] * w.f[(size_t)n * K + k]);
			want[n] = sm, scale[n] = a / sqrt((double)K);
		}
		if (form == 2)
			xf[100] = NAN, xf[1500] = INFINITY;
		float *dy = dalloc<float>(N, 0xff);
		g_qgemv_mma<float, 8, 1, false, false><<<1, 256>>>(dy, upload(xf), nullptr, w.dev, nullptr, 1, K, N);
		CK_LAUNCH();
		std::vector<float> y = download(dy, N);
		if (form < 2) {
			double e = rel_l2(y, want, scale);
			check(e <= 1e-5, form ? "qgemv_mma Q8_0: one value 3e4 among values of about 1" : "qgemv_mma Q8_0: x over 2^-60 .. 2^60",
			      fmt("rel-L2 %.3g > 1e-5", e));
		} else {
			int nan = 0;
			for (int n = 0; n < N; n++)
				nan += y[n] != y[n];
			check(nan == N, "qgemv_mma Q8_0: a NaN and an inf in x give NaN rows", fmt("%d of %d rows NaN", nan, N));
		}
		free_all();
	}
}

/* Every T and shape for one type: K not a multiple of 1024, N = 1, odd N, rows that split K in-block. */
template <int QT> static void qgemv_suite(void)
{
	const int B = QGeo<QT>::BLCK;
	int Ks[] = {B == 32 ? 96 : 256, 5 * B * (B == 32 ? 9 : 1), 4096, 4608};
	int Ns[] = {1, 37, 64};
	for (int T : {1, 2, 5, 8, 17})
		for (int K : Ks)
			for (int N : Ns) {
				bool rnd_w = (K + N + T) % 2 == 0;
				if (T == 1) {
					test_qgemv<float, QT, 1, 1, false, false>(T, K, N, rnd_w);
					test_qgemv<float, QT, 4, 1, false, false>(T, K, N, !rnd_w);
				}
				test_qgemv<float, QT, 1, 8, false, false>(T, K, N, rnd_w);
				test_qgemv<float, QT, 2, 8, false, false>(T, K, N, !rnd_w);
			}
	test_qgemv<float, QT, 8, 1, false, false>(1, 4096, 300, true);
	test_qgemv<float, QT, 2, 1, true, false>(1, 2048, 77, false);
	test_qgemv<float, QT, 1, 8, true, false>(5, 1280 / B * B, 33, true);
	test_qgemv<float, QT, 1, 1, false, true>(1, 4096, 40, true);
	test_qgemv<float, QT, 2, 8, false, true>(6, 2560, 24, false);
	test_qgemv<bf16, QT, 2, 1, false, false>(1, 4096, 70, true);
	test_qgemv<bf16, QT, 1, 8, false, true>(8, 3072, 50, false);
	test_qgemv<float, QT, 2, 1, false, false>(1, 14336, 128, true); /* two x chunks at T = 1 (K > 8192) */
	/* bf16 at T = 1, the decode step: every split, K of one
	** block, not a multiple of 512 or 1024, two chunks; held to 4e-3, twice the bf16 rounding of the
	** outputs (2^-9), so a wrong scale group shows even where 2e-2 would pass */
	for (int K : {B == 32 ? 96 : 256, 5 * B * (B == 32 ? 9 : 1), 4096, 4608, 14336})
		for (int N : {1, 37, 64}) {
			bool rnd_w = (K + N) % 2 == 0;
			test_qgemv<bf16, QT, 1, 1, false, false>(1, K, N, rnd_w, 4e-3);
			test_qgemv<bf16, QT, 4, 1, false, false>(1, K, N, !rnd_w, 4e-3);
			test_qgemv<bf16, QT, 8, 1, true, false>(1, K, N, rnd_w, 4e-3);
		}
	test_qgemv<bf16, QT, 2, 1, false, true>(1, 6144, 90, true, 4e-3);
	test_qgemv<bf16, QT, 1, 1, false, true>(1, 2048, 33, false, 4e-3);
	/* blocks looping over row groups, as glmc caps the grid (x staged once a block; two chunks) */
	test_qgemv<bf16, QT, 1, 1, true, false>(1, 4096, 1000, true, 4e-3, 7);
	test_qgemv<bf16, QT, 4, 1, false, true>(1, 2048, 333, false, 4e-3, 5);
	test_qgemv<float, QT, 2, 1, false, false>(1, 14336, 90, true, 0, 3);
}

/* ---- prefill GEMM, embedding, dequantization ---- */

template <typename A, int QT, bool HB> static void test_qgemm(int T, int K, int N)
{
	QW w = qw_make(QT, N, K, T % 2 == 0, "output.weight");
	std::vector<A> x = narrow<A>(rnd((size_t)T * K)), b = narrow<A>(rnd(N));
	std::vector<float> xf = widen(x), bf = widen(b);
	std::vector<double> want((size_t)T * N);
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = HB ? bf[n] : 0;
			for (int k = 0; k < K; k++)
				s += (double)xf[(size_t)t * K + k] * w.f[(size_t)n * K + k];
			want[(size_t)t * N + n] = s;
		}
	A *dy = dalloc<A>((size_t)T * N, 0xff);
	g_qgemm<A, QT, HB><<<dim3(blocks(N, 64), blocks(T, 64)), 256>>>(dy, upload(x), w.dev, HB ? upload(b) : nullptr, T, K,
	                                                                 N);
	CK_LAUNCH();
	double e = rel_l2(widen(download(dy, (size_t)T * N)), want);
	check(e <= tol<A>(), fmt("qlinear_gemm %s A=%s T=%d K=%d N=%d%s", qname(QT), tname<A>(), T, K, N, HB ? " bias" : ""),
	      fmt("rel-L2 %.3g", e));
	free_all();
}

/* Looked-up rows and the whole-weight dequantization, bit for bit against ops/quant.c. */
template <int QT> static void test_exact(void)
{
	long long V = 50, C = 4608;
	QW w = qw_make(QT, V, C, true, "token_embd.weight");
	std::vector<int> ids = {7, 0, 49, 7, 23};
	int T = (int)ids.size();
	float *dy = dalloc<float>((size_t)T * C, 0xff);
	g_qembedding<float, QT><<<dim3(blocks(C, 256), T), 256>>>(dy, w.dev, upload(ids), T, (int)C);
	CK_LAUNCH();
	std::vector<float> got = download(dy, (size_t)T * C);
	size_t bad = 0;
	for (int t = 0; t < T; t++)
		bad += memcmp(&got[(size_t)t * C], &w.f[(size_t)(ids[t] * C)], sizeof(float) * (size_t)C) != 0;
	check(!bad, fmt("qembedding %s: rows bit-exact against the CPU dequantization", qname(QT)), fmt("%zu rows differ", bad));
	QW w2 = qw_make(QT, 21, QT == 8 ? 800 : 1280, false, "");
	long long n = w2.rows * w2.K;
	float *dq = dalloc<float>((size_t)n, 0xff);
	g_qdequant<QT><<<blocks(n, 256), 256>>>(dq, w2.dev, n, (int)w2.K);
	CK_LAUNCH();
	check(!memcmp(download(dq, (size_t)n).data(), w2.f.data(), sizeof(float) * (size_t)n),
	      fmt("qdequant %s [21, %lld] bit-exact against ops/quant.c", qname(QT), w2.K), "differs");
	free_all();
}

/* ---- routed experts ---- */

/* k_qmoe_up then k_qmoe_down against ref_moe_ffn's definition in float64: E experts of [F, C] gate/up
** and [C, F] down, k per token, one slot skipped (-1). */
/* TC: ops/moe_tc.cuh's grouped GEMM (bf16 activations; the weights dequantized to bf16 tiles) instead of the
** per-token kernels, against the same exact-weight reference and bf16 tolerance. */
template <typename A, int QG, int QU, int QD, bool MMA = false, bool TC = false>
static void test_qmoe(int T, int C, int F, int E, int k)
{
	QW g = qw_make(QG, (long long)E * F, C, true, "blk.1.ffn_gate_exps.weight");
	QW u = qw_make(QU, (long long)E * F, C, false, "");
	QW d = qw_make(QD, (long long)E * C, F, true, "blk.1.ffn_down_exps.weight");
	std::vector<A> x = narrow<A>(rnd((size_t)T * C)), wt = narrow<A>(rnd((size_t)T * k));
	std::vector<float> xf = widen(x), wf = widen(wt);
	std::vector<int> idx((size_t)T * k);
	for (auto &i : idx)
		i = (int)(rand64() % (uint64_t)E);
	idx[1] = -1;
	std::vector<double> want((size_t)T * C, 0.0);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++) {
			int e = idx[(size_t)t * k + j];
			if (e < 0)
				continue;
			std::vector<double> h(F);
			for (int f = 0; f < F; f++) {
				double a = 0, b = 0;
				for (int c = 0; c < C; c++) {
					a += (double)xf[(size_t)t * C + c] * g.f[((size_t)e * F + f) * C + c];
					b += (double)xf[(size_t)t * C + c] * u.f[((size_t)e * F + f) * C + c];
				}
				h[f] = a / (1 + exp(-a)) * b;
			}
			for (int c = 0; c < C; c++) {
				double s = 0;
				for (int f = 0; f < F; f++)
					s += h[f] * d.f[((size_t)e * C + c) * F + f];
				want[(size_t)t * C + c] += wf[(size_t)t * k + j] * s;
			}
		}
	float *hid = dalloc<float>((size_t)T * k * F, 0xff);
	A *dy = dalloc<A>((size_t)T * C, 0xff);
	int *didx = upload(idx);
	static_assert(!MMA || ((QG == 12 || QG == 8) && QU == QG), "the mma up kernel reads Q4_K or Q8_0");
	if constexpr (TC) {
		static_assert(sizeof(A) == 2, "the grouped GEMM is bf16");
		int n = T * k, rows = (n + MOE_TC_BM - 1) / MOE_TC_BM, *meta = dalloc<int>(2 * E + 2, 0xff),
		    *list = dalloc<int>(n, 0xff);
		float *ys = dalloc<float>((size_t)n * C, 0xff);
		bf16 *hb = dalloc<bf16>((size_t)n * F, 0xff);
		const bf16 *dx = upload(x);
		g_moe_group<<<E, 256>>>(meta, list, didx, n, E);
		CK_LAUNCH();
		CK(cudaFuncSetAttribute(g_moe_up_tc<QG, QU>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_TC_UP_SMEM(4)));
		g_moe_up_tc<QG, QU><<<dim3(blocks(F, 64), rows, 2), 256, MOE_TC_UP_SMEM(4)>>>(meta, list, hb, dx, g.dev, u.dev, C,
		                                                                              F, k, E);
		CK_LAUNCH();
		CK(cudaFuncSetAttribute(g_moe_down_tc<QD>, cudaFuncAttributeMaxDynamicSharedMemorySize, MOE_TC_DOWN_SMEM(3)));
		g_moe_down_tc<QD><<<dim3(blocks(C, 128), rows, 2), 256, MOE_TC_DOWN_SMEM(3)>>>(meta, list, hb, ys, d.dev, C, F,
		                                                                               E);
		CK_LAUNCH();
		g_moe_sum_tc<<<blocks((long long)T * C, 1024), 256>>>(dy, meta, list, hb, ys, didx, upload(wt), T, C, k, E);
		CK_LAUNCH();
		double e = rel_l2(widen(download(dy, (size_t)T * C)), want);
		check(e <= tol<A>(), fmt("moe grouped GEMM gate %s up %s down %s T=%d C=%d F=%d E=%d k=%d", qname(QG), qname(QU),
		                         qname(QD), T, C, F, E, k),
		      fmt("rel-L2 %.3g", e));
		free_all();
		return;
	}
	if constexpr (MMA)
		g_qmoe_up_mma<A, QG><<<dim3(blocks(F, 64), k, T), 256>>>(hid, upload(x), didx, g.dev, u.dev, C, F, k);
	else
		g_qmoe_up<A, QG, QU><<<dim3(blocks(F, 8), k, T), 256>>>(hid, upload(x), didx, g.dev, u.dev, C, F, k);
	CK_LAUNCH();
	g_qmoe_down<A, QD><<<dim3(blocks(C, 16), T), 256>>>(dy, hid, didx, upload(wt), d.dev, C, F, k);
	CK_LAUNCH();
	double e = rel_l2(widen(download(dy, (size_t)T * C)), want);
	check(e <= tol<A>(), fmt("qmoe%s gate %s up %s down %s A=%s T=%d C=%d F=%d E=%d k=%d", MMA ? " (mma up)" : "", qname(QG), qname(QU), qname(QD),
	                         tname<A>(), T, C, F, E, k),
	      fmt("rel-L2 %.3g", e));
	free_all();
}

/* ---- fused kernels over blocks (ops/qfused.cuh) ---- */

/* A type id's name: ggml's block types, or the float types a member of a group may keep. */
static const char *qtn(int qt) { return qt == 0 ? "f32" : qt == 1 ? "f16" : qt == 30 ? "bf16" : qname(qt); }

/* A float [rows, K] weight of type W (type id qt) as a member of a fused group: random values rounded to
** W, its rows starting `off` elements past a 16-byte boundary (off > 0: the kernels' scalar path). */
template <typename W> static QW qw_float(int qt, long long rows, long long K, int off)
{
	QW w;
	w.qt = qt, w.rows = rows, w.K = K, w.stride = K * (long long)sizeof(W);
	std::vector<float> f = rnd((size_t)(rows * K));
	std::vector<W> h((size_t)(rows * K) + (size_t)off);
	w.f.resize(f.size());
	for (size_t i = 0; i < f.size(); i++) {
		h[i + (size_t)off] = h_from_f<W>(f[i]);
		w.f[i] = h_to_f(h[i + (size_t)off]);
	}
	w.dev = (unsigned char *)upload(h) + (size_t)off * sizeof(W);
	return w;
}

/* A member's weight of any type id: blocks (random or from the quantizer) or float rows. */
static QW qw_member(int qt, long long rows, long long K, bool random, int off)
{
	switch (qt) {
	case 0: return qw_float<float>(0, rows, K, off);
	case 1: return qw_float<f16>(1, rows, K, off);
	case 30: return qw_float<bf16>(30, rows, K, off);
	default: return qw_make(qt, rows, K, random, "blk.0.attn_q_a.weight");
	}
}

/* One k_qgemv_fused case: the members' widths (their types are the template's Q0..) and K splits P (1, 2,
** 4 or 8 warps per row group), which members have a bias, which has a scale, a residual on member 0 (in
** place over r or not), a stored norm, float members' rows off their 16-byte alignment. */
struct QfCase {
	int T, K;
	std::vector<int> N, P;
	unsigned bias_mask;
	int scaled;
	bool res, res_inplace, store;
	int misalign;
};

/*
** k_qgemv_fused against the unfused chain: the input formed as the prologue's node stores it (rmsnorm,
** swiglu, rounded to A), each member's linear in float64 on the dequantized weights rounded to A, then
** its scale or residual add rounded to A. Relative error as test_qgemv's (‖s‖/sqrt(K) floor per output).
*/
template <typename A, typename NW, int PRO, bool HNW, int EPI, int TM, int Q0, int Q1, int Q2, int Q3, bool MMA = false>
static void run_qfused(const QfCase &c)
{
	static_assert(!MMA || ((Q0 == 8 || Q0 == 12 || Q0 == 14) && Q1 == Q0 && Q2 == Q0 && Q3 == Q0 && TM == 1),
	              "the mma kernel: one type, Q8_0, Q4_K or Q6_K, TM 1");
	const int Q[4] = {Q0, Q1, Q2, Q3};
	const float eps = 1e-6f;
	int T = c.T, K = c.K, M = (int)c.N.size();
	std::vector<A> x = narrow<A>(rnd((size_t)T * K)), u = narrow<A>(rnd((size_t)T * K));
	std::vector<float> nwr = rnd(K);
	for (auto &v : nwr)
		v = 1.0f + 0.5f * v;
	std::vector<NW> nw = narrow<NW>(nwr);
	std::vector<float> xf = widen(x), uf = widen(u), nwf = widen(nw), h((size_t)T * K);
	if (PRO == GEMV_PRO_RMSNORM || PRO == GEMV_PRO_RMSLATE)
		ref_rmsnorm(h.data(), xf.data(), HNW ? nwf.data() : NULL, T, K, eps);
	else if (PRO == GEMV_PRO_SWIGLU)
		for (size_t i = 0; i < h.size(); i++)
			h[i] = xf[i] / (1.0f + expf(-xf[i])) * uf[i];
	else
		h = xf;
	for (auto &v : h) /* RMSLATE: the normalised input is not rounded to A (its only difference) */
		v = PRO == GEMV_PRO_RMSLATE ? v : thru<A>(v);
	A *dy[4] = {nullptr, nullptr, nullptr, nullptr}, *db[4] = {nullptr, nullptr, nullptr, nullptr}, *dr = nullptr;
	const unsigned char *dw[4] = {nullptr, nullptr, nullptr, nullptr};
	int N[4] = {0, 0, 0, 0}, P[4] = {1, 1, 1, 1}, nb = 0;
	float s[4] = {1, 1, 1, 1};
	std::vector<std::vector<double>> want(M), scale(M);
	for (int m = 0; m < M; m++) {
		N[m] = c.N[m], P[m] = c.P[m];
		nb += MMA ? (N[m] + 128 / P[m] - 1) / (128 / P[m]) : (N[m] + 16 / P[m] - 1) / (16 / P[m]);
		bool fl = Q[m] == 0 || Q[m] == 1 || Q[m] == 30, hb = (c.bias_mask >> m) & 1;
		QW w = qw_member(Q[m], N[m], K, (m + T) % 2 == 0, fl ? c.misalign : 0);
		std::vector<A> b = narrow<A>(rnd(N[m]));
		std::vector<A> r = narrow<A>(rnd((size_t)T * N[m]));
		if (m == c.scaled)
			s[m] = 0.37f;
		want[m].resize((size_t)T * N[m]), scale[m].resize((size_t)T * N[m]);
		for (int t = 0; t < T; t++)
			for (int n = 0; n < N[m]; n++) {
				double d = 0, a = 0;
				for (int k = 0; k < K; k++) {
					d += (double)h[(size_t)t * K + k] * w.f[(size_t)n * K + k];
					a += fabs((double)h[(size_t)t * K + k] * w.f[(size_t)n * K + k]);
				}
				float lin = thru<A>((float)(d + (hb ? h_to_f(b[n]) : 0.0)));
				size_t at = (size_t)t * N[m] + n;
				if (m == c.scaled)
					lin = thru<A>(s[m] * lin);
				else if (m == 0 && c.res)
					lin = thru<A>(h_to_f(r[at]) + lin);
				want[m][at] = lin;
				scale[m][at] = a / sqrt((double)K) * (m == c.scaled ? s[m] : 1.0);
			}
		dy[m] = dalloc<A>((size_t)T * N[m], 0xff);
		if (m == 0 && c.res) {
			dr = upload(r);
			if (c.res_inplace)
				dy[0] = dr;
		}
		dw[m] = w.dev;
		db[m] = hb ? upload(b) : nullptr;
	}
	A *dhs = c.store ? dalloc<A>((size_t)T * K, 0xff) : nullptr;
	/* as glmc emits it: batch-1 launches specialise the prologue and epilogue, larger ones take them at run time */
	if constexpr (MMA)
		g_qgemv_fused_mma<A, Q0, NW, PRO, EPI><<<nb, 256>>>(
			dy[0], dy[1], dy[2], dy[3], dw[0], dw[1], dw[2], dw[3], db[0], db[1], db[2], db[3], upload(x),
			PRO == GEMV_PRO_SWIGLU ? upload(u) : nullptr, HNW ? upload(nw) : nullptr, dhs, dr, T, K, N[0], N[1], N[2],
			N[3], P[0], P[1], P[2], P[3], PRO, EPI, eps, s[0], s[1], s[2], s[3]);
	else
		g_qgemv_fused<A, Q0, Q1, Q2, Q3, NW, TM == 1 ? PRO : -1, TM == 1 ? EPI : -1, TM><<<nb, 256>>>(
			dy[0], dy[1], dy[2], dy[3], dw[0], dw[1], dw[2], dw[3], db[0], db[1], db[2], db[3], upload(x),
			PRO == GEMV_PRO_SWIGLU ? upload(u) : nullptr, HNW ? upload(nw) : nullptr, dhs, dr, T, K, N[0], N[1], N[2],
			N[3], P[0], P[1], P[2], P[3], PRO, EPI, eps, s[0], s[1], s[2], s[3]);
	CK_LAUNCH();
	static const char *pro[] = {"plain", "rmsnorm", "swiglu", "rmsnorm-late"};
	std::string nm = fmt("qgemv_fused%s A=%s [", MMA ? "_mma" : "", tname<A>());
	for (int m = 0; m < M; m++)
		nm += fmt("%s%s/P%d", m ? " " : "", qtn(Q[m]), P[m]);
	nm += fmt("] T=%d K=%d %s%s TM=%d", T, K, pro[PRO], PRO == GEMV_PRO_RMSNORM && !HNW ? " (no weight)" : "", TM);
	if (c.bias_mask)
		nm += fmt(" bias=0x%x", c.bias_mask);
	if (c.scaled >= 0)
		nm += fmt(" scale@%d", c.scaled);
	if (c.res)
		nm += c.res_inplace ? " residual(in place)" : " residual";
	if (c.misalign)
		nm += " misaligned-float-w";
	/* the tensor-core kernel stages f32 activations as bf16 hi + lo (qm_put32): x − hi − lo, up to 2^-17 of
	** each value, is lost, about 5e-6 of a dot against the floor, which 1e-5 does not always cover with 8
	** outputs (1.29e-5 seen with other draws); DESIGN.md's bound for f32 on the GPU is 1e-4 */
	double tm = MMA && sizeof(A) == 4 ? 1e-4 : tol<A>();
	for (int m = 0; m < M; m++) {
		double e = rel_l2(widen(download(dy[m], want[m].size())), want[m], scale[m]);
		check(e <= tm, nm + fmt(" member %d (N=%d)", m, N[m]), fmt("rel-L2 %.3g > %.3g", e, tm));
	}
	if (c.store) {
		std::vector<double> hd(h.begin(), h.end());
		double e = rel_l2(widen(download(dhs, h.size())), hd);
		check(e <= tol<A>(), nm + " stored norm", fmt("rel-L2 %.3g > %.3g", e, tol<A>()));
	}
	free_all();
}

/*
** k_qmoe_down_fused against the unfused chain: the routed experts' down projections weighted and summed
** (float64) and stored as A, the shared expert's SwiGLU rounded to A, its down projection rounded to A,
** their sum rounded to A, then the residual add rounded to A. hid is random (k_qmoe_up's scratch).
** With G > 0, k_qmoe_down_mma instead (Q4_K/Q6_K, groups of G experts a block, its dots in a poisoned
** scratch), and its counts must be left zero for the next launch.
*/
template <typename A, int QD, int QS, bool SH, bool RES, int G = 0>
static void test_qmoe_down_fused(int T, int C, int F, int Fs, int E, int k, bool inplace)
{
	QW d = qw_member(QD, (long long)E * C, F, T % 2 == 0, 0);
	QW sd = SH ? qw_member(QS, C, Fs, T % 2 == 1, 0) : QW{};
	std::vector<float> hid = rnd((size_t)T * k * F);
	std::vector<A> wt = narrow<A>(rnd((size_t)T * k)), g = narrow<A>(rnd((size_t)T * Fs)), u = narrow<A>(rnd((size_t)T * Fs));
	std::vector<A> r = narrow<A>(rnd((size_t)T * C));
	std::vector<int> idx((size_t)T * k);
	for (auto &i : idx)
		i = (int)(rand64() % (uint64_t)E);
	if (idx.size() > 1)
		idx[1] = -1;
	std::vector<double> want((size_t)T * C), scale((size_t)T * C);
	std::vector<float> sw((size_t)Fs);
	for (int t = 0; t < T; t++) {
		for (int f = 0; f < Fs; f++) {
			float gv = h_to_f(g[(size_t)t * Fs + f]);
			sw[(size_t)f] = thru<A>(gv / (1.0f + expf(-gv)) * h_to_f(u[(size_t)t * Fs + f]));
		}
		for (int c = 0; c < C; c++) {
			double routed = 0, a = 0;
			for (int j = 0; j < k; j++) {
				size_t slot = (size_t)t * k + j;
				if (idx[slot] < 0)
					continue;
				double s = 0;
				for (int f = 0; f < F; f++) {
					double p = (double)d.f[((size_t)idx[slot] * C + c) * F + f] * hid[slot * F + f];
					s += p;
					a += fabs(p * h_to_f(wt[slot]));
				}
				routed += h_to_f(wt[slot]) * s;
			}
			float o = thru<A>((float)routed);
			double sc = a / sqrt((double)F);
			if (SH) {
				double s = 0, b = 0;
				for (int f = 0; f < Fs; f++) {
					s += (double)sd.f[(size_t)c * Fs + f] * sw[(size_t)f];
					b += fabs((double)sd.f[(size_t)c * Fs + f] * sw[(size_t)f]);
				}
				o = thru<A>(o + thru<A>((float)s));
				sc += b / sqrt((double)Fs);
			}
			if (RES)
				o = thru<A>(h_to_f(r[(size_t)t * C + c]) + o);
			want[(size_t)t * C + c] = o, scale[(size_t)t * C + c] = sc;
		}
	}
	A *dr = RES ? upload(r) : nullptr, *dy = RES && inplace ? dr : dalloc<A>((size_t)T * C, 0xff);
	std::string nm;
	if constexpr (G > 0) {
		int nb = (int)blocks(C, 128), ng = (k + G - 1) / G;
		int *cnt = dalloc<int>((size_t)T * nb, 0);
		g_qmoe_down_mma<A, QD, QS, SH, RES><<<dim3(nb, ng + (SH ? 1 : 0), T), 256>>>(
			dy, upload(hid), dalloc<float>((size_t)T * (k + (SH ? 1 : 0)) * C, 0xff), cnt, upload(idx), upload(wt),
			d.dev, C, F, k, G, SH ? sd.dev : nullptr, SH ? upload(g) : nullptr, SH ? upload(u) : nullptr, SH ? Fs : 0, dr);
		CK_LAUNCH();
		std::vector<int> left = download(cnt, (size_t)T * nb);
		int nz = 0;
		for (int v : left)
			nz += v != 0;
		nm = fmt("qmoe_down_mma G=%d", G);
		check(nz == 0, nm + fmt(" counts left zero T=%d C=%d k=%d", T, C, k), fmt("%d of %d not zero", nz, T * nb));
	} else {
		g_qmoe_down_fused<A, QD, QS, SH, RES><<<dim3(blocks(C, 16), T), 256>>>(
			dy, upload(hid), upload(idx), upload(wt), d.dev, C, F, k, SH ? sd.dev : nullptr, SH ? upload(g) : nullptr,
			SH ? upload(u) : nullptr, SH ? Fs : 0, dr);
		CK_LAUNCH();
		nm = "qmoe_down_fused";
	}
	double e = rel_l2(widen(download(dy, (size_t)T * C)), want, scale);
	check(e <= tol<A>(), nm + fmt(" A=%s down %s%s%s%s T=%d C=%d F=%d Fs=%d E=%d k=%d", tname<A>(), qtn(QD),
	                              SH ? fmt(" shared %s", qtn(QS)).c_str() : "", RES ? " residual" : "",
	                              RES && inplace ? "(in place)" : "", T, C, F, Fs, E, k),
	      fmt("rel-L2 %.3g > %.3g", e, tol<A>()));
	free_all();
}

/* Every prologue and epilogue of the fused GEMV with QT members, T = 1..8 (TM = 1 with in-block split K
** at T = 1, TM = 8 otherwise), K whole in one chunk or not; and the MoE layer's end with QT down weights. */
template <int QT> static void qfused_suite(void)
{
	const int B = QGeo<QT>::BLCK;
	for (int K : {B == 32 ? 96 : 256, 4608}) {
		QfCase c = {1, K, {37, 64}, {1, 1}, 0, -1, false, false, false, 0};
		run_qfused<float, float, GEMV_PRO_NONE, false, 0, 1, QT, QT, QT, QT>(c);
		c.P = {4, 2};
		run_qfused<float, float, GEMV_PRO_NONE, false, 0, 1, QT, QT, QT, QT>(c);
		for (c.T = 2; c.T <= 8; c.T++) {
			c.P = c.T % 3 == 2 ? std::vector<int>{2, 8} : std::vector<int>{1, 1};
			run_qfused<float, float, GEMV_PRO_NONE, false, 0, 8, QT, QT, QT, QT>(c);
		}
	}
	/* GLM-5's router (f32, split 8 as emit_cuda.c splits it beside K-quants) with the shared expert's gate
	** and up, the norm formed while staging: whole rows at T = 1 (4608), the norm's own pass otherwise
	** (9216 is two chunks even at T = 1); the norm stored at T = 1 and 3 */
	for (int K : {4608, 9216})
		for (int T : {1, 2, 3, 8}) {
			QfCase c = {T, K, {8, 40, 40}, {8, 1, 1}, 0, -1, false, false, T == 1 || T == 3, 0};
			if (T == 1) {
				run_qfused<float, float, GEMV_PRO_RMSNORM, true, 0, 1, 0, QT, QT, 0>(c);
				c.P = {8, 2, 2};
				run_qfused<float, float, GEMV_PRO_RMSNORM, true, 0, 1, 0, QT, QT, 0>(c);
			} else
				run_qfused<float, float, GEMV_PRO_RMSNORM, true, 0, 8, 0, QT, QT, 0>(c);
		}
	/* SwiGLU + down projection + residual add, in place over the residual for odd T */
	for (int T = 1; T <= 8; T++) {
		QfCase c = {T, 2048, {70}, {T == 1 ? 2 : 1}, 0, -1, true, T % 2 == 1, false, 0};
		if (T == 1)
			run_qfused<float, float, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES, 1, QT, QT, QT, QT>(c);
		else
			run_qfused<float, float, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES, 8, QT, QT, QT, QT>(c);
	}
	/* four members of three types (a bf16 one, Q8_0 beside QT), biases, a scale on member 3, a norm
	** without weight; a misaligned f16 member (scalar path) */
	QfCase c4 = {1, 1024, {33, 16, 5, 24}, {1, 4, 2, 1}, 0x5, 3, false, false, false, 0};
	run_qfused<float, float, GEMV_PRO_RMSNORM, false, 8, 1, QT, 30, 8, QT>(c4);
	c4.T = 4;
	run_qfused<float, float, GEMV_PRO_RMSNORM, false, 8, 8, QT, 30, 8, QT>(c4);
	QfCase cm = {3, 512, {19, 30}, {4, 1}, 0x2, -1, false, false, false, 1};
	run_qfused<float, float, GEMV_PRO_NONE, false, 0, 8, 1, QT, 1, 1>(cm);
	/* bf16 activations (a bf16 norm weight and member) */
	QfCase cb = {1, 3072, {64, 48}, {2, 2}, 0, -1, false, false, true, 0};
	run_qfused<bf16, bf16, GEMV_PRO_RMSNORM, true, 0, 1, QT, 30, QT, QT>(cb);
	cb.T = 7, cb.P = {4, 1};
	run_qfused<bf16, bf16, GEMV_PRO_RMSNORM, true, 0, 8, QT, 30, QT, QT>(cb);
	QfCase cs = {2, 2048, {96}, {1}, 0, -1, true, true, false, 0};
	run_qfused<bf16, bf16, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES, 8, QT, QT, QT, QT>(cs);
	/* the MoE layer's end: both down projections in QT blocks, or one of them float */
	for (int T : {1, 3, 8})
		test_qmoe_down_fused<float, QT, QT, true, true>(T, 200, 512, 512, 6, 3, T == 3);
	test_qmoe_down_fused<float, QT, 0, true, false>(2, 96, 256, 768, 4, 2, false);
	test_qmoe_down_fused<float, 30, QT, true, true>(1, 64, 256, 512, 4, 2, false);
	test_qmoe_down_fused<float, QT, QT, false, true>(5, 100, 9216, 0, 3, 2, true);
	test_qmoe_down_fused<bf16, QT, 30, true, true>(4, 300, 512, 1024, 5, 2, false);
	/* bf16 decode steps: GLM-5's shapes in small */
	test_qmoe_down_fused<bf16, QT, QT, true, true>(1, 96, 2048, 2048, 8, 4, true);
	test_qmoe_down_fused<bf16, QT, QT, false, true>(1, 64, 9216, 0, 3, 2, false);
	QfCase cd = {1, 6144, {40, 24, 8}, {2, 4, 8}, 0, -1, false, false, true, 0};
	run_qfused<bf16, bf16, GEMV_PRO_RMSNORM, true, 0, 1, QT, QT, QT, QT>(cd);
	/* the norm's scale after the dots (glmc's one-token launch of a norm group; the stored norm is
	** checked where the case stores it): the router beside the shared expert's gate/up (whole rows, two chunks at K 9216), four members of three
	** types with a bias and a scale and no norm weight, bf16 activations at GLM-5's width */
	const int L = GEMV_PRO_RMSLATE;
	for (int K : {4608, 9216}) {
		QfCase c = {1, K, {8, 40, 40}, {8, 1, 1}, 0x4, -1, false, false, true, 0};
		run_qfused<float, float, L, true, 0, 1, 0, QT, QT, 0>(c);
		c.P = {8, 2, 2};
		run_qfused<float, float, L, true, 0, 1, 0, QT, QT, 0>(c);
	}
	QfCase l4 = {1, 1024, {33, 16, 5, 24}, {1, 4, 2, 1}, 0x5, 3, false, false, false, 0};
	run_qfused<float, float, L, false, 8, 1, QT, 30, 8, QT>(l4);
	QfCase lb = {1, 6144, {64, 200, 200}, {8, 1, 1}, 0, -1, false, false, true, 0};
	run_qfused<bf16, bf16, L, true, 0, 1, 30, QT, QT, QT>(lb);
	QfCase cw = {1, 4096, {48}, {1}, 0, -1, true, true, false, 0};
	run_qfused<bf16, bf16, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES, 1, QT, QT, QT, QT>(cw);
}

/* k_qgemv_fused_mma (every member Q4_K, one token at a time): each prologue, the residual (in place) and
** scale epilogues, biases, splits 1..8, norms over whole rows and over two chunks (K 9216), the norm
** stored, T = 2 served one row after the other, bf16 activations. */
template <int Q> static void qfused_mma_suite(void)
{
	for (int K : {256, 4608, 9216}) {
		QfCase c = {1, K, {37, 64, 130}, {1, 2, 8}, 0x5, 1, false, false, false, 0};
		run_qfused<float, float, GEMV_PRO_NONE, false, 2, 1, Q, Q, Q, Q, true>(c);
		QfCase n = {1, K, {8, 40, 40}, {4, 1, 2}, 0, -1, false, false, true, 0};
		run_qfused<float, float, GEMV_PRO_RMSNORM, true, 0, 1, Q, Q, Q, Q, true>(n);
		n.T = 2;
		run_qfused<float, float, GEMV_PRO_RMSNORM, false, 0, 1, Q, Q, Q, Q, true>(n);
		QfCase w = {1, K, {70}, {2}, 0x1, -1, true, K == 4608, false, 0};
		run_qfused<float, float, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES, 1, Q, Q, Q, Q, true>(w);
	}
	QfCase cd = {1, 6144, {400, 240, 80}, {2, 4, 8}, 0, -1, false, false, true, 0};
	run_qfused<bf16, bf16, GEMV_PRO_RMSNORM, true, 0, 1, Q, Q, Q, Q, true>(cd);
	/* the norm's scale after the dots (what glmc emits for a Q4_K norm group): GLM-5's
	** q_a/kv_a/indexer widths in small, a bias and a scale, no weight, two chunks (K 9216), T = 2 */
	const int L = GEMV_PRO_RMSLATE;
	for (int K : {256, 4608, 9216}) {
		QfCase n = {1, K, {8, 40, 40}, {4, 1, 2}, 0x2, 0, false, false, true, 0};
		run_qfused<float, float, L, true, 1, 1, Q, Q, Q, Q, true>(n);
		n.T = 2;
		run_qfused<float, float, L, false, 1, 1, Q, Q, Q, Q, true>(n);
	}
	QfCase ld = {1, 6144, {400, 240, 80, 33}, {2, 4, 8, 1}, 0x1, -1, false, false, true, 0};
	run_qfused<bf16, bf16, L, true, 0, 1, Q, Q, Q, Q, true>(ld);
	QfCase lq = {1, 2048, {1000}, {1}, 0, -1, false, false, false, 0};
	run_qfused<bf16, float, L, true, 0, 1, Q, Q, Q, Q, true>(lq);
	QfCase cw = {1, 4096, {300}, {1}, 0, -1, true, true, false, 0};
	run_qfused<bf16, bf16, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES, 1, Q, Q, Q, Q, true>(cw);
	/* the MoE layer's end on the tensor cores: groups of 1..4 experts (one partial, empty slots), the
	** shared expert of the other type or none, several tokens, rows past the last row block, in place */
	const int O = Q == 12 ? 14 : 12;
	test_qmoe_down_fused<float, Q, Q, true, true, 1>(1, 200, 512, 512, 6, 3, false);
	test_qmoe_down_fused<float, Q, O, true, true, 2>(3, 200, 512, 768, 6, 3, true);
	test_qmoe_down_fused<bf16, Q, Q, true, true, 2>(1, 300, 2048, 2048, 9, 8, true);
	test_qmoe_down_fused<bf16, Q, Q, false, true, 4>(2, 128, 1024, 0, 7, 5, false);
	test_qmoe_down_fused<float, Q, Q, true, false, 3>(8, 64, 256, 256, 5, 4, false);
}

/* ---- generators: tensor-parallel parts and float weights ---- */

/* Rank 1 of 2 of a [rows, K] random weight split by rows, and by columns (whole blocks), from the GPU
** generator, against the same rows/blocks of the whole tensor from the CPU generator. */
template <int QT> static void test_rand_split(void)
{
	long long rows = 12, K = 2048, bpr = K / QGeo<QT>::BLCK;
	size_t rb = quant_row_bytes(QT, K);
	unsigned long long seed = weights_random_seed("blk.2.attn_q.weight");
	std::vector<unsigned char> whole(rb * rows);
	for (size_t g = 0; g < whole.size(); g++)
		whole[g] = weights_random_byte(QT, seed, K, g);
	long long st = (long long)quant_dev_row_bytes(QT, K);
	unsigned char *d = dalloc<unsigned char>((size_t)(rows / 2 * st), 0xff);
	g_qrand<QT><<<blocks(rows / 2 * st, 256), 256>>>(d, rows / 2, (int)bpr, st, seed, K, rows / 2, 1, 2, 1, 1, 0);
	CK_LAUNCH();
	std::vector<unsigned char> got = download(d, (size_t)(rows / 2 * st));
	bool ok = true;
	for (long long r = 0; r < rows / 2; r++)
		ok &= !memcmp(&got[(size_t)(r * st)], dev_row(QT, &whole[(size_t)(rows / 2 + r) * rb], K).data(), (size_t)st);
	check(ok, fmt("random %s rank 1 of 2 by rows equals the whole tensor's rows", qname(QT)));
	long long st2 = (long long)quant_dev_row_bytes(QT, K / 2);
	unsigned char *d2 = dalloc<unsigned char>((size_t)(rows * st2), 0xff);
	g_qrand<QT><<<blocks(rows * st2, 256), 256>>>(d2, rows, (int)(bpr / 2), st2, seed, K, rows, 1, 1, 0, 2, 1);
	CK_LAUNCH();
	got = download(d2, (size_t)(rows * st2));
	ok = true;
	for (long long r = 0; r < rows; r++)
		ok &= !memcmp(&got[(size_t)(r * st2)], dev_row(QT, &whole[(size_t)r * rb + rb / 2], K / 2).data(), (size_t)st2);
	check(ok, fmt("random %s rank 1 of 2 by columns equals the whole tensor's blocks", qname(QT)));
	free_all();
}

/* k_rand_float against weights_random_f32 bit for bit: a matrix and a vector in f32, a matrix in bf16
** (the CPU value rounded), and rank 1 of 2 of a matrix split by rows. */
static void test_rand_float(void)
{
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	Node m = {}, v = {};
	m.op = v.op = OP_PARAM, m.kind = v.kind = VK_WEIGHT, m.dtype = v.dtype = DT_F32, m.fused_into = v.fused_into = -1;
	m.ndim = 2, m.dim[0] = 96, m.dim[1] = 1000, m.name = "blk.0.attn_v.weight";
	v.ndim = 1, v.dim[0] = 1000, v.name = "blk.0.attn_norm.weight";
	graph_add(&g, &m), graph_add(&g, &v);
	for (int i = 0; i < 2; i++) {
		WeightRef r = {};
		r.node = i;
		const Node *n = &g.node[i];
		long long cnt = node_numel(n, 0, 0);
		std::vector<float> want((size_t)cnt);
		weights_random_f32(&g, &r, want.data());
		unsigned long long seed = weights_random_seed(n->name);
		float *d = dalloc<float>((size_t)cnt, 0xff);
		g_rand<float><<<blocks(cnt, 256), 256>>>(d, cnt, seed, (int)n->dim[n->ndim - 1], n->ndim == 1, cnt, 1, 1, 0);
		CK_LAUNCH();
		check(!memcmp(download(d, (size_t)cnt).data(), want.data(), sizeof(float) * (size_t)cnt),
		      fmt("random f32 %s %s: GPU equals weights_random_f32 bit for bit", n->ndim == 1 ? "vector" : "matrix", n->name));
		if (i == 0) {
			bf16 *db = dalloc<bf16>((size_t)cnt, 0xff);
			g_rand<bf16><<<blocks(cnt, 256), 256>>>(db, cnt, seed, 1000, 0, cnt, 1, 1, 0);
			CK_LAUNCH();
			std::vector<bf16> gb = download(db, (size_t)cnt);
			size_t bad = 0;
			for (long long k = 0; k < cnt; k++)
				bad += gb[(size_t)k].x != ref_f32_to_bf16(want[(size_t)k]);
			check(!bad, "random bf16 matrix: GPU equals the CPU value rounded to bf16", fmt("%zu differ", bad));
			long long half = cnt / 2;
			float *dh = dalloc<float>((size_t)half, 0xff);
			g_rand<float><<<blocks(half, 256), 256>>>(dh, half, seed, 1000, 0, 48, 1000, 2, 1);
			CK_LAUNCH();
			check(!memcmp(download(dh, (size_t)half).data(), want.data() + half, sizeof(float) * (size_t)half),
			      "random f32 rank 1 of 2 by rows equals the whole matrix's rows");
		}
		free_all();
	}
	arena_free(&A);
}

int main(void)
{
	int dev;
	cudaDeviceProp prop;
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	printf("# device %d: %s (sm_%d%d)\n", dev, prop.name, prop.major, prop.minor);
	gemv_tc_suite();
	qgemv_suite<8>();
	qgemv_suite<12>();
	qgemv_mma_suite<12>();
	qgemv_mma_suite<14>();
	qgemv_mma_suite<8>();
	/* the weight stream: GLM-5's dense down, Llama-3-8B's, a grid of one item a warp, f32 */
	test_qgemv_sk<bf16, 14, false, true>(12288, 6144, true);
	test_qgemv_sk<bf16, 12, true, true>(14336, 4096, true);
	test_qgemv_sk<bf16, 14, true, false>(2048, 100, false);
	test_qgemv_sk<float, 12, false, false>(9216, 333, true);
	test_q8_mma_range();
	qgemv_suite<13>();
	qgemv_suite<14>();
	test_qgemm<float, 8, true>(9, 800, 70);
	test_qgemm<float, 12, false>(64, 1280, 65);
	test_qgemm<float, 13, true>(17, 2048, 33);
	test_qgemm<float, 14, false>(130, 2304, 100);
	test_qgemm<bf16, 12, true>(40, 1024, 64);
	test_exact<8>();
	test_exact<12>();
	test_exact<13>();
	test_exact<14>();
	test_qmoe<float, 12, 12, 14>(3, 512, 256, 8, 2);
	test_qmoe<float, 8, 8, 8>(2, 320, 96, 4, 3);
	test_qmoe<float, 13, 13, 12>(1, 9216, 256, 3, 2);
	test_qmoe<float, 12, 14, 13>(2, 1024, 256, 4, 2);
	test_qmoe<bf16, 14, 14, 13>(2, 768, 512, 5, 2);
	test_qmoe<bf16, 12, 12, 14>(1, 6144, 512, 8, 4);
	test_qmoe<bf16, 14, 14, 12>(1, 2048, 256, 6, 2);
	/* Q4_K gate and up on the tensor cores: F not a multiple of 64 (a Q8_0 down takes it), two chunks of
	** C, several tokens */
	test_qmoe<float, 12, 12, 14, true>(3, 512, 256, 8, 2);
	test_qmoe<float, 12, 12, 8, true>(1, 9216, 96, 3, 2);
	test_qmoe<bf16, 12, 12, 14, true>(1, 6144, 512, 8, 4);
	test_qmoe<float, 12, 12, 8, true>(2, 1024, 288, 4, 3);
	/* Q8_0 gate and up on the tensor cores (int8 products): F not a multiple of 64, two chunks of C */
	test_qmoe<float, 8, 8, 8, true>(3, 512, 256, 8, 2);
	test_qmoe<float, 8, 8, 8, true>(1, 9216, 96, 3, 2);
	test_qmoe<bf16, 8, 8, 14, true>(1, 2048, 1536, 8, 4); /* GLM-4.7-Flash's widths */
	/* the grouped GEMM of many-token steps (ops/moe_tc.cuh) over blocks: a Q4_K_M file's mix, Q8_0, Q5_K;
	** slots over several row tiles of an expert, and many experts of a tile each */
	test_qmoe<bf16, 12, 12, 14, false, true>(300, 512, 256, 4, 2);
	test_qmoe<bf16, 12, 12, 12, false, true>(40, 2048, 1536, 8, 4); /* GLM-4.7-Flash's widths */
	test_qmoe<bf16, 8, 8, 8, false, true>(100, 256, 512, 16, 4);
	test_qmoe<bf16, 13, 13, 14, false, true>(33, 256, 768, 6, 2);
	qfused_suite<8>();
	qfused_suite<12>();
	qfused_mma_suite<12>();
	qfused_mma_suite<14>();
	qfused_mma_suite<8>();
	qfused_suite<13>();
	qfused_suite<14>();
	test_rand_split<8>();
	test_rand_split<12>();
	test_rand_split<13>();
	test_rand_split<14>();
	test_rand_float();
	return finish();
}
