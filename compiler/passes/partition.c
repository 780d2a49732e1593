/*
** compiler/passes/partition.c — tensor parallelism: one program for all N ranks, Megatron style.
**
** Sharding starts at the weights, from the layer library's hints (column: split the output features,
** row: split the input features, experts: split each expert's hidden width; vocab-parallel embedding and
** LM head) and propagates forward node by node. Each value is replicated, split along one axis, or a
** partial sum. An op that cannot take an operand's sharding gets a collective first: a partial sum
** meeting a non-linear consumer is all-reduced, a split value that must be whole is all-gathered. The
** result is the same graph with per-rank (local) shapes, per-rank head counts in the attributes, the
** collectives as nodes (their order is the allreduce schedule), and each weight's split recorded for the
** loader. A hint whose dim does not divide by N is dropped (the weight is replicated) and reported.
*/
#include "passes.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
	const Graph *s;              /* the whole-model graph */
	Graph *d;                    /* the per-rank program being built */
	int tp;
	int *map;                    /* source node -> destination node */
	int nreduce, ngather;
	FILE *explain;
	char *err;
	size_t len;
} Part;

static Shard sh_rep(void) { return (Shard){SH_REPLICATED, 0}; }
static Shard sh_split(int axis) { return (Shard){SH_SPLIT, (int8_t)axis}; }
static Shard sh_partial(void) { return (Shard){SH_PARTIAL, 0}; }

static const Node *D(Part *p, int id) { return &p->d->node[id]; }

/* Append a node to the per-rank graph after its shape rule accepts the local shapes. */
static int emit(Part *p, Node *n, int src)
{
	char m[512];
	if (op_table[n->op].shape(p->d, n, m, sizeof m)) {
		const Node *o = src >= 0 ? &p->s->node[src] : n;
		seterr(p->err, p->len, "%s:%d: partition for tp %d: %s", o->src ? o->src : "?", o->line, p->tp, m);
		return -1;
	}
	return graph_add(p->d, n);
}

/* Make value v replicated: all-reduce a partial sum, all-gather a split value. */
static int whole(Part *p, int v)
{
	const Node *x = D(p, v);
	if (x->shard.kind == SH_REPLICATED)
		return v;
	Node n = {.op = x->shard.kind == SH_PARTIAL ? OP_ALLREDUCE : OP_ALLGATHER, .nin = 1, .in = {v},
	          .src = x->src, .line = x->line, .layer = x->layer};
	if (n.op == OP_ALLREDUCE) {
		AS_allreduce_axis(&n, x->shard.axis), AS_allreduce_ranks(&n, p->tp);
		p->nreduce++;
	} else {
		AS_allgather_axis(&n, x->shard.axis), AS_allgather_ranks(&n, p->tp);
		p->ngather++;
	}
	int id = emit(p, &n, -1);
	if (id >= 0)
		p->d->node[id].shard = sh_rep();
	return id;
}

/* Make value v no more than split: a partial sum is all-reduced. */
static int summed(Part *p, int v)
{
	return D(p, v)->shard.kind == SH_PARTIAL ? whole(p, v) : v;
}

static int is_split(Part *p, int v, int axis)
{
	const Node *x = D(p, v);
	return x->shard.kind == SH_SPLIT && x->shard.axis == (axis < 0 ? x->ndim + axis : axis);
}

/*
** Where a split axis lands through a reshape: the output axis that starts at the same leading product.
** Either output axes [a, b] divide the input axis (then out[a] must divide by tp: it is the outer
** factor), or output axis a merges input axes [ax, k] (then the split input axis is its outer factor).
** Symbolic dims (T) count as 1 on both sides, since they are kept in order.
*/
static int reshape_axis(const Node *in, int ax, const int64_t *out, int nd, int tp)
{
	int64_t lead = 1, acc = 1;
	for (int i = 0; i < ax; i++)
		lead *= in->dim[i] < 0 ? 1 : in->dim[i];
	for (int a = 0; a < nd; a++) {
		if (acc == lead && out[a] > 0) {
			int64_t blk = 1;
			for (int b = a; b < nd && blk < in->dim[ax]; b++)
				blk *= out[b] < 0 ? 1 : out[b];
			if (blk == in->dim[ax] && out[a] % tp == 0)
				return a;
			int64_t merged = 1;
			for (int k = ax; k < in->ndim && merged < out[a]; k++)
				merged *= in->dim[k] < 0 ? 1 : in->dim[k];
			if (merged == out[a])
				return a;
		}
		acc *= out[a] < 0 ? 1 : out[a];
		if (acc > lead)
			break;
	}
	return -1;
}

