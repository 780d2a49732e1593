/*
** runtime/exec/crew.c — worker threads in lockstep under a watchdog (see crew.h). One mutex guards the
** command number, each worker's result and its last note; workers sleep on `go`, the caller on `done`
** with a deadline that moves forward whenever an unfinished worker makes progress. Before either sleeps
** it polls for CREW_SPIN_S: a decode step's command comes back within that, and a futex wake-up costs
** tens of microseconds, a different amount for each rank, which the step's first collective then waits
** for.
*/
#include "crew.h"
#include "glm.h"

#include <errno.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct {
	Crew *c;
	int rank;
	pthread_t th;
	int started;
	long done;                   /* the last command number this worker finished */
	int rc;
	long fail_order;             /* when it failed: 1 for the first failure of a command, ... */
	char err[1024];
	const char *doing;
	struct timespec beat;        /* its last note (progress) */
	atomic_long adone;           /* done, for polling without the lock */
} Hand;

#define CREW_SPIN_S 2e-3

struct Crew {
	int n;
	CrewFn fn;
	void *ctx;
	pthread_mutex_t mu;
	pthread_cond_t go, done;
	long seq;                    /* the current command number */
	atomic_long aseq;            /* seq, for polling without the lock */
	int cmd, quit;
	long nfail;
	Hand h[CREW_MAX];
};

