/*
** runtime/formats/jinja_lib.c — the Jinja built-ins chat templates call: filters, tests, str and dict methods,
** globals (range, namespace, dict, raise_exception, strftime_now), JSON output (transformers' tojson:
** json.dumps with ensure_ascii=False by default), Python's float repr, UTF-8 and case helpers.
**
** Behaviour is jinja2's and Python's where templates can see it: lengths, indices and slices count code
** points; strip/split/trim use Python's Unicode whitespace; sort, unique, min and max ignore case unless
** told not to; select/reject take test names. Case mapping covers ASCII, Latin-1, Latin Extended-A, Greek
** and Cyrillic (and ß upper-cases to SS); other scripts keep their case. Facts from the jinja2 and
** Python documentation; no code from either.
*/
#include "jinja_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8, whitespace, case ---- */

unsigned jj_cp_at(const char *s, size_t n, size_t *len)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned c = u[0];
	size_t k = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
	if (k > n)
		k = 1;
	for (size_t j = 1; j < k; j++)
		if ((u[j] & 0xc0) != 0x80)
			k = 1;
	*len = k;
	if (k == 1)
		return c;
	unsigned v = c & (0x7fu >> k);
	for (size_t j = 1; j < k; j++)
		v = v << 6 | (u[j] & 0x3f);
	return v;
}

int jj_isspace(unsigned c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f) || c == 0x85 || c == 0xa0 ||
	       c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 || c == 0x202f ||
	       c == 0x205f || c == 0x3000;
}

size_t jj_utf8_len(const char *s, size_t n)
{
	size_t k = 0;
	for (size_t i = 0, l; i < n; i += l, k++)
		jj_cp_at(s + i, n - i, &l);
	return k;
}

size_t jj_utf8_off(const char *s, size_t n, int64_t cp)
{
	size_t i = 0, l;
	for (int64_t k = 0; k < cp && i < n; k++, i += l)
		jj_cp_at(s + i, n - i, &l);
	return i;
}

static unsigned up_cp(unsigned c)
{
	if (c < 0x80)
		return c >= 'a' && c <= 'z' ? c - 32 : c;
	if (c == 0xb5)
		return 0x39c;
	if (c == 0xff)
		return 0x178;
	if (c >= 0xe0 && c <= 0xfe && c != 0xf7)
		return c - 32;
	if (c >= 0x100 && c <= 0x17f) {
		if (c == 0x131)
			return 'I';
		if (c == 0x17f)
			return 'S';
		if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x178)
			return c;
		if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
			return c & 1 ? c : c - 1;
		return c & 1 ? c - 1 : c;
	}
	if (c == 0x3c2)
		return 0x3a3;
	if (c >= 0x3b1 && c <= 0x3c9)
		return c - 32;
	if (c >= 0x430 && c <= 0x44f)
		return c - 32;
	if (c >= 0x450 && c <= 0x45f)
		return c - 80;
	return c;
}

static unsigned low_cp(unsigned c)
{
	if (c < 0x80)
		return c >= 'A' && c <= 'Z' ? c + 32 : c;
	if (c >= 0xc0 && c <= 0xde && c != 0xd7)
		return c + 32;
	if (c == 0x178)
		return 0xff;
	if (c >= 0x100 && c <= 0x17f) {
		if (c == 0x130)
			return 'i';
		if (c == 0x138 || c == 0x149 || c == 0x17f || c == 0x131)
			return c;
		if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
			return c & 1 ? c + 1 : c;
		return c & 1 ? c : c + 1;
	}
	if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2)
		return c + 32;
	if (c >= 0x410 && c <= 0x42f)
		return c + 32;
	if (c >= 0x400 && c <= 0x40f)
		return c + 80;
	return c;
}

static int is_cased(unsigned c)
{
	return up_cp(c) != c || low_cp(c) != c || c == 0xdf;
}

static void put_cp(JR *r, JBuf *b, unsigned v)
{
	char o[4];
	size_t k;
	if (v < 0x80)
		o[0] = (char)v, k = 1;
	else if (v < 0x800)
		o[0] = (char)(0xc0 | v >> 6), o[1] = (char)(0x80 | (v & 0x3f)), k = 2;
	else if (v < 0x10000)
		o[0] = (char)(0xe0 | v >> 12), o[1] = (char)(0x80 | (v >> 6 & 0x3f)), o[2] = (char)(0x80 | (v & 0x3f)), k = 3;
	else
		o[0] = (char)(0xf0 | v >> 18), o[1] = (char)(0x80 | (v >> 12 & 0x3f)), o[2] = (char)(0x80 | (v >> 6 & 0x3f)),
		o[3] = (char)(0x80 | (v & 0x3f)), k = 4;
	jb_add(r, b, o, k);
}

/* Append code point c upper- (up) or lower-cased; invalid bytes pass through. */
static void put_case(JR *r, JBuf *b, const char *s, size_t l, unsigned c, int up)
{
	if (l == 1 && c >= 0x80) {
		jb_add(r, b, s, 1);
		return;
	}
	if (up && c == 0xdf) {
		jb_add(r, b, "SS", 2);
		return;
	}
	put_cp(r, b, up ? up_cp(c) : low_cp(c));
}

