/*
** runtime/core/memplan.c — static memory planning of the activations.
**
** Almost every activation is T-proportional ([T, ...]), so the plan is made in bytes per token: a value
** of b bytes per token at offset o occupies [o·M, (o+b)·M) of an arena sized for M tokens, and two values
** that do not overlap in per-token bytes never overlap for any M. The few values with no T dim go to a
** second, fixed-size region planned the same way. Step inputs, weights and caches are not planned here.
**
** 1. Liveness on the node timeline, over every schedule that runs the plan: the CPU executor runs the
**    nodes in order (node i writes at i and reads its operands at i); the GPU runs the launch list, each
**    launch at the time of the node it is attached to, touching the buffers among its arguments, and a
**    step of T tokens runs the launches whose T range holds T. A value lives from the first to the last
**    time any schedule touches it; outputs live to the end. Fused kernels need no special case: a norm
**    formed inside a GEMV simply never appears in the decode launches, and the input the GEMV stages does.
**    A reshape is a view: it shares its source's buffer (its accesses are the source's).
** 2. In-place reuse: an element-wise op c whose first operand dies at c (no schedule touches it later)
**    and which no schedule writes before c writes over that operand. Every kernel launched for an
**    element-wise node honours this (ops/fused.cuh states it for the fused ones).
** 3. Greedy, best fit: each buffer placed in the smallest gap left between the buffers already placed
**    that are live at the same time (TFLite's and XLA's heuristic), in three orders (largest first, ties
**    to the earliest or the longest lived; earliest first), keeping the smallest arena.
** 4. A checker proves, for each schedule separately and at the finer grain of single launches, that no
**    two buffers share bytes while both are live, and that every GPU launch reads only activations an
**    earlier launch of its step wrote (so a fused kernel placed before its inputs, or a value no kernel
**    computes any more, is caught at compile time); the plan records the arena size and the lower bound
**    (the peak of live bytes over the step).
*/
#include "glm.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int region;                  /* MEM_TOKEN or MEM_STATIC */
	int64_t size;                /* bytes (per token in MEM_TOKEN) */
	int first, last;             /* live interval in node order */
	int64_t off;
	int placed;
} Buf;

/* Bytes of a node's value per token (region MEM_TOKEN) or in all (MEM_STATIC). */
int64_t memplan_value_bytes(const Node *n, int *region)
{
	int64_t e = (int64_t)dtype_size(n->dtype == DT_I32 ? DT_I32 : DT_F32);
	int has_t = 0;
	for (int i = 0; i < n->ndim; i++) {
		if (n->dim[i] == DIM_T)
			has_t++;
		else
			e *= n->dim[i];
	}
	*region = has_t == 1 ? MEM_TOKEN : MEM_STATIC;
	return (e + 15) & ~(int64_t)15;
}

/* Ops that may write their result over their first operand, element by element. */
static int elementwise(int op)
{
	switch (op) {
	case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV: case OP_SCALE: case OP_SILU: case OP_GELU:
	case OP_SIGMOID: case OP_SWIGLU:
		return 1;
	default:
		return 0;
	}
}

static int find(int *parent, int i)
{
	while (parent[i] != i)
		i = parent[i] = parent[parent[i]];
	return i;
}

/* The activation whose buffer node v uses (a view's source), or -1 when v is not an activation. */
static int act_root(const Graph *g, int v)
{
	return g->node[v].kind == VK_ACT ? fuse_root(g, v) : -1;
}

static void touch(int *first, int *last, int v, int t)
{
	if (v < 0)
		return;
	if (t < first[v])
		first[v] = t;
	if (t > last[v])
		last[v] = t;
}

/* The step sizes at which the set of launches changes (each a schedule of its own), ascending: 1, then
** every tmin and tmax + 1 below 2^30. Returns how many; at most cap. */
static int step_sizes(const Graph *g, int64_t *ts, int cap)
{
	int n = 0;
	ts[n++] = 1;
	for (int i = 0; i < g->cuda.nl; i++) {
		int64_t c[2] = {g->cuda.l[i].tmin, (int64_t)g->cuda.l[i].tmax + 1};
		for (int k = 0; k < 2; k++) {
			int dup = c[k] >= (1 << 30);
			for (int j = 0; j < n && !dup; j++)
				dup = ts[j] == c[k];
			if (!dup && n < cap)
				ts[n++] = c[k];
		}
	}
	for (int i = 1; i < n; i++)
		for (int j = i; j > 0 && ts[j] < ts[j - 1]; j--) {
			int64_t t = ts[j];
			ts[j] = ts[j - 1], ts[j - 1] = t;
		}
	return n;
}

