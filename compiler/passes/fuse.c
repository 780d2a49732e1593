/*
** compiler/passes/fuse.c — operator fusion decisions, each explained.
**
** The IR keeps every node (the CPU reference runs them one by one, so fusion can never change what is
** computed); fusion decides which nodes the GPU computes inside another node's kernel. The decisions go
** to emit_cuda.c as a table of fused kernels (g->fk); each node computed elsewhere is marked (fused_into,
** fuse_pattern) for the dumps. The memory planner needs no fusion knowledge: it takes its liveness from
** the launch list emit_cuda writes, so whatever a fused kernel reads stays intact by construction.
**
** The patterns, all aimed at the decode step (a few tokens, where launches and round trips through
** memory cost more than the arithmetic):
**   ADD_NORM   residual add + RMSNorm: x' = x + y; h = rmsnorm(x') in one pass writing both (any step).
**   GEMV       one decode GEMV launch (steps of up to 8 tokens; prefill keeps the nodes' own kernels) for
**              - up to four linears that read the same input (q/k/v; gate/up; MLA's q_a, kv_a and the
**                indexer's projections; a router with the shared expert's gate/up), over the concatenated
**                output columns, each result stored in its own buffer;
**              - a prologue formed while the input is staged in shared memory: the RMSNorm of the input
**                (every block normalises the rows itself; one block also stores them when other nodes
**                read them), or silu(g)·u of the SwiGLU feeding a down projection;
**              - an epilogue applied before a result is stored: the residual add that follows a lone
**                linear (y = r + W·x, launched where the add is), or a constant scale; or, for a group
**                of exactly a SwiGLU's gate and up, silu(gate)·up stored alone (launched where the
**                swiglu is), so the down projection's GEMV reads a plain input.
**   ROPE_KV    per-head RMSNorm (Qwen3) and rotary of q and k, and the attention's k/v cache writes, in
**              one kernel of one block per token and head (any step); without the norms, a 1-token step's
**              attention kernel does the rotary and the cache writes itself instead, when it is k_attn_split.
** Never duplicated: a weight is read once per step; only the O(K) norm of a row is recomputed per block.
** Weights that stay in GGUF blocks on the GPU fuse as float ones do: emit_cuda.c (which alone decides
** residency) writes the kernels of ops/qfused.cuh for a GEMV group or MoE end that reads blocks.
** Every candidate that is refused gets its reason recorded; `glmc explain PLAN` prints them.
*/
#include "passes.h"

#include <stdlib.h>
#include <string.h>

#define ALL_T (1 << 30)
#define GEMV_TMAX 8           /* the decode GEMV's step limit (k_linear_gemv stages up to 8 rows) */
#define GEMV_TC_TMAX 16       /* a bf16 group's on the tensor cores (k_gemv_tc's two token tiles) */

typedef struct {
	Graph *g;
	int *nr, *r0, *rd;           /* readers of node v: rd[r0[v] .. r0[v] + nr[v]) (repeats for repeated operands) */
	char *is_out;
	int *add_norm;               /* per rmsnorm: the add whose pass computes it (ADD_NORM), or -1 */
	int *gemv_of;                /* per linear: the FK_GEMV it belongs to, or -1 */
	int *taken;                  /* per node: computed inside some fused kernel already (1) */
	int fused, refused;
	int act;                     /* the GPU's activation type (DT_BF16 or DT_F32) */
} Fz;

static void note(Graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(Graph *g, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	graph_add_fusion(g, line);
}

#define REFUSE(z, ...) (note((z)->g, "refused: " __VA_ARGS__), (z)->refused++)

/* Every node's readers, in node order (outputs counted separately in is_out). */
static int readers(Fz *z)
{
	const Graph *g = z->g;
	int n = g->n, tot = 0;
	z->nr = calloc((size_t)n, sizeof(int));
	z->r0 = calloc((size_t)n + 1, sizeof(int));
	z->is_out = calloc((size_t)n, 1);
	if (!z->nr || !z->r0 || !z->is_out)
		return -1;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < g->node[i].nin; k++)
			z->nr[g->node[i].in[k]]++, tot++;
	for (int i = 0; i < g->nout; i++)
		z->is_out[g->out[i]] = 1;
	z->rd = malloc(sizeof(int) * (size_t)(tot ? tot : 1));
	if (!z->rd)
		return -1;
	for (int i = 0; i < n; i++)
		z->r0[i + 1] = z->r0[i] + z->nr[i];
	int *at = calloc((size_t)n, sizeof(int));
	if (!at)
		return -1;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < g->node[i].nin; k++) {
			int v = g->node[i].in[k];
			z->rd[z->r0[v] + at[v]++] = i;
		}
	free(at);
	return 0;
}

/* The one node reading v (once), or -1 when v has several readers or is an output. */
static int only_reader(const Fz *z, int v)
{
	return z->nr[v] == 1 && !z->is_out[v] ? z->rd[z->r0[v]] : -1;
}

static int same_dims(const Node *a, const Node *b)
{
	if (a->ndim != b->ndim)
		return 0;
	for (int i = 0; i < a->ndim; i++)
		if (a->dim[i] != b->dim[i])
			return 0;
	return 1;
}

static const char *where(const Node *n)
{
	return n->src ? n->src : "?";
}

static FuseKernel *fk_new(Graph *g, int kind, int host, int tmax)
{
	if (g->nfk == g->fkcap) {
		int cap = g->fkcap ? g->fkcap * 2 : 64;
		FuseKernel *f = arena_alloc(g->A, sizeof *f * (size_t)cap);
		if (g->nfk)
			memcpy(f, g->fk, sizeof *f * (size_t)g->nfk);
		g->fk = f, g->fkcap = cap;
	}
	FuseKernel *f = &g->fk[g->nfk++];
	memset(f, 0, sizeof *f);
	f->kind = kind, f->host = host, f->tmax = tmax;
	f->res = f->pro_node = f->attn = f->glu = -1;
	f->norm[0] = f->norm[1] = -1;
	return f;
}

static void cover(FuseKernel *f, int node)
{
	for (int i = 0; i < f->ncover; i++)
		if (f->cover[i] == node)
			return;
	GLM_ASSERT(f->ncover < FK_MAXCOVER);
	f->cover[f->ncover++] = node;
}

/* Mark node v as computed inside host's kernel (for dumps); the first mark a node gets stays. */
static void mark(Graph *g, int v, int host, int pattern)
{
	if (v == host || g->node[v].fuse_pattern)
		return;
	g->node[v].fused_into = host;
	g->node[v].fuse_pattern = (int8_t)pattern;
}

