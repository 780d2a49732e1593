/*
** runtime/formats/jinja.c — the Jinja lexer and parser (jinja_eval.c runs the tree, jinja_lib.c holds the filters,
** tests and methods).
**
** The lexer follows jinja2's with trim_blocks and lstrip_blocks on, as transformers configures it: newlines
** are normalised to "\n" and one trailing newline is dropped; "{%-" / "-%}" strip all whitespace before /
** after the tag; otherwise a block or comment tag alone on its line after only spaces takes those spaces
** away (lstrip_blocks, unless "{%+"), and a block or comment tag's end eats the one newline after it
** (trim_blocks, unless "+%}"). Tag ends are only seen outside brackets. The parser follows jinja2's
** precedence: conditional < or < and < not < comparisons < + - < ~ < * / // % < ** < unary - + < filters,
** tests, calls, attributes and subscripts. Recursion is bounded (JJ_MAX_DEPTH), so no input can
** overflow the stack.
*/
#include "jinja_impl.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

enum { JT_EOF, JT_TEXT, JT_VBEGIN, JT_VEND, JT_BBEGIN, JT_BEND, JT_NAME, JT_STR, JT_INT, JT_FLOAT, JT_OP };

typedef struct {
	int t, line;
	const char *s; /* text, name, operator, decoded string */
	size_t n;
	int64_t i;
	double f;
} JTok;

typedef struct {
	JCtx c;
	Arena *A;
	JTok *tk;
	int n, cap, i;
	int depth;
	const char *src; /* the normalised source */
	size_t srcn;
} JP;

_Noreturn void jj_fail(JCtx *c, int line, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	seterr(c->err, c->len, "%s:%d: %s", c->name, line, msg);
	longjmp(c->jb, 1);
}

/* ---- lexer ---- */

/* Length of s[0..n) without its trailing whitespace. */
static size_t rstrip_len(const char *s, size_t n)
{
	size_t keep = 0, i = 0;
	while (i < n) {
		size_t k;
		unsigned c = jj_cp_at(s + i, n - i, &k);
		i += k;
		if (!jj_isspace(c))
			keep = i;
	}
	return keep;
}

/* Bytes of whitespace at the start of s[0..n). */
static size_t lstrip_len(const char *s, size_t n)
{
	size_t i = 0;
	while (i < n) {
		size_t k;
		if (!jj_isspace(jj_cp_at(s + i, n - i, &k)))
			break;
		i += k;
	}
	return i;
}

static void push(JP *p, JTok t)
{
	if (p->n == p->cap) {
		int cap = 2 * p->cap + 256;
		JTok *v = arena_alloc(p->A, sizeof *v * (size_t)cap);
		if (p->n)
			memcpy(v, p->tk, sizeof *v * (size_t)p->n);
		p->tk = v, p->cap = cap;
	}
	p->tk[p->n++] = t;
}

static int lines_in(const char *s, size_t n)
{
	int k = 0;
	for (size_t i = 0; i < n; i++)
		k += s[i] == '\n';
	return k;
}

/* A string literal at s (quote s[0]) decoded Python-style into the arena; returns the bytes consumed. */
static size_t lex_string(JP *p, const char *s, size_t n, int line, JTok *t)
{
	char q = s[0];
	char *o = arena_alloc(p->A, n + 1);
	size_t k = 0, i = 1;
	for (;;) {
		if (i >= n)
			jj_fail(&p->c, line, "unterminated string");
		char c = s[i++];
		if (c == q)
			break;
		if (c != '\\') {
			o[k++] = c;
			continue;
		}
		if (i >= n)
			jj_fail(&p->c, line, "unterminated string");
		c = s[i++];
		unsigned v = 0;
		int hex = 0;
		switch (c) {
		case 'n': o[k++] = '\n'; break;
		case 't': o[k++] = '\t'; break;
		case 'r': o[k++] = '\r'; break;
		case 'b': o[k++] = '\b'; break;
		case 'f': o[k++] = '\f'; break;
		case 'v': o[k++] = '\v'; break;
		case 'a': o[k++] = '\a'; break;
		case '\\': o[k++] = '\\'; break;
		case '\'': o[k++] = '\''; break;
		case '"': o[k++] = '"'; break;
		case '\n': break;
		case 'x': hex = 2; break;
		case 'u': hex = 4; break;
		case 'U': hex = 8; break;
		default:
			if (c >= '0' && c <= '7') {
				v = (unsigned)(c - '0');
				for (int j = 0; j < 2 && i < n && s[i] >= '0' && s[i] <= '7'; j++)
					v = v * 8 + (unsigned)(s[i++] - '0');
				hex = -1;
			} else
				o[k++] = '\\', o[k++] = c;
		}
		if (!hex)
			continue;
		for (int j = 0; j < hex; j++, i++) {
			char h = i < n ? s[i] : 0;
			int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
			if (d < 0)
				jj_fail(&p->c, line, "bad \\%c escape in a string", c);
			v = v * 16 + (unsigned)d;
		}
		if (v > 0x10ffff || (v >= 0xd800 && v < 0xe000))
			jj_fail(&p->c, line, "bad code point U+%X in a string", v);
		if (v < 0x80)
			o[k++] = (char)v;
		else if (v < 0x800)
			o[k++] = (char)(0xc0 | v >> 6), o[k++] = (char)(0x80 | (v & 0x3f));
		else if (v < 0x10000)
			o[k++] = (char)(0xe0 | v >> 12), o[k++] = (char)(0x80 | (v >> 6 & 0x3f)), o[k++] = (char)(0x80 | (v & 0x3f));
		else
			o[k++] = (char)(0xf0 | v >> 18), o[k++] = (char)(0x80 | (v >> 12 & 0x3f)),
			o[k++] = (char)(0x80 | (v >> 6 & 0x3f)), o[k++] = (char)(0x80 | (v & 0x3f));
	}
	t->t = JT_STR, t->s = o, t->n = k;
	return i;
}

