/*
** tests/simt/test_gemv.cc — the decode GEMV (gemv_core through k_gemv_fused) run on the CPU through
** simt.h against ops/ref.c, at the shapes and launch geometry glmc emits for the fixtures (block 32, one
** column per block), with TR 1 and 8 at every step size 1..9: the multi-row passes are what a plan runs
** for prompts of 2..8 tokens. float only (the emulator's cost grows with K; rounding is tests/gpu's),
** but for k_gemv_tc, the bf16 tensor-core GEMV of 2..8-token steps (run_tc).
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"
#include "../../ops/quant.cuh"
#include "../../ops/qfused.cuh"

#include <cstring>
#include <string>
#include <unistd.h>

extern "C" {
#include "../../ops/ref.h"
}

static int n_pass, n_fail;
static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

static std::vector<float> rnd(size_t n, float lo = -1, float hi = 1)
{
	std::vector<float> v(n);
	for (auto &x : v)
		x = frand(lo, hi);
	return v;
}

/* One launch of k_gemv_fused<float, float, float, PRO, true, EPI, RB, TR> over members N (K columns each)
** against ref_rmsnorm / ref_swiglu + ref_linear (+ ref_add for the residual, in place). */
template <int PRO, int EPI, int RB, int TR>
static void run(int T, int K, std::vector<int> N, int block, int grid, bool store = false)
{
	int M = (int)N.size();
	std::vector<float> x = rnd((size_t)T * K, -2, 2), u = rnd((size_t)T * K), nw = rnd(K, 0.5f, 1.5f), h((size_t)T * K);
	if (PRO == GEMV_PRO_RMSNORM || PRO == GEMV_PRO_RMSLATE)
		ref_rmsnorm(h.data(), x.data(), nw.data(), T, K, 1e-5f);
	else if (PRO == GEMV_PRO_SWIGLU)
		ref_swiglu(h.data(), x.data(), u.data(), h.size());
	else
		h = x;
	std::vector<std::vector<float>> w(4), y(4), want(4);
	std::vector<float> r;
	int n4[4] = {0, 0, 0, 0};
	for (int m = 0; m < M; m++) {
		n4[m] = N[m];
		w[m] = rnd((size_t)N[m] * K);
		want[m].resize((size_t)T * N[m]);
		ref_linear(want[m].data(), h.data(), w[m].data(), NULL, T, K, N[m]);
		y[m].assign((size_t)T * N[m], NAN);
		if (m == 0 && (EPI & GEMV_EPI_RES)) {
			r = rnd(y[0].size());
			for (size_t i = 0; i < r.size(); i++)
				want[0][i] += r[i];
			y[0] = r; /* in place, as the plans run it */
		}
	}
	int MC = M; /* members whose outputs are stored and compared */
	if (EPI & GEMV_EPI_GLU) { /* only silu(gate)·up is stored, as y_0 */
		std::vector<float> s2(want[0].size());
		ref_swiglu(s2.data(), want[0].data(), want[1].data(), s2.size());
		want[0] = s2;
		MC = 1;
	}
	auto p = [&](int m) { return m < MC ? y[m].data() : nullptr; };
	auto q = [&](int m) { return m < M ? (const float *)w[m].data() : nullptr; };
	std::vector<float> hs(store ? h.size() : 0, NAN); /* the stored norm, when asked */
	dim3 g, b;
	g.x = (unsigned)grid, b.x = (unsigned)block;
	simt_launch(g, b, [&] {
		k_gemv_fused<float, float, float, PRO, true, EPI, RB, TR>(
		    p(0), p(1), p(2), p(3), q(0), q(1), q(2), q(3), nullptr, nullptr, nullptr, nullptr, x.data(),
		    PRO == GEMV_PRO_SWIGLU ? u.data() : nullptr, nw.data(), store ? hs.data() : nullptr,
		    (EPI & GEMV_EPI_RES) ? y[0].data() : nullptr,
		    T, K, n4[0], n4[1], n4[2], n4[3], 1e-5f, 1, 1, 1, 1);
	});
	double num = 0, den = 0;
	for (int m = 0; m < MC; m++)
		for (size_t i = 0; i < want[m].size(); i++) {
			double d = (double)y[m][i] - want[m][i];
			num += d * d, den += (double)want[m][i] * want[m][i];
		}
	for (size_t i = 0; store && i < h.size(); i++) { /* the stored norm counts with the outputs */
		double d = (double)hs[i] - h[i];
		num += d * d, den += (double)h[i] * h[i];
	}
	double e = den > 0 ? sqrt(num / den) : INFINITY;
	char name[160];
	snprintf(name, sizeof name, "gemv_fused pro=%d epi=%d RB=%d TR=%d T=%d K=%d M=%d block=%d grid=%d%s", PRO, EPI,
	         RB, TR, T, K, M, block, grid, store ? " (norm stored)" : "");
	if (e <= 1e-5) {
		printf("ok - %s\n", name);
		n_pass++;
	} else {
		printf("FAIL - %s: rel-L2 %.3g\n", name, e);
		n_fail++;
	}
}

