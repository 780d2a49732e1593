/*
** bench/graph_time.cuh — the timing rule of the micro-benchmarks (bench/gemv.cu, bench/mla.cu): `iters`
** launches captured in one CUDA graph (launch i is f(i, stream)), replayed 7 times; the median µs per
** launch. One warm-up call outside the graph loads the module. The includer defines CK.
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
