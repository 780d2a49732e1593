/*
** compiler/passes/emit_cuda.c — CUDA emission. For every node the op's kernel template (ops/kernels.cuh) is
** instantiated by a small extern "C" wrapper whose parameters are exactly the launch's arguments, so the
** plan's launch list and the kernel signatures cannot disagree: both are written here from one list.
** Identical wrappers (same template instantiation and parameter types) are emitted once and shared, so
** a 78-layer model compiles as few kernels as one layer. NVRTC turns the program into one cubin.
**
** Activations are float or bf16 (act); weights keep their stored type unless the plan converts float
** weights to bf16 at upload (wconv). Shapes reach kernels as Size expressions evaluated per step.
**
** Which weights stay in GGUF blocks, and which kernel (with which shape) each linear and each decode GEMV
** or MoE-down group gets for which steps, is compiler/select.c's decision (g->cuda.wq, g->sel); the
** functions here print those records. The other ops have one kernel each (or a fixed rule by step size).
*/
#include "passes.h"
#include "gemv_shape.h"
#include "libnvrtc.h"
#include "quant.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	Graph *g;
	char *src;                   /* the wrappers, appended to the template file */
	size_t n, cap;
	int nkern;
	char **keys;                 /* dedup: "params|call" per emitted kernel */
	int nkeys, keycap;
	Launch *l;
	int nl, lcap;
	int *norm_of;                /* per add node: the rmsnorm fused into it (pattern A), or -1 */
	int *wq;                     /* per node: the ggml type a weight stays in on the GPU (quant.cuh), or -1 */
	int *add_of;                 /* per rmsnorm: the add whose kernel computes it, or -1 */
	int *own_tmin;               /* per node: its own kernels run for steps of at least this many tokens */
	int *tail_tmin;              /* per moe_ffn: its last kernel runs for steps of at least this many */
	char *kv_fused;              /* per attention, mla, indexer: a fused kernel writes its cache rows */
	int *rope_fold;              /* per attention: the FK_ROPE_KV its 1-token launch does itself, or -1 */
	int *fk_head, *fk_next;      /* per node its first hosted fused kernel, per fused kernel the next (-1 ends) */
	int *sel_first;              /* per fused kernel its first record in g->sel, or -1 */
	int *sel_node;               /* per linear its first own-kernel record in g->sel, or -1 */
	Target t;                    /* the GPU of --arch */
	/* the newer kernels chosen, unless glmc --fallback named them (fb_parse) */
	int x_split, x_moe_tc, x_dsa_tc, x_mla, x_split_tc, x_idx_tc;
	int *mla_xq;                 /* per mla node: its FK_MLA_Q when its one-sequence prefill is expanded, or -1 */
	char *absorb_only;           /* per node: its kernels serve the absorbed MLA only (mla_x_prepare) */
} Em;

/* One wrapper under construction: formal parameters and the template call's arguments. */
typedef struct {
	char formal[1024], call[1024];
	int nf;
	int minb; /* the launch bounds' blocks-per-SM figure, 0 for none (ptxas's register budget) */
	Launch L;
} Wr;

static void appendf(Em *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(Em *e, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (e->n + (size_t)k + 1 > e->cap) {
		size_t cap = e->cap ? e->cap * 2 : 1 << 16;
		while (cap < e->n + (size_t)k + 1)
			cap *= 2;
		char *s = realloc(e->src, cap);
		GLM_ASSERT(s);
		e->src = s, e->cap = cap;
	}
	va_start(ap, fmt);
	vsnprintf(e->src + e->n, (size_t)k + 1, fmt, ap);
	va_end(ap);
	e->n += (size_t)k;
}

static void cat(char *dst, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *dst, size_t cap, const char *fmt, ...)
{
	size_t k = strlen(dst);
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(dst + k, cap - k, fmt, ap);
	va_end(ap);
}

static Size sz_const(int64_t k) { return (Size){.node = -1, .div = k}; }
static Size sz_dims(int node, int lo, int hi, int64_t div) { return (Size){.node = node, .lo = (int8_t)lo, .hi = (int8_t)hi, .div = div}; }
static Size sz_numel(const Graph *g, int node, int64_t div) { return sz_dims(node, 0, g->node[node].ndim, div); }
/* Rows of a node: everything but its last dim. */
static Size sz_rows(const Graph *g, int node) { return sz_dims(node, 0, g->node[node].ndim - 1, 1); }

static int wq_node(const Graph *g, int node);

/* The C++ element type a kernel sees for a node's buffer. */
static const char *ctype(const Graph *g, int id)
{
	const Node *n = &g->node[id];
	if (n->dtype == DT_I32)
		return "int";
	/* GGUF blocks: only the quant.cuh kernels read them (any other template fails to compile on it) */
	if (n->kind == VK_WEIGHT && wq_node(g, id) >= 0)
		return "unsigned char";
	/* Quantized weights are dequantized at upload (to float, or bf16 with wconv) until the quantized
	** GEMV kernels exist. */
	int dt = n->kind == VK_WEIGHT ? cuda_wdtype(g, id) : g->cuda.act;
	return dt == DT_BF16 ? "bf16" : dt == DT_F16 ? "f16" : "float";
}

/* Element type by size, for ops that only move bytes. */
static const char *etype(const Graph *g, int id)
{
	const Node *n = &g->node[id];
	int dt = n->dtype == DT_I32 ? DT_I32 : n->kind == VK_WEIGHT ? cuda_wdtype(g, id) : g->cuda.act;
	return dtype_size(dt) == 2 ? "unsigned short" : "unsigned int";
}


static void w_start(Wr *w, int node)
{
	memset(w, 0, sizeof *w);
	w->L.node = node;
	w->L.tmin = 1, w->L.tmax = 1 << 30;
	w->L.block = 256;
	for (int i = 0; i < 3; i++)
		w->L.grid[i] = sz_const(1);
}

static void w_sep(Wr *w)
{
	if (w->nf++)
		cat(w->formal, sizeof w->formal, ", ");
}

static void w_callsep(Wr *w)
{
	if (w->call[0])
		cat(w->call, sizeof w->call, ", ");
}

/* A buffer argument; outputs are writable, inputs const. */
static void w_buf(Wr *w, const Graph *g, int node, int out, const char *type)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "%s%s *a%d", out ? "" : "const ", type ? type : ctype(g, node), w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = KA_BUF, .s = {.node = node}, .f = out ? 1 : 0};
}

static void w_null(Wr *w)
{
	w_callsep(w);
	cat(w->call, sizeof w->call, "nullptr");
}

/* A constant in the template call that is not a launch argument (an absent member's extent, a unit scale). */
static void w_lit(Wr *w, const char *lit)
{
	w_callsep(w);
	cat(w->call, sizeof w->call, "%s", lit);
}

static void w_size(Wr *w, Size s, int wide)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "%s a%d", wide ? "long long" : "int", w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = wide ? KA_LONG : KA_INT, .s = s};
}

static void w_int(Wr *w, int64_t v) { w_size(w, sz_const(v), 0); }

/* An argument that glmrun fills in at launch (KA_RANK, KA_PDL: an int; KA_P2P: the one-shot allreduce's
** control block when glmrun lets this kernel do the allreduce launched before it, else nullptr). */
static void w_runtime(Wr *w, int kind, const char *type)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "%s a%d", type, w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = (int8_t)kind};
}

/* The rank of the GPU that runs the launch, as an int. */
static void w_rank(Wr *w) { w_runtime(w, KA_RANK, "int"); }

/* 1 when glmrun launches this kernel programmatically (KA_PDL), as the kernel's last argument. */
static void w_pdl(Wr *w) { w_runtime(w, KA_PDL, "int"); }

static void w_float(Wr *w, double f)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "float a%d", w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = KA_FLOAT, .f = f};
}

/* A scratch region of s × s2 elements of `type` (its size in bytes is es). */
static void w_scratch(Wr *w, Size s, Size s2, const char *type, int es)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "%s *a%d", type, w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = KA_SCRATCH, .s = s, .s2 = s2, .f = es};
}

/* A region of s × s2 elements of `type` in the buffer that starts zero and is left zero (KA_ZERO). */
static void w_zero(Wr *w, Size s, Size s2, const char *type, int es)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "%s *a%d", type, w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = KA_ZERO, .s = s, .s2 = s2, .f = es};
}

static void w_rope(Wr *w, int node)
{
	w_sep(w);
	cat(w->formal, sizeof w->formal, "const float *a%d", w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = KA_ROPE, .s = {.node = node}};
}

/* A rope node's cos/sin multiplier (its table goes as a KA_ROPE argument; frequency divisors, which
** glmrun folds into the table, never change the multiplier). */
static float rope_cs(const Node *r)
{
	float *inv = malloc(sizeof(float) * (size_t)(A_rope_rot_dim(r) / 2 + 1)), cs;
	GLM_ASSERT(inv);
	op_rope_table(r, NULL, inv, &cs);
	free(inv);
	return cs;
}

/* The sequence slots of the step's tokens, then S, the rows of one slot in `cache`: every kernel that
** reads or writes a cache takes these last, so one plan serves any number of sequences. */
static void w_seq(Wr *w, const Graph *g, int cache)
{
	GLM_ASSERT(w->L.narg < MAXKARG);
	w_sep(w);
	cat(w->formal, sizeof w->formal, "const int *a%d", w->L.narg);
	w_callsep(w);
	cat(w->call, sizeof w->call, "a%d", w->L.narg);
	w->L.arg[w->L.narg++] = (KArg){.kind = KA_SEQ};
	(void)g;
	w_size(w, sz_dims(cache, 0, 1, 1), 0);
}

/* Templates that call glm_pdl_wait themselves (gemv_core, kernels.cuh): their wrappers do not. */
static int pdl_self_wait(const char *tmpl)
{
	return !strncmp(tmpl, "k_linear_gemv<", 14) || !strncmp(tmpl, "k_gemv_fused<", 13);
}

/* The launch bounds' second figure for the quantized decode kernels (k_qgemv, k_qgemv_fused and the
** MoE ones, 256 threads, 35 KB of static shared memory): three blocks an SM, which shared memory allows
** and registers otherwise would not (up to 126 a thread gives two; ncu, bench/NOTES.md entry 14). */
static int q_min_blocks(const char *tmpl, int block)
{
	if (block == 256 && (!strncmp(tmpl, "k_qgemv_mma<", 12) || !strncmp(tmpl, "k_qgemv_fused_mma<", 18) ||
	                     !strncmp(tmpl, "k_qmoe_up_mma<", 14) || !strncmp(tmpl, "k_qmoe_down_mma<", 16)))
		return 2; /* their blocks' loads in flight take 128 registers (bench/NOTES.md entry 16) */
	return block == 256 && (!strncmp(tmpl, "k_qgemv", 7) || !strncmp(tmpl, "k_qmoe", 6)) ? 3 : 0;
}

/* Emit (or reuse) the wrapper for `tmpl(call)` and record the launch. */
static void w_finish(Em *e, Wr *w, const char *tmpl)
{
	char key[2600];
	int minb = w->minb ? w->minb : q_min_blocks(tmpl, w->L.block);
	char lb[16] = "";
	if (minb)
		snprintf(lb, sizeof lb, ", %d", minb);
	snprintf(key, sizeof key, "%d%s|%s|%s|%s", w->L.block, lb, w->formal, tmpl, w->call);
	int k;
	for (k = 0; k < e->nkeys; k++)
		if (!strcmp(e->keys[k], key))
			break;
	if (k == e->nkeys) {
		if (e->nkeys == e->keycap) {
			e->keycap = e->keycap ? e->keycap * 2 : 64;
			e->keys = realloc(e->keys, sizeof *e->keys * (size_t)e->keycap);
			GLM_ASSERT(e->keys);
		}
		e->keys[e->nkeys++] = strdup(key);
		/* glm_pdl_wait: glmrun may start this kernel before the one before it has finished (kernels.cuh);
		** the decode GEMVs call it themselves, after asking L2 for their first weights */
		appendf(e, "extern \"C\" __global__ void __launch_bounds__(%d%s) glm_k%d(%s) { %s%s%s(%s); }\n",
		        w->L.block, lb, k, w->formal, pdl_self_wait(tmpl) ? "" : "glm_pdl_wait(); ",
		        w->L.smem ? "extern __shared__ __align__(128) unsigned char glm_dsm[]; " : "", tmpl, w->call);
	}
	w->L.kernel = arena_printf(e->g->A, "glm_k%d", k);
	if (e->nl == e->lcap) {
		e->lcap = e->lcap ? e->lcap * 2 : 256;
		e->l = realloc(e->l, sizeof *e->l * (size_t)e->lcap);
		GLM_ASSERT(e->l);
	}
	e->l[e->nl++] = w->L;
}

/* Record a collective launch (LK_ALLREDUCE or LK_ALLGATHER): no wrapper, glmrun runs it through NCCL. */
static void w_collective(Em *e, Wr *w, int kind)
{
	w->L.kind = (int8_t)kind;
	w->L.kernel = NULL;
	w->L.block = 1;
	if (e->nl == e->lcap) {
		e->lcap = e->lcap ? e->lcap * 2 : 256;
		e->l = realloc(e->l, sizeof *e->l * (size_t)e->lcap);
		GLM_ASSERT(e->l);
	}
	e->l[e->nl++] = w->L;
}

/*
** An allgather along axis ax. NCCL lays the ranks' parts one after another, which is the gathered tensor
** itself when only dims of 1 (and T, at T = 1) precede the axis: the decode step's vocab-parallel logits
** [1, V/tp] gather in place. Otherwise the parts go to scratch and k_gather_interleave puts each in its
** place along the axis.
*/
static void emit_allgather(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	int x = n->in[0], ax = (int)A_allgather_axis(n), tp = (int)A_allgather_ranks(n);
	const Node *in = &g->node[x];
	int64_t lead = 1;
	int lead_t = 0;
	for (int i = 0; i < ax; i++) {
		if (in->dim[i] == DIM_T)
			lead_t = 1;
		else
			lead *= in->dim[i] < 0 ? 2 : in->dim[i]; /* DIM_S: never 1 */
	}
	const char *E = etype(g, id);
	int es = !strcmp(E, "unsigned short") ? 2 : 4;
	Wr w;
	if (lead == 1) {
		w_start(&w, id);
		w_buf(&w, g, id, 1, NULL), w_buf(&w, g, x, 0, NULL), w_size(&w, sz_numel(g, x, 1), 1);
		if (lead_t)
			w.L.tmax = 1;
		w_collective(e, &w, LK_ALLGATHER);
		if (!lead_t)
			return;
	}
	w_start(&w, id);
	w_scratch(&w, sz_numel(g, x, 1), sz_const(tp), E, es);
	w_buf(&w, g, x, 0, NULL), w_size(&w, sz_numel(g, x, 1), 1);
	if (lead == 1)
		w.L.tmin = 2;
	w_collective(e, &w, LK_ALLGATHER);
	int tmin = w.L.tmin;
	char t[256];
	w_start(&w, id);
	w.L.tmin = tmin;
	w_buf(&w, g, id, 1, E), w_scratch(&w, sz_numel(g, x, 1), sz_const(tp), E, es);
	w_size(&w, sz_dims(x, 0, ax, 1), 1), w_size(&w, sz_dims(x, ax, in->ndim, 1), 1), w_int(&w, tp);
	w.L.grid[0] = sz_numel(g, id, 256);
	snprintf(t, sizeof t, "k_gather_interleave<%s>", E);
	w_finish(e, &w, t);
}

static const char *bool_s(int b) { return b ? "true" : "false"; }

/* The block size of a type the quant.cuh kernels read, or 0 (select.c decides which weights stay in blocks). */
#define q_blck quant_gpu_block

/* The resident type of a weight node (ctype's view, without the Em). */
static int wq_node(const Graph *g, int node)
{
	int lo = 0, hi = g->nw - 1; /* the bindings are in node order (verify) */
	while (g->cuda.wq && lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		if (g->w[mid].node == node)
			return g->cuda.wq[mid];
		if (g->w[mid].node < node)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* One k_qgemv_tc launch as selected (below, with the decode GEMV groups). */
static void emit_qtc(Em *e, Wr *w, const KSel *r, const char *NW, int has_nw, int epi);

/* A resident-weight linear's k_qgemv_tc launch (select.c's r): k_gemv_tc's argument list for one member. */
static void emit_qlinear_tc(Em *e, int id, const KSel *r, int swiglu)
{
	Graph *g = e->g;
	const Node *n = &g->node[id], *xs = &g->node[n->in[0]];
	int x = n->in[0], wt = n->in[1], bias = n->nin > 2 ? n->in[2] : -1;
	int64_t K = g->node[wt].dim[1], N = g->node[wt].dim[0];
	Wr w;
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL), w_null(&w), w_null(&w), w_null(&w);
	w_buf(&w, g, wt, 0, "unsigned char"), w_null(&w), w_null(&w), w_null(&w);
	bias >= 0 && !swiglu ? w_buf(&w, g, bias, 0, NULL) : w_null(&w);
	w_null(&w), w_null(&w), w_null(&w);
	w_buf(&w, g, swiglu ? xs->in[0] : x, 0, NULL);
	swiglu ? w_buf(&w, g, xs->in[1], 0, NULL) : w_null(&w);
	w_null(&w), w_null(&w), w_null(&w); /* nw, hs, r */
	w_size(&w, sz_numel(g, x, K), 0), w_int(&w, K), w_int(&w, N), w_lit(&w, "0"), w_lit(&w, "0"), w_lit(&w, "0");
	w_lit(&w, "0.0f"), w_lit(&w, "1.0f"), w_lit(&w, "1.0f"), w_lit(&w, "1.0f"), w_lit(&w, "1.0f");
	emit_qtc(e, &w, r, "bf16", 0, 0);
}

/* A resident-weight linear's k_qgemv or k_qgemv_mma launch (one token, or up to 8 rows). */
static void emit_qlinear_gemv(Em *e, int id, const KSel *r, int swiglu)
{
	Graph *g = e->g;
	const Node *n = &g->node[id], *xs = &g->node[n->in[0]];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int x = n->in[0], wt = n->in[1], bias = n->nin > 2 ? n->in[2] : -1;
	int64_t K = g->node[wt].dim[1], N = g->node[wt].dim[0];
	char t[256];
	Wr w;
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL);
	if (swiglu)
		w_buf(&w, g, xs->in[0], 0, NULL), w_buf(&w, g, xs->in[1], 0, NULL);
	else
		w_buf(&w, g, x, 0, NULL), w_null(&w);
	w_buf(&w, g, wt, 0, "unsigned char");
	if (bias >= 0 && !swiglu)
		w_buf(&w, g, bias, 0, NULL);
	else
		w_null(&w);
	w_size(&w, sz_numel(g, x, K), 0), w_int(&w, K), w_int(&w, N);
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.grid[0] = sz_const(r->grid);
	if (r->kern == SK_QGEMV_MMA)
		snprintf(t, sizeof t, "k_qgemv_mma<%s, %d, %d, %s, %s>", A, r->qt[0], r->split[0], bool_s(bias >= 0 && !swiglu),
		         bool_s(swiglu));
	else
		snprintf(t, sizeof t, "k_qgemv<%s, %d, 2, %d, %d, %s, %s>", A, r->qt[0], r->split[0], r->tr,
		         bool_s(bias >= 0 && !swiglu), bool_s(swiglu));
	w_finish(e, &w, t);
}

/* Start a launch of linear id with the plain argument list of k_linear_gemv, k_linear_gemm and
** k_qlinear_gemm: y, x, W (as wtype; NULL: its own type), the bias or null, x's rows, K, N. */
static void w_linear(Wr *w, const Graph *g, int id, const char *wtype)
{
	const Node *n = &g->node[id];
	int x = n->in[0], wt = n->in[1], bias = n->nin > 2 ? n->in[2] : -1;
	int64_t K = g->node[wt].dim[1], N = g->node[wt].dim[0];
	w_start(w, id);
	w_buf(w, g, id, 1, NULL), w_buf(w, g, x, 0, NULL), w_buf(w, g, wt, 0, wtype);
	bias >= 0 ? w_buf(w, g, bias, 0, NULL) : w_null(w);
	w_size(w, sz_numel(g, x, K), 0), w_int(w, K), w_int(w, N);
}

