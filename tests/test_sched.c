/*
** tests/test_sched.c — the persistent decode schedule (compiler/passes/sched.c, runtime/core/sched.c) on
** every fixture architecture, f32 and bf16, at several worker counts: each schedule built passes the
** proof (sched_check) and random interleavings (sched_simulate). Then the proof and the simulation are
** shown to catch what they exist for, on schedules broken on purpose: a dropped wait (a launch that may
** read before its producer finished, or overwrite what a reader still needs), a worker list out of launch
** order (deadlock), blocks run twice or never, a cache-sized grid without shares; a forged plan whose
** schedule lost a wait is refused by plan_read. Tensor-parallel plans: the collectives are tasks of the
** one-shot P2P exchange (an allreduce fused into the next launch has none, that launch waiting for its
** source's producer), every user of the mailbox waits for the one before, and a dropped wait past a
** collective is caught. The graphs are compiled here up to the launch list and memory plan (no NVRTC: the
** schedule never reads the cubin).
*/
#include "check.h"
#include "glm.h"
#include "passes.h"
#include "weights.h"

#include <string.h>
#include <unistd.h>
#include <zlib.h>

/* Compile models/MODEL.lua on fixture FIX (../shared/fixtures/hf) up to the memory plan, as glmc does. */
static int build(Graph *g, const char *model, const char *fix, int bf16, int tp, char *err, size_t len)
{
	char mpath[128], wpath[256];
	snprintf(mpath, sizeof mpath, "models/%s.lua", model);
	snprintf(wpath, sizeof wpath, "../shared/fixtures/hf/%s", fix);
	Weights w;
	if (weights_open(&w, wpath, err, len))
		return -1;
	ModelMeta mm = {.w = &w};
	graph_set_meta(g, "tp", "1");
	int act = bf16 ? DT_BF16 : DT_F32;
	int rc = front_run(g, arena_strdup(g->A, mpath), "models/lib", &mm, err, len) /* the nodes keep the path */ || verify(g, err, len) ||
	         bind_weights(g, &w, 0, NULL, err, len) || partition(g, tp, NULL, err, len) || verify(g, err, len) ||
	         fuse(g, 1, act) || emit_cuda(g, "sm_90", act, 0, NULL, err, len) || memplan(g, 1, err, len);
	weights_close(&w);
	return rc ? -1 : 0;
}

/* A copy of s with its own tables (arena), so a test can break it without touching the original. */
static Sched sched_copy(Arena *A, const Sched *s)
{
	Sched c = *s;
	size_t nw = (size_t)s->wait_off[s->nl];
	c.ntask = arena_alloc(A, sizeof(int32_t) * (size_t)(s->nl + 1));
	c.share = arena_alloc(A, (size_t)s->nl + 1);
	c.wait_off = arena_alloc(A, sizeof(int32_t) * (size_t)(s->nl + 1));
	c.wait = arena_alloc(A, sizeof(int32_t) * (nw + 1));
	c.first = arena_alloc(A, sizeof(int32_t) * (size_t)(s->nworker + 1));
	c.task = arena_alloc(A, sizeof(SchedTask) * (size_t)(s->ntask_all + 1));
	memcpy(c.ntask, s->ntask, sizeof(int32_t) * (size_t)s->nl);
	memcpy(c.share, s->share, (size_t)s->nl);
	memcpy(c.wait_off, s->wait_off, sizeof(int32_t) * (size_t)(s->nl + 1));
	memcpy(c.wait, s->wait, sizeof(int32_t) * nw);
	memcpy(c.first, s->first, sizeof(int32_t) * (size_t)(s->nworker + 1));
	memcpy(c.task, s->task, sizeof(SchedTask) * (size_t)s->ntask_all);
	return c;
}

/* Launch j's waits removed from c (the later lists shift down). */
static void drop_waits(Sched *c, int j)
{
	int n = c->wait_off[j + 1] - c->wait_off[j];
	memmove(c->wait + c->wait_off[j], c->wait + c->wait_off[j + 1],
	        sizeof(int32_t) * (size_t)(c->wait_off[c->nl] - c->wait_off[j + 1]));
	for (int i = j + 1; i <= c->nl; i++)
		c->wait_off[i] -= n;
}

