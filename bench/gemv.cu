/*
** bench/gemv.cu — decode GEMV (batch 1) against the GPU's read bandwidth, measured in the same process.
** Built with nvcc by `make bench-gemv` (build/bench/gemv); run on the GPU machine. bench/gemv.sh runs it
** and the PyTorch peer (bench/gemv_peer.py) and prints both tables.
**
** First the bandwidth: a plain read-only kernel streaming a 4 GiB buffer (16-byte loads, several in
** flight, a grid-stride loop), the best of 10. Then, for each weight type and shape N×K (rows × values
** per row): the existing k_linear_gemv for bf16 and f16, and k_qgemv (ops/quant.cuh) for Q8_0, Q4_K,
** Q5_K and Q6_K with every split-K choice WPR in {1, 2, 4, 8} (R = 2 rows per warp, TM = 1), and the
** tensor-core kernel glmc emits for one token over Q8_0, Q4_K and Q6_K (k_qgemv_mma as "Q8mma", "Q4mma"
** and "Q6mma": 16 rows a warp, 128/WPR a block, two blocks an SM), first checked against k_qgemv on random x (rel-L2 per
** WPR); the WPR emit_cuda.c picks (q_wpr, qm_wpr) is marked '*'. Each kernel is timed over a CUDA
** graph of 100 launches cycling through copies of the weight that together exceed 4× the L2 cache, so
** every launch reads its weight from HBM; the figure is the median of 7 graph replays. Reported: µs per
** launch, GB/s of weight bytes, and % of the measured bandwidth.
**
** With --fused, GLM-5's decode groups at tp 1 instead (Q4_K, down projections Q6_K as in the Q4_K_M mix):
** each fused launch of ops/qfused.cuh against the chain of unfused launches it replaces (the norm or
** SwiGLU kernel, one k_qgemv per member with q_wpr's split, the residual add), timed the same way;
** reported: µs per group both ways and the fused launch's share of the bandwidth (weight bytes only); for
** groups of one Q4_K/Q6_K type also the tensor-core launch glmc emits (k_qgemv_fused_mma) and the same
** launch without its prologue ("mma -pro": x as it is; what the norm or SwiGLU staging costs).
**
**   build/bench/gemv [--act bf16|f32] [--only TYPE] [--shape NxK] [--iters N] [--fused]
** --shape times one weight shape (N rows × K values) instead of the default six.
** Then every other GGUF block type (the general types of ops/quant.cuh, q_load/q_decode: Q4_0, Q4_1,
** Q5_0, Q5_1, Q2_K, Q3_K, IQ4_NL, IQ4_XS, MXFP4, IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S,
** TQ1_0, TQ2_0, NVFP4): random blocks with finite scales, rows unpadded as glmrun keeps them, k_qgemv at
** the split glmc emits only, over 4096×4096, 14336×4096, GLM-5's routed expert (2048×6144 gate/up,
** 6144×2048 down) and its LM head (154880×6144). Targets (issue 48): the 4-8-bit types >= 75% of the
** bandwidth, the 1-3-bit ones >= 60%.
** GEMV_RB=8 in the environment runs the float GEMV with eight columns a block where N >= 8·264 (an
** experiment against the emitted shape, for bench/NOTES.md).
*/
#include "../ops/kernels.cuh"
#include "../ops/fused.cuh"
#include "../ops/quant.cuh"
#include "../ops/qfused.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <functional>
#include <type_traits>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static void ck(cudaError_t e, const char *what, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "gemv: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(x) ck((x), #x, __LINE__)
#include "graph_time.cuh"


/* ---- the kernels, wrapped as glmc wraps them ---- */

template <typename A, typename W, int RB>
__global__ void __launch_bounds__(256) g_gemv(A *y, const A *x, const W *w, int T, int K, int N)
{
	k_linear_gemv<A, W, false, RB, 1>(y, x, w, nullptr, T, K, N);
}

template <typename A, int QT, int WPR>
__global__ void __launch_bounds__(256, 3) g_qgemv(A *y, const A *x, const unsigned char *w, int T, int K, int N)
{
	k_qgemv<A, QT, 2, WPR, 1, false, false>(y, x, nullptr, w, nullptr, T, K, N);
}

template <typename A, int QT, int WPR>
__global__ void __launch_bounds__(256, 2) g_qmma(A *y, const A *x, const unsigned char *w, int K, int N)
{
	k_qgemv_mma<A, QT, WPR, false, false>(y, x, nullptr, w, nullptr, 1, K, N);
}

/* k_qgemv_sk over one member (no prologue or epilogue), its shared memory dynamic as glmrun gives it */
template <typename A, int QT, int NWARP, int S>
__global__ void __launch_bounds__(NWARP * 32, NWARP == 16 ? 1 : 2)
	g_qsk(A *y, const A *x, const unsigned char *w, int K, int N, float *part, int *cnt, int maxseg)
{
	extern __shared__ __align__(128) unsigned char qsk_sm[];
	k_qgemv_sk<A, QT, A, GEMV_PRO_NONE, 0, NWARP, S>(y, y, y, y, w, w, w, w, nullptr, nullptr, nullptr, nullptr, x,
	                                                  nullptr, (const A *)nullptr, nullptr, nullptr, 1, K, N, 0, 0, 0,
	                                                  0.0f, 1.0f, 1.0f, 1.0f, 1.0f, part, cnt, maxseg, qsk_sm);
}

template <int QT>
__global__ void __launch_bounds__(256) g_qrand(unsigned char *d, long long rows, int bpr, long long st, long long K)
{
	k_qrand<QT>(d, rows, bpr, st, 0x1234567ull, K, rows, 1, 1, 0, 1, 0);
}

/* Byte o of a block of general type QT (ops/quant.cuh qd_val) whose random byte is v: its scale fields
** made finite (the half 2^-6; MXFP4's E8M0 2^-7; NVFP4's UE4M3 2^-3; IQ1_M's half in its scale words'
** top nibbles), every other byte as drawn. */
template <int QT> __device__ unsigned gen_byte(int o, unsigned v)
{
	const unsigned h = 0x2400; /* 2^-6 */
	int at = QT == 3 || QT == 7 ? (o < 4 ? o & 1 : -1) : QT == 10 ? (o >= 80 && o < 84 ? o & 1 : -1)
	         : QT == 11 ? (o >= 108 ? o & 1 : -1) : QT == 34 ? (o >= 52 ? o & 1 : -1)
	         : QT == 35 ? (o >= 64 ? o & 1 : -1) : o < 2 ? o : -1;
	if (QT == 39)
		return o == 0 ? 120u : v;
	if (QT == 40)
		return o < 4 ? 0x20u : v;
	if (QT == 29)
		return o >= 49 && (o & 1) ? (v & 0x0fu) | ((h >> (4 * ((o - 49) / 2))) & 0xfu) << 4 : v;
	return at < 0 ? v : at ? h >> 8 : h & 0xffu;
}

/* Random blocks of general type QT, rows unpadded as glmrun keeps them (n bytes in all). */
template <int QT> __global__ void __launch_bounds__(256) g_genrand(unsigned char *d, long long n)
{
	long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
	if (i >= n)
		return;
	int o = (int)(i % QGeo<QT>::BYTES);
	d[i] = (unsigned char)gen_byte<QT>(o, (unsigned)(q_mix64(0x5eedull + (unsigned long long)i) & 0xffu));
}

template <typename W> __global__ void __launch_bounds__(256) g_rand(W *d, long long n, int cols)
{
	k_rand_float<W>(d, n, 0x7654321ull, cols, 0, n, 1, 1, 0);
}

typedef void (*Launch)(void *y, const void *x, const void *w, int K, int N, cudaStream_t s);

