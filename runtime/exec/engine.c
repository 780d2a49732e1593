/*
** runtime/exec/engine.c — the engine interface (engine.h) over its two backends: the CPU reference (tp rank
** executors in lockstep, runtime/exec/exec.c) and the GPUs (one worker per rank, runtime/exec/ranks.c). The CPU
** side keeps the step buffer's rows on the host and samples with ref_sample exactly as the GPU's sampler
** does on the device (seed + slot, the row's step counter), so both give the same tokens for one seed.
*/
#include "engine.h"
#include "exec.h"
#include "gpu.h"
#include "ranks.h"
#include "ref.h"

#include <stdlib.h>
#include <string.h>

struct Engine {
	const Graph *g;
	EngineOpts o;
	int tp, logits;
	int64_t V, maxT;
	Ranks *R;                    /* the GPU backend, or NULL */
	Exec x[8];                   /* the CPU backend: one executor per rank */
	int nx;
	EngineRow *row;              /* CPU: the step buffer (o.slots rows) */
	int32_t *tok, *pos, *seq;    /* CPU: one step's inputs (maxT entries) */
	long prefill_steps;          /* prefill steps run (engine_prefill's chunks, engine_prefill_parts' calls) */
};

/* The 'logits' output node of g, or -1. */
static int logits_node(const Graph *g)
{
	for (int i = 0; i < g->nout; i++)
		if (!strcmp(g->out_name[i], "logits"))
			return g->out[i];
	return -1;
}

int engine_open(Engine **out, const Graph *g, const char *weights, const EngineOpts *o, char *err, size_t len)
{
	*out = NULL;
	int logits = logits_node(g);
	if (logits < 0 || g->node[logits].ndim != 2 || g->node[logits].dim[1] <= 0)
		return seterr(err, len, "the plan has no output 'logits' of shape [T, vocab]");
	const char *tps = graph_meta(g, "tp");
	int tp = tps ? atoi(tps) : 1;
	if (tp < 1 || tp > 8)
		return seterr(err, len, "tp %d in the plan is outside 1..8", tp);
	Engine *e = calloc(1, sizeof *e);
	if (!e)
		return seterr(err, len, "out of memory");
	*out = e;
	e->g = g, e->o = *o, e->tp = tp, e->logits = logits, e->V = g->node[logits].dim[1];
	if (e->o.slots < 1)
		e->o.slots = 1;
	if (e->o.slots > ENGINE_MAX_SLOTS)
		return seterr(err, len, "%d sequences at once; at most %d", e->o.slots, ENGINE_MAX_SLOTS);
	if (e->o.chunk < 1)
		e->o.chunk = 1;
	e->maxT = e->o.chunk > e->o.slots ? e->o.chunk : e->o.slots;
	if (o->cuda) {
		GpuOpts go = {.temp = o->temp, .top_k = o->top_k, .top_p = o->top_p, .seed = o->seed, .progress = o->progress,
		              .keep_logits = o->keep_logits, .batch = e->o.slots, .pdl = o->pdl,
		              .no_lt = o->no_lt, .decode = o->decode, .l2_prefetch = o->l2_prefetch, .fit_min = o->fit_min};
		RanksOpts ro = {.timeout = o->timeout > 0 ? o->timeout : 60};
		if (ranks_opts_from_env(&ro, tp, err, len))
			return -1;
		if (ranks_open(&e->R, g, weights, e->maxT, o->max_seq, &go, &ro, err, len))
			return -1;
		e->o.max_seq = ranks_max_seq(e->R);
		return 0;
	}
	e->row = calloc((size_t)e->o.slots, sizeof *e->row);
	e->tok = malloc(sizeof(int32_t) * (size_t)e->maxT);
	e->pos = malloc(sizeof(int32_t) * (size_t)e->maxT);
	e->seq = malloc(sizeof(int32_t) * (size_t)e->maxT);
	if (!e->row || !e->tok || !e->pos || !e->seq)
		return seterr(err, len, "out of memory");
	for (; e->nx < tp; e->nx++) {
		Exec *x = &e->x[e->nx];
		if (exec_init_slots(x, g, weights, e->maxT, o->max_seq, e->o.slots, e->nx, tp, err, len)) {
			e->nx++; /* exec_free cleans up a half-made executor */
			return -1;
		}
		if (o->round_bf16 && exec_round_bf16(x, err, len)) {
			e->nx++;
			return -1;
		}
		x->nan_ok = o->nan_ok;
	}
	return 0;
}

