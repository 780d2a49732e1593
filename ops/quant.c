/*
** ops/quant.c — ggml type table and CPU dequantization, bit-exact against ggml's to_float.
**
** Bit-exactness depends on doing the same float32 operations in the same order as ggml: every scale
** is first formed as float(half) * small integer, then multiplied by the quant (and, for the types
** with a minimum, the minimum is subtracted or added after). Contraction of a*b+c into an FMA is turned
** off below whatever -march or -std a build uses, as in ggml's reference build (for today's types the
** products are exact in float32, so it could not change a bit, but a new type might).
*/
#include "quant.h"
#include "quant_grids.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <math.h>
#include <string.h>

static const QuantType types[QT_COUNT] = {
	[0] = {0, "F32", 1, 4, 1},          [1] = {1, "F16", 1, 2, 1},
	[2] = {2, "Q4_0", 32, 18, 1},       [3] = {3, "Q4_1", 32, 20, 1},
	[4] = {4, "Q4_2", 0, 0, 0},         [5] = {5, "Q4_3", 0, 0, 0},
	[6] = {6, "Q5_0", 32, 22, 1},       [7] = {7, "Q5_1", 32, 24, 1},
	[8] = {8, "Q8_0", 32, 34, 1},       [9] = {9, "Q8_1", 32, 36, 0},
	[10] = {10, "Q2_K", 256, 84, 1},    [11] = {11, "Q3_K", 256, 110, 1},
	[12] = {12, "Q4_K", 256, 144, 1},   [13] = {13, "Q5_K", 256, 176, 1},
	[14] = {14, "Q6_K", 256, 210, 1},   [15] = {15, "Q8_K", 256, 292, 0},
	[16] = {16, "IQ2_XXS", 256, 66, 1}, [17] = {17, "IQ2_XS", 256, 74, 1},
	[18] = {18, "IQ3_XXS", 256, 98, 1}, [19] = {19, "IQ1_S", 256, 50, 1},
	[20] = {20, "IQ4_NL", 32, 18, 1},   [21] = {21, "IQ3_S", 256, 110, 1},
	[22] = {22, "IQ2_S", 256, 82, 1},   [23] = {23, "IQ4_XS", 256, 136, 1},
	[24] = {24, "I8", 1, 1, 0},         [25] = {25, "I16", 1, 2, 0},
	[26] = {26, "I32", 1, 4, 0},        [27] = {27, "I64", 1, 8, 0},
	[28] = {28, "F64", 1, 8, 0},        [29] = {29, "IQ1_M", 256, 56, 1},
	[30] = {30, "BF16", 1, 2, 1},       [31] = {31, "Q4_0_4_4", 0, 0, 0},
	[32] = {32, "Q4_0_4_8", 0, 0, 0},   [33] = {33, "Q4_0_8_8", 0, 0, 0},
	[34] = {34, "TQ1_0", 256, 54, 1},   [35] = {35, "TQ2_0", 256, 66, 1},
	[36] = {36, "IQ4_NL_4_4", 0, 0, 0}, [37] = {37, "IQ4_NL_4_8", 0, 0, 0},
	[38] = {38, "IQ4_NL_8_8", 0, 0, 0}, [39] = {39, "MXFP4", 32, 17, 1},
	[40] = {40, "NVFP4", 64, 36, 1},    [41] = {41, "Q1_0", 128, 18, 0},
	[42] = {42, "Q2_0", 64, 18, 0},
};

/* The 4-bit codebooks (iq4nl_values: IQ4_NL / IQ4_XS; mxfp4_values: E2M1 doubled, MXFP4 and NVFP4, whose
** scales are halved to match) are in ops/quant_grids.h with the grids, shared with the GPU kernels. */

/* Table lookup guarded against any int a hostile file can hold. */
const QuantType *quant_type(int type)
{
	if (type < 0 || type >= QT_COUNT)
		return NULL;
	return &types[type];
}

/* Names go into error messages, so this never returns NULL. */
const char *quant_type_name(int type)
{
	const QuantType *t = quant_type(type);
	return t ? t->name : "unknown";
}

/* Command-line tools take type names; accept any case. */
int quant_type_from_name(const char *name)
{
	for (int i = 0; i < QT_COUNT; i++)
		if (types[i].name && !strcasecmp(types[i].name, name))
			return i;
	return -1;
}

/* Block geometry; 0 means "no geometry", which every caller treats as unusable. */
int quant_block_size(int type)
{
	const QuantType *t = quant_type(type);
	return t ? t->blck : 0;
}

size_t quant_block_bytes(int type)
{
	const QuantType *t = quant_type(type);
	return t ? (size_t)t->bytes : 0;
}

