/*
** runtime/cli/serve.c — glmrun serve (serve.h): OpenAI's /v1/completions and /v1/chat/completions over
** HTTP, streamed as server-sent events or answered whole, with continuous batching on one engine.
**
** One mutex (Server.mu) guards the queue, every request's output and the metrics; the scheduler holds it
** only between engine calls. A request lives until both its HTTP side and the scheduler let go (refs).
** The scheduler keeps each running sequence's step-buffer row on the host (slot, last token, position,
** sampling step, and the request's own temperature, top_k, top_p and seed) and sets the engine's rows again
** whenever the live set changes or a prefill used row 0.
*/
#include "serve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define SERVE_MAX_BODY (4 << 20) /* bytes of a request body; more: 413 */
#define SERVE_MAX_STOP 8

typedef struct Req {
	struct Req *next;            /* the waiting queue */
	int refs;                    /* the HTTP side and the scheduler */
	/* the request, fixed once queued */
	int32_t *prompt;
	int np;
	long max_tokens;
	char *stop[SERVE_MAX_STOP];
	int nstop;
	size_t stop_max;
	int chat, stream, ignore_eos, want_ids;
	float temp, top_p;           /* the request's sampling (the server's where it gives none) */
	int top_k, seed_given;
	uint32_t seed;               /* seed_given 0: the server's --seed plus the slot, set at admission */
	char id[48];
	long created;
	/* the scheduler's: the sequence */
	int slot;
	long adm;                    /* admission order: prompts prefill first come, first served */
	long limit, off;             /* tokens it may make; prompt tokens prefilled so far */
	int32_t last;
	TokStream ts;
	int ts_on;
	/* the output (under Server.mu) */
	char *text;
	size_t ntext, cap, shown;    /* shown: bytes that no stop string can take back */
	int32_t *ids;
	long made;
	int done, cancelled, status; /* status: 0, or the HTTP status of a failure (err) */
	const char *finish;
	char err[512];
	double t_queued, t_first, t_last;
	pthread_cond_t cv;
} Req;

/* Histogram buckets (seconds) of /metrics. */
static const double ttft_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tpot_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5};
#define NTTFT (int)(sizeof ttft_le / sizeof ttft_le[0])
#define NTPOT (int)(sizeof tpot_le / sizeof tpot_le[0])
static const int status_codes[] = {200, 400, 401, 404, 405, 413, 500, 503};
#define NSTATUS (int)(sizeof status_codes / sizeof status_codes[0])

typedef struct {
	long requests[NSTATUS], prompt_tokens, gen_tokens, cancelled;
	long steps, rows;            /* decode steps, and the live rows they ran (rows > steps: batching) */
	long psteps, parts;          /* prefill steps, and the prompts' pieces they ran (parts > psteps: shared) */
	long alone;                  /* prefill steps of one prompt alone while others decode (prefill_alone) */
	long ttft[NTTFT + 1], tpot[NTPOT + 1], nttft, ntpot;
	double sttft, stpot;
} Metrics;

typedef struct {
	ServeOpts o;
	Engine *e;
	int eslots;                  /* the engine's slots: max_seqs (+1 on the GPU: the padding rows' slot) */
	int64_t vocab;               /* token ids a prompt may hold */
	int row_samp;                /* the engine samples each row its own way (0: a GPU plan of an older glmc) */
	pthread_mutex_t mu, render_mu;
	pthread_cond_t wake;
	Req *qhead, *qtail;
	int nwait, nrun, quit;
	Req *slot[ENGINE_MAX_SLOTS];
	long nadm;                   /* requests admitted so far */
	int dirty, rowsn;            /* the engine's rows need setting; rows of the last decode */
	int alone, alone_turn;       /* prefill_alone in force; the last step was a prompt's alone (decode next) */
	char broken[600];            /* the engine failed: every request gets this 500 */
	long delay_us;               /* test hook GLMRUN_TEST_STEP_DELAY_MS: a pause after each decode step */
	long seq;
	Metrics m;
} Server;

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* One line on stderr per request or event (the server log). */
static void slog(const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof line, fmt, ap);
	va_end(ap);
	fprintf(stderr, "glmrun serve: %s\n", line);
}

/* Count a response by status (under mu). */
static void count_status(Server *S, int status)
{
	for (int i = 0; i < NSTATUS; i++)
		if (status_codes[i] == status)
			S->m.requests[i]++;
}

static void observe(long *b, const double *le, int n, double v)
{
	int i = 0;
	while (i < n && v > le[i])
		i++;
	b[i]++;
}

/* Drop one reference (under mu); the last frees the request. */
static void req_unref(Req *r)
{
	if (--r->refs > 0)
		return;
	free(r->prompt), free(r->text), free(r->ids);
	for (int i = 0; i < r->nstop; i++)
		free(r->stop[i]);
	if (r->ts_on)
		tok_stream_free(&r->ts);
	pthread_cond_destroy(&r->cv);
	free(r);
}

/* ---- the scheduler ---- */

/* The smallest bucket that holds n rows: a power of two, or all the slots (as glmrun --batch runs them). */
static int bucket_for(int n, int slots)
{
	int b = 1;
	while (b < n)
		b *= 2;
	return b < slots ? b : slots;
}

/* Append to the answer's text (under mu). */
static int put_text(Req *r, const char *p, size_t n)
{
	if (r->ntext + n + 1 > r->cap) {
		size_t cap = 2 * (r->ntext + n + 64);
		char *t = realloc(r->text, cap);
		if (!t)
			return -1;
		r->text = t, r->cap = cap;
	}
	memcpy(r->text + r->ntext, p, n);
	r->ntext += n;
	r->text[r->ntext] = 0;
	return 0;
}

/* End request r (under mu): its finish reason, what was held back for stop strings, the metrics. */
static void finish(Server *S, Req *r, const char *why)
{
	if (r->done)
		return;
	if (r->ts_on && strcmp(why, "stop")) {
		size_t pl;
		const char *rest = tok_stream_flush(&r->ts, &pl);
		if (rest && pl && put_text(r, rest, pl))
			r->status = 500, snprintf(r->err, sizeof r->err, "out of memory");
	}
	r->shown = r->ntext;
	r->done = 1, r->finish = why;
	S->m.gen_tokens += r->made;
	if (r->made > 1) {
		double tpot = (r->t_last - r->t_first) / (double)(r->made - 1);
		observe(S->m.tpot, tpot_le, NTPOT, tpot);
		S->m.ntpot++, S->m.stpot += tpot;
	}
	pthread_cond_broadcast(&r->cv);
}

/* End r with an error status (under mu). */
static void fail_req(Server *S, Req *r, int status, const char *msg)
{
	if (r->done)
		return;
	r->status = status;
	snprintf(r->err, sizeof r->err, "%s", msg);
	finish(S, r, "error");
}

