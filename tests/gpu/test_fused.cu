/*
** tests/gpu/test_fused.cu — the fused kernels of ops/fused.cuh against the float32 CPU references of
** ops/ref.c applied node by node, for activation types A (float, bf16) and weight types W (float, bf16,
** f16). Runs on the GPU machine only (tests/gpu/build_kernels_test.sh builds it; CI never runs it).
**
** Each reference runs the unfused nodes in order and rounds every intermediate value to A where the
** unfused kernels store it (the fused kernels promise the same). Inputs are fresh random values from a
** fixed-seed generator (16-bit inputs rounded first, the reference getting exactly those values); every
** output is poisoned (bytes 0xFF, NaN) before the launch; steps of T in {1, 3, 8, 17} tokens (17 runs
** the 8-row GEMV loop three times; k_attn_step_rope takes one). Tolerances (relative L2) as
** tests/gpu/test_kernels.cu: 1e-5 with float activations, 2e-2 with bf16; cache rows are compared bit
** for bit with the rows stored as outputs, expert ids exactly.
**
** Prints "ok - NAME" or "FAIL - NAME: detail" per check and "N passed, N failed"; exits non-zero on any
** failure.
*/
#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <string>
#include <type_traits>
#include <vector>

#include "../tap.h"

extern "C" {
#include "ref.h"
}

/* ---- CUDA errors (the checks: tests/tap.h) ---- */

static void cuda_check(cudaError_t e, const char *call, const char *file, int line)
{
	if (e == cudaSuccess)
		return;
	printf("FAIL - CUDA error in %s (%s:%d): %s\n", call, file, line, cudaGetErrorString(e));
	n_fail++;
	exit(finish());
}
#define CK(call) cuda_check((call), #call, __FILE__, __LINE__)
#define CK_LAUNCH()                                                                                                    \
	do {                                                                                                           \
		CK(cudaGetLastError());                                                                                \
		CK(cudaDeviceSynchronize());                                                                           \
	} while (0)

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

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rand64(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

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

static unsigned blocks(long long n, int per)
{
	return (unsigned)((n + per - 1) / per);
}

/* ---- __global__ wrappers, as glmc's emitter writes them ---- */

template <typename A, typename W, bool HW>
__global__ void __launch_bounds__(256) g_add_rmsnorm(A *sum, A *y, const A *a, const A *b, const W *w, int N, float eps)
{
	k_add_rmsnorm<A, W, HW>(sum, y, a, b, w, N, eps);
}

template <typename A, typename W, typename NW, int PRO, bool HAS_NW, int EPI, int RB, int TR>
__global__ void __launch_bounds__(256)
	g_gemv_fused(A *y0, A *y1, A *y2, A *y3, const W *w0, const W *w1, const W *w2, const W *w3, const A *b0,
		     const A *b1, const A *b2, const A *b3, const A *x, const A *u, const NW *nw, A *hs, const A *r, int T,
		     int K, int N0, int N1, int N2, int N3, float eps, float s0, float s1, float s2, float s3)
{
	k_gemv_fused<A, W, NW, PRO, HAS_NW, EPI, RB, TR>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs, r, T, K,
						 N0, N1, N2, N3, eps, s0, s1, s2, s3);
}

/* Every token in sequence slot 0 (the slot arithmetic is covered end to end by tests/batch.sh). */
__device__ int g_zero_seq[1 << 16];

template <typename A, typename NW, bool NORM, bool HAS_NW, bool IL>
__global__ void __launch_bounds__(128)
	g_rope_qk_kv(A *qo, A *ko, A *kc, A *vc, const A *q, const A *k, const A *v, const NW *qw, const NW *kw,
		     const int *pos, const float *qf, const float *kf, float qcs, float kcs, int H, int G, int D, int Dv,
		     int R, float eps)
{
	k_rope_qk_kv<A, NW, NORM, HAS_NW, IL>(qo, ko, kc, vc, q, k, v, qw, kw, pos, qf, kf, qcs, kcs, H, G, D, Dv, R,
					     eps, g_zero_seq, 0);
}

template <typename A, int ROWB, bool IL>
__global__ void __launch_bounds__(512)
	g_attn_step_rope(A *y, A *kc, A *vc, const A *q, const A *k, const A *v, const int *pos, const float *qf,
			 const float *kf, float qcs, float kcs, int H, int G, int R, float scale, const int *seq, int S)
{
	k_attn_step_rope<A, ROWB, IL>(y, kc, vc, q, k, v, pos, qf, kf, qcs, kcs, H, G, R, scale, seq, S);
}

template <typename A, typename NW, typename IW, bool IL, bool ILI>
__global__ void __launch_bounds__(256)
	g_mla_kvprep(A *lat, A *cache, A *iko, A *icache, const A *kv, const NW *cw, const A *ik, const IW *iw,
		     const IW *ib, const int *pos, const float *f, float cs, const float *fi, float csi, int L, int Dr, int R,
		     int Di, int Ri, float eps, float ieps)
{
	k_mla_kvprep<A, NW, IW, IL, ILI>(lat, cache, iko, icache, kv, cw, ik, iw, ib, pos, f, cs, fi, csi, L, Dr, R, Di, Ri,
					 eps, ieps, g_zero_seq, 0);
}

template <typename A, typename W, bool TB, bool IL, bool ILI>
__global__ void __launch_bounds__(256, MLA_Q_MIN_BLOCKS)
	g_mla_qprep(A *qabs, A *iqo, const A *q, const W *wk, const A *iq, const int *pos, const float *f, float cs,
		    const float *fi, float csi, int T, int H, int Dn, int Dr, int R, int L, int Hi, int Di, int Ri)
{
	k_mla_qprep<A, W, TB, IL, ILI>(qabs, iqo, q, wk, iq, pos, f, cs, fi, csi, T, H, Dn, Dr, R, L, Hi, Di, Ri);
}

template <typename A, typename W>
__global__ void __launch_bounds__(256) g_mla_vabsorb(A *out, const A *o, const W *wv, int T, int H, int Dv, int Do)
{
	k_mla_vabsorb<A, W>(out, o, wv, T, H, Dv, Do);
}

template <typename A, typename W, bool TB, bool IL, bool ILI, typename NW, typename IW, bool KIL, bool KILI>
__global__ void __launch_bounds__(256, MLA_Q_MIN_BLOCKS)
	g_mla_prep(A *qabs, A *iqo, const A *q, const W *wk, const A *iq, const int *pos, const float *f, float cs,
		   const float *fi, float csi, int T, int H, int Dn, int Dr, int R, int L, int Hi, int Di, int Ri, A *lat,
		   A *cache, A *iko, A *icache, const A *kv, const NW *cw, const A *ik, const IW *iw, const IW *ib,
		   const float *kf, float kcs, const float *kfi, float kcsi, int KR, int KDi, int KRi, float eps, float ieps)
{
	k_mla_prep<A, W, TB, IL, ILI, NW, IW, KIL, KILI>(qabs, iqo, q, wk, iq, pos, f, cs, fi, csi, T, H, Dn, Dr, R, L, Hi,
							 Di, Ri, lat, cache, iko, icache, kv, cw, ik, iw, ib, kf, kcs,
							 kfi, kcsi, KR, KDi, KRi, eps, ieps, g_zero_seq, 0);
}

template <typename A, typename B_>
__global__ void __launch_bounds__(256) g_moe_route_weights(int *idx, A *w, const A *l, const B_ *b, int E, int k, int ng,
							   int tg, int sig, int wsig, int norm, float scale)
{
	k_moe_route_weights<A, B_>(idx, w, l, b, E, k, ng, tg, sig, wsig, norm, scale);
}

template <typename A, typename W>
__global__ void __launch_bounds__(256)
	g_moe_up(float *hid, const A *x, const int *idx, const W *gate, const W *up, int C, int F, int k)
{
	k_moe_up<A, W>(hid, x, idx, gate, up, C, F, k);
}

template <typename A, typename W, typename WS, bool SH, bool RES>
__global__ void __launch_bounds__(256)
	g_moe_down_fused(A *y, const float *hid, const int *idx, const A *w, const W *down, int C, int F, int k,
			 const WS *sdown, const A *g, const A *u, int Fs, const A *r)
{
	k_moe_down_fused<A, W, WS, SH, RES>(y, hid, idx, w, down, C, F, k, sdown, g, u, Fs, r);
}

/* ---- tests ---- */

