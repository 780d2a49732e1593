/*
** ops/gemv_shape.h — the launch shapes of ops/kernels.cuh's gemv_core, the quantized GEMVs' splits,
** k_mla_vabsorb and k_sample, in one place for the C side (compiler/emit_cuda.c, which emits it;
** runtime/cuda.c, which launches the sampler) and the C++ host side (tests/gpu, bench/gemv.cu, which
** must launch what glmc emits). Plain C, no CUDA.
*/
#ifndef GLM_GEMV_SHAPE_H
#define GLM_GEMV_SHAPE_H

/* The shapes below take the target GPU's SM count (sms) and shared memory, which glmc reads from --arch
** (compiler/select.c's Target). They were measured on H100/H200 (sm_90): the GPU tests and bench/, which
** must launch what glmc emits for sm_90, pass these. */
#define GEMV_SMS_SM90 132            /* SMs of an H100 SXM5 / H200 */
#define GEMV_SMEM_BLOCK_SM90 232448  /* dynamic shared memory a block may opt in to, bytes (227 KB) */
#define GEMV_SMEM_SM_SM90 233472     /* shared memory of an SM, bytes (228 KB) */

/* Blocks of a GEMV with a prologue: two per SM. */
static inline long long gemv_pro_blocks(int sms)
{
	return 2LL * sms;
}

/* Ntot output columns of K weights of wsize bytes: enough threads that each streams about two 16-byte
** vectors of every row (32 to 256), and rb = 4 columns per block (so each thread has 8 loads in flight),
** fewer when that would leave under two blocks per SM (of sms). */
static inline void gemv_shape_h(long long K, long long Ntot, int wsize, int sms, int *block, int *rb)
{
	long long nvec = K * wsize / 16, bt = ((nvec + 1) / 2 + 31) / 32 * 32, b2 = gemv_pro_blocks(sms);
	*block = (int)(bt < 32 ? 32 : bt > 256 ? 256 : bt);
	*rb = Ntot >= 4 * b2 ? 4 : Ntot >= 2 * b2 ? 2 : 1;
}

/* The one-token launch of a float GEMV group with no prologue and a residual sum (the o and down
** projections): blocks of 128 threads where rows are at least 256 16-byte vectors, else gemv_shape_h's
** shape; rb = 4 columns a block from 8 columns an SM (1056 on 132 SMs: their grid then fits 8 blocks an SM,
** which gemv_min_blocks1 gives a 64-register budget), 2 from 4 an SM: faster than gemv_shape_h's 4 x 256 on
** Llama-3-8B's and GLM-4.7-Flash's o and down projections (bench/NOTES.md entries 28 and 38). The groups
** with a norm had no common best shape in that sweep and keep gemv_shape_h's. */
static inline void gemv_shape_plain1(long long K, long long Ntot, int wsize, int sms, int *block, int *rb)
{
	gemv_shape_h(K, Ntot, wsize, sms, block, rb);
	if (K * wsize / 16 >= 256) {
		long long b2 = gemv_pro_blocks(sms);
		*block = 128;
		*rb = Ntot >= 4 * b2 ? 4 : Ntot >= 2 * b2 ? 2 : 1;
	}
}

/* The one-token launch of a float GEMV group with the norm's late scale and no GLU (GEMV_PRO_RMSLATE: the
** q/k/v groups, a norm fused with the LM head): rb = 8 columns a block of 128 threads where rows are at
** least 512 16-byte vectors, a multiple of 256 (the threads' two-vector steps cover a row with no ragged
** last step), and there are 16 rows an SM (2112 on 132 SMs: two blocks an SM); else gemv_shape_h's shape.
** Why: in the sweep of bench/NOTES.md entry 31 it was faster on Llama-3-8B's q/k/v and no slower on longer
** rows, it lost on ragged rows, and shorter rows and the gate/up GLU were best elsewhere. */
static inline void gemv_shape_late1(long long K, long long Ntot, int wsize, int sms, int *block, int *rb)
{
	long long nvec = K * wsize / 16;
	gemv_shape_h(K, Ntot, wsize, sms, block, rb);
	if (nvec >= 512 && nvec % 256 == 0 && Ntot >= 8 * gemv_pro_blocks(sms)) {
		*block = 128;
		*rb = 8;
	}
}

/* The grid: one block per group of rb columns, or when there is a prologue (formed once per block) at most
** as many looping blocks of `block` threads as make gemv_pro_blocks blocks of 256: a short row gets small
** blocks, and two an SM of them would leave an SM with too few loads in flight (GLM-4.7-Flash's q_b GEMV,
** K 768: 64 threads; bench/NOTES.md entry 54), while its prologue is cheap to repeat. At most 4x as many. */
static inline unsigned gemv_grid_h(long long Ntot, int rb, int block, int prologue, int sms)
{
	long long groups = (Ntot + rb - 1) / rb, mult = block >= 256 ? 1 : 256 / block, cap;
	cap = gemv_pro_blocks(sms) * (mult > 4 ? 4 : mult);
	return (unsigned)(prologue && groups > cap ? cap : groups);
}

