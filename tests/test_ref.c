/*
** tests/test_ref.c — the float32 reference kernels (ops/ref.c) against golden data that torch and
** Hugging Face transformers computed (tests/data/ref/NAME.bin, written by tests/tools/gen_ref_golden.py,
** which the suite never runs). Every output is poisoned with NaN (or -1) before the kernel runs, so a
** skipped element fails. Tolerance: rel-L2 <= 1e-5; indices and conversions must match exactly.
*/
#include "check.h"
#include "par.h"
#include "ref.h"

#include <stdint.h>
#include <string.h>

#define TOL 1e-5
#define DIR "tests/data/ref/"

enum { F32, I32, U16, F64 };

/* One golden file: named arrays, read whole. */
typedef struct {
	char name[32];
	uint32_t type, n;
	void *data;
} Rec;

typedef struct {
	char path[128];
	Rec r[48];
	int n;
} Gold;

/* A golden file that cannot be read is a failed check, and the end of the run. */
static void gold_fail(const char *path, const char *why, const char *key)
{
	check(0, path, "%s%s%s", why, key ? ": " : "", key ? key : "");
	exit(check_done());
}

static Gold *gold_open(const char *file)
{
	static const size_t size[] = {4, 4, 2, 8};
	Gold *g = calloc(1, sizeof *g);
	if (!g)
		abort();
	snprintf(g->path, sizeof g->path, DIR "%s.bin", file);
	FILE *f = fopen(g->path, "rb");
	if (!f)
		gold_fail(g->path, "cannot open (run from the repo root)", NULL);
	uint32_t len;
	while (fread(&len, 4, 1, f) == 1) {
		Rec *r = &g->r[g->n];
		if (g->n == 48 || len >= sizeof r->name || fread(r->name, 1, len, f) != len ||
		    fread(&r->type, 4, 1, f) != 1 || fread(&r->n, 4, 1, f) != 1 || r->type > F64)
			gold_fail(g->path, "bad record", NULL);
		r->name[len] = 0;
		r->data = malloc((size_t)r->n * size[r->type] + 1);
		if (!r->data || fread(r->data, size[r->type], r->n, f) != r->n)
			gold_fail(g->path, "short record", r->name);
		g->n++;
	}
	fclose(f);
	return g;
}

static void gold_close(Gold *g)
{
	for (int i = 0; i < g->n; i++)
		free(g->r[i].data);
	free(g);
}

/* The array called key, or NULL when the file has none. */
static const void *gold_opt(Gold *g, const char *key, uint32_t type, size_t n)
{
	for (int i = 0; i < g->n; i++)
		if (!strcmp(g->r[i].name, key)) {
			if (g->r[i].type != type || g->r[i].n != n)
				gold_fail(g->path, "unexpected type or size", key);
			return g->r[i].data;
		}
	return NULL;
}

static const void *gold_get(Gold *g, const char *key, uint32_t type, size_t n)
{
	const void *p = gold_opt(g, key, type, n);
	if (!p)
		gold_fail(g->path, "missing array", key);
	return p;
}

#define GF(g, k, n) ((const float *)gold_get(g, k, F32, n))
#define GI(g, k, n) ((const int32_t *)gold_get(g, k, I32, n))

/* Fresh output buffers full of poison. */
static float *nans(size_t n)
{
	float *p = malloc(n * sizeof *p + 1);
	if (!p)
		abort();
	for (size_t i = 0; i < n; i++)
		p[i] = NAN;
	return p;
}

static int32_t *negs(size_t n)
{
	int32_t *p = malloc(n * sizeof *p + 1);
	if (!p)
		abort();
	memset(p, 0xff, n * sizeof *p);
	return p;
}

static void close_to(const char *name, const float *got, const float *want, size_t n)
{
	double e = rel_l2(got, want, n);
	check(e <= TOL, name, "rel_l2 %.3g > %g", e, TOL);
}

