/*
 * Keepalive and transport bounds on one host.  An idle connection sends
 * probes (zero-length RDMA WRITEs) that the peer's device acknowledges, so
 * it stays up through many idle periods, with no callback fired and no
 * message lost after it; a busy connection sends none; keepalive can be
 * set or turned off per connection; and the transport options are
 * validated.  The keepalive cases run on both driving paths: on a libev
 * loop, and embedded in a host loop that sleeps as evr_ctx_timeout_ms()
 * says (rt_drive.h) -- the keepalive tick is a timer no fd announces.
 * (A peer that really goes silent needs a second host: see the two-host
 * tests.)
 */
#include "rt_drive.h"

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

static void test_busy_no_probes(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	struct evr_stats st0, st1;
	struct busy b = {0};
	struct rt_pair p;

	(void)state;
	rt_ctx_opts(&o);
	o.keepalive_ms = 200;
	rt_pair_init(&p, loop, &o);
	b.cli = &p.cli;
	p.cli.user = &b;
	p.cli_opts.on_recv = busy_back;
	p.srv_opts.on_recv = busy_echo;
	rt_pair_connect(&p);
	evr_ctx_stats(p.ctx, &st0);
	busy_pump(&b);
	rt_run_for(loop, 1.5);
	evr_ctx_stats(p.ctx, &st1);
	printf("# busy 1.5 s: %u round trips, %llu probes\n", b.got,
	       (unsigned long long)(st1.keepalive_probes -
				    st0.keepalive_probes));
	assert_true(b.got > 100);
	assert_int_equal(st1.keepalive_probes - st0.keepalive_probes, 0);
	b.cli = NULL; /* stop pumping */
	rt_pair_close(&p);
	rt_pair_fini(&p);
	ev_loop_destroy(loop);
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
		cmocka_unit_test(test_busy_no_probes),
		cmocka_unit_test(test_bad_transport_opts),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_keepalive", tests, NULL,
					   NULL);
}
