/*
** tests/moe_tc_check.h — the host side of the tests of ops/moe_tc.cuh's grouped GEMM, shared by
** tests/simt/test_moe_tc.cc (the CPU stand-in) and tests/gpu/test_kernels.cu (the GPU): the reference
** output (ops/ref.c ref_moe_ffn), the magnitudes the error bound scales with, the grouping the kernels
** must find, and the worst error in units of that bound. Include after ops/ref.h, ops/gemv_shape.h
** (MOE_TC_BM), <vector> and <cmath>.
*/
#pragma once

struct MoeTcWant {
	std::vector<float> y;          /* ref_moe_ffn's output, [T, C] */
	std::vector<float> mag;        /* per output: sum over the token's slots of |w|·sum_f |down[e, c, f]·hid[f]| */
	std::vector<int> off, tile0;   /* per expert (and the total): first sorted row, first row tile */
	std::vector<int> order;        /* the slots, by expert, ascending within one */
};

/* The reference for T tokens of k slots (idx, -1 empty) over E experts, weights as floats ([E, F, C] gate
** and up, [E, C, F] down), and what moe_tc_worst and moe_tc_grouped compare against. */
static MoeTcWant moe_tc_want(const std::vector<float> &x, const std::vector<float> &w, const std::vector<float> &gate,
                             const std::vector<float> &up, const std::vector<float> &down, const std::vector<int> &idx,
                             int T, int C, int F, int E, int k)
{
	MoeTcWant r;
	r.y.resize((size_t)T * C), r.mag.assign((size_t)T * C, 0.0f), r.off.assign(E + 1, 0), r.tile0.assign(E + 1, 0);
	ref_moe_ffn(r.y.data(), x.data(), idx.data(), w.data(), gate.data(), up.data(), down.data(), T, C, F, E, k);
	std::vector<float> hid(F);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++) {
			int e = idx[(size_t)t * k + j];
			if (e < 0)
				continue;
			for (int f = 0; f < F; f++) { /* the reference's hid */
				double a = 0, b = 0;
				for (int c = 0; c < C; c++)
					a += (double)gate[((size_t)e * F + f) * C + c] * x[(size_t)t * C + c],
						b += (double)up[((size_t)e * F + f) * C + c] * x[(size_t)t * C + c];
				float ga = (float)a;
				hid[f] = ga / (1.0f + expf(-ga)) * (float)b;
			}
			for (int c = 0; c < C; c++) {
				double m = 0;
				for (int f = 0; f < F; f++)
					m += fabs((double)down[((size_t)e * C + c) * F + f] * hid[f]);
				r.mag[(size_t)t * C + c] += (float)(w[(size_t)t * k + j] * m);
			}
		}
	for (int e = 0; e < E; e++) {
		int cnt = 0;
		for (size_t s = 0; s < idx.size(); s++)
			if (idx[s] == e)
				r.order.push_back((int)s), cnt++;
		r.off[e + 1] = r.off[e] + cnt, r.tile0[e + 1] = r.tile0[e] + (cnt + MOE_TC_BM - 1) / MOE_TC_BM;
	}
	return r;
}

/* Whether k_moe_group's meta (offsets, tile starts) and list (sorted slots) are the expected ones. */
static bool moe_tc_grouped(const MoeTcWant &r, const std::vector<int> &meta, const std::vector<int> &list, int E)
{
	bool ok = true;
	for (int e = 0; e <= E; e++)
		ok &= meta[e] == r.off[e] && meta[E + 1 + e] == r.tile0[e];
	for (int i = 0; i < r.off[E] && ok; i++)
		ok &= list[i] == r.order[i];
	return ok;
}

/* The worst |got − y| / (one bf16 unit of y + 2^-14·mag) over the outputs (NaN: infinite): at most 1 when
** the kernels' f32 sums in their order and hid's bf16 hi + lo parts (2^-17 of each term) err by less than
** 2^-14 of the terms' magnitudes before the output's bf16 rounding. A missing, doubled or misplaced term
** is of order mag. */
static double moe_tc_worst(const std::vector<float> &got, const MoeTcWant &r)
{
	double worst = 0;
	for (size_t i = 0; i < got.size(); i++) {
		if (std::isnan(got[i]))
			return INFINITY;
		int ex;
		frexp(r.y[i] == 0 ? 1e-30 : (double)r.y[i], &ex);
		double d = fabs((double)got[i] - r.y[i]) / (ldexp(1.0, ex - 8) + ldexp((double)r.mag[i], -14));
		worst = d > worst ? d : worst;
	}
	return worst;
}
