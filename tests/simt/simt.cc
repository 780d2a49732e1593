/* tests/simt/simt.cc — the fiber launcher behind simt.h. Fibers are entered once with setcontext and
** switched with _setjmp/_longjmp, which (unlike swapcontext) leave the signal mask alone: no system call
** per switch. A fortified longjmp refuses to jump to another stack, hence the #undef. */
#undef _FORTIFY_SOURCE
#include "simt.h"

#include <sched.h>
#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
SimtWarp *simt_warps;
SimtBarrier *simt_block;
SimtBarrier *simt_named;
int simt_progress;

/* A block's rendezvous: its warps', its __syncthreads and its named barriers. */
struct SimtBlk {
	std::vector<SimtWarp> warps;
	SimtBarrier bar, named[16];
};
static std::vector<SimtBlk> simt_blks; /* simt_launch uses the first; simt_launch_concurrent one per block */

/* Readies block k for a launch of nt threads and returns it. */
static SimtBlk &simt_blk_init(size_t k, int nt)
{
	SimtBlk &B = simt_blks[k];
	B.warps.assign((size_t)nt / 32, SimtWarp{});
	for (SimtWarp &w : B.warps)
		w.bar.init(32);
	B.bar.init(nt);
	for (SimtBarrier &n : B.named)
		n.init(0);
	return B;
}

/* One emulated thread: its context, stack and the indices it runs under. */
struct SimtFiber {
	ucontext_t ctx; /* the entry (simt_body on its stack), used once per launch */
	jmp_buf jb;     /* where it yielded */
	char *stack;
	dim3 tid, bid;
	bool started, done;
	int blk;   /* its block in simt_blks (concurrent launches) */
	bool spin; /* yielded through simt_spin */
	uint64_t state; /* the hash of its registers and stack at its last spin (simt_spin_state) */
};

enum { SIMT_STACK = 256 << 10 }; /* per fiber; the kernels' locals are a few KiB, printf needs more */

static jmp_buf simt_sched;
static std::vector<SimtFiber> simt_fibers;
static SimtFiber *simt_cur;
static const std::function<void()> *simt_fn;
static bool simt_conc;    /* a concurrent launch is running */
static int simt_excl = -1; /* the block holding the shared-memory section, or -1 */
static int simt_spun;     /* some fiber spun in this sweep */
static int simt_moved;    /* some spinning fiber's state changed in this sweep (simt_spin) */

/* After a sweep, with soft and hard the sweeps in a row without progress of either kind: true when the
** launch is deadlocked. Hard progress: a rendezvous reached, a fiber finished, the section taken or left.
** Soft: a spinning fiber whose registers and stack differ from its previous spin's (it left a wait loop
** and did something). Without spinners a sweep with neither is a deadlock; with them SIMT_SPIN_SWEEPS
** (a store made in one sweep is seen by every spinner in the next), or SIMT_STALL_SWEEPS without hard
** progress (a spin loop that counts its turns changes its state every time). */
static bool simt_stuck(int *soft, int *hard)
{
	*hard = simt_progress ? 0 : *hard + 1;
	*soft = simt_progress || simt_moved ? 0 : *soft + 1;
	return *soft >= (simt_spun ? SIMT_SPIN_SWEEPS : 1) || *hard >= SIMT_STALL_SWEEPS;
}

/* A stack of SIMT_STACK bytes over a PROT_NONE guard page, so an overflow faults instead of writing over
** the next fiber's stack; kept for the rest of the run (launches reuse them: no mmap per launch). */
static char *simt_stack()
{
	long pg = sysconf(_SC_PAGESIZE);
	char *m = (char *)mmap(NULL, SIMT_STACK + pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED || mprotect(m, pg, PROT_NONE)) {
		perror("simt: fiber stack");
		abort();
	}
	return m + pg;
}

