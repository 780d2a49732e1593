/*
** tests/test_engine.c — the engine interface (runtime/exec/engine.h) on the CPU backend, with the llama
** fixture's plan (compiled here by bin/glmc): the contracts every driver relies on. A prompt prefilled in
** chunks gives the rows of one prefill; two sequences decoded together in the rows of one step give
** what each gives alone (tokens identical, logits within 1e-5); a forced token gives the logits of a
** prefill that held it; a row samples with seed + slot and its own step counter, or with its own sampling
** fields (own_sampling: greedy or another temperature and seed, in one step); the first logits row
** equals the fixture's (transformers). Bad calls are one-line errors.
*/
#include "check.h"
#include "engine.h"
#include "glm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FIX "../shared/fixtures/hf/llama"

static const int32_t prompt[20] = {81, 213, 287, 262, 424, 213, 75, 50, 75, 21, 475, 139, 200, 215, 26, 286, 260, 207, 189, 276};

/* An engine on the plan: slots sequences, prefill chunks of `chunk`, sampling at temperature temp. */
static Engine *open_cpu(const Graph *g, int slots, int chunk, float temp, uint32_t seed)
{
	char err[1024];
	Engine *e;
	EngineOpts o = {.slots = slots, .chunk = chunk, .max_seq = 64, .temp = temp, .top_p = 1, .seed = seed,
	                .keep_logits = 1};
	if (engine_open(&e, g, FIX, &o, err, sizeof err)) {
		printf("FAIL - engine_open: %s\n", err);
		exit(1);
	}
	return e;
}

/* n tokens after prompt p (np ids) in slot 0 of a one-sequence engine: their ids and all logits rows. */
static void alone(const Graph *g, const int32_t *p, int np, int n, float temp, uint32_t seed, int32_t *ids,
                  float *rows)
{
	char err[1024];
	Engine *e = open_cpu(g, 1, np, temp, seed);
	int64_t V = engine_vocab(e);
	int rc = engine_prefill(e, 0, p, np, 0, &ids[0], NULL, err, sizeof err);
	for (int i = 1; i < n && !rc; i++)
		rc = engine_decode(e, 1, &ids[i], rows + (size_t)(i - 1) * (size_t)V, err, sizeof err);
	if (rc)
		printf("FAIL - one sequence alone: %s\n", err), exit(1);
	engine_close(e);
}

static void test_chunks(const Graph *g)
{
	char err[1024];
	Engine *a = open_cpu(g, 1, 20, 0, 0), *b = open_cpu(g, 1, 3, 0, 0);
	int64_t V = engine_vocab(a);
	float *ra = malloc(sizeof(float) * 20 * (size_t)V), *rb = malloc(sizeof(float) * 20 * (size_t)V);
	for (size_t i = 0; i < 20 * (size_t)V; i++)
		ra[i] = rb[i] = NAN; /* poisoned: every row must be written */
	int32_t na, nb;
	int rc = engine_prefill(a, 0, prompt, 20, 0, &na, ra, err, sizeof err) ||
	         engine_prefill(b, 0, prompt, 20, 0, &nb, rb, err, sizeof err);
	double e = rel_l2(rb, ra, 20 * (size_t)V);
	check(!rc && e < 1e-5 && na == nb, "a prompt prefilled in chunks of 3 gives the rows of one prefill (20 rows)",
	      "rc %d %s rel-L2 %g, next %d vs %d", rc, rc ? err : "", e, nb, na);
	/* The fixture's first row: transformers' logits for the first prompt token. */
	float *want = malloc(sizeof(float) * (size_t)V);
	FILE *f = fopen(FIX "/prefill_logits.f32", "rb");
	size_t got = f ? fread(want, sizeof(float), (size_t)V, f) : 0;
	if (f)
		fclose(f);
	e = rel_l2(ra, want, (size_t)V);
	check(got == (size_t)V && e < 1e-4, "the first row equals the fixture's (transformers)", "rel-L2 %g", e);
	free(want);
	/* A decode step after the chunks continues from the last chunk's position and token. */
	int32_t ta, tb;
	rc = engine_decode(a, 1, &ta, ra, err, sizeof err) || engine_decode(b, 1, &tb, rb, err, sizeof err);
	e = rel_l2(rb, ra, (size_t)V);
	check(!rc && ta == tb && e < 1e-5, "the step after a chunked prefill feeds its sampled token at the next position",
	      "%s tokens %d/%d rel-L2 %g", rc ? err : "", ta, tb, e);
	engine_close(a), engine_close(b);
	free(ra), free(rb);
}

