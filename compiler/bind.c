/*
** compiler/bind.c — bind every declared parameter to a checkpoint tensor by name, checking shape and
** type. A wrong binding computes fluent garbage, so nothing here is lenient: a missing tensor, a shape
** that differs or a type glmc cannot read is an error naming the tensor and the model line that
** declared it; checkpoint tensors the model never uses are listed. A parameter may be a row slot of a
** merged tensor (row0), addressed by index, never by file order.
*/
#include "glm.h"
#include "quant.h"
#include "weights.h"

#include <stdlib.h>
#include <string.h>

/* "[64, 128]" */
static const char *dims_str(int nd, const int64_t *d, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "[");
	for (int i = 0; i < nd && k < len; i++)
		k += (size_t)snprintf(buf + k, len - k, "%s%lld", i ? ", " : "", (long long)d[i]);
	if (k < len)
		snprintf(buf + k, len - k, "]");
	return buf;
}

/* The expected source shape: the parameter's, with the slot's rows added back when it is a slot
** (source rows are checked to hold [row0, row0 + rows)). */
static int shape_fits(const Node *n, const WeightRef *w, const WTensor *t)
{
	if (t->ndim != n->ndim)
		return 0;
	for (int k = 1; k < n->ndim; k++)
		if (t->shape[k] != n->dim[k])
			return 0;
	if (w->row0 || w->slot_rows)
		return w->row0 + n->dim[0] <= t->shape[0];
	return t->shape[0] == n->dim[0];
}

int bind_weights(Graph *g, const Weights *wt, int strict, FILE *warn, char *err, size_t len)
{
	char *used = calloc((size_t)wt->ntensor + 1, 1);
	char b1[128], b2[128], at[256];
	if (!used)
		return seterr(err, len, "out of memory");
	int rc = 0;
	for (int i = 0; i < g->nw && !rc; i++) {
		WeightRef *w = &g->w[i];
		Node *n = &g->node[w->node];
		snprintf(at, sizeof at, "%s:%d: ", n->src ? n->src : "?", n->line);
		WTensor t;
		int ti = weights_find(wt, w->source, &t);
		if (ti < 0) {
			if (strcmp(w->source, n->name))
				rc = seterr(err, len, "%sparameter '%s': tensor '%s' not found in %s", at, n->name, w->source,
				            wt->path);
			else
				rc = seterr(err, len, "%sparameter '%s' not found in %s", at, n->name, wt->path);
			break;
		}
		int dt = weights_dtype(t.qtype);
		if (dt < 0) {
			rc = seterr(err, len, "%s%s: tensor '%s' has type %s, which glmc cannot read (parameter '%s')", at,
			            t.file, t.name, t.type_name, n->name);
			break;
		}
		if (!shape_fits(n, w, &t)) {
			if (w->row0 || w->slot_rows)
				rc = seterr(err, len, "%sparameter '%s': tensor '%s' in %s has shape %s, too small for rows [%lld, "
				            "%lld) of shape %s", at, n->name, t.name, t.file, dims_str(t.ndim, t.shape, b1, sizeof b1),
				            (long long)w->row0, (long long)(w->row0 + n->dim[0]),
				            dims_str(n->ndim, n->dim, b2, sizeof b2));
			else
				rc = seterr(err, len, "%sparameter '%s': tensor '%s' in %s has shape %s, the model expects %s", at,
				            n->name, t.name, t.file, dims_str(t.ndim, t.shape, b1, sizeof b1),
				            dims_str(n->ndim, n->dim, b2, sizeof b2));
			break;
		}
		if (!quant_row_bytes(t.qtype, t.shape[t.ndim - 1])) {
			rc = seterr(err, len, "%s%s: tensor '%s': rows of %lld values are not whole %s blocks", at, t.file, t.name,
			            (long long)t.shape[t.ndim - 1], t.type_name);
			break;
		}
		if (w->unpermute && (n->dim[0] % w->unpermute || (n->dim[0] / w->unpermute) % 2)) {
			rc = seterr(err, len, "%sparameter '%s': %lld rows do not split into %d heads of even size", at, n->name,
			            (long long)n->dim[0], w->unpermute);
			break;
		}
		used[ti] = 1;
		n->dtype = dt;
		w->dtype = dt;
		w->qtype = t.qtype;
		w->file = arena_strdup(g->A, t.file);
		w->offset = t.off;
		w->nbytes = t.nbytes;
	}
	for (int i = 0; i < wt->ntensor && !rc; i++) {
		if (used[i])
			continue;
		WTensor t;
		weights_get(wt, i, &t);
		if (strict) {
			rc = seterr(err, len, "%s: tensor '%s' is not used by the model (--strict)", wt->path, t.name);
			break;
		}
		if (warn)
			fprintf(warn, "glmc: warning: %s: tensor '%s' is not used by the model\n", wt->path, t.name);
	}
	free(used);
	return rc;
}
