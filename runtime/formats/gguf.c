/*
** runtime/formats/gguf.c — GGUF reader (v2/v3, split sets, memory-mapped) and writer.
**
** The reader walks the header with a bounds-checked cursor: every count is compared with the bytes
** left before anything is allocated, every string length before it is copied, every tensor's offset
** and size against its file's data section. Errors are one line, name the file and the key or tensor,
** and have control characters replaced so a hostile name cannot break the line.
*/
#include "gguf.h"
#include "quant.h"

#include "glm.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Names and keys quoted in messages are cut to this many bytes. */
#define SHOW_MAX 96
/* Longest tensor name accepted (ggml itself stops at 63). */
#define NAME_MAX_LEN 1024

static const struct {
	const char *name;
	int size;            /* bytes of one value; 0 for string and array */
} vtypes[GGUF_NTYPES] = {
	[GGUF_UINT8] = {"uint8", 1},   [GGUF_INT8] = {"int8", 1},     [GGUF_UINT16] = {"uint16", 2},
	[GGUF_INT16] = {"int16", 2},   [GGUF_UINT32] = {"uint32", 4}, [GGUF_INT32] = {"int32", 4},
	[GGUF_FLOAT32] = {"float32", 4}, [GGUF_BOOL] = {"bool", 1},   [GGUF_STRING] = {"string", 0},
	[GGUF_ARRAY] = {"array", 0},   [GGUF_UINT64] = {"uint64", 8}, [GGUF_INT64] = {"int64", 8},
	[GGUF_FLOAT64] = {"float64", 8},
};

/* Errors are one line (seterr replaces control bytes). */
#define fail seterr

/* A name shortened for a message, so the part saying what is wrong survives a megabyte-long name. */
static const char *show(char buf[SHOW_MAX + 4], const char *s)
{
	size_t n = strlen(s);
	if (n <= SHOW_MAX)
		return s;
	memcpy(buf, s, SHOW_MAX);
	memcpy(buf + SHOW_MAX, "...", 4);
	return buf;
}

/* Value type names for listings and messages; never NULL. */
const char *gguf_type_name(int type)
{
	return type >= 0 && type < GGUF_NTYPES ? vtypes[type].name : "unknown";
}

/* ------------------------------------------------------------------------------------------------ */
/* Bounds-checked cursor over one file image.                                                        */

typedef struct {
	const uint8_t *p;
	size_t size, pos;
	const char *file;    /* for messages */
	char *err;
	size_t errlen;
} Rd;

/* Little-endian field of n bytes, independent of the host's byte order and alignment. */
static uint64_t le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

/* Take n bytes or fail with "truncated" naming what was being read. */
static int take(Rd *r, uint64_t n, const uint8_t **out, const char *what)
{
	if (n > r->size - r->pos) {
		fail(r->err, r->errlen, "%s: truncated: %s needs %llu bytes at offset %zu but the file has %zu",
		     r->file, what, (unsigned long long)n, r->pos, r->size);
		return -1;
	}
	*out = r->p + r->pos;
	r->pos += (size_t)n;
	return 0;
}

/* Fixed-size header fields; "what" names the field in a truncation message. */
static int rd_u32(Rd *r, uint32_t *v, const char *what)
{
	const uint8_t *b;
	if (take(r, 4, &b, what))
		return -1;
	*v = (uint32_t)le(b, 4);
	return 0;
}

static int rd_u64(Rd *r, uint64_t *v, const char *what)
{
	const uint8_t *b;
	if (take(r, 8, &b, what))
		return -1;
	*v = le(b, 8);
	return 0;
}

