/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Error names and texts (lib/util.c).
 *
 * Every errno the public header documents as a return or a callback status
 * must have its own name: the test reads include/evrdma.h, takes each
 * "-E..." token in it, finds that errno's value by its name, and checks
 * evr_err_name() gives the name back (and evr_strerror() some text other
 * than the fallback).  A code added to the header is covered without
 * touching this file.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "evrdma.h"

#ifndef EVR_PUBLIC_HEADER
#error "EVR_PUBLIC_HEADER must name include/evrdma.h"
#endif

/* The errno value named `name`, found through the C library's own table. */
static int errno_by_name(const char *name)
{
	for (int e = 1; e < 4096; e++) {
		const char *n = strerrorname_np(e);

		if (n && !strcmp(n, name))
			return e;
	}
	return 0;
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "r");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	return buf;
}

static void test_documented_errnos_have_names(void **state)
{
	char *hdr = read_file(EVR_PUBLIC_HEADER), *p = hdr;
	unsigned found = 0;

	(void)state;
	while ((p = strstr(p, "-E")) != NULL) {
		char name[32];
		size_t n = 0;
		int e;

		p++; /* at 'E' */
		while (n < sizeof(name) - 1 && (isupper((unsigned char)p[n]) ||
						isdigit((unsigned char)p[n])))
			name[n] = p[n], n++;
		name[n] = 0;
		p += n;
		if (n < 3)
			continue;
		e = errno_by_name(name);
		if (!e)
			fail_msg("the header documents -%s, which is no errno", name);
		if (strcmp(evr_err_name(-e), name))
			fail_msg("evr_err_name(-%s) is \"%s\"", name,
				 evr_err_name(-e));
		if (!strcmp(evr_strerror(-e), "unknown error"))
			fail_msg("evr_strerror(-%s) has no text", name);
		found++;
	}
	free(hdr);
	/* the header documents a dozen and more: a parse that finds none
	 * tests nothing */
	assert_true(found >= 12);
}

static void test_names_table(void **state)
{
	static const struct {
		int err;
		const char *name;
	} t[] = {
	    {0, "OK"},
	    {-ESHUTDOWN, "ESHUTDOWN"},
	    {-ECONNRESET, "ECONNRESET"},
	    {-EPROTO, "EPROTO"},
	    {-ECANCELED, "ECANCELED"},
	    {-EREMOTEIO, "EREMOTEIO"},
	    {-ENOBUFS, "ENOBUFS"},
	    {1, "EUNKNOWN"},	    /* not a negative errno */
	    {-4096, "EUNKNOWN"},    /* beyond every errno */
	    {-100000, "EUNKNOWN"},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		assert_string_equal(evr_err_name(t[i].err), t[i].name);
	assert_string_equal(evr_strerror(-100000), "unknown error");
	assert_string_equal(evr_strerror(0), "success");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_documented_errnos_have_names),
	    cmocka_unit_test(test_names_table),
	};

	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
