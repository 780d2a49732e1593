/*
** sched.c — what a persistent decode schedule must satisfy, and the proof that it does.
**
** A decode step on the GPU is a list of launches that the stream runs one after another: launch j starts
** when launch j - 1 has finished, so everything j reads was written before, and nothing j writes is still
** to be read by an earlier launch. Each launch pays a ramp and a tail (bench/NOTES.md: about 2.2 µs), and
** a Flash step has 471 of them. A persistent kernel keeps one set of blocks ("workers") resident for the
** whole step and gives each a list of tasks, a task being a range of one launch's blocks; the stream's
** order is replaced by counters: launch i's tasks count themselves done, and a task of launch j waits for
** the launches it must follow. The schedule is static (the compiler knows the launches, their grids and
** the memory plan), so its safety can be proved once, here, before any GPU runs it.
**
** What must follow what. Two launches conflict when one writes memory the other reads or writes: after
** the memory plan's reuse, an activation's bytes are another's later (memplan.c), so conflicts are taken
** on bytes, not on values. Each launch's footprint is its buffer arguments (KA_BUF: activations by their
** arena range, per token in the token region; caches and other non-arena buffers as a whole), the shared
** scratch buffer (KA_SCRATCH: consecutive launches of one node pass data through it, so every user
** writes all of it) and the zeroed counters (KA_ZERO: every user writes them). Weights, rope tables,
** tokens and positions are read-only during a step and never conflict. Within one launch the blocks are
** independent, as CUDA promises nothing about their order; kernels that count their own finished blocks
** (k_mla_split) still work, as every block of a launch runs exactly once.
**
** The safety conditions (sched_check):
**   1. every block of every launch used at T belongs to exactly one task, and unused launches have none;
**   2. every worker's list is in launch order (nondecreasing index);
**   3. a launch waits only for earlier launches;
**   4. for every conflicting pair i < j, i is among the launches j waits for, directly or through a chain
**      of waits (i before k, k before j): when j's first task starts, i has finished.
** Condition 4 gives the stream's order for every pair that can tell. Conditions 2 and 3 exclude deadlock
** when all workers are resident at once (the runtime checks occupancy before it launches): take the
** lowest launch j with a task unfinished; every launch it waits for is lower, hence finished, so the
** tasks of j are ready; the worker holding the first unfinished task of j has finished everything before
** it on its list (lower launches by the choice of j, earlier tasks of j are ready too and run in list
** order), so it can run it. Some worker can always move, under any interleaving, until all is done.
** sched_simulate checks the same properties by running interleavings, from the waits alone.
**
** Collectives. A tensor-parallel step has allreduces and allgathers between its kernels. With the one-shot
** P2P exchange (glmrun's, through peer memory) they are tasks like the others: an allreduce that the next
** launch may do itself (Launch.inside_next, k_add_rmsnorm_ar) has no tasks, its next launch reading its
** source; any other collective runs as sched_coll_blocks(bytes) blocks of k_p2p_allreduce or
** k_p2p_allgather, each waiting inside its task for the same block of every other rank. Every user of the
** P2P mailbox writes one more region (ACC_P2P), so the waits order the exchanges as the stream would, which
** their shared epoch needs (kernels.cuh). The deadlock argument extends across ranks because every rank
** runs the same schedule: a task spinning on a peer's block waits for the task at the same place in the
** same worker's list there, and by induction on launches both get there. Where P2P cannot carry a
** collective (no peer access, GLMRUN_P2P_MAX=0, an integer allreduce, a message not in 16-byte units: such
** a collective has no tasks), glmrun falls back to one launch of the kernel per segment, the launches
** between two collectives (sched_segments), the collectives launched on the stream between them and their
** tasks emptied: the waits stay valid (more order, never less) and the deadlock argument holds for each
** segment's launch on its own.
*/
#include "glm.h"
#include "quant.h"

#include <stdlib.h>
#include <string.h>

/* One memory range a launch touches: region 0 the token arena (per-token bytes), 1 the static arena, 2 the
** scratch buffer, 3 the zeroed counters, 4 the P2P mailbox and its epoch, 5 + node a buffer of its own (a
** cache, an unplanned value). */
typedef struct {
	int64_t region, lo, hi;
	int write;
} Access;

