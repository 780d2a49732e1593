/*
** runtime/exec/exec.c — the CPU reference executor. It runs any verified graph node by node with the
** float32 reference kernels: slow, exact, and the oracle the GPU path is compared with. Every output
** is poisoned (NaN / -1) before its op runs, so an op that leaves an element unwritten is caught.
*/
#include "exec.h"
#include "par.h"
#include "ref.h"
#include "weights.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <math.h>
#include <string.h>

/* Load one weight as float32 (dequantized, transforms applied). */
static int load_weight(Exec *x, const Weights *d, const WeightRef *w, char *err, size_t len)
{
	int64_t numel = node_numel(&x->g->node[w->node], 0, 0);
	float *f = malloc((size_t)numel * sizeof(float));
	if (!f)
		return seterr(err, len, "out of memory for tensor '%s' (%lld values)", w->source, (long long)numel);
	if (weights_load_f32(d, x->g, w, x->rank, x->tp, f, err, len)) {
		free(f);
		return -1;
	}
	x->wt[w->node] = f;
	x->buf[w->node] = f;
	return 0;
}

/* Float values rounded to bf16 in place (nearest even, NaN kept), as the GPU stores them in a bf16 plan. */
static void round_bf16(float *f, int64_t n)
{
	for (int64_t k = 0; k < n; k++)
		f[k] = ref_bf16_to_f32(ref_f32_to_bf16(f[k]));
}

/* Node i's output, when x mirrors a bf16 plan (exec_round_bf16) and the node holds float values. */
static void round_node(Exec *x, int i)
{
	if (x->round_act == DT_BF16 && x->g->node[i].dtype == DT_F32)
		round_bf16(x->buf[i], exec_numel(x, i));
}

/* Widen node i's late ranges by launch l's step sizes (lo/tlo 0: none yet): LAUNCH_NORM_LATE's (the one-token
** launches: 1..1) or LAUNCH_NORM_TC's (k_gemv_tc: 2..16); two launches of one kind give the range covering both. */
static void late_widen(ExecLate *e, const Launch *l)
{
	int *lo = l->flags & LAUNCH_NORM_TC ? &e->tlo : &e->lo, *hi = l->flags & LAUNCH_NORM_TC ? &e->thi : &e->hi;
	if (!*lo || l->tmin < *lo)
		*lo = l->tmin;
	if (l->tmax > *hi)
		*hi = l->tmax;
}

/* Whether a step of T tokens reads node i's late copy (or, for an rmsnorm, forms it). */
static int late_in(const ExecLate *e, int64_t T)
{
	return (e->lo && e->lo <= T && T <= e->hi) || (e->tlo && e->tlo <= T && T <= e->thi);
}

/* Whether launch l takes node w as a buffer it reads (a GEMV launch's weights). */
static int launch_reads(const Launch *l, int w)
{
	for (int k = 0; k < l->narg; k++)
		if (l->arg[k].kind == KA_BUF && l->arg[k].f == 0 && l->arg[k].s.node == w)
			return 1;
	return 0;
}

/* Floats of node i's unrounded copy: an rmsnorm's rows for its largest late step (at most maxT), else 0. */
static size_t late_numel(const Exec *x, int i)
{
	const ExecLate *e = &x->late[i];
	int hi = e->hi > e->thi ? e->hi : e->thi;
	if (!hi || x->g->node[i].op != OP_RMSNORM)
		return 0;
	return (size_t)node_numel(&x->g->node[i], hi < x->maxT ? hi : x->maxT, x->S);
}

