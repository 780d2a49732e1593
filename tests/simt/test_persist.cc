/*
** tests/simt/test_persist.cc — the persistent kernel's worker loop (ops/persist.cuh) on the CPU through
** simt.h: four kernel templates of a decode step (k_embedding, k_rmsnorm, k_linear_gemv with 32 threads in
** 256-thread workers, k_softmax) run as tasks of a hand-made schedule, with the virtual block, the bodies'
** named barrier, the shared-array pool and argument records as emit_cuda_persist writes them, against the
** same templates launched plainly (persist_plain.cc). Three schedules (one worker; two workers, the second
** waiting on the first's counters; three workers alive together, each waiting on another's), each for three steps with every output poisoned before each step, so
** the counters' epochs are exercised; the outputs must equal the plain launches' bit for bit. Then the step
** cut into two launches of the kernel at a launch boundary, as a tensor-parallel step is at its collectives
** (each worker runs its part of the list in each launch, the wait across the cut dropped, only the second
** launch closing the step). And the GEMV's 32-thread body in lanes, eight of its blocks at once in a
** 256-thread worker, each lane with its own barrier and its own part of the shared-array pool.
*/
#include "simt.h"

#define GLM_PERSIST 1
#include "../../ops/persist.cuh"
#include "../../ops/kernels.cuh"

#include <cmath>
#include <vector>

#include "../tap.h"

void persist_plain_step(int T, int V, int C, int N, const float *table, const int *ids, const float *nw, const float *w,
                        float *e, float *h, float *y, float *p);

/* The argument records and bodies, as emit_cuda_persist writes them for the four wrappers. */
struct GlmPA0 { float *a0; const float *a1; const int *a2; int a3; int a4; };
struct GlmPA1 { float *a0; const float *a1; const float *a2; int a3; float a4; };
struct GlmPA2 { float *a0; const float *a1; const float *a2; int a3; int a4; int a5; };
struct GlmPA3 { float *a0; const float *a1; int a2; };

__device__ void glm_persist_run(int launch, const unsigned char *arg, unsigned char *dsm)
{
	(void)dsm;
	switch (launch) {
	case 0: {
		const GlmPA0 *p = (const GlmPA0 *)arg;
		k_embedding<float, float>(p->a0, p->a1, p->a2, p->a3, p->a4);
		return;
	}
	case 1: {
		const GlmPA1 *p = (const GlmPA1 *)arg;
		k_rmsnorm<float, float, true>(p->a0, p->a1, p->a2, p->a3, p->a4);
		return;
	}
	case 2: {
		const GlmPA2 *p = (const GlmPA2 *)arg;
		k_linear_gemv<float, float, false, 1, 1>(p->a0, p->a1, p->a2, nullptr, p->a3, p->a4, p->a5);
		return;
	}
	case 3: {
		const GlmPA3 *p = (const GlmPA3 *)arg;
		k_softmax<float>(p->a0, p->a1, p->a2);
		return;
	}
	}
	__trap();
}

static uint64_t rng = 0x853c49e6748fea9bull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

/* Whether a and b hold the same bits. */
static bool same(const std::vector<float> &a, const std::vector<float> &b)
{
	return a.size() == b.size() && !memcmp(a.data(), b.data(), a.size() * sizeof(float));
}