/* A GGUF string: u64 length then bytes. The length is checked against the bytes left before use. */
static int rd_str(Rd *r, const uint8_t **s, uint64_t *len, const char *what)
{
	if (rd_u64(r, len, what))
		return -1;
	if (*len > r->size - r->pos) {
		fail(r->err, r->errlen, "%s: %s: string length %llu at offset %zu runs past end of file (%zu bytes left)",
		     r->file, what, (unsigned long long)*len, r->pos - 8, r->size - r->pos);
		return -1;
	}
	*s = r->p + r->pos;
	r->pos += (size_t)*len;
	return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Metadata                                                                                          */

/* KVs own their key and string copies; arrays of numbers point into the mapping. */
static void kv_free(GgufKV *kv)
{
	free(kv->key);
	free(kv->strs);
	free(kv->mem);
	memset(kv, 0, sizeof *kv);
}

static void kvs_free(GgufKV *kv, int n)
{
	for (int i = 0; i < n; i++)
		kv_free(&kv[i]);
	free(kv);
}

/* Widen one fixed-size little-endian value into the KV's union. */
static void set_scalar(GgufKV *kv, int type, const uint8_t *b)
{
	switch (type) {
	case GGUF_UINT8: kv->v.u = b[0]; break;
	case GGUF_INT8: kv->v.i = (int8_t)b[0]; break;
	case GGUF_UINT16: kv->v.u = le(b, 2); break;
	case GGUF_INT16: kv->v.i = (int16_t)le(b, 2); break;
	case GGUF_UINT32: kv->v.u = le(b, 4); break;
	case GGUF_INT32: kv->v.i = (int32_t)le(b, 4); break;
	case GGUF_UINT64: kv->v.u = le(b, 8); break;
	case GGUF_INT64: kv->v.i = (int64_t)le(b, 8); break;
	case GGUF_BOOL: kv->v.u = b[0] != 0; break;
	case GGUF_FLOAT32: {
		uint32_t u = (uint32_t)le(b, 4);
		float f;
		memcpy(&f, &u, 4);
		kv->v.f = f;
		break;
	}
	case GGUF_FLOAT64: {
		uint64_t u = le(b, 8);
		memcpy(&kv->v.f, &u, 8);
		break;
	}
	}
}

/* Read one KV (key, type, value) into kv. Strings are copied NUL-terminated; fixed-size arrays stay
** in the mapping. */
static int read_kv(Rd *r, int idx, GgufKV *kv)
{
	char what[64], sb[SHOW_MAX + 4];
	const uint8_t *s, *b;
	uint64_t len;
	uint32_t type;
	snprintf(what, sizeof what, "key #%d", idx);
	if (rd_str(r, &s, &len, what))
		return -1;
	if (len == 0)
		return fail(r->err, r->errlen, "%s: key #%d is empty", r->file, idx);
	if (memchr(s, 0, len))
		return fail(r->err, r->errlen, "%s: key #%d contains a NUL byte", r->file, idx);
	if (!(kv->key = malloc(len + 1)))
		return fail(r->err, r->errlen, "%s: out of memory", r->file);
	memcpy(kv->key, s, len);
	kv->key[len] = 0;
	char kwhat[SHOW_MAX + 16];
	snprintf(kwhat, sizeof kwhat, "key '%s'", show(sb, kv->key));
	if (rd_u32(r, &type, kwhat))
		return -1;
	if (type >= GGUF_NTYPES)
		return fail(r->err, r->errlen, "%s: %s: unknown value type %u", r->file, kwhat, type);
	kv->type = (int)type;
	kv->n = 1;
	if (type == GGUF_STRING) {
		if (rd_str(r, &s, &len, kwhat))
			return -1;
		if (!(kv->mem = malloc(len + 1)))
			return fail(r->err, r->errlen, "%s: %s: out of memory", r->file, kwhat);
		memcpy(kv->mem, s, len);
		kv->mem[len] = 0;
		kv->str.s = kv->mem;
		kv->str.len = len;
		return 0;
	}
	if (type != GGUF_ARRAY) {
		if (take(r, (uint64_t)vtypes[type].size, &b, kwhat))
			return -1;
		set_scalar(kv, (int)type, b);
		return 0;
	}
	uint32_t et;
	uint64_t n;
	if (rd_u32(r, &et, kwhat) || rd_u64(r, &n, kwhat))
		return -1;
	if (et >= GGUF_NTYPES)
		return fail(r->err, r->errlen, "%s: %s: array of unknown value type %u", r->file, kwhat, et);
	if (et == GGUF_ARRAY)
		return fail(r->err, r->errlen, "%s: %s: nested arrays are not supported", r->file, kwhat);
	kv->arr_type = (int)et;
	kv->n = n;
	size_t left = r->size - r->pos;
	if (et != GGUF_STRING) {
		uint64_t es = (uint64_t)vtypes[et].size;
		if (n > left / es)
			return fail(r->err, r->errlen, "%s: %s: array of %llu %s runs past end of file (%zu bytes left)",
			            r->file, kwhat, (unsigned long long)n, vtypes[et].name, left);
		kv->arr = r->p + r->pos;
		r->pos += (size_t)(n * es);
		return 0;
	}
	/* Strings: every element takes at least its 8-byte length, which bounds n before allocating. */
	if (n > left / 8)
		return fail(r->err, r->errlen, "%s: %s: array of %llu strings runs past end of file (%zu bytes left)",
		            r->file, kwhat, (unsigned long long)n, left);
	size_t start = r->pos, total = 0;
	for (uint64_t i = 0; i < n; i++) {
		if (r->size - r->pos < 8)
			return fail(r->err, r->errlen, "%s: %s: truncated in element %llu of %llu", r->file, kwhat,
			            (unsigned long long)i, (unsigned long long)n);
		len = le(r->p + r->pos, 8);
		r->pos += 8;
		if (len > r->size - r->pos)
			return fail(r->err, r->errlen,
			            "%s: %s: element %llu: string length %llu runs past end of file (%zu bytes left)", r->file,
			            kwhat, (unsigned long long)i, (unsigned long long)len, r->size - r->pos);
		r->pos += (size_t)len;
		total += (size_t)len + 1;
	}
	if (!(kv->strs = malloc((n ? n : 1) * sizeof *kv->strs)) || !(kv->mem = malloc(total ? total : 1)))
		return fail(r->err, r->errlen, "%s: %s: out of memory", r->file, kwhat);
	/* Second pass over bytes already checked: copy each string NUL-terminated. */
	size_t pos = start;
	char *dst = kv->mem;
	for (uint64_t i = 0; i < n; i++) {
		len = le(r->p + pos, 8);
		memcpy(dst, r->p + pos + 8, (size_t)len);
		dst[len] = 0;
		kv->strs[i].s = dst;
		kv->strs[i].len = len;
		dst += len + 1;
		pos += 8 + (size_t)len;
	}
	return 0;
}

/* Keys are sorted only to find duplicates; iteration keeps file order. */
static int cmp_kv_ptr(const void *a, const void *b)
{
	return strcmp((*(const GgufKV *const *)a)->key, (*(const GgufKV *const *)b)->key);
}

/* Duplicate keys make lookups ambiguous; gguf.cpp refuses them, so do we. */
static int check_dup_keys(GgufKV *kv, int n, const char *file, char *err, size_t errlen)
{
	if (n < 2)
		return 0;
	const GgufKV **ix = malloc((size_t)n * sizeof *ix);
	if (!ix)
		return fail(err, errlen, "%s: out of memory", file);
	for (int i = 0; i < n; i++)
		ix[i] = &kv[i];
	qsort(ix, (size_t)n, sizeof *ix, cmp_kv_ptr);
	for (int i = 1; i < n; i++)
		if (!strcmp(ix[i - 1]->key, ix[i]->key)) {
			char sb[SHOW_MAX + 4];
			fail(err, errlen, "%s: duplicate key '%s'", file, show(sb, ix[i]->key));
			free(ix);
			return -1;
		}
	free(ix);
	return 0;
}

/* Linear lookup: files hold tens of keys, and this keeps iteration order and lookup in one array. */
static const GgufKV *find_kv(const GgufKV *kv, int n, const char *key)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(kv[i].key, key))
			return &kv[i];
	return NULL;
}

/* ------------------------------------------------------------------------------------------------ */
/* One file: header, metadata, tensor infos, data section.                                          */