/*
** Sequence r sampled tok (under mu): record it; end at end-of-generation (chat: end-of-turn too), a
** stop string, max_tokens or a full context. The text shown so far stops short of anything a stop string
** could still claim, at a UTF-8 character boundary.
*/
static void take(Server *S, Req *r, int32_t tok)
{
	double t = now_s();
	if (!r->made) {
		r->t_first = t;
		observe(S->m.ttft, ttft_le, NTTFT, t - r->t_queued);
		S->m.nttft++, S->m.sttft += t - r->t_queued;
	}
	r->t_last = t;
	r->ids[r->made++] = tok;
	r->last = tok;
	const Tok *tk = S->o.tk;
	if (tk && !r->ignore_eos && (tok_is_eog(tk, tok) || (r->chat && S->o.cf && chat_is_eot(S->o.cf, tok)))) {
		finish(S, r, "stop");
		return;
	}
	if (tk) {
		size_t pl, before = r->ntext;
		const char *piece = tok_stream_put(&r->ts, tok, &pl);
		if (!piece || (pl && put_text(r, piece, pl))) {
			fail_req(S, r, 500, "out of memory decoding the answer");
			return;
		}
		char *hit = NULL;
		size_t from = before >= r->stop_max ? before - r->stop_max + 1 : 0;
		for (int i = 0; i < r->nstop && r->text; i++) { /* no text yet: nothing to find */
			char *at = memmem(r->text + from, r->ntext - from, r->stop[i], strlen(r->stop[i]));
			if (at && (!hit || at < hit))
				hit = at;
		}
		if (hit) {
			r->ntext = (size_t)(hit - r->text);
			r->text[r->ntext] = 0;
			finish(S, r, "stop");
			return;
		}
		size_t keep = r->stop_max ? r->stop_max - 1 : 0, sh = r->ntext >= keep ? r->ntext - keep : 0;
		while (sh > r->shown && ((unsigned char)r->text[sh] & 0xC0) == 0x80)
			sh--;
		if (sh > r->shown)
			r->shown = sh;
	}
	if (r->made >= r->limit)
		finish(S, r, "length");
	pthread_cond_broadcast(&r->cv);
}

/* Free the slots of finished and cancelled sequences and drop cancelled waiting requests (under mu). */
static void reap(Server *S)
{
	for (int s = 0; s < S->o.max_seqs; s++) {
		Req *r = S->slot[s];
		if (!r || (!r->done && !r->cancelled))
			continue;
		if (!r->done) {
			S->m.cancelled++;
			finish(S, r, "cancelled");
			slog("%s cancelled after %ld tokens (the client went away); slot %d freed", r->id, r->made, s);
		}
		S->slot[s] = NULL;
		S->nrun--, S->dirty = 1;
		req_unref(r);
	}
	for (Req **p = &S->qhead, *prev = NULL; *p;) {
		Req *r = *p;
		if (!r->cancelled) {
			prev = r, p = &r->next;
			continue;
		}
		*p = r->next;
		if (S->qtail == r)
			S->qtail = prev;
		S->nwait--, S->m.cancelled++;
		finish(S, r, "cancelled");
		req_unref(r);
	}
}

/* Waiting requests into the free slots, their prompts to be prefilled (under mu). */
static void admit(Server *S)
{
	for (int s = 0; s < S->o.max_seqs && S->qhead; s++)
		if (!S->slot[s]) {
			Req *r = S->qhead;
			if (!(S->qhead = r->next))
				S->qtail = NULL;
			S->nwait--, S->nrun++;
			r->slot = s, r->off = 0, r->adm = S->nadm++;
			if (!r->seed_given)
				r->seed = S->o.eo.seed + (uint32_t)s;
			r->limit = S->o.max_seq - r->np + 1 < r->max_tokens ? S->o.max_seq - r->np + 1 : r->max_tokens;
			S->slot[s] = r;
			S->m.prompt_tokens += r->np;
		}
}

/* Every request, waiting or running, ends with the engine's error (under mu). */
static void fail_all(Server *S, int status, const char *msg)
{
	for (int s = 0; s < S->o.max_seqs; s++)
		if (S->slot[s])
			fail_req(S, S->slot[s], status, msg);
	for (Req *r = S->qhead; r; r = r->next)
		fail_req(S, r, status, msg);
}

/* Request q's step-buffer row: its slot, the token to feed at pos, its sampling step and its own sampling. */
static EngineRow row_of(const Req *q, int32_t tok, int32_t pos, int32_t step)
{
	return (EngineRow){.slot = q->slot, .token = tok, .pos = pos, .step = step, .own_sampling = 1, .temp = q->temp,
	                   .top_k = q->top_k, .top_p = q->top_p, .seed = q->seed};
}

/* Set the engine's rows: the live sequences, then padding rows (GPU buckets) on the reserved slot. */
static int set_rows(Server *S, Req **live, int nlive, int rows, char *err, size_t len)
{
	EngineRow r[ENGINE_MAX_SLOTS];
	for (int k = 0; k < rows; k++)
		r[k] = k < nlive ? row_of(live[k], live[k]->last, (int32_t)(live[k]->np + live[k]->made - 1),
		                          (int32_t)live[k]->made)
		                 : (EngineRow){.slot = S->o.max_seqs};
	return engine_set_rows(S->e, rows, r, err, len);
}

/* The admitted sequences whose prompts are not yet all prefilled, first admitted first (under mu). */
static int prefilling(Server *S, Req **out)
{
	int n = 0;
	for (int s = 0; s < S->o.max_seqs; s++) {
		Req *r = S->slot[s];
		if (r && r->off < r->np && !r->done && !r->cancelled) {
			int k = n++;
			for (; k > 0 && out[k - 1]->adm > r->adm; k--)
				out[k] = out[k - 1];
			out[k] = r;
		}
	}
	return n;
}

/* The sequences decoding (prompt prefilled, first token taken, not done), in slot order (under mu). */
static int decoding(Server *S, Req **out)
{
	int n = 0;
	for (int s = 0; s < S->o.max_seqs; s++) {
		Req *r = S->slot[s];
		if (r && r->off == r->np && r->made && !r->done && !r->cancelled)
			out[n++] = r;
	}
	return n;
}

/* Request r sampled tok in the step just run, unless it ended meanwhile (under mu). */
static void take_live(Server *S, Req *r, int32_t tok)
{
	if (!r->done && !r->cancelled)
		take(S, r, tok);
}

/*
** Whether a plan's one-sequence prefill takes a cheaper path on the GPU than a step of several sequences
** (launches marked LAUNCH_ONE_SEQ: MLA expanded through kv_b, whose cost per context row is paid once a
** step; GLM-4.7-Flash's 8K prompt took 638 ms so against 2155 absorbed on an H100, bench/NOTES.md 65). A
** mixed step always runs the path of several sequences, so there a long prompt's chunk of
** --max-num-batched-tokens rows goes alone, and the decoding sequences take the step after it (the trade,
** and the round that is to time it: bench/NOTES.md 72).
*/
static int alone_pays(const Graph *g)
{
	for (int i = 0; i < g->cuda.nl; i++)
		if (g->cuda.l[i].flags & LAUNCH_ONE_SEQ)
			return 1;
	return 0;
}