static float bfr(float v) /* v rounded to bf16 */
{
	return to_f(from_f<bf16>(v));
}

/* One launch of k_gemv_tc<bf16, bf16, bf16, PRO, true, EPI, MT, 1, UC> (grid as glmc emits it) over
** members N (K columns each), bf16 data, against the same sums in double: with the late norm
** inv·Σ w·bf16(x·nw) (the kernel's rounding of its input), each result rounded as the kernel stores it
** before the comparison's rel-L2 (1e-5 against float sums in another order; a misplaced fragment is
** off by O(1)). Outputs poisoned (NaN) first; with the residual y_0 starts as r, in place. */
template <int PRO, int EPI, int MT, int UC, int NT = 1>
static void run_tc(int T, int K, std::vector<int> N, int block, bool bias = false, bool store = false)
{
	constexpr bool GLU = (EPI & GEMV_EPI_GLU) != 0;
	int M = (int)N.size();
	auto bv = [](size_t n, float lo, float hi) {
		std::vector<bf16> v(n);
		for (auto &e : v)
			e = from_f<bf16>(frand(lo, hi));
		return v;
	};
	std::vector<bf16> x = bv((size_t)T * K, -2, 2), nw = bv(K, 0.5f, 1.5f);
	std::vector<double> h((size_t)T * K), inv(T, 1.0);
	std::vector<bf16> hs((size_t)T * K, from_f<bf16>(NAN)); /* with store: the norm, bf16(x·inv·nw) */
	for (int t = 0; t < T; t++) {
		double q = 0;
		for (int k = 0; k < K; k++) {
			double v = to_f(x[(size_t)t * K + k]);
			q += v * v;
			h[(size_t)t * K + k] = PRO == GEMV_PRO_RMSLATE ? bfr((float)v * to_f(nw[k])) : v;
		}
		if (PRO == GEMV_PRO_RMSLATE)
			inv[t] = 1.0 / sqrt(q / K + 1e-5);
	}
	std::vector<std::vector<bf16>> w(4), b(4), y(4);
	std::vector<std::vector<double>> want(4);
	std::vector<bf16> r;
	int n4[4] = {0, 0, 0, 0};
	for (int m = 0; m < M; m++) {
		n4[m] = N[m];
		w[m] = bv((size_t)N[m] * K, -1, 1);
		if (bias)
			b[m] = bv(N[m], -1, 1);
		want[m].resize((size_t)T * N[m]);
		for (int t = 0; t < T; t++)
			for (int n = 0; n < N[m]; n++) {
				double s = 0;
				for (int k = 0; k < K; k++)
					s += (double)to_f(w[m][(size_t)n * K + k]) * h[(size_t)t * K + k];
				s *= inv[t];
				if (bias)
					s += to_f(b[m][n]);
				want[m][(size_t)t * N[m] + n] = bfr((float)s);
			}
		y[m].assign((size_t)T * N[m], from_f<bf16>(NAN));
		if (m == 0 && (EPI & GEMV_EPI_RES)) {
			r = bv(y[0].size(), -1, 1);
			for (size_t i = 0; i < r.size(); i++)
				want[0][i] = bfr(to_f(r[i]) + (float)want[0][i]);
			y[0] = r;
		}
	}
	int MC = M;
	if (GLU) {
		for (size_t i = 0; i < want[0].size(); i++) {
			double gv = want[0][i], uv = want[1][i];
			want[0][i] = bfr((float)(gv / (1 + exp(-gv)) * uv));
		}
		MC = 1;
	}
	auto p = [&](int m) { return m < MC ? y[m].data() : nullptr; };
	auto q = [&](int m) { return m < M ? (const bf16 *)w[m].data() : nullptr; };
	auto qb = [&](int m) { return m < M && bias ? (const bf16 *)b[m].data() : nullptr; };
	int Ntot = 0;
	for (int m = 0; m < M; m++)
		Ntot += N[m];
	dim3 g, bl;
	g.x = GLU ? (unsigned)((N[0] + 8 * MT - 1) / (8 * MT)) : (unsigned)((Ntot + 16 * MT - 1) / (16 * MT));
	bl.x = (unsigned)block;
	simt_launch(g, bl, [&] {
		k_gemv_tc<bf16, bf16, bf16, PRO, true, EPI, MT, NT, UC>(p(0), p(1), p(2), p(3), q(0), q(1), q(2), q(3), qb(0),
		                                                        qb(1), qb(2), qb(3), x.data(), nullptr, nw.data(),
		                                                        store ? hs.data() : nullptr,
		                                                        (EPI & GEMV_EPI_RES) ? y[0].data() : nullptr,
		                                                        T, K, n4[0], n4[1], n4[2], n4[3], 1e-5f, 1, 1, 1, 1);
	});
	double num = 0, den = 0;
	for (int m = 0; m < MC; m++)
		for (size_t i = 0; i < want[m].size(); i++) {
			double d = (double)to_f(y[m][i]) - want[m][i];
			num += d * d, den += want[m][i] * want[m][i];
		}
	double e = den > 0 && num == num ? sqrt(num / den) : INFINITY;
	/* the stored norm: within one bf16 step of bf16(x·inv·nw) everywhere (inv from the kernel's float sum), 99%
	** of it equal */
	long hbad = 0, hsame = 0;
	for (size_t i = 0; store && i < hs.size(); i++) {
		double want = bfr((float)(to_f(x[i]) * inv[i / K] * to_f(nw[i % K]))), d = fabs(to_f(hs[i]) - want);
		hsame += to_f(hs[i]) == want, hbad += !(d <= fabs(want) / 128);
	}
	if (store && (hbad || hsame < 0.99 * (double)hs.size()))
		e = INFINITY;
	char name[160];
	snprintf(name, sizeof name, "gemv_tc pro=%d epi=%d MT=%d NT=%d UC=%d T=%d K=%d M=%d block=%d%s%s", PRO, EPI, MT, NT,
	         UC, T, K, M, block, bias ? " bias" : "", store ? " (norm stored)" : "");
	/* bf16 outputs: a float sum a hair from the double one may round to the neighbouring bf16 */
	if (e <= 2e-3) {
		printf("ok - %s\n", name);
		n_pass++;
	} else {
		printf("FAIL - %s: rel-L2 %.3g\n", name, e);
		n_fail++;
	}
}

