/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The shared receive queue (lib/srq.c, lib/bank.h and its paths in
 * lib/conn.c, lib/msg.c, lib/loop.c) on a mock device that has one,
 * against the peer fixture: the peer fills the SRQ's posted receives and
 * names our conn's QP in the completion.
 *
 * Cases: the handshake of a conn on the shared queue (a window of 8 out
 * of 64 when the peer takes windows, a fixed 8 otherwise) and what
 * evr_conn_info says of it; messages arrive intact and every re-post
 * gives the peer its credit back, exactly, with credits lent never above
 * buffers posted; a window that grows on EVR_F_WANT; a message beyond
 * the credits lent fails that conn alone (-EPROTO) and its buffer goes
 * back, as does one that lands after; a pool at its limit refuses the
 * next conn (-ENOBUFS); a re-post the SRQ refuses fails its conn and the
 * books still balance; a message before our ESTABLISHED event waits for
 * it, or goes back if the connect fails; a held message outlives its
 * conn and goes back to the queue as an orphan; after close and teardown
 * everything lent is back; EVR_SRQ_ON on a device without SRQs fails
 * the first connection; and the idle cycle's credit updates: a give-back
 * takes the credits off the books, an ask restores the window, and from
 * a peer lent no window, or giving back more than it holds, either is
 * -EPROTO on that conn alone.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "peer.h"

#define DEPTH 64 /* our recv_depth: the largest window */
#define WIN   8	 /* the window lent at admission (srq.c) */

/* A device with shared receive queues, fresh mocks. */
static void mocks_srq(void)
{
	peer_mocks_reset();
	mock_cm.max_srq = 1;
	mock_cm.max_srq_wr = 4096;
}

static void srq_opts(struct evr_ctx_opts *o)
{
	peer_ctx_opts(o);
	o->recv_depth = DEPTH;
	o->srq = EVR_SRQ_ON; /* not AUTO: the environment does not decide */
	o->srq_buffers = 256;
}

static evr_ctx *srq_start(struct peer *p)
{
	struct evr_ctx_opts o;
	evr_ctx *ctx;

	mocks_srq();
	srq_opts(&o);
	ctx = peer_start(p, &o);
	assert_null(ctx->srq); /* made with the first QP */
	return ctx;
}

static struct evr_stats stats(evr_ctx *ctx)
{
	struct evr_stats st;

	memset(&st, 0, sizeof(st));
	evr_ctx_stats(ctx, &st);
	return st;
}

/* The bank's promise, and the SRQ as the mock holds it: once every
 * completion has been taken, the buffers the library counts as posted are
 * the receives the peer may still fill. */
static void check_bank(evr_ctx *ctx)
{
	struct evr_stats st = stats(ctx);

	assert_true(st.srq_lent <= st.srq_posted);
	assert_true(st.srq_posted <= st.srq_buffers);
	if (!mock_wc_left())
		assert_int_equal(mock_wrs.nsrecv - mock_wrs.srq_next,
				 st.srq_posted);
}

/* Everything lent came back, and every buffer is posted again. */
static void check_all_back(evr_ctx *ctx)
{
	struct evr_stats st = stats(ctx);

	assert_int_equal(st.srq_lent, 0);
	assert_int_equal(st.srq_posted, st.srq_buffers);
	assert_true(st.srq_buffers > 0);
	check_bank(ctx);
}

/* Pump until the conns released are freed (out of limbo). */
static void pump_reaped(evr_ctx *ctx)
{
	int i;

	for (i = 0; i < 16 && !evr__list_empty(&ctx->limbo); i++)
		peer_pump(ctx);
	assert_true(evr__list_empty(&ctx->limbo));
}

/* The handshake our side sent: connect's or accept's private data. */
static struct evr__hs our_hs(const struct peer *p)
{
	const struct mock_id *m = mock_id_of(p->id);
	struct evr__hs hs;
	const char *why = NULL;

	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, &why), 0);
	return hs;
}

static struct evr_conn_info info_of(evr_conn *c)
{
	struct evr_conn_info in;

	assert_int_equal(evr_conn_info(c, &in), 0);
	return in;
}

