/*
** compiler/cli/inspect.c — `glmc inspect WEIGHTS [--tensor NAME --dump FILE]`.
**
** WEIGHTS is a GGUF file (or the first file of a split set) or a Hugging Face checkpoint directory.
** Without --tensor it lists the metadata (arrays summarized by element type, length and first few
** elements) and every tensor with its type, PyTorch-order shape and byte size, like llama.cpp's
** gguf-dump. With --tensor NAME --dump FILE it writes that tensor as float32, row-major in PyTorch
** order, dequantizing GGUF block types with ops/quant.c (bit-exact with ggml).
*/
#include "inspect.h"
#include "gguf.h"
#include "quant.h"
#include "st.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* from glm.h (arena.c), whose shape_str differs from this file's */
const char *esc_ctl(const char *s, char *buf, size_t n);

static const char usage[] =
	"usage: glmc inspect WEIGHTS [--tensor NAME --dump FILE]\n"
	"List the metadata and tensors of WEIGHTS (a GGUF file or the first file of a split set, or a\n"
	"Hugging Face directory with config.json and *.safetensors). With --tensor NAME --dump FILE, write\n"
	"that tensor dequantized to float32, row-major in PyTorch order (shape as listed).\n";

/* Elements shown for an array; strings shown up to this many bytes. */
#define SHOW_ELEMS 5
#define SHOW_STR 48

/* One error line on stderr and the exit status to return. */
static int error(int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = '?';
	fprintf(stderr, "glmc inspect: %s\n", msg);
	return status;
}

/* A string quoted for the listing: escapes for control bytes and quotes, cut after SHOW_STR bytes. */
static void print_str(const char *s, uint64_t len)
{
	putchar('\'');
	for (uint64_t i = 0; i < len && i < SHOW_STR; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '\n')
			fputs("\\n", stdout);
		else if (c == '\'' || c == '\\')
			printf("\\%c", c);
		else if (c < 0x20 || c == 0x7f)
			printf("\\x%02x", c);
		else
			putchar(c);
	}
	putchar('\'');
	if (len > SHOW_STR)
		printf("...(%" PRIu64 " bytes)", len);
}

/* Element i of an array KV (or the scalar when kv is not an array), printed by type. */
static void print_value(const GgufKV *kv, uint64_t i)
{
	int t = kv->type == GGUF_ARRAY ? kv->arr_type : kv->type;
	int64_t iv;
	uint64_t uv, len;
	double fv;
	if (t == GGUF_STRING) {
		const char *s = kv->type == GGUF_ARRAY ? gguf_arr_str(kv, i, &len) : kv->str.s;
		if (kv->type != GGUF_ARRAY)
			len = kv->str.len;
		print_str(s ? s : "", s ? len : 0);
	} else if (t == GGUF_FLOAT32 || t == GGUF_FLOAT64) {
		if (kv->type == GGUF_ARRAY ? !gguf_arr_float(kv, i, &fv) : !gguf_kv_float(kv, &fv))
			printf("%.9g", fv);
	} else if (t == GGUF_BOOL) {
		if (kv->type == GGUF_ARRAY ? !gguf_arr_uint(kv, i, &uv) : !gguf_kv_uint(kv, &uv))
			fputs(uv ? "true" : "false", stdout);
	} else if (t == GGUF_INT8 || t == GGUF_INT16 || t == GGUF_INT32 || t == GGUF_INT64) {
		if (kv->type == GGUF_ARRAY ? !gguf_arr_int(kv, i, &iv) : !gguf_kv_int(kv, &iv))
			printf("%" PRId64, iv);
	} else {
		if (kv->type == GGUF_ARRAY ? !gguf_arr_uint(kv, i, &uv) : !gguf_kv_uint(kv, &uv))
			printf("%" PRIu64, uv);
	}
}

/* "[16, 768]" into buf. */
static const char *shape_str(char *buf, size_t n, const int64_t *shape, int nd)
{
	size_t o = (size_t)snprintf(buf, n, "[");
	for (int i = 0; i < nd && o < n; i++)
		o += (size_t)snprintf(buf + o, n - o, "%s%" PRId64, i ? ", " : "", shape[i]);
	if (o < n)
		snprintf(buf + o, n - o, "]");
	return buf;
}

