/*
** compiler/cli/main.c — the glmc command line and the pass pipeline.
**
** The pipeline is one flat function, compile(), that runs the passes in order; `glmc dump --after P`
** stops after pass P and prints the IR. Passes so far: front (run the Lua model), verify, bind (check
** every parameter against the checkpoint). Fusion, memory planning, partitioning and CUDA emission
** are later issues; until they exist their flags are refused rather than ignored.
*/
#include "passes.h"
#include "inspect.h"
#include "outpath.h"
#include "tokenize.h"
#include "quant.h"
#include "weights.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct {
	const char *cmd;
	const char *model;
	const char *weights;
	const char *out;
	const char *lib;
	const char *arch;
	const char *after;
	const char *dot;
	const char *dtype;
	const char *config;
	const char *random;
	const char *fallback;        /* --fallback: older kernels in place of newer ones (emit_cuda) */
	int persistent;              /* --decode persistent: a task schedule for the 1-token step (sched.c) */
	int sms, per_sm;             /* --sms, --blocks-per-sm: the persistent kernel's workers */
	int layers;
	double lua_seconds;
	int opt;
	int tp;
	int strict;
	int force_model;
	int json;                    /* stats: one JSON object instead of key: value lines */
} Opts;

static const char *usage =
	"usage: glmc compile [MODEL.lua] --weights PATH -o OUT.plan [options]\n"
	"       glmc dump [MODEL.lua] --weights PATH [--after PASS]\n"
	"       glmc dump PLAN\n"
	"       glmc stats PLAN [--json]   key: value lines (kernels, arena, weights, cache, collectives)\n"
	"       glmc explain PLAN          fusions and refusals, collectives, memory plan vs its lower bound\n"
	"       glmc explain [MODEL.lua] --weights PATH [options]   the same, compiled now, and the kernel\n"
	"                                  selection: each decode GEMV group's kernel per step range and why\n"
	"       glmc inspect WEIGHTS [--tensor NAME --dump FILE]\n"
	"       glmc tokenize WEIGHTS [--add-special] [--parse-special] [--decode]   (text on stdin)\n"
	"\n"
	"Compile a Lua model description and its weights into a plan that glmrun executes. Without MODEL.lua\n"
	"glmc takes the model file models/lib/archs.lua names for the weights' architecture (GGUF\n"
	"general.architecture, config.json model_type / architectures) and says which on stderr.\n"
	"\n"
	"  --weights PATH   (also -m PATH, as llama.cpp names its model file) a GGUF file (or the first of a split set), or a Hugging Face checkpoint\n"
	"                   directory (config.json + *.safetensors)\n"
	"  -o, --output FILE  plan file to write\n"
	"  --lib DIR        model library directory for require and archs.lua (default: MODEL's dir/lib,\n"
	"                   else, and without MODEL.lua, <glmc's dir>/../models/lib)\n"
	"  --config FILE    hyperparameters only (a config.json), with --random-weights TYPE: every\n"
	"                   parameter random (TYPE for matrices: f32, f16, bf16, q8_0, q4_k, q5_k,\n"
	"                   q6_k, any other GGUF block type the GPU reads (q4_0, q4_1, q5_0, q5_1, q2_k,\n"
	"                   q3_k, iq4_nl, iq4_xs, mxfp4, iq1_s, iq1_m, iq2_xxs, iq2_xs, iq2_s, iq3_xxs,\n"
	"                   iq3_s, tq1_0, tq2_0, nvfp4), q4_k_m or iq_dyn; vectors f32) — plans for models\n"
	"                   whose weights are not here; glmrun flags such runs.\n"
	"                   iq_dyn is a 1-2-bit \"dynamic\" mix of big-MoE files: routed experts' gate/up\n"
	"                   IQ1_M and down IQ2_XXS, shared expert and dense FFN Q4_K, attention Q6_K\n"
	"                   (attn_output Q8_0), output Q6_K, router f32; rows that are not whole blocks as\n"
	"                   for q4_k_m\n"
	"                   q4_k_m is llama.cpp's Q4_K_M mix: Q4_K, with Q6_K for output.weight, for\n"
	"                   ffn_down (also _exps/_shexp) of layers where use_more_bits(layer, n_layer) holds\n"
	"                   (the first and last eighth and every third between; n_layer counts the whole\n"
	"                   model, MTP layers included, also under --layers) and for the same share of the\n"
	"                   attn_v / attn_kv_b tensors; ffn_gate_inp stays f32; rows that are not whole\n"
	"                   blocks fall back as llama.cpp does (Q4_K->Q5_0, Q6_K->Q8_0, else f16)\n"
	"  --layers N       keep only the first N layers (benchmarks of a slice)\n"
	"  --lua-time S     CPU seconds the model's Lua may run (default 5; finalizers and library calls\n"
	"                   included: past S + 0.5 glmc stops)\n"
	"  --strict         fail when the checkpoint holds tensors the model does not use (tensors a model\n"
	"                   declares unused, such as MTP layers, are never reported)\n"
	"  --force-model    compile MODEL.lua on weights of an architecture it does not list in\n"
	"                   models/lib/archs.lua (a warning instead of the error)\n"
	"  -O0              no optimisation: no fusion, every value its own buffer (default -O1)\n"
	"  --tp N           tensor-parallel ranks: 1, 2, 4 or 8 (glmrun runs a tp N plan on N GPUs with NCCL,\n"
	"                   or as N ranks with --device cpu)\n"
	"  --arch sm_XX     GPU architecture the kernels are compiled for with NVRTC (default sm_90;\n"
	"                   sm_80 sm_86 sm_89 sm_90 sm_100 sm_120); glmrun recompiles for another GPU\n"
	"  --dtype f32|bf16 activation type on the GPU (bf16 also converts float weights; default f32)\n"
	"  --fallback K,...  the older kernel in place of a newer one (the same sums in another order; slower\n"
	"                   where measured):\n"
	"                   attn_split (split decode attention, for k_attn_step), moe_tc (routed experts'\n"
	"                   prefill as a grouped tensor-core GEMM, for k_moe_up/k_moe_down), dsa_tc (DSA\n"
	"                   prefill attention on the tensor cores, for k_mla), mla_expand (a one-sequence\n"
	"                   prompt chunk's MLA prefill over keys and values expanded through kv_b, for the\n"
	"                   absorbed k_mla_tc), mla_split_tc (the MLA decode step's split attention on the\n"
	"                   tensor cores, for k_mla_split), indexer_tc (the DSA indexer's prefill scores on\n"
	"                   the tensor cores, for k_indexer_scores), or all\n"
	"  --decode kernels|persistent  how the 1-token decode step runs: one kernel a launch (default), or\n"
	"                   one persistent kernel walking a task schedule proved safe here (glmc explain\n"
	"                   shows it; glmrun runs it unless given --decode kernels; slower than the kernels on\n"
	"                   an H100, and failing on the GLM-5 slice: see README's Limitations)\n"
	"  --sms N          SMs the persistent schedule deals its tasks to (default 132: H100 SXM, H200)\n"
	"  --blocks-per-sm K  persistent workers an SM (default 1)\n"
	"  --after PASS     dump the IR after PASS: front, verify, bind, partition, fuse, memplan, emit, sched\n"
	"                   (default: bind)\n"
	"  --dot FILE       with dump: also write the graph as Graphviz DOT\n"
	"  -h, --help       this text (glmc COMMAND --help: that command's);  --version  print the version\n"
	"Options take their value as --opt VALUE or --opt=VALUE, before or after the command.\n";

