/*
** tests/tools/mkgguf.c — convert a Hugging Face fixture directory (config.json + safetensors) into a
** GGUF file the way llama.cpp's convert_hf_to_gguf.py does for the `llama` and `qwen3` architectures:
** llama.cpp tensor names and metadata keys, shapes reversed into ggml order, the q/k row permutation
** for `llama`, and F32 or Q8_0 tensors (our Q8_0 quantizer rounds as ggml's quantize_row_q8_0_ref).
** --order writes the tensors in the source file's order, reversed, or shuffled (seeded), so tests can
** check that a reader binds by name and not by position.
**
**   mkgguf HF_DIR OUT.gguf [--arch llama|qwen3] [--type f32|q8_0] [--order file|reverse|shuffle]
**          [--seed N] [--alignment N]
*/
#include "gguf.h"
#include "quant.h"
#include "st.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
	"usage: mkgguf HF_DIR OUT.gguf [--arch llama|qwen3] [--type f32|q8_0] [--order file|reverse|shuffle]\n"
	"              [--seed N] [--alignment N]\n"
	"Convert a Hugging Face checkpoint directory into a GGUF file with llama.cpp's tensor names and\n"
	"metadata keys. --arch defaults to config.json's model_type. --type q8_0 quantizes every matrix whose\n"
	"rows are whole blocks of 32 (vectors stay F32). --order sets the tensor order in the file (default:\n"
	"the order of the source file; shuffle uses --seed, default 1). --alignment defaults to 32.\n";

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

/* An integer hyperparameter from config.json (or rope_parameters for the rope keys); def when absent
** and def >= 0, else an error naming the key. */
static long long cfg_int(json_t *cfg, const char *key, long long def)
{
	json_t *v = json_object_get(cfg, key);
	if (json_is_integer(v))
		return json_integer_value(v);
	if (def >= 0 && (!v || json_is_null(v)))
		return def;
	die("config.json: '%s' missing or not an integer", key);
}

static double cfg_num(json_t *cfg, const char *key, double def, int *found)
{
	json_t *v = json_object_get(cfg, key);
	*found = json_is_number(v);
	return json_is_number(v) ? json_number_value(v) : def;
}