/* The peer's side of the credit exchange: what it may still send, and
 * what it owes us (it re-posts at once each receive our frames used). */
struct ledger {
	unsigned avail; /* credits the peer holds */
	unsigned sent;	/* messages it sent */
	unsigned back;	/* credits our frames brought it */
	unsigned owe;	/* our frames it took, not yet credited to us */
};

/* Read our new frames: the credits they carry are the peer's again; our
 * sends are completed, so the SQ never fills. */
static void take_credits(struct peer *p, struct ledger *l)
{
	struct peer_frame fr;

	while (peer_next(p, &fr)) {
		assert_true(fr.parsed);
		l->avail += fr.msg.hdr.credits;
		l->back += fr.msg.hdr.credits;
		l->owe++;
	}
	peer_ack(p);
}

/* The peer may send data while its credits exceed the reserve its side
 * keeps for control messages (reserve of our announced depth). */
static bool may_send(const struct ledger *l, unsigned depth)
{
	return l->avail > evr__credit_reserve(depth);
}

/* An eager message from the peer, with flags (EVR_F_WANT) as given. */
static void peer_eager_flags(struct peer *p, const void *data, uint32_t len,
			     uint8_t flags, uint16_t credits)
{
	struct evr__hdr h = {EVR_T_EAGER, flags, credits, len};
	uint8_t buf[EVR_HDR_SIZE + 64];

	assert_true(len <= 64);
	evr__hdr_encode(buf, &h);
	memcpy(buf + EVR_HDR_SIZE, data, len);
	peer_raw(p, buf, EVR_HDR_SIZE + len);
}

/* ---- the handshake ---- */

/* Ours connects: we announce the largest window, lend the first 8, and
 * take no receive queue of our own. */
static void test_hs_connect(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct evr__hs hs;
	struct evr_conn_info in;
	struct evr_stats st;

	(void)state;
	peer_connect(&p);
	hs = our_hs(&p);
	assert_int_equal(hs.kind, EVR_HS_REQ);
	assert_int_equal(hs.recv_depth, DEPTH);
	assert_int_equal(hs.init_window, WIN);
	in = info_of(p.conn);
	assert_int_equal(in.srq, 1);
	assert_int_equal(in.recv_window, WIN);
	assert_int_equal(mock_cm.create_srq, 1);
	assert_ptr_equal(mock_qp_srq(p.qp), mock_cm.srq);
	assert_int_equal(mock.post_recv_wrs, 0); /* no queue of its own */
	st = stats(ctx);
	assert_int_equal(st.srq_lent, WIN);
	assert_true(st.srq_buffers <= mock_cm.srq_max_wr);
	assert_int_equal(st.srq_bytes,
			 (uint64_t)st.srq_buffers * ctx->pool.buf_size);
	assert_true(st.srq_bytes <= st.pool_bytes);
	/* an idle connection's own state stays well within its budget */
	assert_int_equal(st.conn_bytes, sizeof(struct evr_conn));
	assert_true(st.conn_bytes <= 4096);
	check_bank(ctx);
	peer_stop(&p);
}

/* Ours accepts a peer that takes windows (init_window in its request):
 * the same as connecting. */
static void test_hs_accept_windowed(void **state)
{
	struct peer p;
	struct evr__hs hs;
	struct evr_conn_info in;

	(void)state;
	srq_start(&p);
	p.init_window = 8;
	peer_accept(&p);
	hs = our_hs(&p);
	assert_int_equal(hs.kind, EVR_HS_REP);
	assert_int_equal(hs.recv_depth, DEPTH);
	assert_int_equal(hs.init_window, WIN);
	in = info_of(p.conn);
	assert_int_equal(in.srq, 1);
	assert_int_equal(in.recv_window, WIN);
	peer_stop(&p);
}

/* Ours accepts a peer that lends all at once (no init_window): it cannot
 * be told of a window that moves, so it gets a fixed 8 as our depth. */
