/*
** tests/simt/test_moe_tc.cc — the routed experts' grouped GEMM of ops/moe_tc.cuh (k_moe_group, k_moe_up_tc,
** k_moe_down_tc, k_moe_sum_tc) run on the CPU through simt.h (mma.sync and ldmatrix by their stand-ins)
** against ops/ref.c's ref_moe_ffn on the same bf16 values.
**
** The grouping must be exact: every expert's offset and first row tile, and its slots in ascending order
** (a CPU pass over the routing). The output must be within one bf16 unit of the f32 reference plus
** 2^-14 of M, M[t, c] = sum over the token's slots of |w|·sum_f |down[e, c, f]·hid[f]| (the reference's
** hid): the kernels' products are exact, their sums f32 in another order (K <= 200 terms: under 2^-16
** of the terms' magnitudes), and hid enters the down GEMM as bf16 hi + lo (2^-17 of each term); any
** missing, doubled or misplaced term is of order M. A token whose slots are all empty must give 0.
** Routings: random distinct experts, skewed ones (one expert takes most slots, more than one row tile;
** half the experts get none; empty slots, id -1), token counts 1, 63, 64, 65, 130, C and F not multiples
** of the 32-wide k step or the 64- and 128-wide column tiles, and grids too small for one block a tile
** (T·k < 128·E: blocks walk several tiles) and glmc's grid of a block a tile, tiles of 1..128 rows (the
** warps skip their empty 16-row slices); glmc's 4 and 3 shared-memory stages, and 2 and others, with k
** loops shorter and longer than the stages. Outputs and scratch are poisoned before every launch.
** Experts kept in GGUF blocks (Q4_K gate/up with Q6_K down, as a Q4_K_M file; Q8_0; Q5_K): rows quantized
** by ops/quant.c in the device layout; the kernels stage each value dequantized and rounded to bf16, so
** the reference gets quant_dequant's exact values rounded so (C, F multiples of 256 there).
** Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/quant.cuh"
#include "../../ops/prefill.cuh"
#include "../../ops/moe_tc.cuh"

#include <cmath>
#include <unistd.h>
#include <vector>

#include "../tap.h"

extern "C" {
#include "../../ops/quant.h"
#include "../../ops/ref.h"
}

#include "../moe_tc_check.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;

static uint64_t rand64(void)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return rng;
}

static float frand(float lo, float hi)
{
	return lo + (hi - lo) * (float)((rand64() >> 11) * (1.0 / 9007199254740992.0));
}

/* n random values on the bf16 grid, as bf16 and as float. */
static void rnd_bf16(size_t n, float lo, float hi, std::vector<bf16> &b, std::vector<float> &f)
{
	b.resize(n), f.resize(n);
	for (size_t i = 0; i < n; i++) {
		b[i].x = ref_f32_to_bf16(frand(lo, hi));
		f[i] = ref_bf16_to_f32(b[i].x);
	}
}

/* Routings of T tokens, k slots each, over E experts. RANDOM: k distinct experts a token. SKEWED: slot 0
** is expert 1 for every token (one expert past a row tile from T > 128), the others random among the
** lower half (the upper half empty), every fifth slot empty (-1). EMPTY: every slot -1. */
enum { RANDOM, SKEWED, EMPTY };

static std::vector<int> routing(int kind, int T, int E, int k)
{
	std::vector<int> idx((size_t)T * k, -1);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++) {
			int *s = &idx[(size_t)t * k + j];
			if (kind == EMPTY || (kind == SKEWED && (t * k + j) % 5 == 4))
				continue;
			if (kind == SKEWED && j == 0) {
				*s = 1;
				continue;
			}
			for (;;) { /* distinct from the token's earlier slots */
				int e = (int)(rand64() % (uint64_t)(kind == SKEWED ? E / 2 : E)), dup = 0;
				for (int i = 0; i < j; i++)
					dup |= idx[(size_t)t * k + i] == e;
				if (!dup) {
					*s = e;
					break;
				}
			}
		}
	return idx;
}

