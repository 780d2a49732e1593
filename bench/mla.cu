/*
** bench/mla.cu — the absorbed-MLA decode kernels at the shapes of issue 8's profile, against the GPU's
** read bandwidth measured in the same process. Built with nvcc by `make bench-mla` (build/bench/mla; also
** part of `make gpu-bundle`); run on the GPU machine. bf16 activations and weights, batch 1 unless said.
**
**   - attention: k_mla (one block per head and token: what glmc ran before, and still runs for steps of
**     more than 8 tokens) against k_mla_split (glmc's decode path: the context split over blocks, the
**     ranges merged by the last block of each head group), GLM-4.7-Flash (20 heads, 576/512) at contexts
**     200, 2048 and 8192, and GLM-5's DSA selection of 2048 rows (64 heads at tp 1, 8 at tp 8) at
**     contexts 200 and 4096; the split geometry is emit_cuda.c's;
**   - the attention with the value absorb after it (W_UV [H, 256, 512]), the pair as a decode step runs
**     it: the range states merged by k_mla_split's last block of each head group, or by every block of
**     k_mla_vabsorb<.., true> (glmc's plans since bench/NOTES.md entry 23);
**   - the query absorb k_mla_qprep (W_UK [H, 192, 512], HF and GGUF layouts) and the value absorb
**     k_mla_vabsorb (W_UV [H, 256, 512]) at GLM-4.7-Flash's 20 heads and GLM-5's 64.
** Each kernel is timed over a CUDA graph of 100 launches cycling through copies of its weight (or cache)
** that together exceed 4x the L2, so every launch reads from HBM as a decode step does; the figure is the
** median of 7 replays. Reported: µs per launch, the bytes a launch must read, and GB/s of those bytes.
**
**   build/bench/mla [--iters N]
*/
#include "../ops/kernels.cuh"
#include "../ops/fused.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <functional>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

static void ck(cudaError_t e, const char *what, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "mla: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(x) ck((x), #x, __LINE__)
#include "graph_time.cuh"


/* ---- the kernels, wrapped as glmc wraps them ---- */

__global__ void __launch_bounds__(128) g_mla(bf16 *y, const bf16 *q, const bf16 *cache, const int *pos, const int *sel,
                                             int nsel, int H, int Dk, int Dv, float scale, const int *seq, int S)
{
	k_mla<bf16>(y, q, cache, pos, sel, nsel, H, Dk, Dv, scale, seq, S);
}

template <int HB, bool MERGE = true>
__global__ void __launch_bounds__(256) g_split(bf16 *y, float *pacc, float *pml, int *done, const bf16 *q,
                                               const bf16 *cache, const int *pos, const int *sel, int nsel, int H,
                                               int Dk, int Dv, float scale, const int *seq, int S)
{
	/* the selection lists its visible rows first, as glmc tells the kernel for an indexer's */
	k_mla_split<bf16, HB, MERGE>(y, pacc, pml, done, q, cache, pos, sel, nsel, 1, H, Dk, Dv, scale, seq, S);
}

/* k_mla_split at a shape's head group size, with its own merge (MERGE) or leaving it to the absorb */
template <bool MERGE>
static void split_launch(int HB, dim3 grid, cudaStream_t s, bf16 *y, float *pacc, float *pml, int *done, const bf16 *q,
                         const bf16 *cache, const int *pos, const int *sel, int nsel, int H, int Dk, int Dv,
                         const int *seq, int S)
{
	if (HB == 4)
		g_split<4, MERGE><<<grid, 256, 0, s>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, H, Dk, Dv, 0.0625f, seq, S);
	else if (HB == 2)
		g_split<2, MERGE><<<grid, 256, 0, s>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, H, Dk, Dv, 0.0625f, seq, S);
	else
		g_split<1, MERGE><<<grid, 256, 0, s>>>(y, pacc, pml, done, q, cache, pos, sel, nsel, H, Dk, Dv, 0.0625f, seq, S);
}

