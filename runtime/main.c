/*
** runtime/main.c — glmrun: load a plan and its weights, prefill the prompt, then decode.
**
** --device cpu runs the reference executor; --device cuda runs the plan's kernels, each decode step one
** CUDA-graph launch per GPU (ranks.c: one worker per GPU of a tensor-parallel plan, NCCL in between);
** without --device, the GPU is used when one is present. --verify runs the prompt and one decode step
** on both and reports the per-layer error.
*/
#include "chat.h"
#include "glm.h"
#include "batch.h"
#include "bench.h"
#include "gpu.h"
#include "ranks.h"
#include "ref.h"
#include "tok.h"
#include "weights.h"
#include "outpath.h"

#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *usage =
	"usage: glmrun PLAN -p TEXT [options]      text in, text out (streamed)\n"
	"       glmrun PLAN --chat [options]        a conversation: user messages from stdin (see --chat)\n"
	"       glmrun PLAN --tokens ID,ID,... [options]\n"
	"       glmrun PLAN --bench | --profile [options]   decode benchmark on a random prompt\n"
	"\n"
	"Run a plan compiled by glmc: evaluate the prompt, then generate up to N tokens. With -p the prompt is\n"
	"text (\"-\" reads stdin), encoded by the model's tokenizer, and the answer is streamed as text until\n"
	"end-of-generation, a --stop string, N tokens or Ctrl-C; prefill and decode speeds go to stderr.\n"
	"With --tokens, exactly N ids are printed on one line (no end-of-sequence stop).\n"
	"\n"
	"  -p TEXT              prompt text; \"-\" reads it from stdin\n"
	"  --chat               answer user messages from stdin in the model's chat format, keeping the\n"
	"                       conversation in the KV cache (a turn prefills only its own tokens). A message\n"
	"                       is one line (empty lines are skipped); a message of several lines starts with\n"
	"                       a line beginning \"\"\" and ends with a line ending \"\"\" (or EOF). An answer ends\n"
	"                       at end-of-turn, --stop, -n or Ctrl-C (what was shown stays in the conversation);\n"
	"                       a second Ctrl-C, EOF or a full --max-seq ends the chat. With -p: the text is\n"
	"                       one user turn, answered once\n"
	"  --chat-template FILE|NAME  the chat template: a Jinja file, run as transformers runs it; default:\n"
	"                       the weights' own (GGUF tokenizer.chat_template, HF chat_template.jinja or\n"
	"                       tokenizer_config.json). Weights without one use a built-in format by their\n"
	"                       architecture, or NAME: glm4 (GLM-4.5/4.6), glm5 (GLM-4.7, GLM-5), deepseek3\n"
	"                       (DeepSeek-V3, V3.1), chatml (Qwen2/2.5/3), llama3 (Llama 3, 3.1+)\n"
	"  --system TEXT        the chat's system prompt (default: none, or what the template adds itself)\n"
	"  --no-think           enable_thinking=false for templates that read it (GLM, Qwen3); default: the\n"
	"                       template's own; thinking text is printed as it comes\n"
	"  --tokenizer PATH     tokenizer source (GGUF, HF directory or tokenizer.json; default: the weights)\n"
	"  --stop STR           stop when the answer ends with STR\n"
	"  --ignore-eos         do not stop at end-of-generation tokens\n"
	"  --tokens IDS         prompt token ids, comma-separated\n"
	"  -n N                 tokens to generate (default 16; with --chat per answer, default no limit)\n"
	"  --force IDS          teacher forcing: after the prompt the generated tokens are these ids, comma-\n"
	"                       separated, instead of sampled ones; each is fed back in its own one-token decode\n"
	"                       step, exactly as a sampled token would be (so the steps split as a generation's\n"
	"                       do; --dump-logits rows as usual). -n defaults to their count and may not exceed\n"
	"                       it. --device cpu or cuda; not with --chat, --batch or --verify\n"
	"  --batch B            decode B sequences together, one cache slot each, every step one graph launch\n"
	"                       of the smallest bucket (1, 2, 4, ..., B) holding the live ones; the prompt is\n"
	"                       shared, or give B prompts (-p or --tokens repeated). Sequence i samples with\n"
	"                       seed + i, ends at -n tokens, end-of-generation, --stop or a full --max-seq;\n"
	"                       answers are printed at the end in order (ids one line each, or text blocks);\n"
	"                       --dump-logits FILE writes FILE.0, FILE.1, ...; on the GPU, tp 1 plans\n"
	"  --device cpu|cuda    where to run (default: cuda when a GPU is present, else cpu)\n"
	"  --max-seq N          KV-cache capacity in positions (default: prompt + N; --chat: the model's\n"
	"                       context, at most 4096)\n"
	"  --dump-logits FILE   write float32 logits, one row per evaluated position\n"
	"                       (prompt positions, then each generated token fed back: n_prompt + N - 1 rows)\n"
	"  --temp T             sampling temperature (default 0: greedy)\n"
	"  --top-k K, --top-p P restrict sampling to the K most likely tokens / the top P probability mass\n"
	"  --seed S             sampling seed (default 0); the same seed gives the same tokens\n"
	"  --verify             run the prompt and one decode step on the GPU and the CPU reference and\n"
	"                       report the largest relative error per layer; exit 1 above tolerance\n"
	"  --round-bf16         round the CPU reference's values as a bf16 plan stores them on the GPU (the\n"
	"                       weights it narrows, every float activation after its node; but in a 1-token\n"
	"                       step the decode GEMVs that the plan marks as forming their norm late read that\n"
	"                       norm unrounded, as the GPU's do), which predicts the GPU's bf16 error without\n"
	"                       one; a plan compiled with --dtype bf16, run with --device cpu or --verify (its\n"
	"                       CPU side)\n"
	"  --stats              print device, memory, timing and graph-launch counts on stderr\n"
	"  --pdl                programmatic dependent launch (sm_90+) of the decode GEMVs: their blocks start\n"
	"                       while the kernel before finishes and ask L2 for their first weights (see\n"
	"                       bench/NOTES.md entry 10 for where it pays; --profile times kernels without it)\n"
	"  --bench              benchmark decoding (no prompt needed): prefill a random prompt, run 3 warm-up\n"
	"                       and N measured decode steps (-n, default 64), print one key: value block\n"
	"                       (ms/step, tok/s, bytes read per step, GB/s, launches per step, prefill tok/s)\n"
	"  --bench-prompt N     tokens of the random prompt (default 128)\n"
	"  --profile            --bench, then time every kernel and collective of the decode step (CUDA events,\n"
	"                       averaged over 10 steps): time, bytes, GB/s per kernel, by operator and by layer\n"
	"                       (needs cuda; a tp plan: every rank runs its step, rank 0's times are shown)\n"
	"  --profile-top N      rows of the per-kernel table (default 30)\n"
	"  --profile-eager      time the kernels launched one by one (default: a graph replay with event nodes\n"
	"                       between the kernels, which leaves out the host's launch gaps)\n"
	"  --bw GBPS            with --bench/--profile: also print GB/s as a % of this bandwidth\n"
	"  --timeout S          GPU watchdog: a rank that makes no progress for S seconds in a step (at\n"
	"                       least 60 while loading) is reported by rank; glmrun exits with status 1\n"
	"                       (default 60)\n"
	"  --weights PATH       weights directory (default: the one the plan was compiled with)\n"
	"  -h, --help           this text;  --version  print the version\n"
	"\n"
	"A plan compiled with --tp N runs on the first N visible GPUs (one worker thread each, NCCL between\n"
	"them; GLMRUN_NCCL=PATH names libnccl.so.2 when the usual places lack it) or, with --device cpu, as N\n"
	"ranks in one process. Allreduces up to GLMRUN_P2P_MAX bytes (default 262144; 0: none) take a\n"
	"one-shot kernel over peer memory instead of NCCL; one followed by a residual sum and its RMSNorm is\n"
	"done inside that sum's kernel.\n"
	"Test hook: GLMRUN_TEST_STALL_RANK=R [GLMRUN_TEST_STALL_STEP=N] stalls rank R for ever before decode\n"
	"step N (default 1; 0 is the prefill), to show the watchdog at work.\n";

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