/* mode 0 lower, 1 upper, 2 capitalize (first upper, rest lower), 3 str.title, 4 jinja's title filter. */
static JVal recase(JR *r, JVal v, int mode)
{
	v = jv_to_str(r, v);
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	int prev_cased = 0, word_start = 1;
	for (size_t i = 0, l; i < v.u.s.n; i += l) {
		unsigned c = jj_cp_at(v.u.s.s + i, v.u.s.n - i, &l);
		int up = mode == 1;
		if (mode == 2)
			up = i == 0;
		else if (mode == 3)
			up = !prev_cased;
		else if (mode == 4) {
			int delim = jj_isspace(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
			up = word_start && !delim;
			word_start = delim;
		}
		put_case(r, &b, v.u.s.s + i, l, c, up);
		prev_cased = is_cased(c);
	}
	return (JVal){.t = JV_STR, .u.s = {b.s, b.n}};
}

JVal jj_lower(JR *r, JVal s)
{
	return recase(r, s, 0);
}

/* ---- numbers ---- */

void jj_float_repr(double f, char *buf, size_t len)
{
	if (isnan(f)) {
		snprintf(buf, len, "nan");
		return;
	}
	if (isinf(f)) {
		snprintf(buf, len, f < 0 ? "-inf" : "inf");
		return;
	}
	if (f == 0) {
		snprintf(buf, len, signbit(f) ? "-0.0" : "0.0");
		return;
	}
	char tmp[48];
	for (int p = 1; p <= 17; p++) {
		snprintf(tmp, sizeof tmp, "%.*e", p - 1, f);
		if (strtod(tmp, NULL) == f)
			break;
	}
	char dig[24];
	int nd = 0, neg = tmp[0] == '-';
	const char *q = tmp + neg;
	for (; *q && *q != 'e'; q++)
		if (*q != '.' && nd < 20)
			dig[nd++] = *q;
	int e = atoi(q + 1);
	while (nd > 1 && dig[nd - 1] == '0')
		nd--;
	char out[64];
	int k = 0;
	if (neg)
		out[k++] = '-';
	if (e >= -4 && e < 16) {
		if (e >= 0) {
			for (int i = 0; i <= e; i++)
				out[k++] = i < nd ? dig[i] : '0';
			out[k++] = '.';
			if (nd > e + 1)
				for (int i = e + 1; i < nd; i++)
					out[k++] = dig[i];
			else
				out[k++] = '0';
		} else {
			out[k++] = '0', out[k++] = '.';
			for (int i = 0; i < -e - 1; i++)
				out[k++] = '0';
			for (int i = 0; i < nd; i++)
				out[k++] = dig[i];
		}
		out[k] = 0;
	} else {
		out[k++] = dig[0];
		if (nd > 1) {
			out[k++] = '.';
			for (int i = 1; i < nd; i++)
				out[k++] = dig[i];
		}
		snprintf(out + k, sizeof out - (size_t)k, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
	}
	snprintf(buf, len, "%s", out);
}

/* ---- arguments ---- */

typedef struct {
	JVal *args;
	int nargs;
	const char **kwn;
	JVal *kwv;
	int nkw;
} Args;

/* Argument i by position or by name; *given says whether it was passed. */
static JVal arg(const Args *a, int i, const char *name, JVal dflt, int *given)
{
	if (given)
		*given = 1;
	if (i >= 0 && i < a->nargs)
		return a->args[i];
	for (int k = 0; k < a->nkw; k++)
		if (name && !strcmp(a->kwn[k], name))
			return a->kwv[k];
	if (given)
		*given = 0;
	return dflt;
}

static int64_t arg_int(JR *r, const Args *a, int i, const char *name, int64_t dflt, int line)
{
	JVal v = arg(a, i, name, jv_int(dflt), NULL);
	if (v.t == JV_NONE)
		return dflt;
	if (v.t != JV_INT && v.t != JV_BOOL)
		jj_fail(&r->c, line, "argument '%s' must be an integer, not %s", name, jv_type(v));
	return v.t == JV_INT ? v.u.i : v.u.b;
}

static JVal arg_str(JR *r, const Args *a, int i, const char *name, int line)
{
	int given;
	JVal v = arg(a, i, name, jv_none(), &given);
	if (!given || v.t != JV_STR)
		jj_fail(&r->c, line, "argument '%s' must be a string%s%s", name, given ? ", not " : " (missing)",
		        given ? jv_type(v) : "");
	return v;
}

static void want_args(JR *r, const Args *a, int most, const char *what, int line)
{
	if (a->nargs > most)
		jj_fail(&r->c, line, "%s takes at most %d positional argument%s (%d given)", what, most, most == 1 ? "" : "s",
		        a->nargs);
}

/* ---- strings ---- */

static JVal substr(const char *s, size_t n)
{
	return (JVal){.t = JV_STR, .u.s = {s, n}};
}

static int in_chars(unsigned c, JVal chars)
{
	if (chars.t != JV_STR)
		return jj_isspace(c);
	for (size_t i = 0, l; i < chars.u.s.n; i += l)
		if (jj_cp_at(chars.u.s.s + i, chars.u.s.n - i, &l) == c)
			return 1;
	return 0;
}

/* str.strip/lstrip/rstrip (which: 3 both, 1 left, 2 right) with chars (a string) or whitespace. */
static JVal strip(JVal s, JVal chars, int which)
{
	size_t a = 0, b = s.u.s.n;
	if (which & 1)
		while (a < b) {
			size_t l;
			if (!in_chars(jj_cp_at(s.u.s.s + a, b - a, &l), chars))
				break;
			a += l;
		}
	if (which & 2) {
		size_t keep = a;
		for (size_t i = a, l; i < b; i += l)
			if (!in_chars(jj_cp_at(s.u.s.s + i, b - i, &l), chars))
				keep = i + l;
		b = keep;
	}
	return substr(s.u.s.s + a, b - a);
}

/* str.split / rsplit. */
static JVal split(JR *r, JVal s, JVal sep, int64_t maxsplit, int right, int line)
{
	JVal out = jv_list(r, 0);
	const char *p = s.u.s.s;
	size_t n = s.u.s.n;
	if (sep.t == JV_STR && !sep.u.s.n)
		jj_fail(&r->c, line, "empty separator");
	if (sep.t == JV_STR) {
		size_t sl = sep.u.s.n;
		if (!right) {
			size_t i = 0;
			for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
				const char *hit = memmem(p + i, n - i, sep.u.s.s, sl);
				if (!hit)
					break;
				jl_push(r, out.u.l, substr(p + i, (size_t)(hit - p) - i));
				i = (size_t)(hit - p) + sl;
			}
			jl_push(r, out.u.l, substr(p + i, n - i));
			return out;
		}
		JVal rev = jv_list(r, 0);
		size_t end = n;
		for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
			size_t at = (size_t)-1;
			for (size_t j = end; j >= sl; j--)
				if (!memcmp(p + j - sl, sep.u.s.s, sl)) {
					at = j - sl;
					break;
				}
			if (at == (size_t)-1)
				break;
			jl_push(r, rev.u.l, substr(p + at + sl, end - at - sl));
			end = at;
		}
		jl_push(r, out.u.l, substr(p, end));
		for (size_t k = rev.u.l->n; k-- > 0;)
			jl_push(r, out.u.l, rev.u.l->v[k]);
		return out;
	}
	/* whitespace runs; maxsplit counted from the side asked */
	JVal words = jv_list(r, 0);
	for (size_t i = 0, l; i < n;) {
		while (i < n && jj_isspace(jj_cp_at(p + i, n - i, &l)))
			i += l;
		if (i >= n)
			break;
		size_t a = i;
		while (i < n && !jj_isspace(jj_cp_at(p + i, n - i, &l)))
			i += l;
		jl_push(r, words.u.l, substr(p + a, i - a));
	}
	size_t nw = words.u.l->n;
	if (maxsplit < 0 || (size_t)maxsplit + 1 >= nw)
		return words;
	/* the last (or first) piece keeps the rest of the text, its inner whitespace included */
	if (!right) {
		for (int64_t k = 0; k < maxsplit; k++)
			jl_push(r, out.u.l, words.u.l->v[k]);
		JVal w = words.u.l->v[maxsplit];
		JVal rest = strip(substr(w.u.s.s, (size_t)(p + n - w.u.s.s)), jv_none(), 2);
		jl_push(r, out.u.l, rest);
		return out;
	}
	JVal w = words.u.l->v[nw - 1 - (size_t)maxsplit];
	jl_push(r, out.u.l, strip(substr(p, (size_t)(w.u.s.s - p) + w.u.s.n), jv_none(), 1));
	for (size_t k = nw - (size_t)maxsplit; k < nw; k++)
		jl_push(r, out.u.l, words.u.l->v[k]);
	return out;
}

/* str.replace(old, new, count). */
static JVal replace(JR *r, JVal s, JVal old, JVal new, int64_t count)
{
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	const char *p = s.u.s.s;
	size_t n = s.u.s.n, i = 0;
	int64_t k = 0;
	if (!old.u.s.n) { /* between every code point, and at both ends */
		for (size_t l = 0; i <= n; i += l) {
			if (count < 0 || k < count)
				jb_add(r, &b, new.u.s.s, new.u.s.n), k++;
			if (i == n)
				break;
			jj_cp_at(p + i, n - i, &l);
			jb_add(r, &b, p + i, l);
		}
		return substr(b.s, b.n);
	}
	while (count < 0 || k < count) {
		const char *hit = memmem(p + i, n - i, old.u.s.s, old.u.s.n);
		if (!hit)
			break;
		jb_add(r, &b, p + i, (size_t)(hit - p) - i);
		jb_add(r, &b, new.u.s.s, new.u.s.n);
		i = (size_t)(hit - p) + old.u.s.n;
		k++;
	}
	jb_add(r, &b, p + i, n - i);
	return substr(b.s, b.n);
}

/* str.find / rfind as a code point index, -1 when absent. */
static int64_t find(JVal s, JVal sub, int right)
{
	const char *p = s.u.s.s, *at = NULL;
	size_t n = s.u.s.n, sl = sub.u.s.n;
	if (!right)
		at = sl ? memmem(p, n, sub.u.s.s, sl) : p;
	else
		for (size_t j = n + 1; j-- > 0 && !at;)
			if (j + sl <= n && !memcmp(p + j, sub.u.s.s, sl))
				at = p + j;
	return at ? (int64_t)jj_utf8_len(p, (size_t)(at - p)) : -1;
}

static int has_prefix(JVal s, JVal x, int suffix)
{
	if (x.t != JV_STR || x.u.s.n > s.u.s.n)
		return 0;
	return !memcmp(s.u.s.s + (suffix ? s.u.s.n - x.u.s.n : 0), x.u.s.s, x.u.s.n);
}

