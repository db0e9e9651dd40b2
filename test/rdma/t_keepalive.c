/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Keepalive and transport bounds on one host.  An idle connection sends
 * probes (zero-length RDMA WRITEs) that the peer's device acknowledges, so
 * it stays up through many idle periods, with no callback fired and no
 * message lost after it; a busy connection sends none; keepalive can be
 * set or turned off per connection; it sends no probe once the peer's BYE
 * arrived, and a peer that said BYE and then went silent ends the conn
 * with -ESHUTDOWN; and the transport options are validated.  The
 * keepalive cases run on both driving paths: on a libev loop, and
 * embedded in a host loop that sleeps as evr_ctx_timeout_ms() says
 * (rt_drive.h) -- the keepalive tick is a timer no fd announces.
 * (A peer that really goes silent needs a second host: see the two-host
 * tests.)
 */
#include "rt_drive.h"

#include <stdbool.h>

struct count {
	int got;
};

static void on_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct count *n = s->user;

	(void)c;
	if (len == 5 && !memcmp(data, "hello", 5))
		n->got++;
}

static int got_one(void *arg)
{
	return ((struct count *)arg)->got >= 1;
}

struct idle_case {
	enum rt_path path;
	unsigned ctx_ka; /* evr_ctx_opts.keepalive_ms */
	int cli_ka;	 /* evr_conn_opts.keepalive_ms of the client */
	double window;	 /* seconds idle */
	unsigned probes; /* out: probes sent in the window */
	int closes;	 /* out: on_close calls in the window */
};

/*
 * A pair on one ctx, idle for c->window seconds.  Only the client's conn
 * may probe (the server's has keepalive off), so the ctx's probe count is
 * the client's.  Afterwards a message still goes through and the graceful
 * close still works.
 */
static void run_idle(struct idle_case *c)
{
	struct evr_ctx_opts o;
	struct evr_stats st0, st1;
	struct count n = {0};
	struct rt_drv d;
	struct rt_pair p;

	rt_drv_init(&d, c->path);
	rt_ctx_opts(&o);
	o.keepalive_ms = c->ctx_ka;
	rt_pair_init(&p, rt_drv_loop(&d), &o);
	rt_drv_attach(&d, p.ctx);
	p.srv.user = &n;
	p.srv_opts.on_recv = on_recv;
	p.cli_opts.keepalive_ms = c->cli_ka;
	p.srv_opts.keepalive_ms = -1;
	rt_drv_pair_connect(&d, &p);
	evr_ctx_stats(p.ctx, &st0);
	rt_drv_run_for(&d, c->window);
	evr_ctx_stats(p.ctx, &st1);
	c->probes = (unsigned)(st1.keepalive_probes - st0.keepalive_probes);
	c->closes = p.cli.closes + p.srv.closes;
	/* still fine afterwards */
	assert_int_equal(evr_send(p.cli.conn, "hello", 5, NULL, NULL), 0);
	assert_int_equal(rt_drv_run_until(&d, got_one, &n, 10), 0);
	rt_drv_pair_close(&d, &p);
	assert_int_equal(p.cli.close_status, 0);
	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
}

/*
 * The documented rule: a probe goes out between 1 and 1.5 idle times after
 * the last sign of life -- and the completion of a probe is one.  Over
 * `window` seconds an idle conn thus sends at least window / (1.5 idle)
 * probes, rounded down, and at most window / idle.  A probe's round trip
 * (post, the peer's acknowledgement, its completion event) adds to each
 * cycle: 20 ms per cycle times EVR_TEST_TIMEOUT_SCALE (negligible at
 * scale 1; 0.4 s a cycle under valgrind's default scale of 20, which still
 * wants 4 probes in 5 s where a keepalive that does not tick sends 1).
 */
