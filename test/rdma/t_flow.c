/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Flow control end to end on a real verbs stack, through the public API:
 *
 *  - credits under backpressure: two connections (one sending from the
 *    connecting side, one from the accepting side) each carry 100,000 small
 *    messages with 64 in flight to a receiver that holds every message and
 *    releases them late, from a timer.  Nothing is lost, duplicated or
 *    reordered, and no send ever fails: the library sets rnr_retry_count
 *    to 0, so a send that met an empty receive queue (an RNR NAK) would
 *    complete in error and close the connection;
 *  - a one-way stream: the receiver never sends, so credits can only go
 *    back in explicit credit updates -- and those must not echo;
 *  - the send queue limit: evr_send returns -ENOBUFS once send_queue_limit
 *    bytes are queued, on_drain fires later (never inside a call), and
 *    sends succeed again after it.
 */
#include "rt_pair.h"

#include <stdbool.h>

/* ------------------------------------------------------------------------ */
/* Small messages: [u32 stream][u32 seq][pattern], 8 .. 64 bytes.           */

#define SMALL_MAX 64

static size_t small_len(uint32_t seq)
{
	return 8 + (seq * 7u) % (SMALL_MAX - 7);
}

static void small_fill(uint8_t *buf, uint32_t stream, uint32_t seq)
{
	size_t len = small_len(seq);

	memcpy(buf, &stream, 4);
	memcpy(buf + 4, &seq, 4);
	for (size_t i = 8; i < len; i++)
		buf[i] = rt_pat(seq ^ (stream << 24), i);
}

/* 0 when data is message seq of stream, whole. */
static int small_check(const void *data, size_t len, uint32_t stream,
		       uint32_t seq)
{
	const uint8_t *p = data;
	uint32_t v;

	if (len != small_len(seq))
		return 1;
	memcpy(&v, p, 4);
	if (v != stream)
		return 1;
	memcpy(&v, p + 4, 4);
	if (v != seq)
		return 1;
	for (size_t i = 8; i < len; i++)
		if (p[i] != rt_pat(seq ^ (stream << 24), i))
			return 1;
	return 0;
}

/* ------------------------------------------------------------------------ */
/* One stream: a sender keeping `window` messages in flight, a receiver     */
/* that may hold what it gets.                                              */

struct slot {
	struct stream *s;
	uint32_t seq;
	uint8_t data[SMALL_MAX];
};

struct held {
	evr_msg *m;
	uint32_t seq;
};

struct stream {
	uint32_t id;
	uint32_t total;
	unsigned window;
	evr_conn *tx, *rx; /* the sending and the receiving end */
	/* sending */
	struct slot *slots; /* window of them, reused round robin */
	uint32_t next_send;
	unsigned inflight;
	uint32_t cb_ok, cb_err;
	int send_err;	   /* first unexpected evr_send error */
	uint8_t *cb_count; /* per seq */
	/* receiving */
	bool hold;
	struct held *held; /* FIFO of held messages */
	unsigned nheld, max_held;
	unsigned peak_held; /* the most held at once */
	uint64_t releases;
	uint32_t next_recv;
	uint32_t bad;
	/* both ends' connection callbacks */
	int connects[2], connect_status[2];
	int closes[2], close_status[2];
	int stray_recv; /* messages at the sending end */
};

static void stream_pump(struct stream *s);

static void stream_sent(evr_conn *c, int status, void *arg)
{
	struct slot *sl = arg;
	struct stream *s = sl->s;

	(void)c;
	if (sl->seq < s->total)
		s->cb_count[sl->seq]++;
	if (status == 0)
		s->cb_ok++;
	else
		s->cb_err++;
	s->inflight--;
	stream_pump(s);
}

static void stream_pump(struct stream *s)
{
	while (s->tx && s->inflight < s->window && s->next_send < s->total &&
	       !s->send_err) {
		uint32_t seq = s->next_send;
		struct slot *sl = &s->slots[seq % s->window];
		int rc;

		sl->s = s;
		sl->seq = seq;
		small_fill(sl->data, s->id, seq);
		rc = evr_send(s->tx, sl->data, small_len(seq), stream_sent, sl);
		if (rc) {
			s->send_err = rc;
			return;
		}
		s->next_send++;
		s->inflight++;
	}
}

