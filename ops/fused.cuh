/*
** ops/fused.cuh — kernels for fused groups (compiler/fuse.c), appended to kernels.cuh by glmc and built
** from its helpers. Each computes exactly what its unfused nodes compute, intermediate values rounded
** to the activation type as the unfused kernels would store them.
**
** In-place contract (compiler/memplan.c relies on it): a kernel launched for an element-wise node c may
** find c's output in the buffer of c's first operand; each such kernel below says how it stays correct.
*/

/* Pattern A: sum = a + b, then y = rmsnorm(sum) (optional weight), one row per block. sum may equal a
** (in place): each element is read before it is written, by the same thread. grid (rows), block 256.
** Rows of up to RN_REG values a thread are read in one round into registers and not read back: the
** loop form's store to sum may alias a later load, so each of its rounds waited for the last (slow on
** the wide rows after each allreduce; bench/NOTES.md entry 54). */
#define RN_REG 32
template <typename A, typename W, bool HAS_W>
__device__ void k_add_rmsnorm(A *sum, A *y, const A *a, const A *b, const W *w, int N, float eps)
{
	long long row = (long long)blockIdx.x * N;
	int t = threadIdx.x, st = blockDim.x;
	float ss = 0.0f;
	if (N <= RN_REG * st) {
		float v[RN_REG], wv[RN_REG];
#pragma unroll
		for (int j = 0; j < RN_REG; j++) {
			int i = t + j * st;
			v[j] = i < N ? to_f(from_f<A>(to_f(a[row + i]) + to_f(b[row + i]))) : 0.0f;
			wv[j] = HAS_W && i < N ? to_f(w[i]) : 1.0f;
		}
#pragma unroll
		for (int j = 0; j < RN_REG; j++) {
			if (t + j * st < N)
				sum[row + t + j * st] = from_f<A>(v[j]);
			ss += v[j] * v[j];
		}
		float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
#pragma unroll
		for (int j = 0; j < RN_REG; j++)
			if (t + j * st < N)
				y[row + t + j * st] = from_f<A>(HAS_W ? v[j] * inv * wv[j] : v[j] * inv);
		return;
	}
	for (int i = t; i < N; i += st) {
		float v = to_f(from_f<A>(to_f(a[row + i]) + to_f(b[row + i])));
		sum[row + i] = from_f<A>(v);
		ss += v * v;
	}
	float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
	for (int i = t; i < N; i += st) {
		float v = to_f(sum[row + i]) * inv;
		if (HAS_W)
			v *= to_f(w[i]);
		y[row + i] = from_f<A>(v);
	}
}

/*
** Pattern A after a tensor-parallel allreduce: b = the sum over the tp ranks of part, then sum = a + b
** and y = rmsnorm(sum) as k_add_rmsnorm (b is also stored: the unfused allreduce's output). c nullptr: b
** already holds the sum (glmrun ran the allreduce through NCCL) and this is k_add_rmsnorm. Otherwise
** glmrun skipped the allreduce launch and this kernel is the one-shot exchange itself: block t pushes row
** t of part into every rank's mailbox as block t of k_p2p_allreduce does (same slots, flags, epoch and
** seq, so both kernels can follow each other on a stream), waits for the tp senders, sums the parts in
** rank order, adds a and normalises, the row held in registers. Why: at tp 2 the allreduce, then the
** add and norm, were two launches on the critical path of every layer's two residual sums. glmrun passes
** c only when T <= P2P_NBMAX and T·N·sizeof(A) <= cap; glmc fuses only when N·sizeof(A) is a multiple of
** 16 and N <= RN_REG·256. sum may equal a or b (in place). grid (T), block 256.
*/
template <typename A, typename W, bool HAS_W>
__device__ void k_add_rmsnorm_ar(A *sum, A *y, A *b, const A *a, const A *part, const W *w, int N, float eps,
                                 const P2pCtl *c)
{
	if (!c) {
		k_add_rmsnorm<A, W, HAS_W>(sum, y, a, b, w, N, eps);
		return;
	}
	const int VE = 16 / (int)sizeof(A), RV = RN_REG / VE; /* values and 16-byte units a thread */
	const unsigned e = *(volatile const unsigned *)c->seq + 1;
	const int tp = c->tp, blk = blockIdx.x, t = threadIdx.x, st = blockDim.x;
	const int nv = N / VE;
	const long long row = (long long)blk * N, off = row * (long long)sizeof(A);
	if (N % VE || nv > RV * st)
		__trap();
	p2p_exchange((const uint4 *)part, off / 16, off / 16 + nv, e, blk, c); /* row blk's 16-byte units */
	const char *parts = c->mbox[c->rank] + P2P_FLAGS_BYTES + (long long)(e & 1u) * tp * c->cap + off;
	uint4 *bv = (uint4 *)(b + row), *sv = (uint4 *)(sum + row), *yv = (uint4 *)(y + row);
	const uint4 *av = (const uint4 *)(a + row);
	float v[RN_REG], ss = 0.0f;
#pragma unroll
	for (int j = 0; j < RV; j++) {
		int i = t + j * st;
		uint4 s4 = make_uint4(0, 0, 0, 0), a4 = s4;
		if (i < nv)
			s4 = p2p_sum16<A>(parts, c->cap, tp, (long long)i * 16), a4 = av[i];
		const A *se = (const A *)&s4, *ae = (const A *)&a4;
#pragma unroll
		for (int k = 0; k < VE; k++) {
			v[j * VE + k] = to_f(from_f<A>(to_f(ae[k]) + to_f(se[k])));
			ss += v[j * VE + k] * v[j * VE + k];
		}
		if (i < nv)
			bv[i] = s4;
	}
	auto put = [&](uint4 *dst, float scale, bool weighted) { /* the row times scale (and w) into dst */
#pragma unroll
		for (int j = 0; j < RV; j++) {
			int i = t + j * st;
			if (i >= nv)
				continue;
			uint4 o;
			A *oe = (A *)&o;
#pragma unroll
			for (int k = 0; k < VE; k++) {
				float x = v[j * VE + k] * scale;
				oe[k] = from_f<A>(weighted ? x * to_f(w[i * VE + k]) : x);
			}
			dst[i] = o;
		}
	};
	put(sv, 1.0f, false);
	float inv = 1.0f / sqrtf(block_sum(ss) / (float)N + eps);
	put(yv, inv, HAS_W);
	p2p_arrive(e, c);
}

/*
** The decode GEMV of a fused group (fuse.c's FK_GEMV): gemv_core (kernels.cuh) with the group's
** prologue PRO (GEMV_PRO_*) and epilogue bits EPI, TR rows per pass. grid (ceil((N0+N1+N2+N3)/RB), or
** fewer blocks that loop), block a multiple of 32. pdl: launched programmatically (KA_PDL, kernels.cuh).
*/
template <typename A, typename W, typename NW, int PRO, bool HAS_NW, int EPI, int RB, int TR>
__device__ void k_gemv_fused(A *y0, A *y1, A *y2, A *y3, const W *w0, const W *w1, const W *w2, const W *w3,
                             const A *b0, const A *b1, const A *b2, const A *b3, const A *x, const A *u,
                             const NW *nw, A *hs, const A *r, int T, int K, int N0, int N1, int N2, int N3,
                             float eps, float s0, float s1, float s2, float s3, int pdl = 0)
{
	gemv_core<A, W, NW, PRO, HAS_NW, EPI, RB, TR>(y0, y1, y2, y3, w0, w1, w2, w3, b0, b1, b2, b3, x, u, nw, hs, r, T, K,
	                                          N0, N1, N2, N3, eps, s0, s1, s2, s3, pdl);
}

/*
** Rotary of q[T, H, D] and k[T, G, D] (after a per-head RMSNorm with weights qw, kw over D when NORM, as
** Qwen3; the weights may be nullptr when !HAS_NW), written to qo and ko, with k's rotated rows and v's
** rows [T, G, Dv] copied into the caches at row pos[t] (as k_kv_write). Blocks (h, t): h < H rotates q
** head h, h >= H rotates k head h - H and copies that head's v. Each value is rounded to A where the
** unfused nodes store it: the normalised head, then the rotated one. Rotary as k_rope (qfreq/kfreq and
** qcs/kcs from the host; INTERLEAVED pairs (2i, 2i+1), else (i, i + R/2); dims >= R copied).
** Cache rows are those of token t's sequence slot seq[t] (S rows each). D <= 1024. grid (H + G, T), block 128.
*/
template <typename A, typename NW, bool NORM, bool HAS_NW, bool INTERLEAVED>
__device__ void k_rope_qk_kv(A *qo, A *ko, A *kcache, A *vcache, const A *q, const A *k, const A *v,
                             const NW *qw, const NW *kw, const int *pos, const float *qfreq, const float *kfreq,
                             float qcs, float kcs, int H, int G, int D, int Dv, int R, float eps, const int *seq, int S)
{
	GLM_SH(float, hv, [1024]);
	int h = blockIdx.x, t = blockIdx.y, half = R / 2;
	bool isk = h >= H;
	int hh = isk ? h - H : h, heads = isk ? G : H;
	long long row = ((long long)t * heads + hh) * D;
	const A *src = (isk ? k : q) + row;
	A *dst = (isk ? ko : qo) + row;
	const NW *nwt = isk ? kw : qw;
	const float *freq = isk ? kfreq : qfreq;
	float cs = isk ? kcs : qcs;
	long long p = pos[t], cp = (long long)seq[t] * S + p; /* cache row: slot seq[t] of S rows */
	A *crow = kcache + (cp * G + hh) * D; /* used by k heads only */
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
		A *vc = vcache + (cp * G + hh) * Dv;
		for (int d = threadIdx.x; d < Dv; d += blockDim.x)
			vc[d] = vr[d];
	}
}

