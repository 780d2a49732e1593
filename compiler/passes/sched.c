/*
** sched.c — the decode step's launch list turned into a persistent kernel's task schedule (issue 47).
**
** Input: the launch list emit_cuda wrote and the memory plan. Output: a Sched for a step of T tokens
** (runtime/core/glm.h), appended to g->cuda.sched, which runtime/core/sched.c proves safe. Three choices:
**
** Waits. Launch j waits for the launches it conflicts with (runtime/core/sched.c: one writes bytes the
** other touches), taken latest first, skipping any already reached through the waits taken so far: a
** GEMV waits for the norm before it, not also for everything that norm waited for. The counters then
** carry the stream's order only where memory can tell the difference. A tensor-parallel step's
** collectives are tasks of the one-shot P2P exchange (runtime/core/sched.c's essay), waited for like any
** launch, so the whole step is one launch of the kernel.
**
** Tasks. A launch of B blocks becomes min(B, workers) tasks of contiguous blocks, as equal as integers
** allow: one task per block while blocks are few (attention's heads, the router), one block range per
** worker for the wide GEMVs, so no worker holds two tasks of one launch when another holds none. A grid
** sized by the cache (DSA's indexer scores every cache row) is not known until glmrun fixes S: it becomes
** one task an SM, each a share of the blocks (Sched.share).
**
** Placement. Tasks go, launch by launch, to the workers with the fewest bytes so far (ties to the lower
** worker), a task's bytes being its share of what its launch reads and writes (weights dominate a
** decode step). Appending in launch order keeps every worker's list in launch order, which is what makes
** the schedule deadlock-free (runtime/core/sched.c).
*/
#include "passes.h"

#include <stdlib.h>
#include <string.h>

/* A min-heap of workers by (bytes, index). */
typedef struct {
	int64_t *load;
	int *h, n;
} Heap;

static int heap_less(const Heap *p, int a, int b)
{
	return p->load[a] != p->load[b] ? p->load[a] < p->load[b] : a < b;
}

static void heap_down(Heap *p, int i)
{
	for (;;) {
		int c = 2 * i + 1, m = i;
		if (c < p->n && heap_less(p, p->h[c], p->h[m]))
			m = c;
		if (c + 1 < p->n && heap_less(p, p->h[c + 1], p->h[m]))
			m = c + 1;
		if (m == i)
			return;
		int t = p->h[i];
		p->h[i] = p->h[m], p->h[m] = t, i = m;
	}
}