/* A. Residual add + RMSNorm in one pass, for every step size. */
static void fuse_add_norm(Fz *z)
{
	Graph *g = z->g;
	for (int j = 0; j < g->n; j++) {
		const Node *n = &g->node[j];
		if (n->op != OP_RMSNORM || g->node[n->in[0]].op != OP_ADD)
			continue;
		int i = n->in[0];
		const Node *a = &g->node[i], *x = &g->node[a->in[0]], *y = &g->node[a->in[1]];
		if (!same_dims(x, y) || !same_dims(a, x)) {
			REFUSE(z, "add %%%d + rmsnorm %%%d: the add broadcasts an operand", i, j);
			continue;
		}
		int dup = 0;
		for (int k = 0; k < g->nfk; k++)
			dup |= g->fk[k].kind == FK_ADD_NORM && g->fk[k].host == i;
		if (dup) {
			REFUSE(z, "add %%%d + rmsnorm %%%d: the add already computes another norm", i, j);
			continue;
		}
		FuseKernel *f = fk_new(g, FK_ADD_NORM, i, ALL_T);
		f->nm = 1, f->m[0] = j;
		cover(f, j);
		z->add_norm[j] = i;
		note(g, "fused: add %%%d + rmsnorm %%%d (%s:%d): residual and norm in one pass", i, j, where(n), n->line);
		z->fused++;
	}
}

/* The weight storage class a GEMV instantiation depends on (quantized weights are dequantized to float
** unless they stay in blocks, which emit_cuda.c decides). */
static int wclass(const Graph *g, int lin)
{
	int dt = g->node[g->node[lin].in[1]].dtype;
	return dt == DT_Q ? DT_F32 : dt;
}

/* Why linear l cannot run in a fused decode GEMV, or NULL. Its weight may stay in GGUF blocks on the GPU
** (emit_cuda.c q_choose): the fused kernels then read it as blocks (ops/qfused.cuh). */
static const char *gemv_unfit(const Graph *g, int l)
{
	const Node *x = &g->node[g->node[l].in[0]];
	if (x->ndim != 2 || x->dim[0] != DIM_T)
		return "its input is not [T, K] rows";
	return NULL;
}

/* B. Linears grouped by their input (horizontal fusion), up to FK_MAXM per launch. */
static int group_linears(Fz *z, int *cand, int *ncand)
{
	Graph *g = z->g;
	int nc = 0;
	for (int l = 0; l < g->n; l++) {
		if (g->node[l].op != OP_LINEAR || z->gemv_of[l] >= 0 || z->taken[l] || gemv_unfit(g, l))
			continue;
		int x = g->node[l].in[0];
		FuseKernel *f = fk_new(g, FK_GEMV, l, GEMV_TMAX);
		int id = g->nfk - 1;
		f->nm = 1, f->m[0] = l, f->out[0] = l;
		z->gemv_of[l] = id;
		for (int r = z->r0[x]; r < z->r0[x] + z->nr[x]; r++) {
			int o = z->rd[r];
			if (o <= l || g->node[o].op != OP_LINEAR || g->node[o].in[0] != x || z->gemv_of[o] >= 0 || z->taken[o])
				continue;
			const char *why = gemv_unfit(g, o);
			/* Float weights of one group share a type (k_gemv_fused's); a GGUF block member makes the
			** launch emit_cuda's kernel of per-member types, which takes any mix. */
			int q = g->node[g->node[o].in[1]].dtype == DT_Q;
			for (int m = 0; m < f->nm; m++)
				q |= g->node[g->node[f->m[m]].in[1]].dtype == DT_Q;
			if (!why && !q && wclass(g, o) != wclass(g, l))
				why = "its weights are stored as another type";
			if (!why && f->nm == FK_MAXM)
				why = "the launch already computes four linears";
			if (why) {
				REFUSE(z, "linear %%%d with linear %%%d (same input %%%d): %s", o, l, x, why);
				continue;
			}
			f->m[f->nm] = o, f->out[f->nm] = o, f->nm++;
			z->gemv_of[o] = id;
		}
		cand[nc++] = id;
	}
	*ncand = nc;
	return 0;
}

/* C. Epilogues: a lone linear's residual add (the launch moves to the add), any member's scale. */
static void gemv_epilogues(Fz *z, FuseKernel *f)
{
	Graph *g = z->g;
	int l = f->m[0], x = g->node[l].in[0];
	int c = only_reader(z, l);
	if (f->nm == 1 && c >= 0 && g->node[c].op == OP_ADD) {
		const Node *a = &g->node[c];
		int r = a->in[0] == l ? a->in[1] : a->in[0];
		const char *why = NULL;
		if (!same_dims(&g->node[a->in[0]], &g->node[a->in[1]]))
			why = "the add broadcasts an operand";
		else if (r == l)
			why = "the add reads the linear twice";
		else if (fuse_root(g, r) == fuse_root(g, x))
			why = "the residual is the linear's own input (the sum would overwrite rows still being staged)";
		else if (z->taken[c])
			why = "the add already absorbs another linear";
		if (why) {
			REFUSE(z, "residual add %%%d after linear %%%d: %s", c, l, why);
		} else {
			f->out[0] = c, f->res = r, f->host = c;
			z->taken[c] = 1;
		}
	}
	for (int m = 0; m < f->nm; m++) {
		int s = only_reader(z, f->m[m]);
		if (s >= 0 && g->node[s].op == OP_SCALE && f->out[m] == f->m[m] && !z->taken[s]) {
			f->out[m] = s;
			z->taken[s] = 1;
		}
	}
}

/* C'. The GLU epilogue: a group of exactly the gate and up linears of a SwiGLU (float weights, results
** read by the swiglu alone) computes silu(gate)·up for each output column pair and stores only that,
** launched where the swiglu is. The down projection after it then reads a plain input: its GEMV needs
** no prologue, so it streams its weights with the full grid instead of forming silu·up in every block. */
static void gemv_glu(Fz *z, FuseKernel *f)
{
	Graph *g = z->g;
	if (f->nm != 2 || f->res >= 0 || f->out[0] != f->m[0] || f->out[1] != f->m[1])
		return;
	int s = only_reader(z, f->m[0]);
	if (s < 0 || g->node[s].op != OP_SWIGLU || only_reader(z, f->m[1]) != s)
		return;
	int gate = g->node[s].in[0], up = g->node[s].in[1];
	const char *why = NULL;
	if (gate == up)
		why = "the gate and up are one linear";
	else if (z->taken[s])
		why = "another fused kernel computes the swiglu";
	else if (g->node[g->node[gate].in[1]].dtype == DT_Q || g->node[g->node[up].in[1]].dtype == DT_Q)
		why = "a weight may stay in GGUF blocks (ops/qfused.cuh has no GLU epilogue)";
	else if (!same_dims(&g->node[gate], &g->node[up]))
		why = "the gate and up differ in shape";
	if (why) {
		REFUSE(z, "swiglu %%%d as the epilogue of linears %%%d, %%%d: %s", s, f->m[0], f->m[1], why);
		return;
	}
	f->m[0] = f->out[0] = gate, f->m[1] = f->out[1] = up;
	f->glu = s, f->out[0] = f->out[1] = s, f->host = s;
	z->taken[s] = 1;
}