/* One rotary pair as k_rope computes it: (x0, x1) at position p with inverse frequency f. */
__device__ __forceinline__ void rope_pair(float x0, float x1, float p, float f, float cs, float &o0, float &o1)
{
	float a = __fmul_rn(p, f);
	float c = __fmul_rn(cosf(a), cs), s = __fmul_rn(sinf(a), cs);
	o0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
	o1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

/* Rotary of one head row src[0..D) (first R dims rotated, the rest copied) into dst (and dst2 when not
** nullptr), by the threads of the block; pairs (2i, 2i+1) when IL, else (i, i + R/2). As k_rope. */
template <typename A, bool IL>
__device__ void rope_row(A *dst, A *dst2, const A *src, float p, const float *freq, float cs, int D, int R)
{
	int half = R / 2;
	for (int i = threadIdx.x; i < half; i += blockDim.x) {
		int i0 = IL ? 2 * i : i, i1 = IL ? 2 * i + 1 : i + half;
		float o0, o1;
		rope_pair(to_f(src[i0]), to_f(src[i1]), p, freq[i], cs, o0, o1);
		A a0 = from_f<A>(o0), a1 = from_f<A>(o1);
		dst[i0] = a0, dst[i1] = a1;
		if (dst2)
			dst2[i0] = a0, dst2[i1] = a1;
	}
	for (int d = 2 * half + threadIdx.x; d < D; d += blockDim.x) {
		dst[d] = src[d];
		if (dst2)
			dst2[d] = src[d];
	}
}

/*
** A one-token decode step's attention with its rotary and cache writes folded in (fuse.c's ROPE_KV for
** 1-token steps, when k_attn_step would run): block h takes the raw rows q[h] (H heads) and k[g], v[g]
** of its group g = h / (H / G) (G heads, D = ROWB / sizeof(A) dims each), rotates q and k at p = pos[0]
** as k_rope_qk_kv does (same tables qfreq/kfreq, multipliers qcs/kcs, pairs as IL, first R dims, each
** result rounded to A), and attends over cache rows 0..p-1 of slot seq[0] (k_attn_step's loop) plus the
** step's own key and value taken from those rows. The first head of each group writes the rotated k row
** and the v row into the caches at row p; no block of the launch reads row p from the caches, so no
** block waits for another. Dk = Dv = D, R even and <= D; the caches 16-byte aligned (else it traps).
** grid (H), block 512.
**
** Why: the separate rope kernel is a launch of its own per layer for little work. Against entry 11's
** lesson (bench/NOTES.md) the extra work stays off the cache loop: the raw rows and the frequencies are
** loaded before pos is needed, each pair's sin and cos is formed once by one thread, the first round's
** cache rows are asked of L1 before the block's one extra barrier, and the cache loop is k_attn_step's.
*/
template <typename A, int ROWB, bool IL>
__device__ void k_attn_step_rope(A *y, A *kcache, A *vcache, const A *q, const A *k, const A *v, const int *pos,
                                 const float *qfreq, const float *kfreq, float qcs, float kcs, int H, int G, int R,
                                 float scale, const int *seq, int S)
{
	using P = AttnStep<A, ROWB>;
	constexpr int D = P::D, VEC = P::VEC, RL = P::RL, U = P::U;
	static_assert(2 * D <= 512, "a thread a pair or copied dim, then one a value dim");
	GLM_SH(float, qs, [D]);
	GLM_SH_AFTER(qs, float, ks, [D]);
	GLM_SH_AFTER(ks, float, vs, [D]);
	if (((unsigned long long)kcache | (unsigned long long)vcache) % 16)
		__trap(); /* glmrun's caches are 256-byte aligned; a fallback loop would cost this one registers */
	int p = pos[0];
	long long base = (long long)seq[0] * S;
	int h = blockIdx.x, x = threadIdx.x, half = R / 2, g = h / (H / G);
	int sl = (x & 31) % RL, wk = x / RL;
	bool writer = h % (H / G) == 0;
	const A *qh = q + (long long)h * D, *kh = k + (long long)g * D, *vh = v + (long long)g * D;
	/* thread x < half: pair x; half <= x < D - half: dim x + half (>= R, copied); 256 + d: value dim d */
	int i0 = IL ? 2 * x : x, i1 = IL ? 2 * x + 1 : x + half, dv = x - 256;
	float q0 = 0.0f, q1 = 0.0f, k0 = 0.0f, k1 = 0.0f, qf = 0.0f, kf = 0.0f, vx = 0.0f;
	if (x < half) {
		q0 = to_f(qh[i0]), q1 = to_f(qh[i1]), k0 = to_f(kh[i0]), k1 = to_f(kh[i1]);
		qf = qfreq[x], kf = kfreq[x];
	} else if (x < D - half) {
		q0 = to_f(qh[x + half]), k0 = to_f(kh[x + half]);
	} else if (dv >= 0 && dv < D) {
		vx = to_f(vh[dv]);
	}
	long long RW = (long long)G * D;
	const A *kg = kcache + base * RW + (long long)g * D + sl * VEC;
	const A *vg = vcache + base * RW + (long long)g * D + sl * VEC;
	if (sl % 8 == 0) /* the first round's rows, a 128-byte line per 8 lanes, asked for while the rotary runs */
		for (int u = 0; u < U; u++)
			if (wk * U + u < p) {
				glm_prefetch_l1(kg + (long long)(wk * U + u) * RW);
				glm_prefetch_l1(vg + (long long)(wk * U + u) * RW);
			}
	A *kc = kcache + ((base + p) * G + g) * D, *vc = vcache + ((base + p) * G + g) * D;
	if (x < half) {
		float o0, o1;
		rope_pair(q0, q1, (float)p, qf, qcs, o0, o1);
		qs[i0] = to_f(from_f<A>(o0)), qs[i1] = to_f(from_f<A>(o1));
		rope_pair(k0, k1, (float)p, kf, kcs, o0, o1);
		A a0 = from_f<A>(o0), a1 = from_f<A>(o1);
		ks[i0] = to_f(a0), ks[i1] = to_f(a1);
		if (writer)
			kc[i0] = a0, kc[i1] = a1;
	} else if (x < D - half) {
		qs[x + half] = q0, ks[x + half] = k0;
		if (writer)
			kc[x + half] = kh[x + half];
	} else if (dv >= 0 && dv < D) {
		vs[dv] = vx;
		if (writer)
			vc[dv] = vh[dv];
	}
	__syncthreads();
	float qr[VEC], acc[VEC];
#pragma unroll
	for (int i = 0; i < VEC; i++)
		qr[i] = qs[sl * VEC + i], acc[i] = 0.0f;
	float m = neg_inf(), l = 0.0f;
	attn_step_keys<A, ROWB>(kg, vg, RW, p, qr, scale, m, l, acc); /* the cache rows before the step's */
	if (x < 32) { /* the step's own key, by worker 0 (warp 0's lanes all take the shuffles) */
		float d = 0.0f;
#pragma unroll
		for (int i = 0; i < VEC; i++)
			d += qr[i] * ks[sl * VEC + i];
#pragma unroll
		for (int o = RL / 2; o > 0; o >>= 1)
			d += __shfl_xor_sync(0xffffffffu, d, o);
		if (wk == 0) {
			float s = d * scale, mn = fmaxf(m, s);
			float c = mn == neg_inf() ? 1.0f : expf(m - mn), e = s == neg_inf() ? 0.0f : expf(s - mn);
			l = l * c + e;
#pragma unroll
			for (int i = 0; i < VEC; i++)
				acc[i] = acc[i] * c + e * vs[sl * VEC + i];
			m = mn;
		}
	}
	attn_step_merge<A, ROWB>(y + (long long)h * D, m, l, acc); /* worker 0 always has the step's key */
}

/*
** MLA latent preparation, any step: for token t = blockIdx.y with p = pos[t],
**   block x = 0: the latent row [rmsnorm(kv[t, :L])·cw, rope(kv[t, L:L+Dr])] (rope of R dims, pairs as IL)
**                into latent[t] and cache[p] (rows of L + Dr), as k_rmsnorm, k_rope and the concat store
**                them and k_mla_write copies them;
**   block x = 1: the indexer key layernorm(ik[t, :Di])·iw + ib, then rotary of its first Ri dims (ILI),
**                into iko[t] and icache[p] (as k_layernorm, k_rope and k_mla_write).
** cw, iw, ib may be nullptr (no weight / bias). Di <= 1024. grid (1 or 2, T), block 256 (mla_kv_block is
** the body for block job, token t, shared with k_mla_prep).
*/
template <typename A, typename NW, typename IW, bool IL, bool ILI>
__device__ void mla_kv_block(int job, int t, A *latent, A *cache, A *iko, A *icache, const A *kv, const NW *cw,
                             const A *ik, const IW *iw, const IW *ib, const int *pos, const float *freq, float cs,
                             const float *ifreq, float ics, int L, int Dr, int R, int Di, int Ri, float eps, float ieps,
                             const int *seq, int S)
{
	GLM_SH(A, hv, [1024]);
	long long p = pos[t], cp = (long long)seq[t] * S + p; /* cache row: slot seq[t] of S rows */
	int tid = threadIdx.x, bd = blockDim.x, half = (job == 0 ? R : Ri) / 2;
	if (job == 0 && L <= 4 * bd && half <= bd && Dr - 2 * half <= bd) {
		/* every load first: the row, its norm weights and the rotary's pair, table entry and copied
		** value, then the sums in gemv_row_inv_rms's order, so the values are bit for bit the loop's below */
		int Dk = L + Dr;
		const A *row = kv + (long long)t * Dk, *src = row + L;
		A *lr = latent + (long long)t * Dk, *cr = cache + cp * Dk;
		float xv[4], cv[4], ss = 0.0f;
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int i = tid + j * bd;
			xv[j] = i < L ? to_f(row[i]) : 0.0f;
			cv[j] = cw && i < L ? to_f(cw[i]) : 1.0f;
		}
		int i0 = IL ? 2 * tid : tid, i1 = IL ? 2 * tid + 1 : tid + half, d = 2 * half + tid;
		float s0 = 0.0f, s1 = 0.0f, fr = 0.0f;
		A cpy = from_f<A>(0.0f);
		if (tid < half)
			s0 = to_f(src[i0]), s1 = to_f(src[i1]), fr = freq[tid];
		if (d < Dr)
			cpy = src[d];
#pragma unroll
		for (int j = 0; j < 4; j++)
			if (tid + j * bd < L)
				ss += xv[j] * xv[j];
		float inv = 1.0f / sqrtf(block_sum(ss) / (float)L + eps);
#pragma unroll
		for (int j = 0; j < 4; j++) {
			int i = tid + j * bd;
			if (i < L) {
				float v = xv[j] * inv;
				if (cw)
					v *= cv[j];
				A a = from_f<A>(v);
				lr[i] = a, cr[i] = a;
			}
		}
		if (tid < half) {
			float o0, o1;
			rope_pair(s0, s1, (float)p, fr, cs, o0, o1);
			A a0 = from_f<A>(o0), a1 = from_f<A>(o1);
			lr[L + i0] = a0, lr[L + i1] = a1, cr[L + i0] = a0, cr[L + i1] = a1;
		}
		if (d < Dr)
			lr[L + d] = cpy, cr[L + d] = cpy;
		return;
	}
	if (job == 1 && Di <= bd && half <= bd && Di - 2 * half <= bd) {
		/* the same for the indexer key: row value, weight, bias and the rotary's table entry asked for at
		** once; the sums, the normalised row in shared memory and the rotary as the loop's below */
		const A *row = ik + (long long)t * Di;
		A *ko = iko + (long long)t * Di, *kc = icache + cp * Di;
		bool on = tid < Di;
		float v = on ? to_f(row[tid]) : 0.0f, wv = iw && on ? to_f(iw[tid]) : 0.0f;
		float bv = iw && ib && on ? to_f(ib[tid]) : 0.0f, fr = tid < half ? ifreq[tid] : 0.0f;
		float s = 0.0f;
		if (on)
			s += v;
		float mean = block_sum(s) / (float)Di;
		float sq = 0.0f;
		if (on)
			sq += (v - mean) * (v - mean);
		float inv = 1.0f / sqrtf(block_sum(sq) / (float)Di + ieps);
		if (on) {
			float u = (v - mean) * inv;
			if (iw)
				u *= wv;
			if (iw && ib)
				u += bv;
			hv[tid] = from_f<A>(u);
		}
		__syncthreads();
		int i0 = ILI ? 2 * tid : tid, i1 = ILI ? 2 * tid + 1 : tid + half, d = 2 * half + tid;
		if (tid < half) {
			float o0, o1;
			rope_pair(to_f(hv[i0]), to_f(hv[i1]), (float)p, fr, ics, o0, o1);
			A a0 = from_f<A>(o0), a1 = from_f<A>(o1);
			ko[i0] = a0, ko[i1] = a1;
			if (icache)
				kc[i0] = a0, kc[i1] = a1;
		}
		if (d < Di) {
			ko[d] = hv[d];
			if (icache)
				kc[d] = hv[d];
		}
		return;
	}
	if (job == 0) {
		int Dk = L + Dr;
		const A *row = kv + (long long)t * Dk;
		A *lr = latent + (long long)t * Dk, *cr = cache + cp * Dk;
		float inv = gemv_row_inv_rms(row, L, eps);
		for (int i = threadIdx.x; i < L; i += blockDim.x) {
			float v = to_f(row[i]) * inv;
			if (cw)
				v *= to_f(cw[i]);
			A a = from_f<A>(v);
			lr[i] = a, cr[i] = a;
		}
		rope_row<A, IL>(lr + L, cr + L, row + L, (float)p, freq, cs, Dr, R);
		return;
	}
	const A *row = ik + (long long)t * Di;
	float s = 0.0f;
	walk_row(row, Di, [&](int, float v) { s += v; });
	float mean = block_sum(s) / (float)Di;
	float sq = 0.0f;
	walk_row(row, Di, [&](int, float v) { sq += (v - mean) * (v - mean); });
	float inv = 1.0f / sqrtf(block_sum(sq) / (float)Di + ieps);
	walk_row(row, Di, [&](int i, float v) {
		v = (v - mean) * inv;
		if (iw)
			v *= to_f(iw[i]);
		if (iw && ib)
			v += to_f(ib[i]);
		hv[i] = from_f<A>(v);
	});
	__syncthreads();
	rope_row<A, ILI>(iko + (long long)t * Di, icache + cp * Di, hv, (float)p, ifreq, ics, Di, Ri);
}