/*
** One scheduler step outside the lock. With prompts waiting, one mixed step (engine_prefill_parts): each
** decoding sequence's next token, then the prompts first admitted first, up to --max-num-batched-tokens
** tokens in all (at least one prompt token; a longer prompt goes on in the next step; the chunk that ends
** a prompt samples its first token). Under prefill_alone, a first prompt with a whole step's tokens left
** (which would fill the mixed step but for the decoding rows) takes a step of its own instead, and the
** decoding sequences the next one. Otherwise one decode step of the decoding sequences (on the GPU the
** graph of the smallest bucket of rows that holds them). Returns -1 with err when the engine failed.
*/
static int step(Server *S, char *err, size_t len)
{
	Req *live[ENGINE_MAX_SLOTS], *pre[ENGINE_MAX_SLOTS];
	EnginePart part[ENGINE_MAX_SLOTS];
	int32_t next[ENGINE_MAX_SLOTS];
	pthread_mutex_lock(&S->mu);
	int npre = prefilling(S, pre), nlive = decoding(S, live), np = 0;
	pthread_mutex_unlock(&S->mu);
	int turn = S->alone_turn;
	S->alone_turn = 0;
	if (npre && nlive && S->alone && !turn && pre[0]->np - pre[0]->off >= S->o.batch_tokens) {
		Req *r = pre[0];
		part[0] = (EnginePart){.ids = r->prompt + r->off, .n = S->o.batch_tokens,
		                       .row = row_of(r, 0, (int32_t)r->off, 0)};
		if (engine_prefill_parts(S->e, 1, part, next, NULL, err, len))
			return -1;
		pthread_mutex_lock(&S->mu);
		S->dirty = 1, S->alone_turn = 1, S->m.psteps++, S->m.parts++, S->m.alone++;
		if ((r->off += part[0].n) == r->np)
			take_live(S, r, next[0]);
	} else if (npre && !(turn && nlive)) {
		for (; np < nlive; np++) {
			Req *r = live[np];
			int32_t pos = (int32_t)(r->np + r->made - 1);
			part[np] = (EnginePart){.ids = &r->last, .n = 1, .row = row_of(r, r->last, pos, (int32_t)r->made)};
		}
		long budget = S->o.batch_tokens - nlive > 1 ? S->o.batch_tokens - nlive : 1;
		for (int k = 0; k < npre && budget > 0; k++, np++) {
			Req *r = pre[k];
			long c = r->np - r->off < budget ? r->np - r->off : budget;
			part[np] = (EnginePart){.ids = r->prompt + r->off, .n = c, .row = row_of(r, 0, (int32_t)r->off, 0)};
			budget -= c;
		}
		if (engine_prefill_parts(S->e, np, part, next, NULL, err, len))
			return -1;
		pthread_mutex_lock(&S->mu);
		S->dirty = 1, S->m.psteps++, S->m.parts += np - nlive;
		if (nlive)
			S->m.steps++, S->m.rows += nlive;
		for (int k = 0; k < nlive; k++)
			take_live(S, live[k], next[k]);
		for (int k = nlive; k < np; k++) {
			Req *r = pre[k - nlive];
			if ((r->off += part[k].n) == r->np)
				take_live(S, r, next[k]);
		}
	} else {
		if (!nlive)
			return 0;
		int want = engine_on_gpu(S->e) ? bucket_for(nlive, S->eslots) : nlive;
		if ((S->dirty || want != S->rowsn) && set_rows(S, live, nlive, want, err, len))
			return -1;
		S->dirty = 0, S->rowsn = want;
		if (engine_decode(S->e, want, next, NULL, err, len))
			return -1;
		pthread_mutex_lock(&S->mu);
		S->m.steps++, S->m.rows += nlive;
		for (int k = 0; k < nlive; k++)
			take_live(S, live[k], next[k]);
	}
	reap(S); /* finished sequences free their slots at once, before their clients hear of it */
	pthread_mutex_unlock(&S->mu);
	if (S->delay_us)
		usleep((useconds_t)S->delay_us);
	return 0;
}

/* The scheduler thread: admit, prefill, decode, free, until quit; then every request ends. */
static void *scheduler(void *arg)
{
	Server *S = arg;
	char err[512];
	pthread_mutex_lock(&S->mu);
	for (;;) {
		reap(S);
		admit(S);
		while (!S->quit && !S->nrun && !S->qhead)
			pthread_cond_wait(&S->wake, &S->mu);
		if (S->quit)
			break;
		if (!S->nrun) /* admit takes a waiting request whenever a slot is free: this is the queue of none */
			continue;
		if (S->broken[0]) { /* nothing more runs; the waiters get the error */
			fail_all(S, 500, S->broken);
			reap(S);
			continue;
		}
		pthread_mutex_unlock(&S->mu);
		int rc = step(S, err, sizeof err);
		pthread_mutex_lock(&S->mu);
		if (rc) {
			slog("engine failed: %s", err);
			if (engine_stuck(S->e))
				_exit(1); /* a GPU rank may be blocked: no clean-up can finish */
			snprintf(S->broken, sizeof S->broken, "the engine failed: %s", err);
			fail_all(S, 500, S->broken);
		}
	}
	fail_all(S, 503, "the server is shutting down");
	reap(S);
	pthread_mutex_unlock(&S->mu);
	return NULL;
}

/* ---- HTTP ---- */

typedef struct {
	char *body;
	size_t n, cap;
	int too_big;
} Conn;

/* Queue a JSON response of status (the body compact, one line). */
static enum MHD_Result reply_json(Server *S, struct MHD_Connection *c, int status, json_t *j)
{
	char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		s = strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,\"code\":null}}"),
		status = 500;
	if (!s)
		return MHD_NO;
	struct MHD_Response *resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "application/json");
	enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, resp);
	MHD_destroy_response(resp);
	pthread_mutex_lock(&S->mu);
	count_status(S, status);
	pthread_mutex_unlock(&S->mu);
	return rc;
}

/* OpenAI's error object for status. */
static json_t *error_json(int status, const char *msg, const char *param, const char *code)
{
	const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
	                 : status >= 500 ? "server_error" : "invalid_request_error";
	json_t *m = json_string(msg);
	if (!m) { /* a message quoting the client's bytes that are not UTF-8 (a JSON parse error): those become '?' */
		char safe[768];
		size_t i = 0;
		for (; msg[i] && i + 1 < sizeof safe; i++)
			safe[i] = (unsigned char)msg[i] < 0x80 ? msg[i] : '?';
		safe[i] = 0;
		m = json_string(safe);
	}
	return json_pack("{s:{s:o, s:s, s:s?, s:s?}}", "error", "message", m, "type", type, "param", param, "code", code);
}

/* An error response, one line in the log. */
static enum MHD_Result reply_err(Server *S, struct MHD_Connection *c, const char *method, const char *url, int status,
                                 const char *param, const char *code, const char *fmt, ...)
{
	char msg[768];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	slog("%s %s %d: %s", method, url, status, msg);
	return reply_json(S, c, status, error_json(status, msg, param, code));
}

/* Whether the client closed its connection (a non-blocking peek reads end-of-file). */
static int peer_gone(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return 0;
	char b;
	ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

/* Wait (under mu) until r has text beyond `sent` (or ids beyond sent_ids, when it asked for ids) or is done;
** a client gone cancels it. */
static void wait_output(Server *S, Req *r, size_t sent, long sent_ids, struct MHD_Connection *c)
{
	while (!r->done && r->shown <= sent && (!r->want_ids || r->made <= sent_ids) && !r->cancelled) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 200 * 1000 * 1000;
		if (ts.tv_nsec >= 1000000000)
			ts.tv_sec++, ts.tv_nsec -= 1000000000;
		pthread_cond_timedwait(&r->cv, &S->mu, &ts);
		if (!r->done && c && peer_gone(c)) {
			r->cancelled = 1;
			pthread_cond_signal(&S->wake);
		}
	}
}

/* A number field: absent or null leaves *v; else it must be a number. Returns 0 or -1 with msg. */
static int get_num(const json_t *o, const char *k, double *v, int *given, char *msg, size_t len)
{
	const json_t *x = json_object_get(o, k);
	*given = 0;
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_number(x))
		return seterr(msg, len, "'%s' must be a number", k);
	*v = json_number_value(x), *given = 1;
	return 0;
}

/* An integer field (absent or null leaves *v), at least lo. */
static int get_int(const json_t *o, const char *k, long lo, long *v, char *msg, size_t len)
{
	const json_t *x = json_object_get(o, k);
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_integer(x) || json_integer_value(x) < lo)
		return seterr(msg, len, "'%s' must be an integer >= %ld", k, lo);
	*v = (long)json_integer_value(x);
	return 0;
}

