/*
** runtime/formats/jinja_impl.h — what the Jinja parser (jinja.c), evaluator (jinja_eval.c) and built-ins
** (jinja_lib.c) share: values, the syntax tree, the error context. Not for other files.
*/
#ifndef GLM_JINJA_IMPL_H
#define GLM_JINJA_IMPL_H

#include "glm.h"
#include "jinja.h"

#include <setjmp.h>
#include <stdint.h>

/* ---- values ---- */

enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_FUNC };

typedef struct JList JList;
typedef struct JDict JDict;
typedef struct JFunc JFunc;
typedef struct JNode JNode;

typedef struct {
	int t;    /* JV_* */
	int flag; /* JV_LIST: a tuple; JV_DICT: a namespace */
	union {
		int b;
		int64_t i;
		double f;
		struct {
			const char *s; /* JV_STR: UTF-8, not NUL-terminated; JV_UNDEF: the missing name or NULL */
			size_t n;
		} s;
		JList *l;
		JDict *d;
		JFunc *fn;
	} u;
} JVal;

struct JList {
	JVal *v;
	size_t n, cap;
};

struct JDict { /* insertion-ordered, linear search (templates hold small dicts) */
	JVal *k, *v;
	size_t n, cap;
};

enum { JF_GLOBAL, JF_METHOD, JF_MACRO, JF_CYCLE };
struct JFunc {
	int kind, id;      /* id: JG_* for globals, JM_* for methods */
	JVal self;         /* the bound object (methods), the loop index (cycle) */
	const JNode *node; /* the macro */
	const char *name;
};

/* ---- syntax tree ---- */

enum {
	/* expressions */
	JN_CONST, JN_NAME, JN_LIST, JN_TUPLE, JN_DICT, JN_ATTR, JN_ITEM, JN_SLICE, JN_CALL, JN_FILTER, JN_TEST,
	JN_NEG, JN_POS, JN_NOT, JN_AND, JN_OR, JN_BIN, JN_CMP, JN_COND, JN_CONCAT,
	/* statements */
	JN_TEXT, JN_OUT, JN_IF, JN_FOR, JN_SET, JN_SETATTR, JN_SETBLOCK, JN_MACRO, JN_BREAK, JN_CONTINUE,
	JN_FILTERBLOCK, JN_BLOCK,
};

/* Binary and comparison operators. */
enum { JO_ADD, JO_SUB, JO_MUL, JO_DIV, JO_FLOORDIV, JO_MOD, JO_POW, JO_EQ, JO_NE, JO_LT, JO_LE, JO_GT, JO_GE,
       JO_IN, JO_NOTIN };

typedef struct {
	JNode **v;
	int n;
} JNodes;

struct JNode {
	int kind, op, line;
	JNode *a, *b, *c; /* operands: object, index, condition, iterable, ... */
	JNodes args;      /* list items, call arguments, body, elif conditions */
	JNodes kw;        /* keyword argument values, else/elif bodies, default values */
	const char **names; /* keyword names, targets, parameters */
	int nnames;
	const char *s;    /* a name, an attribute, text */
	size_t sl;
	JVal k;           /* JN_CONST */
	int negate;       /* JN_TEST: `is not` */
};

struct JjTmpl {
	Arena A;
	JNodes body;
	char name[64];
};

/* ---- errors and limits ---- */

typedef struct {
	jmp_buf jb;
	char *err;
	size_t len;
	const char *name;
} JCtx;

_Noreturn void jj_fail(JCtx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* The render: its arena (bounded), output buffers, frames, budgets. */
typedef struct JFrame JFrame;
struct JFrame {
	JDict vars;
	JFrame *up;
};

typedef struct {
	char *s;
	size_t n, cap;
} JBuf;

typedef struct {
	JCtx c;
	Arena A;
	size_t cap_bytes;
	long steps, max_steps;
	int depth;
	struct tm now;
	JFrame *top; /* template-level names (set at top level, macros) over the variables */
	int line;    /* the line being run, for errors raised inside built-ins */
} JR;

#define JJ_MAX_DEPTH 200

/* jinja_eval.c */
void *jr_alloc(JR *r, size_t n);
JVal jv_str(JR *r, const char *s, size_t n);
JVal jv_cstr(const char *s);
JVal jv_int(int64_t i);
JVal jv_float(double f);
JVal jv_bool(int b);
JVal jv_none(void);
JVal jv_undef(const char *name);
JVal jv_list(JR *r, size_t cap);
JVal jv_dict(JR *r);
void jl_push(JR *r, JList *l, JVal v);
void jd_set(JR *r, JDict *d, JVal k, JVal v);
JVal *jd_get(const JDict *d, const char *key, size_t n);
JVal *jd_getv(const JDict *d, JVal k);
void jb_add(JR *r, JBuf *b, const char *s, size_t n);
void jb_adds(JR *r, JBuf *b, const char *s);
int jv_truthy(JVal v);
int jv_equal(JVal a, JVal b);
int jv_compare(JR *r, JVal a, JVal b, int fold); /* -1, 0, 1; errors when not comparable */
const char *jv_type(JVal v);
void jv_str_into(JR *r, JBuf *b, JVal v);          /* Python str() */
void jv_repr_into(JR *r, JBuf *b, JVal v);         /* Python repr() */
JVal jv_to_str(JR *r, JVal v);
JVal jv_call(JR *r, JVal fn, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line);
JVal jv_getattr(JR *r, JVal obj, const char *name, size_t n, int line);
JVal jv_getitem(JR *r, JVal obj, JVal key, int line);
JVal jv_iter(JR *r, JVal v, int line);             /* a list of the items iteration visits */

/* jinja_lib.c */
int jj_filter_id(const char *name, size_t n);
JVal jj_filter(JR *r, int id, JVal v, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line);
int jj_test_id(const char *name, size_t n);
int jj_test(JR *r, int id, JVal v, JVal *args, int nargs, int line);
int jj_method_id(int type, const char *name, size_t n);
JVal jj_method(JR *r, int id, JVal self, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line);
int jj_global_id(const char *name, size_t n);
JVal jj_global(JR *r, int id, JVal *args, int nargs, const char **kwn, JVal *kwv, int nkw, int line);
void jj_json_into(JR *r, JBuf *b, JVal v, int indent, int level, const char *isep, const char *ksep, int ascii,
                  int sort, int line);
void jj_float_repr(double f, char *buf, size_t len);
int jj_escape(JR *r, JBuf *b, unsigned c); /* \\ \n \r \t as Python and JSON write them; 0: not one of those */
size_t jj_utf8_len(const char *s, size_t n);
unsigned jj_cp_at(const char *s, size_t n, size_t *len); /* the code point at s, its byte length */
int jj_isspace(unsigned c);                              /* Python's str.isspace */
JVal jj_lower(JR *r, JVal s);
size_t jj_utf8_off(const char *s, size_t n, int64_t cp); /* byte offset of code point cp (clamped) */

#endif
