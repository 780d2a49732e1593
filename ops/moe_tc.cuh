/*
** ops/moe_tc.cuh — the routed experts of a prefill (or any step of many tokens) on the tensor cores, bf16:
** the contract of k_moe_up + k_moe_down (ops/kernels.cuh), computed as a grouped GEMM instead of one
** block per (f group, slot, token) that re-reads its expert's rows for every token.
**
** The four kernels share scratch regions meta, list, hid, ys (in that order in every launch).
**
**   k_moe_group    the step's T·k (token, slot) pairs grouped by expert: per expert its first row in a
**                  sorted list of slots (ascending slot = ascending token within an expert) and its
**                  first row tile (MOE_TC_BM rows a tile); slots whose expert is < 0 (or >= E) are left out.
**   k_moe_up_tc    per row tile and 64 columns f: gate and up of the tile's expert over the gathered
**                  x rows (one GEMM, the two weights' rows interleaved), SwiGLU on the f32 sums into hid
**                  (bf16, one row per sorted slot).
**   k_moe_down_tc  per row tile and 128 columns c: hid rows times the expert's down rows into ys (float,
**                  one row per slot t·k + j, unweighted).
**                  hid is the activation the down projection reads, so bf16 as in a bf16 model (transformers
**                  rounds act(gate)·up to the model's dtype too): one mma a product, where a float hid
**                  entering the tensor cores as bf16 hi and lo parts took two (k_moe_down, the small
**                  steps' CUDA-core path, keeps it float).
**   k_moe_sum_tc   y[t] = sum over j = 0..k-1 in order of w[t·k + j] · ys[t·k + j] (empty slots skipped),
**                  rounded once to the activation type: deterministic, no float atomics.
**
** Weights: bf16 (QT -1: staged by cp.async), or resident GGUF blocks of type QT (ops/quant.cuh: each value
** dequantized exactly by q_elem and rounded to bf16 into the tile, as the cuBLASLt prefill's dequantized
** weights are; their rows whole blocks at q_stride).
** Shapes: C and F multiples of 8 (16-byte rows for cp.async), E at most MOE_TC_EMAX; x, weights, hid
** and ys 16-byte aligned (glmc's buffers and scratch regions are 256-byte aligned). Rows past a tile's
** expert, columns past F or C and k steps past the row end are staged as zeros. glmc emits these for
** bf16 plans at steps of many tokens (compiler/passes/emit_cuda.c).
**
** Row tiles: expert e has ceil(n_e / 128) tiles; their count over all experts is at most ceil(T·k/128)
** + E. A block's linear index is y + gridDim.y·z and a block walks the tiles from its index in strides of
** the grid, so any grid computes the step; glmc gives every tile a block of its own (2E blocks in y below
** T·k = 128·E, (ceil(T·k/128), 2) from there), so that a decode step of a few dozen tokens, whose tiles
** hold one to a few rows of ~all E experts, streams its weights from every SM. A warp skips the mma work of
** its 16-row slices past the tile's rows (a tile of 2 rows costs one slice of the eight, not all).
*/

/* MOE_TC_BM, MOE_TC_EMAX, MOE_TC_UP_SMEM, MOE_TC_DOWN_SMEM: ops/gemv_shape.h (glmc emits the launches) */

