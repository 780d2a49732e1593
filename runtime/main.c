/*
** runtime/main.c — glmrun: load a plan and its weights, prefill the prompt, then decode greedily.
**
** The CPU device runs the reference executor. The CUDA device (CUDA graphs, NVRTC kernels) is the GPU
** backend issue; until it exists --device cuda says so instead of silently running on the CPU.
*/
#include "glm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
	"usage: glmrun PLAN --tokens ID,ID,... [options]\n"
	"\n"
	"Run a plan compiled by glmc: evaluate the prompt, then generate N tokens greedily and print their\n"
	"ids on one line (exactly N: generation does not stop at end-of-sequence in this mode).\n"
	"\n"
	"  --tokens IDS         prompt token ids, comma-separated\n"
	"  -n N                 tokens to generate (default 16)\n"
	"  --device cpu|cuda    where to run (default cpu; the CUDA backend is not built yet)\n"
	"  --max-seq N          KV-cache capacity in positions (default: prompt + N)\n"
	"  --dump-logits FILE   write float32 logits, one row per evaluated position\n"
	"                       (prompt positions, then each generated token fed back: n_prompt + N - 1 rows)\n"
	"  --weights PATH       weights directory (default: the one the plan was compiled with)\n"
	"  -h, --help           this text;  --version  print the version\n";

static _Noreturn void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "glmrun: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

static long parse_long(const char *s, const char *what, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		fail("%s must be an integer in [%ld, %ld], got '%s'", what, lo, hi, s);
	return v;
}

/* "1,2,3" -> ids; every id a non-negative integer. */
static int32_t *parse_tokens(const char *s, int *n)
{
	int cap = 16, k = 0;
	int32_t *ids = malloc(sizeof *ids * (size_t)cap);
	const char *p = s;
	while (ids && *p) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
			fail("--tokens: '%s' is not a comma-separated list of token ids (at '%s')", s, p);
		if (k == cap)
			ids = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
		if (ids)
			ids[k++] = (int32_t)v;
		p = *end ? end + 1 : end;
	}
	if (!ids)
		fail("out of memory");
	if (k == 0)
		fail("--tokens: empty prompt");
	*n = k;
	return ids;
}

static int argmax_row(const float *x, int64_t n)
{
	int64_t best = 0;
	for (int64_t i = 1; i < n; i++)
		if (x[i] > x[best])
			best = i;
	return (int)best;
}

int main(int argc, char **argv)
{
	const char *plan = NULL, *tokens = NULL, *device = "cpu", *dump = NULL, *weights = NULL;
	long n = 16, max_seq = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(a, "--version")) {
			printf("glmrun %s (plan format %d)\n", GLM_VERSION, PLAN_VERSION);
			return 0;
		} else if (!strcmp(a, "--tokens") || !strcmp(a, "-n") || !strcmp(a, "--device") ||
		           !strcmp(a, "--max-seq") || !strcmp(a, "--dump-logits") || !strcmp(a, "--weights")) {
			if (!next)
				fail("missing value after %s", a);
			i++;
			if (!strcmp(a, "--tokens"))
				tokens = next;
			else if (!strcmp(a, "-n"))
				n = parse_long(next, "-n", 1, 1 << 24);
			else if (!strcmp(a, "--device"))
				device = next;
			else if (!strcmp(a, "--max-seq"))
				max_seq = parse_long(next, "--max-seq", 1, 1 << 24);
			else if (!strcmp(a, "--dump-logits"))
				dump = next;
			else
				weights = next;
		} else if (a[0] == '-')
			fail("unknown option %s (run 'glmrun --help')", a);
		else if (!plan)
			plan = a;
		else
			fail("unexpected argument '%s'", a);
	}
	if (!plan)
		fail("no plan given (run 'glmrun --help')");
	if (strcmp(device, "cpu") && strcmp(device, "cuda"))
		fail("--device must be cpu or cuda, got '%s'", device);
	if (!tokens)
		fail("no prompt: give --tokens ID,ID,...");
	int np;
	int32_t *prompt = parse_tokens(tokens, &np);

	char err[1024];
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	if (plan_read(&g, plan, err, sizeof err))
		fail("%s", err);
	if (!strcmp(device, "cuda"))
		fail("--device cuda: this glmrun has no CUDA backend yet; run with --device cpu");

	int logits = -1;
	for (int i = 0; i < g.nout; i++)
		if (!strcmp(g.out_name[i], "logits"))
			logits = g.out[i];
	if (logits < 0)
		fail("%s: the plan has no output named 'logits'", plan);
	const Node *L = &g.node[logits];
	if (L->ndim != 2 || L->dim[0] != DIM_T || L->dim[1] <= 0)
		fail("%s: output 'logits' must be [T, vocab]", plan);
	int64_t V = L->dim[1];

	long need = np + n - 1;
	const char *ctx = graph_meta(&g, "n_ctx");
	if (ctx && need > atol(ctx))
		fail("prompt of %d tokens + %ld generated needs %ld positions, more than the model's context of %s", np, n,
		     need, ctx);
	if (!max_seq)
		max_seq = need;
	if (need > max_seq)
		fail("prompt of %d tokens + %ld generated needs %ld positions, more than --max-seq %ld", np, n, need,
		     max_seq);
	if (!weights)
		weights = graph_meta(&g, "weights.path");
	if (!weights)
		fail("%s: the plan names no weights; pass --weights PATH", plan);

	Exec x;
	if (exec_init(&x, &g, weights, np, max_seq, err, sizeof err))
		fail("%s", err);
	FILE *df = NULL;
	if (dump && !(df = fopen(dump, "wb")))
		fail("%s: cannot create: %s", dump, strerror(errno));

	int32_t *pos = malloc(sizeof *pos * (size_t)np);
	if (!pos)
		fail("out of memory");
	for (int i = 0; i < np; i++)
		pos[i] = i;
	if (exec_step(&x, prompt, pos, np, err, sizeof err))
		fail("%s", err);
	const float *y = x.buf[logits];
	if (df && fwrite(y, sizeof(float), (size_t)(np * V), df) != (size_t)(np * V))
		fail("%s: write failed", dump);
	int32_t tok = argmax_row(y + (np - 1) * V, V);
	printf("%d", tok);
	for (long i = 1; i < n; i++) {
		int32_t p = (int32_t)(np + i - 1);
		if (exec_step(&x, &tok, &p, 1, err, sizeof err))
			fail("%s", err);
		y = x.buf[logits];
		if (df && fwrite(y, sizeof(float), (size_t)V, df) != (size_t)V)
			fail("%s: write failed", dump);
		tok = argmax_row(y, V);
		printf(" %d", tok);
		fflush(stdout);
	}
	printf("\n");
	if (df && fclose(df))
		fail("%s: write failed", dump);
	exec_free(&x);
	free(pos);
	free(prompt);
	arena_free(&A);
	return 0;
}
