/*
** runtime/weights.c — checkpoints of either format behind one interface (see weights.h).
*/
#include "weights.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <sys/stat.h>

int weights_open_random(Weights *w, const char *config, int random_qtype, char *err, size_t len)
{
	memset(w, 0, sizeof *w);
	w->path = config;
	w->format = WF_HF;
	w->random_qtype = random_qtype;
	json_error_t je;
	w->st.config = json_load_file(config, JSON_REJECT_DUPLICATES, &je);
	if (!w->st.config)
		return seterr(err, len, "%s:%d: %s", config, je.line, je.text);
	if (!json_is_object(w->st.config)) {
		json_decref(w->st.config);
		w->st.config = NULL;
		return seterr(err, len, "%s: not a JSON object of hyperparameters", config);
	}
	return 0;
}

/* splitmix64: a counter-based generator, so a parameter's values depend only on its name and index. */
static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

void weights_random_f32(const Graph *g, const WeightRef *r, float *dst)
{
	const Node *n = &g->node[r->node];
	uint64_t seed = 1469598103934665603ULL;
	for (const char *p = n->name; *p; p++)
		seed = (seed ^ (unsigned char)*p) * 1099511628211ULL;
	int64_t cols = n->dim[n->ndim - 1], cnt = node_numel(n, 0, 0);
	float a = n->ndim == 1 ? 0.1f : 1.0f / sqrtf((float)cols);
	for (int64_t i = 0; i < cnt; i++) {
		float u = (float)((mix64(seed + (uint64_t)i) >> 40) * (1.0 / 16777216.0)) * 2 - 1;
		dst[i] = (n->ndim == 1 ? 1.0f : 0.0f) + a * u;
	}
}

int weights_open(Weights *w, const char *path, char *err, size_t len)
{
	memset(w, 0, sizeof *w);
	w->path = path;
	w->random_qtype = -1;
	struct stat sb;
	if (stat(path, &sb))
		return seterr(err, len, "%s: cannot open the weights: %m", path);
	if (S_ISDIR(sb.st_mode)) {
		w->format = WF_HF;
		if (st_open_dir(&w->st, path, err, len))
			return -1;
		w->ntensor = w->st.ntensor;
		return 0;
	}
	w->format = WF_GGUF;
	if (gguf_open(&w->gg, path, err, len))
		return -1;
	w->ntensor = w->gg.ntensor;
	return 0;
}

void weights_close(Weights *w)
{
	if (w->random_qtype >= 0) {
		json_decref(w->st.config);
		memset(w, 0, sizeof *w);
		return;
	}
	if (w->format == WF_HF)
		st_close(&w->st);
	else
		gguf_close(&w->gg);
	memset(w, 0, sizeof *w);
}

const char *weights_format_name(int format)
{
	return format == WF_GGUF ? "gguf" : "hf";
}

static int qtype_of_st(int dt)
{
	switch (dt) {
	case ST_F32: return QT_F32;
	case ST_F16: return QT_F16;
	case ST_BF16: return QT_BF16;
	case ST_I32: return QT_I32;
	case ST_F64: return QT_F64;
	case ST_I8: return QT_I8;
	case ST_F8_E4M3: return WQ_F8_E4M3;
	default: return -1;
	}
}

void weights_get(const Weights *w, int i, WTensor *t)
{
	memset(t, 0, sizeof *t);
	if (w->format == WF_HF) {
		const StTensor *s = &w->st.t[i];
		t->name = s->name;
		t->qtype = qtype_of_st(s->dtype);
		t->type_name = st_type_name(s->dtype);
		t->ndim = s->ndim > 4 ? 4 : s->ndim;
		for (int k = 0; k < t->ndim; k++)
			t->shape[k] = s->shape[k];
		if (s->ndim == 0)
			t->ndim = 1, t->shape[0] = 1;
		t->data = st_data(&w->st, s);
		t->nbytes = s->nbytes;
		t->file = w->st.files[s->file].path;
		t->off = s->off;
		return;
	}
	const GgufTensor *g = &w->gg.t[i];
	t->name = g->name;
	t->qtype = g->type;
	t->type_name = quant_type_name(g->type);
	t->ndim = gguf_torch_shape(g, t->shape);
	t->data = gguf_tensor_data(&w->gg, g);
	t->nbytes = g->nbytes;
	t->file = w->gg.files[g->file].path;
	t->off = g->off;
}

