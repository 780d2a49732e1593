/*
** tests/test_plan.c — the plan file: round trip, refusal of other versions and of corruption, and a
** fuzz loop that mutates the payload (re-sealing the checksum, so the parser itself is exercised) and
** must never crash. Also checks that the verifier rejects graphs whose recorded shapes are wrong.
*/
#include "check.h"
#include "glm.h"

#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* A small graph with every leaf kind, a weight manifest and an output. */
static void build(Graph *g)
{
	Node tok = {.op = OP_INPUT, .kind = VK_INPUT, .dtype = DT_I32, .ndim = 1, .dim = {DIM_T}, .name = "tokens"};
	Node pos = tok;
	pos.name = "pos";
	Node emb = {.op = OP_PARAM, .kind = VK_WEIGHT, .dtype = DT_BF16, .ndim = 2, .dim = {32, 16},
	            .name = "token_embd.weight", .src = "m.lua", .line = 3};
	Node kc = {.op = OP_CACHE, .kind = VK_CACHE, .dtype = DT_F32, .ndim = 2, .dim = {DIM_S, 16}, .name = "k"};
	int t = graph_add(g, &tok), p = graph_add(g, &pos), e = graph_add(g, &emb);
	graph_add(g, &kc);
	Node x = {.op = OP_EMBEDDING, .nin = 2, .in = {e, t}};
	char err[256];
	op_table[OP_EMBEDDING].shape(g, &x, err, sizeof err);
	int xi = graph_add(g, &x);
	Node r = {.op = OP_ROPE, .nin = 2, .in = {xi, p}};
	AS_rope_heads(&r, 2), AS_rope_head_dim(&r, 8), AS_rope_rot_dim(&r, 8), AS_rope_interleaved(&r, 1);
	AS_rope_orig_ctx(&r, 4096), AS_rope_theta(&r, 10000), AS_rope_factor(&r, 4), AS_rope_beta_fast(&r, 32);
	AS_rope_beta_slow(&r, 1), AS_rope_mscale(&r, 1), AS_rope_mscale_all_dim(&r, 1), AS_rope_attn_factor(&r, 0);
	op_table[OP_ROPE].shape(g, &r, err, sizeof err);
	int ri = graph_add(g, &r);
	g->w = arena_alloc(g->A, sizeof(WeightRef));
	g->w[0] = (WeightRef){.node = e, .source = "model.embed_tokens.weight", .file = "model.safetensors",
	                      .dtype = DT_BF16, .offset = 128, .nbytes = 32 * 16 * 2};
	g->nw = 1;
	g->out[0] = ri, g->out_name[0] = "logits", g->nout = 1;
	graph_set_meta(g, "arch", "test");
}

static char *dump_str(const Graph *g)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	ir_dump(g, f);
	for (int i = 0; i < g->nmeta; i++)
		fprintf(f, "meta %s=%s\n", g->meta[i].key, g->meta[i].val);
	fclose(f);
	return s;
}

static unsigned char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	fseek(f, 0, SEEK_END);
	*n = (size_t)ftell(f);
	fseek(f, 0, SEEK_SET);
	unsigned char *p = malloc(*n);
	if (fread(p, 1, *n, f) != *n)
		*n = 0;
	fclose(f);
	return p;
}

static void spit(const char *path, const unsigned char *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	fwrite(p, 1, n, f);
	fclose(f);
}

/* Recompute the payload checksum so a mutated payload reaches the parser. */
static void reseal(unsigned char *p, size_t n)
{
	if (n < 24)
		return;
	uint64_t len = n - 24;
	uint32_t crc = (uint32_t)crc32_z(0L, p + 24, len);
	memcpy(p + 12, &crc, 4), memcpy(p + 16, &len, 8);
}