/* A linear's tiled GEMM (k_linear_gemm, k_gemm_tc on the tensor cores, or k_qlinear_gemm over blocks) for
** the steps past its GEMVs: 64 token rows a block, 128 for k_gemm_tc. */
static void emit_linear_gemm(Em *e, int id, const KSel *r)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int x = n->in[0], wt = n->in[1], bias = n->nin > 2 ? n->in[2] : -1;
	char t[256];
	Wr w;
	w_linear(&w, g, id, r->kern == SK_QLINEAR_GEMM ? "unsigned char" : NULL);
	w.L.tmin = r->tmin;
	w.L.grid[0] = sz_const(r->grid);
	w.L.grid[1] = sz_numel(g, x, g->node[wt].dim[1] * (r->kern == SK_GEMM_TC ? 128 : 64));
	if (r->kern == SK_GEMM_TC)
		snprintf(t, sizeof t, "k_gemm_tc<%s>", bool_s(bias >= 0));
	else if (r->kern == SK_QLINEAR_GEMM)
		snprintf(t, sizeof t, "k_qlinear_gemm<%s, %d, %s>", A, r->qt[0], bool_s(bias >= 0));
	else
		snprintf(t, sizeof t, "k_linear_gemm<%s, %s, %s>", A, ctype(g, wt), bool_s(bias >= 0));
	w_finish(e, &w, t);
}

/* A float linear's k_linear_gemv launch (one token row, or 8). */
static void emit_linear_gemv(Em *e, int id, const KSel *r)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int wt = n->in[1], bias = n->nin > 2 ? n->in[2] : -1;
	char t[256];
	Wr w;
	w_linear(&w, g, id, NULL);
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.block = r->block;
	w.L.grid[0] = sz_const(r->grid);
	w_pdl(&w);
	snprintf(t, sizeof t, "k_linear_gemv<%s, %s, %s, %d, %d>", A, ctype(g, wt), bool_s(bias >= 0), r->rb, r->tr);
	w_finish(e, &w, t);
}

/* A linear's own launches, as select.c chose them (its records, in launch order). */
static int emit_linear(Em *e, int id)
{
	const Graph *g = e->g;
	const Node *xs = &g->node[g->node[id].in[0]];
	int swiglu = xs->fuse_pattern == FUSE_SWIGLU_GEMV && xs->fused_into == id;
	for (int i = e->sel_node[id]; i >= 0 && i < g->nsel && g->sel[i].fk < 0 && g->sel[i].node == id; i++) {
		const KSel *r = &g->sel[i];
		switch (r->kern) {
		case SK_QGEMV_TC: emit_qlinear_tc(e, id, r, swiglu); break;
		case SK_QGEMV: case SK_QGEMV_MMA: emit_qlinear_gemv(e, id, r, swiglu); break;
		case SK_QLINEAR_GEMM: case SK_LINEAR_GEMM: case SK_GEMM_TC: emit_linear_gemm(e, id, r); break;
		case SK_LINEAR_GEMV: emit_linear_gemv(e, id, r); break;
		default: GLM_ASSERT(!"unknown selected kernel for a linear");
		}
	}
	return 0;
}



/* An embedding lookup in a resident table: the looked-up rows dequantized. */
static int emit_qembedding(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	int tab = n->in[0], ids = n->in[1];
	char t[128];
	Wr w;
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, tab, 0, "unsigned char"), w_buf(&w, g, ids, 0, NULL);
	w_size(&w, sz_numel(g, ids, 1), 0), w_int(&w, g->node[tab].dim[1]);
	w.L.grid[0] = sz_const((g->node[tab].dim[1] + 255) / 256);
	w.L.grid[1] = sz_numel(g, ids, 1);
	snprintf(t, sizeof t, "k_qembedding<%s, %d>", g->cuda.act == DT_BF16 ? "bf16" : "float", e->wq[tab]);
	w_finish(e, &w, t);
	return 0;
}

/*
** Steps of at least this many tokens run a bf16 plan's routed experts as a grouped GEMM on the tensor
** cores (ops/moe_tc.cuh); smaller ones keep k_moe_up and k_moe_down. Those read an expert's rows once per
** (token, slot): about T·k·3·C·F·2 bytes a layer (Flash at 32 tokens: 128 slots, 2.4 GB). The grouped
** GEMM reads each chosen expert's rows once per row tile (at 32 tokens about 55 of Flash's 64 experts,
** 1.0 GB), a block a tile (moe_tc_rows), and a tile of a few rows costs the tensor cores one 16-row
** slice of its eight. Measured on GLM-4.7-Flash's decode steps (H100, bench/NOTES.md 67): the old pair
** is faster at 9 tokens (19.0 against 20.4 ms), the grouped GEMM from 12 (21.9 against 23.0; at 24 tokens
** 31.2 against 41.3). Experts kept in blocks take the same threshold, unmeasured: the grouped GEMM
** dequantizes every staged value (q_elem) on the CUDA cores.
*/
#define MOE_TC_TMIN 12

/* The first step size moe_ffn node id takes the grouped GEMM at: MOE_TC_TMIN, or past the steps whose
** down projection is fused (FK_MOE_DOWN), which need the older first half. */
static int moe_tc_from(const Em *e, int id) { return e->tail_tmin[id] > MOE_TC_TMIN ? e->tail_tmin[id] : MOE_TC_TMIN; }

static int moe_tc_ok(const Em *e, const Node *n);
static void emit_moe_tc(Em *e, int id);

/* Routed experts over resident gate/up/down: k_qmoe_up then k_qmoe_down, through the same scratch
** region as the float kernels; steps of MOE_TC_TMIN tokens or more of a bf16 plan take the grouped GEMM
** (emit_moe_tc) where moe_tc_ok allows. */
static int emit_qmoe(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int x = n->in[0], ids = n->in[1], wt = n->in[2], ga = n->in[3], up = n->in[4], dn = n->in[5];
	int64_t C = g->node[x].dim[1], Fd = g->node[ga].dim[1], K = g->node[ids].dim[1];
	Size T = sz_dims(x, 0, 1, 1), KF = sz_const(K * Fd);
	char t[128];
	Wr w;
	w_start(&w, id);
	w_scratch(&w, T, KF, "float", 4);
	w_buf(&w, g, x, 0, NULL), w_buf(&w, g, ids, 0, NULL);
	w_buf(&w, g, ga, 0, "unsigned char"), w_buf(&w, g, up, 0, "unsigned char");
	w_int(&w, C), w_int(&w, Fd), w_int(&w, K);
	int tc = moe_tc_ok(e, n);
	if (tc)
		w.L.tmax = moe_tc_from(e, id) - 1;
	if (e->wq[ga] == QT_Q4_K && e->wq[up] == QT_Q4_K) { /* the tensor-core kernel: 64 f a block */
		w.L.grid[0] = sz_const((Fd + 63) / 64), w.L.grid[1] = sz_const(K), w.L.grid[2] = T;
		snprintf(t, sizeof t, "k_qmoe_up_mma<%s>", A);
	} else {
		w.L.grid[0] = sz_const((Fd + 7) / 8), w.L.grid[1] = sz_const(K), w.L.grid[2] = T;
		snprintf(t, sizeof t, "k_qmoe_up<%s, %d, %d>", A, e->wq[ga], e->wq[up]);
	}
	w_finish(e, &w, t);
	w_start(&w, id);
	w.L.tmin = e->tail_tmin[id]; /* small steps may run the fused down projection (FK_MOE_DOWN) */
	if (tc)
		w.L.tmax = moe_tc_from(e, id) - 1;
	w_buf(&w, g, id, 1, NULL);
	w_scratch(&w, T, KF, "float", 4);
	w_buf(&w, g, ids, 0, NULL), w_buf(&w, g, wt, 0, NULL), w_buf(&w, g, dn, 0, "unsigned char");
	w_int(&w, C), w_int(&w, Fd), w_int(&w, K);
	w.L.grid[0] = sz_const((C + 15) / 16), w.L.grid[1] = T;
	snprintf(t, sizeof t, "k_qmoe_down<%s, %d>", A, e->wq[dn]);
	w_finish(e, &w, t);
	if (tc)
		emit_moe_tc(e, id);
	return 0;
}

/* glmrun's helpers, by fixed name: glm_qdequant_<id> (blocks to the activation type, for converted
** random weights and cuBLASLt prefill) for each block type with kernels among the plan's weights, and
** for random plans the generators glm_qrand_<id> and glm_rand_{f32,bf16,f16}. */
static void emit_qhelpers(Em *e)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const char *wf = graph_meta(g, "weights.format");
	int random = wf && !strcmp(wf, "random"), seen[QT_COUNT] = {0};
	for (int i = 0; i < g->nw; i++) {
		int q = g->w[i].qtype;
		if (g->w[i].dtype != DT_Q || !q_blck(q) || seen[q])
			continue;
		seen[q] = 1;
		appendf(e, "extern \"C\" __global__ void __launch_bounds__(256) glm_qdequant_%d(%s *y, const unsigned char *w, "
		        "long long n, int K) { k_qdequant<%s, %d>(y, w, n, K); }\n", q, A, A, q);
		if (random)
			appendf(e, "extern \"C\" __global__ void __launch_bounds__(256) glm_qrand_%d(unsigned char *d, long long rows, "
			        "int bpr, long long stride, unsigned long long seed, long long K, long long part, long long inner, "
			        "int tp, int rank, int cparts, int crank) { k_qrand<%d>(d, rows, bpr, stride, seed, K, part, inner, "
			        "tp, rank, cparts, crank); }\n", q, q);
	}
	static const char *ft[3][2] = {{"f32", "float"}, {"bf16", "bf16"}, {"f16", "f16"}};
	for (int i = 0; random && i < 3; i++)
		appendf(e, "extern \"C\" __global__ void __launch_bounds__(256) glm_rand_%s(%s *d, long long n, unsigned long "
		        "long seed, int cols, int vec, long long part, long long inner, int tp, int rank) { k_rand_float<%s>(d, "
		        "n, seed, cols, vec, part, inner, tp, rank); }\n", ft[i][0], ft[i][1], ft[i][1]);
}

/* Steps of up to this many tokens run an mla node's attention split over the context (k_mla_split);
** larger steps fill the GPU with one k_mla block per (head, token). 16: k_mla's one block per head and
** token walking its whole context was the slowest part of a 16-sequence step (bench/NOTES.md entries 49
** and 51). The range states' scratch grows with the step's tokens (per token the same
** as before: 16 ranges of 20 heads × 512 floats for GLM-4.7-Flash). */
#define MLA_SPLIT_TMAX 16

/* A prompt chunk of at least this many rows of one sequence runs a dense mla node expanded (k_mla_xkv,
** k_mla_xattn: ops/prefill.cuh says why and what it costs); smaller or mixed steps stay absorbed. */
#define MLA_X_TMIN 64

/* Launch records [from, e->nl) that reach steps of MLA_X_TMIN rows become LAUNCH_MULTI_SEQ there (the
** part below, if any, stays as it was, just before it): the absorbed MLA's kernels, which a one-sequence
** chunk of that size replaces by the expanded ones. */
static void split_multi_seq(Em *e, int from)
{
	for (int i = from; i < e->nl; i++) {
		Launch *l = &e->l[i];
		if (l->tmax < MLA_X_TMIN || (l->flags & LAUNCH_MULTI_SEQ))
			continue;
		if (l->tmin >= MLA_X_TMIN) {
			l->flags |= LAUNCH_MULTI_SEQ;
			continue;
		}
		if (e->nl == e->lcap) {
			e->lcap = e->lcap ? e->lcap * 2 : 256;
			e->l = realloc(e->l, sizeof *e->l * (size_t)e->lcap);
			GLM_ASSERT(e->l);
		}
		memmove(&e->l[i + 2], &e->l[i + 1], sizeof *e->l * (size_t)(e->nl - i - 1));
		e->nl++;
		e->l[i + 1] = e->l[i];
		e->l[i].tmax = MLA_X_TMIN - 1;
		e->l[i + 1].tmin = MLA_X_TMIN, e->l[i + 1].flags |= LAUNCH_MULTI_SEQ;
		i++;
	}
}

/* The expanded path's output slice a block keeps (k_mla_xattn's DS): the whole value head up to
** MLA_X_DSMAX (256: a block forms each score once for GLM-4.7-Flash's 256-wide values; a glmc built with
** -DMLA_X_DSMAX=128 prefilled 8K tokens in 788 ms against 638, bench/NOTES.md 65). */
#ifndef MLA_X_DSMAX
#define MLA_X_DSMAX 256
#endif
static int mla_x_ds(int64_t Dv)
{
	for (int ds = MLA_X_DSMAX; ds >= 16; ds /= 2)
		if (Dv % ds == 0)
			return ds;
	return 0;
}

/* The padded score width of the expanded path (k_mla_xattn's DK). */
static int64_t mla_x_dk(int64_t Dn, int64_t Dr) { return (Dn + Dr + 15) / 16 * 16; }

/* Which dense mla nodes prefill a one-sequence chunk expanded: bf16 plans whose query preparation and value
** absorb were fused (FK_MLA_Q, FK_MLA_OUT: they name q before its split, W_UK, the rotated q_pe, W_UV and
** the output), with W_UK and W_UV as bf16 rows [H, Dn, L] and [H, Dv, L] (Hugging Face's kv_b slots), or
** W_UK as [H, L, Dn] (GGUF's split attn_k_b, mla_q.wuk_t), and shapes the kernels take. The absorbed query's
** nodes (slice, permute, matmul W_UK, permute, concat) then serve the absorbed launches only. */
static void mla_x_prepare(Em *e)
{
	Graph *g = e->g;
	for (int i = 0; i < g->n; i++)
		e->mla_xq[i] = -1, e->absorb_only[i] = 0;
	if (!e->x_mla || g->cuda.act != DT_BF16)
		return;
	for (int k = 0; k < g->nfk; k++) {
		const FuseKernel *f = &g->fk[k];
		if (f->kind != FK_MLA_OUT)
			continue;
		int M = f->m[0], qk = -1;
		const Node *n = &g->node[M];
		for (int j = 0; j < g->nfk; j++)
			if (g->fk[j].kind == FK_MLA_Q && g->fk[j].m[0] == M)
				qk = j;
		if (qk < 0 || n->nin > 4)
			continue;
		const FuseKernel *q = &g->fk[qk];
		int wk = q->mla_q.wuk, wv = f->mla_out.wuv, q3 = q->mla_q.q, R = q->mla_q.rope;
		const Node *K = &g->node[wk], *V = &g->node[wv], *Q = &g->node[q3];
		int64_t H = A_mla_heads(n), L = A_mla_dv(n), Dk = A_mla_dk(n), Dr = Dk - L, kt = q->mla_q.wuk_t;
		if (K->ndim != 3 || V->ndim != 3 || Q->ndim != 3 || K->dim[0] != H || V->dim[0] != H ||
		    K->dim[kt ? 1 : 2] != L || V->dim[2] != L || Q->dim[1] != H || e->wq[wk] >= 0 || e->wq[wv] >= 0 ||
		    cuda_wdtype(g, wk) != DT_BF16 || cuda_wdtype(g, wv) != DT_BF16)
			continue;
		int64_t Dn = K->dim[kt ? 2 : 1], Dv = V->dim[1], DK = mla_x_dk(Dn, Dr), DS = mla_x_ds(Dv);
		int64_t smem = (64 + 2 * 32) * (DK + 8) * 2 + 2 * 32 * (DS + 8) * 2;
		if (Q->dim[2] != Dn + Dr || Dn % 8 || Dr % 8 || L % 8 || Dk % 8 || DK > 256 || !DS || smem > e->t.smem_block ||
		    g->node[R].ndim != 2 || g->node[R].dim[1] != H * Dr)
			continue;
		e->mla_xq[M] = qk;
		int cat = q->mla_q.concat, p2 = g->node[cat].in[0], mm = g->node[p2].in[0], p1 = g->node[mm].in[0];
		int absorbed[] = {g->node[p1].in[0], p1, mm, p2, cat, n->in[0]};
		for (size_t a = 0; a < sizeof absorbed / sizeof absorbed[0]; a++)
			e->absorb_only[absorbed[a]] = 1;
	}
}

/*
** The expanded MLA prefill of one sequence's chunk (LAUNCH_ONE_SEQ, MLA_X_TMIN rows and up), after the
** value absorb's launches at the same host: k_mla_xkv expands the sequence's cached rows into two scratch
** regions (keys' no-rope parts [S, H·Dn], values [S, H·Dv]), and k_mla_xattn, declaring the same regions
** in the same order (so the same bytes), attends over them and writes the value absorb's output.
*/
static void emit_mla_x(Em *e, const FuseKernel *f, const FuseKernel *q)
{
	Graph *g = e->g;
	int M = f->m[0];
	const Node *n = &g->node[M];
	int cache = n->in[2], pos = n->in[3], wk = q->mla_q.wuk, wv = f->mla_out.wuv, q3 = q->mla_q.q, R = q->mla_q.rope;
	int kt = q->mla_q.wuk_t;
	int64_t H = A_mla_heads(n), L = A_mla_dv(n), Dk = A_mla_dk(n), Dr = Dk - L, Dn = g->node[wk].dim[kt ? 2 : 1];
	int64_t Dv = g->node[wv].dim[1], DK = mla_x_dk(Dn, Dr), DS = mla_x_ds(Dv);
	Size S = sz_dims(cache, 0, 1, 1), T = sz_numel(g, pos, 1);
	char t[256];
	Wr w;
	w_start(&w, f->host);
	w_scratch(&w, S, sz_const(H * Dn), "bf16", 2), w_scratch(&w, S, sz_const(H * Dv), "bf16", 2);
	w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, wk, 0, NULL), w_buf(&w, g, wv, 0, NULL), w_buf(&w, g, pos, 0, NULL);
	w_int(&w, H), w_int(&w, Dn), w_int(&w, Dv), w_int(&w, L), w_int(&w, Dk);
	w_seq(&w, g, cache);
	w_size(&w, T, 0);
	w.L.grid[0] = sz_const((H * (Dn > Dv ? Dn : Dv) + 127) / 128), w.L.grid[1] = sz_dims(cache, 0, 1, 128);
	w.L.grid[2] = sz_const(2);
	w.L.tmin = MLA_X_TMIN, w.L.flags = LAUNCH_ONE_SEQ;
	w_finish(e, &w, kt ? "k_mla_xkv<true>" : "k_mla_xkv<false>");

	w_start(&w, f->host);
	w_buf(&w, g, f->mla_out.out, 1, NULL), w_buf(&w, g, q3, 0, NULL), w_buf(&w, g, R, 0, NULL);
	w_scratch(&w, S, sz_const(H * Dn), "bf16", 2), w_scratch(&w, S, sz_const(H * Dv), "bf16", 2);
	w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, pos, 0, NULL);
	w_int(&w, H), w_int(&w, Dn), w_int(&w, Dr), w_int(&w, Dv), w_int(&w, L), w_int(&w, Dk);
	w_float(&w, A_mla_scale(n));
	w_seq(&w, g, cache);
	w_size(&w, T, 0);
	w_callsep(&w);
	cat(w.call, sizeof w.call, "glm_dsm");
	w.L.grid[0] = sz_const(H), w.L.grid[1] = sz_numel(g, pos, 64), w.L.grid[2] = sz_const(Dv / DS);
	w.L.block = 128;
	w.L.smem = (int)((64 + 2 * 32) * (DK + 8) * 2 + 2 * 32 * (DS + 8) * 2);
	w.L.tmin = MLA_X_TMIN, w.L.flags = LAUNCH_ONE_SEQ;
	snprintf(t, sizeof t, "k_mla_xattn<%d, %d>", (int)DK, (int)DS);
	w_finish(e, &w, t);
}

