/*
** ops/ref.h — float32 CPU reference kernels: the oracle every other path is compared with.
**
** Plain loops over contiguous row-major float32 arrays; reductions accumulate in double.
** Shape letters: T rows (tokens in the step), K input features, N output features, C channels,
** V vocabulary, H query heads, G key/value heads, D head dim, S cache capacity (positions).
** Every function writes every element of its output (callers poison outputs before calling).
*/
#ifndef GLM_REF_H
#define GLM_REF_H

#include <stddef.h>
#include <stdint.h>

/* y[T,C] = table[ids[t], :]; ids are checked by the caller to lie in [0, V). */
void ref_embedding(float *y, const float *table, const int32_t *ids, int T, int C);

/* y[T,N] = x[T,K] · w[N,K]ᵀ (+ bias[N] when bias != NULL). Hugging Face nn.Linear layout. */
void ref_linear(float *y, const float *x, const float *w, const float *bias, int T, int K, int N);

/* Outputs n0..n1-1 of ref_linear (all T tokens), bit for bit the same values, computed several at a time
** (ops/linear.c): the CPU executor's linear, split among threads by rows. */
void lin_rows(float *y, const float *x, const float *w, const float *bias, int T, int K, int N, int n0, int n1);

/* y[B,M,N] = a[B,M,K] · b[B,K,N] (batched; B = 1 for a plain matmul). */
void ref_matmul(float *y, const float *a, const float *b, int B, int M, int K, int N);

/* y[B,M,N] = a[B,M,K] · b[B,N,K]ᵀ (the second operand stored transposed, like a linear weight). */
void ref_matmul_tb(float *y, const float *a, const float *b, int B, int M, int K, int N);

/* Element-wise with broadcasting of the second operand over leading dims:
** y[i] = a[i] op b[i % nb], n a multiple of nb. */
void ref_add(float *y, const float *a, const float *b, size_t n, size_t nb);
void ref_sub(float *y, const float *a, const float *b, size_t n, size_t nb);
void ref_mul(float *y, const float *a, const float *b, size_t n, size_t nb);
void ref_div(float *y, const float *a, const float *b, size_t n, size_t nb);

void ref_scale(float *y, const float *x, size_t n, float s);        /* y = s·x */
void ref_silu(float *y, const float *x, size_t n);                  /* x·σ(x) */
void ref_gelu(float *y, const float *x, size_t n, int tanh_approx); /* erf form, or tanh form */
void ref_sigmoid(float *y, const float *x, size_t n);
void ref_swiglu(float *y, const float *gate, const float *up, size_t n); /* silu(gate)·up */

/* Softmax over the last dim of x[R,N] (max-subtracted). */
void ref_softmax(float *y, const float *x, int R, int N);

/* y = x / sqrt(mean(x²) + eps) · w over rows of N; w may be NULL (no scale). */
void ref_rmsnorm(float *y, const float *x, const float *w, int R, int N, float eps);

/* y = (x - mean) / sqrt(var + eps) · w + b over rows of N; w and b may be NULL. */
void ref_layernorm(float *y, const float *x, const float *w, const float *b, int R, int N, float eps);

/*
** Rotary position embedding. Rotates the first rot_dim values of each head (partial rotary keeps the
** rest); interleaved = 0 pairs (i, i + rot_dim/2) (GPT-NeoX / HF "rotate_half"), interleaved = 1 pairs
** (2i, 2i+1) (GPT-J / GGUF deepseek2). The inverse frequencies are scaled as Hugging Face's
** ROPE_INIT_FUNCTIONS compute them for the rope_type `scaling` names:
**   ROPE_YARN (factor > 1; _compute_yarn_parameters): ramp between beta_fast and beta_slow over
**     orig_ctx, and the attention factor from mscale/mscale_all_dim (or attn_factor when > 0)
**     multiplied into cos and sin;
**   ROPE_LLAMA3 (_compute_llama3_parameters): frequencies whose wavelength is past orig_ctx /
**     low_freq_factor divided by factor, those under orig_ctx / high_freq_factor kept, the band between
**     blended smoothly;
**   ROPE_LINEAR: every frequency divided by factor.
** freq_div, when not NULL, then divides each frequency by its own number (a GGUF's rope_freqs.weight,
** as llama.cpp's rope applies it).
*/
enum { ROPE_PLAIN, ROPE_YARN, ROPE_LLAMA3, ROPE_LINEAR, ROPE_NSCALINGS };
/* "none", "yarn", "llama3", "linear" (HF's rope_type names; "none" is GGUF's). */
const char *ref_rope_scaling_name(int scaling);
typedef struct {
	int head_dim;        /* D */
	int rot_dim;         /* rotated dims per head, even, <= D */
	int interleaved;     /* 0: split-half (neox), 1: interleaved pairs */
	double theta;        /* base */
	int scaling;         /* ROPE_*; ROPE_YARN with factor <= 1 is plain rope */
	double factor;       /* YaRN, llama3 or linear scaling factor */
	int orig_ctx;        /* original_max_position_embeddings (YaRN, llama3) */
	double beta_fast, beta_slow;   /* YaRN; defaults 32, 1 */
	double mscale, mscale_all_dim; /* YaRN, DeepSeek-V3 style; 0 when absent */
	double attn_factor;  /* YaRN: explicit attention_factor; 0 when absent */
	double low_freq_factor, high_freq_factor; /* llama3 */
	const float *freq_div; /* [rot_dim/2] per-frequency divisors, or NULL */
} RefRope;

