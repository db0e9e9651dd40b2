/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The embedding contract in libuv: a uv_poll_t on evr_ctx_fd() plus a
 * uv_timer_t re-armed from evr_ctx_timeout_ms() before the loop sleeps
 * (a uv_prepare_t), as evrdma(7) describes.  A client and a server
 * connection in one embedded ctx ping-pong with think time between round
 * trips driven by libuv timers; a stall (no progress for seconds while a
 * message is in flight) fails the test.
 * Built without libuv (configure did not find it), the test reports SKIP
 * and says so; a CI run fails on that (test/rdma/run-suite).
 */
#include "rt.h"

#ifdef EVR_HAVE_LIBUV
#include <uv.h>

struct app {
	uv_loop_t loop;
	uv_poll_t poll;
	uv_timer_t evr_timer, think, watchdog;
	uv_prepare_t prep;
	evr_ctx *ctx;
	evr_listener *l;
	evr_conn *cli;
	int up, srv_up;
	uint32_t sent, got, rounds, bad, stalls, last_got;
	uint8_t msg[300], echo[300];
	unsigned seed;
};

static void process(struct app *a)
{
	assert_int_equal(evr_ctx_process(a->ctx), 0);
}

static void on_poll(uv_poll_t *h, int status, int events)
{
	(void)status;
	(void)events;
	process(h->data);
}

static void on_evr_timer(uv_timer_t *t)
{
	process(t->data);
}

/* Before libuv sleeps: hand evrdma's deadline to a uv timer. */
static void on_prepare(uv_prepare_t *p)
{
	struct app *a = p->data;
	int t = evr_ctx_timeout_ms(a->ctx);

	uv_timer_stop(&a->evr_timer);
	if (t >= 0)
		uv_timer_start(&a->evr_timer, on_evr_timer, (uint64_t)t, 0);
}

static void send_next(struct app *a)
{
	rt_fill(a->msg, sizeof(a->msg), a->sent);
	assert_int_equal(evr_send(a->cli, a->msg, sizeof(a->msg), NULL, NULL),
			 0);
	a->sent++;
}

static void on_think(uv_timer_t *t)
{
	send_next(t->data);
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct app *a = arg;

	memcpy(a->echo, data, len);
	assert_int_equal(evr_send(c, a->echo, len, NULL, NULL), 0);
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct app *a = arg;

	(void)c;
	if (len != sizeof(a->msg) || rt_verify(data, len, a->got) >= 0)
		a->bad++;
	a->got++;
	if (a->got == a->rounds) {
		uv_stop(&a->loop);
		return;
	}
	/* think 0..2 ms, sometimes none */
	uv_timer_start(&a->think, on_think, rand_r(&a->seed) % 3, 0);
}

static void srv_up(evr_conn *c, int status, void *arg)
{
	(void)c;
	assert_int_equal(status, 0);
	((struct app *)arg)->srv_up = 1;
}

static void cli_up(evr_conn *c, int status, void *arg)
{
	struct app *a = arg;

	assert_int_equal(status, 0);
	a->cli = c;
	a->up = 1;
	send_next(a);
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

static void on_watchdog(uv_timer_t *t)
{
	struct app *a = t->data;

	if (a->got == a->last_got && a->got < a->rounds) {
		a->stalls++;
		uv_stop(&a->loop);
	}
	a->last_got = a->got;
}

static void test_libuv(void **state)
{
	struct app *a = calloc(1, sizeof(*a));
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	uint64_t wd;
	int fd;

	(void)state;
	a->rounds = 2000;
	a->seed = 7;
	assert_int_equal(uv_loop_init(&a->loop), 0);
	rt_ctx_opts(&o);
	o.mode = EVR_MODE_EVENT;
	assert_int_equal(evr_ctx_create(&a->ctx, NULL, &o), 0);
	fd = evr_ctx_fd(a->ctx);
	assert_true(fd >= 0);
	uv_poll_init(&a->loop, &a->poll, fd);
	a->poll.data = a;
	uv_poll_start(&a->poll, UV_READABLE, on_poll);
	uv_timer_init(&a->loop, &a->evr_timer);
	a->evr_timer.data = a;
	uv_timer_init(&a->loop, &a->think);
	a->think.data = a;
	uv_timer_init(&a->loop, &a->watchdog);
	a->watchdog.data = a;
	/* slow runs get longer; the first period also covers connecting */
	wd = (uint64_t)(10000 * rt_timeout_scale());
	uv_timer_start(&a->watchdog, on_watchdog, wd, wd);
	uv_prepare_init(&a->loop, &a->prep);
	a->prep.data = a;
	uv_prepare_start(&a->prep, on_prepare);

	assert_int_equal(evr_listen(a->ctx, rt_addr(), 0, 4, on_accept, a,
				    &a->l),
			 0);
	evr_conn_opts_init(&co);
	co.on_connect = cli_up;
	co.on_recv = cli_recv;
	co.arg = a;
	assert_int_equal(evr_connect(a->ctx, rt_addr(),
				     evr_listener_port(a->l), &co, NULL),
			 0);
	uv_run(&a->loop, UV_RUN_DEFAULT);
	printf("# libuv: %u round trips, %u bad, %u stalls\n", a->got, a->bad,
	       a->stalls);
	assert_int_equal(a->stalls, 0);
	assert_int_equal(a->got, a->rounds);
	assert_int_equal(a->bad, 0);

	uv_poll_stop(&a->poll);
	uv_close((uv_handle_t *)&a->poll, NULL);
	uv_close((uv_handle_t *)&a->evr_timer, NULL);
	uv_close((uv_handle_t *)&a->think, NULL);
	uv_close((uv_handle_t *)&a->watchdog, NULL);
	uv_close((uv_handle_t *)&a->prep, NULL);
	uv_run(&a->loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&a->loop), 0);
	evr_listener_close(a->l);
	evr_ctx_destroy(a->ctx);
	free(a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_libuv),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_libuv", tests, NULL, NULL);
}
#else
int main(void)
{
	rt_init(300);
	printf("SKIP: built without libuv (install libuv1-dev and configure "
	       "again)\n");
	return 77;
}
#endif