static void stream_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct stream *s = arg;
	evr_msg *m;

	if (c != s->rx) {
		s->stray_recv++;
		return;
	}
	if (small_check(data, len, s->id, s->next_recv))
		s->bad++;
	if (s->hold) {
		m = evr_conn_hold(c);
		if (!m || s->nheld >= s->max_held) {
			s->bad++;
		} else {
			s->held[s->nheld].m = m;
			s->held[s->nheld++].seq = s->next_recv;
			if (s->nheld > s->peak_held)
				s->peak_held = s->nheld;
		}
	}
	s->next_recv++;
}

/* Release every held message, after checking it kept its bytes. */
static void stream_release(struct stream *s)
{
	for (unsigned i = 0; i < s->nheld; i++) {
		evr_msg *m = s->held[i].m;

		if (small_check(evr_msg_data(m), evr_msg_len(m), s->id,
				s->held[i].seq))
			s->bad++;
		evr_msg_release(m);
	}
	s->releases += s->nheld;
	s->nheld = 0;
}

static void stream_connect_cli(evr_conn *c, int status, void *arg)
{
	struct stream *s = arg;

	(void)c;
	s->connects[0]++;
	s->connect_status[0] = status;
}

static void stream_connect_srv(evr_conn *c, int status, void *arg)
{
	struct stream *s = arg;

	(void)c;
	s->connects[1]++;
	s->connect_status[1] = status;
}

static void stream_close_cli(evr_conn *c, int status, void *arg)
{
	struct stream *s = arg;

	(void)c;
	s->closes[0]++;
	s->close_status[0] = status;
}

static void stream_close_srv(evr_conn *c, int status, void *arg)
{
	struct stream *s = arg;

	(void)c;
	s->closes[1]++;
	s->close_status[1] = status;
}

static void stream_init(struct stream *s, uint32_t id, uint32_t total,
			unsigned window, bool hold)
{
	memset(s, 0, sizeof(*s));
	s->id = id;
	s->total = total;
	s->window = window;
	s->hold = hold;
	s->slots = calloc(window, sizeof(*s->slots));
	s->cb_count = calloc(total, 1);
	s->max_held = 4096;
	s->held = calloc(s->max_held, sizeof(*s->held));
	assert_non_null(s->slots);
	assert_non_null(s->cb_count);
	assert_non_null(s->held);
}

static void stream_fini(struct stream *s)
{
	free(s->slots);
	free(s->cb_count);
	free(s->held);
}

static void stream_conn_opts(struct stream *s, struct evr_conn_opts *o,
			     bool active)
{
	evr_conn_opts_init(o);
	o->on_connect = active ? stream_connect_cli : stream_connect_srv;
	o->on_close = active ? stream_close_cli : stream_close_srv;
	o->on_recv = stream_recv;
	o->arg = s;
}

/* Everything sent, received and called back -- or a failure to report. */
static bool stream_done(const struct stream *s)
{
	if (s->bad || s->send_err || s->cb_err || s->closes[0] ||
	    s->closes[1] || s->stray_recv)
		return true;
	return s->next_recv >= s->total && s->cb_ok >= s->total &&
	       s->nheld == 0;
}

static void stream_assert(const struct stream *s)
{
	assert_int_equal(s->send_err, 0);
	assert_int_equal(s->bad, 0);
	assert_int_equal(s->stray_recv, 0);
	assert_int_equal(s->cb_err, 0);
	assert_int_equal(s->closes[0], 0);
	assert_int_equal(s->closes[1], 0);
	assert_int_equal(s->next_recv, s->total);
	assert_int_equal(s->cb_ok, s->total);
	assert_int_equal(s->inflight, 0);
	for (uint32_t k = 0; k < s->total; k++)
		if (s->cb_count[k] != 1)
			fail_msg("stream %u message %u: %u callbacks", s->id, k,
				 s->cb_count[k]);
}

/* ------------------------------------------------------------------------ */
/* Two connections under backpressure                                       */

#define BP_CONNS  2
#define BP_MSGS	  100000
#define BP_WINDOW 64

struct bp {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	struct stream s[BP_CONNS];
	ev_timer release;
	int accepts, bad_accepts;
};

