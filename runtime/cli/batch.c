/*
** runtime/cli/batch.c — several sequences decoded together (glmrun --batch). Each sequence owns one cache
** slot; its prompt is evaluated alone, then every decode step feeds one token per live sequence. On the
** GPU a step is one graph launch of the smallest bucket (1, 2, 4, ... or the batch size) that holds the
** live sequences; when one ends the rest are packed into the rows of a smaller bucket. The CPU
** reference runs the same schedule without buckets, so both devices produce the same tokens.
*/
#include "batch.h"
#include "ref.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	int32_t last;                /* token to feed next */
	long made;                   /* tokens sampled so far */
	long limit;                  /* tokens this sequence may produce (-n, clipped to the context) */
	int done, stopped;           /* stopped: the answer ended at the --stop string */
	FILE *dump;
	TokStream ts;
	char *text;                  /* decoded answer (text mode) */
	size_t ntext, cap;
	int32_t *ids;                /* sampled ids (--tokens mode) */
} Seq;

/* The smallest bucket that holds n rows: a power of two, or the batch size itself. */
static int bucket_for(int n, int batch)
{
	int b = 1;
	while (b < n)
		b *= 2;
	return b < batch ? b : batch;
}

static int put_text(Seq *s, const char *p, size_t n)
{
	if (s->ntext + n + 1 > s->cap) {
		size_t cap = 2 * (s->ntext + n + 64);
		char *t = realloc(s->text, cap);
		if (!t)
			return -1;
		s->text = t, s->cap = cap;
	}
	memcpy(s->text + s->ntext, p, n);
	s->ntext += n;
	s->text[s->ntext] = 0;
	return 0;
}

/* Record sequence s's newly sampled token; mark it done at its limit, end-of-generation or stop string. */
static int take(const BatchRun *b, Seq *s, int32_t tok, const float *row, int64_t V, char *err, size_t len)
{
	s->ids[s->made++] = tok;
	s->last = tok;
	if (s->dump && row && fwrite(row, sizeof(float), (size_t)V, s->dump) != (size_t)V)
		return seterr(err, len, "--dump-logits: write failed: %s", strerror(errno));
	if (b->tk) {
		if (!b->ignore_eos && tok_is_eog(b->tk, tok)) {
			s->done = 1;
			return 0;
		}
		size_t pl, before = s->ntext, sl = b->stop ? strlen(b->stop) : 0;
		const char *piece = tok_stream_put(&s->ts, tok, &pl);
		if (piece && pl && put_text(s, piece, pl))
			return seterr(err, len, "out of memory");
		if (sl && s->text) { /* only where the new piece can complete the stop string */
			char *at = strstr(s->text + (before >= sl ? before - sl + 1 : 0), b->stop);
			if (at) {
				s->ntext = (size_t)(at - s->text);
				*at = 0;
				s->done = s->stopped = 1;
			}
		}
	}
	if (s->made >= s->limit)
		s->done = 1;
	return 0;
}

/* Set the step buffer's rows for the live sequences (in order) plus padding rows on free slots. */
static int set_rows(Engine *e, const BatchRun *b, Seq *q, const int *live, int nlive, int rows, char *err, size_t len)
{
	EngineRow r[BATCH_MAX];
	int free_slot = -1;
	for (int i = 0; i < b->nseq && free_slot < 0; i++)
		if (q[i].done)
			free_slot = i;
	for (int k = 0; k < rows; k++) {
		if (k < nlive) {
			Seq *s = &q[live[k]];
			r[k] = (EngineRow){.slot = live[k], .token = s->last, .pos = (int32_t)(b->np[live[k]] + s->made - 1),
			                   .step = (int32_t)s->made};
		} else /* padding: a finished sequence's slot, from position 0; its results are ignored */
			r[k] = (EngineRow){.slot = free_slot};
	}
	return engine_set_rows(e, rows, r, err, len);
}

