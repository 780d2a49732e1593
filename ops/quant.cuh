/*
** ops/quant.cuh — kernels that read GGUF block-quantized weights as they are stored, appended to
** kernels.cuh and fused.cuh by glmc and built from their helpers. The template parameter QT is the ggml
** type id: Q8_0, Q4_K, Q5_K and Q6_K (8, 12, 13, 14) have the tuned paths described here; every other
** block type glmc reads (QGen) has its own loads and decoders into the same runs (see "The other GGUF block
** types") and its exact decoder qd_val.
**
** Device layout: a quantized [rows, K] weight keeps its GGUF blocks byte for byte, each row padded with
** zero bytes to a multiple of 16 bytes (q_stride), so every row starts 16-byte aligned and the aligned
** K-quants (Q4_K 144 bytes, Q5_K 176) can be read with plain 16-byte loads. Q6_K's 210-byte blocks sit in
** 224-byte slots (QGeo::DEV; the 14 bytes after each are zero; glmrun moves them there at upload,
** ops/quant.c quant_dev_spread), so they start aligned too: 6.7% more bytes for Q6_K weights, against
** realigning every load in registers. Q8_0's 34-byte blocks are regrouped at upload into superblocks of
** 8 (q8_sb: 272 bytes, the same bytes as the 8 blocks; rows padded to whole superblocks): the 8 scales,
** then the quants, each block's 8-byte pieces interleaved with its neighbour's, so a lane that owns a
** block reads it in four aligned 8-byte loads and a tensor-core fragment (k_qgemv_mma) in one 16-byte
** load of two blocks.
**
** One-token GEMVs over Q4_K and Q6_K run on the tensor cores (k_qgemv_mma and the kernels after it, see
** the comment there); the FMA path below serves Q8_0, Q5_K, steps of several tokens and mixed groups.
**
** Decode GEMV (k_qgemv): the K axis is processed in units of 1024 values. In a unit each lane of a warp
** owns 32 values of one block (Q8_0: a whole block; K-quants: 8 lanes per block) as two runs of 16. A
** run's 16 quants are turned into floats with one byte permute each, by building the float's bits
** directly: for the K-quants 1 + q/128, whose dot with x is 128·(S − X) with X the run's sum of x
** (computed once per block while x is staged); for Q8_0 2^23 + (q + 128), less the constant. So no
** int-to-float conversion (a quarter-rate instruction) is needed. x is staged as float in shared
** memory, swizzled (q_xsw) so that each quarter-warp's float4 loads hit 8 distinct bank quads.
**
** Every lane keeps R rows (R weight rows read against the same x values, so each x load serves R rows)
** and the block splits K between WPR warps (an in-block split-K for short, wide matrices), summed in
** shared memory at the end.
**
** Exact dequantization (q_elem, used by the embedding lookup, the dequantize kernel and the prefill
** GEMM's tile loader) uses explicitly rounded float operations (__fmul_rn, __fsub_rn), so no FMA
** contraction can change a bit: it equals ops/quant.c, which equals ggml.
*/

/* The codebooks of the grid and 4-bit types as __device__ arrays, and the random generator's scale fields
** of the general types (glmc's kernel text carries both headers before this file, so the includes are
** for the programs that include quant.cuh). */
#ifndef GLM_QUANT_GRIDS_H
#include "quant_grids.h"
#endif
#ifndef GLM_QRAND_H
#include "qrand.h"
#endif

/* ---- block geometry: values per block, bytes per block, lanes per block in a 1024-value unit ---- */

/* UN: units a warp loads before it computes (so each lane has 8-14 16-byte loads in flight at R = 2). */
template <int QT> struct QGeo;
/* DEV: bytes of a block's slot on the device (Q6_K's 210 bytes in 224, so its blocks start 16-byte
** aligned; ops/quant.c quant_dev_block_bytes). */
template <> struct QGeo<8> { enum { BLCK = 32, BYTES = 34, DEV = 34, LPB = 1, UN = 1 }; };
template <> struct QGeo<12> { enum { BLCK = 256, BYTES = 144, DEV = 144, LPB = 8, UN = 2 }; };
template <> struct QGeo<13> { enum { BLCK = 256, BYTES = 176, DEV = 176, LPB = 8, UN = 2 }; };
template <> struct QGeo<14> { enum { BLCK = 256, BYTES = 210, DEV = 224, LPB = 8, UN = 1 }; };
/* The general types (QGen below): their GGUF blocks as they are, a lane per 32 values. UN 1: their raw
** words are 3-12 a row, yet on an H100 two units a warp were 2-12% slower for every type (bench/NOTES.md 63). */
template <> struct QGeo<2> { enum { BLCK = 32, BYTES = 18, DEV = 18, LPB = 1, UN = 1 }; };    /* Q4_0 */
template <> struct QGeo<3> { enum { BLCK = 32, BYTES = 20, DEV = 20, LPB = 1, UN = 1 }; };    /* Q4_1 */
template <> struct QGeo<6> { enum { BLCK = 32, BYTES = 22, DEV = 22, LPB = 1, UN = 1 }; };    /* Q5_0 */
template <> struct QGeo<7> { enum { BLCK = 32, BYTES = 24, DEV = 24, LPB = 1, UN = 1 }; };    /* Q5_1 */
template <> struct QGeo<10> { enum { BLCK = 256, BYTES = 84, DEV = 84, LPB = 8, UN = 1 }; };  /* Q2_K */
template <> struct QGeo<11> { enum { BLCK = 256, BYTES = 110, DEV = 110, LPB = 8, UN = 1 }; }; /* Q3_K */
template <> struct QGeo<16> { enum { BLCK = 256, BYTES = 66, DEV = 66, LPB = 8, UN = 1 }; };  /* IQ2_XXS */
template <> struct QGeo<17> { enum { BLCK = 256, BYTES = 74, DEV = 74, LPB = 8, UN = 1 }; };  /* IQ2_XS */
template <> struct QGeo<18> { enum { BLCK = 256, BYTES = 98, DEV = 98, LPB = 8, UN = 1 }; };  /* IQ3_XXS */
template <> struct QGeo<19> { enum { BLCK = 256, BYTES = 50, DEV = 50, LPB = 8, UN = 1 }; };  /* IQ1_S */
template <> struct QGeo<20> { enum { BLCK = 32, BYTES = 18, DEV = 18, LPB = 1, UN = 1 }; };   /* IQ4_NL */
template <> struct QGeo<21> { enum { BLCK = 256, BYTES = 110, DEV = 110, LPB = 8, UN = 1 }; }; /* IQ3_S */
template <> struct QGeo<22> { enum { BLCK = 256, BYTES = 82, DEV = 82, LPB = 8, UN = 1 }; };  /* IQ2_S */
template <> struct QGeo<23> { enum { BLCK = 256, BYTES = 136, DEV = 136, LPB = 8, UN = 1 }; }; /* IQ4_XS */
template <> struct QGeo<29> { enum { BLCK = 256, BYTES = 56, DEV = 56, LPB = 8, UN = 1 }; };  /* IQ1_M */
template <> struct QGeo<34> { enum { BLCK = 256, BYTES = 54, DEV = 54, LPB = 8, UN = 1 }; };  /* TQ1_0 */
template <> struct QGeo<35> { enum { BLCK = 256, BYTES = 66, DEV = 66, LPB = 8, UN = 1 }; };  /* TQ2_0 */
template <> struct QGeo<39> { enum { BLCK = 32, BYTES = 17, DEV = 17, LPB = 1, UN = 1 }; };   /* MXFP4 */
template <> struct QGeo<40> { enum { BLCK = 64, BYTES = 36, DEV = 36, LPB = 2, UN = 1 }; };   /* NVFP4 */

/* Q8_0, Q4_K, Q5_K and Q6_K have the tuned paths; every other type (the general ones) is read in words
** realigned in registers (qg_ldb below), so its rows need no alignment but their blocks' own: blocks of an
** even size start at even bytes (weights are 256-byte aligned), and their halves are read from the aligned
** word that holds them. */
template <int QT> struct QGen { enum { YES = !(QT == 8 || QT == 12 || QT == 13 || QT == 14) }; };

/* Device bytes of one row of K values: whole block slots, padded to 16 bytes; the general types' rows
** as in the file, unpadded (ops/quant.c quant_dev_row_bytes computes the same on the host). */
template <int QT> __device__ __forceinline__ long long q_stride(long long K)
{
	if (QGen<QT>::YES)
		return K / QGeo<QT>::BLCK * QGeo<QT>::BYTES;
	if (QT == 8)
		return (K + 255) / 256 * 272;
	return (K / QGeo<QT>::BLCK * QGeo<QT>::DEV + 15) & ~15LL;
}

/* IEEE half bits (a block's scale) to float: the hardware's exact widening, one cvt (to_f's special
** forming of inf and NaN payloads is not needed for a scale: any inf or NaN scale gives a NaN or inf
** result either way). */
__device__ __forceinline__ float q_h2f(unsigned bits)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	float f;
	asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)(bits & 0xffffu)));
	return f;
#else
	f16 h;
	h.x = (unsigned short)(bits & 0xffffu);
	return to_f(h);
#endif
}

/* Byte offset, within its superblock, of quants 8c..8c+7 of block j (0..7) of a Q8_0 superblock (ops/quant.c
** quant_dev_spread): block j's scale at 2j, its piece c at 16 + 64(j/2) + 16c + 8(j%2), so the pieces c of
** blocks 2p and 2p + 1 make one aligned 16-byte word. */
__device__ __forceinline__ int q8_piece(int j, int c)
{
	return 16 + 64 * (j >> 1) + 16 * c + 8 * (j & 1);
}

/* ---- loads ---- */

__device__ __forceinline__ uint4 q_ld16(const unsigned char *p)
{
	return __ldg((const uint4 *)p);
}

/* The aligned 32-bit word holding byte p. */
__device__ __forceinline__ unsigned q_ldw(const unsigned char *p)
{
	return __ldg((const unsigned *)((unsigned long long)p & ~3ull));
}

/* Byte p's value from the word q_ldw(p) returned. */
__device__ __forceinline__ unsigned q_wbyte(unsigned w, const unsigned char *p)
{
	return (w >> (8 * ((unsigned)(unsigned long long)p & 3u))) & 0xffu;
}

/* Half p's bits (p even) from the word q_ldw(p) returned. */
__device__ __forceinline__ unsigned q_whalf(unsigned w, const unsigned char *p)
{
	return ((unsigned long long)p & 2) ? w >> 16 : w & 0xffffu;
}

/*
** The staged x layout. Value k of a staged row lives at q_xsw(k): bits 2..4 of k (its float4 within a
** 32-value group) are XORed with a key taken from bits 5..7 (q_xkey). Every reader's quarter-warp then
** hits 8 distinct bank quads with float4 loads: the K-quant lanes (runs at 64p + 32i + 16(c%2), Q6_K at
** 128h + 32k + 16(c%2)), Q8_0's (a block each, runs at 32c + 16i) and the float members' (consecutive
** float4s), without rotating any lane's weights. The key depends only on bits the XOR leaves alone, so
** q_xsw is its own inverse and keeps every float4 whole.
*/
__device__ __forceinline__ int q_xkey(int k)
{
	int t = k >> 5;
	return ((t ^ t >> 1) & 1) | ((t ^ t >> 2) & 1) << 1 | (t >> 2 & 1) << 2;
}

__device__ __forceinline__ int q_xsw(int k)
{
	return k ^ q_xkey(k) << 2;
}

/* (a & b) | c in one LOP3: with two constant operands the compiler emits two. */
__device__ __forceinline__ unsigned q_andor(unsigned a, unsigned b, unsigned c)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned d;
	asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
#else
	return (a & b) | c;
#endif
}

/* (a & b) ^ c in one LOP3 (as q_andor). */
__device__ __forceinline__ unsigned q_andxor(unsigned a, unsigned b, unsigned c)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned d;
	asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
	return d;
#else
	return (a & b) ^ c;
#endif
}

/*
** Scales and mins of the sub-block pair 2p, 2p + 1 of a Q4_K/Q5_K block whose first 16 bytes are h
** (scales at 4..15), as bytes: byte 0 for 2p, byte 1 for 2p + 1. Sub-blocks 0..3 keep 6 bits at bytes
** 4 + j and 8 + j; 4..7 take 4 bits from byte 8 + j and the top two of bytes j - 4 and j. Both forms are
** made and one selected (no branch: a warp's lanes hold both halves). Why pairs: a lane's two runs are
** sub-blocks 2p and 2p + 1, whose bytes are neighbours, so one shift serves both.
*/
__device__ __forceinline__ void q_scale_min2(const uint4 &h, int p, unsigned &sc, unsigned &m)
{
	int s = 16 * (p & 1);
	unsigned y = h.y >> s, z = h.z >> s, w = h.w >> s;
	unsigned sc6 = y & 0x3F3Fu, m6 = z & 0x3F3Fu;
	unsigned sc4 = q_andor(w, 0x0F0Fu, (y >> 2) & 0x3030u);
	unsigned m4 = q_andor(w >> 4, 0x0F0Fu, (z >> 2) & 0x3030u);
	sc = p < 2 ? sc6 : sc4;
	m = p < 2 ? m6 : m4;
}

/* ---- one lane's share of a 1024-value unit: raw loads, then two runs of 16 values ---- */

/* What one lane loads of one row for one unit (per type). */
template <int QT> struct QRaw;
template <> struct QRaw<8> {
	uint2 q[4];
	unsigned dw;
};
template <> struct QRaw<12> {
	uint4 h, q;
};
template <> struct QRaw<13> {
	uint4 h, qh, q;
};
template <> struct QRaw<14> {
	uint4 ql, qh;
	unsigned s0, s1, dw;
};

/* A decoded run: 4 words of 4 prepared bytes (rotated), and the run's contribution a·S + b·X. */
struct QRun {
	unsigned v[4];
	float a, b;
};

/* Lane geometry: the lane's block within the unit (lb) and its part of the block (c). */
template <int QT> __device__ __forceinline__ int q_lb(int lane)
{
	return lane / QGeo<QT>::LPB;
}

/* Issue the loads of block bi of a row for this lane. */
__device__ __forceinline__ void q_load(QRaw<8> &r, const unsigned char *row, long long bi, int lane)
{
	(void)lane;
	const unsigned char *sb = row + (bi >> 3) * 272, *p = sb + q8_piece((int)(bi & 7), 0);
#pragma unroll
	for (int c = 0; c < 4; c++)
		r.q[c] = __ldg((const uint2 *)(p + 16 * c));
	r.dw = q_ldw(sb + 2 * (bi & 7));
}

__device__ __forceinline__ void q_load(QRaw<12> &r, const unsigned char *row, long long bi, int lane)
{
	const unsigned char *blk = row + bi * 144;
	r.h = q_ld16(blk);
	r.q = q_ld16(blk + 16 + 16 * (lane & 7));
}

__device__ __forceinline__ void q_load(QRaw<13> &r, const unsigned char *row, long long bi, int lane)
{
	const unsigned char *blk = row + bi * 176;
	int c = lane & 7;
	r.h = q_ld16(blk);
	r.qh = q_ld16(blk + 16 + 16 * (c & 1));
	r.q = q_ld16(blk + 48 + 16 * c);
}

/* Q6_K lane c = lane & 7: half h = c/4, kq = (c/2)%2, l0 = 16(c%2); it owns k in {kq, kq + 2} for l in
** [l0, l0 + 16): ql bytes 64h + 32kq + l0.., qh bytes 128 + 32h + l0.., two scales, d. */
__device__ __forceinline__ void q_load(QRaw<14> &r, const unsigned char *row, long long bi, int lane)
{
	const unsigned char *blk = row + bi * 224;
	int c = lane & 7, h = c >> 2, kq = (c >> 1) & 1, l0 = 16 * (c & 1);
	r.ql = q_ld16(blk + 64 * h + 32 * kq + l0); /* the 224-byte slots keep these aligned */
	r.qh = q_ld16(blk + 128 + 32 * h + l0);
	const unsigned char *sc = blk + 192 + 8 * h + 2 * kq + (c & 1);
	r.s0 = q_ldw(sc);
	r.s1 = q_ldw(sc + 4);
	r.dw = q_ldw(blk + 208);
}

/*
** Decode the lane's two runs. Each run gets its words prepared so that __byte_perm can make float j of
** word w in one instruction (q_run): the K-quants put the quant's byte 0x80 | q (q < 128) in the float's
** third byte under 0x3F, the float 1 + q/128, so one LOP3 (Q4_K's low nibbles) or a shift and a LOP3
** prepares 4 values. Run i's first value within the block is q_off.
*/
__device__ __forceinline__ void q_decode(const QRaw<8> &r, const unsigned char *row, long long bi, int lane,
                                         QRun (&run)[2])
{
	(void)lane;
	unsigned q[8] = {r.q[0].x, r.q[0].y, r.q[1].x, r.q[1].y, r.q[2].x, r.q[2].y, r.q[3].x, r.q[3].y};
	float d = q_h2f(q_whalf(r.dw, row + (bi >> 3) * 272 + 2 * (bi & 7)));
#pragma unroll
	for (int i = 0; i < 2; i++) {
#pragma unroll
		for (int w = 0; w < 4; w++)
			run[i].v[w] = q[4 * i + w] ^ 0x80808080u;
		run[i].a = d;
		run[i].b = 0.0f;
	}
}

/* Q4_K: lane c = lane & 7 holds qs bytes 16c..16c+15, i.e. l in [l0, l0 + 16) (l0 = 16(c%2)) of
** sub-blocks j0 = 2p (low nibbles) and j1 = 2p + 1 (high nibbles), p = c/2. */
__device__ __forceinline__ void q_decode(const QRaw<12> &r, const unsigned char *row, long long bi, int lane,
                                         QRun (&run)[2])
{
	(void)row, (void)bi;
	int p = (lane & 7) >> 1;
	float d = 128.0f * q_h2f(r.h.x), dmin = q_h2f(r.h.x >> 16);
	unsigned q[4] = {r.q.x, r.q.y, r.q.z, r.q.w}, sc, m;
	q_scale_min2(r.h, p, sc, m);
#pragma unroll
	for (int i = 0; i < 2; i++) {
#pragma unroll
		for (int w = 0; w < 4; w++)
			run[i].v[w] = q_andor(i ? q[w] >> 4 : q[w], 0x0F0F0F0Fu, 0x80808080u);
		/* 128·d·sc (d carries the 128: the same rounding as 128·(d·sc)) and dmin·m */
		float a = d * (float)(sc >> 8 * i & 0xffu);
		run[i].a = a;
		run[i].b = -(a + dmin * (float)(m >> 8 * i & 0xffu));
	}
}

/* Q5_K: as Q4_K with the fifth bit j of qh[l] (qh bytes 16(c%2)..+15, the lane's l). */
__device__ __forceinline__ void q_decode(const QRaw<13> &r, const unsigned char *row, long long bi, int lane,
                                         QRun (&run)[2])
{
	(void)row, (void)bi;
	int p = (lane & 7) >> 1;
	float d = 128.0f * q_h2f(r.h.x), dmin = q_h2f(r.h.x >> 16);
	unsigned q[4] = {r.q.x, r.q.y, r.q.z, r.q.w}, qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w}, sc, m;
	q_scale_min2(r.h, p, sc, m);