enum { ACC_TOKEN, ACC_STATIC, ACC_SCRATCH, ACC_ZERO, ACC_P2P, ACC_NODE };

static int launch_used(const Graph *g, int i, int T)
{
	const Launch *l = &g->cuda.l[i];
	return launch_runs(l, T, T == 1);
}

const Sched *sched_for(const Cuda *c, int T)
{
	for (int i = 0; i < c->nsched; i++)
		if (c->sched[i].T == T)
			return &c->sched[i];
	return NULL;
}

int sched_lanes(int worker, int block, int64_t lane_bytes, int64_t budget)
{
	int k = block > 0 ? worker / block : 1;
	k = k < 1 ? 1 : k > SCHED_LANES_MAX ? SCHED_LANES_MAX : k;
	while (k > 1 && k * lane_bytes > budget)
		k--;
	return k;
}

void sched_lane_bytes(int64_t dyn_smem, int64_t static_smem, int64_t *own, int64_t *pool)
{
	*own = (dyn_smem + 127) / 128 * 128;
	*pool = (static_smem + 127) / 128 * 128 + 256;
}

int sched_lanes_ok(const Graph *g, int i)
{
	char buf[256];
	const char *t = g->cuda.l[i].kernel ? cuda_template(g, g->cuda.l[i].kernel, buf, sizeof buf) : NULL;
	return t && strncmp(t, "k_attn", 6) != 0;
}

int sched_segments(const Graph *g, int T, int *seg)
{
	int k = 0;
	for (int i = 0; i < g->cuda.nl; i++) {
		int coll = launch_used(g, i, T) && g->cuda.l[i].kind != LK_KERNEL;
		if (seg)
			seg[i] = k + coll; /* a collective counts with the segment after it: it waits for all before */
		k += coll;
	}
	return k + 1;
}

/* A launch argument's Size with T bound; *uses_s set when it depends on the cache size (unknown here). */
static int64_t size_at(const Graph *g, Size s, int T, int *uses_s)
{
	if (s.node < 0)
		return s.div;
	const Node *n = &g->node[s.node];
	int64_t p = 1;
	for (int k = s.lo; k < s.hi; k++) {
		if (n->dim[k] == DIM_S)
			*uses_s = 1;
		p *= n->dim[k] == DIM_T ? T : n->dim[k] == DIM_S ? 1 : n->dim[k];
	}
	return (p + s.div - 1) / s.div;
}

int64_t sched_coll_blocks(int64_t bytes)
{
	int64_t nb = (bytes / 16 + 511) / 512;
	return nb < 1 ? 1 : nb > SCHED_P2P_NBMAX ? SCHED_P2P_NBMAX : nb;
}

int64_t sched_coll_bytes(const Graph *g, int i, int T)
{
	const Launch *l = &g->cuda.l[i];
	int src = l->arg[1].s.node, uses_s = 0;
	size_t es = g->node[src].dtype == DT_I32 ? 4 : dtype_size(g->cuda.act == DT_BF16 ? DT_BF16 : DT_F32);
	return size_at(g, l->arg[2].s, T, &uses_s) * (int64_t)es;
}

int64_t sched_coll_max_bytes(const Graph *g, int T)
{
	const Sched *s = sched_for(&g->cuda, T);
	int64_t m = 0;
	for (int i = 0; s && i < g->cuda.nl; i++)
		if (s->ntask[i] && g->cuda.l[i].kind != LK_KERNEL && sched_coll_bytes(g, i, T) > m)
			m = sched_coll_bytes(g, i, T);
	return m;
}

int64_t sched_launch_blocks(const Graph *g, int i, int T, int *uses_s)
{
	*uses_s = 0;
	const Launch *l = &g->cuda.l[i];
	if (!launch_used(g, i, T))
		return 0;
	if (l->kind != LK_KERNEL) { /* a P2P task (the essay); none for what P2P cannot carry, or the next launch does */
		int64_t b = l->narg == 3 && l->arg[1].kind == KA_BUF ? sched_coll_bytes(g, i, T) : 0;
		int ints = l->kind == LK_ALLREDUCE && g->node[l->arg[1].s.node].dtype == DT_I32;
		return l->inside_next || ints || b < 16 || b % 16 ? 0 : sched_coll_blocks(b);
	}
	int64_t b = 1;
	for (int k = 0; k < 3; k++)
		b *= size_at(g, l->grid[k], T, uses_s);
	return b;
}

