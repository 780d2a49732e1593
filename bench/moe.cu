/*
** bench/moe.cu — GLM-5's routed-expert FFN at batch 1 against the GPU's read bandwidth, measured in the
** same process. Built with nvcc by `make bench-moe` (build/bench/moe); run on the GPU machine.
**
** The shape is GLM-5's (C 6144, F 2048, E 256, k 8; gate/up Q4_K, down Q6_K in 224-byte slots, the shared
** expert's down Q6_K), the kernels are glmc's as it emits them for the slice: k_qmoe_up_mma (grid
** (F/64, k), block 256) and k_qmoe_down_fused<bf16, 14, 14, SHARED, RES> (grid C/16, block 256). Each of
** the graph's 100 launches picks its own 8 distinct experts at random and its own copy of the shared
** expert's down (24 copies), so the weights (6.7 GB in all) come from HBM, not L2; the figure is the
** median of 7 graph replays. Reported: µs per launch, the bytes the launch must read (the chosen
** experts' rows, plus the shared expert's for the down), GB/s and % of the measured bandwidth. The down is also timed at k = 1, 2, 4, 8 without the shared expert: the slope
** is the cost of one more expert in the kernel's sequence, against its bytes at the bandwidth. Then the
** tensor-core down (k_qmoe_down_mma) at each group size G (glmc's pick, qm_moe_group, marked '*'), its
** bf16 outputs first compared with k_qmoe_down_fused's on one launch (rel-L2; the output poisoned first).
** Last, GLM-4.7-Flash's bf16 experts (C 2048, F 1536, E 64, k 4 and the shared expert): k_moe_up and
** k_moe_down_fused as glmc emits them, the same way.
**
**   build/bench/moe [--iters N]
*/
#include "../ops/kernels.cuh"
#include "../ops/fused.cuh"
#include "../ops/quant.cuh"
#include "../ops/qfused.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <math.h>
#include <random>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static void ck(cudaError_t e, const char *what, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "moe: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(x) ck((x), #x, __LINE__)
#include "graph_time.cuh"

enum { C = 6144, F = 2048, E = 256, KX = 8 };

__global__ void __launch_bounds__(256, 2) g_up(float *hid, const bf16 *x, const int *idx, const unsigned char *gate,
                                               const unsigned char *up, int k)
{
	k_qmoe_up_mma<bf16>(hid, x, idx, gate, up, C, F, k);
}

template <bool SHARED>
__global__ void __launch_bounds__(256, 3) g_down(bf16 *y, const float *hid, const int *idx, const bf16 *w,
                                                 const unsigned char *down, int k, const unsigned char *sdown,
                                                 const bf16 *g, const bf16 *u, const bf16 *r)
{
	k_qmoe_down_fused<bf16, 14, 14, SHARED, true>(y, hid, idx, w, down, C, F, k, sdown, g, u, F, r);
}

template <bool SHARED>
__global__ void __launch_bounds__(256, 2) g_down_mma(bf16 *y, const float *hid, float *part, int *cnt, const int *idx,
                                                     const bf16 *w, const unsigned char *down, int k, int G,
                                                     const unsigned char *sdown, const bf16 *g, const bf16 *u,
                                                     const bf16 *r)
{
	k_qmoe_down_mma<bf16, 14, 14, SHARED, true>(y, hid, part, cnt, idx, w, down, C, F, k, G, sdown, g, u, F, r);
}

/* GLM-4.7-Flash's bf16 experts (FC 2048, FF 1536, FE 64, FK 4, the shared expert FF wide): k_moe_up and
** k_moe_down_fused as glmc emits them. The shape goes in as launch arguments, as in a plan (constants
** let nvcc specialise the loops: k_moe_up then needs 38 registers instead of the plan's 92). */
enum { FC = 2048, FF = 1536, FE = 64, FK = 4 };

__global__ void __launch_bounds__(128) g_fup(float *hid, const bf16 *x, const int *idx, const bf16 *gate, const bf16 *up,
                                             int c, int f, int k)
{
	k_moe_up<bf16, bf16>(hid, x, idx, gate, up, c, f, k);
}

