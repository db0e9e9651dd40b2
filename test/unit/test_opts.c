/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Options structs that grow, and options against the environment
 * (lib/opts.c).
 *
 * A program built against an older evrdma.h hands the library a shorter
 * struct: the prefix structs below are today's layouts cut before their
 * last fields, as an older header would have declared them.  Their fields
 * must be read, and the missing ones must take the defaults.  A program
 * built against a newer header hands a longer one: accepted when the tail
 * the library does not know is zero, refused with -E2BIG otherwise.  A
 * struct never initialised (size 0) is refused with -EINVAL.  The copy
 * helper is driven directly, then evr_ctx_create() on the paths that need
 * no device.
 *
 * The precedence of options and environment -- a non-zero option, else
 * the variable, else the default -- is checked through evr__opt_pick() and
 * evr__tune_resolve(), the functions a ctx is configured by.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "evrdma-int.h"

/* evr_ctx_opts as a header one version older would declare it: up to
 * send_queue_lowat, without the adaptive thresholds and the log sink. */
struct ctx_opts_old {
	size_t size;
	const char *device;
	const char *local_addr;
	enum evr_mode mode;
	unsigned sq_depth;
	unsigned recv_depth;
	size_t eager_size;
	size_t max_msg_size;
	unsigned signal_interval;
	unsigned connect_timeout_ms;
	unsigned close_timeout_ms;
	unsigned retry_count;
	unsigned ack_timeout;
	unsigned keepalive_ms;
	unsigned keepalive_timeout_ms;
	size_t send_queue_limit;
	size_t send_queue_lowat;
};
_Static_assert(offsetof(struct ctx_opts_old, send_queue_lowat) ==
		   offsetof(struct evr_ctx_opts, send_queue_lowat),
	       "the old layout is a prefix of today's");
_Static_assert(sizeof(struct ctx_opts_old) <=
		   offsetof(struct evr_ctx_opts, adapt_up_rate),
	       "the old struct ends before the fields it lacks");

/* evr_conn_opts one version older: without timeout_ms and keepalive_ms.
 * (Not just without keepalive_ms: it lies in the trailing padding of a
 * struct ending at timeout_ms, where evrdma.h never puts a new field.) */
struct conn_opts_old {
	size_t size;
	evr_connect_cb on_connect;
	evr_recv_cb on_recv;
	evr_imm_cb on_imm;
	evr_close_cb on_close;
	evr_drain_cb on_drain;
	void *arg;
	const void *user_data;
	size_t user_len;
};
_Static_assert(offsetof(struct conn_opts_old, user_len) ==
		   offsetof(struct evr_conn_opts, user_len),
	       "the old layout is a prefix of today's");
_Static_assert(sizeof(struct conn_opts_old) <=
		   offsetof(struct evr_conn_opts, timeout_ms),
	       "the old struct ends before the fields it lacks");

/* evr_ctx_opts as a newer header might declare it: today's, then more. */
struct ctx_opts_new {
	struct evr_ctx_opts cur;
	uint64_t later[3];
};

static void log_sink(enum evr_log_level lvl, const char *msg, void *arg)
{
	(void)lvl;
	(void)msg;
	(void)arg;
}

/* _init writes the defaults and the caller's size, and never past it:
 * a program built with a shorter struct keeps the bytes that follow. */
static void test_init_records_size(void **state)
{
	struct {
		struct ctx_opts_old o;
		unsigned char guard[64];
	} old;
	struct ctx_opts_new big;
	struct evr_ctx_opts o;
	struct evr_conn_opts c;
	size_t i;

	(void)state;
	memset(&o, 0xa5, sizeof(o));
	evr_ctx_opts_init(&o);
	assert_int_equal(o.size, sizeof(o));
	assert_int_equal(o.sq_depth, 64);
	assert_int_equal(o.mode, EVR_MODE_ADAPTIVE);
	assert_int_equal(o.adapt_up_rate, 0); /* unset: env or default */
	assert_int_equal(o.adapt_up_batch, 0);
	assert_int_equal(o.adapt_quiet_us, 0);
	assert_null(o.log_fn);
	assert_int_equal(o.log_level, EVR_LOG_WARN);
	assert_int_equal(o.connect_timeout_ms, 5000);
	assert_int_equal(o.listen_backlog, 4096);
	assert_int_equal(o.window_idle_ms, 2000);
	assert_int_equal(o.connect_reply_ms, 30000);

	memset(&c, 0xa5, sizeof(c));
	evr_conn_opts_init(&c);
	assert_int_equal(c.size, sizeof(c));
	assert_null(c.on_connect);
	assert_int_equal(c.keepalive_ms, 0);

	memset(&old, 0xa5, sizeof(old));
	evr_ctx_opts_init_sz((struct evr_ctx_opts *)&old.o, sizeof(old.o));
	assert_int_equal(old.o.size, sizeof(old.o));
	assert_int_equal(old.o.sq_depth, 64);
	assert_int_equal(old.o.keepalive_ms, 2000);
	for (i = 0; i < sizeof(old.guard); i++)
		assert_int_equal(old.guard[i], 0xa5);

	/* a newer header's struct: its fields unknown here come out 0 */
	memset(&big, 0xa5, sizeof(big));
	evr_ctx_opts_init_sz(&big.cur, sizeof(big));
	assert_int_equal(big.cur.size, sizeof(big));
	assert_int_equal(big.cur.sq_depth, 64);
	for (i = 0; i < 3; i++)
		assert_int_equal(big.later[i], 0);
}