/* A boolean field (absent or null leaves *v). */
static int get_bool(const json_t *o, const char *k, int *v, char *msg, size_t len)
{
	const json_t *x = json_object_get(o, k);
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_boolean(x))
		return seterr(msg, len, "'%s' must be a boolean", k);
	*v = json_is_true(x);
	return 0;
}

/*
** The request's sampling into r: temperature (>= 0; 0 is greedy), top_p (in (0, 1]), top_k (an integer;
** 0 or -1 is off) and seed (a uint32), each defaulting to the server's --temp, --top-p, --top-k and --seed
** (plus the slot); n must be 1, and log probabilities, which this server does not compute, are refused.
** *param names the field at fault.
*/
static int get_sampling(const Server *S, Req *r, const json_t *o, const char **param, char *msg, size_t len)
{
	const EngineOpts *e = &S->o.eo;
	double v;
	int given;
	r->temp = e->temp, r->top_p = e->top_p, r->top_k = e->top_k;
	if (get_num(o, *param = "temperature", &v, &given, msg, len))
		return -1;
	if (given && !(v >= 0 && v <= 1e6))
		return seterr(msg, len, "'temperature' %g: must be a number >= 0 (0: greedy)", v);
	if (given)
		r->temp = (float)v;
	if (get_num(o, *param = "top_p", &v, &given, msg, len))
		return -1;
	if (given && !(v > 0 && v <= 1))
		return seterr(msg, len, "'top_p' %g: must be a number in (0, 1]", v);
	if (given)
		r->top_p = (float)v;
	long k = r->top_k;
	if (get_int(o, *param = "top_k", -1, &k, msg, len))
		return -1;
	if (k > INT_MAX)
		return seterr(msg, len, "'top_k' %ld is too large", k);
	r->top_k = (int)k;
	long seed = -1;
	if (get_int(o, *param = "seed", 0, &seed, msg, len))
		return -1;
	if (seed > (long)UINT32_MAX)
		return seterr(msg, len, "'seed' %ld: must be an integer in [0, 4294967295]", seed);
	if (seed >= 0)
		r->seed = (uint32_t)seed, r->seed_given = 1;
	*param = "n";
	long n = 1;
	if (get_int(o, "n", 1, &n, msg, len))
		return -1;
	if (n != 1)
		return seterr(msg, len, "'n' %ld: this server makes one choice per request", n);
	/* logprobs: false (chat) or null is no request for them; top_logprobs 0 or null likewise */
	const json_t *lp = json_object_get(o, *param = "logprobs"), *tl = json_object_get(o, "top_logprobs");
	if (lp && !json_is_null(lp) && !json_is_false(lp))
		return seterr(msg, len, "'logprobs': this server does not return log probabilities");
	*param = "top_logprobs";
	if (tl && !json_is_null(tl) && !(json_is_integer(tl) && json_integer_value(tl) == 0))
		return seterr(msg, len, "'top_logprobs': this server does not return log probabilities");
	/* a plan whose sampler takes one setting for every row: only the server's (the engine would refuse the
	** rows, and the step would fail for every request) */
	int greedy = !(r->temp > 0) && !(e->temp > 0);
	*param = !greedy && r->temp != e->temp ? "temperature" : greedy || r->top_k == e->top_k ? NULL : "top_k";
	if (!*param && !greedy && r->top_p != e->top_p)
		*param = "top_p";
	if (!*param && !greedy && r->seed_given)
		*param = "seed";
	if (!S->row_samp && *param)
		return seterr(msg, len, "'%s': this plan's GPU sampler (glm_sample, from an older glmc) samples every request "
		              "as the server's flags say; recompile the plan for per-request sampling", *param);
	*param = NULL;
	return 0;
}

/* stop: a string or a list of strings (empty ones ignored). */
static int get_stop(Req *r, const json_t *o, char *msg, size_t len)
{
	const json_t *x = json_object_get(o, "stop");
	if (!x || json_is_null(x))
		return 0;
	if (!json_is_string(x) && !json_is_array(x))
		return seterr(msg, len, "'stop' must be a string or a list of strings");
	size_t n = json_is_string(x) ? 1 : json_array_size(x);
	if (n > SERVE_MAX_STOP)
		return seterr(msg, len, "'stop' has %zu strings; at most %d", n, SERVE_MAX_STOP);
	for (size_t i = 0; i < n; i++) {
		const json_t *s = json_is_string(x) ? x : json_array_get(x, i);
		if (!json_is_string(s))
			return seterr(msg, len, "'stop' must be a string or a list of strings");
		if (!json_string_length(s))
			continue;
		if (!(r->stop[r->nstop] = strdup(json_string_value(s))))
			return seterr(msg, len, "out of memory");
		size_t l = json_string_length(s);
		r->stop_max = l > r->stop_max ? l : r->stop_max;
		r->nstop++;
	}
	return 0;
}

/* Text into r's prompt ids. */
static int encode(Server *S, Req *r, const char *text, size_t n, int add_special, char *msg, size_t len)
{
	size_t nid = 0;
	if (tok_encode(S->o.tk, text, n, add_special, 1, &r->prompt, &nid))
		return seterr(msg, len, "out of memory encoding the prompt");
	r->np = (int)nid;
	return 0;
}

/* A message's content: a string, or a list of {"type": "text", "text": ...} parts (joined); null is "". */
static char *content_text(const json_t *c, int i, char *msg, size_t len)
{
	if (!c || json_is_null(c))
		return strdup("");
	if (json_is_string(c))
		return strndup(json_string_value(c), json_string_length(c));
	if (!json_is_array(c)) {
		seterr(msg, len, "messages[%d].content must be a string or a list of text parts", i);
		return NULL;
	}
	size_t tot = 1;
	for (size_t k = 0; k < json_array_size(c); k++) {
		const json_t *p = json_array_get(c, k), *t = json_object_get(p, "text");
		const char *ty = json_string_value(json_object_get(p, "type"));
		if (!json_is_object(p) || !ty || strcmp(ty, "text") || !json_is_string(t)) {
			seterr(msg, len, "messages[%d].content[%zu]: only parts {\"type\": \"text\", \"text\": ...} are supported", i, k);
			return NULL;
		}
		tot += json_string_length(t);
	}
	char *s = malloc(tot);
	if (!s)
		return NULL;
	size_t at = 0;
	for (size_t k = 0; k < json_array_size(c); k++) {
		const json_t *t = json_object_get(json_array_get(c, k), "text");
		memcpy(s + at, json_string_value(t), json_string_length(t));
		at += json_string_length(t);
	}
	s[at] = 0;
	return s;
}

/* /v1/chat/completions: the messages rendered by the chat template, encoded. */
static int chat_prompt_of(Server *S, Req *r, const json_t *o, const char **param, char *msg, size_t len)
{
	const json_t *m = json_object_get(o, *param = "messages");
	if (!S->o.cf)
		return seterr(msg, len, "this server has no chat format: %s", S->o.chat_err ? S->o.chat_err : "no tokenizer");
	if (!m)
		return seterr(msg, len, "'messages' is required");
	if (!json_is_array(m) || !json_array_size(m))
		return seterr(msg, len, "'messages' must be a non-empty list");
	int n = (int)json_array_size(m), rc = 0;
	const char **roles = calloc((size_t)n, sizeof *roles);
	char **texts = calloc((size_t)n, sizeof *texts);
	if (!roles || !texts)
		rc = seterr(msg, len, "out of memory");
	for (int i = 0; i < n && !rc; i++) {
		const json_t *e = json_array_get(m, (size_t)i);
		if (!json_is_object(e) || !(roles[i] = json_string_value(json_object_get(e, "role"))))
			rc = seterr(msg, len, "messages[%d] must be an object with a string 'role'", i);
		else if (!(texts[i] = content_text(json_object_get(e, "content"), i, msg, len)))
			rc = -1;
	}
	ChatBuf b = {0};
	if (!rc) {
		pthread_mutex_lock(&S->render_mu);
		rc = chat_render_msgs(S->o.cf, &b, roles, (const char *const *)texts, n, 1, msg, len);
		pthread_mutex_unlock(&S->render_mu);
	}
	if (!rc)
		rc = encode(S, r, b.s ? b.s : "", b.n, 0, msg, len);
	chat_buf_free(&b);
	for (int i = 0; texts && i < n; i++)
		free(texts[i]);
	free(roles), free(texts);
	return rc;
}

