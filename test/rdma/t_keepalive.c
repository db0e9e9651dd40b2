/*
 * Keepalive and transport bounds on one host.  An idle connection sends
 * probes (zero-length RDMA WRITEs) that the peer's device acknowledges, so
 * it stays up through many idle periods, with no callback fired and no
 * message lost after it; a busy connection sends none; keepalive can be
 * turned off per connection; and the transport options are validated.
 * (A peer that really goes silent needs a second host: see the two-host
 * tests.)
 */
#include "rt_pair.h"

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

static void run_idle(int cli_keepalive, unsigned *probes, int *closes)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	struct evr_stats st0, st1;
	struct count n = {0};
	struct rt_pair p;

	rt_ctx_opts(&o);
	o.keepalive_ms = 200;
	o.keepalive_timeout_ms = 1000;
	rt_pair_init(&p, loop, &o);
	p.srv.user = &n;
	p.srv_opts.on_recv = on_recv;
	p.cli_opts.keepalive_ms = cli_keepalive;
	p.srv_opts.keepalive_ms = cli_keepalive;
	rt_pair_connect(&p);
	evr_ctx_stats(p.ctx, &st0);
	rt_run_for(loop, 2.0); /* ten idle periods */
	evr_ctx_stats(p.ctx, &st1);
	*probes = (unsigned)(st1.keepalive_probes - st0.keepalive_probes);
	*closes = p.cli.closes + p.srv.closes;
	/* still fine afterwards */
	assert_int_equal(evr_send(p.cli.conn, "hello", 5, NULL, NULL), 0);
	assert_int_equal(rt_run_until(loop, got_one, &n, 10), 0);
	rt_pair_close(&p);
	assert_int_equal(p.cli.close_status, 0);
	rt_pair_fini(&p);
	ev_loop_destroy(loop);
}

static void test_idle_probes(void **state)
{
	unsigned probes;
	int closes;

	(void)state;
	run_idle(0, &probes, &closes);
	printf("# keepalive 200 ms, idle 2 s: %u probes, %d closes\n",
	       probes, closes);
	/* both ends probe about every 200-300 ms */
	assert_true(probes >= 8);
	assert_true(probes <= 30);
	assert_int_equal(closes, 0);
}

static void test_off_per_conn(void **state)
{
	unsigned probes;
	int closes;

	(void)state;
	run_idle(-1, &probes, &closes);
	assert_int_equal(probes, 0);
	assert_int_equal(closes, 0);
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
		cmocka_unit_test(test_idle_probes),
		cmocka_unit_test(test_off_per_conn),
		cmocka_unit_test(test_busy_no_probes),
		cmocka_unit_test(test_bad_transport_opts),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_keepalive", tests, NULL,
					   NULL);
}