/* A launch of node `node` for steps of tmin..tmax tokens touching buffers bufs (out[i]: written). */
static Launch launch(int node, int tmin, int tmax, int n, const int *bufs, const int *out)
{
	Launch l = {.node = node, .kernel = "k", .tmin = tmin, .tmax = tmax, .block = 256, .narg = n};
	for (int i = 0; i < 3; i++)
		l.grid[i] = (Size){.node = -1, .div = 1};
	for (int i = 0; i < n; i++)
		l.arg[i] = (KArg){.kind = KA_BUF, .s = {.node = bufs[i]}, .f = out[i]};
	return l;
}

/*
** The memory plan takes its liveness from the launch list as well as the node order: x -> a -> b -> c
** (ropes), where a fused kernel computes b straight from x for small steps (a is then never stored) and
** prefill runs the plain chain. x is read at b's launch, so b must not take x's bytes, which the node
** order alone would allow; the checker sees the GPU schedule; reading before writing is caught.
*/
static void launch_liveness(void)
{
	char err[512];
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	Node tok = {.op = OP_INPUT, .kind = VK_INPUT, .dtype = DT_I32, .ndim = 1, .dim = {DIM_T}, .name = "tokens"};
	Node pos = tok;
	pos.name = "pos";
	Node emb = {.op = OP_PARAM, .kind = VK_WEIGHT, .dtype = DT_F32, .ndim = 2, .dim = {32, 16}, .name = "e"};
	int t = graph_add(&g, &tok), p = graph_add(&g, &pos), e = graph_add(&g, &emb);
	Node x = {.op = OP_EMBEDDING, .nin = 2, .in = {e, t}, .fused_into = -1};
	op_table[OP_EMBEDDING].shape(&g, &x, err, sizeof err);
	int v[4];
	v[0] = graph_add(&g, &x);
	for (int i = 1; i < 4; i++) {
		Node r = {.op = OP_ROPE, .nin = 2, .in = {v[i - 1], p}, .fused_into = -1};
		AS_rope_heads(&r, 2), AS_rope_head_dim(&r, 8), AS_rope_rot_dim(&r, 8), AS_rope_theta(&r, 10000);
		op_table[OP_ROPE].shape(&g, &r, err, sizeof err);
		v[i] = graph_add(&g, &r);
	}
	g.out[0] = v[3], g.out_name[0] = "logits", g.nout = 1;
	check(memplan(&g, 1, err, sizeof err) == 0 && g.node[v[2]].mem_off == g.node[v[0]].mem_off,
	      "without launches, b reuses x's bytes (x dies at a)", "%s (x @%lld, b @%lld)", err,
	      (long long)g.node[v[0]].mem_off, (long long)g.node[v[2]].mem_off);
	int x0[] = {v[0]}, w1[] = {1}, xa[] = {v[0], v[1]}, ab[] = {v[1], v[2]}, xb[] = {v[0], v[2]}, bc[] = {v[2], v[3]};
	int rw[] = {0, 1};
	Launch ls[5] = {launch(v[0], 1, 1 << 30, 1, x0, w1), launch(v[1], 9, 1 << 30, 2, xa, rw),
	                launch(v[2], 9, 1 << 30, 2, ab, rw), launch(v[2], 1, 8, 2, xb, rw), launch(v[3], 1, 1 << 30, 2, bc, rw)};
	g.cuda.l = ls, g.cuda.nl = 5;
	int rc = memplan(&g, 1, err, sizeof err);
	check(rc == 0 && g.node[v[2]].mem_off != g.node[v[0]].mem_off, "a kernel reading x late keeps x's bytes from b",
	      "%s (x @%lld, b @%lld)", err, (long long)g.node[v[0]].mem_off, (long long)g.node[v[2]].mem_off);
	unsigned char mark[8];
	cuda_touched(&g, 1, 0, mark);
	int m1 = mark[v[1]], m0 = mark[v[0]];
	cuda_touched(&g, 9, 0, mark);
	check(!m1 && m0 && mark[v[1]], "cuda_touched: a is stored by prefill only", "T=1: a %d x %d; T=9: a %d", m1, m0,
	      mark[v[1]]);
	/* the plan made without the launches (b over x) is valid for the CPU order only */
	g.cuda.nl = 0;
	memplan(&g, 1, err, sizeof err);
	g.cuda.nl = 5;
	check(memplan_check(&g, err, sizeof err) < 0 && strstr(err, "share bytes (GPU launches)"),
	      "the checker catches an overlap only the GPU schedule has", "%s", err);
	ls[3] = launch(v[2], 1, 8, 2, ab, rw); /* the decode kernel reads a, which no decode launch writes */
	check(memplan(&g, 1, err, sizeof err) < 0 && strstr(err, "before any launch writes it in a step of 1 tokens"),
	      "the checker catches a kernel reading a value no earlier launch wrote", "%s", err);
	/* a step of 9+ rows is two schedules (LAUNCH_ONE_SEQ / LAUNCH_MULTI_SEQ): a written only by the
	** several-sequence launch, read by one both run, fails as one sequence's chunk; a one-sequence launch
	** writing a too mends it */
	Launch l6[6] = {ls[0], ls[1], ls[1], ls[2], launch(v[2], 1, 8, 2, xb, rw), ls[4]};
	l6[1].flags = LAUNCH_MULTI_SEQ, l6[2].flags = LAUNCH_ONE_SEQ;
	g.cuda.l = l6, g.cuda.nl = 6;
	check(memplan(&g, 1, err, sizeof err) == 0, "a value written by either variant of a step is written in both",
	      "%s", err);
	cuda_touched(&g, 9, 1, mark);
	check(mark[v[1]] && mark[v[2]], "cuda_touched: a one-sequence step stores what its own launches write",
	      "a %d b %d", mark[v[1]], mark[v[2]]);
	l6[2].flags = LAUNCH_MULTI_SEQ;
	check(memplan(&g, 1, err, sizeof err) < 0 && strstr(err, "step of 9 tokens of one sequence"),
	      "the checker catches a read that only one sequence's chunk leaves unwritten", "%s", err);
	arena_free(&A);
}

