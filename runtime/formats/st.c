/*
** runtime/formats/st.c — Hugging Face checkpoint directories (config.json + safetensors files), memory-mapped
** read-only. Every header field is checked against the file before anything points into it, so a
** truncated, corrupt or hostile file yields a one-line error naming the file and tensor, never a crash.
** All JSON (config, index, safetensors headers) goes through jansson.
*/
#include "st.h"
#include "rfile.h"

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

/* A safetensors header longer than this is not a header but an attack or a corrupt length field. */
#define ST_MAX_HEADER 100000000ull
/* Tensor names and file names quoted in messages are cut to this many bytes. */
#define ST_SHOW_MAX 120

static const struct {
	const char *name;
	size_t size;
} st_types[ST_NTYPES] = {
	[ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2}, [ST_BF16] = {"BF16", 2}, [ST_F8_E4M3] = {"F8_E4M3", 1},
	[ST_I32] = {"I32", 4},   [ST_I64] = {"I64", 8}, [ST_I8] = {"I8", 1},     [ST_U8] = {"U8", 1},
	[ST_BOOL] = {"BOOL", 1}, [ST_F64] = {"F64", 8},
};

/* Errors are one line (seterr replaces control bytes). */
#define fail seterr

/* Copy a name for a message, shortened so that the part of the message saying what is wrong survives
** even when a hostile file uses a megabyte-long tensor name. */
static const char *show(char buf[ST_SHOW_MAX + 4], const char *s)
{
	size_t n = strlen(s);
	if (n <= ST_SHOW_MAX)
		return s;
	memcpy(buf, s, ST_SHOW_MAX);
	memcpy(buf + ST_SHOW_MAX, "...", 4);
	return buf;
}

/* Join a directory and a file name with exactly one '/'; NULL when out of memory. */
static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir);
	char *s = NULL;
	if (asprintf(&s, "%s%s%s", dir, n && dir[n - 1] == '/' ? "" : "/", name) < 0)
		return NULL;
	return s;
}

/* Names are looked up by binary search, so the table is kept sorted by name. */
static int cmp_name(const void *a, const void *b)
{
	return strcmp(((const StTensor *)a)->name, ((const StTensor *)b)->name);
}

/* Overlap detection walks one file's tensors in offset order. */
static int cmp_off(const void *a, const void *b)
{
	const StTensor *x = *(const StTensor *const *)a, *y = *(const StTensor *const *)b;
	if (x->off != y->off)
		return x->off < y->off ? -1 : 1;
	return x->nbytes < y->nbytes ? -1 : x->nbytes > y->nbytes;
}

/* Parse one JSON integer that must be non-negative; jansson stores integers as json_int_t. */
static int get_u64(const json_t *v, uint64_t *out)
{
	if (!json_is_integer(v) || json_integer_value(v) < 0)
		return -1;
	*out = (uint64_t)json_integer_value(v);
	return 0;
}

