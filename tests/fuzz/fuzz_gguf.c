/*
** tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader (runtime/formats/gguf.c): parse the input as a
** GGUF image; when it opens, touch every key, array element and tensor (dequantizing the supported
** types) so that any bound the reader failed to check shows up under AddressSanitizer.
** Build and run with tests/fuzz/run.sh.
*/
#include "gguf.h"
#include "quant.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Read everything a caller could read from an opened file. */
static void touch(const Gguf *g)
{
	volatile double sink = 0;
	for (int i = 0; i < g->nkv; i++) {
		const GgufKV *kv = &g->kv[i];
		int64_t iv;
		uint64_t uv, len;
		double fv;
		sink += strlen(kv->key);
		if (!gguf_kv_int(kv, &iv))
			sink += (double)iv;
		if (!gguf_kv_uint(kv, &uv))
			sink += (double)uv;
		if (!gguf_kv_float(kv, &fv))
			sink += fv;
		if (kv->type == GGUF_STRING)
			sink += kv->str.s[kv->str.len];
		uint64_t n = gguf_arr_len(kv);
		for (uint64_t j = 0; j < n && j < 4096; j++) {
			const char *s = gguf_arr_str(kv, j, &len);
			if (s)
				sink += s[len];
			if (!gguf_arr_int(kv, j, &iv))
				sink += (double)iv;
			if (!gguf_arr_uint(kv, j, &uv))
				sink += (double)uv;
			if (!gguf_arr_float(kv, j, &fv))
				sink += fv;
		}
		if (n) {
			const char *s = gguf_arr_str(kv, n - 1, &len);
			if (s)
				sink += s[len];
			if (!gguf_arr_uint(kv, n - 1, &uv))
				sink += (double)uv;
		}
	}
	for (int i = 0; i < g->ntensor; i++) {
		const GgufTensor *t = &g->t[i];
		if (gguf_find_tensor(g, t->name) == NULL)
			abort();                         /* every listed tensor must be found by name */
		const uint8_t *p = gguf_tensor_data(g, t);
		if (t->nbytes) {
			sink += p[0];
			sink += p[t->nbytes - 1];
		}
		int64_t shape[GGUF_MAX_DIMS];
		gguf_torch_shape(t, shape);
		/* Dequantize small tensors whole (large ones are only bounds-touched above). */
		if (quant_supported(t->type) && t->nelem > 0 && t->nelem <= 1 << 16) {
			float *y = malloc((size_t)t->nelem * sizeof *y);
			if (y) {
				if (quant_dequant(t->type, p, y, (size_t)t->nelem))
					abort();
				sink += y[t->nelem - 1];
				free(y);
			}
		}
	}
	(void)sink;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	Gguf g;
	char err[512];
	err[0] = 0;
	if (gguf_open_buffer(&g, data, size, "fuzz.gguf", err, sizeof err) == 0) {
		touch(&g);
		gguf_close(&g);
	} else if (!err[0] || strchr(err, '\n')) {
		abort();                                 /* every failure has a one-line message */
	}
	return 0;
}