template <typename A, typename NW, typename IW, bool IL, bool ILI>
__device__ void k_mla_kvprep(A *latent, A *cache, A *iko, A *icache, const A *kv, const NW *cw, const A *ik,
                             const IW *iw, const IW *ib, const int *pos, const float *freq, float cs, const float *ifreq,
                             float ics, int L, int Dr, int R, int Di, int Ri, float eps, float ieps, const int *seq, int S)
{
	mla_kv_block<A, NW, IW, IL, ILI>(blockIdx.x, blockIdx.y, latent, cache, iko, icache, kv, cw, ik, iw, ib, pos, freq,
	                                 cs, ifreq, ics, L, Dr, R, Di, Ri, eps, ieps, seq, S);
}

/* Absorb blocks per head of the MLA query preparation: 64 output columns per block for W_UK [H, Dn, L],
** 8 for the transposed [H, L, Dn]. glmc's args_mla_q (emit_cuda.c) and the tests compute the same count. */
__device__ __forceinline__ int mla_q_nl(int L, bool tb)
{
	return tb ? (L + 7) / 8 : (L + 63) / 64;
}

/*
** MLA query preparation for the decode step, from the projected query q[T, H, Dn + Dr]:
**   qabs[t, h, :L]      = q[t, h, :Dn] · W_UK[h]  (wk [H, Dn, L], or [H, L, Dn] when TB), as the matmul
**                         (k_matmul / k_matmul_tb order) stores it;
**   qabs[t, h, L:L+Dr]  = rope(q[t, h, Dn:]) (R dims rotated, pairs as IL);
**   iqo[t, hi, :]       = rope(iq[t, hi, :]) for the indexer's Hi heads of Di (Ri rotated, ILI), when Hi > 0.
** Blocks: NL = mla_q_nl(L, TB) per head for the absorb, the first of them also rotating its head's q_pe;
** then Hi blocks for the indexer's heads. Each absorb block stages its head's q_nope rows (8 tokens at
** a time) in shared memory as float and reads its part of W_UK once per 8 tokens. Dn <= 512.
** grid (H·NL + Hi), block 256 (mla_q_block is the body for block b, shared with k_mla_prep).
**
** The absorb is a per-head GEMV over a weight read once per step, so the aim is the read bandwidth:
**   - [H, Dn, L]: a block owns 64 columns; thread (g, c) = (tid / 16, tid % 16) reads 4 adjacent
**     columns of rows d = g, g + 16, ... (one 8- or 16-byte load per row when L % 4 == 0 and wk is
**     aligned, a quarter-warp covering 128 contiguous bytes), so every thread has its Dn/16 independent
**     loads in flight (up to 12); the 16 row groups' partial sums then meet in shared memory. (One thread per
**     column walking all Dn rows, as before, kept one load in flight per thread over 2 blocks per head.)
**     Those 12 loads go out before the rotary and the q staging, whose L2 trips and barrier they then
**     overlap (bench/NOTES.md entry 40).
**   - [H, L, Dn]: one warp per output column, lanes reading the row in 4-element vectors.
*/
template <typename A, typename W, bool TB, bool IL, bool ILI>
__device__ void mla_q_block(int b, A *qabs, A *iqo, const A *q, const W *wk, const A *iq, const int *pos,
                            const float *freq, float cs, const float *ifreq, float ics, int T, int H, int Dn, int Dr,
                            int R, int L, int Hi, int Di, int Ri)
{
	GLM_SH16(float, sm, [8 * 1024]); /* q rows [8][Dn <= 512]; past them (non-TB) sums [16][64] */
	float *xs = sm;
	int NL = mla_q_nl(L, TB);
	int Dq = Dn + Dr, Do = L + Dr;
	if (b >= H * NL) {
		int hi = b - H * NL;
		for (int t = 0; t < T; t++) {
			long long row = ((long long)t * Hi + hi) * Di;
			rope_row<A, ILI>(iqo + row, (A *)nullptr, iq + row, (float)pos[t], ifreq, ics, Di, Ri);
		}
		return;
	}
	int h = b / NL, lc = b - h * NL, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
	/* [H, Dn, L]: thread (g, c)'s first PW rows of its 4 columns asked for before the rotary and the q
	** staging, so that their HBM trip overlaps those L2 trips and the barrier instead of following them
	** (asked again for each later chunk of 8 tokens) */
	constexpr int PW = 12; /* GLM's Dn = 192: all of a thread's rows */
	int g = tid >> 4, l = lc * 64 + 4 * (tid & 15);
	const W *wc = wk + (long long)h * Dn * L + l;
	bool vec = !TB && L % 4 == 0 && ((unsigned long long)wk & (4 * sizeof(W) - 1)) == 0 && l < L;
	W4<W> wpre[PW]; /* as loaded: 16-bit weights in half the registers, so that 4 blocks fit an SM */
	auto pre = [&]() {
#pragma unroll
		for (int i = 0; i < PW; i++)
			if (g + 16 * i < Dn)
				ldw4(wc + (long long)(g + 16 * i) * L, wpre[i]);
	};
	if (vec)
		pre();
	if (lc == 0)
		for (int t = 0; t < T; t++) {
			rope_row<A, IL>(qabs + ((long long)t * H + h) * Do + L, (A *)nullptr, q + ((long long)t * H + h) * Dq + Dn,
			                (float)pos[t], freq, cs, Dr, R);
		}
	for (int t0 = 0; t0 < T; t0 += 8) {
		int tn = T - t0 < 8 ? T - t0 : 8;
		__syncthreads(); /* the previous rows and sums are consumed */
		for (int e = tid; e < tn * Dn; e += blockDim.x) {
			int t = e / Dn, d = e - t * Dn;
			xs[t * Dn + d] = to_f(q[((long long)(t0 + t) * H + h) * Dq + d]);
		}
		__syncthreads();
		if (!TB) {
			if (vec && t0 > 0)
				pre();
			/* token by token: 4 accumulators a thread, its rows' partial sums met in shared memory past the
			** staged rows (xs holds at most 8 rows of 512) */
			float *red = sm + 8 * 512; /* [16 row groups][64 columns] */
#pragma unroll 1
			for (int t = 0; t < tn; t++) {
				float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
				auto add_row = [&](int d, const float (&wv)[4]) { /* acc[u] += q[t, d] · W_UK[d, column u] */
					float xv = xs[t * Dn + d];
#pragma unroll
					for (int u = 0; u < 4; u++)
						acc[u] += xv * wv[u];
				};
				if (vec) {
#pragma unroll
					for (int i = 0; i < PW; i++)
						if (g + 16 * i < Dn) {
							float wv[4];
							unpack4(wpre[i], wv);
							add_row(g + 16 * i, wv);
						}
#pragma unroll 4
					for (int d = g + 16 * PW; d < Dn; d += 16) { /* rows past PW a thread (Dn > 192) */
						float wv[4];
						ld4(wc + (long long)d * L, wv);
						add_row(d, wv);
					}
				} else if (l < L) {
					for (int d = g; d < Dn; d += 16) {
						float wv[4];
#pragma unroll
						for (int u = 0; u < 4; u++)
							wv[u] = l + u < L ? to_f(wc[(long long)d * L + u]) : 0.0f;
						add_row(d, wv);
					}
				}
				((float4 *)red)[g * 16 + (tid & 15)] = make_float4(acc[0], acc[1], acc[2], acc[3]);
				__syncthreads();
				if (tid < 64) {
					float s = 0.0f;
#pragma unroll
					for (int gg = 0; gg < 16; gg++)
						s += red[gg * 64 + tid];
					if (lc * 64 + tid < L)
						qabs[((long long)(t0 + t) * H + h) * Do + lc * 64 + tid] = from_f<A>(s);
				}
				if (t + 1 < tn)
					__syncthreads(); /* red is consumed before the next token's sums */
			}
		} else {
			int l = lc * 8 + warp;
			if (l < L) { /* uniform per warp */
				const W *wr = wk + ((long long)h * L + l) * Dn;
				float acc[8][1];
#pragma unroll
				for (int t = 0; t < 8; t++)
					acc[t][0] = 0.0f;
				if (Dn % 4 == 0 && ((unsigned long long)wr & (4 * sizeof(W) - 1)) == 0) {
#pragma unroll 2
					for (int d = 4 * lane; d < Dn; d += 128) {
						float wv[4];
						ld4(wr + d, wv);
#pragma unroll
						for (int t = 0; t < 8; t++)
							if (t < tn) {
								float4 xv = *(const float4 *)(xs + t * Dn + d);
								acc[t][0] += xv.x * wv[0] + xv.y * wv[1] + xv.z * wv[2] + xv.w * wv[3];
							}
					}
				} else {
#pragma unroll 4
					for (int d = lane; d < Dn; d += 32) {
						float wv = to_f(wr[d]);
#pragma unroll
						for (int t = 0; t < 8; t++)
							if (t < tn)
								acc[t][0] += xs[t * Dn + d] * wv;
					}
				}
#pragma unroll
				for (int t = 0; t < 8; t++)
					if (t < tn) {
						float s = warp_sum(acc[t][0]);
						if (lane == 0)
							qabs[((long long)(t0 + t) * H + h) * Do + l] = from_f<A>(s);
					}
			}
		}
	}
}