static void check_probes(const struct idle_case *c, unsigned idle_ms)
{
	double idle = idle_ms / 1000.0;
	double rtt = 0.020 * rt_timeout_scale();
	unsigned lo = (unsigned)(c->window / (1.5 * idle + rtt));
	unsigned hi = (unsigned)(c->window / idle);

	printf("# %s: keepalive %u ms, idle %.1f s: %u probes (rule: "
	       "%u..%u), %d closes\n",
	       rt_path_name(c->path), idle_ms, c->window, c->probes, lo, hi,
	       c->closes);
	assert_in_range(c->probes, lo, hi);
	assert_int_equal(c->closes, 0);
}

/* The ctx's keepalive_ms, taken by a conn that sets none. */
static void run_ctx_default(enum rt_path path)
{
	struct idle_case c = {path, 500, 0, 5.0, 0, 0};

	run_idle(&c);
	check_probes(&c, 500);
}

static void test_idle_probes_libev(void **state)
{
	(void)state;
	run_ctx_default(RT_LIBEV);
}

static void test_idle_probes_embed(void **state)
{
	(void)state;
	run_ctx_default(RT_EMBED);
}

/* A positive evr_conn_opts.keepalive_ms overrides the ctx's: with the ctx
 * at 60 s, not one probe would go out in the window. */
static void run_per_conn(enum rt_path path)
{
	struct idle_case c = {path, 60000, 500, 5.0, 0, 0};

	run_idle(&c);
	check_probes(&c, 500);
}

static void test_per_conn_libev(void **state)
{
	(void)state;
	run_per_conn(RT_LIBEV);
}

static void test_per_conn_embed(void **state)
{
	(void)state;
	run_per_conn(RT_EMBED);
}

/* keepalive_ms -1 turns it off for the conn, whatever the ctx's. */
static void run_off_per_conn(enum rt_path path)
{
	struct idle_case c = {path, 200, -1, 1.0, 0, 0};

	run_idle(&c);
	printf("# %s: keepalive off, idle %.1f s: %u probes\n",
	       rt_path_name(path), c.window, c.probes);
	assert_int_equal(c.probes, 0);
	assert_int_equal(c.closes, 0);
}

static void test_off_per_conn_libev(void **state)
{
	(void)state;
	run_off_per_conn(RT_LIBEV);
}

static void test_off_per_conn_embed(void **state)
{
	(void)state;
	run_off_per_conn(RT_EMBED);
}

struct busy {
	struct rt_side *cli;
	uint32_t sent, got;
	uint8_t buf[8][64];
};

static void busy_pump(struct busy *b)
{
	/* b->cli is NULL once the test stops pumping: echoes still in
	 * flight may arrive while the close drains */
	while (b->cli && b->cli->conn && b->sent < b->got + 4) {
		assert_int_equal(evr_send(b->cli->conn, b->buf[b->sent % 8],
					  64, NULL, NULL),
				 0);
		b->sent++;
	}
}

static void busy_echo(evr_conn *c, const void *data, size_t len, void *arg)
{
	static uint8_t e[8][64];
	static unsigned i;
	uint8_t *buf = e[i++ % 8];

	(void)arg;
	memcpy(buf, data, len);
	assert_int_equal(evr_send(c, buf, len, NULL, NULL), 0);
}

static void busy_back(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct busy *b = s->user;

	(void)c;
	(void)data;
	(void)len;
	b->got++;
	busy_pump(b);
}

/* A pair in back-to-back ping-pong, four messages in flight, for 7.5
 * keepalive times: not one probe goes out. */
