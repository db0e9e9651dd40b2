/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The shared receive queue (docs/credits.md): windows that start small
 * and grow for a busy sender, shrink for a quiet one; credits never lent
 * beyond the buffers posted; a pool that refuses a connection it cannot
 * cover (-ENOBUFS at the server, ECONNREFUSED with the reason at the
 * client) and takes back what a closed connection was lent; and peers of
 * either kind (shared queue or a queue per connection) talking to each
 * other.  Refusal and reclaim run on both driving paths: the pool is
 * refilled and closed conns are reaped from the loop; so does the idle
 * cycle (windows given back after window_idle_ms, asked for again), which
 * runs on a timer.
 */
#include "rt_drive.h"

#include <limits.h>
#include <stdbool.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

#define NMSG 3000
#define MSG_LEN 256

struct stream {
	struct rt_pair p;
	uint32_t got, sent_ok, sent_err, bad;
	unsigned max_window; /* the largest the server lent the client */
	bool lent_over;	     /* srq_lent > srq_posted seen */
	/* a message's bytes are read when it is posted, not when it is
	 * submitted: one buffer each */
	uint8_t buf[NMSG][MSG_LEN];
};

static void check_bank(struct stream *s)
{
	struct evr_stats st;

	evr_ctx_stats(s->p.ctx, &st);
	if (st.srq_lent > st.srq_posted)
		s->lent_over = true;
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *side = arg;
	struct stream *s = side->user;
	struct evr_conn_info ci;

	if (len != MSG_LEN || rt_verify(data, len, s->got) != -1)
		s->bad++;
	s->got++;
	assert_int_equal(evr_conn_info(c, &ci), 0);
	if (ci.recv_window > s->max_window)
		s->max_window = ci.recv_window;
	check_bank(s);
}

static void sent(evr_conn *c, int status, void *arg)
{
	struct stream *s = arg;

	(void)c;
	if (status)
		s->sent_err++;
	else
		s->sent_ok++;
}

static int all_got(void *arg)
{
	struct stream *s = arg;

	return s->got >= NMSG && s->sent_ok + s->sent_err >= NMSG;
}

static int got_one(void *arg)
{
	struct stream *s = arg;

	return s->got == 1 && s->sent_ok + s->sent_err == 1;
}

static void stream_init(struct stream *s, struct ev_loop *loop,
			enum evr_srq_mode srv, enum evr_srq_mode cli)
{
	struct evr_ctx_opts so, co;

	memset(s, 0, sizeof(*s));
	rt_ctx_opts(&so);
	so.srq = srv;
	rt_ctx_opts(&co);
	co.srq = cli;
	/* the windows these tests assert must not be given back when a
	 * slow run leaves a sender idle for a while (test_idle_cycle) */
	so.window_idle_ms = co.window_idle_ms = UINT_MAX;
	rt_pair_init2(&s->p, loop, &so, &co);
	s->p.srv.user = s;
	s->p.srv_opts.on_recv = srv_recv;
	rt_pair_connect(&s->p);
}

static void send_one(struct stream *s, uint32_t seq)
{
	rt_fill(s->buf[0], MSG_LEN, seq);
	assert_int_equal(evr_send(s->p.cli.conn, s->buf[0], MSG_LEN, sent, s),
			 0);
}

/* A sender with thousands queued is held back by its window: it says so
 * (EVR_F_WANT) and the window grows from 8 towards recv_depth; every
 * message arrives, in order, and the bank never lends more than it has
 * posted.  Then one message at a time: the window shrinks to the least
 * that keeps data and control moving (4). */
