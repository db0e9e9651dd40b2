/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Helpers for the RDMA tests.  These run on a real verbs stack (a host
 * RDMA device, or the Soft-RoCE guest started by test/rdma/run-suite) and
 * use the public API only.
 *
 *   EVR_TEST_ADDR   local IPv4 address of the RDMA device (default
 *                   10.77.0.1, the guest's rxe0)
 *   EVR_TEST_ADDR6  its IPv6 address (default fd77::1)
 *   EVR_SKIP_RDMA=1 every RDMA test exits 77 (SKIP): an explicit opt-out
 *   EVR_TEST_FILTER only the tests whose names match this pattern run
 *                   (cmocka_set_test_filter: '*' and '?' wildcards)
 *   EVR_TEST_TIMEOUT_SCALE  a factor (>= 1, default 1) for the time bounds:
 *                   the run's alarm, the waits of rt_run_until and the
 *                   connect and close timeouts of rt_ctx_opts, for slow
 *                   runs such as valgrind in the emulated guest
 */
#ifndef EVR_RT_H
#define EVR_RT_H

#include <errno.h>
#include <ev.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "evrdma.h"

static inline const char *rt_addr(void)
{
	const char *a = getenv("EVR_TEST_ADDR");

	return a && *a ? a : "10.77.0.1";
}

static inline const char *rt_addr6(void)
{
	const char *a = getenv("EVR_TEST_ADDR6");

	return a && *a ? a : "fd77::1";
}

/* The factor EVR_TEST_TIMEOUT_SCALE sets for time bounds (1 by default). */
static inline double rt_timeout_scale(void)
{
	const char *s = getenv("EVR_TEST_TIMEOUT_SCALE");
	double v = s && *s ? strtod(s, NULL) : 1.0;

	return v > 1.0 && v < 1000.0 ? v : 1.0;
}

/* Call first in main(): honours the opt-out and bounds the run time. */
static inline void rt_init(unsigned timeout_s)
{
	const char *s = getenv("EVR_SKIP_RDMA");

	if (s && *s && strcmp(s, "0")) {
		printf("SKIP: EVR_SKIP_RDMA is set\n");
		exit(77);
	}
	alarm((unsigned)(timeout_s * rt_timeout_scale()));
	setvbuf(stdout, NULL, _IOLBF, 0);
	s = getenv("EVR_TEST_FILTER");
	if (s && *s)
		cmocka_set_test_filter(s);
}

static inline void rt_ctx_opts(struct evr_ctx_opts *o)
{
	double k = rt_timeout_scale();

	evr_ctx_opts_init(o);
	o->local_addr = rt_addr();
	/* a slow run (valgrind) may take longer than the defaults allow to
	 * set a connection up or down */
	o->connect_timeout_ms = (unsigned)(o->connect_timeout_ms * k);
	o->close_timeout_ms = (unsigned)(o->close_timeout_ms * k);
}

static void rt_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)w;
	(void)revents;
	*(int *)w->data = 1;
	ev_break(loop, EVBREAK_ALL);
}

static void rt_check_cb(struct ev_loop *loop, ev_check *w, int revents)
{
	int (*pred)(void *) = (int (*)(void *))((void **)w->data)[0];

	(void)revents;
	if (pred(((void **)w->data)[1]))
		ev_break(loop, EVBREAK_ALL);
}

static void rt_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
	int (*pred)(void *) = (int (*)(void *))((void **)w->data)[0];

	(void)revents;
	if (pred(((void **)w->data)[1]))
		ev_break(loop, EVBREAK_ALL);
}

/* rt_run_until without the EVR_TEST_TIMEOUT_SCALE factor. */
static inline int rt_run_until_exact(struct ev_loop *loop, int (*pred)(void *),
				     void *arg, double seconds)
{
	ev_timer t;
	ev_check chk;
	ev_prepare prep;
	int timed_out = 0;
	void *data[2] = {(void *)pred, arg};

	if (pred(arg))
		return 0;
	ev_timer_init(&t, rt_timeout_cb, seconds, 0.);
	t.data = &timed_out;
	ev_check_init(&chk, rt_check_cb);
	chk.data = data;
	ev_prepare_init(&prep, rt_prepare_cb);
	ev_set_priority(&prep, EV_MINPRI);
	prep.data = data;
	ev_timer_start(loop, &t);
	ev_check_start(loop, &chk);
	ev_prepare_start(loop, &prep);
	while (!timed_out && !pred(arg))
		ev_run(loop, EVRUN_ONCE);
	ev_timer_stop(loop, &t);
	ev_check_stop(loop, &chk);
	ev_prepare_stop(loop, &prep);
	return pred(arg) ? 0 : -1;
}

/*
 * Run the loop until pred(arg) is true or `seconds` (times
 * EVR_TEST_TIMEOUT_SCALE) pass.  Returns 0 when the predicate became true,
 * -1 on timeout.  The predicate is checked after every wakeup (ev_check)
 * and, at the lowest priority, right before the loop would sleep
 * (ev_prepare): the library runs deferred callbacks from its own prepare
 * watcher, and a condition they make true must not wait for an unrelated
 * wakeup.
 */
static inline int rt_run_until(struct ev_loop *loop, int (*pred)(void *),
			       void *arg, double seconds)
{
	return rt_run_until_exact(loop, pred, arg,
				  seconds * rt_timeout_scale());
}

static int rt_never(void *arg)
{
	(void)arg;
	return 0;
}

/* Run the loop for `seconds`, whatever happens (to see that something
 * does not happen). */
static inline void rt_run_for(struct ev_loop *loop, double seconds)
{
	(void)rt_run_until_exact(loop, rt_never, NULL, seconds);
}

/* This program's path, to re-execute it in a child process.  Not
 * "/proc/self/exe" itself: under valgrind that is the valgrind tool, while
 * readlink() of it gives the program valgrind runs. */
static inline const char *rt_self_exe(void)
{
	static char path[4096];
	ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);

	if (n <= 0)
		return "/proc/self/exe";
	path[n] = 0;
	return path;
}

/* valgrind runs its tool with its preload library in LD_PRELOAD. */
static inline int rt_on_valgrind(void)
{
	const char *p = getenv("LD_PRELOAD");

	return p && strstr(p, "vgpreload");
}

/* Monotonic clock in seconds, for time bounds. */
static inline double rt_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A deterministic byte pattern: message `seq`, byte i. */
static inline uint8_t rt_pat(uint32_t seq, size_t i)
{
	uint32_t x = seq * 2654435761u + (uint32_t)i * 40503u;

	return (uint8_t)(x ^ (x >> 13));
}

static inline void rt_fill(void *buf, size_t len, uint32_t seq)
{
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = rt_pat(seq, i);
}

/* Index of the first wrong byte, or -1 when it all matches. */
static inline long rt_verify(const void *buf, size_t len, uint32_t seq)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != rt_pat(seq, i))
			return (long)i;
	return -1;
}

#endif