template <typename A, typename W, bool TB, bool IL, bool ILI>
__device__ void k_mla_qprep(A *qabs, A *iqo, const A *q, const W *wk, const A *iq, const int *pos, const float *freq,
                            float cs, const float *ifreq, float ics, int T, int H, int Dn, int Dr, int R, int L, int Hi,
                            int Di, int Ri)
{
	mla_q_block<A, W, TB, IL, ILI>(blockIdx.x, qabs, iqo, q, wk, iq, pos, freq, cs, ifreq, ics, T, H, Dn, Dr, R, L, Hi,
	                               Di, Ri);
}

/*
** Both MLA preparations in one decode launch: blocks x < jobs (1 or 2) are k_mla_kvprep's job x for token y,
** blocks x >= jobs of row y = 0 are k_mla_qprep's block x - jobs (rows y > 0 of them have nothing to do).
** grid (jobs + NQ, T) with NQ = H·NL + Hi, block 256. The latent's jobs come first: they are the launch's
** longest chain of dependent loads, and at four blocks an SM an H200 holds 528 of GLM-5's 546 blocks at
** once, so jobs placed last would wait for a block to finish. (Moved first while the kernel still ran two
** blocks an SM, they gained nothing measurable; not measured apart since: bench/NOTES.md 48.)
*/
template <typename A, typename W, bool TB, bool IL, bool ILI, typename NW, typename IW, bool KIL, bool KILI>
__device__ void k_mla_prep(A *qabs, A *iqo, const A *q, const W *wk, const A *iq, const int *pos, const float *freq,
                           float cs, const float *ifreq, float ics, int T, int H, int Dn, int Dr, int R, int L, int Hi,
                           int Di, int Ri, A *latent, A *cache, A *iko, A *icache, const A *kv, const NW *cw,
                           const A *ik, const IW *iw, const IW *ib, const float *kfreq, float kcs, const float *ikfreq,
                           float ikcs, int KR, int KDi, int KRi, float eps, float ieps, const int *seq, int S)
{
	int jobs = (int)gridDim.x - (H * mla_q_nl(L, TB) + Hi);
	if ((int)blockIdx.x >= jobs) {
		if (blockIdx.y == 0)
			mla_q_block<A, W, TB, IL, ILI>(blockIdx.x - jobs, qabs, iqo, q, wk, iq, pos, freq, cs, ifreq, ics, T, H, Dn,
			                               Dr, R, L, Hi, Di, Ri);
		return;
	}
	mla_kv_block<A, NW, IW, KIL, KILI>(blockIdx.x, blockIdx.y, latent, cache, iko, icache, kv, cw, ik, iw, ib, pos, kfreq,
	                                   kcs, ikfreq, ikcs, L, Dr, KR, KDi, KRi, eps, ieps, seq, S);
}

/*
** The MLA value absorb, any step: out[t, h, j] = o[t, h, :Dv] · wv[h, j, :Dv] (wv [H, Do, Dv], a linear-
** layout weight), reading the attention's [T, H, Dv] rows and writing [T, H, Do] directly, so the two
** permutes around the matmul are never stored. Warp w of block (x, y, h) computes the MLA_VR outputs
** j = (8x + w)·MLA_VR + r of head h = blockIdx.z for the tokens 8y .. 8y + 7 (< T).
** grid (ceil(Do / (8·MLA_VR)), ceil(T/8), H), block 256.
** Why this shape: it is a GEMV per head over a weight read once per step (16.8 MB at GLM-5's 64 heads), so
** a warp asks for all of its MLA_VR rows at once in 16-byte vectors (8 loads in flight per lane at Dv 512
** bf16) and holds them while it serves each token; the token's o row (64 KB for all heads, in L2) is
** read at use, so no block stages anything and there is no barrier. Rows whose width or alignment does
** not allow the vectors take the scalar loop (any Dv).
** MERGED (after k_mla_split<.., false>, Dv <= 512, NS <= 64): o is not read; the block forms its head's
** rows itself from the split attention's NS range states (pml, pacc, k_mla_split's layout; a range that
** did not exist has m = -inf and is skipped), as k_mla_split's own merge does, bit for bit, rounded to A
** into shared memory. Its weights are asked for first, so the merge's L2 reads overlap them. Why: one
** block merging a head group's ranges after a fence and a count was a large part of the attention's
** launch (bench/NOTES.md entry 23).
*/
template <typename A, typename W, bool MERGED = false>
__device__ void k_mla_vabsorb(A *out, const A *o, const W *wv, int T, int H, int Dv, int Do, const float *pacc = nullptr,
                              const float *pml = nullptr, int NS = 0)
{
	const int VR = MLA_VR, VE = 16 / (int)sizeof(W), CV = 2; /* rows a warp, elements a vector, vectors a chunk */
	GLM_SH16(A, om, [MERGED ? 8 * 512 : 1]); /* MERGED: tokens t0.. t0 + 7's rows of head h */
	GLM_SH_AFTER(om, float, wx, [MERGED ? 8 * 64 : 1]);
	GLM_SH_AFTER(wx, float, lm, [MERGED ? 8 : 1]);
	int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, j0 = (blockIdx.x * (blockDim.x >> 5) + warp) * VR;
	int t0 = blockIdx.y * 8, tn = T - t0 < 8 ? T - t0 : 8;
	long long h = blockIdx.z;
	bool on = j0 < Do; /* uniform per warp; a warp past Do still takes part in the merge's barriers */
	const W *wr = wv + (h * Do + (on ? j0 : 0)) * Dv;
	/* token t0's row; token t0 + t is ostep further */
	const A *orow = MERGED ? om : o + ((long long)t0 * H + h) * Dv;
	long long ostep = MERGED ? Dv : (long long)H * Dv;
	bool vec = Dv % (32 * VE) == 0 && ((unsigned long long)wr & 15) == 0 &&
	           ((unsigned long long)orow & (VE * sizeof(A) >= 16 ? 15 : VE * sizeof(A) - 1)) == 0;
	typedef union {
		uint4 q;
		W e[VE];
	} WVec;
	int nv = Dv / (32 * VE); /* vectors a lane takes from each row */
	/* the chunk of CV vectors from v0 of each row, zeros past the rows or the vectors */
	auto load = [&](WVec (&wb)[VR][CV], int v0) {
#pragma unroll
		for (int r = 0; r < VR; r++)
#pragma unroll
			for (int q = 0; q < CV; q++)
				wb[r][q].q = j0 + r < Do && v0 + q < nv
				                 ? __ldg((const uint4 *)(wr + (long long)r * Dv + ((v0 + q) * 32 + lane) * VE))
				                 : make_uint4(0u, 0u, 0u, 0u);
	};
	WVec wb[VR][CV];
	bool once = vec && nv <= CV; /* the rows in one chunk (GLM's Dv 512 in bf16): loaded once for all tokens */
	if (once && on)
		load(wb, 0);
	if (MERGED) {
		if (warp < tn) /* token t0 + warp: its ranges' weights */
			lm[warp] = mla_merge_weights(pml + ((long long)(t0 + warp) * NS * H + h) * 2, NS, (long long)H * 2,
			                             wx + warp * 64);
		__syncthreads();
		long long rs = (long long)H * Dv; /* one range's stride in pacc */
		int D4 = Dv % 4 == 0 ? Dv / 4 : 0;
		for (int e = threadIdx.x; e < tn * D4; e += blockDim.x) { /* as k_mla_split's merge, in float4 */
			int tt = e / D4, d = 4 * (e - tt * D4);
			float4 sum = mla_merge_sum4(pacc + ((long long)(t0 + tt) * NS * H + h) * Dv + d, rs, wx + tt * 64, NS);
			float l = lm[tt];
			A *os = om + tt * Dv + d;
			os[0] = from_f<A>(sum.x / l), os[1] = from_f<A>(sum.y / l);
			os[2] = from_f<A>(sum.z / l), os[3] = from_f<A>(sum.w / l);
		}
		for (int e = threadIdx.x; !D4 && e < tn * Dv; e += blockDim.x) {
			int tt = e / Dv, d = e - tt * Dv;
			float sum = mla_merge_sum1(pacc + ((long long)(t0 + tt) * NS * H + h) * Dv + d, rs, wx + tt * 64, NS);
			om[tt * Dv + d] = from_f<A>(sum / lm[tt]);
		}
		__syncthreads();
	}
	if (!on)
		return;
	/* token t's sums of the rows against o, stored: one accumulator a row, so a step of one token
	** holds no more than its rows' vectors */
	auto store = [&](int t, float (&acc)[VR]) {
#pragma unroll
		for (int r = 0; r < VR; r++) {
			float s = warp_sum(acc[r]);
			if (lane == 0 && j0 + r < Do)
				out[((long long)(t0 + t) * H + h) * Do + j0 + r] = from_f<A>(s);
		}
	};
	if (!vec) {
		for (int t = 0; t < tn; t++) {
			float acc[VR] = {};
			for (int i = lane; i < Dv; i += 32)
#pragma unroll
				for (int r = 0; r < VR; r++)
					acc[r] += to_f(orow[t * ostep + i]) * (j0 + r < Do ? to_f(wr[(long long)r * Dv + i]) : 0.0f);
			store(t, acc);
		}
		return;
	}
	/* acc[r] += token t's o against the chunk */
	auto dot = [&](float (&acc)[VR], const WVec (&wb)[VR][CV], int t, int v0) {
#pragma unroll
		for (int q = 0; q < CV; q++) {
			if (v0 + q >= nv)
				break;
			ActVec<A, VE> xv;
			if (MERGED)
				xv.load_plain(orow + t * ostep + ((v0 + q) * 32 + lane) * VE);
			else
				xv.load(orow + t * ostep + ((v0 + q) * 32 + lane) * VE);
#pragma unroll
			for (int r = 0; r < VR; r++)
#pragma unroll
				for (int c4 = 0; c4 < VE / 4; c4++)
					acc[r] += to_f(xv.v.e[4 * c4]) * to_f(wb[r][q].e[4 * c4]) +
					          to_f(xv.v.e[4 * c4 + 1]) * to_f(wb[r][q].e[4 * c4 + 1]) +
					          to_f(xv.v.e[4 * c4 + 2]) * to_f(wb[r][q].e[4 * c4 + 2]) +
					          to_f(xv.v.e[4 * c4 + 3]) * to_f(wb[r][q].e[4 * c4 + 3]);
		}
	};
	if (once) {
		for (int t = 0; t < tn; t++) {
			float acc[VR] = {};
			dot(acc, wb, t, 0);
			store(t, acc);
		}
		return;
	}
	for (int t = 0; t < tn; t++) { /* longer rows: chunk by chunk, again for each token (from L2) */
		float acc[VR] = {};
		for (int v0 = 0; v0 < nv; v0 += CV) {
			load(wb, v0);
			dot(acc, wb, t, v0);
		}
		store(t, acc);
	}
}

