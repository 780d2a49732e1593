/*
** tests/tools/mkgguf.c — convert a Hugging Face fixture directory (config.json + safetensors) into a
** GGUF file the way llama.cpp's convert_hf_to_gguf.py does: llama.cpp architecture names, tensor names
** and metadata keys, shapes reversed into ggml order, and F32, Q8_0, Q4_K, Q5_K or Q6_K tensors (our
** Q8_0 quantizer rounds as ggml's quantize_row_q8_0_ref; the K-quant quantizers of ops/quant.c fit each
** sub-block's range without ggml's scale search, in ggml's block layout).
**
**   HF model_type         GGUF arch   what the conversion does beyond renaming
**   llama                 llama       q/k rows permuted per head (split-half -> interleaved RoPE pairs);
**                                     a "llama3" rope config becomes rope_freqs.weight (llama3_divisors)
**   qwen3                 qwen3       -
**   qwen3_moe             qwen3moe    per-expert tensors stacked into ffn_{gate,up,down}_exps
**   glm4_moe              glm4moe     experts stacked; block_count counts the MTP layer(s) as llama.cpp's
**                                     Glm4MoeModel does (num_hidden_layers + num_nextn_predict_layers)
**   deepseek_v2/v3,       deepseek2   MLA: kv_b_proj split per head into attn_k_b (the k rows transposed,
**   glm4_moe_lite                     numpy [H, kv_lora, nope]) and attn_v_b ([H, v_head, kv_lora]);
**                                     experts stacked; MTP layers (index >= num_hidden_layers) dropped
**   glm_moe_dsa           glm-dsa     as deepseek2, plus the DSA indexer tensors and keys; block_count
**                                     counts the MTP layer(s) as llama.cpp's GlmMoeDsaModel does
**
** No q/k permutation except for llama: qwen3/qwen3moe/glm4moe use NeoX (split-half) RoPE in llama.cpp
** as in HF, and the MLA archs rotate adjacent pairs, which is what HF's rope_interleave computes.
** The router (ffn_gate_inp) stays F32 when quantizing, as llama.cpp keeps it. With a K-quant type, a
** matrix whose rows are not whole blocks of 256 falls back to Q8_0 (rows of 32) or F32, as llama.cpp
** falls back to another type for such rows.
**
** One key llama.cpp does not write: {arch}.attention.lora_layer_norm_rms_epsilon for the MLA archs,
** the eps of the two latent norms (q_a_layernorm, kv_a_layernorm). Hugging Face builds those norms with
** its RMSNorm default 1e-6 whatever rms_norm_eps says, while llama.cpp uses rms_norm_eps for them; the
** key records what the reference computed (models/lib/nn.lua reads it and falls back to the file's
** attention.layer_norm_rms_epsilon, as llama.cpp does, when it is absent).
**
** --order writes the tensors in the source file's order, reversed, or shuffled (seeded), so tests can
** check that a reader binds by name and not by position.
**
** --kv-b merged writes the MLA archs as llama.cpp's converter did before its MLA conversion (April 2025,
** llama.cpp PR 12801): kv_b_proj whole as blk.N.attn_kv_b.weight (numpy [H * (nope + v), kv_lora], as in
** HF), head_count_kv = num_key_value_heads, key_length = qk_nope + qk_rope and value_length = v_head
** (the per-head widths), and no key_length_mla / value_length_mla. The default, split, is today's layout.
**
** --roundtrip (with a quantized --type) stores each tensor that would be quantized as F32 holding its
** dequantized values: the same numbers through the F32 kernels, so a test can tell the quantized
** kernels' error apart from the rounding of the weights themselves.
**
**   mkgguf HF_DIR OUT.gguf [--arch NAME] [--type f32|q8_0|q4_k|q5_k|q6_k] [--roundtrip]
**          [--order file|reverse|shuffle] [--kv-b split|merged]
**          [--seed N] [--alignment N]
*/
#include "gguf.h"
#include "quant.h"
#include "st.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: mkgguf HF_DIR OUT.gguf [--arch NAME] [--type f32|q8_0|q4_k|q5_k|q6_k] [--roundtrip]\n"
	"              [--order file|reverse|shuffle] [--seed N] [--alignment N] [--kv-b split|merged]\n"
	"Convert a Hugging Face checkpoint directory into a GGUF file with llama.cpp's tensor names and\n"
	"metadata keys. --arch (an HF model_type or a GGUF architecture: llama, qwen3, qwen3moe, glm4moe,\n"
	"deepseek2, glm-dsa) defaults to config.json's model_type. --type q8_0 quantizes every matrix whose\n"
	"rows are whole blocks of 32 (vectors and the MoE router stay F32); q4_k, q5_k, q6_k those with rows\n"
	"of whole blocks of 256, the others as q8_0. --order sets the tensor order in the file (default: the\n"
	"order of the source file; shuffle uses --seed, default 1). --alignment defaults to 32.\n"
	"--roundtrip (with a quantized type) stores the dequantized values as F32 instead.\n"
	"--kv-b merged (MLA archs): llama.cpp's layout before its MLA conversion: attn_kv_b whole, per-head\n"
	"key_length / value_length, no *_mla keys (default split: attn_k_b and attn_v_b).\n";

