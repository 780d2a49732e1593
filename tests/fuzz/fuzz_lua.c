/*
** tests/fuzz/fuzz_lua.c — libFuzzer target for the Lua front end: the input is a model's Lua source,
** compiled as `glmc compile` would up to weight binding: front_run in the sandbox (models/lib as the
** library, a short CPU-time limit and a small memory cap), then verify and bind_weights against a real
** checkpoint. The checkpoint is the fixture whose architecture name the source quotes (nn.architecture
** "qwen3" gets fixtures/hf/qwen3), else the llama fixture, so the real model files used as seeds build
** their whole graph. The sandbox itself must stop endless loops, huge allocations, deep recursion and
** finalizers; nothing here catches them. Each input is written to build/fuzz/fuzz_lua-current-PID.lua
** before it runs (the model is a file to the front end), so an input that ends the process through
** the front end's hard time limit is left there. Seeds: tests/fuzz/run.sh.
*/
#include "glm.h"
#include "weights.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FZ_FIX "../shared/fixtures/hf/"

/* Architecture names as models quote them, and their fixture; longer names first (qwen3_moe before
** qwen3), as the first one quoted in the source wins. */
static const struct {
	const char *quoted, *dir;
} fz_arch[] = {
	{"\"glm4_moe_lite\"", "glm4_moe_lite"}, {"\"glm4_moe\"", "glm4_moe"}, {"\"glm5\"", "glm_moe_dsa"},
	{"\"deepseek_v3\"", "deepseek_v3"}, {"\"qwen3_moe\"", "qwen3_moe"}, {"\"qwen3\"", "qwen3"},
	{"\"llama\"", "llama"},
};
#define FZ_NARCH (sizeof fz_arch / sizeof fz_arch[0])

static Weights fz_w[FZ_NARCH];
static char fz_path[128];
static int fz_verbose;

/* The checkpoints are opened once (they are only read); the model's print and glm.warn output, which
** goes to the C stderr stream, is dropped so a chatty input cannot fill the log (libFuzzer's and the
** sanitizers' reports use their own descriptors, not this stream). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	char err[1024] = "out of memory", dir[256];
	for (size_t i = 0; i < FZ_NARCH; i++) {
		snprintf(dir, sizeof dir, FZ_FIX "%s", fz_arch[i].dir);
		char *d = strdup(dir); /* w->path keeps the pointer */
		if (!d || weights_open(&fz_w[i], d, err, sizeof err)) {
			fprintf(stderr, "fuzz_lua: %s\n", err);
			exit(1);
		}
	}
	fz_verbose = getenv("FUZZ_LUA_VERBOSE") != NULL;
	snprintf(fz_path, sizeof fz_path, "build/fuzz/fuzz_lua-current-%d.lua", (int)getpid());
	FILE *null = fopen("/dev/null", "w");
	if (!null) {
		perror("fuzz_lua: /dev/null");
		exit(1);
	}
	stderr = null;
	return 0;
}

/* The fixture for this source: the first architecture it quotes, else llama (the last entry). */
static Weights *fz_pick(const uint8_t *data, size_t size)
{
	for (size_t i = 0; i < FZ_NARCH; i++)
		if (memmem(data, size, fz_arch[i].quoted, strlen(fz_arch[i].quoted)))
			return &fz_w[i];
	return &fz_w[FZ_NARCH - 1];
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	FILE *f = fopen(fz_path, "wb");
	if (!f) {
		perror(fz_path);
		abort();
	}
	if (fwrite(data, 1, size, f) != size || fclose(f)) {
		perror(fz_path);
		abort();
	}
	Weights *w = fz_pick(data, size);
	ModelMeta mm = {.w = w, .lua_seconds = 0.25, .lua_mem = (size_t)64 << 20};
	char err[1024];
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	int rc = front_run(&g, fz_path, "models/lib", &mm, err, sizeof err) || verify(&g, err, sizeof err) ||
	         bind_weights(&g, w, 0, NULL, err, sizeof err);
	if (fz_verbose) /* FUZZ_LUA_VERBOSE=1: each input's outcome, to replay one */
		dprintf(2, "fuzz_lua: %s (%d nodes)\n", rc ? err : "compiled", g.n);
	arena_free(&A);
	return 0;
}