template <typename A, typename W> static void run_plain(void *y, const void *x, const void *w, int K, int N, cudaStream_t s)
{
	int bt, rb; /* the shape glmc emits, or GEMV_RB=8 (eight columns a block: an experiment) */
	gemv_shape_h(K, N, sizeof(W), GEMV_SMS_SM90, &bt, &rb);
	if (getenv("GEMV_RB") && atoi(getenv("GEMV_RB")) == 8 && N >= 8 * 264)
		g_gemv<A, W, 8><<<(N + 7) / 8, bt, 0, s>>>((A *)y, (const A *)x, (const W *)w, 1, K, N);
	else if (rb == 4)
		g_gemv<A, W, 4><<<(N + 3) / 4, bt, 0, s>>>((A *)y, (const A *)x, (const W *)w, 1, K, N);
	else if (rb == 2)
		g_gemv<A, W, 2><<<(N + 1) / 2, bt, 0, s>>>((A *)y, (const A *)x, (const W *)w, 1, K, N);
	else
		g_gemv<A, W, 1><<<N, bt, 0, s>>>((A *)y, (const A *)x, (const W *)w, 1, K, N);
}

template <typename A, int QT, int WPR>
static void run_q(void *y, const void *x, const void *w, int K, int N, cudaStream_t s)
{
	int nrg = (N + 16 / WPR - 1) / (16 / WPR); /* capped as glmc caps it (q_grid_cap) */
	int cap = (int)q_grid_cap(GEMV_SMS_SM90);
	g_qgemv<A, QT, WPR><<<K <= 8192 && nrg > cap ? cap : nrg, 256, 0, s>>>((A *)y, (const A *)x, (const unsigned char *)w,
	                                                                   1, K, N);
}

/* The tensor-core path (k_qgemv_mma over QT): 16 rows a warp, 128/WPR a block, the grid capped as
** glmc's cap (qm_grid_cap). */
template <typename A, int QT, int WPR>
static void run_qm(void *y, const void *x, const void *w, int K, int N, cudaStream_t s)
{
	int nrg = (N + 128 / WPR - 1) / (128 / WPR), cap = (int)qm_grid_cap(GEMV_SMS_SM90);
	g_qmma<A, QT, WPR><<<K <= 8192 && nrg > cap ? cap : nrg, 256, 0, s>>>(
		(A *)y, (const A *)x, (const unsigned char *)w, K, N);
}

/* The stream-K kernel (k_qgemv_sk): NWARP warps a block, S ring slots a warp, as many blocks an SM as its
** shared memory and registers allow (asked of the runtime once, outside any capture: check_sk runs it
** first), one wave; its parts and counts in buffers sized for the largest shape here (counts zero, and
** left zero by every launch). */
static float *sk_part;
static int *sk_cnt;
template <typename A, int QT, int NWARP, int S>
static void run_qsk(void *y, const void *x, const void *w, int K, int N, cudaStream_t s)
{
	static int bps = -1;
	long long smem = qsk_smem(QT, K, NWARP, S);
	if (bps < 0) {
		if (smem > qsk_smem_max(GEMV_SMEM_BLOCK_SM90)) {
			bps = 0;
		} else {
			CK(cudaFuncSetAttribute(g_qsk<A, QT, NWARP, S>, cudaFuncAttributeMaxDynamicSharedMemorySize,
			                        GEMV_SMEM_BLOCK_SM90));
			CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&bps, g_qsk<A, QT, NWARP, S>, NWARP * 32, (size_t)smem));
		}
		if (!sk_part) {
			CK(cudaMalloc(&sk_part, 64u << 20));
			CK(cudaMalloc(&sk_cnt, 1u << 20));
			CK(cudaMemset(sk_cnt, 0, 1u << 20));
		}
	}
	if (bps <= 0)
		return; /* does not fit: run() skips the variant (qsk_smem > qsk_smem_max) */
	long long grid;
	int maxseg;
	qsk_grid((N + 15) / 16, K, NWARP, (long long)GEMV_SMS_SM90 * bps, &grid, &maxseg);
	g_qsk<A, QT, NWARP, S><<<(unsigned)grid, NWARP * 32, (size_t)smem, s>>>((A *)y, (const A *)x, (const unsigned char *)w,
	                                                                      K, N, sk_part, sk_cnt, maxseg);
}

static size_t l2_bytes;
static int iters = 100;

/* Median µs per launch of f over `copies` weight buffers of `bytes` each (laid out one after another). */
static double time_kernel(Launch f, void *y, const void *x, const unsigned char *w, size_t bytes, int copies, int K, int N)
{
	return graph_time_us([&](int i, cudaStream_t s) { f(y, x, w + (size_t)(i % copies) * bytes, K, N, s); }, iters);
}

/* GB/s of the plain read kernel over 4 GiB, best of 10. */

struct Kind {
	const char *name;
	int qt;                 /* ggml id; 30 bf16, 1 f16 */
	Launch plain;           /* bf16/f16 */
	Launch q[4];            /* WPR 1, 2, 4, 8 */
	bool gen = false;       /* a general type (ops/quant.cuh q_load/q_decode): GEN_SHAPES, q_wpr's split only */
};

/* The general types' shapes: 4096², Llama-3-8B's gate/up (14336×4096), a GLM-5 routed expert's gate/up
** (2048×6144) and down (6144×2048), GLM-5's LM head (154880×6144). */
static const long long GEN_SHAPES[5][2] = {{4096, 4096}, {14336, 4096}, {2048, 6144}, {6144, 2048}, {154880, 6144}};

template <typename A> static std::vector<Kind> kinds(void)
{
	return {
		{"bf16", 30, run_plain<A, bf16>, {}},
		{"f16", 1, run_plain<A, f16>, {}},
		{"Q8_0", 8, nullptr, {run_q<A, 8, 1>, run_q<A, 8, 2>, run_q<A, 8, 4>, run_q<A, 8, 8>}},
		{"Q4_K", 12, nullptr, {run_q<A, 12, 1>, run_q<A, 12, 2>, run_q<A, 12, 4>, run_q<A, 12, 8>}},
		{"Q8mma", 8, nullptr, {run_qm<A, 8, 1>, run_qm<A, 8, 2>, run_qm<A, 8, 4>, run_qm<A, 8, 8>}},
		{"Q4mma", 12, nullptr, {run_qm<A, 12, 1>, run_qm<A, 12, 2>, run_qm<A, 12, 4>, run_qm<A, 12, 8>}},
		{"Q6mma", 14, nullptr, {run_qm<A, 14, 1>, run_qm<A, 14, 2>, run_qm<A, 14, 4>, run_qm<A, 14, 8>}},
		{"Q4sk", 12, nullptr, {run_qsk<A, 12, 16, 4>, run_qsk<A, 12, 16, 3>, run_qsk<A, 12, 8, 6>, run_qsk<A, 12, 8, 3>}},
		{"Q6sk", 14, nullptr, {run_qsk<A, 14, 16, 3>, run_qsk<A, 14, 16, 2>, run_qsk<A, 14, 8, 4>, run_qsk<A, 14, 8, 3>}},
		{"Q5_K", 13, nullptr, {run_q<A, 13, 1>, run_q<A, 13, 2>, run_q<A, 13, 4>, run_q<A, 13, 8>}},
		{"Q6_K", 14, nullptr, {run_q<A, 14, 1>, run_q<A, 14, 2>, run_q<A, 14, 4>, run_q<A, 14, 8>}},
#define GEN_KIND(name, q) {name, q, nullptr, {run_q<A, q, 1>, run_q<A, q, 2>, run_q<A, q, 4>, run_q<A, q, 8>}, true}
		GEN_KIND("Q4_0", 2), GEN_KIND("Q4_1", 3), GEN_KIND("Q5_0", 6), GEN_KIND("Q5_1", 7), GEN_KIND("Q2_K", 10),
		GEN_KIND("Q3_K", 11), GEN_KIND("IQ4_NL", 20), GEN_KIND("IQ4_XS", 23), GEN_KIND("MXFP4", 39),
		GEN_KIND("IQ1_S", 19), GEN_KIND("IQ1_M", 29), GEN_KIND("IQ2_XXS", 16), GEN_KIND("IQ2_XS", 17),
		GEN_KIND("IQ2_S", 22), GEN_KIND("IQ3_XXS", 18), GEN_KIND("IQ3_S", 21), GEN_KIND("TQ1_0", 34),
		GEN_KIND("TQ2_0", 35), GEN_KIND("NVFP4", 40),
#undef GEN_KIND
	};
}

