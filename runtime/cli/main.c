/*
** runtime/cli/main.c — glmrun: the command line. main() parses the arguments and hands the plan to one mode
** (text, chat, batch, bench, verify), each a short function over the engine (engine.h), which runs the
** plan on the CPU reference or on the plan's GPUs the same way for all of them.
**
** --device cpu runs the reference executor; --device cuda runs the plan's kernels, each decode step one
** CUDA-graph launch per GPU; without --device, the GPU is used when one is present. --verify runs the
** prompt and one decode step on both and reports the per-layer error.
*/
#include "batch.h"
#include "bench.h"
#include "chat.h"
#include "engine.h"
#include "glm.h"
#include "gpu.h"
#include "outpath.h"
#include "ref.h"
#include "rfile.h"
#include "serve.h"
#include "tok.h"
#include "weights.h"

#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *usage =
	"usage: glmrun PLAN -p TEXT [options]      text in, text out (streamed)\n"
	"       glmrun PLAN --chat [options]        a conversation: user messages from stdin (see --chat)\n"
	"       glmrun PLAN --tokens ID,ID,... [options]\n"
	"       glmrun PLAN --bench | --profile [options]   decode benchmark on a random prompt\n"
	"       glmrun serve PLAN [serve options]   an OpenAI-compatible HTTP server (see 'serve' below)\n"
	"\n"
	"Run a plan compiled by glmc: evaluate the prompt, then generate up to N tokens. With -p the prompt is\n"
	"text (\"-\" reads stdin), encoded by the model's tokenizer, and the answer is streamed as text until\n"
	"end-of-generation, a --stop string, N tokens or Ctrl-C; prefill and decode speeds go to stderr.\n"
	"With --tokens, exactly N ids are printed on one line (no end-of-sequence stop).\n"
	"\n"
	"  -p, --prompt TEXT    prompt text; \"-\" reads it from stdin\n"
	"  -f, --file FILE      prompt text from FILE\n"
	"  --chat, -cnv        answer user messages from stdin in the model's chat format, keeping the\n"
	"                       conversation in the KV cache (a turn prefills only its own tokens). A message\n"
	"                       is one line (empty lines are skipped); a message of several lines starts with\n"
	"                       a line beginning \"\"\" and ends with a line ending \"\"\" (or EOF). An answer ends\n"
	"                       at end-of-turn, --stop, -n or Ctrl-C (what was shown stays in the conversation);\n"
	"                       a second Ctrl-C, EOF or a full --max-seq ends the chat. With -p: the text is\n"
	"                       one user turn, answered once\n"
	"  --chat-template FILE|NAME  (also --chat-template-file) the chat template: a Jinja file, run as transformers runs it; default:\n"
	"                       the weights' own (GGUF tokenizer.chat_template, HF chat_template.jinja or\n"
	"                       tokenizer_config.json). Weights without one use a built-in format by their\n"
	"                       architecture, or NAME: glm4 (GLM-4.5/4.6), glm5 (GLM-4.7, GLM-5), deepseek3\n"
	"                       (DeepSeek-V3, V3.1), chatml (Qwen2/2.5/3), llama3 (Llama 3, 3.1+)\n"
	"  --system TEXT        (also --system-prompt) the chat's system prompt (default: none, or what the template adds itself)\n"
	"  --no-think           enable_thinking=false for templates that read it (GLM, Qwen3); default: the\n"
	"                       template's own; thinking text is printed as it comes\n"
	"  --tokenizer PATH     tokenizer source (GGUF, HF directory or tokenizer.json; default: the weights)\n"
	"  --stop STR           stop when the answer ends with STR\n"
	"  --ignore-eos         do not stop at end-of-generation tokens\n"
	"  --tokens IDS         prompt token ids, comma-separated\n"
	"  -n, --max-tokens N   tokens to generate (default 16; with --chat per answer, default no limit);\n"
	"                       also --n-predict\n"
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
	"                       --dump-logits FILE writes FILE.0, FILE.1, ...; CPU, one GPU or tp N GPUs\n"
	"  --device cpu|cuda    where to run (default: cuda when a GPU is present, else cpu)\n"
	"  -c, --ctx-size N     (also --max-seq) KV-cache capacity in positions (default: prompt + N; --chat: the model's\n"
	"                       context window on the GPU, or the most positions that fit in its memory; on the\n"
	"                       CPU the window up to 4096)\n"
	"  --dump-logits FILE   write float32 logits, one row per evaluated position\n"
	"                       (prompt positions, then each generated token fed back: n_prompt + N - 1 rows)\n"
	"  --temp T             (also --temperature) sampling temperature (default 0: greedy)\n"
	"  --top-k K, --top-p P restrict sampling to the K most likely tokens / the top P probability mass\n"
	"  -s, --seed S         sampling seed (default 0); the same seed gives the same tokens\n"
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
	"  --decode persistent|kernels\n"
	"                       the 1-token decode step as glmc's persistent kernel (one launch running the\n"
	"                       plan's task schedule; the default when the plan has one: glmc compile --decode\n"
	"                       persistent) or as the plan's kernels one after another\n"
	"  --l2-prefetch KIB    persistent decode: KiB of each task's first weight that its worker asks L2 for\n"
	"                       while it waits for the task's inputs (default: one 128-byte line a thread of\n"
	"                       the worker, 32 KiB for 256 threads; 0: none); --stats shows the bytes\n"
	"  --no-cublaslt        run prefill matmuls with the plan's own GEMM kernels (k_gemm_tc on the tensor\n"
	"                       cores for bf16) instead of cuBLASLt, which glmrun otherwise loads when present\n"
	"  --bench              benchmark decoding (no prompt needed): prefill a random prompt, run 3 warm-up\n"
	"                       and N measured decode steps (-n, default 64), print one key: value block\n"
	"                       (ms/step, tok/s, bytes read per step, GB/s, launches per step, prefill tok/s)\n"
	"  --bench-prompt N     tokens of the random prompt (default 128), prefilled in steps of -ub as a run's\n"
	"                       (with --batch B, B prompts sharing steps of up to -ub tokens, as glmrun --batch\n"
	"                       and serve prefill them)\n"
	"  -ub, --ubatch-size N prompt tokens one prefill step evaluates (default 2048; --chat 512): a longer\n"
	"                       prompt runs in steps of N against the cache (bounded memory and time)\n"
	"  --json               with --bench: the block as one JSON object (numbers where a value is one)\n"
	"  --profile            --bench, then time every kernel and collective of the decode step (CUDA events,\n"
	"                       averaged over 10 steps): time, bytes, GB/s per kernel, by operator and by layer\n"
	"                       (needs cuda; a tp plan: every rank runs its step, rank 0's times are shown);\n"
	"                       on the persistent decode path first its task timeline over 3 traced steps:\n"
	"                       per launch its tasks' waits and body time, per worker busy vs waiting\n"
	"  --profile-top N      rows of the per-kernel table (default 30)\n"
	"  --profile-eager      time the kernels launched one by one (default: a graph replay with event nodes\n"
	"                       between the kernels, which leaves out the host's launch gaps)\n"
	"  --bw GBPS            with --bench/--profile: also print GB/s as a % of this bandwidth\n"
	"  --timeout S          GPU watchdog: a rank that makes no progress for S seconds in a step (at\n"
	"                       least 60 while loading) is reported by rank; glmrun exits with status 1\n"
	"                       (default 60)\n"
	"  --weights PATH       weights directory (default: the one the plan was compiled with)\n"
	"  -t, --threads N      CPU threads of the reference executor (default: all cores; sets\n"
	"                       GLMRUN_THREADS)\n"
	"  -h, --help           this text;  --version  print the version\n"
	"\n"
	"\n"
	"glmrun serve PLAN: POST /v1/completions (prompt text or token ids), POST /v1/chat/completions (messages\n"
	"through the chat template), GET /v1/models, /health, /metrics (Prometheus). stream: true answers in\n"
	"server-sent events ending with data: [DONE]; max_tokens (max_completion_tokens), stop (a string or a\n"
	"list), ignore_eos and return_token_ids (vLLM's extensions). Continuous batching: new requests join\n"
	"between decode steps, their prompts prefilled in chunks; a finished request or a client gone frees its\n"
	"slot at once. Each request samples with its own temperature (0: greedy), top_p, top_k and seed, as\n"
	"glmrun -p does with --temp, --top-p, --top-k and --seed; fields it leaves out take the server's flags\n"
	"(default greedy; the seed then --seed plus the KV-cache slot). n must be 1; logprobs are refused (400).\n"
	"Ends cleanly on SIGTERM or Ctrl-C.\n"
	"  --host ADDR          IPv4 address to listen on (default 127.0.0.1)\n"
	"  --port N             TCP port (default 8080)\n"
	"  --max-seqs B         sequences decoded at once, one KV-cache slot each (default 4); also vLLM's\n"
	"                       --max-num-seqs, llama-server's --parallel\n"
	"  -c, --max-seq N      positions per sequence, prompt included (default: the model's context, at most\n"
	"                       4096); also llama-server's --ctx-size, vLLM's --max-model-len\n"
	"  --max-num-batched-tokens N  prompt tokens prefilled per scheduler step, over all new requests\n"
	"                       (default 2048; vLLM's name)\n"
	"  --prefill-alone auto|on|off\n"
	"                       a prompt with a whole step of tokens (--max-num-batched-tokens) or more left reads\n"
	"                       them in a step of its own, the running requests decoding in the next one (default\n"
	"                       auto: on where the plan's one-sequence prefill is cheaper on the GPU, MLA in bf16)\n"
	"  --max-queue N        requests waiting for a slot at most; more get 503 (default 64)\n"
	"  --api-key KEY        /v1/ requires 'Authorization: Bearer KEY' (401 otherwise); both servers' name\n"
	"  --model-name NAME    the model's id in responses and /v1/models (default: the plan's file name);\n"
	"                       also vLLM's --served-model-name, llama-server's --alias\n"
	"  --device, --tokenizer, --chat-template, --no-think, --weights, -t as above\n"
	"\n"
	"PLAN may also be given as -m/--model PLAN; weights (a GGUF file or a Hugging Face directory) in its\n"
	"place are compiled once by the glmc beside glmrun into $GLMC_CACHE (default ~/.cache/glmc)/plans and\n"
	"the plan reused while the weights and glmc stay unchanged. Options take their value as --opt VALUE or --opt=VALUE.\n"
	"Names as llama.cpp's llama-cli spells them: -m, -p, -f, -n/--n-predict, -c/--ctx-size, -s/--seed,\n"
	"-t/--threads, --temp, --top-k, --top-p, --ignore-eos, -cnv, --chat-template-file, --system-prompt;\n"
	"as vLLM's sampling parameters: --max-tokens, --temperature.\n"
	"A plan compiled with --tp N runs on the first N visible GPUs (one worker thread each, NCCL between\n"
	"them; GLMRUN_NCCL=PATH names libnccl.so.2 when the usual places lack it) or, with --device cpu, as N\n"
	"ranks in one process. Allreduces up to GLMRUN_P2P_MAX bytes (default 262144; 0: none) take a\n"
	"one-shot kernel over peer memory instead of NCCL; one followed by a residual sum and its RMSNorm is\n"
	"done inside that sum's kernel.\n"
	"Test hook: GLMRUN_TEST_STALL_RANK=R [GLMRUN_TEST_STALL_STEP=N] stalls rank R for ever before decode\n"
	"step N (default 1; 0 is the prefill), to show the watchdog at work. GLMRUN_TEST_STEP_DELAY_MS=N: glmrun serve\n"
	"pauses N ms after each decode step (tests/serve.sh, so that a tiny model's requests overlap).\n";

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
	float temp, top_p;
	int top_k, pdl, no_lt, decode;
	int64_t l2_prefetch;         /* --l2-prefetch: GpuOpts.l2_prefetch */
	uint32_t seed;
	int verify, stats, round_bf16;
	int serve, port, max_seqs, max_queue;          /* glmrun serve (runtime/cli/serve.c) */
	const char *host, *api_key, *model_name;
	long batch_tokens;
	int prefill_alone;                             /* --prefill-alone: 0 auto, 1 on, 2 off */
	int bench, profile, profile_eager, n_set, profile_top;   /* --bench / --profile (runtime/cli/bench.c) */
	int json;                    /* --bench --json */
	long ubatch;                 /* --ubatch-size: prompt tokens per prefill step (0: the mode's default) */
	long bench_prompt;
	double bw;
	double timeout;
} Args;