/* Whether mla node id's value absorb (FK_MLA_OUT, hosted at id: its launches follow the attention's)
** merges the split attention's range states itself, so that k_mla_split stops after writing them. The
** merging absorb's limits (dv <= 512, 64 ranges) are the mla node's own: its emission refuses dv > 512. */
static int mla_absorb_merges(const Graph *g, int id)
{
	for (int k = 0; k < g->nfk; k++)
		if (g->fk[k].kind == FK_MLA_OUT && g->fk[k].m[0] == id && g->fk[k].host == id &&
		    g->fk[k].tmax >= MLA_SPLIT_TMAX)
			return 1;
	return 0;
}

/* The split attention's two scratch regions (range accumulators, then (m, l) pairs), declared alike by
** k_mla_split and the absorb that merges them: a launch's regions are laid out in their order. */
static void w_mla_states(Wr *w, Size T, int64_t H, int64_t Dv, int NS)
{
	w_scratch(w, T, sz_const(NS * H * Dv), "float", 4), w_scratch(w, T, sz_const(NS * H * 2), "float", 4);
}

/* k_mla_split_tc's geometry for mla node id (the tiles of k_dsa_tc: DS output dims a warp, NZ slices and RG
** groups of 16 heads a block, its dynamic shared memory), or 0 when it does not apply: not --fallback
** mla_split_tc, a bf16 plan, a dense node, the value absorb merging the ranges (k_mla_split_tc writes
** states only), and shapes the tiles take. */
static int mla_split_tc_geom(const Em *e, int id, int *DS, int *NZ, int *RG, int *smem)
{
	const Graph *g = e->g;
	const Node *n = &g->node[id];
	int64_t Dk = A_mla_dk(n), Dv = A_mla_dv(n), H = A_mla_heads(n);
	/* a DSA selection's decode (GLM-5) keeps k_mla_split: the kernel takes one (tests/simt/test_prefill), but
	** only the dense case is measured (GLM-4.7-Flash, bench/NOTES.md 65) */
	if (!e->x_split_tc || g->cuda.act != DT_BF16 || !mla_absorb_merges(g, id) || Dk % 8 || Dv % 32 || Dv > Dk ||
	    n->nin > 4)
		return 0;
	*DS = Dv % 128 == 0 ? 128 : Dv % 64 == 0 ? 64 : 32;
	*NZ = (Dv / *DS) % 4 == 0 ? 4 : (Dv / *DS) % 2 == 0 ? 2 : 1;
	*RG = H >= 32 ? 2 : (int)((H + 15) / 16); /* GLM-4.7-Flash's 20 heads: one group of 32 rows; GLM-5's 64: two */
	*smem = (int)((16 * *RG + 2 * 32) * (Dk + 8) * 2);
	return *smem + *RG * 2304 + 264 <= e->t.smem_block;
}

/* The ranges of mla node id's split attention: k_mla_split_tc's 64 (the merging absorb's most), else
** k_mla_split's 64 / HB. */
static int mla_split_ns(const Em *e, int id)
{
	int DS, NZ, RG, smem;
	return mla_split_tc_geom(e, id, &DS, &NZ, &RG, &smem) ? 64 : 64 / mla_split_hb(A_mla_heads(&e->g->node[id]));
}

/*
** The split (flash-decoding) MLA attention of a small step, one launch: k_mla_split writes each range's
** softmax state into two scratch regions, and the last block of each (token, head group) merges them,
** found through a counter in a KA_ZERO region; or, when the node's value absorb follows
** (mla_absorb_merges), it stops at the states and every block of the absorb merges its head's (one
** merging block was a large part of the launch: bench/NOTES.md entry 23). The geometry is fixed here, for any
** position: NS ranges of the candidates per token (blocks past a token's ranges exit at once), heads in
** groups of HB = mla_split_hb(H) (ops/gemv_shape.h; GLM-4.7-Flash's 20 heads: 5 groups of 4; GLM-5's 64:
** 16; GLM-5 at tp 8, 8 heads per GPU: 4 groups of 2), NS = 64 / HB (128 KiB of states at dv 512).
*/
static void emit_mla_split(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int q = n->in[0], cache = n->in[2], pos = n->in[3], sel = n->nin > 4 ? n->in[4] : -1;
	int64_t H = A_mla_heads(n), Dv = A_mla_dv(n);
	int HB = mla_split_hb(H), HG = (int)((H + HB - 1) / HB), NS = 64 / HB, merge = !mla_absorb_merges(g, id);
	Size T = sz_numel(g, pos, 1);
	char t[256];
	Wr w;
	int DS, NZ, RG, smem;
	if (mla_split_tc_geom(e, id, &DS, &NZ, &RG, &smem)) { /* the tensor cores' split: states for the absorb */
		NS = mla_split_ns(e, id);
		w_start(&w, id);
		w.L.tmax = MLA_SPLIT_TMAX;
		w_mla_states(&w, T, H, Dv, NS);
		w_buf(&w, g, q, 0, NULL), w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, pos, 0, NULL);
		if (sel >= 0)
			w_buf(&w, g, sel, 0, NULL), w_int(&w, g->node[sel].dim[1]), w_int(&w, g->node[sel].op == OP_INDEXER);
		else
			w_null(&w), w_int(&w, 0), w_int(&w, 0);
		w_int(&w, H), w_int(&w, A_mla_dk(n)), w_int(&w, Dv), w_float(&w, A_mla_scale(n));
		w_seq(&w, g, cache);
		w_callsep(&w);
		cat(w.call, sizeof w.call, "glm_dsm");
		w.L.grid[0] = sz_const(NS);
		w.L.grid[1] = sz_const(Dv / (DS * NZ) * ((H + 16 * RG - 1) / (16 * RG)));
		w.L.grid[2] = T;
		w.L.block = 32 * RG * NZ;
		w.L.smem = smem;
		snprintf(t, sizeof t, "k_mla_split_tc<%d, %d, %d>", DS, NZ, RG);
		w_finish(e, &w, t);
		return;
	}
	w_start(&w, id);
	w.L.tmax = MLA_SPLIT_TMAX;
	merge ? w_buf(&w, g, id, 1, NULL) : w_null(&w); /* y: not written when the absorb merges */
	w_mla_states(&w, T, H, Dv, NS);
	merge ? w_zero(&w, T, sz_const(HG), "int", 4) : w_null(&w);
	w_buf(&w, g, q, 0, NULL), w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, pos, 0, NULL);
	/* an indexer's selection lists its visible rows first (k_indexer_select), so the kernel deals out
	** only those; any other selection is taken in any order */
	if (sel >= 0)
		w_buf(&w, g, sel, 0, NULL), w_int(&w, g->node[sel].dim[1]), w_int(&w, g->node[sel].op == OP_INDEXER);
	else
		w_null(&w), w_int(&w, 0), w_int(&w, 0);
	w_int(&w, H), w_int(&w, A_mla_dk(n)), w_int(&w, Dv), w_float(&w, A_mla_scale(n));
	w_seq(&w, g, cache);
	w.L.grid[0] = sz_const(NS), w.L.grid[1] = sz_const(HG), w.L.grid[2] = T;
	snprintf(t, sizeof t, "k_mla_split<%s, %d, %s>", A, HB, bool_s(merge));
	w_finish(e, &w, t);
}

/* The allreduce whose output add id (Pattern A) may form itself (k_add_rmsnorm_ar: glmrun then skips the
** allreduce's launch and runs the one-shot exchange inside the add's kernel), or -1. It must be the launch
** just before, for every step size, of an operand of the same shape, with rows the kernel keeps in
** registers in 16-byte units (N <= RN_REG · 256 = 8192, ops/fused.cuh). */
static int ar_fusable(const Em *e, int id)
{
	const Graph *g = e->g;
	const Node *n = &g->node[id];
	if (!e->nl || e->own_tmin[id] > 1 || n->nin != 2)
		return -1;
	const Launch *l = &e->l[e->nl - 1];
	int ar = l->node;
	if (l->kind != LK_ALLREDUCE || l->inside_next || l->tmin != 1 || l->tmax != 1 << 30)
		return -1;
	if ((n->in[0] == ar) == (n->in[1] == ar) || g->node[ar].dtype == DT_I32)
		return -1;
	int64_t N = n->dim[n->ndim - 1], es = (int64_t)dtype_size(g->cuda.act);
	if (node_numel(&g->node[ar], 1, 1) != node_numel(n, 1, 1) || (N * es) % 16 || N > 8192)
		return -1;
	return ar;
}

/* k_attn_step's row bytes for attention node n (128, 256 or 512: a 16-byte load per lane), or 0 when its
** rows do not suit it (k_attention runs). */
static int attn_step_rowb(const Graph *g, const Node *n)
{
	int64_t rowb = A_attention_head_dim(n) * (int64_t)dtype_size(g->cuda.act);
	int same = A_attention_head_dim(n) == A_attention_v_head_dim(n);
	return same && (rowb == 128 || rowb == 256 || rowb == 512) ? (int)rowb : 0;
}

/* A 1-token step's attention with its rotary and k/v cache writes (the ROPE_KV f, whose kernel then runs
** for larger steps only): ops/fused.cuh's k_attn_step_rope, reading the raw q, k and v. */
static void emit_attn_rope(Em *e, const FuseKernel *f, int rowb)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const Node *at = &g->node[f->attn], *rq = &g->node[f->m[0]], *rk = &g->node[f->m[1]];
	Wr w;
	w_start(&w, f->attn);
	w_buf(&w, g, f->attn, 1, NULL), w_buf(&w, g, at->in[3], 1, NULL), w_buf(&w, g, at->in[4], 1, NULL);
	w_buf(&w, g, rq->in[0], 0, NULL), w_buf(&w, g, rk->in[0], 0, NULL), w_buf(&w, g, at->in[2], 0, NULL);
	w_buf(&w, g, at->in[5], 0, NULL);
	w_rope(&w, f->m[0]), w_rope(&w, f->m[1]), w_float(&w, rope_cs(rq)), w_float(&w, rope_cs(rk));
	w_int(&w, A_attention_heads(at)), w_int(&w, A_attention_kv_heads(at)), w_int(&w, A_rope_rot_dim(rq)),
		w_float(&w, A_attention_scale(at));
	w_seq(&w, g, at->in[3]);
	w.L.grid[0] = sz_const(A_attention_heads(at));
	w.L.block = 512;
	w.L.tmin = w.L.tmax = 1;
	char t[256];
	snprintf(t, sizeof t, "k_attn_step_rope<%s, %d, %s>", A, rowb, bool_s(A_rope_interleaved(rq)));
	w_finish(e, &w, t);
}

/* Heads a block of the split decode attention serves (ops/fused.cuh k_attn_split): the largest divisor of
** the group size H / G up to 8 with HB·D <= 1024 (the block's shared merge area). */
static int attn_split_hb(const Node *n)
{
	int64_t rep = A_attention_heads(n) / A_attention_kv_heads(n), D = A_attention_head_dim(n);
	int hb = 1;
	for (int k = 2; k <= 8; k++)
		if (rep % k == 0 && k * D <= 1024)
			hb = k;
	return hb;
}

/* The split decode attention's ranges a token (gridDim.x): enough that a 1-token step has two blocks an SM
** (NS·H/HB >= 2·sms: one wave where two fit an SM, attn_split_minb; two waves of equal blocks at 8 heads a
** block), at most 256 (the merge's weights, mla_merge_weights). The ranges a token actually uses are fixed
** at run time by its context (attn_split_ranges: 64 rows or more a range), so a short context runs in
** H/HB blocks. */
static int attn_split_ns(const Em *e, const Node *n, int hb)
{
	int64_t hg = A_attention_heads(n) / hb, ns = (2 * (int64_t)e->t.sms + hg - 1) / hg;
	return ns < 1 ? 1 : ns > 256 ? 256 : (int)ns;
}

/* The split attention's launch-bounds blocks an SM: 2 up to 4 heads a block (ptxas then keeps a lane at 128
** registers, spilling at most 8 bytes at 256-dim bf16 heads), else none (8 heads take ~220 registers). */
static int attn_split_minb(int hb) { return hb <= 4 ? 2 : 0; }

/* The split (flash-decoding) attention of decode steps of 1 to 8 tokens (ops/fused.cuh k_attn_split, and
** for a folded 1-token step k_attn_split_rope): grid (NS ranges, H/HB head groups, T), each range's state
** in scratch (T·NS·H·D floats, then T·NS·H (m, l) pairs) and a KA_ZERO counter per (token, head group)
** through which the last block of a group merges. In place of k_attn_step / k_attn_step_rope, whose H
** blocks a step leave most SMs idle at a long context (issue 46); glmc --fallback attn_split keeps those. */
static void emit_attn_split(Em *e, int id, int rowb)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int q = n->in[0], kc = n->in[3], vc = n->in[4], pos = n->in[5], fold = e->rope_fold[id] >= 0;
	int64_t H = A_attention_heads(n), G = A_attention_kv_heads(n), D = A_attention_head_dim(n);
	int hb = attn_split_hb(n), ns = attn_split_ns(e, n, hb);
	Size T = sz_numel(g, pos, 1);
	char t[256];
	Wr w;
	if (fold) {
		const FuseKernel *f = &g->fk[e->rope_fold[id]];
		const Node *rq = &g->node[f->m[0]], *rk = &g->node[f->m[1]];
		w_start(&w, id);
		w_buf(&w, g, id, 1, NULL);
		w_scratch(&w, T, sz_const(ns * H * D), "float", 4), w_scratch(&w, T, sz_const(ns * H * 2), "float", 4);
		w_zero(&w, T, sz_const(H / hb), "int", 4);
		w_buf(&w, g, kc, 1, NULL), w_buf(&w, g, vc, 1, NULL);
		w_buf(&w, g, rq->in[0], 0, NULL), w_buf(&w, g, rk->in[0], 0, NULL), w_buf(&w, g, n->in[2], 0, NULL);
		w_buf(&w, g, pos, 0, NULL);
		w_rope(&w, f->m[0]), w_rope(&w, f->m[1]), w_float(&w, rope_cs(rq)), w_float(&w, rope_cs(rk));
		w_int(&w, H), w_int(&w, G), w_int(&w, A_rope_rot_dim(rq)), w_float(&w, A_attention_scale(n));
		w_seq(&w, g, kc);
		w.L.grid[0] = sz_const(ns), w.L.grid[1] = sz_const(H / hb);
		w.L.tmin = w.L.tmax = 1;
		w.minb = attn_split_minb(hb);
		snprintf(t, sizeof t, "k_attn_split_rope<%s, %d, %d, %s>", A, rowb, hb, bool_s(A_rope_interleaved(rq)));
		w_finish(e, &w, t);
	}
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL);
	w_scratch(&w, T, sz_const(ns * H * D), "float", 4), w_scratch(&w, T, sz_const(ns * H * 2), "float", 4);
	w_zero(&w, T, sz_const(H / hb), "int", 4);
	w_buf(&w, g, q, 0, NULL), w_buf(&w, g, kc, 0, NULL), w_buf(&w, g, vc, 0, NULL), w_buf(&w, g, pos, 0, NULL);
	w_int(&w, H), w_int(&w, G), w_float(&w, A_attention_scale(n));
	w_seq(&w, g, kc);
	w.L.grid[0] = sz_const(ns), w.L.grid[1] = sz_const(H / hb), w.L.grid[2] = T;
	w.L.tmin = 1 + fold, w.L.tmax = 8;
	w.minb = attn_split_minb(hb);
	snprintf(t, sizeof t, "k_attn_split<%s, %d, %d>", A, rowb, hb);
	w_finish(e, &w, t);
}

/* An rmsnorm its add's kernel computes (pattern A): alone only for the steps where a fused GEMV took that add
** over. */
static int emit_norm_alone(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	/* Computed by its add's kernel; where a fused GEMV took that add over for small steps, the norm runs
	** alone for those (unless a fused kernel forms it too: emit_node then drops this launch). */
	int tm = e->own_tmin[e->add_of[id]];
	if (tm <= 1)
		return 0;
	int hw = n->nin > 1;
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL);
	if (hw)
		w_buf(&w, g, n->in[1], 0, NULL);
	else
		w_null(&w);
	w_int(&w, n->dim[n->ndim - 1]), w_float(&w, A_rmsnorm_eps(n));
	w.L.grid[0] = sz_rows(g, id);
	w.L.tmax = tm - 1;
	snprintf(t, sizeof t, "k_rmsnorm<%s, %s, %s>", A, hw ? ctype(g, n->in[1]) : A, bool_s(hw));
	w_finish(e, &w, t);
	return 0;
}

/* Pattern A right after the allreduce ar of one operand: glmrun may do that allreduce inside it
** (k_add_rmsnorm_ar; the allreduce's launch is marked inside_next). */
static int emit_add_norm_ar(Em *e, int id, int ar)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	const Node *nm = &g->node[e->norm_of[id]];
	int hw = nm->nin > 1, other = n->in[0] == ar ? n->in[1] : n->in[0];
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, e->norm_of[id], 1, NULL), w_buf(&w, g, ar, 1, NULL);
	w_buf(&w, g, other, 0, NULL), w_buf(&w, g, g->node[ar].in[0], 0, NULL);
	if (hw)
		w_buf(&w, g, nm->in[1], 0, NULL);
	else
		w_null(&w);
	w_int(&w, n->dim[n->ndim - 1]), w_float(&w, A_rmsnorm_eps(nm)), w_runtime(&w, KA_P2P, "const P2pCtl *");
	w.L.grid[0] = sz_rows(g, id);
	e->l[e->nl - 1].inside_next = 1; /* the allreduce: this launch may do it */
	snprintf(t, sizeof t, "k_add_rmsnorm_ar<%s, %s, %s>", A, hw ? ctype(g, nm->in[1]) : A, bool_s(hw));
	w_finish(e, &w, t);
	return 0;
}

/* Pattern A: the residual sum and its RMSNorm in one pass. */
static int emit_add_norm(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	const Node *nm = &g->node[e->norm_of[id]];
	int hw = nm->nin > 1;
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, e->norm_of[id], 1, NULL);
	w_buf(&w, g, n->in[0], 0, NULL), w_buf(&w, g, n->in[1], 0, NULL);
	if (hw)
		w_buf(&w, g, nm->in[1], 0, NULL);
	else
		w_null(&w);
	w_int(&w, n->dim[n->ndim - 1]), w_float(&w, A_rmsnorm_eps(nm));
	w.L.grid[0] = sz_rows(g, id);
	snprintf(t, sizeof t, "k_add_rmsnorm<%s, %s, %s>", A, hw ? ctype(g, nm->in[1]) : A, bool_s(hw));
	w_finish(e, &w, t);
	return 0;
}

/* An embedding lookup (vocab-parallel: this rank's rows), or the resident table's. */
static int emit_embedding(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int tab = n->in[0], ids = n->in[1];
	if (e->wq[tab] >= 0)
		return emit_qembedding(e, id);
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, tab, 0, NULL), w_buf(&w, g, ids, 0, NULL);
	w_size(&w, sz_numel(g, ids, 1), 0), w_int(&w, g->node[tab].dim[1]);
	if (A_embedding_vocab_parallel(n))
		w_int(&w, g->node[tab].dim[0]), w_rank(&w); /* vocab-parallel: this rank's rows */
	w.L.grid[0] = sz_const((g->node[tab].dim[1] + 255) / 256);
	w.L.grid[1] = sz_numel(g, ids, 1);
	snprintf(t, sizeof t, "%s<%s, %s>", A_embedding_vocab_parallel(n) ? "k_embedding_vp" : "k_embedding", A,
	         ctype(g, tab));
	w_finish(e, &w, t);
	return 0;
}


