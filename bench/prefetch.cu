/*
** bench/prefetch.cu — whether a decode GEMV gains when its weights are asked of L2 while the kernel
** before it (attention: latency-bound, the HBM nearly idle) still runs. In one CUDA graph per variant,
** each of `iters` steps is a stand-in for the attention (one block that spins for --busy µs) and then
** Llama-3-8B's o-projection GEMV (k_linear_gemv, 4096 x 4096 bf16, 33.5 MB; each step its own of 24
** copies, so the weights come from HBM). Variants: A, the two in a row; B, the same with a third kernel
** forked beside the stand-in that asks L2 for the GEMV's weights (cp.async.bulk.prefetch.L2, 64 KiB a
** request), joined before the GEMV. Also the stand-in alone and the GEMV alone. A - B is the gain.
**
**   build/bench/prefetch [--busy US] [--iters N] [--mb MB]   (MB: how much of the weights to prefetch)
*/
#include "../ops/kernels.cuh"
#include "../ops/quant.cuh"

#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void ck(cudaError_t e, const char *what, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "prefetch: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(x) ck((x), #x, __LINE__)
#include "graph_time.cuh"

enum { N = 4096, K = 4096, COPIES = 24 };

__global__ void __launch_bounds__(32) g_busy(long long ns)
{
	unsigned long long t0, t;
	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	while ((long long)(t - t0) < ns);
}

/* bytes from p asked of L2, 64 KiB a request, one request a thread */
__global__ void __launch_bounds__(32) g_prefetch(const char *p, long long bytes)
{
	long long off = ((long long)blockIdx.x * blockDim.x + threadIdx.x) << 16;
	if (off >= bytes)
		return;
	unsigned n = (unsigned)(bytes - off < 65536 ? bytes - off : 65536);
	asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n) : "memory");
}

template <int RB>
__global__ void __launch_bounds__(256) g_gemv(bf16 *y, const bf16 *x, const bf16 *w, int T, int k, int n)
{
	k_linear_gemv<bf16, bf16, false, RB, 1>(y, x, w, nullptr, T, k, n);
}

template <typename W> __global__ void __launch_bounds__(256) g_rand(W *d, long long n, int cols)
{
	k_rand_float<W>(d, n, 0x2468aceull + (unsigned long long)n, cols, 0, n, 1, 1, 0);
}

int main(int argc, char **argv)
{
	int iters = 100;
	double busy_us = 10, mb = 33.5;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--busy") && i + 1 < argc)
			busy_us = atof(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--mb") && i + 1 < argc)
			mb = atof(argv[++i]);
		else {
			fprintf(stderr, "usage: prefetch [--busy US] [--iters N] [--mb MB]\n");
			return 2;
		}
	}
	double bw = read_bandwidth();
	long long wn = (long long)N * K, pbytes = (long long)(mb * 1e6) / 16 * 16;
	if (pbytes > wn * 2)
		pbytes = wn * 2;
	bf16 *w, *x, *y;
	CK(cudaMalloc(&w, sizeof(bf16) * wn * COPIES));
	CK(cudaMalloc(&x, sizeof(bf16) * K));
	CK(cudaMalloc(&y, sizeof(bf16) * N));
	g_rand<bf16><<<(unsigned)((wn * COPIES + 255) / 256), 256>>>(w, wn * COPIES, K);
	g_rand<bf16><<<(K + 255) / 256, 256>>>(x, K, K);
	CK(cudaDeviceSynchronize());
	int bt, rb;
	gemv_shape_h(K, N, 2, GEMV_SMS_SM90, &bt, &rb);
	unsigned grid = gemv_grid_h(N, rb, bt, 0, GEMV_SMS_SM90);
	auto gemv = [&](int i, cudaStream_t s) {
		const bf16 *wi = w + (size_t)(i % COPIES) * wn;
		if (rb == 4)
			g_gemv<4><<<grid, bt, 0, s>>>(y, x, wi, 1, K, N);
		else
			g_gemv<2><<<grid, bt, 0, s>>>(y, x, wi, 1, K, N);
	};
	long long ns = (long long)(busy_us * 1000);
	cudaStream_t s2;
	cudaEvent_t fork, join;
	CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	CK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
	CK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
	unsigned pblocks = (unsigned)(((pbytes + 65535) >> 16) + 31) / 32;
	double tb = graph_time_us([&](int, cudaStream_t s) { g_busy<<<1, 32, 0, s>>>(ns); }, iters);
	double tg = graph_time_us(gemv, iters);
	double ta = graph_time_us(
		[&](int i, cudaStream_t s) {
			g_busy<<<1, 32, 0, s>>>(ns);
			gemv(i, s);
		},
		iters);
	double tp = graph_time_us(
		[&](int i, cudaStream_t s) {
			CK(cudaEventRecord(fork, s));
			CK(cudaStreamWaitEvent(s2, fork, 0));
			g_prefetch<<<pblocks, 32, 0, s2>>>((const char *)(w + (size_t)(i % COPIES) * wn), pbytes);
			CK(cudaEventRecord(join, s2));
			g_busy<<<1, 32, 0, s>>>(ns);
			CK(cudaStreamWaitEvent(s, join, 0));
			gemv(i, s);
		},
		iters);
	double gb = wn * 2 / 1e9;
	printf("# read bandwidth %.1f GB/s; GEMV %dx%d bf16 (rb %d, block %d, grid %u), stand-in %.1f µs, prefetch %.1f MB\n",
	       bw, N, K, rb, bt, grid, busy_us, pbytes / 1e6);
	printf("stand-in alone           %8.2f µs\n", tb);
	printf("GEMV alone               %8.2f µs  (%.1f%% of the bandwidth)\n", tg, 100 * gb / (tg * 1e-6) / bw);
	printf("A: stand-in, GEMV        %8.2f µs\n", ta);
	printf("B: + L2 prefetch beside  %8.2f µs  (gain %.2f µs a step)\n", tp, ta - tp);
	return 0;
}