/* The spec's align(x); callers keep x far below 2^64 (it is a position inside a mapped file). */
static uint64_t align_up(uint64_t x, uint64_t a)
{
	return x + (a - x % a) % a;
}

/* Parse one file image. Its KVs go to *kv_out (owned by the caller); its tensors are appended to g->t
** with file index fi. */
/* Tensor info #i of file fi (name, dimensions, type, offset) into g->t[g->ntensor], checked: a known type whose
** block divides the row, sizes that do not overflow. */
static int read_tensor_info(Rd *rd, Gguf *g, int fi, uint64_t i)
{
	GgufFile *f = &g->files[fi];
	char *err = rd->err, sb[SHOW_MAX + 4];
	size_t errlen = rd->errlen;
	const uint8_t *b;
	GgufTensor *t = &g->t[g->ntensor];
	memset(t, 0, sizeof *t);
	char what[64];
	snprintf(what, sizeof what, "tensor #%llu", (unsigned long long)i);
	const uint8_t *s;
	uint64_t len;
	if (rd_str(rd, &s, &len, what))
		return -1;
	if (len == 0)
		return fail(err, errlen, "%s: tensor #%llu has an empty name", f->path, (unsigned long long)i);
	if (len > NAME_MAX_LEN)
		return fail(err, errlen, "%s: tensor #%llu: name of %llu bytes is too long (at most %d)", f->path,
		            (unsigned long long)i, (unsigned long long)len, NAME_MAX_LEN);
	if (memchr(s, 0, len))
		return fail(err, errlen, "%s: tensor #%llu: name contains a NUL byte", f->path, (unsigned long long)i);
	if (!(t->name = malloc(len + 1)))
		return fail(err, errlen, "%s: out of memory", f->path);
	memcpy(t->name, s, len);
	t->name[len] = 0;
	g->ntensor++;
	char twhat[SHOW_MAX + 16];
	snprintf(twhat, sizeof twhat, "tensor '%s'", show(sb, t->name));
	uint32_t nd;
	if (rd_u32(rd, &nd, twhat))
		return -1;
	if (nd > GGUF_MAX_DIMS)
		return fail(err, errlen, "%s: %s: %u dimensions (at most %d)", f->path, twhat, nd, GGUF_MAX_DIMS);
	t->ndim = (int)nd;
	t->nelem = 1;
	for (int d = 0; d < GGUF_MAX_DIMS; d++)
		t->ne[d] = 1;
	for (uint32_t d = 0; d < nd; d++) {
		uint64_t v;
		if (rd_u64(rd, &v, twhat))
			return -1;
		int64_t e = (int64_t)v;
		if (e < 0)
			return fail(err, errlen, "%s: %s: ne[%u] = %lld is negative", f->path, twhat, d, (long long)e);
		t->ne[d] = e;
		if (e && t->nelem > INT64_MAX / e)
			return fail(err, errlen, "%s: %s: element count overflows (ne[%u] = %lld)", f->path, twhat, d,
			            (long long)e);
		t->nelem *= e;
	}
	uint32_t ty;
	if (rd_u32(rd, &ty, twhat) || take(rd, 8, &b, twhat))
		return -1;
	t->type = (int)(int32_t)ty;
	t->off = le(b, 8);
	t->file = fi;
	const QuantType *qt = quant_type(t->type);
	if (!qt || !qt->name)
		return fail(err, errlen, "%s: %s: unknown ggml type id %d", f->path, twhat, t->type);
	if (!qt->blck)
		return fail(err, errlen, "%s: %s: ggml type %s (id %d) was removed from ggml and has no layout",
		            f->path, twhat, qt->name, t->type);
	if (t->ne[0] % qt->blck)
		return fail(err, errlen, "%s: %s: row length ne[0] = %lld is not a multiple of %s's block size %d",
		            f->path, twhat, (long long)t->ne[0], qt->name, qt->blck);
	/* ne[0] is a whole number of blocks, so the element count is too. */
	uint64_t blocks = (uint64_t)t->nelem / (uint64_t)qt->blck;
	if (blocks > UINT64_MAX / (uint64_t)qt->bytes)
		return fail(err, errlen, "%s: %s: byte size overflows", f->path, twhat);
	t->nbytes = blocks * (uint64_t)qt->bytes;
	return 0;
}

