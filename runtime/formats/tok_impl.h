/*
** runtime/formats/tok_impl.h — the inside of a Tok, shared by tok.c (encode, decode), tok_pre.c (pre-tokenizers)
** and tok_load.c (GGUF and tokenizer.json). Not for other callers: use tok.h.
*/
#ifndef GLM_TOK_IMPL_H
#define GLM_TOK_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tok.h"

enum { TOKM_BPE, TOKM_SPM };

/* Flags per token beyond its type (from tokenizer.json added_tokens). */
enum { TOKF_LSTRIP = 1, TOKF_RSTRIP = 2 };

/* How a Split step keeps matches and the gaps between them (Hugging Face SplitDelimiterBehavior). */
enum { TSB_ISOLATED, TSB_REMOVED, TSB_MERGED_PREV, TSB_MERGED_NEXT, TSB_CONTIGUOUS };

/* One pre-tokenizer step, applied to every piece the steps before it left. */
typedef struct {
	pcre2_code *re;          /* NULL: no split (a ByteLevel step without use_regex) */
	int behavior;            /* TSB_* */
	int invert;              /* the regex matches the gaps */
	int prefix_space;        /* ByteLevel add_prefix_space: prepend ' ' to a piece not starting with one */
} TokPre;

/* Merge (left id, right id) -> rank and result id; open addressing, rank -1 marks a free slot. */
typedef struct {
	uint64_t key;
	int32_t rank;
	int32_t id;
} TokMerge;

struct Tok {
	int model;               /* TOKM_* */
	char pre_name[64];
	int32_t n;               /* vocabulary size */
	char *pool;              /* token texts, back to back */
	size_t pool_len, pool_cap;
	uint64_t *off;           /* text of id i: pool + off[i], tlen[i] bytes */
	uint32_t *tlen;
	float *score;
	uint8_t *type;           /* TOK_* */
	uint8_t *flags;          /* TOKF_* */
	uint32_t *tab;           /* text -> id + 1, open addressing */
	uint64_t tmask;
	TokMerge *mg;
	uint64_t mmask;
	int32_t nmerge;
	TokPre *pre;
	int npre;
	int32_t *spec;           /* CONTROL / USER_DEFINED / UNKNOWN ids, longest text first */
	int nspec;
	int32_t byte_tok[256];   /* the token of each byte (BPE: its byte-level character; SPM: <0xXX>) */
	uint16_t byte_cp[256];   /* byte-level alphabet: byte -> code point */
	uint8_t cp_byte[0x144];  /* and back, for code points below 0x144 */
	uint8_t cp_is_byte[0x144];
	uint8_t spm_barrier[128];  /* SPM: ASCII bytes inside no multi-byte token (no merge crosses them) */
	char *ppool;             /* decoded pieces */
	uint64_t *poff;
	uint32_t *plen;
	int32_t bos, eos, eot, eom, unk;
	int add_bos, add_eos;
	int ignore_merges;       /* BPE: a piece that is itself a token is not merged (llama3) */
	int add_space_prefix;    /* SPM: text after a special token (or at the start) gets a leading space */
	int32_t *eog;
	int neog;
};

/* tok.c */
Tok *tok_new(int model);
int tok_set_vocab_size(Tok *t, int32_t n);
int tok_set_token(Tok *t, int32_t id, const char *s, size_t len, float score, int type);
int tok_build(Tok *t, char *err, size_t len);
int tok_add_merge(Tok *t, const char *a, size_t alen, const char *b, size_t blen, int32_t rank);
int tok_merges_init(Tok *t, size_t n);
int32_t tok_lookup(const Tok *t, const char *s, size_t n);
void tok_byte_level_init(Tok *t);
int tok_eog_add(Tok *t, int32_t id);

/* tok_pre.c */
int tok_pre_named(Tok *t, const char *name, char *err, size_t len);
int tok_pre_add(Tok *t, const char *regex, int behavior, int invert, int prefix_space, char *err, size_t len);
int tok_pre_bytelevel(Tok *t, int use_regex, int prefix_space, char *err, size_t len);
void tok_pre_free(Tok *t);

/* One piece of text during pre-tokenization: bytes [off, off+len) of buffer buf (0: the input, 1: the
** scratch buffer that holds pieces given a prefix space); raw pieces (invalid UTF-8) skip the regexes. */
typedef struct {
	uint64_t off;
	uint32_t len;
	uint8_t buf;
	uint8_t raw;
} TokPiece;

typedef struct {
	TokPiece *p;
	size_t n, cap;
	char *scratch;
	size_t slen, scap;
} TokPieces;

int tok_pretokenize(const Tok *t, const char *text, size_t n, TokPieces *out);

/* The UTF-8 character at s (n bytes): its length when complete and valid; 0 when the bytes so far are a
** valid start that needs more; -k when the first k bytes can never start one (tok.c). */
int tok_utf8_check(const unsigned char *s, size_t n);

#endif