static int has(const char *s, const char *sub)
{
	return strstr(s, sub) != NULL;
}

/* Every fixture, both activation types, three worker counts: built, proved, simulated. */
static void test_fixtures(void)
{
	static const char *fx[][2] = {{"llama", "llama"},           {"qwen3", "qwen3"},
	                              {"qwen3_moe", "qwen3_moe"},   {"glm4_moe", "glm4_moe"},
	                              {"glm4_moe_lite", "glm4_moe_lite"}, {"deepseek_v3", "deepseek_v3"},
	                              {"glm5", "glm_moe_dsa"}};
	static const int workers[][2] = {{132, 2}, {7, 1}, {1, 1}};
	for (size_t f = 0; f < sizeof fx / sizeof fx[0]; f++)
		for (int bf = 0; bf < 2; bf++) {
			Arena A = {0};
			Graph g;
			graph_init(&g, &A);
			char err[512] = "", name[128];
			snprintf(name, sizeof name, "%s %s", fx[f][1], bf ? "bf16" : "f32");
			if (build(&g, fx[f][0], fx[f][1], bf, 1, err, sizeof err)) {
				check(0, name, "compile: %s", err);
				arena_free(&A);
				continue;
			}
			for (size_t k = 0; k < sizeof workers / sizeof workers[0]; k++) {
				char n2[200];
				snprintf(n2, sizeof n2, "%s: schedule on %d x %d workers built, proved, simulated", name,
				         workers[k][0], workers[k][1]);
				int ok = !sched_build(&g, 1, workers[k][0], workers[k][1], err, sizeof err);
				const Sched *s = ok ? &g.cuda.sched[g.cuda.nsched - 1] : NULL;
				ok = ok && !sched_check(&g, s, err, sizeof err) && !sched_simulate(&g, s, 7 + k, 40, err, sizeof err);
				/* the step's launches all present, each worker busy when there are tasks enough */
				int used = 0, tasks = 0;
				for (int i = 0; ok && i < g.cuda.nl; i++) {
					int us;
					used += sched_launch_blocks(&g, i, 1, &us) > 0;
					tasks += s->ntask[i];
				}
				check(ok && used > 5 && tasks == s->ntask_all && (s->nworker == 1 || s->first[1] > 0), n2,
				      "%s (used %d launches, %d tasks)", err, used, tasks);
			}
			arena_free(&A);
		}
}

/* The plan at path with random bytes of its last `tail` bytes (the schedule) changed and the checksum
** sealed again, so plan_read's schedule parser and sched_check see every kind of garbage: each read
** must end in a plan or a one-line error, never a crash or an out-of-bounds read (ASan builds see those). */
static void fuzz_schedule(const char *path, size_t tail)
{
	FILE *f = fopen(path, "rb");
	unsigned char *p = NULL;
	long n = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
	if (n > 24 && (p = malloc((size_t)n)) && !fseek(f, 0, SEEK_SET) && fread(p, 1, (size_t)n, f) == (size_t)n) {
		char fz[] = "/tmp/glm_schedfz_XXXXXX";
		int fd = mkstemp(fz), refused = 0, rounds = getenv("SCHED_FUZZ_ROUNDS") ? atoi(getenv("SCHED_FUZZ_ROUNDS")) : 3000;
		close(fd);
		uint64_t x = 0x5eed;
		unsigned char *q = malloc((size_t)n);
		size_t from = (size_t)n - 24 > tail ? (size_t)n - tail : 24;
		for (int r = 0; r < rounds; r++) {
			memcpy(q, p, (size_t)n);
			for (int k = 0; k < 1 + r % 4; k++) {
				x ^= x << 13, x ^= x >> 7, x ^= x << 17;
				q[from + x % ((size_t)n - from)] ^= (unsigned char)(1u << (x >> 40) % 8);
			}
			uint32_t crc = (uint32_t)crc32_z(0L, q + 24, (size_t)n - 24);
			memcpy(q + 12, &crc, 4);
			FILE *o = fopen(fz, "wb");
			fwrite(q, 1, (size_t)n, o);
			fclose(o);
			Arena A = {0};
			Graph g;
			graph_init(&g, &A);
			char err[512];
			refused += plan_read(&g, fz, err, sizeof err) != 0;
			arena_free(&A);
		}
		free(q);
		unlink(fz);
		check(refused > rounds / 2, "schedule fuzz: mutated schedules read without a crash, most refused",
		      "%d of %d refused", refused, rounds);
	} else
		check(0, "schedule fuzz", "cannot read %s", path);
	if (f)
		fclose(f);
	free(p);
}

