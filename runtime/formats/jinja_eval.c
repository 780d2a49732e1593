/*
** runtime/formats/jinja_eval.c — runs a parsed Jinja template (jinja.c) over values: scopes, statements,
** expressions, Python's str()/repr()/truth/equality/ordering, attribute and item access, calls.
**
** Semantics follow jinja2 as transformers runs it: an undefined name is a value that prints as "", is
** false, iterates as empty and fails on attribute access, item access, arithmetic and calls; a missing
** dict key or list index is undefined (not an error); `set` binds in the innermost scope (a for loop's
** body is a scope, so a loop cannot change outer names except through a namespace); macros see the
** template's top-level names. Everything is allocated in one arena per render, with a byte cap, and
** every error longjmps out with one line naming the template line.
*/
#include "jinja_impl.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define JJ_MAX_BYTES ((size_t)64 << 20)
#define JJ_MAX_STEPS 20000000L
#define JJ_MAX_RECURSION 1500

/* ---- values ---- */

void *jr_alloc(JR *r, size_t n)
{
	if (n > r->cap_bytes || r->A.used > r->cap_bytes - n)
		jj_fail(&r->c, r->line, "the template needs more than %zu MiB of memory", r->cap_bytes >> 20);
	return arena_alloc(&r->A, n);
}

JVal jv_str(JR *r, const char *s, size_t n)
{
	char *p = jr_alloc(r, n + 1);
	if (n)
		memcpy(p, s, n);
	return (JVal){.t = JV_STR, .u.s = {p, n}};
}

JVal jv_cstr(const char *s)
{
	return (JVal){.t = JV_STR, .u.s = {s, strlen(s)}};
}

JVal jv_int(int64_t i)
{
	return (JVal){.t = JV_INT, .u.i = i};
}

JVal jv_float(double f)
{
	return (JVal){.t = JV_FLOAT, .u.f = f};
}

JVal jv_bool(int b)
{
	return (JVal){.t = JV_BOOL, .u.b = !!b};
}

JVal jv_none(void)
{
	return (JVal){.t = JV_NONE};
}

JVal jv_undef(const char *name)
{
	return (JVal){.t = JV_UNDEF, .u.s = {name, name ? strlen(name) : 0}};
}

JVal jv_list(JR *r, size_t cap)
{
	JList *l = jr_alloc(r, sizeof *l);
	if (cap) {
		l->v = jr_alloc(r, sizeof *l->v * cap);
		l->cap = cap;
	}
	return (JVal){.t = JV_LIST, .u.l = l};
}

JVal jv_dict(JR *r)
{
	return (JVal){.t = JV_DICT, .u.d = jr_alloc(r, sizeof(JDict))};
}

void jl_push(JR *r, JList *l, JVal v)
{
	if (l->n == l->cap) {
		size_t cap = 2 * l->cap + 4;
		JVal *w = jr_alloc(r, sizeof *w * cap);
		if (l->n)
			memcpy(w, l->v, sizeof *w * l->n);
		l->v = w, l->cap = cap;
	}
	l->v[l->n++] = v;
}

JVal *jd_getv(const JDict *d, JVal k)
{
	for (size_t i = 0; i < d->n; i++)
		if (jv_equal(d->k[i], k))
			return &d->v[i];
	return NULL;
}

JVal *jd_get(const JDict *d, const char *key, size_t n)
{
	for (size_t i = 0; i < d->n; i++)
		if (d->k[i].t == JV_STR && d->k[i].u.s.n == n && !memcmp(d->k[i].u.s.s, key, n))
			return &d->v[i];
	return NULL;
}

void jd_set(JR *r, JDict *d, JVal k, JVal v)
{
	JVal *old = jd_getv(d, k);
	if (old) {
		*old = v;
		return;
	}
	if (d->n == d->cap) {
		size_t cap = 2 * d->cap + 4;
		JVal *nk = jr_alloc(r, sizeof *nk * cap), *nv = jr_alloc(r, sizeof *nv * cap);
		if (d->n)
			memcpy(nk, d->k, sizeof *nk * d->n), memcpy(nv, d->v, sizeof *nv * d->n);
		d->k = nk, d->v = nv, d->cap = cap;
	}
	d->k[d->n] = k, d->v[d->n] = v;
	d->n++;
}

void jb_add(JR *r, JBuf *b, const char *s, size_t n)
{
	if (b->n + n + 1 > b->cap) {
		size_t cap = 2 * (b->n + n) + 64;
		char *p = jr_alloc(r, cap);
		if (b->n)
			memcpy(p, b->s, b->n);
		b->s = p, b->cap = cap;
	}
	if (n)
		memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
}

void jb_adds(JR *r, JBuf *b, const char *s)
{
	jb_add(r, b, s, strlen(s));
}

int jv_truthy(JVal v)
{
	switch (v.t) {
	case JV_BOOL: return v.u.b;
	case JV_INT: return v.u.i != 0;
	case JV_FLOAT: return v.u.f != 0;
	case JV_STR: return v.u.s.n != 0;
	case JV_LIST: return v.u.l->n != 0;
	case JV_DICT: return v.u.d->n != 0 || v.flag;
	case JV_FUNC: return 1;
	default: return 0;
	}
}