/* Launch i's footprint at T into acc (at most MAXKARG entries); returns the count. */
static int footprint(const Graph *g, int i, Access *acc)
{
	const Launch *l = &g->cuda.l[i];
	int n = 0;
	for (int k = 0; k < l->narg; k++) {
		const KArg *a = &l->arg[k];
		Access x = {0, 0, 1, 1};
		if (a->kind == KA_SCRATCH)
			x.region = ACC_SCRATCH;
		else if (a->kind == KA_ZERO)
			x.region = ACC_ZERO;
		else if (a->kind == KA_BUF) {
			int v = a->s.node;
			const Node *nd = &g->node[v];
			if (nd->kind == VK_WEIGHT)
				continue; /* read-only during a step */
			x.write = a->f != 0;
			if (nd->kind == VK_ACT)
				v = fuse_root(g, v), nd = &g->node[v];
			if (nd->kind == VK_ACT && g->mem.planned && nd->mem_region) {
				int region;
				int64_t bytes = memplan_value_bytes(nd, &region);
				x.region = region == MEM_TOKEN ? ACC_TOKEN : ACC_STATIC;
				x.lo = nd->mem_off, x.hi = nd->mem_off + bytes;
			} else
				x.region = ACC_NODE + v;
		} else if (a->kind == KA_P2P)
			x.region = ACC_P2P;
		else
			continue; /* rope tables, slots, ints, floats: read-only or values */
		acc[n++] = x;
	}
	if (l->kind != LK_KERNEL) /* a collective's task: the mailbox too */
		acc[n++] = (Access){ACC_P2P, 0, 1, 1};
	return n;
}

static int accesses_conflict(const Access *a, int na, const Access *b, int nb)
{
	for (int p = 0; p < na; p++)
		for (int q = 0; q < nb; q++)
			if (a[p].region == b[q].region && (a[p].write || b[q].write) && a[p].lo < b[q].hi && b[q].lo < a[p].hi)
				return 1;
	return 0;
}

int sched_conflicts(const Graph *g, int T, unsigned char *conf, char *err, size_t len)
{
	int nl = g->cuda.nl;
	Access *acc = malloc(sizeof(Access) * MAXKARG * (size_t)(nl ? nl : 1));
	int *na = calloc((size_t)(nl ? nl : 1), sizeof(int));
	if (!acc || !na) {
		free(acc), free(na);
		return seterr(err, len, "out of memory");
	}
	memset(conf, 0, (size_t)nl * (size_t)nl);
	int rc = 0;
	for (int i = 0; i < nl && !rc; i++) {
		const Launch *l = &g->cuda.l[i];
		if (!launch_used(g, i, T))
			continue;
		if (cuda_prefill_gemm(g, i))
			rc = seterr(err, len, "launch %d (%s of node %%%d) at T=%d may run through cuBLASLt: a persistent "
			            "kernel cannot hold it", i, launch_name(l), l->node, T);
		int uses_s;
		na[i] = sched_launch_blocks(g, i, T, &uses_s) > 0 ? footprint(g, i, acc + (size_t)i * MAXKARG) : 0;
	}
	for (int j = 0; j < nl && !rc; j++)
		for (int i = 0; i < j && na[j]; i++)
			if (na[i] &&
			    accesses_conflict(acc + (size_t)i * MAXKARG, na[i], acc + (size_t)j * MAXKARG, na[j]))
				conf[(size_t)i * nl + j] = 1;
	free(acc), free(na);
	return rc ? -1 : 0;
}