#pragma unroll
	for (int w = 0; w < 4; w++)
		qh[w] >>= 2 * p; /* bit i of each byte: the fifth bit of sub-block 2p + i */
#pragma unroll
	for (int i = 0; i < 2; i++) {
#pragma unroll
		for (int w = 0; w < 4; w++) {
			unsigned b5 = q_andor(qh[w] << (4 - i), 0x10101010u, 0x80808080u);
			run[i].v[w] = q_andor(i ? q[w] >> 4 : q[w], 0x0F0F0F0Fu, b5);
		}
		float a = d * (float)(sc >> 8 * i & 0xffu);
		run[i].a = a;
		run[i].b = -(a + dmin * (float)(m >> 8 * i & 0xffu));
	}
}

/* Q6_K: q = ql nibble | qh bits << 4 (0..63), value d·sc·(q − 32); with the float 1 + q/128 the run's
** dot is d·sc·(128(S − X) − 32X). */
__device__ __forceinline__ void q_decode(const QRaw<14> &r, const unsigned char *row, long long bi, int lane,
                                         QRun (&run)[2])
{
	const unsigned char *blk = row + bi * 224;
	int c = lane & 7, h = c >> 2, kq = (c >> 1) & 1;
	const unsigned char *sc = blk + 192 + 8 * h + 2 * kq + (c & 1);
	unsigned ql[4] = {r.ql.x, r.ql.y, r.ql.z, r.ql.w}, qh[4] = {r.qh.x, r.qh.y, r.qh.z, r.qh.w};
	float d = q_h2f(q_whalf(r.dw, blk + 208));
	int s[2] = {(int)(signed char)q_wbyte(r.s0, sc), (int)(signed char)q_wbyte(r.s1, sc + 4)};
#pragma unroll
	for (int w = 0; w < 4; w++)
		qh[w] >>= 2 * kq; /* bits 4i, 4i + 1 of each byte: the top two of k = kq + 2i */
#pragma unroll
	for (int i = 0; i < 2; i++) {
#pragma unroll
		for (int w = 0; w < 4; w++) {
			unsigned top = q_andor(i ? qh[w] : qh[w] << 4, 0x30303030u, 0x80808080u);
			run[i].v[w] = q_andor(i ? ql[w] >> 4 : ql[w], 0x0F0F0F0Fu, top);
		}
		float ds = d * (float)s[i];
		run[i].a = 128.0f * ds;
		run[i].b = -160.0f * ds;
	}
}

/* The first value of the lane's run i within its block (Q8_0: its own block; K-quants: see q_decode; the
** general types: values 32c + 16i.., c = lane % LPB). */
template <int QT> __device__ __forceinline__ int q_off(int lane, int i)
{
	int c = lane & 7;
	if (QGen<QT>::YES)
		return 32 * (lane % QGeo<QT>::LPB) + 16 * i;
	if (QT == 8)
		return 16 * i;
	if (QT == 14)
		return 128 * (c >> 2) + 32 * (((c >> 1) & 1) + 2 * i) + 16 * (c & 1);
	return 64 * (c >> 1) + 32 * i + 16 * (c & 1);
}

/* Whether a type's prepared bytes are Q8_0's 2^23 + u (q_run's Q8 form: Q8_0, IQ4_NL, IQ4_XS) rather than
** the K-quants' 1 + u/128. */
template <int QT> __device__ constexpr bool q_rep8()
{
	return QT == 8 || QT == 20 || QT == 23;
}

/*
** acc[r][t] += run r's 16 weights · x for t < tn. The run's x values are at xr (row stride kcap floats),
** its float4 w at xr + 4·(w ^ sw) (q_xsw's swizzle); X (the run's x sum) at xsr (row stride kcap/16).
** Q8 prepared bytes make 2^23 + q + 128; the others 1 + q/128 (see q_decode).
*/
template <bool Q8, int R, int TM>
__device__ __forceinline__ void q_run(float (&acc)[R][TM], const QRun *const (&run)[R], const float *xr,
                                      const float *xsr, int kcap, int tn, int sw)
{
	float wf[R][16];
#pragma unroll
	for (int r = 0; r < R; r++)
#pragma unroll
		for (int w = 0; w < 4; w++)
#pragma unroll
			for (int j = 0; j < 4; j++) {
				float f = __uint_as_float(Q8 ? __byte_perm(run[r]->v[w], 0x4B000000u, 0x7440u | j)
				                             : __byte_perm(run[r]->v[w], 0x3F000000u, 0x7044u | (j << 8)));
				wf[r][4 * w + j] = Q8 ? f - 8388736.0f : f;
			}
	int kcap16 = kcap >> 4;
#pragma unroll
	for (int t = 0; t < TM; t++) {
		if (t < tn) {
			float s[R];
#pragma unroll
			for (int r = 0; r < R; r++)
				s[r] = 0.0f;
#pragma unroll
			for (int w = 0; w < 4; w++) {
				float4 xv = *(const float4 *)(xr + t * kcap + 4 * (w ^ sw));
#pragma unroll
				for (int r = 0; r < R; r++) { /* one FMA a value */
					s[r] = fmaf(xv.x, wf[r][4 * w], s[r]);
					s[r] = fmaf(xv.y, wf[r][4 * w + 1], s[r]);
					s[r] = fmaf(xv.z, wf[r][4 * w + 2], s[r]);
					s[r] = fmaf(xv.w, wf[r][4 * w + 3], s[r]);
				}
			}
			float X = Q8 ? 0.0f : xsr[t * kcap16];
#pragma unroll
			for (int r = 0; r < R; r++)
				acc[r][t] += Q8 ? run[r]->a * s[r] : run[r]->a * s[r] + run[r]->b * X;
		}
	}
}

/*
** ---- The other GGUF block types (Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, the IQ1/IQ2/IQ3
** grid types, TQ1_0, TQ2_0, NVFP4) ----
**
** These stay in their GGUF blocks on the GPU too, byte for byte (rows as in the file, no padding, no
** slots). Two readers: qd_val (value i of a block, bit for bit ops/quant.c: the same float operations in
** the same order, each rounded explicitly so no FMA is contracted) for the exact dequantization (q_elem),
** and q_load / q_decode below, which give the GEMVs the tuned path's runs. The codebooks are
** ops/quant_grids.h's, __device__ arrays here.
*/

/* A small integer (|q| < 2^22) as float, exactly (float)q, from its bits and one add: the general path
** converts every quant, and the int-to-float instruction runs at a quarter of the FMA's rate. */
__device__ __forceinline__ float qd_f(int q)
{
	return __uint_as_float(0x4B400000u + (unsigned)q) - 12582912.0f;
}

/* The half at byte o of a block, as float. */
__device__ __forceinline__ float qd_h(const unsigned char *b, int o)
{
	return q_h2f((unsigned)b[o] | (unsigned)b[o + 1] << 8);
}

/* The 32-bit little-endian word at byte o of a block. */
__device__ __forceinline__ unsigned qd_w(const unsigned char *b, int o)
{
	return (unsigned)b[o] | (unsigned)b[o + 1] << 8 | (unsigned)b[o + 2] << 16 | (unsigned)b[o + 3] << 24;
}

/* Nibble i (0..31) of the 16 bytes at q: low nibbles are values 0..15, high ones 16..31. */
__device__ __forceinline__ int qd_nib32(const unsigned char *q, int i)
{
	return i < 16 ? q[i] & 15 : q[i - 16] >> 4;
}

/* db · magnitude, negated when the sign bit is set (ggml's order: scale times magnitude, then the sign). */
__device__ __forceinline__ float qd_grid(float db, unsigned mag, unsigned neg)
{
	float v = __fmul_rn(db, qd_f(mag));
	return neg ? -v : v;
}

/* Value i (0 <= i < the block size) of one block of type QT (ops/quant.c dq_*). */
template <int QT> __device__ __forceinline__ float qd_val(const unsigned char *b, int i);

template <> __device__ __forceinline__ float qd_val<2>(const unsigned char *b, int i) /* Q4_0 */
{
	return __fmul_rn(qd_f(qd_nib32(b + 2, i) - 8), qd_h(b, 0));
}

template <> __device__ __forceinline__ float qd_val<3>(const unsigned char *b, int i) /* Q4_1 */
{
	return __fadd_rn(__fmul_rn(qd_f(qd_nib32(b + 4, i)), qd_h(b, 0)), qd_h(b, 2));
}

template <> __device__ __forceinline__ float qd_val<6>(const unsigned char *b, int i) /* Q5_0: bit i of qh */
{
	int q = qd_nib32(b + 6, i) | ((b[2 + (i >> 3)] >> (i & 7)) & 1) << 4;
	return __fmul_rn(qd_f(q - 16), qd_h(b, 0));
}

template <> __device__ __forceinline__ float qd_val<7>(const unsigned char *b, int i) /* Q5_1 */
{
	int q = qd_nib32(b + 8, i) | ((b[4 + (i >> 3)] >> (i & 7)) & 1) << 4;
	return __fadd_rn(__fmul_rn(qd_f(q), qd_h(b, 0)), qd_h(b, 2));
}

template <> __device__ __forceinline__ float qd_val<10>(const unsigned char *b, int i) /* Q2_K */
{
	int g = i >> 4, l = i & 15, shift = 2 * ((g & 7) >> 1);
	unsigned sc = b[g];
	float dl = __fmul_rn(qd_h(b, 80), qd_f(sc & 15)), ml = __fmul_rn(qd_h(b, 82), qd_f(sc >> 4));
	int q = (b[16 + 32 * (g >> 3) + 16 * (g & 1) + l] >> shift) & 3;
	return __fsub_rn(__fmul_rn(dl, qd_f(q)), ml);
}

template <> __device__ __forceinline__ float qd_val<11>(const unsigned char *b, int i) /* Q3_K */
{
	int g = i >> 4, l = i & 15, off = 16 * (g & 1);
	const unsigned char *s = b + 96;
	int lo = g < 8 ? s[g] & 15 : s[g - 8] >> 4, hi = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
	float dl = __fmul_rn(qd_h(b, 108), qd_f((lo | hi << 4) - 32));
	int v = ((b[32 + 32 * (g >> 3) + off + l] >> (2 * ((g & 7) >> 1))) & 3) - (((b[off + l] >> (g >> 1)) & 1) ? 0 : 4);
	return __fmul_rn(dl, qd_f(v));
}

template <> __device__ __forceinline__ float qd_val<20>(const unsigned char *b, int i) /* IQ4_NL */
{
	return __fmul_rn(qd_h(b, 0), qd_f(iq4nl_values[qd_nib32(b + 2, i)]));
}

template <> __device__ __forceinline__ float qd_val<23>(const unsigned char *b, int i) /* IQ4_XS */
{
	int j = i >> 5;
	unsigned sh = (unsigned)b[2] | (unsigned)b[3] << 8;
	int ls = ((b[4 + (j >> 1)] >> (4 * (j & 1))) & 15) | ((sh >> (2 * j)) & 3) << 4;
	float dl = __fmul_rn(qd_h(b, 0), qd_f(ls - 32));
	return __fmul_rn(dl, qd_f(iq4nl_values[qd_nib32(b + 8 + 16 * j, i & 31)]));
}

template <> __device__ __forceinline__ float qd_val<39>(const unsigned char *b, int i) /* MXFP4: E8M0 scale, halved */
{
	unsigned e = b[0];
	float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
	return __fmul_rn(qd_f(mxfp4_values[qd_nib32(b + 1, i)]), d);
}

template <> __device__ __forceinline__ float qd_val<16>(const unsigned char *b, int i) /* IQ2_XXS */
{
	int g = i >> 5, l = (i >> 3) & 3, j = i & 7;
	const unsigned char *q = b + 2 + 8 * g;
	unsigned aux = qd_w(q, 4);
	float db = __fmul_rn(__fmul_rn(qd_h(b, 0), __fadd_rn(0.5f, qd_f(aux >> 28))), 0.25f);
	return qd_grid(db, (unsigned)(iq2xxs_grid[q[l]] >> 8 * j) & 0xff, (iq_ksigns[(aux >> 7 * l) & 127] >> j) & 1);
}

template <> __device__ __forceinline__ float qd_val<17>(const unsigned char *b, int i) /* IQ2_XS */
{
	int g = i >> 5, l = (i >> 3) & 3, j = i & 7;
	unsigned sc = b[66 + g], v = (unsigned)b[2 + 2 * (4 * g + l)] | (unsigned)b[3 + 2 * (4 * g + l)] << 8;
	float db = __fmul_rn(__fmul_rn(qd_h(b, 0), __fadd_rn(0.5f, qd_f(l < 2 ? sc & 15 : sc >> 4))), 0.25f);
	return qd_grid(db, (unsigned)(iq2xs_grid[v & 511] >> 8 * j) & 0xff, (iq_ksigns[v >> 9] >> j) & 1);
}

template <> __device__ __forceinline__ float qd_val<22>(const unsigned char *b, int i) /* IQ2_S */
{
	int g = i >> 5, l = (i >> 3) & 3, j = i & 7;
	unsigned sc = b[74 + g];
	float db = __fmul_rn(__fmul_rn(qd_h(b, 0), __fadd_rn(0.5f, qd_f(l < 2 ? sc & 15 : sc >> 4))), 0.25f);
	int idx = b[2 + 4 * g + l] | ((b[66 + g] >> 2 * l) & 3) << 8;
	return qd_grid(db, (unsigned)(iq2s_grid[idx] >> 8 * j) & 0xff, (b[34 + 4 * g + l] >> j) & 1);
}

template <> __device__ __forceinline__ float qd_val<18>(const unsigned char *b, int i) /* IQ3_XXS */
{
	int g = i >> 5, l = (i >> 3) & 3, h = (i >> 2) & 1, j = i & 3;
	unsigned aux = qd_w(b, 66 + 4 * g);
	float db = __fmul_rn(__fmul_rn(qd_h(b, 0), __fadd_rn(0.5f, qd_f(aux >> 28))), 0.5f);
	unsigned s = iq_ksigns[(aux >> 7 * l) & 127];
	return qd_grid(db, (iq3xxs_grid[b[2 + 8 * g + 2 * l + h]] >> 8 * j) & 0xff, (s >> (4 * h + j)) & 1);
}

template <> __device__ __forceinline__ float qd_val<21>(const unsigned char *b, int i) /* IQ3_S */
{
	int g = i >> 5, l = (i >> 3) & 3, h = (i >> 2) & 1, j = i & 3;
	float db = __fmul_rn(qd_h(b, 0), qd_f(1 + 2 * ((b[106 + (g >> 1)] >> 4 * (g & 1)) & 15)));
	int idx = b[2 + 8 * g + 2 * l + h] | ((b[66 + g] >> (2 * l + h)) & 1) << 8;
	return qd_grid(db, (iq3s_grid[idx] >> 8 * j) & 0xff, (b[74 + 4 * g + l] >> (4 * h + j)) & 1);
}

/* 8 IQ1 grid values: element j of row, shifted by delta, times dl. */
__device__ __forceinline__ float qd_iq1(float dl, unsigned long long row, int j, float delta)
{
	return __fmul_rn(dl, __fadd_rn(qd_f((signed char)((row >> 8 * j) & 0xff)), delta));
}

template <> __device__ __forceinline__ float qd_val<19>(const unsigned char *b, int i) /* IQ1_S */
{
	int g = i >> 5, l = (i >> 3) & 3;
	unsigned h = (unsigned)b[34 + 2 * g] | (unsigned)b[35 + 2 * g] << 8;
	float dl = __fmul_rn(qd_h(b, 0), qd_f(2 * ((h >> 12) & 7) + 1));
	return qd_iq1(dl, iq1s_grid[b[2 + 4 * g + l] | ((h >> 3 * l) & 7) << 8], i & 7, (h & 0x8000) ? -IQ1_DELTA : IQ1_DELTA);
}

template <> __device__ __forceinline__ float qd_val<29>(const unsigned char *b, int i) /* IQ1_M */
{
	int g = i >> 5, l = (i >> 3) & 3;
	unsigned sc[4];
#pragma unroll
	for (int k = 0; k < 4; k++)
		sc[k] = (unsigned)b[48 + 2 * k] | (unsigned)b[49 + 2 * k] << 8;
	float d = q_h2f(sc[0] >> 12 | (sc[1] >> 8 & 0xf0) | (sc[2] >> 4 & 0xf00) | (sc[3] & 0xf000));
	float dl = __fmul_rn(d, qd_f(2 * ((sc[g >> 1] >> (6 * (g & 1) + 3 * (l >> 1))) & 7) + 1));
	unsigned h = b[32 + 2 * g + (l >> 1)] >> 4 * (l & 1);
	return qd_iq1(dl, iq1s_grid[b[4 * g + l] | (h & 7) << 8], i & 7, (h & 8) ? -IQ1_DELTA : IQ1_DELTA);
}

template <> __device__ __forceinline__ float qd_val<34>(const unsigned char *b, int i) /* TQ1_0: base-3 digits */
{
	unsigned q;
	int n;
	if (i < 160)
		n = i >> 5, q = b[i & 31];
	else if (i < 240)
		n = (i - 160) >> 4, q = b[32 + ((i - 160) & 15)];
	else
		n = (i - 240) >> 2, q = b[48 + (i & 3)];
	unsigned p = n == 0 ? 1u : n == 1 ? 3u : n == 2 ? 9u : n == 3 ? 27u : 81u;
	return __fmul_rn(qd_f((int)((((q * p) & 0xffu) * 3) >> 8) - 1), qd_h(b, 52));
}

template <> __device__ __forceinline__ float qd_val<35>(const unsigned char *b, int i) /* TQ2_0 */
{
	int q = (b[32 * (i >> 7) + (i & 31)] >> (2 * ((i >> 5) & 3))) & 3;
	return __fmul_rn(qd_f(q - 1), qd_h(b, 64));
}

/* NVFP4's UE4M3 sub-block scale, halved (ops/quant.c ue4m3_half). */
__device__ __forceinline__ float qd_ue4m3_half(unsigned x)
{
	if (x == 0 || x == 0x7f)
		return 0.0f;
	unsigned e = x >> 3 & 15, m = x & 7;
	return e == 0 ? __fmul_rn(qd_f(m), 0x1p-10f) : __uint_as_float((e + 119) << 23 | m << 20);
}

template <> __device__ __forceinline__ float qd_val<40>(const unsigned char *b, int i) /* NVFP4 */
{
	int s = i >> 4, j = i & 15;
	unsigned q = b[4 + 8 * s + (j & 7)];
	return __fmul_rn(qd_f(mxfp4_values[j < 8 ? q & 15 : q >> 4]), qd_ue4m3_half(b[s]));
}

