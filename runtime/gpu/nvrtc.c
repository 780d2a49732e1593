/*
** runtime/gpu/nvrtc.c — compile generated CUDA C++ to a cubin with NVRTC. The library is opened with
** dlopen, so glmc runs (and compiles CPU-only plans) on machines without the CUDA toolkit, and glmrun
** starts on machines without a GPU; each call opens and closes it, keeping no global state.
*/
#include "glm.h"
#include "libnvrtc.h"

#include <dlfcn.h>
#include <nvrtc.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	void *so;
	__typeof__(nvrtcCreateProgram) *create;
	__typeof__(nvrtcCompileProgram) *compile;
	__typeof__(nvrtcGetProgramLogSize) *log_size;
	__typeof__(nvrtcGetProgramLog) *log;
	__typeof__(nvrtcGetCUBINSize) *cubin_size;
	__typeof__(nvrtcGetCUBIN) *cubin;
	__typeof__(nvrtcDestroyProgram) *destroy;
	__typeof__(nvrtcGetErrorString) *errstr;
} Nvrtc;

/* Try the versioned name, the plain one, then the toolkit's usual places. */
static void *open_nvrtc(void)
{
	static const char *names[] = {"libnvrtc.so.13", "libnvrtc.so", "/usr/local/cuda/lib64/libnvrtc.so.13",
	                              "/usr/local/cuda/lib64/libnvrtc.so", NULL};
	const char *home = getenv("CUDA_HOME");
	if (home) {
		char p[4096];
		snprintf(p, sizeof p, "%s/lib64/libnvrtc.so", home);
		void *so = dlopen(p, RTLD_NOW | RTLD_LOCAL);
		if (so)
			return so;
	}
	for (const char **n = names; *n; n++) {
		void *so = dlopen(*n, RTLD_NOW | RTLD_LOCAL);
		if (so)
			return so;
	}
	return NULL;
}

static int load(Nvrtc *v)
{
	memset(v, 0, sizeof *v);
	if (!(v->so = open_nvrtc()))
		return -1;
#define SYM(f, name)                                  \
	if (!(*(void **)&v->f = dlsym(v->so, name))) { \
		dlclose(v->so);                               \
		return -1;                                    \
	}
	SYM(create, "nvrtcCreateProgram");
	SYM(compile, "nvrtcCompileProgram");
	SYM(log_size, "nvrtcGetProgramLogSize");
	SYM(log, "nvrtcGetProgramLog");
	SYM(cubin_size, "nvrtcGetCUBINSize");
	SYM(cubin, "nvrtcGetCUBIN");
	SYM(destroy, "nvrtcDestroyProgram");
	SYM(errstr, "nvrtcGetErrorString");
#undef SYM
	return 0;
}

int nvrtc_available(void)
{
	Nvrtc v;
	if (load(&v))
		return 0;
	dlclose(v.so);
	return 1;
}

/* Line n (1-based) of src, trimmed, into buf. */
static const char *source_line(const char *src, long n, char *buf, size_t len)
{
	const char *p = src;
	for (long i = 1; i < n && p; i++)
		if ((p = strchr(p, '\n')))
			p++;
	if (!p)
		return "";
	while (*p == ' ' || *p == '\t')
		p++;
	size_t k = strcspn(p, "\n");
	if (k >= len)
		k = len - 1;
	memcpy(buf, p, k);
	buf[k] = 0;
	return buf;
}

/* The first error in the log, with the generated line it points at (a ptxas error, which comes after the
** front end's warnings, names no line). */
static void first_error(const char *log, const char *src, char *err, size_t len)
{
	const char *e = strstr(log, ": error");
	if (!e)
		e = strstr(log, "ptxas error");
	if (!e)
		e = log;
	const char *start = e;
	while (start > log && start[-1] != '\n')
		start--;
	size_t k = strcspn(start, "\n");
	const char *paren = memchr(start, '(', k);
	long line = paren ? strtol(paren + 1, NULL, 10) : 0;
	char sl[256];
	snprintf(err, len, "NVRTC: %.*s%s%s", (int)(k > 400 ? 400 : k), start, line > 0 ? " | generated line: " : "",
	         line > 0 ? source_line(src, line, sl, sizeof sl) : "");
}

int nvrtc_compile(const char *src, const char *arch, unsigned char **cubin, size_t *n, char *err, size_t len)
{
	Nvrtc v;
	if (load(&v))
		return seterr(err, len, "NVRTC (libnvrtc.so) not found; install the CUDA toolkit or set CUDA_HOME");
	nvrtcProgram prog;
	nvrtcResult r = v.create(&prog, src, "kernels.cu", 0, NULL, NULL);
	if (r != NVRTC_SUCCESS) {
		seterr(err, len, "NVRTC: nvrtcCreateProgram: %s", v.errstr(r));
		dlclose(v.so);
		return -1;
	}
	char opt_arch[64];
	snprintf(opt_arch, sizeof opt_arch, "--gpu-architecture=%s", arch);
	/* make NVRTC_LINEINFO=1: kernels that carry their source lines (compute-sanitizer and ncu name them) */
#ifdef GLM_NVRTC_LINEINFO
	const char *opts[] = {opt_arch, "--std=c++17", "-default-device", "-lineinfo"};
#else
	const char *opts[] = {opt_arch, "--std=c++17", "-default-device"};
#endif
	r = v.compile(prog, (int)(sizeof opts / sizeof *opts), opts);
	int rc = 0;
	if (r != NVRTC_SUCCESS) {
		size_t ls = 0;
		v.log_size(prog, &ls);
		char *log = malloc(ls + 1);
		if (log && v.log(prog, log) == NVRTC_SUCCESS) {
			log[ls] = 0;
			first_error(log, src, err, len);
		} else
			seterr(err, len, "NVRTC: compile failed: %s", v.errstr(r));
		free(log);
		rc = -1;
	} else if (v.cubin_size(prog, n) != NVRTC_SUCCESS || !(*cubin = malloc(*n)) ||
	           v.cubin(prog, (char *)*cubin) != NVRTC_SUCCESS) {
		rc = seterr(err, len, "NVRTC: cannot get the cubin for %s", arch);
	}
	v.destroy(&prog);
	dlclose(v.so);
	return rc;
}
