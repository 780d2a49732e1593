/*
** tests/tools/cmplogits.c — compare a glmrun --dump-logits file with a Hugging Face fixture.
**
** usage: cmplogits DUMP FIXTURE_DIR [TOL]
** The dump holds n_prompt + n - 1 rows; rows 0..n_prompt-1 are compared with prefill_logits and rows
** n_prompt-1.. with decode_logits (whose row 0 is the last prefill row). Prints both relative L2 errors
** and exits 0 only when both are <= TOL (default 1e-5) and no value is NaN.
**
** cmplogits --pair A B TOL compares two dumps with each other.
** cmplogits --prompt DIR / --greedy DIR print the fixture's prompt (comma-separated) or greedy ids
** (space-separated, as glmrun prints them), so shell tests need no JSON tool.
*/
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *read_f32(const char *path, long *n)
{
	FILE *f = fopen(path, "rb");
	if (!f) {
		fprintf(stderr, "cmplogits: cannot open %s\n", path);
		exit(2);
	}
	fseek(f, 0, SEEK_END);
	long bytes = ftell(f);
	fseek(f, 0, SEEK_SET);
	float *p = malloc((size_t)bytes + 4);
	if (!p || fread(p, 1, (size_t)bytes, f) != (size_t)bytes) {
		fprintf(stderr, "cmplogits: cannot read %s\n", path);
		exit(2);
	}
	fclose(f);
	*n = bytes / 4;
	return p;
}

static double rel_l2(const float *a, const float *b, long n)
{
	double num = 0, den = 0;
	for (long i = 0; i < n; i++) {
		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		double d = (double)a[i] - b[i];
		num += d * d, den += (double)b[i] * b[i];
	}
	return den > 0 ? sqrt(num / den) : INFINITY;
}

/* Print a JSON array of integers joined by sep. */
static int print_ids(const char *dir, const char *key, const char *sep)
{
	char path[4096];
	snprintf(path, sizeof path, "%s/reference.json", dir);
	json_error_t je;
	json_t *ref = json_load_file(path, 0, &je);
	if (!ref) {
		fprintf(stderr, "cmplogits: %s: %s\n", path, je.text);
		return 2;
	}
	size_t i;
	json_t *v;
	json_array_foreach(json_object_get(ref, key), i, v) printf("%s%lld", i ? sep : "", (long long)json_integer_value(v));
	printf("\n");
	json_decref(ref);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc == 5 && !strcmp(argv[1], "--pair")) {
		/* cmplogits --pair A B TOL: two dumps of the same run, element counts equal, rel-L2 <= TOL. */
		long na, nb;
		float *a = read_f32(argv[2], &na), *b = read_f32(argv[3], &nb);
		double e = na == nb ? rel_l2(a, b, na) : INFINITY;
		printf("rel-L2 %.3g (tol %s)\n", e, argv[4]);
		free(a), free(b);
		return e <= atof(argv[4]) ? 0 : 1;
	}
	if (argc == 3 && !strcmp(argv[1], "--prompt"))
		return print_ids(argv[2], "prompt", ",");
	if (argc == 3 && !strcmp(argv[1], "--greedy"))
		return print_ids(argv[2], "greedy", " ");
	if (argc < 3) {
		fprintf(stderr, "usage: cmplogits DUMP FIXTURE_DIR [TOL]\n");
		return 2;
	}
	double tol = argc > 3 ? atof(argv[3]) : 1e-5;
	char path[4096];
	snprintf(path, sizeof path, "%s/reference.json", argv[2]);
	json_error_t je;
	json_t *ref = json_load_file(path, 0, &je);
	if (!ref) {
		fprintf(stderr, "cmplogits: %s: %s\n", path, je.text);
		return 2;
	}
	long V = (long)json_integer_value(json_object_get(ref, "vocab_size"));
	long np = (long)json_array_size(json_object_get(ref, "prompt"));
	long ng = (long)json_array_size(json_object_get(ref, "greedy"));
	long n, npre, ndec;
	float *a = read_f32(argv[1], &n);
	snprintf(path, sizeof path, "%s/prefill_logits.f32", argv[2]);
	float *pre = read_f32(path, &npre);
	snprintf(path, sizeof path, "%s/decode_logits.f32", argv[2]);
	float *dec = read_f32(path, &ndec);
	if (V <= 0 || n != (np + ng - 1) * V || npre != np * V || ndec != ng * V) {
		fprintf(stderr, "cmplogits: %s has %ld values, expected %ld rows of %ld\n", argv[1], n, np + ng - 1, V);
		return 1;
	}
	double e1 = rel_l2(a, pre, np * V), e2 = rel_l2(a + (np - 1) * V, dec, ng * V);
	printf("prefill rel-L2 %.3g, decode rel-L2 %.3g (tol %g)\n", e1, e2, tol);
	json_decref(ref);
	free(a), free(pre), free(dec);
	return e1 <= tol && e2 <= tol ? 0 : 1;
}
