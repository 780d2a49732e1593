/*
** tests/tools/addvocab.c — give a fixture GGUF a tokenizer: copy MODEL.gguf, adding the tokenizer.ggml.*
** keys of VOCAB.gguf cut to the model's first N tokens (and the merges whose result stays inside them).
** GPT-2's first 256 tokens are its byte alphabet and the next ones its first merges, so the tiny fixture
** models (vocab 512) get a working byte-level BPE and can answer text prompts in tests.
** --special TEXT (repeatable) makes the last ids CONTROL tokens with those texts instead (for chat
** formats: the tiny vocabulary has no room to add them); --chat-template TEXT stores
** tokenizer.chat_template; --bos TEXT / --eos TEXT make one of the --special tokens the BOS / EOS token
** (what a chat template's bos_token / eos_token are).
**
** usage: addvocab MODEL.gguf VOCAB.gguf N OUT.gguf [--special TEXT]... [--chat-template TEXT] [--bos TEXT]
**        [--eos TEXT]
*/
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void die(const char *a, const char *b)
{
	fprintf(stderr, "addvocab: %s%s\n", a, b ? b : "");
	exit(1);
}

/* Copy a scalar or array entry with the writer call of its type. */
static void copy_kv(GgufWriter *w, const GgufKV *kv)
{
	switch (kv->type) {
	case GGUF_STRING: gguf_writer_str(w, kv->key, kv->str.s); break;
	case GGUF_FLOAT32: gguf_writer_f32(w, kv->key, (float)kv->v.f); break;
	case GGUF_BOOL: gguf_writer_bool(w, kv->key, kv->v.u != 0); break;
	case GGUF_UINT32: gguf_writer_u32(w, kv->key, (uint32_t)kv->v.u); break;
	case GGUF_INT32: gguf_writer_i32(w, kv->key, (int32_t)kv->v.i); break;
	case GGUF_UINT64: gguf_writer_u64(w, kv->key, kv->v.u); break;
	case GGUF_ARRAY: gguf_writer_arr(w, kv->key, kv->arr_type, kv->arr, kv->n); break;
	default: gguf_writer_i64(w, kv->key, kv->v.i); break;
	}
}

int main(int argc, char **argv)
{
	const char *usage = "usage: addvocab MODEL.gguf VOCAB.gguf N OUT.gguf [--special TEXT]... [--chat-template TEXT] "
	                    "[--bos TEXT] [--eos TEXT]";
	const char *bos = NULL, *eos = NULL;
	if (argc < 5)
		die(usage, NULL);
	int n = atoi(argv[3]), nspec = 0;
	const char *spec[64], *tmpl = NULL;
	for (int i = 5; i < argc; i++) {
		if (i + 1 >= argc)
			die(usage, NULL);
		if (!strcmp(argv[i], "--special") && nspec < 64)
			spec[nspec++] = argv[++i];
		else if (!strcmp(argv[i], "--chat-template"))
			tmpl = argv[++i];
		else if (!strcmp(argv[i], "--bos"))
			bos = argv[++i];
		else if (!strcmp(argv[i], "--eos"))
			eos = argv[++i];
		else
			die(usage, NULL);
	}
	char err[1024];
	Gguf m, v;
	if (gguf_open(&m, argv[1], err, sizeof err) || gguf_open(&v, argv[2], err, sizeof err))
		die(err, NULL);
	const GgufKV *tokens = gguf_find_key(&v, "tokenizer.ggml.tokens");
	const GgufKV *merges = gguf_find_key(&v, "tokenizer.ggml.merges");
	const char *model = gguf_get_str(&v, "tokenizer.ggml.model"), *pre = gguf_get_str(&v, "tokenizer.ggml.pre");
	if (!tokens || !merges || !model || n < 256 + nspec || (uint64_t)n > gguf_arr_len(tokens))
		die(argv[2], ": not a BPE vocabulary with enough tokens");
	GgufWriter *w = gguf_writer_new();
	for (int i = 0; i < m.nkv; i++)
		if (strncmp(m.kv[i].key, "tokenizer.", 10) && m.kv[i].type != GGUF_ARRAY)
			copy_kv(w, &m.kv[i]);
	gguf_writer_str(w, "tokenizer.ggml.model", model);
	if (pre)
		gguf_writer_str(w, "tokenizer.ggml.pre", pre);
	if (tmpl)
		gguf_writer_str(w, "tokenizer.chat_template", tmpl);
	const char **tv = malloc(sizeof *tv * (size_t)n);
	int32_t *types = malloc(sizeof *types * (size_t)n);
	for (int i = 0; i < n; i++) {
		uint64_t l;
		tv[i] = gguf_arr_str(tokens, (uint64_t)i, &l);
		types[i] = 1;
	}
	for (int k = 0; k < nspec; k++) {
		tv[n - nspec + k] = spec[k], types[n - nspec + k] = 3;
		if (bos && !strcmp(bos, spec[k]))
			gguf_writer_u32(w, "tokenizer.ggml.bos_token_id", (uint32_t)(n - nspec + k)), bos = NULL;
		if (eos && !strcmp(eos, spec[k]))
			gguf_writer_u32(w, "tokenizer.ggml.eos_token_id", (uint32_t)(n - nspec + k)), eos = NULL;
	}
	if (bos || eos)
		die("--bos/--eos: not one of the --special texts: ", bos ? bos : eos);
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", tv, (uint64_t)n);
	gguf_writer_arr(w, "tokenizer.ggml.token_type", GGUF_INT32, types, (uint64_t)n);
	/* Keep a merge when its result is one of the kept tokens. */
	const char **mv = malloc(sizeof *mv * gguf_arr_len(merges));
	uint64_t nm = 0;
	for (uint64_t i = 0; i < gguf_arr_len(merges); i++) {
		uint64_t l;
		const char *s = gguf_arr_str(merges, i, &l);
		char joined[256];
		const char *sp = strchr(s + 1, ' ');
		if (!sp || l >= sizeof joined)
			continue;
		snprintf(joined, sizeof joined, "%.*s%s", (int)(sp - s), s, sp + 1);
		for (int k = 256; k < n; k++)
			if (!strcmp(tv[k], joined)) {
				mv[nm++] = s;
				break;
			}
	}
	gguf_writer_arr_str(w, "tokenizer.ggml.merges", mv, nm);
	for (int i = 0; i < m.ntensor; i++) {
		const GgufTensor *t = &m.t[i];
		gguf_writer_tensor(w, t->name, t->type, t->ndim < 1 ? 1 : t->ndim, t->ne, gguf_tensor_data(&m, t), t->nbytes);
	}
	if (gguf_writer_write(w, argv[4], err, sizeof err))
		die(err, NULL);
	printf("%s: %d tokens, %llu merges\n", argv[4], n, (unsigned long long)nm);
	free(tv), free(types), free(mv);
	gguf_writer_free(w);
	gguf_close(&m), gguf_close(&v);
	return 0;
}
