/*
** tests/test_tok.c — tokenizers (runtime/formats/tok.h).
**
** - llama.cpp's vocab test vectors (../shared/fixtures/vocab: gpt-2, deepseek-coder, llama-spm): every
**   .inp string encodes to exactly the .out ids (produced by the Hugging Face tokenizers), decodes back to
**   itself, and stream-decodes one id at a time into valid UTF-8 only.
** - The same gpt-2 and deepseek-coder vocabularies rewritten as tokenizer.json files at test time: the
**   Hugging Face path must give the same ids.
** - The other pre-tokenizers (llama3, glm4, qwen2, deepseek-v3, deepseek-llm, gpt-4o, qwen35, tekken) on
**   the gpt-2 vocabulary, against digests of the ids the Hugging Face tokenizers library gave for the same
**   vocabulary and pre-tokenizer (generated offline; the library is not needed here).
** - A tiny hand-made tokenizer.json (merges as strings and as pairs, added tokens, split behaviours,
**   ignore_merges, prefix space, BOS from the post-processor), special-token handling, the streaming
**   decoder on split and invalid byte sequences, and refusals of what is not implemented.
** Runs from the repository root.
*/
#include "check.h"
#include "tok.h"

#include <ftw.h>
#include <jansson.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define VOCAB "../shared/fixtures/vocab/ggml-vocab-"

static char tmp[64];

/* ---- helpers ---- */

/* Whole file into a malloc'd NUL-terminated buffer. */
static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	fseek(f, 0, SEEK_END);
	long sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	char *b = malloc((size_t)sz + 1);
	if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
		free(b);
		b = NULL;
	}
	fclose(f);
	if (b) {
		b[sz] = 0;
		*n = (size_t)sz;
	}
	return b;
}

/* A test string with control and non-ASCII bytes escaped, for one-line messages (static buffer). */
static const char *esc(const char *s, size_t n)
{
	static char buf[4][640];
	static int k;
	k = (k + 1) % 4;
	char *o = buf[k];
	size_t j = 0;
	for (size_t i = 0; i < n && j < sizeof buf[k] - 8; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			j += (size_t)sprintf(o + j, "\\n");
		else if (c < 0x20 || c >= 0x7f)
			j += (size_t)sprintf(o + j, "\\x%02x", c);
		else
			o[j++] = (char)c;
	}
	o[j] = 0;
	return o;
}

/* Ids as "1 2 3" (static buffer). */
static const char *idstr(const int32_t *v, size_t n)
{
	static char buf[4][2048];
	static int k;
	k = (k + 1) % 4;
	size_t j = 0;
	buf[k][0] = 0;
	for (size_t i = 0; i < n && j < sizeof buf[k] - 16; i++)
		j += (size_t)sprintf(buf[k] + j, i ? " %d" : "%d", (int)v[i]);
	return buf[k];
}

/* Strict UTF-8 validity (the test's own, independent of tok.c). */
static int valid_utf8(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		size_t need;
		unsigned min;
		if (c < 0x80) {
			i++;
			continue;
		} else if ((c & 0xE0) == 0xC0) {
			need = 2, min = 0x80;
		} else if ((c & 0xF0) == 0xE0) {
			need = 3, min = 0x800;
		} else if ((c & 0xF8) == 0xF0) {
			need = 4, min = 0x10000;
		} else {
			return 0;
		}
		if (i + need > n)
			return 0;
		unsigned cp = c & (0xFF >> (need + 1));
		for (size_t k = 1; k < need; k++) {
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
			cp = cp << 6 | (s[i + k] & 0x3F);
		}
		if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
			return 0;
		i += need;
	}
	return 1;
}

/* FNV-1a over the ids' little-endian bytes: the digest the expectations were generated with. */
static uint32_t digest(const int32_t *v, size_t n)
{
	uint32_t h = 0x811c9dc5u;
	for (size_t i = 0; i < n; i++)
		for (int b = 0; b < 4; b++) {
			h ^= (uint32_t)((uint32_t)v[i] >> (8 * b)) & 0xFF;
			h *= 0x01000193u;
		}
	return h;
}

/* The vocab test file pair: strings split at "\n__ggml_vocab_test__\n" (as llama.cpp's
** test-tokenizer-0 reads them: the newline before the marker ends the string, the one after ends the
** marker line) and the expected ids, one line per string. */
typedef struct {
	char *raw;
	int n;
	const char *s[128];
	size_t len[128];
	int32_t *ids[128];
	size_t nids[128];
} Vectors;

static int load_vectors(Vectors *v, const char *gguf)
{
	char path[512];
	size_t n, on;
	memset(v, 0, sizeof *v);
	snprintf(path, sizeof path, "%s.inp", gguf);
	if (!(v->raw = slurp(path, &n)))
		return -1;
	static const char sep[] = "\n__ggml_vocab_test__\n";
	size_t pos = 0, sl = sizeof sep - 1;
	while (pos < n && v->n < 128) {
		const char *m = memmem(v->raw + pos, n - pos, sep, sl);
		size_t end = m ? (size_t)(m - v->raw) : n;
		v->s[v->n] = v->raw + pos;
		v->len[v->n++] = end - pos;
		pos = m ? end + sl : n;
	}
	snprintf(path, sizeof path, "%s.out", gguf);
	char *out = slurp(path, &on);
	if (!out)
		return -1;
	int line = 0;
	for (char *p = out; *p && line < v->n; line++) {
		char *nl = strchr(p, '\n');
		if (nl)
			*nl = 0;
		v->ids[line] = malloc(256 * sizeof(int32_t));
		for (char *q = p; *q;) {
			while (*q == ' ')
				q++;
			if (!*q)
				break;
			v->ids[line][v->nids[line]++] = (int32_t)strtol(q, &q, 10);
		}
		p = nl ? nl + 1 : p + strlen(p);
	}
	free(out);
	return line == v->n ? 0 : -1;
}

static void free_vectors(Vectors *v)
{
	for (int i = 0; i < v->n; i++)
		free(v->ids[i]);
	free(v->raw);
}

