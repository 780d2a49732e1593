/*
** tests/simt/test_indexer.cc — GLM-5's DSA key selection on the CPU through simt.h: k_indexer_scores then
** k_indexer_select (ops/kernels.cuh) against ops/ref.c's ref_indexer run as the CPU executor runs it, once
** per run of rows in one sequence slot. Steps hold several sequences (a shared prefill, a batched decode),
** in either order of their lengths, with queries past the top-k (the introselect path) and within it (the
** every-row list). Queries, keys and weights are small integers and halves, so every score is exact in
** float and double alike and ties are frequent: the chosen rows must equal the reference's exactly
** (torch.topk's choice among ties, which depends on how many rows are ranked: the kernel's one-thread
** path), in increasing order; past SEL_EXACT ranked rows the kernel takes the lowest of the tied rows
** instead, which the test then expects (ref_topk over the same scores). With `real` they are random
** floats, ties absent, so the kernel's radix select decides alone, over several tiles of its block. The
** selection is poisoned before each launch. Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"

#include <algorithm>
#include <vector>

#include "../tap.h"

extern "C" {
#include "../../ops/ref.h"
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static int irand(int n)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return (int)((rng >> 33) % (uint64_t)n);
}

static float frand()
{
	return (float)(irand(1 << 20) - (1 << 19)) / (float)(1 << 19);
}

/* One step: run r of runs = (slot, first position, rows); H heads of D, top-k topk, S cache rows a slot,
** nt threads a block of the selection; real: random float inputs (no ties), else small integers. */
static void test_step(std::vector<std::array<int, 3>> runs, int topk, const char *what, int S = 96, int nt = 32,
                      bool real = false)
{
	const int H = 4, D = 8, slots = 3;
	int T = 0;
	for (auto &r : runs)
		T += r[2];
	std::vector<int> pos(T), seq(T);
	std::vector<float> q((size_t)T * H * D), w((size_t)T * H), kc((size_t)slots * S * D);
	for (auto &v : q)
		v = real ? frand() : (float)(irand(5) - 2);
	for (auto &v : w)
		v = real ? 0.5f + frand() : 0.5f * (float)(1 + irand(4));
	for (auto &v : kc)
		v = real ? frand() : (float)(irand(3) - 1);
	for (int i = 0, t = 0; i < (int)runs.size(); i++)
		for (int j = 0; j < runs[i][2]; j++, t++)
			seq[t] = runs[i][0], pos[t] = runs[i][1] + j;
	std::vector<float> score((size_t)T * S);
	std::vector<int> sel((size_t)T * topk, -7), scratch((size_t)T * 2 * S);
	dim3 g, b;
	g.x = (S + 7) / 8, g.y = T, b.x = 256;
	simt_launch(g, b, [&] { k_indexer_scores<float>(score.data(), q.data(), w.data(), kc.data(), pos.data(), H, D, S,
	                                                1.0f, seq.data(), S); });
	g.x = T, g.y = 1, b.x = nt;
	simt_launch(g, b, [&] { k_indexer_select<float>(sel.data(), score.data(), scratch.data(), pos.data(), S, topk,
	                                                seq.data(), S); });
	/* the reference, one run at a time over that slot's cache (it writes the run's own key rows first) */
	std::vector<int32_t> want((size_t)T * topk);
	for (int i = 0, t0 = 0; i < (int)runs.size(); t0 += runs[i][2], i++) {
		int s = runs[i][0], n = runs[i][2];
		std::vector<float> cache(kc.begin() + (long)s * S * D, kc.begin() + (long)(s + 1) * S * D), k((size_t)n * D);
		for (int j = 0; j < n; j++)
			for (int d = 0; d < D; d++)
				k[(size_t)j * D + d] = cache[(size_t)pos[t0 + j] * D + d];
		ref_indexer(want.data() + (size_t)t0 * topk, q.data() + (size_t)t0 * H * D, k.data(), w.data() + (size_t)t0 * H,
		            cache.data(), pos.data() + t0, n, H, D, S, topk, 1.0f);
	}
	/* past SEL_EXACT ranked rows: the lowest rows among equal scores (ref_topk's rule), in increasing order */
	for (int i = 0, t0 = 0; i < (int)runs.size(); t0 += runs[i][2], i++) {
		int m = runs[i][1] + runs[i][2];
		for (int j = 0; j < runs[i][2] && m > SEL_EXACT; j++) {
			int t = t0 + j, n = pos[t] + 1;
			if (n <= topk)
				continue;
			int32_t *w = want.data() + (size_t)t * topk;
			ref_topk(w, score.data() + (size_t)t * S, 1, m, topk);
			std::sort(w, w + topk);
			for (int k = 0; k < topk; k++)
				w[k] = w[k] < n ? w[k] : -1;
		}
	}
	int bad = -1;
	for (int i = 0; i < T * topk && bad < 0; i++)
		if (sel[i] != want[i])
			bad = i;
	check(bad < 0, fmt("indexer selection, %s (%d rows, top-%d, %d threads)", what, T, topk, nt),
	      bad < 0 ? "" : fmt("query %d entry %d: %d, the reference %d", bad / topk, bad % topk, sel[bad], want[bad]));
}