static void test_hs_accept_fixed(void **state)
{
	struct peer p;
	struct evr__hs hs;
	struct evr_conn_info in;

	(void)state;
	srq_start(&p);
	peer_accept(&p);
	hs = our_hs(&p);
	assert_int_equal(hs.recv_depth, WIN);
	assert_int_equal(hs.init_window, 0);
	in = info_of(p.conn);
	assert_int_equal(in.srq, 1);
	assert_int_equal(in.recv_window, WIN);
	peer_stop(&p);
}

/* ---- messages and credits ---- */

/* The peer's messages arrive intact, and each buffer re-posted gives its
 * credit back: the peer, counting what it sent and what our frames
 * returned, always holds what the bank lent minus what we still owe. */
static void test_recv_credits_back(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct ledger l = {WIN, 0, 0, 0};
	char msg[32];
	unsigned i;

	(void)state;
	peer_accept(&p); /* fixed window: every credit comes back */
	for (i = 0; i < 40; i++) {
		int n = snprintf(msg, sizeof(msg), "message %u", i);

		assert_true(may_send(&l, WIN));
		peer_eager(&p, msg, (size_t)n, (uint16_t)l.owe);
		l.owe = 0;
		l.avail--;
		l.sent++;
		peer_pump(ctx);
		check_bank(ctx);
		assert_int_equal(p.nmsgs, i + 1);
		assert_int_equal(p.msgs[i].len, (size_t)n);
		assert_memory_equal(p.msgs[i].data, msg, (size_t)n);
		take_credits(&p, &l);
		peer_pump(ctx);
		check_bank(ctx);
		assert_int_equal(p.conn->bank.busy, 0); /* all re-posted */
		assert_int_equal(p.conn->bank.lent, WIN);
		assert_int_equal(l.avail + p.conn->cr.owed, p.conn->bank.lent);
	}
	assert_int_equal(l.back + p.conn->cr.owed, l.sent);
	assert_int_equal(stats(ctx).srq_withheld, 0);
	assert_int_equal(p.connects, 1);
	assert_int_equal(p.closes, 0);
	peer_stop(&p);
}

static unsigned counted;

static void count_only(struct peer *p, const void *data, size_t len)
{
	(void)data;
	(void)len;
	/* keep no copy: the test sends more than PEER_MAX_MSGS */
	free(p->msgs[p->nmsgs - 1].data);
	p->nmsgs--;
	counted++;
}

/* A peer whose window holds it back says so (EVR_F_WANT): the window
 * grows, never past our depth, and never lends beyond what is posted.
 * imm: the peer's messages carry their headers in immediate data. */
static void window_grows_on_want(bool imm)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct ledger l = {WIN, 0, 0, 0};
	unsigned i, j;

	p.imm_hdr = imm;
	peer_connect(&p);
	assert_int_equal(evr__agreed(p.conn, EVR_HS_F_IMM), imm);
	p.on_recv = count_only;
	counted = 0;
	for (i = 0; i < 20; i++) {
		/* all the data credits at once, every message asking for
		 * more (as a sender with more queued does) */
		for (j = 0; may_send(&l, DEPTH); j++) {
			if (imm)
				peer_imm_eager(&p, "w", 1, EVR_F_WANT,
					       (uint16_t)l.owe);
			else
				peer_eager_flags(&p, "w", 1, EVR_F_WANT,
						 (uint16_t)l.owe);
			l.owe = 0;
			l.avail--;
			l.sent++;
		}
		peer_pump(ctx);
		check_bank(ctx);
		take_credits(&p, &l);
		peer_pump(ctx);
		take_credits(&p, &l);
		check_bank(ctx);
		assert_int_equal(l.avail + p.conn->cr.owed, p.conn->bank.lent);
		assert_true(info_of(p.conn).recv_window <= DEPTH);
	}
	assert_int_equal(counted, l.sent);
	assert_true(info_of(p.conn).recv_window > WIN);
	assert_true(stats(ctx).srq_grown > 0);
	assert_int_equal(p.closes, 0);
	peer_stop(&p);
}

static void test_window_grows_on_want(void **state)
{
	(void)state;
	window_grows_on_want(false);
}