static double parse_double(const char *s, const char *what, double lo, double hi)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (errno || end == s || *end || !(v >= lo && v <= hi))
		fail("%s must be a number in [%g, %g], got '%s'", what, lo, hi, s);
	return v;
}

/* "1,2,3" -> ids; every id a non-negative integer. `what` names the option in errors. */
static int32_t *parse_tokens(const char *s, const char *what, int *n)
{
	int cap = 16, k = 0;
	int32_t *ids = malloc(sizeof *ids * (size_t)cap);
	const char *p = s;
	while (ids && *p) {
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || v < 0 || v > INT32_MAX || (*end && *end != ','))
			fail("%s: '%s' is not a comma-separated list of token ids (at '%s')", what, s, p);
		if (k == cap)
			ids = realloc(ids, sizeof *ids * (size_t)(cap *= 2));
		if (ids)
			ids[k++] = (int32_t)v;
		p = *end ? end + 1 : end;
	}
	if (!ids)
		fail("out of memory");
	if (k == 0)
		fail("%s: %s", what, strcmp(what, "--tokens") ? "no token ids" : "empty prompt");
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

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

typedef struct {
	const char *plan, *tokens, *device, *dump, *weights, *prompt, *tokenizer, *stop, *chat_template, *system;
	int32_t *force;              /* --force: the generated tokens, nforce of them (NULL: sample) */
	int nforce;
	const char *prompts[BATCH_MAX]; /* every -p / --tokens value, in order */
	int nprompts, batch;
	int ignore_eos, chat, no_think;
	long n, max_seq;
	GpuOpts gpu;
	int verify, stats, round_bf16;
	int bench, profile, profile_eager, n_set, profile_top;   /* --bench / --profile (runtime/bench.c) */
	long bench_prompt;
	double bw;
	double timeout;
} Args;

