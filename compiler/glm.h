/*
** compiler/glm.h — the one header of glmc and glmrun: arena, IR, operator table, plan format.
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
	int64_t ia[MAXATTR];         /* integer attributes; names in the op table */
	double fa[MAXATTR];          /* float attributes; names in the op table */
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

/*
** A fused kernel, as fuse.c decides it and emit_cuda.c writes it. Compile-time only: the plan keeps the
** launches and each node's fused_into / fuse_pattern (for dumps), not this table.
*/
enum { FK_ADD_NORM, FK_GEMV, FK_ROPE_KV, FK_MLA_KV, FK_MLA_Q, FK_MLA_OUT, FK_MOE_ROUTE, FK_MOE_DOWN };
enum { GP_NONE, GP_RMSNORM, GP_SWIGLU };  /* FK_GEMV prologues: how a staged input element is formed */
/* The form emit_cuda.c gives a GP_RMSNORM group's one-token launch: the scale applied after the dot
** products (ops/kernels.cuh GEMV_PRO_RMSLATE; fuse.c never sets it; its launches carry LAUNCH_NORM_LATE). */
#define GP_RMSLATE 3
#define FK_MAXM 4
#define FK_MAXCOVER 24
typedef struct {
	int kind;                    /* FK_* */
	int host;                    /* launched where this node's own kernels are (its place in the kernel order) */
	int tmax;                    /* runs for steps of 1..tmax tokens; larger steps run the nodes' own kernels */
	int nm;                      /* members */
	int m[FK_MAXM];              /* ADD_NORM: the norm; GEMV: the linears; ROPE_KV: the q and k rope nodes */
	int out[FK_MAXM];            /* GEMV: the node each member's result is stored as (the linear, an add, a scale) */
	int res;                     /* GEMV: the residual added to member 0's result (out[0] is that add), or -1 */
	int pro, pro_node;           /* GEMV: GP_* and the rmsnorm or swiglu node it forms, or -1 */
	int store;                   /* GEMV, GP_RMSNORM: the normalised rows are stored too (other nodes read them) */
	int glu;                     /* GEMV: the swiglu computed from members 0 (gate) and 1 (up) and stored as out[0],
	                             ** or -1 (the GLU epilogue: the pair's own results are not stored) */
	int norm[2];                 /* ROPE_KV: the per-head rmsnorm before q and k rotary, or -1 */
	int attn;                    /* ROPE_KV: the attention whose k and v cache rows it writes */
	int fold;                    /* ROPE_KV: a 1-token step's attention may do it all itself (k_attn_step_rope;
	                             ** emit_cuda.c decides by the rows' bytes), reading the raw q, k and v */
	/* The MLA and MoE kernels' other nodes (see fuse.c), one record per kind; -1 for an absent one. */
	union {
		struct {             /* FK_MLA_KV: m[0] mla, m[1] its indexer or -1 */
			int kv;      /* the latent's rows (kv_a output) */
			int norm;    /* the latent rmsnorm */
			int rope;    /* the k_pe rope */
			int concat;  /* the latent concat the cache row is */
			int ikey;    /* the indexer key's source (its layernorm's input), or -1 */
			int inorm;   /* the indexer key's layernorm, or -1 */
			int irope;   /* the indexer key's rope, or -1 */
		} mla_kv;
		struct {             /* FK_MLA_Q: m[0] mla, m[1] its indexer or -1 */
			int q;       /* the query rows [T, H, Dn + Dr] */
			int wuk;     /* W_UK, the absorb matmul's weight */
			int wuk_t;   /* 1 when that matmul reads W_UK transposed (a flag, not a node) */
			int rope;    /* the q_pe rope */
			int concat;  /* the query concat the attention reads */
			int iquery;  /* the indexer query's source (its rope's input), or -1 */
			int irope;   /* the indexer query's rope, or -1 */
		} mla_q;
		struct {             /* FK_MLA_OUT: m[0] mla */
			int wuv;     /* W_UV, the absorb's weight */
			int out;     /* the [T, H, Dv] output (the last permute) */
		} mla_out;
		struct {             /* FK_MOE_DOWN: m[0] moe_ffn */
			int out;     /* the node stored (the last add) */
			int sdown;   /* the shared expert's down linear, or -1 */
			int sswiglu; /* its swiglu (valid with sdown) */
			int res;     /* the residual added, or -1 */
		} moe_down;
	};
	int ncover;
	int cover[FK_MAXCOVER];      /* nodes whose own kernels this one replaces for its steps */
} FuseKernel;

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
** runtime/exec.c exec_round_bf16). */
#define LAUNCH_NORM_LATE 1
/* LAUNCH_NORM_TC: the launch forms its RMSNorm prologue on the tensor cores (k_gemv_tc's GP_RMSLATE: its mma
** operand is bf16(x⊙nw), the inverse RMS applied after the dots), so in a bf16 plan the linears it computes
** read bf16(x⊙nw)·inv where every other reader sees bf16(x·inv·nw) (glmrun --round-bf16 models this too). */
#define LAUNCH_NORM_TC 2
#define LAUNCH_FLAGS_ALL (LAUNCH_NORM_LATE | LAUNCH_NORM_TC)

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
	FuseKernel *fk;              /* fuse.c's decisions for emit_cuda.c (compile time only, not in the plan) */
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