int sched_build(Graph *g, int T, int sms, int per_sm, char *err, size_t len)
{
	int nl = g->cuda.nl, nw = sms * per_sm;
	if (sms < 1 || per_sm < 1 || nw > 65536)
		return seterr(err, len, "a persistent schedule needs 1 to 65536 workers, got %d SMs x %d", sms, per_sm);
	unsigned char *conf = malloc((size_t)nl * (size_t)nl + 1);
	size_t W = ((size_t)nl + 63) / 64;
	uint64_t *reach = calloc((size_t)nl * W + 1, sizeof(uint64_t));
	int64_t *blocks = calloc((size_t)nl + 1, sizeof(int64_t)), *load = calloc((size_t)nw, sizeof(int64_t));
	int *heap = malloc(sizeof(int) * (size_t)nw), *owner = NULL, *cnt = calloc((size_t)nw + 1, sizeof(int));
	SchedTask *tmp = NULL;
	int rc = -1;
	if (!conf || !reach || !blocks || !load || !heap || !cnt) {
		seterr(err, len, "out of memory");
		goto out;
	}
	if (sched_conflicts(g, T, conf, err, len))
		goto out;
	Sched *s = arena_alloc(g->A, sizeof *s);
	s->T = T, s->sms = sms, s->per_sm = per_sm, s->nworker = nw, s->nl = nl, s->block = 32;
	s->ntask = arena_alloc(g->A, sizeof(int32_t) * (size_t)(nl + 1));
	s->wait_off = arena_alloc(g->A, sizeof(int32_t) * (size_t)(nl + 1));
	s->share = arena_alloc(g->A, (size_t)(nl + 1));
	int nwait = 0, ntask = 0;
	for (int i = 0; i < nl; i++) {
		int us;
		blocks[i] = sched_launch_blocks(g, i, T, &us);
		if (us && blocks[i]) /* a grid sized by the cache: one share an SM, cut when glmrun knows S */
			s->share[i] = 1, blocks[i] = sms;
		if (blocks[i] > INT32_MAX) {
			seterr(err, len, "launch %d (%s) has %lld blocks", i, launch_name(&g->cuda.l[i]), (long long)blocks[i]);
			goto out;
		}
		s->ntask[i] = (int32_t)(blocks[i] < nw ? blocks[i] : nw);
		ntask += s->ntask[i];
		if (blocks[i] && g->cuda.l[i].block > s->block)
			s->block = g->cuda.l[i].block;
		for (int k = i - 1; k >= 0; k--)
			nwait += conf[(size_t)k * nl + i];
	}
	/* waits, latest first, skipping what the chosen ones already reach */
	s->wait = arena_alloc(g->A, sizeof(int32_t) * (size_t)(nwait + 1));
	int nw_used = 0;
	for (int j = 0; j < nl; j++) {
		s->wait_off[j] = nw_used;
		uint64_t *rj = reach + (size_t)j * W;
		for (int i = j - 1; i >= 0; i--) {
			if (!conf[(size_t)i * nl + j] || (rj[i / 64] >> (i % 64) & 1))
				continue;
			s->wait[nw_used++] = i;
			rj[i / 64] |= 1ull << (i % 64);
			for (size_t w = 0; w < W; w++)
				rj[w] |= reach[(size_t)i * W + w];
		}
	}
	s->wait_off[nl] = nw_used;
	/* tasks, placed launch by launch on the least-loaded workers */
	tmp = malloc(sizeof(SchedTask) * (size_t)(ntask + 1));
	owner = malloc(sizeof(int) * (size_t)(ntask + 1));
	if (!tmp || !owner) {
		seterr(err, len, "out of memory");
		goto out;
	}
	Heap hp = {load, heap, nw};
	for (int w = 0; w < nw; w++)
		heap[w] = w;
	int nt = 0;
	for (int i = 0; i < nl; i++) {
		int k = s->ntask[i];
		if (!k)
			continue;
		int64_t B = blocks[i], bytes = sched_launch_bytes(g, i, T);
		for (int t = 0; t < k; t++) {
			int64_t lo = B * t / k, hi = B * (t + 1) / k;
			int w = heap[0];
			tmp[nt] = (SchedTask){i, (int32_t)lo, (int32_t)hi, bytes * (hi - lo) / B};
			owner[nt++] = w, cnt[w + 1]++;
			load[w] += tmp[nt - 1].bytes + 1; /* + 1: a task costs something even with no bytes */
			heap_down(&hp, 0);
		}
	}
	s->ntask_all = nt;
	s->first = arena_alloc(g->A, sizeof(int32_t) * (size_t)(nw + 1));
	for (int w = 0; w < nw; w++)
		cnt[w + 1] += cnt[w];
	for (int w = 0; w <= nw; w++)
		s->first[w] = cnt[w];
	s->task = arena_alloc(g->A, sizeof(SchedTask) * (size_t)(nt + 1));
	for (int t = 0; t < nt; t++) /* stable by worker: each list stays in launch order */
		s->task[cnt[owner[t]]++] = tmp[t];
	Sched *all = arena_alloc(g->A, sizeof(Sched) * (size_t)(g->cuda.nsched + 1));
	if (g->cuda.nsched)
		memcpy(all, g->cuda.sched, sizeof(Sched) * (size_t)g->cuda.nsched);
	all[g->cuda.nsched] = *s;
	g->cuda.sched = all, g->cuda.nsched++;
	rc = 0;
out:
	free(conf), free(reach), free(blocks), free(load), free(heap), free(owner), free(cnt), free(tmp);
	return rc;
}
