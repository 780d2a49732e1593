/*
** tests/test_quant.c — ggml dequantization (ops/quant.c) bit for bit against ggml itself: for every
** quantized tensor q.<TYPE> in the shared quants.gguf (written by ggml), dequantize it and compare the
** float bits with ref.<TYPE>, ggml's own to_float of the same bytes. The 1-3-bit grid types, TQ1_0,
** TQ2_0 and NVFP4 the same way against tests/data/quant/iq.gguf (written by gguf-py, ref.<TYPE> from
** its numpy dequantization: tests/tools/gen_quant_data.py), a file that glmc's GGUF reader and weights
** layer must also open and bind. Also the type table, row sizes, refusals (partial blocks, a truncated
** file, a row that is not whole blocks), the Q8_0 quantizer against its defining rounding rule, and the
** round trip of the K-quant quantizers used to write test checkpoints. Runs from the repository root.
*/
#include "check.h"
#include "gguf.h"
#include "quant.h"
#include "weights.h"

#include <stdint.h>
#include <string.h>

#define QUANTS "../shared/fixtures/gguf/quants.gguf"
#define IQ_DATA "tests/data/quant/iq.gguf"

/* The fixture's types, in the README's order; each must be present and match. */
static const char *const fixture_types[] = {"Q8_0", "Q4_0", "Q4_1",   "Q5_0",   "Q5_1", "Q2_K", "Q3_K", "Q4_K",
                                            "Q5_K", "Q6_K", "IQ4_XS", "IQ4_NL", "BF16", "F16",  "MXFP4"};

/* The types iq.gguf holds (gguf-py's references), in tests/tools/gen_quant_data.py's order. */
static const char *const iq_types[] = {"IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S",
                                       "IQ1_S",   "IQ1_M",  "TQ1_0", "TQ2_0",   "NVFP4"};

/* Dequantize q.<TYPE> and compare with ref.<TYPE> bit for bit; one check per type. "who" names the
** reference's maker. */
static void check_type(const Gguf *g, const char *tname, const char *who)
{
	char qn[64], rn[64], name[96];
	snprintf(qn, sizeof qn, "q.%s", tname);
	snprintf(rn, sizeof rn, "ref.%s", tname);
	snprintf(name, sizeof name, "dequant %s bit-exact vs %s", tname, who);
	const GgufTensor *q = gguf_find_tensor(g, qn), *r = gguf_find_tensor(g, rn);
	if (!q || !r) {
		check(0, name, "tensor %s or %s missing", qn, rn);
		return;
	}
	int want = quant_type_from_name(tname);
	if (q->type != want || r->type != QT_F32 || q->nelem != r->nelem) {
		check(0, name, "%s has type %s (%d elements), %s type %s (%d elements)", qn, quant_type_name(q->type),
		      (int)q->nelem, rn, quant_type_name(r->type), (int)r->nelem);
		return;
	}
	size_t n = (size_t)q->nelem;
	float *out = malloc(n * sizeof *out), *ref = malloc(n * sizeof *ref);
	if (!out || !ref) {
		check(0, name, "out of memory");
		free(out);
		free(ref);
		return;
	}
	for (size_t i = 0; i < n; i++)
		out[i] = NAN;                            /* poison: a skipped element cannot pass */
	memcpy(ref, gguf_tensor_data(g, r), n * sizeof *ref);
	int rc = quant_dequant(q->type, gguf_tensor_data(g, q), out, n);
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < n; i++)
		if (memcmp(&out[i], &ref[i], 4)) {
			if (!bad)
				first = i;
			bad++;
		}
	check(rc == 0 && bad == 0, name, "rc %d, %zu of %zu differ; first at %zu: got %.9g want %.9g", rc, bad, n, first,
	      (double)out[first], (double)ref[first]);
	free(out);
	free(ref);
}

