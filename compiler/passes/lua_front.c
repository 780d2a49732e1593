/*
** compiler/passes/lua_front.c — the Lua front end. A model description is a Lua program that calls a small
** graph-builder API (the `glm` table); every call appends one IR node, after the op's shape rule has
** accepted it. Tensors are full userdata holding only a node id, so a Lua error that unwinds through
** a binding leaves nothing to free (the graph lives in the compilation's arena).
**
** The Lua state is a sandbox: base/string/table/math/utf8 only, no io/os/debug, no loading of files or
** bytecode except `require` of text modules from the model library directory, a memory cap and an
** instruction budget. A model file from the internet must not be able to do anything but build a graph.
**
** Errors name the model file's line ("llama.lua:42: linear: ..."), adding the library line when the
** failing call was made inside the layer library.
*/
#include "passes.h"
#include "ref.h"
#include "weights.h"
#include "rfile.h"

#include <jansson.h>
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define TENSOR_MT "glm.tensor"
#define FRONT_KEY "glm.front"
#define LUA_MEM_LIMIT ((size_t)2 << 30)
#define LUA_SECONDS 5.0         /* default CPU time for the Lua run (glmc --lua-time) */
#define LUA_HARD_EXTRA 0.5      /* then this much more before the process is ended (one long C call) */
#define LUA_PATTERN_STEPS 2e7   /* the most steps one pattern call may be able to take (pat_cost) */
#define LUA_TABLE_MAX (1 << 22) /* elements one table.move or table.sort may go over */

typedef struct {
	Graph *g;
	const ModelMeta *mm;
	const char *model_path;     /* as given; the chunkname is "@" model_path */
	const char *libdir;
	size_t mem, mem_limit;      /* bytes Lua holds now, and may hold (front_alloc) */
	int layer;                  /* set by glm.layer, recorded in each node */
	double t0, limit;           /* CPU time at the start and the seconds allowed (front_hook) */
	int sealed;                 /* the model has returned: nothing may change the graph (a finalizer, were one set) */
	int late;                   /* a finalizer tried to change the graph after that (an error) */
	lua_State *L;               /* for front_alloc's report of where memory ran out */
	char oom_at[256];           /* the model line being run when the memory cap was hit, or "" */
	char *pick, *why;           /* front_pick_model: the model file chosen and why (caller's buffers) */
	size_t pick_len, why_len;
} Front;

typedef struct {
	int id;
} Tensor;

static Front *front_of(lua_State *L)
{
	lua_getfield(L, LUA_REGISTRYINDEX, FRONT_KEY);
	Front *f = lua_touserdata(L, -1);
	lua_pop(L, 1);
	return f;
}

static int front_error(lua_State *L, const char *fmt, ...);

/* front_of for the calls that change the graph: once the model has returned, a finalizer (__gc) that
** runs later must not add nodes, outputs or metadata to the graph glmc is compiling. */
static Front *unsealed(lua_State *L)
{
	Front *f = front_of(L);
	if (f->sealed) {
		f->late = 1; /* Lua turns errors in finalizers into warnings: front_run reports it */
		front_error(L, "the model has returned; a finalizer cannot change the graph");
	}
	return f;
}

/*
** The location a message should name, written into buf ("" when no Lua line is running): the innermost
** line in the model file itself, plus the innermost Lua line when that is somewhere else (a library
** function the model called). Allocates nothing, so the allocator may call it.
*/
static void where_buf(lua_State *L, const Front *f, char *buf, size_t len)
{
	lua_Debug ar;
	char inner[256] = "", model[256] = "";
	for (int level = 0; lua_getstack(L, level, &ar); level++) {
		if (!lua_getinfo(L, "Sl", &ar) || ar.currentline <= 0)
			continue;
		if (!inner[0])
			snprintf(inner, sizeof inner, "%s:%d", ar.short_src, ar.currentline);
		if (ar.source[0] == '@' && !strcmp(ar.source + 1, f->model_path)) {
			snprintf(model, sizeof model, "%s:%d", ar.short_src, ar.currentline);
			break;
		}
	}
	if (model[0] && strcmp(model, inner))
		snprintf(buf, len, "%.250s: (in %.250s) ", model, inner);
	else if (model[0] || inner[0])
		snprintf(buf, len, "%.250s: ", model[0] ? model : inner);
	else
		snprintf(buf, len, "%s", "");
}

/* where_buf's location pushed as a Lua string. */
static void push_where(lua_State *L, const Front *f)
{
	char w[520];
	where_buf(L, f, w, sizeof w);
	lua_pushstring(L, w);
}

/* Raise a Lua error located at the model's line. */
static int front_error(lua_State *L, const char *fmt, ...)
{
	Front *f = front_of(L);
	push_where(L, f);
	va_list ap;
	va_start(ap, fmt);
	lua_pushvfstring(L, fmt, ap);
	va_end(ap);
	lua_concat(L, 2);
	return lua_error(L);
}

/* The model-file line of the current call, recorded in each node for later diagnostics. */
static void node_origin(lua_State *L, Front *f, Node *n)
{
	lua_Debug ar;
	for (int level = 0; lua_getstack(L, level, &ar); level++)
		if (lua_getinfo(L, "Sl", &ar) && ar.currentline > 0 && ar.source[0] == '@' &&
		    !strcmp(ar.source + 1, f->model_path)) {
			n->src = f->model_path;
			n->line = ar.currentline;
			return;
		}
}

static void push_tensor(lua_State *L, int id)
{
	Tensor *t = lua_newuserdatauv(L, sizeof *t, 0);
	t->id = id;
	luaL_setmetatable(L, TENSOR_MT);
}

static Tensor *to_tensor(lua_State *L, int idx)
{
	return luaL_testudata(L, idx, TENSOR_MT);
}

/* Argument idx of function fn must be a tensor; returns its node id. */
static int check_tensor(lua_State *L, int idx, const char *fn)
{
	Tensor *t = to_tensor(L, idx);
	if (!t)
		front_error(L, "%s: argument %d must be a tensor, got %s", fn, idx, luaL_typename(L, idx));
	return t->id;
}

/* Run the op's shape rule on n, then append it and push its tensor; errors carry the model line. */
static int add_node(lua_State *L, Node *n)
{
	Front *f = unsealed(L);
	char err[512];
	node_origin(L, f, n);
	n->layer = f->layer;
	n->fused_into = -1;
	if (n->nin < op_table[n->op].nin_min || n->nin > op_table[n->op].nin_max)
		return front_error(L, "%s: %d operands, expected %d..%d", op_table[n->op].name, n->nin,
		                   op_table[n->op].nin_min, op_table[n->op].nin_max);
	if (op_table[n->op].shape(f->g, n, err, sizeof err))
		return front_error(L, "%s", err);
	push_tensor(L, graph_add(f->g, n));
	return 1;
}

/* Options-table readers: a missing field gives the default; a field of the wrong type is an error. */
static lua_Integer opt_int(lua_State *L, int t, const char *fn, const char *k, lua_Integer def)
{
	if (lua_isnoneornil(L, t))
		return def;
	lua_getfield(L, t, k);
	lua_Integer v = def;
	if (!lua_isnil(L, -1)) {
		int ok;
		v = lua_tointegerx(L, -1, &ok);
		if (!ok)
			front_error(L, "%s: option '%s' must be an integer, got %s", fn, k, luaL_typename(L, -1));
	}
	lua_pop(L, 1);
	return v;
}

static double opt_num(lua_State *L, int t, const char *fn, const char *k, double def)
{
	if (lua_isnoneornil(L, t))
		return def;
	lua_getfield(L, t, k);
	double v = def;
	if (!lua_isnil(L, -1)) {
		if (!lua_isnumber(L, -1))
			front_error(L, "%s: option '%s' must be a number, got %s", fn, k, luaL_typename(L, -1));
		v = lua_tonumber(L, -1);
	}
	lua_pop(L, 1);
	return v;
}

static int opt_bool(lua_State *L, int t, const char *k, int def)
{
	if (lua_isnoneornil(L, t))
		return def;
	lua_getfield(L, t, k);
	int v = lua_isnil(L, -1) ? def : lua_toboolean(L, -1);
	lua_pop(L, 1);
	return v;
}

static lua_Integer need_int(lua_State *L, int t, const char *fn, const char *k)
{
	if (!lua_istable(L, t))
		front_error(L, "%s: expected an options table with '%s'", fn, k);
	lua_getfield(L, t, k);
	int ok;
	lua_Integer v = lua_tointegerx(L, -1, &ok);
	if (!ok)
		front_error(L, "%s: option '%s' is required (an integer), got %s", fn, k, luaL_typename(L, -1));
	lua_pop(L, 1);
	return v;
}

