/*
** tests/simt/test_attn_split.cc — the split (flash-decoding) decode attention of ops/fused.cuh
** (k_attn_split, k_attn_split_rope: ranges of the context, each range's state in scratch, the last block
** of a head group merging them) run on the CPU through simt.h against ops/ref.c's ref_attention (and
** ref_rope for the folded rotary). Contexts cross the range boundaries (1, 63, 64, 65, 128 rows: one range
** of up to 127 rows; 129: two; 1000 and 5000: many, the launch's NS or the 64-row minimum deciding), GQA ratios 1, 4 and 8 (and a
** group served by two blocks), head dims 64 and 128 (and 256 in bf16, 32 in f32), f32 and bf16, steps of up
** to 8 tokens at different positions in different sequence slots (a continuous batch). Every input is
** fresh random; the output and the scratch states are poisoned (NaN) before each launch; cache rows past a
** slot's last position are NaN. f32 must be within 1e-4 of the reference (absolute; values within ±1),
** bf16 within one bf16 unit of it (plus 1e-5). The per-group counters must be back at zero after a
** launch, and the blocks run in reverse order must give the same bits (the merge's fixed range order).
** Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"

#include <cmath>
#include <string>
#include <type_traits>
#include <unistd.h>
#include <vector>

#include "../tap.h"

extern "C" {
#include "../../ops/ref.h"
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
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
static float h_to_f(float v)
{
	return v;
}
static float h_to_f(bf16 v)
{
	return ref_bf16_to_f32(v.x);
}
template <typename T> static const char *tname()
{
	return std::is_same<T, float>::value ? "f32" : "bf16";
}

/* The worst error of got against the f32 reference want, in the test's bound: f32 |got - want| / 1e-4,
** bf16 |got - want| / (one bf16 unit of want + 1e-5); at most 1 passes. NaN: infinite. */
template <typename A> static double worst(const std::vector<A> &got, const std::vector<float> &want)
{
	double w = 0;
	for (size_t i = 0; i < got.size(); i++) {
		double g = h_to_f(got[i]), r = want[i], d;
		if (std::isnan(g))
			return INFINITY;
		if (std::is_same<A, float>::value) {
			d = fabs(g - r) / 1e-4;
		} else {
			int e;
			frexp(r == 0 ? 1e-30 : r, &e);
			d = fabs(g - r) / (ldexp(1.0, e - 8) + 1e-5);
		}
		w = d > w ? d : w;
	}
	return w;
}

/* Launches f over grid g with 256-thread blocks, the blocks' range index (blockIdx.x) in reverse order
** when rev: the last block of each head group to count is then range 0, not the last range. */
template <typename F> static void launch(dim3 g, bool rev, F f)
{
	dim3 b;
	b.x = 256;
	simt_launch(g, b, [&] {
		if (rev)
			blockIdx.x = gridDim.x - 1 - blockIdx.x;
		f();
	});
}