const char *jv_type(JVal v)
{
	static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str", "list", "dict",
	                                    "function"};
	if (v.t == JV_LIST && v.flag)
		return "tuple";
	if (v.t == JV_DICT && v.flag)
		return "Namespace";
	return names[v.t];
}

static int is_num(JVal v)
{
	return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT;
}

static double num(JVal v)
{
	return v.t == JV_FLOAT ? v.u.f : v.t == JV_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t inum(JVal v)
{
	return v.t == JV_INT ? v.u.i : v.u.b;
}

int jv_equal(JVal a, JVal b)
{
	if (is_num(a) && is_num(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT)
			return inum(a) == inum(b);
		return num(a) == num(b);
	}
	if (a.t != b.t)
		return 0;
	switch (a.t) {
	case JV_UNDEF:
	case JV_NONE: return 1;
	case JV_STR: return a.u.s.n == b.u.s.n && !memcmp(a.u.s.s, b.u.s.s, a.u.s.n);
	case JV_LIST:
		if (a.flag != b.flag || a.u.l->n != b.u.l->n)
			return 0;
		for (size_t i = 0; i < a.u.l->n; i++)
			if (!jv_equal(a.u.l->v[i], b.u.l->v[i]))
				return 0;
		return 1;
	case JV_DICT:
		if (a.u.d == b.u.d)
			return 1;
		if (a.flag || b.flag || a.u.d->n != b.u.d->n)
			return 0;
		for (size_t i = 0; i < a.u.d->n; i++) {
			JVal *w = jd_getv(b.u.d, a.u.d->k[i]);
			if (!w || !jv_equal(a.u.d->v[i], *w))
				return 0;
		}
		return 1;
	default: return a.u.fn == b.u.fn;
	}
}


int jv_compare(JR *r, JVal a, JVal b, int fold)
{
	if (is_num(a) && is_num(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT)
			return inum(a) < inum(b) ? -1 : inum(a) > inum(b);
		double x = num(a), y = num(b);
		return x < y ? -1 : x > y;
	}
	if (a.t == JV_STR && b.t == JV_STR) {
		if (fold)
			a = jj_lower(r, a), b = jj_lower(r, b);
		size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
		int c = memcmp(a.u.s.s, b.u.s.s, n);
		if (c)
			return c < 0 ? -1 : 1;
		return a.u.s.n < b.u.s.n ? -1 : a.u.s.n > b.u.s.n;
	}
	if (a.t == JV_LIST && b.t == JV_LIST && a.flag == b.flag) {
		for (size_t i = 0; i < a.u.l->n && i < b.u.l->n; i++) {
			if (jv_equal(a.u.l->v[i], b.u.l->v[i]))
				continue;
			return jv_compare(r, a.u.l->v[i], b.u.l->v[i], fold);
		}
		return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
	}
	jj_fail(&r->c, r->line, "'<' not supported between instances of '%s' and '%s'", jv_type(a), jv_type(b));
}

/* ---- str() and repr() ---- */

static void repr_str(JR *r, JBuf *b, const char *s, size_t n)
{
	int sq = memchr(s, '\'', n) != NULL, dq = memchr(s, '"', n) != NULL;
	char q = sq && !dq ? '"' : '\'';
	jb_add(r, b, &q, 1);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char tmp[8];
		if (c == (unsigned char)q)
			tmp[0] = '\\', tmp[1] = (char)c, jb_add(r, b, tmp, 2);
		else if (jj_escape(r, b, c))
			continue;
		else if (c < 0x20 || c == 0x7f)
			snprintf(tmp, sizeof tmp, "\\x%02x", c), jb_add(r, b, tmp, 4);
		else if (c == 0xc2 && i + 1 < n && (unsigned char)s[i + 1] <= 0xa0) /* U+0080..U+00A0 */
			snprintf(tmp, sizeof tmp, "\\x%02x", (unsigned char)s[i + 1]), jb_add(r, b, tmp, 4), i++;
		else
			jb_add(r, b, (const char *)&s[i], 1);
	}
	jb_add(r, b, &q, 1);
}

static void to_text(JR *r, JBuf *b, JVal v, int repr)
{
	char tmp[40];
	switch (v.t) {
	case JV_UNDEF: break;
	case JV_NONE: jb_adds(r, b, "None"); break;
	case JV_BOOL: jb_adds(r, b, v.u.b ? "True" : "False"); break;
	case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i), jb_adds(r, b, tmp); break;
	case JV_FLOAT: jj_float_repr(v.u.f, tmp, sizeof tmp), jb_adds(r, b, tmp); break;
	case JV_STR:
		if (repr)
			repr_str(r, b, v.u.s.s, v.u.s.n);
		else
			jb_add(r, b, v.u.s.s, v.u.s.n);
		break;
	case JV_LIST:
		jb_adds(r, b, v.flag ? "(" : "[");
		for (size_t i = 0; i < v.u.l->n; i++) {
			if (i)
				jb_adds(r, b, ", ");
			to_text(r, b, v.u.l->v[i], 1);
		}
		jb_adds(r, b, v.flag ? (v.u.l->n == 1 ? ",)" : ")") : "]");
		break;
	case JV_DICT:
		if (v.flag)
			jb_adds(r, b, "<Namespace ");
		jb_adds(r, b, "{");
		for (size_t i = 0; i < v.u.d->n; i++) {
			if (i)
				jb_adds(r, b, ", ");
			to_text(r, b, v.u.d->k[i], 1);
			jb_adds(r, b, ": ");
			to_text(r, b, v.u.d->v[i], 1);
		}
		jb_adds(r, b, v.flag ? "}>" : "}");
		break;
	default:
		jb_adds(r, b, "<function ");
		jb_adds(r, b, v.u.fn->name ? v.u.fn->name : "?");
		jb_adds(r, b, ">");
	}
}