/* An older, shorter evr_ctx_opts: its fields are taken, the ones it lacks
 * take the defaults (not whatever lies past its end). */
static void test_old_ctx_opts(void **state)
{
	struct {
		struct ctx_opts_old o;
		unsigned char after[sizeof(struct evr_ctx_opts)];
	} src;
	struct evr_ctx_opts dflt, dst;

	(void)state;
	memset(&src, 0xa5, sizeof(src)); /* what follows is not ours */
	evr_ctx_opts_init_sz((struct evr_ctx_opts *)&src.o, sizeof(src.o));
	src.o.sq_depth = 100;
	src.o.send_queue_lowat = 12345;
	/* defaults that stand out, to see them arrive */
	evr_ctx_opts_init(&dflt);
	dflt.adapt_up_rate = 11;
	dflt.adapt_up_batch = 12;
	dflt.adapt_quiet_us = 13;
	dflt.log_fn = log_sink;
	dflt.log_level = EVR_LOG_INFO;
	memset(&dst, 0x5a, sizeof(dst));
	assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src), 0);
	assert_int_equal(dst.size, sizeof(dst));
	assert_int_equal(dst.sq_depth, 100);
	assert_int_equal(dst.send_queue_lowat, 12345);
	assert_int_equal(dst.recv_depth, 64);
	assert_int_equal(dst.adapt_up_rate, 11);
	assert_int_equal(dst.adapt_up_batch, 12);
	assert_int_equal(dst.adapt_quiet_us, 13);
	assert_ptr_equal(dst.log_fn, log_sink);
	assert_null(dst.log_arg);
	assert_int_equal(dst.log_level, EVR_LOG_INFO);
	/* fields appended after the old struct: the defaults */
	assert_int_equal(dst.listen_backlog, 4096);
	assert_int_equal(dst.connect_reply_ms, 30000);
}

/* An older evr_conn_opts without the timeouts: the defaults fill them. */
static void test_old_conn_opts(void **state)
{
	struct {
		struct conn_opts_old o;
		unsigned char after[sizeof(struct evr_conn_opts)];
	} src;
	struct evr_conn_opts dflt, dst;
	int tag;

	(void)state;
	memset(&src, 0xa5, sizeof(src));
	evr_conn_opts_init_sz((struct evr_conn_opts *)&src.o, sizeof(src.o));
	src.o.arg = &tag;
	src.o.user_len = 3;
	evr_conn_opts_init(&dflt);
	dflt.timeout_ms = 777;
	dflt.keepalive_ms = -1;
	memset(&dst, 0x5a, sizeof(dst));
	assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src), 0);
	assert_int_equal(dst.size, sizeof(dst));
	assert_ptr_equal(dst.arg, &tag);
	assert_int_equal(dst.user_len, 3);
	assert_int_equal(dst.timeout_ms, 777);
	assert_null(dst.on_connect);
	assert_int_equal(dst.keepalive_ms, -1);
}

/* A newer, longer struct: all of it that is ours is taken when the rest
 * is zero; any non-zero byte in the rest is -E2BIG and dst untouched. */
static void test_new_struct_tail(void **state)
{
	struct ctx_opts_new src;
	struct evr_ctx_opts dflt, dst, canary;
	size_t off;

	(void)state;
	evr_ctx_opts_init(&dflt);
	evr_ctx_opts_init_sz(&src.cur, sizeof(src));
	src.cur.recv_depth = 99;
	src.cur.adapt_quiet_us = 55;
	memset(&dst, 0x5a, sizeof(dst));
	assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src), 0);
	assert_int_equal(dst.size, sizeof(dst));
	assert_int_equal(dst.recv_depth, 99);
	assert_int_equal(dst.adapt_quiet_us, 55);
	assert_int_equal(dst.sq_depth, 64);

	memset(&canary, 0x5a, sizeof(canary));
	for (off = sizeof(src.cur); off < sizeof(src); off++) {
		unsigned char *p = (unsigned char *)&src + off;

		*p = 1;
		memcpy(&dst, &canary, sizeof(dst));
		assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src),
				 -E2BIG);
		assert_memory_equal(&dst, &canary, sizeof(dst));
		*p = 0;
	}
}

