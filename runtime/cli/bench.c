/*
** runtime/cli/bench.c — glmrun --bench and --profile (issue 8). A random prompt is prefilled, a few decode
** steps warm up (the first captures the graph), then each measured step is timed on the host around the
** graph launch and its token read-back (what a user waits for per token). The bytes a step must read
** (bench_step_bytes) turn the time into achieved GB/s; --profile then times every kernel of the step and
** charges each with the bytes it moves, so the kernel furthest from the bandwidth limit is the first line.
*/
#include "bench.h"
#include "ref.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Monotonic seconds: the host clock the step times are read from. */
static double bench_now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The value a reshape views (reshapes are aliases: no kernel, no bytes of their own). */
static int base_of(const Graph *g, int id)
{
	while (g->node[id].op == OP_RESHAPE)
		id = g->node[id].in[0];
	return id;
}

/* Expected distinct experts of E touched by `batch` tokens choosing k each, uniformly and independently:
** E·(1 − (1 − k/E)^B); exactly k at batch 1. */
static double experts_touched(double E, double k, int batch)
{
	return batch <= 1 ? k : E * (1.0 - pow(1.0 - k / E, batch));
}

/* The share of weight w (a base value) that consumer c reads in a decode step of `batch` tokens. */
static double weight_share(const Graph *g, int c, int w, int batch)
{
	const Node *n = &g->node[c];
	if (n->op == OP_EMBEDDING && base_of(g, n->in[0]) == w) {
		double rows = (double)g->node[w].dim[0];
		return rows > 0 ? fmin((double)batch, rows) / rows : 1;
	}
	if (n->op == OP_MOE_FFN)
		for (int k = 3; k < 6; k++)
			if (base_of(g, n->in[k]) == w) {
				double E = (double)g->node[w].dim[0], kk = (double)g->node[n->in[1]].dim[1];
				return E > 0 ? experts_touched(E, kk, batch) / E : 1;
			}
	return 1;
}

/* Rows of cache node cv (a base value) consumer c reads per sequence at a context of ctx positions. */
static double cache_rows(const Graph *g, int c, int cv, double ctx)
{
	const Node *n = &g->node[c];
	if (n->op == OP_MLA && n->nin > 4 && base_of(g, n->in[2]) == cv) {
		double topk = (double)g->node[n->in[4]].dim[1];
		return fmin(ctx, topk);
	}
	return ctx;
}

/* Bytes per row of a cache: its width at the device's element size. */
static double cache_row_bytes(const Graph *g, int cv, size_t es)
{
	return (double)node_numel(&g->node[cv], 1, 1) * (double)es;
}

/* What a decode step must read (the rules are in bench.h): the denominator of achieved GB/s. */
void bench_step_bytes(const Graph *g, const double *wbytes, size_t cache_es, double ctx, int batch, BenchBytes *b)
{
	memset(b, 0, sizeof *b);
	for (int v = 0; v < g->n; v++) {
		const Node *vn = &g->node[v];
		if (vn->kind != VK_WEIGHT && vn->kind != VK_CACHE)
			continue;
		/* A value is read once per step at the largest share any consumer needs (a tied embedding is read
		** in full by the LM head, not just the looked-up rows). */
		double share = 0;
		int expert = 0;
		for (int c = v + 1; c < g->n; c++) {
			const Node *cn = &g->node[c];
			if (cn->op == OP_RESHAPE)
				continue;
			for (int k = 0; k < cn->nin; k++) {
				if (base_of(g, cn->in[k]) != v)
					continue;
				double s = vn->kind == VK_WEIGHT ? weight_share(g, c, v, batch) : cache_rows(g, c, v, ctx) * batch;
				expert |= cn->op == OP_MOE_FFN && k >= 3;
				if (s > share)
					share = s;
			}
		}
		if (vn->kind == VK_CACHE)
			b->cache += share * cache_row_bytes(g, v, cache_es);
		else if (expert) {
			b->experts += share * wbytes[v];
			b->experts_resident += wbytes[v];
		} else
			b->weights += share * wbytes[v];
	}
	b->total = b->weights + b->experts + b->cache;
}

/* Whether weight v is multiplied (read by a linear, matmul, MoE FFN, or a slice or permute feeding one), and
** at what share: k/E for expert tensors. 0: not multiplied (a lookup table, a norm's scale). */
static double weight_flop_share(const Graph *g, int v)
{
	double share = 0;
	for (int c = v + 1; c < g->n; c++) {
		const Node *cn = &g->node[c];
		if (cn->op != OP_LINEAR && cn->op != OP_MATMUL && cn->op != OP_MOE_FFN && cn->op != OP_SLICE &&
		    cn->op != OP_PERMUTE)
			continue;
		for (int k = 0; k < cn->nin; k++) {
			if (base_of(g, cn->in[k]) != v)
				continue;
			double s = 1;
			if (cn->op == OP_MOE_FFN && k >= 3) {
				double E = (double)g->node[v].dim[0], kk = (double)g->node[cn->in[1]].dim[1];
				s = E > 0 ? kk / E : 1;
			}
			share = s > share ? s : share;
		}
	}
	return share;
}