int64_t engine_vocab(const Engine *e)
{
	return e->V;
}

int64_t engine_max_seq(const Engine *e)
{
	return e->o.max_seq;
}

int64_t engine_chunk(const Engine *e)
{
	return e->o.chunk;
}

int engine_on_gpu(const Engine *e)
{
	return e->R != NULL;
}

/* The CPU's sample of logits row `at` of the last step for step-buffer row r: the row's own sampling, or
** the engine's with seed + slot. */
static int32_t cpu_sample(const Engine *e, int64_t at, const EngineRow *r)
{
	const float *row = (const float *)e->x[0].buf[e->logits] + (size_t)at * (size_t)e->V;
	if (r->own_sampling)
		return ref_sample(row, (int)e->V, r->temp, r->top_k, r->top_p, r->seed, r->step);
	return ref_sample(row, (int)e->V, e->o.temp, e->o.top_k, e->o.top_p, e->o.seed + (uint32_t)r->slot, r->step);
}

int engine_prefill(Engine *e, int slot, const int32_t *ids, int64_t n, int32_t pos0, int32_t *next, float *logits,
                   char *err, size_t len)
{
	if (slot < 0 || slot >= e->o.slots)
		return seterr(err, len, "prefill into sequence slot %d; the caches hold %d", slot, e->o.slots);
	if (n < 1)
		return seterr(err, len, "prefill of %lld tokens", (long long)n);
	for (int64_t off = 0; off < n; off += e->o.chunk) {
		int64_t c = n - off < e->o.chunk ? n - off : e->o.chunk;
		float *lg = logits ? logits + (size_t)off * (size_t)e->V : NULL;
		int32_t p0 = pos0 + (int32_t)off;
		e->prefill_steps++;
		if (e->R) {
			if (ranks_prefill(e->R, slot, ids + off, c, p0, next, lg, err, len))
				return -1;
			continue;
		}
		for (int64_t i = 0; i < c; i++)
			e->pos[i] = p0 + (int32_t)i, e->seq[i] = slot;
		if (exec_step_seq(e->x, e->tp, ids + off, e->pos, e->seq, c, err, len))
			return -1;
		if (lg)
			memcpy(lg, e->x[0].buf[e->logits], sizeof(float) * (size_t)(c * e->V));
		EngineRow *r = &e->row[0];
		r->slot = slot;
		*next = cpu_sample(e, c - 1, r);
		r->token = *next, r->pos = p0 + (int32_t)c, r->step++;
	}
	return 0;
}

/* Row w's four sampler parameters as the GPU's sampler reads them: temperature, top_k, top_p, and a seed
** to which the sampler adds the slot (so an own seed goes in less the slot). */
static void gpu_samp(const Engine *e, const EngineRow *w, float *samp)
{
	uint32_t seed = w->own_sampling ? w->seed - (uint32_t)w->slot : e->o.seed;
	samp[0] = w->own_sampling ? w->temp : e->o.temp;
	samp[1] = (float)(w->own_sampling ? w->top_k : e->o.top_k);
	samp[2] = w->own_sampling ? w->top_p : e->o.top_p;
	memcpy(&samp[3], &seed, 4);
}

