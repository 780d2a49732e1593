/*
** tests/test_bench.c — what glmrun --bench reports without a GPU: the bytes a decode step reads
** (bench_step_bytes, bench_node_bytes) on a graph built here, against values worked out by hand; and the
** types glmc's --random-weights q4_k_m gives each tensor, against llama.cpp's Q4_K_M rule applied by hand; and
** the model FLOPs of a prefill (bench_prefill_flops) on fixture plans, against the count from their configs.
*/
#include "bench.h"
#include "passes.h"
#include "check.h"
#include "quant.h"
#include "weights.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Append a node with the given op, kind, shape and inputs (dims as given; no shape inference). */
static int add(Graph *g, int op, int kind, int dtype, int nd, const int64_t *d, int nin, const int *in)
{
	Node n = {.op = op, .kind = kind, .dtype = dtype, .ndim = nd, .nin = nin, .layer = -1, .fused_into = -1};
	memcpy(n.dim, d, sizeof(int64_t) * (size_t)nd);
	memcpy(n.in, in, sizeof(int) * (size_t)nin);
	return graph_add(g, &n);
}

#define D(...) ((const int64_t[]){__VA_ARGS__})
#define I(...) ((const int[]){__VA_ARGS__})

/*
** A step with every kind of read: an embedding lookup, a dense linear, a router and a MoE over 8 experts
** (k = 2), an MLA over a latent cache with a DSA selection of 4 rows, a GQA attention over two caches,
** and an LM head (its own weight, or the embedding when tied).
*/
static int build(Graph *g, int tied, int *moe, double *wb)
{
	int tok = add(g, OP_INPUT, VK_INPUT, DT_I32, 1, D(DIM_T), 0, NULL);
	int pos = add(g, OP_INPUT, VK_INPUT, DT_I32, 1, D(DIM_T), 0, NULL);
	int emb = add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 2, D(100, 16), 0, NULL);
	int x = add(g, OP_EMBEDDING, VK_ACT, DT_F32, 2, D(DIM_T, 16), 2, I(emb, tok));
	int w1 = add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 2, D(32, 16), 0, NULL);
	int h = add(g, OP_LINEAR, VK_ACT, DT_F32, 2, D(DIM_T, 32), 2, I(x, w1));
	int ga = add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 3, D(8, 6, 16), 0, NULL);
	int up = add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 3, D(8, 6, 16), 0, NULL);
	int dn = add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 3, D(8, 16, 6), 0, NULL);
	int rw = add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 2, D(8, 16), 0, NULL);
	int lg = add(g, OP_LINEAR, VK_ACT, DT_F32, 2, D(DIM_T, 8), 2, I(x, rw));
	int idx = add(g, OP_MOE_ROUTE, VK_ACT, DT_I32, 2, D(DIM_T, 2), 1, I(lg));
	int wt = add(g, OP_MOE_WEIGHTS, VK_ACT, DT_F32, 2, D(DIM_T, 2), 2, I(lg, idx));
	*moe = add(g, OP_MOE_FFN, VK_ACT, DT_F32, 2, D(DIM_T, 16), 6, I(x, idx, wt, ga, up, dn));
	int kv = add(g, OP_CACHE, VK_CACHE, DT_F32, 2, D(DIM_S, 24), 0, NULL);
	int sel = add(g, OP_TOPK, VK_ACT, DT_I32, 2, D(DIM_T, 4), 1, I(h));
	int q = add(g, OP_RESHAPE, VK_ACT, DT_F32, 2, D(DIM_T, 24), 1, I(h)); /* shapes do not matter here */
	add(g, OP_MLA, VK_ACT, DT_F32, 2, D(DIM_T, 16), 5, I(q, q, kv, pos, sel));
	int kc = add(g, OP_CACHE, VK_CACHE, DT_F32, 2, D(DIM_S, 10), 0, NULL);
	int vc = add(g, OP_CACHE, VK_CACHE, DT_F32, 2, D(DIM_S, 10), 0, NULL);
	add(g, OP_ATTENTION, VK_ACT, DT_F32, 2, D(DIM_T, 16), 6, I(h, h, h, kc, vc, pos));
	int head = tied ? emb : add(g, OP_PARAM, VK_WEIGHT, DT_BF16, 2, D(100, 16), 0, NULL);
	int out = add(g, OP_LINEAR, VK_ACT, DT_F32, 2, D(DIM_T, 100), 2, I(*moe, head));
	g->out[0] = out, g->out_name[0] = "logits", g->nout = 1;
	for (int i = 0; i < g->n; i++) /* bf16 on the device: 2 bytes per element */
		wb[i] = g->node[i].kind == VK_WEIGHT ? 2.0 * (double)node_numel(&g->node[i], 0, 0) : 0;
	return 0;
}

