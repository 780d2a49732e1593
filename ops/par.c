/*
** ops/par.c — the thread pool of par.h: workers sleep on a condition variable until the job counter
** moves, run their part, and the last to finish wakes the caller. No spinning: the machines this runs
** on are often shared, and a step runs a few hundred jobs, so a wake-up (tens of microseconds) is small
** next to each linear's work.
*/
#include "par.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct Par {
	int n;                 /* threads in all, the caller included */
	int started;           /* workers running */
	pthread_t th[PAR_MAX];
	int part[PAR_MAX];     /* each worker's part number (its argument) */
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	unsigned long job;     /* incremented per job; each worker runs each new value once */
	int left;              /* worker parts of the current job not yet finished */
	int quit;
	ParFn fn;
	void *arg;
};

typedef struct {
	Par *p;
	int part;
} ParArg;

/* A worker: wait for a job newer than the last one it ran, run its part, report, repeat. */
static void *par_main(void *v)
{
	Par *p = ((ParArg *)v)->p;
	int part = ((ParArg *)v)->part;
	free(v);
	unsigned long seen = 0;
	pthread_mutex_lock(&p->mu);
	for (;;) {
		while (!p->quit && p->job == seen)
			pthread_cond_wait(&p->go, &p->mu);
		if (p->quit)
			break;
		seen = p->job;
		ParFn fn = p->fn;
		void *arg = p->arg;
		pthread_mutex_unlock(&p->mu);
		fn(arg, part, p->n);
		pthread_mutex_lock(&p->mu);
		if (--p->left == 0)
			pthread_cond_signal(&p->done);
	}
	pthread_mutex_unlock(&p->mu);
	return NULL;
}

/* Start the workers; a pool that cannot start them all is stopped and NULL returned. */
Par *par_new(int n)
{
	if (n < 1 || n > PAR_MAX)
		return NULL;
	Par *p = calloc(1, sizeof *p);
	if (!p)
		return NULL;
	p->n = n;
	pthread_mutex_init(&p->mu, NULL);
	pthread_cond_init(&p->go, NULL);
	pthread_cond_init(&p->done, NULL);
	for (int i = 1; i < n; i++) {
		ParArg *a = malloc(sizeof *a);
		if (!a || (a->p = p, a->part = i, pthread_create(&p->th[p->started], NULL, par_main, a))) {
			free(a);
			par_free(p);
			return NULL;
		}
		p->started++;
	}
	return p;
}

int par_size(const Par *p)
{
	return p ? p->n : 1;
}

/* Publish the job, run part 0 here, then wait until the workers' parts are done. */
void par_run(Par *p, ParFn fn, void *arg)
{
	if (!p || p->n == 1) {
		fn(arg, 0, 1);
		return;
	}
	pthread_mutex_lock(&p->mu);
	p->fn = fn, p->arg = arg, p->left = p->n - 1;
	p->job++;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	fn(arg, 0, p->n);
	pthread_mutex_lock(&p->mu);
	while (p->left > 0)
		pthread_cond_wait(&p->done, &p->mu);
	pthread_mutex_unlock(&p->mu);
}

/* Stop and join the workers, then free the pool. */
void par_free(Par *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->mu);
	p->quit = 1;
	pthread_cond_broadcast(&p->go);
	pthread_mutex_unlock(&p->mu);
	for (int i = 0; i < p->started; i++)
		pthread_join(p->th[i], NULL);
	pthread_cond_destroy(&p->go);
	pthread_cond_destroy(&p->done);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

int par_threads(char *err, size_t len)
{
	const char *e = getenv("GLMRUN_THREADS");
	if (e) {
		char *end;
		long v = strtol(e, &end, 10);
		if (end == e || *end || v < 1 || v > PAR_MAX) {
			snprintf(err, len, "GLMRUN_THREADS='%s' is not a thread count 1..%d", e, PAR_MAX);
			return -1;
		}
		return (int)v;
	}
	long c = sysconf(_SC_NPROCESSORS_ONLN);
	return c < 1 ? 1 : c > 16 ? 16 : (int)c;
}
