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

/* The grid: one block per group of rb columns, or at most GEMV_PRO_BLOCKS looping blocks when there is a
** prologue (it is formed once per block). */
static inline unsigned gemv_grid_h(long long Ntot, int rb, int prologue)
{
	long long groups = (Ntot + rb - 1) / rb;
	return (unsigned)(prologue && groups > GEMV_PRO_BLOCKS ? GEMV_PRO_BLOCKS : groups);
}

#endif