static int parse_file(Gguf *g, int fi, GgufKV **kv_out, int *nkv_out, char *err, size_t errlen)
{
	GgufFile *f = &g->files[fi];
	Rd r = {f->map, f->size, 0, f->path, err, errlen};
	char sb[SHOW_MAX + 4];
	*kv_out = NULL;
	*nkv_out = 0;

	if (f->size < 4 || memcmp(f->map, "GGUF", 4)) {
		if (f->size < 4)
			return fail(err, errlen, "%s: not a GGUF file (%zu bytes, too short for the magic)", f->path, f->size);
		return fail(err, errlen, "%s: not a GGUF file (magic %02x %02x %02x %02x, expected 'GGUF')", f->path,
		            f->map[0], f->map[1], f->map[2], f->map[3]);
	}
	r.pos = 4;
	uint32_t version;
	uint64_t nt, nk;
	if (rd_u32(&r, &version, "version"))
		return -1;
	if (version == 1)
		return fail(err, errlen, "%s: GGUF version 1 is not supported (only versions 2 and 3)", f->path);
	if (version != 2 && version != 3) {
		if (!(version & 0xffff))
			return fail(err, errlen, "%s: GGUF version %u looks byte-swapped: big-endian files are not supported",
			            f->path, version);
		return fail(err, errlen, "%s: unsupported GGUF version %u (only versions 2 and 3)", f->path, version);
	}
	if (fi == 0)
		g->version = (int)version;
	if (rd_u64(&r, &nt, "tensor count") || rd_u64(&r, &nk, "metadata count"))
		return -1;
	/* A KV takes at least 13 bytes (8 key length, 1 key byte, 4 type) and a tensor info 24; counts
	** beyond what the file can hold are rejected before any allocation. */
	size_t left = r.size - r.pos;
	if (nk > left / 13 || nk > INT32_MAX / 2)
		return fail(err, errlen, "%s: truncated or corrupt: metadata count %llu cannot fit in the %zu bytes left", f->path,
		            (unsigned long long)nk, left);
	if (nt > left / 24 || nt > (uint64_t)(INT32_MAX / 2 - g->ntensor))
		return fail(err, errlen, "%s: truncated or corrupt: tensor count %llu cannot fit in the %zu bytes left", f->path,
		            (unsigned long long)nt, left);

	GgufKV *kv = calloc(nk ? nk : 1, sizeof *kv);
	if (!kv)
		return fail(err, errlen, "%s: out of memory", f->path);
	*kv_out = kv;
	for (uint64_t i = 0; i < nk; i++) {
		*nkv_out = (int)i + 1;
		if (read_kv(&r, (int)i, &kv[i]))
			return -1;
	}
	if (check_dup_keys(kv, (int)nk, f->path, err, errlen))
		return -1;

	f->alignment = GGUF_DEFAULT_ALIGNMENT;
	const GgufKV *al = find_kv(kv, (int)nk, "general.alignment");
	if (al) {
		if (al->type != GGUF_UINT32)
			return fail(err, errlen, "%s: key 'general.alignment' has type %s, expected uint32", f->path,
			            gguf_type_name(al->type));
		if (!al->v.u || (al->v.u & (al->v.u - 1)))
			return fail(err, errlen, "%s: key 'general.alignment' is %llu, not a power of two", f->path,
			            (unsigned long long)al->v.u);
		f->alignment = (uint32_t)al->v.u;
	}

	/* Tensor infos. */
	GgufTensor *nt_arr = realloc(g->t, ((size_t)g->ntensor + nt + 1) * sizeof *g->t);
	if (!nt_arr)
		return fail(err, errlen, "%s: out of memory", f->path);
	g->t = nt_arr;
	int first = g->ntensor;
	for (uint64_t i = 0; i < nt; i++)
		if (read_tensor_info(&r, g, fi, i))
			return -1;

	/* The data section starts at the next alignment boundary (only when there are tensors). */
	if (nt) {
		f->data_start = align_up(r.pos, f->alignment);
		if (f->data_start > f->size)
			return fail(err, errlen, "%s: truncated: data section would start at %llu but the file has %zu bytes",
			            f->path, (unsigned long long)f->data_start, f->size);
	} else {
		f->data_start = r.pos;
	}
	uint64_t dsize = f->size - f->data_start;
	for (int i = first; i < g->ntensor; i++) {
		GgufTensor *t = &g->t[i];
		if (t->off % f->alignment)
			return fail(err, errlen, "%s: tensor '%s': offset %llu is not a multiple of the alignment %u",
			            f->path, show(sb, t->name), (unsigned long long)t->off, f->alignment);
		if (t->off > dsize || t->nbytes > dsize - t->off)
			return fail(err, errlen, "%s: tensor '%s': data [%llu, +%llu) runs past end of file (data section %llu bytes)",
			            f->path, show(sb, t->name), (unsigned long long)t->off, (unsigned long long)t->nbytes,
			            (unsigned long long)dsize);
		t->off += f->data_start;
	}
	return 0;
}

/* ------------------------------------------------------------------------------------------------ */
/* Open / close                                                                                      */

/* Name order for the lookup index (qsort_r: the tensor array is the context, no globals). */
static int cmp_by_name_ctx(const void *a, const void *b, void *ctx)
{
	const GgufTensor *t = ctx;
	return strcmp(t[*(const int *)a].name, t[*(const int *)b].name);
}

/* Sort the name index and refuse duplicate names (across all splits). */
static int index_names(Gguf *g, char *err, size_t errlen)
{
	g->by_name = malloc(((size_t)g->ntensor + 1) * sizeof *g->by_name);
	if (!g->by_name)
		return fail(err, errlen, "%s: out of memory", g->path);
	for (int i = 0; i < g->ntensor; i++)
		g->by_name[i] = i;
	qsort_r(g->by_name, (size_t)g->ntensor, sizeof *g->by_name, cmp_by_name_ctx, g->t);
	for (int i = 1; i < g->ntensor; i++) {
		const GgufTensor *a = &g->t[g->by_name[i - 1]], *b = &g->t[g->by_name[i]];
		if (!strcmp(a->name, b->name)) {
			char sb[SHOW_MAX + 4];
			return fail(err, errlen, "%s: duplicate tensor name '%s'", g->files[b->file].path, show(sb, b->name));
		}
	}
	return 0;
}

/* Map a whole file read-only; an empty file gets no mapping (and fails at the magic check). */
static int map_file(GgufFile *f, const char *path, char *err, size_t errlen)
{
	if (!(f->path = strdup(path)))
		return fail(err, errlen, "%s: out of memory", path);
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block: refused below */
	if (fd < 0)
		return fail(err, errlen, "%s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return fail(err, errlen, "%s: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return fail(err, errlen, "%s: not a regular file", path);
	}
	f->size = (size_t)st.st_size;
	if (f->size) {
		void *m = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, fd, 0);
		if (m == MAP_FAILED) {
			int e = errno;
			close(fd);
			return fail(err, errlen, "%s: mmap: %s", path, strerror(e));
		}
		f->map = m;
		f->owned = 1;
	} else {
		f->map = (const uint8_t *)"";
	}
	close(fd);
	return 0;
}

/* Safe on a zeroed or half-opened Gguf, so every error path of open can end here. */
void gguf_close(Gguf *g)
{
	if (!g)
		return;
	for (int i = 0; i < g->nfile; i++) {
		if (g->files[i].owned)
			munmap((void *)g->files[i].map, g->files[i].size);
		free(g->files[i].path);
	}
	free(g->files);
	kvs_free(g->kv, g->nkv);
	for (int i = 0; i < g->ntensor; i++)
		free(g->t[i].name);
	free(g->t);
	free(g->by_name);
	free(g->path);
	memset(g, 0, sizeof *g);
}