/*
** One decode step of T = seq.size() tokens, token t of slot seq[t] at position ctx[seq[t]] + (its index
** among its slot's tokens), through k_attn_split<A, ROWB, HB> with NS ranges a token; the reference is
** ref_attention token by token over that token's slot (its rows 0..pos[t]).
*/
template <typename A, int ROWB, int HB>
static void test_split(int H, int G, int NS, std::vector<int> ctx, std::vector<int> seq, const char *what)
{
	const int D = ROWB / (int)sizeof(A), T = (int)seq.size(), slots = (int)ctx.size();
	std::vector<int> pos(T), last(slots, -1);
	std::vector<int> seen(slots, 0);
	int S = 1;
	for (int t = 0; t < T; t++) {
		pos[t] = ctx[seq[t]] + seen[seq[t]]++;
		last[seq[t]] = pos[t] > last[seq[t]] ? pos[t] : last[seq[t]];
		S = pos[t] + 4 > S ? pos[t] + 4 : S; /* rows past every position, poisoned */
	}
	size_t RW = (size_t)G * D, n = (size_t)slots * S * RW;
	std::vector<A> q((size_t)T * H * D), kc(n, h_from_f<A>(NAN)), vc(n, h_from_f<A>(NAN));
	for (auto &v : q)
		v = h_from_f<A>(frand(-2, 2));
	for (int s = 0; s < slots; s++)
		for (size_t i = 0; i < (size_t)(last[s] + 1) * RW; i++)
			kc[(size_t)s * S * RW + i] = h_from_f<A>(frand(-1, 1)), vc[(size_t)s * S * RW + i] = h_from_f<A>(frand(-1, 1));
	float scale = 1.0f / sqrtf((float)D);
	std::vector<float> want((size_t)T * H * D);
	for (int t = 0; t < T; t++) {
		int p = pos[t], s = seq[t];
		std::vector<float> qf((size_t)H * D), kf((size_t)(p + 1) * RW), vf((size_t)(p + 1) * RW);
		for (size_t i = 0; i < qf.size(); i++)
			qf[i] = h_to_f(q[(size_t)t * H * D + i]);
		for (size_t i = 0; i < kf.size(); i++)
			kf[i] = h_to_f(kc[(size_t)s * S * RW + i]), vf[i] = h_to_f(vc[(size_t)s * S * RW + i]);
		std::vector<float> kstep(&kf[(size_t)p * RW], &kf[(size_t)(p + 1) * RW]),
			vstep(&vf[(size_t)p * RW], &vf[(size_t)(p + 1) * RW]);
		ref_attention(&want[(size_t)t * H * D], qf.data(), kstep.data(), vstep.data(), kf.data(), vf.data(), &p, 1, H,
		              G, D, D, p + 1, scale);
	}
	std::string nm = fmt("attn_split A=%s D=%d H=%d G=%d HB=%d NS=%d T=%d %s", tname<A>(), D, H, G, HB, NS, T, what);
	std::vector<A> y[2];
	for (int rev = 0; rev < 2; rev++) {
		y[rev].assign((size_t)T * H * D, h_from_f<A>(NAN));
		std::vector<float> pacc((size_t)T * NS * H * D, NAN), pml((size_t)T * NS * H * 2, NAN);
		std::vector<int> done((size_t)T * (H / HB), 0);
		dim3 g;
		g.x = (unsigned)NS, g.y = (unsigned)(H / HB), g.z = (unsigned)T;
		launch(g, rev, [&] {
			k_attn_split<A, ROWB, HB>(y[rev].data(), pacc.data(), pml.data(), done.data(), q.data(), kc.data(), vc.data(),
			                          pos.data(), H, G, scale, seq.data(), S);
		});
		double u = worst(y[rev], want);
		check(u <= 1.0, nm + (rev ? " (blocks reversed)" : ""), fmt("worst %.3g of the bound", u));
		bool zero = true;
		for (int c : done)
			zero &= c == 0;
		check(zero, nm + (rev ? " (blocks reversed)" : "") + " counters back at 0", "a done counter is not 0");
	}
	check(!memcmp(y[0].data(), y[1].data(), sizeof(A) * y[0].size()), nm + " same bits in either block order",
	      "the output depends on which block merged");
}