/* inv_freq[rot_dim/2] and the cos/sin multiplier (1 unless YaRN). */
void ref_rope_freqs(const RefRope *r, float *inv_freq, float *cs_scale);

/* y[T,H,D] = rope(x[T,H,D]) at positions pos[T]. y may equal x. */
void ref_rope(float *y, const float *x, const int32_t *pos, int T, int H, const RefRope *r);

/*
** Causal attention with a KV cache. q[T,H,Dk], k[T,G,Dk], v[T,G,Dv]; H a multiple of G (GQA: head h
** reads kv head h / (H/G)). First writes k and v into kcache[S,G,Dk] and vcache[S,G,Dv] at rows pos[t],
** then for each t attends over cache rows 0..pos[t] inclusive: y[T,H,Dv] = softmax(q·kᵀ·scale)·v.
** Positions within one call are increasing; pos[t] < S is checked by the caller.
*/
void ref_attention(float *y, const float *q, const float *k, const float *v, float *kcache, float *vcache,
                   const int32_t *pos, int T, int H, int G, int Dk, int Dv, int S, float scale);

/* Indices of the k largest values of each row of x[R,N], largest first; ties go to the lower index. */
void ref_topk(int32_t *idx, const float *x, int R, int N, int k);

/* Index of the largest value of each row of x[R,N]; the first one on ties (like torch.argmax). */
void ref_argmax(int32_t *idx, const float *x, int R, int N);

/* y = x with dims permuted: y.shape[i] = shape[perm[i]]; ndim <= 4; elements of `elsize` bytes. */
void ref_permute(void *y, const void *x, int ndim, const int64_t *shape, const int *perm, size_t elsize);

/*
** Latent (MLA) attention in the absorbed form, one shared key/value row per token (MQA): writes kv[T,Dk]
** into cache[S,Dk] at rows pos[t]; then for token t and head h, over cache rows s <= pos[t] (only those
** listed in sel[t, 0..nsel) when sel != NULL; -1 entries are empty): y[t,h,:Dv] = softmax(scale ·
** q[t,h,:]·cache[s,:]) · cache[s,:Dv]. The values are the first Dv entries of the key row (the latent).
*/
void ref_mla(float *y, const float *q, const float *kv, float *cache, const int32_t *pos, const int32_t *sel,
             int nsel, int T, int H, int Dk, int Dv, int S, float scale);

/*
** DeepSeek sparse-attention indexer: writes k[T,D] into kcache[S,D] at rows pos[t]; for token t scores
** each row s <= pos[t] as sum_h w[t,h] · relu(scale · q[t,h,:]·kcache[s,:]) and returns in sel[t, 0..topk)
** the rows with the largest scores (ties as torch.topk chooses them), in increasing order, -1 where fewer
** than topk rows are visible.
*/
void ref_indexer(int32_t *sel, const float *q, const float *k, const float *w, float *kcache, const int32_t *pos,
                 int T, int H, int D, int S, int topk, float scale);

/*
** MoE routing. func 0: softmax scores, 1: sigmoid scores. Selection ranks scores + bias (bias may be NULL);
** with n_group > 1 only the topk_group groups with the best sum of their two best choices compete.
** idx[T,k] lists the chosen experts, best first (ties to the lower expert).
*/
void ref_moe_route(int32_t *idx, const float *logits, const float *bias, int T, int E, int k, int n_group,
                   int topk_group, int func);

/* The chosen experts' weights: their (unbiased) scores, normalised to sum 1 when norm, times scale. */
void ref_moe_weights(float *w, const float *logits, const int32_t *idx, int T, int E, int k, int func, int norm,
                     float scale);

/* Routed experts: y[t] = sum_j w[t,j] · down_e(silu(gate_e·x[t]) ⊙ up_e·x[t]) with e = idx[t,j]; gate and up
** [E,F,C], down [E,C,F]. Only the chosen experts' weights are read. */
void ref_moe_ffn(float *y, const float *x, const int32_t *idx, const float *w, const float *gate, const float *up,
                 const float *down, int T, int C, int F, int E, int k);
/* The same with each hidden value silu(g)·u rounded to bf16 before the down projection when hid_bf16 (the
** GPU's grouped GEMM stores them so, ops/moe_tc.cuh; glmrun --round-bf16 mirrors it). */
void ref_moe_ffn_hid(float *y, const float *x, const int32_t *idx, const float *w, const float *gate, const float *up,
                     const float *down, int T, int C, int F, int E, int k, int hid_bf16);

/*
** The sampler's CPU twin (kernel k_sample in kernels.cuh, whose comment gives the algorithm): greedy when
** temp <= 0, else top_k / top_p filtering and Gumbel-max with a counter-based hash of (seed, step,
** index). Same seed and step, same token (up to float-summation near-ties in top_p).
*/
int ref_sample(const float *logits, int V, float temp, int top_k, float top_p, uint32_t seed, int step);

/* Conversions of stored weights to float32 (exact: f16 and bf16 are subsets of f32). */
float ref_f16_to_f32(uint16_t h);
float ref_bf16_to_f32(uint16_t h);
uint16_t ref_f32_to_bf16(float f);  /* round to nearest even, NaN kept NaN */
uint16_t ref_f32_to_f16(float f);   /* round to nearest even, overflow to inf */

#endif