/* How many q.<TYPE> tensors of g have a TYPE outside types[0..n) (so would go unchecked); *nq counts
** all the q.* tensors. */
static int unlisted_q(const Gguf *g, const char *const *types, size_t n, int *nq)
{
	int unlisted = 0;
	*nq = 0;
	for (int i = 0; i < g->ntensor; i++) {
		if (strncmp(g->t[i].name, "q.", 2))
			continue;
		int found = 0;
		for (size_t k = 0; k < n; k++)
			found |= !strcmp(g->t[i].name + 2, types[k]);
		unlisted += !found, (*nq)++;
	}
	return unlisted;
}

/* Every tensor of the fixture: each q.* has a ref.*, and every supported type appears. */
static void check_fixture(void)
{
	Gguf g;
	char err[512];
	if (gguf_open(&g, QUANTS, err, sizeof err)) {
		check(0, "open quants.gguf", "%s", err);
		return;
	}
	check(1, "open quants.gguf", "");
	for (size_t i = 0; i < sizeof fixture_types / sizeof *fixture_types; i++)
		check_type(&g, fixture_types[i], "ggml");
	/* Nothing in the file is left unchecked: every q.* tensor's type is in the list above. */
	int nq, unlisted = unlisted_q(&g, fixture_types, sizeof fixture_types / sizeof *fixture_types, &nq);
	check(unlisted == 0, "every q.* tensor in quants.gguf checked", "%d unlisted", unlisted);

	/* ggml quantized src.Q8_0 into q.Q8_0 with quantize_row_q8_0_ref: ours must give the same bytes. */
	const GgufTensor *src = gguf_find_tensor(&g, "src.Q8_0"), *q8 = gguf_find_tensor(&g, "q.Q8_0");
	if (src && q8 && src->type == QT_F32 && q8->type == QT_Q8_0 && src->nelem == q8->nelem) {
		size_t n = (size_t)src->nelem;
		float *x = malloc(n * sizeof *x);
		uint8_t *mine = malloc(quant_row_bytes(QT_Q8_0, (int64_t)n) + 1);
		if (x && mine) {
			memcpy(x, gguf_tensor_data(&g, src), n * sizeof *x);
			size_t nb = quant_q8_0(x, mine, n);
			check(nb == q8->nbytes && !memcmp(mine, gguf_tensor_data(&g, q8), nb),
			      "Q8_0 quantizer byte-identical to ggml on src.Q8_0", "%zu bytes vs %llu", nb,
			      (unsigned long long)q8->nbytes);
		}
		free(x);
		free(mine);
	} else {
		check(0, "Q8_0 quantizer byte-identical to ggml on src.Q8_0", "src.Q8_0 / q.Q8_0 missing or odd");
	}
	gguf_close(&g);
}

/* Read a whole file; NULL (and a failed check) when it cannot be read. */
static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	uint8_t *buf = NULL;
	long len = -1;
	if (f && !fseek(f, 0, SEEK_END) && (len = ftell(f)) > 0 && !fseek(f, 0, SEEK_SET) &&
	    (buf = malloc((size_t)len)) && fread(buf, 1, (size_t)len, f) == (size_t)len) {
		fclose(f);
		*n = (size_t)len;
		return buf;
	}
	if (f)
		fclose(f);
	free(buf);
	check(0, "read iq.gguf", "%s: cannot read", path);
	return NULL;
}

/* The tensor-info field ne[0] of tensor `name` in a GGUF image: just after its length-prefixed name and
** its u32 dimension count. NULL when the name is not found. */
static uint8_t *ne0_field(uint8_t *img, size_t n, const char *name)
{
	size_t len = strlen(name);
	for (size_t i = 8; i + len + 12 <= n; i++)
		if (img[i - 8] == len && !memcmp(img + i - 7, "\0\0\0\0\0\0\0", 7) && !memcmp(img + i, name, len))
			return img + i + len + 4;
	return NULL;
}

/* A copy of the image opened from memory must fail, its message naming `want`. */
static void check_refused(const uint8_t *img, size_t n, const char *want, const char *name)
{
	Gguf g;
	char err[512] = "";
	int rc = gguf_open_buffer(&g, img, n, "iq.gguf", err, sizeof err);
	if (!rc)
		gguf_close(&g);
	check(rc != 0 && strstr(err, want), name, "rc %d, message '%s'", rc, err);
}

