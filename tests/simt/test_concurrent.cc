/*
** tests/simt/test_concurrent.cc — simt_launch_concurrent (tests/simt/simt.h), the mode a persistent kernel
** (issue 47, ops/persist.cuh) runs in: every block's fibers alive together, blocks waiting on counters
** other blocks publish, shared-memory work inside simt_block_enter / simt_block_leave.
**
** - ping-pong: block 0 waits for block 1 (a later block) through a plain-load spin, 50 rounds; the same
**   1000 rounds (no rendezvous between hand-offs: not a deadlock); the same kernel under the sequential
**   simt_launch (in a child process) ends with simt's deadlock report, not a hang; a wait loop that counts
**   its turns (its state never repeats) is reported too, after SIMT_STALL_SWEEPS sweeps;
** - a chain of 12 blocks, each waiting for the next one's store, and of 64 blocks of 128 (8192 fibers);
** - a toy persistent kernel over real templates: three k_gemv_fused stages (ops/fused.cuh: RMSNorm + GEMV,
**   GEMV + residual in place, RMSNorm + GEMV, each stage's input the previous one's whole output) cut into
**   tasks of up to 3 groups, dealt to 3 or 4 worker blocks that wait (acquire loads, __nanosleep) on
**   per-stage counters and publish with atomicAdd, as persist.cuh does; compared bit for bit with the
**   three kernels launched normally in simt, and with ops/ref.c (rel-L2 <= 1e-5, as test_gemv);
** - the same without the section: the workers' bodies interleave and the results differ (the mode does
**   interleave blocks, and the section is what makes shared memory safe);
** - a worker list out of order (a worker's stage-1 task before its own stage-0 one): reported as a deadlock
**   (-1), after which the good schedule runs correctly again;
** - named barriers (simt_bar_sync) over part of a block; a grid over SIMT_MAX_FIBERS threads refused.
** Prints "ok - NAME" / "FAIL - NAME: detail" and "N passed, N failed".
*/
#include "simt.h"

#include "../../ops/kernels.cuh"
#include "../../ops/fused.cuh"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "../tap.h"

extern "C" {
#include "../../ops/ref.h"
}

static uint64_t rng = 0x2545f4914f6cdd1dull;

static float frand(float lo, float hi)
{
	rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
	return lo + (hi - lo) * (float)((rng >> 11) * (1.0 / 9007199254740992.0));
}

static std::vector<float> rnd(size_t n, float lo = -1, float hi = 1)
{
	std::vector<float> v(n);
	for (auto &x : v)
		x = frand(lo, hi);
	return v;
}

/* Block 0 and block 1 take turns on *flag (plain loads and stores: no volatile, no atomics), block 1
** first, rounds times each; log records who moved at each step. */
static void ping_pong(unsigned *flag, int *log, int rounds)
{
	if (threadIdx.x != 0)
		return;
	unsigned me = blockIdx.x;
	for (int i = 0; i < rounds; i++) {
		unsigned want = 2u * i + (me == 0 ? 1u : 0u);
		while (*flag != want)
			simt_spin();
		log[want] = (int)me;
		*flag = want + 1;
	}
}

/* Runs ping_pong sequentially in a child (which would wait forever for block 1): true when the child
** ended with simt's deadlock report on stderr and SIGABRT. */
static bool sequential_reports_deadlock(std::string &why)
{
	int fd[2];
	if (pipe(fd)) {
		why = "pipe failed";
		return false;
	}
	fflush(stdout); /* the child must not print this process's buffered checks again */
	pid_t pid = fork();
	if (pid < 0) {
		why = "fork failed";
		return false;
	}
	if (pid == 0) {
		dup2(fd[1], 2);
		close(fd[0]);
		alarm(60); /* a hang ends as SIGALRM, a failure */
		unsigned flag = 0;
		int log[8];
		simt_launch(dim3{2, 1, 1}, dim3{32, 1, 1}, [&] { ping_pong(&flag, log, 4); });
		_exit(0);
	}
	close(fd[1]);
	std::string err;
	char buf[512];
	ssize_t k;
	while ((k = read(fd[0], buf, sizeof buf)) > 0)
		err.append(buf, (size_t)k);
	close(fd[0]);
	int st = 0;
	if (waitpid(pid, &st, 0) != pid) {
		why = "waitpid failed";
		return false;
	}
	bool ok = WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && err.find("simt: deadlock") != std::string::npos;
	why = fmt("status %#x, stderr: %s", st, err.c_str());
	return ok;
}

