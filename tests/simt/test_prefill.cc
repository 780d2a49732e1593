/*
** tests/simt/test_prefill.cc — the tensor-core prefill kernels of ops/prefill.cuh (k_gemm_tc, k_attn_tc)
** run on the CPU through simt.h (mma.sync and ldmatrix by their stand-ins) against ops/ref.c in f32 on
** the same bf16 values. Both kernels' sums are f32 and their products exact, so each output must be
** within one bf16 unit of the reference: the GEMM's exactly so, the attention's plus 1.5e-5 (inputs
** within ±1), what its probabilities lose as bf16 hi and lo parts (2^-17 of each, summed). Shapes cross every tile edge: tokens 1, 63, 64, 65
** and past 128, K not a multiple of the 32-wide k step, N not of the 128-wide tile, contexts that end
** inside a 64-key tile, head dims 16, 64 and 128, grouped heads, and a tile whose tokens belong to
** several sequence slots (a continuous batch). Outputs are poisoned (NaN) before every launch.
** k_dsa_tc (the DSA selection's rows gathered into the key tiles) against ref_mla with the same selections:
** dense causal lists, random subsets with -1s and rows past the position, top-k lists, contexts of 1, 63,
** 64, 65, 130 and 300 rows, 4 to 72 heads (GLM-5's 64 with its 576/512 latent), rows past a slot's last
** position NaN, and a guard past the output.
** k_mla_xkv and k_mla_xattn (the expanded MLA prefill) against double references and the absorbed form
** (test_mla_x). k_mla_split_tc (the decode step's split attention on the tensor cores: k_dsa_tc's tiles
** over round-robin ranges) with its range states merged as k_mla_vabsorb merges them (test_split).
** Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/quant.cuh"
#include "../../ops/prefill.cuh"

#include <algorithm>
#include <cmath>
#include <unistd.h>
#include <vector>

#include "../tap.h"
#include "../attn_p16.h"

extern "C" {
#include "../../ops/ref.h"
}

static uint64_t rng = 0x853c49e6748fea9bull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

/* bf16 <-> float as ops/ref.c rounds (nearest even). */
static bf16 h_bf(float v)
{
	bf16 b;
	b.x = ref_f32_to_bf16(v);
	return b;
}

static float h_f(bf16 v)
{
	return ref_bf16_to_f32(v.x);
}

/* n random values already on the bf16 grid, as bf16 and as float. */
static void rnd_bf16(size_t n, float lo, float hi, std::vector<bf16> &b, std::vector<float> &f)
{
	b.resize(n), f.resize(n);
	for (size_t i = 0; i < n; i++) {
		b[i] = h_bf(frand(lo, hi));
		f[i] = h_f(b[i]);
	}
}

/* The worst of |got − want| / (one bf16 unit of want + floor), want the f32 reference: at most 1 when got
** is want rounded to bf16 after a kernel error below floor (an absolute bound, the inputs being within
** ±1). NaN: infinite. */
static double worst_units(const std::vector<bf16> &got, const std::vector<float> &want, double floor)
{
	double worst = 0;
	for (size_t i = 0; i < got.size(); i++) {
		double g = h_f(got[i]), w = want[i];
		if (std::isnan(g))
			return INFINITY;
		int e;
		frexp(w == 0 ? 1e-30 : w, &e);
		double d = fabs(g - w) / (ldexp(1.0, e - 8) + floor);
		worst = d > worst ? d : worst;
	}
	return worst;
}

static void test_gemm(int T, int K, int N, bool bias)
{
	std::vector<bf16> x, w, b, y((size_t)T * N);
	std::vector<float> xf, wf, bf, want((size_t)T * N);
	rnd_bf16((size_t)T * K, -1, 1, x, xf);
	rnd_bf16((size_t)N * K, -1, 1, w, wf);
	rnd_bf16(N, -1, 1, b, bf);
	ref_linear(want.data(), xf.data(), wf.data(), bias ? bf.data() : NULL, T, K, N);
	for (auto &v : y)
		v.x = 0x7fc0; /* NaN */
	simt_launch(dim3{(unsigned)(N + 127) / 128, (unsigned)(T + 127) / 128, 1}, dim3{256, 1, 1}, [&] {
		if (bias)
			k_gemm_tc<true>(y.data(), x.data(), w.data(), b.data(), T, K, N);
		else
			k_gemm_tc<false>(y.data(), x.data(), w.data(), nullptr, T, K, N);
	});
	double u = worst_units(y, want, 0);
	check(u <= 1.0, fmt("k_gemm_tc T %d K %d N %d%s", T, K, N, bias ? " bias" : ""), fmt("worst %.2f units", u));
}

/* The positions of a step's tokens: token t of slot seq[t] after that slot's ctx[seq[t]] cached rows and
** its earlier tokens; toks[s] lists slot s's tokens; returns the rows a slot needs (S). */
static int slot_layout(const std::vector<int> &ctx, const std::vector<int> &seq, std::vector<int> &pos,
                       std::vector<std::vector<int>> &toks)
{
	int S = 0;
	pos.assign(seq.size(), 0), toks.assign(ctx.size(), {});
	for (size_t t = 0; t < seq.size(); t++) {
		pos[t] = ctx[seq[t]] + (int)toks[seq[t]].size();
		toks[seq[t]].push_back((int)t);
		S = pos[t] + 1 > S ? pos[t] + 1 : S;
	}
	return S;
}

