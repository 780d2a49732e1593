/*
** tests/test_jinja.c — the Jinja interpreter (runtime/formats/jinja.h) against jinja2.
**
** - tests/data/templates/expected.json (made by tests/tools/render_templates.py with transformers' own
**   renderer) holds the real chat templates of GLM-4.5/4.6, GLM-4.7, DeepSeek-V3 and V3.1, Qwen3,
**   Llama 3.2 (strftime_now, on a fixed clock) and 3.3 and SmolLM2 rendered on several conversations
**   (system or not, multi-turn with past answers that carry <think> blocks, unicode and newlines,
**   add_generation_prompt and enable_thinking on and off, tools printed with tojson), and one snippet per
**   Jinja construct; each must render byte for byte the same, and
**   where jinja2 raised (raise_exception), glmc must fail with the same message.
** - Bad templates fail in one line naming the template line: syntax errors, unknown tags, filters and
**   tests, undefined values used, runaway loops, recursion and memory.
** - Fuzz: thousands of mutations of the real templates (cut, duplicated and inserted pieces) never
**   crash, hang or give a multi-line error.
*/
#include "check.h"
#include "jinja.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#define TDIR "tests/data/templates/"

static char *slurp(const char *path, size_t *n)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	fseek(fp, 0, SEEK_END);
	long len = ftell(fp);
	fseek(fp, 0, SEEK_SET);
	char *s = malloc((size_t)len + 1);
	if (s && fread(s, 1, (size_t)len, fp) != (size_t)len) {
		free(s);
		s = NULL;
	}
	if (s)
		s[len] = 0, *n = (size_t)len;
	fclose(fp);
	return s;
}

/* The fixed clock of render_templates.py: 2025-01-15 09:30:00 (a Wednesday, day 15 of the year). */
static struct tm fixed_now(void)
{
	struct tm t = {.tm_year = 125, .tm_mon = 0, .tm_mday = 15, .tm_hour = 9, .tm_min = 30, .tm_wday = 3, .tm_yday = 14};
	return t;
}

/* The first byte where a and b differ, for messages. */
static size_t diff_at(const char *a, size_t an, const char *b, size_t bn)
{
	size_t i = 0;
	while (i < an && i < bn && a[i] == b[i])
		i++;
	return i;
}

static void check_cases(void)
{
	json_error_t je;
	json_t *root = json_load_file(TDIR "expected.json", 0, &je);
	check(root != NULL, "expected.json loads", "%s", je.text);
	if (!root)
		return;
	struct tm now = fixed_now();
	size_t i;
	json_t *c;
	json_array_foreach(json_object_get(root, "cases"), i, c) {
		const char *name = json_string_value(json_object_get(c, "name"));
		const char *file = json_string_value(json_object_get(c, "template"));
		const json_t *want = json_object_get(c, "want"), *werr = json_object_get(c, "error");
		char *src;
		size_t n = 0;
		if (file) {
			char path[256];
			snprintf(path, sizeof path, TDIR "%s", file);
			src = slurp(path, &n);
		} else {
			src = strdup(json_string_value(json_object_get(c, "source")));
			n = strlen(src);
		}
		char err[512] = "", label[300];
		snprintf(label, sizeof label, "render %s", name);
		JjTmpl *t;
		if (!src || jj_parse(&t, src, n, "template", err, sizeof err)) {
			check(0, label, "parse: %s", src ? err : "cannot read the template");
			free(src);
			continue;
		}
		char *out;
		size_t on;
		int rc = jj_render(t, json_object_get(c, "vars"), &now, &out, &on, err, sizeof err);
		if (werr) {
			const char *we = json_string_value(werr);
			check(rc && strstr(err, we) && !strchr(err, '\n'), label, "want the error '%s', got rc %d '%s'", we, rc, err);
		} else if (rc)
			check(0, label, "%s", err);
		else {
			size_t wn = json_string_length(want), at = diff_at(out, on, json_string_value(want), wn);
			check(on == wn && at == wn, label, "%zu vs %zu bytes, first difference at byte %zu: got '%.60s' want '%.60s'",
			      on, wn, at, out + (at < on ? at : on), json_string_value(want) + (at < wn ? at : wn));
			free(out);
		}
		jj_free(t);
		free(src);
	}
	json_decref(root);
}

/* src must fail (at parse or render, with vars) in one line containing want. */
static void check_error(const char *name, const char *src, const char *vars, const char *want)
{
	char err[512] = "";
	JjTmpl *t;
	json_t *v = vars ? json_loads(vars, 0, NULL) : NULL;
	int rc = jj_parse(&t, src, strlen(src), "t.jinja", err, sizeof err);
	if (!rc) {
		char *out = NULL;
		size_t n;
		rc = jj_render(t, v, NULL, &out, &n, err, sizeof err);
		if (!rc)
			snprintf(err, sizeof err, "rendered '%.100s'", out);
		free(out);
		jj_free(t);
	}
	json_decref(v);
	check(rc && strstr(err, want) && !strchr(err, '\n'), name, "want one line with '%s', got '%s'", want, err);
}

