/*
** tests/test_weights.c — the format-independent weights layer: tensor-parallel slices of quantized and
** float tensors concatenate back to the original bytes, a column split that would cut a quantization
** block is refused.
*/
#include "check.h"
#include "quant.h"
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
	return check_done();
}