void bench_prefill_flops(const Graph *g, int64_t L, BenchFlops *f)
{
	memset(f, 0, sizeof *f);
	double pairs = (double)L * (double)(L + 1) / 2; /* causal (query, key) pairs from position 0 */
	for (int v = 0; v < g->n; v++) {
		const Node *n = &g->node[v];
		if (n->kind == VK_WEIGHT && n->ndim >= 2)
			f->weights += 2.0 * (double)node_numel(n, 1, 1) * weight_flop_share(g, v) * (double)L;
		if (n->op == OP_ATTENTION)
			f->attention += 2.0 * (double)A_attention_heads(n) *
			                (double)(A_attention_head_dim(n) + A_attention_v_head_dim(n)) * pairs;
		if (n->op == OP_MLA) {
			double p = pairs;
			if (n->nin > 4) { /* query t (1-based) attends to min(t, topk) keys */
				double k = (double)g->node[n->in[4]].dim[1], m = fmin((double)L, k);
				p = m * (m + 1) / 2 + ((double)L - m) * k;
			}
			f->attention += 2.0 * (double)A_mla_heads(n) * (double)(A_mla_dk(n) + A_mla_dv(n)) * p;
		}
		if (n->op == OP_INDEXER)
			f->attention += 2.0 * (double)A_indexer_heads(n) * (double)A_indexer_dim(n) * pairs;
	}
	f->total = f->weights + f->attention;
}

/* Whether node m belongs to the kernel of node id (id itself, or fused into it). */
static int in_kernel(const Graph *g, int m, int id)
{
	return m == id || g->node[m].fused_into == id;
}

/* The bytes one node's kernels move, for the profile's per-kernel GB/s (bench.h). */
void bench_node_bytes(const Graph *g, int id, const double *wbytes, size_t act_es, size_t cache_es, double ctx,
                      int batch, double *rd, double *wr)
{
	*rd = *wr = 0;
	int *seen = calloc((size_t)g->n, sizeof *seen);
	if (!seen)
		return;
	for (int m = 0; m < g->n; m++) {
		if (!in_kernel(g, m, id))
			continue;
		const Node *mn = &g->node[m];
		for (int k = 0; k < mn->nin; k++) {
			int v = base_of(g, mn->in[k]);
			if (in_kernel(g, v, id))
				continue;
			const Node *vn = &g->node[v];
			double s;
			if (vn->kind == VK_WEIGHT)
				s = weight_share(g, m, v, batch) * wbytes[v];
			else if (vn->kind == VK_CACHE)
				s = cache_rows(g, m, v, ctx) * batch * cache_row_bytes(g, v, cache_es);
			else
				s = (double)node_numel(vn, batch, (int64_t)ctx) * (double)(vn->dtype == DT_I32 ? 4 : act_es);
			if (!seen[v]) /* each operand once, at the first consumer's share */
				*rd += s;
			seen[v] = 1;
		}
		/* The output leaves the kernel when it is the kernel's own value, a graph output or read outside. */
		int leaves = m == id;
		for (int i = 0; i < g->nout && !leaves; i++)
			leaves = g->out[i] == m;
		for (int c = m + 1; c < g->n && !leaves; c++)
			for (int k = 0; k < g->node[c].nin && !leaves; k++)
				leaves = g->node[c].in[k] == m && !in_kernel(g, c, id);
		if (leaves && mn->kind == VK_ACT)
			*wr += (double)node_numel(mn, batch, (int64_t)ctx) * (double)(mn->dtype == DT_I32 ? 4 : act_es);
	}
	free(seen);
}

/* Ascending doubles, for the median step time. */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* "12.3 GB" */
static const char *gb(double bytes, char *buf, size_t len)
{
	snprintf(buf, len, "%.3f GB", bytes / 1e9);
	return buf;
}

/* One profile row: a node's kernel(s) in the step. */
typedef struct {
	int node, launches;
	const char *kernel;
	double us, rd, wr;
} ProfRow;

/* Slowest first: the profile's first row is the kernel to work on. */
static int cmp_row(const void *a, const void *b)
{
	double x = ((const ProfRow *)a)->us, y = ((const ProfRow *)b)->us;
	return (x < y) - (x > y);
}

