/*
** runtime/formats/tok_pre.c — pre-tokenizers: the regex splits that cut text into pieces before BPE.
**
** The regexes are the Hugging Face tokenizer.json originals (llama.cpp's adapted copies where only
** llama.cpp has them), compiled by PCRE2 with UTF and UCP and applied like a Hugging Face Sequence of
** Split(Isolated): every match and every gap between matches becomes a piece, and each later regex re-splits
** the pieces the earlier ones left. One difference is smoothed over: the Hugging Face library runs the
** regexes with Oniguruma, whose \s is Unicode White_Space, while PCRE2's also takes U+180E; \s and \S are
** rewritten to the White_Space set so both agree.
*/
#include "tok_impl.h"

#include <stdlib.h>
#include <string.h>

#define R_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"
#define R_LLAMA3 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN2 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_QWEN35 "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_DS3 "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_GPT4O "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define R_TEKKEN "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
/* llama.cpp's own (no tokenizer.json original in reach): GPT-2 without the final \s+, which changes
** nothing since unmatched gaps become pieces too. */
#define R_GPT2_LCPP "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
/* Character classes of the tokenizer.json files, written with \x{} escapes: CJK, and DeepSeek-LLM's
** letters (cased letters of many scripts) and punctuation (ASCII, fullwidth, quotes, CJK). */
#define R_CJK_DS "[\\x{4E00}-\\x{9FA5}\\x{800}-\\x{4E00}\\x{AC00}-\\x{D7FF}]+"
#define R_DS3_CJK "[\\x{4E00}-\\x{9FA5}\\x{3040}-\\x{309F}\\x{30A0}-\\x{30FF}]+"
#define R_DSLLM_LETTERS \
	"\\s?[" "A-Za-z\\x{B5}\\x{C0}-\\x{D6}\\x{D8}-\\x{F6}\\x{F8}-\\x{1BA}\\x{1BC}-\\x{1BF}\\x{1C4}-\\x{293}" \
	"\\x{295}-\\x{2AF}\\x{370}-\\x{373}\\x{376}\\x{377}\\x{37B}-\\x{37D}\\x{37F}\\x{386}\\x{388}-" \
	"\\x{38A}\\x{38C}\\x{38E}-\\x{3A1}\\x{3A3}-\\x{3F5}\\x{3F7}-\\x{481}\\x{48A}-\\x{52F}\\x{531}-" \
	"\\x{556}\\x{10A0}-\\x{10C5}\\x{13A0}-\\x{13F5}\\x{13F8}-\\x{13FD}\\x{1C90}-\\x{1CBA}\\x{1CBD}-" \
	"\\x{1CBF}\\x{1D00}-\\x{1D2B}\\x{1D6B}-\\x{1D77}\\x{1D79}-\\x{1D9A}\\x{1E00}-\\x{1F15}\\x{1F18}-" \
	"\\x{1F1D}\\x{1F20}-\\x{1F45}\\x{1F48}-\\x{1F4D}\\x{1F50}-\\x{1F57}\\x{1F59}\\x{1F5B}\\x{1F5D}" \
	"\\x{1F5F}-\\x{1F7D}\\x{1F80}-\\x{1FB4}\\x{1FB6}-\\x{1FBC}\\x{1FBE}\\x{1FC2}-\\x{1FC4}\\x{1FC6}-" \
	"\\x{1FCC}\\x{1FD0}-\\x{1FD3}\\x{1FD6}-\\x{1FDB}\\x{1FE0}-\\x{1FEC}\\x{1FF2}-\\x{1FF4}\\x{1FF6}-" \
	"\\x{1FFC}\\x{2102}\\x{2107}\\x{210A}-\\x{2113}\\x{2115}\\x{2119}-\\x{211D}\\x{2124}\\x{2126}" \
	"\\x{2128}\\x{212A}-\\x{212D}\\x{212F}-\\x{2134}\\x{2139}\\x{213C}-\\x{213F}\\x{2145}-\\x{2149}" \
	"\\x{214E}\\x{2183}\\x{2184}\\x{2C00}-\\x{2C7B}\\x{2C7E}-\\x{2CE4}\\x{2CEB}-\\x{2CEE}\\x{2CF2}" \
	"\\x{2CF3}\\x{A640}-\\x{A66D}\\x{A680}-\\x{A69B}\\x{A722}-\\x{A76F}\\x{A771}-\\x{A787}\\x{A78B}-" \
	"\\x{A78E}\\x{AB70}-\\x{ABBF}\\x{FB00}-\\x{FB06}\\x{FB13}-\\x{FB17}\\x{FF21}-\\x{FF3A}\\x{FF41}-" \
	"\\x{FF5A}\\x{10400}-\\x{1044F}\\x{104B0}-\\x{104D3}\\x{104D8}-\\x{104FB}\\x{10C80}-\\x{10CB2}" \
	"\\x{10CC0}-\\x{10CF2}\\x{118A0}-\\x{118DF}\\x{1E900}-\\x{1E943}" "]+"