static void bp_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct bp *b = arg;
	struct evr_conn_opts o;
	struct stream *s;
	uint8_t idx;

	(void)l;
	b->accepts++;
	if (ulen != 1 || (idx = *(const uint8_t *)ud) >= BP_CONNS) {
		b->bad_accepts++;
		evr_reject(req, NULL, 0);
		return;
	}
	s = &b->s[idx];
	stream_conn_opts(s, &o, false);
	/* stream 0 sends from the connecting side, stream 1 from the
	 * accepting side */
	assert_int_equal(evr_accept(req, &o, idx == 1 ? &s->tx : &s->rx), 0);
}

/* The late receiver: every tick releases all that is held. */
static void bp_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct bp *b = w->data;

	(void)loop;
	(void)revents;
	for (int i = 0; i < BP_CONNS; i++)
		stream_release(&b->s[i]);
}

static int bp_up(void *arg)
{
	struct bp *b = arg;

	for (int i = 0; i < BP_CONNS; i++)
		if (b->s[i].connects[0] + b->s[i].connects[1] < 2)
			return 0;
	return 1;
}

static int bp_done(void *arg)
{
	struct bp *b = arg;

	for (int i = 0; i < BP_CONNS; i++)
		if (!stream_done(&b->s[i]))
			return 0;
	return 1;
}

static int bp_closed(void *arg)
{
	struct bp *b = arg;

	for (int i = 0; i < BP_CONNS; i++)
		if (!b->s[i].closes[0] || !b->s[i].closes[1])
			return 0;
	return 1;
}

static void test_backpressure(void **state)
{
	struct bp *b = calloc(1, sizeof(*b));
	struct evr_ctx_opts o;
	struct evr_stats st;
	unsigned max_held = 0;
	double t0, dt;

	(void)state;
	assert_non_null(b);
	b->loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&b->ctx, b->loop, &o), 0);
	assert_int_equal(
	    evr_listen(b->ctx, rt_addr(), 0, 16, bp_accept, b, &b->l), 0);
	for (uint8_t i = 0; i < BP_CONNS; i++) {
		struct stream *s = &b->s[i];
		struct evr_conn_opts co;

		stream_init(s, i, BP_MSGS, BP_WINDOW, true);
		stream_conn_opts(s, &co, true);
		co.user_data = &i;
		co.user_len = 1;
		assert_int_equal(evr_connect(b->ctx, rt_addr(),
					     evr_listener_port(b->l), &co,
					     i == 0 ? &s->tx : &s->rx),
				 0);
	}
	assert_int_equal(rt_run_until(b->loop, bp_up, b, 20), 0);
	assert_int_equal(b->accepts, BP_CONNS);
	assert_int_equal(b->bad_accepts, 0);
	for (int i = 0; i < BP_CONNS; i++) {
		assert_int_equal(b->s[i].connects[0], 1);
		assert_int_equal(b->s[i].connects[1], 1);
		assert_int_equal(b->s[i].connect_status[0], 0);
		assert_int_equal(b->s[i].connect_status[1], 0);
	}

	ev_timer_init(&b->release, bp_tick, 0.002, 0.002);
	b->release.data = b;
	ev_timer_start(b->loop, &b->release);
	t0 = rt_now();
	for (int i = 0; i < BP_CONNS; i++)
		stream_pump(&b->s[i]);
	assert_int_equal(rt_run_until(b->loop, bp_done, b, 80), 0);
	/* how much the receivers held at a time while it ran */
	for (int i = 0; i < BP_CONNS; i++)
		if (b->s[i].peak_held > max_held)
			max_held = b->s[i].peak_held;
	dt = rt_now() - t0;
	ev_timer_stop(b->loop, &b->release);
	evr_ctx_stats(b->ctx, &st);
	printf("# %d x %d messages, window %d, late release: %.1f s, "
	       "%.0f msgs/s; at most %u held; %llu credit updates\n",
	       BP_CONNS, BP_MSGS, BP_WINDOW, dt, BP_CONNS * BP_MSGS / dt,
	       max_held, (unsigned long long)st.credit_updates);
	for (int i = 0; i < BP_CONNS; i++) {
		stream_assert(&b->s[i]);
		assert_int_equal(b->s[i].releases, BP_MSGS);
	}
	/* the receivers really held messages back, up to their queues */
	assert_true(max_held >= BP_WINDOW / 4);
	assert_true(max_held <= 64 /* default recv_depth */);

	for (int i = 0; i < BP_CONNS; i++)
		assert_int_equal(evr_conn_close(b->s[i].tx, 0), 0);
	assert_int_equal(rt_run_until(b->loop, bp_closed, b, 20), 0);
	for (int i = 0; i < BP_CONNS; i++) {
		struct stream *s = &b->s[i];
		int closer = i == 0 ? 0 : 1;

		assert_int_equal(s->closes[0], 1);
		assert_int_equal(s->closes[1], 1);
		assert_int_equal(s->close_status[closer], 0);
		assert_int_equal(s->close_status[!closer], -ESHUTDOWN);
		stream_fini(s);
	}
	evr_listener_close(b->l);
	evr_ctx_destroy(b->ctx);
	ev_loop_destroy(b->loop);
	free(b);
}