/* Each activation root's first and last access on the node timeline, over the CPU node order and the GPU
** launches at every step size (see the header). first = INT_MAX for a value nothing touches. */
static void liveness(const Graph *g, int *first, int *last)
{
	int n = g->n;
	for (int i = 0; i < n; i++)
		first[i] = INT_MAX, last[i] = -1;
	for (int i = 0; i < n; i++) {
		const Node *nd = &g->node[i];
		if (nd->kind != VK_ACT)
			continue;
		touch(first, last, act_root(g, i), i);
		for (int k = 0; k < nd->nin; k++)
			touch(first, last, act_root(g, nd->in[k]), i);
	}
	for (int i = 0; i < g->cuda.nl; i++) {
		const Launch *l = &g->cuda.l[i];
		for (int k = 0; k < l->narg; k++)
			if (l->arg[k].kind == KA_BUF)
				touch(first, last, act_root(g, l->arg[k].s.node), l->node);
	}
	for (int i = 0; i < g->nout; i++) {
		int r = act_root(g, g->out[i]);
		if (r >= 0)
			last[r] = n;
	}
}

void cuda_touched(const Graph *g, int64_t T, int one_seq, unsigned char *mark)
{
	memset(mark, 0, (size_t)g->n);
	for (int i = 0; i < g->cuda.nl; i++) {
		const Launch *l = &g->cuda.l[i];
		if (!launch_runs(l, T, one_seq))
			continue;
		for (int k = 0; k < l->narg; k++)
			if (l->arg[k].kind == KA_BUF && g->node[l->arg[k].s.node].kind == VK_ACT)
				mark[fuse_root(g, l->arg[k].s.node)] = 1;
	}
	for (int i = 0; i < g->n; i++)
		if (g->node[i].kind == VK_ACT && mark[fuse_root(g, i)])
			mark[i] = 1;
}

/* Whether buffer a goes before buffer b in placement order `order`: 0 the largest first (then the
** earliest); 1 the largest first, then the longest lived; 2 the earliest first (then the largest). */
static int place_before(const Buf *a, const Buf *b, int order)
{
	if (order == 2 && a->first != b->first)
		return a->first < b->first;
	if (a->size != b->size)
		return a->size > b->size;
	if (order == 1 && a->last - a->first != b->last - b->first)
		return a->last - a->first > b->last - b->first;
	return a->first < b->first;
}

/* place's sort: the placement order, ties to the lower index (the order a linear scan would pick). */
typedef struct {
	const Buf *b;
	int order;
} PlaceOrder;

static int place_cmp(const void *pa, const void *pb, void *ctx)
{
	const PlaceOrder *o = ctx;
	int i = *(const int *)pa, j = *(const int *)pb;
	if (place_before(&o->b[i], &o->b[j], o->order))
		return -1;
	if (place_before(&o->b[j], &o->b[i], o->order))
		return 1;
	return (i > j) - (i < j);
}

/* A growable list of buffer indices (place's time buckets and overlap sets). */
typedef struct {
	int *v;
	int n, cap;
} IdList;

static int idl_push(IdList *l, int x)
{
	if (l->n == l->cap) {
		int cap = l->cap ? 2 * l->cap : 8;
		int *v = realloc(l->v, sizeof *v * (size_t)cap);
		if (!v)
			return -1;
		l->v = v, l->cap = cap;
	}
	l->v[l->n++] = x;
	return 0;
}

#define PLACE_BUCKET 64 /* steps per time bucket of place's index of placed buffers */

