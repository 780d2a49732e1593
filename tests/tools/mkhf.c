/*
** tests/tools/mkhf.c — make test checkpoints from a Hugging Face directory: copy it converting float
** tensors (F32/F16/BF16) to one dtype with round-to-nearest-even, optionally split across N shard files
** with a model.safetensors.index.json. The .json files (config.json, ...) are copied unchanged; a source
** index is replaced by the new layout's own.
**
**   mkhf SRC_DIR OUT_DIR [--dtype f32|f16|bf16] [--shards N] [--drop NAME]... [--copy NEW=OLD]...
*/
#include "st.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
	"usage: mkhf SRC_DIR OUT_DIR [--dtype f32|f16|bf16] [--shards N] [--drop NAME]... [--copy NEW=OLD]...\n"
	"(--drop leaves tensor NAME out, to make a checkpoint that lacks it; --copy adds tensor NEW, a copy of\n"
	"OLD in OLD's shard, to make one with tensors the model does not use)\n"
	"Copy a Hugging Face checkpoint directory (config.json + model.safetensors or a sharded index),\n"
	"converting F32/F16/BF16 tensors to --dtype (round to nearest even; other dtypes are copied as they\n"
	"are) and writing --shards N files (model-0000k-of-0000N.safetensors + model.safetensors.index.json)\n"
	"or one model.safetensors (N = 1, the default). Every .json file of SRC_DIR except the index is\n"
	"copied unchanged. OUT_DIR must not exist or be empty.\n";

/* One error line and a non-zero exit: the tool is run by tests and scripts, never interactively. */
_Noreturn static void die(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("mkhf: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	exit(1);
}

/* float32 → bfloat16, round to nearest even; NaN stays a (quiet) NaN of the same sign. */
static uint16_t f32_to_bf16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	if ((x & 0x7fffffff) > 0x7f800000)
		return (uint16_t)(x >> 16 | 0x40);
	return (uint16_t)((x + 0x7fff + (x >> 16 & 1)) >> 16);
}

/* float32 → IEEE half, round to nearest even, including the subnormal range and overflow to inf. */
static uint16_t f32_to_f16(float f)
{
	uint32_t x;
	memcpy(&x, &f, 4);
	uint16_t sign = (uint16_t)(x >> 16 & 0x8000);
	x &= 0x7fffffff;
	if (x > 0x7f800000)
		return sign | 0x7e00 | (uint16_t)(x >> 13 & 0x3ff);
	if (x >= 0x477ff000) /* ≥ 65520 = 65504 + half an ulp: the tie goes to the even inf */
		return sign | 0x7c00;
	if (x >= 0x38800000) /* ≥ 2^-14: normal half */
		return sign | (uint16_t)(((x + 0xfff + (x >> 13 & 1)) >> 13) - (112u << 10));
	uint32_t e = x >> 23;
	if (e < 102) /* below 2^-25: rounds to zero (2^-25 itself is a tie, handled below) */
		return sign;
	/* subnormal half: value = m·2^(e-150), in units of 2^-24 that is m >> (126 - e) */
	uint32_t m = (x & 0x7fffff) | 0x800000, shift = 126 - e;
	uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
	if (rem > half || (rem == half && (q & 1)))
		q++;
	return sign | (uint16_t)q;
}

/* Read a whole small file (the .json files) into memory. */
static char *slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return NULL;
	char *b = NULL;
	size_t cap = 0;
	*n = 0;
	for (;;) {
		if (*n == cap) {
			char *nb = realloc(b, cap = cap ? 2 * cap : 65536);
			if (!nb) {
				free(b);
				fclose(f);
				return NULL;
			}
			b = nb;
		}
		size_t r = fread(b + *n, 1, cap - *n, f);
		*n += r;
		if (r == 0)
			break;
	}
	int bad = ferror(f);
	fclose(f);
	if (bad) {
		free(b);
		return NULL;
	}
	return b;
}