int engine_prefill_parts(Engine *e, int np, const EnginePart *p, int32_t *next, float *logits, char *err, size_t len)
{
	if (np < 1 || np > e->o.slots)
		return seterr(err, len, "a prefill of %d sequences; the caches hold %d", np, e->o.slots);
	int64_t T = 0;
	unsigned char used[ENGINE_MAX_SLOTS] = {0};
	for (int k = 0; k < np; k++) {
		const EngineRow *r = &p[k].row;
		if (r->slot < 0 || r->slot >= e->o.slots)
			return seterr(err, len, "prefill part %d into sequence slot %d; the caches hold %d", k, r->slot,
			              e->o.slots);
		if (used[r->slot]++)
			return seterr(err, len, "prefill parts %d and an earlier one share sequence slot %d", k, r->slot);
		if (p[k].n < 1 || r->pos < 0 || p[k].n > e->o.max_seq - r->pos)
			return seterr(err, len, "prefill part %d: %lld tokens at position %d; a slot holds %lld positions", k,
			              (long long)p[k].n, r->pos, (long long)e->o.max_seq);
		T += p[k].n;
	}
	if (T > e->maxT)
		return seterr(err, len, "a prefill step of %lld tokens; at most %lld", (long long)T, (long long)e->maxT);
	int32_t *tok = malloc(sizeof(int32_t) * 3 * (size_t)T), step[ENGINE_MAX_SLOTS];
	int64_t last[ENGINE_MAX_SLOTS];
	float samp[4 * ENGINE_MAX_SLOTS];
	if (!tok)
		return seterr(err, len, "out of memory");
	int32_t *pos = tok + T, *seq = pos + T;
	for (int k = 0, i = 0; k < np; k++) {
		for (int64_t j = 0; j < p[k].n; j++, i++)
			tok[i] = p[k].ids[j], pos[i] = p[k].row.pos + (int32_t)j, seq[i] = p[k].row.slot;
		last[k] = i - 1, step[k] = p[k].row.step;
		gpu_samp(e, &p[k].row, samp + 4 * k);
	}
	int rc;
	e->prefill_steps++;
	if (e->R) {
		rc = ranks_prefill_parts(e->R, T, tok, pos, seq, np, last, step, samp, next, logits, err, len);
	} else {
		rc = exec_step_seq(e->x, e->tp, tok, pos, seq, T, err, len);
		if (!rc && logits)
			memcpy(logits, e->x[0].buf[e->logits], sizeof(float) * (size_t)(T * e->V));
		for (int k = 0; !rc && k < np; k++)
			next[k] = cpu_sample(e, last[k], &p[k].row);
	}
	free(tok);
	return rc;
}

int engine_set_rows(Engine *e, int rows, const EngineRow *r, char *err, size_t len)
{
	if (rows < 1 || rows > e->o.slots)
		return seterr(err, len, "a step of %d rows; the caches hold %d sequences", rows, e->o.slots);
	if (e->R) {
		int32_t tok[ENGINE_MAX_SLOTS], pos[ENGINE_MAX_SLOTS], seq[ENGINE_MAX_SLOTS], step[ENGINE_MAX_SLOTS];
		float samp[4 * ENGINE_MAX_SLOTS];
		for (int i = 0; i < rows; i++) {
			const EngineRow *w = &r[i];
			tok[i] = w->token, pos[i] = w->pos, seq[i] = w->slot, step[i] = w->step;
			gpu_samp(e, w, samp + 4 * i);
		}
		return ranks_set_rows(e->R, rows, tok, pos, seq, step, samp, err, len);
	}
	memcpy(e->row, r, sizeof *r * (size_t)rows);
	return 0;
}

int engine_feed(Engine *e, int32_t tok, char *err, size_t len)
{
	if (e->R)
		return ranks_feed(e->R, tok, err, len);
	e->row[0].token = tok;
	return 0;
}

int engine_decode(Engine *e, int rows, int32_t *next, float *logits, char *err, size_t len)
{
	if (rows < 1 || rows > e->o.slots)
		return seterr(err, len, "a step of %d rows; the caches hold %d sequences", rows, e->o.slots);
	if (e->R)
		return ranks_decode(e->R, rows, next, logits, err, len);
	for (int i = 0; i < rows; i++)
		e->tok[i] = e->row[i].token, e->pos[i] = e->row[i].pos, e->seq[i] = e->row[i].slot;
	if (exec_step_seq(e->x, e->tp, e->tok, e->pos, e->seq, rows, err, len))
		return -1;
	if (logits)
		memcpy(logits, e->x[0].buf[e->logits], sizeof(float) * (size_t)rows * (size_t)e->V);
	for (int i = 0; i < rows; i++) {
		EngineRow *r = &e->row[i];
		next[i] = cpu_sample(e, i, r);
		r->token = next[i], r->pos++, r->step++;
	}
	return 0;
}