/* Row size with every failure folded into 0, so a reader can reject with one test. */
size_t quant_row_bytes(int type, int64_t n)
{
	const QuantType *t = quant_type(type);
	if (!t || !t->blck || n < 0 || n % t->blck)
		return 0;
	uint64_t blocks = (uint64_t)n / (uint64_t)t->blck;
	if (blocks > SIZE_MAX / (uint64_t)t->bytes)
		return 0;
	return (size_t)(blocks * (uint64_t)t->bytes);
}

size_t quant_dev_block_bytes(int type)
{
	return type == QT_Q6_K ? 224 : quant_block_bytes(type);
}

size_t quant_dev_row_bytes(int type, int64_t n)
{
	size_t b = quant_row_bytes(type, n);
	if (type != QT_Q8_0 && type != QT_Q4_K && type != QT_Q5_K && type != QT_Q6_K)
		return b; /* the general path reads bytes: rows as in the file */
	if (b && type == QT_Q8_0)
		return (size_t)((n + 255) / 256) * 272; /* whole superblocks (quant_dev_spread) */
	if (b && quant_dev_block_bytes(type) != quant_block_bytes(type))
		b = b / quant_block_bytes(type) * quant_dev_block_bytes(type);
	return b ? (b + 15) & ~(size_t)15 : 0;
}

/* Q8_0 on the device: each 8 blocks (256 values) as one 272-byte superblock, the same bytes regrouped so
** that the GPU's loads are aligned: the 8 scales (block j's at 2j), then quants 8c..8c+7 of block j at
** 16 + 64(j/2) + 16c + 8(j%2) (ops/quant.cuh q8_piece: a tensor-core fragment reads pieces c of blocks
** 2p and 2p + 1 as one 16-byte word). A last superblock of fewer than 8 blocks keeps the missing ones'
** bytes zero. In place: superblock s takes exactly the bytes its blocks held. */
static void q8_dev_pack(uint8_t *row, int64_t nb)
{
	for (int64_t s = 0; s * 8 < nb; s++) {
		uint8_t src[272], *d = row + s * 272;
		int n = nb - s * 8 < 8 ? (int)(nb - s * 8) : 8;
		memcpy(src, d, (size_t)n * 34);
		memset(d, 0, 272);
		for (int j = 0; j < n; j++) {
			d[2 * j] = src[34 * j], d[2 * j + 1] = src[34 * j + 1];
			for (int i = 0; i < 32; i++)
				d[16 + 64 * (j / 2) + 16 * (i / 8) + 8 * (j % 2) + i % 8] = src[34 * j + 2 + i];
		}
	}
}

/* Blocks move back to front: block j's device slot starts at or after its source, so a block is never
** overwritten before it has moved. */
void quant_dev_spread(int type, uint8_t *row, int64_t n)
{
	size_t bb = quant_block_bytes(type), db = quant_dev_block_bytes(type);
	int64_t nb = quant_row_bytes(type, n) / (bb ? bb : 1);
	if (type == QT_Q8_0) {
		q8_dev_pack(row, nb);
		return;
	}
	if (db == bb)
		return;
	for (int64_t j = nb - 1; j >= 0; j--) {
		memmove(row + (size_t)j * db, row + (size_t)j * bb, bb);
		memset(row + (size_t)j * db + bb, 0, db - bb);
	}
}

int quant_supported(int type)
{
	const QuantType *t = quant_type(type);
	return t && t->dequant;
}

/* Little-endian field readers: blocks are packed and may sit at any byte address. */
static uint16_t rd16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t rd32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static float from_bits(uint32_t u)
{
	float f;
	memcpy(&f, &u, 4);
	return f;
}

/* Exact half -> float; NaNs come out quiet with their payload, as the F16C instruction gives them. */
float quant_f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16;
	uint32_t exp = h >> 10 & 0x1f, man = h & 0x3ff;
	if (exp == 0x1f)
		return from_bits(sign | 0x7f800000 | man << 13 | (man ? 0x00400000u : 0));
	if (exp == 0) {
		float v = (float)man * 0x1p-24f;   /* exact: man < 2^10 */
		return sign ? -v : v;
	}
	return from_bits(sign | (exp + 112) << 23 | man << 13);
}

/* float -> half with round-to-nearest-even, as ggml's GGML_FP32_TO_FP16 (hardware or software). */
uint16_t quant_f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	x &= 0x7fffffff;
	if (x > 0x7f800000)
		return sign | 0x7e00;
	if (x >= 0x477ff000)               /* 65520 and up round to infinity */
		return sign | 0x7c00;
	if (x < 0x38800000) {              /* below 2^-14: a subnormal half or zero */
		uint32_t e = x >> 23;
		if (e < 102)
			return sign;
		uint32_t m = (x & 0x7fffff) | 0x800000, shift = 126 - e;
		uint32_t r = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
		if (rem > half || (rem == half && (r & 1)))
			r++;
		return (uint16_t)(sign | r);
	}
	uint32_t r = x - (112u << 23);
	r += 0xfff + (r >> 13 & 1);
	return (uint16_t)(sign | r >> 13);
}

