/*
** tests/simt/test_moe.cc — the MoE decode kernels (k_moe_route, k_moe_weights, k_moe_route_weights,
** k_moe_up, k_moe_down, k_moe_down_fused), the MLA value absorb (k_mla_vabsorb, also merging the split
** attention's states), the 1-token attention with its rotary folded in (k_attn_step_rope) and the greedy
** sampler's split argmax (k_sample) run on the CPU through simt.h against ops/ref.c: most cases of tests/gpu/test_kernels.cu and test_fused.cu,
** checkable before a GPU is at hand (`make simt-test`; seconds: every emulated thread is a fiber,
** every collective a rendezvous that yields). Routing ids must equal ref_moe_route's exactly, weights
** ref_moe_weights' within an ulp of A (here glibc's exp on both sides: usually bit for bit), the
** experts' and the attention's output the reference's within 1e-5 (float) or 2e-2 (bf16) relative L2.
** Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"

#include <string>
#include <type_traits>

#include "../tap.h"

extern "C" {
#include "../../ops/ref.h"
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

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

template <typename T> static T h_from_f(float v);
template <> float h_from_f<float>(float v)
{
	return v;
}
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
static float h_to_f(float v)
{
	return v;
}
static float h_to_f(bf16 v)
{
	return ref_bf16_to_f32(v.x);
}
static float h_to_f(f16 v)
{
	return ref_f16_to_f32(v.x);
}
template <typename T> static const char *tname()
{
	return std::is_same<T, float>::value ? "f32" : std::is_same<T, bf16>::value ? "bf16" : "f16";
}

template <typename T> static std::vector<T> rnd_as(size_t n, float lo, float hi)
{
	std::vector<T> v(n);
	for (T &x : v)
		x = h_from_f<T>(frand(lo, hi));
	return v;
}

template <typename T> static std::vector<float> to_float(const std::vector<T> &v)
{
	std::vector<float> f(v.size());
	for (size_t i = 0; i < v.size(); i++)
		f[i] = h_to_f(v[i]);
	return f;
}

/* Logits row t of kind (t + shift) % 5: random, all equal, equal pairs, from {-1, 0, 1}, or with NaN and
** infinities (ids only). Bias from {-0.1, 0, 0.1} when ties, else random. As the GPU tests. */
static std::vector<float> route_logits(int T, int E, int shift, bool special)
{
	std::vector<float> l((size_t)T * E);
	for (float &v : l)
		v = frand(-3.0f, 3.0f);
	for (int t = 0; t < T; t++) {
		float *r = &l[(size_t)t * E];
		int kind = (t + shift) % (special ? 5 : 4);
		for (int e = 0; e < E; e++)
			if (kind == 1)
				r[e] = 0.5f;
			else if (kind == 2)
				r[e] = r[e & ~1];
			else if (kind == 3)
				r[e] = (float)(rand64() % 3) - 1.0f;
		if (kind == 4)
			r[3 % E] = NAN, r[E - 1] = NAN, r[1] = INFINITY, r[E / 2] = -INFINITY;
	}
	return l;
}

/* Routing and weights, separate and fused, over k in {1, 2, 4, 8}, T in {1, 3, 8}, bias and norm on and
** off (tests/gpu covers every T from 1 to 8; the emulation is slow). */
template <typename A> static void test_route(int E, int ng, int tg, int sig, int wsig, bool special)
{
	int mant = std::is_same<A, float>::value ? 23 : 7;
	std::string bad;
	int cases = 0;
	for (int k : {1, 2, 4, 8}) {
		if (k > tg * (E / ng))
			continue;
		for (int T : {1, 3, 8})
			for (int v = 0; v < 4; v++) {
				int use_bias = v & 1, norm = v >> 1, fused = (T + k + v) % 2;
				float scale = norm ? 2.5f : 1.8f;
				std::vector<float> lr = route_logits(T, E, k + T, special);
				std::vector<A> lg(lr.size());
				for (size_t i = 0; i < lr.size(); i++)
					lg[i] = h_from_f<A>(lr[i]);
				std::vector<float> lf = to_float(lg), bf(E);
				for (float &b : bf)
					b = (T + k) % 2 ? 0.1f * ((float)(rand64() % 3) - 1.0f) : frand(-0.2f, 0.2f);
				std::vector<int> want((size_t)T * k), got(want.size(), 0x55555555);
				std::vector<float> ww(want.size());
				ref_moe_route(want.data(), lf.data(), use_bias ? bf.data() : NULL, T, E, k, ng, tg, sig);
				ref_moe_weights(ww.data(), lf.data(), want.data(), T, E, k, wsig, norm, scale);
				std::vector<A> gw(want.size(), h_from_f<A>(NAN));
				const float *bp = use_bias ? bf.data() : nullptr;
				dim3 g, b;
				g.x = (unsigned)T, b.x = 32;
				if (fused) {
					b.x = (T + k) % 3 ? 256 : 32; /* glmc's block, and one warp: any multiple of 32 */
					simt_launch(g, b, [&] {
						k_moe_route_weights<A, float>(got.data(), gw.data(), lg.data(), bp, E, k, ng, tg, sig,
									      wsig, norm, scale);
					});
				} else {
					simt_launch(g, b, [&] { k_moe_route<A, float>(got.data(), lg.data(), bp, E, k, ng, tg, sig); });
					simt_launch(g, b, [&] {
						k_moe_weights<A>(gw.data(), lg.data(), want.data(), E, k, wsig, norm, scale);
					});
				}
				std::string at = fmt("k=%d T=%d%s%s%s", k, T, use_bias ? " bias" : "", norm ? " norm" : "",
						     fused ? " fused" : "");
				for (size_t i = 0; i < got.size() && bad.empty(); i++)
					if (got[i] != want[i])
						bad = fmt("%s: id %zu is %d, want %d", at.c_str(), i, got[i], want[i]);
				for (size_t i = 0; i < ww.size() && bad.empty() && !special; i++) {
					float w = h_to_f(h_from_f<A>(ww[i])), gv = h_to_f(gw[i]);
					float ulp = w == 0.0f || !isfinite(w) ? 0.0f : ldexpf(1.0f, ilogbf(w) - mant);
					if (!(fabsf(gv - w) <= ulp))
						bad = fmt("%s: weight %zu is %.9g, want %.9g", at.c_str(), i, gv, w);
				}
				cases++;
			}
	}
	check(bad.empty(),
	      fmt("moe routing A=%s E=%d groups %d/%d choice %s weights %s%s: %d cases", tname<A>(), E, ng, tg,
		  sig ? "sigmoid" : "softmax", wsig ? "sigmoid" : "softmax", special ? " NaN/inf rows" : "", cases),
	      bad);
}

