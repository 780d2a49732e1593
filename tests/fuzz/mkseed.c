/*
** tests/fuzz/mkseed.c — write small valid GGUF seeds for fuzz_gguf: every metadata value type, arrays
** of numbers and strings, and one small tensor of each supported ggml type, at two alignments; and a
** small safetensors seed for fuzz_st (F32, F16, BF16, I32 tensors) when ST_DIR is given.
**   mkseed GGUF_DIR [ST_DIR]
*/
#include "gguf.h"
#include "quant.h"
#include "st.h"

#include <stdio.h>
#include <string.h>

/* One seed file: metadata of every type plus tensors of the given types. */
static int seed(const char *path, uint32_t alignment, const int *types, int ntypes)
{
	GgufWriter *w = gguf_writer_new();
	if (!w)
		return -1;
	if (alignment != 32)
		gguf_writer_set_alignment(w, alignment);
	gguf_writer_str(w, "general.architecture", "llama");
	gguf_writer_u8(w, "a.u8", 1);
	gguf_writer_i8(w, "a.i8", -2);
	gguf_writer_u16(w, "split.count", 1);
	gguf_writer_i16(w, "a.i16", -4);
	gguf_writer_u32(w, "llama.block_count", 2);
	gguf_writer_i32(w, "a.i32", -6);
	gguf_writer_f32(w, "a.f32", 1.5f);
	gguf_writer_bool(w, "a.bool", 1);
	gguf_writer_u64(w, "a.u64", 1ull << 40);
	gguf_writer_i64(w, "a.i64", -(1ll << 40));
	gguf_writer_f64(w, "a.f64", 2.25);
	const char *toks[] = {"<s>", "</s>", "a", "b c", ""};
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 5);
	int32_t ids[3] = {1, -2, 3};
	gguf_writer_arr(w, "a.arr_i32", GGUF_INT32, ids, 3);
	float fs[2] = {0.5f, -1};
	gguf_writer_arr(w, "a.arr_f32", GGUF_FLOAT32, fs, 2);
	uint8_t bytes[4096];
	for (size_t i = 0; i < sizeof bytes; i++)
		bytes[i] = (uint8_t)(i * 131 + 7);
	for (int i = 0; i < ntypes; i++) {
		int blck = quant_block_size(types[i]);
		int64_t ne[2] = {blck == 1 ? 8 : blck, 2};
		size_t nb = quant_row_bytes(types[i], ne[0]) * 2;
		char name[64];
		snprintf(name, sizeof name, "blk.%d.%s.weight", i, quant_type_name(types[i]));
		gguf_writer_tensor(w, name, types[i], 2, ne, bytes, nb);
	}
	char err[256];
	int rc = gguf_writer_write(w, path, err, sizeof err);
	if (rc)
		fprintf(stderr, "mkseed: %s\n", err);
	gguf_writer_free(w);
	return rc;
}

/* A safetensors file with one tensor of each float dtype and an integer one. */
static int seed_st(const char *path)
{
	static const uint8_t bytes[256] = {1, 2, 3, 4, 5, 6, 7, 8};
	static const int64_t s1[1] = {4}, s2[2] = {2, 3}, s3[3] = {1, 2, 2};
	StWrite t[4] = {
		{"model.embed_tokens.weight", ST_F32, 2, s2, bytes},
		{"model.norm.weight", ST_F16, 1, s1, bytes},
		{"lm_head.weight", ST_BF16, 3, s3, bytes},
		{"ids", ST_I32, 1, s1, bytes},
	};
	char err[256];
	if (st_write_file(path, t, 4, err, sizeof err)) {
		fprintf(stderr, "mkseed: %s\n", err);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2 && argc != 3) {
		fprintf(stderr, "usage: mkseed GGUF_DIR [ST_DIR]\n");
		return 2;
	}
	static const int small[] = {QT_F32, QT_Q8_0, QT_Q4_K};
	static const int all[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0, QT_Q4_1, QT_Q5_0,   QT_Q5_1,   QT_Q8_0,
	                          QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4};
	char p[1024];
	int rc = 0;
	snprintf(p, sizeof p, "%s/seed_small.gguf", argv[1]);
	rc |= seed(p, 32, small, 3);
	snprintf(p, sizeof p, "%s/seed_all.gguf", argv[1]);
	rc |= seed(p, 32, all, 16);
	snprintf(p, sizeof p, "%s/seed_align64.gguf", argv[1]);
	rc |= seed(p, 64, small, 3);
	snprintf(p, sizeof p, "%s/seed_empty.gguf", argv[1]);
	rc |= seed(p, 32, small, 0);
	if (argc == 3) {
		snprintf(p, sizeof p, "%s/seed_small.safetensors", argv[2]);
		rc |= seed_st(p);
	}
	return rc ? 1 : 0;
}
