/*
** runtime/core/ir.c — the graph: SSA nodes in an arena-backed array, metadata, and the text dump.
*/
#include "glm.h"

#include <string.h>

void graph_init(Graph *g, Arena *A)
{
	memset(g, 0, sizeof *g);
	g->A = A;
}

/* Append a node; arrays grow by copying inside the arena (old copies are garbage until arena_free). */
int graph_add(Graph *g, const Node *n)
{
	if (g->n == g->cap) {
		int cap = g->cap ? g->cap * 2 : 256;
		Node *nn = arena_alloc(g->A, sizeof(Node) * (size_t)cap);
		if (g->n)
			memcpy(nn, g->node, sizeof(Node) * (size_t)g->n);
		g->node = nn, g->cap = cap;
	}
	for (int i = 0; i < n->nin; i++)
		GLM_ASSERT(n->in[i] >= 0 && n->in[i] < g->n);
	g->node[g->n] = *n;
	return g->n++;
}

/* Metadata travels in the plan; setting a key twice replaces it. */
void graph_set_meta(Graph *g, const char *key, const char *val)
{
	for (int i = 0; i < g->nmeta; i++)
		if (!strcmp(g->meta[i].key, key)) {
			g->meta[i].val = arena_strdup(g->A, val);
			return;
		}
	graph_add_meta(g, key, val);
}

void graph_add_meta(Graph *g, const char *key, const char *val)
{
	if (g->nmeta == g->metacap) {
		int cap = g->metacap ? g->metacap * 2 : 32;
		Meta *m = arena_alloc(g->A, sizeof(Meta) * (size_t)cap);
		if (g->nmeta)
			memcpy(m, g->meta, sizeof(Meta) * (size_t)g->nmeta);
		g->meta = m, g->metacap = cap;
	}
	g->meta[g->nmeta].key = arena_strdup(g->A, key);
	g->meta[g->nmeta].val = arena_strdup(g->A, val);
	g->nmeta++;
}

/* Fusion reasons have their own list (not metadata keys), grown by doubling like the metadata. */
void graph_add_fusion(Graph *g, const char *text)
{
	if (g->nfusion == g->fusioncap) {
		int cap = g->fusioncap ? g->fusioncap * 2 : 64;
		const char **f = arena_alloc(g->A, sizeof *f * (size_t)cap);
		if (g->nfusion)
			memcpy(f, g->fusion, sizeof *f * (size_t)g->nfusion);
		g->fusion = f, g->fusioncap = cap;
	}
	g->fusion[g->nfusion++] = arena_strdup(g->A, text);
}

/* Collectives carry no kernel name (Launch.kind says what they are); messages still need one. */
const char *launch_name(const Launch *l)
{
	return l->kind == LK_ALLREDUCE ? "allreduce" : l->kind == LK_ALLGATHER ? "allgather" : l->kernel;
}

const char *graph_meta(const Graph *g, const char *key)
{
	for (int i = 0; i < g->nmeta; i++)
		if (!strcmp(g->meta[i].key, key))
			return g->meta[i].val;
	return NULL;
}

/* The template a launch's wrapper instantiates ("k_qgemv<float, 12, ...>"), read back from the emitted
** source: an emit dump says which kernel each launch runs, and glmrun knows which launches are a plain
** prefill GEMM (those alone may go through cuBLASLt). A collective's own name otherwise. */
const char *cuda_template(const Graph *g, const char *kernel, char *buf, size_t len)
{
	char key[64];
	snprintf(key, sizeof key, " %s(", kernel);
	const char *s = g->cuda.source ? strstr(g->cuda.source, key) : NULL;
	const char *b = s ? strstr(s, "{ ") : NULL, *e;
	if (b && !strncmp(b + 2, "glm_pdl_wait(); ", 16))
		b += 16; /* most wrappers wait first (emit_cuda.c w_finish) */
	if (b && !strncmp(b + 2, "extern __shared__", 17)) /* then declare their dynamic shared memory */
		b = strstr(b, "glm_dsm[]; ") ? strstr(b, "glm_dsm[]; ") + 9 : NULL;
	e = b ? strchr(b, '(') : NULL;
	if (!e || (size_t)(e - b - 2) >= len)
		return kernel;
	memcpy(buf, b + 2, (size_t)(e - b - 2));
	buf[e - b - 2] = 0;
	return buf;
}