static void same_idx(const char *name, const int32_t *got, const int32_t *want, size_t n)
{
	size_t i = 0;
	while (i < n && got[i] == want[i])
		i++;
	check(i == n, name, "element %zu: got %d, want %d", i, i < n ? got[i] : 0, i < n ? want[i] : 0);
}

static uint32_t bits(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	return u;
}

/* ------------------------------------------------------------------------------------------- */

/* One rope case: frequencies and scale as HF computes them, the rotation out of place and in
** place, pass-through dims untouched, and the alternative formulations when the file has them. */
static void test_rope(const char *file)
{
	Gold *g = gold_open(file);
	const double *p = gold_get(g, "params", F64, 13);
	RefRope r = {.head_dim = (int)p[0], .rot_dim = (int)p[1], .interleaved = (int)p[2], .theta = p[3],
		     .scaling = p[4] > 1 ? ROPE_YARN : ROPE_PLAIN, .factor = p[4], .orig_ctx = (int)p[5], .beta_fast = p[6],
		     .beta_slow = p[7],
		     .mscale = p[8], .mscale_all_dim = p[9], .attn_factor = p[10]};
	const double *scl = gold_opt(g, "scaling", F64, 3); /* llama3 / linear: kind, low and high freq factors */
	if (scl)
		r.scaling = (int)scl[0], r.low_freq_factor = scl[1], r.high_freq_factor = scl[2];
	int T = (int)p[11], H = (int)p[12], D = r.head_dim, half = r.rot_dim / 2;
	size_t n = (size_t)T * H * D;
	const int32_t *pos = GI(g, "pos", T);
	const float *x = GF(g, "x", n), *want = gold_opt(g, "y", F32, n);
	const float *yc = gold_opt(g, "y_complex", F32, n), *yhf = gold_opt(g, "y_hf", F32, n);
	if (!want && !yc)
		gold_fail(g->path, "missing array", "y or y_complex");
	const float *wfreq = GF(g, "inv_freq", half), *wsc = GF(g, "cs_scale", 1);
	char name[96];

	float *freq = nans(half), sc = NAN;
	ref_rope_freqs(&r, freq, &sc);
	snprintf(name, sizeof name, "%s inv_freq", file);
	close_to(name, freq, wfreq, half);
	if (scl) { /* the scaled frequencies round as HF's float32 tensor arithmetic does */
		snprintf(name, sizeof name, "%s inv_freq bit for bit", file);
		check(!memcmp(freq, wfreq, sizeof *freq * (size_t)half), name, "differs from transformers' inv_freq");
	}
	snprintf(name, sizeof name, "%s cos/sin scale", file);
	check(fabsf(sc - *wsc) <= 1e-7f * fabsf(*wsc), name, "got %.9g, want %.9g", sc, *wsc);

	float *y = nans(n);
	ref_rope(y, x, pos, T, H, &r);
	if (want) {
		snprintf(name, sizeof name, "%s vs transformers", file);
		close_to(name, y, want, n);
	}

	size_t bad = 0;
	for (size_t i = 0; i < n; i++)
		bad += (int)(i % D) >= r.rot_dim && bits(y[i]) != bits(x[i]);
	snprintf(name, sizeof name, "%s keeps dims past rot_dim", file);
	check(bad == 0, name, "%zu changed", bad);

	float *yy = nans(n);
	memcpy(yy, x, n * sizeof *yy);
	ref_rope(yy, yy, pos, T, H, &r);
	snprintf(name, sizeof name, "%s in place", file);
	check(memcmp(yy, y, n * sizeof *y) == 0, name, "differs from out of place");

	if (yc) {
		snprintf(name, sizeof name, "%s vs complex multiplication", file);
		close_to(name, y, yc, n);
	}
	/* HF's apply_rotary_pos_emb_interleave returns rotated evens then rotated odds. */
	if (yhf) {
		for (size_t th = 0; th < (size_t)T * H; th++)
			for (int i = 0; i < half; i++) {
				yy[th * D + i] = y[th * D + 2 * i];
				yy[th * D + half + i] = y[th * D + 2 * i + 1];
			}
		snprintf(name, sizeof name, "%s vs transformers (de-interleaved)", file);
		close_to(name, yy, yhf, n);
	}
	free(freq), free(y), free(yy);
	gold_close(g);
}

