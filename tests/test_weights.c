/*
** tests/test_weights.c — the format-independent weights layer: tensor-parallel slices of quantized and
** float tensors concatenate back to the original bytes, a column split that would cut a quantization
** block is refused; stored blocks read with row transforms and splits (weights_load_raw, what the GPU
** keeps of a quantized weight); random weights of every type --random-weights takes.
*/
#include "check.h"
#include "quant.h"
#include "ref.h"
#include "weights.h"

#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Reassemble a tensor from its n slices along axis and compare with the original bytes. */
static int roundtrip(const WTensor *t, int axis, int n, char *err, size_t len)
{
	int64_t cols = t->shape[t->ndim - 1], rows = t->nbytes / quant_row_bytes(t->qtype, cols);
	unsigned char *back = malloc(t->nbytes);
	WRange *r = malloc(sizeof *r * (size_t)rows);
	size_t at = 0;
	int ok = back && r;
	/* Rank-major for rows; for columns each row is rebuilt from the ranks' pieces in order. */
	if (ok && axis == 0)
		for (int k = 0; k < n && ok; k++) {
			int m = weights_slice(t, 0, k, n, r, (int)rows, err, len);
			ok = m == 1;
			if (ok)
				memcpy(back + at, (const unsigned char *)t->data + r[0].off, r[0].len), at += r[0].len;
		}
	else if (ok) {
		size_t rb = quant_row_bytes(t->qtype, cols);
		for (int k = 0; k < n && ok; k++) {
			int m = weights_slice(t, 1, k, n, r, (int)rows, err, len);
			ok = m == rows;
			for (int64_t i = 0; ok && i < rows; i++)
				memcpy(back + (size_t)i * rb + (size_t)k * r[i].len, (const unsigned char *)t->data + r[i].off, r[i].len);
		}
		at = t->nbytes;
	}
	ok = ok && at == t->nbytes && !memcmp(back, t->data, t->nbytes);
	free(back), free(r);
	return ok;
}

/* One [rows, cols] parameter node in a fresh graph, bound as ref describes (node 0). */
static void one_param(Graph *gr, Arena *A, int64_t rows, int64_t cols, const char *name, int dtype)
{
	graph_init(gr, A);
	Node pn = {.op = OP_PARAM, .kind = VK_WEIGHT, .dtype = dtype, .ndim = 2, .dim = {rows, cols}, .name = name,
	           .fused_into = -1};
	graph_add(gr, &pn);
}

/* weights_load_raw on the [8, 64] Q8_0 tensor q (bytes qb): whole rows padded to a 16-byte stride, a
** row slot, rank 1 of a 2-way row split and of a 2-way column split (one block of each row). */
static void check_load_raw(const Weights *wt, const unsigned char *qb)
{
	char err[512];
	Arena A = {0};
	Graph gr;
	size_t rb = 68, st = quant_dev_row_bytes(QT_Q8_0, 64);
	unsigned char out[8 * 272];
	WeightRef ref = {.node = 0, .source = "q", .qtype = QT_Q8_0, .dtype = DT_Q, .nbytes = 8 * 68, .split = -1};
	one_param(&gr, &A, 8, 64, "q", DT_Q);
	memset(out, 0xee, sizeof out);
	int rc = weights_load_raw(wt, &gr, &ref, 0, 1, 0, 8, out, st, err, sizeof err), ok = st == 272 && !rc;
	for (int i = 0; ok && i < 8; i++) {
		ok = !memcmp(out + i * st, qb + i * rb, rb);
		for (size_t k = rb; ok && k < st; k++)
			ok = out[i * st + k] == 0;
	}
	check(ok, "raw Q8_0 rows at the device stride (whole superblocks), padding zeroed", "rc %d stride %zu: %s", rc, st, err);
	rc = weights_load_raw(wt, &gr, &ref, 0, 1, 5, 3, out, st, err, sizeof err);
	check(!rc && !memcmp(out, qb + 5 * rb, rb) && !memcmp(out + 2 * st, qb + 7 * rb, rb), "raw rows [5, 8) alone", "%s",
	      err);
	arena_free(&A);
	one_param(&gr, &A, 3, 64, "q", DT_Q);
	ref.row0 = 2, ref.slot_rows = 1;
	rc = weights_load_raw(wt, &gr, &ref, 0, 1, 0, 3, out, st, err, sizeof err);
	check(!rc && !memcmp(out, qb + 2 * rb, rb) && !memcmp(out + 2 * st, qb + 4 * rb, rb), "raw row slot [2, 5)", "%s",
	      err);
	arena_free(&A);
	ref.row0 = 0, ref.slot_rows = 0, ref.split = 0;
	one_param(&gr, &A, 4, 64, "q", DT_Q);
	rc = weights_load_raw(wt, &gr, &ref, 1, 2, 0, 4, out, st, err, sizeof err);
	check(!rc && !memcmp(out, qb + 4 * rb, rb) && !memcmp(out + 3 * st, qb + 7 * rb, rb), "raw rank 1 of 2 by rows",
	      "%s", err);
	arena_free(&A);
	ref.split = 1;
	one_param(&gr, &A, 8, 32, "q", DT_Q);
	size_t st2 = quant_dev_row_bytes(QT_Q8_0, 32);
	rc = weights_load_raw(wt, &gr, &ref, 1, 2, 0, 8, out, st2, err, sizeof err);
	ok = !rc && st2 == 272;
	for (int i = 0; ok && i < 8; i++)
		ok = !memcmp(out + i * st2, qb + i * rb + 34, 34) && out[i * st2 + 34] == 0;
	check(ok, "raw rank 1 of 2 by columns: the second block of each row", "%s", err);
	arena_free(&A);
}