static _Noreturn void fail(const char *msg)
{
	fprintf(stderr, "glmc: %s\n", msg);
	exit(1);
}

static _Noreturn void fail_usage(const char *what, const char *arg)
{
	fprintf(stderr, "glmc: %s%s%s\n(run 'glmc --help' for usage)\n", what, arg ? " " : "", arg ? arg : "");
	exit(2);
}

static int is_dir(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

/* <glmc's directory>/../models/lib, where `make` leaves glmc next to the models; NULL when absent. */
static const char *exe_lib(Arena *A)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n <= 0)
		return NULL;
	exe[n] = 0;
	char *s = strrchr(exe, '/');
	if (!s)
		return NULL;
	*s = 0;
	char *p = arena_printf(A, "%s/../models/lib", exe);
	return is_dir(p) ? p : NULL;
}

/* The library directory: --lib, else MODEL's directory + "/lib", else <glmc>/../models/lib (the only
** place looked at without a model file, so that glmc finds its models from any directory). */
static const char *find_lib(const Opts *o, const char *model, Arena *A)
{
	if (o->lib)
		return o->lib;
	const char *e;
	if (!model)
		return (e = exe_lib(A)) ? e : "models/lib";
	const char *slash = strrchr(model, '/');
	char *d = slash ? arena_printf(A, "%.*s/lib", (int)(slash - model), model) : arena_strdup(A, "lib");
	if (is_dir(d))
		return d;
	return (e = exe_lib(A)) ? e : d;
}

/* No model file: the library's choice for the weights (models/lib/archs.lua), said on stderr; the file
** lies in the library's parent directory. */
static const char *pick_model(Graph *g, const char *lib, const ModelMeta *mm, char *err, size_t len)
{
	char file[256], why[512];
	if (front_pick_model(g, lib, mm, file, sizeof file, why, sizeof why, err, len))
		return NULL;
	const char *slash = strrchr(lib, '/');
	char *path = slash ? arena_printf(g->A, "%.*s/%s", (int)(slash - lib), lib, file)
	                   : arena_printf(g->A, "%s", file);
	struct stat st;
	char real[PATH_MAX];
	if (stat(path, &st) || !S_ISREG(st.st_mode)) {
		seterr(err, len, "%s: no such model file (%s/archs.lua names it for %s)", path, lib, why);
		return NULL;
	}
	if (realpath(path, real))
		path = arena_strdup(g->A, real);
	fprintf(stderr, "glmc: model file %s, for %s\n", path, why);
	return path;
}