/* A linear: column-parallel (its weight split by rows: output split), row-parallel (split by columns
** over a split input: partial sums), else whole. */
static int part_linear(Part *p, const Node *s, Node *n, Shard *out)
{
	int w = n->in[1];
	if (is_split(p, w, 0)) {
		n->in[0] = whole(p, n->in[0]);
		if (n->nin > 2 && !is_split(p, n->in[2], 0))
			return seterr(p->err, p->len, "%s:%d: a column-parallel linear needs its bias split too", s->src,
			              s->line);
		*out = sh_split(s->ndim - 1);
	} else if (is_split(p, w, 1) && n->nin == 2) {
		if (!is_split(p, n->in[0], -1))
			n->in[0] = whole(p, n->in[0]), w = n->in[1] = whole(p, w);
		else
			*out = sh_partial();
	} else {
		for (int i = 0; i < n->nin; i++)
			n->in[i] = whole(p, n->in[i]);
	}
	return 0;
}

/* add/sub/mul/div: partial sums stay partial (add, sub); otherwise split where both operands agree or one
** broadcasts over the split axis, else whole. */
static int part_binary(Part *p, const Node *s, Node *n, Shard *out)
{
	const Node *a = D(p, n->in[0]), *b = D(p, n->in[1]);
	if ((s->op == OP_ADD || s->op == OP_SUB) && a->shard.kind == SH_PARTIAL && b->shard.kind == SH_PARTIAL) {
		*out = sh_partial();
		return 0;
	}
	n->in[0] = summed(p, n->in[0]), n->in[1] = summed(p, n->in[1]);
	a = D(p, n->in[0]), b = D(p, n->in[1]);
	int off = a->ndim - b->ndim;
	if (a->shard.kind == SH_SPLIT && b->shard.kind == SH_REPLICATED && a->shard.axis < off)
		*out = a->shard; /* b broadcasts over the split axis */
	else if (a->shard.kind == SH_SPLIT && b->shard.kind == SH_SPLIT && b->shard.axis + off == a->shard.axis)
		*out = a->shard;
	else
		n->in[0] = whole(p, n->in[0]), n->in[1] = whole(p, n->in[1]);
	return 0;
}

/* Rotary embedding: split in whole heads when the heads are split, else whole. */
static int part_rope(Part *p, const Node *s, Node *n, Shard *out)
{
	int tp = p->tp;
	n->in[0] = summed(p, n->in[0]);
	for (int i = 1; i < n->nin; i++) /* positions, and the frequency divisors when given */
		n->in[i] = whole(p, n->in[i]);
	const Node *x = D(p, n->in[0]);
	/* [T, H·D] or [T, H, D]: heads are split when axis 1 is, in whole heads. */
	if (x->shard.kind == SH_SPLIT && x->shard.axis == 1 && A_rope_heads(s) % tp == 0 &&
	    (x->ndim == 3 || x->dim[1] % A_rope_head_dim(s) == 0)) {
		AS_rope_heads(n, A_rope_heads(s) / tp);
		*out = x->shard;
	} else
		n->in[0] = whole(p, n->in[0]);
	return 0;
}

/* Attention: split by heads (and its caches with it) when q, k and v are split by heads that divide tp. */
static int part_attention(Part *p, const Node *s, Node *n, Shard *out)
{
	int tp = p->tp;
	for (int i = 0; i < 3; i++)
		n->in[i] = summed(p, n->in[i]);
	n->in[5] = whole(p, n->in[5]);
	int H = (int)A_attention_heads(s), G = (int)A_attention_kv_heads(s);
	if (is_split(p, n->in[0], 1) && is_split(p, n->in[1], 1) && is_split(p, n->in[2], 1) && H % tp == 0 &&
	    G % tp == 0) {
		AS_attention_heads(n, H / tp), AS_attention_kv_heads(n, G / tp);
		for (int c = 3; c <= 4; c++) {
			Node *cache = &p->d->node[n->in[c]];
			cache->dim[1] = p->s->node[s->in[c]].dim[1] / tp;
			cache->shard = sh_split(1);
		}
		*out = sh_split(1);
	} else
		for (int i = 0; i < 3; i++)
			n->in[i] = whole(p, n->in[i]);
	return 0;
}