/*
** One prefill step of T tokens into caches of `slots` slots of S rows: token t of slot seq[t] at pos[t],
** each slot's tokens at increasing positions after a context of ctx[slot] rows already in the cache (the
** step's own rows in it too, as the step's cache write leaves them). The reference: attn_p16_row over
** rows 0..pos[t] of the token's slot (k_attn_tc's probabilities rounded to bf16 in its 32-key tiles),
** within a bf16 unit plus 1.5e-5 plus its slack.
*/
template <int D>
static void test_attn(int T, int H, int G, std::vector<int> ctx, std::vector<int> seq, const char *what)
{
	std::vector<int> pos;
	std::vector<std::vector<int>> toks;
	int S = slot_layout(ctx, seq, pos, toks), slots = (int)ctx.size();
	size_t KW = (size_t)G * D;
	std::vector<bf16> q, kc, vc, y((size_t)T * H * D);
	std::vector<float> qf, kcf, vcf, want((size_t)T * H * D), slack(want.size()), got(want.size());
	rnd_bf16((size_t)T * H * D, -1, 1, q, qf);
	rnd_bf16((size_t)slots * S * KW, -1, 1, kc, kcf);
	rnd_bf16((size_t)slots * S * KW, -1, 1, vc, vcf);
	float scale = 1.0f / sqrtf((float)D);
	std::vector<double> sc(S), out(D), sl(D);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++) {
			size_t kv0 = (size_t)seq[t] * S * KW + (size_t)(h / (H / G)) * D;
			for (int j = 0; j <= pos[t]; j++) {
				double a = 0;
				for (int d = 0; d < D; d++)
					a += (double)qf[((size_t)t * H + h) * D + d] * kcf[kv0 + j * KW + d];
				sc[j] = a * scale;
			}
			attn_p16_row(out.data(), sl.data(), sc.data(), pos[t] + 1, 32, &vcf[kv0], KW, D);
			for (int d = 0; d < D; d++)
				want[((size_t)t * H + h) * D + d] = (float)out[d], slack[((size_t)t * H + h) * D + d] = (float)sl[d];
		}
	for (auto &v : y)
		v.x = 0x7fc0;
	simt_launch(dim3{(unsigned)H, (unsigned)(T + 63) / 64, 1}, dim3{128, 1, 1}, [&] {
		k_attn_tc<D>(y.data(), q.data(), kc.data(), vc.data(), pos.data(), H, G, scale, seq.data(), S, T);
	});
	for (size_t i = 0; i < y.size(); i++)
		got[i] = h_f(y[i]);
	double u = attn_p16_worst(got.data(), want.data(), slack.data(), got.size(), 1.5e-5);
	check(u <= 1.0, fmt("k_attn_tc D %d T %d H %d G %d %s", D, T, H, G, what), fmt("worst %.2f units", u));
}

/*
** One MLA prefill step (k_mla_tc) of T tokens of H heads, slots as test_attn; ref_mla per slot (it writes
** the step's latent rows itself).
*/
template <int DS> static void test_mla(int T, int H, int Dk, int Dv, std::vector<int> ctx, std::vector<int> seq, const char *what)
{
	int slots = (int)ctx.size();
	std::vector<int> pos;
	std::vector<std::vector<int>> toks;
	int S = slot_layout(ctx, seq, pos, toks);
	std::vector<bf16> q, kc, y((size_t)T * H * Dv);
	std::vector<float> qf, kcf, want((size_t)T * H * Dv);
	rnd_bf16((size_t)T * H * Dk, -0.3f, 0.3f, q, qf);
	rnd_bf16((size_t)slots * S * Dk, -1, 1, kc, kcf);
	float scale = 1.0f / sqrtf((float)Dk);
	for (int s = 0; s < slots; s++) {
		const std::vector<int> &ts = toks[s];
		int n = (int)ts.size();
		if (!n)
			continue;
		std::vector<float> qs((size_t)n * H * Dk), kv((size_t)n * Dk), ys((size_t)n * H * Dv);
		std::vector<int32_t> ps(n);
		for (int i = 0; i < n; i++) {
			int t = ts[i];
			ps[i] = pos[t];
			std::copy(&qf[(size_t)t * H * Dk], &qf[(size_t)(t + 1) * H * Dk], &qs[(size_t)i * H * Dk]);
			std::copy(&kcf[((size_t)s * S + pos[t]) * Dk], &kcf[((size_t)s * S + pos[t] + 1) * Dk], &kv[(size_t)i * Dk]);
		}
		std::vector<float> cs(kcf.begin() + (size_t)s * S * Dk, kcf.begin() + (size_t)(s + 1) * S * Dk);
		ref_mla(ys.data(), qs.data(), kv.data(), cs.data(), ps.data(), NULL, 0, n, H, Dk, Dv, S, scale);
		for (int i = 0; i < n; i++)
			std::copy(&ys[(size_t)i * H * Dv], &ys[(size_t)(i + 1) * H * Dv], &want[(size_t)ts[i] * H * Dv]);
	}
	for (auto &v : y)
		v.x = 0x7fc0;
	std::vector<uint4> dsm((size_t)(64 + 32) * (Dk + 8) * 2 / 16);
	simt_launch(dim3{(unsigned)((T * H + 63) / 64), (unsigned)(Dv / DS), 1}, dim3{128, 1, 1}, [&] {
		k_mla_tc<DS>(y.data(), q.data(), kc.data(), pos.data(), H, Dk, Dv, scale, seq.data(), S, T, (unsigned char *)dsm.data());
	});
	double u = worst_units(y, want, 1.5e-5);
	check(u <= 1.0, fmt("k_mla_tc<%d> T %d H %d Dk %d Dv %d %s", DS, T, H, Dk, Dv, what), fmt("worst %.2f units", u));
}