/* Relative L2 distance of y (n = want.size() values of type A) from want; infinite when want is all 0. */
template <typename A> static double rel_l2(const A *y, const std::vector<float> &want)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < want.size(); i++) {
		double d = (double)h_to_f(y[i]) - want[i];
		num += d * d;
		den += (double)want[i] * want[i];
	}
	return den > 0 ? sqrt(num / den) : INFINITY;
}

/* k_moe_up then k_moe_down against ref_moe_ffn; token 1 skips slot 1, with T >= 4 the last token skips
** every slot (its row must be 0). */
template <typename A, typename W> static void test_ffn(int T, int C, int F, int E, int k)
{
	std::vector<A> x = rnd_as<A>((size_t)T * C, -1, 1), w = rnd_as<A>((size_t)T * k, 0.1f, 1);
	std::vector<W> gate = rnd_as<W>((size_t)E * F * C, -1, 1), up = rnd_as<W>((size_t)E * F * C, -1, 1),
		       down = rnd_as<W>((size_t)E * C * F, -1, 1);
	std::vector<int> idx;
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++)
			idx.push_back((t == 1 && j == 1) || (T >= 4 && t == T - 1) ? -1 : (t * 7 + j * 3) % E);
	std::vector<float> xf = to_float(x), wf = to_float(w), gf = to_float(gate), uf = to_float(up),
			   df = to_float(down), want((size_t)T * C);
	ref_moe_ffn(want.data(), xf.data(), idx.data(), wf.data(), gf.data(), uf.data(), df.data(), T, C, F, E, k);
	std::vector<float> hid((size_t)T * k * F, NAN);
	std::vector<A> y((size_t)T * C, h_from_f<A>(NAN));
	dim3 g, b;
	g.x = (unsigned)(F + 7) / 8, g.y = (unsigned)k, g.z = (unsigned)T, b.x = 256;
	simt_launch(g, b, [&] { k_moe_up<A, W>(hid.data(), x.data(), idx.data(), gate.data(), up.data(), C, F, k); });
	dim3 g2;
	g2.x = (unsigned)(C + 7) / 8, g2.y = (unsigned)T;
	simt_launch(g2, b, [&] { k_moe_down<A, W>(y.data(), hid.data(), idx.data(), w.data(), down.data(), C, F, k); });
	double e = rel_l2(y.data(), want), tol = std::is_same<A, float>::value ? 1e-5 : 2e-2;
	check(e <= tol, fmt("moe_up+moe_down A=%s W=%s T=%d C=%d F=%d E=%d k=%d", tname<A>(), tname<W>(), T, C, F, E, k),
	      fmt("rel-L2 %.3g > %.3g", e, tol));
}

