/*
** runtime/cli/chat.c — chat formats and glmrun's interactive chat.
**
** A model's own chat template is rendered by the Jinja interpreter (runtime/formats/jinja.h) with the variables
** transformers' apply_chat_template passes. Weights without a template use one of five families written
** out in C from the official template's behaviour, rendered as transformers renders it (Jinja with
** trim_blocks and lstrip_blocks). Facts taken, per family (no template code):
** - glm4 (GLM-4.5, GLM-4.6): the GLM-4.6 chat_template.jinja (llama.cpp keeps a copy as
**   models/templates/GLM-4.6.jinja). "[gMASK]<sop>" once; a system message "<|system|>\n" + text; a user
**   message "<|user|>\n" + text, + "/nothink" when enable_thinking is false (unless it already ends so);
**   a past answer "<|assistant|>\n<think></think>" + "\n" + strip(answer) (its reasoning dropped: every
**   answer before the last user message); generation prompt "<|assistant|>", + "\n<think></think>" when
**   enable_thinking is false. Default: enable_thinking undefined, the model decides whether to think.
** - glm5 (GLM-4.7, GLM-4.7-Flash, GLM-5): zai-org/GLM-4.7 chat_template.jinja (read on a Hugging Face
**   mirror). GLM-5's was not read first hand: third-party renderers describe it as the same
**   clear_thinking template. No newline after "<|system|>" / "<|user|>"; no "/nothink"; a past answer
**   "<|assistant|></think>" + strip(answer); generation prompt "<|assistant|><think>" (thinking on, the
**   default), "<|assistant|></think>" when enable_thinking is false.
** - deepseek3: deepseek-ai/DeepSeek-V3 tokenizer_config.json (V3 and V3-0324 render the same here):
**   "<｜begin▁of▁sentence｜>" + the system messages joined by "\n\n"; a user message "<｜User｜>" + text; a
**   past answer "<｜Assistant｜>" + text + "<｜end▁of▁sentence｜>"; generation prompt "<｜Assistant｜>"; no
**   default system prompt. DeepSeek-V3.1 (llama.cpp models/templates/deepseek-ai-DeepSeek-V3.1.jinja)
**   puts "</think>" after "<｜Assistant｜>" (thinking off, its default) and drops a past answer's text up
**   to its first "</think>".
** - chatml (Qwen2, Qwen2.5, Qwen3, ChatML): "<|im_start|>" + role + "\n" + text + "<|im_end|>\n" per
**   message; generation prompt "<|im_start|>assistant\n". Qwen3's template (it reads enable_thinking)
**   keeps only the text after the last "</think>" of a past answer (leading newlines removed) and adds
**   "<think>\n\n</think>\n\n" to the generation prompt when thinking is off; it has no default system
**   prompt. Qwen2.5's template supplies "You are Qwen, created by Alibaba Cloud. You are a helpful
**   assistant." and Qwen2's "You are a helpful assistant." when no system message is given.
** - llama3: meta-llama/Meta-Llama-3-8B-Instruct: "<|begin_of_text|>", then per message
**   "<|start_header_id|>" + role + "<|end_header_id|>\n\n" + trim(text) + "<|eot_id|>"; generation prompt
**   "<|start_header_id|>assistant<|end_header_id|>\n\n"; no default system prompt. Llama 3.1+ templates
**   (recognised by "Cutting Knowledge Date") always open with a system message whose text starts
**   "Cutting Knowledge Date: December 2023\nToday Date: " + date + "\n\n" (date_string defaults to
**   "26 Jul 2024"; templates calling strftime_now use today's date, "%d %b %Y").
** End-of-turn tokens: GLM's generation_config eos ids (<|endoftext|>, <|user|>, <|observation|>),
** <｜end▁of▁sentence｜>, <|im_end|> (and <|endoftext|>), <|eot_id|> (and <|eom_id|>, <|end_of_text|>).
** Recognising a template by substrings (chat_detect) follows llama.cpp's llm_chat_detect_template where it
** has one; a template that glmrun renders only borrows the end-of-turn tokens of the family it resembles
** (the tokenizer's end-of-generation set always ends a turn).
*/
#include "chat.h"
#include "ref.h"

#include <errno.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char chat_names[] = "glm4, glm5, deepseek3, chatml, llama3";
static const char *const fam_name[CHAT_NFAMILY] = {"glm4", "glm5", "deepseek3", "chatml", "llama3"};

#define DS_BOS "<｜begin▁of▁sentence｜>"
#define DS_EOS "<｜end▁of▁sentence｜>"
#define DS_USER "<｜User｜>"
#define DS_ASSISTANT "<｜Assistant｜>"
#define QWEN25_SYSTEM "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
#define QWEN2_SYSTEM "You are a helpful assistant."

/* ---- text ---- */

static void addn(ChatBuf *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->n + n + 1 > b->cap) {
		size_t cap = 2 * (b->n + n) + 64;
		char *p = realloc(b->s, cap);
		if (!p) {
			b->oom = 1;
			return;
		}
		b->s = p, b->cap = cap;
	}
	memcpy(b->s + b->n, s, n);
	b->n += n;
	b->s[b->n] = 0;
}

static void add(ChatBuf *b, const char *s)
{
	addn(b, s, strlen(s));
}

void chat_buf_free(ChatBuf *b)
{
	free(b->s);
	*b = (ChatBuf){0};
}

