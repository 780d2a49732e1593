/*
** runtime/core/rfile.h — opening input files without ever blocking: only regular files are read, and the
** open itself cannot wait (a FIFO given as a plan, model or weights file would otherwise hang for ever).
*/
#ifndef GLM_RFILE_H
#define GLM_RFILE_H
#include <jansson.h>
#include <stddef.h>

/* A read-only descriptor of the regular file at path (opened with O_NONBLOCK, which then is cleared), or
** -1 with errno set: ENOENT and the like from open, EINVAL for anything but a regular file (a FIFO,
** device, socket or directory). */
int rfile_open(const char *path);
/* rfile_open's failure as a message: "PATH: not a regular file" or "PATH: <strerror>". */
int rfile_err(const char *path, char *err, size_t len);
/* json_load_file for a regular file only; on failure je->line is -1 when the file could not be read
** (je->text says why), else the line of the syntax error. */
json_t *rfile_json(const char *path, size_t flags, json_error_t *je);
/* "line N: " for a parse error, "" when the file could not be read (no "line -1"). */
const char *rfile_line(const json_error_t *je, char *buf, size_t n);

#endif