/* k_moe_up then k_moe_down_fused (the MoE end of a decode step: the routed downs weighted and summed, with
** SH the shared expert's down of silu(g)·u, with RES the residual; odd T in place over it) against
** ref_moe_ffn, ref_swiglu, ref_linear and ref_add, each rounded to A where the nodes store it. k·F up to
** MOE_HX stages token t's hid rows in shared memory; past it they are read from hid; rows that are not
** whole 16-byte vectors take the element-wise path. Token 1 skips slot 1. */
template <typename A, typename W, bool SH, bool RES> static void test_down_fused(int T, int C, int F, int E, int k, int Fs)
{
	std::vector<A> x = rnd_as<A>((size_t)T * C, -1, 1), w = rnd_as<A>((size_t)T * k, 0.1f, 1);
	std::vector<A> g = rnd_as<A>((size_t)T * Fs, -2, 2), u = rnd_as<A>((size_t)T * Fs, -1, 1);
	std::vector<A> r = rnd_as<A>((size_t)T * C, -1, 1);
	std::vector<W> gate = rnd_as<W>((size_t)E * F * C, -1, 1), up = rnd_as<W>((size_t)E * F * C, -1, 1),
		       down = rnd_as<W>((size_t)E * C * F, -1, 1), sdown = rnd_as<W>((size_t)C * Fs, -1, 1);
	std::vector<int> idx;
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++)
			idx.push_back(t == 1 && j == 1 ? -1 : (t * 5 + j * 3) % E);
	auto through = [](std::vector<float> v) {
		for (float &e : v)
			e = h_to_f(h_from_f<A>(e));
		return v;
	};
	std::vector<float> xf = to_float(x), wf = to_float(w), gf = to_float(gate), uf = to_float(up),
			   df = to_float(down), want((size_t)T * C);
	ref_moe_ffn(want.data(), xf.data(), idx.data(), wf.data(), gf.data(), uf.data(), df.data(), T, C, F, E, k);
	want = through(want);
	if (SH) {
		std::vector<float> sg = to_float(g), su = to_float(u), sd = to_float(sdown), h((size_t)T * Fs), y(want.size());
		ref_swiglu(h.data(), sg.data(), su.data(), h.size());
		h = through(h);
		ref_linear(y.data(), h.data(), sd.data(), NULL, T, Fs, C);
		y = through(y);
		ref_add(want.data(), want.data(), y.data(), want.size(), want.size());
		want = through(want);
	}
	if (RES) {
		std::vector<float> rf = to_float(r);
		ref_add(want.data(), rf.data(), want.data(), want.size(), want.size());
		want = through(want);
	}
	std::vector<float> hid((size_t)T * k * F, NAN);
	std::vector<A> yb((size_t)T * C, h_from_f<A>(NAN));
	A *y = RES && T % 2 ? r.data() : yb.data(); /* odd T: in place over the residual */
	dim3 g1, b;
	g1.x = (unsigned)(F + 7) / 8, g1.y = (unsigned)k, g1.z = (unsigned)T, b.x = 256;
	simt_launch(g1, b, [&] { k_moe_up<A, W>(hid.data(), x.data(), idx.data(), gate.data(), up.data(), C, F, k); });
	dim3 g2;
	g2.x = (unsigned)(C + 7) / 8, g2.y = (unsigned)T;
	simt_launch(g2, b, [&] {
		k_moe_down_fused<A, W, W, SH, RES>(y, hid.data(), idx.data(), w.data(), down.data(), C, F, k,
		                                   SH ? sdown.data() : nullptr, SH ? g.data() : nullptr,
		                                   SH ? u.data() : nullptr, Fs, RES ? r.data() : nullptr);
	});
	double e = rel_l2(y, want), tol = std::is_same<A, float>::value ? 1e-5 : 2e-2;
	check(e <= tol,
	      fmt("moe_down_fused A=%s W=%s T=%d C=%d F=%d E=%d k=%d (k·F %s MOE_HX)%s%s", tname<A>(), tname<W>(), T, C, F,
	          E, k, k * F <= MOE_HX ? "<=" : ">", SH ? fmt(" shared Fs=%d", Fs).c_str() : "",
	          RES ? (T % 2 ? " residual(in place)" : " residual") : ""),
	      fmt("rel-L2 %.3g > %.3g", e, tol));
}

/* ‖out − o·wvᵀ‖/‖o·wvᵀ‖ of an absorb's out[t, h, j] against the double sums o[t, h] · wv[h, j] over Dv. */
template <typename A, typename W>
static double absorb_err(const std::vector<double> &o, const std::vector<W> &wv, const std::vector<A> &out, int T,
                         int H, int Dv, int Do)
{
	double num = 0, den = 0;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++)
			for (int j = 0; j < Do; j++) {
				double s = 0;
				for (int i = 0; i < Dv; i++)
					s += o[((size_t)t * H + h) * Dv + i] * h_to_f(wv[((size_t)h * Do + j) * Dv + i]);
				double d = (double)h_to_f(out[((size_t)t * H + h) * Do + j]) - s;
				num += d * d, den += s * s;
			}
	return den > 0 ? sqrt(num / den) : INFINITY;
}

/* The MLA value absorb (k_mla_vabsorb, glmc's grid) against a double loop: out[t, h, j] = o[t, h] · wv[h, j]
** over Dv. Dv 512 of bf16 is GLM's (one chunk of vectors), of float two chunks, 40 the scalar path;
** Do 44 leaves a warp with rows past the end, T 9 a second block of tokens. */
template <typename A, typename W> static void test_vabsorb(int T, int H, int Dv, int Do)
{
	std::vector<A> o = rnd_as<A>((size_t)T * H * Dv, -1, 1), out((size_t)T * H * Do, h_from_f<A>(NAN));
	std::vector<W> wv = rnd_as<W>((size_t)H * Do * Dv, -1, 1);
	dim3 g, b;
	g.x = (unsigned)((Do + 8 * MLA_VR - 1) / (8 * MLA_VR)), g.y = (unsigned)(T + 7) / 8, g.z = (unsigned)H, b.x = 256;
	simt_launch(g, b, [&] { k_mla_vabsorb<A, W>(out.data(), o.data(), wv.data(), T, H, Dv, Do); });
	std::vector<double> od(o.size());
	for (size_t i = 0; i < o.size(); i++)
		od[i] = h_to_f(o[i]);
	double e = absorb_err(od, wv, out, T, H, Dv, Do), tol = std::is_same<A, float>::value ? 1e-5 : 4e-3;
	check(e <= tol, fmt("mla_vabsorb A=%s W=%s T=%d H=%d Dv=%d Do=%d", tname<A>(), tname<W>(), T, H, Dv, Do),
	      fmt("rel-L2 %.3g > %.3g", e, tol));
}