/* Encode every string and compare with the expected ids: a FAIL line per mismatch, then one check. */
static void check_vectors(const Tok *t, const Vectors *v, const char *name)
{
	int bad = 0;
	for (int i = 0; i < v->n; i++) {
		int32_t *ids;
		size_t n;
		char nm[160];
		if (tok_encode(t, v->s[i], v->len[i], 0, 0, &ids, &n)) {
			snprintf(nm, sizeof nm, "%s: encode string %d", name, i);
			check(0, nm, "tok_encode failed");
			bad++;
			continue;
		}
		if (n != v->nids[i] || memcmp(ids, v->ids[i], n * sizeof *ids)) {
			snprintf(nm, sizeof nm, "%s: encode string %d", name, i);
			check(0, nm, "'%s': got [%s], expected [%s]", esc(v->s[i], v->len[i]), idstr(ids, n),
			      idstr(v->ids[i], v->nids[i]));
			bad++;
		}
		free(ids);
	}
	char nm[160];
	snprintf(nm, sizeof nm, "%s: %d of %d test strings encode to the expected ids", name, v->n - bad, v->n);
	check(bad == 0 && v->n > 0, nm, "%d strings differ", bad);
}

/* Decode the expected ids back (whole, and streamed one id at a time). The stream must emit valid UTF-8
** only and, concatenated, the text (for SentencePiece with the leading space encode added). */
static void check_decode(const Tok *t, const Vectors *v, const char *name, int spm)
{
	int bad = 0, sbad = 0, split = 0;
	for (int i = 0; i < v->n; i++) {
		char *text;
		size_t len;
		if (tok_decode(t, v->ids[i], v->nids[i], 0, &text, &len) || len != v->len[i] ||
		    memcmp(text, v->s[i], len)) {
			char nm[160];
			snprintf(nm, sizeof nm, "%s: decode string %d", name, i);
			check(0, nm, "'%s' decoded to '%s'", esc(v->s[i], v->len[i]), text ? esc(text, len) : "(error)");
			bad++;
		}
		free(text);
		TokStream st;
		tok_stream_init(&st, t, 0);
		char acc[4096];
		size_t an = 0;
		int ok = 1, was_split = 0;
		for (size_t k = 0; k <= v->nids[i]; k++) {
			size_t l, pl;
			const char *p = k < v->nids[i] ? tok_stream_put(&st, v->ids[i][k], &l) : tok_stream_flush(&st, &l);
			if (!p || !valid_utf8((const unsigned char *)p, l) || an + l > sizeof acc) {
				ok = 0;
				break;
			}
			if (k < v->nids[i] && tok_piece(t, v->ids[i][k], 0, &pl) && pl != l)
				was_split = 1;
			memcpy(acc + an, p, l);
			an += l;
		}
		tok_stream_free(&st);
		size_t lead = spm && v->len[i] ? 1 : 0;
		if (!ok || an != v->len[i] + lead || (lead && acc[0] != ' ') || memcmp(acc + lead, v->s[i], v->len[i])) {
			char nm[160];
			snprintf(nm, sizeof nm, "%s: stream decode string %d", name, i);
			check(0, nm, "'%s' streamed to '%s'%s", esc(v->s[i], v->len[i]), esc(acc, an),
			      ok ? "" : " (invalid UTF-8 emitted)");
			sbad++;
		}
		split += was_split;
	}
	char nm[200];
	snprintf(nm, sizeof nm, "%s: %d test strings decode back to themselves", name, v->n - bad);
	check(bad == 0, nm, "%d differ", bad);
	snprintf(nm, sizeof nm,
	         "%s: streaming decode emits only valid UTF-8 and the text (%d strings have a character split across tokens)",
	         name, split);
	check(sbad == 0 && split > 0, nm, "%d strings differ, %d with a split character", sbad, split);
}

/* Open a GGUF vocabulary through weights_open + tok_open (pre NULL) or with a pre-tokenizer override. */
static Tok *open_vocab(const char *name, const char *pre)
{
	char path[256], err[1024];
	snprintf(path, sizeof path, VOCAB "%s.gguf", name);
	Weights w;
	Tok *t = NULL;
	if (weights_open(&w, path, err, sizeof err)) {
		check(0, name, "%s", err);
		return NULL;
	}
	int rc = pre ? tok_open_gguf(&t, &w.gg, pre, err, sizeof err) : tok_open(&t, &w, err, sizeof err);
	weights_close(&w);
	if (rc) {
		check(0, name, "%s", err);
		return NULL;
	}
	return t;
}

/* Encode s (NUL-terminated) and compare with want (n ids). */
static void check_enc(const Tok *t, const char *name, const char *s, int add_special, int parse_special,
                      const int32_t *want, size_t n)
{
	int32_t *ids;
	size_t m;
	if (tok_encode(t, s, strlen(s), add_special, parse_special, &ids, &m)) {
		check(0, name, "tok_encode failed");
		return;
	}
	check(m == n && !memcmp(ids, want, n * sizeof *ids), name, "'%s': got [%s], expected [%s]", esc(s, strlen(s)),
	      idstr(ids, m), idstr(want, n));
	free(ids);
}

/* Decode ids and compare with the text want. */
static void check_dec(const Tok *t, const char *name, const int32_t *ids, size_t n, int special, const char *want)
{
	char *text;
	size_t len;
	if (tok_decode(t, ids, n, special, &text, &len)) {
		check(0, name, "tok_decode failed");
		return;
	}
	check(len == strlen(want) && !memcmp(text, want, len), name, "got '%s', expected '%s'", esc(text, len),
	      esc(want, strlen(want)));
	free(text);
}

/* ---- GGUF vocabularies ---- */

static void test_gguf_vocabs(void)
{
	static const char *const names[] = {"gpt-2", "deepseek-coder", "llama-spm"};
	for (int k = 0; k < 3; k++) {
		char path[256], nm[64];
		snprintf(path, sizeof path, VOCAB "%s.gguf", names[k]);
		Vectors v;
		if (load_vectors(&v, path)) {
			check(0, names[k], "cannot read %s.inp/.out", path);
			free_vectors(&v);
			continue;
		}
		Tok *t = open_vocab(names[k], NULL);
		if (t) {
			snprintf(nm, sizeof nm, "gguf %s", names[k]);
			check_vectors(t, &v, nm);
			check_decode(t, &v, nm, k == 2);
			tok_close(t);
		}
		free_vectors(&v);
	}
}

