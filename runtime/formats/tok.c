/*
** runtime/formats/tok.c — the vocabulary (text <-> id hash map, BPE merge map), encoding (special-token split,
** byte-level BPE by merge rank, SentencePiece by score with byte fallback), decoding and the streaming
** UTF-8 decoder. Loading is in tok_load.c, pre-tokenizers in tok_pre.c.
**
** BPE works on token ids, not strings: a piece starts as the ids of its bytes' byte-level characters, and
** the merge map takes (left id, right id) to (rank, merged id). A binary heap ordered by (rank, position)
** picks the next merge, as in llama.cpp and the Hugging Face library; stale entries (a side already merged
** away) are skipped when popped.
*/
#include "tok_impl.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* ---- building ---- */

/* An empty tokenizer of the given model; the loaders fill it. */
Tok *tok_new(int model)
{
	Tok *t = calloc(1, sizeof *t);
	if (!t)
		return NULL;
	t->model = model;
	t->bos = t->eos = t->eot = t->eom = t->unk = -1;
	return t;
}

/* Allocate the per-token arrays for n tokens (all UNDEFINED with empty text until set). */
int tok_set_vocab_size(Tok *t, int32_t n)
{
	t->n = n;
	size_t m = n > 0 ? (size_t)n : 1;
	t->off = calloc(m, sizeof *t->off);
	t->tlen = calloc(m, sizeof *t->tlen);
	t->score = calloc(m, sizeof *t->score);
	t->type = calloc(m, 1);
	t->flags = calloc(m, 1);
	return t->off && t->tlen && t->score && t->type && t->flags ? 0 : -1;
}

/* Store token id's text (copied into the pool), score and type. */
int tok_set_token(Tok *t, int32_t id, const char *s, size_t len, float score, int type)
{
	if (id < 0 || id >= t->n || len > UINT32_MAX)
		return -1;
	if (t->pool_len + len + 1 > t->pool_cap) {
		size_t cap = t->pool_cap ? t->pool_cap : 1 << 16;
		while (cap < t->pool_len + len + 1)
			cap *= 2;
		char *p = realloc(t->pool, cap);
		if (!p)
			return -1;
		t->pool = p;
		t->pool_cap = cap;
	}
	memcpy(t->pool + t->pool_len, s, len);
	t->pool[t->pool_len + len] = 0;
	t->off[id] = t->pool_len;
	t->tlen[id] = (uint32_t)len;
	t->pool_len += len + 1;
	t->score[id] = score;
	t->type[id] = (uint8_t)type;
	return 0;
}

/* FNV-1a with a final mix: token texts are short, so a simple byte hash is fast enough. */
static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	for (size_t i = 0; i < n; i++) {
		h ^= (unsigned char)s[i];
		h *= 1099511628211ULL;
	}
	return h ^ (h >> 31);
}

/* splitmix64's finaliser: spreads (left, right) id pairs over the merge table. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	return x ^ (x >> 31);
}

/* The id of the token whose text is s[0..n), or -1. */
int32_t tok_lookup(const Tok *t, const char *s, size_t n)
{
	if (!t->tab)
		return -1;
	for (uint64_t i = hash_bytes(s, n) & t->tmask;; i = (i + 1) & t->tmask) {
		uint32_t v = t->tab[i];
		if (!v)
			return -1;
		v--;
		if (t->tlen[v] == n && !memcmp(t->pool + t->off[v], s, n))
			return (int32_t)v;
	}
}

/* Size the merge table for n merges (load factor at most 1/2). */
int tok_merges_init(Tok *t, size_t n)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)n)
		cap *= 2;
	free(t->mg);
	t->mg = malloc(cap * sizeof *t->mg);
	if (!t->mg)
		return -1;
	for (uint64_t i = 0; i < cap; i++)
		t->mg[i].rank = -1;
	t->mmask = cap - 1;
	t->nmerge = 0;
	return 0;
}

/* The (rank, merged id) of the pair, or NULL. */
static const TokMerge *merge_find(const Tok *t, int32_t a, int32_t b)
{
	uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
	for (uint64_t i = mix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
		const TokMerge *m = &t->mg[i];
		if (m->rank < 0)
			return NULL;
		if (m->key == key)
			return m;
	}
}

/* Record merge "a b" with its rank. Needs the text map (call after tok_build). A merge whose sides or
** result are not tokens can never fire on ids, so it is dropped (the Hugging Face library refuses such a
** file); a repeated pair keeps its first, lowest rank. */
int tok_add_merge(Tok *t, const char *a, size_t alen, const char *b, size_t blen, int32_t rank)
{
	char small[256];
	char *cat = alen + blen <= sizeof small ? small : malloc(alen + blen);
	if (!cat)
		return -1;
	memcpy(cat, a, alen);
	memcpy(cat + alen, b, blen);
	int32_t ia = tok_lookup(t, a, alen), ib = tok_lookup(t, b, blen), ic = tok_lookup(t, cat, alen + blen);
	if (cat != small)
		free(cat);
	if (ia < 0 || ib < 0 || ic < 0)
		return 0;
	if ((uint64_t)t->nmerge >= t->mmask)
		return -1; /* keep a free slot: more merges than tok_merges_init was told */
	uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
	for (uint64_t i = mix64(key) & t->mmask;; i = (i + 1) & t->mmask) {
		TokMerge *m = &t->mg[i];
		if (m->rank >= 0 && m->key == key)
			return 0;
		if (m->rank < 0) {
			m->key = key;
			m->rank = rank;
			m->id = ic;
			t->nmerge++;
			return 0;
		}
	}
}

