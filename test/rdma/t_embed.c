/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The one-fd embedding contract (evr_ctx_fd / evr_ctx_timeout_ms /
 * evr_ctx_process) driven by a plain host loop: epoll edge-triggered,
 * epoll level-triggered and poll().  A client and a server connection in
 * one embedded ctx ping-pong thousands of times with random think time
 * between round trips (so completions land at every point of the host
 * loop: before the wait, during it, during processing).  A stall is a wait
 * that runs out its safety cap while a message is in flight -- it means a
 * wakeup was lost -- and fails the test.
 *
 * The conn timers, which no fd announces, are checked on both driving
 * paths (rt_drive.h): on a libev loop, and embedded in a host loop that
 * sleeps exactly as evr_ctx_timeout_ms() says.  The connect bound and the
 * graceful close bound must each end their wait on time, with the
 * documented status.  (The keepalive tick: t_keepalive.)
 */
#include "rt_drive.h"

#include <poll.h>
#include <sys/epoll.h>
#include <time.h>

enum host_kind { HOST_EPOLL_ET, HOST_EPOLL_LT, HOST_POLL };

struct pp {
	evr_ctx *ctx;
	evr_listener *l;
	evr_conn *cli, *srv;
	int cli_up, srv_up;
	uint32_t sent, got;   /* client side */
	uint32_t echoed;      /* server side */
	int bad;
	uint8_t msg[256];
	uint8_t echo[256];
};

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct pp *p = arg;

	/* one message in flight at a time: one echo buffer suffices */
	memcpy(p->echo, data, len);
	assert_int_equal(evr_send(c, p->echo, len, NULL, NULL), 0);
	p->echoed++;
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct pp *p = arg;

	(void)c;
	if (len != sizeof(p->msg) || rt_verify(data, len, p->got) >= 0)
		p->bad++;
	p->got++;
}

static void srv_up(evr_conn *c, int status, void *arg)
{
	struct pp *p = arg;

	assert_int_equal(status, 0);
	p->srv = c;
	p->srv_up = 1;
}

static void cli_up(evr_conn *c, int status, void *arg)
{
	struct pp *p = arg;

	assert_int_equal(status, 0);
	p->cli = c;
	p->cli_up = 1;
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = srv_up;
	o.on_recv = srv_recv;
	o.arg = arg;
	assert_int_equal(evr_accept(req, &o, NULL), 0);
}

/* One host-loop wait: returns the number of ready events (0 on timeout). */
static int host_wait(enum host_kind kind, int ep, int fd, int tmo)
{
	if (kind == HOST_POLL) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};

		return poll(&pfd, 1, tmo);
	} else {
		struct epoll_event ev;

		return epoll_wait(ep, &ev, 1, tmo);
	}
}

/* Run the host loop until cond is true; fail on a lost wakeup. */
static void host_run(struct pp *p, enum host_kind kind, int ep, int fd,
		     int (*cond)(struct pp *), int *stalls)
{
	const int cap = 3000; /* ms: far above any round trip here */

	while (!cond(p)) {
		int t = evr_ctx_timeout_ms(p->ctx), n;

		n = host_wait(kind, ep, fd, t < 0 || t > cap ? cap : t);
		if (n == 0 && (t < 0 || t > cap)) {
			/* waited the whole cap with nothing to do: lost */
			(*stalls)++;
			fail_msg("host loop stalled: %u sent, %u echoed back",
				 p->sent, p->got);
		}
		assert_int_equal(evr_ctx_process(p->ctx), 0);
	}
}

static int both_up(struct pp *p)
{
	return p->cli_up && p->srv_up;
}

static int echo_back(struct pp *p)
{
	return p->got == p->sent;
}

