/*
** tests/test_crew.c — the watchdog of glmrun's per-GPU workers (runtime/exec/crew.c) with plain threads: every
** command runs once on every worker; a failure is reported at once with its rank, even while another
** worker is blocked (as in a collective the failed rank never joins); a stalled worker turns into an
** error naming it within the timeout; progress notes keep a slow but moving worker alive.
*/
#include "check.h"
#include "crew.h"
#include "glm.h"

#include <pthread.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { CMD_COUNT, CMD_FAIL_ONE, CMD_BLOCK_AND_FAIL, CMD_STALL, CMD_SLOW };

typedef struct {
	Crew *c;
	int runs[CREW_MAX];
	int last_cmd[CREW_MAX];
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int release;                 /* set by the test to let blocked workers go */
} Ctx;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Block until the test sets release (a stand-in for a rank stuck in a collective). */
static void block(Ctx *x)
{
	pthread_mutex_lock(&x->mu);
	while (!x->release)
		pthread_cond_wait(&x->cv, &x->mu);
	pthread_mutex_unlock(&x->mu);
}

static int work(void *ctx, int rank, int cmd, char *err, size_t len)
{
	Ctx *x = ctx;
	x->runs[rank]++;
	x->last_cmd[rank] = cmd;
	switch (cmd) {
	case CMD_FAIL_ONE:
		if (rank == 1)
			return seterr(err, len, "boom on purpose");
		return 0;
	case CMD_BLOCK_AND_FAIL:
		if (rank == 0) {
			crew_note(x->c, rank, "waiting for the others");
			block(x);
			return 0;
		}
		usleep(20000);
		return seterr(err, len, "out of memory on purpose");
	case CMD_STALL:
		if (rank == 2) {
			crew_note(x->c, rank, "stalled on purpose");
			block(x);
		}
		return 0;
	case CMD_SLOW:
		for (int i = 0; i < 12; i++) {
			usleep(50000);
			crew_note(x->c, rank, "still going");
		}
		return 0;
	default:
		return 0;
	}
}

/* Wait (bounded) until the crew's workers have all finished. */
static int wait_idle(Crew *c)
{
	for (int i = 0; i < 500 && crew_busy(c); i++)
		usleep(10000);
	return !crew_busy(c);
}

static void release(Ctx *x)
{
	pthread_mutex_lock(&x->mu);
	x->release = 1;
	pthread_cond_broadcast(&x->cv);
	pthread_mutex_unlock(&x->mu);
}

int main(void)
{
	char err[2048];
	Ctx x = {0};
	pthread_mutex_init(&x.mu, NULL);
	pthread_cond_init(&x.cv, NULL);

	Crew *c;
	check(crew_start(&c, 0, work, &x, err, sizeof err) != 0 && strstr(err, "crew of 0"), "a crew of 0 workers is refused",
	      "%s", err);
	check(crew_start(&c, 4, work, &x, err, sizeof err) == 0, "start 4 workers", "%s", err);
	x.c = c;
	int rc = 0;
	for (int k = 0; k < 3 && !rc; k++)
		rc = crew_run(c, CMD_COUNT, "count", 5, err, sizeof err);
	int each = 1;
	for (int r = 0; r < 4; r++)
		each &= x.runs[r] == 3 && x.last_cmd[r] == CMD_COUNT;
	check(rc == 0 && each, "every command runs once on every worker", "rc %d runs %d %d %d %d (%s)", rc, x.runs[0],
	      x.runs[1], x.runs[2], x.runs[3], err);

	rc = crew_run(c, CMD_FAIL_ONE, "fail", 5, err, sizeof err);
	check(rc != 0 && !strcmp(err, "rank 1: boom on purpose"), "a failing rank is named with its message", "rc %d '%s'",
	      rc, err);
	/* crew_run returned at the failure; the other workers finish on their own. */
	check(wait_idle(c), "the others finish after a failure", "still busy");

	/* Rank 0 blocks (as in a collective) while the others fail: the first failure comes back at once. */
	double t0 = now_s();
	rc = crew_run(c, CMD_BLOCK_AND_FAIL, "step", 30, err, sizeof err);
	double dt = now_s() - t0;
	check(rc != 0 && strstr(err, "out of memory on purpose") && !strncmp(err, "rank ", 5) && dt < 10,
	      "a failure is reported without waiting for a blocked rank", "rc %d after %.2f s: '%s'", rc, dt, err);
	check(crew_busy(c), "the crew is busy while a rank is blocked", "not busy");
	rc = crew_run(c, CMD_COUNT, "next", 5, err, sizeof err);
	check(rc != 0 && strstr(err, "has not finished the previous command"), "a busy crew refuses the next command",
	      "rc %d '%s'", rc, err);
	release(&x);
	check(wait_idle(c), "the blocked rank finishes once released", "still busy");
	x.release = 0;

	/* A stalled rank: the watchdog fires after the timeout and names it with its last note. */
	crew_stop(c);
	check(crew_start(&c, 3, work, &x, err, sizeof err) == 0, "start 3 workers", "%s", err);
	x.c = c;
	t0 = now_s();
	rc = crew_run(c, CMD_STALL, "decode step 7", 0.3, err, sizeof err);
	dt = now_s() - t0;
	check(rc != 0 && strstr(err, "watchdog: decode step 7 did not finish within 0.3 s on 1 of 3 ranks") &&
	          strstr(err, "rank 2 (stalled on purpose)") && !strstr(err, "rank 0") && !strstr(err, "rank 1"),
	      "a stalled rank is named by the watchdog", "'%s'", err);
	check(rc != 0 && dt >= 0.29 && dt < 10, "the watchdog fires after the timeout, not before", "after %.2f s", dt);
	check(crew_busy(c), "the stalled crew stays busy", "not busy");
	release(&x);
	check(wait_idle(c), "the stalled rank finishes once released", "still busy");
	x.release = 0;

	/* Progress notes keep a worker that takes longer than the timeout in all alive. */
	rc = crew_run(c, CMD_SLOW, "upload", 0.3, err, sizeof err);
	check(rc == 0, "progress notes keep the watchdog quiet", "%s", err);
	crew_stop(c);

	/* One worker: messages carry no rank prefix; a stall names rank 0. */
	check(crew_start(&c, 1, work, &x, err, sizeof err) == 0, "start 1 worker", "%s", err);
	x.c = c;
	rc = crew_run(c, CMD_SLOW, "upload", 5, err, sizeof err);
	check(rc == 0, "a single worker runs", "%s", err);
	crew_stop(c);
	return check_done();
}
