/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Many QPs on the CQ of one ctx, every queue full.
 *
 * Both ends of every connection live on the same ctx, so 24 connections
 * are 48 QPs sharing its completion queue(s).  The ctx starts with one
 * small CQ and must grow it as the QPs arrive, keeping 20 % headroom over
 * what they can have outstanding.  Then every SQ is filled with one-sided
 * writes in both directions while messages are sent beyond the receive
 * credits and echoed back, every WR signaled, and the loop is held off
 * for a moment so that the completions pile up unpolled in the CQ.  A CQ
 * overflow would surface as an async CQ error (logged, connections failed
 * with -EIO) or as lost completions; so the test counts every callback
 * (exactly once, status 0), checks every byte, watches the log for
 * warnings and checks the CQ accounting on each loop iteration.  The
 * round in ADAPTIVE mode must go to POLL: its first wakeup finds the whole
 * pile.  A second case runs the same traffic in EVENT mode, in POLL mode
 * and in EVENT mode again and expects the same counts each time.
 */
#include "rt.h"

#include <stdbool.h>

#define MAXPAIRS 24
#define SQ_DEPTH 64
#define RECV_DEPTH 16
#define NWRITE SQ_DEPTH		/* writes per end per round: a full SQ */
#define NSEND (2 * RECV_DEPTH) /* messages per client per round */
#define WLEN 256
#define MLEN 200
#define HALF (NWRITE * WLEN)
#define SLICE (2 * HALF) /* per pair and side: sources, then targets */

struct world;

struct orec {
	int calls;
	int status;
};

/* One end of one connection. */
struct end {
	struct world *w;
	int idx;
	bool server;
	evr_conn *conn;
	int connects, connect_status;
	int closes, close_status;
	struct orec wr[NWRITE], sd[NSEND];
	int recv, recv_bad;
	uint8_t out[NSEND][MLEN]; /* messages (client) or echoes (server) */
};

struct world {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	int npairs;
	struct end cli[MAXPAIRS], srv[MAXPAIRS];
	uint8_t *cmem, *smem; /* slice i belongs to pair i */
	evr_mr *cmr, *smr;
	struct evr_rkey crk, srk;
	int round;
	/* health */
	int log_warn;	    /* warnings and errors logged by the library */
	int cq_checks;	    /* CQ accounting checks made */
	int cq_bad;	    /* ... that found less than 20 % headroom */
	uint32_t max_reserved;
	int to_poll, to_event; /* adaptive switches reported */
};

static void log_fn(enum evr_log_level lvl, const char *msg, void *arg)
{
	struct world *w = arg;

	if (lvl <= EVR_LOG_WARN) {
		w->log_warn++;
		fprintf(stderr, "    library: %s\n", msg);
	}
}

static void on_mode(evr_ctx *ctx, enum evr_mode now, void *arg)
{
	struct world *w = arg;

	(void)ctx;
	if (now == EVR_MODE_POLL)
		w->to_poll++;
	else
		w->to_event++;
}

static void check_cq(struct world *w)
{
	struct evr_stats st;

	evr_ctx_stats(w->ctx, &st);
	w->cq_checks++;
	/* capacity >= reserved * 1.2, in integers */
	if ((uint64_t)st.cq_capacity * 5 < (uint64_t)st.cq_reserved * 6)
		w->cq_bad++;
	if (st.cq_reserved > w->max_reserved)
		w->max_reserved = st.cq_reserved;
}

static void op_cb(evr_conn *c, int status, void *arg)
{
	struct orec *r = arg;

	(void)c;
	r->calls++;
	r->status = status;
}

static void fill_msg(uint8_t *m, int pair, int round, int k)
{
	uint32_t seq = (uint32_t)(pair * 100000 + round * 1000 + k);

	memcpy(m, &seq, 4);
	rt_fill(m + 4, MLEN - 4, seq);
}

