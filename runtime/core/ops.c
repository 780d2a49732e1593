/*
** runtime/core/ops.c — the operator table: for every op its attribute names, its shape rule and its float32
** CPU reference execution (which calls the kernels in ref.c). Adding an op means one enum entry in
** glm.h, one shape rule and one cpu function here, and a row in op_table.
**
** Conventions: activations are float32; token ids, positions and indices are int32. Dims may be the
** symbols T (tokens in the step) or S (cache capacity); shape rules treat them as opaque extents that
** must match exactly.
*/
#include "glm.h"
#include "par.h"
#include "ref.h"

#include <math.h>
#include <string.h>

#define IN(n, i) (&g->node[(n)->in[i]])

static int same_shape(const Node *a, const Node *b)
{
	if (a->ndim != b->ndim)
		return 0;
	for (int i = 0; i < a->ndim; i++)
		if (a->dim[i] != b->dim[i])
			return 0;
	return 1;
}

static int is_float(const Node *n)
{
	return n->dtype == DT_F32 || n->dtype == DT_F16 || n->dtype == DT_BF16 || n->dtype == DT_Q;
}

static void set_shape(Node *n, int dtype, int ndim, const int64_t *dim)
{
	n->dtype = dtype;
	n->ndim = ndim;
	for (int i = 0; i < MAXDIM; i++)
		n->dim[i] = i < ndim ? dim[i] : 0;
}

/* Shape text for messages; each call site passes its own buffer. */
#define SS(n, b) shape_str((n), (b), sizeof(b))

/* Every input must be a float tensor; name the op and the offending operand otherwise. */
static int need_float(const Graph *g, const Node *n, int i, char *err, size_t len)
{
	char b[96];
	if (!is_float(IN(n, i)))
		return seterr(err, len, "%s: operand %d is %s, expected a float tensor", op_table[n->op].name, i + 1,
		              SS(IN(n, i), b));
	return 0;
}

static int need_i32(const Graph *g, const Node *n, int i, char *err, size_t len)
{
	char b[96];
	if (IN(n, i)->dtype != DT_I32)
		return seterr(err, len, "%s: operand %d is %s, expected int32 ids/positions", op_table[n->op].name,
		              i + 1, SS(IN(n, i), b));
	return 0;
}

/* Leaves (inputs, parameters, caches) carry their declared shape; check it is well formed. */
static int shape_leaf(const Graph *g, Node *n, char *err, size_t len)
{
	(void)g;
	if (n->ndim < 1 || n->ndim > MAXDIM)
		return seterr(err, len, "%s '%s': %d dims (1..%d allowed)", op_table[n->op].name, n->name, n->ndim,
		              MAXDIM);
	for (int i = 0; i < n->ndim; i++) {
		int64_t d = n->dim[i];
		int symbolic_ok = (n->op == OP_INPUT && d == DIM_T) || (n->op == OP_CACHE && i == 0 && d == DIM_S);
		if (d <= 0 && !symbolic_ok)
			return seterr(err, len, "%s '%s': dim %d is %lld, must be positive", op_table[n->op].name, n->name,
			              i + 1, (long long)d);
		if (d > ((int64_t)1 << 40))
			return seterr(err, len, "%s '%s': dim %d is %lld, too large", op_table[n->op].name, n->name, i + 1,
			              (long long)d);
	}
	if (n->op == OP_CACHE && n->dim[0] != DIM_S)
		return seterr(err, len, "cache '%s': first dim must be S (positions)", n->name);
	return 0;
}

/* embedding(table[V,C], ids[...]) -> [..., C] */
static int shape_embedding(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *t = IN(n, 0), *ids = IN(n, 1);
	char b[96];
	if (need_float(g, n, 0, err, len) || need_i32(g, n, 1, err, len))
		return -1;
	if (t->ndim != 2)
		return seterr(err, len, "embedding: table is %s, expected [vocab, channels]", SS(t, b));
	if (ids->ndim + 1 > MAXDIM)
		return seterr(err, len, "embedding: ids have too many dims");
	int64_t d[MAXDIM];
	memcpy(d, ids->dim, sizeof(int64_t) * (size_t)ids->ndim);
	d[ids->ndim] = t->dim[1];
	set_shape(n, DT_F32, ids->ndim + 1, d);
	return 0;
}

/* linear(x[..., K], w[N, K], bias[N]?) -> [..., N] */
static int shape_linear(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0), *w = IN(n, 1);
	char b1[96], b2[96];
	for (int i = 0; i < n->nin; i++)
		if (need_float(g, n, i, err, len))
			return -1;
	if (w->ndim != 2)
		return seterr(err, len, "linear: weight is %s, expected [out_features, in_features]", SS(w, b1));
	if (x->dim[x->ndim - 1] != w->dim[1])
		return seterr(err, len, "linear: input %s has %lld features but weight %s takes %lld", SS(x, b1),
		              (long long)x->dim[x->ndim - 1], SS(w, b2), (long long)w->dim[1]);
	if (n->nin == 3) {
		const Node *bias = IN(n, 2);
		if (bias->ndim != 1 || bias->dim[0] != w->dim[0])
			return seterr(err, len, "linear: bias is %s, expected [%lld] to match weight %s", SS(bias, b1),
			              (long long)w->dim[0], SS(w, b2));
	}
	int64_t d[MAXDIM];
	memcpy(d, x->dim, sizeof d);
	d[x->ndim - 1] = w->dim[0];
	set_shape(n, DT_F32, x->ndim, d);
	return 0;
}

/* matmul(a[B?, M, K], b[B?, K, N]) -> [B?, M, N] */
static int shape_matmul(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *a = IN(n, 0), *b = IN(n, 1);
	char b1[96], b2[96];
	if (need_float(g, n, 0, err, len) || need_float(g, n, 1, err, len))
		return -1;
	int tb = A_matmul_transpose_b(n) != 0, kb = b->ndim - (tb ? 1 : 2), nb = b->ndim - (tb ? 2 : 1);
	int ok = a->ndim == b->ndim && (a->ndim == 2 || a->ndim == 3) && a->dim[a->ndim - 1] == b->dim[kb] &&
	         (a->ndim == 2 || a->dim[0] == b->dim[0]);
	if (!ok)
		return seterr(err, len, "matmul: cannot multiply %s by %s%s (need [M,K]·[K,N] or [B,M,K]·[B,K,N]%s)",
		              SS(a, b1), SS(b, b2), tb ? " transposed" : "", tb ? ", the second given as [B,N,K]" : "");
	int64_t d[MAXDIM];
	memcpy(d, a->dim, sizeof d);
	d[a->ndim - 1] = b->dim[nb];
	set_shape(n, DT_F32, a->ndim, d);
	return 0;
}