/* Bytes of weight node v on the GPU (w: its index in g->w): quantized rows as the device lays them out. */
static int64_t weight_bytes(const Graph *g, int v, int w)
{
	const Node *n = &g->node[v];
	int64_t numel = node_numel(n, 1, 1);
	if (g->cuda.wq && w >= 0 && g->cuda.wq[w] >= 0 && n->ndim > 0) {
		int64_t cols = n->dim[n->ndim - 1];
		return numel / cols * (int64_t)quant_dev_row_bytes(g->cuda.wq[w], cols);
	}
	return numel * (int64_t)dtype_size(cuda_wdtype(g, v));
}

/* Of weight v's first-axis rows, how many a step of T tokens reads: T of an embedding table, the experts
** T tokens pick of stacked experts (at most T · top-k), all of any other weight. */
static int64_t rows_read(const Graph *g, int v, int T)
{
	int64_t rows = g->node[v].ndim ? g->node[v].dim[0] : 1;
	for (int u = v + 1; u < g->n; u++) {
		const Node *n = &g->node[u];
		int64_t r = rows;
		if (n->op == OP_EMBEDDING && n->in[0] == v)
			r = T;
		else if (n->op == OP_MOE_FFN && g->node[v].ndim == 3)
			for (int k = 2; k < n->nin; k++)
				if (n->in[k] == v)
					r = (int64_t)T * g->node[n->in[1]].dim[g->node[n->in[1]].ndim - 1];
		if (r < rows)
			return r;
	}
	return rows;
}

int64_t sched_launch_bytes(const Graph *g, int i, int T)
{
	const Launch *l = &g->cuda.l[i];
	int64_t b = 0;
	size_t act = dtype_size(g->cuda.act == DT_BF16 ? DT_BF16 : DT_F32);
	for (int k = 0; k < l->narg; k++) {
		if (l->arg[k].kind != KA_BUF)
			continue;
		int v = l->arg[k].s.node;
		const Node *n = &g->node[v];
		if (n->kind == VK_WEIGHT) {
			int w = 0;
			for (int u = 0; u < v; u++)
				w += g->node[u].kind == VK_WEIGHT;
			b += weight_bytes(g, v, w) * rows_read(g, v, T) / (n->ndim ? n->dim[0] : 1);
		} else if (n->kind == VK_ACT) /* caches: how much a step reads depends on the position, not known here */
			b += node_numel(n, T, 1) * (int64_t)(n->dtype == DT_I32 ? 4 : act);
	}
	return b;
}

/* The launches each launch reaches through its waits (itself excluded), as nl bitsets of nl bits. */
static uint64_t *reach_sets(const Sched *s, int nl, size_t *words)
{
	size_t W = ((size_t)nl + 63) / 64;
	uint64_t *r = calloc((size_t)nl * W + 1, sizeof(uint64_t));
	if (!r)
		return NULL;
	for (int j = 0; j < nl; j++)
		for (int k = s->wait_off[j]; k < s->wait_off[j + 1]; k++) {
			int i = s->wait[k]; /* < j, checked first */
			r[(size_t)j * W + (size_t)i / 64] |= 1ull << (i % 64);
			for (size_t w = 0; w < W; w++)
				r[(size_t)j * W + w] |= r[(size_t)i * W + w];
		}
	*words = W;
	return r;
}

static int cmp_task_lo(const void *a, const void *b)
{
	const SchedTask *x = *(SchedTask *const *)a, *y = *(SchedTask *const *)b;
	return x->launch != y->launch ? (x->launch > y->launch) - (x->launch < y->launch)
	                              : (x->blo > y->blo) - (x->blo < y->blo);
}