/*
** MLA prefill in the expanded form (k_mla_xkv, then k_mla_xattn) for one sequence's chunk of T tokens
** after ctx cached rows. The expansion against a double GEMM of the same bf16 values (one bf16 unit plus
** 1e-5); the attention against attn_p16_row over the kernel's own expanded rows (its probabilities rounded
** in 32-key tiles; one unit plus 1.5e-5 plus its slack, as k_attn_tc's); and the whole against the absorbed form it replaces: ref_mla over
** the latent with W_UK folded into the query, then W_UV, in f32 (rel-L2, the expanded rows being bf16).
*/
/* wkt: W_UK given as GGUF's split attn_k_b, [H, L, Dn] (k_mla_xkv<true>); the references read [H, Dn, L]. */
template <int DK, int DS>
static void test_mla_x(int T, int ctx, int H, int Dn, int Dr, int Dv, int L, const char *what, bool wkt = false)
{
	int S = ctx + T + 5, Dk = L + Dr, DQ = Dn + Dr;
	std::vector<int> pos(T), seq(T, 0);
	for (int t = 0; t < T; t++)
		pos[t] = ctx + t;
	std::vector<bf16> q3, qr, cache, wk, wv;
	std::vector<float> q3f, qrf, cf, wkf, wvf;
	rnd_bf16((size_t)T * H * DQ, -0.5f, 0.5f, q3, q3f);
	rnd_bf16((size_t)T * H * Dr, -0.5f, 0.5f, qr, qrf);
	rnd_bf16((size_t)S * Dk, -1, 1, cache, cf);
	rnd_bf16((size_t)H * Dn * L, -0.3f, 0.3f, wk, wkf);
	rnd_bf16((size_t)H * Dv * L, -0.3f, 0.3f, wv, wvf);
	int kn = ctx + T;
	std::vector<bf16> kx((size_t)S * H * Dn), vx((size_t)S * H * Dv), y((size_t)T * H * Dv);
	for (auto *v : {&kx, &vx, &y})
		for (auto &e : *v)
			e.x = 0x7fc0; /* NaN */
	int NX = (H * (Dn > Dv ? Dn : Dv) + 127) / 128;
	std::vector<bf16> wkg(wk.size());
	for (int h = 0; h < H; h++)
		for (int d = 0; d < Dn; d++)
			for (int l = 0; l < L; l++)
				wkg[((size_t)h * L + l) * Dn + d] = wk[((size_t)h * Dn + d) * L + l];
	simt_launch(dim3{(unsigned)NX, (unsigned)(S + 127) / 128, 2}, dim3{256, 1, 1}, [&] {
		if (wkt)
			k_mla_xkv<true>(kx.data(), vx.data(), cache.data(), wkg.data(), wv.data(), pos.data(), H, Dn, Dv, L, Dk, seq.data(), S, T);
		else
			k_mla_xkv<false>(kx.data(), vx.data(), cache.data(), wk.data(), wv.data(), pos.data(), H, Dn, Dv, L, Dk, seq.data(), S, T);
	});
	std::vector<float> kw((size_t)kn * H * Dn), vw((size_t)kn * H * Dv);
	for (int j = 0; j < kn; j++)
		for (int n = 0; n < H * (Dn + Dv); n++) {
			bool isk = n < H * Dn;
			const float *w = isk ? &wkf[(size_t)n * L] : &wvf[(size_t)(n - H * Dn) * L];
			double a = 0;
			for (int l = 0; l < L; l++)
				a += (double)w[l] * cf[(size_t)j * Dk + l];
			(isk ? kw[(size_t)j * H * Dn + n] : vw[(size_t)j * H * Dv + n - H * Dn]) = (float)a;
		}
	std::vector<bf16> kxs(kx.begin(), kx.begin() + (size_t)kn * H * Dn), vxs(vx.begin(), vx.begin() + (size_t)kn * H * Dv);
	/* floor: the f32 sums' own error over L terms of a few tenths, where cancellation leaves a small value */
	double uk = worst_units(kxs, kw, 1e-5), uv = worst_units(vxs, vw, 1e-5);
	check(uk <= 1.0 && uv <= 1.0, fmt("k_mla_xkv<%s> T %d ctx %d H %d Dn %d Dv %d L %d %s", wkt ? "true" : "false", T, ctx, H, Dn, Dv, L, what),
	      fmt("worst %.2f / %.2f units", uk, uv));

	float scale = 1.0f / sqrtf((float)DQ);
	size_t dsm_bytes = (size_t)(64 + 2 * 32) * (DK + 8) * 2 + (size_t)2 * 32 * (DS + 8) * 2;
	std::vector<uint4> dsm((dsm_bytes + 15) / 16);
	simt_launch(dim3{(unsigned)H, (unsigned)(T + 63) / 64, (unsigned)(Dv / DS)}, dim3{128, 1, 1}, [&] {
		k_mla_xattn<DK, DS>(y.data(), q3.data(), qr.data(), kx.data(), vx.data(), cache.data(), pos.data(), H, Dn, Dr, Dv,
		                    L, Dk, scale, seq.data(), S, T, (unsigned char *)dsm.data());
	});
	/* the attention over the kernel's own expanded rows */
	std::vector<float> want((size_t)T * H * Dv), yabs((size_t)T * H * Dv);
	std::vector<double> p(kn), out(Dv), sl(Dv);
	std::vector<float> vxf((size_t)kn * H * Dv), slack(want.size()), got(want.size());
	for (size_t i = 0; i < vxf.size(); i++)
		vxf[i] = h_f(vx[i]);
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++) {
			for (int j = 0; j <= pos[t]; j++) {
				double a = 0;
				for (int d = 0; d < Dn; d++)
					a += (double)q3f[((size_t)t * H + h) * DQ + d] * h_f(kx[((size_t)j * H + h) * Dn + d]);
				for (int d = 0; d < Dr; d++)
					a += (double)qrf[((size_t)t * H + h) * Dr + d] * cf[(size_t)j * Dk + L + d];
				p[j] = a * scale;
			}
			attn_p16_row(out.data(), sl.data(), p.data(), pos[t] + 1, 32, &vxf[(size_t)h * Dv], (size_t)H * Dv, Dv);
			for (int e = 0; e < Dv; e++)
				want[((size_t)t * H + h) * Dv + e] = (float)out[e], slack[((size_t)t * H + h) * Dv + e] = (float)sl[e];
		}
	for (size_t i = 0; i < y.size(); i++)
		got[i] = h_f(y[i]);
	double u = attn_p16_worst(got.data(), want.data(), slack.data(), got.size(), 1.5e-5);
	check(u <= 1.0, fmt("k_mla_xattn<%d, %d> T %d ctx %d H %d Dn %d Dr %d Dv %d %s", DK, DS, T, ctx, H, Dn, Dr, Dv, what),
	      fmt("worst %.2f units", u));
	/* the absorbed form: ql = W_UKᵀ q_nope, ref_mla over the latent (it writes the step's rows), W_UV */
	std::vector<float> qabs((size_t)T * H * Dk), ol((size_t)T * H * L), kv((size_t)T * Dk);
	for (int t = 0; t < T; t++) {
		std::copy(&cf[(size_t)pos[t] * Dk], &cf[(size_t)(pos[t] + 1) * Dk], &kv[(size_t)t * Dk]);
		for (int h = 0; h < H; h++) {
			float *qa = &qabs[((size_t)t * H + h) * Dk];
			for (int l = 0; l < L; l++) {
				double a = 0;
				for (int d = 0; d < Dn; d++)
					a += (double)q3f[((size_t)t * H + h) * DQ + d] * wkf[((size_t)h * Dn + d) * L + l];
				qa[l] = (float)a;
			}
			for (int d = 0; d < Dr; d++)
				qa[L + d] = qrf[((size_t)t * H + h) * Dr + d];
		}
	}
	std::vector<float> cs(cf);
	ref_mla(ol.data(), qabs.data(), kv.data(), cs.data(), pos.data(), NULL, 0, T, H, Dk, L, S, scale);
	double num = 0, den = 0;
	for (int t = 0; t < T; t++)
		for (int h = 0; h < H; h++)
			for (int e = 0; e < Dv; e++) {
				double a = 0;
				for (int l = 0; l < L; l++)
					a += (double)wvf[((size_t)h * Dv + e) * L + l] * ol[((size_t)t * H + h) * L + l];
				double d = h_f(y[((size_t)t * H + h) * Dv + e]) - a;
				num += d * d, den += a * a;
			}
	double rel = sqrt(num / (den > 0 ? den : 1));
	check(rel < 6e-3, fmt("k_mla_xattn<%d, %d> T %d ctx %d %s: equals the absorbed form", DK, DS, T, ctx, what),
	      fmt("rel-L2 %.2e", rel));
}

