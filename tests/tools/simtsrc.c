/*
** tests/tools/simtsrc.c — a plan's CUDA source as one C++ file for the CPU (tests/simt), the kernel half of
** the driver double tests/fake/simtcuda.c. The plan's source (the ops headers and emit_cuda's extern "C"
** wrappers) is written after simt.h, with each wrapper's dynamic shared memory (an extern __shared__ array,
** which simt.h cannot map) turned into a file-scope pointer the launch sets. Per wrapper NAME it adds
**   extern "C" void NAME_simt(const unsigned *grid, unsigned block, void *dsm, unsigned dsm_bytes, void **params)
** which copies the driver's kernelParams into the wrapper's typed parameters and runs the grid through
** simt_launch, and extern "C" const int NAME_simt_argsz[] (each parameter's size, then 0), which the
** double needs to copy a launch's parameter values into a captured graph.
**
** With --persist it writes the plan's persistent decode kernel (Cuda.psource, emit_cuda_persist) the same
** way: its one wrapper glm_persist gets the adaptor, which the double runs when glmrun loads that program.
** That adaptor runs the grid through simt_launch_concurrent (every worker alive together, as on a GPU whose
** SMs hold them all) and leaves extern "C" int glm_persist_simt_status nonzero when it failed (a deadlock:
** simt printed why), which the double turns into a launch error.
**
** usage: simtsrc [--persist] PLAN > PLAN.cc   then g++ -std=c++17 -fPIC -shared -Itests/simt -Iops PLAN.cc
**        tests/simt/simt.cc -o PLAN.so (tests/simt_gpu.sh).
*/
#include "glm.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fprintf(stderr, "simtsrc: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	exit(1);
}

#define SS_HEAD "extern \"C\" __global__ void __launch_bounds__("
#define SS_DSM "extern __shared__ __align__(128) unsigned char glm_dsm[];"
enum { SS_MAXARG = 64 };

/* One parameter of a wrapper: its type and name, as the wrapper spells them. */
typedef struct {
	char type[128], name[64];
} SsArg;

/* Splits "const float *x" into type "const float *" and name "x"; line is for the error. */
static void ss_param(const char *p, size_t n, SsArg *a, int line)
{
	while (n && isspace((unsigned char)p[n - 1]))
		n--;
	while (n && isspace((unsigned char)*p))
		p++, n--;
	size_t e = n;
	while (e && (isalnum((unsigned char)p[e - 1]) || p[e - 1] == '_'))
		e--;
	if (e == 0 || e == n || n - e >= sizeof a->name || e >= sizeof a->type)
		fail("wrapper on source line %d: cannot read parameter '%.*s'", line, (int)n, p);
	memcpy(a->type, p, e), a->type[e] = 0;
	memcpy(a->name, p + e, n - e), a->name[n - e] = 0;
}

/* Writes the adaptor and size table of the wrapper whose declaration starts at s (an SS_HEAD line). */
static void ss_adaptor(const char *s, int line, int concurrent)
{
	const char *q = strchr(s + strlen(SS_HEAD), ')');
	if (!q)
		fail("wrapper on source line %d: no end to __launch_bounds__", line);
	q++;
	while (*q == ' ')
		q++;
	const char *o = strchr(q, '(');
	if (!o || o - q >= 64)
		fail("wrapper on source line %d: no name", line);
	char name[64];
	memcpy(name, q, (size_t)(o - q)), name[o - q] = 0;
	const char *c = strchr(o, ')');
	if (!c || memchr(o, '\n', (size_t)(c - o)))
		fail("wrapper %s on source line %d: no end to its parameters", name, line);
	SsArg a[SS_MAXARG];
	int na = 0;
	for (const char *p = o + 1; p < c;) {
		const char *e = memchr(p, ',', (size_t)(c - p));
		if (!e)
			e = c;
		if (na == SS_MAXARG)
			fail("wrapper %s: more than %d parameters", name, SS_MAXARG);
		ss_param(p, (size_t)(e - p), &a[na++], line);
		p = e + 1;
	}
	printf("extern \"C\" void %s_simt(const unsigned *grid, unsigned block, void *dsm, unsigned dsm_bytes, void **p)\n"
	       "{\n\tglm_dsm_bytes = dsm_bytes;\n", name);
	for (int i = 0; i < na; i++)
		printf("\t%s%s;\n\tmemcpy(&%s, p[%d], sizeof %s);\n", a[i].type, a[i].name, a[i].name, i, a[i].name);
	if (concurrent)
		printf("\tglm_dsm = (unsigned char *)dsm;\n\t%s_simt_status = simt_launch_concurrent(dim3{grid[0], grid[1], "
		       "grid[2]}, dim3{block, 1, 1}, [&] { %s(", name, name);
	else
		printf("\tglm_dsm = (unsigned char *)dsm;\n\tsimt_launch(dim3{grid[0], grid[1], grid[2]}, dim3{block, 1, 1}, "
		       "[&] { %s(", name);
	for (int i = 0; i < na; i++)
		printf("%s%s", i ? ", " : "", a[i].name);
	printf("); });\n}\nextern \"C\" const int %s_simt_argsz[] = {", name);
	for (int i = 0; i < na; i++)
		printf("(int)sizeof(%s), ", a[i].type);
	printf("0};\n");
}

int main(int argc, char **argv)
{
	int persist = argc == 3 && !strcmp(argv[1], "--persist");
	if (argc != 2 + persist)
		fail("usage: simtsrc [--persist] PLAN > PLAN.cc");
	argv += persist;
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	char err[1024];
	if (plan_read(&g, argv[1], err, sizeof err))
		fail("%s", err);
	const char *src = persist ? g.cuda.psource : g.cuda.source;
	if (!src)
		fail("%s: %s", argv[1], persist ? "no persistent decode kernel (glmc compile --decode persistent)"
		                                : "no CUDA section (a CPU plan)");
	printf("/* %s's CUDA source for tests/simt, written by tests/tools/simtsrc */\n#include \"simt.h\"\n"
	       "#define __launch_bounds__(...)\nstatic unsigned char *glm_dsm; /* the launch's dynamic shared memory */\n"
	       "static unsigned glm_dsm_bytes;  /* and its size (the persistent kernel's shared-array pool lives in it) */\n"
	       "#define GLM_SIMT_DSM 1\n",
	       argv[1]);
	/* the source, less each wrapper's extern __shared__ declaration (glm_dsm is the pointer above) */
	size_t nd = strlen(SS_DSM);
	for (const char *p = src; *p;) {
		const char *d = strstr(p, SS_DSM);
		size_t n = d ? (size_t)(d - p) : strlen(p);
		if (fwrite(p, 1, n, stdout) != n)
			fail("writing the source: short write");
		p += n + (d ? nd : 0);
	}
	printf("\n/* the adaptors: the driver's kernelParams to each wrapper's typed call */\n");
	if (persist)
		printf("extern \"C\" int glm_persist_simt_status; /* simt_launch_concurrent's last result */\n"
		       "int glm_persist_simt_status;\n");
	int line = 1, nw = 0;
	for (const char *p = src; *p; line++) {
		if (!strncmp(p, SS_HEAD, strlen(SS_HEAD)))
			ss_adaptor(p, line, persist), nw++;
		const char *e = strchr(p, '\n');
		if (!e)
			break;
		p = e + 1;
	}
	if (!nw)
		fail("%s: no extern \"C\" __global__ wrapper in the source", argv[1]);
	if (fflush(stdout) || ferror(stdout))
		fail("writing the output failed");
	arena_free(&A);
	return 0;
}
