/*
** tests/check.h — the one test convention: each check prints "ok - NAME" or "FAIL - NAME: why";
** tests/run.sh counts them. A test program exits non-zero when any check failed.
*/
#ifndef GLM_CHECK_H
#define GLM_CHECK_H

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static int check_failures __attribute__((unused));

/* Record one check; fmt explains a failure. */
static inline void check(int ok, const char *name, const char *fmt, ...)
{
	if (ok) {
		printf("ok - %s\n", name);
		return;
	}
	check_failures++;
	printf("FAIL - %s: ", name);
	va_list ap;
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
}

/* Relative L2 error ‖a−b‖/‖b‖; NaN anywhere gives +inf so it never passes. */
static inline double rel_l2(const float *a, const float *b, size_t n)
{
	double num = 0, den = 0;
	for (size_t i = 0; i < n; i++) {
		if (isnan(a[i]) || isnan(b[i]))
			return INFINITY;
		double d = (double)a[i] - b[i];
		num += d * d;
		den += (double)b[i] * b[i];
	}
	if (den == 0)
		return num == 0 ? 0 : INFINITY;
	return sqrt(num / den);
}

/* Fill with fresh random values in [-1, 1) (xorshift, seeded by the caller). */
static inline void fill_random(float *x, size_t n, unsigned long long *seed)
{
	for (size_t i = 0; i < n; i++) {
		unsigned long long s = *seed;
		s ^= s << 13, s ^= s >> 7, s ^= s << 17;
		*seed = s;
		x[i] = (float)((s >> 11) * (1.0 / 9007199254740992.0) * 2 - 1);
	}
}

static inline int check_done(void)
{
	return check_failures ? 1 : 0;
}

#endif
