/*
** tests/simt/test_qgemv.cc — the decode kernels over GGUF blocks (ops/quant.cuh k_qgemv and k_qmoe_up,
** ops/qfused.cuh k_qgemv_fused and k_qmoe_down_fused) run on the CPU through simt.h, so their block decoding, staging (the
** one-token path and the general one), in-block K split and chunking are checked in CI, where no GPU is.
** Weights are random GGUF blocks of every type (runtime/formats/weights.c's generator, the bytes --random-weights
** plans use), dequantized by ops/quant.c (exact, ggml's own); the reference is a float64 dot with the
** input as the kernel stages it (rounded to A, the SwiGLU or RMSNorm formed first). Relative L2 over the
** outputs, floored as tests/gpu/test_qgemv.cu's (‖x·w‖ terms / sqrt(K)): 1e-5 with float activations,
** 4e-3 with bf16 (twice the bf16 rounding of the outputs). tests/gpu/test_qgemv.cu runs the same kernels,
** and more shapes, on the GPU.
** Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"
#include "../../ops/quant.cuh"
#include "../../ops/qfused.cuh"

#include <string>
#include <type_traits>

#include "../tap.h"

extern "C" {
#include "../../ops/quant.h"
#include "../../ops/ref.h"
/* runtime/formats/weights.h's random-block generator (that header's C-only includes stay out of C++) */
uint64_t weights_random_seed(const char *name);
uint8_t weights_random_byte(int qtype, uint64_t seed, int64_t K, uint64_t g);
}

static uint64_t rng = 0x51ed2701a3c49f15ull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

/* v rounded to A and back, as a kernel stores it. */
template <typename A> static float thru(float v)
{
	return to_f(from_f<A>(v));
}

template <typename A> static std::vector<A> rnd_a(size_t n, float lo = -1, float hi = 1)
{
	std::vector<A> v(n);
	for (auto &x : v)
		x = from_f<A>(frand(lo, hi));
	return v;
}

template <typename A> static const char *aname();
template <> const char *aname<float>() { return "f32"; }
template <> const char *aname<bf16>() { return "bf16"; }
template <typename A> static double tol() { return sizeof(A) == 4 ? 1e-5 : 4e-3; }

/* rows × K random blocks of type qt at the device stride (zero padding), and their exact floats. */
struct QRows {
	std::vector<unsigned char> b;
	std::vector<float> f;
	long long stride;
};

static QRows qrows(int qt, long long rows, long long K, const char *name)
{
	QRows q;
	size_t rb = quant_row_bytes(qt, K);
	q.stride = (long long)quant_dev_row_bytes(qt, K);
	q.b.assign((size_t)(rows * q.stride) + 16, 0); /* + the tail of a last aligned word (quant.cuh qg_ldb) */
	q.f.resize((size_t)(rows * K));
	uint64_t seed = weights_random_seed(name);
	std::vector<unsigned char> row(rb);
	for (long long r = 0; r < rows; r++) {
		for (size_t i = 0; i < rb; i++)
			row[i] = q.b[(size_t)(r * q.stride) + i] = weights_random_byte(qt, seed, K, (uint64_t)r * rb + i);
		quant_dev_spread(qt, &q.b[(size_t)(r * q.stride)], K); /* the device layout (Q6_K's slots) */
		quant_dequant(qt, row.data(), &q.f[(size_t)(r * K)], (size_t)K);
	}
	return q;
}

/* ‖got − want‖ / max(‖want‖, ‖scale‖); NaN gives +inf. */
static double rel_l2(const std::vector<float> &got, const std::vector<double> &want, const std::vector<double> &scale)
{
	double num = 0, den = 0, sc = 0;
	for (size_t i = 0; i < want.size(); i++) {
		if (std::isnan(got[i]))
			return INFINITY;
		double d = got[i] - want[i];
		num += d * d, den += want[i] * want[i], sc += scale[i] * scale[i];
	}
	den = den > sc ? den : sc;
	return den == 0 ? (num == 0 ? 0 : INFINITY) : sqrt(num / den);
}

/* want[t·N + n] = h[t]·w[n] (+ bias) in float64, and the error floor ‖h[t]∘w[n]‖₁ / sqrt(K). */
static void ref_dot(std::vector<double> &want, std::vector<double> &scale, const std::vector<float> &h,
                    const std::vector<float> &w, const float *bias, int T, int K, int N)
{
	want.assign((size_t)T * N, 0), scale.assign((size_t)T * N, 0);
	for (int t = 0; t < T; t++)
		for (int n = 0; n < N; n++) {
			double s = bias ? bias[n] : 0, a = 0;
			for (int k = 0; k < K; k++) {
				double p = (double)h[(size_t)t * K + k] * w[(size_t)n * K + k];
				s += p, a += fabs(p);
			}
			want[(size_t)t * N + n] = s, scale[(size_t)t * N + n] = a / sqrt((double)K);
		}
}

/* k_qgemv<A, QT, 2, WPR, TM, HB, SW> at the launch glmc emits (grid ceil(N / (16/WPR)), block 256); with
** MMA k_qgemv_mma<A, QT, WPR, HB, SW> instead (Q4_K or Q6_K on the tensor cores, the mma emulated by
** shuffles; grid ceil(N / (128/WPR))). A smaller grid makes blocks loop over row groups. */
template <typename A, int QT, int WPR, int TM, bool HB, bool SW, bool MMA = false>
static void test_qgemv(int T, int K, int N, int grid = 0)
{
	QRows w = qrows(QT, N, K, "blk.0.ffn_down.weight");
	std::vector<A> x = rnd_a<A>((size_t)T * K, -2, 2), u = rnd_a<A>((size_t)T * K), b = rnd_a<A>(N);
	std::vector<float> h((size_t)T * K), bf(N);
	for (size_t i = 0; i < h.size(); i++) {
		float g = to_f(x[i]);
		h[i] = SW ? thru<A>(g / (1.0f + expf(-g)) * to_f(u[i])) : g;
	}
	for (int n = 0; n < N; n++)
		bf[n] = to_f(b[n]);
	std::vector<double> want, scale;
	ref_dot(want, scale, h, w.f, HB ? bf.data() : nullptr, T, K, N);
	std::vector<A> y((size_t)T * N, from_f<A>(NAN));
	dim3 g, bl;
	int rpb = (MMA ? 128 : 16) / WPR;
	g.x = (unsigned)(grid ? grid : (N + rpb - 1) / rpb), bl.x = 256;
	simt_launch(g, bl, [&] {
		if constexpr (MMA)
			k_qgemv_mma<A, QT, WPR, HB, SW>(y.data(), x.data(), SW ? u.data() : nullptr, w.b.data(),
			                                   HB ? b.data() : nullptr, T, K, N);
		else
			k_qgemv<A, QT, 2, WPR, TM, HB, SW>(y.data(), x.data(), SW ? u.data() : nullptr, w.b.data(),
			                                   HB ? b.data() : nullptr, T, K, N);
	});
	std::vector<float> got(y.size());
	for (size_t i = 0; i < y.size(); i++)
		got[i] = to_f(y[i]);
	double e = rel_l2(got, want, scale);
	check(e <= tol<A>(),
	      fmt("qgemv%s %s A=%s T=%d K=%d N=%d WPR=%d TM=%d%s%s grid=%u", MMA ? "_mma" : "", quant_type_name(QT),
	          aname<A>(), T, K, N, WPR, TM, HB ? " bias" : "", SW ? " swiglu" : "", g.x),
	      fmt("rel-L2 %.3g > %.3g", e, tol<A>()));
}