/* Check one header entry and append it to d->t (capacity reserved by the caller). Returns -1 with
** err set when any field is missing, mistyped or out of bounds. */
static int add_entry(StDir *d, int fi, const char *path, const char *name, const json_t *e, uint64_t base,
                     uint64_t datalen, char *err, size_t errlen)
{
	char nb[ST_SHOW_MAX + 4];
	const char *sn = show(nb, name);
	if (!json_is_object(e))
		return fail(err, errlen, "%s: tensor '%s': entry is not a JSON object", path, sn);
	const json_t *jd = json_object_get(e, "dtype"), *js = json_object_get(e, "shape"),
		     *jo = json_object_get(e, "data_offsets");
	if (!jd)
		return fail(err, errlen, "%s: tensor '%s': missing \"dtype\"", path, sn);
	if (!js)
		return fail(err, errlen, "%s: tensor '%s': missing \"shape\"", path, sn);
	if (!jo)
		return fail(err, errlen, "%s: tensor '%s': missing \"data_offsets\"", path, sn);
	if (!json_is_string(jd))
		return fail(err, errlen, "%s: tensor '%s': \"dtype\" is not a string", path, sn);
	int dtype = st_type_from_name(json_string_value(jd));
	if (dtype < 0) {
		char db[ST_SHOW_MAX + 4];
		return fail(err, errlen, "%s: tensor '%s': unknown dtype '%s'", path, sn,
			    show(db, json_string_value(jd)));
	}
	if (!json_is_array(js))
		return fail(err, errlen, "%s: tensor '%s': \"shape\" is not an array", path, sn);
	size_t ndim = json_array_size(js);
	if (ndim > 8)
		return fail(err, errlen, "%s: tensor '%s': %zu dimensions, at most 8 supported", path, sn, ndim);
	int64_t shape[8] = {0};
	uint64_t count = 1;
	int overflow = 0;
	for (size_t i = 0; i < ndim; i++) {
		const json_t *v = json_array_get(js, i);
		if (!json_is_integer(v))
			return fail(err, errlen, "%s: tensor '%s': shape[%zu] is not an integer", path, sn, i);
		if (json_integer_value(v) < 0)
			return fail(err, errlen, "%s: tensor '%s': shape[%zu] = %lld is negative", path, sn, i,
				    (long long)json_integer_value(v));
		shape[i] = (int64_t)json_integer_value(v);
		overflow |= __builtin_mul_overflow(count, (uint64_t)shape[i], &count);
	}
	uint64_t want;
	if (overflow || __builtin_mul_overflow(count, (uint64_t)st_types[dtype].size, &want))
		return fail(err, errlen, "%s: tensor '%s': shape product overflows 64 bits", path, sn);
	if (!json_is_array(jo) || json_array_size(jo) != 2)
		return fail(err, errlen, "%s: tensor '%s': \"data_offsets\" is not an array of 2 integers", path,
			    sn);
	uint64_t begin, end;
	if (get_u64(json_array_get(jo, 0), &begin) || get_u64(json_array_get(jo, 1), &end))
		return fail(err, errlen, "%s: tensor '%s': \"data_offsets\" must be non-negative integers", path,
			    sn);
	if (end < begin)
		return fail(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] end before begin", path, sn,
			    (unsigned long long)begin, (unsigned long long)end);
	if (end > datalen)
		return fail(err, errlen, "%s: tensor '%s': data_offsets [%llu, %llu] past end of data (%llu bytes)",
			    path, sn, (unsigned long long)begin, (unsigned long long)end,
			    (unsigned long long)datalen);
	if (end - begin != want)
		return fail(err, errlen,
			    "%s: tensor '%s': data_offsets [%llu, %llu] hold %llu bytes but %s shape needs %llu "
			    "(size mismatch)",
			    path, sn, (unsigned long long)begin, (unsigned long long)end,
			    (unsigned long long)(end - begin), st_types[dtype].name, (unsigned long long)want);
	StTensor *t = &d->t[d->ntensor];
	memset(t, 0, sizeof *t);
	t->name = strdup(name);
	if (!t->name)
		return fail(err, errlen, "%s: out of memory", path);
	t->dtype = dtype;
	t->ndim = (int)ndim;
	memcpy(t->shape, shape, sizeof shape);
	t->file = fi;
	t->off = base + begin;
	t->nbytes = want;
	d->ntensor++;
	return 0;
}

/* Tensors of one file must not share bytes: a writer bug or a crafted file could otherwise alias two
** weights. Empty tensors occupy nothing and never overlap. */
static int check_overlap(const StDir *d, int first, uint64_t base, const char *path, char *err, size_t errlen)
{
	int n = d->ntensor - first, rc = 0;
	if (n < 2)
		return 0;
	const StTensor **p = malloc((size_t)n * sizeof *p);
	if (!p)
		return fail(err, errlen, "%s: out of memory", path);
	int m = 0;
	for (int i = first; i < d->ntensor; i++)
		if (d->t[i].nbytes)
			p[m++] = &d->t[i];
	qsort(p, (size_t)m, sizeof *p, cmp_off);
	for (int i = 1; i < m; i++) {
		const StTensor *a = p[i - 1], *b = p[i];
		if (b->off < a->off + a->nbytes) {
			char ab[ST_SHOW_MAX + 4], bb[ST_SHOW_MAX + 4];
			/* offsets relative to the data section, as the header writes them */
			rc = fail(err, errlen, "%s: tensors '%s' [%llu, %llu] and '%s' [%llu, %llu] overlap", path,
				  show(ab, a->name), (unsigned long long)(a->off - base),
				  (unsigned long long)(a->off - base + a->nbytes), show(bb, b->name),
				  (unsigned long long)(b->off - base), (unsigned long long)(b->off - base + b->nbytes));
			break;
		}
	}
	free(p);
	return rc;
}

