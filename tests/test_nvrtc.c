/*
** tests/test_nvrtc.c — NVRTC as glmc uses it, no GPU needed: the embedded kernel templates compile for
** every supported arch, every kernel of ops/quant.cuh and ops/qfused.cuh instantiates and compiles for
** sm_90 for each block type, and a compile error is reported in one line quoting the generated source line.
*/
#include "check.h"
#include "passes.h"
#include "libnvrtc.h"

#include <stdlib.h>
#include <string.h>

int main(void)
{
	char err[1024];
	check(nvrtc_available(), "NVRTC can be loaded", "libnvrtc.so not found (CUDA toolkit missing?)");
	if (!nvrtc_available())
		return check_done();
	unsigned char *cubin = NULL;
	size_t n = 0;
	const char *bad = "extern \"C\" __global__ void broken(float *y)\n{\n\ty[0] = undefined_name + 1;\n}\n";
	int rc = nvrtc_compile(bad, "sm_90", &cubin, &n, err, sizeof err);
	check(rc < 0 && strstr(err, "undefined_name") && strstr(err, "generated line: y[0] = undefined_name + 1;") &&
	          !strchr(err, '\n'),
	      "compile error quotes the generated line", "%s", err);
	/* The templates alone (no instantiation) must parse for each arch glmc accepts. */
	static const char *arch[] = {"sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"};
	for (int i = 0; i < 6; i++) {
		char name[64];
		snprintf(name, sizeof name, "kernel templates compile for %s", arch[i]);
		cubin = NULL;
		rc = nvrtc_compile(glm_kernels_cuh, arch[i], &cubin, &n, err, sizeof err);
		check(rc == 0 && cubin && n > 0, name, "%s", err);
		free(cubin);
	}
	/* ops/quant.cuh and ops/qfused.cuh instantiated as glmc's wrappers instantiate them: every kernel for every
	** block type. */
	size_t cap = strlen(glm_kernels_cuh) + 131072, at;
	char *src = malloc(cap);
	at = (size_t)snprintf(src, cap, "%s\n", glm_kernels_cuh);
	static const int qt[] = {8, 12, 13, 14};
	for (int i = 0; i < 4; i++) {
		int q = qt[i];
		at += (size_t)snprintf(src + at, cap - at,
			"extern \"C\" __global__ void __launch_bounds__(256) a%d(float *y, const float *x, const unsigned char *w, "
			"const float *b, int T, int K, int N) { k_qgemv<float, %d, 2, 2, 1, true, false>(y, x, nullptr, w, b, T, K, N); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) b%d(bf16 *y, const bf16 *g, const bf16 *u, "
			"const unsigned char *w, int T, int K, int N) { k_qgemv<bf16, %d, 2, 1, 8, false, true>(y, g, u, w, nullptr, T, K, N); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) c%d(float *y, const float *x, const unsigned char *w, "
			"const float *b, int T, int K, int N) { k_qlinear_gemm<float, %d, true>(y, x, w, b, T, K, N); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) d%d(bf16 *y, const unsigned char *w, const int *ids, int T, "
			"int C) { k_qembedding<bf16, %d>(y, w, ids, T, C); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) e%d(float *y, const unsigned char *w, long long n, int K) "
			"{ k_qdequant<float, %d>(y, w, n, K); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) f%d(float *h, const float *x, const int *idx, "
			"const unsigned char *g, const unsigned char *u, int C, int F, int k) { k_qmoe_up<float, %d, %d>(h, x, idx, g, u, "
			"C, F, k); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) g%d(float *y, const float *h, const int *idx, const float *w, "
			"const unsigned char *d, int C, int F, int k) { k_qmoe_down<float, %d>(y, h, idx, w, d, C, F, k); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) h%d(unsigned char *d, long long rows, int bpr, long long st, "
			"unsigned long long seed, long long K, long long part, long long inner, int tp, int rank, int cp, int cr) "
			"{ k_qrand<%d>(d, rows, bpr, st, seed, K, part, inner, tp, rank, cp, cr); }\n"
			/* ops/qfused.cuh: a group of block, bf16, f16 and f32 members; the MoE end with a float shared expert */
			"extern \"C\" __global__ void __launch_bounds__(256) i%d(bf16 *y0, bf16 *y1, bf16 *y2, bf16 *y3, const unsigned "
			"char *w0, const unsigned char *w1, const unsigned char *w2, const unsigned char *w3, const bf16 *b0, const bf16 "
			"*b1, const bf16 *b2, const bf16 *b3, const bf16 *x, const bf16 *u, const bf16 *nw, bf16 *hs, const bf16 *r, int T, "
			"int K, int N0, int N1, int N2, int N3, int P0, int P1, int P2, int P3, int pro, int epi, float eps, float s0, "
			"float s1, float s2, float s3) { k_qgemv_fused<bf16, %d, 30, 1, 0, bf16, -1, -1, 8>(y0, y1, y2, y3, w0, w1, w2, w3, b0, "
			"b1, b2, b3, x, u, nw, hs, r, T, K, N0, N1, N2, N3, P0, P1, P2, P3, pro, epi, eps, s0, s1, s2, s3); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) k%d(float *y0, float *y1, const unsigned char *w0, const "
			"unsigned char *w1, const float *x, const float *u, const float *r, int T, int K, int N0, int N1) { "
			"k_qgemv_fused<float, %d, %d, 0, 30, float, 2, 16, 1>(y0, y1, nullptr, nullptr, w0, w1, nullptr, nullptr, nullptr, "
			"nullptr, nullptr, nullptr, x, u, (const float *)nullptr, nullptr, r, T, K, N0, N1, 0, 0, 1, 8, 1, 1, 2, 16, 0.0f, "
			"1.0f, 1.0f, 1.0f, 1.0f); }\n"
			"extern \"C\" __global__ void __launch_bounds__(256) j%d(float *y, const float *h, const int *idx, const float *w, "
			"const unsigned char *d, int C, int F, int k, const unsigned char *sd, const float *g, const float *u, int Fs, "
			"const float *r) { k_qmoe_down_fused<float, %d, 0, true, true>(y, h, idx, w, d, C, F, k, sd, g, u, Fs, r); }\n",
			q, q, q, q, q, q, q, q, q, q, q, q, qt[(i + 1) % 4], q, q, q, q, q, q, q, q, qt[(i + 2) % 4], q, q);
	}
	snprintf(src + at, cap - at,
	         "extern \"C\" __global__ void __launch_bounds__(256) r0(bf16 *d, long long n, unsigned long long seed, int cols, "
	         "int vec, long long part, long long inner, int tp, int rank) { k_rand_float<bf16>(d, n, seed, cols, vec, part, "
	         "inner, tp, rank); }\n");
	cubin = NULL;
	rc = nvrtc_compile(src, "sm_90", &cubin, &n, err, sizeof err);
	check(rc == 0 && cubin && n > 0, "quant.cuh and qfused.cuh kernels (Q8_0, Q4_K, Q5_K, Q6_K) instantiate and compile for sm_90",
	      "%s", err);
	free(cubin);
	/* The MoE decode kernels as glmc instantiates them (routing: the redux path on sm_80+, every weight type
	** of the experts' GEMVs); tests/gpu runs them, this only proves NVRTC takes them. */
	at = (size_t)snprintf(src, cap, "%s\n", glm_kernels_cuh);
	snprintf(src + at, cap - at,
	         "extern \"C\" __global__ void __launch_bounds__(32) m0(int *i, bf16 *w, const bf16 *l, const float *b, int E, "
	         "int k, int ng, int tg, int s, int ws, int n, float sc) { k_moe_route_weights<bf16, float>(i, w, l, b, E, k, "
	         "ng, tg, s, ws, n, sc); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(32) m1(int *i, const float *l, const bf16 *b, int E, int k, "
	         "int ng, int tg, int s) { k_moe_route<float, bf16>(i, l, b, E, k, ng, tg, s); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(32) m2(float *w, const float *l, const int *i, int E, int k, "
	         "int s, int n, float sc) { k_moe_weights<float>(w, l, i, E, k, s, n, sc); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m3(float *h, const bf16 *x, const int *i, const bf16 *g, "
	         "const bf16 *u, int C, int F, int k) { k_moe_up<bf16, bf16>(h, x, i, g, u, C, F, k); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m4(float *h, const float *x, const int *i, const f16 *g, "
	         "const f16 *u, int C, int F, int k) { k_moe_up<float, f16>(h, x, i, g, u, C, F, k); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m5(float *h, const bf16 *x, const int *i, const float *g, "
	         "const float *u, int C, int F, int k) { k_moe_up<bf16, float>(h, x, i, g, u, C, F, k); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m6(bf16 *y, const float *h, const int *i, const bf16 *w, "
	         "const bf16 *d, int C, int F, int k) { k_moe_down<bf16, bf16>(y, h, i, w, d, C, F, k); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m7(float *y, const float *h, const int *i, const float *w, "
	         "const float *d, int C, int F, int k) { k_moe_down<float, float>(y, h, i, w, d, C, F, k); }\n"
	         /* the grouped GEMM of many-token steps (ops/moe_tc.cuh; tests/simt/test_moe_tc runs it), bf16 and Q4_K/Q6_K,
	          * at two stages (a build knob) and at the four and three glmc emits */
	         "extern \"C\" __global__ void __launch_bounds__(256) m8(int *m, int *l, const int *i, int n, int E) { "
	         "k_moe_group(m, l, i, n, E); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m9(int *m, int *l, bf16 *h, const bf16 *x, const bf16 *g, "
	         "const bf16 *u, int C, int F, int k, int E) { extern __shared__ __align__(128) unsigned char dsm[]; "
	         "k_moe_up_tc<bf16, -1, -1, 2>(m, l, h, x, g, u, C, F, k, E, dsm); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m10(int *m, int *l, bf16 *h, float *ys, const bf16 *d, "
	         "int C, int F, int E) { extern __shared__ __align__(128) unsigned char dsm[]; "
	         "k_moe_down_tc<bf16, -1, 2>(m, l, h, ys, d, C, F, E, dsm); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m11(bf16 *y, int *m, int *l, bf16 *h, float *ys, "
	         "const int *i, const bf16 *w, int T, int C, int k, int E) { k_moe_sum_tc<bf16>(y, m, l, h, ys, i, w, T, C, k, E); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m12(int *m, int *l, bf16 *h, const bf16 *x, "
	         "const unsigned char *g, const unsigned char *u, int C, int F, int k, int E) { "
	         "extern __shared__ __align__(128) unsigned char dsm[]; "
	         "k_moe_up_tc<unsigned char, 12, 12, 4>(m, l, h, x, g, u, C, F, k, E, dsm); }\n"
	         "extern \"C\" __global__ void __launch_bounds__(256) m13(int *m, int *l, bf16 *h, float *ys, "
	         "const unsigned char *d, int C, int F, int E) { extern __shared__ __align__(128) unsigned char dsm[]; "
	         "k_moe_down_tc<unsigned char, 14, 3>(m, l, h, ys, d, C, F, E, dsm); }\n");
	for (int i = 0; i < 2; i++) {
		char name[96];
		snprintf(name, sizeof name, "MoE routing and expert kernels instantiate and compile for %s", arch[i * 3]);
		cubin = NULL;
		rc = nvrtc_compile(src, arch[i * 3], &cubin, &n, err, sizeof err);
		check(rc == 0 && cubin && n > 0, name, "%s", err);
		free(cubin);
	}
	free(src);
	return check_done();
}