/* One error line and a non-zero exit: the tool runs from tests and scripts, never interactively. */
_Noreturn static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("mkgguf: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* The architectures: HF model_type, llama.cpp's name, and the family that decides the conversion. */
enum { F_LLAMA, F_QWEN3, F_QWEN3MOE, F_GLM4MOE, F_DEEPSEEK2, F_GLMDSA };
static const struct {
	const char *hf, *gguf;
	int fam;
} archs[] = {
	{"llama", "llama", F_LLAMA},
	{"qwen3", "qwen3", F_QWEN3},
	{"qwen3_moe", "qwen3moe", F_QWEN3MOE},
	{"glm4_moe", "glm4moe", F_GLM4MOE},
	{"deepseek_v3", "deepseek2", F_DEEPSEEK2},
	{"deepseek_v2", "deepseek2", F_DEEPSEEK2},
	{"glm4_moe_lite", "deepseek2", F_DEEPSEEK2},
	{"glm_moe_dsa", "glm-dsa", F_GLMDSA},
};

/* An integer hyperparameter from config.json; def when absent and def >= 0, else an error naming the
** key. */
static long long cfg_int(json_t *cfg, const char *key, long long def)
{
	json_t *v = json_object_get(cfg, key);
	if (json_is_integer(v))
		return json_integer_value(v);
	if (def >= 0 && (!v || json_is_null(v)))
		return def;
	die("config.json: '%s' missing or not an integer", key);
}

/* The first of several integer keys that is present (alternative spellings), else def as cfg_int. */
static long long cfg_int2(json_t *cfg, const char *a, const char *b, const char *c, long long def)
{
	const char *k[] = {a, b, c};
	for (int i = 0; i < 3; i++)
		if (k[i] && json_is_integer(json_object_get(cfg, k[i])))
			return json_integer_value(json_object_get(cfg, k[i]));
	if (def >= 0)
		return def;
	die("config.json: none of '%s', '%s', '%s' is an integer", a, b ? b : "", c ? c : "");
}

static double cfg_num(json_t *cfg, const char *key, double def, int *found)
{
	json_t *v = json_object_get(cfg, key);
	*found = json_is_number(v);
	return json_is_number(v) ? json_number_value(v) : def;
}

/* A number from config.json or, failing that, from its rope_parameters / rope_scaling object. */
static double cfg_rope_num(json_t *cfg, json_t *rp, const char *key, double def, int *found)
{
	double v = cfg_num(cfg, key, def, found);
	if (!*found && rp)
		v = cfg_num(rp, key, def, found);
	return v;
}

/* What one source tensor becomes. */
enum { M_DROP, M_PLAIN, M_EXPERT, M_KVB };
typedef struct {
	int kind;
	char name[128]; /* M_PLAIN: the GGUF name */
	int qk;         /* M_PLAIN: 'q' / 'k' for llama's q/k projections */
	int layer;      /* M_EXPERT, M_KVB */
	int expert;     /* M_EXPERT */
	const char *proj; /* M_EXPERT: "gate", "up" or "down" */
} Map;

/*
** HF -> llama.cpp tensor names (gguf-py's tensor_mapping.py for these architectures). Tensors of
** layers at or past n_layer (MTP blocks) are dropped, as are rotary inverse frequencies.
*/
static Map map_name(const char *hf, long long n_layer)
{
	static const struct {
		const char *hf, *gguf;
	} top[] = {
		{"model.embed_tokens.weight", "token_embd.weight"},
		{"model.norm.weight", "output_norm.weight"},
		{"lm_head.weight", "output.weight"},
	};
	static const struct {
		const char *hf, *gguf;
		int qk;
	} layer[] = {
		{"input_layernorm", "attn_norm", 0},
		{"post_attention_layernorm", "ffn_norm", 0},
		{"self_attn.q_proj", "attn_q", 'q'},
		{"self_attn.k_proj", "attn_k", 'k'},
		{"self_attn.v_proj", "attn_v", 0},
		{"self_attn.o_proj", "attn_output", 0},
		{"self_attn.q_norm", "attn_q_norm", 0},
		{"self_attn.k_norm", "attn_k_norm", 0},
		{"mlp.gate_proj", "ffn_gate", 0},
		{"mlp.up_proj", "ffn_up", 0},
		{"mlp.down_proj", "ffn_down", 0},
		/* MLA */
		{"self_attn.q_a_proj", "attn_q_a", 0},
		{"self_attn.q_a_layernorm", "attn_q_a_norm", 0},
		{"self_attn.q_b_proj", "attn_q_b", 0},
		{"self_attn.kv_a_proj_with_mqa", "attn_kv_a_mqa", 0},
		{"self_attn.kv_a_layernorm", "attn_kv_a_norm", 0},
		/* the DSA lightning indexer */
		{"self_attn.indexer.wq_b", "indexer.attn_q_b", 0},
		{"self_attn.indexer.wk", "indexer.attn_k", 0},
		{"self_attn.indexer.k_norm", "indexer.k_norm", 0},
		{"self_attn.indexer.weights_proj", "indexer.proj", 0},
		/* MoE router and shared experts */
		{"mlp.gate", "ffn_gate_inp", 0},
		{"mlp.shared_experts.gate_proj", "ffn_gate_shexp", 0},
		{"mlp.shared_experts.up_proj", "ffn_up_shexp", 0},
		{"mlp.shared_experts.down_proj", "ffn_down_shexp", 0},
	};
	Map m = {.kind = M_PLAIN};
	for (size_t i = 0; i < sizeof top / sizeof *top; i++)
		if (!strcmp(hf, top[i].hf)) {
			snprintf(m.name, sizeof m.name, "%s", top[i].gguf);
			return m;
		}
	size_t l = strlen(hf);
	if (l > 20 && !strcmp(hf + l - 20, "rotary_emb.inv_freq"))
		return (Map){.kind = M_DROP};
	int n = -1, used = 0;
	if (sscanf(hf, "model.layers.%d.%n", &n, &used) != 1 || n < 0 || !used)
		die("%s: tensor has no llama.cpp name for this architecture", hf);
	if (n >= n_layer) {
		fprintf(stderr, "mkgguf: %s: layer %d is past num_hidden_layers (an MTP block), not converted\n", hf, n);
		return (Map){.kind = M_DROP};
	}
	const char *rest = hf + used;
	m.layer = n;
	if (!strcmp(rest, "mlp.gate.e_score_correction_bias")) {
		snprintf(m.name, sizeof m.name, "blk.%d.exp_probs_b.bias", n);
		return m;
	}
	if (!strcmp(rest, "self_attn.kv_b_proj.weight"))
		return (Map){.kind = M_KVB, .layer = n};
	int e = -1, eu = 0;
	if (sscanf(rest, "mlp.experts.%d.%n", &e, &eu) == 1 && e >= 0 && eu) {
		static const char *proj[] = {"gate", "up", "down"};
		for (int i = 0; i < 3; i++) {
			char want[32];
			snprintf(want, sizeof want, "%s_proj.weight", proj[i]);
			if (!strcmp(rest + eu, want))
				return (Map){.kind = M_EXPERT, .layer = n, .expert = e, .proj = proj[i]};
		}
		die("%s: tensor has no llama.cpp name for this architecture", hf);
	}
	const char *dot = strrchr(rest, '.');
	if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
		die("%s: tensor has no llama.cpp name for this architecture", hf);
	for (size_t i = 0; i < sizeof layer / sizeof *layer; i++) {
		size_t k = strlen(layer[i].hf);
		if ((size_t)(dot - rest) == k && !strncmp(rest, layer[i].hf, k)) {
			snprintf(m.name, sizeof m.name, "blk.%d.%s%s", n, layer[i].gguf, dot);
			m.qk = layer[i].qk;
			return m;
		}
	}
	die("%s: tensor has no llama.cpp name for this architecture", hf);
}

/*
** The llama q/k permutation (convert_hf_to_gguf.py LlamaModel.permute). HF Llama checkpoints apply
** RoPE in "rotate_half" form: within each head of D rows, row i (i < D/2) is rotated together with row
** i + D/2. ggml's llama RoPE rotates adjacent pairs (2j, 2j+1) instead. The converter therefore
** reorders the rows of every head so that the two halves interleave:
**     new row h*D + 2*j + s  =  old row h*D + s*(D/2) + j      (s in {0, 1}, j < D/2)
** i.e. numpy's reshape(n_head, 2, D/2, cols).swapaxes(1, 2). For q the head count is
** num_attention_heads, for k it is num_key_value_heads. Biases (1-D) are permuted the same way.
** Qwen3 (and other NeoX-RoPE archs) keep HF order, because llama.cpp applies NeoX RoPE for them.
*/
static void permute_rows(float *dst, const float *src, int64_t rows, int64_t cols, int64_t heads)
{
	int64_t d = rows / heads;
	for (int64_t h = 0; h < heads; h++)
		for (int64_t j = 0; j < d / 2; j++)
			for (int s = 0; s < 2; s++)
				memcpy(dst + (h * d + 2 * j + s) * cols, src + (h * d + s * (d / 2) + j) * cols,
				       (size_t)cols * sizeof *dst);
}

/* Seeded xorshift for --order shuffle. */
static uint64_t rnd(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13, x ^= x >> 7, x ^= x << 17;
	return *s = x;
}

/* Source order: by file, then by offset within the file (the order the bytes were written). */
static int cmp_file_order(const void *a, const void *b, void *ctx)
{
	const StDir *d = ctx;
	const StTensor *x = &d->t[*(const int *)a], *y = &d->t[*(const int *)b];
	if (x->file != y->file)
		return x->file < y->file ? -1 : 1;
	return x->off < y->off ? -1 : x->off > y->off;
}

/*
** rope_freqs.weight of a "llama3" rope config as llama.cpp's LlamaModel.generate_extra_tensors computes
** it: per frequency f = 1/theta^(2i/dim) of the whole head (dim = head_dim) the divisor 1 when its
** wavelength 2π/f is under orig/high_freq_factor, factor when past orig/low_freq_factor, else
** 1/((1 - s)/factor + s) with s = (orig/λ - low_freq_factor)/(high_freq_factor - low_freq_factor); float32
** throughout, scalar/tensor as torch does it (the reciprocal times the scalar). orig is config.json's
** top-level original_max_position_embeddings, 8192 when absent, as the converter reads it (Llama 3.1's
** own config gives 8192 only inside rope_scaling).
*/
static float *llama3_divisors(json_t *cfg, json_t *rp, double theta, long long dim)
{
	int found;
	double factor = cfg_num(rp, "factor", 8.0, &found), low = cfg_num(rp, "low_freq_factor", 1.0, &found);
	double high = cfg_num(rp, "high_freq_factor", 4.0, &found);
	double orig = cfg_num(cfg, "original_max_position_embeddings", 8192, &found);
	float *d = malloc(sizeof *d * (size_t)(dim / 2 + 1));
	if (!d)
		die("out of memory");
	for (long long i = 0; i < dim / 2; i++) {
		float f = 1.0f / powf((float)theta, (float)(2 * i) / (float)dim);
		float wl = (1.0f / f) * (float)(2 * M_PI);
		if (wl < (float)(orig / high))
			d[i] = 1.0f;
		else if (wl > (float)(orig / low))
			d[i] = (float)factor;
		else {
			float sm = ((1.0f / wl) * (float)orig - (float)low) / (float)(high - low);
			d[i] = 1.0f / ((1.0f - sm) / (float)factor + sm);
		}
	}
	return d;
}

/* A GGUF tensor to write: one source tensor, the stack of a layer's experts, half of kv_b, or the
** llama3 rope divisors. */
enum { O_PLAIN, O_STACK, O_KB, O_VB, O_FREQS };
typedef struct {
	int kind;
	char name[128];
	int qk;
	int src;   /* O_PLAIN, O_KB, O_VB: source tensor index */
	int *srcs; /* O_STACK: source tensor index per expert, -1 until seen */
} Out;

/* A source tensor as float32 (malloc'd), its element count in *n. */
static float *load_f32(const StDir *d, int ti, size_t *n)
{
	const StTensor *t = &d->t[ti];
	size_t es = st_type_size(t->dtype);
	*n = es ? (size_t)(t->nbytes / es) : 0;
	float *x = malloc((*n ? *n : 1) * sizeof *x);
	if (!x)
		die("out of memory");
	if (st_to_f32(x, st_data(d, t), t->dtype, *n))
		die("%s: dtype %s cannot be converted (F32, F16 or BF16)", t->name, st_type_name(t->dtype));
	return x;
}

int main(int argc, char **argv)
{
	const char *src = NULL, *out = NULL, *arch_opt = NULL, *type = "f32", *order = "file", *kvb = "split";
	uint64_t seed = 1;
	long alignment = 32;
	int roundtrip = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		}
		if (!strcmp(a, "--roundtrip")) {
			roundtrip = 1;
			continue;
		}
		if (a[0] == '-' && a[1] == '-') {
			if (i + 1 >= argc)
				die("%s needs an argument", a);
			const char *v = argv[++i];
			if (!strcmp(a, "--arch"))
				arch_opt = v;
			else if (!strcmp(a, "--type"))
				type = v;
			else if (!strcmp(a, "--order"))
				order = v;
			else if (!strcmp(a, "--seed"))
				seed = strtoull(v, NULL, 10) | 1;
			else if (!strcmp(a, "--alignment"))
				alignment = strtol(v, NULL, 10);
			else if (!strcmp(a, "--kv-b"))
				kvb = v;
			else
				die("unknown option %s\n%s", a, usage);
		} else if (!src) {
			src = a;
		} else if (!out) {
			out = a;
		} else {
			die("too many arguments\n%s", usage);
		}
	}
	if (!src || !out)
		die("need HF_DIR and OUT.gguf\n%s", usage);
	int qt = quant_type_from_name(type), q8 = qt > 0;
	if (qt != QT_F32 && qt != QT_Q8_0 && qt != QT_Q4_K && qt != QT_Q5_K && qt != QT_Q6_K)
		die("--type must be f32, q8_0, q4_k, q5_k or q6_k, not '%s'", type);
	if (roundtrip && !q8)
		die("--roundtrip needs a quantized --type");
	if (strcmp(order, "file") && strcmp(order, "reverse") && strcmp(order, "shuffle"))
		die("--order must be file, reverse or shuffle, not '%s'", order);
	if (alignment <= 0 || alignment > (1l << 20) || (alignment & (alignment - 1)))
		die("--alignment must be a power of two up to 2^20");
	if (strcmp(kvb, "split") && strcmp(kvb, "merged"))
		die("--kv-b must be split or merged, not '%s'", kvb);
	int merged = !strcmp(kvb, "merged");

	StDir d;
	char err[1024];
	if (st_open_dir(&d, src, err, sizeof err))
		die("%s", err);
	json_t *cfg = d.config;
	if (!arch_opt) {
		json_t *mt = json_object_get(cfg, "model_type");
		arch_opt = json_is_string(mt) ? json_string_value(mt) : "";
	}
	const char *arch = NULL;
	int fam = -1;
	for (size_t i = 0; i < sizeof archs / sizeof *archs; i++)
		if (!strcmp(arch_opt, archs[i].hf) || !strcmp(arch_opt, archs[i].gguf)) {
			arch = archs[i].gguf;
			fam = archs[i].fam;
			break;
		}
	if (!arch)
		die("architecture '%s' is not supported (llama, qwen3, qwen3_moe, glm4_moe, deepseek_v2, deepseek_v3, "
		    "glm4_moe_lite, glm_moe_dsa)", arch_opt);
	int moe = fam >= F_QWEN3MOE, mla = fam == F_DEEPSEEK2 || fam == F_GLMDSA;
	if (merged && !mla)
		die("--kv-b merged: '%s' has no MLA attention", arch);

	/* Hyperparameters and llama.cpp's metadata keys. */
	long long n_layer = cfg_int(cfg, "num_hidden_layers", -1), n_embd = cfg_int(cfg, "hidden_size", -1);
	long long n_ff = cfg_int(cfg, "intermediate_size", -1), n_head = cfg_int(cfg, "num_attention_heads", -1);
	long long n_kv = cfg_int(cfg, "num_key_value_heads", n_head), n_ctx = cfg_int(cfg, "max_position_embeddings", -1);
	long long n_vocab = cfg_int(cfg, "vocab_size", -1);
	if (n_head <= 0 || n_kv <= 0 || n_embd <= 0 || n_layer <= 0)
		die("config.json: bad head counts, hidden size or layer count");
	long long head_dim = cfg_int(cfg, "head_dim", n_embd / n_head);
	int found;
	json_t *rp = json_object_get(cfg, "rope_parameters");
	if (!json_is_object(rp))
		rp = json_object_get(cfg, "rope_scaling");
	if (!json_is_object(rp))
		rp = NULL;
	double eps = cfg_num(cfg, "rms_norm_eps", 1e-6, &found);
	double theta = cfg_rope_num(cfg, rp, "rope_theta", 10000.0, &found);
	double partial = cfg_rope_num(cfg, rp, "partial_rotary_factor", 1.0, &found);
	/* llama.cpp's Glm4MoeModel writes head_dim * partial_rotary_factor, defaulting the factor to 0.5 */
	if (fam == F_GLM4MOE && !found)
		partial = 0.5;
	const char *rope_type = NULL;
	if (rp) {
		json_t *t = json_object_get(rp, "rope_type");
		if (!json_is_string(t))
			t = json_object_get(rp, "type");
		rope_type = json_is_string(t) ? json_string_value(t) : NULL;
	}
	int yarn = rope_type && !strcmp(rope_type, "yarn"), llama3 = rope_type && !strcmp(rope_type, "llama3");
	int linear = rope_type && !strcmp(rope_type, "linear");
	if (rope_type && strcmp(rope_type, "default") && !yarn && !llama3 && !linear)
		die("config.json: rope type '%s' is not supported (default, linear, llama3, yarn)", rope_type);
	if (llama3 && fam != F_LLAMA)
		die("config.json: rope type 'llama3' is converted for llama only (as llama.cpp's LlamaModel does)");

	/* MoE */
	long long n_expert = 0, n_expert_used = 0, n_ff_exp = 0, n_shared = 0, first_dense = 0, n_nextn = 0;
	if (moe) {
		n_expert = cfg_int2(cfg, "n_routed_experts", "num_experts", "num_local_experts", -1);
		n_expert_used = cfg_int(cfg, "num_experts_per_tok", -1);
		n_ff_exp = cfg_int(cfg, "moe_intermediate_size", -1);
		n_shared = cfg_int(cfg, "n_shared_experts", 0);
		first_dense = cfg_int(cfg, "first_k_dense_replace", 0);
		if (n_expert <= 0 || n_expert_used <= 0 || n_expert_used > n_expert)
			die("config.json: bad expert counts");
	}
	if (fam == F_GLM4MOE || fam == F_GLMDSA)
		n_nextn = cfg_int(cfg, "num_nextn_predict_layers", 0);
	/* MLA */
	long long q_lora = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
	if (mla) {
		json_t *ql = json_object_get(cfg, "q_lora_rank");
		q_lora = json_is_integer(ql) ? json_integer_value(ql) : 0;
		kv_lora = cfg_int(cfg, "kv_lora_rank", -1);
		qk_nope = cfg_int(cfg, "qk_nope_head_dim", -1);
		qk_rope = cfg_int(cfg, "qk_rope_head_dim", -1);
		v_head = cfg_int(cfg, "v_head_dim", -1);
	}

	GgufWriter *w = gguf_writer_new();
	if (!w)
		die("out of memory");
	if (alignment != 32)
		gguf_writer_set_alignment(w, (uint32_t)alignment);
	char key[256];
	const char *base = strrchr(src, '/');
	base = base && base[1] ? base + 1 : src;
	gguf_writer_str(w, "general.architecture", arch);
	gguf_writer_str(w, "general.name", base);
	/* LLAMA_FTYPE_ALL_F32, MOSTLY_Q8_0, MOSTLY_Q4_K_S, MOSTLY_Q5_K_S, MOSTLY_Q6_K */
	gguf_writer_u32(w, "general.file_type", qt == QT_Q8_0 ? 7 : qt == QT_Q4_K ? 14 : qt == QT_Q5_K ? 16 : qt == QT_Q6_K ? 18 : 0);
	gguf_writer_u32(w, "general.quantization_version", 2);