/* Residual add + RMSNorm in one pass, separate and in place (sum over a). */
template <typename A, typename W, bool HW> static void test_add_rmsnorm(int T, int N, bool inplace)
{
	std::vector<A> a = to_type<A>(rnd((size_t)T * N)), b = to_type<A>(rnd((size_t)T * N));
	std::vector<W> w = to_type<W>(rnd(N, 0.5f, 1.5f));
	std::vector<float> af = to_float(a), bf = to_float(b), wf = to_float(w), sum((size_t)T * N), y(sum.size());
	ref_add(sum.data(), af.data(), bf.data(), sum.size(), sum.size());
	sum = through<A>(sum);
	ref_rmsnorm(y.data(), sum.data(), HW ? wf.data() : NULL, T, N, 1e-5f);
	A *da = upload(a), *ds = inplace ? da : poisoned<A>(sum.size()), *dy = poisoned<A>(y.size());
	g_add_rmsnorm<A, W, HW><<<T, 256>>>(ds, dy, da, upload(b), HW ? upload(w) : nullptr, N, 1e-5f);
	CK_LAUNCH();
	std::string nm = fmt("add_rmsnorm A=%s W=%s T=%d N=%d%s%s", tname<A>(), tname<W>(), T, N, HW ? "" : " no-weight",
			     inplace ? " in-place" : "");
	check_close(nm + " sum", to_float(download(ds, sum.size())), sum, tol<A>());
	check_close(nm + " norm", to_float(download(dy, y.size())), y, tol<A>());
	free_all();
}

/* One fused GEMV case: the members' widths N (1..4 of them), the prologue, which members have a bias,
** which has a scale, a residual on member 0 (in place over r or not), a stored norm, a misaligned
** weight (the scalar path). */
struct GemvCase {
	int T, K;
	std::vector<int> N;
	int pro;             /* GEMV_PRO_* */
	bool norm_w;         /* RMSNORM: with a weight */
	bool store;          /* RMSNORM: store the normalised rows */
	unsigned bias_mask;  /* member m has a bias */
	int scaled;          /* the member with a scale, or -1 */
	bool res, res_inplace;
	bool misalign;
	int rb = 0, bt = 0;  /* columns per block and threads; 0: the shape glmc emits */
	int grid = 0;        /* blocks (fewer than the groups: they loop); 0: as glmc emits */
	bool tr8 = false;    /* T = 1 through the 8-rows-per-pass variant */
};

template <typename A, typename W, int PRO, bool HAS_NW, int EPI> static void run_gemv(const GemvCase &c)
{
	int T = c.T, K = c.K, M = (int)c.N.size();
	std::vector<A> x = to_type<A>(rnd((size_t)T * K, -2.0f, 2.0f)), u = to_type<A>(rnd((size_t)T * K));
	std::vector<W> nw = to_type<W>(rnd(K, 0.5f, 1.5f));
	std::vector<float> xf = to_float(x), uf = to_float(u), nwf = to_float(nw), h((size_t)T * K);
	/* the staged input, as the unfused nodes store it (RMSLATE: not rounded to A, its only difference) */
	if (PRO == GEMV_PRO_RMSNORM || PRO == GEMV_PRO_RMSLATE)
		ref_rmsnorm(h.data(), xf.data(), HAS_NW ? nwf.data() : NULL, T, K, 1e-6f);
	else if (PRO == GEMV_PRO_SWIGLU)
		ref_swiglu(h.data(), xf.data(), uf.data(), h.size());
	else
		h = xf;
	if (PRO != GEMV_PRO_RMSLATE)
		h = through<A>(h);
	A *dy[4] = {nullptr, nullptr, nullptr, nullptr}, *db[4] = {nullptr, nullptr, nullptr, nullptr};
	W *dw[4] = {nullptr, nullptr, nullptr, nullptr};
	int N[4] = {0, 0, 0, 0};
	float s[4] = {1, 1, 1, 1};
	std::vector<std::vector<float>> want(M);
	A *dr = nullptr;
	int off = c.misalign ? 1 : 0;
	for (int m = 0; m < M; m++) {
		N[m] = c.N[m];
		std::vector<W> w = to_type<W>(rnd((size_t)N[m] * K + 1));
		std::vector<A> b = to_type<A>(rnd(N[m]));
		std::vector<float> wf = to_float(w), bf = to_float(b), y((size_t)T * N[m]);
		bool hb = (c.bias_mask >> m) & 1;
		ref_linear(y.data(), h.data(), wf.data() + off, hb ? bf.data() : NULL, T, K, N[m]);
		y = through<A>(y);
		if (m == c.scaled) {
			s[m] = 0.37f;
			ref_scale(y.data(), y.data(), y.size(), s[m]);
			y = through<A>(y);
		}
		dy[m] = poisoned<A>(y.size());
		if (m == 0 && c.res) {
			std::vector<A> r = to_type<A>(rnd(y.size()));
			std::vector<float> rf = to_float(r);
			ref_add(y.data(), rf.data(), y.data(), y.size(), y.size());
			y = through<A>(y);
			dr = upload(r);
			if (c.res_inplace)
				dy[0] = dr;
		}
		want[m] = y;
		dw[m] = upload(w) + off;
		db[m] = hb ? upload(b) : nullptr;
	}
	if (EPI & GEMV_EPI_GLU) {
		/* the SwiGLU of the gate and up results, as k_swiglu stores it: only y_0 is written */
		std::vector<float> h2(want[0].size());
		ref_swiglu(h2.data(), want[0].data(), want[1].data(), h2.size());
		want[0] = through<A>(h2);
		dy[1] = nullptr;
		M = 1;
	}
	A *dhs = c.store ? poisoned<A>((size_t)T * K) : nullptr;
	int ntot = N[0] + N[1] + N[2] + N[3];
	int rb = c.rb, bt = c.bt;
	/* one row per pass at T = 1, 8 otherwise, as glmc emits; T = 1 also runs the 8-row variant
	** (c.tr8) */
	bool tr1 = T == 1 && !c.tr8;
	if (!rb && tr1 && PRO == GEMV_PRO_NONE && (EPI & GEMV_EPI_RES))
		gemv_shape_plain1(K, ntot, sizeof(W), GEMV_SMS_SM90, &bt, &rb); /* the one-token o/down projection glmc emits */
	else if (!rb && tr1 && PRO == GEMV_PRO_RMSLATE && !(EPI & GEMV_EPI_GLU))
		gemv_shape_late1(K, ntot, sizeof(W), GEMV_SMS_SM90, &bt, &rb); /* the one-token q/k/v group glmc emits */
	else if (!rb)
		gemv_shape_h(K, ntot, sizeof(W), GEMV_SMS_SM90, &bt, &rb);
	if ((EPI & GEMV_EPI_GLU) && rb < 2)
		rb = 2; /* as glmc emits it: column pairs */
	constexpr int R1 = (EPI & GEMV_EPI_GLU) ? 2 : 1; /* GLU never runs one column a block (rb >= 2 above) */
	/* 8 columns a block: only the one-token late-norm launch (gemv_shape_late1) */
	constexpr int R8 = PRO == GEMV_PRO_RMSLATE && !(EPI & GEMV_EPI_GLU) ? 8 : 4;
	if (rb == 8 && (R8 != 8 || !tr1)) {
		printf("FAIL - gemv_fused: 8 columns a block asked of a launch that never has them (PRO %d, EPI %d)\n", PRO, EPI);
		n_fail++;
		free_all();
		return;
	}
	auto kern = rb == 8 ? g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, R8, 1>
		  : rb == 4 ? (tr1 ? g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, 4, 1> : g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, 4, 8>)
		    : rb == 2 ? (tr1 ? g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, 2, 1> : g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, 2, 8>)
			      : (tr1 ? g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, R1, 1> : g_gemv_fused<A, W, W, PRO, HAS_NW, EPI, R1, 8>);
	unsigned grid = c.grid
	                    ? c.grid
	                    : gemv_grid_h(ntot, rb, bt, PRO == GEMV_PRO_RMSNORM || PRO == GEMV_PRO_SWIGLU, GEMV_SMS_SM90);
	kern<<<grid, bt>>>(dy[0], dy[1], dy[2], dy[3], dw[0], dw[1], dw[2], dw[3], db[0], db[1], db[2], db[3],
				       upload(x), PRO == GEMV_PRO_SWIGLU ? upload(u) : nullptr, HAS_NW ? upload(nw) : nullptr,
				       dhs, dr, T, K, N[0], N[1], N[2], N[3], 1e-6f, s[0], s[1], s[2], s[3]);
	CK_LAUNCH();
	static const char *pro[] = {"plain", "rmsnorm", "swiglu", "rmsnorm-late"};
	std::string nm = fmt("gemv_fused A=%s W=%s T=%d K=%d %s%s M=%d", tname<A>(), tname<W>(), T, K, pro[PRO],
			     PRO != GEMV_PRO_NONE && PRO != GEMV_PRO_SWIGLU && !HAS_NW ? " (no weight)" : "", M);
	if (c.bias_mask)
		nm += fmt(" bias=0x%x", c.bias_mask);
	if (c.scaled >= 0)
		nm += fmt(" scale@%d", c.scaled);
	if (c.res)
		nm += c.res_inplace ? " residual(in place)" : " residual";
	if (EPI & GEMV_EPI_GLU)
		nm += " glu";
	if (c.misalign)
		nm += " misaligned-w";
	nm += fmt(" rb=%d bt=%d grid=%u tr=%d", rb, bt, grid, tr1 ? 1 : 8);
	for (int m = 0; m < M; m++)
		check_close(nm + fmt(" member %d (N=%d)", m, N[m]), to_float(download(dy[m], want[m].size())), want[m],
			    tol<A>());
	if (c.store)
		check_close(nm + " stored norm", to_float(download(dhs, h.size())), through<A>(h), tol<A>());
	free_all();
}