/* How test_dsa builds each token's selection: DSA_DENSE rows 0..pos then -1s (k_indexer_select's list for
** a context within its top-k; vfirst); DSA_SUBSET a random subset of the slot's rows, some past pos
** (masked by causality), in random order with -1s between (fewer than nsel; not vfirst); DSA_TOPK nsel
** distinct visible rows in random order, a few of them -1 (the indexer's top-k of a long context), or
** for a context within nsel its rows in random order, then -1s (vfirst). */
enum { DSA_DENSE, DSA_SUBSET, DSA_TOPK };

/* Fisher-Yates on v with the test's generator. */
static void shuffle(std::vector<int> &v)
{
	for (int i = (int)v.size() - 1; i > 0; i--) {
		int j = (int)frand(0, (float)(i + 1));
		j = j > i ? i : j;
		std::swap(v[i], v[j]);
	}
}

/*
** One DSA prefill step (k_dsa_tc) of T tokens of H heads with selections of nsel entries built as `mode`
** says, slots as test_attn; ref_mla per slot with that slot's tokens' selections. Cache rows past a
** slot's last position are NaN: a kernel that reads a row it must not shows it.
*/
template <int DS, int NZ, int RG>
static void test_split(int H, int Dk, int Dv, int T, int S, int NS, const std::vector<bf16> &q, const std::vector<bf16> &kc,
                       const std::vector<int> &pos, const std::vector<int> &seq, const int *sel, int nsel, int vfirst,
                       float scale, const std::vector<float> &want, const char *name);