/* Add a file slot (zeroed) to g. */
static GgufFile *add_file(Gguf *g, char *err, size_t errlen)
{
	GgufFile *f = realloc(g->files, ((size_t)g->nfile + 1) * sizeof *f);
	if (!f) {
		fail(err, errlen, "%s: out of memory", g->path);
		return NULL;
	}
	g->files = f;
	memset(&f[g->nfile], 0, sizeof *f);
	return &f[g->nfile++];
}

/* In-memory images take the same parse as files; the buffer stays the caller's. */
int gguf_open_buffer(Gguf *g, const void *buf, size_t size, const char *name, char *err, size_t errlen)
{
	memset(g, 0, sizeof *g);
	if (err && errlen)
		err[0] = 0;
	if (!(g->path = strdup(name ? name : "(buffer)")))
		return fail(err, errlen, "gguf: out of memory");
	GgufFile *f = add_file(g, err, errlen);
	if (!f || !(f->path = strdup(g->path)))
		goto bad;
	f->map = size ? buf : (const uint8_t *)"";
	f->size = size;
	if (parse_file(g, 0, &g->kv, &g->nkv, err, errlen) || index_names(g, err, errlen))
		goto bad;
	g->alignment = f->alignment;
	return 0;
bad:
	if (err && errlen && !err[0])
		fail(err, errlen, "%s: out of memory", g->path);
	gguf_close(g);
	return -1;
}

/* Recognize "...-00001-of-00003.gguf": returns 1 and the split number (1-based) and count, with
** prefix_len the length of the part before "-0000k". */
static int split_name(const char *path, int *k, int *n, size_t *prefix_len)
{
	size_t len = strlen(path);
	const char *tail = "-00000-of-00000.gguf";
	size_t tl = strlen(tail);
	if (len < tl)
		return 0;
	const char *s = path + len - tl;
	for (size_t i = 0; i < tl; i++) {
		if (tail[i] == '0') {
			if (s[i] < '0' || s[i] > '9')
				return 0;
		} else if (s[i] != tail[i]) {
			return 0;
		}
	}
	*k = atoi(s + 1);
	*n = atoi(s + 10);
	*prefix_len = len - tl;
	return 1;
}

/* split.count / split.no as an unsigned number; -1 when absent, -2 when not an integer. */
static long long split_key(const GgufKV *kv, int n, const char *key)
{
	const GgufKV *k = find_kv(kv, n, key);
	uint64_t v;
	if (!k)
		return -1;
	if (gguf_kv_uint(k, &v) || v > 1000000)
		return -2;
	return (long long)v;
}

/* Open the first file, then, when its split keys or name say so, every other split of the set, each
** checked to carry the same split.count and its own split.no; tensors of all splits share one index. */
int gguf_open(Gguf *g, const char *path, char *err, size_t errlen)
{
	memset(g, 0, sizeof *g);
	if (err && errlen)
		err[0] = 0;
	if (!(g->path = strdup(path)))
		return fail(err, errlen, "%s: out of memory", path);
	GgufFile *f = add_file(g, err, errlen);
	if (!f || map_file(f, path, err, errlen) || parse_file(g, 0, &g->kv, &g->nkv, err, errlen))
		goto bad;
	g->alignment = f->alignment;

	int k = 1, n = 1;
	size_t plen = 0;
	int named = split_name(path, &k, &n, &plen);
	long long cnt = split_key(g->kv, g->nkv, "split.count");
	long long no = split_key(g->kv, g->nkv, "split.no");
	if (cnt == -2 || no == -2) {
		fail(err, errlen, "%s: split.count / split.no must be unsigned integers", path);
		goto bad;
	}
	if (named && k != 1) {
		fail(err, errlen, "%s: this is split %d of %d; open the first split (-00001-of-%05d.gguf)", path, k, n, n);
		goto bad;
	}
	if (named && n > 1 && cnt != n) {
		if (cnt < 0)
			fail(err, errlen, "%s: the file name says %d splits but split.count is missing", path, n);
		else
			fail(err, errlen, "%s: the file name says %d splits but split.count is %lld", path, n, cnt);
		goto bad;
	}
	if (cnt < 0)
		cnt = 1;
	if (cnt > 1 && (!named || n != cnt)) {
		fail(err, errlen, "%s: split.count is %lld but the file name does not end in -00001-of-%05lld.gguf", path, cnt,
		     cnt);
		goto bad;
	}
	if (cnt == 0 || no > 0 || (cnt > 1 && no != 0)) {
		fail(err, errlen, "%s: bad split set: split.no is %lld and split.count %lld in the first split", path, no, cnt);
		goto bad;
	}
	for (int i = 1; i < cnt; i++) {
		char *sp = NULL;
		if (asprintf(&sp, "%.*s-%05d-of-%05lld.gguf", (int)plen, path, i + 1, cnt) < 0) {
			fail(err, errlen, "%s: out of memory", path);
			goto bad;
		}
		GgufKV *kv = NULL;
		int nkv = 0;
		f = add_file(g, err, errlen);
		int rc = f ? 0 : -1;
		if (f && map_file(f, sp, err, errlen)) {
			char why[256];
			snprintf(why, sizeof why, "%s", err ? err : "");
			rc = fail(err, errlen, "%s: bad split set: cannot open split %d of %lld (%s)", path, i + 1, cnt, why);
		}
		if (!rc)
			rc = parse_file(g, g->nfile - 1, &kv, &nkv, err, errlen);
		if (!rc) {
			long long c2 = split_key(kv, nkv, "split.count"), n2 = split_key(kv, nkv, "split.no");
			if (c2 != cnt || n2 != i)
				rc = fail(err, errlen, "%s: bad split set: %s: split.no is %lld and split.count %lld, expected %d and %lld",
				          path, sp, n2, c2, i, cnt);
		}
		kvs_free(kv, nkv);
		free(sp);
		if (rc)
			goto bad;
	}
	const GgufKV *tc = find_kv(g->kv, g->nkv, "split.tensors.count");
	int64_t want;
	if (cnt > 1 && tc && (gguf_kv_int(tc, &want) || want != g->ntensor)) {
		fail(err, errlen, "%s: bad split set: split.tensors.count says %lld tensors but the %lld splits hold %d", path,
		     (long long)(gguf_kv_int(tc, &want) ? -1 : want), cnt, g->ntensor);
		goto bad;
	}
	if (index_names(g, err, errlen))
		goto bad;
	return 0;
bad:
	if (err && errlen && !err[0])
		fail(err, errlen, "%s: out of memory", path);
	gguf_close(g);
	return -1;
}