/*
** The linears each LAUNCH_NORM_LATE launch computes, and their rmsnorm inputs (x->late). A GEMV group's
** launch (emit_cuda.c gemv_args) writes each member's result as its out node: the linear itself, or the
** residual add, scale or SwiGLU it feeds; so a member is a written buffer or an operand of one, is a
** linear reading an rmsnorm, and has its weight among the launch's read buffers. Each rmsnorm with such a
** reader gets one copy (rows for up to min(maxT, hi) tokens) in one block, x->late_mem.
*/
static int late_setup(Exec *x, char *err, size_t len)
{
	const Graph *g = x->g;
	int any = 0;
	for (int i = 0; i < g->cuda.nl; i++)
		any |= g->cuda.l[i].flags & (LAUNCH_NORM_LATE | LAUNCH_NORM_TC);
	if (!any || x->late)
		return 0;
	if (!(x->late = calloc((size_t)g->n, sizeof *x->late)))
		return seterr(err, len, "out of memory");
	for (int i = 0; i < g->cuda.nl; i++) {
		const Launch *l = &g->cuda.l[i];
		int found = 0, marked = l->flags & (LAUNCH_NORM_LATE | LAUNCH_NORM_TC);
		for (int k = 0; marked && k < l->narg; k++) {
			if (l->arg[k].kind != KA_BUF || l->arg[k].f != 1)
				continue;
			const Node *o = &g->node[l->arg[k].s.node];
			for (int j = -1; j < o->nin; j++) {
				int c = j < 0 ? l->arg[k].s.node : o->in[j];
				const Node *m = &g->node[c];
				if (m->op != OP_LINEAR || g->node[m->in[0]].op != OP_RMSNORM || !launch_reads(l, m->in[1]))
					continue;
				late_widen(&x->late[c], l);
				late_widen(&x->late[m->in[0]], l);
				found = 1;
			}
		}
		if (marked && !found)
			return seterr(err, len, "launch %d (%s of node %%%d) reads a norm late but computes no linear of an "
			              "rmsnorm", i, l->kernel, l->node);
	}
	size_t total = 0, at = 0;
	for (int i = 0; i < g->n; i++)
		total += late_numel(x, i);
	if (!(x->late_mem = malloc((total ? total : 1) * sizeof(float))))
		return seterr(err, len, "out of memory: %zu floats of unrounded norms", total);
	for (int i = 0; i < g->n; i++)
		if (late_numel(x, i)) {
			x->late[i].keep = x->late_mem + at;
			at += late_numel(x, i);
		}
	return 0;
}

/* Rmsnorm i's copy for the linears of this step's late launch, before its output is rounded: the f32 output
** as formed (LAUNCH_NORM_LATE), or, in a LAUNCH_NORM_TC step, bf16(x·nw)·inv, the operand k_gemv_tc's mma
** takes with the scale its results take (x and nw as the GPU holds them: rounded already). */
static void late_keep(Exec *x, int i, int64_t T)
{
	const ExecLate *e = &x->late[i];
	const Node *n = &x->g->node[i];
	size_t cnt = (size_t)exec_numel(x, i);
	if (!(e->tlo && e->tlo <= T && T <= e->thi)) {
		memcpy(e->keep, x->buf[i], cnt * sizeof(float));
		return;
	}
	int64_t N = exec_dim(x, i, n->ndim - 1);
	const float *in = x->buf[n->in[0]], *w = n->nin > 1 ? x->buf[n->in[1]] : NULL;
	for (size_t r = 0; r < cnt / (size_t)N; r++) {
		const float *xr = in + r * (size_t)N;
		float *kr = e->keep + r * (size_t)N;
		double ss = 0;
		for (int64_t k = 0; k < N; k++)
			ss += (double)xr[k] * xr[k];
		float inv = (float)(1.0 / sqrt(ss / (double)N + A_rmsnorm_eps(n)));
		for (int64_t k = 0; k < N; k++)
			kr[k] = xr[k] * (w ? w[k] : 1.0f);
		round_bf16(kr, N);
		for (int64_t k = 0; k < N; k++)
			kr[k] *= inv;
	}
}

/* The steps in which each moe_ffn runs the grouped GEMM, whose first half stores the hidden rows in bf16
** (its k_moe_up_tc launches' step ranges; x->moe_hb), so that ref_moe_ffn_hid rounds them there too. */
static int moe_hb_setup(Exec *x, char *err, size_t len)
{
	const Graph *g = x->g;
	char buf[160];
	for (int i = 0; i < g->cuda.nl; i++) {
		const Launch *l = &g->cuda.l[i];
		/* cuda_template searches the plan's source: only for the moe_ffn nodes' launches */
		if (l->kind != LK_KERNEL || g->node[l->node].op != OP_MOE_FFN ||
		    strncmp(cuda_template(g, l->kernel, buf, sizeof buf), "k_moe_up_tc<", 12))
			continue;
		if (!x->moe_hb && !(x->moe_hb = calloc(2 * (size_t)g->n, sizeof *x->moe_hb)))
			return seterr(err, len, "out of memory");
		int *r = &x->moe_hb[2 * l->node];
		if (!r[0] || l->tmin < r[0])
			r[0] = l->tmin > 0 ? l->tmin : 1;
		if (l->tmax > r[1])
			r[1] = l->tmax;
	}
	return 0;
}