/* Binary element-wise ops: b is a's shape or a trailing part of it (broadcast over leading dims). */
static int shape_binary(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *a = IN(n, 0), *b = IN(n, 1);
	char b1[96], b2[96];
	if (need_float(g, n, 0, err, len) || need_float(g, n, 1, err, len))
		return -1;
	int ok = b->ndim <= a->ndim;
	for (int i = 0; ok && i < b->ndim; i++)
		ok = b->dim[b->ndim - 1 - i] == a->dim[a->ndim - 1 - i];
	if (!ok)
		return seterr(err, len, "%s: shapes %s and %s do not match (the second must equal the first or its "
		              "trailing dims)", op_table[n->op].name, SS(a, b1), SS(b, b2));
	set_shape(n, DT_F32, a->ndim, a->dim);
	return 0;
}

/* Unary element-wise and row-wise ops keep the shape. */
static int shape_unary(const Graph *g, Node *n, char *err, size_t len)
{
	if (need_float(g, n, 0, err, len))
		return -1;
	set_shape(n, DT_F32, IN(n, 0)->ndim, IN(n, 0)->dim);
	return 0;
}

static int shape_swiglu(const Graph *g, Node *n, char *err, size_t len)
{
	char b1[96], b2[96];
	if (need_float(g, n, 0, err, len) || need_float(g, n, 1, err, len))
		return -1;
	if (!same_shape(IN(n, 0), IN(n, 1)))
		return seterr(err, len, "swiglu: gate %s and up %s differ", SS(IN(n, 0), b1), SS(IN(n, 1), b2));
	set_shape(n, DT_F32, IN(n, 0)->ndim, IN(n, 0)->dim);
	return 0;
}

/* Norms over the last dim; weight and bias (when given) are vectors of that size. */
static int shape_norm(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	char b1[96], b2[96];
	for (int i = 0; i < n->nin; i++)
		if (need_float(g, n, i, err, len))
			return -1;
	for (int i = 1; i < n->nin; i++) {
		const Node *w = IN(n, i);
		if (w->ndim != 1 || w->dim[0] != x->dim[x->ndim - 1])
			return seterr(err, len, "%s: %s is %s but the input %s normalises over %lld values",
			              op_table[n->op].name, i == 1 ? "weight" : "bias", SS(w, b1), SS(x, b2),
			              (long long)x->dim[x->ndim - 1]);
	}
	if (!(A_norm_eps(n) > 0) || !isfinite(A_norm_eps(n)))
		return seterr(err, len, "%s: eps is %g, must be positive", op_table[n->op].name, A_norm_eps(n));
	set_shape(n, DT_F32, x->ndim, x->dim);
	return 0;
}

/* rope(x[T, H*D] or [T, H, D], pos[T] [, freq_div[rot_dim/2]]) */
static int shape_rope(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0), *p = IN(n, 1);
	char b1[96], b2[96];
	if (need_float(g, n, 0, err, len) || need_i32(g, n, 1, err, len))
		return -1;
	int64_t H = A_rope_heads(n), D = A_rope_head_dim(n), R = A_rope_rot_dim(n);
	if (H <= 0 || D <= 0 || R <= 0 || R > D || R % 2)
		return seterr(err, len, "rope: heads=%lld head_dim=%lld rot_dim=%lld (need rot_dim even and <= head_dim)",
		              (long long)H, (long long)D, (long long)R);
	int64_t feat = x->ndim == 2 ? x->dim[1] : x->ndim == 3 ? x->dim[1] * x->dim[2] : -1;
	if (feat != H * D || (x->ndim == 3 && x->dim[2] != D))
		return seterr(err, len, "rope: input %s is not [T, %lld heads × %lld]", SS(x, b1), (long long)H,
		              (long long)D);
	if (p->ndim != 1 || p->dim[0] != x->dim[0])
		return seterr(err, len, "rope: positions %s do not match input %s", SS(p, b1), SS(x, b2));
	if (!(A_rope_theta(n) > 0))
		return seterr(err, len, "rope: theta is %g, must be positive", A_rope_theta(n));
	if (A_rope_scaling(n) < ROPE_PLAIN || A_rope_scaling(n) >= ROPE_NSCALINGS)
		return seterr(err, len, "rope: unknown scaling %lld", (long long)A_rope_scaling(n));
	if (A_rope_scaling(n) == ROPE_YARN && A_rope_factor(n) > 1 && A_rope_orig_ctx(n) <= 0)
		return seterr(err, len, "rope: YaRN factor %g needs original_max_position_embeddings", A_rope_factor(n));
	if ((A_rope_scaling(n) == ROPE_LLAMA3 || A_rope_scaling(n) == ROPE_LINEAR) && !(A_rope_factor(n) > 0))
		return seterr(err, len, "rope: scaling factor %g, must be positive", A_rope_factor(n));
	if (A_rope_scaling(n) == ROPE_LLAMA3 && (A_rope_orig_ctx(n) <= 0 || !(A_rope_low_freq_factor(n) > 0) ||
	                                         !(A_rope_high_freq_factor(n) > A_rope_low_freq_factor(n))))
		return seterr(err, len,
		              "rope: llama3 scaling needs original_max_position_embeddings > 0 and "
		              "0 < low_freq_factor < high_freq_factor (got %lld, %g, %g)",
		              (long long)A_rope_orig_ctx(n), A_rope_low_freq_factor(n), A_rope_high_freq_factor(n));
	if (n->nin > 2) {
		/* per-frequency divisors: a checkpoint vector the runtime reads when it builds the GPU table */
		const Node *d = IN(n, 2);
		if (d->kind != VK_WEIGHT || !is_float(d) || d->dtype == DT_Q || d->ndim != 1 || d->dim[0] != R / 2)
			return seterr(err, len, "rope: frequency divisors %s%s%s are not a float weight [%lld]", SS(d, b1),
			              d->name ? " " : "", d->name ? d->name : "", (long long)(R / 2));
	}
	set_shape(n, DT_F32, x->ndim, x->dim);
	return 0;
}

