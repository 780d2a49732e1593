/*
** tests/test_persist.c — the persistent decode kernel's program (emit_cuda_persist, ops/persist.cuh), no GPU
** needed: for the llama, qwen3_moe and glm_moe_dsa fixture plans (f32 and bf16), and GLM-5's shape with random
** Q4_K_M weights (4 layers, bf16), the program of a step of one
** token has one body and one case per launch the step runs, compiles with NVRTC for sm_90, and its registers
** a thread and static shared memory (read from the cubin) are reported with how many workers fit an H100 SM.
** The cubin reader is checked first on a kernel whose shared memory is known.
*/
#include "check.h"
#include "passes.h"
#include "libnvrtc.h"
#include "weights.h"

#include <string.h>

#define FIX "../shared/fixtures/hf/"

/* The cubin reader against what small kernels declare: 3000 floats of shared memory (sm_90's section holds
** 1 KiB more, the block's system-reserved part: ptxas -v says 12000) and a few registers; a dynamically
** indexed local array of 64 floats, read and written at indices only known at run time (256 bytes of stack
** frame), and no shared memory at all (no .nv.shared section: the reserved 1 KiB is listed only with arrays). */
static void usage_reader(void)
{
	const char *src = "extern \"C\" __global__ void small(float *y) { __shared__ float s[3000]; "
	                  "s[threadIdx.x] = y[threadIdx.x]; __syncthreads(); y[threadIdx.x] = s[2999 - threadIdx.x]; }\n"
	                  "extern \"C\" __global__ void framed(float *y, int k) { float a[64]; for (int i = 0; i < 64; i++) "
	                  "a[i] = y[i * k]; for (int j = 0; j < 64; j++) a[(j * k + threadIdx.x) & 63] += a[(j + k) & 63]; "
	                  "y[threadIdx.x] = a[(threadIdx.x * k) & 63]; }\n";
	unsigned char *cubin = NULL;
	size_t n = 0;
	char err[1024] = "";
	int regs = -1;
	int64_t smem = -1, frame = -1;
	int rc = nvrtc_compile(src, "sm_90", &cubin, &n, err, sizeof err);
	if (!rc)
		rc = emit_cuda_usage(cubin, n, "small", &regs, &smem, &frame, err, sizeof err);
	check(!rc && smem == 12000 + 1024 && regs > 0 && regs < 32 && frame == 0,
	      "cubin reader: a kernel's shared memory and registers, no stack", "rc %d smem %lld regs %d frame %lld %s", rc,
	      (long long)smem, regs, (long long)frame, err);
	int64_t fs = -1;
	rc = cubin ? emit_cuda_usage(cubin, n, "framed", &regs, &fs, &frame, err, sizeof err) : -1;
	check(!rc && fs == 0 && frame >= 256 && frame < 1024, "cubin reader: a local array of 64 floats is a stack frame",
	      "rc %d frame %lld smem %lld %s", rc, (long long)frame, (long long)fs, err);
	rc = cubin ? emit_cuda_usage(cubin, n, "absent", &regs, &smem, &frame, err, sizeof err) : -1;
	check(rc < 0 && strstr(err, "absent"), "cubin reader: a missing kernel is an error", "%s", err);
	free(cubin);
}

