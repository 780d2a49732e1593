/*
** ops/par.h — a small pool of threads for the CPU executor's large kernels (the linears). A job is split
** into parts: part 0 runs on the caller's thread, the others on the pool's workers, and par_run returns
** when all are done. A pool of one thread runs everything on the caller.
*/
#ifndef GLM_PAR_H
#define GLM_PAR_H

#include <stddef.h>

typedef struct Par Par;

/* One part of a job: fn(arg, part, nparts) for part in 0..nparts-1. */
typedef void (*ParFn)(void *arg, int part, int nparts);

/* A pool of n threads in all (the caller and n - 1 workers), 1 <= n <= PAR_MAX; NULL when a thread
** cannot be started (the caller then runs alone). */
#define PAR_MAX 64
Par *par_new(int n);
int par_size(const Par *p);
/* Run fn over par_size(p) parts and wait for all; p NULL runs fn(arg, 0, 1). */
void par_run(Par *p, ParFn fn, void *arg);
void par_free(Par *p);
/* ref_linear's values (lin_rows, ops/linear.c) with the output rows split among p's threads (p NULL: the
** caller's alone). */
void lin_par(Par *p, float *y, const float *x, const float *w, const float *bias, int T, int K, int N);

/* The threads the CPU executor uses: $GLMRUN_THREADS (a number 1..PAR_MAX; anything else is an error:
** -1 with a message), else the online CPUs (at most 16). */
int par_threads(char *err, size_t len);

#endif