static void test_step_bytes(void)
{
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	double wb[64];
	int moe;
	build(&g, 0, &moe, wb);
	BenchBytes b;
	/* Batch 1, context 10.5, bf16 caches. Weights: one embedding row 16·2 = 32, w1 32·16·2 = 1024, router
	** 8·16·2 = 256, head 100·16·2 = 3200: 4512. Experts: 3 tensors of 8·6·16·2 = 1536 bytes (4608 resident),
	** k/E = 2/8 of them: 1152. Caches: the latent cache, 4 selected rows of 24·2: 192; the K and V caches,
	** 10.5 rows of 10·2 each: 420. Total 6276. */
	bench_step_bytes(&g, wb, 2, 10.5, 1, &b);
	check(b.weights == 4512 && b.experts == 1152 && b.experts_resident == 4608 && b.cache == 612 && b.total == 6276,
	      "bytes per step, batch 1: weights 4512 + experts 1152 + cache 612", "got %.3f + %.3f (of %.3f) + %.3f = %.3f",
	      b.weights, b.experts, b.experts_resident, b.cache, b.total);
	/* Batch 4: 4 embedding rows (128); expected distinct experts 8·(1 − (6/8)^4) = 5.46875 of 8, so
	** 4608 · 0.68359375 = 3150; caches per sequence: 4 · 192 + 4 · 420 = 2448. */
	bench_step_bytes(&g, wb, 2, 10.5, 4, &b);
	check(b.weights == 4608 && fabs(b.experts - 3150) < 1e-9 && b.cache == 2448,
	      "bytes per step, batch 4: embedding rows, expected distinct experts, per-sequence caches",
	      "got %.3f, %.3f, %.3f", b.weights, b.experts, b.cache);
	/* The MoE kernel: reads x (16·2), the ids (2·4), the weights (2·2) and 1152 of experts; writes 16·2. */
	double rd, wr;
	bench_node_bytes(&g, moe, wb, 2, 2, 10.5, 1, &rd, &wr);
	check(rd == 32 + 8 + 4 + 1152 && wr == 32, "bytes of the moe_ffn kernel", "read %.1f write %.1f", rd, wr);
	/* With moe_weights fused into it, the kernel reads the router logits (8·2) instead of the weights, and
	** the weights never leave it. */
	g.node[moe - 1].fused_into = moe;
	bench_node_bytes(&g, moe, wb, 2, 2, 10.5, 1, &rd, &wr);
	check(rd == 32 + 8 + 16 + 1152 && wr == 32, "bytes of a kernel with a node fused into it", "read %.1f write %.1f",
	      rd, wr);
	arena_free(&A);

	/* Tied head: the embedding is read in full by the LM head, once. */
	Arena B = {0};
	graph_init(&g, &B);
	build(&g, 1, &moe, wb);
	bench_step_bytes(&g, wb, 2, 10.5, 1, &b);
	check(b.weights == 3200 + 1024 + 256, "a tied embedding counts once, in full", "got %.3f", b.weights);
	arena_free(&B);
}

/* Write a small Llama config.json; returns its path. */
static const char *llama_config(const char *path, int hidden, int layers)
{
	FILE *f = fopen(path, "w");
	if (!f)
		return NULL;
	fprintf(f, "{\"model_type\": \"llama\", \"vocab_size\": 300, \"hidden_size\": %d, \"intermediate_size\": 512, "
	        "\"num_hidden_layers\": %d, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 64, "
	        "\"max_position_embeddings\": 512, \"rms_norm_eps\": 1e-5, \"tie_word_embeddings\": false, "
	        "\"rope_parameters\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}}\n", hidden, layers);
	return fclose(f) ? NULL : path;
}