/*
** HF -> llama.cpp tensor names. Returns the GGUF name (static buffer) and sets *qk to 'q' or 'k' for
** the attention query/key projections (weight or bias), which may need the row permutation; NULL for
** tensors llama.cpp drops (rotary inverse frequencies).
*/
static const char *gguf_name(const char *hf, int *qk, char buf[256])
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
		{"input_layernorm", "attn_norm", 0},     {"post_attention_layernorm", "ffn_norm", 0},
		{"self_attn.q_proj", "attn_q", 'q'},     {"self_attn.k_proj", "attn_k", 'k'},
		{"self_attn.v_proj", "attn_v", 0},       {"self_attn.o_proj", "attn_output", 0},
		{"self_attn.q_norm", "attn_q_norm", 0},  {"self_attn.k_norm", "attn_k_norm", 0},
		{"mlp.gate_proj", "ffn_gate", 0},        {"mlp.up_proj", "ffn_up", 0},
		{"mlp.down_proj", "ffn_down", 0},
	};
	*qk = 0;
	for (size_t i = 0; i < sizeof top / sizeof *top; i++)
		if (!strcmp(hf, top[i].hf))
			return top[i].gguf;
	size_t l = strlen(hf);
	if (l > 20 && !strcmp(hf + l - 20, "rotary_emb.inv_freq"))
		return NULL;
	int n = -1, used = 0;
	if (sscanf(hf, "model.layers.%d.%n", &n, &used) != 1 || n < 0 || !used)
		die("%s: tensor has no llama.cpp name for this architecture", hf);
	const char *rest = hf + used, *dot = strrchr(rest, '.');
	if (!dot || (strcmp(dot, ".weight") && strcmp(dot, ".bias")))
		die("%s: tensor has no llama.cpp name for this architecture", hf);
	for (size_t i = 0; i < sizeof layer / sizeof *layer; i++) {
		size_t k = strlen(layer[i].hf);
		if ((size_t)(dot - rest) == k && !strncmp(rest, layer[i].hf, k)) {
			snprintf(buf, 256, "blk.%d.%s%s", n, layer[i].gguf, dot);
			*qk = layer[i].qk;
			return buf;
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

int main(int argc, char **argv)
{
	const char *src = NULL, *out = NULL, *arch = NULL, *type = "f32", *order = "file";
	uint64_t seed = 1;
	long alignment = 32;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		}
		if (a[0] == '-' && a[1] == '-') {
			if (i + 1 >= argc)
				die("%s needs an argument", a);
			const char *v = argv[++i];
			if (!strcmp(a, "--arch"))
				arch = v;
			else if (!strcmp(a, "--type"))
				type = v;
			else if (!strcmp(a, "--order"))
				order = v;
			else if (!strcmp(a, "--seed"))
				seed = strtoull(v, NULL, 10) | 1;
			else if (!strcmp(a, "--alignment"))
				alignment = strtol(v, NULL, 10);
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
	int q8 = !strcmp(type, "q8_0");
	if (!q8 && strcmp(type, "f32"))
		die("--type must be f32 or q8_0, not '%s'", type);
	if (strcmp(order, "file") && strcmp(order, "reverse") && strcmp(order, "shuffle"))
		die("--order must be file, reverse or shuffle, not '%s'", order);
	if (alignment <= 0 || alignment > (1l << 20) || (alignment & (alignment - 1)))
		die("--alignment must be a power of two up to 2^20");

	StDir d;
	char err[1024];
	if (st_open_dir(&d, src, err, sizeof err))
		die("%s", err);
	json_t *cfg = d.config;
	if (!arch) {
		json_t *mt = json_object_get(cfg, "model_type");
		arch = json_is_string(mt) ? json_string_value(mt) : "";
	}
	if (strcmp(arch, "llama") && strcmp(arch, "qwen3"))
		die("architecture '%s' is not supported (llama or qwen3)", arch);
	int is_llama = !strcmp(arch, "llama");

	/* Hyperparameters and llama.cpp's metadata keys. */
	long long n_layer = cfg_int(cfg, "num_hidden_layers", -1), n_embd = cfg_int(cfg, "hidden_size", -1);
	long long n_ff = cfg_int(cfg, "intermediate_size", -1), n_head = cfg_int(cfg, "num_attention_heads", -1);
	long long n_kv = cfg_int(cfg, "num_key_value_heads", n_head), n_ctx = cfg_int(cfg, "max_position_embeddings", -1);
	long long n_vocab = cfg_int(cfg, "vocab_size", -1);
	if (n_head <= 0 || n_kv <= 0 || n_embd <= 0)
		die("config.json: bad head counts or hidden size");
	long long head_dim = cfg_int(cfg, "head_dim", n_embd / n_head);
	int found;
	double eps = cfg_num(cfg, "rms_norm_eps", 1e-6, &found);
	double theta = cfg_num(cfg, "rope_theta", 10000.0, &found);
	json_t *rp = json_object_get(cfg, "rope_parameters");
	if (!found && json_is_object(rp))
		theta = cfg_num(rp, "rope_theta", 10000.0, &found);

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
	gguf_writer_u32(w, "general.file_type", q8 ? 7 : 0);      /* LLAMA_FTYPE_MOSTLY_Q8_0 / ALL_F32 */
	gguf_writer_u32(w, "general.quantization_version", 2);
#define KEY(k) (snprintf(key, sizeof key, "%s." k, arch), key)
	gguf_writer_u32(w, KEY("block_count"), (uint32_t)n_layer);
	gguf_writer_u32(w, KEY("context_length"), (uint32_t)n_ctx);
	gguf_writer_u32(w, KEY("embedding_length"), (uint32_t)n_embd);
	gguf_writer_u32(w, KEY("feed_forward_length"), (uint32_t)n_ff);
	gguf_writer_u32(w, KEY("attention.head_count"), (uint32_t)n_head);
	gguf_writer_u32(w, KEY("attention.head_count_kv"), (uint32_t)n_kv);
	gguf_writer_u32(w, KEY("attention.key_length"), (uint32_t)head_dim);
	gguf_writer_u32(w, KEY("attention.value_length"), (uint32_t)head_dim);
	gguf_writer_u32(w, KEY("rope.dimension_count"), (uint32_t)head_dim);
	gguf_writer_f32(w, KEY("rope.freq_base"), (float)theta);
	gguf_writer_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)eps);
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

	/* Tensor order. */
	int *ord = malloc(((size_t)d.ntensor + 1) * sizeof *ord);
	if (!ord)
		die("out of memory");
	for (int i = 0; i < d.ntensor; i++)
		ord[i] = i;
	qsort_r(ord, (size_t)d.ntensor, sizeof *ord, cmp_file_order, &d);
	if (!strcmp(order, "reverse")) {
		for (int i = 0, j = d.ntensor - 1; i < j; i++, j--) {
			int t = ord[i];
			ord[i] = ord[j];
			ord[j] = t;
		}
	} else if (!strcmp(order, "shuffle")) {
		for (int i = d.ntensor - 1; i > 0; i--) {
			int j = (int)(rnd(&seed) % (uint64_t)(i + 1)), t = ord[i];
			ord[i] = ord[j];
			ord[j] = t;
		}
	}

	for (int oi = 0; oi < d.ntensor; oi++) {
		const StTensor *t = &d.t[ord[oi]];
		char nb[256];
		int qk;
		const char *name = gguf_name(t->name, &qk, nb);
		if (!name)
			continue;
		if (t->ndim < 1 || t->ndim > GGUF_MAX_DIMS)
			die("%s: %d dimensions (1 to 4 supported)", t->name, t->ndim);
		size_t es = st_type_size(t->dtype), n = es ? (size_t)(t->nbytes / es) : 0;
		float *x = malloc((n ? n : 1) * sizeof *x), *y = malloc((n ? n : 1) * sizeof *y);
		if (!x || !y)
			die("out of memory");
		if (st_to_f32(x, st_data(&d, t), t->dtype, n))
			die("%s: dtype %s cannot be converted (F32, F16 or BF16)", t->name, st_type_name(t->dtype));
		int64_t rows = t->shape[0], cols = rows ? (int64_t)n / rows : 0;
		if (is_llama && qk) {
			int64_t heads = qk == 'q' ? n_head : n_kv;
			if (rows % (2 * heads))
				die("%s: %lld rows cannot be split into %lld heads of pairs", t->name, (long long)rows,
				    (long long)heads);
			permute_rows(y, x, rows, cols, heads);
			memcpy(x, y, n * sizeof *x);
		}
		int64_t ne[GGUF_MAX_DIMS];
		for (int k = 0; k < t->ndim; k++)
			ne[k] = t->shape[t->ndim - 1 - k];
		int rc;
		if (q8 && t->ndim >= 2 && ne[0] % 32 == 0) {
			size_t qb = quant_row_bytes(QT_Q8_0, ne[0]) * (size_t)(n / (size_t)ne[0]);
			uint8_t *q = malloc(qb ? qb : 1);
			if (!q)
				die("out of memory");
			quant_q8_0(x, q, n);
			rc = gguf_writer_tensor(w, name, QT_Q8_0, t->ndim, ne, q, qb);
			free(q);
		} else {
			rc = gguf_writer_tensor(w, name, QT_F32, t->ndim, ne, x, n * sizeof *x);
		}
		if (rc)
			die("%s: out of memory", name);
		free(x);
		free(y);
	}
	free(ord);
	if (gguf_writer_write(w, out, err, sizeof err))
		die("%s", err);
	gguf_writer_free(w);
	st_close(&d);
	return 0;
}
