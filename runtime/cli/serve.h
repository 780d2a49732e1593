/*
** runtime/cli/serve.h — glmrun serve: an OpenAI-compatible HTTP server over one engine (engine.h).
**
** HTTP threads (libmicrohttpd, one per connection) parse requests and queue them; one scheduler thread
** owns the engine. Between decode steps it prefills one chunk of a waiting prompt into a free KV-cache
** slot (at most `batch_tokens` tokens per step, so a long prompt does not stall the others), then runs
** one decode step of every live sequence (on the GPU the smallest bucket of rows that holds them). A
** finished or cancelled sequence frees its slot at once. Each request samples with its own temperature,
** top_p, top_k and seed (the server's --temp, --top-p, --top-k and --seed where it gives none), row by row
** of the batched step.
*/
#ifndef GLM_SERVE_H
#define GLM_SERVE_H

#include "chat.h"
#include "engine.h"
#include "glm.h"
#include "tok.h"

typedef struct {
	const Graph *g;
	const char *plan, *weights;
	EngineOpts eo;               /* device, sampling and GPU switches; serve sets the sizes */
	const Tok *tk;               /* NULL: prompts as token ids only, no chat */
	const ChatFmt *cf;           /* NULL: no chat endpoint; chat_err says why */
	const char *chat_err;
	const char *host;
	int port;
	int max_seqs;                /* sequences decoded at once (KV-cache slots) */
	long max_seq;                /* positions per slot */
	long batch_tokens;           /* prompt tokens prefilled per scheduler step */
	int prefill_alone;           /* a prompt with a whole step's tokens left prefills them in a step of its own
	                             ** while others decode: 1 on, 0 off, -1 where the plan's one-sequence prefill
	                             ** takes a cheaper path on the GPU (serve.c: alone_pays) */
	int max_queue;               /* requests waiting for a slot at most; beyond: 503 */
	const char *api_key;         /* NULL: no key */
	const char *model_name;
} ServeOpts;

/* Serve until SIGTERM or SIGINT; returns 0 after a clean shutdown, or -1 with err set when it cannot start. */
int serve_main(const ServeOpts *o, char *err, size_t len);

/* The request parser alone, without HTTP or an engine (tests/fuzz/fuzz_serve.c): `body` (n bytes) posted to
** /v1/chat/completions (chat 1) or /v1/completions with the options o (tk, cf, max_seq, the sampling in eo)
** and a vocabulary of `vocab` ids. Returns 0 when the request would be queued, the HTTP status of its error
** (msg says why), or -1 when the parser broke its own invariants (a bug: msg says which). */
int serve_parse(const ServeOpts *o, int64_t vocab, const char *body, size_t n, int chat, char *msg, size_t len);

#endif
