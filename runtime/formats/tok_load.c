/*
** runtime/formats/tok_load.c — reading a tokenizer: GGUF `tokenizer.ggml.*` metadata (llama.cpp's
** llama_vocab::load is the reference for defaults and overrides), or a Hugging Face tokenizer.json
** (byte-level BPE) with tokenizer_config.json / config.json / generation_config.json beside it for the
** BOS/EOS tokens. What is not implemented is refused by name in one line, never guessed.
*/
#include "tok_impl.h"
#include "rfile.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* ---- GGUF ---- */

/* A special-token id key, when present, replaces the default. */
static void gguf_special(const Gguf *g, const char *key, int32_t *id)
{
	uint64_t v;
	if (!gguf_get_uint(g, key, &v))
		*id = v <= INT32_MAX ? (int32_t)v : -1;
}

/* Split a merge "A B" at the first space after the first byte (llama.cpp: word.find(' ', 1)). */
static const char *merge_split(const char *s, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (s[i] == ' ')
			return s + i;
	return NULL;
}

/* Vocabulary, scores and types, then llama.cpp's per-model defaults, the pre-tokenizer, the metadata
** overrides (special ids, add_bos/add_eos, add_space_prefix) in llama.cpp's order, and the merges. */
int tok_open_gguf(Tok **out, const Gguf *g, const char *pre, char *err, size_t len)
{
	*out = NULL;
	const char *path = g->path ? g->path : "gguf";
	const char *model = gguf_get_str(g, "tokenizer.ggml.model");
	if (!model)
		return seterr(err, len, "%s: no tokenizer (tokenizer.ggml.model is missing)", path);
	int m;
	if (!strcmp(model, "gpt2"))
		m = TOKM_BPE;
	else if (!strcmp(model, "llama"))
		m = TOKM_SPM;
	else
		return seterr(err, len, "%s: tokenizer model '%s' is not supported (gpt2, llama)", path, model);
	const GgufKV *toks = gguf_find_key(g, "tokenizer.ggml.tokens");
	if (!toks || !gguf_arr_str(toks, 0, NULL))
		return seterr(err, len, "%s: tokenizer.ggml.tokens is missing or not an array of strings", path);
	uint64_t n = gguf_arr_len(toks);
	if (n > INT32_MAX)
		return seterr(err, len, "%s: %llu tokens is too many", path, (unsigned long long)n);
	const GgufKV *scores = gguf_find_key(g, "tokenizer.ggml.scores");
	const GgufKV *types = gguf_find_key(g, "tokenizer.ggml.token_type");
	if (scores && gguf_arr_len(scores) < n)
		return seterr(err, len, "%s: tokenizer.ggml.scores has %llu entries for %llu tokens", path,
		              (unsigned long long)gguf_arr_len(scores), (unsigned long long)n);
	if (types && gguf_arr_len(types) < n)
		return seterr(err, len, "%s: tokenizer.ggml.token_type has %llu entries for %llu tokens", path,
		              (unsigned long long)gguf_arr_len(types), (unsigned long long)n);
	Tok *t = tok_new(m);
	if (!t || tok_set_vocab_size(t, (int32_t)n))
		goto oom;
	for (uint64_t i = 0; i < n; i++) {
		uint64_t sl;
		const char *s = gguf_arr_str(toks, i, &sl);
		double sc = 0;
		int64_t ty = TOK_NORMAL;
		if (scores && gguf_arr_float(scores, i, &sc)) {
			int64_t iv;
			sc = gguf_arr_int(scores, i, &iv) ? 0 : (double)iv;
		}
		if (types && (gguf_arr_int(types, i, &ty) || ty < 0 || ty > TOK_BYTE))
			ty = TOK_UNDEFINED;
		if (tok_set_token(t, (int32_t)i, s, sl, (float)sc, (int)ty))
			goto oom;
	}
	if (m == TOKM_SPM) {
		t->bos = 1, t->eos = 2, t->unk = 0;
		t->add_bos = 1;
		t->add_space_prefix = 1;
		snprintf(t->pre_name, sizeof t->pre_name, "%s", "");
	} else {
		const char *name = pre ? pre : gguf_get_str(g, "tokenizer.ggml.pre");
		char why[512];
		if (tok_pre_named(t, name ? name : "default", why, sizeof why)) {
			tok_close(t);
			return seterr(err, len, "%s: %s", path, why);
		}
	}
	gguf_special(g, "tokenizer.ggml.bos_token_id", &t->bos);
	gguf_special(g, "tokenizer.ggml.eos_token_id", &t->eos);
	gguf_special(g, "tokenizer.ggml.eot_token_id", &t->eot);
	gguf_special(g, "tokenizer.ggml.eom_token_id", &t->eom);
	gguf_special(g, "tokenizer.ggml.unknown_token_id", &t->unk);
	int b;
	if (!gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b))
		t->add_bos = b;
	if (!gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b))
		t->add_eos = b;
	if (!gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b))
		t->add_space_prefix = b;
	if (tok_build(t, err, len)) {
		tok_close(t);
		return -1;
	}
	if (m == TOKM_BPE) {
		const GgufKV *mg = gguf_find_key(g, "tokenizer.ggml.merges");
		uint64_t nm = gguf_arr_len(mg);
		if (!mg || (nm && !gguf_arr_str(mg, 0, NULL))) {
			tok_close(t);
			return seterr(err, len, "%s: tokenizer.ggml.merges is missing or not an array of strings", path);
		}
		if (tok_merges_init(t, nm))
			goto oom;
		for (uint64_t i = 0; i < nm && i <= INT32_MAX; i++) {
			uint64_t sl;
			const char *s = gguf_arr_str(mg, i, &sl);
			const char *sp = merge_split(s, sl);
			if (sp && tok_add_merge(t, s, (size_t)(sp - s), sp + 1, sl - (size_t)(sp - s) - 1, (int32_t)i))
				goto oom;
		}
	}
	*out = t;
	return 0;