void jv_str_into(JR *r, JBuf *b, JVal v)
{
	to_text(r, b, v, 0);
}

void jv_repr_into(JR *r, JBuf *b, JVal v)
{
	to_text(r, b, v, 1);
}

JVal jv_to_str(JR *r, JVal v)
{
	if (v.t == JV_STR)
		return v;
	JBuf b = {0};
	to_text(r, &b, v, 0);
	return (JVal){.t = JV_STR, .u.s = {b.s ? b.s : "", b.n}};
}

/* ---- access ---- */

static JVal bound(JR *r, int kind, int id, JVal self, const char *name)
{
	JFunc *f = jr_alloc(r, sizeof *f);
	f->kind = kind, f->id = id, f->self = self, f->name = name;
	return (JVal){.t = JV_FUNC, .u.fn = f};
}

/* The name an undefined value was looked up by, for messages. */
static const char *undef_name(JR *r, JVal v)
{
	(void)r;
	return v.u.s.s ? v.u.s.s : "value";
}

JVal jv_getattr(JR *r, JVal obj, const char *name, size_t n, int line)
{
	r->line = line;
	if (obj.t == JV_UNDEF)
		jj_fail(&r->c, line, "'%s' is undefined", undef_name(r, obj));
	if (obj.t == JV_DICT && obj.flag) {
		JVal *v = jd_get(obj.u.d, name, n);
		return v ? *v : jv_undef(name);
	}
	int id = jj_method_id(obj.t, name, n);
	if (id)
		return bound(r, JF_METHOD, id, obj, name);
	if (obj.t == JV_DICT) {
		JVal *v = jd_get(obj.u.d, name, n);
		if (v)
			return *v;
	}
	return jv_undef(name);
}

/* Python's slice index adjustment for a sequence of n items. */
static void slice_range(JR *r, JVal *part, int64_t n, int64_t *start, int64_t *stop, int64_t *step, int line)
{
	for (int i = 0; i < 3; i++)
		if (part[i].t != JV_NONE && part[i].t != JV_INT && part[i].t != JV_BOOL)
			jj_fail(&r->c, line, "slice indices must be integers or none, not %s", jv_type(part[i]));
	*step = part[2].t == JV_NONE ? 1 : inum(part[2]);
	if (*step == 0)
		jj_fail(&r->c, line, "slice step cannot be zero");
	if (*step < -INT64_MAX)
		*step = -INT64_MAX;
	int64_t lo = *step < 0 ? -1 : 0, hi = *step < 0 ? n - 1 : n;
	for (int i = 0; i < 2; i++) {
		int64_t *out = i ? stop : start;
		if (part[i].t == JV_NONE) {
			*out = (*step < 0) == (i == 0) ? hi : lo;
			continue;
		}
		int64_t v = inum(part[i]);
		if (v < 0) {
			v = v < -n ? lo : v + n;
			if (v < lo)
				v = lo;
		} else if (v > hi)
			v = hi;
		*out = v;
	}
}

static JVal do_slice(JR *r, JVal obj, JVal *part, int line)
{
	int64_t start, stop, step;
	if (obj.t == JV_LIST) {
		slice_range(r, part, (int64_t)obj.u.l->n, &start, &stop, &step, line);
		JVal out = jv_list(r, 0);
		out.flag = obj.flag;
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
			jl_push(r, out.u.l, obj.u.l->v[i]);
		return out;
	}
	if (obj.t == JV_STR) {
		size_t ncp = jj_utf8_len(obj.u.s.s, obj.u.s.n);
		size_t *off = jr_alloc(r, sizeof *off * (ncp + 1));
		for (size_t i = 0, b = 0; i <= ncp; i++) {
			off[i] = b;
			if (i < ncp)
				b = jj_utf8_off(obj.u.s.s + b, obj.u.s.n - b, 1) + b;
		}
		slice_range(r, part, (int64_t)ncp, &start, &stop, &step, line);
		JBuf b = {0};
		jb_add(r, &b, "", 0);
		for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
			jb_add(r, &b, obj.u.s.s + off[i], off[i + 1] - off[i]);
		return (JVal){.t = JV_STR, .u.s = {b.s, b.n}};
	}
	if (obj.t == JV_UNDEF)
		jj_fail(&r->c, line, "'%s' is undefined", undef_name(r, obj));
	return jv_undef(NULL);
}