/* /v1/completions: prompt as text or token ids (or a list of one of them). */
static int text_prompt_of(Server *S, Req *r, const json_t *o, const char **param, char *msg, size_t len)
{
	const json_t *p = json_object_get(o, *param = "prompt");
	if (!p)
		return seterr(msg, len, "'prompt' is required");
	if (json_is_array(p) && json_array_size(p) == 1 &&
	    (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
		p = json_array_get(p, 0);
	if (json_is_string(p)) {
		if (!S->o.tk)
			return seterr(msg, len, "this server has no tokenizer: give the prompt as token ids");
		return encode(S, r, json_string_value(p), json_string_length(p), 1, msg, len);
	}
	if (!json_is_array(p))
		return seterr(msg, len, "'prompt' must be a string or a list of token ids");
	size_t n = json_array_size(p);
	if (!(r->prompt = malloc(sizeof(int32_t) * (n ? n : 1))))
		return seterr(msg, len, "out of memory");
	int64_t V = S->vocab;
	for (size_t i = 0; i < n; i++) {
		const json_t *x = json_array_get(p, i);
		if (!json_is_integer(x))
			return seterr(msg, len, "'prompt' must be a string, a list of token ids or a list of one of them (one "
			              "prompt per request)");
		json_int_t v = json_integer_value(x);
		if (v < 0 || v >= V)
			return seterr(msg, len, "'prompt'[%zu]: token id %lld is outside the vocabulary [0, %lld)", i, (long long)v,
			              (long long)V);
		r->prompt[i] = (int32_t)v;
	}
	r->np = (int)n;
	return 0;
}

/* The request body into a queued-ready Req, or an error status with msg and *param. */
static Req *parse_request(Server *S, const Conn *cn, int chat, int *status, const char **param, const char **code,
                          char *msg, size_t len)
{
	*status = 400, *param = NULL, *code = NULL;
	json_error_t je;
	json_t *o = json_loadb(cn->body ? cn->body : "", cn->n, 0, &je);
	if (!o) {
		seterr(msg, len, "malformed JSON: %s at line %d column %d", je.text, je.line, je.column);
		return NULL;
	}
	Req *r = calloc(1, sizeof *r);
	if (!r) {
		json_decref(o);
		*status = 500, seterr(msg, len, "out of memory");
		return NULL;
	}
	r->refs = 1, r->chat = chat, r->max_tokens = chat ? S->o.max_seq : 16;
	pthread_cond_init(&r->cv, NULL);
	const json_t *model = json_object_get(o, "model");
	int rc = 0;
	if (!json_is_object(o))
		rc = seterr(msg, len, "the body must be a JSON object");
	else if (model && !json_is_string(model))
		rc = seterr(msg, len, "'model' must be a string"), *param = "model";
	if (!rc && get_sampling(S, r, o, param, msg, len))
		rc = -1;
	if (!rc && ((*param = "max_tokens", get_int(o, "max_tokens", 1, &r->max_tokens, msg, len)) ||
	            (*param = "max_completion_tokens", get_int(o, "max_completion_tokens", 1, &r->max_tokens, msg, len)) ||
	            (*param = "stream", get_bool(o, "stream", &r->stream, msg, len)) ||
	            (*param = "ignore_eos", get_bool(o, "ignore_eos", &r->ignore_eos, msg, len)) ||
	            (*param = "return_token_ids", get_bool(o, "return_token_ids", &r->want_ids, msg, len)) ||
	            (*param = "stop", get_stop(r, o, msg, len))))
		rc = -1;
	if (!rc)
		rc = chat ? chat_prompt_of(S, r, o, param, msg, len) : text_prompt_of(S, r, o, param, msg, len);
	if (!rc && r->np < 1)
		rc = seterr(msg, len, "the prompt is empty");
	if (!rc && r->np > S->o.max_seq)
		rc = seterr(msg, len, "the prompt is %d tokens; the context (--max-seq) holds %ld", r->np, S->o.max_seq),
		*code = "context_length_exceeded";
	long lim = r->max_tokens < S->o.max_seq ? r->max_tokens : S->o.max_seq;
	if (!rc && !(r->ids = malloc(sizeof(int32_t) * (size_t)lim)))
		rc = seterr(msg, len, "out of memory"), *status = 500;
	json_decref(o);
	if (rc) {
		req_unref(r);
		return NULL;
	}
	if (S->o.tk)
		tok_stream_init(&r->ts, S->o.tk, 0), r->ts_on = 1;
	return r;
}

/*
** serve.h: parse_request alone on a server that has no engine, and what a parsed request must satisfy
** (the fuzz target aborts on -1): a prompt of 1..max_seq ids in the vocabulary, room for max_tokens ids,
** sampling in range, stop strings within their count and their longest's length.
*/
int serve_parse(const ServeOpts *o, int64_t vocab, const char *body, size_t n, int chat, char *msg, size_t len)
{
	Server *S = calloc(1, sizeof *S);
	if (!S)
		return seterr(msg, len, "out of memory"), 500;
	S->o = *o, S->vocab = vocab, S->row_samp = 1;
	pthread_mutex_init(&S->render_mu, NULL);
	Conn cn = {.body = (char *)body, .n = n};
	int status;
	const char *param, *code;
	Req *r = parse_request(S, &cn, chat, &status, &param, &code, msg, len);
	if (!r) {
		/* the error body must build, whatever bytes the message quotes */
		json_t *j = error_json(status, msg, param, code);
		if (!j || status < 400 || !msg[0])
			status = -1;
		json_decref(j);
	} else {
		status = 0;
		int bad = r->np < 1 || r->np > o->max_seq || r->max_tokens < 1 || !(r->temp >= 0) || !(r->top_p > 0) ||
		          r->top_p > 1 || r->nstop > SERVE_MAX_STOP;
		for (int i = 0; i < r->np; i++)
			bad |= r->prompt[i] < 0 || r->prompt[i] >= vocab;
		for (int i = 0; i < r->nstop; i++)
			bad |= !r->stop[i][0] || strlen(r->stop[i]) > r->stop_max;
		long lim = r->max_tokens < o->max_seq ? r->max_tokens : o->max_seq;
		if (lim > 0)
			r->ids[lim - 1] = 0; /* the answer's buffer holds every id the request may make */
		if (bad)
			status = seterr(msg, len, "a parsed request breaks its invariants (prompt %d ids)", r->np);
		req_unref(r);
	}
	pthread_mutex_destroy(&S->render_mu);
	free(S);
	return status;
}

/* Queue r for the scheduler; 0, or the status to answer (503) when the queue is full or the server ends. */
static int enqueue(Server *S, Req *r, char *msg, size_t len)
{
	pthread_mutex_lock(&S->mu);
	int status = 0;
	if (S->quit)
		status = 503, seterr(msg, len, "the server is shutting down");
	else if (S->broken[0])
		status = 500, seterr(msg, len, "%s", S->broken);
	else if (S->nwait >= S->o.max_queue)
		status = 503, seterr(msg, len, "%d requests already wait for a slot (--max-queue); try again later", S->nwait);
	if (!status) {
		r->refs++;
		snprintf(r->id, sizeof r->id, "%s-%ld", r->chat ? "chatcmpl" : "cmpl", ++S->seq);
		r->created = (long)time(NULL);
		r->t_queued = now_s();
		if (S->qtail)
			S->qtail->next = r;
		else
			S->qhead = r;
		S->qtail = r, S->nwait++;
		pthread_cond_signal(&S->wake);
	}
	pthread_mutex_unlock(&S->mu);
	return status;
}

/* usage {prompt_tokens, completion_tokens, total_tokens}. */
static json_t *usage_json(const Req *r)
{
	return json_pack("{s:i, s:i, s:i}", "prompt_tokens", r->np, "completion_tokens", (int)r->made, "total_tokens",
	                 (int)(r->np + r->made));
}

/* One choice's body: the delta (streamed) or the whole answer, text from..upto. */
static json_t *choice_json(const Req *r, size_t from, size_t upto, int stream, const char *fin)
{
	json_t *txt = json_stringn(r->text ? r->text + from : "", upto - from);
	json_t *c;
	if (r->chat)
		c = stream ? json_pack("{s:i, s:{s:o}, s:o}", "index", 0, "delta", "content", txt, "logprobs", json_null())
		           : json_pack("{s:i, s:{s:s, s:o}, s:o}", "index", 0, "message", "role", "assistant", "content", txt,
		                       "logprobs", json_null());
	else
		c = json_pack("{s:i, s:o, s:o}", "index", 0, "text", txt, "logprobs", json_null());
	if (c)
		json_object_set_new(c, "finish_reason", fin ? json_string(fin) : json_null());
	return c;
}

/* The envelope {id, object, created, model, choices: [choice]}. */
static json_t *envelope(const Server *S, const Req *r, int stream, json_t *choice)
{
	const char *obj = r->chat ? (stream ? "chat.completion.chunk" : "chat.completion") : "text_completion";
	return json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", r->id, "object", obj, "created", (json_int_t)r->created,
	                 "model", S->o.model_name, "choices", choice);
}

/* The whole answer of a finished request. */
static json_t *answer_json(const Server *S, const Req *r)
{
	json_t *ch = choice_json(r, 0, r->ntext, 0, r->finish);
	if (ch && r->want_ids) {
		json_t *ids = json_array();
		for (long k = 0; ids && k < r->made; k++)
			json_array_append_new(ids, json_integer(r->ids[k]));
		json_object_set_new(ch, "token_ids", ids);
	}
	json_t *j = envelope(S, r, 0, ch);
	if (j)
		json_object_set_new(j, "usage", usage_json(r));
	return j;
}

/* A streamed response's state: the request, what was sent, the bytes not yet taken by MHD. */
typedef struct {
	Server *S;
	Req *r;
	struct MHD_Connection *c;
	char *url;
	size_t sent;
	long sent_ids;               /* return_token_ids: ids already sent */
	int started, ended, final;
	char *buf;
	size_t n, at;
	double t0;
} Stream;

/* Append "data: JSON\n\n" (j consumed) to the pending bytes. */
static int sse_add(Stream *st, json_t *j, const char *raw)
{
	char *s = raw ? strdup(raw) : j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return -1;
	size_t l = strlen(s);
	char *b = realloc(st->buf, st->n + l + 9);
	if (!b) {
		free(s);
		return -1;
	}
	st->buf = b;
	st->n += (size_t)sprintf(st->buf + st->n, "data: %s\n\n", s);
	free(s);
	return 0;
}

/* The next events of a stream (under mu): the role, text deltas, the finish with usage, [DONE]. */
static int stream_more(Stream *st)
{
	Req *r = st->r;
	Server *S = st->S;
	if (!st->started && r->chat) {
		json_t *ch = json_pack("{s:i, s:{s:s, s:s}, s:o, s:o}", "index", 0, "delta", "role", "assistant", "content", "",
		                       "logprobs", json_null(), "finish_reason", json_null());
		if (sse_add(st, envelope(S, r, 1, ch), NULL))
			return -1;
	}
	st->started = 1;
	if (r->shown > st->sent || (r->want_ids && r->made > st->sent_ids)) {
		json_t *ch = choice_json(r, st->sent, r->shown, 1, NULL);
		if (ch && r->want_ids) {
			json_t *ids = json_array();
			for (long k = st->sent_ids; ids && k < r->made; k++)
				json_array_append_new(ids, json_integer(r->ids[k]));
			json_object_set_new(ch, "token_ids", ids);
		}
		if (sse_add(st, envelope(S, r, 1, ch), NULL))
			return -1;
		st->sent = r->shown, st->sent_ids = r->made;
	}
	if (r->done && !st->final) {
		st->final = 1;
		if (r->status) {
			if (sse_add(st, error_json(r->status, r->err, NULL, NULL), NULL))
				return -1;
		} else {
			json_t *ch = choice_json(r, 0, 0, 1, r->finish);
			if (ch && r->chat)
				json_object_set_new(ch, "delta", json_object());
			json_t *j = envelope(S, r, 1, ch);
			if (j)
				json_object_set_new(j, "usage", usage_json(r));
			if (sse_add(st, j, NULL))
				return -1;
		}
		if (sse_add(st, NULL, "[DONE]"))
			return -1;
	}
	return 0;
}

/* MHD's content reader: pending bytes, else wait for the next tokens; the end after [DONE]. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	Stream *st = cls;
	if (st->at == st->n) {
		st->at = st->n = 0;
		if (st->final)
			return MHD_CONTENT_READER_END_OF_STREAM;
		pthread_mutex_lock(&st->S->mu);
		wait_output(st->S, st->r, st->sent, st->sent_ids, st->c);
		int rc = st->r->cancelled && !st->r->done ? -1 : stream_more(st);
		pthread_mutex_unlock(&st->S->mu);
		if (rc)
			return MHD_CONTENT_READER_END_WITH_ERROR;
		if (st->at == st->n)
			return st->final ? MHD_CONTENT_READER_END_OF_STREAM : 0;
	}
	size_t k = st->n - st->at < max ? st->n - st->at : max;
	memcpy(buf, st->buf + st->at, k);
	st->at += k;
	return (ssize_t)k;
}

/* The stream is over (sent, or the client went away): cancel a request still running, log it. */
static void stream_free(void *cls)
{
	Stream *st = cls;
	Server *S = st->S;
	pthread_mutex_lock(&S->mu);
	Req *r = st->r;
	if (!r->done) {
		r->cancelled = 1;
		pthread_cond_signal(&S->wake);
	}
	slog("POST %s 200 (stream %s): %d prompt + %ld generated tokens (%s), %.3f s", st->url, r->id, r->np, r->made,
	      r->done ? (r->status ? r->err : r->finish) : "cancelled", now_s() - st->t0);
	req_unref(r);
	pthread_mutex_unlock(&S->mu);
	free(st->buf), free(st->url), free(st);
}

/* POST /v1/completions or /v1/chat/completions. */
static enum MHD_Result completion(Server *S, struct MHD_Connection *c, const char *url, const Conn *cn, int chat)
{
	char msg[768];
	int status;
	const char *param, *code;
	double t0 = now_s();
	Req *r = parse_request(S, cn, chat, &status, &param, &code, msg, sizeof msg);
	if (!r)
		return reply_err(S, c, "POST", url, status, param, code, "%s", msg);
	if ((status = enqueue(S, r, msg, sizeof msg))) {
		pthread_mutex_lock(&S->mu);
		req_unref(r);
		pthread_mutex_unlock(&S->mu);
		return reply_err(S, c, "POST", url, status, NULL, NULL, "%s", msg);
	}
	if (r->stream) {
		Stream *st = calloc(1, sizeof *st);
		char *u = strdup(url);
		struct MHD_Response *resp = st && u ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st,
		                                                                         stream_free) : NULL;
		if (!resp) {
			free(st), free(u);
			pthread_mutex_lock(&S->mu);
			r->cancelled = 1;
			req_unref(r);
			pthread_mutex_unlock(&S->mu);
			return reply_err(S, c, "POST", url, 500, NULL, NULL, "out of memory");
		}
		*st = (Stream){.S = S, .r = r, .c = c, .url = u, .t0 = t0};
		MHD_add_response_header(resp, "Content-Type", "text/event-stream");
		MHD_add_response_header(resp, "Cache-Control", "no-cache");
		enum MHD_Result rc = MHD_queue_response(c, 200, resp);
		MHD_destroy_response(resp);
		pthread_mutex_lock(&S->mu);
		count_status(S, 200);
		pthread_mutex_unlock(&S->mu);
		return rc;
	}
	pthread_mutex_lock(&S->mu);
	wait_output(S, r, SIZE_MAX, LONG_MAX, c);
	while (!r->done) /* cancelled: the scheduler ends it */
		pthread_cond_wait(&r->cv, &S->mu);
	json_t *j = r->status ? NULL : answer_json(S, r);
	int st = r->status;
	char err[512], fin[16], id[48];
	snprintf(err, sizeof err, "%s", r->err);
	snprintf(fin, sizeof fin, "%s", r->finish);
	snprintf(id, sizeof id, "%s", r->id);
	int np = r->np;
	long made = r->made;
	req_unref(r);
	pthread_mutex_unlock(&S->mu);
	if (st)
		return reply_err(S, c, "POST", url, st, NULL, NULL, "%s", err);
	if (!strcmp(fin, "cancelled"))
		return MHD_NO; /* the client is gone */
	slog("POST %s 200 (%s): %d prompt + %ld generated tokens (%s), %.3f s", url, id, np, made, fin, now_s() - t0);
	return reply_json(S, c, 200, j);
}