/* File (= device) bytes of a row of K values of a general type. */
static long long gen_row_bytes(int qt, long long K)
{
	switch (qt) {
#define GEN_ROW(q) case q: return K / QGeo<q>::BLCK * QGeo<q>::BYTES;
	GEN_ROW(2) GEN_ROW(3) GEN_ROW(6) GEN_ROW(7) GEN_ROW(10) GEN_ROW(11) GEN_ROW(16) GEN_ROW(17) GEN_ROW(18) GEN_ROW(19)
	GEN_ROW(20) GEN_ROW(21) GEN_ROW(22) GEN_ROW(23) GEN_ROW(29) GEN_ROW(34) GEN_ROW(35) GEN_ROW(39) GEN_ROW(40)
#undef GEN_ROW
	default: return 0;
	}
}

/* Device bytes of an N×K weight of the kind (quantized rows padded to 16 bytes, as glmrun keeps them). */
static size_t weight_bytes(int qt, long long N, long long K)
{
	if (qt == 30 || qt == 1)
		return (size_t)(N * K * 2);
	if (qt == 8) /* superblocks of 8 blocks, 272 bytes */
		return (size_t)(N * ((K + 255) / 256 * 272));
	if (gen_row_bytes(qt, K)) /* the general types: the file's rows */
		return (size_t)(N * gen_row_bytes(qt, K));
	long long blck = 256, bb = qt == 12 ? 144 : qt == 13 ? 176 : 224; /* Q6_K: slots */
	return (size_t)(N * ((K / blck * bb + 15) & ~15LL));
}

/* Fill copies × bytes of weight with random values of the kind (on the GPU). */
static void fill(int qt, unsigned char *w, size_t bytes, int copies, long long N, long long K)
{
	for (int c = 0; c < copies; c++) {
		unsigned char *p = w + (size_t)c * bytes;
		long long n = N * K;
		unsigned grid = (unsigned)((qt == 30 || qt == 1 ? n : (long long)bytes) / 256 + 1);
		long long st = (long long)(bytes / (size_t)N);
		switch (qt) {
		case 30: g_rand<bf16><<<grid, 256>>>((bf16 *)p, n, (int)K); break;
		case 1: g_rand<f16><<<grid, 256>>>((f16 *)p, n, (int)K); break;
		case 8: g_qrand<8><<<grid, 256>>>(p, N, (int)(K / 32), st, K); break;
		case 12: g_qrand<12><<<grid, 256>>>(p, N, (int)(K / 256), st, K); break;
		case 13: g_qrand<13><<<grid, 256>>>(p, N, (int)(K / 256), st, K); break;
#define GEN_FILL(q) case q: g_genrand<q><<<grid, 256>>>(p, (long long)bytes); break;
		GEN_FILL(2) GEN_FILL(3) GEN_FILL(6) GEN_FILL(7) GEN_FILL(10) GEN_FILL(11) GEN_FILL(16) GEN_FILL(17) GEN_FILL(18)
		GEN_FILL(19) GEN_FILL(20) GEN_FILL(21) GEN_FILL(22) GEN_FILL(23) GEN_FILL(29) GEN_FILL(34) GEN_FILL(35)
		GEN_FILL(39) GEN_FILL(40)
#undef GEN_FILL
		default: g_qrand<14><<<grid, 256>>>(p, N, (int)(K / 256), st, K); break;
		}
		CK(cudaGetLastError());
	}
	CK(cudaDeviceSynchronize());
}

/* rel-L2 of the tensor-core Q4_K path against k_qgemv (q_wpr's split) on random x, each WPR. */
template <typename A, int QT>
static void check_mma(const unsigned char *w, long long N, long long K, const Launch *alt = nullptr,
                      const char *const *names = nullptr)
{
	A *x, *y;
	CK(cudaMalloc(&x, sizeof(A) * (size_t)K));
	CK(cudaMalloc(&y, sizeof(A) * (size_t)N * 5));
	g_rand<A><<<(unsigned)(K / 256 + 1), 256>>>(x, K, 64);
	Launch ref[4] = {run_q<A, QT, 1>, run_q<A, QT, 2>, run_q<A, QT, 4>, run_q<A, QT, 8>};
	Launch mm[4] = {run_qm<A, QT, 1>, run_qm<A, QT, 2>, run_qm<A, QT, 4>, run_qm<A, QT, 8>};
	if (alt)
		std::copy(alt, alt + 4, mm);
	int pick = q_wpr(N, K), pi = pick == 1 ? 0 : pick == 2 ? 1 : pick == 4 ? 2 : 3;
	CK(cudaMemset(y, 0xff, sizeof(A) * (size_t)N * 5)); /* poison: NaN in every type */
	ref[pi](y, x, w, (int)K, (int)N, 0);
	for (int i = 0; i < 4; i++)
		mm[i](y + (size_t)N * (i + 1), x, w, (int)K, (int)N, 0);
	CK(cudaDeviceSynchronize());
	std::vector<A> h((size_t)N * 5);
	CK(cudaMemcpy(h.data(), y, sizeof(A) * h.size(), cudaMemcpyDeviceToHost));
	auto hf = [&](size_t i) {
		float f;
		if (sizeof(A) == 4)
			memcpy(&f, &h[i], 4);
		else {
			unsigned u = (unsigned)((unsigned short *)h.data())[i] << 16;
			memcpy(&f, &u, 4);
		}
		return (double)f;
	};
	printf("check %6lldx%-6lld rel-L2 vs k_qgemv:", N, K);
	for (int i = 0; i < 4; i++) {
		double e = 0, r = 0;
		for (long long n = 0; n < N; n++) {
			double a = hf((size_t)N * (i + 1) + n), b = hf(n);
			e += (a - b) * (a - b), r += b * b;
		}
		if (names)
			printf(" %s %.2e", names[i], r > 0 ? sqrt(e / r) : -1.0);
		else
			printf(" WPR%d %.2e", 1 << i, r > 0 ? sqrt(e / r) : -1.0);
	}
	printf("\n");
	CK(cudaFree(x));
	CK(cudaFree(y));
}

template <typename A> static void run(const char *only, const char *shape, double bw)
{
	std::vector<std::array<long long, 2>> shapes = {{4096, 4096}, {14336, 4096}, {4096, 14336}, {2048, 2048},
	                                                {6144, 2048}, {154880, 6144}};
	long long sn, sk;
	if (shape && sscanf(shape, "%lldx%lld", &sn, &sk) == 2)
		shapes = {{sn, sk}};
	printf("%-7s %-13s %4s %10s %9s %7s\n", "type", "N x K", "WPR", "us", "GB/s", "%bw");
	for (const Kind &k : kinds<A>()) {
		if (only && strcasecmp(only, k.name))
			continue;
		std::vector<std::array<long long, 2>> ks = shapes;
		if (k.gen && !shape)
			ks.assign({{GEN_SHAPES[0][0], GEN_SHAPES[0][1]}, {GEN_SHAPES[1][0], GEN_SHAPES[1][1]},
			           {GEN_SHAPES[2][0], GEN_SHAPES[2][1]}, {GEN_SHAPES[3][0], GEN_SHAPES[3][1]},
			           {GEN_SHAPES[4][0], GEN_SHAPES[4][1]}});
		for (auto &sh : ks) {
			long long N = sh[0], K = sh[1];
			size_t bytes = weight_bytes(k.qt, N, K), fr, tot;
			int copies = (int)std::max<size_t>(1, (4 * l2_bytes + bytes - 1) / bytes);
			CK(cudaMemGetInfo(&fr, &tot));
			if ((size_t)copies * bytes + (1u << 30) > fr) {
				if (bytes + (1u << 30) > fr) {
					printf("%-7s %6lldx%-6lld  skipped: %.1f GiB do not fit\n", k.name, N, K, bytes / 1073741824.0);
					continue;
				}
				copies = 1; /* one copy of a weight this size is already far larger than L2 */
			}
			unsigned char *w;
			A *x, *y;
			CK(cudaMalloc(&w, bytes * (size_t)copies));
			CK(cudaMalloc(&x, sizeof(A) * (size_t)K));
			CK(cudaMalloc(&y, sizeof(A) * (size_t)N));
			CK(cudaMemset(x, 0x3c, sizeof(A) * (size_t)K));
			fill(k.qt, w, bytes, copies, N, K);
			if (!strcmp(k.name, "Q8mma"))
				check_mma<A, 8>(w, N, K);
			if (!strcmp(k.name, "Q4mma"))
				check_mma<A, 12>(w, N, K);
			if (!strcmp(k.name, "Q6mma"))
				check_mma<A, 14>(w, N, K);
			/* the stream-K variants: warps a block x ring slots a warp */
			static const char *const sk4[4] = {"16x4", "16x3", "8x6", "8x3"}, *const sk6[4] = {"16x3", "16x2", "8x4", "8x3"};
			const char *const *skn = !strcmp(k.name, "Q4sk") ? sk4 : !strcmp(k.name, "Q6sk") ? sk6 : nullptr;
			if (!strcmp(k.name, "Q4sk"))
				check_mma<A, 12>(w, N, K, k.q, skn);
			if (!strcmp(k.name, "Q6sk"))
				check_mma<A, 14>(w, N, K, k.q, skn);
			int pick = strstr(k.name, "mma") ? qm_wpr(N, K) : q_wpr(N, K);
			for (int i = 0; i < (k.plain ? 1 : 4); i++) {
				if (k.gen && (1 << i) != pick) /* the general types: the split glmc emits */
					continue;
				int snw, ssl; /* a stream variant whose shared memory does not fit a block is not timed */
				if (skn && sscanf(skn[i], "%dx%d", &snw, &ssl) == 2 &&
				    qsk_smem(k.qt, K, snw, ssl) > qsk_smem_max(GEMV_SMEM_BLOCK_SM90)) {
					printf("%-7s %6lldx%-6lld %4s  skipped: %lld bytes of shared memory\n", k.name, N, K, skn[i],
					       qsk_smem(k.qt, K, snw, ssl));
					continue;
				}
				double us = time_kernel(k.plain ? k.plain : k.q[i], y, x, w, bytes, copies, (int)K, (int)N);
				double gbs = bytes / (us * 1e-6) / 1e9;
				char wpr[8] = "-";
				if (skn)
					snprintf(wpr, sizeof wpr, "%s", skn[i]);
				else if (!k.plain)
					snprintf(wpr, sizeof wpr, "%d%s", 1 << i, (1 << i) == pick ? "*" : "");
				printf("%-7s %6lldx%-6lld %4s %10.2f %9.1f %6.1f%%\n", k.name, N, K, wpr, us, gbs, 100 * gbs / bw);
			}
			CK(cudaFree(w));
			CK(cudaFree(x));
			CK(cudaFree(y));
		}
	}
}