template <typename A, typename W> static void gemv_suite()
{
	const int Ts[] = {1, 3, 8, 17};
	/* K = 4224 does not fit one staging chunk for T >= 2 (the norm then takes its own pass over x);
	** K = 70 is not a multiple of the vector width (scalar path); N = 1 and 13 leave warps idle. */
	const int Ks[] = {64, 70, 4224};
	for (int T : Ts)
		for (int K : Ks) {
			GemvCase qkv = {T, K, {40, 16, 13}, GEMV_PRO_RMSNORM, true, false, 0x5, -1, false, false, false};
			run_gemv<A, W, GEMV_PRO_RMSNORM, true, 0>(qkv);
			GemvCase plain = {T, K, {33, 1, 8, 24}, GEMV_PRO_NONE, false, false, 0x2, -1, false, false, false};
			run_gemv<A, W, GEMV_PRO_NONE, false, 0>(plain);
			GemvCase down = {T, K, {48}, GEMV_PRO_SWIGLU, false, false, 0, -1, true, T % 2 == 1, false};
			run_gemv<A, W, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES>(down);
			/* gate and up with the SwiGLU as their epilogue (N = 37: a partial last pair group) */
			GemvCase glu = {T, K, {37, 37}, GEMV_PRO_RMSNORM, true, false, T % 2 ? 0x3u : 0u, -1, false, false, false};
			run_gemv<A, W, GEMV_PRO_RMSNORM, true, GEMV_EPI_GLU>(glu);
			/* the norm's scale after the dots (the one-token launch glmc emits for a norm group) */
			qkv.pro = glu.pro = GEMV_PRO_RMSLATE;
			run_gemv<A, W, GEMV_PRO_RMSLATE, true, 0>(qkv);
			run_gemv<A, W, GEMV_PRO_RMSLATE, true, GEMV_EPI_GLU>(glu);
		}
	for (int T : {1, 8}) {
		/* the GLU epilogue at emitted shapes of 2 and 4 columns a block, blocks looping, one warp */
		GemvCase glu2 = {T, 2048, {700, 700}, GEMV_PRO_RMSNORM, true, false, 0, -1, false, false, false};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, GEMV_EPI_GLU>(glu2);
		GemvCase glu4 = {T, 512, {1500, 1500}, GEMV_PRO_NONE, false, false, 0, -1, false, false, false};
		run_gemv<A, W, GEMV_PRO_NONE, false, GEMV_EPI_GLU>(glu4);
		GemvCase gluloop = {T, 1536, {301, 301}, GEMV_PRO_RMSNORM, true, false, 0x1, -1, false, false, false, 4, 128, 5};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, GEMV_EPI_GLU>(gluloop);
		GemvCase gluw = {T, 70, {9, 9}, GEMV_PRO_NONE, false, false, 0x2, -1, false, false, true, 2, 32};
		run_gemv<A, W, GEMV_PRO_NONE, false, GEMV_EPI_GLU>(gluw);
	}
	for (int T : {1, 8}) {
		GemvCase store = {T, 4224, {20, 7}, GEMV_PRO_RMSNORM, false, true, 0, -1, false, false, false};
		run_gemv<A, W, GEMV_PRO_RMSNORM, false, 0>(store);
		GemvCase store2 = {T, 256, {9}, GEMV_PRO_RMSNORM, true, true, 0, -1, false, false, false};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 0>(store2);
		GemvCase scaled = {T, 192, {64, 12, 32, 8}, GEMV_PRO_RMSNORM, true, false, 0, 3, false, false, false};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 8>(scaled);
		GemvCase res = {T, 128, {64}, GEMV_PRO_NONE, false, false, 1, -1, true, true, false};
		run_gemv<A, W, GEMV_PRO_NONE, false, GEMV_EPI_RES>(res);
		/* the o and down projections at their one-token shape (gemv_shape_plain1: 128 threads from rows
		** of 256 vectors; 1 column a block under 528 rows, 2 from 528, 4 from 1056), T = 8 at
		** gemv_shape_h's */
		GemvCase pres = {T, 4224, {700}, GEMV_PRO_NONE, false, false, 1, -1, true, false, false};
		run_gemv<A, W, GEMV_PRO_NONE, false, GEMV_EPI_RES>(pres);
		GemvCase pres1 = {T, 2048, {333}, GEMV_PRO_NONE, false, false, 0, -1, true, true, true};
		run_gemv<A, W, GEMV_PRO_NONE, false, GEMV_EPI_RES>(pres1);
		/* from 1056 rows 4 columns a block of 128 (Llama-3-8B's o and down, bench/NOTES.md entry 38) */
		GemvCase pres4 = {T, 2048, {1100}, GEMV_PRO_NONE, false, false, 1, -1, true, true, false};
		run_gemv<A, W, GEMV_PRO_NONE, false, GEMV_EPI_RES>(pres4);
		GemvCase mis = {T, 72, {40, 24}, GEMV_PRO_RMSNORM, true, false, 0x3, -1, false, false, true};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 0>(mis);
		/* emitted shapes with 2 and 4 columns per block (blocks span members), and forced ones: blocks
		** wider than the row (threads with no vector still join the norm's reduction), one warp */
		GemvCase wide = {T, 2048, {600, 300, 230}, GEMV_PRO_RMSNORM, true, true, 0x2, -1, false, false, false};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 0>(wide);
		GemvCase wide2 = {T, 1024, {700}, GEMV_PRO_SWIGLU, false, false, 0, -1, true, T == 1, false};
		run_gemv<A, W, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES>(wide2);
		GemvCase odd = {T, 136, {5, 7, 3}, GEMV_PRO_RMSNORM, true, true, 0x1, 2, false, false, false, 4, 256};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 4>(odd);
		GemvCase warp1 = {T, 4224, {9, 2}, GEMV_PRO_RMSNORM, false, true, 0, -1, false, false, false, 2, 32};
		run_gemv<A, W, GEMV_PRO_RMSNORM, false, 0>(warp1);
		GemvCase mis4 = {T, 70, {11}, GEMV_PRO_SWIGLU, false, false, 1, -1, true, false, true, 4, 64};
		run_gemv<A, W, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES>(mis4);
		/* few blocks looping over many groups, with the prologue staged and (K = 9000 at T = 8 and f32,
		** or 17000) formed per element */
		GemvCase loop = {T, 1536, {300, 44}, GEMV_PRO_RMSNORM, true, true, 0x1, 1, false, false, false, 4, 128, 5};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 2>(loop);
		GemvCase big = {T, 9000, {70}, GEMV_PRO_SWIGLU, false, false, 0, -1, true, false, false, 2, 256, 3};
		run_gemv<A, W, GEMV_PRO_SWIGLU, false, GEMV_EPI_RES>(big);
		GemvCase big2 = {T, 17000, {33}, GEMV_PRO_RMSNORM, true, true, 0, -1, false, false, false, 4, 256, 2};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 0>(big2);
		GemvCase one8 = {T, 1024, {40, 7}, GEMV_PRO_RMSNORM, true, true, 0x1, -1, false, false, false, 2, 64, 4, true};
		run_gemv<A, W, GEMV_PRO_RMSNORM, true, 0>(one8);
		/* RMSLATE at emitted shapes (Llama's QKV widths scaled down, a GLU at 2 columns a block), with a
		** bias, a scale, no norm weight, misaligned weights, blocks wider than the row, and few blocks
		** looping (each group sums the squares again) */
		const int L = GEMV_PRO_RMSLATE;
		GemvCase lqkv = {T, 4096, {512, 128, 128}, L, true, true, 0x2, -1, false, false, false};
		run_gemv<A, W, L, true, 0>(lqkv);
		/* at T = 1 8 columns a block of 128 threads (gemv_shape_late1: rows of 512 vectors, 2112 rows
		** and more; 2115 leaves the last block 3 columns), in f32 K 2048 is 512 vectors too */
		GemvCase lqkv8 = {T, 2048 * (int)(4 / sizeof(W)), {1539, 288, 288}, L, true, true, 0x4, -1, false, false, false};
		run_gemv<A, W, L, true, 0>(lqkv8);
		GemvCase lglu = {T, 2048, {700, 700}, L, true, false, 0x1, -1, false, false, false};
		run_gemv<A, W, L, true, GEMV_EPI_GLU>(lglu);
		GemvCase lqb = {T, 768, {640}, L, true, false, 0, -1, false, false, false};
		run_gemv<A, W, L, true, 0>(lqb);
		GemvCase lscaled = {T, 192, {64, 12, 32, 8}, L, true, false, 0, 3, false, false, false};
		run_gemv<A, W, L, true, 8>(lscaled);
		GemvCase lnow = {T, 4224, {20, 7}, L, false, true, 0, -1, false, false, false};
		run_gemv<A, W, L, false, 0>(lnow);
		GemvCase lmis = {T, 72, {40, 24}, L, true, false, 0x3, -1, false, false, true};
		run_gemv<A, W, L, true, 0>(lmis);
		GemvCase lodd = {T, 136, {5, 7, 3}, L, true, false, 0x1, 2, false, false, false, 4, 256};
		run_gemv<A, W, L, true, 4>(lodd);
		GemvCase lloop = {T, 1536, {300, 44}, L, true, true, 0x1, 1, false, false, false, 4, 128, 5};
		run_gemv<A, W, L, true, 2>(lloop);
		GemvCase lone8 = {T, 1024, {40, 7}, L, true, false, 0x1, -1, false, false, false, 2, 64, 4, true};
		run_gemv<A, W, L, true, 0>(lone8);
	}
}