/*
** The general types in the tuned path's form. A lane owns 32 consecutive values of one block (values
** 32c..32c+31, c = lane % LPB) as two runs of 16 (q_chunk, q_run): q_load gathers the bytes it needs as
** 32-bit words (qg_ldb: the aligned words that hold them, shifted into place, since blocks of 17-136 bytes
** start at any even byte, MXFP4's at any byte), and q_decode turns them into prepared bytes and the run's a,
** b: every value of a run is D·u + M with u an integer in [0, 128) (the K-quants' float 1 + u/128 in one
** byte permute; a = 128·D, b = M − a; a small range of u is spread over the byte, u·2^k, so that S − X keeps
** its bits: the run's sum S = X + Σu·x/128 would otherwise be mostly X) or, for the IQ4 codebooks whose
** values span 241, in [0, 256) as Q8_0's 2^23 + u (b = 0, M = −128·D). The dot products are not the CPU's
** float order (scales apply to a run's sum), so they agree to rounding, as the K-quants' do; qd_val above
** stays the exact decoder.
**
** The per-type tricks, each exact on the bytes: grid magnitudes g < 64 with sign masks m (0xFF a negative
** byte, 8 at a time from a table of the sign byte or of the 7-bit sign index) become 0xC0 + s·g as
** (g ^ m) + 0xC0C0C0C0 − m (bytes that stay in [0, 255] sum without interfering, so the word arithmetic is
** the bytes' own); IQ1's signed grid bytes W become their signed sum W − ((W << 1) & 0x01010100) the same
** way; 4-bit codebooks are looked up eight nibbles at a time by byte permutes (q_tab16); TQ1_0's base-3
** digits are taken two bytes at a time in 16-bit halves.
*/

/* N words of the bytes p..p+4N−1 (any alignment; all of them inside the block): the aligned words that
** hold them, never one past the word with byte p+4N−1, funnel-shifted into place. */
template <int N> __device__ __forceinline__ void qg_ldb(const unsigned char *p, unsigned (&w)[N])
{
	unsigned long long a = (unsigned long long)p;
	const unsigned *a0 = (const unsigned *)(a & ~3ull);
	unsigned mis = (unsigned)(a & 3), t[N + 1];
#pragma unroll
	for (int k = 0; k < N; k++)
		t[k] = __ldg(a0 + k);
	t[N] = mis ? __ldg(a0 + N) : 0u;
#pragma unroll
	for (int k = 0; k < N; k++)
		w[k] = __funnelshift_r(t[k], t[k + 1], 8 * mis);
}

/* One word of the bytes at p (qg_ldb<1>). */
__device__ __forceinline__ unsigned qg_ld1(const unsigned char *p)
{
	unsigned w[1];
	qg_ldb<1>(p, w);
	return w[0];
}

/* Sign masks in one load: iq_smask[s] has byte j 0xFF where bit j of s is set (IQ2_S and IQ3_S store their
** sign bytes); iq_ksmask[i] = iq_smask[iq_ksigns[i]] (IQ2_XXS, IQ2_XS, IQ3_XXS store 7-bit indices). Both are
** derived data; tests/simt/test_qgemv.cc checks them (and q_tab16's codebook words) against their sources. */
static __device__ const unsigned long long iq_smask[256] = {
	0x0000000000000000ull, 0x00000000000000ffull, 0x000000000000ff00ull, 0x000000000000ffffull,
	0x0000000000ff0000ull, 0x0000000000ff00ffull, 0x0000000000ffff00ull, 0x0000000000ffffffull,
	0x00000000ff000000ull, 0x00000000ff0000ffull, 0x00000000ff00ff00ull, 0x00000000ff00ffffull,
	0x00000000ffff0000ull, 0x00000000ffff00ffull, 0x00000000ffffff00ull, 0x00000000ffffffffull,
	0x000000ff00000000ull, 0x000000ff000000ffull, 0x000000ff0000ff00ull, 0x000000ff0000ffffull,
	0x000000ff00ff0000ull, 0x000000ff00ff00ffull, 0x000000ff00ffff00ull, 0x000000ff00ffffffull,
	0x000000ffff000000ull, 0x000000ffff0000ffull, 0x000000ffff00ff00ull, 0x000000ffff00ffffull,
	0x000000ffffff0000ull, 0x000000ffffff00ffull, 0x000000ffffffff00ull, 0x000000ffffffffffull,
	0x0000ff0000000000ull, 0x0000ff00000000ffull, 0x0000ff000000ff00ull, 0x0000ff000000ffffull,
	0x0000ff0000ff0000ull, 0x0000ff0000ff00ffull, 0x0000ff0000ffff00ull, 0x0000ff0000ffffffull,
	0x0000ff00ff000000ull, 0x0000ff00ff0000ffull, 0x0000ff00ff00ff00ull, 0x0000ff00ff00ffffull,
	0x0000ff00ffff0000ull, 0x0000ff00ffff00ffull, 0x0000ff00ffffff00ull, 0x0000ff00ffffffffull,
	0x0000ffff00000000ull, 0x0000ffff000000ffull, 0x0000ffff0000ff00ull, 0x0000ffff0000ffffull,
	0x0000ffff00ff0000ull, 0x0000ffff00ff00ffull, 0x0000ffff00ffff00ull, 0x0000ffff00ffffffull,
	0x0000ffffff000000ull, 0x0000ffffff0000ffull, 0x0000ffffff00ff00ull, 0x0000ffffff00ffffull,
	0x0000ffffffff0000ull, 0x0000ffffffff00ffull, 0x0000ffffffffff00ull, 0x0000ffffffffffffull,
	0x00ff000000000000ull, 0x00ff0000000000ffull, 0x00ff00000000ff00ull, 0x00ff00000000ffffull,
	0x00ff000000ff0000ull, 0x00ff000000ff00ffull, 0x00ff000000ffff00ull, 0x00ff000000ffffffull,
	0x00ff0000ff000000ull, 0x00ff0000ff0000ffull, 0x00ff0000ff00ff00ull, 0x00ff0000ff00ffffull,
	0x00ff0000ffff0000ull, 0x00ff0000ffff00ffull, 0x00ff0000ffffff00ull, 0x00ff0000ffffffffull,
	0x00ff00ff00000000ull, 0x00ff00ff000000ffull, 0x00ff00ff0000ff00ull, 0x00ff00ff0000ffffull,
	0x00ff00ff00ff0000ull, 0x00ff00ff00ff00ffull, 0x00ff00ff00ffff00ull, 0x00ff00ff00ffffffull,
	0x00ff00ffff000000ull, 0x00ff00ffff0000ffull, 0x00ff00ffff00ff00ull, 0x00ff00ffff00ffffull,
	0x00ff00ffffff0000ull, 0x00ff00ffffff00ffull, 0x00ff00ffffffff00ull, 0x00ff00ffffffffffull,
	0x00ffff0000000000ull, 0x00ffff00000000ffull, 0x00ffff000000ff00ull, 0x00ffff000000ffffull,
	0x00ffff0000ff0000ull, 0x00ffff0000ff00ffull, 0x00ffff0000ffff00ull, 0x00ffff0000ffffffull,
	0x00ffff00ff000000ull, 0x00ffff00ff0000ffull, 0x00ffff00ff00ff00ull, 0x00ffff00ff00ffffull,
	0x00ffff00ffff0000ull, 0x00ffff00ffff00ffull, 0x00ffff00ffffff00ull, 0x00ffff00ffffffffull,
	0x00ffffff00000000ull, 0x00ffffff000000ffull, 0x00ffffff0000ff00ull, 0x00ffffff0000ffffull,
	0x00ffffff00ff0000ull, 0x00ffffff00ff00ffull, 0x00ffffff00ffff00ull, 0x00ffffff00ffffffull,
	0x00ffffffff000000ull, 0x00ffffffff0000ffull, 0x00ffffffff00ff00ull, 0x00ffffffff00ffffull,
	0x00ffffffffff0000ull, 0x00ffffffffff00ffull, 0x00ffffffffffff00ull, 0x00ffffffffffffffull,
	0xff00000000000000ull, 0xff000000000000ffull, 0xff0000000000ff00ull, 0xff0000000000ffffull,
	0xff00000000ff0000ull, 0xff00000000ff00ffull, 0xff00000000ffff00ull, 0xff00000000ffffffull,
	0xff000000ff000000ull, 0xff000000ff0000ffull, 0xff000000ff00ff00ull, 0xff000000ff00ffffull,
	0xff000000ffff0000ull, 0xff000000ffff00ffull, 0xff000000ffffff00ull, 0xff000000ffffffffull,
	0xff0000ff00000000ull, 0xff0000ff000000ffull, 0xff0000ff0000ff00ull, 0xff0000ff0000ffffull,
	0xff0000ff00ff0000ull, 0xff0000ff00ff00ffull, 0xff0000ff00ffff00ull, 0xff0000ff00ffffffull,
	0xff0000ffff000000ull, 0xff0000ffff0000ffull, 0xff0000ffff00ff00ull, 0xff0000ffff00ffffull,
	0xff0000ffffff0000ull, 0xff0000ffffff00ffull, 0xff0000ffffffff00ull, 0xff0000ffffffffffull,
	0xff00ff0000000000ull, 0xff00ff00000000ffull, 0xff00ff000000ff00ull, 0xff00ff000000ffffull,
	0xff00ff0000ff0000ull, 0xff00ff0000ff00ffull, 0xff00ff0000ffff00ull, 0xff00ff0000ffffffull,
	0xff00ff00ff000000ull, 0xff00ff00ff0000ffull, 0xff00ff00ff00ff00ull, 0xff00ff00ff00ffffull,
	0xff00ff00ffff0000ull, 0xff00ff00ffff00ffull, 0xff00ff00ffffff00ull, 0xff00ff00ffffffffull,
	0xff00ffff00000000ull, 0xff00ffff000000ffull, 0xff00ffff0000ff00ull, 0xff00ffff0000ffffull,
	0xff00ffff00ff0000ull, 0xff00ffff00ff00ffull, 0xff00ffff00ffff00ull, 0xff00ffff00ffffffull,
	0xff00ffffff000000ull, 0xff00ffffff0000ffull, 0xff00ffffff00ff00ull, 0xff00ffffff00ffffull,
	0xff00ffffffff0000ull, 0xff00ffffffff00ffull, 0xff00ffffffffff00ull, 0xff00ffffffffffffull,
	0xffff000000000000ull, 0xffff0000000000ffull, 0xffff00000000ff00ull, 0xffff00000000ffffull,
	0xffff000000ff0000ull, 0xffff000000ff00ffull, 0xffff000000ffff00ull, 0xffff000000ffffffull,
	0xffff0000ff000000ull, 0xffff0000ff0000ffull, 0xffff0000ff00ff00ull, 0xffff0000ff00ffffull,
	0xffff0000ffff0000ull, 0xffff0000ffff00ffull, 0xffff0000ffffff00ull, 0xffff0000ffffffffull,
	0xffff00ff00000000ull, 0xffff00ff000000ffull, 0xffff00ff0000ff00ull, 0xffff00ff0000ffffull,
	0xffff00ff00ff0000ull, 0xffff00ff00ff00ffull, 0xffff00ff00ffff00ull, 0xffff00ff00ffffffull,
	0xffff00ffff000000ull, 0xffff00ffff0000ffull, 0xffff00ffff00ff00ull, 0xffff00ffff00ffffull,
	0xffff00ffffff0000ull, 0xffff00ffffff00ffull, 0xffff00ffffffff00ull, 0xffff00ffffffffffull,
	0xffffff0000000000ull, 0xffffff00000000ffull, 0xffffff000000ff00ull, 0xffffff000000ffffull,
	0xffffff0000ff0000ull, 0xffffff0000ff00ffull, 0xffffff0000ffff00ull, 0xffffff0000ffffffull,
	0xffffff00ff000000ull, 0xffffff00ff0000ffull, 0xffffff00ff00ff00ull, 0xffffff00ff00ffffull,
	0xffffff00ffff0000ull, 0xffffff00ffff00ffull, 0xffffff00ffffff00ull, 0xffffff00ffffffffull,
	0xffffffff00000000ull, 0xffffffff000000ffull, 0xffffffff0000ff00ull, 0xffffffff0000ffffull,
	0xffffffff00ff0000ull, 0xffffffff00ff00ffull, 0xffffffff00ffff00ull, 0xffffffff00ffffffull,
	0xffffffffff000000ull, 0xffffffffff0000ffull, 0xffffffffff00ff00ull, 0xffffffffff00ffffull,
	0xffffffffffff0000ull, 0xffffffffffff00ffull, 0xffffffffffffff00ull, 0xffffffffffffffffull,
};

static __device__ const unsigned long long iq_ksmask[128] = {
	0x0000000000000000ull, 0xff000000000000ffull, 0xff0000000000ff00ull, 0x000000000000ffffull,
	0xff00000000ff0000ull, 0x0000000000ff00ffull, 0x0000000000ffff00ull, 0xff00000000ffffffull,
	0xff000000ff000000ull, 0x00000000ff0000ffull, 0x00000000ff00ff00ull, 0xff000000ff00ffffull,
	0x00000000ffff0000ull, 0xff000000ffff00ffull, 0xff000000ffffff00ull, 0x00000000ffffffffull,
	0xff0000ff00000000ull, 0x000000ff000000ffull, 0x000000ff0000ff00ull, 0xff0000ff0000ffffull,
	0x000000ff00ff0000ull, 0xff0000ff00ff00ffull, 0xff0000ff00ffff00ull, 0x000000ff00ffffffull,
	0x000000ffff000000ull, 0xff0000ffff0000ffull, 0xff0000ffff00ff00ull, 0x000000ffff00ffffull,
	0xff0000ffffff0000ull, 0x000000ffffff00ffull, 0x000000ffffffff00ull, 0xff0000ffffffffffull,
	0xff00ff0000000000ull, 0x0000ff00000000ffull, 0x0000ff000000ff00ull, 0xff00ff000000ffffull,
	0x0000ff0000ff0000ull, 0xff00ff0000ff00ffull, 0xff00ff0000ffff00ull, 0x0000ff0000ffffffull,
	0x0000ff00ff000000ull, 0xff00ff00ff0000ffull, 0xff00ff00ff00ff00ull, 0x0000ff00ff00ffffull,
	0xff00ff00ffff0000ull, 0x0000ff00ffff00ffull, 0x0000ff00ffffff00ull, 0xff00ff00ffffffffull,
	0x0000ffff00000000ull, 0xff00ffff000000ffull, 0xff00ffff0000ff00ull, 0x0000ffff0000ffffull,
	0xff00ffff00ff0000ull, 0x0000ffff00ff00ffull, 0x0000ffff00ffff00ull, 0xff00ffff00ffffffull,
	0xff00ffffff000000ull, 0x0000ffffff0000ffull, 0x0000ffffff00ff00ull, 0xff00ffffff00ffffull,
	0x0000ffffffff0000ull, 0xff00ffffffff00ffull, 0xff00ffffffffff00ull, 0x0000ffffffffffffull,
	0xffff000000000000ull, 0x00ff0000000000ffull, 0x00ff00000000ff00ull, 0xffff00000000ffffull,
	0x00ff000000ff0000ull, 0xffff000000ff00ffull, 0xffff000000ffff00ull, 0x00ff000000ffffffull,
	0x00ff0000ff000000ull, 0xffff0000ff0000ffull, 0xffff0000ff00ff00ull, 0x00ff0000ff00ffffull,
	0xffff0000ffff0000ull, 0x00ff0000ffff00ffull, 0x00ff0000ffffff00ull, 0xffff0000ffffffffull,
	0x00ff00ff00000000ull, 0xffff00ff000000ffull, 0xffff00ff0000ff00ull, 0x00ff00ff0000ffffull,
	0xffff00ff00ff0000ull, 0x00ff00ff00ff00ffull, 0x00ff00ff00ffff00ull, 0xffff00ff00ffffffull,
	0xffff00ffff000000ull, 0x00ff00ffff0000ffull, 0x00ff00ffff00ff00ull, 0xffff00ffff00ffffull,
	0x00ff00ffffff0000ull, 0xffff00ffffff00ffull, 0xffff00ffffffff00ull, 0x00ff00ffffffffffull,
	0x00ffff0000000000ull, 0xffffff00000000ffull, 0xffffff000000ff00ull, 0x00ffff000000ffffull,
	0xffffff0000ff0000ull, 0x00ffff0000ff00ffull, 0x00ffff0000ffff00ull, 0xffffff0000ffffffull,
	0xffffff00ff000000ull, 0x00ffff00ff0000ffull, 0x00ffff00ff00ff00ull, 0xffffff00ff00ffffull,
	0x00ffff00ffff0000ull, 0xffffff00ffff00ffull, 0xffffff00ffffff00ull, 0x00ffff00ffffffffull,
	0xffffffff00000000ull, 0x00ffffff000000ffull, 0x00ffffff0000ff00ull, 0xffffffff0000ffffull,
	0x00ffffff00ff0000ull, 0xffffffff00ff00ffull, 0xffffffff00ffff00ull, 0x00ffffff00ffffffull,
	0x00ffffffff000000ull, 0xffffffffff0000ffull, 0xffffffffff00ff00ull, 0x00ffffffff00ffffull,
	0xffffffffffff0000ull, 0x00ffffffffff00ffull, 0x00ffffffffffff00ull, 0xffffffffffffffffull,
};

/* Prepared bytes 0xC0 + s·g·2^S of four grid magnitudes g (g·2^S < 64) under sign masks m. */
template <int S> __device__ __forceinline__ unsigned q_sgrid(unsigned g, unsigned m)
{
	return ((g ^ m) << S) + 0xC0C0C0C0u - (m << S);
}

/* The 16-entry byte table T at the 8 nibbles of q (nibble 2k the low one of byte k): lo gets the entries of
** the low nibbles (bytes 0..3), hi those of the high ones. Selectors keep their top bit clear (a set one
** would replicate a sign); the third permute of each half picks the upper table where the nibble is >= 8. */
__device__ __forceinline__ void q_tab16(unsigned q, unsigned t0, unsigned t1, unsigned t2, unsigned t3, unsigned &lo,
                                        unsigned &hi)
{
	unsigned s = q & 0x77777777u, up = 0x32103210u | ((q & 0x88888888u) >> 1), r[2];
#pragma unroll
	for (int h = 0; h < 2; h++) {
		unsigned sh = s >> 16 * h;
		r[h] = __byte_perm(__byte_perm(t0, t1, sh), __byte_perm(t2, t3, sh), up >> 16 * h);
	}
	lo = __byte_perm(r[0], r[1], 0x6420);
	hi = __byte_perm(r[0], r[1], 0x7531);
}

/* The IQ4 codebook as Q8_0-style bytes (value + 128), and MXFP4/NVFP4's as 0x80 | 4·(value + 12). */
__device__ __forceinline__ void q_tab_iq4(unsigned q, unsigned &lo, unsigned &hi)
{
	q_tab16(q, 0x3F2D1801u, 0x766A5D4Fu, 0xA6998D81u, 0xF1D9C5B5u, lo, hi);
}

__device__ __forceinline__ void q_tab_mx(unsigned q, unsigned &lo, unsigned &hi)
{
	q_tab16(q, 0xBCB8B4B0u, 0xE0D0C8C0u, 0xA4A8ACB0u, 0x809098A0u, lo, hi);
}

/* The bits m of w as prepared bytes (w already shifted so that each byte's field sits under m). */
__device__ __forceinline__ unsigned q_prep(unsigned w, unsigned m)
{
	return q_andor(w, m, 0x80808080u);
}