/* attention(q[T,H*Dk], k[T,G*Dk], v[T,G*Dv], kcache[S,G*Dk], vcache[S,G*Dv], pos[T]) -> [T, H*Dv] */
static int shape_attention(const Graph *g, Node *n, char *err, size_t len)
{
	int64_t H = A_attention_heads(n), G = A_attention_kv_heads(n), Dk = A_attention_head_dim(n),
	        Dv = A_attention_v_head_dim(n);
	char b1[96];
	if (H <= 0 || G <= 0 || Dk <= 0 || Dv <= 0 || H % G)
		return seterr(err, len, "attention: heads=%lld kv_heads=%lld (heads must be a multiple of kv_heads)",
		              (long long)H, (long long)G);
	static const char *what[5] = {"q", "k", "v", "k cache", "v cache"};
	int64_t want[5] = {H * Dk, G * Dk, G * Dv, G * Dk, G * Dv};
	for (int i = 0; i < 5; i++) {
		const Node *t = IN(n, i);
		if (need_float(g, n, i, err, len))
			return -1;
		int64_t rows = i < 3 ? IN(n, 0)->dim[0] : DIM_S;
		if (t->ndim != 2 || t->dim[1] != want[i] || t->dim[0] != rows)
			return seterr(err, len, "attention: %s is %s, expected [%s, %lld]", what[i], SS(t, b1),
			              i < 3 ? "T" : "S", (long long)want[i]);
	}
	if (need_i32(g, n, 5, err, len))
		return -1;
	if (IN(n, 5)->ndim != 1 || IN(n, 5)->dim[0] != IN(n, 0)->dim[0])
		return seterr(err, len, "attention: positions %s do not match q", SS(IN(n, 5), b1));
	if (IN(n, 3)->kind != VK_CACHE || IN(n, 4)->kind != VK_CACHE)
		return seterr(err, len, "attention: operands 4 and 5 must be caches (glm.cache)");
	int64_t d[2] = {IN(n, 0)->dim[0], H * Dv};
	set_shape(n, DT_F32, 2, d);
	return 0;
}

static int shape_topk(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	char b1[96];
	if (need_float(g, n, 0, err, len))
		return -1;
	int64_t last = x->dim[x->ndim - 1];
	if (last < 0 || A_topk_k(n) <= 0 || A_topk_k(n) > last)
		return seterr(err, len, "topk: k=%lld for %s (need 1 <= k <= last dim)", (long long)A_topk_k(n), SS(x, b1));
	int64_t d[MAXDIM];
	memcpy(d, x->dim, sizeof d);
	d[x->ndim - 1] = A_topk_k(n);
	set_shape(n, DT_I32, x->ndim, d);
	return 0;
}

static int shape_argmax(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	if (need_float(g, n, 0, err, len))
		return -1;
	if (x->ndim == 1) {
		int64_t one = 1;
		set_shape(n, DT_I32, 1, &one);
	} else
		set_shape(n, DT_I32, x->ndim - 1, x->dim);
	return 0;
}

/* Static product and the symbolic dims, in order, of a shape. */
static int64_t static_numel(int ndim, const int64_t *d, int64_t *sym, int *nsym)
{
	int64_t e = 1;
	*nsym = 0;
	for (int i = 0; i < ndim; i++)
		if (d[i] < 0)
			sym[(*nsym)++] = d[i];
		else
			e *= d[i];
	return e;
}

/* reshape: target dims d0..d(ndim-1), and ndim; symbolic dims must be kept, in order. */
static int shape_reshape(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	char b1[96], b2[96];
	int nd = (int)A_reshape_ndim(n);
	if (nd < 1 || nd > MAXDIM)
		return seterr(err, len, "reshape: %d dims (1..%d allowed)", nd, MAXDIM);
	Node t = *n;
	set_shape(&t, x->dtype, nd, A_reshape_dims(n));
	int64_t s1[MAXDIM], s2[MAXDIM];
	int n1, n2;
	int64_t e1 = static_numel(x->ndim, x->dim, s1, &n1), e2 = static_numel(nd, t.dim, s2, &n2);
	int ok = e1 == e2 && n1 == n2;
	for (int i = 0; ok && i < n1; i++)
		ok = s1[i] == s2[i];
	for (int i = 0; i < nd; i++)
		ok = ok && (t.dim[i] > 0 || t.dim[i] == DIM_T || t.dim[i] == DIM_S);
	if (!ok)
		return seterr(err, len, "reshape: cannot view %s as %s", SS(x, b1), SS(&t, b2));
	set_shape(n, x->dtype, nd, t.dim);
	return 0;
}

/* slice(x): ia = axis, start, length. */
static int shape_slice(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	char b1[96];
	int64_t ax = A_slice_axis(n), st = A_slice_start(n), ln = A_slice_len(n);
	if (ax < 0 || ax >= x->ndim || x->dim[ax] < 0 || st < 0 || ln <= 0 || st + ln > x->dim[ax])
		return seterr(err, len, "slice: [%lld, %lld) of axis %lld is outside %s", (long long)st,
		              (long long)(st + ln), (long long)ax + 1, SS(x, b1));
	int64_t d[MAXDIM];
	memcpy(d, x->dim, sizeof d);
	d[ax] = ln;
	set_shape(n, x->dtype, x->ndim, d);
	return 0;
}

/* concat(x1, x2, ...): ia = axis; every other dim equal. */
static int shape_concat(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *a = IN(n, 0);
	char b1[96], b2[96];
	int64_t ax = A_concat_axis(n);
	if (ax < 0 || ax >= a->ndim || a->dim[ax] < 0)
		return seterr(err, len, "concat: axis %lld is not a static axis of %s", (long long)ax + 1, SS(a, b1));
	int64_t d[MAXDIM];
	memcpy(d, a->dim, sizeof d);
	for (int i = 1; i < n->nin; i++) {
		const Node *b = IN(n, i);
		int ok = b->ndim == a->ndim && b->dtype == a->dtype;
		for (int j = 0; ok && j < a->ndim; j++)
			ok = j == ax || a->dim[j] == b->dim[j];
		if (!ok)
			return seterr(err, len, "concat: %s and %s differ outside axis %lld", SS(a, b1), SS(b, b2),
			              (long long)ax + 1);
		d[ax] += b->dim[ax];
	}
	set_shape(n, a->dtype, a->ndim, d);
	return 0;
}