template <bool TB>
__global__ void __launch_bounds__(256, MLA_Q_MIN_BLOCKS) g_qprep(bf16 *qabs, const bf16 *q, const bf16 *wk, const int *pos,
                                               const float *freq, int H, int Dn, int Dr, int L)
{
	k_mla_qprep<bf16, bf16, TB, true, true>(qabs, nullptr, q, wk, nullptr, pos, freq, 1.0f, nullptr, 1.0f, 1, H, Dn, Dr,
	                                        Dr, L, 0, 0, 0);
}

__global__ void __launch_bounds__(256) g_vabsorb(bf16 *out, const bf16 *o, const bf16 *wv, int H, int Dv, int Do)
{
	k_mla_vabsorb<bf16, bf16>(out, o, wv, 1, H, Dv, Do);
}

__global__ void __launch_bounds__(256) g_vabsorb_merged(bf16 *out, const bf16 *wv, int H, int Dv, int Do,
                                                        const float *pacc, const float *pml, int NS)
{
	k_mla_vabsorb<bf16, bf16, true>(out, nullptr, wv, 1, H, Dv, Do, pacc, pml, NS);
}

__global__ void g_fill(bf16 *p, long long n, unsigned seed)
{
	for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
		unsigned h = (unsigned)i * 2654435761u ^ seed;
		h ^= h >> 15, h *= 2246822519u, h ^= h >> 13;
		p[i] = from_f<bf16>(((h & 0xffff) / 65536.0f - 0.5f) * 0.5f);
	}
}

static bf16 *random_bf16(size_t n)
{
	bf16 *p;
	CK(cudaMalloc(&p, n * sizeof(bf16)));
	g_fill<<<1024, 256>>>(p, (long long)n, 0x9e3779b9u);
	CK(cudaGetLastError());
	return p;
}

template <typename T> static T *upload(const std::vector<T> &h)
{
	T *p;
	CK(cudaMalloc(&p, h.size() * sizeof(T)));
	CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
	return p;
}

static size_t l2_bytes;
static int iters = 100;

/* Copies of `bytes` that together exceed 4x the L2, so every launch of a cycle reads from HBM. */
static int copies_for(size_t bytes)
{
	size_t c = (4 * l2_bytes + bytes - 1) / bytes + 1;
	return (int)(c < 2 ? 2 : c > 512 ? 512 : c);
}

/* Median µs per launch of f(i) (launch i of the graph). */
static double time_launches(const std::function<void(int, cudaStream_t)> &f)
{
	return graph_time_us(f, iters);
}


static void row(const char *what, double us, double bytes, double bw)
{
	double gbs = bytes / (us * 1e-6) / 1e9;
	printf("%-58s %9.2f µs %10.2f MB %8.0f GB/s %5.1f%%\n", what, us, bytes / 1e6, gbs, 100.0 * gbs / bw);
}

