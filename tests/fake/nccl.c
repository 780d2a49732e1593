/*
** tests/fake/nccl.c — a test double of NCCL for tests/ranks.sh, built as build/fake/libnccl.so.2 (see
** tests/fake/cuda.c): version 2.99.1 so runs on it are recognisable; ncclCommInitRank is collective as
** the real one is (it returns only once all ranks of the unique id have called it, or fails after 20 s);
** the collectives check their arguments and move no data. ncclCommDestroy fails (where the real one
** would wait forever) while a graph captured on this thread still holds NCCL calls: see tests/fake/cuda.c.
*/
#include <dlfcn.h>
#include <nccl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ncclComm {
	int nranks, rank;
};

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static ncclUniqueId joining;
static int arrived;
static _Thread_local char last_error[256];

ncclResult_t ncclGetVersion(int *v)
{
	*v = 29901;
	return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t r)
{
	return r == ncclSuccess ? "no error" : "fake NCCL error";
}

const char *ncclGetLastError(ncclComm_t c)
{
	(void)c;
	return last_error;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id)
{
	memset(id, 0, sizeof *id);
	snprintf(id->internal, sizeof id->internal, "fake-%ld", (long)time(NULL) ^ (long)(intptr_t)id);
	return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank)
{
	if (nranks < 1 || rank < 0 || rank >= nranks)
		return ncclInvalidArgument;
	pthread_mutex_lock(&mu);
	if (!arrived)
		joining = id;
	else if (memcmp(&joining, &id, sizeof id)) {
		pthread_mutex_unlock(&mu);
		return ncclInvalidUsage;
	}
	arrived++;
	pthread_cond_broadcast(&cv);
	struct timespec end;
	clock_gettime(CLOCK_REALTIME, &end);
	end.tv_sec += 20;
	int rc = 0;
	while (arrived < nranks && arrived > 0 && !rc)
		rc = pthread_cond_timedwait(&cv, &mu, &end);
	if (rc) {
		pthread_mutex_unlock(&mu);
		return ncclSystemError;
	}
	/* The last to leave resets the rendezvous for the next communicator. */
	static int left;
	if (++left == nranks)
		arrived = 0, left = 0;
	pthread_mutex_unlock(&mu);
	struct ncclComm *c = malloc(sizeof *c);
	if (!c)
		return ncclSystemError;
	c->nranks = nranks, c->rank = rank;
	*comm = c;
	return ncclSuccess;
}

/* The fake driver's hook named `name` (it is loaded by glmrun before NCCL), or NULL. */
static void *fakecuda(const char *name)
{
	void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	void *f = h ? dlsym(h, name) : NULL;
	if (h)
		dlclose(h);
	return f;
}

ncclResult_t ncclCommDestroy(ncclComm_t c)
{
	int (*graphs)(void) = (int (*)(void))fakecuda("fakecuda_nccl_graphs");
	int n = graphs ? graphs() : 0;
	if (n > 0) {
		snprintf(last_error, sizeof last_error,
		         "fake NCCL: ncclCommDestroy while %d captured graph(s) still hold this communicator's calls "
		         "(the real NCCL waits for them forever)", n);
		return ncclInvalidUsage;
	}
	free(c);
	return ncclSuccess;
}

/* Tell the fake driver a collective was enqueued (it marks the graph being captured, if any). */
static void note_collective(void)
{
	void (*f)(void) = (void (*)(void))fakecuda("fakecuda_collective");
	if (f)
		f();
}

ncclResult_t ncclCommAbort(ncclComm_t c)
{
	free(c);
	return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t *r)
{
	(void)c;
	*r = ncclSuccess;
	return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void *s, void *d, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                           cudaStream_t st)
{
	(void)st;
	note_collective();
	return s && d && n && c && op == ncclSum && (t == ncclFloat32 || t == ncclBfloat16 || t == ncclInt32)
	           ? ncclSuccess
	           : ncclInvalidArgument;
}

ncclResult_t ncclAllGather(const void *s, void *d, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st)
{
	(void)st;
	note_collective();
	return s && d && n && c && (t == ncclFloat32 || t == ncclBfloat16 || t == ncclInt32) ? ncclSuccess
	                                                                                      : ncclInvalidArgument;
}

ncclResult_t ncclGroupStart(void)
{
	return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void)
{
	return ncclSuccess;
}