/* Map one safetensors file into d->files[d->nfile] (capacity reserved by the caller) and append its
** tensors to d->t. Everything acquired is recorded in d at once, so st_close cleans up any failure. */
static int parse_file(StDir *d, const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block: refused below */
	if (fd < 0)
		return fail(err, errlen, "%s: cannot open: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fd, &st) < 0) {
		int e = errno;
		close(fd);
		return fail(err, errlen, "%s: cannot stat: %s", path, strerror(e));
	}
	if (!S_ISREG(st.st_mode)) {
		close(fd);
		return fail(err, errlen, "%s: not a regular file", path);
	}
	uint64_t size = (uint64_t)st.st_size;
	if (size < 8) {
		close(fd);
		return fail(err, errlen, "%s: file is %llu bytes, too short for the 8-byte header length", path,
			    (unsigned long long)size);
	}
	void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
	int e = errno;
	close(fd);
	if (map == MAP_FAILED)
		return fail(err, errlen, "%s: cannot mmap: %s", path, strerror(e));
	StFile *f = &d->files[d->nfile];
	f->map = map;
	f->size = (size_t)size;
	f->path = strdup(path);
	int fi = d->nfile++;
	if (!f->path)
		return fail(err, errlen, "%s: out of memory", path);

	uint64_t n = 0;
	for (int i = 7; i >= 0; i--)
		n = n << 8 | f->map[i];
	if (n > ST_MAX_HEADER)
		return fail(err, errlen, "%s: header length %llu is absurd (more than %llu bytes)", path,
			    (unsigned long long)n, ST_MAX_HEADER);
	if (n > size - 8)
		return fail(err, errlen, "%s: header length %llu past end of file (%llu bytes)", path,
			    (unsigned long long)n, (unsigned long long)size);
	json_error_t je;
	json_t *h = json_loadb((const char *)f->map + 8, (size_t)n, JSON_REJECT_DUPLICATES, &je);
	if (!h)
		return fail(err, errlen, "%s: header is not valid JSON: %s (byte %d of %llu)", path, je.text,
			    je.position, (unsigned long long)n);
	if (!json_is_object(h)) {
		json_decref(h);
		return fail(err, errlen, "%s: header is not a JSON object", path);
	}
	/* Reserve room for every entry at once: one realloc per file, not per tensor. */
	size_t cap = (size_t)d->ntensor + json_object_size(h);
	StTensor *nt = realloc(d->t, (cap ? cap : 1) * sizeof *nt);
	if (!nt) {
		json_decref(h);
		return fail(err, errlen, "%s: out of memory", path);
	}
	d->t = nt;
	int first = d->ntensor, rc = 0;
	uint64_t base = 8 + n, datalen = size - 8 - n;
	const char *key;
	json_t *v;
	json_object_foreach(h, key, v) {
		if (!strcmp(key, "__metadata__")) {
			const char *mk;
			json_t *mv;
			if (!json_is_object(v)) {
				rc = fail(err, errlen, "%s: \"__metadata__\" is not a JSON object", path);
				break;
			}
			json_object_foreach(v, mk, mv) {
				if (!json_is_string(mv)) {
					char kb[ST_SHOW_MAX + 4];
					rc = fail(err, errlen, "%s: \"__metadata__\" value '%s' is not a string", path,
						  show(kb, mk));
					break;
				}
			}
			if (rc)
				break;
			continue;
		}
		if ((rc = add_entry(d, fi, path, key, v, base, datalen, err, errlen)))
			break;
	}
	json_decref(h);
	if (rc)
		return rc;
	return check_overlap(d, first, base, path, err, errlen);
}