/* "47.1%" of the given bandwidth, or "-" without --bw. */
static const char *pct(double gbps, double bw, char *buf, size_t len)
{
	if (bw > 0)
		snprintf(buf, len, "%.1f%%", 100 * gbps / bw);
	else
		snprintf(buf, len, "-");
	return buf;
}

/*
** The --profile tables from per-launch times (us[i] for g->cuda.l[i]) and the sampler's: one row per node
** (a node's kernels together), sorted by time; then the same grouped by operator and by layer; then the
** sum against the graph-replay step time.
*/
int bench_profile_print(FILE *f, const Graph *g, const BenchOpts *o, const double *wb, double ctx, double step_ms,
                        int64_t V, const double *us, double sample_us, int graph)
{
	const Cuda *c = &g->cuda;
	char b1[32], b2[32];
	ProfRow *row = calloc((size_t)c->nl + 1, sizeof *row);
	int *slot = malloc(sizeof *slot * (size_t)g->n), nr = 0, nk = 1;
	if (!row || !slot)
		return free(row), free(slot), -1;
	for (int i = 0; i < g->n; i++)
		slot[i] = -1;
	size_t act = dtype_size(c->act);
	for (int i = 0; i < c->nl; i++) {
		const Launch *l = &c->l[i];
		if (!(l->tmin <= 1 && 1 <= l->tmax))
			continue;
		if (slot[l->node] < 0) {
			slot[l->node] = nr;
			row[nr] = (ProfRow){.node = l->node, .kernel = launch_name(l)};
			bench_node_bytes(g, l->node, wb, act, act, ctx, o->batch, &row[nr].rd, &row[nr].wr);
			nr++;
		}
		row[slot[l->node]].us += us[i];
		row[slot[l->node]].launches++;
		nk++;
	}
	row[nr++] = (ProfRow){.node = -1, .kernel = "sampler", .us = sample_us, .launches = 1,
	                      .rd = (double)V * (double)act}; /* it reads the logits row */
	double total = 0, bytes = 0;
	for (int i = 0; i < nr; i++)
		total += row[i].us, bytes += row[i].rd + row[i].wr;
	qsort(row, (size_t)nr, sizeof *row, cmp_row);
	fprintf(f, "profile: %d nodes and the sampler, %d kernels per step, times averaged over %ld steps (%s), context "
	       "%.0f\n", nr - 1, nk, o->profile_steps,
	       graph ? "a graph replay with an event node before and after every kernel and collective"
	       : o->profile_eager ? "eager launches with events around each (--profile-eager)"
	                          : "eager launches with events around each (the graph capture with event nodes failed)",
	       ctx);
	fprintf(f, "%4s %10s %6s %12s %12s %9s %7s  %-4s %-10s %s\n", "rank", "time_us", "%sum", "read_bytes",
	       "write_bytes", "GB/s", "%bw", "kern", "kernel", "node");
	int top = o->profile_top < nr ? o->profile_top : nr;
	for (int i = 0; i < top; i++) {
		const ProfRow *r = &row[i];
		double gbps = r->us > 0 ? (r->rd + r->wr) / (r->us * 1e3) : 0;
		char where[160] = "(after the logits)";
		if (r->node >= 0) {
			const Node *n = &g->node[r->node];
			snprintf(where, sizeof where, "%s %%%d layer %d (%s:%d)", op_table[n->op].name, r->node, n->layer,
			         n->src ? n->src : "?", n->line);
		}
		fprintf(f, "%4d %10.2f %6.2f %12.0f %12.0f %9.1f %7s  %-4d %-10s %s\n", i + 1, r->us, total > 0 ? 100 * r->us / total : 0.0, r->rd,
		       r->wr, gbps, pct(gbps, o->bw_gbps, b1, sizeof b1), r->launches, r->kernel, where);
	}
	if (top < nr)
		fprintf(f, "  ... %d more rows (--profile-top N shows more)\n", nr - top);
	/* By operator: where a kernel rewrite pays. */
	fprintf(f, "profile by operator:\n");
	fprintf(f, "  %-14s %6s %10s %6s %14s %9s %7s\n", "op", "nodes", "time_us", "%sum", "bytes", "GB/s", "%bw");
	for (int op = -1; op < OP_NOPS; op++) {
		double t = 0, by = 0;
		int cnt = 0;
		for (int i = 0; i < nr; i++) {
			int rop = row[i].node >= 0 ? g->node[row[i].node].op : -1;
			if (rop == op)
				t += row[i].us, by += row[i].rd + row[i].wr, cnt++;
		}
		if (!cnt)
			continue;
		double gbps = t > 0 ? by / (t * 1e3) : 0;
		fprintf(f, "  %-14s %6d %10.2f %6.2f %14.0f %9.1f %7s\n", op < 0 ? "sampler" : op_table[op].name, cnt, t,
		       total > 0 ? 100 * t / total : 0.0, by, gbps, pct(gbps, o->bw_gbps, b1, sizeof b1));
	}
	int fused = 0; /* allreduces glmc marked for the residual sum's kernel (k_add_rmsnorm_ar) */
	for (int i = 0; i < c->nl; i++)
		fused += c->l[i].inside_next && c->l[i].tmin <= 1;
	if (fused)
		fprintf(f, "  (%d allreduces are done inside the next kernel, the residual sum's, whenever the one-shot P2P "
		        "path takes them (GLMRUN_P2P_MAX): their exchange and the wait for the other ranks are then timed "
		        "in that kernel's row, op add, and their own rows time an empty slot)\n", fused);
	/* By layer: the per-layer cost a multi-GPU plan is built from. */
	int nlay = 0;
	for (int i = 0; i < g->n; i++)
		if (g->node[i].layer + 1 > nlay)
			nlay = g->node[i].layer + 1;
	fprintf(f, "profile by layer:\n");
	fprintf(f, "  %-8s %6s %10s %14s %9s %7s\n", "layer", "nodes", "time_us", "bytes", "GB/s", "%bw");
	for (int l = -1; l < nlay; l++) {
		double t = 0, by = 0;
		int cnt = 0;
		for (int i = 0; i < nr; i++) {
			int rl = row[i].node >= 0 ? g->node[row[i].node].layer : -1;
			if (rl == l)
				t += row[i].us, by += row[i].rd + row[i].wr, cnt++;
		}
		if (!cnt)
			continue;
		double gbps = t > 0 ? by / (t * 1e3) : 0;
		snprintf(b2, sizeof b2, l < 0 ? "outside" : "%d", l);
		fprintf(f, "  %-8s %6d %10.2f %14.0f %9.1f %7s\n", b2, cnt, t, by, gbps, pct(gbps, o->bw_gbps, b1, sizeof b1));
	}
	fprintf(f, "profile_kernel_sum_us: %.2f\n", total);
	fprintf(f, "profile_bytes: %.0f\n", bytes);
	fprintf(f, "profile_graph_step_us: %.2f\n", 1e3 * step_ms);
	fprintf(f, "profile_overhead_us: %.2f (graph step minus the kernel sum: launch gaps, host sync, read-back)\n",
	       1e3 * step_ms - total);
	free(row), free(slot);
	return 0;
}