#define R_DSLLM_PUNCT "\\s?[!-/:-~\\x{FF01}-\\x{FF0F}\\x{FF1A}-\\x{FF5E}\\x{2018}-\\x{201F}\\x{3000}-\\x{3002}]+"

enum { PF_IGNORE_MERGES = 1, PF_ADD_BOS = 2, PF_NO_BOS = 4 };

/* A GGUF pre-tokenizer: the names that select it (space-separated), what it changes, its regexes. */
typedef struct {
	const char *names;
	int flags;
	const char *re[6];
} PreDef;

static const PreDef predefs[] = {
	{"default", 0, {"[\\p{P}\\$\\+<=>\\^~\\|]+", R_GPT2_LCPP, "\\p{N}+", "[0-9][0-9][0-9]"}},
	{"gpt-2 gpt2 phi-2 jina-es jina-de gigachat jina-v2-es jina-v2-de a.x-4.0 mellum modern-bert jina-v1-en "
	 "jina-v2-code roberta-bpe exaone4 mpt olmo jais trillion granite-docling", 0, {R_GPT2}},
	{"llama3 llama-v3 llama-bpe falcon3 falcon-h1 pixtral midm-2.0 lfm2", PF_IGNORE_MERGES | PF_ADD_BOS, {R_LLAMA3}},
	{"dbrx smaug-bpe", 0, {R_LLAMA3}},
	{"glm4 chatglm-bpe", PF_NO_BOS, {R_LLAMA3}},
	{"qwen2 deepseek-r1-qwen megrez kormo stablelm2 hunyuan", 0, {R_QWEN2}},
	{"qwen35", 0, {R_QWEN35}},
	{"deepseek-v3 hunyuan-dense joyai-llm", 0, {"\\p{N}{1,3}", R_DS3_CJK, R_DS3}},
	{"deepseek-llm", 0, {"[\\r\\n]", R_DSLLM_LETTERS, R_DSLLM_PUNCT, "\\s+$", R_CJK_DS, "\\p{N}+"}},
	{"deepseek-coder", 0, {"[\\r\\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", R_CJK_DS, "\\p{N}"}},
	{"starcoder refact command-r smollm codeshell exaone minerva-7b", 0, {"\\p{N}", R_GPT2_LCPP}},
	{"falcon", 0, {"[\\p{P}\\$\\+<=>\\^~\\|`]+", R_GPT2_LCPP, "[0-9][0-9][0-9]"}},
	{"gpt-4o llama4 kanana2", 0, {R_GPT4O}},
	{"tekken", PF_IGNORE_MERGES | PF_ADD_BOS, {R_TEKKEN}},
};

/* Whether name is one of the space-separated words of list. */
static int name_in(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *p = list; *p;) {
		const char *e = strchr(p, ' ');
		size_t w = e ? (size_t)(e - p) : strlen(p);
		if (w == n && !memcmp(p, name, n))
			return 1;
		if (!e)
			break;
		p = e + 1;
	}
	return 0;
}

/* Unicode White_Space, Oniguruma's \s: the set \s and \S are rewritten to. */
#define WS_SET "\\t-\\r\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* Rewrite \s (and \S outside a class) to the White_Space set so PCRE2 agrees with Oniguruma. Escapes are
** copied whole; \Q..\E and nested POSIX classes are not expected in tokenizer regexes. */
static char *rewrite_ws(const char *re)
{
	size_t n = strlen(re), cap = n * 8 + 64, o = 0;
	char *out = malloc(cap);
	if (!out)
		return NULL;
	int in_class = 0;
	for (size_t i = 0; i < n; i++) {
		char c = re[i];
		if (o + sizeof WS_SET + 8 > cap) {
			cap *= 2;
			char *q = realloc(out, cap);
			if (!q) {
				free(out);
				return NULL;
			}
			out = q;
		}
		if (c == '\\' && i + 1 < n) {
			char d = re[++i];
			if (d == 's') {
				o += (size_t)sprintf(out + o, in_class ? "%s" : "[%s]", WS_SET);
			} else if (d == 'S' && !in_class) {
				o += (size_t)sprintf(out + o, "[^%s]", WS_SET);
			} else {
				out[o++] = '\\';
				out[o++] = d;
			}
			continue;
		}
		if (!in_class && c == '[') {
			in_class = 1;
			out[o++] = c;
			/* a ']' right after '[' or '[^' is a literal */
			if (i + 1 < n && re[i + 1] == '^')
				out[o++] = re[++i];
			if (i + 1 < n && re[i + 1] == ']')
				out[o++] = re[++i];
			continue;
		}
		if (in_class && c == ']')
			in_class = 0;
		out[o++] = c;
	}
	out[o] = 0;
	return out;
}

