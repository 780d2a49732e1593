/*
** runtime/core/verify.c — the IR verifier. Runs after the front end, after every pass and on every plan
** that glmrun loads, so a malformed graph is reported where it is made instead of computed on.
*/
#include "glm.h"

#include <stdlib.h>
#include <string.h>

/* Where a node came from, for messages: "llama.lua:42: " or "". */
static const char *where(const Node *n, char *buf, size_t len)
{
	if (n->src && n->line > 0)
		snprintf(buf, len, "%s:%d: ", n->src, n->line);
	else
		buf[0] = 0;
	return buf;
}

static int leaf_kind(int op)
{
	return op == OP_PARAM ? VK_WEIGHT : op == OP_CACHE ? VK_CACHE : op == OP_INPUT ? VK_INPUT : VK_ACT;
}

/* Check one node against the op table: arity, SSA order, kind, and that its recorded shape is the
** one the shape rule derives. */
static int verify_node(const Graph *g, int id, char *err, size_t len)
{
	const Node *n = &g->node[id];
	char w[256], m[512], b1[96], b2[96];
	if (n->op < 0 || n->op >= OP_NOPS)
		return seterr(err, len, "node %%%d: unknown op %d", id, n->op);
	const OpDef *d = &op_table[n->op];
	if (n->nin < d->nin_min || n->nin > d->nin_max)
		return seterr(err, len, "%s%s (%%%d): %d operands, expected %d..%d", where(n, w, sizeof w), d->name, id,
		              n->nin, d->nin_min, d->nin_max);
	for (int i = 0; i < n->nin; i++)
		if (n->in[i] < 0 || n->in[i] >= id)
			return seterr(err, len, "%s%s (%%%d): operand %d is %%%d, not an earlier node", where(n, w, sizeof w),
			              d->name, id, i + 1, n->in[i]);
	if (n->kind != leaf_kind(n->op))
		return seterr(err, len, "%s (%%%d): kind %s does not fit the op", d->name, id, kind_name(n->kind));
	if (n->dtype < 0 || n->dtype >= DT_NTYPES || n->ndim < 1 || n->ndim > MAXDIM)
		return seterr(err, len, "%s (%%%d): bad dtype or rank", d->name, id);
	Node t = *n;
	if (d->shape(g, &t, m, sizeof m))
		return seterr(err, len, "%s%s", where(n, w, sizeof w), m);
	if (t.dtype != n->dtype || t.ndim != n->ndim || memcmp(t.dim, n->dim, sizeof(int64_t) * (size_t)n->ndim))
		return seterr(err, len, "%s%s (%%%d): recorded shape %s but operands give %s", where(n, w, sizeof w),
		              d->name, id, shape_str(n, b1, sizeof b1), shape_str(&t, b2, sizeof b2));
	if (n->op == OP_INPUT && (!n->name || (strcmp(n->name, "tokens") && strcmp(n->name, "pos"))))
		return seterr(err, len, "input (%%%d): unknown step input '%s' (tokens, pos)", id, n->name ? n->name : "");
	if ((n->op == OP_PARAM || n->op == OP_CACHE) && (!n->name || !n->name[0]))
		return seterr(err, len, "%s (%%%d): missing name", d->name, id);
	return 0;
}

/* Parameter names sorted (by name, then node), so duplicates are neighbours: n log n, not n². */
typedef struct {
	const char *name;
	int id;
} PName;

static int pname_cmp(const void *a, const void *b)
{
	const PName *x = a, *y = b;
	int c = strcmp(x->name, y->name);
	return c ? c : (x->id > y->id) - (x->id < y->id);
}

/* No two parameters share a name. */
static int unique_params(const Graph *g, char *err, size_t len)
{
	PName *p = malloc(sizeof *p * (size_t)(g->n ? g->n : 1));
	if (!p)
		return seterr(err, len, "verify: out of memory");
	int np = 0, rc = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].op == OP_PARAM)
			p[np++] = (PName){g->node[i].name, i};
	qsort(p, (size_t)np, sizeof *p, pname_cmp);
	for (int i = 1; i < np && !rc; i++)
		if (!strcmp(p[i - 1].name, p[i].name))
			rc = seterr(err, len, "parameter '%s' is declared twice (%%%d and %%%d)", p[i].name, p[i - 1].id, p[i].id);
	free(p);
	return rc;
}

int verify(const Graph *g, char *err, size_t len)
{
	for (int i = 0; i < g->n; i++)
		if (verify_node(g, i, err, len))
			return -1;
	if (g->nout < 1)
		return seterr(err, len, "the model declares no output (glm.output)");
	for (int i = 0; i < g->nout; i++)
		if (g->out[i] < 0 || g->out[i] >= g->n || g->node[g->out[i]].dtype != DT_F32)
			return seterr(err, len, "output '%s' is not a float tensor of this graph", g->out_name[i]);
	/* Parameter names are unique, and once bound every parameter has exactly one weight ref. */
	if (unique_params(g, err, len))
		return -1;
	if (g->nw) {
		int k = 0;
		for (int i = 0; i < g->n; i++) {
			if (g->node[i].op != OP_PARAM)
				continue;
			if (k >= g->nw || g->w[k].node != i)
				return seterr(err, len, "parameter '%s' (%%%d) has no weight binding", g->node[i].name, i);
			k++;
		}
		if (k != g->nw)
			return seterr(err, len, "%d weight bindings for %d parameters", g->nw, k);
	}
	return 0;
}