/* Back to the scheduler; the globals threadIdx and blockIdx are this fiber's again on return. */
void simt_yield()
{
	SimtFiber *me = simt_cur;
	me->tid = threadIdx, me->bid = blockIdx;
	if (!_setjmp(me->jb))
		_longjmp(simt_sched, 1);
	threadIdx = me->tid, blockIdx = me->bid;
}

/* A fiber's body, as a thread's was: every block of the grid in order, a block barrier after each. */
static void simt_body()
{
	SimtFiber *me = simt_cur;
	const dim3 g = gridDim;
	for (unsigned z = 0; z < g.z; z++)
		for (unsigned y = 0; y < g.y; y++)
			for (unsigned x = 0; x < g.x; x++) {
				blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
				(*simt_fn)();
				simt_block->wait();
			}
	me->done = true;
	simt_progress = 1;
	_longjmp(simt_sched, 1); /* never returns: its context has no successor */
}

/* Runs fb until it yields or finishes. Its own function, so that no local of the scheduler's loop lives
** across the _setjmp. */
static __attribute__((noinline)) void simt_resume(SimtFiber *fb)
{
	simt_cur = fb;
	threadIdx = fb->tid, blockIdx = fb->bid;
	if (_setjmp(simt_sched))
		return;
	if (fb->started)
		_longjmp(fb->jb, 1);
	fb->started = true;
	setcontext(&fb->ctx);
	perror("simt: setcontext");
	abort();
}

/* One block at a time: b.x fibers, each walking the grid's blocks in order with a block barrier between
** blocks (the statics standing in for shared memory are then free). The scheduler resumes every live
** fiber once per sweep, forward and backward in turn; a sweep in which none moved on is a deadlock
** (SIMT_SPIN_SWEEPS of them in a row when some fiber spins: simt_spin). */
void simt_launch(dim3 g, dim3 b, const std::function<void()> &f)
{
	gridDim = g;
	blockDim = b;
	int nt = (int)b.x;
	if (simt_blks.empty())
		simt_blks.resize(1);
	SimtBlk &B = simt_blk_init(0, nt);
	simt_warps = B.warps.data(), simt_block = &B.bar, simt_named = B.named;
	simt_fn = &f;
	while ((int)simt_fibers.size() < nt)
		simt_fibers.push_back(SimtFiber{{}, {}, simt_stack(), {}, {}, false, false, 0, false, 0});
	for (int t = 0; t < nt; t++) {
		SimtFiber &fb = simt_fibers[t];
		if (getcontext(&fb.ctx)) {
			perror("simt: getcontext");
			abort();
		}
		fb.ctx.uc_stack.ss_sp = fb.stack;
		fb.ctx.uc_stack.ss_size = SIMT_STACK;
		fb.ctx.uc_link = NULL;
		makecontext(&fb.ctx, simt_body, 0);
		fb.tid = dim3{}, fb.tid.x = (unsigned)t;
		fb.bid = dim3{};
		fb.started = fb.done = fb.spin = false;
		fb.blk = 0, fb.state = 0;
	}
	for (int live = nt, sweep = 0, soft = 0, hard = 0; live > 0; sweep++) {
		simt_progress = simt_spun = simt_moved = 0;
		for (int i = 0; i < nt; i++) {
			SimtFiber &fb = simt_fibers[sweep & 1 ? nt - 1 - i : i];
			if (fb.done)
				continue;
			simt_resume(&fb);
			live -= fb.done;
		}
		if (simt_stuck(&soft, &hard)) {
			fprintf(stderr, "simt: deadlock: %d of %d threads left, each at a rendezvous the others never "
			                "reach or spinning on a store no one makes (grid %u,%u,%u, block %d)\n", live, nt, g.x,
			        g.y, g.z, nt);
			abort();
		}
	}
}