/* Random weights: the block generator is deterministic, its scale fields are in range, every type
** dequantizes to finite values about 1/sqrt(K) in size; weights_load_f32 returns exactly the generator's
** blocks dequantized, rank parts of a split that concatenate to the whole, and F16/BF16 values that are
** representable in their type. */
static void check_random(void)
{
	char err[512], name[128];
	static const int types[] = {QT_Q8_0,   QT_Q4_K,  QT_Q5_K, QT_Q6_K,  QT_Q4_0,  QT_Q4_1,   QT_Q5_0,   QT_Q5_1,
	                            QT_Q2_K,   QT_Q3_K,  QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4, QT_IQ1_S, QT_IQ1_M, QT_IQ2_XXS,
	                            QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_TQ1_0, QT_TQ2_0, QT_NVFP4};
	static const int64_t Ks[] = {256, 4096, 14336};
	for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++)
		for (size_t ki = 0; ki < 3; ki++) {
			int q = types[ti];
			int64_t K = Ks[ki], rows = 16;
			size_t rb = quant_row_bytes(q, K);
			uint64_t seed = weights_random_seed("blk.0.ffn_up.weight");
			unsigned char *b = malloc(rb * (size_t)rows), *b2 = malloc(rb);
			float *y = malloc(sizeof(float) * (size_t)(K * rows));
			for (size_t g = 0; g < rb * (size_t)rows; g++)
				b[g] = weights_random_byte(q, seed, K, g);
			for (size_t g = 0; g < rb; g++)
				b2[g] = weights_random_byte(q, seed, K, rb + g);
			int same = !memcmp(b2, b + rb, rb), differs = 0;
			for (size_t g = 0; g < rb; g++)
				differs |= weights_random_byte(q, seed + 1, K, g) != b[g];
			int rc = quant_dequant(q, b, y, (size_t)(K * rows)), finite = 1;
			double ss = 0;
			for (int64_t i = 0; i < K * rows; i++) {
				finite &= isfinite(y[i]);
				ss += (double)y[i] * y[i];
			}
			double scaled = sqrt(ss / (double)(K * rows) * (double)K);
			snprintf(name, sizeof name, "random %s blocks, K %lld: deterministic, finite, rms·sqrt(K) %.2f in [0.2, 2]",
			         quant_type_name(q), (long long)K, scaled);
			check(!rc && same && differs && finite && scaled >= 0.2 && scaled <= 2, name, "rc %d same %d differs %d finite %d",
			      rc, same, differs, finite);
			free(b), free(b2), free(y);
		}
	/* The scale fields: Q8_0's d for K = 4096 (2^-6 / 2^8 · [1, 2)) */
	uint64_t seed = 99;
	int inrange = 1;
	for (uint64_t blk = 0; blk < 256; blk++) {
		uint16_t h = (uint16_t)(weights_random_byte(QT_Q8_0, seed, 4096, blk * 34) |
		                        weights_random_byte(QT_Q8_0, seed, 4096, blk * 34 + 1) << 8);
		float d = quant_f16_to_f32(h);
		inrange &= d >= 0x1p-14f && d < 0x1p-13f;
	}
	check(inrange, "random Q8_0 scales of a K = 4096 tensor in [2^-14, 2^-13)", "");

	/* weights_load_f32 on random parameters: the generator's values, split parts, rounding */
	Arena A = {0};
	Graph gr;
	Weights none = {.random_qtype = 0};
	int64_t R = 4, K = 512;
	float *whole = malloc(sizeof(float) * (size_t)(R * K)), *part = malloc(sizeof(float) * (size_t)(R * K));
	unsigned char *blk = malloc(quant_row_bytes(QT_Q4_K, K) * (size_t)R);
	one_param(&gr, &A, R, K, "blk.3.attn_q.weight", DT_Q);
	WeightRef ref = {.node = 0, .source = "x", .file = "(random)", .qtype = QT_Q4_K, .dtype = DT_Q, .split = -1};
	int rc = weights_load_f32(&none, &gr, &ref, 0, 1, whole, err, sizeof err);
	size_t rb = quant_row_bytes(QT_Q4_K, K);
	for (size_t g = 0; g < rb * (size_t)R; g++)
		blk[g] = weights_random_byte(QT_Q4_K, weights_random_seed("blk.3.attn_q.weight"), K, g);
	quant_dequant(QT_Q4_K, blk, part, (size_t)(R * K));
	check(!rc && !memcmp(whole, part, sizeof(float) * (size_t)(R * K)),
	      "random Q4_K parameter loads as its generated blocks, dequantized", "%s", err);
	arena_free(&A);
	int ok = 1;
	for (int ax = 0; ax < 2 && ok; ax++)
		for (int r = 0; r < 2 && ok; r++) {
			one_param(&gr, &A, ax ? R : R / 2, ax ? K / 2 : K, "blk.3.attn_q.weight", DT_Q);
			ref.split = ax;
			ok = !weights_load_f32(&none, &gr, &ref, r, 2, part, err, sizeof err);
			for (int64_t i = 0; ok && i < (ax ? R : R / 2); i++)
				ok = !memcmp(part + i * (ax ? K / 2 : K), whole + (ax ? i * K + r * K / 2 : (r * R / 2 + i) * K),
				             sizeof(float) * (size_t)(ax ? K / 2 : K));
			arena_free(&A);
		}
	check(ok, "random Q4_K parameter split by rows and by columns: each rank gets its part of the whole", "%s", err);
	one_param(&gr, &A, R, K, "blk.3.attn_k.weight", DT_BF16);
	WeightRef rb16 = {.node = 0, .source = "x", .file = "(random)", .qtype = QT_BF16, .dtype = DT_BF16, .split = -1};
	rc = weights_load_f32(&none, &gr, &rb16, 0, 1, whole, err, sizeof err);
	WeightRef rf32 = rb16;
	rf32.qtype = QT_F32, rf32.dtype = DT_F32;
	weights_load_f32(&none, &gr, &rf32, 0, 1, part, err, sizeof err);
	ok = !rc;
	for (int64_t i = 0; ok && i < R * K; i++)
		ok = whole[i] == ref_bf16_to_f32(ref_f32_to_bf16(part[i])) && fabsf(part[i]) <= 1.0f / sqrtf((float)K);
	check(ok, "random BF16 parameter: the float generator's values rounded to bf16", "%s", err);
	arena_free(&A);
	free(whole), free(part), free(blk);
}