/* GPT-2's byte-level alphabet: printable bytes stand for themselves, the other 68 (0x00-0x20, 0x7F-0xA0,
** 0xAD) for U+0100.. in ascending order. Both directions are tables in the Tok. */
void tok_byte_level_init(Tok *t)
{
	int k = 0;
	memset(t->cp_is_byte, 0, sizeof t->cp_is_byte);
	for (int b = 0; b < 256; b++) {
		int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
		t->byte_cp[b] = (uint16_t)(printable ? b : 0x100 + k++);
		t->cp_byte[t->byte_cp[b]] = (uint8_t)b;
		t->cp_is_byte[t->byte_cp[b]] = 1;
	}
}

/* UTF-8 of a code point below 0x800 (all the byte-level alphabet needs); returns its length. */
static int utf8_put2(char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	o[0] = (char)(0xC0 | cp >> 6);
	o[1] = (char)(0x80 | (cp & 0x3F));
	return 2;
}

/* Decode one UTF-8 character at s (n left): its code point and length, or length 0 when invalid. */
static int utf8_get(const unsigned char *s, size_t n, unsigned *cp)
{
	unsigned c = s[0];
	if (c < 0x80)
		return *cp = c, 1;
	int need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
	if (!need || (size_t)need > n)
		return 0;
	unsigned v = c & (0x3F >> (need - 1));
	for (int i = 1; i < need; i++) {
		if ((s[i] & 0xC0) != 0x80)
			return 0;
		v = v << 6 | (s[i] & 0x3F);
	}
	*cp = v;
	return need;
}

/* The byte a "<0xXX>" token stands for, or -1. */
static int byte_token_value(const char *s, size_t n)
{
	if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>' || !isxdigit((unsigned char)s[3]) ||
	    !isxdigit((unsigned char)s[4]))
		return -1;
	char h[3] = {s[3], s[4], 0};
	return (int)strtol(h, NULL, 16);
}

/* The bytes token id stands for: byte-level characters mapped back (BPE), "▁" as a space (SPM), byte
** tokens as their byte, added tokens verbatim; unused and undefined tokens decode to nothing. */
static size_t piece_of(const Tok *t, int32_t id, char *out)
{
	const char *s = t->pool + t->off[id];
	size_t n = t->tlen[id], o = 0;
	switch (t->type[id]) {
	case TOK_CONTROL:
	case TOK_UNKNOWN:
	case TOK_USER_DEFINED:
		memcpy(out, s, n);
		return n;
	case TOK_BYTE: {
		int b = byte_token_value(s, n);
		if (b < 0) {
			memcpy(out, s, n);
			return n;
		}
		out[0] = (char)b;
		return 1;
	}
	case TOK_NORMAL:
		break;
	default:
		return 0;
	}
	if (t->model == TOKM_SPM) {
		for (size_t i = 0; i < n;) {
			if (i + 3 <= n && !memcmp(s + i, "\xe2\x96\x81", 3))
				out[o++] = ' ', i += 3;
			else
				out[o++] = s[i++];
		}
		return o;
	}
	for (size_t i = 0; i < n;) {
		unsigned cp;
		int l = utf8_get((const unsigned char *)s + i, n - i, &cp);
		if (l && cp < 0x144 && t->cp_is_byte[cp]) {
			out[o++] = (char)t->cp_byte[cp];
			i += (size_t)l;
		} else {
			/* not in the alphabet: keep the character (or byte) as it is */
			size_t k = l ? (size_t)l : 1;
			memcpy(out + o, s + i, k);
			o += k, i += k;
		}
	}
	return o;
}

static const char *const eot_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
	"<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", "<end_of_utterance>", NULL
};
static const char *const eog_texts[] = {
	"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
	"<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
	"<\xef\xbd\x9c" "end\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>", NULL
};

/* Add id to the end-of-generation set (once). */
int tok_eog_add(Tok *t, int32_t id)
{
	if (id < 0 || id >= t->n)
		return 0;
	for (int i = 0; i < t->neog; i++)
		if (t->eog[i] == id)
			return 0;
	int32_t *p = realloc(t->eog, (size_t)(t->neog + 1) * sizeof *p);
	if (!p)
		return -1;
	t->eog = p;
	t->eog[t->neog++] = id;
	return 0;
}

