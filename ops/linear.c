/*
** ops/linear.c — the CPU executor's linear (lin_rows): the same arithmetic as ref_linear, bit for bit,
** only faster. Each output is still one double sum started at its bias and taking the products
** x[k]·w[k] (exact in double: two 24-bit mantissas) in k order, so every result equals the oracle's.
** What changes is the schedule: a tile of outputs (8 rows of one token, or 4 rows of 2 tokens) is summed
** side by side, so the additions of independent sums overlap instead of waiting on one chain, and a
** weight row is read once per tile instead of once per output; rows are split among threads (par.h).
*/
#include "par.h"
#include "ref.h"

/* The tiles are built twice on x86-64, for AVX2 and for the baseline, and the loader picks one (an ifunc):
** the same operations in the same order either way (no FMA), so the same values; AVX2 packs 4 sums per
** register instead of 2, so each multiply-add costs less (bench/NOTES.md entry 54). */
#if defined(__x86_64__)
#define LIN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define LIN_CLONES
#endif

/* Outputs n..n+7 of one token. The sums are named variables, not an array, so that they stay in
** registers (gcc kept an array of eight on the stack). */
LIN_CLONES static void tile8x1(float *y, const float *x, const float *w, const float *bias, int K, int n)
{
	const float *w0 = w + (size_t)n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K, *w4 = w3 + K, *w5 = w4 + K,
	            *w6 = w5 + K, *w7 = w6 + K;
	const float *b = bias ? bias + n : NULL;
	double s0 = b ? b[0] : 0.0, s1 = b ? b[1] : 0.0, s2 = b ? b[2] : 0.0, s3 = b ? b[3] : 0.0;
	double s4 = b ? b[4] : 0.0, s5 = b ? b[5] : 0.0, s6 = b ? b[6] : 0.0, s7 = b ? b[7] : 0.0;
	for (int k = 0; k < K; k++) {
		double xv = x[k];
		s0 += xv * w0[k], s1 += xv * w1[k], s2 += xv * w2[k], s3 += xv * w3[k];
		s4 += xv * w4[k], s5 += xv * w5[k], s6 += xv * w6[k], s7 += xv * w7[k];
	}
	y[n] = (float)s0, y[n + 1] = (float)s1, y[n + 2] = (float)s2, y[n + 3] = (float)s3;
	y[n + 4] = (float)s4, y[n + 5] = (float)s5, y[n + 6] = (float)s6, y[n + 7] = (float)s7;
}

/* Outputs n..n+3 of tokens t and t+1 (rows of x and y N apart). */
LIN_CLONES static void tile4x2(float *y, const float *x, const float *w, const float *bias, int K, int N, int n)
{
	const float *w0 = w + (size_t)n * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K, *x1 = x + K;
	const float *b = bias ? bias + n : NULL;
	double a0 = b ? b[0] : 0.0, a1 = b ? b[1] : 0.0, a2 = b ? b[2] : 0.0, a3 = b ? b[3] : 0.0;
	double c0 = a0, c1 = a1, c2 = a2, c3 = a3;
	for (int k = 0; k < K; k++) {
		double xa = x[k], xb = x1[k], v0 = w0[k], v1 = w1[k], v2 = w2[k], v3 = w3[k];
		a0 += xa * v0, a1 += xa * v1, a2 += xa * v2, a3 += xa * v3;
		c0 += xb * v0, c1 += xb * v1, c2 += xb * v2, c3 += xb * v3;
	}
	y[n] = (float)a0, y[n + 1] = (float)a1, y[n + 2] = (float)a2, y[n + 3] = (float)a3;
	y[N + n] = (float)c0, y[N + n + 1] = (float)c1, y[N + n + 2] = (float)c2, y[N + n + 3] = (float)c3;
}

/* One output, as ref_linear forms it. */
static void one(float *y, const float *x, const float *w, const float *bias, int K, int n)
{
	const float *wr = w + (size_t)n * K;
	double s = bias ? bias[n] : 0.0;
	for (int k = 0; k < K; k++)
		s += (double)x[k] * wr[k];
	y[n] = (float)s;
}

/* Token pairs: 4-row tiles over all pairs (the 4 weight rows stay in cache while the pairs go by); an odd
** last token: 8-row tiles. Rows left over go one at a time. */
void lin_rows(float *y, const float *x, const float *w, const float *bias, int T, int K, int N, int n0, int n1)
{
	int pairs = T & ~1, n = n0;
	for (; pairs && n + 4 <= n1; n += 4)
		for (int t = 0; t < pairs; t += 2)
			tile4x2(y + (size_t)t * N, x + (size_t)t * K, w, bias, K, N, n);
	for (; n < n1; n++)
		for (int t = 0; t < pairs; t++)
			one(y + (size_t)t * N, x + (size_t)t * K, w, bias, K, n);
	if (T == pairs)
		return;
	float *yl = y + (size_t)pairs * N;
	const float *xl = x + (size_t)pairs * K;
	for (n = n0; n + 8 <= n1; n += 8)
		tile8x1(yl, xl, w, bias, K, n);
	for (; n < n1; n++)
		one(yl, xl, w, bias, K, n);
}

/* A linear for the thread pool: each part takes a share of the output rows (whole 8-row tiles). */
typedef struct {
	float *y;
	const float *x, *w, *bias;
	int T, K, N;
} LinJob;

static void lin_part(void *arg, int part, int nparts)
{
	const LinJob *j = arg;
	int per = (j->N / nparts + 7) & ~7, n0 = part * per, n1 = part == nparts - 1 ? j->N : n0 + per;
	if (n1 > j->N)
		n1 = j->N;
	if (n0 < n1)
		lin_rows(j->y, j->x, j->w, j->bias, j->T, j->K, j->N, n0, n1);
}

void lin_par(Par *p, float *y, const float *x, const float *w, const float *bias, int T, int K, int N)
{
	LinJob j = {y, x, w, bias, T, K, N};
	par_run(p, lin_part, &j);
}