/* Copy every .json file except the index byte for byte: the config must stay exactly what HF wrote. */
static void copy_json(const char *src, const char *out)
{
	DIR *dir = opendir(src);
	if (!dir)
		die("%s: cannot read directory: %s", src, strerror(errno));
	struct dirent *e;
	while ((e = readdir(dir))) {
		size_t l = strlen(e->d_name);
		if (l < 5 || strcmp(e->d_name + l - 5, ".json") || !strcmp(e->d_name, "model.safetensors.index.json"))
			continue;
		char sp[4096], op[4096];
		struct stat st;
		snprintf(sp, sizeof sp, "%s/%s", src, e->d_name);
		snprintf(op, sizeof op, "%s/%s", out, e->d_name);
		if (stat(sp, &st) < 0 || !S_ISREG(st.st_mode))
			continue;
		size_t n;
		char *b = slurp(sp, &n);
		if (!b)
			die("%s: cannot read: %s", sp, strerror(errno));
		FILE *f = fopen(op, "wb");
		if (!f || fwrite(b, 1, n, f) != n || fclose(f))
			die("%s: cannot write: %s", op, strerror(errno));
		free(b);
	}
	closedir(dir);
}

/* OUT_DIR is created, or must be empty: stale model.safetensors would shadow a new index. */
static void make_out(const char *out)
{
	if (!mkdir(out, 0755))
		return;
	if (errno != EEXIST)
		die("%s: cannot create directory: %s", out, strerror(errno));
	DIR *dir = opendir(out);
	if (!dir)
		die("%s: exists and is not a readable directory", out);
	struct dirent *e;
	while ((e = readdir(dir)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			die("%s: exists and is not empty", out);
	closedir(dir);
}

/* Only these are converted; F8/F64/integer tensors keep their dtype and bytes. */
static int is_float(int dt)
{
	return dt == ST_F32 || dt == ST_F16 || dt == ST_BF16;
}

/* Parse the arguments, open SRC_DIR with the checked reader, write OUT_DIR shard by shard. */
int main(int argc, char **argv)
{
	const char *pos[2] = {0}, *dts = NULL, *drop[16], *copy_new[16], *copy_old[16];
	int npos = 0, shards = 1, dtype = -1, ndrop = 0, ncopy = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(argv[i], "--dtype") || !strcmp(argv[i], "--shards")) {
			if (i + 1 >= argc)
				die("%s needs a value (see --help)", argv[i]);
			if (argv[i][2] == 'd')
				dts = argv[++i];
			else {
				char *end;
				long v = strtol(argv[++i], &end, 10);
				if (*end || end == argv[i] || v < 1 || v > 99999)
					die("--shards '%s': want an integer from 1 to 99999", argv[i]);
				shards = (int)v;
			}
		} else if (!strcmp(argv[i], "--drop")) {
			if (i + 1 >= argc || ndrop == 16)
				die("--drop needs a tensor name (at most 16)");
			drop[ndrop++] = argv[++i];
		} else if (!strcmp(argv[i], "--copy")) {
			char *eq = i + 1 < argc ? strchr(argv[i + 1], '=') : NULL;
			if (!eq || eq == argv[i + 1] || !eq[1] || ncopy == 16)
				die("--copy needs NEW=OLD (at most 16)");
			*eq = 0;
			copy_new[ncopy] = argv[++i], copy_old[ncopy++] = eq + 1;
		} else if (argv[i][0] == '-' && argv[i][1]) {
			die("unknown option '%s' (see --help)", argv[i]);
		} else if (npos < 2) {
			pos[npos++] = argv[i];
		} else {
			die("unexpected argument '%s' (see --help)", argv[i]);
		}
	}
	if (npos != 2)
		die("need SRC_DIR and OUT_DIR (see --help)");
	if (dts) {
		dtype = !strcmp(dts, "f32") ? ST_F32 : !strcmp(dts, "f16") ? ST_F16 : !strcmp(dts, "bf16") ? ST_BF16 : -1;
		if (dtype < 0)
			die("--dtype '%s': want f32, f16 or bf16", dts);
	}
	StDir d;
	char err[1024];
	if (st_open_dir(&d, pos[0], err, sizeof err))
		die("%s", err);
	if (shards > d.ntensor)
		die("--shards %d: %s has only %d tensors", shards, pos[0], d.ntensor);
	make_out(pos[1]);
	copy_json(pos[0], pos[1]);

	/* Output dtypes and sizes, then contiguous shards of about equal bytes, none empty. */
	int n = d.ntensor, *odt = calloc((size_t)n, sizeof *odt), *sh = calloc((size_t)n, sizeof *sh);
	uint64_t *ob = calloc((size_t)n, sizeof *ob), total = 0, acc = 0;
	if (!odt || !sh || !ob)
		die("out of memory");
	for (int i = 0; i < n; i++) {
		const StTensor *t = &d.t[i];
		odt[i] = dtype >= 0 && is_float(t->dtype) ? dtype : t->dtype;
		ob[i] = t->nbytes / st_type_size(t->dtype) * st_type_size(odt[i]);
		total += ob[i];
	}
	for (int i = 0, s = 0, cnt = 0; i < n; i++) {
		if (cnt && s < shards - 1 && (acc * (uint64_t)shards >= total * (uint64_t)(s + 1) || n - i == shards - 1 - s))
			s++, cnt = 0;
		sh[i] = s, cnt++, acc += ob[i];
	}

	json_t *wm = json_object();
	for (int k = 0; k < ncopy; k++)
		if (!st_find(&d, copy_old[k]))
			die("--copy: no tensor '%s' in %s", copy_old[k], pos[0]);
	StWrite *w = calloc((size_t)(n + ncopy), sizeof *w);
	void **bufs = calloc((size_t)n, sizeof *bufs);
	if (!wm || !w || !bufs)
		die("out of memory");
	for (int s = 0, i = 0; s < shards; s++) {
		char fname[64], path[4096];
		if (shards == 1)
			snprintf(fname, sizeof fname, "model.safetensors");
		else
			snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", s + 1, shards);
		snprintf(path, sizeof path, "%s/%s", pos[1], fname);
		int first = i, nw = 0;
		for (; i < n && sh[i] == s; i++, nw++) {
			const StTensor *t = &d.t[i];
			int skip = 0;
			for (int k = 0; k < ndrop; k++)
				skip |= !strcmp(drop[k], t->name);
			if (skip) {
				nw--;
				continue;
			}
			const void *src = st_data(&d, t);
			w[nw] = (StWrite){t->name, odt[i], t->ndim, t->shape, src};
			json_object_set_new(wm, t->name, json_string(fname));
			if (odt[i] == t->dtype)
				continue;
			size_t cnt = t->nbytes / st_type_size(t->dtype);
			float *f = malloc(cnt ? cnt * 4 : 1);
			uint16_t *o = malloc(cnt ? cnt * 2 : 1);
			if (!f || !o)
				die("%s: out of memory converting tensor '%s'", pos[0], t->name);
			st_to_f32(f, src, t->dtype, cnt);
			if (odt[i] == ST_F32) {
				free(o);
				bufs[i] = f;
			} else {
				for (size_t k = 0; k < cnt; k++)
					o[k] = odt[i] == ST_BF16 ? f32_to_bf16(f[k]) : f32_to_f16(f[k]);
				free(f);
				bufs[i] = o;
			}
			w[nw].data = bufs[i];
		}
		for (int k = 0, nt = nw; k < ncopy; k++)
			for (int j = 0; j < nt; j++)
				if (!strcmp(w[j].name, copy_old[k])) {
					w[nw] = w[j];
					w[nw++].name = copy_new[k];
					json_object_set_new(wm, copy_new[k], json_string(fname));
				}
		if (st_write_file(path, w, nw, err, sizeof err))
			die("%s", err);
		for (int k = first; k < i; k++)
			free(bufs[k]), bufs[k] = NULL;
	}
	if (shards > 1) {
		char path[4096];
		snprintf(path, sizeof path, "%s/model.safetensors.index.json", pos[1]);
		json_t *idx = json_pack("{s:{s:I},s:o}", "metadata", "total_size", (json_int_t)total, "weight_map", wm);
		if (!idx || json_dump_file(idx, path, JSON_INDENT(2) | JSON_SORT_KEYS))
			die("%s: cannot write", path);
		json_decref(idx);
	} else {
		json_decref(wm);
	}
	free(bufs);
	free(w);
	free(odt);
	free(sh);
	free(ob);
	st_close(&d);
	return 0;
}