/*
** MoE routing and the chosen experts' weights of row t = blockIdx.x in one kernel, so the decode step
** pays one launch and reads the logits once: k_moe_route's choice and k_moe_weights' weights (with their
** own function wsigmoid), bit for bit. grid (T), block a multiple of 32 (glmc emits 256); E <= 1024.
** Why not moe_route_warp: one warp picks the k experts in k dependent rounds after 8 double exps a lane
** and then forms the weights, a long serial chain at GLM-5's E 256 (bench/NOTES.md entry 17). Here
** thread e scores expert e, every expert's rank comes from one pass over the keys (rank =
** the experts ahead of it: a larger key, or an equal key and a lower index, the order of the rounds'
** picks), and the expert of rank r < k is slot r; slots past E get -1, as a round that finds none.
** The groups (n_group > 1, topk_group < n_group) and the softmax (warp 0) are moe_route_warp's steps.
*/
template <typename A, typename B_>
__device__ void k_moe_route_weights(int *idx, A *w, const A *logits, const B_ *bias, int E, int k, int n_group,
                                    int topk_group, int sigmoid, int wsigmoid, int norm, float scale)
{
	GLM_SH(float, ch, [1024]);
	GLM_SH16_AFTER(ch, unsigned, key, [1024]);
	GLM_SH_AFTER(key, double, ex, [1024]); /* softmax exps, then the picks' scores */
	GLM_SH_AFTER(ex, double, gsc, [1024]);
	GLM_SH_AFTER(gsc, unsigned char, keep, [1024]);
	GLM_SH_AFTER(keep, int, pick, [1024]);
	GLM_SH_AFTER(pick, float, mz_m, );
	GLM_SH_AFTER(mz_m, double, mz_z, );
	int tid = threadIdx.x, nt = blockDim.x, t = blockIdx.x;
	const A *l = logits + (long long)t * E;
	if (tid < 32) { /* the softmax's max and denominator (warp 0), when a score or weight needs them */
		float m = 0.0f;
		double z = 1.0;
		if (!sigmoid || (w && !wsigmoid))
			moe_softmax_mz<A>(l, E, m, z, sigmoid ? nullptr : ex);
		if (tid == 0)
			mz_m = m, mz_z = z;
	}
	__syncthreads();
	float m = mz_m;
	double z = mz_z;
	for (int e = tid; e < E; e += nt) {
		double s = sigmoid ? 1.0 / (1.0 + exp(-(double)to_f(l[e]))) : ex[e] / z;
		ch[e] = (float)s + (bias ? to_f(bias[e]) : 0.0f);
	}
	bool grouped = n_group > 1 && topk_group < n_group;
	int per = grouped ? E / n_group : E;
	if (grouped) {
		__syncthreads();
		moe_group_scores(gsc, ch, n_group, per, tid, nt);
		__syncthreads();
		moe_group_keep(keep, gsc, n_group, topk_group, tid, nt);
	}
	__syncthreads();
	int n4 = (E + 3) >> 2; /* keys in 16-byte vectors, padded with 0 (no expert's key, ranked after all) */
	for (int e = tid; e < 4 * n4; e += nt)
		key[e] = e >= E ? 0u : moe_key(grouped && !keep[e / per] ? neg_inf() : ch[e]);
	__syncthreads();
	int *out = idx + (long long)t * k;
	for (int e = tid; e < E; e += nt) {
		unsigned ke = key[e];
		int r = 0;
#pragma unroll 8
		for (int j4 = 0; j4 < n4; j4++) { /* independent broadcast loads: no chain of E shared reads */
			uint4 q = ((const uint4 *)key)[j4];
			int j = 4 * j4;
			r += (q.x > ke || (q.x == ke && j < e)) + (q.y > ke || (q.y == ke && j + 1 < e)) +
			     (q.z > ke || (q.z == ke && j + 2 < e)) + (q.w > ke || (q.w == ke && j + 3 < e));
		}
		if (r < k) {
			out[r] = e;
			pick[r] = e;
		}
	}
	for (int r = E + tid; r < k; r += nt)
		out[r] = -1, pick[r] = -1;
	if (!w)
		return;
	__syncthreads(); /* the picks; every thread is past its reads of ex */
	moe_weights_row<A>(w + (long long)t * k, pick, l, E, k, wsigmoid, norm, scale, m, z, ex);
}

/* Batch q of k_moe_down_fused's pipelined path into raw (this lane's U 16-byte vectors, zeros past the
** row or for a skipped expert): q < nq is vectors (q % nb)*U .. of expert slot q / nb's down row, after
** that the shared expert's row (batches of U of its nls vectors). Each load in its own guarded block, as
** k_moe_down's batches, so the whole batch is in flight at once. */
template <typename W, typename WS, int U>
__device__ __forceinline__ void moe_dfused_batch(uint4 (&raw)[U], const int *idx, const W *down, const WS *srow, int C,
                                                 int F, int k, int c, int t, int lane, int nl, int nb, int nq, int nls,
                                                 int q)
{
	const uint4 *p;
	int n, v0;
	if (q < nq) {
		int j = q / nb, ex = idx[(long long)t * k + j];
		p = (const uint4 *)(down + ((long long)(ex < 0 ? 0 : ex) * C + c) * F);
		n = ex < 0 ? 0 : nl, v0 = (q - j * nb) * U;
	} else {
		p = (const uint4 *)srow, n = nls, v0 = (q - nq) * U;
	}
#pragma unroll
	for (int u = 0; u < U; u++) {
		if (v0 + u < n)
			raw[u] = __ldg(p + lane + (v0 + u) * 32);
		else
			raw[u] = make_uint4(0u, 0u, 0u, 0u);
	}
}

/* k_moe_down_fused's staging: the first n4 float4 of hr (token t's k rows of hid) into hx and, when
** SHARED, silu(g)·u over Fs (rounded to A as k_swiglu stores it) into sx. Every thread issues all its
** loads (up to 8 float4 of hid and 2 vectors each of g and u, enough for MOE_HX and MOE_SX at 256
** threads) before it uses the first: a loop that computes between its loads pays one L2 round trip
** per element (the SwiGLU's division branches), 6 of them before any weight is asked for on
** GLM-4.7-Flash. Elements past those (smaller blocks) go by the plain loop. */
template <typename A, bool SHARED>
__device__ __forceinline__ void moe_dfused_stage(float *sx, float *hx, const float *hr, int n4, const A *gt,
                                                 const A *ut, int Fs)
{
	constexpr int NH = 8, NS = 2, VA = 16 / (int)sizeof(A);
	int tid = threadIdx.x, bd = blockDim.x;
	bool sv = SHARED && ((((unsigned long long)gt | (unsigned long long)ut) & 15) == 0) && Fs % VA == 0;
	int nvs = sv ? Fs / VA : 0;
	float4 hv[NH];
	uint4 gv[NS], uv[NS];
#pragma unroll
	for (int i = 0; i < NH; i++)
		if (tid + i * bd < n4)
			hv[i] = __ldg((const float4 *)hr + tid + i * bd);
#pragma unroll
	for (int i = 0; i < NS; i++)
		if (tid + i * bd < nvs) {
			gv[i] = __ldg((const uint4 *)gt + tid + i * bd);
			uv[i] = __ldg((const uint4 *)ut + tid + i * bd);
		}
#pragma unroll
	for (int i = 0; i < NH; i++)
		if (tid + i * bd < n4)
			((float4 *)hx)[tid + i * bd] = hv[i];
	for (int i = tid + NH * bd; i < n4; i += bd)
		((float4 *)hx)[i] = __ldg((const float4 *)hr + i);
	if constexpr (SHARED) {
#pragma unroll
		for (int i = 0; i < NS; i++)
			if (tid + i * bd < nvs) {
				union {
					uint4 bits;
					A e[VA];
				} ga, ua;
				ga.bits = gv[i], ua.bits = uv[i];
				int f0 = (tid + i * bd) * VA;
#pragma unroll
				for (int e = 0; e < VA; e++) {
					float x = to_f(ga.e[e]);
					sx[f0 + e] = to_f(from_f<A>(x / (1.0f + expf(-x)) * to_f(ua.e[e])));
				}
			}
		/* the rest, element by element (a vector's VA at a time when sv) */
		for (int f = sv ? (NS * bd + tid) * VA : tid; f < Fs; f += sv ? bd * VA : bd) {
			int ne = sv ? VA : 1;
			for (int e = 0; e < ne; e++) {
				float x = to_f(gt[f + e]);
				sx[f + e] = to_f(from_f<A>(x / (1.0f + expf(-x)) * to_f(ut[f + e])));
			}
		}
	}
}

