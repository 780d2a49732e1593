/*
** bench/chain.cu — how much of a decode step's per-kernel cost is the kernel's own start and end (issue
** 8, bench/NOTES.md entry 30). bench/trace.c showed the kernels of a decode graph start with no gap after
** the one before, yet Llama-3-8B's GEMVs lose 3.5 to 6 µs each against their bytes at the bandwidth. Here:
** (1) the floor: a plain read-only kernel over S MB (each launch its own cold copy) at the sizes of
**     Llama-3-8B's decode kernels, so a GEMV's overhead can be split into what any read of its size pays
**     and what the GEMV adds;
** (2) a chain shaped like Llama's layer (q/k/v 50.3 MB, a 32-block latency-bound stand-in for attention,
**     o 33.5, gate/up 235, down 117 MB), 8 layers in one graph, launched plainly and programmatically
**     (PDL): a kernel may start while the one before finishes, issue its first loads (what a GEMV may do:
**     its weights do not depend on the kernel before), then wait (griddepcontrol.wait) before the rest.
**     With the trigger (launch_dependents) at the start, or once the block's loads are all issued.
**
**   build/bench/chain [--layers N]
*/
#include <cuda_runtime.h>

#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static void ck(cudaError_t e, const char *what, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "chain: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(x) ck((x), #x, __LINE__)
#include "graph_time.cuh"

enum { TRIG_NONE, TRIG_START, TRIG_END };

/* A read of n uint4, grid-stride, four loads in flight a thread. PDL: the first four loads are issued
** before griddepcontrol.wait (and `dep`, the word the kernel before wrote, read after it, as a GEMV reads
** x); TRIG says where the kernel after is let in. Each block writes one word so nothing is dropped. */
template <bool PDL, int TRIG>
__global__ void __launch_bounds__(256) k_rd(const uint4 *p, long long n, const unsigned *dep, unsigned *out)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, st = (long long)gridDim.x * blockDim.x;
	if (PDL && TRIG == TRIG_START)
		asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	unsigned acc = 0;
	bool first = true;
	for (; i + 3 * st < n; i += 4 * st) {
		uint4 a = __ldg(p + i), b = __ldg(p + i + st), c = __ldg(p + i + 2 * st), d = __ldg(p + i + 3 * st);
		if (PDL && first) {
			asm volatile("griddepcontrol.wait;" ::: "memory");
			acc ^= *(volatile const unsigned *)dep;
			first = false;
		}
		if (PDL && TRIG == TRIG_END && i + 7 * st >= n)
			asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
		acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
	}
	if (PDL && first)
		asm volatile("griddepcontrol.wait;" ::: "memory");
	for (; i < n; i += st) {
		uint4 a = __ldg(p + i);
		acc ^= a.x ^ a.y ^ a.z ^ a.w;
	}
	acc = __reduce_xor_sync(0xffffffffu, acc);
	if ((threadIdx.x & 31) == 0 && acc == 0x12345678u)
		out[blockIdx.x] = acc;
	if (blockIdx.x == 0 && threadIdx.x == 0)
		out[gridDim.x] = acc | 1u;
}

/* The attention stand-in: 32 blocks, each R dependent rounds of a 16-byte load a thread from its own
** 4 KB (L2-resident after the first replay: latency, not bytes). */
template <bool PDL>
__global__ void __launch_bounds__(512) k_lat(const uint4 *p, int rounds, const unsigned *dep, unsigned *out)
{
	if (PDL) {
		asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
		asm volatile("griddepcontrol.wait;" ::: "memory");
	}
	unsigned acc = *(volatile const unsigned *)dep, j = threadIdx.x;
	for (int r = 0; r < rounds; r++) {
		uint4 a = __ldg(p + blockIdx.x * 512 + (j & 511));
		acc ^= a.x;
		j = a.y + threadIdx.x;
	}
	__syncthreads();
	if (threadIdx.x == 0 && acc == 0x12345678u)
		out[blockIdx.x] = acc;
	if (blockIdx.x == 0 && threadIdx.x == 0)
		out[gridDim.x] = acc | 1u;
}

template <typename K, typename... Args>
static void launch(bool pdl, K kern, unsigned grid, unsigned block, cudaStream_t s, Args... args)
{
	cudaLaunchConfig_t c = {};
	cudaLaunchAttribute at[1];
	c.gridDim = grid, c.blockDim = block, c.stream = s;
	if (pdl) {
		at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at[0].val.programmaticStreamSerializationAllowed = 1;
		c.attrs = at, c.numAttrs = 1;
	}
	CK(cudaLaunchKernelEx(&c, kern, args...));
}

