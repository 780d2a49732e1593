/*
** tests/test_chat.c — chat templates (runtime/cli/chat.h).
**
** - Each family renders a two-turn conversation with a system prompt exactly as its official template
**   does (the expected strings were worked out by hand from those templates, as runtime/cli/chat.c cites
**   them, with transformers' trim_blocks/lstrip_blocks rules): GLM-4.5/4.6 and GLM-4.7/5 with thinking on
**   and off, DeepSeek-V3 and V3.1, Qwen3 and Qwen2.5 (default system prompt), Llama 3 and 3.1 (date
**   header); past answers lose their reasoning where the template drops it.
** - A live session's pieces (begin, user, gen, the answer, close, user, gen) add up to the same text as
**   the rendered history, so appending a turn to the KV cache equals re-prefilling the conversation.
** - The family is recognised from template texts (distinctive substrings) and from architectures;
**   unknown or ambiguous ones are refused in one line that lists the names.
** - Metadata is read from a GGUF file and from Hugging Face directories (chat_template.jinja,
**   tokenizer_config.json as a string or a list of named templates, config.json model_type).
** - chat_setup checks the special tokens against a vocabulary and finds the end-of-turn ids; a chat template
**   in the metadata, or --chat-template FILE, runs as Jinja (enable_thinking=false with --no-think); a
**   broken template or an unknown name is refused in one line.
** - chat_read_message: a message per line, or several lines between lines of """.
*/
#include "chat.h"
#include "check.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[64];

/* Non-printing bytes escaped, for messages (static buffer, two at a time). */
static const char *esc(const char *s)
{
	static char buf[2][4096];
	static int k;
	k ^= 1;
	char *o = buf[k];
	size_t j = 0;
	for (; s && *s && j + 5 < sizeof buf[k]; s++)
		j += (size_t)(*s == '\n' ? snprintf(o + j, 5, "\\n") : snprintf(o + j, 5, "%c", *s));
	o[j] = 0;
	return o;
}

static ChatFmt fmt(int family)
{
	return (ChatFmt){.family = family, .think_switch = family == CHAT_GLM4 || family == CHAT_GLM5,
	                 .eot = {-1, -1, -1, -1}};
}

/* Render [system] user assistant user + generation prompt and compare. */
static void expect(const char *name, const ChatFmt *f, const char *system, const char *a1, const char *want)
{
	const char *turns[] = {"Hello", a1, "Who are you?"};
	ChatBuf b = {0};
	chat_render(f, &b, system, turns, 3, 1);
	check(!b.oom && b.s && !strcmp(b.s, want), name, "got\n  %s\nwant\n  %s", esc(b.s), esc(want));
	chat_buf_free(&b);
}