/* str.format with {} / {0} / {name} fields (no format specs). */
static JVal format(JR *r, JVal s, const Args *a, int line)
{
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	int autonum = 0;
	for (size_t i = 0; i < s.u.s.n; i++) {
		char c = s.u.s.s[i];
		if ((c == '{' || c == '}') && i + 1 < s.u.s.n && s.u.s.s[i + 1] == c) {
			jb_add(r, &b, &c, 1), i++;
			continue;
		}
		if (c == '}')
			jj_fail(&r->c, line, "single '}' encountered in format string");
		if (c != '{') {
			jb_add(r, &b, &c, 1);
			continue;
		}
		const char *end = memchr(s.u.s.s + i, '}', s.u.s.n - i);
		if (!end)
			jj_fail(&r->c, line, "single '{' encountered in format string");
		const char *f = s.u.s.s + i + 1;
		size_t fl = (size_t)(end - f);
		if (memchr(f, ':', fl) || memchr(f, '!', fl) || memchr(f, '.', fl) || memchr(f, '[', fl))
			jj_fail(&r->c, line, "format specs and conversions are not supported in str.format");
		JVal v;
		if (!fl) {
			if (autonum >= a->nargs)
				jj_fail(&r->c, line, "str.format: not enough arguments");
			v = a->args[autonum++];
		} else if (f[0] >= '0' && f[0] <= '9') {
			int64_t k = atoll(f);
			if (k >= a->nargs)
				jj_fail(&r->c, line, "str.format: no argument %lld", (long long)k);
			v = a->args[k];
		} else {
			int found = 0;
			for (int k = 0; k < a->nkw; k++)
				if (strlen(a->kwn[k]) == fl && !memcmp(a->kwn[k], f, fl))
					v = a->kwv[k], found = 1;
			if (!found)
				jj_fail(&r->c, line, "str.format: no argument '%.*s'", (int)fl, f);
		}
		jv_str_into(r, &b, v);
		i = (size_t)(end - s.u.s.s);
	}
	return substr(b.s, b.n);
}

/* ---- sorting (stable merge sort) ---- */

typedef struct {
	JR *r;
	int fold;            /* compare strings ignoring case */
	const char *attr;    /* compare this attribute of each item (dotted path), or NULL */
	int by_value;        /* dictsort by value: items are (key, value) pairs */
	int line;
} SortKey;

static JVal attr_path(JR *r, JVal v, const char *path, int line)
{
	const char *p = path;
	for (;;) {
		const char *dot = strchr(p, '.');
		size_t l = dot ? (size_t)(dot - p) : strlen(p);
		int isnum = l > 0;
		for (size_t i = 0; i < l; i++)
			isnum &= p[i] >= '0' && p[i] <= '9';
		v = isnum ? jv_getitem(r, v, jv_int(atoll(p)), line) : jv_getitem(r, v, substr(p, l), line);
		if (!dot)
			return v;
		p = dot + 1;
	}
}

static JVal sort_key(const SortKey *k, JVal v)
{
	if (k->attr)
		return attr_path(k->r, v, k->attr, k->line);
	if (k->by_value >= 0 && v.t == JV_LIST && v.u.l->n == 2)
		return v.u.l->v[k->by_value];
	return v;
}

/* A stable bottom-up merge sort of v[0..n) by k (tmp holds n items). */
static void msort(const SortKey *k, JVal *v, JVal *tmp, size_t n)
{
	for (size_t w = 1; w < n; w *= 2) {
		for (size_t lo = 0; lo < n; lo += 2 * w) {
			size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n, x = lo, y = mid, o = lo;
			while (o < hi) {
				int take_y = x >= mid || (y < hi && jv_compare(k->r, sort_key(k, v[y]), sort_key(k, v[x]), k->fold) < 0);
				tmp[o++] = take_y ? v[y++] : v[x++];
			}
		}
		memcpy(v, tmp, sizeof *v * n);
	}
}

static JVal sorted(JR *r, JVal seq, const SortKey *k, int reverse, int line)
{
	JVal src = jv_iter(r, seq, line);
	JVal out = jv_list(r, src.u.l->n);
	for (size_t i = 0; i < src.u.l->n; i++)
		jl_push(r, out.u.l, src.u.l->v[i]);
	JVal *tmp = jr_alloc(r, sizeof *tmp * (out.u.l->n + 1));
	msort(k, out.u.l->v, tmp, out.u.l->n);
	if (reverse) /* Python's reverse=True keeps equal items in order: reverse, sort, reverse */
		for (size_t i = 0, n = out.u.l->n; i < n / 2; i++) {
			JVal t = out.u.l->v[i];
			out.u.l->v[i] = out.u.l->v[n - 1 - i], out.u.l->v[n - 1 - i] = t;
		}
	return out;
}

/* ---- JSON out ---- */

/* The escapes Python's repr and JSON share. */
int jj_escape(JR *r, JBuf *b, unsigned c)
{
	const char *e = c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r" : c == '\t' ? "\\t" : NULL;
	if (e)
		jb_add(r, b, e, 2);
	return e != NULL;
}

static void json_str(JR *r, JBuf *b, const char *s, size_t n, int ascii)
{
	jb_add(r, b, "\"", 1);
	for (size_t i = 0, l; i < n; i += l) {
		unsigned c = jj_cp_at(s + i, n - i, &l);
		char tmp[16];
		if (c == '"')
			jb_add(r, b, "\\\"", 2);
		else if (jj_escape(r, b, c))
			continue;
		else if (c == '\b')
			jb_add(r, b, "\\b", 2);
		else if (c == '\f')
			jb_add(r, b, "\\f", 2);
		else if (c < 0x20 || (ascii && c > 0x7e && !(c == 0x7f))) {
			if (c >= 0x10000) {
				unsigned v = c - 0x10000;
				snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (v >> 10), 0xdc00 + (v & 0x3ff));
				jb_add(r, b, tmp, 12);
			} else
				snprintf(tmp, sizeof tmp, "\\u%04x", c), jb_add(r, b, tmp, 6);
		} else
			jb_add(r, b, s + i, l);
	}
	jb_add(r, b, "\"", 1);
}

static void newline_indent(JR *r, JBuf *b, int indent, int level)
{
	jb_add(r, b, "\n", 1);
	for (int i = 0; i < indent * level; i++)
		jb_add(r, b, " ", 1);
}

void jj_json_into(JR *r, JBuf *b, JVal v, int indent, int level, const char *isep, const char *ksep, int ascii,
                  int sort, int line)
{
	char tmp[48];
	if (level > 200)
		jj_fail(&r->c, line, "tojson: nested too deeply");
	switch (v.t) {
	case JV_NONE: jb_adds(r, b, "null"); return;
	case JV_BOOL: jb_adds(r, b, v.u.b ? "true" : "false"); return;
	case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i), jb_adds(r, b, tmp); return;
	case JV_FLOAT:
		if (isnan(v.u.f))
			jb_adds(r, b, "NaN");
		else if (isinf(v.u.f))
			jb_adds(r, b, v.u.f < 0 ? "-Infinity" : "Infinity");
		else
			jj_float_repr(v.u.f, tmp, sizeof tmp), jb_adds(r, b, tmp);
		return;
	case JV_STR: json_str(r, b, v.u.s.s, v.u.s.n, ascii); return;
	case JV_LIST:
	case JV_DICT: {
		int dict = v.t == JV_DICT;
		if (dict && v.flag)
			break;
		JVal items = v;
		if (dict) { /* (key, value) pairs, keys as strings */
			items = jv_list(r, v.u.d->n);
			for (size_t i = 0; i < v.u.d->n; i++) {
				JVal k = v.u.d->k[i];
				if (k.t != JV_STR) { /* json.dumps turns scalar keys into strings */
					JBuf kb = {0};
					if (k.t == JV_NONE || k.t == JV_BOOL)
						jb_adds(r, &kb, k.t == JV_NONE ? "null" : k.u.b ? "true" : "false");
					else if (k.t == JV_INT || k.t == JV_FLOAT)
						jj_json_into(r, &kb, k, -1, level, isep, ksep, ascii, sort, line);
					else
						jj_fail(&r->c, line, "tojson: keys must be str, int, float, bool or None, not %s", jv_type(k));
					k = substr(kb.s, kb.n);
				}
				JVal pair = jv_list(r, 2);
				jl_push(r, pair.u.l, k);
				jl_push(r, pair.u.l, v.u.d->v[i]);
				jl_push(r, items.u.l, pair);
			}
			if (sort) {
				SortKey key = {r, 0, NULL, 0, line};
				items = sorted(r, items, &key, 0, line);
			}
		}
		jb_adds(r, b, dict ? "{" : "[");
		for (size_t i = 0; i < items.u.l->n; i++) {
			if (i)
				jb_adds(r, b, isep);
			if (indent >= 0)
				newline_indent(r, b, indent, level + 1);
			JVal x = items.u.l->v[i];
			if (dict) {
				json_str(r, b, x.u.l->v[0].u.s.s, x.u.l->v[0].u.s.n, ascii);
				jb_adds(r, b, ksep);
				x = x.u.l->v[1];
			}
			jj_json_into(r, b, x, indent, level + 1, isep, ksep, ascii, sort, line);
		}
		if (indent >= 0 && items.u.l->n)
			newline_indent(r, b, indent, level);
		jb_adds(r, b, dict ? "}" : "]");
		return;
	}
	default: break;
	}
	jj_fail(&r->c, line, "tojson: object of type %s is not JSON serializable",
	        v.t == JV_UNDEF ? "Undefined" : jv_type(v));
}