static void run_busy(enum rt_path path)
{
	struct evr_ctx_opts o;
	struct evr_stats st0, st1;
	struct busy b = {0};
	struct rt_drv d;
	struct rt_pair p;
	double secs;

	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	/* a slow run (valgrind) may take a while for a round trip: no
	 * probe may fall due within one */
	o.keepalive_ms = (unsigned)(200 * rt_timeout_scale());
	secs = 7.5 * o.keepalive_ms / 1000.0;
	rt_pair_init(&p, rt_drv_loop(&d), &o);
	rt_drv_attach(&d, p.ctx);
	b.cli = &p.cli;
	p.cli.user = &b;
	p.cli_opts.on_recv = busy_back;
	p.srv_opts.on_recv = busy_echo;
	rt_drv_pair_connect(&d, &p);
	evr_ctx_stats(p.ctx, &st0);
	busy_pump(&b);
	rt_drv_run_for(&d, secs);
	evr_ctx_stats(p.ctx, &st1);
	printf(
	    "# %s: busy %.1f s: %u round trips, %llu probes\n",
	    rt_path_name(path), secs, b.got,
	    (unsigned long long)(st1.keepalive_probes - st0.keepalive_probes));
	assert_true(b.got > 100);
	assert_int_equal(st1.keepalive_probes - st0.keepalive_probes, 0);
	b.cli = NULL; /* stop pumping */
	rt_drv_pair_close(&d, &p);
	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
}

static void test_busy_no_probes_libev(void **state)
{
	(void)state;
	run_busy(RT_LIBEV);
}

static void test_busy_no_probes_embed(void **state)
{
	(void)state;
	run_busy(RT_EMBED);
}

/* ---- after the peer's BYE ---- */

/* What a conn with keepalive on sees of a peer that closes: the idle time
 * and probe timeout (ms) of the keepalive ctx.  Both grow with
 * EVR_TEST_TIMEOUT_SCALE: what the tests below tell apart (a close, a
 * BYE, a probe) must each take less than the idle time, and under
 * valgrind 200 ms are a few loop steps. */
#define BYE_IDLE_MS    200
#define BYE_TIMEOUT_MS 400

static unsigned bye_ms(unsigned ms)
{
	return (unsigned)(ms * rt_timeout_scale());
}

static void bye_ctx_opts(struct evr_ctx_opts *o)
{
	rt_ctx_opts(o);
	o->keepalive_ms = bye_ms(BYE_IDLE_MS);
	o->keepalive_timeout_ms = bye_ms(BYE_TIMEOUT_MS);
}

/*
 * The usual graceful close.  The server probes while the pair is idle; a
 * message then makes its conn busy, so no probe is due when the client
 * closes right after it, and none may go out from the BYE to the
 * DISCONNECTED event.  The server ends with -ESHUTDOWN, once.  (A close
 * that took longer than the idle time to bring the BYE over would let a
 * probe fall due before it.)
 */
static void run_bye_close(enum rt_path path)
{
	struct evr_ctx_opts o;
	struct evr_stats st0, st1;
	struct count n = {0};
	struct rt_drv d;
	struct rt_pair p;

	rt_drv_init(&d, path);
	bye_ctx_opts(&o);
	rt_pair_init(&p, rt_drv_loop(&d), &o);
	rt_drv_attach(&d, p.ctx);
	p.srv.user = &n;
	p.srv_opts.on_recv = on_recv;
	p.cli_opts.keepalive_ms = -1; /* the ctx's probes are the server's */
	rt_drv_pair_connect(&d, &p);
	/* the first probe is out by 1.5 x the idle time */
	rt_drv_run_for(&d, 3 * o.keepalive_ms / 1000.0);
	evr_ctx_stats(p.ctx, &st0);
	assert_true(st0.keepalive_probes >= 1); /* keepalive is on */
	assert_int_equal(evr_send(p.cli.conn, "hello", 5, NULL, NULL), 0);
	assert_int_equal(rt_drv_run_until(&d, got_one, &n, 10), 0);
	evr_ctx_stats(p.ctx, &st0);
	assert_int_equal(evr_conn_close(p.cli.conn, 0), 0);
	assert_int_equal(rt_drv_run_until(&d, rt_pair_closed_pred, &p, 20), 0);
	evr_ctx_stats(p.ctx, &st1);
	printf(
	    "# %s: graceful close: server status %s, %llu probes after "
	    "the close\n",
	    rt_path_name(path), evr_err_name(p.srv.close_status),
	    (unsigned long long)(st1.keepalive_probes - st0.keepalive_probes));
	assert_int_equal(p.cli.closes, 1);
	assert_int_equal(p.cli.close_status, 0);
	assert_int_equal(p.srv.closes, 1);
	assert_int_equal(p.srv.close_status, -ESHUTDOWN);
	assert_int_equal(st1.keepalive_probes, st0.keepalive_probes);
	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
}