int batch_run(Engine *e, const BatchRun *b, char *err, size_t len)
{
	int64_t V = engine_vocab(e);
	if (b->nseq < 1 || b->nseq > BATCH_MAX)
		return seterr(err, len, "--batch: %d sequences, supported 1..%d", b->nseq, BATCH_MAX);
	Seq *q = calloc((size_t)b->nseq, sizeof *q);
	/* --dump-logits: room for the logits of the largest step (a prompt alone, prompts sharing a step of at
	** most engine_chunk tokens, or a decode step of every sequence) */
	int64_t chunk = engine_chunk(e), maxr = b->nseq, shared = 0;
	for (int i = 0; i < b->nseq; i++)
		maxr = b->np[i] > maxr ? b->np[i] : maxr, shared += b->np[i];
	shared = shared < chunk ? shared : chunk;
	maxr = shared > maxr ? shared : maxr;
	float *rows = b->dump ? malloc(sizeof(float) * (size_t)(maxr * V)) : NULL;
	if (!q || (b->dump && !rows))
		return free(q), free(rows), seterr(err, len, "out of memory");
	int rc = 0;
	for (int i = 0; i < b->nseq && !rc; i++) {
		Seq *s = &q[i];
		s->limit = b->max_seq - b->np[i] + 1 < b->n ? b->max_seq - b->np[i] + 1 : b->n;
		if (s->limit < 1) {
			rc = seterr(err, len, "sequence %d: its prompt of %d tokens fills --max-seq %ld", i, b->np[i], b->max_seq);
			break;
		}
		if (!(s->ids = malloc(sizeof(int32_t) * (size_t)s->limit)))
			rc = seterr(err, len, "out of memory");
		if (b->tk)
			tok_stream_init(&s->ts, b->tk, 0);
		if (b->dump) {
			char path[4096];
			snprintf(path, sizeof path, "%s.%d", b->dump, i);
			if (!(s->dump = fopen(path, "wb")))
				rc = seterr(err, len, "%s: cannot create", path);
		}
	}
	/* Prompts, each into its own slot: consecutive prompts that fit one prefill step together share it;
	** a prompt longer than a step goes alone, in chunks. */
	for (int i = 0, j; i < b->nseq && !rc; i = j) {
		int64_t tot = 0;
		for (j = i; j < b->nseq && tot + b->np[j] <= chunk; j++)
			tot += b->np[j];
		int32_t tok[BATCH_MAX];
		if (j == i) {
			EngineRow r0 = {.slot = i}; /* row 0 restarts this sequence's sampling steps at 0 */
			j = i + 1;
			rc = engine_set_rows(e, 1, &r0, err, len) ||
			     engine_prefill(e, i, b->prompt[i], b->np[i], 0, &tok[0], rows, err, len);
		} else {
			EnginePart part[BATCH_MAX];
			for (int k = i; k < j; k++)
				part[k - i] = (EnginePart){.ids = b->prompt[k], .n = b->np[k], .row = {.slot = k}};
			rc = engine_prefill_parts(e, j - i, part, tok, rows, err, len);
		}
		for (int k = i, at = 0; k < j && !rc; at += b->np[k], k++) {
			Seq *s = &q[k];
			size_t cnt = (size_t)b->np[k] * (size_t)V;
			if (s->dump && fwrite(rows + (size_t)at * (size_t)V, sizeof(float), cnt, s->dump) != cnt)
				rc = seterr(err, len, "--dump-logits: write failed: %s", strerror(errno));
			if (!rc)
				rc = take(b, s, tok[k - i], NULL, V, err, len);
		}
	}
	/* Decode: one step for all live sequences at a time. */
	int live[BATCH_MAX], nlive = 0, rowsn = 0;
	int32_t next[BATCH_MAX];
	while (!rc && !(b->stop_flag && *b->stop_flag)) {
		int before = nlive;
		nlive = 0;
		for (int i = 0; i < b->nseq; i++)
			if (!q[i].done)
				live[nlive++] = i;
		if (!nlive)
			break;
		/* The GPU runs buckets of rows (one captured graph each); the CPU reference the live rows alone. */
		int want = engine_on_gpu(e) ? bucket_for(nlive, b->nseq) : nlive;
		if (want != rowsn || nlive != before) {
			rowsn = want;
			if ((rc = set_rows(e, b, q, live, nlive, rowsn, err, len)))
				break;
		}
		if ((rc = engine_decode(e, rowsn, next, rows, err, len)))
			break;
		for (int r = 0; r < nlive && !rc; r++)
			rc = take(b, &q[live[r]], next[r], rows ? rows + (size_t)r * (size_t)V : NULL, V, err, len);
	}
	/* The answers, in sequence order: ids on one line each, or text blocks. */
	for (int i = 0; i < b->nseq && !rc; i++) {
		Seq *s = &q[i];
		if (b->tk) {
			size_t pl;
			const char *rest = tok_stream_flush(&s->ts, &pl);
			if (rest && pl && !s->stopped && put_text(s, rest, pl)) {
				rc = seterr(err, len, "out of memory");
				break;
			}
			printf("== sequence %d (%ld tokens) ==\n%s\n", i, s->made, s->text ? s->text : "");
		} else {
			for (long k = 0; k < s->made; k++)
				printf(k ? " %d" : "%d", s->ids[k]);
			printf("\n");
		}
	}
	fflush(stdout);
	for (int i = 0; i < b->nseq; i++) {
		if (q[i].dump && fclose(q[i].dump) && !rc)
			rc = seterr(err, len, "--dump-logits: write failed: %s", strerror(errno));
		if (b->tk)
			tok_stream_free(&q[i].ts);
		free(q[i].text), free(q[i].ids);
	}
	free(q), free(rows);
	return rc;
}