/* gguf-py's references for the grid, ternary and NVFP4 types; the file opens through the weights layer
** with every q.* tensor bound as a block type; cut or reshaped copies are refused by name. */
static void check_iq_data(void)
{
	Gguf g;
	char err[512];
	if (gguf_open(&g, IQ_DATA, err, sizeof err)) {
		check(0, "open iq.gguf", "%s", err);
		return;
	}
	check(1, "open iq.gguf (written by gguf-py)", "");
	enum { NT = sizeof iq_types / sizeof *iq_types };
	for (int i = 0; i < NT; i++)
		check_type(&g, iq_types[i], "gguf-py");
	int nq, unlisted = unlisted_q(&g, iq_types, NT, &nq);
	check(unlisted == 0 && nq == NT, "every q.* tensor in iq.gguf checked", "%d unlisted of %d", unlisted, nq);

	/* The weights layer (what glmc binds a checkpoint through) takes each as a block type. */
	Weights w;
	if (weights_open(&w, IQ_DATA, err, sizeof err)) {
		check(0, "iq.gguf opens as weights", "%s", err);
	} else {
		int ok = 1;
		for (int i = 0; i < NT; i++) {
			char qn[64];
			WTensor t;
			snprintf(qn, sizeof qn, "q.%s", iq_types[i]);
			int q = quant_type_from_name(iq_types[i]);
			ok &= weights_find(&w, qn, &t) >= 0 && t.qtype == q && weights_dtype(t.qtype) == DT_Q &&
			      t.nbytes == quant_row_bytes(q, t.shape[t.ndim - 1]) * (uint64_t)t.shape[0];
		}
		check(ok, "iq.gguf opens as weights; every q.* binds as a block type (DT_Q) of its size", "");
		weights_close(&w);
	}

	/* Cut inside q.NVFP4's blocks: the reader names the tensor that runs past the end. */
	size_t n = 0;
	uint8_t *img = slurp(IQ_DATA, &n);
	const GgufTensor *nv = gguf_find_tensor(&g, "q.NVFP4");
	if (img && nv) {
		size_t at = (size_t)(nv->off + nv->nbytes / 2);   /* off: from the start of the file, once opened */
		check_refused(img, at, "q.NVFP4", "iq.gguf cut inside q.NVFP4's blocks refused, naming it");
		/* A row that is not whole blocks: ne[0] of 128 for IQ2_XXS (blocks of 256), 32 for NVFP4 (64). */
		uint8_t *f1 = ne0_field(img, n, "q.IQ2_XXS"), *f2 = ne0_field(img, n, "q.NVFP4");
		if (f1 && f2 && f1[0] == 0 && f1[1] == 1 && f2[0] == 64) {
			f1[1] = 0, f1[0] = 128;
			check_refused(img, n, "not a multiple of IQ2_XXS's block size 256",
			              "IQ2_XXS row of 128 values (half a block) refused");
			f1[1] = 1, f1[0] = 0, f2[0] = 32;
			check_refused(img, n, "not a multiple of NVFP4's block size 64", "NVFP4 row of 32 values refused");
		} else {
			check(0, "find the ne[0] fields of q.IQ2_XXS and q.NVFP4", "");
		}
	}
	free(img);
	gguf_close(&g);

	/* quant_dequant itself: a partial last block of every new type is refused, nothing written. */
	static uint8_t blk[2 * 110];
	static float y[512];
	int all = 1;
	for (int i = 0; i < NT; i++) {
		int q = quant_type_from_name(iq_types[i]), bs = quant_block_size(q);
		for (size_t k = 0; k < sizeof blk; k++)
			blk[k] = (uint8_t)(k * 29 + 3);
		y[bs] = 7.0f;
		all &= quant_supported(q) && quant_dequant(q, blk, y, (size_t)bs + (size_t)bs / 2) == -1 &&
		       quant_dequant(q, blk, y, (size_t)bs - 1) == -1 && y[bs] == 7.0f && quant_row_bytes(q, bs + 1) == 0 &&
		       quant_dequant(q, blk, y, (size_t)bs) == 0;
	}
	check(all, "each new type supported; a partial block (1.5 blocks, a block less one) refused", "");
}

