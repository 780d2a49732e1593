/*
** runtime/exec/ranks.c — the multi-GPU layer of glmrun (see ranks.h). The main thread never touches a GPU:
** it posts a command to the crew and waits under the watchdog; each worker thread owns one Gpu, whose
** context it makes current once, and runs the command on it. Collectives happen inside the Gpu's
** launches (cuda.c), so a step is collective simply because every rank runs it at the same time.
*/
#include "ranks.h"
#include "crew.h"
#include "libnccl.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum {
	CMD_OPEN, CMD_PEERS, CMD_COMM, CMD_P2P_ALLOC, CMD_P2P_START, /* set-up: before CMD_PREFILL (see run) */
	CMD_PREFILL, CMD_PREFILL_PARTS, CMD_SET_ROWS, CMD_FEED, CMD_DECODE, CMD_OUTPUTS, CMD_PROFILE, CMD_CLOSE
};

struct Ranks {
	int tp;
	const Graph *g;
	Crew *crew;
	RanksOpts ro;
	Nccl nc;
	int have_nccl;
	char nccl_note[1024];
	ncclUniqueId id;
	Gpu *gpu[CREW_MAX];
	ncclComm_t comm[CREW_MAX];
	unsigned char peer[CREW_MAX][CREW_MAX];
	uint64_t mbox[CREW_MAX];     /* each rank's P2P mailbox (0: none) */
	long p2p_max;                /* in use (0: NCCL only) */
	int32_t *next[CREW_MAX];     /* each rank's sampled tokens (slots entries) */
	int slots;
	float **none;                /* per node NULL: the outputs ranks other than 0 do not copy back */
	float *mine[CREW_MAX];       /* ranks > 0: their decode logits (mine_rows rows), when rank 0's are asked for */
	int mine_rows;
	int64_t V;
	/* The current command's arguments (written by the main thread before crew_run). */
	const char *weights;
	int64_t maxT, S;
	GpuOpts o;
	const int32_t *tokens, *pos;
	int64_t T;
	int32_t pos0;
	int slot, rows;              /* the prefill's cache slot; the decode step's rows */
	const int32_t *r_tok, *r_pos, *r_seq, *r_step; /* ranks_set_rows */
	const float *r_samp;
	const int32_t *p_seq, *p_step; /* ranks_prefill_parts (with tokens, pos, T) */
	const int64_t *p_last;
	const float *p_samp;
	int p_n;
	float *logits, **out;
	long step;                   /* decode steps so far */
	int32_t feed;                /* ranks_feed */
	int prof_steps, prof_eager;  /* --profile: every rank times its own step (collectives need them all) */
	double *prof_us[CREW_MAX], prof_sample[CREW_MAX];
	int prof_graph[CREW_MAX];
	char what[64];
};

typedef struct {
	Ranks *R;
	int rank;
} Beat;

/* gpu_open's progress (each weight uploaded) as a watchdog note. */
static void beat(void *ctx, const char *doing)
{
	Beat *b = ctx;
	crew_note(b->R->crew, b->rank, doing);
}

/* The test hook: this rank stops here for good, as a rank that died or deadlocked on its own would. */
static _Noreturn void stall(Ranks *R, int rank)
{
	crew_note(R->crew, rank, "stalled on purpose by the test hook GLMRUN_TEST_STALL_RANK");
	for (;;)
		sleep(1);
}