static void test_window_grows_on_want_imm(void **state)
{
	(void)state;
	window_grows_on_want(true);
}

/* A message beyond the credits lent: that conn alone fails, with
 * -EPROTO, and the buffer it landed in goes back to the queue. */
static void test_beyond_credits(void **state)
{
	struct peer p, q;
	evr_ctx *ctx = srq_start(&p);
	struct evr_stats st;
	unsigned i;

	(void)state;
	peer_accept(&p); /* fixed window of 8 */
	peer_init(&q, ctx);
	peer_connect(&q);
	/* nine messages on eight credits, before we re-post any, and one
	 * more that lands on the failed conn */
	for (i = 0; i < WIN + 2; i++)
		peer_eager(&p, "x", 1, 0);
	peer_pump(ctx);
	assert_int_equal(p.nmsgs, WIN);
	check_bank(ctx);
	peer_flush_closed(&p, -EPROTO);
	pump_reaped(ctx);
	st = stats(ctx);
	assert_int_equal(st.srq_posted, st.srq_buffers);
	assert_int_equal(st.srq_lent, WIN); /* q's */
	check_bank(ctx);
	/* q did not notice */
	assert_int_equal(q.closes, 0);
	assert_int_equal(q.conn->state, EVR_CS_ESTABLISHED);
	peer_eager(&q, "still here", 10, 0);
	peer_pump(ctx);
	assert_int_equal(q.nmsgs, 1);
	assert_memory_equal(q.msgs[0].data, "still here", 10);
	check_bank(ctx);
	peer_fini(&q);
	peer_stop(&p);
}

/* A pool at its limit with everything lent: the next conn is refused
 * (-ENOBUFS) before its QP is made, and the first goes on. */