/* ---- one function per block format; each writes one block of its type ---- */

static void dq_q4_0(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint8_t *qs = b + 2;
	for (int j = 0; j < 16; j++) {
		y[j] = (float)((qs[j] & 0xf) - 8) * d;
		y[j + 16] = (float)((qs[j] >> 4) - 8) * d;
	}
}

static void dq_q4_1(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b)), m = quant_f16_to_f32(rd16(b + 2));
	const uint8_t *qs = b + 4;
	for (int j = 0; j < 16; j++) {
		y[j] = (float)(qs[j] & 0xf) * d + m;
		y[j + 16] = (float)(qs[j] >> 4) * d + m;
	}
}

/* Q5_0/Q5_1: bit x of the 32-bit qh word is the fifth bit of element x. */
static void dq_q5_0(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint32_t qh = rd32(b + 2);
	const uint8_t *qs = b + 6;
	for (int j = 0; j < 16; j++) {
		int lo = (int)((qs[j] & 0xf) | (qh >> j & 1) << 4);
		int hi = (int)((qs[j] >> 4) | (qh >> (j + 16) & 1) << 4);
		y[j] = (float)(lo - 16) * d;
		y[j + 16] = (float)(hi - 16) * d;
	}
}

static void dq_q5_1(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b)), m = quant_f16_to_f32(rd16(b + 2));
	const uint32_t qh = rd32(b + 4);
	const uint8_t *qs = b + 8;
	for (int j = 0; j < 16; j++) {
		int lo = (int)((qs[j] & 0xf) | (qh >> j & 1) << 4);
		int hi = (int)((qs[j] >> 4) | (qh >> (j + 16) & 1) << 4);
		y[j] = (float)lo * d + m;
		y[j + 16] = (float)hi * d + m;
	}
}

static void dq_q8_0(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	for (int j = 0; j < 32; j++)
		y[j] = (float)(int8_t)b[2 + j] * d;
}

static void dq_iq4_nl(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint8_t *qs = b + 2;
	for (int j = 0; j < 16; j++) {
		y[j] = d * (float)iq4nl_values[qs[j] & 0xf];
		y[j + 16] = d * (float)iq4nl_values[qs[j] >> 4];
	}
}

/* MXFP4: the E8M0 byte e gives the scale 2^(e-128) (half the E8M0 value; the codebook is doubled). */
static void dq_mxfp4(const uint8_t *b, float *y)
{
	const uint8_t e = b[0];
	const float d = from_bits(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
	const uint8_t *qs = b + 1;
	for (int j = 0; j < 16; j++) {
		y[j] = (float)mxfp4_values[qs[j] & 0xf] * d;
		y[j + 16] = (float)mxfp4_values[qs[j] >> 4] * d;
	}
}

/* Q2_K: 16 groups of 16; a scale byte holds a 4-bit scale (low) and a 4-bit min (high). The 2-bit
** quants of 128 elements share 32 bytes: element 32*s + l of a half is bits 2s..2s+1 of byte l. */
static void dq_q2_k(const uint8_t *b, float *y)
{
	const uint8_t *sc = b, *qs = b + 16;
	const float d = quant_f16_to_f32(rd16(b + 80)), dmin = quant_f16_to_f32(rd16(b + 82));
	for (int g = 0; g < 16; g++) {
		const int half = g / 8, shift = 2 * ((g % 8) / 2), off = 16 * (g % 2);
		const float dl = d * (float)(sc[g] & 0xf), ml = dmin * (float)(sc[g] >> 4);
		const uint8_t *q = qs + 32 * half + off;
		for (int l = 0; l < 16; l++)
			y[16 * g + l] = dl * (float)((q[l] >> shift) & 3) - ml;
	}
}

/* Q3_K: 16 groups of 16 with signed 6-bit scales packed into 12 bytes (low nibbles in bytes 0-7,
** high 2-bit pairs in bytes 8-11); the third quant bit comes from hmask, inverted (set means +0). */
static void dq_q3_k(const uint8_t *b, float *y)
{
	const uint8_t *hm = b, *qs = b + 32, *s = b + 96;
	const float d = quant_f16_to_f32(rd16(b + 108));
	for (int g = 0; g < 16; g++) {
		int lo = g < 8 ? s[g] & 0xf : s[g - 8] >> 4;
		int hi = s[8 + g % 4] >> (2 * (g / 4)) & 3;
		const float dl = d * (float)((lo | hi << 4) - 32);
		const int half = g / 8, shift = 2 * ((g % 8) / 2), off = 16 * (g % 2);
		const uint8_t bit = (uint8_t)(1u << (g / 2));
		const uint8_t *q = qs + 32 * half + off, *h = hm + off;
		for (int l = 0; l < 16; l++) {
			int v = ((q[l] >> shift) & 3) - ((h[l] & bit) ? 0 : 4);
			y[16 * g + l] = dl * (float)v;
		}
	}
}

/* The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block, from its 12 packed bytes. */
static void scale_min_k4(int j, const uint8_t *s, int *sc, int *m)
{
	if (j < 4) {
		*sc = s[j] & 63;
		*m = s[j + 4] & 63;
	} else {
		*sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
		*m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
	}
}

/* Q4_K: 8 sub-blocks of 32; sub-blocks 2p and 2p+1 share 32 bytes (low, then high nibbles). */
static void dq_q4_k(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b)), dmin = quant_f16_to_f32(rd16(b + 2));
	const uint8_t *s = b + 4, *qs = b + 16;
	for (int j = 0; j < 8; j++) {
		int sc, m;
		scale_min_k4(j, s, &sc, &m);
		const float dl = d * (float)sc, ml = dmin * (float)m;
		const uint8_t *q = qs + 32 * (j / 2);
		const int shift = 4 * (j % 2);
		for (int l = 0; l < 32; l++)
			y[32 * j + l] = dl * (float)((q[l] >> shift) & 0xf) - ml;
	}
}