/* --profile on the persistent path: the task timeline its workers recorded (engine_persist_trace: per step, per
** task of the T = 1 schedule, wait began / body began / body ended in ns and the SM), as two tables: per launch
** (its tasks' waits and body time) and per worker (busy vs waiting share of the step, the 5 that waited most).
** Times are means per step in us; a step starts at its first task's wait. -1: out of memory. */
static int persist_timeline_print(FILE *f, const Graph *g, const uint64_t *tr, int steps, const char *path)
{
	const Cuda *c = &g->cuda;
	const Sched *sc = sched_for(c, 1);
	if (!sc || steps < 1)
		return 0;
	int nl = c->nl, nw = sc->nworker, nt = sc->ntask_all;
	/* per launch: tasks seen, wait sum, wait max, body sum, first body start; per worker: busy, wait, worst */
	double *lw = calloc((size_t)nl * 4, sizeof *lw), *ww = calloc((size_t)nw * 3, sizeof *ww), span = 0;
	int *lt = calloc((size_t)nl + (size_t)nw * 2, sizeof *lt), *wsm = lt ? lt + nl : NULL, *wl = lt ? lt + nl + nw : NULL;
	if (!lw || !ww || !lt)
		return free(lw), free(ww), free(lt), -1;
	for (int i = 0; i < nl; i++)
		lw[4 * i + 3] = -1;
	for (int w = 0; w < nw; w++)
		wl[w] = -1;
	for (int s = 0; s < steps; s++) {
		const uint64_t *t = tr + (size_t)s * 4 * (size_t)nt;
		uint64_t t0 = UINT64_MAX, t9 = 0; /* the step: its first wait, its last body end */
		for (int i = 0; i < nt; i++)
			t0 = t[4 * i] < t0 ? t[4 * i] : t0, t9 = t[4 * i + 2] > t9 ? t[4 * i + 2] : t9;
		span += (double)(int64_t)(t9 - t0) / 1e3 / steps;
		for (int w = 0; w < nw; w++)
			for (int i = sc->first[w]; i < sc->first[w + 1]; i++) {
				const uint64_t *a = t + 4 * i;
				int L = sc->task[i].launch;
				/* signed: a clock that went backwards shows as a negative time, not as zero */
				double wait = (double)(int64_t)(a[1] - a[0]) / 1e3, body = (double)(int64_t)(a[2] - a[1]) / 1e3,
				       at = (double)(int64_t)(a[1] - t0) / 1e3;
				if (s == 0)
					lt[L]++;
				lw[4 * L] += wait / steps, lw[4 * L + 2] += body / steps;
				lw[4 * L + 1] = wait > lw[4 * L + 1] ? wait : lw[4 * L + 1];
				if (lw[4 * L + 3] < 0 || at < lw[4 * L + 3])
					lw[4 * L + 3] = at;
				ww[3 * w] += body / steps, ww[3 * w + 1] += wait / steps;
				if (wait > ww[3 * w + 2])
					ww[3 * w + 2] = wait, wl[w] = L;
				wsm[w] = (int)a[3];
			}
	}
	double busy = 0, waiting = 0;
	for (int w = 0; w < nw; w++)
		busy += ww[3 * w], waiting += ww[3 * w + 1];
	fprintf(f, "profile: decode_path %s\n", path);
	fprintf(f, "persistent timeline: %d eager steps, %d workers, step %.2f us (first wait to last body end), workers "
	        "busy %.1f%% waiting %.1f%% of it; per launch (us, mean per step; waits per task):\n", steps, nw, span,
	        span > 0 ? 100 * busy / (span * nw) : 0.0, span > 0 ? 100 * waiting / (span * nw) : 0.0);
	fprintf(f, "  %6s %-28s %6s %6s %10s %12s %11s %11s\n", "launch", "kernel", "node", "tasks", "first_us", "wait_mean_us",
	        "wait_max_us", "body_sum_us");
	for (int i = 0; i < nl; i++)
		if (sc->ntask[i])
			fprintf(f, "  %6d %-28.28s %6d %6d %10.2f %12.2f %11.2f %11.2f\n", i, launch_name(&c->l[i]), c->l[i].node, lt[i],
			        lw[4 * i + 3], lt[i] ? lw[4 * i] / lt[i] : 0.0, lw[4 * i + 1], lw[4 * i + 2]);
	fprintf(f, "persistent timeline per worker: the %d that waited most (us, mean per step):\n", nw < 5 ? nw : 5);
	fprintf(f, "  %6s %4s %6s %7s %7s %10s %10s  %s\n", "worker", "sm", "tasks", "busy%", "wait%", "wait_us", "worst_us",
	        "worst_at (launch kernel)");
	for (int k = 0; k < 5 && k < nw; k++) {
		int m = -1;
		for (int w = 0; w < nw; w++)
			if (ww[3 * w + 1] > -HUGE_VAL && (m < 0 || ww[3 * w + 1] > ww[3 * m + 1]))
				m = w;
		double wt = ww[3 * m + 1];
		fprintf(f, "  %6d %4d %6d %7.1f %7.1f %10.2f %10.2f  ", m, wsm[m], sc->first[m + 1] - sc->first[m],
		        span > 0 ? 100 * ww[3 * m] / span : 0.0, span > 0 ? 100 * wt / span : 0.0, wt, ww[3 * m + 2]);
		if (wl[m] >= 0)
			fprintf(f, "%d %s\n", wl[m], launch_name(&c->l[wl[m]]));
		else
			fprintf(f, "-\n");
		ww[3 * m + 1] = -HUGE_VAL; /* taken */
	}
	free(lw), free(ww), free(lt);
	return 0;
}

