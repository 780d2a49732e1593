/*
** runtime/chat.h — chat templates and the interactive chat of glmrun.
**
** No Jinja: each supported family is written out in C (chat.c says which official template each one
** follows). The family comes from the weights' metadata — the chat template text (GGUF
** `tokenizer.chat_template`, HF `chat_template.jinja` or `tokenizer_config.json`), recognised by
** distinctive substrings, else the architecture (`general.architecture` / config.json `model_type`) —
** or from a name given by the user (--chat-template).
**
** A conversation is rendered as: begin(system) user(U1) assistant(A1) user(U2) ... user(Un) gen(). A live
** session never re-renders history: the KV cache already holds what the model saw and generated, so a
** turn feeds only begin/close + user(U) + gen(), where close() ends the previous answer the way the
** template does (the end-of-turn token the model sampled is never fed; close() starts with it).
*/
#ifndef GLM_CHAT_H
#define GLM_CHAT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "glm.h"
#include "gpu.h"
#include "ranks.h"
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
	const char *source;          /* what chose the family: "--chat-template", "chat template", "architecture" */
	int32_t eot[4];              /* the family's end-of-turn token ids (-1: absent) */
} ChatFmt;

/* Family by name (one of chat_names). */
int chat_by_name(ChatFmt *f, const char *name, char *err, size_t len);

/* Family from a chat template text and/or an architecture / model_type (either may be NULL); what names
** the weights in messages. */
int chat_detect(ChatFmt *f, const char *tmpl, const char *arch, const char *what, char *err, size_t len);

/* The chat template text and architecture stored with a tokenizer source: a GGUF file, a Hugging Face
** directory, or a tokenizer.json (its directory). Each is malloc'd, or NULL when absent. */
int chat_meta(const char *path, char **tmpl, char **arch, char *err, size_t len);

/* Everything glmrun needs: the family (from name, else detected from path's metadata), no_think applied
** and checked, every special token the rendering uses checked against the vocabulary, end-of-turn ids. */
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

/* One templated user turn, begin(system) + user(text) + gen(), for glmrun -p: malloc'd (n bytes), NULL
** when out of memory. */
char *chat_prompt(const ChatFmt *f, const char *system, const char *text, size_t *n);

/* 1 when id ends a turn for this family. */
int chat_is_eot(const ChatFmt *f, int32_t id);

/*
** An interactive session (glmrun --chat): reads one user message per line from in, streams each answer
** to stdout, keeps the conversation in the KV cache (each turn is prefilled at the next free position).
** An answer ends at an end-of-turn/end-of-generation token, --stop, n tokens (0: no limit) or Ctrl-C
** (*sigs becomes non-zero); a second Ctrl-C, EOF, or a full context (max_seq) ends the session.
*/
typedef struct {
	const Graph *g;
	int logits;                  /* node of the 'logits' output */
	int64_t V;
	Exec *xs;                    /* the CPU ranks (tp of them), or NULL */
	int tp;
	Ranks *gpu;                  /* or the GPU(s): one worker per rank */
	GpuOpts samp;                /* temp, top_k, top_p, seed */
	long max_seq, maxT;          /* cache positions; tokens per prefill step */
	long n;                      /* tokens per answer at most (0: no limit) */
	const char *stop;            /* --stop */
	int ignore_eos, stats;
	const Tok *tk;
	const ChatFmt *fmt;
	const char *system;
	volatile sig_atomic_t *sigs; /* counts Ctrl-C */
} ChatSession;
int chat_session(const ChatSession *s, FILE *in, char *err, size_t len);

#endif