static void test_window_grows_and_shrinks(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct stream *s = calloc(1, sizeof(*s));
	struct evr_conn_info si, ci;
	struct evr_stats st;
	uint32_t i;

	(void)state;
	assert_non_null(s);
	stream_init(s, loop, EVR_SRQ_ON, EVR_SRQ_ON);
	assert_int_equal(evr_conn_info(s->p.srv.conn, &si), 0);
	assert_int_equal(evr_conn_info(s->p.cli.conn, &ci), 0);
	assert_int_equal(si.srq, 1);
	assert_int_equal(si.recv_window, 8);
	assert_int_equal(ci.peer_recv_depth, 64); /* the largest window */
	assert_int_equal(ci.send_credits, 8);	  /* what is lent now */

	for (i = 0; i < NMSG; i++) {
		rt_fill(s->buf[i], MSG_LEN, i);
		assert_int_equal(evr_send(s->p.cli.conn, s->buf[i], MSG_LEN,
					  sent, s),
				 0);
	}
	assert_int_equal(rt_run_until(loop, all_got, s, 60), 0);
	assert_int_equal(s->got, NMSG);
	assert_int_equal(s->bad, 0);
	assert_int_equal(s->sent_ok, NMSG);
	assert_false(s->lent_over);
	evr_ctx_stats(s->p.ctx, &st);
	printf("# %u messages: window grew to %u of 64; %llu credits grown, "
	       "%llu withheld; pool %u buffers, %u posted, %u lent\n",
	       NMSG, s->max_window, (unsigned long long)st.srq_grown,
	       (unsigned long long)st.srq_withheld, st.srq_buffers,
	       st.srq_posted, st.srq_lent);
	assert_true(s->max_window >= 32);
	assert_true(st.srq_grown > 0);

	/* one at a time: nothing waits behind a message, nothing is wanted */
	for (i = 0; i < 100; i++) {
		s->got = 0;
		s->sent_ok = s->sent_err = 0;
		send_one(s, 0);
		assert_int_equal(rt_run_until(loop, got_one, s, 20), 0);
	}
	assert_int_equal(evr_conn_info(s->p.srv.conn, &si), 0);
	printf("# after 100 single messages: window %u\n", si.recv_window);
	assert_int_equal(si.recv_window, 4);
	assert_int_equal(s->bad, 0);

	rt_pair_close(&s->p);
	rt_pair_fini(&s->p);
	ev_loop_destroy(loop);
	free(s);
}

/* Mixed peers: a client with a queue per connection (it lends all of its
 * depth, window 0 in its request) gets a fixed window of 8 from a shared
 * queue server; a shared-queue client lends a per-connection server 8
 * and grows.  Messages arrive whole both ways. */
static void test_mixed_peers(void **state)
{
	static const struct {
		enum evr_srq_mode srv, cli;
		unsigned srv_window;	/* what the server lends */
		unsigned cli_peer_depth; /* what the client sees of it */
		int srv_srq;
	} rows[] = {
	    {EVR_SRQ_ON, EVR_SRQ_OFF, 8, 8, 1},
	    {EVR_SRQ_OFF, EVR_SRQ_ON, 64, 64, 0},
	};

	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
		struct stream *s = calloc(1, sizeof(*s));
		struct evr_conn_info si, ci;
		uint32_t i;

		assert_non_null(s);
		stream_init(s, loop, rows[r].srv, rows[r].cli);
		assert_int_equal(evr_conn_info(s->p.srv.conn, &si), 0);
		assert_int_equal(evr_conn_info(s->p.cli.conn, &ci), 0);
		assert_int_equal(si.srq, rows[r].srv_srq);
		assert_int_equal(ci.srq, !rows[r].srv_srq);
		assert_int_equal(si.recv_window, rows[r].srv_window);
		assert_int_equal(ci.peer_recv_depth, rows[r].cli_peer_depth);
		assert_int_equal(ci.send_credits, rows[r].srv_window);
		for (i = 0; i < NMSG; i++) {
			rt_fill(s->buf[i], MSG_LEN, i);
			assert_int_equal(evr_send(s->p.cli.conn, s->buf[i],
						  MSG_LEN, sent, s),
					 0);
		}
		assert_int_equal(rt_run_until(loop, all_got, s, 60), 0);
		assert_int_equal(s->got, NMSG);
		assert_int_equal(s->bad, 0);
		assert_int_equal(s->sent_ok, NMSG);
		assert_false(s->lent_over);
		/* a fixed window (a peer that cannot be told of a moving one)
		 * stays what was announced: neither grown nor shrunk */
		assert_true(s->max_window <= rows[r].srv_window);
		for (i = 0; i < 20; i++) { /* no EVR_F_WANT: would shrink */
			s->got = 0;
			s->sent_ok = s->sent_err = 0;
			send_one(s, 0);
			assert_int_equal(rt_run_until(loop, got_one, s, 20), 0);
		}
		assert_int_equal(evr_conn_info(s->p.srv.conn, &si), 0);
		assert_int_equal(si.recv_window, rows[r].srv_window);
		rt_pair_close(&s->p);
		rt_pair_fini(&s->p);
		ev_loop_destroy(loop);
		free(s);
	}
}

