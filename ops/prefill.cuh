/*
** ops/prefill.cuh — the prefill kernels on the tensor cores: a bf16 GEMM for linears over many tokens and
** a causal attention over the cache in query tiles (the FlashAttention scheme: scores and softmax never
** leave the registers). Both use mma.sync m16n8k16 (qm_mma, ops/quant.cuh) with f32 accumulation, so
** they run on every target from sm_80 on, and the CPU stand-in of tests/simt runs them.
**
** Why here and not in kernels.cuh: the CUDA-core kernels (k_linear_gemm, k_attention) stay for f32 plans,
** whose contract (1e-4 of the CPU) a bf16 product cannot meet; a bf16 plan's activations and weights are
** bf16 already, so the tensor core's products are exact and only the order of the f32 sums differs.
*/

/* Four 8x8 matrices of 16-bit values from shared memory (ldmatrix .x4): lane l names the row l % 8 of
** matrix l / 8 (16 bytes, 16-byte aligned); register m of lane l receives matrix m's row l / 4, columns
** 2(l % 4) and 2(l % 4) + 1 (low half first). TRANS: the matrices transposed, so register m receives
** rows 2(l % 4) and 2(l % 4) + 1 of column l / 4. The CPU stand-in gathers the row addresses with
** shuffles and reads the elements. */
template <bool TRANS> __device__ __forceinline__ void pf_ldsm4(unsigned (&r)[4], const void *row)
{
#if defined(__CUDA_ARCH__) && !defined(GLM_SIMT)
	unsigned a = (unsigned)__cvta_generic_to_shared(row);
	if (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
		             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		             : "r"(a));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
		             : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
		             : "r"(a));
#else
	int lane = threadIdx.x & 31, i = lane >> 2, j = 2 * (lane & 3);
	unsigned long long me = (unsigned long long)(size_t)row;
	for (int m = 0; m < 4; m++) {
		unsigned short lo, hi;
		if (TRANS) {
			const unsigned short *p0 = (const unsigned short *)(size_t)__shfl_sync(0xffffffffu, me, 8 * m + j);
			const unsigned short *p1 = (const unsigned short *)(size_t)__shfl_sync(0xffffffffu, me, 8 * m + j + 1);
			lo = p0[i], hi = p1[i];
		} else {
			const unsigned short *p = (const unsigned short *)(size_t)__shfl_sync(0xffffffffu, me, 8 * m + i);
			lo = p[j], hi = p[j + 1];
		}
		r[m] = (unsigned)lo | (unsigned)hi << 16;
	}
#endif
}

/* A pair of floats as bf16 hi and lo parts (a in the low halves): hi = bf16(a), lo = bf16(a − hi), so
** hi + lo holds a to 16 bits of mantissa; the attention's probabilities go into the tensor core so. */
__device__ __forceinline__ void pf_split2(float a, float b, unsigned &hi, unsigned &lo)
{
	hi = qm_bf2(a, b);
	float ah = __uint_as_float(hi << 16), bh = __uint_as_float(hi & 0xffff0000u);
	lo = qm_bf2(a - ah, b - bh);
}

/* The next pass of a block over its 64 query rows (rpos, rseq per row; a served row's rseq is -1): the
** slot of the first row not yet served and the last key + 1 of that slot's rows, agreed through the
** shared pass_slot, pass_kn; slot -1 when every row is served. Every thread of the block calls it. */
__device__ __forceinline__ void pf_next_pass(const int *rpos, const int *rseq, int &pass_slot, int &pass_kn, int &slot,
                                             int &kn)
{
	__syncthreads();
	if (threadIdx.x == 0) {
		int s = -1, k = 0;
		for (int i = 0; i < 64; i++)
			if (rseq[i] >= 0 && s < 0)
				s = rseq[i];
		for (int i = 0; i < 64; i++)
			if (rseq[i] == s && rpos[i] + 1 > k)
				k = rpos[i] + 1;
		pass_slot = s, pass_kn = k;
	}
	__syncthreads();
	slot = pass_slot, kn = pass_kn;
}

/* The largest of an int over the 32 lanes of a warp. */
__device__ __forceinline__ int pf_warp_max(int v)
{
	for (int o = 1; o < 32; o <<= 1) {
		int u = __shfl_xor_sync(0xffffffffu, v, o);
		v = u > v ? u : v;
	}
	return v;
}

/* One key tile through the online softmax of a warp's rows g and g + 8 (lane (g, cc) holds their scores
** s[nt] for keys j0 + 8nt + 2cc, + 1: the mma's C layout): keys past a row's position (p0, p1; -1: a
** row not served) masked, the scores scaled, each row's running max m and sum l (this lane's share)
** moved on; s becomes the probabilities, and o, the rows' accumulators (NO of the mma's 8-column tiles),
** is rescaled to the new max. A row without a key yet keeps max -inf, factors 0 and its o untouched. */
template <int NT, int NO>
__device__ __forceinline__ void pf_softmax(float (&s)[NT][4], float (&o)[NO][4], int j0, int p0, int p1, float scale,
                                           float &m0, float &m1, float &l0, float &l1)
{
	int cc = threadIdx.x & 3;
	float x0 = neg_inf(), x1 = neg_inf();
#pragma unroll
	for (int nt = 0; nt < NT; nt++)
#pragma unroll
		for (int e = 0; e < 2; e++) {
			int j = j0 + 8 * nt + 2 * cc + e;
			s[nt][e] = j <= p0 ? s[nt][e] * scale : neg_inf();
			s[nt][2 + e] = j <= p1 ? s[nt][2 + e] * scale : neg_inf();
			x0 = fmaxf(x0, s[nt][e]), x1 = fmaxf(x1, s[nt][2 + e]);
		}
	/* the rows' new maxima over the four lanes that share a row */
	x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
	x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
	x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
	x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
	float n0 = fmaxf(m0, x0), n1 = fmaxf(m1, x1);
	float c0 = n0 == neg_inf() ? 1.0f : expf(m0 - n0), c1 = n1 == neg_inf() ? 1.0f : expf(m1 - n1);
	float b0 = n0 == neg_inf() ? 0.0f : n0, b1 = n1 == neg_inf() ? 0.0f : n1;
	l0 *= c0, l1 *= c1;
#pragma unroll
	for (int nt = 0; nt < NT; nt++) {
		s[nt][0] = expf(s[nt][0] - b0), s[nt][1] = expf(s[nt][1] - b0);
		s[nt][2] = expf(s[nt][2] - b1), s[nt][3] = expf(s[nt][3] - b1);
		l0 += s[nt][0] + s[nt][1], l1 += s[nt][2] + s[nt][3];
	}
	m0 = n0, m1 = n1;
#pragma unroll
	for (int i = 0; i < NO; i++)
		o[i][0] *= c0, o[i][1] *= c0, o[i][2] *= c1, o[i][3] *= c1;
}

