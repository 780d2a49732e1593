/*
** runtime/cli/chat.h — chat templates and the interactive chat of glmrun.
**
** The model's own chat template runs as Jinja (runtime/formats/jinja.h): GGUF `tokenizer.chat_template`, HF
** `chat_template.jinja` or `tokenizer_config.json`'s `chat_template`, or a file given with
** --chat-template FILE. It sees what transformers' apply_chat_template passes: messages (role, content),
** add_generation_prompt, bos_token and eos_token (the vocabulary's), tools and documents as none, and
** enable_thinking = false with --no-think (otherwise undefined: the template's default). Weights without a
** template fall back to five families written out in C (chat.c says which official template each one
** follows), chosen by architecture (`general.architecture` / config.json `model_type`) or by name
** (--chat-template NAME).
**
** A live session never re-renders what the KV cache holds. With a family, a turn feeds begin/close +
** user(U) + gen(), where close() ends the previous answer the way the template does. With a template, a
** turn feeds what the template puts after the previous answer: the conversation is rendered with a marker
** in place of that answer, and the text after the marker (the answer's end, the new user message, the
** generation prompt) is fed. Either way the end-of-turn token the model sampled is not fed (the fed text
** starts with it); an answer cut short (-n, a stop string, Ctrl-C) has its last token fed first, so the
** cache holds every token the user was shown.
*/
#ifndef GLM_CHAT_H
#define GLM_CHAT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine.h"
#include "glm.h"
#include "jinja.h"
#include "tok.h"

enum { CHAT_GLM4, CHAT_GLM5, CHAT_DEEPSEEK3, CHAT_CHATML, CHAT_LLAMA3, CHAT_NFAMILY };

/* The names --chat-template takes, for messages: "glm4, glm5, deepseek3, chatml, llama3". */
extern const char chat_names[];

typedef struct {
	int family;                  /* CHAT_* */
	int think_switch;            /* the template can turn thinking off (GLM, Qwen3 enable_thinking) */
	int no_think;                /* render the template's thinking-off form (--no-think) */
	int ds_think;                /* DeepSeek-V3.1: '</think>' after <｜Assistant｜> (its non-thinking default) */
	int llama_date;              /* Llama 3.1+: system header with the knowledge cutoff and a date */
	char date[32];               /* that date ("26 Jul 2024", or today's for templates that ask) */
	const char *default_system;  /* chatml: the Qwen2/2.5 default system prompt; else NULL */
	const char *source;          /* what chose the format: "--chat-template", "chat template", "architecture" */
	int32_t eot[4];              /* the family's end-of-turn token ids (-1: absent) */
	JjTmpl *jinja;               /* the template rendered instead of the family, or NULL (chat_free frees) */
	char *bos, *eos;             /* bos_token / eos_token for the template (NULL: the vocabulary has none) */
	struct tm now;               /* what strftime_now formats */
} ChatFmt;

/* Free what chat_setup allocated (the template, token texts). */
void chat_free(ChatFmt *f);

/* Family by name (one of chat_names). */
int chat_by_name(ChatFmt *f, const char *name, char *err, size_t len);

/* Family from a chat template text (by distinctive substrings; chat_setup uses this only for a template's
** end-of-turn tokens) and/or an architecture / model_type (either may be NULL); what names
** the weights in messages. */
int chat_detect(ChatFmt *f, const char *tmpl, const char *arch, const char *what, char *err, size_t len);

/* The chat template text and architecture stored with a tokenizer source: a GGUF file, a Hugging Face
** directory, or a tokenizer.json (its directory). Each is malloc'd, or NULL when absent. */
int chat_meta(const char *path, char **tmpl, char **arch, char *err, size_t len);

/* Everything glmrun needs: the format (name: a family name or a template file; else path's chat template,
** else the family of its architecture), no_think applied and checked, the special tokens a family uses
** checked against the vocabulary, end-of-turn ids. */
int chat_setup(ChatFmt *f, const char *path, const char *name, int no_think, const Tok *tk, char *err, size_t len);

/* A growing string; oom is set (and the text left incomplete) when out of memory. */
typedef struct {
	char *s;
	size_t n, cap;
	int oom;
} ChatBuf;
void chat_buf_free(ChatBuf *b);

/* The pieces. system NULL: the family's default system prompt, if any. */
void chat_begin(const ChatFmt *f, ChatBuf *b, const char *system);
void chat_user(const ChatFmt *f, ChatBuf *b, const char *text);
void chat_assistant(const ChatFmt *f, ChatBuf *b, const char *text); /* a past answer, as history */
void chat_gen(const ChatFmt *f, ChatBuf *b);                         /* the generation prompt */
void chat_close(const ChatFmt *f, ChatBuf *b);                       /* ends a live answer */

/* A whole conversation: begin(system), then turns[0..n) alternating user, assistant, user, ...; gen
** appends the generation prompt. Equals the official template's output for the same messages. */
void chat_render(const ChatFmt *f, ChatBuf *b, const char *system, const char *const *turns, int n, int gen);

/* A conversation through the Jinja template (f->jinja): system (NULL: none), then turns[0..n) alternating
** user, assistant, ...; gen adds the generation prompt. Returns 0, or -1 with a one-line error. */
int chat_render_jinja(const ChatFmt *f, ChatBuf *b, const char *system, const char *const *turns, int n, int gen,
                      char *err, size_t len);

/* Any conversation (glmrun serve): messages[i] = (roles[i], texts[i]), roles system, user or assistant, through
** the Jinja template or the family (which takes a system message only first); gen adds the generation
** prompt. Returns 0, or -1 with a one-line error (an unknown role is one). */
int chat_render_msgs(const ChatFmt *f, ChatBuf *b, const char *const *roles, const char *const *texts, int n, int gen,
                     char *err, size_t len);

/* One templated user turn (system, text, the generation prompt) for glmrun -p: malloc'd (n bytes), or
** NULL with a one-line error. */
char *chat_prompt(const ChatFmt *f, const char *system, const char *text, size_t *n, char *err, size_t len);

/* 1 when id ends a turn for this family. */
int chat_is_eot(const ChatFmt *f, int32_t id);

/*
** An interactive session (glmrun --chat): reads user messages from in (one per line; a message of several
** lines starts with a line """ and ends at a line ending in """, see chat_read_message), streams each
** answer to stdout, keeps the conversation in the KV cache (each turn is prefilled at the next free
** position). An answer ends at an end-of-turn/end-of-generation token, --stop, n tokens (0: no limit) or
** Ctrl-C (*sigs becomes non-zero); a second Ctrl-C, EOF, or a full context (max_seq) ends the session.
*/
typedef struct {
	Engine *e;                   /* one slot; a turn's prompt is prefilled in the engine's chunks */
	long max_seq;                /* cache positions */
	long n;                      /* tokens per answer at most (0: no limit) */
	const char *stop;            /* --stop */
	int ignore_eos, stats;
	const Tok *tk;
	const ChatFmt *fmt;
	const char *system;
	volatile sig_atomic_t *sigs; /* counts Ctrl-C */
} ChatSession;
int chat_session(const ChatSession *s, FILE *in, char *err, size_t len);

/* The next user message from in into *b (NUL-terminated, trailing CR/LF removed): one non-empty line, or
** the lines between a line starting with """ and one ending with """ (text on those two lines beside
** the quotes belongs to the message; EOF also ends it). prompt (when not NULL) is printed before each
** further line of a multi-line message. Returns 0, or -1 at EOF (or a read error) with no message. */
int chat_read_message(FILE *in, ChatBuf *b, const char *prompt);

#endif
