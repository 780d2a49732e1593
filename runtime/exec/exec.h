/*
** runtime/exec/exec.h — the CPU reference executor (exec.c): its state, struct Exec, is in glm.h, where the
** operator table's CPU references read it.
*/
#ifndef GLM_EXEC_H
#define GLM_EXEC_H

#include "glm.h"

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

#endif
