/*
** tests/fuzz/fuzz_serve.c — libFuzzer target for glmrun serve's request parsing and validation
** (runtime/serve.c, serve_parse: JSON body to a queued-ready request, no HTTP and no engine). The first
** input byte picks the endpoint (chat or completions), the server's default sampling and its context;
** the rest is the body. With GLM_FUZZ_SERVE_TOK naming a GGUF vocabulary with a chat template (run.sh
** builds one), text prompts are encoded and messages rendered by the template; without it the server
** takes token ids only. A parse that breaks serve_parse's invariants aborts. Build and run with
** tests/fuzz/run.sh.
*/
#include "chat.h"
#include "serve.h"
#include "tok.h"
#include "weights.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static Tok *g_tk;
static ChatFmt g_cf;
static int g_chat;

/* The tokenizer and chat format, once: a missing or bad file is a setup error, not a finding. */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc, (void)argv;
	const char *path = getenv("GLM_FUZZ_SERVE_TOK");
	if (!path)
		return 0;
	char err[512];
	Weights w;
	if (weights_open(&w, path, err, sizeof err) || tok_open(&g_tk, &w, err, sizeof err)) {
		fprintf(stderr, "fuzz_serve: GLM_FUZZ_SERVE_TOK %s: %s\n", path, err);
		exit(1);
	}
	weights_close(&w);
	if (chat_setup(&g_cf, path, NULL, 0, g_tk, err, sizeof err)) {
		fprintf(stderr, "fuzz_serve: chat format of %s: %s\n", path, err);
		exit(1);
	}
	g_chat = 1;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	unsigned sel = data[0];
	/* bit 0: chat; bit 1: the server samples (--temp 0.8 --top-k 40); bits 2-3: the context */
	static const long ctx[4] = {1, 8, 96, 4096};
	ServeOpts o = {.tk = g_tk, .cf = g_chat ? &g_cf : NULL, .chat_err = "no chat format", .max_seqs = 4,
	               .max_seq = ctx[(sel >> 2) & 3], .batch_tokens = 8, .max_queue = 4, .model_name = "fuzz"};
	o.eo.temp = sel & 2 ? 0.8f : 0, o.eo.top_k = sel & 2 ? 40 : 0, o.eo.top_p = 1, o.eo.seed = 5;
	char msg[768];
	int64_t vocab = g_tk ? tok_n_vocab(g_tk) : 512;
	int st = serve_parse(&o, vocab, (const char *)data + 1, size - 1, sel & 1, msg, sizeof msg);
	if (st < 0) {
		fprintf(stderr, "fuzz_serve: %s\n", msg);
		abort();
	}
	return 0;
}