/* Q5_K: Q4_K plus a fifth bit, bit j of qh[l] for element l of sub-block j. */
static void dq_q5_k(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b)), dmin = quant_f16_to_f32(rd16(b + 2));
	const uint8_t *s = b + 4, *qh = b + 16, *qs = b + 48;
	for (int j = 0; j < 8; j++) {
		int sc, m;
		scale_min_k4(j, s, &sc, &m);
		const float dl = d * (float)sc, ml = dmin * (float)m;
		const uint8_t *q = qs + 32 * (j / 2);
		const int shift = 4 * (j % 2);
		for (int l = 0; l < 32; l++) {
			int v = ((q[l] >> shift) & 0xf) + ((qh[l] >> j & 1) ? 16 : 0);
			y[32 * j + l] = dl * (float)v - ml;
		}
	}
}

/* Q6_K: two halves of 128; in a half, element 32*k + l takes a nibble of ql[l + 32*(k%2)] (low for
** k < 2) and bits 2k..2k+1 of qh[l]; 16 signed 8-bit scales, one per 16 elements. */
static void dq_q6_k(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b + 208));
	for (int h = 0; h < 2; h++) {
		const uint8_t *ql = b + 64 * h, *qh = b + 128 + 32 * h;
		const int8_t *sc = (const int8_t *)(b + 192) + 8 * h;
		float *yh = y + 128 * h;
		for (int k = 0; k < 4; k++) {
			for (int l = 0; l < 32; l++) {
				int lo = (ql[l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xf;
				int q = (lo | ((qh[l] >> (2 * k)) & 3) << 4) - 32;
				yh[32 * k + l] = d * (float)sc[2 * k + l / 16] * (float)q;
			}
		}
	}
}

/* IQ4_XS: 8 sub-blocks of 32 with 6-bit scales (4 low bits in scales_l nibbles, 2 high in scales_h). */
static void dq_iq4_xs(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint16_t sh = rd16(b + 2);
	const uint8_t *sl = b + 4, *qs = b + 8;
	for (int j = 0; j < 8; j++) {
		int ls = ((sl[j / 2] >> (4 * (j % 2))) & 0xf) | ((sh >> (2 * j)) & 3) << 4;
		const float dl = d * (float)(ls - 32);
		const uint8_t *q = qs + 16 * j;
		for (int l = 0; l < 16; l++) {
			y[32 * j + l] = dl * (float)iq4nl_values[q[l] & 0xf];
			y[32 * j + l + 16] = dl * (float)iq4nl_values[q[l] >> 4];
		}
	}
}

/* ---- the grid types (IQ1/IQ2/IQ3): each 8 (IQ3: 4) values are one row of a codebook in
** ops/quant_grids.h times a scale, with a sign per value ---- */

/* n values of one grid row (byte j = magnitude of value j) times db, value j negated where bit j of
** signs is set; the product order is ggml's (scale * magnitude, then the sign). */
static void put_grid(float *y, int n, float db, uint64_t row, unsigned signs)
{
	for (int j = 0; j < n; j++)
		y[j] = db * (float)(row >> 8 * j & 0xff) * ((signs >> j & 1) ? -1.0f : 1.0f);
}

/* IQ2_XXS: 8 groups of 32 in 8 bytes each: 4 grid indices (one per 8 values), then a 32-bit word of
** four 7-bit sign indices (bits 0-27, through iq_ksigns) and the group's 4-bit scale (bits 28-31). */
static void dq_iq2_xxs(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	for (int g = 0; g < 8; g++) {
		const uint8_t *q = b + 2 + 8 * g;
		const uint32_t aux = rd32(q + 4);
		const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
		for (int l = 0; l < 4; l++)
			put_grid(y + 32 * g + 8 * l, 8, db, iq2xxs_grid[q[l]], iq_ksigns[aux >> 7 * l & 127]);
	}
}

/* IQ2_XS: 32 16-bit words (9-bit grid index, 7-bit sign index), then 8 scale bytes whose nibbles
** scale the two halves (16 values each) of a group of 32. */
static void dq_iq2_xs(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint8_t *sc = b + 66;
	for (int g = 0; g < 8; g++) {
		const float db[2] = {d * (0.5f + (float)(sc[g] & 0xf)) * 0.25f, d * (0.5f + (float)(sc[g] >> 4)) * 0.25f};
		for (int l = 0; l < 4; l++) {
			const uint16_t v = rd16(b + 2 + 2 * (4 * g + l));
			put_grid(y + 32 * g + 8 * l, 8, db[l / 2], iq2xs_grid[v & 511], iq_ksigns[v >> 9]);
		}
	}
}

/* IQ2_S: 32 low index bytes, 32 explicit sign bytes, 8 bytes of 2-bit index tops (bits 2l..2l+1 of
** byte g for row l of group g: 10-bit indices), 8 scale bytes as in IQ2_XS. */
static void dq_iq2_s(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint8_t *qs = b + 2, *signs = b + 34, *qh = b + 66, *sc = b + 74;
	for (int g = 0; g < 8; g++) {
		const float db[2] = {d * (0.5f + (float)(sc[g] & 0xf)) * 0.25f, d * (0.5f + (float)(sc[g] >> 4)) * 0.25f};
		for (int l = 0; l < 4; l++) {
			const int idx = qs[4 * g + l] | (qh[g] >> 2 * l & 3) << 8;
			put_grid(y + 32 * g + 8 * l, 8, db[l / 2], iq2s_grid[idx], signs[4 * g + l]);
		}
	}
}

/* IQ3_XXS: 64 grid index bytes (one per 4 values), then per group of 32 a 32-bit word laid out as in
** IQ2_XXS (four 7-bit sign indices, 4-bit scale); one sign byte covers two rows of 4. */
static void dq_iq3_xxs(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	for (int g = 0; g < 8; g++) {
		const uint8_t *q = b + 2 + 8 * g;
		const uint32_t aux = rd32(b + 66 + 4 * g);
		const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
		for (int l = 0; l < 4; l++) {
			const unsigned s = iq_ksigns[aux >> 7 * l & 127];
			put_grid(y + 32 * g + 8 * l, 4, db, iq3xxs_grid[q[2 * l]], s);
			put_grid(y + 32 * g + 8 * l + 4, 4, db, iq3xxs_grid[q[2 * l + 1]], s >> 4);
		}
	}
}

/* IQ3_S: 64 low index bytes, 8 bytes of index tops (bit k of byte g for index k of group g: 9-bit
** indices), 32 explicit sign bytes, 4 scale bytes (a nibble per group: odd scale 1 + 2s). */
static void dq_iq3_s(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint8_t *qs = b + 2, *qh = b + 66, *signs = b + 74, *sc = b + 106;
	for (int g = 0; g < 8; g++) {
		const float db = d * (float)(1 + 2 * (sc[g / 2] >> 4 * (g % 2) & 0xf));
		for (int l = 0; l < 4; l++) {
			const int i0 = qs[8 * g + 2 * l] | (qh[g] >> 2 * l & 1) << 8;
			const int i1 = qs[8 * g + 2 * l + 1] | (qh[g] >> (2 * l + 1) & 1) << 8;
			const unsigned s = signs[4 * g + l];
			put_grid(y + 32 * g + 8 * l, 4, db, iq3s_grid[i0], s);
			put_grid(y + 32 * g + 8 * l + 4, 4, db, iq3s_grid[i1], s >> 4);
		}
	}
}

/* 8 values of an IQ1 grid row (int8 -1/0/+1 per byte), each shifted by delta, times dl. */
static void put_iq1(float *y, float dl, uint64_t row, float delta)
{
	for (int j = 0; j < 8; j++)
		y[j] = dl * ((float)(int8_t)(row >> 8 * j & 0xff) + delta);
}

/* IQ1_S: 32 low index bytes, then per group of 32 a 16-bit word: four 3-bit index tops (11-bit
** indices), a 3-bit odd scale 2s + 1 (bits 12-14) and the delta's sign (bit 15). */
static void dq_iq1_s(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b));
	const uint8_t *qs = b + 2;
	for (int g = 0; g < 8; g++) {
		const uint16_t h = rd16(b + 34 + 2 * g);
		const float dl = d * (float)(2 * (h >> 12 & 7) + 1);
		const float delta = (h & 0x8000) ? -IQ1_DELTA : IQ1_DELTA;
		for (int l = 0; l < 4; l++)
			put_iq1(y + 32 * g + 8 * l, dl, iq1s_grid[qs[4 * g + l] | (h >> 3 * l & 7) << 8], delta);
	}
}