static void parse(Args *a, int argc, char **argv)
{
	*a = (Args){.gpu = {.top_p = 1.0f}, .timeout = 60};
	for (int i = 1; i < argc; i++) {
		const char *s = argv[i], *next = i + 1 < argc ? argv[i + 1] : NULL;
		if (!strcmp(s, "-h") || !strcmp(s, "--help")) {
			fputs(usage, stdout);
			exit(0);
		} else if (!strcmp(s, "--version")) {
			printf("glmrun %s (plan format %d)\n", GLM_VERSION, PLAN_VERSION);
			exit(0);
		} else if (!strcmp(s, "--verify"))
			a->verify = 1;
		else if (!strcmp(s, "--ignore-eos"))
			a->ignore_eos = 1;
		else if (!strcmp(s, "--chat"))
			a->chat = 1;
		else if (!strcmp(s, "--no-think"))
			a->no_think = 1;
		else if (!strcmp(s, "-p") || !strcmp(s, "--tokenizer") || !strcmp(s, "--stop") ||
		         !strcmp(s, "--chat-template") || !strcmp(s, "--system")) {
			if (!next)
				fail("missing value after %s", s);
			i++;
			*(!strcmp(s, "-p") ? &a->prompt : !strcmp(s, "--stop") ? &a->stop : !strcmp(s, "--system") ? &a->system :
			  !strcmp(s, "--chat-template") ? &a->chat_template : &a->tokenizer) = next;
			if (!strcmp(s, "-p") && a->nprompts < BATCH_MAX)
				a->prompts[a->nprompts++] = next;
		}
		else if (!strcmp(s, "--stats"))
			a->stats = 1;
		else if (!strcmp(s, "--round-bf16"))
			a->round_bf16 = 1;
		else if (!strcmp(s, "--bench"))
			a->bench = 1;
		else if (!strcmp(s, "--profile"))
			a->profile = 1;
		else if (!strcmp(s, "--pdl"))
			a->gpu.pdl = 1;
		else if (!strcmp(s, "--profile-eager"))
			a->profile = a->profile_eager = 1;
		else if (!strcmp(s, "--bench-prompt") || !strcmp(s, "--bw") || !strcmp(s, "--profile-top")) {
			if (!next)
				fail("missing value after %s", s);
			i++;
			if (!strcmp(s, "--bench-prompt"))
				a->bench_prompt = parse_long(next, "--bench-prompt", 1, 1 << 20);
			else if (!strcmp(s, "--profile-top"))
				a->profile_top = (int)parse_long(next, "--profile-top", 1, 1 << 20);
			else
				a->bw = parse_double(next, "--bw", 1e-3, 1e6);
		}
		else if (!strcmp(s, "--tokens") || !strcmp(s, "-n") || !strcmp(s, "--device") || !strcmp(s, "--max-seq") ||
		         !strcmp(s, "--dump-logits") || !strcmp(s, "--weights") || !strcmp(s, "--temp") ||
		         !strcmp(s, "--top-k") || !strcmp(s, "--top-p") || !strcmp(s, "--seed") || !strcmp(s, "--batch") ||
		         !strcmp(s, "--timeout") || !strcmp(s, "--force")) {
			if (!next)
				fail("missing value after %s", s);
			i++;
			if (!strcmp(s, "--tokens")) {
				a->tokens = next;
				if (a->nprompts < BATCH_MAX)
					a->prompts[a->nprompts++] = next;
			} else if (!strcmp(s, "--force")) {
				free(a->force);
				a->force = parse_tokens(next, "--force", &a->nforce);
			} else if (!strcmp(s, "--batch"))
				a->batch = (int)parse_long(next, "--batch", 1, BATCH_MAX);
			else if (!strcmp(s, "-n"))
				a->n = parse_long(next, "-n", 1, 1 << 24), a->n_set = 1;
			else if (!strcmp(s, "--device"))
				a->device = next;
			else if (!strcmp(s, "--max-seq"))
				a->max_seq = parse_long(next, "--max-seq", 1, 1 << 24);
			else if (!strcmp(s, "--dump-logits"))
				a->dump = next;
			else if (!strcmp(s, "--weights"))
				a->weights = next;
			else if (!strcmp(s, "--temp"))
				a->gpu.temp = (float)parse_double(next, "--temp", 0, 100);
			else if (!strcmp(s, "--top-k"))
				a->gpu.top_k = (int)parse_long(next, "--top-k", 0, 1 << 24);
			else if (!strcmp(s, "--top-p"))
				a->gpu.top_p = (float)parse_double(next, "--top-p", 0, 1);
			else if (!strcmp(s, "--timeout"))
				a->timeout = parse_double(next, "--timeout", 0.001, 1e6);
			else
				a->gpu.seed = (uint32_t)parse_long(next, "--seed", 0, UINT32_MAX);
		} else if (s[0] == '-')
			fail("unknown option %s (run 'glmrun --help')", s);
		else if (!a->plan)
			a->plan = s;
		else
			fail("unexpected argument '%s'", s);
	}
	if (!a->plan)
		fail("no plan given (run 'glmrun --help')");
	if (a->device && strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
		fail("--device must be cpu or cuda, got '%s'", a->device);
	if (a->bench || a->profile) {
		if (a->tokens || a->prompt || a->chat)
			fail("--bench and --profile make their own random prompt (--bench-prompt N); drop -p/--tokens/--chat");
		if (a->verify || a->dump || a->round_bf16 || a->force)
			fail("--bench and --profile do not combine with --verify, --dump-logits, --round-bf16 or --force");
		if (!a->n)
			a->n = 16;
		return;
	}
	if (a->bench_prompt || a->bw > 0 || a->profile_top)
		fail("--bench-prompt, --bw and --profile-top go with --bench or --profile");
	int templ = a->chat || a->chat_template || a->system || a->no_think;
	if (a->tokens && (a->prompt || templ))
		fail("--tokens takes token ids; -p, --chat, --chat-template, --system and --no-think take text");
	if (!a->tokens && !a->prompt && !a->chat)
		fail("give a prompt: -p TEXT, --chat or --tokens ID,ID,...%s", templ ? " (chat options need -p or --chat)" : "");
	if (a->chat && !a->prompt && (a->dump || a->verify))
		fail("--chat does not take %s", a->dump ? "--dump-logits" : "--verify");
	if (a->force && (a->chat || a->verify || a->batch > 1 || a->nprompts > 1))
		fail("--force generates one sequence after a plain prompt; drop %s",
		     a->chat ? "--chat" : a->verify ? "--verify" : "--batch and the extra prompts");
	if (a->force && !a->n_set)
		a->n = a->nforce;
	if (a->force && a->n > a->nforce)
		fail("-n %ld asks for more tokens than the %d given to --force", a->n, a->nforce);
	if (!a->n && !(a->chat && !a->prompt))
		a->n = 16;
	if (a->nprompts > 1 && a->batch && a->batch != a->nprompts)
		fail("--batch %d with %d prompts: give one prompt (shared) or exactly %d", a->batch, a->nprompts, a->batch);
	if (a->nprompts > 1 && !a->batch)
		a->batch = a->nprompts;
	if (a->batch > 1 && (a->verify || a->chat || templ))
		fail("--batch runs plain prompts; drop %s", a->verify ? "--verify" : "the chat options");
}

/* A GPU failure. When a rank may still be blocked (the watchdog fired, or one rank failed while the
** others wait in a collective it never joined), the process ends with _exit: exit's clean-up would wait
** on those ranks' threads and GPUs. */
static _Noreturn void fail_gpu(Ranks *R, const char *err)
{
	if (ranks_stuck(R)) {
		fflush(stdout);
		fprintf(stderr, "glmrun: %s\n", err);
		_exit(1);
	}
	fail("%s", err);
}

/* A step's error prefixed with the step it ended: the prefill (0) or decode step i (the i-th generated
** token's step), so a failure such as non-finite logits says when it happened. Rewrites err in place. */
static const char *step_err(char *err, size_t len, long i)
{
	char pre[48];
	size_t k = (size_t)(i ? snprintf(pre, sizeof pre, "decode step %ld: ", i) : snprintf(pre, sizeof pre, "prefill: "));
	size_t m = strlen(err);
	if (k + m + 1 > len)
		m = len - k - 1;
	memmove(err + k, err, m);
	memcpy(err, pre, k);
	err[k + m] = 0;
	return err;
}

/* Whether n floats are all finite (--verify's search for the first NaN or Inf). */
static int all_finite(const float *a, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isfinite(a[i]))
			return 0;
	return 1;
}

/* Relative L2 error of a against the reference b; NaN gives +inf. */
static double rel_err(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		double d = (double)a[i] - b[i];
		num += d * d, den += (double)b[i] * b[i];
	}
	return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