int main()
{
	/* a prompt alone, past the top-k */
	test_step({{{1, 0, 40}}}, 8, "one sequence's prompt");
	/* a shared prefill step: the longer sequence first, then shorter ones whose last positions are lower */
	test_step({{{2, 30, 10}}, {{0, 5, 3}}, {{1, 50, 3}}}, 8, "three prompts in one step, the last one furthest");
	test_step({{{1, 50, 3}}, {{2, 30, 10}}, {{0, 5, 3}}}, 8, "three prompts in one step, the first one furthest");
	/* a batched decode: one row a sequence at different lengths */
	test_step({{{0, 70, 1}}, {{1, 12, 1}}, {{2, 40, 1}}}, 8, "a decode step of three sequences");
	test_step({{{0, 70, 1}}, {{1, 12, 1}}, {{2, 40, 1}}}, 16, "a decode step of three sequences");
	/* the same with 256 threads a block: the tie path's flags and the tiles' counts at another width */
	test_step({{{2, 30, 10}}, {{0, 5, 3}}, {{1, 50, 3}}}, 8, "three prompts in one step, the last one furthest", 96, 256);
	test_step({{{0, 70, 1}}, {{1, 12, 1}}, {{2, 40, 1}}}, 16, "a decode step of three sequences", 96, 256);
	/* random scores, no ties: the radix select alone, contexts of several 256-row tiles */
	test_step({{{1, 0, 24}}}, 8, "one prompt, random scores", 96, 256, true);
	test_step({{{0, 900, 1}}, {{1, 300, 1}}, {{2, 1000, 1}}}, 64, "a decode step, random scores", 1100, 256, true);
	test_step({{{0, 900, 1}}, {{1, 300, 1}}, {{2, 1000, 1}}}, 64, "a decode step, random scores", 1100, 96, true);
	test_step({{{2, 700, 6}}, {{0, 2, 2}}}, 128, "two prompts in one step, random scores", 1100, 1024, true);
	/* contexts of several of the passes' 8 x 256-row tiles, with and without ties */
	test_step({{{0, 4999, 1}}, {{1, 2100, 1}}}, 300, "a decode step past two tiles, random scores", 5000, 256, true);
	test_step({{{0, 4999, 1}}, {{1, 2100, 1}}}, 300, "a decode step past two tiles, ties (the lowest rows)", 5000, 256, false);
	test_step({{{0, 1023, 1}}, {{1, 1024, 1}}, {{2, 1200, 1}}}, 100, "a decode step at SEL_EXACT's bound, ties", 1300, 256);
	test_step({{{2, 1500, 20}}}, 200, "a prompt past SEL_EXACT, ties (the lowest rows)", 1600, 128);
	return finish();
}