template <int DS, int NZ, int RG>
static void test_dsa(int H, int Dk, int Dv, std::vector<int> ctx, std::vector<int> seq, int mode, int nsel,
                     const char *what, int split_ns = 0, bool nosel = false)
{
	int T = (int)seq.size(), slots = (int)ctx.size();
	std::vector<int> pos;
	std::vector<std::vector<int>> toks;
	int S = slot_layout(ctx, seq, pos, toks);
	std::vector<bf16> q, kc, y((size_t)T * H * Dv);
	std::vector<float> qf, kcf, want((size_t)T * H * Dv);
	rnd_bf16((size_t)T * H * Dk, -0.3f, 0.3f, q, qf);
	rnd_bf16((size_t)slots * S * Dk, -1, 1, kc, kcf);
	for (int s = 0; s < slots; s++) {
		int last = toks[s].empty() ? ctx[s] - 1 : pos[toks[s].back()];
		for (size_t i = (size_t)(s * S + last + 1) * Dk; i < (size_t)(s + 1) * S * Dk; i++)
			kc[i].x = 0x7fc0, kcf[i] = NAN;
	}
	std::vector<int> sel((size_t)T * nsel, -1);
	for (int t = 0; t < T; t++) {
		int *st = &sel[(size_t)t * nsel], p = pos[t];
		std::vector<int> rows;
		if (mode == DSA_DENSE) {
			for (int j = 0; j <= p && j < nsel; j++)
				st[j] = j;
			continue;
		}
		if (mode == DSA_TOPK && p < nsel) { /* the indexer lists every row of a short context first */
			for (int r = 0; r <= p; r++)
				rows.push_back(r);
			shuffle(rows);
			std::copy(rows.begin(), rows.end(), st);
			continue;
		}
		int all = mode == DSA_SUBSET ? S : p + 1;
		for (int r = 0; r < all; r++)
			rows.push_back(r);
		shuffle(rows);
		int k = mode == DSA_SUBSET ? (int)frand(1, (float)(nsel < all ? nsel : all)) : nsel;
		rows.resize(k < all ? k : all);
		if (*std::min_element(rows.begin(), rows.end()) > p)
			rows[0] = p; /* a visible row at least (else the output is NaN, here as in ref_mla) */
		if (mode == DSA_TOPK)
			for (int i = 3; i < (int)rows.size(); i += 7)
				rows[i] = -1;
		while ((int)rows.size() < nsel)
			rows.push_back(-1);
		shuffle(rows);
		std::copy(rows.begin(), rows.end(), st);
	}
	float scale = 1.0f / sqrtf((float)Dk);
	for (int s = 0; s < slots; s++) {
		const std::vector<int> &ts = toks[s];
		int n = (int)ts.size();
		if (!n)
			continue;
		std::vector<float> qs((size_t)n * H * Dk), kv((size_t)n * Dk), ys((size_t)n * H * Dv);
		std::vector<int32_t> ps(n), ss((size_t)n * nsel);
		for (int i = 0; i < n; i++) {
			int t = ts[i];
			ps[i] = pos[t];
			std::copy(&qf[(size_t)t * H * Dk], &qf[(size_t)(t + 1) * H * Dk], &qs[(size_t)i * H * Dk]);
			std::copy(&kcf[((size_t)s * S + pos[t]) * Dk], &kcf[((size_t)s * S + pos[t] + 1) * Dk], &kv[(size_t)i * Dk]);
			std::copy(&sel[(size_t)t * nsel], &sel[(size_t)(t + 1) * nsel], &ss[(size_t)i * nsel]);
		}
		std::vector<float> cs(kcf.begin() + (size_t)s * S * Dk, kcf.begin() + (size_t)(s + 1) * S * Dk);
		ref_mla(ys.data(), qs.data(), kv.data(), cs.data(), ps.data(), ss.data(), nsel, n, H, Dk, Dv, S, scale);
		for (int i = 0; i < n; i++)
			std::copy(&ys[(size_t)i * H * Dv], &ys[(size_t)(i + 1) * H * Dv], &want[(size_t)ts[i] * H * Dv]);
	}
	static const char *mname[] = {"dense", "subset", "top-k"};
	int vfirst = mode != DSA_SUBSET;
	if (split_ns) { /* the decode step's split kernel, its states merged here */
		test_split<DS, NZ, RG>(H, Dk, Dv, T, S, split_ns, q, kc, pos, seq, nosel ? nullptr : sel.data(), nsel, vfirst, scale,
		                       want, fmt("k_mla_split_tc<%d, %d, %d> NS %d T %d H %d Dk %d Dv %d %s %s", DS, NZ, RG,
		                                 split_ns, T, H, Dk, Dv, nosel ? "no selection" : mname[mode], what).c_str());
		return;
	}
	for (auto &v : y)
		v.x = 0x7fc0;
	y.resize(y.size() + (size_t)64 * Dv, h_bf(1234.0f)); /* a guard: no block writes past its token's heads */
	std::vector<uint4> dsm((size_t)(16 * RG + 64) * (Dk + 8) * 2 / 16);
	simt_launch(dim3{(unsigned)T, (unsigned)(Dv / (DS * NZ)), (unsigned)(H + 16 * RG - 1) / (16 * RG)},
	            dim3{(unsigned)(32 * RG * NZ), 1, 1}, [&] {
		k_dsa_tc<DS, NZ, RG>(y.data(), q.data(), kc.data(), pos.data(), sel.data(), nsel, vfirst, H, Dk, Dv, scale, seq.data(),
		             S, (unsigned char *)dsm.data());
	});
	bool guard = true;
	for (size_t i = (size_t)T * H * Dv; i < y.size(); i++)
		guard = guard && y[i].x == h_bf(1234.0f).x;
	y.resize((size_t)T * H * Dv);
	double u = guard ? worst_units(y, want, 1.5e-5) : INFINITY;
	check(u <= 1.0, fmt("k_dsa_tc<%d, %d, %d> T %d H %d Dk %d Dv %d nsel %d %s %s", DS, NZ, RG, T, H, Dk, Dv, nsel, mname[mode], what),
	      fmt("worst %.2f units", u));
}

