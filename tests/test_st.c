/*
** tests/test_st.c — the safetensors / HF checkpoint reader (runtime/formats/st.c): the real llama fixture,
** write/read round trips, a sharded directory, a table of malformed files that must each fail with a
** specific message, and a seeded fuzz loop that must never crash. Runs from the repository root.
*/
#include "check.h"
#include "st.h"

#include <ftw.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIXTURE "../shared/fixtures/hf/llama"

static char tmp[64];

/* Seeded xorshift so every run mutates the same way. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return *s = x;
}

/* Write raw bytes to a file; the tests build files byte by byte. */
static void put(const char *path, const void *b, size_t n)
{
	FILE *f = fopen(path, "wb");
	if (!f || fwrite(b, 1, n, f) != n) {
		printf("FAIL - cannot write %s\n", path);
		exit(1);
	}
	fclose(f);
}

/* Most directory fixtures are small JSON texts. */
static void put_str(const char *path, const char *s)
{
	put(path, s, strlen(s));
}

/* Path of NAME inside the temp dir (rotating static buffers so two can be used in one call). */
static const char *tp(const char *fmt, ...)
{
	static char buf[4][512];
	static int k;
	char name[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(name, sizeof name, fmt, ap);
	va_end(ap);
	k = (k + 1) % 4;
	snprintf(buf[k], sizeof buf[k], "%s/%s", tmp, name);
	return buf[k];
}

/* A safetensors file from a header text, a header-length field and a data section of datalen bytes
** filled with a counting pattern. hlen = UINT64_MAX means "the real header length". */
static uint8_t *mk(const char *hdr, uint64_t hlen, size_t datalen, size_t *n)
{
	size_t hl = strlen(hdr);
	*n = 8 + hl + datalen;
	uint8_t *b = malloc(*n);
	if (hlen == UINT64_MAX)
		hlen = hl;
	for (int i = 0; i < 8; i++)
		b[i] = (uint8_t)(hlen >> (8 * i));
	memcpy(b + 8, hdr, hl);
	for (size_t i = 0; i < datalen; i++)
		b[8 + hl + i] = (uint8_t)i;
	return b;
}

/* A shard with a given header and a data section, for the directory cases. */
static void put_st(const char *path, const char *hdr, size_t datalen)
{
	size_t n;
	uint8_t *b = mk(hdr, UINT64_MAX, datalen, &n);
	put(path, b, n);
	free(b);
}

/* nftw callback: the temp dir is removed at the end so runs leave nothing behind. */
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

/* Open FILE expecting failure whose message contains WANT, on one line. */
static void expect_fail(const char *name, int rc, const char *err, const StDir *d, const char *want)
{
	int clean = !d->t && !d->files && !d->config && !d->dir && !d->ntensor && !d->nfile;
	check(rc == -1 && strstr(err, want) && !strchr(err, '\n') && clean, name,
	      "rc=%d clean=%d err='%s' want '%s'", rc, clean, err, want);
}

/* The real fixture saved by transformers: names and shapes follow from config.json. */
static void test_fixture(void)
{
	StDir d;
	char err[512] = "";
	int rc = st_open_dir(&d, FIXTURE, err, sizeof err);
	check(rc == 0, "fixture: opens", "%s", err);
	if (rc)
		return;
	json_t *c = d.config;
	int L = (int)json_integer_value(json_object_get(c, "num_hidden_layers"));
	int64_t H = json_integer_value(json_object_get(c, "hidden_size"));
	int64_t V = json_integer_value(json_object_get(c, "vocab_size"));
	int64_t I = json_integer_value(json_object_get(c, "intermediate_size"));
	int64_t nh = json_integer_value(json_object_get(c, "num_attention_heads"));
	int64_t nkv = json_integer_value(json_object_get(c, "num_key_value_heads"));
	int64_t hd = json_integer_value(json_object_get(c, "head_dim"));
	int tied = json_is_true(json_object_get(c, "tie_word_embeddings"));
	check(L == 2 && H == 64 && V == 512, "fixture: config values", "L=%d H=%lld V=%lld", L, (long long)H,
	      (long long)V);
	check(d.ntensor == 2 + !tied + 9 * L && d.nfile == 1, "fixture: tensor count", "%d tensors, %d files",
	      d.ntensor, d.nfile);
	typedef struct {
		const char *n;
		int64_t a, b; /* b == 0: a vector [a] */
	} Want;
	const Want top[] = {{"model.embed_tokens.weight", V, H}, {"model.norm.weight", H, 0}, {"lm_head.weight", V, H}};
	const Want layer[] = {
		{"self_attn.q_proj.weight", nh * hd, H}, {"self_attn.k_proj.weight", nkv * hd, H},
		{"self_attn.v_proj.weight", nkv * hd, H}, {"self_attn.o_proj.weight", H, nh * hd},
		{"mlp.gate_proj.weight", I, H},          {"mlp.up_proj.weight", I, H},
		{"mlp.down_proj.weight", H, I},          {"input_layernorm.weight", H, 0},
		{"post_attention_layernorm.weight", H, 0},
	};
	int bad = 0;
	char why[256] = "";
	for (int l = -1; l < L; l++) {
		const Want *w = l < 0 ? top : layer;
		int nw = l < 0 ? 3 - tied : 9;
		for (int i = 0; i < nw; i++) {
			char name[128];
			if (l < 0)
				snprintf(name, sizeof name, "%s", w[i].n);
			else
				snprintf(name, sizeof name, "model.layers.%d.%s", l, w[i].n);
			const StTensor *t = st_find(&d, name);
			int nd = w[i].b ? 2 : 1;
			uint64_t nb = (uint64_t)(w[i].a * (nd == 2 ? w[i].b : 1) * 4);
			if (!t || t->dtype != ST_F32 || t->ndim != nd || t->shape[0] != w[i].a ||
			    (nd == 2 && t->shape[1] != w[i].b) || t->nbytes != nb) {
				bad++;
				snprintf(why, sizeof why, "%s: %s", name, t ? "wrong dtype/shape" : "missing");
			}
		}
	}
	check(!bad, "fixture: every tensor name and shape follows config.json", "%d bad, e.g. %s", bad, why);
	const StTensor *e = st_find(&d, "model.embed_tokens.weight");
	check(e && e->ndim == 2 && e->shape[0] == 512 && e->shape[1] == 64 && e->dtype == ST_F32 &&
		      !strcmp(st_type_name(e->dtype), "F32"),
	      "fixture: model.embed_tokens.weight is [512, 64] F32", "got %p", (const void *)e);
	check(!st_find(&d, "model.embed_tokens") && !st_find(&d, "") && !st_find(&d, "zzz"),
	      "fixture: st_find misses absent names", "found something");
	int sorted = 1;
	for (int i = 1; i < d.ntensor; i++)
		sorted &= strcmp(d.t[i - 1].name, d.t[i].name) < 0;
	check(sorted, "fixture: table sorted by name", "not sorted");

	/* Independent read: header length and offset from the raw bytes with stdio. */
	if (e) {
		FILE *f = fopen(FIXTURE "/model.safetensors", "rb");
		uint8_t l8[8];
		uint64_t n = 0;
		int ok = f && fread(l8, 1, 8, f) == 8;
		for (int i = 7; i >= 0; i--)
			n = n << 8 | l8[i];
		char *hdr = calloc(1, n + 1);
		ok = ok && fread(hdr, 1, n, f) == n;
		const char *key = "\"model.embed_tokens.weight\":{\"dtype\":\"F32\",\"shape\":[512,64],\"data_offsets\":[";
		char *p = ok ? strstr(hdr, key) : NULL;
		unsigned long long begin = 0;
		ok = p && sscanf(p + strlen(key), "%llu", &begin) == 1;
		float raw[64], got[64];
		ok = ok && fseek(f, (long)(8 + n + begin + 4 * (64 * 300)), SEEK_SET) == 0 && fread(raw, 4, 64, f) == 64;
		const float *m = st_data(&d, e);
		ok = ok && st_to_f32(got, m + 64 * 300, ST_F32, 64) == 0 && !memcmp(raw, got, sizeof raw) &&
		     e->off == 8 + n + begin;
		check(ok, "fixture: embed_tokens row 300 equals bytes read with stdio", "offset %llu", begin);
		free(hdr);
		if (f)
			fclose(f);
	}
	st_close(&d);
	check(!d.t && !d.files && !d.config && !d.ntensor, "fixture: st_close zeroes the StDir", "not zeroed");
}

/* Float conversions against independently computed values: every half value, chosen bf16 values. */
static void test_convert(void)
{
	int bad = 0;
	for (uint32_t h = 0; h < 65536; h++) {
		uint16_t v = (uint16_t)h;
		float got;
		st_to_f32(&got, &v, ST_F16, 1);
		int e = (h >> 10) & 31, m = h & 1023;
		double want = e == 0 ? ldexp(m, -24) : e == 31 ? (m ? NAN : INFINITY) : ldexp(1024 + m, e - 25);
		if (h & 0x8000)
			want = -want;
		if (isnan(want) ? !isnan(got) : (got != (float)want || !signbit(got) != !signbit(want)))
			bad++;
	}
	check(!bad, "convert: all 65536 f16 values exact", "%d wrong", bad);
	uint16_t b[] = {0x3f80, 0xc049, 0x7f80, 0x0001, 0x8000, 0x7fc0};
	float g[6];
	st_to_f32(g, b, ST_BF16, 6);
	check(g[0] == 1 && g[1] == -3.140625f && isinf(g[2]) && g[3] == ldexpf(1, -133) && g[4] == 0 &&
		      signbit(g[4]) && isnan(g[5]),
	      "convert: bf16 values exact", "%g %g %g %g", g[0], g[1], g[2], g[3]);
	/* Misaligned source: mapped tensors need not be aligned. */
	uint8_t buf[9];
	float one = 1.5f, o;
	memcpy(buf + 1, &one, 4);
	check(st_to_f32(&o, buf + 1, ST_F32, 1) == 0 && o == 1.5f && st_to_f32(&o, buf, ST_I32, 1) == -1 &&
		      st_to_f32(&o, buf, ST_F64, 1) == -1,
	      "convert: misaligned f32; non-float dtypes refused", "o=%g", o);
	int names = 1;
	for (int i = 0; i < ST_NTYPES; i++)
		names &= st_type_from_name(st_type_name(i)) == i && st_type_size(i) > 0;
	check(names && st_type_from_name("Q9_Z") == -1 && st_type_from_name("f32") == -1 &&
		      st_type_size(ST_BF16) == 2 && st_type_size(ST_F8_E4M3) == 1 && st_type_size(ST_I64) == 8 &&
		      st_type_size(-1) == 0 && st_type_size(ST_NTYPES) == 0,
	      "types: names and sizes", "mismatch");
}

/* st_write_file output read back: values, shapes, padding. */
static void test_roundtrip(void)
{
	float f32[6] = {1, -2.5f, 3.25f, 0, INFINITY, 1e-40f};
	uint16_t f16[5] = {0x3c00, 0xc000, 0x7bff, 0x0001, 0x3555};
	uint16_t bf[4] = {0x3f80, 0xc049, 0x4049, 0x0001};
	int64_t i64 = -7;
	int64_t s23[] = {2, 3}, s5[] = {5}, s221[] = {2, 2, 1}, s0[] = {0};
	StWrite w[] = {
		{"w.f32", ST_F32, 2, s23, f32}, {"w.f16", ST_F16, 1, s5, f16},    {"a.bf16", ST_BF16, 3, s221, bf},
		{"scalar", ST_I64, 0, NULL, &i64}, {"empty", ST_U8, 1, s0, NULL},
	};
	char err[512] = "";
	const char *path = tp("rt.safetensors");
	int rc = st_write_file(path, w, 5, err, sizeof err);
	check(rc == 0, "roundtrip: st_write_file", "%s", err);
	StDir d;
	rc = rc ? rc : st_open_file(&d, path, err, sizeof err);
	check(rc == 0, "roundtrip: reopen", "%s", err);
	if (rc)
		return;
	const uint8_t *map = d.files[0].map;
	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | map[i];
	check(n % 8 == 0 && map[8 + n - 1] != 0 && memmem(map + 8, n, "\"__metadata__\":{\"format\":\"pt\"}", 30),
	      "roundtrip: header padded to 8 bytes, metadata format pt", "n=%llu", (unsigned long long)n);
	check(d.ntensor == 5 && !strcmp(d.t[0].name, "a.bf16") && !strcmp(d.t[4].name, "w.f32"),
	      "roundtrip: 5 tensors sorted", "%d", d.ntensor);
	const StTensor *t = st_find(&d, "w.f32");
	float got[6];
	int ok = t && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->dtype == ST_F32 &&
		 st_to_f32(got, st_data(&d, t), t->dtype, 6) == 0 && !memcmp(got, f32, sizeof f32);
	check(ok, "roundtrip: F32 values and shape", "mismatch");
	t = st_find(&d, "w.f16");
	float w16[5] = {1, -2, 65504, ldexpf(1, -24), 0.333251953125f};
	ok = t && t->ndim == 1 && t->shape[0] == 5 && t->dtype == ST_F16 &&
	     st_to_f32(got, st_data(&d, t), t->dtype, 5) == 0 && !memcmp(got, w16, sizeof w16) &&
	     !memcmp(st_data(&d, t), f16, sizeof f16);
	check(ok, "roundtrip: F16 values", "got %g %g %g %g %g", got[0], got[1], got[2], got[3], got[4]);
	t = st_find(&d, "a.bf16");
	float wb[4] = {1, -3.140625f, 3.140625f, ldexpf(1, -133)};
	ok = t && t->ndim == 3 && t->shape[2] == 1 && t->dtype == ST_BF16 &&
	     st_to_f32(got, st_data(&d, t), t->dtype, 4) == 0 && !memcmp(got, wb, sizeof wb);
	check(ok, "roundtrip: BF16 values", "got %g %g %g %g", got[0], got[1], got[2], got[3]);
	t = st_find(&d, "scalar");
	int64_t sv = 0;
	if (t && t->nbytes == 8)
		memcpy(&sv, st_data(&d, t), 8);
	check(t && t->ndim == 0 && t->nbytes == 8 && sv == -7, "roundtrip: 0-d I64 scalar", "sv=%lld", (long long)sv);
	t = st_find(&d, "empty");
	check(t && t->ndim == 1 && t->shape[0] == 0 && t->nbytes == 0, "roundtrip: empty U8 tensor", "bad");
	st_close(&d);

	StWrite dup[] = {{"x", ST_F32, 1, s5, f32}, {"x", ST_F32, 1, s5, f32}};
	rc = st_write_file(tp("dup.safetensors"), dup, 2, err, sizeof err);
	check(rc == -1 && strstr(err, "repeated"), "write: duplicate name refused", "rc=%d %s", rc, err);
	StWrite bad[] = {{"x", 42, 1, s5, f32}};
	rc = st_write_file(tp("bad.safetensors"), bad, 1, err, sizeof err);
	check(rc == -1 && strstr(err, "dtype"), "write: bad dtype refused", "rc=%d %s", rc, err);
	rc = st_write_file(tp("nodir/x.safetensors"), w, 1, err, sizeof err);
	check(rc == -1 && strstr(err, "nodir/x.safetensors"), "write: unwritable path reported", "rc=%d %s", rc, err);
}

/* Two shards plus an index: each tensor must resolve to the shard the index names. */
static void test_sharded(void)
{
	mkdir(tp("sh"), 0755);
	put_str(tp("sh/config.json"), "{\"model_type\": \"test\", \"hidden_size\": 4}");
	float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[3] = {7, 8, 9};
	int64_t s4[] = {4}, s2[] = {2}, s3[] = {3};
	StWrite w1[] = {{"layer.0.w", ST_F32, 1, s4, a}, {"embed", ST_F32, 1, s2, b}};
	StWrite w2[] = {{"layer.1.w", ST_F32, 1, s3, c}};
	char err[512] = "";
	int rc = st_write_file(tp("sh/model-00001-of-00002.safetensors"), w1, 2, err, sizeof err);
	rc |= st_write_file(tp("sh/model-00002-of-00002.safetensors"), w2, 1, err, sizeof err);
	put_str(tp("sh/model.safetensors.index.json"),
		"{\"metadata\": {\"total_size\": 36}, \"weight_map\": {"
		"\"embed\": \"model-00001-of-00002.safetensors\", \"layer.0.w\": \"model-00001-of-00002.safetensors\", "
		"\"layer.1.w\": \"model-00002-of-00002.safetensors\"}}");
	StDir d;
	rc = rc ? rc : st_open_dir(&d, tp("sh"), err, sizeof err);
	check(rc == 0, "sharded: opens", "%s", err);
	if (rc)
		return;
	check(d.ntensor == 3 && d.nfile == 2 && json_integer_value(json_object_get(d.config, "hidden_size")) == 4,
	      "sharded: 3 tensors in 2 files, config read", "%d tensors %d files", d.ntensor, d.nfile);
	const StTensor *t0 = st_find(&d, "layer.0.w"), *t1 = st_find(&d, "layer.1.w"), *te = st_find(&d, "embed");
	int ok = t0 && t1 && te && strstr(d.files[t0->file].path, "model-00001-of-00002") &&
		 strstr(d.files[te->file].path, "model-00001-of-00002") &&
		 strstr(d.files[t1->file].path, "model-00002-of-00002");
	check(ok, "sharded: tensors resolve to the right shard", "wrong file");
	ok = ok && !memcmp(st_data(&d, t0), a, 16) && !memcmp(st_data(&d, t1), c, 12) && !memcmp(st_data(&d, te), b, 8);
	check(ok, "sharded: data from the right shard", "wrong bytes");
	st_close(&d);
	/* Trailing slash on the directory and the single-file layout. */
	mkdir(tp("one"), 0755);
	put_str(tp("one/config.json"), "{}");
	rc = st_write_file(tp("one/model.safetensors"), w1, 2, err, sizeof err);
	char p[600];
	snprintf(p, sizeof p, "%s/", tp("one"));
	rc = rc ? rc : st_open_dir(&d, p, err, sizeof err);
	check(rc == 0 && d.ntensor == 2 && d.nfile == 1 && !strcmp(d.dir, p), "single: dir with trailing slash opens",
	      "%s", err);
	if (!rc)
		st_close(&d);
}

/* Malformed single files: each must fail with a message naming the problem. */
static void test_malformed(void)
{
	static const struct {
		const char *name, *hdr;
		uint64_t hlen;  /* UINT64_MAX: the real length */
		size_t datalen; /* data section bytes */
		long cut;       /* >= 0: truncate the file to this many bytes */
		const char *want;
	} cases[] = {
		{"empty file", "", UINT64_MAX, 0, 0, "too short"},
		{"5-byte file", "", UINT64_MAX, 0, 5, "too short"},
		{"truncated header", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, 20,
		 "past end of file"},
		{"header length past file", "{}", 1000, 0, -1, "past end of file"},
		{"absurd header length", "{}", 1ull << 40, 0, -1, "absurd"},
		{"header length all ones", "{}", UINT64_MAX - 1, 0, -1, "absurd"},
		{"truncated data", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}", UINT64_MAX, 16, 67,
		 "tensor 'a': data_offsets [0, 16] past end of data (4 bytes)"},
		{"bad JSON", "{\"a\": {\"dtype\":", UINT64_MAX, 0, -1, "not valid JSON"},
		{"header length cuts JSON", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 10, 4, -1,
		 "not valid JSON"},
		{"zero header length", "", 0, 8, -1, "not valid JSON"},
		{"trailing garbage", "{} xyz", UINT64_MAX, 0, -1, "not valid JSON"},
		{"NUL in header", "{\"a\\u0000b\":{}}", UINT64_MAX, 0, -1, "not valid JSON"},
		{"header is an array", "[1, 2]", UINT64_MAX, 0, -1, "not a JSON object"},
		{"duplicate key", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
		 UINT64_MAX, 2, -1, "duplicate"},
		{"entry not an object", "{\"a\": 5}", UINT64_MAX, 0, -1, "tensor 'a': entry is not a JSON object"},
		{"missing dtype", "{\"a\":{\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, -1, "missing \"dtype\""},
		{"missing shape", "{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", UINT64_MAX, 4, -1, "missing \"shape\""},
		{"missing data_offsets", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1]}}", UINT64_MAX, 4, -1,
		 "missing \"data_offsets\""},
		{"dtype not a string", "{\"a\":{\"dtype\":3,\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, -1,
		 "\"dtype\" is not a string"},
		{"unknown dtype", "{\"w\":{\"dtype\":\"Q9_Z\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, -1,
		 "tensor 'w': unknown dtype 'Q9_Z'"},
		{"shape not an array", "{\"a\":{\"dtype\":\"F32\",\"shape\":4,\"data_offsets\":[0,16]}}", UINT64_MAX, 16, -1,
		 "\"shape\" is not an array"},
		{"shape float", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2.5],\"data_offsets\":[0,16]}}", UINT64_MAX, 16, -1,
		 "shape[0] is not an integer"},
		{"negative dim", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2,-2],\"data_offsets\":[0,16]}}", UINT64_MAX, 16, -1,
		 "shape[1] = -2 is negative"},
		{"ndim 9", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,1]}}", UINT64_MAX, 1,
		 -1, "9 dimensions, at most 8"},
		{"shape product overflow", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4294967296,4294967296,16],\"data_offsets\":[0,1]}}",
		 UINT64_MAX, 1, -1, "overflows"},
		{"byte size overflow", "{\"a\":{\"dtype\":\"F64\",\"shape\":[4611686018427387904],\"data_offsets\":[0,1]}}",
		 UINT64_MAX, 1, -1, "overflows"},
		{"huge integer", "{\"a\":{\"dtype\":\"U8\",\"shape\":[99999999999999999999999],\"data_offsets\":[0,1]}}",
		 UINT64_MAX, 1, -1, "not valid JSON"},
		{"offsets not a pair", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1,2]}}", UINT64_MAX, 2, -1,
		 "array of 2 integers"},
		{"offsets strings", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[\"0\",\"1\"]}}", UINT64_MAX, 2,
		 -1, "non-negative integers"},
		{"negative offset", "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[-1,0]}}", UINT64_MAX, 2, -1,
		 "non-negative integers"},
		{"end before begin", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", UINT64_MAX, 8, -1,
		 "end before begin"},
		{"end past data", "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[6,10]}}", UINT64_MAX, 8, -1,
		 "past end of data (8 bytes)"},
		{"size mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", UINT64_MAX, 16, -1,
		 "size mismatch"},
		{"overlapping offsets",
		 "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[8,24]}}",
		 UINT64_MAX, 24, -1, "tensors 'a' [0, 16] and 'b' [8, 24] overlap"},
		{"identical offsets",
		 "{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]},\"b\":{\"dtype\":\"I32\",\"shape\":[1],\"data_offsets\":[0,4]}}",
		 UINT64_MAX, 4, -1, "overlap"},
		{"metadata not an object", "{\"__metadata__\": [1]}", UINT64_MAX, 0, -1, "\"__metadata__\" is not a JSON object"},
		{"metadata value not a string", "{\"__metadata__\": {\"format\": 1}}", UINT64_MAX, 0, -1,
		 "\"__metadata__\" value 'format' is not a string"},
		{"newline in name", "{\"a\\nb\":{\"dtype\":\"Q9_Z\",\"shape\":[1],\"data_offsets\":[0,4]}}", UINT64_MAX, 4, -1,
		 "tensor 'a?b': unknown dtype"},
	};
	int nc = (int)(sizeof cases / sizeof cases[0]);
	for (int i = 0; i < nc; i++) {
		size_t n;
		uint8_t *b = mk(cases[i].hdr, cases[i].hlen, cases[i].datalen, &n);
		if (cases[i].cut >= 0 && (size_t)cases[i].cut < n)
			n = (size_t)cases[i].cut;
		const char *path = tp("bad%d.safetensors", i);
		put(path, b, n);
		free(b);
		StDir d;
		char err[512] = "", name[128];
		int rc = st_open_file(&d, path, err, sizeof err);
		snprintf(name, sizeof name, "malformed: %s", cases[i].name);
		expect_fail(name, rc, err, &d, cases[i].want);
		check(!rc || !strncmp(err, path, strlen(path)), "malformed: message starts with the file name", "%s",
		      err);
		if (!rc)
			st_close(&d);
	}
	/* A megabyte-long name must not push the reason out of the message. */
	size_t ln = 1 << 20;
	char *hdr = malloc(ln + 100);
	hdr[0] = '{', hdr[1] = '"';
	memset(hdr + 2, 'x', ln);
	strcpy(hdr + 2 + ln, "\":{\"dtype\":\"Q9_Z\",\"shape\":[1],\"data_offsets\":[0,4]}}");
	put_st(tp("long.safetensors"), hdr, 4);
	free(hdr);
	StDir d;
	char err[512] = "";
	int rc = st_open_file(&d, tp("long.safetensors"), err, sizeof err);
	expect_fail("malformed: 1 MB tensor name still says why", rc, err, &d, "unknown dtype 'Q9_Z'");
	rc = st_open_file(&d, tp("does-not-exist.safetensors"), err, sizeof err);
	expect_fail("malformed: missing file", rc, err, &d, "does-not-exist.safetensors: cannot open");
	rc = st_open_file(&d, tmp, err, sizeof err);
	expect_fail("malformed: directory as file", rc, err, &d, "not a regular file");
	/* Tiny errlen: truncated but still terminated, and no crash with errlen 0. */
	char small[8];
	rc = st_open_file(&d, tp("does-not-exist.safetensors"), small, sizeof small);
	check(rc == -1 && strlen(small) == 7, "malformed: tiny error buffer", "'%s'", small);
	rc = st_open_file(&d, tp("does-not-exist.safetensors"), NULL, 0);
	check(rc == -1, "malformed: NULL error buffer", "rc=%d", rc);
}