static void test_pool_full_refused(void **state)
{
	struct evr_ctx_opts o;
	struct peer p, q;
	struct evr_conn_opts co;
	evr_conn *c = NULL;
	evr_ctx *ctx;
	struct evr_stats st;
	unsigned qps;

	(void)state;
	mocks_srq();
	srq_opts(&o);
	o.srq_buffers = WIN; /* one initial window */
	ctx = peer_start(&p, &o);
	peer_connect(&p);
	st = stats(ctx);
	assert_int_equal(st.srq_buffers, WIN);
	assert_int_equal(st.srq_lent, WIN);
	qps = mock_cm.create_qp;
	peer_init(&q, ctx);
	peer_conn_opts(&q, &co);
	assert_int_equal(evr_connect(ctx, "192.0.2.2", 7471, &co, &c), 0);
	q.id = mock_cm_last_id();
	mock_cm_event(q.id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	mock_cm_event(q.id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	peer_pump(ctx);
	assert_int_equal(q.connects, 1);
	assert_int_equal(q.connect_status, -ENOBUFS);
	assert_int_equal(mock_cm.create_qp, qps);
	st = stats(ctx);
	assert_int_equal(st.srq_refused, 1);
	assert_int_equal(st.srq_lent, WIN);
	check_bank(ctx);
	peer_eager(&p, "ok", 2, 0);
	peer_pump(ctx);
	assert_int_equal(p.nmsgs, 1);
	peer_fini(&q);
	peer_stop(&p);
}

/* The SRQ refuses a re-post: the buffer is lost to the pool (the bank
 * owns one fewer), its conn fails with the error, and the books still
 * balance once it is gone. */
static void test_repost_fails(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct evr_stats st;
	uint32_t buffers;

	(void)state;
	ctx->tune.srq_batch = 1; /* each flush posts its re-posts */
	peer_accept(&p);
	buffers = stats(ctx).srq_buffers;
	mock.post_srq_rc = -ENOMEM;
	peer_eager(&p, "lost", 4, 0);
	peer_pump(ctx);
	mock.post_srq_rc = 0;
	assert_int_equal(p.nmsgs, 1);
	peer_flush_closed(&p, -ENOMEM);
	pump_reaped(ctx);
	st = stats(ctx);
	assert_int_equal(st.srq_lent, 0);
	assert_int_equal(st.srq_posted, st.srq_buffers);
	assert_true(st.srq_buffers >= buffers - 1);
	check_bank(ctx);
	peer_stop(&p);
}

/* The peer sends a one-byte message on a credit of a fixed window; our
 * frames' credits come back to it. */
static void send_one(struct peer *p, struct ledger *l, const char *byte)
{
	assert_true(may_send(l, WIN));
	peer_eager(p, byte, 1, (uint16_t)l->owe);
	l->owe = 0;
	l->avail--;
	l->sent++;
	peer_pump(p->ctx);
	take_credits(p, l);
	peer_pump(p->ctx);
}

/* Re-posts wait for a batch: srq_batch messages' buffers go to the SRQ in
 * one post, their credits announced before it; the receives the peer may
 * fill never fall below the credits lent.  A batch the SRQ refuses fails
 * the conn whose flush posted it, and the books balance once it is
 * gone. */
static void test_repost_batched(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct ledger l = {WIN, 0, 0, 0};
	struct evr_stats st;
	unsigned i, calls, batch = ctx->tune.srq_batch;
	uint32_t buffers;

	(void)state;
	assert_true(batch > 1);
	peer_accept(&p); /* fixed window: every credit comes back */
	buffers = stats(ctx).srq_buffers;
	calls = mock.post_srq_calls;
	for (i = 1; i <= 3 * batch; i++) {
		if (i == 3 * batch)
			mock.post_srq_rc = -ENOMEM; /* the third batch */
		send_one(&p, &l, "b");
		if (i == 3 * batch)
			break;
		check_bank(ctx);
		assert_int_equal(ctx->bank.unposted, i % batch);
		assert_int_equal(mock.post_srq_calls, calls + i / batch);
		assert_int_equal(p.conn->bank.busy, 0); /* all counted */
		assert_int_equal(l.avail + p.conn->cr.owed, p.conn->bank.lent);
		assert_true(stats(ctx).srq_lent <= stats(ctx).srq_posted);
	}
	mock.post_srq_rc = 0;
	assert_int_equal(mock.post_srq_calls, calls + 3);
	assert_int_equal(p.nmsgs, 3 * batch);
	assert_int_equal(p.msgs[0].len, 1);
	peer_flush_closed(&p, -ENOMEM);
	pump_reaped(ctx);
	st = stats(ctx);
	assert_int_equal(ctx->bank.unposted, 0);
	assert_int_equal(st.srq_lent, 0);
	assert_int_equal(st.srq_posted, st.srq_buffers);
	assert_true(st.srq_buffers >= buffers - batch); /* lost */
	check_bank(ctx);
	peer_stop(&p);
}

/* With too little spare to cover a wait (a pool of two windows), re-posts
 * go to the SRQ at the flush that counts them, and the peer never meets
 * an empty queue. */
static void test_repost_batch_uncovered(void **state)
{
	struct evr_ctx_opts o;
	struct peer p;
	struct ledger l = {WIN, 0, 0, 0};
	evr_ctx *ctx;
	unsigned i, calls;

	(void)state;
	mocks_srq();
	srq_opts(&o);
	o.srq_buffers = WIN + 2;
	ctx = peer_start(&p, &o);
	peer_accept(&p);
	assert_int_equal(stats(ctx).srq_buffers, WIN + 2);
	calls = mock.post_srq_calls;
	for (i = 1; i <= 3 * WIN; i++) {
		send_one(&p, &l, "u");
		check_bank(ctx);
		assert_true(ctx->bank.unposted <= 1);
		assert_true(stats(ctx).srq_lent <= stats(ctx).srq_posted);
	}
	assert_true(mock.post_srq_calls >= calls + 3 * WIN - 1);
	assert_int_equal(p.nmsgs, 3 * WIN);
	assert_int_equal(p.closes, 0);
	peer_stop(&p);
}

/* Ours connects up to CONNECTING: the QP is made, the ESTABLISHED event
 * not taken yet. */
static void connect_until_established(struct peer *p)
{
	struct evr_conn_opts co;

	peer_conn_opts(p, &co);
	assert_int_equal(evr_connect(p->ctx, "192.0.2.1", 7471, &co,
				     &p->conn),
			 0);
	p->id = mock_cm_last_id();
	mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	peer_pump(p->ctx);
	mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	peer_pump(p->ctx);
	p->qp = p->id->qp;
	assert_non_null(p->qp);
	assert_int_equal(p->conn->state, EVR_CS_CONNECTING);
}

/* A message that lands before our ESTABLISHED event waits for it, and is
 * counted against the conn then.  imm: it carries its header in
 * immediate data, which the reply then agrees to. */
static void early_message(bool imm)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	uint8_t hs[EVR_HS_MAX];
	size_t n;

	connect_until_established(&p);
	if (imm)
		peer_imm_eager(&p, "early", 5, 0, 0);
	else
		peer_eager(&p, "early", 5, 0);
	peer_pump(ctx);
	assert_int_equal(p.nmsgs, 0);
	p.init_window = 8;
	p.imm_hdr = imm;
	n = peer_hs(&p, EVR_HS_REP, hs);
	mock_cm_event(p.id, RDMA_CM_EVENT_ESTABLISHED, 0, hs, n);
	peer_pump(ctx);
	assert_int_equal(p.connects, 1);
	assert_int_equal(p.connect_status, 0);
	assert_int_equal(p.nmsgs, 1);
	assert_int_equal(p.msgs[0].len, 5);
	assert_memory_equal(p.msgs[0].data, "early", 5);
	check_bank(ctx);
	assert_int_equal(p.conn->bank.busy, 0);
	peer_stop(&p);
}

static void test_early_message(void **state)
{
	(void)state;
	early_message(false);
}

static void test_early_message_imm(void **state)
{
	(void)state;
	early_message(true);
}

/* A message that lands before a connect that then fails goes back to the
 * queue unconsumed; the conn's window too. */
static void test_early_message_rejected(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);

	(void)state;
	connect_until_established(&p);
	peer_eager(&p, "early", 5, 0);
	peer_pump(ctx);
	mock_cm_event(p.id, RDMA_CM_EVENT_REJECTED, 28, NULL, 0);
	peer_pump(ctx);
	assert_int_equal(p.connects, 1);
	assert_true(p.connect_status < 0);
	assert_int_equal(p.nmsgs, 0);
	pump_reaped(ctx);
	check_all_back(ctx);
	peer_stop(&p);
}