/* One command on one rank, on that rank's thread. */
static int work(void *ctx, int rank, int cmd, char *err, size_t len)
{
	Ranks *R = ctx;
	Gpu *x = R->gpu[rank];
	switch (cmd) {
	case CMD_OPEN: {
		Beat b = {R, rank};
		GpuOpts o = R->o;
		o.device = rank, o.rank = rank, o.tp = R->tp;
		o.progress = R->o.progress && rank == 0;
		o.beat = beat, o.beat_ctx = &b;
		crew_note(R->crew, rank, "opening the GPU, loading kernels and weights");
		return gpu_open(&R->gpu[rank], R->g, R->weights, R->maxT, R->S, &o, err, len);
	}
	case CMD_PEERS:
		crew_note(R->crew, rank, "enabling peer access");
		for (int q = 0; q < R->tp; q++) {
			if (q == rank)
				continue;
			int ok = gpu_enable_peer(x, q, err, len);
			if (ok < 0)
				return -1;
			R->peer[rank][q] = (unsigned char)ok;
		}
		return 0;
	case CMD_COMM: {
		crew_note(R->crew, rank, "in ncclCommInitRank (waits for every rank)");
		ncclResult_t r = R->nc.init_rank(&R->comm[rank], R->tp, R->id, rank);
		if (r != ncclSuccess)
			return nccl_err(&R->nc, r, "ncclCommInitRank", err, len);
		gpu_set_comm(x, &R->nc, R->comm[rank]);
		return 0;
	}
	case CMD_P2P_ALLOC: {
		crew_note(R->crew, rank, "allocating the P2P mailbox");
		/* the messages up to GLMRUN_P2P_MAX, and the persistent kernel's collective tasks (the logits' allgather) */
		int64_t task = sched_coll_max_bytes(R->g, 1), cap = task > R->ro.p2p_max ? task : R->ro.p2p_max;
		return gpu_p2p_alloc(x, (size_t)(cap + 255) / 256 * 256, &R->mbox[rank], err, len) < 0 ? -1 : 0;
	}
	case CMD_P2P_START:
		crew_note(R->crew, rank, "starting the P2P allreduce");
		return gpu_p2p_start(x, R->mbox, (size_t)R->p2p_max, err, len);
	case CMD_PREFILL:
		if (R->ro.stall_rank == rank && R->ro.stall_step == 0)
			stall(R, rank);
		crew_note(R->crew, rank, "prefill: launching and waiting for the GPU");
		return gpu_prefill_slot(x, R->slot, R->tokens, R->T, R->pos0, R->next[rank], rank == 0 ? R->logits : NULL, err,
		                        len);
	case CMD_PREFILL_PARTS:
		if (R->ro.stall_rank == rank && R->ro.stall_step == 0)
			stall(R, rank);
		crew_note(R->crew, rank, "prefill of several sequences: launching and waiting for the GPU");
		return gpu_prefill_parts(x, R->T, R->tokens, R->pos, R->p_seq, R->p_n, R->p_last, R->p_step, R->p_samp,
		                         R->next[rank], rank == 0 ? R->logits : NULL, err, len);
	case CMD_SET_ROWS:
		crew_note(R->crew, rank, "setting the step buffer's rows");
		return gpu_set_rows(x, R->rows, R->r_tok, R->r_pos, R->r_seq, R->r_step, R->r_samp, err, len);
	case CMD_FEED:
		crew_note(R->crew, rank, "feeding a forced token");
		return gpu_feed(x, R->feed, err, len);
	case CMD_DECODE:
		if (R->ro.stall_rank == rank && R->ro.stall_step == R->step)
			stall(R, rank);
		crew_note(R->crew, rank, "decode: capturing or launching the step's graph and waiting for the GPU");
		/* Every rank reads its logits back when rank 0 does, so all capture the same graph (and the
		** ranks' logits can be compared). */
		return gpu_decode_rows(x, R->rows, R->next[rank], rank == 0 || !R->logits ? R->logits : R->mine[rank], err,
		                       len);
	case CMD_OUTPUTS:
		crew_note(R->crew, rank, "running the step eagerly and copying every node back");
		return gpu_step_outputs(x, R->tokens, R->pos, R->T, rank == 0 ? R->out : R->none, err, len);
	case CMD_PROFILE:
		crew_note(R->crew, rank, "--profile: timing the decode step's kernels and collectives");
		return gpu_profile(x, R->prof_steps, R->prof_eager, R->prof_us[rank], &R->prof_sample[rank], &R->prof_graph[rank],
		                   err, len);
	case CMD_CLOSE:
		crew_note(R->crew, rank, "closing");
		gpu_drop_graphs(x); /* first: a graph holding NCCL calls makes ncclCommDestroy wait forever */
		if (R->comm[rank]) {
			ncclResult_t r = R->nc.destroy(R->comm[rank]);
			R->comm[rank] = NULL;
			if (r != ncclSuccess)
				return nccl_err(&R->nc, r, "ncclCommDestroy", err, len);
		}
		gpu_close(x);
		R->gpu[rank] = NULL;
		return 0;
	}
	return seterr(err, len, "ranks: unknown command %d", cmd);
}

int ranks_check_gpus(int tp, int visible, char *err, size_t len)
{
	if (tp <= visible)
		return 0;
	int fits = 1; /* the largest tp glmc compiles for (1, 2, 4, 8) that fits */
	while (fits * 2 <= visible && fits * 2 <= 8)
		fits *= 2;
	return seterr(err, len, "the plan is partitioned for %d GPUs (tp %d) but %d %s visible; run it on a machine with %d "
	              "GPUs, compile it with --tp %d for this one, or use --device cpu", tp, tp, visible,
	              visible == 1 ? "GPU is" : "GPUs are", tp, fits);
}

