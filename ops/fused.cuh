/*
** ops/fused.cuh — kernels for fused groups (compiler/fuse.c), appended to kernels.cuh by glmc and built
** from its helpers. Each computes exactly what its unfused nodes compute, intermediate values rounded
** to the activation type as the unfused kernels would store them.
**
** In-place contract (compiler/memplan.c relies on it): a kernel launched for an element-wise node c may
** find c's output in the buffer of c's first operand; each such kernel below says how it stays correct.
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

/* Prologues of k_gemv_fused (fuse.c's GP_*): how an element of the staged input is formed. */
#define GEMV_PRO_NONE 0
#define GEMV_PRO_RMSNORM 1
#define GEMV_PRO_SWIGLU 2
/* Epilogue bits of k_gemv_fused: bit m (m < 4) scales member m's result; GEMV_EPI_RES adds r to member 0's. */
#define GEMV_EPI_RES 16

/* The inverse RMS of row xr[0..K) exactly as k_rmsnorm forms it (each thread sums its elements in order,
** then block_sum), so the normalised values match the unfused kernel's. Every thread gets it. */
template <typename A>
__device__ float gemv_row_inv_rms(const A *xr, int K, float eps)
{
	float ss = 0.0f;
	for (int i = threadIdx.x; i < K; i += blockDim.x) {
		float v = to_f(xr[i]);
		ss += v * v;
	}
	return 1.0f / sqrtf(block_sum(ss) / (float)K + eps);
}