/*
** A 1-token step with the rotary and cache writes folded in (k_attn_split_rope) at position p of slot
** `slot` of nslots, against ref_rope + ref_attention; the caches NaN outside rows 0..p-1 of the slot. Row p
** must then hold k_rope_qk_kv's rotated k (bit for bit) and the raw v, no other row may change.
*/
template <typename A, int ROWB, int HB, bool IL>
static void test_split_rope(int H, int G, int R, int NS, int p, int slot, int nslots, int sc)
{
	const int D = ROWB / (int)sizeof(A), S = p + 8;
	std::vector<A> q((size_t)H * D), k((size_t)G * D), v((size_t)G * D);
	for (auto &x : q)
		x = h_from_f<A>(frand(-2, 2));
	for (auto &x : k)
		x = h_from_f<A>(frand(-2, 2));
	for (auto &x : v)
		x = h_from_f<A>(frand(-1, 1));
	RefRope rr = {};
	rr.head_dim = D, rr.rot_dim = R, rr.interleaved = IL, rr.theta = 10000.0, rr.scaling = sc;
	rr.factor = sc == ROPE_LLAMA3 ? 8 : 4, rr.orig_ctx = sc == ROPE_LLAMA3 ? 64 : 4096;
	rr.low_freq_factor = 1, rr.high_freq_factor = 4;
	std::vector<float> inv(R / 2), qf((size_t)H * D), kf((size_t)G * D), vf((size_t)G * D), wq((size_t)H * D),
		wk((size_t)G * D), want((size_t)H * D);
	float cs;
	ref_rope_freqs(&rr, inv.data(), &cs);
	for (size_t i = 0; i < q.size(); i++)
		qf[i] = h_to_f(q[i]);
	for (size_t i = 0; i < k.size(); i++)
		kf[i] = h_to_f(k[i]), vf[i] = h_to_f(v[i]);
	ref_rope(wq.data(), qf.data(), &p, 1, H, &rr);
	ref_rope(wk.data(), kf.data(), &p, 1, G, &rr);
	for (auto &x : wq) /* the unfused path rounds the rotated rows to A */
		x = h_to_f(h_from_f<A>(x));
	for (auto &x : wk)
		x = h_to_f(h_from_f<A>(x));
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
	std::vector<float> pacc((size_t)NS * H * D, NAN), pml((size_t)NS * H * 2, NAN);
	std::vector<int> done((size_t)(H / HB), 0);
	int seq = slot;
	dim3 g;
	g.x = (unsigned)NS, g.y = (unsigned)(H / HB);
	launch(g, false, [&] {
		k_attn_split_rope<A, ROWB, HB, IL>(y.data(), pacc.data(), pml.data(), done.data(), kc.data(), vc.data(), q.data(),
		                                   k.data(), v.data(), &p, inv.data(), inv.data(), cs, cs, H, G, R, scale, &seq, S);
	});
	std::vector<A> qo((size_t)H * D), ko(row), skc((size_t)(p + 1) * row), svc((size_t)(p + 1) * row);
	int zero = 0;
	dim3 g2, b2;
	g2.x = (unsigned)(H + G), b2.x = 128;
	simt_launch(g2, b2, [&] {
		k_rope_qk_kv<A, float, false, false, IL>(qo.data(), ko.data(), skc.data(), svc.data(), q.data(), k.data(), v.data(),
		                                         nullptr, nullptr, &p, inv.data(), inv.data(), cs, cs, H, G, D, D, R,
		                                         0.0f, &zero, 0);
	});
	std::string nm = fmt("attn_split_rope A=%s D=%d H=%d G=%d HB=%d R=%d%s NS=%d pos %d slot %d/%d%s", tname<A>(), D, H,
	                     G, HB, R, IL ? " interleaved" : "", NS, p, slot, nslots,
	                     sc ? fmt(" %s", ref_rope_scaling_name(sc)).c_str() : "");
	double u = worst(y, want);
	check(u <= 1.0, nm + " out", fmt("worst %.3g of the bound", u));
	size_t rp = at + (size_t)p * row;
	check(!memcmp(&kc[rp], ko.data(), sizeof(A) * row) && !memcmp(&vc[rp], v.data(), sizeof(A) * row), nm + " cache row p",
	      "row p differs from k_rope_qk_kv's rotated k or the raw v");
	memcpy(&kc0[rp], &kc[rp], sizeof(A) * row), memcpy(&vc0[rp], &vc[rp], sizeof(A) * row);
	check(!memcmp(kc.data(), kc0.data(), sizeof(A) * n) && !memcmp(vc.data(), vc0.data(), sizeof(A) * n),
	      nm + " other cache rows untouched", "a row other than p changed");
	bool zd = true;
	for (int c : done)
		zd &= c == 0;
	check(zd, nm + " counters back at 0", "a done counter is not 0");
}