/*
** A moe_route node whose expert ids differ from the CPU's: whether they are the ids the reference routing
** picks from the GPU's own router scores (its input as the GPU stored it, which the float checks hold to
** the tolerance). Then the routing kernel is right and the scores' rounding decided a near tie; a wrong
** routing kernel still fails. Returns the count of tokens routed differently, or -1 where the GPU's ids
** are not that routing (or its input was never stored).
*/
static int route_tie(const Graph *g, int i, float **out, const Exec *cpu, const unsigned char *stored, int T)
{
	const Node *n = &g->node[i];
	int src = n->in[0];
	if (!stored[src])
		return -1;
	int64_t E = g->node[src].dim[1], k = n->dim[1];
	size_t cnt = (size_t)T * (size_t)k;
	int32_t *idx = malloc(cnt * sizeof *idx);
	if (!idx)
		fail("out of memory");
	int groups = n->ia[1] ? (int)n->ia[1] : 1;
	ref_moe_route(idx, out[src], n->nin > 1 ? cpu->buf[n->in[1]] : NULL, T, (int)E, (int)n->ia[0], groups,
	              n->ia[2] ? (int)n->ia[2] : groups, (int)n->ia[3]);
	int same = 1, diff = 0;
	for (int t = 0; t < T; t++) {
		int d = 0;
		for (int64_t j = 0; j < k; j++) {
			size_t at = (size_t)t * (size_t)k + (size_t)j;
			same &= out[i][at] == (float)idx[at];
			d |= out[i][at] != (float)((int32_t *)cpu->buf[i])[at];
		}
		diff += d;
	}
	free(idx);
	return same ? diff : -1;
}

/*
** --verify: the same tokens through the GPU and the CPU reference, every node compared; one line per
** layer with its worst node. The tolerance is the GPU contract on the logits (1e-4 for f32, 2e-2 for
** bf16): the outputs must meet it, and an intermediate node fails only beyond 10x it (rounding grows
** inside a layer and shrinks again at the norms), which still catches any broken kernel; between the
** two it is reported.
*/
static int verify_run(const Graph *g, Ranks *gpu, Exec *cpu, int tp, const int32_t *prompt, int np, double tol)
{
	char err[1024];
	float **out = calloc((size_t)g->n, sizeof *out);
	int nl = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].layer + 2 > nl)
			nl = g->node[i].layer + 2;
	double *worst = calloc((size_t)nl, sizeof *worst);
	int *wnode = calloc((size_t)nl, sizeof *wnode);
	int32_t *pos = malloc(sizeof *pos * (size_t)np);
	if (!out || !worst || !wnode || !pos)
		fail("out of memory");
	for (int i = 0; i < g->n; i++)
		if (g->node[i].kind == VK_ACT && !(out[i] = malloc(sizeof(float) * (size_t)node_numel(&g->node[i], np, cpu->S))))
			fail("out of memory");
	int bad = 0;
	int32_t tok[1];
	unsigned char *stored = malloc((size_t)g->n);
	if (!stored)
		fail("out of memory");
	for (int step = 0; step < 2; step++) {
		int T = step ? 1 : np;
		const int32_t *tk = step ? tok : prompt;
		for (int i = 0; i < T; i++)
			pos[i] = step ? np : i;
		if (exec_step_ranks(cpu, tp, tk, pos, T, err, sizeof err))
			fail("%s", err);
		if (ranks_step_outputs(gpu, tk, pos, T, out, err, sizeof err))
			fail_gpu(gpu, err);
		for (int i = 0; i < nl; i++)
			worst[i] = -1, wnode[i] = -1;
		int nf_gpu = -1, nf_cpu = -1; /* the first node holding a NaN or Inf, on each side */
		cuda_touched(g, T, stored);
		for (int i = 0; i < g->n; i++) {
			const Node *n = &g->node[i];
			if (n->kind != VK_ACT)
				continue;
			size_t cnt = (size_t)node_numel(n, T, cpu->S);
			double e;
			if (n->dtype == DT_I32) {
				e = 0;
				for (size_t k = 0; k < cnt; k++)
					e += out[i][k] != (float)((int32_t *)cpu->buf[i])[k];
			} else
				e = rel_err(out[i], cpu->buf[i], cnt);
			/* A value formed inside a fused kernel (a SwiGLU or norm in a decode GEMV) is never stored. */
			if (!stored[i])
				continue;
			if (n->dtype == DT_F32 && nf_gpu < 0 && !all_finite(out[i], cnt))
				nf_gpu = i;
			if (n->dtype == DT_F32 && nf_cpu < 0 && !all_finite(cpu->buf[i], cnt))
				nf_cpu = i;
			int tie = n->op == OP_MOE_ROUTE && e > 0 ? route_tie(g, i, out, cpu, stored, T) : -1;
			if (tie >= 0) {
				printf("  %s %%%d (%s:%d) %d token%s routed differently at a near tie: the GPU's ids are the "
				       "reference routing of its own scores\n", op_table[n->op].name, i, n->src ? n->src : "?",
				       n->line, tie, tie == 1 ? "" : "s");
				continue;
			}
			int l = n->layer + 1, is_out = 0;
			for (int k = 0; k < g->nout; k++)
				is_out |= g->out[k] == i;
			if (!(e <= (is_out ? tol : 10 * tol))) {
				bad = 1;
				printf("  %s %%%d (%s:%d) rel-L2 %.3g ABOVE TOLERANCE\n", op_table[n->op].name, i,
				       n->src ? n->src : "?", n->line, e);
			}
			if (!(e <= worst[l]))
				worst[l] = e, wnode[l] = i;
		}
		printf("verify %s (%d token%s):\n", step ? "decode step" : "prefill", T, T > 1 ? "s" : "");
		for (int l = 0; l < nl; l++) {
			if (wnode[l] < 0)
				continue;
			const Node *n = &g->node[wnode[l]];
			int over = !(worst[l] <= tol);
			char label[32];
			snprintf(label, sizeof label, l ? "layer %d" : "outside", l - 1);
			printf("  %-10s max rel-L2 %.3g  (%s %%%d, %s:%d)%s\n", label, worst[l], op_table[n->op].name, wnode[l],
			       n->src ? n->src : "?", n->line, over ? "  (above the logits tolerance)" : "");
		}
		for (int side = 0; side < 2; side++) {
			int f = side ? nf_cpu : nf_gpu;
			if (f >= 0)
				printf("  first NaN/Inf on the %s: %s %%%d (%s:%d, %s %d)\n", side ? "CPU" : "GPU", op_table[g->node[f].op].name,
				       f, g->node[f].src ? g->node[f].src : "?", g->node[f].line,
				       g->node[f].layer >= 0 ? "layer" : "outside the layers", g->node[f].layer);
		}
		bad |= nf_gpu >= 0;
		int64_t V = g->node[g->out[0]].dim[1];
		tok[0] = argmax_row((float *)cpu->buf[g->out[0]] + (size_t)(T - 1) * (size_t)V, V);
	}
	printf("verify: %s (tolerance %g)\n", bad ? "FAILED" : "passed", tol);
	for (int i = 0; i < g->n; i++)
		free(out[i]);
	free(out), free(worst), free(wnode), free(pos), free(stored);
	return bad;
}