int main(int argc, char **argv)
{
	int layers = 8;
	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--layers") && i + 1 < argc)
			layers = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: chain [--layers N]\n");
			return 2;
		}
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	double bw = read_bandwidth();
	printf("read_gb_s: %.1f\n", bw);
	const double mb[] = {8.4, 33.5, 50.3, 117.4, 234.9};
	const int nsz = 5;
	/* every launch reads its own copy: layers copies of the layer's four sizes (cold from HBM) */
	std::vector<uint4 *> buf;
	double total = 0;
	for (int l = 0; l < std::max(layers, 24); l++)
		for (int k = 0; k < nsz; k++) {
			uint4 *p;
			size_t bytes = (size_t)(mb[k] * 1e6) / 16 * 16;
			CK(cudaMalloc(&p, bytes));
			CK(cudaMemset(p, l + k, bytes));
			buf.push_back(p);
			total += bytes;
		}
	uint4 *lat;
	CK(cudaMalloc(&lat, 32 * 512 * 16));
	CK(cudaMemset(lat, 0, 32 * 512 * 16));
	unsigned *out;
	CK(cudaMalloc(&out, 64 * (size_t)sms * 8 * sizeof(unsigned)));
	CK(cudaMemset(out, 0, 64 * (size_t)sms * 8 * sizeof(unsigned)));
	printf("buffers: %.1f GB\n", total / 1e9);
	auto nvec = [&](int k) { return (long long)((size_t)(mb[k] * 1e6) / 16); };
	/* (1) the floor: one read per launch, each its own copy */
	const int grids[] = {sms * 4, sms * 8, sms * 16};
	printf("# plain read of S MB (µs, %% of read_gb_s), grid-stride 256 threads, blocks = SMs x 4 / 8 / 16\n");
	for (int k = 0; k < nsz; k++) {
		printf("read %6.1f MB:", mb[k]);
		for (int g : grids) {
			auto f = [&](int it, cudaStream_t s) {
				launch(false, k_rd<false, TRIG_NONE>, g, 256, s, (const uint4 *)buf[(it % 24) * nsz + k], nvec(k),
				       (const unsigned *)out, out + 8);
			};
			double t = graph_time_us(f, 48);
			printf("  %7.2f (%.1f%%)", t, 100 * mb[k] * 1e6 / (t * 1e-6) / 1e9 / bw);
		}
		printf("   at the bandwidth %.2f\n", mb[k] * 1e6 / bw / 1e3);
	}
	/* the stand-in alone */
	for (int rounds : {4, 8}) {
		auto f = [&](int, cudaStream_t s) { launch(false, k_lat<false>, 32, 512, s, (const uint4 *)lat, rounds, (const unsigned *)out, out + 16); };
		printf("latency stand-in, %d rounds: %.2f µs\n", rounds, graph_time_us(f, 48));
	}
	/* (2) the chain: per layer q/k/v 50.3, stand-in, o 33.5, gate/up 234.9, down 117.4 MB */
	const int order[4] = {2, 1, 4, 3};
	double ideal = 0;
	for (int k : order)
		ideal += mb[k] * 1e6 / bw / 1e3;
	printf("# chain of %d layers (q/k/v, stand-in 4 rounds, o, gate/up, down), µs a layer; bytes at the "
	       "bandwidth %.2f\n", layers, ideal);
	for (int variant = 0; variant < 6; variant++) {
		const char *name[] = {"plain", "pdl, trigger at start", "pdl, trigger after the last loads",
		                      "pdl on the reads only (stand-in plain)", "plain, 4 blocks an SM",
		                      "pdl, trigger at start, 4 blocks an SM"};
		int grid = variant >= 4 ? sms * 4 : sms * 8;
		auto f = [&](int it, cudaStream_t s) {
			for (int l = 0; l < layers; l++) {
				int c = ((it * layers + l) % 24) * nsz;
				unsigned *o = out + (size_t)((l * 5) % 60) * sms * 8 / 8;
				auto rd = [&](int k, unsigned *dst, const unsigned *src) {
					if (variant == 0 || variant == 4)
						launch(false, k_rd<false, TRIG_NONE>, grid, 256, s, (const uint4 *)buf[c + k], nvec(k), src, dst);
					else if (variant == 2)
						launch(true, k_rd<true, TRIG_END>, grid, 256, s, (const uint4 *)buf[c + k], nvec(k), src, dst);
					else
						launch(true, k_rd<true, TRIG_START>, grid, 256, s, (const uint4 *)buf[c + k], nvec(k), src, dst);
				};
				rd(order[0], o, out);
				if (variant == 0 || variant == 3 || variant == 4)
					launch(false, k_lat<false>, 32, 512, s, (const uint4 *)lat, 4, (const unsigned *)o, o + 2048);
				else
					launch(true, k_lat<true>, 32, 512, s, (const uint4 *)lat, 4, (const unsigned *)o, o + 2048);
				rd(order[1], o + 4096, o + 2048);
				rd(order[2], o + 8192, o + 4096);
				rd(order[3], o + 12288, o + 8192);
			}
		};
		double t = graph_time_us(f, 6) / layers;
		printf("chain %-40s %8.2f µs a layer (%.1f%% of the bandwidth)\n", name[variant], t, 100 * ideal / t);
	}
	return 0;
}