/*
** glmrun --round-bf16: the CPU reproduces a bf16 plan's GPU numerics, so its bf16 error can be predicted
** and tested without a GPU. What the GPU keeps in bf16 there (read from runtime/exec/cuda.c and the kernels
** in ops/): every activation and cache buffer (cuda.c elsize: only i32 values keep 4 bytes; the logits
** too, which k_sample and --dump-logits read as bf16); every value a fused kernel forms but never stores
** (its members round as their own kernels would store them: ops/fused.cuh, ops/qfused.cuh); every float
** weight not kept in GGUF blocks (cuda_wdtype, Cuda.wq: narrowed at upload). So this rounds those
** weights now and each float node's output after it runs (exec_step_seq), a collective's included: the
** sum is formed in float and rounded once, as the one-shot P2P allreduce does (NCCL's ring may round
** partial sums on the way for tp > 2). Left in f32, as on the GPU: what lives only inside one kernel
** (accumulators, softmax state, the routed experts' hidden rows, split attention's partials: float
** scratch there), and weights kept in GGUF blocks (exact; the GPU's prefill from 32 tokens dequantizes
** them to bf16 for cuBLASLt and for the routed experts' grouped GEMM, which this does not mirror). One
** more thing rounded: the grouped GEMM (ops/moe_tc.cuh, steps of 12 tokens and more) stores the experts'
** hidden rows in bf16, so in the steps its launches run a moe_ffn rounds them too (moe_hb_setup). The caches
** are written from rounded nodes.
** One exception to "as its own kernel would store it" (d5c5a00, bench/NOTES.md entries 21 and 27): a
** decode GEMV launch that forms its RMSNorm prologue late (GP_RMSLATE, marked LAUNCH_NORM_LATE in the plan:
** today the one-token launch of a norm group, float or Q4_K) computes inv·(W·(x⊙nw)) and never rounds the
** normalised input. So in a step of T tokens, for each such launch with tmin <= T <= tmax, the linears it
** computes (late_setup) read their rmsnorm's f32 output as the CPU formed it, before rounding (kept in
** x->late); every other reader of that norm, and the norm's own stored value (block 0 stores it rounded
** when other nodes read it), sees the rounded value. Steps of other sizes (2..8 tokens, the prefill)
** stage and round the norm as before. The late scale's other change, the f32 order of operations, is
** not modelled (f32-level).
*/
int exec_round_bf16(Exec *x, char *err, size_t len)
{
	const Graph *g = x->g;
	if (g->cuda.act != DT_BF16)
		return seterr(err, len, "rounding to bf16 mirrors a plan compiled with --dtype bf16; this one's activations "
		              "are %s", dtype_name(g->cuda.act));
	for (int i = 0; x->round_act != DT_BF16 && i < g->nw; i++) {
		int id = g->w[i].node;
		if (x->wt[id] && (!g->cuda.wq || g->cuda.wq[i] < 0) && cuda_wdtype(g, id) == DT_BF16)
			round_bf16(x->wt[id], node_numel(&g->node[id], 0, 0));
	}
	x->round_act = DT_BF16;
	int rc = late_setup(x, err, len);
	return rc ? rc : moe_hb_setup(x, err, len);
}

int exec_init(Exec *x, const Graph *g, const char *weights, int64_t maxT, int64_t S, char *err, size_t len)
{
	return exec_init_rank(x, g, weights, maxT, S, 0, 1, err, len);
}

int exec_init_rank(Exec *x, const Graph *g, const char *weights, int64_t maxT, int64_t S, int rank, int tp, char *err,
                   size_t len)
{
	return exec_init_slots(x, g, weights, maxT, S, 1, rank, tp, err, len);
}