/* Rotary of q and k (after per-head norms when NORM) with the k/v cache writes. */
template <typename A, typename NW, bool NORM, bool HW, bool IL>
static void test_rope_qk_kv(int T, int H, int G, int D, int Dv, int R, int S)
{
	std::vector<A> q = to_type<A>(rnd((size_t)T * H * D, -2.0f, 2.0f)), k = to_type<A>(rnd((size_t)T * G * D, -2.0f, 2.0f));
	std::vector<A> v = to_type<A>(rnd((size_t)T * G * Dv));
	std::vector<NW> qw = to_type<NW>(rnd(D, 0.5f, 1.5f)), kw = to_type<NW>(rnd(D, 0.5f, 1.5f));
	std::vector<int> pos(T);
	int p0 = (int)(rand64() % (uint64_t)(S - T));
	for (int t = 0; t < T; t++)
		pos[t] = p0 + t;
	RefRope rr = {};
	rr.head_dim = D, rr.rot_dim = R, rr.interleaved = IL, rr.theta = 10000.0;
	std::vector<float> inv(R / 2);
	float cs;
	ref_rope_freqs(&rr, inv.data(), &cs);
	std::vector<float> qf = to_float(q), kf = to_float(k), qwf = to_float(qw), kwf = to_float(kw);
	if (NORM) {
		std::vector<float> t1(qf.size()), t2(kf.size());
		ref_rmsnorm(t1.data(), qf.data(), HW ? qwf.data() : NULL, T * H, D, 1e-6f);
		ref_rmsnorm(t2.data(), kf.data(), HW ? kwf.data() : NULL, T * G, D, 1e-6f);
		qf = through<A>(t1), kf = through<A>(t2);
	}
	std::vector<float> wq(qf.size()), wk(kf.size());
	ref_rope(wq.data(), qf.data(), pos.data(), T, H, &rr);
	ref_rope(wk.data(), kf.data(), pos.data(), T, G, &rr);
	wq = through<A>(wq), wk = through<A>(wk);
	A *dqo = poisoned<A>(wq.size()), *dko = poisoned<A>(wk.size());
	A *dkc = poisoned<A>((size_t)S * G * D), *dvc = poisoned<A>((size_t)S * G * Dv);
	float *dinv = upload(inv);
	g_rope_qk_kv<A, NW, NORM, HW, IL><<<dim3(H + G, T), 128>>>(dqo, dko, dkc, dvc, upload(q), upload(k), upload(v),
								     HW ? upload(qw) : nullptr, HW ? upload(kw) : nullptr,
								     upload(pos), dinv, dinv, cs, cs, H, G, D, Dv, R, 1e-6f);
	CK_LAUNCH();
	std::string nm = fmt("rope_qk_kv A=%s T=%d H=%d G=%d D=%d Dv=%d R=%d%s%s", tname<A>(), T, H, G, D, Dv, R,
			     NORM ? (HW ? " norm" : " norm(no weight)") : "", IL ? " interleaved" : "");
	std::vector<A> ko = download(dko, wk.size()), kc = download(dkc, (size_t)S * G * D);
	std::vector<A> vc = download(dvc, (size_t)S * G * Dv);
	check_close(nm + " q", to_float(download(dqo, wq.size())), wq, tol<A>());
	check_close(nm + " k", to_float(ko), wk, tol<A>());
	/* cache rows pos[t] hold exactly the stored k rows and v; the row after the step stays untouched */
	bool same = true;
	for (int t = 0; t < T; t++) {
		same &= !memcmp(&kc[(size_t)pos[t] * G * D], &ko[(size_t)t * G * D], sizeof(A) * G * D);
		same &= !memcmp(&vc[(size_t)pos[t] * G * Dv], &v[(size_t)t * G * Dv], sizeof(A) * G * Dv);
	}
	check(same, nm + " cache rows written", "a cache row differs from the stored k or v row");
	int after = pos[T - 1] + 1;
	bool untouched = true;
	for (size_t i = 0; i < (size_t)G * D; i++)
		untouched &= isnan(h_to_f(kc[(size_t)after * G * D + i]));
	check(untouched, nm + " other cache rows untouched", "row after the step was written");
	free_all();
}

/*
** A 1-token step's attention with the rotary and the cache writes folded in (k_attn_step_rope), head rows
** of D = ROWB / sizeof(A) dims, H q heads in G groups, R rotated dims, at position p of sequence slot
** `slot` (of nslots, S rows each). Rows 0..p-1 of the slot hold random keys and values; every other row of
** the caches, and the output, start poisoned (NaN), so a read of row p before it is written, or of
** another slot, fails. The reference: ref_rope of q and k (rounded to A), ref_attention over those rows.
** Cache row p must hold exactly what k_rope_qk_kv stores for the same inputs (the rotary bit for bit)
** and the raw v; no other row may change.
*/
template <typename A, int ROWB, bool IL>
static void test_attn_rope(int H, int G, int R, int p, int slot, int nslots, int sc)
{
	const int D = ROWB / (int)sizeof(A), S = p + 40;
	std::vector<A> q = to_type<A>(rnd((size_t)H * D, -2.0f, 2.0f)), k = to_type<A>(rnd((size_t)G * D, -2.0f, 2.0f));
	std::vector<A> v = to_type<A>(rnd((size_t)G * D));
	RefRope rr = {};
	rr.head_dim = D, rr.rot_dim = R, rr.interleaved = IL, rr.theta = 10000.0, rr.scaling = sc;
	rr.factor = sc == ROPE_LLAMA3 ? 8 : 4, rr.orig_ctx = sc == ROPE_LLAMA3 ? 64 : 4096; /* llama3: most pairs scaled */
	rr.low_freq_factor = 1, rr.high_freq_factor = 4;
	std::vector<float> inv(R / 2);
	float cs;
	ref_rope_freqs(&rr, inv.data(), &cs);
	std::vector<float> qf = to_float(q), kf = to_float(k), wq(qf.size()), wk(kf.size());
	ref_rope(wq.data(), qf.data(), &p, 1, H, &rr);
	ref_rope(wk.data(), kf.data(), &p, 1, G, &rr);
	wq = through<A>(wq), wk = through<A>(wk);
	/* the caches: poisoned, then rows 0..p-1 of the slot random */
	size_t row = (size_t)G * D, n = (size_t)nslots * S * row;
	std::vector<A> kc0(n), vc0(n);
	memset(kc0.data(), 0xFF, n * sizeof(A)), memset(vc0.data(), 0xFF, n * sizeof(A));
	std::vector<A> kr = to_type<A>(rnd((size_t)p * row)), vr = to_type<A>(rnd((size_t)p * row));
	size_t at = (size_t)slot * S * row;
	std::copy(kr.begin(), kr.end(), kc0.begin() + at), std::copy(vr.begin(), vr.end(), vc0.begin() + at);
	std::vector<float> kcf((size_t)S * row), vcf((size_t)S * row), want((size_t)H * D);
	for (size_t i = 0; i < kr.size(); i++)
		kcf[i] = h_to_f(kr[i]), vcf[i] = h_to_f(vr[i]);
	float scale = 1.0f / sqrtf((float)D);
	std::vector<float> vf = to_float(v);
	ref_attention(want.data(), wq.data(), wk.data(), vf.data(), kcf.data(), vcf.data(), &p, 1, H, G, D, D, S, scale);
	A *dkc = upload(kc0), *dvc = upload(vc0), *dy = poisoned<A>((size_t)H * D);
	A *dq = upload(q), *dk = upload(k), *dv = upload(v);
	int *dpos = upload(std::vector<int>{p}), *dseq = upload(std::vector<int>{slot});
	float *dinv = upload(inv);
	g_attn_step_rope<A, ROWB, IL><<<H, 512>>>(dy, dkc, dvc, dq, dk, dv, dpos, dinv, dinv, cs, cs, H, G, R,
						 scale, dseq, S);
	CK_LAUNCH();
	/* what the unfused rotary stores for k (T = 1, slot 0 of scratch caches) */
	A *dqo = poisoned<A>((size_t)H * D), *dko = poisoned<A>(row);
	A *skc = poisoned<A>((size_t)(p + 1) * row), *svc = poisoned<A>((size_t)(p + 1) * row);
	g_rope_qk_kv<A, float, false, false, IL><<<dim3(H + G, 1), 128>>>(dqo, dko, skc, svc, dq, dk, dv, nullptr, nullptr,
									 dpos, dinv, dinv, cs, cs, H, G, D, D, R, 0.0f);
	CK_LAUNCH();
	std::string nm = fmt("attn_step_rope A=%s D=%d H=%d G=%d R=%d%s pos %d slot %d/%d%s", tname<A>(), D, H, G, R,
			     IL ? " interleaved" : "", p, slot, nslots, sc ? fmt(" %s", ref_rope_scaling_name(sc)).c_str() : "");
	check_close(nm + " out", to_float(download(dy, (size_t)H * D)), want, tol<A>());
	std::vector<A> kc = download(dkc, n), vc = download(dvc, n), ko = download(dko, row);
	size_t rp = at + (size_t)p * row;
	check(!memcmp(&kc[rp], ko.data(), sizeof(A) * row) && !memcmp(&vc[rp], v.data(), sizeof(A) * row),
	      nm + " cache row p", "row p differs from k_rope_qk_kv's rotated k or the raw v");
	check(!memcmp(&kc[0], &kc0[0], sizeof(A) * rp) && !memcmp(&vc[0], &vc0[0], sizeof(A) * rp) &&
		      !memcmp(&kc[rp + row], &kc0[rp + row], sizeof(A) * (n - rp - row)) &&
		      !memcmp(&vc[rp + row], &vc0[rp + row], sizeof(A) * (n - rp - row)),
	      nm + " other cache rows untouched", "a row other than p changed");
	check_close(nm + " k rotated as ref_rope", to_float(ko), wk, tol<A>());
	free_all();
}