/* A batched matrix product (k_matmul, or k_matmul_tb with b transposed). */
static int emit_matmul(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int a = n->in[0], b = n->in[1], nd = n->ndim, tb = A_matmul_transpose_b(n) != 0;
	int naxis = tb ? nd - 2 : nd - 1;
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, a, 0, NULL), w_buf(&w, g, b, 0, NULL);
	w_size(&w, sz_dims(a, nd - 2, nd - 1, 1), 0), w_size(&w, sz_dims(a, nd - 1, nd, 1), 0);
	w_size(&w, sz_dims(b, naxis, naxis + 1, 1), 0);
	w.L.grid[0] = sz_dims(b, naxis, naxis + 1, tb ? 8 : 256);
	w.L.grid[1] = sz_dims(a, nd - 2, nd - 1, 1);
	w.L.grid[2] = sz_dims(a, 0, nd - 2, 1);
	snprintf(t, sizeof t, "%s<%s, %s>", tb ? "k_matmul_tb" : "k_matmul", A, ctype(g, b));
	w_finish(e, &w, t);
	return 0;
}

/* MLA attention: the cache write (unless a fused kernel did it), the split attention of small steps, and
** above them k_mla_tc (dense) or k_dsa_tc (a DSA selection) for bf16 plans whose shapes fit, else k_mla. */
static int emit_mla(Em *e, int id, char *err, size_t len)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int q = n->in[0], kv = n->in[1], cache = n->in[2], pos = n->in[3], sel = n->nin > 4 ? n->in[4] : -1;
	if (A_mla_dk(n) > 1024 || A_mla_dv(n) > 512) /* k_mla and k_mla_split keep q and the outputs on chip */
		return seterr(err, len, "mla (%%%d, %s:%d): dk %lld / dv %lld exceed the CUDA kernels' 1024 / 512", id,
		              n->src ? n->src : "?", n->line, (long long)A_mla_dk(n), (long long)A_mla_dv(n));
	if (!e->kv_fused[id]) { /* else the fused latent kernel wrote this step's cache rows */
		w_buf(&w, g, cache, 1, NULL), w_buf(&w, g, kv, 0, NULL), w_buf(&w, g, pos, 0, NULL), w_int(&w, A_mla_dk(n));
		w_seq(&w, g, cache);
		w.L.grid[0] = sz_numel(g, pos, 1);
		snprintf(t, sizeof t, "k_mla_write<%s>", A);
		w_finish(e, &w, t);
	}
	emit_mla_split(e, id);
	/* prefills on the tensor cores when bf16 and its tiles fit: k_mla_tc when dense, k_dsa_tc over a DSA
	** selection (the same tiles, one token's heads a block) */
	int64_t Dk = A_mla_dk(n), Dv = A_mla_dv(n), tc_smem = (64 + 32) * (Dk + 8) * 2;
	int DS = Dv % 128 == 0 ? 128 : Dv % 64 == 0 ? 64 : 32; /* the output dims a block keeps */
	int tc = g->cuda.act == DT_BF16 && Dk % 8 == 0 && Dv % 32 == 0 && Dv <= Dk && tc_smem <= e->t.smem_block;
	/* k_dsa_tc: NZ slices a block (4 for GLM-5's Dv 512), their scores formed once; RG groups of 16 heads
	** (4, or fewer for fewer heads: tp 8's 8 heads of GLM-5 take 1); two key tiles, and the static scores */
	int NZ = (Dv / DS) % 4 == 0 ? 4 : (Dv / DS) % 2 == 0 ? 2 : 1;
	int64_t H = A_mla_heads(n), RG = H >= 64 ? 4 : (H + 15) / 16;
	int64_t dsa_smem = (16 * RG + 2 * 32) * (Dk + 8) * 2;
	if (tc && sel >= 0 && e->x_dsa_tc && dsa_smem + RG * 2304 + 264 <= e->t.smem_block) {
		w_start(&w, id);
		w.L.tmin = MLA_SPLIT_TMAX + 1;
		w_buf(&w, g, id, 1, NULL), w_buf(&w, g, q, 0, NULL), w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, pos, 0, NULL);
		/* an indexer's selection lists its visible rows first (k_indexer_select), as for k_mla_split */
		w_buf(&w, g, sel, 0, NULL), w_int(&w, g->node[sel].dim[1]), w_int(&w, g->node[sel].op == OP_INDEXER);
		w_int(&w, A_mla_heads(n)), w_int(&w, Dk), w_int(&w, Dv), w_float(&w, A_mla_scale(n));
		w_seq(&w, g, cache);
		w_callsep(&w);
		cat(w.call, sizeof w.call, "glm_dsm");
		w.L.grid[0] = sz_numel(g, pos, 1);
		w.L.grid[1] = sz_const(Dv / (DS * NZ));
		w.L.grid[2] = sz_const((H + 16 * RG - 1) / (16 * RG));
		w.L.block = (int)(32 * RG * NZ);
		w.L.smem = (int)dsa_smem;
		snprintf(t, sizeof t, "k_dsa_tc<%d, %d, %d>", DS, NZ, (int)RG);
		w_finish(e, &w, t);
		return 0;
	}
	if (tc && sel < 0) {
		w_start(&w, id);
		w.L.tmin = MLA_SPLIT_TMAX + 1;
		w_buf(&w, g, id, 1, NULL), w_buf(&w, g, q, 0, NULL), w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, pos, 0, NULL);
		w_int(&w, A_mla_heads(n)), w_int(&w, Dk), w_int(&w, Dv), w_float(&w, A_mla_scale(n));
		w_seq(&w, g, cache);
		w_size(&w, sz_numel(g, pos, 1), 0);
		w_callsep(&w);
		cat(w.call, sizeof w.call, "glm_dsm");
		w.L.grid[0] = sz_numel(g, q, 64 * Dk); /* q is [T, H·Dk]: 64 of its rows a block */
		w.L.grid[1] = sz_const(Dv / DS);
		w.L.block = 128;
		w.L.smem = (int)tc_smem;
		snprintf(t, sizeof t, "k_mla_tc<%d>", DS);
		w_finish(e, &w, t);
		if (e->mla_xq[id] >= 0)
			split_multi_seq(e, e->nl - 1);
		return 0;
	}
	w_start(&w, id);
	w.L.tmin = MLA_SPLIT_TMAX + 1;
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, q, 0, NULL), w_buf(&w, g, cache, 0, NULL), w_buf(&w, g, pos, 0, NULL);
	if (sel >= 0)
		w_buf(&w, g, sel, 0, NULL), w_int(&w, g->node[sel].dim[1]);
	else
		w_null(&w), w_int(&w, 0);
	w_int(&w, A_mla_heads(n)), w_int(&w, A_mla_dk(n)), w_int(&w, A_mla_dv(n)), w_float(&w, A_mla_scale(n));
	w_seq(&w, g, cache);
	w.L.grid[0] = sz_const(A_mla_heads(n));
	w.L.grid[1] = sz_numel(g, pos, 1);
	w.L.block = 128;
	snprintf(t, sizeof t, "k_mla<%s>", A);
	w_finish(e, &w, t);
	if (e->mla_xq[id] >= 0)
		split_multi_seq(e, e->nl - 1);
	return 0;
}

/* The sparse-attention indexer: key write, scores, the top-k selection. */
static int emit_indexer(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int q = n->in[0], k = n->in[1], wt = n->in[2], kc = n->in[3], pos = n->in[4];
	Size T = sz_numel(g, pos, 1), S = sz_dims(kc, 0, 1, 1);
	if (!e->kv_fused[id]) { /* else the fused latent kernel wrote this step's key rows */
		w_buf(&w, g, kc, 1, NULL), w_buf(&w, g, k, 0, NULL), w_buf(&w, g, pos, 0, NULL), w_int(&w, A_indexer_dim(n));
		w_seq(&w, g, kc);
		w.L.grid[0] = T;
		snprintf(t, sizeof t, "k_mla_write<%s>", A);
		w_finish(e, &w, t);
	}
	w_start(&w, id);
	w_scratch(&w, T, S, "float", 4);
	w_buf(&w, g, q, 0, NULL), w_buf(&w, g, wt, 0, NULL), w_buf(&w, g, kc, 0, NULL), w_buf(&w, g, pos, 0, NULL);
	w_int(&w, A_indexer_heads(n)), w_int(&w, A_indexer_dim(n)), w_size(&w, S, 0), w_float(&w, A_indexer_scale(n));
	w_seq(&w, g, kc);
	w.L.grid[0] = sz_dims(kc, 0, 1, 8);
	w.L.grid[1] = T;
	/* steps above the decode's take the scores on the tensor cores (bf16, D a multiple of 16 up to 256),
	** unless --fallback indexer_tc */
	int64_t D = A_indexer_dim(n), ismem = (64 + 2 * 64) * (D + 8) * 2;
	int tc = e->x_idx_tc && g->cuda.act == DT_BF16 && D % 16 == 0 && D <= 256 && ismem <= e->t.smem_block;
	if (tc)
		w.L.tmax = MLA_SPLIT_TMAX;
	snprintf(t, sizeof t, "k_indexer_scores<%s>", A);
	w_finish(e, &w, t);
	if (tc) {
		w_start(&w, id);
		w.L.tmin = MLA_SPLIT_TMAX + 1;
		w_scratch(&w, T, S, "float", 4);
		w_buf(&w, g, q, 0, NULL), w_buf(&w, g, wt, 0, NULL), w_buf(&w, g, kc, 0, NULL), w_buf(&w, g, pos, 0, NULL);
		w_int(&w, A_indexer_heads(n)), w_size(&w, S, 0), w_float(&w, A_indexer_scale(n));
		w_seq(&w, g, kc);
		w_size(&w, T, 0);
		w_callsep(&w);
		cat(w.call, sizeof w.call, "glm_dsm");
		w.L.grid[0] = sz_dims(kc, 0, 1, 64);
		w.L.grid[1] = sz_numel(g, pos, 64);
		w.L.block = 128;
		w.L.smem = (int)ismem;
		snprintf(t, sizeof t, "k_indexer_scores_tc<%d>", (int)D);
		w_finish(e, &w, t);
	}
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL), w_scratch(&w, T, S, "float", 4), w_scratch(&w, T, S, "int", 8);
	w_buf(&w, g, pos, 0, NULL), w_size(&w, S, 0), w_int(&w, A_indexer_topk(n));
	w_seq(&w, g, kc);
	w.L.grid[0] = T;
	w.L.block = 256;
	snprintf(t, sizeof t, "k_indexer_select<%s>", A);
	w_finish(e, &w, t);
	return 0;
}

/* MoE routing: each token's experts. */
static int emit_moe_route(Em *e, int id, char *err, size_t len)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int l = n->in[0], b = n->nin > 1 ? n->in[1] : -1;
	if (g->node[l].dim[1] > 1024) { /* k_moe_route keeps a token's choices in shared memory */
		seterr(err, len, "moe_route (%%%d, %s:%d) over %lld experts has no CUDA kernel (at most 1024)", id,
		       n->src ? n->src : "?", n->line, (long long)g->node[l].dim[1]);
		return 1;
	}
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, l, 0, NULL);
	if (b >= 0)
		w_buf(&w, g, b, 0, NULL);
	else
		w_null(&w);
	w_int(&w, g->node[l].dim[1]), w_int(&w, A_moe_route_k(n)),
		w_int(&w, A_moe_route_groups(n) ? A_moe_route_groups(n) : 1);
	w_int(&w, A_moe_route_topk_groups(n) ? A_moe_route_topk_groups(n)
	                                     : (A_moe_route_groups(n) ? A_moe_route_groups(n) : 1)),
		w_int(&w, A_moe_route_sigmoid(n));
	w.L.grid[0] = sz_dims(l, 0, 1, 1);
	w.L.block = 32;
	snprintf(t, sizeof t, "k_moe_route<%s, %s>", A, b >= 0 ? ctype(g, b) : A);
	w_finish(e, &w, t);
	return 0;
}

/* MoE weights of the chosen experts. */
static int emit_moe_weights(Em *e, int id, char *err, size_t len)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int l = n->in[0], ids = n->in[1];
	if (g->node[ids].dim[1] > 1024) { /* k_moe_weights keeps a token's scores in shared memory */
		seterr(err, len, "moe_weights (%%%d, %s:%d) of %lld experts per token has no CUDA kernel (at most 1024)",
		       id, n->src ? n->src : "?", n->line, (long long)g->node[ids].dim[1]);
		return 1;
	}
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, l, 0, NULL), w_buf(&w, g, ids, 0, NULL);
	w_int(&w, g->node[l].dim[1]), w_int(&w, g->node[ids].dim[1]), w_int(&w, A_moe_weights_sigmoid(n)),
		w_int(&w, A_moe_weights_norm(n));
	w_float(&w, A_moe_weights_scale(n));
	w.L.grid[0] = sz_dims(l, 0, 1, 1);
	w.L.block = 32;
	snprintf(t, sizeof t, "k_moe_weights<%s>", A);
	w_finish(e, &w, t);
	return 0;
}

/* How the grouped GEMM (ops/moe_tc.cuh) stages an expert weight's tiles: -1 bf16 rows, or the block type
** of a weight kept in GGUF blocks whose values q_elem decodes on its tuned path (Q8_0, Q4_K, Q5_K, Q6_K);
** -2 for any other weight (no grouped GEMM). */
static int moe_tc_wtype(const Em *e, int w)
{
	int q = e->wq[w];
	if (q < 0)
		return strcmp(ctype(e->g, w), "bf16") ? -2 : -1;
	return q == QT_Q8_0 || q == QT_Q4_K || q == QT_Q5_K || q == QT_Q6_K ? q : -2;
}

/* The grouped GEMMs' shared-memory stages (moe_tc_steps): as many as asked that fit the target's shared
** memory a block, at least two. Four for the first half and three for the down projection keep two blocks
** an SM on sm_90 (160 and 180 KB) and three or four times the weight bytes of two stages in flight, which a
** decode-sized step (tiles of a few rows, little mma work) waits on. Measured on GLM-4.7-Flash against two
** and two (H100, bench/NOTES.md 70): steps of 12/16/32/64 sequences 0.4/1.8/1.8/1.2% faster, 8 x 1024-token
** prefill 1.4%. Build knobs, for such comparisons. */
#ifndef MOE_TC_UP_NS
#define MOE_TC_UP_NS 4
#endif
#ifndef MOE_TC_DOWN_NS
#define MOE_TC_DOWN_NS 3
#endif
static int moe_tc_ns(const Em *e, int want, int bytes_a_stage)
{
	while (want > 2 && want * bytes_a_stage > e->t.smem_block)
		want--;
	return want;
}

/* Whether a moe_ffn node's experts take the grouped GEMM (ops/moe_tc.cuh): bf16 activations, gate, up and
** down all bf16 or all kept in blocks of the types moe_tc_wtype takes, C and F multiples of 8 (16-byte
** rows for cp.async), at most MOE_TC_EMAX experts, and two stages of shared memory within the target's. */
static int moe_tc_ok(const Em *e, const Node *n)
{
	const Graph *g = e->g;
	int x = n->in[0], ga = n->in[3], up = n->in[4], dn = n->in[5];
	int64_t C = g->node[x].dim[1], F = g->node[ga].dim[1], E = g->node[ga].dim[0];
	int qg = moe_tc_wtype(e, ga), qu = moe_tc_wtype(e, up), qd = moe_tc_wtype(e, dn);
	return e->x_moe_tc && g->cuda.act == DT_BF16 && qg > -2 && qu > -2 && qd > -2 && (qg < 0) == (qu < 0) && (qg < 0) == (qd < 0) &&
	       C % 8 == 0 && F % 8 == 0 && E <= MOE_TC_EMAX && MOE_TC_DOWN_SMEM(2) <= e->t.smem_block;
}

/* The grouped GEMM's scratch regions, in the one order every launch of emit_moe_tc lists them (each
** sees them at the same offsets): the expert offsets and tile starts (2E + 2 ints), the sorted slots
** (T·k ints), hid (T·k·F bf16) and the slots' down rows (T·k·C floats); `upto` of them. */
static void moe_tc_regions(Wr *w, Size T, int64_t E, int64_t K, int64_t F, int64_t C, int upto)
{
	w_scratch(w, sz_const(2 * E + 2), sz_const(1), "int", 4);
	w_scratch(w, T, sz_const(K), "int", 4);
	if (upto > 2)
		w_scratch(w, T, sz_const(K * F), "bf16", 2);
	if (upto > 3)
		w_scratch(w, T, sz_const(K * C), "float", 4);
}

/* The row-tile grid (y, z) and step range of a grouped GEMM launch from step tmin on: a block for each of
** the step's at most ceil(T·k/128) + E tiles. A Size cannot add, so steps under 128·E/k tokens (where
** ceil(T·k/128) <= E) take the constant 2E (small), and larger ones (ceil(T·k/128), 2). Returns whether
** the launch has any steps. */
static int moe_tc_rows(Wr *w, const Graph *g, int ids, int64_t E, int64_t K, int tmin, int small)
{
	int64_t tbig = (MOE_TC_BM * E + K - 1) / K;
	if (small) {
		w->L.tmin = tmin, w->L.tmax = (int)tbig - 1;
		w->L.grid[1] = sz_const(2 * E), w->L.grid[2] = sz_const(1);
	} else {
		w->L.tmin = (int)(tbig > tmin ? tbig : tmin);
		w->L.grid[1] = sz_numel(g, ids, MOE_TC_BM), w->L.grid[2] = sz_const(2);
	}
	return w->L.tmin <= w->L.tmax;
}

/* Routed experts of steps of MOE_TC_TMIN tokens or more on the tensor cores: k_moe_group, k_moe_up_tc,
** k_moe_down_tc, k_moe_sum_tc (ops/moe_tc.cuh), for bf16 experts and for experts kept in blocks
** (emit_qmoe). The two GEMMs are launched for the small steps' grid and the large steps' (moe_tc_rows). */
static void emit_moe_tc(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	int x = n->in[0], ids = n->in[1], wt = n->in[2], ga = n->in[3], up = n->in[4], dn = n->in[5];
	int64_t C = g->node[x].dim[1], F = g->node[ga].dim[1], K = g->node[ids].dim[1], E = g->node[ga].dim[0];
	int tmin = moe_tc_from(e, id);
	int ns_up = moe_tc_ns(e, MOE_TC_UP_NS, MOE_TC_UP_SMEM(1)), ns_down = moe_tc_ns(e, MOE_TC_DOWN_NS, MOE_TC_DOWN_SMEM(1));
	Size T = sz_dims(x, 0, 1, 1);
	char t[128];
	Wr w;
	w_start(&w, id);
	w.L.tmin = tmin;
	moe_tc_regions(&w, T, E, K, F, C, 2);
	w_buf(&w, g, ids, 0, NULL), w_size(&w, sz_numel(g, ids, 1), 0), w_int(&w, E);
	w.L.grid[0] = sz_const(E);
	w_finish(e, &w, "k_moe_group");

	for (int small = 1; small >= 0; small--) {
		w_start(&w, id);
		if (!moe_tc_rows(&w, g, ids, E, K, tmin, small))
			continue;
		moe_tc_regions(&w, T, E, K, F, C, 3);
		w_buf(&w, g, x, 0, NULL), w_buf(&w, g, ga, 0, NULL), w_buf(&w, g, up, 0, NULL);
		w_int(&w, C), w_int(&w, F), w_int(&w, K), w_int(&w, E);
		w_callsep(&w);
		cat(w.call, sizeof w.call, "glm_dsm");
		w.L.grid[0] = sz_const((F + 63) / 64);
		w.L.smem = MOE_TC_UP_SMEM(ns_up);
		w.minb = 2; /* two blocks an SM: ptxas took up to 135 registers without the figure (nvcc 12, sm_90), 128 with */
		snprintf(t, sizeof t, "k_moe_up_tc<%s, %d, %d, %d>", ctype(g, ga), moe_tc_wtype(e, ga), moe_tc_wtype(e, up), ns_up);
		w_finish(e, &w, t);
	}

	for (int small = 1; small >= 0; small--) {
		w_start(&w, id);
		if (!moe_tc_rows(&w, g, ids, E, K, tmin, small))
			continue;
		moe_tc_regions(&w, T, E, K, F, C, 4);
		w_buf(&w, g, dn, 0, NULL), w_int(&w, C), w_int(&w, F), w_int(&w, E);
		w_callsep(&w);
		cat(w.call, sizeof w.call, "glm_dsm");
		w.L.grid[0] = sz_const((C + 127) / 128);
		w.L.smem = MOE_TC_DOWN_SMEM(ns_down);
		w.minb = 2;
		snprintf(t, sizeof t, "k_moe_down_tc<%s, %d, %d>", ctype(g, dn), moe_tc_wtype(e, dn), ns_down);
		w_finish(e, &w, t);
	}

	w_start(&w, id);
	w.L.tmin = tmin;
	w_buf(&w, g, id, 1, NULL);
	moe_tc_regions(&w, T, E, K, F, C, 4);
	w_buf(&w, g, ids, 0, NULL), w_buf(&w, g, wt, 0, NULL);
	w_size(&w, T, 0), w_int(&w, C), w_int(&w, K), w_int(&w, E);
	w.L.grid[0] = sz_numel(g, id, 1024);
	w_finish(e, &w, "k_moe_sum_tc<bf16>");
}