int engine_values(Engine *e, const int32_t *ids, const int32_t *pos, int64_t T, float **out, char *err, size_t len)
{
	if (e->R)
		return ranks_step_outputs(e->R, ids, pos, T, out, err, len);
	if (exec_step_ranks(e->x, e->tp, ids, pos, T, err, len))
		return -1;
	const Graph *g = e->g;
	for (int i = 0; i < g->n; i++) {
		const Node *nd = &g->node[i];
		if (!out[i] || nd->kind != VK_ACT)
			continue;
		size_t cnt = engine_numel(e, i, T);
		if (nd->dtype == DT_I32)
			for (size_t k = 0; k < cnt; k++)
				out[i][k] = (float)((const int32_t *)e->x[0].buf[i])[k];
		else
			memcpy(out[i], e->x[0].buf[i], sizeof(float) * cnt);
	}
	return 0;
}

size_t engine_numel(const Engine *e, int id, int64_t T)
{
	return (size_t)node_numel(&e->g->node[id], T, e->o.max_seq);
}

const float *engine_cpu_f32(const Engine *e, int id)
{
	if (e->R || e->g->node[id].dtype == DT_I32)
		return NULL;
	return e->x[0].buf[id];
}

int engine_profile(Engine *e, int steps, int eager, double *us, double *sample_us, int *graph, char *err, size_t len)
{
	if (!e->R)
		return seterr(err, len, "--profile times the GPU's kernels; it needs --device cuda (and a GPU)");
	return ranks_profile(e->R, steps, eager, us, sample_us, graph, err, len);
}

const uint64_t *engine_persist_trace(const Engine *e, int *steps)
{
	*steps = 0;
	return e->R ? gpu_persist_trace(ranks_gpu(e->R, 0), steps) : NULL;
}

size_t engine_weight_bytes(const Engine *e, int id)
{
	if (e->R)
		return gpu_weight_bytes(ranks_gpu(e->R, 0), id);
	return (size_t)node_numel(&e->g->node[id], 0, 0) * 4;
}

void engine_stats(const Engine *e, EngineStats *s)
{
	memset(s, 0, sizeof *s);
	s->tp = e->tp, s->prefill_steps = e->prefill_steps;
	if (!e->R)
		return;
	RanksStats rs;
	ranks_stats(e->R, &rs);
	const GpuStats *g = &rs.gpu;
	s->cuda = 1;
	s->nccl_version = rs.nccl_version, s->peer_pairs = rs.peer_pairs, s->peer_ok = rs.peer_ok, s->p2p_max = rs.p2p_max;
	snprintf(s->nccl_path, sizeof s->nccl_path, "%s", rs.nccl_path);
	snprintf(s->nccl_note, sizeof s->nccl_note, "%s", rs.nccl_note);
	s->graph_launches = g->graph_launches, s->decode_steps = g->decode_steps;
	s->kernels_per_step = g->kernels_per_step, s->collectives_per_step = g->collectives_per_step, s->pdl = g->pdl;
	s->nccl_calls = g->nccl_calls, s->p2p_calls = g->p2p_calls, s->upload_s = g->upload_s;
	s->weight_bytes = g->weight_bytes, s->act_bytes = g->act_bytes, s->cache_bytes = g->cache_bytes;
	snprintf(s->name, sizeof s->name, "%s", g->name);
	s->cc_major = g->cc_major, s->cc_minor = g->cc_minor, s->recompiled = g->recompiled, s->have_lt = g->have_lt;
	s->lt_matmuls = g->lt_matmuls;
	snprintf(s->decode_path, sizeof s->decode_path, "%s", g->decode_path);
}

int engine_stuck(const Engine *e)
{
	return e && e->R && ranks_stuck(e->R);
}

void engine_close(Engine *e)
{
	if (!e)
		return;
	if (e->R && !ranks_stuck(e->R))
		ranks_close(e->R);
	for (int r = 0; r < e->nx; r++)
		exec_free(&e->x[r]);
	free(e->row), free(e->tok), free(e->pos), free(e->seq);
	free(e);
}
