/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * End-to-end smoke test through the library on a real verbs stack: open
 * the device, listen, connect over rdma_cm, accept with user bytes,
 * exchange messages on the eager and rendezvous paths in both directions
 * with their contents checked, and close gracefully.
 */
#include "rt_pair.h"

struct echo {
	int received;
	int bad;
	size_t bytes;
	int sent_ok, sent_err;
	void *copies[16]; /* echoed buffers: must outlive their sends */
	int ncopies;
};

/* Checks a message made by the client: a u32 sequence number, then the
 * pattern of that sequence number. */
static int check_msg(const void *data, size_t len)
{
	uint32_t seq;

	if (len < 8)
		return 0;
	memcpy(&seq, data, 4);
	return rt_verify((const uint8_t *)data + 4, len - 4, seq) >= 0;
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct echo *e = s->user;
	void *copy = malloc(len ? len : 1);

	e->received++;
	e->bytes += len;
	e->bad += check_msg(data, len);
	memcpy(copy, data, len);
	assert_true(e->ncopies < 16);
	e->copies[e->ncopies++] = copy;
	assert_int_equal(evr_send(c, copy, len, NULL, NULL), 0);
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct echo *e = s->user;

	(void)c;
	e->received++;
	e->bytes += len;
	e->bad += check_msg(data, len);
}

static void sent_cb(evr_conn *c, int status, void *arg)
{
	struct echo *e = arg;

	(void)c;
	if (status == 0)
		e->sent_ok++;
	else
		e->sent_err++;
}

struct wait_n {
	struct echo *e;
	int n;
};

static int got_n(void *arg)
{
	struct wait_n *w = arg;

	return w->e->received >= w->n;
}

static void test_echo_sizes(void **state)
{
	static const size_t sizes[] = {0, 1, 64, 4096, 8192, 8193,
				       100000, 1 << 20};
	const int n = sizeof(sizes) / sizeof(sizes[0]);
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct echo se = {0}, ce = {0};
	struct rt_pair p;
	uint8_t *bufs[8];
	struct wait_n w = {&ce, n};
	int i;

	(void)state;
	rt_pair_init(&p, loop, NULL);
	p.srv.user = &se;
	p.cli.user = &ce;
	p.srv_opts.on_recv = srv_recv;
	p.cli_opts.on_recv = cli_recv;
	p.cli_opts.user_data = "hello";
	p.cli_opts.user_len = 5;
	rt_pair_connect(&p);
	assert_int_equal(p.seen_user_len, 5);
	assert_memory_equal(p.seen_user, "hello", 5);

	for (i = 0; i < n; i++) {
		bufs[i] = malloc(sizes[i] + 1);
		if (sizes[i] >= 8) {
			*(uint32_t *)bufs[i] = (uint32_t)i;
			rt_fill(bufs[i] + 4, sizes[i] - 4, (uint32_t)i);
		} else {
			memset(bufs[i], 0xab, sizes[i]);
		}
		assert_int_equal(evr_send(p.cli.conn, bufs[i], sizes[i],
					  sent_cb, &ce),
				 0);
	}
	assert_int_equal(rt_run_until(loop, got_n, &w, 60), 0);
	assert_int_equal(se.received, n);
	assert_int_equal(ce.received, n);
	assert_int_equal(se.bad, 0);
	assert_int_equal(ce.bad, 0);
	assert_int_equal(ce.sent_ok, n);
	assert_int_equal(ce.sent_err, 0);
	{
		size_t total = 0;

		for (i = 0; i < n; i++)
			total += sizes[i];
		assert_int_equal(se.bytes, total);
		assert_int_equal(ce.bytes, total);
	}
	rt_pair_close(&p);
	assert_int_equal(p.cli.close_status, 0);
	assert_int_equal(p.srv.close_status, -ESHUTDOWN);
	rt_pair_fini(&p);
	for (i = 0; i < n; i++)
		free(bufs[i]);
	for (i = 0; i < se.ncopies; i++)
		free(se.copies[i]);
	ev_loop_destroy(loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_echo_sizes),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_smoke", tests, NULL, NULL);
}