/* IQ1_M: no block-level half; its 16 bits are the top nibbles of the four 16-bit scale words (word k
** gives bits 4k..4k+3). 32 low index bytes; a qh nibble per row (3-bit index top, delta sign); a 3-bit
** odd scale per 16 values (word g/2, bits 6(g%2) and 6(g%2)+3 for the halves of group g). */
static void dq_iq1_m(const uint8_t *b, float *y)
{
	const uint8_t *qs = b, *qh = b + 32;
	uint16_t sc[4];
	for (int k = 0; k < 4; k++)
		sc[k] = rd16(b + 48 + 2 * k);
	const float d = quant_f16_to_f32((uint16_t)(sc[0] >> 12 | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) |
	                                            (sc[3] & 0xf000)));
	for (int g = 0; g < 8; g++) {
		const int shift = 6 * (g % 2);
		const float dl[2] = {d * (float)(2 * (sc[g / 2] >> shift & 7) + 1),
		                     d * (float)(2 * (sc[g / 2] >> (shift + 3) & 7) + 1)};
		for (int l = 0; l < 4; l++) {
			const int h = qh[2 * g + l / 2] >> 4 * (l % 2);
			const float delta = (h & 8) ? -IQ1_DELTA : IQ1_DELTA;
			put_iq1(y + 32 * g + 8 * l, dl[l / 2], iq1s_grid[qs[4 * g + l] | (h & 7) << 8], delta);
		}
	}
}