/* Called by simt_spin once its registers are in fb->jb: a hash of them and of fb's stack from this frame
** up, compared with the previous spin's. Its own function (and frame, below what it hashes) so that no
** value it computes lands in the bytes it reads; a spinner stuck in its loop hashes the same every time. */
static __attribute__((noinline)) void simt_spin_state(SimtFiber *fb)
{
	const unsigned char *p = (const unsigned char *)__builtin_frame_address(0);
	const unsigned char *top = (const unsigned char *)fb->stack + SIMT_STACK;
	const unsigned char *jb = (const unsigned char *)&fb->jb;
	uint64_t h = 0xcbf29ce484222325ull;
	for (; p < top; p++)
		h = (h ^ *p) * 0x100000001b3ull;
	for (size_t i = 0; i < sizeof fb->jb; i++)
		h = (h ^ jb[i]) * 0x100000001b3ull;
	if (h != fb->state) {
		fb->state = h;
		simt_moved = 1;
	}
}

/* A spinning fiber's yield: it lets the others run; no progress unless its state changed since its last
** spin (simt_stuck). */
void simt_spin()
{
	SimtFiber *me = simt_cur;
	simt_spun = 1;
	me->spin = true;
	me->tid = threadIdx, me->bid = blockIdx;
	if (!_setjmp(me->jb)) {
		simt_spin_state(me);
		_longjmp(simt_sched, 1);
	}
	threadIdx = me->tid, blockIdx = me->bid;
	me->spin = false;
}

/* See simt.h: another OS thread makes the store, so the spin is progress; sched_yield gives that thread the
** CPU when the two share one. */
void simt_peer_wait()
{
	simt_progress = 1;
	sched_yield();
	simt_yield();
}

/* Thread 0 of a block takes the shared-memory section, spinning while another block holds it: __shared__
** statics are one copy for all blocks, so only one block at a time may be between enter and leave. */
void simt_block_enter()
{
	if (!simt_conc)
		return;
	int me = simt_cur->blk;
	if (simt_excl == me) {
		fprintf(stderr, "simt: simt_block_enter: block %d already holds the shared-memory section\n", me);
		abort();
	}
	while (simt_excl >= 0)
		simt_spin();
	simt_excl = me;
	simt_progress = 1;
}

/* Gives the section back; only the block that holds it may. */
void simt_block_leave()
{
	if (!simt_conc)
		return;
	if (simt_excl != simt_cur->blk) {
		fprintf(stderr, "simt: simt_block_leave: block %d does not hold the shared-memory section (held by %d)\n",
		        simt_cur->blk, simt_excl);
		abort();
	}
	simt_excl = -1;
	simt_progress = 1;
}

/* PTX's bar.sync id, n for a body that runs on the first n threads of a bigger block (ops/persist.cuh):
** barrier 0 over the whole block is __syncthreads; the others count their arrivals per block. */
void simt_bar_sync(unsigned id, unsigned n)
{
	if (id > 15 || n == 0 || n % 32 || n > blockDim.x || (id == 0 && n != blockDim.x)) {
		fprintf(stderr, "simt: bar.sync %u, %u: bad barrier or count for a block of %u threads\n", id, n, blockDim.x);
		abort();
	}
	if (id == 0) {
		simt_block->wait();
		return;
	}
	SimtBarrier &b = simt_named[id];
	if (b.count == 0)
		b.n = (int)n;
	else if (b.n != (int)n) {
		fprintf(stderr, "simt: bar.sync %u: %u threads where the first arrival said %d\n", id, n, b.n);
		abort();
	}
	b.wait();
}

/* A fiber's body under simt_launch_concurrent: its one block, then done. */
static void simt_body_conc()
{
	SimtFiber *me = simt_cur;
	(*simt_fn)();
	me->done = true;
	simt_progress = 1;
	_longjmp(simt_sched, 1); /* never returns: its context has no successor */
}