/* ---- a pool too small for a third connection ---- */

struct tiny {
	struct rt_drv d;
	evr_ctx *ctx;
	evr_listener *l;
	struct rt_side cli[3], srv[3];
	evr_conn *srv_conn[3];
	int accepts, refused;
	char why[3][64]; /* the reject reason each client got */
};

static struct tiny *tiny_arg;
static unsigned tiny_idx;

static void tiny_cli_connect(evr_conn *c, int status, void *arg)
{
	struct rt_side *side = arg;
	size_t n = 0;
	const void *why = evr_conn_reject_reason(c, &n);

	if (why) {
		unsigned i = (unsigned)(side - tiny_arg->cli);

		memcpy(tiny_arg->why[i], why, n < 63 ? n : 63);
	}
	rt_side_connect(c, status, arg);
}

static void tiny_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			size_t ulen, void *arg)
{
	struct tiny *t = arg;
	struct evr_conn_opts o;
	unsigned i = *(const uint8_t *)ud;
	int rc;

	(void)l;
	assert_int_equal(ulen, 1);
	evr_conn_opts_init(&o);
	o.on_connect = rt_side_connect;
	o.on_close = rt_side_close;
	o.arg = &t->srv[i];
	rc = evr_accept(req, &o, &t->srv_conn[i]);
	if (rc == -ENOBUFS)
		t->refused++;
	else
		assert_int_equal(rc, 0);
	t->accepts++;
}

static void tiny_connect(struct tiny *t, unsigned i)
{
	struct evr_conn_opts o;
	uint8_t idx = (uint8_t)i;

	memset(&t->cli[i], 0, sizeof(t->cli[i]));
	memset(&t->srv[i], 0, sizeof(t->srv[i]));
	evr_conn_opts_init(&o);
	o.on_connect = tiny_cli_connect;
	o.on_close = rt_side_close;
	o.arg = &t->cli[i];
	o.user_data = &idx;
	o.user_len = 1;
	assert_int_equal(evr_connect(t->ctx, rt_addr(), evr_listener_port(t->l),
				     &o, NULL),
			 0);
}

static int cli_done(void *arg)
{
	(void)arg;
	return tiny_arg->cli[tiny_idx].connects > 0 &&
	       (tiny_arg->cli[tiny_idx].connect_status ||
		tiny_arg->srv[tiny_idx].connects > 0);
}

static int cli_closed(void *arg)
{
	(void)arg;
	return tiny_arg->cli[tiny_idx].closes > 0 &&
	       tiny_arg->srv[tiny_idx].closes > 0;
}

static int all_back(void *arg)
{
	struct evr_stats st;

	evr_ctx_stats(arg, &st);
	return st.conns == 0 && st.srq_lent == 0 &&
	       st.srq_posted == st.srq_buffers;
}

/*
 * One ctx with a pool of 24 buffers (srq_buffers): a connection to itself
 * takes 8 at each end.  The second connect gets its client end (8), then
 * the server end finds the pool empty: refused, the client told why.
 * Once the first connection is closed, what it was lent comes back and a
 * third connect succeeds; at the end every buffer is posted again and
 * nothing is lent.
 */