/*
** Offsets for every buffer, greedily in `order`, each at the candidate offset with the tightest gap among
** the placed buffers live at the same time (or stacked, without optimize); top gets each region's end.
** The placed buffers are indexed by time buckets, so a buffer meets only those live near it: about
** n log n + n·live², not n³. Returns -1 when out of memory.
*/
static int place(Buf *b, int n, int order, int optimize, int64_t *top)
{
	int m = 0, maxt = 0, rc = -1;
	int *idx = malloc(sizeof(int) * (size_t)(n ? n : 1)), *stamp = calloc((size_t)(n ? n : 1), sizeof(int));
	IdList S = {0}, *bk = NULL;
	for (int i = 0; i < n; i++) {
		b[i].placed = 0;
		if (idx && b[i].size) {
			idx[m++] = i;
			maxt = b[i].last > maxt ? b[i].last : maxt;
		}
	}
	int nb = maxt / PLACE_BUCKET + 1;
	if (!idx || !stamp || !(bk = calloc((size_t)nb, sizeof *bk)))
		goto out;
	PlaceOrder po = {b, order};
	qsort_r(idx, (size_t)m, sizeof *idx, place_cmp, &po);
	for (int k = 0; k < m; k++) {
		Buf *x = &b[idx[k]];
		int64_t best = -1, best_gap = INT64_MAX;
		if (!optimize)
			best = top[x->region];
		else {
			/* the placed buffers of this region live at the same time as x */
			S.n = 0;
			for (int t = x->first / PLACE_BUCKET; t <= x->last / PLACE_BUCKET; t++)
				for (int q = 0; q < bk[t].n; q++) {
					int c = bk[t].v[q];
					if (stamp[c] == k + 1)
						continue;
					stamp[c] = k + 1;
					if (b[c].region == x->region && b[c].first <= x->last && x->first <= b[c].last && idl_push(&S, c))
						goto out;
				}
			/* Candidate offsets: 0 and the end of every overlapping placed buffer; keep the tightest gap. */
			for (int c = -1; c < S.n; c++) {
				int64_t at = c < 0 ? 0 : b[S.v[c]].off + b[S.v[c]].size, gap_end = INT64_MAX;
				int fits = 1;
				for (int d = 0; d < S.n && fits; d++) {
					const Buf *y = &b[S.v[d]];
					if (y->off < at + x->size && at < y->off + y->size)
						fits = 0;
					else if (y->off >= at + x->size && y->off < gap_end)
						gap_end = y->off;
				}
				int64_t gap = gap_end == INT64_MAX ? INT64_MAX - 1 : gap_end - at;
				if (fits && (gap < best_gap || (gap == best_gap && at < best)))
					best = at, best_gap = gap;
			}
			for (int t = x->first / PLACE_BUCKET; t <= x->last / PLACE_BUCKET; t++)
				if (idl_push(&bk[t], idx[k]))
					goto out;
		}
		x->off = best;
		x->placed = 1;
		if (x->off + x->size > top[x->region])
			top[x->region] = x->off + x->size;
	}
	rc = 0;
out:
	for (int t = 0; bk && t < nb; t++)
		free(bk[t].v);
	free(bk), free(S.v), free(idx), free(stamp);
	return rc;
}

