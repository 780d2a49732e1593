/*
** bench/layout.cu — does the order of a K-quant matrix's blocks in memory cap a one-token GEMV's
** bandwidth? (issue 8, bench/NOTES.md 47). The quantized GEMVs read 45-65% of the bandwidth where a plain
** read of the same bytes reaches 80-90%, while issuing few instructions and waiting on nothing in
** particular (entry 46). Here only the loads are kept (each word folded into an xor, nothing dequantized),
** with the lane geometry of qm_load (a warp serves 16 rows; lane 4g + c reads rows g and g + 8: the
** block's 16-byte head and its quarter of the quant bytes), WPR warps a tile splitting K, two blocks in
** flight a lane, over the same bytes laid out three ways:
**   rows   GGUF's order: row r's blocks contiguous, a warp touches 16 rows K/256·BB bytes apart;
**   tile16 the 16 rows of a tile block by block: tile t's block b at (t·nb + b)·16·BB, its 16 rows'
**          slots contiguous inside (2304 bytes for Q4_K), so a warp's range is one contiguous run;
**   plain  a grid-stride read of the bytes (the floor).
** Each launch reads its own cold copy.
**
**   build/bench/layout
*/
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <vector>

static void ck(cudaError_t e, const char *what, int line)
{
	if (e != cudaSuccess) {
		fprintf(stderr, "layout: line %d: %s: %s\n", line, what, cudaGetErrorString(e));
		exit(1);
	}
}
#define CK(x) ck((x), #x, __LINE__)
#include "graph_time.cuh"

__device__ __forceinline__ uint4 ld16(const unsigned char *p)
{
	return __ldg((const uint4 *)p);
}

/* What qm_load reads of one block of rows p0, p1: Q4_K (BB 144) its head and quant bytes 16 + 32c..;
** Q6_K (BB 224, glmc's device slot) ql 32c.., qh 128 + 32(c / 2).., the scales and d. */
template <int BB> __device__ __forceinline__ unsigned blk_xor(const unsigned char *p0, const unsigned char *p1, int c)
{
	unsigned a = 0;
	const unsigned char *p[2] = {p0, p1};
#pragma unroll
	for (int i = 0; i < 2; i++) {
		uint4 u, v, w;
		if (BB == 144) {
			u = ld16(p[i]), v = ld16(p[i] + 16 + 32 * c), w = ld16(p[i] + 32 + 32 * c);
			a ^= u.x ^ u.y ^ u.z ^ u.w ^ v.x ^ v.y ^ v.z ^ v.w ^ w.x ^ w.y ^ w.z ^ w.w;
		} else {
			u = ld16(p[i] + 32 * c), v = ld16(p[i] + 32 * c + 16), w = ld16(p[i] + 128 + 32 * (c >> 1));
			uint4 z = ld16(p[i] + 144 + 32 * (c >> 1));
			uint2 s = __ldg((const uint2 *)(p[i] + 192 + 8 * (c >> 1)));
			unsigned d = __ldg((const unsigned *)(p[i] + 208));
			a ^= u.x ^ u.y ^ u.z ^ u.w ^ v.x ^ v.y ^ v.z ^ v.w ^ w.x ^ w.y ^ w.z ^ w.w ^ z.x ^ z.y ^ z.z ^ z.w ^
			     s.x ^ s.y ^ d;
		}
	}
	return a;
}