/* Routed experts: k_moe_up then k_moe_down through one scratch region (emit_qmoe for resident weights),
** for steps below MOE_TC_TMIN when the grouped GEMM (emit_moe_tc) takes the larger ones. */
static int emit_moe_ffn(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int x = n->in[0], ids = n->in[1], wt = n->in[2], ga = n->in[3], up = n->in[4], dn = n->in[5];
	if (e->wq[ga] >= 0)
		return emit_qmoe(e, id);
	int tc = moe_tc_ok(e, n);
	int64_t C = g->node[x].dim[1], Fd = g->node[ga].dim[1], K = g->node[ids].dim[1];
	Size T = sz_dims(x, 0, 1, 1), KF = sz_const(K * Fd);
	w_scratch(&w, T, KF, "float", 4);
	w_buf(&w, g, x, 0, NULL), w_buf(&w, g, ids, 0, NULL), w_buf(&w, g, ga, 0, NULL), w_buf(&w, g, up, 0, NULL);
	w_int(&w, C), w_int(&w, Fd), w_int(&w, K);
	/* 4 warps a block: at ~90 registers a thread, 5 blocks (20 warps) fit an SM where 2 of 8 did */
	w.L.grid[0] = sz_const((Fd + 3) / 4), w.L.grid[1] = sz_const(K), w.L.grid[2] = T;
	w.L.block = 128;
	if (tc)
		w.L.tmax = moe_tc_from(e, id) - 1;
	snprintf(t, sizeof t, "k_moe_up<%s, %s>", A, ctype(g, ga));
	w_finish(e, &w, t);
	w_start(&w, id);
	w.L.tmin = e->tail_tmin[id]; /* small steps may run the fused down projection (FK_MOE_DOWN) */
	if (tc)
		w.L.tmax = moe_tc_from(e, id) - 1;
	w_buf(&w, g, id, 1, NULL);
	w_scratch(&w, T, KF, "float", 4); /* the same region k_moe_up filled */
	w_buf(&w, g, ids, 0, NULL), w_buf(&w, g, wt, 0, NULL), w_buf(&w, g, dn, 0, NULL);
	w_int(&w, C), w_int(&w, Fd), w_int(&w, K);
	w.L.grid[0] = sz_const((C + 7) / 8), w.L.grid[1] = T;
	snprintf(t, sizeof t, "k_moe_down<%s, %s>", A, ctype(g, dn));
	w_finish(e, &w, t);
	if (tc)
		emit_moe_tc(e, id);
	return 0;
}

/* Elementwise binary ops (broadcasting b). */
static int emit_add(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int a = n->in[0], b = n->in[1];
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, a, 0, NULL), w_buf(&w, g, b, 0, NULL);
	w_size(&w, sz_numel(g, id, 1), 1), w_size(&w, sz_numel(g, b, 1), 1);
	w.L.grid[0] = sz_numel(g, id, 256);
	snprintf(t, sizeof t, "k_binary<%s, %s, %d>", A, ctype(g, b), n->op - OP_ADD);
	w_finish(e, &w, t);
	return 0;
}

/* Elementwise unary ops. */
static int emit_scale(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int kind = n->op == OP_SCALE ? 0 : n->op == OP_SILU ? 1 : n->op == OP_GELU ? (A_gelu_tanh(n) ? 3 : 2) : 4;
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL);
	w_size(&w, sz_numel(g, id, 1), 1), w_float(&w, n->op == OP_SCALE ? A_scale_s(n) : 0);
	w.L.grid[0] = sz_numel(g, id, 256);
	snprintf(t, sizeof t, "k_unary<%s, %d>", A, kind);
	w_finish(e, &w, t);
	return 0;
}

/* SwiGLU of gate and up. */
static int emit_swiglu(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL), w_buf(&w, g, n->in[1], 0, NULL);
	w_size(&w, sz_numel(g, id, 1), 1);
	w.L.grid[0] = sz_numel(g, id, 256);
	snprintf(t, sizeof t, "k_swiglu<%s>", A);
	w_finish(e, &w, t);
	return 0;
}

/* Softmax over the last axis. */
static int emit_softmax(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL);
	w_int(&w, n->dim[n->ndim - 1]);
	w.L.grid[0] = sz_rows(g, id);
	snprintf(t, sizeof t, "k_softmax<%s>", A);
	w_finish(e, &w, t);
	return 0;
}

/* RMSNorm or LayerNorm over the last axis. */
static int emit_rmsnorm(Em *e, int id, char *err, size_t len)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int hw = n->nin > 1, hb = n->nin > 2;
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL);
	if (hw)
		w_buf(&w, g, n->in[1], 0, NULL);
	else
		w_null(&w);
	const char *W = hw ? ctype(g, n->in[1]) : A;
	if (n->op == OP_LAYERNORM) {
		if (hb)
			w_buf(&w, g, n->in[2], 0, W);
		else
			w_null(&w);
	}
	w_int(&w, n->dim[n->ndim - 1]), w_float(&w, A_norm_eps(n));
	w.L.grid[0] = sz_rows(g, id);
	if (n->op == OP_RMSNORM)
		snprintf(t, sizeof t, "k_rmsnorm<%s, %s, %s>", A, W, bool_s(hw));
	else
		snprintf(t, sizeof t, "k_layernorm<%s, %s, %s, %s>", A, W, bool_s(hw), bool_s(hb));
	if (hb && strcmp(ctype(g, n->in[2]), W))
		return seterr(err, len, "layernorm (%%%d): weight and bias must have the same type", id);
	w_finish(e, &w, t);
	return 0;
}

/* Rotary embedding. */
static int emit_rope(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int64_t H = A_rope_heads(n), D = A_rope_head_dim(n), R = A_rope_rot_dim(n);
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL), w_buf(&w, g, n->in[1], 0, NULL);
	w_rope(&w, id);
	w_float(&w, rope_cs(n));
	w_int(&w, H), w_int(&w, D), w_int(&w, R);
	w.L.grid[0] = sz_numel(g, id, D);
	w.L.block = 128;
	snprintf(t, sizeof t, "k_rope<%s, %s>", A, bool_s(A_rope_interleaved(n)));
	w_finish(e, &w, t);
	return 0;
}

/* Whether a prefill's attention runs on the tensor cores (ops/prefill.cuh k_attn_tc): bf16, and key and
** value heads of one size, a multiple of 16 up to 128 (the mma's k step; the registers of a 16-row tile). */
static int attn_tc_dim(const Graph *g, const Node *n)
{
	int64_t D = A_attention_head_dim(n);
	return g->cuda.act == DT_BF16 && A_attention_v_head_dim(n) == D && D % 16 == 0 && D <= 128 ? (int)D : 0;
}

/* Attention: the k/v cache write (unless a fused kernel did it), then 16 warps a block for decode steps
** (the split attention when k_attn_step's rows suit it; with glmc --fallback attn_split k_attn_step, or
** k_attn_step_rope for a folded 1-token step) and for prefills k_attn_tc (64 tokens a block on the tensor
** cores) where it applies, else k_attention's 4 warps. */
static int emit_attention(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int q = n->in[0], k = n->in[1], v = n->in[2], kc = n->in[3], vc = n->in[4], pos = n->in[5];
	int64_t H = A_attention_heads(n), G = A_attention_kv_heads(n), Dk = A_attention_head_dim(n),
	        Dv = A_attention_v_head_dim(n);
	if (!e->kv_fused[id]) { /* else the fused rotary kernel wrote this step's cache rows */
		w_buf(&w, g, kc, 1, NULL), w_buf(&w, g, vc, 1, NULL), w_buf(&w, g, k, 0, NULL), w_buf(&w, g, v, 0, NULL);
		w_buf(&w, g, pos, 0, NULL), w_int(&w, G * Dk), w_int(&w, G * Dv);
		w_seq(&w, g, kc);
		w.L.grid[0] = sz_numel(g, pos, 1);
		snprintf(t, sizeof t, "k_kv_write<%s>", A);
		w_finish(e, &w, t);
	}
	/* 16 warps a block for decode steps (H blocks cover the context), 4 for prefills */
	for (int nw = 16; nw >= 4; nw -= 12) {
		int rowb = nw == 16 ? attn_step_rowb(g, n) : 0, fold = nw == 16 && e->rope_fold[id] >= 0;
		int tc = nw == 4 ? attn_tc_dim(g, n) : 0;
		if (tc) {
			w_start(&w, id);
			w_buf(&w, g, id, 1, NULL), w_buf(&w, g, q, 0, NULL), w_buf(&w, g, kc, 0, NULL), w_buf(&w, g, vc, 0, NULL);
			w_buf(&w, g, pos, 0, NULL);
			w_int(&w, H), w_int(&w, G), w_float(&w, A_attention_scale(n));
			w_seq(&w, g, kc);
			w_size(&w, sz_numel(g, pos, 1), 0);
			w.L.grid[0] = sz_const(H);
			w.L.grid[1] = sz_numel(g, pos, 64);
			w.L.block = 128;
			w.L.tmin = 9, w.L.tmax = 1 << 30;
			snprintf(t, sizeof t, "k_attn_tc<%d>", tc);
			w_finish(e, &w, t);
			continue;
		}
		if (rowb && e->x_split) {
			emit_attn_split(e, id, rowb);
			continue;
		}
		if (fold)
			emit_attn_rope(e, &g->fk[e->rope_fold[id]], rowb);
		w_start(&w, id);
		w_buf(&w, g, id, 1, NULL), w_buf(&w, g, q, 0, NULL), w_buf(&w, g, kc, 0, NULL), w_buf(&w, g, vc, 0, NULL);
		w_buf(&w, g, pos, 0, NULL);
		w_int(&w, H), w_int(&w, G), w_int(&w, Dk), w_int(&w, Dv), w_float(&w, A_attention_scale(n));
		w_seq(&w, g, kc);
		w.L.grid[0] = sz_const(H);
		w.L.grid[1] = sz_numel(g, pos, 1);
		w.L.block = 32 * nw;
		w.L.tmin = nw == 16 ? 1 + fold : 9;
		w.L.tmax = nw == 16 ? 8 : 1 << 30;
		if (rowb)
			snprintf(t, sizeof t, "k_attn_step<%s, %d>", A, rowb);
		else
			snprintf(t, sizeof t, "k_attention<%s, %d>", A, nw);
		w_finish(e, &w, t);
	}
	return 0;
}

/* Top-k or argmax over the last axis. */
static int emit_topk(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	w_start(&w, id);
	int x = n->in[0];
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, x, 0, NULL);
	w_int(&w, g->node[x].dim[g->node[x].ndim - 1]);
	if (n->op == OP_TOPK)
		w_int(&w, A_topk_k(n));
	w.L.grid[0] = sz_rows(g, x);
	snprintf(t, sizeof t, "%s<%s>", n->op == OP_TOPK ? "k_topk" : "k_argmax", A);
	w_finish(e, &w, t);
	return 0;
}

/* A slice along one axis, as a slab copy. */
static int emit_slice(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	char t[256];
	Wr w;
	w_start(&w, id);
	int x = n->in[0], ax = (int)A_slice_axis(n);
	const char *E = etype(g, id);
	w_buf(&w, g, id, 1, E), w_buf(&w, g, x, 0, E);
	w_size(&w, sz_dims(id, 0, ax, 1), 1), w_size(&w, sz_dims(id, ax + 1, n->ndim, 1), 1);
	w_size(&w, sz_const(A_slice_len(n)), 1), w_size(&w, sz_dims(x, ax, ax + 1, 1), 1);
	w_size(&w, sz_const(A_slice_start(n)), 1), w_size(&w, sz_const(A_slice_len(n)), 1), w_size(&w, sz_const(0), 1);
	w.L.grid[0] = sz_numel(g, id, 256);
	snprintf(t, sizeof t, "k_copy_slab<%s>", E);
	w_finish(e, &w, t);
	return 0;
}

/* A concat: one slab copy per input. */
static int emit_concat(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	char t[256];
	Wr w;
	w_start(&w, id);
	int ax = (int)A_concat_axis(n);
	int64_t at = 0;
	const char *E = etype(g, id);
	for (int i = 0; i < n->nin; i++) {
		int x = n->in[i];
		int64_t part = g->node[x].dim[ax];
		w_start(&w, id);
		w_buf(&w, g, id, 1, E), w_buf(&w, g, x, 0, E);
		w_size(&w, sz_dims(id, 0, ax, 1), 1), w_size(&w, sz_dims(id, ax + 1, n->ndim, 1), 1);
		w_size(&w, sz_const(part), 1), w_size(&w, sz_const(part), 1), w_size(&w, sz_const(0), 1);
		w_size(&w, sz_dims(id, ax, ax + 1, 1), 1), w_size(&w, sz_const(at), 1);
		w.L.grid[0] = sz_numel(g, x, 256);
		snprintf(t, sizeof t, "k_copy_slab<%s>", E);
		w_finish(e, &w, t);
		at += part;
	}
	return 0;
}

/* A permutation of up to 4 axes. */
static int emit_permute(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	char t[256];
	Wr w;
	w_start(&w, id);
	int x = n->in[0], nd = g->node[x].ndim;
	const char *E = etype(g, id);
	w_buf(&w, g, id, 1, E), w_buf(&w, g, x, 0, E);
	for (int i = 0; i < 4; i++)
		w_size(&w, i < nd ? sz_dims(x, i, i + 1, 1) : sz_const(1), 0);
	for (int i = 0; i < 4; i++)
		w_int(&w, i < nd ? A_permute_axis(n, i) : i);
	w.L.grid[0] = sz_numel(g, id, 256);
	snprintf(t, sizeof t, "k_permute<%s>", E);
	w_finish(e, &w, t);
	return 0;
}

/* An allreduce: a collective launch. */
static int emit_allreduce(Em *e, int id)
{
	Graph *g = e->g;
	const Node *n = &g->node[id];
	Wr w;
	w_start(&w, id);
	w_buf(&w, g, id, 1, NULL), w_buf(&w, g, n->in[0], 0, NULL), w_size(&w, sz_numel(g, n->in[0], 1), 1);
	w_collective(e, &w, LK_ALLREDUCE);
	return 0;
}

/* The launches of one node's own kernels. */
static int emit_own(Em *e, int id, char *err, size_t len)
{
	const Node *n = &e->g->node[id];
	if (e->add_of[id] >= 0)
		return emit_norm_alone(e, id);
	int ar = n->op == OP_ADD && e->norm_of[id] >= 0 ? ar_fusable(e, id) : -1;
	if (ar >= 0)
		return emit_add_norm_ar(e, id, ar);
	if (n->op == OP_ADD && e->norm_of[id] >= 0)
		return emit_add_norm(e, id);
	switch (n->op) {
	case OP_INPUT: case OP_PARAM: case OP_CACHE: case OP_RESHAPE:
		return 0; /* leaves have no kernel; a reshape aliases its input's buffer */
	case OP_EMBEDDING:
		return emit_embedding(e, id);
	case OP_LINEAR:
		return emit_linear(e, id);
	case OP_MATMUL:
		return emit_matmul(e, id);
	case OP_MLA:
		return emit_mla(e, id, err, len);
	case OP_INDEXER:
		return emit_indexer(e, id);
	case OP_MOE_ROUTE:
		return emit_moe_route(e, id, err, len);
	case OP_MOE_WEIGHTS:
		return emit_moe_weights(e, id, err, len);
	case OP_MOE_FFN:
		return emit_moe_ffn(e, id);
	case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV:
		return emit_add(e, id);
	case OP_SCALE: case OP_SILU: case OP_GELU: case OP_SIGMOID:
		return emit_scale(e, id);
	case OP_SWIGLU:
		return emit_swiglu(e, id);
	case OP_SOFTMAX:
		return emit_softmax(e, id);
	case OP_RMSNORM: case OP_LAYERNORM:
		return emit_rmsnorm(e, id, err, len);
	case OP_ROPE:
		return emit_rope(e, id);
	case OP_ATTENTION:
		return emit_attention(e, id);
	case OP_TOPK: case OP_ARGMAX:
		return emit_topk(e, id);
	case OP_SLICE:
		return emit_slice(e, id);
	case OP_CONCAT:
		return emit_concat(e, id);
	case OP_PERMUTE:
		return emit_permute(e, id);
	case OP_ALLREDUCE:
		return emit_allreduce(e, id);
	case OP_ALLGATHER:
		emit_allgather(e, id);
		return 0;
	default:
		/* Not an error: the plan then runs on the CPU only (emit_cuda says so). */
		seterr(err, len, "%s (%%%d, %s:%d) has no CUDA kernel yet", n->op >= 0 && n->op < OP_NOPS ? op_table[n->op].name : "?", id,
		       n->src ? n->src : "?", n->line);
		return 1;
	}
}

/*
** Fused kernels (compiler/fuse.c's g->fk): each launched where its host node's kernels are, for steps of
** up to fk->tmax tokens; the nodes it covers run their own kernels only for larger steps.
*/

/* The type id ops/qfused.cuh reads weight node w as (select.c). */
static int wtype_id(const Em *e, int w)
{
	return select_wtype(e->g, e->wq, w);
}