/* k_qmoe_up<A, QG, QU>: hid[slot] = silu(gate[e]·x[t])·(up[e]·x[t]) for the slots' experts (one -1). */
template <typename A, int QG, int QU, bool MMA = false> static void test_qmoe_up(int T, int C, int F, int E, int k)
{
	QRows gw = qrows(QG, (long long)E * F, C, "blk.0.ffn_gate_exps.weight");
	QRows uw = qrows(QU, (long long)E * F, C, "blk.0.ffn_up_exps.weight");
	std::vector<A> x = rnd_a<A>((size_t)T * C);
	std::vector<int> idx((size_t)T * k);
	for (size_t i = 0; i < idx.size(); i++)
		idx[i] = i == 1 ? -1 : (int)((i * 7 + 3) % (size_t)E);
	std::vector<float> hid((size_t)T * k * F, NAN), xf((size_t)T * C);
	for (size_t i = 0; i < xf.size(); i++)
		xf[i] = to_f(x[i]);
	std::vector<double> want((size_t)T * k * F), scale((size_t)T * k * F);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++)
			for (int f = 0; f < F; f++) {
				size_t at = ((size_t)t * k + j) * F + f;
				int ex = idx[(size_t)t * k + j];
				if (ex < 0)
					continue;
				double ag = 0, au = 0, sa = 0;
				for (int c = 0; c < C; c++) {
					double xv = xf[(size_t)t * C + c];
					ag += xv * gw.f[((size_t)ex * F + f) * C + c];
					au += xv * uw.f[((size_t)ex * F + f) * C + c];
					sa += fabs(xv * uw.f[((size_t)ex * F + f) * C + c]);
				}
				want[at] = ag / (1.0 + exp(-ag)) * au;
				scale[at] = fabs(ag / (1.0 + exp(-ag))) * sa / sqrt((double)C);
			}
	dim3 g, bl;
	g.x = (unsigned)(MMA ? (F + 63) / 64 : (F + 7) / 8), g.y = (unsigned)k, g.z = (unsigned)T, bl.x = 256;
	simt_launch(g, bl, [&] {
		if constexpr (MMA)
			k_qmoe_up_mma<A, QG>(hid.data(), x.data(), idx.data(), gw.b.data(), uw.b.data(), C, F, k);
		else
			k_qmoe_up<A, QG, QU>(hid.data(), x.data(), idx.data(), gw.b.data(), uw.b.data(), C, F, k);
	});
	double e = rel_l2(hid, want, scale);
	check(e <= tol<A>(),
	      fmt("qmoe_up%s %s/%s A=%s T=%d C=%d F=%d E=%d k=%d", MMA ? "_mma" : "", quant_type_name(QG), quant_type_name(QU),
	          aname<A>(), T, C, F, E, k),
	      fmt("rel-L2 %.3g > %.3g", e, tol<A>()));
}

/* k_qgemv_fused with the RMSNorm formed while staging, two QT members (splits P0, P1), the norm stored:
** at T = 1 the one-token staging path, for K <= 8192 with whole rows, beyond it in chunks. MMA: the
** tensor-core kernel (k_qgemv_fused_mma, Q4_K or Q6_K, the mma emulated; 128/P rows a block, one token
** after another). */
template <typename A, int QT, bool MMA = false, bool LATE = false>
static void test_qfused_norm(int T, int K, int N0, int N1, int P0, int P1, int grid = 0)
{
	if (LATE && !MMA && T != 1)
		abort(); /* RMSLATE: k_qgemv_fused's one-token launch */
	const int PRO = LATE ? GEMV_PRO_RMSLATE : GEMV_PRO_RMSNORM;
	QRows w0 = qrows(QT, N0, K, "blk.0.attn_q.weight"), w1 = qrows(QT, N1, K, "blk.0.attn_k.weight");
	std::vector<A> x = rnd_a<A>((size_t)T * K, -2, 2), nw = rnd_a<A>(K, 0.5f, 1.5f);
	std::vector<float> xf((size_t)T * K), nwf(K), h((size_t)T * K);
	for (size_t i = 0; i < xf.size(); i++)
		xf[i] = to_f(x[i]);
	for (int i = 0; i < K; i++)
		nwf[i] = to_f(nw[i]);
	ref_rmsnorm(h.data(), xf.data(), nwf.data(), T, K, 1e-5f);
	for (auto &v : h) /* RMSLATE: the normalised input is not rounded to A (its only difference) */
		v = LATE ? v : thru<A>(v);
	std::vector<double> want0, want1, sc0, sc1;
	ref_dot(want0, sc0, h, w0.f, nullptr, T, K, N0);
	ref_dot(want1, sc1, h, w1.f, nullptr, T, K, N1);
	std::vector<A> y0((size_t)T * N0, from_f<A>(NAN)), y1((size_t)T * N1, from_f<A>(NAN)), hs((size_t)T * K);
	int rpb = MMA ? 128 : 16, nb = (N0 + rpb / P0 - 1) / (rpb / P0) + (N1 + rpb / P1 - 1) / (rpb / P1);
	dim3 g, bl;
	g.x = (unsigned)(grid ? grid : nb), bl.x = 256;
	simt_launch(g, bl, [&] {
		if constexpr (MMA)
			k_qgemv_fused_mma<A, QT, A, PRO, 0>(
			    y0.data(), y1.data(), nullptr, nullptr, w0.b.data(), w1.b.data(), nullptr, nullptr, nullptr, nullptr,
			    nullptr, nullptr, x.data(), nullptr, nw.data(), hs.data(), nullptr, T, K, N0, N1, 0, 0, P0, P1, 1, 1,
			    PRO, 0, 1e-5f, 1, 1, 1, 1);
		else if (T == 1)
			k_qgemv_fused<A, QT, QT, QT, QT, A, PRO, 0, 1>(
			    y0.data(), y1.data(), nullptr, nullptr, w0.b.data(), w1.b.data(), nullptr, nullptr, nullptr, nullptr,
			    nullptr, nullptr, x.data(), nullptr, nw.data(), hs.data(), nullptr, T, K, N0, N1, 0, 0, P0, P1, 1, 1,
			    PRO, 0, 1e-5f, 1, 1, 1, 1);
		else
			k_qgemv_fused<A, QT, QT, QT, QT, A, -1, -1, 8>(
			    y0.data(), y1.data(), nullptr, nullptr, w0.b.data(), w1.b.data(), nullptr, nullptr, nullptr, nullptr,
			    nullptr, nullptr, x.data(), nullptr, nw.data(), hs.data(), nullptr, T, K, N0, N1, 0, 0, P0, P1, 1, 1,
			    GEMV_PRO_RMSNORM, 0, 1e-5f, 1, 1, 1, 1);
	});
	std::vector<float> g0(y0.size()), g1(y1.size()), gh(hs.size());
	for (size_t i = 0; i < y0.size(); i++)
		g0[i] = to_f(y0[i]);
	for (size_t i = 0; i < y1.size(); i++)
		g1[i] = to_f(y1[i]);
	for (size_t i = 0; i < hs.size(); i++)
		gh[i] = to_f(hs[i]);
	std::string nm = fmt("qgemv_fused%s rmsnorm%s %s A=%s T=%d K=%d N=%d/%d P=%d/%d grid=%u", MMA ? "_mma" : "",
	                     LATE ? "-late" : "", quant_type_name(QT), aname<A>(), T, K, N0, N1, P0, P1, g.x);
	double e0 = rel_l2(g0, want0, sc0), e1 = rel_l2(g1, want1, sc1);
	check(e0 <= tol<A>() && e1 <= tol<A>(), nm, fmt("rel-L2 %.3g, %.3g > %.3g", e0, e1, tol<A>()));
	std::vector<double> hd(h.begin(), h.end()), z(h.size(), 0.0);
	double eh = rel_l2(gh, hd, z);
	check(eh <= tol<A>(), nm + " stored norm", fmt("rel-L2 %.3g", eh));
}