/* Whether node v is read only by the linears of GEMV kernels in cand whose input it is. */
static int read_only_by_gemvs(const Fz *z, int v)
{
	if (z->is_out[v])
		return 0;
	for (int r = z->r0[v]; r < z->r0[v] + z->nr[v]; r++) {
		int o = z->rd[r];
		if (z->g->node[o].op != OP_LINEAR || z->g->node[o].in[0] != v || z->gemv_of[o] < 0)
			return 0;
	}
	return 1;
}

/* The stored ggml type of weight node w (Q6_K 14, ...), -1 if w is no weight. */
static int weight_qtype(const Graph *g, int w)
{
	for (int i = 0; i < g->nw; i++)
		if (g->w[i].node == w)
			return g->node[w].dtype == DT_Q ? g->w[i].qtype : -1;
	return -1;
}

/* D. Prologues: the input's RMSNorm or SwiGLU formed while staging. */
static void gemv_prologue(Fz *z, FuseKernel *f, const int *norm_done)
{
	Graph *g = z->g;
	int x = g->node[f->m[0]].in[0];
	const Node *xn = &g->node[x];
	if (xn->op == OP_SWIGLU) {
		if (z->taken[x])
			return; /* the GLU epilogue of the gate/up GEMV stores it: a plain input */
		if (!read_only_by_gemvs(z, x) || z->nr[x] != f->nm) {
			REFUSE(z, "swiglu %%%d into linear %%%d: its product has other readers", x, f->m[0]);
			return;
		}
		f->pro = GP_SWIGLU, f->pro_node = x;
		cover(f, x);
		return;
	}
	if (xn->op != OP_RMSNORM)
		return;
	if (f->nm == 1 && weight_qtype(g, g->node[f->m[0]].in[1]) == 14) {
		REFUSE(z, "rmsnorm %%%d into the GEMV of linear %%%d: a lone Q6_K linear (an LM head) reads its weights "
		       "faster after the norm's own kernel than staging the norm (bench/NOTES.md 47)", x, f->m[0]);
		return;
	}
	int a = z->add_norm[x];
	if (a >= 0 && !z->taken[a]) {
		REFUSE(z, "rmsnorm %%%d into the GEMV of linear %%%d: its add %%%d computes it in the same pass already", x,
		       f->m[0], a);
		return;
	}
	f->pro = GP_RMSNORM, f->pro_node = x;
	if (norm_done[x])
		return; /* an earlier GEMV covers (and if needed stores) it; this one only forms it again */
	if (!read_only_by_gemvs(z, x)) {
		/* Other nodes read the norm: this launch stores it, so it must come before all of them. */
		for (int r = z->r0[x]; r < z->r0[x] + z->nr[x]; r++)
			if (z->rd[r] < f->host) {
				REFUSE(z, "rmsnorm %%%d into the GEMV of linear %%%d: %%%d reads the norm before that launch", x,
				       f->m[0], z->rd[r]);
				f->pro = GP_NONE, f->pro_node = -1;
				return;
			}
		f->store = 1;
	}
	cover(f, x);
}