/*
** The decode GEMV of a fused group: up to four linears that read the same input rows x[T, K] in one
** launch, over their concatenated output columns (member m has weight w_m[N_m, K], optional bias b_m and
** its own output y_m[T, N_m]; absent members have N_m = 0). T <= 8 is the intended use; larger T works
** 8 rows at a time. One warp per output column, 8 per block; grid (ceil((N0+N1+N2+N3)/8)), block 256.
**
** The input rows are staged as float in shared memory, K in chunks (as k_linear_gemv), formed by PRO:
**   NONE     x as it is;
**   RMSNORM  rmsnorm(x)·nw (nw may be nullptr when !HAS_NW), rounded to A as k_rmsnorm stores it. Every
**            block computes the rows' inverse RMS itself: from the staged rows when a whole row fits in
**            one chunk, else in a first pass over x. With hs != nullptr block 0 also stores the rows.
**   SWIGLU   silu(x)·u (x is the gate), rounded to A as k_swiglu stores it.
** Each result is rounded to A as the linear would store it (bias added first, as k_linear_gemv), then:
** EPI bit m: y_m = A(s_m · that) (a scale node); GEMV_EPI_RES: y_0 = A(r + that) (the residual add).
** In place: y_0 may equal r (one thread reads r[t, n] and then writes y_0[t, n]); no output may overlap x,
** u or hs.
** The weight rows are read in 16-byte vectors, four in flight per lane, when the member's w is 16-byte
** aligned and K a multiple of the vector width (else one element per lane per step), as k_linear_gemv.
*/
template <typename A, typename W, typename NW, int PRO, bool HAS_NW, int EPI>
__device__ void k_gemv_fused(A *y0, A *y1, A *y2, A *y3, const W *w0, const W *w1, const W *w2, const W *w3,
                             const A *b0, const A *b1, const A *b2, const A *b3, const A *x, const A *u,
                             const NW *nw, A *hs, const A *r, int T, int K, int N0, int N1, int N2, int N3,
                             float eps, float s0, float s1, float s2, float s3)
{
	const int VEC = 16 / (int)sizeof(W);
	__shared__ float4 xs4[2048];         /* 8192 floats: up to 8 rows of one K chunk */
	__shared__ float inv[8];
	float *xs = (float *)xs4;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
	int c = blockIdx.x * (blockDim.x >> 5) + warp; /* column of the concatenated outputs */
	int m = c < N0 ? 0 : c < N0 + N1 ? 1 : c < N0 + N1 + N2 ? 2 : 3;
	int n = c - (m > 0 ? N0 : 0) - (m > 1 ? N1 : 0) - (m > 2 ? N2 : 0);
	int Nm = m == 0 ? N0 : m == 1 ? N1 : m == 2 ? N2 : N3;
	bool active = n < Nm; /* uniform per warp: inactive warps only help stage x */
	const W *w = m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3;
	const A *bias = m == 0 ? b0 : m == 1 ? b1 : m == 2 ? b2 : b3;
	A *y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;
	float sc = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;
	bool scaled = ((EPI >> m) & 1) != 0, res = (EPI & GEMV_EPI_RES) && m == 0;
	bool vec = active && ((unsigned long long)w & 15) == 0 && K % VEC == 0;
	const W *wr = active ? w + (long long)n * K : w0;

	for (int t0 = 0; t0 < T; t0 += 8) {
		int tn = T - t0 < 8 ? T - t0 : 8;
		int kcap = (8192 / tn) & ~255; /* row stride of xs and chunk length */
		bool whole = K <= kcap;        /* a whole row fits: the norm is taken from shared memory */
		if (PRO == GEMV_PRO_RMSNORM && !whole) {
			for (int t = 0; t < tn; t++) {
				float iv = gemv_row_inv_rms(x + (long long)(t0 + t) * K, K, eps);
				if (threadIdx.x == 0)
					inv[t] = iv;
			}
		}
		float acc[8];
#pragma unroll
		for (int t = 0; t < 8; t++)
			acc[t] = 0.0f;

		for (int k0 = 0; k0 < K; k0 += kcap) {
			int kc = K - k0 < kcap ? K - k0 : kcap;
			__syncthreads(); /* every warp is done with the previous chunk (and inv is written) */
			for (int e0 = threadIdx.x; e0 < tn * kc; e0 += 8 * blockDim.x) {
				float v[8];
#pragma unroll
				for (int j = 0; j < 8; j++) {
					int e = e0 + j * blockDim.x, t = e / kc, kk = k0 + (e - t * kc);
					long long at = (long long)(t0 + t) * K + kk;
					v[j] = 0.0f;
					if (e < tn * kc) {
						float xv = to_f(x[at]);
						if (PRO == GEMV_PRO_SWIGLU) {
							v[j] = to_f(from_f<A>(xv / (1.0f + expf(-xv)) * to_f(u[at])));
						} else if (PRO == GEMV_PRO_RMSNORM && !whole) {
							xv *= inv[t];
							if (HAS_NW)
								xv *= to_f(nw[kk]);
							A h = from_f<A>(xv);
							if (hs && blockIdx.x == 0)
								hs[at] = h;
							v[j] = to_f(h);
						} else {
							v[j] = xv;
						}
					}
				}
#pragma unroll
				for (int j = 0; j < 8; j++) {
					int e = e0 + j * blockDim.x, t = e / kc;
					if (e < tn * kc)
						xs[t * kcap + (e - t * kc)] = v[j];
				}
			}
			__syncthreads();
			if (PRO == GEMV_PRO_RMSNORM && whole) {
				/* the rows are staged raw: normalise them in place, as k_rmsnorm would */
				for (int t = 0; t < tn; t++) {
					float *xr = xs + t * kcap, ss = 0.0f;
					for (int i = threadIdx.x; i < K; i += blockDim.x)
						ss += xr[i] * xr[i];
					float iv = 1.0f / sqrtf(block_sum(ss) / (float)K + eps);
					for (int i = threadIdx.x; i < K; i += blockDim.x) {
						float v = xr[i] * iv;
						if (HAS_NW)
							v *= to_f(nw[i]);
						A h = from_f<A>(v);
						if (hs && blockIdx.x == 0)
							hs[(long long)(t0 + t) * K + i] = h;
						xr[i] = to_f(h);
					}
				}
				__syncthreads();
			}
			if (!active)
				continue;
			if (vec) {
				/* as k_linear_gemv: U vectors per lane in flight, the 8-wide swizzle sw keeps the
				** quarter-warps' float4 reads of xs on distinct banks */
				int sw = VEC == 8 ? (lane >> 2) & 1 : 0;
				const int U = 4;
				for (int kb = lane * VEC; kb < kc; kb += 32 * VEC * U) {
					uint4 raw[U];
#pragma unroll
					for (int q = 0; q < U; q++) {
						int k = kb + q * 32 * VEC;
						raw[q] = __ldg((const uint4 *)(wr + k0 + (k < kc ? k : kb)));
					}
#pragma unroll
					for (int q = 0; q < U; q++) {
						int k = kb + q * 32 * VEC;
						if (k >= kc)
							break;
						union {
							uint4 bits;
							W e[VEC];
						} wv;
						wv.bits = raw[q];
						float wraw[VEC], wf[VEC];
#pragma unroll
						for (int j = 0; j < VEC; j++)
							wraw[j] = to_f(wv.e[j]);
#pragma unroll
						for (int j = 0; j < VEC; j++)
							wf[j] = sw ? wraw[(j + 4) % VEC] : wraw[j];
#pragma unroll
						for (int t = 0; t < 8; t++) {
							if (t < tn) {
								const float4 *xp = (const float4 *)(xs + t * kcap + k);
								float s = acc[t];
#pragma unroll
								for (int p = 0; p < VEC / 4; p++) {
									float4 xv = xp[p ^ sw];
									s += xv.x * wf[4 * p] + xv.y * wf[4 * p + 1] + xv.z * wf[4 * p + 2] +
									     xv.w * wf[4 * p + 3];
								}
								acc[t] = s;
							}
						}
					}
				}
			} else {
				for (int k = lane; k < kc; k += 32) {
					float wf = to_f(wr[k0 + k]);
#pragma unroll
					for (int t = 0; t < 8; t++)
						if (t < tn)
							acc[t] += xs[t * kcap + k] * wf;
				}
			}
		}

		if (active) {
#pragma unroll
			for (int t = 0; t < 8; t++) {
				if (t < tn) {
					float s = warp_sum(acc[t]);
					if (lane == 0) {
						if (bias)
							s += to_f(bias[n]);
						float lin = to_f(from_f<A>(s));
						long long at = (long long)(t0 + t) * Nm + n;
						if (scaled)
							lin = sc * lin;
						else if (res)
							lin = to_f(r[at]) + lin;
						y[at] = from_f<A>(lin);
					}
				}
			}
		}
	}
}

