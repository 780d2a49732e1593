/*
** ops/quant.h — ggml tensor types: the id table (real ggml ids, as stored in GGUF tensor infos), block
** geometry, and CPU dequantization to float32 that is bit-exact against ggml's own `to_float` for every
** type listed as supported below (checked against ggml's output for the 4-8-bit types, against gguf-py's
** numpy decoders for the IQ1/IQ2/IQ3 grid types, TQ1_0, TQ2_0 and NVFP4; their codebooks are
** ops/quant_grids.h). Blocks are read byte by byte (little-endian), so any source alignment works (GGUF
** blocks of 18, 22, 34 or 17 bytes are only byte- or 2-byte-aligned).
*/
#ifndef GLM_QUANT_H
#define GLM_QUANT_H

#include <stddef.h>
#include <stdint.h>

/* ggml_type ids (include/ggml.h enum ggml_type). Ids 4, 5, 31-33 and 36-38 were removed from ggml;
** they keep their names for messages but have no block geometry. */
enum {
	QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7, QT_Q8_0 = 8, QT_Q8_1 = 9,
	QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12, QT_Q5_K = 13, QT_Q6_K = 14, QT_Q8_K = 15,
	QT_IQ2_XXS = 16, QT_IQ2_XS = 17, QT_IQ3_XXS = 18, QT_IQ1_S = 19, QT_IQ4_NL = 20, QT_IQ3_S = 21,
	QT_IQ2_S = 22, QT_IQ4_XS = 23, QT_I8 = 24, QT_I16 = 25, QT_I32 = 26, QT_I64 = 27, QT_F64 = 28,
	QT_IQ1_M = 29, QT_BF16 = 30, QT_TQ1_0 = 34, QT_TQ2_0 = 35, QT_MXFP4 = 39, QT_NVFP4 = 40,
	QT_Q1_0 = 41, QT_Q2_0 = 42,
	QT_COUNT = 43
};

typedef struct {
	int id;
	const char *name;     /* "Q4_K"; NULL for ids ggml never had */
	int blck;             /* elements per block; 0 for removed types */
	int bytes;            /* bytes per block; 0 for removed types */
	int dequant;          /* 1 when quant_dequant handles it */
} QuantType;

/* The table entry for a type id; NULL when the id is outside what ggml ever defined. */
const QuantType *quant_type(int type);

/* "Q4_K"; removed ids give their old name ("Q4_2"); ids ggml never defined give "unknown". Never NULL,
** so it is safe inside printf. */
const char *quant_type_name(int type);

/* Type id from its name ("q8_0" or "Q8_0"); -1 when unknown. */
int quant_type_from_name(const char *name);

/* Elements per block and bytes per block; 0 when the type has no geometry (removed or unknown). */
int quant_block_size(int type);
/* The block size of a type whose blocks the GPU kernels read directly (every block type glmc reads), or 0:
** such a weight with whole-block rows may stay quantized on the GPU (compiler/passes/select.c decides; the
** plan reader checks a plan's resident types against it). */
int quant_gpu_block(int qtype);
size_t quant_block_bytes(int type);

/* Bytes of one row of n elements; 0 when the type has no geometry, n < 0, n is not a multiple of the
** block size or the size would overflow. */
size_t quant_row_bytes(int type, int64_t n);

/* Bytes of one block as the GPU keeps it: the GGUF block, except Q6_K's 210 bytes in a 224-byte slot
** (zero padded), so every block starts 16-byte aligned (ops/quant.cuh QGeo::DEV). */
size_t quant_dev_block_bytes(int type);

/* Bytes of one row of n elements as the GPU keeps a block-quantized weight (ops/quant.cuh q_stride):
** its blocks in device slots (Q8_0: whole 272-byte superblocks of 8 blocks), rounded up to a multiple of
** 16; the other types (quant.cuh's general path, Q4_K/Q5_K/Q6_K/Q8_0 aside) their file bytes, unpadded;
** 0 when quant_row_bytes is. */
size_t quant_dev_row_bytes(int type, int64_t n);

/* A row of n elements whose GGUF bytes start at row (a buffer of quant_dev_row_bytes) moved into the
** device layout in place: each block to its slot, the slot's tail zeroed (Q6_K), or each 8 blocks regrouped
** into a superblock (Q8_0, ops/quant.c q8_dev_pack). Nothing for the other types. */
void quant_dev_spread(int type, uint8_t *row, int64_t n);

/* 1 when quant_dequant supports the type. */
int quant_supported(int type);

/* Dequantize n elements (a multiple of the block size) from src into dst, exactly as ggml's to_float.
** Returns 0, or -1 for an unsupported type or an n that is not a whole number of blocks. */
int quant_dequant(int type, const void *src, float *dst, size_t n);

/* Quantize n float32 values (a multiple of 32) to Q8_0 with the rounding of ggml's
** quantize_row_q8_0_ref; returns bytes written (n/32*34) or 0 when n is not a multiple of 32. */
size_t quant_q8_0(const float *src, void *dst, size_t n);

/* Quantize n float32 values (a multiple of 256) to Q4_K, Q5_K or Q6_K blocks (for test checkpoints: a
** plain per-sub-block range fit in ggml's block layout, not ggml's scale search); returns bytes written,
** or 0 when n is not a multiple of 256. */
size_t quant_q4_k(const float *src, void *dst, size_t n);
size_t quant_q5_k(const float *src, void *dst, size_t n);
size_t quant_q6_k(const float *src, void *dst, size_t n);

/* IEEE half <-> float32. f32_to_f16 rounds to nearest even (subnormals, overflow to inf). */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);

#endif