/* ------------------------------------------------------------------------ */
/* One-way stream: credits come back in explicit updates only.              */

#define OW_MSGS	  30000
#define OW_WINDOW 128

static int ow_done(void *arg)
{
	return stream_done(arg);
}

static int ow_closed(void *arg)
{
	struct stream *s = arg;

	return s->closes[0] && s->closes[1];
}

static void ow_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct stream *s = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	stream_conn_opts(s, &o, false);
	assert_int_equal(evr_accept(req, &o, &s->rx), 0);
}

static void test_one_way(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	struct evr_stats sst, cst;
	evr_ctx *sctx, *cctx;
	evr_listener *l;
	struct stream s;
	struct evr_conn_opts co;
	const unsigned depth = 64;
	double t0, dt;

	(void)state;
	rt_ctx_opts(&o);
	o.recv_depth = depth;
	/* each end on a ctx of its own: the statistics tell them apart */
	assert_int_equal(evr_ctx_create(&sctx, loop, &o), 0);
	assert_int_equal(evr_ctx_create(&cctx, loop, &o), 0);
	stream_init(&s, 7, OW_MSGS, OW_WINDOW, false);
	assert_int_equal(evr_listen(sctx, rt_addr(), 0, 16, ow_accept, &s, &l),
			 0);
	stream_conn_opts(&s, &co, true);
	assert_int_equal(
	    evr_connect(cctx, rt_addr(), evr_listener_port(l), &co, &s.tx), 0);
	t0 = rt_now();
	stream_pump(&s);
	assert_int_equal(rt_run_until(loop, ow_done, &s, 60), 0);
	dt = rt_now() - t0;
	stream_assert(&s);
	evr_ctx_stats(sctx, &sst);
	evr_ctx_stats(cctx, &cst);
	printf("# one way: %d messages in %.1f s; the receiver sent %llu "
	       "credit updates, the sender %llu\n",
	       OW_MSGS, dt, (unsigned long long)sst.credit_updates,
	       (unsigned long long)cst.credit_updates);
	/* The receiver sent no message of its own: every credit the sender
	 * got back came in updates.  The sender sends data only, which
	 * leaves the last 2 credits alone (kept for control messages,
	 * lib/credit.h): at most depth - 2 of its credits are ever out, so
	 * no update returns more, and it needed OW_MSGS - (depth - 2) back. */
	assert_int_equal(sst.msgs_sent, 0);
	assert_int_equal(sst.msgs_recv, OW_MSGS);
	assert_true(sst.credit_updates * (depth - 2) >= OW_MSGS - (depth - 2));
	/* Each update is worth a quarter of the queue, not one message: one
	 * goes out only once depth / 4 credits are owed (lib/credit.h; the
	 * rule for a starved peer asks for more here, where nothing is held
	 * and all depth receives are posted again at once), and it carries
	 * all that are owed.  The receiver owed one credit per message it
	 * took, OW_MSGS in all, so at most OW_MSGS / (depth / 4) updates... */
	assert_true(sst.credit_updates <= OW_MSGS / (depth / 4));
	/* ...and updates do not echo: the sender's data carries the credits
	 * for the receives the updates consumed. */
	assert_int_equal(cst.credit_updates, 0);
	assert_int_equal(cst.msgs_sent, OW_MSGS);

	assert_int_equal(evr_conn_close(s.tx, 0), 0);
	assert_int_equal(rt_run_until(loop, ow_closed, &s, 20), 0);
	assert_int_equal(s.closes[0], 1);
	assert_int_equal(s.closes[1], 1);
	assert_int_equal(s.close_status[0], 0);
	assert_int_equal(s.close_status[1], -ESHUTDOWN);
	stream_fini(&s);
	evr_listener_close(l);
	evr_ctx_destroy(cctx);
	evr_ctx_destroy(sctx);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* The send queue limit                                                     */

#define SQL_LIMIT (64u << 10)

struct sq {
	struct rt_pair *p;
	uint8_t *buf; /* message k is buf + k * msg_len, pattern k */
	size_t msg_len;
	uint32_t total; /* messages to send */
	uint32_t next;	/* next to submit */
	int ok, err, enobufs, other_err;
	int drains;
	size_t queued_at_drain;
	bool pump_on_drain;
	/* receiver */
	uint32_t got;
	int bad;
	bool hold;
	evr_msg *held[256];
	int nheld;
	ev_timer release;
};

static void sq_sent(evr_conn *c, int status, void *arg)
{
	struct sq *q = arg;

	(void)c;
	if (status == 0)
		q->ok++;
	else
		q->err++;
}

/* Send until the queue is full (or all is sent). */
static void sq_pump(struct sq *q)
{
	while (q->next < q->total) {
		int rc = evr_send(q->p->cli.conn, q->buf + q->next * q->msg_len,
				  q->msg_len, sq_sent, q);

		if (rc == -ENOBUFS) {
			q->enobufs++;
			return;
		}
		if (rc) {
			q->other_err++;
			return;
		}
		q->next++;
	}
}

static void sq_drain(evr_conn *c, void *arg)
{
	struct sq *q = ((struct rt_side *)arg)->user;
	struct evr_conn_info info;

	q->drains++;
	assert_int_equal(evr_conn_info(c, &info), 0);
	if (info.queued_bytes > q->queued_at_drain)
		q->queued_at_drain = info.queued_bytes;
	if (q->pump_on_drain)
		sq_pump(q);
}

static void sq_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct sq *q = ((struct rt_side *)arg)->user;
	uint32_t k = q->got++;
	evr_msg *m;

	if (len != q->msg_len || rt_verify(data, len, k) >= 0)
		q->bad++;
	if (q->hold) {
		m = evr_conn_hold(c);
		if (!m || q->nheld >= 256)
			q->bad++;
		else
			q->held[q->nheld++] = m;
	}
}