/* GET /metrics: Prometheus' text format. */
static enum MHD_Result metrics(Server *S, struct MHD_Connection *c)
{
	char *b = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&b, &n);
	if (!f)
		return MHD_NO;
	pthread_mutex_lock(&S->mu);
	count_status(S, 200); /* this response */
	const Metrics *m = &S->m;
	fprintf(f, "# HELP glmc_requests_total HTTP responses by status.\n# TYPE glmc_requests_total counter\n");
	for (int i = 0; i < NSTATUS; i++)
		fprintf(f, "glmc_requests_total{status=\"%d\"} %ld\n", status_codes[i], m->requests[i]);
	fprintf(f, "# HELP glmc_requests_cancelled_total Requests whose client went away before the end.\n"
	        "# TYPE glmc_requests_cancelled_total counter\nglmc_requests_cancelled_total %ld\n", m->cancelled);
	fprintf(f, "# HELP glmc_prompt_tokens_total Prompt tokens admitted.\n# TYPE glmc_prompt_tokens_total counter\n"
	        "glmc_prompt_tokens_total %ld\n", m->prompt_tokens);
	fprintf(f, "# HELP glmc_generation_tokens_total Tokens generated by finished requests.\n"
	        "# TYPE glmc_generation_tokens_total counter\nglmc_generation_tokens_total %ld\n", m->gen_tokens);
	fprintf(f, "# HELP glmc_requests_running Sequences holding a KV-cache slot.\n# TYPE glmc_requests_running gauge\n"
	        "glmc_requests_running %d\n", S->nrun);
	fprintf(f, "# HELP glmc_requests_waiting Requests waiting for a slot.\n# TYPE glmc_requests_waiting gauge\n"
	        "glmc_requests_waiting %d\n", S->nwait);
	fprintf(f, "# HELP glmc_decode_steps_total Decode steps run.\n# TYPE glmc_decode_steps_total counter\n"
	        "glmc_decode_steps_total %ld\n", m->steps);
	fprintf(f, "# HELP glmc_decode_rows_total Sequences decoded, summed over the steps.\n"
	        "# TYPE glmc_decode_rows_total counter\nglmc_decode_rows_total %ld\n", m->rows);
	fprintf(f, "# HELP glmc_prefill_steps_total Prefill steps run.\n# TYPE glmc_prefill_steps_total counter\n"
	        "glmc_prefill_steps_total %ld\n", m->psteps);
	fprintf(f, "# HELP glmc_prefill_parts_total Prompt pieces prefilled, summed over the steps (several prompts share "
	        "a step).\n# TYPE glmc_prefill_parts_total counter\nglmc_prefill_parts_total %ld\n", m->parts);
	fprintf(f, "# HELP glmc_prefill_alone_steps_total Prefill steps of one long prompt alone while others decode "
	        "(--prefill-alone).\n# TYPE glmc_prefill_alone_steps_total counter\nglmc_prefill_alone_steps_total %ld\n",
	        m->alone);
	fprintf(f, "# HELP glmc_kv_slots_used KV-cache slots in use.\n# TYPE glmc_kv_slots_used gauge\n"
	        "glmc_kv_slots_used %d\n", S->nrun);
	fprintf(f, "# HELP glmc_kv_slots_total KV-cache slots (--max-seqs).\n# TYPE glmc_kv_slots_total gauge\n"
	        "glmc_kv_slots_total %d\n", S->o.max_seqs);
	const char *hn[2] = {"glmc_time_to_first_token_seconds", "glmc_time_per_output_token_seconds"};
	const char *hh[2] = {"Time from arrival to the first token.", "Mean time per output token after the first, per request."};
	for (int h = 0; h < 2; h++) {
		const double *le = h ? tpot_le : ttft_le;
		const long *bk = h ? m->tpot : m->ttft;
		int nb = h ? NTPOT : NTTFT;
		long cum = 0;
		fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", hn[h], hh[h], hn[h]);
		for (int i = 0; i < nb; i++)
			fprintf(f, "%s_bucket{le=\"%g\"} %ld\n", hn[h], le[i], cum += bk[i]);
		fprintf(f, "%s_bucket{le=\"+Inf\"} %ld\n%s_sum %g\n%s_count %ld\n", hn[h], cum + bk[nb], hn[h],
		        h ? m->stpot : m->sttft, hn[h], h ? m->ntpot : m->nttft);
	}
	pthread_mutex_unlock(&S->mu);
	if (fclose(f))
		return MHD_NO;
	struct MHD_Response *resp = MHD_create_response_from_buffer(n, b, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(b);
		return MHD_NO;
	}
	MHD_add_response_header(resp, "Content-Type", "text/plain; version=0.0.4");
	enum MHD_Result rc = MHD_queue_response(c, 200, resp);
	MHD_destroy_response(resp);
	return rc;
}