oom:
	tok_close(t);
	return seterr(err, len, "%s: out of memory reading the tokenizer", path);
}

/* ---- tokenizer.json ---- */

/* A regex that matches string s literally (Split with a String pattern). */
static char *regex_quote(const char *s)
{
	size_t n = strlen(s);
	char *o = malloc(2 * n + 1), *p = o;
	if (!o)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x80 && !((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) && c >= 0x20)
			*p++ = '\\';
		*p++ = (char)c;
	}
	*p = 0;
	return o;
}

/* Boolean member with a default. */
static int jbool(const json_t *o, const char *key, int def)
{
	const json_t *v = json_object_get(o, key);
	return json_is_boolean(v) ? json_is_true(v) : def;
}

/* Turn a pre_tokenizer object into steps. *bytelevel is set when a ByteLevel step is seen. */
static int json_pre(Tok *t, const json_t *p, int *bytelevel, const char *path, char *err, size_t len)
{
	if (!p || json_is_null(p))
		return 0;
	const char *type = json_string_value(json_object_get(p, "type"));
	if (!type)
		return seterr(err, len, "%s: pre_tokenizer without a type", path);
	if (!strcmp(type, "Sequence")) {
		const json_t *a = json_object_get(p, "pretokenizers");
		size_t i;
		const json_t *e;
		json_array_foreach(a, i, e)
			if (json_pre(t, e, bytelevel, path, err, len))
				return -1;
		return 0;
	}
	if (!strcmp(type, "ByteLevel")) {
		*bytelevel = 1;
		return tok_pre_bytelevel(t, jbool(p, "use_regex", 1), jbool(p, "add_prefix_space", 0), err, len);
	}
	if (!strcmp(type, "Digits"))
		return tok_pre_add(t, jbool(p, "individual_digits", 0) ? "\\p{N}" : "\\p{N}+", TSB_ISOLATED, 0, 0, err, len);
	if (!strcmp(type, "Split")) {
		const json_t *pat = json_object_get(p, "pattern");
		const char *re = json_string_value(json_object_get(pat, "Regex"));
		const char *lit = json_string_value(json_object_get(pat, "String"));
		const char *beh = json_string_value(json_object_get(p, "behavior"));
		static const char *const behs[] = {"Isolated", "Removed", "MergedWithPrevious", "MergedWithNext",
		                                   "Contiguous"};
		int bi = -1;
		for (int i = 0; beh && i < 5; i++)
			if (!strcmp(beh, behs[i]))
				bi = i;
		if (bi < 0)
			return seterr(err, len, "%s: Split behavior '%s' is not supported", path, beh ? beh : "(none)");
		if (!re && !lit)
			return seterr(err, len, "%s: Split without a Regex or String pattern", path);
		char *q = re ? NULL : regex_quote(lit);
		if (!re && !q)
			return seterr(err, len, "out of memory");
		int rc = tok_pre_add(t, re ? re : q, bi, jbool(p, "invert", 0), 0, err, len);
		free(q);
		return rc;
	}
	return seterr(err, len, "%s: pre_tokenizer '%s' is not supported (Sequence, Split, ByteLevel, Digits)", path,
	              type);
}