JVal jv_getitem(JR *r, JVal obj, JVal key, int line)
{
	r->line = line;
	switch (obj.t) {
	case JV_UNDEF: jj_fail(&r->c, line, "'%s' is undefined", undef_name(r, obj));
	case JV_DICT: {
		JVal *v = jd_getv(obj.u.d, key);
		if (v)
			return *v;
		break;
	}
	case JV_LIST:
		if (key.t == JV_INT || key.t == JV_BOOL) {
			int64_t i = inum(key), n = (int64_t)obj.u.l->n;
			if (i < 0)
				i += n;
			return i >= 0 && i < n ? obj.u.l->v[i] : jv_undef(NULL);
		}
		break;
	case JV_STR:
		if (key.t == JV_INT || key.t == JV_BOOL) {
			int64_t i = inum(key), n = (int64_t)jj_utf8_len(obj.u.s.s, obj.u.s.n);
			if (i < 0)
				i += n;
			if (i < 0 || i >= n)
				return jv_undef(NULL);
			size_t a = jj_utf8_off(obj.u.s.s, obj.u.s.n, i), b = jj_utf8_off(obj.u.s.s, obj.u.s.n, i + 1);
			return (JVal){.t = JV_STR, .u.s = {obj.u.s.s + a, b - a}};
		}
		break;
	default: break;
	}
	if (key.t == JV_STR && obj.t != JV_DICT)
		return jv_getattr(r, obj, key.u.s.s, key.u.s.n, line);
	if (key.t == JV_STR && obj.t == JV_DICT && !obj.flag && jj_method_id(JV_DICT, key.u.s.s, key.u.s.n))
		return jv_getattr(r, obj, key.u.s.s, key.u.s.n, line);
	return jv_undef(NULL);
}

JVal jv_iter(JR *r, JVal v, int line)
{
	switch (v.t) {
	case JV_UNDEF: return jv_list(r, 0);
	case JV_LIST: return v;
	case JV_DICT: {
		JVal l = jv_list(r, v.u.d->n);
		for (size_t i = 0; i < v.u.d->n; i++)
			jl_push(r, l.u.l, v.u.d->k[i]);
		return l;
	}
	case JV_STR: {
		JVal l = jv_list(r, v.u.s.n);
		for (size_t i = 0; i < v.u.s.n;) {
			size_t k = jj_utf8_off(v.u.s.s + i, v.u.s.n - i, 1);
			jl_push(r, l.u.l, (JVal){.t = JV_STR, .u.s = {v.u.s.s + i, k}});
			i += k;
		}
		return l;
	}
	default: jj_fail(&r->c, line, "'%s' object is not iterable", jv_type(v));
	}
}

/* ---- the tree ---- */

typedef enum { FLOW_NEXT, FLOW_BREAK, FLOW_CONTINUE } Flow;

static JVal eval(JR *r, const JNode *e, JFrame *f);
static Flow exec(JR *r, const JNodes *body, JFrame *f, JBuf *out);

static void step(JR *r, int line)
{
	r->line = line;
	if (++r->steps > r->max_steps)
		jj_fail(&r->c, line, "the template runs too long (more than %ld steps)", r->max_steps);
}

static JVal lookup(JR *r, JFrame *f, const char *name, size_t n)
{
	for (; f; f = f->up) {
		JVal *v = jd_get(&f->vars, name, n);
		if (v)
			return *v;
	}
	int g = jj_global_id(name, n);
	if (g)
		return bound(r, JF_GLOBAL, g, jv_none(), name);
	return jv_undef(name);
}

static void bind(JR *r, JFrame *f, const char *name, JVal v)
{
	jd_set(r, &f->vars, jv_cstr(name), v);
}

/* Bind names to v (one name: v itself; several: v's items, which must match in number). */
static void bind_targets(JR *r, JFrame *f, const char **names, int n, JVal v, int line)
{
	if (n == 1) {
		bind(r, f, names[0], v);
		return;
	}
	JVal it = jv_iter(r, v, line);
	if ((int64_t)it.u.l->n != n)
		jj_fail(&r->c, line, "cannot unpack %zu values into %d names", it.u.l->n, n);
	for (int i = 0; i < n; i++)
		bind(r, f, names[i], it.u.l->v[i]);
}