/*
** The launch list's flags survive the plan file (LAUNCH_NORM_LATE tells --round-bf16 which decode GEMVs
** read their norm unrounded); a flag this glmrun does not know is refused as a bad launch.
*/
static void launch_flags(const char *path)
{
	char err[512];
	Arena A = {0}, B = {0};
	Graph g, h;
	graph_init(&g, &A);
	build(&g);
	int bufs[] = {5, 4}, rw[] = {1, 0};
	Launch ls[3] = {launch(5, 1, 1, 2, bufs, rw), launch(5, 2, 8, 2, bufs, rw), launch(5, 9, 1 << 30, 2, bufs, rw)};
	ls[0].flags = LAUNCH_NORM_LATE;
	ls[0].smem = 145408; /* k_qgemv_sk's dynamic shared memory */
	g.cuda = (Cuda){.arch = "sm_90", .act = DT_BF16, .wconv = -1, .source = "// none", .sample_kernel = "s",
	                .l = ls, .nl = 3};
	graph_init(&h, &B);
	int rc = plan_write(&g, path, err, sizeof err) || plan_read(&h, path, err, sizeof err);
	check(!rc && h.cuda.nl == 3 && h.cuda.l[0].flags == LAUNCH_NORM_LATE && h.cuda.l[1].flags == 0 &&
	          h.cuda.l[2].flags == 0,
	      "plan round trip keeps each launch's flags (LAUNCH_NORM_LATE on the 1-token launch only)", "%s (flags %d %d %d)",
	      err, h.cuda.nl > 0 ? h.cuda.l[0].flags : -1, h.cuda.nl > 1 ? h.cuda.l[1].flags : -1,
	      h.cuda.nl > 2 ? h.cuda.l[2].flags : -1);
	check(!rc && h.cuda.l[0].smem == 145408 && h.cuda.l[1].smem == 0,
	      "plan round trip keeps each launch's dynamic shared memory", "%s (smem %d %d)", err,
	      h.cuda.nl > 0 ? h.cuda.l[0].smem : -1, h.cuda.nl > 1 ? h.cuda.l[1].smem : -1);
	arena_free(&B);
	ls[1].flags = 0x80;
	graph_init(&h, &B);
	rc = plan_write(&g, path, err, sizeof err);
	check(!rc && plan_read(&h, path, err, sizeof err) < 0 && strstr(err, "bad kernel launch"),
	      "a launch flag this glmrun does not know is refused", "%s", err);
	arena_free(&B);
	arena_free(&A);
}