/* The step over `workers` workers whose task lists are lists[w] (launch, blo, bhi), `steps` times; with cut > 0
** as two launches of the kernel, launches [0, cut) in the first; bodies in up to `lanes` lanes. */
static void run(const char *what, int workers, const std::vector<std::vector<std::array<int, 3>>> &lists, int steps,
                bool concurrent = false, int cut = 0, unsigned lanes = 1)
{
	const int T = 2, V = 40, C = 200, N = 70;
	std::vector<float> table((size_t)V * C), nw(C), w((size_t)N * C);
	for (auto &v : table)
		v = frand(-2, 2);
	for (auto &v : nw)
		v = frand(0.5f, 1.5f);
	for (auto &v : w)
		v = frand(-1, 1);
	std::vector<int> ids = {7, 33};
	std::vector<float> e((size_t)T * C), h(e.size()), y((size_t)T * N), p(y.size());
	std::vector<float> e0(e.size()), h0(h.size()), y0(y.size()), p0(p.size());
	persist_plain_step(T, V, C, N, table.data(), ids.data(), nw.data(), w.data(), e0.data(), h0.data(), y0.data(), p0.data());

	/* records: byte offsets 0, 64, 128, 192 of one blob */
	std::vector<unsigned char> args(256);
	GlmPA0 r0 = {e.data(), table.data(), ids.data(), T, C};
	GlmPA1 r1 = {h.data(), e.data(), nw.data(), C, 1e-5f};
	GlmPA2 r2 = {y.data(), h.data(), w.data(), T, C, N};
	GlmPA3 r3 = {p.data(), y.data(), N};
	memcpy(&args[0], &r0, sizeof r0), memcpy(&args[64], &r1, sizeof r1), memcpy(&args[128], &r2, sizeof r2);
	memcpy(&args[192], &r3, sizeof r3);
	unsigned grid[4][3] = {{(C + 255) / 256, T, 1}, {T, 1, 1}, {N, 1, 1}, {T, 1, 1}}, block[4] = {256, 256, 32, 256};
	std::vector<GlmPTask> task;
	std::vector<int> first = {0};
	unsigned ntask[4] = {0, 0, 0, 0};
	for (auto &l : lists) {
		for (auto &t : l) {
			task.push_back(GlmPTask{t[0], t[1], t[2], 0});
			ntask[t[0]]++;
		}
		first.push_back((int)task.size());
	}
	std::vector<int> wait = {0, 1, 2}; /* each launch waits for the one before */
	std::vector<GlmPLaunch> lt(4);
	for (int i = 0; i < 4; i++) {
		lt[i] = GlmPLaunch{};
		lt[i].arg = 64 * i, lt[i].block = block[i], lt[i].ntask = ntask[i];
		lt[i].pre = i == 2 ? (const unsigned char *)w.data() : nullptr, lt[i].pre_step = (long long)C * 4;
		memcpy(lt[i].grid, grid[i], sizeof grid[i]);
		lt[i].wait_lo = i ? i - 1 : 0, lt[i].wait_hi = i;
		if (cut && i == cut)
			lt[i].wait_lo = lt[i].wait_hi; /* the stream orders it after the first launch */
		lt[i].lanes = 256 / block[i] < lanes ? 256 / block[i] : lanes, lt[i].own = 0, lt[i].pool = 2048;
	}
	/* each worker's part of its list in each launch: mid[w] = its first task of a launch >= cut */
	std::vector<int> mid(workers);
	for (int w = 0; w < workers; w++) {
		mid[w] = first[w];
		while (cut && mid[w] < first[w + 1] && task[mid[w]].launch < cut)
			mid[w]++;
	}
	std::vector<unsigned> count(4, 0);
	GlmPCtl ctl = {0, 0};
	bool ok = true;
	/* the concurrent runs also record the task timeline (glmrun --profile's): every task waits, then runs,
	** and starts only after every task of the launch it waits for ended */
	std::vector<unsigned long long> trace(4 * task.size(), 0);
	for (int s = 0; s < steps && ok; s++) {
		for (auto *v : {&e, &h, &y, &p})
			std::fill(v->begin(), v->end(), NAN);
		int rc = 0;
		for (int seg = 0; seg < (cut ? 2 : 1); seg++) {
			const int *lo = !cut ? first.data() : seg ? mid.data() : first.data(),
			          *hi = !cut ? first.data() + 1 : seg ? first.data() + 1 : mid.data();
			int close = !cut || seg == 1;
			auto body = [&] {
				glm_persist_loop(task.data(), lo, hi, lt.data(), wait.data(), count.data(), &ctl, args.data(), nullptr,
				                 concurrent ? trace.data() : nullptr, close);
			};
			if (concurrent)
				rc |= simt_launch_concurrent(dim3{(unsigned)workers, 1, 1}, dim3{256, 1, 1}, body);
			else
				simt_launch(dim3{(unsigned)workers, 1, 1}, dim3{256, 1, 1}, body);
			if (cut && !seg && ctl.epoch != (unsigned)s) /* the step is not over after its first launch */
				rc = 1;
		}
		ok = rc == 0 && same(e, e0) && same(h, h0) && same(y, y0) && same(p, p0);
		check(ok, fmt("%s, step %d: embedding, rmsnorm, gemv and softmax equal the plain launches'", what, s + 1),
		      fmt("embedding %d rmsnorm %d gemv %d softmax %d", same(e, e0), same(h, h0), same(y, y0), same(p, p0)));
	}
	if (concurrent) {
		bool order = true;
		for (size_t i = 0; i < task.size(); i++) {
			const unsigned long long *a = &trace[4 * i];
			order = order && a[0] && a[0] <= a[1] && a[1] <= a[2] && a[3] == 0;
			for (size_t j = 0; j < task.size(); j++)
				if (task[i].launch > 0 && task[j].launch == task[i].launch - 1)
					order = order && trace[4 * j + 2] <= a[1];
		}
		check(order, fmt("%s: the trace orders wait <= start <= end, each start after its inputs' ends", what), "");
	}
	bool counted = ctl.epoch == (unsigned)steps && ctl.done == 0;
	for (int i = 0; i < 4; i++)
		counted = counted && count[i] == ntask[i] * (unsigned)steps;
	check(counted, fmt("%s: the counters reach ntask per step and the epoch counts the steps", what),
	      fmt("epoch %u done %u counts %u %u %u %u", ctl.epoch, ctl.done, count[0], count[1], count[2], count[3]));
}

