/*
** compiler/cli/tokenize.c — `glmc tokenize WEIGHTS [--add-special] [--parse-special] [--decode]`.
**
** For scripts and for checking glmc's tokenizer against another one: reads all of stdin as UTF-8 text and
** prints its token ids space-separated on one line; no BOS/EOS unless --add-special; control-token text
** ("<|im_end|>") stays text unless --parse-special. With --decode, reads whitespace-separated ids and
** writes exactly the bytes they stand for (control tokens included, no newline added), so
** `glmc tokenize W < f | glmc tokenize W --decode` gives f back.
*/
#include "tokenize.h"
#include "tok.h"
#include "weights.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage[] =
	"usage: glmc tokenize WEIGHTS [--add-special] [--parse-special] [--decode]\n"
	"Read UTF-8 text on stdin and print its token ids, space-separated on one line, using the tokenizer of\n"
	"WEIGHTS: a GGUF file (tokenizer.ggml.*), a Hugging Face directory (its tokenizer.json) or a\n"
	"tokenizer.json file.\n"
	"\n"
	"  --add-special     add BOS/EOS as the tokenizer asks (default: none)\n"
	"  --parse-special   turn the text of control tokens (\"<|im_end|>\") into their ids\n"
	"  --decode          read whitespace-separated ids instead and write the text they stand for\n"
	"  -h, --help        this text\n";

/* One error line on stderr (control bytes shown as '?') and the exit status to return. */
static int error(int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof msg, fmt, ap);
	va_end(ap);
	for (char *p = msg; *p; p++)
		if ((unsigned char)*p < 0x20)
			*p = '?';
	fprintf(stderr, "glmc tokenize: %s\n", msg);
	return status;
}

/* All of stdin in a malloc'd buffer (NUL-terminated); NULL on a read error or out of memory. */
static char *read_stdin(size_t *n)
{
	size_t cap = 1 << 16, len = 0;
	char *b = malloc(cap);
	while (b) {
		if (len + 1 >= cap) {
			char *p = realloc(b, cap *= 2);
			if (!p)
				break;
			b = p;
		}
		size_t r = fread(b + len, 1, cap - len - 1, stdin);
		len += r;
		if (r == 0) {
			if (ferror(stdin))
				break;
			b[len] = 0;
			*n = len;
			return b;
		}
	}
	free(b);
	return NULL;
}

/* Open the tokenizer of WEIGHTS: a directory or a .json file through tokenizer.json (a directory needs no
** safetensors for this), anything else as weights. */
static int open_tok(const char *path, Tok **t, char *err, size_t len)
{
	struct stat st;
	if (stat(path, &st))
		return seterr(err, len, "%s: %s", path, strerror(errno));
	size_t n = strlen(path);
	if (S_ISDIR(st.st_mode)) {
		char *p = malloc(n + sizeof "/tokenizer.json");
		if (!p)
			return seterr(err, len, "out of memory");
		sprintf(p, "%s/tokenizer.json", path);
		int rc = tok_open_json(t, p, err, len);
		free(p);
		return rc;
	}
	if (n >= 5 && !strcmp(path + n - 5, ".json"))
		return tok_open_json(t, path, err, len);
	Weights w;
	if (weights_open(&w, path, err, len))
		return -1;
	int rc = tok_open(t, &w, err, len);
	weights_close(&w);
	return rc;
}

/* Ids to text: parse every whitespace-separated id, then write the decoded bytes. */
static int decode(const Tok *t, const char *in)
{
	size_t n = 0, cap = 256;
	int32_t *ids = malloc(cap * sizeof *ids);
	if (!ids)
		return error(1, "out of memory");
	const char *p = in;
	for (;;) {
		while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
			p++;
		if (!*p)
			break;
		char *end;
		errno = 0;
		long v = strtol(p, &end, 10);
		if (end == p || errno || (*end && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
			free(ids);
			return error(1, "not a token id: '%.20s'", p);
		}
		if (v < 0 || v >= tok_n_vocab(t)) {
			free(ids);
			return error(1, "token id %ld is out of range (vocabulary of %d)", v, (int)tok_n_vocab(t));
		}
		if (n == cap) {
			int32_t *q = realloc(ids, (cap *= 2) * sizeof *q);
			if (!q) {
				free(ids);
				return error(1, "out of memory");
			}
			ids = q;
		}
		ids[n++] = (int32_t)v;
		p = end;
	}
	char *text;
	size_t len;
	int rc = tok_decode(t, ids, n, 1, &text, &len);
	free(ids);
	if (rc)
		return error(1, "out of memory");
	fwrite(text, 1, len, stdout);
	free(text);
	return fflush(stdout) ? error(1, "write error: %s", strerror(errno)) : 0;
}

/* Parse the flags, open the tokenizer, then encode stdin (or decode it with --decode). */
int tokenize_main(int argc, char **argv)
{
	const char *weights = NULL;
	int add_special = 0, parse_special = 0, dec = 0;
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			fputs(usage, stdout);
			return 0;
		} else if (!strcmp(a, "--add-special")) {
			add_special = 1;
		} else if (!strcmp(a, "--parse-special")) {
			parse_special = 1;
		} else if (!strcmp(a, "--decode")) {
			dec = 1;
		} else if (a[0] == '-' && a[1]) {
			return error(2, "unknown option %s (see glmc tokenize --help)", a);
		} else if (weights) {
			return error(2, "more than one WEIGHTS argument: %s", a);
		} else {
			weights = a;
		}
	}
	if (!weights)
		return error(2, "missing WEIGHTS (see glmc tokenize --help)");
	char err[1024];
	Tok *t;
	if (open_tok(weights, &t, err, sizeof err))
		return error(1, "%s", err);
	size_t n;
	char *in = read_stdin(&n);
	if (!in) {
		tok_close(t);
		return error(1, "cannot read stdin: %s", strerror(errno));
	}
	int rc;
	if (dec) {
		rc = decode(t, in);
	} else {
		int32_t *ids;
		size_t nids;
		if (tok_encode(t, in, n, add_special, parse_special, &ids, &nids)) {
			rc = error(1, "out of memory");
		} else {
			for (size_t i = 0; i < nids; i++)
				printf(i ? " %d" : "%d", (int)ids[i]);
			putchar('\n');
			free(ids);
			rc = fflush(stdout) ? error(1, "write error: %s", strerror(errno)) : 0;
		}
	}
	free(in);
	tok_close(t);
	return rc;
}