/* Order of the special-token split: longest text first, ties by id. A merge sort, since qsort's
** comparator could only reach the lengths through global state. */
static void sort_specials(const Tok *t, int32_t *v, int32_t *tmp, int n)
{
	if (n < 2)
		return;
	int h = n / 2;
	sort_specials(t, v, tmp, h);
	sort_specials(t, v + h, tmp, n - h);
	int i = 0, j = h, k = 0;
	while (i < h && j < n) {
		int32_t a = v[i], b = v[j];
		int before = t->tlen[a] > t->tlen[b] || (t->tlen[a] == t->tlen[b] && a < b);
		tmp[k++] = before ? v[i++] : v[j++];
	}
	while (i < h)
		tmp[k++] = v[i++];
	while (j < n)
		tmp[k++] = v[j++];
	memcpy(v, tmp, (size_t)n * sizeof *v);
}

/*
** Finish a loaded vocabulary: the text map, byte tokens, the special-token list, the decoded pieces, and
** the EOT/EOG ids (found by text, as llama.cpp does, when the metadata names none). Merges come after.
*/
int tok_build(Tok *t, char *err, size_t len)
{
	uint64_t cap = 16;
	while (cap < 2 * (uint64_t)t->n)
		cap *= 2;
	t->tab = calloc(cap, sizeof *t->tab);
	if (!t->tab)
		return seterr(err, len, "out of memory");
	t->tmask = cap - 1;
	for (int32_t id = 0; id < t->n; id++) {
		if (!t->tlen[id])
			continue;
		const char *s = t->pool + t->off[id];
		uint64_t i = hash_bytes(s, t->tlen[id]) & t->tmask;
		for (;; i = (i + 1) & t->tmask) {
			uint32_t v = t->tab[i];
			if (!v) {
				t->tab[i] = (uint32_t)id + 1;
				break;
			}
			if (t->tlen[v - 1] == t->tlen[id] && !memcmp(t->pool + t->off[v - 1], s, t->tlen[id]))
				break; /* a duplicate text keeps its first id */
		}
	}
	tok_byte_level_init(t);
	for (int b = 0; b < 256; b++) {
		char buf[8];
		if (t->model == TOKM_BPE) {
			t->byte_tok[b] = tok_lookup(t, buf, (size_t)utf8_put2(buf, t->byte_cp[b]));
		} else {
			snprintf(buf, sizeof buf, "<0x%02X>", b);
			t->byte_tok[b] = tok_lookup(t, buf, 6);
			if (t->byte_tok[b] < 0 && b < 0x80) {
				buf[0] = (char)b;
				t->byte_tok[b] = tok_lookup(t, buf, 1);
			}
		}
	}
	/* special tokens, longest first */
	t->nspec = 0;
	t->spec = malloc((size_t)(t->n ? t->n : 1) * sizeof *t->spec);
	int32_t *tmp = malloc((size_t)(t->n ? t->n : 1) * sizeof *tmp);
	if (!t->spec || !tmp) {
		free(tmp);
		return seterr(err, len, "out of memory");
	}
	for (int32_t id = 0; id < t->n; id++) {
		int ty = t->type[id];
		if (t->tlen[id] && (ty == TOK_CONTROL || ty == TOK_USER_DEFINED || ty == TOK_UNKNOWN))
			t->spec[t->nspec++] = id;
	}
	sort_specials(t, t->spec, tmp, t->nspec);
	free(tmp);
	/* SentencePiece barrier bytes: ASCII bytes that no usable token longer than one byte contains */
	memset(t->spm_barrier, 1, sizeof t->spm_barrier);
	for (int32_t id = 0; id < t->n; id++) {
		int ty = t->type[id];
		if (t->tlen[id] < 2 || ty == TOK_CONTROL || ty == TOK_UNKNOWN || ty == TOK_BYTE)
			continue;
		for (uint32_t i = 0; i < t->tlen[id]; i++) {
			unsigned char c = (unsigned char)t->pool[t->off[id] + i];
			if (c < 0x80)
				t->spm_barrier[c] = 0;
		}
	}
	/* decoded pieces: at most the text length (byte-level and "▁" only shrink) */
	t->poff = malloc((size_t)(t->n ? t->n : 1) * sizeof *t->poff);
	t->plen = malloc((size_t)(t->n ? t->n : 1) * sizeof *t->plen);
	t->ppool = malloc(t->pool_len + 1);
	if (!t->poff || !t->plen || !t->ppool)
		return seterr(err, len, "out of memory");
	size_t o = 0;
	for (int32_t id = 0; id < t->n; id++) {
		t->poff[id] = o;
		t->plen[id] = (uint32_t)piece_of(t, id, t->ppool + o);
		o += t->plen[id];
	}
	/* special ids out of range are dropped */
	int32_t *ids[] = {&t->bos, &t->eos, &t->eot, &t->eom, &t->unk};
	for (size_t i = 0; i < sizeof ids / sizeof *ids; i++)
		if (*ids[i] >= t->n)
			*ids[i] = -1;
	for (int i = 0; t->eot < 0 && eot_texts[i]; i++)
		t->eot = tok_lookup(t, eot_texts[i], strlen(eot_texts[i]));
	if (tok_eog_add(t, t->eos) || tok_eog_add(t, t->eot) || tok_eog_add(t, t->eom))
		return seterr(err, len, "out of memory");
	for (int i = 0; eog_texts[i]; i++)
		if (tok_eog_add(t, tok_lookup(t, eog_texts[i], strlen(eog_texts[i]))))
			return seterr(err, len, "out of memory");
	return 0;
}

