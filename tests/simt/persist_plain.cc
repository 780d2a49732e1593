/*
** tests/simt/persist_plain.cc — test_persist.cc's reference: the same four kernel templates launched one
** after another as glmrun launches them, compiled here without GLM_PERSIST and inside a namespace so that
** their instantiations are not merged with test_persist.cc's persistent ones at link time.
*/
#include "simt.h"

namespace plain {
#include "../../ops/kernels.cuh"
}

/* Embedding, RMSNorm, GEMV and softmax of a step of T tokens (test_persist.cc's problem), plainly. */
void persist_plain_step(int T, int V, int C, int N, const float *table, const int *ids, const float *nw, const float *w,
                        float *e, float *h, float *y, float *p)
{
	simt_launch(dim3{(unsigned)((C + 255) / 256), (unsigned)T, 1}, dim3{256, 1, 1},
	            [&] { plain::k_embedding<float, float>(e, table, ids, T, C); });
	simt_launch(dim3{(unsigned)T, 1, 1}, dim3{256, 1, 1}, [&] { plain::k_rmsnorm<float, float, true>(h, e, nw, C, 1e-5f); });
	simt_launch(dim3{(unsigned)N, 1, 1}, dim3{32, 1, 1},
	            [&] { plain::k_linear_gemv<float, float, false, 1, 1>(y, h, w, nullptr, T, C, N); });
	simt_launch(dim3{(unsigned)T, 1, 1}, dim3{256, 1, 1}, [&] { plain::k_softmax<float>(p, y, N); });
	(void)V;
}