/* The routes: path, method. */
static const struct {
	const char *path, *method;
} routes[] = {{"/health", "GET"}, {"/metrics", "GET"}, {"/v1/models", "GET"}, {"/v1/completions", "POST"},
              {"/v1/chat/completions", "POST"}};

/* MHD's request handler: collect the body, then route. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	(void)version;
	Server *S = cls;
	Conn *cn = *con_cls;
	if (!cn) {
		if (!(cn = calloc(1, sizeof *cn)))
			return MHD_NO;
		*con_cls = cn;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t k = *upload_size;
		*upload_size = 0;
		if (cn->too_big || cn->n + k > SERVE_MAX_BODY) {
			cn->too_big = 1;
			return MHD_YES;
		}
		if (cn->n + k + 1 > cn->cap) {
			size_t cap = 2 * (cn->n + k + 1024);
			char *b = realloc(cn->body, cap);
			if (!b)
				return MHD_NO;
			cn->body = b, cn->cap = cap;
		}
		memcpy(cn->body + cn->n, upload, k);
		cn->n += k;
		return MHD_YES;
	}
	int known = -1;
	for (int i = 0; i < (int)(sizeof routes / sizeof routes[0]); i++)
		if (!strcmp(url, routes[i].path))
			known = i;
	if (known < 0)
		return reply_err(S, c, method, url, 404, NULL, NULL, "no such path: %s", url);
	if (strcmp(method, routes[known].method))
		return reply_err(S, c, method, url, 405, NULL, NULL, "%s takes %s, not %s", url, routes[known].method, method);
	if (cn->too_big)
		return reply_err(S, c, method, url, 413, NULL, NULL, "the request body is more than %d bytes", SERVE_MAX_BODY);
	if (S->o.api_key && !strncmp(url, "/v1/", 4)) {
		const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
		if (!h || strncmp(h, "Bearer ", 7) || strcmp(h + 7, S->o.api_key))
			return reply_err(S, c, method, url, 401, NULL, "invalid_api_key", "%s API key (Authorization: Bearer KEY)",
			                 h ? "wrong" : "no");
	}
	if (!strcmp(url, "/health")) {
		pthread_mutex_lock(&S->mu);
		int ok = !S->broken[0];
		pthread_mutex_unlock(&S->mu);
		if (!ok)
			return reply_err(S, c, method, url, 503, NULL, NULL, "%s", S->broken);
		return reply_json(S, c, 200, json_pack("{s:s}", "status", "ok"));
	}
	if (!strcmp(url, "/metrics"))
		return metrics(S, c);
	if (!strcmp(url, "/v1/models"))
		return reply_json(S, c, 200, json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:I}]}", "object", "list", "data", "id",
		                                       S->o.model_name, "object", "model", "created", (json_int_t)0, "owned_by",
		                                       "glmc", "max_model_len", (json_int_t)S->o.max_seq));
	return completion(S, c, url, cn, !strcmp(url, "/v1/chat/completions"));
}

/* The connection's request is over: free its body. */
static void on_done(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe)
{
	(void)cls, (void)c, (void)toe;
	Conn *cn = *con_cls;
	if (cn)
		free(cn->body), free(cn);
	*con_cls = NULL;
}