/* k_attn_step_rope for the row sizes of k_attn_step (128, 256 and 512 bytes). */
template <typename A> static void attn_rope_suite()
{
	constexpr int B = (int)sizeof(A); /* D = ROWB / B: f32 32, 64, 128; bf16 64, 128, 256 */
	const int P = ROPE_PLAIN;
	test_attn_rope<A, 512, false>(8, 2, 512 / B, 0, 0, 1, P);             /* pos 0: only the step's key */
	test_attn_rope<A, 512, false>(8, 2, 512 / B, 700, 2, 3, P);           /* several rounds, GQA 4, slot 2 */
	test_attn_rope<A, 512, true>(4, 4, 512 / B - 16, 5, 1, 2, ROPE_YARN); /* H/G 1, R < D, yarn */
	test_attn_rope<A, 256, false>(8, 2, 256 / B / 2, 130, 0, 1, P);
	test_attn_rope<A, 256, true>(6, 3, 256 / B, 2047, 1, 2, P);           /* large pos */
	test_attn_rope<A, 256, false>(4, 1, 256 / B, 300, 1, 2, P);
	test_attn_rope<A, 256, false>(8, 2, 256 / B, 90, 0, 1, ROPE_LLAMA3);  /* Llama 3.1+ */
	test_attn_rope<A, 128, false>(4, 1, 128 / B, 63, 0, 1, P);
	test_attn_rope<A, 128, true>(16, 4, 128 / B / 2, 4000, 0, 1, ROPE_YARN);
}

template <typename T> static void shuffle(std::vector<T> &v)
{
	for (size_t i = v.size(); i > 1; i--)
		std::swap(v[i - 1], v[rand64() % i]);
}

/* The rope table of a RefRope, uploaded, and its cos/sin multiplier. */
static float *rope_table(const RefRope &r, float *cs)
{
	std::vector<float> inv(r.rot_dim / 2);
	ref_rope_freqs(&r, inv.data(), cs);
	return upload(inv);
}

/* Rows [c0, c0+n) of each of the R rows of x[R, C], as a [R, n] array. */
static std::vector<float> cols(const std::vector<float> &x, int R, int C, int c0, int n)
{
	std::vector<float> y((size_t)R * n);
	for (int r = 0; r < R; r++)
		for (int i = 0; i < n; i++)
			y[(size_t)r * n + i] = x[(size_t)r * C + c0 + i];
	return y;
}

/*
** MLA latent preparation: inputs and references. The latent rows [rmsnorm(kv[:, :L]), rope(kv[:, L:])]
** and the indexer key rope(layernorm(ik)) (when Di > 0), each rounded to A where the nodes store it.
*/
template <typename A, typename NW> struct KvCase {
	int T, L, Dr, R, Di, Ri, S;
	bool il;
	std::vector<int> pos;
	std::vector<A> kv, ik;
	std::vector<NW> cw, iw, ib;
	RefRope rr, ri;
	std::vector<float> latent, key; /* the references */

	KvCase(int T_, int L_, int Dr_, int R_, int Di_, int Ri_, bool il_, const std::vector<int> &pos_)
		: T(T_), L(L_), Dr(Dr_), R(R_), Di(Di_), Ri(Ri_), S(pos_.back() + 5), il(il_), pos(pos_)
	{
		int Dk = L + Dr;
		kv = to_type<A>(rnd((size_t)T * Dk, -2.0f, 2.0f)), ik = to_type<A>(rnd((size_t)T * Di, -2.0f, 2.0f));
		cw = to_type<NW>(rnd(L, 0.5f, 1.5f)), iw = to_type<NW>(rnd(Di, 0.5f, 1.5f)), ib = to_type<NW>(rnd(Di));
		rr = {}, ri = {};
		rr.head_dim = Dr, rr.rot_dim = R, rr.interleaved = il, rr.theta = 10000.0;
		ri.head_dim = Di, ri.rot_dim = Ri, ri.interleaved = !il, ri.theta = 50000.0;
		std::vector<float> kvf = to_float(kv), c = cols(kvf, T, Dk, 0, L), kp = cols(kvf, T, Dk, L, Dr);
		std::vector<float> cn(c.size()), kr(kp.size()), cwf = to_float(cw);
		ref_rmsnorm(cn.data(), c.data(), cwf.data(), T, L, 1e-6f);
		cn = through<A>(cn);
		ref_rope(kr.data(), kp.data(), pos.data(), T, 1, &rr);
		kr = through<A>(kr);
		latent.resize((size_t)T * Dk);
		for (int t = 0; t < T; t++) {
			memcpy(&latent[(size_t)t * Dk], &cn[(size_t)t * L], sizeof(float) * L);
			memcpy(&latent[(size_t)t * Dk + L], &kr[(size_t)t * Dr], sizeof(float) * Dr);
		}
		if (Di) {
			std::vector<float> ikf = to_float(ik), iwf = to_float(iw), ibf = to_float(ib), kn(ikf.size());
			key.resize(ikf.size());
			ref_layernorm(kn.data(), ikf.data(), iwf.data(), ibf.data(), T, Di, 1e-6f);
			kn = through<A>(kn);
			ref_rope(key.data(), kn.data(), pos.data(), T, 1, &ri);
			key = through<A>(key);
		}
	}
	std::string name() const
	{
		return fmt("T=%d L=%d Dr=%d R=%d%s", T, L, Dr, R, Di ? fmt(" indexer Di=%d Ri=%d", Di, Ri).c_str() : "");
	}
	/* the outputs against the references, cache rows bit for bit against the rows stored */
	void check_out(const std::string &nm, A *dl, A *dc, A *dk, A *dic) const
	{
		int Dk = L + Dr;
		std::vector<A> lat = download(dl, latent.size()), cache = download(dc, (size_t)S * Dk);
		check_close(nm + " latent", to_float(lat), latent, tol<A>());
		bool same = isnan(h_to_f(cache[0]));
		for (int t = 0; t < T; t++)
			same &= !memcmp(&cache[(size_t)pos[t] * Dk], &lat[(size_t)t * Dk], sizeof(A) * Dk);
		check(same, nm + " latent cache rows", "a cache row differs from the stored latent (or row 0 was written)");
		if (!Di)
			return;
		std::vector<A> k = download(dk, key.size()), ic = download(dic, (size_t)S * Di);
		check_close(nm + " indexer key", to_float(k), key, tol<A>());
		bool ks = true;
		for (int t = 0; t < T; t++)
			ks &= !memcmp(&ic[(size_t)pos[t] * Di], &k[(size_t)t * Di], sizeof(A) * Di);
		check(ks, nm + " indexer key cache rows", "a cache row differs from the stored key");
	}
};