static void test_dense(void)
{
	Gold *g = gold_open("embedding");
	const int32_t ids[] = {3, 0, 9, 3, 7};
	const int32_t *gid = GI(g, "ids", 5);
	float *y = nans(5 * 16);
	ref_embedding(y, GF(g, "table", 10 * 16), gid, 5, 16);
	check(memcmp(gid, ids, sizeof ids) == 0 && memcmp(y, GF(g, "y", 80), 80 * sizeof *y) == 0, "embedding",
	      "rows differ from F.embedding");
	free(y), gold_close(g);

	g = gold_open("linear");
	int T = 3, K = 40, N = 24;
	const float *x = GF(g, "x", T * K), *w = GF(g, "w", N * K), *b = GF(g, "b", N);
	y = nans(T * N);
	ref_linear(y, x, w, b, T, K, N);
	close_to("linear with bias vs F.linear", y, GF(g, "y", T * N), T * N);
	free(y), y = nans(T * N);
	ref_linear(y, x, w, NULL, T, K, N);
	close_to("linear without bias vs F.linear", y, GF(g, "y_nobias", T * N), T * N);
	free(y), gold_close(g);

	g = gold_open("matmul");
	int B = 3, M = 4;
	K = 33, N = 5;
	const float *a = GF(g, "a", B * M * K), *bb = GF(g, "b", B * K * N), *want = GF(g, "y", B * M * N);
	y = nans(B * M * N);
	ref_matmul(y, a, bb, B, M, K, N);
	close_to("matmul batched vs torch.bmm", y, want, B * M * N);
	free(y), y = nans(M * N);
	ref_matmul(y, a + M * K, bb + K * N, 1, M, K, N);
	close_to("matmul B=1 (second batch) vs torch.bmm", y, want + M * N, M * N);
	free(y), gold_close(g);
}

/* lin_rows (ops/linear.c, the executor's linear: tiles of sums side by side, rows split among threads)
** must give ref_linear's values bit for bit: every output is the same double sum in the same k order. */
static void test_linear_tiles(void)
{
	static const int Ts[] = {1, 2, 3, 5}, Ns[] = {1, 7, 8, 9, 33}, Ks[] = {1, 17, 40};
	Par *p = par_new(3);
	size_t bad = 0, cases = 0;
	uint32_t s = 12345;
	for (size_t it = 0; it < 4; it++)
		for (size_t in = 0; in < 5; in++)
			for (size_t ik = 0; ik < 3; ik++)
				for (int wb = 0; wb < 2; wb++) {
					int T = Ts[it], N = Ns[in], K = Ks[ik];
					float *x = malloc(sizeof(float) * T * K), *w = malloc(sizeof(float) * N * K);
					float *b = malloc(sizeof(float) * N), *y = nans(T * N), *z = nans(T * N), *v = nans(T * N);
					float *all[] = {x, w, b};
					size_t cnt[] = {(size_t)T * K, (size_t)N * K, (size_t)N};
					for (int a = 0; a < 3; a++)
						for (size_t i = 0; i < cnt[a]; i++) {
							s = s * 1664525u + 1013904223u;
							all[a][i] = ((float)(s >> 8) / 16777216.0f - 0.5f) * (float)(1 + (s & 7));
						}
					ref_linear(y, x, w, wb ? b : NULL, T, K, N);
					lin_rows(z, x, w, wb ? b : NULL, T, K, N, 0, N);
					lin_par(p, v, x, w, wb ? b : NULL, T, K, N);
					bad += memcmp(y, z, sizeof(float) * T * N) != 0 || memcmp(y, v, sizeof(float) * T * N) != 0;
					cases++;
					free(x), free(w), free(b), free(y), free(z), free(v);
				}
	check(p && bad == 0, "lin_rows equals ref_linear bit for bit (T 1..5, N 1..33, K 1..40, 3 threads)",
	      "%zu of %zu shapes differ%s", bad, cases, p ? "" : " (no pool)");
	par_free(p);
}