/* A correct schedule broken on purpose: the proof and the simulation each say what broke. */
static void test_broken(void)
{
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	char err[512] = "";
	if (build(&g, "llama", "llama", 0, 1, err, sizeof err) || sched_build(&g, 1, 16, 1, err, sizeof err)) {
		check(0, "broken schedules: the llama schedule", "%s", err);
		arena_free(&A);
		return;
	}
	const Sched *s = &g.cuda.sched[0];
	/* 1. a dropped wait: the last launch that waits for anything starts unordered */
	int j = -1;
	for (int i = 0; i < s->nl; i++)
		if (s->wait_off[i + 1] > s->wait_off[i])
			j = i;
	Sched c = sched_copy(&A, s);
	drop_waits(&c, j);
	int rc1 = sched_check(&g, &c, err, sizeof err);
	check(rc1 && has(err, "may run before") && has(err, "touch the same memory"), "a dropped wait: the proof names the pair",
	      "rc %d: %s", rc1, err);
	int rc2 = sched_simulate(&g, &c, 3, 40, err, sizeof err);
	check(rc2 && has(err, "starts while launch"), "a dropped wait: a random interleaving runs into it", "rc %d: %s",
	      rc2, err);
	/* 2. a worker's list out of launch order: the proof refuses it; run as it is, it deadlocks */
	c = sched_copy(&A, s);
	int w = -1;
	for (int v = 0; v < c.nworker && w < 0; v++)
		for (int k = c.first[v] + 1; k < c.first[v + 1] && w < 0; k++)
			if (c.task[k].launch != c.task[c.first[v]].launch)
				w = v, c.task[c.first[v]] = s->task[k], c.task[k] = s->task[c.first[v]];
	rc1 = sched_check(&g, &c, err, sizeof err);
	check(w >= 0 && rc1 && has(err, "must be in launch order"), "a list out of launch order: the proof refuses it",
	      "rc %d: %s", rc1, err);
	rc2 = sched_simulate(&g, &c, 3, 4, err, sizeof err);
	check(rc2 && has(err, "deadlock"), "a list out of launch order: the interleavings deadlock", "rc %d: %s", rc2, err);
	/* 3. a block run twice, and one never */
	c = sched_copy(&A, s);
	int t = -1;
	for (int k = 0; k < c.ntask_all && t < 0; k++)
		if (c.task[k].bhi - c.task[k].blo == 1 && c.ntask[c.task[k].launch] > 1 && c.task[k].blo > 0)
			t = k;
	c.task[t].blo--;
	rc1 = sched_check(&g, &c, err, sizeof err);
	check(rc1 && has(err, "run twice"), "a block in two tasks: refused", "rc %d: %s", rc1, err);
	c.task[t].blo++, c.task[t].bhi++;
	rc1 = sched_check(&g, &c, err, sizeof err);
	check(rc1 && (has(err, "belong to no task") || has(err, "cover")), "a block in no task: refused", "rc %d: %s", rc1,
	      err);
	/* 4. a wait on a later launch */
	c = sched_copy(&A, s);
	c.wait[c.wait_off[j]] = j;
	rc1 = sched_check(&g, &c, err, sizeof err);
	check(rc1 && has(err, "not an earlier launch"), "a wait on itself: refused", "rc %d: %s", rc1, err);
	/* 5. the plan file: a schedule that lost a wait is refused on reading, the one glmc built is not */
	char path[] = "/tmp/glm_sched_XXXXXX";
	int fd = mkstemp(path);
	close(fd);
	unsigned char pc[200]; /* the persistent kernel's program and cubin ride along (plan format 14) */
	for (size_t k = 0; k < sizeof pc; k++)
		pc[k] = (unsigned char)(k * 37 + 11);
	g.cuda.psource = "/* the persistent program */", g.cuda.pcubin = pc, g.cuda.pcubin_size = sizeof pc;
	int wr = plan_write(&g, path, err, sizeof err);
	Arena B = {0};
	Graph r;
	graph_init(&r, &B);
	err[0] = 0;
	int rd = wr ? -1 : plan_read(&r, path, err, sizeof err);
	int same = !wr && !rd && r.cuda.nsched == 1 && r.cuda.sched[0].ntask_all == s->ntask_all;
	for (int k = 0; same && k < s->ntask_all; k++) {
		const SchedTask *a = &r.cuda.sched[0].task[k], *b = &s->task[k];
		same = a->launch == b->launch && a->blo == b->blo && a->bhi == b->bhi && a->bytes == b->bytes;
	}
	check(same &&
	      !memcmp(r.cuda.sched[0].wait, s->wait, sizeof(int32_t) * (size_t)s->wait_off[s->nl]),
	      "the schedule round-trips through the plan file", "write %d read %d, %d schedules: %s", wr, rd, r.cuda.nsched,
	      err);
	check(!wr && !rd && r.cuda.psource && !strcmp(r.cuda.psource, g.cuda.psource) && r.cuda.pcubin_size == sizeof pc &&
	          !memcmp(r.cuda.pcubin, pc, sizeof pc),
	      "the persistent kernel's program and cubin round-trip", "cubin %zu bytes", r.cuda.pcubin_size);
	fuzz_schedule(path, (size_t)(s->nl * 13 + s->nworker * 4 + s->ntask_all * 20 + 64) + sizeof pc + 64);
	c = sched_copy(&A, s);
	drop_waits(&c, j);
	g.cuda.sched = &c;
	wr = plan_write(&g, path, err, sizeof err);
	arena_free(&B);
	graph_init(&r, &B);
	rd = wr ? 0 : plan_read(&r, path, err, sizeof err);
	check(!wr && rd && has(err, "invalid persistent schedule") && has(err, "may run before"),
	      "a plan whose schedule lost a wait is refused", "write %d read %d: %s", wr, rd, err);
	unlink(path);
	arena_free(&B);
	arena_free(&A);
}