static void test_render(void)
{
	const char *S = "You are terse.";
	ChatFmt f = fmt(CHAT_GLM4);
	expect("glm4: GLM-4.5/4.6 two turns, reasoning of a past answer dropped", &f, S, "<think>plan</think>\n  Hi there ",
	       "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nHello<|assistant|>\n<think></think>\nHi there"
	       "<|user|>\nWho are you?<|assistant|>");
	f.no_think = 1;
	expect("glm4: enable_thinking off adds /nothink and an empty think block", &f, S, "Hi there",
	       "[gMASK]<sop><|system|>\nYou are terse.<|user|>\nHello/nothink<|assistant|>\n<think></think>\nHi there"
	       "<|user|>\nWho are you?/nothink<|assistant|>\n<think></think>");
	f = fmt(CHAT_GLM5);
	expect("glm5: GLM-4.7/5 two turns, thinking on", &f, S, "<think>plan</think>Hi there",
	       "[gMASK]<sop><|system|>You are terse.<|user|>Hello<|assistant|></think>Hi there"
	       "<|user|>Who are you?<|assistant|><think>");
	f.no_think = 1;
	expect("glm5: thinking off", &f, NULL, "Hi there",
	       "[gMASK]<sop><|user|>Hello<|assistant|></think>Hi there<|user|>Who are you?<|assistant|></think>");
	f = fmt(CHAT_DEEPSEEK3);
	expect("deepseek3: DeepSeek-V3 two turns", &f, S, "Hi there",
	       "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hello<｜Assistant｜>Hi there<｜end▁of▁sentence｜>"
	       "<｜User｜>Who are you?<｜Assistant｜>");
	expect("deepseek3: DeepSeek-V3 without a system prompt", &f, NULL, "Hi there",
	       "<｜begin▁of▁sentence｜><｜User｜>Hello<｜Assistant｜>Hi there<｜end▁of▁sentence｜>"
	       "<｜User｜>Who are you?<｜Assistant｜>");
	f.ds_think = 1;
	expect("deepseek3: DeepSeek-V3.1 (</think> after <｜Assistant｜>, past reasoning dropped)", &f, S,
	       "<think>plan</think>Hi there",
	       "<｜begin▁of▁sentence｜>You are terse.<｜User｜>Hello<｜Assistant｜></think>Hi there<｜end▁of▁sentence｜>"
	       "<｜User｜>Who are you?<｜Assistant｜></think>");
	f = fmt(CHAT_CHATML);
	f.think_switch = 1;
	expect("chatml: Qwen3 two turns, past reasoning dropped", &f, S, "<think>\nplan\n</think>\n\nHi there",
	       "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
	       "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
	       "<|im_start|>assistant\n");
	f.no_think = 1;
	expect("chatml: Qwen3 thinking off", &f, NULL, "Hi there",
	       "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n"
	       "<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
	f = fmt(CHAT_CHATML);
	f.default_system = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
	expect("chatml: Qwen2.5 default system prompt; its answers keep their text", &f, NULL, "<think>x</think>Hi",
	       "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
	       "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n<think>x</think>Hi<|im_end|>\n"
	       "<|im_start|>user\nWho are you?<|im_end|>\n<|im_start|>assistant\n");
	expect("chatml: a given system prompt replaces the default", &f, S, "Hi there",
	       "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n"
	       "<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you?<|im_end|>\n"
	       "<|im_start|>assistant\n");
	f = fmt(CHAT_LLAMA3);
	expect("llama3: Llama 3 two turns, texts trimmed", &f, " You are terse.\n", "  Hi there\n",
	       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
	       "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
	       "<|start_header_id|>assistant<|end_header_id|>\n\n");
	f.llama_date = 1;
	snprintf(f.date, sizeof f.date, "26 Jul 2024");
	expect("llama3: Llama 3.1 opens with the knowledge-date system message even without a system prompt", &f,
	       NULL, "Hi there",
	       "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
	       "Today Date: 26 Jul 2024\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>"
	       "<|start_header_id|>assistant<|end_header_id|>\n\nHi there<|eot_id|>"
	       "<|start_header_id|>user<|end_header_id|>\n\nWho are you?<|eot_id|>"
	       "<|start_header_id|>assistant<|end_header_id|>\n\n");

	/* -p's single turn */
	f = fmt(CHAT_CHATML);
	size_t n;
	char *p = chat_prompt(&f, "Be brief.", "Hi", &n, NULL, 0);
	const char *want = "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
	check(p && n == strlen(want) && !strcmp(p, want), "chat_prompt: one user turn with a system prompt", "got %s",
	      esc(p));
	free(p);
}

/* begin + user + gen + answer + close + user + gen == render(history) + gen, for an answer the model would
** give in the template's own form (no reasoning, or thinking off). */
static void test_live(void)
{
	struct {
		const char *name;
		ChatFmt f;
		const char *answer; /* what the model generates after the generation prompt */
	} c[] = {
		{"glm4 (thinking off)", fmt(CHAT_GLM4), "\nHi there"}, {"glm5 (thinking off)", fmt(CHAT_GLM5), "Hi there"},
		{"deepseek3", fmt(CHAT_DEEPSEEK3), "Hi there"},        {"deepseek3 V3.1", fmt(CHAT_DEEPSEEK3), "Hi there"},
		{"chatml", fmt(CHAT_CHATML), "Hi there"},              {"llama3", fmt(CHAT_LLAMA3), "Hi there"},
	};
	c[0].f.no_think = c[1].f.no_think = 1;
	c[3].f.ds_think = 1;
	for (size_t i = 0; i < sizeof c / sizeof *c; i++) {
		char live[1024] = "";
		ChatBuf b = {0}, whole = {0};
		chat_begin(&c[i].f, &b, "Sys");
		chat_user(&c[i].f, &b, "Hello");
		chat_gen(&c[i].f, &b);
		strcat(live, b.s);
		strcat(live, c[i].answer);
		chat_buf_free(&b);
		chat_close(&c[i].f, &b);
		chat_user(&c[i].f, &b, "Who are you?");
		chat_gen(&c[i].f, &b);
		strcat(live, b.s);
		const char *turns[] = {"Hello", "Hi there", "Who are you?"};
		chat_render(&c[i].f, &whole, "Sys", turns, 3, 1);
		char name[128];
		snprintf(name, sizeof name, "%s: a turn appended to the live session equals the rendered history",
		         c[i].name);
		check(!b.oom && !whole.oom && !strcmp(live, whole.s), name, "live\n  %s\nrendered\n  %s", esc(live),
		      esc(whole.s));
		chat_buf_free(&b);
		chat_buf_free(&whole);
	}
}

static void test_detect(void)
{
	char err[512];
	ChatFmt f;
	struct {
		const char *tmpl, *arch;
		int family, think, ds, date;
		const char *sys;
	} ok[] = {
		{"[gMASK]<sop>{% if %}<|user|>\n{{ '\\n<think></think>' }}", "glm4moe", CHAT_GLM4, 1, 0, 0, NULL},
		{"[gMASK]<sop>{% if clear_thinking %}{{ '</think>' }}", "glm-dsa", CHAT_GLM5, 1, 0, 0, NULL},
		{"{{ bos_token }}{{'<｜User｜>' + c}}{{'<｜Assistant｜>'}}", "deepseek2", CHAT_DEEPSEEK3, 0, 0, 0, NULL},
		{"{{'<｜User｜>' + c}}{{'<｜Assistant｜></think>'}}", NULL, CHAT_DEEPSEEK3, 0, 1, 0, NULL},
		{"{{ '<|im_start|>' }}{% if enable_thinking is defined %}", "qwen3", CHAT_CHATML, 1, 0, 0, NULL},
		{"<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>", NULL,
		 CHAT_CHATML, 0, 0, 0, "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."},
		{"'<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n'", NULL, CHAT_CHATML, 0, 0, 0,
		 "You are a helpful assistant."},
		{"<|start_header_id|>{{ role }}<|end_header_id|>", "llama", CHAT_LLAMA3, 0, 0, 0, NULL},
		{"<|start_header_id|>x<|end_header_id|>Cutting Knowledge Date: December 2023", NULL, CHAT_LLAMA3, 0, 0, 1, NULL},
		{NULL, "glm-dsa", CHAT_GLM5, 1, 0, 0, NULL},
		{NULL, "glm_moe_dsa", CHAT_GLM5, 1, 0, 0, NULL},
		{NULL, "glm4_moe_lite", CHAT_GLM5, 1, 0, 0, NULL},
		{NULL, "deepseek_v3", CHAT_DEEPSEEK3, 0, 0, 0, NULL},
		{NULL, "qwen3_moe", CHAT_CHATML, 1, 0, 0, NULL},
		{NULL, "qwen2", CHAT_CHATML, 0, 0, 0, NULL},
		{"", "llama", CHAT_LLAMA3, 0, 0, 0, NULL},
	};
	for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
		char name[160];
		snprintf(name, sizeof name, "detect %zu: %s from %s", i, (const char *[]){"glm4", "glm5", "deepseek3", "chatml",
		         "llama3"}[ok[i].family], ok[i].tmpl && *ok[i].tmpl ? "the template" : "the architecture");
		int rc = chat_detect(&f, ok[i].tmpl, ok[i].arch, "w.gguf", err, sizeof err);
		check(!rc && f.family == ok[i].family && f.think_switch == ok[i].think && f.ds_think == ok[i].ds &&
		      f.llama_date == ok[i].date && (ok[i].sys ? f.default_system && !strcmp(f.default_system, ok[i].sys) :
		                                                 !f.default_system),
		      name, "rc %d (%s) family %d think %d ds %d date %d sys %s", rc, rc ? err : "", f.family, f.think_switch,
		      f.ds_think, f.llama_date, f.default_system ? f.default_system : "(none)");
	}
	check(!chat_detect(&f, "<|start_header_id|><|end_header_id|>Cutting Knowledge Date strftime_now", NULL, "w",
	                   err, sizeof err) && strlen(f.date) == 11 && f.date[2] == ' ' && f.date[6] == ' ',
	      "detect: Llama 3.2 templates get today's date", "date '%s'", f.date);
	struct {
		const char *tmpl, *arch, *want;
	} bad[] = {
		{"{% for m in messages %}{{ m.content }}{% endfor %}", "llama",
		 "w.gguf: the chat template is none of the supported families; give --chat-template NAME (glm4, glm5, "
		 "deepseek3, chatml, llama3)"},
		{"[gMASK]<sop><|user|>", NULL, "w.gguf: a GLM chat template of neither"},
		{"{{'<｜User｜>' + c + '<｜Assistant｜><think>\\n'}}", NULL, "w.gguf: a DeepSeek-R1 chat template"},
		{NULL, "glm4moe", "give --chat-template glm4 or glm5"},
		{NULL, "deepseek2", "w.gguf: no chat template and architecture 'deepseek2' is not one to tell the chat format "
		                    "from; give --chat-template NAME (glm4, glm5, deepseek3, chatml, llama3)"},
		{NULL, NULL, "w.gguf: no chat template to tell the chat format from"},
	};
	for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
		char name[96];
		snprintf(name, sizeof name, "detect refuses case %zu in one line", i);
		err[0] = 0;
		int rc = chat_detect(&f, bad[i].tmpl, bad[i].arch, "w.gguf", err, sizeof err);
		check(rc && strstr(err, bad[i].want) && !strchr(err, '\n'), name, "rc %d: '%s'", rc, err);
	}
	check(!chat_by_name(&f, "llama3", err, sizeof err) && f.family == CHAT_LLAMA3 && !f.llama_date, "by name: llama3",
	      "%s", err);
	check(chat_by_name(&f, "vicuna", err, sizeof err) &&
	          !strcmp(err, "--chat-template: unknown name 'vicuna' (glm4, glm5, deepseek3, chatml, llama3)"),
	      "by name: unknown names refused with the list", "'%s'", err);
}