/* permute(x): p0..p(ndim-1) = source axis of each output axis. */
static int shape_permute(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	char b1[96];
	int seen[MAXDIM] = {0};
	int64_t d[MAXDIM] = {0};
	for (int i = 0; i < x->ndim; i++) {
		int64_t p = A_permute_axis(n, i);
		if (p < 0 || p >= x->ndim || seen[p]++)
			return seterr(err, len, "permute: axes are not a permutation of the %d dims of %s", x->ndim, SS(x, b1));
		d[i] = x->dim[p];
	}
	set_shape(n, x->dtype, x->ndim, d);
	return 0;
}

/* Check operand i is 2-D [rows, cols] with the given extents (rows may be T or S). */
static int need_2d(const Graph *g, const Node *n, int i, int64_t rows, int64_t cols, const char *what, char *err,
                   size_t len)
{
	const Node *t = IN(n, i);
	char b1[96];
	if (t->ndim != 2 || t->dim[0] != rows || t->dim[1] != cols)
		return seterr(err, len, "%s: %s is %s, expected [%s, %lld]", op_table[n->op].name, what, SS(t, b1),
		              rows == DIM_T ? "T" : rows == DIM_S ? "S" : "?", (long long)cols);
	return 0;
}

/* mla(q[T, H*Dk], kv[T, Dk], cache[S, Dk], pos[T] [, sel[T, K]]) -> [T, H*Dv]; ia: heads, dk, dv. */
static int shape_mla(const Graph *g, Node *n, char *err, size_t len)
{
	int64_t H = A_mla_heads(n), Dk = A_mla_dk(n), Dv = A_mla_dv(n);
	if (H <= 0 || Dk <= 0 || Dv <= 0 || Dv > Dk)
		return seterr(err, len, "mla: heads=%lld dk=%lld dv=%lld (need dv <= dk: the values are the key's first dv)",
		              (long long)H, (long long)Dk, (long long)Dv);
	if (need_float(g, n, 0, err, len) || need_float(g, n, 1, err, len) || need_float(g, n, 2, err, len) ||
	    need_2d(g, n, 0, DIM_T, H * Dk, "q", err, len) || need_2d(g, n, 1, DIM_T, Dk, "kv", err, len) ||
	    need_2d(g, n, 2, DIM_S, Dk, "cache", err, len) || need_i32(g, n, 3, err, len))
		return -1;
	if (IN(n, 2)->kind != VK_CACHE)
		return seterr(err, len, "mla: operand 3 must be a cache (glm.cache)");
	if (n->nin > 4) {
		char b1[96];
		const Node *sel = IN(n, 4);
		if (need_i32(g, n, 4, err, len))
			return -1;
		if (sel->ndim != 2 || sel->dim[0] != DIM_T || sel->dim[1] <= 0)
			return seterr(err, len, "mla: selection is %s, expected [T, k]", SS(sel, b1));
	}
	int64_t d[2] = {DIM_T, H * Dv};
	set_shape(n, DT_F32, 2, d);
	return 0;
}

/* indexer(q[T, H*D], k[T, D], w[T, H], kcache[S, D], pos[T]) -> int32 [T, topk]; ia: heads, dim, topk. */
static int shape_indexer(const Graph *g, Node *n, char *err, size_t len)
{
	int64_t H = A_indexer_heads(n), D = A_indexer_dim(n), K = A_indexer_topk(n);
	if (H <= 0 || D <= 0 || K <= 0)
		return seterr(err, len, "indexer: heads=%lld dim=%lld topk=%lld must be positive", (long long)H, (long long)D,
		              (long long)K);
	if (need_2d(g, n, 0, DIM_T, H * D, "q", err, len) || need_2d(g, n, 1, DIM_T, D, "k", err, len) ||
	    need_2d(g, n, 2, DIM_T, H, "head weights", err, len) || need_2d(g, n, 3, DIM_S, D, "key cache", err, len) ||
	    need_i32(g, n, 4, err, len))
		return -1;
	if (IN(n, 3)->kind != VK_CACHE)
		return seterr(err, len, "indexer: operand 4 must be a cache (glm.cache)");
	int64_t d[2] = {DIM_T, K};
	set_shape(n, DT_I32, 2, d);
	return 0;
}

/* moe_route(logits[T, E] [, bias[E]]) -> int32 [T, k]; ia: k, n_group, topk_group, func. */
static int shape_moe_route(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *l = IN(n, 0);
	char b1[96];
	if (need_float(g, n, 0, err, len))
		return -1;
	int64_t E = l->dim[l->ndim - 1], k = A_moe_route_k(n), ng = A_moe_route_groups(n) ? A_moe_route_groups(n) : 1,
	        tg = A_moe_route_topk_groups(n) ? A_moe_route_topk_groups(n) : ng;
	if (l->ndim != 2 || E <= 0 || k <= 0 || k > E || E % ng || tg > ng || k > tg * (E / ng) ||
	    A_moe_route_sigmoid(n) < 0 || A_moe_route_sigmoid(n) > 1)
		return seterr(err, len, "moe_route: cannot pick %lld of the experts of %s in %lld groups keeping %lld",
		              (long long)k, SS(l, b1), (long long)ng, (long long)tg);
	if (n->nin > 1 && (need_float(g, n, 1, err, len) || IN(n, 1)->ndim != 1 || IN(n, 1)->dim[0] != E))
		return seterr(err, len, "moe_route: the selection bias must be [%lld]", (long long)E);
	int64_t d[2] = {l->dim[0], k};
	set_shape(n, DT_I32, 2, d);
	return 0;
}

/* moe_weights(logits[T, E], idx[T, k]) -> [T, k]; ia: func, norm; fa: scale. */
static int shape_moe_weights(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *l = IN(n, 0), *i = IN(n, 1);
	char b1[96], b2[96];
	if (need_float(g, n, 0, err, len) || need_i32(g, n, 1, err, len))
		return -1;
	if (l->ndim != 2 || i->ndim != 2 || l->dim[0] != i->dim[0])
		return seterr(err, len, "moe_weights: logits %s and expert ids %s do not match", SS(l, b1), SS(i, b2));
	set_shape(n, DT_F32, 2, i->dim);
	return 0;
}