static void test_elementwise(void)
{
	Gold *g = gold_open("elementwise");
	size_t n = 256;
	const float *x = GF(g, "x", n), *gate = GF(g, "gate", n), *up = GF(g, "up", n);
	float *y = nans(n);
#define UNARY(call, key, name)                    \
	do {                                      \
		for (size_t i = 0; i < n; i++)    \
			y[i] = NAN;               \
		call;                             \
		close_to(name, y, GF(g, key, n), n); \
	} while (0)
	UNARY(ref_gelu(y, x, n, 0), "gelu", "gelu erf vs F.gelu");
	UNARY(ref_gelu(y, x, n, 1), "gelu_tanh", "gelu tanh vs F.gelu(approximate=tanh)");
	UNARY(ref_silu(y, x, n), "silu", "silu vs F.silu");
	UNARY(ref_sigmoid(y, x, n), "sigmoid", "sigmoid vs torch.sigmoid");
	UNARY(ref_swiglu(y, gate, up, n), "swiglu", "swiglu vs F.silu(g)*u");
	UNARY(ref_scale(y, x, n, *GF(g, "s", 1)), "scale", "scale vs x*s");

	/* a[4,64] op b[64], broadcast over the leading dim. */
	const float *a = GF(g, "a", n), *b = GF(g, "b", 64);
	UNARY(ref_add(y, a, b, n, 64), "add", "add broadcast vs torch");
	UNARY(ref_sub(y, a, b, n, 64), "sub", "sub broadcast vs torch");
	UNARY(ref_mul(y, a, b, n, 64), "mul", "mul broadcast vs torch");
	UNARY(ref_div(y, a, b, n, 64), "div", "div broadcast vs torch");
#undef UNARY
	free(y), gold_close(g);
}

static void test_norms(void)
{
	Gold *g = gold_open("softmax");
	int R = 4, N = 100;
	float *y = nans(R * N);
	ref_softmax(y, GF(g, "x", R * N), R, N);
	close_to("softmax vs torch.softmax (row offset 1000)", y, GF(g, "y", R * N), R * N);
	free(y), gold_close(g);

	R = 3, N = 96;
	g = gold_open("rmsnorm");
	const float *x = GF(g, "x", R * N), eps = *GF(g, "eps", 1);
	y = nans(R * N);
	ref_rmsnorm(y, x, GF(g, "w", N), R, N, eps);
	close_to("rmsnorm vs LlamaRMSNorm", y, GF(g, "y", R * N), R * N);
	free(y), y = nans(R * N);
	ref_rmsnorm(y, x, NULL, R, N, eps);
	close_to("rmsnorm without weight vs LlamaRMSNorm", y, GF(g, "y_now", R * N), R * N);
	free(y), gold_close(g);

	g = gold_open("layernorm");
	x = GF(g, "x", R * N);
	const float leps = *GF(g, "eps", 1);
	y = nans(R * N);
	ref_layernorm(y, x, GF(g, "w", N), GF(g, "b", N), R, N, leps);
	close_to("layernorm vs F.layer_norm", y, GF(g, "y", R * N), R * N);
	free(y), y = nans(R * N);
	ref_layernorm(y, x, NULL, NULL, R, N, leps);
	close_to("layernorm without affine vs F.layer_norm", y, GF(g, "y_now", R * N), R * N);
	free(y), gold_close(g);
}