/* Bits 0..3 of t into bit 6 of bytes 0..3 (Q5's fifth bits, its quants times 4), with the 0x80. */
__device__ __forceinline__ unsigned q_bit6(unsigned t)
{
	return q_andor((t & 15u) * 0x08102040u, 0x40404040u, 0x80808080u);
}

/* A run's a and b for values D·u + M, its prepared bytes holding u·2^k (Dk = D / 2^k). */
__device__ __forceinline__ void q_ab(QRun &run, float Dk, float M)
{
	run.a = 128.0f * Dk;
	run.b = M - run.a;
}

/* IQ1's prepared bytes: 32 times the signed grid bytes W (-1, 0, 1), plus k. */
__device__ __forceinline__ unsigned q_iq1(unsigned W, unsigned k)
{
	return ((W - ((W << 1) & 0x01010100u)) << 5) + k;
}

template <> struct QRaw<2> { unsigned dw, q[4]; };          /* Q4_0 */
template <> struct QRaw<3> { unsigned dm, q[4]; };          /* Q4_1 */
template <> struct QRaw<6> { unsigned dw, qh, q[4]; };      /* Q5_0 */
template <> struct QRaw<7> { unsigned dm, qh, q[4]; };      /* Q5_1 */
template <> struct QRaw<10> { unsigned sc, dd, q[8]; };     /* Q2_K */
template <> struct QRaw<11> { unsigned dw, hb, sl, sh, q[8]; }; /* Q3_K */
template <> struct QRaw<16> { unsigned dw, g[2]; };         /* IQ2_XXS */
template <> struct QRaw<17> { unsigned dw, g[2], scw; };    /* IQ2_XS */
template <> struct QRaw<18> { unsigned dw, g[2], aux; };    /* IQ3_XXS */
template <> struct QRaw<19> { unsigned dw, qs, hw; };       /* IQ1_S */
template <> struct QRaw<20> { unsigned dw, q[4]; };         /* IQ4_NL */
template <> struct QRaw<21> { unsigned dw, g[2], hw, sg, scw; }; /* IQ3_S */
template <> struct QRaw<22> { unsigned dw, qs, sg, hw, scw; };   /* IQ2_S */
template <> struct QRaw<23> { unsigned hd[2], q[4]; };      /* IQ4_XS */
template <> struct QRaw<29> { unsigned qs, hw, sc[2]; };    /* IQ1_M */
template <> struct QRaw<34> { unsigned dw, q[8]; };         /* TQ1_0 */
template <> struct QRaw<35> { unsigned dw, q[8]; };         /* TQ2_0 */
template <> struct QRaw<39> { unsigned ew, q[4]; };         /* MXFP4 */
template <> struct QRaw<40> { unsigned sw, q[4]; };         /* NVFP4 */

/* The loads of the general types: block bi of row, this lane's share (c = lane % LPB). */
template <int QT>
__device__ __forceinline__ void q_load(QRaw<QT> &r, const unsigned char *row, long long bi, int lane)
{
	const unsigned char *b = row + bi * QGeo<QT>::BYTES;
	int c = lane % QGeo<QT>::LPB;
	if constexpr (QT == 2 || QT == 20) { /* Q4_0, IQ4_NL: d, 16 quant bytes */
		r.dw = q_ldw(b);
		qg_ldb<4>(b + 2, r.q);
	} else if constexpr (QT == 3) {
		r.dm = qg_ld1(b);
		qg_ldb<4>(b + 4, r.q);
	} else if constexpr (QT == 6) {
		r.dw = q_ldw(b);
		r.qh = qg_ld1(b + 2);
		qg_ldb<4>(b + 6, r.q);
	} else if constexpr (QT == 7) {
		r.dm = qg_ld1(b);
		r.qh = qg_ld1(b + 4);
		qg_ldb<4>(b + 8, r.q);
	} else if constexpr (QT == 10) { /* Q2_K: scales 2c, 2c + 1; quants 32(c/4)..; d, dmin */
		r.sc = qg_ld1(b + 2 * c);
		r.dd = qg_ld1(b + 80);
		qg_ldb<8>(b + 16 + 32 * (c >> 2), r.q);
	} else if constexpr (QT == 11) { /* Q3_K: bit c of all of hmask (packed: word w's at bit w of each byte),
	                                    quants 32(c/4).., the low and the high scale bytes, d */
		unsigned hm[8];
		r.dw = q_ldw(b + 108);
		qg_ldb<8>(b, hm);
		qg_ldb<8>(b + 32 + 32 * (c >> 2), r.q);
		r.sl = qg_ld1(b + 96 + 2 * (c & 3));
		r.sh = qg_ld1(b + 104 + 2 * (c & 1));
		r.hb = 0;
#pragma unroll
		for (int w = 0; w < 8; w++)
			r.hb |= ((hm[w] >> c) & 0x01010101u) << w;
	} else if constexpr (QT == 16 || QT == 17) { /* IQ2_XXS, IQ2_XS: group c's 8 bytes (IQ2_XS: its scale) */
		r.dw = q_ldw(b);
		qg_ldb<2>(b + 2 + 8 * c, r.g);
		if constexpr (QT == 17)
			r.scw = q_ldw(b + 66 + c);
	} else if constexpr (QT == 18) {
		r.dw = q_ldw(b);
		qg_ldb<2>(b + 2 + 8 * c, r.g);
		r.aux = qg_ld1(b + 66 + 4 * c);
	} else if constexpr (QT == 19) { /* IQ1_S: 4 grid bytes, the group's 16-bit high part */
		r.dw = q_ldw(b);
		r.qs = qg_ld1(b + 2 + 4 * c);
		r.hw = q_ldw(b + 34 + 2 * c);
	} else if constexpr (QT == 21) {
		r.dw = q_ldw(b);
		qg_ldb<2>(b + 2 + 8 * c, r.g);
		r.hw = q_ldw(b + 66 + c);
		r.sg = qg_ld1(b + 74 + 4 * c);
		r.scw = q_ldw(b + 106 + (c >> 1));
	} else if constexpr (QT == 22) {
		r.dw = q_ldw(b);
		r.qs = qg_ld1(b + 2 + 4 * c);
		r.sg = qg_ld1(b + 34 + 4 * c);
		r.hw = q_ldw(b + 66 + c);
		r.scw = q_ldw(b + 74 + c);
	} else if constexpr (QT == 23) { /* IQ4_XS: d, the high scale bits, the low ones; sub-block c's quants */
		qg_ldb<2>(b, r.hd);
		qg_ldb<4>(b + 8 + 16 * c, r.q);
	} else if constexpr (QT == 29) { /* IQ1_M: 4 grid bytes, 2 high bytes, the 8 scale bytes (d inside) */
		r.qs = qg_ld1(b + 4 * c);
		r.hw = q_ldw(b + 32 + 2 * c);
		qg_ldb<2>(b + 48, r.sc);
	} else if constexpr (QT == 34) { /* TQ1_0: bytes 0..31 (c < 5) or 32..51 */
		r.dw = q_ldw(b + 52);
		if (c < 5) {
			qg_ldb<8>(b, r.q);
		} else {
			qg_ldb<5>(b + 32, *(unsigned(*)[5])r.q);
#pragma unroll
			for (int k = 5; k < 8; k++)
				r.q[k] = 0u;
		}
	} else if constexpr (QT == 35) {
		r.dw = q_ldw(b + 64);
		qg_ldb<8>(b + 32 * (c >> 2), r.q);
	} else if constexpr (QT == 39) {
		r.ew = q_ldw(b);
		qg_ldb<4>(b + 1, r.q);
	} else if constexpr (QT == 40) { /* NVFP4: the 4 scale bytes; sub-blocks 2c, 2c + 1 */
		r.sw = qg_ld1(b);
		qg_ldb<4>(b + 4 + 16 * c, r.q);
	}
}

/* TQ1_0's base-3 digit n (p = 3^n) of the four bytes of w, times 32, as prepared bytes: the even and the odd
** bytes in 16-bit halves, so a byte times p (< 2^15) never reaches its neighbour. */
__device__ __forceinline__ unsigned q_tdig(unsigned w, unsigned p)
{
	unsigned e = ((((w & 0x00FF00FFu) * p) & 0x00FF00FFu) * 3u >> 8) & 0x00030003u;
	unsigned o = (((((w >> 8) & 0x00FF00FFu) * p) & 0x00FF00FFu) * 3u >> 8) & 0x00030003u;
	return q_prep(((o << 8) | e) << 5, 0x60606060u);
}

/* 3^n for n in 0..4. */
__device__ __forceinline__ unsigned q_pow3(int n)
{
	return n == 0 ? 1u : n == 1 ? 3u : n == 2 ? 9u : n == 3 ? 27u : 81u;
}

/* The general types' decode: the lane's two runs (run i: values 32c + 16i .. +15 of the block). */
template <int QT>
__device__ __forceinline__ void q_decode(const QRaw<QT> &r, const unsigned char *row, long long bi, int lane,
                                         QRun (&run)[2])
{
	const unsigned char *b = row + bi * QGeo<QT>::BYTES;
	int c = lane % QGeo<QT>::LPB;
	if constexpr (QT == 2 || QT == 3 || QT == 6 || QT == 7) { /* Q4_0, Q4_1, Q5_0, Q5_1 */
		float d, M;
		if constexpr (QT == 3 || QT == 7)
			d = q_h2f(r.dm), M = q_h2f(r.dm >> 16);
		else
			d = q_h2f(q_whalf(r.dw, b)), M = (QT == 2 ? -8.0f : -16.0f) * d;
#pragma unroll
		for (int i = 0; i < 2; i++) {
#pragma unroll
			for (int w = 0; w < 4; w++) {
				if constexpr (QT == 6 || QT == 7) /* u·4 */
					run[i].v[w] = q_andor(i ? r.q[w] >> 2 : r.q[w] << 2, 0x3C3C3C3Cu, q_bit6(r.qh >> (16 * i + 4 * w)));
				else /* u·8 */
					run[i].v[w] = q_prep(i ? r.q[w] >> 1 : r.q[w] << 3, 0x78787878u);
			}
			q_ab(run[i], (QT == 6 || QT == 7 ? 0.25f : 0.125f) * d, M);
		}
	} else if constexpr (QT == 20 || QT == 23) { /* IQ4_NL, IQ4_XS: the codebook, Q8_0's form */
		float d;
		if constexpr (QT == 20) {
			d = q_h2f(q_whalf(r.dw, b));
		} else {
			unsigned sh = r.hd[0] >> 16, sl = r.hd[1] >> 8 * (c >> 1);
			int ls = (int)((sl >> 4 * (c & 1)) & 15u) | (int)((sh >> 2 * c) & 3u) << 4;
			d = q_h2f(r.hd[0]) * (float)(ls - 32);
		}
#pragma unroll
		for (int w = 0; w < 4; w++)
			q_tab_iq4(r.q[w], run[0].v[w], run[1].v[w]);
#pragma unroll
		for (int i = 0; i < 2; i++)
			run[i].a = d, run[i].b = 0.0f;
	} else if constexpr (QT == 39) { /* MXFP4: E8M0 scale, halved */
		unsigned e = q_wbyte(r.ew, b);
		float d = __uint_as_float(e < 2 ? 0x00200000u << e : (e - 1) << 23);
#pragma unroll
		for (int w = 0; w < 4; w++)
			q_tab_mx(r.q[w], run[0].v[w], run[1].v[w]);
#pragma unroll
		for (int i = 0; i < 2; i++)
			q_ab(run[i], 0.25f * d, -12.0f * d);
	} else if constexpr (QT == 40) { /* NVFP4: run i is sub-block 2c + i, its 8 bytes' low nibbles then high */
#pragma unroll
		for (int i = 0; i < 2; i++) {
			float d = qd_ue4m3_half((r.sw >> 8 * (2 * c + i)) & 0xFFu);
			q_tab_mx(r.q[2 * i], run[i].v[0], run[i].v[2]);
			q_tab_mx(r.q[2 * i + 1], run[i].v[1], run[i].v[3]);
			q_ab(run[i], 0.25f * d, -12.0f * d);
		}
	} else if constexpr (QT == 10 || QT == 35) { /* Q2_K, TQ2_0: crumbs at shift 2(c%4) of 32 bytes, u·32 */
		int sh = 2 * (c & 3);
		float d;
		if constexpr (QT == 10)
			d = q_h2f(r.dd);
		else
			d = q_h2f(q_whalf(r.dw, b + 64));
#pragma unroll
		for (int i = 0; i < 2; i++) {
#pragma unroll
			for (int w = 0; w < 4; w++)
				run[i].v[w] = q_prep(r.q[4 * i + w] >> sh << 5, 0x60606060u);
			if constexpr (QT == 10) {
				unsigned s = (r.sc >> 8 * i) & 0xFFu;
				q_ab(run[i], 0.03125f * (d * (float)(s & 15u)), -(q_h2f(r.dd >> 16) * (float)(s >> 4)));
			} else {
				q_ab(run[i], 0.03125f * d, -d);
			}
		}
	} else if constexpr (QT == 11) { /* Q3_K: crumb | the hmask bit c as 4, value dl·(u − 4); u·16 */
		int sh = 2 * (c & 3);
		float d = q_h2f(q_whalf(r.dw, b + 108));
#pragma unroll
		for (int i = 0; i < 2; i++) {
			/* scale bytes 2(c % 4) + i (low 4 bits) and 8 + 2(c % 2) + i (high 2) */
			unsigned lo = (r.sl >> (8 * i + 4 * (c >> 2))) & 15u;
			unsigned hi = (r.sh >> (8 * i + 2 * (c >> 1))) & 3u;
			float dl = d * (float)((int)(lo | hi << 4) - 32);
#pragma unroll
			for (int w = 0; w < 4; w++) {
				unsigned hb = (r.hb >> (4 * i + w)) & 0x01010101u;
				run[i].v[w] = q_andor(r.q[4 * i + w] >> sh << 4, 0x30303030u, hb * 64u + 0x80808080u);
			}
			q_ab(run[i], 0.0625f * dl, -4.0f * dl);
		}
	} else if constexpr (QT == 16 || QT == 17 || QT == 22) { /* IQ2_XXS, IQ2_XS, IQ2_S: 8-value grid rows */
		float d = q_h2f(q_whalf(r.dw, b));
#pragma unroll
		for (int i = 0; i < 2; i++) {
			float db;
			if constexpr (QT == 16)
				db = d * (0.5f + (float)(r.g[1] >> 28)) * 0.25f;
			else
				db = d * (0.5f + (float)((q_wbyte(r.scw, b + (QT == 17 ? 66 : 74) + c) >> 4 * i) & 15u)) * 0.25f;
#pragma unroll
			for (int k = 0; k < 2; k++) {
				int l = 2 * i + k;
				unsigned long long gr, m;
				if constexpr (QT == 16) {
					gr = __ldg(iq2xxs_grid + ((r.g[0] >> 8 * l) & 0xFFu));
					m = __ldg(iq_ksmask + ((r.g[1] >> 7 * l) & 127u));
				} else if constexpr (QT == 17) {
					unsigned v = (r.g[l >> 1] >> 16 * (l & 1)) & 0xFFFFu;
					gr = __ldg(iq2xs_grid + (v & 511u));
					m = __ldg(iq_ksmask + (v >> 9));
				} else {
					unsigned qh = q_wbyte(r.hw, b + 66 + c);
					gr = __ldg(iq2s_grid + (((r.qs >> 8 * l) & 0xFFu) | ((qh >> 2 * l) & 3u) << 8));
					m = __ldg(iq_smask + ((r.sg >> 8 * l) & 0xFFu));
				}
				run[i].v[2 * k] = q_sgrid<0>((unsigned)gr, (unsigned)m);
				run[i].v[2 * k + 1] = q_sgrid<0>((unsigned)(gr >> 32), (unsigned)(m >> 32));
			}
			q_ab(run[i], db, -64.0f * db);
		}
	} else if constexpr (QT == 18 || QT == 21) { /* IQ3_XXS, IQ3_S: 4-value grid rows, two a group of 8 */
		float d = q_h2f(q_whalf(r.dw, b)), db;
		if constexpr (QT == 18)
			db = d * (0.5f + (float)(r.aux >> 28)) * 0.5f;
		else
			db = d * (float)(1 + 2 * (int)((q_wbyte(r.scw, b + 106 + (c >> 1)) >> 4 * (c & 1)) & 15u));
#pragma unroll
		for (int i = 0; i < 2; i++) {
#pragma unroll
			for (int k = 0; k < 2; k++) {
				int l = 2 * i + k;
				unsigned gi[2];
				unsigned long long m;
				if constexpr (QT == 18) {
					m = __ldg(iq_ksmask + ((r.aux >> 7 * l) & 127u));
				} else {
					m = __ldg(iq_smask + ((r.sg >> 8 * l) & 0xFFu));
				}
#pragma unroll
				for (int h = 0; h < 2; h++) {
					unsigned idx = (r.g[l >> 1] >> 8 * (2 * (l & 1) + h)) & 0xFFu;
					if constexpr (QT == 21)
						idx |= ((q_wbyte(r.hw, b + 66 + c) >> (2 * l + h)) & 1u) << 8;
					gi[h] = __ldg((QT == 18 ? iq3xxs_grid : iq3s_grid) + idx);
				}
				run[i].v[2 * k] = q_sgrid<QT == 21 ? 2 : 0>(gi[0], (unsigned)m);
				run[i].v[2 * k + 1] = q_sgrid<QT == 21 ? 2 : 0>(gi[1], (unsigned)(m >> 32));
			}
			float Dk = (QT == 21 ? 0.25f : 1.0f) * db; /* IQ3_S's magnitudes (<= 15) times 4 */
			q_ab(run[i], Dk, -64.0f * Dk);
		}
	} else if constexpr (QT == 19) { /* IQ1_S: u = grid + 1, value dl·(u − 1 + delta); u·32 */
		unsigned h = q_whalf(r.hw, b + 34 + 2 * c);
		float dl = q_h2f(q_whalf(r.dw, b)) * (float)(2 * (int)((h >> 12) & 7u) + 1);
		float M = dl * ((h & 0x8000u) ? -1.0f - IQ1_DELTA : IQ1_DELTA - 1.0f);
#pragma unroll
		for (int i = 0; i < 2; i++) {
#pragma unroll
			for (int k = 0; k < 2; k++) {
				int l = 2 * i + k;
				unsigned long long gr = __ldg(iq1s_grid + (((r.qs >> 8 * l) & 0xFFu) | ((h >> 3 * l) & 7u) << 8));
				run[i].v[2 * k] = q_iq1((unsigned)gr, 0xA0A0A0A0u);
				run[i].v[2 * k + 1] = q_iq1((unsigned)(gr >> 32), 0xA0A0A0A0u);
			}
			q_ab(run[i], 0.03125f * dl, M);
		}
	} else if constexpr (QT == 29) { /* IQ1_M: u = 32·grid ± 4 + 36 (the delta of each 8), value dl/32·(u − 36) */
		unsigned sc[4] = {r.sc[0] & 0xFFFFu, r.sc[0] >> 16, r.sc[1] & 0xFFFFu, r.sc[1] >> 16};
		float d = q_h2f(sc[0] >> 12 | (sc[1] >> 8 & 0xf0u) | (sc[2] >> 4 & 0xf00u) | (sc[3] & 0xf000u));
		unsigned hh = q_whalf(r.hw, b + 32 + 2 * c);
#pragma unroll
		for (int i = 0; i < 2; i++) {
			float dl = d * (float)(2 * (int)((sc[c >> 1] >> (6 * (c & 1) + 3 * i)) & 7u) + 1);
#pragma unroll
			for (int k = 0; k < 2; k++) {
				int l = 2 * i + k;
				unsigned h = hh >> 4 * l; /* byte l/2's nibble l%2 */
				unsigned long long gr = __ldg(iq1s_grid + (((r.qs >> 8 * l) & 0xFFu) | (h & 7u) << 8));
				unsigned kk = (h & 8u) ? 0xA0A0A0A0u : 0xA8A8A8A8u;
				run[i].v[2 * k] = q_iq1((unsigned)gr, kk);
				run[i].v[2 * k + 1] = q_iq1((unsigned)(gr >> 32), kk);
			}
			q_ab(run[i], 0.03125f * dl, -1.125f * dl);
		}
	} else if constexpr (QT == 34) { /* TQ1_0: base-3 digits, value d·(digit − 1); u·32 */
		float d = q_h2f(q_whalf(r.dw, b + 52));
#pragma unroll
		for (int i = 0; i < 2; i++) {
#pragma unroll
			for (int w = 0; w < 4; w++) {
				/* c < 5: digit c of bytes 16i + 4w..; c = 5, 6: digit 2(c − 5) + i of bytes 32 + 4w..; c = 7:
				** digit 4 of those (run 0), digit w of bytes 48..51 (run 1) */
				unsigned src = c < 5 ? r.q[4 * i + w] : (c == 7 && i == 1) ? r.q[4] : r.q[w];
				unsigned p = q_pow3(c < 5 ? c : c == 7 ? (i ? w : 4) : 2 * (c - 5) + i);
				run[i].v[w] = q_tdig(src, p);
			}
			q_ab(run[i], 0.03125f * d, -d);
		}
	}
}

