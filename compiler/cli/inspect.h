/*
** compiler/cli/inspect.h — `glmc inspect WEIGHTS [--tensor NAME --dump FILE]`: list a GGUF file's (or an
** HF checkpoint directory's) metadata and tensors, or write one tensor dequantized to float32.
*/
#ifndef GLM_INSPECT_H
#define GLM_INSPECT_H

/* argv[0] is "inspect". Returns the process exit status: 0, 1 for a bad file or tensor, 2 for bad
** usage. Writes the listing to stdout and one-line errors to stderr. */
int inspect_main(int argc, char **argv);

#endif