int ranks_opts_from_env(RanksOpts *ro, int tp, char *err, size_t len)
{
	ro->stall_rank = -1, ro->stall_step = 1, ro->p2p_max = 256 << 10;
	const char *r = getenv("GLMRUN_TEST_STALL_RANK"), *s = getenv("GLMRUN_TEST_STALL_STEP");
	const char *p = getenv("GLMRUN_P2P_MAX");
	char *end;
	if (p && *p) {
		long v = strtol(p, &end, 10);
		if (*end || end == p || v < 0 || v > 64L << 20)
			return seterr(err, len, "GLMRUN_P2P_MAX=%s: not a byte count in [0, 64 MiB]", p);
		ro->p2p_max = v;
	}
	if (!r || !*r)
		return 0;
	long v = strtol(r, &end, 10);
	if (*end || end == r || v < 0 || v >= tp)
		return seterr(err, len, "GLMRUN_TEST_STALL_RANK=%s: not a rank of this plan (0..%d)", r, tp - 1);
	ro->stall_rank = (int)v;
	if (s && *s) {
		long k = strtol(s, &end, 10);
		if (*end || end == s || k < 0 || k > 1 << 30)
			return seterr(err, len, "GLMRUN_TEST_STALL_STEP=%s: not a step number (0 is the prefill)", s);
		ro->stall_step = (int)k;
	}
	return 0;
}

/* Run one command on every rank under the watchdog. Start-up and clean-up (loading kernels and weights,
** NCCL's set-up and tear-down) get at least a minute without progress, whatever --timeout asks of steps. */
static int run(Ranks *R, int cmd, const char *what, char *err, size_t len)
{
	double t = R->ro.timeout;
	if ((cmd < CMD_PREFILL || cmd == CMD_PROFILE || cmd == CMD_CLOSE) && t < 60)
		t = 60;
	return crew_run(R->crew, cmd, what, t, err, len);
}

int ranks_open(Ranks **out, const Graph *g, const char *weights, int64_t maxT, int64_t S, const GpuOpts *o,
               const RanksOpts *ro, char *err, size_t len)
{
	*out = NULL;
	if (!g->cuda.source)
		return seterr(err, len, "the plan has no GPU kernels (glmc wrote it for the CPU only and said why when it "
		              "compiled it); run it with --device cpu");
	const char *tps = graph_meta(g, "tp");
	int tp = tps ? atoi(tps) : 1, visible = 0;
	if (tp < 1 || tp > CREW_MAX)
		return seterr(err, len, "plan: tp %d outside 1..%d", tp, CREW_MAX);
	if (gpu_count(&visible, err, len) || ranks_check_gpus(tp, visible, err, len))
		return -1;
	Ranks *R = calloc(1, sizeof *R);
	if (!R || !(R->none = calloc((size_t)g->n, sizeof *R->none)))
		return free(R), seterr(err, len, "out of memory");
	*out = R;
	R->tp = tp, R->g = g, R->ro = *ro, R->weights = weights, R->maxT = maxT, R->S = S, R->o = *o;
	R->slots = o->batch > 1 ? o->batch : 1;
	for (int r = 0; r < tp; r++)
		if (!(R->next[r] = calloc((size_t)R->slots, sizeof *R->next[r])))
			return seterr(err, len, "out of memory");
	for (int i = 0; i < g->nout; i++)
		if (!strcmp(g->out_name[i], "logits"))
			R->V = g->node[g->out[i]].dim[1];
	/* NVLink multicast (NVLS) is never used: glmc's collectives are small, and on shared machines a
	** multicast object can take the host's GPUs out of service. NCCL reads this at communicator init. */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	char nerr[768];
	if (nccl_open(&R->nc, nerr, sizeof nerr)) {
		if (tp > 1)
			return seterr(err, len, "the plan is partitioned for %d GPUs and needs NCCL: %s", tp, nerr);
		snprintf(R->nccl_note, sizeof R->nccl_note, "%s", nerr); /* tp 1 needs no collectives */
	} else {
		R->have_nccl = 1;
		ncclResult_t r = R->nc.get_id(&R->id);
		if (r != ncclSuccess)
			return nccl_err(&R->nc, r, "ncclGetUniqueId", err, len);
	}
	/* jansson seeds its hash function on first use; seeding it here keeps that out of the workers, which
	** all parse the checkpoint's JSON at the same time. */
	json_object_seed(0);
	if (crew_start(&R->crew, tp, work, R, err, len))
		return -1;
	if (run(R, CMD_OPEN, "opening the GPUs", err, len))
		return -1;
	if (tp > 1) {
		if (run(R, CMD_PEERS, "enabling peer access", err, len))
			return -1;
		char list[1024] = "";
		size_t k = 0;
		for (int a = 0; a < tp; a++)
			for (int b = 0; b < tp; b++)
				if (a != b && !R->peer[a][b] && k < sizeof list)
					k += (size_t)snprintf(list + k, sizeof list - k, "%s%d->%d", k ? ", " : "", a, b);
		if (k && !ro->quiet)
			fprintf(stderr, "glmrun: note: no peer access between GPUs %s; NCCL takes a slower path there\n", list);
	}
	if (R->have_nccl && run(R, CMD_COMM, "creating the NCCL communicators", err, len))
		return -1;
	/* The P2P kernel needs peer access between every pair, and a mailbox on every rank. */
	int p2p = tp > 1 && ro->p2p_max > 0;
	for (int a = 0; a < tp && p2p; a++)
		for (int b = 0; b < tp; b++)
			p2p &= a == b || R->peer[a][b];
	if (p2p && run(R, CMD_P2P_ALLOC, "allocating the P2P mailboxes", err, len))
		return -1;
	for (int r = 0; r < tp && p2p; r++)
		p2p &= R->mbox[r] != 0;
	if (p2p) {
		R->p2p_max = ro->p2p_max;
		if (run(R, CMD_P2P_START, "starting the P2P allreduce", err, len))
			return -1;
	}
	return 0;
}