__global__ void __launch_bounds__(256) g_fdown(bf16 *y, const float *hid, const int *idx, const bf16 *w, const bf16 *down,
                                               const bf16 *sdown, const bf16 *g, const bf16 *u, const bf16 *r, int c,
                                               int f, int k)
{
	k_moe_down_fused<bf16, bf16, bf16, true, true>(y, hid, idx, w, down, c, f, k, sdown, g, u, f, r);
}


__global__ void __launch_bounds__(256) g_qrand(unsigned char *d, long long rows, int bpr, long long st, int qt)
{
	if (qt == 12)
		k_qrand<12>(d, rows, bpr, st, 0x1234567ull, (long long)bpr * 256, rows, 1, 1, 0, 1, 0);
	else
		k_qrand<14>(d, rows, bpr, st, 0x7654321ull, (long long)bpr * 256, rows, 1, 1, 0, 1, 0);
}

template <typename W> __global__ void __launch_bounds__(256) g_rand(W *d, long long n, int cols)
{
	k_rand_float<W>(d, n, 0x2468aceull + (unsigned long long)n, cols, 0, n, 1, 1, 0);
}

/* A device tensor of `rows` quantized rows of K values (Q4_K 144-byte blocks, Q6_K 224-byte slots). */
static unsigned char *qtensor(int qt, long long rows, long long K, long long *stride)
{
	*stride = K / 256 * (qt == 12 ? 144 : 224);
	unsigned char *p;
	size_t n = (size_t)(rows * *stride);
	CK(cudaMalloc(&p, n));
	g_qrand<<<(unsigned)((n + 255) / 256), 256>>>(p, rows, (int)(K / 256), *stride, qt);
	CK(cudaGetLastError());
	return p;
}

template <typename W> static W *ftensor(long long n, int cols)
{
	W *p;
	CK(cudaMalloc(&p, sizeof(W) * (size_t)n));
	g_rand<W><<<(unsigned)((n + 255) / 256), 256>>>(p, n, cols);
	CK(cudaGetLastError());
	return p;
}

/* A bf16 value on the host: its 16 bits are the top of an f32's. */
static double bf16_host(bf16 v)
{
	unsigned short h;
	memcpy(&h, &v, 2);
	unsigned b = (unsigned)h << 16;
	float f;
	memcpy(&f, &b, 4);
	return f;
}

/* For each of `iters` launches its own k distinct experts of ne, drawn with seed: int[iters·k] on the device. */
static int *random_experts(int iters, int ne, int k, unsigned seed)
{
	std::mt19937 rng(seed);
	std::vector<int> h((size_t)iters * k), e(ne);
	for (int i = 0; i < iters; i++) {
		for (int j = 0; j < ne; j++)
			e[j] = j;
		std::shuffle(e.begin(), e.end(), rng);
		std::copy(e.begin(), e.begin() + k, h.begin() + (size_t)i * k);
	}
	int *d;
	CK(cudaMalloc(&d, sizeof(int) * h.size()));
	CK(cudaMemcpy(d, h.data(), sizeof(int) * h.size(), cudaMemcpyHostToDevice));
	return d;
}