/* The launch arguments of an FK_GEMV group (k_gemv_fused's and k_qgemv_fused's, the same list): weights as
** wtype (NULL: their own element type), then for k_qgemv_fused (split != NULL) each member's K split.
** Returns the members' total rows; *epi gets the epilogue bits. */
static int64_t gemv_args(Em *e, Wr *w, const FuseKernel *f, const char *wtype, const int *split, int *epi)
{
	Graph *g = e->g;
	int x = g->node[f->m[0]].in[0], src = x, up = -1, nw = -1;
	if (f->pro == GP_RMSNORM)
		src = g->node[x].in[0], nw = g->node[x].nin > 1 ? g->node[x].in[1] : -1;
	else if (f->pro == GP_SWIGLU)
		src = g->node[x].in[0], up = g->node[x].in[1];
	int64_t K = g->node[g->node[f->m[0]].in[1]].dim[1], Ntot = 0;
	for (int m = 0; m < FK_MAXM; m++) /* the GLU epilogue stores member 0's column pairs as one output */
		m < f->nm && (f->glu < 0 || m == 0) ? w_buf(w, g, f->out[m], 1, NULL) : w_null(w);
	for (int m = 0; m < FK_MAXM; m++)
		m < f->nm ? w_buf(w, g, g->node[f->m[m]].in[1], 0, wtype) : w_null(w);
	for (int m = 0; m < FK_MAXM; m++)
		m < f->nm && g->node[f->m[m]].nin > 2 ? w_buf(w, g, g->node[f->m[m]].in[2], 0, NULL) : w_null(w);
	w_buf(w, g, src, 0, NULL);
	up >= 0 ? w_buf(w, g, up, 0, NULL) : w_null(w);
	nw >= 0 ? w_buf(w, g, nw, 0, NULL) : w_null(w);
	f->store ? w_buf(w, g, x, 1, NULL) : w_null(w);
	f->res >= 0 ? w_buf(w, g, f->res, 0, NULL) : w_null(w);
	w_size(w, sz_numel(g, src, K), 0), w_int(w, K);
	for (int m = 0; m < FK_MAXM; m++) {
		if (m < f->nm) {
			int64_t N = g->node[g->node[f->m[m]].in[1]].dim[0];
			w_int(w, N);
			Ntot += N;
		} else
			w_lit(w, "0");
	}
	*epi = f->res >= 0 ? 16 : f->glu >= 0 ? 32 : 0; /* GEMV_EPI_RES, GEMV_EPI_GLU */
	for (int m = 0; m < f->nm; m++)
		if (f->out[m] != f->m[m] && g->node[f->out[m]].op == OP_SCALE)
			*epi |= 1 << m;
	if (split) { /* k_qgemv_fused: the splits, then the prologue and epilogue as run-time values */
		for (int m = 0; m < FK_MAXM; m++)
			m < f->nm ? w_int(w, split[m]) : w_lit(w, "1");
		w_int(w, f->pro), w_int(w, *epi);
	}
	f->pro == GP_RMSNORM ? w_float(w, A_rmsnorm_eps(&g->node[x])) : w_lit(w, "0.0f");
	for (int m = 0; m < FK_MAXM; m++)
		(*epi >> m) & 1 ? w_float(w, A_scale_s(&g->node[f->out[m]])) : w_lit(w, "1.0f");
	w->L.tmax = f->tmax;
	return Ntot;
}

/* k_gemv_fused as selected (r): the FMA GEMV of float weights, one token row or 8. */
static void emit_gemv_fused(Em *e, const FuseKernel *f, const KSel *r, const char *NW, int has_nw)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256];
	Wr w;
	int epi;
	w_start(&w, f->host);
	gemv_args(e, &w, f, NULL, NULL, &epi);
	w.L.block = r->block;
	w.L.grid[0] = sz_const(r->grid);
	w.minb = r->minb;
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.flags = r->pro == GP_RMSLATE ? LAUNCH_NORM_LATE : 0;
	w_pdl(&w);
	snprintf(t, sizeof t, "k_gemv_fused<%s, %s, %s, %d, %s, %d, %d, %d>", A, ctype(g, g->node[f->m[0]].in[1]), NW, r->pro,
	         bool_s(has_nw), epi, r->rb, r->tr);
	w_finish(e, &w, t);
}

/* k_gemv_tc as selected: one launch per token tile count (its norm, if any, formed late: LAUNCH_NORM_TC). */
static void emit_gemv_tc(Em *e, const FuseKernel *f, const KSel *r, const char *NW, int has_nw)
{
	char t[256];
	Wr w;
	int epi;
	w_start(&w, f->host);
	gemv_args(e, &w, f, NULL, NULL, &epi);
	w.L.block = r->block;
	w.L.grid[0] = sz_const(r->grid);
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.flags = f->pro == GP_RMSNORM ? LAUNCH_NORM_TC : 0;
	snprintf(t, sizeof t, "k_gemv_tc<bf16, bf16, %s, %d, %s, %d, %d, %d, %d>", NW, r->pro, bool_s(has_nw), epi, r->mt,
	         r->nt, r->uc);
	w_finish(e, &w, t);
}

/* k_qgemv_sk as selected: gemv_args' list, then its parts (scratch), counts (a KA_ZERO region), the parts'
** bound and the dynamic shared memory; one wave of blocks. */
static void emit_qsk_group(Em *e, const FuseKernel *f, const KSel *r, const char *NW)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	Wr w;
	int epi;
	w_start(&w, f->host);
	gemv_args(e, &w, f, "unsigned char", NULL, &epi);
	w_scratch(&w, sz_const(r->tiles * r->maxseg), sz_const(16), "float", 4);
	w_zero(&w, sz_const(r->tiles), sz_const(1), "int", 4);
	w_int(&w, r->maxseg);
	w_callsep(&w);
	cat(w.call, sizeof w.call, "glm_dsm");
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.block = r->block;
	w.L.smem = (int)r->smem;
	w.L.grid[0] = sz_const(r->grid);
	w.minb = r->minb; /* its registers: 128 at most (ptxas: 103-120, no spills) */
	char t[256];
	snprintf(t, sizeof t, "k_qgemv_sk<%s, %d, %s, %d, %d, %d, %d>", A, r->qt[0], NW, r->pro, epi, QSK_NWARP, QSK_SLOTS);
	w_finish(e, &w, t);
}

/* One k_qgemv_tc launch as selected (a group's, or a linear's own: r's shape, its arguments already in w). */
static void emit_qtc(Em *e, Wr *w, const KSel *r, const char *NW, int has_nw, int epi)
{
	w->L.block = r->block;
	w->L.grid[0] = sz_const(r->grid);
	w->L.tmin = r->tmin, w->L.tmax = r->tmax;
	w->L.flags = r->pro == GP_RMSLATE ? LAUNCH_NORM_LATE : 0;
	char t[256];
	snprintf(t, sizeof t, "k_qgemv_tc<bf16, %d, %s, %d, %s, %d, %d, %d, %d>", r->qt[0], NW, r->pro, bool_s(has_nw), epi,
	         r->mt, r->ncs, r->uc);
	w_finish(e, w, t);
}

/* A group's k_qgemv_tc launch as selected. */
static void emit_qtc_group(Em *e, const FuseKernel *f, const KSel *r, const char *NW, int has_nw)
{
	Wr w;
	int epi;
	w_start(&w, f->host);
	gemv_args(e, &w, f, "unsigned char", NULL, &epi);
	emit_qtc(e, &w, r, NW, has_nw, epi);
}

/* k_qgemv_fused as selected: one token (the prologue and epilogue as template values) or 2..tmax (their
** run-time values, one out-of-line body per type tuple, see ops/qfused.cuh). */
static void emit_qfused(Em *e, const FuseKernel *f, const KSel *r, const char *NW)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int epi;
	char t[256];
	Wr w;
	w_start(&w, f->host);
	gemv_args(e, &w, f, "unsigned char", r->split, &epi);
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.block = r->block;
	w.L.grid[0] = sz_const(r->grid);
	w.L.flags = r->pro == GP_RMSLATE ? LAUNCH_NORM_LATE : 0;
	snprintf(t, sizeof t, "k_qgemv_fused<%s, %d, %d, %d, %d, %s, %d, %d, %d>", A, r->qt[0], r->qt[1], r->qt[2], r->qt[3],
	         NW, r->pro, r->tr == 1 ? epi : -1, r->tr);
	w_finish(e, &w, t);
}

/* k_qgemv_fused_mma as selected: one token, every member of one type (Q4_K or Q6_K). */
static void emit_qfused_mma(Em *e, const FuseKernel *f, const KSel *r, const char *NW)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int epi;
	char t[256];
	Wr w;
	w_start(&w, f->host);
	gemv_args(e, &w, f, "unsigned char", r->split, &epi);
	w.L.tmin = r->tmin, w.L.tmax = r->tmax;
	w.L.block = r->block;
	w.L.grid[0] = sz_const(r->grid);
	w.L.flags = r->pro == GP_RMSLATE ? LAUNCH_NORM_LATE : 0;
	snprintf(t, sizeof t, "k_qgemv_fused_mma<%s, %d, %s, %d, %d>", A, r->qt[0], NW, r->pro, epi);
	w_finish(e, &w, t);
}

/* The decode GEMV launches of FK_GEMV group k, as select.c chose them (g->sel, in launch order). */
static void emit_fk_gemv(Em *e, int k)
{
	Graph *g = e->g;
	const FuseKernel *f = &g->fk[k];
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	int x = g->node[f->m[0]].in[0], nw = f->pro == GP_RMSNORM && g->node[x].nin > 1 ? g->node[x].in[1] : -1;
	const char *NW = nw >= 0 ? ctype(g, nw) : A;
	for (int i = e->sel_first[k]; i >= 0 && i < g->nsel && g->sel[i].fk == k; i++) {
		const KSel *r = &g->sel[i];
		const FuseKernel *h = f;
		FuseKernel a, b;
		if (r->sub) { /* a split group: the block members, or the float ones reading the norm they stored */
			int qt[FK_MAXM], qb[FK_MAXM];
			for (int m = 0; m < FK_MAXM; m++)
				qt[m] = wtype_id(e, g->node[f->m[m < f->nm ? m : 0]].in[1]);
			select_split_group(f, qt, &a, &b, qb);
			h = r->sub == 1 ? &a : &b;
		}
		switch (r->kern) {
		case SK_GEMV_FUSED: emit_gemv_fused(e, h, r, NW, nw >= 0); break;
		case SK_GEMV_TC: emit_gemv_tc(e, h, r, NW, nw >= 0); break;
		case SK_QGEMV_FUSED: emit_qfused(e, h, r, r->sub == 2 ? A : NW); break;
		case SK_QGEMV_FUSED_MMA: emit_qfused_mma(e, h, r, NW); break;
		case SK_QGEMV_SK: emit_qsk_group(e, h, r, NW); break;
		case SK_QGEMV_TC: emit_qtc_group(e, h, r, NW, nw >= 0); break;
		default: GLM_ASSERT(!"unknown selected kernel");
		}
	}
}

/* Rotary (after per-head norms) of q and k with the cache writes: ops/fused.cuh's k_rope_qk_kv. */
static void emit_fk_rope(Em *e, const FuseKernel *f)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const Node *at = &g->node[f->attn], *rq = &g->node[f->m[0]];
	int nq = f->norm[0], nk = f->norm[1], norm = nq >= 0;
	int hw = norm && g->node[nq].nin > 1 && g->node[nk].nin > 1;
	int src_q = norm ? g->node[nq].in[0] : rq->in[0], src_k = norm ? g->node[nk].in[0] : g->node[f->m[1]].in[0];
	int64_t H = A_attention_heads(at), G = A_attention_kv_heads(at), D = A_attention_head_dim(at),
	        Dv = A_attention_v_head_dim(at), R = A_rope_rot_dim(rq);
	Wr w;
	w_start(&w, f->host);
	w_buf(&w, g, f->m[0], 1, NULL), w_buf(&w, g, f->m[1], 1, NULL);
	w_buf(&w, g, at->in[3], 1, NULL), w_buf(&w, g, at->in[4], 1, NULL);
	w_buf(&w, g, src_q, 0, NULL), w_buf(&w, g, src_k, 0, NULL), w_buf(&w, g, at->in[2], 0, NULL);
	hw ? w_buf(&w, g, g->node[nq].in[1], 0, NULL) : w_null(&w);
	hw ? w_buf(&w, g, g->node[nk].in[1], 0, NULL) : w_null(&w);
	w_buf(&w, g, at->in[5], 0, NULL);
	w_rope(&w, f->m[0]), w_rope(&w, f->m[1]);
	w_float(&w, rope_cs(rq)), w_float(&w, rope_cs(&g->node[f->m[1]]));
	w_int(&w, H), w_int(&w, G), w_int(&w, D), w_int(&w, Dv), w_int(&w, R);
	norm ? w_float(&w, A_rmsnorm_eps(&g->node[nq])) : w_lit(&w, "0.0f");
	w_seq(&w, g, at->in[3]);
	w.L.grid[0] = sz_const(H + G);
	w.L.grid[1] = sz_numel(g, at->in[5], 1);
	w.L.block = 128;
	w.L.tmin = e->rope_fold[f->attn] >= 0 ? 2 : 1; /* 1-token steps: the attention's rope kernel does it */
	w.L.tmax = f->tmax;
	char t[256];
	snprintf(t, sizeof t, "k_rope_qk_kv<%s, %s, %s, %s, %s>", A, hw ? ctype(g, g->node[nq].in[1]) : A, bool_s(norm),
	         bool_s(hw), bool_s(A_rope_interleaved(rq)));
	w_finish(e, &w, t);
}

/* The other MLA preparation of the same mla node (FK_MLA_Q for an FK_MLA_KV and back), or NULL. */
static const FuseKernel *mla_partner(const Graph *g, const FuseKernel *f)
{
	int want = f->kind == FK_MLA_KV ? FK_MLA_Q : FK_MLA_KV;
	for (int k = 0; k < g->nfk; k++)
		if (g->fk[k].kind == want && g->fk[k].m[0] == f->m[0])
			return &g->fk[k];
	return NULL;
}

/* k_mla_kvprep's arguments (in k_mla_prep, where the query part gave them, without pos, L and Dr); its
** template arguments after the activation type go to targs. */
static int args_mla_kv(Em *e, Wr *w, const FuseKernel *f, int in_prep, char *targs, size_t tlen, char *err, size_t len)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const Node *M = &g->node[f->m[0]], *cn = &g->node[f->mla_kv.norm], *kr = &g->node[f->mla_kv.rope];
	int X = f->m[1], ln = f->mla_kv.inorm, ikr = f->mla_kv.irope;
	const Node *Ln = ln >= 0 ? &g->node[ln] : NULL, *IR = ikr >= 0 ? &g->node[ikr] : NULL;
	int cw = cn->nin > 1 ? cn->in[1] : -1, iw = Ln && Ln->nin > 1 ? Ln->in[1] : -1, ib = Ln && Ln->nin > 2 ? Ln->in[2] : -1;
	if (iw >= 0 && ib >= 0 && strcmp(ctype(g, iw), ctype(g, ib)))
		return seterr(err, len, "layernorm (%%%d): weight and bias must have the same type", ln);
	w_buf(w, g, f->mla_kv.concat, 1, NULL), w_buf(w, g, M->in[2], 1, NULL);
	X >= 0 ? w_buf(w, g, ikr, 1, NULL) : w_null(w);
	X >= 0 ? w_buf(w, g, g->node[X].in[3], 1, NULL) : w_null(w);
	w_buf(w, g, f->mla_kv.kv, 0, NULL);
	cw >= 0 ? w_buf(w, g, cw, 0, NULL) : w_null(w);
	X >= 0 ? w_buf(w, g, f->mla_kv.ikey, 0, NULL) : w_null(w);
	iw >= 0 ? w_buf(w, g, iw, 0, NULL) : w_null(w);
	ib >= 0 ? w_buf(w, g, ib, 0, NULL) : w_null(w);
	if (!in_prep)
		w_buf(w, g, M->in[3], 0, NULL);
	w_rope(w, f->mla_kv.rope), w_float(w, rope_cs(kr));
	if (IR)
		w_rope(w, ikr), w_float(w, rope_cs(IR));
	else
		w_null(w), w_lit(w, "1.0f");
	if (!in_prep)
		w_int(w, cn->dim[1]), w_int(w, A_rope_head_dim(kr));
	w_int(w, A_rope_rot_dim(kr));
	IR ? w_int(w, A_rope_head_dim(IR)) : w_lit(w, "0");
	IR ? w_int(w, A_rope_rot_dim(IR)) : w_lit(w, "0");
	w_float(w, A_rmsnorm_eps(cn));
	Ln ? w_float(w, A_layernorm_eps(Ln)) : w_lit(w, "0.0f");
	w_seq(w, g, M->in[2]);
	snprintf(targs, tlen, "%s, %s, %s, %s", cw >= 0 ? ctype(g, cw) : A, iw >= 0 ? ctype(g, iw) : A,
	         bool_s(A_rope_interleaved(kr)), bool_s(IR && A_rope_interleaved(IR)));
	return 0;
}

/* k_mla_qprep's arguments; its template arguments after the activation type go to targs. Returns its
** number of blocks. */
static int64_t args_mla_q(Em *e, Wr *w, const FuseKernel *f, char *targs, size_t tlen)
{
	Graph *g = e->g;
	const Node *cat = &g->node[f->mla_q.concat], *R = &g->node[f->mla_q.rope], *q3 = &g->node[f->mla_q.q];
	int iq = f->mla_q.irope, tb = f->mla_q.wuk_t, pos = g->node[f->m[0]].in[3];
	const Node *IR = iq >= 0 ? &g->node[iq] : NULL;
	int64_t H = cat->dim[1], Dr = A_rope_head_dim(R), Dn = q3->dim[2] - Dr, L = cat->dim[2] - Dr;
	int64_t NL = tb ? (L + 7) / 8 : (L + 63) / 64, Hi = IR ? A_rope_heads(IR) : 0; /* mla_q_nl in ops/fused.cuh */
	w_buf(w, g, f->mla_q.concat, 1, NULL);
	IR ? w_buf(w, g, iq, 1, NULL) : w_null(w);
	w_buf(w, g, f->mla_q.q, 0, NULL), w_buf(w, g, f->mla_q.wuk, 0, NULL);
	IR ? w_buf(w, g, f->mla_q.iquery, 0, NULL) : w_null(w);
	w_buf(w, g, pos, 0, NULL);
	w_rope(w, f->mla_q.rope), w_float(w, rope_cs(R));
	if (IR)
		w_rope(w, iq), w_float(w, rope_cs(IR));
	else
		w_null(w), w_lit(w, "1.0f");
	w_size(w, sz_numel(g, pos, 1), 0);
	w_int(w, H), w_int(w, Dn), w_int(w, Dr), w_int(w, A_rope_rot_dim(R)), w_int(w, L);
	IR ? w_int(w, Hi) : w_lit(w, "0");
	IR ? w_int(w, A_rope_head_dim(IR)) : w_lit(w, "0");
	IR ? w_int(w, A_rope_rot_dim(IR)) : w_lit(w, "0");
	snprintf(targs, tlen, "%s, %s, %s, %s", ctype(g, f->mla_q.wuk), bool_s(tb), bool_s(A_rope_interleaved(R)),
	         bool_s(IR && A_rope_interleaved(IR)));
	return H * NL + Hi;
}

/* MLA latent (and indexer key) preparation with the cache writes: k_mla_kvprep; when the query's
** preparation exists too, steps it serves run both as k_mla_prep and larger ones k_mla_kvprep alone. */
static int emit_fk_mla_kv(Em *e, const FuseKernel *f, char *err, size_t len)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const FuseKernel *q = mla_partner(g, f);
	int pos = g->node[f->m[0]].in[3], jobs = f->m[1] >= 0 ? 2 : 1;
	char t[512], qa[128], ka[128];
	Wr w;
	if (q) {
		w_start(&w, f->host);
		int64_t nq = args_mla_q(e, &w, q, qa, sizeof qa);
		if (args_mla_kv(e, &w, f, 1, ka, sizeof ka, err, len))
			return -1;
		w.L.grid[0] = sz_const(nq + jobs);
		w.L.grid[1] = sz_numel(g, pos, 1);
		w.L.tmax = q->tmax;
		w.minb = MLA_Q_MIN_BLOCKS;
		snprintf(t, sizeof t, "k_mla_prep<%s, %s, %s>", A, qa, ka);
		w_finish(e, &w, t);
	}
	w_start(&w, f->host);
	if (args_mla_kv(e, &w, f, 0, ka, sizeof ka, err, len))
		return -1;
	w.L.grid[0] = sz_const(jobs);
	w.L.grid[1] = sz_numel(g, pos, 1);
	w.L.tmin = q ? q->tmax + 1 : 1;
	w.L.tmax = f->tmax;
	snprintf(t, sizeof t, "k_mla_kvprep<%s, %s>", A, ka);
	w_finish(e, &w, t);
	return 0;
}