/* Every rank must have sampled the same tokens (same seed, same gathered logits). */
static int agree(Ranks *R, const char *when, int rows, int32_t *next, char *err, size_t len)
{
	for (int r = 1; r < R->tp; r++)
		for (int i = 0; i < rows; i++)
			if (R->next[r][i] != R->next[0][i])
				return seterr(err, len, "ranks disagree after %s: rank 0 sampled token %d, rank %d sampled %d (their "
				              "logits differ: a collective or a rank's weights are wrong)", when, R->next[0][i], r,
				              R->next[r][i]);
	memcpy(next, R->next[0], sizeof *next * (size_t)rows);
	return 0;
}

int ranks_prefill(Ranks *R, int slot, const int32_t *tokens, int64_t T, int32_t pos0, int32_t *next, float *logits,
                  char *err, size_t len)
{
	R->slot = slot, R->tokens = tokens, R->T = T, R->pos0 = pos0, R->logits = logits;
	if (run(R, CMD_PREFILL, "prefill", err, len))
		return -1;
	return agree(R, "the prefill", 1, next, err, len);
}

int ranks_prefill_parts(Ranks *R, int64_t T, const int32_t *tokens, const int32_t *pos, const int32_t *seq, int np,
                        const int64_t *last, const int32_t *step, const float *samp, int32_t *next, float *logits,
                        char *err, size_t len)
{
	if (np < 1 || np > R->slots)
		return seterr(err, len, "a prefill of %d sequences; the caches hold %d", np, R->slots);
	R->T = T, R->tokens = tokens, R->pos = pos, R->p_seq = seq, R->p_n = np, R->p_last = last, R->p_step = step;
	R->p_samp = samp, R->logits = logits;
	if (run(R, CMD_PREFILL_PARTS, "prefill", err, len))
		return -1;
	return agree(R, "the prefill", np, next, err, len);
}

int ranks_set_rows(Ranks *R, int rows, const int32_t *tokens, const int32_t *pos, const int32_t *seq,
                   const int32_t *step, const float *samp, char *err, size_t len)
{
	R->rows = rows, R->r_tok = tokens, R->r_pos = pos, R->r_seq = seq, R->r_step = step, R->r_samp = samp;
	return run(R, CMD_SET_ROWS, "setting the rows of the next steps", err, len);
}

int ranks_feed(Ranks *R, int32_t tok, char *err, size_t len)
{
	R->feed = tok;
	return run(R, CMD_FEED, "feeding a forced token", err, len);
}

