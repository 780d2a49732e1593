/*
** runtime/exec/gpu.h — the CUDA device path of glmrun. The driver (libcuda) is opened with dlopen, so glmrun
** starts on machines without a GPU and says so in one line when asked for one.
*/
#ifndef GLM_GPU_H
#define GLM_GPU_H

#include "glm.h"

typedef struct Gpu Gpu;

/* How a 1-token decode step runs (GpuOpts.decode): glmc's persistent kernel (issue 47) or the launch list. */
enum { GPU_DECODE_AUTO, GPU_DECODE_PERSISTENT, GPU_DECODE_KERNELS };

typedef struct {
	float temp;                  /* <= 0: greedy */
	int top_k;                   /* <= 0: off */
	float top_p;                 /* >= 1: off */
	uint32_t seed;
	int progress;                /* draw a progress bar for the weight upload */
	int keep_logits;             /* copy each step's logits back (for --dump-logits / --verify) */
	int batch;                   /* sequences decoded together (cache slots); 0 or 1: one */
	int pdl;                     /* --pdl: let a kernel start while the one before finishes (see cuda.c) */
	int no_lt;                   /* --no-cublaslt: prefill GEMMs on the plan's own kernels, not cuBLASLt */
	int decode;                  /* --decode: GPU_DECODE_AUTO (persistent when the plan has a T = 1 schedule),
	                             ** GPU_DECODE_PERSISTENT or GPU_DECODE_KERNELS */
	int64_t l2_prefetch;         /* --l2-prefetch: the bytes of each persistent task's weights its worker asks L2
	                             ** for while it waits; 0: one 128-byte line a thread of the worker, < 0: none */
	int64_t fit_min;             /* a KV cache of S positions that does not fit: take the most that fit, if at
	                             ** least this many (gpu_max_seq says how many); 0: fail */
	/* Tensor parallelism (ranks.c fills these): this Gpu is rank `rank` of `tp` (0: 1) on CUDA device
	** `device`, and loads only its rank's slices of split weights. */
	int device, rank, tp;
	/* Progress during gpu_open's long parts (each weight uploaded), for the watchdog; may be NULL. */
	void (*beat)(void *ctx, const char *doing);
	void *beat_ctx;
} GpuOpts;

/* Open GPU o->device (0 unless ranks.c says otherwise), load (or recompile) the plan's kernels, check memory, upload the weights, allocate
** the KV caches for S positions and buffers for up to maxT tokens per step. */
int gpu_open(Gpu **out, const Graph *g, const char *weights, int64_t maxT, int64_t S, const GpuOpts *o, char *err,
             size_t len);

/* Evaluate T prompt tokens at positions pos0.. (eagerly: the prefill shape changes per prompt), then
** sample the next token from the last row. logits (V floats per row, T rows) may be NULL. */
int gpu_prefill(Gpu *x, const int32_t *tokens, int64_t T, int32_t pos0, int32_t *next, float *logits, char *err,
                size_t len);

/* One decode step as one CUDA-graph launch (captured on first use): feeds back the last sampled token,
** samples the next. logits (V floats) may be NULL. */
int gpu_decode(Gpu *x, int32_t *next, float *logits, char *err, size_t len);

/* Make the next gpu_decode feed `tok` instead of the token the last sampler wrote into the step buffer
** (glmrun --force); the position and the sampling step counter stay as the sampler left them. */
int gpu_feed(Gpu *x, int32_t tok, char *err, size_t len);

/* gpu_prefill into cache slot `slot` of a batch (o->batch slots). It uses row 0 of the step buffer and
** continues that row's sampling step counter; gpu_set_rows sets every row before batched decoding. */
int gpu_prefill_slot(Gpu *x, int slot, const int32_t *tokens, int64_t T, int32_t pos0, int32_t *next, float *logits,
                     char *err, size_t len);

/* Several sequences' prompt pieces as one step of T rows (tokens, positions and cache slots a row; no two
** pieces in one slot), then part k's next token sampled from row last[k] at sampling step step[k] with
** samp + 4k (as gpu_set_rows' samp); logits (T rows of V floats) may be NULL. The step buffer's rows are
** left undefined: gpu_set_rows before decoding. */
int gpu_prefill_parts(Gpu *x, int64_t T, const int32_t *tokens, const int32_t *pos, const int32_t *seq, int np,
                      const int64_t *last, const int32_t *step, const float *samp, int32_t *next, float *logits, char *err,
                      size_t len);