/* Compile models/llama.lua against a config with random q4_k_m weights (up to bind) into g. */
static int bind_mix(Graph *g, const char *config, int layers, char *err, size_t len)
{
	Weights w;
	if (weights_open_random(&w, config, WQ_MIX_Q4_K_M, err, len))
		return -1;
	ModelMeta mm = {.w = &w, .layers = layers};
	int rc = front_run(g, "models/llama.lua", "models/lib", &mm, err, len) || verify(g, err, len) ||
	         bind_weights(g, &w, 0, NULL, err, len);
	weights_close(&w);
	return rc ? -1 : 0;
}

/* The type bound for the parameter named name; -1 when absent. */
static int qtype_of(const Graph *g, const char *name)
{
	for (int i = 0; i < g->nw; i++)
		if (!strcmp(g->node[g->w[i].node].name, name))
			return g->w[i].qtype;
	return -1;
}

/* llama.cpp's use_more_bits, written out for 16 layers: layers 0, 1 (first eighth), 14, 15 (last
** eighth) and 4, 7, 10, 13 ((i - 2) % 3 == 2). */
static int more16(int l)
{
	static const int six[16] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
	return six[l];
}

static void test_q4_k_m(void)
{
	char err[1024], path[64];
	snprintf(path, sizeof path, "/tmp/glm_test_bench_%d.json", (int)getpid());
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	int ok = llama_config(path, 256, 16) && bind_mix(&g, path, 0, err, sizeof err) == 0;
	check(ok, "compile a 16-layer llama with --random-weights q4_k_m", "%s", err);
	if (ok) {
		int bad = 0;
		char name[64], what[256] = "";
		for (int l = 0; l < 16 && !bad; l++) {
			static const char *four[] = {"attn_q", "attn_k", "attn_output", "ffn_gate", "ffn_up"};
			for (int k = 0; k < 5 && !bad; k++) {
				snprintf(name, sizeof name, "blk.%d.%s.weight", l, four[k]);
				if (qtype_of(&g, name) != QT_Q4_K)
					bad = 1, snprintf(what, sizeof what, "%s is %s, expected Q4_K", name,
					                  quant_type_name(qtype_of(&g, name)));
			}
			int want = more16(l) ? QT_Q6_K : QT_Q4_K;
			snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
			if (!bad && qtype_of(&g, name) != want)
				bad = 1, snprintf(what, sizeof what, "%s is %s", name, quant_type_name(qtype_of(&g, name)));
			snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
			if (!bad && qtype_of(&g, name) != want)
				bad = 1, snprintf(what, sizeof what, "%s is %s", name, quant_type_name(qtype_of(&g, name)));
			snprintf(name, sizeof name, "blk.%d.attn_norm.weight", l);
			if (!bad && qtype_of(&g, name) != QT_F32)
				bad = 1, snprintf(what, sizeof what, "%s is %s", name, quant_type_name(qtype_of(&g, name)));
		}
		if (!bad && (qtype_of(&g, "output.weight") != QT_Q6_K || qtype_of(&g, "token_embd.weight") != QT_Q4_K))
			bad = 1, snprintf(what, sizeof what, "output %s, token_embd %s", quant_type_name(qtype_of(&g, "output.weight")),
			                  quant_type_name(qtype_of(&g, "token_embd.weight")));
		check(!bad, "q4_k_m: Q6_K for output and for ffn_down/attn_v of layers 0,1,4,7,10,13,14,15; else Q4_K",
		      "%s", what);
	}
	arena_free(&A);

	/* A 4-layer slice of the same model takes the first four layers' types of the whole file. */
	Arena B = {0};
	graph_init(&g, &B);
	ok = bind_mix(&g, path, 4, err, sizeof err) == 0;
	check(ok && qtype_of(&g, "blk.1.ffn_down.weight") == QT_Q6_K && qtype_of(&g, "blk.2.ffn_down.weight") == QT_Q4_K &&
	          qtype_of(&g, "blk.3.attn_v.weight") == QT_Q4_K && qtype_of(&g, "blk.3.ffn_down.weight") == QT_Q4_K &&
	          qtype_of(&g, "blk.0.attn_v.weight") == QT_Q6_K,
	      "q4_k_m on a --layers 4 slice counts the layers of the whole model", "%s",
	      ok ? "types of layers 0-3 differ from the 16-layer file's" : err);
	arena_free(&B);

	/* Rows that are not whole 256-blocks fall back as llama.cpp does: Q4_K -> Q5_0, Q6_K -> Q8_0. */
	Arena C = {0};
	graph_init(&g, &C);
	ok = llama_config(path, 320, 16) && bind_mix(&g, path, 2, err, sizeof err) == 0;
	check(ok && qtype_of(&g, "token_embd.weight") == QT_Q5_0 && qtype_of(&g, "output.weight") == QT_Q8_0 &&
	          qtype_of(&g, "blk.1.ffn_down.weight") == QT_Q6_K && qtype_of(&g, "blk.1.attn_q.weight") == QT_Q5_0,
	      "q4_k_m falls back to Q5_0 / Q8_0 for 320-wide rows", "%s",
	      ok ? quant_type_name(qtype_of(&g, "token_embd.weight")) : err);
	arena_free(&C);
	unlink(path);
}