/* k_qgemv_fused_mma without a norm (the path that stages x as units after the ring's first loads): one
** QT member over x as it is (PRO NONE, three blocks in flight for Q4_K) or over swiglu(x, u) rounded to
** A, with the residual added in place (y_0 = A(r + A(w·x))). grid ceil(N / (128/P)) or smaller (blocks
** looping over row groups, x staged once when it fits one chunk). */
template <typename A, int QT, int PRO>
static void test_qfused_mma_res(int T, int K, int N, int P, int grid = 0)
{
	QRows w = qrows(QT, N, K, "blk.0.attn_output.weight");
	std::vector<A> x = rnd_a<A>((size_t)T * K, -2, 2), u = rnd_a<A>((size_t)T * K), y = rnd_a<A>((size_t)T * N);
	std::vector<float> h((size_t)T * K);
	for (size_t i = 0; i < h.size(); i++) {
		float g = to_f(x[i]);
		h[i] = PRO == GEMV_PRO_SWIGLU ? thru<A>(g / (1.0f + expf(-g)) * to_f(u[i])) : g;
	}
	std::vector<double> want, sc;
	ref_dot(want, sc, h, w.f, nullptr, T, K, N);
	for (size_t i = 0; i < want.size(); i++)
		want[i] = thru<A>(to_f(y[i]) + thru<A>((float)want[i]));
	dim3 g, bl;
	g.x = (unsigned)(grid ? grid : (N + 128 / P - 1) / (128 / P)), bl.x = 256;
	simt_launch(g, bl, [&] {
		k_qgemv_fused_mma<A, QT, A, PRO, GEMV_EPI_RES>(
		    y.data(), nullptr, nullptr, nullptr, w.b.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
		    nullptr, x.data(), PRO == GEMV_PRO_SWIGLU ? u.data() : nullptr, (const A *)nullptr, nullptr, y.data(), T, K,
		    N, 0, 0, 0, P, 1, 1, 1, PRO, GEMV_EPI_RES, 1e-5f, 1, 1, 1, 1);
	});
	std::vector<float> got(y.size());
	for (size_t i = 0; i < y.size(); i++)
		got[i] = to_f(y[i]);
	double e = rel_l2(got, want, sc);
	check(e <= tol<A>(),
	      fmt("qgemv_fused_mma %s + residual (in place) %s A=%s T=%d K=%d N=%d P=%d grid=%u",
	          PRO == GEMV_PRO_SWIGLU ? "swiglu" : "plain", quant_type_name(QT), aname<A>(), T, K, N, P, g.x),
	      fmt("rel-L2 %.3g > %.3g", e, tol<A>()));
}