/*
** MLA query preparation: inputs and references. qabs[t, h] = [q_nope·W_UK[h], rope(q_pe)] (W_UK [H, Dn, L],
** or [H, L, Dn] when tb) and the indexer query's rope (when Hi > 0), rounded to A where stored.
*/
template <typename A, typename W> struct QCase {
	int T, H, Dn, Dr, R, L, Hi, Di, Ri;
	bool tb, il;
	std::vector<int> pos;
	std::vector<A> q, iq;
	std::vector<W> wk;
	RefRope rr, ri;
	std::vector<float> qabs, iqo;

	QCase(int T_, int H_, int Dn_, int Dr_, int R_, int L_, int Hi_, int Di_, int Ri_, bool tb_, bool il_,
	      const std::vector<int> &pos_)
		: T(T_), H(H_), Dn(Dn_), Dr(Dr_), R(R_), L(L_), Hi(Hi_), Di(Di_), Ri(Ri_), tb(tb_), il(il_), pos(pos_)
	{
		int Dq = Dn + Dr, Do = L + Dr;
		q = to_type<A>(rnd((size_t)T * H * Dq)), iq = to_type<A>(rnd((size_t)T * Hi * Di));
		wk = to_type<W>(rnd((size_t)H * Dn * L));
		rr = {}, ri = {};
		rr.head_dim = Dr, rr.rot_dim = R, rr.interleaved = il, rr.theta = 10000.0;
		ri.head_dim = Di, ri.rot_dim = Ri, ri.interleaved = il, ri.theta = 10000.0;
		std::vector<float> qf = to_float(q), wf = to_float(wk);
		qabs.resize((size_t)T * H * Do);
		for (int h = 0; h < H; h++) {
			std::vector<float> qn((size_t)T * Dn), qp((size_t)T * Dr), ql((size_t)T * L), qr((size_t)T * Dr);
			for (int t = 0; t < T; t++) {
				memcpy(&qn[(size_t)t * Dn], &qf[((size_t)t * H + h) * Dq], sizeof(float) * Dn);
				memcpy(&qp[(size_t)t * Dr], &qf[((size_t)t * H + h) * Dq + Dn], sizeof(float) * Dr);
			}
			if (tb)
				ref_matmul_tb(ql.data(), qn.data(), wf.data() + (size_t)h * Dn * L, 1, T, Dn, L);
			else
				ref_matmul(ql.data(), qn.data(), wf.data() + (size_t)h * Dn * L, 1, T, Dn, L);
			ref_rope(qr.data(), qp.data(), pos.data(), T, 1, &rr);
			ql = through<A>(ql), qr = through<A>(qr);
			for (int t = 0; t < T; t++) {
				memcpy(&qabs[((size_t)t * H + h) * Do], &ql[(size_t)t * L], sizeof(float) * L);
				memcpy(&qabs[((size_t)t * H + h) * Do + L], &qr[(size_t)t * Dr], sizeof(float) * Dr);
			}
		}
		if (Hi) {
			std::vector<float> iqf = to_float(iq);
			iqo.resize(iqf.size());
			ref_rope(iqo.data(), iqf.data(), pos.data(), T, Hi, &ri);
			iqo = through<A>(iqo);
		}
	}
	int blocks() const
	{
		return H * (tb ? (L + 7) / 8 : (L + 63) / 64) + Hi; /* mla_q_nl */
	}
	std::string name() const
	{
		return fmt("W=%s%s T=%d H=%d Dn=%d Dr=%d R=%d L=%d Hi=%d", tname<W>(), tb ? " (W_UK transposed)" : "", T, H,
			   Dn, Dr, R, L, Hi);
	}
	void check_out(const std::string &nm, A *dq, A *di) const
	{
		check_close(nm + " query", to_float(download(dq, qabs.size())), qabs, tol<A>());
		if (Hi)
			check_close(nm + " indexer query", to_float(download(di, iqo.size())), iqo, tol<A>());
	}
};

static std::vector<int> positions(int T, int p0, int stride)
{
	std::vector<int> pos(T);
	for (int t = 0; t < T; t++)
		pos[t] = p0 + stride * t;
	return pos;
}

template <typename A, typename NW, bool IL, bool IDX> static void test_mla_kvprep(int T, int L, int Dr, int R, int Di, int Ri)
{
	KvCase<A, NW> c(T, L, Dr, R, IDX ? Di : 0, IDX ? Ri : 0, IL, positions(T, 3, 1));
	float cs, csi = 1.0f;
	float *dfr = rope_table(c.rr, &cs), *dfi = IDX ? rope_table(c.ri, &csi) : nullptr;
	int Dk = L + Dr;
	A *dl = poisoned<A>(c.latent.size()), *dc = poisoned<A>((size_t)c.S * Dk), *dk = poisoned<A>(c.key.size());
	A *dic = poisoned<A>((size_t)c.S * (IDX ? Di : 1));
	g_mla_kvprep<A, NW, NW, IL, !IL><<<dim3(IDX ? 2 : 1, T), 256>>>(
		dl, dc, IDX ? dk : nullptr, IDX ? dic : nullptr, upload(c.kv), upload(c.cw), IDX ? upload(c.ik) : nullptr,
		IDX ? upload(c.iw) : nullptr, IDX ? upload(c.ib) : nullptr, upload(c.pos), dfr, cs, dfi, csi, L, Dr, R,
		IDX ? Di : 0, IDX ? Ri : 0, 1e-6f, 1e-6f);
	CK_LAUNCH();
	c.check_out(fmt("mla_kvprep A=%s ", tname<A>()) + c.name(), dl, dc, dk, dic);
	free_all();
}

template <typename A, typename W, bool TB, bool IL>
static void test_mla_qprep(int T, int H, int Dn, int Dr, int R, int L, int Hi, int Di, int Ri)
{
	QCase<A, W> c(T, H, Dn, Dr, R, L, Hi, Di, Ri, TB, IL, positions(T, 11, 2));
	float cs, csi = 1.0f;
	float *dfr = rope_table(c.rr, &cs), *dfi = Hi ? rope_table(c.ri, &csi) : nullptr;
	A *dq = poisoned<A>(c.qabs.size()), *di = poisoned<A>(c.iqo.size());
	g_mla_qprep<A, W, TB, IL, IL><<<c.blocks(), 256>>>(dq, Hi ? di : nullptr, upload(c.q), upload(c.wk),
							  Hi ? upload(c.iq) : nullptr, upload(c.pos), dfr, cs, dfi, csi, T, H,
							  Dn, Dr, R, L, Hi, Di, Ri);
	CK_LAUNCH();
	c.check_out(fmt("mla_qprep A=%s ", tname<A>()) + c.name(), dq, di);
	free_all();
}

/* Both preparations in one launch (k_mla_prep), as glmc emits them for decode steps. */
template <typename A, typename W, bool TB, typename NW, bool IL, bool IDX>
static void test_mla_prep(int T, int H, int Dn, int Dr, int L, int Hi, int Di, int Ri)
{
	std::vector<int> pos = positions(T, 5, 1);
	QCase<A, W> q(T, H, Dn, Dr, Dr, L, IDX ? Hi : 0, Di, Ri, TB, IL, pos);
	KvCase<A, NW> k(T, L, Dr, Dr, IDX ? Di : 0, Ri, IL, pos);
	float cs, csi = 1.0f, kcs, kcsi = 1.0f;
	float *dfr = rope_table(q.rr, &cs), *dfi = IDX ? rope_table(q.ri, &csi) : nullptr;
	float *kfr = rope_table(k.rr, &kcs), *kfi = IDX ? rope_table(k.ri, &kcsi) : nullptr;
	int Dk = L + Dr;
	A *dq = poisoned<A>(q.qabs.size()), *di = poisoned<A>(q.iqo.size());
	A *dl = poisoned<A>(k.latent.size()), *dc = poisoned<A>((size_t)k.S * Dk), *dk = poisoned<A>(k.key.size());
	A *dic = poisoned<A>((size_t)k.S * (IDX ? Di : 1));
	g_mla_prep<A, W, TB, IL, IL, NW, NW, IL, !IL><<<dim3(q.blocks() + (IDX ? 2 : 1), T), 256>>>(
		dq, IDX ? di : nullptr, upload(q.q), upload(q.wk), IDX ? upload(q.iq) : nullptr, upload(pos), dfr, cs, dfi,
		csi, T, H, Dn, Dr, Dr, L, IDX ? Hi : 0, Di, Ri, dl, dc, IDX ? dk : nullptr, IDX ? dic : nullptr, upload(k.kv),
		upload(k.cw), IDX ? upload(k.ik) : nullptr, IDX ? upload(k.iw) : nullptr, IDX ? upload(k.ib) : nullptr, kfr,
		kcs, kfi, kcsi, Dr, IDX ? Di : 0, Ri, 1e-6f, 1e-6f);
	CK_LAUNCH();
	std::string nm = fmt("mla_prep A=%s ", tname<A>());
	q.check_out(nm + q.name(), dq, di);
	k.check_out(nm + k.name(), dl, dc, dk, dic);
	free_all();
}