/* o += p·v over a tile of 2·NT keys, 16 a step: the probability tiles 2kk and 2kk + 1 are the mma's A
** fragment; v is the tile's first key row at the output's first dim, rows LD apart in shared memory, read
** transposed by ldmatrix (keys 16kk.. / 16kk + 8.. at dims 16dp.., then at 16dp + 8..). HILO: p as bf16 hi
** and lo parts, two mma a product, so o carries no rounding of p (the latent attentions, whose time is
** their cache reads); else p rounded once to bf16, as FlashAttention feeds it (the prefill attentions,
** whose time is the tensor cores'; the sum l stays the unrounded p's, as there). */
template <bool HILO, int NT, int NO>
__device__ __forceinline__ void pf_pv(float (&o)[NO][4], const float (&s)[NT][4], const unsigned short *v, int LD)
{
	int lane = threadIdx.x & 31;
#pragma unroll
	for (int kk = 0; kk < NT / 2; kk++) {
		unsigned ph[4], pl[4] = {0u, 0u, 0u, 0u};
		if (HILO) {
			pf_split2(s[2 * kk][0], s[2 * kk][1], ph[0], pl[0]);
			pf_split2(s[2 * kk][2], s[2 * kk][3], ph[1], pl[1]);
			pf_split2(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[2], pl[2]);
			pf_split2(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[3], pl[3]);
		} else {
			ph[0] = qm_bf2(s[2 * kk][0], s[2 * kk][1]), ph[1] = qm_bf2(s[2 * kk][2], s[2 * kk][3]);
			ph[2] = qm_bf2(s[2 * kk + 1][0], s[2 * kk + 1][1]), ph[3] = qm_bf2(s[2 * kk + 1][2], s[2 * kk + 1][3]);
		}
#pragma unroll
		for (int dp = 0; dp < NO / 2; dp++) {
			unsigned b[4];
			pf_ldsm4<true>(b, &v[(16 * kk + (lane & 15)) * LD + 16 * dp + 8 * (lane >> 4)]);
			qm_mma(o[2 * dp], ph[0], ph[1], ph[2], ph[3], b[0], b[1]);
			qm_mma(o[2 * dp + 1], ph[0], ph[1], ph[2], ph[3], b[2], b[3]);
			if (HILO) {
				qm_mma(o[2 * dp], pl[0], pl[1], pl[2], pl[3], b[0], b[1]);
				qm_mma(o[2 * dp + 1], pl[0], pl[1], pl[2], pl[3], b[2], b[3]);
			}
		}
	}
}

/* The rows' outputs o / l as bf16 at y0 and y1 (this lane's columns of each 8-wide tile), for the rows
** this pass serves (p >= 0); l summed over the four lanes of a row first. */
template <int NO>
__device__ __forceinline__ void pf_store(bf16 *y0, bf16 *y1, const float (&o)[NO][4], float l0, float l1, int p0, int p1)
{
	int cc = threadIdx.x & 3;
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
	for (int i = 0; i < NO; i++) {
		int d = 8 * i + 2 * cc;
		if (p0 >= 0)
			*(unsigned *)(y0 + d) = qm_bf2(o[i][0] / l0, o[i][1] / l0);
		if (p1 >= 0)
			*(unsigned *)(y1 + d) = qm_bf2(o[i][2] / l1, o[i][3] / l1);
	}
}

/*
** Prefill GEMM on the tensor cores, bf16: y[T,N] = x[T,K]·w[N,K]ᵀ (+ bias[N]), the contract of
** k_linear_gemm with A = W = bf16; K a multiple of 8 (16-byte rows), x, w 16-byte aligned.
** grid (ceil(N/128), ceil(T/128)), block 256.
**
** A block computes a 128x128 tile of y, K in steps of 32 through shared memory, two stages: the next
** step's tiles are copied (cp.async) while the tensor cores work on this one. Warp w owns rows
** 64(w / 4).. and columns 32(w % 4)..: 4x4 mma tiles, 64 f32 accumulators a thread. Tile rows are 40
** bf16 (80 bytes), so the eight rows an ldmatrix phase reads fall in different banks. Rows past T or N
** and columns past K are staged as zeros.
*/
template <bool HAS_BIAS, bool WKN = false>
__device__ void pf_gemm_tile(bf16 *y, const bf16 *x, long long ldx, const bf16 *w, const bf16 *bias, int T, int K, int N,
                             int t0, int n0, int hw = 0);

template <bool HAS_BIAS>
__device__ void k_gemm_tc(bf16 *y, const bf16 *x, const bf16 *w, const bf16 *bias, int T, int K, int N)
{
	pf_gemm_tile<HAS_BIAS>(y, x, K, w, bias, T, K, N, blockIdx.y * 128, blockIdx.x * 128);
}

/* pf_gemm_tile's two stages of x and w tiles (4 · 128 · 40 bf16): one array whatever the instantiation, so
** a kernel calling two of them (k_mla_xkv<true>: keys k-major, values by rows) holds 40 KB, not 80. */
__device__ __forceinline__ unsigned short *pf_gemm_smem()
{
	__shared__ __align__(16) unsigned short sm[4 * 128 * 40];
	return sm;
}

