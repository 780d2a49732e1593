/*
** tests/tools/ggufedit.c — copy a GGUF file, changing one tensor's recorded type id or shape, setting one
** string key, or adding copies of tensors under new names, so tests can make files that are well formed but
** wrong (an unknown type, a shape the model does not expect, a metadata value glmc does not support, tensors
** the model does not use).
**
** usage: ggufedit IN.gguf OUT.gguf [--type NAME=ID] [--shape NAME=NE0,NE1,...] [--str KEY=VALUE]
**        [--copy NEW=OLD]... [--del KEY]...
**        (shape in ggml order; --str replaces the key's value, or adds the key; --copy appends tensor NEW
**        holding OLD's type, shape and bytes; --del leaves metadata key KEY out)
*/
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Noreturn void die(const char *msg, const char *arg)
{
	fprintf(stderr, "ggufedit: %s%s\n", msg, arg ? arg : "");
	exit(1);
}

/* Copy one metadata entry with the writer call of its own type. */
static void copy_kv(GgufWriter *w, const GgufKV *kv)
{
	if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING) {
		const char **v = malloc(sizeof *v * (kv->n + 1));
		if (!v)
			die("out of memory", NULL);
		for (uint64_t i = 0; i < kv->n; i++)
			v[i] = kv->strs[i].s;
		gguf_writer_arr_str(w, kv->key, v, kv->n);
		free(v);
		return;
	}
	switch (kv->type) {
	case GGUF_ARRAY: gguf_writer_arr(w, kv->key, kv->arr_type, kv->arr, kv->n); break;
	case GGUF_STRING: gguf_writer_str(w, kv->key, kv->str.s); break;
	case GGUF_FLOAT32: gguf_writer_f32(w, kv->key, (float)kv->v.f); break;
	case GGUF_FLOAT64: gguf_writer_f64(w, kv->key, kv->v.f); break;
	case GGUF_BOOL: gguf_writer_bool(w, kv->key, kv->v.u != 0); break;
	case GGUF_UINT8: gguf_writer_u8(w, kv->key, (uint8_t)kv->v.u); break;
	case GGUF_INT8: gguf_writer_i8(w, kv->key, (int8_t)kv->v.i); break;
	case GGUF_UINT16: gguf_writer_u16(w, kv->key, (uint16_t)kv->v.u); break;
	case GGUF_INT16: gguf_writer_i16(w, kv->key, (int16_t)kv->v.i); break;
	case GGUF_UINT32: gguf_writer_u32(w, kv->key, (uint32_t)kv->v.u); break;
	case GGUF_INT32: gguf_writer_i32(w, kv->key, (int32_t)kv->v.i); break;
	case GGUF_UINT64: gguf_writer_u64(w, kv->key, kv->v.u); break;
	default: gguf_writer_i64(w, kv->key, kv->v.i); break;
	}
}

int main(int argc, char **argv)
{
	if (argc < 3)
		die("usage: ggufedit IN.gguf OUT.gguf [--type NAME=ID] [--shape NAME=NE0,NE1,...] [--str KEY=VALUE] "
		    "[--copy NEW=OLD]... [--del KEY]...", NULL);
	const char *tname = NULL, *sname = NULL, *skey = NULL, *sval = NULL, *cnew[16], *cold[16], *del[16];
	int tid = 0, snd = 0, ncopy = 0, ndel = 0;
	int64_t sne[4] = {1, 1, 1, 1};
	for (int i = 3; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--del") && ndel < 16) {
			del[ndel++] = argv[i + 1];
			continue;
		}
		char *eq = strchr(argv[i + 1], '=');
		if (!eq)
			die("expected NAME=VALUE, got ", argv[i + 1]);
		*eq = 0;
		if (!strcmp(argv[i], "--type"))
			tname = argv[i + 1], tid = atoi(eq + 1);
		else if (!strcmp(argv[i], "--shape")) {
			sname = argv[i + 1];
			for (char *p = eq + 1; *p && snd < 4; p += strspn(p, ","))
				sne[snd++] = strtoll(p, &p, 10);
		} else if (!strcmp(argv[i], "--str"))
			skey = argv[i + 1], sval = eq + 1;
		else if (!strcmp(argv[i], "--copy") && ncopy < 16)
			cnew[ncopy] = argv[i + 1], cold[ncopy++] = eq + 1;
		else
			die("unknown option (or more than 16 --copy) ", argv[i]);
	}
	Gguf g;
	char err[1024];
	if (gguf_open(&g, argv[1], err, sizeof err))
		die(err, NULL);
	GgufWriter *w = gguf_writer_new();
	if (!w)
		die("out of memory", NULL);
	gguf_writer_set_alignment(w, g.alignment);
	for (int i = 0; i < g.nkv; i++) {
		int drop = !strcmp(g.kv[i].key, "general.alignment") || (skey && !strcmp(g.kv[i].key, skey));
		for (int k = 0; k < ndel; k++)
			drop |= !strcmp(g.kv[i].key, del[k]);
		if (!drop)
			copy_kv(w, &g.kv[i]);
	}
	if (skey)
		gguf_writer_str(w, skey, sval);
	for (int i = 0; i < g.ntensor; i++) {
		const GgufTensor *t = &g.t[i];
		int type = tname && !strcmp(t->name, tname) ? tid : t->type, nd = t->ndim < 1 ? 1 : t->ndim;
		const int64_t *ne = t->ne;
		if (sname && !strcmp(t->name, sname))
			ne = sne, nd = snd;
		gguf_writer_tensor(w, t->name, type, nd, ne, gguf_tensor_data(&g, t), t->nbytes);
	}
	for (int k = 0; k < ncopy; k++) {
		int i = 0;
		while (i < g.ntensor && strcmp(g.t[i].name, cold[k]))
			i++;
		if (i == g.ntensor)
			die("--copy: no tensor ", cold[k]);
		const GgufTensor *t = &g.t[i];
		gguf_writer_tensor(w, cnew[k], t->type, t->ndim < 1 ? 1 : t->ndim, t->ne, gguf_tensor_data(&g, t), t->nbytes);
	}
	if (gguf_writer_write(w, argv[2], err, sizeof err))
		die(err, NULL);
	gguf_writer_free(w);
	gguf_close(&g);
	return 0;
}