/* Python's str.isspace for ASCII (Jinja's trim and str.strip() use it). */
static int is_space(unsigned char c)
{
	return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

/* s[0..*n) without leading and trailing whitespace: returns the start, sets *n. */
static const char *strip(const char *s, size_t *n)
{
	while (*n && is_space((unsigned char)*s))
		s++, (*n)--;
	while (*n && is_space((unsigned char)s[*n - 1]))
		(*n)--;
	return s;
}

static void add_stripped(ChatBuf *b, const char *s)
{
	size_t n = strlen(s);
	s = strip(s, &n);
	addn(b, s, n);
}

/* The text after the last "</think>" without its leading newlines (GLM, Qwen3), or s itself. */
static const char *after_think(const char *s)
{
	const char *at = NULL;
	for (const char *p = s; (p = strstr(p, "</think>")); p++)
		at = p;
	if (!at)
		return s;
	at += strlen("</think>");
	while (*at == '\n')
		at++;
	return at;
}

/* ---- the pieces ---- */

void chat_begin(const ChatFmt *f, ChatBuf *b, const char *system)
{
	switch (f->family) {
	case CHAT_GLM4:
	case CHAT_GLM5:
		add(b, "[gMASK]<sop>");
		if (system) {
			add(b, f->family == CHAT_GLM4 ? "<|system|>\n" : "<|system|>");
			add(b, system);
		}
		break;
	case CHAT_DEEPSEEK3:
		add(b, DS_BOS);
		if (system)
			add(b, system);
		break;
	case CHAT_CHATML:
		if (!system)
			system = f->default_system;
		if (system) {
			add(b, "<|im_start|>system\n");
			add(b, system);
			add(b, "<|im_end|>\n");
		}
		break;
	default:
		add(b, "<|begin_of_text|>");
		if (!system && !f->llama_date)
			break;
		add(b, "<|start_header_id|>system<|end_header_id|>\n\n");
		if (f->llama_date) {
			add(b, "Cutting Knowledge Date: December 2023\nToday Date: ");
			add(b, f->date);
			add(b, "\n\n");
		}
		if (system)
			add_stripped(b, system);
		add(b, "<|eot_id|>");
		break;
	}
}

void chat_user(const ChatFmt *f, ChatBuf *b, const char *text)
{
	size_t n = strlen(text);
	switch (f->family) {
	case CHAT_GLM4:
		add(b, "<|user|>\n");
		add(b, text);
		if (f->no_think && !(n >= 8 && !strcmp(text + n - 8, "/nothink")))
			add(b, "/nothink");
		break;
	case CHAT_GLM5:
		add(b, "<|user|>");
		add(b, text);
		break;
	case CHAT_DEEPSEEK3:
		add(b, DS_USER);
		add(b, text);
		break;
	case CHAT_CHATML:
		add(b, "<|im_start|>user\n");
		add(b, text);
		add(b, "<|im_end|>\n");
		break;
	default:
		add(b, "<|start_header_id|>user<|end_header_id|>\n\n");
		add_stripped(b, text);
		add(b, "<|eot_id|>");
		break;
	}
}

void chat_assistant(const ChatFmt *f, ChatBuf *b, const char *text)
{
	switch (f->family) {
	case CHAT_GLM4:
	case CHAT_GLM5: {
		const char *c = after_think(text);
		size_t n = strlen(c);
		c = strip(c, &n);
		add(b, f->family == CHAT_GLM4 ? "<|assistant|>\n<think></think>" : "<|assistant|></think>");
		if (n && f->family == CHAT_GLM4)
			add(b, "\n");
		addn(b, c, n);
		break;
	}
	case CHAT_DEEPSEEK3:
		add(b, DS_ASSISTANT);
		if (f->ds_think) {
			add(b, "</think>");
			const char *at = strstr(text, "</think>");
			if (at)
				text = at + strlen("</think>");
		}
		add(b, text);
		add(b, DS_EOS);
		break;
	case CHAT_CHATML:
		add(b, "<|im_start|>assistant\n");
		add(b, f->think_switch ? after_think(text) : text);
		add(b, "<|im_end|>\n");
		break;
	default:
		add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
		add_stripped(b, text);
		add(b, "<|eot_id|>");
		break;
	}
}

void chat_gen(const ChatFmt *f, ChatBuf *b)
{
	switch (f->family) {
	case CHAT_GLM4:
		add(b, f->no_think ? "<|assistant|>\n<think></think>" : "<|assistant|>");
		break;
	case CHAT_GLM5:
		add(b, f->no_think ? "<|assistant|></think>" : "<|assistant|><think>");
		break;
	case CHAT_DEEPSEEK3:
		add(b, f->ds_think ? DS_ASSISTANT "</think>" : DS_ASSISTANT);
		break;
	case CHAT_CHATML:
		add(b, f->no_think ? "<|im_start|>assistant\n<think>\n\n</think>\n\n" : "<|im_start|>assistant\n");
		break;
	default:
		add(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
		break;
	}
}

void chat_close(const ChatFmt *f, ChatBuf *b)
{
	static const char *const close[CHAT_NFAMILY] = {"", "", DS_EOS, "<|im_end|>\n", "<|eot_id|>"};
	add(b, close[f->family]);
}

void chat_render(const ChatFmt *f, ChatBuf *b, const char *system, const char *const *turns, int n, int gen)
{
	chat_begin(f, b, system);
	for (int i = 0; i < n; i++)
		(i % 2 ? chat_assistant : chat_user)(f, b, turns[i]);
	if (gen)
		chat_gen(f, b);
}

/* {"role": role, "content": text} (text need not be valid UTF-8: it reaches the template as bytes). */
static json_t *message(const char *role, const char *text)
{
	json_t *m = json_object(), *c = json_stringn_nocheck(text, strlen(text));
	if (!m || !c || json_object_set_new(m, "content", c) || json_object_set_new(m, "role", json_string(role))) {
		json_decref(m);
		return NULL;
	}
	return m;
}

/* messages[i] = {"role": roles[i], "content": texts[i]} through the Jinja template, appended to b. */
static int render_jinja_msgs(const ChatFmt *f, ChatBuf *b, const char *const *roles, const char *const *texts, int n,
                             int gen, char *err, size_t len)
{
	json_t *msgs = json_array(), *v = json_object();
	int bad = !msgs || !v;
	for (int i = 0; i < n && !bad; i++)
		bad = json_array_append_new(msgs, message(roles[i], texts[i]));
	bad = bad || json_object_set(v, "messages", msgs) || json_object_set_new(v, "tools", json_null()) ||
	      json_object_set_new(v, "documents", json_null()) ||
	      json_object_set_new(v, "add_generation_prompt", json_boolean(gen)) ||
	      (f->bos && json_object_set_new(v, "bos_token", json_string(f->bos))) ||
	      (f->eos && json_object_set_new(v, "eos_token", json_string(f->eos))) ||
	      (f->no_think && json_object_set_new(v, "enable_thinking", json_false()));
	json_decref(msgs);
	char *out = NULL;
	size_t on = 0;
	int rc = bad ? seterr(err, len, "out of memory") : jj_render(f->jinja, v, &f->now, &out, &on, err, len);
	json_decref(v);
	if (!rc)
		addn(b, out, on);
	free(out);
	if (!rc && b->oom)
		rc = seterr(err, len, "out of memory");
	return rc;
}

int chat_render_jinja(const ChatFmt *f, ChatBuf *b, const char *system, const char *const *turns, int n, int gen,
                      char *err, size_t len)
{
	const char **roles = malloc(sizeof *roles * (size_t)(n + 1)), **texts = malloc(sizeof *texts * (size_t)(n + 1));
	int k = 0;
	if (!roles || !texts) {
		free(roles), free(texts);
		return seterr(err, len, "out of memory");
	}
	if (system)
		roles[k] = "system", texts[k++] = system;
	for (int i = 0; i < n; i++)
		roles[k] = i % 2 ? "assistant" : "user", texts[k++] = turns[i];
	int rc = render_jinja_msgs(f, b, roles, texts, k, gen, err, len);
	free(roles), free(texts);
	return rc;
}

int chat_render_msgs(const ChatFmt *f, ChatBuf *b, const char *const *roles, const char *const *texts, int n, int gen,
                     char *err, size_t len)
{
	for (int i = 0; i < n; i++)
		if (strcmp(roles[i], "system") && strcmp(roles[i], "user") && strcmp(roles[i], "assistant"))
			return seterr(err, len, "messages[%d]: unknown role '%s' (system, user or assistant)", i, roles[i]);
	if (f->jinja)
		return render_jinja_msgs(f, b, roles, texts, n, gen, err, len);
	int at = 0;
	chat_begin(f, b, n && !strcmp(roles[0], "system") ? texts[at++] : NULL);
	for (int i = at; i < n; i++) {
		if (!strcmp(roles[i], "system"))
			return seterr(err, len, "messages[%d]: a system message after the first; this built-in chat format takes "
			              "one only first", i);
		(strcmp(roles[i], "user") ? chat_assistant : chat_user)(f, b, texts[i]);
	}
	if (gen)
		chat_gen(f, b);
	return b->oom ? seterr(err, len, "out of memory") : 0;
}

char *chat_prompt(const ChatFmt *f, const char *system, const char *text, size_t *n, char *err, size_t len)
{
	ChatBuf b = {0};
	addn(&b, "", 0);
	if (f->jinja) {
		if (chat_render_jinja(f, &b, system, &text, 1, 1, err, len)) {
			chat_buf_free(&b);
			return NULL;
		}
	} else
		chat_render(f, &b, system, &text, 1, 1);
	if (b.oom) {
		chat_buf_free(&b);
		seterr(err, len, "out of memory");
		return NULL;
	}
	*n = b.n;
	return b.s;
}

void chat_free(ChatFmt *f)
{
	jj_free(f->jinja);
	free(f->bos), free(f->eos);
	f->jinja = NULL, f->bos = f->eos = NULL;
}

int chat_is_eot(const ChatFmt *f, int32_t id)
{
	for (int i = 0; i < 4; i++)
		if (id >= 0 && f->eot[i] == id)
			return 1;
	return 0;
}

/* ---- which family ---- */

int chat_by_name(ChatFmt *f, const char *name, char *err, size_t len)
{
	*f = (ChatFmt){.source = "--chat-template", .eot = {-1, -1, -1, -1}};
	for (int i = 0; i < CHAT_NFAMILY; i++)
		if (!strcmp(name, fam_name[i])) {
			f->family = i;
			/* By name, chatml is Qwen3's (thinking switch) and the GLMs have theirs. */
			f->think_switch = i == CHAT_GLM4 || i == CHAT_GLM5 || i == CHAT_CHATML;
			return 0;
		}
	return seterr(err, len, "--chat-template: unknown name '%s' (%s)", name, chat_names);
}

static int has(const char *s, const char *sub)
{
	return strstr(s, sub) != NULL;
}

/* Today's date as Python's strftime("%d %b %Y") writes it in the C locale. */
static void today(char *buf, size_t n)
{
	time_t t = time(NULL);
	struct tm tm;
	if (!localtime_r(&t, &tm) || !strftime(buf, n, "%d %b %Y", &tm))
		snprintf(buf, n, "26 Jul 2024");
}

int chat_detect(ChatFmt *f, const char *tmpl, const char *arch, const char *what, char *err, size_t len)
{
	*f = (ChatFmt){.eot = {-1, -1, -1, -1}};
	if (tmpl && *tmpl) {
		f->source = "chat template";
		if (has(tmpl, "<|im_start|>")) {
			f->family = CHAT_CHATML;
			f->think_switch = has(tmpl, "enable_thinking");
			f->default_system = has(tmpl, QWEN25_SYSTEM)                     ? QWEN25_SYSTEM :
			                    has(tmpl, QWEN2_SYSTEM "<|im_end|>") ? QWEN2_SYSTEM :
			                                                                     NULL;
		} else if (has(tmpl, DS_USER) && has(tmpl, DS_ASSISTANT)) {
			if (has(tmpl, DS_ASSISTANT "<think>"))
				return seterr(err, len, "%s: a DeepSeek-R1 chat template (the answer opens with <think>), which is "
				              "not one of the supported forms; give --chat-template NAME (%s)", what, chat_names);
			f->family = CHAT_DEEPSEEK3;
			f->ds_think = has(tmpl, DS_ASSISTANT "</think>");
		} else if (has(tmpl, "<|start_header_id|>") && has(tmpl, "<|end_header_id|>")) {
			f->family = CHAT_LLAMA3;
			f->llama_date = has(tmpl, "Cutting Knowledge Date");
			if (has(tmpl, "strftime_now"))
				today(f->date, sizeof f->date);
			else
				snprintf(f->date, sizeof f->date, "26 Jul 2024");
		} else if (has(tmpl, "[gMASK]<sop>")) {
			if (has(tmpl, "clear_thinking"))
				f->family = CHAT_GLM5;
			else if (has(tmpl, "<think></think>"))
				f->family = CHAT_GLM4;
			else
				return seterr(err, len, "%s: a GLM chat template of neither the GLM-4.5/4.6 nor the GLM-4.7/5 kind; "
				              "give --chat-template glm4 or glm5 if one fits", what);
			f->think_switch = 1;
		} else
			return seterr(err, len, "%s: the chat template is none of the supported families; give "
			              "--chat-template NAME (%s)", what, chat_names);
		return 0;
	}
	static const struct {
		const char *arch;
		int family;
	} by_arch[] = {
		{"glm-dsa", CHAT_GLM5},        {"glm_moe_dsa", CHAT_GLM5}, {"glm4_moe_lite", CHAT_GLM5},
		{"deepseek_v3", CHAT_DEEPSEEK3}, {"qwen2", CHAT_CHATML},     {"qwen2moe", CHAT_CHATML},
		{"qwen2_moe", CHAT_CHATML},    {"qwen3", CHAT_CHATML},     {"qwen3moe", CHAT_CHATML},
		{"qwen3_moe", CHAT_CHATML},    {"llama", CHAT_LLAMA3},
	};
	for (size_t i = 0; arch && i < sizeof by_arch / sizeof *by_arch; i++)
		if (!strcmp(arch, by_arch[i].arch)) {
			f->family = by_arch[i].family;
			f->source = "architecture";
			f->think_switch = f->family == CHAT_GLM5 || !strncmp(arch, "qwen3", 5);
			return 0;
		}
	if (arch && (!strcmp(arch, "glm4moe") || !strcmp(arch, "glm4_moe")))
		return seterr(err, len, "%s: no chat template, and architecture '%s' is GLM-4.5/4.6 (glm4) or GLM-4.7 "
		              "(glm5); give --chat-template glm4 or glm5", what, arch);
	return seterr(err, len, "%s: no chat template%s%s%s to tell the chat format from; give --chat-template NAME (%s)",
	              what, arch ? " and architecture '" : "", arch ? arch : "", arch ? "' is not one" : "", chat_names);
}

/* ---- metadata ---- */

/* The whole file as a string, or NULL. */
static char *read_text(const char *path)
{
	FILE *fp = fopen(path, "rb");
	if (!fp)
		return NULL;
	char *s = NULL;
	if (!fseek(fp, 0, SEEK_END)) {
		long n = ftell(fp);
		if (n >= 0 && !fseek(fp, 0, SEEK_SET) && (s = malloc((size_t)n + 1))) {
			if (fread(s, 1, (size_t)n, fp) != (size_t)n) {
				free(s);
				s = NULL;
			} else
				s[n] = 0;
		}
	}
	fclose(fp);
	return s;
}

/* dir/name as a malloc'd path. */
static char *join(const char *dir, const char *name)
{
	size_t n = strlen(dir) + strlen(name) + 2;
	char *p = malloc(n);
	if (p)
		snprintf(p, n, "%s/%s", dir, name);
	return p;
}

/* An optional JSON file of an HF directory: NULL with *bad = 0 when absent, *bad = 1 (message set) when
** present but unreadable. */
static json_t *load_json(const char *dir, const char *name, int *bad, char *err, size_t len)
{
	char *p = join(dir, name);
	json_t *j = NULL;
	*bad = 0;
	if (p && !access(p, F_OK)) {
		json_error_t je;
		if (!(j = json_load_file(p, 0, &je)))
			*bad = 1, seterr(err, len, "%s: line %d: %s", p, je.line, je.text);
	}
	free(p);
	return j;
}

/* tokenizer_config.json's chat_template: a string, or a list of {name, template} (the "default" one). */
static char *config_template(const json_t *cfg)
{
	const json_t *t = json_object_get(cfg, "chat_template");
	if (json_is_string(t))
		return strdup(json_string_value(t));
	size_t i;
	const json_t *e, *first = NULL;
	json_array_foreach(t, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		if (!first)
			first = e;
		if (name && !strcmp(name, "default"))
			first = e;
	}
	const char *s = json_string_value(json_object_get(first, "template"));
	return s ? strdup(s) : NULL;
}

int chat_meta(const char *path, char **tmpl, char **arch, char *err, size_t len)
{
	*tmpl = *arch = NULL;
	struct stat st;
	if (stat(path, &st))
		return seterr(err, len, "%s: %s", path, strerror(errno));
	size_t pl = strlen(path);
	if (S_ISDIR(st.st_mode) || (pl > 5 && !strcmp(path + pl - 5, ".json"))) {
		char *dir = strdup(path);
		if (!dir)
			return seterr(err, len, "out of memory");
		if (!S_ISDIR(st.st_mode)) {
			char *slash = strrchr(dir, '/');
			if (slash)
				*slash = 0;
			else
				strcpy(dir, ".");
		}
		/* Newer checkpoints keep the template in its own file; older ones in tokenizer_config.json. */
		char *jp = join(dir, "chat_template.jinja");
		*tmpl = jp ? read_text(jp) : NULL;
		free(jp);
		int bad;
		json_t *cfg = *tmpl ? NULL : load_json(dir, "tokenizer_config.json", &bad, err, len);
		if (!*tmpl && !cfg && bad)
			return free(dir), -1;
		if (cfg)
			*tmpl = config_template(cfg);
		json_decref(cfg);
		json_t *conf = load_json(dir, "config.json", &bad, err, len);
		free(dir);
		if (bad)
			return free(*tmpl), *tmpl = NULL, -1;
		const char *mt = json_string_value(json_object_get(conf, "model_type"));
		if (mt)
			*arch = strdup(mt);
		json_decref(conf);
		return 0;
	}
	Gguf g;
	if (gguf_open(&g, path, err, len))
		return -1;
	const char *t = gguf_get_str(&g, "tokenizer.chat_template"), *a = gguf_get_str(&g, "general.architecture");
	*tmpl = t ? strdup(t) : NULL;
	*arch = a ? strdup(a) : NULL;
	gguf_close(&g);
	return 0;
}

/* The special tokens the live rendering of f uses; returns the count. */
static int needed(const ChatFmt *f, const char **out)
{
	int k = 0;
	switch (f->family) {
	case CHAT_GLM4:
	case CHAT_GLM5:
		out[k++] = "[gMASK]", out[k++] = "<sop>", out[k++] = "<|system|>", out[k++] = "<|user|>";
		out[k++] = "<|assistant|>";
		if (f->family == CHAT_GLM5 || f->no_think)
			out[k++] = "<think>", out[k++] = "</think>";
		break;
	case CHAT_DEEPSEEK3:
		out[k++] = DS_BOS, out[k++] = DS_USER, out[k++] = DS_ASSISTANT, out[k++] = DS_EOS;
		if (f->ds_think)
			out[k++] = "</think>";
		break;
	case CHAT_CHATML:
		out[k++] = "<|im_start|>", out[k++] = "<|im_end|>";
		if (f->no_think)
			out[k++] = "<think>", out[k++] = "</think>";
		break;
	default:
		out[k++] = "<|begin_of_text|>", out[k++] = "<|start_header_id|>", out[k++] = "<|end_header_id|>";
		out[k++] = "<|eot_id|>";
		break;
	}
	return k;
}

/* The text of token id (control tokens included), malloc'd; NULL when id < 0. */
static char *token_text(const Tok *tk, int32_t id)
{
	size_t n;
	const char *p = id >= 0 ? tok_piece(tk, id, 1, &n) : NULL;
	char *s = p ? malloc(n + 1) : NULL;
	if (s)
		memcpy(s, p, n), s[n] = 0;
	return s;
}

/*
** The special tokens a template writes must be special in the vocabulary, or they would be encoded as
** plain text: a probe conversation is rendered and every "<|...|>" and "<｜...｜>" in it looked up. A
** template that refuses the probe is not checked here (the real conversation will report its error).
*/
static int check_specials(const ChatFmt *f, const char *what, const Tok *tk, char *err, size_t len)
{
	static const char *const turns[] = {"U", "A", "U"};
	ChatBuf b = {0};
	char e2[8];
	if (chat_render_jinja(f, &b, "S", turns, 3, 1, e2, sizeof e2) && chat_render_jinja(f, &b, NULL, turns, 3, 1, e2, sizeof e2)) {
		chat_buf_free(&b);
		return 0;
	}
	static const char *const open[] = {"<|", "<\xef\xbd\x9c"}, *const close[] = {"|>", "\xef\xbd\x9c>"};
	int rc = 0;
	for (int k = 0; k < 2 && !rc; k++)
		for (const char *p = b.s; !rc && (p = strstr(p, open[k])); p++) {
			const char *q = strstr(p + strlen(open[k]), close[k]);
			if (!q || q - p > 64 || memchr(p, ' ', (size_t)(q - p)) || memchr(p, '\n', (size_t)(q - p)))
				continue;
			size_t n = (size_t)(q - p) + strlen(close[k]);
			int32_t id = tok_find(tk, p, n);
			int ty = tok_type(tk, id);
			if (id < 0 || (ty != TOK_CONTROL && ty != TOK_USER_DEFINED))
				rc = seterr(err, len, "%s writes the special token '%.*s', which this vocabulary %s; give the model's "
				            "tokenizer (--tokenizer) or another --chat-template", what, (int)n, p,
				            id < 0 ? "lacks" : "has only as ordinary text");
		}
	chat_buf_free(&b);
	return rc;
}

/* f from the template text tmpl (what: where it came from, for messages): parsed as Jinja; the family it
** resembles, if any, only lends its end-of-turn tokens. */
static int setup_jinja(ChatFmt *f, const char *tmpl, const char *what, const char *source, const Tok *tk, char *err,
                       size_t len)
{
	ChatFmt fam;
	char e2[8];
	int known = !chat_detect(&fam, tmpl, NULL, what, e2, sizeof e2);
	*f = (ChatFmt){.family = known ? fam.family : -1, .source = source, .eot = {-1, -1, -1, -1},
	               .think_switch = has(tmpl, "enable_thinking")};
	const char *base = strrchr(what, '/');
	char name[64];
	snprintf(name, sizeof name, "%s", base ? base + 1 : what);
	if (jj_parse(&f->jinja, tmpl, strlen(tmpl), name, err, len))
		return -1;
	f->bos = token_text(tk, tok_bos(tk));
	f->eos = token_text(tk, tok_eos(tk));
	time_t t = time(NULL);
	if (!localtime_r(&t, &f->now))
		memset(&f->now, 0, sizeof f->now);
	if (check_specials(f, what, tk, err, len)) {
		chat_free(f);
		return -1;
	}
	return 0;
}

int chat_setup(ChatFmt *f, const char *path, const char *name, int no_think, const Tok *tk, char *err, size_t len)
{
	int family = 0;
	for (int i = 0; name && i < CHAT_NFAMILY; i++)
		family |= !strcmp(name, fam_name[i]);
	if (family) {
		if (chat_by_name(f, name, err, len))
			return -1;
	} else if (name) { /* a template file */
		char *tmpl = read_text(name);
		if (!tmpl)
			return seterr(err, len, "--chat-template: '%s' is neither a chat format (%s) nor a readable template "
			              "file: %s", name, chat_names, strerror(errno));
		int rc = setup_jinja(f, tmpl, name, "--chat-template", tk, err, len);
		free(tmpl);
		if (rc)
			return -1;
	} else {
		char *tmpl, *arch;
		if (chat_meta(path, &tmpl, &arch, err, len))
			return -1;
		int rc;
		if (tmpl && *tmpl) {
			char what[600];
			snprintf(what, sizeof what, "%s chat template", path);
			rc = setup_jinja(f, tmpl, what, "chat template", tk, err, len);
		} else
			rc = chat_detect(f, NULL, arch, path, err, len);
		free(tmpl), free(arch);
		if (rc)
			return -1;
	}
	if (no_think && !f->think_switch) {
		const char *what = f->jinja ? "template's" : fam_name[f->family];
		chat_free(f);
		return seterr(err, len, "--no-think: the %s chat format (from the %s) has no thinking switch%s", what,
		              f->source, f->jinja ? " (it does not read enable_thinking)" : "");
	}
	f->no_think = no_think;
	const char *need[8];
	int k = f->jinja ? 0 : needed(f, need);
	for (int i = 0; i < k; i++) {
		int32_t id = tok_find(tk, need[i], strlen(need[i]));
		int ty = tok_type(tk, id);
		if (id < 0 || (ty != TOK_CONTROL && ty != TOK_USER_DEFINED))
			return seterr(err, len, "%s: the %s chat format (from the %s) needs the special token '%s', which this "
			              "vocabulary %s; give --chat-template NAME (%s) for another", path, fam_name[f->family],
			              f->source, need[i], id < 0 ? "lacks" : "has only as ordinary text", chat_names);
	}
	static const char *const eot[CHAT_NFAMILY][4] = {
		{"<|user|>", "<|observation|>", "<|endoftext|>"},
		{"<|user|>", "<|observation|>", "<|endoftext|>"},
		{DS_EOS},
		{"<|im_end|>", "<|endoftext|>"},
		{"<|eot_id|>", "<|eom_id|>", "<|end_of_text|>"},
	};
	for (int i = 0; i < 4 && f->family >= 0; i++)
		f->eot[i] = eot[f->family][i] ? tok_find(tk, eot[f->family][i], strlen(eot[f->family][i])) : -1;
	return 0;
}

/* ---- the session ---- */

/*
** The answer so far (b) and how much of it is printed (*shown): with a stop string, print up to its
** first occurrence and hold back the last len(stop) - 1 bytes until they cannot start one. Returns 1
** when the stop string was reached; stop == NULL prints everything held.
*/
static int show(ChatBuf *b, size_t *shown, const char *stop)
{
	size_t sl = stop ? strlen(stop) : 0, upto = b->n;
	int hit = 0;
	if (sl) {
		char *at = memmem(b->s + *shown, b->n - *shown, stop, sl);
		if (at)
			upto = (size_t)(at - b->s), hit = 1;
		else
			upto = b->n >= sl - 1 + *shown ? b->n - (sl - 1) : *shown;
	}
	if (upto > *shown)
		fwrite(b->s + *shown, 1, upto - *shown, stdout);
	*shown = upto;
	return hit;
}

/* "ids 1 2 3" on stderr, for --stats. */
static void print_ids(const int32_t *ids, long n)
{
	fputs("ids", stderr);
	for (long i = 0; i < n; i++)
		fprintf(stderr, " %d", ids[i]);
}

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int chat_read_message(FILE *in, ChatBuf *b, const char *prompt)
{
	static const char q3[] = "\"\"\"";
	char *line = NULL;
	size_t cap = 0;
	ssize_t r;
	int multi = 0, lines = 0, done = 0;
	b->n = 0;
	addn(b, "", 0);
	while (!done) {
		if (multi && prompt) {
			fputs(prompt, stdout);
			fflush(stdout);
		}
		if ((r = getline(&line, &cap, in)) < 0)
			break;
		while (r > 0 && (line[r - 1] == '\n' || line[r - 1] == '\r'))
			line[--r] = 0;
		const char *text = line;
		size_t n = (size_t)r;
		if (!multi) {
			if (!n)
				continue;
			if (n < 3 || memcmp(line, q3, 3)) { /* a one-line message */
				addn(b, line, n);
				lines = done = 1;
				break;
			}
			multi = 1, text += 3, n -= 3;
			if (!n)
				continue;
		}
		if (n >= 3 && !memcmp(text + n - 3, q3, 3))
			n -= 3, done = 1;
		if (done && !n)
			break;
		if (lines++)
			addn(b, "\n", 1);
		addn(b, text, n);
	}
	free(line);
	return lines && !b->oom ? 0 : -1;
}

/* Marks the last answer in a re-rendered conversation (chat_session with a Jinja template). */
#define ANSWER_MARK "GLMCPREVIOUSANSWERMARK"

/*
** What turn number nh / 2 feeds, into b: with a family its pieces; with a template the whole first turn,
** then what the template puts after the previous answer (hist: the user messages and answers so far).
*/
static int turn_text(const ChatSession *s, char *const *hist, int nh, const char *user, ChatBuf *b, char *err,
                     size_t len)
{
	const ChatFmt *f = s->fmt;
	if (!f->jinja) {
		if (!nh)
			chat_begin(f, b, s->system);
		else
			chat_close(f, b);
		chat_user(f, b, user);
		chat_gen(f, b);
		return b->oom ? seterr(err, len, "out of memory") : 0;
	}
	if (!nh)
		return chat_render_jinja(f, b, s->system, &user, 1, 1, err, len);
	const char **t = malloc(sizeof *t * (size_t)(nh + 1));
	if (!t)
		return seterr(err, len, "out of memory");
	for (int i = 0; i < nh - 1; i++)
		t[i] = hist[i];
	t[nh - 1] = ANSWER_MARK, t[nh] = user;
	ChatBuf all = {0};
	int rc = chat_render_jinja(f, &all, s->system, t, nh + 1, 1, err, len);
	free(t);
	const char *at = rc ? NULL : strstr(all.s, ANSWER_MARK);
	if (!rc && (!at || strstr(at + 1, ANSWER_MARK)))
		rc = seterr(err, len, "the chat template does not show a past answer unchanged, so turn %d cannot be appended "
		            "to the conversation; give --chat-template NAME (%s)", nh / 2 + 1, chat_names);
	if (!rc)
		addn(b, at + strlen(ANSWER_MARK), all.n - (size_t)(at - all.s) - strlen(ANSWER_MARK));
	chat_buf_free(&all);
	return rc;
}

/* Append a malloc'd copy of s[0..n) to the history; -1 when out of memory. */
static int remember(char ***hist, int *nh, const char *s, size_t n)
{
	char **h = realloc(*hist, sizeof *h * (size_t)(*nh + 1));
	if (!h)
		return -1;
	*hist = h;
	if (!(h[*nh] = malloc(n + 1)))
		return -1;
	memcpy(h[*nh], s, n);
	h[(*nh)++][n] = 0;
	return 0;
}

/* What a chat session carries from turn to turn. */
typedef struct {
	long pos, turn, n_pre, n_dec, acap;
	int full, nh;
	char **hist;                 /* user messages and answers as shown, for re-rendering a template */
	int32_t *ans;                /* the current answer's ids (acap of room) */
	int32_t pending;             /* the last token of an answer cut short, shown but not fed (-1: none) */
	double t_pre, t_dec;
} ChatState;

/*
** The ids turn st->turn + 1 feeds for user message msg into *ids (*nids of them): the template's text for
** it, after the cut answer's last token when there is one. 1 when the context cannot hold them (said on
** stderr, or an error on the first turn), -1 on an error, 0 to go on.
*/
static int turn_ids(const ChatSession *s, ChatState *st, const ChatBuf *msg, int32_t **ids, size_t *nids, char *err,
                    size_t len)
{
	ChatBuf b = {0};
	*ids = NULL, *nids = 0;
	if (turn_text(s, st->hist, st->nh, msg->s, &b, err, len)) {
		chat_buf_free(&b);
		return -1;
	}
	if (b.oom || tok_encode(s->tk, b.s, b.n, 0, 1, ids, nids) || remember(&st->hist, &st->nh, msg->s, msg->n)) {
		chat_buf_free(&b);
		return seterr(err, len, "out of memory encoding turn %ld", st->turn + 1);
	}
	chat_buf_free(&b);
	if (st->pending >= 0) { /* the cut answer's last token goes in first, so the cache holds what was shown */
		int32_t *p = realloc(*ids, sizeof *p * (*nids + 1));
		if (!p)
			return seterr(err, len, "out of memory");
		memmove(p + 1, p, sizeof *p * *nids);
		p[0] = st->pending, *ids = p, (*nids)++;
	}
	if (st->pos + (long)*nids < s->max_seq)
		return 0;
	if (st->turn == 0) /* nothing could be answered: an error, not an empty chat */
		return seterr(err, len, "the context is full: turn 1 needs %zu positions, %ld are available (--max-seq)", *nids,
		              s->max_seq);
	fprintf(stderr, "glmrun: the context is full: turn %ld needs %zu positions, %ld of %ld are left (--max-seq); the "
	        "chat ends here\n", st->turn + 1, *nids, s->max_seq - st->pos, s->max_seq);
	return 1;
}

/*
** Stream the answer that starts with tok (sampled, not yet fed; feeding it takes position st->pos) until
** end of turn, --stop, -n, Ctrl-C or a full context; records it in the history. *why says which ended it.
*/
static int answer(const ChatSession *s, ChatState *st, int32_t tok, long *k, const char **why, char *err, size_t len)
{
	static const char eot[] = "end of turn", stop[] = "stop string";
	TokStream ts;
	tok_stream_init(&ts, s->tk, 0);
	ChatBuf said = {0};
	size_t shown = 0;
	long steps = 0;
	int rc = 0;
	*k = 0, *why = NULL;
	for (;;) {
		if (*k == st->acap) {
			int32_t *p = realloc(st->ans, sizeof *p * (size_t)(st->acap = 2 * st->acap + 64));
			if (!p) {
				rc = seterr(err, len, "out of memory");
				break;
			}
			st->ans = p;
		}
		st->ans[(*k)++] = tok;
		if (!s->ignore_eos && (tok_is_eog(s->tk, tok) || chat_is_eot(s->fmt, tok))) {
			*why = eot;
			break;
		}
		size_t pl;
		const char *piece = tok_stream_put(&ts, tok, &pl);
		if (piece && pl)
			addn(&said, piece, pl);
		if (said.oom) {
			rc = seterr(err, len, "out of memory");
			break;
		}
		if (show(&said, &shown, s->stop)) {
			*why = stop;
			break;
		}
		fflush(stdout);
		if (s->n && *k >= s->n)
			*why = "-n";
		else if (*s->sigs)
			*why = "Ctrl-C";
		else if (st->pos >= s->max_seq)
			*why = "context full", st->full = 1;
		if (*why)
			break;
		double d0 = now_s();
		if (engine_decode(s->e, 1, &tok, NULL, err, len)) {
			rc = -1;
			break;
		}
		st->t_dec += now_s() - d0, steps++, st->pos++;
	}
	if (!rc) {
		size_t pl;
		const char *rest = tok_stream_flush(&ts, &pl);
		if (*why && *why != stop) {
			if (rest && pl)
				addn(&said, rest, pl);
			show(&said, &shown, NULL);
		}
		fputc('\n', stdout);
		fflush(stdout);
		/* an answer that did not end with its end-of-turn token has its last token still to feed */
		st->pending = *why && *why != eot ? tok : -1;
		if (said.oom || remember(&st->hist, &st->nh, said.s ? said.s : "", shown))
			rc = seterr(err, len, "out of memory");
	}
	tok_stream_free(&ts);
	chat_buf_free(&said);
	st->n_dec += steps;
	return rc;
}

int chat_session(const ChatSession *s, FILE *in, char *err, size_t len)
{
	int tty = isatty(fileno(in)), rc = 0;
	ChatBuf msg = {0};
	ChatState st = {.pending = -1};
	for (;;) {
		if (tty) {
			fputs("> ", stdout);
			fflush(stdout);
		}
		if (*s->sigs || chat_read_message(in, &msg, tty ? "... " : NULL)) { /* EOF, or Ctrl-C while waiting */
			if (tty)
				fputc('\n', stdout);
			break;
		}
		int32_t *ids, tok;
		size_t nids;
		if ((rc = turn_ids(s, &st, &msg, &ids, &nids, err, len))) {
			free(ids);
			rc = rc < 0 ? -1 : 0;
			break;
		}
		*s->sigs = 0;
		double t0 = now_s();
		if (engine_prefill(s->e, 0, ids, (int64_t)nids, (int32_t)st.pos, &tok, NULL, err, len)) {
			free(ids);
			rc = -1;
			break;
		}
		st.t_pre += now_s() - t0, st.n_pre += (long)nids;
		if (s->stats) {
			fprintf(stderr, "stats: chat turn %ld: prompt %zu tokens at positions %ld-%ld: ", st.turn + 1, nids, st.pos,
			        st.pos + (long)nids - 1);
			print_ids(ids, (long)nids);
			fputc('\n', stderr);
		}
		free(ids);
		st.pos += (long)nids;
		long k;
		const char *why;
		if ((rc = answer(s, &st, tok, &k, &why, err, len)))
			break;
		if (s->stats) {
			fprintf(stderr, "stats: chat turn %ld: answer %ld tokens (%s): ", st.turn + 1, k, why);
			print_ids(st.ans, k);
			fprintf(stderr, "; the cache holds %ld positions\n", st.pos);
		}
		st.turn++;
		if (st.full) {
			fprintf(stderr, "glmrun: the context is full (%ld positions, --max-seq); the chat ends here\n",
			        s->max_seq);
			break;
		}
		if (*s->sigs >= 2)
			break;
		*s->sigs = 0;
	}
	chat_buf_free(&msg);
	for (int i = 0; i < st.nh; i++)
		free(st.hist[i]);
	free(st.hist);
	free(st.ans);
	if (!rc)
		fprintf(stderr, "glmrun: chat of %ld turn%s: prefill %ld tokens at %.1f tok/s, decode %ld tokens at %.1f "
		        "tok/s\n", st.turn, st.turn == 1 ? "" : "s", st.n_pre, st.t_pre > 0 ? (double)st.n_pre / st.t_pre : 0.0,
		        st.n_dec, st.t_dec > 0 ? (double)st.n_dec / st.t_dec : 0.0);
	return rc;
}