static void on_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct end *e = arg;
	int k = e->recv % NSEND;
	uint8_t want[MLEN];

	/* message k of this round, in order, intact */
	fill_msg(want, e->idx, e->w->round, k);
	if (len != MLEN || memcmp(data, want, MLEN))
		e->recv_bad++;
	e->recv++;
	if (e->server) {
		memcpy(e->out[k], data, MLEN < len ? MLEN : len);
		if (evr_send(c, e->out[k], MLEN, op_cb, &e->sd[k]))
			e->recv_bad++;
	}
}

static void on_connect(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	e->connects++;
	e->connect_status = status;
	e->conn = status ? NULL : c;
	check_cq(e->w);
}

static void on_close(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	(void)c;
	e->closes++;
	e->close_status = status;
	e->conn = NULL;
}

static void conn_opts(struct end *e, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = on_connect;
	o->on_close = on_close;
	o->on_recv = on_recv;
	o->arg = e;
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct world *w = arg;
	struct evr_conn_opts o;
	uint8_t idx;

	(void)l;
	assert_int_equal(ulen, 1);
	idx = *(const uint8_t *)ud;
	assert_true(idx < w->npairs);
	conn_opts(&w->srv[idx], &o);
	assert_int_equal(evr_accept(req, &o, NULL), 0);
}

static int all_up(void *arg)
{
	struct world *w = arg;

	check_cq(w);
	for (int i = 0; i < w->npairs; i++)
		if (!w->cli[i].connects || !w->srv[i].connects)
			return 0;
	return 1;
}

static void world_init(struct world *w, int npairs, enum evr_mode mode)
{
	struct evr_ctx_opts o;
	struct evr_stats st;
	int i;

	memset(w, 0, sizeof(*w));
	w->npairs = npairs;
	w->loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&o);
	o.sq_depth = SQ_DEPTH;
	o.recv_depth = RECV_DEPTH;
	o.signal_interval = 1; /* a CQE for every WR: the CQ fills fastest */
	o.mode = mode;
	o.log_fn = log_fn;
	o.log_arg = w;
	o.log_level = EVR_LOG_WARN;
	assert_int_equal(evr_ctx_create(&w->ctx, w->loop, &o), 0);
	evr_ctx_stats(w->ctx, &st);
	assert_int_equal(st.conns, 0);
	assert_int_equal(st.cq_reserved, 0);

	for (i = 0; i < npairs; i++) {
		w->cli[i].w = w->srv[i].w = w;
		w->cli[i].idx = w->srv[i].idx = i;
		w->srv[i].server = true;
	}
	assert_int_equal(posix_memalign((void **)&w->cmem, 4096,
					(size_t)npairs * SLICE),
			 0);
	assert_int_equal(posix_memalign((void **)&w->smem, 4096,
					(size_t)npairs * SLICE),
			 0);
	assert_int_equal(evr_mr_reg(w->ctx, w->cmem, (size_t)npairs * SLICE,
				    EVR_ACCESS_REMOTE_WRITE, &w->cmr),
			 0);
	assert_int_equal(evr_mr_reg(w->ctx, w->smem, (size_t)npairs * SLICE,
				    EVR_ACCESS_REMOTE_WRITE, &w->smr),
			 0);
	evr_mr_rkey(w->cmr, &w->crk);
	evr_mr_rkey(w->smr, &w->srk);

	assert_int_equal(evr_listen(w->ctx, rt_addr(), 0, 64, on_accept, w,
				    &w->l),
			 0);
	for (i = 0; i < npairs; i++) {
		struct evr_conn_opts co;
		uint8_t idx = (uint8_t)i;

		conn_opts(&w->cli[i], &co);
		co.user_data = &idx;
		co.user_len = 1;
		co.timeout_ms = 20000;
		assert_int_equal(evr_connect(w->ctx, rt_addr(),
					     evr_listener_port(w->l), &co,
					     NULL),
				 0);
	}
	assert_int_equal(rt_run_until(w->loop, all_up, w, 40), 0);
	for (i = 0; i < npairs; i++) {
		assert_int_equal(w->cli[i].connect_status, 0);
		assert_int_equal(w->srv[i].connect_status, 0);
	}
	evr_ctx_stats(w->ctx, &st);
	assert_int_equal(st.conns, 2 * npairs);
	/* each QP: its SQ and receives, plus with a shared receive queue
	 * one receive of it flushed when the QP goes */
	assert_int_equal(st.cq_reserved,
			 (uint32_t)(2 * npairs * (SQ_DEPTH + RECV_DEPTH +
						  (st.srq_buffers ? 1 : 0))));
	printf("    %d QPs: %u CQ(s), %u CQEs for %u reserved, %llu resizes\n",
	       2 * npairs, st.cq_count, st.cq_capacity, st.cq_reserved,
	       (unsigned long long)st.cq_resizes);
}