/* ------------------------------------------------------------------------------------------------ */
/* Lookups                                                                                           */

/* Public lookups; see gguf.h for the conversion rules. */
const GgufKV *gguf_find_key(const Gguf *g, const char *key)
{
	return find_kv(g->kv, g->nkv, key);
}

/* Integer value of element b of type t as a signed/unsigned pair; returns 0 for non-integers. */
static int int_of(int t, const uint8_t *b, int64_t *iv, uint64_t *uv, int *is_signed)
{
	GgufKV tmp;
	memset(&tmp, 0, sizeof tmp);
	switch (t) {
	case GGUF_UINT8: case GGUF_UINT16: case GGUF_UINT32: case GGUF_UINT64: case GGUF_BOOL:
		set_scalar(&tmp, t, b);
		*uv = tmp.v.u;
		*is_signed = 0;
		return 1;
	case GGUF_INT8: case GGUF_INT16: case GGUF_INT32: case GGUF_INT64:
		set_scalar(&tmp, t, b);
		*iv = tmp.v.i;
		*is_signed = 1;
		return 1;
	}
	return 0;
}

/* Shared conversion rules for scalars and array elements. */
/* Width conversion that refuses instead of wrapping: a file's uint64 must not turn negative. */
static int conv_int(int is_signed, int64_t iv, uint64_t uv, int64_t *out)
{
	if (is_signed) {
		*out = iv;
		return 0;
	}
	if (uv > INT64_MAX)
		return -1;
	*out = (int64_t)uv;
	return 0;
}

/* The unsigned counterpart: negative values are refused. */
static int conv_uint(int is_signed, int64_t iv, uint64_t uv, uint64_t *out)
{
	if (is_signed) {
		if (iv < 0)
			return -1;
		*out = (uint64_t)iv;
		return 0;
	}
	*out = uv;
	return 0;
}

/* Scalar getters on a KV: integers (and bools) convert between widths, floats only to float. */
int gguf_kv_int(const GgufKV *kv, int64_t *out)
{
	if (!kv || kv->type == GGUF_STRING || kv->type == GGUF_ARRAY || kv->type == GGUF_FLOAT32 ||
	    kv->type == GGUF_FLOAT64)
		return -1;
	int sg = kv->type == GGUF_INT8 || kv->type == GGUF_INT16 || kv->type == GGUF_INT32 || kv->type == GGUF_INT64;
	return conv_int(sg, kv->v.i, kv->v.u, out);
}

int gguf_kv_uint(const GgufKV *kv, uint64_t *out)
{
	if (!kv || kv->type == GGUF_STRING || kv->type == GGUF_ARRAY || kv->type == GGUF_FLOAT32 ||
	    kv->type == GGUF_FLOAT64)
		return -1;
	int sg = kv->type == GGUF_INT8 || kv->type == GGUF_INT16 || kv->type == GGUF_INT32 || kv->type == GGUF_INT64;
	return conv_uint(sg, kv->v.i, kv->v.u, out);
}

int gguf_kv_float(const GgufKV *kv, double *out)
{
	if (!kv || (kv->type != GGUF_FLOAT32 && kv->type != GGUF_FLOAT64))
		return -1;
	*out = kv->v.f;
	return 0;
}

/* Key-name getters: lookup plus the KV getters, so an absent key and a wrong type both give -1. */
int gguf_get_int(const Gguf *g, const char *key, int64_t *out)
{
	return gguf_kv_int(gguf_find_key(g, key), out);
}

int gguf_get_uint(const Gguf *g, const char *key, uint64_t *out)
{
	return gguf_kv_uint(gguf_find_key(g, key), out);
}

int gguf_get_float(const Gguf *g, const char *key, double *out)
{
	return gguf_kv_float(gguf_find_key(g, key), out);
}

int gguf_get_bool(const Gguf *g, const char *key, int *out)
{
	const GgufKV *kv = gguf_find_key(g, key);
	if (!kv || kv->type != GGUF_BOOL)
		return -1;
	*out = (int)kv->v.u;
	return 0;
}

const char *gguf_get_str(const Gguf *g, const char *key)
{
	const GgufKV *kv = gguf_find_key(g, key);
	return kv && kv->type == GGUF_STRING ? kv->str.s : NULL;
}

/* Arrays: length 0 for a scalar, so a loop over a non-array does nothing. */
uint64_t gguf_arr_len(const GgufKV *kv)
{
	return kv && kv->type == GGUF_ARRAY ? kv->n : 0;
}

/* Element i of a fixed-size array, or NULL when out of range or not such an array. */
static const uint8_t *elem(const GgufKV *kv, uint64_t i)
{
	if (!kv || kv->type != GGUF_ARRAY || i >= kv->n || kv->arr_type == GGUF_STRING)
		return NULL;
	return kv->arr + i * (uint64_t)vtypes[kv->arr_type].size;
}

/* Array element getters, bounds-checked, with the scalar conversion rules. */
int gguf_arr_int(const GgufKV *kv, uint64_t i, int64_t *out)
{
	const uint8_t *b = elem(kv, i);
	int64_t iv = 0;
	uint64_t uv = 0;
	int sg;
	if (!b || !int_of(kv->arr_type, b, &iv, &uv, &sg))
		return -1;
	return conv_int(sg, iv, uv, out);
}