int weights_find(const Weights *w, const char *name, WTensor *t)
{
	int i = -1;
	if (w->format == WF_HF) {
		const StTensor *s = st_find(&w->st, name);
		i = s ? (int)(s - w->st.t) : -1;
	} else {
		const GgufTensor *g = gguf_find_tensor(&w->gg, name);
		i = g ? (int)(g - w->gg.t) : -1;
	}
	if (i >= 0 && t)
		weights_get(w, i, t);
	return i;
}

size_t weights_row_bytes(int qtype, int64_t n)
{
	return qtype == WQ_F8_E4M3 ? (n > 0 ? (size_t)n : 0) : quant_row_bytes(qtype, n);
}

/* E4M3: sign, 4 exponent bits (bias 7), 3 mantissa bits; no infinities, S.1111.111 is NaN. */
static float f8e4m3_to_f32(uint8_t b)
{
	int e = (b >> 3) & 15, m = b & 7;
	if (e == 15 && m == 7)
		return NAN;
	float v = e ? ldexpf(1.0f + (float)m / 8.0f, e - 7) : ldexpf((float)m, -9);
	return b & 0x80 ? -v : v;
}

/* The block-scale tensor of an FP8 weight: "x.weight" -> "x.weight_scale_inv". */
static int f8_scale(const Weights *w, const char *name, WTensor *s)
{
	char sn[512];
	snprintf(sn, sizeof sn, "%s_scale_inv", name);
	return weights_find(w, sn, s);
}

int weights_dtype(int qtype)
{
	if (qtype == WQ_F8_E4M3)
		return DT_Q;
	switch (qtype) {
	case QT_F32: return DT_F32;
	case QT_F16: return DT_F16;
	case QT_BF16: return DT_BF16;
	default: return qtype >= 0 && quant_supported(qtype) ? DT_Q : -1;
	}
}

/* Source row of destination row r: a slot starts at row0; llama-arch GGUF conversions store each head's
** q/k rows interleaved (pairs (2i, 2i+1)) where Hugging Face has halves (i, i + D/2), so destination
** row head·D + h·D/2 + i comes from source row head·D + 2i + h. */
static int64_t source_row(const WeightRef *r, const Node *n, int64_t rows, int64_t row)
{
	if (r->rstride > 0) {
		int64_t R = n->dim[n->ndim - 2];
		return row / R * r->rstride + r->roff + row % R;
	}
	if (r->unpermute > 0) {
		int64_t D = rows / r->unpermute, head = row / D, j = row % D, h = j / (D / 2), i = j % (D / 2);
		row = head * D + 2 * i + h;
	}
	return r->row0 + row;
}

/* A stacked weight: each part dequantized into its slice of dst. */
static int load_parts(const Weights *w, const Node *n, const WeightRef *r, float *dst, char *err, size_t len)
{
	size_t per = (size_t)(node_numel(n, 0, 0) / r->parts);
	char name[512];
	for (int p = 0; p < r->parts; p++) {
		WTensor t;
		snprintf(name, sizeof name, r->source, p);
		if (weights_find(w, name, &t) < 0 || t.qtype != r->qtype || t.nbytes != r->nbytes)
			return seterr(err, len, "%s: tensor '%s' (part %d of parameter '%s') is missing or changed since the plan "
			              "was compiled", w->path, name, p, n->name);
		if (quant_dequant(t.qtype, t.data, dst + p * per, per))
			return seterr(err, len, "%s: tensor '%s': cannot dequantize type %s", t.file, name, t.type_name);
	}
	return 0;
}