/* Geometry, names and refusals: what a reader relies on to reject files and name types. */
static void check_table(void)
{
	check(quant_block_size(QT_Q4_K) == 256 && quant_block_bytes(QT_Q4_K) == 144, "Q4_K geometry", "");
	check(quant_block_size(QT_MXFP4) == 32 && quant_block_bytes(QT_MXFP4) == 17, "MXFP4 geometry", "");
	check(quant_row_bytes(QT_Q8_0, 4096) == 4096 / 32 * 34, "Q8_0 row bytes", "%zu", quant_row_bytes(QT_Q8_0, 4096));
	check(quant_row_bytes(QT_Q8_0, 33) == 0, "row not a whole number of blocks -> 0", "");
	check(quant_row_bytes(QT_F32, INT64_MAX) == 0, "row size overflow -> 0", "");
	/* the device layout: Q6_K blocks in 224-byte slots, Q4_K/Q5_K as GGUF keeps them, rows to 16 bytes */
	check(quant_dev_row_bytes(QT_Q6_K, 768) == 3 * 224 && quant_dev_row_bytes(QT_Q4_K, 768) == 3 * 144 &&
	          quant_dev_row_bytes(QT_Q8_0, 64) == 272 && quant_dev_row_bytes(QT_Q8_0, 512) == 2 * 272 &&
	          quant_dev_row_bytes(QT_Q8_0, 288) == 2 * 272 && quant_dev_row_bytes(QT_Q6_K, 100) == 0,
	      "device row bytes (Q6_K slots of 224, Q8_0 superblocks of 272)", "%zu %zu", quant_dev_row_bytes(QT_Q6_K, 768),
	      quant_dev_row_bytes(QT_Q8_0, 64));
	/* the general path's types keep the file's rows, unpadded (18 bytes a Q4_0 block, 54 a TQ1_0 one) */
	check(quant_dev_row_bytes(QT_Q4_0, 96) == 3 * 18 && quant_dev_row_bytes(QT_TQ1_0, 512) == 2 * 54 &&
	          quant_dev_row_bytes(QT_NVFP4, 64) == 36 && quant_dev_row_bytes(QT_IQ2_XXS, 100) == 0,
	      "device row bytes of the general types (the file's)", "%zu %zu", quant_dev_row_bytes(QT_Q4_0, 96),
	      quant_dev_row_bytes(QT_TQ1_0, 512));
	{
		/* Q8_0 superblocks: 9 blocks (one whole superblock and one of a single block); every value found
		** where ops/quant.cuh's q_elem<8> and q8_piece look for it, the missing blocks' bytes zero */
		static uint8_t src[9 * 34], row[2 * 272];
		for (size_t i = 0; i < sizeof src; i++)
			src[i] = (uint8_t)(i * 13 + 5);
		memset(row, 0xee, sizeof row);
		memcpy(row, src, sizeof src);
		quant_dev_spread(QT_Q8_0, row, 288);
		int ok = 1;
		for (int b = 0; b < 9; b++) {
			const uint8_t *sb = row + b / 8 * 272;
			int j = b % 8;
			ok &= sb[2 * j] == src[34 * b] && sb[2 * j + 1] == src[34 * b + 1];
			for (int i = 0; i < 32; i++)
				ok &= sb[16 + 64 * (j / 2) + 16 * (i / 8) + 8 * (j % 2) + i % 8] == src[34 * b + 2 + i];
		}
		int zero = 1;
		for (int k = 2; k < 16; k++)
			zero &= row[272 + k] == 0;
		for (int k = 16; k < 272; k++)
			if ((k - 16) / 64 != 0 || ((k - 16) / 8) % 2 != 0) /* not block 0's pieces */
				zero &= row[272 + k] == 0;
		check(ok && zero, "quant_dev_spread: Q8_0 blocks regrouped into superblocks, the short one's gaps zero", "");
	}
	{
		static uint8_t row[3 * 224], src[3 * 210];
		for (size_t i = 0; i < sizeof src; i++)
			src[i] = (uint8_t)(i * 7 + 1);
		memset(row, 0xee, sizeof row);
		memcpy(row, src, sizeof src);
		quant_dev_spread(QT_Q6_K, row, 768);
		int ok = 1;
		for (int j = 0; j < 3; j++)
			for (int i = 0; i < 224; i++)
				ok &= row[j * 224 + i] == (i < 210 ? src[j * 210 + i] : 0);
		uint8_t q4[144], q4b[144];
		for (int i = 0; i < 144; i++)
			q4[i] = q4b[i] = (uint8_t)i;
		quant_dev_spread(QT_Q4_K, q4b, 256);
		check(ok && !memcmp(q4, q4b, sizeof q4), "quant_dev_spread: Q6_K blocks to their slots, tails zero; Q4_K as is",
		      "");
	}
	check(!strcmp(quant_type_name(QT_IQ2_XXS), "IQ2_XXS") && !strcmp(quant_type_name(4), "Q4_2") &&
	          !strcmp(quant_type_name(999), "unknown") && !strcmp(quant_type_name(-1), "unknown"),
	      "type names (known, removed, unknown)", "");
	float y[256];
	uint8_t blk[292] = {0};
	check(quant_dequant(QT_Q8_K, blk, y, 256) == -1 && quant_dequant(QT_Q1_0, blk, y, 128) == -1 &&
	          quant_dequant(999, blk, y, 32) == -1 && quant_dequant(4, blk, y, 32) == -1,
	      "unsupported types refused", "");
	check(quant_dequant(QT_Q8_0, blk, y, 31) == -1, "partial block refused", "");
	static const int listed[] = {QT_F32,    QT_F16,    QT_BF16,    QT_Q4_0,  QT_Q4_1,  QT_Q5_0,  QT_Q5_1,
	                             QT_Q8_0,   QT_Q2_K,   QT_Q3_K,    QT_Q4_K,  QT_Q5_K,  QT_Q6_K,  QT_IQ4_NL,
	                             QT_IQ4_XS, QT_MXFP4,  QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S,
	                             QT_IQ1_S,  QT_IQ1_M,  QT_TQ1_0,   QT_TQ2_0, QT_NVFP4};
	int all = 1;
	for (size_t i = 0; i < sizeof listed / sizeof *listed; i++)
		all &= quant_supported(listed[i]);
	int count = 0;
	for (int t = 0; t < QT_COUNT; t++)
		count += quant_supported(t);
	check(all && count == 26, "all 26 listed types supported, and no others", "%d supported", count);
}