/* Model facts, special tokens, parse_special / add_special, and decode of control tokens. */
static void test_specials(void)
{
	Tok *t = open_vocab("gpt-2", NULL);
	if (t) {
		check(!strcmp(tok_model(t), "gpt2") && !strcmp(tok_pre(t), "gpt-2") && tok_n_vocab(t) == 50257, "gpt-2: model",
		      "%s/%s, %d tokens", tok_model(t), tok_pre(t), (int)tok_n_vocab(t));
		check(tok_bos(t) == 50256 && tok_eos(t) == 50256 && tok_eot(t) == 50256 && tok_is_eog(t, 50256) &&
		      !tok_is_eog(t, 0), "gpt-2: BOS/EOS/EOT are <|endoftext|>", "bos %d eos %d eot %d", (int)tok_bos(t),
		      (int)tok_eos(t), (int)tok_eot(t));
		static const int32_t eot[] = {50256}, eot_text[] = {27, 91, 437, 1659, 5239, 91, 29};
		check_enc(t, "gpt-2: parse_special turns <|endoftext|> into its id", "<|endoftext|>", 0, 1, eot, 1);
		check_enc(t, "gpt-2: without parse_special <|endoftext|> is text", "<|endoftext|>", 0, 0, eot_text, 7);
		static const int32_t mid[] = {15496, 50256, 995};
		check_enc(t, "gpt-2: a control token between text", "Hello<|endoftext|> world", 0, 1, mid, 3);
		static const int32_t hello[] = {15496};
		check_enc(t, "gpt-2: add_special adds nothing (no add_bos)", "Hello", 1, 0, hello, 1);
		check_dec(t, "gpt-2: control tokens decode only with special", mid, 3, 0, "Hello world");
		check_dec(t, "gpt-2: control tokens decode with special", mid, 3, 1, "Hello<|endoftext|> world");
		size_t l;
		const char *p = tok_text(t, 220, &l);
		check(p && l == 2 && !memcmp(p, "\xc4\xa0", 2) && tok_find(t, "\xc4\xa0", 2) == 220 &&
		      tok_type(t, 50256) == TOK_CONTROL && tok_type(t, 220) == TOK_NORMAL, "gpt-2: vocabulary text and types",
		      "text of 220 '%s'", p ? esc(p, l) : "(null)");
		int32_t bad = 50257;
		char *text;
		size_t len;
		check(tok_decode(t, &bad, 1, 0, &text, &len) == -1, "gpt-2: decoding an id out of range fails", "it did not");
		tok_close(t);
	}
	t = open_vocab("deepseek-coder", NULL);
	if (t) {
		/* BOS <｜begin▁of▁sentence｜> 32013 (add_bos_token true); ü is a user-defined token, split always */
		static const int32_t bos[] = {32013, 37, 32009, 71, 6247};
		check_enc(t, "deepseek-coder: add_special adds BOS", "F\xc3\xbchrer", 1, 0, bos, 5);
		static const int32_t ctl[] = {32013, 32013};
		check_enc(t, "deepseek-coder: parse_special", "<\xef\xbd\x9c" "begin\xe2\x96\x81" "of\xe2\x96\x81" "sentence\xef\xbd\x9c>",
		          1, 1, ctl, 2);
		check(tok_eos(t) == 32014 && tok_is_eog(t, 32014), "deepseek-coder: EOS", "eos %d", (int)tok_eos(t));
		tok_close(t);
	}
	t = open_vocab("llama-spm", NULL);
	if (t) {
		check(!strcmp(tok_model(t), "llama") && tok_bos(t) == 1 && tok_eos(t) == 2 && tok_is_eog(t, 2),
		      "llama-spm: model and BOS/EOS", "%s bos %d eos %d", tok_model(t), (int)tok_bos(t), (int)tok_eos(t));
		static const int32_t hello[] = {1, 15043, 3186};
		check_enc(t, "llama-spm: add_special adds BOS", "Hello world", 1, 0, hello, 3);
		check_dec(t, "llama-spm: decode drops the leading space after BOS", hello, 3, 0, "Hello world");
		check_dec(t, "llama-spm: decode with special shows BOS", hello, 3, 1, "<s>Hello world");
		/* <s> in user text is text unless parse_special; after a special token the text gets a space */
		int32_t *ids;
		size_t n;
		int ok = !tok_encode(t, "<s>x", 4, 0, 0, &ids, &n) && n > 1 && ids[0] != 1;
		free(ids);
		static const int32_t sp[] = {1, 921}; /* "▁x" */
		check(ok, "llama-spm: <s> is text without parse_special", "it was not");
		check_enc(t, "llama-spm: parse_special, then a space-prefixed fragment", "<s>x", 0, 1, sp, 2);
		tok_close(t);
	}
}

/* ---- streaming decoder on byte tokens ---- */