int memplan(Graph *g, int optimize, char *err, size_t len)
{
	int n = g->n;
	int *first = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
	int *group = malloc(sizeof(int) * (size_t)n), *glast = malloc(sizeof(int) * (size_t)n);
	Buf *b = calloc((size_t)n, sizeof *b);
	if (!first || !last || !group || !glast || !b) {
		free(first), free(last), free(group), free(glast), free(b);
		return seterr(err, len, "memplan: out of memory");
	}
	liveness(g, first, last);
	/* Buffer groups: views join their source; with optimize, element-wise ops join a dying first operand.
	** glast holds each group's last access (at its representative). */
	for (int i = 0; i < n; i++)
		group[i] = i, glast[i] = last[i];
	for (int i = 0; i < n; i++) {
		const Node *nd = &g->node[i];
		if (nd->kind != VK_ACT)
			continue;
		int src = nd->nin ? act_root(g, nd->in[0]) : -1;
		if (nd->op == OP_RESHAPE && src >= 0) {
			group[i] = find(group, src);
			continue;
		}
		if (!optimize || !elementwise(nd->op) || src < 0)
			continue;
		int r1, r2, gs = find(group, src);
		int64_t s1 = memplan_value_bytes(nd, &r1), s2 = memplan_value_bytes(&g->node[src], &r2);
		/* The operand's whole group dies here, and nothing writes this value before its own node does. */
		int ok = s1 == s2 && r1 == r2 && glast[gs] == i && first[i] == i;
		for (int k = 1; k < nd->nin && ok; k++) /* not read again through another operand */
			ok = act_root(g, nd->in[k]) < 0 || find(group, act_root(g, nd->in[k])) != gs;
		if (ok) {
			group[i] = gs;
			if (last[i] > glast[gs])
				glast[gs] = last[i];
		}
	}
	for (int i = 0; i < n; i++) {
		const Node *nd = &g->node[i];
		if (nd->kind != VK_ACT)
			continue;
		int r, gi = find(group, i);
		int64_t s = memplan_value_bytes(nd, &r);
		Buf *x = &b[gi];
		int f = first[i] == INT_MAX ? i : first[i], l = last[i] < 0 ? i : last[i];
		if (!x->size)
			x->first = f, x->last = l, x->region = r;
		if (f < x->first)
			x->first = f;
		if (l > x->last)
			x->last = l;
		if (s > x->size)
			x->size = s;
	}
	/* Greedy with best fit under a few orders (each heuristic wins on some graphs); the smallest arena is
	** kept. -O0 gives every buffer its own slot. */
	int64_t top[3] = {0, 0, 0}, *keep = malloc(sizeof(int64_t) * (size_t)n);
	if (!keep) {
		free(first), free(last), free(group), free(glast), free(b);
		return seterr(err, len, "memplan: out of memory");
	}
	for (int order = 0; order < (optimize ? 3 : 1); order++) {
		int64_t t[3] = {0, 0, 0};
		if (place(b, n, order, optimize, t)) {
			free(first), free(last), free(group), free(glast), free(b), free(keep);
			return seterr(err, len, "memplan: out of memory");
		}
		if (!order || t[MEM_TOKEN] < top[MEM_TOKEN] ||
		    (t[MEM_TOKEN] == top[MEM_TOKEN] && t[MEM_STATIC] < top[MEM_STATIC])) {
			memcpy(top, t, sizeof t);
			for (int i = 0; i < n; i++)
				keep[i] = b[i].off;
		}
	}
	for (int i = 0; i < n; i++)
		b[i].off = keep[i];
	free(keep);
	for (int i = 0; i < n; i++)
		if (g->node[i].kind == VK_ACT) {
			const Buf *x = &b[find(group, i)];
			g->node[i].mem_region = (int8_t)x->region;
			g->node[i].mem_off = x->off;
		}
	/* The lower bound: the most bytes live at once, per region (a sweep over interval ends). */
	int64_t peak[3] = {0, 0, 0};
	int64_t *delta = calloc((size_t)(n + 2) * 3, sizeof(int64_t));
	if (!delta) {
		free(first), free(last), free(group), free(glast), free(b);
		return seterr(err, len, "memplan: out of memory");
	}
	for (int i = 0; i < n; i++)
		if (b[i].size) {
			delta[(size_t)b[i].first * 3 + (size_t)b[i].region] += b[i].size;
			delta[(size_t)(b[i].last + 1) * 3 + (size_t)b[i].region] -= b[i].size;
		}
	int64_t live[3] = {0, 0, 0};
	for (int t = 0; t <= n + 1; t++)
		for (int r = 1; r < 3; r++) {
			live[r] += delta[(size_t)t * 3 + (size_t)r];
			peak[r] = live[r] > peak[r] ? live[r] : peak[r];
		}
	free(delta);
	g->mem.token_bytes = top[MEM_TOKEN], g->mem.static_bytes = top[MEM_STATIC];
	g->mem.token_lower = peak[MEM_TOKEN], g->mem.static_lower = peak[MEM_STATIC];
	g->mem.planned = 1;
	free(first), free(last), free(group), free(glast), free(b);
	return memplan_check(g, err, len);
}