/* getopt_long's table: long names (and aliases) to codes; short options are their own codes. */
enum {
	O_CHAT = 256, O_NO_THINK, O_TOKENIZER, O_STOP, O_CHAT_TEMPLATE, O_SYSTEM, O_IGNORE_EOS, O_TOKENS, O_FORCE,
	O_BATCH, O_DEVICE, O_DUMP, O_TEMP, O_TOP_K, O_TOP_P, O_VERIFY, O_ROUND_BF16, O_STATS, O_PDL, O_NO_LT, O_BENCH,
	O_BENCH_PROMPT, O_PROFILE, O_PROFILE_TOP, O_PROFILE_EAGER, O_BW, O_TIMEOUT, O_WEIGHTS, O_VERSION, O_JSON, O_HOST,
	O_PORT, O_MAX_SEQS, O_BATCHED, O_PREFILL_ALONE, O_MAX_QUEUE, O_API_KEY, O_MODEL_NAME, O_UBATCH, O_DECODE, O_L2_PREFETCH
};
static const struct option long_opts[] = {
	{"help", no_argument, 0, 'h'}, {"version", no_argument, 0, O_VERSION}, {"model", required_argument, 0, 'm'},
	{"prompt", required_argument, 0, 'p'}, {"file", required_argument, 0, 'f'},
	{"chat", no_argument, 0, O_CHAT}, {"conversation", no_argument, 0, O_CHAT}, {"no-think", no_argument, 0, O_NO_THINK},
	{"tokenizer", required_argument, 0, O_TOKENIZER}, {"stop", required_argument, 0, O_STOP},
	{"chat-template", required_argument, 0, O_CHAT_TEMPLATE}, {"chat-template-file", required_argument, 0, O_CHAT_TEMPLATE},
	{"system", required_argument, 0, O_SYSTEM}, {"system-prompt", required_argument, 0, O_SYSTEM},
	{"ignore-eos", no_argument, 0, O_IGNORE_EOS}, {"tokens", required_argument, 0, O_TOKENS},
	{"force", required_argument, 0, O_FORCE}, {"batch", required_argument, 0, O_BATCH},
	{"max-tokens", required_argument, 0, 'n'}, {"n-predict", required_argument, 0, 'n'},
	{"device", required_argument, 0, O_DEVICE}, {"max-seq", required_argument, 0, 'c'},
	{"ctx-size", required_argument, 0, 'c'}, {"dump-logits", required_argument, 0, O_DUMP},
	{"temp", required_argument, 0, O_TEMP}, {"temperature", required_argument, 0, O_TEMP},
	{"top-k", required_argument, 0, O_TOP_K}, {"top-p", required_argument, 0, O_TOP_P},
	{"seed", required_argument, 0, 's'}, {"threads", required_argument, 0, 't'},
	{"verify", no_argument, 0, O_VERIFY}, {"round-bf16", no_argument, 0, O_ROUND_BF16},
	{"stats", no_argument, 0, O_STATS}, {"pdl", no_argument, 0, O_PDL}, {"no-cublaslt", no_argument, 0, O_NO_LT}, {"bench", no_argument, 0, O_BENCH},
	{"bench-prompt", required_argument, 0, O_BENCH_PROMPT}, {"profile", no_argument, 0, O_PROFILE},
	{"profile-top", required_argument, 0, O_PROFILE_TOP}, {"profile-eager", no_argument, 0, O_PROFILE_EAGER},
	{"bw", required_argument, 0, O_BW}, {"timeout", required_argument, 0, O_TIMEOUT},
	{"weights", required_argument, 0, O_WEIGHTS}, {"json", no_argument, 0, O_JSON},
	{"ubatch-size", required_argument, 0, O_UBATCH}, {"decode", required_argument, 0, O_DECODE},
	{"l2-prefetch", required_argument, 0, O_L2_PREFETCH},
	{"host", required_argument, 0, O_HOST},
	{"port", required_argument, 0, O_PORT}, {"max-seqs", required_argument, 0, O_MAX_SEQS},
	{"max-num-seqs", required_argument, 0, O_MAX_SEQS}, {"parallel", required_argument, 0, O_MAX_SEQS},
	{"max-model-len", required_argument, 0, 'c'}, {"max-num-batched-tokens", required_argument, 0, O_BATCHED},
	{"max-queue", required_argument, 0, O_MAX_QUEUE}, {"prefill-alone", required_argument, 0, O_PREFILL_ALONE},
	{"api-key", required_argument, 0, O_API_KEY},
	{"model-name", required_argument, 0, O_MODEL_NAME}, {"served-model-name", required_argument, 0, O_MODEL_NAME},
	{"alias", required_argument, 0, O_MODEL_NAME}, {0, 0, 0, 0},
};