/* ---- GLM-5's decode groups: fused launches over blocks against the unfused chains (--fused) ---- */

template <typename A, int Q0, int Q1, int Q2, int Q3, int PRO, int EPI>
__global__ void __launch_bounds__(256)
	g_qfused(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1, const unsigned char *w2,
	         const unsigned char *w3, const A *x, const A *u, const A *nw, const A *r, int K, int N0, int N1, int N2,
	         int N3, int P0, int P1, int P2, int P3, int pro, int epi)
{
	k_qgemv_fused<A, Q0, Q1, Q2, Q3, A, PRO, EPI, 1>(y0, y1, y2, y3, w0, w1, w2, w3, nullptr, nullptr, nullptr, nullptr, x, u, nw,
	                                       nullptr, r, 1, K, N0, N1, N2, N3, P0, P1, P2, P3, pro, epi, 1e-5f, 1.0f, 1.0f,
	                                       1.0f, 1.0f);
}

/* The tensor-core kernel glmc emits for a one-token group whose members are all Q4_K or all Q6_K. */
template <typename A, int QT, int PRO, int EPI>
__global__ void __launch_bounds__(256, 2)
	g_qfused_mma(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1, const unsigned char *w2,
	             const unsigned char *w3, const A *x, const A *u, const A *nw, const A *r, int K, int N0, int N1, int N2,
	             int N3, int P)
{
	k_qgemv_fused_mma<A, QT, A, PRO, EPI>(y0, y1, y2, y3, w0, w1, w2, w3, nullptr, nullptr, nullptr, nullptr, x, u, nw,
	                                      nullptr, r, 1, K, N0, N1, N2, N3, P, P, P, P, PRO, EPI, 1e-5f, 1.0f, 1.0f,
	                                      1.0f, 1.0f);
}

/* k_qgemv_tc (the 2..16-token tensor-core GEMV) at one token: B's first column (two with a norm weight)
** the token, the others re-reads of it. PRO as the kernel takes it (GEMV_PRO_RMSLATE with the norm weight). */
template <typename A, int QT, int PRO, int EPI, int MT, int UC, int MINB>
__global__ void __launch_bounds__(256, MINB) /* glmc declares 3 (q_min_blocks) */
	g_qtc(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1, const unsigned char *w2,
	      const unsigned char *w3, const A *x, const A *u, const A *nw, const A *r, int T, int K, int N0, int N1, int N2,
	      int N3)
{
	k_qgemv_tc<A, QT, A, PRO, PRO == GEMV_PRO_RMSLATE, EPI, MT, 1, UC>(y0, y1, y2, y3, w0, w1, w2, w3, nullptr, nullptr,
	                                                                  nullptr, nullptr, x, u, nw, nullptr, r, T, K, N0, N1,
	                                                                  N2, N3, 1e-5f, 1.0f, 1.0f, 1.0f, 1.0f);
}

/* emit_cuda.c gemv_splits, repeated: each member's K split from the group's q_wpr and its row width. */
static void gemv_splits(const int *qt, int nm, int base, int *p)
{
	auto tb = [](int q) { return q == 0 ? 1024 : q == 1 || q == 30 ? 512 : q == 8 ? 272 : q == 12 ? 144 : q == 13 ? 176 : 210; };
	int minb = 1 << 30;
	for (int m = 0; m < nm; m++)
		minb = std::min(minb, tb(qt[m]));
	for (int m = 0; m < nm; m++) {
		double ratio = (double)tb(qt[m]) / minb;
		int sp = base;
		while (sp < 8 && (double)(2 * sp) / base <= ratio * 1.41421356)
			sp *= 2;
		p[m] = sp;
	}
}

template <typename A>
__global__ void __launch_bounds__(256) g_rmsnorm(A *y, const A *x, const A *w, int N)
{
	k_rmsnorm<A, A, true>(y, x, w, N, 1e-5f);
}

template <typename A> __global__ void __launch_bounds__(256) g_swiglu(A *y, const A *g, const A *u, long long n)
{
	k_swiglu<A>(y, g, u, n);
}

template <typename A> __global__ void __launch_bounds__(256) g_add(A *y, const A *a, const A *b, long long n)
{
	k_binary<A, A, 0>(y, a, b, n, n);
}

template <typename A, int QT, int WPR>
static void q_launch(A *y, const A *x, const unsigned char *w, int K, int N, cudaStream_t s)
{
	g_qgemv<A, QT, WPR><<<(N + 16 / WPR - 1) / (16 / WPR), 256, 0, s>>>(y, x, w, 1, K, N);
}

/* One unfused linear as glmc emits it: k_qgemv with q_wpr's split, or k_linear_gemv for a float weight. */
template <typename A> static void unfused_linear(int qt, A *y, const A *x, const unsigned char *w, int K, int N, cudaStream_t s)
{
	int wpr = q_wpr(N, K);
#define QL(q)                                                                                                  \
	(wpr == 1 ? q_launch<A, q, 1>(y, x, w, K, N, s) : wpr == 2 ? q_launch<A, q, 2>(y, x, w, K, N, s)              \
	 : wpr == 4 ? q_launch<A, q, 4>(y, x, w, K, N, s) : q_launch<A, q, 8>(y, x, w, K, N, s))
	switch (qt) {
	case 12: QL(12); break;
	case 14: QL(14); break;
	case 30: run_plain<A, bf16>(y, x, w, K, N, s); break;
	default: run_plain<A, float>(y, x, w, K, N, s); break;
	}
#undef QL
}

/* Median µs per run of f(copy) (copy = which weight copy to read), `iters` runs captured in one graph. */
static double time_fn(const std::function<void(int, cudaStream_t)> &f, int copies)
{
	return graph_time_us([&](int i, cudaStream_t s) { f(i % copies, s); }, iters);
}