/* Half conversions: every half round-trips exactly through float, and float->half rounds to even. */
static void check_half(void)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		float f = quant_f16_to_f32((uint16_t)h);
		if (isnan(f))
			continue;
		bad += quant_f32_to_f16(f) != h;
	}
	check(bad == 0, "half -> float -> half round trip (all 65536)", "%d differ", bad);
	/* 1 + 2^-11 is exactly between two halves: ties go to the even one (1.0). */
	check(quant_f32_to_f16(1.0f + 0x1p-11f) == 0x3c00 && quant_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f) == 0x3c01 &&
	          quant_f32_to_f16(65520.0f) == 0x7c00 && quant_f32_to_f16(65519.0f) == 0x7bff &&
	          quant_f32_to_f16(0x1p-25f) == 0 && quant_f32_to_f16(0x1.8p-25f) == 1,
	      "float -> half rounding (ties, overflow, subnormals)", "");
}

/* Q8_0 quantizer: scale = amax/127 as half, quants = round(x * (1/scale_unrounded)), and the
** dequantization stays within half a step of the input. */
static void check_q8_0(void)
{
	unsigned long long seed = 42;
	float x[256], y[256];
	uint8_t q[8 * 34];
	fill_random(x, 256, &seed);
	for (int i = 0; i < 32; i++)
		x[32 + i] *= 1000.0f;                    /* a block at another scale */
	for (int i = 0; i < 32; i++)
		x[64 + i] = 0.0f;                        /* an all-zero block */
	size_t nb = quant_q8_0(x, q, 256);
	int rule = 1;
	double maxerr = 0;
	for (int b = 0; b < 8; b++) {
		float amax = 0;
		for (int j = 0; j < 32; j++)
			amax = fmaxf(amax, fabsf(x[32 * b + j]));
		float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
		uint16_t h = (uint16_t)(q[34 * b] | q[34 * b + 1] << 8);
		rule &= h == quant_f32_to_f16(d);
		for (int j = 0; j < 32; j++)
			rule &= (int8_t)q[34 * b + 2 + j] == (int)roundf(x[32 * b + j] * id);
	}
	quant_dequant(QT_Q8_0, q, y, 256);
	for (int b = 0; b < 8; b++) {
		float d = quant_f16_to_f32((uint16_t)(q[34 * b] | q[34 * b + 1] << 8));
		for (int j = 0; j < 32; j++) {
			double e = fabs((double)y[32 * b + j] - x[32 * b + j]) / (d ? d : 1);
			maxerr = e > maxerr ? e : maxerr;
		}
	}
	check(nb == 8 * 34 && rule, "Q8_0 quantizer follows quantize_row_q8_0_ref rounding", "");
	check(maxerr <= 0.51, "Q8_0 round trip within half a step (plus half rounding)", "max %.3f steps", maxerr);
	check(quant_q8_0(x, q, 33) == 0, "Q8_0 quantizer refuses a partial block", "");
}

