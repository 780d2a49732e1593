/*
** tests/fuzz/fuzz_plan.c — libFuzzer target for plan loading through weight binding: the input is
** written to a memfd and read with plan_read (every count, string, node, weight binding, launch and the
** memory plan checked); a plan that loads has its weights bound and loaded from the llama fixture by the
** CPU executor (exec_init: the manifest's offsets, row strides, slots and parts indexing real tensors),
** which must refuse, not crash, and then runs one step. The header's checksum and length are set to
** match the mutated payload, so mutations reach the parser instead of the checksum test. Seeds are real
** plans (tests/fuzz/run.sh).
*/
#include "glm.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>
#include <sys/mman.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	int fd = memfd_create("plan", 0);
	if (fd < 0)
		return 0;
	unsigned char *p = malloc(size ? size : 1);
	if (!p) {
		close(fd);
		return 0;
	}
	memcpy(p, data, size);
	if (size >= 24) { /* reseal: crc32 and length of the payload after the 24-byte header */
		uint32_t crc = (uint32_t)crc32_z(0L, p + 24, size - 24);
		uint64_t n = size - 24;
		memcpy(p + 12, &crc, 4), memcpy(p + 16, &n, 8);
	}
	ssize_t w = write(fd, p, size);
	free(p);
	if (w != (ssize_t)size) {
		close(fd);
		return 0;
	}
	char path[64], err[1024];
	snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	if (!plan_read(&g, path, err, sizeof err) && g.n < 4096) {
		Exec x;
		graph_set_meta(&g, "weights.format", "safetensors"); /* never random: bind the real fixture */
		if (!exec_init(&x, &g, "../shared/fixtures/hf/llama", 2, 4, err, sizeof err)) {
			int32_t tok[2] = {1, 2}, pos[2] = {0, 1};
			exec_step(&x, tok, pos, 2, err, sizeof err);
		}
		exec_free(&x);
	}
	arena_free(&A);
	close(fd);
	return 0;
}