/* Conditions 1-3 of the essay: coverage, and (ordered) list order and waits on earlier launches only;
** without `ordered`, what the simulation needs to run at all (waits name launches of the step). */
static int check_shape(const Graph *g, const Sched *s, int ordered, char *err, size_t len)
{
	int nl = g->cuda.nl;
	if (s->nl != nl || s->nworker < 1 || s->nworker != s->sms * s->per_sm || s->T < 1)
		return seterr(err, len, "schedule for T=%d: %d launches and %d workers (%d SMs x %d) do not match the plan's "
		              "%d launches", s->T, s->nl, s->nworker, s->sms, s->per_sm, nl);
	if (s->first[0] != 0 || s->first[s->nworker] != s->ntask_all)
		return seterr(err, len, "schedule for T=%d: worker lists do not cover its %d tasks", s->T, s->ntask_all);
	for (int i = 0; i < nl; i++) /* offsets first: the loops below index by them */
		if (s->wait_off[i + 1] < s->wait_off[i] || s->wait_off[0] != 0)
			return seterr(err, len, "schedule for T=%d: launch %d's wait list is malformed", s->T, i);
	for (int w = 0; w < s->nworker; w++)
		if (s->first[w + 1] < s->first[w])
			return seterr(err, len, "schedule for T=%d: worker %d's list is malformed", s->T, w);
	int64_t total = 0;
	for (int i = 0; i < nl; i++) {
		int us;
		int64_t b = sched_launch_blocks(g, i, s->T, &us);
		if (s->share[i] != us)
			return seterr(err, len, "schedule for T=%d: launch %d (%s) %s", s->T, i, launch_name(&g->cuda.l[i]),
			              us ? "has a grid sized by the cache, so its tasks must take shares" : "takes shares of a fixed grid");
		if (us && b > 0)
			b = s->ntask[i]; /* shares [0, k) */
		total += s->ntask[i];
		if ((b > 0) != (s->ntask[i] > 0))
			return seterr(err, len, "schedule for T=%d: launch %d (%s) has %d tasks for %lld blocks", s->T, i,
			              launch_name(&g->cuda.l[i]), s->ntask[i], (long long)b);
		if (b > 0 && g->cuda.l[i].block > s->block)
			return seterr(err, len, "schedule for T=%d: launch %d (%s) needs %d threads a block, workers have %d",
			              s->T, i, launch_name(&g->cuda.l[i]), g->cuda.l[i].block, s->block);
		for (int k = s->wait_off[i]; k < s->wait_off[i + 1]; k++)
			if (s->wait[k] < 0 || s->wait[k] >= (ordered ? i : nl) || !s->ntask[s->wait[k]] || !s->ntask[i])
				return seterr(err, len, "schedule for T=%d: launch %d waits for launch %d, which is not an earlier "
				              "launch of the step", s->T, i, s->wait[k]);
	}
	if (total != s->ntask_all)
		return seterr(err, len, "schedule for T=%d: the launches count %lld tasks, the lists hold %d", s->T,
		              (long long)total, s->ntask_all);
	for (int w = 0; w < s->nworker; w++) {
		for (int k = s->first[w]; k < s->first[w + 1]; k++) {
			const SchedTask *t = &s->task[k];
			if (t->launch < 0 || t->launch >= nl || !s->ntask[t->launch])
				return seterr(err, len, "schedule for T=%d: worker %d's task %d names launch %d, not one of the step",
				              s->T, w, k - s->first[w], t->launch);
			if (ordered && k > s->first[w] && t->launch < s->task[k - 1].launch)
				return seterr(err, len, "schedule for T=%d: worker %d runs launch %d after launch %d (lists must be in "
				              "launch order, or workers can wait for each other forever)", s->T, w, t->launch,
				              s->task[k - 1].launch);
		}
	}
	/* coverage: each launch's tasks, by first block, tile [0, blocks) */
	const SchedTask **by = malloc(sizeof *by * (size_t)(s->ntask_all ? s->ntask_all : 1));
	if (!by)
		return seterr(err, len, "out of memory");
	for (int k = 0; k < s->ntask_all; k++)
		by[k] = &s->task[k];
	qsort(by, (size_t)s->ntask_all, sizeof *by, cmp_task_lo);
	int rc = 0;
	for (int k = 0, i = 0; i < nl && !rc; i++) {
		int us;
		int64_t next = 0, b = sched_launch_blocks(g, i, s->T, &us);
		if (us && b > 0)
			b = s->ntask[i];
		int cnt = 0;
		for (; k < s->ntask_all && by[k]->launch == i; k++, cnt++) {
			if (by[k]->blo != next || by[k]->bhi <= by[k]->blo)
				rc = seterr(err, len, "schedule for T=%d: launch %d (%s): blocks [%lld, %d) %s", s->T, i,
				            launch_name(&g->cuda.l[i]), (long long)next, by[k]->blo,
				            by[k]->blo > next ? "belong to no task" : "run twice");
			next = by[k]->bhi;
			if (rc)
				break;
		}
		if (!rc && (next != b || cnt != s->ntask[i]))
			rc = seterr(err, len, "schedule for T=%d: launch %d (%s): tasks cover %lld of %lld blocks in %d tasks "
			            "(ntask %d)", s->T, i, launch_name(&g->cuda.l[i]), (long long)next, (long long)b, cnt,
			            s->ntask[i]);
	}
	free(by);
	return rc;
}