/* ---- tests ---- */

static const char *const test_names[] = {
	"defined", "undefined", "none", "boolean", "false", "true", "integer", "float", "number", "string", "mapping",
	"iterable", "sequence", "callable", "odd", "even", "divisibleby", "eq", "equalto", "==", "ne", "!=", "lt",
	"<", "le", "<=", "gt", ">", "ge", ">=", "in", "lower", "upper", "sameas", "escaped", NULL};

static int name_id(const char *const *names, const char *name, size_t n)
{
	for (int i = 0; names[i]; i++)
		if (strlen(names[i]) == n && !memcmp(names[i], name, n))
			return i + 1;
	return 0;
}

int jj_test_id(const char *name, size_t n)
{
	return name_id(test_names, name, n);
}

int jj_test(JR *r, int id, JVal v, JVal *args, int nargs, int line)
{
	const char *name = test_names[id - 1];
	int need = !strcmp(name, "divisibleby") || !strcmp(name, "in") || !strcmp(name, "sameas") ||
	           (id >= jj_test_id("eq", 2) && id <= jj_test_id(">=", 2));
	if (nargs != need)
		jj_fail(&r->c, line, "test '%s' takes %d argument%s (%d given)", name, need, need == 1 ? "" : "s", nargs);
	JVal x = nargs ? args[0] : jv_none();
	switch (id) {
	case 1: return v.t != JV_UNDEF;
	case 2: return v.t == JV_UNDEF;
	case 3: return v.t == JV_NONE;
	case 4: return v.t == JV_BOOL;
	case 5: return v.t == JV_BOOL && !v.u.b;
	case 6: return v.t == JV_BOOL && v.u.b;
	case 7: return v.t == JV_INT;
	case 8: return v.t == JV_FLOAT;
	case 9: return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
	case 10: return v.t == JV_STR;
	case 11: return v.t == JV_DICT && !v.flag;
	case 12:
	case 13: return v.t == JV_STR || v.t == JV_LIST || (v.t == JV_DICT && !v.flag) || v.t == JV_UNDEF;
	case 14: return v.t == JV_FUNC;
	case 15:
	case 16:
		if (v.t != JV_INT && v.t != JV_BOOL)
			jj_fail(&r->c, line, "test '%s' needs an integer, not %s", name, jv_type(v));
		return ((v.t == JV_INT ? v.u.i : v.u.b) % 2 != 0) == (id == 15);
	case 17: {
		if ((v.t != JV_INT && v.t != JV_BOOL) || (x.t != JV_INT && x.t != JV_BOOL))
			jj_fail(&r->c, line, "test 'divisibleby' needs integers");
		int64_t d = x.t == JV_INT ? x.u.i : x.u.b;
		if (!d)
			jj_fail(&r->c, line, "integer division or modulo by zero");
		return (v.t == JV_INT ? v.u.i : v.u.b) % d == 0;
	}
	case 18:
	case 19:
	case 20: return jv_equal(v, x);
	case 21:
	case 22: return !jv_equal(v, x);
	case 23:
	case 24: return jv_compare(r, v, x, 0) < 0;
	case 25:
	case 26: return jv_compare(r, v, x, 0) <= 0;
	case 27:
	case 28: return jv_compare(r, v, x, 0) > 0;
	case 29:
	case 30: return jv_compare(r, v, x, 0) >= 0;
	case 31: {
		if (x.t == JV_STR) {
			if (v.t != JV_STR)
				jj_fail(&r->c, line, "'in <string>' requires string as left operand, not %s", jv_type(v));
			return !v.u.s.n || memmem(x.u.s.s, x.u.s.n, v.u.s.s, v.u.s.n) != NULL;
		}
		if (x.t == JV_DICT)
			return jd_getv(x.u.d, v) != NULL;
		JVal it = jv_iter(r, x, line);
		for (size_t i = 0; i < it.u.l->n; i++)
			if (jv_equal(it.u.l->v[i], v))
				return 1;
		return 0;
	}
	case 32:
	case 33: {
		if (v.t != JV_STR)
			return 0;
		JVal t = recase(r, v, id == 33);
		return jv_equal(t, v) && !jv_equal(recase(r, v, id != 33), v);
	}
	case 34:
		if (v.t == JV_LIST || v.t == JV_DICT || v.t == JV_FUNC)
			return v.t == x.t && v.u.l == x.u.l;
		return v.t == x.t && jv_equal(v, x);
	default: return 0;
	}
}

/* ---- filters ---- */

static const char *const filter_names[] = {
	"abs", "attr", "batch", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
	"forceescape", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
	"reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string", "sum",
	"title", "tojson", "trim", "unique", "upper", "wordcount", NULL};

enum { F_ABS = 1, F_ATTR, F_BATCH, F_CAPITALIZE, F_COUNT, F_D, F_DEFAULT, F_DICTSORT, F_E, F_ESCAPE, F_FIRST,
       F_FLOAT, F_FORCEESCAPE, F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX,
       F_MIN, F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT,
       F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER, F_WORDCOUNT };

int jj_filter_id(const char *name, size_t n)
{
	return name_id(filter_names, name, n);
}

static int64_t length(JR *r, JVal v, int line)
{
	switch (v.t) {
	case JV_STR: return (int64_t)jj_utf8_len(v.u.s.s, v.u.s.n);
	case JV_LIST: return (int64_t)v.u.l->n;
	case JV_DICT: return (int64_t)v.u.d->n;
	case JV_UNDEF: return 0;
	default: jj_fail(&r->c, line, "object of type '%s' has no len()", jv_type(v));
	}
}

/* Python's float() of a string (whitespace around allowed); 0 when it is not a number. */
static int parse_float(JVal s, double *out)
{
	char buf[128];
	JVal t = strip(s, jv_none(), 3);
	size_t k = 0;
	for (size_t i = 0; i < t.u.s.n && k + 1 < sizeof buf; i++)
		if (t.u.s.s[i] != '_')
			buf[k++] = t.u.s.s[i];
	buf[k] = 0;
	if (!k || t.u.s.n >= sizeof buf)
		return 0;
	char *end;
	*out = strtod(buf, &end);
	return *end == 0 && (buf[0] != '0' || buf[1] != 'x');
}

static int parse_int(JVal s, int64_t *out)
{
	char buf[64];
	JVal t = strip(s, jv_none(), 3);
	if (!t.u.s.n || t.u.s.n >= sizeof buf)
		return 0;
	memcpy(buf, t.u.s.s, t.u.s.n);
	buf[t.u.s.n] = 0;
	for (size_t i = 0; i < t.u.s.n; i++)
		if (!((buf[i] >= '0' && buf[i] <= '9') || (i == 0 && (buf[i] == '-' || buf[i] == '+'))))
			return 0;
	char *end;
	long long v = strtoll(buf, &end, 10);
	*out = v;
	return *end == 0 && end != buf && !(buf[0] == '-' && !buf[1]);
}