/* The launch bounds' blocks-an-SM figure of a one-token float GEMV group's kernel (0: none). Without
** one, ptxas keeps gemv_core at about 32 registers (every block of a 2048-block grid resident at once)
** and issues a step's second weight batch only after the first batch's sums: two HBM trips a step. A
** grid that fits 8 blocks of 128 an SM of an H200 loses nothing by a 64-register budget, with which
** ptxas keeps the batches together. Hence only for blocks of 128 at rb <= 4 on grids within 8 blocks an
** SM: rb 8 spills at 64 registers, and bigger grids lost (bench/NOTES.md entries 37 and 38). rb 1 was
** not measured. */
static inline int gemv_min_blocks1(int block, int rb, long long grid, int sms)
{
	return block == 128 && rb <= 4 && grid <= 8LL * sms ? 8 : 0;
}

/* The launch of k_gemv_tc (ops/qfused.cuh: bf16 GEMV groups of 2..8-token steps on the tensor cores) for
** `rows` weight rows (a GLU group: gate and up rows both) of K values: tiles of 16 rows, two a block (*mt)
** where that still leaves two blocks an SM, else one with twice the 32-value chunks in flight (*uc, so a
** lane always has 8 16-byte weight loads out), and warps splitting K, at most 8 (*block threads): faster
** than one tile everywhere, twice the chunks, at most 4 warps, or both (bench/NOTES.md entry 43). */
static inline void gemv_shape_tc(long long rows, long long K, int sms, int *mt, int *uc, int *block,
                                 long long *grid)
{
	long long kc = K / 32, nw;
	*mt = (rows + 31) / 32 >= gemv_pro_blocks(sms) ? 2 : 1;
	*uc = 4 / *mt;
	nw = kc / *uc < 1 ? 1 : kc / *uc > 8 ? 8 : kc / *uc;
	*block = (int)(32 * nw);
	*grid = (rows + 16 * *mt - 1) / (16 * *mt); /* a GLU tile: 8 gate rows and their 8 up rows */
}

/* ops/qfused.cuh k_qgemv_tc (Q4_K/Q6_K groups of 2..16 tokens): one tile of 16 rows a block, one block of
** 256 values in flight a warp (MT 1, UC 1), the warps splitting K's blocks two or more each, up to 8.
** The best of MT 1/2 × UC 1/2 × 4/8 warps on GLM-5's groups, well ahead of MT 2 for >= 264 tiles
** (bench/NOTES.md entry 45). */
static inline void gemv_shape_qtc(long long rows, long long K, int *mt, int *uc, int *block, long long *grid)
{
	long long kb = K / 256, nw = kb / 2 < 1 ? 1 : kb / 2 > 8 ? 8 : kb / 2;
	*mt = 1, *uc = 1;
	*block = (int)(32 * nw);
	*grid = (rows + 15) / 16;
}

/* The quantized decode GEMVs (ops/quant.cuh, ops/qfused.cuh). The grid of a one-token quantized GEMV
** whose x fits one staged chunk (K <= 8192): three blocks an SM, each looping over row groups with x
** staged once (k_qgemv, k_qgemv_fused), instead of one block a group that each stage all of x again. */
static inline long long q_grid_cap(int sms)
{
	return 3LL * sms;
}

/* Warps that split K in k_qgemv's batch-1 kernel (rows per block 16/WPR): at least 192 blocks (about
** 1.5 an SM of an H200), as long as every warp keeps two 1024-value units of K: with 256 blocks at WPR 1
** (N = 4096) WPR 1 is faster than 2; with 128 (N = 2048) WPR 2 is (bench/NOTES.md entry 15). */
static inline int q_wpr(long long N, long long K)
{
	int wpr = 1;
	while (wpr < 8 && (N + 16 / wpr - 1) / (16 / wpr) < 192 && (K + 1023) / 1024 >= 2 * wpr)
		wpr *= 2;
	return wpr;
}

/* The tensor-core GEMVs' grid cap (k_qgemv_mma over Q4_K or Q6_K, two blocks an SM) and their K split:
** warps per row group (rows per block 128/WPR) doubled until there are 192 blocks, as long as every warp
** keeps two 256-value blocks of K (bench/gemv, NOTES entry 16; 64, 128, 264 and 384 measured no better). */
static inline long long qm_grid_cap(int sms)
{
	return 2LL * sms;
}

static inline int qm_wpr(long long N, long long K)
{
	int wpr = 1;
	while (wpr < 8 && (N + 128 / wpr - 1) / (128 / wpr) < 192 && K / 256 >= 2 * wpr)
		wpr *= 2;
	return wpr;
}

/* k_qgemv_sk (ops/qfused.cuh): its dynamic shared memory for K values of type qt (12 Q4_K, 14 Q6_K), NWARP
** warps and S ring slots a warp: 512 bytes of zero units, K/16 16-value sums (rounded up to 128 bytes),
** K/256 staged blocks of 1152 bytes, then each warp's S slots of a tile's block (16 rows × 144 or 224). */
static inline long long qsk_smem(int qt, long long K, int nwarp, int s)
{
	return 512 + (K / 4 + 127) / 128 * 128 + K / 256 * 1152 + (long long)nwarp * s * 16 * (qt == 14 ? 224 : 144);
}

