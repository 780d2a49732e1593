/*
** compiler/passes/select.c — kernel selection, the step between fusion and emission. It decides, for the target
** GPU (--arch), which quantized weights stay in their GGUF blocks on the GPU, and for each fused decode GEMV
** group (FK_GEMV) which kernel serves which steps, with the template parameters that are choices (shapes,
** splits, the prologue's form) and why it won over the kernels preferred before it. emit_cuda.c prints
** what is chosen here and decides nothing about these; `glmc explain` prints the records.
*/
#include "passes.h"
#include "gemv_shape.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

/*
** The GPUs --arch names, one data-center part each (the one a plan for that arch is most likely run on):
** SMs, the dynamic shared memory a block may opt in to, an SM's shared memory, and the tensor cores'
** generation (8: mma.sync, the only form the kernels use; 9 and 10 add wgmma / tcgen05, unused). A plan
** compiled for one arch and run on another GPU keeps these shapes (correct, perhaps slower).
** Sources of the SM counts (128 FP32 cores an SM on all of these): A100 SXM4 108 (cudaDeviceQuery on one:
** "(108) Multiprocessors", 167936 bytes of shared memory an SM); H100 SXM5 132 of GH100's 144 (NVIDIA, "NVIDIA
** Hopper Architecture In-Depth"); L40S 142 (NVIDIA's datasheet: 18,176 CUDA cores, 142 RT cores, one an SM);
** A40 84 (10,752 CUDA cores); B200 148, 74 a die of two (Chips and Cheese, "Nvidia's B200: Keeping the CUDA
** Juggernaut Rolling"); RTX 5090 170 (21,760 CUDA cores). Shared memory: NVIDIA's Ampere and Hopper tuning
** guides (A100 164 KB an SM, 163 KB a block; 8.6 100 KB an SM; H100 228 KB and 227 KB); 8.9, 10.0 and 12.0 as
** the CUDA programming guide's per-capability table gives them.
*/
static const Target targets[] = {
	{"sm_80", 108, 166912, 167936, 8},  /* A100 */
	{"sm_86", 84, 101376, 102400, 8},   /* A40 */
	{"sm_89", 142, 101376, 102400, 8},  /* L40S */
	{"sm_90", 132, 232448, 233472, 9},  /* H100 / H200: the shapes bench/NOTES.md measured */
	{"sm_100", 148, 232448, 233472, 10}, /* B200 */
	{"sm_120", 170, 101376, 102400, 10}, /* RTX 5090 */
};

/* The table above by name: one struct for every shape decision, instead of one GPU's constants. */
int target_for_arch(const char *arch, Target *t)
{
	for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
		if (!strcmp(targets[i].arch, arch)) {
			*t = targets[i];
			return 0;
		}
	return -1;
}

/*
** ---- Quantized weights resident on the GPU (ops/quant.cuh) ----
**
** A DT_Q weight of a type with kernels (every GGUF block type glmc reads: Q8_0 and the K-quants on their
** tuned paths, the others on quant.cuh's general one) whose rows are whole blocks stays in its GGUF blocks
** on the GPU when every node reading it has a quantized kernel for it: a linear (as its
** weight, by its own kernel or in a fused decode GEMV or MoE end, ops/qfused.cuh), an embedding lookup
** (as its table), or a routed-experts FFN (as gate, up or down, all three resident). Anything else (a
** matmul, a slice) keeps the float conversion at upload. This is the one place residency is decided:
** fusion does not depend on it (the fused kernels take each weight's type as a template argument). The
** choice is recorded per weight in the plan (Cuda.wq); glmrun sizes and uploads the weight from it.
*/

#define q_blck quant_gpu_block

/* Whether node c's kernels at every step size read its weights through quantized kernels: its own,
** and the fused kernel computing it for small steps if any (a decode GEMV group or the MoE layer's end,
** ops/qfused.cuh, read blocks; no other fused kernel computes a linear). */
static int q_fused_ok(const Graph *g, int c)
{
	if (g->node[c].fused_into < 0)
		return 1;
	for (int k = 0; k < g->nfk; k++)
		for (int i = 0; i < g->fk[k].ncover; i++)
			if (g->fk[k].cover[i] == c && g->fk[k].kind != FK_GEMV && g->fk[k].kind != FK_MOE_DOWN)
				return 0;
	return 1;
}

/* Whether input k of node c may read weight w as blocks, given the candidate types cand[]. */
static int q_use_ok(const Graph *g, int c, int k, const int *cand)
{
	const Node *n = &g->node[c];
	int w = n->in[k];
	switch (n->op) {
	case OP_LINEAR: return k == 1 && g->node[w].ndim == 2 && q_fused_ok(g, c);
	case OP_EMBEDDING: return k == 0 && g->node[w].ndim == 2;
	case OP_MOE_FFN:
		return k >= 3 && k <= 5 && g->node[w].ndim == 3 && cand[n->in[3]] >= 0 && cand[n->in[4]] >= 0 &&
		       cand[n->in[5]] >= 0;
	default: return 0;
	}
}

/* Fill wq (per node: the block type a weight stays in, else -1) and g->cuda.wq (per weight). */
static void q_choose(Graph *g, int *wq)
{
	int *cand = wq, *used = calloc((size_t)g->n + 1, sizeof(int));
	GLM_ASSERT(used);
	for (int i = 0; i < g->n; i++)
		cand[i] = -1;
	for (int i = 0; i < g->nw; i++) {
		const WeightRef *w = &g->w[i];
		const Node *n = &g->node[w->node];
		int b = q_blck(w->qtype);
		if (w->dtype == DT_Q && b && n->ndim >= 2 && n->dim[n->ndim - 1] % b == 0)
			cand[w->node] = w->qtype;
	}
	/* Refuse until stable: refusing one expert weight refuses its FFN's other two. */
	for (int changed = 1; changed;) {
		changed = 0;
		for (int c = 0; c < g->n; c++)
			for (int k = 0; k < g->node[c].nin; k++) {
				int w = g->node[c].in[k];
				if (cand[w] >= 0) {
					used[w] = 1;
					if (!q_use_ok(g, c, k, cand))
						cand[w] = -1, changed = 1;
				}
			}
	}
	g->cuda.wq = arena_alloc(g->A, sizeof(int) * (size_t)(g->nw ? g->nw : 1));
	for (int i = 0; i < g->nw; i++) {
		int nd = g->w[i].node;
		if (!used[nd])
			cand[nd] = -1;
		g->cuda.wq[i] = cand[nd];
	}
	free(used);
}