/* The gguf-dump style listing of a GGUF file. */
static void list_gguf(const Gguf *g)
{
	printf("%s: GGUF v%d, %d file%s, %d metadata keys, %d tensors, alignment %u\n", g->path, g->version, g->nfile,
	       g->nfile == 1 ? "" : "s", g->nkv, g->ntensor, g->alignment);
	printf("* Metadata\n");
	for (int i = 0; i < g->nkv; i++) {
		const GgufKV *kv = &g->kv[i];
		char kb[1024];
		printf("%6d: %-44s ", i + 1, esc_ctl(kv->key, kb, sizeof kb));
		if (kv->type == GGUF_ARRAY) {
			printf("[%s] x %" PRIu64 " = [", gguf_type_name(kv->arr_type), kv->n);
			for (uint64_t j = 0; j < kv->n && j < SHOW_ELEMS; j++) {
				if (j)
					fputs(", ", stdout);
				print_value(kv, j);
			}
			printf("%s]\n", kv->n > SHOW_ELEMS ? ", ..." : "");
		} else {
			printf("%-8s = ", gguf_type_name(kv->type));
			print_value(kv, 0);
			putchar('\n');
		}
	}
	printf("* Tensors\n");
	uint64_t total = 0;
	for (int i = 0; i < g->ntensor; i++) {
		const GgufTensor *t = &g->t[i];
		int64_t shape[GGUF_MAX_DIMS];
		char sb[128], nb[1024];
		int nd = gguf_torch_shape(t, shape);
		printf("%6d: %-44s %-8s %-22s %12" PRIu64 " bytes", i + 1, esc_ctl(t->name, nb, sizeof nb), quant_type_name(t->type),
		       shape_str(sb, sizeof sb, shape, nd), t->nbytes);
		if (g->nfile > 1)
			printf("  (split %d)", t->file + 1);
		putchar('\n');
		total += t->nbytes;
	}
	printf("%" PRIu64 " bytes of tensor data\n", total);
}

/* The same listing for an HF directory: config.json's top-level keys, then the tensors. */
static void list_hf(const StDir *d)
{
	printf("%s: Hugging Face checkpoint, %d file%s, %d tensors\n", d->dir, d->nfile, d->nfile == 1 ? "" : "s",
	       d->ntensor);
	printf("* config.json\n");
	const char *key;
	json_t *v;
	int i = 0;
	json_object_foreach(d->config, key, v)
	{
		char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
		size_t n = s ? strlen(s) : 0;
		char kb[1024];
		printf("%6d: %-44s %.*s%s\n", ++i, esc_ctl(key, kb, sizeof kb), (int)(n > 80 ? 80 : n), s ? s : "?",
		       n > 80 ? "..." : "");
		free(s);
	}
	printf("* Tensors\n");
	uint64_t total = 0;
	for (int k = 0; k < d->ntensor; k++) {
		const StTensor *t = &d->t[k];
		char sb[160], nb[1024];
		printf("%6d: %-44s %-8s %-22s %12" PRIu64 " bytes", k + 1, esc_ctl(t->name, nb, sizeof nb), st_type_name(t->dtype),
		       shape_str(sb, sizeof sb, t->shape, t->ndim), t->nbytes);
		if (d->nfile > 1) {
			const char *base = strrchr(d->files[t->file].path, '/');
			printf("  (%s)", base ? base + 1 : d->files[t->file].path);
		}
		putchar('\n');
		total += t->nbytes;
	}
	printf("%" PRIu64 " bytes of tensor data\n", total);
}

/* Write n floats; -1 on a short write. */
static int write_floats(FILE *f, const float *x, size_t n)
{
	return fwrite(x, sizeof *x, n, f) == n ? 0 : -1;
}

