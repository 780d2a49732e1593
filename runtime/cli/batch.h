/*
** runtime/cli/batch.h — glmrun --batch: several sequences, one cache slot each, decoded in lockstep.
*/
#ifndef GLM_BATCH_H
#define GLM_BATCH_H

#include "engine.h"
#include "tok.h"

#include <signal.h>

#define BATCH_MAX ENGINE_MAX_SLOTS

typedef struct {
	int nseq;                    /* sequences; sequence i uses cache slot i (and samples with seed + i) */
	const int32_t *const *prompt;
	const int *np;               /* prompt lengths */
	long n;                      /* tokens to generate per sequence (fewer when the context fills) */
	long max_seq;                /* positions per sequence */
	const Tok *tk;               /* text mode when set: end-of-generation and --stop end a sequence */
	const char *stop;
	int ignore_eos;
	const char *dump;            /* --dump-logits prefix: sequence i's rows go to PREFIX.i */
	volatile sig_atomic_t *stop_flag; /* Ctrl-C */
} BatchRun;

/* Prefill every prompt into its slot, then decode all live sequences together through the engine (opened
** with nseq slots). Prints each sequence's ids (one line each) or text (a block each) in sequence order. */
int batch_run(Engine *e, const BatchRun *b, char *err, size_t len);

#endif