/* Size 0 (never initialised), sizes too small to hold the size member,
 * and absurd sizes are refused before anything is read past size. */
static void test_bad_sizes(void **state)
{
	static const size_t einval[] = {0, 1, sizeof(size_t) - 1};
	struct evr_ctx_opts dflt, src, dst, canary;
	size_t i, sz;

	(void)state;
	evr_ctx_opts_init(&dflt);
	memset(&canary, 0x5a, sizeof(canary));
	for (i = 0; i < sizeof(einval) / sizeof(einval[0]); i++) {
		evr_ctx_opts_init(&src);
		src.size = einval[i];
		memcpy(&dst, &canary, sizeof(dst));
		assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src),
				 -EINVAL);
		assert_memory_equal(&dst, &canary, sizeof(dst));
	}
	/* a zeroed struct is not an initialised one */
	memset(&src, 0, sizeof(src));
	assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src),
			 -EINVAL);
	/* past the cap: refused on the size alone (src is far smaller) */
	for (sz = EVR__OPTS_MAX_SIZE + 1; sz < ((size_t)1 << 40); sz <<= 3) {
		evr_ctx_opts_init(&src);
		src.size = sz;
		assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src),
				 -E2BIG);
	}
	src.size = SIZE_MAX;
	assert_int_equal(evr__opts_copy(&dst, sizeof(dst), &dflt, &src),
			 -E2BIG);
}

/* evr_ctx_create takes the same path before it touches any device. */
static void test_ctx_create_checks_size(void **state)
{
	struct {
		struct ctx_opts_old o;
		unsigned char after[sizeof(struct evr_ctx_opts)];
	} old;
	struct ctx_opts_new big;
	struct evr_ctx_opts o;
	evr_ctx *ctx = NULL; /* must stay untouched on failure */
	int rc;

	(void)state;
	memset(&o, 0, sizeof(o));
	o.sq_depth = 256; /* set by hand, no _init: size 0 */
	assert_int_equal(evr_ctx_create(&ctx, NULL, &o), -EINVAL);
	assert_null(ctx);

	evr_ctx_opts_init_sz(&big.cur, sizeof(big));
	big.later[2] = 1;
	assert_int_equal(evr_ctx_create(&ctx, NULL, &big.cur), -E2BIG);
	assert_null(ctx);

	/* an old struct's fields are read: an invalid one is refused ... */
	memset(&old, 0xa5, sizeof(old));
	evr_ctx_opts_init_sz((struct evr_ctx_opts *)&old.o, sizeof(old.o));
	old.o.sq_depth = 2;
	assert_int_equal(
	    evr_ctx_create(&ctx, NULL, (struct evr_ctx_opts *)&old.o), -EINVAL);
	/* ... and a valid one passes the option checks (what follows needs
	 * an RDMA stack, which a unit test may not have) */
	old.o.sq_depth = 256;
	rc = evr_ctx_create(&ctx, NULL, (struct evr_ctx_opts *)&old.o);
	if (rc == 0)
		evr_ctx_destroy(ctx);
	else
		assert_true(rc != -EINVAL && rc != -E2BIG);
}