/* Print the IR when this is the pass the user asked to see; returns 1 to stop the pipeline. */
static int dump_after(const Opts *o, const char *pass, const Graph *g)
{
	if (!o->after || strcmp(o->after, pass))
		return 0;
	if (o->dot) {
		FILE *f = fopen(o->dot, "w");
		if (!f)
			fail("--dot: cannot create the file");
		ir_dot(g, f);
		if (fclose(f))
			fail("--dot: write failed");
	}
	ir_dump(g, stdout);
	return 1;
}

/* Kernel launches of a decode step (1 token): per layer (per_layer[l], calloc'd, *nl layers) and in all
** (the sampler included; collectives, which are NCCL calls, are not kernels). A CPU-only plan counts one
** per computing node. */
static int kernel_counts(const Graph *g, int **per_layer, int *nl)
{
	int L = 0, step = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].layer + 1 > L)
			L = g->node[i].layer + 1;
	int *pl = calloc((size_t)L + 1, sizeof(int));
	if (!pl)
		fail("out of memory");
	if (g->cuda.source) {
		for (int i = 0; i < g->cuda.nl; i++)
			if (g->cuda.l[i].tmin <= 1 && 1 <= g->cuda.l[i].tmax && g->cuda.l[i].kind == LK_KERNEL) { /* collectives apart */
				step++;
				int l = g->node[g->cuda.l[i].node].layer;
				if (l >= 0)
					pl[l]++;
			}
		step++; /* the sampler */
	} else
		for (int i = 0; i < g->n; i++)
			if (g->node[i].kind == VK_ACT && g->node[i].op != OP_RESHAPE) {
				step++;
				if (g->node[i].layer >= 0)
					pl[g->node[i].layer]++;
			}
	*per_layer = pl, *nl = L;
	return step;
}

/* The kernel counts as one line for dumps: the step's total and each layer's. */
static void print_kernel_counts(const Graph *g, FILE *f)
{
	int *pl, nl, step = kernel_counts(g, &pl, &nl);
	fprintf(f, "kernels (decode step of 1 token%s): %d per step; per layer:", g->cuda.source ? "" : ", CPU plan: nodes",
	        step);
	for (int l = 0; l < nl; l++)
		fprintf(f, " %d", pl[l]);
	fprintf(f, "\n");
	free(pl);
}

/* The pipeline. Each stage either succeeds or writes a one-line error into err. */
/* --decode persistent: the 1-token step's task schedule, proved (sched_check) and run under random
** interleavings (sched_simulate) before it goes into the plan, and its kernel's program (Cuda.psource). */
static int persist_schedule(Graph *g, const Opts *o, char *err, size_t len)
{
	char e[400];
	if (sched_build(g, 1, o->sms, o->per_sm, e, sizeof e) || sched_check(g, &g->cuda.sched[g->cuda.nsched - 1], e, sizeof e) ||
	    sched_simulate(g, &g->cuda.sched[g->cuda.nsched - 1], 0x47, 16, e, sizeof e) || !emit_cuda_persist(g, 1, e, sizeof e))
		return seterr(err, len, "--decode persistent: %s", e);
	graph_set_meta(g, "compile.decode", "persistent");
	return 0;
}