/* Free everything a loader or tok_build allocated (also a half-built Tok). */
void tok_close(Tok *t)
{
	if (!t)
		return;
	tok_pre_free(t);
	free(t->pool);
	free(t->off);
	free(t->tlen);
	free(t->score);
	free(t->type);
	free(t->flags);
	free(t->tab);
	free(t->mg);
	free(t->spec);
	free(t->ppool);
	free(t->poff);
	free(t->plen);
	free(t->eog);
	free(t);
}

/* ---- encoding ---- */

typedef struct {
	int32_t *v;
	size_t n, cap;
} Ids;

/* Growable id output: encode cannot know its length in advance. */
static int ids_push(Ids *o, int32_t id)
{
	if (o->n == o->cap) {
		size_t cap = o->cap ? o->cap * 2 : 64;
		int32_t *p = realloc(o->v, cap * sizeof *p);
		if (!p)
			return -1;
		o->v = p;
		o->cap = cap;
	}
	o->v[o->n++] = id;
	return 0;
}

/* A fragment of the input: a special token (id >= 0) or raw text [off, off+len). */
typedef struct {
	int32_t id;
	size_t off, len;
} Frag;

typedef struct {
	Frag *v;
	size_t n, cap;
} Frags;

/* Append a fragment; empty raw text is dropped, as llama.cpp drops empty remainders. */
static int frag_push(Frags *f, int32_t id, size_t off, size_t len)
{
	if (id < 0 && !len)
		return 0;
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 16;
		Frag *p = realloc(f->v, cap * sizeof *p);
		if (!p)
			return -1;
		f->v = p;
		f->cap = cap;
	}
	f->v[f->n++] = (Frag){id, off, len};
	return 0;
}

/*
** llama.cpp's special-token partition: for each special token in turn (longest first), every occurrence
** inside the raw fragments left so far becomes a token fragment. CONTROL and UNKNOWN tokens take part only
** with parse_special; USER_DEFINED ones always (as the Hugging Face library splits added tokens). LSTRIP /
** RSTRIP tokens swallow the whitespace beside them.
*/
static int split_specials(const Tok *t, const char *text, size_t n, int parse_special, Frags *f)
{
	unsigned char seen[256] = {0};
	for (size_t i = 0; i < n; i++)
		seen[(unsigned char)text[i]] = 1;
	Frags g = {0};
	for (int k = 0; k < t->nspec; k++) {
		int32_t id = t->spec[k];
		int ty = t->type[id];
		if (!parse_special && (ty == TOK_CONTROL || ty == TOK_UNKNOWN))
			continue;
		const char *st = t->pool + t->off[id];
		size_t sl = t->tlen[id];
		if (!seen[(unsigned char)st[0]] || sl > n)
			continue;
		/* any occurrence at all? */
		int any = 0;
		for (size_t i = 0; i < f->n && !any; i++)
			any = f->v[i].id < 0 && f->v[i].len >= sl && memmem(text + f->v[i].off, f->v[i].len, st, sl);
		if (!any)
			continue;
		g.n = 0;
		for (size_t i = 0; i < f->n; i++) {
			Frag fr = f->v[i];
			if (fr.id >= 0) {
				if (frag_push(&g, fr.id, 0, 0))
					goto oom;
				continue;
			}
			size_t off = fr.off, end = fr.off + fr.len;
			for (;;) {
				const char *m = end - off >= sl ? memmem(text + off, end - off, st, sl) : NULL;
				if (!m) {
					if (frag_push(&g, -1, off, end - off))
						goto oom;
					break;
				}
				size_t at = (size_t)(m - text), left = at - off;
				if (t->flags[id] & TOKF_LSTRIP)
					while (left && isspace((unsigned char)text[off + left - 1]))
						left--;
				if (frag_push(&g, -1, off, left) || frag_push(&g, id, 0, 0))
					goto oom;
				off = at + sl;
				if (t->flags[id] & TOKF_RSTRIP)
					while (off < end && isspace((unsigned char)text[off]))
						off++;
			}
		}
		Frags tmp = *f;
		*f = g;
		g = tmp;
	}
	free(g.v);
	return 0;
oom:
	free(g.v);
	return -1;
}