int ranks_decode(Ranks *R, int rows, int32_t *next, float *logits, char *err, size_t len)
{
	if (rows < 1 || rows > R->slots)
		return seterr(err, len, "a step of %d sequences; the caches hold %d", rows, R->slots);
	if (logits && rows > R->mine_rows) {
		for (int r = 1; r < R->tp; r++) {
			free(R->mine[r]);
			if (!(R->mine[r] = malloc(sizeof(float) * (size_t)R->V * (size_t)rows)))
				return seterr(err, len, "out of memory");
		}
		R->mine_rows = rows;
	}
	R->logits = logits, R->rows = rows;
	R->step++;
	snprintf(R->what, sizeof R->what, "decode step %ld", R->step);
	if (run(R, CMD_DECODE, R->what, err, len))
		return -1;
	/* The gathered logits are the same bytes on every rank; any difference is a broken collective. */
	for (int r = 1; logits && r < R->tp; r++)
		if (memcmp(R->mine[r], logits, sizeof(float) * (size_t)R->V * (size_t)rows))
			return seterr(err, len, "ranks disagree after %s: rank %d's logits differ from rank 0's (a collective or a "
			              "rank's weights are wrong)", R->what, r);
	return agree(R, R->what, rows, next, err, len);
}

int ranks_step_outputs(Ranks *R, const int32_t *tokens, const int32_t *pos, int64_t T, float **out, char *err,
                       size_t len)
{
	R->tokens = tokens, R->pos = pos, R->T = T, R->out = out;
	return run(R, CMD_OUTPUTS, "a step for --verify", err, len);
}

/* --profile on every rank at once (each rank's step holds the collectives the others wait in); rank 0's
** times are returned, as gpu_profile gives them. */
int ranks_profile(Ranks *R, int steps, int eager, double *us, double *sample_us, int *graph, char *err, size_t len)
{
	int nl = R->g->cuda.nl, rc = 0;
	R->prof_steps = steps, R->prof_eager = eager, R->prof_us[0] = us;
	for (int r = 1; r < R->tp && !rc; r++)
		if (!(R->prof_us[r] = calloc((size_t)nl + 1, sizeof(double))))
			rc = seterr(err, len, "out of memory");
	if (!rc)
		rc = run(R, CMD_PROFILE, "--profile", err, len);
	for (int r = 1; r < R->tp; r++)
		free(R->prof_us[r]), R->prof_us[r] = NULL;
	*sample_us = R->prof_sample[0], *graph = R->prof_graph[0];
	return rc;
}

int64_t ranks_max_seq(const Ranks *R)
{
	int64_t m = gpu_max_seq(R->gpu[0]);
	for (int r = 1; r < R->tp; r++)
		m = gpu_max_seq(R->gpu[r]) < m ? gpu_max_seq(R->gpu[r]) : m;
	return m;
}

void ranks_stats(const Ranks *R, RanksStats *s)
{
	memset(s, 0, sizeof *s);
	if (R->gpu[0])
		gpu_stats(R->gpu[0], &s->gpu);
	s->tp = R->tp;
	if (R->have_nccl) {
		s->nccl_version = R->nc.version;
		snprintf(s->nccl_path, sizeof s->nccl_path, "%s", R->nc.path);
	}
	snprintf(s->nccl_note, sizeof s->nccl_note, "%s", R->nccl_note);
	s->p2p_max = R->p2p_max;
	for (int a = 0; a < R->tp; a++)
		for (int b = 0; b < R->tp; b++)
			if (a != b)
				s->peer_pairs++, s->peer_ok += R->peer[a][b];
}

int ranks_stuck(Ranks *R)
{
	return R && R->crew && crew_busy(R->crew);
}

void ranks_close(Ranks *R)
{
	if (!R || ranks_stuck(R))
		return;
	if (R->crew) {
		char err[1024];
		if (run(R, CMD_CLOSE, "closing", err, sizeof err) && !R->ro.quiet)
			fprintf(stderr, "glmrun: warning: %s\n", err);
		if (crew_busy(R->crew))
			return;
		crew_stop(R->crew);
	}
	if (R->have_nccl)
		nccl_close(&R->nc);
	for (int r = 0; r < R->tp; r++)
		free(R->mine[r]), free(R->next[r]);
	free(R->none);
	free(R);
}

/* Rank r's Gpu, for read-only queries from the main thread (gpu_weight_bytes). */
const Gpu *ranks_gpu(const Ranks *R, int r)
{
	return r >= 0 && r < R->tp ? R->gpu[r] : NULL;
}