/* The absorb that merges the split attention's range states itself (k_mla_vabsorb<.., true>, after
** k_mla_split<.., false>): per token and head NS states (m, l, acc[Dv]) in k_mla_split's layout, of which
** the first nr exist (every fifth of them empty: m = -inf, l = 0, acc = 0) and the rest are what the
** attention leaves past a token's ranges (m = -inf, l = 0, acc stale: NaN). Against a double loop:
** o = Σ e_r·acc_r / Σ e_r·l_r with e_r = exp(m_r - max m), rounded to A, then o · wv[h, j]. */
template <typename A, typename W> static void test_vabsorb_merged(int T, int H, int Dv, int Do, int NS)
{
	std::vector<float> pacc((size_t)T * NS * H * Dv), pml((size_t)T * NS * H * 2);
	std::vector<double> o((size_t)T * H * Dv);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++) {
			int nr = 1 + (int)(rand64() % (unsigned)NS);
			double m = -INFINITY, l = 0;
			for (int r = 0; r < NS; r++) {
				size_t at = ((size_t)t * NS + r) * H + h;
				bool empty = r >= nr || (r % 5 == 3 && nr > 1);
				pml[at * 2] = empty ? -INFINITY : frand(-3, 3), pml[at * 2 + 1] = empty ? 0.0f : frand(0.5f, 5);
				for (int i = 0; i < Dv; i++)
					pacc[at * Dv + i] = r >= nr ? NAN : empty ? 0.0f : frand(-2, 2);
				if (!empty)
					m = std::max(m, (double)pml[at * 2]);
			}
			for (int r = 0; r < nr; r++) {
				size_t at = ((size_t)t * NS + r) * H + h;
				double e = pml[at * 2] == -INFINITY ? 0 : exp(pml[at * 2] - m);
				l += e * pml[at * 2 + 1];
				for (int i = 0; i < Dv; i++)
					o[((size_t)t * H + h) * Dv + i] += e * pacc[at * Dv + i];
			}
			for (int i = 0; i < Dv; i++) {
				double &v = o[((size_t)t * H + h) * Dv + i];
				v = h_to_f(h_from_f<A>((float)(v / l)));
			}
		}
	std::vector<W> wv = rnd_as<W>((size_t)H * Do * Dv, -1, 1);
	std::vector<A> out((size_t)T * H * Do, h_from_f<A>(NAN));
	dim3 g, b;
	g.x = (unsigned)((Do + 8 * MLA_VR - 1) / (8 * MLA_VR)), g.y = (unsigned)(T + 7) / 8, g.z = (unsigned)H, b.x = 256;
	simt_launch(g, b, [&] {
		k_mla_vabsorb<A, W, true>(out.data(), nullptr, wv.data(), T, H, Dv, Do, pacc.data(), pml.data(), NS);
	});
	double e = absorb_err(o, wv, out, T, H, Dv, Do), tol = std::is_same<A, float>::value ? 1e-5 : 4e-3;
	check(e <= tol,
	      fmt("mla_vabsorb merging NS=%d states A=%s W=%s T=%d H=%d Dv=%d Do=%d", NS, tname<A>(), tname<W>(), T, H, Dv, Do),
	      fmt("rel-L2 %.3g > %.3g", e, tol));
}