int exec_init_slots(Exec *x, const Graph *g, const char *weights, int64_t maxT, int64_t S, int nslots, int rank, int tp,
                    char *err, size_t len)
{
	memset(x, 0, sizeof *x);
	x->g = g, x->maxT = maxT, x->S = S, x->T = maxT, x->rank = rank, x->tp = tp, x->nslots = nslots;
	x->buf = calloc((size_t)g->n, sizeof *x->buf);
	x->wt = calloc((size_t)g->n, sizeof *x->wt);
	if (!x->buf || !x->wt)
		return seterr(err, len, "out of memory");
	Weights d = {.random_qtype = -1};
	const char *wf = graph_meta(g, "weights.format");
	int random = wf && !strcmp(wf, "random");
	if (random)
		weights = NULL, d.random_qtype = 0;
	for (int i = 0; random && i < g->nw; i++)
		if (load_weight(x, &d, &g->w[i], err, len))
			return -1;
	if (weights && weights_open(&d, weights, err, len))
		return -1;
	for (int i = 0; weights && i < g->nw; i++)
		if (load_weight(x, &d, &g->w[i], err, len)) {
			weights_close(&d);
			return -1;
		}
	if (weights)
		weights_close(&d);
	/* Activations live in one arena laid out by the memory plan, exactly as on the GPU, so an aliasing
	** bug in the plan corrupts CPU results too. */
	if (g->mem.planned) {
		size_t bytes = (size_t)(g->mem.token_bytes * maxT + g->mem.static_bytes) + 16;
		if (!(x->arena = calloc(1, bytes)))
			return seterr(err, len, "out of memory: activation arena of %zu bytes", bytes);
	}
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		if (n->kind == VK_WEIGHT && x->buf[i])
			continue;
		if (x->arena && n->kind == VK_ACT) {
			int64_t off = n->mem_region == MEM_TOKEN ? n->mem_off * maxT : g->mem.token_bytes * maxT + n->mem_off;
			x->buf[i] = x->arena + off;
			continue;
		}
		/* Without a weights path (tests), weights get float32 buffers for the caller to fill. */
		int dt = n->kind == VK_WEIGHT ? DT_F32 : n->dtype;
		size_t bytes = (size_t)node_numel(n, maxT, S) * dtype_size(dt) * (n->kind == VK_CACHE ? (size_t)nslots : 1);
		x->buf[i] = calloc(bytes ? bytes : 1, 1);
		if (!x->buf[i])
			return seterr(err, len, "out of memory: %zu bytes for %s node %%%d", bytes, op_table[n->op].name, i);
	}
	return 0;
}

int exec_step(Exec *x, const int32_t *tokens, const int32_t *pos, int64_t T, char *err, size_t len)
{
	return exec_step_ranks(x, 1, tokens, pos, T, err, len);
}

/* The collective of node i across the ranks: a sum, or each rank's part laid side by side along an axis. */
static void collective(Exec *x, int tp, int i)
{
	const Node *n = &x[0].g->node[i];
	int src = n->in[0];
	size_t cnt = (size_t)exec_numel(&x[0], src);
	if (n->op == OP_ALLREDUCE) {
		for (size_t k = 0; k < cnt; k++) {
			float s = 0;
			for (int r = 0; r < tp; r++)
				s += ((float *)x[r].buf[src])[k];
			((float *)x[0].buf[i])[k] = s;
		}
		for (int r = 1; r < tp; r++)
			memcpy(x[r].buf[i], x[0].buf[i], cnt * sizeof(float));
		return;
	}
	int ax = (int)A_allgather_axis(n);
	size_t es = dtype_size(n->dtype), outer = 1, inner = es;
	for (int k = 0; k < ax; k++)
		outer *= (size_t)exec_dim(&x[0], src, k);
	for (int k = ax + 1; k < n->ndim; k++)
		inner *= (size_t)exec_dim(&x[0], src, k);
	size_t part = (size_t)exec_dim(&x[0], src, ax) * inner;
	for (int r = 0; r < tp; r++)
		for (size_t o = 0; o < outer; o++)
			for (int d = 0; d < tp; d++)
				memcpy((char *)x[d].buf[i] + (o * (size_t)tp + (size_t)r) * part, (char *)x[r].buf[src] + o * part,
				       part);
}