/*
** The dot products of R rows with the staged x chunk: acc[r][t] += rows[r][k0, k0 + kc) · x[t][0, kc)
** for t < tn. x is staged swizzled (q_xsw) in xs[t·kcap + ...], its 16-value sums as xsum[t·kcap/16 +
** i/16]. This warp takes units u0, u0 + ustep, ... of the chunk, UN at a time with all their loads
** issued first.
*/
template <int QT, int R, int TM>
__device__ __forceinline__ void q_chunk(float (&acc)[R][TM], const unsigned char *const (&rows)[R], long long k0, int kc,
                                        const float *xs, const float *xsum, int kcap, int tn, int u0, int ustep)
{
	const int BL = QGeo<QT>::BLCK, UN = QGeo<QT>::UN;
	int lane = threadIdx.x & 31, lb = q_lb<QT>(lane);
	int nu = (kc + 1023) >> 10;
	/* run i of this lane: logical offset off[i] in its block, swizzled base bo[i] and float4 key sw[i] */
	int off[2], bo[2], sw[2];
#pragma unroll
	for (int i = 0; i < 2; i++) {
		off[i] = q_off<QT>(lane, i);
		int s = q_xkey(lb * BL + off[i]);
		bo[i] = off[i] ^ (s & 4) << 2;
		sw[i] = s & 3;
	}
	unsigned kb0 = (unsigned)k0 / BL; /* the chunk's first block */
	for (int u = u0; u < nu; u += UN * ustep) {
		QRaw<QT> raw[UN][R];
		int e[UN];
		bool ok[UN];
#pragma unroll
		for (int h = 0; h < UN; h++) {
			e[h] = ((u + h * ustep) << 10) + lb * BL; /* chunk-relative first value of the lane's block */
			ok[h] = u + h * ustep < nu && e[h] < kc;
			if (ok[h]) {
#pragma unroll
				for (int r = 0; r < R; r++)
					q_load(raw[h][r], rows[r], kb0 + (unsigned)e[h] / BL, lane);
			}
		}
#pragma unroll
		for (int h = 0; h < UN; h++) {
			if (!ok[h])
				continue;
			QRun run[R][2];
#pragma unroll
			for (int r = 0; r < R; r++)
				q_decode(raw[h][r], rows[r], kb0 + (unsigned)e[h] / BL, lane, run[r]);
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const QRun *rp[R];
#pragma unroll
				for (int r = 0; r < R; r++)
					rp[r] = &run[r][i];
				q_run<q_rep8<QT>(), R, TM>(acc, rp, xs + e[h] + bo[i], xsum + ((e[h] + off[i]) >> 4), kcap, tn, sw[i]);
			}
		}
	}
}

/* 16 consecutive values at p as floats: 16-byte loads when p is 16-byte aligned (a decode step's rows
** are), one element at a time otherwise. */
template <typename X> __device__ __forceinline__ void q_ld16v(float (&v)[16], const X *p)
{
	if (((unsigned long long)p & 15) == 0) {
		union {
			uint4 q[sizeof(X)];
			X e[16];
		} b;
#pragma unroll
		for (int i = 0; i < (int)sizeof(X); i++)
			b.q[i] = __ldg((const uint4 *)p + i);
#pragma unroll
		for (int i = 0; i < 16; i++)
			v[i] = to_f(b.e[i]);
	} else {
#pragma unroll
		for (int i = 0; i < 16; i++)
			v[i] = to_f(p[i]);
	}
}

/* The 16 values k..k+15 (k a multiple of 16) into a staged row xr, swizzled (q_xsw), and their sum in
** q_stage's order. */
__device__ __forceinline__ float q_put16(float *xr, int k, const float (&v)[16])
{
#pragma unroll
	for (int q = 0; q < 4; q++)
		*(float4 *)(xr + q_xsw(k + 4 * q)) = make_float4(v[4 * q], v[4 * q + 1], v[4 * q + 2], v[4 * q + 3]);
	return ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7])) + ((v[8] + v[9]) + (v[10] + v[11])) +
	       ((v[12] + v[13]) + (v[14] + v[15]));
}

/* The 16-value sums of the staged rows (tn rows of kc values, swizzled) into xsum[t·kcap/16 + i/16], each
** in q_put16's order. */
__device__ __forceinline__ void q_sums(float *xsum, const float *xs, int tn, int kc, int kcap)
{
	int n16 = kc >> 4, k16 = kcap >> 4;
	for (int i = threadIdx.x; i < tn * n16; i += blockDim.x) {
		int t = tn == 1 ? 0 : i / n16, r = i - t * n16;
		const float *xr = xs + t * kcap;
		float4 a = *(const float4 *)(xr + q_xsw(16 * r)), b = *(const float4 *)(xr + q_xsw(16 * r + 4)),
		       c = *(const float4 *)(xr + q_xsw(16 * r + 8)), d = *(const float4 *)(xr + q_xsw(16 * r + 12));
		xsum[t * k16 + r] = ((a.x + a.y) + (a.z + a.w)) + ((b.x + b.y) + (b.z + b.w)) + ((c.x + c.y) + (c.z + c.w)) +
		                    ((d.x + d.y) + (d.z + d.w));
	}
}

/*
** Stage rows t0..t0+tn of x (or swiglu(x, u) rounded to A, as the SwiGLU kernel would store it), values
** [k0, k0 + kc), as float into xs[t·kcap + q_xsw(i)], then each 16-value sum into xsum[t·kcap/16 + i/16]. kc is
** a multiple of 16. A decode step (tn = 1) takes its own path: each thread stages 16 values at a time
** with 16-byte loads and sums them at once (one pass, one barrier, no index division). Every thread of
** the block must call it (it synchronises).
*/
template <typename A, typename X, bool SWIGLU>
__device__ __forceinline__ void q_stage(float *xs, float *xsum, const X *x, const X *u, long long t0, int tn, long long K,
                                        long long k0, int kc, int kcap)
{
	__syncthreads(); /* every warp is done with the previous chunk */
	if (tn == 1) { /* a decode step: a thread stages 16 values at a time and sums them, one barrier */
		for (int i = threadIdx.x; i < (kc >> 4); i += blockDim.x) {
			long long at = t0 * K + k0 + 16 * i;
			float v[16];
			q_ld16v(v, x + at);
			if (SWIGLU) {
				float w[16];
				q_ld16v(w, u + at);
#pragma unroll
				for (int j = 0; j < 16; j++)
					v[j] = to_f(from_f<A>(v[j] / (1.0f + expf(-v[j])) * w[j]));
			}
			xsum[i] = q_put16(xs, 16 * i, v);
		}
		__syncthreads();
		return;
	}
	for (int e0 = threadIdx.x; e0 < tn * kc; e0 += 8 * blockDim.x) {
		float v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = e0 + j * blockDim.x, t = e / kc;
			long long at = (t0 + t) * K + k0 + (e - t * kc);
			if (e >= tn * kc) {
				v[j] = 0.0f;
			} else if (SWIGLU) {
				float g = to_f(x[at]);
				v[j] = to_f(from_f<A>(g / (1.0f + expf(-g)) * to_f(u[at])));
			} else {
				v[j] = to_f(x[at]);
			}
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = e0 + j * blockDim.x, t = e / kc;
			if (e < tn * kc)
				xs[t * kcap + q_xsw(e - t * kc)] = v[j];
		}
	}
	__syncthreads();
	q_sums(xsum, xs, tn, kc, kcap);
	__syncthreads();
}

/* ---- kernels ---- */

/*
** Decode GEMV over quantized weights: y[T,N] = x[T,K]·w[N,K]ᵀ (+ bias[N]), T small; with SWIGLU the
** input is swiglu(x, u) formed while staging (pattern B). K is a multiple of the block size.
** grid (up to ceil(N / (8/WPR·R))), block 256: block b serves the row groups b, b + gridDim.x, ...; in
** group g warp w serves rows (g·(8/WPR) + w/WPR)·R + [0, R) and the units u ≡ w % WPR of each chunk.
** x is staged TM rows at a time (TM = 1 for the batch-1 step, whose kernel then keeps one accumulator
** per row; 8 otherwise) in chunks of (8192/rows) values rounded down to a multiple of 1024. When all of
** x fits one chunk a block stages it once for all its groups, so a grid smaller than the groups (glmc
** caps it at three blocks an SM) saves the repeated staging.
*/
template <typename A, int QT, int R, int WPR, int TM, bool HAS_BIAS, bool SWIGLU>
__device__ void k_qgemv(A *y, const A *x, const A *u, const unsigned char *w, const A *bias, int T, int K, int N)
{
	GLM_SH(float4, xs4, [2048]); /* 8192 floats */
	GLM_SH_AFTER(xs4, float, xsum, [512]);
	GLM_SH_AFTER(xsum, float, red, [8][R][TM]);
	float *xs = (float *)xs4;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rg = warp / WPR, kp = warp % WPR;
	const int RPB = 8 / WPR * R; /* rows per block */
	int nrg = (N + RPB - 1) / RPB;
	long long stride = q_stride<QT>(K);
	/* all of x in one staged chunk: a block that serves several row groups stages it once */
	bool single = T <= TM && K <= ((8192 / T) & ~1023), staged = false;
	for (int bx = blockIdx.x; bx < nrg; bx += gridDim.x) { /* uniform per block */
		int n0 = bx * RPB + rg * R;
		const unsigned char *rows[R];
#pragma unroll
		for (int r = 0; r < R; r++)
			rows[r] = w + (long long)(n0 + r < N ? n0 + r : 0) * stride; /* rows past N read row 0, unused */
		for (int t0 = 0; t0 < T; t0 += TM) {
			int tn = T - t0 < TM ? T - t0 : TM;
			int kcap = (8192 / tn) & ~1023;
			float acc[R][TM];
#pragma unroll
			for (int r = 0; r < R; r++)
#pragma unroll
				for (int t = 0; t < TM; t++)
					acc[r][t] = 0.0f;
			for (int k0 = 0; k0 < K; k0 += kcap) {
				int kc = K - k0 < kcap ? K - k0 : kcap;
				if (!(single && staged))
					q_stage<A, A, SWIGLU>(xs, xsum, x, u, t0, tn, K, k0, kc, kcap);
				staged = true;
				if (n0 < N)
					q_chunk<QT, R, TM>(acc, rows, k0, kc, xs, xsum, kcap, tn, kp, WPR);
			}
#pragma unroll
			for (int r = 0; r < R; r++)
#pragma unroll
				for (int t = 0; t < TM; t++)
					if (t < tn)
						acc[r][t] = warp_sum(acc[r][t]);
			if (WPR == 1) {
				if (lane == 0)
#pragma unroll
					for (int r = 0; r < R; r++)
#pragma unroll
						for (int t = 0; t < TM; t++)
							if (t < tn && n0 + r < N) {
								float s = acc[r][t];
								if (HAS_BIAS)
									s += to_f(bias[n0 + r]);
								y[(long long)(t0 + t) * N + n0 + r] = from_f<A>(s);
							}
				continue;
			}
			if (lane == 0)
#pragma unroll
				for (int r = 0; r < R; r++)
#pragma unroll
					for (int t = 0; t < TM; t++)
						red[warp][r][t] = acc[r][t];
			__syncthreads();
			/* thread i < RPB·tn finishes row i / tn, token i % tn: the sum over the WPR warps of its group */
			int i = threadIdx.x;
			if (i < RPB * tn) {
				int row = i / tn, t = i - row * tn, g = row / R, r = row - g * R, n = bx * RPB + row;
				if (n < N) {
					float s = 0.0f;
					for (int k = 0; k < WPR; k++)
						s += red[g * WPR + k][r][t];
					if (HAS_BIAS)
						s += to_f(bias[n]);
					y[(long long)(t0 + t) * N + n] = from_f<A>(s);
				}
			}
			__syncthreads(); /* red is rewritten by the next pass (which may not stage x again) */
		}
	}
}

/*
** ---- One-token Q4_K and Q6_K GEMVs on the tensor cores (k_qgemv_mma and the kernels after it) ----
**
** Why: the FMA path (q_run) spends a byte permute and an FMA on every value, plus its scale and x
** bookkeeping: ~4.7 instructions a value for Q4_K (7.4 for Q6_K), past what the schedulers issue at the
** memory's rate. Here one mma.sync m16n8k16 (bf16 in, f32 accumulate) does 8 of a lane's products, and
** a quant word's 8 nibbles become bf16 operands in 8 instructions (qm_nib: each q as the bf16
** (16 + q)/2, exact; Q6_K's q as 128 + q, see its qm_block).
**
** Lane geometry (the mma's): lane = 4g + c. A warp serves 16 rows; lane (g, c) reads rows g and g + 8
** (A's rows) and a quarter of every block (Q4_K: the quant bytes 32c..32c+31, i.e. pair c: sub-blocks
** 2c (low nibbles) and 2c + 1 (high); Q6_K: see QmRaw<14>). B is block-diagonal: column 2c + piece holds
** x's piece (hi or lo) at lane c's positions only, so C[row][2c + piece] is the dot of lane (row, c)'s
** own values: each lane's partial sums stay its own and one scale applies to each (an mma mixes no
** lanes' scale groups). x as hi + lo (hi = bf16(x), lo = bf16(x − hi)) carries 16 significant bits;
** the products are exact and accumulate in f32. The offset: Σ(16 + q)/2·x = (Σq·x + 16·X)/2, X the
** scale group's sum of the staged (hi + lo) values (f32), so it cancels exactly.
*/

/* Staged x for the mma path: 4 values a 16-byte unit [hi0 hi2 hi1 hi3 | lo0 lo2 lo1 lo3] (the pairs
** B's registers take), unit q at qm_unit(q): two padding units every 16, so the four Q4_K lanes c of an
** mma (units 16c apart) read different banks (Q6_K's, 8 and 32 units apart, pair up: two-way
** conflicts). A 256-value block takes 72 units (1152 bytes). */
__device__ __forceinline__ int qm_unit(int q)
{
	return q + 2 * (q >> 4);
}

/* Two floats as a bf16 pair (a in the low half), each rounded to nearest even (one cvt on the device). */
__device__ __forceinline__ unsigned qm_bf2(float a, float b)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned d;
	asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(b), "f"(a));
	return d;
#else
	return (unsigned)from_f<bf16>(a).x | (unsigned)from_f<bf16>(b).x << 16;
#endif
}

/* The 32 values of group i (values 32i..32i+31 of the chunk) as hi/lo units into xu, and the sums of
** the staged values (hi + lo, exact in f32) of each 16 into xs16[2i], xs16[2i + 1]: the offset's share of
** the products then cancels exactly against them, and only q·(x − hi − lo) is lost. */
__device__ __forceinline__ void qm_put32(uint4 *xu, float *xs16, int i, const float (&v)[32])
{
	float s = 0.0f;
#pragma unroll
	for (int q = 0; q < 8; q++) {
		float a = v[4 * q], b = v[4 * q + 1], c = v[4 * q + 2], d = v[4 * q + 3];
		unsigned h02 = qm_bf2(a, c), h13 = qm_bf2(b, d); /* hi; lo = the rest, rounded */
		float ha = __uint_as_float(h02 << 16), hc = __uint_as_float(h02 & 0xffff0000u);
		float hb = __uint_as_float(h13 << 16), hd = __uint_as_float(h13 & 0xffff0000u);
		unsigned l02 = qm_bf2(a - ha, c - hc), l13 = qm_bf2(b - hb, d - hd);
		s += ((ha + __uint_as_float(l02 << 16)) + (hb + __uint_as_float(l13 << 16))) +
		     ((hc + __uint_as_float(l02 & 0xffff0000u)) + (hd + __uint_as_float(l13 & 0xffff0000u)));
		xu[qm_unit(8 * i + q)] = make_uint4(h02, h13, l02, l13);
		if (q == 3)
			xs16[2 * i] = s, s = 0.0f;
	}
	xs16[2 * i + 1] = s;
}

/*
** Stage values [k0, k0 + kc) of x (or swiglu(x, u) rounded to A) as hi/lo units into xu and each
** 16-value sum into xs16 (kc a multiple of 256). A thread takes 32 values at a time. Every thread of the
** block must call it (it synchronises).
*/
template <typename A, typename X, bool SWIGLU>
__device__ __forceinline__ void qm_stage(uint4 *xu, float *xs16, const X *x, const X *u, long long k0, int kc)
{
	__syncthreads(); /* every warp is done with the previous chunk */
	for (int i = threadIdx.x; i < (kc >> 5); i += blockDim.x) {
		float v[32];
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float t[16];
			q_ld16v(t, x + k0 + 32 * i + 16 * h);
			if (SWIGLU) {
				float m[16];
				q_ld16v(m, u + k0 + 32 * i + 16 * h);
#pragma unroll
				for (int j = 0; j < 16; j++)
					t[j] = to_f(from_f<A>(t[j] / (1.0f + expf(-t[j])) * m[j]));
			}
#pragma unroll
			for (int j = 0; j < 16; j++)
				v[16 * h + j] = t[j];
		}
		qm_put32(xu, xs16, i, v);
	}
	__syncthreads();
}

