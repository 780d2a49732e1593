/*
** runtime/formats/weights.c — checkpoints of either format behind one interface (see weights.h).
*/
#include "weights.h"
#include "rfile.h"
#include "quant.h"
#include "qrand.h"
#include "ref.h"

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
	w->st.config = rfile_json(config, JSON_REJECT_DUPLICATES, &je);
	char ln[32];
	if (!w->st.config)
		return seterr(err, len, "%s: %s%s", config, rfile_line(&je, ln, sizeof ln), je.text);
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

uint64_t weights_random_seed(const char *name)
{
	uint64_t seed = 1469598103934665603ULL;
	for (const char *p = name; *p; p++)
		seed = (seed ^ (unsigned char)*p) * 1099511628211ULL;
	return seed;
}

void weights_random_f32(const Graph *g, const WeightRef *r, float *dst)
{
	const Node *n = &g->node[r->node];
	uint64_t seed = weights_random_seed(n->name);
	int64_t cols = n->dim[n->ndim - 1], cnt = node_numel(n, 0, 0);
	float a = n->ndim == 1 ? 0.1f : 1.0f / sqrtf((float)cols);
	for (int64_t i = 0; i < cnt; i++) {
		float u = (float)((mix64(seed + (uint64_t)i) >> 40) * (1.0 / 16777216.0)) * 2 - 1;
		dst[i] = (n->ndim == 1 ? 1.0f : 0.0f) + a * u;
	}
}

static int random_general(int qtype);

int weights_random_type_ok(int qtype)
{
	switch (qtype) {
	case QT_F32: case QT_F16: case QT_BF16: case QT_Q8_0: case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: return 1;
	default: return random_general(qtype);
	}
}

/* The block types whose scale fields ops/qrand.h knows (every one the GPU reads but Q8_0 and the K-quants). */
static int random_general(int qtype)
{
	switch (qtype) {
	case QT_Q4_0: case QT_Q4_1: case QT_Q5_0: case QT_Q5_1: case QT_Q2_K: case QT_Q3_K: case QT_IQ2_XXS: case QT_IQ2_XS:
	case QT_IQ3_XXS: case QT_IQ1_S: case QT_IQ4_NL: case QT_IQ3_S: case QT_IQ2_S: case QT_IQ4_XS: case QT_IQ1_M:
	case QT_TQ1_0: case QT_TQ2_0: case QT_MXFP4: case QT_NVFP4: return 1;
	default: return 0;
	}
}

/* Bits of a positive half in [2^E, 2^(E+1)) whose mantissa is h's low 10 bits (a subnormal below 2^-14,
** E clamped to [-24, 15]), from integer operations only, so the GPU makes the same bits. */
static unsigned random_f16(uint64_t h, int E)
{
	unsigned m = (unsigned)(h & 0x3ff);
	E = E < -24 ? -24 : E > 15 ? 15 : E;
	return E >= -14 ? (unsigned)(E + 15) << 10 | m : (0x400u | m) >> (-14 - E);
}

