/*
** runtime/core/arena.c — one arena per compilation (and per loaded plan). Nothing allocated from it is
** freed before the whole arena is, so passes never own or free memory, and a Lua error that unwinds
** through a binding cannot leak.
*/
#include "glm.h"

#include <stdlib.h>
#include <string.h>

struct ArenaBlock {
	ArenaBlock *next;
	size_t size, used;
	_Alignas(16) unsigned char data[];
};

/* Bump-allocate n zeroed bytes; blocks grow so large graphs need few mallocs. */
void *arena_alloc(Arena *a, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	ArenaBlock *b = a->head;
	if (!b || b->size - b->used < n) {
		size_t size = n > (1u << 20) ? n : (1u << 20);
		b = malloc(sizeof *b + size);
		if (!b) {
			fprintf(stderr, "glm: out of memory (arena block of %zu bytes)\n", size);
			exit(1);
		}
		b->next = a->head, b->size = size, b->used = 0;
		a->head = b;
	}
	void *p = b->data + b->used;
	b->used += n;
	a->used += n;
	memset(p, 0, n);
	return p;
}

char *arena_strdup(Arena *a, const char *s)
{
	size_t n = strlen(s) + 1;
	return memcpy(arena_alloc(a, n), s, n);
}

char *arena_printf(Arena *a, const char *fmt, ...)
{
	va_list ap, ap2;
	va_start(ap, fmt);
	va_copy(ap2, ap);
	int n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	char *s = arena_alloc(a, (size_t)n + 1);
	vsnprintf(s, (size_t)n + 1, fmt, ap2);
	va_end(ap2);
	return s;
}

void arena_free(Arena *a)
{
	for (ArenaBlock *b = a->head, *next; b; b = next) {
		next = b->next;
		free(b);
	}
	a->head = NULL;
	a->used = 0;
}

/* Bugs abort with their location; user errors never come here. */
_Noreturn void glm_die(const char *file, int line, const char *what)
{
	fprintf(stderr, "glm: internal error at %s:%d: %s\n", file, line, what);
	abort();
}

const char *esc_ctl(const char *s, char *buf, size_t n)
{
	size_t o = 0;
	for (; s && *s && o + 5 < n; s++) {
		unsigned char c = (unsigned char)*s;
		if (c < 0x20 || c == 0x7f)
			o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
		else
			buf[o++] = (char)c;
	}
	if (n)
		buf[o < n ? o : n - 1] = 0;
	return buf;
}

/* Control bytes (newlines in hostile names or paths) become '?', so a message is always one line. */
int seterr(char *err, size_t len, const char *fmt, ...)
{
	if (err && len) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err, len, fmt, ap);
		va_end(ap);
		for (char *p = err; *p; p++)
			if ((unsigned char)*p < 0x20 || *p == 0x7f)
				*p = '?';
	}
	return -1;
}
