/*
** runtime/gpu/libnccl.c — find and open NCCL at run time. glmrun needs it only for plans partitioned across
** several GPUs; a tp 1 plan runs without it. Every entry point is resolved up front, so a library too
** old for glmrun is reported at start-up, not in the middle of a step.
*/
#include "libnccl.h"
#include "glm.h"

#include <dlfcn.h>
#include <glob.h>
#include <stdlib.h>
#include <string.h>

/* Try one path; on success remember where it came from. RTLD_NODELETE: NCCL keeps threads of its own
** (ncclGetUniqueId starts the bootstrap root's listener, which waits for ranks that may never come), so
** nccl_close must not unmap code they may still run (tests/test_ranks crashed at exit now and then). */
static int try_open(Nccl *n, const char *path, char *tried, size_t tlen)
{
	n->so = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE);
	if (n->so) {
		snprintf(n->path, sizeof n->path, "%s", path);
		return 1;
	}
	size_t k = strlen(tried);
	snprintf(tried + k, tlen - k, "%s%s", k ? ", " : "", path);
	return 0;
}

int nccl_open(Nccl *n, char *err, size_t len)
{
	memset(n, 0, sizeof *n);
	char tried[2048] = "";
	const char *env = getenv("GLMRUN_NCCL");
	if (env && *env) {
		if (!try_open(n, env, tried, sizeof tried))
			return seterr(err, len, "NCCL: GLMRUN_NCCL=%s cannot be loaded: %s", env, dlerror());
	} else {
		static const char *fixed[] = {"libnccl.so.2", "/usr/local/cuda/lib/libnccl.so.2",
		                              "/usr/local/cuda/lib64/libnccl.so.2", NULL};
		for (const char **p = fixed; *p && !n->so; p++)
			try_open(n, *p, tried, sizeof tried);
		/* The copy PyTorch's wheels bring (nvidia-nccl-cu*), in the usual virtual environments. */
		static const char *pat[] = {"/opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl/lib/libnccl.so.2",
		                            "/usr/local/lib/python3*/dist-packages/nvidia/nccl/lib/libnccl.so.2",
		                            "/usr/lib/python3/dist-packages/nvidia/nccl/lib/libnccl.so.2", NULL};
		for (const char **p = pat; *p && !n->so; p++) {
			glob_t gl;
			if (glob(*p, 0, NULL, &gl) == 0)
				for (size_t i = 0; i < gl.gl_pathc && !n->so; i++)
					try_open(n, gl.gl_pathv[i], tried, sizeof tried);
			globfree(&gl);
		}
		if (!n->so)
			return seterr(err, len, "NCCL not found (libnccl.so.2; tried %s); install NCCL or set GLMRUN_NCCL=PATH",
			              tried);
	}
#define SYM(f, name)                                                                                          \
	if (!(*(void **)&n->f = dlsym(n->so, name))) {                                                             \
		seterr(err, len, "NCCL: %s lacks %s (NCCL 2.9 or newer is needed)", n->path, name);                   \
		nccl_close(n);                                                                                         \
		return -1;                                                                                             \
	}
	SYM(get_version, "ncclGetVersion");
	SYM(errstr, "ncclGetErrorString");
	SYM(get_id, "ncclGetUniqueId");
	SYM(init_rank, "ncclCommInitRank");
	SYM(destroy, "ncclCommDestroy");
	SYM(abort, "ncclCommAbort");
	SYM(async_error, "ncclCommGetAsyncError");
	SYM(allreduce, "ncclAllReduce");
	SYM(allgather, "ncclAllGather");
	SYM(group_start, "ncclGroupStart");
	SYM(group_end, "ncclGroupEnd");
#undef SYM
	*(void **)&n->last_error = dlsym(n->so, "ncclGetLastError"); /* optional: only adds detail */
	ncclResult_t r = n->get_version(&n->version);
	if (r != ncclSuccess) {
		nccl_err(n, r, "ncclGetVersion", err, len);
		nccl_close(n);
		return -1;
	}
	if (n->version < 20900) {
		seterr(err, len, "NCCL: %s is version %d; glmrun needs 2.9 or newer (CUDA-graph capture of collectives)",
		       n->path, n->version);
		nccl_close(n);
		return -1;
	}
	return 0;
}

void nccl_close(Nccl *n)
{
	if (n->so)
		dlclose(n->so);
	memset(n, 0, sizeof *n);
}

int nccl_err(const Nccl *n, ncclResult_t r, const char *what, char *err, size_t len)
{
	const char *s = n->errstr ? n->errstr(r) : NULL, *last = n->last_error ? n->last_error(NULL) : NULL;
	return seterr(err, len, "NCCL: %s failed: %s (error %d)%s%s", what, s ? s : "unknown error", (int)r,
	              last && *last ? ": " : "", last && *last ? last : "");
}