/* The attention glmc emits for steps of up to 16 tokens (emit_cuda.c MLA_SPLIT_TMAX): k_mla_split<A, HB,
** false> at glmc's geometry (HB = mla_split_hb(H) heads a block, NS = 64/HB ranges), which writes its
** range states, then the absorb that merges them (k_mla_vabsorb<A, W, true>); against ref_mla token by
** token and a double absorb of its result rounded to A. Token t reads slot seq[t] at position pos[t]
** (tokens may share a slot, as a prefill does: rows past a token's own position must stay invisible to
** it); rows past each slot's highest position are NaN, as are the states and outputs before the launches. */
template <typename A, typename W> static void test_mla_pair(int H, int Dk, int Dv, int Do, std::vector<int> seq,
                                                            std::vector<int> pos, float scale)
{
	int T = (int)seq.size(), HB = mla_split_hb(H), NS = 64 / HB, HG = (H + HB - 1) / HB, slots = 0, S = 0;
	for (int t = 0; t < T; t++)
		slots = std::max(slots, seq[t] + 1), S = std::max(S, pos[t] + 4);
	std::vector<int> top(slots, -1);
	for (int t = 0; t < T; t++)
		top[seq[t]] = std::max(top[seq[t]], pos[t]);
	std::vector<float> cf((size_t)slots * S * Dk, NAN);
	for (int sl = 0; sl < slots; sl++)
		for (size_t i = 0; i < (size_t)(top[sl] + 1) * Dk; i++)
			cf[(size_t)sl * S * Dk + i] = h_to_f(h_from_f<A>(frand(-0.5f, 1.0f)));
	std::vector<A> cache(cf.size()), q = rnd_as<A>((size_t)T * H * Dk, -1, 1);
	for (size_t i = 0; i < cf.size(); i++)
		cache[i] = h_from_f<A>(cf[i]);
	std::vector<float> qf(q.size()), want((size_t)T * H * Dv);
	for (size_t i = 0; i < q.size(); i++)
		qf[i] = h_to_f(q[i]);
	for (int t = 0; t < T; t++) {
		std::vector<float> slot(cf.begin() + (size_t)seq[t] * S * Dk, cf.begin() + (size_t)(seq[t] + 1) * S * Dk);
		std::vector<float> kv(slot.begin() + (size_t)pos[t] * Dk, slot.begin() + (size_t)(pos[t] + 1) * Dk);
		ref_mla(want.data() + (size_t)t * H * Dv, qf.data() + (size_t)t * H * Dk, kv.data(), slot.data(), &pos[t], NULL,
		        0, 1, H, Dk, Dv, S, scale);
	}
	std::vector<float> pacc((size_t)T * NS * H * Dv, NAN), pml((size_t)T * NS * H * 2, NAN);
	dim3 g, b;
	g.x = (unsigned)NS, g.y = (unsigned)HG, g.z = (unsigned)T, b.x = 256;
	simt_launch(g, b, [&] {
		if (HB == 4)
			k_mla_split<A, 4, false>(nullptr, pacc.data(), pml.data(), nullptr, q.data(), cache.data(), pos.data(),
			                         nullptr, 0, 0, H, Dk, Dv, scale, seq.data(), S);
		else if (HB == 2)
			k_mla_split<A, 2, false>(nullptr, pacc.data(), pml.data(), nullptr, q.data(), cache.data(), pos.data(),
			                         nullptr, 0, 0, H, Dk, Dv, scale, seq.data(), S);
		else
			k_mla_split<A, 1, false>(nullptr, pacc.data(), pml.data(), nullptr, q.data(), cache.data(), pos.data(),
			                         nullptr, 0, 0, H, Dk, Dv, scale, seq.data(), S);
	});
	std::vector<W> wv = rnd_as<W>((size_t)H * Do * Dv, -1, 1);
	std::vector<A> out((size_t)T * H * Do, h_from_f<A>(NAN));
	g.x = (unsigned)((Do + 8 * MLA_VR - 1) / (8 * MLA_VR)), g.y = (unsigned)(T + 7) / 8, g.z = (unsigned)H;
	simt_launch(g, b, [&] {
		k_mla_vabsorb<A, W, true>(out.data(), nullptr, wv.data(), T, H, Dv, Do, pacc.data(), pml.data(), NS);
	});
	std::vector<double> o(want.size());
	for (size_t i = 0; i < want.size(); i++)
		o[i] = h_to_f(h_from_f<A>(want[i]));
	double e = absorb_err(o, wv, out, T, H, Dv, Do), tol = std::is_same<A, float>::value ? 1e-5 : 4e-3;
	std::string cfg;
	for (int t = 0; t < T; t++)
		cfg += fmt("%s%d@%d", t ? " " : "", seq[t], pos[t]);
	check(e <= tol,
	      fmt("mla_split + merging absorb A=%s W=%s H=%d (%d a block, %d ranges) Dk=%d Dv=%d Do=%d T=%d (slot@pos %s)",
	          tname<A>(), tname<W>(), H, HB, NS, Dk, Dv, Do, T, cfg.c_str()),
	      fmt("rel-L2 %.3g > %.3g", e, tol));
}

/* Values rounded through A, as a tensor of A holding them has them. */
template <typename A> static std::vector<float> through_a(const std::vector<float> &v)
{
	std::vector<float> r(v.size());
	for (size_t i = 0; i < v.size(); i++)
		r[i] = h_to_f(h_from_f<A>(v[i]));
	return r;
}

/* The relative L2 error of y against want (infinite on a NaN). */
template <typename A> static double rel_err(const std::vector<A> &y, const std::vector<float> &want)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < want.size(); i++) {
		double d = (double)h_to_f(y[i]) - want[i];
		num += d * d, den += (double)want[i] * want[i];
	}
	return std::isnan(num) ? INFINITY : sqrt(num / den);
}