/* A shape as Lua gives it: integers, or "T"/"S" for the symbolic dims. */
static int read_dim(lua_State *L, int idx, const char *fn, int64_t *d)
{
	if (lua_type(L, idx) == LUA_TSTRING) {
		const char *s = lua_tostring(L, idx);
		if (!strcmp(s, "T"))
			return *d = DIM_T, 0;
		if (!strcmp(s, "S"))
			return *d = DIM_S, 0;
		return front_error(L, "%s: dim \"%s\" is not a number, \"T\" or \"S\"", fn, s);
	}
	int ok;
	lua_Integer v = lua_tointegerx(L, idx, &ok);
	if (!ok)
		return front_error(L, "%s: dim must be an integer, got %s", fn, luaL_typename(L, idx));
	*d = v;
	return 0;
}

static int read_shape(lua_State *L, int idx, const char *fn, int64_t *dim)
{
	if (!lua_istable(L, idx))
		return front_error(L, "%s: shape must be a table of dims, got %s", fn, luaL_typename(L, idx));
	int nd = (int)lua_rawlen(L, idx);
	if (nd < 1 || nd > MAXDIM)
		return front_error(L, "%s: shape has %d dims (1..%d allowed)", fn, nd, MAXDIM);
	for (int i = 0; i < nd; i++) {
		lua_rawgeti(L, idx, i + 1);
		read_dim(L, -1, fn, &dim[i]);
		lua_pop(L, 1);
	}
	return nd;
}

/* Lua axes are 1-based; negative ones count from the end (-1 is the last). */
static int axis_arg(lua_State *L, int idx, int ndim, const char *fn)
{
	lua_Integer a = luaL_checkinteger(L, idx);
	if (a < 0)
		a += ndim + 1;
	if (a < 1 || a > ndim)
		front_error(L, "%s: axis %d is outside 1..%d", fn, (int)lua_tointeger(L, idx), ndim);
	return (int)a - 1;
}

static const Node *node_of(lua_State *L, int id)
{
	return &front_of(L)->g->node[id];
}

/*
** Leaves: parameters, step inputs, caches.
*/

/*
** A parameter's tensors must be in the checkpoint (random weights have none to check): found here, as
** the graph is built, a missing one fails at its line at once rather than after the whole graph (a
** config promising a million layers of a checkpoint with two). The message is bind's.
*/
static void param_present(lua_State *L, const Front *f, const Node *n, const char *source, int64_t parts)
{
	const struct Weights *w = f->mm ? f->mm->w : NULL;
	if (!w || w->random_qtype >= 0)
		return;
	char name[512];
	for (int64_t p = 0; p < (parts ? parts : 1); p++) {
		if (parts)
			snprintf(name, sizeof name, source, (int)p); /* one %d, checked by l_param */
		if (weights_find(w, parts ? name : source, NULL) >= 0)
			continue;
		if (parts)
			lua_pushfstring(L, "%s:%d: parameter '%s': part %d, tensor '%s', not found in %s", n->src ? n->src : "?",
			                n->line, n->name, (int)p, name, w->path);
		else if (strcmp(source, n->name))
			lua_pushfstring(L, "%s:%d: parameter '%s': tensor '%s' not found in %s", n->src ? n->src : "?", n->line,
			                n->name, source, w->path);
		else
			lua_pushfstring(L, "%s:%d: parameter '%s' not found in %s", n->src ? n->src : "?", n->line, n->name,
			                w->path);
		lua_error(L);
	}
}

/* glm.param(name, shape, {source=, split=}) declares a weight by canonical name. */
static int l_param(lua_State *L)
{
	Front *f = front_of(L);
	const char *name = luaL_checkstring(L, 1);
	Node n = {.op = OP_PARAM, .kind = VK_WEIGHT, .dtype = DT_F32};
	n.ndim = read_shape(L, 2, "param", n.dim);
	n.name = arena_strdup(f->g->A, name);
	const char *source = name;
	int64_t slot = opt_int(L, 3, "param", "slot", -1), row0 = opt_int(L, 3, "param", "row0", 0);
	int64_t unpermute = opt_int(L, 3, "param", "unpermute", 0), parts = opt_int(L, 3, "param", "parts", 0);
	int64_t rstride = 0, roff = 0;
	if (lua_istable(L, 3)) {
		lua_getfield(L, 3, "rows");
		if (lua_istable(L, -1)) {
			int t = lua_gettop(L);
			rstride = need_int(L, t, "param rows", "stride");
			roff = opt_int(L, t, "param rows", "offset", 0);
		}
		lua_pop(L, 1);
	}
	if (lua_istable(L, 3)) {
		lua_getfield(L, 3, "source");
		if (lua_isstring(L, -1))
			source = lua_tostring(L, -1);
		lua_getfield(L, 3, "split");
		if (!lua_isnil(L, -1)) {
			n.shard.kind = SH_SPLIT;
			n.shard.axis = (int8_t)(lua_tointeger(L, -1) - 1);
			if (n.shard.axis < 0 || n.shard.axis >= n.ndim)
				return front_error(L, "param '%s': split axis %d is outside 1..%d", name, n.shard.axis + 1, n.ndim);
		}
		lua_pop(L, 2);
	}
	if (slot < -1 || row0 < 0 || unpermute < 0 || (slot >= 0 && row0))
		return front_error(L, "param '%s': slot (>= 0), row0 (>= 0) and unpermute (heads) are exclusive options", name);
	if (rstride && (n.ndim != 3 || roff < 0 || roff + n.dim[1] > rstride || slot >= 0 || row0 || unpermute || parts))
		return front_error(L, "param '%s': rows = {stride, offset} takes a [blocks, rows, cols] parameter whose rows "
		                   "fit in each stride, and no other row option", name);
	if (parts) {
		const char *pc = strstr(source, "%d");
		if (parts != n.dim[0] || !pc || strstr(pc + 2, "%") || strchr(source, '%') != pc || slot >= 0 || row0 ||
		    unpermute || rstride)
			return front_error(L, "param '%s': parts = N stacks N tensors along dim 1, which must be N, from a source "
			                   "name with one %%d", name);
	}
	/* the names declared so far, a registry table name -> node id (a linear scan made this quadratic) */
	lua_getfield(L, LUA_REGISTRYINDEX, "glm.params");
	if (lua_getfield(L, -1, name) != LUA_TNIL)
		return front_error(L, "param '%s' is declared twice (first at line %d)", name,
		                   f->g->node[lua_tointeger(L, -1)].line);
	lua_pop(L, 1);
	source = arena_strdup(f->g->A, source);
	add_node(L, &n);
	lua_pushinteger(L, f->g->n - 1);
	lua_setfield(L, -3, name);
	lua_pop(L, 2); /* the tensor stays the result, below */
	param_present(L, f, &f->g->node[f->g->n - 1], source, parts);
	push_tensor(L, f->g->n - 1);
	Graph *g = f->g;
	if (g->nw == g->wcap) {
		int cap = g->wcap ? g->wcap * 2 : 64;
		WeightRef *w = arena_alloc(g->A, sizeof(WeightRef) * (size_t)cap);
		if (g->nw)
			memcpy(w, g->w, sizeof(WeightRef) * (size_t)g->nw);
		g->w = w, g->wcap = cap;
	}
	g->w[g->nw++] = (WeightRef){.node = g->n - 1, .source = source, .dtype = -1, .unpermute = (int)unpermute,
	                            .row0 = slot >= 0 ? slot * n.dim[0] : row0, .slot_rows = slot >= 0 || row0 > 0,
	                            .rstride = rstride, .roff = roff, .parts = (int)parts, .split = -1};
	return 1;
}

/* glm.input("tokens" | "pos"): int32 per-token values of the step, shape [T]. */
static int l_input(lua_State *L)
{
	Front *f = front_of(L);
	const char *name = luaL_checkstring(L, 1);
	if (strcmp(name, "tokens") && strcmp(name, "pos"))
		return front_error(L, "input: unknown step input '%s' (tokens, pos)", name);
	for (int i = 0; i < f->g->n; i++)
		if (f->g->node[i].op == OP_INPUT && !strcmp(f->g->node[i].name, name))
			return push_tensor(L, i), 1;
	Node n = {.op = OP_INPUT, .kind = VK_INPUT, .dtype = DT_I32, .ndim = 1, .dim = {DIM_T}};
	n.name = arena_strdup(f->g->A, name);
	return add_node(L, &n);
}