/* Sort by name, then refuse duplicate names (possible only across shards: a header with repeated keys
** is already refused by jansson). */
static int sort_tensors(StDir *d, const char *what, char *err, size_t errlen)
{
	if (d->ntensor > 1)
		qsort(d->t, (size_t)d->ntensor, sizeof *d->t, cmp_name);
	for (int i = 1; i < d->ntensor; i++)
		if (!strcmp(d->t[i - 1].name, d->t[i].name)) {
			char nb[ST_SHOW_MAX + 4];
			return fail(err, errlen, "%s: duplicate tensor '%s' in %s and %s", what, show(nb, d->t[i].name),
				    d->files[d->t[i - 1].file].path, d->files[d->t[i].file].path);
		}
	return 0;
}

/* One file on its own: tests, fuzzers and tools that handle a single .safetensors. */
int st_open_file(StDir *d, const char *file, char *err, size_t errlen)
{
	memset(d, 0, sizeof *d);
	d->files = calloc(1, sizeof *d->files);
	if (!d->files) {
		fail(err, errlen, "%s: out of memory", file);
		goto bad;
	}
	if (parse_file(d, file, err, errlen) || sort_tensors(d, file, err, errlen))
		goto bad;
	return 0;
bad:
	st_close(d);
	return -1;
}

/* Index shard names come from a file that may have been downloaded from anywhere: only plain file
** names inside the checkpoint directory are accepted. */
static int bad_shard_name(const char *s)
{
	return !*s || strchr(s, '/') || strchr(s, '\\') || strstr(s, "..") || !strcmp(s, ".");
}

/* Shard names are sorted so that duplicates collapse and files[] has a stable order. */
static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* The sharded layout: the index names a shard for every tensor; open each distinct shard once, then
** check the index against what the shards actually hold, in both directions. */
static int open_index(StDir *d, const char *ipath, char *err, size_t errlen)
{
	json_error_t je;
	json_t *idx = rfile_json(ipath, JSON_REJECT_DUPLICATES, &je);
	char ln[32];
	if (!idx)
		return fail(err, errlen, "%s: %s%s", ipath, rfile_line(&je, ln, sizeof ln), je.text);
	const char **names = NULL, *key;
	int rc = 0, nn = 0;
	json_t *wm = json_object_get(idx, "weight_map"), *v;
	if (!json_is_object(idx)) {
		rc = fail(err, errlen, "%s: not a JSON object", ipath);
		goto out;
	}
	if (!json_is_object(wm)) {
		rc = fail(err, errlen, "%s: %s", ipath,
			  wm ? "\"weight_map\" is not a JSON object" : "missing \"weight_map\"");
		goto out;
	}
	if (!json_object_size(wm)) {
		rc = fail(err, errlen, "%s: \"weight_map\" is empty", ipath);
		goto out;
	}
	names = malloc(json_object_size(wm) * sizeof *names);
	if (!names) {
		rc = fail(err, errlen, "%s: out of memory", ipath);
		goto out;
	}
	json_object_foreach(wm, key, v) {
		char kb[ST_SHOW_MAX + 4], sb[ST_SHOW_MAX + 4];
		if (!json_is_string(v)) {
			rc = fail(err, errlen, "%s: weight_map entry '%s' is not a string", ipath, show(kb, key));
			goto out;
		}
		if (bad_shard_name(json_string_value(v))) {
			const char *sv = json_string_value(v);
			rc = fail(err, errlen, "%s: tensor '%s': shard name '%s' is not a plain file name%s", ipath,
				  show(kb, key), show(sb, sv), *sv && strcmp(sv, ".") ? " (path traversal)" : "");
			goto out;
		}
		names[nn++] = json_string_value(v);
	}
	qsort(names, (size_t)nn, sizeof *names, cmp_str);
	int ns = 0;
	for (int i = 0; i < nn; i++)
		if (!ns || strcmp(names[ns - 1], names[i]))
			names[ns++] = names[i];
	d->files = calloc((size_t)ns, sizeof *d->files);
	if (!d->files) {
		rc = fail(err, errlen, "%s: out of memory", ipath);
		goto out;
	}
	for (int i = 0; i < ns; i++) {
		char *p = join(d->dir, names[i]);
		if (!p) {
			rc = fail(err, errlen, "%s: out of memory", ipath);
			goto out;
		}
		struct stat st;
		if (stat(p, &st) < 0 && errno == ENOENT)
			rc = fail(err, errlen, "%s: shard file %s named in the index is missing", ipath, p);
		else
			rc = parse_file(d, p, err, errlen);
		free(p);
		if (rc)
			goto out;
	}
	if ((rc = sort_tensors(d, ipath, err, errlen)))
		goto out;
	/* names[i] is files[i]: both are the distinct shard names in sorted order. */
	json_object_foreach(wm, key, v) {
		const StTensor *t = st_find(d, key);
		if (!t || strcmp(names[t->file], json_string_value(v))) {
			char kb[ST_SHOW_MAX + 4];
			rc = fail(err, errlen, "%s: tensor '%s' is mapped to shard %s but that shard lacks it%s%s", ipath,
				  show(kb, key), json_string_value(v), t ? "; it is in " : "",
				  t ? d->files[t->file].path : "");
			goto out;
		}
	}
	for (int i = 0; i < d->ntensor; i++)
		if (!json_object_get(wm, d->t[i].name)) {
			char kb[ST_SHOW_MAX + 4];
			rc = fail(err, errlen, "%s: tensor '%s' is not listed in %s", d->files[d->t[i].file].path,
				  show(kb, d->t[i].name), ipath);
			goto out;
		}
out:
	free(names);
	json_decref(idx);
	return rc;
}