/* Set the first `rows` rows of the step buffer: each row's token to feed, its position, its cache slot
** and its sampling step counter (rows of one bucket; padding rows name a free slot), and (samp, 4 floats a
** row, or NULL: the GpuOpts') its sampler's temperature, top_k, top_p and seed bits (the sampler adds the
** slot). A plan whose sampler is glm_sample (one setting for every row) refuses rows that differ from it. */
int gpu_set_rows(Gpu *x, int rows, const int32_t *tokens, const int32_t *pos, const int32_t *seq, const int32_t *step,
                 const float *samp, char *err, size_t len);

/* One decode step of `rows` sequences as one graph launch (one graph per bucket size, captured on first
** use): next[rows] gets each row's sampled token; logits (rows × V floats) may be NULL. */
int gpu_decode_rows(Gpu *x, int rows, int32_t *next, float *logits, char *err, size_t len);

/* Run the nodes for T tokens eagerly and copy every node's output to host float32 arrays (out[node],
** NULL for leaves), for --verify. */
int gpu_step_outputs(Gpu *x, const int32_t *tokens, const int32_t *pos, int64_t T, float **out, char *err,
                     size_t len);

/* Destroy the captured decode graphs. A graph that holds NCCL calls keeps a reference on their
** communicator, and ncclCommDestroy waits until it is gone: ranks.c calls this before destroying. */
void gpu_drop_graphs(Gpu *x);

/* Counters for --stats. */
typedef struct {
	long graph_launches, decode_steps, kernel_launches_eager;
	int kernels_per_step;
	int pdl;                     /* kernels may start while the one before finishes (programmatic launch) */
	int collectives_per_step;    /* allreduces and allgathers in a decode step */
	long nccl_calls, p2p_calls;
	double upload_s;
	size_t weight_bytes, act_bytes, cache_bytes;
	char name[256];
	int cc_major, cc_minor;
	int recompiled;              /* NVRTC ran at open: 1 the plan's kernels, 2 the persistent kernel */
	int have_lt;                 /* cuBLASLt found: prefill matmuls go through it */
	long lt_matmuls;
	char decode_path[224];       /* "persistent (N workers)", or "kernels" and why when a schedule was not used */
} GpuStats;
void gpu_stats(const Gpu *x, GpuStats *s);
/* Positions per sequence slot the caches hold (gpu_open's S, or fewer under GpuOpts.fit_min). */
int64_t gpu_max_seq(const Gpu *x);

void gpu_close(Gpu *x);

/* Device bytes of weight node id, as uploaded (runtime/cli/bench.c counts what a step reads with it). */
size_t gpu_weight_bytes(const Gpu *x, int id);

/* --profile: average time of each decode launch (us[i] for g->cuda.l[i], 0 when not launched at T = 1)
** and of the sampler over `steps` decode steps, which continue the sequence. *graph is 1 when the steps
** were replayed as a graph with event nodes between the kernels, 0 when they ran eagerly (asked for with
** eager, or because the capture failed). */
int gpu_profile(Gpu *x, int steps, int eager, double *us, double *sample_us, int *graph, char *err, size_t len);

/* After gpu_profile on a plan running the persistent decode kernel: its task timeline over *steps eager
** steps, steps x ntask_all x 4 values (ops/persist.cuh's trace: wait began, body began, body ended in ns, SM
** id, per task of the T = 1 schedule); NULL with *steps 0 otherwise. */
const uint64_t *gpu_persist_trace(const Gpu *x, int *steps);

/* 1 when the driver loads and sees a GPU (for picking the default device). */
int gpu_present(void);

/*
** Multi-GPU additions (driven by ranks.c, one thread per rank; each call below on the rank's own thread).
*/
/* The number of visible CUDA devices; a one-line error when there is no driver or no GPU. */
int gpu_count(int *n, char *err, size_t len);
/* Let this rank's context reach device `peer`'s memory directly: 1 enabled, 0 the hardware cannot, -1 error. */
int gpu_enable_peer(Gpu *x, int peer, char *err, size_t len);
/* The NCCL communicator (an ncclComm_t) the plan's collectives run on; without one a plan with
** collectives fails at its first step with a clear message. */
struct Nccl;
void gpu_set_comm(Gpu *x, const struct Nccl *nc, void *comm);
/* The one-shot P2P allreduce: gpu_p2p_alloc gives this rank's mailbox (0 and no error when the plan
** lacks the kernel); once every rank has one and peer access between all of them, gpu_p2p_start
** (every rank, all mailboxes by rank) sends allreduces of at most max_bytes (<= cap) through it. */
int gpu_p2p_alloc(Gpu *x, size_t cap, uint64_t *mbox, char *err, size_t len);
int gpu_p2p_start(Gpu *x, const uint64_t *mbox, size_t max_bytes, char *err, size_t len);
/* Make this GPU's context current on the calling thread. */
int gpu_bind_thread(Gpu *x, char *err, size_t len);

#endif