/* The value absorb from the attention's [T, H, Dv] rows to [T, H, Do], against ref_matmul_tb per head. */
template <typename A, typename W> static void test_mla_vabsorb(int T, int H, int Dv, int Do)
{
	std::vector<A> o = to_type<A>(rnd((size_t)T * H * Dv));
	std::vector<W> wv = to_type<W>(rnd((size_t)H * Do * Dv));
	std::vector<float> of = to_float(o), wf = to_float(wv), out((size_t)T * H * Do);
	for (int h = 0; h < H; h++) {
		std::vector<float> oh((size_t)T * Dv), r((size_t)T * Do);
		for (int t = 0; t < T; t++)
			memcpy(&oh[(size_t)t * Dv], &of[((size_t)t * H + h) * Dv], sizeof(float) * Dv);
		ref_matmul_tb(r.data(), oh.data(), wf.data() + (size_t)h * Do * Dv, 1, T, Dv, Do);
		for (int t = 0; t < T; t++)
			memcpy(&out[((size_t)t * H + h) * Do], &r[(size_t)t * Do], sizeof(float) * Do);
	}
	out = through<A>(out);
	A *dout = poisoned<A>(out.size());
	g_mla_vabsorb<A, W><<<dim3(blocks(Do, 8 * MLA_VR), blocks(T, 8), H), 256>>>(dout, upload(o), upload(wv), T, H, Dv, Do);
	CK_LAUNCH();
	check_close(fmt("mla_vabsorb A=%s W=%s T=%d H=%d Dv=%d Do=%d", tname<A>(), tname<W>(), T, H, Dv, Do),
		    to_float(download(dout, out.size())), out, tol<A>());
	free_all();
}

/* Routing and weights in one kernel: the ids exactly as ref_moe_route, the weights as ref_moe_weights. */
template <typename A> static void test_moe_route_weights(int T, int E, int k, int ng, int tg, int sig, int norm)
{
	std::vector<A> lg = to_type<A>(rnd((size_t)T * E, -3.0f, 3.0f));
	std::vector<float> lf = to_float(lg), bf = rnd(E, -0.2f, 0.2f), ww((size_t)T * k);
	std::vector<int> want((size_t)T * k);
	ref_moe_route(want.data(), lf.data(), bf.data(), T, E, k, ng, tg, sig);
	ref_moe_weights(ww.data(), lf.data(), want.data(), T, E, k, sig, norm, 2.5f);
	int *di = poisoned<int>(want.size());
	A *dw = poisoned<A>(ww.size());
	g_moe_route_weights<A, float><<<T, 256>>>(di, dw, upload(lg), upload(bf), E, k, ng, tg, sig, sig, norm, 2.5f);
	CK_LAUNCH();
	std::string nm = fmt("moe_route_weights A=%s T=%d E=%d k=%d groups %d/%d %s%s", tname<A>(), T, E, k, ng, tg,
			     sig ? "sigmoid" : "softmax", norm ? " norm" : "");
	std::vector<int> got = download(di, want.size());
	check(got == want, nm + " ids", "the chosen experts differ from ref_moe_route's");
	check_close(nm + " weights", to_float(download(dw, ww.size())), ww, tol<A>());
	free_all();
}

/*
** Logits for the routing matrix, row t by kind (t + shift) % 4: random in [-3, 3], all equal, in equal
** pairs, or drawn from {-1, 0, 1} (ties everywhere, inside groups and between them). With ties the bias
** is drawn from {-0.1, 0, 0.1}, so choices still tie after it; else it is random in [-0.2, 0.2].
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

/*
** The fused routing over a matrix of cases: ids exactly as ref_moe_route, weights (their own function
** wsig) within an ulp of A of ref_moe_weights (both in double, rounded once). k in {1, 2, 4, 8} (those
** the groups allow), T = 1..8, bias on and off, norm on and off, rows of every tie kind. One check per
** configuration naming the first case that differs.
*/
template <typename A> static void test_moe_route_weights_matrix(int E, int ng, int tg, int sig, int wsig)
{
	int mant = std::is_same<A, float>::value ? 23 : 7;
	std::string bad;
	int cases = 0;
	for (int k : {1, 2, 4, 8}) {
		if (k > tg * (E / ng))
			continue;
		for (int T = 1; T <= 8; T++)
			for (int v = 0; v < 4; v++) {
				int use_bias = v & 1, norm = v >> 1;
				float scale = norm ? 2.5f : 1.8f;
				std::vector<A> lg = to_type<A>(route_logits(T, E, k + T));
				std::vector<float> lf = to_float(lg), bf = route_bias(E, (T + k) % 2 == 1);
				std::vector<float> ww((size_t)T * k);
				std::vector<int> want((size_t)T * k);
				ref_moe_route(want.data(), lf.data(), use_bias ? bf.data() : NULL, T, E, k, ng, tg, sig);
				ref_moe_weights(ww.data(), lf.data(), want.data(), T, E, k, wsig, norm, scale);
				int *di = poisoned<int>(want.size());
				A *dw = poisoned<A>(ww.size());
				g_moe_route_weights<A, float><<<T, 256>>>(di, dw, upload(lg), use_bias ? upload(bf) : nullptr, E, k,
									 ng, tg, sig, wsig, norm, scale);
				CK_LAUNCH();
				std::string at = fmt("k=%d T=%d%s%s", k, T, use_bias ? " bias" : "", norm ? " norm" : "");
				std::vector<int> got = download(di, want.size());
				std::vector<float> gw = to_float(download(dw, ww.size()));
				for (size_t i = 0; i < got.size() && bad.empty(); i++)
					if (got[i] != want[i])
						bad = fmt("%s: id %zu (token %zu) is %d, want %d", at.c_str(), i, i / k, got[i], want[i]);
				for (size_t i = 0; i < ww.size() && bad.empty(); i++) {
					float w = h_to_f(h_from_f<A>(ww[i]));
					float ulp = w == 0.0f || !isfinite(w) ? 0.0f : ldexpf(1.0f, ilogbf(w) - mant);
					if (!(fabsf(gw[i] - w) <= ulp))
						bad = fmt("%s: weight %zu is %.9g, want %.9g", at.c_str(), i, gw[i], w);
				}
				cases++;
				free_all();
			}
	}
	check(bad.empty(),
	      fmt("moe_route_weights A=%s E=%d groups %d/%d choice %s weights %s: %d cases (k 1-8, T 1-8, ties, bias "
		  "on/off, norm on/off)", tname<A>(), E, ng, tg, sig ? "sigmoid" : "softmax", wsig ? "sigmoid" : "softmax",
		  cases),
	      bad);
}