/*
** The typed launch contract of format 12: a collective is a kind with no kernel name, and "the next kernel
** may do this allreduce" is its own field, both surviving the file; fusion reasons are their own list. Every
** inconsistent launch glmc never writes is refused with what is wrong.
*/
static void launch_kinds(const char *path)
{
	char err[512];
	Arena A = {0}, B = {0};
	Graph g, h;
	graph_init(&g, &A);
	build(&g);
	Node ar = {.op = OP_ALLREDUCE, .nin = 1, .in = {4}, .fused_into = -1};
	AS_allreduce_axis(&ar, 2);
	op_table[OP_ALLREDUCE].shape(&g, &ar, err, sizeof err);
	int ai = graph_add(&g, &ar);
	graph_add_fusion(&g, "fused: one");
	graph_add_fusion(&g, "refused: two");
	int bufs[] = {ai, 4, 4}, rw[] = {1, 0, 0};
	Launch ls[2] = {launch(ai, 1, 1 << 30, 3, bufs, rw), launch(5, 1, 1 << 30, 2, bufs + 1, rw + 1)};
	ls[0].kind = LK_ALLREDUCE, ls[0].kernel = NULL, ls[0].inside_next = 1, ls[0].block = 1;
	ls[0].arg[2] = (KArg){.kind = KA_LONG, .s = {.node = -1, .div = 16}};
	ls[1].arg[ls[1].narg++] = (KArg){.kind = KA_P2P, .s = {.node = -1}};
	g.cuda = (Cuda){.arch = "sm_90", .act = DT_BF16, .wconv = -1, .source = "// none", .sample_kernel = "s",
	                .l = ls, .nl = 2};
	graph_init(&h, &B);
	int rc = plan_write(&g, path, err, sizeof err) || plan_read(&h, path, err, sizeof err);
	int meta_fusion = 0;
	for (int i = 0; !rc && i < h.nmeta; i++)
		meta_fusion |= !strncmp(h.meta[i].key, "fusion.", 7);
	check(!rc && h.cuda.nl == 2 && h.cuda.l[0].kind == LK_ALLREDUCE && !h.cuda.l[0].kernel && h.cuda.l[0].inside_next == 1 &&
	          h.cuda.l[0].narg == 3 && h.cuda.l[1].kind == LK_KERNEL && !strcmp(h.cuda.l[1].kernel, "k") &&
	          !h.cuda.l[1].inside_next,
	      "plan round trip keeps a collective's kind and its inside-the-next-kernel mark", "%s", err);
	check(!rc && h.nfusion == 2 && !strcmp(h.fusion[0], "fused: one") && !strcmp(h.fusion[1], "refused: two") &&
	          !meta_fusion,
	      "plan round trip keeps the fusion reasons as their own list, in order", "%s (%d reasons)", err, h.nfusion);
	arena_free(&B);
	static const struct {
		const char *what, *want;
		int l, kind, named, inside, p2p, node;
	} bad[] = {
		{"a kernel launch without a name", "name that does not match its kind", 1, LK_KERNEL, 0, 0, 1, 5},
		{"a collective with a kernel name", "name that does not match its kind", 0, LK_ALLREDUCE, 1, 1, 1, -1},
		{"an unknown launch kind", "bad kind", 0, LK_NKINDS, 0, 0, 1, -1},
		{"an allgather on an allreduce node", "collective launch on a node of another op", 0, LK_ALLGATHER, 0, 0, 1, -1},
		{"an allreduce on a rope node", "collective launch on a node of another op", 0, LK_ALLREDUCE, 0, 0, 1, 5},
		{"the inside mark on a kernel", "bad inside-the-next-kernel mark", 1, LK_KERNEL, 1, 1, 1, 5},
		{"the inside mark of 2", "bad inside-the-next-kernel mark", 0, LK_ALLREDUCE, 0, 2, 1, -1},
		{"the inside mark before a kernel without KA_P2P", "which takes no KA_P2P argument", 0, LK_ALLREDUCE, 0, 1, 0, -1},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		Launch m[2] = {ls[0], ls[1]}, *l = &m[bad[i].l];
		l->kind = (int8_t)bad[i].kind, l->kernel = bad[i].named ? "k" : NULL, l->inside_next = (int8_t)bad[i].inside;
		if (bad[i].node >= 0)
			l->node = bad[i].node;
		if (!bad[i].p2p)
			m[1].narg--;
		g.cuda.l = m;
		graph_init(&h, &B);
		rc = plan_write(&g, path, err, sizeof err);
		check(!rc && plan_read(&h, path, err, sizeof err) < 0 && strstr(err, bad[i].want), bad[i].what, "%s", err);
		arena_free(&B);
	}
	arena_free(&A);
}