static void test_stream(void)
{
	Tok *t = open_vocab("llama-spm", NULL);
	if (!t)
		return;
	int32_t b[256];
	for (int i = 0; i < 256; i++) {
		char s[8];
		snprintf(s, sizeof s, "<0x%02X>", i);
		b[i] = tok_find(t, s, 6);
	}
	TokStream st;
	tok_stream_init(&st, t, 0);
	/* 🦙 = F0 9F A6 99 as four byte tokens: nothing until the last */
	static const unsigned char llama[] = {0xF0, 0x9F, 0xA6, 0x99};
	size_t l[4];
	int ok = 1;
	for (int i = 0; i < 4; i++) {
		const char *p = tok_stream_put(&st, b[llama[i]], &l[i]);
		ok &= p && (i < 3 ? l[i] == 0 : l[i] == 4 && !memcmp(p, llama, 4));
	}
	check(ok, "stream: a 4-byte character over 4 byte tokens comes out whole at the last",
	      "lengths %zu %zu %zu %zu", l[0], l[1], l[2], l[3]);
	/* a broken sequence: F0 then 'A' -> U+FFFD then A, at once */
	size_t n1, n2;
	const char *p = tok_stream_put(&st, b[0xF0], &n1);
	ok = p && n1 == 0;
	p = tok_stream_put(&st, b['A'], &n2);
	ok &= p && n2 == 4 && !memcmp(p, "\xef\xbf\xbd" "A", 4);
	check(ok, "stream: an interrupted sequence becomes U+FFFD at once", "got %zu then '%s'", n1, p ? esc(p, n2) : "");
	/* never valid: C0, and a surrogate ED A0 */
	p = tok_stream_put(&st, b[0xC0], &n1);
	ok = p && n1 == 3 && !memcmp(p, "\xef\xbf\xbd", 3);
	p = tok_stream_put(&st, b[0xED], &n2);
	ok &= p && n2 == 0;
	p = tok_stream_put(&st, b[0xA0], &n2);
	ok &= p && n2 == 6 && !memcmp(p, "\xef\xbf\xbd\xef\xbf\xbd", 6);
	check(ok, "stream: invalid lead bytes and surrogates become U+FFFD", "got '%s'", p ? esc(p, n2) : "");
	/* an incomplete character at the end: held, then one U+FFFD at flush */
	p = tok_stream_put(&st, b[0xE2], &n1);
	ok = p && n1 == 0;
	p = tok_stream_put(&st, b[0x82], &n1);
	ok &= p && n1 == 0;
	p = tok_stream_flush(&st, &n2);
	ok &= p && n2 == 3 && !memcmp(p, "\xef\xbf\xbd", 3);
	p = tok_stream_flush(&st, &n1);
	ok &= p && n1 == 0;
	check(ok, "stream: an incomplete character at the end becomes one U+FFFD at flush", "got %zu", n2);
	/* a text token after held bytes: the held bytes complete from it? no: E2 then "▁Hello" is invalid */
	p = tok_stream_put(&st, b[0xE2], &n1);
	ok = p && n1 == 0;
	p = tok_stream_put(&st, 15043, &n2);
	ok &= p && n2 == 9 && !memcmp(p, "\xef\xbf\xbd Hello", 9);
	check(ok, "stream: held bytes followed by a text token", "got '%s'", p ? esc(p, n2) : "");
	p = tok_stream_put(&st, 32000, &n1);
	check(p == NULL, "stream: an id out of range is refused", "it was not");
	tok_stream_free(&st);
	tok_close(t);
}

/* ---- other pre-tokenizers against Hugging Face digests ---- */

/* Generated offline with the Hugging Face tokenizers library (0.23): the gpt-2 vocabulary and merges
** in a tokenizer.json whose pre_tokenizer is each family's (Sequence of Split regexes + ByteLevel), on
** the 46 .inp strings followed by extra_strs; digest() of the ids. */
static const char *const extra_strs[] = {
	"a\302\240b c\343\200\200d e\342\200\250f\302\205g\341\240\216h\342\200\213i\357\273\277j",
	"I'M HERE, YOU'LL SEE 'S 'T 'RE 'VE 'LL 'D, it'S don'T",
	"\305\277'\305\277 '\305\277 test'\305\277 K\342\204\252",
	"\343\201\262\343\202\211\343\201\214\343\201\252\343\202\253\343\202\277\343\202\253\343\203\212\346\274\242\345\255\227\343\203\206\343\202\271\343\203\210\343\200\202\355\225\234\352\265\255\354\226\264 \355\205\215\354\212\244\355\212\270\354\236\205\353\213\210\353\213\244",
	"1234567 12 123 \331\241\331\242\331\243\331\244\331\245 \357\274\221\357\274\222\357\274\223\357\274\224 \302\275 \342\205\267 \302\262\302\263",
	"e\314\201cole cafe\314\201 \340\244\225\340\245\215\340\244\267 \340\244\250\340\244\256\340\244\270\340\245\215\340\244\244\340\245\207 \340\270\240\340\270\262\340\270\251\340\270\262\340\271\204\340\270\227\340\270\242",
	"\015\012\015\012 x\015\012y \011\011 x  \012\012  \012",
	"abc   ",
	"...!!!\077\077\077  $100 a/b/c ~~~ ^^ <|> [x] {y} @z #w %v &u *t +s =r",
	"def f(x):\012    return x**2  # comment\012\011pass\012",
	"Hello\344\270\226\347\225\214123abc \316\251\316\274\316\255\316\263\316\261 \320\237\321\200\320\270\320\262\320\265\321\202 \320\274\320\270\321\200",
	"\360\237\221\251\342\200\215\360\237\221\251\342\200\215\360\237\221\247\342\200\215\360\237\221\246 \360\237\217\263\357\270\217\342\200\215\360\237\214\210 \360\237\207\272\360\237\207\270 \360\237\230\200\360\237\230\200",
	"   leading and trailing   \012",
	"tab\011here\013vt\014ff",
	"MixedCASEWords camelCase snake_case kebab-case CONSTANT_CASE",
	"\303\251\303\250\303\252 \303\211\303\210 \303\261 \303\274\303\266\303\244 \303\237",
};

