/*
** tests/test_exec.c — the CPU executor's plumbing: each op as the op table dispatches it (dims bound
** from T and S, broadcasting, axes, int32 outputs, caches persisting across steps) against naive loops
** written here, on fresh random inputs. The kernels themselves are tested in test_ref.c.
*/
#include "check.h"
#include "exec.h"
#include "ref.h"

#include <string.h>

typedef struct {
	Arena A;
	Graph g;
	char err[512];
} T;

/* Append a node after running its shape rule; a rule failure is a test bug, so abort loudly. */
static int add(T *t, Node n)
{
	if (op_table[n.op].shape(&t->g, &n, t->err, sizeof t->err)) {
		fprintf(stderr, "test graph: %s\n", t->err);
		exit(2);
	}
	if (n.op == OP_PARAM)
		n.kind = VK_WEIGHT;
	if (n.op == OP_INPUT)
		n.kind = VK_INPUT;
	if (n.op == OP_CACHE)
		n.kind = VK_CACHE;
	return graph_add(&t->g, &n);
}

static int param(T *t, const char *name, int ndim, int64_t d0, int64_t d1, int64_t d2)
{
	return add(t, (Node){.op = OP_PARAM, .dtype = DT_F32, .ndim = ndim, .dim = {d0, d1, d2}, .name = name});
}

static int input(T *t, const char *name)
{
	return add(t, (Node){.op = OP_INPUT, .dtype = DT_I32, .ndim = 1, .dim = {DIM_T}, .name = name});
}

static void out(T *t, int id)
{
	t->g.out[t->g.nout] = id, t->g.out_name[t->g.nout++] = "y";
}

static float maxdiff(const float *a, const float *b, size_t n)
{
	float m = 0;
	for (size_t i = 0; i < n; i++) {
		float d = fabsf(a[i] - b[i]);
		if (!(d <= m))
			m = isnan(d) ? INFINITY : d;
	}
	return m;
}

static unsigned long long seed = 42;

/* Fill every weight buffer of an initialised executor with random values; returns them by node. */
static void fill_weights(Exec *x)
{
	for (int i = 0; i < x->g->n; i++)
		if (x->g->node[i].kind == VK_WEIGHT)
			fill_random(x->buf[i], (size_t)node_numel(&x->g->node[i], 0, 0), &seed);
}