/* select/reject/selectattr/rejectattr: keep items whose test (or truth) is sel. */
static JVal select_items(JR *r, JVal seq, const Args *a, int attr, int sel, int line)
{
	JVal it = jv_iter(r, seq, line), out = jv_list(r, 0);
	int first = attr ? 1 : 0;
	const char *path = NULL;
	if (attr)
		path = arg_str(r, a, 0, "attribute", line).u.s.s;
	int test = 0;
	if (a->nargs > first) {
		JVal tn = a->args[first];
		if (tn.t != JV_STR || !(test = jj_test_id(tn.u.s.s, tn.u.s.n)))
			jj_fail(&r->c, line, "no test named '%.*s'", tn.t == JV_STR ? (int)tn.u.s.n : 1,
			        tn.t == JV_STR ? tn.u.s.s : "?");
	}
	for (size_t i = 0; i < it.u.l->n; i++) {
		JVal v = it.u.l->v[i];
		if (path)
			v = attr_path(r, v, path, line);
		int t = test ? jj_test(r, test, v, a->args + first + 1, a->nargs - first - 1, line) : jv_truthy(v);
		if (t == sel)
			jl_push(r, out.u.l, it.u.l->v[i]);
	}
	return out;
}

static JVal html_escape(JR *r, JVal v)
{
	v = jv_to_str(r, v);
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	for (size_t i = 0; i < v.u.s.n; i++) {
		char c = v.u.s.s[i];
		const char *e = c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '"' ? "&#34;" : c == '\'' ? "&#39;" : NULL;
		if (e)
			jb_adds(r, &b, e);
		else
			jb_add(r, &b, &c, 1);
	}
	return substr(b.s, b.n);
}

static JVal minmax(JR *r, JVal seq, const Args *a, int max, int line)
{
	JVal it = jv_iter(r, seq, line);
	if (!it.u.l->n)
		return jv_undef(NULL);
	int given;
	JVal cs = arg(a, 0, "case_sensitive", jv_bool(0), NULL), at = arg(a, 1, "attribute", jv_none(), &given);
	SortKey k = {r, !jv_truthy(cs), at.t == JV_STR ? at.u.s.s : NULL, -1, line};
	JVal best = it.u.l->v[0];
	for (size_t i = 1; i < it.u.l->n; i++) {
		int c = jv_compare(r, sort_key(&k, it.u.l->v[i]), sort_key(&k, best), k.fold);
		if (max ? c > 0 : c < 0)
			best = it.u.l->v[i];
	}
	return best;
}

/* The filter batch(linecount, fill_with): the items in lists of linecount, the last one filled when fill_with is given. */
static JVal f_batch(JR *r, JVal v, const Args *a, int line)
{
	int given;
	int64_t size = arg_int(r, a, 0, "linecount", 1, line);
	JVal fill = arg(a, 1, "fill_with", jv_none(), &given);
	int fillit = given;
	if (size <= 0)
		jj_fail(&r->c, line, "batch: the size must be positive");
	JVal it = jv_iter(r, v, line), out = jv_list(r, 0), cur = jv_list(r, 0);
	for (size_t i = 0; i < it.u.l->n; i++) {
		jl_push(r, cur.u.l, it.u.l->v[i]);
		if ((int64_t)cur.u.l->n == size)
			jl_push(r, out.u.l, cur), cur = jv_list(r, 0);
	}
	if (cur.u.l->n) {
		while (fillit && (int64_t)cur.u.l->n < size)
			jl_push(r, cur.u.l, fill);
		jl_push(r, out.u.l, cur);
	}
	return out;
}

/* The filter dictsort(case_sensitive, by, reverse): a dict's (key, value) pairs sorted by key or value. */
static JVal f_dictsort(JR *r, JVal v, const Args *a, int line)
{
	if (v.t != JV_DICT)
		jj_fail(&r->c, line, "dictsort: a dict is needed, not %s", jv_type(v));
	JVal cs = arg(a, 0, "case_sensitive", jv_bool(0), NULL), by = arg(a, 1, "by", jv_cstr("key"), NULL);
	JVal rev = arg(a, 2, "reverse", jv_bool(0), NULL);
	int byv = by.t == JV_STR && by.u.s.n == 5 && !memcmp(by.u.s.s, "value", 5);
	if (!byv && !(by.t == JV_STR && by.u.s.n == 3 && !memcmp(by.u.s.s, "key", 3)))
		jj_fail(&r->c, line, "dictsort: 'by' must be 'key' or 'value'");
	JVal items = jv_list(r, v.u.d->n);
	for (size_t i = 0; i < v.u.d->n; i++) {
		JVal p = jv_list(r, 2);
		p.flag = 1;
		jl_push(r, p.u.l, v.u.d->k[i]);
		jl_push(r, p.u.l, v.u.d->v[i]);
		jl_push(r, items.u.l, p);
	}
	SortKey k = {r, !jv_truthy(cs), NULL, byv, line};
	return sorted(r, items, &k, jv_truthy(rev), line);
}

/* The filter float(default): a number or numeric string as a float, else default. */
static JVal f_float(JVal v, const Args *a)
{
	JVal d = arg(a, 0, "default", jv_float(0), NULL);
	double f;
	if (v.t == JV_INT || v.t == JV_BOOL || v.t == JV_FLOAT)
		return jv_float(v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b);
	if (v.t == JV_STR && parse_float(v, &f))
		return jv_float(f);
	return d;
}

/* The filter int(default): a number or numeric string as an int (floats truncated), else default. */
static JVal f_int(JVal v, const Args *a)
{
	JVal d = arg(a, 0, "default", jv_int(0), NULL);
	int64_t i;
	double f;
	if (v.t == JV_INT || v.t == JV_BOOL)
		return jv_int(v.t == JV_INT ? v.u.i : v.u.b);
	if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18)
		return jv_int((int64_t)v.u.f);
	if (v.t == JV_STR && parse_int(v, &i))
		return jv_int(i);
	if (v.t == JV_STR && parse_float(v, &f) && isfinite(f) && fabs(f) < 9.2e18)
		return jv_int((int64_t)f);
	return d;
}

/* The filter indent(width, first, blank): every line but the first (unless first) indented by width spaces or a string. */
static JVal f_indent(JR *r, JVal v, const Args *a, int line)
{
	JVal w = arg(a, 0, "width", jv_int(4), NULL);
	int first = jv_truthy(arg(a, 1, "first", jv_bool(0), NULL)), blank = jv_truthy(arg(a, 2, "blank", jv_bool(0), NULL));
	JVal pad = w.t == JV_STR ? w : jv_none();
	if (w.t != JV_STR) {
		if (w.t != JV_INT || w.u.i < 0 || w.u.i > 1000)
			jj_fail(&r->c, line, "indent: the width must be a small integer or a string");
		JBuf pb = {0};
		jb_add(r, &pb, "", 0);
		for (int64_t i = 0; i < w.u.i; i++)
			jb_add(r, &pb, " ", 1);
		pad = substr(pb.s, pb.n);
	}
	v = jv_to_str(r, v);
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	const char *p = v.u.s.s, *end = p + v.u.s.n;
	for (int ln = 0; p <= end; ln++) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t l = nl ? (size_t)(nl - p) : (size_t)(end - p);
		int empty = strip(substr(p, l), jv_none(), 3).u.s.n == 0;
		if ((ln > 0 || first) && (blank || !empty))
			jb_add(r, &b, pad.u.s.s, pad.u.s.n);
		jb_add(r, &b, p, l);
		if (!nl)
			break;
		jb_add(r, &b, "\n", 1);
		p = nl + 1;
	}
	return substr(b.s, b.n);
}

/* The filter join(d, attribute): the items (or an attribute of each) as strings joined by d. */
static JVal f_join(JR *r, JVal v, const Args *a, int line)
{
	JVal d = arg(a, 0, "d", jv_cstr(""), NULL), at = arg(a, 1, "attribute", jv_none(), NULL);
	d = jv_to_str(r, d);
	JVal it = jv_iter(r, v, line);
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	for (size_t i = 0; i < it.u.l->n; i++) {
		if (i)
			jb_add(r, &b, d.u.s.s, d.u.s.n);
		JVal x = it.u.l->v[i];
		if (at.t == JV_STR)
			x = attr_path(r, x, at.u.s.s, line);
		jv_str_into(r, &b, x);
	}
	return substr(b.s, b.n);
}