/* Thread 0 waits forever for a flag nothing sets, counting its turns; the others wait at the barrier. (A
** count kept only in memory would leave its state the same: reported after SIMT_SPIN_SWEEPS.) */
static void test_counting_spin()
{
	unsigned flag = 0, turns = 0;
	fprintf(stderr, "(the deadlock report below is expected)\n");
	int rc = simt_launch_concurrent(dim3{1, 1, 1}, dim3{32, 1, 1}, [&] {
		if (threadIdx.x == 0)
			for (unsigned n = 1; !__atomic_load_n(&flag, __ATOMIC_ACQUIRE); n++) {
				turns = n; /* n, in the fiber's registers or stack, changes its state every turn */
				simt_spin();
			}
		__syncthreads();
	});
	check(rc == -1 && turns >= SIMT_STALL_SWEEPS, "a wait loop that counts its turns: deadlock reported",
	      fmt("rc %d after %u turns", rc, turns));
}

static void test_ping_pong()
{
	const int rounds = 1000;
	unsigned flag = 0;
	std::vector<int> log(2 * rounds, -1);
	int rc = simt_launch_concurrent(dim3{2, 1, 1}, dim3{64, 1, 1}, [&] { ping_pong(&flag, log.data(), rounds); });
	bool alt = flag == 2u * rounds;
	for (int i = 0; i < 2 * rounds; i++)
		alt = alt && log[i] == (i & 1 ? 0 : 1);
	check(rc == 0 && alt, "ping-pong: block 0 waits on block 1, 1000 rounds in turn with no rendezvous",
	      fmt("rc %d, flag %u", rc, flag));
	std::string why;
	check(sequential_reports_deadlock(why), "ping-pong under the sequential simt_launch: deadlock reported, no hang",
	      why);
}

/* Block k of nb (nt threads each) waits for block k+1's store (the last block starts): the order is the
** reverse of the blocks'. */
static void test_chain(int nb, int nt)
{
	std::vector<unsigned> done(nb + 1, 0);
	std::vector<int> order;
	done[nb] = 1;
	int rc = simt_launch_concurrent(dim3{(unsigned)nb, 1, 1}, dim3{(unsigned)nt, 1, 1}, [&] {
		int k = (int)blockIdx.x;
		if (threadIdx.x == 0) {
			while (!__atomic_load_n(&done[k + 1], __ATOMIC_ACQUIRE))
				__nanosleep(64);
			order.push_back(k);
			__atomic_store_n(&done[k], 1u, __ATOMIC_RELEASE);
		}
		__syncthreads();
	});
	bool ok = rc == 0 && (int)order.size() == nb;
	for (int i = 0; ok && i < nb; i++)
		ok = order[i] == nb - 1 - i;
	check(ok, fmt("chain of %d blocks of %d threads, each waiting on the next", nb, nt),
	      fmt("rc %d, %zu done", rc, order.size()));
}

/* The toy decode: a = W1·rmsnorm(x, n1); y = W2·a + r; z = W3·rmsnorm(y, n3). */
enum { TK = 96, TN1 = 48, TN2 = 64, TN3 = 40, TRB = 2, TBLOCK = 64 };
static const float TEPS = 1e-5f;

struct Toy {
	std::vector<float> x, n1, w1, a, w2, r, y, n3, w3, z;
};

/* One persistent task: groups [blo, bhi) of a stage. */
struct Task {
	int stage, blo, bhi;
};

static int stage_groups(int s)
{
	return (s == 0 ? TN1 : s == 1 ? TN2 : TN3) / TRB;
}

/* Block blockIdx.x (a group) of stage s, with gridDim.x its grid: the kernel the plain launch runs. */
static void toy_body(Toy &t, int s)
{
	if (s == 0)
		k_gemv_fused<float, float, float, GEMV_PRO_RMSNORM, true, 0, TRB, 1>(
		    t.a.data(), nullptr, nullptr, nullptr, t.w1.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
		    nullptr, t.x.data(), nullptr, t.n1.data(), nullptr, nullptr, 1, TK, TN1, 0, 0, 0, TEPS, 1, 1, 1, 1);
	else if (s == 1)
		k_gemv_fused<float, float, float, GEMV_PRO_NONE, false, GEMV_EPI_RES, TRB, 1>(
		    t.y.data(), nullptr, nullptr, nullptr, t.w2.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
		    nullptr, t.a.data(), nullptr, (const float *)nullptr, nullptr, t.y.data(), 1, TN1, TN2, 0, 0, 0, TEPS, 1, 1,
		    1, 1);
	else
		k_gemv_fused<float, float, float, GEMV_PRO_RMSNORM, true, 0, TRB, 1>(
		    t.z.data(), nullptr, nullptr, nullptr, t.w3.data(), nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
		    nullptr, t.y.data(), nullptr, t.n3.data(), nullptr, nullptr, 1, TN2, TN3, 0, 0, 0, TEPS, 1, 1, 1, 1);
}