static int compile(const Opts *o, Graph *g, char *err, size_t len)
{
	Weights d;
	if (o->random) {
		int q = !strcmp(o->random, "q4_k_m") ? WQ_MIX_Q4_K_M : !strcmp(o->random, "iq_dyn") ? WQ_MIX_IQ_DYN
		        : quant_type_from_name(o->random);
		if (q != WQ_MIX_Q4_K_M && q != WQ_MIX_IQ_DYN && (q < 0 || !weights_random_type_ok(q)))
			return seterr(err, len, "--random-weights: unknown or unsupported type '%s' (f32, f16, bf16, a GGUF block "
			              "type such as q8_0, q4_k or iq2_xxs, q4_k_m, iq_dyn)", o->random);
		if (weights_open_random(&d, o->config, q, err, len))
			return -1;
	} else if (weights_open(&d, o->weights, err, len))
		return -1;
	ModelMeta mm = {.w = &d, .layers = o->layers, .lua_seconds = o->lua_seconds, .force_model = o->force_model};
	int rc = -1;
	const char *model = o->model, *lib = find_lib(o, model, g->A);
	if (!model && !(model = pick_model(g, lib, &mm, err, len)))
		goto out;
	if (front_run(g, model, lib, &mm, err, len))
		goto out;
	if (dump_after(o, "front", g))
		goto done;
	if (verify(g, err, len))
		goto out;
	if (dump_after(o, "verify", g))
		goto done;
	if (bind_weights(g, &d, o->strict, stderr, err, len) || verify(g, err, len))
		goto out;
	char real[PATH_MAX];
	const char *wp = o->random ? o->config : o->weights;
	graph_set_meta(g, "weights.path", realpath(wp, real) ? real : wp);
	graph_set_meta(g, "weights.format", o->random ? "random" : weights_format_name(d.format));
	if (o->random)
		graph_set_meta(g, "weights.random_type", o->random);
	graph_set_meta(g, "glmc.version", GLM_VERSION);
	graph_set_meta(g, "arch", o->arch);
	graph_set_meta(g, "tp", "1");
	if (o->fallback)
		graph_set_meta(g, "compile.fallback", o->fallback);
	if (dump_after(o, "bind", g))
		goto done;
	if (partition(g, o->tp, stderr, err, len) || verify(g, err, len))
		goto out;
	if (dump_after(o, "partition", g))
		goto done;
	if (fuse(g, o->opt, !strcmp(o->dtype, "bf16") ? DT_BF16 : DT_F32))
		goto oom;
	if (dump_after(o, "fuse", g)) {
		for (int i = 0; i < g->nfusion; i++)
			printf("%s\n", g->fusion[i]);
		goto done;
	}
	/* The launch list first (the memory plan takes its liveness from it), NVRTC after planning. */
	if (emit_cuda(g, o->arch, !strcmp(o->dtype, "bf16") ? DT_BF16 : DT_F32, 0, stderr, err, len))
		goto out;
	if (memplan(g, o->opt, err, len))
		goto out;
	if (dump_after(o, "memplan", g)) {
		printf("arena: %lld bytes per token + %lld static; lower bound %lld per token + %lld static\n",
		       (long long)g->mem.token_bytes, (long long)g->mem.static_bytes, (long long)g->mem.token_lower,
		       (long long)g->mem.static_lower);
		goto done;
	}
	if ((o->persistent || (o->after && !strcmp(o->after, "sched"))) && persist_schedule(g, o, err, len))
		goto out;
	if (dump_after(o, "sched", g)) {
		for (int i = 0; i < g->cuda.nsched; i++)
			sched_dump(g, &g->cuda.sched[i], 1, stdout);
		goto done;
	}
	if (o->out && emit_cuda_compile(g, stderr, err, len))
		goto out;
	if (dump_after(o, "emit", g)) {
		for (int i = 0; i < g->cuda.nl; i++) {
			char tmpl[160];
			const Launch *l = &g->cuda.l[i];
			printf("launch %%%d %s grid-block %d t=[%d,%d] args %d %s%s%s%s\n", l->node, launch_name(l), l->block,
			       l->tmin, l->tmax, l->narg, l->kind == LK_KERNEL ? cuda_template(g, l->kernel, tmpl, sizeof tmpl) : "NCCL",
			       l->inside_next ? " (may run inside the next kernel)" : "",
			       g->cuda.l[i].flags & LAUNCH_NORM_LATE ? " (norm read late, unrounded)"
			       : g->cuda.l[i].flags & LAUNCH_NORM_TC ? " (norm read late, bf16(x·nw))" : "",
			       l->flags & LAUNCH_ONE_SEQ ? " (one sequence's chunk only)"
			       : l->flags & LAUNCH_MULTI_SEQ ? " (steps of several sequences only)" : "");
		}
		print_kernel_counts(g, stdout);
		goto done;
	}
	if (o->out && plan_write(g, o->out, err, len))
		goto out;
done:
	rc = 0;
	goto out;
oom:
	seterr(err, len, "fuse: out of memory");
out:
	weights_close(&d);
	return rc;
}

/* glmc stats' output: key: value lines, or (--json) one JSON object of the same keys, integers as numbers. */
typedef struct {
	json_t *obj;                 /* NULL: print lines */
} Kv;

static void kv(Kv *k, const char *key, long long v)
{
	if (k->obj)
		json_object_set_new(k->obj, key, json_integer(v));
	else
		printf("%s: %lld\n", key, v);
}

static void kv_str(Kv *k, const char *key, const char *v)
{
	if (k->obj)
		json_object_set_new(k->obj, key, json_string(v));
	else
		printf("%s: %s\n", key, v);
}