/* All of f, NUL-terminated (*n bytes before the NUL), or the end of the run; what names f in messages. */
static char *read_all(FILE *f, size_t *n, const char *what)
{
	size_t cap = 4096, k = 0;
	char *b = malloc(cap + 1);
	for (size_t r; b && (r = fread(b + k, 1, cap - k, f)) > 0;)
		if ((k += r) == cap && !(b = realloc(b, (cap *= 2) + 1)))
			break;
	if (!b)
		fail("out of memory reading %s", what);
	if (ferror(f))
		fail("%s: read failed: %s", what, strerror(errno));
	b[k] = 0;
	*n = k;
	return b;
}

/* The prompt of -f FILE, kept as -p TEXT would be (the file's bytes, read now). */
static const char *read_file_prompt(const char *path)
{
	char err[600];
	int fd = rfile_open(path); /* a regular file only: a FIFO would block for ever */
	FILE *f = fd >= 0 ? fdopen(fd, "rb") : NULL;
	if (!f) {
		rfile_err(path, err, sizeof err);
		fail("-f %s", err);
	}
	size_t k;
	char *b = read_all(f, &k, path);
	fclose(f);
	if (memchr(b, 0, k))
		fail("-f %s: the file holds a NUL byte; a prompt is text", path);
	b[k] = 0;
	return b; /* lives until exit, like argv */
}

/* One option's effect on a (code from long_opts or a short option, v its value). */
static void take_opt(Args *a, int c, const char *v, const char *name)
{
	switch (c) {
	case 'h': fputs(usage, stdout); exit(0);
	case O_VERSION: printf("glmrun %s (plan format %d)\n", GLM_VERSION, PLAN_VERSION); exit(0);
	case 'm':
		if (a->plan && strcmp(a->plan, v))
			fail("two plans given: '%s' and '%s'", a->plan, v);
		a->plan = v;
		break;
	case 'f': /* the file's text is the prompt */
		v = read_file_prompt(v);
		/* fall through */
	case 'p':
		a->prompt = v;
		if (a->nprompts < BATCH_MAX)
			a->prompts[a->nprompts++] = v;
		break;
	case O_CHAT: a->chat = 1; break;
	case O_NO_THINK: a->no_think = 1; break;
	case O_TOKENIZER: a->tokenizer = v; break;
	case O_STOP: a->stop = v; break;
	case O_CHAT_TEMPLATE: a->chat_template = v; break;
	case O_SYSTEM: a->system = v; break;
	case O_IGNORE_EOS: a->ignore_eos = 1; break;
	case O_TOKENS:
		a->tokens = v;
		if (a->nprompts < BATCH_MAX)
			a->prompts[a->nprompts++] = v;
		break;
	case O_FORCE: free(a->force); a->force = parse_tokens(v, "--force", &a->nforce); break;
	case O_BATCH: a->batch = (int)parse_long(v, "--batch", 1, BATCH_MAX); break;
	case 'n': a->n = parse_long(v, name, 1, 1 << 24), a->n_set = 1; break;
	case O_DEVICE: a->device = v; break;
	case 'c': a->max_seq = parse_long(v, name, 1, 1 << 24); break;
	case O_DUMP: a->dump = v; break;
	case O_WEIGHTS: a->weights = v; break;
	case O_TEMP: a->temp = (float)parse_double(v, name, 0, 100); break;
	case O_TOP_K: a->top_k = (int)parse_long(v, "--top-k", 0, 1 << 24); break;
	case O_TOP_P: a->top_p = (float)parse_double(v, "--top-p", 0, 1); break;
	case 's': a->seed = (uint32_t)parse_long(v, "--seed", 0, UINT32_MAX); break;
	case 't':
		parse_long(v, "--threads", 1, 256);
		setenv("GLMRUN_THREADS", v, 1);
		break;
	case O_TIMEOUT: a->timeout = parse_double(v, "--timeout", 0.001, 1e6); break;
	case O_VERIFY: a->verify = 1; break;
	case O_ROUND_BF16: a->round_bf16 = 1; break;
	case O_STATS: a->stats = 1; break;
	case O_PDL: a->pdl = 1; break;
	case O_NO_LT: a->no_lt = 1; break;
	case O_DECODE:
		if (strcmp(v, "persistent") && strcmp(v, "kernels"))
			fail("--decode %s: expected persistent or kernels", v);
		a->decode = strcmp(v, "persistent") ? GPU_DECODE_KERNELS : GPU_DECODE_PERSISTENT;
		break;
	case O_L2_PREFETCH: {
		int64_t bytes = (int64_t)(parse_double(v, "--l2-prefetch", 0, 1 << 20) * 1024);
		a->l2_prefetch = bytes > 0 ? bytes : -1; /* 0 in GpuOpts is the default, so "none" is -1 */
		break;
	}
	case O_BENCH: a->bench = 1; break;
	case O_PROFILE: a->profile = 1; break;
	case O_PROFILE_EAGER: a->profile = a->profile_eager = 1; break;
	case O_BENCH_PROMPT: a->bench_prompt = parse_long(v, "--bench-prompt", 1, 1 << 20); break;
	case O_PROFILE_TOP: a->profile_top = (int)parse_long(v, "--profile-top", 1, 1 << 20); break;
	case O_BW: a->bw = parse_double(v, "--bw", 1e-3, 1e6); break;
	case O_JSON: a->json = 1; break;
	case O_UBATCH: a->ubatch = parse_long(v, "--ubatch-size", 1, 1 << 24); break;
	case O_HOST: a->host = v; break;
	case O_PORT: a->port = (int)parse_long(v, "--port", 1, 65535); break;
	case O_MAX_SEQS: a->max_seqs = (int)parse_long(v, name, 1, ENGINE_MAX_SLOTS - 1); break;
	case O_BATCHED: a->batch_tokens = parse_long(v, name, 1, 1 << 20); break;
	case O_MAX_QUEUE: a->max_queue = (int)parse_long(v, name, 1, 1 << 20); break;
	case O_PREFILL_ALONE:
		if (strcmp(v, "auto") && strcmp(v, "on") && strcmp(v, "off"))
			fail("--prefill-alone takes auto, on or off, not '%s'", v);
		a->prefill_alone = !strcmp(v, "on") ? 1 : !strcmp(v, "off") ? 2 : 0;
		break;
	case O_API_KEY: a->api_key = v; break;
	case O_MODEL_NAME: a->model_name = v; break;
	}
}

/* The option's name as the user wrote it, for messages ("-n", "--max-tokens", ...). */
static const char *opt_name(const char *arg, char *name, size_t len)
{
	size_t k = strcspn(arg, "=");
	snprintf(name, len, "%.*s", (int)(k < len ? k : len - 1), arg);
	return name;
}

