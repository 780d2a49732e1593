/*
** runtime/core/rfile.c — see rfile.h: inputs are regular files, opened without blocking.
*/
#include "glm.h"
#include "rfile.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int rfile_open(const char *path)
{
	int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return -1;
	struct stat st;
	int e;
	if (fstat(fd, &st))
		e = errno;
	else if (!S_ISREG(st.st_mode))
		e = EINVAL;
	else if (fcntl(fd, F_SETFL, 0))
		e = errno;
	else
		return fd;
	close(fd);
	errno = e;
	return -1;
}

int rfile_err(const char *path, char *err, size_t len)
{
	if (errno == EINVAL)
		return seterr(err, len, "%s: not a regular file", path);
	return seterr(err, len, "%s: %s", path, strerror(errno));
}

json_t *rfile_json(const char *path, size_t flags, json_error_t *je)
{
	int fd = rfile_open(path);
	if (fd < 0) {
		memset(je, 0, sizeof *je);
		je->line = -1;
		snprintf(je->text, sizeof je->text, "%s", errno == EINVAL ? "not a regular file" : strerror(errno));
		return NULL;
	}
	json_t *j = json_loadfd(fd, flags, je);
	close(fd);
	return j;
}

const char *rfile_line(const json_error_t *je, char *buf, size_t n)
{
	if (je->line < 1)
		return "";
	snprintf(buf, n, "line %d: ", je->line);
	return buf;
}