/* The weight bytes glmrun allocates on one GPU (runtime/cuda.c sizes them the same way): blocks kept as
** they are (their device rows, ops/quant.c quant_dev_row_bytes) against those blocks' bytes in the file,
** the difference being the rows' alignment padding (and Q6_K's slots, Q8_0's whole superblocks), and the
** float weights at their GPU type (GGUF blocks converted at upload included). */
static void gpu_weight_stats(const Graph *g, Kv *k)
{
	uint64_t all = 0, blk = 0, file = 0;
	for (int i = 0; i < g->nw; i++) {
		const Node *n = &g->node[g->w[i].node];
		int64_t K = n->dim[n->ndim - 1], numel = node_numel(n, 0, 0), rows = K ? numel / K : 0;
		if (g->cuda.wq && g->cuda.wq[i] >= 0) {
			uint64_t b = (uint64_t)quant_dev_row_bytes(g->cuda.wq[i], K) * (uint64_t)rows;
			blk += b, all += b;
			file += (uint64_t)quant_row_bytes(g->cuda.wq[i], K) * (uint64_t)rows;
		} else {
			all += (uint64_t)numel * dtype_size(cuda_wdtype(g, g->w[i].node));
		}
	}
	kv(k, "gpu_weight_bytes", (long long)all);
	kv(k, "gpu_block_weight_bytes", (long long)blk);
	kv(k, "gpu_block_weight_file_bytes", (long long)file);
	kv(k, "gpu_block_weight_pad_bytes", (long long)(blk - file));
}

/* glmc stats PLAN: key: value lines (or JSON) for scripts and benchmarks. */
static void print_stats(const Graph *g, int json)
{
	Kv k = {json ? json_object() : NULL};
	if (json && !k.obj)
		fail("out of memory");
	int *per_layer, nl, step = kernel_counts(g, &per_layer, &nl);
	kv_str(&k, "device", g->cuda.source ? "cuda+cpu" : "cpu");
	kv(&k, "kernels_per_step", step);
	char key[48];
	for (int l = 0; l < nl; l++) {
		snprintf(key, sizeof key, "kernels_per_layer.%d", l);
		kv(&k, key, per_layer[l]);
	}
	free(per_layer);
	kv(&k, "arena_bytes", g->mem.token_bytes + g->mem.static_bytes);
	kv(&k, "arena_bytes_per_token", g->mem.token_bytes);
	kv(&k, "arena_static_bytes", g->mem.static_bytes);
	kv(&k, "arena_lower_bound", g->mem.token_lower + g->mem.static_lower);
	kv(&k, "arena_lower_bound_per_token", g->mem.token_lower);
	uint64_t wb = 0, total = 0, split = 0;
	int tp = graph_meta(g, "tp") ? atoi(graph_meta(g, "tp")) : 1;
	for (int i = 0; i < g->nw; i++) {
		uint64_t b = g->w[i].nbytes * (uint64_t)(g->w[i].parts ? g->w[i].parts : 1);
		total += b;
		if (g->w[i].split >= 0 && tp > 1)
			wb += b / (uint64_t)tp, split += b;
		else
			wb += b;
	}
	kv(&k, "weight_bytes_per_gpu", (long long)wb);
	kv(&k, "weight_bytes_total", (long long)total);
	kv(&k, "weight_bytes_split", (long long)split);
	if (g->cuda.source)
		gpu_weight_stats(g, &k);
	int64_t cache = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].kind == VK_CACHE)
			cache += node_numel(&g->node[i], 1, 1) * (int64_t)dtype_size(g->cuda.source ? g->cuda.act : DT_F32);
	kv(&k, "cache_bytes_per_token", cache);
	const char *ar = graph_meta(g, "allreduces_per_step"), *ag = graph_meta(g, "allgathers_per_step");
	kv(&k, "allreduces_per_step", ar ? atoll(ar) : 0);
	kv(&k, "allgathers_per_step", ag ? atoll(ag) : 0);
	kv(&k, "tp", tp);
	if (k.obj) {
		char *text = json_dumps(k.obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (!text)
			fail("out of memory");
		puts(text);
		free(text);
		json_decref(k.obj);
	}
}