/*
** One schedule's accesses, at the grain of single steps: the CPU's node order (sched < 0; step i is node
** i) or the GPU launches used at T tokens (step k is the k-th such launch). first/last per activation
** root; owner[step] is the node the step belongs to. Returns the number of steps.
*/
static int schedule(const Graph *g, int64_t T, int one_seq, int cpu, int *first, int *last, int *owner)
{
	int n = g->n, steps = 0;
	for (int i = 0; i < n; i++)
		first[i] = INT_MAX, last[i] = -1;
	if (cpu) {
		for (int i = 0; i < n; i++) {
			const Node *nd = &g->node[i];
			owner[steps] = i;
			if (nd->kind == VK_ACT) {
				touch(first, last, act_root(g, i), steps);
				for (int k = 0; k < nd->nin; k++)
					touch(first, last, act_root(g, nd->in[k]), steps);
			}
			steps++;
		}
	} else {
		for (int i = 0; i < g->cuda.nl; i++) {
			const Launch *l = &g->cuda.l[i];
			if (!launch_runs(l, T, one_seq))
				continue;
			owner[steps] = l->node;
			for (int k = 0; k < l->narg; k++)
				if (l->arg[k].kind == KA_BUF)
					touch(first, last, act_root(g, l->arg[k].s.node), steps);
			steps++;
		}
	}
	for (int i = 0; i < g->nout; i++) {
		int r = act_root(g, g->out[i]);
		if (r >= 0 && first[r] != INT_MAX)
			last[r] = steps;
	}
	return steps;
}

/* The GPU launches used at T tokens read only activations that an earlier launch of the same step wrote,
** and the outputs are written: a fused kernel launched before its inputs exist, or a value that no kernel
** computes any more, fails here. written is scratch of g->n bytes. */
static int dataflow(const Graph *g, int64_t T, int one_seq, char *written, char *err, size_t len)
{
	memset(written, 0, (size_t)g->n);
	for (int i = 0; i < g->cuda.nl; i++) {
		const Launch *l = &g->cuda.l[i];
		if (!launch_runs(l, T, one_seq))
			continue;
		for (int k = 0; k < l->narg; k++) {
			int r = l->arg[k].kind == KA_BUF ? act_root(g, l->arg[k].s.node) : -1;
			if (r >= 0 && l->arg[k].f == 0 && !written[r])
				return seterr(err, len, "launch %d (%s for %s %%%d) reads %s %%%d before any launch writes it in a "
				              "step of %lld tokens%s", i, launch_name(l), op_table[g->node[l->node].op].name, l->node,
				              op_table[g->node[r].op].name, r, (long long)T, one_seq ? " of one sequence" : "");
		}
		for (int k = 0; k < l->narg; k++) {
			int r = l->arg[k].kind == KA_BUF ? act_root(g, l->arg[k].s.node) : -1;
			if (r >= 0 && l->arg[k].f != 0)
				written[r] = 1;
		}
	}
	for (int i = 0; i < g->nout; i++) {
		int r = act_root(g, g->out[i]);
		if (r >= 0 && !written[r])
			return seterr(err, len, "output %s (%%%d) is not written by any launch in a step of %lld tokens%s",
			              g->out_name[i], g->out[i], (long long)T, one_seq ? " of one sequence" : "");
	}
	return 0;
}

/* A root value's lifetime and bytes, for no_overlap's sweep. */
typedef struct {
	int id, first, last, region;
	int64_t off, end;
} Live;

/* Sweep order: by first access, then node id (an in-place value comes after the operand it overwrites). */
static int live_by_first(const void *a, const void *b)
{
	const Live *x = a, *y = b;
	return x->first != y->first ? (x->first > y->first) - (x->first < y->first) : (x->id > y->id) - (x->id < y->id);
}

/* Whether x lies before y in (region, offset) order. */
static int live_below(const Live *x, const Live *y)
{
	return x->region != y->region ? x->region < y->region : x->off < y->off;
}