/* E. Rotary (after Qwen3's per-head norm) of q and k plus the cache writes, before an attention. */
static void fuse_rope_kv(Fz *z, int at)
{
	Graph *g = z->g;
	const Node *A = &g->node[at];
	int q = A->in[0], k = A->in[1], v = A->in[2], pos = A->in[5];
	int rq = q, rk = k, nq = -1, nk = -1, sq, sk;
	const char *why = NULL;
	const Node *Rq = &g->node[rq], *Rk = &g->node[rk];
	if (Rq->op != OP_ROPE || Rk->op != OP_ROPE)
		why = "q or k is not the output of a rope";
	else if (Rq->in[1] != pos || Rk->in[1] != pos)
		why = "the rotary positions are not the attention's";
	else if (Rq->ndim != 2 || Rk->ndim != 2 || A_rope_heads(Rq) != A_attention_heads(A) ||
	         A_rope_heads(Rk) != A_attention_kv_heads(A) || A_rope_head_dim(Rq) != A_attention_head_dim(A) ||
	         A_rope_head_dim(Rk) != A_attention_head_dim(A))
		why = "the rotary heads do not match the attention's";
	else if (A_rope_rot_dim(Rq) != A_rope_rot_dim(Rk) || A_rope_interleaved(Rq) != A_rope_interleaved(Rk))
		why = "q and k rotate different dims";
	else if (A_attention_head_dim(A) > 1024 || z->nr[A->in[3]] != 1 || z->nr[A->in[4]] != 1)
		why = A_attention_head_dim(A) > 1024 ? "head_dim above 1024" : "another node reads the caches";
	if (!why) {
		sq = Rq->in[0], sk = Rk->in[0];
		/* Per-head norms: rope(reshape(rmsnorm(reshape(lin) to [T, H, D])) to [T, H*D]). */
		int hq = g->node[sq].op == OP_RESHAPE && g->node[g->node[sq].in[0]].op == OP_RMSNORM;
		int hk = g->node[sk].op == OP_RESHAPE && g->node[g->node[sk].in[0]].op == OP_RMSNORM;
		if (hq && hk) {
			nq = g->node[sq].in[0], nk = g->node[sk].in[0];
			const Node *Nq = &g->node[nq], *Nk = &g->node[nk];
			if (Nq->ndim != 3 || Nk->ndim != 3 || Nq->dim[2] != A_attention_head_dim(A) ||
			    Nk->dim[2] != A_attention_head_dim(A))
				why = "the q/k norms are not per head";
			else if (A_rmsnorm_eps(Nq) != A_rmsnorm_eps(Nk) || Nq->nin != Nk->nin)
				why = "the q and k norms differ in eps or weight";
			else if (only_reader(z, nq) != sq || only_reader(z, nk) != sk || only_reader(z, sq) != rq ||
			         only_reader(z, sk) != rk)
				why = "the normalised q or k has other readers";
			else if (Nq->nin > 1 && Nk->nin > 1 && wclass(g, nk) != wclass(g, nq))
				why = "the q and k norm weights are stored as different types";
		} else if (hq || hk)
			why = "only one of q and k is normalised";
	}
	if (why) {
		REFUSE(z, "rope + kv write before attention %%%d (%s:%d): %s", at, where(A), A->line, why);
		return;
	}
	int first = nq >= 0 ? (nq < nk ? nq : nk) : (rq < rk ? rq : rk);
	int src_q = nq >= 0 ? g->node[nq].in[0] : sq, src_k = nk >= 0 ? g->node[nk].in[0] : sk;
	if (fuse_root(g, src_q) >= first || fuse_root(g, src_k) >= first || fuse_root(g, v) >= first) {
		REFUSE(z, "rope + kv write before attention %%%d: v or an input is computed after the first rotary", at);
		return;
	}
	for (int i = 0; i < 2; i++) {
		int nn = i ? nk : nq;
		if (nn >= 0 && (z->taken[nn] || z->add_norm[nn] >= 0)) {
			REFUSE(z, "rope + kv write before attention %%%d: norm %%%d is fused elsewhere", at, nn);
			return;
		}
	}
	FuseKernel *f = fk_new(g, FK_ROPE_KV, first, ALL_T);
	f->nm = 2, f->m[0] = rq, f->m[1] = rk, f->norm[0] = nq, f->norm[1] = nk, f->attn = at;
	/* 1-token steps may leave it all to the attention's kernel, which then reads the raw rows (the launch
	** lists them, so the memory plan keeps them alive to it) and alone reads the rotated ones' readers */
	const char *nofold = nq >= 0 ? "per-head norms come first)" :
	                     A_attention_head_dim(A) != A_attention_v_head_dim(A) ? "key and value dims differ)" :
	                     only_reader(z, rq) != at || only_reader(z, rk) != at ? "the rotated q or k has other readers)" :
	                     NULL;
	f->fold = !nofold;
	int cov[4] = {nq, nk, rq, rk};
	for (int i = 0; i < 4; i++)
		if (cov[i] >= 0) {
			cover(f, cov[i]);
			z->taken[cov[i]] = 1;
			mark(g, cov[i], first, FUSE_ROPE_KV);
		}
	note(g, "fused: %srope %%%d, %%%d and the k/v cache writes of attention %%%d (%s:%d): one kernel, one block per "
	     "token and head; %s%s", nq >= 0 ? "per-head rmsnorm + " : "", rq, rk, at, where(A), A->line,
	     nofold ? "1-token steps too (not done by the attention's kernel: " : "for 1-token steps the attention's kernel does "
	     "it all instead when its rows are 128, 256 or 512 bytes (k_attn_step_rope)", nofold ? nofold : "");
	z->fused++;
}

/* n[v] when node v has op `op`, else NULL. */
static const Node *op_node(const Graph *g, int v, int op)
{
	return v >= 0 && g->node[v].op == op ? &g->node[v] : NULL;
}

/* A [1, 0, 2] permute of a 3-D value (heads and tokens swapped). */
static int swap01(const Node *n)
{
	return n && n->op == OP_PERMUTE && n->ndim == 3 && A_permute_p0(n) == 1 && A_permute_p1(n) == 0 &&
	       A_permute_p2(n) == 2;
}

/* A rope of a [T, heads·head_dim] value at positions pos, with one kernel's layout. */
static int plain_rope(const Node *r, int pos)
{
	return r && r->op == OP_ROPE && r->in[1] == pos && r->ndim == 2 && r->dim[0] == DIM_T &&
	       r->dim[1] == A_rope_heads(r) * A_rope_head_dim(r) && A_rope_head_dim(r) <= 1024;
}

/* Whether any of nodes[0..n) is already computed inside another fused kernel. */
static int any_taken(const Fz *z, const int *nodes, int n)
{
	for (int i = 0; i < n; i++)
		if (nodes[i] >= 0 && z->taken[nodes[i]])
			return 1;
	return 0;
}

static int imax(int a, int b)
{
	return a > b ? a : b;
}

/* Take the nodes as covered by f (marks for the dumps, taken for later patterns). */
static void take(Fz *z, FuseKernel *f, const int *nodes, int n, int pattern)
{
	for (int i = 0; i < n; i++)
		if (nodes[i] >= 0) {
			cover(f, nodes[i]);
			z->taken[nodes[i]] = 1;
			mark(z->g, nodes[i], f->host, pattern);
		}
}