#define KEY(k) (snprintf(key, sizeof key, "%s." k, arch), key)
	/* Glm4MoeModel and GlmMoeDsaModel count the MTP block(s) in block_count (llama.cpp's loader takes
	** nextn_predict_layers off again); DeepseekV2Model drops them. */
	gguf_writer_u32(w, KEY("block_count"), (uint32_t)(n_layer + n_nextn));
	gguf_writer_u32(w, KEY("context_length"), (uint32_t)n_ctx);
	gguf_writer_u32(w, KEY("embedding_length"), (uint32_t)n_embd);
	gguf_writer_u32(w, KEY("feed_forward_length"), (uint32_t)n_ff);
	gguf_writer_u32(w, KEY("attention.head_count"), (uint32_t)n_head);
	if (mla) {
		/* MLA as llama.cpp runs it: MQA over the latent, keys kv_lora + rope wide, values kv_lora wide, the
		** per-head widths in the *_mla keys; --kv-b merged (the older converter): the per-head widths in
		** key_length / value_length, the config's kv head count, no *_mla keys */
		gguf_writer_u32(w, KEY("attention.head_count_kv"), merged ? (uint32_t)n_kv : 1);
		gguf_writer_u32(w, KEY("attention.key_length"), (uint32_t)(merged ? qk_nope + qk_rope : kv_lora + qk_rope));
		gguf_writer_u32(w, KEY("attention.value_length"), (uint32_t)(merged ? v_head : kv_lora));
		if (!merged) {
			gguf_writer_u32(w, KEY("attention.key_length_mla"), (uint32_t)(qk_nope + qk_rope));
			gguf_writer_u32(w, KEY("attention.value_length_mla"), (uint32_t)v_head);
		}
		if (q_lora > 0)
			gguf_writer_u32(w, KEY("attention.q_lora_rank"), (uint32_t)q_lora);
		gguf_writer_u32(w, KEY("attention.kv_lora_rank"), (uint32_t)kv_lora);
		gguf_writer_u32(w, KEY("rope.dimension_count"), (uint32_t)(qk_rope * partial));
	} else {
		gguf_writer_u32(w, KEY("attention.head_count_kv"), (uint32_t)n_kv);
		gguf_writer_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
		gguf_writer_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
		gguf_writer_u32(w, KEY("rope.dimension_count"), (uint32_t)(head_dim * partial));
	}
	gguf_writer_f32(w, KEY("rope.freq_base"), (float)theta);
	if (yarn) {
		double factor = cfg_num(rp, "factor", 1.0, &found);
		long long orig = cfg_int(rp, "original_max_position_embeddings", -1);
		gguf_writer_str(w, KEY("rope.scaling.type"), "yarn");
		gguf_writer_f32(w, KEY("rope.scaling.factor"), (float)factor);
		gguf_writer_u32(w, KEY("rope.scaling.original_context_length"), (uint32_t)orig);
		double bf = cfg_num(rp, "beta_fast", 0, &found);
		if (found)
			gguf_writer_f32(w, KEY("rope.scaling.yarn_beta_fast"), (float)bf);
		double bs = cfg_num(rp, "beta_slow", 0, &found);
		if (found)
			gguf_writer_f32(w, KEY("rope.scaling.yarn_beta_slow"), (float)bs);
		double mall = cfg_num(rp, "mscale_all_dim", 0, &found);
		if (mla && found)
			gguf_writer_f32(w, KEY("rope.scaling.yarn_log_multiplier"), (float)(0.1 * mall));
	}
	if (linear) {
		gguf_writer_str(w, KEY("rope.scaling.type"), "linear");
		gguf_writer_f32(w, KEY("rope.scaling.factor"), (float)cfg_num(rp, "factor", 1.0, &found));
	}
	gguf_writer_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)eps);
	if (mla)
		gguf_writer_f32(w, KEY("attention.lora_layer_norm_rms_epsilon"), 1e-6f);
	if (moe) {
		gguf_writer_u32(w, KEY("expert_count"), (uint32_t)n_expert);
		gguf_writer_u32(w, KEY("expert_used_count"), (uint32_t)n_expert_used);
		gguf_writer_u32(w, KEY("expert_feed_forward_length"), (uint32_t)n_ff_exp);
		json_t *v = json_object_get(cfg, "norm_topk_prob");
		if (json_is_boolean(v))
			gguf_writer_bool(w, KEY("expert_weights_norm"), json_is_true(v));
		/* llama_expert_gating_func_type: 1 softmax (Qwen3-MoE), 2 sigmoid (DeepSeek-V3, GLM) */
		gguf_writer_u32(w, KEY("expert_gating_func"), fam == F_QWEN3MOE ? 1 : 2);
		if (fam != F_QWEN3MOE) {
			gguf_writer_u32(w, KEY("expert_shared_count"), (uint32_t)n_shared);
			gguf_writer_u32(w, KEY("leading_dense_block_count"), (uint32_t)first_dense);
			gguf_writer_f32(w, KEY("expert_weights_scale"),
			                (float)cfg_num(cfg, "routed_scaling_factor", 1.0, &found));
			json_t *g = json_object_get(cfg, "n_group"), *tg = json_object_get(cfg, "topk_group");
			if (json_is_integer(g))
				gguf_writer_u32(w, KEY("expert_group_count"), (uint32_t)json_integer_value(g));
			if (json_is_integer(tg))
				gguf_writer_u32(w, KEY("expert_group_used_count"), (uint32_t)json_integer_value(tg));
		}
	}
	if (json_is_integer(json_object_get(cfg, "num_nextn_predict_layers")) && (fam == F_GLM4MOE || fam == F_GLMDSA))
		gguf_writer_u32(w, KEY("nextn_predict_layers"), (uint32_t)n_nextn);
	if (fam == F_GLMDSA) {
		gguf_writer_u32(w, KEY("attention.indexer.head_count"), (uint32_t)cfg_int(cfg, "index_n_heads", -1));
		gguf_writer_u32(w, KEY("attention.indexer.key_length"), (uint32_t)cfg_int(cfg, "index_head_dim", -1));
		gguf_writer_u32(w, KEY("attention.indexer.top_k"), (uint32_t)cfg_int(cfg, "index_topk", -1));
	}
	gguf_writer_u32(w, KEY("vocab_size"), (uint32_t)n_vocab);
