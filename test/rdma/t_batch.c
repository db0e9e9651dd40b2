/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Batching and selective signaling, seen through evr_ctx_stats().
 *
 * A thousand operations submitted within one loop iteration (before the
 * loop runs, or from inside one callback) must leave in a handful of
 * ibv_post_send calls -- one per SQ-full, plus a little slack -- and with
 * one signaled WR per signal_interval, counted afresh in each post, plus
 * the last of each post (ceil(n / interval) for a post of n WRs), while
 * every callback still fires exactly once, in posting order, and every
 * byte arrives.  The sender has a ctx of its own, so its counters hold
 * only its own traffic.
 */
#include "rt_pair.h"

#define NOPS 1000
#define OPLEN 256
#define REGION (NOPS * OPLEN)

struct bt;

struct rec {
	struct bt *b;
	int calls;
	int status;
	int order;
};

struct bt {
	struct ev_loop *loop;
	struct rt_pair p; /* the server end, its ctx and listener */
	evr_ctx *cctx;	  /* the sender's own ctx */
	struct evr_ctx_opts copts;
	uint8_t *cmem, *smem;
	evr_mr *cmr, *smr;
	uint8_t rkmsg[EVR_RKEY_PACKED_SIZE];
	struct evr_rkey srk; /* the server's region, as the client knows it */
	int got_rkey;
	struct rec r[NOPS];
	int ncompleted;
	/* two-sided case */
	int recv_n, recv_bad;
	int go;
	struct evr_stats before, after;
};

static void op_cb(evr_conn *c, int status, void *arg)
{
	struct rec *r = arg;

	(void)c;
	r->calls++;
	r->status = status;
	r->order = r->b->ncompleted++;
}

static int all_done(void *arg)
{
	struct bt *b = arg;

	for (int i = 0; i < NOPS; i++)
		if (!b->r[i].calls)
			return 0;
	return 1;
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

static void check_recs(struct bt *b)
{
	assert_int_equal(rt_run_until(b->loop, all_done, b, 40), 0);
	rt_run_until(b->loop, never, NULL, 0.1); /* no second callback */
	for (int i = 0; i < NOPS; i++) {
		assert_int_equal(b->r[i].calls, 1);
		assert_int_equal(b->r[i].status, 0);
		assert_int_equal(b->r[i].order, i);
	}
}

/* Client messages: "GO" from the server starts the two-sided case. */
static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg);

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct bt *b = s->pair->cli.user;
	uint32_t seq;

	(void)c;
	/* message i: its number, then the pattern of that number */
	if (len != OPLEN) {
		b->recv_bad++;
		return;
	}
	memcpy(&seq, data, 4);
	if (seq != (uint32_t)b->recv_n ||
	    rt_verify((const uint8_t *)data + 4, len - 4, seq) >= 0)
		b->recv_bad++;
	b->recv_n++;
}

static void bt_init(struct bt *b, unsigned sq_depth, unsigned recv_depth)
{
	struct evr_ctx_opts so;
	struct evr_rkey rk;
	int rc;

	memset(b, 0, sizeof(*b));
	for (int i = 0; i < NOPS; i++)
		b->r[i].b = b;
	b->loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&so);
	so.recv_depth = recv_depth;
	/* batches are counted against credits that are all there at once:
	 * a receive queue per connection (a shared one starts the window
	 * small, see t_srq) */
	so.srq = EVR_SRQ_OFF;
	rt_pair_init(&b->p, b->loop, &so);
	b->p.cli.user = b;
	b->p.cli_opts.on_recv = cli_recv;
	b->p.srv_opts.on_recv = srv_recv;

	rt_ctx_opts(&b->copts);
	b->copts.sq_depth = sq_depth;
	b->copts.recv_depth = recv_depth;
	b->copts.srq = EVR_SRQ_OFF;
	assert_int_equal(evr_ctx_create(&b->cctx, b->loop, &b->copts), 0);

	assert_int_equal(posix_memalign((void **)&b->cmem, 4096, REGION), 0);
	assert_int_equal(posix_memalign((void **)&b->smem, 4096, REGION), 0);
	memset(b->smem, 0, REGION);
	assert_int_equal(evr_mr_reg(b->cctx, b->cmem, REGION, 0, &b->cmr), 0);
	assert_int_equal(evr_mr_reg(b->p.ctx, b->smem, REGION,
				    EVR_ACCESS_REMOTE_WRITE, &b->smr),
			 0);

	rc = evr_connect(b->cctx, rt_addr(), evr_listener_port(b->p.l),
			 &b->p.cli_opts, NULL);
	assert_int_equal(rc, 0);
	assert_int_equal(rt_run_until(b->loop, rt_pair_up_pred, &b->p, 20), 0);
	assert_int_equal(b->p.cli.connect_status, 0);
	assert_int_equal(b->p.srv.connect_status, 0);

	/* the server tells the client where to write */
	evr_mr_rkey(b->smr, &rk);
	evr_rkey_pack(&rk, b->rkmsg);
	assert_int_equal(evr_send(b->p.srv.conn, b->rkmsg, sizeof(b->rkmsg),
				  NULL, NULL),
			 0);
}

static int got_rkey(void *arg)
{
	return ((struct bt *)arg)->got_rkey;
}

static void bt_fini(struct bt *b)
{
	rt_pair_close(&b->p);
	assert_int_equal(b->p.cli.close_status, 0);
	assert_int_equal(evr_mr_dereg(b->cmr), 0);
	assert_int_equal(evr_mr_dereg(b->smr), 0);
	evr_ctx_destroy(b->cctx);
	rt_pair_fini(&b->p);
	free(b->cmem);
	free(b->smem);
	ev_loop_destroy(b->loop);
}

