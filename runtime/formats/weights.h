/*
** runtime/formats/weights.h — one view over both checkpoint formats: a Hugging Face directory (safetensors,
** st.h) or a GGUF file or split set (gguf.h). Tensors carry their ggml type id (F32, F16 and BF16 for
** safetensors too) and their PyTorch-order shape, so binding, slicing and loading never ask which format
** they came from. Loading applies the plan's per-weight transforms (a row slot of a merged tensor, the
** q/k row permutation of llama-arch GGUF conversions) and dequantizes to float32.
*/
#ifndef GLM_WEIGHTS_H
#define GLM_WEIGHTS_H

#include "glm.h"
#include "gguf.h"
#include "st.h"

enum { WF_HF, WF_GGUF };

/* FP8 (E4M3) safetensors weights have no ggml id; they bind with this one and are dequantized with
** their block scales (<name>_scale_inv, one float per 128×128 block, as DeepSeek/GLM FP8 releases
** store them). */
#define WQ_F8_E4M3 1000

/* --random-weights q4_k_m: not one type but llama.cpp's Q4_K_M mix, chosen per tensor (compiler/passes/bind.c). */
#define WQ_MIX_Q4_K_M 1001
/* --random-weights iq_dyn: a 1-2-bit "dynamic" mix of big-MoE GGUFs, chosen per tensor (compiler/bind.c). */
#define WQ_MIX_IQ_DYN 1002

/* Bytes of one row of n elements of a stored type (ggml types and WQ_F8_E4M3); 0 when not whole. */
size_t weights_row_bytes(int qtype, int64_t n);

typedef struct {
	const char *name;
	int qtype;                   /* ggml type id (QT_*); -1 for a safetensors dtype ggml has no id for */
	const char *type_name;       /* "Q4_K", "BF16", "F8_E4M3" */
	int ndim;
	int64_t shape[4];            /* PyTorch order: shape[ndim-1] is the row length */
	const void *data;
	uint64_t nbytes;
	const char *file;            /* the file holding it */
	uint64_t off;                /* byte offset within that file */
} WTensor;

typedef struct Weights {
	int format;                  /* WF_* */
	const char *path;
	StDir st;
	Gguf gg;
	int ntensor;
	int random_qtype;            /* >= 0: no checkpoint; parameters are bound as random tensors of this type */
} Weights;

/* A directory is a Hugging Face checkpoint; a file is GGUF (or the first of a split set). */
int weights_open(Weights *w, const char *path, char *err, size_t len);
/* No checkpoint: hyperparameters from a config.json, every parameter random (random_qtype for matrices
** whose rows are whole blocks, BF16 for other matrices, F32 for vectors). */
int weights_open_random(Weights *w, const char *config, int random_qtype, char *err, size_t len);

/* Fill a random weight (for plans compiled with --random-weights): fan-in scaled uniform values, norm
** vectors around 1; deterministic per parameter name. */
void weights_random_f32(const Graph *g, const WeightRef *r, float *dst);
/*
** Random weights of block types are random GGUF blocks: byte g of the tensor (rows of K values, bytes
** numbered as stored) is weights_random_byte(qtype, seed, K, g), hash bytes with the f16 scale fields
** set so that the dequantized values are about 1/sqrt(K) in size. The seed of a parameter is
** weights_random_seed(its name). ops/quant.cuh (q_rand_byte, k_rand_float) generates the same bytes and
** floats on the GPU. weights_load_f32 returns them dequantized; F16/BF16 random weights come back
** rounded to their type.
*/
uint64_t weights_random_seed(const char *name);
uint8_t weights_random_byte(int qtype, uint64_t seed, int64_t K, uint64_t g);
/* 1 for the types --random-weights can generate: F32, F16, BF16, Q8_0, Q4_K, Q5_K, Q6_K. */
int weights_random_type_ok(int qtype);
void weights_close(Weights *w);
/* Tensor i (0 <= i < ntensor) or the one named; weights_find returns its index or -1. */
void weights_get(const Weights *w, int i, WTensor *t);
int weights_find(const Weights *w, const char *name, WTensor *t);
const char *weights_format_name(int format);

/* The IR dtype a stored type binds as: f32/f16/bf16 as themselves, ggml block types as DT_Q; -1 when
** glmc cannot read the type at all. */
int weights_dtype(int qtype);

/* Load one bound weight as float32 rows into dst (node_numel values): checks the checkpoint still holds
** what the plan recorded, applies the row transforms, dequantizes; of a weight split for tensor
** parallelism (r->split >= 0) only rank's part of tp. */
int weights_load_f32(const Weights *w, const Graph *g, const WeightRef *r, int rank, int tp, float *dst, char *err,
                     size_t len);

/* Rows [r0, r0 + nr) of rank's part of a bound weight as stored (blocks, no dequantization), with the
** plan's row transforms (slots, q/k unpermute, strided rows, stacked parts), each row written at
** dst + i·stride and zero-padded to stride bytes. A split of the last axis takes whole blocks (the
** caller checks that the part is whole blocks). For ggml block types and F32/F16/BF16. */
int weights_load_raw(const Weights *w, const Graph *g, const WeightRef *r, int rank, int tp, int64_t r0, int64_t nr,
                     uint8_t *dst, size_t stride, char *err, size_t len);

/*
** Tensor-parallel slicing: rank's part of a [rows, cols] tensor (PyTorch order, leading dims folded into
** rows) split into n equal parts along axis 0 (rows: output features / experts) or 1 (columns: input
** features), as byte ranges of the stored tensor. A column split must not cut a quantization block.
** Fills at most cap ranges; returns the count, or -1 with a message.
*/
typedef struct {
	uint64_t off, len;           /* relative to the tensor's first byte */
} WRange;
int weights_slice(const WTensor *t, int axis, int rank, int n, WRange *out, int cap, char *err, size_t len);

#endif