/* Binary heap of merge candidates; less() orders them. */
typedef struct {
	float score;             /* SPM: higher first */
	int32_t rank;            /* BPE: lower first */
	int32_t left, right;
	int32_t a, b;            /* BPE: the ids the sides had; SPM: a = merged byte length */
	int32_t id;              /* the merged token */
} Cand;

typedef struct {
	Cand *v;
	size_t n, cap;
	int spm;
} Heap;

/* Which candidate merges first: BPE by lowest rank, SPM by highest score, ties leftmost (llama.cpp). */
static int cand_less(const Heap *h, const Cand *x, const Cand *y)
{
	if (h->spm) {
		if (x->score != y->score)
			return x->score > y->score;
	} else if (x->rank != y->rank) {
		return x->rank < y->rank;
	}
	return x->left < y->left;
}

/* Sift-up insert; the heap grows as merges create new neighbour pairs. */
static int heap_push(Heap *h, Cand c)
{
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 64;
		Cand *p = realloc(h->v, cap * sizeof *p);
		if (!p)
			return -1;
		h->v = p;
		h->cap = cap;
	}
	size_t i = h->n++;
	while (i > 0) {
		size_t up = (i - 1) / 2;
		if (!cand_less(h, &c, &h->v[up]))
			break;
		h->v[i] = h->v[up];
		i = up;
	}
	h->v[i] = c;
	return 0;
}

/* Remove and return the first candidate (sift-down). */
static Cand heap_pop(Heap *h)
{
	Cand top = h->v[0], last = h->v[--h->n];
	size_t i = 0;
	for (;;) {
		size_t c = 2 * i + 1;
		if (c >= h->n)
			break;
		if (c + 1 < h->n && cand_less(h, &h->v[c + 1], &h->v[c]))
			c++;
		if (!cand_less(h, &h->v[c], &last))
			break;
		h->v[i] = h->v[c];
		i = c;
	}
	if (h->n)
		h->v[i] = last;
	return top;
}

/* Scratch reused across the pieces of one encode call. */
typedef struct {
	int32_t *id, *prev, *next;
	uint32_t *soff, *slen;   /* SPM symbols: byte span in the escaped text */
	size_t cap;
	Heap heap;
	char *buf;               /* byte-level text of a piece (ignore_merges) or escaped SPM text */
	size_t bcap;
	TokPieces pieces;
} Work;

/* Symbol arrays for a piece of n bytes, reused across pieces so encode allocates rarely. */
static int work_reserve(Work *w, size_t n)
{
	if (n <= w->cap)
		return 0;
	size_t cap = w->cap ? w->cap : 256;
	while (cap < n)
		cap *= 2;
	int32_t *a = realloc(w->id, cap * sizeof *a);
	if (a)
		w->id = a;
	int32_t *b = realloc(w->prev, cap * sizeof *b);
	if (b)
		w->prev = b;
	int32_t *c = realloc(w->next, cap * sizeof *c);
	if (c)
		w->next = c;
	uint32_t *d = realloc(w->soff, cap * sizeof *d);
	if (d)
		w->soff = d;
	uint32_t *e = realloc(w->slen, cap * sizeof *e);
	if (e)
		w->slen = e;
	if (!a || !b || !c || !d || !e)
		return -1;
	w->cap = cap;
	return 0;
}

/* Text scratch of n bytes, reused likewise. */
static int buf_reserve(Work *w, size_t n)
{
	if (n <= w->bcap)
		return 0;
	size_t cap = w->bcap ? w->bcap : 256;
	while (cap < n)
		cap *= 2;
	char *p = realloc(w->buf, cap);
	if (!p)
		return -1;
	w->buf = p;
	w->bcap = cap;
	return 0;
}

/* Try to queue the merge of adjacent BPE symbols l and r. */
static int bpe_cand(const Tok *t, Work *w, int32_t l, int32_t r)
{
	if (l < 0 || r < 0 || w->id[l] < 0 || w->id[r] < 0)
		return 0;
	const TokMerge *m = merge_find(t, w->id[l], w->id[r]);
	if (!m)
		return 0;
	Cand c = {0, m->rank, l, r, w->id[l], w->id[r], m->id};
	return heap_push(&w->heap, c);
}