/* Append a Split step (regex NULL: none, for a ByteLevel step that only adds the prefix space). */
int tok_pre_add(Tok *t, const char *regex, int behavior, int invert, int prefix_space, char *err, size_t len)
{
	TokPre *p = realloc(t->pre, (size_t)(t->npre + 1) * sizeof *p);
	if (!p)
		return seterr(err, len, "out of memory");
	t->pre = p;
	TokPre *s = &t->pre[t->npre];
	memset(s, 0, sizeof *s);
	s->behavior = behavior;
	s->invert = invert;
	s->prefix_space = prefix_space;
	if (regex) {
		char *rw = rewrite_ws(regex);
		if (!rw)
			return seterr(err, len, "out of memory");
		int ec;
		PCRE2_SIZE eo;
		s->re = pcre2_compile((PCRE2_SPTR)rw, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
		free(rw);
		if (!s->re) {
			PCRE2_UCHAR msg[160];
			pcre2_get_error_message(ec, msg, sizeof msg);
			return seterr(err, len, "pre-tokenizer regex /%.60s/ does not compile at offset %zu: %s", regex,
			              (size_t)eo, (char *)msg);
		}
		pcre2_jit_compile(s->re, PCRE2_JIT_COMPLETE); /* the interpreter runs it when JIT is unavailable */
	}
	t->npre++;
	return 0;
}

/* A Hugging Face ByteLevel pre-tokenizer: the optional prefix space, then (use_regex) GPT-2's split. */
int tok_pre_bytelevel(Tok *t, int use_regex, int prefix_space, char *err, size_t len)
{
	if (!use_regex && !prefix_space)
		return 0;
	return tok_pre_add(t, use_regex ? R_GPT2 : NULL, TSB_ISOLATED, 0, prefix_space, err, len);
}

/* Set up the pre-tokenizer llama.cpp selects by `tokenizer.ggml.pre`, with its flags; unknown names are
** refused with the list of known ones. */
int tok_pre_named(Tok *t, const char *name, char *err, size_t len)
{
	for (size_t i = 0; i < sizeof predefs / sizeof *predefs; i++) {
		const PreDef *d = &predefs[i];
		if (!name_in(d->names, name))
			continue;
		snprintf(t->pre_name, sizeof t->pre_name, "%s", name);
		for (int k = 0; k < 6 && d->re[k]; k++)
			if (tok_pre_add(t, d->re[k], TSB_ISOLATED, 0, 0, err, len))
				return -1;
		if (d->flags & PF_IGNORE_MERGES)
			t->ignore_merges = 1;
		if (d->flags & PF_ADD_BOS)
			t->add_bos = 1;
		if (d->flags & PF_NO_BOS)
			t->bos = -1;
		return 0;
	}
	return seterr(err, len, "tokenizer.ggml.pre '%s' is not supported (supported: default, gpt-2, llama3/llama-bpe, "
	              "glm4/chatglm-bpe, qwen2, qwen35, deepseek-v3, deepseek-llm, deepseek-coder, starcoder, falcon, "
	              "gpt-4o, tekken and their aliases)", name);
}

/* The compiled regexes (JIT code included) belong to the Tok. */
void tok_pre_free(Tok *t)
{
	for (int i = 0; i < t->npre; i++)
		pcre2_code_free(t->pre[i].re);
	free(t->pre);
	t->pre = NULL;
	t->npre = 0;
}

/* ---- applying the steps ---- */

/* Length of the valid UTF-8 character at s (n bytes left), or 0 when the bytes there are not one. */
static int utf8_valid_len(const unsigned char *s, size_t n)
{
	int r = tok_utf8_check(s, n);
	return r > 0 ? r : 0;
}

/* Append a piece; empty pieces are dropped (the Hugging Face library filters them too). */
static int push_piece(TokPieces *ps, TokPiece p)
{
	if (p.len == 0)
		return 0;
	if (ps->n == ps->cap) {
		size_t cap = ps->cap ? ps->cap * 2 : 64;
		TokPiece *q = realloc(ps->p, cap * sizeof *q);
		if (!q)
			return -1;
		ps->p = q;
		ps->cap = cap;
	}
	ps->p[ps->n++] = p;
	return 0;
}

/* Per-call matching state: PCRE2 match data, and a larger JIT stack made only when a match needs one. */
typedef struct {
	pcre2_match_data *md;
	pcre2_match_context *mc;
	pcre2_jit_stack *js;
} Matcher;

/* Find the next match of re in s[0..n) at or after start; 1 with [*ms, *me), 0 for none, -1 on error. */
static int next_match(Matcher *m, const pcre2_code *re, const char *s, size_t n, size_t start, size_t *ms,
                      size_t *me)
{
	for (;;) {
		int rc = pcre2_match(re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, m->md, m->mc);
		if (rc == PCRE2_ERROR_NOMATCH)
			return 0;
		if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !m->js) {
			m->mc = pcre2_match_context_create(NULL);
			m->js = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, NULL);
			if (!m->mc || !m->js)
				return -1;
			pcre2_jit_stack_assign(m->mc, NULL, m->js);
			continue;
		}
		if (rc < 0)
			return -1;
		PCRE2_SIZE *ov = pcre2_get_ovector_pointer(m->md);
		*ms = ov[0];
		*me = ov[1];
		return 1;
	}
}