/*
** Byte g of a random block tensor: hash bytes, except the f16 scale fields (Q8_0 d; Q4_K/Q5_K d and dmin;
** Q6_K d), which are random halves of a size that makes the dequantized values about 1/sqrt(K) in size
** (K rounded to a power of 4 first): 2^ea with ea = -ceil(floor(log2 K)/2), times a per-type factor for
** the spread of its quants (Q8_0 2^-8: |q| up to 128; Q4_K 2^-9 and dmin 2^-6, about 7.5 times d to
** centre q·sc around m; Q5_K 2^-10 and 2^-6; Q6_K 2^-12 with signed 8-bit scales); the other block
** types' fields are ops/qrand.h's, from the same hashes (d from field 0's, a minimum from field 1's).
*/
uint8_t weights_random_byte(int qtype, uint64_t seed, int64_t K, uint64_t g)
{
	uint64_t B = quant_block_bytes(qtype), blk = g / B;
	int o = (int)(g - blk * B), field = -1, E = 0, lk = 0;
	for (int64_t k = K > 0 ? K : 1; k > 1; k >>= 1)
		lk++;
	int ea = -((lk + 1) >> 1);
	if (random_general(qtype))
		return (uint8_t)qrand_general(qtype, o, ea, (unsigned)(mix64(seed + g / 8) >> (8 * (g % 8))) & 0xffu,
		                              mix64(~seed + blk * 2), mix64(~seed + blk * 2 + 1));
	if (qtype == QT_Q8_0 && o < 2)
		field = 0, E = ea - 8;
	if ((qtype == QT_Q4_K || qtype == QT_Q5_K) && o < 4)
		field = o >> 1, E = ea - (field ? 6 : qtype == QT_Q4_K ? 9 : 10);
	if (qtype == QT_Q6_K && o >= 208)
		field = 0, E = ea - 12;
	if (field < 0)
		return (uint8_t)(mix64(seed + g / 8) >> (8 * (g % 8)));
	unsigned bits = random_f16(mix64(~seed + blk * 2 + (uint64_t)field), E);
	return (uint8_t)((qtype == QT_Q6_K ? o - 208 : o & 1) ? bits >> 8 : bits & 0xff);
}