/* A number at s: integer or float, with '_' between digits as Python allows; returns the bytes. */
static size_t lex_number(JP *p, const char *s, size_t n, int line, JTok *t)
{
	char buf[128];
	size_t i = 0, k = 0;
	int isf = 0;
	for (; i < n && k + 1 < sizeof buf; i++) {
		char c = s[i];
		if (c >= '0' && c <= '9')
			buf[k++] = c;
		else if (c == '_' && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9' && k)
			continue;
		else if (c == '.' && !isf && i + 1 < n && s[i + 1] >= '0' && s[i + 1] <= '9')
			buf[k++] = c, isf = 1;
		else if ((c == 'e' || c == 'E') && isf < 2) {
			size_t j = i + 1;
			if (j < n && (s[j] == '+' || s[j] == '-'))
				j++;
			if (j >= n || s[j] < '0' || s[j] > '9')
				break;
			buf[k++] = 'e';
			if (s[i + 1] == '+' || s[i + 1] == '-')
				buf[k++] = s[++i];
			isf = 2;
		} else
			break;
	}
	buf[k] = 0;
	if (isf) {
		t->t = JT_FLOAT, t->f = strtod(buf, NULL);
	} else {
		char *end;
		unsigned long long v = strtoull(buf, &end, 10);
		if (k > 18 && (v > INT64_MAX || k > 19))
			jj_fail(&p->c, line, "integer literal %s is too large", buf);
		t->t = JT_INT, t->i = (int64_t)v;
	}
	return i;
}

static const char *const ops[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
                                  ".", ",", ":", "|", "(", ")", "[", "]", "{", "}"};

/*
** Tokens of a tag from s[*pos] until its end ("}}" or "%}" with an optional '-' or '+'), outside brackets.
** Sets *strip_after to '-', '+' or 0 by the end marker.
*/
static void lex_tag(JP *p, const char *s, size_t n, size_t *pos, int *line, int block, int *strip_after)
{
	char depth[64];
	int nd = 0;
	size_t i = *pos;
	for (;;) {
		while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v'))
			*line += s[i++] == '\n';
		if (i >= n)
			jj_fail(&p->c, *line, "unexpected end of template inside a %s tag", block ? "{% %}" : "{{ }}");
		char e = block ? '%' : '}';
		if (!nd) {
			size_t j = i;
			int sign = 0;
			if ((s[j] == '-' || (block && s[j] == '+')) && j + 2 < n + 0 && s[j + 1] == e && s[j + 2] == '}')
				sign = s[j++];
			if (j + 1 < n && s[j] == e && s[j + 1] == '}') {
				*pos = j + 2;
				*strip_after = sign;
				return;
			}
		}
		JTok t = {.line = *line};
		char c = s[i];
		if (c == '\'' || c == '"') {
			size_t k = lex_string(p, s + i, n - i, *line, &t);
			*line += lines_in(s + i, k);
			i += k;
		} else if (c >= '0' && c <= '9') {
			i += lex_number(p, s + i, n - i, *line, &t);
		} else if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			size_t j = i;
			while (j < n && (s[j] == '_' || (s[j] >= 'a' && s[j] <= 'z') || (s[j] >= 'A' && s[j] <= 'Z') ||
			                 (s[j] >= '0' && s[j] <= '9')))
				j++;
			t.t = JT_NAME, t.s = s + i, t.n = j - i;
			i = j;
		} else {
			size_t k = 0;
			for (size_t o = 0; o < sizeof ops / sizeof *ops && !k; o++) {
				size_t l = strlen(ops[o]);
				if (i + l <= n && !memcmp(s + i, ops[o], l))
					k = l, t.s = ops[o];
			}
			if (!k)
				jj_fail(&p->c, *line, "unexpected character '%c'", c);
			t.t = JT_OP, t.n = k;
			if (k == 1 && (c == '(' || c == '[' || c == '{')) {
				if (nd == (int)sizeof depth)
					jj_fail(&p->c, *line, "brackets nested too deeply");
				depth[nd++] = c == '(' ? ')' : c == '[' ? ']' : '}';
			} else if (k == 1 && (c == ')' || c == ']' || c == '}')) {
				if (!nd)
					jj_fail(&p->c, *line, "unexpected '%c'", c);
				if (depth[--nd] != c)
					jj_fail(&p->c, *line, "unexpected '%c', expected '%c'", c, depth[nd]);
			}
			i += k;
		}
		push(p, t);
	}
}