/* --profile: time the kernels and collectives (on every rank of a tp plan), then print the tables (rank
** 0's times). */
static int profile_report(const Graph *g, Engine *e, const BenchOpts *o, const double *wb, double ctx, double step_ms,
                          int64_t V)
{
	char err[1024];
	double *us = calloc((size_t)g->cuda.nl + 1, sizeof *us), sample_us = 0;
	int graph = 0;
	if (!us)
		return fprintf(stderr, "glmrun: out of memory\n"), 1;
	if (engine_profile(e, (int)o->profile_steps, o->profile_eager, us, &sample_us, &graph, err, sizeof err)) {
		fprintf(stderr, "glmrun: --profile: %s\n", err);
		free(us);
		return 1;
	}
	EngineStats es;
	engine_stats(e, &es);
	int rc = 0, tsteps = 0;
	const uint64_t *tr = engine_persist_trace(e, &tsteps);
	if (!strncmp(es.decode_path, "persistent", 10) && tr)
		rc = persist_timeline_print(stdout, g, tr, tsteps, es.decode_path);
	if (!strncmp(es.decode_path, "persistent", 10)) /* gpu_profile times the launch list, event by event */
		printf("profile: the per-launch times below are the kernel-per-launch path's (--decode kernels)\n");
	if (!rc)
		rc = bench_profile_print(stdout, g, o, wb, ctx, step_ms, V, us, sample_us, graph);
	free(us);
	if (rc)
		fprintf(stderr, "glmrun: out of memory\n");
	return rc ? 1 : 0;
}