/* A 1-token step's attention with its rotary and cache writes (k_attn_step_rope; the cases of
** tests/gpu/test_fused.cu's test_attn_rope, fewer): against ref_rope + ref_attention, the caches poisoned
** (NaN) outside rows 0..p-1 of the slot; row p must hold k_rope_qk_kv's rotated k (bit for bit) and the raw
** v, no other row may change; then k_attn_step over the caches so written, from k_rope_qk_kv's q. */
template <typename A, int ROWB, bool IL>
static void test_attn_rope(int H, int G, int R, int p, int slot, int nslots, int sc)
{
	const int D = ROWB / (int)sizeof(A), S = p + 8;
	std::vector<A> q = rnd_as<A>((size_t)H * D, -2, 2), k = rnd_as<A>((size_t)G * D, -2, 2), v = rnd_as<A>((size_t)G * D, -1, 1);
	RefRope rr = {};
	rr.head_dim = D, rr.rot_dim = R, rr.interleaved = IL, rr.theta = 10000.0, rr.scaling = sc;
	rr.factor = sc == ROPE_LLAMA3 ? 8 : 4, rr.orig_ctx = sc == ROPE_LLAMA3 ? 64 : 4096; /* llama3: most pairs scaled */
	rr.low_freq_factor = 1, rr.high_freq_factor = 4;
	std::vector<float> inv(R / 2), wq((size_t)H * D), wk((size_t)G * D), want((size_t)H * D);
	float cs;
	ref_rope_freqs(&rr, inv.data(), &cs);
	std::vector<float> qf = to_float(q), kf = to_float(k), vf = to_float(v);
	ref_rope(wq.data(), qf.data(), &p, 1, H, &rr);
	ref_rope(wk.data(), kf.data(), &p, 1, G, &rr);
	wq = through_a<A>(wq), wk = through_a<A>(wk);
	size_t row = (size_t)G * D, n = (size_t)nslots * S * row, at = (size_t)slot * S * row;
	std::vector<A> kc(n, h_from_f<A>(NAN)), vc(n, h_from_f<A>(NAN));
	std::vector<float> kcf((size_t)S * row), vcf((size_t)S * row);
	for (size_t i = 0; i < (size_t)p * row; i++) {
		kc[at + i] = h_from_f<A>(frand(-1, 1)), vc[at + i] = h_from_f<A>(frand(-1, 1));
		kcf[i] = h_to_f(kc[at + i]), vcf[i] = h_to_f(vc[at + i]);
	}
	std::vector<A> kc0 = kc, vc0 = vc, y((size_t)H * D, h_from_f<A>(NAN));
	float scale = 1.0f / sqrtf((float)D);
	ref_attention(want.data(), wq.data(), wk.data(), vf.data(), kcf.data(), vcf.data(), &p, 1, H, G, D, D, S, scale);
	int seq = slot;
	dim3 g, b;
	g.x = (unsigned)H, b.x = 512;
	simt_launch(g, b, [&] {
		k_attn_step_rope<A, ROWB, IL>(y.data(), kc.data(), vc.data(), q.data(), k.data(), v.data(), &p,
		                              inv.data(), inv.data(), cs, cs, H, G, R, scale, &seq, S);
	});
	/* the unfused rotary's k row, for the bit-for-bit check of cache row p */
	std::vector<A> qo((size_t)H * D), ko(row), skc((size_t)(p + 1) * row), svc((size_t)(p + 1) * row);
	int zero = 0;
	g.x = (unsigned)(H + G), b.x = 128;
	simt_launch(g, b, [&] {
		k_rope_qk_kv<A, float, false, false, IL>(qo.data(), ko.data(), skc.data(), svc.data(), q.data(), k.data(), v.data(),
		                                         nullptr, nullptr, &p, inv.data(), inv.data(), cs, cs, H, G, D, D, R,
		                                         0.0f, &zero, 0);
	});
	std::string nm = fmt("attn_step_rope A=%s D=%d H=%d G=%d R=%d%s pos %d slot %d/%d%s", tname<A>(), D, H, G, R,
	                     IL ? " interleaved" : "", p, slot, nslots, sc ? fmt(" %s", ref_rope_scaling_name(sc)).c_str() : "");
	double e = rel_err(y, want), tol = std::is_same<A, float>::value ? 1e-5 : 2e-2;
	check(e <= tol, nm + " out", fmt("rel-L2 %.3g > %.3g", e, tol));
	size_t rp = at + (size_t)p * row;
	check(!memcmp(&kc[rp], ko.data(), sizeof(A) * row) && !memcmp(&vc[rp], v.data(), sizeof(A) * row), nm + " cache row p",
	      "row p differs from k_rope_qk_kv's rotated k or the raw v");
	memcpy(&kc0[rp], &kc[rp], sizeof(A) * row), memcpy(&vc0[rp], &vc[rp], sizeof(A) * row);
	check(!memcmp(kc.data(), kc0.data(), sizeof(A) * n) && !memcmp(vc.data(), vc0.data(), sizeof(A) * n),
	      nm + " other cache rows untouched", "a row other than p changed");
	/* the unfused path's attention over the caches now written: k_attn_step on the rotated q */
	std::fill(y.begin(), y.end(), h_from_f<A>(NAN));
	g.x = (unsigned)H, b.x = 512;
	simt_launch(g, b, [&] {
		k_attn_step<A, ROWB>(y.data(), qo.data(), kc.data(), vc.data(), &p, H, G, D, D, scale, &seq, S);
	});
	e = rel_err(y, want);
	check(e <= tol, nm + " k_attn_step after k_rope_qk_kv", fmt("rel-L2 %.3g > %.3g", e, tol));
}

