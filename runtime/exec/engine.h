/*
** runtime/exec/engine.h — the one interface every glmrun driver (text, chat, batch, bench, verify, force)
** runs a plan through, whatever runs it: the CPU reference (one executor per tp rank) or the GPUs (one
** worker per rank, ranks.c, also for tp 1). A driver never sees an Exec, a Gpu or a Ranks.
**
** The model of a step is the GPU's: a step buffer of rows, each row one sequence's next step (the token
** to feed, its position, its KV-cache slot and its sampling step). A decode step evaluates the rows and
** samples one token per row; afterwards every row feeds its own sampled token at the next position with
** the next sampling step, so a run of decode steps needs no host input at all (on the GPU the graph
** replays on what the last replay left). engine_set_rows changes the rows (a sequence joins, leaves or is
** forced). Row r samples with seed + slot and its step counter, so the same seed gives the same tokens
** on every backend; a row with own_sampling set samples with its own temperature, top_k, top_p and seed
** instead (glmrun serve: each request its own), the seed then taken as is (no slot added).
*/
#ifndef GLM_ENGINE_H
#define GLM_ENGINE_H

#include "glm.h"

#include <stdint.h>

typedef struct Engine Engine;

#define ENGINE_MAX_SLOTS 256

typedef struct {
	int cuda;                    /* 1: the plan's tp GPUs; 0: the CPU reference */
	int slots;                   /* sequences held at once, one KV-cache slot each (0 or 1: one; at most
	                              ** ENGINE_MAX_SLOTS) */
	int64_t max_seq;             /* positions per slot */
	int64_t chunk;               /* most tokens a prefill evaluates in one step (longer prompts in chunks) */
	float temp;                  /* <= 0: greedy */
	int top_k;                   /* <= 0: off */
	float top_p;                 /* >= 1: off */
	uint32_t seed;
	int keep_logits;             /* decode steps may return logits (the GPU then copies them back) */
	int round_bf16;              /* CPU: round values as a bf16 plan stores them (--round-bf16) */
	int nan_ok;                  /* CPU: non-finite values are not an error (--verify finds them itself) */
	int progress;                /* GPU: a progress bar while the weights upload */
	int pdl;                     /* GPU: programmatic dependent launch (--pdl) */
	int no_lt;                   /* GPU: prefill GEMMs on the plan's own kernels, not cuBLASLt (--no-cublaslt) */
	int decode;                  /* GPU: GPU_DECODE_* (gpu.h), the 1-token decode step's path (--decode) */
	int64_t l2_prefetch;         /* GPU: GpuOpts.l2_prefetch (--l2-prefetch) */
	int64_t fit_min;             /* GPU: caches of max_seq positions that do not fit shrink to what fits, if at
	                             ** least this many (engine_max_seq then says how many); 0: fail */
	double timeout;              /* GPU: the watchdog's seconds without progress (0: 60) */
} EngineOpts;

typedef struct {
	int32_t slot, token, pos, step;
	int own_sampling;            /* 0: the engine's options (seed + slot); 1: the four fields below */
	float temp;                  /* <= 0: greedy */
	int top_k;                   /* <= 0: off */
	float top_p;                 /* >= 1: off */
	uint32_t seed;               /* taken as is */
} EngineRow;

/*
** Open the plan g (loaded by plan_read) with its weights. A GPU failure that leaves a rank blocked makes
** engine_stuck true: the caller must then end the process with _exit.
*/
int engine_open(Engine **out, const Graph *g, const char *weights, const EngineOpts *o, char *err, size_t len);

/* The vocabulary (the 'logits' output's columns), and whether the GPUs run the plan. */
int64_t engine_vocab(const Engine *e);
int engine_on_gpu(const Engine *e);
/* Positions per sequence slot: EngineOpts.max_seq, or what fit on the GPUs under EngineOpts.fit_min. */
int64_t engine_max_seq(const Engine *e);
/* Tokens one prefill step evaluates at most (EngineOpts.chunk). */
int64_t engine_chunk(const Engine *e);