/* rows × K random weights in ±0.25 as the kernels read them (bytes) and as the reference sees them: bf16
** (qt -1), or rows of GGUF blocks of type qt at the device stride with their exact values rounded to bf16. */
static void rnd_weights(int qt, long long rows, int K, std::vector<unsigned char> &b, std::vector<float> &f)
{
	f.resize((size_t)(rows * K));
	if (qt < 0) {
		std::vector<bf16> h;
		rnd_bf16((size_t)(rows * K), -0.25f, 0.25f, h, f);
		b.assign((const unsigned char *)h.data(), (const unsigned char *)(h.data() + h.size()));
		return;
	}
	size_t rb = quant_row_bytes(qt, K), stride = quant_dev_row_bytes(qt, K);
	b.assign(rows * stride, 0);
	std::vector<float> src(K);
	for (long long r = 0; r < rows; r++) {
		for (float &v : src)
			v = frand(-0.25f, 0.25f);
		unsigned char *row = &b[r * stride];
		size_t n = qt == QT_Q4_K ? quant_q4_k(src.data(), row, K) : qt == QT_Q5_K ? quant_q5_k(src.data(), row, K) :
		           qt == QT_Q6_K ? quant_q6_k(src.data(), row, K) : quant_q8_0(src.data(), row, K);
		if (n != rb || quant_dequant(qt, row, &f[r * K], K)) {
			fprintf(stderr, "test_moe_tc: cannot quantize a row of %d to type %d\n", K, qt);
			exit(1);
		}
		quant_dev_spread(qt, row, K);
		for (int i = 0; i < K; i++)
			f[r * K + i] = ref_bf16_to_f32(ref_f32_to_bf16(f[r * K + i]));
	}
}

static const char *kind_name(int kind)
{
	return kind == RANDOM ? "random" : kind == SKEWED ? "skewed" : "empty";
}

/* QG, QU, QD: the weights' block types, -1 for bf16 (W bf16, else unsigned char). */
/* walk: the grid (ceil(T·k/128), 2) at any size, so blocks walk several tiles below T·k = 128·E; else glmc's
** grid (compiler/passes/emit_cuda.c moe_tc_rows: 2E rows there, a block a tile). */
template <typename W, int QG, int QU, int QD, int NSU = 4, int NSD = 3>
static void test_tc(int kind, int T, int C, int F, int E, int k, bool walk = false)
{
	int n = T * k, rows = (n + MOE_TC_BM - 1) / MOE_TC_BM, gz = 2;
	if (!walk && n < MOE_TC_BM * E)
		rows = 2 * E, gz = 1;
	std::vector<int> idx = routing(kind, T, E, k);
	std::vector<bf16> x, w;
	std::vector<unsigned char> gate, up, down;
	std::vector<float> xf, wf, gf, uf, df;
	rnd_bf16((size_t)T * C, -1, 1, x, xf);
	rnd_bf16((size_t)n, 0.1f, 1, w, wf);
	rnd_weights(QG, (long long)E * F, C, gate, gf);
	rnd_weights(QU, (long long)E * F, C, up, uf);
	rnd_weights(QD, (long long)E * C, F, down, df);
	MoeTcWant want = moe_tc_want(xf, wf, gf, uf, df, idx, T, C, F, E, k);

	std::vector<int> meta(2 * E + 2, -7), list((size_t)n, -7);
	std::vector<bf16> hs((size_t)n * F);
	std::vector<float> ys((size_t)n * C, NAN);
	for (auto &v : hs)
		v.x = 0x7fc0; /* NaN */
	std::vector<bf16> y((size_t)T * C);
	for (auto &v : y)
		v.x = 0x7fc0; /* NaN */
	std::vector<uint4> dsm(MOE_TC_DOWN_SMEM(NSD) / 16), dsu(MOE_TC_UP_SMEM(NSU) / 16);
	simt_launch(dim3{(unsigned)E, 1, 1}, dim3{256, 1, 1}, [&] { k_moe_group(meta.data(), list.data(), idx.data(), n, E); });
	check(moe_tc_grouped(want, meta, list, E), fmt("k_moe_group %s T %d E %d k %d", kind_name(kind), T, E, k), "offsets, tiles or slot order differ");

	simt_launch(dim3{(unsigned)(F + 63) / 64, (unsigned)rows, (unsigned)gz}, dim3{256, 1, 1}, [&] {
		k_moe_up_tc<W, QG, QU, NSU>(meta.data(), list.data(), hs.data(), x.data(), (const W *)gate.data(),
		                            (const W *)up.data(), C, F, k, E, (unsigned char *)dsu.data());
	});
	simt_launch(dim3{(unsigned)(C + 127) / 128, (unsigned)rows, (unsigned)gz}, dim3{256, 1, 1}, [&] {
		k_moe_down_tc<W, QD, NSD>(meta.data(), list.data(), hs.data(), ys.data(), (const W *)down.data(), C, F, E,
		                     (unsigned char *)dsm.data());
	});
	simt_launch(dim3{(unsigned)((T * C + 1023) / 1024), 1, 1}, dim3{256, 1, 1}, [&] {
		k_moe_sum_tc<bf16>(y.data(), meta.data(), list.data(), hs.data(), ys.data(), idx.data(), w.data(), T, C, k, E);
	});
	std::vector<float> got(y.size());
	for (size_t i = 0; i < y.size(); i++)
		got[i] = ref_bf16_to_f32(y[i].x);
	std::vector<float> hf((size_t)want.off[E] * F);
	for (size_t i = 0; i < hf.size(); i++)
		hf[i] = ref_bf16_to_f32(hs[i].x);
	double wh = moe_tc_hid_worst(hf, want), worst = moe_tc_worst(got, hf, want), wr = moe_tc_ref_worst(got, want);
	check(wh <= 1.0 && worst <= 1.0 && wr <= 1.0,
	      fmt("moe grouped GEMM %s T %d C %d F %d E %d k %d, weights %d %d %d (%d row tiles, %d grid rows, %d/%d stages)",
	          kind_name(kind), T, C, F, E, k, QG, QU, QD, want.tile0[E], gz * rows, NSU, NSD),
	      fmt("worst %.2f units (hid %.2f, against ref_moe_ffn %.2f)", worst, wh, wr));
}