/*
** No two roots live together in one schedule share bytes: a sweep over first accesses keeping the live
** values in (region, offset) order, where they are disjoint, so a new value meets only its neighbours
** (n log n + n·live rather than all pairs). An element-wise value may take over the bytes of the
** operand that dies at the step it is born (memplan's in-place groups). items and act: scratch of nr.
*/
static int no_overlap(const Graph *g, const int *roots, int nr, const int *first, const int *last, const int *owner,
                      Live *items, Live *act, const char *sched, char *err, size_t len)
{
	int ni = 0, na = 0;
	for (int x = 0; x < nr; x++) {
		int i = roots[x], r;
		int64_t sz = memplan_value_bytes(&g->node[i], &r);
		if (first[i] != INT_MAX && sz > 0)
			items[ni++] = (Live){i, first[i], last[i], g->node[i].mem_region, g->node[i].mem_off,
			                     g->node[i].mem_off + sz};
	}
	qsort(items, (size_t)ni, sizeof *items, live_by_first);
	for (int x = 0; x < ni; x++) {
		Live *v = &items[x];
		int k = 0;
		for (int q = 0; q < na; q++) /* those dead before this step leave */
			if (act[q].last >= v->first)
				act[k++] = act[q];
		na = k;
		int lo = 0, hi = na;
		while (lo < hi) {
			int mid = (lo + hi) / 2;
			if (live_below(&act[mid], v))
				lo = mid + 1;
			else
				hi = mid;
		}
		/* the live values overlapping v's bytes are contiguous around lo */
		int q0 = lo;
		while (q0 > 0 && act[q0 - 1].region == v->region && act[q0 - 1].end > v->off)
			q0--;
		int q1 = lo;
		while (q1 < na && act[q1].region == v->region && act[q1].off < v->end)
			q1++;
		for (int q = q0; q < q1; q++) {
			int i = act[q].id, j = v->id;
			const Node *a = &g->node[i], *c = &g->node[j];
			int shares = elementwise(c->op) && c->nin && act_root(g, c->in[0]) == i && a->mem_off == c->mem_off &&
			             last[i] == first[j] && owner[first[j]] == j;
			if (!shares)
				return seterr(err, len, "memplan: %s %%%d and %s %%%d are live together but share bytes (%s)",
				              op_table[a->op].name, i, op_table[c->op].name, j, sched);
		}
		/* the operands it took over are gone; v takes their place in the order */
		memmove(act + q0 + 1, act + q1, sizeof *act * (size_t)(na - q1));
		act[q0] = *v;
		na += 1 - (q1 - q0);
	}
	return 0;
}

/* Prove that no two values live at the same time share bytes, in every schedule (views share their
** source's buffer by construction; an element-wise node may overwrite its first operand at the very step
** that operand dies, as memplan's in-place groups do). */
int memplan_check(const Graph *g, char *err, size_t len)
{
	int n = g->n;
	int nsteps = g->cuda.nl > n ? g->cuda.nl : n;
	int *first = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
	int *owner = malloc(sizeof(int) * (size_t)(nsteps + n + 1)), *roots = malloc(sizeof(int) * (size_t)n);
	if (!first || !last || !owner || !roots) {
		free(first), free(last), free(owner), free(roots);
		return seterr(err, len, "memplan: out of memory");
	}
	int rc = 0, nr = 0;
	for (int i = 0; i < n && !rc; i++) {
		const Node *a = &g->node[i];
		if (a->kind != VK_ACT)
			continue;
		int ra;
		int64_t sa = memplan_value_bytes(a, &ra);
		if (a->mem_region != ra || a->mem_off < 0 ||
		    a->mem_off + sa > (ra == MEM_TOKEN ? g->mem.token_bytes : g->mem.static_bytes))
			rc = seterr(err, len, "memplan: %s %%%d lies outside its region", op_table[a->op].name, i);
		else if (act_root(g, i) != i && a->mem_off != g->node[act_root(g, i)].mem_off)
			rc = seterr(err, len, "memplan: view %%%d does not share its source's buffer", i);
		else if (act_root(g, i) == i)
			roots[nr++] = i;
	}
	int64_t ts[64];
	int nts = g->cuda.nl ? step_sizes(g, ts, 64) : 0;
	/* every step size, as a step of several sequences and as one sequence's chunk (LAUNCH_ONE_SEQ) */
	for (int s = 0; s < 2 * nts && !rc; s++)
		rc = dataflow(g, ts[s / 2], s & 1, (char *)owner, err, len);
	Live *items = malloc(sizeof *items * (size_t)(nr ? nr : 1)), *act = malloc(sizeof *act * (size_t)(nr ? nr : 1));
	if (!items || !act)
		rc = seterr(err, len, "memplan: out of memory");
	for (int s = -1; s < 2 * nts && !rc; s++) {
		schedule(g, s < 0 ? 0 : ts[s / 2], s & 1, s < 0, first, last, owner);
		rc = no_overlap(g, roots, nr, first, last, owner, items, act, s < 0 ? "CPU node order" : "GPU launches", err,
		                len);
	}
	free(items), free(act);
	free(first), free(last), free(owner), free(roots);
	return rc;
}
