/*
** runtime/exec/crew.h — a crew of worker threads, one per rank, that run the same command in lockstep under
** a watchdog. The caller (glmrun's main thread) hands every worker a command and waits; the wait ends
** when all have finished, as soon as one fails, or when no unfinished worker has shown progress for
** `timeout` seconds. A hang (a rank stuck in a collective, a stalled rank) becomes an error that says
** which ranks did not finish and what each was doing, instead of a process that never returns.
*/
#ifndef GLM_CREW_H
#define GLM_CREW_H

#include <stddef.h>

#define CREW_MAX 64

typedef struct Crew Crew;

/* One command on one worker, run on that worker's thread: 0, or -1 with a one-line message in err. */
typedef int (*CrewFn)(void *ctx, int rank, int cmd, char *err, size_t len);

/* Start n workers (1..CREW_MAX), idle until crew_run. */
int crew_start(Crew **out, int n, CrewFn fn, void *ctx, char *err, size_t len);

/*
** Run cmd on every worker and wait. Returns 0 when all succeeded; -1 when one failed (its message,
** prefixed "rank R: " when n > 1, as soon as it fails: the others may still be blocked in a collective
** that the failed rank never joined); -1 when `timeout` seconds pass with no progress from any unfinished
** worker (the message names `what`, every rank that did not finish and what it was last doing).
*/
int crew_run(Crew *c, int cmd, const char *what, double timeout, char *err, size_t len);

/* Called by a worker inside its command: what it is doing now (a string that outlives the command, for
** the watchdog's report), which also counts as progress. */
void crew_note(Crew *c, int rank, const char *doing);

/* 1 while some worker has not finished the last command (after a failure or a timeout). Such a crew
** cannot be stopped: its threads may be blocked for ever, so the process must end with _exit. */
int crew_busy(Crew *c);

/* Stop and join the workers, then free the crew. A busy crew is left to the process's exit. */
void crew_stop(Crew *c);

#endif
