/*
** compiler/memplan.c — static memory planning of the activations.
**
** Almost every activation is T-proportional ([T, ...]), so the plan is made in bytes per token: a value
** of b bytes per token at offset o occupies [o·M, (o+b)·M) of an arena sized for M tokens, and two values
** that do not overlap in per-token bytes never overlap for any M. The few values with no T dim go to a
** second, fixed-size region planned the same way. Step inputs, weights and caches are not planned here.
**
** 1. Liveness over the kernel order (node order): a value lives from its node to its last reader;
**    outputs live to the end of the step. A reshape is a view: it shares its input's buffer.
** 2. In-place reuse: an element-wise op whose first operand dies at it writes over that operand.
** 3. Greedy by size, best fit: the largest buffer first, each placed in the smallest gap left between
**    the buffers already placed that are live at the same time (TFLite's and XLA's heuristic).
** 4. A checker proves no two simultaneously-live buffers overlap; the plan records the arena size and
**    the lower bound (the peak of live bytes over the step).
*/
#include "glm.h"

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
static int64_t value_bytes(const Node *n, int *region)
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

/*
** Each value's first and last step in kernel order: written at its node (or, when fused into an add as
** its norm, at the add), read last by its last reader; outputs live to the end. Fusion: an absorbed norm
** (pattern A) is written while its add runs, so the add's operands live until the norm; an absorbed
** SwiGLU (pattern B) is re-formed inside the GEMV, so its operands live until the GEMV.
*/
static void liveness(const Graph *g, int *first, int *last)
{
	int n = g->n;
	for (int i = 0; i < n; i++)
		first[i] = last[i] = i;
	for (int i = 0; i < n; i++)
		for (int k = 0; k < g->node[i].nin; k++)
			last[g->node[i].in[k]] = i;
	for (int i = 0; i < g->nout; i++)
		last[g->out[i]] = n;
	for (int i = 0; i < n; i++) {
		const Node *nd = &g->node[i];
		if (nd->fuse_pattern == FUSE_NONE || nd->fused_into < 0)
			continue;
		int host = nd->fused_into, late = host > i ? host : i;
		const Node *src = nd->fuse_pattern == FUSE_ADD_NORM ? &g->node[host] : nd;
		for (int k = 0; k < src->nin; k++)
			if (last[src->in[k]] < late)
				last[src->in[k]] = late;
		if (last[host] < late)
			last[host] = late;
		if (nd->fuse_pattern == FUSE_ADD_NORM)
			first[i] = host;
	}
}

