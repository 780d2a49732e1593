/*
** runtime/core/outpath.c — an output path checked before the compile starts, so that a typo in -o cannot
** overwrite the weights, the model or its config (a lost download), and a wrong directory fails at once
** rather than after the whole compile. Files are compared by device and inode, not by spelling.
*/
#include "glm.h"
#include "outpath.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Whether name is a part of a split GGUF set, "PREFIX-NNNNN-of-NNNNN.gguf"; *plen gets PREFIX's length. */
static int split_part(const char *name, size_t *plen)
{
	size_t n = strlen(name);
	const char *tail = "-00000-of-00000.gguf";
	size_t tl = strlen(tail);
	if (n < tl)
		return 0;
	for (size_t i = 0; i < tl; i++) {
		char c = name[n - tl + i], t = tail[i];
		if (t == '0' ? (c < '0' || c > '9') : c != t)
			return 0;
	}
	*plen = n - tl;
	return 1;
}

/* Whether the file at dir/name (a regular file or directory) is the file st describes. */
static int same_entry(const char *dir, const char *name, const struct stat *st)
{
	char p[PATH_MAX];
	struct stat e;
	if (snprintf(p, sizeof p, "%s/%s", dir, name) >= (int)sizeof p || stat(p, &e))
		return 0;
	return e.st_dev == st->st_dev && e.st_ino == st->st_ino;
}

/*
** Whether input path (a file or a directory) covers the file st: the same file, a file of the
** directory, or another part of the same split GGUF set. *hit gets the name that matched.
*/
static int covers(const char *path, const struct stat *st, char *hit, size_t hl)
{
	struct stat in;
	if (stat(path, &in))
		return 0;
	snprintf(hit, hl, "%s", path);
	if (in.st_dev == st->st_dev && in.st_ino == st->st_ino)
		return 1;
	char dir[PATH_MAX];
	const char *base = NULL;
	size_t plen = 0;
	if (S_ISDIR(in.st_mode))
		snprintf(dir, sizeof dir, "%s", path);
	else {
		const char *slash = strrchr(path, '/');
		base = slash ? slash + 1 : path;
		if (!split_part(base, &plen))
			return 0;
		snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
	}
	DIR *d = opendir(dir);
	if (!d)
		return 0;
	int found = 0;
	for (struct dirent *e; !found && (e = readdir(d));) {
		size_t pl;
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (base && !(split_part(e->d_name, &pl) && pl == plen && !strncmp(e->d_name, base, plen)))
			continue;
		if (same_entry(dir, e->d_name, st))
			found = snprintf(hit, hl, "%s/%s", dir, e->d_name) > 0;
	}
	closedir(d);
	return found;
}

int out_check(const char *opt, const char *path, const OutInput *in, int n, char *err, size_t len)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	if (!*path)
		return seterr(err, len, "%s: empty path", opt);
	if (snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - path + (slash == path)) : 1, slash ? path : ".") >=
	    (int)sizeof dir)
		return seterr(err, len, "%s %s: path too long", opt, path);
	struct stat st;
	if (stat(dir, &st))
		return seterr(err, len, "%s %s: the directory %s: %m", opt, path, dir);
	if (!S_ISDIR(st.st_mode))
		return seterr(err, len, "%s %s: %s is not a directory", opt, path, dir);
	if (access(dir, W_OK | X_OK))
		return seterr(err, len, "%s %s: cannot write in the directory %s: %m", opt, path, dir);
	if (stat(path, &st)) {
		if (errno == ENOENT)
			return 0;
		return seterr(err, len, "%s %s: %m", opt, path);
	}
	if (S_ISDIR(st.st_mode))
		return seterr(err, len, "%s %s: is a directory", opt, path);
	if (!S_ISREG(st.st_mode))
		return seterr(err, len, "%s %s: exists and is not a regular file; refusing to replace it", opt, path);
	char hit[PATH_MAX];
	for (int i = 0; i < n; i++)
		if (in[i].path && covers(in[i].path, &st, hit, sizeof hit))
			return seterr(err, len, "%s %s: that is %s (%s), an input of this compile; refusing to overwrite it",
			              opt, path, in[i].what, hit);
	return 0;
}

int out_close_stdout(void)
{
	int bad = ferror(stdout);
	int e = errno;
	if (fclose(stdout))
		bad = 1, e = errno;
	errno = e;
	return bad ? -1 : 0;
}