/* Every block at once: grid·block fibers (SIMT_MAX_FIBERS at most: each has a 256 KiB stack, touched only
** as deep as it runs), resumed in sweeps that alternate direction. Deadlock: a sweep without progress, or
** SIMT_SPIN_SWEEPS of them in a row when fibers spin; then it names what each stuck block is doing and
** returns -1 (its fibers are never resumed again). */
int simt_launch_concurrent(dim3 g, dim3 b, const std::function<void()> &f)
{
	long long nb = (long long)g.x * g.y * g.z, nt = b.x, n = nb * nt;
	if (nb <= 0 || nt <= 0 || nt % 32 || b.y != 1 || b.z != 1 || n > SIMT_MAX_FIBERS) {
		fprintf(stderr, "simt: concurrent launch of grid %u,%u,%u block %u,%u,%u: want block x a multiple of 32 "
		        "and at most %d threads in all\n", g.x, g.y, g.z, b.x, b.y, b.z, (int)SIMT_MAX_FIBERS);
		return -1;
	}
	gridDim = g;
	blockDim = b;
	if ((long long)simt_blks.size() < nb)
		simt_blks.resize((size_t)nb);
	for (long long k = 0; k < nb; k++)
		simt_blk_init((size_t)k, (int)nt);
	simt_fn = &f;
	while ((long long)simt_fibers.size() < n)
		simt_fibers.push_back(SimtFiber{{}, {}, simt_stack(), {}, {}, false, false, 0, false, 0});
	for (long long i = 0; i < n; i++) {
		SimtFiber &fb = simt_fibers[i];
		if (getcontext(&fb.ctx)) {
			perror("simt: getcontext");
			abort();
		}
		fb.ctx.uc_stack.ss_sp = fb.stack;
		fb.ctx.uc_stack.ss_size = SIMT_STACK;
		fb.ctx.uc_link = NULL;
		makecontext(&fb.ctx, simt_body_conc, 0);
		long long k = i / nt;
		fb.blk = (int)k;
		fb.tid = dim3{}, fb.tid.x = (unsigned)(i % nt);
		fb.bid.x = (unsigned)(k % g.x), fb.bid.y = (unsigned)(k / g.x % g.y), fb.bid.z = (unsigned)(k / g.x / g.y);
		fb.started = fb.done = fb.spin = false;
		fb.state = 0;
	}
	simt_conc = true;
	simt_excl = -1;
	long long live = n;
	for (int sweep = 0, soft = 0, hard = 0; live > 0; sweep++) {
		simt_progress = simt_spun = simt_moved = 0;
		for (long long i = 0; i < n; i++) {
			long long at = sweep & 1 ? n - 1 - i : i;
			SimtFiber &fb = simt_fibers[at];
			if (fb.done)
				continue;
			SimtBlk &B = simt_blks[fb.blk];
			/* a block whose thread 0 spins (a persistent worker waiting for its task's inputs or the section)
			** while all its other threads wait at its barrier: only thread 0 can move it, so the others are
			** not resumed (they would only see the same generation and yield) */
			if (at % nt && B.bar.count == nt - 1 && simt_fibers[at - at % nt].spin)
				continue;
			simt_warps = B.warps.data(), simt_block = &B.bar, simt_named = B.named;
			simt_resume(&fb);
			live -= fb.done;
		}
		if (simt_stuck(&soft, &hard))
			break;
	}
	simt_conc = false;
	if (live == 0)
		return 0;
	long long spin = 0;
	for (long long i = 0; i < n; i++)
		spin += !simt_fibers[i].done && simt_fibers[i].spin;
	fprintf(stderr, "simt: deadlock: %lld of %lld threads left (%lld spinning, the rest at a rendezvous), shared-memory "
	        "section held by block %d (grid %u,%u,%u, block %lld, concurrent)\n", live, n, spin, simt_excl, g.x, g.y,
	        g.z, nt);
	for (long long k = 0, shown = 0; k < nb && shown < 16; k++) {
		int nl = 0, ns = 0;
		for (long long i = k * nt; i < (k + 1) * nt; i++)
			nl += !simt_fibers[i].done, ns += !simt_fibers[i].done && simt_fibers[i].spin;
		if (nl) {
			fprintf(stderr, "simt:   block %lld: %d threads left, %d spinning\n", k, nl, ns);
			shown++;
		}
	}
	return -1;
}