/* Why weight i (not kept in blocks) is converted at upload, into buf. */
static const char *q_why(const Graph *g, int i, char *buf, size_t len)
{
	const WeightRef *w = &g->w[i];
	const Node *n = &g->node[w->node];
	int64_t K = n->dim[n->ndim - 1];
	if (!q_blck(w->qtype)) {
		snprintf(buf, len, "no GPU kernel reads %s blocks", quant_type_name(w->qtype));
		return buf;
	}
	if (n->ndim < 2 || K % q_blck(w->qtype))
		return "its rows (this rank's part) are not whole blocks";
	for (int c = 0; c < g->n; c++)
		for (int k = 0; k < g->node[c].nin; k++)
			if (g->node[c].in[k] == w->node) {
				snprintf(buf, len, "read by %s %%%d (%s:%d), which has no quantized kernel for it",
				         op_table[g->node[c].op].name, c, g->node[c].src ? g->node[c].src : "?", g->node[c].line);
				return buf;
			}
	return "nothing reads it";
}

/* glmc explain: the weights kept in blocks, and each converted one with its reason (the first 12). */
void select_quant_explain(const Graph *g, FILE *f)
{
	int kept = 0, conv = 0, shown = 0;
	double kb = 0, cb = 0;
	for (int i = 0; i < g->nw; i++) {
		const WeightRef *w = &g->w[i];
		const Node *n = &g->node[w->node];
		if (w->dtype != DT_Q)
			continue;
		int64_t K = n->dim[n->ndim - 1], rows = node_numel(n, 0, 0) / K;
		double fb = (double)node_numel(n, 0, 0) * (double)dtype_size(g->cuda.wconv >= 0 ? g->cuda.wconv : DT_F32);
		if (g->cuda.wq && g->cuda.wq[i] >= 0) {
			kept++;
			kb += (double)quant_dev_row_bytes(w->qtype, K) * (double)rows;
			continue;
		}
		conv++;
		cb += fb;
		if (shown++ >= 12)
			continue;
		char buf[160];
		fprintf(f, "  converted: %s (%s): %s\n", n->name, quant_type_name(w->qtype), q_why(g, i, buf, sizeof buf));
	}
	if (shown > 12)
		fprintf(f, "  ... and %d more converted\n", shown - 12);
	fprintf(f, "  %d quantized weights kept as blocks on the GPU (%.1f MiB), %d converted to %s at upload (%.1f MiB)\n",
	        kept, kb / 1048576, conv, g->cuda.wconv == DT_BF16 ? "bf16" : "f32", cb / 1048576);
}

/*
** ---- The decode GEMV groups (fuse.c FK_GEMV) ----
*/

/* The selection under way: the graph, the target, each node's resident type. */
typedef struct {
	Graph *g;
	const Target *t;
	const int *wq;
} Sx;

/* The type id ops/qfused.cuh reads weight node w as: its GGUF block type when it stays in blocks, else
** its float type on the GPU (ggml's ids: 0 f32, 1 f16, 30 bf16). */
int select_wtype(const Graph *g, const int *wq, int w)
{
	if (wq[w] >= 0)
		return wq[w];
	int dt = g->node[w].kind == VK_WEIGHT ? cuda_wdtype(g, w) : g->cuda.act;
	return dt == DT_BF16 ? 30 : dt == DT_F16 ? 1 : 0;
}

/* Member m's weight node, its rows and K. */
static int mw(const Graph *g, const FuseKernel *f, int m) { return g->node[f->m[m]].in[1]; }
static int64_t mrows(const Graph *g, const FuseKernel *f, int m) { return g->node[mw(g, f, m)].dim[0]; }
static int64_t group_k(const Graph *g, const FuseKernel *f) { return g->node[mw(g, f, 0)].dim[1]; }

/* A group's output rows, all members (a GLU group's gate and up rows both). */
static int64_t group_rows(const Graph *g, const FuseKernel *f)
{
	int64_t n = 0;
	for (int m = 0; m < f->nm; m++)
		n += mrows(g, f, m);
	return n;
}

/* Whether a group needs the kernels of per-member weight types (ops/qfused.cuh): a member's weight stays
** in blocks, or the members' float types differ. */
static int gemv_mixed(const Sx *s, const FuseKernel *f)
{
	int q = 0, t0 = select_wtype(s->g, s->wq, mw(s->g, f, 0));
	for (int m = 0; m < f->nm; m++) {
		int w = mw(s->g, f, m);
		q |= s->wq[w] >= 0 || select_wtype(s->g, s->wq, w) != t0;
	}
	return q;
}

/* Bytes of 256 values of a type id: how wide a member's rows are, to balance a fused group's blocks. */
static int type_bytes256(int qt)
{
	switch (qt) {
	case 0: return 1024;
	case 1: case 30: return 512;
	case 8: return 272;
	case 12: return 144;
	case 13: return 176;
	default: return 210;
	}
}

/* The K split of each member of a k_qgemv_fused launch (ops/qfused.cuh P_m): `base` for the members of
** the narrowest rows, a power of two larger (up to 8, rounded in log scale) for members whose rows take
** more bytes, so a block of an f32 router reads about what a block of Q4_K rows reads. */
static void gemv_splits(const int *qt, int nm, int base, int *p)
{
	int minb = 1 << 30;
	for (int m = 0; m < nm; m++)
		minb = type_bytes256(qt[m]) < minb ? type_bytes256(qt[m]) : minb;
	for (int m = 0; m < nm; m++) {
		double ratio = (double)type_bytes256(qt[m]) / minb;
		int sp = base;
		while (sp < 8 && (double)(2 * sp) / base <= ratio * 1.41421356)
			sp *= 2;
		p[m] = sp;
	}
}

