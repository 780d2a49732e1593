/*
** ops/qfused.cuh — the fused decode kernels of ops/fused.cuh for groups whose weights stay GGUF blocks on
** the GPU, appended after quant.cuh by glmc and built from its helpers: the blocks are read exactly as
** k_qgemv reads them (q_chunk: 16-byte loads, R rows per warp against each staged x value, an in-block
** split of K over WPR warps), so a fused launch reads every weight byte once, as the unfused ones do.
**
** A weight is named by its ggml type id: 8 Q8_0, 12 Q4_K, 13 Q5_K, 14 Q6_K or any other block type of
** quant.cuh's general path (blocks, q_stride bytes a row), or 0 f32, 1 f16, 30 bf16 (float rows: a member of a group that is not kept in blocks, such as
** GLM-5's f32 router beside the shared expert's Q4_K gate and up). The members of one group may differ;
** each block serves rows of one member only, so the type a block dispatches on never diverges.
**
** Numerics are the unfused chain's: every intermediate value is rounded to the activation type A where
** the unfused kernels store it (the normalised or SwiGLU input, each linear's result, each add); only
** the order of the float sums inside a dot product may differ from the unfused launches'.
*/

/* ---- weight types: float rows or blocks ---- */

template <int QT> struct QFloat { enum { YES = 0 }; typedef unsigned char T; };
template <> struct QFloat<0> { enum { YES = 1 }; typedef float T; };
template <> struct QFloat<1> { enum { YES = 1 }; typedef f16 T; };
template <> struct QFloat<30> { enum { YES = 1 }; typedef bf16 T; };

/* Device bytes of one row of K values of type QT. */
template <int QT> __device__ __forceinline__ long long qf_stride(long long K)
{
	if constexpr (QFloat<QT>::YES)
		return K * (long long)sizeof(typename QFloat<QT>::T);
	else
		return q_stride<QT>(K);
}

/*
** q_chunk's contract for float rows: acc[r][t] += rows[r][k0, k0 + kc) · x[t][0, kc) for t < tn, x staged
** at xs[t·kcap + q_xsw(i)]; this warp takes the 1024-value units u0, u0 + ustep, ... of the chunk. With vec
** (every row 16-byte aligned, K a multiple of the vector) each lane reads 16 bytes of each row per step,
** else one value.
*/
template <int QT, int R, int TM>
__device__ __forceinline__ void qf_fchunk(float (&acc)[R][TM], const unsigned char *const (&rows)[R], long long k0, int kc,
                                          const float *xs, int kcap, int tn, int u0, int ustep, bool vec)
{
	typedef typename QFloat<QT>::T W;
	const int VEC = 16 / (int)sizeof(W);
	int lane = threadIdx.x & 31, nu = (kc + 1023) >> 10;
	for (int u = u0; u < nu; u += ustep) {
		int ue = ((u + 1) << 10) < kc ? (u + 1) << 10 : kc;
		if (vec) {
			for (int k = (u << 10) + lane * VEC; k < ue; k += 32 * VEC) {
				float wf[R][VEC];
#pragma unroll
				for (int r = 0; r < R; r++) {
					union {
						uint4 bits;
						W e[VEC];
					} wv;
					wv.bits = __ldg((const uint4 *)((const W *)rows[r] + k0 + k));
#pragma unroll
					for (int j = 0; j < VEC; j++)
						wf[r][j] = to_f(wv.e[j]);
				}
#pragma unroll
				for (int t = 0; t < TM; t++) {
					if (t < tn) {
#pragma unroll
						for (int p = 0; p < VEC / 4; p++) {
							float4 xv = *(const float4 *)(xs + t * kcap + q_xsw(k + 4 * p));
#pragma unroll
							for (int r = 0; r < R; r++)
								acc[r][t] += xv.x * wf[r][4 * p] + xv.y * wf[r][4 * p + 1] + xv.z * wf[r][4 * p + 2] +
								             xv.w * wf[r][4 * p + 3];
						}
					}
				}
			}
		} else {
			for (int k = (u << 10) + lane; k < ue; k += 32) {
				float wf[R];
#pragma unroll
				for (int r = 0; r < R; r++)
					wf[r] = to_f(((const W *)rows[r])[k0 + k]);
#pragma unroll
				for (int t = 0; t < TM; t++)
					if (t < tn) {
						float xv = xs[t * kcap + q_xsw(k)];
#pragma unroll
						for (int r = 0; r < R; r++)
							acc[r][t] += xv * wf[r];
					}
			}
		}
	}
}

/* The dot products of R rows of type QT with the staged chunk: q_chunk for blocks, qf_fchunk for floats. */
template <int QT, int R, int TM>
__device__ __forceinline__ void qf_chunk(float (&acc)[R][TM], const unsigned char *const (&rows)[R], long long k0, int kc,
                                         const float *xs, const float *xsum, int kcap, int tn, int u0, int ustep, bool vec)
{
	if constexpr (QFloat<QT>::YES)
		qf_fchunk<QT, R, TM>(acc, rows, k0, kc, xs, kcap, tn, u0, ustep, vec);
	else
		q_chunk<QT, R, TM>(acc, rows, k0, kc, xs, xsum, kcap, tn, u0, ustep);
}

/*
** Stage rows t0..t0+tn of the GEMV input, values [k0, k0 + kc), as float into xs[t·kcap + q_xsw(i)], each formed
** by pro (fused.cuh's GEMV_PRO_*), then the 16-value sums into xsum as q_stage does:
**   NONE     x as it is;
**   SWIGLU   silu(x)·u rounded to A, as k_swiglu stores it;
**   RMSNORM  x·inv·nw rounded to A, as k_rmsnorm stores it (nw nullptr: no weight). When a whole
**            row is in the chunk (whole) the rows are staged raw and the inverse RMS taken from them in
**            k_rmsnorm's order (each thread sums its elements i ≡ thread mod blockDim, then block_sum);
**            otherwise inv[t] holds it (gemv_row_inv_rms, before the first chunk). Block 0 also stores
**            the normalised rows into hs when hs is not nullptr.
**   RMSLATE  x·nw (tn = 1 only): the norm's scale is applied to the results; returns the chunk's sum of
**            squares of x (every thread), which the caller accumulates over the chunks (and, when hs is
**            not nullptr, stores the normalised row from block 0 once it has them all).
** A decode step (tn = 1) stages 16 values a thread with 16-byte loads (q_ld16v), without index division.
** Every thread of the block must call it (it synchronises). Returns 0 but for RMSLATE.
*/
template <typename A, typename NW, bool VNORM = true>
__device__ __forceinline__ float qf_stage(float *xs, float *xsum, int pro, const A *x, const A *u, const NW *nw, A *hs,
                                         const float *inv, float eps, long long t0, int tn, long long K, long long k0,
                                         int kc, int kcap, bool whole)
{
	__syncthreads(); /* every warp is done with the previous chunk */
	float ss = 0.0f; /* RMSLATE: this thread's sum of squares */
	for (int i = threadIdx.x; tn == 1 && i < (kc >> 4); i += blockDim.x) { /* a decode step: 16 at a time */
		long long at = t0 * K + k0 + 16 * i;
		float v[16];
		q_ld16v(v, x + at);
		if (pro == GEMV_PRO_RMSLATE) {
			float w[16];
			if (nw)
				q_ld16v(w, nw + k0 + 16 * i);
#pragma unroll
			for (int j = 0; j < 16; j++) {
				ss += v[j] * v[j];
				if (nw)
					v[j] *= w[j];
			}
		} else if (pro == GEMV_PRO_SWIGLU) {
			float w[16];
			q_ld16v(w, u + at);
#pragma unroll
			for (int j = 0; j < 16; j++)
				v[j] = to_f(from_f<A>(v[j] / (1.0f + expf(-v[j])) * w[j]));
		} else if (pro == GEMV_PRO_RMSNORM && !whole) {
			float w[16];
			if (nw)
				q_ld16v(w, nw + k0 + 16 * i);
#pragma unroll
			for (int j = 0; j < 16; j++) {
				float h = v[j] * inv[0];
				if (nw)
					h *= w[j];
				A a = from_f<A>(h);
				if (hs && blockIdx.x == 0)
					hs[at + j] = a;
				v[j] = to_f(a);
			}
		}
		(void)q_put16(xs, 16 * i, v); /* the sums come after the whole-row norm below */
	}
	for (int e0 = threadIdx.x; tn > 1 && e0 < tn * kc; e0 += 8 * blockDim.x) {
		float v[8];
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = e0 + j * blockDim.x, t = e / kc;
			long long kk = k0 + (e - t * kc), at = (t0 + t) * K + kk;
			if (e >= tn * kc) {
				v[j] = 0.0f;
			} else if (pro == GEMV_PRO_SWIGLU) {
				float g = to_f(x[at]);
				v[j] = to_f(from_f<A>(g / (1.0f + expf(-g)) * to_f(u[at])));
			} else if (pro == GEMV_PRO_RMSNORM && !whole) {
				float h = to_f(x[at]) * inv[t];
				if (nw)
					h *= to_f(nw[kk]);
				A a = from_f<A>(h);
				if (hs && blockIdx.x == 0)
					hs[at] = a;
				v[j] = to_f(a);
			} else {
				v[j] = to_f(x[at]);
			}
		}
#pragma unroll
		for (int j = 0; j < 8; j++) {
			int e = e0 + j * blockDim.x, t = e / kc;
			if (e < tn * kc)
				xs[t * kcap + q_xsw(e - t * kc)] = v[j];
		}
	}
	__syncthreads();
	if (pro == GEMV_PRO_RMSNORM && whole) {
		/* the whole rows are staged raw: normalise them in place, as k_rmsnorm would (its sum order).
		** With VNORM, when K is in 16s and fits two of them a thread, each thread asks for its norm weights
		** in 16-byte vectors before the sums, so they arrive during them (one round trip, not one a value;
		** the 32 registers they take cost Q6_K's tensor-core loop more than they save: see its caller). */
		int n16 = K >> 4;
		bool vec = VNORM && (K & 15) == 0 && n16 <= 2 * (int)blockDim.x;
		int i0 = threadIdx.x, i1 = threadIdx.x + blockDim.x;
		float w[2][16];
#pragma unroll
		for (int j = 0; j < 16; j++)
			w[0][j] = w[1][j] = 1.0f;
		if (vec && nw && i0 < n16)
			q_ld16v(w[0], nw + 16 * i0);
		if (vec && nw && i1 < n16)
			q_ld16v(w[1], nw + 16 * i1);
		for (int t = 0; t < tn; t++) {
			float *xr = xs + t * kcap, ss = 0.0f;
			for (int i = threadIdx.x; i < K; i += blockDim.x)
				ss += xr[q_xsw(i)] * xr[q_xsw(i)];
			float iv = 1.0f / sqrtf(block_sum(ss) / (float)K + eps);
			for (int c = 0; vec && c < 2; c++) {
				int i = c ? i1 : i0;
				if (i >= n16)
					break;
				float v[16];
#pragma unroll
				for (int q = 0; q < 4; q++) {
					float4 f = *(const float4 *)(xr + q_xsw(16 * i + 4 * q));
					v[4 * q] = f.x, v[4 * q + 1] = f.y, v[4 * q + 2] = f.z, v[4 * q + 3] = f.w;
				}
#pragma unroll
				for (int j = 0; j < 16; j++) {
					A a = from_f<A>(v[j] * iv * (c ? w[1][j] : w[0][j]));
					if (hs && blockIdx.x == 0)
						hs[(t0 + t) * K + 16 * i + j] = a;
					v[j] = to_f(a);
				}
				(void)q_put16(xr, 16 * i, v);
			}
			for (int i = threadIdx.x; !vec && i < K; i += blockDim.x) {
				float h = xr[q_xsw(i)] * iv;
				if (nw)
					h *= to_f(nw[i]);
				A a = from_f<A>(h);
				if (hs && blockIdx.x == 0)
					hs[(t0 + t) * K + i] = a;
				xr[q_xsw(i)] = to_f(a);
			}
		}
		__syncthreads();
	}
	q_sums(xsum, xs, tn, kc, kcap);
	__syncthreads();
	return pro == GEMV_PRO_RMSLATE ? block_sum(ss) : 0.0f; /* pro is uniform: every thread or none */
}

