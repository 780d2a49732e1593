/*
** runtime/cli/serve.h — glmrun serve: an OpenAI-compatible HTTP server over one engine (engine.h).
**
** HTTP threads (libmicrohttpd, one per connection) parse requests and queue them; one scheduler thread
** owns the engine. Between decode steps it prefills one chunk of a waiting prompt into a free KV-cache
** slot (at most `batch_tokens` tokens per step, so a long prompt does not stall the others), then runs
** one decode step of every live sequence (on the GPU the smallest bucket of rows that holds them). A
** finished or cancelled sequence frees its slot at once. Sampling is the engine's one configuration, set
** at start: a request asking for another temperature, top_p, top_k or seed is refused (400).
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
	int max_queue;               /* requests waiting for a slot at most; beyond: 503 */
	const char *api_key;         /* NULL: no key */
	const char *model_name;
} ServeOpts;

/* Serve until SIGTERM or SIGINT; returns 0 after a clean shutdown, or -1 with err set when it cannot start. */
int serve_main(const ServeOpts *o, char *err, size_t len);

#endif