/* Byte-level BPE of one piece: bytes -> ids of their alphabet characters -> merges by rank. */
static int bpe_piece(const Tok *t, Work *w, const unsigned char *s, size_t n, Ids *out)
{
	if (t->ignore_merges) {
		if (buf_reserve(w, 2 * n))
			return -1;
		size_t o = 0;
		for (size_t i = 0; i < n; i++)
			o += (size_t)utf8_put2(w->buf + o, t->byte_cp[s[i]]);
		int32_t id = tok_lookup(t, w->buf, o);
		if (id >= 0)
			return ids_push(out, id);
	}
	if (work_reserve(w, n))
		return -1;
	for (size_t i = 0; i < n; i++) {
		w->id[i] = t->byte_tok[s[i]];
		w->prev[i] = (int32_t)i - 1;
		w->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
	}
	w->heap.n = 0;
	w->heap.spm = 0;
	for (size_t i = 1; i < n; i++)
		if (bpe_cand(t, w, (int32_t)i - 1, (int32_t)i))
			return -1;
	while (w->heap.n) {
		Cand c = heap_pop(&w->heap);
		/* stale: a side was merged away or has become a longer token since */
		if (w->id[c.left] != c.a || w->id[c.right] != c.b || w->next[c.left] != c.right)
			continue;
		w->id[c.left] = c.id;
		w->id[c.right] = -2; /* consumed */
		w->next[c.left] = w->next[c.right];
		if (w->next[c.right] >= 0)
			w->prev[w->next[c.right]] = c.left;
		if (bpe_cand(t, w, w->prev[c.left], c.left) || bpe_cand(t, w, c.left, w->next[c.left]))
			return -1;
	}
	for (int32_t i = 0; i >= 0; i = w->next[i]) {
		int32_t id = w->id[i];
		if (id == -1)
			id = t->unk; /* a byte whose character is not in the vocabulary */
		if (id >= 0 && ids_push(out, id))
			return -1;
	}
	return 0;
}

/* Whether SentencePiece may produce token id from text: not control, unknown or byte tokens, whose text
** ("<s>", "<0x0A>") must not be matched in user text. */
static int spm_usable(const Tok *t, int32_t id)
{
	if (id < 0)
		return 0;
	int ty = t->type[id];
	return ty != TOK_CONTROL && ty != TOK_UNKNOWN && ty != TOK_BYTE;
}

/* Queue the merge of adjacent SPM symbols l and r when their joined text is a token. */
static int spm_cand(const Tok *t, Work *w, int32_t l, int32_t r)
{
	if (l < 0 || r < 0)
		return 0;
	uint32_t len = w->slen[l] + w->slen[r];
	int32_t id = tok_lookup(t, w->buf + w->soff[l], len);
	if (!spm_usable(t, id))
		return 0;
	Cand c = {t->score[id], 0, l, r, (int32_t)len, 0, id};
	return heap_push(&w->heap, c);
}

/* Length of the UTF-8 character a lead byte starts (1 for a stray continuation byte), as llama.cpp. */
static size_t utf8_lead_len(unsigned char c)
{
	static const unsigned char lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
	return lens[c >> 4];
}

/*
** SentencePiece (llama.cpp's SPM): text with spaces as "▁" (and a leading one when asked), split into
** characters, adjacent pairs merged highest score first while the joined text is a token; a symbol that
** is not a token falls back to its bytes' <0xXX> tokens. This runs on w->buf[from, to).
*/
static int spm_segment(const Tok *t, Work *w, size_t from, size_t to, Ids *out)
{
	int32_t ns = 0;
	for (size_t i = from; i < to; ns++) {
		size_t l = utf8_lead_len((unsigned char)w->buf[i]);
		if (l > to - i)
			l = to - i;
		w->soff[ns] = (uint32_t)i;
		w->slen[ns] = (uint32_t)l;
		w->prev[ns] = ns - 1;
		w->next[ns] = i + l < to ? ns + 1 : -1;
		i += l;
	}
	w->heap.n = 0;
	w->heap.spm = 1;
	for (int32_t i = 1; i < ns; i++)
		if (spm_cand(t, w, i - 1, i))
			return -1;
	while (w->heap.n) {
		Cand c = heap_pop(&w->heap);
		uint32_t ll = w->slen[c.left], rl = w->slen[c.right];
		if (!ll || !rl || ll + rl != (uint32_t)c.a)
			continue;
		w->slen[c.left] = ll + rl;
		w->slen[c.right] = 0;
		w->next[c.left] = w->next[c.right];
		if (w->next[c.right] >= 0)
			w->prev[w->next[c.right]] = c.left;
		if (spm_cand(t, w, w->prev[c.left], c.left) || spm_cand(t, w, c.left, w->next[c.left]))
			return -1;
	}
	for (int32_t i = 0; ns > 0 && i >= 0; i = w->next[i]) {
		int32_t id = tok_lookup(t, w->buf + w->soff[i], w->slen[i]);
		if (spm_usable(t, id)) {
			if (ids_push(out, id))
				return -1;
			continue;
		}
		for (uint32_t k = 0; k < w->slen[i]; k++) {
			int32_t b = t->byte_tok[(unsigned char)w->buf[w->soff[i] + k]];
			if (b < 0)
				b = t->unk;
			if (b >= 0 && ids_push(out, b))
				return -1;
		}
	}
	return 0;
}