static void check_errors(void)
{
	static const struct {
		const char *name, *src, *vars, *want;
	} cases[] = {
		{"error: unclosed if", "a\n{% if x %}b", NULL, "t.jinja:2: unexpected end of template"},
		{"error: unclosed for", "{% for x in y %}\n\n", NULL, "expected 'endfor'"},
		{"error: stray endif", "x\n\n{% endif %}", NULL, "t.jinja:3: unexpected 'endif'"},
		{"error: bad expression", "line1\n{{ 1 + }}", NULL, "t.jinja:2: unexpected '}}'"},
		{"error: unknown tag", "{% frobnicate %}", NULL, "unknown or unsupported tag 'frobnicate'"},
		{"error: unknown filter", "\n\n\n{{ 'a' | nosuch }}", NULL, "t.jinja:4: no filter named 'nosuch'"},
		{"error: unknown test", "{{ 1 is nosuch }}", NULL, "no test named 'nosuch'"},
		{"error: unclosed comment", "a {# b", NULL, "missing end of comment tag"},
		{"error: unclosed variable", "a {{ b", NULL, "unexpected end of template inside"},
		{"error: unterminated string", "{{ 'abc }}", NULL, "unterminated string"},
		{"error: unbalanced bracket", "{{ (1 + 2 }}", NULL, "expected ')'"},
		{"error: undefined attribute", "{{ x.y }}", NULL, "t.jinja:1: 'x' is undefined"},
		{"error: undefined arithmetic", "\n{{ x + 1 }}", NULL, "t.jinja:2: 'x' is undefined"},
		{"error: raise_exception", "{% if messages[0].role != 'user' %}\n{{ raise_exception('Roles must\nalternate') }}{% endif %}",
		 "{\"messages\": [{\"role\": \"system\"}]}", "t.jinja:2: Roles must?alternate"},
		{"error: division by zero", "{{ 1 / 0 }}", NULL, "division by zero"},
		{"error: type error", "{{ 'a' + 1 }}", NULL, "unsupported operand type(s) for +: 'str' and 'int'"},
		{"error: not callable", "{{ 'a'() }}", NULL, "'str' object is not callable"},
		{"error: namespace only", "{% set x = 1 %}{% set x.a = 2 %}", NULL, "cannot assign attribute on non-namespace"},
		{"error: range too big", "{% for i in range(1000000) %}{% endfor %}", NULL, "range too big"},
		{"error: runaway loop", "{% for i in range(99999) %}{% for j in range(99999) %}{% endfor %}{% endfor %}", NULL,
		 "t.jinja:1: the template"}, /* steps or memory, whichever runs out first */
		{"error: endless recursion", "{% macro m(n) %}{{ m(n + 1) }}{% endmacro %}{{ m(0) }}", NULL, "recurses too deeply"},
		{"error: memory", "{% set s = 'x' * 100000 %}{% set t = s * 100000 %}", NULL, "too long"},
		{"error: unpacking", "{% for a, b in [1, 2] %}{% endfor %}", NULL, "'int' object is not iterable"},
		{"error: tojson of undefined", "{{ x | tojson }}", NULL, "not JSON serializable"},
		{"error: recursive loops", "{% for x in y recursive %}{% endfor %}", NULL, "not supported"},
	};
	for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
		check_error(cases[i].name, cases[i].src, cases[i].vars, cases[i].want);
	/* nesting deeper than the parser allows */
	char deep[4096];
	size_t k = 0;
	k += (size_t)snprintf(deep, sizeof deep, "{{ ");
	for (int i = 0; i < 1000; i++)
		deep[k++] = '[';
	deep[k] = 0;
	check_error("error: deep nesting", deep, NULL, "nested too deeply");
	k = 0;
	for (int i = 0; i < 300; i++)
		k += (size_t)snprintf(deep + k, sizeof deep - k, "{%% if 1 %%}");
	check_error("error: deep blocks", deep, NULL, "nested too deeply");
}