static void run_pool_refuses(enum rt_path path)
{
	struct tiny *t = calloc(1, sizeof(*t));
	struct evr_ctx_opts o;
	struct evr_stats st;

	assert_non_null(t);
	tiny_arg = t;
	rt_drv_init(&t->d, path);
	rt_ctx_opts(&o);
	o.srq = EVR_SRQ_ON;
	o.srq_buffers = 24;
	t->ctx = rt_drv_ctx(&t->d, &o);
	assert_int_equal(evr_listen(t->ctx, rt_addr(), 0, 16, tiny_accept, t,
				    &t->l),
			 0);

	tiny_connect(t, 0);
	tiny_idx = 0;
	assert_int_equal(rt_drv_run_until(&t->d, cli_done, NULL, 20), 0);
	assert_int_equal(t->cli[0].connect_status, 0);

	tiny_connect(t, 1);
	tiny_idx = 1;
	assert_int_equal(rt_drv_run_until(&t->d, cli_done, NULL, 20), 0);
	assert_int_equal(t->cli[1].connect_status, -ECONNREFUSED);
	assert_int_equal(t->refused, 1);
	assert_string_equal(t->why[1], "no receive buffers");
	evr_ctx_stats(t->ctx, &st);
	assert_int_equal(st.srq_refused, 1);
	assert_int_equal(st.srq_buffers, 24);
	assert_true(st.srq_lent <= st.srq_posted);

	/* close the first: its credits come back */
	assert_int_equal(evr_conn_close(t->srv[0].conn, 0), 0);
	tiny_idx = 0;
	assert_int_equal(rt_drv_run_until(&t->d, cli_closed, NULL, 20), 0);
	assert_int_equal(t->cli[0].close_status, -ESHUTDOWN);

	tiny_connect(t, 2);
	tiny_idx = 2;
	assert_int_equal(rt_drv_run_until(&t->d, cli_done, NULL, 20), 0);
	assert_int_equal(t->cli[2].connect_status, 0);
	assert_int_equal(t->srv[2].connect_status, 0);
	assert_int_equal(evr_conn_close(t->cli[2].conn, 0), 0);
	assert_int_equal(rt_drv_run_until(&t->d, cli_closed, NULL, 20), 0);

	/* everything closed and reaped: all posted, nothing lent */
	assert_int_equal(rt_drv_run_until(&t->d, all_back, t->ctx, 10), 0);
	evr_ctx_stats(t->ctx, &st);
	assert_int_equal(st.srq_refused, 1);

	evr_listener_close(t->l);
	rt_drv_detach(&t->d);
	evr_ctx_destroy(t->ctx);
	rt_drv_fini(&t->d);
	free(t);
}

static void test_pool_refuses_libev(void **state)
{
	(void)state;
	run_pool_refuses(RT_LIBEV);
}

static void test_pool_refuses_embed(void **state)
{
	(void)state;
	run_pool_refuses(RT_EMBED);
}

#define POOL_CONNS 20

struct pool {
	struct rt_pair p;		/* the server's ctx and the clients' */
	struct rt_side cli[POOL_CONNS]; /* the clients' conns */
};

/* every one accepted and connected at both ends */
static int all_up(void *arg)
{
	struct pool *t = arg;
	int up = 0;

	for (int i = 0; i < POOL_CONNS; i++)
		up += t->cli[i].connects;
	return t->p.accepts == POOL_CONNS && up == POOL_CONNS &&
	       t->p.srv.connects == POOL_CONNS;
}

/* the server has no connection, and no credit lent */
static int all_gone(void *arg)
{
	struct evr_stats st;

	evr_ctx_stats(arg, &st);
	return st.conns == 0 && st.srq_lent == 0;
}

/* A server with a shared queue holds one pool for all its connections:
 * POOL_CONNS idle connections cost one chunk of buffers, not one
 * recv_depth each. */