/*
** Evaluate ids[0..n) into cache slot `slot` at positions pos0.., in steps of at most o->chunk tokens,
** on row 0 of the step buffer: each step samples from its last row with row 0's step counter (which it
** then advances), so after the call row 0 feeds *next at pos0 + n. logits: n rows of V floats, or NULL.
*/
int engine_prefill(Engine *e, int slot, const int32_t *ids, int64_t n, int32_t pos0, int32_t *next, float *logits,
                   char *err, size_t len);

/* One sequence's piece of a prefill of several (engine_prefill_parts): ids[0..n) into cache slot row.slot
** at positions row.pos.., its last row sampled with row's sampling at sampling step row.step. */
typedef struct {
	const int32_t *ids;
	int64_t n;
	EngineRow row;
} EnginePart;

/*
** Evaluate several sequences' prompt pieces as one step (glmrun serve: prompts that arrive together share
** one prefill instead of a step each): at most EngineOpts.chunk tokens in all, no two parts in one slot;
** next[k] is sampled from part k's last row; logits (every part's rows in order, V floats a row) may be
** NULL. The step buffer's rows are undefined afterwards: engine_set_rows before the next decode.
*/
int engine_prefill_parts(Engine *e, int np, const EnginePart *p, int32_t *next, float *logits, char *err, size_t len);

/* Set the first `rows` rows of the step buffer (rows beyond a live set may name a free slot: padding).
** Row 0's sampling fields also serve the next engine_prefill. A GPU plan from a glmc before per-row
** sampling (its sampler glm_sample) refuses rows whose sampling differs from the engine's options. */
int engine_set_rows(Engine *e, int rows, const EngineRow *r, char *err, size_t len);

/* Make row 0 feed tok instead of the token it sampled (glmrun --force); position and step stay. */
int engine_feed(Engine *e, int32_t tok, char *err, size_t len);

/* One decode step of the first `rows` rows (on the GPU one graph launch): next[rows], logits rows × V
** (or NULL; needs o->keep_logits). */
int engine_decode(Engine *e, int rows, int32_t *next, float *logits, char *err, size_t len);

/*
** --verify: evaluate T tokens (on the GPU eagerly) and copy every value node's output to out[node] as
** float32 (int32 values converted), NULL entries skipped; slot 0. Needs a plan whose values each keep their
** own buffer (g->mem.planned = 0 before engine_open).
*/
int engine_values(Engine *e, const int32_t *ids, const int32_t *pos, int64_t T, float **out, char *err, size_t len);

/* Elements of node id's value (T tokens; caches at max_seq positions), and a CPU engine's float32 buffer of
** node id on rank 0 (a weight or the last step's value; NULL on the GPU or for other types). */
size_t engine_numel(const Engine *e, int id, int64_t T);
const float *engine_cpu_f32(const Engine *e, int id);

/* --profile: average time of each decode launch and of the sampler over `steps` steps (GPU only). */
int engine_profile(Engine *e, int steps, int eager, double *us, double *sample_us, int *graph, char *err, size_t len);
/* After engine_profile on the persistent decode path: its task timeline (gpu_persist_trace); NULL otherwise. */
const uint64_t *engine_persist_trace(const Engine *e, int *steps);

/* Bytes of weight node id as the backend holds it (rank 0's share on the GPU; float32 on the CPU). */
size_t engine_weight_bytes(const Engine *e, int id);

/* --stats: what ran where. On the CPU only tp is set. */
typedef struct {
	int cuda, tp;
	int nccl_version;            /* 0: no NCCL loaded */
	char nccl_path[512], nccl_note[1024];
	int peer_pairs, peer_ok;
	long p2p_max;
	long graph_launches, decode_steps;
	long prefill_steps;          /* prefill steps run, on any backend */
	int kernels_per_step, collectives_per_step, pdl;
	long nccl_calls, p2p_calls;
	double upload_s;
	size_t weight_bytes, act_bytes, cache_bytes;
	char name[256];
	int cc_major, cc_minor, recompiled, have_lt;
	long lt_matmuls;
	char decode_path[224];       /* GPU: which 1-token decode path runs (GpuStats.decode_path) */
} EngineStats;
void engine_stats(const Engine *e, EngineStats *s);

/* 1 after a GPU failure that may have left a rank blocked (the process must _exit). */
int engine_stuck(const Engine *e);

void engine_close(Engine *e);

#endif
