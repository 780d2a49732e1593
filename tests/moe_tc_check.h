/*
** tests/moe_tc_check.h — the host side of the tests of ops/moe_tc.cuh's grouped GEMM, shared by
** tests/simt/test_moe_tc.cc (the CPU stand-in) and tests/gpu/test_kernels.cu (the GPU): the reference
** output (ops/ref.c ref_moe_ffn) and its hidden rows, the magnitudes the error bounds scale with, the
** grouping the kernels must find, and the worst errors in units of those bounds. k_moe_up_tc stores hid in
** bf16 (ops/moe_tc.cuh says why), so three checks: hid within one bf16 unit of the reference's float hid
** (moe_tc_hid_worst); the output held tightly to the down projection of the kernels' own hid
** (moe_tc_worst); and to ref_moe_ffn within what rounding hid can move it (moe_tc_ref_worst). Include after ops/ref.h, ops/gemv_shape.h
** (MOE_TC_BM), <vector> and <cmath>.
*/
#pragma once

struct MoeTcWant {
	std::vector<float> y;          /* ref_moe_ffn's output, [T, C] */
	std::vector<float> mag;        /* per output: sum over the token's slots of |w|·sum_f |down[e, c, f]·hid[f]| */
	std::vector<float> hid;        /* the reference's hid, [T·k, F] by slot (empty slots 0) */
	std::vector<float> hmag;       /* how far f32 sums can move each hid: 1.1·|u|·sum |gate·x| + |silu(g)|·sum |up·x| */
	std::vector<float> down, w;    /* the down weights as floats and the slots' weights, for moe_tc_worst */
	std::vector<int> idx;
	int T, C, F, k;
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
	r.hid.assign((size_t)T * k * F, 0.0f), r.hmag.assign((size_t)T * k * F, 0.0f), r.down = down, r.w = w, r.idx = idx, r.T = T, r.C = C, r.F = F, r.k = k;
	ref_moe_ffn(r.y.data(), x.data(), idx.data(), w.data(), gate.data(), up.data(), down.data(), T, C, F, E, k);
	std::vector<float> hid(F);
	for (int t = 0; t < T; t++)
		for (int j = 0; j < k; j++) {
			int e = idx[(size_t)t * k + j];
			if (e < 0)
				continue;
			for (int f = 0; f < F; f++) { /* the reference's hid */
				double a = 0, b = 0, am = 0, bm = 0;
				for (int c = 0; c < C; c++) {
					double xc = x[(size_t)t * C + c], gc = gate[((size_t)e * F + f) * C + c], uc = up[((size_t)e * F + f) * C + c];
					a += gc * xc, b += uc * xc, am += fabs(gc * xc), bm += fabs(uc * xc);
				}
				float ga = (float)a;
				hid[f] = ga / (1.0f + expf(-ga)) * (float)b;
				r.hmag[((size_t)t * k + j) * F + f] = (float)(1.1 * fabs(b) * am + fabs(hid[f] / (b == 0 ? 1 : b)) * bm);
				r.hid[((size_t)t * k + j) * F + f] = hid[f];
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

/* One bf16 unit (the spacing of bf16 values) at v. */
static double moe_tc_unit(double v)
{
	int ex;
	frexp(v == 0 ? 1e-30 : v, &ex);
	return ldexp(1.0, ex - 8);
}

/* The worst |got − hid| / (one bf16 unit of hid + 2^-14·hmag) over the sorted rows' hid values, got as
** k_moe_up_tc stored them (sorted row i is slot r.order[i]): at most 1 when each is the reference's float
** hid rounded to bf16, moved by no more than the kernels' f32 sums in their order can move it (a hid near 0
** from a sum that cancels moves by more than its own unit). NaN (a value never written): infinite. */
static double moe_tc_hid_worst(const std::vector<float> &got, const MoeTcWant &r)
{
	double worst = 0;
	for (size_t i = 0; i < r.order.size(); i++)
		for (int f = 0; f < r.F; f++) {
			size_t at = (size_t)r.order[i] * r.F + f;
			double g = got[i * r.F + f], h = r.hid[at];
			if (std::isnan(g))
				return INFINITY;
			double d = fabs(g - h) / (moe_tc_unit(h) + ldexp((double)r.hmag[at], -14));
			worst = d > worst ? d : worst;
		}
	return worst;
}

/* The worst |got − y| / (one bf16 unit of y + 2^-14·m) over the outputs, y and m the down projection and
** magnitude of the kernels' own hid (hs, by sorted row as moe_tc_hid_worst takes it) formed in double:
** at most 1 when the kernels' f32 sums in their order err by less than 2^-14 of the terms' magnitudes before
** the output's bf16 rounding. A missing, doubled or misplaced term is of order m. NaN: infinite. */
static double moe_tc_worst(const std::vector<float> &got, const std::vector<float> &hs, const MoeTcWant &r)
{
	std::vector<const float *> row((size_t)r.T * r.k, nullptr);
	for (size_t i = 0; i < r.order.size(); i++)
		row[(size_t)r.order[i]] = &hs[i * r.F];
	double worst = 0;
	for (int t = 0; t < r.T; t++)
		for (int c = 0; c < r.C; c++) {
			double y = 0, m = 0;
			for (int j = 0; j < r.k; j++) {
				size_t s = (size_t)t * r.k + j;
				if (!row[s])
					continue;
				const float *dn = &r.down[((size_t)r.idx[s] * r.C + c) * r.F];
				double a = 0, b = 0;
				for (int f = 0; f < r.F; f++)
					a += (double)dn[f] * row[s][f], b += fabs((double)dn[f] * row[s][f]);
				y += r.w[s] * a, m += fabs(r.w[s]) * b;
			}
			double g = got[(size_t)t * r.C + c];
			if (std::isnan(g))
				return INFINITY;
			double d = fabs(g - y) / (moe_tc_unit(y) + ldexp(m, -14));
			worst = d > worst ? d : worst;
		}
	return worst;
}

/* The worst |got − ref_moe_ffn's y| / (one bf16 unit of y + 2^-8·mag): at most 1 when rounding each hid
** to bf16 (half a unit, 2^-8 of it at most) and the f32 sums are all that differ. NaN: infinite. */
static double moe_tc_ref_worst(const std::vector<float> &got, const MoeTcWant &r)
{
	double worst = 0;
	for (size_t i = 0; i < got.size(); i++) {
		if (std::isnan(got[i]))
			return INFINITY;
		double d = fabs((double)got[i] - r.y[i]) / (moe_tc_unit(r.y[i]) + ldexp((double)r.mag[i], -8));
		worst = d > worst ? d : worst;
	}
	return worst;
}