/* The combinations that make no sense, refused before anything is loaded. */
static void check_args(Args *a)
{
	if (!a->plan)
		fail("no plan given (run 'glmrun --help')");
	if (a->device && strcmp(a->device, "cpu") && strcmp(a->device, "cuda"))
		fail("--device must be cpu or cuda, got '%s'", a->device);
	int serve_opt = a->host || a->port || a->max_seqs || a->batch_tokens || a->prefill_alone || a->max_queue || a->api_key ||
	                a->model_name;
	if (a->serve) {
		if (a->prompt || a->tokens || a->chat || a->batch || a->bench || a->profile || a->verify || a->force || a->dump ||
		    a->system || a->n_set)
			fail("glmrun serve takes its prompts over HTTP; drop -p/--tokens/--chat/--system/-n/--batch/--bench/"
			     "--verify/--force/--dump-logits");
		return;
	}
	if (serve_opt)
		fail("--host, --port, --max-seqs, --max-num-batched-tokens, --max-queue, --api-key and --model-name go with "
		     "'glmrun serve PLAN'");
	if (a->bench || a->profile) {
		if (a->tokens || a->prompt || a->chat)
			fail("--bench and --profile make their own random prompt (--bench-prompt N); drop -p/--tokens/--chat");
		if (a->verify || a->dump || a->round_bf16 || a->force)
			fail("--bench and --profile do not combine with --verify, --dump-logits, --round-bf16 or --force");
		if (a->json && a->profile)
			fail("--json prints --bench's block; --profile's tables are text (drop one)");
		if (!a->n)
			a->n = 16;
		return;
	}
	if (a->bench_prompt || a->bw > 0 || a->profile_top || a->json)
		fail("--bench-prompt, --bw, --profile-top and --json go with --bench or --profile");
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

/* The command line into a: getopt_long (--opt VALUE, --opt=VALUE, options anywhere), then check_args. */
static void parse(Args *a, int argc, char **argv)
{
	*a = (Args){.top_p = 1.0f, .timeout = 60};
	if (argc > 1 && !strcmp(argv[1], "serve")) /* the server mode: argv[1] plays the program name */
		a->serve = 1, argc--, argv++;
	/* llama.cpp's one-dash long names (-cnv, -ub), which getopt would read as -c nv and -u b */
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "-cnv"))
			argv[i] = "--chat";
		else if (!strcmp(argv[i], "-ub"))
			argv[i] = "--ubatch-size";
	opterr = 0;
	char name[64];
	for (;;) {
		int at = optind, c = getopt_long(argc, argv, "+:hm:p:f:n:c:s:t:", long_opts, NULL);
		if (c == -1) {
			if (optind >= argc)
				break;
			/* "+": stop at the first operand; take it as the plan and go on after it */
			const char *s = argv[optind++];
			if (a->plan && strcmp(a->plan, s))
				fail("unexpected argument '%s'", s);
			a->plan = s;
			continue;
		}
		if (c == ':')
			fail("missing value after %s", opt_name(argv[at], name, sizeof name));
		if (c == '?')
			fail("unknown option %s (run 'glmrun --help')", argv[at]);
		take_opt(a, c, optarg, opt_name(argv[at], name, sizeof name));
	}
	check_args(a);
}

/* A GPU failure. When a rank may still be blocked (the watchdog fired, or one rank failed while the
** others wait in a collective it never joined), the process ends with _exit: exit's clean-up would wait
** on those ranks' threads and GPUs. */
static _Noreturn void fail_gpu(const Engine *e, const char *err)
{
	if (engine_stuck(e)) {
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
static int route_tie(const Graph *g, int i, float **out, float **ref, const Engine *cpu, const unsigned char *stored,
                     int T)
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
	int groups = A_moe_route_groups(n) ? (int)A_moe_route_groups(n) : 1;
	ref_moe_route(idx, out[src], n->nin > 1 ? engine_cpu_f32(cpu, n->in[1]) : NULL, T, (int)E, (int)A_moe_route_k(n),
	              groups, A_moe_route_topk_groups(n) ? (int)A_moe_route_topk_groups(n) : groups,
	              (int)A_moe_route_sigmoid(n));
	int same = 1, diff = 0;
	for (int t = 0; t < T; t++) {
		int d = 0;
		for (int64_t j = 0; j < k; j++) {
			size_t at = (size_t)t * (size_t)k + (size_t)j;
			same &= out[i][at] == (float)idx[at];
			d |= out[i][at] != ref[i][at];
		}
		diff += d;
	}
	free(idx);
	return same ? diff : -1;
}

/*
** A node that takes routed expert ids (moe_weights, moe_ffn) whose ids differ from the CPU's after a near
** tie: its output then differs from the CPU run's by whole experts, which says nothing of its kernel. Held
** instead to the reference of the GPU's own inputs (as route_tie holds the router): returns that rel-L2,
** or -1 where the ids agree or an input was never stored.
*/
static double routed_local(const Graph *g, int i, float **out, float **ref, const Engine *cpu,
                           const unsigned char *stored, int T)
{
	const Node *n = &g->node[i];
	if (n->op != OP_MOE_WEIGHTS && n->op != OP_MOE_FFN)
		return -1;
	int src = n->in[0], ids = n->in[1];
	int64_t k = g->node[ids].dim[1];
	size_t cnt = (size_t)T * (size_t)k;
	if (!stored[src] || !stored[ids] || (n->op == OP_MOE_FFN && !stored[n->in[2]]))
		return -1;
	int moved = 0;
	for (size_t j = 0; j < cnt; j++)
		moved |= out[ids][j] != ref[ids][j];
	if (!moved)
		return -1;
	int32_t *idx = malloc(cnt * sizeof *idx);
	size_t ny = (size_t)T * (size_t)n->dim[1];
	float *y = malloc(ny * sizeof *y);
	if (!idx || !y)
		fail("out of memory");
	for (size_t j = 0; j < cnt; j++)
		idx[j] = (int32_t)out[ids][j];
	if (n->op == OP_MOE_WEIGHTS) {
		ref_moe_weights(y, out[src], idx, T, (int)g->node[src].dim[1], (int)k, (int)A_moe_weights_sigmoid(n),
		                (int)A_moe_weights_norm(n), (float)A_moe_weights_scale(n));
	} else {
		const float *ga = engine_cpu_f32(cpu, n->in[3]), *up = engine_cpu_f32(cpu, n->in[4]),
		            *dn = engine_cpu_f32(cpu, n->in[5]);
		if (!ga || !up || !dn) {
			free(idx), free(y);
			return -1;
		}
		const Node *w = &g->node[n->in[3]];
		ref_moe_ffn(y, out[src], idx, out[n->in[2]], ga, up, dn, T, (int)g->node[src].dim[1], (int)w->dim[1],
		            (int)w->dim[0], (int)k);
	}
	double e = rel_err(out[i], y, ny);
	free(idx), free(y);
	return e;
}

/*
** --verify: the same tokens through the GPU and the CPU reference, every node compared; one line per
** layer with its worst node. The tolerance is the GPU contract on the logits (1e-4 for f32, 2e-2 for
** bf16): the outputs must meet it, and an intermediate node fails only beyond 10x it (rounding grows
** inside a layer and shrinks again at the norms), which still catches any broken kernel; between the
** two it is reported.
*/
static int verify_run(const Graph *g, Engine *gpu, Engine *cpu, const int32_t *prompt, int np, double tol)
{
	char err[1024];
	float **out = calloc((size_t)g->n, sizeof *out), **ref = calloc((size_t)g->n, sizeof *ref);
	int nl = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].layer + 2 > nl)
			nl = g->node[i].layer + 2;
	double *worst = calloc((size_t)nl, sizeof *worst);
	int *wnode = calloc((size_t)nl, sizeof *wnode);
	int32_t *pos = malloc(sizeof *pos * (size_t)np);
	if (!out || !ref || !worst || !wnode || !pos)
		fail("out of memory");
	for (int i = 0; i < g->n; i++)
		if (g->node[i].kind == VK_ACT && (!(out[i] = malloc(sizeof(float) * engine_numel(cpu, i, np))) ||
		                                  !(ref[i] = malloc(sizeof(float) * engine_numel(cpu, i, np)))))
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
		if (engine_values(cpu, tk, pos, T, ref, err, sizeof err))
			fail("%s", err);
		if (engine_values(gpu, tk, pos, T, out, err, sizeof err))
			fail_gpu(gpu, err);
		for (int i = 0; i < nl; i++)
			worst[i] = -1, wnode[i] = -1;
		int nf_gpu = -1, nf_cpu = -1; /* the first node holding a NaN or Inf, on each side */
		cuda_touched(g, T, 1, stored); /* engine_values: one sequence at positions 0.. (or np) */
		for (int i = 0; i < g->n; i++) {
			const Node *n = &g->node[i];
			if (n->kind != VK_ACT)
				continue;
			size_t cnt = engine_numel(cpu, i, T);
			double e;
			if (n->dtype == DT_I32) {
				e = 0;
				for (size_t k = 0; k < cnt; k++)
					e += out[i][k] != ref[i][k];
			} else
				e = rel_err(out[i], ref[i], cnt);
			/* A value formed inside a fused kernel (a SwiGLU or norm in a decode GEMV) is never stored. */
			if (!stored[i])
				continue;
			if (n->dtype == DT_F32 && nf_gpu < 0 && !all_finite(out[i], cnt))
				nf_gpu = i;
			if (n->dtype == DT_F32 && nf_cpu < 0 && !all_finite(ref[i], cnt))
				nf_cpu = i;
			int tie = n->op == OP_MOE_ROUTE && e > 0 ? route_tie(g, i, out, ref, cpu, stored, T) : -1;
			if (tie >= 0) {
				printf("  %s %%%d (%s:%d) %d token%s routed differently at a near tie: the GPU's ids are the "
				       "reference routing of its own scores\n", op_table[n->op].name, i, n->src ? n->src : "?",
				       n->line, tie, tie == 1 ? "" : "s");
				continue;
			}
			double local = e > 0 ? routed_local(g, i, out, ref, cpu, stored, T) : -1;
			if (local >= 0) {
				printf("  %s %%%d (%s:%d) takes experts moved by a near tie: rel-L2 %.3g against the reference of "
				       "its own inputs%s\n", op_table[n->op].name, i, n->src ? n->src : "?", n->line, local,
				       local <= 10 * tol ? "" : " ABOVE TOLERANCE");
				bad |= !(local <= 10 * tol);
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
		tok[0] = argmax_row(ref[g->out[0]] + (size_t)(T - 1) * (size_t)V, V);
	}
	printf("verify: %s (tolerance %g)\n", bad ? "FAILED" : "passed", tol);
	for (int i = 0; i < g->n; i++)
		free(out[i]), free(ref[i]);
	free(out), free(ref), free(worst), free(wnode), free(pos), free(stored);
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
	return read_all(stdin, n, "standard input");
}