/* A span of a piece and whether the regex matched it (after invert). */
typedef struct {
	size_t s, e;
	int match;
} Span;

/* Split one piece by step st into out, with the Hugging Face Split behaviours. Empty matches produce no
** piece but still cut the gap they fall in (as the Hugging Face library does). */
static int split_piece(Matcher *m, const TokPre *st, const char *s, TokPiece pc, TokPieces *out, Span **sp,
                       size_t *spcap)
{
	size_t n = pc.len, start = 0, prev = 0, ns = 0;
#define ADD_SPAN(a, b, mt)                                                                                   \
	do {                                                                                                 \
		if (ns == *spcap) {                                                                          \
			size_t c2 = *spcap ? *spcap * 2 : 64;                                                \
			Span *q = realloc(*sp, c2 * sizeof *q);                                              \
			if (!q)                                                                              \
				return -1;                                                                   \
			*sp = q;                                                                             \
			*spcap = c2;                                                                         \
		}                                                                                            \
		(*sp)[ns].s = (a), (*sp)[ns].e = (b), (*sp)[ns].match = (mt) != st->invert, ns++;            \
	} while (0)
	while (start <= n) {
		size_t ms, me;
		int r = next_match(m, st->re, s, n, start, &ms, &me);
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		if (ms > prev)
			ADD_SPAN(prev, ms, 0);
		if (me == ms) {
			prev = ms;
			if (ms >= n)
				break;
			int cl = utf8_valid_len((const unsigned char *)s + ms, n - ms);
			start = ms + (cl ? (size_t)cl : 1);
			continue;
		}
		ADD_SPAN(ms, me, 1);
		prev = start = me;
	}
	if (prev < n)
		ADD_SPAN(prev, n, 0);
#undef ADD_SPAN
	/* behaviours, as tokenizers/src/tokenizer/normalizer.rs applies them to the match list */
	Span *v = *sp;
	size_t k = 0;
	int prev_match = 0;
	switch (st->behavior) {
	case TSB_ISOLATED:
		k = ns;
		break;
	case TSB_REMOVED:
		for (size_t i = 0; i < ns; i++)
			if (!v[i].match)
				v[k++] = v[i];
		break;
	case TSB_MERGED_PREV:
		for (size_t i = 0; i < ns; i++) {
			if (v[i].match && !prev_match && k)
				v[k - 1].e = v[i].e;
			else
				v[k++] = v[i];
			prev_match = v[i].match;
		}
		break;
	case TSB_MERGED_NEXT:
		/* walk backwards: a match joins the piece after it */
		for (size_t i = ns; i-- > 0;) {
			Span cur = v[i];
			if (cur.match && !prev_match && k)
				v[ns - k].s = cur.s;
			else {
				k++;
				v[ns - k] = cur;
			}
			prev_match = cur.match;
		}
		memmove(v, v + ns - k, k * sizeof *v);
		break;
	case TSB_CONTIGUOUS:
		for (size_t i = 0; i < ns; i++) {
			if (v[i].match == prev_match && k)
				v[k - 1].e = v[i].e;
			else
				v[k++] = v[i];
			prev_match = v[i].match;
		}
		break;
	}
	for (size_t i = 0; i < k; i++) {
		TokPiece q = {pc.off + v[i].s, (uint32_t)(v[i].e - v[i].s), pc.buf, 0};
		if (push_piece(out, q))
			return -1;
	}
	return 0;
}