/* The directory layout as transformers saves it: config.json, then one file or an index of shards. */
int st_open_dir(StDir *d, const char *dir, char *err, size_t errlen)
{
	memset(d, 0, sizeof *d);
	char *p = NULL;
	struct stat st;
	d->dir = strdup(dir);
	if (!d->dir || !(p = join(dir, "config.json"))) {
		fail(err, errlen, "%s: out of memory", dir);
		goto bad;
	}
	if (stat(dir, &st) < 0) {
		fail(err, errlen, "%s: cannot open: %s", dir, strerror(errno));
		goto bad;
	}
	if (!S_ISDIR(st.st_mode)) {
		fail(err, errlen, "%s: not a directory", dir);
		goto bad;
	}
	if (stat(p, &st) < 0) {
		fail(err, errlen, "%s: cannot open: %s", p, strerror(errno));
		goto bad;
	}
	json_error_t je;
	d->config = rfile_json(p, JSON_REJECT_DUPLICATES, &je);
	char ln[32];
	if (!d->config) {
		fail(err, errlen, "%s: %s%s", p, rfile_line(&je, ln, sizeof ln), je.text);
		goto bad;
	}
	if (!json_is_object(d->config)) {
		fail(err, errlen, "%s: not a JSON object", p);
		goto bad;
	}
	free(p);
	/* Like transformers: a single model.safetensors wins over an index. */
	if (!(p = join(dir, "model.safetensors"))) {
		fail(err, errlen, "%s: out of memory", dir);
		goto bad;
	}
	if (stat(p, &st) == 0) {
		d->files = calloc(1, sizeof *d->files);
		if (!d->files) {
			fail(err, errlen, "%s: out of memory", p);
			goto bad;
		}
		if (parse_file(d, p, err, errlen) || sort_tensors(d, p, err, errlen))
			goto bad;
	} else {
		free(p);
		if (!(p = join(dir, "model.safetensors.index.json"))) {
			fail(err, errlen, "%s: out of memory", dir);
			goto bad;
		}
		if (stat(p, &st) < 0) {
			fail(err, errlen, "%s: no model.safetensors or model.safetensors.index.json", dir);
			goto bad;
		}
		if (open_index(d, p, err, errlen))
			goto bad;
	}
	free(p);
	return 0;
bad:
	free(p);
	st_close(d);
	return -1;
}