/* At exit: output lost on stdout (a full disk, a closed descriptor) is an error, not status 0. */
static void close_stdout(void)
{
	if (out_close_stdout()) {
		fprintf(stderr, "glmrun: standard output: write failed: %s\n", strerror(errno));
		_exit(1);
	}
}

/* FNV-1a over n bytes, continuing h: the cache key of -m WEIGHTS. */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const unsigned char *)p)[i]) * 0x100000001b3ULL;
	return h;
}

/* Whether path is weights rather than a plan: a directory (a Hugging Face checkpoint) or a GGUF file. */
static int is_weights(const char *path)
{
	struct stat st;
	if (stat(path, &st))
		return 0;
	if (S_ISDIR(st.st_mode))
		return 1;
	char magic[4] = {0};
	FILE *f = S_ISREG(st.st_mode) ? fopen(path, "rb") : NULL;
	size_t got = f ? fread(magic, 1, 4, f) : 0;
	if (f)
		fclose(f);
	return got == 4 && !memcmp(magic, "GGUF", 4);
}

/*
** glmrun -m WEIGHTS: the plan glmc makes of the weights (the model file picked by their architecture),
** compiled once into the cache folder ($GLMC_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/glmc, plans/) and
** reused while the weights and glmc are unchanged (the key: their paths, sizes and times). glmc is the
** one beside this glmrun.
*/
static const char *cached_plan(const char *weights)
{
	char self[4096], glmc[4096], real[4096], dir[4096];
	ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
	if (k <= 0)
		fail("-m %s: cannot find glmc beside glmrun (/proc/self/exe): %s", weights, strerror(errno));
	self[k] = 0;
	char *slash = strrchr(self, '/');
	snprintf(glmc, sizeof glmc, "%.*s/glmc", (int)(slash ? slash - self : 1), slash ? self : ".");
	struct stat sw, sg, sc;
	if (!realpath(weights, real) || stat(real, &sw))
		fail("-m %s: %s", weights, strerror(errno));
	if (stat(glmc, &sg))
		fail("-m %s: the weights need compiling, and %s is missing: %s", weights, glmc, strerror(errno));
	uint64_t h = fnv(0xcbf29ce484222325ULL, real, strlen(real));
	int64_t fields[4] = {(int64_t)sw.st_size, (int64_t)sw.st_mtime, (int64_t)sg.st_size, (int64_t)sg.st_mtime};
	h = fnv(h, fields, sizeof fields);
	if (S_ISDIR(sw.st_mode)) { /* a checkpoint directory: its config too */
		char cfg[4200];
		snprintf(cfg, sizeof cfg, "%s/config.json", real);
		if (!stat(cfg, &sc)) {
			int64_t c[2] = {(int64_t)sc.st_size, (int64_t)sc.st_mtime};
			h = fnv(h, c, sizeof c);
		}
	}
	const char *env = getenv("GLMC_CACHE"), *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
	if (env && *env)
		snprintf(dir, sizeof dir, "%s/plans", env);
	else if (xdg && *xdg)
		snprintf(dir, sizeof dir, "%s/glmc/plans", xdg);
	else
		snprintf(dir, sizeof dir, "%s/.cache/glmc/plans", home ? home : ".");
	const char *base = strrchr(real, '/');
	char *plan = malloc(strlen(dir) + strlen(base ? base : real) + 32);
	if (!plan)
		fail("out of memory");
	sprintf(plan, "%s/%s-%016llx.plan", dir, base ? base + 1 : real, (unsigned long long)h);
	if (!access(plan, R_OK))
		return plan;
	for (char *q = dir + 1; *q; q++) /* mkdir -p */
		if (*q == '/') {
			*q = 0;
			mkdir(dir, 0755);
			*q = '/';
		}
	if (mkdir(dir, 0755) && errno != EEXIST)
		fail("-m %s: cannot create the plan cache %s: %s", weights, dir, strerror(errno));
	fprintf(stderr, "glmrun: compiling %s into %s (once; later runs reuse it)\n", weights, plan);
	pid_t pid = fork();
	if (pid == 0) {
		execl(glmc, glmc, "compile", "--weights", real, "-o", plan, (char *)NULL);
		fprintf(stderr, "glmrun: cannot run %s: %s\n", glmc, strerror(errno));
		_exit(127);
	}
	int st = 0;
	if (pid < 0 || waitpid(pid, &st, 0) < 0)
		fail("-m %s: cannot run %s: %s", weights, glmc, strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail("-m %s: glmc could not compile it (its error is above)", weights);
	return plan;
}

/* Where the plan runs: --device, else the GPU when the plan has kernels and a GPU is present. */
static int want_cuda(const Args *a, const Graph *g)
{
	return a->device ? !strcmp(a->device, "cuda") : (g->cuda.source && gpu_present());
}

/* The weights path: --weights, else the one the plan was compiled with. */
static const char *weights_of(const Args *a, const Graph *g)
{
	const char *w = a->weights ? a->weights : graph_meta(g, "weights.path");
	if (!w)
		fail("%s: the plan names no weights; pass --weights PATH", a->plan);
	return w;
}

/* The engine options of the command line (device, sampling, GPU switches); the caller sets the sizes. */
static EngineOpts engine_opts(const Args *a, int cuda)
{
	return (EngineOpts){.cuda = cuda, .slots = 1, .temp = a->temp, .top_k = a->top_k, .top_p = a->top_p,
	                    .seed = a->seed, .pdl = a->pdl, .no_lt = a->no_lt, .decode = a->decode, .l2_prefetch = a->l2_prefetch, .timeout = a->timeout, .progress = cuda && isatty(2),
	                    .keep_logits = a->dump != NULL, .round_bf16 = a->round_bf16 && !cuda};
}

/* Said once before a run of a plan compiled with --random-weights (after the checks of the command line). */
static void note_random(const Graph *g)
{
	const char *wf = graph_meta(g, "weights.format"), *ty = graph_meta(g, "weights.random_type");
	if (wf && !strcmp(wf, "random"))
		fprintf(stderr, "glmrun: note: RANDOM WEIGHTS (%s): this plan was compiled with --random-weights; its "
		        "tokens mean nothing\n", ty ? ty : "?");
}

/* Prompt tokens one prefill step evaluates: --ubatch-size, else 2048, never more than the longest prompt (np).
** Each step is one command under the GPU watchdog and sizes the activation buffers, so a long prompt runs in
** steps of bounded time and memory (bench/NOTES.md entry 55: a 16K-token prompt in one pass outlived it).
** DSA plans too: a step's indexer ranks the rows the step ends with, so the split can change only which of
** several rows of exactly equal score a query takes (torch.topk's choice depends on how many it ranks);
** the rows themselves are the same, and one pass of a long prompt does not fit (bench/NOTES.md entry 64). */
static int64_t prefill_chunk(const Args *a, int64_t np)
{
	int64_t c = a->ubatch ? a->ubatch : 2048;
	return c < np ? c : np;
}

/* Open an engine or end the run with its error. */
static Engine *open_engine(const Graph *g, const char *weights, const EngineOpts *o)
{
	Engine *e;
	char err[1024];
	if (engine_open(&e, g, weights, o, err, sizeof err))
		fail_gpu(e, err);
	return e;
}

/* --bench / --profile (runtime/cli/bench.c makes its own prompt and prints one block). */
static int run_bench(const Args *a, const Graph *g)
{
	int cuda = want_cuda(a, g);
	if (a->profile && !cuda)
		fail("--profile times the GPU's kernels; it needs --device cuda (and a GPU)");
	long np = a->bench_prompt ? a->bench_prompt : 128;
	BenchOpts bo = {.profile = a->profile, .profile_eager = a->profile_eager, .prompt = np, .chunk = prefill_chunk(a, np),
	                .ub = a->ubatch ? a->ubatch : 2048,
	                .steps = a->n_set ? a->n : 64, .warmup = 3, .profile_steps = 10,
	                .profile_top = a->profile_top ? a->profile_top : 30, .bw_gbps = a->bw, .seed = a->seed,
	                .batch = a->batch ? a->batch : 1, .json = a->json};
	EngineOpts eo = engine_opts(a, cuda);
	return bench_main(g, a->plan, weights_of(a, g), &eo, &bo);
}

/* The tokenizer for -p / --chat: --tokenizer (GGUF, HF directory or tokenizer.json), else the weights'.
** glmrun serve runs without one (NULL: token-id prompts only) where the weights have none. */
static Tok *load_tokenizer(const Args *a, const Graph *g)
{
	char err[1024];
	const char *src = a->tokenizer ? a->tokenizer : graph_meta(g, "weights.path");
	const char *wf = graph_meta(g, "weights.format");
	int chat = a->chat && !a->prompt;
	if (a->serve && !a->tokenizer && ((wf && !strcmp(wf, "random")) || !src))
		return NULL;
	if (!a->tokenizer && wf && !strcmp(wf, "random"))
		fail("%s: this plan has random weights and no tokenizer; give --tokenizer PATH or use --tokens",
		     chat ? "--chat" : "-p");
	if (!src)
		fail("-p: the plan names no weights to read a tokenizer from; give --tokenizer PATH");
	size_t tl = strlen(src);
	Tok *tk = NULL;
	Weights tw;
	if (tl > 5 && !strcmp(src + tl - 5, ".json")) {
		if (tok_open_json(&tk, src, err, sizeof err))
			fail("%s", err);
	} else {
		int bad = weights_open(&tw, src, err, sizeof err);
		if (!bad && (bad = tok_open(&tk, &tw, err, sizeof err)))
			weights_close(&tw);
		if (bad && a->serve) {
			fprintf(stderr, "glmrun serve: no tokenizer (%s): prompts as token ids only\n", err);
			return NULL;
		}
		if (bad)
			fail("%s", err);
		weights_close(&tw);
	}
	return tk;
}

/* -p TEXT (in the chat format when chat options are given) as token ids. */
static int32_t *encode_prompt(const Args *a, const Tok *tk, ChatFmt *cf, int templ, int *np)
{
	char err[1024];
	size_t tn, nid = 1;
	int32_t *prompt = NULL;
	char *text = read_prompt(a->prompt, &tn);
	if (templ) {
		char *t = chat_prompt(cf, a->system, text, &tn, err, sizeof err);
		free(text);
		if (!(text = t))
			fail("-p: %s", err);
	}
	if (tok_encode(tk, text, tn, !templ, 1, &prompt, &nid))
		fail("-p: out of memory encoding the prompt");
	free(text);
	if (!nid)
		fail("-p: the prompt encodes to no tokens");
	*np = (int)nid;
	return prompt;
}

/* Every id below the vocabulary size V. */
static void check_ids(const char *what, const int32_t *ids, int n, int64_t V)
{
	for (int i = 0; i < n; i++)
		if (ids[i] >= V)
			fail("%s: token id %d is outside the vocabulary [0, %lld)", what, ids[i], (long long)V);
}

/* The vocabulary: the 'logits' output's columns (which must be [T, vocab]). */
static int64_t vocab_of(const Args *a, const Graph *g)
{
	int logits = -1;
	for (int i = 0; i < g->nout; i++)
		if (!strcmp(g->out_name[i], "logits"))
			logits = g->out[i];
	if (logits < 0)
		fail("%s: the plan has no output named 'logits'", a->plan);
	const Node *L = &g->node[logits];
	if (L->ndim != 2 || L->dim[0] != DIM_T || L->dim[1] <= 0)
		fail("%s: output 'logits' must be [T, vocab]", a->plan);
	return L->dim[1];
}

/*
** --batch: every prompt (or the one prompt, shared) encoded, checked and run through batch_run with
** caches for all sequences; -n is per sequence and clipped where a context would overflow.
*/
static int run_batch(const Args *a, const Graph *g, const Tok *tk)
{
	char err[1024];
	int n = a->batch;
	int32_t *ids[BATCH_MAX];
	int np[BATCH_MAX], maxp = 0, sum = 0;
	int64_t V = vocab_of(a, g);
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
		char what[48];
		snprintf(what, sizeof what, "--tokens: prompt %d", i);
		check_ids(what, ids[i], np[i], V);
		maxp = np[i] > maxp ? np[i] : maxp, sum += np[i];
	}
	long max_seq = a->max_seq ? a->max_seq : maxp + a->n - 1;
	const char *ctx = graph_meta(g, "n_ctx");
	if (ctx && max_seq > atol(ctx))
		fail("--max-seq %ld is more than the model's context of %s", max_seq, ctx);
	BatchRun b = {.nseq = n, .prompt = (const int32_t *const *)ids, .np = np, .n = a->n, .max_seq = max_seq, .tk = tk,
	              .stop = a->stop, .ignore_eos = a->ignore_eos, .dump = a->dump, .stop_flag = &interrupted};
	int cuda = want_cuda(a, g);
	EngineOpts eo = engine_opts(a, cuda);
	eo.slots = n, eo.chunk = prefill_chunk(a, sum), eo.max_seq = max_seq; /* prompts may share a step */
	note_random(g);
	double t0 = now();
	Engine *e = open_engine(g, weights_of(a, g), &eo);
	double t1 = now();
	if (tk)
		signal(SIGINT, on_sigint);
	if (batch_run(e, &b, err, sizeof err))
		fail_gpu(e, err);
	double t2 = now();
	if (a->stats) {
		EngineStats s;
		engine_stats(e, &s);
		fprintf(stderr, "stats: device %s, batch %d, %ld positions per sequence\n", cuda ? "cuda" : "cpu", n, max_seq);
		fprintf(stderr, "stats: load %.3f s, prompts and decode %.3f s\n", t1 - t0, t2 - t1);
		if (cuda) {
			fprintf(stderr, "stats: memory weights %.1f MiB, activations %.1f MiB, kv cache %.1f MiB\n",
			        (double)s.weight_bytes / (1 << 20), (double)s.act_bytes / (1 << 20), (double)s.cache_bytes / (1 << 20));
			fprintf(stderr, "stats: decode steps %ld, graph launches %ld (%.2f per step)\n", s.decode_steps,
			        s.graph_launches, s.decode_steps ? (double)s.graph_launches / (double)s.decode_steps : 0.0);
			fprintf(stderr, "stats: decode_path: %s\n", s.decode_path);
		}
	}
	engine_close(e);
	for (int i = 0; i < n; i++)
		free(ids[i]);
	return 0;
}