/* glm.cache(name, {dims...}): a float32 buffer of shape [S, dims...] that persists across steps. */
static int l_cache(lua_State *L)
{
	Front *f = front_of(L);
	const char *name = luaL_checkstring(L, 1);
	Node n = {.op = OP_CACHE, .kind = VK_CACHE, .dtype = DT_F32};
	int64_t d[MAXDIM];
	int nd = read_shape(L, 2, "cache", d);
	if (nd + 1 > MAXDIM)
		return front_error(L, "cache '%s': too many dims", name);
	n.ndim = nd + 1;
	n.dim[0] = DIM_S;
	memcpy(n.dim + 1, d, sizeof(int64_t) * (size_t)nd);
	lua_getfield(L, LUA_REGISTRYINDEX, "glm.caches"); /* the names so far (a scan made this quadratic) */
	if (lua_getfield(L, -1, name) != LUA_TNIL)
		return front_error(L, "cache '%s' is declared twice", name);
	lua_pop(L, 1);
	lua_pushboolean(L, 1);
	lua_setfield(L, -2, name);
	lua_pop(L, 1);
	n.name = arena_strdup(f->g->A, name);
	return add_node(L, &n);
}

/*
** Operators.
*/
static int op_n(lua_State *L, int op, int nin, const char *fn)
{
	Node n = {.op = op, .nin = nin};
	for (int i = 0; i < nin; i++)
		n.in[i] = check_tensor(L, i + 1, fn);
	return add_node(L, &n);
}

static int l_embedding(lua_State *L) { return op_n(L, OP_EMBEDDING, 2, "embedding"); }
static int l_silu(lua_State *L) { return op_n(L, OP_SILU, 1, "silu"); }
static int l_sigmoid(lua_State *L) { return op_n(L, OP_SIGMOID, 1, "sigmoid"); }
static int l_softmax(lua_State *L) { return op_n(L, OP_SOFTMAX, 1, "softmax"); }
static int l_swiglu(lua_State *L) { return op_n(L, OP_SWIGLU, 2, "swiglu"); }
/* glm.matmul(a, b [, {transpose_b = true}]) */
static int l_matmul(lua_State *L)
{
	Node n = {.op = OP_MATMUL, .nin = 2, .in = {check_tensor(L, 1, "matmul"), check_tensor(L, 2, "matmul")}};
	AS_matmul_transpose_b(&n, opt_bool(L, 3, "transpose_b", 0));
	return add_node(L, &n);
}

/* glm.mla(q, kv, cache, pos, sel|nil, {heads=, dk=, dv=, scale=}): absorbed latent attention (MQA over a
** cache whose rows hold the latent and the rotary key; the latent doubles as the value). */
static int l_mla(lua_State *L)
{
	Node n = {.op = OP_MLA, .nin = 4};
	for (int i = 0; i < 4; i++)
		n.in[i] = check_tensor(L, i + 1, "mla");
	if (!lua_isnil(L, 5))
		n.in[n.nin++] = check_tensor(L, 5, "mla");
	AS_mla_heads(&n, need_int(L, 6, "mla", "heads"));
	AS_mla_dk(&n, need_int(L, 6, "mla", "dk"));
	AS_mla_dv(&n, need_int(L, 6, "mla", "dv"));
	lua_getfield(L, 6, "scale");
	if (!lua_isnumber(L, -1))
		return front_error(L, "mla: option 'scale' is required (a number)");
	AS_mla_scale(&n, lua_tonumber(L, -1));
	lua_pop(L, 1);
	return add_node(L, &n);
}

/* glm.indexer(q, k, w, kcache, pos, {heads=, dim=, topk=, scale=}): DeepSeek sparse-attention selection. */
static int l_indexer(lua_State *L)
{
	Node n = {.op = OP_INDEXER, .nin = 5};
	for (int i = 0; i < 5; i++)
		n.in[i] = check_tensor(L, i + 1, "indexer");
	AS_indexer_heads(&n, need_int(L, 6, "indexer", "heads"));
	AS_indexer_dim(&n, need_int(L, 6, "indexer", "dim"));
	AS_indexer_topk(&n, need_int(L, 6, "indexer", "topk"));
	AS_indexer_scale(&n, opt_num(L, 6, "indexer", "scale",
	                             1.0 / sqrt((double)(A_indexer_dim(&n) > 0 ? A_indexer_dim(&n) : 1))));
	return add_node(L, &n);
}

/* The scoring function option of the MoE ops: "softmax" (0) or "sigmoid" (1). */
static int moe_func(lua_State *L, int t, const char *fn)
{
	if (!lua_istable(L, t))
		return 0;
	lua_getfield(L, t, "func");
	const char *f = lua_tostring(L, -1);
	int v = f && !strcmp(f, "sigmoid");
	if (f && !v && strcmp(f, "softmax"))
		front_error(L, "%s: func must be \"softmax\" or \"sigmoid\", got \"%s\"", fn, f);
	lua_pop(L, 1);
	return v;
}

/* glm.moe_route(logits, bias|nil, {k=, groups=, topk_groups=, func=}) -> int32 expert ids [T, k] */
static int l_moe_route(lua_State *L)
{
	Node n = {.op = OP_MOE_ROUTE, .nin = 1, .in = {check_tensor(L, 1, "moe_route")}};
	if (!lua_isnil(L, 2))
		n.in[n.nin++] = check_tensor(L, 2, "moe_route");
	AS_moe_route_k(&n, need_int(L, 3, "moe_route", "k"));
	AS_moe_route_groups(&n, opt_int(L, 3, "moe_route", "groups", 1));
	AS_moe_route_topk_groups(&n, opt_int(L, 3, "moe_route", "topk_groups", A_moe_route_groups(&n)));
	AS_moe_route_sigmoid(&n, moe_func(L, 3, "moe_route"));
	return add_node(L, &n);
}

/* glm.moe_weights(logits, ids, {func=, norm=, scale=}) -> [T, k] */
static int l_moe_weights(lua_State *L)
{
	Node n = {.op = OP_MOE_WEIGHTS, .nin = 2, .in = {check_tensor(L, 1, "moe_weights"), check_tensor(L, 2, "moe_weights")}};
	AS_moe_weights_sigmoid(&n, moe_func(L, 3, "moe_weights"));
	AS_moe_weights_norm(&n, opt_bool(L, 3, "norm", 0));
	AS_moe_weights_scale(&n, opt_num(L, 3, "moe_weights", "scale", 1.0));
	return add_node(L, &n);
}

/* glm.moe_ffn(x, ids, weights, gate_exps, up_exps, down_exps) */
static int l_moe_ffn(lua_State *L) { return op_n(L, OP_MOE_FFN, 6, "moe_ffn"); }
static int l_argmax(lua_State *L) { return op_n(L, OP_ARGMAX, 1, "argmax"); }

/* glm.linear(x, w [, bias]) */
static int l_linear(lua_State *L)
{
	return op_n(L, OP_LINEAR, lua_isnoneornil(L, 3) ? 2 : 3, "linear");
}

/* glm.gelu(x [, {approx = "tanh"}]) */
static int l_gelu(lua_State *L)
{
	Node n = {.op = OP_GELU, .nin = 1, .in = {check_tensor(L, 1, "gelu")}};
	if (lua_istable(L, 2)) {
		lua_getfield(L, 2, "approx");
		const char *a = lua_tostring(L, -1);
		if (a && strcmp(a, "tanh") && strcmp(a, "none"))
			return front_error(L, "gelu: approx must be \"tanh\" or \"none\", got \"%s\"", a);
		AS_gelu_tanh(&n, a && !strcmp(a, "tanh"));
		lua_pop(L, 1);
	}
	return add_node(L, &n);
}

/* glm.scale(x, s) */
static int l_scale(lua_State *L)
{
	Node n = {.op = OP_SCALE, .nin = 1, .in = {check_tensor(L, 1, "scale")}};
	AS_scale_s(&n, luaL_checknumber(L, 2));
	return add_node(L, &n);
}

/* glm.rmsnorm(x, w|nil, eps) and glm.layernorm(x, w|nil, b|nil, eps) */
static int l_rmsnorm(lua_State *L)
{
	Node n = {.op = OP_RMSNORM, .nin = 1, .in = {check_tensor(L, 1, "rmsnorm")}};
	if (!lua_isnil(L, 2))
		n.in[n.nin++] = check_tensor(L, 2, "rmsnorm");
	if (!lua_isnumber(L, 3))
		return front_error(L, "rmsnorm: argument 3 (eps) must be a number");
	AS_rmsnorm_eps(&n, lua_tonumber(L, 3));
	return add_node(L, &n);
}

static int l_layernorm(lua_State *L)
{
	Node n = {.op = OP_LAYERNORM, .nin = 1, .in = {check_tensor(L, 1, "layernorm")}};
	int has_w = !lua_isnil(L, 2), has_b = !lua_isnil(L, 3);
	if (has_b && !has_w)
		return front_error(L, "layernorm: a bias without a weight is not supported");
	if (has_w)
		n.in[n.nin++] = check_tensor(L, 2, "layernorm");
	if (has_b)
		n.in[n.nin++] = check_tensor(L, 3, "layernorm");
	if (!lua_isnumber(L, 4))
		return front_error(L, "layernorm: argument 4 (eps) must be a number");
	AS_layernorm_eps(&n, lua_tonumber(L, 4));
	return add_node(L, &n);
}