/* libmicrohttpd's own messages, as lines of the server log. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[512];
	vsnprintf(line, sizeof line, fmt, ap);
	line[strcspn(line, "\n")] = 0;
	slog("http: %s", line);
}

/* A listening TCP socket on host:port (IPv4), or -1 with err: the address and port named. */
static int listen_on(const char *host, int port, char *err, size_t len)
{
	struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	if (inet_pton(AF_INET, host, &addr.sin_addr) != 1)
		return seterr(err, len, "--host '%s' is not an IPv4 address", host);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
	if (fd < 0)
		return seterr(err, len, "socket: %s", strerror(errno));
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
	    bind(fd, (struct sockaddr *)&addr, sizeof addr) || listen(fd, 128)) {
		seterr(err, len, "cannot listen on %s:%d: %s", host, port, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

int serve_main(const ServeOpts *o, char *err, size_t len)
{
	Server *S = calloc(1, sizeof *S);
	if (!S)
		return seterr(err, len, "out of memory");
	S->o = *o;
	const char *dl = getenv("GLMRUN_TEST_STEP_DELAY_MS");
	S->delay_us = dl ? 1000 * atol(dl) : 0;
	if (o->max_seqs < 1 || o->max_seqs >= ENGINE_MAX_SLOTS)
		return free(S), seterr(err, len, "--max-seqs %d: supported 1..%d", o->max_seqs, ENGINE_MAX_SLOTS - 1);
	EngineOpts eo = o->eo;
	/* On the GPU a step runs a bucket of rows; the padding rows need a slot no sequence holds, not even one
	** whose prompt is half prefilled: one slot beyond --max-seqs is theirs. */
	S->eslots = eo.cuda ? o->max_seqs + 1 : o->max_seqs;
	eo.slots = S->eslots, eo.max_seq = o->max_seq, eo.chunk = o->batch_tokens, eo.keep_logits = 0;
	if (engine_open(&S->e, o->g, o->weights, &eo, err, len)) {
		if (engine_stuck(S->e))
			_exit(1);
		engine_close(S->e);
		free(S);
		return -1;
	}
	S->vocab = engine_vocab(S->e);
	S->alone = o->prefill_alone > 0 || (o->prefill_alone < 0 && engine_on_gpu(S->e) && alone_pays(o->g));
	S->row_samp = !engine_on_gpu(S->e) || !strcmp(o->g->cuda.sample_kernel, "glm_sample_rows");
	if (!S->row_samp)
		slog("note: this plan's GPU sampler takes one setting for every request (compiled by an older glmc): "
		     "requests that sample otherwise get 400; recompile the plan for per-request sampling");
	pthread_mutex_init(&S->mu, NULL);
	pthread_mutex_init(&S->render_mu, NULL);
	pthread_cond_init(&S->wake, NULL);
	/* SIGTERM and SIGINT end the server through sigwait below: every thread started here blocks them. */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	signal(SIGPIPE, SIG_IGN);
	int fd = listen_on(o->host, o->port, err, len);
	if (fd < 0) {
		engine_close(S->e);
		free(S);
		return -1;
	}
	pthread_t th;
	if (pthread_create(&th, NULL, scheduler, S)) {
		close(fd);
		engine_close(S->e);
		free(S);
		return seterr(err, len, "cannot start the scheduler thread");
	}
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG, (uint16_t)o->port, NULL,
		NULL, on_request, S, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL, MHD_OPTION_LISTEN_SOCKET, fd,
		MHD_OPTION_NOTIFY_COMPLETED, on_done, S, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1024, MHD_OPTION_END);
	int rc = 0;
	if (!d) {
		rc = seterr(err, len, "cannot start the HTTP server on %s:%d", o->host, o->port);
		close(fd);
	}
	else {
		slog("%s on http://%s:%d (%s, %d sequences of %ld positions, %ld prompt tokens per step%s, model '%s')",
		     o->plan, o->host, o->port, engine_on_gpu(S->e) ? "cuda" : "cpu", o->max_seqs, o->max_seq, o->batch_tokens,
		     S->alone ? ", long prompts' steps alone" : "", o->model_name);
		int sig = 0;
		sigwait(&sigs, &sig);
		slog("%s: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	}
	pthread_mutex_lock(&S->mu);
	S->quit = 1;
	pthread_cond_signal(&S->wake);
	pthread_mutex_unlock(&S->mu);
	pthread_join(th, NULL);
	if (d)
		MHD_stop_daemon(d);
	long served = 0;
	for (int i = 0; i < NSTATUS; i++)
		served += S->m.requests[i];
	if (!rc)
		slog("stopped after %ld responses, %ld prompt and %ld generated tokens", served, S->m.prompt_tokens,
		      S->m.gen_tokens);
	engine_close(S->e);
	pthread_cond_destroy(&S->wake);
	pthread_mutex_destroy(&S->mu);
	pthread_mutex_destroy(&S->render_mu);
	free(S);
	return rc;
}