/*
** F. MLA latent preparation, any step: the latent row [rmsnorm(c), rope(k_pe)] of the kv_a projection,
** and the indexer's key (layernorm, then rotary of its first dims), each written where the nodes store
** it and into its cache at pos[t] (the cache writes of the mla and indexer nodes).
*/
static void fuse_mla_kv(Fz *z, int M)
{
	Graph *g = z->g;
	const Node *Mn = &g->node[M];
	int pos = Mn->in[3], cat = Mn->in[1];
	const Node *C = op_node(g, cat, OP_CONCAT), *cn = NULL, *kr = NULL, *s1 = NULL, *s2 = NULL;
	const char *why = NULL;
	if (!C || C->nin != 2 || A_concat_axis(C) != 1 || C->ndim != 2)
		why = "the latent is not a concat of two row parts";
	else if (!(cn = op_node(g, C->in[0], OP_RMSNORM)) || !plain_rope(kr = op_node(g, C->in[1], OP_ROPE), pos) ||
	         A_rope_heads(kr) != 1)
		why = "the latent is not [rmsnorm(c), rope(k_pe)]";
	else if (!(s1 = op_node(g, cn->in[0], OP_SLICE)) || !(s2 = op_node(g, kr->in[0], OP_SLICE)) ||
	         s1->in[0] != s2->in[0] || A_slice_axis(s1) != 1 || A_slice_axis(s2) != 1 || A_slice_start(s1) != 0 ||
	         A_slice_start(s2) != A_slice_len(s1) || A_slice_len(s1) + A_slice_len(s2) != g->node[s1->in[0]].dim[1] ||
	         g->node[s1->in[0]].ndim != 2 || C->dim[1] != A_mla_dk(Mn) || A_rope_head_dim(kr) != A_slice_len(s2))
		why = "c and k_pe are not the two parts of one projected row";
	else if (only_reader(z, cn->in[0]) != C->in[0] || only_reader(z, kr->in[0]) != C->in[1] ||
	         only_reader(z, C->in[0]) != cat || only_reader(z, C->in[1]) != cat)
		why = "a part of the latent has other readers";
	int cov[7] = {-1, -1, -1, -1, -1, -1, -1};
	if (!why) {
		cov[0] = cn->in[0], cov[1] = kr->in[0], cov[2] = C->in[0], cov[3] = C->in[1], cov[4] = cat;
		if (any_taken(z, cov, 5))
			why = "a part is fused elsewhere";
	}
	if (why) {
		REFUSE(z, "latent norm + rope + cache write of mla %%%d (%s:%d): %s", M, where(Mn), Mn->line, why);
		return;
	}
	int kv = s1->in[0], host = imax(cov[0] < cov[1] ? cov[0] : cov[1], fuse_root(g, kv));
	/* The indexer's key: layernorm then rotary, read only by the indexer. */
	int X = Mn->nin > 4 ? Mn->in[4] : -1, ikr = -1, ln = -1;
	const Node *Xn = op_node(g, X, OP_INDEXER);
	if (Xn && Xn->in[4] == pos) {
		const Node *R = &g->node[Xn->in[1]], *Ln = op_node(g, R->in[0], OP_LAYERNORM);
		const char *iwhy = NULL;
		if (!plain_rope(R, pos) || A_rope_heads(R) != 1 || !Ln || Ln->ndim != 2 || Ln->dim[1] != A_indexer_dim(Xn))
			iwhy = "the key is not rope(layernorm(k)) of one head";
		else if (only_reader(z, R->in[0]) != Xn->in[1] || only_reader(z, Xn->in[1]) != X)
			iwhy = "the normalised key has other readers";
		else if (z->taken[R->in[0]] || z->taken[Xn->in[1]])
			iwhy = "it is fused elsewhere";
		else if (imax(host, fuse_root(g, Ln->in[0])) >= M || imax(host, fuse_root(g, Ln->in[0])) >= X)
			iwhy = "the key is computed after the attention";
		if (iwhy) {
			REFUSE(z, "indexer key of %%%d into the latent kernel of mla %%%d: %s", X, M, iwhy);
		} else {
			ikr = Xn->in[1], ln = R->in[0];
			host = imax(host, fuse_root(g, Ln->in[0]));
		}
	}
	if (host >= M) {
		REFUSE(z, "latent norm + rope + cache write of mla %%%d: its rows are computed after the attention", M);
		return;
	}
	if (ikr < 0)
		X = -1;
	FuseKernel *f = fk_new(g, FK_MLA_KV, host, ALL_T);
	f->nm = 2, f->m[0] = M, f->m[1] = X;
	f->mla_kv.kv = kv, f->mla_kv.norm = C->in[0], f->mla_kv.rope = C->in[1], f->mla_kv.concat = cat;
	f->mla_kv.ikey = ln >= 0 ? g->node[ln].in[0] : -1, f->mla_kv.inorm = ln, f->mla_kv.irope = ikr;
	cov[5] = ln, cov[6] = ikr;
	take(z, f, cov, 7, FUSE_MLA);
	note(g, "fused: latent rmsnorm %%%d + rope %%%d + concat %%%d%s and the cache writes of mla %%%d%s (%s:%d): one "
	     "kernel, one block per token", C->in[0], C->in[1], cat, X >= 0 ? " + indexer key layernorm + rope" : "", M,
	     X >= 0 ? " and its indexer" : "", where(Mn), Mn->line);
	z->fused++;
}