/* The filter reverse: a string's characters or a sequence's items in reverse order. */
static JVal f_reverse(JR *r, JVal v, int line)
{
	if (v.t == JV_STR) {
		JVal it = jv_iter(r, v, line);
		JBuf b = {0};
		jb_add(r, &b, "", 0);
		for (size_t i = it.u.l->n; i-- > 0;)
			jb_add(r, &b, it.u.l->v[i].u.s.s, it.u.l->v[i].u.s.n);
		return substr(b.s, b.n);
	}
	JVal it = jv_iter(r, v, line), out = jv_list(r, it.u.l->n);
	for (size_t i = it.u.l->n; i-- > 0;)
		jl_push(r, out.u.l, it.u.l->v[i]);
	return out;
}

/* The filter round(precision, method): common rounding as Python's round of the printed value, or ceil / floor. */
static JVal f_round(JR *r, JVal v, const Args *a, int line)
{
	int64_t prec = arg_int(r, a, 0, "precision", 0, line);
	JVal m = arg(a, 1, "method", jv_cstr("common"), NULL);
	if (v.t != JV_INT && v.t != JV_FLOAT && v.t != JV_BOOL)
		jj_fail(&r->c, line, "round: a number is needed, not %s", jv_type(v));
	double x = v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : v.u.b;
	if (m.t != JV_STR)
		jj_fail(&r->c, line, "round: method must be common, ceil or floor");
	if (m.u.s.n == 4 && !memcmp(m.u.s.s, "ceil", 4)) {
		double s = pow(10, (double)prec);
		return jv_float(ceil(x * s) / s);
	}
	if (m.u.s.n == 5 && !memcmp(m.u.s.s, "floor", 5)) {
		double s = pow(10, (double)prec);
		return jv_float(floor(x * s) / s);
	}
	if (v.t != JV_FLOAT && prec >= 0)
		return jv_int(v.t == JV_INT ? v.u.i : v.u.b);
	if (prec < 0 || prec > 300)
		jj_fail(&r->c, line, "round: precision %lld is not supported", (long long)prec);
	char buf[400];
	snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
	return jv_float(strtod(buf, NULL));
}

/* The filter sum(attribute, start): the items added to start, ints as ints (overflow is an error), floats as floats. */
static JVal f_sum(JR *r, JVal v, const Args *a, int line)
{
	JVal at = arg(a, 0, "attribute", jv_none(), NULL), acc = arg(a, 1, "start", jv_int(0), NULL);
	JVal it = jv_iter(r, v, line);
	for (size_t i = 0; i < it.u.l->n; i++) {
		JVal x = at.t == JV_STR ? attr_path(r, it.u.l->v[i], at.u.s.s, line) : it.u.l->v[i];
		if ((acc.t != JV_INT && acc.t != JV_FLOAT && acc.t != JV_BOOL) ||
		    (x.t != JV_INT && x.t != JV_FLOAT && x.t != JV_BOOL))
			jj_fail(&r->c, line, "sum: unsupported operand type(s) for +: '%s' and '%s'", jv_type(acc), jv_type(x));
		if (acc.t == JV_FLOAT || x.t == JV_FLOAT)
			acc = jv_float((acc.t == JV_FLOAT ? acc.u.f : acc.t == JV_INT ? (double)acc.u.i : acc.u.b) +
			               (x.t == JV_FLOAT ? x.u.f : x.t == JV_INT ? (double)x.u.i : x.u.b));
		else {
			int64_t s;
			if (__builtin_add_overflow(acc.t == JV_INT ? acc.u.i : acc.u.b, x.t == JV_INT ? x.u.i : x.u.b, &s))
				jj_fail(&r->c, line, "sum: integer overflow");
			acc = jv_int(s);
		}
	}
	return acc;
}

/* The filter tojson(ensure_ascii, indent, separators, sort_keys): the value as JSON, as Python's json.dumps writes it. */
static JVal f_tojson(JR *r, JVal v, const Args *a, int line)
{
	JVal ea = arg(a, 0, "ensure_ascii", jv_bool(0), NULL), ind = arg(a, 1, "indent", jv_none(), NULL);
	JVal sep = arg(a, 2, "separators", jv_none(), NULL), sk = arg(a, 3, "sort_keys", jv_bool(0), NULL);
	int indent = -1;
	if (ind.t == JV_INT || ind.t == JV_BOOL)
		indent = (int)(ind.t == JV_INT ? (ind.u.i < 0 ? 0 : ind.u.i > 64 ? 64 : ind.u.i) : ind.u.b);
	else if (ind.t != JV_NONE)
		jj_fail(&r->c, line, "tojson: indent must be an integer");
	const char *isep = indent >= 0 ? "," : ", ", *ksep = ": ";
	if (sep.t != JV_NONE) {
		if (sep.t != JV_LIST || sep.u.l->n != 2 || sep.u.l->v[0].t != JV_STR || sep.u.l->v[1].t != JV_STR)
			jj_fail(&r->c, line, "tojson: separators must be two strings");
		isep = jv_str(r, sep.u.l->v[0].u.s.s, sep.u.l->v[0].u.s.n).u.s.s;
		ksep = jv_str(r, sep.u.l->v[1].u.s.s, sep.u.l->v[1].u.s.n).u.s.s;
	}
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	jj_json_into(r, &b, v, indent, 0, isep, ksep, jv_truthy(ea), jv_truthy(sk), line);
	return substr(b.s, b.n);
}

/* The filter unique(case_sensitive, attribute): the items without repeats, first occurrences kept. */
static JVal f_unique(JR *r, JVal v, const Args *a, int line)
{
	JVal cs = arg(a, 0, "case_sensitive", jv_bool(0), NULL), at = arg(a, 1, "attribute", jv_none(), NULL);
	JVal it = jv_iter(r, v, line), out = jv_list(r, 0), seen = jv_list(r, 0);
	for (size_t i = 0; i < it.u.l->n; i++) {
		JVal k = at.t == JV_STR ? attr_path(r, it.u.l->v[i], at.u.s.s, line) : it.u.l->v[i];
		if (k.t == JV_STR && !jv_truthy(cs))
			k = recase(r, k, 0);
		int dup = 0;
		for (size_t j = 0; j < seen.u.l->n && !dup; j++)
			dup = jv_equal(seen.u.l->v[j], k);
		if (!dup)
			jl_push(r, seen.u.l, k), jl_push(r, out.u.l, it.u.l->v[i]);
	}
	return out;
}

