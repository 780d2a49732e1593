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
	if (w->rstride)
		return t->ndim == 2 && t->shape[0] == n->dim[0] * w->rstride && t->shape[1] == n->dim[2];
	if (t->ndim != n->ndim)
		return 0;
	for (int k = 1; k < n->ndim; k++)
		if (t->shape[k] != n->dim[k])
			return 0;
	if (w->row0 || w->slot_rows)
		return w->row0 + n->dim[0] <= t->shape[0];
	return t->shape[0] == n->dim[0];
}

/* A stacked parameter: each of its parts must exist with the shape of one slice and the same type. */
static int bind_parts(Graph *g, const Weights *wt, WeightRef *w, char *used, const char *at, char *err, size_t len)
{
	Node *n = &g->node[w->node];
	char name[512], b1[128], b2[128];
	WTensor t0 = {0};
	for (int p = 0; p < w->parts; p++) {
		snprintf(name, sizeof name, w->source, p);
		WTensor t;
		int ti = weights_find(wt, name, &t);
		if (ti < 0)
			return seterr(err, len, "%sparameter '%s': part %d, tensor '%s', not found in %s", at, n->name, p, name,
			              wt->path);
		int same = t.ndim == n->ndim - 1;
		for (int k = 0; same && k < t.ndim; k++)
			same = t.shape[k] == n->dim[k + 1];
		if (!same)
			return seterr(err, len, "%sparameter '%s': part '%s' has shape %s, each part must be %s", at, n->name, name,
			              dims_str(t.ndim, t.shape, b1, sizeof b1), dims_str(n->ndim - 1, n->dim + 1, b2, sizeof b2));
		if (weights_dtype(t.qtype) < 0 || (p && (t.qtype != t0.qtype || t.nbytes != t0.nbytes)))
			return seterr(err, len, "%sparameter '%s': part '%s' has type %s; all parts must share one readable type",
			              at, n->name, name, t.type_name);
		if (!p)
			t0 = t;
		used[ti] = 1;
	}
	n->dtype = w->dtype = weights_dtype(t0.qtype);
	w->qtype = t0.qtype;
	w->file = arena_strdup(g->A, t0.file);
	w->offset = t0.off;
	w->nbytes = t0.nbytes;
	return 0;
}

/* --random-weights: every parameter becomes a random tensor of its declared shape; matrices take the
** requested type where their rows are whole blocks, else BF16; vectors are F32. */
static void bind_random(Graph *g, const Weights *wt)
{
	for (int i = 0; i < g->nw; i++) {
		WeightRef *w = &g->w[i];
		Node *n = &g->node[w->node];
		int64_t cols = n->dim[n->ndim - 1], rows = node_numel(n, 0, 0) / cols;
		int q = n->ndim == 1 ? QT_F32 : wt->random_qtype;
		if (!quant_row_bytes(q, cols))
			q = QT_BF16;
		w->qtype = q;
		n->dtype = w->dtype = weights_dtype(q);
		w->file = "(random)";
		w->offset = 0;
		w->nbytes = quant_row_bytes(q, cols) * (uint64_t)rows;
		w->parts = 0, w->rstride = 0, w->roff = 0, w->row0 = 0, w->slot_rows = 0, w->unpermute = 0;
	}
}

int bind_weights(Graph *g, const Weights *wt, int strict, FILE *warn, char *err, size_t len)
{
	if (wt->random_qtype >= 0) {
		bind_random(g, wt);
		return 0;
	}
	char *used = calloc((size_t)wt->ntensor + 1, 1);
	char b1[128], b2[128], at[256];
	if (!used)
		return seterr(err, len, "out of memory");
	int rc = 0;
	for (int i = 0; i < g->nw && !rc; i++) {
		WeightRef *w = &g->w[i];
		Node *n = &g->node[w->node];
		snprintf(at, sizeof at, "%s:%d: ", n->src ? n->src : "?", n->line);
		if (w->parts) {
			rc = bind_parts(g, wt, w, used, at, err, len);
			continue;
		}
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
			if (w->rstride)
				rc = seterr(err, len, "%sparameter '%s': tensor '%s' in %s has shape %s, expected [%lld, %lld] to take "
				            "%lld rows at %lld of every %lld", at, n->name, t.name, t.file,
				            dims_str(t.ndim, t.shape, b1, sizeof b1), (long long)(n->dim[0] * w->rstride),
				            (long long)n->dim[2], (long long)n->dim[1], (long long)w->roff, (long long)w->rstride);
			else if (w->row0 || w->slot_rows)
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
		if (!weights_row_bytes(t.qtype, t.shape[t.ndim - 1])) {
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
		if (t.qtype == WQ_F8_E4M3) {
			/* Its block scales belong to it (checked when it is loaded). */
			char sn[512];
			snprintf(sn, sizeof sn, "%s_scale_inv", t.name);
			int si = weights_find(wt, sn, NULL);
			if (si < 0) {
				rc = seterr(err, len, "%s%s: FP8 tensor '%s' has no '%s' block scales", at, t.file, t.name, sn);
				break;
			}
			used[si] = 1;
		}
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