static int all_closed(void *arg)
{
	struct world *w = arg;

	check_cq(w);
	for (int i = 0; i < w->npairs; i++)
		if (!w->cli[i].closes || !w->srv[i].closes)
			return 0;
	return 1;
}

static void world_fini(struct world *w)
{
	struct evr_stats st;
	int i;

	for (i = 0; i < w->npairs; i++)
		assert_int_equal(evr_conn_close(w->cli[i].conn, 0), 0);
	assert_int_equal(rt_run_until(w->loop, all_closed, w, 40), 0);
	for (i = 0; i < w->npairs; i++) {
		assert_int_equal(w->cli[i].closes, 1);
		assert_int_equal(w->cli[i].close_status, 0);
		assert_int_equal(w->srv[i].closes, 1);
		assert_int_equal(w->srv[i].close_status, -ESHUTDOWN);
	}
	evr_ctx_stats(w->ctx, &st);
	assert_int_equal(st.conns, 0);
	assert_int_equal(st.cq_reserved, 0);
	assert_int_equal(w->cq_bad, 0);
	assert_int_equal(w->log_warn, 0);
	assert_int_equal(evr_mr_dereg(w->cmr), 0);
	assert_int_equal(evr_mr_dereg(w->smr), 0);
	evr_listener_close(w->l);
	evr_ctx_destroy(w->ctx);
	free(w->cmem);
	free(w->smem);
	ev_loop_destroy(w->loop);
}

static uint32_t wseed(const struct end *e, int round, int k)
{
	return (uint32_t)(e->idx * 100000 + round * 1000 + k) +
	       (e->server ? 50000u : 0u);
}

/* Each end writes the source half of its pair's slice of its own region
 * into the target half of the same slice of the peer's region (cleared
 * first), a full SQ of writes; each client also sends NSEND messages. */
static void start_round(struct world *w)
{
	int i, k;

	w->round++;
	for (i = 0; i < w->npairs; i++) {
		struct end *ends[2] = {&w->cli[i], &w->srv[i]};

		for (int s = 0; s < 2; s++) {
			struct end *e = ends[s];
			uint8_t *mine = e->server ? w->smem : w->cmem;
			const struct evr_rkey *rk = e->server ? &w->crk
							      : &w->srk;
			evr_mr *mr = e->server ? w->smr : w->cmr;
			size_t base = (size_t)i * SLICE;

			memset(e->wr, 0, sizeof(e->wr));
			memset(e->sd, 0, sizeof(e->sd));
			e->recv = 0;
			memset(mine + base + HALF, 0, HALF);
			for (k = 0; k < NWRITE; k++) {
				size_t off = base + (size_t)k * WLEN;

				rt_fill(mine + off, WLEN,
					wseed(e, w->round, k));
				assert_int_equal(
					evr_write(e->conn, mr, off, rk,
						  off + HALF, WLEN, op_cb,
						  &e->wr[k]),
					0);
			}
		}
		for (k = 0; k < NSEND; k++) {
			fill_msg(w->cli[i].out[k], i, w->round, k);
			assert_int_equal(evr_send(w->cli[i].conn,
						  w->cli[i].out[k], MLEN,
						  op_cb, &w->cli[i].sd[k]),
					 0);
		}
	}
}