JVal jj_filter(JR *r, int id, JVal v, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line)
{
	Args a = {args, nargs, kwn, kwv, nkw};
	int given;
	switch (id) {
	case F_ABS:
		if (v.t == JV_INT)
			return v.u.i == INT64_MIN ? jv_float(9.2233720368547758e18) : jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
		if (v.t == JV_BOOL)
			return jv_int(v.u.b);
		if (v.t == JV_FLOAT)
			return jv_float(fabs(v.u.f));
		jj_fail(&r->c, line, "bad operand type for abs(): '%s'", jv_type(v));
	case F_ATTR: {
		JVal n = arg_str(r, &a, 0, "name", line);
		return jv_getattr(r, v, n.u.s.s, n.u.s.n, line);
	}
	case F_BATCH: return f_batch(r, v, &a, line);
	case F_CAPITALIZE: return recase(r, v, 2);
	case F_COUNT:
	case F_LENGTH: return jv_int(length(r, v, line));
	case F_D:
	case F_DEFAULT: {
		JVal d = arg(&a, 0, "default_value", jv_cstr(""), NULL), b = arg(&a, 1, "boolean", jv_bool(0), NULL);
		if (v.t == JV_UNDEF || (jv_truthy(b) && !jv_truthy(v)))
			return d;
		return v;
	}
	case F_DICTSORT: return f_dictsort(r, v, &a, line);
	case F_E:
	case F_ESCAPE:
	case F_FORCEESCAPE: return html_escape(r, v);
	case F_FIRST: {
		JVal it = jv_iter(r, v, line);
		return it.u.l->n ? it.u.l->v[0] : jv_undef(NULL);
	}
	case F_LAST: {
		JVal it = jv_iter(r, v, line);
		return it.u.l->n ? it.u.l->v[it.u.l->n - 1] : jv_undef(NULL);
	}
	case F_FLOAT: return f_float(v, &a);
	case F_INT: return f_int(v, &a);
	case F_INDENT: return f_indent(r, v, &a, line);
	case F_ITEMS: {
		if (v.t == JV_UNDEF)
			return jv_list(r, 0);
		if (v.t != JV_DICT)
			jj_fail(&r->c, line, "items: a dict is needed, not %s", jv_type(v));
		return jj_method(r, jj_method_id(JV_DICT, "items", 5), v, NULL, 0, NULL, NULL, 0, line);
	}
	case F_JOIN: return f_join(r, v, &a, line);
	case F_LIST: {
		JVal it = jv_iter(r, v, line), out = jv_list(r, it.u.l->n);
		for (size_t i = 0; i < it.u.l->n; i++)
			jl_push(r, out.u.l, it.u.l->v[i]);
		return out;
	}
	case F_LOWER: return recase(r, v, 0);
	case F_UPPER: return recase(r, v, 1);
	case F_TITLE: return recase(r, v, 4);
	case F_MAP: {
		JVal it = jv_iter(r, v, line), out = jv_list(r, it.u.l->n);
		JVal at = arg(&a, -1, "attribute", jv_none(), &given);
		if (given) {
			JVal d = arg(&a, -1, "default", jv_undef(NULL), NULL);
			for (size_t i = 0; i < it.u.l->n; i++) {
				JVal x = attr_path(r, it.u.l->v[i], jv_to_str(r, at).u.s.s, line);
				jl_push(r, out.u.l, x.t == JV_UNDEF ? d : x);
			}
			return out;
		}
		if (!nargs || args[0].t != JV_STR)
			jj_fail(&r->c, line, "map: give a filter name or attribute=");
		int f = jj_filter_id(args[0].u.s.s, args[0].u.s.n);
		if (!f)
			jj_fail(&r->c, line, "no filter named '%.*s'", (int)args[0].u.s.n, args[0].u.s.s);
		for (size_t i = 0; i < it.u.l->n; i++)
			jl_push(r, out.u.l, jj_filter(r, f, it.u.l->v[i], args + 1, nargs - 1, kwn, kwv, nkw, line));
		return out;
	}
	case F_MAX: return minmax(r, v, &a, 1, line);
	case F_MIN: return minmax(r, v, &a, 0, line);
	case F_REJECT: return select_items(r, v, &a, 0, 0, line);
	case F_SELECT: return select_items(r, v, &a, 0, 1, line);
	case F_REJECTATTR: return select_items(r, v, &a, 1, 0, line);
	case F_SELECTATTR: return select_items(r, v, &a, 1, 1, line);
	case F_REPLACE: {
		v = jv_to_str(r, v);
		JVal o = jv_to_str(r, arg(&a, 0, "old", jv_cstr(""), NULL)), n = jv_to_str(r, arg(&a, 1, "new", jv_cstr(""), NULL));
		return replace(r, v, o, n, arg_int(r, &a, 2, "count", -1, line));
	}
	case F_REVERSE: return f_reverse(r, v, line);
	case F_ROUND: return f_round(r, v, &a, line);
	case F_SAFE: return v;
	case F_SORT: {
		JVal rev = arg(&a, 0, "reverse", jv_bool(0), NULL), cs = arg(&a, 1, "case_sensitive", jv_bool(0), NULL);
		JVal at = arg(&a, 2, "attribute", jv_none(), NULL);
		SortKey k = {r, !jv_truthy(cs), at.t == JV_STR ? jv_to_str(r, at).u.s.s : NULL, -1, line};
		return sorted(r, v, &k, jv_truthy(rev), line);
	}
	case F_STRING: return jv_to_str(r, v);
	case F_SUM: return f_sum(r, v, &a, line);
	case F_TOJSON: return f_tojson(r, v, &a, line);
	case F_TRIM: {
		JVal chars = arg(&a, 0, "chars", jv_none(), NULL);
		return strip(jv_to_str(r, v), chars, 3);
	}
	case F_UNIQUE: return f_unique(r, v, &a, line);
	case F_WORDCOUNT: {
		JVal s = jv_to_str(r, v);
		JVal w = split(r, s, jv_none(), -1, 0, line);
		return jv_int((int64_t)w.u.l->n);
	}
	default: jj_fail(&r->c, line, "unknown filter");
	}
}

/* ---- methods ---- */

static const char *const str_methods[] = {
	"strip", "lstrip", "rstrip", "split", "rsplit", "replace", "upper", "lower", "title", "capitalize",
	"startswith", "endswith", "find", "rfind", "count", "join", "format", "isdigit", "isalpha", "isalnum",
	"isspace", "islower", "isupper", "removeprefix", "removesuffix", "splitlines", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};

enum { M_STRIP = 1, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_REPLACE, M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE,
       M_STARTSWITH, M_ENDSWITH, M_FIND, M_RFIND, M_COUNT, M_JOIN, M_FORMAT, M_ISDIGIT, M_ISALPHA, M_ISALNUM,
       M_ISSPACE, M_ISLOWER, M_ISUPPER, M_REMOVEPREFIX, M_REMOVESUFFIX, M_SPLITLINES, M_ITEMS = 100, M_KEYS,
       M_VALUES, M_GET };

int jj_method_id(int type, const char *name, size_t n)
{
	if (type == JV_STR)
		return name_id(str_methods, name, n);
	if (type == JV_DICT) {
		int k = name_id(dict_methods, name, n);
		return k ? M_ITEMS + k - 1 : 0;
	}
	return 0;
}

/* Python's str.isX over all code points (ASCII classes; other code points count as letters). */
static int str_is(JVal s, int what)
{
	if (!s.u.s.n)
		return 0;
	int cased = 0;
	for (size_t i = 0, l; i < s.u.s.n; i += l) {
		unsigned c = jj_cp_at(s.u.s.s + i, s.u.s.n - i, &l);
		int digit = c >= '0' && c <= '9', space = jj_isspace(c), alpha = !digit && !space && (c >= 0x80 || (c | 32) - 'a' < 26u);
		switch (what) {
		case M_ISDIGIT: if (!digit) return 0; break;
		case M_ISALPHA: if (!alpha) return 0; break;
		case M_ISALNUM: if (!alpha && !digit) return 0; break;
		case M_ISSPACE: if (!space) return 0; break;
		case M_ISLOWER: if (up_cp(c) != c) cased = 1; else if (low_cp(c) != c) return 0; break;
		default: if (low_cp(c) != c) cased = 1; else if (up_cp(c) != c) return 0; break;
		}
	}
	return what == M_ISLOWER || what == M_ISUPPER ? cased : 1;
}