/* Two prompts in slots 0 and 1, decoded together (rows), against each alone; sampled at temp 1 so that
** seed + slot and the step counters matter. */
static void test_rows(const Graph *g)
{
	char err[1024];
	enum { N = 8 };
	const int32_t *p[2] = {prompt, prompt + 7};
	int np[2] = {7, 5};
	Engine *e = open_cpu(g, 2, 8, 1.0f, 11);
	int64_t V = engine_vocab(e);
	int32_t ids[2][N], want[2][N];
	float *rows = malloc(sizeof(float) * 2 * N * (size_t)V), *solo = malloc(sizeof(float) * N * (size_t)V);
	int rc = 0;
	for (int s = 0; s < 2 && !rc; s++) {
		EngineRow r0 = {.slot = s};
		rc = engine_set_rows(e, 1, &r0, err, sizeof err) ||
		     engine_prefill(e, s, p[s], np[s], 0, &ids[s][0], NULL, err, sizeof err);
	}
	EngineRow r[2];
	for (int s = 0; s < 2; s++)
		r[s] = (EngineRow){.slot = s, .token = ids[s][0], .pos = np[s], .step = 1};
	rc = rc || engine_set_rows(e, 2, r, err, sizeof err);
	for (int i = 1; i < N && !rc; i++) {
		int32_t next[2];
		rc = engine_decode(e, 2, next, rows + (size_t)(i - 1) * 2 * (size_t)V, err, sizeof err);
		ids[0][i] = next[0], ids[1][i] = next[1];
	}
	check(!rc, "two sequences decoded together in one engine", "%s", err);
	for (int s = 0; s < 2 && !rc; s++) {
		alone(g, p[s], np[s], N, 1.0f, 11 + (uint32_t)s, want[s], solo);
		double worst = 0;
		for (int i = 0; i < N - 1; i++) {
			double d = rel_l2(rows + ((size_t)i * 2 + (size_t)s) * (size_t)V, solo + (size_t)i * (size_t)V, (size_t)V);
			worst = d > worst ? d : worst;
		}
		char name[128];
		snprintf(name, sizeof name, "slot %d of a 2-row step samples as that sequence alone with seed + %d (%d tokens)",
		         s, s, N);
		check(!memcmp(ids[s], want[s], sizeof want[s]) && worst < 1e-5, name, "logits rel-L2 %g; tokens %d %d %d vs %d %d %d",
		      worst, ids[s][0], ids[s][1], ids[s][2], want[s][0], want[s][1], want[s][2]);
	}
	engine_close(e);
	free(rows), free(solo);
}