static void test_bye_close_libev(void **state)
{
	(void)state;
	run_bye_close(RT_LIBEV);
}

static void test_bye_close_embed(void **state)
{
	(void)state;
	run_bye_close(RT_EMBED);
}

/*
 * A peer that says BYE and then goes silent without disconnecting.  It is
 * the server, on a ctx of its own, embedded and stepped by hand: it closes
 * its conn from on_connect, which runs from the rdma_cm channel, so the
 * step that posts the BYE polls no completion queue; after it, its ctx is
 * never stepped again.  Its QP stays up (its device would acknowledge
 * probes), but it never sees its BYE complete, so it never disconnects.
 */
struct silent {
	struct rt_drv *d; /* drives the client, and wakes for the peer */
	struct rt_pair *p;
	evr_ctx *ctx;	  /* the peer's */
	int fd;		  /* its evr_ctx_fd() */
	ev_io w;	  /* RT_LIBEV: the watch on fd */
	bool watched;	  /* the driver wakes for fd */
	bool frozen;	  /* its BYE is on its way: never stepped again */
	double frozen_at; /* rt_now() then */
};

static void silent_watch(struct silent *s, bool on)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = s->fd};

	if (s->watched == on)
		return;
	s->watched = on;
	if (s->d->path == RT_LIBEV) {
		if (on)
			ev_io_start(s->d->loop, &s->w);
		else
			ev_io_stop(s->d->loop, &s->w);
		return;
	}
	assert_int_equal(
	    epoll_ctl(s->d->ep, on ? EPOLL_CTL_ADD : EPOLL_CTL_DEL, s->fd, &ev),
	    0);
}

/* Run the peer's ctx as an embedding host would, until it froze. */
static void silent_step(struct silent *s)
{
	int i;

	for (i = 0; i < 16 && !s->frozen; i++) {
		assert_int_equal(evr_ctx_process(s->ctx), 0);
		if (evr_ctx_timeout_ms(s->ctx) != 0)
			break;
	}
	if (s->frozen)
		silent_watch(s, false);
}

static void silent_io(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	silent_step(w->data);
}

static void silent_connect(evr_conn *c, int status, void *arg)
{
	struct rt_side *side = arg;
	struct silent *s = side->user;

	rt_side_connect(c, status, arg);
	if (status)
		return;
	assert_int_equal(evr_conn_close(c, 0), 0);
	s->frozen = true;
	s->frozen_at = rt_now();
}

static int silent_up(void *arg)
{
	struct silent *s = arg;

	silent_step(s);
	return rt_pair_up_pred(s->p);
}

static int cli_closed(void *arg)
{
	return ((struct rt_pair *)arg)->cli.closes > 0;
}

/*
 * The client, with keepalive on, gets the BYE right after it connected,
 * and from then on nothing.  It must send no probe (one would be
 * acknowledged, and keep it up as long as the peer's QP lives), and end
 * with -ESHUTDOWN once the peer was silent for the idle time plus the
 * probe timeout: at the first keepalive tick after that, ticks coming
 * every idle / 2.
 */