/* One figure of the --bench block: a "key: value" line, or (--json) a member of one object, a number where
** the whole value reads as one. */
typedef struct {
	json_t *obj;                 /* NULL: print lines */
} Bv;

static void bv(Bv *k, const char *key, const char *fmt, ...)
{
	char v[1024], *end;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(v, sizeof v, fmt, ap);
	va_end(ap);
	if (!k->obj) {
		printf("%s: %s\n", key, v);
		return;
	}
	long long i = strtoll(v, &end, 10);
	if (*v && !*end) {
		json_object_set_new(k->obj, key, json_integer(i));
		return;
	}
	double d = strtod(v, &end);
	json_object_set_new(k->obj, key, *v && !*end ? json_real(d) : json_string(v));
}

/* The --batch prompts one prefill step takes: as many as fit -ub tokens (glmrun --batch and serve share
** prefill steps so; a prompt longer than a step goes alone, in chunks), at most all of them. */
static int per_step(const BenchOpts *o)
{
	long per = o->ub > o->prompt ? o->ub / o->prompt : 1;
	return per > o->batch ? o->batch : (int)per;
}

/* Tokens one prefill step evaluates, as a run's steps go (it sizes the engine's activations): a prompt
** longer than -ub in chunks of -ub; shorter ones per_step of them to a step. */
static long step_tokens(const BenchOpts *o)
{
	return o->chunk > 0 && o->chunk < o->prompt ? o->chunk : per_step(o) * o->prompt;
}