static const uint32_t dg_llama3[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0x9625cba6, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xd53f47bf, 0xcc213eb3, 0xeeb26447, 0x2b767476,
	0x5967897e, 0xc941b42c, 0x9e126f4d, 0x515cf679, 0x1234b21b, 0x351823ca,
	0xa05e82aa, 0x8cc54171, 0xd3bdaa70, 0x87ec1fe4, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0xb75bc155, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x701ea099, 0xf1a36832, 0x9adb6f2c, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_glm4[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0x9625cba6, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xd53f47bf, 0xcc213eb3, 0xeeb26447, 0x2b767476,
	0x5967897e, 0xc941b42c, 0x9e126f4d, 0x515cf679, 0x1234b21b, 0x351823ca,
	0xa05e82aa, 0x8cc54171, 0xd3bdaa70, 0x87ec1fe4, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0xb75bc155, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x701ea099, 0xf1a36832, 0x9adb6f2c, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_qwen2[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0xe13dbb5b, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xc13e2794, 0xcc213eb3, 0xeeb26447, 0x8f2594a5,
	0x808be927, 0x9cca8785, 0xbec52a07, 0xfc0ef665, 0xf819a6e7, 0x0be66145,
	0x6734dfc7, 0x8cc54171, 0xd3bdaa70, 0xc0f33821, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0x43b26af9, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x26a06fa8, 0xf1a36832, 0xdfb49581, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_deepseek_v3[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0x9625cba6, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xd53f47bf, 0xcc213eb3, 0xeeb26447, 0x2b767476,
	0x5967897e, 0xc941b42c, 0x9e126f4d, 0x515cf679, 0x1234b21b, 0x351823ca,
	0xa05e82aa, 0x8cc54171, 0xd3bdaa70, 0x87ec1fe4, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0xb75bc155, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x701ea099, 0xf1a36832, 0x9adb6f2c, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_deepseek_llm[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x999f2545, 0xc050bab3, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0x9625cba6, 0x07c633b3, 0x30923c36, 0xc9f6d748, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0x92709904, 0xcc213eb3, 0xeeb26447, 0x2b767476,
	0x5967897e, 0x6ae7a3b2, 0x7108bec1, 0x11bae9d1, 0x19de63c5, 0xc0b4ef45,
	0xbdf40dd2, 0x8cc54171, 0xd3bdaa70, 0xc53b383e, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0xd6c12650, 0x3ff81984, 0xb6cd5228, 0x31bb5c33,
	0x701ea099, 0xf1a36832, 0x9adb6f2c, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_gpt_4o[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0x9625cba6, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xd53f47bf, 0xcc213eb3, 0xeeb26447, 0x2b767476,
	0x5967897e, 0xc941b42c, 0x9e126f4d, 0x515cf679, 0x1234b21b, 0x351823ca,
	0xa05e82aa, 0x8cc54171, 0xd3bdaa70, 0x87ec1fe4, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0xb75bc155, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x701ea099, 0xf1a36832, 0x9adb6f2c, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_qwen35[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0xe13dbb5b, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xc13e2794, 0xcc213eb3, 0xeeb26447, 0x8f2594a5,
	0x808be927, 0x9cca8785, 0xbec52a07, 0xfc0ef665, 0xf819a6e7, 0x0be66145,
	0x6734dfc7, 0x8cc54171, 0xd3bdaa70, 0xc0f33821, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0x43b26af9, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x26a06fa8, 0xf1a36832, 0xdfb49581, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};
static const uint32_t dg_tekken[] = {
	0x71d8d2fa, 0xeee3ab8e, 0x811c9dc5, 0x6ddb95a9, 0x9578b7c5, 0xea5f4fa9,
	0x99896d00, 0x8a0e2a33, 0x8a53a12b, 0xa92313bd, 0xc22c0426, 0x047dd52f,
	0xc00c08cc, 0xe3c99e0e, 0x9bc33fb9, 0x2871c249, 0x3ccd73e0, 0x06e6292b,
	0x1608a10d, 0xe13dbb5b, 0x07c633b3, 0x30923c36, 0xf0356640, 0xe7319439,
	0x4ca4a13e, 0xf118feb2, 0xc9285b3e, 0x989e58b2, 0xeb45aff3, 0xf4178aeb,
	0xd64d116a, 0x5e71041a, 0xc13e2794, 0xcc213eb3, 0xeeb26447, 0x8f2594a5,
	0x808be927, 0x9cca8785, 0xbec52a07, 0xfc0ef665, 0xf819a6e7, 0x0be66145,
	0x6734dfc7, 0x8cc54171, 0xd3bdaa70, 0xc0f33821, 0x0d711f2d, 0x5749d251,
	0xafd44eb0, 0xadbfc995, 0x43b26af9, 0xe5e94750, 0x4ee75d22, 0x31bb5c33,
	0x26a06fa8, 0xf1a36832, 0xdfb49581, 0x9ee219c1, 0x78cd1eb7, 0x0c0670eb,
	0x3b076371, 0xeb2d7f56,
};

static void test_pretokenizers(void)
{
	Vectors v;
	if (load_vectors(&v, VOCAB "gpt-2.gguf")) {
		check(0, "pre-tokenizers", "cannot read the gpt-2 vectors");
		free_vectors(&v);
		return;
	}
	int nextra = (int)(sizeof extra_strs / sizeof *extra_strs);
	static const struct {
		const char *pre;
		const uint32_t *dg;
	} pres[] = {
		{"llama3", dg_llama3}, {"glm4", dg_glm4}, {"qwen2", dg_qwen2}, {"deepseek-v3", dg_deepseek_v3},
		{"deepseek-llm", dg_deepseek_llm}, {"gpt-4o", dg_gpt_4o}, {"qwen35", dg_qwen35}, {"tekken", dg_tekken},
	};
	for (size_t k = 0; k < sizeof pres / sizeof *pres; k++) {
		Tok *t = open_vocab("gpt-2", pres[k].pre);
		if (!t)
			continue;
		int bad = 0, total = v.n + nextra;
		for (int i = 0; i < total; i++) {
			const char *s = i < v.n ? v.s[i] : extra_strs[i - v.n];
			size_t sl = i < v.n ? v.len[i] : strlen(s);
			int32_t *ids;
			size_t n;
			if (tok_encode(t, s, sl, 0, 0, &ids, &n))
				ids = NULL, n = 0;
			if (!ids || digest(ids, n) != pres[k].dg[i]) {
				char nm[128];
				snprintf(nm, sizeof nm, "pre %s: string %d", pres[k].pre, i);
				check(0, nm, "'%s' gave [%s], not the Hugging Face ids", esc(s, sl), idstr(ids, n));
				bad++;
			}
			free(ids);
		}
		char nm[160];
		snprintf(nm, sizeof nm, "pre %s (gpt-2 vocabulary): %d of %d strings give the Hugging Face ids", pres[k].pre,
		         total - bad, total);
		check(!bad, nm, "%d differ", bad);
		tok_close(t);
	}
	free_vectors(&v);
	/* every pre-tokenizer name compiles and round-trips (no reference ids for these) */
	static const char *const names[] = {"default", "gpt-2", "llama-bpe", "dbrx", "chatglm-bpe", "deepseek-r1-qwen",
	                                    "starcoder", "falcon", "llama4"};
	static const char text[] = "Hello, y'all! 1234567 \xe6\x88\x91\xe6\x83\xb3 \xce\xa9 \n\n  end ";
	int ok = 0, total = (int)(sizeof names / sizeof *names);
	char why[256] = "";
	for (int k = 0; k < total; k++) {
		Tok *t = open_vocab("gpt-2", names[k]);
		int32_t *ids = NULL;
		size_t n;
		char *back = NULL;
		size_t bl;
		if (t && !tok_encode(t, text, sizeof text - 1, 0, 0, &ids, &n) && n > 10 &&
		    !tok_decode(t, ids, n, 0, &back, &bl) && bl == sizeof text - 1 && !memcmp(back, text, bl))
			ok++;
		else
			snprintf(why, sizeof why, "%s fails", names[k]);
		free(ids);
		free(back);
		tok_close(t);
	}
	check(ok == total, "every named pre-tokenizer compiles and round-trips", "%s", why);
	Gguf g;
	char err[1024];
	Tok *t;
	if (!gguf_open(&g, VOCAB "gpt-2.gguf", err, sizeof err)) {
		int rc = tok_open_gguf(&t, &g, "kimi-k2", err, sizeof err);
		check(rc == -1 && strstr(err, "'kimi-k2' is not supported") && !strchr(err, '\n'),
		      "an unknown tokenizer.ggml.pre is refused by name", "rc %d: %s", rc, err);
		gguf_close(&g);
	}
}

/* ---- tokenizer.json ---- */

/* Write a JSON value (stolen) to dir/name; returns the path (static buffer). */
static const char *write_json(const char *name, json_t *j)
{
	static char path[512];
	snprintf(path, sizeof path, "%s/%s", tmp, name);
	json_dump_file(j, path, JSON_COMPACT);
	json_decref(j);
	return path;
}

/* The GGUF vocabulary as a Hugging Face tokenizer.json, in dir tmp/sub: vocab, merges (as "A B" strings,
** or as pairs), CONTROL/USER_DEFINED tokens as added tokens, and the given pre_tokenizer. */
static int gguf_to_json(const char *name, const char *sub, json_t *pre, int pairs)
{
	char path[256], err[1024];
	snprintf(path, sizeof path, VOCAB "%s.gguf", name);
	Gguf g;
	if (gguf_open(&g, path, err, sizeof err)) {
		json_decref(pre);
		return -1;
	}
	const GgufKV *toks = gguf_find_key(&g, "tokenizer.ggml.tokens");
	const GgufKV *types = gguf_find_key(&g, "tokenizer.ggml.token_type");
	const GgufKV *merges = gguf_find_key(&g, "tokenizer.ggml.merges");
	json_t *vocab = json_object(), *added = json_array(), *mg = json_array();
	for (uint64_t i = 0; i < gguf_arr_len(toks); i++) {
		uint64_t l;
		const char *s = gguf_arr_str(toks, i, &l);
		int64_t ty = 1;
		gguf_arr_int(types, i, &ty);
		if (!json_object_get(vocab, s))
			json_object_set_new(vocab, s, json_integer((json_int_t)i));
		if (ty == TOK_CONTROL || ty == TOK_USER_DEFINED)
			json_array_append_new(added, json_pack("{s:I, s:s, s:b, s:b, s:b}", "id", (json_int_t)i, "content", s,
			                                       "special", ty == TOK_CONTROL, "lstrip", 0, "rstrip", 0));
	}
	for (uint64_t i = 0; i < gguf_arr_len(merges); i++) {
		const char *s = gguf_arr_str(merges, i, NULL);
		if (!pairs) {
			json_array_append_new(mg, json_string(s));
			continue;
		}
		const char *sp = strchr(s + 1, ' ');
		json_array_append_new(mg, json_pack("[s#, s]", s, (int)(sp - s), sp + 1));
	}
	gguf_close(&g);
	json_t *root = json_pack("{s:s, s:o, s:n, s:o, s:n, s:{s:s}, s:{s:s, s:o, s:o}}", "version", "1.0", "added_tokens",
	                         added, "normalizer", "pre_tokenizer", pre, "post_processor", "decoder", "type",
	                         "ByteLevel", "model", "type", "BPE", "vocab", vocab, "merges", mg);
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
	mkdir(dir, 0755);
	snprintf(dir, sizeof dir, "%s/tokenizer.json", sub);
	write_json(dir, root);
	return 0;
}

/* Open tmp/sub/tokenizer.json the way glmrun does: Weights of an HF directory. */
static Tok *open_hf(const char *sub, char *err, size_t len)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
	Weights w;
	memset(&w, 0, sizeof w);
	w.format = WF_HF;
	w.path = dir;
	w.st.dir = dir;
	Tok *t = NULL;
	if (tok_open(&t, &w, err, len))
		return NULL;
	return t;
}

static json_t *split_re(const char *re)
{
	return json_pack("{s:s, s:{s:s}, s:s, s:b}", "type", "Split", "pattern", "Regex", re, "behavior", "Isolated",
	                 "invert", 0);
}

static void test_json_real(void)
{
	static const char *const names[] = {"gpt-2", "deepseek-coder"};
	for (int k = 0; k < 2; k++) {
		json_t *pre;
		if (k == 0)
			pre = json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", 0, "trim_offsets", 1,
			                "use_regex", 1);
		else
			pre = json_pack("{s:s, s:[o, o, o, o, {s:s, s:b}, {s:s, s:b, s:b}]}", "type", "Sequence", "pretokenizers",
			                split_re("[\r\n]"), split_re("\\s?\\p{L}+"), split_re("\\s?\\p{P}+"),
			                split_re("[\xe4\xb8\x80-\xe9\xbe\xa5\xe0\xa0\x80-\xe4\xb8\x80\xea\xb0\x80-\xed\x9f\xbf]+"), "type",
			                "Digits", "individual_digits", 1, "type", "ByteLevel", "add_prefix_space", 0, "use_regex", 0);
		char nm[128], err[1024];
		if (gguf_to_json(names[k], names[k], pre, k == 1)) {
			check(0, names[k], "cannot convert the vocabulary");
			continue;
		}
		Tok *t = open_hf(names[k], err, sizeof err);
		snprintf(nm, sizeof nm, "tokenizer.json from %s opens", names[k]);
		check(t != NULL, nm, "%s", err);
		if (!t)
			continue;
		char path[256];
		snprintf(path, sizeof path, VOCAB "%s.gguf", names[k]);
		Vectors v;
		if (!load_vectors(&v, path)) {
			snprintf(nm, sizeof nm, "tokenizer.json %s (merges as %s)", names[k], k ? "pairs" : "strings");
			check_vectors(t, &v, nm);
		}
		free_vectors(&v);
		tok_close(t);
	}
}

/* The GPT-2 byte-level character of byte b, as UTF-8 into o; returns its length. */
static int bl_char(int b, char *o)
{
	int k = 0, cp = -1;
	for (int x = 0; x < 256; x++) {
		int printable = (x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE;
		int c = printable ? x : 0x100 + k++;
		if (x == b)
			cp = c;
	}
	if (cp < 0x80) {
		o[0] = (char)cp;
		return 1;
	}
	o[0] = (char)(0xC0 | cp >> 6);
	o[1] = (char)(0x80 | (cp & 0x3F));
	return 2;
}

/*
** The tiny tokenizer: ids 0-255 are the bytes' byte-level characters, then merges
**   0 "h e"->256 "he", 1 "l l"->257 "ll", 2 "he ll"->258 "hell", 3 "hell o"->259 "hello",
**   4 "Ġ w"->260 "Ġw", 5 "o r"->261 "or", 6 "Ġw or"->262 "Ġwor",
** 263 "Ġworld" in the vocabulary with no merges that reach it, and added tokens 264 "<|end|>" (special),
** 265 "<user>" (not special), 266 "<s>" (special), numbered after the vocabulary as the Hugging Face
** library numbers them.
*/
static json_t *tiny(json_t *pre, int pairs, int ignore_merges, json_t *post)
{
	json_t *vocab = json_object();
	for (int b = 0; b < 256; b++) {
		char s[4] = {0};
		bl_char(b, s);
		json_object_set_new(vocab, s, json_integer(b));
	}
	static const char *const more[] = {"he", "ll", "hell", "hello", "\xc4\xa0w", "or", "\xc4\xa0wor"};
	for (int i = 0; i < 7; i++)
		json_object_set_new(vocab, more[i], json_integer(256 + i));
	json_object_set_new(vocab, "\xc4\xa0world", json_integer(263));
	static const char *const ml[][2] = {{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"}, {"\xc4\xa0", "w"},
	                                    {"o", "r"}, {"\xc4\xa0w", "or"}};
	json_t *mg = json_array();
	for (int i = 0; i < 7; i++) {
		if (pairs) {
			json_array_append_new(mg, json_pack("[s, s]", ml[i][0], ml[i][1]));
		} else {
			char s[32];
			snprintf(s, sizeof s, "%s %s", ml[i][0], ml[i][1]);
			json_array_append_new(mg, json_string(s));
		}
	}
	json_t *added = json_pack("[{s:i, s:s, s:b}, {s:i, s:s, s:b}, {s:i, s:s, s:b}]", "id", 264, "content", "<|end|>",
	                          "special", 1, "id", 265, "content", "<user>", "special", 0, "id", 266, "content", "<s>",
	                          "special", 1);
	return json_pack("{s:o, s:n, s:o, s:o, s:n, s:{s:s, s:o, s:o, s:b}}", "added_tokens", added, "normalizer",
	                 "pre_tokenizer", pre, "post_processor", post ? post : json_null(), "decoder", "model", "type",
	                 "BPE", "vocab", vocab, "merges", mg, "ignore_merges", ignore_merges);
}

static json_t *bytelevel(int prefix, int use_regex)
{
	return json_pack("{s:s, s:b, s:b, s:b}", "type", "ByteLevel", "add_prefix_space", prefix, "trim_offsets", 1,
	                 "use_regex", use_regex);
}

/* Write a tiny tokenizer as tmp/sub/tokenizer.json and open it (NULL with err on failure). */
static Tok *tiny_open(const char *sub, json_t *j, char *err, size_t len)
{
	char dir[512];
	snprintf(dir, sizeof dir, "%s/%s", tmp, sub);
	mkdir(dir, 0755);
	snprintf(dir, sizeof dir, "%s/tokenizer.json", sub);
	write_json(dir, j);
	return open_hf(sub, err, len);
}

static void test_json_tiny(void)
{
	char err[1024];
	Tok *t = tiny_open("tiny", tiny(bytelevel(0, 1), 0, 0, NULL), err, sizeof err);
	check(t != NULL, "tiny tokenizer.json opens", "%s", err);
	if (t) {
		static const int32_t a[] = {259, 262, 108, 100, 264};
		check_enc(t, "tiny: merges by rank, special token parsed", "hello world<|end|>", 0, 1, a, 5);
		static const int32_t b[] = {259, 262, 108, 100, 60, 124, 101, 110, 100, 124, 62};
		check_enc(t, "tiny: special token text without parse_special", "hello world<|end|>", 0, 0, b, 11);
		static const int32_t c[] = {265, 259};
		check_enc(t, "tiny: a non-special added token splits always", "<user>hello", 0, 0, c, 2);
		check_dec(t, "tiny: decode with special", a, 5, 1, "hello world<|end|>");
		check_dec(t, "tiny: decode without special", a, 5, 0, "hello world");
		check_dec(t, "tiny: decode a non-special added token", c, 2, 0, "<user>hello");
		static const int32_t d[] = {259};
		check_enc(t, "tiny: no post-processor, no BOS", "hello", 1, 0, d, 1);
		/* invalid UTF-8 is kept as bytes */
		static const int32_t e[] = {104, 0xff, 0xfe, 105};
		check_enc(t, "tiny: invalid UTF-8 bytes become byte tokens", "h\xff\xfei", 0, 0, e, 4);
		check_dec(t, "tiny: and decode back", e, 4, 0, "h\xff\xfei");
		tok_close(t);
	}
	t = tiny_open("tiny-pairs", tiny(bytelevel(0, 1), 1, 0, NULL), err, sizeof err);
	if (t) {
		static const int32_t a[] = {259, 262, 108, 100, 264};
		check_enc(t, "tiny: merges given as pairs", "hello world<|end|>", 0, 1, a, 5);
		tok_close(t);
	} else {
		check(0, "tiny: merges given as pairs", "%s", err);
	}
	t = tiny_open("tiny-ignore", tiny(bytelevel(0, 1), 0, 1, NULL), err, sizeof err);
	if (t) {
		static const int32_t a[] = {259, 263};
		check_enc(t, "tiny: ignore_merges takes a whole piece that is a token", "hello world", 0, 0, a, 2);
		tok_close(t);
	} else {
		check(0, "tiny: ignore_merges", "%s", err);
	}
	t = tiny_open("tiny-prefix", tiny(bytelevel(1, 1), 0, 0, NULL), err, sizeof err);
	if (t) {
		static const int32_t a[] = {32, 259, 262, 108, 100};
		check_enc(t, "tiny: ByteLevel add_prefix_space", "hello world", 0, 0, a, 5);
		tok_close(t);
	} else {
		check(0, "tiny: add_prefix_space", "%s", err);
	}
	/* Split with a String pattern: Removed drops the spaces, MergedWithNext keeps them on the next word */
	json_t *rm = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type", "Split",
	                       "pattern", "String", " ", "behavior", "Removed", "invert", 0, bytelevel(0, 0));
	t = tiny_open("tiny-removed", tiny(rm, 0, 0, NULL), err, sizeof err);
	if (t) {
		static const int32_t a[] = {259, 119, 261, 108, 100};
		check_enc(t, "tiny: Split String Removed", "hello world", 0, 0, a, 5);
		tok_close(t);
	} else {
		check(0, "tiny: Split String Removed", "%s", err);
	}
	json_t *mn = json_pack("{s:s, s:[{s:s, s:{s:s}, s:s, s:b}, {s:s, s:b}, o]}", "type", "Sequence", "pretokenizers", "type",
	                       "Split", "pattern", "Regex", " +", "behavior", "MergedWithNext", "invert", 0, "type", "Digits",
	                       "individual_digits", 1, bytelevel(0, 0));
	t = tiny_open("tiny-next", tiny(mn, 0, 0, NULL), err, sizeof err);
	if (t) {
		/* " world" stays one piece; "he12" splits into he 1 2 */
		static const int32_t a[] = {259, 262, 108, 100, 256, 49, 50};
		check_enc(t, "tiny: Split MergedWithNext and Digits", "hello worldhe12", 0, 0, a, 7);
		tok_close(t);
	} else {
		check(0, "tiny: Split MergedWithNext", "%s", err);
	}
	/* BOS from a TemplateProcessing post-processor, EOS from tokenizer_config.json */
	json_t *post = json_pack("{s:s, s:[{s:{s:s, s:i}}, {s:{s:s, s:i}}]}", "type", "TemplateProcessing", "single",
	                         "SpecialToken", "id", "<s>", "type_id", 0, "Sequence", "id", "A", "type_id", 0);
	char dir[512];
	snprintf(dir, sizeof dir, "%s/tiny-bos", tmp);
	mkdir(dir, 0755);
	write_json("tiny-bos/tokenizer_config.json", json_pack("{s:s, s:{s:s}}", "bos_token", "<s>", "eos_token", "content",
	                                                       "<|end|>"));
	t = tiny_open("tiny-bos", tiny(bytelevel(0, 1), 0, 0, post), err, sizeof err);
	if (t) {
		static const int32_t a[] = {266, 259};
		check_enc(t, "tiny: post-processor adds BOS", "hello", 1, 0, a, 2);
		check(tok_bos(t) == 266 && tok_eos(t) == 264 && tok_is_eog(t, 264), "tiny: BOS/EOS from the configs",
		      "bos %d eos %d", (int)tok_bos(t), (int)tok_eos(t));
		tok_close(t);
	} else {
		check(0, "tiny: post-processor", "%s", err);
	}
}

/* Refusals name what is not supported, in one line. */
static void test_refusals(void)
{
	static const struct {
		const char *name, *json, *want;
	} cases[] = {
		{"WordPiece model", "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}", "'WordPiece' is not supported"},
		{"Metaspace pre-tokenizer",
		 "{\"pre_tokenizer\":{\"type\":\"Metaspace\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		 "'Metaspace' is not supported"},
		{"Lowercase normalizer",
		 "{\"normalizer\":{\"type\":\"Lowercase\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		 "normalizer 'Lowercase' is not supported"},
		{"BPE without ByteLevel", "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}", "without ByteLevel"},
		{"bad regex",
		 "{\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(\"},\"behavior\":\"Isolated\"},"
		 "\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[]}}",
		 "does not compile"},
		{"not JSON", "{\"model\":", "line 1"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
		char sub[32], path[512], err[1024] = "";
		snprintf(sub, sizeof sub, "bad%zu", i);
		snprintf(path, sizeof path, "%s/%s", tmp, sub);
		mkdir(path, 0755);
		snprintf(path, sizeof path, "%s/%s/tokenizer.json", tmp, sub);
		FILE *f = fopen(path, "w");
		if (f) {
			fputs(cases[i].json, f);
			fclose(f);
		}
		Tok *t = open_hf(sub, err, sizeof err);
		char nm[128];
		snprintf(nm, sizeof nm, "tokenizer.json refused: %s", cases[i].name);
		check(!t && strstr(err, cases[i].want) && !strchr(err, '\n'), nm, "got '%s'", err);
		tok_close(t);
	}
	/* a GGUF tokenizer model that is not implemented */
	GgufWriter *w = gguf_writer_new();
	const char *toks[] = {"[UNK]", "a"};
	gguf_writer_str(w, "tokenizer.ggml.model", "bert");
	gguf_writer_arr_str(w, "tokenizer.ggml.tokens", toks, 2);
	char path[512], err[1024] = "";
	snprintf(path, sizeof path, "%s/bert.gguf", tmp);
	int ok = !gguf_writer_write(w, path, err, sizeof err);
	gguf_writer_free(w);
	Gguf g;
	Tok *t = NULL;
	if (ok && !gguf_open(&g, path, err, sizeof err)) {
		ok = tok_open_gguf(&t, &g, NULL, err, sizeof err) == -1 && strstr(err, "tokenizer model 'bert' is not supported");
		gguf_close(&g);
	}
	check(ok, "GGUF tokenizer model bert is refused by name", "got '%s'", err);
	tok_close(t);
}

static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb, (void)flag, (void)ftw;
	return remove(p);
}

int main(void)
{
	strcpy(tmp, "/tmp/test_tok.XXXXXX");
	if (!mkdtemp(tmp)) {
		printf("FAIL - mkdtemp\n");
		return 1;
	}
	test_gguf_vocabs();
	test_specials();
	test_stream();
	test_pretokenizers();
	test_json_real();
	test_json_tiny();
	test_refusals();
	nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
	return check_done();
}