static int load_whole(const Weights *w, const Node *n, const WeightRef *r, float *dst, char *err, size_t len);

int weights_load_f32(const Weights *w, const Graph *g, const WeightRef *r, int rank, int tp, float *dst, char *err,
                     size_t len)
{
	const Node *n = &g->node[r->node];
	if (r->file && !strcmp(r->file, "(random)")) {
		/* The whole random tensor, then the rank's part (so every tp sees the same model). */
		Node whole = *n;
		if (r->split >= 0 && tp > 1)
			whole.dim[r->split] *= tp;
		Graph tmp = *g;
		Node *nodes = malloc(sizeof(Node) * (size_t)g->n);
		if (!nodes)
			return seterr(err, len, "out of memory");
		memcpy(nodes, g->node, sizeof(Node) * (size_t)g->n);
		nodes[r->node] = whole;
		tmp.node = nodes;
		size_t total = (size_t)node_numel(&whole, 0, 0);
		float *all = r->split >= 0 && tp > 1 ? malloc(total * sizeof(float)) : dst;
		if (!all)
			return free(nodes), seterr(err, len, "out of memory");
		weights_random_f32(&tmp, r, all);
		free(nodes);
		if (all != dst) {
			int ax = r->split;
			size_t outer = 1, inner = 1, part = (size_t)n->dim[ax];
			for (int i = 0; i < ax; i++)
				outer *= (size_t)n->dim[i];
			for (int i = ax + 1; i < n->ndim; i++)
				inner *= (size_t)n->dim[i];
			for (size_t o = 0; o < outer; o++)
				memcpy(dst + o * part * inner, all + (o * part * (size_t)tp + (size_t)rank * part) * inner,
				       part * inner * sizeof(float));
			free(all);
		}
		return 0;
	}
	if (r->split < 0 || tp <= 1)
		return load_whole(w, n, r, dst, err, len);
	/* The whole tensor, then this rank's block along the split axis. */
	Node whole = *n;
	int ax = r->split;
	whole.dim[ax] *= tp;
	size_t total = (size_t)node_numel(&whole, 0, 0);
	float *all = malloc(total * sizeof(float));
	if (!all)
		return seterr(err, len, "out of memory loading '%s' (%zu values)", r->source, total);
	int rc = load_whole(w, &whole, r, all, err, len);
	if (!rc) {
		size_t outer = 1, inner = 1, part = (size_t)n->dim[ax];
		for (int i = 0; i < ax; i++)
			outer *= (size_t)n->dim[i];
		for (int i = ax + 1; i < n->ndim; i++)
			inner *= (size_t)n->dim[i];
		for (size_t o = 0; o < outer; o++)
			memcpy(dst + o * part * inner, all + (o * part * (size_t)tp + (size_t)rank * part) * inner,
			       part * inner * sizeof(float));
	}
	free(all);
	return rc;
}