int main(void)
{
	alarm(1200);
	const int B = -1; /* bf16 weights */
	test_tc<bf16, B, B, B>(RANDOM, 1, 64, 32, 4, 2);
	test_tc<bf16, B, B, B>(SKEWED, 63, 200, 72, 8, 4);  /* C, F past the k step; empty experts and slots */
	test_tc<bf16, B, B, B>(RANDOM, 64, 136, 40, 16, 2, true); /* 16 experts on two grid rows: blocks walk tiles */
	test_tc<bf16, B, B, B>(RANDOM, 64, 136, 40, 16, 2); /* glmc's grid: a block a tile */
	test_tc<bf16, B, B, B>(RANDOM, 32, 64, 32, 64, 4);  /* a 32-row decode step: 1-2 rows a tile, most slices skipped */
	test_tc<bf16, B, B, B>(RANDOM, 48, 72, 40, 8, 3);   /* ~18 rows a tile: the second 16-row slice partly filled */
	test_tc<bf16, B, B, B>(SKEWED, 40, 64, 32, 6, 2, true);
	test_tc<bf16, B, B, B, 2, 2>(SKEWED, 63, 200, 72, 8, 4); /* two stages, as before the deeper ones */
	test_tc<bf16, B, B, B, 2, 2>(RANDOM, 32, 64, 32, 64, 4);
	test_tc<bf16, B, B, B, 3, 4>(RANDOM, 130, 264, 200, 5, 4); /* k steps past every stage count */
	test_tc<bf16, B, B, B>(SKEWED, 65, 64, 96, 16, 2);  /* F past a 64-column tile */
	test_tc<bf16, B, B, B>(SKEWED, 130, 72, 48, 6, 2);  /* expert 1: 130 rows, two row tiles */
	test_tc<bf16, B, B, B>(RANDOM, 130, 136, 32, 5, 4); /* C past a 128-column tile, 520 slots */
	test_tc<bf16, B, B, B>(EMPTY, 5, 64, 32, 4, 2);     /* no rows: y = 0 */
	test_tc<unsigned char, QT_Q4_K, QT_Q4_K, QT_Q6_K>(SKEWED, 65, 256, 256, 6, 2); /* a Q4_K_M file's experts */
	test_tc<unsigned char, QT_Q4_K, QT_Q4_K, QT_Q4_K>(RANDOM, 33, 512, 256, 4, 2);
	test_tc<unsigned char, QT_Q8_0, QT_Q8_0, QT_Q8_0>(RANDOM, 40, 256, 512, 3, 2);
	test_tc<unsigned char, QT_Q5_K, QT_Q5_K, QT_Q5_K>(SKEWED, 9, 256, 256, 4, 2);
	return finish();
}