/*
** The greedy sampler (k_sample at temperature 0) with its argmax split over NB blocks a row: each row's
** token must be the first index of its max (NaN first, ranks_before), whatever slice holds it, its ring
** entry, next token, position and step advanced once per launch, and the per-row counters back at zero
** after it (three launches in a row). Rows of A; the max planted in a chosen slice, ties across slices,
** NaN in a late slice; V not a whole number of vectors.
*/
template <typename A> static void test_sample_split(int V, int rows, int NB, int block, int kind)
{
	std::string bad;
	int cap = 4;
	std::vector<int> out((size_t)rows * cap, -7), tok(rows, -7), pos(rows), step(rows, 0), seq(rows, 0);
	std::vector<float> params = {0.0f, 0.0f, 1.0f, 0.0f}, pv((size_t)rows * NB, NAN);
	std::vector<int> pi((size_t)rows * NB, -7);
	std::vector<unsigned> done(rows, 0u);
	std::vector<int> nf((size_t)2 * rows, 0);
	for (int b = 0; b < rows; b++)
		pos[b] = 10 + b;
	for (int launch = 0; launch < 3 && bad.empty(); launch++) {
		std::vector<float> lf((size_t)rows * V);
		std::vector<int> want(rows);
		const int VE = 16 / (int)sizeof(A);
		int L = ((V + NB - 1) / NB + VE - 1) / VE * VE; /* the kernel's slice: whole 16-byte vectors */
		for (int b = 0; b < rows; b++) {
			float *r = &lf[(size_t)b * V];
			for (int i = 0; i < V; i++)
				r[i] = frand(-4.0f, 4.0f);
			/* a different slice each launch and row, at its last element, its first, then its middle */
			int at = ((launch + b) * 7 % NB) * L + (launch == 0 ? L - 1 : launch == 1 ? 0 : L / 2);
			at = at < V ? at : V - 1;
			if (kind == 0)
				r[at] = 9.0f, want[b] = at;
			else if (kind == 1) { /* the same max in every slice: the first index wins */
				for (int y = NB - 1; y >= 0; y--)
					if (y * L < V)
						r[y * L] = 9.0f, want[b] = y * L;
			} else { /* NaN in the last slice beats a larger finite max earlier */
				r[0] = 1e30f, r[V - 1] = NAN, want[b] = V - 1;
			}
		}
		std::vector<A> lg(lf.size());
		for (size_t i = 0; i < lf.size(); i++)
			lg[i] = h_from_f<A>(lf[i]);
		dim3 g, bl;
		g.x = (unsigned)rows, g.y = (unsigned)NB, bl.x = (unsigned)block;
		simt_launch(g, bl, [&] {
			k_sample<A>(out.data(), cap, tok.data(), pos.data(), step.data(), lg.data(), V, params.data(), seq.data(),
				    pv.data(), pi.data(), done.data(), nf.data());
		});
		for (int b = 0; b < rows && bad.empty(); b++) {
			if (nf[2 * b] != 0 || nf[2 * b + 1] != (kind == 2))
				bad = fmt("launch %d row %d: NaN verdict %d (count left %d), want %d", launch, b, nf[2 * b + 1],
					  nf[2 * b], kind == 2);
			else if (tok[b] != want[b] || out[(size_t)b * cap + launch % cap] != want[b])
				bad = fmt("launch %d row %d: token %d, want %d", launch, b, tok[b], want[b]);
			else if (pos[b] != 11 + b + launch || step[b] != launch + 1)
				bad = fmt("launch %d row %d: pos %d step %d, want %d %d", launch, b, pos[b], step[b], 11 + b + launch,
					  launch + 1);
			else if (done[b] != 0u)
				bad = fmt("launch %d row %d: counter left at %u", launch, b, done[b]);
		}
	}
	static const char *kinds[] = {"max in one slice", "ties across slices", "NaN in the last slice"};
	check(bad.empty(), fmt("sample greedy split A=%s V=%d rows=%d NB=%d block=%d: %s, 3 launches", tname<A>(), V, rows,
			       NB, block, kinds[kind]),
	      bad);
}

/*
** The sampler's NaN/Inf verdict (k_sample's nf) at temperature 0 (the split) and 1 (one block): row 0
** finite, row 1 with an Inf (launch 0) or a NaN (launch 1) at a chosen index, then both finite again
** (launch 2: the verdicts and counts must not stick).
*/
template <typename A> static void test_sample_nonfinite(int V, int NB, int block, float temp)
{
	std::string bad;
	int rows = 2, cap = 4;
	std::vector<int> out((size_t)rows * cap, -7), tok(rows, -7), pos(rows, 3), step(rows, 0), seq = {0, 1};
	std::vector<float> params = {temp, 0.0f, 1.0f, 0.0f}, pv((size_t)rows * NB, NAN);
	std::vector<int> pi((size_t)rows * NB, -7), nf((size_t)2 * rows, 0);
	std::vector<unsigned> done(rows, 0u);
	for (int launch = 0; launch < 3 && bad.empty(); launch++) {
		std::vector<A> lg((size_t)rows * V);
		for (size_t i = 0; i < lg.size(); i++)
			lg[i] = h_from_f<A>(frand(-4.0f, 4.0f));
		if (launch < 2)
			lg[(size_t)V + (size_t)(launch ? V - 1 : V / 3)] = h_from_f<A>(launch ? NAN : -INFINITY);
		dim3 g, bl;
		g.x = (unsigned)rows, g.y = (unsigned)NB, bl.x = (unsigned)block;
		simt_launch(g, bl, [&] {
			k_sample<A>(out.data(), cap, tok.data(), pos.data(), step.data(), lg.data(), V, params.data(), seq.data(),
				    pv.data(), pi.data(), done.data(), nf.data());
		});
		for (int b = 0; b < rows && bad.empty(); b++)
			if (nf[2 * b] != 0 || nf[2 * b + 1] != (b == 1 && launch < 2))
				bad = fmt("launch %d row %d: verdict %d count %d", launch, b, nf[2 * b + 1], nf[2 * b]);
	}
	check(bad.empty(), fmt("sample NaN/Inf verdict A=%s V=%d NB=%d temp %g", tname<A>(), V, NB, temp), bad);
}