/*
** The decode GEMV of a fused group (k_gemv_fused's contract) when some member's weight stays in blocks:
** up to four linears reading the same input rows x[T, K], member m with weight w_m [N_m, K] of type Q_m,
** optional bias b_m and output y_m [T, N_m] (absent members: N_m = 0, Q_m = Q0). Prologue and epilogue
** bits as k_gemv_fused's PRO and EPI: template values when >= 0 (the batch-1 launch, TM = 1), else the
** run-time pro and epi (TM > 1: one out-of-line body per type tuple; see qgemv_fused_call):
** the input formed as x, rmsnorm(x)·nw (nw may be nullptr; stored to hs by block 0 when hs != nullptr)
** or silu(x)·u; each result rounded to A as the linear stores it (bias added first), then y_m =
** A(s_m · that) for epi bit m, or y_0 = A(r + that) with GEMV_EPI_RES. y_0 may equal r (one thread reads
** r[t, n] and then writes y_0[t, n]); no output may overlap x, u or hs.
**
** As k_qgemv<A, Q, 2, P, TM>, with the split P_m chosen per member (P0..P3 in {1, 2, 4, 8}; emit_cuda.c
** gives a member of wider rows, such as an f32 router beside Q4_K ones, a larger split, so every block
** reads about as many weight bytes): member m's rows go to blocks of RPB_m = 2·8/P_m rows (member 0's
** blocks first, then member 1's, ...); warp w serves 2 rows of its block and the units u ≡ w % P_m of
** each chunk; x is staged TM rows at a time in chunks of (8192/rows) values rounded down to a multiple
** of 1024 (K a multiple of every block member's block size; float members take any K).
** grid (up to Σ_m ceil(N_m / RPB_m)), block 256: block b serves the groups b, b + gridDim.x, ... (x
** staged once a block when it fits one chunk; glmc caps a one-token grid at three blocks an SM).
*/
template <typename A, int Q0, int Q1, int Q2, int Q3, typename NW, int PRO, int EPI, int TM>
__device__ __forceinline__ void qgemv_fused_body(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0,
                                                 const unsigned char *w1, const unsigned char *w2, const unsigned char *w3,
                                                 const A *b0, const A *b1, const A *b2, const A *b3, const A *x,
                                                 const A *u, const NW *nw, A *hs, const A *r, int T, int K, int N0, int N1,
                                                 int N2, int N3, int P0, int P1, int P2, int P3, int pro, int epi,
                                                 float eps, float s0, float s1, float s2, float s3)
{
	const int R = 2;
	static_assert(PRO != GEMV_PRO_RMSLATE || TM == 1, "RMSLATE: the one-token launch");
	if (PRO >= 0)
		pro = PRO;
	if (EPI >= 0)
		epi = EPI;
	/* the distinct types among the members, so a repeated type is instantiated once */
	constexpr bool d1 = Q1 != Q0, d2 = Q2 != Q0 && Q2 != Q1, d3 = Q3 != Q0 && Q3 != Q1 && Q3 != Q2;
	GLM_SH(float4, xs4, [2048]); /* 8192 floats */
	GLM_SH_AFTER(xs4, float, xsum, [512]);
	GLM_SH_AFTER(xsum, float, red, [8][R][TM]);
	GLM_SH_AFTER(red, float, inv, [8]);
	float *xs = (float *)xs4;
	int r0 = 16 / P0, r1 = 16 / P1, r2 = 16 / P2; /* rows per block of members 0..2 */
	int nb0 = (N0 + r0 - 1) / r0, nb1 = (N1 + r1 - 1) / r1, nb2 = (N2 + r2 - 1) / r2;
	int nbt = nb0 + nb1 + nb2 + (N3 > 0 ? (N3 + 16 / P3 - 1) / (16 / P3) : 0);
	/* all of x in one staged chunk: a block that serves several row groups stages it once */
	bool single = T <= TM && K <= ((8192 / T) & ~1023), staged = false;
	float ssq = 0.0f; /* RMSLATE: the staged row's sum of squares (kept while x stays staged) */
	for (int b = blockIdx.x; b < nbt; b += gridDim.x) { /* uniform per block */
		int m = b < nb0 ? 0 : b < nb0 + nb1 ? 1 : b < nb0 + nb1 + nb2 ? 2 : 3; /* uniform per block */
		int bm = b - (m > 0 ? nb0 : 0) - (m > 1 ? nb1 : 0) - (m > 2 ? nb2 : 0);
		int P = m == 0 ? P0 : m == 1 ? P1 : m == 2 ? P2 : P3, rpb = 16 / P;
		int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, rg = warp / P, kp = warp % P;
		int Nm = m == 0 ? N0 : m == 1 ? N1 : m == 2 ? N2 : N3;
		int qt = m == 0 ? Q0 : m == 1 ? Q1 : m == 2 ? Q2 : Q3;
		const unsigned char *w = m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3;
		const A *bias = m == 0 ? b0 : m == 1 ? b1 : m == 2 ? b2 : b3;
		A *y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;
		float sc = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;
		bool scaled = ((epi >> m) & 1) != 0, res = (epi & GEMV_EPI_RES) && m == 0;
		long long stride = qt == Q0 ? qf_stride<Q0>(K) : qt == Q1 ? qf_stride<Q1>(K) : qt == Q2 ? qf_stride<Q2>(K)
		                                                                                       : qf_stride<Q3>(K);
		bool vec = (((unsigned long long)w | (unsigned long long)stride) & 15) == 0;
		int n0 = bm * rpb + rg * R;
		const unsigned char *rows[R];
#pragma unroll
		for (int i = 0; i < R; i++)
			rows[i] = w + (long long)(n0 + i < Nm ? n0 + i : 0) * stride; /* rows past N_m read row 0, unused */
		for (int t0 = 0; t0 < T; t0 += TM) {
			int tn = T - t0 < TM ? T - t0 : TM;
			int kcap = (8192 / tn) & ~1023;
			bool whole = K <= kcap;
			if (pro == GEMV_PRO_RMSNORM && !whole)
				for (int t = 0; t < tn; t++) {
					float iv = gemv_row_inv_rms(x + (long long)(t0 + t) * K, K, eps);
					if (threadIdx.x == 0)
						inv[t] = iv; /* read after qf_stage's first barrier */
				}
			float acc[R][TM];
#pragma unroll
			for (int i = 0; i < R; i++)
#pragma unroll
				for (int t = 0; t < TM; t++)
					acc[i][t] = 0.0f;
			for (int k0 = 0; k0 < K; k0 += kcap) {
				int kc = K - k0 < kcap ? K - k0 : kcap;
				if (!(single && staged))
					ssq = (k0 ? ssq : 0.0f) + qf_stage<A, NW>(xs, xsum, pro, x, u, nw, hs, inv, eps, t0, tn, K, k0, kc,
					                                          kcap, whole);
				staged = true;
				if (n0 >= Nm)
					continue;
				if (qt == Q0)
					qf_chunk<Q0, R, TM>(acc, rows, k0, kc, xs, xsum, kcap, tn, kp, P, vec);
				else if (d1 && qt == Q1)
					qf_chunk<Q1, R, TM>(acc, rows, k0, kc, xs, xsum, kcap, tn, kp, P, vec);
				else if (d2 && qt == Q2)
					qf_chunk<Q2, R, TM>(acc, rows, k0, kc, xs, xsum, kcap, tn, kp, P, vec);
				else if (d3 && qt == Q3)
					qf_chunk<Q3, R, TM>(acc, rows, k0, kc, xs, xsum, kcap, tn, kp, P, vec);
			}
			float late_inv = pro == GEMV_PRO_RMSLATE ? 1.0f / sqrtf(ssq / (float)K + eps) : 1.0f;
			if (pro == GEMV_PRO_RMSLATE && hs && blockIdx.x == 0 && b == 0) /* other nodes read the norm */
				late_store_norm<A, NW>(hs + (long long)t0 * K, x + (long long)t0 * K, nw, K, late_inv);
#pragma unroll
			for (int i = 0; i < R; i++)
#pragma unroll
				for (int t = 0; t < TM; t++)
					if (t < tn)
						acc[i][t] = warp_sum(acc[i][t]);
			/* row n, token t: the linear's result s (RMSLATE: times the norm's scale) rounded to A, then the
			** member's epilogue */
			auto store = [&](int n, int t, float s) {
				if (pro == GEMV_PRO_RMSLATE)
					s *= late_inv;
				if (bias)
					s += to_f(bias[n]);
				float lin = to_f(from_f<A>(s));
				long long at = (long long)(t0 + t) * Nm + n;
				if (scaled)
					lin = sc * lin;
				else if (res)
					lin = to_f(r[at]) + lin;
				y[at] = from_f<A>(lin);
			};
			if (P == 1) {
				if (lane == 0)
#pragma unroll
					for (int i = 0; i < R; i++)
#pragma unroll
						for (int t = 0; t < TM; t++)
							if (t < tn && n0 + i < Nm)
								store(n0 + i, t, acc[i][t]);
				continue;
			}
			if (lane == 0)
#pragma unroll
				for (int i = 0; i < R; i++)
#pragma unroll
					for (int t = 0; t < TM; t++)
						red[warp][i][t] = acc[i][t];
			__syncthreads();
			/* thread j < rpb·tn finishes row j / tn of the block, token j % tn: the sum over its group's P warps */
			int j = threadIdx.x;
			if (j < rpb * tn) {
				int row = j / tn, t = j - row * tn, gi = row / R, ri = row - gi * R, n = bm * rpb + row;
				if (n < Nm) {
					float s = 0.0f;
					for (int q = 0; q < P; q++)
						s += red[gi * P + q][ri][t];
					store(n, t, s);
				}
			}
			__syncthreads(); /* red is rewritten by the next pass, which may not stage x again */
		}
	}
}

/* The multi-row variant (TM > 1) with the prologue and epilogue as run-time values, compiled once per type
** tuple and called by every wrapper (a plan's groups differ in their arguments, so each has its own
** wrapper; inlining this body into each would multiply NVRTC's work). The batch-1 variant stays inlined
** and specialised: out of line, or with run-time pro and epi, its registers spill. */
template <typename A, int Q0, int Q1, int Q2, int Q3, typename NW, int TM>
__device__ __noinline__ void qgemv_fused_call(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1,
                                              const unsigned char *w2, const unsigned char *w3, const A *b0, const A *b1,
                                              const A *b2, const A *b3, const A *x, const A *u, const NW *nw, A *hs,
                                              const A *r, int T, int K, int N0, int N1, int N2, int N3, int P0, int P1,
                                              int P2, int P3, int pro, int epi, float eps, float s0, float s1, float s2,
                                              float s3)
{
	qgemv_fused_body<A, Q0, Q1, Q2, Q3, NW, -1, -1, TM>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs, r, T,
	                                                    K, N0, N1, N2, N3, P0, P1, P2, P3, pro, epi, eps, s0, s1, s2, s3);
}