/* Dequantize a GGUF tensor into FILE a block of rows at a time, so a large tensor never needs its
** whole float32 copy in memory. */
static int dump_gguf(const Gguf *g, const char *name, const char *path)
{
	const GgufTensor *t = gguf_find_tensor(g, name);
	if (!t)
		return error(1, "%s: no tensor '%s'", g->path, name);
	if (!quant_supported(t->type))
		return error(1, "%s: tensor '%s' has type %s, which cannot be dequantized", g->path, name,
		             quant_type_name(t->type));
	FILE *f = fopen(path, "wb");
	if (!f)
		return error(1, "%s: %s", path, strerror(errno));
	size_t row = (size_t)t->ne[0], rows = row ? (size_t)t->nelem / row : 0;
	size_t rb = quant_row_bytes(t->type, t->ne[0]);
	size_t per = row ? (1u << 20) / row : 0;
	per = per ? per : 1;
	float *buf = malloc((per * row > 0 ? per * row : 1) * sizeof *buf);
	int rc = buf ? 0 : -1;
	const uint8_t *src = gguf_tensor_data(g, t);
	for (size_t r = 0; !rc && r < rows; r += per) {
		size_t k = rows - r < per ? rows - r : per;
		rc = quant_dequant(t->type, src + r * rb, buf, k * row);
		if (!rc)
			rc = write_floats(f, buf, k * row);
	}
	const char *why = buf ? "write failed" : "out of memory";
	free(buf);
	if (fclose(f))
		rc = -1;
	if (rc)
		return error(1, "%s: cannot write tensor '%s' (%s)", path, name, why);
	return 0;
}

/* HF tensors convert exactly from F32/F16/BF16; other dtypes are refused by name. */
static int dump_hf(const StDir *d, const char *name, const char *path)
{
	const StTensor *t = st_find(d, name);
	if (!t)
		return error(1, "%s: no tensor '%s'", d->dir, name);
	if (t->dtype != ST_F32 && t->dtype != ST_F16 && t->dtype != ST_BF16)
		return error(1, "%s: tensor '%s' has dtype %s, which cannot be converted to float32", d->dir, name,
		             st_type_name(t->dtype));
	size_t n = (size_t)(t->nbytes / st_type_size(t->dtype));
	float *buf = malloc((n ? n : 1) * sizeof *buf);
	if (!buf)
		return error(1, "%s: out of memory", name);
	FILE *f = fopen(path, "wb");
	if (!f) {
		free(buf);
		return error(1, "%s: %s", path, strerror(errno));
	}
	int rc = st_to_f32(buf, st_data(d, t), t->dtype, n);
	if (!rc)
		rc = write_floats(f, buf, n);
	free(buf);
	if (fclose(f))
		rc = -1;
	return rc ? error(1, "%s: cannot write tensor '%s'", path, name) : 0;
}

int inspect_main(int argc, char **argv)
{
	const char *weights = NULL, *tensor = NULL, *dump = NULL;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(a, "--tensor") || !strcmp(a, "--dump")) {
			if (i + 1 >= argc)
				return error(2, "%s needs an argument", a);
			*(a[2] == 't' ? &tensor : &dump) = argv[++i];
		} else if (a[0] == '-' && a[1]) {
			return error(2, "unknown option %s (see glmc inspect --help)", a);
		} else if (weights) {
			return error(2, "more than one WEIGHTS argument: %s", a);
		} else {
			weights = a;
		}
	}
	if (!weights)
		return error(2, "missing WEIGHTS (see glmc inspect --help)");
	if (!tensor != !dump)
		return error(2, "--tensor NAME and --dump FILE go together");

	char err[1024];
	struct stat st;
	if (stat(weights, &st))
		return error(1, "%s: %s", weights, strerror(errno));
	if (S_ISDIR(st.st_mode)) {
		StDir d;
		if (st_open_dir(&d, weights, err, sizeof err))
			return error(1, "%s", err);
		int rc = 0;
		if (tensor)
			rc = dump_hf(&d, tensor, dump);
		else
			list_hf(&d);
		st_close(&d);
		return rc;
	}
	Gguf g;
	if (gguf_open(&g, weights, err, sizeof err))
		return error(1, "%s", err);
	int rc = 0;
	if (tensor)
		rc = dump_gguf(&g, tensor, dump);
	else
		list_gguf(&g);
	gguf_close(&g);
	fflush(stdout);
	return rc;
}
