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

/* A strict reader of evr_stats_json's shape: {"key":value,...} with keys
 * of [a-z_], values unsigned integers, words in quotes or null, nothing
 * after the closing brace.  Returns the number of pairs (keys unique), or
 * -1 with *at where it went wrong. */
static int json_pairs(const char *s, const char **at)
{
	static char keys[64][32];
	int n = 0;

	*at = s;
	if (*s++ != '{')
		return -1;
	for (;;) {
		size_t k = 0;

		*at = s;
		if (*s++ != '"')
			return -1;
		while ((*s >= 'a' && *s <= 'z') || *s == '_')
			if (k < sizeof(keys[0]) - 1)
				keys[n][k++] = *s++;
			else
				return -1;
		keys[n][k] = '\0';
		if (!k || *s++ != '"' || *s++ != ':')
			return -1;
		for (int i = 0; i < n; i++)
			if (!strcmp(keys[i], keys[n]))
				return -1; /* a key twice */
		*at = s;
		if (*s == '"') {
			s++;
			if (!(*s >= 'a' && *s <= 'z'))
				return -1;
			while (*s >= 'a' && *s <= 'z')
				s++;
			if (*s++ != '"')
				return -1;
		} else if (!strncmp(s, "null", 4)) {
			s += 4;
		} else {
			if (!(*s >= '0' && *s <= '9') || (*s == '0' && s[1] >= '0' && s[1] <= '9'))
				return -1;
			while (*s >= '0' && *s <= '9')
				s++;
		}
		if (++n == 64)
			return -1;
		*at = s;
		if (*s == '}')
			return s[1] ? -1 : n;
		if (*s++ != ',')
			return -1;
	}
}

/* evr_stats_json: every field once under its name, its value exactly,
 * words for the enums, null for no locked-memory limit; snprintf's
 * contract for a short buffer; bad arguments refused. */
static void test_stats_json(void **state)
{
	struct evr_stats st;
	char line[4096], small[64];
	const char *at;
	int n, k;

	(void)state;
	memset(&st, 0, sizeof(st));
	st.wakeups = 1;
	st.msgs_sent = 18446744073709551615ull - 1;
	st.conns = 4000000000u;
	st.mode = EVR_MODE_POLL;
	st.memlock_limit = UINT64_MAX;
	st.srq_lent = 7;
	st.rndv_access = EVR_RNDV_WINDOW;
	st.zero_copy_sends = 99;
	n = evr_stats_json(&st, line, sizeof(line));
	assert_true(n > 0 && (size_t)n < sizeof(line));
	assert_int_equal(strlen(line), (size_t)n);
	k = json_pairs(line, &at);
	if (k < 0)
		fail_msg("not the expected JSON at \"%.20s\" in %s", at, line);
	/* 47 numbers, mode, rndv_access and memlock_limit: struct evr_stats'
	 * 50 fields (stats.c asserts none was appended unlisted) */
	assert_int_equal(k, 50);
	assert_non_null(strstr(line, "{\"wakeups\":1,\"polls\":0,"));
	assert_non_null(strstr(line, ",\"msgs_sent\":18446744073709551614,"));
	assert_non_null(strstr(line, ",\"conns\":4000000000,"));
	assert_non_null(strstr(line, ",\"mode\":\"poll\","));
	assert_non_null(strstr(line, ",\"memlock_limit\":null,"));
	assert_non_null(strstr(line, ",\"srq_lent\":7,"));
	assert_non_null(strstr(line, ",\"rndv_access\":\"window\","));
	assert_non_null(strstr(line, ",\"zero_copy_sends\":99}"));
	assert_null(strchr(line, '\n'));
	st.memlock_limit = 8u << 20;
	st.mode = EVR_MODE_EVENT;
	st.rndv_access = EVR_RNDV_REGISTER;
	n = evr_stats_json(&st, line, sizeof(line));
	assert_int_equal(json_pairs(line, &at), 50);
	assert_non_null(strstr(line, ",\"memlock_limit\":8388608,"));
	assert_non_null(strstr(line, ",\"mode\":\"event\","));
	assert_non_null(strstr(line, ",\"rndv_access\":\"register\","));

	/* short buffers: the whole length returned, a NUL-terminated
	 * prefix written, nothing past len */
	assert_int_equal(evr_stats_json(&st, NULL, 0), n);
	for (size_t len = 1; len < sizeof(small); len++) {
		memset(small, 'x', sizeof(small));
		assert_int_equal(evr_stats_json(&st, small, len), n);
		assert_int_equal(strlen(small), len - 1);
		assert_memory_equal(small, line, len - 1);
		for (size_t i = len; i < sizeof(small); i++)
			assert_int_equal(small[i], 'x');
	}
	assert_int_equal(evr_stats_json(&st, line, (size_t)n), n);
	assert_int_equal(strlen(line), (size_t)n - 1);
	assert_int_equal(evr_stats_json(&st, line, (size_t)n + 1), n);
	assert_int_equal(strlen(line), (size_t)n);

	assert_int_equal(evr_stats_json(NULL, line, sizeof(line)), -EINVAL);
	assert_int_equal(evr_stats_json(&st, NULL, 5), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_documented_errnos_have_names),
	    cmocka_unit_test(test_names_table),
	    cmocka_unit_test(test_stats_json),
	};

	return cmocka_run_group_tests_name("util", tests, NULL, NULL);
}