static int round_done(void *arg)
{
	struct world *w = arg;

	check_cq(w);
	for (int i = 0; i < w->npairs; i++) {
		struct end *ends[2] = {&w->cli[i], &w->srv[i]};

		if (w->cli[i].recv < NSEND || w->srv[i].recv < NSEND)
			return 0;
		for (int s = 0; s < 2; s++) {
			for (int k = 0; k < NWRITE; k++)
				if (!ends[s]->wr[k].calls)
					return 0;
			for (int k = 0; k < NSEND; k++)
				if (!ends[s]->sd[k].calls)
					return 0;
		}
	}
	return 1;
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

struct tally {
	int cbs, recvs, bad;
};

/* Run a round to its end and check everything about it. */
static struct tally run_round(struct world *w)
{
	struct tally t = {0, 0, 0};
	int i, k;

	start_round(w);
	/* post it all, then let the completions pile up in the CQ while
	 * nobody polls: the whole burst must fit */
	ev_run(w->loop, EVRUN_NOWAIT);
	usleep(1500 * 1000);
	check_cq(w);
	assert_int_equal(rt_run_until(w->loop, round_done, w, 45), 0);
	rt_run_until(w->loop, never, NULL, 0.1); /* no second callback */
	for (i = 0; i < w->npairs; i++) {
		struct end *ends[2] = {&w->cli[i], &w->srv[i]};

		for (int s = 0; s < 2; s++) {
			struct end *e = ends[s];

			assert_int_equal(e->closes, 0);
			assert_int_equal(e->recv, NSEND);
			assert_int_equal(e->recv_bad, 0);
			t.recvs += e->recv;
			for (k = 0; k < NWRITE; k++) {
				assert_int_equal(e->wr[k].calls, 1);
				assert_int_equal(e->wr[k].status, 0);
				t.cbs++;
			}
			for (k = 0; k < NSEND; k++) {
				assert_int_equal(e->sd[k].calls, 1);
				assert_int_equal(e->sd[k].status, 0);
				t.cbs++;
			}
		}
	}
	/* every write landed where it was aimed, intact */
	for (i = 0; i < w->npairs; i++)
		for (k = 0; k < NWRITE; k++) {
			size_t off = (size_t)i * SLICE + HALF +
				     (size_t)k * WLEN;

			if (rt_verify(w->smem + off, WLEN,
				      wseed(&w->cli[i], w->round, k)) >= 0)
				t.bad++;
			if (rt_verify(w->cmem + off, WLEN,
				      wseed(&w->srv[i], w->round, k)) >= 0)
				t.bad++;
		}
	return t;
}

static void test_many_qps_full_queues(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	struct evr_stats st, st0;
	struct tally t;
	int r;

	(void)state;
	world_init(w, MAXPAIRS, EVR_MODE_ADAPTIVE);
	evr_ctx_on_mode_switch(w->ctx, on_mode, w);
	evr_ctx_stats(w->ctx, &st);
	/* 48 QPs of 64 + 16 WRs did not fit the first CQ */
	assert_true(st.cq_resizes > 0);
	assert_true(st.cq_capacity * 5ull >= st.cq_reserved * 6ull);
	/* once through the completion channel, once adaptively */
	for (r = 0; r < 2; r++) {
		int up0 = w->to_poll, down0 = w->to_event;

		assert_int_equal(evr_ctx_set_mode(w->ctx, r ? EVR_MODE_ADAPTIVE
							    : EVR_MODE_EVENT),
				 0);
		/* EVENT was in effect and stays: no switch */
		assert_int_equal(evr_ctx_mode(w->ctx), EVR_MODE_EVENT);
		evr_ctx_stats(w->ctx, &st0);
		t = run_round(w);
		evr_ctx_stats(w->ctx, &st);
		assert_int_equal(t.cbs, 2 * MAXPAIRS * (NWRITE + NSEND));
		assert_int_equal(t.recvs, 2 * MAXPAIRS * NSEND);
		assert_int_equal(t.bad, 0);
		printf("    %s round: %d switches to POLL, %d to EVENT\n",
		       r ? "adaptive" : "event", w->to_poll - up0,
		       w->to_event - down0);
		if (r) {
			/* thousands of completions in the first wakeup, far
			 * above adapt_up_batch: POLL */
			assert_true(w->to_poll - up0 >= 1);
		} else {
			assert_int_equal(w->to_poll - up0, 0);
			assert_int_equal(w->to_event - down0, 0);
		}
		/* each adaptive switch is counted once, and nothing else
		 * switched */
		assert_int_equal(st.mode_switches - st0.mode_switches,
				 (w->to_poll - up0) + (w->to_event - down0));
	}
	evr_ctx_stats(w->ctx, &st);
	printf("    %llu completions, %llu wakeups, %llu polls, "
	       "%u CQEs for %u reserved, %d CQ checks\n",
	       (unsigned long long)st.completions,
	       (unsigned long long)st.wakeups, (unsigned long long)st.polls,
	       st.cq_capacity, st.cq_reserved, w->cq_checks);
	assert_true(w->cq_checks > 10);
	assert_int_equal(w->max_reserved,
			 (uint32_t)(2 * MAXPAIRS * (SQ_DEPTH + RECV_DEPTH +
						    (st.srq_buffers ? 1 : 0))));
	world_fini(w);
	free(w);
}

#define MODE_PAIRS 4

static void test_event_then_poll(void **state)
{
	struct world *w = calloc(1, sizeof(*w));
	static const enum evr_mode modes[] = {EVR_MODE_EVENT, EVR_MODE_POLL,
					      EVR_MODE_EVENT};
	struct tally t[3];
	struct evr_stats a, b;
	int m;

	(void)state;
	world_init(w, MODE_PAIRS, EVR_MODE_EVENT);
	for (m = 0; m < 3; m++) {
		assert_int_equal(evr_ctx_set_mode(w->ctx, modes[m]), 0);
		assert_int_equal(evr_ctx_mode(w->ctx), modes[m]);
		evr_ctx_stats(w->ctx, &a);
		t[m] = run_round(w);
		evr_ctx_stats(w->ctx, &b);
		printf("    %s: %d callbacks, %d messages, %llu completions, "
		       "%llu wakeups, %llu polls (%llu empty)\n",
		       evr_mode_str(modes[m]), t[m].cbs, t[m].recvs,
		       (unsigned long long)(b.completions - a.completions),
		       (unsigned long long)(b.wakeups - a.wakeups),
		       (unsigned long long)(b.polls - a.polls),
		       (unsigned long long)(b.empty_polls - a.empty_polls));
		assert_int_equal(b.mode, modes[m]);
		assert_int_equal(t[m].bad, 0);
		assert_int_equal(t[m].cbs, 2 * MODE_PAIRS * (NWRITE + NSEND));
		assert_int_equal(t[m].recvs, 2 * MODE_PAIRS * NSEND);
		assert_int_equal(b.msgs_recv - a.msgs_recv,
				 2 * MODE_PAIRS * NSEND);
		assert_int_equal(b.bytes_recv - a.bytes_recv,
				 2 * MODE_PAIRS * NSEND * MLEN);
		assert_true(b.completions > a.completions);
		if (modes[m] == EVR_MODE_EVENT) {
			/* completions came through the channel */
			assert_true(b.wakeups > a.wakeups);
		} else {
			/* at most the one event each CQ was armed for */
			assert_true(b.wakeups - a.wakeups <= b.cq_count);
			assert_true(b.empty_polls > a.empty_polls);
		}
	}
	world_fini(w);
	free(w);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_many_qps_full_queues),
		cmocka_unit_test(test_event_then_poll),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_cq", tests, NULL, NULL);
}