/* Compile one fixture plan up to its launches and its 1-token schedule as glmc compile --decode persistent does
** (132 SMs, 2 workers each), then its persistent program for T = 1. */
static void fixture(const char *model, const char *weights, int random, int layers, int act)
{
	char name[256], err[2048] = "";
	const char *dt = act == DT_BF16 ? "bf16" : "f32";
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	Weights w;
	int ok = !(random ? weights_open_random(&w, weights, random, err, sizeof err) : weights_open(&w, weights, err, sizeof err));
	if (ok) {
		ModelMeta mm = {.w = &w, .layers = layers};
		ok = !front_run(&g, model, "models/lib", &mm, err, sizeof err) && !verify(&g, err, sizeof err) &&
		     !bind_weights(&g, &w, 0, NULL, err, sizeof err) && !partition(&g, 1, NULL, err, sizeof err) &&
		     !fuse(&g, 1, act) && !emit_cuda(&g, "sm_90", act, 0, NULL, err, sizeof err) &&
		     !memplan(&g, 1, err, sizeof err) && !sched_build(&g, 1, 132, 2, err, sizeof err); /* glmc's default */
		weights_close(&w);
	}
	if (ok && nvrtc_available()) /* the plan's own cubin: the wrappers' shared memory bounds the pool */
		ok = !emit_cuda_compile(&g, NULL, err, sizeof err);
	const char *ps = ok ? emit_cuda_persist(&g, 1, err, sizeof err) : NULL;
	snprintf(name, sizeof name, "%s %s: the persistent program of a 1-token step is written", weights, dt);
	check(ps && ps == g.cuda.psource, name, "%s", err);
	if (!ps) {
		arena_free(&A);
		return;
	}
	/* one case label per launch run at T = 1, one body per distinct wrapper of those, the largest block */
	int nl = 0, block = 0, cases = 0, bodies = 0, missing = 0;
	for (int i = 0; i < g.cuda.nl; i++) {
		const Launch *l = &g.cuda.l[i];
		if (l->tmin > 1 || l->tmax < 1)
			continue;
		nl++;
		block = l->block > block ? l->block : block;
		char key[96];
		snprintf(key, sizeof key, "\tcase %d:\n", i);
		missing += !strstr(ps, key);
		snprintf(key, sizeof key, "void glm_pk%s(", l->kernel + 5);
		int first = 1;
		for (int j = 0; j < i && first; j++)
			first = !(g.cuda.l[j].tmin <= 1 && g.cuda.l[j].tmax >= 1 && !strcmp(g.cuda.l[j].kernel, l->kernel));
		bodies += first;
		missing += !strstr(ps, key);
	}
	for (const char *p = ps; (p = strstr(p, "\tcase ")); p++)
		cases++;
	int nbody = 0;
	for (const char *p = ps; (p = strstr(p, "__device__ void glm_pk")); p++)
		nbody++;
	snprintf(name, sizeof name, "%s %s: one case per launch of the step (%d), one body per wrapper (%d)", weights, dt,
	         nl, bodies);
	check(nl > 0 && !missing && cases == nl && nbody == bodies, name, "%d launches, %d cases, %d bodies of %d, %d missing",
	      nl, cases, nbody, bodies, missing);
	char lb[64];
	snprintf(lb, sizeof lb, "__launch_bounds__(%d, 2) glm_persist(", block);
	snprintf(name, sizeof name, "%s %s: the entry's worker block is the step's largest (%d)", weights, dt, block);
	check(strstr(ps, lb) != NULL, name, "no '%s'", lb);
	if (!nvrtc_available()) {
		arena_free(&A);
		return;
	}
	unsigned char *cubin = NULL;
	size_t n = 0;
	int rc = nvrtc_compile(ps, "sm_90", &cubin, &n, err, sizeof err), regs = -1;
	int64_t smem = -1, frame = -1;
	if (!rc)
		rc = emit_cuda_usage(cubin, n, "glm_persist", &regs, &smem, &frame, err, sizeof err);
	/* ptxas refuses more than 48 KiB of static shared memory a kernel, and each body's arrays have their own
	** (issue 47: until the templates take theirs from one pool, a program of many bodies exceeds it) */
	const char *big = rc ? strstr(err, "uses too much shared data (") : NULL;
	snprintf(name, sizeof name, "%s %s: it compiles for sm_90 within its launch bounds, or ptxas refuses only its "
	         "static shared memory", weights, dt);
	check((!rc && regs > 0 && 2 * regs * block <= 65536 && smem > 0) || big, name, "rc %d regs %d smem %lld: %s", rc,
	      regs, (long long)smem, err);
	if (big) {
		printf("# %s %s: %d launches, %d bodies; ptxas: %lld bytes of static shared memory, over its 49152\n", weights,
		       dt, nl, bodies, strtoll(big + 27, NULL, 16));
		free(cubin);
		arena_free(&A);
		return;
	}
	/* glmc explain's line: the same figures, and one worker an SM fitting by the H100's registers (65536) and
	** shared memory (227 KiB a block past the reserved 1 KiB) */
	char *line = NULL;
	size_t ll = 0;
	FILE *f = open_memstream(&line, &ll);
	emit_cuda_persist_explain(&g, 1, f);
	fclose(f);
	/* the dynamic shared memory: per launch at T = 1, lanes of its body (a worker's threads over the body's, at
	** most 8, fewer while they would pass half an H100 SM's 228 KiB less the reserved 1 KiB and the kernel's
	** static), each with the body's own dynamic shared memory and its wrapper's static arrays (in the plan's
	** cubin, less the reserved 1 KiB) with 256 bytes for alignment, both 128-aligned; the largest launch's */
	int64_t need = 0, ws, budget = 233472 / 2 - 1024 - smem;
	int wr, bad = 0, most = 1, top_regs = 0;
	char top[256] = "";
	for (int i = 0; i < g.cuda.nl; i++) {
		const Launch *l = &g.cuda.l[i];
		if (l->tmin > 1 || l->tmax < 1)
			continue;
		int64_t wf;
		bad |= emit_cuda_usage(g.cuda.cubin, g.cuda.cubin_size, l->kernel, &wr, &ws, &wf, err, sizeof err);
		int64_t lane = (l->smem + 127) / 128 * 128 + ((ws > 1024 ? ws - 1024 : 0) + 127) / 128 * 128 + 256;
		char tb[256];
		const char *tn = cuda_template(&g, l->kernel, tb, sizeof tb); /* the decode attention: no lanes */
		int k = !tn || !strncmp(tn, "k_attn", 6) ? 1 : block / l->block > 8 ? 8 : block / l->block;
		while (k > 1 && k * lane > budget)
			k--;
		need = k * lane > need ? k * lane : need, most = k > most ? k : most;
		if (!bad && tn && wr > top_regs) /* the body whose own kernel takes the most registers (the first of ties) */
			top_regs = wr, snprintf(top, sizeof top, "%s", tn);
	}
	char want_top[400];
	snprintf(want_top, sizeof want_top, "; the bodies' own kernels with the most registers: %s %d (", top, top_regs);
	char want[512];
	snprintf(want, sizeof want, "%d bodies, workers of %d threads, 2 an SM; sm_90: %d registers a thread, %lld bytes "
	         "of stack frame (spills), %lld bytes of static shared memory + %lld dynamic (up to %d lanes a worker, each "
	         "with its body's own and its arrays); an H100 SM holds ", bodies, block, regs, (long long)frame,
	         (long long)smem, (long long)need, most);
	int fits = 2 * regs * block <= 65536 && 2 * (smem + need) <= 233472;
	snprintf(name, sizeof name, "%s %s: glmc explain's line gives the figures, two workers %s an H100 SM", weights, dt,
	         fits ? "fitting" : "not fitting");
	check(!bad && need > 0 && smem < 49152 && line && strstr(line, want) && strstr(line, fits ? "(fits)" : "(does NOT fit)"),
	      name, "need %lld: %s", (long long)need, line);
	check(line && strstr(line, want) && strstr(line, fits ? "(fits)" : "(does NOT fit)"), name, "%s", line);
	snprintf(name, sizeof name, "%s %s: glmc explain names the body whose own kernel takes the most registers (%s, %d)",
	         weights, dt, top, top_regs);
	check(top_regs > 0 && line && strstr(line, want_top), name, "want '%s' in: %s", want_top, line);
	printf("# %s", line ? line : "?\n");
	free(line);
	free(cubin);
	arena_free(&A);
}

int main(void)
{
	check(nvrtc_available(), "NVRTC can be loaded", "libnvrtc.so not found (CUDA toolkit missing?)");
	if (nvrtc_available())
		usage_reader();
	for (int a = 0; a < 2; a++) {
		int act = a ? DT_BF16 : DT_F32;
		fixture("models/llama.lua", FIX "llama", 0, 0, act);
		fixture("models/qwen3_moe.lua", FIX "qwen3_moe", 0, 0, act);
		fixture("models/glm5.lua", FIX "glm_moe_dsa", 0, 0, act);
	}
	/* the quantized decode kernels (ops/quant.cuh, ops/qfused.cuh) at GLM-5's shape: 4 layers reach its MoE */
	fixture("models/glm5.lua", "models/configs/glm5.json", WQ_MIX_Q4_K_M, 4, DT_BF16);
	return check_done();
}