/* The precedence, value by value: option, else variable, else default. */
static void test_pick(void **state)
{
	static const struct {
		unsigned opt;
		const char *env;
		unsigned dflt, want;
	} cases[] = {
	    {5, "7", 9, 5},  /* explicit beats the environment */
	    {5, NULL, 9, 5}, /* explicit beats the default */
	    {0, "7", 9, 7},  /* the environment beats the default */
	    {0, "0", 9, 0},  /* 0 from the environment is a setting */
	    {0, NULL, 9, 9}, /* neither: the default */
	    {0, "", 9, 9},   /* empty: unset */
	    {0, "7x", 9, 9}, /* malformed: ignored */
	    {0, "-1", 9, 9}, /* no sign */
	    {0, " 7", 9, 9}, /* no blanks */
	    {0, "\t7", 9, 9},
	    {0, "+7", 9, 9},
	    {0, "4294967296", 9, 9}, /* too big */
	    {0, "4294967295", 9, 4294967295u},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(
		    evr__opt_pick(cases[i].opt, cases[i].env, cases[i].dflt),
		    cases[i].want);
}

/* A ctx's whole configuration: each source in its place. */
static void test_tune_resolve(void **state)
{
	struct evr__env env = {0};
	struct evr_ctx_opts o;
	struct evr__tune t;

	(void)state;
	/* neither: the defaults, and no stderr logging */
	evr_ctx_opts_init(&o);
	evr__tune_resolve(&t, &o, &env);
	assert_int_equal(t.adapt.up_rate, EVR_ADAPT_UP_RATE);
	assert_int_equal(t.adapt.up_batch, EVR_ADAPT_UP_BATCH);
	assert_int_equal(t.adapt.quiet_us, EVR_ADAPT_QUIET_US);
	assert_int_equal(t.adapt.quiet_polls, EVR_ADAPT_QUIET_POLLS);
	assert_int_equal(t.adapt.window_us, EVR_ADAPT_WINDOW_US);
	assert_int_equal(t.poll_spin, EVR_POLL_SPIN);
	assert_int_equal(t.spin_us, EVR_ADAPT_SPIN_US);
	assert_int_equal(t.reg_cache_max, 0);
	assert_int_equal(t.log_stderr, 0);

	/* the environment, for what the options leave unset */
	env.adapt_up_rate = "100";
	env.adapt_up_batch = "200";
	env.adapt_quiet_us = "300";
	env.adapt_quiet_polls = "0";
	env.poll_spin = "5";
	env.adapt_spin_us = "0"; /* off */
	env.reg_cache = "8";
	env.log = "info";
	evr__tune_resolve(&t, &o, &env);
	assert_int_equal(t.adapt.up_rate, 100);
	assert_int_equal(t.adapt.up_batch, 200);
	assert_int_equal(t.adapt.quiet_us, 300);
	assert_int_equal(t.adapt.quiet_polls, 0);
	assert_int_equal(t.poll_spin, 5);
	assert_int_equal(t.spin_us, 0);
	assert_int_equal(t.reg_cache_max, 8);
	assert_int_equal(t.log_stderr, EVR_LOG_INFO + 1);

	/* explicit options beat it; a log sink means EVR_LOG is not read */
	o.adapt_up_rate = 1;
	o.adapt_up_batch = 2;
	o.adapt_quiet_us = 3;
	o.adapt_spin_us = 7;
	o.log_fn = log_sink;
	evr__tune_resolve(&t, &o, &env);
	assert_int_equal(t.spin_us, 7);
	assert_int_equal(t.adapt.up_rate, 1);
	assert_int_equal(t.adapt.up_batch, 2);
	assert_int_equal(t.adapt.quiet_us, 3);
	assert_int_equal(t.log_stderr, 0);
	assert_int_equal(t.poll_spin, 5); /* no option: still the variable */
	/* UINT_MAX: never spin */
	o.adapt_spin_us = UINT_MAX;
	evr__tune_resolve(&t, &o, &env);
	assert_int_equal(t.spin_us, 0);
}

/* EVR_SRQ decides only when the option is left at AUTO; other text than
 * on/off/1/0 leaves AUTO. */
static void test_srq_resolve(void **state)
{
	static const struct {
		enum evr_srq_mode opt;
		const char *env;
		enum evr_srq_mode want;
	} cases[] = {
	    {EVR_SRQ_AUTO, NULL, EVR_SRQ_AUTO},
	    {EVR_SRQ_AUTO, "on", EVR_SRQ_ON},
	    {EVR_SRQ_AUTO, "OFF", EVR_SRQ_OFF},
	    {EVR_SRQ_AUTO, "1", EVR_SRQ_ON},
	    {EVR_SRQ_AUTO, "0", EVR_SRQ_OFF},
	    {EVR_SRQ_AUTO, "yes please", EVR_SRQ_AUTO},
	    {EVR_SRQ_OFF, "on", EVR_SRQ_OFF},
	    {EVR_SRQ_ON, "off", EVR_SRQ_ON},
	};
	struct evr__env env = {0};
	struct evr_ctx_opts o;
	struct evr__tune t;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		evr_ctx_opts_init(&o);
		o.srq = cases[i].opt;
		env.srq = cases[i].env;
		evr__tune_resolve(&t, &o, &env);
		assert_int_equal(t.srq, cases[i].want);
	}
}

/* A switch read from a variable: a value, and whether it sets the
 * switch. */
struct switch_case {
	const char *env;
	bool set;
};

/* Each case's value in the variable at env_off of struct evr__env must
 * give the bool at tune_off of the resolved struct evr__tune. */