/*
** qm_stage for GEMV_PRO_RMSLATE: values [k0, k0 + kc) of x·nw (nw nullptr: x) as hi/lo units into xu,
** their 16-value sums into xs16, and the sum of squares of x over the chunk returned to every thread
** (block_sum). The norm's scale is applied after the dots, so the staged values need no row sum first.
** Every thread of the block must call it (it synchronises).
*/
template <typename X, typename NW>
__device__ __forceinline__ float qm_stage_late(uint4 *xu, float *xs16, const X *x, const NW *nw, long long k0, int kc)
{
	__syncthreads(); /* every warp is done with the previous chunk */
	float ss = 0.0f;
	for (int i = threadIdx.x; i < (kc >> 5); i += blockDim.x) {
		float v[32];
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float t[16], m[16];
			q_ld16v(t, x + k0 + 32 * i + 16 * h);
			if (nw)
				q_ld16v(m, nw + k0 + 32 * i + 16 * h);
#pragma unroll
			for (int j = 0; j < 16; j++) {
				ss += t[j] * t[j];
				v[16 * h + j] = nw ? t[j] * m[j] : t[j];
			}
		}
		qm_put32(xu, xs16, i, v);
	}
	return block_sum(ss); /* its barriers also publish the staged units */
}

/* A chunk of kc <= 32·blockDim.x values staged as floats (q_stage's swizzled layout, ops/qfused.cuh's
** qf_stage with its prologues) restaged in place as hi/lo units, its 16-value sums into xs16: every
** thread reads its group, then all write (xs must hold the units' 1152 bytes a 256-value block). Every
** thread of the block must call it. */
__device__ __forceinline__ void qm_restage(float *xs, float *xs16, int kc)
{
	int i = threadIdx.x;
	float v[32];
	if (i < (kc >> 5))
#pragma unroll
		for (int q = 0; q < 8; q++) {
			float4 f = *(const float4 *)(xs + q_xsw(32 * i + 4 * q));
			v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
		}
	__syncthreads();
	if (i < (kc >> 5))
		qm_put32((uint4 *)xs, xs16, i, v);
	__syncthreads();
}

/* c += A·B for one m16n8k16 bf16 fragment set (the PTX register layout); the CPU stand-in gathers
** the fragments with shuffles and sums in f32. */
__device__ __forceinline__ void qm_mma(float (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                       unsigned b1)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
	    "{%0,%1,%2,%3};"
	    : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
	int lane = threadIdx.x & 31, g = lane >> 2, cc = lane & 3;
	float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
	for (int q = 0; q < 4; q++) { /* the lanes (g, q) and (n, q) hold A's and B's k = 2q.., 2q + 8.. */
		unsigned ra[4] = {__shfl_sync(0xffffffffu, a0, 4 * g + q), __shfl_sync(0xffffffffu, a1, 4 * g + q),
		                  __shfl_sync(0xffffffffu, a2, 4 * g + q), __shfl_sync(0xffffffffu, a3, 4 * g + q)};
		unsigned rb[2][2];
		for (int n = 0; n < 2; n++) {
			rb[n][0] = __shfl_sync(0xffffffffu, b0, 4 * (2 * cc + n) + q);
			rb[n][1] = __shfl_sync(0xffffffffu, b1, 4 * (2 * cc + n) + q);
		}
		for (int n = 0; n < 2; n++)
			for (int r = 0; r < 2; r++) /* row g: a0a1 (k 2q, 2q+1), a4a5 = ra[2]; row g + 8: ra[1], ra[3] */
				for (int h = 0; h < 2; h++) {
					unsigned aw = ra[r + 2 * h], bw = rb[n][h];
					for (int e = 0; e < 2; e++) {
						bf16 av = {(unsigned short)(aw >> 16 * e)}, bv = {(unsigned short)(bw >> 16 * e)};
						s[2 * r + n] += to_f(av) * to_f(bv);
					}
				}
	}
	for (int i = 0; i < 4; i++)
		c[i] += s[i];
#endif
}

/*
** 4 bf16 pairs from a Q4_K quant word's nibbles (bytes 0, 2 and 1, 3; low then high nibbles): each q as
** mantissa bits 3..6 under the exponent of 8, the bf16 8 + q/2 = (16 + q)/2, exact. Why not 128 + q
** (mantissa bits 0..3, one instruction less): the tensor core's f32 sums are then dominated by the
** offset, and the error of Σq·x grows with it (2.3e-5 against the FMA kernel instead of a few 1e-6).
*/
__device__ __forceinline__ void qm_nib(unsigned w, unsigned (&o)[4])
{
	o[0] = q_andor(w << 3, 0x00780078u, 0x41004100u);
	o[1] = q_andor(w >> 5, 0x00780078u, 0x41004100u);
	o[2] = q_andor(w >> 1, 0x00780078u, 0x41004100u);
	o[3] = q_andor(w >> 9, 0x00780078u, 0x41004100u);
}

/* What a lane loads of one block of its two rows (per type). Q4_K: the heads (d, dmin, scales) and its
** 32 quant bytes. Q6_K (224-byte slots, 16-byte aligned): lane c = 2h + kp holds ql bytes 32c..32c+31
** (l = 0..31 of k = kp, low nibbles, and k = kp + 2, high), the qh bytes 32h.. of the same l, the 8
** scales of its half and d. */
template <int QT> struct QmRaw;
/* The ring's unit (a "block" of qm_run): VPB values, XB bytes of staged x, SB 16-value sums (Q8_0: half a
** superblock, its x as digits, no sums: see the Q8_0 part below). */
template <int QT> struct QmGeo { enum { VPB = 256, XB = 1152, SB = 16 }; };
template <> struct QmGeo<8> { enum { VPB = 128, XB = 480, SB = 0 }; };
template <> struct QmRaw<8> {
	uint4 q[2][2]; /* [row][pair p]: pieces c of blocks 2p and 2p + 1 of the half superblock */
	uint2 sc[2];   /* the half superblock's 4 scales, a row */
};
template <> struct QmRaw<12> {
	uint4 h[2], q[2][2];
};
template <> struct QmRaw<14> {
	uint4 ql[2][2], qh[2][2];
	uint2 sc[2]; /* the scales 8h..8h+7 of the lane's half */
	unsigned dw[2];
};

__device__ __forceinline__ void qm_load(QmRaw<12> &r, const unsigned char *row0, const unsigned char *row1, unsigned blk,
                                        int c)
{
	const unsigned char *p[2] = {row0 + blk * 144ull, row1 + blk * 144ull};
#pragma unroll
	for (int i = 0; i < 2; i++) {
		r.h[i] = q_ld16(p[i]);
		r.q[i][0] = q_ld16(p[i] + 16 + 32 * c);
		r.q[i][1] = q_ld16(p[i] + 32 + 32 * c);
	}
}

__device__ __forceinline__ void qm_load(QmRaw<14> &r, const unsigned char *row0, const unsigned char *row1, unsigned blk,
                                        int c)
{
	const unsigned char *p[2] = {row0 + blk * 224ull, row1 + blk * 224ull};
#pragma unroll
	for (int i = 0; i < 2; i++) {
		r.ql[i][0] = q_ld16(p[i] + 32 * c);
		r.ql[i][1] = q_ld16(p[i] + 32 * c + 16);
		r.qh[i][0] = q_ld16(p[i] + 128 + 32 * (c >> 1));
		r.qh[i][1] = q_ld16(p[i] + 144 + 32 * (c >> 1));
		r.sc[i] = __ldg((const uint2 *)(p[i] + 192 + 8 * (c >> 1)));
		r.dw[i] = __ldg((const unsigned *)(p[i] + 208));
	}
}

/* The same block of a tile that k_qgemv_sk copied into shared memory (row i of the tile at i·BB bytes,
** BB the block's device bytes): rows g and g + 8 of the slot, the bytes qm_load would read. */
__device__ __forceinline__ void qs_load(QmRaw<12> &r, const unsigned char *slot, int g, int c)
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const unsigned char *p = slot + (g + 8 * i) * 144;
		r.h[i] = *(const uint4 *)p;
		r.q[i][0] = *(const uint4 *)(p + 16 + 32 * c);
		r.q[i][1] = *(const uint4 *)(p + 32 + 32 * c);
	}
}

__device__ __forceinline__ void qs_load(QmRaw<14> &r, const unsigned char *slot, int g, int c)
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
		const unsigned char *p = slot + (g + 8 * i) * 224;
		r.ql[i][0] = *(const uint4 *)(p + 32 * c);
		r.ql[i][1] = *(const uint4 *)(p + 32 * c + 16);
		r.qh[i][0] = *(const uint4 *)(p + 128 + 32 * (c >> 1));
		r.qh[i][1] = *(const uint4 *)(p + 144 + 32 * (c >> 1));
		r.sc[i] = *(const uint2 *)(p + 192 + 8 * (c >> 1));
		r.dw[i] = *(const unsigned *)(p + 208);
	}
}

/* 16 bytes from global to shared memory without passing through registers (cp.async.cg: cached in L2
** only), completed by qs_wait; the CPU stand-in copies at once. Both addresses 16-byte aligned. */
__device__ __forceinline__ void qs_cp16(void *dst, const void *src)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned d = (unsigned)__cvta_generic_to_shared(dst);
	asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(d), "l"(src) : "memory");
#else
	memcpy(dst, src, 16);
#endif
}

/* Closes the thread's group of cp.async copies issued since the last one. */
__device__ __forceinline__ void qs_commit(void)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

/* Waits until at most N of the thread's committed groups are still in flight. */
template <int N> __device__ __forceinline__ void qs_wait(void)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

/* Word j (0..7) of two 16-byte loads. */
__device__ __forceinline__ unsigned qm_word(const uint4 (&u)[2], int j)
{
	const uint4 &v = u[j >> 2];
	return (j & 3) == 0 ? v.x : (j & 3) == 1 ? v.y : (j & 3) == 2 ? v.z : v.w;
}

/* (a & m) | (b & ~m) in one LOP3. */
__device__ __forceinline__ unsigned q_sel(unsigned a, unsigned b, unsigned m)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned d;
	asm("lop3.b32 %0, %1, %2, %3, 0xE4;" : "=r"(d) : "r"(a), "r"(b), "r"(m));
	return d;
#else
	return (a & m) | (b & ~m);
#endif
}

/* acc[i] += lane (g, c)'s part of row i (g, g + 8) · x for one Q4_K block: xp is the lane's staged units
** of the block (or the zero units, for a lane that holds no B column), xs the block's 16-value sums. */
__device__ __forceinline__ void qm_block(float (&acc)[2], const QmRaw<12> &r, const char *xp, const float *xs, int c)
{
	float cl[4] = {0.0f, 0.0f, 0.0f, 0.0f}, ch[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
	for (int j = 0; j < 8; j++) {
		unsigned o0[4], o1[4];
		qm_nib(qm_word(r.q[0], j), o0);
		qm_nib(qm_word(r.q[1], j), o1);
		uint2 bl = *(const uint2 *)(xp + 16 * j), bh = *(const uint2 *)(xp + 128 + 16 * j);
		qm_mma(cl, o0[0], o1[0], o0[1], o1[1], bl.x, bl.y);
		qm_mma(ch, o0[2], o1[2], o0[3], o1[3], bh.x, bh.y);
	}
	float4 x4 = *(const float4 *)(xs + 4 * c); /* sub-block 2c: the 16-sums 4c, 4c + 1; 2c + 1: the next two */
	float Xl = x4.x + x4.y, Xh = x4.z + x4.w;
#pragma unroll
	for (int i = 0; i < 2; i++) {
		unsigned sc, m;
		q_scale_min2(r.h[i], c, sc, m);
		float d = q_h2f(r.h[i].x), dmin = q_h2f(r.h[i].x >> 16);
		/* Σq·x = 2C − 16X: a = 2·d·sc multiplies C, b = 8a + dmin·m the sub-block's x sum */
		float al = 2.0f * d * (float)(sc & 0xffu), ah = 2.0f * d * (float)(sc >> 8 & 0xffu);
		float bl = 8.0f * al + dmin * (float)(m & 0xffu), bh = 8.0f * ah + dmin * (float)(m >> 8 & 0xffu);
		acc[i] += al * (cl[2 * i] + cl[2 * i + 1]) + ah * (ch[2 * i] + ch[2 * i + 1]) - (bl * Xl + bh * Xh);
	}
}

/*
** The same for one Q6_K block: q = ql nibble | qh bits << 4 (6 bits) is formed for 4 values at a time
** by one bit select (the two qh bits shifted to bits 4..5 of each byte; bits 6..7 hold other values'
** bits, masked when the bf16 pairs are made), then each q as the bf16 128 + q (exact); a value is
** d·sc·(q − 32), so its dot is d·sc·(C − 160·X) for each 16 values of one scale. The lane's four
** groups: k = kp (low nibbles) and kp + 2 (high), each l 0..15 and 16..31.
*/
__device__ __forceinline__ void qm_block(float (&acc)[2], const QmRaw<14> &r, const char *xp, const float *xs, int c)
{
	int h = c >> 1, kp = c & 1;
	float ca[2][4] = {}, cb[2][4] = {}; /* [l half][C fragment]: k = kp, then k = kp + 2 */
	unsigned sl = 4 - 2 * kp, sh = 2 * kp;
#pragma unroll
	for (int j = 0; j < 8; j++) {
		unsigned pa[2][2], pb[2][2]; /* [row][bytes 0,2 | 1,3] */
#pragma unroll
		for (int i = 0; i < 2; i++) {
			unsigned w = qm_word(r.ql[i], j), hw = qm_word(r.qh[i], j);
			unsigned qa = q_sel(w, hw << sl, 0x0F0F0F0Fu), qb = q_sel(w >> 4, hw >> sh, 0x0F0F0F0Fu);
			pa[i][0] = q_andor(qa, 0x003F003Fu, 0x43004300u);
			pa[i][1] = q_andor(qa >> 8, 0x003F003Fu, 0x43004300u);
			pb[i][0] = q_andor(qb, 0x003F003Fu, 0x43004300u);
			pb[i][1] = q_andor(qb >> 8, 0x003F003Fu, 0x43004300u);
		}
		uint2 ba = *(const uint2 *)(xp + 16 * j), bb = *(const uint2 *)(xp + 288 + 16 * j);
		qm_mma(ca[j >> 2], pa[0][0], pa[1][0], pa[0][1], pa[1][1], ba.x, ba.y);
		qm_mma(cb[j >> 2], pb[0][0], pb[1][0], pb[0][1], pb[1][1], bb.x, bb.y);
	}
	/* the 16-sums of k = kp (8h + 2kp, + 1) and k = kp + 2 (4 further) */
	float2 xa = *(const float2 *)(xs + 8 * h + 2 * kp), xb = *(const float2 *)(xs + 8 * h + 2 * kp + 4);
#pragma unroll
	for (int i = 0; i < 2; i++) {
		unsigned wa = r.sc[i].x >> 16 * kp, wb = r.sc[i].y >> 16 * kp; /* scales 8h + 2k + l/16 */
		float sa0 = (float)(signed char)(wa & 0xffu), sa1 = (float)(signed char)(wa >> 8 & 0xffu);
		float sb0 = (float)(signed char)(wb & 0xffu), sb1 = (float)(signed char)(wb >> 8 & 0xffu);
		float d = q_h2f(r.dw[i]);
		float s = sa0 * ((ca[0][2 * i] + ca[0][2 * i + 1]) - 160.0f * xa.x) +
		          sa1 * ((ca[1][2 * i] + ca[1][2 * i + 1]) - 160.0f * xa.y) +
		          sb0 * ((cb[0][2 * i] + cb[0][2 * i + 1]) - 160.0f * xb.x) +
		          sb1 * ((cb[1][2 * i] + cb[1][2 * i + 1]) - 160.0f * xb.y);
		acc[i] += d * s;
	}
}

/*
** ---- Q8_0 on the tensor cores: int8 products, exact ----
**
** Not emitted by glmc: in GLM-4.7-Flash's and Llama-3-8B's plans these kernels were slower than the FMA
** loop, their 128-row blocks leaving the grids a fraction of a wave (bench/NOTES.md entry 42); tested
** (tests/simt, tests/gpu/test_qgemv) and timed (bench/gemv's Q8mma rows) for a geometry that fits.
**
** A Q8_0 quant is an int8, the tensor core's own integer operand, so the weights go into
** mma.sync.m16n8k32.s8.s8 as loaded, without a conversion. x is staged once a chunk as three signed 8-bit
** digits of a fixed-point value: v·2^S rounded to the integer x' (|x'| < 2^22 + 1, S from the chunk's
** largest |v|, q8_scale), x' = d0 + 256·d1 + 65536·d2 with each digit in [-128, 127]. B's columns 0..2
** are the digit planes (3..7 zero), so C[row][n] = Σ q·d_n over one Q8_0 block (32 values: one mma's k),
** exact in int32. Lane (g, 0) holds columns 0 and 1 (joined as C0 + 256·C1, exact), lane (g, 1) column 2
** (taken times 65536 in float), lanes 2 and 3 zeros; each block's sum is scaled by its d and 2^-S. What
** is lost is x's rounding to 22 bits below the chunk's largest value and the float sums over blocks.
**
** The ring's unit is half a superblock (128 values, 4 Q8_0 blocks): lane (g, c) loads pieces c of rows g
** and g + 8 (one 16-byte word for blocks 2p and 2p + 1, q8_piece) and the unit's 4 scales of each row.
** The mma's k slots 4c..4c+3 and 16+4c..16+4c+3 take values 8c..8c+3 and 8c+4..8c+7 of the block, for A
** and B alike (an integer sum in any order is the same sum). Staged digits: unit i at 480i, plane n at
** 160n, values in order; the planes lie 160 bytes apart so the 12 lanes reading them hit distinct banks.
*/

/* c += A·B for one m16n8k32 s8 fragment set; the CPU stand-in gathers the fragments with shuffles. */
__device__ __forceinline__ void qm_mma_s8(int (&c)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3, unsigned b0,
                                          unsigned b1)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
	    : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
	    : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
	int lane = threadIdx.x & 31, g = lane >> 2, cc = lane & 3;
	int s[4] = {0, 0, 0, 0};
	for (int q = 0; q < 4; q++) { /* lane (g, q): A's k 4q.. (a0 row g, a1 row g + 8) and 16+4q.. (a2, a3) */
		unsigned ra[4] = {__shfl_sync(0xffffffffu, a0, 4 * g + q), __shfl_sync(0xffffffffu, a1, 4 * g + q),
		                  __shfl_sync(0xffffffffu, a2, 4 * g + q), __shfl_sync(0xffffffffu, a3, 4 * g + q)};
		for (int n = 0; n < 2; n++) { /* lane (col, q): B's k 4q.. (b0) and 16+4q.. (b1) of column col */
			unsigned rb0 = __shfl_sync(0xffffffffu, b0, 4 * (2 * cc + n) + q);
			unsigned rb1 = __shfl_sync(0xffffffffu, b1, 4 * (2 * cc + n) + q);
			for (int r = 0; r < 2; r++)
				for (int e = 0; e < 4; e++)
					s[2 * r + n] += (int)(signed char)(ra[r] >> 8 * e) * (int)(signed char)(rb0 >> 8 * e) +
					                (int)(signed char)(ra[r + 2] >> 8 * e) * (int)(signed char)(rb1 >> 8 * e);
		}
	}
	for (int i = 0; i < 4; i++)
		c[i] += s[i];
#endif
}