int memplan(Graph *g, int optimize, char *err, size_t len)
{
	int n = g->n;
	int *last = malloc(sizeof(int) * (size_t)n), *group = malloc(sizeof(int) * (size_t)n);
	Buf *b = calloc((size_t)n, sizeof *b);
	if (!last || !group || !b) {
		free(last), free(group), free(b);
		return seterr(err, len, "memplan: out of memory");
	}
	/* Liveness: the last reader of each value (a view extends its source's life). */
	int *born = malloc(sizeof(int) * (size_t)n);
	if (!born) {
		free(last), free(group), free(b);
		return seterr(err, len, "memplan: out of memory");
	}
	liveness(g, born, last);
	free(born);
	for (int i = 0; i < n; i++)
		group[i] = i;
	for (int i = n - 1; i >= 0; i--)
		if (g->node[i].op == OP_RESHAPE && g->node[g->node[i].in[0]].kind == VK_ACT) {
			int src = g->node[i].in[0];
			if (last[i] > last[src])
				last[src] = last[i];
		}
	/* Buffer groups: views join their source; with optimize, element-wise ops join a dying first operand. */
	for (int i = 0; i < n; i++) {
		const Node *nd = &g->node[i];
		if (nd->kind != VK_ACT)
			continue;
		int src = nd->nin ? nd->in[0] : -1;
		if (nd->op == OP_RESHAPE && src >= 0 && g->node[src].kind == VK_ACT) {
			group[i] = find(group, src);
			continue;
		}
		if (!optimize || !elementwise(nd->op) || src < 0 || g->node[src].kind != VK_ACT || last[src] != i)
			continue;
		int r1, r2;
		int64_t s1 = value_bytes(nd, &r1), s2 = value_bytes(&g->node[src], &r2);
		int gs = find(group, src);
		/* The operand's whole group must end here (no other view of it is read later). */
		int ends = 1;
		for (int k = 0; k < n && ends; k++)
			ends = find(group, k) != gs || last[k] <= i;
		int other = 0; /* the op must not also read the same buffer through a later operand */
		for (int k = 1; k < nd->nin; k++)
			other |= find(group, nd->in[k]) == gs;
		if (s1 == s2 && r1 == r2 && ends && !other)
			group[i] = gs;
	}
	for (int i = 0; i < n; i++) {
		const Node *nd = &g->node[i];
		if (nd->kind != VK_ACT)
			continue;
		int r, gi = find(group, i);
		int64_t s = value_bytes(nd, &r);
		Buf *x = &b[gi];
		int born = nd->fuse_pattern == FUSE_ADD_NORM && nd->fused_into >= 0 ? nd->fused_into : i;
		if (!x->size)
			x->first = born, x->region = r;
		if (born < x->first)
			x->first = born;
		if (s > x->size)
			x->size = s;
		x->last = last[i] > x->last ? last[i] : x->last;
	}
	/* Greedy by size with best fit; -O0 gives every buffer its own slot. */
	int64_t top[3] = {0, 0, 0};
	for (;;) {
		int pick = -1;
		for (int i = 0; i < n; i++)
			if (b[i].size && !b[i].placed && (pick < 0 || b[i].size > b[pick].size))
				pick = i;
		if (pick < 0)
			break;
		Buf *x = &b[pick];
		int64_t best = -1, best_gap = INT64_MAX, at = 0;
		if (!optimize) {
			best = top[x->region];
		} else {
			/* Candidate offsets: 0 and the end of every overlapping placed buffer; keep the tightest gap. */
			for (int c = -1; c < n; c++) {
				if (c >= 0 && !(b[c].placed && b[c].region == x->region && b[c].first <= x->last && x->first <= b[c].last))
					continue;
				at = c < 0 ? 0 : b[c].off + b[c].size;
				int64_t gap_end = INT64_MAX;
				int fits = 1;
				for (int d = 0; d < n && fits; d++) {
					const Buf *y = &b[d];
					if (!y->placed || y->region != x->region || y->first > x->last || x->first > y->last)
						continue;
					if (y->off < at + x->size && at < y->off + y->size)
						fits = 0;
					else if (y->off >= at + x->size && y->off < gap_end)
						gap_end = y->off;
				}
				int64_t gap = gap_end == INT64_MAX ? INT64_MAX - 1 : gap_end - at;
				if (fits && (gap < best_gap || (gap == best_gap && at < best)))
					best = at, best_gap = gap;
			}
		}
		x->off = best;
		x->placed = 1;
		if (x->off + x->size > top[x->region])
			top[x->region] = x->off + x->size;
	}
	for (int i = 0; i < n; i++)
		if (g->node[i].kind == VK_ACT) {
			const Buf *x = &b[find(group, i)];
			g->node[i].mem_region = (int8_t)x->region;
			g->node[i].mem_off = x->off;
		}
	/* The lower bound: the most bytes live at once, per region. */
	int64_t peak[3] = {0, 0, 0};
	for (int t = 0; t <= n; t++) {
		int64_t live[3] = {0, 0, 0};
		for (int i = 0; i < n; i++)
			if (b[i].size && b[i].first <= t && t <= b[i].last)
				live[b[i].region] += b[i].size;
		for (int r = 1; r < 3; r++)
			peak[r] = live[r] > peak[r] ? live[r] : peak[r];
	}
	g->mem.token_bytes = top[MEM_TOKEN], g->mem.static_bytes = top[MEM_STATIC];
	g->mem.token_lower = peak[MEM_TOKEN], g->mem.static_lower = peak[MEM_STATIC];
	g->mem.planned = 1;
	free(last), free(group), free(b);
	return memplan_check(g, err, len);
}

/* Prove that no two values live at the same time share bytes (views and in-place groups aside, which
** share one buffer by construction and are checked to be one group). */
int memplan_check(const Graph *g, char *err, size_t len)
{
	int n = g->n;
	int *first = malloc(sizeof(int) * (size_t)n), *last = malloc(sizeof(int) * (size_t)n);
	if (!first || !last) {
		free(first), free(last);
		return seterr(err, len, "memplan: out of memory");
	}
	liveness(g, first, last);
	int rc = 0;
	for (int i = 0; i < n && !rc; i++) {
		const Node *a = &g->node[i];
		if (a->kind != VK_ACT)
			continue;
		int ra;
		int64_t sa = value_bytes(a, &ra);
		if (a->mem_region != ra || a->mem_off < 0 ||
		    a->mem_off + sa > (ra == MEM_TOKEN ? g->mem.token_bytes : g->mem.static_bytes)) {
			rc = seterr(err, len, "memplan: %s %%%d lies outside its region", op_table[a->op].name, i);
			break;
		}
		for (int j = i + 1; j < n && !rc; j++) {
			const Node *c = &g->node[j];
			int rc2;
			if (c->kind != VK_ACT || c->mem_region != ra)
				continue;
			int64_t sc = value_bytes(c, &rc2);
			int overlap_mem = a->mem_off < c->mem_off + sc && c->mem_off < a->mem_off + sa;
			int overlap_time = first[j] <= last[i] && first[i] <= last[j];
			if (!overlap_mem || !overlap_time)
				continue;
			/* Allowed only when j is a view of i or writes over i, which then dies at j. */
			int shares = c->nin && c->in[0] == i && a->mem_off == c->mem_off &&
			             (c->op == OP_RESHAPE || (elementwise(c->op) && last[i] == j));
			if (!shares)
				rc = seterr(err, len, "memplan: %s %%%d and %s %%%d are live together but share bytes",
				            op_table[a->op].name, i, op_table[c->op].name, j);
		}
	}
	free(first), free(last);
	return rc;
}