static int write_file(const char *dir, const char *name, const char *text)
{
	char p[256];
	snprintf(p, sizeof p, "%s/%s", dir, name);
	FILE *fp = fopen(p, "wb");
	if (!fp)
		return -1;
	fputs(text, fp);
	return fclose(fp);
}

static void test_meta(void)
{
	char err[512], dir[128], *t, *a;
	snprintf(dir, sizeof dir, "%s/hf", tmp);
	mkdir(dir, 0700);
	write_file(dir, "config.json", "{\"model_type\": \"qwen3\"}");
	write_file(dir, "tokenizer_config.json", "{\"chat_template\": \"<|im_start|>{{ x }}\"}");
	int rc = chat_meta(dir, &t, &a, err, sizeof err);
	check(!rc && t && a && !strcmp(t, "<|im_start|>{{ x }}") && !strcmp(a, "qwen3"),
	      "meta: HF tokenizer_config.json chat_template and config.json model_type", "rc %d %s t=%s a=%s", rc,
	      rc ? err : "", t ? t : "-", a ? a : "-");
	free(t), free(a);
	write_file(dir, "tokenizer_config.json",
	           "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"D\"}]}");
	char tj[160];
	snprintf(tj, sizeof tj, "%s/tokenizer.json", dir);
	write_file(dir, "tokenizer.json", "{}");
	rc = chat_meta(tj, &t, &a, err, sizeof err);
	check(!rc && t && !strcmp(t, "D"), "meta: a list of named templates gives the default one (via tokenizer.json's dir)",
	      "rc %d t=%s", rc, t ? t : "-");
	free(t), free(a);
	write_file(dir, "chat_template.jinja", "[gMASK]<sop>clear_thinking");
	rc = chat_meta(dir, &t, &a, err, sizeof err);
	check(!rc && t && !strcmp(t, "[gMASK]<sop>clear_thinking"), "meta: chat_template.jinja comes first", "t=%s",
	      t ? t : "-");
	free(t), free(a);
	write_file(dir, "config.json", "{\"model_type\": ");
	rc = chat_meta(dir, &t, &a, err, sizeof err);
	check(rc && strstr(err, "config.json") && !strchr(err, '\n'), "meta: a broken config.json is named", "rc %d '%s'",
	      rc, err);

	char gp[160];
	snprintf(gp, sizeof gp, "%s/m.gguf", tmp);
	GgufWriter *w = gguf_writer_new();
	gguf_writer_str(w, "general.architecture", "glm-dsa");
	gguf_writer_str(w, "tokenizer.chat_template", "[gMASK]<sop>{{ clear_thinking }}");
	rc = gguf_writer_write(w, gp, err, sizeof err);
	gguf_writer_free(w);
	t = a = NULL;
	if (!rc)
		rc = chat_meta(gp, &t, &a, err, sizeof err);
	check(!rc && t && a && !strcmp(t, "[gMASK]<sop>{{ clear_thinking }}") && !strcmp(a, "glm-dsa"),
	      "meta: GGUF tokenizer.chat_template and general.architecture", "rc %d %s", rc, rc ? err : "");
	free(t), free(a);
	snprintf(gp, sizeof gp, "%s/none.gguf", tmp);
	rc = chat_meta(gp, &t, &a, err, sizeof err);
	check(rc && strstr(err, "none.gguf"), "meta: a missing file is named", "'%s'", err);
}

