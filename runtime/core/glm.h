/*
** runtime/core/glm.h — the core layer's header: arena and errors, IR, operator table, memory plan, plan
** format, and the CPU executor's state the operator table's references read. The layers above add their
** own headers (formats, gpu/libnvrtc.h, exec/exec.h, compiler/passes/passes.h).
**
** Sections follow the files that implement them (chibicc style). The IR is a flat array of SSA nodes
** in one arena per compilation; node i may only read nodes < i, so array order is a valid schedule.
*/
#ifndef GLM_H
#define GLM_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define GLM_VERSION "0.1.0"

/*
** arena.c
*/
typedef struct ArenaBlock ArenaBlock;
typedef struct {
	ArenaBlock *head;
	size_t used;                 /* bytes handed out, for statistics */
} Arena;

void *arena_alloc(Arena *a, size_t n);               /* zeroed, 16-byte aligned; exits on OOM */
char *arena_strdup(Arena *a, const char *s);
char *arena_printf(Arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void arena_free(Arena *a);

/* Internal invariant broken: a bug in glmc, not in the user's input. */
#define GLM_ASSERT(c) ((c) ? (void)0 : glm_die(__FILE__, __LINE__, #c))
_Noreturn void glm_die(const char *file, int line, const char *what);
/* Write a one-line message into err (snprintf that never overflows); returns -1 for `return seterr(...)`. */
int seterr(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* s with control bytes written as \xNN, in buf (truncated to n), for names from files printed raw. */
const char *esc_ctl(const char *s, char *buf, size_t n);

/*
** ir.c — values, nodes, graphs
*/
/* DT_Q: a ggml block-quantized weight (its ggml type id is in the WeightRef); computed on as float32. */
enum { DT_F32, DT_F16, DT_BF16, DT_I32, DT_Q, DT_NTYPES };

/* What a value is. Weights come from the checkpoint; caches persist across steps; inputs are the
** per-step values the runtime writes (token ids, positions); everything else is an activation. */
enum { VK_ACT, VK_WEIGHT, VK_CACHE, VK_INPUT, VK_NKINDS };

/* Sharding, filled by the Lua layer library's hints now and by the partitioner later. */
enum { SH_REPLICATED, SH_SPLIT, SH_PARTIAL };
typedef struct {
	int8_t kind;                 /* SH_* */
	int8_t axis;                 /* for SH_SPLIT */
} Shard;

/* Symbolic dims, bound at run time. */
#define DIM_T (-2)               /* tokens in this step */
#define DIM_S (-3)               /* cache capacity (positions), from --max-seq */
#define MAXDIM 4
#define MAXIN 8
#define MAXATTR 10

typedef struct {
	int op;                      /* OP_* */
	int dtype;                   /* DT_* of the value this node produces */
	int kind;                    /* VK_* */
	int ndim;
	int64_t dim[MAXDIM];         /* static extent, or DIM_T / DIM_S */
	int nin;
	int in[MAXIN];               /* producer node ids, all < this node's id */
	int64_t ia[MAXATTR];         /* integer attributes: read through A_op_name(n), never by slot (ATTRS_*) */
	double fa[MAXATTR];          /* float attributes: likewise */
	const char *name;            /* weight canonical name, input/cache name; else NULL */
	Shard shard;
	const char *src;             /* model file and line that created the node, for errors */
	int line;
	int layer;                   /* transformer layer (glm.layer), -1 outside any */
	int8_t mem_region;           /* memplan: MEM_TOKEN, MEM_STATIC, or 0 (not an activation) */
	int64_t mem_off;             /* byte offset in its region (per token for MEM_TOKEN) */
	int fused_into;              /* fuse: the node whose decode-step GPU kernel also computes this one, or -1 */
	int8_t fuse_pattern;         /* FUSE_* */
} Node;

/* How a node is computed inside another node's kernel (fuse.c says when each applies):
** ADD_NORM: an rmsnorm in its residual add's pass; SWIGLU_GEMV: a SwiGLU formed as the down projection's
** GEMV stages its input; NORM_GEMV: an rmsnorm formed as the GEMV(s) reading it stage their input;
** GEMV_GROUP: a linear computed in the launch of another linear with the same input; GEMV_EPILOGUE: a
** residual add or a scale applied to a GEMV's result before it is stored; ROPE_KV: per-head norms and
** rotary of q and k, with the cache writes of their attention, in one kernel; MLA: the latent's and
** query's preparation and the value absorb of MLA attention; MOE: routing, and the experts' down
** projections with the shared expert and the adds after them. */
enum {
	FUSE_NONE, FUSE_ADD_NORM, FUSE_SWIGLU_GEMV, FUSE_NORM_GEMV, FUSE_GEMV_GROUP, FUSE_GEMV_EPILOGUE, FUSE_ROPE_KV,
	FUSE_MLA, FUSE_MOE, FUSE_NPATTERNS
};

enum { MEM_NONE, MEM_TOKEN, MEM_STATIC };

/* The activation arena: token_bytes · maxT + static_bytes, against the peak of live bytes. */
typedef struct {
	int planned;
	int64_t token_bytes, static_bytes;
	int64_t token_lower, static_lower;
} MemPlan;

/* A parameter's binding to the checkpoint: where its bytes are and what they must look like. */
typedef struct {
	int node;                    /* the VK_WEIGHT node */
	const char *source;          /* tensor name in the checkpoint */
	const char *file;            /* file holding it */
	int dtype;                   /* stored dtype (DT_*; DT_Q for ggml block types) */
	int qtype;                   /* stored ggml type id (F32 0, F16 1, BF16 30, Q8_0 8, ...) */
	uint64_t offset, nbytes;     /* the whole source tensor within that file */
	int64_t row0;                /* the parameter is rows [row0, row0 + rows) of the source (merged slots) */
	int slot_rows;               /* nonzero when the parameter is a row slot (even one at row 0) */
	int unpermute;               /* > 0: undo llama.cpp's q/k rope row permutation for this many heads */
	int64_t rstride, roff;       /* rstride > 0: a [B, R, C] parameter takes rows b·rstride + roff + [0, R) */
	int parts;                   /* > 0: stacked from `parts` tensors named by source with %d = 0.. */
	int split;                   /* tensor parallelism: the axis each rank takes 1/tp of, or -1 */
} WeightRef;

typedef struct {
	const char *key, *val;
} Meta;

/*
** The CUDA section of a plan (emit_cuda.c): kernel source, its cubin, and the launch list. A launch's
** grid dims and scalar arguments are Size expressions, evaluated by glmrun once T (and S) are known:
** node < 0 gives the constant div; otherwise ceil(product of dims [lo, hi) of node / div).
*/
typedef struct {
	int32_t node;
	int8_t lo, hi;
	int64_t div;
} Size;

/* KA_SCRATCH: a region of the shared scratch buffer of s × s2 × f bytes; a launch's scratch regions are
** laid out one after another from the start, so consecutive launches of one node see the same regions.
** KA_SEQ: the step's sequence slot per token (int32[T], kept by the runtime beside tokens and pos).
** KA_RANK: the int rank of the GPU running the launch (tensor parallelism; one program for all ranks).
** KA_ZERO: a region of s × s2 × f bytes of a buffer that glmrun clears once, when it allocates it, and
** that every kernel taking one leaves zero again when it ends (k_mla_split's per-launch counters: a
** kernel can count its own finished blocks there without a launch to clear them first). Laid out like
** KA_SCRATCH's regions, from the start, and shared by all launches.
** KA_PDL: an int, 1 when glmrun launches this kernel programmatically dependent on the one before
** (glmrun --pdl; only launches with this argument are), else 0. The decode GEMVs take it: they ask L2
** for their first weights before waiting only when that overlaps the kernel before (kernels.cuh).
** KA_P2P: a pointer, the one-shot allreduce's control block (P2pCtl, ops/kernels.cuh) when glmrun skipped
** the allreduce launched just before (marked by its Launch.inside_next) so that this kernel does it,
** else nullptr (k_add_rmsnorm_ar). */
enum { KA_BUF, KA_INT, KA_LONG, KA_FLOAT, KA_ROPE, KA_SCRATCH, KA_SEQ, KA_RANK, KA_ZERO, KA_PDL, KA_P2P };
typedef struct {
	int8_t kind;                 /* KA_*: BUF and ROPE use s.node (the rope table of that node) */
	Size s, s2;                  /* INT, LONG: s; SCRATCH, ZERO: s × s2 elements */
	double f;                    /* FLOAT; SCRATCH, ZERO: bytes per element; BUF: 1 when the kernel writes it */
} KArg;

/* What a launch is (Launch.kind). LK_KERNEL: a kernel of the module, by name. The collectives have no name:
** glmrun runs them through NCCL (or its one-shot P2P kernel). Their arguments: destination (KA_BUF, or
** KA_SCRATCH when a kernel reorders the gathered parts next), source (KA_BUF), source elements (KA_LONG). */
enum { LK_KERNEL, LK_ALLREDUCE, LK_ALLGATHER, LK_NKINDS };
/* The one-shot P2P allreduce (ops/kernels.cuh k_p2p_allreduce) that glmrun may run instead of NCCL for
** small messages; emitted into every plan with allreduces: (A *y, const A *x, long long n, P2pCtl *). */
#define KERNEL_P2P_ALLREDUCE "glm_p2p_allreduce"

/* Launch.flags. LAUNCH_NORM_LATE: the launch forms its RMSNorm prologue late (GP_RMSLATE: inv·(W·(x⊙nw)),
** x⊙nw never rounded to the activation type), so in a bf16 plan the linears it computes read their norm
** input unrounded while every other reader sees the rounded value (glmrun --round-bf16 models this:
** runtime/exec/exec.c exec_round_bf16). */
#define LAUNCH_NORM_LATE 1
/* LAUNCH_NORM_TC: the launch forms its RMSNorm prologue on the tensor cores (k_gemv_tc's GP_RMSLATE: its mma
** operand is bf16(x⊙nw), the inverse RMS applied after the dots), so in a bf16 plan the linears it computes
** read bf16(x⊙nw)·inv where every other reader sees bf16(x·inv·nw) (glmrun --round-bf16 models this too). */
#define LAUNCH_NORM_TC 2
/* LAUNCH_ONE_SEQ / LAUNCH_MULTI_SEQ: the launch runs only in steps whose rows are one sequence at consecutive
** positions (a prompt's chunk), or only in the others. A prefill of one sequence may take a path that
** costs per context row once for the whole step (MLA's keys and values expanded through kv_b, emit_cuda.c),
** which a step of many sequences, each with its own context, cannot; the two variants of a step are two
** schedules for memplan's checks. */
#define LAUNCH_ONE_SEQ 4
#define LAUNCH_MULTI_SEQ 8
#define LAUNCH_FLAGS_ALL (LAUNCH_NORM_LATE | LAUNCH_NORM_TC | LAUNCH_ONE_SEQ | LAUNCH_MULTI_SEQ)

#define MAXKARG 48
typedef struct {
	int node;                    /* the node this launch computes (part of) */
	int8_t kind;                 /* LK_* */
	int8_t inside_next;          /* LK_ALLREDUCE: the next launch takes KA_P2P and may do this allreduce itself
	                             ** (glmrun skips this launch then); 0 otherwise */
	const char *kernel;          /* LK_KERNEL: extern "C" name in the source; NULL for a collective */
	int tmin, tmax;              /* used when tmin <= T <= tmax */
	int flags;                   /* LAUNCH_* */
	Size grid[3];
	int block;
	int smem;                    /* dynamic shared memory, bytes (0: none; the kernel's last argument is it) */
	int narg;
	KArg arg[MAXKARG];
} Launch;

/* Whether launch l runs in a step of T rows; one_seq: the rows are one sequence at consecutive positions. */
static inline int launch_runs(const Launch *l, int64_t T, int one_seq)
{
	if (T < l->tmin || T > l->tmax)
		return 0;
	return !(l->flags & (one_seq ? LAUNCH_MULTI_SEQ : LAUNCH_ONE_SEQ));
}

/*
** A decode step as a persistent kernel's static task schedule (sched.c says why it is safe; compiler/passes/
** sched.c builds it). The launches of a step of T tokens are cut into tasks, each a contiguous range of one
** launch's blocks (numbered x fastest, then y, then z), and the tasks are dealt to `nworker` persistent
** blocks (`sms` SMs × `per_sm` blocks each), every worker's list in launch order. Launch i's tasks wait
** until each launch of wait[wait_off[i] .. wait_off[i + 1]) has counted all its ntask tasks finished.
*/
typedef struct {
	int32_t launch;              /* index into Cuda.l */
	int32_t blo, bhi;            /* blocks [blo, bhi) of that launch */
	int64_t bytes;               /* what the task reads and writes, for balancing (weights dominate) */
} SchedTask;

typedef struct {
	int T;                       /* the step's tokens (a decode bucket) */
	int sms, per_sm, nworker;    /* nworker = sms · per_sm persistent blocks, all resident at once */
	int block;                   /* threads a worker block: the largest block of the launches it runs */
	int nl;                      /* = Cuda.nl; per launch: */
	int32_t *ntask;              /* tasks (0: not run at T) */
	int8_t *share;               /* 1: the grid depends on the cache size S, which glmrun fixes: the launch's
	                             ** k tasks hold blo/bhi in [0, k] and take blocks [B·blo/k, B·bhi/k) of the
	                             ** B blocks glmrun evaluates (some may be empty when B < k) */
	int32_t *wait_off;           /* [nl + 1] */
	int32_t *wait;               /* the launches each launch waits for, all earlier than it */
	int ntask_all;
	SchedTask *task;             /* worker w runs task[first[w] .. first[w + 1]) in order */
	int32_t *first;              /* [nworker + 1] */
} Sched;

typedef struct {
	const char *arch;            /* "sm_90" */
	int act;                     /* activation dtype: DT_F32 or DT_BF16 */
	int wconv;                   /* float weights converted to this dtype at upload, or -1 to keep */
	const char *source;          /* the whole NVRTC program */
	const unsigned char *cubin;  /* may be NULL: glmrun compiles the source */
	size_t cubin_size;
	const char *sample_kernel;   /* the sampler's extern "C" name */
	Launch *l;
	int nl;
	/* Per weight (g->w order): the ggml type id the GPU keeps the weight in as GGUF blocks, rows as
	** quant_dev_row_bytes lays them out (kernels in ops/quant.cuh), or -1 for the float conversion above.
	** Plans with such weights also hold glm_qdequant_<id> (and, for random weights, glm_qrand_<id>,
	** glm_rand_{f32,bf16,f16}) for glmrun's upload and prefill. */
	int *wq;
	Sched *sched;                /* decode schedules for a persistent kernel (glmc --decode persistent), one per T */
	int nsched;
	const char *psource;         /* the persistent decode kernel's program (emit_cuda_persist), or NULL */
	const unsigned char *pcubin; /* psource compiled for arch, or NULL: glmrun compiles psource */
	size_t pcubin_size;
	const char *bias;            /* per node: 1 for a linear's bias, 2 for a rope's frequency table (emit_cuda
	                             ** fills it for cuda_wdtype; NULL: cuda_wdtype searches, as for a plan read back) */
} Cuda;

typedef struct {
	Arena *A;
	Node *node;
	int n, cap;
	int out[8];                  /* output node ids */
	const char *out_name[8];
	int nout;
	WeightRef *w;                /* one per VK_WEIGHT node, in node order */
	int nw, wcap;
	Meta *meta;                  /* model metadata kept in the plan (arch, eos ids, ...) */
	int nmeta, metacap;
	const char **fusion;         /* fuse.c's decisions, one line each ("fused: ...", "refused: ..."), in order;
	                             ** kept in the plan for glmc explain */
	int nfusion, fusioncap;
	Cuda cuda;                   /* empty (nl == 0) for CPU-only plans */
	MemPlan mem;
	struct FuseKernel *fk;       /* fuse.c's decisions for emit_cuda.c (compile time only, not in the plan) */
	int nfk, fkcap;
	struct KSel *sel;            /* select.c's kernel choices for emit_cuda.c (compile time only) */
	int nsel, selcap;
} Graph;

void graph_init(Graph *g, Arena *A);
int graph_add(Graph *g, const Node *n);              /* copies n, returns its id */
void graph_set_meta(Graph *g, const char *key, const char *val);
/* Append a key the caller knows is new (no search). */
void graph_add_meta(Graph *g, const char *key, const char *val);
/* Append one fusion reason (copied into the graph's arena). */
void graph_add_fusion(Graph *g, const char *text);
const char *graph_meta(const Graph *g, const char *key);
const char *cuda_template(const Graph *g, const char *kernel, char *buf, size_t len); /* "k_linear_gemm<float, ...>" */
/* A launch's name for messages and dumps: its kernel, or "allreduce" / "allgather". */
const char *launch_name(const Launch *l);
int cuda_prefill_gemm(const Graph *g, int launch);
int cuda_wdtype(const Graph *g, int weight);          /* a weight's element type on the GPU (DT_*) */
const char *dtype_name(int dt);
int dtype_from_name(const char *s);
size_t dtype_size(int dt);
const char *kind_name(int k);
int64_t node_numel(const Node *n, int64_t T, int64_t S); /* elements with T and S bound */
/* "f32[T,64]" into buf. */
const char *shape_str(const Node *n, char *buf, size_t len);
/* Text dump, one line per node; stable for golden tests. */
void ir_dump(const Graph *g, FILE *f);
/* The same graph as Graphviz DOT. */
void ir_dot(const Graph *g, FILE *f);
/* The root of a chain of views (reshapes of activations): the value whose buffer node v uses. */
int fuse_root(const Graph *g, int v);

/*
** ops.c — the operator table
*/
enum {
	OP_INPUT, OP_PARAM, OP_CACHE,
	OP_EMBEDDING, OP_LINEAR, OP_MATMUL,
	OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_SCALE,
	OP_SILU, OP_GELU, OP_SIGMOID, OP_SOFTMAX, OP_SWIGLU,
	OP_RMSNORM, OP_LAYERNORM, OP_ROPE, OP_ATTENTION,
	OP_TOPK, OP_ARGMAX,
	OP_RESHAPE, OP_SLICE, OP_CONCAT, OP_PERMUTE,
	OP_MLA, OP_INDEXER, OP_MOE_ROUTE, OP_MOE_WEIGHTS, OP_MOE_FFN,
	OP_ALLREDUCE, OP_ALLGATHER,
	OP_NOPS
};

/*
** Op attributes: one table per op, the only place that knows which slot of Node.ia (I, int64_t) or Node.fa
** (F, double) holds which attribute. Each entry (OP, op, name, slot) makes A_op_name(n) (read), AS_op_name(n,
** v) (write) and ASLOT_op_name (the slot, for attributes read by index: reshape's d0.., permute's p0..), and
** ops.c's op_table takes its attribute names (ir_dump's spelling) from the same lists. With GLM_DEBUG defined
** every accessor asserts the node's op, so a slot read under another op's name stops the program.
*/
#define ATTRS_EMBEDDING(I, F) I(EMBEDDING, embedding, vocab_parallel, 0)
#define ATTRS_MATMUL(I, F) I(MATMUL, matmul, transpose_b, 0)
#define ATTRS_SCALE(I, F) F(SCALE, scale, s, 0)
#define ATTRS_GELU(I, F) I(GELU, gelu, tanh, 0)
#define ATTRS_RMSNORM(I, F) F(RMSNORM, rmsnorm, eps, 0)
#define ATTRS_LAYERNORM(I, F) F(LAYERNORM, layernorm, eps, 0)
#define ATTRS_ROPE(I, F)                                                                                             \
	I(ROPE, rope, heads, 0) I(ROPE, rope, head_dim, 1) I(ROPE, rope, rot_dim, 2) I(ROPE, rope, interleaved, 3)   \
	I(ROPE, rope, orig_ctx, 4) I(ROPE, rope, scaling, 5)                                                         \
	F(ROPE, rope, theta, 0) F(ROPE, rope, factor, 1) F(ROPE, rope, beta_fast, 2) F(ROPE, rope, beta_slow, 3)     \
	F(ROPE, rope, mscale, 4) F(ROPE, rope, mscale_all_dim, 5) F(ROPE, rope, attn_factor, 6)                     \
	F(ROPE, rope, low_freq_factor, 7) F(ROPE, rope, high_freq_factor, 8)
#define ATTRS_ATTENTION(I, F)                                                                                        \
	I(ATTENTION, attention, heads, 0) I(ATTENTION, attention, kv_heads, 1) I(ATTENTION, attention, head_dim, 2) \
	I(ATTENTION, attention, v_head_dim, 3) F(ATTENTION, attention, scale, 0)
#define ATTRS_TOPK(I, F) I(TOPK, topk, k, 0)
#define ATTRS_RESHAPE(I, F)                                                                                          \
	I(RESHAPE, reshape, d0, 0) I(RESHAPE, reshape, d1, 1) I(RESHAPE, reshape, d2, 2) I(RESHAPE, reshape, d3, 3)  \
	I(RESHAPE, reshape, ndim, 4)
#define ATTRS_SLICE(I, F) I(SLICE, slice, axis, 0) I(SLICE, slice, start, 1) I(SLICE, slice, len, 2)
#define ATTRS_CONCAT(I, F) I(CONCAT, concat, axis, 0)
#define ATTRS_PERMUTE(I, F)                                                                                          \
	I(PERMUTE, permute, p0, 0) I(PERMUTE, permute, p1, 1) I(PERMUTE, permute, p2, 2) I(PERMUTE, permute, p3, 3)
#define ATTRS_MLA(I, F) I(MLA, mla, heads, 0) I(MLA, mla, dk, 1) I(MLA, mla, dv, 2) F(MLA, mla, scale, 0)
#define ATTRS_INDEXER(I, F)                                                                                          \
	I(INDEXER, indexer, heads, 0) I(INDEXER, indexer, dim, 1) I(INDEXER, indexer, topk, 2)                      \
	F(INDEXER, indexer, scale, 0)
#define ATTRS_MOE_ROUTE(I, F)                                                                                        \
	I(MOE_ROUTE, moe_route, k, 0) I(MOE_ROUTE, moe_route, groups, 1) I(MOE_ROUTE, moe_route, topk_groups, 2)    \
	I(MOE_ROUTE, moe_route, sigmoid, 3)
#define ATTRS_MOE_WEIGHTS(I, F)                                                                                      \
	I(MOE_WEIGHTS, moe_weights, sigmoid, 0) I(MOE_WEIGHTS, moe_weights, norm, 1)                                 \
	F(MOE_WEIGHTS, moe_weights, scale, 0)
#define ATTRS_ALLGATHER(I, F) I(ALLGATHER, allgather, axis, 0) I(ALLGATHER, allgather, ranks, 1)
/* Partition's collectives carry the shard axis and the rank count; an allreduce's are never read (and not
** printed: op_table lists none), but plans keep them. */
#define ATTRS_ALLREDUCE(I, F) I(ALLREDUCE, allreduce, axis, 0) I(ALLREDUCE, allreduce, ranks, 1)
#define ATTRS_ALL(I, F)                                                                                              \
	ATTRS_EMBEDDING(I, F) ATTRS_MATMUL(I, F) ATTRS_SCALE(I, F) ATTRS_GELU(I, F) ATTRS_RMSNORM(I, F)             \
	ATTRS_LAYERNORM(I, F) ATTRS_ROPE(I, F) ATTRS_ATTENTION(I, F) ATTRS_TOPK(I, F) ATTRS_RESHAPE(I, F)           \
	ATTRS_SLICE(I, F) ATTRS_CONCAT(I, F) ATTRS_PERMUTE(I, F) ATTRS_MLA(I, F) ATTRS_INDEXER(I, F)                \
	ATTRS_MOE_ROUTE(I, F) ATTRS_MOE_WEIGHTS(I, F) ATTRS_ALLREDUCE(I, F) ATTRS_ALLGATHER(I, F)

#ifdef GLM_DEBUG
#define ATTR_CHECK(n, OPC) GLM_ASSERT((n)->op == (OPC))
#else
#define ATTR_CHECK(n, OPC) ((void)0)
#endif
/* The accessors: an attribute read by its op's name, never by its slot. */
#define ATTR_DEF(OP, op, name, slot, arr, T)                                                                         \
	enum { ASLOT_##op##_##name = slot };                                                                         \
	static inline T A_##op##_##name(const Node *n)                                                               \
	{                                                                                                            \
		ATTR_CHECK(n, OP_##OP);                                                                              \
		return n->arr[slot];                                                                                 \
	}                                                                                                            \
	static inline void AS_##op##_##name(Node *n, T v)                                                            \
	{                                                                                                            \
		ATTR_CHECK(n, OP_##OP);                                                                              \
		n->arr[slot] = v;                                                                                    \
	}
#define ATTR_DEF_I(OP, op, name, slot) ATTR_DEF(OP, op, name, slot, ia, int64_t)
#define ATTR_DEF_F(OP, op, name, slot) ATTR_DEF(OP, op, name, slot, fa, double)
ATTRS_ALL(ATTR_DEF_I, ATTR_DEF_F)
#undef ATTR_DEF_I
#undef ATTR_DEF_F
#undef ATTR_DEF

/* rmsnorm's or layernorm's eps, for code that serves both. */
static inline double A_norm_eps(const Node *n)
{
	return n->op == OP_LAYERNORM ? A_layernorm_eps(n) : A_rmsnorm_eps(n);
}

/* Reshape's target dims (d0..d3) and permute's source axes (p0..p3) are read by index i < 4. */
static inline int64_t A_reshape_dim(const Node *n, int i)
{
	ATTR_CHECK(n, OP_RESHAPE);
	return n->ia[ASLOT_reshape_d0 + i];
}
static inline void AS_reshape_dim(Node *n, int i, int64_t v)
{
	ATTR_CHECK(n, OP_RESHAPE);
	n->ia[ASLOT_reshape_d0 + i] = v;
}
/* All four target dims at once, for code that takes a dims array. */
static inline const int64_t *A_reshape_dims(const Node *n)
{
	ATTR_CHECK(n, OP_RESHAPE);
	return &n->ia[ASLOT_reshape_d0];
}
static inline int64_t A_permute_axis(const Node *n, int i)
{
	ATTR_CHECK(n, OP_PERMUTE);
	return n->ia[ASLOT_permute_p0 + i];
}
static inline void AS_permute_axis(Node *n, int i, int64_t v)
{
	ATTR_CHECK(n, OP_PERMUTE);
	n->ia[ASLOT_permute_p0 + i] = v;
}

typedef struct Exec Exec;

typedef struct {
	const char *name;
	int nin_min, nin_max;
	const char *ia[MAXATTR];     /* names of the integer attributes in use (NULL ends), from ATTRS_* */
	const char *fa[MAXATTR];     /* names of the float attributes in use, from ATTRS_* */
	/* Infer n's dtype/ndim/dim from its inputs and attributes; on error write a message naming the
	** shapes involved and return -1. */
	int (*shape)(const Graph *g, Node *n, char *err, size_t len);
	/* Float32 reference execution (the oracle). */
	void (*cpu)(Exec *x, int id);
} OpDef;

extern const OpDef op_table[OP_NOPS];
int op_from_name(const char *s);
/* A rope node's inverse frequencies [rot_dim/2] and cos/sin multiplier, as the CPU reference uses them;
** freq_div: the values of its third input (per-frequency divisors) when it has one, else NULL. */
void op_rope_table(const Node *n, const float *freq_div, float *inv_freq, float *cs_scale);

/*
** verify.c
*/
/* Re-derive every node's shape and check SSA order, kinds, outputs and weight refs. */
int verify(const Graph *g, char *err, size_t len);

/*
** memplan.c — activation offsets in one arena
*/
/* Plan every activation's offset (optimize = 0 gives each value its own slot, for -O0), then check. The
** liveness covers every schedule that runs the plan: the CPU executor's node order and, when emit_cuda has
** filled g->cuda, the GPU launch list at every step size (so emit_cuda runs first). */
int memplan(Graph *g, int optimize, char *err, size_t len);
/* Prove that no two activations overlap while both are live, in each of those schedules separately, and
** that each GPU launch reads only activations an earlier launch of the same step wrote. */
int memplan_check(const Graph *g, char *err, size_t len);
/* Which activations the GPU stores in a step of T tokens: mark[i] = 1 when some launch used at T reads
** or writes node i's buffer (views included). A fused-away value (a norm formed inside a GEMV) is 0. */
void cuda_touched(const Graph *g, int64_t T, int one_seq, unsigned char *mark);
/* Bytes of a node's value per token (*region MEM_TOKEN) or in all (MEM_STATIC), as memplan lays it out. */
int64_t memplan_value_bytes(const Node *n, int *region);

/*
** sched.c — what a persistent decode schedule must satisfy, and the proof that it does
*/
/* Launches i < j of a step of T tokens conflict when one writes memory the other reads or writes
** (activation bytes after the memory plan's reuse, caches, the shared scratch and zeroed regions, the P2P
** mailbox). Sets conf[i·nl + j] (i < j) for every conflicting pair of launches used at T; returns -1 when a
** launch used at T cannot run inside a persistent kernel (a GEMM cuBLASLt may take; why in err). */
int sched_conflicts(const Graph *g, int T, unsigned char *conf, char *err, size_t len);
/* The plan's schedule for steps of T tokens, or NULL when it has none (one a T at most: sched_build). */
const Sched *sched_for(const Cuda *c, int T);
/* The bytes launch i moves at T (its weights, activations and cache rows), the balancing weight. */
int64_t sched_launch_bytes(const Graph *g, int i, int T);
/* glmrun's fallback where P2P cannot carry a step's collectives: the persistent kernel's launches in a step
** of T tokens, 1 + the collectives used at T (tensor parallelism), which run on the stream between them. seg (may be NULL), per launch: the segment it runs in (a collective
** counts with the segment after it). */
int sched_segments(const Graph *g, int T, int *seg);
/* Lanes of a body of `block` threads in a persistent worker of `worker` (ops/persist.cuh: blocks run at once
** on disjoint threads, each with `lane_bytes` of shared memory): as many as fit, at most SCHED_LANES_MAX and
** `budget` bytes in all, at least 1. */
#define SCHED_LANES_MAX 8 /* ops/persist.cuh GLM_P_LANES: named barriers 1 .. 8 */
int sched_lanes(int worker, int block, int64_t lane_bytes, int64_t budget);
/* A lane's shared memory for a body whose kernel takes dyn_smem bytes of dynamic and static_smem of static
** shared memory (its arrays, GLM_SH): *own the first rounded to 128, *pool the second rounded to 128 with 256
** bytes for the arrays' alignment in the pool. glmrun and glmc explain size lanes by it. */
void sched_lane_bytes(int64_t dyn_smem, int64_t static_smem, int64_t *own, int64_t *pool);
/* Whether launch i's body may run in lanes: its template keeps no block-sized plain __shared__ arrays, which
** lanes would share (the decode attention's merge: k_attn_*; kernels.cuh GLM_SH_LANE gives the block
** reductions' small ones a copy a lane). */
int sched_lanes_ok(const Graph *g, int i);
/* A launch's blocks at T (the product of its grid; a collective's P2P blocks, or 0 where the next launch does
** it or P2P cannot: sched.c's essay), 0 when it is not used at T; *uses_s set when the grid depends on the
** cache size S (the count is then taken at S = 1). */
int64_t sched_launch_blocks(const Graph *g, int i, int T, int *uses_s);
/* The one-shot P2P exchange's blocks for a message of `bytes` (a block a 512 × 16 bytes, 1 .. P2P_NBMAX of
** ops/kernels.cuh): glmrun's P2P launches and the persistent kernel's collective tasks. */
#define SCHED_P2P_NBMAX 64
int64_t sched_coll_blocks(int64_t bytes);
/* Collective launch i's message at T: its source's bytes on one rank. */
int64_t sched_coll_bytes(const Graph *g, int i, int T);
/* The largest message of the collectives that the plan's schedule for T runs as tasks (0: none), which the
** P2P mailbox must hold for the step to be one launch. */
int64_t sched_coll_max_bytes(const Graph *g, int T);
/* Prove s safe for g: every used launch's blocks covered once by its tasks, each worker's list in launch
** order, every wait on an earlier launch, and every conflicting pair ordered by the waits (transitively).
** With all workers resident, that excludes deadlock under any interleaving (sched.c). */
int sched_check(const Graph *g, const Sched *s, char *err, size_t len);
/* Run s under `rounds` random interleavings of its workers (seeded), each task starting only when its
** waits are met: reports a deadlock, or a task that starts while a conflicting earlier launch still has
** tasks unfinished. Independent of sched_check's proof (it uses only the waits and the conflicts). */
int sched_simulate(const Graph *g, const Sched *s, uint64_t seed, int rounds, char *err, size_t len);
/* A summary line (workers, tasks, waits, balance), then with `launches` one line a launch (tasks, waits):
** glmc explain and glmc dump --after sched. */
void sched_dump(const Graph *g, const Sched *s, int launches, FILE *f);

/*
** plan.c — the plan file, the contract between glmc and glmrun
**
** Layout: 8-byte magic "GLMPLAN\n", u32 format version, u32 crc32 of the payload, u64 payload bytes,
** then the payload: metadata, fusion reasons, weight manifest, nodes, outputs (little-endian, strings length-prefixed).
*/
#define PLAN_MAGIC "GLMPLAN\n"
/* 15: a tensor-parallel schedule's collectives as P2P tasks, its waits across them;
** 14: the persistent kernel's cubin (Cuda.pcubin) after its program;
** 13: persistent decode schedules (Sched) and the persistent kernel's program after the CUDA section's weight types;
** 12: Launch.kind (collectives by kind, not by an '@' name) and Launch.inside_next (not a fourth KA_INT argument),
** fusion reasons as their own list after the metadata (not "fusion.NNNN" keys);
** 11: 10 attributes a node (rope's scaling kind and llama3 band); 10: Launch.smem, dynamic shared memory
** (k_qgemv_sk); 9: Launch.flags (LAUNCH_NORM_LATE: the decode GEMVs whose norm is read late, for --round-bf16's model);
** 8: glm_sample takes the greedy split's partials and counters and runs on grid (rows, SAMPLE_NB) (an
** older plan's sampler would advance each row once per block); 7: KA_P2P, an allreduce done inside the
** next kernel; 6: KA_PDL, the decode GEMVs' programmatic-launch flag (5: every kernel waits first) */
#define PLAN_VERSION 16

int plan_write(const Graph *g, const char *path, char *err, size_t len);
/* Read and verify a plan into g (allocated from g's arena). */
int plan_read(Graph *g, const char *path, char *err, size_t len);

/*
** The CPU executor's state, which the op table's CPU references read (its functions: runtime/exec/exec.h)
*/
/* Per node, what --round-bf16 keeps unrounded for a launch marked LAUNCH_NORM_LATE in steps of lo..hi tokens
** (lo 0: never): an rmsnorm's f32 output, copied to keep before it is rounded; a linear reads its rmsnorm
** input from that copy (keep NULL). */
typedef struct {
	int lo, hi;   /* LAUNCH_NORM_LATE steps: the linears read x·inv·nw unrounded */
	int tlo, thi; /* LAUNCH_NORM_TC steps: they read bf16(x·nw)·inv */
	float *keep;
} ExecLate;

struct Exec {
	const Graph *g;
	int64_t T, S;                /* bound symbolic dims for the current step */
	int64_t maxT;
	void **buf;                  /* per node: float* or int32_t* (inputs, argmax/topk) */
	float **wt;                  /* per node: float32 copy of a weight, else NULL */
	char *arena;                 /* the planned activations (NULL for unplanned graphs) */
	int rank, tp;                /* this executor's rank of tp (tensor parallelism on the CPU) */
	int nslots;                  /* sequences the caches hold (S rows each) */
	const int32_t *seq;          /* the current step's slot per token (NULL: all slot 0) */
	int round_act;               /* DT_BF16: values rounded as a bf16 plan stores them (exec_round_bf16), or DT_F32 */
	ExecLate *late;              /* with round_act DT_BF16 on a plan with LAUNCH_NORM_LATE launches: per node, else NULL */
	float *late_mem;             /* the rmsnorms' unrounded copies (ExecLate.keep), one block */
	int *moe_hb;                 /* with round_act DT_BF16: per node 2 ints, the steps lo..hi whose moe_ffn runs the
	                             ** grouped GEMM (its hidden rows stored in bf16; lo 0: none), else NULL */
	struct Par *par;             /* the linears' threads (ops/par.h), started by the first large linear */
	int par_tried;               /* 1 once that start was tried (par stays NULL on one thread) */
	char err[512];               /* first run-time error (e.g. token id out of range) */
	int nan_ok;                  /* 1: non-finite logits are not an error (--verify compares them) */
};

/* ir.c: concrete extent of dim i of node id in the current step. */
int64_t exec_dim(const Exec *x, int id, int i);
int64_t exec_numel(const Exec *x, int id);

#endif
