/*
** tests/test_gguf.c — the GGUF reader and writer (runtime/formats/gguf.c): the shared quants.gguf and vocab
** files, a writer round trip over every value type, split sets, a table of malformed files built at
** test time (each must fail with a one-line message naming the file and containing a given phrase),
** a seeded fuzz loop that must never crash, the mkgguf conversion of the HF fixtures, and glmc inspect.
** Runs from the repository root (after `make`, which builds build/tools/mkgguf).
*/
#include "check.h"
#include "gguf.h"
#include "inspect.h"
#include "quant.h"
#include "st.h"

#include <fcntl.h>
#include <ftw.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define FIX "../shared/fixtures"

static char tmp[64];

/* Seeded xorshift so every run mutates the same way. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return *s = x;
}

/* Path of NAME inside the temp dir (rotating buffers so several can be live in one call). */
static const char *tp(const char *name)
{
	static char buf[8][512];
	static int k;
	k = (k + 1) % 8;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
	return buf[k];
}

static int put(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f)
		return -1;
	size_t w = fwrite(b, 1, n, f);
	return (fclose(f) || w != n) ? -1 : 0;
}

/* Whole file into memory (NULL on failure). */
static uint8_t *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	uint8_t *b = malloc(sz > 0 ? (size_t)sz : 1);
	if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
		free(b);
		b = NULL;
	}
	fclose(f);
	*n = (size_t)sz;
	return b;
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

/* ------------------------------------------------------------------------------------------------ */

/* The ggml-written fixture: header facts, shapes in both orders, lookups. */
static void test_quants_file(void)
{
	Gguf g;
	char err[512];
	if (gguf_open(&g, FIX "/gguf/quants.gguf", err, sizeof err)) {
		check(0, "quants.gguf opens", "%s", err);
		return;
	}
	check(g.version == 3 && g.alignment == 32 && g.nfile == 1, "quants.gguf: version 3, alignment 32", "v%d a%u",
	      g.version, g.alignment);
	check(g.ntensor == 45, "quants.gguf: 45 tensors (15 types x src/q/ref)", "%d", g.ntensor);
	const GgufTensor *t = gguf_find_tensor(&g, "q.Q4_K");
	int64_t sh[4];
	int nd = t ? gguf_torch_shape(t, sh) : 0;
	check(t && t->type == QT_Q4_K && t->ndim == 2 && t->ne[0] == 768 && t->ne[1] == 16 && nd == 2 && sh[0] == 16 &&
	          sh[1] == 768 && t->nbytes == 16 * 3 * 144,
	      "q.Q4_K: ne {768,16}, torch shape [16,768], 6912 bytes", "");
	check(gguf_find_tensor(&g, "q.nope") == NULL && gguf_find_tensor(&g, "") == NULL, "absent tensor -> NULL", "");
	int sorted_ok = 1;
	for (int i = 0; i < g.ntensor; i++)
		sorted_ok &= gguf_find_tensor(&g, g.t[i].name) == &g.t[i];
	check(sorted_ok, "every tensor found by name", "");
	gguf_close(&g);
}

/* llama.cpp's vocab-only files: metadata only, big arrays of strings. */
static void test_vocab(void)
{
	static const struct {
		const char *file, *model;
		uint64_t ntok;
		const char *tok0;
	} v[] = {
		{"ggml-vocab-gpt-2.gguf", "gpt2", 50257, "!"},
		{"ggml-vocab-deepseek-coder.gguf", "gpt2", 32256, NULL},
		{"ggml-vocab-llama-spm.gguf", "llama", 32000, "<unk>"},
	};
	for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
		char path[512], name[256], err[512];
		snprintf(path, sizeof path, FIX "/vocab/%s", v[i].file);
		Gguf g;
		if (gguf_open(&g, path, err, sizeof err)) {
			snprintf(name, sizeof name, "%s opens", v[i].file);
			check(0, name, "%s", err);
			continue;
		}
		const GgufKV *tok = gguf_find_key(&g, "tokenizer.ggml.tokens");
		uint64_t len = 0;
		const char *t0 = gguf_arr_str(tok, 0, &len);
		snprintf(name, sizeof name, "%s: tokenizer.ggml.tokens is %llu strings", v[i].file,
		         (unsigned long long)v[i].ntok);
		check(tok && tok->type == GGUF_ARRAY && tok->arr_type == GGUF_STRING && gguf_arr_len(tok) == v[i].ntok &&
		          t0 && (!v[i].tok0 || !strcmp(t0, v[i].tok0)),
		      name, "len %llu, first '%s'", (unsigned long long)gguf_arr_len(tok), t0 ? t0 : "(null)");
		const char *model = gguf_get_str(&g, "tokenizer.ggml.model");
		const char *arch = gguf_get_str(&g, "general.architecture");
		snprintf(name, sizeof name, "%s: general.architecture, tokenizer.ggml.model '%s', no tensors", v[i].file,
		         v[i].model);
		check(arch && arch[0] && model && !strcmp(model, v[i].model) && g.ntensor == 0, name, "arch %s model %s n %d",
		      arch ? arch : "-", model ? model : "-", g.ntensor);
		/* Typed getters on a real file: a uint32 token id reads as int and uint, not as a string. */
		int64_t iv = -1;
		uint64_t uv = 0;
		int ok = !gguf_get_int(&g, "tokenizer.ggml.eos_token_id", &iv) &&
		         !gguf_get_uint(&g, "tokenizer.ggml.eos_token_id", &uv) && iv >= 0 && (uint64_t)iv == uv &&
		         !gguf_get_str(&g, "tokenizer.ggml.eos_token_id");
		snprintf(name, sizeof name, "%s: eos_token_id via typed getters", v[i].file);
		check(ok, name, "");
		/* The last element and the last string are intact. */
		const char *tl = gguf_arr_str(tok, gguf_arr_len(tok) - 1, &len);
		snprintf(name, sizeof name, "%s: last token readable, out of range -> NULL", v[i].file);
		check(tl && strlen(tl) <= len && !gguf_arr_str(tok, gguf_arr_len(tok), NULL), name, "");
		gguf_close(&g);
	}
}