/* MLA query absorb + rotary (and the indexer query's rotary) for small steps: k_mla_qprep (or, with the
** latent's preparation, k_mla_prep, which emit_fk_mla_kv writes). */
static void emit_fk_mla_q(Em *e, const FuseKernel *f)
{
	if (mla_partner(e->g, f))
		return;
	const char *A = e->g->cuda.act == DT_BF16 ? "bf16" : "float";
	char t[256], qa[128];
	Wr w;
	w_start(&w, f->host);
	int64_t nq = args_mla_q(e, &w, f, qa, sizeof qa);
	w.L.grid[0] = sz_const(nq);
	w.L.tmax = f->tmax;
	w.minb = MLA_Q_MIN_BLOCKS;
	snprintf(t, sizeof t, "k_mla_qprep<%s, %s>", A, qa);
	w_finish(e, &w, t);
}

/* The MLA value absorb from the attention's rows straight into the output projection's input: k_mla_vabsorb.
** Steps that take the split attention get the variant that merges its range states (mla_absorb_merges),
** right after it at the same node; larger steps read the attention's rows. */
static void emit_fk_mla_out(Em *e, const FuseKernel *f)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const Node *n = &g->node[f->m[0]];
	int wv = f->mla_out.wuv, merged = mla_absorb_merges(g, f->m[0]), first = e->nl;
	int64_t H = A_mla_heads(n), Dv = A_mla_dv(n), Do = g->node[wv].dim[1];
	Size T = sz_numel(g, n->in[3], 1);
	for (int pass = !merged; pass < 2; pass++) { /* pass 0: the merging launch; 1: the plain one */
		Wr w;
		w_start(&w, f->host);
		w_buf(&w, g, f->mla_out.out, 1, NULL);
		pass ? w_buf(&w, g, f->m[0], 0, NULL) : w_null(&w);
		w_buf(&w, g, wv, 0, NULL);
		w_size(&w, T, 0), w_int(&w, H), w_int(&w, Dv), w_int(&w, Do);
		if (!pass)
			w_mla_states(&w, T, H, Dv, mla_split_ns(e, f->m[0])), w_int(&w, mla_split_ns(e, f->m[0]));
		w.L.grid[0] = sz_const((Do + 8 * MLA_VR - 1) / (8 * MLA_VR));
		w.L.grid[1] = sz_numel(g, n->in[3], 8);
		w.L.grid[2] = sz_const(H);
		w.L.tmin = pass && merged ? MLA_SPLIT_TMAX + 1 : 1;
		w.L.tmax = pass ? f->tmax : MLA_SPLIT_TMAX;
		char t[256];
		snprintf(t, sizeof t, "k_mla_vabsorb<%s, %s, %s>", A, ctype(g, wv), bool_s(!pass));
		w_finish(e, &w, t);
	}
	if (e->mla_xq[f->m[0]] >= 0) {
		split_multi_seq(e, first);
		emit_mla_x(e, f, &g->fk[e->mla_xq[f->m[0]]]);
	}
}

/* MoE routing and weights in one kernel: k_moe_route_weights. */
static void emit_fk_moe_route(Em *e, const FuseKernel *f)
{
	Graph *g = e->g;
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const Node *R = &g->node[f->m[0]], *W = &g->node[f->m[1]];
	int l = R->in[0], b = R->nin > 1 ? R->in[1] : -1;
	Wr w;
	w_start(&w, f->host);
	w_buf(&w, g, f->m[0], 1, NULL), w_buf(&w, g, f->m[1], 1, NULL), w_buf(&w, g, l, 0, NULL);
	b >= 0 ? w_buf(&w, g, b, 0, NULL) : w_null(&w);
	w_int(&w, g->node[l].dim[1]), w_int(&w, A_moe_route_k(R)),
		w_int(&w, A_moe_route_groups(R) ? A_moe_route_groups(R) : 1);
	w_int(&w, A_moe_route_topk_groups(R) ? A_moe_route_topk_groups(R)
	                                     : (A_moe_route_groups(R) ? A_moe_route_groups(R) : 1)),
		w_int(&w, A_moe_route_sigmoid(R));
	w_int(&w, A_moe_weights_sigmoid(W)), w_int(&w, A_moe_weights_norm(W)), w_float(&w, A_moe_weights_scale(W));
	w.L.grid[0] = sz_dims(l, 0, 1, 1);
	w.L.block = 256; /* a thread an expert (E <= 1024: a thread takes up to four) */
	w.L.tmax = f->tmax;
	char t[256];
	snprintf(t, sizeof t, "k_moe_route_weights<%s, %s>", A, b >= 0 ? ctype(g, b) : A);
	w_finish(e, &w, t);
}

/* The experts' down projections with the shared expert and the adds for small steps: k_moe_down_fused
** (k_qmoe_down_fused when either down projection stays in blocks; k_qmoe_down_mma, split over the
** experts with a second scratch region for their dots and a count a row block, when both are Q4_K or
** Q6_K), right after the moe_ffn's own k_moe_up or k_qmoe_up (its scratch is the first region of both
** launches). */
static void emit_fk_moe_down(Em *e, int k)
{
	Graph *g = e->g;
	const FuseKernel *f = &g->fk[k];
	const KSel *sel = &g->sel[e->sel_first[k]]; /* select.c sel_moe_down: one record */
	const char *A = g->cuda.act == DT_BF16 ? "bf16" : "float";
	const Node *n = &g->node[f->m[0]];
	int x = n->in[0], ids = n->in[1], wt = n->in[2], ga = n->in[3], dn = n->in[5];
	int S = f->moe_down.sdown, sw = f->moe_down.sswiglu, r = f->moe_down.res;
	int64_t C = g->node[x].dim[1], Fd = g->node[ga].dim[1], K = g->node[ids].dim[1];
	Size T = sz_dims(x, 0, 1, 1), KF = sz_const(K * Fd);
	int sd = S >= 0 ? g->node[S].in[1] : -1, q = sel->kern != SK_MOE_DOWN_FUSED, mma = sel->kern == SK_QMOE_DOWN_MMA;
	const char *wty = q ? "unsigned char" : NULL;
	int nj = (int)K + (S >= 0), G = sel->split[0];
	Wr w;
	w_start(&w, f->host);
	w_buf(&w, g, f->moe_down.out, 1, NULL);
	w_scratch(&w, T, KF, "float", 4);
	if (mma)
		w_scratch(&w, T, sz_const(nj * C), "float", 4), w_zero(&w, T, sz_const((C + 127) / 128), "int", 4);
	w_buf(&w, g, ids, 0, NULL), w_buf(&w, g, wt, 0, NULL), w_buf(&w, g, dn, 0, wty);
	w_int(&w, C), w_int(&w, Fd), w_int(&w, K);
	if (mma)
		w_int(&w, G);
	if (S >= 0) {
		w_buf(&w, g, sd, 0, wty), w_buf(&w, g, g->node[sw].in[0], 0, NULL);
		w_buf(&w, g, g->node[sw].in[1], 0, NULL), w_int(&w, g->node[sw].dim[1]);
	} else
		w_null(&w), w_null(&w), w_null(&w), w_lit(&w, "0");
	r >= 0 ? w_buf(&w, g, r, 0, NULL) : w_null(&w);
	if (mma)
		w.L.grid[0] = sz_const((C + 127) / 128), w.L.grid[1] = sz_const((K + G - 1) / G + (S >= 0)), w.L.grid[2] = T;
	else
		w.L.grid[0] = sz_const(q ? (C + 15) / 16 : (C + 7) / 8), w.L.grid[1] = T;
	w.L.tmax = f->tmax;
	char t[256];
	if (mma) /* ops/qfused.cuh */
		snprintf(t, sizeof t, "k_qmoe_down_mma<%s, %d, %d, %s, %s>", A, sel->qt[0], sel->qt[1], bool_s(S >= 0),
		         bool_s(r >= 0));
	else if (q) /* ops/qfused.cuh: the routed and the shared down projections each in blocks or floats */
		snprintf(t, sizeof t, "k_qmoe_down_fused<%s, %d, %d, %s, %s>", A, sel->qt[0], sel->qt[1], bool_s(S >= 0),
		         bool_s(r >= 0));
	else
		snprintf(t, sizeof t, "k_moe_down_fused<%s, %s, %s, %s, %s>", A, ctype(g, dn), sd >= 0 ? ctype(g, sd) : A,
		         bool_s(S >= 0), bool_s(r >= 0));
	w_finish(e, &w, t);
}

/* Which steps each node's own kernels serve, and which adds and attentions fused kernels take part of. */
static void fk_prepare(Em *e)
{
	Graph *g = e->g;
	for (int i = 0; i < g->n; i++)
		e->norm_of[i] = e->add_of[i] = e->rope_fold[i] = -1, e->own_tmin[i] = e->tail_tmin[i] = 1, e->kv_fused[i] = 0;
	for (int k = 0; k < g->nfk; k++) {
		const FuseKernel *f = &g->fk[k];
		if (f->kind == FK_ADD_NORM) {
			e->norm_of[f->host] = f->m[0], e->add_of[f->m[0]] = f->host;
			continue;
		}
		if (f->kind == FK_ROPE_KV)
			e->kv_fused[f->attn] = 1, e->rope_fold[f->attn] = f->fold && attn_step_rowb(g, &g->node[f->attn]) ? k : -1;
		if (f->kind == FK_MLA_KV)
			for (int m = 0; m < 2; m++)
				if (f->m[m] >= 0)
					e->kv_fused[f->m[m]] = 1;
		if (f->kind == FK_MOE_DOWN)
			e->tail_tmin[f->m[0]] = f->tmax + 1;
		for (int c = 0; c < f->ncover; c++)
			if (e->own_tmin[f->cover[c]] < f->tmax + 1)
				e->own_tmin[f->cover[c]] = f->tmax + 1;
	}
}

/* The launches at node id: its own kernels for the steps they serve, then the fused kernels hosted there
** (after, so that one may read what the host's own kernels wrote: the cache row, the experts' scratch). */
static int emit_node(Em *e, int id, char *err, size_t len)
{
	Graph *g = e->g;
	int first = e->nl, rc = emit_own(e, id, err, len), keep = first;
	for (int i = first; i < e->nl; i++) {
		Launch *l = &e->l[i];
		if (l->tmin < e->own_tmin[id])
			l->tmin = e->own_tmin[id];
		if (l->tmin <= l->tmax)
			e->l[keep++] = *l;
	}
	e->nl = keep;
	if (e->absorb_only[id])
		split_multi_seq(e, first);
	for (int k = e->fk_head[id]; k >= 0 && !rc; k = e->fk_next[k]) {
		const FuseKernel *f = &g->fk[k];
		if (f->kind == FK_GEMV)
			emit_fk_gemv(e, k);
		else if (f->kind == FK_ROPE_KV)
			emit_fk_rope(e, f);
		else if (f->kind == FK_MLA_KV)
			rc = emit_fk_mla_kv(e, f, err, len);
		else if (f->kind == FK_MLA_Q)
			emit_fk_mla_q(e, f);
		else if (f->kind == FK_MLA_OUT)
			emit_fk_mla_out(e, f);
		else if (f->kind == FK_MOE_ROUTE)
			emit_fk_moe_route(e, f);
		else if (f->kind == FK_MOE_DOWN)
			emit_fk_moe_down(e, k);
	}
	return rc;
}

/* The sampler: one fixed wrapper, launched by glmrun on the last logits row of each sequence, grid (rows,
** SAMPLE_NB), with the greedy split's partials and counters and the NaN/Inf verdicts (k_sample). Each row
** b samples with its own four parameters at params + 4b (glmrun serve: each request its own); the name
** glm_sample_rows tells glmrun so (plans before it have glm_sample, one setting for every row). */
static const char *emit_sampler(Em *e)
{
	const char *A = e->g->cuda.act == DT_BF16 ? "bf16" : "float";
	appendf(e, "extern \"C\" __global__ void __launch_bounds__(1024) glm_sample_rows(int *out, int cap, int *next_token, "
	        "int *next_pos, int *step, const %s *logits, int V, const float *params, const int *seq, float *part_v, "
	        "int *part_i, unsigned *done, int *nf) { k_sample<%s>(out, cap, next_token, next_pos, step, logits, V, "
	        "params + 4 * blockIdx.x, seq, part_v, part_i, done, nf); }\n", A, A);
	return "glm_sample_rows";
}

/* The newer kernels glmc chooses where they apply, less those the plan's meta "compile.fallback" (glmc
** --fallback, a comma list) names: each has an older kernel computing the same values, which --fallback
** takes back (to compare the two in one run, bench/fallback.sh, or to step around a fault in the newer). */
static int fb_parse(Em *e, char *err, size_t len)
{
	struct {
		const char *name;
		int *on;
	} k[] = {{"attn_split", &e->x_split}, {"moe_tc", &e->x_moe_tc},       {"dsa_tc", &e->x_dsa_tc},
	         {"mla_expand", &e->x_mla},   {"mla_split_tc", &e->x_split_tc}, {"indexer_tc", &e->x_idx_tc}};
	const int nk = (int)(sizeof k / sizeof k[0]);
	for (int i = 0; i < nk; i++)
		*k[i].on = 1;
	for (const char *v = graph_meta(e->g, "compile.fallback"); v && *v;) {
		size_t n = strcspn(v, ",");
		int i = 0, all = n == 3 && !strncmp(v, "all", 3);
		while (i < nk && !(strlen(k[i].name) == n && !strncmp(v, k[i].name, n)))
			i++;
		if (!all && i == nk)
			return seterr(err, len, "--fallback: unknown kernel '%.*s' (attn_split, moe_tc, dsa_tc, mla_expand, "
			              "mla_split_tc, indexer_tc or all)", (int)n, v);
		for (int j = 0; j < nk; j++)
			if (all || j == i)
				*k[j].on = 0;
		v += n + (v[n] == ',');
	}
	return 0;
}

int emit_cuda(Graph *g, const char *arch, int act, int compile, FILE *warn, char *err, size_t len)
{
	Em e = {.g = g};
	if (target_for_arch(arch, &e.t))
		return seterr(err, len, "emit_cuda: unknown GPU architecture '%s'", arch);
	if (fb_parse(&e, err, len))
		return -1;
	g->cuda = (Cuda){.arch = arena_strdup(g->A, arch), .act = act, .wconv = act == DT_BF16 ? DT_BF16 : -1};
	/* cuda_wdtype's answer, found once rather than by a search per weight */
	char *bias = arena_alloc(g->A, (size_t)g->n + 1);
	memset(bias, 0, (size_t)g->n + 1);
	for (int i = 0; i < g->n; i++)
		if (g->node[i].op == OP_LINEAR && g->node[i].nin > 2)
			bias[g->node[i].in[2]] = 1;
	for (int i = 0; i < g->n; i++) /* a rope's frequency table (2) stays float whatever the plan converts */
		if (g->node[i].op == OP_ROPE && g->node[i].nin > 2 && g->node[g->node[i].in[2]].ndim == 1)
			bias[g->node[i].in[2]] = 2;
	g->cuda.bias = bias;
	appendf(&e, "%s\n/* ---- generated by glmc: one wrapper per distinct instantiation ---- */\n", glm_kernels_cuh);
	size_t nn = (size_t)(g->n ? g->n : 1);
	e.norm_of = malloc(sizeof(int) * nn), e.add_of = malloc(sizeof(int) * nn), e.own_tmin = malloc(sizeof(int) * nn);
	e.kv_fused = malloc(nn), e.tail_tmin = malloc(sizeof(int) * nn), e.rope_fold = malloc(sizeof(int) * nn);
	GLM_ASSERT(e.norm_of && e.add_of && e.own_tmin && e.kv_fused && e.tail_tmin && e.rope_fold);
	fk_prepare(&e);
	e.wq = malloc(sizeof(int) * nn);
	GLM_ASSERT(e.wq);
	select_kernels(g, &e.t, e.wq);
	e.mla_xq = malloc(sizeof(int) * nn), e.absorb_only = malloc(nn);
	GLM_ASSERT(e.mla_xq && e.absorb_only);
	mla_x_prepare(&e);
	e.sel_first = malloc(sizeof(int) * (size_t)(g->nfk ? g->nfk : 1)), e.sel_node = malloc(sizeof(int) * nn);
	GLM_ASSERT(e.sel_first && e.sel_node);
	for (int k = 0; k < g->nfk; k++)
		e.sel_first[k] = -1;
	for (int i = 0; i < g->n; i++)
		e.sel_node[i] = -1;
	for (int i = g->nsel - 1; i >= 0; i--)
		*(g->sel[i].fk >= 0 ? &e.sel_first[g->sel[i].fk] : &e.sel_node[g->sel[i].node]) = i;
	/* each node's hosted fused kernels in order, listed once (a search of all of them per node was n²) */
	e.fk_head = malloc(sizeof(int) * nn), e.fk_next = malloc(sizeof(int) * (size_t)(g->nfk ? g->nfk : 1));
	GLM_ASSERT(e.fk_head && e.fk_next);
	for (int i = 0; i < g->n; i++)
		e.fk_head[i] = -1;
	for (int k = g->nfk - 1; k >= 0; k--)
		if (g->fk[k].host >= 0 && g->fk[k].host < g->n)
			e.fk_next[k] = e.fk_head[g->fk[k].host], e.fk_head[g->fk[k].host] = k;
	int rc = 0;
	for (int i = 0; i < g->n && !rc; i++)
		rc = emit_node(&e, i, err, len);
	if (rc == 1) {
		if (warn)
			fprintf(warn, "glmc: warning: the plan runs on the CPU only: %s\n", err);
		err[0] = 0;
		g->cuda = (Cuda){0};
		compile = 0;
		rc = 0;
	} else if (!rc) {
		g->cuda.sample_kernel = emit_sampler(&e);
		int reduces = 0;
		for (int i = 0; i < g->n; i++)
			reduces |= g->node[i].op == OP_ALLREDUCE;
		if (reduces) {
			const char *A = act == DT_BF16 ? "bf16" : "float";
			appendf(&e, "extern \"C\" __global__ void __launch_bounds__(512) %s(%s *y, const %s *x, long long n, const "
			        "P2pCtl *c) { k_p2p_allreduce<%s>(y, x, n, c); }\n", KERNEL_P2P_ALLREDUCE, A, A, A);
		}
		emit_qhelpers(&e);
		g->cuda.source = arena_strdup(g->A, e.src);
		g->cuda.l = arena_alloc(g->A, sizeof(Launch) * (size_t)(e.nl ? e.nl : 1));
		memcpy(g->cuda.l, e.l, sizeof(Launch) * (size_t)e.nl);
		g->cuda.nl = e.nl;
	}
	for (int i = 0; i < e.nkeys; i++)
		free(e.keys[i]);
	free(e.keys), free(e.l), free(e.src), free(e.norm_of), free(e.add_of), free(e.own_tmin), free(e.kv_fused), free(e.tail_tmin);
	free(e.rope_fold);
	free(e.wq), free(e.fk_head), free(e.fk_next), free(e.sel_first), free(e.sel_node), free(e.mla_xq), free(e.absorb_only);
	if (rc || !compile)
		return rc;
	return emit_cuda_compile(g, warn, err, len);
}

