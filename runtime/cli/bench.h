/*
** runtime/cli/bench.h — glmrun --bench and --profile (issue 8): decode speed on a random prompt, the bytes a
** step must read, and where the time of a step goes, kernel by kernel.
*/
#ifndef GLM_BENCH_H
#define GLM_BENCH_H

#include "engine.h"
#include "glm.h"

#include <stdio.h>

typedef struct {
	int profile;                 /* --profile: also time every kernel of the decode step */
	int profile_eager;           /* --profile-eager: launch the profiled steps eagerly, not as a graph */
	long prompt;                 /* --bench-prompt N: random prompt tokens (default 128) */
	long chunk;                  /* prompt tokens one prefill step evaluates (-ub, as a run prefills) */
	long ub;                     /* -ub: the most tokens of a prefill step, which --batch's prompts share */
	long steps;                  /* decode steps measured (-n, default 64) */
	long warmup;                 /* decode steps run first and not measured (the first captures the graph) */
	long profile_steps;          /* steps the per-kernel times are averaged over */
	int profile_top;             /* rows of the per-kernel table */
	int batch;                   /* sequences per step (--batch) */
	double bw_gbps;              /* --bw: bandwidth the percentages refer to; 0 prints absolute figures only */
	uint32_t seed;               /* seed of the random prompt */
	int json;                    /* --json: the block as one JSON object */
} BenchOpts;

/*
** The bytes one decode step reads from memory, at a context of ctx positions (the mean position of the
** measured steps) and batch sequences, given each weight's resident bytes (wbytes, indexed by node id;
** what the device holds, which may differ from the plan's stored type):
**   - every weight read in full, except expert tensors (operands 4-6 of moe_ffn, [E, ...]), of which only
**     the selected experts are read: k/E of the tensor at batch 1, E·(1 - (1 - k/E)^B)/E for B sequences
**     (the expected distinct experts under uniform independent routing), and an embedding table used
**     only by the lookup, of which B rows are read;
**   - caches: each sequence reads rows 0..pos of each KV/latent/indexer cache (ctx rows on average), or
**     only the topk selected rows of a latent cache whose MLA takes a DSA selection.
** Activations, cache writes and scratch are not counted (a few KiB per step).
*/
typedef struct {
	double weights;              /* dense weights (full tensors and embedding rows) */
	double experts;              /* the selected experts' part of the expert tensors */
	double experts_resident;     /* all of the expert tensors */
	double cache;                /* KV / latent / indexer cache rows */
	double total;                /* weights + experts + cache */
} BenchBytes;

void bench_step_bytes(const Graph *g, const double *wbytes, size_t cache_es, double ctx, int batch, BenchBytes *b);

/*
** The model FLOPs of prefilling one prompt of L tokens from position 0 (the numerator of a prefill's share of
** the tensor peak), counted on the plan's graph:
**   - weights: 2 FLOPs per element per token of every weight of two or more axes that a linear, matmul, MoE
**     FFN, slice or permute reads (each weight once; expert tensors at k/E, the experts a token uses;
**     an embedding table read only by its lookup does not count): 2 x the active parameters;
**   - attention: 2·H·(Dk + Dv) per causal (query, key) pair of each attention and MLA node (under a DSA
**     selection, min(t, topk) keys for query t), as the node computes it (MLA in its absorbed form: Dk and
**     Dv of the latent), and 2·H·D per pair of each DSA indexer.
** A tp plan's graph is one rank's: the caller multiplies by tp, which counts a weight every rank holds
** whole (a MoE router) tp times: a slight over-count (tests/test_bench pins it).
*/
typedef struct {
	double weights, attention, total;
} BenchFlops;

void bench_prefill_flops(const Graph *g, int64_t L, BenchFlops *f);

/* The bytes the kernel(s) of node id read and write in one decode step: its operands (weights and caches
** as above; activations in full at act_es bytes per element, int32 as 4) and its output, over the nodes
** fused into it. */
void bench_node_bytes(const Graph *g, int id, const double *wbytes, size_t act_es, size_t cache_es, double ctx,
                      int batch, double *rd, double *wr);

/* The --profile tables (per node sorted by time, by operator, by layer, sums) on f, from the time of each
** launch of g->cuda (us[i], 0 for launches not run at T = 1) and of the sampler; -1 when out of memory. */
int bench_profile_print(FILE *f, const Graph *g, const BenchOpts *o, const double *wb, double ctx, double step_ms,
                        int64_t V, const double *us, double sample_us, int graph);

/* The whole --bench / --profile run on the plan; prints one "key: value" block (and the profile tables) on
** stdout. Returns the exit status. */
int bench_main(const Graph *g, const char *plan, const char *weights, const EngineOpts *eo, const BenchOpts *o);

#endif