/* ------------------------------------------------------------------------------------------------ */

/* A small valid file: every value type, arrays of numbers and strings, three tensors. */
static GgufWriter *small_writer(uint32_t alignment)
{
	GgufWriter *w = gguf_writer_new();
	if (alignment != 32)
		gguf_writer_set_alignment(w, alignment);
	gguf_writer_str(w, "general.architecture", "llama");
	gguf_writer_u8(w, "t.u8", 200);
	gguf_writer_i8(w, "t.i8", -100);
	gguf_writer_u16(w, "t.u16", 60000);
	gguf_writer_i16(w, "t.i16", -30000);
	gguf_writer_u32(w, "t.u32", 4000000000u);
	gguf_writer_i32(w, "t.i32", -2000000000);
	gguf_writer_f32(w, "t.f32", 0.25f);
	gguf_writer_bool(w, "t.bool", 1);
	gguf_writer_u64(w, "t.u64", UINT64_MAX);
	gguf_writer_i64(w, "t.i64", INT64_MIN);
	gguf_writer_f64(w, "t.f64", -1e300);
	const char *strs[] = {"alpha", "", "gamma delta"};
	gguf_writer_arr_str(w, "t.arr_str", strs, 3);
	int16_t i16[4] = {-1, 2, -3, 4};
	gguf_writer_arr(w, "t.arr_i16", GGUF_INT16, i16, 4);
	double f64[2] = {1.5, -2.5};
	gguf_writer_arr(w, "t.arr_f64", GGUF_FLOAT64, f64, 2);
	gguf_writer_arr(w, "t.arr_empty", GGUF_UINT8, NULL, 0);
	float a[64];
	for (int i = 0; i < 64; i++)
		a[i] = (float)i - 10;
	int64_t ne_a[2] = {32, 2}, ne_b[1] = {64}, ne_c[2] = {32, 1};
	uint8_t q8[34];
	quant_q8_0(a, q8, 32);
	gguf_writer_tensor(w, "w.a", QT_F32, 2, ne_a, a, sizeof a);
	gguf_writer_tensor(w, "w.b", QT_F32, 1, ne_b, a, sizeof a);
	gguf_writer_tensor(w, "w.c", QT_Q8_0, 2, ne_c, q8, sizeof q8);
	return w;
}

static uint8_t *small_image(size_t *n)
{
	GgufWriter *w = small_writer(32);
	uint8_t *img = gguf_writer_image(w, n);
	gguf_writer_free(w);
	return img;
}

