/*
** tests/fake/simtnccl.c — a test double of NCCL that moves and sums real data, built as
** build/simtcuda/libnccl.so.2 beside the driver double that runs kernels (tests/fake/simtcuda.c), so that
** glmrun's tensor-parallel GPU path computes real logits without a GPU (tests/simt_tp.sh). Unlike
** tests/fake/nccl.c (for tests/ranks.sh), which only checks arguments, every collective here happens:
**   ncclAllReduce (sum only; f32, bf16, i32): each element summed over the ranks in rank order, 0 + x0 + x1
**     + ..., in float for bf16 and rounded once to nearest-even: the same bits on every rank, and the order
**     the one-shot P2P allreduce (ops/kernels.cuh) and the CPU ranks (runtime/exec/exec.c) sum in;
**   ncclAllGather: each rank's count elements laid side by side in rank order.
** Version 2.99.2, so runs on it are recognisable. ncclCommInitRank is collective (it returns once all ranks of
** the unique id have called it, or fails after 20 s). The ranks are the threads of one process (glmrun's
** worker per GPU), and "device" memory is host memory, so a collective is a host rendezvous: each rank posts
** its call (kind, type, count, buffers) and its call number on the communicator, waits for every rank, checks
** that they all posted the same call (else every rank fails it with a line saying how they differ), computes
** its result into a buffer of its own reading the others' sources, waits again until every rank has read
** them, and only then writes its destination (so in-place calls are safe). A rank that waits 60 s fails.
**
** Stream order: a collective is handed to the driver double through its one export for this file,
**   CUresult simtcuda_host_op(CUstream st, CUresult (*fn)(void *arg), const void *arg, size_t n)
** (found by dlsym in the libcuda.so.1 glmrun loaded; see the top of simtcuda.c): it runs now when st is not
** being captured (the double's launches are synchronous, so everything before it on the stream has run), or
** at each replay of the graph being captured, from a copy of the call's description. A failed call's line is
** ncclGetLastError's; one that a replay ran also prints it on stderr (glmrun sees cuGraphLaunch fail).
*/
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { SN_MAXRANK = 8, SN_WAIT_S = 60 };

/* One call as a rank posts it. */
typedef struct {
	int kind; /* 0 allreduce, 1 allgather */
	ncclDataType_t type;
	size_t cnt;
	const void *src;
	void *dst;
	unsigned long seq; /* the call's number on this rank's communicator */
} SnPost;

/* What the ranks of one unique id share: the rendezvous and each rank's posted call. */
typedef struct SnGroup {
	ncclUniqueId id;
	int nranks, joined, refs;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned long gen; /* barrier generations */
	int count;         /* ranks waiting at the barrier */
	int broken;        /* a rank timed out: every later call fails at once */
	SnPost post[SN_MAXRANK];
	struct SnGroup *next;
} SnGroup;

struct ncclComm {
	SnGroup *g;
	int rank;
	unsigned long seq; /* calls run so far (at replay for captured ones) */
};

typedef CUresult (*SnHostOp)(CUstream, CUresult (*)(void *), const void *, size_t);

/* A call as simtcuda_host_op keeps it for a replay. */
typedef struct {
	struct ncclComm *c;
	SnPost p;
} SnCall;

static pthread_mutex_t sn_mu = PTHREAD_MUTEX_INITIALIZER; /* the list of groups and their joining */
static pthread_cond_t sn_cv = PTHREAD_COND_INITIALIZER;
static SnGroup *sn_groups;
static _Thread_local char sn_last[512];

static _Thread_local int sn_eager; /* a collective is being issued (not replayed) on this thread */

/* Records why the last call on this thread failed (ncclGetLastError, which glmrun adds to its message), and
** says it on stderr when a graph replays the call: glmrun then sees only cuGraphLaunch fail. */
static void sn_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void sn_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(sn_last, sizeof sn_last, fmt, ap);
	va_end(ap);
}

/* sn_fail's record on stderr, for a failed call that a replay ran. */
static void sn_say_replayed(void)
{
	if (!sn_eager)
		fprintf(stderr, "simtnccl: %s\n", sn_last);
}

ncclResult_t ncclGetVersion(int *v)
{
	*v = 29902;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : "simt NCCL error (tests/fake/simtnccl.c)";
}

const char *ncclGetLastError(ncclComm_t c)
{
	(void)c;
	return sn_last;
}

/* Distinct per call in this process: a counter and the time. */
ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	static unsigned long n;
	pthread_mutex_lock(&sn_mu);
	unsigned long k = ++n;
	pthread_mutex_unlock(&sn_mu);
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, "simtnccl-%lu-%ld", k, (long)time(NULL));
	return ncclSuccess;
}

/* The driver double's host_op export, or NULL when the libcuda.so.1 loaded is not tests/fake/simtcuda.c. */
static SnHostOp sn_host_op(void)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	SnHostOp f = NULL;
	if (h) {
		*(void **)&f = dlsym(h, "simtcuda_host_op");
		dlclose(h);
	}
	return f;
}

