/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One test case, both driving paths.  A ctx runs either on a libev loop
 * the test runs (RT_LIBEV), or embedded: on its private loop, created with
 * a NULL loop, in a plain epoll host loop that sleeps exactly as long as
 * evr_ctx_timeout_ms() says, or until evr_ctx_fd() is readable, and then
 * calls evr_ctx_process() (RT_EMBED).  Whatever the library does on its
 * own -- timers above all -- must happen the same way on both.
 *
 * The pair helpers drive a struct rt_pair (rt_pair.h) made on the
 * driver's ctx: rt_pair_init() with rt_drv_loop(), then rt_drv_attach().
 */
#ifndef EVR_RT_DRIVE_H
#define EVR_RT_DRIVE_H

#include "rt_pair.h"

#include <sys/epoll.h>

enum rt_path { RT_LIBEV, RT_EMBED };

struct rt_drv {
	enum rt_path path;
	struct ev_loop *loop; /* RT_LIBEV: the loop the ctx is on */
	int ep;		      /* RT_EMBED: the host loop's epoll fd */
	evr_ctx *ctx;	      /* the ctx driven */
};

static inline const char *rt_path_name(enum rt_path path)
{
	return path == RT_LIBEV ? "libev loop" : "embedded (epoll)";
}

static inline void rt_drv_init(struct rt_drv *d, enum rt_path path)
{
	memset(d, 0, sizeof(*d));
	d->path = path;
	d->ep = -1;
	if (path == RT_LIBEV) {
		d->loop = ev_loop_new(EVFLAG_AUTO);
		assert_non_null(d->loop);
	} else {
		d->ep = epoll_create1(EPOLL_CLOEXEC);
		assert_true(d->ep >= 0);
	}
}

/* The loop argument for evr_ctx_create() (NULL when embedded). */
static inline struct ev_loop *rt_drv_loop(const struct rt_drv *d)
{
	return d->loop;
}

/* Drive ctx, created on rt_drv_loop(d) (one ctx per driver). */
static inline void rt_drv_attach(struct rt_drv *d, evr_ctx *ctx)
{
	assert_null(d->ctx);
	d->ctx = ctx;
	if (d->path == RT_EMBED) {
		struct epoll_event ev = {.events = EPOLLIN};
		int fd = evr_ctx_fd(ctx);

		assert_true(fd >= 0);
		ev.data.fd = fd;
		assert_int_equal(epoll_ctl(d->ep, EPOLL_CTL_ADD, fd, &ev), 0);
	}
}

/* Create a ctx with opts on the driver and drive it. */
static inline evr_ctx *rt_drv_ctx(struct rt_drv *d,
				  const struct evr_ctx_opts *opts)
{
	evr_ctx *ctx;

	assert_int_equal(evr_ctx_create(&ctx, d->loop, opts), 0);
	rt_drv_attach(d, ctx);
	return ctx;
}

/* Stop driving the ctx (before it is destroyed). */
static inline void rt_drv_detach(struct rt_drv *d)
{
	if (d->path == RT_EMBED && d->ctx)
		assert_int_equal(
		    epoll_ctl(d->ep, EPOLL_CTL_DEL, evr_ctx_fd(d->ctx), NULL),
		    0);
	d->ctx = NULL;
}

static inline void rt_drv_fini(struct rt_drv *d)
{
	assert_null(d->ctx); /* detached, then destroyed, by the test */
	if (d->loop)
		ev_loop_destroy(d->loop);
	if (d->ep >= 0)
		close(d->ep);
}

/* The host loop of RT_EMBED: the predicate is checked after every
 * evr_ctx_process(), and the wait is the library's timeout, cut only by
 * what is left of `seconds`. */
static inline int rt_embed_run_until(struct rt_drv *d, int (*pred)(void *),
				     void *arg, double seconds)
{
	double end = rt_now() + seconds;

	while (!pred(arg)) {
		struct epoll_event ev;
		double left = end - rt_now();
		int t, cap;

		if (left <= 0)
			break;
		t = evr_ctx_timeout_ms(d->ctx);
		cap = (int)(left * 1000.0) + 1; /* rounded up */
		if (epoll_wait(d->ep, &ev, 1, t < 0 || t > cap ? cap : t) < 0)
			assert_int_equal(errno, EINTR);
		assert_int_equal(evr_ctx_process(d->ctx), 0);
	}
	return pred(arg) ? 0 : -1;
}

/* rt_run_until_exact, on either path. */
static inline int rt_drv_run_until_exact(struct rt_drv *d, int (*pred)(void *),
					 void *arg, double seconds)
{
	if (d->path == RT_LIBEV)
		return rt_run_until_exact(d->loop, pred, arg, seconds);
	return rt_embed_run_until(d, pred, arg, seconds);
}

/* rt_run_until (EVR_TEST_TIMEOUT_SCALE applies), on either path. */
static inline int rt_drv_run_until(struct rt_drv *d, int (*pred)(void *),
				   void *arg, double seconds)
{
	return rt_drv_run_until_exact(d, pred, arg,
				      seconds * rt_timeout_scale());
}

/* rt_run_for, on either path. */
static inline void rt_drv_run_for(struct rt_drv *d, double seconds)
{
	(void)rt_drv_run_until_exact(d, rt_never, NULL, seconds);
}

/* rt_pair_connect, on either path. */
static inline void rt_drv_pair_connect(struct rt_drv *d, struct rt_pair *p)
{
	assert_int_equal(evr_connect(p->ctx, rt_addr(), evr_listener_port(p->l),
				     &p->cli_opts, NULL),
			 0);
	assert_int_equal(rt_drv_run_until(d, rt_pair_up_pred, p, 20), 0);
	assert_int_equal(p->cli.connect_status, 0);
	assert_int_equal(p->srv.connect_status, 0);
	assert_non_null(p->cli.conn);
	assert_non_null(p->srv.conn);
}

/* rt_pair_fini, for a pair made on the driver's ctx. */
static inline void rt_drv_pair_fini(struct rt_drv *d, struct rt_pair *p)
{
	rt_drv_detach(d);
	rt_pair_fini(p);
}

/* rt_pair_close, on either path. */
static inline void rt_drv_pair_close(struct rt_drv *d, struct rt_pair *p)
{
	if (p->cli.conn)
		assert_int_equal(evr_conn_close(p->cli.conn, 0), 0);
	assert_int_equal(rt_drv_run_until(d, rt_pair_closed_pred, p, 20), 0);
	assert_int_equal(p->cli.closes, 1);
	assert_int_equal(p->srv.closes, 1);
}

#endif