/* Whether a group's launch for 2..tmax tokens can be ops/qfused.cuh's k_gemv_tc: bf16 weights (every
** member) and activations, K a multiple of 32, no prologue or a norm (formed late; stored too when other
** nodes read it, as GLM-4.7-Flash's norm + router + shared gate/up, whose experts read the norm), no
** SwiGLU prologue. */
static const char *gemv_tc_lost(const Sx *s, const FuseKernel *f, int64_t K)
{
	const Graph *g = s->g;
	if (g->cuda.act != DT_BF16)
		return "k_gemv_tc lost: activations are not bf16";
	if (K % 32)
		return "k_gemv_tc lost: K is not a multiple of 32";
	if (f->pro != GP_NONE && f->pro != GP_RMSNORM)
		return "k_gemv_tc lost: a SwiGLU prologue";
	for (int m = 0; m < f->nm; m++)
		if (g->node[mw(g, f, m)].dtype != DT_BF16)
			return "k_gemv_tc lost: a weight is not bf16";
	return NULL;
}

/* A group's 16-row tiles (each member's rows rounded up to 16). */
static int64_t gemv_tiles(const Graph *g, const FuseKernel *f)
{
	int64_t tiles = 0;
	for (int m = 0; m < f->nm; m++)
		tiles += (mrows(g, f, m) + 15) / 16;
	return tiles;
}

/* Whether a group of Q4_K or of Q6_K members (type qt) takes ops/qfused.cuh's k_qgemv_sk for its one-token
** step: a SwiGLU prologue over K > 8192, where k_qgemv_fused_mma would form and stage the SwiGLU again for
** every group of 128 rows (K past one staged chunk); the stream stages it once a block. Its shared memory
** (x whole, QSK_NWARP warps' rings) must fit the target's block, and its items fill a wave of warps.
** bench/NOTES.md entry 46. NULL when it fits, else why not. */
static const char *qsk_lost(const Sx *s, const FuseKernel *f, int qt, int64_t K)
{
	if (f->pro != GP_SWIGLU)
		return "k_qgemv_sk lost: no SwiGLU prologue";
	if (K <= 8192 || K % 256)
		return "k_qgemv_sk lost: K fits one staged chunk (<= 8192) or is not whole blocks";
	if (f->store || f->glu >= 0)
		return "k_qgemv_sk lost: the group stores its prologue or has the GLU epilogue";
	if (qsk_smem(qt, K, QSK_NWARP, QSK_SLOTS) > qsk_smem_max(s->t->smem_block))
		return "k_qgemv_sk lost: its shared memory exceeds the target's block";
	if (gemv_tiles(s->g, f) * (K / 256) < (int64_t)s->t->sms * QSK_NWARP)
		return "k_qgemv_sk lost: too few items to fill a wave of warps";
	return NULL;
}

/* Whether a group of Q4_K, of Q6_K or of Q8_0 members can take k_qgemv_tc for its 2..8-token steps: bf16
** activations, K a multiple of 256, a norm (formed late, and stored when other nodes read it) or a SwiGLU
** or no prologue. */
static int qtc_fits(const Sx *s, const FuseKernel *f, int64_t K)
{
	return s->g->cuda.act == DT_BF16 && K % 256 == 0 &&
	       (f->pro == GP_NONE || f->pro == GP_RMSNORM || f->pro == GP_SWIGLU);
}

/* A block type k_qgemv_tc takes. */
static int qtc_type(int qt)
{
	return qt == QT_Q4_K || qt == QT_Q6_K || qt == QT_Q8_0;
}

/* Whether a group's 2..8-token step may run as two launches: k_qgemv_tc over its members of one block type
** (Q4_K, Q6_K or Q8_0) with the norm formed late and stored, then k_qgemv_fused's loop over the float
** members (a router GGUF keeps in f32, beside the shared expert's gate and up) reading that stored norm.
** One k_qgemv_fused launch over them all runs every member through its 8-rows-a-pass loop: GLM-5's norm +
** router + shared gate/up took 115 µs a layer at 4 tokens against 21 at one (bench/NOTES.md 44, 47). */
static int qtc_split_fits(const Sx *s, const FuseKernel *f, const int *qt, int64_t K)
{
	if (f->pro != GP_RMSNORM || !f->store || f->res >= 0 || f->glu >= 0 || !qtc_fits(s, f, K))
		return 0;
	int q = -1, ntc = 0;
	for (int m = 0; m < f->nm; m++)
		if (qtc_type(qt[m])) {
			if (q >= 0 && qt[m] != q)
				return 0;
			q = qt[m], ntc++;
		} else if (qt[m] != QT_F32 && qt[m] != QT_F16 && qt[m] != QT_BF16)
			return 0;
	return ntc > 0 && ntc < f->nm;
}

/* Split group f (qtc_split_fits) into its block members and its float members, as select and emit both
** need it: the records say which half a launch takes (KSel.sub), emit rebuilds the halves here. */
void select_split_group(const FuseKernel *f, const int *qt, FuseKernel *a, FuseKernel *b, int *qb)
{
	*a = *f, *b = *f;
	a->nm = b->nm = 0;
	for (int m = 0; m < f->nm; m++) {
		FuseKernel *d = qtc_type(qt[m]) ? a : b;
		if (d == b)
			qb[b->nm] = qt[m];
		d->m[d->nm] = f->m[m], d->out[d->nm] = f->out[m], d->nm++;
	}
	for (int m = b->nm; m < FK_MAXM; m++)
		qb[m] = qb[0];
	b->pro = GP_NONE, b->store = 0; /* x is the norm node: its rows as the first launch stored them */
}