/* Waits (g->mu held) until all g->nranks ranks have arrived; -1 after SN_WAIT_S seconds (the group is then
** broken for good). */
static int sn_barrier(SnGroup *g)
{
	unsigned long gen = g->gen;
	if (g->broken)
		return -1;
	if (++g->count == g->nranks) {
		g->count = 0, g->gen++;
		pthread_cond_broadcast(&g->cv);
		return 0;
	}
	struct timespec end;
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += SN_WAIT_S;
	int rc = 0;
	while (g->gen == gen && !g->broken && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&g->cv, &g->mu, &end);
	if (g->gen != gen)
		return 0;
	g->broken = 1;
	pthread_cond_broadcast(&g->cv);
	return -1;
}

/* Joins (or starts) the group of id; returns once all nranks have joined, or fails after 20 s. */
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	if (nranks < 1 || nranks > SN_MAXRANK || rank < 0 || rank >= nranks) {
		sn_fail("ncclCommInitRank: rank %d of %d (at most %d ranks)", rank, nranks, SN_MAXRANK);
		return ncclInvalidArgument;
	}
	if (!sn_host_op()) {
		sn_fail("ncclCommInitRank: the libcuda.so.1 loaded is not the simt driver double (tests/fake/simtcuda.c)");
		return ncclSystemError;
	}
	struct ncclComm *c = calloc(1, sizeof *c);
	if (!c)
		return ncclSystemError;
	pthread_mutex_lock(&sn_mu);
	SnGroup *g = sn_groups;
	while (g && (memcmp(&g->id, &id, sizeof id) || g->joined == g->nranks))
		g = g->next;
	if (!g && (g = calloc(1, sizeof *g))) {
		g->id = id, g->nranks = nranks;
		pthread_mutex_init(&g->mu, NULL);
		pthread_cond_init(&g->cv, NULL);
		g->next = sn_groups, sn_groups = g;
	}
	if (!g || g->nranks != nranks) {
		sn_fail("ncclCommInitRank: rank %d says %d ranks, the first to join said %d", rank, nranks, g ? g->nranks : 0);
		pthread_mutex_unlock(&sn_mu);
		free(c);
		return g ? ncclInvalidUsage : ncclSystemError;
	}
	g->joined++, g->refs++;
	c->g = g, c->rank = rank;
	pthread_cond_broadcast(&sn_cv);
	struct timespec end;
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += 20;
	int rc = 0;
	while (g->joined < nranks && rc != ETIMEDOUT)
		rc = pthread_cond_timedwait(&sn_cv, &sn_mu, &end);
	int all = g->joined == nranks;
	pthread_mutex_unlock(&sn_mu);
	if (!all) {
		sn_fail("ncclCommInitRank: rank %d waited 20 s for the other ranks of %d", rank, nranks);
		ncclCommDestroy(c);
		return ncclSystemError;
	}
	*comm = c;
	return ncclSuccess;
}

/* Leaves the group; the last rank to leave frees it. */
ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	if (!c)
		return ncclInvalidArgument;
	SnGroup *g = c->g;
	pthread_mutex_lock(&sn_mu);
	if (--g->refs == 0) {
		SnGroup **p = &sn_groups;
		while (*p != g)
			p = &(*p)->next;
		*p = g->next;
		pthread_mutex_destroy(&g->mu);
		pthread_cond_destroy(&g->cv);
		free(g);
	}
	pthread_mutex_unlock(&sn_mu);
	free(c);
	return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	return ncclCommDestroy(c);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
	*r = c && c->g->broken ? ncclRemoteError : ncclSuccess;
	return ncclSuccess;
}

/* Bytes of one element of t (0: a type this double does not reduce or gather). */
static size_t sn_size(ncclDataType_t t)
{
	return t == ncclFloat32 || t == ncclInt32 ? 4 : t == ncclBfloat16 ? 2 : 0;
}

/* Element k of p (type t) as a float (i32: as an exact integer sum needs no float). */
static float sn_get(const void *p, ncclDataType_t t, size_t k)
{
	if (t == ncclBfloat16) {
		uint32_t u = (uint32_t)((const uint16_t *)p)[k] << 16;
		float f;
		memcpy(&f, &u, 4);
		return f;
	}
	return ((const float *)p)[k];
}

/* f rounded to bf16, to nearest even (a NaN stays a quiet NaN). */
static uint16_t sn_bf16(float f)
{
	uint32_t u;
	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40u);
	return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* Rank me's result of the posted calls P (all alike) into out. */
