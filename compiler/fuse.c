/*
** compiler/fuse.c — operator fusion decisions, each explained.
**
** The IR keeps every node (the CPU reference runs them one by one, so fusion can never change what is
** computed); fusion marks which nodes the GPU computes inside another node's kernel and extends the
** liveness the memory planner sees so the fused kernel's operands stay intact. Two patterns so far, the
** ones every decode step of a transformer repeats:
**   A. residual add + RMSNorm: x' = x + y; h = rmsnorm(x') in one pass that writes both x' and h.
**   B. SwiGLU into the down projection: in the decode GEMV the input row silu(g)·u is formed while it is
**      staged, so the [T, F] product is never written (prefill keeps the separate SwiGLU + GEMM).
** Every candidate that is refused gets its reason recorded; `glmc explain PLAN` prints them.
*/
#include "glm.h"

#include <string.h>

/* How many nodes read value v. */
static int consumers(const Graph *g, int v)
{
	int c = 0;
	for (int i = v + 1; i < g->n; i++)
		for (int k = 0; k < g->node[i].nin; k++)
			c += g->node[i].in[k] == v;
	for (int i = 0; i < g->nout; i++)
		c += g->out[i] == v;
	return c;
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

int fuse(Graph *g, int enable)
{
	int fused = 0, refused = 0;
	for (int j = 0; j < g->n; j++) {
		Node *n = &g->node[j];
		n->fused_into = -1;
	}
	if (!enable)
		return 0;
	for (int j = 0; j < g->n; j++) {
		Node *n = &g->node[j];
		/* A: rmsnorm of an add. */
		if (n->op == OP_RMSNORM) {
			int i = n->in[0];
			const Node *a = &g->node[i];
			if (a->op != OP_ADD) {
				continue;
			}
			const Node *x = &g->node[a->in[0]], *y = &g->node[a->in[1]];
			if (!same_dims(x, y) || !same_dims(a, x)) {
				note(g, "refused: add %%%d + rmsnorm %%%d: the add broadcasts an operand", i, j), refused++;
				continue;
			}
			if (a->fused_into >= 0) {
				note(g, "refused: add %%%d + rmsnorm %%%d: the add is already fused", i, j), refused++;
				continue;
			}
			n->fused_into = i;
			n->fuse_pattern = FUSE_ADD_NORM;
			note(g, "fused: add %%%d + rmsnorm %%%d (%s:%d): residual and norm in one pass", i, j, n->src ? n->src : "?",
			     n->line);
			fused++;
		}
		/* B: a linear whose input is a SwiGLU read by nothing else. */
		if (n->op == OP_LINEAR) {
			int s = n->in[0];
			const Node *sw = &g->node[s];
			if (sw->op != OP_SWIGLU)
				continue;
			if (n->nin > 2) {
				note(g, "refused: swiglu %%%d into linear %%%d: the linear has a bias", s, j), refused++;
				continue;
			}
			if (consumers(g, s) != 1) {
				note(g, "refused: swiglu %%%d into linear %%%d: its product has other readers", s, j), refused++;
				continue;
			}
			if (sw->ndim != 2) {
				note(g, "refused: swiglu %%%d into linear %%%d: not a [T, F] product", s, j), refused++;
				continue;
			}
			g->node[s].fused_into = j;
			g->node[s].fuse_pattern = FUSE_SWIGLU_GEMV;
			note(g, "fused: swiglu %%%d into linear %%%d (%s:%d): the decode GEMV forms silu(g)*u as it stages its "
			     "input; prefill keeps both kernels", s, j, n->src ? n->src : "?", n->line);
			fused++;
		}
	}
	char buf[32];
	snprintf(buf, sizeof buf, "%d", fused);
	graph_set_meta(g, "fusions", buf);
	snprintf(buf, sizeof buf, "%d", refused);
	graph_set_meta(g, "fusions_refused", buf);
	return 0;
}