/* ---- holding, closing, teardown ---- */

static evr_msg *held;

static void hold_it(struct peer *p, const void *data, size_t len)
{
	(void)data;
	(void)len;
	held = evr_conn_hold(p->conn);
	assert_non_null(held);
}

/* A message held past its conn: the conn is freed, the bank takes back
 * what it lent and counts the buffer an orphan; released, the buffer is
 * posted to the queue again. */
static void test_hold_orphan(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct evr_stats st;

	(void)state;
	peer_connect(&p);
	p.on_recv = hold_it;
	peer_eager(&p, "orphan", 6, 0);
	peer_pump(ctx);
	p.on_recv = NULL;
	assert_non_null(held);
	assert_int_equal(evr_conn_close(p.conn, EVR_CLOSE_ABORT), 0);
	peer_pump(ctx);
	peer_flush_closed(&p, -ECANCELED);
	pump_reaped(ctx);
	st = stats(ctx);
	assert_int_equal(st.srq_lent, 0);
	assert_int_equal(st.srq_posted, st.srq_buffers - 1); /* the held */
	assert_int_equal(ctx->bank.orphans, 1);
	check_bank(ctx);
	assert_int_equal(evr_msg_len(held), 6);
	assert_memory_equal(evr_msg_data(held), "orphan", 6);
	evr_msg_release(held);
	held = NULL;
	assert_int_equal(ctx->bank.orphans, 0);
	check_all_back(ctx);
	peer_stop(&p);
}

/* Two conns with traffic, both closed (one gracefully, one aborted):
 * once their limbo is reaped, nothing is lent and every buffer is posted,
 * and the ctx goes with its SRQ. */