/*
** G. MLA query preparation for the decode step: q_nope of every head absorbed into the latent space
** (W_UK), q_pe rotated, both written straight into the [T, H, L + Dr] query the attention reads (no
** slices, permutes or concat in memory), and the indexer's query rotated, in one launch.
*/
static void fuse_mla_q(Fz *z, int M)
{
	Graph *g = z->g;
	const Node *Mn = &g->node[M];
	int pos = Mn->in[3];
	const Node *qc = op_node(g, Mn->in[0], OP_RESHAPE), *cat = NULL, *p2 = NULL, *mm = NULL, *p1 = NULL, *s1 = NULL;
	const Node *rr = NULL, *R = NULL, *rv = NULL, *s2 = NULL;
	const char *why = NULL;
	if (!qc || !(cat = op_node(g, qc->in[0], OP_CONCAT)) || cat->nin != 2 || cat->ndim != 3 || A_concat_axis(cat) != 2)
		why = "the query is not a concat over the head dims";
	else if (g->node[cat->in[0]].op != OP_PERMUTE)
		why = "its first part is not permute(matmul(permute(slice(q)), W_UK))";
	else if (!swap01(p2 = &g->node[cat->in[0]]) || !(mm = op_node(g, p2->in[0], OP_MATMUL)) || mm->ndim != 3 ||
	         !swap01(p1 = &g->node[mm->in[0]]) || !(s1 = op_node(g, p1->in[0], OP_SLICE)))
		why = "its first part is not permute(matmul(permute(slice(q)), W_UK))";
	else if (!(rr = op_node(g, cat->in[1], OP_RESHAPE)) || !plain_rope(R = op_node(g, rr->in[0], OP_ROPE), pos) ||
	         !(rv = op_node(g, R->in[0], OP_RESHAPE)) || !(s2 = op_node(g, rv->in[0], OP_SLICE)))
		why = "its second part is not rope(slice(q))";
	else if (s1->in[0] != s2->in[0] || A_slice_axis(s1) != 2 || A_slice_axis(s2) != 2 || A_slice_start(s1) != 0 ||
	         A_slice_start(s2) != A_slice_len(s1) || g->node[s1->in[0]].ndim != 3 ||
	         g->node[s1->in[0]].dim[2] != A_slice_len(s1) + A_slice_len(s2) || A_rope_heads(R) != cat->dim[1] ||
	         A_rope_head_dim(R) != A_slice_len(s2) || A_slice_len(s1) > 512)
		why = "the parts are not the nope and rope dims of one projected query";
	int cov[8] = {-1, -1, -1, -1, -1, -1, -1, -1};
	if (!why) {
		/* node ids: the nope path s1 -> p1 -> mm -> p2, the rope path s2 -> rv -> R -> rr, both into cat -> qc */
		int s1i = p1->in[0], p1i = mm->in[0], mmi = p2->in[0], p2i = cat->in[0], s2i = rv->in[0], rvi = R->in[0];
		int Ri = rr->in[0], rri = cat->in[1], cati = qc->in[0], qci = Mn->in[0];
		int chain[][2] = {{s1i, p1i}, {p1i, mmi}, {mmi, p2i}, {p2i, cati}, {s2i, rvi}, {rvi, Ri}, {Ri, rri},
		                  {rri, cati}, {cati, qci}};
		for (size_t i = 0; i < sizeof chain / sizeof chain[0] && !why; i++)
			if (only_reader(z, chain[i][0]) != chain[i][1])
				why = "a part of the query has other readers";
		int c[7] = {s1i, p1i, mmi, p2i, s2i, Ri, cati};
		memcpy(cov, c, sizeof c);
		if (!why && any_taken(z, cov, 7))
			why = "a part is fused elsewhere";
	}
	if (why) {
		REFUSE(z, "query absorb + rope of mla %%%d (%s:%d): %s", M, where(Mn), Mn->line, why);
		return;
	}
	int q3 = s1->in[0], host = imax(cov[0] < cov[4] ? cov[0] : cov[4], fuse_root(g, q3));
	int mmi = cov[2], Ri = cov[5], cati = cov[6];
	int X = Mn->nin > 4 ? Mn->in[4] : -1, iq = -1;
	const Node *Xn = op_node(g, X, OP_INDEXER);
	if (Xn && Xn->in[4] == pos) {
		const Node *IR = &g->node[Xn->in[0]];
		const char *iwhy = NULL;
		if (!plain_rope(IR, pos) || A_rope_heads(IR) != A_indexer_heads(Xn) || A_rope_head_dim(IR) != A_indexer_dim(Xn))
			iwhy = "the query is not one rope of its heads";
		else if (only_reader(z, Xn->in[0]) != X || z->taken[Xn->in[0]])
			iwhy = "the rotated query has other readers or is fused elsewhere";
		else if (imax(host, fuse_root(g, IR->in[0])) >= X)
			iwhy = "the query is computed after the indexer";
		if (iwhy)
			REFUSE(z, "indexer query rope of %%%d into the query kernel of mla %%%d: %s", X, M, iwhy);
		else {
			iq = Xn->in[0];
			host = imax(host, fuse_root(g, IR->in[0]));
		}
	}
	if (host >= M) {
		REFUSE(z, "query absorb + rope of mla %%%d: its query is computed after the attention", M);
		return;
	}
	FuseKernel *f = fk_new(g, FK_MLA_Q, host, GEMV_TMAX);
	f->nm = 2, f->m[0] = M, f->m[1] = iq >= 0 ? X : -1;
	f->mla_q.q = q3, f->mla_q.wuk = mm->in[1], f->mla_q.wuk_t = (int)A_matmul_transpose_b(mm), f->mla_q.rope = Ri;
	f->mla_q.concat = cati, f->mla_q.iquery = iq >= 0 ? g->node[iq].in[0] : -1, f->mla_q.irope = iq;
	cov[7] = iq;
	take(z, f, cov, 8, FUSE_MLA);
	note(g, "fused: query absorb (matmul %%%d) + q_pe rope %%%d + concat %%%d of mla %%%d%s (%s:%d): one decode launch "
	     "(steps up to %d tokens; prefill keeps each node's kernel)", mmi, Ri, cati, M,
	     iq >= 0 ? " + the indexer's query rope" : "", where(Mn), Mn->line, GEMV_TMAX);
	z->fused++;
}

/* G'. When an MLA node has both preparations, decode steps launch them as one kernel (k_mla_prep): both
** move to the later of their places, which is still before the attention and the indexer that read them. */
static void mla_prep_together(Fz *z, int M)
{
	Graph *g = z->g;
	FuseKernel *q = NULL, *kv = NULL;
	for (int k = 0; k < g->nfk; k++)
		if (g->fk[k].m[0] == M && (g->fk[k].kind == FK_MLA_Q || g->fk[k].kind == FK_MLA_KV))
			*(g->fk[k].kind == FK_MLA_Q ? &q : &kv) = &g->fk[k];
	if (!q || !kv)
		return;
	/* the latent's split must be the query's: L = kv_lora values, then Dr rotary ones */
	int64_t Lq = g->node[q->mla_q.concat].dim[2] - A_rope_head_dim(&g->node[q->mla_q.rope]);
	int64_t Lkv = g->node[kv->mla_kv.norm].dim[1];
	if (Lq != Lkv || A_rope_head_dim(&g->node[q->mla_q.rope]) != A_rope_head_dim(&g->node[kv->mla_kv.rope])) {
		REFUSE(z, "query and latent preparation of mla %%%d in one launch: they split the latent differently", M);
		return;
	}
	int h = imax(q->host, kv->host);
	q->host = kv->host = h;
	for (int k = 0; k < 2; k++) { /* the dump marks name the new place */
		const FuseKernel *f = k ? q : kv;
		for (int c = 0; c < f->ncover; c++)
			if (f->cover[c] != h && g->node[f->cover[c]].fuse_pattern == FUSE_MLA)
				g->node[f->cover[c]].fused_into = h;
	}
	note(g, "fused: the query and latent preparations of mla %%%d in one decode launch at %%%d", M, h);
	z->fused++;
}

/* H. MLA value absorb, any step: W_UV applied to the attention's [T, H, L] rows by one kernel that writes
** [T, H, Dv] for the output projection (the permutes before and after the matmul are never stored).
** Kept out of the attention kernel on purpose: there it would stream W_UV from only H blocks (H/tp per
** GPU), starving a bandwidth-bound matvec of parallelism to save one launch. For steps of up to 8 tokens
** the absorb's blocks merge the split attention's range states themselves (emit_cuda.c, mla_absorb_merges). */
static void fuse_mla_out(Fz *z, int M)
{
	Graph *g = z->g;
	const Node *Mn = &g->node[M];
	int r1 = only_reader(z, M), p1 = r1 >= 0 ? only_reader(z, r1) : -1, mm = p1 >= 0 ? only_reader(z, p1) : -1;
	int p2 = mm >= 0 ? only_reader(z, mm) : -1;
	const char *why = NULL;
	const Node *R1 = op_node(g, r1, OP_RESHAPE), *MM = op_node(g, mm, OP_MATMUL);
	if (!R1 || !swap01(p1 >= 0 ? &g->node[p1] : NULL) || !MM || MM->ndim != 3 || !A_matmul_transpose_b(MM) ||
	    !swap01(p2 >= 0 ? &g->node[p2] : NULL) || MM->in[0] != p1)
		why = "its result does not go through permute(matmul(permute(o), W_UVᵀ))";
	else if (R1->ndim != 3 || R1->dim[1] != A_mla_heads(Mn) || R1->dim[2] != A_mla_dv(Mn) ||
	         g->node[MM->in[1]].kind != VK_WEIGHT)
		why = "the value rows are not [T, heads, dv] times a weight";
	int cov[3] = {p1, mm, p2};
	if (!why && any_taken(z, cov, 3))
		why = "a part is fused elsewhere";
	if (why) {
		REFUSE(z, "value absorb after mla %%%d (%s:%d): %s", M, where(Mn), Mn->line, why);
		return;
	}
	FuseKernel *f = fk_new(g, FK_MLA_OUT, M, ALL_T);
	f->nm = 1, f->m[0] = M;
	f->mla_out.wuv = MM->in[1], f->mla_out.out = p2;
	take(z, f, cov, 3, FUSE_MLA);
	note(g, "fused: permute %%%d + matmul %%%d + permute %%%d after mla %%%d (%s:%d): the value absorb reads the "
	     "attention rows (small steps: its range states) and writes the output projection's input in one kernel",
	     p1, mm, p2, M, where(Mn), Mn->line);
	z->fused++;
}