/*
** k_mla_split_tc: the states of NS ranges (poisoned first: NaN sums, m = 7, l = -1) merged here as
** k_mla_vabsorb merges them (weights exp(m_x − max m), 0 for m_x = −inf), against ref_mla; every state past
** a token's ranges must say "empty" (m = −inf, l = 0).
*/
template <int DS, int NZ, int RG>
static void test_split(int H, int Dk, int Dv, int T, int S, int NS, const std::vector<bf16> &q, const std::vector<bf16> &kc,
                       const std::vector<int> &pos, const std::vector<int> &seq, const int *sel, int nsel, int vfirst,
                       float scale, const std::vector<float> &want, const char *name)
{
	std::vector<float> acc((size_t)T * NS * H * Dv, NAN), ml((size_t)T * NS * H * 2);
	for (size_t i = 0; i < ml.size(); i += 2)
		ml[i] = 7.0f, ml[i + 1] = -1.0f;
	std::vector<uint4> dsm((size_t)(16 * RG + 64) * (Dk + 8) * 2 / 16);
	int nz = Dv / (DS * NZ), HG = (H + 16 * RG - 1) / (16 * RG);
	simt_launch(dim3{(unsigned)NS, (unsigned)(nz * HG), (unsigned)T}, dim3{(unsigned)(32 * RG * NZ), 1, 1}, [&] {
		k_mla_split_tc<DS, NZ, RG>(acc.data(), ml.data(), q.data(), kc.data(), pos.data(), sel, nsel, vfirst, H, Dk, Dv,
		                           scale, seq.data(), S, (unsigned char *)dsm.data());
	});
	std::vector<bf16> y((size_t)T * H * Dv);
	bool empty_ok = true;
	for (int t = 0; t < T; t++) {
		int p = pos[t], n = !sel ? p + 1 : vfirst && nsel > p + 1 ? p + 1 : nsel, nr = mla_split_tc_ranges(n, NS);
		for (int h = 0; h < H; h++) {
			double M = -INFINITY;
			for (int x = 0; x < NS; x++) {
				const float *m = &ml[(((size_t)t * NS + x) * H + h) * 2];
				if (x >= nr)
					empty_ok = empty_ok && m[0] == -INFINITY && m[1] == 0.0f;
				else
					M = m[0] > M ? m[0] : M;
			}
			for (int d = 0; d < Dv; d++) {
				double num = 0, den = 0;
				for (int x = 0; x < nr; x++) {
					const float *m = &ml[(((size_t)t * NS + x) * H + h) * 2];
					double w = m[0] == -INFINITY ? 0 : exp(m[0] - M);
					num += w * acc[(((size_t)t * NS + x) * H + h) * Dv + d], den += w * m[1];
				}
				y[((size_t)t * H + h) * Dv + d] = h_bf((float)(num / den));
			}
		}
	}
	double u = empty_ok ? worst_units(y, want, 1.5e-5) : INFINITY;
	check(u <= 1.0, name, empty_ok ? fmt("worst %.2f units", u) : std::string("a range past the token's ranges is not empty"));
}