static void sn_compute(const SnPost *P, int n, int me, unsigned char *out)
{
	const SnPost *p = &P[me];
	size_t es = sn_size(p->type);
	if (p->kind == 1) {
		for (int r = 0; r < n; r++)
			memcpy(out + (size_t)r * p->cnt * es, P[r].src, p->cnt * es);
		return;
	}
	for (size_t k = 0; k < p->cnt; k++) {
		if (p->type == ncclInt32) {
			int32_t s = 0;
			for (int r = 0; r < n; r++)
				s += ((const int32_t *)P[r].src)[k];
			((int32_t *)out)[k] = s;
			continue;
		}
		float s = 0.0f;
		for (int r = 0; r < n; r++)
			s += sn_get(P[r].src, p->type, k);
		if (p->type == ncclBfloat16)
			((uint16_t *)out)[k] = sn_bf16(s);
		else
			((float *)out)[k] = s;
	}
}

/* A call, run on its rank's thread in stream order (simtcuda_host_op): see the top of this file. */
static CUresult sn_run(void *arg)
{
	SnCall *k = arg;
	struct ncclComm *c = k->c;
	SnGroup *g = c->g;
	const char *what = k->p.kind ? "ncclAllGather" : "ncclAllReduce";
	size_t bytes = k->p.cnt * sn_size(k->p.type) * (k->p.kind ? (size_t)g->nranks : 1);
	unsigned char *out = malloc(bytes ? bytes : 1);
	if (!out) {
		sn_fail("%s: out of memory", what);
		sn_say_replayed();
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&g->mu);
	g->post[c->rank] = k->p;
	g->post[c->rank].seq = c->seq++;
	int bad = -1;
	if (sn_barrier(g)) {
		pthread_mutex_unlock(&g->mu);
		free(out);
		sn_fail("%s (call %lu) on rank %d: the other ranks did not come within %d s", what, c->seq - 1, c->rank,
		        SN_WAIT_S);
		sn_say_replayed();
		return CUDA_ERROR_LAUNCH_TIMEOUT;
	}
	SnPost P[SN_MAXRANK];
	memcpy(P, g->post, sizeof P);
	pthread_mutex_unlock(&g->mu);
	for (int r = 1; r < g->nranks && bad < 0; r++)
		if (P[r].kind != P[0].kind || P[r].type != P[0].type || P[r].cnt != P[0].cnt || P[r].seq != P[0].seq)
			bad = r;
	if (bad < 0)
		sn_compute(P, g->nranks, c->rank, out);
	pthread_mutex_lock(&g->mu);
	int late = sn_barrier(g); /* every rank has read the others' sources */
	pthread_mutex_unlock(&g->mu);
	if (bad < 0 && !late)
		memcpy(k->p.dst, out, bytes);
	free(out);
	if (bad >= 0) {
		sn_fail("the ranks' calls differ: rank 0's call %lu is %s of %zu values of type %d, rank %d's call %lu is %s "
		        "of %zu of type %d", P[0].seq, P[0].kind ? "ncclAllGather" : "ncclAllReduce", P[0].cnt, (int)P[0].type,
		        bad, P[bad].seq, P[bad].kind ? "ncclAllGather" : "ncclAllReduce", P[bad].cnt, (int)P[bad].type);
		sn_say_replayed();
		return CUDA_ERROR_LAUNCH_FAILED;
	}
	if (late) {
		sn_fail("%s (call %lu) on rank %d: the other ranks did not finish within %d s", what, P[c->rank].seq, c->rank,
		        SN_WAIT_S);
		sn_say_replayed();
		return CUDA_ERROR_LAUNCH_TIMEOUT;
	}
	return CUDA_SUCCESS;
}

/* Checks a call's arguments and hands it to the driver double's stream. */
static ncclResult_t sn_issue(int kind, const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c,
                             cudaStream_t st)
{
	const char *what = kind ? "ncclAllGather" : "ncclAllReduce";
	sn_last[0] = 0;
	if (!s || !d || !c || !sn_size(t)) {
		sn_fail("%s: null buffer or communicator, or data type %d (this double sums f32, bf16 and i32)", what, (int)t);
		return ncclInvalidArgument;
	}
	SnHostOp op = sn_host_op();
	if (!op) {
		sn_fail("%s: the libcuda.so.1 loaded is not the simt driver double", what);
		return ncclSystemError;
	}
	SnCall k = {c, {kind, t, n, s, d, 0}};
	sn_eager = 1;
	CUresult r = op((CUstream)st, sn_run, &k, sizeof k);
	sn_eager = 0;
	if (r != CUDA_SUCCESS) {
		if (!sn_last[0])
			sn_fail("%s: the driver double refused it (CUDA error %d)", what, (int)r);
		return r == CUDA_ERROR_LAUNCH_FAILED ? ncclInvalidUsage : ncclSystemError; /* the ranks' calls differ */
	}
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st)
{
	if (op != ncclSum) {
		sn_fail("ncclAllReduce: reduction %d (this double only sums)", (int)op);
		return ncclInvalidArgument;
	}
	return sn_issue(0, s, d, n, t, c, st);
}

ncclResult_t ncclAllGather(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
	return sn_issue(1, s, d, n, t, c, st);
}

/* Calls in a group run one after another as issued: every rank issues them in the same order. */
ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}