/* Append a record (arena copies), with `why` formatted. */
static KSel *sel_add(Sx *s, const KSel *k, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static KSel *sel_add(Sx *s, const KSel *k, const char *fmt, ...)
{
	Graph *g = s->g;
	if (g->nsel == g->selcap) {
		int cap = g->selcap ? g->selcap * 2 : 64;
		KSel *n = arena_alloc(g->A, sizeof *n * (size_t)cap);
		if (g->nsel)
			memcpy(n, g->sel, sizeof *n * (size_t)g->nsel);
		g->sel = n, g->selcap = cap;
	}
	char why[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	KSel *r = &g->sel[g->nsel++];
	*r = *k;
	if (r->fk >= 0)
		r->node = g->fk[r->fk].host;
	r->why = arena_strdup(g->A, why);
	return r;
}

/* A fresh record of group fk for steps tmin..tmax. */
static KSel sel_new(int fk, int kern, int tmin, int tmax)
{
	return (KSel){.fk = fk, .kern = kern, .tmin = tmin, .tmax = tmax, .pro = GP_NONE};
}

/* Float groups, one token: k_gemv_fused in ops/gemv_shape.h's shape for its form; a norm's scale after
** the dots (GP_RMSLATE), so its blocks start on their weights at once. */
static void sel_float1(Sx *s, int k)
{
	const Graph *g = s->g;
	const FuseKernel *f = &g->fk[k];
	int64_t K = group_k(g, f), Ntot = group_rows(g, f);
	int wsize = (int)dtype_size(g->node[mw(g, f, 0)].dtype);
	KSel r = sel_new(k, SK_GEMV_FUSED, 1, 1);
	const char *shape = "gemv_shape_h";
	if (f->pro == GP_NONE && f->glu < 0 && f->res >= 0) /* o and down projections */
		gemv_shape_plain1(K, Ntot, wsize, s->t->sms, &r.block, &r.rb),
		        shape = "gemv_shape_plain1 (a projection into the residual)";
	else if (f->pro == GP_RMSNORM && f->glu < 0) /* q/k/v: the late norm */
		gemv_shape_late1(K, Ntot, wsize, s->t->sms, &r.block, &r.rb), shape = "gemv_shape_late1 (a norm read late)";
	else
		gemv_shape_h(K, Ntot, wsize, s->t->sms, &r.block, &r.rb);
	if (f->glu >= 0 && r.rb < 2)
		r.rb = 2; /* a block takes gate and up columns in pairs */
	r.pro = f->pro == GP_RMSNORM ? GP_RMSLATE : f->pro;
	r.tr = 1;
	r.grid = gemv_grid_h(Ntot, r.rb, r.block, r.pro != GP_NONE && r.pro != GP_RMSLATE, s->t->sms);
	r.minb = gemv_min_blocks1(r.block, r.rb, r.grid, s->t->sms);
	sel_add(s, &r, "float weights of one type: the FMA GEMV, %s", shape);
}

/* Float groups, 2..tmax tokens: k_gemv_tc (one token tile to 8, two to 16) when it fits, else k_gemv_fused
** staging 8 rows. */
static void sel_float8(Sx *s, int k)
{
	const Graph *g = s->g;
	const FuseKernel *f = &g->fk[k];
	int64_t K = group_k(g, f), Ntot = group_rows(g, f);
	const char *lost = gemv_tc_lost(s, f, K);
	if (!lost) {
		KSel r = sel_new(k, SK_GEMV_TC, 2, 0);
		/* a GLU group's Ntot: its gate and up rows */
		gemv_shape_tc(Ntot, K, s->t->sms, &r.mt, &r.uc, &r.block, &r.grid);
		r.pro = f->pro == GP_RMSNORM ? GP_RMSLATE : GP_NONE;
		for (r.nt = 1; r.nt <= 2; r.nt++) {
			r.tmin = r.nt == 1 ? 2 : 9;
			r.tmax = r.nt == 1 ? (f->tmax < 8 ? f->tmax : 8) : f->tmax;
			if (r.tmin > r.tmax)
				break;
			sel_add(s, &r, "bf16 weights and activations: the tensor-core GEMV, %d token tile%s", r.nt,
			        r.nt > 1 ? "s" : "");
		}
		return;
	}
	GLM_ASSERT(f->tmax <= 8); /* fuse.c gemv_tc16 gives 16 only to k_gemv_tc's groups */
	KSel r = sel_new(k, SK_GEMV_FUSED, 2, f->tmax);
	gemv_shape_h(K, Ntot, (int)dtype_size(g->node[mw(g, f, 0)].dtype), s->t->sms, &r.block, &r.rb);
	if (f->glu >= 0 && r.rb < 2)
		r.rb = 2;
	r.pro = f->pro;
	r.tr = 8;
	r.grid = gemv_grid_h(Ntot, r.rb, r.block, r.pro != GP_NONE && r.pro != GP_RMSLATE, s->t->sms);
	sel_add(s, &r, "%s; the FMA GEMV staging 8 rows", lost);
}

/* k_qgemv_fused over group f's members (types qt) for one token (tm 1: K split as k_qgemv chooses it for
** the group's rows, the prologue and epilogue as template values, a norm's scale after the dots) or
** 2..tmax (tm 8: run-time prologue and epilogue, one out-of-line body per type tuple). */
static KSel sel_qfused_rec(const Sx *s, int k, const FuseKernel *f, const int *qt, int tm)
{
	const Graph *g = s->g;
	int64_t K = group_k(g, f), Ntot = group_rows(g, f), nb = 0;
	KSel r = sel_new(k, SK_QGEMV_FUSED, tm == 1 ? 1 : 2, tm == 1 ? 1 : f->tmax);
	memcpy(r.qt, qt, sizeof r.qt);
	gemv_splits(qt, f->nm, tm == 1 ? q_wpr(Ntot, K) : 1, r.split);
	for (int m = 0; m < f->nm; m++)
		nb += (mrows(g, f, m) + 16 / r.split[m] - 1) / (16 / r.split[m]);
	long long cap = q_grid_cap(s->t->sms);
	r.grid = tm == 1 && K <= 8192 && nb > cap ? cap : nb;
	r.pro = tm == 1 && f->pro == GP_RMSNORM ? GP_RMSLATE : tm == 1 ? f->pro : -1;
	r.tr = tm, r.block = 256;
	return r;
}

/* Quantized or mixed groups, one token: k_qgemv_sk, k_qgemv_fused_mma (every member Q4_K, or every member
** Q6_K; not Q8_0: its int8 tensor-core kernel lost to the FMA loop in every plan measured, its 128-row
** blocks leaving the grids too small, bench/NOTES.md entry 42), else k_qgemv_fused. */
static void sel_quant1(Sx *s, int k, const int *qt, int allq, const char *notq)
{
	const Graph *g = s->g;
	const FuseKernel *f = &g->fk[k];
	int64_t K = group_k(g, f), Ntot = group_rows(g, f);
	const char *lost = allq ? qsk_lost(s, f, qt[0], K) : NULL;
	if (allq && !lost) {
		KSel r = sel_new(k, SK_QGEMV_SK, 1, 1);
		r.qt[0] = qt[0];
		int64_t tiles = gemv_tiles(g, f);
		r.smem = qsk_smem(qt[0], K, QSK_NWARP, QSK_SLOTS);
		qsk_grid(tiles, K, QSK_NWARP, (long long)s->t->sms * qsk_bps(r.smem, s->t->smem_sm), &r.grid, &r.maxseg);
		r.block = 32 * QSK_NWARP, r.minb = 2, r.pro = GP_SWIGLU, r.tiles = tiles;
		sel_add(s, &r, "a SwiGLU over K %lld > 8192: the stream kernel stages it once a block", (long long)K);
		return;
	}
	if (allq) {
		KSel r = sel_new(k, SK_QGEMV_FUSED_MMA, 1, 1);
		int wpr = qm_wpr(Ntot, K);
		int64_t nb = 0;
		for (int m = 0; m < f->nm; m++)
			r.split[m] = wpr;
		for (int m = 0; m < f->nm; m++)
			nb += (mrows(g, f, m) + 128 / wpr - 1) / (128 / wpr);
		long long cap = qm_grid_cap(s->t->sms);
		r.grid = K <= 8192 && nb > cap ? cap : nb;
		r.qt[0] = qt[0], r.block = 256;
		/* a norm over Q4_K: its scale after the dots, x·nw staged at once. Not Q6_K: its ring, asked for
		** before the staging, spills (bench/NOTES.md entry 21) */
		r.pro = f->pro == GP_RMSNORM && K <= 8192 && qt[0] == QT_Q4_K ? GP_RMSLATE : f->pro;
		sel_add(s, &r, "every member %s: the tensor-core GEMV (%s)", quant_type_name(qt[0]), lost);
		return;
	}
	KSel r = sel_qfused_rec(s, k, f, qt, 1);
	sel_add(s, &r, "%s: the per-member-type FMA GEMV", notq);
}

/* Quantized or mixed groups, 2..tmax tokens: k_qgemv_tc over one block type (one set of 8 token columns,
** or with a norm weight, x·nw formed in two pieces of 4 tokens, one set for 2..4 and two for 5..8), the
** split (block members on k_qgemv_tc, then the float ones on k_qgemv_fused), else k_qgemv_fused. */
static void sel_quant8(Sx *s, int k, const int *qt, int alltc, int has_nw)
{
	const Graph *g = s->g;
	const FuseKernel *f = &g->fk[k], *tcg = f;
	int64_t K = group_k(g, f);
	FuseKernel a, b;
	int qb[FK_MAXM], split = 0;
	if (!(alltc && qtc_fits(s, f, K))) {
		if (!qtc_split_fits(s, f, qt, K)) {
			KSel r = sel_qfused_rec(s, k, f, qt, 8);
			sel_add(s, &r, "k_qgemv_tc lost: %s; the per-member-type FMA GEMV staging 8 rows",
			        !alltc ? "the members are not all of one of Q4_K, Q6_K, Q8_0, nor split cleanly from float ones"
			               : "activations are not bf16, K is not whole blocks, or the prologue is not a norm or SwiGLU");
			return;
		}
		select_split_group(f, qt, &a, &b, qb);
		tcg = &a, split = 1;
	}
	int tmax = tcg->tmax < 8 ? tcg->tmax : 8, pro = tcg->pro == GP_RMSNORM ? GP_RMSLATE : tcg->pro;
	int parts = pro == GP_RMSLATE && has_nw && tmax > 4;
	int64_t Ntot = group_rows(g, tcg);
	for (int part = 0; part <= parts; part++) {
		KSel r = sel_new(k, SK_QGEMV_TC, part ? 5 : 2, parts && !part ? 4 : tmax);
		r.sub = split ? 1 : 0;
		r.qt[0] = select_wtype(g, s->wq, mw(g, tcg, 0));
		r.pro = pro, r.ncs = part + 1;
		gemv_shape_qtc(Ntot, K, &r.mt, &r.uc, &r.block, &r.grid);
		sel_add(s, &r, "%s members of one block type, bf16 activations: the tensor-core GEMV, %d set%s of 8 token "
		        "columns", split ? "the block" : "all", r.ncs, r.ncs > 1 ? "s" : "");
	}
	if (split) {
		KSel r = sel_qfused_rec(s, k, &b, qb, 8);
		r.sub = 2;
		sel_add(s, &r, "the float members after the block ones: the FMA GEMV reading the stored norm");
	}
}

/*
** ---- A linear's own kernels ----
*/

/* Rows per token of a linear's input: its static extent apart from T, over K. */
static int64_t rows_per_token(const Node *x)
{
	int64_t r = 1;
	for (int i = 0; i < x->ndim - 1; i++)
		r *= x->dim[i] == DIM_T ? 1 : x->dim[i];
	return r;
}

/* Whether a node's shape has the step's token dim. */
static int has_t(const Node *n)
{
	for (int i = 0; i < n->ndim; i++)
		if (n->dim[i] == DIM_T)
			return 1;
	return 0;
}

/* The decode GEMV's step limit of a linear: 8 token rows in all (x's rows a token times the tokens); a
** linear whose x has no T dim runs its GEMV for every step when it has at most 8 rows. */
static int64_t linear_tmax_gemv(const Graph *g, int x)
{
	int64_t rpt = rows_per_token(&g->node[x]);
	return has_t(&g->node[x]) ? 8 / rpt : (rpt <= 8 ? 1 << 30 : 0);
}

/* A record of linear id's own launch. */
static KSel sel_own(int id, int kern, int64_t tmin, int64_t tmax)
{
	return (KSel){.fk = -1, .node = id, .kern = kern, .tmin = (int)tmin, .tmax = (int)(tmax > (1 << 30) ? 1 << 30 : tmax),
	              .pro = GP_NONE};
}

/* A float linear: the GEMV for one token (TR 1), the GEMV for 2..tmax_gemv (TR 8), the tiled GEMM above:
** on the tensor cores (k_gemm_tc) when activations and weight are bf16 and K takes 16-byte rows, else on
** the CUDA cores (k_linear_gemm, which f32 plans keep: a bf16 product cannot meet their 1e-4). */
static void sel_linear_float(Sx *s, int id)
{
	const Graph *g = s->g;
	int x = g->node[id].in[0], wt = g->node[id].in[1], ht = has_t(&g->node[x]);
	int64_t K = g->node[wt].dim[1], N = g->node[wt].dim[0], tg = linear_tmax_gemv(g, x);
	for (int v = 0; v < 2; v++) {
		if (tg < 1 || (v == 1 && (tg < 2 || !ht)))
			continue;
		KSel r = sel_own(id, SK_LINEAR_GEMV, v == 0 ? 1 : 2, v == 0 && ht ? 1 : tg);
		gemv_shape_h(K, N, (int)dtype_size(g->node[wt].dtype), s->t->sms, &r.block, &r.rb);
		r.grid = (N + r.rb - 1) / r.rb;
		r.tr = v == 0 && ht ? 1 : 8;
		sel_add(s, &r, "the FMA GEMV, %d token row%s", r.tr, r.tr > 1 ? "s" : "");
	}
	if (tg < (1 << 30) && g->cuda.act == DT_BF16 && cuda_wdtype(g, wt) == DT_BF16 && K % 8 == 0) {
		KSel r = sel_own(id, SK_GEMM_TC, tg < 1 ? 1 : tg + 1, 1 << 30);
		r.grid = (N + 127) / 128, r.block = 256;
		sel_add(s, &r, "past the GEMV's 8 token rows, bf16: the tensor-core GEMM");
	} else if (tg < (1 << 30)) {
		KSel r = sel_own(id, SK_LINEAR_GEMM, tg < 1 ? 1 : tg + 1, 1 << 30);
		r.grid = (N + 63) / 64, r.block = 256;
		sel_add(s, &r, g->cuda.act == DT_BF16 ? "past the GEMV's 8 token rows: the tiled GEMM (not bf16 x bf16 with K %% 8 == 0)"
		                                      : "past the GEMV's 8 token rows: the tiled GEMM (f32 plan)");
	}
}

/* A linear over a resident weight: k_qgemv for decode (TM 1 when the step has one row, TM 8 for up to 8;
** one token over Q4_K or Q6_K: k_qgemv_mma, not Q8_0, whose int8 tensor-core kernel lost to the FMA loop,
** bench/NOTES.md entry 42), k_qgemv_tc for 2..16 tokens over Q4_K, Q6_K or Q8_0 with bf16 activations (one
** set of 8 B columns up to 8 tokens, two up to 16), k_qlinear_gemm for longer steps. */
static void sel_linear_quant(Sx *s, int id)
{
	const Graph *g = s->g;
	const Node *n = &g->node[id], *xs = &g->node[n->in[0]];
	int x = n->in[0], wt = n->in[1], qt = s->wq[wt], ht = has_t(xs);
	int64_t K = g->node[wt].dim[1], N = g->node[wt].dim[0], rpt = rows_per_token(xs), tg = linear_tmax_gemv(g, x);
	int tmax = (int)(tg > (1 << 30) ? 1 << 30 : tg), swiglu = xs->fuse_pattern == FUSE_SWIGLU_GEMV && xs->fused_into == id;
	int tc = (qt == QT_Q4_K || qt == QT_Q6_K || qt == QT_Q8_0) && g->cuda.act == DT_BF16 && K % 256 == 0 && rpt == 1 && ht;
	if (tc)
		tg = 16;
	for (int tm = 1; tm <= 8 && tmax >= 1; tm += 7) {
		if (tm == 8 && tc) {
			for (int ncs = 1; ncs <= 2; ncs++) {
				KSel r = sel_own(id, SK_QGEMV_TC, ncs == 1 ? 2 : 9, 8 * ncs);
				r.qt[0] = qt, r.pro = swiglu ? GP_SWIGLU : GP_NONE, r.ncs = ncs;
				gemv_shape_qtc(N, K, &r.mt, &r.uc, &r.block, &r.grid);
				sel_add(s, &r, "bf16 activations over %s: the tensor-core GEMV, %d set%s of 8 token columns",
				        quant_type_name(qt), ncs, ncs > 1 ? "s" : "");
			}
			continue;
		}
		int lo = 1, hi = tmax;
		if (rpt == 1 && ht)
			lo = tm == 1 ? 1 : 2, hi = tm == 1 ? 1 : tmax;
		else if ((rpt == 1) != (tm == 1))
			continue;
		if (lo > hi)
			continue;
		KSel r = sel_own(id, SK_QGEMV, lo, hi);
		r.qt[0] = qt, r.tr = tm, r.block = 256, r.pro = swiglu ? GP_SWIGLU : GP_NONE;
		if (tm == 1 && (qt == QT_Q4_K || qt == QT_Q6_K)) {
			r.kern = SK_QGEMV_MMA;
			r.split[0] = qm_wpr(N, K);
			int64_t nrg = (N + 128 / r.split[0] - 1) / (128 / r.split[0]), cap = qm_grid_cap(s->t->sms);
			r.grid = K <= 8192 && nrg > cap ? cap : nrg;
			sel_add(s, &r, "one token over %s: the tensor-core GEMV", quant_type_name(qt));
			continue;
		}
		r.split[0] = tm == 1 ? q_wpr(N, K) : 1;
		int64_t nrg = (N + 16 / r.split[0] - 1) / (16 / r.split[0]), cap = q_grid_cap(s->t->sms);
		r.grid = tm == 1 && K <= 8192 && nrg > cap ? cap : nrg;
		sel_add(s, &r, "%s: the FMA GEMV, %d token row%s", tm == 1 && qt == QT_Q8_0 ? "one token over Q8_0 (its "
		        "tensor-core kernel lost, bench/NOTES.md 42)" : tm == 1 ? "one token" : "k_qgemv_tc lost (activations "
		        "not bf16, K not whole 256-blocks, or not one row a token)", tm, tm > 1 ? "s" : "");
	}
	if (tg < (1 << 30)) {
		KSel r = sel_own(id, SK_QLINEAR_GEMM, tg < 1 ? 1 : tg + 1, 1 << 30);
		r.qt[0] = qt, r.grid = (N + 63) / 64, r.block = 256;
		sel_add(s, &r, "past the GEMVs' steps: the tiled GEMM over blocks");
	}
}

/* One FK_GEMV group's records, in launch order: the one-token kernel, then the 2..tmax one(s). */
static void sel_group(Sx *s, int k)
{
	const Graph *g = s->g;
	const FuseKernel *f = &g->fk[k];
	if (!gemv_mixed(s, f)) {
		sel_float1(s, k);
		if (f->tmax >= 2)
			sel_float8(s, k);
		return;
	}
	GLM_ASSERT(f->glu < 0); /* fuse.c gives the GLU epilogue float weights only */
	int qt[FK_MAXM], one = 1;
	for (int m = 0; m < FK_MAXM; m++)
		qt[m] = select_wtype(g, s->wq, mw(g, f, m < f->nm ? m : 0));
	for (int m = 0; m < f->nm; m++)
		one &= qt[m] == qt[0];
	int allq = one && (qt[0] == QT_Q4_K || qt[0] == QT_Q6_K), alltc = allq || (one && qt[0] == QT_Q8_0);
	int x = g->node[f->m[0]].in[0], has_nw = f->pro == GP_RMSNORM && g->node[x].nin > 1;
	sel_quant1(s, k, qt, allq,
	           !one ? "members of different types" : qt[0] == QT_Q8_0 ? "Q8_0 members (its tensor-core kernel lost, "
	           "bench/NOTES.md 42)" : "members of a type without a tensor-core GEMV");
	if (f->tmax >= 2)
		sel_quant8(s, k, qt, alltc, has_nw);
}

/* A down projection that may take the tensor-core kernels: Q4_K or Q6_K blocks (or absent, w < 0). */
static int mma_type(const Sx *s, int w)
{
	return w < 0 || s->wq[w] == QT_Q4_K || s->wq[w] == QT_Q6_K;
}

/* The experts' down projections of a FK_MOE_DOWN (with the shared expert's and the adds), for its steps:
** k_qmoe_down_mma when both down projections stay in Q4_K or Q6_K blocks and their hidden widths fit one
** staged chunk (8192), split over G experts a block (qm_moe_group); k_qmoe_down_fused when either stays in
** blocks; else k_moe_down_fused. */
static void sel_moe_down(Sx *s, int k)
{
	const Graph *g = s->g;
	const FuseKernel *f = &g->fk[k];
	const Node *n = &g->node[f->m[0]];
	int x = n->in[0], ids = n->in[1], ga = n->in[3], dn = n->in[5], S = f->moe_down.sdown;
	int64_t C = g->node[x].dim[1], Fd = g->node[ga].dim[1], K = g->node[ids].dim[1];
	int sd = S >= 0 ? g->node[S].in[1] : -1, q = s->wq[dn] >= 0 || (sd >= 0 && s->wq[sd] >= 0);
	int64_t Fs = S >= 0 ? g->node[f->moe_down.sswiglu].dim[1] : 0;
	int mma = q && mma_type(s, dn) && mma_type(s, sd) && Fd <= 8192 && Fs <= 8192;
	KSel r = sel_new(k, mma ? SK_QMOE_DOWN_MMA : q ? SK_QMOE_DOWN_FUSED : SK_MOE_DOWN_FUSED, 1, f->tmax);
	r.qt[0] = select_wtype(g, s->wq, dn), r.qt[1] = sd >= 0 ? select_wtype(g, s->wq, sd) : r.qt[0];
	r.split[0] = mma ? qm_moe_group(C, (int)K, Fd, S >= 0, s->t->sms) : 1;
	r.block = 256;
	if (mma)
		sel_add(s, &r, "down projections in Q4_K/Q6_K blocks, hidden widths <= 8192: the tensor-core kernel, %d "
		        "experts a block", r.split[0]);
	else if (q)
		sel_add(s, &r, "a down projection in blocks; k_qmoe_down_mma lost: %s", !mma_type(s, dn) || !mma_type(s, sd)
		        ? "a down projection is not Q4_K or Q6_K" : "a hidden width exceeds one staged chunk (8192)");
	else
		sel_add(s, &r, "float down projections: the FMA kernel");
}

/* The pass: residency first (the kernels depend on it), then the linears' own kernels in node order, then
** the groups in g->fk order (emit_cuda finds each one's records from its first). */
int select_kernels(Graph *g, const Target *t, int *wq)
{
	q_choose(g, wq);
	Sx s = {.g = g, .t = t, .wq = wq};
	g->nsel = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].op == OP_LINEAR)
			(wq[g->node[i].in[1]] >= 0 ? sel_linear_quant : sel_linear_float)(&s, i);
	for (int k = 0; k < g->nfk; k++)
		if (g->fk[k].kind == FK_GEMV && g->fk[k].nm > 0)
			sel_group(&s, k);
		else if (g->fk[k].kind == FK_MOE_DOWN)
			sel_moe_down(&s, k);
	return 0;
}