/* A group's weights: member m of type Q[m] (0 f32, 30 bf16, else GGUF blocks), N[m] rows of K, in
** enough copies (each 256-byte aligned per member) to exceed 4× L2, filled with random values. */
struct GroupWeights {
	size_t wb[4] = {0, 0, 0, 0}, bytes = 0;
	long long ntot = 0;
	int copies = 1;
	unsigned char *w = nullptr;
	GroupWeights(const int *Q, int M, const std::vector<long long> &N, long long K)
	{
		for (int m = 0; m < M; m++) {
			wb[m] = Q[m] == 0 ? (size_t)(N[m] * K * 4) : weight_bytes(Q[m], N[m], K);
			wb[m] = (wb[m] + 255) & ~(size_t)255;
			bytes += wb[m], ntot += N[m];
		}
		copies = (int)std::max<size_t>(1, (4 * l2_bytes + bytes - 1) / bytes);
		CK(cudaMalloc(&w, bytes * (size_t)copies));
		for (int c = 0; c < copies; c++)
			for (int m = 0; m < M; m++) {
				unsigned char *p = at(c, m);
				if (Q[m] == 0)
					g_rand<float><<<(unsigned)(N[m] * K / 256 + 1), 256>>>((float *)p, N[m] * K, (int)K);
				else if (Q[m] == 30)
					g_rand<bf16><<<(unsigned)(N[m] * K / 256 + 1), 256>>>((bf16 *)p, N[m] * K, (int)K);
				else
					fill(Q[m], p, weight_bytes(Q[m], N[m], K), 1, N[m], K);
			}
		CK(cudaDeviceSynchronize());
	}
	~GroupWeights() { CK(cudaFree(w)); }
	/* member m of copy c */
	unsigned char *at(int c, int m) const
	{
		size_t o = (size_t)c * bytes;
		for (int i = 0; i < m; i++)
			o += wb[i];
		return w + o;
	}
};

/* A group's activations: its input x, the SwiGLU's up u, the staged input h, the norm weight nw, the
** residual r, the stored SwiGLU g2 and the members' outputs y, inputs filled with 0x3c bytes. */
template <typename A> struct GroupBufs {
	A *x, *u, *h, *nw, *r, *g2, *y[4];
	GroupBufs(long long K, const std::vector<long long> &N) /* x, u and y hold 8 tokens' rows (qtc_row) */
	{
		A **in[] = {&x, &u, &h, &nw};
		for (A **p : in) {
			CK(cudaMalloc(p, sizeof(A) * (size_t)K * 8));
			CK(cudaMemset(*p, 0x3c, sizeof(A) * (size_t)K * 8));
		}
		CK(cudaMalloc(&r, sizeof(A) * (size_t)N[0] * 8));
		CK(cudaMemset(r, 0x3c, sizeof(A) * (size_t)N[0] * 8));
		CK(cudaMalloc(&g2, sizeof(A) * (size_t)N[0]));
		for (int m = 0; m < 4; m++)
			CK(cudaMalloc(&y[m], sizeof(A) * (size_t)std::max(N[m], 1LL) * 8));
	}
	~GroupBufs()
	{
		for (A *p : {x, u, h, nw, r, g2, y[0], y[1], y[2], y[3]})
			CK(cudaFree(p));
	}
};

/* The unfused chain's prologue: the RMSNorm or SwiGLU kernel into b.h (PRO), or none; the GEMVs' input. */
template <typename A, int PRO> static const A *unfused_prologue(const GroupBufs<A> &b, long long K, cudaStream_t s)
{
	if (PRO == GEMV_PRO_RMSNORM) {
		g_rmsnorm<A><<<1, 256, 0, s>>>(b.h, b.x, b.nw, (int)K);
		return b.h;
	}
	if (PRO == GEMV_PRO_SWIGLU) {
		g_swiglu<A><<<(unsigned)((K + 255) / 256), 256, 0, s>>>(b.h, b.x, b.u, K);
		return b.h;
	}
	return b.x;
}

/* Member 0's output of one launch of `f` on weight copy 0, as floats (y poisoned first). */
template <typename A>
static std::vector<float> out0(const std::function<void(int, cudaStream_t)> &f, A *y, long long n)
{
	CK(cudaMemset(y, 0xff, sizeof(A) * (size_t)n));
	f(0, 0);
	CK(cudaDeviceSynchronize());
	std::vector<A> h((size_t)n);
	CK(cudaMemcpy(h.data(), y, sizeof(A) * h.size(), cudaMemcpyDeviceToHost));
	std::vector<float> o((size_t)n);
	for (long long i = 0; i < n; i++) { /* bf16 bits are f32's top half (to_f is device code) */
		unsigned short bits;
		unsigned u;
		memcpy(&bits, &h[(size_t)i], 2);
		u = (unsigned)bits << 16;
		memcpy(&o[(size_t)i], &u, 4);
	}
	return o;
}

/*
** A group of one Q4_K/Q6_K type through k_qgemv_tc at 1 and 4 tokens (MT 1; UC 1 at 3 and 2 blocks an SM,
** UC 2 at 2; gemv_shape_qtc's warps and the other of 4/8), the 1-token output against the emitted launch
** `ref` (rel-L2 of member 0's output). The shape glmc emits (gemv_shape_qtc, 3 blocks an SM) is marked '*'.
*/
template <typename A, int QT, int PRO, int EPI>
static void qtc_row(const GroupWeights &gw, GroupBufs<A> &b, int M, const std::vector<long long> &N, long long K, double bw,
                    const std::function<void(int, cudaStream_t)> &ref)
{
	constexpr int TP = PRO == GEMV_PRO_RMSNORM ? GEMV_PRO_RMSLATE : PRO;
	int mt0, uc0, bl0;
	long long g0;
	gemv_shape_qtc(gw.ntot, K, &mt0, &uc0, &bl0, &g0);
	std::vector<float> want = out0<A>(ref, b.y[0], N[0]);
	printf("\n%-34s", "  k_qgemv_tc MT 1 uc/warps/minb T1|T4 µs");
	auto wp = [&](int c, int m) { return (const unsigned char *)gw.at(c, m); };
	const int mt = 1;
	for (int v = 0; v < 3; v++)
		for (int i = 0; i < 2; i++) {
			int uc = v < 2 ? 1 : 2, minb = v == 0 ? 3 : 2, bl = i == 0 ? bl0 : bl0 == 256 ? 128 : 256;
			auto k = v == 0 ? g_qtc<A, QT, TP, EPI, 1, 1, 3> : v == 1 ? g_qtc<A, QT, TP, EPI, 1, 1, 2>
			                                                        : g_qtc<A, QT, TP, EPI, 1, 2, 2>;
			unsigned grid = (unsigned)((gw.ntot + 15) / 16);
			if (bl > 32 * (K / 256)) /* more warps than K's blocks */
				continue;
			{
				auto at = [&, k, grid, bl](int T) {
					return [&, k, grid, bl, T](int c, cudaStream_t s) {
						k<<<grid, bl, 0, s>>>(b.y[0], b.y[1], b.y[2], b.y[3], wp(c, 0), M > 1 ? wp(c, 1) : nullptr,
						                      M > 2 ? wp(c, 2) : nullptr, M > 3 ? wp(c, 3) : nullptr, b.x, b.u,
						                      TP == GEMV_PRO_RMSLATE ? b.nw : nullptr, b.r, T, (int)K, (int)N[0],
						                      (int)N[1], (int)N[2], (int)N[3]);
					};
				};
				std::vector<float> got = out0<A>(at(1), b.y[0], N[0]);
				double e = 0, rr = 0;
				for (size_t i = 0; i < got.size(); i++)
					e += ((double)got[i] - want[i]) * ((double)got[i] - want[i]), rr += (double)want[i] * want[i];
				double t = time_fn(at(1), gw.copies), t4 = time_fn(at(4), gw.copies);
				printf(" %d/%d/%d%s %.2f|%.2f (%.1f%%, %.1e)", uc, bl / 32, minb, mt == mt0 && uc == uc0 && bl == bl0 && minb == 3 ? "*" : "",
				       t, t4, 100 * gw.bytes / (t * 1e-6) / 1e9 / bw, rr > 0 ? sqrt(e / rr) : -1.0);
			}
		}
}