/* glmc explain PLAN: what the passes decided and why — fusions and refusals, the collectives in order,
** and the memory plan against its lower bound. */
static void explain(const Graph *g)
{
	printf("fusion (%s fused, %s refused):\n", graph_meta(g, "fusions") ? graph_meta(g, "fusions") : "0",
	       graph_meta(g, "fusions_refused") ? graph_meta(g, "fusions_refused") : "0");
	for (int i = 0; i < g->nfusion; i++)
		printf("  %s\n", g->fusion[i]);
	Target t;
	if (g->cuda.source && !target_for_arch(g->cuda.arch, &t)) {
		printf("quantized weights on the GPU:\n");
		select_quant_explain(g, stdout);
		if (g->fk) /* compiled now: the selection's records (a plan keeps only the launches chosen) */
			select_explain(g, &t, stdout);
		else
			printf("kernel selection: the plan keeps the launches only; glmc explain with the model and weights "
			       "shows each decode GEMV group's candidates\n");
	}
	printf("collectives (tp %s), in step order:\n", graph_meta(g, "tp") ? graph_meta(g, "tp") : "1");
	int nc = 0;
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		if (n->op != OP_ALLREDUCE && n->op != OP_ALLGATHER)
			continue;
		nc++;
		const char *next = "";
		for (int j = i + 1; j < g->n && !*next; j++)
			for (int k = 0; k < g->node[j].nin; k++)
				if (g->node[j].in[k] == i)
					next = g->node[j].op == OP_ADD && g->node[j].fuse_pattern == FUSE_NONE
					           ? " -> residual add" : "";
		for (int j = i + 1; j < g->n; j++)
			if (g->node[j].op == OP_RMSNORM && g->node[j].fuse_pattern == FUSE_ADD_NORM &&
			    g->node[g->node[j].fused_into].in[1] == i)
				next = " -> residual add + rmsnorm (fused)";
		printf("  %%%d %s of %%%d, %lld bytes per token, after %s:%d (layer %d)%s\n", i, op_table[n->op].name,
		       n->in[0], (long long)(node_numel(n, 1, 1) * 4), n->src ? n->src : "?", n->line, n->layer, next);
	}
	if (!nc)
		printf("  none\n");
	int moe = 0;
	for (int i = 0; i < g->n; i++)
		moe |= g->node[i].op == OP_MOE_FFN;
	if (moe && nc)
		printf("experts: tensor parallel inside each expert (every rank holds 1/tp of each expert's hidden "
		       "width), so a MoE layer ends in the same one allreduce as a dense MLP; expert parallelism would "
		       "replace it with an all-to-all dispatch and combine, which moves more bytes at decode batch "
		       "sizes\n");
	const MemPlan *m = &g->mem;
	if (m->planned)
		printf("memory: activation arena %lld bytes per token + %lld static; lower bound (peak live) %lld + %lld; "
		       "ratio %.3f\n", (long long)m->token_bytes, (long long)m->static_bytes, (long long)m->token_lower,
		       (long long)m->static_lower,
		       (double)(m->token_bytes + m->static_bytes) / (double)(m->token_lower + m->static_lower + !m->token_lower));
	if (g->cuda.nl && !g->cuda.nsched)
		printf("persistent decode: none (glmc compile --decode persistent adds the 1-token step's task schedule)\n");
	for (int i = 0; i < g->cuda.nsched; i++) {
		printf("persistent decode (glmrun runs it for T=1 unless --decode kernels; --stats says which ran), ");
		sched_dump(g, &g->cuda.sched[i], 0, stdout);
		emit_cuda_persist_explain(g, g->cuda.sched[i].T, stdout);
	}
}