/* The whole random tensor w describes (n with its split axis restored) as float32: dequantized random
** blocks for block types, else the float generator rounded to the stored type. */
static int random_whole(const Graph *g, const Node *whole, const WeightRef *r, float *all, char *err, size_t len)
{
	if (r->qtype == QT_Q8_0 || r->qtype == QT_Q4_K || r->qtype == QT_Q5_K || r->qtype == QT_Q6_K || random_general(r->qtype)) {
		int64_t K = whole->dim[whole->ndim - 1], rows = node_numel(whole, 0, 0) / K;
		size_t rb = quant_row_bytes(r->qtype, K);
		uint8_t *row = malloc(rb ? rb : 1);
		if (!rb || !row)
			return free(row), seterr(err, len, "random weight '%s': rows of %lld values are not whole %s blocks",
			                         whole->name, (long long)K, quant_type_name(r->qtype));
		uint64_t seed = weights_random_seed(whole->name);
		for (int64_t i = 0; i < rows; i++) {
			for (size_t b = 0; b < rb; b++)
				row[b] = weights_random_byte(r->qtype, seed, K, (uint64_t)i * rb + b);
			quant_dequant(r->qtype, row, all + i * K, (size_t)K);
		}
		free(row);
		return 0;
	}
	if (r->qtype != QT_F32 && r->qtype != QT_F16 && r->qtype != QT_BF16)
		return seterr(err, len, "random weight '%s': type %s cannot be generated (f32, f16, bf16, q8_0, q4_k, "
		              "q5_k, q6_k)", whole->name, quant_type_name(r->qtype));
	Graph tmp = *g;
	Node *nodes = malloc(sizeof(Node) * (size_t)g->n);
	if (!nodes)
		return seterr(err, len, "out of memory");
	memcpy(nodes, g->node, sizeof(Node) * (size_t)g->n);
	nodes[r->node] = *whole;
	tmp.node = nodes;
	weights_random_f32(&tmp, r, all);
	free(nodes);
	/* the weight is stored as F16/BF16: these are its values (the GPU rounds them the same way) */
	size_t total = (size_t)node_numel(whole, 0, 0);
	for (size_t i = 0; r->qtype != QT_F32 && i < total; i++)
		all[i] = r->qtype == QT_BF16 ? ref_bf16_to_f32(ref_f32_to_bf16(all[i])) : ref_f16_to_f32(ref_f32_to_f16(all[i]));
	return 0;
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
		size_t total = (size_t)node_numel(&whole, 0, 0);
		float *all = r->split >= 0 && tp > 1 ? malloc(total * sizeof(float)) : dst;
		if (!all)
			return seterr(err, len, "out of memory");
		if (random_whole(g, &whole, r, all, err, len)) {
			if (all != dst)
				free(all);
			return -1;
		}
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

/* One stacked part's tensor, checked against the plan like load_parts does. */
static int raw_part(const Weights *w, const WeightRef *r, const Node *n, int p, WTensor *t, char *err, size_t len)
{
	char name[512];
	snprintf(name, sizeof name, r->source, p);
	if (weights_find(w, name, t) < 0 || t->qtype != r->qtype || t->nbytes != r->nbytes)
		return seterr(err, len, "%s: tensor '%s' (part %d of parameter '%s') is missing or changed since the plan "
		              "was compiled", w->path, name, p, n->name);
	return 0;
}

int weights_load_raw(const Weights *w, const Graph *g, const WeightRef *r, int rank, int tp, int64_t r0, int64_t nr,
                     uint8_t *dst, size_t stride, char *err, size_t len)
{
	const Node *n = &g->node[r->node];
	int last = n->ndim - 1, ax = r->split, split = ax >= 0 && tp > 1;
	Node whole = *n;
	if (split)
		whole.dim[ax] *= tp;
	int64_t cols = n->dim[last], rows = node_numel(n, 0, 0) / cols, wcols = whole.dim[last];
	int64_t wrows = node_numel(&whole, 0, 0) / wcols;
	size_t lrb = weights_row_bytes(r->qtype, cols), wrb = weights_row_bytes(r->qtype, wcols);
	if (r->qtype == WQ_F8_E4M3 || !lrb || !wrb || stride < lrb || r0 < 0 || nr < 0 || r0 + nr > rows)
		return seterr(err, len, "'%s': rows [%lld, %lld) of %lld values cannot be read as whole %s blocks", r->source,
		              (long long)r0, (long long)(r0 + nr), (long long)cols, quant_type_name(r->qtype));
	/* rank's rows of a split leading axis: local row i = (o, p, in) over (outer, part, inner) */
	int64_t part = rows, inner = 1, tpr = 1, rk = 0;
	if (split && ax < last) {
		part = n->dim[ax], tpr = tp, rk = rank;
		for (int i = ax + 1; i < last; i++)
			inner *= n->dim[i];
	}
	size_t coloff = split && ax == last ? (size_t)rank * lrb : 0;
	WTensor t = {0};
	int64_t src_rows = 0, cur = -1, rpp = r->parts ? wrows / r->parts : 0;
	if (!r->parts) {
		if (weights_find(w, r->source, &t) < 0)
			return seterr(err, len, "%s: tensor '%s' (parameter '%s') is missing; the weights changed since the plan "
			              "was compiled", w->path, r->source, n->name);
		if (t.qtype != r->qtype || t.nbytes != r->nbytes)
			return seterr(err, len, "%s: tensor '%s' is %s with %llu bytes, the plan expects %s with %llu; recompile "
			              "the plan", t.file, r->source, t.type_name, (unsigned long long)t.nbytes,
			              quant_type_name(r->qtype), (unsigned long long)r->nbytes);
		src_rows = (int64_t)(t.nbytes / wrb);
	}
	for (int64_t i = 0; i < nr; i++) {
		int64_t lr = r0 + i, pi = part * inner, o = lr / pi, rem = lr - o * pi, p = rem / inner;
		int64_t wr = ((o * tpr + rk) * part + p) * inner + (rem - p * inner);
		const uint8_t *src;
		if (r->parts) {
			if (wr / rpp != cur && raw_part(w, r, n, (int)(cur = wr / rpp), &t, err, len))
				return -1;
			src = (const uint8_t *)t.data + (size_t)(wr % rpp) * wrb;
		} else {
			int64_t sr = source_row(r, &whole, wrows, wr);
			if (sr < 0 || sr >= src_rows)
				return seterr(err, len, "%s: tensor '%s' has %lld rows, the plan reads row %lld", t.file, r->source,
				              (long long)src_rows, (long long)sr);
			src = (const uint8_t *)t.data + (size_t)sr * wrb;
		}
		memcpy(dst + (size_t)i * stride, src + coloff, lrb);
		memset(dst + (size_t)i * stride + lrb, 0, stride - lrb);
	}
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