/*
** k_indexer_scores_tc: T query rows of H heads (slots as test_attn) against their slot's key rows, against
** a double reference of the same bf16 values: within 1e-5 of Σ_h |w|·|scale·q·k| (what f32 sums of exact
** products may lose), −inf past each row's position, nothing written past total (a guard).
*/
template <int D>
static void test_iscores(int H, std::vector<int> ctx, std::vector<int> seq, int total_extra, const char *what)
{
	int T = (int)seq.size(), slots = (int)ctx.size();
	std::vector<int> pos;
	std::vector<std::vector<int>> toks;
	int S = slot_layout(ctx, seq, pos, toks), total = S + total_extra;
	std::vector<bf16> q, w, kc;
	std::vector<float> qf, wf, kf;
	rnd_bf16((size_t)T * H * D, -1, 1, q, qf);
	rnd_bf16((size_t)T * H, -1, 1, w, wf);
	rnd_bf16((size_t)slots * S * D, -1, 1, kc, kf);
	float scale = 1.0f / sqrtf((float)D);
	std::vector<float> sc((size_t)T * total + 64, NAN);
	for (size_t i = (size_t)T * total; i < sc.size(); i++)
		sc[i] = 1234.0f;
	std::vector<uint4> dsm((size_t)(64 + 128) * (D + 8) * 2 / 16);
	simt_launch(dim3{(unsigned)(total + 63) / 64, (unsigned)(T + 63) / 64, 1}, dim3{128, 1, 1}, [&] {
		k_indexer_scores_tc<D>(sc.data(), q.data(), w.data(), kc.data(), pos.data(), H, total, scale, seq.data(), S, T,
		                       (unsigned char *)dsm.data());
	});
	double worst = 0;
	bool ok = true;
	for (int t = 0; t < T && ok; t++)
		for (int s = 0; s < total; s++) {
			double got = sc[(size_t)t * total + s];
			if (s > pos[t]) {
				ok = ok && got == -INFINITY;
				continue;
			}
			double want = 0, mag = 0;
			for (int h = 0; h < H; h++) {
				double d = 0, m = 0;
				for (int i = 0; i < D; i++) {
					double p = (double)qf[((size_t)t * H + h) * D + i] * kf[((size_t)seq[t] * S + s) * D + i];
					d += p, m += fabs(p);
				}
				d *= scale;
				want += wf[(size_t)t * H + h] * (d > 0 ? d : 0), mag += fabs(wf[(size_t)t * H + h]) * m * scale;
			}
			double e = fabs(got - want) / (1e-5 * mag + 1e-30);
			if (!(e <= worst))
				worst = e;
		}
	for (size_t i = (size_t)T * total; i < sc.size(); i++)
		ok = ok && sc[i] == 1234.0f;
	check(ok && worst <= 1.0, fmt("k_indexer_scores_tc<%d> T %d H %d total %d %s", D, T, H, total, what),
	      ok ? fmt("worst %.2f of the bound", worst) : std::string("a row past its position is not -inf, or a write past total"));
}