/*
** ops/ops.c — the operator table
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

typedef struct Exec Exec;

typedef struct {
	const char *name;
	int nin_min, nin_max;
	const char *ia[MAXATTR];     /* names of the integer attributes in use (NULL ends) */
	const char *fa[MAXATTR];     /* names of the float attributes in use */
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
** lua_front.c — run a model description, building the graph
*/
struct Weights;
/* What a model description can read: the checkpoint's metadata and its tensor table. */
typedef struct {
	const struct Weights *w;
	int layers;                  /* > 0: truncate to this many layers (glm.options.layers) */
	double lua_seconds;          /* > 0: CPU time the Lua run may take (default LUA_SECONDS, --lua-time) */
	size_t lua_mem;              /* > 0: bytes the Lua state may hold (default LUA_MEM_LIMIT, 2 GiB) */
	int force_model;             /* run the model on weights of another architecture (glm.options.force_model) */
} ModelMeta;

/* Run model_path in a sandboxed Lua state with libdir as the only require path. Errors are one line,
** "model.lua:LINE: message". */
int front_run(Graph *g, const char *model_path, const char *libdir, const ModelMeta *mm, char *err,
              size_t len);
/* No model file given: the model library's choice for the weights' architecture (libdir/nn.lua's
** pick_model over libdir/archs.lua) into file, relative to the models directory, and why, one line. */
int front_pick_model(Graph *g, const char *libdir, const ModelMeta *mm, char *file, size_t flen, char *why,
                     size_t wlen, char *err, size_t len);

/*
** bind.c — bind declared parameters to checkpoint tensors
*/
/* Fill g->w for every weight node from the checkpoint; list unused checkpoint tensors on `warn`
** (an error with strict). */
int bind_weights(Graph *g, const struct Weights *w, int strict, FILE *warn, char *err, size_t len);

/*
** fuse.c — fusion decisions (see the file for the patterns); act is the GPU's activation type (DT_BF16 or
** DT_F32), which decides the step sizes a bf16 GEMV group takes (k_gemv_tc's up to 16 tokens)
*/
int fuse(Graph *g, int enable, int act);
/* The root of a chain of views (reshapes of activations): the value whose buffer node v uses. */
int fuse_root(const Graph *g, int v);

/*
** partition.c — tensor parallelism
*/
/* Rewrite g into the per-rank program for tp ranks: local shapes, collectives, weight splits. Dropped
** hints are reported on explain. */
int partition(Graph *g, int tp, FILE *explain, char *err, size_t len);

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
void cuda_touched(const Graph *g, int64_t T, unsigned char *mark);

/*
** select.c — kernel selection (after fuse, before emit): resident quantized weights, and per decode GEMV
** group (FK_GEMV) the kernel of each step range with its chosen template parameters and why
*/
/* The GPU kernels are shaped for, from --arch. */
typedef struct {
	const char *arch;            /* "sm_90" */
	int sms;                     /* streaming multiprocessors */
	int smem_block;              /* dynamic shared memory a block may opt in to, bytes */
	int smem_sm;                 /* shared memory of an SM, bytes */
	int tc_gen;                  /* tensor-core generation (8: mma.sync, which every kernel uses; 9, 10 newer) */
} Target;
/* The Target of an --arch name; -1 for one glmc does not know. */
int target_for_arch(const char *arch, Target *t);