/* Writer -> reader: every value type and its conversions, array access, order, data, alignment. */
static void test_roundtrip(void)
{
	char err[512];
	GgufWriter *w = small_writer(64);
	int wrc = gguf_writer_write(w, tp("rt.gguf"), err, sizeof err);
	gguf_writer_free(w);
	Gguf g;
	if (wrc || gguf_open(&g, tp("rt.gguf"), err, sizeof err)) {
		check(0, "writer round trip opens", "%s", err);
		return;
	}
	int64_t iv;
	uint64_t uv;
	double fv;
	int bv;
	check(g.alignment == 64 && gguf_get_uint(&g, "general.alignment", &uv) == 0 && uv == 64,
	      "alignment 64 written as general.alignment and used", "");
	int ok = !gguf_get_uint(&g, "t.u8", &uv) && uv == 200 && !gguf_get_int(&g, "t.i8", &iv) && iv == -100 &&
	         !gguf_get_uint(&g, "t.u16", &uv) && uv == 60000 && !gguf_get_int(&g, "t.i16", &iv) && iv == -30000 &&
	         !gguf_get_uint(&g, "t.u32", &uv) && uv == 4000000000u && !gguf_get_int(&g, "t.i32", &iv) &&
	         iv == -2000000000 && !gguf_get_float(&g, "t.f32", &fv) && fv == 0.25 && !gguf_get_bool(&g, "t.bool", &bv) &&
	         bv == 1 && !gguf_get_uint(&g, "t.u64", &uv) && uv == UINT64_MAX && !gguf_get_int(&g, "t.i64", &iv) &&
	         iv == INT64_MIN && !gguf_get_float(&g, "t.f64", &fv) && fv == -1e300;
	check(ok, "every scalar type round-trips", "");
	check(gguf_get_int(&g, "t.u64", &iv) == -1 && gguf_get_uint(&g, "t.i8", &uv) == -1 &&
	          gguf_get_int(&g, "t.f32", &iv) == -1 && gguf_get_float(&g, "t.u8", &fv) == -1 &&
	          gguf_get_str(&g, "t.u8") == NULL && gguf_get_int(&g, "no.such.key", &iv) == -1 &&
	          !gguf_get_int(&g, "t.u32", &iv) && iv == 4000000000ll,
	      "getters refuse values that do not convert", "");
	const GgufKV *as = gguf_find_key(&g, "t.arr_str"), *ai = gguf_find_key(&g, "t.arr_i16"),
	             *af = gguf_find_key(&g, "t.arr_f64"), *ae = gguf_find_key(&g, "t.arr_empty");
	uint64_t l1 = 9;
	ok = as && gguf_arr_len(as) == 3 && !strcmp(gguf_arr_str(as, 0, NULL), "alpha") &&
	     !strcmp(gguf_arr_str(as, 1, &l1), "") && l1 == 0 && !strcmp(gguf_arr_str(as, 2, NULL), "gamma delta") &&
	     !gguf_arr_str(as, 3, NULL) && ai && gguf_arr_len(ai) == 4 && !gguf_arr_int(ai, 2, &iv) && iv == -3 &&
	     gguf_arr_uint(ai, 0, &uv) == -1 && gguf_arr_int(ai, 4, &iv) == -1 && af && !gguf_arr_float(af, 1, &fv) &&
	     fv == -2.5 && ae && ae->arr_type == GGUF_UINT8 && gguf_arr_len(ae) == 0;
	check(ok, "arrays: strings, int16, float64, empty", "");
	/* Iteration: keys in the order written (alignment key first, added by the writer). */
	ok = g.nkv == 17 && !strcmp(g.kv[0].key, "general.alignment") && !strcmp(g.kv[1].key, "general.architecture") &&
	     !strcmp(g.kv[16].key, "t.arr_empty");
	check(ok, "keys iterate in file order", "nkv %d", g.nkv);
	const GgufTensor *a = gguf_find_tensor(&g, "w.a"), *c = gguf_find_tensor(&g, "w.c");
	ok = g.ntensor == 3 && !strcmp(g.t[0].name, "w.a") && !strcmp(g.t[2].name, "w.c") && a && c &&
	     a->off % 64 == 0 && c->off % 64 == 0 && ((const float *)gguf_tensor_data(&g, a))[63] == 53.0f &&
	     c->nbytes == 34;
	float y[32];
	ok = ok && !quant_dequant(c->type, gguf_tensor_data(&g, c), y, 32) && fabsf(y[31] - 21.0f) < 0.2f;
	check(ok, "tensors: order, 64-byte aligned offsets, data", "");
	gguf_close(&g);
}

/* A two-file split set, valid and broken. */
static void test_splits(void)
{
	char err[512];
	for (int part = 0; part < 2; part++) {
		GgufWriter *w = gguf_writer_new();
		gguf_writer_str(w, "general.architecture", "llama");
		gguf_writer_u16(w, "split.no", (uint16_t)part);
		gguf_writer_u16(w, "split.count", 2);
		gguf_writer_i32(w, "split.tensors.count", 3);
		float v[32] = {(float)part};
		int64_t ne[1] = {32};
		const char *names[2][2] = {{"a", "b"}, {"c", NULL}};
		for (int k = 0; k < 2 && names[part][k]; k++)
			gguf_writer_tensor(w, names[part][k], QT_F32, 1, ne, v, sizeof v);
		gguf_writer_write(w, tp(part ? "m-00002-of-00002.gguf" : "m-00001-of-00002.gguf"), err, sizeof err);
		gguf_writer_free(w);
	}
	Gguf g;
	int rc = gguf_open(&g, tp("m-00001-of-00002.gguf"), err, sizeof err);
	const GgufTensor *c = rc ? NULL : gguf_find_tensor(&g, "c");
	check(!rc && g.nfile == 2 && g.ntensor == 3 && c && c->file == 1 &&
	          ((const float *)gguf_tensor_data(&g, c))[0] == 1.0f,
	      "split set of 2: tensors from both files", "%s", rc ? err : "");
	if (!rc)
		gguf_close(&g);
	rc = gguf_open(&g, tp("m-00002-of-00002.gguf"), err, sizeof err);
	check(rc && strstr(err, "open the first split"), "opening the second split is refused", "%s",
	      rc ? err : "opened");
	if (!rc)
		gguf_close(&g);
}

/* ------------------------------------------------------------------------------------------------ */
/* Malformed files                                                                                   */

/* Offset of the tensor info of NAME (the byte after its name) inside an image. */
static uint8_t *tinfo(uint8_t *img, size_t n, const char *name)
{
	size_t l = strlen(name);
	uint8_t pat[72];
	wr64(pat, l);
	memcpy(pat + 8, name, l);
	uint8_t *p = memmem(img, n, pat, 8 + l);
	return p ? p + 8 + l : NULL;
}

