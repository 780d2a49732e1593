/*
** ops/fused.cuh — kernels for fused groups (compiler/fuse.c), appended to kernels.cuh by glmc and built
** from its helpers. Each computes exactly what its unfused nodes compute, intermediate values rounded
** to the activation type as the unfused kernels would store them.
*/

/* Pattern A: sum = a + b, then y = rmsnorm(sum) (optional weight), one row per block. sum may equal a
** (in place): each element is read before it is written, by the same thread. grid (rows), block 256. */
template <typename A, typename W, bool HAS_W>
__device__ void k_add_rmsnorm(A *sum, A *y, const A *a, const A *b, const W *w, int N, float eps)
{
	long long row = (long long)blockIdx.x * N;
	float ss = 0.0f;
	for (int i = threadIdx.x; i < N; i += blockDim.x) {
		float v = to_f(from_f<A>(to_f(a[row + i]) + to_f(b[row + i])));
		sum[row + i] = from_f<A>(v);
		ss += v * v;
	}
	float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
	for (int i = threadIdx.x; i < N; i += blockDim.x) {
		float v = to_f(sum[row + i]) * inv;
		if (HAS_W)
			v *= to_f(w[i]);
		y[row + i] = from_f<A>(v);
	}
}

/* Pattern B: y[T,N] = swiglu(g, u)[T,K] · w[N,K]ᵀ for T <= 8, the product formed per element as it is
** read (rounded to A, as the SwiGLU kernel would store it) and never written. One warp per output
** column n, lanes striding over K. grid (ceil(N/8)), block 256. */
template <typename A, typename W>
__device__ void k_linear_gemv_swiglu(A *y, const A *g, const A *u, const W *w, int T, int K, int N)
{
	int lane = threadIdx.x & 31, n = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	if (n >= N)
		return;
	const W *wr = w + (long long)n * K;
	for (int t0 = 0; t0 < T; t0 += 8) {
		int tn = T - t0 < 8 ? T - t0 : 8;
		float acc[8];
#pragma unroll
		for (int t = 0; t < 8; t++)
			acc[t] = 0.0f;
		for (int k = lane; k < K; k += 32) {
			float wf = to_f(wr[k]);
#pragma unroll
			for (int t = 0; t < 8; t++)
				if (t < tn) {
					long long e = (long long)(t0 + t) * K + k;
					float gv = to_f(g[e]);
					float x = to_f(from_f<A>(gv / (1.0f + expf(-gv)) * to_f(u[e])));
					acc[t] += x * wf;
				}
		}
#pragma unroll
		for (int t = 0; t < 8; t++)
			if (t < tn) {
				float s = warp_sum(acc[t]);
				if (lane == 0)
					y[(long long)(t0 + t) * N + n] = from_f<A>(s);
			}
	}
}
