/*
** compiler/cli/tokenize.h — `glmc tokenize WEIGHTS [--add-special] [--parse-special] [--decode]`: text on stdin
** to token ids on stdout (or ids back to text), with the tokenizer the weights carry (runtime/formats/tok.h).
*/
#ifndef GLM_TOKENIZE_H
#define GLM_TOKENIZE_H

/* argv[0] is "tokenize". Returns the process exit status: 0, 1 for a bad file or input, 2 for bad usage.
** One-line errors on stderr. */
int tokenize_main(int argc, char **argv);

#endif