int gguf_arr_uint(const GgufKV *kv, uint64_t i, uint64_t *out)
{
	const uint8_t *b = elem(kv, i);
	int64_t iv = 0;
	uint64_t uv = 0;
	int sg;
	if (!b || !int_of(kv->arr_type, b, &iv, &uv, &sg))
		return -1;
	return conv_uint(sg, iv, uv, out);
}

int gguf_arr_float(const GgufKV *kv, uint64_t i, double *out)
{
	const uint8_t *b = elem(kv, i);
	if (!b || (kv->arr_type != GGUF_FLOAT32 && kv->arr_type != GGUF_FLOAT64))
		return -1;
	GgufKV tmp;
	memset(&tmp, 0, sizeof tmp);
	set_scalar(&tmp, kv->arr_type, b);
	*out = tmp.v.f;
	return 0;
}

const char *gguf_arr_str(const GgufKV *kv, uint64_t i, uint64_t *len)
{
	if (!kv || kv->type != GGUF_ARRAY || kv->arr_type != GGUF_STRING || i >= kv->n)
		return NULL;
	if (len)
		*len = kv->strs[i].len;
	return kv->strs[i].s;
}

/* Binary search over the name index built at open (names are unique, checked there). */
const GgufTensor *gguf_find_tensor(const Gguf *g, const char *name)
{
	int lo = 0, hi = g->ntensor - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		const GgufTensor *t = &g->t[g->by_name[mid]];
		int c = strcmp(name, t->name);
		if (!c)
			return t;
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Offsets were checked against the file at open, so this is plain arithmetic. */
const void *gguf_tensor_data(const Gguf *g, const GgufTensor *t)
{
	return g->files[t->file].map + t->off;
}

/* ggml lists the innermost dim first; PyTorch lists it last. */
int gguf_torch_shape(const GgufTensor *t, int64_t shape[GGUF_MAX_DIMS])
{
	int nd = t->ndim ? t->ndim : 1;
	for (int i = 0; i < nd; i++)
		shape[i] = t->ne[nd - 1 - i];
	return nd;
}

/* ------------------------------------------------------------------------------------------------ */
/* Writer                                                                                            */

typedef struct {
	uint8_t *p;
	size_t n, cap;
	int oom;
} Buf;

/* Append bytes, remembering an allocation failure instead of reporting each one. */
static void put(Buf *b, const void *src, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->n + n)
			cap *= 2;
		uint8_t *p = realloc(b->p, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
	memcpy(b->p + b->n, src, n);
	b->n += n;
}

/* Little-endian integers and GGUF strings (u64 length + bytes). */
static void put_le(Buf *b, uint64_t v, int n)
{
	uint8_t t[8];
	for (int i = 0; i < n; i++)
		t[i] = (uint8_t)(v >> (8 * i));
	put(b, t, (size_t)n);
}

static void put_str(Buf *b, const char *s, size_t len)
{
	put_le(b, len, 8);
	put(b, s, len);
}

typedef struct {
	char *name;
	int type, ndim;
	int64_t ne[GGUF_MAX_DIMS];
	uint8_t *data;
	size_t nbytes;
} WTensor;

struct GgufWriter {
	Buf kv;              /* serialized KVs, in the order added */
	int64_t nkv;
	int has_alignment_key;
	uint32_t alignment;
	WTensor *t;
	int nt, cap;
	int oom;
};

/* Writers start empty with the default alignment; everything added is copied. */
GgufWriter *gguf_writer_new(void)
{
	GgufWriter *w = calloc(1, sizeof *w);
	if (w)
		w->alignment = GGUF_DEFAULT_ALIGNMENT;
	return w;
}

/* NULL-safe, like free. */
void gguf_writer_free(GgufWriter *w)
{
	if (!w)
		return;
	free(w->kv.p);
	for (int i = 0; i < w->nt; i++) {
		free(w->t[i].name);
		free(w->t[i].data);
	}
	free(w->t);
	free(w);
}

/* 0 means the default; other values are written as given (tests use odd ones on purpose). */
void gguf_writer_set_alignment(GgufWriter *w, uint32_t alignment)
{
	w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
}

/* Key and type of a new KV; the value follows. */
static void kv_head(GgufWriter *w, const char *key, int type)
{
	if (!strcmp(key, "general.alignment"))
		w->has_alignment_key = 1;
	put_str(&w->kv, key, strlen(key));
	put_le(&w->kv, (uint64_t)type, 4);
	w->nkv++;
}

/* A fixed-size scalar: its bits, little-endian, in the type's width. */
static int kv_scalar(GgufWriter *w, const char *key, int type, uint64_t bits)
{
	kv_head(w, key, type);
	put_le(&w->kv, bits, vtypes[type].size);
	return w->kv.oom ? -1 : 0;
}

/* One setter per value type, so callers cannot pair a value with the wrong type id. */
int gguf_writer_u8(GgufWriter *w, const char *key, uint8_t v) { return kv_scalar(w, key, GGUF_UINT8, v); }
int gguf_writer_i8(GgufWriter *w, const char *key, int8_t v) { return kv_scalar(w, key, GGUF_INT8, (uint8_t)v); }
int gguf_writer_u16(GgufWriter *w, const char *key, uint16_t v) { return kv_scalar(w, key, GGUF_UINT16, v); }
int gguf_writer_i16(GgufWriter *w, const char *key, int16_t v) { return kv_scalar(w, key, GGUF_INT16, (uint16_t)v); }
int gguf_writer_u32(GgufWriter *w, const char *key, uint32_t v) { return kv_scalar(w, key, GGUF_UINT32, v); }
int gguf_writer_i32(GgufWriter *w, const char *key, int32_t v) { return kv_scalar(w, key, GGUF_INT32, (uint32_t)v); }
int gguf_writer_u64(GgufWriter *w, const char *key, uint64_t v) { return kv_scalar(w, key, GGUF_UINT64, v); }
int gguf_writer_i64(GgufWriter *w, const char *key, int64_t v) { return kv_scalar(w, key, GGUF_INT64, (uint64_t)v); }
int gguf_writer_bool(GgufWriter *w, const char *key, int v) { return kv_scalar(w, key, GGUF_BOOL, v != 0); }

/* Floats are written by their bit patterns. */
int gguf_writer_f32(GgufWriter *w, const char *key, float v)
{
	uint32_t u;
	memcpy(&u, &v, 4);
	return kv_scalar(w, key, GGUF_FLOAT32, u);
}

int gguf_writer_f64(GgufWriter *w, const char *key, double v)
{
	uint64_t u;
	memcpy(&u, &v, 8);
	return kv_scalar(w, key, GGUF_FLOAT64, u);
}

/* Strings without the NUL, as GGUF stores them. */
int gguf_writer_str(GgufWriter *w, const char *key, const char *v)
{
	kv_head(w, key, GGUF_STRING);
	put_str(&w->kv, v, strlen(v));
	return w->kv.oom ? -1 : 0;
}

/* Fixed-size arrays are re-encoded element by element so the file is little-endian whatever the host. */
int gguf_writer_arr(GgufWriter *w, const char *key, int elem_type, const void *data, uint64_t n)
{
	if (elem_type < 0 || elem_type >= GGUF_NTYPES || !vtypes[elem_type].size)
		return -1;
	kv_head(w, key, GGUF_ARRAY);
	put_le(&w->kv, (uint64_t)elem_type, 4);
	put_le(&w->kv, n, 8);
	const uint8_t *p = data;
	int es = vtypes[elem_type].size;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t v = 0;
		memcpy(&v, p + i * (uint64_t)es, (size_t)es);   /* host order is little-endian on our targets */
		put_le(&w->kv, v, es);
	}
	return w->kv.oom ? -1 : 0;
}