/* split + concat in swapped order, permute, batched matmul, broadcast add, linear with bias. */
static void test_shapes(void)
{
	T t = {0};
	graph_init(&t.g, &t.A);
	int a = param(&t, "a", 2, 3, 10, 0);
	Node sl = {.op = OP_SLICE, .nin = 1, .in = {a}};
	AS_slice_axis(&sl, 1), AS_slice_start(&sl, 0), AS_slice_len(&sl, 4);
	int s1 = add(&t, sl);
	AS_slice_start(&sl, 4), AS_slice_len(&sl, 6);
	int s2 = add(&t, sl);
	Node cn = {.op = OP_CONCAT, .nin = 2, .in = {s2, s1}};
	AS_concat_axis(&cn, 1);
	int cat = add(&t, cn);
	int p = param(&t, "p", 3, 2, 3, 4);
	Node pm = {.op = OP_PERMUTE, .nin = 1, .in = {p}};
	AS_permute_axis(&pm, 0, 2), AS_permute_axis(&pm, 1, 0), AS_permute_axis(&pm, 2, 1);
	int perm = add(&t, pm);
	int mb = param(&t, "mb", 3, 2, 4, 5);
	int mm = add(&t, (Node){.op = OP_MATMUL, .nin = 2, .in = {p, mb}});
	int bv = param(&t, "bv", 1, 4, 0, 0);
	int badd = add(&t, (Node){.op = OP_ADD, .nin = 2, .in = {p, bv}});
	int w = param(&t, "w", 2, 7, 4, 0), bias = param(&t, "bias", 1, 7, 0, 0);
	int lin = add(&t, (Node){.op = OP_LINEAR, .nin = 3, .in = {p, w, bias}});
	int am = add(&t, (Node){.op = OP_ARGMAX, .nin = 1, .in = {p}});
	Node tn = {.op = OP_TOPK, .nin = 1, .in = {p}};
	AS_topk_k(&tn, 2);
	int tk = add(&t, tn);
	int tok = input(&t, "tokens");
	(void)tok;
	out(&t, cat);
	Exec x;
	check(exec_init(&x, &t.g, NULL, 1, 1, t.err, sizeof t.err) == 0, "executor initialises without weights", "%s",
	      t.err);
	fill_weights(&x);
	int32_t one = 1, zero = 0;
	check(exec_step(&x, &one, &zero, 1, t.err, sizeof t.err) == 0, "step runs", "%s", t.err);
	const float *A = x.buf[a], *P = x.buf[p], *MB = x.buf[mb], *BV = x.buf[bv], *W = x.buf[w], *B = x.buf[bias];

	float want[64];
	for (int r = 0; r < 3; r++)
		for (int c = 0; c < 10; c++)
			want[r * 10 + c] = A[r * 10 + (c < 6 ? c + 4 : c - 6)];
	check(maxdiff(x.buf[cat], want, 30) == 0, "split then concat along axis 2", "max diff %g",
	      maxdiff(x.buf[cat], want, 30));

	int ok = 1;
	for (int i = 0; i < 4; i++)
		for (int j = 0; j < 2; j++)
			for (int k = 0; k < 3; k++)
				ok &= ((float *)x.buf[perm])[(i * 2 + j) * 3 + k] == P[(j * 3 + k) * 4 + i];
	check(ok, "permute {3,1,2}", "element mismatch");

	float mw[30];
	for (int b = 0; b < 2; b++)
		for (int i = 0; i < 3; i++)
			for (int j = 0; j < 5; j++) {
				double s = 0;
				for (int k = 0; k < 4; k++)
					s += (double)P[(b * 3 + i) * 4 + k] * MB[(b * 4 + k) * 5 + j];
				mw[(b * 3 + i) * 5 + j] = (float)s;
			}
	check(maxdiff(x.buf[mm], mw, 30) < 1e-6f, "batched matmul", "max diff %g", maxdiff(x.buf[mm], mw, 30));

	float aw[24];
	for (int i = 0; i < 24; i++)
		aw[i] = P[i] + BV[i % 4];
	check(maxdiff(x.buf[badd], aw, 24) == 0, "add broadcasts the trailing operand", "max diff %g",
	      maxdiff(x.buf[badd], aw, 24));

	float lw[42];
	for (int r = 0; r < 6; r++)
		for (int o = 0; o < 7; o++) {
			double s = B[o];
			for (int k = 0; k < 4; k++)
				s += (double)P[r * 4 + k] * W[o * 4 + k];
			lw[r * 7 + o] = (float)s;
		}
	check(maxdiff(x.buf[lin], lw, 42) < 1e-6f, "linear over leading dims with bias", "max diff %g",
	      maxdiff(x.buf[lin], lw, 42));

	ok = 1;
	for (int r = 0; r < 6; r++) {
		int best = 0, second = -1;
		for (int k = 1; k < 4; k++)
			if (P[r * 4 + k] > P[r * 4 + best])
				best = k;
		for (int k = 0; k < 4; k++)
			if (k != best && (second < 0 || P[r * 4 + k] > P[r * 4 + second]))
				second = k;
		ok &= ((int32_t *)x.buf[am])[r] == best;
		ok &= ((int32_t *)x.buf[tk])[r * 2] == best && ((int32_t *)x.buf[tk])[r * 2 + 1] == second;
	}
	check(ok, "argmax and top-2 per row as int32", "index mismatch");
	exec_free(&x);
	arena_free(&t.A);
}