/* k_gemm_tc's tile of y at rows t0.., columns n0.., x's rows ldx elements apart (a multiple of 8).
** WKN: w is stored k-major in blocks of hw columns (a multiple of 8): column n = b·hw + i, k at
** w[(b·K + k)·hw + i], as GGUF's split attn_k_b ([H, L, Dn]: per head L rows of Dn); its tile is staged
** as k rows of 128 columns and read by the transposing ldmatrix. */
template <bool HAS_BIAS, bool WKN>
__device__ void pf_gemm_tile(bf16 *y, const bf16 *x, long long ldx, const bf16 *w, const bf16 *bias, int T, int K, int N,
                             int t0, int n0, int hw)
{
	const int BK = 32, LD = 40, LDN = 136; /* WKN rows: 272 bytes, so an ldmatrix phase's 8 rows miss each other's banks */
	auto xs = reinterpret_cast<unsigned short (*)[128 * LD]>(pf_gemm_smem()); /* [2][128 · LD] */
	auto ws = xs + 2;                                                         /* [2][128 · LD]: 32 · LDN fits */
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
	float acc[4][4][4];
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				acc[i][j][e] = 0.0f;

	/* stage s <- the k step at k0: each thread copies two 16-byte pieces of each tile */
	auto stage = [&](int s, int k0) {
#pragma unroll
		for (int i = 0; i < 2; i++) {
			int e = tid + 256 * i, r = e >> 2, c = 8 * (e & 3), k = k0 + c;
			unsigned short *dx = &xs[s][r * LD + c];
			if (t0 + r < T && k < K)
				qs_cp16(dx, x + (long long)(t0 + r) * ldx + k);
			else
				*(uint4 *)dx = make_uint4(0, 0, 0, 0);
			/* the weight piece: row r at k (by rows), or k row e >> 4 at columns 8(e & 15).. (k-major) */
			int kr = WKN ? e >> 4 : k - k0, n = WKN ? n0 + 8 * (e & 15) : n0 + r;
			unsigned short *dw = WKN ? &ws[s][kr * LDN + 8 * (e & 15)] : &ws[s][r * LD + c];
			if (n < N && k0 + kr < K)
				qs_cp16(dw, WKN ? w + ((long long)(n / hw) * K + k0 + kr) * hw + n % hw
				                : w + (long long)n * K + k0 + kr);
			else
				*(uint4 *)dw = make_uint4(0, 0, 0, 0);
		}
		qs_commit();
	};

	int nk = (K + BK - 1) / BK;
	stage(0, 0);
	for (int ks = 0; ks < nk; ks++) {
		int s = ks & 1;
		if (ks + 1 < nk) {
			stage(s ^ 1, (ks + 1) * BK);
			qs_wait<1>();
		} else {
			qs_wait<0>();
		}
		__syncthreads();
#pragma unroll
		for (int kk = 0; kk < BK; kk += 16) {
			unsigned a[4][4], b[2][4];
#pragma unroll
			for (int mt = 0; mt < 4; mt++) /* rows 0-7 / 8-15 at k, then at k + 8 */
				pf_ldsm4<false>(a[mt], &xs[s][(64 * wm + 16 * mt + (lane & 15)) * LD + kk + 8 * (lane >> 4)]);
#pragma unroll
			for (int np = 0; np < 2; np++) /* columns 0-7 at k, k + 8, then columns 8-15 */
				if (WKN)
					pf_ldsm4<true>(b[np], &ws[s][(kk + (lane & 15)) * LDN + 32 * wn + 16 * np + 8 * (lane >> 4)]);
				else
					pf_ldsm4<false>(b[np], &ws[s][(32 * wn + 16 * np + (lane & 7) + 8 * (lane >> 4)) * LD + kk +
					                              8 * ((lane >> 3) & 1)]);
#pragma unroll
			for (int mt = 0; mt < 4; mt++)
#pragma unroll
				for (int nt = 0; nt < 4; nt++)
					qm_mma(acc[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[nt >> 1][2 * (nt & 1)],
					       b[nt >> 1][2 * (nt & 1) + 1]);
		}
		__syncthreads(); /* stage s is refilled by the step after next */
	}

	int g = lane >> 2, cc = lane & 3;
#pragma unroll
	for (int mt = 0; mt < 4; mt++)
#pragma unroll
		for (int h = 0; h < 2; h++) {
			int t = t0 + 64 * wm + 16 * mt + g + 8 * h;
			if (t >= T)
				continue;
#pragma unroll
			for (int nt = 0; nt < 4; nt++) {
				int n = n0 + 32 * wn + 8 * nt + 2 * cc;
#pragma unroll
				for (int e = 0; e < 2; e++)
					if (n + e < N) {
						float v = acc[mt][nt][2 * h + e];
						if (HAS_BIAS)
							v += to_f(bias[n + e]);
						y[(long long)t * N + n + e] = from_f<bf16>(v);
					}
			}
		}
}

/*
** Causal attention of a prefill on the tensor cores, bf16, head dims Dk = Dv = D (a multiple of 16, at
** most 128): the contract of k_attention (y[T, H·D]; q[T, H·D]; caches [slots·S, G·D]; token t reads
** rows 0..pos[t] of slot seq[t]), T the step's tokens. grid (H, ceil(T/64)), block 128.
**
** A block takes 64 query rows of head h, warp w rows 16w..16w+15 (q's fragments stay in registers), and
** walks the keys in tiles of 32, two tiles staged in shared memory (K and V as [key][D + 8]:
** conflict-free ldmatrix reads), so the next tile's copies (cp.async) fly while the tensor cores work on
** this one. Per tile a warp forms its 16x32 scores, masks keys past each row's position, and keeps per
** row a running max and sum (the online softmax); the probabilities, rounded once to bf16 as
** FlashAttention rounds them, go back into the tensor cores against V read transposed by ldmatrix.
** Block y takes query tile gridDim.y − 1 − y: the tiles with the most keys start first, so the last
** wave holds the short ones. Rows of one tile that belong to different sequence slots (a continuous
** batch) are served in one pass per slot, each pass over its own slot's keys; a tile of one sequence
** (every prefill) takes a single pass. Keys past the pass's last position are staged as zeros.
*/
template <int D>
__device__ void k_attn_tc(bf16 *y, const bf16 *q, const bf16 *kcache, const bf16 *vcache, const int *pos, int H,
                          int G, float scale, const int *seq, int S, int T)
{
	const int LD = D + 8, NK = 32, KD = D / 16;
	__shared__ __align__(16) unsigned short ks[2 * NK * LD], vs[2 * NK * LD];
	__shared__ int rpos[64], rseq[64], pass_slot, pass_kn;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, cc = lane & 3;
	int h = blockIdx.x, t0 = (gridDim.y - 1 - blockIdx.y) * 64, kvh = h / (H / G);
	long long KW = (long long)G * D;

	if (tid < 64) {
		int t = t0 + tid;
		rpos[tid] = t < T ? pos[t] : -1;
		rseq[tid] = t < T ? seq[t] : -1;
	}
	/* q's fragments: rows g and g + 8 of the warp's 16, dims 16kd + 2cc (+ 8) */
	int r0 = 16 * warp + g, r1 = r0 + 8;
	unsigned qa[KD][4];
	{
		const bf16 *q0 = q + ((long long)(t0 + r0) * H + h) * D, *q1 = q + ((long long)(t0 + r1) * H + h) * D;
		bool v0 = t0 + r0 < T, v1 = t0 + r1 < T;
#pragma unroll
		for (int kd = 0; kd < KD; kd++) {
			int d = 16 * kd + 2 * cc;
			qa[kd][0] = v0 ? *(const unsigned *)(q0 + d) : 0u;
			qa[kd][1] = v1 ? *(const unsigned *)(q1 + d) : 0u;
			qa[kd][2] = v0 ? *(const unsigned *)(q0 + d + 8) : 0u;
			qa[kd][3] = v1 ? *(const unsigned *)(q1 + d + 8) : 0u;
		}
	}
	for (;;) {
		int slot, kn;
		pf_next_pass(rpos, rseq, pass_slot, pass_kn, slot, kn);
		if (slot < 0)
			break;
		int p0 = rseq[r0] == slot ? rpos[r0] : -1, p1 = rseq[r1] == slot ? rpos[r1] : -1;
		int wmax = pf_warp_max(p0 > p1 ? p0 : p1);
		const bf16 *kb = kcache + (long long)slot * S * KW + (long long)kvh * D;
		const bf16 *vb = vcache + (long long)slot * S * KW + (long long)kvh * D;
		auto stage = [&](int b, int j0) {
			for (int e = tid; e < NK * D / 8; e += 128) {
				int r = e / (D / 8), c = 8 * (e % (D / 8));
				unsigned short *dk = &ks[(b * NK + r) * LD + c], *dv = &vs[(b * NK + r) * LD + c];
				if (j0 + r < kn) {
					qs_cp16(dk, kb + (long long)(j0 + r) * KW + c);
					qs_cp16(dv, vb + (long long)(j0 + r) * KW + c);
				} else {
					*(uint4 *)dk = make_uint4(0, 0, 0, 0);
					*(uint4 *)dv = make_uint4(0, 0, 0, 0);
				}
			}
			qs_commit();
		};

		float o[D / 8][4], m0 = neg_inf(), m1 = neg_inf(), l0 = 0.0f, l1 = 0.0f;
#pragma unroll
		for (int i = 0; i < D / 8; i++)
			o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

		stage(0, 0);
		for (int j0 = 0, b = 0; j0 < kn; j0 += NK, b ^= 1) {
			if (j0 + NK < kn) { /* the next tile's copies fly while this one is used */
				stage(b ^ 1, j0 + NK);
				qs_wait<1>();
			} else {
				qs_wait<0>();
			}
			__syncthreads();
			if (j0 <= wmax) { /* warp-uniform: a tile past every row of the warp is skipped */
				const unsigned short *kt = ks + b * NK * LD;
				float s[4][4];
#pragma unroll
				for (int nt = 0; nt < 4; nt++)
					s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
				for (int kd = 0; kd < KD; kd++) {
					unsigned bf[2][4];
#pragma unroll
					for (int np = 0; np < 2; np++)
						pf_ldsm4<false>(bf[np], &kt[(16 * np + (lane & 7) + 8 * (lane >> 4)) * LD + 16 * kd + 8 * ((lane >> 3) & 1)]);
#pragma unroll
					for (int nt = 0; nt < 4; nt++)
						qm_mma(s[nt], qa[kd][0], qa[kd][1], qa[kd][2], qa[kd][3], bf[nt >> 1][2 * (nt & 1)],
						       bf[nt >> 1][2 * (nt & 1) + 1]);
				}
				pf_softmax(s, o, j0, p0, p1, scale, m0, m1, l0, l1);
				pf_pv<false>(o, s, vs + b * NK * LD, LD);
			}
			__syncthreads(); /* buffer b is read: the next iteration's stage refills it */
		}
		pf_store(y + ((long long)(t0 + r0) * H + h) * D, y + ((long long)(t0 + r1) * H + h) * D, o, l0, l1, p0, p1);
		__syncthreads();
		if (tid < 64 && rseq[tid] == slot)
			rseq[tid] = -1; /* served */
	}
}

/*
** Latent (MLA) attention of a prefill on the tensor cores, bf16: the contract of k_mla without a
** selection (every token reads rows 0..pos[t] of its slot's cache [S, Dk]; the values are the first Dv
** entries of each row), Dk a multiple of 8 (GLM's 576: 512 latent + 64 rotary; the mma's 16-wide
** steps read 8 zero columns past an odd multiple of 8), Dv a multiple of DS
** (32, 64 or 128; 128 for GLM's 512), T the step's tokens. grid (ceil(T·H/64), Dv/DS), block 128,
** dynamic shared memory dsm of
** (64 + 32)·(Dk + 8)·2 bytes (110,592 for Dk 576).
**
** All heads read the same cache rows, so a block takes 64 rows of q ([T·H, Dk], token-major: a row a
** (token, head) pair; 3 tokens of GLM-4.7-Flash's 20 heads, one of GLM-5's 64), staged once in shared
** memory, and walks the keys in tiles of 32 rows (Dk wide, so the values come with them). Block y = z
** accumulates output dims DS·z.. DS·z + DS − 1 (64 f32 a thread at DS 128, as k_attn_tc's 128-dim
** heads): the scores are formed again for each of the Dv/DS slices. Scores, masks, the online softmax and
** the passes per sequence slot are k_attn_tc's; the probabilities go in as bf16 hi and lo parts (pf_pv).
*/
template <int DS>
__device__ void k_mla_tc(bf16 *y, const bf16 *q, const bf16 *cache, const int *pos, int H, int Dk, int Dv, float scale,
                         const int *seq, int S, int T, unsigned char *dsm)
{
	const int NK = 32, LD = Dk + 8;
	unsigned short *qs = (unsigned short *)dsm, *ks = qs + 64 * LD;
	__shared__ int rpos[64], rseq[64], pass_slot, pass_kn;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, cc = lane & 3, z = blockIdx.y;
	long long R = (long long)T * H, r0 = 64LL * blockIdx.x;
	if (tid < 64) {
		int t = r0 + tid < R ? (int)((r0 + tid) / H) : -1;
		rpos[tid] = t >= 0 ? pos[t] : -1;
		rseq[tid] = t >= 0 ? seq[t] : -1;
	}
	for (int e = tid; e < 64 * (Dk / 8); e += 128) {
		int r = e / (Dk / 8), c = 8 * (e % (Dk / 8));
		if (r0 + r < R)
			qs_cp16(&qs[r * LD + c], q + (r0 + r) * Dk + c);
		else
			*(uint4 *)&qs[r * LD + c] = make_uint4(0, 0, 0, 0);
	}
	qs_commit(); /* waited for with the first key tile */
	if (Dk % 16) /* the columns Dk..Dk + 7 that the last 16-wide step reads: zeros, never loaded over */
		for (int r = tid; r < 64 + NK; r += 128)
			*(uint4 *)&qs[r * LD + Dk] = make_uint4(0, 0, 0, 0);
	int lr0 = 16 * warp + g, lr1 = lr0 + 8;
	for (;;) {
		int slot, kn;
		pf_next_pass(rpos, rseq, pass_slot, pass_kn, slot, kn);
		if (slot < 0)
			break;
		int p0 = rseq[lr0] == slot ? rpos[lr0] : -1, p1 = rseq[lr1] == slot ? rpos[lr1] : -1;
		int wmax = pf_warp_max(p0 > p1 ? p0 : p1);
		const bf16 *cb = cache + (long long)slot * S * Dk;

		float o[DS / 8][4], m0 = neg_inf(), m1 = neg_inf(), l0 = 0.0f, l1 = 0.0f;
#pragma unroll
		for (int i = 0; i < DS / 8; i++)
			o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

		for (int j0 = 0; j0 < kn; j0 += NK) {
			__syncthreads(); /* the last tile's readers are done */
			for (int e = tid; e < NK * (Dk / 8); e += 128) {
				int r = e / (Dk / 8), c = 8 * (e % (Dk / 8));
				if (j0 + r < kn)
					qs_cp16(&ks[r * LD + c], cb + (long long)(j0 + r) * Dk + c);
				else
					*(uint4 *)&ks[r * LD + c] = make_uint4(0, 0, 0, 0);
			}
			qs_commit();
			qs_wait<0>();
			__syncthreads();
			if (j0 > wmax) /* no row of this warp reaches the tile (warp-uniform) */
				continue;

			float s[4][4];
#pragma unroll
			for (int nt = 0; nt < 4; nt++)
				s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
			for (int kd = 0; kd < (Dk + 15) / 16; kd++) {
				unsigned a[4], b[2][4];
				pf_ldsm4<false>(a, &qs[(16 * warp + (lane & 15)) * LD + 16 * kd + 8 * (lane >> 4)]);
#pragma unroll
				for (int np = 0; np < 2; np++)
					pf_ldsm4<false>(b[np], &ks[(16 * np + (lane & 7) + 8 * (lane >> 4)) * LD + 16 * kd + 8 * ((lane >> 3) & 1)]);
#pragma unroll
				for (int nt = 0; nt < 4; nt++)
					qm_mma(s[nt], a[0], a[1], a[2], a[3], b[nt >> 1][2 * (nt & 1)], b[nt >> 1][2 * (nt & 1) + 1]);
			}
			pf_softmax(s, o, j0, p0, p1, scale, m0, m1, l0, l1);
			pf_pv<true>(o, s, ks + DS * z, LD);
		}
		pf_store(y + (r0 + lr0) * Dv + DS * z, y + (r0 + lr1) * Dv + DS * z, o, l0, l1, p0, p1);
		__syncthreads();
		if (tid < 64 && rseq[tid] == slot)
			rseq[tid] = -1; /* served */
	}
}

/*
** MLA prefill in the expanded form, part 1: the keys' no-rope parts and the values of every cached row of
** one sequence, through kv_b: kx[j, h·Dn + d] = Σ_l wk[h·Dn + d, l] · c_j[l] and vx[j, h·Dv + e] =
** Σ_l wv[h·Dv + e, l] · c_j[l] for rows j < pos[T − 1] + 1 of slot seq[0] (c_j: the first L values of
** cache row j, rows Dk apart), bf16 as the GEMM of k_gemm_tc (pf_gemm_tile). The step's rows are one
** sequence at consecutive positions (the launch is LAUNCH_ONE_SEQ). wk is [H·Dn, L] (kv_b's row slots,
** Hugging Face's layout) or, WKT, [H, L, Dn] (GGUF's split attn_k_b); wv [H·Dv, L] in both.
** grid (ceil(max(H·Dn, H·Dv)/128), ceil(S/128), 2: keys, values), block 256; tiles past the sequence's
** rows exit at once.
**
** Why expand: the absorbed attention (k_mla_tc) forms every score over the Dk-wide latent (576 for GLM)
** and sums values Dv = 512 wide, again for each 128-wide output slice; expanded, a score is Dn + Dr wide
** (256 for GLM-4.7-Flash, 192 for DeepSeek-V3/GLM-5) and a value Dv_head (256 / 128). The expansion costs
** per cached row what one query row's attention saves over about 50 rows, so it pays from a prompt chunk
** of 64 rows on (MLA_X_TMIN, emit_cuda.c).
*/
template <bool WKT>
__device__ void k_mla_xkv(bf16 *kx, bf16 *vx, const bf16 *cache, const bf16 *wk, const bf16 *wv, const int *pos, int H,
                          int Dn, int Dv, int L, int Dk, const int *seq, int S, int T)
{
	int kn = pos[T - 1] + 1, t0 = blockIdx.y * 128, n0 = blockIdx.x * 128, z = blockIdx.z;
	int N = z ? H * Dv : H * Dn;
	const bf16 *c = cache + (long long)seq[0] * S * Dk;
	if (t0 >= kn || n0 >= N)
		return;
	if (WKT && !z)
		pf_gemm_tile<false, true>(kx, c, Dk, wk, nullptr, kn, L, N, t0, n0, Dn);
	else
		pf_gemm_tile<false>(z ? vx : kx, c, Dk, z ? wv : wk, nullptr, kn, L, N, t0, n0);
}

/*
** MLA prefill in the expanded form, part 2: causal attention of one sequence's chunk over its expanded
** rows, bf16 on the tensor cores. Query row t, head h: its no-rope part from q3 [T, H, Dn + Dr] (the
** projected query, before the split), its rotated part from qr [T, H, Dr]; key row j: kx[j, h] (Dn) then the
** cache row's rotated key (Dr values at L); value row j: vx[j, h] (Dv). y [T, H, Dv] is the value absorb's
** output ([T, H·Dv], what the output projection reads). DK = Dn + Dr rounded up to 16 (the padding is
** zeros in q and k), at most 256; block z keeps output dims DS·z.. (DS a multiple of 16). grid (H,
** ceil(T/64), Dv/DS), block 128, dynamic shared memory (64 + 2·32)·(DK + 8)·2 + 2·32·(DS + 8)·2 bytes.
**
** The scheme is k_attn_tc's with k_mla_tc's fragments: a block takes 64 query rows of one head (staged in
** shared memory), warp w rows 16w.., and walks the keys in tiles of 32, two tiles staged (cp.async) so
** the next one's copies fly while the tensor cores work on this one; the online softmax, the probabilities
** rounded once to bf16 and the masks past each row's position are pf_softmax's and pf_pv's; the query
** tiles with the most keys start first, as in k_attn_tc.
*/
template <int DK, int DS>
__device__ void k_mla_xattn(bf16 *y, const bf16 *q3, const bf16 *qr, const bf16 *kx, const bf16 *vx, const bf16 *cache,
                            const int *pos, int H, int Dn, int Dr, int Dv, int L, int Dk, float scale, const int *seq,
                            int S, int T, unsigned char *dsm)
{
	const int NK = 32, LQ = DK + 8, LV = DS + 8, DQ = Dn + Dr;
	unsigned short *qs = (unsigned short *)dsm, *kb = qs + 64 * LQ, *vb = kb + 2 * NK * LQ;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2;
	int h = blockIdx.x, t0 = (gridDim.y - 1 - blockIdx.y) * 64, dv0 = DS * blockIdx.z; /* longest rows first */
	int tl = t0 + 63 < T ? t0 + 63 : T - 1, kend = pos[tl] + 1; /* the block's last row sees the most keys */
	const bf16 *cb = cache + (long long)seq[0] * S * Dk;
	for (int e = tid; e < 64 * (DK / 8); e += 128) {
		int r = e / (DK / 8), c = 8 * (e % (DK / 8)), t = t0 + r;
		unsigned short *d = &qs[r * LQ + c];
		if (t < T && c < Dn)
			qs_cp16(d, q3 + ((long long)t * H + h) * DQ + c);
		else if (t < T && c < DQ)
			qs_cp16(d, qr + ((long long)t * H + h) * Dr + c - Dn);
		else
			*(uint4 *)d = make_uint4(0, 0, 0, 0);
	}
	qs_commit(); /* waited for with the first key tile */
	auto stage = [&](int b, int j0) {
		unsigned short *ks = kb + b * NK * LQ, *vs = vb + b * NK * LV;
		for (int e = tid; e < NK * (DK / 8); e += 128) {
			int r = e / (DK / 8), c = 8 * (e % (DK / 8)), j = j0 + r;
			unsigned short *d = &ks[r * LQ + c];
			if (j < kend && c < Dn)
				qs_cp16(d, kx + ((long long)j * H + h) * Dn + c);
			else if (j < kend && c < DQ)
				qs_cp16(d, cb + (long long)j * Dk + L + c - Dn);
			else
				*(uint4 *)d = make_uint4(0, 0, 0, 0);
		}
		for (int e = tid; e < NK * (DS / 8); e += 128) {
			int r = e / (DS / 8), c = 8 * (e % (DS / 8)), j = j0 + r;
			unsigned short *d = &vs[r * LV + c];
			if (j < kend)
				qs_cp16(d, vx + ((long long)j * H + h) * Dv + dv0 + c);
			else
				*(uint4 *)d = make_uint4(0, 0, 0, 0);
		}
		qs_commit();
	};
	int lr0 = 16 * warp + g, lr1 = lr0 + 8;
	int p0 = t0 + lr0 < T ? pos[t0 + lr0] : -1, p1 = t0 + lr1 < T ? pos[t0 + lr1] : -1;
	int wmax = pf_warp_max(p0 > p1 ? p0 : p1);

	float o[DS / 8][4], m0 = neg_inf(), m1 = neg_inf(), l0 = 0.0f, l1 = 0.0f;
#pragma unroll
	for (int i = 0; i < DS / 8; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
	stage(0, 0);
	for (int j0 = 0, b = 0; j0 < kend; j0 += NK, b ^= 1) {
		if (j0 + NK < kend) { /* the next tile's copies fly while this one is used */
			stage(b ^ 1, j0 + NK);
			qs_wait<1>();
		} else {
			qs_wait<0>();
		}
		__syncthreads();
		if (j0 <= wmax) { /* warp-uniform: a tile past every row of the warp is skipped */
			const unsigned short *ks = kb + b * NK * LQ;
			float s[4][4];
#pragma unroll
			for (int nt = 0; nt < 4; nt++)
				s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
			for (int kd = 0; kd < DK / 16; kd++) {
				unsigned a[4], bf[2][4];
				pf_ldsm4<false>(a, &qs[(16 * warp + (lane & 15)) * LQ + 16 * kd + 8 * (lane >> 4)]);
#pragma unroll
				for (int np = 0; np < 2; np++)
					pf_ldsm4<false>(bf[np], &ks[(16 * np + (lane & 7) + 8 * (lane >> 4)) * LQ + 16 * kd + 8 * ((lane >> 3) & 1)]);
#pragma unroll
				for (int nt = 0; nt < 4; nt++)
					qm_mma(s[nt], a[0], a[1], a[2], a[3], bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
			}
			pf_softmax(s, o, j0, p0, p1, scale, m0, m1, l0, l1);
			pf_pv<false>(o, s, vb + b * NK * LV, LV);
		}
		__syncthreads(); /* buffer b is read: the next iteration's stage refills it */
	}
	qs_wait<0>();
	pf_store(y + ((long long)(t0 + lr0) * H + h) * Dv + dv0, y + ((long long)(t0 + lr1) * H + h) * Dv + dv0, o, l0, l1,
	         p0, p1);
}

/*
** DSA lightning-indexer scores of a prefill step on the tensor cores, bf16: k_indexer_scores' contract
** (score[t·total + s] = Σ_h w[t,h] · relu(scale · q[t, h·D : +D]·kcache[s, :D]) for s <= pos[t], else −inf;
** token t reads the key rows of slot seq[t]), D a multiple of 16, at most 256. grid (ceil(total/64),
** ceil(T/64)), block 128, dynamic shared memory (64 + 2·64)·(D + 8)·2 bytes (52,224 for GLM-5's 128).
**
** A block takes 64 query rows and 64 key rows: the key tile is staged once, then each head's 64×D query
** tile in turn (two staged: cp.async brings head h + 1's while the tensor cores take head h). Warp w
** forms the scores of its rows 16w.. against the 64 keys for head h in f32 (the mma's C layout, k_attn_tc's
** fragments), and adds w[t,h]·relu(scale·score) into its accumulators: every head's dot product is exact
** bf16 products summed in f32 as k_indexer_scores sums them, in another order (a score may differ from it
** and from ref_indexer's double sums in its last bits, so the top-k may take another of two nearly equal
** rows). Rows of the block that belong to different sequences are served as k_attn_tc serves them: the
** key tile is the slot of each pass's rows. A key tile past every row's position writes −inf at once.
*/
template <int D>
__device__ void k_indexer_scores_tc(float *score, const bf16 *q, const bf16 *w, const bf16 *kcache, const int *pos, int H,
                                    int total, float scale, const int *seq, int S, int T, unsigned char *dsm)
{
	const int LD = D + 8, KD = D / 16;
	unsigned short *ks = (unsigned short *)dsm, *qb = ks + 64 * LD;
	__shared__ int rpos[64], rseq[64], pass_slot, pass_kn;
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, cc = lane & 3;
	int s0 = blockIdx.x * 64, t0 = blockIdx.y * 64;
	if (tid < 64) {
		int t = t0 + tid;
		rpos[tid] = t < T ? pos[t] : -1;
		rseq[tid] = t < T ? seq[t] : -1;
	}
	int r0 = 16 * warp + g, r1 = r0 + 8;
	auto store = [&](const float (&acc)[8][4], int p0, int p1) { /* this pass's rows (p >= 0) */
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
#pragma unroll
			for (int e = 0; e < 4; e++) {
				int r = e < 2 ? r0 : r1, p = e < 2 ? p0 : p1, s = s0 + 8 * nt + 2 * cc + (e & 1);
				if (t0 + r < T && s < total && p >= 0)
					score[(long long)(t0 + r) * total + s] = s <= p ? acc[nt][e] : neg_inf();
			}
	};
	for (;;) {
		int slot, kn;
		pf_next_pass(rpos, rseq, pass_slot, pass_kn, slot, kn);
		if (slot < 0)
			break;
		int p0 = rseq[r0] == slot ? rpos[r0] : -1, p1 = rseq[r1] == slot ? rpos[r1] : -1;
		float acc[8][4];
#pragma unroll
		for (int nt = 0; nt < 8; nt++)
			acc[nt][0] = acc[nt][1] = acc[nt][2] = acc[nt][3] = 0.0f;
		if (s0 >= kn) { /* block-uniform: no row of this pass sees these keys */
			store(acc, p0, p1);
		} else {
			const bf16 *kb = kcache + (long long)slot * S * D;
			for (int e = tid; e < 64 * (D / 8); e += 128) {
				int r = e / (D / 8), c = 8 * (e % (D / 8));
				if (s0 + r < kn)
					qs_cp16(&ks[r * LD + c], kb + (long long)(s0 + r) * D + c);
				else
					*(uint4 *)&ks[r * LD + c] = make_uint4(0, 0, 0, 0);
			}
			auto stage = [&](int b, int h) { /* head h's query rows of this pass (others zero) */
				unsigned short *qs = qb + b * 64 * LD;
				for (int e = tid; e < 64 * (D / 8); e += 128) {
					int r = e / (D / 8), c = 8 * (e % (D / 8));
					if (rseq[r] == slot)
						qs_cp16(&qs[r * LD + c], q + ((long long)(t0 + r) * H + h) * D + c);
					else
						*(uint4 *)&qs[r * LD + c] = make_uint4(0, 0, 0, 0);
				}
				qs_commit();
			};
			stage(0, 0); /* one group with the key tile */
			int wmax = pf_warp_max(p0 > p1 ? p0 : p1);
			for (int h = 0, b = 0; h < H; h++, b ^= 1) {
				if (h + 1 < H) {
					stage(b ^ 1, h + 1);
					qs_wait<1>();
				} else {
					qs_wait<0>();
				}
				__syncthreads();
				if (wmax >= s0) { /* warp-uniform: some row of this warp sees a key of the tile */
					const unsigned short *qs = qb + b * 64 * LD;
					float sc[8][4];
#pragma unroll
					for (int nt = 0; nt < 8; nt++)
						sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
#pragma unroll
					for (int kd = 0; kd < KD; kd++) {
						unsigned a[4], bf[4][4];
						pf_ldsm4<false>(a, &qs[(16 * warp + (lane & 15)) * LD + 16 * kd + 8 * (lane >> 4)]);
#pragma unroll
						for (int np = 0; np < 4; np++)
							pf_ldsm4<false>(bf[np], &ks[(16 * np + (lane & 7) + 8 * (lane >> 4)) * LD + 16 * kd +
							                            8 * ((lane >> 3) & 1)]);
#pragma unroll
						for (int nt = 0; nt < 8; nt++)
							qm_mma(sc[nt], a[0], a[1], a[2], a[3], bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
					}
					float w0 = p0 >= 0 ? to_f(w[(long long)(t0 + r0) * H + h]) : 0.0f;
					float w1 = p1 >= 0 ? to_f(w[(long long)(t0 + r1) * H + h]) : 0.0f;
#pragma unroll
					for (int nt = 0; nt < 8; nt++) {
						float d0 = sc[nt][0] * scale, d1 = sc[nt][1] * scale, d2 = sc[nt][2] * scale, d3 = sc[nt][3] * scale;
						acc[nt][0] += w0 * (d0 > 0.0f ? d0 : 0.0f), acc[nt][1] += w0 * (d1 > 0.0f ? d1 : 0.0f);
						acc[nt][2] += w1 * (d2 > 0.0f ? d2 : 0.0f), acc[nt][3] += w1 * (d3 > 0.0f ? d3 : 0.0f);
					}
				}
				__syncthreads(); /* buffer b is read: the next head's stage refills it */
			}
			store(acc, p0, p1);
		}
		__syncthreads();
		if (tid < 64 && rseq[tid] == slot)
			rseq[tid] = -1; /* served */
	}
}

/*
** Sparse (DSA) latent attention of a prefill on the tensor cores, bf16: the contract of k_mla with a
** selection (token t reads the cache rows sel[t·nsel + j], j < nsel, of slot seq[t] that are >= 0 and
** <= pos[t]; entries are taken as listed, so they must be distinct, as the indexer's top-k is; with
** vfirst the visible entries come first, as k_indexer_select writes them, and only the first
** min(nsel, pos[t] + 1) are read). Dk a multiple of 8, Dv a multiple of DS·NZ (DS 32, 64 or 128; NZ 1, 2
** or 4), Dv <= Dk; RG (1..4) groups of 16 head rows a block. grid (T, Dv/(DS·NZ), ceil(H/(16·RG))),
** block 32·RG·NZ, dynamic shared memory dsm of (16·RG + 2·32)·(Dk + 8)·2 bytes (149,504 for GLM-5's
** Dk 576 at RG 4; 93,440 at RG 1, tp 8's 8 heads), and RG·2,304 + 264 bytes static. With no visible row y is
** 0/0 = NaN, as k_mla's.
**
** Why a block per token: every token has its own selection, so its key tiles serve only its heads; the
** H heads of one token (GLM-5: 64) are the mma's rows, so each gathered row is read once for all of them.
** Warp w takes head rows 16(w % RG).. of block z's 16·RG and output dims DS·(NZ·y + w / RG)..: the NZ warps of
** a row group each form the scores of 32/NZ of a tile's keys and exchange them through shared memory,
** so a block of NZ slices forms each score once (k_mla_tc forms them again per slice: GLM-5's Dv 512
** is 4 slices of 128). Head rows past H are zeros and not stored (a warp without a head skips the
** arithmetic). The candidates go in tiles of 32: their cache rows (or -1) are listed in shared memory,
** then copied (cp.async) by index into one of two key tiles while the tensor cores work on the other, an
** invisible candidate staged as zeros and its score masked to -inf before the online softmax, so a
** poisoned or stale row cannot leak in; a tile without a visible row is skipped. The online softmax (each
** warp of a row group computes the same max and sum) and the probabilities as bf16 hi and lo parts are
** k_mla_tc's.
*/
template <int DS, int NZ, int RG, bool SPLIT>
__device__ void pf_mla_rows(bf16 *y, float *pacc, float *pml, const bf16 *q, const bf16 *cache, const int *pos,
                            const int *sel, int nsel, int vfirst, int H, int Dk, int Dv, float scale, const int *seq, int S,
                            unsigned char *dsm, int t, int zs, int hz, int x, int NS);

template <int DS, int NZ, int RG>
__device__ void k_dsa_tc(bf16 *y, const bf16 *q, const bf16 *cache, const int *pos, const int *sel, int nsel,
                         int vfirst, int H, int Dk, int Dv, float scale, const int *seq, int S, unsigned char *dsm)
{
	pf_mla_rows<DS, NZ, RG, false>(y, nullptr, nullptr, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale, seq, S, dsm,
	                               blockIdx.x, blockIdx.y, blockIdx.z, 0, 1);
}

/* The ranges a split step deals a token's n candidates to (k_mla_split_tc): 64 a range or more (two key
** tiles), at most ns. */
__host__ __device__ __forceinline__ int mla_split_tc_ranges(int n, int ns)
{
	int r = (n + 63) / 64;
	return r < 1 ? 1 : r > ns ? ns : r;
}

/*
** Split-context ("flash-decoding") latent attention of a decode step on the tensor cores, bf16: k_mla_split's
** contract without its merge (MERGE false: k_mla_vabsorb<.., true> merges), i.e. for token t = blockIdx.z
** the candidates (rows 0..pos[t], or the nsel entries of its sel row, the visible first with vfirst) dealt
** round-robin to nr = mla_split_tc_ranges(n, NS) ranges, NS = gridDim.x, and each range's softmax state
** written as k_mla_split writes it (pml: m and l per head, pacc: the Dv unnormalised sums; blocks x >= nr
** write m = -inf, l = 0). blockIdx.y = slice + (Dv/(DS·NZ))·head group. The tiles are k_dsa_tc's: a
** block's 16·RG heads are the mma's rows, so each cache row read serves all of them and is read by one
** block only (k_mla_split reads it once per group of HB heads, on the CUDA cores). grid (NS,
** Dv/(DS·NZ)·ceil(H/(16·RG)), T), block 32·RG·NZ, dynamic shared memory as k_dsa_tc's.
*/
template <int DS, int NZ, int RG>
__device__ void k_mla_split_tc(float *pacc, float *pml, const bf16 *q, const bf16 *cache, const int *pos, const int *sel,
                               int nsel, int vfirst, int H, int Dk, int Dv, float scale, const int *seq, int S,
                               unsigned char *dsm)
{
	int nz = Dv / (DS * NZ);
	pf_mla_rows<DS, NZ, RG, true>(nullptr, pacc, pml, q, cache, pos, sel, nsel, vfirst, H, Dk, Dv, scale, seq, S, dsm,
	                              blockIdx.z, blockIdx.y % nz, blockIdx.y / nz, blockIdx.x, gridDim.x);
}

/* The body of k_dsa_tc (one block takes all of token t's candidates, SPLIT false: x 0 of NS 1) and of
** k_mla_split_tc (range x of NS; SPLIT: the range's softmax state out, not y). zs: the output slice group,
** hz: the head group. */
template <int DS, int NZ, int RG, bool SPLIT>
__device__ void pf_mla_rows(bf16 *y, float *pacc, float *pml, const bf16 *q, const bf16 *cache, const int *pos,
                            const int *sel, int nsel, int vfirst, int H, int Dk, int Dv, float scale, const int *seq, int S,
                            unsigned char *dsm, int t, int zs, int hz, int x, int NS)
{
	const int NK = 32, KW = NK / NZ, NTW = KW / 8, LD = Dk + 8, SL = NK + 4, BIG = 1 << 30;
	const int R = 16 * RG, NTH = 32 * RG * NZ; /* head rows, threads */
	unsigned short *qs = (unsigned short *)dsm, *kb0 = qs + R * LD;
	__shared__ float sc[R * SL]; /* the tile's scores, [head row][key] */
	__shared__ int krow[2][NK], kany[2];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, cc = lane & 3;
	int rg = warp % RG, zw = warp / RG, dv0 = DS * (NZ * zs + zw);
	int h0 = R * hz, p = pos[t];
	int nh = H - h0 < R ? H - h0 : R; /* this block's heads */
	/* the candidates: rows 0..p, or the selection's (its visible first with vfirst) */
	int n = !sel ? p + 1 : vfirst && nsel > p + 1 ? p + 1 : nsel;
	int nr = SPLIT ? mla_split_tc_ranges(n, NS) : 1, cnt = n > x ? (n - x + nr - 1) / nr : 0;
	const int *st = sel ? sel + (long long)t * nsel : nullptr;
	if (SPLIT && x >= nr) { /* block-uniform: an empty state for the merge that reads all NS */
		if (zs == 0 && tid < nh) {
			float *ml = pml + (((long long)t * NS + x) * H + h0 + tid) * 2;
			ml[0] = neg_inf(), ml[1] = 0.0f;
		}
		return;
	}
	const bf16 *cb = cache + (long long)seq[t] * S * Dk, *qt = q + ((long long)t * H + h0) * Dk;
	for (int e = tid; e < R * (Dk / 8); e += NTH) {
		int r = e / (Dk / 8), c = 8 * (e % (Dk / 8));
		if (r < nh)
			qs_cp16(&qs[r * LD + c], qt + (long long)r * Dk + c);
		else
			*(uint4 *)&qs[r * LD + c] = make_uint4(0, 0, 0, 0);
	}
	qs_commit(); /* waited for with the first key tile */
	if (Dk % 16) /* the columns Dk..Dk + 7 that the last 16-wide step reads: zeros, never loaded over */
		for (int r = tid; r < R + 2 * NK; r += NTH)
			*(uint4 *)&qs[r * LD + Dk] = make_uint4(0, 0, 0, 0);
	int lr0 = 16 * rg + g, lr1 = lr0 + 8;
	/* pf_softmax's causal mask is not used (keys are masked here): a head row passes "every key", a
	** padding row "none" */
	int p0 = lr0 < nh ? BIG : -1, p1 = lr1 < nh ? BIG : -1;
	bool busy = 16 * rg < nh; /* warp-uniform */

	float o[DS / 8][4], m0 = neg_inf(), m1 = neg_inf(), l0 = 0.0f, l1 = 0.0f;
#pragma unroll
	for (int i = 0; i < DS / 8; i++)
		o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;

	/* tile i's candidates j0.. into buffer b: warp 0 lists their cache rows (-1: not visible), then
	** every thread copies its pieces of the listed rows; one cp.async group */
	auto stage = [&](int b, int j0) {
		if (warp == 0) {
			int s = -1;
			if (j0 + lane < cnt) {
				int j = x + (j0 + lane) * nr;
				s = st ? st[j] : j;
				s = s >= 0 && s <= p ? s : -1;
			}
			krow[b][lane] = s;
			s = pf_warp_max(s);
			if (lane == 0)
				kany[b] = s >= 0;
		}
		__syncthreads();
		unsigned short *ks = kb0 + b * NK * LD;
		for (int e = tid; e < NK * (Dk / 8); e += NTH) {
			int r = e / (Dk / 8), c = 8 * (e % (Dk / 8)), s = krow[b][r];
			if (s >= 0)
				qs_cp16(&ks[r * LD + c], cb + (long long)s * Dk + c);
			else
				*(uint4 *)&ks[r * LD + c] = make_uint4(0, 0, 0, 0);
		}
		qs_commit();
	};
	if (cnt > 0)
		stage(0, 0);
	for (int j0 = 0, b = 0; j0 < cnt; j0 += NK, b ^= 1) {
		if (j0 + NK < cnt) { /* the next tile's copies fly while this one is used */
			stage(b ^ 1, j0 + NK);
			qs_wait<1>();
		} else {
			qs_wait<0>();
		}
		__syncthreads();
		const unsigned short *ks = kb0 + b * NK * LD;
		const int *kr = krow[b];
		if (kany[b]) { /* block-uniform: a tile without a visible row is skipped */
			if (busy) { /* this warp's share of the scores: keys KW·zw.. */
				float s[NTW][4];
#pragma unroll
				for (int nt = 0; nt < NTW; nt++)
					s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
				const unsigned short *kw = ks + KW * zw * LD;
				for (int kd = 0; kd < (Dk + 15) / 16; kd++) {
					unsigned a[4], bf[(NTW + 1) / 2][4];
					pf_ldsm4<false>(a, &qs[(16 * rg + (lane & 15)) * LD + 16 * kd + 8 * (lane >> 4)]);
#pragma unroll
					for (int np = 0; np < (NTW + 1) / 2; np++) /* one 8-key tile: its matrices read twice */
						pf_ldsm4<false>(bf[np], &kw[(16 * np + (lane & 7) + (NTW > 1 ? 8 * (lane >> 4) : 0)) * LD +
						                            16 * kd + 8 * ((lane >> 3) & 1)]);
#pragma unroll
					for (int nt = 0; nt < NTW; nt++)
						qm_mma(s[nt], a[0], a[1], a[2], a[3], bf[nt >> 1][2 * (nt & 1)], bf[nt >> 1][2 * (nt & 1) + 1]);
				}
#pragma unroll
				for (int nt = 0; nt < NTW; nt++) {
					int j = KW * zw + 8 * nt + 2 * cc;
					sc[lr0 * SL + j] = s[nt][0], sc[lr0 * SL + j + 1] = s[nt][1];
					sc[lr1 * SL + j] = s[nt][2], sc[lr1 * SL + j + 1] = s[nt][3];
				}
			}
			__syncthreads();
			if (busy) {
				float s[4][4];
#pragma unroll
				for (int nt = 0; nt < 4; nt++) /* the row group's scores, the invisible candidates' masked */
#pragma unroll
					for (int e = 0; e < 2; e++) {
						int j = 8 * nt + 2 * cc + e;
						bool vis = kr[j] >= 0;
						s[nt][e] = vis ? sc[lr0 * SL + j] : neg_inf();
						s[nt][2 + e] = vis ? sc[lr1 * SL + j] : neg_inf();
					}
				pf_softmax(s, o, 0, p0, p1, scale, m0, m1, l0, l1);
				pf_pv<true>(o, s, ks + dv0, LD);
			}
		}
		__syncthreads(); /* buffer b and its list are read: the next iteration's stage refills them */
	}
	qs_wait<0>(); /* q's copy, when there was no tile */
	if (!SPLIT) {
		bf16 *yt = y + ((long long)t * H + h0) * Dv + dv0;
		pf_store(yt + (long long)lr0 * Dv, yt + (long long)lr1 * Dv, o, l0, l1, p0 < 0 ? -1 : 0, p1 < 0 ? -1 : 0);
		return;
	}
	/* the range's state: l summed over the four lanes of a row (m is the same on all four), the sums as they are */
	l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
	l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
	l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
	long long b = ((long long)t * NS + x) * H + h0;
#pragma unroll
	for (int hr = 0; hr < 2; hr++) {
		int r = hr ? lr1 : lr0;
		if (r >= nh)
			continue;
		float *acc = pacc + (b + r) * Dv + dv0;
#pragma unroll
		for (int i = 0; i < DS / 8; i++) {
			int d = 8 * i + 2 * cc;
			acc[d] = o[i][2 * hr], acc[d + 1] = o[i][2 * hr + 1];
		}
		if (zs == 0 && zw == 0 && cc == 0) {
			pml[(b + r) * 2] = hr ? m1 : m0;
			pml[(b + r) * 2 + 1] = hr ? l1 : l0;
		}
	}
}