/*
** One group: members (type, rows) over K, prologue PRO, residual EPI, fused with the splits emit_cuda.c
** picks (q_wpr of the group's rows, more for wider rows; printed). Weights in enough copies to exceed
** 4× L2.
*/
template <typename A, int Q0, int Q1, int Q2, int Q3, int PRO, int EPI>
static void fused_group(const char *name, std::vector<long long> N, long long K, double bw)
{
	const int Q[4] = {Q0, Q1, Q2, Q3};
	int M = (int)N.size();
	N.resize(4, 0);
	GroupWeights gw(Q, M, N, K);
	size_t bytes = gw.bytes;
	long long ntot = gw.ntot;
	int copies = gw.copies;
	GroupBufs<A> b(K, N);
	A *x = b.x, *u = b.u, *nw = b.nw, *r = b.r, **y = b.y;
	auto wp = [&](int c, int m) { return (const unsigned char *)gw.at(c, m); };
	auto unfused = [&](int c, cudaStream_t s) {
		const A *in = unfused_prologue<A, PRO>(b, K, s);
		for (int m = 0; m < M; m++)
			unfused_linear<A>(Q[m], y[m], in, wp(c, m), (int)K, (int)N[m], s);
		if (EPI & GEMV_EPI_RES)
			g_add<A><<<(unsigned)((N[0] + 255) / 256), 256, 0, s>>>(y[0], r, y[0], N[0]);
	};
	int P[4] = {1, 1, 1, 1};
	gemv_splits(Q, M, q_wpr(ntot, K), P);
	unsigned nb = 0;
	char splits[32] = "";
	for (int m = 0; m < M; m++) {
		nb += (unsigned)((N[m] + 16 / P[m] - 1) / (16 / P[m]));
		snprintf(splits + strlen(splits), sizeof splits - strlen(splits), "%s%d", m ? "," : "", P[m]);
	}
	auto fused = [&](int c, cudaStream_t s) {
		g_qfused<A, Q0, Q1, Q2, Q3, PRO, EPI><<<nb, 256, 0, s>>>(
			y[0], y[1], y[2], y[3], wp(c, 0), M > 1 ? wp(c, 1) : nullptr, M > 2 ? wp(c, 2) : nullptr,
			M > 3 ? wp(c, 3) : nullptr, x, u, PRO == GEMV_PRO_RMSNORM ? nw : nullptr, r, (int)K, (int)N[0], (int)N[1],
			(int)N[2], (int)N[3], P[0], P[1], P[2], P[3], PRO, EPI);
	};
	double tu = time_fn(unfused, copies), tf = time_fn(fused, copies), gbs = bytes / (tf * 1e-6) / 1e9;
	printf("%-34s %6lld %6lld %8s %9.2f %9.2f %6.2fx %6.1f%%", name, ntot, K, splits, tu, tf, tu / tf, 100 * gbs / bw);
	/* members of one Q4_K or Q6_K type: the tensor-core kernel glmc emits (qm_wpr's split, qm_grid_cap), and
	** the same launch without its prologue (x taken as it is), which shows what the prologue costs */
	constexpr bool ONE = (Q0 == 12 || Q0 == 14) && Q1 == Q0 && Q2 == Q0 && Q3 == Q0; /* run_fused pads with Q0 */
	if constexpr (ONE) {
		int wpr = qm_wpr(ntot, K);
		unsigned nbm = 0;
		for (int m = 0; m < M; m++)
			nbm += (unsigned)((N[m] + 128 / wpr - 1) / (128 / wpr));
		unsigned grid = K <= 8192 && nbm > qm_grid_cap(GEMV_SMS_SM90) ? qm_grid_cap(GEMV_SMS_SM90) : nbm;
		auto mma = [&](int pro) { /* 1: the group's prologue, 0: none, 2: RMSLATE */
			return [&, pro](int c, cudaStream_t s) {
				auto k = pro == 1 ? g_qfused_mma<A, Q0, PRO, EPI>
				         : pro == 2 ? g_qfused_mma<A, Q0, GEMV_PRO_RMSLATE, EPI> : g_qfused_mma<A, Q0, GEMV_PRO_NONE, EPI>;
				k<<<grid, 256, 0, s>>>(y[0], y[1], y[2], y[3], wp(c, 0), M > 1 ? wp(c, 1) : nullptr,
				                       M > 2 ? wp(c, 2) : nullptr, M > 3 ? wp(c, 3) : nullptr, x, u,
				                       PRO == GEMV_PRO_RMSNORM ? nw : nullptr, r, (int)K, (int)N[0], (int)N[1],
				                       (int)N[2], (int)N[3], wpr);
			};
		};
		double tm = time_fn(mma(1), copies), tn = PRO == GEMV_PRO_NONE ? tm : time_fn(mma(0), copies);
		printf(" %9.2f %6.1f%% %9.2f", tm, 100 * bytes / (tm * 1e-6) / 1e9 / bw, tn);
		if (PRO == GEMV_PRO_RMSNORM) { /* what glmc emits for a Q4_K norm group (not Q6_K: NOTES 21) */
			double tl = time_fn(mma(2), copies);
			printf(" %9.2f %6.1f%%", tl, 100 * bytes / (tl * 1e-6) / 1e9 / bw);
		} else {
			printf(" %9s %7s", "", "");
		}
		printf("  (wpr %d, %u blocks)", wpr, grid);
		if constexpr (std::is_same<A, bf16>::value) /* the emitted launch: the late form for a Q4_K norm group */
			qtc_row<A, Q0, PRO, EPI>(gw, b, M, N, K, bw, mma(PRO == GEMV_PRO_RMSNORM && Q0 == 12 ? 2 : 1));
	} else if (PRO == GEMV_PRO_RMSNORM) { /* mixed types: k_qgemv_fused itself with the norm's scale late */
		auto late = [&](int c, cudaStream_t s) {
			g_qfused<A, Q0, Q1, Q2, Q3, GEMV_PRO_RMSLATE, EPI><<<nb, 256, 0, s>>>(
				y[0], y[1], y[2], y[3], wp(c, 0), M > 1 ? wp(c, 1) : nullptr, M > 2 ? wp(c, 2) : nullptr,
				M > 3 ? wp(c, 3) : nullptr, x, u, nw, r, (int)K, (int)N[0], (int)N[1], (int)N[2], (int)N[3], P[0],
				P[1], P[2], P[3], GEMV_PRO_RMSLATE, EPI);
		};
		double tl = time_fn(late, copies);
		printf(" %9s %7s %9s %9.2f %6.1f%%  (k_qgemv_fused)", "", "", "", tl, 100 * bytes / (tl * 1e-6) / 1e9 / bw);
	}
	printf("\n");
}

template <typename A, int PRO, int EPI, int RB>
__global__ void __launch_bounds__(256)
	g_ffused(A *y0, A *y1, A *y2, A *y3, const bf16 *w0, const bf16 *w1, const bf16 *w2, const bf16 *w3, const A *x,
	         const A *u, const A *nw, const A *r, int K, int N0, int N1, int N2, int N3)
{
	k_gemv_fused<A, bf16, A, PRO, true, EPI, RB, 1>(y0, y1, y2, y3, w0, w1, w2, w3, nullptr, nullptr, nullptr, nullptr, x,
	                                             u, nw, nullptr, r, 1, K, N0, N1, N2, N3, 1e-5f, 1.0f, 1.0f, 1.0f, 1.0f);
}

/* g_ffused with the register budget glmc declares where gemv_min_blocks1 gives one (8 blocks of 128) */
template <typename A, int PRO, int EPI, int RB>
__global__ void __launch_bounds__(128, 8)
	g_ffused_b8(A *y0, A *y1, A *y2, A *y3, const bf16 *w0, const bf16 *w1, const bf16 *w2, const bf16 *w3, const A *x,
	            const A *u, const A *nw, const A *r, int K, int N0, int N1, int N2, int N3)
{
	k_gemv_fused<A, bf16, A, PRO, true, EPI, RB, 1>(y0, y1, y2, y3, w0, w1, w2, w3, nullptr, nullptr, nullptr, nullptr, x,
	                                             u, nw, nullptr, r, 1, K, N0, N1, N2, N3, 1e-5f, 1.0f, 1.0f, 1.0f, 1.0f);
}

