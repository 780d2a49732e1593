/*
** runtime/batch.h — glmrun --batch: several sequences, one cache slot each, decoded in lockstep.
*/
#ifndef GLM_BATCH_H
#define GLM_BATCH_H

#include "glm.h"
#include "gpu.h"
#include "tok.h"

#include <signal.h>

#define BATCH_MAX 256

typedef struct {
	int nseq;                    /* sequences; sequence i uses cache slot i and seed + i */
	const int32_t *const *prompt;
	const int *np;               /* prompt lengths */
	long n;                      /* tokens to generate per sequence (fewer when the context fills) */
	long max_seq;                /* positions per sequence */
	float temp, top_p;
	int top_k;
	uint32_t seed;
	const Tok *tk;               /* text mode when set: end-of-generation and --stop end a sequence */
	const char *stop;
	int ignore_eos;
	const char *dump;            /* --dump-logits prefix: sequence i's rows go to PREFIX.i */
	volatile sig_atomic_t *stop_flag; /* Ctrl-C */
} BatchRun;

/* Prefill every prompt into its slot, then decode all live sequences together, on the GPU (gpu != NULL,
** opened with batch = nseq) or on the CPU reference (xs: tp executors opened with nseq slots). Prints
** each sequence's ids (one line each) or text (a block each) in sequence order. */
int batch_run(const Graph *g, Gpu *gpu, Exec *xs, int tp, const BatchRun *b, char *err, size_t len);

#endif