/* glm.rope(x, pos, {heads=, head_dim=, rot_dim=, interleaved=, theta=, freqs=, and at most one scaling:
** yarn={factor=, orig_ctx=, beta_fast=, beta_slow=, mscale=, mscale_all_dim=, attn_factor=},
** llama3={factor=, orig_ctx=, low_freq_factor=, high_freq_factor=} or linear={factor=}}); freqs: a weight
** vector [rot_dim/2] each inverse frequency is divided by (a GGUF's rope_freqs.weight). */
static int l_rope(lua_State *L)
{
	Node n = {.op = OP_ROPE, .nin = 2, .in = {check_tensor(L, 1, "rope"), check_tensor(L, 2, "rope")}};
	AS_rope_heads(&n, need_int(L, 3, "rope", "heads"));
	AS_rope_head_dim(&n, need_int(L, 3, "rope", "head_dim"));
	AS_rope_rot_dim(&n, opt_int(L, 3, "rope", "rot_dim", A_rope_head_dim(&n)));
	AS_rope_interleaved(&n, opt_bool(L, 3, "interleaved", 0));
	AS_rope_theta(&n, opt_num(L, 3, "rope", "theta", 10000.0));
	for (int k = ROPE_YARN; k < ROPE_NSCALINGS; k++) {
		const char *kind = ref_rope_scaling_name(k);
		lua_getfield(L, 3, kind);
		if (lua_isnil(L, -1)) {
			lua_pop(L, 1);
			continue;
		}
		if (!lua_istable(L, -1))
			return front_error(L, "rope: option '%s' must be a table", kind);
		if (A_rope_scaling(&n))
			return front_error(L, "rope: options '%s' and '%s' both given (one scaling at most)",
			                   ref_rope_scaling_name((int)A_rope_scaling(&n)), kind);
		int y = lua_gettop(L);
		char fn[32];
		snprintf(fn, sizeof fn, "rope.%s", kind);
		AS_rope_scaling(&n, k);
		AS_rope_factor(&n, opt_num(L, y, fn, "factor", 1.0));
		AS_rope_orig_ctx(&n, k == ROPE_LINEAR ? 0 : opt_int(L, y, fn, "orig_ctx", 0));
		if (k == ROPE_YARN) {
			AS_rope_beta_fast(&n, opt_num(L, y, fn, "beta_fast", 32.0));
			AS_rope_beta_slow(&n, opt_num(L, y, fn, "beta_slow", 1.0));
			AS_rope_mscale(&n, opt_num(L, y, fn, "mscale", 0.0));
			AS_rope_mscale_all_dim(&n, opt_num(L, y, fn, "mscale_all_dim", 0.0));
			AS_rope_attn_factor(&n, opt_num(L, y, fn, "attn_factor", 0.0));
		} else if (k == ROPE_LLAMA3) {
			AS_rope_low_freq_factor(&n, opt_num(L, y, fn, "low_freq_factor", 1.0));
			AS_rope_high_freq_factor(&n, opt_num(L, y, fn, "high_freq_factor", 4.0));
		}
		lua_pop(L, 1);
	}
	lua_getfield(L, 3, "freqs");
	if (!lua_isnil(L, -1)) {
		Tensor *t = to_tensor(L, -1);
		if (!t)
			return front_error(L, "rope: option 'freqs' must be a tensor, got %s", luaL_typename(L, -1));
		n.in[n.nin++] = t->id;
	}
	lua_pop(L, 1);
	return add_node(L, &n);
}

/* glm.attention(q, k, v, kcache, vcache, pos, {heads=, kv_heads=, head_dim=, v_head_dim=, scale=}) */
static int l_attention(lua_State *L)
{
	Node n = {.op = OP_ATTENTION, .nin = 6};
	for (int i = 0; i < 6; i++)
		n.in[i] = check_tensor(L, i + 1, "attention");
	AS_attention_heads(&n, need_int(L, 7, "attention", "heads"));
	AS_attention_kv_heads(&n, opt_int(L, 7, "attention", "kv_heads", A_attention_heads(&n)));
	AS_attention_head_dim(&n, need_int(L, 7, "attention", "head_dim"));
	AS_attention_v_head_dim(&n, opt_int(L, 7, "attention", "v_head_dim", A_attention_head_dim(&n)));
	AS_attention_scale(&n, opt_num(L, 7, "attention", "scale",
	                               A_attention_head_dim(&n) > 0 ? 1.0 / sqrt((double)A_attention_head_dim(&n)) : 0));
	return add_node(L, &n);
}

/* glm.topk(x, k): int32 indices of the k largest along the last dim. */
static int l_topk(lua_State *L)
{
	Node n = {.op = OP_TOPK, .nin = 1, .in = {check_tensor(L, 1, "topk")}};
	AS_topk_k(&n, luaL_checkinteger(L, 2));
	return add_node(L, &n);
}

/* x:view(d1, d2, ...) or x:view{d1, d2, ...}; one -1 is inferred from the static extents. */
static int l_view(lua_State *L)
{
	int x = check_tensor(L, 1, "view");
	const Node *in = node_of(L, x);
	int64_t d[MAXDIM];
	int nd;
	if (lua_istable(L, 2))
		nd = read_shape(L, 2, "view", d);
	else {
		nd = lua_gettop(L) - 1;
		if (nd < 1 || nd > MAXDIM)
			return front_error(L, "view: %d dims (1..%d allowed)", nd, MAXDIM);
		for (int i = 0; i < nd; i++)
			read_dim(L, i + 2, "view", &d[i]);
	}
	int infer = -1;
	int64_t have = 1, total = 1;
	for (int i = 0; i < in->ndim; i++)
		total *= in->dim[i] > 0 ? in->dim[i] : 1;
	for (int i = 0; i < nd; i++) {
		if (d[i] == -1) {
			if (infer >= 0)
				return front_error(L, "view: more than one -1");
			infer = i;
		} else if (d[i] > 0)
			have *= d[i];
	}
	if (infer >= 0) {
		if (total % have)
			return front_error(L, "view: cannot infer the -1 dim (%d values into parts of %d)", (int)total, (int)have);
		d[infer] = total / have;
	}
	Node n = {.op = OP_RESHAPE, .nin = 1, .in = {x}};
	for (int i = 0; i < nd; i++)
		AS_reshape_dim(&n, i, d[i]);
	AS_reshape_ndim(&n, nd);
	return add_node(L, &n);
}

/* x:permute{...} (1-based source axes) and x:transpose(a, b). */
static int l_permute(lua_State *L)
{
	int x = check_tensor(L, 1, "permute");
	int nd = node_of(L, x)->ndim;
	Node n = {.op = OP_PERMUTE, .nin = 1, .in = {x}};
	luaL_checktype(L, 2, LUA_TTABLE);
	if ((int)lua_rawlen(L, 2) != nd)
		return front_error(L, "permute: %d axes given for a %d-dim tensor", (int)lua_rawlen(L, 2), nd);
	for (int i = 0; i < nd; i++) {
		lua_rawgeti(L, 2, i + 1);
		AS_permute_axis(&n, i, lua_tointeger(L, -1) - 1);
		lua_pop(L, 1);
	}
	return add_node(L, &n);
}

static int l_transpose(lua_State *L)
{
	int x = check_tensor(L, 1, "transpose");
	int nd = node_of(L, x)->ndim;
	int a = axis_arg(L, 2, nd, "transpose"), b = axis_arg(L, 3, nd, "transpose");
	Node n = {.op = OP_PERMUTE, .nin = 1, .in = {x}};
	for (int i = 0; i < nd; i++)
		AS_permute_axis(&n, i, i);
	AS_permute_axis(&n, a, b), AS_permute_axis(&n, b, a);
	return add_node(L, &n);
}

/* glm.split(x, axis, {sizes...}) returns one tensor per part. */
static int l_split(lua_State *L)
{
	int x = check_tensor(L, 1, "split");
	const Node *in = node_of(L, x);
	int ax = axis_arg(L, 2, in->ndim, "split");
	luaL_checktype(L, 3, LUA_TTABLE);
	int np = (int)lua_rawlen(L, 3);
	if (np < 1 || np > 64)
		return front_error(L, "split: %d parts (1..64 allowed)", np);
	int64_t at = 0;
	for (int i = 0; i < np; i++) {
		lua_rawgeti(L, 3, i + 1);
		int64_t sz = lua_tointeger(L, -1);
		lua_pop(L, 1);
		Node n = {.op = OP_SLICE, .nin = 1, .in = {x}};
		AS_slice_axis(&n, ax), AS_slice_start(&n, at), AS_slice_len(&n, sz);
		add_node(L, &n);
		at += sz;
	}
	if (at != node_of(L, x)->dim[ax])
		return front_error(L, "split: parts add up to %d but axis %d has %d", (int)at, ax + 1,
		                   (int)node_of(L, x)->dim[ax]);
	return np;
}