/* moe_ffn(x[T, C], idx[T, k], w[T, k], gate[E, F, C], up[E, F, C], down[E, C, F]) -> [T, C] */
static int shape_moe_ffn(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0), *i = IN(n, 1), *w = IN(n, 2), *ga = IN(n, 3), *up = IN(n, 4), *dn = IN(n, 5);
	char b1[96], b2[96], b3[96];
	if (need_float(g, n, 0, err, len) || need_i32(g, n, 1, err, len) || need_float(g, n, 2, err, len) ||
	    need_float(g, n, 3, err, len) || need_float(g, n, 4, err, len) || need_float(g, n, 5, err, len))
		return -1;
	if (x->ndim != 2 || i->ndim != 2 || w->ndim != 2 || i->dim[0] != x->dim[0] || w->dim[0] != x->dim[0] ||
	    w->dim[1] != i->dim[1])
		return seterr(err, len, "moe_ffn: input %s, expert ids %s and weights %s do not match", SS(x, b1),
		              SS(i, b2), SS(w, b3));
	int64_t C = x->dim[1];
	if (ga->ndim != 3 || !same_shape(ga, up) || ga->dim[2] != C || dn->ndim != 3 || dn->dim[0] != ga->dim[0] ||
	    dn->dim[1] != C || dn->dim[2] != ga->dim[1])
		return seterr(err, len, "moe_ffn: expert weights gate %s, up %s, down %s do not fit [E, F, %lld], "
		              "[E, F, %lld], [E, %lld, F]", SS(ga, b1), SS(up, b2), SS(dn, b3), (long long)C, (long long)C,
		              (long long)C);
	set_shape(n, DT_F32, 2, x->dim);
	return 0;
}

/*
** CPU execution. Buffers are contiguous row-major; symbolic dims are bound in the Exec.
*/
#define F(i) ((float *)x->buf[x->g->node[id].in[i]])
#define I32(i) ((int32_t *)x->buf[x->g->node[id].in[i]])
#define Y ((float *)x->buf[id])
#define NODE (&x->g->node[id])
#define INID(i) (x->g->node[id].in[i])

static void cpu_nop(Exec *x, int id)
{
	(void)x, (void)id;
}

static void cpu_embedding(Exec *x, int id)
{
	int64_t V = exec_dim(x, INID(0), 0), C = exec_dim(x, INID(0), 1), T = exec_numel(x, INID(1));
	const int32_t *ids = I32(1);
	if (A_embedding_vocab_parallel(NODE)) {
		/* Vocab-parallel: this rank holds rows [rank·V, (rank+1)·V); other ids give zeros (summed later). */
		int64_t lo = (int64_t)x->rank * V;
		for (int64_t t = 0; t < T; t++) {
			int64_t r = ids[t] - lo;
			if (r >= 0 && r < V)
				memcpy(Y + t * C, F(0) + r * C, sizeof(float) * (size_t)C);
			else
				memset(Y + t * C, 0, sizeof(float) * (size_t)C);
		}
		return;
	}
	for (int64_t t = 0; t < T; t++)
		if (ids[t] < 0 || ids[t] >= V) {
			snprintf(x->err, sizeof x->err, "token id %d is outside the vocabulary [0, %lld)", ids[t], (long long)V);
			return;
		}
	ref_embedding(Y, F(0), ids, (int)T, (int)C);
}

/* Collectives run across ranks in exec_step_ranks; alone (tp 1) they are the identity. */
static void cpu_collective(Exec *x, int id)
{
	if (x->buf[id] != x->buf[INID(0)])
		memcpy(x->buf[id], x->buf[INID(0)], (size_t)exec_numel(x, INID(0)) * dtype_size(NODE->dtype));
}

/* allgather(x) along axis over ranks ranks: the axis grows tp-fold. */
static int shape_allgather(const Graph *g, Node *n, char *err, size_t len)
{
	const Node *x = IN(n, 0);
	char b1[96];
	if (A_allgather_axis(n) < 0 || A_allgather_axis(n) >= x->ndim || x->dim[A_allgather_axis(n)] < 0 ||
	    A_allgather_ranks(n) < 1)
		return seterr(err, len, "allgather: axis %lld of %s over %lld ranks", (long long)A_allgather_axis(n) + 1,
		              SS(x, b1), (long long)A_allgather_ranks(n));
	int64_t d[MAXDIM];
	memcpy(d, x->dim, sizeof d);
	d[A_allgather_axis(n)] *= A_allgather_ranks(n);
	set_shape(n, x->dtype, x->ndim, d);
	return 0;
}

static int shape_allreduce(const Graph *g, Node *n, char *err, size_t len)
{
	if (need_float(g, n, 0, err, len))
		return -1;
	set_shape(n, IN(n, 0)->dtype, IN(n, 0)->ndim, IN(n, 0)->dim);
	return 0;
}

/* Below this many multiply-adds a linear runs on the calling thread (a wake-up costs more). */
#define LIN_PAR_MIN (1 << 17)

/* ref_linear's values (lin_rows), on every thread of x->par for the large ones. */
static void cpu_linear(Exec *x, int id)
{
	int64_t N = exec_dim(x, INID(1), 0), K = exec_dim(x, INID(1), 1);
	int64_t T = exec_numel(x, INID(0)) / K;
	int big = T * N * K >= LIN_PAR_MIN;
	if (big && !x->par_tried) {
		x->par_tried = 1;
		int n = par_threads(x->err, sizeof x->err);
		if (n < 0)
			return;
		if (n > 1 && !(x->par = par_new(n))) {
			snprintf(x->err, sizeof x->err, "cannot start %d threads for the linears (GLMRUN_THREADS)", n);
			return;
		}
	}
	lin_par(big ? x->par : NULL, Y, F(0), F(1), NODE->nin == 3 ? F(2) : NULL, (int)T, (int)K, (int)N);
}

static void cpu_matmul(Exec *x, int id)
{
	const Node *n = NODE;
	int nd = x->g->node[n->in[0]].ndim;
	int64_t B = nd == 3 ? exec_dim(x, n->in[0], 0) : 1;
	int64_t M = exec_dim(x, n->in[0], nd - 2), K = exec_dim(x, n->in[0], nd - 1);
	int64_t N = exec_dim(x, n->in[1], A_matmul_transpose_b(n) ? nd - 2 : nd - 1);
	if (A_matmul_transpose_b(n))
		ref_matmul_tb(Y, F(0), F(1), (int)B, (int)M, (int)K, (int)N);
	else
		ref_matmul(Y, F(0), F(1), (int)B, (int)M, (int)K, (int)N);
}