int main(void)
{
	alarm(1200);
	/* the range arithmetic: every row in exactly one range, none empty, at most NS, >= 64 rows unless one */
	{
		bool ok = true;
		for (int ns : {1, 2, 7, 33, 256})
			for (int n = 1; n <= 20000; n += n < 300 ? 1 : 97) {
				int L, nr = attn_split_ranges(n, ns, &L);
				ok &= nr >= 1 && nr <= ns && (nr - 1) * L < n && nr * L >= n && (nr == 1 || L >= 64);
			}
		check(ok, "attn_split_ranges: ranges cover the context, none empty, at most NS, 64 rows or more");
	}
	/* one token, Llama-3-8B's group (8 kv heads of 4 q heads) cut down to 2 kv heads, across the boundaries */
	for (int c : {0, 62, 63, 64, 127, 128, 999, 4999})
		test_split<bf16, 256, 4>(8, 2, 33, {c}, {0}, fmt("context %d", c + 1).c_str());
	for (int c : {0, 63, 64, 4999})
		test_split<float, 512, 4>(8, 2, 33, {c}, {0}, fmt("context %d", c + 1).c_str());
	/* GQA ratio 1 (MHA) and 8; a group of 8 at 256 dims in two blocks of 4; f32 64- and 32-dim heads */
	test_split<bf16, 256, 1>(4, 4, 16, {999}, {0}, "MHA context 1000");
	test_split<float, 256, 1>(2, 2, 8, {64}, {0}, "MHA context 65");
	test_split<bf16, 128, 8>(16, 2, 12, {4999}, {0}, "ratio 8, D 64, context 5000");
	test_split<float, 512, 8>(8, 1, 5, {1000}, {0}, "ratio 8, context 1001");
	test_split<bf16, 512, 4>(8, 1, 6, {700}, {0}, "ratio 8 in two blocks, D 256");
	test_split<float, 128, 2>(4, 2, 4, {130}, {0}, "D 32");
	test_split<bf16, 128, 7>(14, 2, 10, {900}, {0}, "ratio 7 (Qwen2.5's 28 of 4), D 64");
	test_split<float, 512, 6>(12, 2, 9, {700}, {0}, "ratio 6");
	/* NS fewer than the 64-row ranges: the launch's NS decides (5000 rows in 8 ranges) */
	test_split<bf16, 256, 4>(4, 1, 8, {4999}, {0}, "8 ranges of 625");
	/* steps of several tokens: one slot's tokens at consecutive positions, and a continuous batch of four
	** slots with contexts on either side of a boundary (one range, two, many) */
	test_split<bf16, 256, 4>(8, 2, 33, {1000}, {0, 0, 0, 0}, "4 tokens of one slot after 1000");
	test_split<bf16, 256, 4>(8, 2, 33, {62, 0, 5000, 64}, {0, 1, 2, 3, 0, 2, 3, 0}, "8 tokens of 4 slots");
	test_split<float, 512, 4>(4, 1, 20, {63, 1500, 0}, {2, 0, 1, 0, 2}, "5 tokens of 3 slots");
	test_split<float, 256, 1>(2, 2, 9, {300, 64}, {1, 0, 1}, "MHA, 3 tokens of 2 slots");
	/* the folded rotary (1-token steps): at the start, inside one range, across ranges, GQA 4 and 8, slots */
	test_split_rope<bf16, 256, 4, false>(8, 2, 128, 33, 0, 0, 1, ROPE_PLAIN);
	test_split_rope<bf16, 256, 4, false>(8, 2, 128, 33, 63, 1, 2, ROPE_LLAMA3);
	test_split_rope<bf16, 256, 4, false>(8, 2, 128, 33, 64, 0, 1, ROPE_LLAMA3);
	test_split_rope<bf16, 256, 4, false>(8, 2, 128, 33, 128, 0, 1, ROPE_LLAMA3); /* 129 rows: two ranges, the own key in the second */
	test_split_rope<bf16, 256, 4, false>(8, 2, 128, 33, 2000, 1, 3, ROPE_LLAMA3);
	test_split_rope<float, 512, 8, true>(8, 1, 96, 7, 300, 0, 1, ROPE_YARN);
	test_split_rope<float, 256, 1, false>(2, 2, 32, 5, 129, 1, 2, ROPE_PLAIN);
	test_split_rope<bf16, 512, 4, false>(8, 1, 256, 6, 300, 1, 2, ROPE_LLAMA3); /* a kv head's 8 in two groups: one writes */
	test_split_rope<bf16, 128, 8, true>(16, 2, 64, 12, 5000, 0, 1, ROPE_PLAIN);
	return finish();
}