/* Write IMG (n bytes) as FILE, open it, and expect failure with WANT in a one-line message that names
** the file. */
static void expect_fail(const char *what, const char *file, const uint8_t *img, size_t n, const char *want)
{
	char err[512] = "", name[256];
	snprintf(name, sizeof name, "malformed: %s -> \"%s\"", what, want);
	const char *path = tp(file);
	if (put(path, img, n)) {
		check(0, name, "cannot write %s", path);
		return;
	}
	Gguf g;
	if (!gguf_open(&g, path, err, sizeof err)) {
		gguf_close(&g);
		check(0, name, "opened");
		return;
	}
	check(strstr(err, want) && strstr(err, path) && !strchr(err, '\n'), name, "got: %s", err);
}

static void test_malformed(void)
{
	size_t n;
	uint8_t *base = small_image(&n), *img = malloc(n + 64);
	if (!base || !img) {
		check(0, "malformed: build base image", "out of memory");
		free(base);
		free(img);
		return;
	}
#define FRESH() memcpy(img, base, n)
	/* Base opens. */
	FRESH();
	{
		Gguf g;
		char err[512];
		put(tp("ok.gguf"), img, n);
		int rc = gguf_open(&g, tp("ok.gguf"), err, sizeof err);
		check(!rc, "malformed: the unmodified base file opens", "%s", err);
		if (!rc)
			gguf_close(&g);
	}
	FRESH();
	expect_fail("truncated header", "trunc1.gguf", img, 40, "truncated");
	expect_fail("truncated data", "trunc2.gguf", img, n - 40, "past end of file");
	expect_fail("empty file", "empty.gguf", img, 0, "not a GGUF file");
	FRESH();
	memcpy(img, "GGML", 4);
	expect_fail("wrong magic", "magic.gguf", img, n, "not a GGUF file");
	FRESH();
	wr32(img + 4, 1);
	expect_fail("version 1", "v1.gguf", img, n, "version 1 is not supported");
	FRESH();
	wr32(img + 4, 7);
	expect_fail("version 7", "v7.gguf", img, n, "unsupported GGUF version 7");
	FRESH();
	wr32(img + 4, 3u << 24);
	expect_fail("byte-swapped version", "be.gguf", img, n, "big-endian");
	FRESH();
	wr64(img + 24, 1ull << 40);                 /* length of the first key */
	expect_fail("oversized string length", "strlen.gguf", img, n, "string length 1099511627776");
	FRESH();
	wr64(img + 16, 1ull << 60);
	expect_fail("huge metadata count", "nkv.gguf", img, n, "metadata count");
	FRESH();
	wr64(img + 8, 1ull << 50);
	expect_fail("huge tensor count", "nt.gguf", img, n, "tensor count");

	uint8_t *ta = tinfo(base, n, "w.a"), *tb = tinfo(base, n, "w.b"), *tc = tinfo(base, n, "w.c");
	if (!ta || !tb || !tc) {
		check(0, "malformed: tensor infos found in base", "");
		free(base);
		free(img);
		return;
	}
	size_t oa = (size_t)(ta - base), ob = (size_t)(tb - base), oc = (size_t)(tc - base);
	/* Layout after a name: u32 ndim, i64 ne[ndim], i32 type, u64 offset. w.a and w.c have 2 dims. */
	FRESH();
	wr64(img + ob + 4 + 8 + 4, 1ull << 20);
	expect_fail("tensor data past EOF", "past.gguf", img, n, "past end of file");
	FRESH();
	wr32(img + oa + 4 + 16, 99);
	expect_fail("unknown type id", "type99.gguf", img, n, "unknown ggml type id 99");
	FRESH();
	wr32(img + oa + 4 + 16, 4);
	expect_fail("removed type id", "type4.gguf", img, n, "Q4_2 (id 4) was removed");
	FRESH();
	wr64(img + oa + 4, 1ull << 32);
	wr64(img + oa + 12, 1ull << 32);
	expect_fail("ne product overflow", "ne.gguf", img, n, "element count overflows");
	FRESH();
	wr64(img + oa + 4, (uint64_t)-32);
	expect_fail("negative ne", "neg.gguf", img, n, "is negative");
	FRESH();
	wr32(img + oa, 5);
	expect_fail("5 dimensions", "ndim.gguf", img, n, "5 dimensions");
	FRESH();
	wr64(img + oc + 4, 48);                    /* Q8_0 rows must be whole blocks of 32 */
	expect_fail("row not a whole block", "blk.gguf", img, n, "not a multiple of Q8_0's block size 32");
	FRESH();
	wr64(img + oc + 4 + 16 + 4, 256 + 8);
	expect_fail("misaligned offset", "align.gguf", img, n, "not a multiple of the alignment 32");
	FRESH();
	memcpy(img + ob - 1, "a", 1);                /* rename w.b to w.a */
	expect_fail("duplicate tensor name", "dup.gguf", img, n, "duplicate tensor name 'w.a'");
	FRESH();
	{
		uint8_t *k = memmem(img, n, "t.u16", 5);
		if (k)
			memcpy(k, "t.u32", 5);
		expect_fail("duplicate key", "dupkey.gguf", img, n, "duplicate key 't.u32'");
	}
	FRESH();
	{
		/* The type of t.u8 (right after its key) becomes ARRAY of ARRAY. */
		uint8_t *k = memmem(img, n, "t.u8", 4);
		wr32(k + 4, GGUF_ARRAY);
		wr32(k + 8, GGUF_ARRAY);
		expect_fail("nested array", "nested.gguf", img, n, "nested arrays are not supported");
	}
	FRESH();
	{
		uint8_t *k = memmem(img, n, "t.u8", 4);
		wr32(k + 4, 13);
		expect_fail("unknown value type", "vtype.gguf", img, n, "unknown value type 13");
	}
	FRESH();
	{
		/* The string array claims 2^40 elements. */
		uint8_t *k = memmem(img, n, "t.arr_str", 9);
		wr64(k + 9 + 4 + 4, 1ull << 40);
		expect_fail("array count past EOF", "arrn.gguf", img, n, "array of 1099511627776 strings");
	}
	FRESH();
	{
		/* The second string of the array claims a huge length. */
		uint8_t *k = memmem(img, n, "t.arr_str", 9);
		wr64(k + 9 + 4 + 4 + 8 + 8 + 5, 1ull << 33);
		expect_fail("array string length past EOF", "arrs.gguf", img, n, "element 1: string length");
	}
	free(base);

	/* Alignment key problems. */
	{
		GgufWriter *w = gguf_writer_new();
		gguf_writer_u32(w, "general.alignment", 24);
		int64_t ne[1] = {8};
		float v[8] = {0};
		gguf_writer_tensor(w, "x", QT_F32, 1, ne, v, sizeof v);
		size_t m;
		uint8_t *b = gguf_writer_image(w, &m);
		expect_fail("alignment not a power of two", "al24.gguf", b, m, "not a power of two");
		free(b);
		gguf_writer_free(w);
		w = gguf_writer_new();
		gguf_writer_i32(w, "general.alignment", 32);
		b = gguf_writer_image(w, &m);
		expect_fail("alignment of type int32", "ali32.gguf", b, m, "expected uint32");
		free(b);
		gguf_writer_free(w);
	}

	/* Bad split sets. */
	{
		char err[256];
		const char *names[] = {"bad-00001-of-00002.gguf", "bad-00002-of-00002.gguf"};
		for (int part = 0; part < 2; part++) {
			GgufWriter *w = gguf_writer_new();
			gguf_writer_u16(w, "split.no", 0);          /* the second file wrongly says 0 */
			gguf_writer_u16(w, "split.count", 2);
			gguf_writer_write(w, tp(names[part]), err, sizeof err);
			gguf_writer_free(w);
		}
		size_t m;
		uint8_t *b = slurp(tp(names[0]), &m);
		if (b) {
			expect_fail("split.no wrong in split 2", names[0], b, m, "split.no is 0 and split.count 2, expected 1 and 2");
			free(b);
		}
		GgufWriter *w = gguf_writer_new();
		gguf_writer_u16(w, "split.no", 0);
		gguf_writer_u16(w, "split.count", 3);
		b = gguf_writer_image(w, &m);
		expect_fail("split set with missing files", "gone-00001-of-00003.gguf", b, m,
		            "bad split set: cannot open split 2 of 3");
		expect_fail("split.count without split file name", "plain.gguf", b, m, "split.count is 3 but the file name");
		expect_fail("file name and split.count disagree", "odd-00001-of-00002.gguf", b, m,
		            "the file name says 2 splits but split.count is 3");
		free(b);
		gguf_writer_free(w);
	}
	free(img);
#undef FRESH
}

