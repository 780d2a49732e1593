// bench/bandwidth.cu — the GPU's achievable memory bandwidth, measured in the same run as the decode
// benchmark (issue 8): a large read-only kernel (16-byte loads, grid-stride, several launch shapes and
// load flavours; the best is the roofline the decode figures are compared with), a device-to-device copy
// kernel and cudaMemcpy, and a store-only kernel. Every kernel's result is checked: the read kernel sums
// the buffer, which holds 0, 1, 2, ... as 32-bit words, so the sum must be n(n-1)/2 mod 2^32 — each word
// read exactly once; the copy is compared word for word on a sample.
//
// usage: bandwidth [--gib N] [--iters N]   (default 8 GiB, 20 timed iterations after 3 warm-ups)
// prints "key: value" lines; read_gb_s is the figure bench/decode.sh divides by.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(call)                                                                                         \
	do {                                                                                                 \
		cudaError_t e_ = (call);                                                                         \
		if (e_ != cudaSuccess) {                                                                         \
			fprintf(stderr, "bandwidth: %s failed at %s:%d: %s\n", #call, __FILE__, __LINE__,            \
			        cudaGetErrorString(e_));                                                             \
			exit(1);                                                                                     \
		}                                                                                                \
	} while (0)

// Word i holds i (the read kernel's checksum depends on every word being read once).
__global__ void fill_iota(uint4 *p, size_t n16)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x) {
		uint32_t b = (uint32_t)(4 * i);
		p[i] = make_uint4(b, b + 1, b + 2, b + 3);
	}
}

enum { LOAD_PLAIN, LOAD_NC, LOAD_STREAM };

template <int MODE> __device__ __forceinline__ uint4 load16(const uint4 *p)
{
	if (MODE == LOAD_NC)
		return __ldg(p);
	if (MODE == LOAD_STREAM)
		return __ldcs(p);
	return *p;
}

// Sum of every 32-bit word (mod 2^32), four independent 16-byte loads in flight per thread per iteration;
// one atomic per block.
template <int MODE> __global__ void read_sum(const uint4 *__restrict__ p, size_t n16, unsigned *out)
{
	size_t stride = (size_t)gridDim.x * blockDim.x, i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
	uint32_t acc = 0;
	for (; i + 3 * stride < n16; i += 4 * stride) {
		uint4 a = load16<MODE>(p + i), b = load16<MODE>(p + i + stride), c = load16<MODE>(p + i + 2 * stride),
		      d = load16<MODE>(p + i + 3 * stride);
		acc += a.x + a.y + a.z + a.w + b.x + b.y + b.z + b.w + c.x + c.y + c.z + c.w + d.x + d.y + d.z + d.w;
	}
	for (; i < n16; i += stride) {
		uint4 a = load16<MODE>(p + i);
		acc += a.x + a.y + a.z + a.w;
	}
	for (int o = 16; o > 0; o /= 2)
		acc += __shfl_xor_sync(0xffffffffu, acc, o);
	__shared__ uint32_t part[32];
	if ((threadIdx.x & 31) == 0)
		part[threadIdx.x / 32] = acc;
	__syncthreads();
	if (threadIdx.x == 0) {
		uint32_t s = 0;
		for (unsigned w = 0; w < blockDim.x / 32; w++)
			s += part[w];
		atomicAdd(out, s);
	}
}

__global__ void copy16(const uint4 *__restrict__ src, uint4 *__restrict__ dst, size_t n16)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x)
		dst[i] = src[i];
}

__global__ void store16(uint4 *p, size_t n16, uint32_t v)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n16; i += (size_t)gridDim.x * blockDim.x)
		p[i] = make_uint4(v, v, v, v);
}

// Median milliseconds of `iters` timed runs of f after 3 warm-ups, each between two events.
template <class F> static double time_ms(int iters, F f)
{
	cudaEvent_t a, b;
	CK(cudaEventCreate(&a));
	CK(cudaEventCreate(&b));
	std::vector<double> t;
	for (int k = 0; k < iters + 3; k++) {
		CK(cudaEventRecord(a));
		f();
		CK(cudaGetLastError());
		CK(cudaEventRecord(b));
		CK(cudaEventSynchronize(b));
		float ms = 0;
		CK(cudaEventElapsedTime(&ms, a, b));
		if (k >= 3)
			t.push_back(ms);
	}
	CK(cudaEventDestroy(a));
	CK(cudaEventDestroy(b));
	std::sort(t.begin(), t.end());
	return t[t.size() / 2];
}