static JVal arith(JR *r, int op, JVal a, JVal b, int line)
{
	static const char *const sym[] = {"+", "-", "*", "/", "//", "%", "**"};
	if (is_num(a) && is_num(b)) {
		if (a.t != JV_FLOAT && b.t != JV_FLOAT && op != JO_DIV) {
			int64_t x = inum(a), y = inum(b), z = 0;
			int bad = 0;
			switch (op) {
			case JO_ADD: bad = __builtin_add_overflow(x, y, &z); break;
			case JO_SUB: bad = __builtin_sub_overflow(x, y, &z); break;
			case JO_MUL: bad = __builtin_mul_overflow(x, y, &z); break;
			case JO_FLOORDIV:
			case JO_MOD:
				if (!y)
					jj_fail(&r->c, line, "integer division or modulo by zero");
				if (x == INT64_MIN && y == -1)
					bad = 1;
				else {
					int64_t q = x / y, m = x % y;
					if (m && ((m < 0) != (y < 0)))
						q--, m += y;
					z = op == JO_MOD ? m : q;
				}
				break;
			default: /* JO_POW */
				if (y < 0)
					return jv_float(pow((double)x, (double)y));
				z = 1;
				for (int64_t k = 0; k < y && !bad; k++) {
					bad = __builtin_mul_overflow(z, x, &z);
					if (z == 0 || z == 1 || (z == -1 && k > 64))
						break;
				}
				if (!bad && z == -1 && x == -1)
					z = y % 2 ? -1 : 1;
			}
			if (bad)
				jj_fail(&r->c, line, "integer overflow in '%s'", sym[op]);
			return jv_int(z);
		}
		double x = num(a), y = num(b);
		switch (op) {
		case JO_ADD: return jv_float(x + y);
		case JO_SUB: return jv_float(x - y);
		case JO_MUL: return jv_float(x * y);
		case JO_POW: return jv_float(pow(x, y));
		default:
			if (y == 0)
				jj_fail(&r->c, line, "division by zero");
			if (op == JO_DIV)
				return jv_float(x / y);
			double m = fmod(x, y);
			if (m && ((m < 0) != (y < 0)))
				m += y;
			return jv_float(op == JO_MOD ? m : floor(x / y));
		}
	}
	if (op == JO_ADD && a.t == JV_STR && b.t == JV_STR) {
		JBuf o = {0};
		jb_add(r, &o, a.u.s.s, a.u.s.n);
		jb_add(r, &o, b.u.s.s, b.u.s.n);
		return (JVal){.t = JV_STR, .u.s = {o.s, o.n}};
	}
	if (op == JO_ADD && a.t == JV_LIST && b.t == JV_LIST && a.flag == b.flag) {
		JVal l = jv_list(r, a.u.l->n + b.u.l->n);
		l.flag = a.flag;
		for (size_t i = 0; i < a.u.l->n; i++)
			jl_push(r, l.u.l, a.u.l->v[i]);
		for (size_t i = 0; i < b.u.l->n; i++)
			jl_push(r, l.u.l, b.u.l->v[i]);
		return l;
	}
	if (op == JO_MUL && (a.t == JV_STR || a.t == JV_LIST || b.t == JV_STR || b.t == JV_LIST)) {
		JVal s = a.t == JV_STR || a.t == JV_LIST ? a : b, k = s.u.l == a.u.l ? b : a;
		if (k.t == JV_INT || k.t == JV_BOOL) {
			int64_t times = inum(k) < 0 ? 0 : inum(k);
			size_t unit = s.t == JV_STR ? s.u.s.n : s.u.l->n * sizeof(JVal);
			if (unit && (uint64_t)times > r->cap_bytes / unit)
				jj_fail(&r->c, line, "the repeated %s is too long", jv_type(s));
			if (s.t == JV_STR) {
				JBuf o = {0};
				jb_add(r, &o, "", 0);
				for (int64_t i = 0; i < times; i++)
					jb_add(r, &o, s.u.s.s, s.u.s.n);
				return (JVal){.t = JV_STR, .u.s = {o.s, o.n}};
			}
			JVal l = jv_list(r, 0);
			l.flag = s.flag;
			for (int64_t i = 0; i < times; i++)
				for (size_t j = 0; j < s.u.l->n; j++)
					jl_push(r, l.u.l, s.u.l->v[j]);
			return l;
		}
	}
	if (a.t == JV_UNDEF || b.t == JV_UNDEF)
		jj_fail(&r->c, line, "'%s' is undefined", undef_name(r, a.t == JV_UNDEF ? a : b));
	jj_fail(&r->c, line, "unsupported operand type(s) for %s: '%s' and '%s'", sym[op], jv_type(a), jv_type(b));
}

/* `needle in hay`. */
static int contains(JR *r, JVal hay, JVal needle, int line)
{
	switch (hay.t) {
	case JV_STR:
		if (needle.t != JV_STR)
			jj_fail(&r->c, line, "'in <string>' requires string as left operand, not %s", jv_type(needle));
		return !needle.u.s.n || memmem(hay.u.s.s, hay.u.s.n, needle.u.s.s, needle.u.s.n) != NULL;
	case JV_LIST:
		for (size_t i = 0; i < hay.u.l->n; i++)
			if (jv_equal(hay.u.l->v[i], needle))
				return 1;
		return 0;
	case JV_DICT: return jd_getv(hay.u.d, needle) != NULL;
	case JV_UNDEF: jj_fail(&r->c, line, "'%s' is undefined", undef_name(r, hay));
	default: jj_fail(&r->c, line, "argument of type '%s' is not iterable", jv_type(hay));
	}
}

/* Evaluate call arguments. */
static void eval_args(JR *r, const JNode *e, JFrame *f, JVal **args, JVal **kwv)
{
	*args = e->args.n ? jr_alloc(r, sizeof **args * (size_t)e->args.n) : NULL;
	*kwv = e->kw.n ? jr_alloc(r, sizeof **kwv * (size_t)e->kw.n) : NULL;
	for (int i = 0; i < e->args.n; i++)
		(*args)[i] = eval(r, e->args.v[i], f);
	for (int i = 0; i < e->kw.n; i++)
		(*kwv)[i] = eval(r, e->kw.v[i], f);
}

/* A filter node applied to v (its inner operand already evaluated). */
static JVal apply_filter(JR *r, const JNode *e, JVal v, JFrame *f)
{
	JVal *args, *kwv;
	eval_args(r, e, f, &args, &kwv);
	r->line = e->line;
	return jj_filter(r, jj_filter_id(e->s, e->sl), v, args, e->args.n, e->names, kwv, e->kw.n, e->line);
}