/* Accept no normalizer, or NFC (not applied, as llama.cpp does not: input is taken to be NFC already). */
static int json_normalizer(const json_t *nz, const char *path, char *err, size_t len)
{
	if (!nz || json_is_null(nz))
		return 0;
	const char *type = json_string_value(json_object_get(nz, "type"));
	if (type && !strcmp(type, "Sequence")) {
		size_t i;
		const json_t *e;
		json_array_foreach(json_object_get(nz, "normalizers"), i, e)
			if (json_normalizer(e, path, err, len))
				return -1;
		return 0;
	}
	if (type && !strcmp(type, "NFC"))
		return 0;
	return seterr(err, len, "%s: normalizer '%s' is not supported (none, NFC)", path, type ? type : "(no type)");
}

/* The JSON file dir/name, or NULL when absent or unreadable (optional files). */
static json_t *load_beside(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (!p)
		return NULL;
	snprintf(p, n, "%s/%s", dir, name);
	json_error_t je;
	json_t *j = rfile_json(p, 0, &je);
	free(p);
	return j;
}

/* A token named in tokenizer_config.json: a string or {"content": ...}. */
static const char *config_token(const json_t *cfg, const char *key)
{
	const json_t *v = json_object_get(cfg, key);
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_string_value(v);
}

/* An id, or the first of a list of ids (config.json's eos_token_id may be a list). */
static int32_t first_id(const json_t *v)
{
	if (json_is_array(v))
		v = json_array_get(v, 0);
	return json_is_integer(v) && json_integer_value(v) >= 0 && json_integer_value(v) <= INT32_MAX ?
	               (int32_t)json_integer_value(v) : -1;
}

/* Every id of an int-or-list value joins the end-of-generation set. */
static int eog_ids(Tok *t, const json_t *v)
{
	if (json_is_integer(v))
		return tok_eog_add(t, first_id(v));
	size_t i;
	const json_t *e;
	json_array_foreach(v, i, e)
		if (tok_eog_add(t, first_id(e)))
			return -1;
	return 0;
}

/* TemplateProcessing's "single" template: a SpecialToken first means BOS is added, last means EOS. */
static void json_post(const json_t *pp, const char **bos, const char **eos)
{
	const char *type = json_string_value(json_object_get(pp, "type"));
	if (!type)
		return;
	if (!strcmp(type, "Sequence")) {
		size_t i;
		const json_t *e;
		json_array_foreach(json_object_get(pp, "processors"), i, e)
			json_post(e, bos, eos);
		return;
	}
	if (strcmp(type, "TemplateProcessing"))
		return;
	const json_t *single = json_object_get(pp, "single");
	size_t n = json_array_size(single);
	if (!n)
		return;
	const json_t *first = json_object_get(json_array_get(single, 0), "SpecialToken");
	const json_t *last = json_object_get(json_array_get(single, n - 1), "SpecialToken");
	if (first)
		*bos = json_string_value(json_object_get(first, "id"));
	if (last && n > 1)
		*eos = json_string_value(json_object_get(last, "id"));
}

