/* tests/simt/simt.cc — the thread launcher behind simt.h. */
#include "simt.h"

thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
std::vector<SimtWarp *> simt_warps;
SimtBarrier simt_block;

/* One block at a time: b.x threads, started once per launch, each walking the grid's blocks in order
** with a block barrier between blocks (the statics standing in for shared memory are then free). */
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
	std::vector<std::thread> th;
	for (int t = 0; t < nt; t++)
		th.emplace_back([=, &f] {
			threadIdx.x = (unsigned)t;
			for (unsigned z = 0; z < g.z; z++)
				for (unsigned y = 0; y < g.y; y++)
					for (unsigned x = 0; x < g.x; x++) {
						blockIdx.x = x, blockIdx.y = y, blockIdx.z = z;
						f();
						simt_block.wait();
					}
		});
	for (std::thread &t : th)
		t.join();
}