/* Release every mapping, name and the config; safe on a zeroed or partly opened StDir. */
void st_close(StDir *d)
{
	if (!d)
		return;
	for (int i = 0; i < d->ntensor; i++)
		free(d->t[i].name);
	free(d->t);
	for (int i = 0; i < d->nfile; i++) {
		if (d->files[i].map)
			munmap((void *)d->files[i].map, d->files[i].size);
		free(d->files[i].path);
	}
	free(d->files);
	json_decref(d->config);
	free(d->dir);
	memset(d, 0, sizeof *d);
}

/* Weights are bound by name; the table is sorted so lookups stay O(log n) for 100k-tensor models. */
const StTensor *st_find(const StDir *d, const char *name)
{
	int lo = 0, hi = d->ntensor - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2, c = strcmp(name, d->t[mid].name);
		if (!c)
			return &d->t[mid];
		if (c < 0)
			hi = mid - 1;
		else
			lo = mid + 1;
	}
	return NULL;
}

/* Bounds were checked at open, so this is plain pointer arithmetic. */
const void *st_data(const StDir *d, const StTensor *t)
{
	return d->files[t->file].map + t->off;
}

/* Names as the safetensors format spells them; "?" keeps a bad dtype printable. */
const char *st_type_name(int dtype)
{
	return dtype >= 0 && dtype < ST_NTYPES ? st_types[dtype].name : "?";
}

/* The header spells dtypes as strings; unknown ones are reported by name by the caller. */
int st_type_from_name(const char *s)
{
	for (int i = 0; s && i < ST_NTYPES; i++)
		if (!strcmp(s, st_types[i].name))
			return i;
	return -1;
}

/* Element size in bytes, 0 for an invalid dtype so size checks fail instead of crashing. */
size_t st_type_size(int dtype)
{
	return dtype >= 0 && dtype < ST_NTYPES ? st_types[dtype].size : 0;
}

/* IEEE half to single: every half value (subnormals, infinities, NaN payloads) is exact in float. */
static float f16_to_f32(uint16_t h)
{
	uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
	float f;
	if (exp == 0x1f)
		bits = sign | 0x7f800000u | man << 13;
	else if (exp)
		bits = sign | (exp + 112) << 23 | man << 13;
	else {
		f = (float)man * 0x1p-24f; /* subnormal: man·2^-24, exact */
		return sign ? -f : f;
	}
	memcpy(&f, &bits, 4);
	return f;
}

/* Data inside a mapped file need not be aligned, so elements are read with memcpy. Assumes a
** little-endian host, like the format. */
int st_to_f32(float *dst, const void *src, int dtype, size_t n)
{
	const uint8_t *s = src;
	if (dtype == ST_F32) {
		memcpy(dst, s, n * 4);
		return 0;
	}
	if (dtype != ST_F16 && dtype != ST_BF16)
		return -1;
	for (size_t i = 0; i < n; i++) {
		uint16_t h;
		memcpy(&h, s + 2 * i, 2);
		if (dtype == ST_F16)
			dst[i] = f16_to_f32(h);
		else {
			uint32_t bits = (uint32_t)h << 16;
			memcpy(&dst[i], &bits, 4);
		}
	}
	return 0;
}