/*
** Weight bindings that glmc's front end never writes, sealed with a valid checksum, must be refused by
** plan_read: the loaders would index out of bounds (a row stride on a weight that is not [B, R, C]) or
** format the source name with the part number (a '%s' in it).
*/
static void forged_manifests(const char *path)
{
	static const struct {
		const char *what, *want;
		WeightRef w;
	} cases[] = {
		{"row stride on a 2-D weight", "weight row stride on a parameter that is not [blocks, rows, cols]", {.rstride = 2}},
		{"row offset without a stride", "weight row offset without a row stride", {.roff = 1}},
		{"stacked weight with a %s source", "stacked weight whose part count", {.parts = 32, .source = "w.%s"}},
		{"stacked weight with the wrong count", "stacked weight whose part count", {.parts = 3, .source = "w.%d"}},
		{"row0 outside a slot", "bad weight row slot", {.row0 = 4}},
		{"split axis past the rank", "weight split axis outside", {.split = 2}},
	};
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		Arena A = {0}, B = {0};
		Graph g, h;
		char err[1024];
		graph_init(&g, &A);
		build(&g);
		WeightRef *w = &g.w[0];
		const WeightRef f = cases[i].w;
		w->rstride = f.rstride, w->roff = f.roff, w->parts = f.parts, w->row0 = f.row0, w->split = f.split;
		if (f.source)
			w->source = f.source;
		int wrote = plan_write(&g, path, err, sizeof err) == 0;
		graph_init(&h, &B);
		char name[128];
		snprintf(name, sizeof name, "forged manifest refused: %s", cases[i].what);
		check(wrote && plan_read(&h, path, err, sizeof err) < 0 && strstr(err, cases[i].want), name, "%s", err);
		arena_free(&A), arena_free(&B);
	}
}