static int valid_arch(const char *a)
{
	static const char *ok[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120", NULL};
	for (const char **p = ok; *p; p++)
		if (!strcmp(a, *p))
			return 1;
	return 0;
}

/* Each command's own --help: the usage lines of that command, then the options it takes. */
static void help_for(const char *cmd)
{
	static const struct {
		const char *cmd, *text;
	} h[] = {
		{"compile", "usage: glmc compile [MODEL.lua] --weights PATH -o OUT.plan [options]\n"
		            "Compile a model and its weights into a plan (options below: all but --after, --dot, --json).\n"},
		{"dump", "usage: glmc dump [MODEL.lua] --weights PATH [--after PASS] [--dot FILE]\n"
		         "       glmc dump PLAN\n"
		         "The IR after a pass (default bind), or a plan's metadata, kernel counts and IR.\n"},
		{"stats", "usage: glmc stats PLAN [--json]\n"
		          "key: value lines (or one JSON object): kernels per step and per layer, arena, weight and cache\n"
		          "bytes, collectives, tp.\n"},
		{"explain", "usage: glmc explain PLAN\n"
		            "Fusions and refusals, the quantized weights' kernels, collectives, the memory plan against its\n"
		            "lower bound.\n"},
	};
	for (size_t i = 0; cmd && i < sizeof h / sizeof h[0]; i++)
		if (!strcmp(cmd, h[i].cmd)) {
			fputs(h[i].text, stdout);
			if (!strcmp(cmd, "compile") || !strcmp(cmd, "dump"))
				fputs(strstr(usage, "\n\n") + 1, stdout);
			return;
		}
	fputs(usage, stdout);
}

enum { G_WEIGHTS = 256, G_LIB, G_TP, G_ARCH, G_AFTER, G_DTYPE, G_CONFIG, G_RANDOM, G_LAYERS, G_DOT, G_LUA_TIME,
       G_STRICT, G_FORCE_MODEL, G_VERSION, G_JSON, G_FALLBACK, G_DECODE, G_SMS, G_PER_SM };
static const struct option long_opts[] = {
	{"help", no_argument, 0, 'h'}, {"version", no_argument, 0, G_VERSION}, {"weights", required_argument, 0, G_WEIGHTS},
	{"model", required_argument, 0, 'm'}, {"output", required_argument, 0, 'o'}, {"lib", required_argument, 0, G_LIB},
	{"tp", required_argument, 0, G_TP}, {"arch", required_argument, 0, G_ARCH}, {"after", required_argument, 0, G_AFTER},
	{"dtype", required_argument, 0, G_DTYPE}, {"config", required_argument, 0, G_CONFIG},
	{"random-weights", required_argument, 0, G_RANDOM}, {"layers", required_argument, 0, G_LAYERS},
	{"dot", required_argument, 0, G_DOT}, {"lua-time", required_argument, 0, G_LUA_TIME},
	{"strict", no_argument, 0, G_STRICT}, {"force-model", no_argument, 0, G_FORCE_MODEL},
	{"json", no_argument, 0, G_JSON}, {"fallback", required_argument, 0, G_FALLBACK},
	{"decode", required_argument, 0, G_DECODE}, {"sms", required_argument, 0, G_SMS},
	{"blocks-per-sm", required_argument, 0, G_PER_SM}, {0, 0, 0, 0},
};

/* One option's effect on o (c from long_opts or a short option; v its value). */
static void take_opt(Opts *o, int c, const char *v)
{
	char *end;
	switch (c) {
	case G_VERSION: printf("glmc %s (plan format %d)\n", GLM_VERSION, PLAN_VERSION); exit(0);
	case 'm': /* llama.cpp's -m names the weights file */
	case G_WEIGHTS: o->weights = v; break;
	case 'o': o->out = v; break;
	case G_LIB: o->lib = v; break;
	case G_ARCH: o->arch = v; break;
	case G_AFTER: o->after = v; break;
	case G_CONFIG: o->config = v; break;
	case G_DOT: o->dot = v; break;
	case G_RANDOM: o->random = v; break;
	case G_STRICT: o->strict = 1; break;
	case G_FORCE_MODEL: o->force_model = 1; break;
	case G_JSON: o->json = 1; break;
	case G_FALLBACK: o->fallback = v; break;
	case G_DECODE:
		if (strcmp(v, "kernels") && strcmp(v, "persistent"))
			fail_usage("--decode takes kernels or persistent, got", v);
		o->persistent = !strcmp(v, "persistent");
		break;
	case G_SMS:
	case G_PER_SM: {
		long n = strtol(v, &end, 10);
		if (*end || end == v || n < 1 || n > (c == G_SMS ? 1024 : 32))
			fail_usage(c == G_SMS ? "--sms takes 1 to 1024, got" : "--blocks-per-sm takes 1 to 32, got", v);
		*(c == G_SMS ? &o->sms : &o->per_sm) = (int)n;
		break;
	}
	case 'O':
		if (v && strcmp(v, "0") && strcmp(v, "1"))
			fail_usage("-O takes 0 or 1, got", v);
		o->opt = v && !strcmp(v, "0") ? 0 : 1;
		break;
	case G_LUA_TIME: {
		double d = strtod(v, &end);
		if (*end || end == v || !(d >= 0.01 && d <= 86400))
			fail_usage("--lua-time must be a number of seconds in [0.01, 86400], got", v);
		o->lua_seconds = d;
		break;
	}
	case G_LAYERS: {
		long k = strtol(v, &end, 10);
		if (*end || end == v || k < 1 || k > 100000)
			fail_usage("--layers must be a positive integer, got", v);
		o->layers = (int)k;
		break;
	}
	case G_DTYPE:
		if (strcmp(v, "f32") && strcmp(v, "bf16"))
			fail_usage("--dtype must be f32 or bf16, got", v);
		o->dtype = v;
		break;
	case G_TP: {
		long k = strtol(v, &end, 10);
		if (*end || end == v || (k != 1 && k != 2 && k != 4 && k != 8))
			fail_usage("--tp must be 1, 2, 4 or 8, got", v);
		o->tp = (int)k;
		break;
	}
	}
}

/* The command line into o: getopt_long (--opt VALUE or --opt=VALUE, options anywhere), then the command
** and the model or plan from the operands. --help after a command prints that command's help. */
static void parse(Opts *o, int argc, char **argv)
{
	*o = (Opts){.tp = 1, .arch = "sm_90", .dtype = "f32", .opt = 1, .sms = 132, .per_sm = 1};
	int help = 0;
	opterr = 0;
	for (;;) {
		int c = getopt_long(argc, argv, ":hm:o:O::", long_opts, NULL);
		if (c == -1)
			break;
		if (c == 'h')
			help = 1;
		else if (c == ':')
			fail_usage("missing value after", argv[optind - 1]); /* getopt has moved past it */
		else if (c == '?')
			fail_usage("unknown option", argv[optind - 1]);
		else
			take_opt(o, c, optarg);
	}
	for (int i = optind; i < argc; i++) {
		if (!o->cmd)
			o->cmd = argv[i];
		else if (!o->model)
			o->model = argv[i];
		else
			fail_usage("unexpected argument", argv[i]);
	}
	if (help) {
		help_for(o->cmd);
		exit(0);
	}
}

/* At exit: output lost on stdout (a full disk, a closed descriptor) is an error, not status 0. */
static void close_stdout(void)
{
	if (out_close_stdout()) {
		fprintf(stderr, "glmc: standard output: write failed: %s\n", strerror(errno));
		_exit(1);
	}
}

/* glmc stats PLAN, explain PLAN and dump PLAN: what a written plan holds. */
static void plan_cmd(const Opts *o, Graph *g)
{
	char err[1024];
	if (plan_read(g, o->model, err, sizeof err))
		fail(err);
	if (!strcmp(o->cmd, "stats"))
		print_stats(g, o->json);
	else if (!strcmp(o->cmd, "explain"))
		explain(g);
	else {
		for (int i = 0; i < g->nmeta; i++)
			printf("meta %s = %s\n", g->meta[i].key, g->meta[i].val);
		for (int i = 0; i < g->nfusion; i++)
			printf("fusion %s\n", g->fusion[i]);
		print_kernel_counts(g, stdout);
		ir_dump(g, stdout);
	}
}

int main(int argc, char **argv)
{
	atexit(close_stdout);
	if (argc > 1 && !strcmp(argv[1], "inspect"))
		return inspect_main(argc - 1, argv + 1);
	if (argc > 1 && !strcmp(argv[1], "tokenize"))
		return tokenize_main(argc - 1, argv + 1);
	Opts o;
	parse(&o, argc, argv);
	if (!o.cmd)
		fail_usage("no command given (compile, dump, stats, explain, inspect, tokenize)", NULL);
	if (strcmp(o.cmd, "compile") && strcmp(o.cmd, "dump") && strcmp(o.cmd, "stats") && strcmp(o.cmd, "explain"))
		fail_usage("unknown command", o.cmd);
	/* explain takes a plan, or what compile takes (then it also shows the kernel selection's candidates) */
	int from_model = !strcmp(o.cmd, "compile") || !strcmp(o.cmd, "dump") || (!strcmp(o.cmd, "explain") &&
	                                                                          (o.weights || o.config));
	if (!o.model && !from_model)
		fail_usage(o.cmd, "needs a plan file");
	if (!o.model && !strcmp(o.cmd, "dump") && !o.weights && !o.config)
		fail_usage("dump", "needs a plan file, or --weights PATH (and a model file, or none to take archs.lua's)");
	if (!valid_arch(o.arch))
		fail_usage("--arch must be one of sm_80 sm_86 sm_89 sm_90 sm_100 sm_120, got", o.arch);
	char err[1024];
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	if (!strcmp(o.cmd, "stats") || (!strcmp(o.cmd, "explain") && !from_model) ||
	    (!strcmp(o.cmd, "dump") && !o.weights && !o.config)) {
		plan_cmd(&o, &g);
		arena_free(&A);
		return 0;
	}
	if (o.random && !o.config)
		fail_usage("--random-weights TYPE", "needs --config FILE (the hyperparameters, a config.json)");
	if (o.config && !o.random)
		fail_usage("--config FILE", "goes with --random-weights TYPE (weights otherwise come with --weights)");
	if (o.random && o.weights)
		fail_usage("--random-weights", "and --weights exclude each other");
	if (!o.weights && !o.random)
		fail_usage(o.cmd, "needs --weights PATH (or --config FILE --random-weights TYPE)");
	if (!strcmp(o.cmd, "compile") && !o.out)
		fail_usage("compile", "needs -o OUT.plan");
	if (!strcmp(o.cmd, "dump")) {
		o.out = NULL;
		if (!o.after)
			o.after = "bind";
		if (strcmp(o.after, "front") && strcmp(o.after, "verify") && strcmp(o.after, "bind") &&
		    strcmp(o.after, "partition") && strcmp(o.after, "fuse") && strcmp(o.after, "memplan") &&
		    strcmp(o.after, "emit") && strcmp(o.after, "sched"))
			fail_usage("--after must be front, verify, bind, partition, fuse, memplan, emit or sched, got", o.after);
	} else if (o.after)
		fail_usage("--after belongs to glmc dump", NULL);
	/* the outputs checked before any work: writable, and none of the inputs */
	const char *lib = find_lib(&o, o.model, &A), *ls = strrchr(lib, '/');
	OutInput in[] = {{o.model, "the model"}, {o.weights, "the weights"}, {o.config, "the config"},
	                 {lib, "the model library"},
	                 /* no model given: the one picked for the weights lies in the library's parent */
	                 {o.model ? NULL : ls ? arena_printf(&A, "%.*s", (int)(ls - lib), lib) : ".", "a model file"}};
	if ((o.out && out_check("-o", o.out, in, 5, err, sizeof err)) ||
	    (o.dot && out_check("--dot", o.dot, in, 5, err, sizeof err)))
		fail(err);
	if (compile(&o, &g, err, sizeof err))
		fail(err);
	if (!strcmp(o.cmd, "explain"))
		explain(&g);
	if (o.out)
		fprintf(stderr, "glmc: wrote %s (%d nodes, %d weights)\n", o.out, g.n, g.nw);
	arena_free(&A);
	return 0;
}