/* Fresh inputs (outputs NaN; y starts as the residual r, in place as plans run it). */
static Toy toy_make()
{
	Toy t;
	t.x = rnd(TK, -2, 2), t.n1 = rnd(TK, 0.5f, 1.5f), t.w1 = rnd((size_t)TN1 * TK);
	t.w2 = rnd((size_t)TN2 * TN1), t.r = rnd(TN2), t.n3 = rnd(TN2, 0.5f, 1.5f), t.w3 = rnd((size_t)TN3 * TN2);
	return t;
}

static void toy_reset(Toy &t)
{
	t.a.assign(TN1, NAN), t.y = t.r, t.z.assign(TN3, NAN);
}

/* The tasks of the three stages in order, up to 3 groups each, dealt round robin to nw workers (rev: from
** the last worker down): per worker its list (by stage, so no worker waits on itself). */
static std::vector<std::vector<Task>> toy_deal(int nw, bool rev)
{
	std::vector<std::vector<Task>> lists(nw);
	int j = 0;
	for (int s = 0; s < 3; s++)
		for (int b = 0; b < stage_groups(s); b += 3, j++) {
			int e = b + 3 < stage_groups(s) ? b + 3 : stage_groups(s);
			lists[rev ? nw - 1 - j % nw : j % nw].push_back(Task{s, b, e});
		}
	return lists;
}

/* The persistent kernel: worker blockIdx.x walks its list; thread 0 waits until the previous stage has
** counted all its tasks (acquire loads), takes the section (section: else the bodies interleave), sets the
** task's grid; the block runs the task's groups as blocks of the stage's kernel with a block barrier after
** each; thread 0 puts the grid back, leaves the section and publishes (fence, atomicAdd). */
static int toy_persistent(Toy &t, const std::vector<std::vector<Task>> &lists, bool section)
{
	int nw = (int)lists.size();
	unsigned count[3] = {0, 0, 0}, ntask[3] = {0, 0, 0};
	for (auto &l : lists)
		for (const Task &k : l)
			ntask[k.stage]++;
	return simt_launch_concurrent(dim3{(unsigned)nw, 1, 1}, dim3{TBLOCK, 1, 1}, [&] {
		int w = (int)blockIdx.x, tid = (int)threadIdx.x;
		for (const Task &k : lists[w]) {
			if (tid == 0) {
				if (k.stage > 0)
					while (__atomic_load_n(&count[k.stage - 1], __ATOMIC_ACQUIRE) < ntask[k.stage - 1])
						__nanosleep(64);
				if (section)
					simt_block_enter();
				gridDim.x = (unsigned)stage_groups(k.stage);
			}
			__syncthreads();
			for (int b = k.blo; b < k.bhi; b++) {
				blockIdx.x = (unsigned)b;
				toy_body(t, k.stage);
				__syncthreads();
			}
			blockIdx.x = (unsigned)w;
			if (tid == 0) {
				gridDim.x = (unsigned)nw;
				if (section)
					simt_block_leave();
				__threadfence();
				atomicAdd(&count[k.stage], 1u);
			}
		}
	});
}

static double rel_l2(const std::vector<float> &y, const std::vector<float> &want)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < want.size(); i++) {
		double d = (double)y[i] - want[i];
		num += d * d, den += (double)want[i] * want[i];
	}
	return den > 0 && y.size() == want.size() ? sqrt(num / den) : INFINITY;
}

static bool same_bits(const Toy &p, const Toy &q)
{
	return !memcmp(p.a.data(), q.a.data(), TN1 * 4) && !memcmp(p.y.data(), q.y.data(), TN2 * 4) &&
	       !memcmp(p.z.data(), q.z.data(), TN3 * 4);
}