/* The step's logits (the output named "logits", whole on rank 0) must be finite: a NaN or Inf would
** otherwise be sampled as some token (argmax of NaNs is index 0) and the answer silently wrong. Names
** the first row and vocabulary index at fault; x->nan_ok (--verify) leaves them for the comparison. */
static int logits_finite(const Exec *x, const int32_t *pos, char *err, size_t len)
{
	const Graph *g = x->g;
	for (int k = 0; k < g->nout && !x->nan_ok; k++) {
		const Node *n = &g->node[g->out[k]];
		if (strcmp(g->out_name[k], "logits") || n->dtype != DT_F32 || n->ndim != 2)
			continue;
		const float *l = x->buf[g->out[k]];
		int64_t V = exec_dim(x, g->out[k], 1), cnt = exec_numel(x, g->out[k]);
		for (int64_t i = 0; i < cnt; i++)
			if (!isfinite(l[i]))
				return seterr(err, len, "the logits hold %s (token row %lld at position %d, vocabulary index %lld): "
				              "the model or its weights produce non-finite values (glmrun --verify on a GPU names "
				              "the first layer)", isnan(l[i]) ? "NaN" : "Inf", (long long)(i / V),
				              pos ? pos[i / V] : -1, (long long)(i % V));
	}
	return 0;
}

/*
** All ranks in lockstep: each node on every rank, then the next, so a collective sees every rank's
** operand (tp 1 is the same loop with one rank). Each output is poisoned first, unless it is written
** over an operand (a view, or in place).
*/
int exec_step_ranks(Exec *xs, int tp, const int32_t *tokens, const int32_t *pos, int64_t T, char *err, size_t len)
{
	return exec_step_seq(xs, tp, tokens, pos, NULL, T, err, len);
}

int exec_step_seq(Exec *xs, int tp, const int32_t *tokens, const int32_t *pos, const int32_t *seq, int64_t T, char *err,
                  size_t len)
{
	const Graph *g = xs[0].g;
	for (int r = 0; r < tp; r++) {
		if (T < 1 || T > xs[r].maxT)
			return seterr(err, len, "step of %lld tokens, executor sized for 1..%lld", (long long)T,
			              (long long)xs[r].maxT);
		for (int64_t t = 0; seq && t < T; t++)
			if (seq[t] < 0 || seq[t] >= xs[r].nslots)
				return seterr(err, len, "token %lld names sequence slot %d; the caches hold %d", (long long)t, seq[t],
				              xs[r].nslots);
		xs[r].T = T, xs[r].err[0] = 0, xs[r].seq = seq;
	}
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		if (n->op == OP_ALLREDUCE || n->op == OP_ALLGATHER) {
			collective(xs, tp, i);
			for (int r = 0; r < tp; r++)
				round_node(&xs[r], i);
			continue;
		}
		for (int r = 0; r < tp; r++) {
			Exec *x = &xs[r];
			if (n->op == OP_INPUT) {
				memcpy(x->buf[i], !strcmp(n->name, "tokens") ? tokens : pos, (size_t)T * sizeof(int32_t));
				continue;
			}
			if (n->kind != VK_ACT)
				continue;
			int over = 0;
			for (int k = 0; k < n->nin; k++)
				over |= x->buf[n->in[k]] == x->buf[i];
			if (!over)
				memset(x->buf[i], 0xff, (size_t)exec_numel(x, i) * dtype_size(n->dtype));
			/* a linear of a LAUNCH_NORM_LATE launch in this step reads its norm unrounded (exec_round_bf16) */
			int late = x->late && late_in(&x->late[i], T);
			void *rounded = NULL;
			if (late && n->op == OP_LINEAR) {
				rounded = x->buf[n->in[0]];
				x->buf[n->in[0]] = x->late[n->in[0]].keep;
			}
			op_table[n->op].cpu(x, i);
			if (rounded)
				x->buf[n->in[0]] = rounded;
			if (late && n->op == OP_RMSNORM)
				late_keep(x, i, T);
			if (x->err[0]) {
				char rank[32] = "";
				if (tp > 1)
					snprintf(rank, sizeof rank, " (rank %d)", r);
				return seterr(err, len, "%s:%d: %s%s: %s", n->src ? n->src : "?", n->line, op_table[n->op].name,
				              rank, x->err);
			}
			round_node(x, i);
		}
	}
	return logits_finite(&xs[0], pos, err, len);
}

void exec_free(Exec *x)
{
	if (x->buf)
		for (int i = 0; i < x->g->n; i++)
			if (!x->arena || x->g->node[i].kind != VK_ACT)
				free(x->buf[i]);
	free(x->arena);
	free(x->buf);
	free(x->wt);
	free(x->late);
	free(x->late_mem);
	free(x->moe_hb);
	par_free(x->par);
	memset(x, 0, sizeof *x);
}