/*
** The end of a MoE layer for the decode step, for output column c (one warp, c = blockIdx.x*8 + warp) of
** token t = blockIdx.y: the routed experts' down projections summed with their weights exactly as
** k_moe_down (from the scratch hid k_moe_up filled), stored as A; with SHARED, the shared expert's
** down projection sdown[c, :Fs] · silu(g[t])·u[t] (the SwiGLU rounded to A as k_swiglu stores it, the
** product as the linear stores it) added (rounded to A as the add stores it); with RES, the residual
** r[t, c] added last. y may equal r (the same thread reads r[t, c] before writing y[t, c]).
** grid (ceil(C/8), T), block 256.
**
** Why pipelined: a warp's rows (k experts and the shared one, 3 KB each on GLM-4.7-Flash) are short, so
** a loop that waits for each load before the next leaves the memory system idle (bench/NOTES.md entry
** 22). When every row is 16-byte aligned and whole vectors, the warp streams its rows as one
** list of batches of U vectors per lane, the next batch in flight while this one is summed; the shared
** SwiGLU is formed once per block into shared memory (when Fs <= MOE_SX), not once per column, and so
** are token t's k rows of hid when they fit (k·F <= MOE_HX): otherwise each warp reads them again
** through L1 and L2, more bytes than its weights (bench/NOTES.md entry 22).
*/
#define MOE_SX 4096
#define MOE_HX 8192
template <typename A, typename W, typename WS, bool SHARED, bool RES>
__device__ void k_moe_down_fused(A *y, const float *hid, const int *idx, const A *w, const W *down, int C, int F, int k,
                                 const WS *sdown, const A *g, const A *u, int Fs, const A *r)
{
	const int VEC = 16 / (int)sizeof(W), VS = 16 / (int)sizeof(WS), U = 8;
	GLM_SH(float, sx, [SHARED ? MOE_SX : 1]);
	GLM_SH16_AFTER(sx, float, hx, [MOE_HX]);
	int lane = threadIdx.x & 31, t = blockIdx.y;
	int c = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
	bool piped = (((unsigned long long)down | (unsigned long long)hid) & 15) == 0 && F % VEC == 0 &&
	             (!SHARED || ((((unsigned long long)sdown & 15) == 0) && Fs % VS == 0 && Fs <= MOE_SX));
	if (piped) {
		bool hsm = k * F <= MOE_HX; /* token t's hid rows staged in hx */
		moe_dfused_stage<A, SHARED>(sx, hx, hid + (long long)t * k * F, hsm ? k * F / 4 : 0,
		                            SHARED ? g + (long long)t * Fs : nullptr, SHARED ? u + (long long)t * Fs : nullptr,
		                            Fs);
		if (SHARED || hsm)
			__syncthreads(); /* before any warp leaves: uniform per block */
		if (c >= C) /* uniform per warp */
			return;
		/* nb, nbs from lane 0's counts (the largest), so every lane ends a row at the same batch */
		int nv = F / VEC, nl = nv > lane ? (nv - lane + 31) >> 5 : 0, nb = (((nv + 31) >> 5) + U - 1) / U;
		int nvs = SHARED ? Fs / VS : 0, nls = nvs > lane ? (nvs - lane + 31) >> 5 : 0;
		int nbs = (((nvs + 31) >> 5) + U - 1) / U, nq = k * nb, nall = nq + nbs;
		const WS *srow = SHARED ? sdown + (long long)c * Fs : nullptr;
		uint4 raw[U];
		float acc = 0.0f, s = 0.0f, sh = 0.0f;
		if (nall > 0)
			moe_dfused_batch<W, WS, U>(raw, idx, down, srow, C, F, k, c, t, lane, nl, nb, nq, nls, 0);
		for (int q = 0; q < nall; q++) {
			uint4 cur[U];
#pragma unroll
			for (int i = 0; i < U; i++)
				cur[i] = raw[i];
			if (q + 1 < nall)
				moe_dfused_batch<W, WS, U>(raw, idx, down, srow, C, F, k, c, t, lane, nl, nb, nq, nls, q + 1);
			if (q < nq) {
				int j = q / nb, v0 = (q - j * nb) * U;
				const float *hr = hsm ? hx + j * F : hid + ((long long)t * k + j) * F;
#pragma unroll
				for (int i = 0; i < U; i++) {
					if (v0 + i >= nl)
						break;
					union {
						uint4 bits;
						W e[VEC];
					} dv;
					dv.bits = cur[i];
					const float4 *hp = (const float4 *)(hr + (lane + (v0 + i) * 32) * VEC);
#pragma unroll
					for (int c4 = 0; c4 < VEC / 4; c4++) {
						float4 hv = hsm ? hp[c4] : __ldg(hp + c4);
						s += hv.x * to_f(dv.e[4 * c4]) + hv.y * to_f(dv.e[4 * c4 + 1]) +
						     hv.z * to_f(dv.e[4 * c4 + 2]) + hv.w * to_f(dv.e[4 * c4 + 3]);
					}
				}
				if ((q + 1) % nb == 0) { /* the end of slot j's row (uniform per warp) */
					long long slot = (long long)t * k + j;
					s = warp_sum(s);
					if (idx[slot] >= 0)
						acc += to_f(w[slot]) * s;
					s = 0.0f;
				}
			} else {
				int v0 = (q - nq) * U;
#pragma unroll
				for (int i = 0; i < U; i++) {
					if (v0 + i >= nls)
						break;
					union {
						uint4 bits;
						WS e[VS];
					} wv;
					wv.bits = cur[i];
					const float *xp = sx + (lane + (v0 + i) * 32) * VS;
#pragma unroll
					for (int e = 0; e < VS; e++)
						sh += xp[e] * to_f(wv.e[e]);
				}
			}
		}
		float out = to_f(from_f<A>(acc));
		if (SHARED) {
			sh = warp_sum(sh);
			out = to_f(from_f<A>(out + to_f(from_f<A>(sh))));
		}
		if (lane == 0) {
			long long at = (long long)t * C + c;
			if (RES)
				out = to_f(r[at]) + out;
			y[at] = from_f<A>(out);
		}
		return;
	}
	/* any other shape: one warp per column, each row element by element or 16 bytes a lane */
	if (c >= C) /* uniform per warp */
		return;
	bool vec = (((unsigned long long)down | (unsigned long long)hid) & 15) == 0 && F % VEC == 0;
	float acc = 0.0f;
	for (int j = 0; j < k; j++) {
		long long slot = (long long)t * k + j;
		int ex = idx[slot];
		if (ex < 0)
			continue;
		const W *dr = down + ((long long)ex * C + c) * F;
		const float *hr = hid + slot * F;
		float s = 0.0f;
		if (vec) {
#pragma unroll 2
			for (int kb = lane * VEC; kb < F; kb += 32 * VEC) {
				union {
					uint4 bits;
					W e[VEC];
				} dv;
				dv.bits = __ldg((const uint4 *)(dr + kb));
				const float4 *hp = (const float4 *)(hr + kb);
#pragma unroll
				for (int c4 = 0; c4 < VEC / 4; c4++) {
					float4 hv = __ldg(hp + c4);
					s += hv.x * to_f(dv.e[4 * c4]) + hv.y * to_f(dv.e[4 * c4 + 1]) +
					     hv.z * to_f(dv.e[4 * c4 + 2]) + hv.w * to_f(dv.e[4 * c4 + 3]);
				}
			}
		} else {
			for (int i = lane; i < F; i += 32)
				s += to_f(dr[i]) * hr[i];
		}
		s = warp_sum(s);
		acc += to_f(w[slot]) * s;
	}
	float out = to_f(from_f<A>(acc));
	if (SHARED) {
		const WS *sr = sdown + (long long)c * Fs;
		const A *gt = g + (long long)t * Fs, *ut = u + (long long)t * Fs;
		float s = 0.0f;
		if (((unsigned long long)sdown & 15) == 0 && Fs % VS == 0) {
			/* a 16-byte vector of the weight row per lane, the SwiGLU formed element by element */
			for (int f0 = lane * VS; f0 < Fs; f0 += 32 * VS) {
				union {
					uint4 bits;
					WS e[VS];
				} wv;
				wv.bits = __ldg((const uint4 *)(sr + f0));
#pragma unroll
				for (int i = 0; i < VS; i++) {
					float gv = to_f(gt[f0 + i]);
					s += to_f(from_f<A>(gv / (1.0f + expf(-gv)) * to_f(ut[f0 + i]))) * to_f(wv.e[i]);
				}
			}
		} else {
			for (int f = lane; f < Fs; f += 32) {
				float gv = to_f(gt[f]);
				s += to_f(from_f<A>(gv / (1.0f + expf(-gv)) * to_f(ut[f]))) * to_f(sr[f]);
			}
		}
		s = warp_sum(s);
		out = to_f(from_f<A>(out + to_f(from_f<A>(s))));
	}
	if (lane == 0) {
		long long at = (long long)t * C + c;
		if (RES)
			out = to_f(r[at]) + out;
		y[at] = from_f<A>(out);
	}
}