/* ------------------------------------------------------------------------------------------------ */

/* Read everything an opened file offers; a wrong bound shows up as a crash (or under ASan). */
static double touch(const Gguf *g)
{
	double sink = 0;
	for (int i = 0; i < g->nkv; i++) {
		const GgufKV *kv = &g->kv[i];
		uint64_t len, uv;
		int64_t iv;
		double fv;
		sink += (double)strlen(kv->key);
		if (!gguf_kv_float(kv, &fv) && isfinite(fv))
			sink += fv;
		for (uint64_t j = 0; j < gguf_arr_len(kv) && j < 64; j++) {
			const char *s = gguf_arr_str(kv, j, &len);
			if (s)
				sink += (double)(unsigned char)s[len];
			if (!gguf_arr_int(kv, j, &iv) || !gguf_arr_uint(kv, j, &uv) || !gguf_arr_float(kv, j, &fv))
				sink += 1;
		}
	}
	for (int i = 0; i < g->ntensor; i++) {
		const GgufTensor *t = &g->t[i];
		const uint8_t *p = gguf_tensor_data(g, t);
		if (t->nbytes)
			sink += p[t->nbytes - 1];
		if (quant_supported(t->type) && t->nelem > 0 && t->nelem <= 1 << 16) {
			float *y = malloc((size_t)t->nelem * sizeof *y);
			if (y && !quant_dequant(t->type, p, y, (size_t)t->nelem))
				sink += isfinite(y[0]) ? y[0] : 0;
			free(y);
		}
		sink += gguf_find_tensor(g, t->name) == t;
	}
	return sink;
}