static void cpu_binary(Exec *x, int id)
{
	size_t n = (size_t)exec_numel(x, INID(0)), nb = (size_t)exec_numel(x, INID(1));
	switch (NODE->op) {
	case OP_ADD: ref_add(Y, F(0), F(1), n, nb); break;
	case OP_SUB: ref_sub(Y, F(0), F(1), n, nb); break;
	case OP_MUL: ref_mul(Y, F(0), F(1), n, nb); break;
	default: ref_div(Y, F(0), F(1), n, nb); break;
	}
}

static void cpu_unary(Exec *x, int id)
{
	size_t n = (size_t)exec_numel(x, id);
	switch (NODE->op) {
	case OP_SCALE: ref_scale(Y, F(0), n, (float)A_scale_s(NODE)); break;
	case OP_SILU: ref_silu(Y, F(0), n); break;
	case OP_GELU: ref_gelu(Y, F(0), n, (int)A_gelu_tanh(NODE)); break;
	case OP_SIGMOID: ref_sigmoid(Y, F(0), n); break;
	default: GLM_ASSERT(0);
	}
}

static void cpu_softmax(Exec *x, int id)
{
	int64_t N = exec_dim(x, id, NODE->ndim - 1);
	ref_softmax(Y, F(0), (int)(exec_numel(x, id) / N), (int)N);
}

static void cpu_swiglu(Exec *x, int id)
{
	ref_swiglu(Y, F(0), F(1), (size_t)exec_numel(x, id));
}

static void cpu_rmsnorm(Exec *x, int id)
{
	int64_t N = exec_dim(x, id, NODE->ndim - 1);
	ref_rmsnorm(Y, F(0), NODE->nin > 1 ? F(1) : NULL, (int)(exec_numel(x, id) / N), (int)N, (float)A_rmsnorm_eps(NODE));
}

static void cpu_layernorm(Exec *x, int id)
{
	int64_t N = exec_dim(x, id, NODE->ndim - 1);
	ref_layernorm(Y, F(0), NODE->nin > 1 ? F(1) : NULL, NODE->nin > 2 ? F(2) : NULL, (int)(exec_numel(x, id) / N),
	              (int)N, (float)A_layernorm_eps(NODE));
}

/* The rope attributes as the reference kernel takes them (freq_div left NULL). */
static RefRope rope_params(const Node *n)
{
	RefRope r = {
		.head_dim = (int)A_rope_head_dim(n), .rot_dim = (int)A_rope_rot_dim(n),
		.interleaved = (int)A_rope_interleaved(n), .orig_ctx = (int)A_rope_orig_ctx(n),
		.scaling = (int)A_rope_scaling(n), .theta = A_rope_theta(n), .factor = A_rope_factor(n),
		.beta_fast = A_rope_beta_fast(n), .beta_slow = A_rope_beta_slow(n), .mscale = A_rope_mscale(n),
		.mscale_all_dim = A_rope_mscale_all_dim(n), .attn_factor = A_rope_attn_factor(n),
		.low_freq_factor = A_rope_low_freq_factor(n), .high_freq_factor = A_rope_high_freq_factor(n),
	};
	return r;
}

void op_rope_table(const Node *n, const float *freq_div, float *inv_freq, float *cs_scale)
{
	RefRope r = rope_params(n);
	r.freq_div = freq_div;
	ref_rope_freqs(&r, inv_freq, cs_scale);
}

static void cpu_rope(Exec *x, int id)
{
	RefRope r = rope_params(NODE);
	r.freq_div = NODE->nin > 2 ? F(2) : NULL;
	ref_rope(Y, F(0), I32(1), (int)x->T, (int)A_rope_heads(NODE), &r);
}

/* The run of tokens from t0 that share one sequence slot (a prefill is one run; a batched decode step
** has one token per run). Writes the slot to *slot and returns the run's end. */
static int64_t slot_run(const Exec *x, int64_t t0, int *slot)
{
	int s = x->seq ? x->seq[t0] : 0;
	int64_t t1 = t0 + 1;
	while (t1 < x->T && (x->seq ? x->seq[t1] : 0) == s)
		t1++;
	*slot = s;
	return t1;
}

/* Positions must lie inside one sequence's S cache rows. */
static int check_pos(Exec *x, const int32_t *pos)
{
	for (int64_t t = 0; t < x->T; t++)
		if (pos[t] < 0 || pos[t] >= x->S) {
			snprintf(x->err, sizeof x->err, "position %d is outside the context of %lld (raise --max-seq)", pos[t],
			         (long long)x->S);
			return -1;
		}
	return 0;
}

static void cpu_attention(Exec *x, int id)
{
	const Node *n = NODE;
	const int32_t *pos = I32(5);
	if (check_pos(x, pos))
		return;
	int64_t H = A_attention_heads(n), G = A_attention_kv_heads(n), Dk = A_attention_head_dim(n),
	        Dv = A_attention_v_head_dim(n);
	for (int64_t t0 = 0, t1; t0 < x->T; t0 = t1) {
		int s;
		t1 = slot_run(x, t0, &s);
		ref_attention(Y + t0 * H * Dv, F(0) + t0 * H * Dk, F(1) + t0 * G * Dk, F(2) + t0 * G * Dv,
		              F(3) + s * x->S * G * Dk, F(4) + s * x->S * G * Dv, pos + t0, (int)(t1 - t0), (int)H, (int)G,
		              (int)Dk, (int)Dv, (int)x->S, (float)A_attention_scale(n));
	}
}

static void cpu_topk(Exec *x, int id)
{
	int64_t N = exec_dim(x, INID(0), x->g->node[INID(0)].ndim - 1);
	ref_topk((int32_t *)x->buf[id], F(0), (int)(exec_numel(x, INID(0)) / N), (int)N, (int)A_topk_k(NODE));
}