int main(void)
{
	char path[] = "/tmp/glm-test-plan-XXXXXX", err[1024];
	int fd = mkstemp(path);
	close(fd);
	Arena A = {0}, B = {0};
	Graph g, h;
	graph_init(&g, &A);
	build(&g);
	check(verify(&g, err, sizeof err) == 0, "test graph verifies", "%s", err);
	check(plan_write(&g, path, err, sizeof err) == 0, "plan writes", "%s", err);
	graph_init(&h, &B);
	int rc = plan_read(&h, path, err, sizeof err);
	check(rc == 0, "plan reads back", "%s", err);
	char *d1 = dump_str(&g), *d2 = rc == 0 ? dump_str(&h) : strdup("");
	check(!strcmp(d1, d2), "round trip preserves nodes, manifest, outputs and metadata", "\n%s\nvs\n%s", d1, d2);
	free(d1), free(d2);
	arena_free(&B);

	size_t n;
	unsigned char *orig = slurp(path, &n), *p = malloc(n + 64);

	memcpy(p, orig, n);
	p[8] = 99;
	spit(path, p, n);
	graph_init(&h, &B);
	check(plan_read(&h, path, err, sizeof err) < 0 && strstr(err, "plan format version 99"), "other version refused",
	      "%s", err);
	arena_free(&B);

	memcpy(p, orig, n);
	p[n - 5] ^= 0x40;
	spit(path, p, n);
	graph_init(&h, &B);
	check(plan_read(&h, path, err, sizeof err) < 0 && strstr(err, "checksum mismatch"), "corruption detected", "%s",
	      err);
	arena_free(&B);

	forged_manifests(path);

	/* A shape the operands do not give must be caught by the verifier, even with a valid checksum. */
	Graph bad;
	Arena C = {0};
	graph_init(&bad, &C);
	build(&bad);
	bad.node[4].dim[1] = 17;
	check(verify(&bad, err, sizeof err) < 0 && strstr(err, "recorded shape f32[T,17] but operands give f32[T,16]"),
	      "verifier rejects a wrong recorded shape", "%s", err);
	bad.node[4].dim[1] = 16;
	bad.node[5].in[0] = 5;
	check(verify(&bad, err, sizeof err) < 0 && strstr(err, "not an earlier node"), "verifier rejects a cycle", "%s",
	      err);
	arena_free(&C);

	/* The memory plan: valid after memplan, and the checker catches two live values made to overlap. */
	Graph mp;
	Arena D = {0};
	graph_init(&mp, &D);
	build(&mp);
	check(memplan(&mp, 1, err, sizeof err) == 0 && mp.mem.token_bytes >= mp.mem.token_lower &&
	          mp.mem.token_lower > 0,
	      "memplan places the activations", "%s (arena %lld per token, bound %lld)", err,
	      (long long)mp.mem.token_bytes, (long long)mp.mem.token_lower);
	/* %4 (embedding) is read by %5 (rope): live together, so they must not share bytes. */
	mp.node[5].mem_off = mp.node[4].mem_off;
	check(memplan_check(&mp, err, sizeof err) < 0 && strstr(err, "live together but share bytes"),
	      "the overlap checker catches an aliasing plan", "%s", err);
	arena_free(&D);

	launch_liveness();
	launch_flags(path);
	launch_kinds(path);

	/* Fuzz: random byte flips, truncations and extensions of the payload, checksum resealed. */
	unsigned long long seed = 0x9e3779b97f4a7c15ULL;
	int accepted = 0, rejected_silently = 0;
	for (int it = 0; it < 3000; it++) {
		memcpy(p, orig, n);
		size_t m = n;
		float r[4];
		fill_random(r, 4, &seed);
		int kind = (int)((r[0] + 1) * 2) % 4;
		size_t at = 24 + (size_t)((r[1] + 1) / 2 * (double)(n - 24)) % (n - 24);
		if (kind == 0)
			p[at] ^= (unsigned char)(1u << ((int)((r[2] + 1) * 4) & 7));
		else if (kind == 1)
			p[at] = (unsigned char)((r[2] + 1) * 127);
		else if (kind == 2)
			m = at;
		else {
			memcpy(p + at + 8, orig + at, n - at);
			memset(p + at, 0xff, 8);
			m = n + 8;
		}
		reseal(p, m);
		spit(path, p, m);
		graph_init(&h, &B);
		err[0] = 0;
		int st = plan_read(&h, path, err, sizeof err);
		accepted += st == 0;
		rejected_silently += st != 0 && !err[0];
		arena_free(&B);
	}
	check(!rejected_silently, "fuzzed plans never crash and every refusal has a message",
	      "%d refusals without a message", rejected_silently);
	printf("# fuzz: %d of 3000 mutated plans were still valid\n", accepted);
	free(orig), free(p);
	unlink(path);
	arena_free(&A);
	return check_done();
}