static void test_pool_per_ctx(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct pool t;
	struct rt_pair *p = &t.p;
	struct rt_side *cli = t.cli;
	struct evr_ctx_opts so, co;
	struct evr_stats st;
	int i;

	(void)state;
	memset(&t, 0, sizeof(t));
	rt_ctx_opts(&so);
	so.srq = EVR_SRQ_ON;
	rt_ctx_opts(&co);
	co.srq = EVR_SRQ_OFF;
	/* what is lent is counted once all are up: none may have given its
	 * window back yet, however slowly the connections came up (the
	 * clients borrow; the server lends only) */
	co.window_idle_ms = UINT_MAX;
	rt_pair_init2(p, loop, &so, &co);
	for (i = 0; i < POOL_CONNS; i++) {
		struct evr_conn_opts o = p->cli_opts;

		o.arg = &cli[i];
		assert_int_equal(evr_connect(p->cctx, rt_addr(),
					     evr_listener_port(p->l), &o, NULL),
				 0);
	}
	(void)rt_run_until(loop, all_up, &t, 20); /* the asserts say why */
	for (i = 0; i < POOL_CONNS; i++) {
		assert_int_equal(cli[i].connects, 1);
		assert_int_equal(cli[i].connect_status, 0);
	}
	assert_int_equal(p->accepts, POOL_CONNS);
	assert_int_equal(p->srv.connects, POOL_CONNS);
	assert_int_equal(p->srv.connect_status, 0);
	evr_ctx_stats(p->ctx, &st);
	printf("# %d connections: pool of %u buffers (%llu bytes), %u lent; "
	       "a queue each would post %u; %u bytes of state per "
	       "connection\n",
	       POOL_CONNS, st.srq_buffers, (unsigned long long)st.srq_bytes,
	       st.srq_lent, POOL_CONNS * 64, st.conn_bytes);
	assert_int_equal(st.conns, POOL_CONNS);
	assert_true(st.srq_bytes >= (uint64_t)st.srq_buffers * 8192);
	assert_true(st.srq_bytes <= st.pool_bytes);
	assert_int_equal(st.srq_lent, POOL_CONNS * 8);
	assert_true(st.srq_buffers <= 512);
	assert_true(st.srq_lent <= st.srq_posted);
	for (i = 0; i < POOL_CONNS; i++)
		if (cli[i].conn)
			assert_int_equal(evr_conn_close(cli[i].conn, 0), 0);
	(void)rt_run_until(loop, all_gone, p->ctx, 20); /* the asserts say */
	evr_ctx_stats(p->ctx, &st);
	assert_int_equal(st.conns, 0);
	assert_int_equal(st.srq_lent, 0);
	evr_listener_close(p->l);
	evr_ctx_destroy(p->cctx);
	evr_ctx_destroy(p->ctx);
	ev_loop_destroy(loop);
}

/*
 * The idle cycle (docs/credits.md "Idle windows"), on one ctx connected to
 * itself with a shared queue: each end lends the other 8 at first.
 * Neither sends: within two ticks of window_idle_ms each gives back all
 * but its reserve and one (3 kept, 4 given back, and the give-back's own
 * buffer not re-granted), and the pool has 5 of 8 back per end.  Then the
 * client sends two messages, and the server holds the first: the kept
 * credit carries it, and the second goes only because the client asks
 * (EVR_F_WANT on a credit update), once.  Then 298 more: every message
 * arrives once, in order, whole, and the window grows past the initial
 * 8.  Idle again, the client gives back again.
 */
#define IDLE_MS 200
#define IDLE_N 300

struct idle {
	struct rt_drv d;
	evr_ctx *ctx;
	evr_listener *l;
	struct rt_side cli, srv;
	uint32_t got, bad, sent_ok, sent_err;
	unsigned max_window;
	bool hold;
	evr_msg *held;
	uint8_t buf[IDLE_N][MSG_LEN];
};