/*
** Embedding → rope → attention with caches, run as a 3-token prefill then two 1-token steps; each
** step's output must equal attention recomputed from scratch over all tokens so far.
*/
static void test_attention_steps(void)
{
	enum { V = 11, H = 4, G = 2, D = 8, S = 8 };
	T t = {0};
	graph_init(&t.g, &t.A);
	int tok = input(&t, "tokens"), pos = input(&t, "pos");
	int eq = param(&t, "eq", 2, V, H * D, 0), ek = param(&t, "ek", 2, V, G * D, 0), ev = param(&t, "ev", 2, V, G * D, 0);
	int q = add(&t, (Node){.op = OP_EMBEDDING, .nin = 2, .in = {eq, tok}});
	int k = add(&t, (Node){.op = OP_EMBEDDING, .nin = 2, .in = {ek, tok}});
	int v = add(&t, (Node){.op = OP_EMBEDDING, .nin = 2, .in = {ev, tok}});
	Node rq = {.op = OP_ROPE, .nin = 2, .in = {q, pos}};
	AS_rope_heads(&rq, H), AS_rope_head_dim(&rq, D), AS_rope_rot_dim(&rq, D), AS_rope_theta(&rq, 10000);
	int qr = add(&t, rq);
	rq.in[0] = k, AS_rope_heads(&rq, G);
	int kr = add(&t, rq);
	int kc = add(&t, (Node){.op = OP_CACHE, .dtype = DT_F32, .ndim = 2, .dim = {DIM_S, G * D}, .name = "k"});
	int vc = add(&t, (Node){.op = OP_CACHE, .dtype = DT_F32, .ndim = 2, .dim = {DIM_S, G * D}, .name = "v"});
	Node an = {.op = OP_ATTENTION, .nin = 6, .in = {qr, kr, v, kc, vc, pos}};
	AS_attention_heads(&an, H), AS_attention_kv_heads(&an, G), AS_attention_head_dim(&an, D);
	AS_attention_v_head_dim(&an, D), AS_attention_scale(&an, 0.35);
	int at = add(&t, an);
	out(&t, at);
	Exec x;
	check(exec_init(&x, &t.g, NULL, 3, S, t.err, sizeof t.err) == 0, "attention graph initialises", "%s", t.err);
	fill_weights(&x);
	int32_t toks[5] = {3, 9, 1, 4, 10}, ps[5] = {0, 1, 2, 3, 4};
	RefRope r = {.head_dim = D, .rot_dim = D, .theta = 10000};
	float Q[5][H * D], K[5][G * D], Vv[5][G * D];
	for (int i = 0; i < 5; i++) {
		ref_rope(Q[i], (float *)x.buf[eq] + toks[i] * H * D, &ps[i], 1, H, &r);
		ref_rope(K[i], (float *)x.buf[ek] + toks[i] * G * D, &ps[i], 1, G, &r);
		memcpy(Vv[i], (float *)x.buf[ev] + toks[i] * G * D, sizeof Vv[i]);
	}
	for (int step = 0; step < 3; step++) {
		int first = step == 0 ? 0 : step + 2, n = step == 0 ? 3 : 1;
		check(exec_step(&x, toks + first, ps + first, n, t.err, sizeof t.err) == 0, "attention step runs", "%s",
		      t.err);
		float want[3 * H * D];
		for (int i = 0; i < n; i++) {
			int qi = first + i;
			for (int h = 0; h < H; h++) {
				int g = h / (H / G);
				double sc[5], m = -1e30, z = 0;
				for (int j = 0; j <= qi; j++) {
					sc[j] = 0;
					for (int d = 0; d < D; d++)
						sc[j] += (double)Q[qi][h * D + d] * K[j][g * D + d];
					sc[j] *= 0.35;
					m = sc[j] > m ? sc[j] : m;
				}
				for (int j = 0; j <= qi; j++)
					z += sc[j] = exp(sc[j] - m);
				for (int d = 0; d < D; d++) {
					double s = 0;
					for (int j = 0; j <= qi; j++)
						s += sc[j] / z * Vv[j][g * D + d];
					want[i * H * D + h * D + d] = (float)s;
				}
			}
		}
		char name[64];
		snprintf(name, sizeof name, "attention step %d (%d tokens) matches a full recomputation", step, n);
		float md = maxdiff(x.buf[at], want, (size_t)n * H * D);
		check(md < 1e-5f, name, "max diff %g", md);
	}
	int32_t far = S, bad_tok = V;
	check(exec_step(&x, toks, &far, 1, t.err, sizeof t.err) < 0 && strstr(t.err, "position 8 is outside the context"),
	      "position past the cache is an error", "%s", t.err);
	check(exec_step(&x, &bad_tok, ps, 1, t.err, sizeof t.err) < 0 && strstr(t.err, "token id 11 is outside"),
	      "token id past the vocabulary is an error", "%s", t.err);
	exec_free(&x);
	arena_free(&t.A);
}