/* glm.slice(x, axis, start, len) with a 0-based start (an offset, not an index). */
static int l_slice(lua_State *L)
{
	int x = check_tensor(L, 1, "slice");
	int ax = axis_arg(L, 2, node_of(L, x)->ndim, "slice");
	Node n = {.op = OP_SLICE, .nin = 1, .in = {x}};
	AS_slice_axis(&n, ax), AS_slice_start(&n, luaL_checkinteger(L, 3)), AS_slice_len(&n, luaL_checkinteger(L, 4));
	return add_node(L, &n);
}

/* glm.concat({a, b, ...}, axis) */
static int l_concat(lua_State *L)
{
	luaL_checktype(L, 1, LUA_TTABLE);
	int np = (int)lua_rawlen(L, 1);
	if (np < 1 || np > MAXIN)
		return front_error(L, "concat: %d parts (1..%d allowed)", np, MAXIN);
	Node n = {.op = OP_CONCAT, .nin = np};
	for (int i = 0; i < np; i++) {
		lua_rawgeti(L, 1, i + 1);
		n.in[i] = check_tensor(L, -1, "concat");
		lua_pop(L, 1);
	}
	AS_concat_axis(&n, axis_arg(L, 2, node_of(L, n.in[0])->ndim, "concat"));
	return add_node(L, &n);
}

/* glm.output(name, t) marks a graph output; "logits" is what glmrun samples from. */
static int l_output(lua_State *L)
{
	Front *f = unsealed(L);
	const char *name = luaL_checkstring(L, 1);
	int id = check_tensor(L, 2, "output");
	if (f->g->nout == 8)
		return front_error(L, "output: at most 8 outputs");
	if (f->g->node[id].dtype != DT_F32)
		return front_error(L, "output '%s' must be a float tensor", name);
	f->g->out_name[f->g->nout] = arena_strdup(f->g->A, name);
	f->g->out[f->g->nout++] = id;
	return 0;
}