/* The kernel glmc's wrappers call (contract above qgemv_fused_body): out of line for TM > 1, inline for 1. */
template <typename A, int Q0, int Q1, int Q2, int Q3, typename NW, int PRO, int EPI, int TM>
__device__ void k_qgemv_fused(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1,
                              const unsigned char *w2, const unsigned char *w3, const A *b0, const A *b1, const A *b2,
                              const A *b3, const A *x, const A *u, const NW *nw, A *hs, const A *r, int T, int K, int N0,
                              int N1, int N2, int N3, int P0, int P1, int P2, int P3, int pro, int epi, float eps,
                              float s0, float s1, float s2, float s3)
{
	if constexpr (TM > 1)
		qgemv_fused_call<A, Q0, Q1, Q2, Q3, NW, TM>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs, r, T, K,
		                                            N0, N1, N2, N3, P0, P1, P2, P3, pro, epi, eps, s0, s1, s2, s3);
	else
		qgemv_fused_body<A, Q0, Q1, Q2, Q3, NW, PRO, EPI, TM>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs,
		                                                      r, T, K, N0, N1, N2, N3, P0, P1, P2, P3, pro, epi, eps, s0,
		                                                      s1, s2, s3);
}

/*
** k_qgemv_fused's one-token contract (PRO, EPI template values, T rows served one after another) for a
** group whose members are all Q4_K, all Q6_K or all Q8_0 (QT), on the tensor cores (ops/quant.cuh k_qgemv_mma): x is staged as
** k_qgemv_fused stages it (qf_stage: the prologue, the norm stored by block 0), then restaged in place as
** hi/lo units (qm_restage); without a norm it is staged as units at once (qm_stage); with GEMV_PRO_RMSLATE
** x·nw is staged so (qm_stage_late, no row sum first) and each row's result is scaled by the inverse RMS
** before its bias and epilogue (K <= 8192 keeps x staged across the block's groups; block 0 stores the
** normalised row into hs when hs is not nullptr, late_store_norm). Member m's rows go
** to blocks of 128/P_m rows (member 0's blocks first); warp w serves 16 rows and the blocks b ≡ w % P_m
** of each chunk. grid (up to Σ_m ceil(N_m / (128/P_m))), block
** 256: block b serves the groups b, b + gridDim.x, ... (x staged once a block when T = 1 and K <= 8192).
*/
template <typename A, int QT, typename NW, int PRO, int EPI>
__device__ void k_qgemv_fused_mma(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1,
                                  const unsigned char *w2, const unsigned char *w3, const A *b0, const A *b1, const A *b2,
                                  const A *b3, const A *x, const A *u, const NW *nw, A *hs, const A *r, int T, int K,
                                  int N0, int N1, int N2, int N3, int P0, int P1, int P2, int P3, int pro, int epi,
                                  float eps, float s0, float s1, float s2, float s3)
{
	/* Without a norm the input is staged as units in one pass (qm_stage, SwiGLU included) after the ring's
	** first loads, as k_qgemv_mma does, and without any prologue Q4_K keeps three blocks in flight; the
	** norm's whole-row staging would hold the ring across it and spill, so there the loads start after
	** it, two in flight. */
	constexpr bool EARLY = PRO != GEMV_PRO_RMSNORM, LATE = PRO == GEMV_PRO_RMSLATE;
	constexpr int D = PRO == GEMV_PRO_NONE && QT != 14 ? 3 : 2, VPB = QmGeo<QT>::VPB;
	pro = PRO, epi = EPI;
	GLM_SH128(float4, xs4, [2304]); /* 8192 floats, then their 8192 values as units */
	GLM_SH128_AFTER(xs4, uint4, zu, [32]);
	GLM_SH_AFTER(zu, float, xsum, [512]);
	GLM_SH_AFTER(xsum, float, red, [8][16]);
	GLM_SH_AFTER(red, float, inv, [8]);
	float ssq = 0.0f; /* LATE: the staged row's sum of squares (kept while x stays staged) */
	float *xs = (float *)xs4;
	const uint4 *xu = (const uint4 *)xs4;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	if (threadIdx.x < 32)
		zu[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
	bool act = qm_act<QT>(lane);
	int boff = qm_boff<QT>(lane);
	int nb0 = (N0 + 128 / P0 - 1) / (128 / P0), nb1 = (N1 + 128 / P1 - 1) / (128 / P1);
	int nb2 = (N2 + 128 / P2 - 1) / (128 / P2), nb3 = (N3 + 128 / P3 - 1) / (128 / P3);
	int nbt = nb0 + nb1 + nb2 + nb3;
	long long stride = q_stride<QT>(K);
	bool single = T == 1 && K <= 8192, staged = false, whole = K <= 8192;
	for (int b = blockIdx.x; b < nbt; b += gridDim.x) { /* uniform per block */
		int m = b < nb0 ? 0 : b < nb0 + nb1 ? 1 : b < nb0 + nb1 + nb2 ? 2 : 3;
		int bm = b - (m > 0 ? nb0 : 0) - (m > 1 ? nb1 : 0) - (m > 2 ? nb2 : 0);
		int P = m == 0 ? P0 : m == 1 ? P1 : m == 2 ? P2 : P3, rpb = 128 / P, rg = warp / P, kp = warp % P;
		int Nm = m == 0 ? N0 : m == 1 ? N1 : m == 2 ? N2 : N3;
		const unsigned char *w = m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3;
		const A *bias = m == 0 ? b0 : m == 1 ? b1 : m == 2 ? b2 : b3;
		A *y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;
		float sc = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;
		bool scaled = ((epi >> m) & 1) != 0, res = (epi & GEMV_EPI_RES) && m == 0;
		int n0 = bm * rpb + rg * 16;
		bool on = n0 < Nm; /* uniform per warp */
		const unsigned char *row0 = w + (long long)(n0 + g < Nm ? n0 + g : 0) * stride;
		const unsigned char *row1 = w + (long long)(n0 + g + 8 < Nm ? n0 + g + 8 : 0) * stride;
		for (int t = 0; t < T; t++) {
			if (pro == GEMV_PRO_RMSNORM && !whole) {
				float iv = gemv_row_inv_rms(x + (long long)t * K, K, eps);
				if (threadIdx.x == 0)
					inv[0] = iv; /* read after qf_stage's first barrier */
			}
			float acc[2] = {0.0f, 0.0f};
			for (int k0 = 0; k0 < K; k0 += 8192) {
				int kc = K - k0 < 8192 ? K - k0 : 8192, nbk = kc / VPB;
				unsigned kb0 = (unsigned)k0 / VPB;
				QmRaw<QT> rr[D];
				if (EARLY)
					qm_preload<QT, D>(rr, on, row0, row1, kb0, nbk, kp, P, c);
				if (!(single && staged) && LATE)
					ssq = (k0 ? ssq : 0.0f) + qm_stage_late_t<QT, A, NW>((uint4 *)xs4, xsum, x + (long long)t * K,
					                                                     nw, k0, kc);
				else if (!(single && staged) && EARLY)
					qm_stage_t<QT, A, A, PRO == GEMV_PRO_SWIGLU>((uint4 *)xs4, xsum, x + (long long)t * K,
					                                             PRO == GEMV_PRO_SWIGLU ? u + (long long)t * K : u, k0,
					                                             kc);
				if (!(single && staged) && !EARLY) {
					/* Q6_K's loop already spills at 128 registers; the vector norm pushed more of it out
					** and was slower (bench/NOTES.md entry 54), so Q6_K keeps the scalar one */
					qf_stage<A, NW, QT != 14>(xs, xsum, pro, x, u, nw, hs, inv, eps, t, 1, K, k0, kc, 8192, whole);
					qm_restage_t<QT>(xs, xsum, kc);
				}
				staged = true;
				if (!EARLY) /* after the staging: live across the norm the ring's loads make it spill */
					qm_preload<QT, D>(rr, on, row0, row1, kb0, nbk, kp, P, c);
				if (on)
					qm_run<QT, D>(acc, rr, row0, row1, kb0, nbk, kp, P, xu, xsum, zu, boff, act, c);
			}
			qm_lanesum(acc);
			float late_inv = LATE ? 1.0f / sqrtf(ssq / (float)K + eps) : 1.0f;
			if (LATE && hs && blockIdx.x == 0 && b == 0) /* other nodes read the norm: block 0 stores it */
				late_store_norm<A, NW>(hs + (long long)t * K, x + (long long)t * K, nw, K, late_inv);
			/* row n: the linear's result s (LATE: times the norm's scale) rounded to A, then the member's
			** epilogue */
			auto store = [&](int n, float s) {
				if (LATE)
					s *= late_inv;
				if (bias)
					s += to_f(bias[n]);
				float lin = to_f(from_f<A>(s));
				long long at = (long long)t * Nm + n;
				if (scaled)
					lin = sc * lin;
				else if (res)
					lin = to_f(r[at]) + lin;
				y[at] = from_f<A>(lin);
			};
			if (P == 1) { /* uniform per block */
				if (c == 0)
#pragma unroll
					for (int i = 0; i < 2; i++)
						if (n0 + g + 8 * i < Nm)
							store(n0 + g + 8 * i, acc[i]);
				continue;
			}
			float s = qm_rowsum(red, acc, P);
			int n = bm * rpb + threadIdx.x; /* thread j < rpb finishes row j of the block */
			if (threadIdx.x < rpb && n < Nm)
				store(n, s);
		}
	}
}

/*
** The end of a MoE layer for the decode step (k_moe_down_fused's contract) with the routed experts' down
** projections down [E, C, F] of type QD and the shared expert's sdown [C, Fs] of type QS (either may be
** blocks or floats): for token t = blockIdx.y, rows c of blockIdx.x·16 + 2·warp + {0, 1},
**   the routed sum Σ_j w[t·k + j]·(down[e_j, c]·hid[t·k + j]) over e_j = idx[t·k + j] >= 0, each expert's
**   hid row (k_moe_up's scratch) staged in turn and its dot finished before it is weighted, stored as
**   A (as k_qmoe_down);
**   with SHARED + A(sdown[c]·A(silu(g[t])·u[t])) (the SwiGLU as k_swiglu stores it, the product as the
**   linear stores it), the sum rounded to A as the add stores it;
**   with RES the residual r[t, c] added last. y may equal r (the same thread reads r[t, c] first).
** grid (ceil(C/16), T), block 256.
*/
template <typename A, int QD, int QS, bool SHARED, bool RES>
__device__ void k_qmoe_down_fused(A *y, const float *hid, const int *idx, const A *w, const unsigned char *down, int C,
                                  int F, int k, const unsigned char *sdown, const A *g, const A *u, int Fs, const A *r)
{
	GLM_SH(float4, xs4, [2048]);
	GLM_SH_AFTER(xs4, float, xsum, [512]);
	float *xs = (float *)xs4;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, t = blockIdx.y;
	int c0 = blockIdx.x * 16 + 2 * warp;
	long long stride = qf_stride<QD>(F);
	bool vec = (((unsigned long long)down | (unsigned long long)stride) & 15) == 0;
	float out[2] = {0.0f, 0.0f};
	for (int j = 0; j < k; j++) {
		long long slot = (long long)t * k + j;
		int ex = idx[slot];
		if (ex < 0) /* uniform per block */
			continue;
		const unsigned char *rows[2];
#pragma unroll
		for (int i = 0; i < 2; i++)
			rows[i] = down + ((long long)ex * C + (c0 + i < C ? c0 + i : 0)) * stride;
		float acc[2][1] = {{0.0f}, {0.0f}};
		for (int k0 = 0; k0 < F; k0 += 8192) {
			int kc = F - k0 < 8192 ? F - k0 : 8192;
			q_stage<A, float, false>(xs, xsum, hid, (const float *)0, slot, 1, F, k0, kc, 8192);
			if (c0 < C)
				qf_chunk<QD, 2, 1>(acc, rows, k0, kc, xs, xsum, 8192, 1, 0, 1, vec);
		}
		float wj = to_f(w[slot]);
#pragma unroll
		for (int i = 0; i < 2; i++)
			out[i] += wj * warp_sum(acc[i][0]);
	}
#pragma unroll
	for (int i = 0; i < 2; i++)
		out[i] = to_f(from_f<A>(out[i]));
	if (SHARED) {
		long long ss = qf_stride<QS>(Fs);
		bool svec = (((unsigned long long)sdown | (unsigned long long)ss) & 15) == 0;
		const unsigned char *rows[2];
#pragma unroll
		for (int i = 0; i < 2; i++)
			rows[i] = sdown + (long long)(c0 + i < C ? c0 + i : 0) * ss;
		float acc[2][1] = {{0.0f}, {0.0f}};
		for (int k0 = 0; k0 < Fs; k0 += 8192) {
			int kc = Fs - k0 < 8192 ? Fs - k0 : 8192;
			q_stage<A, A, true>(xs, xsum, g, u, t, 1, Fs, k0, kc, 8192);
			if (c0 < C)
				qf_chunk<QS, 2, 1>(acc, rows, k0, kc, xs, xsum, 8192, 1, 0, 1, svec);
		}
#pragma unroll
		for (int i = 0; i < 2; i++)
			out[i] = to_f(from_f<A>(out[i] + to_f(from_f<A>(warp_sum(acc[i][0])))));
	}
	if (lane == 0)
#pragma unroll
		for (int i = 0; i < 2; i++)
			if (c0 + i < C) {
				long long at = (long long)t * C + c0 + i;
				float v = out[i];
				if (RES)
					v = to_f(r[at]) + v;
				y[at] = from_f<A>(v);
			}
}

/*
** k_qmoe_down_fused's contract on the tensor cores, for routed (QD) and shared (QS) down projections of
** Q4_K, Q6_K or Q8_0 (rows of whole superblocks) with F, Fs <= 8192, split over groups of G routed experts
** (G·F <= 8192, G <= 8) so that a warp streams several experts' rows with one ring of loads in flight:
** grid (ceil(C/128), ceil(k/G) + SHARED, T), block 256. Block (bx, j, t) for j < ceil(k/G) stages the hid
** rows of slots jG .. jG + G − 1 (contiguous in k_qmoe_up's scratch) as one chunk, and warp w takes rows
** c = bx·128 + 16w + {g, g + 8} of each of those experts with idx >= 0 in turn, whole (D blocks' loads in
** flight across the experts' boundaries); block j = ceil(k/G) takes the shared expert's rows over
** swiglu(g[t], u[t]) rounded to A. Each expert's dots go to part[(t·(k + SHARED) + slot)·C + c] (f32; the
** shared expert's at slot k). Then the block counts itself in cnt[t·gridDim.x + bx] (a KA_ZERO region), and
** the last of the row block's blocks sums their parts as k_qmoe_down_fused does (Σ_j w[t·k + j]·dot_j in
** slot order over idx >= 0, rounded to A; + the shared dot rounded to A, the sum rounded to A; + r[t, c]
** with RES) and clears the count (the threadFenceReduction pattern, as k_mla_split). y may equal r (the
** thread that writes y[t, c] read r[t, c] just before).
*/
template <typename A, int QD, int QS, bool SHARED, bool RES>
__device__ void k_qmoe_down_mma(A *y, const float *hid, float *part, int *cnt, const int *idx, const A *w,
                                const unsigned char *down, int C, int F, int k, int G, const unsigned char *sdown,
                                const A *g, const A *u, int Fs, const A *r)
{
	GLM_SH128(uint4, xu, [32 * 72]);
	GLM_SH128_AFTER(xu, uint4, zu, [32]);
	GLM_SH_AFTER(zu, float, xs16, [512]);
	GLM_SH_AFTER(xs16, int, sid, [8]);
	GLM_SH_AFTER(sid, int, spos, [8]);
	GLM_SH_AFTER(spos, int, nact, );
	GLM_SH_AFTER(nact, int, last, );
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, gq = lane >> 2, c = lane & 3;
	int ng = (k + G - 1) / G, nj = k + (SHARED ? 1 : 0), t = blockIdx.z, n0 = blockIdx.x * 128 + 16 * warp;
	bool on = n0 < C; /* uniform per warp */
	int ra = n0 + gq < C ? n0 + gq : 0, rb = n0 + gq + 8 < C ? n0 + gq + 8 : 0;
	float *pt = part + (long long)t * nj * C;
	if (threadIdx.x < 32)
		zu[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
	if ((int)blockIdx.y < ng) {
		const int D = QD == 14 ? 2 : 3; /* as k_qgemv_mma */
		int j0 = blockIdx.y * G, ge = k - j0 < G ? k - j0 : G, nbe = F / QmGeo<QD>::VPB;
		if (threadIdx.x == 0) { /* the group's experts with an id, in slot order */
			int m = 0;
			for (int e = 0; e < ge; e++) {
				int ex = idx[(long long)t * k + j0 + e];
				if (ex >= 0)
					sid[m] = ex, spos[m++] = e;
			}
			nact = m;
		}
		__syncthreads();
		int na = nact, ns = na * nbe;
		long long st = q_stride<QD>(F);
		auto rowp = [&](int a, int row) { return down + ((long long)sid[a] * C + row) * st; };
		bool act = qm_act<QD>(lane);
		int boff = qm_boff<QD>(lane);
		QmRaw<QD> rr[D];
#pragma unroll
		for (int i = 0; i + 1 < D; i++)
			if (on && i < ns)
				qm_load(rr[i], rowp(i / nbe, ra), rowp(i / nbe, rb), (unsigned)(i % nbe), c);
		if (na > 0)
			qm_stage_t<QD, A, float, false>(xu, xs16, hid + ((long long)t * k + j0) * F, (const float *)0, 0, ge * F);
		float acc[2] = {0.0f, 0.0f};
		for (int s0 = 0; on && s0 < ns; s0 += D) {
#pragma unroll
			for (int i = 0; i < D; i++) {
				int s = s0 + i, sl = s + D - 1;
				if (s >= ns)
					break;
				if (sl < ns) {
					int al = sl / nbe;
					qm_load(rr[(i + D - 1) % D], rowp(al, ra), rowp(al, rb), (unsigned)(sl - al * nbe), c);
				}
				int a = s / nbe, bi = s - a * nbe, ui = spos[a] * nbe + bi;
				const char *xp = act ? (const char *)xu + QmGeo<QD>::XB * ui + boff : (const char *)zu + boff;
				qm_block(acc, rr[i], xp, xs16 + QmGeo<QD>::SB * ui, c);
				if (bi == nbe - 1) { /* this expert's rows are done: their dots to part */
					qm_lanesum(acc);
					float *pr = pt + (long long)(j0 + spos[a]) * C;
					if (c == 0)
#pragma unroll
						for (int q = 0; q < 2; q++)
							if (n0 + gq + 8 * q < C)
								pr[n0 + gq + 8 * q] = acc[q];
					acc[0] = acc[1] = 0.0f;
				}
			}
		}
	} else {
		float acc[2];
		long long st = q_stride<QS>(Fs);
		qm_rows<A, QS, A, true>(acc, on, sdown + ra * st, sdown + rb * st, g + (long long)t * Fs, u + (long long)t * Fs,
		                        Fs, xu, xs16, zu);
		if (on && c == 0)
#pragma unroll
			for (int q = 0; q < 2; q++)
				if (n0 + gq + 8 * q < C)
					pt[(long long)k * C + n0 + gq + 8 * q] = acc[q];
	}
	__threadfence();
	__syncthreads();
	if (threadIdx.x == 0) {
		int *cp = cnt + (long long)t * gridDim.x + blockIdx.x;
		last = atomicAdd(cp, 1) == ng + (SHARED ? 1 : 0) - 1;
		if (last)
			*cp = 0; /* every block of the row block has counted: clear it for the next launch */
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	int n = blockIdx.x * 128 + threadIdx.x;
	if (threadIdx.x >= 128 || n >= C)
		return;
	float out = 0.0f;
	for (int j = 0; j < k; j++)
		if (idx[(long long)t * k + j] >= 0)
			out += to_f(w[(long long)t * k + j]) * __ldcg(pt + (long long)j * C + n);
	out = to_f(from_f<A>(out));
	if (SHARED)
		out = to_f(from_f<A>(out + to_f(from_f<A>(__ldcg(pt + (long long)k * C + n)))));
	long long at = (long long)t * C + n;
	if (RES)
		out = to_f(r[at]) + out;
	y[at] = from_f<A>(out);
}

/*
** The decode GEMV of a float fused group (fuse.c's FK_GEMV, k_gemv_fused's arguments without pdl) for a
** step of 2..8·NT tokens on the tensor cores, bf16 weights and activations. A warp's tiles are 16 rows
** (as gemv_wrow's groups of RB 16: with GEMV_EPI_GLU gate rows n.. then the same up rows) by 8 tokens;
** block b takes tiles b·MT .. b·MT + MT - 1, its warps split K in 32-value chunks (warp w: w, w + nwarp,
** ...; UC chunks in flight), and one shared-memory reduction ends the block. Per chunk a lane (g, c) loads
** the 16 bytes at 8c of rows g and g + 8 of each tile and of x[token g]: its words 0, 1 are A's and B's
** k 2c.., 2c + 8.. of one m16n8k16 and words 2, 3 those of a second, so every product meets its own x.
** PRO: GEMV_PRO_NONE, or GEMV_PRO_RMSLATE (the norm's scale after the dots: B holds bf16(x·nw), each row's
** sum of squares of x is formed beside the loads, y = inv·Σ w·bf16(x·nw); the unfused kernels round
** x·inv·nw instead, the same one bf16 rounding of the input); with hs the norm is stored too, A(x·inv·nw)
** as k_rmsnorm stores it (tc_store_norm), for the nodes that read it. EPI as
** gemv_core's. Each result rounded to A as the linear stores it (bias first). K a multiple of 32, every
** row 16-byte aligned. grid (ceil(ΣN/(16·MT)); GLU: ceil(N0/(8·MT))), block 32..256 threads.
**
** Why: gemv_core's rows-of-8 path spends a conversion and TR FMAs a weight on the CUDA cores and, at 2..8
** tokens, a looping 264-block grid with x staged, so a step of 2 tokens cost several times one token's
** (bench/NOTES.md entry 43). The mma does 8 tokens of 16 rows per instruction, so the step stays a
** weight stream.
*/
/* Row R of a group's concatenated members for token t: the linear's result s (bias first) rounded to A,
** then member m's scale (EPI bit m) or, for member 0, the residual r (GEMV_EPI_RES), stored to y_m. */
template <typename A, int EPI>
__device__ __forceinline__ void tc_store(float s, int R, int t, A *y0, A *y1, A *y2, A *y3, const A *b0, const A *b1,
                                         const A *b2, const A *b3, const A *r, int N0, int N1, int N2, int N3, float s0,
                                         float s1, float s2, float s3)
{
	int m = R < N0 ? 0 : R < N0 + N1 ? 1 : R < N0 + N1 + N2 ? 2 : 3;
	int n = R - (m > 0 ? N0 : 0) - (m > 1 ? N1 : 0) - (m > 2 ? N2 : 0);
	int Nm = m == 0 ? N0 : m == 1 ? N1 : m == 2 ? N2 : N3;
	const A *bias = m == 0 ? b0 : m == 1 ? b1 : m == 2 ? b2 : b3;
	A *y = m == 0 ? y0 : m == 1 ? y1 : m == 2 ? y2 : y3;
	if (bias)
		s += to_f(bias[n]);
	long long at = (long long)t * Nm + n;
	if ((EPI >> m) & 1) {
		float sc = m == 0 ? s0 : m == 1 ? s1 : m == 2 ? s2 : s3;
		s = sc * to_f(from_f<A>(s));
	} else if ((EPI & GEMV_EPI_RES) && m == 0) {
		s = to_f(r[at]) + to_f(from_f<A>(s));
	}
	y[at] = from_f<A>(s);
}

/* A warp's partial tiles into red[warp] (accumulator (mt, n, e) at (mt·N + n)·4 + e, lane by lane), and
** with LATE each B column's sum of squares over the lanes c of column g into sq[warp][8n + g]: what the
** block's reduction after the next barrier reads (k_gemv_tc, k_qgemv_tc). */
template <int MT, int N, bool LATE>
__device__ __forceinline__ void tc_publish(float (*red)[MT * N * 4][32], float (*sq)[8 * N], const float (&acc)[MT][N][4],
                                           const float (&ss)[N], int warp, int lane)
{
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int n = 0; n < N; n++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				red[warp][(mt * N + n) * 4 + e][lane] = acc[mt][n][e];
	if constexpr (LATE) {
#pragma unroll
		for (int n = 0; n < N; n++) {
			float s = ss[n];
			s += __shfl_xor_sync(0xffffffffu, s, 1);
			s += __shfl_xor_sync(0xffffffffu, s, 2);
			if ((lane & 3) == 0)
				sq[warp][n * 8 + (lane >> 2)] = s;
		}
	}
}

/* A late norm's rows for the nodes that read them (hs != nullptr): A(x·iv·nw) as late_store_norm forms
** them (nw may be nullptr), iv each token's inverse RMS from the block's sums of squares sq[w][t·P] taken
** as the results take them (every block's warps cover all of K). The T·K values are dealt out in equal
** slices over the grid's blocks, each block storing its slice after the barrier that published sq. */
template <typename A, typename NW, int P, int NSQ>
__device__ __forceinline__ void tc_store_norm(A *hs, const A *x, const NW *nw, const float (*sq)[NSQ], int nwarp, int T,
                                              int K, float eps)
{
	long long n = (long long)T * K, per = (n + gridDim.x - 1) / gridDim.x, lo = (long long)blockIdx.x * per;
	long long hi = lo + per < n ? lo + per : n;
	for (long long i = lo + threadIdx.x; i < hi; i += blockDim.x) {
		int t = (int)(i / K);
		float qs = 0.0f;
		for (int w = 0; w < nwarp; w++)
			qs += sq[w][t * P];
		float v = to_f(x[i]) * (1.0f / sqrtf(qs / (float)K + eps));
		if (nw)
			v *= to_f(nw[i - (long long)t * K]);
		hs[i] = from_f<A>(v);
	}
}

template <typename T> struct TcBf16 { static constexpr bool yes = false; };
template <> struct TcBf16<bf16> { static constexpr bool yes = true; };

template <typename A, typename W, typename NW, int PRO, bool HAS_NW, int EPI, int MT, int NT, int UC>
__device__ void k_gemv_tc(A *y0, A *y1, A *y2, A *y3, const W *w0, const W *w1, const W *w2, const W *w3,
                          const A *b0, const A *b1, const A *b2, const A *b3, const A *x, const A *u, const NW *nw,
                          A *hs, const A *r, int T, int K, int N0, int N1, int N2, int N3, float eps, float s0,
                          float s1, float s2, float s3)
{
	static_assert(TcBf16<A>::yes && TcBf16<W>::yes, "bf16 weights and activations (the mma reads bf16 bits)");
	constexpr bool GLU = (EPI & GEMV_EPI_GLU) != 0, LATE = PRO == GEMV_PRO_RMSLATE;
	static_assert(PRO == GEMV_PRO_NONE || LATE, "no prologue, or the norm's scale after the dots");
	static_assert(!GLU || (EPI & ~GEMV_EPI_GLU) == 0, "GLU: no other epilogue");
	constexpr int NF = MT * NT * 4; /* a lane's accumulators */
	GLM_SH(float, red, [8][NF][32]);
	GLM_SH_AFTER(red, float, sq, [8][8 * NT]);
	(void)u;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5, g = lane >> 2, c = lane & 3;
	int Ntot = N0 + N1 + N2 + N3, KC = K / 32;
	const W *wr[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++)
			wr[mt][h] = gemv_wrow<W, GLU, 16>(blockIdx.x * MT + mt, g + 8 * h, Ntot, w0, w1, w2, w3, N0, N1, N2, K) + 8 * c;
	const A *xr[NT];
#pragma unroll
	for (int nt = 0; nt < NT; nt++) { /* tokens past T re-read token T - 1; their results are not stored */
		int t = nt * 8 + g;
		xr[nt] = x + (long long)(t < T ? t : T - 1) * K + 8 * c;
	}
	float acc[MT][NT][4], ss[NT];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int nt = 0; nt < NT; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mt][nt][e] = 0.0f;
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
		ss[nt] = 0.0f;
	for (int c0 = warp; c0 < KC; c0 += nwarp * UC) {
		uint4 wv[UC][MT][2], xv[UC][NT];
#pragma unroll
		for (int q = 0; q < UC; q++) { /* every load of the UC chunks first (a chunk past K re-reads c0) */
			int ch = c0 + q * nwarp;
			long long off = (long long)(ch < KC ? ch : c0) * 32;
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int h = 0; h < 2; h++)
					wv[q][mt][h] = __ldg((const uint4 *)(wr[mt][h] + off));
#pragma unroll
			for (int nt = 0; nt < NT; nt++)
				xv[q][nt] = __ldg((const uint4 *)(xr[nt] + off));
		}
#pragma unroll
		for (int q = 0; q < UC; q++) {
			int ch = c0 + q * nwarp;
			if (ch >= KC) /* the same for the whole warp */
				break;
			unsigned b[NT][4];
#pragma unroll
			for (int nt = 0; nt < NT; nt++) {
				if constexpr (LATE) {
					union {
						uint4 bits;
						A e[8];
					} xu;
					xu.bits = xv[q][nt];
					float xf[8], gw[8];
#pragma unroll
					for (int j = 0; j < 8; j++)
						xf[j] = to_f(xu.e[j]);
					if (HAS_NW)
						gemv_ldx<NW, 8>(nw + (long long)ch * 32 + 8 * c, gw, true, true);
#pragma unroll
					for (int j = 0; j < 8; j++) {
						ss[nt] += xf[j] * xf[j];
						if (HAS_NW)
							xf[j] *= gw[j];
					}
#pragma unroll
					for (int j = 0; j < 4; j++)
						b[nt][j] = qm_bf2(xf[2 * j], xf[2 * j + 1]);
				} else {
					b[nt][0] = xv[q][nt].x, b[nt][1] = xv[q][nt].y, b[nt][2] = xv[q][nt].z, b[nt][3] = xv[q][nt].w;
				}
			}
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				const uint4 &lo = wv[q][mt][0], &hi = wv[q][mt][1]; /* rows g and g + 8 */
#pragma unroll
				for (int nt = 0; nt < NT; nt++) {
					qm_mma(acc[mt][nt], lo.x, hi.x, lo.y, hi.y, b[nt][0], b[nt][1]);
					qm_mma(acc[mt][nt], lo.z, hi.z, lo.w, hi.w, b[nt][2], b[nt][3]);
				}
			}
		}
	}
	/* the warps' partial tiles, and with LATE each token's sum of squares (over the lanes c of token g) */
	tc_publish<MT, NT, LATE>(red, sq, acc, ss, warp, lane);
	__syncthreads();
	if constexpr (LATE)
		if (hs) /* other nodes read the norm */
			tc_store_norm<A, NW, 1, 8 * NT>(hs, x, HAS_NW ? nw : nullptr, sq, nwarp, T, K, eps);
	/* output (mt, nt, e, lane): C's row g + 8·(e / 2) of tile mt, token nt·8 + 2c + e % 2 */
	for (int i = threadIdx.x; i < NF * 32; i += blockDim.x) {
		int ln = i & 31, f = i >> 5, e = f & 3, mn = f >> 2, nt = mn % NT, mt = mn / NT;
		int gg = ln >> 2, t = nt * 8 + 2 * (ln & 3) + (e & 1);
		if (t >= T || (GLU && e >= 2))
			continue;
		float s = 0.0f, su = 0.0f; /* su: GLU's up row, e + 2 */
		for (int w = 0; w < nwarp; w++) {
			s += red[w][f][ln];
			if (GLU)
				su += red[w][f + 2][ln];
		}
		if constexpr (LATE) {
			float qs = 0.0f;
			for (int w = 0; w < nwarp; w++)
				qs += sq[w][t];
			float iv = 1.0f / sqrtf(qs / (float)K + eps);
			s *= iv, su *= iv;
		}
		if constexpr (GLU) {
			int n = (blockIdx.x * MT + mt) * 8 + gg;
			if (n >= N0)
				continue;
			if (b0)
				s += to_f(b0[n]);
			if (b1)
				su += to_f(b1[n]);
			float gv = to_f(from_f<A>(s)), uv = to_f(from_f<A>(su));
			y0[(long long)t * N0 + n] = from_f<A>(gv / (1.0f + expf(-gv)) * uv);
		} else {
			int col = (blockIdx.x * MT + mt) * 16 + gg + 8 * (e >> 1);
			if (col < Ntot)
				tc_store<A, EPI>(s, col, t, y0, y1, y2, y3, b0, b1, b2, b3, r, N0, N1, N2, N3, s0, s1, s2, s3);
		}
	}
}