/*
** k_qgemv_sk<A, QT, A, PRO, EPI, NWARP, S> (the one-token stream of weights through cp.async rings, the copies
** done at once and the mma emulated): two members, member 0 with a bias and the residual r added
** (y_0 = A(r + A(w·x + b))), member 1 scaled by 0.75; x as it is, its SwiGLU rounded to A, or the late norm
** (x·inv·nw unrounded; block 0 stores the norm). The grid cuts the tiles' items into ranges of a few items,
** so most tiles are split between warps (their parts summed by the last one) and ranges cross tiles and
** members. Launched twice: the second result must be the first bit for bit and every count zero again.
*/
template <typename A, int QT, int PRO, int NWARP, int S>
static void test_qsk(int K, int N0, int N1, int wave)
{
	const int EPI = GEMV_EPI_RES | 2;
	QRows w0 = qrows(QT, N0, K, "blk.0.attn_q.weight"), w1 = qrows(QT, N1, K, "blk.0.attn_k.weight");
	std::vector<A> x = rnd_a<A>(K, -2, 2), u = rnd_a<A>(K), nw = rnd_a<A>(K, 0.5f, 1.5f), b0 = rnd_a<A>(N0);
	std::vector<A> r = rnd_a<A>(N0);
	std::vector<float> h(K), b0f(N0);
	for (int i = 0; i < N0; i++)
		b0f[i] = to_f(b0[i]);
	if (PRO == GEMV_PRO_RMSLATE) {
		std::vector<float> xf(K), nwf(K);
		for (int i = 0; i < K; i++)
			xf[i] = to_f(x[i]), nwf[i] = to_f(nw[i]);
		ref_rmsnorm(h.data(), xf.data(), nwf.data(), 1, K, 1e-5f);
	} else {
		for (int i = 0; i < K; i++) {
			float g = to_f(x[i]);
			h[i] = PRO == GEMV_PRO_SWIGLU ? thru<A>(g / (1.0f + expf(-g)) * to_f(u[i])) : g;
		}
	}
	std::vector<double> want0, want1, sc0, sc1;
	ref_dot(want0, sc0, h, w0.f, b0f.data(), 1, K, N0);
	ref_dot(want1, sc1, h, w1.f, nullptr, 1, K, N1);
	for (int i = 0; i < N0; i++)
		want0[i] = thru<A>(to_f(r[i]) + thru<A>((float)want0[i]));
	for (int i = 0; i < N1; i++)
		want1[i] = thru<A>(0.75f * thru<A>((float)want1[i]));
	long long grid;
	int maxseg;
	qsk_grid((N0 + 15) / 16 + (N1 + 15) / 16, K, NWARP, wave, &grid, &maxseg);
	std::vector<float> part((size_t)((N0 + 15) / 16 + (N1 + 15) / 16) * maxseg * 16, NAN);
	std::vector<int> cnt((N0 + 15) / 16 + (N1 + 15) / 16, 0);
	size_t smb = (size_t)qsk_smem(QT, K, NWARP, S);
	unsigned char *sm = (unsigned char *)aligned_alloc(128, (smb + 127) / 128 * 128);
	std::vector<A> out[2][3];
	for (int run = 0; run < 2; run++) {
		std::vector<A> y0(N0, from_f<A>(NAN)), y1(N1, from_f<A>(NAN)), hs(K, from_f<A>(NAN));
		dim3 g, bl;
		g.x = (unsigned)grid, bl.x = 32 * NWARP;
		simt_launch(g, bl, [&] {
			k_qgemv_sk<A, QT, A, PRO, EPI, NWARP, S>(
			    y0.data(), y1.data(), nullptr, nullptr, w0.b.data(), w1.b.data(), nullptr, nullptr, b0.data(), nullptr,
			    nullptr, nullptr, x.data(), PRO == GEMV_PRO_SWIGLU ? u.data() : nullptr,
			    PRO == GEMV_PRO_RMSLATE ? nw.data() : nullptr, PRO == GEMV_PRO_RMSLATE ? hs.data() : nullptr, r.data(),
			    1, K, N0, N1, 0, 0, 1e-5f, 1.0f, 0.75f, 1.0f, 1.0f, part.data(), cnt.data(), maxseg, sm);
		});
		out[run][0] = y0, out[run][1] = y1, out[run][2] = hs;
	}
	free(sm);
	std::vector<float> g0(N0), g1(N1);
	for (int i = 0; i < N0; i++)
		g0[i] = to_f(out[0][0][i]);
	for (int i = 0; i < N1; i++)
		g1[i] = to_f(out[0][1][i]);
	std::string nm = fmt("qgemv_sk %s %s A=%s K=%d N=%d/%d warps=%d slots=%d grid=%lld maxseg=%d",
	                     PRO == GEMV_PRO_SWIGLU ? "swiglu" : PRO == GEMV_PRO_RMSLATE ? "rmsnorm-late" : "plain",
	                     quant_type_name(QT), aname<A>(), K, N0, N1, NWARP, S, grid, maxseg);
	double e0 = rel_l2(g0, want0, sc0), e1 = rel_l2(g1, want1, sc1);
	check(e0 <= tol<A>() && e1 <= tol<A>(), nm, fmt("rel-L2 %.3g, %.3g > %.3g", e0, e1, tol<A>()));
	bool same = true, zero = true;
	for (int k = 0; k < 3; k++)
		same &= !memcmp(out[0][k].data(), out[1][k].data(), out[0][k].size() * sizeof(A));
	for (int v : cnt)
		zero &= v == 0;
	check(same && zero, nm + " relaunch", fmt("bit-identical %d, counts zero %d", (int)same, (int)zero));
	if (PRO == GEMV_PRO_RMSLATE) {
		std::vector<float> gh(K);
		for (int i = 0; i < K; i++)
			gh[i] = to_f(out[0][2][i]);
		std::vector<double> hd(h.begin(), h.end()), z(h.size(), 0.0);
		double eh = rel_l2(gh, hd, z);
		check(eh <= tol<A>(), nm + " stored norm", fmt("rel-L2 %.3g", eh));
	}
}

/* k_qgemv_sk's cases for type QT: each prologue; grids of a few items a warp (most tiles split, ranges
** across tiles and members) and of a whole tile or more (direct stores). */
template <int QT> static void qsk_suite(void)
{
	test_qsk<bf16, QT, GEMV_PRO_NONE, 4, 3>(1024, 40, 24, 132); /* 20 items: 5 blocks, 1 or 2 a warp */
	test_qsk<bf16, QT, GEMV_PRO_NONE, 4, 3>(1024, 40, 24, 1);   /* 5 a warp: some tiles whole */
	test_qsk<float, QT, GEMV_PRO_SWIGLU, 4, 2>(2048, 24, 17, 3);
	test_qsk<bf16, QT, GEMV_PRO_RMSLATE, 2, 4>(1536, 33, 16, 5);
}