/* The element type a weight has on the GPU: float for a rope's frequency divisors (glmrun folds them
** into the rope table, and the CPU mirror of a bf16 plan must not round them), the plan's conversion type
** when it converts (bf16 plans convert every other float weight), the activation type for a linear's
** bias (the kernels add it as an A value: a bf16 checkpoint's bias in an f32 plan is widened at upload),
** float for GGUF blocks expanded at upload, else the stored type. Which blocks stay quantized is
** Cuda.wq's business, not this. */
int cuda_wdtype(const Graph *g, int id)
{
	const Node *n = &g->node[id];
	if (g->cuda.bias) /* the readers below, found once by emit_cuda */
		return g->cuda.bias[id] == 2 ? DT_F32 : g->cuda.wconv >= 0 ? g->cuda.wconv : g->cuda.bias[id] ? g->cuda.act
		       : n->dtype == DT_Q ? DT_F32 : n->dtype;
	for (int i = id + 1; n->ndim == 1 && i < g->n; i++)
		if (g->node[i].op == OP_ROPE && g->node[i].nin > 2 && g->node[i].in[2] == id)
			return DT_F32;
	if (g->cuda.wconv >= 0)
		return g->cuda.wconv;
	for (int i = id + 1; i < g->n; i++)
		if (g->node[i].op == OP_LINEAR && g->node[i].nin > 2 && g->node[i].in[2] == id)
			return g->cuda.act;
	return n->dtype == DT_Q ? DT_F32 : n->dtype;
}

/* Whether launch i is a linear's own prefill GEMM, which glmrun may run through cuBLASLt instead. Not
** every launch from 2 tokens whose first output is its linear: a fused decode GEMV hosted at a linear is
** one too, and cuBLASLt would compute that member alone, from a norm or SwiGLU no kernel stored. */
int cuda_prefill_gemm(const Graph *g, int i)
{
	char buf[160];
	if (g->node[g->cuda.l[i].node].op != OP_LINEAR || g->cuda.l[i].tmin < 2)
		return 0; /* the source is searched only for the launches that may be one */
	const char *t = cuda_template(g, g->cuda.l[i].kernel, buf, sizeof buf);
	return !strncmp(t, "k_linear_gemm<", 14) || !strncmp(t, "k_qlinear_gemm<", 15) || !strncmp(t, "k_gemm_tc<", 10);
}

static const char *dtype_names[DT_NTYPES] = {"f32", "f16", "bf16", "i32", "q"};
static const size_t dtype_sizes[DT_NTYPES] = {4, 2, 2, 4, 0};
static const char *kind_names[VK_NKINDS] = {"act", "weight", "cache", "input"};

const char *dtype_name(int dt)
{
	return dt >= 0 && dt < DT_NTYPES ? dtype_names[dt] : "?";
}

int dtype_from_name(const char *s)
{
	for (int i = 0; i < DT_NTYPES; i++)
		if (!strcmp(s, dtype_names[i]))
			return i;
	return -1;
}

size_t dtype_size(int dt)
{
	return dt >= 0 && dt < DT_NTYPES ? dtype_sizes[dt] : 0;
}

const char *kind_name(int k)
{
	return k >= 0 && k < VK_NKINDS ? kind_names[k] : "?";
}

int64_t node_numel(const Node *n, int64_t T, int64_t S)
{
	int64_t e = 1;
	for (int i = 0; i < n->ndim; i++)
		e *= n->dim[i] == DIM_T ? T : n->dim[i] == DIM_S ? S : n->dim[i];
	return e;
}

/* Here in the core, not in exec.c: the op table's CPU references (ops.c) call them, as the executor above does. */
int64_t exec_dim(const Exec *x, int id, int i)
{
	int64_t d = x->g->node[id].dim[i];
	return d == DIM_T ? x->T : d == DIM_S ? x->S : d;
}

int64_t exec_numel(const Exec *x, int id)
{
	return node_numel(&x->g->node[id], x->T, x->S);
}

/* In the core (not fuse.c) because the memory plan reads views through it too. */
int fuse_root(const Graph *g, int v)
{
	while (g->node[v].op == OP_RESHAPE && g->node[g->node[v].in[0]].kind == VK_ACT)
		v = g->node[v].in[0];
	return v;
}