/* A slow receiver: lets its messages go only every 20 ms. */
static void sq_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct sq *q = w->data;

	(void)loop;
	(void)revents;
	while (q->nheld)
		evr_msg_release(q->held[--q->nheld]);
}

static int sq_all(void *arg)
{
	struct sq *q = arg;

	return (q->got >= q->total && q->ok + q->err >= (int)q->total) ||
	       q->bad || q->err || q->other_err;
}

static int sq_drained(void *arg)
{
	return ((struct sq *)arg)->drains > 0;
}

static void sq_setup(struct sq *q, struct rt_pair *p, struct ev_loop *loop,
		     size_t msg_len, uint32_t total)
{
	struct evr_ctx_opts o;

	memset(q, 0, sizeof(*q));
	q->p = p;
	q->msg_len = msg_len;
	q->total = total;
	q->buf = malloc(msg_len * total);
	assert_non_null(q->buf);
	for (uint32_t k = 0; k < total; k++)
		rt_fill(q->buf + k * msg_len, msg_len, k);
	rt_ctx_opts(&o);
	o.send_queue_limit = SQL_LIMIT; /* low-watermark: half of it */
	rt_pair_init(p, loop, &o);
	p->cli.user = p->srv.user = q;
	p->cli_opts.on_drain = sq_drain;
	p->srv_opts.on_recv = sq_recv;
	rt_pair_connect(p);
}

static void sq_teardown(struct sq *q, struct rt_pair *p, struct ev_loop *loop)
{
	rt_pair_close(p);
	assert_int_equal(p->cli.close_status, 0);
	rt_pair_fini(p);
	free(q->buf);
	ev_loop_destroy(loop);
}