/*
** k_qgemv_tc<bf16, QT, NW, PRO, HAS_NW, EPI, MT, NCS, UC> (2..8·NCS tokens on the tensor cores, the mma
** emulated) at the launch glmc emits (ops/gemv_shape.h gemv_shape_qtc unless block is given): two members,
** member 0 with a bias and the residual added in place, member 1 scaled by 0.75; x as it is, its SwiGLU
** rounded to bf16, or the late norm (x·inv·nw unrounded, as the one-token late norm and --round-bf16's
** LAUNCH_NORM_LATE read it). Beside the bound, at least 97% of the outputs must be the float64 result
** correctly rounded (bf16's half ulp is 2^-9; one bf16 rounding of x·nw moves about a quarter of them).
*/
template <int QT, int PRO, bool HAS_NW, int NCS>
static void test_qtc(int T, int K, int N0, int N1, int block = 0, int mt2 = 0, bool store = false)
{
	QRows w0 = qrows(QT, N0, K, "blk.0.ffn_gate.weight"), w1 = qrows(QT, N1, K, "blk.0.ffn_up.weight");
	std::vector<bf16> x = rnd_a<bf16>((size_t)T * K, -2, 2), u = rnd_a<bf16>((size_t)T * K), nw = rnd_a<bf16>(K, 0.5f, 1.5f);
	std::vector<bf16> bias = rnd_a<bf16>(N0), y0 = rnd_a<bf16>((size_t)T * N0), y1((size_t)T * N1, from_f<bf16>(NAN));
	std::vector<bf16> r0 = y0;
	std::vector<float> h((size_t)T * K);
	std::vector<double> hwant((size_t)T * K); /* the stored norm, A(x·inv·nw) */
	std::vector<bf16> hs((size_t)T * K, from_f<bf16>(NAN));
	for (int t = 0; t < T; t++) {
		double ss = 0;
		for (int k = 0; k < K; k++)
			ss += (double)to_f(x[(size_t)t * K + k]) * to_f(x[(size_t)t * K + k]);
		float inv = 1.0f / sqrtf((float)(ss / K) + 1e-5f);
		for (int k = 0; k < K; k++) {
			size_t i = (size_t)t * K + k;
			float g = to_f(x[i]);
			hwant[i] = thru<bf16>(g * inv * (HAS_NW ? to_f(nw[k]) : 1.0f));
			h[i] = PRO == GEMV_PRO_SWIGLU ? thru<bf16>(g / (1.0f + expf(-g)) * to_f(u[i]))
			       : PRO == GEMV_PRO_RMSLATE ? (float)((double)g * inv * (HAS_NW ? to_f(nw[k]) : 1.0f))
			                                 : g;
		}
	}
	std::vector<float> bf(N0);
	for (int n = 0; n < N0; n++)
		bf[n] = to_f(bias[n]);
	std::vector<double> want0, want1, sc0, sc1;
	ref_dot(want0, sc0, h, w0.f, bf.data(), T, K, N0);
	ref_dot(want1, sc1, h, w1.f, nullptr, T, K, N1);
	for (size_t i = 0; i < want0.size(); i++)
		want0[i] = thru<bf16>(to_f(r0[i]) + thru<bf16>((float)want0[i]));
	for (size_t i = 0; i < want1.size(); i++)
		want1[i] = thru<bf16>(0.75f * thru<bf16>((float)want1[i]));
	int mt, uc, bl;
	long long grid;
	gemv_shape_qtc(N0 + N1, K, &mt, &uc, &bl, &grid);
	if (mt2) /* two tiles a block, as from 8448 rows */
		mt = 2, uc = 1, grid = (N0 + N1 + 31) / 32;
	dim3 gd, bd;
	gd.x = (unsigned)grid, bd.x = (unsigned)(block ? block : bl);
	constexpr int EPI = GEMV_EPI_RES | 2;
	auto run = [&](auto MTc, auto UCc) {
		simt_launch(gd, bd, [&] {
			k_qgemv_tc<bf16, QT, bf16, PRO, HAS_NW, EPI, decltype(MTc)::value, NCS, decltype(UCc)::value>(
			    y0.data(), y1.data(), nullptr, nullptr, w0.b.data(), w1.b.data(), nullptr, nullptr, bias.data(), nullptr,
			    nullptr, nullptr, x.data(), PRO == GEMV_PRO_SWIGLU ? u.data() : nullptr, HAS_NW ? nw.data() : nullptr,
			    store ? hs.data() : nullptr, y0.data(), T, K, N0, N1, 0, 0, 1e-5f, 1.0f, 0.75f, 1.0f, 1.0f);
		});
	};
	if (mt == 2)
		run(std::integral_constant<int, 2>(), std::integral_constant<int, 1>());
	else if (uc == 2)
		run(std::integral_constant<int, 1>(), std::integral_constant<int, 2>());
	else
		run(std::integral_constant<int, 1>(), std::integral_constant<int, 1>());
	std::vector<float> g0(y0.size()), g1(y1.size());
	long exact = 0;
	for (size_t i = 0; i < y0.size(); i++)
		g0[i] = to_f(y0[i]), exact += g0[i] == (float)want0[i];
	for (size_t i = 0; i < y1.size(); i++)
		g1[i] = to_f(y1[i]), exact += g1[i] == (float)want1[i];
	double e0 = rel_l2(g0, want0, sc0), e1 = rel_l2(g1, want1, sc1), fr = (double)exact / (double)(y0.size() + y1.size());
	/* the stored norm: every value within one bf16 step of A(x·inv·nw) (inv from a float sum), 99% equal */
	long hbad = 0, hsame = 0;
	for (size_t i = 0; store && i < hs.size(); i++) {
		double gv = to_f(hs[i]), d = fabs(gv - hwant[i]);
		hsame += gv == hwant[i], hbad += !(d <= fabs(hwant[i]) * (1.0 / 128));
	}
	bool hok = !store || (hbad == 0 && hsame >= 0.99 * (double)hs.size());
	const char *pro = PRO == GEMV_PRO_SWIGLU ? "swiglu" : PRO == GEMV_PRO_RMSLATE ? (HAS_NW ? "norm-late" : "norm-late (no weight)") : "plain";
	check(e0 <= tol<bf16>() && e1 <= tol<bf16>() && fr >= 0.97 && hok,
	      fmt("qgemv_tc %s %s%s NCS=%d T=%d K=%d N=%d/%d MT=%d UC=%d grid=%u block=%u", quant_type_name(QT), pro,
	          store ? " (norm stored)" : "", NCS, T, K, N0, N1, mt, uc, gd.x, bd.x),
	      fmt("rel-L2 %.3g, %.3g (bound %.3g), %.1f%% correctly rounded; stored norm: %ld off, %ld of %zu equal", e0, e1,
	          tol<bf16>(), 100 * fr, hbad, hsame, hs.size()));
}

/* k_qgemv_tc's cases for type QT: every prologue, one and two column sets (the late norm's pieces: 4 and
** 8 tokens a set's worth), partial tiles and sets, warps over several blocks (two in flight), two tiles a
** block (MT 2, forced: glmc takes it from 8448 rows), fewer warps than blocks. */
template <int QT> static void qtc_suite(void)
{
	test_qtc<QT, GEMV_PRO_NONE, false, 1>(2, 512, 24, 16);
	test_qtc<QT, GEMV_PRO_NONE, false, 1>(8, 4096, 16, 40);      /* 16 blocks: two in flight a warp */
	test_qtc<QT, GEMV_PRO_NONE, false, 2>(13, 1024, 40, 8);
	test_qtc<QT, GEMV_PRO_SWIGLU, false, 1>(5, 1536, 32, 20, 64); /* two warps over 6 blocks */
	test_qtc<QT, GEMV_PRO_RMSLATE, true, 1>(3, 2048, 20, 44);
	test_qtc<QT, GEMV_PRO_RMSLATE, true, 2>(7, 1024, 16, 16);
	test_qtc<QT, GEMV_PRO_RMSLATE, false, 1>(6, 768, 24, 24);
	test_qtc<QT, GEMV_PRO_NONE, false, 2>(11, 1024, 40, 30, 0, 1); /* MT 2: the last tile partial */
	test_qtc<QT, GEMV_PRO_RMSLATE, true, 2>(6, 512, 24, 20, 0, 1);
	/* the norm stored for other nodes (as GLM-4.7-Flash's router group, whose experts read it), over 7 and
	** over 1 block */
	test_qtc<QT, GEMV_PRO_RMSLATE, true, 1>(4, 2048, 64, 48, 0, 0, true);
	test_qtc<QT, GEMV_PRO_RMSLATE, false, 2>(8, 512, 16, 0, 0, 0, true);
}