const char *shape_str(const Node *n, char *buf, size_t len)
{
	size_t k = (size_t)snprintf(buf, len, "%s[", dtype_name(n->dtype));
	for (int i = 0; i < n->ndim && k < len; i++) {
		const char *sep = i ? "," : "";
		if (n->dim[i] == DIM_T)
			k += (size_t)snprintf(buf + k, len - k, "%sT", sep);
		else if (n->dim[i] == DIM_S)
			k += (size_t)snprintf(buf + k, len - k, "%sS", sep);
		else
			k += (size_t)snprintf(buf + k, len - k, "%s%lld", sep, (long long)n->dim[i]);
	}
	if (k < len)
		snprintf(buf + k, len - k, "]");
	return buf;
}

/* Print attributes by the names the op table gives them; zero-valued ones are shown too, since a
** zero (e.g. interleaved=0) is as meaningful as any other value. */
static void dump_attrs(const Node *n, FILE *f)
{
	const OpDef *d = &op_table[n->op];
	for (int i = 0; i < MAXATTR && d->ia[i]; i++)
		fprintf(f, " %s=%lld", d->ia[i], (long long)n->ia[i]);
	for (int i = 0; i < MAXATTR && d->fa[i]; i++)
		fprintf(f, " %s=%.9g", d->fa[i], n->fa[i]);
}

void ir_dump(const Graph *g, FILE *f)
{
	char sb[96];
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		fprintf(f, "%%%d = %s", i, op_table[n->op].name);
		if (n->name)
			fprintf(f, " \"%s\"", n->name);
		for (int j = 0; j < n->nin; j++)
			fprintf(f, "%s%%%d", j ? ", " : " ", n->in[j]);
		dump_attrs(n, f);
		fprintf(f, " : %s", shape_str(n, sb, sizeof sb));
		if (n->kind != VK_ACT)
			fprintf(f, " %s", kind_name(n->kind));
		if (n->fuse_pattern && n->fused_into >= 0)
			fprintf(f, " fused-into(%%%d)", n->fused_into);
		if (n->mem_region)
			fprintf(f, " @%s+%lld", n->mem_region == MEM_TOKEN ? "tok" : "static", (long long)n->mem_off);
		if (n->shard.kind == SH_SPLIT)
			fprintf(f, " split(%d)", n->shard.axis);
		else if (n->shard.kind == SH_PARTIAL)
			fprintf(f, " partial");
		fprintf(f, "\n");
	}
	for (int i = 0; i < g->nw; i++) {
		const WeightRef *w = &g->w[i];
		fprintf(f, "weight %%%d \"%s\" <- \"%s\" %s type %d @%llu+%llu", w->node, g->node[w->node].name,
		        w->source, w->file ? w->file : "?", w->qtype, (unsigned long long)w->offset,
		        (unsigned long long)w->nbytes);
		if (w->row0)
			fprintf(f, " rows from %lld", (long long)w->row0);
		if (w->unpermute)
			fprintf(f, " unpermute %d heads", w->unpermute);
		fprintf(f, "\n");
	}
	for (int i = 0; i < g->nout; i++)
		fprintf(f, "output \"%s\" %%%d\n", g->out_name[i], g->out[i]);
}

/* Graphviz: activations as boxes (fused nodes filled), leaves as ellipses, collectives as diamonds;
** edges follow the data. */
void ir_dot(const Graph *g, FILE *f)
{
	char sb[96];
	fprintf(f, "digraph glmc {\n  rankdir=TB;\n  node [fontname=\"monospace\", fontsize=10];\n");
	for (int i = 0; i < g->n; i++) {
		const Node *n = &g->node[i];
		const char *shape = n->kind != VK_ACT ? "ellipse"
		                    : n->op == OP_ALLREDUCE || n->op == OP_ALLGATHER ? "diamond" : "box";
		fprintf(f, "  n%d [shape=%s%s, label=\"%%%d %s%s%s\\n%s\"];\n", i, shape,
		        n->fuse_pattern && n->fused_into >= 0 ? ", style=filled, fillcolor=lightblue" : "", i,
		        op_table[n->op].name, n->name ? " " : "", n->name ? n->name : "", shape_str(n, sb, sizeof sb));
		for (int k = 0; k < n->nin; k++)
			fprintf(f, "  n%d -> n%d;\n", n->in[k], i);
		if (n->fuse_pattern && n->fused_into >= 0)
			fprintf(f, "  n%d -> n%d [style=dashed, color=blue, label=\"fused\"];\n", i, n->fused_into);
	}
	for (int i = 0; i < g->nout; i++)
		fprintf(f, "  out%d [shape=plaintext, label=\"%s\"];\n  n%d -> out%d;\n", i, g->out_name[i], g->out[i], i);
	fprintf(f, "}\n");
}
