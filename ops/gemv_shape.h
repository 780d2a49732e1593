/*
** ops/gemv_shape.h — the launch shape of ops/kernels.cuh's gemv_core, in one place for the C side
** (compiler/emit_cuda.c, which emits it) and the C++ host side (tests/gpu, bench/gemv.cu, which must
** launch what glmc emits). Plain C, no CUDA.
*/
#ifndef GLM_GEMV_SHAPE_H
#define GLM_GEMV_SHAPE_H

#define GEMV_PRO_BLOCKS 264 /* blocks of a GEMV with a prologue: two per SM of an H100/H200 */

/* Ntot output columns of K weights of wsize bytes: enough threads that each streams about two 16-byte
** vectors of every row (32 to 256), and rb = 4 columns per block (so each thread has 8 loads in flight),
** fewer when that would leave under two blocks per SM of an H100/H200 (132 SMs). */
static inline void gemv_shape_h(long long K, long long Ntot, int wsize, int *block, int *rb)
{
	long long nvec = K * wsize / 16, bt = ((nvec + 1) / 2 + 31) / 32 * 32;
	*block = (int)(bt < 32 ? 32 : bt > 256 ? 256 : bt);
	*rb = Ntot >= 4 * 264 ? 4 : Ntot >= 2 * 264 ? 2 : 1;
}

/* The grid: one block per group of rb columns, or when there is a prologue (formed once per block) at most
** as many looping blocks of `block` threads as make GEMV_PRO_BLOCKS blocks of 256: a short row gets small
** blocks, and 264 of them would leave an SM with too few loads in flight (GLM-4.7-Flash's q_b GEMV, K 768:
** 64 threads, 15% of the bandwidth), while its prologue is cheap to repeat. At most 4x as many. */
static inline unsigned gemv_grid_h(long long Ntot, int rb, int block, int prologue)
{
	long long groups = (Ntot + rb - 1) / rb, mult = block >= 256 ? 1 : 256 / block, cap;
	cap = GEMV_PRO_BLOCKS * (mult > 4 ? 4 : mult);
	return (unsigned)(prologue && groups > cap ? cap : groups);
}

/* k_mla_vabsorb (ops/fused.cuh): rows of W_UV per warp; a block of 8 warps serves 8·MLA_VR of a head's
** Do outputs, so its grid is (ceil(Do / (8·MLA_VR)), ceil(T/8), H). */
#define MLA_VR 4

#endif
