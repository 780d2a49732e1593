/*
** compiler/passes/bind.c — bind every declared parameter to a checkpoint tensor by name, checking shape and
** type. A wrong binding computes fluent garbage, so nothing here is lenient: a missing tensor, a shape
** that differs or a type glmc cannot read is an error naming the tensor and the model line that
** declared it; checkpoint tensors the model never uses are listed. A parameter may be a row slot of a
** merged tensor (row0), addressed by index, never by file order.
*/
#include "passes.h"
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

/* An integer hyperparameter of the config.json behind --random-weights (the first key present), else def. */
static int64_t cfg_int(const Weights *wt, const char *const *keys, int64_t def)
{
	for (; *keys; keys++) {
		json_t *v = wt->st.config ? json_object_get(wt->st.config, *keys) : NULL;
		if (json_is_integer(v))
			return (int64_t)json_integer_value(v);
	}
	return def;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between. */
static int q4km_more_bits(int i, int n)
{
	return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/*
** The type llama.cpp's Q4_K_M mix (llama-quant.cpp, llama_tensor_get_type_impl) gives a matrix, by its
** GGUF name, so random plans read the bytes a real Q4_K_M file holds: Q4_K by default; Q6_K for the
** output head (and a tied embedding), for every ffn_down (dense, shared or routed experts) of a layer
** where use_more_bits(layer, n_layer) holds, and for the wv-th of nwv attn_v-like tensors (attn_v,
** attn_qkv, attn_kv_b) where use_more_bits(wv, nwv) holds; models with exactly 8 experts take Q8_0 for
** attn_v/attn_k and Q5_K for attn_output. The router (ffn_gate_inp) stays F32 as the converters write it.
** Not reproduced: the 70B-only attn_v bump and Falcon's rules.
*/
static int q4km_type(const char *name, int layer, int n_layer, int wv, int nwv, int64_t n_expert, int tied)
{
	if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight")))
		return QT_Q6_K;
	if (strstr(name, "ffn_gate_inp.weight"))
		return QT_F32;
	if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight") || strstr(name, "attn_kv_b.weight"))
		return n_expert == 8 ? QT_Q8_0 : q4km_more_bits(wv, nwv) ? QT_Q6_K : QT_Q4_K;
	if (strstr(name, "attn_k.weight") && n_expert == 8)
		return QT_Q8_0;
	if (strstr(name, "attn_output.weight") && n_expert == 8)
		return QT_Q5_K;
	if (strstr(name, "ffn_down") && layer >= 0 && q4km_more_bits(layer, n_layer))
		return QT_Q6_K;
	return QT_Q4_K;
}

/* The iq_dyn mix (issue 48's "dynamic" GGUFs of GLM-5 and DeepSeek: most bytes in the routed experts at 1-2
** bits, the rest kept wide): routed experts' gate and up IQ1_M, down IQ2_XXS; shared expert and dense FFN
** Q4_K; attention Q6_K but attn_output Q8_0; output Q6_K; embedding Q4_K; the router F32. */
static int dyn_type(const char *name)
{
	if (strstr(name, "ffn_gate_inp.weight"))
		return QT_F32;
	if (strstr(name, "_exps.weight"))
		return strstr(name, "ffn_down") ? QT_IQ2_XXS : QT_IQ1_M;
	if (strstr(name, "attn_output.weight"))
		return QT_Q8_0;
	if (strstr(name, "attn_") || !strcmp(name, "output.weight"))
		return QT_Q6_K;
	return QT_Q4_K;
}

/* A type whose blocks do not fit a row of `cols`: llama.cpp's fallback (Q4_K -> Q5_0, Q5_K -> Q5_1,
** Q6_K -> Q8_0, then F16); other types fall back to BF16 as before. */
static int row_fallback(int q, int64_t cols, int mix)
{
	if (quant_row_bytes(q, cols))
		return q;
	if (!mix)
		return QT_BF16;
	q = q == QT_Q4_K ? QT_Q5_0 : q == QT_Q5_K ? QT_Q5_1 : q == QT_Q6_K ? QT_Q8_0 : q;
	return quant_row_bytes(q, cols) ? q : QT_F16;
}

/* "blk.12.ffn_down_exps.weight" -> 12; -1 outside a layer. */
static int name_layer(const char *name)
{
	int l;
	return sscanf(name, "blk.%d.", &l) == 1 ? l : -1;
}

/* --random-weights: every parameter becomes a random tensor of its declared shape; matrices take the
** requested type where their rows are whole blocks, else BF16; vectors are F32. The q4_k_m mix picks
** each matrix's type as llama.cpp's Q4_K_M does, counting layers over the whole model (a --layers slice
** gets the types of the first layers of the full file: n_layer is num_hidden_layers plus the MTP layers,
** as in llama.cpp's block_count). */
static void bind_random(Graph *g, const Weights *wt)
{
	int mix = wt->random_qtype == WQ_MIX_Q4_K_M || wt->random_qtype == WQ_MIX_IQ_DYN, graph_layers = 0, nwv = 0, wv = 0,
	    tied = 1;
	static const char *const k_layers[] = {"num_hidden_layers", NULL}, *const k_nextn[] = {"num_nextn_predict_layers", NULL},
	                         *const k_expert[] = {"n_routed_experts", "num_experts", "num_local_experts", NULL};
	for (int i = 0; i < g->nw; i++) {
		const char *nm = g->node[g->w[i].node].name;
		int l = name_layer(nm);
		if (l + 1 > graph_layers)
			graph_layers = l + 1;
		nwv += strstr(nm, "attn_v.weight") || strstr(nm, "attn_qkv.weight") || strstr(nm, "attn_kv_b.weight");
		tied &= strcmp(nm, "output.weight") != 0;
	}
	int64_t n_layer = cfg_int(wt, k_layers, graph_layers) + cfg_int(wt, k_nextn, 0);
	if (n_layer < graph_layers)
		n_layer = graph_layers;
	if (graph_layers > 0 && n_layer > graph_layers) /* the attn_v count of the whole file, not of the slice */
		nwv = (int)(nwv * n_layer / graph_layers);
	int64_t n_expert = cfg_int(wt, k_expert, 0);
	for (int i = 0; i < g->nw; i++) {
		WeightRef *w = &g->w[i];
		Node *n = &g->node[w->node];
		int64_t cols = n->dim[n->ndim - 1], rows = node_numel(n, 0, 0) / cols;
		int q = wt->random_qtype;
		if (wt->random_qtype == WQ_MIX_IQ_DYN)
			q = dyn_type(n->name);
		else if (mix) {
			int isv = strstr(n->name, "attn_v.weight") || strstr(n->name, "attn_qkv.weight") ||
			          strstr(n->name, "attn_kv_b.weight");
			q = q4km_type(n->name, name_layer(n->name), (int)n_layer, wv, nwv, n_expert, tied);
			wv += isv;
		}
		q = n->ndim == 1 ? QT_F32 : row_fallback(q, cols, mix);
		w->qtype = q;
		n->dtype = w->dtype = weights_dtype(q);
		w->file = "(random)";
		w->offset = 0;
		w->nbytes = quant_row_bytes(q, cols) * (uint64_t)rows;
		w->parts = 0, w->rstride = 0, w->roff = 0, w->row0 = 0, w->slot_rows = 0, w->unpermute = 0;
	}
}

/* Whether a tensor lies in a layer the model declared knowingly unused (plan meta weights.known_unused:
** name prefixes separated by spaces, models/lib/nn.lua's nn.unused_layers), such as MTP layers. */
static int known_unused(const Graph *g, const char *name)
{
	const char *list = graph_meta(g, "weights.known_unused");
	for (const char *p = list; p && *p;) {
		size_t n = strcspn(p, " ");
		if (n && !strncmp(name, p, n))
			return 1;
		p += n + (p[n] == ' ');
	}
	return 0;
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
		char nb[1024];
		weights_get(wt, i, &t);
		if (known_unused(g, t.name))
			continue;
		if (strict) {
			rc = seterr(err, len, "%s: tensor '%s' is not used by the model (--strict)", wt->path, t.name);
			break;
		}
		if (warn)
			fprintf(warn, "glmc: warning: %s: tensor '%s' is not used by the model\n", wt->path,
			        esc_ctl(t.name, nb, sizeof nb));
	}
	free(used);
	return rc;
}