int main()
{
	run("one worker", 1, {{{0, 0, 2}, {1, 0, 1}, {1, 1, 2}, {2, 0, 30}, {2, 30, 70}, {3, 0, 2}}}, 3);
	run("two workers", 2, {{{0, 0, 1}, {0, 1, 2}, {1, 0, 2}, {2, 0, 35}}, {{2, 35, 70}, {3, 0, 1}, {3, 1, 2}}}, 3);
	/* all blocks alive together (simt_launch_concurrent): worker 0 starts by waiting on worker 1's embedding,
	** worker 1's GEMV rows on worker 0's norm, and worker 2 on both, as on a GPU */
	run("three concurrent workers", 3, {{{1, 0, 2}, {2, 0, 20}, {3, 0, 1}}, {{0, 0, 2}, {2, 20, 45}}, {{2, 45, 70}, {3, 1, 2}}},
	    3, true);
	/* the same step cut before the GEMV and before the softmax, as collectives would cut it */
	run("three concurrent workers, two launches cut at the GEMV", 3,
	    {{{1, 0, 2}, {2, 0, 20}, {3, 0, 1}}, {{0, 0, 2}, {2, 20, 45}}, {{2, 45, 70}, {3, 1, 2}}}, 3, true, 2);
	run("two workers, two launches cut at the softmax", 2,
	    {{{0, 0, 1}, {0, 1, 2}, {1, 0, 2}, {2, 0, 35}}, {{2, 35, 70}, {3, 0, 1}, {3, 1, 2}}}, 3, false, 3);
	/* the GEMV's 70 blocks of 32 threads as 8 lanes of 256-thread workers (tasks of 20, 25 and 25 blocks: the
	** lanes' last rounds uneven), one worker and three concurrent ones */
	run("one worker, the GEMV in 8 lanes", 1, {{{0, 0, 2}, {1, 0, 1}, {1, 1, 2}, {2, 0, 30}, {2, 30, 70}, {3, 0, 2}}}, 3,
	    false, 0, 8);
	run("three concurrent workers, the GEMV in 8 lanes", 3,
	    {{{1, 0, 2}, {2, 0, 20}, {3, 0, 1}}, {{0, 0, 2}, {2, 20, 45}}, {{2, 45, 70}, {3, 1, 2}}}, 3, true, 0, 8);
	return finish();
}