/* GQA attention through the cache: prefill 5 tokens, then decode 2 one at a time; the result must
** equal causal SDPA over the whole sequence. Cache rows past the last position stay poisoned, so
** reading one would show as NaN. */
static void test_attention(void)
{
	Gold *g = gold_open("attention");
	const int32_t *dm = GI(g, "dims", 6);
	int T = dm[0], H = dm[1], G = dm[2], Dk = dm[3], Dv = dm[4], S = dm[5];
	float scale = *GF(g, "scale", 1);
	const float *q = GF(g, "q", T * H * Dk), *k = GF(g, "k", T * G * Dk), *v = GF(g, "v", T * G * Dv);
	const float *want = GF(g, "y", T * H * Dv);
	int32_t pos[16];
	for (int t = 0; t < T; t++)
		pos[t] = t;

	float *kc = nans(S * G * Dk), *vc = nans(S * G * Dv), *y = nans(T * H * Dv);
	int steps[] = {0, 5, 6, T};
	for (int s = 0; s < 3; s++) {
		int t0 = steps[s], nt = steps[s + 1] - t0;
		ref_attention(y + t0 * H * Dv, q + t0 * H * Dk, k + t0 * G * Dk, v + t0 * G * Dv, kc, vc, pos + t0, nt,
			      H, G, Dk, Dv, S, scale);
	}
	close_to("attention GQA prefill 5 + decode 1 + 1 vs SDPA causal", y, want, T * H * Dv);
	close_to("attention decode rows vs SDPA", y + 5 * H * Dv, want + 5 * H * Dv, 2 * H * Dv);
	check(memcmp(kc, k, T * G * Dk * sizeof *k) == 0 && memcmp(vc, v, T * G * Dv * sizeof *v) == 0,
	      "attention writes k/v into the cache rows of their positions", "cache rows differ");
	int untouched = 1;
	for (int i = T * G * Dk; i < S * G * Dk; i++)
		untouched &= isnan(kc[i]);
	for (int i = T * G * Dv; i < S * G * Dv; i++)
		untouched &= isnan(vc[i]);
	check(untouched, "attention leaves cache rows past pos alone", "a later row was written");

	free(kc), free(vc), free(y);
	kc = nans(S * G * Dk), vc = nans(S * G * Dv), y = nans(T * H * Dv);
	ref_attention(y, q, k, v, kc, vc, pos, T, H, G, Dk, Dv, S, scale);
	close_to("attention GQA one call of 7 vs SDPA causal", y, want, T * H * Dv);
	free(kc), free(vc), free(y), gold_close(g);
}

static void test_select(void)
{
	Gold *g = gold_open("topk");
	int R = 4, N = 40;
	const float *x = GF(g, "x", R * N);
	int32_t *idx = negs(R * 6);
	ref_topk(idx, x, R, N, 6);
	same_idx("topk k=6 with ties, NaN, -inf vs stable torch.sort", idx, GI(g, "top6", R * 6), R * 6);
	free(idx), idx = negs(R * N);
	ref_topk(idx, x, R, N, N);
	same_idx("topk k=N (full order) vs stable torch.sort", idx, GI(g, "top40", R * N), R * N);
	free(idx), idx = negs(R);
	ref_topk(idx, x, R, N, 1);
	const int32_t *t6 = GI(g, "top6", R * 6);
	check(idx[0] == t6[0] && idx[1] == t6[6] && idx[2] == t6[12] && idx[3] == t6[18], "topk k=1",
	      "got %d %d %d %d", idx[0], idx[1], idx[2], idx[3]);
	free(idx), gold_close(g);

	g = gold_open("argmax");
	R = 5, N = 33;
	idx = negs(R);
	ref_argmax(idx, GF(g, "x", R * N), R, N);
	same_idx("argmax with ties and NaN vs torch.argmax", idx, GI(g, "y", R), R);
	free(idx), gold_close(g);

	g = gold_open("permute");
	static const int nd[] = {2, 3, 4, 4};
	for (int c = 0; c < 4; c++) {
		char key[16], name[64];
		int64_t shape[4];
		int perm[4];
		size_t n = 1;
		snprintf(key, sizeof key, "shape%d", c);
		const int32_t *sh = GI(g, key, nd[c]);
		snprintf(key, sizeof key, "perm%d", c);
		const int32_t *pm = GI(g, key, nd[c]);
		for (int d = 0; d < nd[c]; d++)
			shape[d] = sh[d], perm[d] = pm[d], n *= sh[d];
		snprintf(key, sizeof key, "x%d", c);
		const float *px = GF(g, key, n);
		snprintf(key, sizeof key, "y%d", c);
		const float *py = GF(g, key, n);
		snprintf(key, sizeof key, "yi%d", c);
		const int32_t *pyi = GI(g, key, n);

		float *y = nans(n);
		ref_permute(y, px, nd[c], shape, perm, sizeof *y);
		snprintf(name, sizeof name, "permute %d-D float vs torch.permute", nd[c]);
		check(memcmp(y, py, n * sizeof *y) == 0, name, "differs");

		uint16_t *hx = malloc(n * 2), *hy = malloc(n * 2);
		if (!hx || !hy)
			abort();
		memset(hy, 0xff, n * 2);
		for (size_t i = 0; i < n; i++)
			hx[i] = (uint16_t)i;
		ref_permute(hy, hx, nd[c], shape, perm, 2);
		size_t i = 0;
		while (i < n && hy[i] == pyi[i])
			i++;
		snprintf(name, sizeof name, "permute %d-D 2-byte elements vs torch.permute", nd[c]);
		check(i == n, name, "element %zu", i);
		free(y), free(hx), free(hy);
	}
	gold_close(g);
}