/* Ctrl-C ends generation cleanly (the answer so far is flushed and the speeds printed). A signal can
** only reach the program through a flag like this one. */
static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	(void)sig;
	interrupted = interrupted + 1;
}

/*
** Append generated text and print what is certain: with a stop string, the answer ends just before its
** first occurrence, and the last len(stop) - 1 bytes are held back until they cannot start one.
** Returns 1 when the stop string was reached. stop == NULL flushes everything held.
*/
static int say(char **buf, size_t *n, size_t *cap, size_t *shown, const char *piece, size_t len, const char *stop)
{
	if (*n + len + 1 > *cap && !(*buf = realloc(*buf, *cap = 2 * (*n + len + 64))))
		fail("out of memory");
	memcpy(*buf + *n, piece, len);
	*n += len;
	(*buf)[*n] = 0;
	size_t sl = stop ? strlen(stop) : 0, from = *shown, upto = *n;
	int hit = 0;
	if (sl) {
		char *at = memmem(*buf + from, *n - from, stop, sl);
		if (at)
			upto = (size_t)(at - *buf), hit = 1;
		else
			upto = *n >= sl - 1 + from ? *n - (sl - 1) : from;
	}
	fwrite(*buf + from, 1, upto - from, stdout);
	*shown = upto;
	return hit;
}

/* The prompt text: -p TEXT, or stdin for "-". */
static char *read_prompt(const char *p, size_t *n)
{
	if (strcmp(p, "-")) {
		*n = strlen(p);
		return strdup(p);
	}
	size_t cap = 4096, k = 0;
	char *b = malloc(cap);
	for (size_t r; b && (r = fread(b + k, 1, cap - k, stdin)) > 0;)
		if ((k += r) == cap && !(b = realloc(b, cap *= 2)))
			break;
	if (!b)
		fail("out of memory reading the prompt");
	*n = k;
	return b;
}

/*
** --batch: every prompt (or the one prompt, shared) encoded, checked and run through batch_run with
** caches for all sequences; -n is per sequence and clipped where a context would overflow.
*/
static int run_batch(const Args *a, const Graph *g, const Tok *tk, int cuda, int tp, const char *weights)
{
	char err[1024];
	int n = a->batch;
	int32_t *ids[BATCH_MAX];
	int np[BATCH_MAX], maxp = 0;
	int64_t V = g->node[g->out[0]].dim[1];
	for (int i = 0; i < g->nout; i++)
		if (!strcmp(g->out_name[i], "logits"))
			V = g->node[g->out[i]].dim[1];
	for (int i = 0; i < n; i++) {
		const char *src = a->prompts[a->nprompts > 1 ? i : 0];
		if (i && a->nprompts == 1) { /* one prompt, shared */
			if (!(ids[i] = malloc(sizeof(int32_t) * (size_t)np[0])))
				fail("out of memory");
			memcpy(ids[i], ids[0], sizeof(int32_t) * (size_t)np[0]);
			np[i] = np[0];
			continue;
		}
		if (tk) {
			size_t tn, nid;
			char *text = read_prompt(src, &tn);
			int32_t *p = NULL;
			if (tok_encode(tk, text, tn, 1, 1, &p, &nid))
				fail("-p: out of memory encoding prompt %d", i);
			free(text);
			if (!nid)
				fail("-p: prompt %d encodes to no tokens", i);
			ids[i] = p, np[i] = (int)nid;
		} else
			ids[i] = parse_tokens(src, "--tokens", &np[i]);
		for (int k = 0; k < np[i]; k++)
			if (ids[i][k] >= V)
				fail("--tokens: prompt %d: token id %d is outside the vocabulary [0, %lld)", i, ids[i][k], (long long)V);
		maxp = np[i] > maxp ? np[i] : maxp;
	}
	long max_seq = a->max_seq ? a->max_seq : maxp + a->n - 1;
	const char *ctx = graph_meta(g, "n_ctx");
	if (ctx && max_seq > atol(ctx))
		fail("--max-seq %ld is more than the model's context of %s", max_seq, ctx);
	int64_t maxT = maxp > n ? maxp : n;
	BatchRun b = {.nseq = n, .prompt = (const int32_t *const *)ids, .np = np, .n = a->n, .max_seq = max_seq,
	              .temp = a->gpu.temp, .top_p = a->gpu.top_p, .top_k = a->gpu.top_k, .seed = a->gpu.seed, .tk = tk,
	              .stop = a->stop, .ignore_eos = a->ignore_eos, .dump = a->dump, .stop_flag = &interrupted};
	Exec xr[8];
	Gpu *gpu = NULL;
	double t0 = now();
	if (cuda) {
		GpuOpts o = a->gpu;
		o.progress = isatty(2), o.keep_logits = a->dump != NULL, o.batch = n;
		if (gpu_open(&gpu, g, weights, maxT, max_seq, &o, err, sizeof err))
			fail("%s", err);
	} else
		for (int r = 0; r < tp; r++)
			if (exec_init_slots(&xr[r], g, weights, maxT, max_seq, n, r, tp, err, sizeof err) ||
			    (a->round_bf16 && exec_round_bf16(&xr[r], err, sizeof err)))
				fail("%s", err);
	double t1 = now();
	if (tk)
		signal(SIGINT, on_sigint);
	if (batch_run(g, gpu, xr, tp, &b, err, sizeof err))
		fail("%s", err);
	double t2 = now();
	if (a->stats) {
		fprintf(stderr, "stats: device %s, batch %d, %ld positions per sequence\n", cuda ? "cuda" : "cpu", n, max_seq);
		fprintf(stderr, "stats: load %.3f s, prompts and decode %.3f s\n", t1 - t0, t2 - t1);
		if (cuda) {
			GpuStats s;
			gpu_stats(gpu, &s);
			fprintf(stderr, "stats: memory weights %.1f MiB, activations %.1f MiB, kv cache %.1f MiB\n",
			        (double)s.weight_bytes / (1 << 20), (double)s.act_bytes / (1 << 20), (double)s.cache_bytes / (1 << 20));
			fprintf(stderr, "stats: decode steps %ld, graph launches %ld (%.2f per step)\n", s.decode_steps,
			        s.graph_launches, s.decode_steps ? (double)s.graph_launches / (double)s.decode_steps : 0.0);
		}
	}
	if (gpu)
		gpu_close(gpu);
	else
		for (int r = 0; r < tp; r++)
			exec_free(&xr[r]);
	for (int i = 0; i < n; i++)
		free(ids[i]);
	return 0;
}

