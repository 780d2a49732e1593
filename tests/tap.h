/*
** tests/tap.h — the checks of the C++ test programs (tests/gpu/*.cu, tests/simt/*.cc): each check prints
** "ok - NAME" or "FAIL - NAME: detail" and is counted; finish() prints "N passed, N failed", the last
** line tests/run.sh and tests/gpu/run.sh read, and gives the exit status. Included once per program.
*/
#pragma once
#include <stdarg.h>
#include <stdio.h>

#include <string>

static int n_pass, n_fail;

/* Prints the counts; the last line of every run. */
static int finish(void)
{
	printf("%d passed, %d failed\n", n_pass, n_fail);
	return n_fail ? 1 : 0;
}

/* printf into a std::string (names and details of checks). */
static std::string fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static std::string fmt(const char *f, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, f);
	vsnprintf(buf, sizeof buf, f, ap);
	va_end(ap);
	return buf;
}

/* Records one check; detail explains a failure. */
static void check(bool ok, const std::string &name, const std::string &detail = "")
{
	if (ok) {
		n_pass++;
		printf("ok - %s\n", name.c_str());
	} else {
		n_fail++;
		printf("FAIL - %s: %s\n", name.c_str(), detail.c_str());
	}
}