/* I. MoE routing: expert choice and their weights from the same logits, one kernel per token. */
static void fuse_moe_route(Fz *z, int w)
{
	Graph *g = z->g;
	const Node *W = &g->node[w];
	int r = W->in[1];
	const Node *R = op_node(g, r, OP_MOE_ROUTE);
	if (!R || R->in[0] != W->in[0])
		return;
	for (int k = z->r0[r]; k < z->r0[r] + z->nr[r]; k++)
		if (z->rd[k] < w) {
			REFUSE(z, "moe_route %%%d + moe_weights %%%d: %%%d reads the choice first", r, w, z->rd[k]);
			return;
		}
	if (z->taken[r] || z->taken[w])
		return;
	FuseKernel *f = fk_new(g, FK_MOE_ROUTE, w, ALL_T);
	f->nm = 2, f->m[0] = r, f->m[1] = w;
	int cov[2] = {r, w};
	take(z, f, cov, 2, FUSE_MOE);
	note(g, "fused: moe_route %%%d + moe_weights %%%d (%s:%d): one kernel per token", r, w, where(W), W->line);
	z->fused++;
}

/*
** J. The end of a MoE layer for the decode step: the routed experts' down projections and weighted sum,
** the shared expert's SwiGLU and down projection, their sum and the residual add, one launch right after
** the experts' first half (whose scratch it reads). Runs after the GEMV groups are known: the shared
** expert's gate and up must be computed before the experts run, and its down projection leaves its GEMV
** candidate (with the add it had taken as epilogue).
*/
static void fuse_moe_down(Fz *z, int E)
{
	Graph *g = z->g;
	const Node *En = &g->node[E];
	int a1 = only_reader(z, E), S = -1, sw = -1, r = -1, out = -1, a2 = -1;
	const Node *A1 = op_node(g, a1, OP_ADD);
	const char *why = NULL;
	if (!A1 || !same_dims(&g->node[A1->in[0]], &g->node[A1->in[1]]))
		why = "its result is not added to a value of its shape";
	else {
		int o1 = A1->in[0] == E ? A1->in[1] : A1->in[0];
		const Node *Sn = op_node(g, o1, OP_LINEAR), *Wn;
		if (Sn && Sn->nin == 2 && only_reader(z, o1) == a1 && (Wn = op_node(g, Sn->in[0], OP_SWIGLU)) &&
		    Wn->ndim == 2 && only_reader(z, Sn->in[0]) == o1) {
			S = o1, sw = Sn->in[0];
			a2 = only_reader(z, a1);
			const Node *A2 = op_node(g, a2, OP_ADD);
			if (A2 && same_dims(&g->node[A2->in[0]], &g->node[A2->in[1]]))
				r = A2->in[0] == a1 ? A2->in[1] : A2->in[0], out = a2;
			else
				a2 = -1, out = a1;
		} else {
			r = o1, out = a1;
		}
		if (o1 == E)
			why = "the add reads the experts twice";
	}
	if (!why && sw >= 0) {
		int g0 = g->node[sw].in[0], u0 = g->node[sw].in[1];
		for (int i = 0; i < 2 && !why; i++) {
			int v = i ? u0 : g0, t = v;
			if (g->node[v].op == OP_LINEAR && z->gemv_of[v] >= 0)
				t = g->fk[z->gemv_of[v]].host;
			if (t >= E)
				why = "the shared expert's gate or up is computed after the experts";
			if (r >= 0 && fuse_root(g, r) == fuse_root(g, v))
				why = "the residual is the shared expert's input";
		}
	}
	if (!why && r >= 0 && fuse_root(g, r) >= E)
		why = "the residual is computed after the experts";
	int cov[4] = {sw, S, a1, a2};
	if (!why && (z->taken[sw >= 0 ? sw : a1] || (a2 >= 0 && z->taken[a2]) || (S >= 0 && z->gemv_of[S] >= 0 &&
	                                                                           g->fk[z->gemv_of[S]].nm > 1)))
		why = "a part is fused elsewhere";
	if (why) {
		REFUSE(z, "experts' down projection + adds after moe_ffn %%%d (%s:%d): %s", E, where(En), En->line, why);
		return;
	}
	if (S >= 0 && z->gemv_of[S] >= 0) {
		/* the shared down projection leaves its own GEMV candidate, and the add it had taken */
		FuseKernel *c = &g->fk[z->gemv_of[S]];
		if (c->res >= 0)
			z->taken[c->out[0]] = 0;
		c->nm = 0;
		z->gemv_of[S] = -1;
	}
	if (a1 >= 0 && z->taken[a1])
		z->taken[a1] = 0;
	FuseKernel *f = fk_new(g, FK_MOE_DOWN, E, GEMV_TMAX);
	f->nm = 1, f->m[0] = E;
	f->moe_down.out = out, f->moe_down.sdown = S, f->moe_down.sswiglu = sw, f->moe_down.res = r;
	take(z, f, cov, 4, FUSE_MOE);
	note(g, "fused: moe_ffn %%%d down projections%s%s (%s:%d): one decode launch after the experts' first half "
	     "(steps up to %d tokens)", E, S >= 0 ? " + shared expert swiglu + down + add" : "",
	     r >= 0 ? " + residual add" : "", where(En), En->line, GEMV_TMAX);
	z->fused++;
}