/*
** Group the n = T·k slots by expert: meta[0..E] the first sorted row of each expert (meta[E] the rows
** in all), meta[E+1..2E+1] the first row tile of each (meta[2E+1] the tiles in all); list[r] the slot of
** sorted row r, ascending within an expert. grid E, block 256: block e counts every expert's slots
** (an int histogram in shared memory: exact in any order), takes its offsets from the counts before it,
** and writes its own slots in order, 256 at a time with a ballot prefix count. The last block writes
** the totals.
*/
__device__ void k_moe_group(int *meta, int *list, const int *idx, int n, int E)
{
	__shared__ int hist[MOE_TC_EMAX], wc[8], base[2];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, e = blockIdx.x;
	for (int i = tid; i < E; i += 256)
		hist[i] = 0;
	__syncthreads();
	for (int s = tid; s < n; s += 256) {
		int v = idx[s];
		if (v >= 0 && v < E)
			atomicAdd(&hist[v], 1);
	}
	__syncthreads();
	if (tid == 0) {
		int o = 0, tl = 0;
		for (int i = 0; i < e; i++)
			o += hist[i], tl += (hist[i] + MOE_TC_BM - 1) / MOE_TC_BM;
		meta[e] = o, meta[E + 1 + e] = tl;
		if (e == E - 1)
			meta[E] = o + hist[e], meta[2 * E + 1] = tl + (hist[e] + MOE_TC_BM - 1) / MOE_TC_BM;
		base[0] = o;
	}
	__syncthreads();
	if (hist[e] == 0) /* uniform per block */
		return;
	int run = base[0];
	for (int s0 = 0; s0 < n; s0 += 256) {
		int s = s0 + tid;
		bool f = s < n && idx[s] == e;
		unsigned b = __ballot_sync(0xffffffffu, f);
		if (lane == 0)
			wc[warp] = __popc(b);
		__syncthreads();
		int pre = 0, tot = 0;
		for (int w = 0; w < 8; w++)
			pre += w < warp ? wc[w] : 0, tot += wc[w];
		if (f)
			list[run + pre + __popc(b & ((1u << lane) - 1u))] = s;
		run += tot;
		__syncthreads(); /* wc is refilled next round */
	}
}

/* Row tile `tile`'s expert (returned) and its sorted rows r0..r1 - 1 (at most MOE_TC_BM): the expert is
** the last e with tile0[e] <= tile (an empty expert's start equals the next one's, so the last such e has
** rows; tile0 = meta + E + 1). tile < meta[2E + 1]. */
__device__ __forceinline__ int moe_tc_tile(const int *meta, int E, int tile, int &r0, int &r1)
{
	const int *tile0 = meta + E + 1;
	int lo = 0, hi = E;
	while (hi - lo > 1) {
		int mid = (lo + hi) >> 1;
		if (tile0[mid] <= tile)
			lo = mid;
		else
			hi = mid;
	}
	r0 = meta[lo] + MOE_TC_BM * (tile - tile0[lo]), r1 = meta[lo + 1];
	return lo;
}

/* A warp's 4x4 mma tiles of f32 sums, zeroed. */
__device__ __forceinline__ void moe_tc_zero(float (&acc)[4][4][4])
{
#pragma unroll
	for (int i = 0; i < 4; i++)
#pragma unroll
		for (int j = 0; j < 4; j++)
#pragma unroll
			for (int q = 0; q < 4; q++)
				acc[i][j][q] = 0.0f;
}

/* Weights k..k+7 of row `row` of a [rows, K] weight w into the bf16 tile at dst (16 bytes): bf16 rows (QT
** -1) by cp.async; rows of GGUF blocks of type QT dequantized exactly (q_elem) and rounded to bf16. */
template <int QT>
__device__ __forceinline__ void moe_tc_wpiece(unsigned short *dst, const void *w, long long row, int k, int K)
{
	if constexpr (QT < 0) {
		qs_cp16(dst, (const bf16 *)w + row * K + k);
	} else {
		const unsigned char *r = (const unsigned char *)w + row * q_stride<QT>(K);
		uint4 v;
		v.x = qm_bf2(q_elem<QT>(r, k), q_elem<QT>(r, k + 1));
		v.y = qm_bf2(q_elem<QT>(r, k + 2), q_elem<QT>(r, k + 3));
		v.z = qm_bf2(q_elem<QT>(r, k + 4), q_elem<QT>(r, k + 5));
		v.w = qm_bf2(q_elem<QT>(r, k + 6), q_elem<QT>(r, k + 7));
		*(uint4 *)dst = v;
	}
}

/* The k loop of the grouped GEMMs in NS shared-memory stages (k_gemm_tc's scheme, deeper): stage(s, k0)
** copies the k step at k0 into stage s (its cp.async copies committed as one group), body(s) works on
** stage s while the next NS - 1 steps' copies fly. Where no step is left to copy an empty group is
** committed, so waiting for all but the newest NS - 1 groups always means this step's copies have landed.
** The stage refilled at step ks is the one step ks - 1 worked on, released by its closing barrier. Every
** thread of the block calls it (it synchronises). A decode-sized step's tiles have a few rows and little
** mma work, so the copies in flight are what the GEMM's time is: two stages of 32 k values a block, two
** blocks an SM, keep about 16 KB of weights in flight an SM, short of what the memory needs. */
template <int NS, typename S, typename B> __device__ __forceinline__ void moe_tc_steps(int nk, int BK, S &&stage, B &&body)
{
#pragma unroll
	for (int i = 0; i < NS - 1; i++)
		if (i < nk)
			stage(i, i * BK);
		else
			qs_commit();
	for (int ks = 0; ks < nk; ks++) {
		int nx = ks + NS - 1;
		if (nx < nk)
			stage(nx % NS, nx * BK);
		else
			qs_commit();
		qs_wait<NS - 1>();
		__syncthreads();
		body(ks % NS);
		__syncthreads(); /* stage ks % NS is refilled by the next step */
	}
}