/* k_argmax (block_argmax: 16-byte vectors on an aligned row, else element by element) against ref_argmax,
** with ties to the lower index and NaN (which ranks first), rows of N: 4099 leaves row 0 a tail past its
** vectors and rows 1.. unaligned; 4096 is all vectors. */
static void test_argmax(int N)
{
	int R = 3;
	std::vector<float> x = rnd((size_t)R * N);
	x[5] = x[N - 1] = 1.5f;               /* row 0: a tie, the lower index wins */
	x[N + 17] = NAN, x[N + 900] = 2.0f;   /* row 1: NaN ranks first */
	x[2 * (size_t)N + N - 1] = 3.0f;      /* row 2: the max in the last element */
	std::vector<int> want(R), got(R, -7);
	ref_argmax(want.data(), x.data(), R, N);
	dim3 g, b;
	g.x = (unsigned)R, b.x = 256;
	simt_launch(g, b, [&] {
		int i = block_argmax(x.data() + (size_t)blockIdx.x * N, N);
		if (threadIdx.x == 0)
			got[blockIdx.x] = i;
	});
	bool ok = got == want;
	n_pass += ok, n_fail += !ok;
	printf("%s - argmax N=%d rows %d: got %d %d %d, want %d %d %d\n", ok ? "ok" : "FAIL", N, R, got[0], got[1], got[2],
	       want[0], want[1], want[2]);
}