__device__ __forceinline__ void qm_load(QmRaw<8> &r, const unsigned char *row0, const unsigned char *row1, unsigned blk,
                                        int c)
{
	const unsigned char *p[2] = {row0 + (blk >> 1) * 272ull, row1 + (blk >> 1) * 272ull};
	int h = (int)(blk & 1);
#pragma unroll
	for (int i = 0; i < 2; i++) {
		r.q[i][0] = q_ld16(p[i] + q8_piece(4 * h, c));
		r.q[i][1] = q_ld16(p[i] + q8_piece(4 * h + 2, c));
		r.sc[i] = __ldg((const uint2 *)(p[i] + 8 * h));
	}
}

/* acc[i] += lane (g, c)'s part of row i (g, g + 8) · x over the 4 Q8_0 blocks of a ring unit: xp the lane's
** digit plane of the unit (or zeros), xs[0] the chunk's 2^-S (q8_stage). */
__device__ __forceinline__ void qm_block(float (&acc)[2], const QmRaw<8> &r, const char *xp, const float *xs, int c)
{
	float wc = (c == 1 ? 65536.0f : 1.0f) * xs[0];
#pragma unroll
	for (int j = 0; j < 4; j++) {
		uint2 b = *(const uint2 *)(xp + 32 * j);
		const uint4 &w0 = r.q[0][j >> 1], &w1 = r.q[1][j >> 1];
		int C[4] = {0, 0, 0, 0};
		qm_mma_s8(C, (j & 1) ? w0.z : w0.x, (j & 1) ? w1.z : w1.x, (j & 1) ? w0.w : w0.y, (j & 1) ? w1.w : w1.y, b.x,
		          b.y);
#pragma unroll
		for (int i = 0; i < 2; i++) {
			unsigned sw = (j >> 1) ? r.sc[i].y : r.sc[i].x;
			float d = q_h2f(sw >> 16 * (j & 1));
			acc[i] += d * wc * (float)(C[2 * i] + 256 * C[2 * i + 1]);
		}
	}
}

/* The chunk's scale from its largest |v| (m; infinite when some v is inf or NaN): x' = rint(v·p) with p =
** 2^S, S = 21 − floor(log2 m) (so |x'| <= 2^22), at most 126 (m zero or tiny); *f = 2^-S, NaN for a bad m
** (every result of the chunk then NaN, as a float dot would be). */
__device__ __forceinline__ float q8_scale(float m, float *f)
{
	unsigned eb = __float_as_uint(m) >> 23 & 255u;
	if (eb == 255u) {
		*f = __uint_as_float(0x7fc00000u);
		return 0.0f;
	}
	int S = eb ? 21 - ((int)eb - 127) : 126;
	S = S > 126 ? 126 : S;
	*f = __uint_as_float((unsigned)(127 - S) << 23);
	return __uint_as_float((unsigned)(S + 127) << 23);
}

/* v·p rounded to an integer as three balanced digits (bytes 0, 1, 2 of the result). */
__device__ __forceinline__ unsigned q8_digits(float v, float p)
{
	int x = __float2int_rn(v * p);
	int d0 = (int)(signed char)(x & 255), r = (x - d0) >> 8;
	int d1 = (int)(signed char)(r & 255), d2 = (r - d1) >> 8;
	return (unsigned)(d0 & 255) | (unsigned)(d1 & 255) << 8 | (unsigned)(d2 & 255) << 16;
}

/* The 32 values of group i (values 32i..32i+31 of the chunk) as digits into xd (unit i/4, 32(i%4) into each
** plane). */
__device__ __forceinline__ void q8_put32(unsigned char *xd, int i, const float (&v)[32], float p)
{
	unsigned dg[32];
#pragma unroll
	for (int j = 0; j < 32; j++)
		dg[j] = q8_digits(v[j], p);
	unsigned char *b = xd + 480 * (i >> 2) + 32 * (i & 3);
#pragma unroll
	for (int n = 0; n < 3; n++) {
		unsigned w[8], sel = (unsigned)n | (unsigned)(n + 4) << 4;
#pragma unroll
		for (int q = 0; q < 8; q++)
			w[q] = __byte_perm(__byte_perm(dg[4 * q], dg[4 * q + 1], sel), __byte_perm(dg[4 * q + 2], dg[4 * q + 3], sel),
			                   0x5410);
		*(uint4 *)(b + 160 * n) = make_uint4(w[0], w[1], w[2], w[3]);
		*(uint4 *)(b + 160 * n + 16) = make_uint4(w[4], w[5], w[6], w[7]);
	}
}

/* |v| for the chunk's largest value, inf for NaN (so a NaN anywhere gives NaN results, q8_scale). */
__device__ __forceinline__ float q8_abs(float v)
{
	return v == v ? fabsf(v) : __uint_as_float(0x7f800000u);
}

/* The block's sum of ss and largest m (one pair of barriers for both); every thread gets them. */
__device__ __forceinline__ void q8_block_sum_max(float &ss, float &m)
{
	GLM_SH_LANE(float, ps, [32]);
	GLM_SH_LANE(float, pm, [32]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
	ss = warp_sum(ss), m = warp_max(m);
	__syncthreads();
	if (lane == 0)
		ps[warp] = ss, pm[warp] = m;
	__syncthreads();
	ss = warp_sum(lane < nw ? ps[lane] : 0.0f), m = warp_max(lane < nw ? pm[lane] : 0.0f);
}

/*
** qm_stage's contract for Q8_0: values [k0, k0 + kc) of x (or swiglu(x, u) rounded to A) as digits into xd,
** the chunk's 2^-S into xs16[0]. NORM (qm_stage_late's contract): x·nw staged, the sum of squares of x
** returned. Each thread keeps its first group of 32 in registers across the block's max (kc <= 32·blockDim
** needs no second read). Every thread of the block must call it (it synchronises).
*/
template <typename A, typename X, typename NW, bool SWIGLU, bool NORM>
__device__ __forceinline__ float q8_stage(unsigned char *xd, float *xs16, const X *x, const X *u, const NW *nw, long long k0,
                                          int kc)
{
	__syncthreads(); /* every warp is done with the previous chunk */
	float ss = 0.0f, m = 0.0f;
	/* group i's 32 formed values into v, the sum of squares of x into sq and the largest |v| into mx */
	auto load = [&](int i, float (&v)[32], float &sq, float &mx) {
#pragma unroll
		for (int h = 0; h < 2; h++) {
			float t[16];
			q_ld16v(t, x + k0 + 32 * i + 16 * h);
			if (SWIGLU) {
				float g[16];
				q_ld16v(g, u + k0 + 32 * i + 16 * h);
#pragma unroll
				for (int j = 0; j < 16; j++)
					t[j] = to_f(from_f<A>(t[j] / (1.0f + expf(-t[j])) * g[j]));
			}
			if (NORM) {
				float w[16];
				if (nw)
					q_ld16v(w, nw + k0 + 32 * i + 16 * h);
#pragma unroll
				for (int j = 0; j < 16; j++) {
					sq += t[j] * t[j];
					t[j] = nw ? t[j] * w[j] : t[j];
				}
			}
#pragma unroll
			for (int j = 0; j < 16; j++) {
				v[16 * h + j] = t[j];
				mx = fmaxf(mx, q8_abs(t[j]));
			}
		}
	};
	int ng = kc >> 5, i0 = threadIdx.x;
	float v[32];
	if (i0 < ng)
		load(i0, v, ss, m);
	for (int i = i0 + blockDim.x; i < ng; i += blockDim.x) { /* fewer than kc/32 threads: the max first */
		float t[32];
		load(i, t, ss, m);
	}
	q8_block_sum_max(ss, m);
	float f, p = q8_scale(m, &f);
	if (i0 < ng)
		q8_put32(xd, i0, v, p);
	for (int i = i0 + blockDim.x; i < ng; i += blockDim.x) {
		float t[32], ss2 = 0.0f, m2 = 0.0f; /* counted in the first pass */
		load(i, t, ss2, m2);
		q8_put32(xd, i, t, p);
	}
	if (threadIdx.x == 0)
		xs16[0] = f;
	__syncthreads();
	return ss;
}

/* qm_restage's contract for Q8_0: a chunk staged as floats (q_stage's swizzled layout) restaged in place
** as digits, 2^-S into xs16[0] (kc <= 32·blockDim). Every thread of the block must call it. */
__device__ __forceinline__ void q8_restage(float *xs, float *xs16, int kc)
{
	int i = threadIdx.x;
	float v[32], m = 0.0f, ss = 0.0f;
	if (i < (kc >> 5))
#pragma unroll
		for (int q = 0; q < 8; q++) {
			float4 f = *(const float4 *)(xs + q_xsw(32 * i + 4 * q));
			v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
			m = fmaxf(fmaxf(m, q8_abs(f.x)), fmaxf(q8_abs(f.y), fmaxf(q8_abs(f.z), q8_abs(f.w))));
		}
	q8_block_sum_max(ss, m); /* its barriers: every thread has read its group */
	float f, p = q8_scale(m, &f);
	if (i < (kc >> 5))
		q8_put32((unsigned char *)xs, i, v, p);
	if (threadIdx.x == 0)
		xs16[0] = f;
	__syncthreads();
}

/* The stagings of the tensor-core kernels for type QT: hi/lo units (K-quants) or digits (Q8_0). */
template <int QT, typename A, typename X, bool SWIGLU>
__device__ __forceinline__ void qm_stage_t(uint4 *xu, float *xs16, const X *x, const X *u, long long k0, int kc)
{
	if constexpr (QT == 8)
		q8_stage<A, X, X, SWIGLU, false>((unsigned char *)xu, xs16, x, u, (const X *)nullptr, k0, kc);
	else
		qm_stage<A, X, SWIGLU>(xu, xs16, x, u, k0, kc);
}

template <int QT, typename X, typename NW>
__device__ __forceinline__ float qm_stage_late_t(uint4 *xu, float *xs16, const X *x, const NW *nw, long long k0, int kc)
{
	if constexpr (QT == 8)
		return q8_stage<X, X, NW, false, true>((unsigned char *)xu, xs16, x, x, nw, k0, kc);
	else
		return qm_stage_late<X, NW>(xu, xs16, x, nw, k0, kc);
}

template <int QT> __device__ __forceinline__ void qm_restage_t(float *xs, float *xs16, int kc)
{
	if constexpr (QT == 8)
		q8_restage(xs, xs16, kc);
	else
		qm_restage(xs, xs16, kc);
}

/* The first D − 1 loads of the ring (blocks kp, kp + kstep, ... of the chunk) of a warp that has rows. */
template <int QT, int D>
__device__ __forceinline__ void qm_preload(QmRaw<QT> (&r)[D], bool on, const unsigned char *row0,
                                           const unsigned char *row1, unsigned kb0, int nb, int kp, int kstep, int c)
{
#pragma unroll
	for (int i = 0; i + 1 < D; i++)
		if (on && kp + i * kstep < nb)
			qm_load(r[i], row0, row1, kb0 + kp + i * kstep, c);
}

/* acc += the lane's part of rows g, g + 8 · x over blocks kp, kp + kstep, ... < nb of the staged chunk
** (first block kb0 of the rows), D blocks' loads in flight (the ring preloaded by qm_preload). The lane
** reads its B pieces at boff in the block's units (xu), or at boff in the zero units (zu) when it holds
** no B column (act false). */
template <int QT, int D>
__device__ __forceinline__ void qm_run(float (&acc)[2], QmRaw<QT> (&r)[D], const unsigned char *row0,
                                       const unsigned char *row1, unsigned kb0, int nb, int kp, int kstep, const uint4 *xu,
                                       const float *xs16, const uint4 *zu, int boff, bool act, int c)
{
	for (int b = kp; b < nb; b += D * kstep) {
#pragma unroll
		for (int i = 0; i < D; i++) {
			int bi = b + i * kstep, bl = bi + (D - 1) * kstep;
			if (bi >= nb)
				break;
			if (bl < nb)
				qm_load(r[(i + D - 1) % D], row0, row1, kb0 + bl, c);
			const char *xp = act ? (const char *)xu + QmGeo<QT>::XB * bi + boff : (const char *)zu + boff;
			qm_block(acc, r[i], xp, xs16 + QmGeo<QT>::SB * bi, c);
		}
	}
}

/* Lane (g, c)'s B offset: column g holds the pieces of lane g/2's positions (Q4_K: unit 18c of a block,
** pair c's; Q6_K: units 36h + 8kp, lane c = 2h + kp), the hi or lo half; or zeros, 16 bytes into the
** zero units (banks no active lane of the mma uses). */
template <int QT> __device__ __forceinline__ int qm_boff(int lane)
{
	int g = lane >> 2, c = lane & 3;
	if (QT == 8) /* digit plane g (< 3), the lane's 8 values; else zeros on banks no active lane reads */
		return g < 3 ? 160 * g + 8 * c : 96;
	if ((g >> 1) != c)
		return 16 + 8 * (g & 1);
	return (QT == 14 ? 16 * (36 * (c >> 1) + 8 * (c & 1)) : 16 * 18 * c) + 8 * (g & 1);
}

/* Whether lane (g, c) holds a B column with values (else it reads zeros): Q8_0's digit planes 0..2, the
** K-quants' column g = 2c + piece. */
template <int QT> __device__ __forceinline__ bool qm_act(int lane)
{
	int g = lane >> 2, c = lane & 3;
	return QT == 8 ? g < 3 : (g >> 1) == c;
}

/* The sum of each row's partials over its four lanes c: lane (g, 0) ends with rows g, g + 8. */
__device__ __forceinline__ void qm_lanesum(float (&acc)[2])
{
#pragma unroll
	for (int i = 0; i < 2; i++) {
		acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 1);
		acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], 2);
	}
}

/* Row j of a block's 128/P rows summed over its group's P warps (warp w serves group w / P; lane (g, 0)
** holds rows g, g + 8 after qm_lanesum), through red: thread j < 128/P gets its row's total, the others
** 0. Every thread of the block must call it. */
__device__ __forceinline__ float qm_rowsum(float (&red)[8][16], const float (&acc)[2], int P)
{
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j = threadIdx.x;
	if ((lane & 3) == 0)
		red[warp][lane >> 2] = acc[0], red[warp][(lane >> 2) + 8] = acc[1];
	__syncthreads();
	float s = 0.0f;
	if (j < 128 / P)
		for (int q = 0; q < P; q++)
			s += red[(j >> 4) * P + q][j & 15];
	__syncthreads(); /* red is rewritten by the next pass, which may not stage x again */
	return s;
}