/* The id of a token named by text (NULL-safe). */
static int32_t lookup_str(const Tok *t, const char *s)
{
	return s ? tok_lookup(t, s, strlen(s)) : -1;
}

/* model.vocab + added_tokens (special -> CONTROL, else USER_DEFINED), the pre_tokenizer steps, merges as
** strings or pairs, then BOS/EOS: added by the post-processor's template, named by the configs. */
int tok_open_json(Tok **out, const char *path, char *err, size_t len)
{
	*out = NULL;
	json_error_t je;
	json_t *root = rfile_json(path, 0, &je);
	char ln[32];
	if (!root)
		return seterr(err, len, "%s: %s%s", path, rfile_line(&je, ln, sizeof ln), je.text);
	Tok *t = NULL;
	json_t *cfg = NULL, *conf = NULL, *gen = NULL;
	char *dir = strdup(path);
	int rc = -1;
	if (!dir) {
		seterr(err, len, "out of memory");
		goto done;
	}
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	else
		strcpy(dir, ".");
	const json_t *model = json_object_get(root, "model");
	const char *mtype = json_string_value(json_object_get(model, "type"));
	const json_t *vocab = json_object_get(model, "vocab");
	const json_t *merges = json_object_get(model, "merges");
	if (mtype && strcmp(mtype, "BPE")) {
		seterr(err, len, "%s: tokenizer model '%s' is not supported (BPE)", path, mtype);
		goto done;
	}
	if (!json_is_object(vocab) || !json_is_array(merges)) {
		seterr(err, len, "%s: model has no BPE vocab and merges", path);
		goto done;
	}
	const char *csp = json_string_value(json_object_get(model, "continuing_subword_prefix"));
	const char *ews = json_string_value(json_object_get(model, "end_of_word_suffix"));
	if ((csp && *csp) || (ews && *ews)) {
		seterr(err, len, "%s: BPE with continuing_subword_prefix/end_of_word_suffix is not supported", path);
		goto done;
	}
	if (json_normalizer(json_object_get(root, "normalizer"), path, err, len))
		goto done;
	/* size: the largest id of the vocab and the added tokens */
	int64_t maxid = -1;
	const char *key;
	const json_t *val;
	json_object_foreach((json_t *)vocab, key, val) {
		if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= INT32_MAX) {
			seterr(err, len, "%s: vocab entry '%.40s' has no valid id", path, key);
			goto done;
		}
		if (json_integer_value(val) > maxid)
			maxid = json_integer_value(val);
	}
	const json_t *added = json_object_get(root, "added_tokens");
	size_t i;
	const json_t *e;
	json_array_foreach(added, i, e) {
		json_int_t id = json_integer_value(json_object_get(e, "id"));
		if (!json_is_integer(json_object_get(e, "id")) || id < 0 || id >= INT32_MAX ||
		    !json_is_string(json_object_get(e, "content"))) {
			seterr(err, len, "%s: added_tokens[%zu] has no valid id and content", path, i);
			goto done;
		}
		if (id > maxid)
			maxid = id;
	}
	t = tok_new(TOKM_BPE);
	if (!t || tok_set_vocab_size(t, (int32_t)(maxid + 1))) {
		seterr(err, len, "out of memory");
		goto done;
	}
	snprintf(t->pre_name, sizeof t->pre_name, "%s", "tokenizer.json");
	json_object_foreach((json_t *)vocab, key, val) {
		if (tok_set_token(t, (int32_t)json_integer_value(val), key, strlen(key), 0, TOK_NORMAL)) {
			seterr(err, len, "out of memory");
			goto done;
		}
	}
	json_array_foreach(added, i, e) {
		int32_t id = (int32_t)json_integer_value(json_object_get(e, "id"));
		const json_t *c = json_object_get(e, "content");
		int ty = jbool(e, "special", 0) ? TOK_CONTROL : TOK_USER_DEFINED;
		if (tok_set_token(t, id, json_string_value(c), json_string_length(c), 0, ty)) {
			seterr(err, len, "out of memory");
			goto done;
		}
		t->flags[id] = (uint8_t)((jbool(e, "lstrip", 0) ? TOKF_LSTRIP : 0) | (jbool(e, "rstrip", 0) ? TOKF_RSTRIP : 0));
	}
	int bytelevel = 0;
	if (json_pre(t, json_object_get(root, "pre_tokenizer"), &bytelevel, path, err, len))
		goto done;
	const char *dtype = json_string_value(json_object_get(json_object_get(root, "decoder"), "type"));
	if (!bytelevel && !(dtype && !strcmp(dtype, "ByteLevel"))) {
		seterr(err, len, "%s: BPE without ByteLevel (SentencePiece-style BPE) is not supported; use a GGUF file",
		       path);
		goto done;
	}
	t->ignore_merges = jbool(model, "ignore_merges", 0);
	if (tok_build(t, err, len))
		goto done;
	if (tok_merges_init(t, json_array_size(merges))) {
		seterr(err, len, "out of memory");
		goto done;
	}
	json_array_foreach(merges, i, e) {
		const char *a, *b;
		size_t al, bl;
		if (json_is_string(e)) {
			a = json_string_value(e);
			size_t n = json_string_length(e);
			const char *sp = merge_split(a, n);
			if (!sp)
				continue;
			al = (size_t)(sp - a), b = sp + 1, bl = n - al - 1;
		} else if (json_array_size(e) == 2 && json_is_string(json_array_get(e, 0)) &&
		           json_is_string(json_array_get(e, 1))) {
			a = json_string_value(json_array_get(e, 0)), al = json_string_length(json_array_get(e, 0));
			b = json_string_value(json_array_get(e, 1)), bl = json_string_length(json_array_get(e, 1));
		} else {
			seterr(err, len, "%s: merges[%zu] is neither \"A B\" nor [\"A\", \"B\"]", path, i);
			goto done;
		}
		if (i > INT32_MAX || tok_add_merge(t, a, al, b, bl, (int32_t)i)) {
			seterr(err, len, "out of memory");
			goto done;
		}
	}
	/* special tokens: the post-processor says what is added; the configs say which tokens they are */
	const char *bos = NULL, *eos = NULL;
	json_post(json_object_get(root, "post_processor"), &bos, &eos);
	t->add_bos = bos != NULL;
	t->add_eos = eos != NULL;
	cfg = load_beside(dir, "tokenizer_config.json");
	conf = load_beside(dir, "config.json");
	gen = load_beside(dir, "generation_config.json");
	int32_t id;
	t->bos = (id = lookup_str(t, config_token(cfg, "bos_token"))) >= 0 ? id :
	         (id = first_id(json_object_get(conf, "bos_token_id"))) >= 0 && id < t->n ? id : lookup_str(t, bos);
	t->eos = (id = lookup_str(t, config_token(cfg, "eos_token"))) >= 0 ? id :
	         (id = first_id(json_object_get(conf, "eos_token_id"))) >= 0 && id < t->n ? id : lookup_str(t, eos);
	t->unk = lookup_str(t, json_string_value(json_object_get(model, "unk_token")));
	if (tok_eog_add(t, t->eos) || eog_ids(t, json_object_get(conf, "eos_token_id")) ||
	    eog_ids(t, json_object_get(gen, "eos_token_id"))) {
		seterr(err, len, "out of memory");
		goto done;
	}
	*out = t;
	t = NULL;
	rc = 0;
done:
	tok_close(t);
	json_decref(root);
	json_decref(cfg);
	json_decref(conf);
	json_decref(gen);
	free(dir);
	return rc;
}

/* ---- from weights ---- */

/* GGUF metadata, or the HF directory's tokenizer.json. */
int tok_open(Tok **t, const Weights *w, char *err, size_t len)
{
	if (w->format == WF_GGUF)
		return tok_open_gguf(t, &w->gg, NULL, err, len);
	const char *dir = w->st.dir ? w->st.dir : w->path;
	size_t n = strlen(dir) + sizeof "/tokenizer.json";
	char *p = malloc(n);
	if (!p)
		return seterr(err, len, "out of memory");
	snprintf(p, n, "%s/tokenizer.json", dir);
	int rc = tok_open_json(t, p, err, len);
	free(p);
	return rc;
}