/* GLM-4.7-Flash's bf16 routed experts: the up kernel, then the down, each launch its own 4 of 64 experts
** and its own copy of the shared expert's down. */
template <typename Row> static void flash(int iters, Row row)
{
	printf("# GLM-4.7-Flash routed experts, bf16 (C %d, F %d, E %d, k %d, shared F %d)\n", FC, FF, FE, FK, FF);
	const int SC = 24;
	bf16 *gate = ftensor<bf16>((long long)FE * FF * FC, FC), *up = ftensor<bf16>((long long)FE * FF * FC, FC);
	bf16 *down = ftensor<bf16>((long long)FE * FC * FF, FF), *sdown = ftensor<bf16>((long long)SC * FC * FF, FF);
	bf16 *x = ftensor<bf16>(FC, 64), *g = ftensor<bf16>(FF, 64), *u = ftensor<bf16>(FF, 64), *r = ftensor<bf16>(FC, 64);
	bf16 *w = ftensor<bf16>((long long)iters * FK, 64), *y;
	float *hid = ftensor<float>((long long)FK * FF, 64);
	CK(cudaMalloc(&y, sizeof(bf16) * FC));
	int *idx = random_experts(iters, FE, FK, 777);
	CK(cudaDeviceSynchronize());
	double tu = graph_time_us(
		[&](int i, cudaStream_t s) {
			g_fup<<<dim3(FF / 4, FK), 128, 0, s>>>(hid, x, idx + (size_t)i * FK, gate, up, FC, FF, FK);
		},
		iters);
	row("k_moe_up bf16 (gate+up, 4 experts)", tu, 2.0 * FK * FF * FC * 2);
	double dbytes = (FK + 1.0) * FC * FF * 2;
	double td = graph_time_us(
		[&](int i, cudaStream_t s) {
			g_fdown<<<FC / 8, 256, 0, s>>>(y, hid, idx + (size_t)i * FK, w + (size_t)i * FK, down,
			                               sdown + (size_t)(i % SC) * FC * FF, g, u, r, FC, FF, FK);
		},
		iters);
	row("k_moe_down_fused bf16 (4 + shared)", td, dbytes);
	row("the FFN (up + down)", tu + td, 2.0 * FK * FF * FC * 2 + dbytes);
}