/* A filter chain whose innermost operand is absent (filter blocks, set blocks) applied to v. */
static JVal apply_chain(JR *r, const JNode *e, JVal v, JFrame *f)
{
	if (!e)
		return v;
	return apply_filter(r, e, apply_chain(r, e->a, v, f), f);
}

static JVal call_macro(JR *r, const JFunc *fn, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line)
{
	const JNode *m = fn->node;
	if (nargs > m->nnames)
		jj_fail(&r->c, line, "macro '%s' takes not more than %d argument(s)", m->s, m->nnames);
	JFrame *mf = jr_alloc(r, sizeof *mf);
	mf->up = r->top;
	int firstdef = m->nnames - m->kw.n;
	for (int i = 0; i < m->nnames; i++) {
		JVal v = jv_undef(m->names[i]);
		int set = 0;
		if (i < nargs)
			v = args[i], set = 1;
		for (int k = 0; k < nkw; k++)
			if (!strcmp(kwn[k], m->names[i])) {
				if (set)
					jj_fail(&r->c, line, "macro '%s' got multiple values for argument '%s'", m->s, kwn[k]);
				v = kwv[k], set = 1;
			}
		if (!set && i >= firstdef)
			v = eval(r, m->kw.v[i - firstdef], mf);
		bind(r, mf, m->names[i], v);
	}
	for (int k = 0; k < nkw; k++) {
		int known = 0;
		for (int i = 0; i < m->nnames; i++)
			known |= !strcmp(kwn[k], m->names[i]);
		if (!known)
			jj_fail(&r->c, line, "macro '%s' has no argument '%s'", m->s, kwn[k]);
	}
	JBuf out = {0};
	jb_add(r, &out, "", 0);
	exec(r, &m->args, mf, &out);
	return (JVal){.t = JV_STR, .u.s = {out.s, out.n}};
}

JVal jv_call(JR *r, JVal fn, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line)
{
	r->line = line;
	if (fn.t == JV_UNDEF)
		jj_fail(&r->c, line, "'%s' is undefined", undef_name(r, fn));
	if (fn.t != JV_FUNC)
		jj_fail(&r->c, line, "'%s' object is not callable", jv_type(fn));
	const JFunc *f = fn.u.fn;
	switch (f->kind) {
	case JF_GLOBAL: return jj_global(r, f->id, args, nargs, kwn, kwv, nkw, line);
	case JF_METHOD: return jj_method(r, f->id, f->self, args, nargs, kwn, kwv, nkw, line);
	case JF_MACRO: return call_macro(r, f, args, nargs, kwn, kwv, nkw, line);
	default: /* loop.cycle */
		if (!nargs)
			jj_fail(&r->c, line, "no items for cycling given");
		return args[f->self.u.i % nargs];
	}
}

static JVal eval_inner(JR *r, const JNode *e, JFrame *f)
{
	switch (e->kind) {
	case JN_CONST: return e->k;
	case JN_NAME: return lookup(r, f, e->s, e->sl);
	case JN_LIST:
	case JN_TUPLE: {
		JVal l = jv_list(r, (size_t)e->args.n);
		l.flag = e->kind == JN_TUPLE;
		for (int i = 0; i < e->args.n; i++)
			jl_push(r, l.u.l, eval(r, e->args.v[i], f));
		return l;
	}
	case JN_DICT: {
		JVal d = jv_dict(r);
		for (int i = 0; i < e->args.n; i++) {
			JVal k = eval(r, e->args.v[i], f);
			if (k.t == JV_LIST && !k.flag)
				jj_fail(&r->c, e->line, "unhashable type: 'list'");
			if (k.t == JV_DICT)
				jj_fail(&r->c, e->line, "unhashable type: 'dict'");
			jd_set(r, d.u.d, k, eval(r, e->kw.v[i], f));
		}
		return d;
	}
	case JN_ATTR: return jv_getattr(r, eval(r, e->a, f), e->s, e->sl, e->line);
	case JN_ITEM: {
		JVal o = eval(r, e->a, f);
		return jv_getitem(r, o, eval(r, e->b, f), e->line);
	}
	case JN_SLICE: {
		JVal o = eval(r, e->a, f), part[3];
		for (int i = 0; i < 3; i++)
			part[i] = eval(r, e->b->args.v[i], f);
		return do_slice(r, o, part, e->line);
	}
	case JN_CALL: {
		JVal fn = eval(r, e->a, f), *args, *kwv;
		eval_args(r, e, f, &args, &kwv);
		return jv_call(r, fn, args, e->args.n, e->names, kwv, e->kw.n, e->line);
	}
	case JN_FILTER: return apply_filter(r, e, eval(r, e->a, f), f);
	case JN_TEST: {
		JVal v = eval(r, e->a, f), *args, *kwv;
		eval_args(r, e, f, &args, &kwv);
		r->line = e->line;
		int t = jj_test(r, jj_test_id(e->s, e->sl), v, args, e->args.n, e->line);
		return jv_bool(e->negate ? !t : t);
	}
	case JN_NEG:
	case JN_POS: {
		JVal v = eval(r, e->a, f);
		if (v.t == JV_FLOAT)
			return jv_float(e->kind == JN_NEG ? -v.u.f : v.u.f);
		if (v.t == JV_INT || v.t == JV_BOOL) {
			if (e->kind == JN_POS)
				return jv_int(inum(v));
			if (inum(v) == INT64_MIN)
				jj_fail(&r->c, e->line, "integer overflow in '-'");
			return jv_int(-inum(v));
		}
		jj_fail(&r->c, e->line, "bad operand type for unary %s: '%s'", e->kind == JN_NEG ? "-" : "+", jv_type(v));
	}
	case JN_NOT: return jv_bool(!jv_truthy(eval(r, e->a, f)));
	case JN_AND: {
		JVal a = eval(r, e->a, f);
		return jv_truthy(a) ? eval(r, e->b, f) : a;
	}
	case JN_OR: {
		JVal a = eval(r, e->a, f);
		return jv_truthy(a) ? a : eval(r, e->b, f);
	}
	case JN_BIN: {
		JVal a = eval(r, e->a, f);
		return arith(r, e->op, a, eval(r, e->b, f), e->line);
	}
	case JN_CMP: {
		JVal a = eval(r, e->a, f), b = eval(r, e->b, f);
		r->line = e->line;
		switch (e->op) {
		case JO_EQ: return jv_bool(jv_equal(a, b));
		case JO_NE: return jv_bool(!jv_equal(a, b));
		case JO_IN: return jv_bool(contains(r, b, a, e->line));
		case JO_NOTIN: return jv_bool(!contains(r, b, a, e->line));
		default: {
			int c = jv_compare(r, a, b, 0);
			return jv_bool(e->op == JO_LT ? c < 0 : e->op == JO_LE ? c <= 0 : e->op == JO_GT ? c > 0 : c >= 0);
		}
		}
	}
	case JN_COND:
		if (jv_truthy(eval(r, e->a, f)))
			return eval(r, e->b, f);
		return e->c ? eval(r, e->c, f) : jv_undef(NULL);
	case JN_CONCAT: {
		JBuf b = {0};
		jb_add(r, &b, "", 0);
		for (int i = 0; i < e->args.n; i++)
			jv_str_into(r, &b, eval(r, e->args.v[i], f));
		return (JVal){.t = JV_STR, .u.s = {b.s, b.n}};
	}
	default: jj_fail(&r->c, e->line, "not an expression");
	}
}