/* The block of figures --bench prints (med: the median step in ms). */
static void print_block(const Graph *g, const char *plan, const char *weights, const BenchOpts *o,
                        const EngineStats *es, int pdl_asked, double med, double mean, double lo, double hi,
                        double ctx, const BenchBytes *bb, const double *t, long psteps)
{
	Bv k = {o->json ? json_object() : NULL};
	char b1[32];
	int cuda = es->cuda;
	double gbps = bb->total / (med * 1e6);
	const char *wf = graph_meta(g, "weights.format"), *wt = graph_meta(g, "weights.random_type");
	if (cuda && es->tp > 1)
		bv(&k, "tp", "%d GPUs (bytes, GB/s and %%bw below are per GPU: rank 0's share of the step)", es->tp);
	bv(&k, "bench", "glmrun decode benchmark (issue 8)");
	bv(&k, "plan", "%s", plan);
	if (wf && !strcmp(wf, "random"))
		bv(&k, "weights", "random (%s): RANDOM WEIGHTS, generated, not a checkpoint", wt ? wt : "?");
	else
		bv(&k, "weights", "%s (%s)", weights, wf ? wf : "?");
	if (cuda)
		bv(&k, "device", "cuda %s (sm_%d%d)", es->name, es->cc_major, es->cc_minor);
	else
		bv(&k, "device", "cpu (reference executor, %d rank%s)", es->tp, es->tp > 1 ? "s" : "");
	bv(&k, "batch", "%d", o->batch);
	bv(&k, "prompt_tokens", "%ld", o->prompt);
	bv(&k, "prefill_chunk", "%ld", step_tokens(o));
	bv(&k, "prefill_prompts_per_step", "%d", per_step(o));
	bv(&k, "prefill_steps", "%ld", psteps);
	bv(&k, "warmup_steps", "%ld", o->warmup);
	bv(&k, "decode_steps", "%ld", o->steps);
	bv(&k, "context_mean", "%.1f", ctx);
	bv(&k, "setup_s", "%.3f", t[0]);
	if (cuda)
		bv(&k, "upload_s", "%.3f", es->upload_s);
	bv(&k, "prefill_ms", "%.3f", 1e3 * t[1]);
	bv(&k, "prefill_tok_s", "%.1f", (double)o->prompt * o->batch / t[1]);
	BenchFlops fl;
	bench_prefill_flops(g, o->prompt, &fl);
	double tp = es->tp > 1 ? es->tp : 1; /* the graph is one rank's share */
	bv(&k, "prefill_flops_per_token", "%.4g (weights %.4g, attention %.4g: 2 x active parameters + attention)",
	   fl.total * tp / (double)o->prompt, fl.weights * tp / (double)o->prompt, fl.attention * tp / (double)o->prompt);
	bv(&k, "prefill_tflop_s", "%.4g", fl.total * tp * o->batch / t[1] / 1e12);
	bv(&k, "warmup_s", "%.3f", t[2]);
	bv(&k, "ms_per_step_median", "%.4f", med);
	bv(&k, "ms_per_step_mean", "%.4f", mean);
	bv(&k, "ms_per_step_min", "%.4f", lo);
	bv(&k, "ms_per_step_max", "%.4f", hi);
	bv(&k, "tok_s", "%.2f", o->batch * 1e3 / med);
	bv(&k, "bytes_per_step", "%.0f", bb->total);
	bv(&k, "bytes_per_step_weights", "%.0f", bb->weights);
	bv(&k, "bytes_per_step_experts", "%.0f (of %s resident in expert tensors)", bb->experts,
	       gb(bb->experts_resident, b1, sizeof b1));
	bv(&k, "bytes_per_step_cache", "%.0f", bb->cache);
	bv(&k, "bytes_assumption", "weights as resident on the device (%s); expert tensors: only the selected experts, "
	   "k/E of each at batch 1; embedding: one row per sequence; caches: rows 0..pos per sequence (topk rows "
	   "under a DSA selection); activations and cache writes not counted",
	   cuda ? "gpu_weight_bytes" : "float32 on the CPU");
	bv(&k, "achieved_gb_s", "%.1f", gbps);
	if (o->bw_gbps > 0)
		bv(&k, "pct_of_bw", "%.1f (of %.1f GB/s)", 100 * gbps / o->bw_gbps, o->bw_gbps);
	if (cuda) {
		bv(&k, "graph_launches_per_step", "%.2f",
		       es->decode_steps ? (double)es->graph_launches / (double)es->decode_steps : 0.0);
		bv(&k, "kernels_per_step", "%d", es->kernels_per_step);
		bv(&k, "programmatic_launch", "%s", es->pdl ? "on (--pdl)" : pdl_asked ? "off (--pdl needs sm_90 and cuLaunchKernelEx)" : "off");
		bv(&k, "decode_path", "%s", es->decode_path);
	} else {
		bv(&k, "graph_launches_per_step", "0 (cpu)");
	}
	if (k.obj) {
		char *text = json_dumps(k.obj, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
		if (text)
			puts(text);
		free(text);
		json_decref(k.obj);
	}
	fflush(stdout);
}

/* Prefill B random prompts (one slot each, per_step of them a step), then time the decode steps of all B;
** ms[] gets each measured step, t[1] the prefill (the second of two: the first loads cuBLASLt's kernels and
** warms the caches), t[2] the warm-up steps, *psteps the steps that prefill took. */
static int run_steps(Engine *e, const BenchOpts *o, const int32_t *prompt, double *ms, double *t, long *psteps,
                     char *err, size_t len)
{
	int B = o->batch;
	long P = o->prompt;
	int32_t tok[ENGINE_MAX_SLOTS];
	EngineRow rows[ENGINE_MAX_SLOTS];
	int per = per_step(o);
	EngineStats es;
	for (int rep = 0; rep < 2; rep++) {
		double t0 = bench_now();
		engine_stats(e, &es);
		*psteps = es.prefill_steps;
		for (int b = 0; b < B; b += per) {
			int n = B - b < per ? B - b : per;
			EngineRow r0 = {.slot = b};
			EnginePart part[ENGINE_MAX_SLOTS];
			for (int k = 0; k < n; k++)
				part[k] = (EnginePart){.ids = prompt + (size_t)(b + k) * (size_t)P, .n = P, .row = {.slot = b + k}};
			if (n == 1 ? engine_set_rows(e, 1, &r0, err, len) ||
			                 engine_prefill(e, b, prompt + (size_t)b * (size_t)P, P, 0, &tok[b], NULL, err, len)
			           : engine_prefill_parts(e, n, part, &tok[b], NULL, err, len))
				return -1;
		}
		t[1] = bench_now() - t0;
		engine_stats(e, &es);
		*psteps = es.prefill_steps - *psteps;
	}
	for (int b = 0; b < B; b++)
		rows[b] = (EngineRow){.slot = b, .token = tok[b], .pos = (int32_t)P, .step = 1};
	if (engine_set_rows(e, B, rows, err, len))
		return -1;
	double tw0 = bench_now();
	for (long i = 0; i < o->warmup + o->steps; i++) {
		double s0 = bench_now();
		if (engine_decode(e, B, tok, NULL, err, len))
			return -1;
		if (i == o->warmup - 1)
			t[2] = bench_now() - tw0;
		if (i >= o->warmup)
			ms[i - o->warmup] = 1e3 * (bench_now() - s0);
	}
	return 0;
}

/* glmrun --bench / --profile: open the plan through the engine (eo: device and sampling), prefill a
** random prompt, time the decode steps, print the block (and the profile). With o->batch = B, B sequences
** (prompts drawn from the same generator, one after another) fill B cache slots and every step decodes
** all B. */
int bench_main(const Graph *g, const char *plan, const char *weights, const EngineOpts *eo, const BenchOpts *o)
{
	char err[1024];
	int B = o->batch < 1 ? 1 : o->batch;
	if (B > 1 && o->profile) {
		fprintf(stderr, "glmrun: --profile times batch 1; drop --batch\n");
		return 1;
	}
	int logits = -1;
	for (int i = 0; i < g->nout; i++)
		if (!strcmp(g->out_name[i], "logits"))
			logits = g->out[i];
	if (logits < 0 || g->node[logits].ndim != 2 || g->node[logits].dim[1] <= 0) {
		fprintf(stderr, "glmrun: %s: the plan has no output 'logits' of shape [T, vocab]\n", plan);
		return 1;
	}
	int64_t V = g->node[logits].dim[1];
	/* --profile: its steps, and on the persistent path up to as many traced ones before them (gpu_profile) */
	long P = o->prompt, S = P + o->warmup + o->steps + (o->profile ? 2 * o->profile_steps + 1 : 0) + 1;
	const char *ctxs = graph_meta(g, "n_ctx");
	if (ctxs && S > atol(ctxs)) {
		fprintf(stderr, "glmrun: --bench: %ld positions needed, more than the model's context of %s\n", S, ctxs);
		return 1;
	}
	/* A random prompt, the same for every run with one seed. */
	int32_t *prompt = malloc(sizeof *prompt * (size_t)P * (size_t)B);
	double *ms = malloc(sizeof *ms * (size_t)o->steps), *wb = calloc((size_t)g->n, sizeof *wb);
	if (!prompt || !ms || !wb)
		return fprintf(stderr, "glmrun: out of memory\n"), 1;
	uint64_t st = 0x9e3779b97f4a7c15ULL ^ o->seed;
	for (long i = 0; i < P * B; i++) {
		st = st * 6364136223846793005ULL + 1442695040888963407ULL;
		prompt[i] = (int32_t)((st >> 33) % (uint64_t)V);
	}
	double t[3] = {0}, t0 = bench_now();
	Engine *e = NULL;
	EngineOpts eo2 = *eo;
	long C = step_tokens(o);
	eo2.slots = B, eo2.chunk = C > B ? C : B, eo2.max_seq = S, eo2.keep_logits = 0;
	long psteps = 0;
	int rc = engine_open(&e, g, weights, &eo2, err, sizeof err);
	if (!rc) {
		for (int i = 0; i < g->n; i++) /* rank 0's bytes on the GPU: the step's roofline is per GPU */
			if (g->node[i].kind == VK_WEIGHT)
				wb[i] = (double)engine_weight_bytes(e, i);
		t[0] = bench_now() - t0;
		rc = run_steps(e, o, prompt, ms, t, &psteps, err, sizeof err);
	}
	if (rc) {
		fprintf(stderr, "glmrun: %s%s\n", e ? "--bench: " : "", err);
		if (engine_stuck(e))
			_exit(1); /* a rank may still block in a collective: it can be neither joined nor freed */
		engine_close(e);
		return 1;
	}
	EngineStats es;
	engine_stats(e, &es);
	double mean = 0;
	for (long i = 0; i < o->steps; i++)
		mean += ms[i] / (double)o->steps;
	qsort(ms, (size_t)o->steps, sizeof *ms, cmp_double);
	double med = o->steps % 2 ? ms[o->steps / 2] : 0.5 * (ms[o->steps / 2 - 1] + ms[o->steps / 2]);
	/* Mean context of the measured steps: step i of the sequence (1-based) reads positions 0..P+i-1. */
	double ctx = (double)P + (double)o->warmup + ((double)o->steps + 1) / 2;
	BenchBytes bb;
	bench_step_bytes(g, wb, es.cuda ? dtype_size(g->cuda.act) : 4, ctx, o->batch, &bb);
	print_block(g, plan, weights, o, &es, eo->pdl, med, mean, ms[0], ms[o->steps - 1], ctx, &bb, t, psteps);
	if (o->profile)
		rc = profile_report(g, e, o, wb, ctx + (double)o->steps / 2 + (double)o->profile_steps / 2, med, V);
	engine_close(e);
	free(prompt), free(ms), free(wb);
	return rc;
}