/* The whole text through spm_segment, cut at barrier bytes: a byte no multi-character token contains
** never merges with anything, so the merges on either side of it are independent and the result is the
** same as for the whole text, with small heaps (llama's vocabulary has no token spanning a newline). */
static int spm_text(const Tok *t, Work *w, const char *s, size_t n, int prefix, Ids *out)
{
	if (buf_reserve(w, 3 * (n + 1)))
		return -1;
	size_t o = 0;
	if (prefix)
		memcpy(w->buf, "\xe2\x96\x81", 3), o = 3;
	for (size_t i = 0; i < n; i++) {
		if (s[i] == ' ')
			memcpy(w->buf + o, "\xe2\x96\x81", 3), o += 3;
		else
			w->buf[o++] = s[i];
	}
	if (o > UINT32_MAX || work_reserve(w, o))
		return -1;
	size_t from = 0;
	for (size_t i = 0; i < o; i++) {
		unsigned char c = (unsigned char)w->buf[i];
		if (c >= 0x80 || !t->spm_barrier[c])
			continue;
		if (spm_segment(t, w, from, i, out) || spm_segment(t, w, i, i + 1, out))
			return -1;
		from = i + 1;
	}
	return spm_segment(t, w, from, o, out);
}

/* Pre-tokenize a raw fragment and BPE each piece. */
static int bpe_text(const Tok *t, Work *w, const char *s, size_t n, Ids *out)
{
	if (tok_pretokenize(t, s, n, &w->pieces))
		return -1;
	for (size_t i = 0; i < w->pieces.n; i++) {
		TokPiece p = w->pieces.p[i];
		const char *base = p.buf ? w->pieces.scratch : s;
		if (bpe_piece(t, w, (const unsigned char *)base + p.off, p.len, out))
			return -1;
	}
	return 0;
}

/* Special tokens first, then each raw fragment through its model, BOS/EOS around (llama_vocab::tokenize). */
int tok_encode(const Tok *t, const char *text, size_t n, int add_special, int parse_special, int32_t **ids,
               size_t *nids)
{
	Frags f = {0};
	Ids out = {0};
	Work w = {0};
	int rc = -1;
	*ids = NULL;
	*nids = 0;
	if (frag_push(&f, -1, 0, n) || split_specials(t, text, n, parse_special, &f))
		goto done;
	if (add_special && t->add_bos && t->bos >= 0 && ids_push(&out, t->bos))
		goto done;
	int prev_special = 1;
	for (size_t i = 0; i < f.n; i++) {
		Frag fr = f.v[i];
		if (fr.id >= 0) {
			if (ids_push(&out, fr.id))
				goto done;
			prev_special = 1;
			continue;
		}
		if (t->model == TOKM_SPM) {
			if (spm_text(t, &w, text + fr.off, fr.len, t->add_space_prefix && prev_special, &out))
				goto done;
		} else if (bpe_text(t, &w, text + fr.off, fr.len, &out)) {
			goto done;
		}
		prev_special = 0;
	}
	if (add_special && t->add_eos && t->eos >= 0 && ids_push(&out, t->eos))
		goto done;
	if (!out.v && !(out.v = malloc(sizeof *out.v)))
		goto done;
	*ids = out.v;
	*nids = out.n;
	out.v = NULL;
	rc = 0;
done:
	free(out.v);
	free(f.v);
	free(w.id);
	free(w.prev);
	free(w.next);
	free(w.soff);
	free(w.slen);
	free(w.heap.v);
	free(w.buf);
	free(w.pieces.p);
	free(w.pieces.scratch);
	return rc;
}

/* ---- decoding ---- */

/* Pieces are decoded once at load; control tokens are hidden unless asked for. */
const char *tok_piece(const Tok *t, int32_t id, int special, size_t *len)
{
	if (id < 0 || id >= t->n)
		return NULL;
	int ty = t->type[id];
	*len = !special && (ty == TOK_CONTROL || ty == TOK_UNKNOWN) ? 0 : t->plen[id];
	return t->ppool + t->poff[id];
}

/* Concatenate the pieces: two passes so the result is one exact allocation. */
int tok_decode(const Tok *t, const int32_t *ids, size_t n, int special, char **text, size_t *len)
{
	size_t total = 0, l;
	*text = NULL;
	*len = 0;
	for (size_t i = 0; i < n; i++) {
		if (!tok_piece(t, ids[i], special, &l))
			return -1;
		total += l;
	}
	char *o = malloc(total + 1);
	if (!o)
		return -1;
	/* SentencePiece: the space encode put before the text goes (after a leading BOS too) */
	size_t strip_at = n && ids[0] == t->bos ? 1 : 0, k = 0;
	for (size_t i = 0; i < n; i++) {
		const char *p = tok_piece(t, ids[i], special, &l);
		if (i == strip_at && t->model == TOKM_SPM && t->add_space_prefix && t->type[ids[i]] == TOK_NORMAL &&
		    l && p[0] == ' ')
			p++, l--;
		memcpy(o + k, p, l);
		k += l;
	}
	o[k] = 0;
	*text = o;
	*len = k;
	return 0;
}

/* Accessors: the Tok stays opaque outside runtime/tok*.c. */
int32_t tok_bos(const Tok *t)
{
	return t->bos;
}