static JVal eval(JR *r, const JNode *e, JFrame *f)
{
	step(r, e->line);
	if (++r->depth > JJ_MAX_RECURSION)
		jj_fail(&r->c, e->line, "the template recurses too deeply");
	JVal v = eval_inner(r, e, f);
	r->depth--;
	return v;
}

static Flow exec_for(JR *r, const JNode *e, JFrame *f, JBuf *out)
{
	JVal it = jv_iter(r, eval(r, e->a, f), e->line);
	JList *items = it.u.l;
	if (e->b) { /* the loop filter sees each item bound, and loop.length counts what passes */
		JVal kept = jv_list(r, 0);
		for (size_t i = 0; i < items->n; i++) {
			JFrame *tf = jr_alloc(r, sizeof *tf);
			tf->up = f;
			bind_targets(r, tf, e->names, e->nnames, items->v[i], e->line);
			if (jv_truthy(eval(r, e->b, tf)))
				jl_push(r, kept.u.l, items->v[i]);
		}
		items = kept.u.l;
	}
	if (!items->n) {
		if (e->kw.n) {
			JFrame *ef = jr_alloc(r, sizeof *ef);
			ef->up = f;
			return exec(r, &e->kw, ef, out);
		}
		return FLOW_NEXT;
	}
	int64_t n = (int64_t)items->n;
	/* one loop object, updated in place as jinja2's LoopContext advances */
	static const char *const keys[] = {"index", "index0", "revindex", "revindex0", "first", "last", "length",
	                                   "depth", "depth0", "previtem", "nextitem", "cycle"};
	enum { NKEYS = sizeof keys / sizeof *keys };
	JVal loop = jv_dict(r);
	for (int k = 0; k < NKEYS; k++)
		jd_set(r, loop.u.d, jv_cstr(keys[k]), jv_none());
	loop.flag = 1; /* attributes only, like jinja2's LoopContext */
	JFunc *cycle = jr_alloc(r, sizeof *cycle);
	cycle->kind = JF_CYCLE, cycle->name = "cycle";
	for (int64_t i = 0; i < n; i++) {
		step(r, e->line);
		JFrame *lf = jr_alloc(r, sizeof *lf);
		lf->up = f;
		JVal *v = loop.u.d->v;
		v[0] = jv_int(i + 1), v[1] = jv_int(i), v[2] = jv_int(n - i), v[3] = jv_int(n - i - 1);
		v[4] = jv_bool(i == 0), v[5] = jv_bool(i == n - 1), v[6] = jv_int(n), v[7] = jv_int(1), v[8] = jv_int(0);
		v[9] = i ? items->v[i - 1] : jv_undef("previtem");
		v[10] = i + 1 < n ? items->v[i + 1] : jv_undef("nextitem");
		cycle->self = jv_int(i);
		v[11] = (JVal){.t = JV_FUNC, .u.fn = cycle};
		bind(r, lf, "loop", loop);
		bind_targets(r, lf, e->names, e->nnames, items->v[i], e->line);
		if (exec(r, &e->args, lf, out) == FLOW_BREAK)
			break;
	}
	return FLOW_NEXT;
}