static const char *sk_name[SK_NKINDS] = {"k_gemv_fused", "k_gemv_tc", "k_qgemv_fused", "k_qgemv_fused_mma", "k_qgemv_sk",
                                         "k_qgemv_tc", "k_linear_gemv", "k_linear_gemm", "k_qgemv", "k_qgemv_mma",
                                         "k_qlinear_gemm", "k_gemm_tc", "k_moe_down_fused", "k_qmoe_down_fused", "k_qmoe_down_mma"};

/* The fewest tokens a step must have for node id's own kernels to run: a fused kernel covering it serves
** the smaller steps (emit_cuda.c fk_prepare applies the same rule to the launches). */
static int own_tmin(const Graph *g, int id)
{
	int t = 1;
	for (int k = 0; k < g->nfk; k++)
		for (int c = 0; c < g->fk[k].ncover; c++)
			if (g->fk[k].cover[c] == id && t < g->fk[k].tmax + 1)
				t = g->fk[k].tmax + 1;
	return t;
}

/* One record's line: where, the steps, the kernel, its parameters, why. */
static void explain_one(const Graph *g, const KSel *r, int tmin, FILE *f)
{
	static const char *pro[] = {"run-time", "none", "norm", "swiglu", "norm-late"};
	char ms[96] = "";
	if (r->fk >= 0)
		for (int m = 0; m < g->fk[r->fk].nm; m++)
			snprintf(ms + strlen(ms), sizeof ms - strlen(ms), "%s%%%d", m ? "," : "", g->fk[r->fk].m[m]);
	if (r->fk >= 0 && g->fk[r->fk].kind == FK_MOE_DOWN)
		fprintf(f, "  moe_ffn %%%d's down projections", g->fk[r->fk].m[0]);
	else if (r->fk >= 0)
		fprintf(f, "  gemv group [%s]%s", ms, r->sub == 1 ? " (block members)" : r->sub == 2 ? " (float members)" : "");
	else
		fprintf(f, "  linear %%%d (%s:%d)", r->node, g->node[r->node].src ? g->node[r->node].src : "?", g->node[r->node].line);
	if (r->tmax >= 1 << 30)
		fprintf(f, " T %d..: %s", tmin, sk_name[r->kern]);
	else
		fprintf(f, " T %d..%d: %s", tmin, r->tmax, sk_name[r->kern]);
	if (r->kern != SK_LINEAR_GEMM && r->kern != SK_QLINEAR_GEMM && r->kern != SK_GEMM_TC && r->kern < SK_MOE_DOWN_FUSED)
		fprintf(f, " prologue %s", r->pro >= -1 && r->pro <= GP_RMSLATE ? pro[r->pro + 1] : "?");
	if (r->kern == SK_GEMV_FUSED || r->kern == SK_LINEAR_GEMV)
		fprintf(f, " rb %d tr %d", r->rb, r->tr);
	else if (r->kern == SK_GEMV_TC || r->kern == SK_QGEMV_TC)
		fprintf(f, " mt %d uc %d %s %d", r->mt, r->uc, r->kern == SK_GEMV_TC ? "nt" : "ncs",
		        r->kern == SK_GEMV_TC ? r->nt : r->ncs);
	else if (r->kern == SK_QGEMV_SK)
		fprintf(f, " smem %lld maxseg %d", r->smem, r->maxseg);
	else if (r->kern == SK_QGEMV || r->kern == SK_QGEMV_MMA)
		fprintf(f, " tm %d wpr %d", r->tr, r->split[0]);
	else if (r->kern == SK_QMOE_DOWN_MMA)
		fprintf(f, " experts a block %d", r->split[0]);
	else if (r->kern >= SK_MOE_DOWN_FUSED)
		;
	else if (r->kern != SK_LINEAR_GEMM && r->kern != SK_QLINEAR_GEMM && r->kern != SK_GEMM_TC)
		for (int m = 0; m < FK_MAXM && r->split[m] > 0; m++) /* set for the launch's members only */
			fprintf(f, "%s%d", m ? "," : " split ", r->split[m]);
	if (r->grid) /* the MoE kernels' grids follow the experts and the step, not a choice */
		fprintf(f, " block %d grid %lld%s", r->block, r->grid,
		        r->kern == SK_LINEAR_GEMM || r->kern == SK_QLINEAR_GEMM || r->kern == SK_GEMM_TC ? " x token tiles" : "");
	fprintf(f, ": %s\n", r->why);
}

/* glmc explain: every record with the steps its launch really serves. */
void select_explain(const Graph *g, const Target *t, FILE *f)
{
	fprintf(f, "kernel selection for %s (%d SMs, %d bytes of shared memory a block, tensor cores gen %d):\n", t->arch,
	        t->sms, t->smem_block, t->tc_gen);
	int dropped = 0;
	for (int i = 0; i < g->nsel; i++) {
		const KSel *r = &g->sel[i];
		int tmin = r->tmin;
		if (r->fk < 0 && own_tmin(g, r->node) > tmin)
			tmin = own_tmin(g, r->node);
		if (tmin > r->tmax)
			dropped++;
		else
			explain_one(g, r, tmin, f);
	}
	if (dropped)
		fprintf(f, "  (%d launches of linears left out: their decode GEMV group serves those steps)\n", dropped);
	if (!g->nsel)
		fprintf(f, "  no linears\n");
}