/* Reshape: a split axis carried to the axis it becomes, when it divides; partial stays partial. */
static int part_reshape(Part *p, const Node *s, Node *n, Shard *out)
{
	int tp = p->tp;
	const Node *x = D(p, n->in[0]);
	int nd = (int)A_reshape_ndim(s);
	if (x->shard.kind == SH_PARTIAL) {
		*out = sh_partial();
		return 0;
	}
	if (x->shard.kind == SH_SPLIT) {
		const Node *gx = &p->s->node[s->in[0]];
		int a = reshape_axis(gx, x->shard.axis, A_reshape_dims(s), nd, tp);
		if (a >= 0) {
			AS_reshape_dim(n, a, A_reshape_dim(s, a) / tp);
			*out = sh_split(a);
			return 0;
		}
		n->in[0] = whole(p, n->in[0]);
	}
	return 0;
}

/* Concat: the operands' common shard when they share one that is not the concatenated axis, else whole. */
static int part_concat(Part *p, const Node *s, Node *n, Shard *out)
{
	Shard f = D(p, n->in[0])->shard;
	int same = !(f.kind == SH_SPLIT && f.axis == A_concat_axis(s));
	for (int i = 1; i < n->nin && same; i++) {
		Shard o = D(p, n->in[i])->shard;
		same = o.kind == f.kind && o.axis == f.axis;
	}
	if (same)
		*out = f;
	else
		for (int i = 0; i < n->nin; i++)
			n->in[i] = whole(p, n->in[i]);
	return 0;
}

/* Partition one source node into the per-rank graph. */
static int part_node(Part *p, int sid)
{
	const Node *s = &p->s->node[sid];
	Node n = *s;
	int tp = p->tp;
	for (int i = 0; i < n.nin; i++)
		n.in[i] = p->map[s->in[i]];
	n.shard = sh_rep();
	Shard out = sh_rep();
	switch (s->op) {
	case OP_INPUT:
	case OP_CACHE:
		break;
	case OP_PARAM:
		if (s->shard.kind == SH_SPLIT) {
			int ax = s->shard.axis;
			if (s->dim[ax] % tp == 0) {
				n.dim[ax] /= tp;
				out = sh_split(ax);
			} else if (p->explain)
				fprintf(p->explain, "partition: %s [%lld along axis %d] does not split %d ways; replicated\n",
				        s->name, (long long)s->dim[ax], ax + 1, tp);
		}
		break;
	case OP_EMBEDDING:
		n.in[1] = whole(p, n.in[1]);
		if (is_split(p, n.in[0], 0)) {
			AS_embedding_vocab_parallel(&n, 1); /* vocab-parallel: ids outside this rank's rows give zeros */
			out = sh_partial();
		} else
			n.in[0] = whole(p, n.in[0]);
		break;
	case OP_LINEAR:
		if (part_linear(p, s, &n, &out))
			return -1;
		break;
	case OP_MATMUL:
		if (is_split(p, n.in[0], 0) && is_split(p, n.in[1], 0) && s->ndim == 3)
			out = sh_split(0);
		else
			n.in[0] = whole(p, n.in[0]), n.in[1] = whole(p, n.in[1]);
		break;
	case OP_ADD: case OP_SUB: case OP_MUL: case OP_DIV:
		if (part_binary(p, s, &n, &out))
			return -1;
		break;
	case OP_SCALE:
		out = D(p, n.in[0])->shard;
		break;
	case OP_SILU: case OP_GELU: case OP_SIGMOID:
		n.in[0] = summed(p, n.in[0]);
		out = D(p, n.in[0])->shard;
		break;
	case OP_SOFTMAX: case OP_RMSNORM: case OP_LAYERNORM: case OP_TOPK: case OP_ARGMAX:
		n.in[0] = summed(p, n.in[0]);
		if (is_split(p, n.in[0], -1))
			n.in[0] = whole(p, n.in[0]);
		for (int i = 1; i < n.nin; i++)
			n.in[i] = whole(p, n.in[i]);
		out = D(p, n.in[0])->shard;
		if (s->op == OP_ARGMAX && out.kind == SH_SPLIT && out.axis >= s->ndim)
			out = sh_rep();
		break;
	case OP_SWIGLU:
		n.in[0] = summed(p, n.in[0]), n.in[1] = summed(p, n.in[1]);
		if (D(p, n.in[0])->shard.kind == SH_SPLIT && D(p, n.in[0])->shard.axis == D(p, n.in[1])->shard.axis &&
		    D(p, n.in[1])->shard.kind == SH_SPLIT)
			out = D(p, n.in[0])->shard;
		else
			n.in[0] = whole(p, n.in[0]), n.in[1] = whole(p, n.in[1]);
		break;
	case OP_ROPE:
		if (part_rope(p, s, &n, &out))
			return -1;
		break;
	case OP_ATTENTION:
		if (part_attention(p, s, &n, &out))
			return -1;
		break;
	case OP_MLA:
		n.in[0] = summed(p, n.in[0]);
		for (int i = 1; i < n.nin; i++)
			n.in[i] = whole(p, n.in[i]);
		if (is_split(p, n.in[0], 1) && A_mla_heads(s) % tp == 0) {
			AS_mla_heads(&n, A_mla_heads(s) / tp);
			out = sh_split(1);
		} else
			n.in[0] = whole(p, n.in[0]);
		break;
	case OP_MOE_FFN:
		for (int i = 0; i < 3; i++)
			n.in[i] = whole(p, n.in[i]);
		if (is_split(p, n.in[3], 1) && is_split(p, n.in[4], 1) && is_split(p, n.in[5], 2))
			out = sh_partial();
		else
			for (int i = 3; i < 6; i++)
				n.in[i] = whole(p, n.in[i]);
		break;
	case OP_RESHAPE:
		if (part_reshape(p, s, &n, &out))
			return -1;
		break;
	case OP_PERMUTE: {
		const Node *x = D(p, n.in[0]);
		if (x->shard.kind == SH_PARTIAL)
			out = sh_partial();
		else if (x->shard.kind == SH_SPLIT)
			for (int i = 0; i < x->ndim; i++)
				if (A_permute_axis(s, i) == x->shard.axis)
					out = sh_split(i);
		break;
	}
	case OP_SLICE: {
		const Node *x = D(p, n.in[0]);
		if (x->shard.kind == SH_SPLIT && x->shard.axis == A_slice_axis(s))
			n.in[0] = whole(p, n.in[0]);
		else
			out = D(p, n.in[0])->shard;
		break;
	}
	case OP_CONCAT:
		if (part_concat(p, s, &n, &out))
			return -1;
		break;
	default: /* indexer, MoE routing: whole operands, replicated result */
		for (int i = 0; i < n.nin; i++)
			n.in[i] = whole(p, n.in[i]);
		break;
	}
	for (int i = 0; i < n.nin; i++)
		if (n.in[i] < 0)
			return -1;
	int id = emit(p, &n, sid);
	if (id < 0)
		return -1;
	p->d->node[id].shard = out;
	p->map[sid] = id;
	return 0;
}