int32_t tok_eos(const Tok *t)
{
	return t->eos;
}

int32_t tok_eot(const Tok *t)
{
	return t->eot;
}

int tok_is_eog(const Tok *t, int32_t id)
{
	for (int i = 0; i < t->neog; i++)
		if (t->eog[i] == id)
			return 1;
	return 0;
}

int32_t tok_n_vocab(const Tok *t)
{
	return t->n;
}

int tok_type(const Tok *t, int32_t id)
{
	return id >= 0 && id < t->n ? t->type[id] : TOK_UNDEFINED;
}

const char *tok_text(const Tok *t, int32_t id, size_t *len)
{
	if (id < 0 || id >= t->n)
		return NULL;
	*len = t->tlen[id];
	return t->pool ? t->pool + t->off[id] : "";
}

int32_t tok_find(const Tok *t, const char *s, size_t n)
{
	return tok_lookup(t, s, n);
}

const char *tok_model(const Tok *t)
{
	return t->model == TOKM_SPM ? "llama" : "gpt2";
}

const char *tok_pre(const Tok *t)
{
	return t->pre_name;
}

/* ---- streaming ---- */

/* A stream starts with nothing held back. */
void tok_stream_init(TokStream *s, const Tok *t, int special)
{
	memset(s, 0, sizeof *s);
	s->t = t;
	s->special = special;
}

/* Only the output buffer is owned. */
void tok_stream_free(TokStream *s)
{
	free(s->buf);
	s->buf = NULL;
	s->cap = 0;
}

/* The UTF-8 character at s (n bytes): its length when complete and valid; 0 when the bytes so far are a
** valid start that needs more; -k when the first k bytes can never be part of a valid character (the
** "maximal subpart" that becomes one U+FFFD). Overlongs, surrogates and code points past U+10FFFF are
** invalid. */
int tok_utf8_check(const unsigned char *s, size_t n)
{
	unsigned c = s[0], lo = 0x80, hi = 0xBF;
	int need;
	if (c < 0x80)
		return 1;
	if (c >= 0xC2 && c <= 0xDF)
		need = 2;
	else if (c >= 0xE0 && c <= 0xEF)
		need = 3, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
	else if (c >= 0xF0 && c <= 0xF4)
		need = 4, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
	else
		return -1;
	for (int i = 1; i < need; i++) {
		if ((size_t)i >= n)
			return 0;
		unsigned b = s[i];
		if (i == 1 ? b < lo || b > hi : b < 0x80 || b > 0xBF)
			return -i;
	}
	return need;
}

/* Output buffer of the stream, reused across calls. */
static int stream_reserve(TokStream *s, size_t n)
{
	if (n <= s->cap)
		return 0;
	size_t cap = s->cap ? s->cap : 64;
	while (cap < n)
		cap *= 2;
	char *p = realloc(s->buf, cap);
	if (!p)
		return -1;
	s->buf = p;
	s->cap = cap;
	return 0;
}

/* Held bytes + the new piece: emit every complete character, U+FFFD for bytes that can never be one,
** and hold back a valid but incomplete tail (at most 3 bytes). */
const char *tok_stream_put(TokStream *s, int32_t id, size_t *len)
{
	size_t pl;
	const char *p = tok_piece(s->t, id, s->special, &pl);
	*len = 0;
	if (!p)
		return NULL;
	/* input: the held-back bytes, then the piece; output at most 3 bytes per input byte (U+FFFD) */
	size_t in = (size_t)s->npend + pl;
	if (stream_reserve(s, in + 3 * in + 1))
		return NULL;
	unsigned char *src = (unsigned char *)s->buf + 3 * in + 1;
	memcpy(src, s->pend, (size_t)s->npend);
	memcpy(src + s->npend, p, pl);
	size_t i = 0, o = 0;
	s->npend = 0;
	while (i < in) {
		int r = tok_utf8_check(src + i, in - i);
		if (r > 0) {
			memmove(s->buf + o, src + i, (size_t)r);
			o += (size_t)r, i += (size_t)r;
		} else if (r == 0) {
			memcpy(s->pend, src + i, in - i); /* fewer than 4 bytes */
			s->npend = (int)(in - i);
			break;
		} else {
			memcpy(s->buf + o, "\xef\xbf\xbd", 3);
			o += 3, i += (size_t)-r;
		}
	}
	s->buf[o] = 0;
	*len = o;
	return s->buf;
}

/* End of stream: an incomplete tail can no longer complete, so it becomes one U+FFFD. */
const char *tok_stream_flush(TokStream *s, size_t *len)
{
	*len = 0;
	if (stream_reserve(s, 4))
		return NULL;
	if (s->npend) {
		memcpy(s->buf, "\xef\xbf\xbd", 3);
		*len = 3;
		s->npend = 0;
	}
	s->buf[*len] = 0;
	return s->buf;
}