/*
** ---- Q4_K, Q6_K and Q8_0 GEMV groups of 2..8·NCS tokens on the tensor cores (k_qgemv_tc) ----
**
** The one-token kernels (ops/quant.cuh k_qgemv_mma) give each lane c a quarter of every block and a
** block-diagonal B, so every C column is one lane's own partial sum under its own scale; with T tokens
** that would take T times the mma. Here every m16n8k16 covers one scale group of its 16 rows instead
** and B's 8 columns are tokens: lane c takes values 8c + 4e.. (Q4_K: sub-block s, e = 0, 1; both nibbles
** of its 8 bytes at 16 + 32p + 8c, so sub-blocks 2p and 2p + 1) or 4c.. (Q6_K: the group of 16 values of
** one scale), for A and for B alike, so C[row][token] is the group's dot and the row's scale of that
** group multiplies it in f32. A is exact: Q4_K's quants as (16 + q)/2 (qm_nib), whose offset cancels
** against the group's x sum X, formed by one more mma with A all ones; Q6_K's as q − 32 (128 + q, minus
** 160 in one bf16x2 FMA, exact), no offset; Q8_0's (lane c's values 8c + 4e.. of each 32-value block,
** its scale group) as two exact 4-bit halves in two mma (qtc_q8pairs). B is bf16: x itself (PRO NONE;
** a bf16 plan's activation), swiglu(x, u) rounded to A (PRO SWIGLU, as the unfused kernels round it), or with GEMV_PRO_RMSLATE
** x·nw as two pieces, hi = bf16(x·nw) and lo = bf16(x·nw − hi) (PIECES 2: columns 2t and 2t + 1 are token
** t's pieces, so NCS sets of 8 columns hold 4·NCS tokens), the inverse RMS applied after the dots: what
** the one-token late norm computes (LAUNCH_NORM_LATE), up to 2^-17 of each value. Without a norm
** weight x is already bf16 and one piece suffices.
*/