/*
** Rotary of q[T, H, D] and k[T, G, D] (after a per-head RMSNorm with weights qw, kw over D when NORM, as
** Qwen3; the weights may be nullptr when !HAS_NW), written to qo and ko, with k's rotated rows and v's
** rows [T, G, Dv] copied into the caches at row pos[t] (as k_kv_write). Blocks (h, t): h < H rotates q
** head h, h >= H rotates k head h - H and copies that head's v. Each value is rounded to A where the
** unfused nodes store it: the normalised head, then the rotated one. Rotary as k_rope (qfreq/kfreq and
** qcs/kcs from the host; INTERLEAVED pairs (2i, 2i+1), else (i, i + R/2); dims >= R copied).
** D <= 1024. grid (H + G, T), block 128.
*/
template <typename A, typename NW, bool NORM, bool HAS_NW, bool INTERLEAVED>
__device__ void k_rope_qk_kv(A *qo, A *ko, A *kcache, A *vcache, const A *q, const A *k, const A *v,
                             const NW *qw, const NW *kw, const int *pos, const float *qfreq, const float *kfreq,
                             float qcs, float kcs, int H, int G, int D, int Dv, int R, float eps)
{
	__shared__ float hv[1024];
	int h = blockIdx.x, t = blockIdx.y, half = R / 2;
	bool isk = h >= H;
	int hh = isk ? h - H : h, heads = isk ? G : H;
	long long row = ((long long)t * heads + hh) * D;
	const A *src = (isk ? k : q) + row;
	A *dst = (isk ? ko : qo) + row;
	const NW *nwt = isk ? kw : qw;
	const float *freq = isk ? kfreq : qfreq;
	float cs = isk ? kcs : qcs;
	long long p = pos[t];
	A *crow = kcache + (p * G + hh) * D; /* used by k heads only */
	float ss = 0.0f;
	for (int d = threadIdx.x; d < D; d += blockDim.x) {
		float xv = to_f(src[d]);
		hv[d] = xv;
		ss += xv * xv;
	}
	if (NORM) {
		float iv = 1.0f / sqrtf(block_sum(ss) / (float)D + eps);
		for (int d = threadIdx.x; d < D; d += blockDim.x) {
			float xv = hv[d] * iv;
			if (HAS_NW)
				xv *= to_f(nwt[d]);
			hv[d] = to_f(from_f<A>(xv));
		}
	}
	__syncthreads();
	float pf = (float)p;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		float a = __fmul_rn(pf, freq[i]);
		float c = __fmul_rn(cosf(a), cs), s = __fmul_rn(sinf(a), cs);
		int i0 = INTERLEAVED ? 2 * i : i, i1 = INTERLEAVED ? 2 * i + 1 : i + half;
		float x0 = hv[i0], x1 = hv[i1];
		A o0 = from_f<A>(__fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s)));
		A o1 = from_f<A>(__fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s)));
		dst[i0] = o0;
		dst[i1] = o1;
		if (isk) {
			crow[i0] = o0;
			crow[i1] = o1;
		}
	}
	for (int d = 2 * half + threadIdx.x; d < D; d += blockDim.x) {
		A o = from_f<A>(hv[d]);
		dst[d] = o;
		if (isk)
			crow[d] = o;
	}
	if (isk) {
		const A *vr = v + ((long long)t * G + hh) * Dv;
		A *vc = vcache + (p * G + hh) * Dv;
		for (int d = threadIdx.x; d < Dv; d += blockDim.x)
			vc[d] = vr[d];
	}
}