static int f16_nan(uint16_t h)
{
	return (h & 0x7c00) == 0x7c00 && (h & 0x3ff);
}

static int bf16_nan(uint16_t h)
{
	return (h & 0x7f80) == 0x7f80 && (h & 0x7f);
}

/* Conversions bit for bit against torch's casts, plus exhaustive round trips of every 16-bit pattern.
** A NaN need only stay NaN: torch's own casts canonicalize NaN bits (to 0x7fffffff, 0xffff). */
static void test_convert(void)
{
	Gold *g = gold_open("convert");
	size_t nh = 0, nf = 0, nb = 0;
	for (int i = 0; i < g->n; i++) {
		nh = !strcmp(g->r[i].name, "h") ? g->r[i].n : nh;
		nf = !strcmp(g->r[i].name, "f") ? g->r[i].n : nf;
		nb = !strcmp(g->r[i].name, "fb") ? g->r[i].n : nb;
	}
	const uint16_t *h = gold_get(g, "h", U16, nh);
	const float *hf = GF(g, "h_f32", nh), *hb = GF(g, "h_bf32", nh);
	size_t bad16 = 0, badb = 0, first16 = 0, firstb = 0;
	for (size_t i = 0; i < nh; i++) {
		float a = ref_f16_to_f32(h[i]), b = ref_bf16_to_f32(h[i]);
		if (!(isnan(hf[i]) ? isnan(a) : bits(a) == bits(hf[i])) && !bad16++)
			first16 = i;
		if (!(isnan(hb[i]) ? isnan(b) : bits(b) == bits(hb[i])) && !badb++)
			firstb = i;
	}
	check(nh > 1000 && !bad16, "f16 -> f32 bit-exact vs torch (subnormal, inf, NaN)", "%zu bad, first %#x",
	      bad16, h[first16]);
	check(nh > 1000 && !badb, "bf16 -> f32 bit-exact vs torch", "%zu bad, first %#x", badb, h[firstb]);

	const float *f = GF(g, "f", nf), *fb = GF(g, "fb", nb);
	const uint16_t *ff = gold_get(g, "f_f16", U16, nf), *fbb = gold_get(g, "fb_bf16", U16, nb);
	size_t bad = 0, first = 0;
	for (size_t i = 0; i < nf; i++) {
		uint16_t r = ref_f32_to_f16(f[i]);
		if (!(isnan(f[i]) ? f16_nan(r) : r == ff[i]) && !bad++)
			first = i;
	}
	check(nf > 1000 && !bad, "f32 -> f16 RNE bit-exact vs torch (ties, subnormals, overflow, NaN)",
	      "%zu bad, first %#x -> %#x, want %#x", bad, bits(f[first]), ref_f32_to_f16(f[first]), ff[first]);
	bad = 0, first = 0;
	for (size_t i = 0; i < nb; i++) {
		uint16_t r = ref_f32_to_bf16(fb[i]);
		if (!(isnan(fb[i]) ? bf16_nan(r) : r == fbb[i]) && !bad++)
			first = i;
	}
	check(nb > 1000 && !bad, "f32 -> bf16 RNE bit-exact vs torch (ties, overflow, NaN)",
	      "%zu bad, first %#x -> %#x, want %#x", bad, bits(fb[first]), ref_f32_to_bf16(fb[first]), fbb[first]);
	gold_close(g);

	size_t rt16 = 0, rtb = 0;
	for (uint32_t u = 0; u < 65536; u++) {
		uint16_t x = (uint16_t)u, a = ref_f32_to_f16(ref_f16_to_f32(x)), b = ref_f32_to_bf16(ref_bf16_to_f32(x));
		rt16 += f16_nan(x) ? !f16_nan(a) : a != x;
		rtb += bf16_nan(x) ? !bf16_nan(b) : b != x;
	}
	check(!rt16, "f16 -> f32 -> f16 round trip, all 65536 patterns", "%zu bad", rt16);
	check(!rtb, "bf16 -> f32 -> bf16 round trip, all 65536 patterns", "%zu bad", rtb);
}