/* Write a directory for a dir-level case: config text (NULL: none), index text (NULL: none), and up to
** two shards with fixed contents. */
static const char *mkdir_case(int k, const char *config, const char *index, const char *s1, const char *h1,
			      const char *s2, const char *h2)
{
	static char dir[512];
	snprintf(dir, sizeof dir, "%s", tp("dir%d", k));
	mkdir(dir, 0755);
	if (config)
		put_str(tp("dir%d/config.json", k), config);
	if (index)
		put_str(tp("dir%d/model.safetensors.index.json", k), index);
	if (s1)
		put_st(tp("dir%d/%s", k, s1), h1, 16);
	if (s2)
		put_st(tp("dir%d/%s", k, s2), h2, 16);
	return dir;
}

/* Malformed directories: config, index and the index's agreement with its shards. */
static void test_bad_dirs(void)
{
	const char *A = "{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
	const char *B = "{\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";
	const char *AB = "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,16]}}";
	const char *IX = "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
	const struct {
		const char *name, *config, *index, *s1, *h1, *s2, *h2, *want;
	} cases[] = {
		{"no config.json", NULL, IX, "s1.safetensors", NULL, NULL, NULL, "config.json: cannot open"},
		{"config.json bad JSON", "{\"a\":", IX, NULL, NULL, NULL, NULL, "config.json: "},
		{"config.json not an object", "[]", IX, NULL, NULL, NULL, NULL, "config.json: not a JSON object"},
		{"no weights", "{}", NULL, NULL, NULL, NULL, NULL, "no model.safetensors or model.safetensors.index.json"},
		{"index bad JSON", "{}", "{\"weight_map\": ", NULL, NULL, NULL, NULL, "model.safetensors.index.json: "},
		{"index without weight_map", "{}", "{\"metadata\": {}}", NULL, NULL, NULL, NULL, "missing \"weight_map\""},
		{"index weight_map not object", "{}", "{\"weight_map\": []}", NULL, NULL, NULL, NULL,
		 "\"weight_map\" is not a JSON object"},
		{"index weight_map empty", "{}", "{\"weight_map\": {}}", NULL, NULL, NULL, NULL, "\"weight_map\" is empty"},
		{"index value not a string", "{}", "{\"weight_map\": {\"a\": 1}}", NULL, NULL, NULL, NULL,
		 "weight_map entry 'a' is not a string"},
		{"missing shard", "{}", IX, "s1.safetensors", A, NULL, NULL, "s2.safetensors named in the index is missing"},
		{"path traversal ..", "{}", "{\"weight_map\":{\"a\":\"../s1.safetensors\"}}", "s1.safetensors", A, NULL, NULL,
		 "path traversal"},
		{"path traversal /", "{}", "{\"weight_map\":{\"a\":\"/etc/passwd\"}}", NULL, NULL, NULL, NULL, "path traversal"},
		{"path traversal sub/", "{}", "{\"weight_map\":{\"a\":\"sub/s1.safetensors\"}}", NULL, NULL, NULL, NULL,
		 "path traversal"},
		{"shard name empty", "{}", "{\"weight_map\":{\"a\":\"\"}}", NULL, NULL, NULL, NULL, "not a plain file name"},
		{"duplicate across shards", "{}", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}",
		 "s1.safetensors", AB, "s2.safetensors", B, "duplicate tensor 'b'"},
		{"tensor the shard lacks", "{}", "{\"weight_map\":{\"a\":\"s1.safetensors\",\"c\":\"s1.safetensors\"}}",
		 "s1.safetensors", A, NULL, NULL, "tensor 'c' is mapped to shard s1.safetensors but that shard lacks it"},
		{"tensor in the other shard", "{}", "{\"weight_map\":{\"a\":\"s2.safetensors\",\"b\":\"s1.safetensors\"}}",
		 "s1.safetensors", A, "s2.safetensors", B, "but that shard lacks it; it is in"},
		{"shard tensor not in index", "{}", "{\"weight_map\":{\"a\":\"s1.safetensors\"}}", "s1.safetensors", AB, NULL,
		 NULL, "s1.safetensors: tensor 'b' is not listed in"},
		{"corrupt shard", "{}", IX, "s1.safetensors", A, "s2.safetensors", "{\"b\":{\"dtype\":\"Q9_Z\"}}",
		 "s2.safetensors: tensor 'b': missing \"shape\""},
		{"shard is a directory", "{}", "{\"weight_map\":{\"a\":\"sd\"}}", NULL, NULL, NULL, NULL, "sd: not a regular file"},
		{"corrupt single file", "{}", NULL, "model.safetensors", "{\"a\":[]}", NULL, NULL,
		 "model.safetensors: tensor 'a': entry is not a JSON object"},
	};
	int nc = (int)(sizeof cases / sizeof cases[0]);
	for (int i = 0; i < nc; i++) {
		const char *dir = mkdir_case(i, cases[i].config, cases[i].index, cases[i].h1 ? cases[i].s1 : NULL,
					     cases[i].h1, cases[i].s2, cases[i].h2);
		if (!strcmp(cases[i].name, "shard is a directory"))
			mkdir(tp("dir%d/sd", i), 0755);
		if (!strcmp(cases[i].name, "no config.json"))
			put_st(tp("dir%d/model.safetensors", i), A, 16);
		StDir d;
		char err[512] = "", name[128];
		int rc = st_open_dir(&d, dir, err, sizeof err);
		snprintf(name, sizeof name, "bad dir: %s", cases[i].name);
		expect_fail(name, rc, err, &d, cases[i].want);
		if (!rc)
			st_close(&d);
	}
	StDir d;
	char err[512] = "";
	int rc = st_open_dir(&d, tp("no-such-dir"), err, sizeof err);
	expect_fail("bad dir: directory missing", rc, err, &d, "no-such-dir: cannot open");
	rc = st_open_dir(&d, tp("rt.safetensors"), err, sizeof err);
	expect_fail("bad dir: a file, not a directory", rc, err, &d, "not a directory");
}