/*
** Routed experts' first half for the grouped rows: hid[r·F + f] = bf16(silu(g)·u) for sorted row r (slot
** list[r], token list[r] / k, expert e), g = gate[e, f, :]·x[t], u = up[e, f, :]·x[t] as f32 sums of
** exact bf16 products; silu as ref_moe_ffn (g / (1 + expf(-g))), the product rounded once. grid
** (ceil(F/64), row blocks as the file's head says), block 256.
** A tile is 128 rows by 64 f, C in steps of 32 through NS shared-memory stages (cp.async of the next steps
** while the tensor cores work on this one). The 128 weight rows staged per step are
** gate and up interleaved by 16: row 32w + i is gate f = 16w + i and row 32w + 16 + i up f = 16w + i
** (i < 16), so warp (wm, wn) holds both sums of its rows at f 16wn.. 16wn + 15 and the epilogue needs no
** exchange: its mma tiles 0, 1 are gate, 2, 3 up of the same f. NS stages (moe_tc_steps) in dynamic
** shared memory dsm, MOE_TC_UP_SMEM(NS) bytes.
*/
template <typename W, int QG, int QU, int NS>
__device__ void k_moe_up_tc(const int *meta, const int *list, bf16 *hid, const bf16 *x, const W *gate, const W *up,
                            int C, int F, int k, int E, unsigned char *dsm)
{
	const int BK = 32, LD = 40;
	auto xs = reinterpret_cast<unsigned short (*)[128 * LD]>(dsm); /* [NS][128 · LD] */
	auto ws = xs + NS;                                              /* [NS][128 · LD] */
	__shared__ int rtok[128];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
	int g = lane >> 2, cc = lane & 3, n0 = blockIdx.x * 64, nt_all = meta[2 * E + 1];
	for (int tile = blockIdx.y + gridDim.y * blockIdx.z; tile < nt_all; tile += gridDim.y * gridDim.z) {
		int r0, r1, e = moe_tc_tile(meta, E, tile, r0, r1);
		__syncthreads(); /* the last tile's readers of rtok are done */
		if (tid < 128)
			rtok[tid] = r0 + tid < r1 ? list[r0 + tid] / k : -1;
		__syncthreads();
		float acc[4][4][4];
		moe_tc_zero(acc);

		/* stage s <- the k step at k0: two 16-byte pieces of each tile a thread */
		auto stage = [&](int s, int k0) {
#pragma unroll
			for (int i = 0; i < 2; i++) {
				int p = tid + 256 * i, r = p >> 2, c = 8 * (p & 3), kc = k0 + c;
				int t = rtok[r], f = n0 + 16 * (r >> 5) + (r & 15);
				unsigned short *dx = &xs[s][r * LD + c], *dw = &ws[s][r * LD + c];
				if (t >= 0 && kc < C)
					qs_cp16(dx, x + (long long)t * C + kc);
				else
					*(uint4 *)dx = make_uint4(0, 0, 0, 0);
				if (f < F && kc < C && (r & 16))
					moe_tc_wpiece<QU>(dw, up, (long long)e * F + f, kc, C);
				else if (f < F && kc < C)
					moe_tc_wpiece<QG>(dw, gate, (long long)e * F + f, kc, C);
				else
					*(uint4 *)dw = make_uint4(0, 0, 0, 0);
			}
			qs_commit();
		};

		int wrows = r1 - r0 - 64 * wm; /* the warp's rows of the tile: 16-row slices past them are zeros */
		moe_tc_steps<NS>((C + BK - 1) / BK, BK, stage, [&](int s) {
			if (wrows <= 0)
				return;
#pragma unroll
			for (int kk = 0; kk < BK; kk += 16) {
				unsigned a[4][4], b[2][4];
#pragma unroll
				for (int mt = 0; mt < 4; mt++)
					if (16 * mt < wrows)
						pf_ldsm4<false>(a[mt], &xs[s][(64 * wm + 16 * mt + (lane & 15)) * LD + kk + 8 * (lane >> 4)]);
#pragma unroll
				for (int np = 0; np < 2; np++) /* np 0: gate rows, 1: up rows */
					pf_ldsm4<false>(b[np], &ws[s][(32 * wn + 16 * np + (lane & 7) + 8 * (lane >> 4)) * LD + kk +
					                              8 * ((lane >> 3) & 1)]);
#pragma unroll
				for (int mt = 0; mt < 4; mt++)
					if (16 * mt < wrows)
#pragma unroll
						for (int nt = 0; nt < 4; nt++)
							qm_mma(acc[mt][nt], a[mt][0], a[mt][1], a[mt][2], a[mt][3], b[nt >> 1][2 * (nt & 1)],
							       b[nt >> 1][2 * (nt & 1) + 1]);
			}
		});

#pragma unroll
		for (int mt = 0; mt < 4; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int r = r0 + 64 * wm + 16 * mt + g + 8 * h;
				if (r >= r1)
					continue;
#pragma unroll
				for (int nt = 0; nt < 2; nt++) {
					int f = n0 + 16 * wn + 8 * nt + 2 * cc;
					if (f >= F) /* F a multiple of 8: f + 1 < F too otherwise */
						continue;
					float g0 = acc[mt][nt][2 * h], g1 = acc[mt][nt][2 * h + 1];
					float u0 = acc[mt][nt + 2][2 * h], u1 = acc[mt][nt + 2][2 * h + 1];
					bf16 *h = &hid[(long long)r * F + f];
					h[0] = from_f<bf16>(g0 / (1.0f + expf(-g0)) * u0);
					h[1] = from_f<bf16>(g1 / (1.0f + expf(-g1)) * u1);
				}
			}
	}
}

