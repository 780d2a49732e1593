/*
** compiler/bind.c — bind every declared parameter to a checkpoint tensor by name, checking shape and
** dtype. A wrong binding computes fluent garbage, so nothing here is lenient: a missing tensor, a
** shape that differs or a dtype this build cannot read is an error naming the tensor and the model
** line that declared it; checkpoint tensors the model never uses are listed.
*/
#include "glm.h"
#include "st.h"

#include <stdlib.h>
#include <string.h>

static int dtype_from_st(int st)
{
	switch (st) {
	case ST_F32: return DT_F32;
	case ST_F16: return DT_F16;
	case ST_BF16: return DT_BF16;
	default: return -1;
	}
}

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

/* The file name relative to the weights directory, as the plan records it. */
static const char *rel_name(const StDir *d, const char *path)
{
	size_t n = strlen(d->dir);
	if (!strncmp(path, d->dir, n) && path[n] == '/')
		return path + n + 1;
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

int bind_weights(Graph *g, const StDir *d, int strict, FILE *warn, char *err, size_t len)
{
	char *used = calloc((size_t)d->ntensor + 1, 1);
	char b1[128], b2[128], at[256];
	if (!used)
		return seterr(err, len, "out of memory");
	for (int i = 0; i < g->nw; i++) {
		WeightRef *w = &g->w[i];
		Node *n = &g->node[w->node];
		snprintf(at, sizeof at, "%s:%d: ", n->src ? n->src : "?", n->line);
		const StTensor *t = st_find(d, w->source);
		if (!t) {
			free(used);
			if (strcmp(w->source, n->name))
				return seterr(err, len, "%sparameter '%s': tensor '%s' not found in %s", at, n->name, w->source,
				              d->dir);
			return seterr(err, len, "%sparameter '%s' not found in %s", at, n->name, d->dir);
		}
		int dt = dtype_from_st(t->dtype);
		if (dt < 0) {
			free(used);
			return seterr(err, len, "%s%s: tensor '%s' has dtype %s, which glmc cannot use for '%s' (F32, F16, BF16)",
			              at, d->files[t->file].path, t->name, st_type_name(t->dtype), n->name);
		}
		int same = t->ndim == n->ndim;
		for (int k = 0; same && k < n->ndim; k++)
			same = t->shape[k] == n->dim[k];
		if (!same) {
			free(used);
			return seterr(err, len, "%sparameter '%s': tensor '%s' in %s has shape %s, the model expects %s", at,
			              n->name, t->name, d->files[t->file].path, dims_str(t->ndim, t->shape, b1, sizeof b1),
			              dims_str(n->ndim, n->dim, b2, sizeof b2));
		}
		used[t - d->t] = 1;
		n->dtype = dt;
		w->dtype = dt;
		w->file = arena_strdup(g->A, rel_name(d, d->files[t->file].path));
		w->offset = t->off;
		w->nbytes = t->nbytes;
	}
	int unused = 0;
	for (int i = 0; i < d->ntensor; i++)
		if (!used[i]) {
			if (!unused && strict) {
				seterr(err, len, "%s: tensor '%s' is not used by the model (--strict)", d->dir, d->t[i].name);
				free(used);
				return -1;
			}
			if (warn)
				fprintf(warn, "glmc: warning: %s: tensor '%s' is not used by the model\n", d->dir, d->t[i].name);
			unused++;
		}
	free(used);
	return 0;
}