static void idle_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct idle *t = ((struct rt_side *)arg)->user;
	struct evr_conn_info ci;

	if (len != MSG_LEN || rt_verify(data, len, t->got) != -1)
		t->bad++;
	t->got++;
	assert_int_equal(evr_conn_info(c, &ci), 0);
	if (ci.recv_window > t->max_window)
		t->max_window = ci.recv_window;
	if (t->hold && !t->held) {
		t->held = evr_conn_hold(c);
		assert_non_null(t->held);
	}
}

static int idle_got2(void *arg)
{
	struct idle *t = arg;

	return t->got >= 2 && t->sent_ok + t->sent_err >= 2;
}

static void idle_sent(evr_conn *c, int status, void *arg)
{
	struct idle *t = arg;

	(void)c;
	if (status)
		t->sent_err++;
	else
		t->sent_ok++;
}

static void idle_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			size_t ulen, void *arg)
{
	struct idle *t = arg;
	struct evr_conn_opts o;

	(void)l, (void)ud, (void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = rt_side_connect;
	o.on_close = rt_side_close;
	o.on_recv = idle_recv;
	o.arg = &t->srv;
	assert_int_equal(evr_accept(req, &o, NULL), 0);
}

static int idle_up(void *arg)
{
	struct idle *t = arg;

	return t->cli.connects && (t->cli.connect_status || t->srv.connects);
}

static unsigned credits(evr_conn *c)
{
	struct evr_conn_info ci;

	assert_int_equal(evr_conn_info(c, &ci), 0);
	return ci.send_credits;
}

static unsigned window(evr_conn *c)
{
	struct evr_conn_info ci;

	assert_int_equal(evr_conn_info(c, &ci), 0);
	return ci.recv_window;
}

/* Both ends hold their reserve and one, and lend no more. */
static int idle_given(void *arg)
{
	struct idle *t = arg;

	return credits(t->cli.conn) == 3 && credits(t->srv.conn) == 3 &&
	       window(t->cli.conn) == 3 && window(t->srv.conn) == 3;
}

static int idle_all_got(void *arg)
{
	struct idle *t = arg;

	return t->got >= IDLE_N && t->sent_ok + t->sent_err >= IDLE_N;
}

static int idle_closed(void *arg)
{
	struct idle *t = arg;

	return t->cli.closes && t->srv.closes;
}

static void run_idle_cycle(enum rt_path path)
{
	struct idle *t = calloc(1, sizeof(*t));
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct evr_stats st;
	uint32_t i;
	/* a tick between a step and the next would count twice: a slow run
	 * (valgrind) takes ticks as long as its steps */
	const unsigned idle_ms = (unsigned)(IDLE_MS * rt_timeout_scale());

	assert_non_null(t);
	rt_drv_init(&t->d, path);
	rt_ctx_opts(&o);
	o.srq = EVR_SRQ_ON;
	o.window_idle_ms = idle_ms;
	t->ctx = rt_drv_ctx(&t->d, &o);
	t->srv.user = t->cli.user = t;
	assert_int_equal(evr_listen(t->ctx, rt_addr(), 0, 16, idle_accept, t,
				    &t->l),
			 0);
	evr_conn_opts_init(&co);
	co.on_connect = rt_side_connect;
	co.on_close = rt_side_close;
	co.arg = &t->cli;
	assert_int_equal(evr_connect(t->ctx, rt_addr(),
				     evr_listener_port(t->l), &co, NULL),
			 0);
	assert_int_equal(rt_drv_run_until(&t->d, idle_up, t, 20), 0);
	assert_int_equal(t->cli.connect_status, 0);
	assert_int_equal(t->srv.connect_status, 0);
	evr_ctx_stats(t->ctx, &st);
	assert_int_equal(st.srq_lent, 16);
	assert_int_equal(st.window_given, 0);

	/* idle: each end gives back 4 and keeps 3 */
	assert_int_equal(rt_drv_run_until(&t->d, idle_given, t, 20), 0);
	evr_ctx_stats(t->ctx, &st);
	printf("# %s: idle after %u ms: %llu credits given back, %llu "
	       "reclaimed, %u lent of %u posted\n",
	       rt_path_name(path), idle_ms,
	       (unsigned long long)st.window_given,
	       (unsigned long long)st.srq_reclaimed, st.srq_lent,
	       st.srq_posted);
	assert_int_equal(st.window_given, 8);
	assert_int_equal(st.srq_reclaimed, 8);
	assert_int_equal(st.srq_lent, 6);
	assert_int_equal(st.window_asks, 0);
	assert_true(st.srq_lent <= st.srq_posted);

	/* the kept credit carries the first message, held by the server:
	 * the second must ask */
	t->hold = true;
	for (i = 0; i < IDLE_N; i++)
		rt_fill(t->buf[i], MSG_LEN, i);
	for (i = 0; i < 2; i++)
		assert_int_equal(evr_send(t->cli.conn, t->buf[i], MSG_LEN,
					  idle_sent, t),
				 0);
	assert_int_equal(rt_drv_run_until(&t->d, idle_got2, t, 20), 0);
	assert_int_equal(t->got, 2);
	assert_int_equal(t->sent_ok, 2);
	assert_non_null(t->held);
	evr_ctx_stats(t->ctx, &st);
	assert_int_equal(st.window_asks, 1);
	evr_msg_release(t->held);
	t->hold = false;

	/* a burst: the window grows back */
	for (i = 2; i < IDLE_N; i++) {
		assert_int_equal(evr_send(t->cli.conn, t->buf[i], MSG_LEN,
					  idle_sent, t),
				 0);
	}
	assert_int_equal(rt_drv_run_until(&t->d, idle_all_got, t, 60), 0);
	assert_int_equal(t->got, IDLE_N);
	assert_int_equal(t->bad, 0);
	assert_int_equal(t->sent_ok, IDLE_N);
	assert_int_equal(t->sent_err, 0);
	evr_ctx_stats(t->ctx, &st);
	printf("# %s: %u messages after the idle spell: %llu ask(s), window "
	       "back to %u\n",
	       rt_path_name(path), IDLE_N,
	       (unsigned long long)st.window_asks, t->max_window);
	assert_true(t->max_window > 8);
	assert_true(st.srq_lent <= st.srq_posted);

	/* idle again: given back again */
	assert_int_equal(rt_drv_run_until(&t->d, idle_given, t, 20), 0);
	evr_ctx_stats(t->ctx, &st);
	assert_true(st.window_given > 8);
	assert_int_equal(st.srq_lent, 6);

	assert_int_equal(evr_conn_close(t->cli.conn, 0), 0);
	assert_int_equal(rt_drv_run_until(&t->d, idle_closed, t, 20), 0);
	assert_int_equal(t->cli.close_status, 0);
	assert_int_equal(t->cli.closes, 1);
	assert_int_equal(t->srv.closes, 1);
	assert_int_equal(t->got, IDLE_N); /* nothing more, nothing twice */
	evr_listener_close(t->l);
	rt_drv_detach(&t->d);
	evr_ctx_destroy(t->ctx);
	rt_drv_fini(&t->d);
	free(t);
}

static void test_idle_cycle_libev(void **state)
{
	(void)state;
	run_idle_cycle(RT_LIBEV);
}

static void test_idle_cycle_embed(void **state)
{
	(void)state;
	run_idle_cycle(RT_EMBED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_window_grows_and_shrinks),
		cmocka_unit_test(test_mixed_peers),
		cmocka_unit_test(test_pool_refuses_libev),
		cmocka_unit_test(test_pool_refuses_embed),
		cmocka_unit_test(test_pool_per_ctx),
		cmocka_unit_test(test_idle_cycle_libev),
		cmocka_unit_test(test_idle_cycle_embed),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_srq", tests, NULL, NULL);
}
