/*
** runtime/formats/jinja.h — a Jinja interpreter for chat templates.
**
** The subset that real chat templates use, rendered as transformers' apply_chat_template renders them
** (jinja2's sandboxed environment with trim_blocks and lstrip_blocks, the loopcontrols extension, its
** tojson, raise_exception, strftime_now, dict and namespace): text, {{ }}, {% %} and {# #} with
** whitespace control; for (loop.*, else, a filter `if`, break/continue), if/elif/else, set (names,
** tuples, namespace attributes, blocks), macros, filter blocks, raw; Python-like expressions, filters,
** tests and the str/dict methods templates call. Values are none, booleans, 64-bit integers, floats,
** UTF-8 strings, lists and dicts; variables come in as one JSON object.
**
** A template is parsed once (jj_parse) and rendered any number of times (jj_render). Every error is one
** line, "NAME:LINE: what", naming the template's line. Recursion depth, steps, memory and output are
** bounded, so a hostile or broken template ends with an error, never a crash or a hang.
*/
#ifndef GLM_JINJA_H
#define GLM_JINJA_H

#include <jansson.h>
#include <stddef.h>
#include <time.h>

typedef struct JjTmpl JjTmpl;

/* Parse src[0..n) (UTF-8); name is what error messages call it (e.g. "chat template"). */
int jj_parse(JjTmpl **t, const char *src, size_t n, const char *name, char *err, size_t len);

/* Render with the variables of the JSON object vars (NULL: none); now is what strftime_now formats.
** *out is malloc'd and NUL-terminated, *n its length. */
int jj_render(const JjTmpl *t, const json_t *vars, const struct tm *now, char **out, size_t *n, char *err,
              size_t len);

void jj_free(JjTmpl *t);

#endif