/* A burst from outside the loop: the limit is exact. */
static void test_queue_limit_burst(void **state)
{
	const size_t len = 4096;
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct rt_pair p;
	struct sq q;
	uint32_t fit = SQL_LIMIT / len;

	(void)state;
	sq_setup(&q, &p, loop, len, 3 * fit);
	q.total = fit; /* stop there for now */
	sq_pump(&q);
	assert_int_equal(q.next, fit);
	assert_int_equal(q.enobufs, 0);
	assert_int_equal(evr_send(p.cli.conn, q.buf, len, sq_sent, &q),
			 -ENOBUFS);
	assert_int_equal(evr_send(p.cli.conn, q.buf, 1, sq_sent, &q), -ENOBUFS);
	/* on_drain comes from the loop, never from inside the call */
	assert_int_equal(q.drains, 0);
	assert_int_equal(rt_run_until(loop, sq_drained, &q, 10), 0);
	assert_int_equal(q.drains, 1);
	assert_true(q.queued_at_drain <= SQL_LIMIT / 2);
	/* after on_drain the queue takes a full burst again */
	q.total = 2 * fit;
	sq_pump(&q);
	assert_int_equal(q.next, 2 * fit);
	assert_int_equal(q.enobufs, 0);
	assert_int_equal(rt_run_until(loop, sq_all, &q, 20), 0);
	assert_int_equal(q.got, 2 * fit);
	assert_int_equal(q.ok, (int)(2 * fit));
	assert_int_equal(q.err, 0);
	assert_int_equal(q.bad, 0);
	/* no -ENOBUFS since the first: on_drain only answers one */
	assert_int_equal(q.drains, 1);

	/* a message larger than the limit still goes when the queue is
	 * empty (it could never go otherwise), and then fills it */
	{
		uint8_t *big = malloc(2 * SQL_LIMIT);

		assert_non_null(big);
		rt_fill(big, 2 * SQL_LIMIT, 2 * fit);
		q.msg_len = 2 * SQL_LIMIT;
		q.total = 2 * fit + 1;
		assert_int_equal(
		    evr_send(p.cli.conn, big, 2 * SQL_LIMIT, sq_sent, &q), 0);
		assert_int_equal(evr_send(p.cli.conn, big, 1, sq_sent, &q),
				 -ENOBUFS);
		assert_int_equal(rt_run_until(loop, sq_all, &q, 20), 0);
		assert_int_equal(q.got, 2 * fit + 1);
		assert_int_equal(q.ok, (int)(2 * fit + 1));
		assert_int_equal(q.bad, 0);
		assert_int_equal(q.drains, 2);
		free(big);
	}
	sq_teardown(&q, &p, loop);
}

/* A stream into a slow receiver: -ENOBUFS, on_drain, again and again. */
static void test_queue_limit_stream(void **state)
{
	const size_t len = 2048;
	const uint32_t total = 4000;
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct rt_pair p;
	struct sq q;
	double t0;

	(void)state;
	sq_setup(&q, &p, loop, len, total);
	q.pump_on_drain = true;
	q.hold = true;
	ev_timer_init(&q.release, sq_tick, 0.02, 0.02);
	q.release.data = &q;
	ev_timer_start(loop, &q.release);
	t0 = rt_now();
	sq_pump(&q);
	assert_int_equal(q.enobufs, 1);
	assert_int_equal(rt_run_until(loop, sq_all, &q, 60), 0);
	ev_timer_stop(loop, &q.release);
	sq_tick(loop, &q.release, 0);
	printf("# %u x %zu bytes into a slow receiver: %.1f s, %d x -ENOBUFS, "
	       "%d x on_drain\n",
	       total, len, rt_now() - t0, q.enobufs, q.drains);
	assert_int_equal(q.got, total);
	assert_int_equal(q.ok, (int)total);
	assert_int_equal(q.err, 0);
	assert_int_equal(q.other_err, 0);
	assert_int_equal(q.bad, 0);
	assert_true(q.enobufs > 1);
	/* every -ENOBUFS was answered by exactly one on_drain, at or below
	 * the low-watermark */
	assert_int_equal(q.drains, q.enobufs);
	assert_true(q.queued_at_drain <= SQL_LIMIT / 2);
	sq_teardown(&q, &p, loop);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_backpressure),
	    cmocka_unit_test(test_one_way),
	    cmocka_unit_test(test_queue_limit_burst),
	    cmocka_unit_test(test_queue_limit_stream),
	};

	rt_init(170);
	return cmocka_run_group_tests_name("rdma_flow", tests, NULL, NULL);
}