int main(void)
{
	/* the sampler flags rows with a NaN or Inf (glmrun refuses their tokens) */
	test_sample_nonfinite<float>(700, 4, 64, 0.0f);
	test_sample_nonfinite<bf16>(515, 3, 32, 0.0f);
	test_sample_nonfinite<float>(700, 4, 64, 1.0f);
	/* the greedy sampler's split argmax (glmrun: 48 blocks of 1024; here fewer, smaller ones) */
	test_sample_split<float>(1000, 2, 4, 64, 0);
	test_sample_split<bf16>(1003, 3, 5, 32, 1);
	test_sample_split<float>(517, 2, 3, 64, 2);
	test_sample_split<bf16>(40, 1, 8, 32, 0); /* slices of one vector, some empty */
	/* the folded rotary + attention: pos 0 (only the step's key), GQA 4 over two rounds in slot 1, H/G 1 with
	** partial interleaved rotary and yarn, llama3 scaling (the table is all that changes); rows of 512, 256
	** and 128 bytes */
	test_attn_rope<bf16, 256, false>(8, 2, 128, 0, 0, 1, ROPE_PLAIN);
	test_attn_rope<bf16, 256, false>(8, 2, 128, 300, 1, 2, ROPE_PLAIN);
	test_attn_rope<float, 512, true>(4, 4, 96, 37, 0, 1, ROPE_YARN);
	test_attn_rope<float, 128, false>(4, 1, 16, 70, 1, 3, ROPE_PLAIN);
	test_attn_rope<float, 128, false>(4, 2, 32, 90, 0, 1, ROPE_LLAMA3);
	test_attn_rope<bf16, 512, true>(2, 1, 256, 2000, 0, 1, ROPE_PLAIN);
	/* the merging absorb: GLM-4.7-Flash's 16 ranges (bf16, Dv 512), GLM-5 tp 8's 32, one head's 64; Dv 40
	** (float4 merge, scalar dots) and 37 (scalar merge); T 9 a second block of tokens; Do 44 idle warps */
	test_vabsorb_merged<bf16, bf16>(1, 2, 512, 44, 16);
	test_vabsorb_merged<float, float>(2, 1, 512, 32, 32);
	test_vabsorb_merged<bf16, bf16>(9, 1, 40, 24, 64);
	test_vabsorb_merged<float, bf16>(3, 2, 37, 40, 16);
	/* the split attention and its merging absorb at 1, 5, 12 and 16 tokens (glmc's bound): a batch of
	** sequences at their own positions, a prefill of 12 in one slot; 20 heads (Flash: 4 a block) and 3 */
	test_mla_pair<bf16, bf16>(20, 72, 40, 24, {0}, {150}, 0.11785113f);
	test_mla_pair<float, float>(3, 72, 40, 16, {1, 0, 2, 3, 4}, {7, 200, 0, 64, 33}, 0.11785113f);
	test_mla_pair<bf16, bf16>(20, 72, 40, 24, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0},
	                          {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41}, 0.11785113f);
	test_mla_pair<float, bf16>(20, 72, 40, 24, {3, 0, 7, 1, 2, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15},
	                           {0, 6, 199, 77, 150, 3, 300, 40, 41, 160, 2, 9, 64, 88, 17, 120}, 0.11785113f);
	test_vabsorb<float, bf16>(1, 2, 512, 64);
	test_vabsorb<bf16, bf16>(9, 1, 512, 44);
	test_vabsorb<float, float>(2, 2, 512, 40);
	test_vabsorb<bf16, f16>(3, 2, 40, 24);
	const int cfg[][3] = {{8, 1, 1}, {8, 4, 2}, {64, 1, 1}, {64, 8, 4}, {160, 8, 3}, {256, 8, 4}, {1024, 32, 5}};
	for (auto &c : cfg)
		for (int sig = 0; sig < 2; sig++) {
			test_route<float>(c[0], c[1], c[2], sig, sig, false);
			test_route<bf16>(c[0], c[1], c[2], sig, 1 - sig, false);
		}
	test_route<float>(256, 8, 4, 1, 1, true);
	test_route<bf16>(64, 1, 1, 0, 0, true);
	/* k_moe_down's cost here grows with C (a warp per column, a rendezvous per shuffle): large C only at T = 1 */
	test_ffn<float, float>(3, 256, 24, 8, 2);
	test_ffn<bf16, bf16>(1, 2048, 9, 8, 4);    /* GLM-4.7-Flash's C: two batches of 4 vectors */
	test_ffn<float, bf16>(1, 2056, 9, 4, 2);   /* 257 vectors: lane 0 has one more */
	test_ffn<bf16, float>(1, 1028, 9, 4, 2);
	test_ffn<bf16, f16>(1, 6144, 5, 8, 2);     /* GLM-5's C */
	test_ffn<bf16, bf16>(4, 64, 1544, 8, 3);   /* 193 down vectors a row; the last token skips all */
	test_ffn<float, bf16>(3, 70, 40, 8, 2);    /* unaligned rows: the element-wise paths */
	/* the MoE end: GLM-4.7-Flash's rows (k·F 6144, staged), rows past MOE_HX, float weights without the
	** shared expert, rows that are not whole vectors */
	test_down_fused<bf16, bf16, true, true>(3, 24, 1536, 6, 4, 1536);
	test_down_fused<bf16, bf16, true, false>(2, 16, 4096, 4, 3, 2048);
	test_down_fused<float, float, false, true>(3, 40, 256, 5, 2, 0);
	test_down_fused<float, float, true, true>(2, 20, 50, 4, 2, 36);
	/* the shared SwiGLU past the staging's first 2 vectors a thread (2052 floats: 513 vectors at 256
	** threads), and a width of whole float vectors but not bf16 ones (element by element) */
	test_down_fused<float, float, true, false>(1, 8, 64, 3, 2, 2052);
	test_down_fused<bf16, float, true, true>(1, 8, 64, 3, 2, 1028);
	return finish();
}