/*
** One bf16 group of Llama-3-8B's decode step as glmc emits it (k_gemv_fused at gemv_shape_h's shape, the
** GLU epilogue's columns in pairs, prologue kernels on gemv_pro_blocks looping blocks) against the
** unfused chain (the norm or SwiGLU kernel, one k_linear_gemv per member, the swiglu or add after).
** Weights in enough copies to exceed 4× L2.
*/
template <typename A, int PRO, int EPI>
static void float_group(const char *name, std::vector<long long> N, long long K, double bw)
{
	int M = (int)N.size();
	N.resize(4, 0);
	const int Q[4] = {30, 30, 30, 30};
	GroupWeights gw(Q, M, N, K);
	size_t bytes = gw.bytes;
	long long ntot = gw.ntot;
	int copies = gw.copies;
	GroupBufs<A> b(K, N);
	A *x = b.x, *u = b.u, *nw = b.nw, *r = b.r, *g2 = b.g2, **y = b.y;
	auto wp = [&](int c, int m) { return (const bf16 *)gw.at(c, m); };
	auto unfused = [&](int c, cudaStream_t s) {
		const A *in = unfused_prologue<A, PRO>(b, K, s);
		for (int m = 0; m < M; m++)
			unfused_linear<A>(30, y[m], in, (const unsigned char *)wp(c, m), (int)K, (int)N[m], s);
		if (EPI & GEMV_EPI_GLU)
			g_swiglu<A><<<(unsigned)((N[0] + 255) / 256), 256, 0, s>>>(g2, y[0], y[1], N[0]);
		if (EPI & GEMV_EPI_RES)
			g_add<A><<<(unsigned)((N[0] + 255) / 256), 256, 0, s>>>(y[0], r, y[0], N[0]);
	};
	int bt, rb;
	if (PRO == GEMV_PRO_NONE && EPI == GEMV_EPI_RES)
		gemv_shape_plain1(K, ntot, 2, GEMV_SMS_SM90, &bt, &rb);
	else
		gemv_shape_h(K, ntot, 2, GEMV_SMS_SM90, &bt, &rb);
	if ((EPI & GEMV_EPI_GLU) && rb < 2)
		rb = 2;
	unsigned grid = gemv_grid_h(ntot, rb, bt, PRO != GEMV_PRO_NONE, GEMV_SMS_SM90);
	constexpr int R1 = (EPI & GEMV_EPI_GLU) ? 2 : 1;
	auto kern = rb == 4 ? g_ffused<A, PRO, EPI, 4> : rb == 2 ? g_ffused<A, PRO, EPI, 2> : g_ffused<A, PRO, EPI, R1>;
	if (gemv_min_blocks1(bt, rb, grid, GEMV_SMS_SM90) == 8) /* as glmc declares it (only rb <= 4 at 128 threads) */
		kern = rb == 4 ? g_ffused_b8<A, PRO, EPI, 4> : rb == 2 ? g_ffused_b8<A, PRO, EPI, 2> : g_ffused_b8<A, PRO, EPI, R1>;
	auto fused = [&](int c, cudaStream_t s) {
		kern<<<grid, bt, 0, s>>>(y[0], (EPI & GEMV_EPI_GLU) ? nullptr : y[1], y[2], y[3], wp(c, 0), M > 1 ? wp(c, 1) : nullptr,
		                         M > 2 ? wp(c, 2) : nullptr, M > 3 ? wp(c, 3) : nullptr, x, u, nw, r, (int)K, (int)N[0],
		                         (int)N[1], (int)N[2], (int)N[3]);
	};
	double tu = time_fn(unfused, copies), tf = time_fn(fused, copies), gbs = bytes / (tf * 1e-6) / 1e9;
	char shape[32];
	snprintf(shape, sizeof shape, "%dx%d g%u", rb, bt, grid);
	printf("%-34s %6lld %6lld %8s %9.2f %9.2f %6.2fx %6.1f%%", name, ntot, K, shape, tu, tf, tu / tf, 100 * gbs / bw);
	/* a norm group also as GEMV_PRO_RMSLATE (the scale after the dots, one group a block) and with no
	** prologue at all (x as it is: the floor for what the norm may cost) */
	if constexpr (PRO == GEMV_PRO_RMSNORM) {
		/* the late form at the one-token shape glmc emits for it */
		int bl = bt, rl = rb;
		if (!(EPI & GEMV_EPI_GLU))
			gemv_shape_late1(K, ntot, 2, GEMV_SMS_SM90, &bl, &rl);
		unsigned g1 = gemv_grid_h(ntot, rl, bl, 0, GEMV_SMS_SM90);
		auto other = [&](auto k) {
			return [&, k](int c, cudaStream_t s) {
				k<<<g1, bl, 0, s>>>(y[0], (EPI & GEMV_EPI_GLU) ? nullptr : y[1], y[2], y[3], wp(c, 0),
				                    M > 1 ? wp(c, 1) : nullptr, M > 2 ? wp(c, 2) : nullptr, M > 3 ? wp(c, 3) : nullptr,
				                    x, u, nw, r, (int)K, (int)N[0], (int)N[1], (int)N[2], (int)N[3]);
			};
		};
		auto late = rl == 8 ? g_ffused<A, GEMV_PRO_RMSLATE, EPI, 8> : rl == 4 ? g_ffused<A, GEMV_PRO_RMSLATE, EPI, 4>
		          : rl == 2 ? g_ffused<A, GEMV_PRO_RMSLATE, EPI, 2> : g_ffused<A, GEMV_PRO_RMSLATE, EPI, R1>;
		auto none = rl == 8 ? g_ffused<A, GEMV_PRO_NONE, EPI, 8> : rl == 4 ? g_ffused<A, GEMV_PRO_NONE, EPI, 4>
		          : rl == 2 ? g_ffused<A, GEMV_PRO_NONE, EPI, 2> : g_ffused<A, GEMV_PRO_NONE, EPI, R1>;
		double tl = time_fn(other(late), copies), tn = time_fn(other(none), copies);
		printf(" %9.2f %6.1f%% %9.2f", tl, 100 * bytes / (tl * 1e-6) / 1e9 / bw, tn);
	}
	printf("\n");
}

/*
** --llama --sweep: each Llama-3-8B and GLM-4.7-Flash bf16 group as glmc emits it for a one-token step
** (a norm group as GEMV_PRO_RMSLATE, one group a block) at every columns-a-block RB in {1, 2, 4, 8}
** (GLU: 2, 4, 8) and every block of 64, 128 or 256 threads, against the shape gemv_shape_h picks (marked
** '*'): whether the emitted shape is the best one for these groups (bench/NOTES.md).
*/
template <typename A, int PRO, int EPI>
static void float_sweep(const char *name, std::vector<long long> N, long long K, double bw)
{
	int M = (int)N.size();
	N.resize(4, 0);
	const int Q[4] = {30, 30, 30, 30};
	GroupWeights gw(Q, M, N, K);
	GroupBufs<A> b(K, N);
	A *x = b.x, *u = b.u, *nw = b.nw, *r = b.r, **y = b.y;
	int bt0, rb0;
	if (PRO == GEMV_PRO_NONE && EPI == GEMV_EPI_RES)
		gemv_shape_plain1(K, gw.ntot, 2, GEMV_SMS_SM90, &bt0, &rb0);
	else if (PRO == GEMV_PRO_RMSLATE && !(EPI & GEMV_EPI_GLU))
		gemv_shape_late1(K, gw.ntot, 2, GEMV_SMS_SM90, &bt0, &rb0);
	else
		gemv_shape_h(K, gw.ntot, 2, GEMV_SMS_SM90, &bt0, &rb0);
	if ((EPI & GEMV_EPI_GLU) && rb0 < 2)
		rb0 = 2;
	printf("%-34s", name);
	for (int rb = 1; rb <= 8; rb *= 2) {
		if ((EPI & GEMV_EPI_GLU) && rb < 2)
			continue;
		for (int bt = 64; bt <= 256; bt *= 2) {
			auto k = rb == 8 ? g_ffused<A, PRO, EPI, 8> : rb == 4 ? g_ffused<A, PRO, EPI, 4>
			       : rb == 2 ? g_ffused<A, PRO, EPI, 2> : g_ffused<A, PRO, EPI, (EPI & GEMV_EPI_GLU) ? 2 : 1>;
			unsigned grid = gemv_grid_h(gw.ntot, rb, bt, 0, GEMV_SMS_SM90);
			auto f = [&](int c, cudaStream_t s) {
				k<<<grid, bt, 0, s>>>(y[0], (EPI & GEMV_EPI_GLU) ? nullptr : y[1], y[2], y[3], (const bf16 *)gw.at(c, 0),
				                      M > 1 ? (const bf16 *)gw.at(c, 1) : nullptr, M > 2 ? (const bf16 *)gw.at(c, 2) : nullptr,
				                      M > 3 ? (const bf16 *)gw.at(c, 3) : nullptr, x, u, nw, r, (int)K, (int)N[0], (int)N[1],
				                      (int)N[2], (int)N[3]);
			};
			double t = time_fn(f, gw.copies);
			printf(" %d/%d%s %.2f (%.1f%%)", rb, bt, rb == rb0 && bt == bt0 ? "*" : "", t,
			       100 * gw.bytes / (t * 1e-6) / 1e9 / bw);
		}
	}
	printf("\n");
}