static void test_toy()
{
	Toy t = toy_make();
	/* ops/ref.c */
	std::vector<float> h(TK), ra(TN1), ry(TN2), h3(TN2), rz(TN3);
	ref_rmsnorm(h.data(), t.x.data(), t.n1.data(), 1, TK, TEPS);
	ref_linear(ra.data(), h.data(), t.w1.data(), NULL, 1, TK, TN1);
	ref_linear(ry.data(), ra.data(), t.w2.data(), NULL, 1, TN1, TN2);
	ref_add(ry.data(), ry.data(), t.r.data(), TN2, TN2);
	ref_rmsnorm(h3.data(), ry.data(), t.n3.data(), 1, TN2, TEPS);
	ref_linear(rz.data(), h3.data(), t.w3.data(), NULL, 1, TN2, TN3);
	/* the three kernels launched one after another in simt */
	Toy plain = t;
	toy_reset(plain);
	for (int s = 0; s < 3; s++)
		simt_launch(dim3{(unsigned)stage_groups(s), 1, 1}, dim3{TBLOCK, 1, 1}, [&] { toy_body(plain, s); });
	double e = fmax(rel_l2(plain.a, ra), fmax(rel_l2(plain.y, ry), rel_l2(plain.z, rz)));
	check(e <= 1e-5, "toy stages launched one by one against ops/ref.c", fmt("rel-L2 %.3g", e));

	for (int nw = 3; nw <= 4; nw++)
		for (int rev = 0; rev < 2; rev++) {
			Toy p = t;
			toy_reset(p);
			int rc = toy_persistent(p, toy_deal(nw, rev), true);
			double ep = fmax(rel_l2(p.a, ra), fmax(rel_l2(p.y, ry), rel_l2(p.z, rz)));
			check(rc == 0 && same_bits(p, plain) && ep <= 1e-5,
			      fmt("toy persistent kernel, %d workers%s: bit-equal to the plain launches, ref.c", nw,
			          rev ? " (dealt from the last)" : ""),
			      fmt("rc %d, same bits %d, rel-L2 against ref %.3g", rc, same_bits(p, plain), ep));
		}

	Toy u = t;
	toy_reset(u);
	int rc = toy_persistent(u, toy_deal(4, false), false);
	check(rc == 0 && !same_bits(u, plain), "without the section the workers' bodies interleave (results differ)",
	      fmt("rc %d, same bits %d", rc, same_bits(u, plain)));

	/* worker 0's first stage-0 task moved behind its stage-1 ones: it waits on itself */
	std::vector<std::vector<Task>> bad = toy_deal(4, false);
	Task first = bad[0][0];
	bad[0].erase(bad[0].begin());
	size_t at = 0;
	while (at < bad[0].size() && bad[0][at].stage < 2)
		at++;
	bad[0].insert(bad[0].begin() + (long)at, first);
	Toy d = t;
	toy_reset(d);
	fprintf(stderr, "(the deadlock report below is expected)\n");
	rc = toy_persistent(d, bad, true);
	check(rc == -1, "worker list out of order: reported as a deadlock", fmt("rc %d", rc));

	Toy again = t;
	toy_reset(again);
	rc = toy_persistent(again, toy_deal(4, false), true);
	check(rc == 0 && same_bits(again, plain), "after the deadlock, the good schedule runs correctly again",
	      fmt("rc %d", rc));
}

/* Threads 0..63 of a 128-thread block exchange values through a static (shared) array at named barrier
** 1, while threads 64..127 meet at __syncthreads once the first half is done, in each of 3 blocks. */
static void test_named()
{
	std::vector<int> out(3 * 64, -1);
	int rc = simt_launch_concurrent(dim3{3, 1, 1}, dim3{128, 1, 1}, [&] {
		__shared__ int v[64];
		int tid = (int)threadIdx.x, b = (int)blockIdx.x;
		if (tid == 0)
			simt_block_enter();
		__syncthreads();
		if (tid < 64) {
			v[tid] = 1000 * b + tid;
			simt_bar_sync(1, 64);
			out[b * 64 + tid] = v[63 - tid];
			simt_bar_sync(1, 64);
		}
		__syncthreads();
		if (tid == 0)
			simt_block_leave();
	});
	bool ok = rc == 0;
	for (int b = 0; b < 3; b++)
		for (int i = 0; i < 64; i++)
			ok = ok && out[b * 64 + i] == 1000 * b + 63 - i;
	check(ok, "named barrier over the first 64 threads of 128, 3 blocks", fmt("rc %d", rc));
}

int main()
{
	test_ping_pong();
	test_chain(12, 32);
	test_chain(64, 128); /* SIMT_MAX_FIBERS */
	test_counting_spin();
	test_toy();
	test_named();
	fprintf(stderr, "(the refusal below is expected)\n");
	int rc = simt_launch_concurrent(dim3{65, 1, 1}, dim3{128, 1, 1}, [] {});
	check(rc == -1, "8320 threads over SIMT_MAX_FIBERS refused", fmt("rc %d", rc));
	return finish();
}