/* Tests and tools need real safetensors files; the layout matches the Python library: metadata first,
** tensors packed in the given order, header padded with spaces to a multiple of 8 bytes. */
int st_write_file(const char *path, const StWrite *t, int n, char *err, size_t errlen)
{
	json_t *h = json_object(), *meta = json_object();
	char *hs = NULL;
	FILE *f = NULL;
	int rc = -1;
	uint64_t off = 0;
	if (!h || !meta || json_object_set_new(meta, "format", json_string("pt")) ||
	    json_object_set(h, "__metadata__", meta)) {
		fail(err, errlen, "%s: out of memory", path);
		goto out;
	}
	if (n < 0) {
		fail(err, errlen, "%s: negative tensor count %d", path, n);
		goto out;
	}
	for (int i = 0; i < n; i++) {
		char nb[ST_SHOW_MAX + 4];
		const char *name = t[i].name ? t[i].name : "";
		const char *sn = show(nb, name);
		uint64_t count = 1, bytes;
		int overflow = 0;
		if (!t[i].name || !strcmp(name, "__metadata__") || json_object_get(h, name)) {
			fail(err, errlen, "%s: tensor %d: name '%s' is missing, reserved or repeated", path, i, sn);
			goto out;
		}
		if (t[i].dtype < 0 || t[i].dtype >= ST_NTYPES) {
			fail(err, errlen, "%s: tensor '%s': bad dtype %d", path, sn, t[i].dtype);
			goto out;
		}
		if (t[i].ndim < 0 || t[i].ndim > 8 || (t[i].ndim && !t[i].shape)) {
			fail(err, errlen, "%s: tensor '%s': bad ndim %d", path, sn, t[i].ndim);
			goto out;
		}
		json_t *shape = json_array(), *e = json_object(), *offs = json_array();
		if (!shape || !e || !offs || json_object_set_new(h, name, e)) {
			json_decref(shape), json_decref(e), json_decref(offs);
			fail(err, errlen, "%s: out of memory", path);
			goto out;
		}
		json_object_set_new(e, "dtype", json_string(st_types[t[i].dtype].name));
		json_object_set_new(e, "shape", shape);
		json_object_set_new(e, "data_offsets", offs);
		for (int k = 0; k < t[i].ndim; k++) {
			if (t[i].shape[k] < 0) {
				fail(err, errlen, "%s: tensor '%s': negative dimension", path, sn);
				goto out;
			}
			overflow |= __builtin_mul_overflow(count, (uint64_t)t[i].shape[k], &count);
			json_array_append_new(shape, json_integer(t[i].shape[k]));
		}
		if (overflow || __builtin_mul_overflow(count, (uint64_t)st_types[t[i].dtype].size, &bytes) ||
		    off + bytes < off || off + bytes > INT64_MAX) {
			fail(err, errlen, "%s: tensor '%s': size overflows", path, sn);
			goto out;
		}
		if (bytes && !t[i].data) {
			fail(err, errlen, "%s: tensor '%s': no data", path, sn);
			goto out;
		}
		json_array_append_new(offs, json_integer((json_int_t)off));
		json_array_append_new(offs, json_integer((json_int_t)(off + bytes)));
		off += bytes;
	}
	hs = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!hs) {
		fail(err, errlen, "%s: out of memory", path);
		goto out;
	}
	size_t hl = strlen(hs), pad = (8 - hl % 8) % 8;
	uint8_t len8[8];
	for (int i = 0; i < 8; i++)
		len8[i] = (uint8_t)((hl + pad) >> (8 * i));
	f = fopen(path, "wb");
	if (!f) {
		fail(err, errlen, "%s: cannot create: %s", path, strerror(errno));
		goto out;
	}
	int ok = fwrite(len8, 1, 8, f) == 8 && fwrite(hs, 1, hl, f) == hl;
	for (size_t i = 0; ok && i < pad; i++)
		ok = fputc(' ', f) != EOF;
	for (int i = 0; ok && i < n; i++) {
		size_t b = st_type_size(t[i].dtype);
		for (int k = 0; k < t[i].ndim; k++)
			b *= (size_t)t[i].shape[k];
		ok = !b || fwrite(t[i].data, 1, b, f) == b;
	}
	if (fclose(f) != 0)
		ok = 0;
	f = NULL;
	if (!ok) {
		fail(err, errlen, "%s: write failed: %s", path, strerror(errno));
		unlink(path);
		goto out;
	}
	rc = 0;
out:
	free(hs);
	json_decref(meta);
	json_decref(h);
	return rc;
}
