/*
** bench/graph_time.cuh — the timing rule of the micro-benchmarks (bench/gemv.cu, bench/mla.cu,
** bench/moe.cu): `iters` launches captured in one CUDA graph (launch i is f(i, stream)), replayed 7
** times; the median µs per launch. One warm-up call outside the graph loads the module. And the
** bandwidth they are measured against: a plain read-only kernel over 4 GiB. The includer defines CK.
*/
#pragma once
#include <algorithm>
#include <functional>
#include <vector>

static double graph_time_us(const std::function<void(int, cudaStream_t)> &f, int iters)
{
	cudaStream_t s;
	CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	f(0, s);
	CK(cudaGetLastError());
	CK(cudaStreamSynchronize(s));
	cudaGraph_t g;
	cudaGraphExec_t ge;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
	for (int i = 0; i < iters; i++)
		f(i, s);
	CK(cudaStreamEndCapture(s, &g));
	CK(cudaGraphInstantiate(&ge, g, 0));
	CK(cudaGraphLaunch(ge, s));
	CK(cudaStreamSynchronize(s));
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	std::vector<double> t;
	for (int r = 0; r < 7; r++) {
		CK(cudaEventRecord(a, s));
		CK(cudaGraphLaunch(ge, s));
		CK(cudaEventRecord(b, s));
		CK(cudaEventSynchronize(b));
		float ms;
		CK(cudaEventElapsedTime(&ms, a, b));
		t.push_back(ms * 1000.0 / iters);
	}
	std::sort(t.begin(), t.end());
	CK(cudaGraphExecDestroy(ge));
	CK(cudaGraphDestroy(g));
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	CK(cudaStreamDestroy(s));
	return t[3];
}

/* Sum of a buffer of uint4, grid-stride, four loads in flight per thread; one word per block out so the
** loads cannot be dropped. */
__global__ void __launch_bounds__(256) k_read(const uint4 *p, long long n, unsigned *out)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x, st = (long long)gridDim.x * blockDim.x;
	unsigned acc = 0;
	for (; i + 3 * st < n; i += 4 * st) {
		uint4 a = __ldg(p + i), b = __ldg(p + i + st), c = __ldg(p + i + 2 * st), d = __ldg(p + i + 3 * st);
		acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
	}
	for (; i < n; i += st) {
		uint4 a = __ldg(p + i);
		acc ^= a.x ^ a.y ^ a.z ^ a.w;
	}
	acc = __reduce_xor_sync(0xffffffffu, acc);
	if ((threadIdx.x & 31) == 0 && acc == 0x12345678u)
		out[blockIdx.x] = acc;
}

/* The read bandwidth in GB/s: k_read over 4 GiB, 8 blocks an SM, the best of 10 timed runs. */
static double read_bandwidth(void)
{
	size_t bytes = (size_t)4 << 30;
	uint4 *p;
	unsigned *out;
	CK(cudaMalloc(&p, bytes));
	CK(cudaMemset(p, 1, bytes));
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	int grid = sms * 8;
	CK(cudaMalloc(&out, sizeof(unsigned) * (size_t)grid));
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	double best = 0;
	for (int r = 0; r < 11; r++) {
		CK(cudaEventRecord(a));
		k_read<<<grid, 256>>>(p, (long long)(bytes / 16), out);
		CK(cudaEventRecord(b));
		CK(cudaEventSynchronize(b));
		float ms;
		CK(cudaEventElapsedTime(&ms, a, b));
		if (r)
			best = std::max(best, bytes / (ms * 1e-3) / 1e9);
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	CK(cudaFree(p));
	CK(cudaFree(out));
	return best;
}