/* Arrays of strings (vocabularies, merges). */
int gguf_writer_arr_str(GgufWriter *w, const char *key, const char *const *v, uint64_t n)
{
	kv_head(w, key, GGUF_ARRAY);
	put_le(&w->kv, GGUF_STRING, 4);
	put_le(&w->kv, n, 8);
	for (uint64_t i = 0; i < n; i++)
		put_str(&w->kv, v[i], strlen(v[i]));
	return w->kv.oom ? -1 : 0;
}

/* Tensors are copied so callers can free or reuse their buffers right away. */
int gguf_writer_tensor(GgufWriter *w, const char *name, int type, int ndim, const int64_t *ne, const void *data,
                       size_t nbytes)
{
	if (ndim < 0 || ndim > GGUF_MAX_DIMS)
		return -1;
	if (w->nt == w->cap) {
		int cap = w->cap ? 2 * w->cap : 16;
		WTensor *t = realloc(w->t, (size_t)cap * sizeof *t);
		if (!t)
			return -1;
		w->t = t;
		w->cap = cap;
	}
	WTensor *t = &w->t[w->nt];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	t->data = malloc(nbytes ? nbytes : 1);
	if (!t->name || !t->data) {
		free(t->name);
		free(t->data);
		return -1;
	}
	if (nbytes)
		memcpy(t->data, data, nbytes);
	t->type = type;
	t->ndim = ndim;
	for (int i = 0; i < ndim; i++)
		t->ne[i] = ne[i];
	t->nbytes = nbytes;
	w->nt++;
	return 0;
}

/* The whole file in memory: header, KVs, tensor infos with packed aligned offsets, padded data. */
uint8_t *gguf_writer_image(GgufWriter *w, size_t *size)
{
	Buf b = {0};
	uint64_t a = w->alignment;
	int add_al = a != GGUF_DEFAULT_ALIGNMENT && !w->has_alignment_key;
	put(&b, "GGUF", 4);
	put_le(&b, 3, 4);
	put_le(&b, (uint64_t)w->nt, 8);
	put_le(&b, (uint64_t)(w->nkv + add_al), 8);
	if (add_al) {
		put_str(&b, "general.alignment", 17);
		put_le(&b, GGUF_UINT32, 4);
		put_le(&b, a, 4);
	}
	if (w->kv.oom)
		b.oom = 1;
	else
		put(&b, w->kv.p, w->kv.n);
	uint64_t off = 0;
	for (int i = 0; i < w->nt; i++) {
		const WTensor *t = &w->t[i];
		put_str(&b, t->name, strlen(t->name));
		put_le(&b, (uint64_t)t->ndim, 4);
		for (int d = 0; d < t->ndim; d++)
			put_le(&b, (uint64_t)t->ne[d], 8);
		put_le(&b, (uint64_t)(uint32_t)t->type, 4);
		put_le(&b, off, 8);
		off = align_up(off + t->nbytes, a);
	}
	static const uint8_t zero[256];
	if (w->nt) {
		while (b.n % a && !b.oom)
			put(&b, zero, (size_t)((a - b.n % a) < sizeof zero ? a - b.n % a : sizeof zero));
		for (int i = 0; i < w->nt; i++) {
			put(&b, w->t[i].data, w->t[i].nbytes);
			while (b.n % a && !b.oom)
				put(&b, zero, (size_t)((a - b.n % a) < sizeof zero ? a - b.n % a : sizeof zero));
		}
	}
	if (b.oom) {
		free(b.p);
		return NULL;
	}
	*size = b.n;
	return b.p;
}

/* Build the image and write it in one go; a short write or a failed close is an error. */
int gguf_writer_write(GgufWriter *w, const char *path, char *err, size_t errlen)
{
	size_t n = 0;
	uint8_t *img = gguf_writer_image(w, &n);
	if (!img)
		return fail(err, errlen, "%s: out of memory", path);
	FILE *f = fopen(path, "wb");
	if (!f) {
		int e = errno;
		free(img);
		return fail(err, errlen, "%s: %s", path, strerror(e));
	}
	size_t wr = fwrite(img, 1, n, f);
	int bad = wr != n || ferror(f);
	int e = errno;
	if (fclose(f))
		bad = 1;
	free(img);
	if (bad)
		return fail(err, errlen, "%s: write failed: %s", path, strerror(e));
	return 0;
}
