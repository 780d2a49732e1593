/* tests/simt/simt.cc — the fiber launcher behind simt.h. Fibers are entered once with setcontext and
** switched with _setjmp/_longjmp, which (unlike swapcontext) leave the signal mask alone: no system call
** per switch. A fortified longjmp refuses to jump to another stack, hence the #undef. */
#undef _FORTIFY_SOURCE
#include "simt.h"

#include <setjmp.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
std::vector<SimtWarp *> simt_warps;
SimtBarrier simt_block;
int simt_progress;

/* One emulated thread: its context, stack and the indices it runs under. */
struct SimtFiber {
	ucontext_t ctx; /* the entry (simt_body on its stack), used once per launch */
	jmp_buf jb;     /* where it yielded */
	char *stack;
	dim3 tid, bid;
	bool started, done;
};

enum { SIMT_STACK = 256 << 10 }; /* per fiber; the kernels' locals are a few KiB, printf needs more */

static jmp_buf simt_sched;
static std::vector<SimtFiber> simt_fibers;
static SimtFiber *simt_cur;
static const std::function<void()> *simt_fn;

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
				simt_block.wait();
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
** fiber once per sweep, forward and backward in turn; a sweep in which none moved on is a deadlock. */
void simt_launch(dim3 g, dim3 b, const std::function<void()> &f)
{
	gridDim = g;
	blockDim = b;
	int nt = (int)b.x;
	for (SimtWarp *w : simt_warps)
		delete w;
	simt_warps.clear();
	for (int i = 0; i < nt / 32; i++) {
		simt_warps.push_back(new SimtWarp);
		simt_warps.back()->bar.init(32);
	}
	simt_block.init(nt);
	simt_fn = &f;
	while ((int)simt_fibers.size() < nt)
		simt_fibers.push_back(SimtFiber{{}, {}, simt_stack(), {}, {}, false, false});
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
		fb.started = fb.done = false;
	}
	for (int live = nt, sweep = 0; live > 0; sweep++) {
		simt_progress = 0;
		for (int i = 0; i < nt; i++) {
			SimtFiber &fb = simt_fibers[sweep & 1 ? nt - 1 - i : i];
			if (fb.done)
				continue;
			simt_resume(&fb);
			live -= fb.done;
		}
		if (!simt_progress) {
			fprintf(stderr, "simt: deadlock: %d of %d threads left, each at a rendezvous the others never "
			                "reach (grid %u,%u,%u, block %d)\n", live, nt, g.x, g.y, g.z, nt);
			abort();
		}
	}
}