/* Plain checks of the API: variables absent, a template re-rendered, an empty template. */
static void check_api(void)
{
	char err[256] = "", *out = NULL;
	size_t n;
	JjTmpl *t;
	const char *src = "{{ a }}|{{ b | default('x') }}";
	int ok = !jj_parse(&t, src, strlen(src), "api", err, sizeof err);
	json_t *v = json_pack("{s:i}", "a", 5);
	ok = ok && !jj_render(t, v, NULL, &out, &n, err, sizeof err) && !strcmp(out, "5|x") && n == 3;
	free(out);
	out = NULL;
	ok = ok && !jj_render(t, NULL, NULL, &out, &n, err, sizeof err) && !strcmp(out, "|x");
	free(out);
	jj_free(t);
	json_decref(v);
	check(ok, "render twice, with and without variables", "%s", err);
	ok = !jj_parse(&t, "", 0, "api", err, sizeof err) && !jj_render(t, NULL, NULL, &out, &n, err, sizeof err) && n == 0;
	if (ok)
		free(out), jj_free(t);
	check(ok, "an empty template renders nothing", "%s", err);
}

/* xorshift. */
static unsigned long long rnd(unsigned long long *s)
{
	*s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
	return *s;
}

static void check_fuzz(void)
{
	static const char *const files[] = {"glm-4.6.jinja", "glm-4.7.jinja", "glm-4.5-llamacpp.jinja", "deepseek-v3.jinja",
	                                    "deepseek-v3.1.jinja", "qwen3.jinja", "llama-3.3.jinja", "llama-3.2.jinja",
	                                    "smollm2.jinja"};
	static const char *const bits[] = {"{%", "%}", "{{", "}}", "{#", "#}", "-", "(", ")", "[", "]", "{", "}", "'", "\"",
	                                   "|", ".", ",", "=", " if ", " else ", "endif", "endfor", " in ", " not ", "~",
	                                   "*", "loop.", "ns.", "[::-1]", "\\", "\n", "\xff", "\xe4\xb8", "{% endmacro %}",
	                                   " is ", "(((", "]]]"};
	const char *vars = "{\"messages\": [{\"role\": \"system\", \"content\": \"S\"}, {\"role\": \"user\", \"content\": \"Hi\"},"
	                   " {\"role\": \"assistant\", \"content\": \"<think>r</think>A\"}, {\"role\": \"user\", \"content\": \"Q\"}],"
	                   " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"tools\": null}";
	json_t *v = json_loads(vars, 0, NULL);
	unsigned long long seed = 0x9e3779b97f4a7c15ull;
	int runs = 0, parsed = 0, rendered = 0, bad = 0;
	char worst[600] = "";
	for (size_t f = 0; f < sizeof files / sizeof *files; f++) {
		char path[256];
		size_t n;
		snprintf(path, sizeof path, TDIR "%s", files[f]);
		char *src = slurp(path, &n);
		if (!src)
			continue;
		for (int it = 0; it < 1000; it++, runs++) {
			char *m = malloc(n * 3 + 256);
			memcpy(m, src, n);
			size_t mn = n;
			int edits = 1 + (int)(rnd(&seed) % 4);
			for (int e = 0; e < edits; e++) {
				size_t at = mn ? rnd(&seed) % mn : 0, len = 1 + rnd(&seed) % 12;
				if (at + len > mn)
					len = mn - at;
				switch (rnd(&seed) % 3) {
				case 0: /* cut */
					memmove(m + at, m + at + len, mn - at - len);
					mn -= len;
					break;
				case 1: /* duplicate */
					if (mn + len < n * 3 + 200) {
						memmove(m + at + len, m + at, mn - at);
						mn += len;
					}
					break;
				default: { /* insert a piece of syntax */
					const char *b = bits[rnd(&seed) % (sizeof bits / sizeof *bits)];
					size_t bl = strlen(b);
					if (mn + bl < n * 3 + 200) {
						memmove(m + at + bl, m + at, mn - at);
						memcpy(m + at, b, bl);
						mn += bl;
					}
				}
				}
			}
			char err[512] = "";
			JjTmpl *t;
			int rc = jj_parse(&t, m, mn, "fuzz", err, sizeof err);
			if (!rc) {
				parsed++;
				char *out = NULL;
				size_t on;
				rc = jj_render(t, v, NULL, &out, &on, err, sizeof err);
				rendered += !rc;
				free(out);
				jj_free(t);
			}
			if (rc && (strchr(err, '\n') || strncmp(err, "fuzz:", 5))) {
				bad++;
				snprintf(worst, sizeof worst, "%s", err);
			}
			free(m);
		}
		free(src);
	}
	json_decref(v);
	check(!bad && runs > 0, "fuzz: mutated templates end in output or a one-line error", "%d of %d bad, e.g. '%s'", bad,
	      runs, worst);
	printf("# fuzz: %d mutations, %d parsed, %d rendered\n", runs, parsed, rendered);
}

int main(void)
{
	check_cases();
	check_errors();
	check_api();
	check_fuzz();
	return check_done();
}
