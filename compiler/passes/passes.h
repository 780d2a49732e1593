/*
** compiler/passes/passes.h — the compiler passes' layer: the front end, weight binding, partitioning, fusion,
** kernel selection and emission, and the records they hand each other (fused kernels, kernel choices). Nothing
** below the passes sees these; the plan (runtime/core/glm.h) is what they leave for glmrun.
*/
#ifndef GLM_PASSES_H
#define GLM_PASSES_H

#include "glm.h"

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
typedef struct FuseKernel {
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
	int fold;                    /* ROPE_KV: a 1-token step's attention may do it all itself (k_attn_split_rope;
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

/*
** partition.c — tensor parallelism
*/
/* Rewrite g into the per-rank program for tp ranks: local shapes, collectives, weight splits. Dropped
** hints are reported on explain. */
int partition(Graph *g, int tp, FILE *explain, char *err, size_t len);

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
int emit_cuda(Graph *g, const char *arch, int act, int compile, FILE *warn, char *err, size_t len);
/* NVRTC-compile the source emit_cuda wrote (the compile step of emit_cuda, for a driver that plans memory
** between emitting the launches and compiling them). */
int emit_cuda_compile(Graph *g, FILE *warn, char *err, size_t len);
/* The persistent decode kernel's NVRTC program for steps of T tokens (ops/persist.cuh, issue 47): the same
** template calls as the plan's wrappers, one body per wrapper the step launches, dispatched by launch index,
** entry glm_persist. Worker block and blocks an SM from g->cuda.sched's schedule for T when there is one
** (else the largest block, 1 a SM). Stores it in g->cuda.psource and returns it; NULL and err when a
** launch at T is a collective or a wrapper cannot be read back. */
const char *emit_cuda_persist(Graph *g, int T, char *err, size_t len);
/* Dynamic shared memory of the persistent program for T in workers of `worker` threads with `budget` bytes
** for it (ops/persist.cuh lanes): per launch, sched_lanes lanes of its body's own dynamic shared memory and
** its arrays (GLM_SH: its wrapper's static shared memory in the plan's cubin, less sm_90's reserved 1 KiB, an
** upper bound, with room for alignment), the largest launch's total; its most lanes into *max_lanes. -1 and
** err when the plan has no cubin. */
int64_t emit_cuda_persist_dsm(const Graph *g, int T, int worker, int64_t budget, int *max_lanes, char *err, size_t len);
/* For glmc explain: one line on the persistent program for T (its bodies, worker block, registers and shared
** memory from an NVRTC compile, whether an H100 SM holds the schedule's workers). */
void emit_cuda_persist_explain(const Graph *g, int T, FILE *f);
/* Registers a thread, static shared memory and stack frame bytes of `kernel` in a cubin NVRTC made. */
int emit_cuda_usage(const unsigned char *img, size_t n, const char *kernel, int *regs, int64_t *shared, int64_t *frame,
                    char *err, size_t len);
extern const char glm_kernels_cuh[];   /* ops/kernels.cuh, embedded at build time */

/*
** sched.c — the persistent kernel's task schedule for a step of T tokens
*/
/* Append to g->cuda.sched the schedule of the launches used at T over sms × per_sm workers (runtime/core/
** sched.c proves it: sched_check). Fails, saying why, when a launch used at T cannot run inside a
** persistent kernel (a collective, a cuBLASLt GEMM, a grid sized by the cache). */
int sched_build(Graph *g, int T, int sms, int per_sm, char *err, size_t len);   /* ops/kernels.cuh, embedded at build time */

#endif