static Flow exec(JR *r, const JNodes *body, JFrame *f, JBuf *out)
{
	if (++r->depth > JJ_MAX_RECURSION)
		jj_fail(&r->c, body->n ? body->v[0]->line : r->line, "the template recurses too deeply");
	Flow fl = FLOW_NEXT;
	for (int i = 0; i < body->n && fl == FLOW_NEXT; i++) {
		const JNode *e = body->v[i];
		step(r, e->line);
		switch (e->kind) {
		case JN_TEXT: jb_add(r, out, e->s, e->sl); break;
		case JN_OUT: jv_str_into(r, out, eval(r, e->a, f)); break;
		case JN_IF: {
			const JNodes *b = jv_truthy(eval(r, e->a, f)) ? &e->args : &e->kw;
			fl = exec(r, b, f, out);
			break;
		}
		case JN_FOR: fl = exec_for(r, e, f, out); break;
		case JN_SET: bind_targets(r, f, e->names, e->nnames, eval(r, e->a, f), e->line); break;
		case JN_SETATTR: {
			JVal ns = lookup(r, f, e->names[0], strlen(e->names[0]));
			if (ns.t != JV_DICT || !ns.flag)
				jj_fail(&r->c, e->line, "cannot assign attribute on non-namespace object '%s'", e->names[0]);
			JVal v = eval(r, e->a, f);
			if (e->names[1][0] == '_')
				jj_fail(&r->c, e->line, "namespace attributes may not start with '_' ('%s')", e->names[1]);
			jd_set(r, ns.u.d, jv_cstr(e->names[1]), v);
			break;
		}
		case JN_SETBLOCK:
		case JN_FILTERBLOCK: {
			JBuf b = {0};
			jb_add(r, &b, "", 0);
			exec(r, &e->args, f, &b);
			JVal v = apply_chain(r, e->a, (JVal){.t = JV_STR, .u.s = {b.s, b.n}}, f);
			if (e->kind == JN_SETBLOCK)
				bind(r, f, e->names[0], v);
			else
				jv_str_into(r, out, v);
			break;
		}
		case JN_MACRO: {
			JFunc *m = jr_alloc(r, sizeof *m);
			m->kind = JF_MACRO, m->node = e, m->name = e->s;
			bind(r, f, e->s, (JVal){.t = JV_FUNC, .u.fn = m});
			break;
		}
		case JN_BREAK: fl = FLOW_BREAK; break;
		case JN_CONTINUE: fl = FLOW_CONTINUE; break;
		case JN_BLOCK: fl = exec(r, &e->args, f, out); break;
		default: jj_fail(&r->c, e->line, "not a statement");
		}
	}
	r->depth--;
	return fl;
}

/* ---- JSON in ---- */

static JVal from_json(JR *r, const json_t *j)
{
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		JVal d = jv_dict(r);
		const char *k;
		json_t *v;
		json_object_foreach((json_t *)j, k, v) jd_set(r, d.u.d, jv_str(r, k, strlen(k)), from_json(r, v));
		return d;
	}
	case JSON_ARRAY: {
		JVal l = jv_list(r, json_array_size(j));
		for (size_t i = 0; i < json_array_size(j); i++)
			jl_push(r, l.u.l, from_json(r, json_array_get(j, i)));
		return l;
	}
	case JSON_STRING: return jv_str(r, json_string_value(j), json_string_length(j));
	case JSON_INTEGER: return jv_int((int64_t)json_integer_value(j));
	case JSON_REAL: return jv_float(json_real_value(j));
	case JSON_TRUE: return jv_bool(1);
	case JSON_FALSE: return jv_bool(0);
	default: return jv_none();
	}
}

int jj_render(const JjTmpl *t, const json_t *vars, const struct tm *now, char **out, size_t *n, char *err, size_t len)
{
	*out = NULL, *n = 0;
	JR *r = calloc(1, sizeof *r);
	if (!r)
		return seterr(err, len, "%s: out of memory", t->name);
	r->c = (JCtx){.err = err, .len = len, .name = t->name};
	r->cap_bytes = JJ_MAX_BYTES, r->max_steps = JJ_MAX_STEPS;
	if (now)
		r->now = *now;
	if (setjmp(r->c.jb)) {
		arena_free(&r->A);
		free(r);
		return -1;
	}
	if (vars && !json_is_object(vars))
		jj_fail(&r->c, 0, "the variables must be a JSON object");
	JFrame *base = jr_alloc(r, sizeof *base);
	if (vars) {
		JVal v = from_json(r, vars);
		base->vars = *v.u.d;
	}
	r->top = jr_alloc(r, sizeof *r->top);
	r->top->up = base;
	JBuf b = {0};
	jb_add(r, &b, "", 0);
	exec(r, &t->body, r->top, &b);
	char *s = malloc(b.n + 1);
	if (!s)
		jj_fail(&r->c, 0, "out of memory");
	memcpy(s, b.s, b.n + 1);
	*out = s, *n = b.n;
	arena_free(&r->A);
	free(r);
	return 0;
}