int emit_cuda_compile(Graph *g, FILE *warn, char *err, size_t len)
{
	if (!g->cuda.source)
		return 0;
	if (!nvrtc_available()) {
		if (warn)
			fprintf(warn, "glmc: warning: NVRTC not found; the plan holds kernel source only and glmrun will compile "
			        "it at load\n");
		return 0;
	}
	unsigned char *cubin;
	size_t n;
	if (nvrtc_compile(g->cuda.source, g->cuda.arch, &cubin, &n, err, len))
		return -1;
	unsigned char *c = arena_alloc(g->A, n);
	memcpy(c, cubin, n);
	free(cubin);
	g->cuda.cubin = c, g->cuda.cubin_size = n;
	/* the persistent kernel too, so that glmrun on a GPU of this arch does not spend its start compiling it */
	if (g->cuda.psource) {
		if (nvrtc_compile(g->cuda.psource, g->cuda.arch, &cubin, &n, err, len)) {
			char tmp[512];
			snprintf(tmp, sizeof tmp, "%s", err);
			return seterr(err, len, "the persistent decode kernel for %s: %s", g->cuda.arch, tmp);
		}
		c = arena_alloc(g->A, n);
		memcpy(c, cubin, n);
		free(cubin);
		g->cuda.pcubin = c, g->cuda.pcubin_size = n;
	}
	return 0;
}

/*
** The persistent decode kernel's program (issue 47; ops/persist.cuh has the worker loop). For every kernel
** wrapper the step of T tokens launches, a packed argument record (struct GlmPA<N>, the wrapper's parameters
** as members: the layout cuLaunchKernel gives them, each at its natural alignment) and a body glm_pk<N> that
** reads the record and makes the wrapper's own template call, so a task computes exactly what the launch's
** blocks compute; glm_persist_run's switch maps a launch index to its body. The wrappers are read back from
** the plan's source (w_finish's one-line form), so this works on a plan read from a file as well.
**
** Audit of the decode-step templates (T = 1 of the llama, qwen3_moe and glm_moe_dsa fixture plans, f32 and
** bf16: k_embedding, k_gemv_fused/gemv_core, k_rope_qk_kv, k_attention, k_mla_prep, k_indexer_scores,
** k_indexer_select, k_mla_split, k_mla_vabsorb, k_moe_route_weights, k_moe_up, k_moe_down_fused): every
** early return before a __syncthreads is uniform per block (or per warp after the block's last barrier),
** none uses __syncthreads_or/count, none takes dynamic shared memory at T = 1, and the __ldg reads of
** activations become plain loads under GLM_PERSIST. Their shared arrays would add up (one allocation per
** instantiation in the one kernel, past ptxas's 48 KiB at once): under GLM_PERSIST they are views of one
** dynamic pool (GLM_SH), which emit_cuda_persist_dsm sizes and emit_cuda_persist_explain reports. Not in
** this audit: the templates only real shapes choose, such as GLM-5's k_qgemv_fused_mma and k_qgemv_sk (which
** takes dynamic shared memory: a lane's `own` part); the GLM-5 slice's persistent step faults on an H100.
*/

/* The wrapper line of kernel `name` in src: its formal parameters and its template call, or -1. */
static int persist_wrapper(const char *src, const char *name, const char **formal, int *nformal, const char **call,
                           int *ncall)
{
	char key[64];
	snprintf(key, sizeof key, " %s(", name);
	const char *s = strstr(src, key), *b, *e;
	if (!s)
		return -1;
	*formal = s + strlen(key);
	if (!(b = strchr(*formal, ')')) || strncmp(b, ") { ", 4))
		return -1;
	*nformal = (int)(b - *formal);
	b += 4;
	if (!strncmp(b, "glm_pdl_wait(); ", 16))
		b += 16;
	if (!strncmp(b, "extern __shared__", 17) && !(b = strstr(b, "glm_dsm[]; ")))
		return -1;
	if (!strncmp(b, "glm_dsm[]; ", 11))
		b += 11;
	if (!(e = strstr(b, "; }\n")))
		return -1;
	*call = b, *ncall = (int)(e - b);
	return 0;
}

/* Append the record struct and body of wrapper k (kernel glm_k<k>): the record's members are the wrapper's
** parameters, copied into locals of the same names so its call text applies unchanged. */
static int persist_body(Em *e, int k, const char *src, const char *name, char *err, size_t len)
{
	const char *formal, *call;
	int nf, nc;
	if (persist_wrapper(src, name, &formal, &nf, &call, &nc))
		return seterr(err, len, "emit_cuda_persist: kernel %s: no wrapper of the expected form in the plan's source",
		              name);
	appendf(e, "struct GlmPA%d {", k);
	for (const char *p = formal, *end = formal + nf; p < end;) {
		const char *c = memchr(p, ',', (size_t)(end - p));
		if (!c)
			c = end;
		appendf(e, " %.*s;", (int)(c - p), p);
		p = c + (c < end ? 2 : 0);
	}
	appendf(e, " };\n__device__ void glm_pk%d(const unsigned char *arg, unsigned char *glm_dsm)\n{\n"
	        "\tconst GlmPA%d *p = (const GlmPA%d *)arg;\n\t(void)p, (void)glm_dsm;\n", k, k, k);
	for (const char *p = formal, *end = formal + nf; p < end;) {
		const char *c = memchr(p, ',', (size_t)(end - p)), *nm;
		if (!c)
			c = end;
		for (nm = c; nm > p && (nm[-1] == '_' || (nm[-1] >= 'a' && nm[-1] <= 'z') || (nm[-1] >= '0' && nm[-1] <= '9'));)
			nm--;
		appendf(e, "\t%.*s = p->%.*s;\n", (int)(c - p), p, (int)(c - nm), nm);
		p = c + (c < end ? 2 : 0);
	}
	appendf(e, "\t%.*s;\n}\n", nc, call);
	return 0;
}

/* The persistent program of g's steps of T tokens, malloc'd (emit_cuda_persist says what it holds); NULL and
** err on failure. Its worker block and blocks an SM into *block and *per_sm, its bodies into *nbody. */
static char *persist_source(const Graph *g, int T, int *block_, int *per_sm_, int *nbody, char *err, size_t len)
{
	const Cuda *cu = &g->cuda;
	if (!cu->source || !cu->nl)
		return seterr(err, len, "emit_cuda_persist: the plan has no CUDA launches"), NULL;
	const Sched *sc = sched_for(cu, T);
	int block = 32, per_sm = sc ? sc->per_sm : 1, smem = 0, nb = 0;
	int *kid = calloc((size_t)cu->nl, sizeof *kid);
	GLM_ASSERT(kid);
	for (int i = 0; i < cu->nl; i++) {
		const Launch *l = &cu->l[i];
		kid[i] = -1;
		if (l->tmin > T || l->tmax < T || (sc && !sc->ntask[i]))
			continue;
		if (l->kind != LK_KERNEL && sc) { /* a collective as P2P tasks: kernels.cuh glm_p_allreduce / glm_p_allgather */
			kid[i] = -2 - l->kind;
			nb++;
			continue;
		}
		if (l->kind != LK_KERNEL || !l->kernel || strncmp(l->kernel, "glm_k", 5)) {
			free(kid);
			return seterr(err, len, "emit_cuda_persist: launch %d (node %d) is a %s, which the persistent kernel "
			              "cannot run as a task", i, l->node, l->kernel ? l->kernel : "collective"), NULL;
		}
		kid[i] = atoi(l->kernel + 5);
		block = l->block > block ? l->block : block;
		smem = l->smem > smem ? l->smem : smem;
		nb++;
	}
	if (sc && sc->block > block)
		block = sc->block;
	Em e = {.g = (Graph *)g}; /* appendf's buffer only */
	appendf(&e, "#define GLM_PERSIST 1\n%s\n/* ---- generated by glmc: the persistent decode kernel, T = %d: %d launches, "
	        "worker block %d, %d a SM, the largest body's own dynamic shared memory %d ---- */\n", glm_kernels_cuh, T, nb,
	        block, per_sm, smem);
	int rc = 0;
	*nbody = 0;
	for (int i = 0; i < cu->nl && !rc; i++) {
		int first = kid[i] != -1;
		for (int j = 0; j < i && first; j++)
			first = kid[j] != kid[i];
		if (first && kid[i] >= 0)
			rc = persist_body(&e, kid[i], cu->source, cu->l[i].kernel, err, len);
		*nbody += first; /* a collective's body is kernels.cuh's glm_p_*, one a kind */
	}
	if (!rc) {
		appendf(&e, "__device__ void glm_persist_run(int launch, const unsigned char *arg, unsigned char *dsm)\n{\n"
		        "\tswitch (launch) {\n");
		for (int i = 0; i < cu->nl; i++) {
			if (kid[i] == -2 - LK_ALLREDUCE)
				appendf(&e, "\tcase %d:\n\t\tglm_p_allreduce<%s>(arg);\n\t\treturn;\n", i,
				        cu->act == DT_BF16 ? "bf16" : "float");
			else if (kid[i] == -2 - LK_ALLGATHER)
				appendf(&e, "\tcase %d:\n\t\tglm_p_allgather(arg);\n\t\treturn;\n", i);
			if (kid[i] < 0)
				continue;
			int last = 1;
			for (int j = i + 1; j < cu->nl && last; j++)
				last = kid[j] != kid[i];
			if (!last)
				continue; /* one group of case labels per body, ending at its last launch */
			for (int j = 0; j <= i; j++)
				if (kid[j] == kid[i])
					appendf(&e, "\tcase %d:\n", j);
			appendf(&e, "\t\tglm_pk%d(arg, dsm);\n\t\treturn;\n", kid[i]);
		}
		appendf(&e, "\t}\n}\nextern \"C\" __global__ void __launch_bounds__(%d, %d) glm_persist(const GlmPTask *task, "
		        "const int *lo, const int *hi, const GlmPLaunch *lt, const int *wait, unsigned *count, GlmPCtl *ctl, "
		        "const unsigned char *args, unsigned long long *trace, int close)\n{\n\textern __shared__ __align__(128) "
		        "unsigned char glm_dsm[];\n\tglm_persist_loop(task, lo, hi, lt, wait, count, ctl, args, glm_dsm, trace, "
		        "close);\n}\n", block, per_sm);
	}
	free(kid);
	if (rc) {
		free(e.src);
		return NULL;
	}
	*block_ = block, *per_sm_ = per_sm;
	return e.src;
}

const char *emit_cuda_persist(Graph *g, int T, char *err, size_t len)
{
	int block, per_sm, nbody;
	char *src = persist_source(g, T, &block, &per_sm, &nbody, err, len);
	if (!src)
		return NULL;
	g->cuda.psource = arena_strdup(g->A, src);
	free(src);
	return g->cuda.psource;
}

/* Workers of `block` threads, regs registers a thread and smem bytes of shared memory (sm_90's reserved
** 1 KiB included, as emit_cuda_usage reads it) that one H100 SM holds: 65536 registers (given to warps in
** units of 256), 228 KiB of shared memory (227 a block), 2048 threads, 32 blocks. */
static int persist_h100_fit(int block, int regs, int64_t smem)
{
	if (smem - 1024 > 232448 || regs > 255 || block > 1024)
		return 0;
	int warps = (block + 31) / 32, wregs = (regs * 32 + 255) / 256 * 256;
	int64_t f = 65536 / (warps * wregs);
	f = smem > 0 && 233472 / smem < f ? 233472 / smem : f;
	f = 2048 / block < f ? 2048 / block : f;
	return (int)(f < 32 ? f : 32);
}

int64_t emit_cuda_persist_dsm(const Graph *g, int T, int worker, int64_t budget, int *max_lanes, char *err, size_t len)
{
	const Cuda *cu = &g->cuda;
	if (!cu->cubin)
		return seterr(err, len, "emit_cuda_persist_dsm: the plan holds no cubin"), -1;
	const Sched *sc = sched_for(cu, T);
	int64_t need = 0, smem;
	*max_lanes = 1;
	for (int i = 0; i < cu->nl; i++) {
		const Launch *l = &cu->l[i];
		int regs;
		if (l->tmin > T || l->tmax < T || (sc && !sc->ntask[i]) || l->kind != LK_KERNEL)
			continue;
		int64_t frame;
		if (emit_cuda_usage(cu->cubin, cu->cubin_size, l->kernel, &regs, &smem, &frame, err, len))
			return -1;
		int64_t own, pool;
		sched_lane_bytes(l->smem, smem > 1024 ? smem - 1024 : 0, &own, &pool); /* as glmrun does */
		int k = sched_lanes_ok(g, i) ? sched_lanes(worker, l->block, own + pool, budget) : 1;
		need = k * (own + pool) > need ? k * (own + pool) : need;
		*max_lanes = k > *max_lanes ? k : *max_lanes;
	}
	return need;
}

/* The bodies that bound the persistent kernel's registers: the three launches of the T schedule whose own
** kernels (the plan's kernel-path cubin) take the most registers a thread, as ", bodies' own kernels with the
** most registers: NAME R (F bytes of stack), ..." — all bodies share the largest allocation. */
static void persist_top_regs(const Graph *g, int T, FILE *f)
{
	const Cuda *cu = &g->cuda;
	const Sched *sc = sched_for(cu, T);
	if (!cu->cubin || !sc)
		return;
	int top[3] = {-1, -1, -1}, treg[3] = {0, 0, 0};
	int64_t tframe[3] = {0, 0, 0};
	char err[256], b1[256], b2[256];
	for (int i = 0; i < cu->nl; i++) {
		const Launch *l = &cu->l[i];
		int regs, dup = 0;
		int64_t smem, frame;
		if (!sc->ntask[i] || l->kind != LK_KERNEL || !l->kernel ||
		    emit_cuda_usage(cu->cubin, cu->cubin_size, l->kernel, &regs, &smem, &frame, err, sizeof err))
			continue;
		for (int k = 0; k < 3; k++) /* one entry a template instantiation */
			dup |= top[k] >= 0 && !strcmp(cuda_template(g, cu->l[top[k]].kernel, b1, sizeof b1),
			                               cuda_template(g, l->kernel, b2, sizeof b2));
		for (int k = 0; k < 3 && !dup; k++)
			if (top[k] < 0 || regs > treg[k]) {
				for (int j = 2; j > k; j--)
					top[j] = top[j - 1], treg[j] = treg[j - 1], tframe[j] = tframe[j - 1];
				top[k] = i, treg[k] = regs, tframe[k] = frame;
				break;
			}
	}
	for (int k = 0; k < 3 && top[k] >= 0; k++)
		fprintf(f, "%s%s %d (%lld bytes of stack)", k ? ", " : "; the bodies' own kernels with the most registers: ",
		        cuda_template(g, cu->l[top[k]].kernel, b1, sizeof b1), treg[k], (long long)tframe[k]);
}

void emit_cuda_persist_explain(const Graph *g, int T, FILE *f)
{
	char err[1024];
	int block, per_sm, nbody, regs;
	int64_t smem, frame;
	char *src = persist_source(g, T, &block, &per_sm, &nbody, err, sizeof err);
	if (!src) {
		fprintf(f, "persistent decode kernel (T=%d): not possible: %s\n", T, err);
		return;
	}
	fprintf(f, "persistent decode kernel (T=%d): %d bodies, workers of %d threads, %d an SM", T, nbody, block, per_sm);
	/* the plan's cubin (emit_cuda_compile built it from the T = 1 program), else NVRTC now */
	unsigned char *cubin = NULL;
	size_t n = 0;
	const unsigned char *img = T == 1 ? g->cuda.pcubin : NULL;
	if (img)
		n = g->cuda.pcubin_size;
	else if (nvrtc_available() && !nvrtc_compile(src, g->cuda.arch, &cubin, &n, err, sizeof err))
		img = cubin;
	if (!img && !nvrtc_available())
		fprintf(f, "; NVRTC not found: no register or shared memory figures\n");
	else if (!img || emit_cuda_usage(img, n, "glm_persist", &regs, &smem, &frame, err, sizeof err))
		fprintf(f, "; does not compile for %s: %s\n", g->cuda.arch, err);
	else {
		fprintf(f, "; %s: %d registers a thread, %lld bytes of stack frame (spills), %lld bytes of static shared memory",
		        g->cuda.arch, regs, (long long)frame, (long long)smem);
		/* the lanes as glmrun sizes them on an H100 (228 KiB an SM, 1 KiB of it reserved a block) */
		int lanes = 1;
		int64_t budget = 233472 / per_sm - 1024 - smem, dsm;
		budget = budget < 232448 - smem ? budget : 232448 - smem;
		dsm = emit_cuda_persist_dsm(g, T, block, budget, &lanes, err, sizeof err);
		if (dsm >= 0)
			fprintf(f, " + %lld dynamic (up to %d lanes a worker, each with its body's own and its arrays)",
			        (long long)dsm, lanes);
		if (!strcmp(g->cuda.arch, "sm_90") && dsm >= 0) {
			int fit = persist_h100_fit(block, regs, smem + dsm);
			fprintf(f, "; an H100 SM holds %d such workers (%s)", fit, fit >= per_sm ? "fits" : "does NOT fit");
		}
		persist_top_regs(g, T, f);
		fprintf(f, "\n");
	}
	free(cubin), free(src);
}

/* Registers a thread, static shared memory and stack frame of `kernel` in an NVRTC cubin (ELF): registers and
** frame from .nv.info's REGCOUNT and FRAME_SIZE attributes (entries: format byte, attribute byte, a 16-bit
** size or value; 0x2f and 0x11 carry the symbol's index and the figure), shared memory the size of the
** kernel's .nv.shared section (0 when it has none). The frame holds spilled registers and calls' frames. */
int emit_cuda_usage(const unsigned char *img, size_t n, const char *kernel, int *regs, int64_t *shared, int64_t *frame,
                    char *err, size_t len)
{
	const Elf64_Ehdr *eh = (const Elf64_Ehdr *)img;
	if (n < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shoff + (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > n || eh->e_shstrndx >= eh->e_shnum)
		return seterr(err, len, "emit_cuda_usage: the cubin is not a well-formed 64-bit ELF image");
	const Elf64_Shdr *sh = (const Elf64_Shdr *)(img + eh->e_shoff);
	for (int i = 0; i < eh->e_shnum; i++)
		if (sh[i].sh_type != SHT_NOBITS && sh[i].sh_offset + sh[i].sh_size > n)
			return seterr(err, len, "emit_cuda_usage: cubin section %d is out of bounds", i);
	const char *names = (const char *)img + sh[eh->e_shstrndx].sh_offset;
	size_t nlen = sh[eh->e_shstrndx].sh_size;
	char want[256];
	snprintf(want, sizeof want, ".nv.shared.%s", kernel);
	long sym = -1;
	*regs = -1, *shared = 0, *frame = 0;
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_name < nlen && !strcmp(names + sh[i].sh_name, want))
			*shared = (int64_t)sh[i].sh_size;
		if (sh[i].sh_type != SHT_SYMTAB || sh[i].sh_link >= eh->e_shnum)
			continue;
		const Elf64_Sym *s = (const Elf64_Sym *)(img + sh[i].sh_offset);
		const Elf64_Shdr *strs = &sh[sh[i].sh_link];
		for (size_t k = 0; k < sh[i].sh_size / sizeof *s; k++)
			if (s[k].st_name < strs->sh_size && !strcmp((const char *)img + strs->sh_offset + s[k].st_name, kernel))
				sym = (long)k;
	}
	if (sym < 0)
		return seterr(err, len, "emit_cuda_usage: no symbol %s in the cubin", kernel);
	for (int i = 0; i < eh->e_shnum; i++) {
		if (sh[i].sh_name >= nlen || strcmp(names + sh[i].sh_name, ".nv.info"))
			continue;
		const unsigned char *p = img + sh[i].sh_offset, *end = p + sh[i].sh_size;
		while (p + 4 <= end) {
			int fmt = p[0], attr = p[1], v = p[2] | p[3] << 8;
			p += 4;
			if (fmt != 4) /* no payload: the 16 bits were the value */
				continue;
			if (p + v > end)
				break;
			if (v == 8 && (long)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24) == sym) {
				int64_t val = p[4] | p[5] << 8 | p[6] << 16 | (int64_t)p[7] << 24;
				if (attr == 0x2f)
					*regs = (int)val;
				else if (attr == 0x11)
					*frame = val;
			}
			p += v;
		}
	}
	if (*regs < 0)
		return seterr(err, len, "emit_cuda_usage: the cubin records no register count for %s", kernel);
	return 0;
}