/* A warp's share of tile t: blocks [b0, b1) of its 16 rows, the next block's loads issued before this
** one's words are folded (as qm_run's ring of 2). TILE selects the layout. */
template <int BB, bool TILE>
__global__ void __launch_bounds__(256) k_pat(const unsigned char *w, int tiles, int nb, int wpr, unsigned *out)
{
	int gw = blockIdx.x * 8 + (threadIdx.x >> 5), lane = threadIdx.x & 31, g = lane >> 2, c = lane & 3;
	int t = gw / wpr, part = gw % wpr;
	unsigned acc = 0;
	if (t < tiles) {
		int b0 = (int)((long long)nb * part / wpr), b1 = (int)((long long)nb * (part + 1) / wpr);
		const unsigned char *r0, *r1;
		long long bs;
		if (TILE) {
			r0 = w + ((long long)t * nb * 16 + g) * BB, r1 = r0 + 8 * BB, bs = 16 * BB;
		} else {
			r0 = w + (long long)(16 * t + g) * nb * BB, r1 = r0 + 8ll * nb * BB, bs = BB;
		}
		for (int b = b0; b < b1; b += 2) {
			unsigned x = blk_xor<BB>(r0 + b * bs, r1 + b * bs, c);
			unsigned y = b + 1 < b1 ? blk_xor<BB>(r0 + (b + 1) * bs, r1 + (b + 1) * bs, c) : 0u;
			acc ^= x ^ y;
		}
	}
	acc = __reduce_xor_sync(0xffffffffu, acc);
	if (lane == 0 && acc == 0x12345678u)
		out[blockIdx.x] = acc;
}

int main(int argc, char **argv)
{
	(void)argv;
	if (argc > 1) {
		fprintf(stderr, "usage: layout\n");
		return 2;
	}
	int sms;
	CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	double bw = read_bandwidth();
	printf("read_gb_s: %.1f\n", bw);
	struct Shape {
		const char *name;
		int n, k, bb;
	} shapes[] = {{"Q4_K 24576x6144 (GLM-5 dense gate/up)", 24576, 6144, 144},
	              {"Q4_K 6144x16384 (GLM-5 o)", 6144, 16384, 144},
	              {"Q4_K 16384x2048 (GLM-5 q_b)", 16384, 2048, 144},
	              {"Q4_K 2624x6144 (GLM-5 q_a + kv_a)", 2624, 6144, 144},
	              {"Q4_K 28672x4096 (Llama gate/up)", 28672, 4096, 144},
	              {"Q6_K 6144x12288 (GLM-5 dense down)", 6144, 12288, 224}};
	unsigned *out;
	CK(cudaMalloc(&out, 1 << 20));
	const int copies = 6;
	for (const Shape &s : shapes) {
		int nb = s.k / 256, tiles = s.n / 16;
		size_t bytes = (size_t)s.n * nb * s.bb;
		std::vector<unsigned char *> buf(copies);
		for (int i = 0; i < copies; i++) {
			CK(cudaMalloc(&buf[i], bytes));
			CK(cudaMemset(buf[i], 1 + i, bytes));
		}
		printf("%s: %.1f MB, %.2f us at the bandwidth\n", s.name, bytes / 1e6, bytes / bw / 1e3);
		double best = 1e30;
		for (int m : {4, 8, 16}) {
			auto f = [&](int it, cudaStream_t st) {
				k_read<<<sms * m, 256, 0, st>>>((const uint4 *)buf[it % copies], (long long)(bytes / 16), out);
			};
			best = std::min(best, graph_time_us(f, 48));
		}
		printf("  plain          %8.2f us (%5.1f%%)\n", best, 100 * bytes / (best * 1e-6) / 1e9 / bw);
		for (int tile = 0; tile < 2; tile++)
			for (int wpr : {1, 2, 4, 8}) {
				if (wpr > nb)
					continue;
				int grid = (tiles * wpr + 7) / 8;
				auto f = [&](int it, cudaStream_t st) {
					const unsigned char *p = buf[it % copies];
					if (s.bb == 144)
						tile ? k_pat<144, true><<<grid, 256, 0, st>>>(p, tiles, nb, wpr, out)
						     : k_pat<144, false><<<grid, 256, 0, st>>>(p, tiles, nb, wpr, out);
					else
						tile ? k_pat<224, true><<<grid, 256, 0, st>>>(p, tiles, nb, wpr, out)
						     : k_pat<224, false><<<grid, 256, 0, st>>>(p, tiles, nb, wpr, out);
				};
				double t = graph_time_us(f, 48);
				printf("  %-6s WPR %d   %8.2f us (%5.1f%%)\n", tile ? "tile16" : "rows", wpr, t,
				       100 * bytes / (t * 1e-6) / 1e9 / bw);
			}
		for (unsigned char *p : buf)
			CK(cudaFree(p));
	}
	return 0;
}