/* Open every tensor's bytes so that valgrind or ASan would see any out-of-bounds pointer. */
static int touch_all(const StDir *d, unsigned *sum)
{
	for (int i = 0; i < d->ntensor; i++) {
		const StTensor *t = &d->t[i];
		const StFile *f = &d->files[t->file];
		uint64_t want = st_type_size(t->dtype);
		for (int k = 0; k < t->ndim; k++)
			want *= (uint64_t)t->shape[k];
		if (t->off > f->size || t->nbytes > f->size - t->off || want != t->nbytes || st_find(d, t->name) != t)
			return -1;
		const uint8_t *p = st_data(d, t);
		for (uint64_t k = 0; k < t->nbytes; k++)
			*sum += p[k];
	}
	return 0;
}

/* Seeded mutations of a valid file (and of an index): open must return 0 or -1 with a one-line
** message, never crash or point outside the file. */
static void test_fuzz(void)
{
	float f[6];
	unsigned long long fs = 42;
	fill_random(f, 6, &fs);
	uint16_t h[4] = {1, 2, 3, 4};
	int64_t q[2] = {-1, 7};
	int64_t s23[] = {2, 3}, s4[] = {4}, s2[] = {2}, s0[] = {0, 5};
	StWrite w[] = {{"a", ST_F32, 2, s23, f}, {"b.bf16", ST_BF16, 1, s4, h}, {"c", ST_I64, 1, s2, q},
		       {"d", ST_U8, 2, s0, NULL}, {"e", ST_F16, 0, NULL, h}};
	char err[512] = "";
	const char *base = tp("fuzz-base.safetensors");
	if (st_write_file(base, w, 5, err, sizeof err)) {
		check(0, "fuzz: base file", "%s", err);
		return;
	}
	FILE *fp = fopen(base, "rb");
	uint8_t orig[4096];
	size_t on = fread(orig, 1, sizeof orig, fp);
	fclose(fp);
	uint64_t hn = 0;
	for (int i = 7; i >= 0; i--)
		hn = hn << 8 | orig[i];
	const char tok[] = "{}[]\":,0123456789-eE. \\x";
	uint64_t seed = 0x5eed1234abcdull;
	uint8_t *buf = malloc(3 * sizeof orig);
	int opened = 0, refused = 0, bad = 0;
	unsigned sum = 0;
	char why[600] = "";
	const char *path = tp("fuzz.safetensors");
	for (int it = 0; it < 2000; it++) {
		size_t n = on;
		memcpy(buf, orig, on);
		int nm = 1 + (int)(rnd(&seed) % 3);
		for (int m = 0; m < nm; m++) {
			uint64_t r = rnd(&seed);
			/* Most positions land in the length field and the header, where parsing happens. */
			size_t pos = n ? (r & 0x300 ? (size_t)(rnd(&seed) % (8 + hn < n ? 8 + hn : n)) : (size_t)(rnd(&seed) % n)) : 0;
			switch (r % 7) {
			case 0: /* flip bits */
				if (n)
					buf[pos] ^= (uint8_t)(1u << (rnd(&seed) % 8));
				break;
			case 1: /* a JSON-significant character */
				if (n)
					buf[pos] = (uint8_t)tok[rnd(&seed) % (sizeof tok - 1)];
				break;
			case 2: /* truncate */
				n = n ? (size_t)(rnd(&seed) % n) : 0;
				break;
			case 3: { /* header length: nearby, small, or wild */
				uint64_t l, k = rnd(&seed);
				l = k % 3 == 0 ? hn + (k >> 8) % 33 - 16 : k % 3 == 1 ? (k >> 8) % (on + 1) : k >> 2;
				if (n >= 8)
					for (int i = 0; i < 8; i++)
						buf[i] = (uint8_t)(l >> (8 * i));
				break;
			}
			case 4: { /* splice: copy a chunk over another place */
				if (!n)
					break;
				size_t src = (size_t)(rnd(&seed) % n), len = 1 + (size_t)(rnd(&seed) % 32);
				if (src + len > n)
					len = n - src;
				if (pos + len > n)
					len = n - pos;
				memmove(buf + pos, buf + src, len);
				break;
			}
			case 5: { /* insert a chunk (bytes shift, offsets no longer match) */
				size_t src = n ? (size_t)(rnd(&seed) % n) : 0, len = 1 + (size_t)(rnd(&seed) % 16);
				if (src + len > n)
					len = n - src;
				if (n + len > 3 * sizeof orig)
					break;
				memmove(buf + pos + len, buf + pos, n - pos);
				memmove(buf + pos, buf + (src >= pos ? src + len : src), len);
				n += len;
				break;
			}
			case 6: { /* delete a chunk */
				size_t len = 1 + (size_t)(rnd(&seed) % 16);
				if (pos + len > n)
					len = n - pos;
				memmove(buf + pos, buf + pos + len, n - pos - len);
				n -= len;
				break;
			}
			}
		}
		put(path, buf, n);
		StDir d;
		err[0] = 0;
		int rc = st_open_file(&d, path, err, sizeof err);
		if (rc == 0) {
			opened++;
			if (touch_all(&d, &sum) || d.nfile != 1) {
				bad++;
				snprintf(why, sizeof why, "iteration %d: opened with a tensor out of bounds", it);
			}
			st_close(&d);
		} else if (rc == -1 && err[0] && !strchr(err, '\n') && !d.t && !d.files) {
			refused++;
		} else {
			bad++;
			snprintf(why, sizeof why, "iteration %d: rc=%d err='%s'", it, rc, err);
		}
	}
	check(!bad, "fuzz: 2000 mutated files open cleanly or fail with a message", "%d bad, last %s", bad, why);
	check(opened > 20 && refused > 1000, "fuzz: mutations reach both outcomes", "opened %d refused %d", opened,
	      refused);

	/* Mutated index JSON over two good shards. */
	mkdir(tp("fz"), 0755);
	put_str(tp("fz/config.json"), "{}");
	StWrite w1[] = {{"a", ST_F32, 2, s23, f}}, w2[] = {{"b", ST_BF16, 1, s4, h}};
	st_write_file(tp("fz/s1.safetensors"), w1, 1, err, sizeof err);
	st_write_file(tp("fz/s2.safetensors"), w2, 1, err, sizeof err);
	const char *ix = "{\"metadata\":{\"total_size\":32},\"weight_map\":{\"a\":\"s1.safetensors\",\"b\":\"s2.safetensors\"}}";
	size_t il = strlen(ix);
	bad = opened = refused = 0;
	for (int it = 0; it < 500; it++) {
		char t[256];
		size_t n = il;
		memcpy(t, ix, il);
		for (int m = 0; m < 1 + (int)(rnd(&seed) % 3); m++) {
			uint64_t r = rnd(&seed);
			size_t pos = (size_t)(rnd(&seed) % (n ? n : 1));
			if (r % 3 == 0 && n)
				t[pos] = tok[rnd(&seed) % (sizeof tok - 1)];
			else if (r % 3 == 1)
				n = pos;
			else if (n)
				t[pos] ^= (char)(1 << (rnd(&seed) % 7));
		}
		put(tp("fz/model.safetensors.index.json"), t, n);
		StDir d;
		err[0] = 0;
		int rc = st_open_dir(&d, tp("fz"), err, sizeof err);
		if (rc == 0) {
			opened++;
			if (touch_all(&d, &sum))
				bad++;
			st_close(&d);
		} else if (rc == -1 && err[0] && !strchr(err, '\n')) {
			refused++;
		} else {
			bad++;
			snprintf(why, sizeof why, "index iteration %d: rc=%d err='%s'", it, rc, err);
		}
	}
	check(!bad && opened + refused == 500, "fuzz: 500 mutated index files", "%d bad, %s", bad, why);
	free(buf);
	(void)sum;
}