/* Llama-3-8B's four decode GEMV groups in bf16 (--fused --llama). */
template <typename A> static void run_llama(double bw, int sweep)
{
	if (sweep) {
		printf("# rb/threads µs (%%bw) per group, '*' the emitted shape\n");
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+q+k+v (late norm)", {4096, 1024, 1024}, 4096, bw);
		float_sweep<A, GEMV_PRO_NONE, GEMV_EPI_RES>("o_proj+residual", {4096}, 4096, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, GEMV_EPI_GLU>("norm+gate+up (late norm), swiglu", {14336, 14336}, 4096, bw);
		float_sweep<A, GEMV_PRO_NONE, GEMV_EPI_RES>("down+residual", {4096}, 14336, bw);
		printf("%-34s\n", "GLM-4.7-Flash group (bf16)");
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+q_a+kv_a (late norm)", {768, 576}, 2048, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("q_a norm+q_b (late norm)", {5120}, 768, bw);
		float_sweep<A, GEMV_PRO_NONE, GEMV_EPI_RES>("o_proj+residual", {2048}, 5120, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+router+shexp gate/up (late)", {64, 1536, 1536}, 2048, bw);
		printf("%-34s\n", "other models' o/down projections and q/k/v groups (bf16)");
		const long long res[][2] = {{4096, 12288}, {5120, 13824}, {3584, 18944}, {2048, 8192}, {3072, 8192},
		                            {8192, 8192}, {8192, 28672}, {2048, 1536}};
		for (auto &nk : res) {
			char name[48];
			snprintf(name, sizeof name, "o/down+residual %lldx%lld", nk[0], nk[1]);
			float_sweep<A, GEMV_PRO_NONE, GEMV_EPI_RES>(name, {nk[0]}, nk[1], bw);
		}
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+q+k+v 3584+2x512 K 3584", {3584, 512, 512}, 3584, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+q+k+v 8192+2x1024 K 8192", {8192, 1024, 1024}, 8192, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+q+k+v 2048+2x512 K 2048", {2048, 512, 512}, 2048, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+q+k+v 5120+2x1024 K 5120", {5120, 1024, 1024}, 5120, bw);
		float_sweep<A, GEMV_PRO_RMSLATE, 0>("norm+lm_head 128256 K 4096 (late)", {128256}, 4096, bw);
		return;
	}
	printf("%-34s %6s %6s %8s %9s %9s %7s %7s %9s %7s %9s\n", "Llama-3-8B group (bf16)", "rows", "K", "rb/bt/g", "unfused",
	       "fused", "speedup", "%bw", "late", "%bw", "-pro");
	float_group<A, GEMV_PRO_RMSNORM, 0>("norm+q+k+v", {4096, 1024, 1024}, 4096, bw);
	float_group<A, GEMV_PRO_NONE, GEMV_EPI_RES>("o_proj+residual", {4096}, 4096, bw);
	float_group<A, GEMV_PRO_RMSNORM, GEMV_EPI_GLU>("norm+gate+up, swiglu stored", {14336, 14336}, 4096, bw);
	float_group<A, GEMV_PRO_NONE, GEMV_EPI_RES>("down+residual", {4096}, 14336, bw);
	printf("%-34s\n", "GLM-4.7-Flash group (bf16)");
	float_group<A, GEMV_PRO_RMSNORM, 0>("norm+q_a+kv_a", {768, 576}, 2048, bw);
	float_group<A, GEMV_PRO_RMSNORM, 0>("q_a norm+q_b", {5120}, 768, bw);
	float_group<A, GEMV_PRO_NONE, GEMV_EPI_RES>("o_proj+residual", {2048}, 5120, bw);
	float_group<A, GEMV_PRO_RMSNORM, 0>("norm+router+shexp gate/up", {64, 1536, 1536}, 2048, bw);
}

template <typename A> static void run_fused(double bw)
{
	constexpr int RT = std::is_same<A, bf16>::value ? 30 : 0; /* the f32 router (bf16 under bf16 activations) */
	printf("%-34s %6s %6s %8s %9s %9s %7s %7s %9s %7s %9s %9s %7s\n", "GLM-5 group (tp 1)", "rows", "K", "splits",
	       "unfused", "fused", "speedup", "%bw", "mma", "%bw", "mma -pro", "late", "%bw");
	fused_group<A, 12, 12, 12, 12, GEMV_PRO_RMSNORM, 0>("norm+q_a+kv_a+idx_k+idx_w Q4_K", {2048, 576, 128, 32}, 6144, bw);
	fused_group<A, 12, 12, 12, 12, GEMV_PRO_RMSNORM, 0>("norm+q_b+idx_q_b Q4_K", {16384, 4096}, 2048, bw);
	fused_group<A, 12, 12, 12, 12, GEMV_PRO_NONE, GEMV_EPI_RES>("o_proj+residual Q4_K", {6144}, 16384, bw);
	fused_group<A, RT, 12, 12, RT, GEMV_PRO_RMSNORM, 0>("norm+router+shexp gate/up", {256, 2048, 2048}, 6144, bw);
	fused_group<A, 12, 12, 12, 12, GEMV_PRO_RMSNORM, 0>("norm+gate+up Q4_K (dense)", {12288, 12288}, 6144, bw);
	fused_group<A, 14, 14, 14, 14, GEMV_PRO_SWIGLU, GEMV_EPI_RES>("swiglu+down+residual Q6_K", {6144}, 12288, bw);
	fused_group<A, 14, 14, 14, 14, GEMV_PRO_RMSNORM, 0>("norm+lm_head Q6_K", {154880}, 6144, bw);
}

int main(int argc, char **argv)
{
	const char *act = "bf16", *only = NULL, *shape = NULL;
	int fusedg = 0, sweep = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--act") && i + 1 < argc)
			act = argv[++i];
		else if (!strcmp(argv[i], "--only") && i + 1 < argc)
			only = argv[++i];
		else if (!strcmp(argv[i], "--shape") && i + 1 < argc)
			shape = argv[++i];
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--fused"))
			fusedg = fusedg ? fusedg : 1;
		else if (!strcmp(argv[i], "--llama"))
			fusedg = 2;
		else if (!strcmp(argv[i], "--sweep"))
			sweep = 1;
		else {
			fprintf(stderr, "usage: gemv [--act bf16|f32] [--only TYPE] [--shape NxK] [--iters N] [--fused] [--llama [--sweep]]\n");
			return 2;
		}
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* rows as they come, even if a later one fails */
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	l2_bytes = (size_t)prop.l2CacheSize;
	double bw = read_bandwidth();
	printf("# %s, %d SMs, L2 %.0f MiB; activations %s, batch 1\n", prop.name, prop.multiProcessorCount,
	       l2_bytes / 1048576.0, act);
	printf("# read bandwidth (plain read-only kernel, 4 GiB): %.1f GB/s\n", bw);
	if (fusedg == 2)
		run_llama<bf16>(bw, sweep);
	else if (fusedg && !strcmp(act, "f32"))
		run_fused<float>(bw);
	else if (fusedg)
		run_fused<bf16>(bw);
	else if (!strcmp(act, "f32"))
		run<float>(only, shape, bw);
	else
		run<bf16>(only, shape, bw);
	return 0;
}