/* Whether group f runs on k_gemv_tc (emit_cuda.c gemv_tc_fits: bf16 weights and activations, K a multiple
** of 32, no prologue or a norm), whose two token tiles take steps of up to 16 tokens: a batch of 9..16 then
** keeps the fused launches instead of each linear's GEMM and the norms' and adds' own kernels. */
static int gemv_tc16(const Fz *z, const FuseKernel *f)
{
	const Graph *g = z->g;
	if (z->act != DT_BF16 || (f->pro != GP_NONE && f->pro != GP_RMSNORM))
		return 0;
	for (int m = 0; m < f->nm; m++) {
		const Node *w = &g->node[g->node[f->m[m]].in[1]];
		if (w->dtype != DT_BF16 || w->dim[1] % 32)
			return 0;
	}
	return 1;
}

/* Commit a GEMV candidate: covers, marks and the explanation; single plain linears are dropped. */
static int gemv_commit(Fz *z, FuseKernel *f)
{
	Graph *g = z->g;
	if (gemv_tc16(z, f))
		f->tmax = GEMV_TC_TMAX;
	int epi = f->res >= 0;
	for (int m = 0; m < f->nm; m++)
		epi |= f->out[m] != f->m[m];
	if (f->nm == 1 && !epi && f->pro == GP_NONE)
		return 0;
	char what[384] = "";
	size_t k = 0;
	if (f->pro == GP_RMSNORM)
		k += (size_t)snprintf(what + k, sizeof what - k, "rmsnorm %%%d%s + ", f->pro_node, f->store ? " (stored)" : "");
	else if (f->pro == GP_SWIGLU)
		k += (size_t)snprintf(what + k, sizeof what - k, "swiglu %%%d + ", f->pro_node);
	for (int m = 0; m < f->nm && k < sizeof what; m++) {
		k += (size_t)snprintf(what + k, sizeof what - k, "%slinear %%%d", m ? ", " : "", f->m[m]);
		if (f->glu >= 0 && m == 1 && k < sizeof what)
			k += (size_t)snprintf(what + k, sizeof what - k, " + swiglu %%%d (only it stored)", f->glu);
		if (f->glu < 0 && f->out[m] != f->m[m] && k < sizeof what)
			k += (size_t)snprintf(what + k, sizeof what - k, " + %s %%%d", g->node[f->out[m]].op == OP_ADD ? "residual add" :
			                      "scale", f->out[m]);
	}
	for (int m = 0; m < f->nm; m++) {
		cover(f, f->m[m]);
		if (f->out[m] != f->m[m])
			cover(f, f->out[m]);
		mark(g, f->m[m], f->host, f->res >= 0 ? FUSE_GEMV_EPILOGUE : FUSE_GEMV_GROUP);
		if (f->out[m] != f->m[m])
			mark(g, f->out[m], f->host, FUSE_GEMV_EPILOGUE);
	}
	if (f->pro_node >= 0)
		mark(g, f->pro_node, f->host, f->pro == GP_SWIGLU ? FUSE_SWIGLU_GEMV : FUSE_NORM_GEMV);
	const Node *h = &g->node[f->m[0]];
	note(g, "fused: %s (%s:%d): one decode GEMV launch (steps up to %d tokens; prefill keeps each node's kernel)",
	     what, where(h), h->line, f->tmax);
	z->fused++;
	return 1;
}

int fuse(Graph *g, int enable, int act)
{
	for (int j = 0; j < g->n; j++)
		g->node[j].fused_into = -1, g->node[j].fuse_pattern = FUSE_NONE;
	g->nfk = 0;
	if (!enable)
		return 0;
	Fz z = {.g = g, .act = act};
	int n = g->n, rc = -1;
	z.add_norm = malloc(sizeof(int) * (size_t)n);
	z.gemv_of = malloc(sizeof(int) * (size_t)n);
	z.taken = calloc((size_t)n, sizeof(int));
	int *cand = malloc(sizeof(int) * (size_t)n), *norm_done = calloc((size_t)n, sizeof(int));
	if (!z.add_norm || !z.gemv_of || !z.taken || !cand || !norm_done || readers(&z))
		goto out;
	for (int i = 0; i < n; i++)
		z.add_norm[i] = z.gemv_of[i] = -1;
	fuse_add_norm(&z);
	for (int i = 0; i < n; i++) {
		int op = g->node[i].op;
		if (op == OP_ATTENTION)
			fuse_rope_kv(&z, i);
		else if (op == OP_MLA) {
			fuse_mla_kv(&z, i);
			fuse_mla_q(&z, i);
			mla_prep_together(&z, i);
			fuse_mla_out(&z, i);
		} else if (op == OP_MOE_WEIGHTS)
			fuse_moe_route(&z, i);
	}
	int nc = 0;
	group_linears(&z, cand, &nc);
	for (int c = 0; c < nc; c++)
		gemv_epilogues(&z, &g->fk[cand[c]]);
	for (int i = 0; i < n; i++)
		if (g->node[i].op == OP_MOE_FFN)
			fuse_moe_down(&z, i);
	for (int c = 0; c < nc; c++) /* after the MoE ends, which take a shared expert's swiglu whole */
		gemv_glu(&z, &g->fk[cand[c]]);
	/* Prologues after every epilogue: a norm whose add became a GEMV epilogue has no pass of its own left. */
	for (int c = 0; c < nc; c++) {
		FuseKernel *f = &g->fk[cand[c]];
		if (!f->nm)
			continue; /* its linear went into another kernel */
		gemv_prologue(&z, f, norm_done);
		if (f->pro == GP_RMSNORM)
			norm_done[f->pro_node] = 1;
	}
	/* Drop the candidates that fuse nothing (compacting the table keeps ADD_NORM and ROPE_KV entries). */
	int keep = 0;
	for (int i = 0; i < g->nfk; i++) {
		FuseKernel *f = &g->fk[i];
		if (f->kind == FK_GEMV && (!f->nm || !gemv_commit(&z, f)))
			continue;
		g->fk[keep++] = *f;
	}
	g->nfk = keep;
	for (int i = 0; i < g->nfk; i++)
		if (g->fk[i].kind == FK_ADD_NORM)
			mark(g, g->fk[i].m[0], g->fk[i].host, FUSE_ADD_NORM);
	rc = 0;
out:;
	char buf[32];
	snprintf(buf, sizeof buf, "%d", z.fused);
	graph_set_meta(g, "fusions", buf);
	snprintf(buf, sizeof buf, "%d", z.refused);
	graph_set_meta(g, "fusions_refused", buf);
	free(z.nr), free(z.r0), free(z.rd), free(z.is_out), free(z.add_norm), free(z.gemv_of), free(z.taken);
	free(cand), free(norm_done);
	return rc;
}