static void run_pingpong(enum host_kind kind, int rounds)
{
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct pp *p = calloc(1, sizeof(*p));
	int ep = -1, fd, stalls = 0, i;
	unsigned seed = 12345;
	struct timespec t0, t1;

	rt_ctx_opts(&o);
	o.mode = EVR_MODE_EVENT; /* the fd must carry every wakeup */
	assert_int_equal(evr_ctx_create(&p->ctx, NULL, &o), 0);
	fd = evr_ctx_fd(p->ctx);
	assert_true(fd >= 0);
	assert_int_equal(evr_ctx_fd(p->ctx), fd); /* stable */
	if (kind != HOST_POLL) {
		struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

		if (kind == HOST_EPOLL_ET)
			ev.events |= EPOLLET;
		ep = epoll_create1(EPOLL_CLOEXEC);
		assert_true(ep >= 0);
		assert_int_equal(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev), 0);
	}
	assert_int_equal(evr_listen(p->ctx, rt_addr(), 0, 4, on_accept, p,
				    &p->l),
			 0);
	evr_conn_opts_init(&co);
	co.on_connect = cli_up;
	co.on_recv = cli_recv;
	co.arg = p;
	assert_int_equal(evr_connect(p->ctx, rt_addr(),
				     evr_listener_port(p->l), &co, NULL),
			 0);
	host_run(p, kind, ep, fd, both_up, &stalls);

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 0; i < rounds; i++) {
		/* think time 0..300 us, sometimes none at all */
		unsigned think = (unsigned)rand_r(&seed) % 400;

		if (think < 300)
			usleep(think);
		rt_fill(p->msg, sizeof(p->msg), p->sent);
		assert_int_equal(evr_send(p->cli, p->msg, sizeof(p->msg), NULL,
					  NULL),
				 0);
		p->sent++;
		host_run(p, kind, ep, fd, echo_back, &stalls);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	printf("# %s: %d round trips in %.2f s, %d bad, %d stalls\n",
	       kind == HOST_EPOLL_ET	? "epoll edge-triggered"
	       : kind == HOST_EPOLL_LT ? "epoll level-triggered"
				       : "poll()",
	       rounds,
	       (double)(t1.tv_sec - t0.tv_sec) +
		       (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9,
	       p->bad, stalls);
	assert_int_equal(p->got, (uint32_t)rounds);
	assert_int_equal(p->echoed, (uint32_t)rounds);
	assert_int_equal(p->bad, 0);
	assert_int_equal(stalls, 0);
	if (ep >= 0) {
		epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
		close(ep);
	}
	evr_listener_close(p->l);
	evr_ctx_destroy(p->ctx);
	free(p);
}

static void test_epoll_et(void **state)
{
	(void)state;
	run_pingpong(HOST_EPOLL_ET, 3000);
}

static void test_epoll_lt(void **state)
{
	(void)state;
	run_pingpong(HOST_EPOLL_LT, 1000);
}

static void test_poll(void **state)
{
	(void)state;
	run_pingpong(HOST_POLL, 1000);
}

/* ------------------------------------------------------------------------ */
/* Conn timers on both driving paths                                        */

#define NOBODY "10.77.0.99" /* on rxe0's subnet, and no host answers */
#define TIMER_MS 1000
/* From a timer's expiry to its callback: a loop wakeup, and for a close
 * the flush of the QP.  Seconds, times EVR_TEST_TIMEOUT_SCALE. */
#define TIMER_LATE 0.3

/* Check that a timer of TIMER_MS ended a wait of dt seconds on time: never
 * early (1 ms for clock rounding), and late by at most TIMER_LATE. */
static void check_timer_bound(const char *what, enum rt_path path, double dt)
{
	double bound = TIMER_MS / 1000.0;

	printf("# %s: %s after %.3f s (bound %.3f s)\n", rt_path_name(path),
	       what, dt, bound);
	if (dt < bound - 0.001 ||
	    dt > bound + TIMER_LATE * rt_timeout_scale())
		fail_msg("%s: %s after %.3f s, outside [%.3f, %.3f] s",
			 rt_path_name(path), what, dt, bound,
			 bound + TIMER_LATE * rt_timeout_scale());
}

/* A callback's status, with the errno names in the message. */
#define assert_status(got, want)                                              \
	do {                                                                  \
		if ((got) != (want))                                          \
			fail_msg("%s is %s, expected %s", #got,               \
				 evr_err_name(got), evr_err_name(want));      \
	} while (0)

struct tmo_side {
	struct rt_side s;
	double at; /* rt_now() of on_connect */
};

static void tmo_connected(evr_conn *c, int status, void *arg)
{
	struct tmo_side *t = arg;

	t->at = rt_now();
	rt_side_connect(c, status, &t->s);
}

static void tmo_closed(evr_conn *c, int status, void *arg)
{
	struct tmo_side *t = arg;

	rt_side_close(c, status, &t->s);
}

static int tmo_connected_pred(void *arg)
{
	return ((struct tmo_side *)arg)->s.connects > 0;
}

/* A connect nobody answers (not even ARP: the subnet's device is a dummy)
 * ends after the ctx's connect_timeout_ms with -ETIMEDOUT. */
static void run_connect_timeout(enum rt_path path)
{
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct tmo_side t = {0};
	struct rt_drv d;
	evr_ctx *ctx;
	double t0;

	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	o.connect_timeout_ms = TIMER_MS;
	/* the request goes out (no ARP on the dummy device): the wait for
	 * its answer has the same bound */
	o.connect_reply_ms = TIMER_MS;
	ctx = rt_drv_ctx(&d, &o);
	evr_conn_opts_init(&co);
	co.on_connect = tmo_connected;
	co.on_close = tmo_closed;
	co.arg = &t;
	t0 = rt_now();
	assert_int_equal(evr_connect(ctx, NOBODY, 7471, &co, NULL), 0);
	if (rt_drv_run_until(&d, tmo_connected_pred, &t, 10))
		fail_msg("%s: no on_connect in 10 s", rt_path_name(path));
	assert_status(t.s.connect_status, -ETIMEDOUT);
	check_timer_bound("connect -ETIMEDOUT", path, t.at - t0);
	rt_drv_run_for(&d, 0.2);
	assert_int_equal(t.s.connects, 1);
	assert_int_equal(t.s.closes, 0);
	rt_drv_detach(&d);
	evr_ctx_destroy(ctx);
	rt_drv_fini(&d);
}

static void test_connect_timeout_libev(void **state)
{
	(void)state;
	run_connect_timeout(RT_LIBEV);
}

static void test_connect_timeout_embed(void **state)
{
	(void)state;
	run_connect_timeout(RT_EMBED);
}

#define NSENDS 100
#define SLEN 64

/* A close that cannot finish: the server keeps (evr_conn_hold) every
 * message it gets, so no receive is re-posted and no credit comes back;
 * the client's sends beyond its credits stay queued, and a graceful close
 * waits for them. */
struct stuck {
	struct rt_pair *p;
	evr_msg *held[NSENDS];
	unsigned nheld, bad;
	uint8_t msgs[NSENDS][SLEN];
	unsigned done, ok, timedout, other; /* the client's send callbacks */
	unsigned done_at_close;		     /* of them, before on_close */
	double closed_at;		     /* rt_now() of on_close */
};

static void stuck_hold(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct stuck *st = s->user;
	evr_msg *m;

	assert_true(st->nheld < NSENDS);
	if (len != SLEN || rt_verify(data, len, st->nheld) >= 0)
		st->bad++;
	m = evr_conn_hold(c);
	assert_non_null(m);
	st->held[st->nheld++] = m;
}

static void stuck_sent(evr_conn *c, int status, void *arg)
{
	struct stuck *st = arg;

	(void)c;
	st->done++;
	if (status == 0)
		st->ok++;
	else if (status == -ETIMEDOUT)
		st->timedout++;
	else
		st->other++;
}

static void stuck_closed(evr_conn *c, int status, void *arg)
{
	struct rt_side *s = arg;
	struct stuck *st = s->user;

	st->closed_at = rt_now();
	st->done_at_close = st->done;
	rt_side_close(c, status, s);
}

/* Everything the server got is held and completed at the client, and the
 * rest waits in the client's queue: nothing is in flight. */
static int stuck_pred(void *arg)
{
	struct stuck *st = arg;
	struct evr_conn_info info;

	assert_int_equal(evr_conn_info(st->p->cli.conn, &info), 0);
	return st->nheld > 0 && st->ok == st->nheld &&
	       info.queued_bytes == (size_t)(NSENDS - st->nheld) * SLEN;
}

static int cli_closed_pred(void *arg)
{
	return ((struct rt_pair *)arg)->cli.closes > 0;
}

static int srv_closed_pred(void *arg)
{
	return ((struct rt_pair *)arg)->srv.closes > 0;
}

/*
 * A graceful close that does not finish within close_timeout_ms is
 * aborted: on_close fires with -ETIMEDOUT, close_timeout_ms after
 * evr_conn_close(), after every send callback -- those the peer received
 * with 0, those still queued with -ETIMEDOUT.  The peer, which got no
 * goodbye, sees -ECONNRESET.
 */
static void run_close_timeout(enum rt_path path)
{
	struct evr_ctx_opts o;
	struct stuck *st = calloc(1, sizeof(*st));
	struct rt_drv d;
	struct rt_pair p;
	unsigned i, got;
	double t0;

	assert_non_null(st);
	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	o.close_timeout_ms = TIMER_MS;
	o.keepalive_ms = 0; /* no tick: only the close bound wakes the host */
	rt_pair_init(&p, rt_drv_loop(&d), &o);
	rt_drv_attach(&d, p.ctx);
	st->p = &p;
	p.cli.user = p.srv.user = st;
	p.srv_opts.on_recv = stuck_hold;
	p.cli_opts.on_close = stuck_closed;
	rt_drv_pair_connect(&d, &p);
	for (i = 0; i < NSENDS; i++) {
		rt_fill(st->msgs[i], SLEN, i);
		assert_int_equal(evr_send(p.cli.conn, st->msgs[i], SLEN,
					  stuck_sent, st),
				 0);
	}
	assert_int_equal(rt_drv_run_until(&d, stuck_pred, st, 10), 0);
	got = st->nheld;
	rt_drv_run_for(&d, 0.2); /* and it stays so */
	assert_int_equal(st->nheld, got);
	assert_int_equal(st->done, got);
	assert_true(got < NSENDS);
	printf("# %s: %u of %u messages held by the peer, the rest queued\n",
	       rt_path_name(path), got, NSENDS);

	t0 = rt_now();
	assert_int_equal(evr_conn_close(p.cli.conn, 0), 0);
	if (rt_drv_run_until(&d, cli_closed_pred, &p, 10))
		fail_msg("%s: no on_close in 10 s", rt_path_name(path));
	assert_status(p.cli.close_status, -ETIMEDOUT);
	check_timer_bound("close on_close -ETIMEDOUT", path,
			  st->closed_at - t0);
	printf("# %s: send callbacks %u ok, %u -ETIMEDOUT, %u other, %u "
	       "before on_close\n",
	       rt_path_name(path), st->ok, st->timedout, st->other,
	       st->done_at_close);
	assert_int_equal(st->done_at_close, NSENDS);
	assert_int_equal(st->ok, got);
	assert_int_equal(st->timedout, NSENDS - got);
	assert_int_equal(st->other, 0);
	assert_int_equal(st->nheld, got);
	assert_int_equal(st->bad, 0);

	assert_int_equal(rt_drv_run_until(&d, srv_closed_pred, &p, 10), 0);
	assert_status(p.srv.close_status, -ECONNRESET);
	rt_drv_run_for(&d, 0.2);
	assert_int_equal(p.cli.closes, 1);
	assert_int_equal(p.srv.closes, 1);
	assert_int_equal(st->done, NSENDS);
	for (i = 0; i < st->nheld; i++)
		evr_msg_release(st->held[i]);
	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
	free(st);
}

static void test_close_timeout_libev(void **state)
{
	(void)state;
	run_close_timeout(RT_LIBEV);
}

static void test_close_timeout_embed(void **state)
{
	(void)state;
	run_close_timeout(RT_EMBED);
}

/* The calls refuse a ctx that runs on the user's own libev loop. */
static void test_user_loop_has_no_fd(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	evr_ctx *ctx;

	(void)state;
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&ctx, loop, &o), 0);
	assert_int_equal(evr_ctx_fd(ctx), -EINVAL);
	assert_int_equal(evr_ctx_process(ctx), -EINVAL);
	evr_ctx_destroy(ctx);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_epoll_et),
		cmocka_unit_test(test_epoll_lt),
		cmocka_unit_test(test_poll),
		cmocka_unit_test(test_user_loop_has_no_fd),
		cmocka_unit_test(test_connect_timeout_libev),
		cmocka_unit_test(test_connect_timeout_embed),
		cmocka_unit_test(test_close_timeout_libev),
		cmocka_unit_test(test_close_timeout_embed),
	};

	rt_init(600);
	return cmocka_run_group_tests_name("rdma_embed", tests, NULL, NULL);
}