/* The cache positions a one-sequence run needs (the prompt, -n tokens, --verify's step), checked against
** the model's context and --max-seq; --max-seq itself when given. */
static long positions(const Args *a, const Graph *g, int np)
{
	long need = np + a->n - 1 + a->verify;
	const char *ctx = graph_meta(g, "n_ctx"), *forced = a->force ? " (--force)" : "";
	if (ctx && need > atol(ctx))
		fail("prompt of %d tokens + %ld generated%s needs %ld positions, more than the model's context of %s", np, a->n,
		     forced, need, ctx);
	long max_seq = a->max_seq ? a->max_seq : need;
	if (need > max_seq)
		fail("prompt of %d tokens + %ld generated%s needs %ld positions, more than --max-seq %ld", np, a->n, forced, need,
		     max_seq);
	return max_seq;
}

/* --verify: the prompt and one decode step on the GPU and on the CPU reference, node by node. */
static int run_verify(const Args *a, Graph *g, const int32_t *prompt, int np)
{
	if (!want_cuda(a, g))
		fail("--verify compares the GPU with the CPU reference; it needs --device cuda");
	/* Every node's value is needed, which the plan's shared arena overwrites once a node is dead: both
	** sides run with one buffer per value. */
	g->mem.planned = 0;
	const char *w = weights_of(a, g);
	EngineOpts co = engine_opts(a, 0), go = engine_opts(a, 1);
	co.chunk = go.chunk = np, co.max_seq = go.max_seq = positions(a, g, np);
	co.round_bf16 = a->round_bf16, co.nan_ok = 1;
	note_random(g);
	Engine *cpu = open_engine(g, w, &co), *gpu = open_engine(g, w, &go);
	int bad = verify_run(g, gpu, cpu, prompt, np, g->cuda.act == DT_BF16 ? 2e-2 : 1e-4);
	engine_close(gpu);
	engine_close(cpu);
	return bad;
}