/* The test-checkpoint quantizers for Q4_K, Q5_K and Q6_K: what they write dequantizes (through the
** bit-exact reader above) close to the input, relative to the expected step of each format; an all-zero
** block stays exactly zero; blocks at other scales and one-signed blocks work too. */
static void check_k_quants(void)
{
	static const struct {
		int type;
		size_t (*fn)(const float *, void *, size_t);
		double tol;                              /* rel-L2 bound, about twice the rounding error */
	} q[] = {{QT_Q4_K, quant_q4_k, 0.15}, {QT_Q5_K, quant_q5_k, 0.075}, {QT_Q6_K, quant_q6_k, 0.04}};
	enum { N = 8 * 256 };
	static float x[N], y[N];
	static uint8_t b[8 * 210];
	for (size_t t = 0; t < sizeof q / sizeof *q; t++) {
		unsigned long long seed = 7 + t;
		fill_random(x, N, &seed);
		for (int i = 0; i < 256; i++) {
			x[256 + i] *= 1000.0f;               /* another scale */
			x[512 + i] = 0.0f;                   /* all zero */
			x[768 + i] = fabsf(x[768 + i]) + 0.5f; /* all positive, away from zero */
			x[1024 + i] = -fabsf(x[1024 + i]);   /* all negative */
		}
		char name[96];
		size_t nb = q[t].fn(x, b, N);
		int rc = quant_dequant(q[t].type, b, y, N);
		double worst = 0;
		for (int blk = 0; blk < 8; blk++)
			if (blk != 2) {
				double e = rel_l2(y + 256 * blk, x + 256 * blk, 256);
				worst = e > worst ? e : worst;
			}
		int zero = 1;
		for (int i = 0; i < 256; i++)
			zero &= y[512 + i] == 0.0f;
		snprintf(name, sizeof name, "%s quantizer round trip (worst block rel-L2 <= %g), zero block exact",
		         quant_type_name(q[t].type), q[t].tol);
		check(nb == quant_row_bytes(q[t].type, N) && rc == 0 && worst <= q[t].tol && zero, name,
		      "bytes %zu, rc %d, worst %.4f, zero block %s", nb, rc, worst, zero ? "exact" : "not zero");
		snprintf(name, sizeof name, "%s quantizer refuses a partial block", quant_type_name(q[t].type));
		check(q[t].fn(x, b, 255) == 0, name, "");
	}
}

int main(void)
{
	check_fixture();
	check_iq_data();
	check_table();
	check_half();
	check_q8_0();
	check_k_quants();
	return check_done();
}