JVal jj_method(JR *r, int id, JVal self, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line)
{
	Args a = {args, nargs, kwn, kwv, nkw};
	const char *what = id >= M_ITEMS ? dict_methods[id - M_ITEMS] : str_methods[id - 1];
	switch (id) {
	case M_STRIP:
	case M_LSTRIP:
	case M_RSTRIP: {
		want_args(r, &a, 1, what, line);
		JVal c = arg(&a, 0, "chars", jv_none(), NULL);
		if (c.t != JV_NONE && c.t != JV_STR)
			jj_fail(&r->c, line, "%s arg must be None or str", what);
		return strip(self, c, id == M_STRIP ? 3 : id == M_LSTRIP ? 1 : 2);
	}
	case M_SPLIT:
	case M_RSPLIT: {
		want_args(r, &a, 2, what, line);
		JVal sep = arg(&a, 0, "sep", jv_none(), NULL);
		if (sep.t != JV_NONE && sep.t != JV_STR)
			jj_fail(&r->c, line, "%s: the separator must be None or str", what);
		return split(r, self, sep, arg_int(r, &a, 1, "maxsplit", -1, line), id == M_RSPLIT, line);
	}
	case M_SPLITLINES: {
		JVal out = jv_list(r, 0);
		const char *p = self.u.s.s, *end = p + self.u.s.n;
		while (p < end) {
			const char *q = p;
			while (q < end && *q != '\n' && *q != '\r')
				q++;
			jl_push(r, out.u.l, substr(p, (size_t)(q - p)));
			if (q < end && *q == '\r' && q + 1 < end && q[1] == '\n')
				q++;
			p = q < end ? q + 1 : q;
		}
		return out;
	}
	case M_REPLACE: {
		want_args(r, &a, 3, what, line);
		JVal o = arg_str(r, &a, 0, "old", line), n = arg_str(r, &a, 1, "new", line);
		return replace(r, self, o, n, arg_int(r, &a, 2, "count", -1, line));
	}
	case M_UPPER: return recase(r, self, 1);
	case M_LOWER: return recase(r, self, 0);
	case M_TITLE: return recase(r, self, 3);
	case M_CAPITALIZE: return recase(r, self, 2);
	case M_STARTSWITH:
	case M_ENDSWITH: {
		want_args(r, &a, 1, what, line);
		int given;
		JVal x = arg(&a, 0, "prefix", jv_none(), &given);
		if (x.t == JV_LIST && x.flag) {
			for (size_t i = 0; i < x.u.l->n; i++)
				if (has_prefix(self, x.u.l->v[i], id == M_ENDSWITH))
					return jv_bool(1);
			return jv_bool(0);
		}
		if (x.t != JV_STR)
			jj_fail(&r->c, line, "%s first arg must be str or a tuple of str, not %s", what, jv_type(x));
		return jv_bool(has_prefix(self, x, id == M_ENDSWITH));
	}
	case M_FIND:
	case M_RFIND: {
		want_args(r, &a, 1, what, line);
		return jv_int(find(self, arg_str(r, &a, 0, "sub", line), id == M_RFIND));
	}
	case M_COUNT: {
		want_args(r, &a, 1, what, line);
		JVal sub = arg_str(r, &a, 0, "sub", line);
		if (!sub.u.s.n)
			return jv_int((int64_t)jj_utf8_len(self.u.s.s, self.u.s.n) + 1);
		int64_t k = 0;
		for (const char *p = self.u.s.s, *end = p + self.u.s.n; (p = memmem(p, (size_t)(end - p), sub.u.s.s, sub.u.s.n));
		     p += sub.u.s.n)
			k++;
		return jv_int(k);
	}
	case M_JOIN: {
		want_args(r, &a, 1, what, line);
		JVal it = jv_iter(r, arg(&a, 0, "iterable", jv_none(), NULL), line);
		JBuf b = {0};
		jb_add(r, &b, "", 0);
		for (size_t i = 0; i < it.u.l->n; i++) {
			if (it.u.l->v[i].t != JV_STR)
				jj_fail(&r->c, line, "sequence item %zu: expected str instance, %s found", i, jv_type(it.u.l->v[i]));
			if (i)
				jb_add(r, &b, self.u.s.s, self.u.s.n);
			jb_add(r, &b, it.u.l->v[i].u.s.s, it.u.l->v[i].u.s.n);
		}
		return substr(b.s, b.n);
	}
	case M_FORMAT: return format(r, self, &a, line);
	case M_ISDIGIT:
	case M_ISALPHA:
	case M_ISALNUM:
	case M_ISSPACE:
	case M_ISLOWER:
	case M_ISUPPER: return jv_bool(str_is(self, id));
	case M_REMOVEPREFIX:
	case M_REMOVESUFFIX: {
		JVal x = arg_str(r, &a, 0, id == M_REMOVEPREFIX ? "prefix" : "suffix", line);
		if (!has_prefix(self, x, id == M_REMOVESUFFIX))
			return self;
		return substr(self.u.s.s + (id == M_REMOVEPREFIX ? x.u.s.n : 0), self.u.s.n - x.u.s.n);
	}
	case M_ITEMS:
	case M_KEYS:
	case M_VALUES: {
		want_args(r, &a, 0, what, line);
		JVal out = jv_list(r, self.u.d->n);
		for (size_t i = 0; i < self.u.d->n; i++) {
			if (id == M_ITEMS) {
				JVal p = jv_list(r, 2);
				p.flag = 1;
				jl_push(r, p.u.l, self.u.d->k[i]);
				jl_push(r, p.u.l, self.u.d->v[i]);
				jl_push(r, out.u.l, p);
			} else
				jl_push(r, out.u.l, id == M_KEYS ? self.u.d->k[i] : self.u.d->v[i]);
		}
		return out;
	}
	case M_GET: {
		want_args(r, &a, 2, what, line);
		if (nkw)
			jj_fail(&r->c, line, "get() takes no keyword arguments");
		if (!nargs)
			jj_fail(&r->c, line, "get expected at least 1 argument, got 0");
		JVal *v = jd_getv(self.u.d, args[0]);
		return v ? *v : nargs > 1 ? args[1] : jv_none();
	}
	default: jj_fail(&r->c, line, "unknown method");
	}
}

/* ---- globals ---- */

static const char *const global_names[] = {"range", "namespace", "dict", "raise_exception", "strftime_now", NULL};

int jj_global_id(const char *name, size_t n)
{
	return name_id(global_names, name, n);
}

JVal jj_global(JR *r, int id, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line)
{
	switch (id) {
	case 1: { /* range */
		if (nkw || nargs < 1 || nargs > 3)
			jj_fail(&r->c, line, "range expected 1 to 3 integer arguments");
		int64_t v[3] = {0, 0, 1};
		for (int i = 0; i < nargs; i++) {
			if (args[i].t != JV_INT && args[i].t != JV_BOOL)
				jj_fail(&r->c, line, "range: '%s' object cannot be interpreted as an integer", jv_type(args[i]));
			v[nargs == 1 ? 1 : i] = args[i].t == JV_INT ? args[i].u.i : args[i].u.b;
		}
		if (!v[2])
			jj_fail(&r->c, line, "range() arg 3 must not be zero");
		double count = ceil(((double)v[1] - (double)v[0]) / (double)v[2]);
		if (count > 100000)
			jj_fail(&r->c, line, "range too big: at most 100000 items");
		JVal out = jv_list(r, count > 0 ? (size_t)count : 0);
		for (int64_t i = v[0]; v[2] > 0 ? i < v[1] : i > v[1]; i += v[2])
			jl_push(r, out.u.l, jv_int(i));
		return out;
	}
	case 2:
	case 3: { /* namespace, dict: keyword arguments (and one dict of initial items) */
		JVal d = jv_dict(r);
		if (nargs > 1 || (nargs == 1 && args[0].t != JV_DICT))
			jj_fail(&r->c, line, "%s takes keyword arguments (or one dict)", global_names[id - 1]);
		for (size_t i = 0; nargs && i < args[0].u.d->n; i++)
			jd_set(r, d.u.d, args[0].u.d->k[i], args[0].u.d->v[i]);
		for (int i = 0; i < nkw; i++)
			jd_set(r, d.u.d, jv_cstr(kwn[i]), kwv[i]);
		d.flag = id == 2;
		return d;
	}
	case 4: { /* raise_exception */
		JVal m = nargs ? jv_to_str(r, args[0]) : jv_cstr("raise_exception called");
		jj_fail(&r->c, line, "%.*s", (int)m.u.s.n, m.u.s.s);
	}
	default: { /* strftime_now */
		if (nargs != 1 || args[0].t != JV_STR)
			jj_fail(&r->c, line, "strftime_now takes one format string");
		char fmt[256], out[512];
		if (args[0].u.s.n >= sizeof fmt)
			jj_fail(&r->c, line, "strftime_now: the format is too long");
		memcpy(fmt, args[0].u.s.s, args[0].u.s.n);
		fmt[args[0].u.s.n] = 0;
		size_t n = strftime(out, sizeof out, fmt, &r->now);
		return jv_str(r, out, n);
	}
	}
}