enum {
	SK_GEMV_FUSED, SK_GEMV_TC, SK_QGEMV_FUSED, SK_QGEMV_FUSED_MMA, SK_QGEMV_SK, SK_QGEMV_TC, /* groups (and k_qgemv_tc) */
	SK_LINEAR_GEMV, SK_LINEAR_GEMM, SK_QGEMV, SK_QGEMV_MMA, SK_QLINEAR_GEMM, SK_GEMM_TC, /* a linear's own kernels */
	SK_MOE_DOWN_FUSED, SK_QMOE_DOWN_FUSED, SK_QMOE_DOWN_MMA, /* FK_MOE_DOWN */
	SK_NKINDS
};
/* One launch of a decode GEMV group as chosen. Which fields a kernel uses: k_gemv_fused pro rb tr block grid
** minb; k_gemv_tc pro mt nt uc block grid; k_qgemv_fused qt split pro (-1: run-time) tr grid; k_qgemv_fused_mma
** qt[0] split pro grid; k_qgemv_sk qt[0] smem maxseg block grid minb; k_qgemv_tc qt[0] pro mt ncs uc block grid;
** a linear's own: k_linear_gemv rb tr block grid; k_qgemv and k_qgemv_mma qt[0] tr split[0] (warps a row) grid;
** k_linear_gemm, k_qlinear_gemm and k_gemm_tc grid (row tiles; the token tiles follow T); the MoE down projections qt[0]
** (routed) qt[1] (shared), k_qmoe_down_mma split[0] (experts a block). */
typedef struct KSel {
	int fk;                      /* the group, an index into g->fk; -1 for a linear's own kernel */
	int node;                    /* that linear (own kernels); the group's host otherwise */
	int kern;                    /* SK_* */
	int sub;                     /* 0: all members; a split group's 1: its block members, 2: its float members */
	int tmin, tmax;              /* the steps this launch serves */
	int pro;                     /* the prologue's form: GP_*, GP_RMSLATE, or -1 (a run-time value) */
	int rb, tr, mt, nt, uc, ncs; /* shape: rows a block, token rows, tiles, token tiles, unroll, column sets */
	int qt[FK_MAXM];             /* the members' type ids (select_wtype) */
	int split[FK_MAXM];          /* each member's K split */
	int block, minb, maxseg;     /* threads; launch bounds' blocks an SM (0: none); k_qgemv_sk's parts bound */
	long long grid, smem, tiles; /* blocks; dynamic shared memory; k_qgemv_sk's 16-row tiles */
	const char *why;             /* why it won, and why the kernels preferred before it lost */
} KSel;
/* Choose: fill wq (per node: the GGUF type a weight stays in on the GPU, else -1), g->cuda.wq and g->sel.
** Needs g->cuda.act, .wconv and .bias set (emit_cuda does, then calls this). */
int select_kernels(Graph *g, const Target *t, int *wq);
/* The type id ops/qfused.cuh reads weight node w as: its block type, else 0 f32, 1 f16, 30 bf16. */
int select_wtype(const Graph *g, const int *wq, int w);
/* A split group (KSel.sub): its block members in a, its float members in b (types qb, no prologue: they
** read the norm a stored). */
void select_split_group(const FuseKernel *f, const int *qt, FuseKernel *a, FuseKernel *b, int *qb);
/* For glmc explain: which quantized weights the GPU keeps as blocks, and why each other one is converted. */
void select_quant_explain(const Graph *g, FILE *f);
/* For glmc explain: the records of select_kernels. */
void select_explain(const Graph *g, const Target *t, FILE *f);

/*
** emit_cuda.c — kernels and launches for every node
*/
/* Fill g->cuda: the wrapper source over ops/kernels.cuh, the launch list and (when NVRTC is present and
** compile is set) the cubin for arch. act is DT_F32 or DT_BF16. */
/* The GGUF block size of a type whose blocks the GPU kernels read directly (every block type glmc reads), or 0:
** such a weight with whole-block rows may stay quantized on the GPU (select.c q_choose decides, after
** fusion, which does not depend on it: the fused kernels read blocks too). */
int cuda_qblock(int qtype);
int emit_cuda(Graph *g, const char *arch, int act, int compile, FILE *warn, char *err, size_t len);
/* NVRTC-compile the source emit_cuda wrote (the compile step of emit_cuda, for a driver that plans memory
** between emitting the launches and compiling them). */
int emit_cuda_compile(Graph *g, FILE *warn, char *err, size_t len);
extern const char glm_kernels_cuh[];   /* ops/kernels.cuh, embedded at build time */

