/*
** runtime/core/outpath.h — checks on an output path before anything is computed or written.
*/
#ifndef GLM_OUTPATH_H
#define GLM_OUTPATH_H
#include <stddef.h>

/* An input of the compile and what to call it in a message ("the model", "the weights", ...). A
** directory stands for itself and every file in it; a split GGUF part for every part of its set. */
typedef struct {
	const char *path;
	const char *what;
} OutInput;

/* Whether opt (e.g. "-o") may write path: its directory exists and is writable, path is not a directory
** or a special file, and it is none of the n inputs (same device and inode, whatever the spelling). */
int out_check(const char *opt, const char *path, const OutInput *in, int n, char *err, size_t len);

/* Close stdout at the end of a program (an atexit handler's work): -1 when anything written to it was
** lost (a full disk, a closed descriptor), so the program can exit non-zero instead of 0 with the answer
** gone. */
int out_close_stdout(void);

#endif