/* Properties that hold for any input, on random data: rope at position 0 is the identity, a
** permutation followed by its inverse is the identity, topk rows are ordered and start at argmax. */
static void test_properties(void)
{
	unsigned long long seed = 0x9e3779b97f4a7c15ull;
	enum { T = 3, H = 2, D = 40, R = 6, N = 300, K = 17 };
	float *x = nans(T * H * D), *y = nans(T * H * D);
	fill_random(x, T * H * D, &seed);
	int32_t pos[T] = {0, 0, 0};
	RefRope r = {.head_dim = D, .rot_dim = 32, .interleaved = 0, .theta = 10000};
	ref_rope(y, x, pos, T, H, &r);
	check(memcmp(x, y, sizeof(float) * T * H * D) == 0, "rope at position 0 is the identity", "differs");
	free(x), free(y);

	int64_t shape[4] = {3, 4, 5, 6}, pshape[4];
	int perm[4] = {2, 3, 1, 0}, inv[4];
	size_t n = 3 * 4 * 5 * 6;
	float *a = nans(n), *b = nans(n), *c = nans(n);
	fill_random(a, n, &seed);
	for (int i = 0; i < 4; i++)
		inv[perm[i]] = i, pshape[i] = shape[perm[i]];
	ref_permute(b, a, 4, shape, perm, sizeof *a);
	ref_permute(c, b, 4, pshape, inv, sizeof *a);
	check(memcmp(a, c, n * sizeof *a) == 0, "permute then inverse permute is the identity", "differs");
	free(a), free(b), free(c);

	float *v = nans(R * N);
	fill_random(v, R * N, &seed);
	int32_t *top = negs(R * K), *am = negs(R);
	ref_topk(top, v, R, N, K);
	ref_argmax(am, v, R, N);
	int ok = 1;
	for (int i = 0; i < R; i++) {
		ok &= top[i * K] == am[i];
		for (int j = 1; j < K; j++)
			ok &= v[i * N + top[i * K + j - 1]] >= v[i * N + top[i * K + j]];
	}
	check(ok, "topk on random rows: ordered, first is argmax", "order broken");
	free(v), free(top), free(am);
}

int main(void)
{
	static const char *ropes[] = {"rope_neox",       "rope_neox_partial", "rope_inter",
				      "rope_inter_partial", "rope_yarn",     "rope_yarn_dsv3",
				      "rope_yarn_mscale", "rope_yarn_attn", "rope_yarn_guard",
				      "rope_llama3",      "rope_llama3_small", "rope_linear"};
	for (size_t i = 0; i < sizeof ropes / sizeof *ropes; i++)
		test_rope(ropes[i]);
	test_dense();
	test_linear_tiles();
	test_elementwise();
	test_norms();
	test_attention();
	test_select();
	test_convert();
	test_properties();
	return check_done();
}