/* k_qmoe_down_fused<A, QD, QS, true, true>, the MoE layer's end: the routed experts' down projections
** weighted and summed (float64) and rounded to A, plus the shared expert's (its SwiGLU rounded to A, the
** product rounded to A), the sum rounded to A, the residual added last, in place over it. hid is random
** (k_qmoe_up's float scratch). grid (ceil(C/16), T), block 256. With G > 0, k_qmoe_down_mma instead
** (groups of G experts, grid (ceil(C/128), ceil(k/G) + 1, T), the mma emulated), its counts left zero. */
template <typename A, int QD, int QS, int G = 0> static void test_qmoe_down_fused(int T, int C, int F, int Fs, int E, int k)
{
	QRows d = qrows(QD, (long long)E * C, F, "blk.0.ffn_down_exps.weight");
	QRows sd = qrows(QS, C, Fs, "blk.0.ffn_down_shexp.weight");
	std::vector<float> hid((size_t)T * k * F);
	for (auto &v : hid)
		v = frand(-1, 1);
	std::vector<A> wt = rnd_a<A>((size_t)T * k, 0, 1), g = rnd_a<A>((size_t)T * Fs), u = rnd_a<A>((size_t)T * Fs);
	std::vector<A> y = rnd_a<A>((size_t)T * C); /* the residual, summed into in place */
	std::vector<int> idx((size_t)T * k);
	for (size_t i = 0; i < idx.size(); i++)
		idx[i] = i == 1 ? -1 : (int)((i * 5 + 1) % (size_t)E);
	std::vector<double> want((size_t)T * C), scale((size_t)T * C);
	std::vector<float> sw((size_t)Fs);
	for (int t = 0; t < T; t++) {
		for (int f = 0; f < Fs; f++) {
			float gv = to_f(g[(size_t)t * Fs + f]);
			sw[(size_t)f] = thru<A>(gv / (1.0f + expf(-gv)) * to_f(u[(size_t)t * Fs + f]));
		}
		for (int c = 0; c < C; c++) {
			double routed = 0, a = 0, s = 0, b = 0;
			for (int j = 0; j < k; j++) {
				size_t slot = (size_t)t * k + j;
				if (idx[slot] < 0)
					continue;
				double dot = 0;
				for (int f = 0; f < F; f++) {
					double p = (double)d.f[((size_t)idx[slot] * C + c) * F + f] * hid[slot * F + f];
					dot += p, a += fabs(p * to_f(wt[slot]));
				}
				routed += to_f(wt[slot]) * dot;
			}
			for (int f = 0; f < Fs; f++) {
				double p = (double)sd.f[(size_t)c * Fs + f] * sw[(size_t)f];
				s += p, b += fabs(p);
			}
			float o = thru<A>(thru<A>((float)routed) + thru<A>((float)s));
			want[(size_t)t * C + c] = thru<A>(to_f(y[(size_t)t * C + c]) + o);
			scale[(size_t)t * C + c] = a / sqrt((double)F) + b / sqrt((double)Fs);
		}
	}
	dim3 gr, bl;
	bl.x = 256;
	int nz = 0;
	if constexpr (G > 0) {
		int nb = (C + 127) / 128;
		std::vector<float> part((size_t)T * (k + 1) * C, nanf(""));
		std::vector<int> cnt((size_t)T * nb, 0);
		gr.x = (unsigned)nb, gr.y = (unsigned)((k + G - 1) / G + 1), gr.z = (unsigned)T;
		simt_launch(gr, bl, [&] {
			k_qmoe_down_mma<A, QD, QS, true, true>(y.data(), hid.data(), part.data(), cnt.data(), idx.data(), wt.data(),
			                                       d.b.data(), C, F, k, G, sd.b.data(), g.data(), u.data(), Fs, y.data());
		});
		for (int v : cnt)
			nz += v != 0;
	} else {
		gr.x = (unsigned)((C + 15) / 16), gr.y = (unsigned)T;
		simt_launch(gr, bl, [&] {
			k_qmoe_down_fused<A, QD, QS, true, true>(y.data(), hid.data(), idx.data(), wt.data(), d.b.data(), C, F, k,
			                                         sd.b.data(), g.data(), u.data(), Fs, y.data());
		});
	}
	std::vector<float> got(y.size());
	for (size_t i = 0; i < y.size(); i++)
		got[i] = to_f(y[i]);
	double e = rel_l2(got, want, scale);
	std::string nm = G ? fmt("qmoe_down_mma G=%d", G) : std::string("qmoe_down_fused");
	check(e <= tol<A>() && nz == 0,
	      nm + fmt(" %s/%s A=%s T=%d C=%d F=%d Fs=%d E=%d k=%d (in place)", quant_type_name(QD), quant_type_name(QS),
	               aname<A>(), T, C, F, Fs, E, k),
	      fmt("rel-L2 %.3g > %.3g or %d counts not zero", e, tol<A>(), nz));
}

/* Every type: one token (the staging fast path) and three (the general one), in-block splits, K of one
** block, K over one 8192-value chunk; bias and SwiGLU; the routed experts' first half; the fused norm. */
template <int QT> static void suite(void)
{
	const int B = QT == 8 ? 32 : 256;
	for (int K : {B, 5 * B, 2048}) {
		test_qgemv<float, QT, 1, 1, false, false>(1, K, 37);
		test_qgemv<bf16, QT, 2, 1, true, false>(1, K, 20);
		test_qgemv<float, QT, 1, 8, false, false>(3, K, 17);
	}
	test_qgemv<bf16, QT, 4, 1, false, true>(1, 4096, 24);
	test_qgemv<float, QT, 8, 1, false, false>(1, 4096, 9);
	test_qgemv<bf16, QT, 1, 8, false, true>(2, 1024, 16);
	test_qgemv<float, QT, 2, 1, false, false>(1, 9216, 6); /* two chunks */
	/* blocks looping over row groups (x staged once; with WPR > 1 the shared sums reused), and with
	** x in two chunks (staged again for each group) */
	test_qgemv<bf16, QT, 1, 1, true, false>(1, 2048, 70, 2);
	test_qgemv<float, QT, 4, 1, false, true>(1, 1024, 45, 4);
	test_qgemv<float, QT, 2, 1, false, false>(1, 9216, 20, 1);
	test_qgemv<float, QT, 1, 8, false, false>(3, 1024, 40, 2);
	test_qmoe_up<bf16, QT, QT>(1, 1024, 24, 4, 3);
	test_qmoe_up<float, QT, QT>(2, 512, 16, 3, 2);
	test_qfused_norm<bf16, QT>(1, 1024, 20, 8, 1, 4);
	test_qfused_norm<float, QT>(1, 9216, 8, 4, 2, 2);
	test_qfused_norm<bf16, QT>(3, 512, 16, 16, 1, 1);
	test_qfused_norm<bf16, QT>(1, 1024, 40, 24, 1, 4, 3); /* blocks looping over both members' groups */
	test_qfused_norm<float, QT>(1, 9216, 20, 8, 2, 1, 2);
	/* the norm's scale after the dots: whole rows, two chunks, blocks looping over both members */
	test_qfused_norm<float, QT, false, true>(1, 1024, 20, 40, 1, 4);
	test_qfused_norm<bf16, QT, false, true>(1, 1024, 40, 24, 1, 4, 3);
	test_qfused_norm<float, QT, false, true>(1, 9216, 20, 8, 2, 1, 2);
	test_qmoe_down_fused<bf16, QT, QT>(1, 40, 1024, 512, 5, 3);
	test_qmoe_down_fused<float, QT, QT>(2, 24, 512, 1024, 4, 2);
}