/* The residual sum and its RMSNorm (ops/fused.cuh, block 256 a row): k_add_rmsnorm's rows in registers
** (N <= 32 · 256) and its loop past them, in place over a or not, with and without a weight; through
** k_add_rmsnorm_ar's entry without a control block (b already the allreduce's sum) as glmrun runs it
** when NCCL took the allreduce. Against ref_add + ref_rmsnorm; sum exactly. */
template <bool HW> static void test_add_rmsnorm(int T, int N, bool inplace, bool ar)
{
	std::vector<float> a = rnd((size_t)T * N), b = rnd((size_t)T * N), w = rnd(N, 0.5f, 1.5f), sum(a.size()),
			   want(a.size()), y(a.size(), NAN), got(a.size(), NAN);
	ref_add(sum.data(), a.data(), b.data(), sum.size(), sum.size());
	ref_rmsnorm(want.data(), sum.data(), HW ? w.data() : NULL, T, N, 1e-5f);
	float *ps = inplace ? a.data() : got.data();
	dim3 g, bl;
	g.x = (unsigned)T, bl.x = 256;
	simt_launch(g, bl, [&] {
		if (ar)
			k_add_rmsnorm_ar<float, float, HW>(ps, y.data(), b.data(), a.data(), nullptr, HW ? w.data() : nullptr, N,
			                                  1e-5f, nullptr);
		else
			k_add_rmsnorm<float, float, HW>(ps, y.data(), a.data(), b.data(), HW ? w.data() : nullptr, N, 1e-5f);
	});
	bool same = !memcmp(ps, sum.data(), sum.size() * sizeof(float));
	double num = 0, den = 0;
	for (size_t i = 0; i < want.size(); i++) {
		double d = (double)y[i] - want[i];
		num += d * d, den += (double)want[i] * want[i];
	}
	double e = den > 0 ? sqrt(num / den) : INFINITY;
	bool ok = same && e <= 1e-5;
	n_pass += ok, n_fail += !ok;
	printf("%s - %s T=%d N=%d%s%s: sum %s, norm rel-L2 %.3g\n", ok ? "ok" : "FAIL",
	       ar ? "add_rmsnorm_ar (no control block)" : "add_rmsnorm", T, N, HW ? "" : " no-weight",
	       inplace ? " in place" : "", same ? "exact" : "DIFFERS", e);
}

/* k_add_rmsnorm_ar doing its allreduce on one rank (tp 1: the exchange through its own mailbox, the
** protocol's flags, epochs and counters all exercised; several ranks need a GPU, tests/gpu/test_kernels):
** three fused calls on fresh parts with a plain one-shot allreduce between the first two, so the slots
** alternate and the two kernels share the epochs. b must be the part, the sum exactly a + part, the norm
** the reference's; after the four calls the call counter is 4 and the arrival count 0. */
static void test_add_rmsnorm_ar_p2p(int T, int N)
{
	long long cap = ((long long)T * N * 4 + 255) / 256 * 256;
	std::vector<char> mbox(P2P_FLAGS_BYTES + 2 * cap, 0);
	unsigned cnt[2] = {0, 0};
	P2pCtl c = {};
	c.mbox[0] = mbox.data(), c.seq = cnt, c.arrive = cnt + 1, c.rank = 0, c.tp = 1, c.cap = cap;
	std::vector<float> a = rnd((size_t)T * N), w = rnd(N, 0.5f, 1.5f);
	bool ok = true;
	std::string why;
	for (int call = 0; call < 3 && ok; call++) {
		std::vector<float> part = rnd(a.size()), b(a.size(), NAN), y(a.size(), NAN), sum(a.size()), want(a.size());
		ref_add(sum.data(), a.data(), part.data(), sum.size(), sum.size());
		ref_rmsnorm(want.data(), sum.data(), w.data(), T, N, 1e-5f);
		dim3 g, bl;
		g.x = (unsigned)T, bl.x = 256;
		simt_launch(g, bl, [&] {
			k_add_rmsnorm_ar<float, float, true>(a.data(), y.data(), b.data(), a.data(), part.data(), w.data(), N, 1e-5f,
			                                    &c);
		});
		double num = 0, den = 0;
		for (size_t i = 0; i < want.size(); i++) {
			double d = (double)y[i] - want[i];
			num += d * d, den += (double)want[i] * want[i];
		}
		if (memcmp(b.data(), part.data(), b.size() * 4) || memcmp(a.data(), sum.data(), a.size() * 4) ||
		    !(sqrt(num / den) <= 1e-5))
			ok = false, why = "call " + std::to_string(call + 1) + ": b, sum or norm wrong";
		if (call == 0) { /* a plain one-shot allreduce between: the next epoch, the other slot */
			std::vector<float> x = rnd(a.size()), z(a.size(), NAN);
			dim3 g1, b1;
			g1.x = 1, b1.x = 512;
			simt_launch(g1, b1, [&] { k_p2p_allreduce<float>(z.data(), x.data(), (long long)x.size(), &c); });
			if (memcmp(z.data(), x.data(), z.size() * 4))
				ok = false, why = "the plain allreduce between";
		}
	}
	if (ok && (cnt[0] != 4 || cnt[1] != 0))
		ok = false, why = "counters " + std::to_string(cnt[0]) + " and " + std::to_string(cnt[1]) + ", want 4 and 0";
	n_pass += ok, n_fail += !ok;
	printf("%s - add_rmsnorm_ar doing its allreduce, tp 1, T=%d N=%d (3 fused calls, a plain one between)%s%s\n",
	       ok ? "ok" : "FAIL", T, N, ok ? "" : ": ", why.c_str());
}