/* ---- ternary (TQ) and NVFP4 ---- */

/* One TQ1_0 byte holds 5 (qh: 4) trits as a base-3 fraction of 256: trit n of byte q is the top
** base-3 digit of q * 3^n taken mod 256, i.e. ((q * 3^n mod 256) * 3) >> 8, stored +1. */
static float tq1_trit(uint8_t q, int n, float d)
{
	static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
	const uint8_t v = (uint8_t)(q * pow3[n]);
	return (float)(((uint16_t)v * 3 >> 8) - 1) * d;
}

/* TQ1_0: 48 bytes of 5 trits (the first 32 give values 32n + m, the next 16 give 160 + 16n + m), 4
** bytes of 4 trits (240 + 4n + j), then the half scale. */
static void dq_tq1_0(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b + 52));
	for (int n = 0; n < 5; n++)
		for (int m = 0; m < 32; m++)
			y[32 * n + m] = tq1_trit(b[m], n, d);
	for (int n = 0; n < 5; n++)
		for (int m = 0; m < 16; m++)
			y[160 + 16 * n + m] = tq1_trit(b[32 + m], n, d);
	for (int n = 0; n < 4; n++)
		for (int j = 0; j < 4; j++)
			y[240 + 4 * n + j] = tq1_trit(b[48 + j], n, d);
}

/* TQ2_0: 64 bytes of four 2-bit values q (value q - 1): value 128h + 32l + m is bits 2l..2l+1 of
** byte 32h + m; then the half scale. */
static void dq_tq2_0(const uint8_t *b, float *y)
{
	const float d = quant_f16_to_f32(rd16(b + 64));
	for (int h = 0; h < 2; h++)
		for (int l = 0; l < 4; l++)
			for (int m = 0; m < 32; m++)
				y[128 * h + 32 * l + m] = (float)((b[32 * h + m] >> 2 * l & 3) - 1) * d;
}

/* The unsigned E4M3 scale of NVFP4, halved (the E2M1 codebook is doubled, as for MXFP4): exponent
** bits 3-6 with bias 7, mantissa bits 0-2, bit 7 ignored; 0x00 and 0x7f (E4M3's NaN) give 0. */
static float ue4m3_half(uint8_t x)
{
	if (x == 0 || x == 0x7f)
		return 0.0f;
	const uint32_t e = x >> 3 & 0xf, m = x & 7;
	if (e == 0)
		return (float)m * 0x1p-10f;                        /* subnormal: m * 2^-9, halved */
	return from_bits((e + 119) << 23 | m << 20);           /* (1 + m/8) * 2^(e-7), halved */
}

/* NVFP4: 64 values as 4 sub-blocks of 16, a UE4M3 scale byte each, then 32 bytes: sub-block s takes
** bytes 8s..8s+7, low nibbles its values 0-7, high nibbles 8-15. */
static void dq_nvfp4(const uint8_t *b, float *y)
{
	for (int s = 0; s < 4; s++) {
		const float d = ue4m3_half(b[s]);
		const uint8_t *q = b + 4 + 8 * s;
		for (int j = 0; j < 8; j++) {
			y[16 * s + j] = (float)mxfp4_values[q[j] & 0xf] * d;
			y[16 * s + j + 8] = (float)mxfp4_values[q[j] >> 4] * d;
		}
	}
}