#undef KEY
	static const char *ids[][2] = {{"bos_token_id", "tokenizer.ggml.bos_token_id"},
	                               {"eos_token_id", "tokenizer.ggml.eos_token_id"},
	                               {"pad_token_id", "tokenizer.ggml.padding_token_id"}};
	for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
		json_t *v = json_object_get(cfg, ids[i][0]);
		if (json_is_integer(v) && json_integer_value(v) >= 0)
			gguf_writer_u32(w, ids[i][1], (uint32_t)json_integer_value(v));
	}

	/* The output tensors, in source order: a layer's stacked experts take the place of its first
	** expert tensor, kv_b's two halves the place of kv_b. */
	int *ord = malloc(((size_t)d.ntensor + 1) * sizeof *ord);
	Out *outs = calloc((size_t)d.ntensor + 2, sizeof *outs);
	if (!ord || !outs)
		die("out of memory");
	for (int i = 0; i < d.ntensor; i++)
		ord[i] = i;
	qsort_r(ord, (size_t)d.ntensor, sizeof *ord, cmp_file_order, &d);
	int nout = 0;
	float *divisors = llama3 ? llama3_divisors(cfg, rp, theta, head_dim) : NULL;
	if (llama3) /* first, as the converter yields its extra tensors before the checkpoint's */
		outs[nout++] = (Out){.kind = O_FREQS, .name = "rope_freqs.weight"};
	for (int oi = 0; oi < d.ntensor; oi++) {
		const StTensor *t = &d.t[ord[oi]];
		Map m = map_name(t->name, n_layer);
		if (m.kind == M_DROP)
			continue;
		if (m.kind == M_PLAIN) {
			outs[nout] = (Out){.kind = O_PLAIN, .qk = m.qk, .src = ord[oi]};
			snprintf(outs[nout++].name, sizeof outs->name, "%s", m.name);
		} else if (m.kind == M_KVB && merged) {
			outs[nout] = (Out){.kind = O_PLAIN, .src = ord[oi]};
			snprintf(outs[nout++].name, sizeof outs->name, "blk.%d.attn_kv_b.weight", m.layer);
		} else if (m.kind == M_KVB) {
			if (!mla)
				die("%s: kv_b_proj in a non-MLA architecture", t->name);
			outs[nout] = (Out){.kind = O_KB, .src = ord[oi]};
			snprintf(outs[nout++].name, sizeof outs->name, "blk.%d.attn_k_b.weight", m.layer);
			outs[nout] = (Out){.kind = O_VB, .src = ord[oi]};
			snprintf(outs[nout++].name, sizeof outs->name, "blk.%d.attn_v_b.weight", m.layer);
		} else {
			if (!moe)
				die("%s: experts in a non-MoE architecture", t->name);
			if (m.expert >= n_expert)
				die("%s: expert %d, but the config has %lld experts", t->name, m.expert, n_expert);
			char nm[128];
			snprintf(nm, sizeof nm, "blk.%d.ffn_%s_exps.weight", m.layer, m.proj);
			int k = 0;
			while (k < nout && strcmp(outs[k].name, nm))
				k++;
			if (k == nout) {
				outs[nout] = (Out){.kind = O_STACK, .srcs = malloc((size_t)n_expert * sizeof(int))};
				if (!outs[nout].srcs)
					die("out of memory");
				for (long long e = 0; e < n_expert; e++)
					outs[nout].srcs[e] = -1;
				snprintf(outs[nout++].name, sizeof outs->name, "%s", nm);
			}
			if (outs[k].srcs[m.expert] >= 0)
				die("%s: expert given twice", t->name);
			outs[k].srcs[m.expert] = ord[oi];
		}
	}
	for (int k = 0; k < nout; k++)
		if (outs[k].kind == O_STACK)
			for (long long e = 0; e < n_expert; e++)
				if (outs[k].srcs[e] < 0)
					die("%s: expert %lld is missing from the checkpoint", outs[k].name, e);

	/* Tensor order. */
	int *oo = malloc(((size_t)nout + 1) * sizeof *oo);
	if (!oo)
		die("out of memory");
	for (int i = 0; i < nout; i++)
		oo[i] = i;
	if (!strcmp(order, "reverse")) {
		for (int i = 0, j = nout - 1; i < j; i++, j--) {
			int t = oo[i];
			oo[i] = oo[j];
			oo[j] = t;
		}
	} else if (!strcmp(order, "shuffle")) {
		for (int i = nout - 1; i > 0; i--) {
			int j = (int)(rnd(&seed) % (uint64_t)(i + 1)), t = oo[i];
			oo[i] = oo[j];
			oo[j] = t;
		}
	}

	for (int k = 0; k < nout; k++) {
		const Out *o = &outs[oo[k]];
		int ndim;
		int64_t ne[GGUF_MAX_DIMS];
		size_t n;
		float *x;
		if (o->kind == O_PLAIN) {
			const StTensor *t = &d.t[o->src];
			if (t->ndim < 1 || t->ndim > GGUF_MAX_DIMS)
				die("%s: %d dimensions (1 to 4 supported)", t->name, t->ndim);
			x = load_f32(&d, o->src, &n);
			int64_t rows = t->shape[0], cols = rows ? (int64_t)n / rows : 0;
			if (fam == F_LLAMA && o->qk) {
				int64_t heads = o->qk == 'q' ? n_head : n_kv;
				if (rows % (2 * heads))
					die("%s: %lld rows cannot be split into %lld heads of pairs", t->name, (long long)rows,
					    (long long)heads);
				float *y = malloc((n ? n : 1) * sizeof *y);
				if (!y)
					die("out of memory");
				permute_rows(y, x, rows, cols, heads);
				free(x);
				x = y;
			}
			ndim = t->ndim;
			for (int i = 0; i < ndim; i++)
				ne[i] = t->shape[ndim - 1 - i];
		} else if (o->kind == O_FREQS) {
			n = (size_t)(head_dim / 2), ndim = 1, ne[0] = head_dim / 2;
			if (!(x = malloc((n ? n : 1) * sizeof *x)))
				die("out of memory");
			memcpy(x, divisors, n * sizeof *x);
		} else if (o->kind == O_STACK) {
			/* PyTorch [E, rows, cols]: torch.stack of the per-expert [rows, cols] matrices */
			const StTensor *t0 = &d.t[o->srcs[0]];
			if (t0->ndim != 2)
				die("%s: expert tensors must be matrices", t0->name);
			size_t per = (size_t)(t0->shape[0] * t0->shape[1]);
			x = malloc(per * (size_t)n_expert * sizeof *x);
			if (!x)
				die("out of memory");
			for (long long e = 0; e < n_expert; e++) {
				const StTensor *t = &d.t[o->srcs[e]];
				if (t->ndim != 2 || t->shape[0] != t0->shape[0] || t->shape[1] != t0->shape[1])
					die("%s: shape differs from expert 0's", t->name);
				size_t ne1;
				float *y = load_f32(&d, o->srcs[e], &ne1);
				memcpy(x + (size_t)e * per, y, per * sizeof *x);
				free(y);
			}
			n = per * (size_t)n_expert;
			ndim = 3;
			ne[0] = t0->shape[1], ne[1] = t0->shape[0], ne[2] = n_expert;
		} else {
			/* kv_b_proj [H * (nope + v), kv_lora] viewed as [H, nope + v, kv_lora]; k_b = the nope rows
			** transposed per head ([H, kv_lora, nope]), v_b = the v rows ([H, v, kv_lora]). */
			const StTensor *t = &d.t[o->src];
			if (t->ndim != 2 || t->shape[0] != n_head * (qk_nope + v_head) || t->shape[1] != kv_lora)
				die("%s: shape is not [num_attention_heads * (qk_nope_head_dim + v_head_dim), kv_lora_rank] "
				    "= [%lld, %lld]", t->name, n_head * (qk_nope + v_head), kv_lora);
			size_t nkv;
			float *kv = load_f32(&d, o->src, &nkv);
			int64_t H = n_head, L = kv_lora, Dn = qk_nope, Dv = v_head, R = Dn + Dv;
			ndim = 3;
			if (o->kind == O_KB) {
				n = (size_t)(H * L * Dn);
				x = malloc(n * sizeof *x);
				if (!x)
					die("out of memory");
				for (int64_t h = 0; h < H; h++)
					for (int64_t l = 0; l < L; l++)
						for (int64_t j = 0; j < Dn; j++)
							x[(h * L + l) * Dn + j] = kv[(h * R + j) * L + l];
				ne[0] = Dn, ne[1] = L, ne[2] = H;
			} else {
				n = (size_t)(H * Dv * L);
				x = malloc(n * sizeof *x);
				if (!x)
					die("out of memory");
				for (int64_t h = 0; h < H; h++)
					memcpy(x + h * Dv * L, kv + (h * R + Dn) * L, (size_t)(Dv * L) * sizeof *x);
				ne[0] = L, ne[1] = Dv, ne[2] = H;
			}
			free(kv);
		}
		size_t nl = strlen(o->name);
		int router = nl >= 19 && !strcmp(o->name + nl - 19, "ffn_gate_inp.weight");
		int rc;
		if (q8 && ndim >= 2 && ne[0] % 32 == 0 && !router) {
			int tq = qt != QT_Q8_0 && ne[0] % 256 == 0 ? qt : QT_Q8_0;
			size_t qb = quant_row_bytes(tq, ne[0]) * (n / (size_t)ne[0]);
			uint8_t *q = malloc(qb ? qb : 1);
			if (!q)
				die("out of memory");
			tq == QT_Q8_0 ? quant_q8_0(x, q, n) : tq == QT_Q4_K ? quant_q4_k(x, q, n)
			: tq == QT_Q5_K ? quant_q5_k(x, q, n) : quant_q6_k(x, q, n);
			if (roundtrip) {
				if (quant_dequant(tq, q, x, n))
					die("%s: %s cannot be dequantized", o->name, quant_type_name(tq));
				rc = gguf_writer_tensor(w, o->name, QT_F32, ndim, ne, x, n * sizeof *x);
			} else {
				rc = gguf_writer_tensor(w, o->name, tq, ndim, ne, q, qb);
			}
			free(q);
		} else {
			rc = gguf_writer_tensor(w, o->name, QT_F32, ndim, ne, x, n * sizeof *x);
		}
		if (rc)
			die("%s: out of memory", o->name);
		free(x);
	}
	for (int k = 0; k < nout; k++)
		free(outs[k].srcs);
	free(outs), free(divisors);
	free(oo);
	free(ord);
	if (gguf_writer_write(w, out, err, sizeof err))
		die("%s", err);
	gguf_writer_free(w);
	st_close(&d);
	return 0;
}