/*
** One attention shape: H heads of 576 / 512 over a context of ctx rows (pos = ctx - 1), dense or with a
** DSA selection of nsel entries (rows 0..ctx-1 first, then -1, as k_indexer_select lists a short
** context; a random sample of the context when ctx > nsel). The cache is cycled through copies.
*/
static void attention(const char *name, int H, int ctx, int nsel, double bw)
{
	const int Dk = 576, Dv = 512;
	int S = ctx + 1, HB = mla_split_hb(H), NS = 64 / HB, HG = (H + HB - 1) / HB;
	size_t cb = (size_t)S * Dk * sizeof(bf16);
	int copies = copies_for(cb);
	bf16 *cache = random_bf16((size_t)S * Dk * copies), *q = random_bf16((size_t)H * Dk), *y;
	CK(cudaMalloc(&y, (size_t)H * Dv * sizeof(bf16)));
	std::vector<int> pos = {ctx - 1}, seq(copies), sel;
	for (int c = 0; c < copies; c++)
		seq[c] = c;
	for (int j = 0; j < nsel; j++)
		sel.push_back(ctx <= nsel ? (j < ctx ? j : -1) : (int)((long long)j * ctx / nsel));
	int *dpos = upload(pos), *dseq = upload(seq), *dsel = nsel ? upload(sel) : nullptr, *done;
	float *pacc, *pml;
	CK(cudaMalloc(&pacc, (size_t)NS * H * Dv * sizeof(float)));
	CK(cudaMalloc(&pml, (size_t)NS * H * 2 * sizeof(float)));
	CK(cudaMalloc(&done, (size_t)HG * sizeof(int)));
	CK(cudaMemset(done, 0, (size_t)HG * sizeof(int)));
	int n = nsel ? std::min(nsel, ctx) : ctx;
	double bytes = (double)n * Dk * sizeof(bf16);
	char what[128];
	double us = time_launches([&](int i, cudaStream_t s) {
		g_mla<<<dim3(H, 1), 128, 0, s>>>(y, q, cache, dpos, dsel, nsel, H, Dk, Dv, 0.0625f, dseq + i % copies, S);
	});
	snprintf(what, sizeof what, "%s k_mla (%d blocks)", name, H);
	row(what, us, bytes, bw);
	dim3 grid(NS, HG, 1);
	us = time_launches([&](int i, cudaStream_t s) {
		split_launch<true>(HB, grid, s, y, pacc, pml, done, q, cache, dpos, dsel, nsel, H, Dk, Dv, dseq + i % copies, S);
	});
	int nr = mla_split_ranges(n, NS); /* the kernel's own rule */
	snprintf(what, sizeof what, "%s k_mla_split (%d of %d blocks)", name, nr * HG, NS * HG);
	row(what, us, bytes, bw);
	/* the decode step's pair: the attention and the value absorb (W_UV [H, 256, 512], cycled as the cache),
	** with the range states merged by the attention's last block of each head group, or by every block of
	** the absorb (glmc's plans since bench/NOTES.md entry 23); bytes: the rows and W_UV */
	const int Do = 256;
	size_t vb = (size_t)H * Do * Dv * sizeof(bf16);
	int vc = copies_for(vb);
	bf16 *wv = random_bf16((size_t)H * Do * Dv * vc), *out;
	CK(cudaMalloc(&out, (size_t)H * Do * sizeof(bf16)));
	int vx = (Do + 8 * MLA_VR - 1) / (8 * MLA_VR);
	for (int merged = 0; merged < 2; merged++) {
		us = time_launches([&](int i, cudaStream_t s) {
			const int *sq = dseq + i % copies;
			const bf16 *w = wv + (size_t)(i % vc) * H * Do * Dv;
			if (merged) {
				split_launch<false>(HB, grid, s, nullptr, pacc, pml, nullptr, q, cache, dpos, dsel, nsel, H, Dk, Dv, sq, S);
				g_vabsorb_merged<<<dim3(vx, 1, H), 256, 0, s>>>(out, w, H, Dv, Do, pacc, pml, NS);
			} else {
				split_launch<true>(HB, grid, s, y, pacc, pml, done, q, cache, dpos, dsel, nsel, H, Dk, Dv, sq, S);
				g_vabsorb<<<dim3(vx, 1, H), 256, 0, s>>>(out, y, w, H, Dv, Do);
			}
		});
		snprintf(what, sizeof what, "%s split + vabsorb, merged by the %s", name, merged ? "absorb" : "split");
		row(what, us, bytes + (double)vb, bw);
	}
	CK(cudaFree(wv)), CK(cudaFree(out));
	CK(cudaFree(cache)), CK(cudaFree(q)), CK(cudaFree(y)), CK(cudaFree(pacc)), CK(cudaFree(pml)), CK(cudaFree(done));
	CK(cudaFree(dpos)), CK(cudaFree(dseq));
	if (dsel)
		CK(cudaFree(dsel));
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--iters") && i + 1 < argc) {
			iters = atoi(argv[++i]);
		} else {
			fprintf(stderr, "usage: mla [--iters N]\n");
			return 2;
		}
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	l2_bytes = (size_t)prop.l2CacheSize;
	double bw = read_bandwidth();
	printf("# %s, %d SMs, L2 %zu MiB; read bandwidth %.1f GB/s\n", prop.name, prop.multiProcessorCount, l2_bytes >> 20, bw);
	printf("%-58s %12s %13s %13s %6s\n", "kernel", "time", "bytes", "rate", "% bw");

	attention("GLM-4.7-Flash ctx 200", 20, 200, 0, bw);
	attention("GLM-4.7-Flash ctx 2048", 20, 2048, 0, bw);
	attention("GLM-4.7-Flash ctx 8192", 20, 8192, 0, bw);
	attention("GLM-5 tp1 sel 2048 ctx 200", 64, 200, 2048, bw);
	attention("GLM-5 tp1 sel 2048 ctx 4096", 64, 4096, 2048, bw);
	attention("GLM-5 tp8 sel 2048 ctx 200", 8, 200, 2048, bw);
	attention("GLM-5 tp8 sel 2048 ctx 4096", 8, 4096, 2048, bw);

	/* the absorbs at GLM-4.7-Flash's 20 heads and GLM-5's 64 (tp 1): W_UK [H, 192, 512] (or [H, 512, 192]),
	** W_UV [H, 256, 512] */
	for (int H : {20, 64}) {
		const int Dn = 192, Dr = 64, L = 512, Do = 256;
		size_t kb = (size_t)H * Dn * L * sizeof(bf16), vb = (size_t)H * Do * L * sizeof(bf16);
		int kc = copies_for(kb), vc = copies_for(vb);
		bf16 *wk = random_bf16((size_t)H * Dn * L * kc), *wv = random_bf16((size_t)H * Do * L * vc);
		bf16 *q = random_bf16((size_t)H * (Dn + Dr)), *o = random_bf16((size_t)H * L), *qabs, *out;
		CK(cudaMalloc(&qabs, (size_t)H * (L + Dr) * sizeof(bf16)));
		CK(cudaMalloc(&out, (size_t)H * Do * sizeof(bf16)));
		std::vector<float> fr(Dr / 2);
		for (int i = 0; i < Dr / 2; i++)
			fr[i] = 1.0f / powf(10000.0f, 2.0f * i / Dr);
		float *dfr = upload(fr);
		int *dpos = upload(std::vector<int>{199});
		int nb = H * ((L + 63) / 64);
		double us = time_launches([&](int i, cudaStream_t s) {
			g_qprep<false><<<nb, 256, 0, s>>>(qabs, q, wk + (size_t)(i % kc) * H * Dn * L, dpos, dfr, H, Dn, Dr, L);
		});
		char what[128];
		snprintf(what, sizeof what, "k_mla_qprep W_UK [%d,192,512] (%d blocks)", H, nb);
		row(what, us, (double)kb, bw);
		nb = H * ((L + 7) / 8);
		us = time_launches([&](int i, cudaStream_t s) {
			g_qprep<true><<<nb, 256, 0, s>>>(qabs, q, wk + (size_t)(i % kc) * H * Dn * L, dpos, dfr, H, Dn, Dr, L);
		});
		snprintf(what, sizeof what, "k_mla_qprep W_UK [%d,512,192] (GGUF; %d blocks)", H, nb);
		row(what, us, (double)kb, bw);
		int vx = (Do + 8 * MLA_VR - 1) / (8 * MLA_VR); /* emit_cuda.c's grid */
		us = time_launches([&](int i, cudaStream_t s) {
			g_vabsorb<<<dim3(vx, 1, H), 256, 0, s>>>(out, o, wv + (size_t)(i % vc) * H * Do * L, H, L, Do);
		});
		snprintf(what, sizeof what, "k_mla_vabsorb W_UV [%d,256,512] (%d blocks)", H, vx * H);
		row(what, us, (double)vb, bw);
		CK(cudaFree(wk));
		CK(cudaFree(wv));
	}
	return 0;
}