/* The tensor-core paths of type QT: one block a row, splits, partial row groups, two chunks, looping
** blocks (x staged once, and per group with two chunks), bias, SwiGLU, two tokens; the fused norm. */
template <int QT> static void mma_suite(void)
{
	test_qgemv<float, QT, 1, 1, false, false, true>(1, 256, 16);
	test_qgemv<float, QT, 1, 1, false, false, true>(1, 2048, 37);
	test_qgemv<bf16, QT, 2, 1, true, false, true>(1, 1280, 40);
	test_qgemv<float, QT, 8, 1, false, true, true>(1, 4096, 24);
	test_qgemv<float, QT, 4, 1, true, false, true>(1, 9216, 20);
	test_qgemv<bf16, QT, 1, 1, false, false, true>(1, 2048, 70, 1);
	test_qgemv<float, QT, 2, 1, false, false, true>(1, 9216, 70, 1);
	test_qgemv<float, QT, 8, 1, true, true, true>(2, 1024, 30, 1);
	test_qfused_norm<float, QT, true>(1, 1024, 20, 40, 1, 4);
	test_qfused_norm<bf16, QT, true>(1, 2048, 16, 70, 2, 1, 1); /* one block over both members' groups */
	test_qfused_norm<float, QT, true>(1, 9216, 24, 8, 2, 8);    /* the norm's own pass, two chunks */
	test_qfused_norm<float, QT, true>(2, 512, 16, 16, 1, 1);
	/* the norm's scale after the dots: blocks looping (x staged once), two chunks, T = 2 */
	test_qfused_norm<float, QT, true, true>(1, 1024, 20, 40, 1, 4);
	test_qfused_norm<bf16, QT, true, true>(1, 2048, 16, 70, 2, 1, 1);
	test_qfused_norm<float, QT, true, true>(1, 9216, 24, 8, 2, 8);
	test_qfused_norm<float, QT, true, true>(2, 512, 16, 16, 1, 1);
	/* without a norm: x as it is or its SwiGLU, the residual in place; one chunk (looping blocks, x
	** staged once) and two chunks; two tokens */
	test_qfused_mma_res<bf16, QT, GEMV_PRO_NONE>(1, 2048, 200, 4, 1);
	test_qfused_mma_res<float, QT, GEMV_PRO_NONE>(1, 9216, 40, 2);
	test_qfused_mma_res<float, QT, GEMV_PRO_SWIGLU>(2, 1024, 48, 8);
	test_qfused_mma_res<bf16, QT, GEMV_PRO_SWIGLU>(1, 9216, 24, 1, 1);
	/* the MoE layer's end: groups of 1, 2 (the last partial) and 3 experts, an empty slot, rows past
	** the last row block, two tokens */
	test_qmoe_down_fused<bf16, QT, QT, 1>(1, 40, 512, 256, 5, 3);
	test_qmoe_down_fused<float, QT, 26 - QT, 2>(2, 136, 256, 512, 4, 3);
	test_qmoe_down_fused<bf16, QT, QT, 3>(1, 24, 512, 512, 6, 4);
}

/* Q8_0 on the tensor cores (int8 products, x as three digits): the shapes of mma_suite without the MoE
** end's other type (rows of one superblock, two chunks, looping blocks, bias, SwiGLU, two tokens, the norm
** late and not), the experts' gate/up and the MoE end. */
static void q8_mma_suite(void)
{
	test_qgemv<float, 8, 1, 1, false, false, true>(1, 256, 16);
	test_qgemv<float, 8, 1, 1, false, false, true>(1, 2048, 37);
	test_qgemv<bf16, 8, 2, 1, true, false, true>(1, 1280, 40);
	test_qgemv<float, 8, 8, 1, false, true, true>(1, 4096, 24);
	test_qgemv<float, 8, 4, 1, true, false, true>(1, 9216, 20);
	test_qgemv<bf16, 8, 1, 1, false, false, true>(1, 2048, 70, 1);
	test_qgemv<float, 8, 8, 1, true, true, true>(2, 1024, 30, 1);
	test_qfused_norm<float, 8, true>(1, 1024, 20, 40, 1, 4);
	test_qfused_norm<float, 8, true>(1, 9216, 24, 8, 2, 8); /* the norm's own pass, two chunks */
	test_qfused_norm<float, 8, true, true>(1, 1024, 20, 40, 1, 4);
	test_qfused_norm<bf16, 8, true, true>(1, 2048, 16, 70, 2, 1, 1);
	test_qfused_norm<float, 8, true, true>(2, 512, 16, 16, 1, 1);
	test_qfused_mma_res<bf16, 8, GEMV_PRO_NONE>(1, 2048, 200, 4, 1);
	test_qfused_mma_res<float, 8, GEMV_PRO_SWIGLU>(2, 1024, 48, 8);
	test_qfused_mma_res<bf16, 8, GEMV_PRO_SWIGLU>(1, 9216, 24, 1, 1);
	test_qmoe_up<bf16, 8, 8, true>(1, 1024, 70, 4, 3);
	test_qmoe_up<float, 8, 8, true>(2, 512, 24, 3, 2);
	test_qmoe_down_fused<bf16, 8, 8, 1>(1, 40, 512, 256, 5, 3);
	test_qmoe_down_fused<float, 8, 12, 2>(2, 136, 256, 512, 4, 3);
}

/* The exact decoders (q_elem through k_qdequant, and k_qembedding) against ops/quant.c bit for bit: rows
** of fresh random blocks of type QT (runtime/weights.c's generator: finite scales, ops/qrand.h), the
** outputs poisoned with NaN first; then the looked-up rows of a table (ids repeated and out of order).
** First the GPU's generator (k_qrand, what --random-weights plans upload) against those bytes. */
template <int QT> static void test_qexact(int rows, int K)
{
	QRows w = qrows(QT, rows, K, "blk.0.ffn_up.weight");
	long long nbytes = rows * w.stride;
	std::vector<unsigned char> gen(w.b.size(), 0);
	std::fill(gen.begin(), gen.begin() + nbytes, 0xa5); /* poisoned where k_qrand writes */
	dim3 g, bl;
	g.x = (unsigned)((nbytes + 255) / 256), bl.x = 256;
	simt_launch(g, bl, [&] {
		k_qrand<QT>(gen.data(), rows, K / QGeo<QT>::BLCK, w.stride, weights_random_seed("blk.0.ffn_up.weight"), K, rows,
		            1, 1, 0, 1, 0);
	});
	check(gen == w.b, fmt("qrand %s rows=%d K=%d: the CPU generator's bytes", quant_type_name(QT), rows, K), "differ");
	std::vector<float> y((size_t)rows * K, NAN);
	long long n = (long long)rows * K;
	g.x = (unsigned)((n + 255) / 256);
	simt_launch(g, bl, [&] { k_qdequant<float, QT>(y.data(), w.b.data(), n, K); });
	long bad = 0, nz = 0;
	for (size_t i = 0; i < y.size(); i++)
		bad += memcmp(&y[i], &w.f[i], 4) != 0, nz += w.f[i] != 0;
	check(bad == 0 && nz > (long)y.size() / 2, fmt("qdequant %s rows=%d K=%d bit-exact", quant_type_name(QT), rows, K),
	      fmt("%ld of %zu differ, %ld nonzero", bad, y.size(), nz));
	std::vector<int> ids = {rows - 1, 0, rows / 2, rows - 1};
	std::vector<float> e(ids.size() * (size_t)K, NAN);
	g.x = (unsigned)((K + 255) / 256), g.y = (unsigned)ids.size();
	simt_launch(g, bl, [&] { k_qembedding<float, QT>(e.data(), w.b.data(), ids.data(), (int)ids.size(), K); });
	bad = 0;
	for (size_t t = 0; t < ids.size(); t++)
		for (int c = 0; c < K; c++)
			bad += memcmp(&e[t * K + c], &w.f[(size_t)ids[t] * K + c], 4) != 0;
	check(bad == 0, fmt("qembedding %s K=%d bit-exact", quant_type_name(QT), K), fmt("%ld differ", bad));
}