/* 4 values of type T at p (aligned to their size) as floats, through the read-only cache. */
template <typename T> __device__ __forceinline__ void qtc_ld4(const T *p, float (&f)[4])
{
	if constexpr (sizeof(T) == 4) {
		float4 v = __ldg((const float4 *)p);
		f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
	} else {
		union {
			uint2 bits;
			T e[4];
		} v;
		v.bits = __ldg((const uint2 *)p);
#pragma unroll
		for (int j = 0; j < 4; j++)
			f[j] = to_f(v.e[j]);
	}
}

/* B's two registers for one lane: values k..k+3 of token row xt after the prologue, as the bf16 pairs
** (v0, v2) and (v1, v3) (the pairing qm_nib and the Q6_K pairs give A); piece 1 the remainders
** v − bf16(v). LATE adds Σx² of the four to ss. */
template <typename A, typename NW, int PRO, bool HAS_NW>
__device__ __forceinline__ void qtc_frag(unsigned &b0, unsigned &b1, float &ss, const A *xt, const A *ut, const NW *nw,
                                         long long k, int piece)
{
	if constexpr (PRO == GEMV_PRO_NONE) {
		uint2 v = __ldg((const uint2 *)(xt + k));
		b0 = (v.x & 0xffffu) | (v.y << 16), b1 = (v.x >> 16) | (v.y & 0xffff0000u);
		(void)ss, (void)ut, (void)nw, (void)piece;
	} else {
		float f[4];
		qtc_ld4(xt + k, f);
		if constexpr (PRO == GEMV_PRO_SWIGLU) {
			float m[4];
			qtc_ld4(ut + k, m);
#pragma unroll
			for (int j = 0; j < 4; j++)
				f[j] = to_f(from_f<A>(f[j] / (1.0f + expf(-f[j])) * m[j]));
			(void)ss, (void)nw, (void)piece;
		} else {
			float m[4];
			if constexpr (HAS_NW)
				qtc_ld4(nw + k, m);
#pragma unroll
			for (int j = 0; j < 4; j++) {
				ss += f[j] * f[j];
				if constexpr (HAS_NW)
					f[j] *= m[j];
			}
			(void)ut;
		}
		unsigned h0 = qm_bf2(f[0], f[2]), h1 = qm_bf2(f[1], f[3]);
		if (piece) {
			h0 = qm_bf2(f[0] - __uint_as_float(h0 << 16), f[2] - __uint_as_float(h0 & 0xffff0000u));
			h1 = qm_bf2(f[1] - __uint_as_float(h1 << 16), f[3] - __uint_as_float(h1 & 0xffff0000u));
		}
		b0 = h0, b1 = h1;
	}
}