/* Rows with their own sampling (glmrun serve's requests) on an engine that samples at temperature 1 with
** seed 11: slot 0 greedy, slot 1 at temperature 0.7 with seed 3 taken as is, prefilled and decoded
** together; each gives what an engine configured so gives alone in slot 0. */
static void test_own_sampling(const Graph *g)
{
	char err[1024];
	enum { N = 10 };
	const int32_t *p[2] = {prompt + 2, prompt + 9};
	int np[2] = {6, 8};
	const float temp[2] = {0, 0.7f};
	const uint32_t seed[2] = {0, 3};
	Engine *e = open_cpu(g, 2, 8, 1.0f, 11);
	int64_t V = engine_vocab(e);
	int32_t ids[2][N], want[2][N];
	float *solo = malloc(sizeof(float) * N * (size_t)V);
	EngineRow r[2];
	int rc = 0;
	for (int s = 0; s < 2; s++)
		r[s] = (EngineRow){.slot = s, .own_sampling = 1, .temp = temp[s], .top_p = 1, .seed = seed[s]};
	for (int s = 0; s < 2 && !rc; s++)
		rc = engine_set_rows(e, 1, &r[s], err, sizeof err) ||
		     engine_prefill(e, s, p[s], np[s], 0, &ids[s][0], NULL, err, sizeof err);
	for (int s = 0; s < 2; s++)
		r[s].token = ids[s][0], r[s].pos = np[s], r[s].step = 1;
	rc = rc || engine_set_rows(e, 2, r, err, sizeof err);
	for (int i = 1; i < N && !rc; i++) {
		int32_t next[2];
		rc = engine_decode(e, 2, next, NULL, err, sizeof err);
		ids[0][i] = next[0], ids[1][i] = next[1];
	}
	check(!rc, "rows with their own sampling decoded together", "%s", err);
	int32_t dflt[N];
	alone(g, p[1], np[1], N, 1.0f, 11 + 1, dflt, solo); /* slot 1 with the engine's own sampling */
	for (int s = 0; s < 2 && !rc; s++) {
		alone(g, p[s], np[s], N, temp[s], seed[s], want[s], solo);
		char name[160];
		snprintf(name, sizeof name, "slot %d with its own sampling (temperature %g, seed %u) samples as an engine so "
		         "configured alone (%d tokens)", s, (double)temp[s], seed[s], N);
		check(!memcmp(ids[s], want[s], sizeof want[s]) && (s == 0 || memcmp(want[s], dflt, sizeof dflt)), name,
		      "tokens %d %d %d vs %d %d %d", ids[s][0], ids[s][1], ids[s][2], want[s][0], want[s][1], want[s][2]);
	}
	engine_close(e);
	free(solo);
}

/* Three prompts prefilled as one step (engine_prefill_parts: the second a continuation after an earlier
** chunk, the third with its own sampling), then decoded together: each sequence's tokens and logits
** equal its prompt run alone. */
static void test_parts(const Graph *g)
{
	char err[1024];
	enum { N = 8 };
	const int32_t *p[3] = {prompt, prompt + 5, prompt + 11};
	int np[3] = {7, 9, 4};
	Engine *e = open_cpu(g, 3, 16, 0, 0);
	int64_t V = engine_vocab(e);
	int32_t ids[3][N], want[3][N], first[3], pre;
	float *rows = malloc(sizeof(float) * 3 * N * (size_t)V), *solo = malloc(sizeof(float) * N * (size_t)V);
	/* slot 1 gets its first 4 tokens on their own, as a prompt cut by a step's budget */
	int rc = engine_prefill(e, 1, p[1], 4, 0, &pre, NULL, err, sizeof err);
	EnginePart part[3] = {
		{.ids = p[0], .n = np[0], .row = {.slot = 0}},
		{.ids = p[1] + 4, .n = np[1] - 4, .row = {.slot = 1, .pos = 4}},
		{.ids = p[2], .n = np[2], .row = {.slot = 2, .own_sampling = 1, .temp = 0.8f, .top_p = 1, .seed = 5}},
	};
	rc = rc || engine_prefill_parts(e, 3, part, first, NULL, err, sizeof err);
	EngineRow r[3];
	for (int s = 0; s < 3; s++)
		r[s] = part[s].row, r[s].token = ids[s][0] = first[s], r[s].pos = np[s], r[s].step = 1;
	rc = rc || engine_set_rows(e, 3, r, err, sizeof err);
	for (int i = 1; i < N && !rc; i++) {
		int32_t next[3];
		rc = engine_decode(e, 3, next, rows + (size_t)(i - 1) * 3 * (size_t)V, err, sizeof err);
		for (int s = 0; s < 3; s++)
			ids[s][i] = next[s];
	}
	check(!rc, "three prompts prefilled in one step, then decoded together", "%s", err);
	for (int s = 0; s < 3 && !rc; s++) {
		alone(g, p[s], np[s], N, s == 2 ? 0.8f : 0, s == 2 ? 5 : 0, want[s], solo);
		double worst = 0;
		for (int i = 1; i < N; i++) {
			double d = rel_l2(rows + ((size_t)(i - 1) * 3 + (size_t)s) * (size_t)V, solo + (size_t)(i - 1) * (size_t)V,
			                  (size_t)V);
			worst = d > worst ? d : worst;
		}
		char name[160];
		snprintf(name, sizeof name, "part %d of the shared prefill samples and decodes as its prompt alone (%d tokens)", s,
		         N);
		check(!memcmp(ids[s], want[s], sizeof want[s]) && worst < 1e-5, name, "logits rel-L2 %g; tokens %d %d vs %d %d",
		      worst, ids[s][0], ids[s][1], want[s][0], want[s][1]);
	}
	part[1].row.slot = 0;
	check(engine_prefill_parts(e, 2, part, first, NULL, err, sizeof err) && strstr(err, "share sequence slot 0"),
	      "two parts in one slot are refused", "%s", err);
	part[1].row.slot = 1, part[0].n = 12;
	check(engine_prefill_parts(e, 2, part, first, NULL, err, sizeof err) && strstr(err, "at most 16"),
	      "parts of more tokens than a step holds are refused", "%s", err);
	part[0].n = 7, part[0].row.pos = 60;
	check(engine_prefill_parts(e, 1, part, first, NULL, err, sizeof err) && strstr(err, "64 positions"),
	      "a part past the slot's positions is refused", "%s", err);
	engine_close(e);
	free(rows), free(solo);
}