/* Whether s[i..) starts "name" as a whole word (after optional spaces). */
static size_t word_at(const char *s, size_t n, size_t i, const char *name)
{
	while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r'))
		i++;
	size_t l = strlen(name);
	if (i + l > n || memcmp(s + i, name, l))
		return 0;
	char c = i + l < n ? s[i + l] : 0;
	if (c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
		return 0;
	return i + l;
}

/* After a tag end marker: '-' strips the whitespace that follows, none (block/comment) eats one newline. */
static size_t after_end(const char *s, size_t n, size_t i, int sign, int trim, int *line)
{
	size_t j = i;
	if (sign == '-')
		j += lstrip_len(s + i, n - i);
	else if (!sign && trim && j < n && s[j] == '\n')
		j++;
	*line += lines_in(s + i, j - i);
	return j;
}

/* Text s[a..b) as a token, its leading part stripped as the opening tag asks. */
static void text_token(JP *p, const char *s, size_t a, size_t b, int line, int sign, int blocklike, int line_starting)
{
	size_t n = b - a;
	if (sign == '-')
		n = rstrip_len(s + a, n);
	else if (sign != '+' && blocklike) {
		size_t l = n;
		while (l > 0 && s[a + l - 1] != '\n')
			l--;
		if ((l > 0 || line_starting) && l < n && lstrip_len(s + a + l, n - l) == n - l)
			n = l;
	}
	if (n)
		push(p, (JTok){.t = JT_TEXT, .line = line, .s = s + a, .n = n});
}

static void lex(JP *p, const char *s, size_t n)
{
	size_t i = 0;
	int line = 1, line_starting = 1;
	while (i < n) {
		size_t j = i;
		while (j + 1 < n && !(s[j] == '{' && (s[j + 1] == '{' || s[j + 1] == '%' || s[j + 1] == '#')))
			j++;
		if (j + 1 >= n) {
			push(p, (JTok){.t = JT_TEXT, .line = line, .s = s + i, .n = n - i});
			break;
		}
		char kind = s[j + 1];
		int sign = j + 2 < n && (s[j + 2] == '-' || s[j + 2] == '+') ? s[j + 2] : 0;
		int tline = line + lines_in(s + i, j - i);
		size_t body = j + 2 + (sign != 0);
		size_t raw = kind == '%' ? word_at(s, n, body, "raw") : 0;
		if (raw) { /* {% raw %}: text until {% endraw %}, untouched */
			size_t k = raw;
			while (k < n && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r'))
				k++;
			int rs = k < n && s[k] == '-' ? '-' : 0;
			if (rs)
				k++;
			if (k + 1 >= n || s[k] != '%' || s[k + 1] != '}')
				jj_fail(&p->c, tline, "expected '%%}' after 'raw'");
			text_token(p, s, i, j, line, sign, 1, line_starting);
			line = tline;
			size_t start = after_end(s, n, k + 2, rs, 0, &line), e = start;
			for (;; e++) {
				if (e + 1 >= n)
					jj_fail(&p->c, tline, "missing {%% endraw %%}");
				if (s[e] == '{' && s[e + 1] == '%') {
					size_t q = e + 2 + (s[e + 2] == '-' || s[e + 2] == '+');
					size_t w = word_at(s, n, q, "endraw");
					if (w)
						break;
				}
			}
			int es = s[e + 2] == '-' || s[e + 2] == '+' ? s[e + 2] : 0;
			text_token(p, s, start, e, line, es, 1, 0);
			line += lines_in(s + start, e - start);
			size_t q = word_at(s, n, e + 2 + (es != 0), "endraw");
			while (q < n && (s[q] == ' ' || s[q] == '\t' || s[q] == '\n' || s[q] == '\r'))
				line += s[q++] == '\n';
			int ee = q < n && (s[q] == '-' || s[q] == '+') ? s[q++] : 0;
			if (q + 1 >= n || s[q] != '%' || s[q + 1] != '}')
				jj_fail(&p->c, line, "expected '%%}' after 'endraw'");
			i = after_end(s, n, q + 2, ee, 1, &line);
			line_starting = i > 0 && s[i - 1] == '\n';
			continue;
		}
		text_token(p, s, i, j, line, sign, kind != '{', line_starting);
		line = tline;
		if (kind == '#') {
			size_t k = body;
			while (k + 1 < n && !(s[k] == '#' && s[k + 1] == '}'))
				k++;
			if (k + 1 >= n)
				jj_fail(&p->c, tline, "missing end of comment tag");
			int es = k > body && (s[k - 1] == '-' || s[k - 1] == '+') ? s[k - 1] : 0;
			line += lines_in(s + body, k - body);
			i = after_end(s, n, k + 2, es, 1, &line);
			line_starting = s[i - 1] == '\n';
			continue;
		}
		push(p, (JTok){.t = kind == '{' ? JT_VBEGIN : JT_BBEGIN, .line = line});
		size_t pos = body;
		int es = 0;
		lex_tag(p, s, n, &pos, &line, kind == '%', &es);
		push(p, (JTok){.t = kind == '{' ? JT_VEND : JT_BEND, .line = line});
		i = after_end(s, n, pos, es, kind == '%', &line);
		line_starting = s[i - 1] == '\n';
	}
	push(p, (JTok){.t = JT_EOF, .line = line});
}

/* ---- parser ---- */

static JTok *cur(JP *p)
{
	return &p->tk[p->i];
}

static int is_op(const JTok *t, const char *op)
{
	return t->t == JT_OP && strlen(op) == t->n && !memcmp(t->s, op, t->n);
}

static int is_name(const JTok *t, const char *name)
{
	return t->t == JT_NAME && strlen(name) == t->n && !memcmp(t->s, name, t->n);
}

static int accept_op(JP *p, const char *op)
{
	if (!is_op(cur(p), op))
		return 0;
	p->i++;
	return 1;
}

static int accept_name(JP *p, const char *name)
{
	if (!is_name(cur(p), name))
		return 0;
	p->i++;
	return 1;
}

/* What a token is, for messages. */
static const char *tok_desc(JP *p, const JTok *t)
{
	switch (t->t) {
	case JT_EOF: return "end of template";
	case JT_TEXT: return "text";
	case JT_VBEGIN: return "'{{'";
	case JT_VEND: return "'}}'";
	case JT_BBEGIN: return "'{%'";
	case JT_BEND: return "'%}'";
	case JT_STR: return "a string";
	case JT_INT:
	case JT_FLOAT: return "a number";
	default: return arena_printf(p->A, "'%.*s'", (int)(t->n < 40 ? t->n : 40), t->s);
	}
}

static void expect_op(JP *p, const char *op)
{
	if (!accept_op(p, op))
		jj_fail(&p->c, cur(p)->line, "expected '%s', got %s", op, tok_desc(p, cur(p)));
}

static void expect(JP *p, int type, const char *what)
{
	if (cur(p)->t != type)
		jj_fail(&p->c, cur(p)->line, "expected %s, got %s", what, tok_desc(p, cur(p)));
	p->i++;
}

static const char *expect_name(JP *p)
{
	JTok *t = cur(p);
	if (t->t != JT_NAME)
		jj_fail(&p->c, t->line, "expected a name, got %s", tok_desc(p, t));
	p->i++;
	char *s = arena_alloc(p->A, t->n + 1);
	memcpy(s, t->s, t->n);
	return s;
}

static JNode *node(JP *p, int kind, int line)
{
	JNode *e = arena_alloc(p->A, sizeof *e);
	e->kind = kind, e->line = line;
	return e;
}

static void add(JP *p, JNodes *v, JNode *e)
{
	if ((v->n & (v->n - 1)) == 0 || v->n == 0) { /* grow at powers of two */
		int cap = v->n ? 2 * v->n : 4;
		JNode **w = arena_alloc(p->A, sizeof *w * (size_t)cap);
		if (v->n)
			memcpy(w, v->v, sizeof *w * (size_t)v->n);
		v->v = w;
	}
	v->v[v->n++] = e;
}

static void add_name(JP *p, JNode *e, const char *name)
{
	const char **w = arena_alloc(p->A, sizeof *w * (size_t)(e->nnames + 1));
	if (e->nnames)
		memcpy(w, e->names, sizeof *w * (size_t)e->nnames);
	w[e->nnames++] = name;
	e->names = w;
}

static void enter(JP *p)
{
	if (++p->depth > JJ_MAX_DEPTH)
		jj_fail(&p->c, cur(p)->line, "nested too deeply");
}

static JNode *parse_expr(JP *p);
static JNode *parse_or(JP *p);
static JNode *parse_unary(JP *p, int with_filter);
static JNode *parse_primary(JP *p);
static JNode *parse_postfix(JP *p, JNode *e);

/* Call arguments after '(': positional ones into e->args, name=value ones into e->names / e->kw. */
static void parse_args(JP *p, JNode *e)
{
	while (!accept_op(p, ")")) {
		if (e->args.n || e->kw.n)
			expect_op(p, ",");
		if (accept_op(p, ")"))
			break;
		if (is_op(cur(p), "*") || is_op(cur(p), "**"))
			jj_fail(&p->c, cur(p)->line, "*args and **kwargs are not supported");
		if (cur(p)->t == JT_NAME && is_op(&p->tk[p->i + 1], "=")) {
			add_name(p, e, expect_name(p));
			p->i++;
			add(p, &e->kw, parse_expr(p));
		} else {
			if (e->kw.n)
				jj_fail(&p->c, cur(p)->line, "a positional argument after a keyword argument");
			add(p, &e->args, parse_expr(p));
		}
	}
}

/* A filter or test name, and its arguments when '(' follows. */
static JNode *parse_named_call(JP *p, int kind, JNode *a)
{
	JNode *e = node(p, kind, cur(p)->line);
	e->a = a;
	const char *name = expect_name(p);
	e->s = name, e->sl = strlen(name);
	if (kind == JN_FILTER && !jj_filter_id(e->s, e->sl))
		jj_fail(&p->c, e->line, "no filter named '%s'", name);
	if (kind == JN_TEST && !jj_test_id(e->s, e->sl))
		jj_fail(&p->c, e->line, "no test named '%s'", name);
	if (accept_op(p, "("))
		parse_args(p, e);
	return e;
}

/* Filters ('|'), tests ('is') and calls after a unary expression. */
static JNode *parse_filter_expr(JP *p, JNode *e)
{
	for (;;) {
		JTok *t = cur(p);
		if (accept_op(p, "|")) {
			e = parse_named_call(p, JN_FILTER, e);
		} else if (accept_name(p, "is")) {
			int neg = accept_name(p, "not");
			e = parse_named_call(p, JN_TEST, e);
			e->negate = neg;
			JTok *u = cur(p);
			if (!e->args.n && !e->kw.n && p->tk[p->i - 1].t == JT_NAME &&
			    (u->t == JT_NAME || u->t == JT_STR || u->t == JT_INT || u->t == JT_FLOAT || is_op(u, "[") ||
			     is_op(u, "{")) &&
			    !is_name(u, "else") && !is_name(u, "or") && !is_name(u, "and")) {
				enter(p);
				add(p, &e->args, parse_postfix(p, parse_primary(p)));
				p->depth--;
			}
		} else if (is_op(t, "(")) {
			e = parse_postfix(p, e);
		} else
			return e;
	}
}

/* Subscripts, attributes and calls. */
static JNode *parse_postfix(JP *p, JNode *e)
{
	for (;;) {
		int line = cur(p)->line;
		if (accept_op(p, ".")) {
			JTok *t = cur(p);
			if (t->t == JT_INT) {
				JNode *g = node(p, JN_ITEM, line);
				g->a = e, g->b = node(p, JN_CONST, line), g->b->k = jv_int(t->i);
				p->i++;
				e = g;
				continue;
			}
			JNode *g = node(p, JN_ATTR, line);
			g->a = e;
			g->s = expect_name(p), g->sl = strlen(g->s);
			e = g;
		} else if (accept_op(p, "[")) {
			JNode *part[3] = {0};
			int k = 0, slice = 0;
			for (;;) {
				if (is_op(cur(p), "]"))
					break;
				if (accept_op(p, ":")) {
					if (++k > 2)
						jj_fail(&p->c, line, "a slice has at most three parts");
					slice = 1;
					continue;
				}
				if (part[k])
					jj_fail(&p->c, cur(p)->line, "expected ':' or ']', got %s", tok_desc(p, cur(p)));
				part[k] = parse_expr(p);
			}
			expect_op(p, "]");
			if (!slice && !part[0])
				jj_fail(&p->c, line, "empty subscript");
			JNode *g = node(p, slice ? JN_SLICE : JN_ITEM, line);
			g->a = e;
			if (slice) {
				JNode *sl = node(p, JN_LIST, line);
				for (int j = 0; j < 3; j++) { /* absent parts are JN_CONST none */
					JNode *x = part[j];
					if (!x)
						x = node(p, JN_CONST, line), x->k = jv_none();
					add(p, &sl->args, x);
				}
				g->b = sl;
			} else
				g->b = part[0];
			e = g;
		} else if (accept_op(p, "(")) {
			JNode *g = node(p, JN_CALL, line);
			g->a = e;
			parse_args(p, g);
			e = g;
		} else
			return e;
	}
}

static JNode *parse_primary(JP *p)
{
	JTok *t = cur(p);
	JNode *e = node(p, JN_CONST, t->line);
	switch (t->t) {
	case JT_NAME:
		p->i++;
		if (is_name(t, "true") || is_name(t, "True"))
			e->k = jv_bool(1);
		else if (is_name(t, "false") || is_name(t, "False"))
			e->k = jv_bool(0);
		else if (is_name(t, "none") || is_name(t, "None"))
			e->k = jv_none();
		else {
			char *s = arena_alloc(p->A, t->n + 1);
			memcpy(s, t->s, t->n);
			e->kind = JN_NAME, e->s = s, e->sl = t->n;
		}
		return e;
	case JT_STR: { /* adjacent strings concatenate */
		size_t n = 0;
		int j = p->i;
		while (p->tk[j].t == JT_STR)
			n += p->tk[j++].n;
		char *s = arena_alloc(p->A, n + 1);
		n = 0;
		for (; p->i < j; p->i++)
			memcpy(s + n, p->tk[p->i].s, p->tk[p->i].n), n += p->tk[p->i].n;
		e->k.t = JV_STR, e->k.u.s.s = s, e->k.u.s.n = n;
		return e;
	}
	case JT_INT:
		p->i++;
		e->k = jv_int(t->i);
		return e;
	case JT_FLOAT:
		p->i++;
		e->k = jv_float(t->f);
		return e;
	default:
		break;
	}
	enter(p);
	if (accept_op(p, "(")) {
		if (accept_op(p, ")")) {
			e->kind = JN_TUPLE;
		} else {
			JNode *x = parse_expr(p);
			if (is_op(cur(p), ",")) {
				e->kind = JN_TUPLE;
				add(p, &e->args, x);
				while (accept_op(p, ",") && !is_op(cur(p), ")"))
					add(p, &e->args, parse_expr(p));
			} else
				e = x;
			expect_op(p, ")");
		}
	} else if (accept_op(p, "[")) {
		e->kind = JN_LIST;
		while (!accept_op(p, "]")) {
			if (e->args.n)
				expect_op(p, ",");
			if (accept_op(p, "]"))
				break;
			add(p, &e->args, parse_expr(p));
		}
	} else if (accept_op(p, "{")) {
		e->kind = JN_DICT; /* keys in args, values in kw */
		while (!accept_op(p, "}")) {
			if (e->args.n)
				expect_op(p, ",");
			if (accept_op(p, "}"))
				break;
			add(p, &e->args, parse_expr(p));
			expect_op(p, ":");
			add(p, &e->kw, parse_expr(p));
		}
	} else
		jj_fail(&p->c, t->line, "unexpected %s", tok_desc(p, t));
	p->depth--;
	return e;
}

static JNode *parse_unary(JP *p, int with_filter)
{
	enter(p);
	JTok *t = cur(p);
	JNode *e;
	if (accept_op(p, "-") || accept_op(p, "+")) {
		e = node(p, is_op(t, "-") ? JN_NEG : JN_POS, t->line);
		e->a = parse_unary(p, 0);
	} else
		e = parse_primary(p);
	e = parse_postfix(p, e);
	if (with_filter)
		e = parse_filter_expr(p, e);
	p->depth--;
	return e;
}

static JNode *binary(JP *p, int op, JNode *a, JNode *b, int line)
{
	JNode *e = node(p, JN_BIN, line);
	e->op = op, e->a = a, e->b = b;
	return e;
}

static JNode *parse_pow(JP *p)
{
	JNode *e = parse_unary(p, 1);
	while (is_op(cur(p), "**")) {
		int line = cur(p)->line;
		p->i++;
		e = binary(p, JO_POW, e, parse_unary(p, 1), line);
	}
	return e;
}

static JNode *parse_math2(JP *p)
{
	JNode *e = parse_pow(p);
	for (;;) {
		JTok *t = cur(p);
		int op = is_op(t, "*") ? JO_MUL : is_op(t, "/") ? JO_DIV : is_op(t, "//") ? JO_FLOORDIV : is_op(t, "%") ? JO_MOD : -1;
		if (op < 0)
			return e;
		p->i++;
		e = binary(p, op, e, parse_pow(p), t->line);
	}
}

static JNode *parse_concat(JP *p)
{
	JNode *e = parse_math2(p);
	if (!is_op(cur(p), "~"))
		return e;
	JNode *c = node(p, JN_CONCAT, cur(p)->line);
	add(p, &c->args, e);
	while (accept_op(p, "~"))
		add(p, &c->args, parse_math2(p));
	return c;
}

static JNode *parse_math1(JP *p)
{
	JNode *e = parse_concat(p);
	for (;;) {
		JTok *t = cur(p);
		int op = is_op(t, "+") ? JO_ADD : is_op(t, "-") ? JO_SUB : -1;
		if (op < 0)
			return e;
		p->i++;
		e = binary(p, op, e, parse_concat(p), t->line);
	}
}

/* Comparisons; a chain a < b < c becomes (a < b) and (b < c). */
static JNode *parse_compare(JP *p)
{
	JNode *e = parse_math1(p), *left = e, *all = NULL;
	for (;;) {
		JTok *t = cur(p);
		int op = is_op(t, "==") ? JO_EQ : is_op(t, "!=") ? JO_NE : is_op(t, "<") ? JO_LT : is_op(t, "<=") ? JO_LE :
		         is_op(t, ">") ? JO_GT : is_op(t, ">=") ? JO_GE : is_name(t, "in") ? JO_IN : -1;
		if (op < 0 && is_name(t, "not") && is_name(&p->tk[p->i + 1], "in"))
			op = JO_NOTIN, p->i++;
		if (op < 0)
			return all ? all : e;
		p->i++;
		JNode *right = parse_math1(p);
		JNode *c = binary(p, op, left, right, t->line);
		c->kind = JN_CMP;
		if (!all)
			all = c;
		else {
			JNode *a = node(p, JN_AND, t->line);
			a->a = all, a->b = c;
			all = a;
		}
		left = right;
	}
}

static JNode *parse_not(JP *p)
{
	JTok *t = cur(p);
	if (accept_name(p, "not")) {
		enter(p);
		JNode *e = node(p, JN_NOT, t->line);
		e->a = parse_not(p);
		p->depth--;
		return e;
	}
	return parse_compare(p);
}

/* `a or b` (or = 1) over `a and b` (or = 0) over not. */
static JNode *parse_logic(JP *p, int or)
{
	JNode *e = or ? parse_logic(p, 0) : parse_not(p);
	while (is_name(cur(p), or ? "or" : "and")) {
		JNode *a = node(p, or ? JN_OR : JN_AND, cur(p)->line);
		p->i++;
		a->a = e, a->b = or ? parse_logic(p, 0) : parse_not(p);
		e = a;
	}
	return e;
}

static JNode *parse_or(JP *p)
{
	return parse_logic(p, 1);
}

/* A full expression: `x if c else y` over or. */
static JNode *parse_expr(JP *p)
{
	enter(p);
	JNode *e = parse_or(p);
	while (is_name(cur(p), "if")) {
		JNode *c = node(p, JN_COND, cur(p)->line);
		p->i++;
		c->a = parse_or(p);
		c->b = e;
		if (accept_name(p, "else"))
			c->c = parse_expr(p);
		e = c;
	}
	p->depth--;
	return e;
}

/* An expression or a bare tuple "a, b" (set and output values, for iterables). */
static JNode *parse_tuple(JP *p, int condexpr)
{
	int line = cur(p)->line;
	JNode *e = condexpr ? parse_expr(p) : parse_or(p);
	if (!is_op(cur(p), ","))
		return e;
	JNode *t = node(p, JN_TUPLE, line);
	add(p, &t->args, e);
	while (accept_op(p, ",")) {
		JTok *u = cur(p);
		if (u->t == JT_BEND || u->t == JT_VEND || is_name(u, "if"))
			break;
		add(p, &t->args, condexpr ? parse_expr(p) : parse_or(p));
	}
	return t;
}

static JNodes parse_body(JP *p, const char *const *ends, const char **which);

/* The end of a block tag: '%}'. */
static void end_tag(JP *p)
{
	expect(p, JT_BEND, "'%}'");
}

/* Names separated by commas (for and set targets). */
static void parse_targets(JP *p, JNode *e)
{
	do
		add_name(p, e, expect_name(p));
	while (accept_op(p, ","));
}

static JNode *parse_for(JP *p, int line)
{
	JNode *e = node(p, JN_FOR, line);
	parse_targets(p, e);
	if (!accept_name(p, "in"))
		jj_fail(&p->c, cur(p)->line, "expected 'in', got %s", tok_desc(p, cur(p)));
	e->a = parse_tuple(p, 0);
	if (accept_name(p, "if"))
		e->b = parse_expr(p);
	if (is_name(cur(p), "recursive"))
		jj_fail(&p->c, cur(p)->line, "recursive loops are not supported");
	end_tag(p);
	const char *which;
	static const char *const e1[] = {"endfor", "else", NULL}, *const e2[] = {"endfor", NULL};
	e->args = parse_body(p, e1, &which);
	if (!strcmp(which, "else")) {
		end_tag(p);
		e->kw = parse_body(p, e2, &which);
	}
	end_tag(p);
	return e;
}

static JNode *parse_if(JP *p, int line)
{
	JNode *e = node(p, JN_IF, line);
	e->a = parse_tuple(p, 1);
	end_tag(p);
	const char *which;
	static const char *const e1[] = {"endif", "elif", "else", NULL}, *const e2[] = {"endif", NULL};
	e->args = parse_body(p, e1, &which);
	if (!strcmp(which, "elif")) {
		enter(p);
		add(p, &e->kw, parse_if(p, p->tk[p->i - 1].line));
		p->depth--;
		return e;
	}
	if (!strcmp(which, "else")) {
		end_tag(p);
		e->kw = parse_body(p, e2, &which);
	}
	end_tag(p);
	return e;
}

/* The rest of a block tag with a body: '%}', the body up to {% END %}, its '%}'. */
static JNode *block_body(JP *p, JNode *e, const char *end)
{
	const char *ends[] = {end, NULL}, *which;
	end_tag(p);
	e->args = parse_body(p, ends, &which);
	end_tag(p);
	return e;
}

static JNode *parse_set(JP *p, int line)
{
	JNode *e = node(p, JN_SET, line);
	const char *name = expect_name(p);
	if (accept_op(p, ".")) {
		e->kind = JN_SETATTR;
		add_name(p, e, name);
		add_name(p, e, expect_name(p));
	} else {
		add_name(p, e, name);
		while (accept_op(p, ","))
			add_name(p, e, expect_name(p));
	}
	if (e->kind == JN_SET && e->nnames == 1 && (cur(p)->t == JT_BEND || is_op(cur(p), "|"))) {
		e->kind = JN_SETBLOCK;
		JNode *f = NULL;
		while (accept_op(p, "|"))
			f = parse_named_call(p, JN_FILTER, f);
		e->a = f;
		return block_body(p, e, "endset");
	}
	expect_op(p, "=");
	e->a = parse_tuple(p, 1);
	end_tag(p);
	return e;
}

static JNode *parse_macro(JP *p, int line)
{
	JNode *e = node(p, JN_MACRO, line);
	e->s = expect_name(p), e->sl = strlen(e->s);
	expect_op(p, "(");
	while (!accept_op(p, ")")) {
		if (e->nnames)
			expect_op(p, ",");
		if (accept_op(p, ")"))
			break;
		add_name(p, e, expect_name(p));
		if (accept_op(p, "="))
			add(p, &e->kw, parse_expr(p));
		else if (e->kw.n)
			jj_fail(&p->c, cur(p)->line, "a parameter without a default after one with a default");
	}
	end_tag(p);
	const char *which;
	static const char *const ends[] = {"endmacro", NULL};
	e->args = parse_body(p, ends, &which);
	if (cur(p)->t == JT_NAME) /* {% endmacro name %} */
		p->i++;
	end_tag(p);
	return e;
}

/* One block tag's statement, its name just read. */
static JNode *parse_stmt(JP *p, const JTok *t)
{
	int line = t->line;
	if (is_name(t, "for"))
		return parse_for(p, line);
	if (is_name(t, "if"))
		return parse_if(p, line);
	if (is_name(t, "set"))
		return parse_set(p, line);
	if (is_name(t, "macro"))
		return parse_macro(p, line);
	if (is_name(t, "break") || is_name(t, "continue")) {
		end_tag(p);
		return node(p, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, line);
	}
	if (is_name(t, "filter")) {
		JNode *e = node(p, JN_FILTERBLOCK, line), *f = NULL;
		do
			f = parse_named_call(p, JN_FILTER, f);
		while (accept_op(p, "|"));
		e->a = f;
		return block_body(p, e, "endfilter");
	}
	if (is_name(t, "generation")) /* transformers' assistant-mask block renders its body */
		return block_body(p, node(p, JN_BLOCK, line), "endgeneration");
	jj_fail(&p->c, line, "unknown or unsupported tag '%.*s'", (int)(t->n < 40 ? t->n : 40), t->s);
}

/* Statements until one of the tags ends[] (NULL-terminated; NULL ends: until the end of the template).
** *which is the end tag found; the position is after its name. */
static JNodes parse_body(JP *p, const char *const *ends, const char **which)
{
	JNodes body = {0};
	enter(p);
	for (;;) {
		JTok *t = cur(p);
		if (t->t == JT_EOF) {
			if (ends && ends[0])
				jj_fail(&p->c, t->line, "unexpected end of template: a block is still open (expected '%s')", ends[0]);
			break;
		}
		p->i++;
		if (t->t == JT_TEXT) {
			JNode *e = node(p, JN_TEXT, t->line);
			e->s = t->s, e->sl = t->n;
			add(p, &body, e);
		} else if (t->t == JT_VBEGIN) {
			JNode *e = node(p, JN_OUT, t->line);
			e->a = parse_tuple(p, 1);
			expect(p, JT_VEND, "'}}'");
			add(p, &body, e);
		} else if (t->t == JT_BBEGIN) {
			JTok *nt = cur(p);
			if (nt->t != JT_NAME)
				jj_fail(&p->c, nt->line, "expected a tag name, got %s", tok_desc(p, nt));
			p->i++;
			int k = 0;
			for (; ends && ends[k]; k++)
				if (is_name(nt, ends[k]))
					break;
			if (ends && ends[k]) {
				*which = ends[k];
				p->depth--;
				return body;
			}
			static const char *const stray[] = {"endfor", "endif", "else", "elif", "endset", "endmacro", "endfilter",
			                                    "endgeneration", "endraw", NULL};
			for (int j = 0; stray[j]; j++)
				if (is_name(nt, stray[j]))
					jj_fail(&p->c, nt->line, "unexpected '%s'%s%s%s", stray[j], ends ? " (expected '" : "",
					        ends ? ends[0] : "", ends ? "')" : "");
			add(p, &body, parse_stmt(p, nt));
		} else
			jj_fail(&p->c, t->line, "unexpected %s", tok_desc(p, t));
	}
	p->depth--;
	return body;
}

int jj_parse(JjTmpl **out, const char *src, size_t n, const char *name, char *err, size_t len)
{
	*out = NULL;
	JjTmpl *t = calloc(1, sizeof *t);
	if (!t)
		return seterr(err, len, "%s: out of memory", name);
	snprintf(t->name, sizeof t->name, "%s", name);
	/* newlines normalised to \n, one trailing newline dropped (jinja2's keep_trailing_newline=False) */
	char *s = arena_alloc(&t->A, n + 1);
	size_t k = 0;
	for (size_t i = 0; i < n; i++) {
		if (src[i] == '\r') {
			s[k++] = '\n';
			if (i + 1 < n && src[i + 1] == '\n')
				i++;
		} else
			s[k++] = src[i];
	}
	if (k && s[k - 1] == '\n')
		k--;
	JP p = {.c = {.err = err, .len = len, .name = t->name}, .A = &t->A, .src = s, .srcn = k};
	if (setjmp(p.c.jb)) {
		jj_free(t);
		return -1;
	}
	lex(&p, p.src, p.srcn);
	t->body = parse_body(&p, NULL, NULL);
	*out = t;
	return 0;
}

void jj_free(JjTmpl *t)
{
	if (!t)
		return;
	arena_free(&t->A);
	free(t);
}