/* The experts' down projections with the shared expert and the residual in one kernel, after k_moe_up:
** against ref_moe_ffn + ref_swiglu/ref_linear + the adds, each rounded to A where the nodes store it. */
template <typename A, typename W, bool SH, bool RES> static void test_moe_down_fused(int T, int C, int F, int E, int k, int Fs)
{
	std::vector<A> x = to_type<A>(rnd((size_t)T * C)), w = to_type<A>(rnd((size_t)T * k, 0.1f, 1.0f));
	std::vector<A> g = to_type<A>(rnd((size_t)T * Fs, -2.0f, 2.0f)), u = to_type<A>(rnd((size_t)T * Fs));
	std::vector<A> r = to_type<A>(rnd((size_t)T * C));
	std::vector<W> gate = to_type<W>(rnd((size_t)E * F * C)), up = to_type<W>(rnd((size_t)E * F * C)),
		       down = to_type<W>(rnd((size_t)E * C * F)), sdown = to_type<W>(rnd((size_t)C * Fs));
	std::vector<int> idx;
	for (int t = 0; t < T; t++) {
		std::vector<int> ex(E);
		for (int e = 0; e < E; e++)
			ex[e] = e;
		shuffle(ex);
		for (int j = 0; j < k; j++)
			idx.push_back(t == 1 && j == 1 ? -1 : ex[j]);
	}
	std::vector<float> xf = to_float(x), wf = to_float(w), gf = to_float(gate), uf = to_float(up), df = to_float(down);
	std::vector<float> want((size_t)T * C);
	ref_moe_ffn(want.data(), xf.data(), idx.data(), wf.data(), gf.data(), uf.data(), df.data(), T, C, F, E, k);
	want = through<A>(want);
	if (SH) {
		std::vector<float> sgf = to_float(g), suf = to_float(u), sdf = to_float(sdown), h((size_t)T * Fs), y(want.size());
		ref_swiglu(h.data(), sgf.data(), suf.data(), h.size());
		h = through<A>(h);
		ref_linear(y.data(), h.data(), sdf.data(), NULL, T, Fs, C);
		y = through<A>(y);
		ref_add(want.data(), want.data(), y.data(), want.size(), want.size());
		want = through<A>(want);
	}
	if (RES) {
		std::vector<float> rf = to_float(r);
		ref_add(want.data(), rf.data(), want.data(), want.size(), want.size());
		want = through<A>(want);
	}
	int *didx = upload(idx);
	float *dhid = poisoned<float>((size_t)T * k * F);
	A *dr = upload(r), *dy = RES && T % 2 ? dr : poisoned<A>(want.size()); /* odd T: in place over the residual */
	g_moe_up<A, W><<<dim3(blocks(F, 8), k, T), 256>>>(dhid, upload(x), didx, upload(gate), upload(up), C, F, k);
	CK_LAUNCH();
	g_moe_down_fused<A, W, W, SH, RES><<<dim3(blocks(C, 8), T), 256>>>(dy, dhid, didx, upload(w), upload(down), C, F, k,
									   SH ? upload(sdown) : nullptr,
									   SH ? upload(g) : nullptr,
									   SH ? upload(u) : nullptr, Fs,
									   RES ? dr : nullptr);
	CK_LAUNCH();
	check_close(fmt("moe_down_fused A=%s W=%s T=%d C=%d F=%d E=%d k=%d%s%s", tname<A>(), tname<W>(), T, C, F, E, k,
			SH ? fmt(" shared Fs=%d", Fs).c_str() : "", RES ? (T % 2 ? " residual(in place)" : " residual") : ""),
		    to_float(download(dy, want.size())), want, tol<A>());
	free_all();
}

template <typename A> static void mla_moe_suite()
{
	for (int T : {1, 3, 8, 17}) {
		test_mla_kvprep<A, float, true, true>(T, 512, 64, 64, 128, 64);    /* GLM-5's latent and indexer key */
		test_mla_kvprep<A, bf16, false, false>(T, 32, 8, 8, 0, 0);         /* the fixtures' sizes, no indexer */
		test_mla_kvprep<A, float, true, true>(T, 70, 16, 12, 72, 40);       /* partial rotary, odd widths */
		test_mla_kvprep<A, float, false, true>(T, 1100, 64, 48, 300, 32);   /* past the register paths */
		test_mla_qprep<A, bf16, false, true>(T, 4, 192, 64, 64, 512, 3, 128, 64); /* GLM-5 per head (HF W_UK) */
		test_mla_qprep<A, f16, true, true>(T, 3, 192, 64, 64, 512, 0, 0, 0);    /* GGUF's transposed W_UK */
		test_mla_qprep<A, float, false, false>(T, 2, 16, 8, 8, 300, 2, 72, 40); /* L past one column block */
		test_mla_qprep<A, float, true, false>(T, 2, 40, 8, 6, 37, 1, 16, 16);
		test_mla_qprep<A, bf16, false, true>(T, 20, 192, 64, 64, 512, 0, 0, 0); /* GLM-4.7-Flash (HF W_UK) */
		test_mla_qprep<A, bf16, true, true>(T, 20, 192, 64, 64, 512, 0, 0, 0);  /* its GGUF layout */
		test_mla_qprep<A, f16, false, false>(T, 3, 24, 8, 8, 37, 0, 0, 0);     /* L % 4 != 0: scalar reads */
		test_mla_qprep<A, bf16, false, true>(T, 2, 20, 8, 8, 70, 1, 16, 16);   /* a partial column quad */
		test_mla_qprep<A, float, true, false>(T, 2, 37, 8, 8, 40, 0, 0, 0);    /* Dn % 4 != 0 (transposed) */
		test_mla_prep<A, bf16, false, float, true, true>(T, 4, 192, 64, 512, 3, 128, 64); /* GLM-5's shapes */
		test_mla_prep<A, f16, true, bf16, false, false>(T, 2, 16, 8, 32, 0, 0, 0);      /* the fixtures', GGUF */
		test_mla_vabsorb<A, bf16>(T, 4, 512, 256);
		test_mla_vabsorb<A, float>(T, 3, 512, 256);
		test_mla_vabsorb<A, f16>(T, 2, 40, 24);
		test_mla_vabsorb<A, float>(T, 2, 70, 13); /* odd widths */
		test_mla_vabsorb<A, bf16>(T, 20, 512, 256); /* GLM-4.7-Flash */
		test_mla_vabsorb<A, f16>(T, 3, 1024, 20);   /* the largest latent */
		test_moe_route_weights<A>(T, 256, 8, 8, 4, 1, 1);
		test_moe_route_weights<A>(T, 8, 2, 1, 1, 0, 0);
		test_moe_down_fused<A, bf16, true, true>(T, 256, 96, 8, 2, 128);
		test_moe_down_fused<A, float, true, false>(T, 70, 50, 8, 2, 33);
		test_moe_down_fused<A, f16, false, true>(T, 256, 96, 8, 2, 0);
		if (T > 8)
			continue;
		/* the pipelined path's batch bounds: GLM-4.7-Flash's rows (one batch each), rows of two batches
		** (bf16 F 4096, float F 1536), a shared row past the block's SwiGLU table (the fallback) */
		test_moe_down_fused<A, bf16, true, true>(T, 136, 1536, 6, 4, 1536);
		test_moe_down_fused<A, bf16, true, false>(T, 72, 4096, 4, 3, 2048);
		test_moe_down_fused<A, float, true, true>(T, 40, 1536, 5, 2, 520);
		test_moe_down_fused<A, float, true, true>(T, 24, 256, 3, 2, 4104);
	}
}

/* The fused routing over E of Mixtral, GLM-4.7-Flash, GLM-4.5, GLM-5 / DeepSeek-V3 (8 groups keep 4), the
** largest E (1024), and a choice by sigmoid with softmax weights (the two functions are separate). */
template <typename A> static void route_suite()
{
	const int cfg[][3] = {{8, 1, 1}, {8, 4, 2}, {64, 1, 1}, {64, 8, 4}, {160, 1, 1}, {160, 8, 3}, {256, 1, 1},
			      {256, 8, 4}, {1024, 32, 5}};
	for (auto &c : cfg)
		for (int sig = 0; sig < 2; sig++)
			test_moe_route_weights_matrix<A>(c[0], c[1], c[2], sig, sig);
	test_moe_route_weights_matrix<A>(256, 8, 4, 1, 0);
	test_moe_route_weights_matrix<A>(64, 1, 1, 0, 1);
}

template <typename A> static void activation_suite()
{
	for (int T : {1, 3, 8, 17}) {
		test_add_rmsnorm<A, float, true>(T, 1000, false);
		test_add_rmsnorm<A, bf16, true>(T, 70, true);
		test_add_rmsnorm<A, float, false>(T, 256, true);
	}
	/* rows held in registers up to 32 values a thread (GLM-5's 6144, the limit 8192), then the loop */
	for (int T : {1, 2}) {
		test_add_rmsnorm<A, float, true>(T, 6144, true);
		test_add_rmsnorm<A, bf16, true>(T, 8192, false);
		test_add_rmsnorm<A, float, true>(T, 8193, true);
		test_add_rmsnorm<A, bf16, false>(T, 12288, false);
	}
	gemv_suite<A, float>();
	gemv_suite<A, bf16>();
	gemv_suite<A, f16>();
	for (int T : {1, 3, 8, 17}) {
		test_rope_qk_kv<A, float, false, false, false>(T, 4, 2, 64, 64, 64, 40);
		test_rope_qk_kv<A, float, true, true, false>(T, 8, 2, 128, 128, 128, 40);
		test_rope_qk_kv<A, bf16, true, true, true>(T, 6, 3, 72, 40, 64, 40);
		test_rope_qk_kv<A, float, true, false, true>(T, 2, 1, 256, 128, 64, 40);
	}
	attn_rope_suite<A>();
}

int main(void)
{
	int dev;
	cudaDeviceProp prop;
	CK(cudaGetDevice(&dev));
	CK(cudaGetDeviceProperties(&prop, dev));
	printf("# device %d: %s (sm_%d%d)\n", dev, prop.name, prop.major, prop.minor);
	activation_suite<float>();
	activation_suite<bf16>();
	mla_moe_suite<float>();
	mla_moe_suite<bf16>();
	route_suite<float>();
	route_suite<bf16>();
	return finish();
}