static void test_close_all_back(void **state)
{
	struct peer p, q;
	evr_ctx *ctx = srq_start(&p);
	unsigned i;

	(void)state;
	peer_connect(&p);
	peer_init(&q, ctx);
	peer_accept(&q);
	for (i = 0; i < 5; i++) {
		peer_eager(&p, "p", 1, 0);
		peer_eager(&q, "q", 1, 0);
		peer_pump(ctx);
		check_bank(ctx);
		peer_ack(&p);
		peer_ack(&q);
	}
	assert_int_equal(p.nmsgs, 5);
	assert_int_equal(q.nmsgs, 5);
	/* p's window shrank (no message asked for more), q's is fixed */
	assert_int_equal(stats(ctx).srq_lent,
			 p.conn->bank.lent + q.conn->bank.lent);
	assert_int_equal(q.conn->bank.lent, WIN);
	assert_true(p.conn->bank.lent < WIN);

	assert_int_equal(evr_conn_close(p.conn, 0), 0);
	for (i = 0; i < 4 && p.conn && p.conn->state != EVR_CS_FLUSHING;
	     i++) {
		peer_pump(ctx);
		peer_ack(&p);
	}
	peer_flush_closed(&p, 0);
	assert_int_equal(evr_conn_close(q.conn, EVR_CLOSE_ABORT), 0);
	peer_pump(ctx);
	peer_flush_closed(&q, -ECANCELED);
	pump_reaped(ctx);
	check_all_back(ctx);
	assert_int_equal(ctx->bank.nconns, 0);

	evr_ctx_destroy(ctx);
	assert_int_equal(mock_cm.destroy_srq, 1);
	assert_null(mock_cm.srq);
	peer_mocks_reset();
	peer_fini(&q);
	peer_fini(&p);
}

/* ---- no SRQ on the device ---- */

/* EVR_SRQ_ON where the device has none: the first connection fails with
 * -EOPNOTSUPP before a QP is made, and so does the next. */