int main(int argc, char **argv)
{
	int iters = 100;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: moe [--iters N]\n");
			return 2;
		}
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	double bw = read_bandwidth();
	printf("# %s, %d SMs; GLM-5 routed experts (C %d, F %d, E %d), batch 1\n", prop.name, prop.multiProcessorCount, C,
	       F, E);
	printf("# read bandwidth (plain read-only kernel, 4 GiB): %.1f GB/s\n", bw);
	long long sg, sd;
	unsigned char *gate = qtensor(12, (long long)E * F, C, &sg), *up = qtensor(12, (long long)E * F, C, &sg);
	/* the shared expert's down in SC copies (one a launch, cycled), so that it too comes from HBM, as in a
	** decode step where every layer has its own */
	const int SC = 24;
	unsigned char *down = qtensor(14, (long long)E * C, F, &sd), *sdown = qtensor(14, (long long)SC * C, F, &sd);
	auto sdn = [&](int i) { return sdown + (size_t)(i % SC) * C * sd; };
	bf16 *x = ftensor<bf16>(C, 64), *g = ftensor<bf16>(F, 64), *u = ftensor<bf16>(F, 64), *r = ftensor<bf16>(C, 64);
	bf16 *w = ftensor<bf16>((long long)iters * KX, 64), *y;
	float *hid = ftensor<float>((long long)KX * F, 64);
	CK(cudaMalloc(&y, sizeof(bf16) * C));
	/* each launch its own 8 distinct experts */
	int *idx = random_experts(iters, E, KX, 12345);
	CK(cudaDeviceSynchronize());

	printf("%-40s %9s %9s %8s %7s\n", "kernel", "µs", "MB", "GB/s", "%bw");
	auto row = [&](const char *name, double us, double bytes) {
		printf("%-40s %9.2f %9.2f %8.1f %6.1f%%\n", name, us, bytes / 1e6, bytes / (us * 1e-6) / 1e9,
		       100 * bytes / (us * 1e-6) / 1e9 / bw);
	};
	double upb = 2.0 * KX * F * sg;
	double tu = graph_time_us(
		[&](int i, cudaStream_t s) {
			g_up<<<dim3(F / 64, KX), 256, 0, s>>>(hid, x, idx + (size_t)i * KX, gate, up, KX);
		},
		iters);
	row("k_qmoe_up_mma (gate+up, 8 experts)", tu, upb);
	for (int k : {1, 2, 4, 8}) {
		double t = graph_time_us(
			[&](int i, cudaStream_t s) {
				g_down<false><<<C / 16, 256, 0, s>>>(y, hid, idx + (size_t)i * KX, w + (size_t)i * KX, down, k,
				                                      nullptr, nullptr, nullptr, r);
			},
			iters);
		char name[64];
		snprintf(name, sizeof name, "k_qmoe_down_fused, k %d, no shared", k);
		row(name, t, (double)k * C * sd);
	}
	double td = graph_time_us(
		[&](int i, cudaStream_t s) {
			g_down<true><<<C / 16, 256, 0, s>>>(y, hid, idx + (size_t)i * KX, w + (size_t)i * KX, down, KX, sdn(i),
			                                     g, u, r);
		},
		iters);
	row("k_qmoe_down_fused (8 + shared, as emitted)", td, (double)(KX + 1) * C * sd);
	/* the tensor-core down, split over the experts: checked against the FMA kernel on one launch */
	bf16 *y2;
	float *part;
	int *cnt;
	CK(cudaMalloc(&y2, sizeof(bf16) * C));
	CK(cudaMalloc(&part, sizeof(float) * (KX + 1) * C));
	CK(cudaMalloc(&cnt, sizeof(int) * (C / 128)));
	CK(cudaMemset(cnt, 0, sizeof(int) * (C / 128)));
	std::vector<bf16> ha(C), hb(C);
	g_down<true><<<C / 16, 256>>>(y, hid, idx, w, down, KX, sdown, g, u, r);
	CK(cudaGetLastError());
	double tm = 0;
	for (int G : {1, 2, 4}) {
		int ng = (KX + G - 1) / G;
		CK(cudaMemset(y2, 0xff, sizeof(bf16) * C));
		g_down_mma<true><<<dim3(C / 128, ng + 1), 256>>>(y2, hid, part, cnt, idx, w, down, KX, G, sdown, g, u, r);
		CK(cudaMemcpy(ha.data(), y, sizeof(bf16) * C, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(hb.data(), y2, sizeof(bf16) * C, cudaMemcpyDeviceToHost));
		double num = 0, den = 0;
		for (int i = 0; i < C; i++) {
			double fa = bf16_host(ha[i]), fb = bf16_host(hb[i]);
			num += (fa - fb) * (fa - fb), den += fa * fa;
		}
		printf("# k_qmoe_down_mma G %d against k_qmoe_down_fused: rel-L2 %.2e (bf16 outputs)\n", G, sqrt(num / den));
		for (int k : {1, 8}) {
			double t = graph_time_us(
				[&](int i, cudaStream_t s) {
					g_down_mma<false><<<dim3(C / 128, (k + G - 1) / G), 256, 0, s>>>(
						y2, hid, part, cnt, idx + (size_t)i * KX, w + (size_t)i * KX, down, k, G, nullptr, nullptr,
						nullptr, r);
				},
				iters);
			char name[64];
			snprintf(name, sizeof name, "k_qmoe_down_mma G %d, k %d, no shared", G, k);
			row(name, t, (double)k * C * sd);
		}
		double t = graph_time_us(
			[&](int i, cudaStream_t s) {
				g_down_mma<true><<<dim3(C / 128, ng + 1), 256, 0, s>>>(y2, hid, part, cnt, idx + (size_t)i * KX,
				                                                       w + (size_t)i * KX, down, KX, G, sdn(i), g, u, r);
			},
			iters);
		char name[64];
		snprintf(name, sizeof name, "k_qmoe_down_mma G %d%s (8 + shared)", G,
		         G == qm_moe_group(C, KX, F, 1, GEMV_SMS_SM90) ? "*" : "");
		row(name, t, (double)(KX + 1) * C * sd);
		tm = tm == 0 || t < tm ? t : tm;
	}
	row("the FFN (up + down_fused)", tu + td, upb + (double)(KX + 1) * C * sd);
	row("the FFN (up + down_mma, its best G)", tu + tm, upb + (double)(KX + 1) * C * sd);
	flash(iters, row);
	return 0;
}