int main(void)
{
	alarm(1200);
	test_gemm(1, 64, 8, false);
	test_gemm(63, 96, 136, true);   /* K past the last 32-wide step, N past the 128 tile */
	test_gemm(130, 64, 128, false); /* two token tiles */
	test_gemm(65, 200, 40, true);   /* K = 8 mod 32 */
	for (int T : {1, 63, 64, 65})
		test_attn<16>(T, 4, 2, {0}, std::vector<int>(T, 0), "prompt");
	test_attn<16>(70, 4, 2, {37}, std::vector<int>(70, 0), "after 37 cached rows");
	test_attn<64>(65, 2, 1, {0}, std::vector<int>(65, 0), "prompt");
	test_attn<128>(20, 2, 2, {100}, std::vector<int>(20, 0), "after 100 cached rows");
	{ /* a tile of three slots, interleaved, each with its own context */
		std::vector<int> seq(40);
		for (int t = 0; t < 40; t++)
			seq[t] = t % 3 == 2 ? 2 : (t < 20 ? 0 : 1);
		test_attn<16>(40, 4, 2, {3, 70, 0}, seq, "three slots");
	}
	test_mla<128>(9, 5, 144, 128, {0}, std::vector<int>(9, 0), "prompt, rows of two tokens a tile");
	test_mla<128>(14, 5, 272, 256, {40}, std::vector<int>(14, 0), "after 40 cached rows, two slices");
	{
		std::vector<int> seq(12);
		for (int t = 0; t < 12; t++)
			seq[t] = t & 1;
		test_mla<64>(12, 6, 160, 128, {5, 33}, seq, "two slots");
	}
	test_mla<32>(20, 4, 40, 32, {0}, std::vector<int>(20, 0), "the fixtures' latent (32 of 40)");
	{ /* one token a slot at contexts 1, 63, 64, 65, 130 and 300 rows (across the 32-row key tiles and the
	  * 64-entry steps), then three more tokens of the first two slots */
		std::vector<int> ctx = {0, 62, 63, 64, 129, 299}, seq = {0, 1, 2, 3, 4, 5, 0, 1, 0};
		test_dsa<32, 2, 1>(8, 144, 128, ctx, seq, DSA_DENSE, 320, "six contexts");
		test_dsa<32, 4, 4>(8, 144, 128, ctx, seq, DSA_SUBSET, 96, "six contexts");
		test_dsa<64, 1, 1>(8, 144, 128, {129, 299}, {0, 1, 1}, DSA_TOPK, 64, "top 64 of 130-302 rows");
	}
	test_dsa<128, 1, 4>(64, 144, 128, {0, 70}, {0, 1, 0}, DSA_SUBSET, 80, "64 heads");
	test_dsa<32, 2, 4>(72, 72, 64, {40}, {0, 0}, DSA_TOPK, 33, "72 heads: two head groups");
	test_dsa<128, 4, 4>(64, 576, 512, {2060, 40}, {0, 1}, DSA_TOPK, 2048, "GLM-5's heads and latent");
	test_dsa<64, 2, 2>(20, 144, 128, {30, 0}, {0, 1, 0, 1, 1}, DSA_SUBSET, 40, "20 heads in two row groups");
	test_dsa<32, 1, 1>(4, 40, 32, {0}, std::vector<int>(20, 0), DSA_TOPK, 8, "the fixture's shape (top 8)");
	test_dsa<32, 1, 2>(4, 40, 32, {0}, std::vector<int>(20, 0), DSA_DENSE, 8, "the fixture's shape, first 8 rows");
	/* the decode step's split kernel: one token a slot at contexts across the 64-row ranges and 32-row tiles
	** (1 to 300 rows: 1 to 5 ranges of NS 4; 2100 rows: NS caps them), dense (no selection; the reference's
	** selection lists every row) and DSA */
	{
		std::vector<int> ctx = {0, 62, 63, 64, 129, 299}, seq = {0, 1, 2, 3, 4, 5};
		test_dsa<64, 2, 1>(8, 144, 128, ctx, seq, DSA_DENSE, 320, "six contexts", 4, true);
		test_dsa<32, 4, 2>(20, 144, 128, ctx, seq, DSA_SUBSET, 96, "six contexts, 20 heads", 4);
		test_dsa<64, 1, 1>(8, 144, 128, {129, 299}, {0, 1}, DSA_TOPK, 64, "top 64", 3);
		test_dsa<128, 4, 2>(20, 576, 512, {2100}, {0}, DSA_DENSE, 2101, "GLM-4.7-Flash's heads and latent", 8, true);
		test_dsa<32, 1, 1>(4, 40, 32, {0, 70}, {0, 1}, DSA_DENSE, 71, "the fixtures' shape", 2, true);
	}
	/* the indexer's prefill scores on the tensor cores: prompts across the 64-row tiles, a chunk after cached
	** rows, a continuous batch's slots, total past the rows (the cache's capacity) */
	test_iscores<16>(4, {0}, std::vector<int>(70, 0), 0, "the fixtures' shape, a 70-token prompt");
	test_iscores<128>(5, {100}, std::vector<int>(65, 0), 30, "GLM-5's dims, a chunk after 100 rows");
	{
		std::vector<int> seq(40);
		for (int t = 0; t < 40; t++)
			seq[t] = t % 3 == 2 ? 2 : (t < 20 ? 0 : 1);
		test_iscores<32>(3, {3, 70, 0}, seq, 5, "three slots");
	}
	/* the expanded MLA prefill: the fixtures' shape, chunks across the 64-row query and 32-row key tiles */
	for (int T : {1, 63, 64, 65})
		test_mla_x<32, 16>(T, 0, 4, 16, 8, 16, 32, "the fixtures' shape");
	test_mla_x<32, 16>(70, 100, 4, 16, 8, 16, 32, "a chunk after 100 cached rows");
	test_mla_x<256, 256>(66, 37, 2, 192, 64, 256, 512, "GLM-4.7-Flash's head, after 37 rows");
	test_mla_x<256, 128>(40, 0, 2, 192, 64, 256, 512, "GLM-4.7-Flash's head in two slices");
	test_mla_x<192, 128>(65, 130, 3, 128, 64, 128, 96, "DeepSeek-V3's head dims");
	test_mla_x<256, 256>(66, 37, 2, 192, 64, 256, 512, "GLM-4.7-Flash's head, GGUF's split W_UK (tiles across heads)", true);
	test_mla_x<32, 16>(70, 100, 4, 16, 8, 16, 40, "GGUF's split W_UK, L past the k step", true);
	test_mla_x<192, 128>(65, 130, 3, 128, 64, 128, 96, "DeepSeek-V3's head dims, GGUF's split W_UK", true);
	return finish();
}