/*
** Routed experts' second half for the grouped rows: ys[s·C + c] = down[e, c, :]·hid[r, :] for sorted row
** r, slot s = list[r], as f32 sums; unweighted (k_moe_sum_tc weights and sums the slots).
** grid as k_moe_up_tc's with ceil(C/128) columns, block 256, dynamic shared memory dsm of
** MOE_TC_DOWN_SMEM(NS) bytes. A tile is 128 rows by 128 c, F in steps of 32 in NS stages as k_moe_up_tc:
** hid and down as bf16 rows of 40 through ldmatrix, as k_moe_up_tc's x and weights.
*/
template <typename W, int QD, int NS>
__device__ void k_moe_down_tc(const int *meta, const int *list, const bf16 *hid, float *ys, const W *down, int C,
                              int F, int E, unsigned char *dsm)
{
	const int BK = 32, LD = 40;
	unsigned short *as = (unsigned short *)dsm;     /* [NS][128 * LD] */
	unsigned short *ws = as + NS * 128 * LD;        /* [NS][128 * LD] */
	__shared__ int rslot[128];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, wm = warp >> 2, wn = warp & 3;
	int g = lane >> 2, cc = lane & 3, n0 = blockIdx.x * 128, nt_all = meta[2 * E + 1];
	for (int tile = blockIdx.y + gridDim.y * blockIdx.z; tile < nt_all; tile += gridDim.y * gridDim.z) {
		int r0, r1, e = moe_tc_tile(meta, E, tile, r0, r1);
		__syncthreads(); /* the last tile's readers of rslot are done */
		if (tid < 128)
			rslot[tid] = r0 + tid < r1 ? list[r0 + tid] : -1;
		float acc[4][4][4];
		moe_tc_zero(acc);

		/* stage s <- the k step at k0: two 16-byte pieces of the hid tile and two of the down tile a thread */
		auto stage = [&](int s, int k0) {
#pragma unroll
			for (int i = 0; i < 2; i++) {
				int p = tid + 256 * i, r = p >> 2, c = 8 * (p & 3), kc = k0 + c;
				unsigned short *d = &as[s * 128 * LD + r * LD + c];
				if (r0 + r < r1 && kc < F)
					qs_cp16(d, hid + (long long)(r0 + r) * F + kc);
				else
					*(uint4 *)d = make_uint4(0, 0, 0, 0);
			}
#pragma unroll
			for (int i = 0; i < 2; i++) {
				int p = tid + 256 * i, r = p >> 2, c = 8 * (p & 3), kc = k0 + c;
				unsigned short *d = &ws[s * 128 * LD + r * LD + c];
				if (n0 + r < C && kc < F)
					moe_tc_wpiece<QD>(d, down, (long long)e * C + n0 + r, kc, F);
				else
					*(uint4 *)d = make_uint4(0, 0, 0, 0);
			}
			qs_commit();
		};

		int wrows = r1 - r0 - 64 * wm; /* as k_moe_up_tc: slices past the warp's rows are skipped */
		moe_tc_steps<NS>((F + BK - 1) / BK, BK, stage, [&](int s) {
			const unsigned short *a_s = as + s * 128 * LD;
			const unsigned short *w_s = ws + s * 128 * LD;
			if (wrows <= 0)
				return;
#pragma unroll
			for (int kk = 0; kk < BK; kk += 16) {
				unsigned b[2][4];
#pragma unroll
				for (int np = 0; np < 2; np++)
					pf_ldsm4<false>(b[np], &w_s[(32 * wn + 16 * np + (lane & 7) + 8 * (lane >> 4)) * LD + kk +
					                            8 * ((lane >> 3) & 1)]);
#pragma unroll
				for (int mt = 0; mt < 4; mt++) {
					if (16 * mt >= wrows)
						continue;
					unsigned a[4];
					pf_ldsm4<false>(a, &a_s[(64 * wm + 16 * mt + (lane & 15)) * LD + kk + 8 * (lane >> 4)]);
#pragma unroll
					for (int nt = 0; nt < 4; nt++)
						qm_mma(acc[mt][nt], a[0], a[1], a[2], a[3], b[nt >> 1][2 * (nt & 1)],
						       b[nt >> 1][2 * (nt & 1) + 1]);
				}
			}
		});

#pragma unroll
		for (int mt = 0; mt < 4; mt++)
#pragma unroll
			for (int h = 0; h < 2; h++) {
				int sl = rslot[64 * wm + 16 * mt + g + 8 * h];
				if (sl < 0)
					continue;
#pragma unroll
				for (int nt = 0; nt < 4; nt++) {
					int c = n0 + 32 * wn + 8 * nt + 2 * cc;
					if (c >= C) /* C a multiple of 8: c + 1 < C too otherwise */
						continue;
					float2 v;
					v.x = acc[mt][nt][2 * h], v.y = acc[mt][nt][2 * h + 1];
					*(float2 *)&ys[(long long)sl * C + c] = v;
				}
			}
	}
}