static void cpu_argmax(Exec *x, int id)
{
	int64_t N = exec_dim(x, INID(0), x->g->node[INID(0)].ndim - 1);
	ref_argmax((int32_t *)x->buf[id], F(0), (int)(exec_numel(x, INID(0)) / N), (int)N);
}

static void cpu_reshape(Exec *x, int id)
{
	if (x->buf[id] != x->buf[INID(0)])
		memcpy(x->buf[id], x->buf[INID(0)], (size_t)exec_numel(x, id) * dtype_size(NODE->dtype));
}

/* Outer × (axis extent × inner) copies; slice and concat share this walk. */
static void cpu_slice(Exec *x, int id)
{
	const Node *n = NODE;
	int ax = (int)A_slice_axis(n);
	size_t es = dtype_size(n->dtype), inner = es, outer = 1;
	for (int i = ax + 1; i < n->ndim; i++)
		inner *= (size_t)exec_dim(x, id, i);
	for (int i = 0; i < ax; i++)
		outer *= (size_t)exec_dim(x, id, i);
	size_t src_ax = (size_t)exec_dim(x, n->in[0], ax), dst_ax = (size_t)A_slice_len(n);
	const char *src = x->buf[n->in[0]];
	char *dst = x->buf[id];
	for (size_t o = 0; o < outer; o++)
		memcpy(dst + o * dst_ax * inner, src + (o * src_ax + (size_t)A_slice_start(n)) * inner, dst_ax * inner);
}

static void cpu_concat(Exec *x, int id)
{
	const Node *n = NODE;
	int ax = (int)A_concat_axis(n);
	size_t es = dtype_size(n->dtype), inner = es, outer = 1;
	for (int i = ax + 1; i < n->ndim; i++)
		inner *= (size_t)exec_dim(x, id, i);
	for (int i = 0; i < ax; i++)
		outer *= (size_t)exec_dim(x, id, i);
	size_t dst_ax = (size_t)exec_dim(x, id, ax), at = 0;
	char *dst = x->buf[id];
	for (int k = 0; k < n->nin; k++) {
		size_t src_ax = (size_t)exec_dim(x, n->in[k], ax);
		const char *src = x->buf[n->in[k]];
		for (size_t o = 0; o < outer; o++)
			memcpy(dst + (o * dst_ax + at) * inner, src + o * src_ax * inner, src_ax * inner);
		at += src_ax;
	}
}

static void cpu_permute(Exec *x, int id)
{
	const Node *n = NODE, *in = &x->g->node[n->in[0]];
	int64_t shape[MAXDIM];
	int perm[MAXDIM];
	for (int i = 0; i < in->ndim; i++)
		shape[i] = exec_dim(x, n->in[0], i), perm[i] = (int)A_permute_axis(n, i);
	ref_permute(x->buf[id], x->buf[n->in[0]], in->ndim, shape, perm, dtype_size(n->dtype));
}

static void cpu_mla(Exec *x, int id)
{
	const Node *n = NODE;
	const int32_t *pos = I32(3);
	if (check_pos(x, pos))
		return;
	int nsel = n->nin > 4 ? (int)exec_dim(x, n->in[4], 1) : 0;
	int64_t H = A_mla_heads(n), Dk = A_mla_dk(n), Dv = A_mla_dv(n);
	for (int64_t t0 = 0, t1; t0 < x->T; t0 = t1) {
		int s;
		t1 = slot_run(x, t0, &s);
		ref_mla(Y + t0 * H * Dv, F(0) + t0 * H * Dk, F(1) + t0 * Dk, F(2) + s * x->S * Dk, pos + t0,
		        n->nin > 4 ? I32(4) + t0 * nsel : NULL, nsel, (int)(t1 - t0), (int)H, (int)Dk, (int)Dv, (int)x->S,
		        (float)A_mla_scale(n));
	}
}

static void cpu_indexer(Exec *x, int id)
{
	const Node *n = NODE;
	const int32_t *pos = I32(4);
	if (check_pos(x, pos))
		return;
	int64_t H = A_indexer_heads(n), D = A_indexer_dim(n), K = A_indexer_topk(n);
	for (int64_t t0 = 0, t1; t0 < x->T; t0 = t1) {
		int s;
		t1 = slot_run(x, t0, &s);
		ref_indexer((int32_t *)x->buf[id] + t0 * K, F(0) + t0 * H * D, F(1) + t0 * D, F(2) + t0 * H,
		            F(3) + s * x->S * D, pos + t0, (int)(t1 - t0), (int)H, (int)D, (int)x->S, (int)K,
		            (float)A_indexer_scale(n));
	}
}

static void cpu_moe_route(Exec *x, int id)
{
	const Node *n = NODE;
	int64_t E = exec_dim(x, n->in[0], 1), T = exec_dim(x, n->in[0], 0);
	ref_moe_route((int32_t *)x->buf[id], F(0), n->nin > 1 ? F(1) : NULL, (int)T, (int)E, (int)A_moe_route_k(n),
	              A_moe_route_groups(n) ? (int)A_moe_route_groups(n) : 1,
	              A_moe_route_topk_groups(n) ? (int)A_moe_route_topk_groups(n)
	                                         : (A_moe_route_groups(n) ? (int)A_moe_route_groups(n) : 1),
	              (int)A_moe_route_sigmoid(n));
}

static void cpu_moe_weights(Exec *x, int id)
{
	const Node *n = NODE;
	int64_t E = exec_dim(x, n->in[0], 1), T = exec_dim(x, n->in[0], 0), k = exec_dim(x, n->in[1], 1);
	ref_moe_weights(Y, F(0), I32(1), (int)T, (int)E, (int)k, (int)A_moe_weights_sigmoid(n), (int)A_moe_weights_norm(n),
	                (float)A_moe_weights_scale(n));
}

static void cpu_moe_ffn(Exec *x, int id)
{
	const Node *n = NODE;
	int64_t T = exec_dim(x, n->in[0], 0), C = exec_dim(x, n->in[0], 1), k = exec_dim(x, n->in[1], 1);
	int64_t E = exec_dim(x, n->in[3], 0), Fd = exec_dim(x, n->in[3], 1);
	int hb = x->moe_hb && x->moe_hb[2 * id] && T >= x->moe_hb[2 * id] && T <= x->moe_hb[2 * id + 1];
	ref_moe_ffn_hid(Y, F(0), I32(1), F(2), F(3), F(4), F(5), (int)T, (int)C, (int)Fd, (int)E, (int)k, hb);
}