/* build/tools/mkhf (built by make before the tests): dtype conversion and sharding of the fixture. */
static void test_mkhf(void)
{
	const char *tool = "build/tools/mkhf";
	if (access(tool, X_OK)) {
		check(0, "mkhf: tool built", "%s missing (run make)", tool);
		return;
	}
	StDir src, d;
	char err[512] = "", cmd[1024];
	if (st_open_dir(&src, FIXTURE, err, sizeof err)) {
		check(0, "mkhf: fixture", "%s", err);
		return;
	}
	static const struct {
		const char *dtype;
		int shards, st;
		double tol;
	} runs[] = {{"f32", 1, ST_F32, 0}, {"bf16", 3, ST_BF16, 0x1p-8}, {"f16", 2, ST_F16, 0x1p-11}};
	for (int r = 0; r < 3; r++) {
		const char *out = tp("mkhf-%s", runs[r].dtype);
		snprintf(cmd, sizeof cmd, "%s %s %s --dtype %s --shards %d", tool, FIXTURE, out, runs[r].dtype,
			 runs[r].shards);
		int rc = system(cmd);
		int ok = rc == 0 && st_open_dir(&d, out, err, sizeof err) == 0;
		char name[128];
		snprintf(name, sizeof name, "mkhf: --dtype %s --shards %d opens", runs[r].dtype, runs[r].shards);
		check(ok, name, "rc=%d %s", rc, err);
		if (!ok)
			continue;
		int bad = 0, nfile = d.nfile;
		double worst = 0;
		for (int i = 0; i < src.ntensor && !bad; i++) {
			const StTensor *a = &src.t[i], *b = st_find(&d, a->name);
			if (!b || b->dtype != runs[r].st || b->ndim != a->ndim || memcmp(a->shape, b->shape, sizeof a->shape)) {
				bad++;
				break;
			}
			size_t n = a->nbytes / 4;
			float *x = malloc(n * 4), *y = malloc(n * 4);
			st_to_f32(x, st_data(&src, a), a->dtype, n);
			st_to_f32(y, st_data(&d, b), b->dtype, n);
			for (size_t k = 0; k < n; k++) {
				double e = fabs((double)x[k] - y[k]) / (fabs(x[k]) > 1e-4 ? fabs(x[k]) : 1e-4);
				worst = e > worst ? e : worst;
			}
			if (runs[r].tol == 0 && memcmp(st_data(&src, a), st_data(&d, b), a->nbytes))
				bad++;
			free(x);
			free(y);
		}
		const StTensor *ea = st_find(&src, "model.embed_tokens.weight"), *eb = st_find(&d, ea->name);
		float *x = malloc(ea->nbytes), *y = malloc(ea->nbytes);
		size_t ne = ea->nbytes / 4;
		st_to_f32(x, st_data(&src, ea), ea->dtype, ne);
		if (eb)
			st_to_f32(y, st_data(&d, eb), eb->dtype, ne);
		double l2 = eb ? rel_l2(y, x, ne) : INFINITY;
		free(x);
		free(y);
		snprintf(name, sizeof name, "mkhf: --dtype %s embeddings rel L2 %.2g", runs[r].dtype, runs[r].tol);
		check(l2 <= runs[r].tol, name, "rel L2 %g", l2);
		snprintf(name, sizeof name, "mkhf: --dtype %s --shards %d values within rounding", runs[r].dtype,
			 runs[r].shards);
		check(!bad && d.ntensor == src.ntensor && nfile == runs[r].shards && worst <= runs[r].tol, name,
		      "bad=%d ntensor=%d nfile=%d worst rel err %g", bad, d.ntensor, nfile, worst);
		snprintf(cmd, sizeof cmd, "%s/config.json", out);
		json_t *c = json_load_file(cmd, 0, NULL);
		check(c && json_equal(c, src.config), "mkhf: config.json copied unchanged", "differs");
		json_decref(c);
		st_close(&d);
	}
	/* bf16 rounding is round-to-nearest-even, checked on chosen values. */
	float v[6] = {1.0f, 1.00390625f, 1.01171875f, -1.00390625f, 3.4e38f, NAN};
	/* 1+2^-8 is a tie -> 1.0 (even); 1+3·2^-8 is a tie -> 1+2^-6 (even); 3.4e38 stays finite (0x7f80 is inf). */
	uint16_t want[6] = {0x3f80, 0x3f80, 0x3f82, 0xbf80, 0x7f80, 0x7fc0};
	int64_t s6[] = {6};
	StWrite w[] = {{"v", ST_F32, 1, s6, v}};
	mkdir(tp("rne"), 0755);
	put_str(tp("rne/config.json"), "{}");
	put_str(tp("rne/extra.json"), "{\"x\": 1}");
	st_write_file(tp("rne/model.safetensors"), w, 1, err, sizeof err);
	snprintf(cmd, sizeof cmd, "%s %s %s --dtype bf16", tool, tp("rne"), tp("rne-out"));
	int rc = system(cmd);
	uint16_t got[6] = {0};
	if (rc == 0 && st_open_dir(&d, tp("rne-out"), err, sizeof err) == 0) {
		const StTensor *t = st_find(&d, "v");
		if (t && t->nbytes == 12)
			memcpy(got, st_data(&d, t), 12);
		st_close(&d);
	}
	/* 3.4e38 = 0x7f7fc99e rounds up to 0x7f80 (inf) under RNE since it is past the bf16 max + half ulp. */
	check(rc == 0 && !memcmp(got, want, 8) && got[4] == want[4] && (got[5] & 0x7f80) == 0x7f80 && (got[5] & 0x7f),
	      "mkhf: bf16 round-to-nearest-even", "%04x %04x %04x %04x %04x %04x", got[0], got[1], got[2], got[3], got[4],
	      got[5]);
	check(access(tp("rne-out/extra.json"), R_OK) == 0, "mkhf: other .json files copied", "extra.json missing");
	snprintf(cmd, sizeof cmd, "%s %s %s 2>/dev/null", tool, tp("no-such"), tp("x-out"));
	int rc1 = system(cmd);
	snprintf(cmd, sizeof cmd, "%s %s %s --dtype q4 2>/dev/null", tool, FIXTURE, tp("x-out2"));
	int rc2 = system(cmd);
	snprintf(cmd, sizeof cmd, "%s %s %s --shards 1000 2>/dev/null", tool, FIXTURE, tp("x-out3"));
	int rc3 = system(cmd);
	snprintf(cmd, sizeof cmd, "%s --help >/dev/null", tool);
	int rc4 = system(cmd);
	check(rc1 != 0 && rc2 != 0 && rc3 != 0 && rc4 == 0, "mkhf: bad input exits non-zero, --help zero",
	      "%d %d %d %d", rc1, rc2, rc3, rc4);
	st_close(&src);
}

/* Everything is written under one mkdtemp directory, removed at the end. */
int main(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/test_st.XXXXXX");
	if (!mkdtemp(tmp)) {
		printf("FAIL - mkdtemp\n");
		return 1;
	}
	test_fixture();
	test_convert();
	test_roundtrip();
	test_sharded();
	test_malformed();
	test_bad_dirs();
	test_fuzz();
	if (!getenv("TEST_ST_NO_MKHF"))
		test_mkhf();
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return check_done();
}