/* --force: a fed token gives the logits of one prefill that holds it. */
static void test_feed(const Graph *g)
{
	char err[1024];
	Engine *e = open_cpu(g, 1, 20, 0, 0), *f = open_cpu(g, 1, 20, 0, 0);
	int64_t V = engine_vocab(e);
	float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * 11 * (size_t)V);
	int32_t next;
	int rc = engine_prefill(e, 0, prompt, 10, 0, &next, NULL, err, sizeof err) ||
	         engine_feed(e, prompt[10], err, sizeof err) || engine_decode(e, 1, &next, a, err, sizeof err) ||
	         engine_prefill(f, 0, prompt, 11, 0, &next, b, err, sizeof err);
	double d = rel_l2(a, b + 10 * (size_t)V, (size_t)V);
	check(!rc && d < 1e-5, "a fed token (--force) gives the logits of a prefill that held it", "%s rel-L2 %g",
	      rc ? err : "", d);
	engine_close(e), engine_close(f);
	free(a), free(b);
}

static void test_errors(const Graph *g)
{
	char err[1024];
	Engine *e = open_cpu(g, 2, 4, 0, 0);
	int32_t next[4];
	EngineRow r[3] = {{0}};
	check(engine_prefill(e, 2, prompt, 3, 0, next, NULL, err, sizeof err) && strstr(err, "slot 2"),
	      "a prefill into a slot the caches lack is refused", "%s", err);
	check(engine_prefill(e, 0, prompt, 0, 0, next, NULL, err, sizeof err) && strstr(err, "0 tokens"),
	      "a prefill of no tokens is refused", "%s", err);
	check(engine_set_rows(e, 3, r, err, sizeof err) && strstr(err, "3 rows"), "more rows than slots are refused",
	      "%s", err);
	check(engine_decode(e, 0, next, NULL, err, sizeof err) && strstr(err, "0 rows"), "a step of no rows is refused",
	      "%s", err);
	engine_close(e);
	Engine *x;
	EngineOpts o = {.slots = ENGINE_MAX_SLOTS + 1, .chunk = 1, .max_seq = 8};
	check(engine_open(&x, g, FIX, &o, err, sizeof err) && strstr(err, "at most"), "more slots than the engine holds",
	      "%s", err);
	engine_close(x);
}

int main(void)
{
	char cmd[512], path[64], err[1024];
	snprintf(path, sizeof path, "/tmp/glm_test_engine_%d.plan", (int)getpid());
	snprintf(cmd, sizeof cmd, "bin/glmc compile models/llama.lua --weights " FIX " -o %s 2>/dev/null", path);
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	int ok = system(cmd) == 0 && plan_read(&g, path, err, sizeof err) == 0;
	check(ok, "compile and load the llama fixture's plan", "%s", err);
	unlink(path);
	if (!ok)
		return 1;
	test_chunks(&g);
	test_rows(&g);
	test_own_sampling(&g);
	test_parts(&g);
	test_feed(&g);
	test_errors(&g);
	arena_free(&A);
	return check_failures ? 1 : 0;
}