/* The attribute names by slot, from the tables in glm.h (ATTRS_*); allreduce's (ATTRS_ALLREDUCE) are not
** listed, so dumps print none. */
#define ATTR_NAME(OP, op, name, slot) [slot] = #name,
#define ATTR_SKIP(OP, op, name, slot)
const OpDef op_table[OP_NOPS] = {
	[OP_INPUT] = {"input", 0, 0, {0}, {0}, shape_leaf, cpu_nop},
	[OP_PARAM] = {"param", 0, 0, {0}, {0}, shape_leaf, cpu_nop},
	[OP_CACHE] = {"cache", 0, 0, {0}, {0}, shape_leaf, cpu_nop},
	[OP_EMBEDDING] = {"embedding", 2, 2, {ATTRS_EMBEDDING(ATTR_NAME, ATTR_SKIP)}, {0}, shape_embedding, cpu_embedding},
	[OP_LINEAR] = {"linear", 2, 3, {0}, {0}, shape_linear, cpu_linear},
	[OP_MATMUL] = {"matmul", 2, 2, {ATTRS_MATMUL(ATTR_NAME, ATTR_SKIP)}, {0}, shape_matmul, cpu_matmul},
	[OP_ADD] = {"add", 2, 2, {0}, {0}, shape_binary, cpu_binary},
	[OP_SUB] = {"sub", 2, 2, {0}, {0}, shape_binary, cpu_binary},
	[OP_MUL] = {"mul", 2, 2, {0}, {0}, shape_binary, cpu_binary},
	[OP_DIV] = {"div", 2, 2, {0}, {0}, shape_binary, cpu_binary},
	[OP_SCALE] = {"scale", 1, 1, {0}, {ATTRS_SCALE(ATTR_SKIP, ATTR_NAME)}, shape_unary, cpu_unary},
	[OP_SILU] = {"silu", 1, 1, {0}, {0}, shape_unary, cpu_unary},
	[OP_GELU] = {"gelu", 1, 1, {ATTRS_GELU(ATTR_NAME, ATTR_SKIP)}, {0}, shape_unary, cpu_unary},
	[OP_SIGMOID] = {"sigmoid", 1, 1, {0}, {0}, shape_unary, cpu_unary},
	[OP_SOFTMAX] = {"softmax", 1, 1, {0}, {0}, shape_unary, cpu_softmax},
	[OP_SWIGLU] = {"swiglu", 2, 2, {0}, {0}, shape_swiglu, cpu_swiglu},
	[OP_RMSNORM] = {"rmsnorm", 1, 2, {0}, {ATTRS_RMSNORM(ATTR_SKIP, ATTR_NAME)}, shape_norm, cpu_rmsnorm},
	[OP_LAYERNORM] = {"layernorm", 1, 3, {0}, {ATTRS_LAYERNORM(ATTR_SKIP, ATTR_NAME)}, shape_norm, cpu_layernorm},
	[OP_ROPE] = {"rope", 2, 3, {ATTRS_ROPE(ATTR_NAME, ATTR_SKIP)}, {ATTRS_ROPE(ATTR_SKIP, ATTR_NAME)}, shape_rope,
	             cpu_rope},
	[OP_ATTENTION] = {"attention", 6, 6, {ATTRS_ATTENTION(ATTR_NAME, ATTR_SKIP)},
	                  {ATTRS_ATTENTION(ATTR_SKIP, ATTR_NAME)},
	                  shape_attention, cpu_attention},
	[OP_TOPK] = {"topk", 1, 1, {ATTRS_TOPK(ATTR_NAME, ATTR_SKIP)}, {0}, shape_topk, cpu_topk},
	[OP_ARGMAX] = {"argmax", 1, 1, {0}, {0}, shape_argmax, cpu_argmax},
	[OP_RESHAPE] = {"reshape", 1, 1, {ATTRS_RESHAPE(ATTR_NAME, ATTR_SKIP)}, {0}, shape_reshape, cpu_reshape},
	[OP_SLICE] = {"slice", 1, 1, {ATTRS_SLICE(ATTR_NAME, ATTR_SKIP)}, {0}, shape_slice, cpu_slice},
	[OP_CONCAT] = {"concat", 1, MAXIN, {ATTRS_CONCAT(ATTR_NAME, ATTR_SKIP)}, {0}, shape_concat, cpu_concat},
	[OP_PERMUTE] = {"permute", 1, 1, {ATTRS_PERMUTE(ATTR_NAME, ATTR_SKIP)}, {0}, shape_permute, cpu_permute},
	[OP_MLA] = {"mla", 4, 5, {ATTRS_MLA(ATTR_NAME, ATTR_SKIP)}, {ATTRS_MLA(ATTR_SKIP, ATTR_NAME)}, shape_mla, cpu_mla},
	[OP_INDEXER] = {"indexer", 5, 5, {ATTRS_INDEXER(ATTR_NAME, ATTR_SKIP)}, {ATTRS_INDEXER(ATTR_SKIP, ATTR_NAME)},
	                shape_indexer, cpu_indexer},
	[OP_MOE_ROUTE] = {"moe_route", 1, 2, {ATTRS_MOE_ROUTE(ATTR_NAME, ATTR_SKIP)}, {0}, shape_moe_route,
	                  cpu_moe_route},
	[OP_MOE_WEIGHTS] = {"moe_weights", 2, 2, {ATTRS_MOE_WEIGHTS(ATTR_NAME, ATTR_SKIP)},
	                    {ATTRS_MOE_WEIGHTS(ATTR_SKIP, ATTR_NAME)}, shape_moe_weights, cpu_moe_weights},
	[OP_MOE_FFN] = {"moe_ffn", 6, 6, {0}, {0}, shape_moe_ffn, cpu_moe_ffn},
	[OP_ALLREDUCE] = {"allreduce", 1, 1, {0}, {0}, shape_allreduce, cpu_collective},
	[OP_ALLGATHER] = {"allgather", 1, 1, {ATTRS_ALLGATHER(ATTR_NAME, ATTR_SKIP)}, {0}, shape_allgather, cpu_collective},
};

int op_from_name(const char *s)
{
	for (int i = 0; i < OP_NOPS; i++)
		if (!strcmp(op_table[i].name, s))
			return i;
	return -1;
}