int sched_check(const Graph *g, const Sched *s, char *err, size_t len)
{
	if (check_shape(g, s, 1, err, len))
		return -1;
	int nl = g->cuda.nl;
	unsigned char *conf = malloc((size_t)nl * (size_t)nl + 1);
	size_t W = 0;
	uint64_t *reach = reach_sets(s, nl, &W);
	int rc = !conf || !reach ? seterr(err, len, "out of memory") : sched_conflicts(g, s->T, conf, err, len);
	for (int j = 0; j < nl && !rc; j++)
		for (int i = 0; i < j && !rc; i++)
			if (conf[(size_t)i * nl + j] && !(reach[(size_t)j * W + (size_t)i / 64] >> (i % 64) & 1))
				rc = seterr(err, len, "schedule for T=%d: launch %d (%s of node %%%d) may run before launch %d (%s of "
				            "node %%%d) finishes, and they touch the same memory", s->T, j,
				            launch_name(&g->cuda.l[j]), g->cuda.l[j].node, i, launch_name(&g->cuda.l[i]),
				            g->cuda.l[i].node);
	free(conf), free(reach);
	return rc ? -1 : 0;
}

static uint64_t rnd(uint64_t *x)
{
	*x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
	return *x;
}

/* Whether worker w, idle, may start its next task: it has one, and every launch that task waits for is
** done. One launch of the kernel for the whole step (with the collectives as tasks); glmrun's per-segment
** fallback only adds order. */
static int sim_ready(const Sched *s, const int *pc, const int *done, int w)
{
	if (pc[w] == s->first[w + 1])
		return 0;
	int L = s->task[pc[w]].launch;
	for (int k = s->wait_off[L]; k < s->wait_off[L + 1]; k++)
		if (done[s->wait[k]] != s->ntask[s->wait[k]])
			return 0;
	return 1;
}

/* The workers that can move (running: finish; idle and ready: start), rebuilt from scratch. */
static int sim_movers(const Sched *s, const int *pc, const int *done, const int *busy, int *can)
{
	int nc = 0;
	for (int w = 0; w < s->nworker; w++)
		if (busy[w] || sim_ready(s, pc, done, w))
			can[nc++] = w;
	return nc;
}

