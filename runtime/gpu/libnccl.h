/*
** runtime/gpu/libnccl.h — NCCL, opened with dlopen so glmrun starts (and runs tp 1 plans) on machines without
** it. Only nccl.h's types and prototypes are used; the library itself is never linked.
*/
#ifndef GLM_NCCL_H
#define GLM_NCCL_H

#include <nccl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" { /* bench/allreduce.cu uses it too */
#endif

typedef struct Nccl {
	void *so;
	char path[512];              /* where it was found */
	int version;                 /* ncclGetVersion: major*10000 + minor*100 + patch */
	__typeof__(ncclGetVersion) *get_version;
	__typeof__(ncclGetErrorString) *errstr;
	__typeof__(ncclGetLastError) *last_error;
	__typeof__(ncclGetUniqueId) *get_id;
	__typeof__(ncclCommInitRank) *init_rank;
	__typeof__(ncclCommDestroy) *destroy;
	__typeof__(ncclCommAbort) *abort;
	__typeof__(ncclCommGetAsyncError) *async_error;
	__typeof__(ncclAllReduce) *allreduce;
	__typeof__(ncclAllGather) *allgather;
	__typeof__(ncclGroupStart) *group_start;
	__typeof__(ncclGroupEnd) *group_end;
} Nccl;

/* Open libnccl.so.2: $GLMRUN_NCCL when set (a path), else the loader's search, then the CUDA toolkit's
** and PyTorch's usual places. On failure the message names every place tried. */
int nccl_open(Nccl *n, char *err, size_t len);
void nccl_close(Nccl *n);

/* A failed NCCL call as a one-line error: what, NCCL's own string and its last error text. */
int nccl_err(const Nccl *n, ncclResult_t r, const char *what, char *err, size_t len);

#ifdef __cplusplus
}
#endif

#endif