/*
** The --profile tables on a real launch list (the tiny Llama through every pass, kernels emitted but not
** compiled) with made-up times: launch i takes 1 + i µs. The top row is the node whose kernels sum to the
** most, the kernel sum is the sum of the launched times and the sampler's, and the per-operator and
** per-layer tables add up to it.
*/
static void test_profile_print(void)
{
	char err[1024], path[64];
	snprintf(path, sizeof path, "/tmp/glm_test_prof_%d.json", (int)getpid());
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	Weights w;
	int ok = llama_config(path, 256, 2) && weights_open_random(&w, path, QT_BF16, err, sizeof err) == 0;
	if (ok) {
		ModelMeta mm = {.w = &w};
		ok = !front_run(&g, "models/llama.lua", "models/lib", &mm, err, sizeof err) && !verify(&g, err, sizeof err) &&
		     !bind_weights(&g, &w, 0, NULL, err, sizeof err) && !partition(&g, 1, NULL, err, sizeof err);
		weights_close(&w);
	}
	if (ok) {
		fuse(&g, 1, DT_BF16);
		ok = !memplan(&g, 1, err, sizeof err) && !emit_cuda(&g, "sm_90", DT_BF16, 0, NULL, err, sizeof err);
	}
	check(ok && g.cuda.nl > 0, "emit the tiny Llama's launches (no NVRTC)", "%s", err);
	unlink(path);
	if (!ok || !g.cuda.nl) {
		arena_free(&A);
		return;
	}
	double *us = calloc((size_t)g.cuda.nl, sizeof *us), *wb = calloc((size_t)g.n, sizeof *wb), sum = 0.5, best = 0;
	double *per_node = calloc((size_t)g.n, sizeof *per_node);
	int top = -1;
	for (int i = 0; i < g.n; i++)
		if (g.node[i].kind == VK_WEIGHT)
			wb[i] = 2.0 * (double)node_numel(&g.node[i], 0, 0);
	for (int i = 0; i < g.cuda.nl; i++)
		if (g.cuda.l[i].tmin <= 1 && 1 <= g.cuda.l[i].tmax) {
			us[i] = 1 + i, sum += us[i];
			per_node[g.cuda.l[i].node] += us[i];
		}
	for (int i = 0; i < g.n; i++)
		if (per_node[i] > best)
			best = per_node[i], top = i;
	BenchOpts o = {.profile = 1, .profile_steps = 10, .profile_top = 5, .batch = 1, .bw_gbps = 4000};
	FILE *f = tmpfile();
	int rc = f ? bench_profile_print(f, &g, &o, wb, 100, 1.0, 300, us, 0.5, 1) : -1;
	char line[512], want[64];
	double ksum = -1, op_sum = 0, layer_sum = 0;
	int rank1 = -1, section = 0, rows = 0;
	snprintf(want, sizeof want, "%%%d ", top);
	if (f) {
		rewind(f);
		while (fgets(line, sizeof line, f)) {
			double t;
			char name[64];
			int cnt;
			if (!strncmp(line, "profile by operator", 19))
				section = 1;
			else if (!strncmp(line, "profile by layer", 16))
				section = 2;
			else if (sscanf(line, "profile_kernel_sum_us: %lf", &t) == 1)
				ksum = t, section = 3;
			else if (section == 0 && sscanf(line, "%d", &cnt) == 1) {
				rows++;
				if (cnt == 1 && strstr(line, want))
					rank1 = 1;
			} else if (section && section < 3 && sscanf(line, " %63s %d %lf", name, &cnt, &t) == 3)
				*(section == 1 ? &op_sum : &layer_sum) += t;
		}
		fclose(f);
	}
	check(rc == 0 && rank1 == 1 && rows == 5, "--profile: the slowest node ranks first, --profile-top rows",
	      "rc %d, node %%%d ranked first: %d, %d rows", rc, top, rank1, rows);
	check(fabs(ksum - sum) < 0.01 && fabs(op_sum - sum) < 0.05 && fabs(layer_sum - sum) < 0.05,
	      "--profile: kernel sum, per-operator and per-layer tables add up", "sum %.2f: printed %.2f, ops %.2f, "
	      "layers %.2f", sum, ksum, op_sum, layer_sum);
	free(us), free(wb), free(per_node);
	arena_free(&A);
}