static double secs(struct timespec t)
{
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static struct timespec now_mono(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t;
}

/* Polls until *v differs from old or CREW_SPIN_S pass. */
static void spin_while_equal(atomic_long *v, long old)
{
	double end = secs(now_mono()) + CREW_SPIN_S;
	for (unsigned i = 1; atomic_load_explicit(v, memory_order_acquire) == old; i++)
		if (i % 64 == 0 && secs(now_mono()) > end)
			return;
}

/* A worker: wait for a new command number, run it outside the lock, publish the result. */
static void *hand_main(void *arg)
{
	Hand *h = arg;
	Crew *c = h->c;
	pthread_mutex_lock(&c->mu);
	for (;;) {
		if (!c->quit && h->done == c->seq) {
			long old = h->done;
			pthread_mutex_unlock(&c->mu);
			spin_while_equal(&c->aseq, old);
			pthread_mutex_lock(&c->mu);
		}
		while (!c->quit && h->done == c->seq)
			pthread_cond_wait(&c->go, &c->mu);
		if (c->quit)
			break;
		long seq = c->seq;
		int cmd = c->cmd;
		h->doing = "starting";
		h->beat = now_mono();
		pthread_mutex_unlock(&c->mu);
		char err[1024] = "";
		int rc = c->fn(c->ctx, h->rank, cmd, err, sizeof err);
		pthread_mutex_lock(&c->mu);
		h->rc = rc;
		if (rc) {
			snprintf(h->err, sizeof h->err, "%s", err[0] ? err : "failed without a message");
			h->fail_order = ++c->nfail;
		}
		h->doing = "finished";
		h->done = seq;
		atomic_store_explicit(&h->adone, seq, memory_order_release);
		pthread_cond_broadcast(&c->done);
	}
	pthread_mutex_unlock(&c->mu);
	return NULL;
}

int crew_start(Crew **out, int n, CrewFn fn, void *ctx, char *err, size_t len)
{
	*out = NULL;
	if (n < 1 || n > CREW_MAX)
		return seterr(err, len, "crew of %d workers (1..%d)", n, CREW_MAX);
	Crew *c = calloc(1, sizeof *c);
	if (!c)
		return seterr(err, len, "out of memory");
	c->n = n, c->fn = fn, c->ctx = ctx;
	atomic_init(&c->aseq, 0);
	for (int r = 0; r < n; r++)
		atomic_init(&c->h[r].adone, 0);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_mutex_init(&c->mu, NULL);
	pthread_cond_init(&c->go, NULL);
	pthread_cond_init(&c->done, &ca);
	pthread_condattr_destroy(&ca);
	for (int r = 0; r < n; r++) {
		Hand *h = &c->h[r];
		h->c = c, h->rank = r, h->doing = "idle";
		int e = pthread_create(&h->th, NULL, hand_main, h);
		if (e) {
			crew_stop(c);
			return seterr(err, len, "cannot start worker thread %d: %s", r, strerror(e));
		}
		h->started = 1;
	}
	*out = c;
	return 0;
}

void crew_note(Crew *c, int rank, const char *doing)
{
	pthread_mutex_lock(&c->mu);
	c->h[rank].doing = doing;
	c->h[rank].beat = now_mono();
	pthread_mutex_unlock(&c->mu);
}

/* Under the lock: whether any worker has not finished command seq. */
static int busy_locked(const Crew *c)
{
	for (int r = 0; r < c->n; r++)
		if (c->h[r].started && c->h[r].done != c->seq)
			return 1;
	return 0;
}

int crew_busy(Crew *c)
{
	pthread_mutex_lock(&c->mu);
	int b = busy_locked(c);
	pthread_mutex_unlock(&c->mu);
	return b;
}

int crew_run(Crew *c, int cmd, const char *what, double timeout, char *err, size_t len)
{
	pthread_mutex_lock(&c->mu);
	if (busy_locked(c)) {
		pthread_mutex_unlock(&c->mu);
		return seterr(err, len, "%s: a rank has not finished the previous command", what);
	}
	c->cmd = cmd, c->seq++, c->nfail = 0;
	struct timespec start = now_mono();
	for (int r = 0; r < c->n; r++)
		c->h[r].beat = start, c->h[r].rc = 0, c->h[r].fail_order = 0, c->h[r].doing = "not started";
	atomic_store_explicit(&c->aseq, c->seq, memory_order_release);
	pthread_cond_broadcast(&c->go);
	long seq = c->seq;
	pthread_mutex_unlock(&c->mu);
	double end = secs(start) + CREW_SPIN_S;
	for (int r = 0; r < c->n; r++) /* every started worker's done, polled (the loop below re-reads it) */
		for (unsigned i = 1; c->h[r].started && atomic_load_explicit(&c->h[r].adone, memory_order_acquire) != seq; i++)
			if (i % 64 == 0 && secs(now_mono()) > end)
				break;
	pthread_mutex_lock(&c->mu);
	int rc = 0;
	for (;;) {
		int left = 0, first = -1;
		double last = secs(start);
		for (int r = 0; r < c->n; r++) {
			Hand *h = &c->h[r];
			if (h->done != c->seq) {
				left++;
				last = secs(h->beat) > last ? secs(h->beat) : last;
			} else if (h->rc && (first < 0 || h->fail_order < c->h[first].fail_order))
				first = r;
		}
		if (first >= 0) {
			if (c->n > 1)
				rc = seterr(err, len, "rank %d: %s", first, c->h[first].err);
			else
				rc = seterr(err, len, "%s", c->h[first].err);
			break;
		}
		if (!left)
			break;
		double deadline = last + timeout;
		if (secs(now_mono()) >= deadline) {
			char list[2048] = "";
			size_t k = 0;
			for (int r = 0; r < c->n && k < sizeof list; r++)
				if (c->h[r].done != c->seq)
					k += (size_t)snprintf(list + k, sizeof list - k, "%srank %d (%s)", k ? ", " : "", r,
					                      c->h[r].doing);
			rc = seterr(err, len, "watchdog: %s did not finish within %g s on %d of %d rank%s: %s", what, timeout, left,
			            c->n, c->n > 1 ? "s" : "", list);
			break;
		}
		struct timespec ts = {.tv_sec = (time_t)deadline,
		                      .tv_nsec = (long)((deadline - (double)(time_t)deadline) * 1e9)};
		int e = pthread_cond_timedwait(&c->done, &c->mu, &ts);
		(void)e; /* ETIMEDOUT or a wake-up: the loop re-reads the state either way */
	}
	pthread_mutex_unlock(&c->mu);
	return rc;
}

void crew_stop(Crew *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&c->mu);
	int busy = busy_locked(c);
	c->quit = 1;
	pthread_cond_broadcast(&c->go);
	pthread_mutex_unlock(&c->mu);
	if (busy)
		return; /* blocked threads: left to the process's exit, and the crew with them */
	for (int r = 0; r < c->n; r++)
		if (c->h[r].started)
			pthread_join(c->h[r].th, NULL);
	pthread_mutex_destroy(&c->mu);
	pthread_cond_destroy(&c->go);
	pthread_cond_destroy(&c->done);
	free(c);
}