/*
** nvrtc.c — NVRTC, loaded at run time so glmc and glmrun start without the CUDA toolkit
*/
/* 1 when libnvrtc can be loaded. */
int nvrtc_available(void);
/* Compile src for arch ("sm_90") to a malloc'd cubin. Errors quote the generated source line. */
int nvrtc_compile(const char *src, const char *arch, unsigned char **cubin, size_t *n, char *err, size_t len);

/*
** plan.c — the plan file, the contract between glmc and glmrun
**
** Layout: 8-byte magic "GLMPLAN\n", u32 format version, u32 crc32 of the payload, u64 payload bytes,
** then the payload: metadata, fusion reasons, weight manifest, nodes, outputs (little-endian, strings length-prefixed).
*/
#define PLAN_MAGIC "GLMPLAN\n"
/* 12: Launch.kind (collectives by kind, not by an '@' name) and Launch.inside_next (not a fourth KA_INT argument),
** fusion reasons as their own list after the metadata (not "fusion.NNNN" keys);
** 11: 10 attributes a node (rope's scaling kind and llama3 band); 10: Launch.smem, dynamic shared memory
** (k_qgemv_sk); 9: Launch.flags (LAUNCH_NORM_LATE: the decode GEMVs whose norm is read late, for --round-bf16's model);
** 8: glm_sample takes the greedy split's partials and counters and runs on grid (rows, SAMPLE_NB) (an
** older plan's sampler would advance each row once per block); 7: KA_P2P, an allreduce done inside the
** next kernel; 6: KA_PDL, the decode GEMVs' programmatic-launch flag (5: every kernel waits first) */
#define PLAN_VERSION 12

int plan_write(const Graph *g, const char *path, char *err, size_t len);
/* Read and verify a plan into g (allocated from g's arena). */
int plan_read(Graph *g, const char *path, char *err, size_t len);

/*
** runtime/exec.c — the CPU reference executor
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
	struct Par *par;             /* the linears' threads (ops/par.h), started by the first large linear */
	int par_tried;               /* 1 once that start was tried (par stays NULL on one thread) */
	char err[512];               /* first run-time error (e.g. token id out of range) */
	int nan_ok;                  /* 1: non-finite logits are not an error (--verify compares them) */
};

/* Load every weight (converted to float32) from the weights path and size buffers for up to maxT
** tokens per step and S cache positions. With weights == NULL, weight buffers are left for the caller
** to fill (tests). */
int exec_init(Exec *x, const Graph *g, const char *weights, int64_t maxT, int64_t S, char *err, size_t len);
/* Run one step: tokens[T] at positions pos[T]. Outputs are in x->buf[g->out[i]]. */
int exec_step(Exec *x, const int32_t *tokens, const int32_t *pos, int64_t T, char *err, size_t len);
/* The same for the tp ranks of a partitioned plan, in lockstep, collectives done in memory; each
** x[r] was set up by exec_init_rank. */
int exec_step_ranks(Exec *x, int tp, const int32_t *tokens, const int32_t *pos, int64_t T, char *err, size_t len);
int exec_init_rank(Exec *x, const Graph *g, const char *weights, int64_t maxT, int64_t S, int rank, int tp, char *err,
                   size_t len);
/* exec_init_rank with caches for nslots sequences (batches). */
int exec_init_slots(Exec *x, const Graph *g, const char *weights, int64_t maxT, int64_t S, int nslots, int rank, int tp,
                    char *err, size_t len);
/* exec_step_ranks for tokens of several sequences: token t belongs to cache slot seq[t] (NULL: slot 0). */
int exec_step_seq(Exec *x, int tp, const int32_t *tokens, const int32_t *pos, const int32_t *seq, int64_t T, char *err,
                  size_t len);
/* Round as the GPU does for a plan with bf16 activations: the weights it narrows, now, and every float
** node's output after it runs (round_act; off by default), except that the linears of a LAUNCH_NORM_LATE
** launch read their rmsnorm unrounded in the steps it runs (x->late). After exec_init*; an error on other
** plans. */
int exec_round_bf16(Exec *x, char *err, size_t len);
void exec_free(Exec *x);
/* Concrete extent of dim i of node id in the current step. */
int64_t exec_dim(const Exec *x, int id, int i);
int64_t exec_numel(const Exec *x, int id);

#endif
