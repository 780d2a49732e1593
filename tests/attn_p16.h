/*
** tests/attn_p16.h — the reference of the prefill attentions that feed their probabilities to the tensor
** cores rounded once to bf16 (ops/prefill.cuh: k_attn_tc, k_mla_xattn; pf_pv says why), shared by
** tests/simt/test_prefill.cc (the CPU stand-in) and tests/gpu/test_kernels.cu (the GPU).
**
** Such a kernel walks a row's keys in tiles of NK from key 0, rounds each probability exp(s − m) against
** the running max m of the tiles up to its own, carries it to the final max exactly (a float rescale of
** the accumulator), and divides by the sum of the unrounded probabilities. The reference does the same in
** double. What it cannot follow is the kernel's f32 score landing on the other side of a bf16 rounding
** boundary than the double one (rare: seen once in the tests' cases): each such flip moves an output by
** one unit of that probability times its value over l. So an output is held to one bf16 unit, plus the
** floor, plus `slack`: two flips of the row's largest such term. A key wrongly masked or kept moves it by
** 2^8 times one flip; a bound that counted every probability's rounding instead (2^-8 · Σ p·|v| / l)
** would not see that in rows of a few hundred keys.
** Include after <cmath>, <cstring>, <cstdint> and <vector>.
*/
#pragma once

/* x rounded to the nearest bf16 (ties to even), through float as the kernel's f32 value is. */
static inline double p16_round(double x)
{
	float f = (float)x;
	uint32_t u;
	memcpy(&u, &f, 4);
	u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
	memcpy(&f, &u, 4);
	return f;
}

/* out[e], e < Dv: the attention of one query row over its n keys (s: the scaled scores, in key order) with
** values v[j·vs + e], as a kernel of NK-key tiles rounds it (above); slack[e]: two flips' worth. */
static inline void attn_p16_row(double *out, double *slack, const double *s, int n, int NK, const float *v, size_t vs,
                                int Dv)
{
	std::vector<double> w(n), ulp(n), mt(n);
	double m = -INFINITY, l = 0;
	for (int j0 = 0; j0 < n; j0 += NK) {
		int j1 = j0 + NK < n ? j0 + NK : n;
		for (int j = j0; j < j1; j++)
			m = s[j] > m ? s[j] : m;
		for (int j = j0; j < j1; j++) {
			int e;
			w[j] = p16_round(exp(s[j] - m)), mt[j] = m;
			frexp(w[j], &e);
			ulp[j] = w[j] > 0 ? ldexp(1.0, e - 8) : 0;
		}
	}
	for (int j = 0; j < n; j++) {
		double c = exp(mt[j] - m);
		w[j] *= c, ulp[j] *= c, l += exp(s[j] - m);
	}
	for (int e = 0; e < Dv; e++) {
		double a = 0, f = 0;
		for (int j = 0; j < n; j++) {
			double x = v[(size_t)j * vs + e];
			a += w[j] * x;
			f = fmax(f, ulp[j] * fabs(x));
		}
		out[e] = a / l, slack[e] = 2 * f / l;
	}
}

/* The worst |got − want| over n outputs in units of (one bf16 unit of want + floor + slack); a NaN is
** infinitely bad. */
static inline double attn_p16_worst(const float *got, const float *want, const float *slack, size_t n, double floor)
{
	double worst = 0;
	for (size_t i = 0; i < n; i++) {
		if (std::isnan(got[i]))
			return INFINITY;
		int e;
		frexp(want[i] == 0 ? 1e-30 : want[i], &e);
		double d = fabs((double)got[i] - want[i]) / (ldexp(1.0, e - 8) + floor + slack[i]);
		worst = d > worst ? d : worst;
	}
	return worst;
}