/* --chat: a conversation on stdin. Its context unless --max-seq says: on the GPU the model's window, or
** the most positions that fit in GPU memory (at least 512, said on stderr when less than the window); on
** the CPU, whose caches are plain memory, the window up to 4096. */
static int run_chat(const Args *a, const Graph *g, const Tok *tk, const ChatFmt *cf)
{
	char err[1024];
	const char *ctx = graph_meta(g, "n_ctx");
	long window = ctx && atol(ctx) > 0 ? atol(ctx) : 4096;
	if (ctx && a->max_seq > atol(ctx))
		fail("--max-seq %ld is more than the model's context of %s", a->max_seq, ctx);
	EngineOpts eo = engine_opts(a, want_cuda(a, g));
	long max_seq = a->max_seq ? a->max_seq : eo.cuda || window < 4096 ? window : 4096;
	if (eo.cuda && !a->max_seq)
		eo.fit_min = window < 512 ? window : 512;
	eo.max_seq = max_seq, eo.chunk = a->ubatch ? a->ubatch : max_seq < 512 ? max_seq : 512; /* a turn's steps */
	note_random(g);
	Engine *e = open_engine(g, weights_of(a, g), &eo);
	if (engine_max_seq(e) < max_seq)
		fprintf(stderr, "glmrun: chat context %lld positions: the model's window of %ld does not fit in GPU memory\n",
		        (long long)engine_max_seq(e), max_seq);
	max_seq = (long)engine_max_seq(e);
	ChatSession cs = {.e = e, .max_seq = max_seq, .n = a->n, .stop = a->stop, .ignore_eos = a->ignore_eos,
	                  .stats = a->stats, .tk = tk, .fmt = cf, .system = a->system, .sigs = &interrupted};
	int rc = chat_session(&cs, stdin, err, sizeof err);
	if (rc)
		fail_gpu(e, err);
	engine_close(e);
	return 0;
}

/* The streamed answer of text mode: ids on one line (--tokens), or text up to end-of-generation / --stop. */
typedef struct {
	const Tok *tk;
	const ChatFmt *cf;           /* with chat options: its end-of-turn ids end the answer too */
	const char *stop;
	int ignore_eos, done;
	int stopped;                 /* done at the --stop string (else at end-of-generation, or not done) */
	long printed;
	TokStream ts;
	char *said;
	size_t nsaid, cap, shown;
} Answer;

/* Print token id as part of the answer (or end it). */
static void emit(Answer *an, int32_t id)
{
	if (!an->tk) {
		printf(an->printed++ ? " %d" : "%d", id);
		return;
	}
	if (!an->ignore_eos && (tok_is_eog(an->tk, id) || (an->cf && chat_is_eot(an->cf, id)))) {
		an->done = 1;
		return;
	}
	size_t pl;
	const char *piece = tok_stream_put(&an->ts, id, &pl);
	if (piece && pl)
		an->done = an->stopped = say(&an->said, &an->nsaid, &an->cap, &an->shown, piece, pl, an->stop);
}

/* The end of the answer: what the tokenizer and --stop held back. */
static void emit_end(Answer *an)
{
	if (!an->tk)
		return;
	size_t pl;
	const char *rest = tok_stream_flush(&an->ts, &pl);
	if (!an->done && rest && pl)
		an->done = an->stopped = say(&an->said, &an->nsaid, &an->cap, &an->shown, rest, pl, an->stop);
	if (!an->stopped) /* what was held back for --stop, also after end-of-generation */
		say(&an->said, &an->nsaid, &an->cap, &an->shown, "", 0, NULL); /* what was held back for --stop */
	tok_stream_free(&an->ts);
	free(an->said);
}

/* --stats after a text run. */
static void print_stats(const Engine *e, int np, long n, double t0, double t1, double t2)
{
	EngineStats s;
	engine_stats(e, &s);
	fprintf(stderr, "stats: device %s\n", s.cuda ? "cuda" : "cpu");
	fprintf(stderr, "stats: prefill %d tokens in %.3f ms (%.1f tok/s)\n", np, 1e3 * (t1 - t0), np / (t1 - t0));
	if (n > 1)
		fprintf(stderr, "stats: decode %ld steps in %.3f ms (%.3f ms/step, %.1f tok/s)\n", n - 1, 1e3 * (t2 - t1),
		        1e3 * (t2 - t1) / (double)(n - 1), (double)(n - 1) / (t2 - t1));
	if (!s.cuda)
		return;
	if (s.nccl_version)
		fprintf(stderr, "stats: ranks %d (GPUs 0..%d), NCCL %d.%d.%d from %s, peer access %d of %d pairs, %d "
		        "collectives per step; rank 0 made %ld NCCL calls and %ld P2P collectives (up to %ld bytes)\n",
		        s.tp, s.tp - 1, s.nccl_version / 10000, s.nccl_version / 100 % 100, s.nccl_version % 100,
		        s.nccl_path, s.peer_ok, s.peer_pairs, s.collectives_per_step, s.nccl_calls, s.p2p_calls, s.p2p_max);
	else
		fprintf(stderr, "stats: ranks 1, no NCCL (%s)\n", s.nccl_note);
	fprintf(stderr, "stats: gpu %s (sm_%d%d)%s%s\n", s.name, s.cc_major, s.cc_minor,
	        s.recompiled & 1 ? ", kernels recompiled from the plan's source" : "",
	        s.recompiled & 2 ? ", the persistent kernel compiled from the plan's source" : "");
	fprintf(stderr, "stats: memory weights %.1f MiB, activations %.1f MiB, kv cache %.1f MiB; upload %.3f s\n",
	        (double)s.weight_bytes / (1 << 20), (double)s.act_bytes / (1 << 20), (double)s.cache_bytes / (1 << 20),
	        s.upload_s);
	fprintf(stderr, "stats: prefill matmuls %s (%ld calls)\n",
	        s.have_lt ? "through cuBLASLt" : "through glmc's GEMM kernel (cuBLASLt not found)", s.lt_matmuls);
	fprintf(stderr, "stats: decode steps %ld, graph launches %ld (%.2f per step), kernels per step %d, "
	        "programmatic launch %s\n", s.decode_steps, s.graph_launches,
	        s.decode_steps ? (double)s.graph_launches / (double)s.decode_steps : 0.0, s.kernels_per_step,
	        s.pdl ? "on" : "off");
	fprintf(stderr, "stats: decode_path: %s\n", s.decode_path);
}