int main(int argc, char **argv)
{
	double gib = 8;
	int iters = 20;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--gib") && i + 1 < argc)
			gib = atof(argv[++i]);
		else if (!strcmp(argv[i], "--iters") && i + 1 < argc)
			iters = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bandwidth [--gib N] [--iters N]\n");
			return 2;
		}
	}
	if (!(gib > 0.01 && gib < 1024) || iters < 1) {
		fprintf(stderr, "bandwidth: --gib must be in (0.01, 1024) and --iters >= 1\n");
		return 2;
	}
	cudaDeviceProp prop;
	CK(cudaGetDeviceProperties(&prop, 0));
	size_t bytes = ((size_t)(gib * (1 << 30)) / 64) * 64, n16 = bytes / 16, nw = bytes / 4;
	uint4 *buf;
	unsigned *sum;
	CK(cudaMalloc(&buf, bytes));
	CK(cudaMalloc(&sum, sizeof *sum));
	int sms = prop.multiProcessorCount;
	fill_iota<<<sms * 8, 512>>>(buf, n16);
	CK(cudaGetLastError());
	CK(cudaDeviceSynchronize());
	printf("device: %s (%d SMs, L2 %d MiB, %.1f GiB)\n", prop.name, sms, prop.l2CacheSize >> 20,
	       (double)prop.totalGlobalMem / (1 << 30));
	printf("buffer_bytes: %zu\n", bytes);
	uint32_t want = (uint32_t)(((unsigned __int128)nw * (nw - 1) / 2) & 0xffffffffu);

	// Read: every flavour and launch shape; each result checked.
	double best = 0;
	char best_cfg[96] = "";
	const char *mode_name[] = {"plain", "ldg", "ldcs"};
	for (int mode = 0; mode < 3; mode++)
		for (int per_sm : {2, 4, 8, 16})
			for (int threads : {256, 512, 1024}) {
				if (per_sm * threads > 2048 * 2)
					continue;
				int blocks = sms * per_sm;
				auto run = [&] {
					CK(cudaMemsetAsync(sum, 0, sizeof *sum));
					if (mode == LOAD_PLAIN)
						read_sum<LOAD_PLAIN><<<blocks, threads>>>(buf, n16, sum);
					else if (mode == LOAD_NC)
						read_sum<LOAD_NC><<<blocks, threads>>>(buf, n16, sum);
					else
						read_sum<LOAD_STREAM><<<blocks, threads>>>(buf, n16, sum);
				};
				double ms = time_ms(iters, run);
				unsigned got = 0;
				CK(cudaMemcpy(&got, sum, sizeof got, cudaMemcpyDeviceToHost));
				if (got != want) {
					fprintf(stderr, "bandwidth: read kernel (%s, %d x %d) summed %u, expected %u\n", mode_name[mode],
					        blocks, threads, got, want);
					return 1;
				}
				double gbs = (double)bytes / (ms * 1e6);
				printf("read_config: %-5s blocks %5d threads %4d  %.3f ms  %.1f GB/s\n", mode_name[mode], blocks,
				       threads, ms, gbs);
				if (gbs > best) {
					best = gbs;
					snprintf(best_cfg, sizeof best_cfg, "%s, %d blocks x %d threads", mode_name[mode], blocks, threads);
				}
			}
	printf("read_gb_s: %.1f\n", best);
	printf("read_best_config: %s\n", best_cfg);

	// Copy half the buffer onto the other half: bytes read + bytes written.
	size_t half16 = n16 / 2;
	double ms = time_ms(iters, [&] { copy16<<<sms * 8, 512>>>(buf, buf + half16, half16); });
	std::vector<uint4> a(4096), b(4096);
	for (size_t at : {(size_t)0, half16 / 2, half16 - 4096}) {
		CK(cudaMemcpy(a.data(), buf + at, 4096 * 16, cudaMemcpyDeviceToHost));
		CK(cudaMemcpy(b.data(), buf + half16 + at, 4096 * 16, cudaMemcpyDeviceToHost));
		if (memcmp(a.data(), b.data(), 4096 * 16)) {
			fprintf(stderr, "bandwidth: the copy kernel's output differs from its input at word %zu\n", 4 * at);
			return 1;
		}
	}
	printf("copy_kernel_gb_s: %.1f (read + write, %zu bytes each way)\n", 2.0 * half16 * 16 / (ms * 1e6),
	       half16 * 16);
	ms = time_ms(iters, [&] { CK(cudaMemcpyAsync(buf + half16, buf, half16 * 16, cudaMemcpyDeviceToDevice)); });
	printf("memcpy_d2d_gb_s: %.1f (read + write)\n", 2.0 * half16 * 16 / (ms * 1e6));
	ms = time_ms(iters, [&] { store16<<<sms * 8, 512>>>(buf, n16, 0x5a5a5a5au); });
	CK(cudaMemcpy(a.data(), buf + n16 - 4096, 4096 * 16, cudaMemcpyDeviceToHost));
	for (const uint4 &v : a)
		if (v.x != 0x5a5a5a5au || v.w != 0x5a5a5a5au) {
			fprintf(stderr, "bandwidth: the store kernel left a word unwritten\n");
			return 1;
		}
	printf("write_gb_s: %.1f\n", (double)bytes / (ms * 1e6));
	CK(cudaFree(buf));
	CK(cudaFree(sum));
	return 0;
}
