/*
** ops/qrand.h — the scale fields of random blocks of the general block types (every type but Q8_0 and the
** K-quants), one function shared by the CPU generator (runtime/weights.c weights_random_byte) and the GPU
** one (ops/quant.cuh q_rand_byte, in glmc's kernel text), so both make the same bytes. C and CUDA alike:
** integer operations only; QG_DEV (ops/quant_grids.h's rule) makes it a device function under CUDA.
*/
#ifndef GLM_QRAND_H
#define GLM_QRAND_H

#ifndef QG_DEV
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define QG_DEV __device__
#else
#define QG_DEV
#endif
#endif

/* Bits of a positive half in [2^E, 2^(E+1)) with mantissa h's low 10 bits (subnormal below 2^-14, E
** clamped to [-24, 15]); weights.c random_f16's rule. */
static QG_DEV unsigned qrand_f16(unsigned long long h, int E)
{
	unsigned m = (unsigned)(h & 0x3ff);
	E = E < -24 ? -24 : E > 15 ? 15 : E;
	return E >= -14 ? (unsigned)(E + 15) << 10 | m : (0x400u | m) >> (-14 - E);
}

/*
** Byte o of a random block of general type qt (ggml id) in a matrix whose values should be about 2^ea in
** size (ea = -ceil(log2 K / 2), weights.c): rb (the hash byte) unless o is part of a scale field, which is
** a random half from h0 (d) or h1 (the minimum) of a size that puts the values near 2^ea (the factor per
** type follows the spread of its quants: Q4_0 2^-4, Q5_0 2^-5, Q4_1/Q5_1 the same and a negative minimum
** of about 2^(ea-1) to centre q·d, Q2_K 2^-5 for d and dmin, Q3_K 2^-7, IQ4_NL 2^-8, IQ4_XS 2^-12, IQ2
** 2^-7, IQ3 2^-8, IQ1 2^-4, TQ 2^-1); MXFP4's E8M0 byte 2^(ea-4) or twice that; NVFP4's four UE4M3 bytes
** exponent ea + 5 with random mantissas, or below the normal range the subnormals 1 and 2 (exponent 0)
** or 1 (lower: NVFP4 has no smaller scale); IQ1_M's half spread over the top nibbles of its four scale
** words (bytes 49, 51, 53, 55).
*/
static QG_DEV unsigned qrand_general(int qt, int o, int ea, unsigned rb, unsigned long long h0, unsigned long long h1)
{
	if (qt == 39) /* MXFP4 */
		return o == 0 ? (unsigned)(128 + ea - 4 + (int)(h0 & 1)) : rb;
	if (qt == 40) { /* NVFP4: subnormal scales (m·2^-9) where the exponent would be below 1 */
		int e = ea + 5 > 15 ? 15 : ea + 5;
		if (o >= 4)
			return rb;
		return e >= 1 ? (unsigned)e << 3 | (unsigned)(h0 >> (3 * o) & 7) : e == 0 ? 1u + (unsigned)(h0 >> o & 1) : 1u;
	}
	int f = qt == 2 ? 4 : qt == 3 ? 4 : qt == 6 ? 5 : qt == 7 ? 5 : qt == 10 ? 5 : qt == 11 ? 7 : qt == 20 ? 8
	      : qt == 23 ? 12 : qt == 16 || qt == 17 || qt == 22 ? 7 : qt == 18 || qt == 21 ? 8 : qt == 19 || qt == 29 ? 4 : 1;
	unsigned d = qrand_f16(h0, ea - f);
	if (qt == 29) /* IQ1_M */
		return o >= 49 && (o & 1) ? (rb & 0x0fu) | (d >> (4 * ((o - 49) / 2)) & 0xfu) << 4 : rb;
	int dpos = qt == 10 ? 80 : qt == 11 ? 108 : qt == 34 ? 52 : qt == 35 ? 64 : 0;
	int mpos = qt == 3 || qt == 7 ? 2 : qt == 10 ? 82 : -1;
	if (o == dpos || o == dpos + 1)
		return o == dpos ? d & 0xffu : d >> 8;
	if (mpos >= 0 && (o == mpos || o == mpos + 1)) {
		unsigned m = qt == 10 ? qrand_f16(h1, ea - f) : qrand_f16(h1, ea - 1) | 0x8000u;
		return o == mpos ? m & 0xffu : m >> 8;
	}
	return rb;
}

#endif