/* Write rows of logits to --dump-logits, or end the run. */
static void dump_rows(FILE *df, const char *path, const float *rows, size_t cnt)
{
	if (df && fwrite(rows, sizeof(float), cnt, df) != cnt)
		fail("%s: write failed: %s", path, strerror(errno));
}

/* -p / --tokens (and --force): prefill the prompt, then decode up to -n tokens, streaming the answer. */
static int run_text(const Args *a, const Graph *g, const Tok *tk, const ChatFmt *cf, const int32_t *prompt, int np)
{
	char err[1024];
	int64_t V = vocab_of(a, g);
	EngineOpts eo = engine_opts(a, want_cuda(a, g));
	eo.chunk = prefill_chunk(a, np), eo.max_seq = positions(a, g, np);
	note_random(g);
	Engine *e = open_engine(g, weights_of(a, g), &eo);
	FILE *df = NULL;
	if (a->dump && !(df = fopen(a->dump, "wb")))
		fail("%s: cannot create: %s", a->dump, strerror(errno));
	float *rows = malloc(sizeof(float) * (size_t)(np * V));
	if (!rows)
		fail("out of memory");
	double t0 = now();
	int32_t tok;
	if (engine_prefill(e, 0, prompt, np, 0, &tok, df ? rows : NULL, err, sizeof err))
		fail_gpu(e, step_err(err, sizeof err, 0));
	if (a->force) /* --force: the sampled token is dropped, and the next step is fed this one */
		tok = a->force[0];
	double t1 = now();
	dump_rows(df, a->dump, rows, (size_t)(np * V));
	Answer an = {.tk = tk, .cf = cf, .stop = a->stop, .ignore_eos = a->ignore_eos};
	if (tk)
		tok_stream_init(&an.ts, tk, 0);
	emit(&an, tok);
	fflush(stdout);
	long made = 1;
	for (long i = 1; i < a->n && !an.done && !interrupted; i++, made++) {
		if ((a->force && engine_feed(e, tok, err, sizeof err)) ||
		    engine_decode(e, 1, &tok, df ? rows : NULL, err, sizeof err))
			fail_gpu(e, step_err(err, sizeof err, i));
		if (a->force) /* the sampled token dropped, as after the prefill */
			tok = a->force[i];
		dump_rows(df, a->dump, rows, (size_t)V);
		emit(&an, tok);
		if (fflush(stdout))
			close_stdout(); /* ends the run: the answer can no longer be delivered */
	}
	emit_end(&an);
	printf("\n");
	fflush(stdout);
	double t2 = now();
	if (tk)
		fprintf(stderr, "glmrun: prefill %d tokens at %.1f tok/s, decode %ld tokens at %.1f tok/s%s\n", np,
		        np / (t1 - t0), made - 1, made > 1 ? (double)(made - 1) / (t2 - t1) : 0.0,
		        interrupted ? " (interrupted)" : "");
	if (df && fclose(df))
		fail("%s: write failed: %s", a->dump, strerror(errno));
	if (a->stats)
		print_stats(e, np, a->n, t0, t1, t2);
	engine_close(e);
	free(rows);
	return 0;
}

/* glmrun serve: the tokenizer and chat format (either may be missing: the server then says so per
** request), the context, then runtime/cli/serve.c until SIGTERM. */
static int run_serve(const Args *a, const Graph *g)
{
	char err[1024], cerr[1024] = "no tokenizer";
	Tok *tk = load_tokenizer(a, g);
	ChatFmt cf = {0};
	int chat = tk && !chat_setup(&cf, a->tokenizer ? a->tokenizer : graph_meta(g, "weights.path"), a->chat_template,
	                             a->no_think, tk, cerr, sizeof cerr);
	if (tk && !chat)
		fprintf(stderr, "glmrun serve: no chat format (%s): /v1/chat/completions answers 400\n", cerr);
	const char *ctx = graph_meta(g, "n_ctx");
	long cap = ctx && atol(ctx) > 0 && atol(ctx) < 4096 ? atol(ctx) : 4096;
	if (ctx && a->max_seq > atol(ctx))
		fail("--max-seq %ld is more than the model's context of %s", a->max_seq, ctx);
	const char *base = strrchr(a->plan, '/') ? strrchr(a->plan, '/') + 1 : a->plan;
	note_random(g);
	ServeOpts so = {.g = g, .plan = a->plan, .weights = weights_of(a, g), .eo = engine_opts(a, want_cuda(a, g)),
	                .tk = tk, .cf = chat ? &cf : NULL, .chat_err = cerr, .host = a->host ? a->host : "127.0.0.1",
	                .port = a->port ? a->port : 8080, .max_seqs = a->max_seqs ? a->max_seqs : 4,
	                .max_seq = a->max_seq ? a->max_seq : cap, .batch_tokens = a->batch_tokens ? a->batch_tokens : 2048,
	                .prefill_alone = a->prefill_alone == 1 ? 1 : a->prefill_alone == 2 ? 0 : -1,
	                .max_queue = a->max_queue ? a->max_queue : 64, .api_key = a->api_key,
	                .model_name = a->model_name ? a->model_name : base};
	if (serve_main(&so, err, sizeof err))
		fail("serve: %s", err);
	if (tk)
		tok_close(tk);
	chat_free(&cf);
	return 0;
}

int main(int argc, char **argv)
{
	atexit(close_stdout);
	Args a;
	parse(&a, argc, argv);
	if (is_weights(a.plan)) /* -m model.gguf or a checkpoint directory, as llama.cpp users give it */
		a.plan = cached_plan(a.plan);
	char err[1024];
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	if (plan_read(&g, a.plan, err, sizeof err))
		fail("%s", err);
	if (a.bench || a.profile)
		return run_bench(&a, &g);
	if (a.serve)
		return run_serve(&a, &g);
	int64_t V = vocab_of(&a, &g);
	if (a.round_bf16 && g.cuda.act != DT_BF16)
		fail("%s: --round-bf16 mirrors a plan compiled with --dtype bf16; this one's activations are %s", a.plan,
		     dtype_name(g.cuda.act));
	if (a.round_bf16 && want_cuda(&a, &g) && !a.verify)
		fail("--round-bf16 rounds the CPU reference as the GPU does; run it with --device cpu (or --verify)");
	Tok *tk = a.prompt || a.chat ? load_tokenizer(&a, &g) : NULL;
	int templ = a.chat || a.chat_template || a.system || a.no_think;
	ChatFmt cf = {0};
	if (templ && chat_setup(&cf, a.tokenizer ? a.tokenizer : graph_meta(&g, "weights.path"), a.chat_template,
	                        a.no_think, tk, err, sizeof err))
		fail("%s", err);
	if (tk) { /* no SA_RESTART: a Ctrl-C also ends the wait for the next line of a chat */
		struct sigaction sa = {.sa_handler = on_sigint};
		sigemptyset(&sa.sa_mask);
		sigaction(SIGINT, &sa, NULL);
	}
	int rc, np = 0;
	int32_t *prompt = NULL;
	if (a.batch > 1)
		rc = run_batch(&a, &g, tk);
	else if (a.chat && !a.prompt)
		rc = run_chat(&a, &g, tk, &cf);
	else {
		prompt = a.prompt ? encode_prompt(&a, tk, &cf, templ, &np) : parse_tokens(a.tokens, "--tokens", &np);
		check_ids("--tokens", prompt, np, V);
		check_ids("--force", a.force, a.nforce, V);
		rc = a.verify ? run_verify(&a, &g, prompt, np) : run_text(&a, &g, tk, templ ? &cf : NULL, prompt, np);
	}
	if (tk)
		tok_close(tk);
	chat_free(&cf);
	free(prompt), free(a.force);
	arena_free(&A);
	return rc;
}