/* Load the whole (unsplit) weight n describes. */
static int load_whole(const Weights *w, const Node *n, const WeightRef *r, float *dst, char *err, size_t len)
{
	if (r->parts)
		return load_parts(w, n, r, dst, err, len);
	WTensor t;
	if (weights_find(w, r->source, &t) < 0)
		return seterr(err, len, "%s: tensor '%s' (parameter '%s') is missing; the weights changed since the plan "
		              "was compiled", w->path, r->source, n->name);
	if (t.qtype != r->qtype || t.nbytes != r->nbytes)
		return seterr(err, len, "%s: tensor '%s' is %s with %llu bytes, the plan expects %s with %llu; recompile "
		              "the plan", t.file, r->source, t.type_name, (unsigned long long)t.nbytes,
		              quant_type_name(r->qtype), (unsigned long long)r->nbytes);
	int64_t cols = n->dim[n->ndim - 1], rows = node_numel(n, 0, 0) / cols;
	size_t rb = weights_row_bytes(t.qtype, cols);
	int64_t src_rows = rb ? (int64_t)(t.nbytes / rb) : 0;
	if (!rb || r->row0 < 0 || (!r->rstride && r->row0 + rows > src_rows) ||
	    (r->rstride && (rows / n->dim[n->ndim - 2]) * r->rstride > src_rows))
		return seterr(err, len, "%s: tensor '%s' has %lld rows of %lld, the plan reads rows [%lld, %lld)", t.file,
		              r->source, (long long)src_rows, (long long)cols, (long long)r->row0,
		              (long long)(r->row0 + rows));
	if (r->unpermute > 0 && (rows % r->unpermute || (rows / r->unpermute) % 2))
		return seterr(err, len, "%s: tensor '%s': %lld rows do not split into %d heads of even size", t.file,
		              r->source, (long long)rows, r->unpermute);
	const unsigned char *src = t.data;
	if (t.qtype == WQ_F8_E4M3) {
		WTensor sc;
		int64_t rb128 = (src_rows + 127) / 128, cb128 = (cols + 127) / 128;
		if (f8_scale(w, r->source, &sc) < 0 || sc.qtype != QT_F32 || sc.nbytes != (uint64_t)(rb128 * cb128 * 4))
			return seterr(err, len, "%s: FP8 tensor '%s' needs '%s_scale_inv', F32 [%lld, %lld] (one scale per "
			              "128x128 block)", t.file, r->source, r->source, (long long)rb128, (long long)cb128);
		const float *scale = sc.data;
		for (int64_t row = 0; row < rows; row++) {
			int64_t sr = source_row(r, n, rows, row);
			for (int64_t c = 0; c < cols; c++)
				dst[row * cols + c] = f8e4m3_to_f32(src[sr * cols + c]) * scale[(sr / 128) * cb128 + c / 128];
		}
		return 0;
	}
	for (int64_t row = 0; row < rows; row++)
		if (quant_dequant(t.qtype, src + (size_t)source_row(r, n, rows, row) * rb, dst + row * cols, (size_t)cols))
			return seterr(err, len, "%s: tensor '%s': cannot dequantize type %s", t.file, r->source, t.type_name);
	return 0;
}

int weights_slice(const WTensor *t, int axis, int rank, int n, WRange *out, int cap, char *err, size_t len)
{
	int64_t cols = t->shape[t->ndim - 1], rows = 1;
	for (int i = 0; i < t->ndim - 1; i++)
		rows *= t->shape[i];
	size_t rb = weights_row_bytes(t->qtype, cols);
	if (!rb)
		return seterr(err, len, "tensor '%s': type %s rows of %lld cannot be sliced", t->name, t->type_name,
		              (long long)cols);
	if (n < 1 || rank < 0 || rank >= n)
		return seterr(err, len, "tensor '%s': rank %d of %d", t->name, rank, n);
	if (axis == 0) {
		if (rows % n)
			return seterr(err, len, "tensor '%s': %lld rows do not split into %d equal parts", t->name,
			              (long long)rows, n);
		if (cap < 1)
			return seterr(err, len, "slice: no room for ranges");
		out[0] = (WRange){(uint64_t)(rows / n * rank) * rb, (uint64_t)(rows / n) * rb};
		return 1;
	}
	int64_t part = cols / n, blck = t->qtype == WQ_F8_E4M3 ? 128 : quant_block_size(t->qtype);
	if (cols % n || part % blck)
		return seterr(err, len, "tensor '%s': splitting %lld columns %d ways would cut a %s block of %lld values",
		              t->name, (long long)cols, n, t->type_name, (long long)blck);
	if (rows > cap)
		return seterr(err, len, "slice: %lld ranges needed, room for %d", (long long)rows, cap);
	size_t pb = weights_row_bytes(t->qtype, part);
	for (int64_t r = 0; r < rows; r++)
		out[r] = (WRange){(uint64_t)r * rb + (uint64_t)rank * pb, pb};
	return (int)rows;
}