int partition(Graph *g, int tp, FILE *explain, char *err, size_t len)
{
	if (tp == 1)
		return 0;
	Arena *A = g->A;
	Graph *d = arena_alloc(A, sizeof *d);
	graph_init(d, A);
	Part p = {.s = g, .d = d, .tp = tp, .explain = explain, .err = err, .len = len};
	p.map = arena_alloc(A, sizeof(int) * (size_t)g->n);
	for (int i = 0; i < g->n; i++)
		if (part_node(&p, i))
			return -1;
	/* Outputs are whole on every rank. */
	for (int i = 0; i < g->nout; i++) {
		int v = whole(&p, p.map[g->out[i]]);
		if (v < 0)
			return -1;
		d->out[i] = v, d->out_name[i] = g->out_name[i];
	}
	d->nout = g->nout;
	/* Weights keep their binding; the loader takes the rank's part along the split axis. */
	d->w = arena_alloc(A, sizeof(WeightRef) * (size_t)(g->nw ? g->nw : 1));
	d->nw = d->wcap = g->nw;
	for (int i = 0; i < g->nw; i++) {
		d->w[i] = g->w[i];
		int v = p.map[g->w[i].node];
		d->w[i].node = v;
		d->w[i].split = d->node[v].shard.kind == SH_SPLIT ? d->node[v].shard.axis : -1;
	}
	d->meta = g->meta, d->nmeta = g->nmeta, d->metacap = g->metacap;
	char buf[32];
	snprintf(buf, sizeof buf, "%d", tp);
	graph_set_meta(d, "tp", buf);
	snprintf(buf, sizeof buf, "%d", p.nreduce);
	graph_set_meta(d, "allreduces_per_step", buf);
	snprintf(buf, sizeof buf, "%d", p.ngather);
	graph_set_meta(d, "allgathers_per_step", buf);
	Arena *keep = g->A;
	*g = *d;
	g->A = keep;
	return 0;
}