static void test_on_without_srq(void **state)
{
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct peer p;
	evr_ctx *ctx;
	evr_conn *c = NULL;
	unsigned i;

	(void)state;
	peer_mocks_reset(); /* max_srq 0 */
	srq_opts(&o);
	ctx = peer_start(&p, &o);
	assert_null(ctx->srq);
	for (i = 0; i < 2; i++) {
		peer_conn_opts(&p, &co);
		assert_int_equal(evr_connect(ctx, "192.0.2.1", 7471, &co, &c),
				 0);
		p.id = mock_cm_last_id();
		mock_cm_event(p.id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
		mock_cm_event(p.id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
		peer_pump(ctx);
		assert_int_equal(p.connects, i + 1);
		assert_int_equal(p.connect_status, -EOPNOTSUPP);
	}
	assert_int_equal(mock_cm.create_qp, 0);
	assert_int_equal(mock_cm.create_srq, 0);
	assert_null(ctx->srq);
	peer_stop(&p);
}

/* A credit update with the idle cycle's flags, from the peer. */
static void peer_idle_update(struct peer *p, uint8_t flags, uint32_t give,
			     uint16_t credits)
{
	uint8_t buf[EVR_HDR_SIZE + EVR_GIVE_SIZE];
	struct evr__hdr h = {EVR_T_CREDIT, flags, credits, 0};

	if (flags & EVR_F_GIVE) {
		h.len = EVR_GIVE_SIZE;
		evr__give_encode(buf + EVR_HDR_SIZE, give);
	}
	evr__hdr_encode(buf, &h);
	peer_raw(p, buf, EVR_HDR_SIZE + h.len);
}

/* An idle peer gives back 4 of its 8 (it spent one on the update): the
 * bank lends it 3, the update's buffer is not re-granted, the pool has
 * them all spare again.  Its ask then restores the window to the minimum
 * at once and returns the ask's credit with the growth; data flows. */
static void test_giveback_and_ask(void **state)
{
	struct peer p;
	evr_ctx *ctx = srq_start(&p);
	struct ledger l = {WIN, 0, 0, 0};
	struct evr_stats st;

	(void)state;
	peer_connect(&p);
	assert_int_equal(info_of(p.conn).recv_window, WIN);
	peer_idle_update(&p, EVR_F_GIVE, 4, 0);
	l.avail -= 5;
	peer_pump(ctx);
	st = stats(ctx);
	assert_int_equal(st.srq_reclaimed, 4);
	assert_int_equal(st.srq_lent, 3);
	assert_int_equal(p.conn->bank.lent, 3);
	assert_int_equal(info_of(p.conn).recv_window, 3);
	assert_int_equal(p.conn->cr.owed, 0); /* nothing re-granted */
	check_bank(ctx);

	/* two data credits short: ask */
	peer_idle_update(&p, EVR_F_WANT, 0, 0);
	l.avail--;
	peer_pump(ctx);
	take_credits(&p, &l);
	assert_true(info_of(p.conn).recv_window >= 4);
	assert_int_equal(l.avail, 4); /* the ask's credit and one more */
	assert_int_equal(l.avail + p.conn->cr.owed, p.conn->bank.lent);
	check_bank(ctx);
	peer_eager(&p, "after", 5, (uint16_t)l.owe);
	peer_pump(ctx);
	assert_int_equal(p.nmsgs, 1);
	assert_memory_equal(p.msgs[0].data, "after", 5);
	assert_int_equal(p.closes, 0);
	check_bank(ctx);
	peer_stop(&p);
}

/* More given back than lent: -EPROTO on that conn, the books even. */
static void test_giveback_too_much(void **state)
{
	struct peer p, q;
	evr_ctx *ctx = srq_start(&p);

	(void)state;
	peer_connect(&p);
	peer_init(&q, ctx);
	peer_connect(&q);
	peer_idle_update(&p, EVR_F_GIVE, WIN, 0); /* holds 7 after it */
	peer_pump(ctx);
	peer_flush_closed(&p, -EPROTO);
	pump_reaped(ctx);
	assert_int_equal(stats(ctx).srq_reclaimed, 0);
	assert_int_equal(stats(ctx).srq_lent, WIN); /* q's */
	check_bank(ctx);
	assert_int_equal(q.closes, 0);
	peer_eager(&q, "q", 1, 0);
	peer_pump(ctx);
	assert_int_equal(q.nmsgs, 1);
	peer_fini(&q);
	peer_stop(&p);
}

/* A peer lent a fixed window (it announced none) has no idle cycle:
 * either flag from it is -EPROTO on its conn. */
static void test_idle_flags_fixed_window(void **state)
{
	static const uint8_t flags[] = {EVR_F_GIVE, EVR_F_WANT};
	unsigned i;

	(void)state;
	for (i = 0; i < 2; i++) {
		struct peer p;
		evr_ctx *ctx = srq_start(&p);

		peer_accept(&p); /* fixed window of 8 */
		peer_idle_update(&p, flags[i], 2, 0);
		peer_pump(ctx);
		peer_flush_closed(&p, -EPROTO);
		pump_reaped(ctx);
		assert_int_equal(stats(ctx).srq_lent, 0);
		check_bank(ctx);
		peer_stop(&p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hs_connect),
		cmocka_unit_test(test_hs_accept_windowed),
		cmocka_unit_test(test_hs_accept_fixed),
		cmocka_unit_test(test_recv_credits_back),
		cmocka_unit_test(test_window_grows_on_want),
		cmocka_unit_test(test_window_grows_on_want_imm),
		cmocka_unit_test(test_beyond_credits),
		cmocka_unit_test(test_pool_full_refused),
		cmocka_unit_test(test_repost_fails),
		cmocka_unit_test(test_repost_batched),
		cmocka_unit_test(test_repost_batch_uncovered),
		cmocka_unit_test(test_early_message),
		cmocka_unit_test(test_early_message_imm),
		cmocka_unit_test(test_early_message_rejected),
		cmocka_unit_test(test_hold_orphan),
		cmocka_unit_test(test_close_all_back),
		cmocka_unit_test(test_on_without_srq),
		cmocka_unit_test(test_giveback_and_ask),
		cmocka_unit_test(test_giveback_too_much),
		cmocka_unit_test(test_idle_flags_fixed_window),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