/* At exit: output lost on stdout (a full disk, a closed descriptor) is an error, not status 0. */
static void close_stdout(void)
{
	if (out_close_stdout()) {
		fprintf(stderr, "glmrun: standard output: write failed: %s\n", strerror(errno));
		_exit(1);
	}
}

int main(int argc, char **argv)
{
	atexit(close_stdout);
	Args a;
	parse(&a, argc, argv);
	char err[1024];
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	if (plan_read(&g, a.plan, err, sizeof err))
		fail("%s", err);
	if (a.bench || a.profile) {
		/* The benchmark modes (runtime/bench.c) make their own prompt and print one block. */
		int on_gpu = a.device ? !strcmp(a.device, "cuda") : (g.cuda.source && gpu_present());
		if (a.profile && !on_gpu)
			fail("--profile times the GPU's kernels; it needs --device cuda (and a GPU)");
		const char *w = a.weights ? a.weights : graph_meta(&g, "weights.path");
		if (!w)
			fail("%s: the plan names no weights; pass --weights PATH", a.plan);
		BenchOpts bo = {.profile = a.profile, .profile_eager = a.profile_eager, .prompt = a.bench_prompt ? a.bench_prompt : 128,
		                .steps = a.n_set ? a.n : 64, .warmup = 3, .profile_steps = 10,
		                .profile_top = a.profile_top ? a.profile_top : 30, .bw_gbps = a.bw, .seed = a.gpu.seed,
		                .batch = a.batch ? a.batch : 1};
		int rc = bench_main(&g, a.plan, w, on_gpu, &bo, &a.gpu);
		arena_free(&A);
		return rc;
	}
	int np;
	int32_t *prompt = NULL;
	Tok *tk = NULL;
	int templ = a.chat || a.chat_template || a.system || a.no_think, chat = a.chat && !a.prompt;
	ChatFmt cf = {0};
	if (a.prompt || chat) {
		const char *src = a.tokenizer ? a.tokenizer : graph_meta(&g, "weights.path");
		const char *wf = graph_meta(&g, "weights.format");
		if (!a.tokenizer && wf && !strcmp(wf, "random"))
			fail("%s: this plan has random weights and no tokenizer; give --tokenizer PATH or use --tokens",
			     chat ? "--chat" : "-p");
		size_t tl = src ? strlen(src) : 0;
		Weights tw;
		if (!src)
			fail("-p: the plan names no weights to read a tokenizer from; give --tokenizer PATH");
		if (tl > 5 && !strcmp(src + tl - 5, ".json")) {
			if (tok_open_json(&tk, src, err, sizeof err))
				fail("%s", err);
		} else {
			if (weights_open(&tw, src, err, sizeof err) || tok_open(&tk, &tw, err, sizeof err))
				fail("%s", err);
			weights_close(&tw);
		}
		if (templ && chat_setup(&cf, src, a.chat_template, a.no_think, tk, err, sizeof err))
			fail("%s", err);
		size_t tn, nid = 1;
		char *text = a.prompt && a.batch <= 1 ? read_prompt(a.prompt, &tn) : NULL; /* run_batch encodes its own */
		if (a.prompt && templ) {
			char *t = chat_prompt(&cf, a.system, text, &tn, err, sizeof err);
			chat_free(&cf); /* the end-of-turn ids stay */
			free(text);
			if (!(text = t))
				fail("-p: %s", err);
		}
		if (text && tok_encode(tk, text, tn, !templ, 1, &prompt, &nid))
			fail("-p: out of memory encoding the prompt");
		free(text);
		if (a.prompt && !nid)
			fail("-p: the prompt encodes to no tokens");
		np = (int)nid;
		/* No SA_RESTART: a Ctrl-C also ends the wait for the next line of a chat. */
		struct sigaction sa = {.sa_handler = on_sigint};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
	} else
		prompt = parse_tokens(a.tokens, "--tokens", &np);
	int cuda = a.device ? !strcmp(a.device, "cuda") : (g.cuda.source && gpu_present());
	if (a.round_bf16 && g.cuda.act != DT_BF16)
		fail("%s: --round-bf16 mirrors a plan compiled with --dtype bf16; this one's activations are %s", a.plan,
		     dtype_name(g.cuda.act));
	if (a.round_bf16 && cuda && !a.verify)
		fail("--round-bf16 rounds the CPU reference as the GPU does; run it with --device cpu (or --verify)");

	int logits = -1;
	for (int i = 0; i < g.nout; i++)
		if (!strcmp(g.out_name[i], "logits"))
			logits = g.out[i];
	if (logits < 0)
		fail("%s: the plan has no output named 'logits'", a.plan);
	const Node *L = &g.node[logits];
	if (L->ndim != 2 || L->dim[0] != DIM_T || L->dim[1] <= 0)
		fail("%s: output 'logits' must be [T, vocab]", a.plan);
	int64_t V = L->dim[1];
	for (int i = 0; prompt && i < np; i++)
		if (prompt[i] >= V)
			fail("--tokens: token id %d is outside the vocabulary [0, %lld)", prompt[i], (long long)V);
	for (int i = 0; i < a.nforce; i++)
		if (a.force[i] >= V)
			fail("--force: token id %d is outside the vocabulary [0, %lld)", a.force[i], (long long)V);

	const char *ctx = graph_meta(&g, "n_ctx");
	if (chat) { /* a chat holds max_seq positions and prefills each turn in steps of at most np tokens */
		long cap = ctx && atol(ctx) > 0 && atol(ctx) < 4096 ? atol(ctx) : 4096;
		if (ctx && a.max_seq > atol(ctx))
			fail("--max-seq %ld is more than the model's context of %s", a.max_seq, ctx);
		a.max_seq = a.max_seq ? a.max_seq : cap;
		np = (int)(a.max_seq < 512 ? a.max_seq : 512);
	}
	long need = chat ? a.max_seq : np + a.n - 1 + a.verify;
	const char *forced = a.force ? " (--force)" : "";
	if (a.batch <= 1 && ctx && need > atol(ctx))
		fail("prompt of %d tokens + %ld generated%s needs %ld positions, more than the model's context of %s", np, a.n,
		     forced, need, ctx);
	long max_seq = a.max_seq ? a.max_seq : need;
	if (a.batch <= 1 && need > max_seq)
		fail("prompt of %d tokens + %ld generated%s needs %ld positions, more than --max-seq %ld", np, a.n, forced, need,
		     max_seq);
	const char *wfmt = graph_meta(&g, "weights.format");
	if (wfmt && !strcmp(wfmt, "random"))
		fprintf(stderr, "glmrun: note: RANDOM WEIGHTS (%s): this plan was compiled with --random-weights; its "
		        "tokens mean nothing\n", graph_meta(&g, "weights.random_type") ? graph_meta(&g, "weights.random_type") : "?");
	const char *weights = a.weights ? a.weights : graph_meta(&g, "weights.path");
	if (!weights)
		fail("%s: the plan names no weights; pass --weights PATH", a.plan);

	/* --verify needs every node's value, which the plan's shared arena overwrites once a node is dead:
	** both sides then run with one buffer per value. */
	if (a.verify)
		g.mem.planned = 0;
	const char *tps = graph_meta(&g, "tp");
	int tp = tps ? atoi(tps) : 1;
	if (tp < 1 || tp > 8)
		fail("%s: tp %d in the plan is outside 1..8", a.plan, tp);
	if (a.batch > 1) {
		if (tp > 1 && cuda)
			fail("%s: --batch on the GPU runs tp 1 plans; this one is partitioned for %d GPUs (use --device cpu)",
			     a.plan, tp);
		int rc = run_batch(&a, &g, tk, cuda, tp, weights);
		if (tk)
			tok_close(tk);
		free(prompt);
		arena_free(&A);
		return rc;
	}
	Exec xr[8], *xp = xr;
	Ranks *gpu = NULL;
	int use_cpu = !cuda || a.verify;
	for (int r = 0; use_cpu && r < tp; r++) {
		if (exec_init_rank(&xr[r], &g, weights, np, max_seq, r, tp, err, sizeof err) ||
		    (a.round_bf16 && exec_round_bf16(&xr[r], err, sizeof err)))
			fail("%s", err);
		xr[r].nan_ok = a.verify; /* --verify finds the first NaN itself */
	}
	if (cuda) {
		a.gpu.progress = isatty(2);
		a.gpu.keep_logits = a.dump != NULL;
		RanksOpts ro = {.timeout = a.timeout};
		if (ranks_opts_from_env(&ro, tp, err, sizeof err))
			fail("%s", err);
		if (ranks_open(&gpu, &g, weights, np, max_seq, &a.gpu, &ro, err, sizeof err))
			fail_gpu(gpu, err);
	}
	if (a.verify) {
		if (!cuda)
			fail("--verify compares the GPU with the CPU reference; it needs --device cuda");
		int bad = verify_run(&g, gpu, xr, tp, prompt, np, g.cuda.act == DT_BF16 ? 2e-2 : 1e-4);
		ranks_close(gpu);
		for (int r = 0; r < tp; r++)
			exec_free(&xr[r]);
		return bad;
	}

	if (chat) {
		ChatSession cs = {.g = &g, .logits = logits, .V = V, .xs = use_cpu ? xr : NULL, .tp = tp, .gpu = gpu,
		                  .samp = a.gpu, .max_seq = max_seq, .maxT = np, .n = a.n, .stop = a.stop,
		                  .ignore_eos = a.ignore_eos, .stats = a.stats, .tk = tk, .fmt = &cf, .system = a.system,
		                  .sigs = &interrupted};
		int rc = chat_session(&cs, stdin, err, sizeof err);
		if (gpu)
			ranks_close(gpu);
		for (int r = 0; use_cpu && r < tp; r++)
			exec_free(&xr[r]);
		tok_close(tk);
		chat_free(&cf);
		arena_free(&A);
		if (rc)
			fail("%s", err);
		return 0;
	}
	FILE *df = NULL;
	if (a.dump && !(df = fopen(a.dump, "wb")))
		fail("%s: cannot create: %s", a.dump, strerror(errno));
	float *rows = malloc(sizeof(float) * (size_t)(np * V));
	int32_t *pos = malloc(sizeof *pos * (size_t)np);
	if (!rows || !pos)
		fail("out of memory");
	double t0 = now();
	int32_t tok;
	if (cuda) {
		if (ranks_prefill(gpu, prompt, np, 0, &tok, df ? rows : NULL, err, sizeof err))
			fail_gpu(gpu, step_err(err, sizeof err, 0));
	} else {
		for (int i = 0; i < np; i++)
			pos[i] = i;
		if (exec_step_ranks(xp, tp, prompt, pos, np, err, sizeof err))
			fail("%s", step_err(err, sizeof err, 0));
		memcpy(rows, xp[0].buf[logits], sizeof(float) * (size_t)(np * V));
		tok = ref_sample(rows + (np - 1) * V, (int)V, a.gpu.temp, a.gpu.top_k, a.gpu.top_p, a.gpu.seed, 0);
	}
	if (a.force) /* --force: the sampled token is dropped, and the next step is fed this one */
		tok = a.force[0];
	double t1 = now();
	if (df && fwrite(rows, sizeof(float), (size_t)(np * V), df) != (size_t)(np * V))
		fail("%s: write failed: %s", a.dump, strerror(errno));
	/* Text mode streams valid UTF-8 and stops at end-of-generation, a stop string or Ctrl-C. */
	TokStream ts;
	char *said = NULL;
	size_t nsaid = 0, cap_said = 0, shown = 0;
	long made = 1, nprinted = 0;
	int done = 0;
	if (tk)
		tok_stream_init(&ts, tk, 0);
#define EMIT(id)                                                                                            \
	do {                                                                                                    \
		if (!tk) {                                                                                          \
			printf(nprinted++ ? " %d" : "%d", id);                                                          \
			break;                                                                                          \
		}                                                                                                   \
		if (!a.ignore_eos && (tok_is_eog(tk, id) || (templ && chat_is_eot(&cf, id)))) {                   \
			done = 1;                                                                                       \
			break;                                                                                          \
		}                                                                                                   \
		size_t pl;                                                                                          \
		const char *piece = tok_stream_put(&ts, id, &pl);                                                   \
		if (piece && pl)                                                                                    \
			done = say(&said, &nsaid, &cap_said, &shown, piece, pl, a.stop);                                \
	} while (0)
	EMIT(tok);
	fflush(stdout);
	for (long i = 1; i < a.n && !done && !interrupted; i++, made++) {
		if (cuda) {
			if (a.force ? ranks_decode_fed(gpu, tok, &tok, df ? rows : NULL, err, sizeof err)
			            : ranks_decode(gpu, &tok, df ? rows : NULL, err, sizeof err))
				fail_gpu(gpu, step_err(err, sizeof err, i));
		} else {
			int32_t p = (int32_t)(np + i - 1);
			if (exec_step_ranks(xp, tp, &tok, &p, 1, err, sizeof err))
				fail("%s", step_err(err, sizeof err, i));
			memcpy(rows, xp[0].buf[logits], sizeof(float) * (size_t)V);
			tok = ref_sample(rows, (int)V, a.gpu.temp, a.gpu.top_k, a.gpu.top_p, a.gpu.seed, (int)i);
		}
		if (a.force) /* the sampled token dropped, as after the prefill */
			tok = a.force[i];
		if (df && fwrite(rows, sizeof(float), (size_t)V, df) != (size_t)V)
			fail("%s: write failed: %s", a.dump, strerror(errno));
		EMIT(tok);
		if (fflush(stdout))
			close_stdout(); /* ends the run: the answer can no longer be delivered */
	}
#undef EMIT
	if (tk) {
		size_t pl;
		const char *rest = tok_stream_flush(&ts, &pl);
		if (!done && rest && pl)
			done = say(&said, &nsaid, &cap_said, &shown, rest, pl, a.stop);
		if (!done)
			say(&said, &nsaid, &cap_said, &shown, "", 0, NULL); /* what was held back for --stop */
		tok_stream_free(&ts);
		free(said);
	}
	printf("\n");
	fflush(stdout);
	double t2 = now();
	if (tk) {
		fprintf(stderr, "glmrun: prefill %d tokens at %.1f tok/s, decode %ld tokens at %.1f tok/s%s\n", np,
		        np / (t1 - t0), made - 1, made > 1 ? (double)(made - 1) / (t2 - t1) : 0.0,
		        interrupted ? " (interrupted)" : "");
		tok_close(tk);
	}
	if (df && fclose(df))
		fail("%s: write failed: %s", a.dump, strerror(errno));
	if (a.stats) {
		fprintf(stderr, "stats: device %s\n", cuda ? "cuda" : "cpu");
		fprintf(stderr, "stats: prefill %d tokens in %.3f ms (%.1f tok/s)\n", np, 1e3 * (t1 - t0), np / (t1 - t0));
		if (a.n > 1)
			fprintf(stderr, "stats: decode %ld steps in %.3f ms (%.3f ms/step, %.1f tok/s)\n", a.n - 1, 1e3 * (t2 - t1),
			        1e3 * (t2 - t1) / (double)(a.n - 1), (double)(a.n - 1) / (t2 - t1));
		if (cuda) {
			RanksStats rs;
			ranks_stats(gpu, &rs);
			GpuStats s = rs.gpu;
			if (rs.nccl_version)
				fprintf(stderr, "stats: ranks %d (GPUs 0..%d), NCCL %d.%d.%d from %s, peer access %d of %d pairs, %d "
				        "collectives per step; rank 0 made %ld NCCL calls and %ld P2P allreduces (up to %ld bytes)\n",
				        rs.tp, rs.tp - 1, rs.nccl_version / 10000, rs.nccl_version / 100 % 100, rs.nccl_version % 100,
				        rs.nccl_path, rs.peer_ok, rs.peer_pairs, s.collectives_per_step, s.nccl_calls, s.p2p_calls,
				        rs.p2p_max);
			else
				fprintf(stderr, "stats: ranks 1, no NCCL (%s)\n", rs.nccl_note);
			fprintf(stderr, "stats: gpu %s (sm_%d%d)%s\n", s.name, s.cc_major, s.cc_minor,
			        s.recompiled ? ", kernels recompiled from the plan's source" : "");
			fprintf(stderr, "stats: memory weights %.1f MiB, activations %.1f MiB, kv cache %.1f MiB; upload %.3f s\n",
			        (double)s.weight_bytes / (1 << 20), (double)s.act_bytes / (1 << 20),
			        (double)s.cache_bytes / (1 << 20), s.upload_s);
			fprintf(stderr, "stats: prefill matmuls %s (%ld calls)\n",
			        s.have_lt ? "through cuBLASLt" : "through glmc's GEMM kernel (cuBLASLt not found)", s.lt_matmuls);
			fprintf(stderr, "stats: decode steps %ld, graph launches %ld (%.2f per step), kernels per step %d, "
			        "programmatic launch %s\n", s.decode_steps, s.graph_launches,
			        s.decode_steps ? (double)s.graph_launches / (double)s.decode_steps : 0.0, s.kernels_per_step,
			        s.pdl ? "on" : "off");
		}
	}
	if (gpu)
		ranks_close(gpu);
	for (int r = 0; use_cpu && r < tp; r++)
		exec_free(&xr[r]);
	free(rows), free(pos), free(prompt), free(a.force);
	arena_free(&A);
	return 0;
}