/* k_qlinear_gemm<A, QT, HB> (the prefill GEMM, the tile loader decoding exactly): y = x·wᵀ (+ bias) for T
** rows, partial tiles in T, N and K. */
template <typename A, int QT, bool HB> static void test_qgemm(int T, int K, int N)
{
	QRows w = qrows(QT, N, K, "blk.0.attn_q.weight");
	std::vector<A> x = rnd_a<A>((size_t)T * K, -2, 2), b = rnd_a<A>(N);
	std::vector<float> h((size_t)T * K), bf(N);
	for (size_t i = 0; i < h.size(); i++)
		h[i] = to_f(x[i]);
	for (int n = 0; n < N; n++)
		bf[n] = to_f(b[n]);
	std::vector<double> want, scale;
	ref_dot(want, scale, h, w.f, HB ? bf.data() : nullptr, T, K, N);
	std::vector<A> y((size_t)T * N, from_f<A>(NAN));
	dim3 g, bl;
	g.x = (unsigned)((N + 63) / 64), g.y = (unsigned)((T + 63) / 64), bl.x = 256;
	simt_launch(g, bl, [&] {
		k_qlinear_gemm<A, QT, HB>(y.data(), x.data(), w.b.data(), HB ? b.data() : nullptr, T, K, N);
	});
	std::vector<float> got(y.size());
	for (size_t i = 0; i < y.size(); i++)
		got[i] = to_f(y[i]);
	double e = rel_l2(got, want, scale);
	check(e <= tol<A>(), fmt("qlinear_gemm %s A=%s T=%d K=%d N=%d%s", quant_type_name(QT), aname<A>(), T, K, N, HB ? " bias" : ""),
	      fmt("rel-L2 %.3g > %.3g", e, tol<A>()));
}

/* A general type QT (ops/quant.cuh qd_val, q_load/q_decode): the exact decoders, the decode GEMV (one token:
** the staging fast path, whole rows and two chunks, an in-block split, blocks looping over row groups;
** three tokens), the fused norm group (one token, late or not, and three), the routed experts' gate/up and the MoE end,
** the prefill GEMM. K of one block and rows of a partial 1024-value unit where the block allows. */
template <int QT> static void gsuite(void)
{
	const int B = QGeo<QT>::BLCK, K1 = B == 256 ? 1280 : 3 * B + 1024;
	test_qexact<QT>(6, 512);
	test_qgemv<float, QT, 1, 1, false, false>(1, B, 19);
	test_qgemv<bf16, QT, 2, 1, true, false>(1, K1, 20);
	test_qgemv<float, QT, 1, 8, false, true>(3, K1, 17);
	test_qgemv<float, QT, 2, 1, false, false>(1, 9216, 6, 2); /* two chunks, blocks looping */
	test_qfused_norm<bf16, QT>(1, 1024, 20, 8, 1, 4);
	test_qfused_norm<float, QT>(3, 512, 16, 16, 1, 1);
	test_qfused_norm<float, QT, false, true>(1, 1024, 20, 40, 1, 4); /* the norm's scale after the dots */
	test_qmoe_up<bf16, QT, QT>(1, 512, 16, 3, 2);
	test_qmoe_down_fused<float, QT, QT>(2, 24, 512, 512, 4, 2);
	test_qgemm<float, QT, true>(20, 512, 70);
}

/* The general types' derived tables against their sources: the sign masks against the sign bits and
** quant_grids.h's iq_ksigns, the codebook words q_tab16 looks up against iq4nl_values and mxfp4_values. */
static void test_derived_tables(void)
{
	int bad = 0;
	for (int s = 0; s < 256; s++)
		for (int j = 0; j < 8; j++)
			bad += (int)((iq_smask[s] >> 8 * j) & 0xff) != ((s >> j) & 1 ? 0xff : 0);
	for (int i = 0; i < 128; i++)
		bad += iq_ksmask[i] != iq_smask[iq_ksigns[i]];
	for (int n = 0; n < 16; n++) { /* nibble n at byte 0 of q: q_tab16's lo */
		unsigned lo, hi;
		q_tab_iq4((unsigned)n, lo, hi);
		bad += (int)(lo & 0xff) != iq4nl_values[n] + 128;
		q_tab_mx((unsigned)n << 4, lo, hi); /* the high nibble of byte 0: hi */
		bad += (hi & 0xff) != (0x80u | (unsigned)(mxfp4_values[n] + 12) << 2);
	}
	check(bad == 0, "general types' sign-mask tables and codebook words match their sources",
	      fmt("%d entries differ", bad));
}

/* Every general type, with the mixes a dynamic GGUF has (experts of one type, the shared expert another). */
static void general_types(void)
{
	test_derived_tables();
	gsuite<2>();
	gsuite<3>();
	gsuite<6>();
	gsuite<7>();
	gsuite<10>();
	gsuite<11>();
	gsuite<20>();
	gsuite<23>();
	gsuite<39>();
	gsuite<16>();
	gsuite<17>();
	gsuite<22>();
	gsuite<18>();
	gsuite<21>();
	gsuite<19>();
	gsuite<29>();
	gsuite<34>();
	gsuite<35>();
	gsuite<40>();
	test_qmoe_up<bf16, 16, 29>(1, 512, 16, 3, 2);
	test_qmoe_down_fused<bf16, 19, 12>(1, 40, 512, 256, 5, 3);
}

int main(void)
{
	if (getenv("QGEN_ONLY")) { /* the general types alone (while working on them) */
		general_types();
		return finish();
	}
	if (getenv("QSK_ONLY")) { /* the stream-K one-token kernel alone (while working on it) */
		qsk_suite<12>();
		qsk_suite<14>();
		return finish();
	}
	if (getenv("QTC_ONLY")) { /* the tensor-core batch kernels alone (while working on them) */
		qtc_suite<8>();
		qtc_suite<12>();
		qtc_suite<14>();
		return finish();
	}
	suite<8>();
	suite<12>();
	suite<13>();
	suite<14>();
	test_qmoe_up<bf16, 12, 14>(1, 512, 16, 3, 2);
	/* the tensor-core Q4_K path: one block a row, splits, partial row groups, two chunks, looping
	** blocks (x staged once, and per group with two chunks), bias, SwiGLU, two tokens */
	mma_suite<12>();
	mma_suite<14>();
	q8_mma_suite();
	qsk_suite<12>();
	qsk_suite<14>();
	qtc_suite<8>();
	qtc_suite<12>();
	qtc_suite<14>();
	test_qmoe_up<bf16, 12, 12, true>(1, 1024, 70, 4, 3);
	test_qmoe_up<float, 12, 12, true>(2, 512, 24, 3, 2);
	general_types();
	return finish();
}