/* Dispatch by type; the per-element types are converted in place, the block types block by block. */
int quant_dequant(int type, const void *src, float *dst, size_t n)
{
	const QuantType *t = quant_type(type);
	if (!t || !t->dequant || n % (size_t)t->blck)
		return -1;
	const uint8_t *p = src;
	switch (type) {
	case QT_F32:
		memcpy(dst, src, n * 4);
		return 0;
	case QT_F16:
		for (size_t i = 0; i < n; i++)
			dst[i] = quant_f16_to_f32(rd16(p + 2 * i));
		return 0;
	case QT_BF16:
		for (size_t i = 0; i < n; i++)
			dst[i] = from_bits((uint32_t)rd16(p + 2 * i) << 16);
		return 0;
	default:
		break;
	}
	void (*fn)(const uint8_t *, float *);
	switch (type) {
	case QT_Q4_0: fn = dq_q4_0; break;
	case QT_Q4_1: fn = dq_q4_1; break;
	case QT_Q5_0: fn = dq_q5_0; break;
	case QT_Q5_1: fn = dq_q5_1; break;
	case QT_Q8_0: fn = dq_q8_0; break;
	case QT_Q2_K: fn = dq_q2_k; break;
	case QT_Q3_K: fn = dq_q3_k; break;
	case QT_Q4_K: fn = dq_q4_k; break;
	case QT_Q5_K: fn = dq_q5_k; break;
	case QT_Q6_K: fn = dq_q6_k; break;
	case QT_IQ4_NL: fn = dq_iq4_nl; break;
	case QT_IQ4_XS: fn = dq_iq4_xs; break;
	case QT_MXFP4: fn = dq_mxfp4; break;
	case QT_IQ2_XXS: fn = dq_iq2_xxs; break;
	case QT_IQ2_XS: fn = dq_iq2_xs; break;
	case QT_IQ2_S: fn = dq_iq2_s; break;
	case QT_IQ3_XXS: fn = dq_iq3_xxs; break;
	case QT_IQ3_S: fn = dq_iq3_s; break;
	case QT_IQ1_S: fn = dq_iq1_s; break;
	case QT_IQ1_M: fn = dq_iq1_m; break;
	case QT_TQ1_0: fn = dq_tq1_0; break;
	case QT_TQ2_0: fn = dq_tq2_0; break;
	case QT_NVFP4: fn = dq_nvfp4; break;
	default: return -1;
	}
	size_t nb = n / (size_t)t->blck;
	for (size_t i = 0; i < nb; i++)
		fn(p + i * (size_t)t->bytes, dst + i * (size_t)t->blck);
	return 0;
}

/* Q8_0 as ggml's quantize_row_q8_0_ref rounds it: scale amax/127 stored as half, quants
** roundf(x / scale) computed through the float reciprocal of the unrounded scale. */
size_t quant_q8_0(const float *src, void *dst, size_t n)
{
	if (n % 32)
		return 0;
	uint8_t *out = dst;
	for (size_t i = 0; i < n / 32; i++) {
		const float *x = src + 32 * i;
		uint8_t *blk = out + 34 * i;
		float amax = 0.0f;
		for (int j = 0; j < 32; j++) {
			float a = fabsf(x[j]);
			amax = amax > a ? amax : a;
		}
		const float d = amax / 127.0f;
		const float inv = d != 0.0f ? 1.0f / d : 0.0f;
		uint16_t h = quant_f32_to_f16(d);
		blk[0] = (uint8_t)h;
		blk[1] = (uint8_t)(h >> 8);
		for (int j = 0; j < 32; j++)
			blk[2 + j] = (uint8_t)(int8_t)roundf(x[j] * inv);
	}
	return n / 32 * 34;
}

/* Round to the nearest integer, halves away from zero, clamped to [lo, hi]. */
static int nearest(float v, int lo, int hi)
{
	float r = roundf(v);
	return r < (float)lo ? lo : r > (float)hi ? hi : (int)r;
}

static void put16(uint8_t *p, uint16_t h)
{
	p[0] = (uint8_t)h;
	p[1] = (uint8_t)(h >> 8);
}