static void check_switch(const struct switch_case *cases, size_t n,
			 size_t env_off, size_t tune_off)
{
	struct evr__env env = {0};
	struct evr_ctx_opts o;
	struct evr__tune t;
	size_t i;

	evr_ctx_opts_init(&o);
	for (i = 0; i < n; i++) {
		memcpy((char *)&env + env_off, &cases[i].env,
		       sizeof(cases[i].env));
		evr__tune_resolve(&t, &o, &env);
		assert_int_equal(*(const bool *)((const char *)&t + tune_off),
				 cases[i].set);
	}
}

/* EVR_FIN=alone (any case) turns carried FINs off; anything else, or
 * nothing, leaves them on. */
static void test_fin_resolve(void **state)
{
	static const struct switch_case cases[] = {
	    {NULL, false}, {"alone", true}, {"ALONE", true},
	    {"carried", false}, {"", false}, {"0", false},
	};

	(void)state;
	check_switch(cases, sizeof(cases) / sizeof(cases[0]),
		     offsetof(struct evr__env, fin),
		     offsetof(struct evr__tune, fin_alone));
}

/* EVR_IMM=off or 0 (any case) keeps every header in band; anything else,
 * or nothing, offers headers in immediate data. */
static void test_imm_resolve(void **state)
{
	static const struct switch_case cases[] = {
	    {NULL, false}, {"off", true}, {"OFF", true},
	    {"0", true},   {"on", false}, {"", false},
	};

	(void)state;
	check_switch(cases, sizeof(cases) / sizeof(cases[0]),
		     offsetof(struct evr__env, imm),
		     offsetof(struct evr__tune, imm_off));
}

/* The variables a ctx reads, by their documented names. */
static void test_env_read(void **state)
{
	static const struct {
		const char *name;
		size_t off;
	} vars[] = {
	    {"EVR_DEVICE", offsetof(struct evr__env, device)},
	    {"EVR_LOG", offsetof(struct evr__env, log)},
	    {"EVR_ADAPT_UP_RATE", offsetof(struct evr__env, adapt_up_rate)},
	    {"EVR_ADAPT_UP_BATCH", offsetof(struct evr__env, adapt_up_batch)},
	    {"EVR_ADAPT_QUIET_US", offsetof(struct evr__env, adapt_quiet_us)},
	    {"EVR_ADAPT_QUIET_POLLS",
	     offsetof(struct evr__env, adapt_quiet_polls)},
	    {"EVR_POLL_SPIN", offsetof(struct evr__env, poll_spin)},
	    {"EVR_ADAPT_SPIN_US", offsetof(struct evr__env, adapt_spin_us)},
	    {"EVR_REG_CACHE", offsetof(struct evr__env, reg_cache)},
	    {"EVR_SRQ", offsetof(struct evr__env, srq)},
	    {"EVR_MW", offsetof(struct evr__env, mw)},
	    {"EVR_FIN", offsetof(struct evr__env, fin)},
	    {"EVR_IMM", offsetof(struct evr__env, imm)},
	};
	struct evr__env env;
	size_t i;

	(void)state;
	assert_int_equal(sizeof(vars) / sizeof(vars[0]),
			 sizeof(env) / sizeof(const char *));
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		assert_int_equal(setenv(vars[i].name, vars[i].name, 1), 0);
	evr__env_read(&env);
	for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *got;

		memcpy(&got, (char *)&env + vars[i].off, sizeof(got));
		assert_string_equal(got, vars[i].name);
		assert_int_equal(unsetenv(vars[i].name), 0);
	}
	evr__env_read(&env);
	assert_null(env.reg_cache);
}

static void test_e2big_text(void **state)
{
	(void)state;
	assert_string_equal(evr_err_name(-E2BIG), "E2BIG");
	assert_non_null(strstr(evr_strerror(-E2BIG), "newer evrdma.h"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_records_size),
	    cmocka_unit_test(test_old_ctx_opts),
	    cmocka_unit_test(test_old_conn_opts),
	    cmocka_unit_test(test_new_struct_tail),
	    cmocka_unit_test(test_bad_sizes),
	    cmocka_unit_test(test_ctx_create_checks_size),
	    cmocka_unit_test(test_pick),
	    cmocka_unit_test(test_tune_resolve),
	    cmocka_unit_test(test_fin_resolve),
	    cmocka_unit_test(test_imm_resolve),
	    cmocka_unit_test(test_env_read),
	    cmocka_unit_test(test_srq_resolve),
	    cmocka_unit_test(test_e2big_text),
	};

	return cmocka_run_group_tests_name("opts", tests, NULL, NULL);
}
