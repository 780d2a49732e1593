/*
** compiler/fuse.c — operator fusion decisions, each explained.
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
**                linear (y = r + W·x, launched where the add is), or a constant scale.
**   ROPE_KV    per-head RMSNorm (Qwen3) and rotary of q and k, and the attention's k/v cache writes, in
**              one kernel of one block per token and head (any step).
** Never duplicated: a weight is read once per step; only the O(K) norm of a row is recomputed per block.
** Every candidate that is refused gets its reason recorded; `glmc explain PLAN` prints them.
*/
#include "glm.h"

#include <stdlib.h>
#include <string.h>

#define ALL_T (1 << 30)
#define GEMV_TMAX 8           /* the decode GEMV's step limit (k_linear_gemv stages up to 8 rows) */

typedef struct {
	Graph *g;
	int *nr, *r0, *rd;           /* readers of node v: rd[r0[v] .. r0[v] + nr[v]) (repeats for repeated operands) */
	char *is_out;
	int *add_norm;               /* per rmsnorm: the add whose pass computes it (ADD_NORM), or -1 */
	int *gemv_of;                /* per linear: the FK_GEMV it belongs to, or -1 */
	int *taken;                  /* per node: computed inside some fused kernel already (1) */
	int fused, refused;
} Fz;

int fuse_root(const Graph *g, int v)
{
	while (g->node[v].op == OP_RESHAPE && g->node[g->node[v].in[0]].kind == VK_ACT)
		v = g->node[v].in[0];
	return v;
}

static void note(Graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void note(Graph *g, const char *fmt, ...)
{
	char line[512], key[32];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	int k = 0;
	for (int i = 0; i < g->nmeta; i++)
		k += !strncmp(g->meta[i].key, "fusion.", 7);
	snprintf(key, sizeof key, "fusion.%04d", k);
	graph_set_meta(g, key, line);
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
	f->res = f->pro_node = f->attn = -1;
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

/* The weight storage class a GEMV instantiation depends on (quantized weights are dequantized to float). */
static int wclass(const Graph *g, int lin)
{
	int dt = g->node[g->node[lin].in[1]].dtype;
	return dt == DT_Q ? DT_F32 : dt;
}

/* Why linear l cannot run in a fused decode GEMV, or NULL. */
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
		if (g->node[l].op != OP_LINEAR || z->gemv_of[l] >= 0 || gemv_unfit(g, l))
			continue;
		int x = g->node[l].in[0];
		FuseKernel *f = fk_new(g, FK_GEMV, l, GEMV_TMAX);
		int id = g->nfk - 1;
		f->nm = 1, f->m[0] = l, f->out[0] = l;
		z->gemv_of[l] = id;
		for (int r = z->r0[x]; r < z->r0[x] + z->nr[x]; r++) {
			int o = z->rd[r];
			if (o <= l || g->node[o].op != OP_LINEAR || g->node[o].in[0] != x || z->gemv_of[o] >= 0)
				continue;
			const char *why = gemv_unfit(g, o);
			if (!why && wclass(g, o) != wclass(g, l))
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

/* D. Prologues: the input's RMSNorm or SwiGLU formed while staging. */
static void gemv_prologue(Fz *z, FuseKernel *f, const int *norm_done)
{
	Graph *g = z->g;
	int x = g->node[f->m[0]].in[0];
	const Node *xn = &g->node[x];
	if (xn->op == OP_SWIGLU) {
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
	else if (Rq->ndim != 2 || Rk->ndim != 2 || Rq->ia[0] != A->ia[0] || Rk->ia[0] != A->ia[1] ||
	         Rq->ia[1] != A->ia[2] || Rk->ia[1] != A->ia[2])
		why = "the rotary heads do not match the attention's";
	else if (Rq->ia[2] != Rk->ia[2] || Rq->ia[3] != Rk->ia[3])
		why = "q and k rotate different dims";
	else if (A->ia[2] > 1024 || z->nr[A->in[3]] != 1 || z->nr[A->in[4]] != 1)
		why = A->ia[2] > 1024 ? "head_dim above 1024" : "another node reads the caches";
	if (!why) {
		sq = Rq->in[0], sk = Rk->in[0];
		/* Per-head norms: rope(reshape(rmsnorm(reshape(lin) to [T, H, D])) to [T, H*D]). */
		int hq = g->node[sq].op == OP_RESHAPE && g->node[g->node[sq].in[0]].op == OP_RMSNORM;
		int hk = g->node[sk].op == OP_RESHAPE && g->node[g->node[sk].in[0]].op == OP_RMSNORM;
		if (hq && hk) {
			nq = g->node[sq].in[0], nk = g->node[sk].in[0];
			const Node *Nq = &g->node[nq], *Nk = &g->node[nk];
			if (Nq->ndim != 3 || Nk->ndim != 3 || Nq->dim[2] != A->ia[2] || Nk->dim[2] != A->ia[2])
				why = "the q/k norms are not per head";
			else if (Nq->fa[0] != Nk->fa[0] || Nq->nin != Nk->nin)
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
	int cov[4] = {nq, nk, rq, rk};
	for (int i = 0; i < 4; i++)
		if (cov[i] >= 0) {
			cover(f, cov[i]);
			z->taken[cov[i]] = 1;
			mark(g, cov[i], first, FUSE_ROPE_KV);
		}
	note(g, "fused: %srope %%%d, %%%d and the k/v cache writes of attention %%%d (%s:%d): one kernel, one block per "
	     "token and head", nq >= 0 ? "per-head rmsnorm + " : "", rq, rk, at, where(A), A->line);
	z->fused++;
}

/* Commit a GEMV candidate: covers, marks and the explanation; single plain linears are dropped. */
static int gemv_commit(Fz *z, FuseKernel *f)
{
	Graph *g = z->g;
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
		if (f->out[m] != f->m[m] && k < sizeof what)
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

int fuse(Graph *g, int enable)
{
	for (int j = 0; j < g->n; j++)
		g->node[j].fused_into = -1, g->node[j].fuse_pattern = FUSE_NONE;
	g->nfk = 0;
	if (!enable)
		return 0;
	Fz z = {.g = g};
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
	for (int i = 0; i < n; i++)
		if (g->node[i].op == OP_ATTENTION)
			fuse_rope_kv(&z, i);
	int nc = 0;
	group_linears(&z, cand, &nc);
	for (int c = 0; c < nc; c++)
		gemv_epilogues(&z, &g->fk[cand[c]]);
	/* Prologues after every epilogue: a norm whose add became a GEMV epilogue has no pass of its own left. */
	for (int c = 0; c < nc; c++) {
		FuseKernel *f = &g->fk[cand[c]];
		gemv_prologue(&z, f, norm_done);
		if (f->pro == GP_RMSNORM)
			norm_done[f->pro_node] = 1;
	}
	/* Drop the candidates that fuse nothing (compacting the table keeps ADD_NORM and ROPE_KV entries). */
	int keep = 0;
	for (int i = 0; i < g->nfk; i++) {
		FuseKernel *f = &g->fk[i];
		if (f->kind == FK_GEMV && !gemv_commit(&z, f))
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