/* What a lane loads of one block of its two rows (g, g + 8). Q4_K: the head (d, dmin, the 12 scale
** bytes) and quant bytes 16 + 32p + 8c.. of each pair p. Q6_K (224-byte slots): ql words 64h + 32i + 16s
** + 4c, qh words 128 + 32h + 16s + 4c, the 16 scales and d. */
template <int QT> struct QtcW;
template <> struct QtcW<12> {
	uint4 h[2];
	uint2 q[2][4];
};
template <> struct QtcW<14> {
	unsigned ql[2][8], qh[2][4], d[2];
	uint4 sc[2];
};

__device__ __forceinline__ void qtc_load(QtcW<12> &r, const unsigned char *row0, const unsigned char *row1, long long blk, int c)
{
	const unsigned char *p[2] = {row0 + blk * 144, row1 + blk * 144};
#pragma unroll
	for (int i = 0; i < 2; i++) {
		r.h[i] = q_ld16(p[i]);
#pragma unroll
		for (int pp = 0; pp < 4; pp++)
			r.q[i][pp] = __ldg((const uint2 *)(p[i] + 16 + 32 * pp + 8 * c));
	}
}

__device__ __forceinline__ void qtc_load(QtcW<14> &r, const unsigned char *row0, const unsigned char *row1, long long blk, int c)
{
	const unsigned char *p[2] = {row0 + blk * 224, row1 + blk * 224};
#pragma unroll
	for (int i = 0; i < 2; i++) {
#pragma unroll
		for (int j = 0; j < 8; j++) /* j = 4h + 2·(quarter & 1) + s */
			r.ql[i][j] = __ldg((const unsigned *)(p[i] + 64 * (j >> 2) + 32 * ((j >> 1) & 1) + 16 * (j & 1) + 4 * c));
#pragma unroll
		for (int j = 0; j < 4; j++) /* j = 2h + s */
			r.qh[i][j] = __ldg((const unsigned *)(p[i] + 128 + 32 * (j >> 1) + 16 * (j & 1) + 4 * c));
		r.sc[i] = q_ld16(p[i] + 192);
		r.d[i] = __ldg((const unsigned *)(p[i] + 208));
	}
}

/* Q8_0 (superblocks of 8 blocks, 272 bytes): the 8 scales of each row and, for each pair p, the 16-byte
** word of pieces c of blocks 2p (x, y) and 2p + 1 (z, w) (q8_piece). */
template <> struct QtcW<8> {
	uint4 d[2];
	uint4 q[2][4];
};

__device__ __forceinline__ void qtc_load(QtcW<8> &r, const unsigned char *row0, const unsigned char *row1, long long blk, int c)
{
	const unsigned char *p[2] = {row0 + blk * 272, row1 + blk * 272};
#pragma unroll
	for (int i = 0; i < 2; i++) {
		r.d[i] = q_ld16(p[i]);
#pragma unroll
		for (int pp = 0; pp < 4; pp++)
			r.q[i][pp] = q_ld16(p[i] + q8_piece(2 * pp, c));
	}
}

/* The bf16 pair a + k (k a bf16 pair too), exact where the sums are (small integers here). */
__device__ __forceinline__ unsigned qtc_bfadd(unsigned a, unsigned k)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned d;
	asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3F803F80u), "r"(k));
	return d;
#else
	float lo = __uint_as_float(a << 16) + __uint_as_float(k << 16);
	float hi = __uint_as_float(a & 0xffff0000u) + __uint_as_float(k & 0xffff0000u);
	return qm_bf2(lo, hi);
#endif
}

/* A pair of bf16 (128 + q) from the 6-bit quants in bytes 0 and 2 of v, minus 160: q − 32, exact. */
__device__ __forceinline__ unsigned qtc_q6pair(unsigned v)
{
	return qtc_bfadd(q_andor(v, 0x003F003Fu, 0x43004300u), 0xC320C320u);
}

/* The Q8_0 quants q in bytes 0 and 2 of v as two exact bf16 pairs, lo their low nibbles l (0..15) and hi
** their signed high nibbles h (−8..7), q = 16h + l: 128 + l minus 128, and 128 + (h + 8) (the high nibble
** with its top bit flipped) minus 136. An int8 is exact in bf16, but no one offset makes all 256 of them
** one exponent's mantissas, so the byte goes in as two 4-bit halves and two mma. */
__device__ __forceinline__ void qtc_q8pairs(unsigned v, unsigned &lo, unsigned &hi)
{
	lo = qtc_bfadd(q_andor(v, 0x000F000Fu, 0x43004300u), 0xC300C300u);
	hi = qtc_bfadd(q_andxor(v >> 4, 0x000F000Fu, 0x43084308u), 0xC308C308u);
}

/* Byte j of a 16-byte word. */
__device__ __forceinline__ unsigned qtc_byte(const uint4 &v, int j)
{
	unsigned w = (j >> 2) == 0 ? v.x : (j >> 2) == 1 ? v.y : (j >> 2) == 2 ? v.z : v.w;
	return (w >> 8 * (j & 3)) & 0xffu;
}

/* acc[mt][cs][e] += lane (g, c)'s C of one Q4_K block of tile mt (rows g, g + 8; columns 2c, 2c + 1 of
** set cs). frag(cs, k, b0, b1) gives B for in-block values k..k+3 of the lane's column in set cs. */
template <int MT, int NCS, typename F>
__device__ __forceinline__ void qtc_block(float (&acc)[MT][NCS][4], const QtcW<12> (&r)[MT], int c, F &&frag)
{
	const unsigned ONE = 0x3F803F80u;
	float a[MT][2][8], bm[MT][2][8]; /* the rows' 2·d·sc and 8·(2·d·sc) + dmin·m of each sub-block */
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int i = 0; i < 2; i++) {
			unsigned y = r[mt].h[i].y, z = r[mt].h[i].z, w = r[mt].h[i].w;
			unsigned s03 = y & 0x3f3f3f3fu, m03 = z & 0x3f3f3f3fu;
			unsigned s47 = q_andor(w, 0x0f0f0f0fu, (y >> 2) & 0x30303030u);
			unsigned m47 = q_andor(w >> 4, 0x0f0f0f0fu, (z >> 2) & 0x30303030u);
			float d = q_h2f(r[mt].h[i].x), dm = q_h2f(r[mt].h[i].x >> 16);
#pragma unroll
			for (int s = 0; s < 8; s++) {
				unsigned sw = s < 4 ? s03 : s47, mw = s < 4 ? m03 : m47;
				a[mt][i][s] = 2.0f * d * (float)((sw >> 8 * (s & 3)) & 0xffu);
				bm[mt][i][s] = 8.0f * a[mt][i][s] + dm * (float)((mw >> 8 * (s & 3)) & 0xffu);
			}
		}
#pragma unroll
	for (int p = 0; p < 4; p++) {
		float cl[MT][NCS][4] = {}, ch[MT][NCS][4] = {}, xl[NCS][4] = {}, xh[NCS][4] = {};
#pragma unroll
		for (int e = 0; e < 2; e++) {
			unsigned o[MT][2][4];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int i = 0; i < 2; i++)
					qm_nib(e ? r[mt].q[i][p].y : r[mt].q[i][p].x, o[mt][i]);
#pragma unroll
			for (int cs = 0; cs < NCS; cs++) {
				unsigned bl0, bl1, bh0, bh1;
				frag(cs, 64 * p + 8 * c + 4 * e, bl0, bl1);      /* sub-block 2p */
				frag(cs, 64 * p + 32 + 8 * c + 4 * e, bh0, bh1); /* sub-block 2p + 1 */
				qm_mma(xl[cs], ONE, ONE, ONE, ONE, bl0, bl1);
				qm_mma(xh[cs], ONE, ONE, ONE, ONE, bh0, bh1);
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					qm_mma(cl[mt][cs], o[mt][0][0], o[mt][1][0], o[mt][0][1], o[mt][1][1], bl0, bl1);
					qm_mma(ch[mt][cs], o[mt][0][2], o[mt][1][2], o[mt][0][3], o[mt][1][3], bh0, bh1);
				}
			}
		}
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int cs = 0; cs < NCS; cs++)
#pragma unroll
				for (int e = 0; e < 4; e++) {
					int i = e >> 1;
					acc[mt][cs][e] += (a[mt][i][2 * p] * cl[mt][cs][e] - bm[mt][i][2 * p] * xl[cs][e]) +
					                  (a[mt][i][2 * p + 1] * ch[mt][cs][e] - bm[mt][i][2 * p + 1] * xh[cs][e]);
				}
	}
}