/* ======================================================================================================
** Split-context ("flash-decoding") attention for grouped-query decode steps (issue 46): k_attn_split and
** k_attn_split_rope, with their shared body attn_split_run. glmc emits them for steps of 1 to 8 tokens
** whenever k_attn_step's rows suit (compiler/passes/emit_cuda.c emit_attention), in place of k_attn_step
** and k_attn_step_rope.
** ====================================================================================================== */

/* The geometry of the split attention: blocks of NT = 256 threads serving HB q heads of one kv head; a
** cache row of ROWB bytes is RL lanes of 16 bytes (one worker), NWK workers a block, U keys a worker a
** round (2 at 8 heads a block: 16 accumulators a lane and head already hold the registers). HB·D <= 1024
** bounds the block's shared merge area (8 warps × HB × D floats = 32 KiB). */
template <typename A, int ROWB, int HB>
struct AttnSplit {
	static constexpr int D = ROWB / (int)sizeof(A), VEC = 16 / (int)sizeof(A), RL = ROWB / 16;
	static constexpr int NT = 256, NWARP = NT / 32, NWK = NT / RL;
	static constexpr int U = HB >= 8 ? 2 : 4;
	static_assert(RL == 8 || RL == 16 || RL == 32, "rows of 128, 256 or 512 bytes");
	static_assert(HB >= 1 && HB <= NWARP && HB * D <= 1024, "1 to 8 heads a block, HB·D <= 1024");
};

/* The ranges the split attention cuts a context of n >= 1 rows into: at most ns (the launch's gridDim.x),
** each of len = ceil(n / ranges) contiguous rows and none empty, and at least ATTN_SPLIT_MINR rows a range
** when there are several (one round of a bf16 128-dim block: 16 workers × 4 keys), so a context of fewer
** than 128 rows runs in one block per head group that writes the output itself (no states, no merge). */
#define ATTN_SPLIT_MINR 64
__host__ __device__ __forceinline__ int attn_split_ranges(int n, int ns, int *len)
{
	int r = n / ATTN_SPLIT_MINR;
	r = r < 1 ? 1 : r > ns ? ns : r;
	int L = (n + r - 1) / r;
	L = L < 1 ? 1 : L;
	*len = L;
	r = (n + L - 1) / L;
	return r < 1 ? 1 : r;
}

/*
** The body of both split kernels, for the block (range x = blockIdx.x, head group blockIdx.y, token t):
** the HB heads h0.. of kv head g, whose q rows (float, already rounded as the unfused path rounds them)
** are qs[HB·D] in shared memory, over cache rows [lo, hi) of the slot starting at row `base`, plus (ks
** not nullptr) one more key and value ks[D], vs[D] after them (the step's own row, k_attn_split_rope).
** Each worker keeps per head a running max, sum and accumulator (attn_step_keys' loop, each k and v row
** read once for the HB heads); the workers of a warp merge through shuffles, the warps through shared
** memory, in a fixed order. With nr = 1 range the block writes y itself. Otherwise it writes the range's
** state at pacc[((t·NS + x)·H + h)·D + d] (unnormalised) and pml[((t·NS + x)·H + h)·2 + {0, 1}] (max, sum)
** and counts itself in done[t·gridDim.y + blockIdx.y]; the last of the nr blocks to count puts the counter
** back to 0 and merges the nr states in range order (mla_merge_weights / mla_merge_sum4, as k_mla_split),
** so the output does not depend on which block finished last. Every range holds a key (m finite, l > 0).
*/
template <typename A, int ROWB, int HB>
__device__ __forceinline__ void attn_split_run(A *y, float *pacc, float *pml, int *done, const float *qs,
                                               const float *ks, const float *vs, const A *kcache, const A *vcache,
                                               long long base, int H, int G, int t, int lo, int hi, int nr, float scale)
{
	using P = AttnSplit<A, ROWB, HB>;
	constexpr int D = P::D, VEC = P::VEC, RL = P::RL, NWK = P::NWK, U = P::U, NWARP = P::NWARP, NT = P::NT;
	__shared__ float wm[NWARP][HB], wl[NWARP][HB];
	__shared__ __align__(16) float wacc[NWARP][HB * D];
	int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sl = lane % RL, seg = lane / RL, wk = tid / RL;
	int NS = gridDim.x, x = blockIdx.x, h0 = blockIdx.y * HB, g = h0 / (H / G);
	long long RW = (long long)G * D; /* cache row stride */
	const A *kg = kcache + base * RW + (long long)g * D + sl * VEC;
	const A *vg = vcache + base * RW + (long long)g * D + sl * VEC;
	float qr[HB][VEC], acc[HB][VEC], m[HB], l[HB];
#pragma unroll
	for (int hh = 0; hh < HB; hh++) {
		m[hh] = neg_inf(), l[hh] = 0.0f;
#pragma unroll
		for (int i = 0; i < VEC; i++)
			qr[hh][i] = qs[hh * D + sl * VEC + i], acc[hh][i] = 0.0f;
	}
	/* rounds by warp (its first key j0 - seg·U is what the loop tests), so all 32 lanes take the shuffles */
	for (int j0 = lo + wk * U; j0 - seg * U < hi; j0 += NWK * U) {
		uint4 kr[U], vr[U];
#pragma unroll
		for (int u = 0; u < U; u++) { /* keys past hi re-read row hi - 1 (>= lo); their p is 0 */
			long long j = j0 + u < hi ? j0 + u : hi - 1;
			kr[u] = __ldg((const uint4 *)(kg + j * RW));
			vr[u] = __ldg((const uint4 *)(vg + j * RW));
		}
		float s[U][HB];
#pragma unroll
		for (int u = 0; u < U; u++) {
			union {
				uint4 bits;
				A e[VEC];
			} kv;
			kv.bits = kr[u];
			float kf[VEC];
#pragma unroll
			for (int i = 0; i < VEC; i++)
				kf[i] = to_f(kv.e[i]);
#pragma unroll
			for (int hh = 0; hh < HB; hh++) {
				float d = 0.0f;
#pragma unroll
				for (int i = 0; i < VEC; i++)
					d += qr[hh][i] * kf[i];
#pragma unroll
				for (int o = RL / 2; o > 0; o >>= 1) /* the row's lanes: an aligned group of RL */
					d += __shfl_xor_sync(0xffffffffu, d, o);
				s[u][hh] = j0 + u < hi ? d * scale : neg_inf();
			}
		}
#pragma unroll
		for (int hh = 0; hh < HB; hh++) {
			float mn = m[hh];
#pragma unroll
			for (int u = 0; u < U; u++)
				mn = fmaxf(mn, s[u][hh]);
			/* c = 0 on a worker's first round with a key (m = -inf); mn = -inf: no key yet, nothing changes */
			float c = mn == neg_inf() ? 1.0f : expf(m[hh] - mn);
			l[hh] *= c;
#pragma unroll
			for (int i = 0; i < VEC; i++)
				acc[hh][i] *= c;
			m[hh] = mn;
		}
#pragma unroll
		for (int u = 0; u < U; u++) {
			union {
				uint4 bits;
				A e[VEC];
			} vv;
			vv.bits = vr[u];
			float vf[VEC];
#pragma unroll
			for (int i = 0; i < VEC; i++)
				vf[i] = to_f(vv.e[i]);
#pragma unroll
			for (int hh = 0; hh < HB; hh++) {
				float p = s[u][hh] == neg_inf() ? 0.0f : expf(s[u][hh] - m[hh]);
				l[hh] += p;
#pragma unroll
				for (int i = 0; i < VEC; i++)
					acc[hh][i] += p * vf[i];
			}
		}
	}
	if (ks && warp == 0) { /* the step's own key, by worker 0 (warp 0's lanes all take the shuffles) */
#pragma unroll
		for (int hh = 0; hh < HB; hh++) {
			float d = 0.0f;
#pragma unroll
			for (int i = 0; i < VEC; i++)
				d += qr[hh][i] * ks[sl * VEC + i];
#pragma unroll
			for (int o = RL / 2; o > 0; o >>= 1)
				d += __shfl_xor_sync(0xffffffffu, d, o);
			if (wk == 0) {
				float sc = d * scale, mn = fmaxf(m[hh], sc);
				float c = m[hh] == neg_inf() ? 0.0f : expf(m[hh] - mn), e = expf(sc - mn);
				l[hh] = l[hh] * c + e;
#pragma unroll
				for (int i = 0; i < VEC; i++)
					acc[hh][i] = acc[hh][i] * c + e * vs[sl * VEC + i];
				m[hh] = mn;
			}
		}
	}
	/* the workers of a warp (segments of RL lanes) merged pairwise by shuffles; segment 0 ends with the sum */
#pragma unroll
	for (int o = RL; o < 32; o <<= 1) {
#pragma unroll
		for (int hh = 0; hh < HB; hh++) {
			float mo = __shfl_xor_sync(0xffffffffu, m[hh], o), lo2 = __shfl_xor_sync(0xffffffffu, l[hh], o);
			float mx = fmaxf(m[hh], mo);
			float a = m[hh] == neg_inf() ? 0.0f : expf(m[hh] - mx), b = mo == neg_inf() ? 0.0f : expf(mo - mx);
			l[hh] = l[hh] * a + lo2 * b;
#pragma unroll
			for (int i = 0; i < VEC; i++) {
				float ao = __shfl_xor_sync(0xffffffffu, acc[hh][i], o);
				acc[hh][i] = acc[hh][i] * a + ao * b;
			}
			m[hh] = mx;
		}
	}
	if (seg == 0) {
#pragma unroll
		for (int hh = 0; hh < HB; hh++) {
			if (sl == 0)
				wm[warp][hh] = m[hh], wl[warp][hh] = l[hh];
#pragma unroll
			for (int i = 0; i < VEC; i++)
				wacc[warp][hh * D + sl * VEC + i] = acc[hh][i];
		}
	}
	__syncthreads();
	long long b = ((long long)t * NS + x) * H + h0; /* this range's state of head h0 */
	for (int e = tid; e < HB * D; e += NT) {
		int hh = e / D;
		float mx = neg_inf(), sum = 0.0f, o = 0.0f;
#pragma unroll
		for (int w = 0; w < NWARP; w++)
			mx = fmaxf(mx, wm[w][hh]);
#pragma unroll
		for (int w = 0; w < NWARP; w++) { /* a warp that saw no key: m = -inf, weight 0 */
			float wt = wm[w][hh] == neg_inf() ? 0.0f : expf(wm[w][hh] - mx);
			sum += wl[w][hh] * wt;
			o += wacc[w][e] * wt;
		}
		if (nr == 1) {
			y[((long long)t * H + h0) * D + e] = from_f<A>(o / sum);
		} else {
			pacc[b * D + e] = o;
			if (e - hh * D == 0)
				pml[(b + hh) * 2] = mx, pml[(b + hh) * 2 + 1] = sum;
		}
	}
	if (nr == 1) /* uniform per block */
		return;

	/* Count this range done; the last one of (t, group) merges them all (the threadFenceReduction
	** pattern, as k_mla_split). */
	__shared__ int last;
	__shared__ float wx[HB * 256], linv[HB];
	__threadfence();
	__syncthreads();
	if (tid == 0) {
		int *c = done + (long long)t * gridDim.y + blockIdx.y;
		last = atomicAdd(c, 1) == nr - 1;
		if (last)
			*c = 0; /* all nr ranges have counted: clear it for the next launch */
	}
	__syncthreads();
	if (!last)
		return;
	__threadfence();
	const float *ml = pml + ((long long)t * NS * H + h0) * 2, *pa = pacc + ((long long)t * NS * H + h0) * D;
	long long ms = (long long)H * 2, as = (long long)H * D; /* strides of one range */
	if (warp < HB) { /* head h0 + warp: the weights of the ranges and the denominator */
		float sum = mla_merge_weights(ml + warp * 2, nr, ms, wx + warp * 256);
		if (lane == 0)
			linv[warp] = sum;
	}
	__syncthreads();
	A *yb = y + ((long long)t * H + h0) * D;
	for (int e = tid; e < HB * D / 4; e += NT) {
		int hh = e / (D / 4), d = 4 * (e - hh * (D / 4));
		float4 sum = mla_merge_sum4(pa + hh * D + d, as, wx + hh * 256, nr);
		float li = linv[hh];
		A *o = yb + hh * D + d;
		o[0] = from_f<A>(sum.x / li), o[1] = from_f<A>(sum.y / li);
		o[2] = from_f<A>(sum.z / li), o[3] = from_f<A>(sum.w / li);
	}
}