/*
** y[t, c] = sum over j = 0..k-1, in order, of w[t·k + j] · ys[(t·k + j)·C + c], skipping slots whose
** expert is < 0 or >= E (a row with every slot skipped is 0): k_moe_down's weighting and order of the
** float sums. Four values of c a thread (C a multiple of 4). grid ceil(T·C/1024), block 256. meta, list
** and hid are not read: they are the scratch regions laid out before ys (every launch of the node lists
** the regions in one order, so each sees them at the same offsets).
*/
template <typename A>
__device__ void k_moe_sum_tc(A *y, const int *meta, const int *list, const bf16 *hid, const float *ys, const int *idx,
                             const A *w, int T, int C, int k, int E)
{
	long long i = 4 * ((long long)blockIdx.x * 256 + threadIdx.x);
	if (i >= (long long)T * C)
		return;
	long long t = i / C;
	int c = (int)(i - t * C);
	float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
	for (int j = 0; j < k; j++) {
		long long s = t * k + j;
		int ex = idx[s];
		if (ex < 0 || ex >= E)
			continue;
		float wv = to_f(w[s]);
		float4 v = *(const float4 *)&ys[s * C + c];
		a0 += wv * v.x, a1 += wv * v.y, a2 += wv * v.z, a3 += wv * v.w;
	}
	A *yr = y + t * C + c;
	yr[0] = from_f<A>(a0), yr[1] = from_f<A>(a1), yr[2] = from_f<A>(a2), yr[3] = from_f<A>(a3);
}