int sched_simulate(const Graph *g, const Sched *s, uint64_t seed, int rounds, char *err, size_t len)
{
	if (check_shape(g, s, 0, err, len))
		return -1;
	int nl = g->cuda.nl, nw = s->nworker;
	unsigned char *conf = malloc((size_t)nl * (size_t)nl + 1);
	int *done = malloc(sizeof(int) * (size_t)nl), *pc = malloc(sizeof(int) * (size_t)nw),
	    *busy = malloc(sizeof(int) * (size_t)nw), *can = malloc(sizeof(int) * (size_t)nw),
	    *coff = calloc((size_t)nl + 1, sizeof(int)), *cl = NULL;
	int rc = !conf || !done || !pc || !busy || !can || !coff ? seterr(err, len, "out of memory")
	                                                          : sched_conflicts(g, s->T, conf, err, len);
	/* each launch's conflicting earlier launches, as lists (the check at every task start) */
	for (int j = 0; j < nl && !rc; j++) {
		coff[j + 1] = coff[j];
		for (int i = 0; i < j; i++)
			coff[j + 1] += conf[(size_t)i * nl + j];
	}
	if (!rc && !(cl = malloc(sizeof(int) * ((size_t)coff[nl] + 1))))
		rc = seterr(err, len, "out of memory");
	for (int j = 0, n = 0; j < nl && !rc; j++)
		for (int i = 0; i < j; i++)
			if (conf[(size_t)i * nl + j])
				cl[n++] = i;
	uint64_t x = seed | 1;
	for (int r = 0; r < rounds && !rc; r++) {
		memset(done, 0, sizeof(int) * (size_t)nl);
		for (int w = 0; w < nw; w++)
			pc[w] = s->first[w], busy[w] = 0;
		int left = s->ntask_all, nc = sim_movers(s, pc, done, busy, can);
		/* each move: a running worker finishes its task, or a ready one starts its next */
		while (left && !rc) {
			if (!nc) {
				int w = 0;
				while (pc[w] == s->first[w + 1])
					w++;
				rc = seterr(err, len, "schedule for T=%d: deadlock in interleaving %d with %d tasks left (worker %d "
				            "waits at launch %d)", s->T, r, left, w, s->task[pc[w]].launch);
				break;
			}
			int c = (int)(rnd(&x) % (uint64_t)nc), w = can[c], L = s->task[pc[w]].launch;
			if (busy[w]) {
				busy[w] = 0, pc[w]++, left--;
				if (++done[L] == s->ntask[L])
					nc = sim_movers(s, pc, done, busy, can); /* a launch done: others may be ready now */
				else if (!sim_ready(s, pc, done, w))
					can[c] = can[--nc];
				continue;
			}
			for (int k = coff[L]; k < coff[L + 1] && !rc; k++)
				if (done[cl[k]] != s->ntask[cl[k]])
					rc = seterr(err, len, "schedule for T=%d: in interleaving %d, launch %d (%s) starts while launch "
					            "%d (%s), which touches the same memory, has %d of %d tasks unfinished", s->T, r, L,
					            launch_name(&g->cuda.l[L]), cl[k], launch_name(&g->cuda.l[cl[k]]),
					            s->ntask[cl[k]] - done[cl[k]], s->ntask[cl[k]]);
			busy[w] = 1;
		}
	}
	free(conf), free(done), free(pc), free(busy), free(can), free(coff), free(cl);
	return rc ? -1 : 0;
}

void sched_dump(const Graph *g, const Sched *s, int launches, FILE *f)
{
	int64_t tot = 0, mx = 0;
	int used = 0, waits = 0;
	for (int i = 0; i < s->nl; i++)
		used += s->ntask[i] > 0, waits += s->wait_off[i + 1] - s->wait_off[i];
	for (int w = 0; w < s->nworker; w++) {
		int64_t b = 0;
		for (int k = s->first[w]; k < s->first[w + 1]; k++)
			b += s->task[k].bytes;
		tot += b, mx = b > mx ? b : mx;
	}
	int nseg = sched_segments(g, s->T, NULL);
	fprintf(f, "schedule T=%d: %d launches as %d tasks on %d workers (%d SMs x %d, %d threads), %d waits; bytes a "
	        "worker: max %lld, mean %lld", s->T, used, s->ntask_all, s->nworker, s->sms, s->per_sm, s->block, waits,
	        (long long)mx, (long long)(tot / s->nworker));
	if (nseg > 1)
		fprintf(f, "; %d collectives, as tasks where P2P carries them all (else the kernel launched %d times a step "
		        "around them)", nseg - 1, nseg);
	fprintf(f, "\n");
	for (int i = 0; i < s->nl && launches; i++) {
		if (!s->ntask[i])
			continue;
		int us;
		int64_t b = sched_launch_blocks(g, i, s->T, &us);
		if (us)
			fprintf(f, "  launch %d %s (node %%%d): blocks by the cache size, %d tasks of a share each, waits for", i,
			        launch_name(&g->cuda.l[i]), g->cuda.l[i].node, s->ntask[i]);
		else
			fprintf(f, "  launch %d %s (node %%%d): %lld blocks, %d tasks, waits for", i, launch_name(&g->cuda.l[i]),
			        g->cuda.l[i].node, (long long)b, s->ntask[i]);
		for (int k = s->wait_off[i]; k < s->wait_off[i + 1]; k++)
			fprintf(f, " %d", s->wait[k]);
		fprintf(f, s->wait_off[i] == s->wait_off[i + 1] ? " nothing\n" : "\n");
	}
}