/* Compile a fixture model into a plan and load it into g (0: done). */
static int fixture_plan(Graph *g, const char *model, const char *fix, const char *extra)
{
	char cmd[512], path[64], err[512];
	snprintf(path, sizeof path, "/tmp/glm_test_bench_%d.plan", (int)getpid());
	snprintf(cmd, sizeof cmd, "bin/glmc compile models/%s.lua --weights ../shared/fixtures/hf/%s %s -o %s 2>/dev/null",
	         model, fix, extra, path);
	int rc = system(cmd) != 0 || plan_read(g, path, err, sizeof err) != 0;
	unlink(path);
	return rc;
}

/* Prefill FLOPs from the fixtures' config.json values, written out: 2 x the parameters a token multiplies by
** (the LM head, not the embedding lookup; k of E experts) + 2·H·(Dk + Dv) per causal pair and layer. */
static void test_prefill_flops(void)
{
	const int64_t L = 37;
	double pairs = (double)(L * (L + 1) / 2);
	struct {
		const char *model, *fix, *extra;
		double params, attn;
	} c[] = {
		/* llama: hidden 64, 4 heads of 16, 2 kv heads, intermediate 128, vocab 512, 2 layers */
		{"llama", "llama", "", 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 3 * 64 * 128) + 64 * 512, 2 * 2 * 4 * 32},
		/* qwen3_moe: the same attention, router 8 x 64, 2 of 8 experts of 32 (gate, up, down) */
		{"qwen3_moe", "qwen3_moe", "", 2 * (64 * 64 + 2 * 64 * 32 + 64 * 64 + 8 * 64 + 2 * 3 * 32 * 64) + 64 * 512,
		 2 * 2 * 4 * 32},
		/* the same plan on two ranks: each rank's graph counts half the heads and experts' columns */
		{"qwen3_moe", "qwen3_moe", "--tp 2", 0, 0},
	};
	double whole = 0;
	for (int i = 0; i < 3; i++) {
		Arena A = {0};
		Graph g;
		graph_init(&g, &A);
		char name[160];
		snprintf(name, sizeof name, "prefill FLOPs of the %s fixture%s%s (%lld tokens) as its config counts them",
		         c[i].model, *c[i].extra ? " " : "", c[i].extra, (long long)L);
		if (fixture_plan(&g, c[i].model, c[i].fix, c[i].extra)) {
			check(0, name, "cannot compile the plan");
			arena_free(&A);
			continue;
		}
		BenchFlops f;
		bench_prefill_flops(&g, L, &f);
		if (i < 2) {
			double w = 2 * c[i].params * (double)L, a = c[i].attn * pairs;
			check(f.weights == w && f.attention == a && f.total == w + a, name,
			      "weights %.17g vs %.17g, attention %.17g vs %.17g", f.weights, w, f.attention, a);
			whole = f.total;
		} else {
			/* each rank holds half of every split weight and head, and the whole router (8 x 64 in each of the
			** 2 layers): twice a rank's count is the whole plan's plus one more router */
			double want = whole + 2.0 * (2 * 8 * 64) * (double)L;
			check(f.attention * 2 == c[1].attn * pairs && f.total * 2 == want, name,
			      "rank total %.17g x 2 vs %.17g; attention %.17g", f.total, want, f.attention);
		}
		arena_free(&A);
	}
}

int main(void)
{
	test_step_bytes();
	test_q4_k_m();
	test_profile_print();
	test_prefill_flops();
	return check_failures != 0;
}