/* A tiny byte-level BPE with some chat tokens: <|im_start|> and <|im_end|> special, <think> ordinary. */
static void test_setup(void)
{
	char dir[128], path[160], err[512];
	snprintf(dir, sizeof dir, "%s/tk", tmp);
	mkdir(dir, 0700);
	write_file(dir, "tokenizer.json",
	           "{\"added_tokens\":[{\"id\":5,\"content\":\"<|im_start|>\",\"special\":true},"
	           "{\"id\":6,\"content\":\"<|im_end|>\",\"special\":true},{\"id\":8,\"content\":\"<|endoftext|>\","
	           "\"special\":true}],"
	           "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true},"
	           "\"model\":{\"type\":\"BPE\",\"vocab\":{\"h\":0,\"i\":1,\"hi\":2,\"\\u0120\":3,\"\\u0120hi\":4,"
	           "\"<think>\":7},\"merges\":[\"h i\",\"\\u0120 hi\"]}}");
	/* a ChatML template that reads enable_thinking, as Qwen3's does */
	write_file(dir, "tokenizer_config.json",
	           "{\"chat_template\": \"{% for m in messages %}{{ '<|im_start|>' + m.role + '\\\\n' + m.content + "
	           "'<|im_end|>\\\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\\\n' }}"
	           "{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}\"}");
	snprintf(path, sizeof path, "%s/tokenizer.json", dir);
	Tok *tk = NULL;
	if (tok_open_json(&tk, path, err, sizeof err)) {
		check(0, "setup: tokenizer", "%s", err);
		return;
	}
	ChatFmt f;
	int rc = chat_setup(&f, path, NULL, 0, tk, err, sizeof err);
	check(!rc && f.jinja && f.family == CHAT_CHATML && chat_is_eot(&f, 6) && chat_is_eot(&f, 8) &&
	          !chat_is_eot(&f, 5) && !chat_is_eot(&f, -1),
	      "setup: the template of tokenizer_config.json runs as Jinja; <|im_end|> and <|endoftext|> end a turn",
	      "rc %d %s", rc, rc ? err : "");
	size_t n;
	char *p = chat_prompt(&f, NULL, "hi", &n, err, sizeof err);
	int32_t *ids = NULL;
	size_t nids = 0;
	int ok = p && !tok_encode(tk, p, n, 0, 1, &ids, &nids);
	/* <|im_start|> user \n hi <|im_end|> \n <|im_start|> assistant \n: the specials must be single ids */
	int n5 = 0, n6 = 0;
	for (size_t i = 0; ok && i < nids; i++)
		n5 += ids[i] == 5, n6 += ids[i] == 6;
	check(ok && ids[0] == 5 && n5 == 2 && n6 == 1, "setup: the rendered turn encodes its special tokens as single ids",
	      "%zu ids", nids);
	check(p && !strcmp(p, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"), "setup: -p renders the template",
	      "'%s'", p ? esc(p) : err);
	free(ids), free(p);
	chat_free(&f);
	rc = chat_setup(&f, path, NULL, 1, tk, err, sizeof err);
	p = rc ? NULL : chat_prompt(&f, NULL, "hi", &n, err, sizeof err);
	check(p && !strcmp(p, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think></think>"),
	      "setup: --no-think passes enable_thinking=false", "'%s'", p ? esc(p) : err);
	free(p);
	chat_free(&f);
	/* --chat-template FILE */
	write_file(dir, "plain.jinja", "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}"
	                               "{% if add_generation_prompt %}[assistant]{% endif %}\n");
	write_file(dir, "broken.jinja", "{% for m in messages %}\n{{ m.content }\n{% endfor %}");
	char file[200];
	snprintf(file, sizeof file, "%s/plain.jinja", dir);
	rc = chat_setup(&f, path, file, 0, tk, err, sizeof err);
	p = rc ? NULL : chat_prompt(&f, "sys", "hi", &n, err, sizeof err);
	check(p && !strcmp(p, "[system] sys\n[user] hi\n[assistant]"), "setup: --chat-template FILE", "'%s'",
	      p ? esc(p) : err);
	free(p);
	if (!rc)
		chat_free(&f);
	rc = rc ? rc : chat_setup(&f, path, file, 1, tk, err, sizeof err);
	check(rc && strstr(err, "--no-think: the template's chat format (from the --chat-template) has no thinking switch"),
	      "setup: --no-think on a template that does not read enable_thinking is refused", "rc %d '%s'", rc, err);
	snprintf(file, sizeof file, "%s/broken.jinja", dir);
	rc = chat_setup(&f, path, file, 0, tk, err, sizeof err);
	check(rc && strstr(err, "broken.jinja:2: ") && !strchr(err, '\n'), "setup: a broken template file: one line with its line",
	      "rc %d '%s'", rc, err);
	write_file(dir, "llama.jinja", "{% for m in messages %}<|start_header_id|>{{ m.content }}{% endfor %}");
	snprintf(file, sizeof file, "%s/llama.jinja", dir);
	rc = chat_setup(&f, path, file, 0, tk, err, sizeof err);
	check(rc && strstr(err, "llama.jinja writes the special token '<|start_header_id|>', which this vocabulary lacks"),
	      "setup: a template writing special tokens the vocabulary lacks is refused", "rc %d '%s'", rc, err);
	rc = chat_setup(&f, path, "vicuna", 0, tk, err, sizeof err);
	check(rc && strstr(err, "--chat-template: 'vicuna' is neither a chat format (glm4, glm5, deepseek3, chatml, llama3) "
	                        "nor a readable template file"),
	      "setup: --chat-template neither a name nor a file", "rc %d '%s'", rc, err);
	rc = chat_setup(&f, path, "chatml", 1, tk, err, sizeof err);
	check(rc && strstr(err, "needs the special token '<think>', which this vocabulary has only as ordinary text") &&
	          !strchr(err, '\n'),
	      "setup: a chat token that is ordinary text is refused in one line", "rc %d '%s'", rc, err);
	rc = chat_setup(&f, path, "llama3", 0, tk, err, sizeof err);
	check(rc && strstr(err, "the llama3 chat format (from the --chat-template) needs the special token "
	                        "'<|begin_of_text|>', which this vocabulary lacks") && !strchr(err, '\n'),
	      "setup: a missing chat token is refused in one line", "rc %d '%s'", rc, err);
	rc = chat_setup(&f, path, "deepseek3", 1, tk, err, sizeof err);
	check(rc && strstr(err, "--no-think: the deepseek3 chat format (from the --chat-template) has no thinking switch"),
	      "setup: --no-think on a format without a switch is refused", "rc %d '%s'", rc, err);
	rc = chat_setup(&f, path, "chatml", 0, tk, err, sizeof err);
	check(!rc && f.family == CHAT_CHATML, "setup: --chat-template chatml", "%s", err);
	tok_close(tk);
}

/* chat_read_message: one line per message, blank lines skipped, several lines between lines of """. */
static void test_read(void)
{
	const char *in = "first\n\n  \nsecond\r\n\"\"\"\nline one\n\nline three\n\"\"\"\n\"\"\"opened here\nclosed here\"\"\"\n"
	                 "\"\"\"one-liner\"\"\"\nsay \"\"\"x\"\"\" inside\n\"\"\"\nlast, cut by EOF";
	const char *want[] = {"first", "  ", "second", "line one\n\nline three", "opened here\nclosed here", "one-liner",
	                      "say \"\"\"x\"\"\" inside", "last, cut by EOF"};
	FILE *fp = fmemopen((void *)in, strlen(in), "r");
	ChatBuf b = {0};
	size_t k = 0;
	int ok = fp != NULL;
	while (ok && !chat_read_message(fp, &b, NULL)) {
		ok = k < sizeof want / sizeof *want && !strcmp(b.s, want[k]);
		k++;
	}
	check(ok && k == sizeof want / sizeof *want, "read: messages of one line and of several lines between \"\"\" lines",
	      "message %zu: '%s'", k, b.s ? esc(b.s) : "");
	if (fp)
		fclose(fp);
	chat_buf_free(&b);
}

int main(void)
{
	snprintf(tmp, sizeof tmp, "/tmp/test_chat.XXXXXX");
	if (!mkdtemp(tmp)) {
		perror("mkdtemp");
		return 1;
	}
	test_render();
	test_live();
	test_detect();
	test_meta();
	test_setup();
	test_read();
	char cmd[128];
	snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
	if (system(cmd))
		fprintf(stderr, "could not remove %s\n", tmp);
	return check_done();
}