/* Asks L1 for this thread's worker's first round of cache rows [lo, hi) (k and v of kv head g in the slot
** starting at row `base`; one 128-byte line per 8 lanes), so that they are on their way while the block
** stages q and the loop's first loads hit (as k_attn_step_rope asks for its first round). */
template <typename A, int ROWB, int HB>
__device__ __forceinline__ void attn_split_prefetch(const A *kcache, const A *vcache, long long base, int G, int g,
                                                    int lo, int hi)
{
	using P = AttnSplit<A, ROWB, HB>;
	int sl = (threadIdx.x & 31) % P::RL, wk = threadIdx.x / P::RL;
	if (sl % 8)
		return;
	long long RW = (long long)G * P::D;
	const A *kg = kcache + base * RW + (long long)g * P::D + sl * P::VEC;
	const A *vg = vcache + base * RW + (long long)g * P::D + sl * P::VEC;
	for (int u = 0; u < P::U; u++) {
		long long j = lo + wk * P::U + u;
		if (j < hi) {
			glm_prefetch_l1(kg + j * RW);
			glm_prefetch_l1(vg + j * RW);
		}
	}
}

/*
** Split-context causal attention for decode steps of up to 8 tokens: k_attn_step's result (same q, cache,
** pos, seq and S contract; Dk = Dv = D = ROWB / sizeof(A)), y[t, h·D + d], with token t = blockIdx.z's
** context rows 0..pos[t] of slot seq[t] cut into nr = attn_split_ranges(pos[t] + 1, NS) contiguous ranges,
** NS = gridDim.x: block x takes range x of head group blockIdx.y (HB heads of one kv head; HB divides
** H / G). Blocks x >= nr exit at once, so one launch geometry (fixed at plan time, as CUDA graphs need)
** serves any position. Scratch: pacc T·NS·H·D floats, pml T·NS·H·2 floats; done T·(H/HB) ints, zero
** before the launch (a KA_ZERO region) and zero after it. The caches must be 16-byte aligned (glmrun's
** are 256-byte aligned; else it traps). grid (NS, H / HB, T), block 256 (attn_split_run).
**
** Why: k_attn_step runs one block per (head, token), H blocks on a 1-token step: 32 on Llama-3-8B for an
** H100's 132 SMs, each walking the whole context, and each kv head's rows read by H / G blocks. Here
** NS·H/HB blocks share the context and each cache row is read once for the HB heads it serves.
*/
template <typename A, int ROWB, int HB>
__device__ void k_attn_split(A *y, float *pacc, float *pml, int *done, const A *q, const A *kcache, const A *vcache,
                             const int *pos, int H, int G, float scale, const int *seq, int S)
{
	constexpr int D = AttnSplit<A, ROWB, HB>::D;
	GLM_SH16(float, qs, [HB * D]);
	if (((unsigned long long)kcache | (unsigned long long)vcache) % 16)
		__trap(); /* a fallback loop would cost this kernel registers */
	int t = blockIdx.z, n = pos[t] + 1, L, nr = attn_split_ranges(n, gridDim.x, &L), x = blockIdx.x;
	if (x >= nr) /* uniform per block: this range does not exist for this token */
		return;
	int h0 = blockIdx.y * HB, lo = x * L, hi = lo + L < n ? lo + L : n;
	long long base = (long long)seq[t] * S;
	attn_split_prefetch<A, ROWB, HB>(kcache, vcache, base, G, h0 / (H / G), lo, hi);
	const A *qb = q + ((long long)t * H + h0) * D;
	for (int e = threadIdx.x; e < HB * D; e += blockDim.x)
		qs[e] = to_f(qb[e]);
	__syncthreads();
	attn_split_run<A, ROWB, HB>(y, pacc, pml, done, qs, nullptr, nullptr, kcache, vcache, base, H, G, t, lo, hi, nr,
	                            scale);
}

/*
** k_attn_split for a 1-token step with the rotary and the k/v cache writes folded in, as k_attn_step_rope
** does them (fuse.c's ROPE_KV for 1-token steps): each block rotates its HB raw q rows and the raw k row of
** its kv head g at p = pos[0] (tables qfreq/kfreq, multipliers qcs/kcs, pairs as IL, the first R dims,
** each result rounded to A, rope_pair as k_rope_qk_kv), reads cache rows [lo, min(hi, p)) of its range of
** the p + 1 rows of slot seq[0], and the block whose range ends at p + 1 adds the step's own key and value
** from those rotated rows. Block x = 0 of the first head group of each kv head writes the rotated k row
** and the v row into the caches at row p; no block reads row p from the caches, so none waits for
** another. Dk = Dv = D, R even and <= D; the caches 16-byte aligned (else it traps); scratch and done as
** k_attn_split's with T = 1. grid (NS, H / HB), block 256.
*/
template <typename A, int ROWB, int HB, bool IL>
__device__ void k_attn_split_rope(A *y, float *pacc, float *pml, int *done, A *kcache, A *vcache, const A *q,
                                  const A *k, const A *v, const int *pos, const float *qfreq, const float *kfreq,
                                  float qcs, float kcs, int H, int G, int R, float scale, const int *seq, int S)
{
	constexpr int D = AttnSplit<A, ROWB, HB>::D;
	GLM_SH16(float, qs, [HB * D]);
	GLM_SH_AFTER(qs, float, ks, [D]);
	GLM_SH_AFTER(ks, float, vs, [D]);
	if (((unsigned long long)kcache | (unsigned long long)vcache) % 16)
		__trap();
	int p = pos[0], n = p + 1, L, nr = attn_split_ranges(n, gridDim.x, &L), x = blockIdx.x;
	if (x >= nr)
		return;
	int tid = threadIdx.x, nt = blockDim.x, half = R / 2, h0 = blockIdx.y * HB, g = h0 / (H / G);
	bool writer = x == 0 && h0 % (H / G) == 0;
	long long base = (long long)seq[0] * S;
	const A *qb = q + (long long)h0 * D, *kh = k + (long long)g * D, *vh = v + (long long)g * D;
	A *kc = kcache + ((base + p) * G + g) * D, *vc = vcache + ((base + p) * G + g) * D;
	int lo = x * L, hi = lo + L < n ? lo + L : n;
	attn_split_prefetch<A, ROWB, HB>(kcache, vcache, base, G, g, lo, hi < p ? hi : p);
	for (int e = tid; e < HB * half; e += nt) { /* the q heads' rotated pairs */
		int hh = e / half, i = e - hh * half;
		int i0 = IL ? 2 * i : i, i1 = IL ? 2 * i + 1 : i + half;
		float o0, o1;
		rope_pair(to_f(qb[hh * D + i0]), to_f(qb[hh * D + i1]), (float)p, qfreq[i], qcs, o0, o1);
		qs[hh * D + i0] = to_f(from_f<A>(o0)), qs[hh * D + i1] = to_f(from_f<A>(o1));
	}
	for (int e = tid; e < HB * (D - 2 * half); e += nt) { /* and their dims past R, copied */
		int hh = e / (D - 2 * half), d = 2 * half + e - hh * (D - 2 * half);
		qs[hh * D + d] = to_f(qb[hh * D + d]);
	}
	for (int i = tid; i < half; i += nt) {
		int i0 = IL ? 2 * i : i, i1 = IL ? 2 * i + 1 : i + half;
		float o0, o1;
		rope_pair(to_f(kh[i0]), to_f(kh[i1]), (float)p, kfreq[i], kcs, o0, o1);
		A a0 = from_f<A>(o0), a1 = from_f<A>(o1);
		ks[i0] = to_f(a0), ks[i1] = to_f(a1);
		if (writer)
			kc[i0] = a0, kc[i1] = a1;
	}
	for (int d = 2 * half + tid; d < D; d += nt) {
		ks[d] = to_f(kh[d]);
		if (writer)
			kc[d] = kh[d];
	}
	for (int d = tid; d < D; d += nt) {
		vs[d] = to_f(vh[d]);
		if (writer)
			vc[d] = vh[d];
	}
	__syncthreads();
	attn_split_run<A, ROWB, HB>(y, pacc, pml, done, qs, hi == n ? ks : nullptr, vs, kcache, vcache, base, H, G, 0, lo,
	                            hi < p ? hi : p, nr, scale);
}