/* The shape glmc emits it in: 8 warps a block, 3 slots a warp (best or close to it among 8/16 warps and 2..6
** slots on GLM-5's and Llama-3-8B's shapes, bench/NOTES.md entry 46), its shared memory at most
** qsk_smem_max (the dynamic shared memory a block may opt in to, less 1 KB for static shared memory), and
** the blocks an SM holds: what an SM's shared memory (smem_sm bytes) takes (1 KB of each block reserved),
** at most 2 (its launch bounds' register budget). */
#define QSK_NWARP 8
#define QSK_SLOTS 3
static inline long long qsk_smem_max(long long smem_block)
{
	return smem_block - 1024;
}
static inline int qsk_bps(long long smem, long long smem_sm)
{
	long long b = smem_sm / (smem + 1024);
	return b > 2 ? 2 : b < 1 ? 1 : (int)b;
}

/* Its grid and the bound on a tile's parts for `tiles` tiles of K values: `wave` blocks (the SMs × the blocks
** an SM holds: one wave), cut to one warp an item at most; maxseg = the most warps' ranges a tile's K/256
** items can meet when every range holds at least floor(items / warps) of them. */
static inline void qsk_grid(long long tiles, long long K, int nwarp, long long wave, long long *grid, int *maxseg)
{
	long long I = tiles * (K / 256), gr = wave > 0 ? wave : 1;
	if (gr * nwarp > I)
		gr = I / nwarp > 0 ? I / nwarp : 1;
	long long q = I / (gr * nwarp);
	*grid = gr;
	*maxseg = q > 0 ? (int)((K / 256 - 1) / q + 2) : 0;
}

/* The routed experts a block of k_qmoe_down_mma streams (ops/qfused.cuh): the fewest, from 1, that bring
** its blocks (ceil(C/128) row blocks × (ceil(k/G) groups + the shared expert's)) within qm_grid_cap, as
** long as the group's hid rows fit one staged chunk (G·F <= 8192) and G <= min(k, 8). GLM-5 (C 6144, k 8,
** F 2048): G 2, 240 blocks, faster than G 1 or G 4 (bench/NOTES.md entry 18). */
static inline int qm_moe_group(long long C, int k, long long F, int shared, int sms)
{
	int g = 1, gmax = k < 8 ? k : 8;
	while (g < gmax && (g + 1) * F <= 8192 && (C + 127) / 128 * ((k + g - 1) / g + shared) > qm_grid_cap(sms))
		g++;
	return g;
}

/* k_mla_split (ops/kernels.cuh): heads per block for H heads (on one GPU): 4 from 12 heads up, 2 below,
** 1 for one head, so a step has enough blocks even at a short context; its ranges are 64 / HB, which
** keeps a merge's reads at 64 ranges·heads (the attention's last block, or each absorb block). */
static inline int mla_split_hb(long long H)
{
	return H >= 12 ? 4 : H >= 2 ? 2 : 1;
}

/* k_mla_vabsorb (ops/fused.cuh): rows of W_UV per warp; a block of 8 warps serves 8·MLA_VR of a head's
** Do outputs, so its grid is (ceil(Do / (8·MLA_VR)), ceil(T/8), H). */
#define MLA_VR 4

/* The MLA query absorb's launch bounds (k_mla_qprep and k_mla_prep, 256 threads, ~33 KB of static shared
** memory): four blocks an SM, 64 registers (ptxas: no spills). Without the figure ptxas took 121-128, two
** blocks an SM, and GLM-5's 546 blocks ran in three rounds (bench/NOTES.md 48). */
#define MLA_Q_MIN_BLOCKS 4

/* k_sample (ops/kernels.cuh): blocks of 1024 threads per logits row; greedy, they split the row's argmax.
** 48 gives every thread one 16-byte load of its slice for V up to 196608 float or 393216 bf16 logits
** (Llama-3's 128256, GLM's 154880), on 48 of an H200's 132 SMs, with a 48-way merge at the end. At 32 a
** float slice of GLM's row is 1210 vectors, two loads deep; at 64 a bf16 slice of Llama-3's is 251, and
** three threads in four idle. Not measured against other counts. */
#define SAMPLE_NB 48

/* The routed experts' grouped GEMM of many-token steps (ops/moe_tc.cuh): rows of a row tile, the most
** experts k_moe_group counts in shared memory, and the GEMMs' dynamic shared memory at ns stages:
** k_moe_up_tc's a bf16 x tile and a bf16 weight tile a stage, k_moe_down_tc's a bf16 hid tile and a
** bf16 down tile, 128 rows of 40 values each. */
#define MOE_TC_BM 128
#define MOE_TC_EMAX 1024
#define MOE_TC_UP_SMEM(ns) ((ns) * 128 * 40 * (2 + 2))
#define MOE_TC_DOWN_SMEM(ns) ((ns) * 128 * 40 * (2 + 2))

#endif