/*
** Q4_K and Q5_K, one 256-value block: each sub-block of 32 gets the range [min(0, lo), hi] in 2^bits - 1
** steps; the block's d and dmin are the largest step and offset over 63 (stored as half, and the 6-bit
** sub-block scales computed against the stored halves); then each value is rounded to its step. Not
** ggml's search for the best scales, only its block layout (ops/quant.c dq_q4_k / dq_q5_k read it).
*/
static void quant_k_block(const float *x, uint8_t *b, int bits)
{
	const int top = (1 << bits) - 1;
	float step[8], off[8], smax = 0, omax = 0;
	for (int j = 0; j < 8; j++) {
		float lo = 0, hi = 0;
		for (int l = 0; l < 32; l++) {
			float v = x[32 * j + l];
			lo = v < lo ? v : lo;
			hi = v > hi ? v : hi;
		}
		step[j] = (hi - lo) / (float)top, off[j] = -lo;
		smax = step[j] > smax ? step[j] : smax;
		omax = off[j] > omax ? off[j] : omax;
	}
	uint16_t hd = quant_f32_to_f16(smax / 63), hm = quant_f32_to_f16(omax / 63);
	float d = quant_f16_to_f32(hd), dmin = quant_f16_to_f32(hm);
	int sc[8], m[8];
	for (int j = 0; j < 8; j++) {
		sc[j] = d > 0 ? nearest(step[j] / d, 0, 63) : 0;
		m[j] = dmin > 0 ? nearest(off[j] / dmin, 0, 63) : 0;
	}
	memset(b, 0, bits == 4 ? 144 : 176);
	put16(b, hd), put16(b + 2, hm);
	uint8_t *s = b + 4, *qh = b + 16, *qs = b + (bits == 4 ? 16 : 48);
	for (int j = 0; j < 4; j++) {
		s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
		s[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
		s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
	}
	for (int j = 0; j < 8; j++) {
		float dl = d * (float)sc[j], ml = dmin * (float)m[j];
		for (int l = 0; l < 32; l++) {
			int q = dl > 0 ? nearest((x[32 * j + l] + ml) / dl, 0, top) : 0;
			qs[32 * (j / 2) + l] |= (uint8_t)((q & 15) << (4 * (j % 2)));
			if (bits == 5 && q > 15)
				qh[l] |= (uint8_t)(1u << j);
		}
	}
}

size_t quant_q4_k(const float *src, void *dst, size_t n)
{
	if (n % 256)
		return 0;
	for (size_t i = 0; i < n / 256; i++)
		quant_k_block(src + 256 * i, (uint8_t *)dst + 144 * i, 4);
	return n / 256 * 144;
}

size_t quant_q5_k(const float *src, void *dst, size_t n)
{
	if (n % 256)
		return 0;
	for (size_t i = 0; i < n / 256; i++)
		quant_k_block(src + 256 * i, (uint8_t *)dst + 176 * i, 5);
	return n / 256 * 176;
}

/*
** Q6_K, one 256-value block: 16 groups of 16, each with the signed step max|x|/31 as an 8-bit scale of
** the block's d (the largest step over 127, stored as half); values rounded to [-32, 31] steps and stored
** +32 as 4 low bits (ql) and 2 high bits (qh), in dq_q6_k's layout.
*/
size_t quant_q6_k(const float *src, void *dst, size_t n)
{
	if (n % 256)
		return 0;
	for (size_t i = 0; i < n / 256; i++) {
		const float *x = src + 256 * i;
		uint8_t *b = (uint8_t *)dst + 210 * i;
		float step[16], smax = 0;
		for (int g = 0; g < 16; g++) {
			float a = 0;
			for (int l = 0; l < 16; l++)
				a = fabsf(x[16 * g + l]) > a ? fabsf(x[16 * g + l]) : a;
			step[g] = a / 31;
			smax = step[g] > smax ? step[g] : smax;
		}
		uint16_t hd = quant_f32_to_f16(smax / 127);
		float d = quant_f16_to_f32(hd);
		memset(b, 0, 210);
		put16(b + 208, hd);
		for (int g = 0; g < 16; g++) {
			int sc = d > 0 ? nearest(step[g] / d, -128, 127) : 0;
			b[192 + g] = (uint8_t)(int8_t)sc;
			float dl = d * (float)sc;
			for (int l = 0; l < 16; l++) {
				int e = 16 * g + l, h = e / 128, k = (e % 128) / 32, ll = e % 32;
				int q = (dl != 0 ? nearest(x[e] / dl, -32, 31) : 0) + 32;
				b[64 * h + ll + 32 * (k % 2)] |= (uint8_t)((q & 15) << (4 * (k / 2)));
				b[128 + 32 * h + ll] |= (uint8_t)((q >> 4) << (2 * k));
			}
		}
	}
	return n / 256 * 210;
}

/* The block size of a type the quant.cuh kernels read, or 0 (the float types, and ids without kernels). */
int quant_gpu_block(int qtype)
{
	switch (qtype) {
	case QT_Q4_0: case QT_Q4_1: case QT_Q5_0: case QT_Q5_1: case QT_Q8_0: case QT_Q2_K: case QT_Q3_K: case QT_Q4_K:
	case QT_Q5_K: case QT_Q6_K: case QT_IQ2_XXS: case QT_IQ2_XS: case QT_IQ3_XXS: case QT_IQ1_S: case QT_IQ4_NL:
	case QT_IQ3_S: case QT_IQ2_S: case QT_IQ4_XS: case QT_IQ1_M: case QT_TQ1_0: case QT_TQ2_0: case QT_MXFP4:
	case QT_NVFP4: return quant_block_size(qtype);
	default: return 0;
	}
}