/* Append ' ' and a piece's bytes to the scratch buffer (which may hold the piece itself, so its address
** is taken after growing); returns the offset of the copy, or -1. */
static int64_t scratch_prefix(TokPieces *ps, const char *text, TokPiece pc)
{
	size_t need = ps->slen + 1 + pc.len;
	if (need > ps->scap) {
		size_t cap = ps->scap ? ps->scap : 256;
		while (cap < need)
			cap *= 2;
		char *q = realloc(ps->scratch, cap);
		if (!q)
			return -1;
		ps->scratch = q;
		ps->scap = cap;
	}
	const char *src = pc.buf ? ps->scratch + pc.off : text + pc.off;
	int64_t at = (int64_t)ps->slen;
	ps->scratch[ps->slen] = ' ';
	memmove(ps->scratch + ps->slen + 1, src, pc.len);
	ps->slen = need;
	return at;
}

/*
** Cut one raw fragment into pieces for BPE. Invalid UTF-8 is first set apart as raw pieces (PCRE2 needs
** valid UTF-8; the bytes still reach BPE, so nothing is lost); then every step re-splits the others.
*/
int tok_pretokenize(const Tok *t, const char *text, size_t n, TokPieces *out)
{
	TokPieces a = {0}, b = {0};
	Span *sp = NULL;
	size_t spcap = 0;
	Matcher m = {0};
	int rc = -1;
	out->n = 0;
	out->slen = 0;
	/* valid runs and invalid runs */
	for (size_t i = 0; i < n;) {
		size_t j = i;
		int valid = utf8_valid_len((const unsigned char *)text + i, n - i) > 0;
		while (j < n) {
			int cl = utf8_valid_len((const unsigned char *)text + j, n - j);
			if ((cl > 0) != valid)
				break;
			j += cl > 0 ? (size_t)cl : 1;
		}
		if (j - i > UINT32_MAX)
			goto done;
		TokPiece p = {i, (uint32_t)(j - i), 0, (uint8_t)!valid};
		if (push_piece(&a, p))
			goto done;
		i = j;
	}
	if (t->npre) {
		m.md = pcre2_match_data_create(1, NULL);
		if (!m.md)
			goto done;
	}
	/* the scratch buffer lives in out, shared by all steps */
	b.scratch = out->scratch, b.scap = out->scap, b.slen = 0;
	out->scratch = NULL;
	for (int k = 0; k < t->npre; k++) {
		const TokPre *st = &t->pre[k];
		b.n = 0;
		for (size_t i = 0; i < a.n; i++) {
			TokPiece pc = a.p[i];
			if (pc.raw) {
				if (push_piece(&b, pc))
					goto done;
				continue;
			}
			const char *s = pc.buf ? b.scratch + pc.off : text + pc.off;
			if (st->prefix_space && s[0] != ' ') {
				int64_t at = scratch_prefix(&b, text, pc);
				if (at < 0)
					goto done;
				pc.off = (uint64_t)at, pc.len++, pc.buf = 1;
				s = b.scratch + pc.off;
			}
			if (!st->re) {
				if (push_piece(&b, pc))
					goto done;
			} else if (split_piece(&m, st, s, pc, &b, &sp, &spcap)) {
				goto done;
			}
		}
		TokPieces tmp = a;
		a.p = b.p, a.n = b.n, a.cap = b.cap;
		b.p = tmp.p, b.n = 0, b.cap = tmp.cap;
	}
	free(out->p);
	out->p = a.p, out->n = a.n, out->cap = a.cap;
	out->scratch = b.scratch, out->scap = b.scap, out->slen = b.slen;
	a.p = NULL;
	b.scratch = NULL;
	rc = 0;
done:
	free(a.p);
	free(b.p);
	free(b.scratch);
	free(sp);
	pcre2_match_data_free(m.md);
	pcre2_match_context_free(m.mc);
	pcre2_jit_stack_free(m.js);
	return rc;
}
