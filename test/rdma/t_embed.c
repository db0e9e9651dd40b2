/*
 * The one-fd embedding contract (evr_ctx_fd / evr_ctx_timeout_ms /
 * evr_ctx_process) driven by a plain host loop: epoll edge-triggered,
 * epoll level-triggered and poll().  A client and a server connection in
 * one embedded ctx ping-pong thousands of times with random think time
 * between round trips (so completions land at every point of the host
 * loop: before the wait, during it, during processing).  A stall is a wait
 * that runs out its safety cap while a message is in flight -- it means a
 * wakeup was lost -- and fails the test.
 */
#include "rt_pair.h"

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
	};

	rt_init(600);
	return cmocka_run_group_tests_name("rdma_embed", tests, NULL, NULL);
}