/* 2000 seeded mutations of a valid file: flips, boundary values, truncations, splices. Each must
** open or fail with a one-line message; every 25th goes through a real file (mmap path). */
static void test_fuzz(void)
{
	size_t n;
	uint8_t *base = small_image(&n);
	uint8_t *img = malloc(n + 256);
	uint64_t seed = 0x9e3779b97f4a7c15ull;
	int opened = 0, failed_ok = 0, bad = 0;
	char why[600] = "";
	static const uint64_t edges[] = {0, 1, 0x7f, 0xff, 0xffff, 0x7fffffff, 0xffffffff, 1ull << 32, 1ull << 40,
	                                 INT64_MAX, UINT64_MAX, (uint64_t)INT64_MIN, 31, 32, 33, 256};
	for (int it = 0; it < 2000 && base && img; it++) {
		memcpy(img, base, n);
		size_t m = n;
		int nmut = 1 + (int)(rnd(&seed) % 4);
		for (int k = 0; k < nmut; k++) {
			size_t at = (size_t)(rnd(&seed) % m);
			switch (rnd(&seed) % 5) {
			case 0:
				img[at] ^= (uint8_t)(1u << (rnd(&seed) % 8));
				break;
			case 1:
				img[at] = (uint8_t)rnd(&seed);
				break;
			case 2:
				if (at + 8 <= m)
					wr64(img + at, edges[rnd(&seed) % (sizeof edges / sizeof *edges)]);
				break;
			case 3:
				m = at;                     /* truncate */
				break;
			case 4: {                         /* duplicate a chunk over another place */
				size_t from = (size_t)(rnd(&seed) % m), len = (size_t)(rnd(&seed) % 32);
				if (from + len <= m && at + len <= m)
					memmove(img + at, img + from, len);
				break;
			}
			}
			if (m == 0)
				break;
		}
		Gguf g;
		char err[512] = "";
		int rc;
		if (it % 25 == 0) {
			put(tp("fuzz.gguf"), img, m);
			rc = gguf_open(&g, tp("fuzz.gguf"), err, sizeof err);
		} else {
			rc = gguf_open_buffer(&g, img, m, "fuzz.gguf", err, sizeof err);
		}
		if (!rc) {
			opened++;
			touch(&g);
			gguf_close(&g);
		} else if (err[0] && !strchr(err, '\n') && strstr(err, "fuzz.gguf")) {
			failed_ok++;
		} else {
			if (!bad)
				snprintf(why, sizeof why, "iteration %d: message '%s'", it, err);
			bad++;
		}
	}
	check(base && img && bad == 0 && opened + failed_ok == 2000,
	      "fuzz: 2000 mutations, no crash, every failure has a one-line message naming the file", "%d bad; %s", bad,
	      why);
	printf("# fuzz: %d opened, %d refused\n", opened, failed_ok);
	free(base);
	free(img);
}

/* ------------------------------------------------------------------------------------------------ */
/* mkgguf: HF fixtures -> GGUF with llama.cpp names, the llama q/k permutation, F32 and Q8_0           */