int main(void)
{
	alarm(2400); /* a kernel spinning on a flag that never comes ends the run instead of the CI's time */
	test_add_rmsnorm_ar_p2p(1, 6144);
	test_add_rmsnorm_ar_p2p(3, 64);
	for (int T : {1, 3}) {
		test_add_rmsnorm<true>(T, 64, true, false);
		test_add_rmsnorm<true>(T, 6144, false, false);
		test_add_rmsnorm<false>(T, 8192, true, false);
		test_add_rmsnorm<true>(T, 8193, true, false); /* past the registers: the loop */
		test_add_rmsnorm<true>(T, 6144, true, true);
	}
	test_argmax(4099);
	test_argmax(4096);
	for (int T = 1; T <= 9; T++) {
		/* the llama fixture's QKV (64 + 32 + 32 of K 64), its SwiGLU-down with the residual, the o-projection */
		run<GEMV_PRO_RMSNORM, 0, 1, 1>(T, 64, {64, 32, 32}, 32, 128);
		run<GEMV_PRO_RMSNORM, 0, 1, 8>(T, 64, {64, 32, 32}, 32, 128);
		run<GEMV_PRO_SWIGLU, GEMV_EPI_RES, 1, 1>(T, 128, {64}, 32, 64);
		run<GEMV_PRO_SWIGLU, GEMV_EPI_RES, 1, 8>(T, 128, {64}, 32, 64);
		run<GEMV_PRO_NONE, GEMV_EPI_RES, 1, 1>(T, 64, {64}, 32, 64);
		run<GEMV_PRO_NONE, GEMV_EPI_RES, 2, 8>(T, 64, {64}, 32, 32);
		/* looping blocks, several warps */
		run<GEMV_PRO_RMSNORM, 0, 4, 1>(T, 512, {200, 56}, 64, 5);
		/* the llama fixture's gate and up (128 of K 64) with the SwiGLU as their epilogue, column pairs */
		run<GEMV_PRO_RMSNORM, GEMV_EPI_GLU, 2, 1>(T, 64, {128, 128}, 32, 128);
		run<GEMV_PRO_RMSNORM, GEMV_EPI_GLU, 4, 8>(T, 64, {50, 50}, 32, 7);
		/* the norm's scale after the dots (the one-token launch glmc emits): one group a block as glmc
		** emits, looping blocks (each group sums the squares again), a GLU, a row that is not whole
		** vectors (the scalar path) */
		run<GEMV_PRO_RMSLATE, 0, 1, 1>(T, 64, {64, 32, 32}, 32, 128);
		run<GEMV_PRO_RMSLATE, 0, 4, 1>(T, 512, {200, 56}, 64, 5, true);
		run<GEMV_PRO_RMSLATE, 0, 4, 8>(T, 512, {200, 56}, 64, 64);
		run<GEMV_PRO_RMSLATE, GEMV_EPI_GLU, 2, 1>(T, 64, {128, 128}, 32, 128, true);
		run<GEMV_PRO_RMSLATE, 0, 2, 1>(T, 70, {9, 4}, 64, 3);
	}
	/* the tensor-core GEMV of 2..8-token bf16 steps: the QKV group with the late norm (members not whole
	** tiles: 40 + 24 + 24 rows), the o/down projection with the residual, the gate/up GLU, two tiles a
	** block, K split over 1, 3 and 8 warps (K 96: a chunk past K for some warps), tokens 2..8 */
	for (int T : {2, 3, 5, 8}) {
		run_tc<GEMV_PRO_RMSLATE, 0, 1, 4>(T, 256, {40, 24, 24}, 96);
		run_tc<GEMV_PRO_NONE, GEMV_EPI_RES, 1, 4>(T, 512, {48}, 128, true);
		run_tc<GEMV_PRO_RMSLATE, GEMV_EPI_GLU, 2, 2>(T, 256, {40, 40}, 256);
		run_tc<GEMV_PRO_NONE, 0, 2, 2>(T, 96, {70}, 256, true);
		run_tc<GEMV_PRO_RMSLATE, 0, 2, 2>(T, 1024, {33}, 32);
		run_tc<GEMV_PRO_RMSLATE, 0, 1, 4>(T, 2048, {64, 40, 40}, 128, false, true); /* Flash's router group */
	}
	/* two token tiles (NT 2: fuse.c gives bf16 groups steps of up to 16 tokens): tokens 9, 12 and 16, the
	** same groups */
	for (int T : {9, 12, 16}) {
		run_tc<GEMV_PRO_RMSLATE, 0, 1, 4, 2>(T, 256, {40, 24, 24}, 96);
		run_tc<GEMV_PRO_NONE, GEMV_EPI_RES, 1, 4, 2>(T, 512, {48}, 128, true);
		run_tc<GEMV_PRO_RMSLATE, GEMV_EPI_GLU, 2, 2, 2>(T, 256, {40, 40}, 256);
		run_tc<GEMV_PRO_NONE, 0, 2, 2, 2>(T, 96, {70}, 256, true);
		run_tc<GEMV_PRO_RMSLATE, 0, 1, 4, 2>(T, 2048, {64, 40, 40}, 128, false, true);
	}
	/* the one-token o/down projection at the shape glmc emits for it (gemv_shape_plain1: 2 columns a
	** block of 128 threads once a row is 256 vectors; one column a block under 528 rows) */
	int bt = 0, rb = 0;
	gemv_shape_plain1(1024, 600, 4, GEMV_SMS_SM90, &bt, &rb);
	if (bt != 128 || rb != 2)
		printf("FAIL - gemv_shape_plain1(1024, 600, f32): %d x %d, want 2 x 128\n", rb, bt), n_fail++;
	run<GEMV_PRO_NONE, GEMV_EPI_RES, 2, 1>(1, 1024, {600}, bt, 300);
	gemv_shape_plain1(1024, 100, 4, GEMV_SMS_SM90, &bt, &rb);
	if (bt != 128 || rb != 1)
		printf("FAIL - gemv_shape_plain1(1024, 100, f32): %d x %d, want 1 x 128\n", rb, bt), n_fail++;
	run<GEMV_PRO_NONE, GEMV_EPI_RES, 1, 1>(1, 1024, {100}, bt, 100);
	/* from 1056 rows 4 columns a block (Llama-3-8B's o and down: 1024 blocks, within 8 an SM) */
	gemv_shape_plain1(1024, 1100, 4, GEMV_SMS_SM90, &bt, &rb);
	if (bt != 128 || rb != 4)
		printf("FAIL - gemv_shape_plain1(1024, 1100, f32): %d x %d, want 4 x 128\n", rb, bt), n_fail++;
	run<GEMV_PRO_NONE, GEMV_EPI_RES, 4, 1>(1, 1024, {1100}, bt, 275);
	/* the register budget: 8 blocks of 128 an SM for rb <= 4 when the grid fits 8 an SM of 132 SMs */
	struct { int block, rb, grid, want; } mb[] = {{128, 4, 1056, 8}, {128, 2, 1024, 8}, {128, 4, 1057, 0},
	                                             {128, 8, 768, 0}, {256, 4, 100, 0}, {64, 4, 100, 0}};
	for (auto &c : mb)
		if (gemv_min_blocks1(c.block, c.rb, c.grid, GEMV_SMS_SM90) != c.want)
			printf("FAIL - gemv_min_blocks1(%d, %d, %d): %d, want %d\n", c.block, c.rb, c.grid,
			       gemv_min_blocks1(c.block, c.rb, c.grid, GEMV_SMS_SM90), c.want), n_fail++;
		else
			n_pass++;
	/* the same rules on another target's SMs (an A100's 108): 8 blocks an SM is a grid of 864, 8 columns an SM
	** 864 rows, 16 rows an SM 1728 */
	struct { int block, rb, grid, want; } mb80[] = {{128, 4, 864, 8}, {128, 4, 865, 0}};
	for (auto &c : mb80)
		if (gemv_min_blocks1(c.block, c.rb, c.grid, 108) != c.want)
			printf("FAIL - gemv_min_blocks1(%d, %d, %d) on 108 SMs: want %d\n", c.block, c.rb, c.grid, c.want),
				n_fail++;
		else
			n_pass++;
	struct { long long K, N; int late, rb, bt; } sh80[] = {{1024, 864, 0, 4, 128}, {1024, 863, 0, 2, 128},
	                                                      {2048, 1728, 1, 8, 128}, {2048, 1727, 1, 4, 256}};
	for (auto &c : sh80) {
		if (c.late)
			gemv_shape_late1(c.K, c.N, 4, 108, &bt, &rb);
		else
			gemv_shape_plain1(c.K, c.N, 4, 108, &bt, &rb);
		if (bt != c.bt || rb != c.rb)
			printf("FAIL - gemv_shape_%s(%lld, %lld, f32) on 108 SMs: %d x %d, want %d x %d\n",
			       c.late ? "late1" : "plain1", c.K, c.N, rb, bt, c.rb, c.bt),
				n_fail++;
		else
			n_pass++;
	}
	/* the one-token late-norm group at its shape (gemv_shape_late1: 8 columns a block of 128 threads once
	** a row is 512 vectors and there are 2112 rows; else gemv_shape_h's) */
	gemv_shape_late1(2048, 2115, 4, GEMV_SMS_SM90, &bt, &rb);
	if (bt != 128 || rb != 8)
		printf("FAIL - gemv_shape_late1(2048, 2115, f32): %d x %d, want 8 x 128\n", rb, bt), n_fail++;
	run<GEMV_PRO_RMSLATE, 0, 8, 1>(1, 2048, {40, 17, 9}, bt, 5); /* that shape, fewer rows: 66, the last block 2 */
	run<GEMV_PRO_RMSLATE, 0, 8, 1>(1, 2048, {40, 17, 9}, bt, 9);
	gemv_shape_late1(2048, 2111, 4, GEMV_SMS_SM90, &bt, &rb);
	if (bt != 256 || rb != 4)
		printf("FAIL - gemv_shape_late1(2048, 2111, f32): %d x %d, want gemv_shape_h's 4 x 256\n", rb, bt), n_fail++;
	gemv_shape_late1(2560, 4096, 4, GEMV_SMS_SM90, &bt, &rb); /* 640 vectors: a ragged last step at 128 threads */
	if (bt != 256 || rb != 4)
		printf("FAIL - gemv_shape_late1(2560, 4096, f32): %d x %d, want gemv_shape_h's 4 x 256\n", rb, bt), n_fail++;
	gemv_shape_late1(2044, 4096, 4, GEMV_SMS_SM90, &bt, &rb);
	if (bt != 256 || rb != 4)
		printf("FAIL - gemv_shape_late1(2044, 4096, f32): %d x %d, want gemv_shape_h's 4 x 256\n", rb, bt), n_fail++;
	printf("%d passed, %d failed\n", n_pass, n_fail);
	return n_fail ? 1 : 0;
}