/* Whether launch j reaches launch i (i < j) through s's waits. */
static int reaches(const Sched *s, int j, int i)
{
	for (int k = s->wait_off[j]; k < s->wait_off[j + 1]; k++)
		if (s->wait[k] == i || (s->wait[k] > i && reaches(s, s->wait[k], i)))
			return 1;
	return 0;
}

/* Tensor-parallel plans: the collectives as P2P tasks, proved and simulated; the mailbox's users in order;
** the waits across collectives still matter. */
static void test_tp(void)
{
	static const char *fx[][2] = {{"llama", "llama"}, {"qwen3_moe", "qwen3_moe"}, {"glm4_moe_lite", "glm4_moe_lite"}};
	for (size_t f = 0; f < sizeof fx / sizeof *fx; f++)
		for (int tp = 2; tp <= 4; tp += 2) {
			Arena A = {0};
			Graph g;
			graph_init(&g, &A);
			char err[512] = "", name[200];
			int rc = build(&g, fx[f][0], fx[f][1], 0, tp, err, sizeof err);
			rc = rc ? rc : sched_build(&g, 1, 132, 2, err, sizeof err);
			rc = rc ? rc : sched_check(&g, &g.cuda.sched[0], err, sizeof err);
			rc = rc ? rc : sched_simulate(&g, &g.cuda.sched[0], 0x7e, 16, err, sizeof err);
			snprintf(name, sizeof name, "%s tp %d: the schedule is built, proved and simulated", fx[f][0], tp);
			check(!rc, name, "%s", err);
			if (rc) {
				arena_free(&A);
				continue;
			}
			const Sched *s = &g.cuda.sched[0];
			int *seg = malloc(sizeof(int) * (size_t)g.cuda.nl), fused = 0, tasked = 0, bad_tasks = 0, crossing = 0;
			int users = 0, unordered = 0, prev = -1;
			sched_segments(&g, 1, seg);
			for (int i = 0; i < g.cuda.nl; i++) {
				const Launch *l = &g.cuda.l[i];
				int used = l->tmin <= 1 && l->tmax >= 1, p2p = 0;
				for (int k = 0; k < l->narg; k++)
					p2p |= l->arg[k].kind == KA_P2P;
				if (used && l->kind != LK_KERNEL) {
					int64_t want = l->inside_next ? 0 : sched_coll_blocks(sched_coll_bytes(&g, i, 1));
					fused += l->inside_next, tasked += !l->inside_next && s->ntask[i] > 0;
					bad_tasks += (l->inside_next ? s->ntask[i] != 0 : s->ntask[i] != (int)(want < 264 ? want : 264));
				}
				if (used && s->ntask[i] && (p2p || l->kind != LK_KERNEL)) { /* the mailbox's users, in step order */
					unordered += prev >= 0 && !reaches(s, i, prev);
					prev = i, users++;
				}
				for (int k = s->wait_off[i]; k < s->wait_off[i + 1]; k++)
					crossing += seg[s->wait[k]] != seg[i];
			}
			snprintf(name, sizeof name, "%s tp %d: %d allreduces inside the next launch, %d collectives as P2P tasks, "
			         "the %d users of the mailbox each after the one before, %d waits across collectives", fx[f][0], tp,
			         fused, tasked, users, crossing);
			check(fused >= 2 && tasked >= 1 && !bad_tasks && users == fused + tasked && !unordered && crossing > 0, name,
			      "fused %d, tasked %d, wrong task counts %d, users %d, unordered %d, crossing %d", fused, tasked,
			      bad_tasks, users, unordered, crossing);
			/* a launch past the first collective with the most waits loses them: the proof must still name a pair */
			int j = -1;
			for (int i = 0; i < g.cuda.nl; i++)
				if (seg[i] > 0 && s->wait_off[i + 1] - s->wait_off[i] > (j < 0 ? 0 : s->wait_off[j + 1] - s->wait_off[j]))
					j = i;
			if (j >= 0) {
				Sched c = sched_copy(&A, s);
				drop_waits(&c, j);
				rc = sched_check(&g, &c, err, sizeof err);
				int rs = sched_simulate(&g, &c, 5, 64, err + 256, sizeof err - 256);
				snprintf(name, sizeof name, "%s tp %d: launch %d (past %d collectives) without its waits is caught by the "
				         "proof and the simulation", fx[f][0], tp, j, seg[j]);
				check(rc && has(err, "may run before") && rs && has(err + 256, "touches the same memory"), name,
				      "check %d (%s), simulate %d (%s)", rc, err, rs, err + 256);
			} else
				check(0, "a launch with waits after the first collective", "%s tp %d: none", fx[f][0], tp);
			free(seg);
			arena_free(&A);
		}
}

/* What a persistent kernel cannot hold is refused by name; DSA's cache-sized grid becomes shares. */
static void test_refusals(void)
{
	Arena A = {0};
	Graph g;
	graph_init(&g, &A);
	char err[512] = "";
	int rc, sh = 0;
	rc = build(&g, "glm5", "glm_moe_dsa", 0, 1, err, sizeof err) || sched_build(&g, 1, 132, 2, err, sizeof err);
	for (int i = 0; !rc && i < g.cuda.nl; i++)
		sh += g.cuda.sched[0].share[i];
	check(!rc && sh >= 1, "DSA: the indexer's cache-sized grid is scheduled in shares", "rc %d, %d share launches: %s",
	      rc, sh, err);
	if (!rc && sh) {
		Sched c = sched_copy(&A, &g.cuda.sched[0]);
		for (int i = 0; i < c.nl; i++)
			c.share[i] = 0;
		rc = sched_check(&g, &c, err, sizeof err);
		check(rc && has(err, "sized by the cache"), "DSA: shares dropped are refused", "rc %d: %s", rc, err);
	}
	arena_free(&A);
}

int main(void)
{
	test_fixtures();
	test_broken();
	test_tp();
	test_refusals();
	return check_failures != 0;
}