/* Run a command quietly; its exit status. */
static int run(const char *cmd)
{
	char full[2048];
	snprintf(full, sizeof full, "%s >/dev/null 2>&1", cmd);
	int rc = system(full);
	return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* HF row r of a [rows, cols] projection as llama.cpp stores it: rows within each head reordered so
** that the two halves of a head become interleaved pairs. */
static int permuted_src_row(int r, int rows, int heads)
{
	int hd = rows / heads, h = r / hd, i = r % hd;
	return h * hd + (i % 2) * (hd / 2) + i / 2;
}

static void test_mkgguf(void)
{
	static const char *archs[] = {"llama", "qwen3"};
	for (int a = 0; a < 2; a++) {
		const char *arch = archs[a];
		char cmd[1024], name[256], err[512], out[3][256];
		static const char *variant[3] = {"f32 file", "q8_0 file", "f32 shuffle"};
		snprintf(out[0], sizeof out[0], "%s", tp(a ? "qwen3_f32.gguf" : "llama_f32.gguf"));
		snprintf(out[1], sizeof out[1], "%s", tp(a ? "qwen3_q8.gguf" : "llama_q8.gguf"));
		snprintf(out[2], sizeof out[2], "%s", tp(a ? "qwen3_shuf.gguf" : "llama_shuf.gguf"));
		int ok = 1;
		for (int v = 0; v < 3; v++) {
			snprintf(cmd, sizeof cmd, "build/tools/mkgguf " FIX "/hf/%s %s --type %s --order %s", arch, out[v],
			         v == 1 ? "q8_0" : "f32", v == 2 ? "shuffle" : "file");
			ok &= run(cmd) == 0;
		}
		snprintf(name, sizeof name, "mkgguf %s: f32, q8_0 and shuffled conversions succeed", arch);
		check(ok, name, "command failed: %s", cmd);
		if (!ok)
			continue;
		StDir hf;
		Gguf g[3];
		int opened = 0;
		snprintf(cmd, sizeof cmd, FIX "/hf/%s", arch);
		if (st_open_dir(&hf, cmd, err, sizeof err)) {
			check(0, name, "%s", err);
			continue;
		}
		for (; opened < 3; opened++)
			if (gguf_open(&g[opened], out[opened], err, sizeof err))
				break;
		snprintf(name, sizeof name, "mkgguf %s: outputs open", arch);
		check(opened == 3, name, "%s: %s", opened < 3 ? variant[opened] : "", err);
		if (opened < 3) {
			for (int i = 0; i < opened; i++)
				gguf_close(&g[i]);
			st_close(&hf);
			continue;
		}
		/* Metadata keys llama.cpp reads. */
		uint64_t bc = 0, emb = 0, ff = 0, hc = 0, hkv = 0, kl = 0, ctx = 0;
		double eps = 0, base = 0;
		char k[128];
#define U(key, var) (snprintf(k, sizeof k, "%s." key, arch), gguf_get_uint(&g[0], k, &var) == 0)
#define F(key, var) (snprintf(k, sizeof k, "%s." key, arch), gguf_get_float(&g[0], k, &var) == 0)
		const char *ga = gguf_get_str(&g[0], "general.architecture");
		ok = ga && !strcmp(ga, arch) && U("block_count", bc) && bc == 2 && U("embedding_length", emb) && emb == 64 &&
		     U("feed_forward_length", ff) && ff == 128 && U("attention.head_count", hc) && hc == 4 &&
		     U("attention.head_count_kv", hkv) && hkv == 2 && U("attention.key_length", kl) && kl == 16 &&
		     U("context_length", ctx) && ctx == 512 && F("attention.layer_norm_rms_epsilon", eps) &&
		     fabs(eps - 1e-5) < 1e-9 && F("rope.freq_base", base) && base == (a ? 1e6 : 1e4);
#undef U
#undef F
		snprintf(name, sizeof name, "mkgguf %s: llama.cpp metadata keys", arch);
		check(ok, name, "");
		/* Names and shapes: GGUF ne is the HF shape reversed. */
		const GgufTensor *q = gguf_find_tensor(&g[0], "blk.1.attn_q.weight");
		const GgufTensor *kk = gguf_find_tensor(&g[0], "blk.1.attn_k.weight");
		const GgufTensor *emb_t = gguf_find_tensor(&g[0], "token_embd.weight");
		ok = q && kk && emb_t && q->ne[0] == 64 && q->ne[1] == 64 && kk->ne[0] == 64 && kk->ne[1] == 32 &&
		     emb_t->ne[0] == 64 && emb_t->ne[1] == 512 && gguf_find_tensor(&g[0], "output.weight") &&
		     gguf_find_tensor(&g[0], "output_norm.weight") && gguf_find_tensor(&g[0], "blk.0.ffn_down.weight") &&
		     gguf_find_tensor(&g[0], "blk.0.ffn_norm.weight") && g[0].ntensor == hf.ntensor &&
		     (a == 0 || gguf_find_tensor(&g[0], "blk.0.attn_k_norm.weight"));
		snprintf(name, sizeof name, "mkgguf %s: llama.cpp tensor names, reversed shapes", arch);
		check(ok, name, "");
		/* Q and K rows: permuted for llama, unchanged for qwen3; other tensors byte-identical. */
		const StTensor *hq = st_find(&hf, "model.layers.1.self_attn.q_proj.weight");
		const StTensor *hk = st_find(&hf, "model.layers.1.self_attn.k_proj.weight");
		const float *sq = st_data(&hf, hq), *sk = st_data(&hf, hk);
		const float *gq = gguf_tensor_data(&g[0], q), *gk = gguf_tensor_data(&g[0], kk);
		int perm_ok = 1;
		for (int r = 0; r < 64; r++) {
			int src = a ? r : permuted_src_row(r, 64, 4);
			perm_ok &= !memcmp(gq + 64 * r, sq + 64 * src, 64 * 4);
		}
		for (int r = 0; r < 32; r++) {
			int src = a ? r : permuted_src_row(r, 32, 2);
			perm_ok &= !memcmp(gk + 64 * r, sk + 64 * src, 64 * 4);
		}
		snprintf(name, sizeof name, "mkgguf %s: q/k rows %s", arch, a ? "unpermuted" : "permuted as llama.cpp does");
		check(perm_ok, name, "");
		/* Q8_0: matrices quantized, norms F32, and each quantized tensor equals our quantizer's bytes. */
		const GgufTensor *q8 = gguf_find_tensor(&g[1], "blk.1.attn_q.weight");
		const GgufTensor *n8 = gguf_find_tensor(&g[1], "blk.1.attn_norm.weight");
		ok = q8 && n8 && q8->type == QT_Q8_0 && n8->type == QT_F32 && q8->nbytes == 64 * 2 * 34;
		if (ok) {
			float y[64 * 64];
			double err2 = 0, ref2 = 0;
			quant_dequant(QT_Q8_0, gguf_tensor_data(&g[1], q8), y, 64 * 64);
			for (int i = 0; i < 64 * 64; i++) {
				double d = (double)y[i] - gq[i];
				err2 += d * d;
				ref2 += (double)gq[i] * gq[i];
			}
			ok = sqrt(err2 / ref2) < 0.01;
		}
		snprintf(name, sizeof name, "mkgguf %s: q8_0 quantizes matrices (rel-L2 < 1%%), keeps norms F32", arch);
		check(ok, name, "");
		/* Shuffled order: different tensor order, identical bytes per name. */
		int same = g[2].ntensor == g[0].ntensor, moved = 0;
		for (int i = 0; same && i < g[0].ntensor; i++) {
			const GgufTensor *x = &g[0].t[i], *y = gguf_find_tensor(&g[2], x->name);
			same = y && y->type == x->type && y->nbytes == x->nbytes &&
			       !memcmp(gguf_tensor_data(&g[0], x), gguf_tensor_data(&g[2], y), x->nbytes);
			moved += strcmp(g[2].t[i].name, x->name) != 0;
		}
		snprintf(name, sizeof name, "mkgguf %s: shuffled order holds identical tensors in another order", arch);
		check(same && moved > 0, name, "same %d moved %d", same, moved);
		for (int i = 0; i < 3; i++)
			gguf_close(&g[i]);
		st_close(&hf);
	}
	check(run("build/tools/mkgguf " FIX "/hf/llama") != 0 && run("build/tools/mkgguf /nonexistent x.gguf") != 0,
	      "mkgguf: bad usage and missing input exit non-zero", "");
}

/* ------------------------------------------------------------------------------------------------ */
/* glmc inspect (called in-process; its listing goes to /dev/null)                                  */

/* inspect_main with stdout and stderr silenced. */
static int inspect_quiet(int argc, char **argv)
{
	fflush(stdout);
	fflush(stderr);
	int o = dup(1), e = dup(2), nul = open("/dev/null", O_WRONLY);
	dup2(nul, 1);
	dup2(nul, 2);
	int rc = inspect_main(argc, argv);
	fflush(stdout);
	fflush(stderr);
	dup2(o, 1);
	dup2(e, 2);
	close(o);
	close(e);
	close(nul);
	return rc;
}

static void test_inspect(void)
{
	char dump[512];
	snprintf(dump, sizeof dump, "%s", tp("dump.f32"));
	char *a1[] = {"inspect", FIX "/gguf/quants.gguf", "--tensor", "q.Q6_K", "--dump", dump};
	int rc = inspect_quiet(6, a1);
	size_t n = 0;
	float *d = (float *)slurp(dump, &n);
	Gguf g;
	char err[512];
	int ok = rc == 0 && d && n == 768 * 16 * 4 && !gguf_open(&g, FIX "/gguf/quants.gguf", err, sizeof err);
	if (ok) {
		ok = !memcmp(d, gguf_tensor_data(&g, gguf_find_tensor(&g, "ref.Q6_K")), n);
		gguf_close(&g);
	}
	check(ok, "inspect --tensor q.Q6_K --dump: ggml's dequantization, row-major", "rc %d, %zu bytes", rc, n);
	free(d);

	char *a2[] = {"inspect", FIX "/gguf/quants.gguf"};
	char *a3[] = {"inspect", FIX "/vocab/ggml-vocab-gpt-2.gguf"};
	char *a4[] = {"inspect", FIX "/hf/qwen3"};
	check(inspect_quiet(2, a2) == 0 && inspect_quiet(2, a3) == 0 && inspect_quiet(2, a4) == 0,
	      "inspect lists a GGUF, a vocab GGUF and an HF directory", "");

	snprintf(dump, sizeof dump, "%s", tp("dump_hf.f32"));
	char *a5[] = {"inspect", FIX "/hf/llama", "--tensor", "model.layers.0.self_attn.k_proj.weight", "--dump", dump};
	rc = inspect_quiet(6, a5);
	d = (float *)slurp(dump, &n);
	StDir hf;
	ok = rc == 0 && d && n == 32 * 64 * 4 && !st_open_dir(&hf, FIX "/hf/llama", err, sizeof err);
	if (ok) {
		ok = !memcmp(d, st_data(&hf, st_find(&hf, "model.layers.0.self_attn.k_proj.weight")), n);
		st_close(&hf);
	}
	check(ok, "inspect --dump from an HF directory", "rc %d", rc);
	free(d);

	char *b1[] = {"inspect", FIX "/gguf/quants.gguf", "--tensor", "nope", "--dump", dump};
	char bad[512];
	snprintf(bad, sizeof bad, "%s", tp("trunc1.gguf"));
	char *b2[] = {"inspect", bad};
	char *b3[] = {"inspect"};
	char *b4[] = {"inspect", FIX "/gguf/quants.gguf", "--tensor", "q.Q4_K"};
	check(inspect_quiet(6, b1) != 0 && inspect_quiet(2, b2) != 0 && inspect_quiet(1, b3) != 0 &&
	          inspect_quiet(4, b4) != 0,
	      "inspect: missing tensor, bad file, bad usage exit non-zero", "");
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

int main(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/test_gguf.XXXXXX");
	if (!mkdtemp(tmp)) {
		printf("FAIL - mkdtemp\n");
		return 1;
	}
	test_quants_file();
	test_vocab();
	test_roundtrip();
	test_splits();
	test_malformed();
	test_fuzz();
	test_mkgguf();
	test_inspect();
	nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return check_done();
}