/*
** Metadata: glm.meta(key) reads the checkpoint's metadata (config.json for HF; dotted keys walk
** nested objects); glm.set_meta(key, value) records model facts in the plan.
*/
static void push_json(lua_State *L, json_t *j, int depth)
{
	if (depth > 32)
		luaL_error(L, "metadata nested too deeply");
	luaL_checkstack(L, 4, "metadata");
	switch (json_typeof(j)) {
	case JSON_OBJECT: {
		const char *k;
		json_t *v;
		lua_newtable(L);
		json_object_foreach(j, k, v) {
			push_json(L, v, depth + 1);
			lua_setfield(L, -2, k);
		}
		break;
	}
	case JSON_ARRAY: {
		size_t i;
		json_t *v;
		lua_newtable(L);
		json_array_foreach(j, i, v) {
			push_json(L, v, depth + 1);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		break;
	}
	case JSON_STRING: lua_pushlstring(L, json_string_value(j), json_string_length(j)); break;
	case JSON_INTEGER: lua_pushinteger(L, (lua_Integer)json_integer_value(j)); break;
	case JSON_REAL: lua_pushnumber(L, json_real_value(j)); break;
	case JSON_TRUE: lua_pushboolean(L, 1); break;
	case JSON_FALSE: lua_pushboolean(L, 0); break;
	default: lua_pushnil(L); break;
	}
}

/* A GGUF metadata value: scalars as Lua values, arrays as tables (converted only when asked for). */
static int push_gguf(lua_State *L, const GgufKV *kv)
{
	if (kv->type == GGUF_ARRAY) {
		uint64_t n = gguf_arr_len(kv);
		lua_createtable(L, n < (1 << 24) ? (int)n : 0, 0);
		for (uint64_t i = 0; i < n; i++) {
			int64_t iv;
			double fv;
			uint64_t sl;
			const char *sv;
			if (kv->arr_type == GGUF_STRING && (sv = gguf_arr_str(kv, i, &sl)))
				lua_pushlstring(L, sv, sl);
			else if (kv->arr_type == GGUF_FLOAT32 || kv->arr_type == GGUF_FLOAT64)
				lua_pushnumber(L, gguf_arr_float(kv, i, &fv) ? 0 : fv);
			else if (kv->arr_type == GGUF_BOOL)
				lua_pushboolean(L, !gguf_arr_int(kv, i, &iv) && iv);
			else if (!gguf_arr_int(kv, i, &iv))
				lua_pushinteger(L, iv);
			else
				lua_pushnil(L);
			lua_rawseti(L, -2, (lua_Integer)i + 1);
		}
		return 1;
	}
	int64_t iv;
	double fv;
	switch (kv->type) {
	case GGUF_STRING: lua_pushlstring(L, kv->str.s, kv->str.len); break;
	case GGUF_BOOL: lua_pushboolean(L, kv->v.u != 0); break;
	case GGUF_FLOAT32: case GGUF_FLOAT64: lua_pushnumber(L, gguf_kv_float(kv, &fv) ? 0 : fv); break;
	default:
		if (gguf_kv_int(kv, &iv))
			lua_pushnumber(L, (double)kv->v.u);
		else
			lua_pushinteger(L, iv);
	}
	return 1;
}

/* glm.weight_shape(name): a checkpoint tensor's shape (PyTorch order), or nil when it is absent; lets a
** description adapt (tied embeddings, vocab size) without reading tensors itself. */
static int l_weight_shape(lua_State *L)
{
	Front *f = front_of(L);
	WTensor t;
	if (!f->mm || !f->mm->w || weights_find(f->mm->w, luaL_checkstring(L, 1), &t) < 0)
		return lua_pushnil(L), 1;
	lua_createtable(L, t.ndim, 0);
	for (int i = 0; i < t.ndim; i++) {
		lua_pushinteger(L, t.shape[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

static int l_meta(lua_State *L)
{
	Front *f = front_of(L);
	const char *key = luaL_checkstring(L, 1);
	if (f->mm && f->mm->w && f->mm->w->format == WF_GGUF) {
		const GgufKV *kv = gguf_find_key(&f->mm->w->gg, key);
		return kv ? push_gguf(L, kv) : (lua_pushnil(L), 1);
	}
	json_t *j = f->mm && f->mm->w ? f->mm->w->st.config : NULL;
	char part[256];
	for (const char *p = key; j && *p;) {
		const char *dot = strchr(p, '.');
		size_t n = dot ? (size_t)(dot - p) : strlen(p);
		if (n >= sizeof part)
			return front_error(L, "meta: key '%s' too long", key);
		memcpy(part, p, n);
		part[n] = 0;
		j = json_is_object(j) ? json_object_get(j, part) : NULL;
		p += n + (dot ? 1 : 0);
	}
	if (!j)
		return lua_pushnil(L), 1;
	push_json(L, j, 0);
	return 1;
}

/* glm.warn(msg): a warning on stderr naming the model line, for what a model accepts but should say
** (an override the user asked for, two config keys that disagree). */
static int l_warn(lua_State *L)
{
	const char *msg = luaL_checkstring(L, 1);
	push_where(L, front_of(L));
	fprintf(stderr, "glmc: warning: %s%s\n", lua_tostring(L, -1), msg);
	lua_pop(L, 1);
	return 0;
}

/* glm.layer(i) tags the nodes built next with transformer layer i (-1: none), for per-layer reports. */
static int l_layer(lua_State *L)
{
	unsealed(L)->layer = (int)luaL_checkinteger(L, 1);
	return 0;
}

static int l_set_meta(lua_State *L)
{
	Front *f = unsealed(L);
	const char *key = luaL_checkstring(L, 1);
	const char *val = luaL_tolstring(L, 2, NULL);
	graph_set_meta(f->g, key, val);
	return 0;
}

/*
** Tensor methods and operators.
*/
static int l_shape(lua_State *L)
{
	const Node *n = node_of(L, check_tensor(L, 1, "shape"));
	lua_createtable(L, n->ndim, 0);
	for (int i = 0; i < n->ndim; i++) {
		if (n->dim[i] == DIM_T)
			lua_pushliteral(L, "T");
		else if (n->dim[i] == DIM_S)
			lua_pushliteral(L, "S");
		else
			lua_pushinteger(L, n->dim[i]);
		lua_rawseti(L, -2, i + 1);
	}
	return 1;
}

static int l_dim(lua_State *L)
{
	const Node *n = node_of(L, check_tensor(L, 1, "dim"));
	int a = axis_arg(L, 2, n->ndim, "dim");
	if (n->dim[a] < 0)
		lua_pushstring(L, n->dim[a] == DIM_T ? "T" : "S");
	else
		lua_pushinteger(L, n->dim[a]);
	return 1;
}

static int l_ndim(lua_State *L)
{
	lua_pushinteger(L, node_of(L, check_tensor(L, 1, "ndim"))->ndim);
	return 1;
}

static int l_tostring(lua_State *L)
{
	int id = check_tensor(L, 1, "tostring");
	char b[96];
	lua_pushfstring(L, "tensor %%%d %s", id, shape_str(node_of(L, id), b, sizeof b));
	return 1;
}

/* a op b for tensors, and tensor × number / number × tensor / tensor ÷ number as a scale. Operands of
** commutative ops are swapped when the smaller one comes first, so broadcasting works both ways. */
static int arith(lua_State *L, int op, const char *sym)
{
	Tensor *a = to_tensor(L, 1), *b = to_tensor(L, 2);
	if (a && b) {
		Node n = {.op = op, .nin = 2, .in = {a->id, b->id}};
		if ((op == OP_ADD || op == OP_MUL) && node_of(L, a->id)->ndim < node_of(L, b->id)->ndim)
			n.in[0] = b->id, n.in[1] = a->id;
		return add_node(L, &n);
	}
	if ((op == OP_MUL || op == OP_DIV) && a && lua_isnumber(L, 2)) {
		Node n = {.op = OP_SCALE, .nin = 1, .in = {a->id}};
		AS_scale_s(&n, op == OP_MUL ? lua_tonumber(L, 2) : 1.0 / lua_tonumber(L, 2));
		return add_node(L, &n);
	}
	if (op == OP_MUL && b && lua_isnumber(L, 1)) {
		Node n = {.op = OP_SCALE, .nin = 1, .in = {b->id}};
		AS_scale_s(&n, lua_tonumber(L, 1));
		return add_node(L, &n);
	}
	return front_error(L, "cannot compute %s %s %s", luaL_typename(L, 1), sym, luaL_typename(L, 2));
}

static int l_add(lua_State *L) { return arith(L, OP_ADD, "+"); }
static int l_sub(lua_State *L) { return arith(L, OP_SUB, "-"); }
static int l_mul(lua_State *L) { return arith(L, OP_MUL, "*"); }
static int l_div(lua_State *L) { return arith(L, OP_DIV, "/"); }

static int l_unm(lua_State *L)
{
	Node n = {.op = OP_SCALE, .nin = 1, .in = {check_tensor(L, 1, "-")}};
	AS_scale_s(&n, -1.0);
	return add_node(L, &n);
}

static const luaL_Reg glm_funcs[] = {
	{"param", l_param}, {"input", l_input}, {"cache", l_cache},
	{"embedding", l_embedding}, {"linear", l_linear}, {"matmul", l_matmul},
	{"scale", l_scale}, {"silu", l_silu}, {"gelu", l_gelu}, {"sigmoid", l_sigmoid},
	{"softmax", l_softmax}, {"swiglu", l_swiglu}, {"rmsnorm", l_rmsnorm}, {"layernorm", l_layernorm},
	{"rope", l_rope}, {"attention", l_attention}, {"topk", l_topk}, {"argmax", l_argmax},
	{"view", l_view}, {"reshape", l_view}, {"permute", l_permute}, {"transpose", l_transpose},
	{"split", l_split}, {"slice", l_slice}, {"concat", l_concat},
	{"mla", l_mla}, {"indexer", l_indexer}, {"moe_route", l_moe_route}, {"moe_weights", l_moe_weights},
	{"moe_ffn", l_moe_ffn},
	{"shape", l_shape}, {"dim", l_dim}, {"ndim", l_ndim},
	{"output", l_output}, {"meta", l_meta}, {"set_meta", l_set_meta}, {"layer", l_layer},
	{"weight_shape", l_weight_shape}, {"warn", l_warn},
	{NULL, NULL},
};

static const luaL_Reg tensor_meta[] = {
	{"__add", l_add}, {"__sub", l_sub}, {"__mul", l_mul}, {"__div", l_div}, {"__unm", l_unm},
	{"__tostring", l_tostring}, {NULL, NULL},
};

/*
** The sandbox.
*/

/* Allocator with a cap, so a runaway model file fails instead of exhausting the machine. */
static void *front_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
	Front *f = ud;
	if (!ptr)
		osize = 0;
	if (nsize == 0) {
		free(ptr);
		f->mem -= osize;
		return NULL;
	}
	if (nsize > osize && f->mem + (nsize - osize) > f->mem_limit) {
		if (f->L && !f->oom_at[0]) /* the line at fault, for front_run's message */
			where_buf(f->L, f, f->oom_at, sizeof f->oom_at);
		return NULL;
	}
	void *p = realloc(ptr, nsize);
	if (p)
		f->mem += nsize - osize;
	return p;
}

/* This process's CPU time in seconds. */
static double cpu_seconds(void)
{
	struct timespec t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/*
** The time limit, in two stages on one CPU-time timer (ITIMER_PROF). The instruction hook checks the
** budget every 10000 instructions; when the timer reaches the limit its signal also sets the hook to run
** at the very next instruction, call or return, so a loop whose few instructions each call an expensive
** C function (string.rep of 100 MB) stops within one call of the limit, with its line. LUA_HARD_EXTRA
** seconds later the second signal ends the process: the hook cannot run inside one C call that does not
** return, which the library wrappers below (front_wrap) exist to prevent. The signal handler reaches
** only the three statics here (a handler can touch nothing else); lua_sethook is made to be called from
** a signal handler (lua.c stops a script on Ctrl-C this way).
*/
static char hard_msg[768];
static lua_State *volatile lim_L;        /* the state being run, for the first signal */
static volatile sig_atomic_t lim_fired;  /* signals received since the timer was armed */

/* The instruction hook: the budget, checked every 10000 instructions (or at once after the signal). */
static void front_hook(lua_State *L, lua_Debug *ar)
{
	(void)ar;
	Front *f = front_of(L);
	if (lim_fired || cpu_seconds() - f->t0 > f->limit)
		front_error(L, "the model ran more than %f s of CPU time (an endless loop? glmc --lua-time raises the "
		            "limit)", f->limit);
}

static void on_limit(int sig)
{
	(void)sig;
	if (!lim_fired++) { /* the first: the hook at once, unless the state is already closing */
		if (lim_L)
			lua_sethook(lim_L, front_hook, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
		return;
	}
	ssize_t w = write(2, hard_msg, strlen(hard_msg));
	(void)w;
	_exit(1);
}

/* Arm the timer for L: the hook forced at limit seconds of CPU time, the process ended LUA_HARD_EXTRA
** later. L NULL disarms it and restores the default action. */
static void arm_limit(lua_State *L, const char *model, double limit)
{
	struct itimerval it = {{0, 0}, {0, 0}};
	if (L) {
		snprintf(hard_msg, sizeof hard_msg, "glmc: %.500s: the model ran more than %g s of CPU time inside a library "
		         "call (glmc --lua-time raises the limit)\n", model, limit + LUA_HARD_EXTRA);
		lim_L = L, lim_fired = 0;
		signal(SIGPROF, on_limit);
		it.it_value.tv_sec = (time_t)limit;
		it.it_value.tv_usec = (suseconds_t)((limit - (double)(time_t)limit) * 1e6);
		it.it_interval.tv_usec = (suseconds_t)(LUA_HARD_EXTRA * 1e6);
		if (it.it_value.tv_sec == 0 && it.it_value.tv_usec == 0)
			it.it_value.tv_usec = 1;
	}
	setitimer(ITIMER_PROF, &it, NULL);
	if (!L) {
		signal(SIGPROF, SIG_DFL);
		lim_L = NULL;
	}
}

/*
** luaL_loadfilex(L, path, "t") for regular files only: the file is opened without blocking and read
** whole, so a FIFO or device given as the model or found in the library fails at once instead of hanging.
** The chunk name is pushed first: a Lua call that runs out of memory between the open and the close
** would jump out of here and leak the descriptor and the buffer.
*/
static int load_regular(lua_State *L, const char *path)
{
	lua_pushfstring(L, "@%s", path);
	int fd = rfile_open(path);
	char m[512];
	if (fd < 0) {
		rfile_err(path, m, sizeof m);
		lua_pop(L, 1);
		lua_pushfstring(L, "cannot open %s", m);
		return LUA_ERRFILE;
	}
	size_t n = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	for (ssize_t r = 1; buf && r > 0;) {
		if (n == cap) {
			char *nb = cap < ((size_t)64 << 20) ? realloc(buf, cap *= 2) : NULL;
			if (!nb)
				free(buf);
			buf = nb;
			if (!buf)
				break;
		}
		r = read(fd, buf + n, cap - n);
		if (r < 0) {
			free(buf);
			buf = NULL;
		} else
			n += (size_t)r;
	}
	close(fd);
	if (!buf) {
		lua_pop(L, 1);
		lua_pushfstring(L, "cannot read %s: too large (64 MiB at most) or unreadable", path);
		return LUA_ERRFILE;
	}
	int st = luaL_loadbufferx(L, buf, n, lua_tostring(L, -1), "t");
	free(buf);
	lua_remove(L, -2); /* the chunk name, under the chunk or the message */
	return st;
}

/* require(name): text modules from the library directory only; names are plain identifiers with dots. */
static int l_require(lua_State *L)
{
	Front *f = front_of(L);
	const char *name = luaL_checkstring(L, 1);
	for (const char *p = name; *p; p++)
		if (!(('a' <= *p && *p <= 'z') || ('A' <= *p && *p <= 'Z') || ('0' <= *p && *p <= '9') || *p == '_' ||
		      *p == '.'))
			return front_error(L, "require: module name '%s' may only hold letters, digits, '_' and '.'", name);
	if (!name[0] || name[0] == '.' || strstr(name, ".."))
		return front_error(L, "require: bad module name '%s'", name);
	lua_getfield(L, LUA_REGISTRYINDEX, "glm.loaded");
	lua_getfield(L, -1, name);
	if (!lua_isnil(L, -1))
		return 1;
	lua_pop(L, 1);
	luaL_Buffer b;
	luaL_buffinit(L, &b);
	luaL_addstring(&b, f->libdir);
	luaL_addchar(&b, '/');
	for (const char *p = name; *p; p++)
		luaL_addchar(&b, *p == '.' ? '/' : *p);
	luaL_addstring(&b, ".lua");
	luaL_pushresult(&b);
	const char *path = lua_tostring(L, -1);
	int st = load_regular(L, path);
	if (st == LUA_ERRFILE)
		return front_error(L, "require: no module '%s' in the model library (%s)", name, path);
	if (st != LUA_OK)
		return lua_error(L);
	lua_pushstring(L, name);
	lua_call(L, 1, 1);
	if (lua_isnil(L, -1)) {
		lua_pop(L, 1);
		lua_pushboolean(L, 1);
	}
	lua_pushvalue(L, -1);
	lua_setfield(L, -4, name);
	return 1;
}

/* A wrapped library function: the original (upvalue 1) called with the wrapper's arguments. */
static int call_orig(lua_State *L)
{
	lua_pushvalue(L, lua_upvalueindex(1));
	lua_insert(L, 1);
	lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
	return lua_gettop(L);
}

/*
** setmetatable without finalizers: a __gc function runs with the instruction hook off (Lua turns hooks
** off in finalizers), at any collection or when the state closes, so only the process-ending hard limit
** could stop an endless one. A model has no use for one; it is refused at its line. (Lua registers a
** finalizer only for a __gc present, raw, when the metatable is set, which is what is checked.)
*/
static int l_setmetatable(lua_State *L)
{
	if (lua_type(L, 2) == LUA_TTABLE && (lua_pushliteral(L, "__gc"), lua_rawget(L, 2)) != LUA_TNIL)
		return front_error(L, "setmetatable: a model may not set a __gc finalizer");
	lua_settop(L, 2);
	return call_orig(L);
}

/* Index just past the set that starts at p[i] ('['), by Lua's rules (a ']' first is a member, '%'
** escapes); pl when it is not closed (the library reports that). */
static size_t pat_set_end(const char *p, size_t pl, size_t i)
{
	if (++i < pl && p[i] == '^')
		i++;
	do {
		if (i >= pl)
			return pl;
		if (p[i++] == '%')
			i++;
	} while (i < pl && p[i] != ']');
	return i + 1;
}

/*
** An upper bound on the steps Lua's matcher takes for pattern p on a subject of n bytes, over every
** start position: each pattern item per start, times n+1 for each item that can match a varying length
** and is retried on backtracking (x*, x+, x-), each balance (%b) or back reference (%1) that scans the
** subject, and 2 for each x?. Lua patterns have no alternation or quantified groups, so this bounds it.
*/
static double pat_cost(const char *p, size_t pl, size_t n, int plain)
{
	double per = (double)n + 1.0, cost = ((double)pl + 1.0) * per;
	for (size_t i = 0; !plain && i < pl;) {
		if (p[i] == '%' && i + 1 < pl && (p[i + 1] == 'b' || ('0' <= p[i + 1] && p[i + 1] <= '9'))) {
			cost *= per, i += p[i + 1] == 'b' ? 4 : 2;
			continue;
		}
		if (p[i] == '%' && i + 1 < pl && p[i + 1] == 'f') {
			i = pat_set_end(p, pl, i + 2);
			continue;
		}
		if (p[i] == '(' || p[i] == ')') {
			i++;
			continue;
		}
		i = p[i] == '[' ? pat_set_end(p, pl, i) : i + (p[i] == '%' ? 2 : 1);
		if (i < pl && (p[i] == '*' || p[i] == '+' || p[i] == '-'))
			cost *= per, i++;
		else if (i < pl && p[i] == '?')
			cost *= 2, i++;
	}
	return cost;
}

/* string.find, match, gmatch and gsub (upvalue 2 names it): one C call that the hook cannot interrupt,
** so a pattern that could backtrack for seconds on this subject (".-.-.-b" on 100 kB) is refused at
** its line instead of ending the process at the hard limit. */
static int l_pattern(lua_State *L)
{
	size_t n, pl;
	luaL_checklstring(L, 1, &n);
	const char *p = luaL_checklstring(L, 2, &pl), *fn = lua_tostring(L, lua_upvalueindex(2));
	int plain = !strcmp(fn, "string.find") && lua_toboolean(L, 4);
	if (pat_cost(p, pl, n, plain) > LUA_PATTERN_STEPS)
		return front_error(L, "%s: pattern '%s' could backtrack too long on a subject of %I bytes (at most %d "
		                   "steps; shorten the subject or the pattern's repetitions)", fn, pl > 60 ? "(long)" : p,
		                   (lua_Integer)n, (int)LUA_PATTERN_STEPS);
	return call_orig(L);
}

/* string.rep built by doubling copies, after a size check against the memory cap: the library copies
** once per repetition, so ("a"):rep(2^30) would spend seconds in one uninterruptible call. */
static int l_rep(lua_State *L)
{
	size_t l, ls;
	const char *s = luaL_checklstring(L, 1, &l);
	lua_Integer n = luaL_checkinteger(L, 2);
	const char *sep = luaL_optlstring(L, 3, "", &ls);
	if (n <= 0 || l + ls == 0) {
		lua_pushliteral(L, "");
		return 1;
	}
	Front *f = front_of(L);
	size_t unit = l + ls;
	if ((double)unit * (double)n - (double)ls > (double)f->mem_limit)
		return front_error(L, "string.rep: %I copies of %I bytes are more than the Lua memory limit (%I MiB)", n,
		                   (lua_Integer)unit, (lua_Integer)(f->mem_limit >> 20));
	size_t total = unit * (size_t)n - ls, done = total < unit ? total : unit;
	luaL_Buffer b;
	char *p = luaL_buffinitsize(L, &b, total);
	memcpy(p, s, l);
	if (done > l)
		memcpy(p + l, sep, ls);
	while (done < total) { /* p holds whole units up to done: copy that prefix after it */
		size_t c = done < total - done ? done : total - done;
		memcpy(p + done, p, c);
		done += c;
	}
	luaL_pushresultsize(&b, total);
	return 1;
}

/* table.move and table.sort (upvalue 2 names it): C loops the hook cannot interrupt; table.move over a
** range of nils costs time without memory, so both are held to LUA_TABLE_MAX elements. */
static int l_table_loop(lua_State *L)
{
	const char *fn = lua_tostring(L, lua_upvalueindex(2));
	lua_Integer n = 0;
	if (!strcmp(fn, "table.move")) {
		lua_Integer a = luaL_checkinteger(L, 2), e = luaL_checkinteger(L, 3);
		n = e >= a ? (lua_Integer)((lua_Unsigned)e - (lua_Unsigned)a) : 0;
	} else if (lua_type(L, 1) == LUA_TTABLE)
		n = luaL_len(L, 1);
	if (n >= LUA_TABLE_MAX)
		return front_error(L, "%s: %I elements, more than a model may handle in one call (%d)", fn, n,
		                   (int)LUA_TABLE_MAX);
	return call_orig(L);
}

/* Replace lib.fn (a global table's function) by the C closure w over the original and its name. */
static void front_wrap(lua_State *L, const char *lib, const char *fn, lua_CFunction w)
{
	lua_getglobal(L, lib);
	lua_getfield(L, -1, fn);
	lua_pushfstring(L, "%s.%s", lib, fn);
	lua_pushcclosure(L, w, 2);
	lua_setfield(L, -2, fn);
	lua_pop(L, 1);
}

/* print goes to stderr, so a model's chatter never mixes with glmc's output. */
static int l_print(lua_State *L)
{
	int n = lua_gettop(L);
	for (int i = 1; i <= n; i++) {
		fprintf(stderr, "%s%s", i > 1 ? "\t" : "", luaL_tolstring(L, i, NULL));
		lua_pop(L, 1);
	}
	fprintf(stderr, "\n");
	return 0;
}

static void open_sandbox(lua_State *L)
{
	static const luaL_Reg libs[] = {
		{LUA_GNAME, luaopen_base}, {LUA_TABLIBNAME, luaopen_table}, {LUA_STRLIBNAME, luaopen_string},
		{LUA_MATHLIBNAME, luaopen_math}, {LUA_UTF8LIBNAME, luaopen_utf8}, {NULL, NULL},
	};
	for (const luaL_Reg *l = libs; l->func; l++) {
		luaL_requiref(L, l->name, l->func, 1);
		lua_pop(L, 1);
	}
	/* Nothing that reads files, loads chunks or reaches the collector's internals. */
	static const char *drop[] = {"dofile", "loadfile", "load", "collectgarbage", NULL};
	for (const char **d = drop; *d; d++) {
		lua_pushnil(L);
		lua_setglobal(L, *d);
	}
	lua_getglobal(L, "string");
	lua_pushnil(L);
	lua_setfield(L, -2, "dump");
	lua_pop(L, 1);
	lua_register(L, "require", l_require);
	lua_getglobal(L, "setmetatable");
	lua_pushcclosure(L, l_setmetatable, 1);
	lua_setglobal(L, "setmetatable");
	static const char *pat[] = {"find", "match", "gmatch", "gsub", NULL};
	for (const char **p = pat; *p; p++)
		front_wrap(L, "string", *p, l_pattern);
	lua_getglobal(L, "string");
	lua_pushcfunction(L, l_rep);
	lua_setfield(L, -2, "rep");
	lua_pop(L, 1);
	front_wrap(L, "table", "move", l_table_loop);
	front_wrap(L, "table", "sort", l_table_loop);
	lua_register(L, "print", l_print);
	lua_newtable(L);
	lua_setfield(L, LUA_REGISTRYINDEX, "glm.loaded");
	lua_newtable(L);
	lua_setfield(L, LUA_REGISTRYINDEX, "glm.params");
	lua_newtable(L);
	lua_setfield(L, LUA_REGISTRYINDEX, "glm.caches");

	luaL_newmetatable(L, TENSOR_MT);
	luaL_setfuncs(L, tensor_meta, 0);
	lua_pushliteral(L, TENSOR_MT); /* getmetatable(t) gives this name: a model cannot add a __gc to tensors */
	lua_setfield(L, -2, "__metatable");
	luaL_newlib(L, glm_funcs);
	lua_pushvalue(L, -1);
	lua_setfield(L, -3, "__index"); /* methods: x:silu(), x:view(...), x:shape() */
	lua_pushliteral(L, "hf");
	lua_setfield(L, -2, "format");
	lua_setglobal(L, "glm");
	lua_pop(L, 1);
}

/* The sandbox with the glm table of this compilation: the weights' format, where their metadata came
** from (glm.meta_file), the library directory (glm.library) and the command-line options a model may
** read (glm.options). */
static void front_setup(lua_State *L, Front *f)
{
	lua_pushlightuserdata(L, f);
	lua_setfield(L, LUA_REGISTRYINDEX, FRONT_KEY);
	open_sandbox(L);
	lua_getglobal(L, "glm");
	lua_newtable(L);
	if (f->mm && f->mm->layers > 0) {
		lua_pushinteger(L, f->mm->layers);
		lua_setfield(L, -2, "layers");
	}
	if (f->mm && f->mm->force_model) {
		lua_pushboolean(L, 1);
		lua_setfield(L, -2, "force_model");
	}
	lua_setfield(L, -2, "options");
	lua_pushstring(L, f->libdir);
	lua_setfield(L, -2, "library");
	if (f->mm && f->mm->w) {
		const Weights *w = f->mm->w;
		lua_pushstring(L, weights_format_name(w->format));
		lua_setfield(L, -2, "format");
		if (w->format == WF_GGUF || w->random_qtype >= 0)
			lua_pushstring(L, w->path);
		else
			lua_pushfstring(L, "%s/config.json", w->path);
		lua_setfield(L, -2, "meta_file");
	}
	lua_pop(L, 1);
	lua_sethook(L, front_hook, LUA_MASKCOUNT, 10000);
}

static int front_main(lua_State *L)
{
	Front *f = lua_touserdata(L, 1);
	front_setup(L, f);
	if (load_regular(L, f->model_path) != LUA_OK)
		return lua_error(L);
	lua_call(L, 0, 0);
	f->sealed = 1;
	return 0;
}

/* The message handler of the model's run: an error value that is not a string (error(), error({}))
** becomes one naming the line that raised it. */
static int front_msgh(lua_State *L)
{
	if (lua_type(L, 1) == LUA_TSTRING)
		return 1;
	Front *f = front_of(L);
	const char *tn = luaL_typename(L, 1);
	if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING)
		return 1;
	push_where(L, f);
	lua_pushfstring(L, "the model raised an error whose value is %s, not a message", tn);
	lua_concat(L, 2);
	return 1;
}

/* The library's choice of model file for the weights: require("nn").pick_model() returns the file
** (relative to the models directory) and a line saying why. */
static int front_pick_main(lua_State *L)
{
	Front *f = lua_touserdata(L, 1);
	front_setup(L, f);
	lua_getglobal(L, "require");
	lua_pushliteral(L, "nn");
	lua_call(L, 1, 1);
	lua_getfield(L, -1, "pick_model");
	if (!lua_isfunction(L, -1))
		return luaL_error(L, "%s/nn.lua: no function pick_model", f->libdir);
	lua_call(L, 0, 2);
	const char *file = lua_tostring(L, -2), *why = lua_tostring(L, -1);
	if (!file || !why)
		return luaL_error(L, "%s/nn.lua: pick_model must return a file name and a reason", f->libdir);
	snprintf(f->pick, f->pick_len, "%s", file);
	snprintf(f->why, f->why_len, "%s", why);
	return 0;
}

/* Run fn(f) in a fresh sandboxed state; a Lua error becomes one line in err. */
static int front_call(Front *f, lua_CFunction fn, char *err, size_t len)
{
	f->limit = f->mm && f->mm->lua_seconds > 0 ? f->mm->lua_seconds : LUA_SECONDS, f->t0 = cpu_seconds();
	f->mem_limit = f->mm && f->mm->lua_mem > 0 ? f->mm->lua_mem : LUA_MEM_LIMIT;
	lua_State *L = lua_newstate(front_alloc, f);
	if (!L)
		return seterr(err, len, "%s: cannot create a Lua state", f->model_path);
	f->L = L;
	arm_limit(L, f->model_path, f->limit);
	lua_pushcfunction(L, front_msgh);
	lua_pushcfunction(L, fn);
	lua_pushlightuserdata(L, f);
	int st = lua_pcall(L, 1, 0, 1);
	if (st != LUA_OK) {
		const char *m = lua_tostring(L, -1);
		if (st == LUA_ERRMEM)
			seterr(err, len, "%sthe model used more than the Lua memory limit (%zu MiB)", f->oom_at, f->mem_limit >> 20);
		else
			seterr(err, len, "%s", m ? m : "the model raised an error that is not a message");
		/* One line: newlines in Lua messages (tracebacks) are folded. */
		for (char *p = err; *p; p++)
			if (*p == '\n')
				*p = ' ';
		f->sealed = 1;
		lim_L = NULL; /* the first signal must not reach a state being freed */
		lua_close(L);
		arm_limit(NULL, f->model_path, 0);
		return -1;
	}
	lim_L = NULL;
	lua_close(L);
	arm_limit(NULL, f->model_path, 0);
	if (f->late)
		return seterr(err, len, "%s: a finalizer (__gc) tried to change the graph after the model returned",
		              f->model_path);
	return 0;
}

int front_pick_model(Graph *g, const char *libdir, const ModelMeta *mm, char *file, size_t flen, char *why,
                     size_t wlen, char *err, size_t len)
{
	Front f = {.g = g, .mm = mm, .model_path = "(no model file)", .libdir = libdir, .layer = -1,
	           .pick = file, .pick_len = flen, .why = why, .why_len = wlen};
	return front_call(&f, front_pick_main, err, len);
}

int front_run(Graph *g, const char *model_path, const char *libdir, const ModelMeta *mm, char *err, size_t len)
{
	Front f = {.g = g, .mm = mm, .model_path = model_path, .libdir = libdir, .layer = -1};
	if (front_call(&f, front_main, err, len))
		return -1;
	if (g->n == 0)
		return seterr(err, len, "%s: the model built no graph", model_path);
	return 0;
}