/*
** Decode GEMV over Q4_K, Q6_K or Q8_0 (QT) weights on the tensor cores: y[t] = w[N,K]·x[t] (+ bias) for t < T (glmc launches
** it for T = 1; more rows are served one after another), K a multiple of 256. block 256: the block's
** row groups are 16 rows (one warp's) × 8/WPR; warp w serves group w / WPR and the blocks b ≡ w % WPR of
** each staged chunk (8192 values), with D blocks' loads in flight (the first D − 1 issued before x is
** staged). Blocks loop over row groups as k_qgemv's do, staging x once when T = 1 and K fits one chunk.
** SWIGLU stages swiglu(x, u) rounded to A.
*/
template <typename A, int QT, int WPR, bool HAS_BIAS, bool SWIGLU>
__device__ void k_qgemv_mma(A *y, const A *x, const A *u, const unsigned char *w, const A *bias, int T, int K, int N)
{
	const int D = QT == 14 ? 2 : 3; /* blocks in flight: Q6_K's take more registers (bench/NOTES.md 16) */
	const int VPB = QmGeo<QT>::VPB;
	GLM_SH128(uint4, xu, [32 * 72]);
	GLM_SH128_AFTER(xu, uint4, zu, [32]);
	GLM_SH_AFTER(zu, float, xs16, [512]);
	GLM_SH_AFTER(xs16, float, red, [8][16]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3, rg = warp / WPR,
	    kp = warp % WPR;
	const int RPB = 16 * (8 / WPR);
	int nrg = (N + RPB - 1) / RPB;
	long long stride = q_stride<QT>(K);
	if (threadIdx.x < 32)
		zu[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
	bool act = qm_act<QT>(lane); /* lane (g, c) holds B column g's values, or zeros */
	int boff = qm_boff<QT>(lane);
	bool single = T == 1 && K <= 8192, staged = false;
	for (int bx = blockIdx.x; bx < nrg; bx += gridDim.x) { /* uniform per block */
		int n0 = bx * RPB + rg * 16;
		bool on = n0 < N; /* uniform per warp */
		const unsigned char *row0 = w + (long long)(n0 + g < N ? n0 + g : 0) * stride;
		const unsigned char *row1 = w + (long long)(n0 + g + 8 < N ? n0 + g + 8 : 0) * stride;
		for (int t = 0; t < T; t++) {
			float acc[2] = {0.0f, 0.0f};
			for (int k0 = 0; k0 < K; k0 += 8192) {
				int kc = K - k0 < 8192 ? K - k0 : 8192, nb = kc / VPB;
				unsigned kb0 = (unsigned)k0 / VPB;
				QmRaw<QT> r[D]; /* a ring of D blocks' loads, the first issued before x is staged */
				qm_preload<QT, D>(r, on, row0, row1, kb0, nb, kp, WPR, c);
				if (!(single && staged))
					qm_stage_t<QT, A, A, SWIGLU>(xu, xs16, x + (long long)t * K, SWIGLU ? u + (long long)t * K : u, k0,
					                            kc);
				staged = true;
				if (on)
					qm_run<QT, D>(acc, r, row0, row1, kb0, nb, kp, WPR, xu, xs16, zu, boff, act, c);
			}
			qm_lanesum(acc);
			A *yt = y + (long long)t * N;
			if (WPR == 1) {
				if (c == 0)
#pragma unroll
					for (int i = 0; i < 2; i++) {
						int n = n0 + g + 8 * i;
						if (n < N) {
							float s = acc[i];
							if (HAS_BIAS)
								s += to_f(bias[n]);
							yt[n] = from_f<A>(s);
						}
					}
				continue;
			}
			float s = qm_rowsum(red, acc, WPR);
			int n = bx * RPB + threadIdx.x; /* thread i < RPB finishes row i */
			if (threadIdx.x < RPB && n < N) {
				if (HAS_BIAS)
					s += to_f(bias[n]);
				yt[n] = from_f<A>(s);
			}
		}
	}
}

/* Exact dequantization of value k of a row (bit for bit ops/quant.c): each float operation rounded
** explicitly, in ggml's order. The general types decode their block with qd_val; Q8_0 and the K-quants
** (their device slots) below. */
template <int QT> __device__ __forceinline__ float q_elem(const unsigned char *row, long long k)
{
	return qd_val<QT>(row + k / QGeo<QT>::BLCK * QGeo<QT>::BYTES, (int)(k % QGeo<QT>::BLCK));
}

template <> __device__ __forceinline__ float q_elem<8>(const unsigned char *row, long long k)
{
	const unsigned char *sb = row + k / 256 * 272;
	int j = (int)(k % 256) / 32, i = (int)(k % 32);
	float d = q_h2f(sb[2 * j] | sb[2 * j + 1] << 8);
	return __fmul_rn((float)(signed char)sb[q8_piece(j, i >> 3) + (i & 7)], d);
}

template <> __device__ __forceinline__ float q_elem<12>(const unsigned char *row, long long k)
{
	const unsigned char *b = row + k / 256 * 144, *s = b + 4;
	int j = (int)(k % 256) / 32, l = (int)(k % 32), sc, m;
	if (j < 4) {
		sc = s[j] & 63, m = s[j + 4] & 63;
	} else {
		sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
		m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
	}
	float d = q_h2f(b[0] | b[1] << 8), dmin = q_h2f(b[2] | b[3] << 8);
	int q = (b[16 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xf;
	return __fsub_rn(__fmul_rn(__fmul_rn(d, (float)sc), (float)q), __fmul_rn(dmin, (float)m));
}

template <> __device__ __forceinline__ float q_elem<13>(const unsigned char *row, long long k)
{
	const unsigned char *b = row + k / 256 * 176, *s = b + 4;
	int j = (int)(k % 256) / 32, l = (int)(k % 32), sc, m;
	if (j < 4) {
		sc = s[j] & 63, m = s[j + 4] & 63;
	} else {
		sc = (s[j + 4] & 0xf) | (s[j - 4] >> 6) << 4;
		m = (s[j + 4] >> 4) | (s[j] >> 6) << 4;
	}
	float d = q_h2f(b[0] | b[1] << 8), dmin = q_h2f(b[2] | b[3] << 8);
	int q = ((b[48 + 32 * (j / 2) + l] >> (4 * (j % 2))) & 0xf) + (((b[16 + l] >> j) & 1) ? 16 : 0);
	return __fsub_rn(__fmul_rn(__fmul_rn(d, (float)sc), (float)q), __fmul_rn(dmin, (float)m));
}

template <> __device__ __forceinline__ float q_elem<14>(const unsigned char *row, long long k)
{
	const unsigned char *b = row + k / 256 * 224;
	int i = (int)(k % 256), h = i / 128, kk = (i % 128) / 32, l = i % 32;
	int lo = (b[64 * h + l + 32 * (kk % 2)] >> (4 * (kk / 2))) & 0xf;
	int q = (lo | ((b[128 + 32 * h + l] >> (2 * kk)) & 3) << 4) - 32;
	float d = q_h2f(b[208] | b[209] << 8);
	return __fmul_rn(__fmul_rn(d, (float)(signed char)b[192 + 8 * h + 2 * kk + l / 16]), (float)q);
}

/* Embedding lookup from a quantized table [V, C]: y[t, c] = dequant(table[ids[t]])[c].
** grid (ceil(C/256), T), block 256. */
template <typename A, int QT>
__device__ void k_qembedding(A *y, const unsigned char *table, const int *ids, int T, int C)
{
	int c = blockIdx.x * blockDim.x + threadIdx.x, t = blockIdx.y;
	if (c >= C || t >= T)
		return;
	y[(long long)t * C + c] = from_f<A>(q_elem<QT>(table + (long long)ids[t] * q_stride<QT>(C), c));
}

/* Dequantize a whole [rows, K] weight into y (n = rows·K values), exactly. grid (ceil(n/256)), block 256. */
template <typename A, int QT>
__device__ void k_qdequant(A *y, const unsigned char *w, long long n, int K)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	y[i] = from_f<A>(q_elem<QT>(w + i / K * q_stride<QT>(K), i % K));
}

/*
** Prefill GEMM over a quantized weight: k_linear_gemm with the weight tile dequantized (exactly) as it
** is loaded. grid (ceil(N/64), ceil(T/64)), block 256. glmrun may instead dequantize the whole weight
** into scratch and call cuBLASLt for long prompts (runtime/cuda.c).
*/
template <typename A, int QT, bool HAS_BIAS>
__device__ void k_qlinear_gemm(A *y, const A *x, const unsigned char *w, const A *bias, int T, int K, int N)
{
	const int LD = 68;
	GLM_SH(float4, xs4, [32 * LD / 4]);
	GLM_SH_AFTER(xs4, float4, ws4, [32 * LD / 4]);
	float *xs = (float *)xs4, *ws = (float *)ws4;
	int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
	int n0 = blockIdx.x * 64, t0 = blockIdx.y * 64;
	long long stride = q_stride<QT>(K);
	float acc[4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
			acc[i][j] = 0.0f;
	for (int k0 = 0; k0 < K; k0 += 32) {
		float xv[8], wv[8];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = tid + 256 * j, r = e >> 5, kk = k0 + (e & 31), t = t0 + r, n = n0 + r;
			xv[j] = (t < T && kk < K) ? to_f(x[(long long)t * K + kk]) : 0.0f;
			wv[j] = (n < N && kk < K) ? q_elem<QT>(w + (long long)n * stride, kk) : 0.0f;
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = tid + 256 * j, r = e >> 5, k = e & 31;
			xs[k * LD + r] = xv[j];
			ws[k * LD + r] = wv[j];
		}
		__syncthreads();
#pragma unroll 8
		for (int k = 0; k < 32; k++) {
			float4 a = *(const float4 *)(xs + k * LD + ty * 4);
			float4 b = *(const float4 *)(ws + k * LD + tx * 4);
			float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
			for (int i = 0; i < 4; i++)
#pragma unroll
				for (int j = 0; j < 4; j++)
					acc[i][j] += av[i] * bv[j];
		}
		__syncthreads();
	}
#pragma unroll
	for (int i = 0; i < 4; i++) {
		int t = t0 + ty * 4 + i;
		if (t >= T)
			continue;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int n = n0 + tx * 4 + j;
			if (n < N) {
				float s = acc[i][j];
				if (HAS_BIAS)
					s += to_f(bias[n]);
				y[(long long)t * N + n] = from_f<A>(s);
			}
		}
	}
}

/*
** Routed experts over quantized weights, first half (k_moe_up's contract): hid[(t·k + j)·F + f] =
** silu(gate[e, f]·x[t]) · (up[e, f]·x[t]), e = idx[t·k + j] (0 where e < 0); gate and up are [E, F, C].
** grid (ceil(F/8), k, T), block 256: one warp per f, reading only the chosen expert's two rows (one
** pass over x when they share a type).
*/
template <typename A, int QG, int QU>
__device__ void k_qmoe_up(float *hid, const A *x, const int *idx, const unsigned char *gate, const unsigned char *up,
                          int C, int F, int k)
{
	GLM_SH(float4, xs4, [2048]);
	GLM_SH_AFTER(xs4, float, xsum, [512]);
	float *xs = (float *)xs4;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int j = blockIdx.y, t = blockIdx.z, f = blockIdx.x * 8 + warp;
	long long slot = (long long)t * k + j;
	int ex = idx[slot];
	float *hr = hid + slot * F;
	if (ex < 0) { /* uniform per block */
		if (lane == 0 && f < F)
			hr[f] = 0.0f;
		return;
	}
	long long row = (long long)ex * F + (f < F ? f : 0);
	const unsigned char *gr = gate + row * q_stride<QG>(C), *ur = up + row * q_stride<QU>(C);
	float ag = 0.0f, au = 0.0f;
	for (int k0 = 0; k0 < C; k0 += 8192) {
		int kc = C - k0 < 8192 ? C - k0 : 8192;
		q_stage<A, A, false>(xs, xsum, x, (const A *)0, t, 1, C, k0, kc, 8192);
		if (f >= F)
			continue;
		if (QG == QU) {
			float acc[2][1] = {{0.0f}, {0.0f}};
			const unsigned char *rows[2] = {gr, ur};
			q_chunk<QG, 2, 1>(acc, rows, k0, kc, xs, xsum, 8192, 1, 0, 1);
			ag += acc[0][0], au += acc[1][0];
		} else {
			float a1[1][1] = {{0.0f}}, a2[1][1] = {{0.0f}};
			const unsigned char *r1[1] = {gr}, *r2[1] = {ur};
			q_chunk<QG, 1, 1>(a1, r1, k0, kc, xs, xsum, 8192, 1, 0, 1);
			q_chunk<QU, 1, 1>(a2, r2, k0, kc, xs, xsum, 8192, 1, 0, 1);
			ag += a1[0][0], au += a2[0][0];
		}
	}
	if (f >= F)
		return;
	ag = warp_sum(ag);
	au = warp_sum(au);
	if (lane == 0)
		hr[f] = ag / (1.0f + expf(-ag)) * au;
}

/* Lane (g, c)'s part of rows g, g + 8 of a warp's 16 rows (row0, row1) of type QT (Q4_K or Q6_K) · the
** staged x (or swiglu(x, u) rounded to A) over K values, summed over the lanes c (lane (g, 0) ends with
** both): the whole row, a chunk of 8192 values at a time, D blocks' loads in flight, the first D − 1
** asked for before the chunk is staged. on: the warp has rows (uniform per warp). Every thread of the
** block must call it (it stages). */
template <typename A, int QT, typename X, bool SWIGLU>
__device__ __forceinline__ void qm_rows(float (&acc)[2], bool on, const unsigned char *row0, const unsigned char *row1,
                                        const X *x, const X *u, int K, uint4 *xu, float *xs16, const uint4 *zu)
{
	const int D = QT == 14 ? 2 : 3, VPB = QmGeo<QT>::VPB; /* as k_qgemv_mma */
	int lane = threadIdx.x & 31, c = lane & 3;
	bool act = qm_act<QT>(lane);
	int boff = qm_boff<QT>(lane);
	acc[0] = acc[1] = 0.0f;
	for (int k0 = 0; k0 < K; k0 += 8192) {
		int kc = K - k0 < 8192 ? K - k0 : 8192, nb = kc / VPB;
		unsigned kb0 = (unsigned)k0 / VPB;
		QmRaw<QT> r[D];
		qm_preload<QT, D>(r, on, row0, row1, kb0, nb, 0, 1, c);
		qm_stage_t<QT, A, X, SWIGLU>(xu, xs16, x, u, k0, kc);
		if (on)
			qm_run<QT, D>(acc, r, row0, row1, kb0, nb, 0, 1, xu, xs16, zu, boff, act, c);
	}
	qm_lanesum(acc);
}

/*
** k_qmoe_up's contract for Q4_K (QT 12) or Q8_0 (8) gate and up on the tensor cores (k_qgemv_mma's lane
** geometry; C a multiple of 256): grid
** (ceil(F/64), k, T), block 256; warp w serves f = blockIdx.x·64 + 8w + g for g < 8, A's rows g the
** chosen expert's gate rows and g + 8 its up rows, so lane (g, 0) ends with both dots of its f. Each
** warp reads whole rows (K = C), three blocks' loads in flight.
*/
template <typename A, int QT = 12>
__device__ void k_qmoe_up_mma(float *hid, const A *x, const int *idx, const unsigned char *gate, const unsigned char *up,
                              int C, int F, int k)
{
	GLM_SH128(uint4, xu, [32 * 72]);
	GLM_SH128_AFTER(xu, uint4, zu, [32]);
	GLM_SH_AFTER(zu, float, xs16, [512]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	int j = blockIdx.y, t = blockIdx.z, f0 = blockIdx.x * 64 + 8 * warp, f = f0 + g;
	long long slot = (long long)t * k + j;
	int ex = idx[slot];
	float *hr = hid + slot * F;
	if (ex < 0) { /* uniform per block */
		if (c == 0 && f < F)
			hr[f] = 0.0f;
		return;
	}
	if (threadIdx.x < 32)
		zu[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
	bool on = f0 < F; /* uniform per warp */
	long long stride = q_stride<QT>(C), row = (long long)ex * F + (f < F ? f : 0);
	float acc[2];
	qm_rows<A, QT, A, false>(acc, on, gate + row * stride, up + row * stride, x + (long long)t * C, (const A *)0, C, xu,
	                         xs16, zu);
	if (c == 0 && f < F)
		hr[f] = acc[0] / (1.0f + expf(-acc[0])) * acc[1];
}

/*
** Routed experts, second half (k_moe_down's contract): y[t, c] = Σ_j w[t·k + j] · (down[e, c]·hid[t·k + j])
** over e = idx[t·k + j] >= 0; down is [E, C, F]. grid (ceil(C/16), T), block 256: warp w serves rows
** c = blockIdx.x·16 + 2w + {0, 1}; each expert's hid row is staged in shared memory in turn and its dot
** products finished before they are weighted, as ref_moe_ffn.
*/
template <typename A, int QD>
__device__ void k_qmoe_down(A *y, const float *hid, const int *idx, const A *w, const unsigned char *down, int C, int F,
                            int k)
{
	GLM_SH(float4, xs4, [2048]);
	GLM_SH_AFTER(xs4, float, xsum, [512]);
	float *xs = (float *)xs4;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = blockIdx.y;
	int c0 = blockIdx.x * 16 + 2 * warp;
	long long stride = q_stride<QD>(F);
	float out[2] = {0.0f, 0.0f};
	for (int j = 0; j < k; j++) {
		long long slot = (long long)t * k + j;
		int ex = idx[slot];
		if (ex < 0) /* uniform per block */
			continue;
		const unsigned char *rows[2];
#pragma unroll
		for (int r = 0; r < 2; r++)
			rows[r] = down + ((long long)ex * C + (c0 + r < C ? c0 + r : 0)) * stride;
		float acc[2][1] = {{0.0f}, {0.0f}};
		for (int k0 = 0; k0 < F; k0 += 8192) {
			int kc = F - k0 < 8192 ? F - k0 : 8192;
			q_stage<A, float, false>(xs, xsum, hid, (const float *)0, slot, 1, F, k0, kc, 8192);
			if (c0 < C)
				q_chunk<QD, 2, 1>(acc, rows, k0, kc, xs, xsum, 8192, 1, 0, 1);
		}
		float wj = to_f(w[slot]);
#pragma unroll
		for (int r = 0; r < 2; r++)
			out[r] += wj * warp_sum(acc[r][0]);
	}
	if (lane == 0)
#pragma unroll
		for (int r = 0; r < 2; r++)
			if (c0 + r < C)
				y[(long long)t * C + c0 + r] = from_f<A>(out[r]);
}

/* ---- random weights, generated on the GPU exactly as runtime/weights.c generates them on the CPU ---- */

/* splitmix64's finaliser (weights.c mix64). */
__device__ __forceinline__ unsigned long long q_mix64(unsigned long long z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Index i of a rank's part of a tensor split tp ways into its index in the whole tensor: i counts
** (outer, part, inner) units of the local tensor; the whole has part·tp along the split axis. */
__device__ __forceinline__ long long q_gmap(long long i, long long part, long long inner, int tp, int rank)
{
	long long pi = part * inner, o = i / pi, rem = i - o * pi, p = rem / inner, in = rem - p * inner;
	return ((o * tp + rank) * part + p) * inner + in;
}

/* weights.c weights_random_f16: bits of a positive half in [2^E, 2^(E+1)) (mantissa from h), subnormal
** below 2^-14, E clamped to [-24, 15]. */
__device__ __forceinline__ unsigned q_rand_f16(unsigned long long h, int E)
{
	unsigned m = (unsigned)(h & 0x3ffu);
	E = E < -24 ? -24 : E > 15 ? 15 : E;
	return E >= -14 ? (unsigned)(E + 15) << 10 | m : (0x400u | m) >> (-14 - E);
}

/* Byte g of the random tensor of type QT with rows of K values (weights.c weights_random_byte). */
template <int QT> __device__ __forceinline__ unsigned q_rand_byte(unsigned long long seed, long long K, unsigned long long g)
{
	const int B = QGeo<QT>::BYTES;
	unsigned long long blk = g / B;
	int o = (int)(g - blk * B), field = -1, E = 0;
	int lk = 63 - __clzll((long long)(K > 0 ? K : 1)), ea = -((lk + 1) >> 1);
	if (QGen<QT>::YES)
		return qrand_general(QT, o, ea, (unsigned)(q_mix64(seed + g / 8) >> (8 * (g % 8))) & 0xffu, q_mix64(~seed + blk * 2),
		                     q_mix64(~seed + blk * 2 + 1));
	if (QT == 8 && o < 2)
		field = 0, E = ea - 8;
	if ((QT == 12 || QT == 13) && o < 4)
		field = o >> 1, E = ea - (field ? 6 : (QT == 12 ? 9 : 10));
	if (QT == 14 && o >= 208)
		field = 0, E = ea - 12;
	if (field < 0)
		return (unsigned)(q_mix64(seed + g / 8) >> (8 * (g % 8))) & 0xffu;
	unsigned bits = q_rand_f16(q_mix64(~seed + blk * 2 + (unsigned long long)field), E);
	return (QT == 14 ? o - 208 : o & 1) ? bits >> 8 : bits & 0xffu;
}

/*
** Random blocks into a rank's part of a quantized weight, rows of bpr blocks at `stride` bytes (padding
** zero). Rows map to the whole tensor's rows by (part, inner, tp, rank) (a split of a leading axis),
** blocks by (cparts, crank) (a split of the last axis: the whole row has bpr·cparts blocks). K is the
** whole row's length. grid (ceil(rows·stride/256)), block 256: one thread per device byte.
*/
template <int QT>
__device__ void k_qrand(unsigned char *dst, long long rows, int bpr, long long stride, unsigned long long seed, long long K,
                        long long part, long long inner, int tp, int rank, int cparts, int crank)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= rows * stride)
		return;
	long long row = i / stride, o = i - row * stride;
	long long j = o / QGeo<QT>::DEV, ob = o - j * QGeo<QT>::DEV; /* block j's slot, byte ob */
	if (QT == 8) { /* the superblocks (q8_piece): byte ob of block j */
		long long s = o / 272;
		int p = (int)(o - s * 272), jj, e;
		if (p < 16)
			jj = p >> 1, e = p & 1;
		else
			p -= 16, jj = 2 * (p >> 6) + ((p >> 3) & 1), e = 2 + 8 * ((p >> 4) & 3) + (p & 7);
		j = 8 * s + jj, ob = e;
	}
	if (j >= bpr || ob >= QGeo<QT>::BYTES) {
		dst[i] = 0;
		return;
	}
	long long gb = q_gmap(row, part, inner, tp, rank) * bpr * cparts + (long long)crank * bpr + j;
	dst[i] = (unsigned char)q_rand_byte<QT>(seed, K, (unsigned long long)gb * QGeo<QT>::BYTES + ob);
}

/*
** Random float weights (weights.c weights_random_f32, same hash and the same float operations, each
** rounded explicitly): value base + a·u, u uniform in [-1, 1) from 24 hash bits, a = 1/sqrt(cols) for
** matrices (0.1 for vectors, base 1). Rounded to W. grid (ceil(n/256)), block 256.
*/
template <typename W>
__device__ void k_rand_float(W *dst, long long n, unsigned long long seed, int cols, int vec, long long part,
                             long long inner, int tp, int rank)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	unsigned long long gi = (unsigned long long)q_gmap(i, part, inner, tp, rank);
	float u = __fsub_rn(__fmul_rn((float)((double)(q_mix64(seed + gi) >> 40) * (1.0 / 16777216.0)), 2.0f), 1.0f);
	float a = vec ? 0.1f : __fdiv_rn(1.0f, __fsqrt_rn((float)cols));
	dst[i] = from_f<W>(__fadd_rn(vec ? 1.0f : 0.0f, __fmul_rn(a, u)));
}
