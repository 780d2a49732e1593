/*
** runtime/exec/ranks.h — glmrun on tp GPUs: one worker thread per rank, each driving its own Gpu (gpu.h) on
** CUDA device `rank` with its own context, stream, arena, weight slices and captured decode graph, which
** holds that rank's NCCL calls. Every command (open, prefill, decode step, ...) runs on all ranks at
** once and returns when all have finished, so capture and replay are collective; a watchdog (crew.h)
** turns a rank that does not finish into an error naming it. A tp 1 plan takes the same path, with a
** communicator of one rank (or none, when NCCL is not installed: it needs no collectives).
**
** Small allreduces (at most GLMRUN_P2P_MAX bytes, default 256 KiB; 0 turns it off) go through a
** one-shot kernel over peer memory instead of NCCL when every pair of ranks has peer access.
**
** Test hook: GLMRUN_TEST_STALL_RANK=r (with GLMRUN_TEST_STALL_STEP=n, default 1; 0 is the prefill)
** makes rank r stop before decode step n and never return, so the watchdog can be shown on GPUs.
*/
#ifndef GLM_RANKS_H
#define GLM_RANKS_H

#include "gpu.h"

typedef struct Ranks Ranks;

typedef struct {
	double timeout;              /* seconds without progress on an unfinished rank before it is a hang */
	int stall_rank, stall_step;  /* the test hook above; stall_rank -1: off */
	long p2p_max;                /* bytes: allreduces up to this size use the P2P kernel; 0: never */
	int quiet;                   /* no notes on stderr (peer access unavailable, ...) */
} RanksOpts;

/*
** Check the GPUs against the plan's tp (count, then peer access and memory on each), open one Gpu per
** rank and connect them with NCCL. The arguments are gpu_open's; o->device/rank/tp are set per rank.
*/
int ranks_open(Ranks **out, const Graph *g, const char *weights, int64_t maxT, int64_t S, const GpuOpts *o,
               const RanksOpts *ro, char *err, size_t len);

/* gpu_prefill_slot / gpu_prefill_parts / gpu_set_rows / gpu_feed / gpu_decode_rows / gpu_step_outputs on every rank. Every rank
** samples the next tokens from the same full logits; a disagreement is an error. logits and out come
** from rank 0. */
int ranks_prefill(Ranks *R, int slot, const int32_t *tokens, int64_t T, int32_t pos0, int32_t *next, float *logits,
                  char *err, size_t len);
int ranks_prefill_parts(Ranks *R, int64_t T, const int32_t *tokens, const int32_t *pos, const int32_t *seq, int np,
                        const int64_t *last, const int32_t *step, const float *samp, int32_t *next, float *logits,
                        char *err, size_t len);
int ranks_set_rows(Ranks *R, int rows, const int32_t *tokens, const int32_t *pos, const int32_t *seq,
                   const int32_t *step, const float *samp, char *err, size_t len);
int ranks_feed(Ranks *R, int32_t tok, char *err, size_t len);
int ranks_decode(Ranks *R, int rows, int32_t *next, float *logits, char *err, size_t len);
int ranks_step_outputs(Ranks *R, const int32_t *tokens, const int32_t *pos, int64_t T, float **out, char *err,
                       size_t len);

typedef struct {
	GpuStats gpu;                /* rank 0's */
	int tp;
	int nccl_version;            /* 0: no NCCL loaded */
	char nccl_path[512];
	char nccl_note[1024];         /* why there is none (tp 1 only) */
	int peer_pairs, peer_ok;     /* ordered pairs of ranks, and those with peer access enabled */
	long p2p_max;                /* allreduces up to this many bytes take the P2P kernel (0: none) */
} RanksStats;
void ranks_stats(const Ranks *R, RanksStats *s);
/* Positions per sequence slot every rank's caches hold (the fewest, under GpuOpts.fit_min). */
int64_t ranks_max_seq(const Ranks *R);
/* --profile on a tp plan: every rank times its decode step (gpu_profile); rank 0's times come back. */
int ranks_profile(Ranks *R, int steps, int eager, double *us, double *sample_us, int *graph, char *err, size_t len);

/* After a failed call: 1 when a rank may still be blocked (in a collective, or stalled). Then the
** process must end with _exit: the blocked threads can neither be joined nor cleaned up after. */
int ranks_stuck(Ranks *R);

/* Rank r's Gpu (NULL outside 0..tp-1), for read-only queries such as gpu_weight_bytes. */
const Gpu *ranks_gpu(const Ranks *R, int r);

/* Destroy the communicators and close the GPUs (on each rank's thread). Does nothing to a stuck set. */
void ranks_close(Ranks *R);

/* The refusal of a plan partitioned for tp GPUs when `visible` are visible (0 when it fits). */
int ranks_check_gpus(int tp, int visible, char *err, size_t len);

/* GLMRUN_P2P_MAX and the stall test hook from the environment (see above), checked against tp;
** one-line error when bad. */
int ranks_opts_from_env(RanksOpts *ro, int tp, char *err, size_t len);

#endif