static void run_bye_silent(enum rt_path path)
{
	const double idle = bye_ms(BYE_IDLE_MS) / 1000.0;
	const double timeout = bye_ms(BYE_TIMEOUT_MS) / 1000.0;
	struct evr_ctx_opts o;
	struct evr_stats st0, st1;
	struct silent s = {0};
	struct rt_drv d;
	struct rt_pair p;
	double took;

	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	rt_pair_init(&p, NULL, &o); /* the peer: the server, embedded */
	bye_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&p.cctx, rt_drv_loop(&d), &o), 0);
	rt_drv_attach(&d, p.cctx);
	s.d = &d;
	s.p = &p;
	s.ctx = p.ctx;
	s.fd = evr_ctx_fd(p.ctx);
	assert_true(s.fd >= 0);
	ev_io_init(&s.w, silent_io, s.fd, EV_READ);
	s.w.data = &s;
	silent_watch(&s, true);
	p.srv.user = &s;
	p.srv_opts.on_connect = silent_connect;
	p.srv_opts.keepalive_ms = -1;

	evr_ctx_stats(p.cctx, &st0);
	assert_int_equal(evr_connect(p.cctx, rt_addr(), evr_listener_port(p.l),
				     &p.cli_opts, NULL),
			 0);
	assert_int_equal(rt_drv_run_until(&d, silent_up, &s, 20), 0);
	assert_int_equal(p.cli.connect_status, 0);
	assert_int_equal(p.srv.connect_status, 0);
	assert_true(s.frozen);
	assert_false(s.watched);

	/* without the BYE's rule it would probe and stay up: bound the wait
	 * well past when it should end (idle and timeout are scaled) */
	assert_int_equal(
	    rt_drv_run_until_exact(&d, cli_closed, &p,
				   3 * (idle + timeout) + rt_timeout_scale()),
	    0);
	took = rt_now() - s.frozen_at;
	evr_ctx_stats(p.cctx, &st1);
	printf(
	    "# %s: peer silent after its BYE: client status %s after "
	    "%.2f s (rule: %.2f..%.2f), %llu probes\n",
	    rt_path_name(path), evr_err_name(p.cli.close_status), took,
	    idle + timeout, 1.5 * idle + timeout,
	    (unsigned long long)(st1.keepalive_probes - st0.keepalive_probes));
	assert_int_equal(p.cli.closes, 1);
	assert_int_equal(p.cli.close_status, -ESHUTDOWN);
	assert_int_equal(st1.keepalive_probes, st0.keepalive_probes);
	/* not before the silence lasted idle + timeout (the BYE came after
	 * frozen_at; a little slack for two clocks), and at the first tick
	 * after, plus the time a loaded or slow run takes to notice */
	assert_true(took >= idle + timeout - 0.02);
	assert_true(took <= 1.5 * idle + timeout + 0.5 * rt_timeout_scale());
	assert_int_equal(p.srv.closes, 0); /* the peer never ran again */

	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
}

static void test_bye_silent_libev(void **state)
{
	(void)state;
	run_bye_silent(RT_LIBEV);
}

static void test_bye_silent_embed(void **state)
{
	(void)state;
	run_bye_silent(RT_EMBED);
}

static void test_bad_transport_opts(void **state)
{
	struct evr_ctx_opts o;
	evr_ctx *ctx;

	(void)state;
	rt_ctx_opts(&o);
	o.retry_count = 7; /* "forever" on some providers: refused */
	assert_int_equal(evr_ctx_create(&ctx, NULL, &o), -EINVAL);
	rt_ctx_opts(&o);
	o.ack_timeout = 32;
	assert_int_equal(evr_ctx_create(&ctx, NULL, &o), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_idle_probes_libev),
	    cmocka_unit_test(test_idle_probes_embed),
	    cmocka_unit_test(test_per_conn_libev),
	    cmocka_unit_test(test_per_conn_embed),
	    cmocka_unit_test(test_off_per_conn_libev),
	    cmocka_unit_test(test_off_per_conn_embed),
	    cmocka_unit_test(test_busy_no_probes_libev),
	    cmocka_unit_test(test_busy_no_probes_embed),
	    cmocka_unit_test(test_bye_close_libev),
	    cmocka_unit_test(test_bye_close_embed),
	    cmocka_unit_test(test_bye_silent_libev),
	    cmocka_unit_test(test_bye_silent_embed),
	    cmocka_unit_test(test_bad_transport_opts),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_keepalive", tests, NULL,
					   NULL);
}