static float bf(float v) { return ref_bf16_to_f32(ref_f32_to_bf16(v)); }

/* Whether n floats equal bit for bit (both NaN counts as unequal: nothing here should be NaN). */
static int same(const float *a, const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!(a[i] == b[i]))
			return 0;
	return 1;
}

/*
** --round-bf16 and a decode GEMV that reads its norm late (LAUNCH_NORM_LATE, exec.c exec_round_bf16):
** x = embedding; h = rmsnorm(x); l1 = W1·h (a member stored as itself), r = x + W2·h (a member behind a
** residual-add epilogue), l3 = W3·h (another reader of the norm, outside the launch), h stored too. One
** launch marked late for 1-token steps names l1, r, the weights W1, W2 and the norm's input. Each value
** is checked bit for bit against the reference kernels run here on the values the GPU would round:
** at T = 1 the launch's linears see the unrounded h and everyone else the rounded one; at T = 2 (no
** marked launch) all see the rounded h; on two CPU ranks the same; a marked launch computing no linear
** of a norm is refused.
*/
static void test_norm_late(void)
{
	enum { V = 5, K = 64, N = 64, NR = 2 };
	T t = {0};
	graph_init(&t.g, &t.A);
	int tok = input(&t, "tokens");
	input(&t, "pos");
	int emb = param(&t, "emb", 2, V, K, 0), nw = param(&t, "nw", 1, K, 0, 0);
	int w1 = param(&t, "w1", 2, N, K, 0), w2 = param(&t, "w2", 2, N, K, 0), w3 = param(&t, "w3", 2, N, K, 0);
	int x = add(&t, (Node){.op = OP_EMBEDDING, .nin = 2, .in = {emb, tok}});
	Node hn = {.op = OP_RMSNORM, .nin = 2, .in = {x, nw}};
	AS_rmsnorm_eps(&hn, 1e-5);
	int h = add(&t, hn);
	int l1 = add(&t, (Node){.op = OP_LINEAR, .nin = 2, .in = {h, w1}});
	int l2 = add(&t, (Node){.op = OP_LINEAR, .nin = 2, .in = {h, w2}});
	int r = add(&t, (Node){.op = OP_ADD, .nin = 2, .in = {x, l2}});
	int l3 = add(&t, (Node){.op = OP_LINEAR, .nin = 2, .in = {h, w3}});
	out(&t, l1);
	int bufs[] = {l1, r, w1, w2, x, nw, h}, wr[] = {1, 1, 0, 0, 0, 0, 1};
	Launch L = {.node = l1, .kernel = "k", .tmin = 1, .tmax = 1, .flags = LAUNCH_NORM_LATE, .block = 32, .narg = 7};
	for (int i = 0; i < 7; i++)
		L.arg[i] = (KArg){.kind = KA_BUF, .s = {.node = bufs[i]}, .f = wr[i]};
	t.g.cuda.act = DT_BF16, t.g.cuda.l = &L, t.g.cuda.nl = 1;

	Exec xs[NR];
	int ok = 1;
	for (int k = 0; k < NR; k++) {
		ok &= exec_init_rank(&xs[k], &t.g, NULL, 2, 4, k, NR, t.err, sizeof t.err) == 0;
		seed = 7; /* the same weights on every rank, as bf16 values (the GPU's) */
		fill_weights(&xs[k]);
		for (int i = 0; ok && i < t.g.n; i++)
			if (t.g.node[i].kind == VK_WEIGHT)
				for (int64_t e = 0; e < node_numel(&t.g.node[i], 0, 0); e++)
					((float *)xs[k].buf[i])[e] = bf(((float *)xs[k].buf[i])[e]);
		ok &= exec_round_bf16(&xs[k], t.err, sizeof t.err) == 0;
	}
	check(ok, "a graph with a LAUNCH_NORM_LATE launch rounds as bf16 on two CPU ranks", "%s", t.err);
	const float *E = xs[0].buf[emb], *NW = xs[0].buf[nw], *W1 = xs[0].buf[w1], *W2 = xs[0].buf[w2], *W3 = xs[0].buf[w3];

	int32_t toks[2] = {3, 1}, ps[2] = {0, 1};
	for (int nt = 1; nt <= 2; nt++) {
		/* what the GPU computes: x and h stored rounded; the late launch's dots over the unrounded h */
		float xb[2 * K], hf[2 * K], hr[2 * K], a[2 * N], want[4][2 * N];
		for (int i = 0; i < nt; i++)
			for (int k = 0; k < K; k++)
				xb[i * K + k] = bf(E[toks[i] * K + k]);
		ref_rmsnorm(hf, xb, NW, nt, K, 1e-5f);
		for (int i = 0; i < nt * K; i++)
			hr[i] = bf(hf[i]);
		const float *in = nt == 1 ? hf : hr;
		ref_linear(want[0], in, W1, NULL, nt, K, N);
		ref_linear(a, in, W2, NULL, nt, K, N);
		for (int i = 0; i < nt * N; i++)
			want[1][i] = bf(xb[i] + bf(a[i]));
		ref_linear(want[2], hr, W3, NULL, nt, K, N);
		ref_linear(want[3], hr, W1, NULL, nt, K, N); /* l1 as the norm rounded (to show the test can tell) */
		for (int i = 0; i < nt * N; i++)
			want[0][i] = bf(want[0][i]), want[2][i] = bf(want[2][i]), want[3][i] = bf(want[3][i]);
		check(exec_step_ranks(xs, NR, toks, ps, nt, t.err, sizeof t.err) == 0, "norm-late graph steps", "%s", t.err);
		for (int k = 0; k < NR; k++) {
			char name[256];
			snprintf(name, sizeof name, "--round-bf16, T=%d, rank %d: the norm stored rounded, l1 and x + W2·h over the %s "
			         "norm, W3·h (outside the launch) over the rounded one", nt, k, nt == 1 ? "unrounded" : "rounded");
			check(same(xs[k].buf[h], hr, (size_t)nt * K) && same(xs[k].buf[l1], want[0], (size_t)nt * N) &&
			          same(xs[k].buf[r], want[1], (size_t)nt * N) && same(xs[k].buf[l3], want[2], (size_t)nt * N),
			      name, "h %d, l1 %d, r %d, l3 %d (1: as predicted)", same(xs[k].buf[h], hr, (size_t)nt * K),
			      same(xs[k].buf[l1], want[0], (size_t)nt * N), same(xs[k].buf[r], want[1], (size_t)nt * N),
			      same(xs[k].buf[l3], want[2], (size_t)nt * N));
		}
		if (nt == 1)
			check(!same(want[0], want[3], N), "the unrounded and rounded norm give different l1 here (the check has teeth)",
			      "l1 equal either way: pick other weights");
	}
	for (int k = 0; k < NR; k++)
		exec_free(&xs[k]);

	/* A marked launch that computes no linear of an rmsnorm (here: only the add's x operand) is a bad plan. */
	L.narg = 1;
	L.arg[0] = (KArg){.kind = KA_BUF, .s = {.node = x}, .f = 1};
	Exec y;
	int rc = exec_init(&y, &t.g, NULL, 2, 4, t.err, sizeof t.err);
	check(rc == 0 && exec_round_bf16(&y, t.err, sizeof t.err) < 0 && strstr(t.err, "reads a norm late but computes no linear"),
	      "a LAUNCH_NORM_LATE launch without a linear of a norm is refused", "%s", t.err);
	if (rc == 0)
		exec_free(&y);
	arena_free(&t.A);
}

int main(void)
{
	test_shapes();
	test_attention_steps();
	test_norm_late();
	return check_done();
}