/* The same for one Q6_K block: group j = 8h + 2·quarter + s (values 128h + 32·quarter + 16s + 0..15,
** scale j), q = the ql nibble (low for quarters 0, 1; high for 2, 3) | qh bits 2·quarter.. << 4. */
template <int MT, int NCS, typename F>
__device__ __forceinline__ void qtc_block(float (&acc)[MT][NCS][4], const QtcW<14> (&r)[MT], int c, F &&frag)
{
#pragma unroll
	for (int j = 0; j < 16; j++) {
		int h = j >> 3, qq = (j >> 1) & 3, s = j & 1;
		unsigned pa[MT][2][2];
		float sc[MT][2];
#pragma unroll
		for (int mt = 0; mt < MT; mt++)
#pragma unroll
			for (int i = 0; i < 2; i++) {
				unsigned W = r[mt].ql[i][4 * h + 2 * (qq & 1) + s];
				unsigned nib = (qq >> 1) ? (W >> 4) & 0x0f0f0f0fu : W & 0x0f0f0f0fu;
				unsigned q = nib | ((r[mt].qh[i][2 * h + s] >> 2 * qq) & 0x03030303u) << 4;
				pa[mt][i][0] = qtc_q6pair(q), pa[mt][i][1] = qtc_q6pair(q >> 8);
				sc[mt][i] = q_h2f(r[mt].d[i]) * (float)(signed char)qtc_byte(r[mt].sc[i], j);
			}
#pragma unroll
		for (int cs = 0; cs < NCS; cs++) {
			unsigned b0, b1;
			frag(cs, 128 * h + 32 * qq + 16 * s + 4 * c, b0, b1);
#pragma unroll
			for (int mt = 0; mt < MT; mt++) {
				float C[4] = {0.0f, 0.0f, 0.0f, 0.0f};
				qm_mma(C, pa[mt][0][0], pa[mt][1][0], pa[mt][0][1], pa[mt][1][1], b0, b1);
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[mt][cs][e] += sc[mt][e >> 1] * C[e];
			}
		}
	}
}

/* The same for one Q8_0 superblock: block j (values 32j..32j + 31, scale j), lane c's values 8c + 4e..
** (e = 0, 1) from word e of its piece; the low and high nibbles' dots (cl, ch) meet as 16·ch + cl under the
** row's scale. */
template <int MT, int NCS, typename F>
__device__ __forceinline__ void qtc_block(float (&acc)[MT][NCS][4], const QtcW<8> (&r)[MT], int c, F &&frag)
{
#pragma unroll
	for (int j = 0; j < 8; j++) {
		float cl[MT][NCS][4] = {}, ch[MT][NCS][4] = {};
#pragma unroll
		for (int e = 0; e < 2; e++) {
			unsigned lo[MT][2][2], hi[MT][2][2];
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
#pragma unroll
				for (int i = 0; i < 2; i++) {
					const uint4 &v = r[mt].q[i][j >> 1];
					unsigned w = (j & 1) ? (e ? v.w : v.z) : (e ? v.y : v.x);
					qtc_q8pairs(w, lo[mt][i][0], hi[mt][i][0]);
					qtc_q8pairs(w >> 8, lo[mt][i][1], hi[mt][i][1]);
				}
#pragma unroll
			for (int cs = 0; cs < NCS; cs++) {
				unsigned b0, b1;
				frag(cs, 32 * j + 8 * c + 4 * e, b0, b1);
#pragma unroll
				for (int mt = 0; mt < MT; mt++) {
					qm_mma(cl[mt][cs], lo[mt][0][0], lo[mt][1][0], lo[mt][0][1], lo[mt][1][1], b0, b1);
					qm_mma(ch[mt][cs], hi[mt][0][0], hi[mt][1][0], hi[mt][0][1], hi[mt][1][1], b0, b1);
				}
			}
		}
#pragma unroll
		for (int mt = 0; mt < MT; mt++) {
			float d[2];
#pragma unroll
			for (int i = 0; i < 2; i++) {
				const uint4 &v = r[mt].d[i];
				unsigned w = (j >> 1) == 0 ? v.x : (j >> 1) == 1 ? v.y : (j >> 1) == 2 ? v.z : v.w;
				d[i] = q_h2f(w >> 16 * (j & 1));
			}
#pragma unroll
			for (int cs = 0; cs < NCS; cs++)
#pragma unroll
				for (int e = 0; e < 4; e++)
					acc[mt][cs][e] += d[e >> 1] * fmaf(16.0f, ch[mt][cs][e], cl[mt][cs][e]);
		}
	}
}