int main(void)
{
	char dir[] = "/tmp/glm-test-weights-XXXXXX", path[512], err[1024];
	if (!mkdtemp(dir))
		return 1;
	/* A [8, 64] Q8_0 tensor and a [6, 10] F32 one, from fresh random values. */
	unsigned long long seed = 7;
	float f[8 * 64], g[6 * 10];
	fill_random(f, 8 * 64, &seed), fill_random(g, 60, &seed);
	unsigned char q[8 * 2 * 34];
	quant_q8_0(f, q, 8 * 64);
	GgufWriter *w = gguf_writer_new();
	int64_t ne1[2] = {64, 8}, ne2[2] = {10, 6};
	gguf_writer_str(w, "general.architecture", "test");
	gguf_writer_tensor(w, "q", QT_Q8_0, 2, ne1, q, sizeof q);
	gguf_writer_tensor(w, "f", QT_F32, 2, ne2, g, sizeof g);
	snprintf(path, sizeof path, "%s/t.gguf", dir);
	check(gguf_writer_write(w, path, err, sizeof err) == 0, "write a test GGUF", "%s", err);
	gguf_writer_free(w);
	Weights wt;
	check(weights_open(&wt, path, err, sizeof err) == 0, "open it through the weights layer", "%s", err);
	WTensor tq, tf;
	check(weights_find(&wt, "q", &tq) >= 0 && tq.shape[0] == 8 && tq.shape[1] == 64 && tq.qtype == QT_Q8_0,
	      "Q8_0 tensor in PyTorch order", "shape [%lld, %lld] type %d", (long long)tq.shape[0], (long long)tq.shape[1],
	      tq.qtype);
	weights_find(&wt, "f", &tf);
	check_load_raw(&wt, q);
	for (int n = 1; n <= 8; n *= 2) {
		char name[96];
		snprintf(name, sizeof name, "Q8_0 rows split %d ways concatenate back", n);
		check(roundtrip(&tq, 0, n, err, sizeof err), name, "%s", err);
	}
	check(roundtrip(&tq, 1, 2, err, sizeof err), "Q8_0 columns split 2 ways (one block each) concatenate back", "%s",
	      err);
	WRange r[8];
	check(weights_slice(&tq, 1, 0, 4, r, 8, err, sizeof err) < 0 && strstr(err, "would cut a Q8_0 block of 32"),
	      "a column split that cuts a block is refused", "%s", err);
	check(roundtrip(&tf, 0, 2, err, sizeof err) && roundtrip(&tf, 1, 2, err, sizeof err) &&
	          roundtrip(&tf, 1, 5, err, sizeof err),
	      "F32 rows and columns split and concatenate back", "%s", err);
	check(weights_slice(&tf, 0, 0, 4, r, 8, err, sizeof err) < 0 && strstr(err, "6 rows do not split into 4"),
	      "an uneven split is refused", "%s", err);
	weights_close(&wt);
	unlink(path);

	/* FP8 E4M3 with 128x128 block scales (DeepSeek/GLM FP8 checkpoints): a [130, 200] weight has 2x2
	** blocks; every byte value appears, including subnormals and the NaN pattern's neighbours. */
	enum { R = 130, Cc = 200 };
	static unsigned char f8[R * Cc];
	float sc[4] = {0.5f, 2.0f, 0.125f, 3.0f};
	for (int i = 0; i < R * Cc; i++)
		f8[i] = (unsigned char)((i * 7 + 3) % 256 == 0x7f || (i * 7 + 3) % 256 == 0xff ? 0x42 : (i * 7 + 3) % 256);
	int64_t shw[2] = {R, Cc}, shs[2] = {2, 2};
	StWrite tw[2] = {{"w.weight", ST_F8_E4M3, 2, shw, f8}, {"w.weight_scale_inv", ST_F32, 2, shs, sc}};
	char fdir[300], fpath[400];
	snprintf(fdir, sizeof fdir, "%s/f8", dir);
	mkdir(fdir, 0755);
	snprintf(fpath, sizeof fpath, "%s/model.safetensors", fdir);
	check(st_write_file(fpath, tw, 2, err, sizeof err) == 0, "write an FP8 checkpoint", "%s", err);
	snprintf(path, sizeof path, "%s/config.json", fdir);
	FILE *cf = fopen(path, "w");
	fputs("{}", cf);
	fclose(cf);
	Weights wf;
	check(weights_open(&wf, fdir, err, sizeof err) == 0, "open it", "%s", err);
	Arena A = {0};
	Graph gr;
	graph_init(&gr, &A);
	Node pn = {.op = OP_PARAM, .kind = VK_WEIGHT, .dtype = DT_Q, .ndim = 2, .dim = {R, Cc}, .name = "w", .fused_into = -1};
	graph_add(&gr, &pn);
	WeightRef ref = {.node = 0, .source = "w.weight", .qtype = WQ_F8_E4M3, .nbytes = R * Cc, .split = -1};
	static float got[R * Cc];
	int rc = weights_load_f32(&wf, &gr, &ref, 0, 1, got, err, sizeof err);
	int bad = 0;
	for (int i = 0; i < R * Cc && !rc; i++) {
		int b = f8[i], sign = b >> 7, e = (b >> 3) & 15, m = b & 7;
		double v = e ? pow(2.0, e - 7) * (1 + m / 8.0) : pow(2.0, -6) * (m / 8.0);
		v *= sign ? -1 : 1;
		v *= sc[(i / Cc) / 128 * 2 + (i % Cc) / 128];
		bad += got[i] != (float)v;
	}
	check(!rc && !bad, "FP8 E4M3 weights dequantize with their block scales", "%s (%d mismatches)", err, bad);
	weights_close(&wf);
	arena_free(&A);
	unlink(fpath);
	unlink(path);
	rmdir(fdir);
	rmdir(dir);
	check_random();
	return check_done();
}
