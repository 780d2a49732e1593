/*
** runtime/formats/tok.h — text to token ids and back, from the tokenizer the weights carry.
**
** Two sources: GGUF `tokenizer.ggml.*` metadata (model `gpt2`: byte-level BPE with the pre-tokenizer
** regexes named by `tokenizer.ggml.pre`; model `llama`: SentencePiece vocabularies with scores and byte
** fallback), and a Hugging Face `tokenizer.json` (byte-level BPE). Encoding follows llama.cpp and the
** Hugging Face tokenizers library, which produced the reference ids in ../shared/fixtures/vocab:
** special tokens are split out of the raw text first (CONTROL ones only with parse_special, USER_DEFINED
** ones always), then each raw fragment is pre-tokenized by PCRE2 regexes (UTF + UCP) and BPE-merged by
** rank. Format facts: ../shared/reference/gguf.md section 4.
**
** A Tok is read-only after opening: encode and decode may run from several threads at once.
*/
#ifndef GLM_TOK_H
#define GLM_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "gguf.h"
#include "weights.h"

typedef struct Tok Tok;

/* Token types, the GGUF `tokenizer.ggml.token_type` values. */
enum {
	TOK_UNDEFINED = 0, TOK_NORMAL = 1, TOK_UNKNOWN = 2, TOK_CONTROL = 3, TOK_USER_DEFINED = 4,
	TOK_UNUSED = 5, TOK_BYTE = 6
};

/* Open the tokenizer of opened weights: GGUF metadata, or <dir>/tokenizer.json for a Hugging Face
** directory. A model or pre-tokenizer this code does not implement is refused by name, in one line. */
int tok_open(Tok **t, const Weights *w, char *err, size_t len);

/* From GGUF metadata; pre, when not NULL, replaces `tokenizer.ggml.pre` (for files converted with the
** wrong name, and for tests). */
int tok_open_gguf(Tok **t, const Gguf *g, const char *pre, char *err, size_t len);

/* From a tokenizer.json file; tokenizer_config.json and config.json beside it, when present, give the
** BOS/EOS tokens. */
int tok_open_json(Tok **t, const char *path, char *err, size_t len);

void tok_close(Tok *t);

/*
** Encode n bytes of text (UTF-8; invalid bytes are kept as byte tokens where the vocabulary has them)
** into *ids (malloc'd, caller frees; *nids may be 0). add_special adds BOS/EOS as the tokenizer asks;
** parse_special turns the text of control tokens ("<|im_end|>") into their ids. Returns 0, or -1 when out
** of memory.
*/
int tok_encode(const Tok *t, const char *text, size_t n, int add_special, int parse_special, int32_t **ids,
               size_t *nids);

/*
** Decode ids into *text (malloc'd and NUL-terminated, caller frees) of *len bytes: the exact bytes the
** tokens stand for (no space clean-up, so encode → decode gives the text back; SentencePiece's leading
** space, added by encode, is removed from the first text token). Control tokens are written only when
** special is set. Returns 0, or -1 for an id out of range or out of memory.
*/
int tok_decode(const Tok *t, const int32_t *ids, size_t n, int special, char **text, size_t *len);

/* Special ids, -1 when the tokenizer has none. */
int32_t tok_bos(const Tok *t);
int32_t tok_eos(const Tok *t);
int32_t tok_eot(const Tok *t);
/* End of generation: EOS, EOT, EOM and the usual end-of-turn tokens of chat vocabularies. */
int tok_is_eog(const Tok *t, int32_t id);

int32_t tok_n_vocab(const Tok *t);
/* TOK_* type of id (TOK_UNDEFINED when out of range). */
int tok_type(const Tok *t, int32_t id);
/* The vocabulary text of id (byte-level alphabet for BPE, "▁" for SPM spaces); NULL when out of range. */
const char *tok_text(const Tok *t, int32_t id, size_t *len);
/* The bytes id decodes to (control tokens only with special); NULL when out of range. */
const char *tok_piece(const Tok *t, int32_t id, int special, size_t *len);
/* The id whose vocabulary text is exactly s[0..n), or -1. */
int32_t tok_find(const Tok *t, const char *s, size_t n);
/* "gpt2" (byte-level BPE) or "llama" (SentencePiece), and the pre-tokenizer name ("" for SPM). */
const char *tok_model(const Tok *t);
const char *tok_pre(const Tok *t);

/*
** Streaming decode for generation: feed one id at a time, get back only complete, valid UTF-8. A
** multi-byte character split across tokens is held back until it completes; bytes that can never form
** a valid character become U+FFFD at once; an incomplete character left at the end becomes one U+FFFD
** at tok_stream_flush. The returned text stays valid until the next call. Unlike tok_decode, no
** SentencePiece leading space is removed: the stream continues a prompt.
*/
typedef struct {
	const Tok *t;
	int special;             /* write control tokens */
	unsigned char pend[4];   /* incomplete character carried over */
	int npend;
	char *buf;
	size_t cap;
} TokStream;

void tok_stream_init(TokStream *s, const Tok *t, int special);
/* Returns the new text (possibly empty, *len 0), or NULL for an id out of range or out of memory. */
const char *tok_stream_put(TokStream *s, int32_t id, size_t *len);
const char *tok_stream_flush(TokStream *s, size_t *len);
void tok_stream_free(TokStream *s);

#endif