/*
** k_gemv_tc's contract (arguments, PRO GEMV_PRO_NONE or GEMV_PRO_RMSLATE with the norm stored when hs is
** given, EPI without GLU) plus GEMV_PRO_SWIGLU (x the gate, u the up), for a group whose members are all Q4_K, all Q6_K or
** all Q8_0 (QT; Q8_0's superblock of 8 blocks is its block of 256), bf16 activations, K a multiple of
** 256: a step of T <= 8·NCS / PIECES tokens. Block b takes
** the tiles b·MT .. b·MT + MT − 1 of 16 rows of the members' concatenated rows; its warps split K in
** blocks of 256 (warp w: w, w + nwarp, ...; UC blocks' loads asked for together); one shared-memory
** reduction ends it (the late norm's sums of squares with it). Each result rounded to A as the linear
** stores it (bias first), then the member's scale or the residual. grid ceil(ΣN / (16·MT)), block 32..256.
**
** Why: k_qgemv_fused's 8-rows-a-pass loop spent a conversion and T FMAs a weight on the CUDA cores, and
** steps above 8 tokens fell to a tiled GEMM (bench/NOTES.md entry 44). Here a block's cost hardly
** depends on T: the weights are read once and one mma
** serves 16 rows × 8 columns.
*/
template <typename A, int QT, typename NW, int PRO, bool HAS_NW, int EPI, int MT, int NCS, int UC>
__device__ void k_qgemv_tc(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1,
                           const unsigned char *w2, const unsigned char *w3, const A *b0, const A *b1, const A *b2,
                           const A *b3, const A *x, const A *u, const NW *nw, A *hs, const A *r, int T, int K, int N0,
                           int N1, int N2, int N3, float eps, float s0, float s1, float s2, float s3)
{
	static_assert(TcBf16<A>::yes, "bf16 activations (B is x's bits)");
	static_assert(QT == 8 || QT == 12 || QT == 14, "Q8_0, Q4_K or Q6_K");
	static_assert((EPI & GEMV_EPI_GLU) == 0, "no GLU epilogue");
	constexpr bool LATE = PRO == GEMV_PRO_RMSLATE;
	static_assert(PRO == GEMV_PRO_NONE || PRO == GEMV_PRO_SWIGLU || LATE, "no prologue, SwiGLU or the late norm");
	constexpr int PIECES = LATE && HAS_NW ? 2 : 1, NF = MT * NCS * 4;
	GLM_SH(float, red, [8][NF][32]);
	GLM_SH_AFTER(red, float, sq, [8][8 * NCS]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarp = blockDim.x >> 5, g = lane >> 2, c = lane & 3;
	int Ntot = N0 + N1 + N2 + N3, KB = K / 256;
	long long stride = q_stride<QT>(K);
	const unsigned char *row[MT][2];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++) { /* rows past the members read row 0; their results are not stored */
			int R = (blockIdx.x * MT + mt) * 16 + g + 8 * h;
			R = R < Ntot ? R : 0;
			int m = R < N0 ? 0 : R < N0 + N1 ? 1 : R < N0 + N1 + N2 ? 2 : 3;
			int n = R - (m > 0 ? N0 : 0) - (m > 1 ? N1 : 0) - (m > 2 ? N2 : 0);
			row[mt][h] = (m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3) + (long long)n * stride;
		}
	const A *xt[NCS], *ut[NCS];
	int piece[NCS];
#pragma unroll
	for (int cs = 0; cs < NCS; cs++) { /* the lane's B column g of set cs; tokens past T re-read T - 1 */
		int col = 8 * cs + g, t = col / PIECES;
		t = t < T ? t : T - 1;
		piece[cs] = col % PIECES;
		xt[cs] = x + (long long)t * K;
		ut[cs] = PRO == GEMV_PRO_SWIGLU ? u + (long long)t * K : u;
	}
	float acc[MT][NCS][4], ss[NCS];
#pragma unroll
	for (int mt = 0; mt < MT; mt++)
#pragma unroll
		for (int cs = 0; cs < NCS; cs++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[mt][cs][e] = 0.0f;
#pragma unroll
	for (int cs = 0; cs < NCS; cs++)
		ss[cs] = 0.0f;
	for (int k0 = warp; k0 < KB; k0 += nwarp * UC) {
		QtcW<QT> wv[UC][MT];
#pragma unroll
		for (int q = 0; q < UC; q++) { /* every load of the UC blocks first (a block past K re-reads k0) */
			int blk = k0 + q * nwarp;
			blk = blk < KB ? blk : k0;
#pragma unroll
			for (int mt = 0; mt < MT; mt++)
				qtc_load(wv[q][mt], row[mt][0], row[mt][1], blk, c);
		}
#pragma unroll
		for (int q = 0; q < UC; q++) {
			int blk = k0 + q * nwarp;
			if (blk >= KB) /* the same for the whole warp */
				break;
			long long kb = (long long)blk * 256;
			qtc_block<MT, NCS>(acc, wv[q], c, [&](int cs, int k, unsigned &x0, unsigned &x1) {
				qtc_frag<A, NW, PRO, HAS_NW>(x0, x1, ss[cs], xt[cs], ut[cs], nw, kb + k, piece[cs]);
			});
		}
	}
	tc_publish<MT, NCS, LATE>(red, sq, acc, ss, warp, lane);
	__syncthreads();
	if constexpr (LATE)
		if (hs) /* other nodes read the norm */
			tc_store_norm<A, NW, PIECES, 8 * NCS>(hs, x, HAS_NW ? nw : nullptr, sq, nwarp, T, K, eps);
	/* output (mt, cs, e, lane): C's row g + 8·(e / 2) of tile mt, column 2c + e % 2 of set cs */
	for (int i = threadIdx.x; i < NF * 32; i += blockDim.x) {
		int ln = i & 31, f = i >> 5, e = f & 3, mc = f >> 2, cs = mc % NCS, mt = mc / NCS;
		int col = cs * 8 + 2 * (ln & 3) + (e & 1), t = col / PIECES;
		if (t >= T || (PIECES == 2 && (e & 1)))
			continue;
		float s = 0.0f;
		for (int w = 0; w < nwarp; w++)
			s += PIECES == 2 ? red[w][f][ln] + red[w][f + 1][ln] : red[w][f][ln];
		if constexpr (LATE) {
			float qs = 0.0f;
			for (int w = 0; w < nwarp; w++)
				qs += sq[w][t * PIECES];
			s *= 1.0f / sqrtf(qs / (float)K + eps);
		}
		int R = (blockIdx.x * MT + mt) * 16 + (ln >> 2) + 8 * (e >> 1);
		if (R < Ntot)
			tc_store<A, EPI>(s, R, t, y0, y1, y2, y3, b0, b1, b2, b3, r, N0, N1, N2, N3, s0, s1, s2, s3);
	}
}

/*
** The one-token GEMV of a group of Q4_K or Q6_K members (k_qgemv_fused_mma's contract for PRO
** GEMV_PRO_NONE, GEMV_PRO_SWIGLU and GEMV_PRO_RMSLATE, and its EPI), as one stream of weights: a tile is
** 16 rows of one member (member m's ceil(N_m/16) tiles after member m − 1's), an item one 256-value block
** of a tile (16 rows × 144 or 224 bytes), and the Σ tiles · K/256 items in tile-major order are cut into
** gridDim.x · NWARP contiguous ranges of equal length (±1), one a warp. Each block stages x whole (K/256 ·
** 1152 bytes of hi/lo units, qm_stage) once, and each warp copies its items' bytes into its own ring of S
** slots in shared memory with cp.async, S − 1 items ahead of the one its mma reads (qm_block), across
** tile boundaries. A warp whose range holds a whole tile stores its rows (tc_store); a tile split
** between warps has each part's 16 sums written to part[(tile·maxseg + seg)·16 ..] (seg: the warp's
** index among the tile's, from the range cut, so the order is fixed), counted in cnt[tile] (a KA_ZERO
** region), and the warp that completes the count sums the parts in seg order, stores, and clears it.
** With RMSLATE every block has the sum of squares of the whole row, and block 0 stores the norm into hs.
** sm: dynamic shared memory of qsk_smem(QT, K, NWARP, S) bytes (ops/gemv_shape.h), 128-byte aligned.
** T must be 1. grid (see qsk_grid: gridDim.x · NWARP <= the items), block 32·NWARP. K a multiple of 256.
**
** Why: k_qgemv_fused_mma holds its ring of loads in registers (2 or 3 blocks a warp, 128 registers, 16
** warps an SM) and restarts it, with x staged again when K > 8192, for every group of 128 rows, so its
** launches read far less of the bandwidth than a plain read of the same bytes (bench/NOTES.md entry
** 46). Here
** the bytes in flight live in shared memory (S − 1 slots a warp), every warp streams from its first item
** to its last without a restart, and the grid is one wave.
*/
template <typename A, int QT, typename NW, int PRO, int EPI, int NWARP, int S>
__device__ void k_qgemv_sk(A *y0, A *y1, A *y2, A *y3, const unsigned char *w0, const unsigned char *w1,
                           const unsigned char *w2, const unsigned char *w3, const A *b0, const A *b1, const A *b2,
                           const A *b3, const A *x, const A *u, const NW *nw, A *hs, const A *r, int T, int K, int N0,
                           int N1, int N2, int N3, float eps, float s0, float s1, float s2, float s3, float *part,
                           int *cnt, int maxseg, unsigned char *sm)
{
	static_assert(QT == 12 || QT == 14, "Q4_K or Q6_K");
	static_assert(PRO == GEMV_PRO_NONE || PRO == GEMV_PRO_SWIGLU || PRO == GEMV_PRO_RMSLATE, "no whole-row norm");
	constexpr int BB = QT == 14 ? 224 : 144, PC = BB / 16, TB = 16 * BB, NCH = (16 * PC + 31) / 32;
	constexpr bool LATE = PRO == GEMV_PRO_RMSLATE;
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3;
	int KB = K / 256;
	uint4 *zu = (uint4 *)sm;
	float *xs16 = (float *)(sm + 512);
	uint4 *xu = (uint4 *)(sm + 512 + (K / 4 + 127) / 128 * 128);
	unsigned char *ring = (unsigned char *)xu + (long long)KB * 1152 + (long long)warp * S * TB;
	if (threadIdx.x < 32)
		zu[threadIdx.x] = make_uint4(0u, 0u, 0u, 0u);
	int nt0 = (N0 + 15) / 16, nt1 = (N1 + 15) / 16, nt2 = (N2 + 15) / 16, nt3 = (N3 + 15) / 16;
	int ntt = nt0 + nt1 + nt2 + nt3;
	long long I = (long long)ntt * KB, W = (long long)gridDim.x * NWARP, gw = (long long)blockIdx.x * NWARP + warp;
	if (I < W || T != 1)
		__trap(); /* one token; qsk_grid keeps a warp's range non-empty (the parts' seg order depends on it) */
	int i0 = (int)(I * gw / W), i1 = (int)(I * (gw + 1) / W), ni = i1 - i0;
	long long stride = q_stride<QT>(K);
	/* the warp that owns item i (its range holds i) */
	auto owner = [&](long long i) { return ((i + 1) * W - 1) / I; };
	/* tile t: its first row in its member, that member's rows and weights, and the tile's first row among
	** the concatenated members (tc_store's R) */
	auto tile = [&](int t, int &n0, int &Nm, const unsigned char *&w, int &R0) {
		int m = t < nt0 ? 0 : t < nt0 + nt1 ? 1 : t < nt0 + nt1 + nt2 ? 2 : 3;
		n0 = 16 * (t - (m > 0 ? nt0 : 0) - (m > 1 ? nt1 : 0) - (m > 2 ? nt2 : 0));
		Nm = m == 0 ? N0 : m == 1 ? N1 : m == 2 ? N2 : N3;
		w = m == 0 ? w0 : m == 1 ? w1 : m == 2 ? w2 : w3;
		R0 = n0 + (m > 0 ? N0 : 0) + (m > 1 ? N1 : 0) + (m > 2 ? N2 : 0);
	};
	/* the copy side: lane piece j = lane + 32q of an item is row j / PC's bytes 16·(j % PC) .., at 16j in
	** the slot; src[q] points at it in the block being copied */
	const unsigned char *src[NCH];
	int it = i0 / KB, ib = i0 % KB; /* the next item to copy: tile it, block ib */
	auto aim = [&]() { /* src at block ib of tile it's rows (past the member's last row: its last row) */
		int n0, Nm, R0;
		const unsigned char *w;
		tile(it < ntt ? it : ntt - 1, n0, Nm, w, R0);
#pragma unroll
		for (int q = 0; q < NCH; q++) {
			int j = lane + 32 * q, row = n0 + j / PC;
			src[q] = w + (long long)(row < Nm ? row : Nm - 1) * stride + 16 * (j % PC) + (long long)ib * BB;
		}
	};
	auto copy = [&](int slot) {
		unsigned char *dst = ring + slot * TB + 16 * lane;
#pragma unroll
		for (int q = 0; q < NCH; q++) {
			if (q + 1 < NCH || lane + 32 * q < 16 * PC)
				qs_cp16(dst + 512 * q, src[q]);
			src[q] += BB;
		}
		if (++ib == KB) {
			ib = 0, it++;
			aim();
		}
	};
	aim();
#pragma unroll
	for (int s = 0; s < S - 1; s++) {
		if (s < ni)
			copy(s);
		qs_commit(); /* empty groups too: the wait below counts groups */
	}
	float ssq = 0.0f;
	if (LATE)
		ssq = qm_stage_late_t<QT, A, NW>(xu, xs16, x, nw, 0, K);
	else
		qm_stage_t<QT, A, A, PRO == GEMV_PRO_SWIGLU>(xu, xs16, x, u, 0, K);
	float late_inv = LATE ? 1.0f / sqrtf(ssq / (float)K + eps) : 1.0f;
	if (LATE && hs && blockIdx.x == 0) /* other nodes read the norm: block 0 stores it */
		late_store_norm<A, NW>(hs, x, nw, K, late_inv);
	bool act = qm_act<QT>(lane);
	int boff = qm_boff<QT>(lane);
	int ct = i0 / KB, cb = i0 % KB, first = cb; /* the item the mma takes: tile ct, block cb */
	int pt[2], pn[2], np = 0; /* the split tiles met (the range's first and last) and their blocks done here */
	float acc[2] = {0.0f, 0.0f};
	for (int j = 0; j < ni; j++) {
		__syncwarp(); /* every lane has read slot (j − 1) % S, which the copy below refills */
		if (j + S - 1 < ni)
			copy((j + S - 1) % S);
		qs_commit();
		qs_wait<S - 1>(); /* this lane's copies of item j are done */
		__syncwarp();     /* and every lane's */
		QmRaw<QT> raw;
		qs_load(raw, ring + (j % S) * TB, g, c);
		const char *xp = act ? (const char *)xu + QmGeo<QT>::XB * cb + boff : (const char *)zu + boff;
		qm_block(acc, raw, xp, xs16 + QmGeo<QT>::SB * cb, c);
		if (++cb < KB && j + 1 < ni)
			continue;
		/* blocks [first, cb) of tile ct are done: its rows, or this warp's part of them */
		qm_lanesum(acc);
		int n0, Nm, R0;
		const unsigned char *w;
		tile(ct, n0, Nm, w, R0);
		if (first == 0 && cb == KB) {
			if (c == 0)
#pragma unroll
				for (int i = 0; i < 2; i++)
					if (n0 + g + 8 * i < Nm)
						tc_store<A, EPI>(acc[i] * late_inv, R0 + g + 8 * i, 0, y0, y1, y2, y3, b0, b1, b2, b3, r, N0,
						                 N1, N2, N3, s0, s1, s2, s3);
		} else { /* the range's first tile or its last: counted after the loop */
			long long seg = gw - owner((long long)ct * KB);
			if (seg >= maxseg)
				__trap(); /* qsk_grid's bound on the parts of a tile */
			float *pp = part + ((long long)ct * maxseg + seg) * 16;
			if (c == 0)
				pp[g] = acc[0], pp[g + 8] = acc[1];
			pt[np] = ct, pn[np++] = cb - first;
		}
		acc[0] = acc[1] = 0.0f;
		if (cb == KB)
			cb = 0, ct++;
		first = cb;
	}
	/* The split tiles: counted once the stream is over (a fence inside it would wait for the copies in
	** flight), the last part's warp summing them. */
	if (np == 0)
		return;
	__threadfence();
	__syncwarp();
	for (int p = 0; p < np; p++) {
		int t = pt[p], done = 0;
		if (lane == 0)
			done = atomicAdd(cnt + t, pn[p]) + pn[p] == KB;
		done = __shfl_sync(0xffffffffu, done, 0);
		if (!done)
			continue;
		__threadfence();
		int n0, Nm, R0;
		const unsigned char *w;
		tile(t, n0, Nm, w, R0);
		long long f0 = (long long)t * KB;
		int nseg = (int)(owner(f0 + KB - 1) - owner(f0)) + 1;
		if (lane < 16 && n0 + lane < Nm) {
			float s = 0.0f;
			for (int q = 0; q < nseg; q++)
				s += __ldcg(part + ((long long)t * maxseg + q) * 16 + lane);
			tc_store<A, EPI>(s * late_inv, R0 + lane, 0, y0, y1, y2, y3, b0, b1, b2, b3, r, N0, N1, N2, N3, s0, s1,
			                 s2, s3);
		}
		if (lane == 0)
			cnt[t] = 0; /* every part has counted: clear it for the next launch */
	}
}