static unsigned ceil_div(unsigned a, unsigned b)
{
	return (a + b - 1) / b;
}

/* The bounds every case checks, on the sender's counters. */
static void check_stats(struct bt *b, unsigned slack)
{
	uint64_t calls = b->after.post_send_calls - b->before.post_send_calls;
	uint64_t wrs = b->after.send_wrs - b->before.send_wrs;
	uint64_t sig = b->after.signaled_wrs - b->before.signaled_wrs;
	unsigned depth = b->copts.sq_depth;
	unsigned interval = b->copts.signal_interval;

	printf("    sq_depth %u: %d ops in %llu post_send calls, %llu WRs, "
	       "%llu signaled\n",
	       depth, NOPS, (unsigned long long)calls, (unsigned long long)wrs,
	       (unsigned long long)sig);
	assert_true(wrs >= NOPS);
	assert_true(calls >= ceil_div(NOPS, depth));
	assert_true(calls <= ceil_div(NOPS, depth) + slack);
	/* One WR in `interval` is signaled, and the last of each post (sq.c),
	 * which starts the count afresh: a post of n WRs signals exactly
	 * ceil(n / interval).  Summed over `calls` posts of `wrs` WRs, that
	 * is at least ceil(wrs / interval) -- all in one post -- and at most
	 * calls - 1 more. */
	assert_true(interval <= depth / 2); /* sq.c caps it there */
	if (sig < ceil_div((unsigned)wrs, interval) ||
	    sig > ceil_div((unsigned)wrs, interval) + calls - 1)
		fail_msg("%llu signaled of %llu WRs in %llu posts, interval %u: "
			 "expected %u .. %llu",
			 (unsigned long long)sig, (unsigned long long)wrs,
			 (unsigned long long)calls, interval,
			 ceil_div((unsigned)wrs, interval),
			 (unsigned long long)(ceil_div((unsigned)wrs,
						       interval) +
					      calls - 1));
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct bt *b = s->user;

	if (len == EVR_RKEY_PACKED_SIZE && !b->got_rkey) {
		evr_rkey_unpack(&b->srk, data);
		b->got_rkey = 1;
		return;
	}
	if (len == 2 && !memcmp(data, "GO", 2)) {
		/* all thousand sends from inside this one callback */
		b->go++;
		evr_ctx_stats(b->cctx, &b->before);
		for (int i = 0; i < NOPS; i++)
			assert_int_equal(evr_send(c, b->cmem + i * OPLEN,
						  OPLEN, op_cb, &b->r[i]),
					 0);
		for (int i = 0; i < NOPS; i++)
			assert_int_equal(b->r[i].calls, 0);
	}
}

static void run_writes(unsigned sq_depth, unsigned slack)
{
	struct bt b;
	int i;

	bt_init(&b, sq_depth, 64);
	assert_int_equal(rt_run_until(b.loop, got_rkey, &b, 20), 0);
	assert_int_equal(b.srk.len, REGION);

	evr_ctx_stats(b.cctx, &b.before);
	for (i = 0; i < NOPS; i++) {
		rt_fill(b.cmem + i * OPLEN, OPLEN, (uint32_t)i);
		assert_int_equal(evr_write(b.p.cli.conn, b.cmr,
					   (size_t)i * OPLEN, &b.srk,
					   (uint64_t)i * OPLEN, OPLEN, op_cb,
					   &b.r[i]),
				 0);
	}
	for (i = 0; i < NOPS; i++)
		assert_int_equal(b.r[i].calls, 0);
	check_recs(&b);
	evr_ctx_stats(b.cctx, &b.after);
	check_stats(&b, slack);
	/* a write is one WR and the client sent nothing else */
	assert_int_equal(b.after.send_wrs - b.before.send_wrs, NOPS);
	for (i = 0; i < NOPS; i++)
		assert_int_equal(rt_verify(b.smem + i * OPLEN, OPLEN,
					   (uint32_t)i),
				 -1);
	bt_fini(&b);
}

/* The whole thousand fits the SQ: one post. */
static void test_writes_deep_sq(void **state)
{
	(void)state;
	run_writes(1024, 2);
}

/* The default SQ of 256: the rest goes out as completions make room. */
static void test_writes_default_sq(void **state)
{
	(void)state;
	run_writes(256, 4);
}

static int all_received(void *arg)
{
	return ((struct bt *)arg)->recv_n >= NOPS;
}

/* A thousand sends from inside one callback, with enough credits. */
static void test_sends_from_callback(void **state)
{
	struct bt b;
	int i;

	(void)state;
	bt_init(&b, 1024, 1024);
	assert_int_equal(rt_run_until(b.loop, got_rkey, &b, 20), 0);
	for (i = 0; i < NOPS; i++) {
		memcpy(b.cmem + i * OPLEN, &i, 4);
		rt_fill(b.cmem + i * OPLEN + 4, OPLEN - 4, (uint32_t)i);
	}
	assert_int_equal(evr_send(b.p.srv.conn, "GO", 2, NULL, NULL), 0);
	check_recs(&b);
	assert_int_equal(b.go, 1);
	evr_ctx_stats(b.cctx, &b.after);
	check_stats(&b, 2);
	assert_int_equal(rt_run_until(b.loop, all_received, &b, 20), 0);
	assert_int_equal(b.recv_n, NOPS);
	assert_int_equal(b.recv_bad, 0);
	assert_int_equal(b.after.msgs_sent - b.before.msgs_sent, NOPS);
	bt_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_writes_deep_sq),
		cmocka_unit_test(test_writes_default_sq),
		cmocka_unit_test(test_sends_from_callback),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_batch", tests, NULL, NULL);
}
