/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Calls (lib/rpc.c, and their wire in lib/msg.c, lib/conn.c, lib/cm.c)
 * against the peer fixture: what our side puts on the wire is decoded
 * from the WRs it posted, what the peer sends arrives as receive
 * completions, and deadlines are run on the ctx's timer heap with a
 * chosen time (no sleeping).
 *
 * Our side is the caller on a conn it connected (the peer's reply agrees
 * to calls), or the server on one it accepted with on_request (the peer's
 * request offers them).
 *
 * A call's request is done with -- the caller's buffer its own again --
 * when eager, as soon as it is posted (its bytes copied into a pool
 * buffer, or inline into the WR by the post): its WR is quiet, nobody waits for
 * its completion, and a reply, a cancel, a deadline or the conn's end
 * after the post ends the call at once; the completion that comes later
 * (or its flush) fires nothing.  When rendezvous, only once its REQ's
 * send completed and the peer's FIN came: a reply before both is held
 * until then, and a cancel, a deadline or the conn's end wait for them.
 *
 * Cases: eager and rendezvous calls, with the reply before or after the
 * request's send is over (eager: delivered at once; rendezvous: held);
 * quiet WRs of eager requests completed late or flushed; cancel of a call
 * in each state of its request (queued, posted, completed, rendezvous
 * awaiting its FIN); deadlines; the conn's end with calls in every state;
 * back-pressure, refusals and argument errors; the handshake's features
 * byte; requests served, answered, cancelled before and after delivery,
 * read or skipped in FIN order, unserved; handles that outlive their
 * conn; late, unknown and malformed call frames.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "peer.h"

#define EAGER_MAX 1020 /* a call's payload at most eager: 1024 - its id */

struct fix {
	evr_ctx *ctx;
	struct peer p;
};

/* How the conn is made: who connects, what the peer speaks, what our
 * side serves. */
struct how {
	bool accept;	    /* our side accepts (else it connects) */
	bool calls;	    /* the peer offers / agrees to calls */
	bool serve;	    /* our conn's opts set on_request */
	unsigned max_calls; /* our conn's max_calls */
	unsigned depth;	    /* the peer's receive depth (0: peer.c's) */
	unsigned interval;  /* our signal interval (0: peer.c's, 1) */
};

/* The second run of the suite: the peer speaks headers in immediate data
 * (EVR_HS_F_IMM), so calls' requests and replies go that way, both ways. */
static bool imm_all;

/* The bytes of a header in band: none in immediate data. */
static uint32_t in_band(void)
{
	return imm_all ? 0 : EVR_HDR_SIZE;
}

static int setup_how(void **state, const struct how *h)
{
	struct evr_ctx_opts o;
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	peer_mocks_reset();
	peer_ctx_opts(&o);
	if (h->interval)
		o.signal_interval = h->interval;
	f->ctx = peer_start(&f->p, &o);
	f->p.imm_hdr = imm_all;
	f->p.calls = h->calls;
	f->p.serve = h->serve;
	f->p.max_calls = h->max_calls;
	if (h->depth)
		f->p.depth = h->depth;
	if (h->accept)
		peer_accept(&f->p);
	else
		peer_connect(&f->p);
	*state = f;
	return 0;
}

/* Our side connects; the peer agrees to calls. */
static int setup(void **state)
{
	const struct how h = {false, true, false, 0, 0, 0};

	return setup_how(state, &h);
}

/* ... and the peer lends a window of 24 credits. */
static int setup_deep(void **state)
{
	const struct how h = {false, true, false, 0, 24, 0};

	return setup_how(state, &h);
}

/* ... with max_calls 2. */
static int setup_max2(void **state)
{
	const struct how h = {false, true, false, 2, 0, 0};

	return setup_how(state, &h);
}

/* Our side connects; the peer's reply does not agree to calls. */
static int setup_no_calls(void **state)
{
	const struct how h = {false, false, false, 0, 0, 0};

	return setup_how(state, &h);
}

/* Our side accepts with on_request; the peer offers calls. */
static int setup_server(void **state)
{
	const struct how h = {true, true, true, 0, 0, 0};

	return setup_how(state, &h);
}

/* Our side accepts without on_request; the peer offers calls. */
static int setup_accept_no_serve(void **state)
{
	const struct how h = {true, true, false, 0, 0, 0};

	return setup_how(state, &h);
}

/* Our side accepts with on_request; the peer does not offer calls. */
static int setup_accept_not_offered(void **state)
{
	const struct how h = {true, false, true, 0, 0, 0};

	return setup_how(state, &h);
}

/* The same on a ctx whose conns share a receive queue: the peer's frames
 * land in the SRQ's buffers. */
static int setup_srq_how(void **state, const struct how *h)
{
	struct evr_ctx_opts o;
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	peer_mocks_reset();
	mock_cm.max_srq = 1;
	mock_cm.max_srq_wr = 4096;
	peer_ctx_opts(&o);
	if (h->interval)
		o.signal_interval = h->interval;
	o.srq = EVR_SRQ_ON;
	o.srq_buffers = 64;
	f->ctx = peer_start(&f->p, &o);
	f->p.calls = h->calls;
	f->p.serve = h->serve;
	if (h->accept)
		peer_accept(&f->p);
	else
		peer_connect(&f->p);
	assert_non_null(f->ctx->srq);
	*state = f;
	return 0;
}

static int setup_srq(void **state)
{
	const struct how h = {false, true, false, 0, 0, 0};

	return setup_srq_how(state, &h);
}

static int setup_server_srq(void **state)
{
	const struct how h = {true, true, true, 0, 0, 0};

	return setup_srq_how(state, &h);
}

/* Accepting with on_request, one send WR in 4 signaled: a WR may go
 * unsignaled, which the direct way of a reply needs. */
static int setup_server_interval(void **state)
{
	const struct how h = {true, true, true, 0, 0, 4};

	return setup_how(state, &h);
}

static int setup_server_srq_interval(void **state)
{
	const struct how h = {true, true, true, 0, 0, 4};

	return setup_srq_how(state, &h);
}

/* Our side connects on a ctx that signals one send WR in 4 (and the
 * last of a batch, unless it is quiet); the peer agrees to calls. */
static int setup_interval(void **state)
{
	const struct how h = {false, true, false, 0, 0, 4};

	return setup_how(state, &h);
}

static int teardown(void **state)
{
	struct fix *f = *state;

	if (f->ctx)
		peer_stop(&f->p);
	else
		peer_fini(&f->p);
	free(f);
	return 0;
}

static struct evr_stats stats(evr_ctx *ctx)
{
	struct evr_stats st;

	evr_ctx_stats(ctx, &st);
	return st;
}

/* The next frame our side sent that is not a bare credit update (those
 * come when our side owes enough, whatever the test does); it must be a
 * well-formed message. */
static void next_msg(struct peer *p, struct peer_frame *fr)
{
	do {
		assert_true(peer_next(p, fr));
		assert_int_equal(fr->wr.opcode, fr->msg.hdr.type ==
							EVR_T_EAGER &&
							p->imm_hdr
						    ? IBV_WR_SEND_WITH_IMM
						    : IBV_WR_SEND);
		assert_true(fr->parsed);
	} while (fr->msg.hdr.type == EVR_T_CREDIT);
}

/* Nothing but bare credit updates was sent since the last frame read. */
static void expect_quiet(struct peer *p)
{
	struct peer_frame fr;

	while (peer_next(p, &fr)) {
		assert_int_equal(fr.wr.opcode, IBV_WR_SEND);
		assert_true(fr.parsed);
		assert_int_equal(fr.msg.hdr.type, EVR_T_CREDIT);
		assert_int_equal(fr.msg.hdr.flags, 0);
	}
}

/* The next frame is an eager call message: flags, id and payload. */
static void expect_eager(struct peer *p, uint8_t flags, uint32_t id,
			 const void *data, size_t len)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.flags, flags);
	assert_int_equal(fr.msg.hdr.len, EVR_CALL_ID_SIZE + len);
	assert_int_equal(fr.msg.call_id, id);
	assert_int_equal(fr.msg.plen, len);
	if (len)
		assert_memory_equal(fr.msg.payload, data, len);
}

/* The next frame is a CANCEL of call id. */
static void expect_cancel(struct peer *p, uint32_t id)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_CANCEL);
	assert_int_equal(fr.msg.hdr.flags, 0);
	assert_int_equal(fr.msg.hdr.len, EVR_CALL_ID_SIZE);
	assert_int_equal(fr.msg.call_id, id);
}

/* The next frame is a rendezvous call message for src[len]; its
 * rendezvous id. */
static uint32_t expect_rndv(struct peer *p, uint8_t flags, uint32_t id,
			    const void *src, size_t len)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	assert_int_equal(fr.msg.hdr.flags, flags);
	assert_int_equal(fr.msg.hdr.len, EVR_CALL_ID_SIZE + EVR_RNDV_REQ_SIZE);
	assert_int_equal(fr.msg.call_id, id);
	assert_int_equal(fr.msg.rndv.addr, (uintptr_t)src);
	assert_int_equal(fr.msg.rndv.len, len);
	return fr.msg.rndv.id;
}

/* The next frame is the FIN of rendezvous id with status. */
static void expect_fin(struct peer *p, uint32_t id, int32_t status)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
	assert_int_equal(fr.msg.fin_id, id);
	assert_int_equal(fr.msg.fin_status, status);
}

/* Call i ended once, with status and (status 0) the reply bytes. */
static void expect_call(struct peer *p, unsigned i, int status,
			const void *reply, size_t len)
{
	assert_int_equal(p->call_calls[i], 1);
	assert_int_equal(p->call_status[i], status);
	if (status == 0) {
		assert_int_equal(p->call_reply[i].len, len);
		if (len)
			assert_memory_equal(p->call_reply[i].data, reply, len);
	}
}

/* Fill the peer's window with n plain messages (ops 10..): the peer
 * posted 8 receives and keeps 2 for control messages, so 6 data
 * messages in flight take every data credit. */
static void fill_window(struct peer *p, unsigned n)
{
	struct peer_frame fr;
	unsigned i;

	for (i = 0; i < n; i++)
		peer_send_op(p, "fill", 4, 10 + i);
	peer_pump(p->ctx);
	for (i = 0; i < n; i++) {
		next_msg(p, &fr);
		assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
		assert_int_equal(fr.msg.hdr.flags, 0);
	}
	assert_int_equal(peer_send_credits(p->conn), 2);
}

/* ---- the handshake ---- */

/* Our connect request offers calls, whatever its opts; a reply agreeing
 * to them turns them on. */
static void test_hs_connect_offers(void **state)
{
	struct fix *f = *state;
	struct evr__hs hs;
	const char *why;
	struct mock_id *m = mock_id_of(f->p.id);

	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, &why), 0);
	assert_int_equal(hs.kind, EVR_HS_REQ);
	assert_int_equal(hs.features,
			 EVR_HS_F_CALLS | EVR_HS_F_FIN | EVR_HS_F_IMM);
	assert_true(evr__agreed(f->p.conn, EVR_HS_F_CALLS));
}

/* A reply that does not agree leaves them off. */
static void test_hs_connect_refused(void **state)
{
	struct fix *f = *state;
	struct evr__hs hs;
	const char *why;
	struct mock_id *m = mock_id_of(f->p.id);

	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, &why), 0);
	assert_int_equal(hs.features,
			 EVR_HS_F_CALLS | EVR_HS_F_FIN | EVR_HS_F_IMM);
	assert_false(evr__agreed(f->p.conn, EVR_HS_F_CALLS));
}

/* Accepting with on_request agrees to calls the request offered. */
static void test_hs_accept_serves(void **state)
{
	struct fix *f = *state;
	struct evr__hs hs;
	const char *why;
	struct mock_id *m = mock_id_of(f->p.id);

	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, &why), 0);
	assert_int_equal(hs.kind, EVR_HS_REP);
	assert_int_equal(hs.features,
			 EVR_HS_F_CALLS | (imm_all ? EVR_HS_F_IMM : 0));
	assert_true(evr__agreed(f->p.conn, EVR_HS_F_CALLS));
}

/* Accepting without on_request, or with it when the request did not
 * offer calls, agrees to none; evr_call says -EOPNOTSUPP there. */
static void test_hs_accept_no_calls(void **state)
{
	struct fix *f = *state;
	struct evr__hs hs;
	const char *why;
	struct mock_id *m = mock_id_of(f->p.id);

	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, &why), 0);
	assert_int_equal(hs.kind, EVR_HS_REP);
	assert_int_equal(hs.features, imm_all ? EVR_HS_F_IMM : 0);
	assert_false(evr__agreed(f->p.conn, EVR_HS_F_CALLS));
	assert_int_equal(evr_call(f->p.conn, "x", 1, 0, peer_call_cb,
				  peer_call_arg(&f->p, 0), NULL),
			 -EOPNOTSUPP);
	peer_pump(f->ctx);
	assert_int_equal(f->p.call_calls[0], 0);
	assert_int_equal(peer_unread(&f->p), 0);
}

/* ---- client: calls that are answered ---- */

/* An eager call: one SEND, EAGER with EVR_F_CALL and the id after the
 * header, then the bytes; nothing inside evr_call.  The reply after the
 * send's completion ends it: once, with 0 and the reply's bytes. */
static void test_eager_call(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	const char req[] = "ping";
	struct evr_stats st;
	uint32_t id;

	id = peer_call(p, req, sizeof(req), 0, 0);
	assert_int_equal(peer_unread(p), 0); /* never inside the call */
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, req, sizeof(req));
	expect_quiet(p);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0); /* no reply yet */
	peer_call_eager(p, EVR_F_REPLY, id, "pong", 4, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "pong", 4);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 1);
	st = stats(f->ctx);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(p->nmsgs, 0); /* a reply is no message */
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	expect_quiet(p);
}

/* A call's request from a region the user registered is copied (its
 * id goes before the bytes), and leaves the region free: it can be
 * deregistered once the request is posted, before any reply. */
static void test_call_from_region(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t region[2048];
	evr_mr *mr;
	uint32_t id;
	unsigned i;

	for (i = 0; i < sizeof(region); i++)
		region[i] = (uint8_t)(i * 5 + 1);
	assert_int_equal(evr_mr_reg(f->ctx, region, sizeof(region),
				    EVR_ACCESS_LOCAL, &mr),
			 0);
	id = peer_call(p, region + 8, 600, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, region + 8, 600);
	assert_int_equal(stats(f->ctx).zero_copy_sends, 0);
	assert_int_equal(evr_mr_dereg(mr), 0);
	peer_call_eager(p, EVR_F_REPLY, id, "done", 4, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "done", 4);
}

/* What a request's at-post callback saw: the sends posted by then, and
 * it overwrites the request's bytes (the caller may, once called). */
struct at_post {
	uint8_t buf[24];
	unsigned calls, nsend_then;
	int status;
};

static void at_post_cb(evr_conn *c, int status, void *arg)
{
	struct at_post *a = arg;

	(void)c;
	a->calls++;
	a->status = status;
	a->nsend_then = mock_wrs.nsend;
	memset(a->buf, 0xee, sizeof(a->buf));
}

/* A call's eager request is the caller's again once posted, not before:
 * a small one goes inline in two pieces (no copy of ours; the post reads
 * the caller's bytes), so its callback fires after the post -- 20 of them
 * in one flush, past the flush's 16 callbacks a post, each once, each
 * after its own WR was posted, with the bytes as they were at the call;
 * their completions change nothing. */
static void test_request_done_after_post(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	enum { N = 20 };
	static struct at_post a[N];
	unsigned i, n0 = mock_wrs.nsend;

	memset(a, 0, sizeof(a));
	assert_true(peer_send_credits(p->conn) >= N); /* all at once */
	for (i = 0; i < N; i++) {
		memset(a[i].buf, (int)i + 1, sizeof(a[i].buf));
		assert_int_equal(evr__msg_send_call(p->conn, a[i].buf,
						    sizeof(a[i].buf),
						    EVR_F_CALL, 100 + i,
						    at_post_cb, &a[i], NULL),
				 0);
	}
	assert_int_equal(a[0].calls, 0); /* queued: not yet */
	peer_pump(f->ctx);
	assert_int_equal(mock_wrs.nsend - n0, N);
	for (i = 0; i < N; i++) {
		const struct mock_wr *w = &mock_wrs.send[n0 + i];
		uint8_t want[sizeof(a[i].buf)];

		assert_int_equal(a[i].calls, 1);
		assert_int_equal(a[i].status, 0);
		assert_true(a[i].nsend_then >= n0 + i + 1); /* after its post */
		assert_true(w->flags & IBV_SEND_INLINE);
		memset(want, (int)i + 1, sizeof(want));
		assert_int_equal(w->len, in_band() + 4 + sizeof(want));
		assert_memory_equal(w->data + in_band() + 4, want,
				    sizeof(want));
	}
	peer_ack(p);
	peer_pump(f->ctx);
	for (i = 0; i < N; i++)
		assert_int_equal(a[i].calls, 1); /* not again */
}

/* A reply that comes before the peer acknowledged an eager request is
 * delivered at once: the request was done with when it was built for its
 * post, whether inline (call 0) or copied into a pool buffer (call 1), so
 * nothing waits for its completion.  Each call ends once, with its
 * reply's bytes, and the receive buffer is posted again at once (not
 * held); the requests' completions, when they come, change nothing: no
 * second callback, nothing on the wire, each request counted sent once
 * (at its post). */
static void test_eager_reply_before_ack(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t req1[600];
	struct peer_frame fr;
	struct evr_stats st;
	unsigned posted;
	uint32_t id0, id1;

	memset(req1, 0x42, sizeof(req1));
	id0 = peer_call(p, "q", 1, 0, 0);
	id1 = peer_call(p, req1, sizeof(req1), 0, 1);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_true(fr.wr.flags & IBV_SEND_INLINE);
	assert_true(fr.parsed);
	assert_int_equal(fr.msg.hdr.flags, EVR_F_CALL);
	assert_int_equal(fr.msg.call_id, id0);
	assert_true(peer_next(p, &fr));
	assert_false(fr.wr.flags & IBV_SEND_INLINE);
	assert_true(fr.parsed);
	assert_int_equal(fr.msg.hdr.flags, EVR_F_CALL);
	assert_int_equal(fr.msg.call_id, id1);
	assert_int_equal(fr.msg.plen, sizeof(req1));
	assert_memory_equal(fr.msg.payload, req1, sizeof(req1));
	expect_quiet(p);
	/* built and posted, not completed: no outcome yet */
	assert_int_equal(p->conn->sq.outstanding, 2);
	assert_int_equal(p->ncall_calls, 0);
	st = stats(f->ctx);
	assert_int_equal(st.msgs_sent, 2); /* counted at the post */
	assert_int_equal(st.bytes_sent, 1 + sizeof(req1));
	posted = peer_recvs_posted(p);
	peer_call_eager(p, EVR_F_REPLY, id1, "early1", 6, 1);
	peer_pump(f->ctx);
	expect_call(p, 1, 0, "early1", 6);
	assert_int_equal(p->call_calls[0], 0);
	peer_call_eager(p, EVR_F_REPLY, id0, "early0", 6, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "early0", 6);
	assert_int_equal(p->ncall_calls, 2);
	assert_int_equal(peer_recvs_posted(p), posted); /* nothing held */
	assert_int_equal(evr_call_cancel(p->conn, id0), -ENOENT);
	assert_int_equal(evr_call_cancel(p->conn, id1), -ENOENT);
	assert_int_equal(p->conn->rpc_tab.n, 0);
	assert_int_equal(stats(f->ctx).calls_ok, 2);
	/* the acks come (a credit update may have joined them): nothing
	 * more */
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->sq.outstanding, 0);
	assert_int_equal(p->ncall_calls, 2);
	assert_int_equal(p->call_calls[0], 1);
	assert_int_equal(p->call_calls[1], 1);
	expect_quiet(p);
	assert_int_equal(peer_recvs_posted(p), posted);
	st = stats(f->ctx);
	assert_int_equal(st.calls, 2);
	assert_int_equal(st.calls_ok, 2);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(st.msgs_sent, 2);
	assert_int_equal(st.bytes_sent, 1 + sizeof(req1));
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A reply to a rendezvous request that comes before the request's send
 * is over -- its completion polled and the peer's FIN in, the peer may
 * still read the request buffer until then -- is held: its receive
 * buffer kept, the outcome known (too late to cancel).  The call ends
 * once both are in, here the FIN first and then the completion, with the
 * reply's bytes, and the buffer is posted again. */
static void test_rndv_reply_held(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];
	struct evr_stats st;
	unsigned posted;
	uint32_t id, r;

	memset(big, 0x6b, sizeof(big));
	id = peer_call(p, big, sizeof(big), 0, 0);
	peer_pump(f->ctx);
	r = expect_rndv(p, EVR_F_CALL, id, big, sizeof(big));
	expect_quiet(p);
	posted = peer_recvs_posted(p);
	peer_call_eager(p, EVR_F_REPLY, id, "early", 5, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0); /* the send is not over */
	assert_int_equal(peer_recvs_posted(p), posted - 1); /* held */
	/* its outcome is known: too late to cancel */
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	assert_int_equal(p->conn->rpc_tab.n, 0);
	peer_fin(p, r, 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0); /* the completion is to come */
	assert_int_equal(peer_recvs_posted(p), posted - 1);
	expect_quiet(p);
	peer_ack(p);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "early", 5);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 1);
	assert_int_equal(peer_recvs_posted(p), posted);
	st = stats(f->ctx);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(st.rndv_sent, 1);
	assert_int_equal(p->nmsgs, 0);
	expect_quiet(p);
}

/* evr_conn_hold() in the callback keeps the reply, whether it is
 * delivered now (an eager request's, before its completion) or was held
 * until the rendezvous request's send was over; its bytes stay valid
 * until released. */
static evr_msg *kept[4];

static void hold_reply(struct peer *p, unsigned i, int status,
		       const void *reply, size_t len)
{
	(void)reply;
	(void)len;
	assert_int_equal(status, 0);
	kept[i] = evr_conn_hold(p->conn);
	assert_non_null(kept[i]);
}

static void test_reply_hold(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];
	unsigned posted = peer_recvs_posted(p);
	uint32_t id0, id1, r1;

	p->on_call = hold_reply;
	id0 = peer_call(p, "a", 1, 0, 0);
	id1 = peer_call(p, big, sizeof(big), 0, 1);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id0, "a", 1);
	r1 = expect_rndv(p, EVR_F_CALL, id1, big, sizeof(big));
	peer_call_eager(p, EVR_F_REPLY, id1, "held one", 8, 0);
	peer_call_eager(p, EVR_F_REPLY, id0, "direct", 6, 0);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "direct", 6);
	assert_non_null(kept[0]);
	assert_int_equal(p->call_calls[1], 0);
	assert_null(kept[1]);
	peer_ack(p);
	peer_fin(p, r1, 0, 0);
	peer_pump(f->ctx);
	p->on_call = NULL;
	expect_call(p, 1, 0, "held one", 8);
	assert_int_equal(p->ncall_calls, 2);
	assert_non_null(kept[1]);
	assert_int_equal(evr_msg_len(kept[0]), 6);
	assert_memory_equal(evr_msg_data(kept[0]), "direct", 6);
	assert_int_equal(evr_msg_len(kept[1]), 8);
	assert_memory_equal(evr_msg_data(kept[1]), "held one", 8);
	assert_int_equal(peer_recvs_posted(p), posted - 2);
	evr_msg_release(kept[0]);
	evr_msg_release(kept[1]);
	kept[0] = kept[1] = NULL;
	peer_pump(f->ctx);
	assert_int_equal(peer_recvs_posted(p), posted);
}

/* An eager request's WR is quiet (its callback was spent at the post):
 * alone in its batch it goes unsignaled, and completes only with a later
 * signaled WR -- or is flushed.  Neither fires the call's callback again:
 * call 0, answered before, stays ended once when a plain message's
 * completion completes its WR; call 1, ended by the conn's abort at the
 * teardown, stays ended once when its WR is flushed (behind the marker the
 * flush posts). */
static void test_eager_quiet_wr(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct evr_stats st;
	uint32_t id0, id1;

	id0 = peer_call(p, "q0", 2, 0, 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.flags, EVR_F_CALL);
	assert_int_equal(fr.msg.call_id, id0);
	assert_false(fr.wr.flags & IBV_SEND_SIGNALED);
	expect_quiet(p);
	assert_int_equal(stats(f->ctx).msgs_sent, 1); /* at its post */
	peer_ack(p); /* executed: no completion */
	peer_pump(f->ctx);
	assert_int_equal(p->conn->sq.outstanding, 1);
	peer_call_eager(p, EVR_F_REPLY, id0, "r0", 2, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "r0", 2);
	/* a message with a callback: its WR is signaled, and its completion
	 * completes the request's too */
	peer_send_op(p, "m", 1, 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.flags, 0);
	assert_true(fr.wr.flags & IBV_SEND_SIGNALED);
	expect_quiet(p);
	peer_ack_op(p, 0);
	assert_int_equal(p->conn->sq.outstanding, 0);
	assert_int_equal(p->ncall_calls, 1);
	assert_int_equal(p->call_calls[0], 1);
	st = stats(f->ctx);
	assert_int_equal(st.msgs_sent, 2);
	assert_int_equal(st.calls_ok, 1);

	/* the conn's end: the call ends at the teardown, its WR is flushed
	 * after */
	id1 = peer_call(p, "q1", 2, 0, 1);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.call_id, id1);
	assert_false(fr.wr.flags & IBV_SEND_SIGNALED);
	expect_quiet(p);
	assert_int_equal(p->conn->sq.outstanding, 1);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	expect_call(p, 1, -ECANCELED, NULL, 0);
	assert_int_equal(p->ncall_calls, 2);
	assert_int_equal(p->closes, 0); /* its WR is still to come back */
	peer_flush_closed(p, -ECANCELED);
	assert_int_equal(p->ncall_calls, 2);
	assert_int_equal(p->call_calls[1], 1);
	assert_int_equal(p->calls_at_close, 2);
	st = stats(f->ctx);
	assert_int_equal(st.calls, 2);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.msgs_sent, 3);
}

/* The id takes 4 bytes of the eager size: 1020 bytes go eager (len 1024
 * on the wire), 1021 by rendezvous. */
static void test_eager_boundary(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t req[EAGER_MAX + 1];
	uint32_t id0, id1;

	memset(req, 0x3c, sizeof(req));
	id0 = peer_call(p, req, EAGER_MAX, 0, 0);
	id1 = peer_call(p, req, EAGER_MAX + 1, 0, 1);
	assert_int_not_equal(id0, id1);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id0, req, EAGER_MAX);
	expect_rndv(p, EVR_F_CALL, id1, req, EAGER_MAX + 1);
}

/* A small call goes inline, in two pieces (header and id, or only the id
 * with the header in immediate data, then the user's bytes): the peer
 * gets the same frame. */
static void test_eager_inline(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	uint32_t id;

	id = peer_call(p, "tiny", 4, 0, 0);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_true(fr.wr.flags & IBV_SEND_INLINE);
	assert_int_equal(fr.wr.len, in_band() + EVR_CALL_ID_SIZE + 4);
	assert_true(fr.parsed);
	assert_int_equal(fr.msg.hdr.flags, EVR_F_CALL);
	assert_int_equal(fr.msg.call_id, id);
	assert_memory_equal(fr.msg.payload, "tiny", 4);
}

/* A call's request keeps its place among plain messages, and the reply
 * among the peer's: each goes to its own callback. */
static void test_order_with_messages(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	uint32_t id;

	peer_send_op(p, "m0", 2, 0);
	id = peer_call(p, "call", 4, 0, 0);
	peer_send_op(p, "m1", 2, 1);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.flags, 0);
	assert_memory_equal(fr.msg.payload, "m0", 2);
	expect_eager(p, EVR_F_CALL, id, "call", 4);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.flags, 0);
	assert_memory_equal(fr.msg.payload, "m1", 2);
	peer_ack(p);
	peer_eager(p, "p0", 2, 1);
	peer_call_eager(p, EVR_F_REPLY, id, "rep", 3, 1);
	peer_eager(p, "p1", 2, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_calls[1], 1);
	expect_call(p, 0, 0, "rep", 3);
	assert_int_equal(p->nmsgs, 2);
	assert_memory_equal(p->msgs[0].data, "p0", 2);
	assert_memory_equal(p->msgs[1].data, "p1", 2);
}

/* A rendezvous call: RNDV_REQ with EVR_F_CALL and the id before its
 * body.  It ends only when the REQ's completion, the FIN and the reply
 * are all in, in either order: reply first (held), then completion, then
 * FIN; or completion, FIN, then reply. */
static void test_rndv_call(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];
	uint32_t id0, id1, r0, r1;

	memset(big, 0x5a, sizeof(big));
	id0 = peer_call(p, big, sizeof(big), 0, 0);
	peer_pump(f->ctx);
	r0 = expect_rndv(p, EVR_F_CALL, id0, big, sizeof(big));
	assert_non_null(mock_mr_find(big, sizeof(big)));
	peer_call_eager(p, EVR_F_REPLY, id0, "r0", 2, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0); /* the FIN is still to come */
	peer_fin(p, r0, 0, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "r0", 2);

	id1 = peer_call(p, big, sizeof(big), 0, 1);
	peer_pump(f->ctx);
	r1 = expect_rndv(p, EVR_F_CALL, id1, big, sizeof(big));
	assert_int_not_equal(r1, r0);
	peer_ack(p);
	peer_fin(p, r1, 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[1], 0); /* no reply yet */
	peer_call_eager(p, EVR_F_REPLY, id1, "r1", 2, 1);
	peer_pump(f->ctx);
	expect_call(p, 1, 0, "r1", 2);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 2);
	assert_int_equal(stats(f->ctx).calls_ok, 2);
	expect_quiet(p);
}

/* A reply above the eager size comes by rendezvous: our side reads it,
 * FINs it with 0 and the call ends with its bytes. */
static void test_rndv_reply(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t rep[4000];
	struct peer_frame fr;
	uint32_t id;
	size_t i;

	for (i = 0; i < sizeof(rep); i++)
		rep[i] = (uint8_t)(i * 11 + 1);
	id = peer_call(p, "get", 3, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "get", 3);
	peer_ack(p);
	peer_pump(f->ctx);
	peer_call_rndv_req(p, EVR_F_REPLY, id, rep, sizeof(rep), 0x77, 9, 1);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
	assert_int_equal(fr.wr.raddr, (uintptr_t)rep);
	assert_int_equal(fr.wr.rkey, 0x77);
	assert_int_equal(p->call_calls[0], 0);
	peer_ack(p);
	peer_pump(f->ctx);
	expect_fin(p, 9, 0);
	expect_call(p, 0, 0, rep, sizeof(rep));
}

/* ---- client: cancel ---- */

/* Cancelled while its request is still queued (the peer's window is
 * full): the callback fires at once, inside evr_call_cancel, with
 * -ECANCELED, and neither the request nor a CANCEL ever goes out, also
 * once credits return; messages behind it go as usual. */
static void test_cancel_queued(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct evr_stats st;
	uint32_t id;
	unsigned i;

	fill_window(p, 6);
	id = peer_call(p, "never", 5, 0, 0);
	peer_send_op(p, "after", 5, 1);
	peer_pump(f->ctx);
	expect_quiet(p);
	assert_int_equal(evr_call_cancel(p->conn, id), 0);
	expect_call(p, 0, -ECANCELED, NULL, 0);
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	peer_ack(p);
	peer_credit(p, 6);
	peer_pump(f->ctx);
	/* the message queued behind it is the only frame */
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.flags, 0);
	assert_int_equal(fr.msg.hdr.len, 5);
	assert_memory_equal(fr.msg.payload, "after", 5);
	expect_quiet(p);
	peer_ack_op(p, 1);
	for (i = 0; i < 6; i++)
		assert_int_equal(p->op_calls[10 + i], 1);
	assert_int_equal(p->ncall_calls, 1);
	st = stats(f->ctx);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.calls_cancelled, 1);
	assert_int_equal(st.calls_ok, 0);
}

/* Cancelled before the loop ever ran: the same, nothing on the wire. */
static void test_cancel_before_pump(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id;

	id = peer_call(p, "x", 1, 0, 0);
	assert_int_equal(evr_call_cancel(p->conn, id), 0);
	expect_call(p, 0, -ECANCELED, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(peer_unread(p), 0);
	assert_int_equal(p->ncall_calls, 1);
}

/* Cancelled after its eager request was posted and completed: the
 * callback fires at once with -ECANCELED, a CANCEL with the id goes out,
 * a later reply is dropped and counted late, a second cancel is -ENOENT;
 * the conn stays up. */
static void test_cancel_after_send(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_stats st;
	uint32_t id;

	id = peer_call(p, "req", 3, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "req", 3);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(evr_call_cancel(p->conn, id), 0);
	expect_call(p, 0, -ECANCELED, NULL, 0);
	assert_int_equal(peer_unread(p), 0); /* the CANCEL goes from the loop */
	peer_pump(f->ctx);
	expect_cancel(p, id);
	expect_quiet(p);
	peer_call_eager(p, EVR_F_REPLY, id, "late", 4, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 1);
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	st = stats(f->ctx);
	assert_int_equal(st.late_replies, 1);
	assert_int_equal(st.calls_cancelled, 1);
	assert_int_equal(st.calls_ok, 0);
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* Cancelled after its eager request was posted, before its completion:
 * the request was done with at its post, so the callback fires at once,
 * inside evr_call_cancel, with -ECANCELED, and a CANCEL with the id goes
 * from the loop; the completion that comes later fires nothing more, and
 * a reply after it is late. */
static void test_cancel_posted_eager(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_stats st;
	uint32_t id;

	id = peer_call(p, "req", 3, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "req", 3);
	expect_quiet(p);
	assert_int_equal(p->conn->sq.outstanding, 1); /* not acked */
	assert_int_equal(p->call_calls[0], 0);
	assert_int_equal(evr_call_cancel(p->conn, id), 0);
	expect_call(p, 0, -ECANCELED, NULL, 0);
	assert_int_equal(peer_unread(p), 0); /* the CANCEL goes from the loop */
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	peer_pump(f->ctx);
	expect_cancel(p, id);
	expect_quiet(p);
	assert_int_equal(p->ncall_calls, 1);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->sq.outstanding, 0);
	assert_int_equal(p->ncall_calls, 1);
	expect_quiet(p);
	peer_call_eager(p, EVR_F_REPLY, id, "late", 4, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 1);
	assert_int_equal(p->call_calls[0], 1);
	st = stats(f->ctx);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.calls_cancelled, 1);
	assert_int_equal(st.calls_ok, 0);
	assert_int_equal(st.late_replies, 1);
	assert_int_equal(st.msgs_sent, 1); /* the request, once */
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* Cancelled while its rendezvous request waits for the FIN: the CANCEL
 * goes, the callback waits for both the REQ's completion and the FIN
 * (-ECANCELED from a peer that skipped the read, or 0 from one that had
 * read it), then fires once with -ECANCELED; a late reply is dropped. */
static void test_cancel_rndv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];
	uint32_t id0, id1, r0, r1;

	/* completion, cancel, FIN -ECANCELED */
	id0 = peer_call(p, big, sizeof(big), 0, 0);
	peer_pump(f->ctx);
	r0 = expect_rndv(p, EVR_F_CALL, id0, big, sizeof(big));
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(evr_call_cancel(p->conn, id0), 0);
	peer_pump(f->ctx);
	expect_cancel(p, id0);
	assert_int_equal(p->call_calls[0], 0); /* a read may be in flight */
	peer_fin(p, r0, -ECANCELED, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, -ECANCELED, NULL, 0);

	/* cancel, FIN 0, then the completion */
	id1 = peer_call(p, big, sizeof(big), 0, 1);
	peer_pump(f->ctx);
	r1 = expect_rndv(p, EVR_F_CALL, id1, big, sizeof(big));
	assert_int_equal(evr_call_cancel(p->conn, id1), 0);
	peer_pump(f->ctx);
	expect_cancel(p, id1);
	peer_fin(p, r1, 0, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[1], 0); /* the REQ's send is not over */
	peer_ack(p);
	peer_pump(f->ctx);
	expect_call(p, 1, -ECANCELED, NULL, 0);
	peer_call_eager(p, EVR_F_REPLY, id1, "late", 4, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 2);
	assert_int_equal(stats(f->ctx).calls_cancelled, 2);
	assert_int_equal(stats(f->ctx).late_replies, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	expect_quiet(p);
}

/* A late reply by rendezvous (its call cancelled) is not read: FIN
 * -ECANCELED at once, counted late, nothing delivered. */
static void test_late_rndv_reply(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t rep[4000];
	struct peer_frame fr;
	uint32_t id;

	id = peer_call(p, "get", 3, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "get", 3);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(evr_call_cancel(p->conn, id), 0);
	peer_pump(f->ctx);
	expect_cancel(p, id);
	peer_call_rndv_req(p, EVR_F_REPLY, id, rep, sizeof(rep), 0x77, 4, 1);
	peer_pump(f->ctx);
	next_msg(p, &fr); /* no read before it: next_msg wants SENDs */
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
	assert_int_equal(fr.msg.fin_id, 4);
	assert_int_equal(fr.msg.fin_status, -ECANCELED);
	expect_quiet(p);
	assert_int_equal(stats(f->ctx).late_replies, 1);
	assert_int_equal(p->ncall_calls, 1);
	assert_int_equal(p->nmsgs, 0);
	/* it holds up nothing: a message behind it is delivered */
	peer_eager(p, "next", 4, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 1);
	assert_memory_equal(p->msgs[0].data, "next", 4);
}

/* ---- client: deadlines ---- */

/* The deadline is on the ctx's heap, timeout_ms from the call: not due a
 * millisecond before it; at it, the call ends once with -ETIMEDOUT (its
 * request completed: at once), a CANCEL goes, a late reply is counted;
 * the heap slot is given back. */
static void test_deadline(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr__timers *ts = &f->ctx->timers;
	struct evr__timer *t;
	struct evr_stats st;
	unsigned reserved = ts->reserved;
	double at;
	uint32_t id;

	assert_null(evr__timers_first(ts));
	id = peer_call(p, "slow", 4, 100, 0);
	assert_int_equal(ts->reserved, reserved + 1);
	t = evr__timers_first(ts);
	assert_non_null(t);
	at = t->at;
	assert_true(at - ev_now(f->ctx->loop) > 0.099);
	assert_true(at - ev_now(f->ctx->loop) <= 0.1);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "slow", 4);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(evr__timers_run(ts, at - 0.001), 0);
	assert_int_equal(p->call_calls[0], 0);
	assert_int_equal(evr__timers_run(ts, at), 1);
	expect_call(p, 0, -ETIMEDOUT, NULL, 0);
	assert_null(evr__timers_first(ts));
	assert_int_equal(ts->reserved, reserved);
	peer_pump(f->ctx);
	expect_cancel(p, id);
	expect_quiet(p);
	peer_call_eager(p, EVR_F_REPLY, id, "late", 4, 1);
	peer_pump(f->ctx);
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	assert_int_equal(evr__timers_run(ts, at + 100), 0);
	assert_int_equal(p->ncall_calls, 1);
	st = stats(f->ctx);
	assert_int_equal(st.calls_expired, 1);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A deadline through the loop's own timer (the driving path of the
 * application): the call's deadline brought to now, a pump runs it. */
static void test_deadline_loop(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr__timers *ts = &f->ctx->timers;
	uint32_t id;

	id = peer_call(p, "slow", 4, 60000, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "slow", 4);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0);
	assert_non_null(evr__timers_first(ts));
	evr__timer_start(ts, evr__timers_first(ts), ev_now(f->ctx->loop));
	peer_pump(f->ctx);
	expect_call(p, 0, -ETIMEDOUT, NULL, 0);
	expect_cancel(p, id);
	assert_null(evr__timers_first(ts));
}

/* The deadline of a call whose eager request is posted and not
 * completed: the callback fires at once with -ETIMEDOUT (the request was
 * done with at its post) and a CANCEL goes, once a data credit allows (it
 * takes one in the send queue's order); of one still queued: withdrawn,
 * the callback fires at once, nothing goes out.  The completion of the
 * posted one, later, fires nothing more. */
static void test_deadline_unsent(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr__timers *ts = &f->ctx->timers;
	unsigned reserved = ts->reserved;
	uint32_t id0, id1;
	unsigned i;
	double now;

	id0 = peer_call(p, "posted", 6, 100, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id0, "posted", 6);
	fill_window(p, 5); /* the window is full */
	id1 = peer_call(p, "queued", 6, 100, 1);
	peer_pump(f->ctx);
	expect_quiet(p);
	assert_int_equal(ts->reserved, reserved + 2);
	now = ev_now(f->ctx->loop);
	assert_int_equal(evr__timers_run(ts, now + 1), 2);
	expect_call(p, 0, -ETIMEDOUT, NULL, 0);
	expect_call(p, 1, -ETIMEDOUT, NULL, 0);
	assert_int_equal(p->ncall_calls, 2);
	assert_null(evr__timers_first(ts));
	assert_int_equal(ts->reserved, reserved);
	assert_int_equal(evr_call_cancel(p->conn, id0), -ENOENT);
	assert_int_equal(evr_call_cancel(p->conn, id1), -ENOENT);
	peer_pump(f->ctx);
	expect_quiet(p); /* the CANCEL waits for a data credit */
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 2); /* the completion: nothing */
	for (i = 0; i < 5; i++)
		assert_int_equal(p->op_calls[10 + i], 1);
	expect_quiet(p);
	peer_credit(p, 6);
	peer_pump(f->ctx);
	expect_cancel(p, id0);
	expect_quiet(p); /* neither the request nor a CANCEL of id1 */
	assert_int_equal(stats(f->ctx).calls_expired, 2);
	assert_int_equal(stats(f->ctx).calls_cancelled, 0);
	assert_int_equal(p->ncall_calls, 2);
}

/* The deadline of a rendezvous call awaiting its FIN: the CANCEL goes,
 * the callback waits for the FIN, then fires once with -ETIMEDOUT. */
static void test_deadline_rndv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];
	uint32_t id, r;

	id = peer_call(p, big, sizeof(big), 100, 0);
	peer_pump(f->ctx);
	r = expect_rndv(p, EVR_F_CALL, id, big, sizeof(big));
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(
	    evr__timers_run(&f->ctx->timers, ev_now(f->ctx->loop) + 1), 1);
	assert_int_equal(p->call_calls[0], 0);
	peer_pump(f->ctx);
	expect_cancel(p, id);
	peer_fin(p, r, -ECANCELED, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, -ETIMEDOUT, NULL, 0);
	assert_int_equal(stats(f->ctx).calls_expired, 1);
}

/* A call answered before its deadline leaves nothing on the heap: after
 * its request's completion; an eager one's before it (delivered at once,
 * the completion then changes nothing); and a rendezvous one's before its
 * send is over, the reply held meanwhile -- the deadline is gone with the
 * reply, not at the call's end. */
static void test_deadline_answered(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr__timers *ts = &f->ctx->timers;
	unsigned reserved = ts->reserved;
	static uint8_t big[3000];
	uint32_t id, r;

	id = peer_call(p, "fast", 4, 100, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "fast", 4);
	peer_ack(p);
	peer_call_eager(p, EVR_F_REPLY, id, "ok", 2, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "ok", 2);
	assert_null(evr__timers_first(ts));
	assert_int_equal(ts->reserved, reserved);
	assert_int_equal(evr__timers_run(ts, ev_now(f->ctx->loop) + 10), 0);
	assert_int_equal(p->ncall_calls, 1);

	/* eager, answered before its completion */
	id = peer_call(p, "early", 5, 100, 1);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "early", 5);
	assert_int_equal(ts->reserved, reserved + 1);
	peer_call_eager(p, EVR_F_REPLY, id, "ok", 2, 1);
	peer_pump(f->ctx);
	expect_call(p, 1, 0, "ok", 2);
	assert_null(evr__timers_first(ts));
	assert_int_equal(ts->reserved, reserved);
	assert_int_equal(evr__timers_run(ts, ev_now(f->ctx->loop) + 10), 0);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[1], 1);
	assert_int_equal(p->ncall_calls, 2);

	/* rendezvous, answered before its completion and FIN: held */
	id = peer_call(p, big, sizeof(big), 100, 2);
	peer_pump(f->ctx);
	r = expect_rndv(p, EVR_F_CALL, id, big, sizeof(big));
	peer_call_eager(p, EVR_F_REPLY, id, "ok", 2, 1);
	peer_pump(f->ctx);
	assert_null(evr__timers_first(ts));
	assert_int_equal(evr__timers_run(ts, ev_now(f->ctx->loop) + 10), 0);
	assert_int_equal(p->call_calls[2], 0);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[2], 0); /* the FIN is still to come */
	peer_fin(p, r, 0, 0);
	peer_pump(f->ctx);
	expect_call(p, 2, 0, "ok", 2);
	assert_int_equal(ts->reserved, reserved);
	assert_int_equal(p->ncall_calls, 3);
	assert_int_equal(stats(f->ctx).calls_ok, 3);
	assert_int_equal(stats(f->ctx).calls_expired, 0);
	expect_quiet(p);
}

/* ---- client: the conn's end ---- */

/* Calls in every state when the conn ends: A rendezvous awaiting its FIN,
 * C eager completed awaiting the reply, B eager posted (not completed)
 * awaiting the reply, E rendezvous posted with its reply held, F eager
 * posted and answered before its completion (ended already), D queued
 * behind a full window (a plain message m1 queued before it, m0 posted).
 * At the conn's end A..D end at once, from its teardown, with the conn's
 * error -- B too: its request was done with at its post, and waits for no
 * flush -- and m1 with them; E ends with 0 and its reply (its outcome was
 * known first) once its REQ's send is over: its flush (or the flush
 * bound, or the ctx's end), with m0's.  F's completion, flushed, fires
 * nothing more.  Every call's callback fires once, before on_close. */
static uint8_t big_a[3000], big_e[3000];

static void calls_in_every_state(struct peer *p, uint32_t id[6])
{
	struct peer_frame fr;

	id[0] = peer_call(p, big_a, sizeof(big_a), 0, 0); /* A */
	id[2] = peer_call(p, "C", 1, 0, 2);		  /* C */
	peer_pump(p->ctx);
	expect_rndv(p, EVR_F_CALL, id[0], big_a, sizeof(big_a));
	expect_eager(p, EVR_F_CALL, id[2], "C", 1);
	peer_ack(p);
	peer_pump(p->ctx);
	id[1] = peer_call(p, "B", 1, 0, 1);		  /* B */
	id[4] = peer_call(p, big_e, sizeof(big_e), 0, 4); /* E */
	id[5] = peer_call(p, "F", 1, 0, 5);		  /* F */
	peer_send_op(p, "m0", 2, 0);
	peer_send_op(p, "m1", 2, 1);	    /* no credit left */
	id[3] = peer_call(p, "D", 1, 0, 3); /* D: behind m1 */
	peer_pump(p->ctx);
	expect_eager(p, EVR_F_CALL, id[1], "B", 1);
	expect_rndv(p, EVR_F_CALL, id[4], big_e, sizeof(big_e));
	expect_eager(p, EVR_F_CALL, id[5], "F", 1);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_memory_equal(fr.msg.payload, "m0", 2);
	expect_quiet(p);
	assert_int_equal(peer_send_credits(p->conn), 2); /* the reserve */
	peer_call_eager(p, EVR_F_REPLY, id[4], "e!", 2, 0);
	peer_call_eager(p, EVR_F_REPLY, id[5], "f!", 2, 0);
	peer_pump(p->ctx);
	expect_call(p, 5, 0, "f!", 2); /* at once: not held */
	assert_int_equal(p->ncall_calls, 1);
	assert_int_equal(p->nop_calls, 0);
	expect_quiet(p); /* m1 and D still queued */
}

/* What the teardown ended: A..D and m1 with status, not E nor m0 (their
 * sends are posted), F as before. */
static void expect_torn_down(struct peer *p, int status)
{
	unsigned i;

	for (i = 0; i < 4; i++)
		expect_call(p, i, status, NULL, 0);
	assert_int_equal(p->call_calls[4], 0);
	expect_call(p, 5, 0, "f!", 2);
	assert_int_equal(p->ncall_calls, 5);
	assert_int_equal(p->op_calls[0], 0);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_status[1], status);
	assert_int_equal(p->closes, 0);
}

static void expect_ended(struct peer *p, int status)
{
	unsigned i;

	for (i = 0; i < 4; i++)
		expect_call(p, i, status, NULL, 0);
	expect_call(p, 4, 0, "e!", 2);
	expect_call(p, 5, 0, "f!", 2);
	assert_int_equal(p->ncall_calls, 6);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], status);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_status[1], status);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->close_status, status);
	assert_int_equal(p->calls_at_close, 6);
}

static void test_end_peer_gone(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id[6];
	struct evr_stats st;

	calls_in_every_state(p, id);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_pump(f->ctx);
	expect_torn_down(p, -ECONNRESET);
	peer_flush(p);
	peer_pump(f->ctx);
	expect_ended(p, -ECONNRESET);
	st = stats(f->ctx);
	assert_int_equal(st.calls, 6);
	assert_int_equal(st.calls_ok, 2);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.calls_expired, 0);
}

static void test_end_abort(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id[6];

	calls_in_every_state(p, id);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	assert_int_equal(p->ncall_calls, 1); /* from the loop, not inside */
	peer_pump(f->ctx);
	expect_torn_down(p, -ECANCELED);
	peer_flush(p);
	peer_pump(f->ctx);
	expect_ended(p, -ECANCELED);
	assert_int_equal(stats(f->ctx).calls_ok, 2);
	assert_int_equal(stats(f->ctx).calls_cancelled, 0);
}

/* A QP whose WRs never come back after an abort: the eager calls end at
 * the teardown all the same; at the flush bound the conn gives up on its
 * WRs, and the call whose rendezvous request was posted ends then, once,
 * before on_close.  Flushes that come after it fire nothing. */
static void test_end_flush_bound(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id[6];

	calls_in_every_state(p, id);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	expect_torn_down(p, -ECANCELED); /* E posted: waits */
	assert_true(
	    evr__timers_run(&f->ctx->timers, ev_now(f->ctx->loop) + 10) >= 1);
	peer_pump(f->ctx);
	expect_ended(p, -ECANCELED);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->ncall_calls, 6);
	assert_int_equal(p->nop_calls, 2);
	assert_int_equal(p->closes, 1);
}

/* The ctx destroyed with calls in every state: every callback still due
 * inside evr_ctx_destroy, once, before on_close. */
static void test_end_ctx_destroy(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id[6];

	calls_in_every_state(p, id);
	evr_ctx_destroy(f->ctx);
	f->ctx = p->ctx = NULL;
	mock_cm_reset();
	mock_reset();
	expect_ended(p, -ECANCELED);
}

/* A graceful close does not wait for replies: a call whose request was
 * sent ends with -ECANCELED before on_close(0); the deadline it had is
 * gone from the heap.  A reply that comes while the close drains is
 * still delivered. */
static void test_end_graceful(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	uint32_t id, id2;

	id = peer_call(p, "x", 1, 5000, 0);
	id2 = peer_call(p, "z", 1, 0, 2);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "x", 1);
	expect_eager(p, EVR_F_CALL, id2, "z", 1);
	peer_ack(p);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_call_eager(p, EVR_F_REPLY, id2, "in time", 7, 1);
	assert_int_equal(evr_call(p->conn, "y", 1, 0, peer_call_cb,
				  peer_call_arg(p, 1), NULL),
			 -EPIPE);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_BYE);
	peer_ack(p);
	peer_pump(f->ctx);
	peer_flush_closed(p, 0);
	expect_call(p, 0, -ECANCELED, NULL, 0);
	expect_call(p, 2, 0, "in time", 7);
	assert_int_equal(p->call_calls[1], 0);
	assert_int_equal(p->calls_at_close, 2);
	assert_null(evr__timers_first(&f->ctx->timers));
	/* ended by the conn's end: counted in calls only */
	assert_int_equal(stats(f->ctx).calls, 2);
	assert_int_equal(stats(f->ctx).calls_ok, 1);
	assert_int_equal(stats(f->ctx).calls_cancelled, 0);
}

/* A request that cannot be posted (its rendezvous buffer cannot be
 * registered) ends its call once with that error; nothing goes out, the
 * deadline goes, the id is spent, and the next call goes as usual. */
static void test_request_fails(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];
	uint32_t id;

	mock_cm.fail_reg_mr = ENOMEM;
	id = peer_call(p, big, sizeof(big), 100, 0);
	peer_pump(f->ctx);
	mock_cm.fail_reg_mr = 0;
	expect_call(p, 0, -ENOMEM, NULL, 0);
	expect_quiet(p);
	assert_null(evr__timers_first(&f->ctx->timers));
	assert_int_equal(evr_call_cancel(p->conn, id), -ENOENT);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	id = peer_call(p, big, sizeof(big), 0, 1);
	peer_pump(f->ctx);
	expect_rndv(p, EVR_F_CALL, id, big, sizeof(big));
	assert_int_equal(p->ncall_calls, 1);
}

/* A graceful close that times out (the BYE is never acknowledged) ends
 * the conn with -ETIMEDOUT: a call in flight ends with it once, and is
 * not counted as expired (its own deadline did not pass). */
static void test_end_close_timeout(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct evr__timer *t;
	uint32_t id;

	id = peer_call(p, "x", 1, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "x", 1);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_BYE);
	t = evr__timers_first(&f->ctx->timers); /* the close bound */
	assert_non_null(t);
	assert_true(evr__timers_run(&f->ctx->timers, t->at) >= 1);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->close_status, -ETIMEDOUT);
	expect_call(p, 0, -ETIMEDOUT, NULL, 0);
	assert_int_equal(p->calls_at_close, 1);
	assert_int_equal(stats(f->ctx).calls_expired, 0);
}

/* ---- client: refusals ---- */

/* At max_calls (2) in flight evr_call says -ENOBUFS and that callback
 * never fires; when one ends, on_drain fires once and calls go again. */
static void test_max_calls(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id0, id1, id3;

	id0 = peer_call(p, "0", 1, 0, 0);
	id1 = peer_call(p, "1", 1, 0, 1);
	assert_int_equal(evr_call(p->conn, "2", 1, 0, peer_call_cb,
				  peer_call_arg(p, 2), NULL),
			 -ENOBUFS);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id0, "0", 1);
	expect_eager(p, EVR_F_CALL, id1, "1", 1);
	expect_quiet(p);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->drains, 0);
	peer_call_eager(p, EVR_F_REPLY, id0, "r", 1, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "r", 1);
	assert_int_equal(p->drains, 1);
	id3 = peer_call(p, "3", 1, 0, 3);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id3, "3", 1);
	/* ended without an -ENOBUFS before it: no on_drain */
	peer_call_eager(p, EVR_F_REPLY, id1, "r", 1, 1);
	peer_pump(f->ctx);
	expect_call(p, 1, 0, "r", 1);
	assert_int_equal(p->drains, 1);
	assert_int_equal(p->call_calls[2], 0);
	/* a cancel ends one too */
	id0 = peer_call(p, "4", 1, 0, 4);
	assert_int_equal(evr_call(p->conn, "5", 1, 0, peer_call_cb,
				  peer_call_arg(p, 5), NULL),
			 -ENOBUFS);
	assert_int_equal(evr_call_cancel(p->conn, id0), 0);
	expect_call(p, 4, -ECANCELED, NULL, 0);
	assert_int_equal(p->drains, 2);
	assert_int_equal(p->call_calls[5], 0);
}

/* Calls the peer did not agree to: -EOPNOTSUPP, nothing sent. */
static void test_not_agreed(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	assert_int_equal(evr_call(p->conn, "x", 1, 100, peer_call_cb,
				  peer_call_arg(p, 0), NULL),
			 -EOPNOTSUPP);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0);
	assert_int_equal(peer_unread(p), 0);
	assert_null(evr__timers_first(&f->ctx->timers));
	assert_int_equal(stats(f->ctx).calls, 0);
}

/* Argument errors: -EINVAL (no conn, no callback, req NULL with a
 * length), -EMSGSIZE above the peer's largest message, -ENOENT for ids
 * never given (0 included); none fires a callback or sends, and the
 * table is left as it was. */
static void test_bad_args(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_call_id id = 0;
	uint32_t ok;

	assert_int_equal(
	    evr_call(NULL, "x", 1, 0, peer_call_cb, peer_call_arg(p, 0), &id),
	    -EINVAL);
	assert_int_equal(evr_call(p->conn, "x", 1, 0, NULL, NULL, &id),
			 -EINVAL);
	assert_int_equal(evr_call(p->conn, NULL, 1, 0, peer_call_cb,
				  peer_call_arg(p, 0), &id),
			 -EINVAL);
	assert_int_equal(evr_call(p->conn, p, (1u << 20) + 1, 100, peer_call_cb,
				  peer_call_arg(p, 0), &id),
			 -EMSGSIZE);
	assert_int_equal(id, 0);
	assert_null(evr__timers_first(&f->ctx->timers));
	assert_int_equal(evr_call_cancel(NULL, 1), -EINVAL);
	assert_int_equal(evr_call_cancel(p->conn, 0), -ENOENT);
	assert_int_equal(evr_call_cancel(p->conn, 12345), -ENOENT);
	assert_int_equal(evr_reply(NULL, "x", 1, NULL, NULL), -EINVAL);
	evr_request_drop(NULL);
	assert_null(evr_request_conn(NULL));
	/* an empty request is a request */
	ok = peer_call(p, NULL, 0, 0, 0);
	assert_int_equal(evr_call_cancel(p->conn, ok + 1), -ENOENT);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, ok, NULL, 0);
	assert_int_equal(p->conn->rpc_tab.n, 1);
	assert_int_equal(stats(f->ctx).calls, 1);
	assert_int_equal(p->call_calls[0], 0);
}

/* max_calls above the largest table: evr_connect refuses the opts
 * (-EINVAL), and makes no conn; the largest is taken. */
static void test_max_calls_too_big(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	evr_conn *c = NULL;

	peer_conn_opts(p, &o);
	o.arg = NULL;
	o.on_connect = NULL;
	o.on_close = NULL;
	o.max_calls = EVR__CALLS_MAX + 1;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.2", 7471, &o, &c),
			 -EINVAL);
	assert_null(c);
	o.max_calls = EVR__CALLS_MAX;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.2", 7471, &o, &c), 0);
	assert_non_null(c);
	assert_int_equal(evr_conn_close(c, 0), 0);
	peer_pump(f->ctx);
}

/* Before the conn is established: -ENOTCONN (calls are not queued); on
 * a closing one: -EPIPE. */
static void test_not_connected(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	evr_conn *c = NULL;

	peer_conn_opts(p, &o);
	o.arg = NULL; /* this conn's callbacks must not touch p */
	o.on_connect = NULL;
	o.on_close = NULL;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.2", 7471, &o, &c), 0);
	assert_int_equal(
	    evr_call(c, "x", 1, 0, peer_call_cb, peer_call_arg(p, 0), NULL),
	    -ENOTCONN);
	assert_int_equal(evr_conn_close(c, 0), 0);
	assert_int_equal(
	    evr_call(c, "x", 1, 0, peer_call_cb, peer_call_arg(p, 0), NULL),
	    -EPIPE);
	peer_pump(f->ctx);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	assert_int_equal(evr_call(p->conn, "x", 1, 0, peer_call_cb,
				  peer_call_arg(p, 0), NULL),
			 -EPIPE);
	peer_pump(f->ctx);
	assert_int_equal(p->call_calls[0], 0);
	assert_int_equal(peer_unread(p), 0);
}

/* ---- server ---- */

/* An eager request reaches on_request with its bytes and a handle on the
 * conn; evr_reply answers it with EAGER, EVR_F_REPLY and the same id. */
static void test_serve_eager(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_stats st;

	peer_call_eager(p, EVR_F_CALL, 7, "ping", 4, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nreqs, 1);
	assert_non_null(p->reqs[0].r);
	assert_int_equal(p->reqs[0].len, 4);
	assert_memory_equal(p->reqs[0].data, "ping", 4);
	assert_int_equal(p->nmsgs, 0); /* a request is no message */
	expect_quiet(p);
	assert_int_equal(
	    evr_reply(p->reqs[0].r, "pong", 4, peer_op_cb, peer_op_arg(p, 0)),
	    0);
	assert_int_equal(peer_unread(p), 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_REPLY, 7, "pong", 4);
	expect_quiet(p);
	peer_ack_op(p, 0);
	st = stats(f->ctx);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.requests_cancelled, 0);
	assert_int_equal(st.calls, 0);
}

/* Answered from inside on_request, and by rendezvous above the eager
 * size: RNDV_REQ with EVR_F_REPLY and the id; its callback after the
 * completion and the FIN. */
static uint8_t big_reply[3000];

static void reply_big(struct peer *p, evr_request *r, const void *data,
		      size_t len)
{
	(void)data;
	(void)len;
	assert_int_equal(evr_reply(r, big_reply, sizeof(big_reply), peer_op_cb,
				   peer_op_arg(p, 0)),
			 0);
}

static void test_serve_rndv_reply(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t rid;

	memset(big_reply, 0xab, sizeof(big_reply));
	p->on_request = reply_big;
	peer_call_eager(p, EVR_F_CALL, 0x10002, "big?", 4, 0);
	peer_pump(f->ctx);
	p->on_request = NULL;
	rid =
	    expect_rndv(p, EVR_F_REPLY, 0x10002, big_reply, sizeof(big_reply));
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 0);
	peer_fin(p, rid, 0, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], 0);
}

/* A reply without a callback, from on_request, small enough to go
 * inline: the direct way (msg.c send_direct).  What reply_direct saw. */
#define DR_LEN	  100 /* a reply: more than EVR_SEND_COPY_MAX */
/* the most that goes inline: 128 - header (in band) - id */
#define DR_INLINE (128 - in_band() - EVR_CALL_ID_SIZE)
static struct {
	uint8_t buf[128 - EVR_CALL_ID_SIZE + 1]; /* DR_INLINE + 1 at most */
	size_t len;	 /* of buf, the reply's bytes */
	bool fail_post;	 /* make the direct post fail */
	bool overwrite;	 /* overwrite buf once evr_reply returned */
	unsigned tries;	 /* ibv_post_send calls during evr_reply */
	unsigned posted; /* WRs logged during evr_reply */
	uint32_t owed, quiet, avail; /* the conn's credits before it */
	uint32_t owed1, quiet1, avail1; /* and right after it */
	int rc;
} dr;

static void reply_direct(struct peer *p, evr_request *r, const void *data,
			 size_t len)
{
	evr_conn *c = p->conn;
	unsigned n0 = mock_wrs.nsend, t0 = mock.post_send_calls;

	(void)data;
	(void)len;
	dr.owed = c->cr.owed;
	dr.quiet = c->cr.quiet;
	dr.avail = c->cr.avail;
	if (dr.fail_post)
		mock.post_send_rc = ENOMEM; /* (bad index 0: nothing posted) */
	dr.rc = evr_reply(r, dr.buf, dr.len, NULL, NULL);
	mock.post_send_rc = 0;
	dr.owed1 = c->cr.owed;
	dr.quiet1 = c->cr.quiet;
	dr.avail1 = c->cr.avail;
	dr.tries = mock.post_send_calls - t0;
	dr.posted = mock_wrs.nsend - n0;
	if (dr.overwrite)
		memset(dr.buf, 0xee, sizeof(dr.buf));
}

/* A plain message from the peer, delivered: its buffer's credit is owed
 * (nothing of ours carried it) when the request comes next. */
static void owe_one(struct fix *f)
{
	peer_eager(&f->p, "m", 1, 0);
	peer_pump(f->ctx);
	expect_quiet(&f->p);
	assert_true(f->p.conn->cr.owed > 0);
}

/* The reply is posted before evr_reply returns: inline, unsignaled,
 * EAGER with EVR_F_REPLY (no EVR_F_WANT), the id and the credits owed;
 * its credit spent and those credits counted off.  The buffer is free at
 * once (overwritten after evr_reply, the bytes sent are the first ones).
 * direct_sends, msgs_sent and bytes_sent (the payload, not the id) count
 * it. */
static void test_serve_direct_reply(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_stats st0, st;
	struct peer_frame fr;
	uint8_t want[DR_LEN];
	size_t i;

	memset(&dr, 0, sizeof(dr));
	dr.len = DR_LEN;
	for (i = 0; i < DR_LEN; i++)
		dr.buf[i] = want[i] = (uint8_t)(i * 7 + 1);
	dr.overwrite = true;
	owe_one(f); /* the reply carries it */
	st0 = stats(f->ctx);
	p->on_request = reply_direct;
	peer_call_eager(p, EVR_F_CALL, 0x2a, "q", 1, 0);
	peer_pump(f->ctx);
	p->on_request = NULL;
	assert_int_equal(dr.rc, 0);
	assert_int_equal(dr.tries, 1);
	assert_int_equal(dr.posted, 1);
	next_msg(p, &fr);
	assert_int_equal(fr.wr.flags, IBV_SEND_INLINE);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.flags, EVR_F_REPLY);
	assert_int_equal(fr.msg.hdr.len, EVR_CALL_ID_SIZE + sizeof(want));
	assert_int_equal(fr.msg.hdr.credits, dr.owed);
	assert_int_equal(fr.msg.call_id, 0x2a);
	assert_int_equal(fr.msg.plen, sizeof(want));
	assert_memory_equal(fr.msg.payload, want, sizeof(want));
	expect_quiet(p);
	assert_int_equal(dr.avail1, dr.avail - 1);
	assert_int_equal(dr.owed1, 0);
	assert_int_equal(dr.quiet1, 0);
	st = stats(f->ctx);
	assert_int_equal(st.direct_sends - st0.direct_sends, 1);
	assert_int_equal(st.msgs_sent - st0.msgs_sent, 1);
	assert_int_equal(st.bytes_sent - st0.bytes_sent, sizeof(want));
	assert_int_equal(st.requests - st0.requests, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* The direct post fails: nothing counted, the credits as they were (also
 * the owed ones, which the queued reply then carries with the request's
 * own), and the reply takes the queue -- here the next post works, so
 * it goes out once, whole, from the flush. */
static void test_serve_direct_reply_post_fails(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_stats st0, st;

	struct peer_frame fr;

	memset(&dr, 0, sizeof(dr));
	dr.len = DR_LEN;
	memset(dr.buf, 0x5c, sizeof(dr.buf));
	dr.fail_post = true;
	owe_one(f);
	st0 = stats(f->ctx);
	p->on_request = reply_direct;
	peer_call_eager(p, EVR_F_CALL, 0x2b, "q", 1, 0);
	peer_pump(f->ctx);
	p->on_request = NULL;
	assert_int_equal(dr.rc, 0);
	assert_int_equal(dr.tries, 1); /* the direct post, which failed */
	assert_int_equal(dr.posted, 0);
	assert_true(dr.owed > 0);
	assert_int_equal(dr.owed1, dr.owed);
	assert_int_equal(dr.quiet1, dr.quiet);
	assert_int_equal(dr.avail1, dr.avail);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.flags, EVR_F_REPLY);
	assert_int_equal(fr.msg.call_id, 0x2b);
	assert_int_equal(fr.msg.plen, DR_LEN);
	assert_memory_equal(fr.msg.payload, dr.buf, DR_LEN);
	/* what was owed, and the request's buffer, re-posted before it */
	assert_int_equal(fr.msg.hdr.credits, dr.owed + 1);
	expect_quiet(p);
	st = stats(f->ctx);
	assert_int_equal(st.direct_sends - st0.direct_sends, 0);
	assert_int_equal(st.msgs_sent - st0.msgs_sent, 1);
	assert_int_equal(st.bytes_sent - st0.bytes_sent, DR_LEN);
	/* one credit spent, by the queued reply */
	assert_int_equal(p->conn->cr.avail, dr.avail - 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* The inline bound of a reply's direct way counts the header and the
 * call id: DR_INLINE bytes go direct, one more takes the queue (both
 * arrive whole). */
static void test_serve_direct_reply_bound(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	size_t len;

	for (len = DR_INLINE; len <= DR_INLINE + 1; len++) {
		memset(&dr, 0, sizeof(dr));
		dr.len = len;
		memset(dr.buf, (int)len, sizeof(dr.buf));
		p->on_request = reply_direct;
		peer_call_eager(p, EVR_F_CALL, (uint32_t)len, "q", 1, 0);
		peer_pump(f->ctx);
		p->on_request = NULL;
		assert_int_equal(dr.rc, 0);
		assert_int_equal(dr.posted, len == DR_INLINE ? 1 : 0);
		expect_eager(p, EVR_F_REPLY, (uint32_t)len, dr.buf, len);
		expect_quiet(p);
		peer_ack(p);
		peer_pump(f->ctx);
	}
	assert_int_equal(stats(f->ctx).direct_sends, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A rendezvous request is read, then delivered with its bytes. */
static void test_serve_rndv_request(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[5000];
	struct peer_frame fr;
	size_t i;

	for (i = 0; i < sizeof(src); i++)
		src[i] = (uint8_t)(i * 3);
	peer_call_rndv_req(p, EVR_F_CALL, 3, src, sizeof(src), 0x44, 1, 0);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
	assert_int_equal(p->nreqs, 0);
	peer_ack(p);
	peer_pump(f->ctx);
	expect_fin(p, 1, 0);
	assert_int_equal(p->nreqs, 1);
	assert_int_equal(p->reqs[0].len, sizeof(src));
	assert_memory_equal(p->reqs[0].data, src, sizeof(src));
	assert_int_equal(evr_reply(p->reqs[0].r, "k", 1, NULL, NULL), 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_REPLY, 3, "k", 1);
}

/* A CANCEL for a request delivered and not answered: evr_reply says
 * -ECANCELED (the handle spent) and sends nothing; counted. */
static void test_serve_cancel_delivered(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_stats st;

	peer_call_eager(p, EVR_F_CALL, 8, "slow", 4, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nreqs, 1);
	peer_cancel(p, 8, 0);
	peer_pump(f->ctx);
	assert_int_equal(
	    evr_reply(p->reqs[0].r, "late", 4, peer_op_cb, peer_op_arg(p, 0)),
	    -ECANCELED);
	peer_pump(f->ctx);
	expect_quiet(p);
	assert_int_equal(p->op_calls[0], 0);
	st = stats(f->ctx);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.requests_cancelled, 1);
	/* a second CANCEL of it, or of an id never seen, is dropped */
	peer_cancel(p, 8, 0);
	peer_cancel(p, 999, 0);
	peer_pump(f->ctx);
	assert_int_equal(stats(f->ctx).requests_cancelled, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* Many requests held, some answered, some cancelled, in mixed order:
 * each CANCEL finds its own request, an answered one's changes nothing,
 * and the rest are answered as usual.  The conn's index of requests by
 * id is built by the first CANCEL that finds more than 16 held (none
 * before: requests alone do not pay for it), and kept up from then on:
 * requests that come later are found too, past another growth. */
static void test_serve_cancel_many(void **state)
{
	enum { N = 40, ROUND = 5, M = 20 }; /* N + M <= PEER_MAX_MSGS */
	struct fix *f = *state;
	struct peer *p = &f->p;
	unsigned i, j, cancelled = 0;

	for (i = 0; i < N; i += ROUND) {
		for (j = i; j < i + ROUND; j++)
			peer_call_eager(p, EVR_F_CALL, 7919 * j + 5, "q", 1, 0);
		peer_pump(f->ctx);
	}
	assert_int_equal(p->nreqs, N);
	assert_null(p->conn->rpc_ix);
	for (i = 0; i < N; i += 3) /* answered: out of the index */
		assert_int_equal(evr_reply(p->reqs[i].r, "a", 1, NULL, NULL),
				 0);
	peer_pump(f->ctx);
	for (i = N; i-- > 0;) {
		if (i % 2)
			continue;
		peer_cancel(p, 7919 * i + 5, 0);
		cancelled += i % 3 != 0;
		if (i % 12 == 0)
			peer_pump(f->ctx);
	}
	peer_pump(f->ctx);
	/* 26 held: built at the first CANCEL, 32 buckets */
	assert_non_null(p->conn->rpc_ix);
	assert_int_equal(p->conn->rpc_ix_mask, 31);
	assert_int_equal(stats(f->ctx).requests_cancelled, cancelled);
	/* 26 held, M more: the buckets grow to 64 as they come */
	for (i = N; i < N + M; i += ROUND) {
		for (j = i; j < i + ROUND && j < N + M; j++)
			peer_call_eager(p, EVR_F_CALL, 7919 * j + 5, "q", 1, 0);
		peer_pump(f->ctx);
	}
	assert_int_equal(p->nreqs, N + M);
	assert_int_equal(p->conn->rpc_ix_mask, 63);
	for (i = N; i < N + M; i++) {
		if (i % 2)
			continue;
		peer_cancel(p, 7919 * i + 5, 0);
		cancelled++;
		peer_pump(f->ctx);
	}
	assert_int_equal(stats(f->ctx).requests_cancelled, cancelled);
	for (i = 0; i < N + M; i++) {
		if (i < N && i % 3 == 0)
			continue;
		assert_int_equal(evr_reply(p->reqs[i].r, "b", 1, NULL, NULL),
				 i % 2 ? 0 : -ECANCELED);
	}
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A request answered already: its CANCEL changes nothing. */
static void test_serve_cancel_answered(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_call_eager(p, EVR_F_CALL, 8, "q", 1, 0);
	peer_pump(f->ctx);
	assert_int_equal(evr_reply(p->reqs[0].r, "a", 1, NULL, NULL), 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_REPLY, 8, "a", 1);
	peer_cancel(p, 8, 1);
	peer_pump(f->ctx);
	expect_quiet(p);
	assert_int_equal(stats(f->ctx).requests_cancelled, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A rendezvous request cancelled before its read started (behind two
 * reads, the most a conn runs at once) is never read and never
 * delivered; its FIN, -ECANCELED, goes after the FINs of the two reads
 * before it, in order. */
static void test_serve_cancel_unread(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t s1[2000], s2[2000], s3[2000];
	struct peer_frame fr;
	unsigned reads = 0;

	memset(s1, 1, sizeof(s1));
	memset(s2, 2, sizeof(s2));
	memset(s3, 3, sizeof(s3));
	peer_rndv_req(p, s1, sizeof(s1), 0x11, 1, 0);
	peer_call_rndv_req(p, EVR_F_CALL, 20, s2, sizeof(s2), 0x12, 2, 0);
	peer_call_rndv_req(p, EVR_F_CALL, 21, s3, sizeof(s3), 0x13, 3, 0);
	peer_pump(f->ctx);
	peer_cancel(p, 21, 0);
	peer_pump(f->ctx);
	while (peer_next(p, &fr)) {
		if (fr.wr.opcode == IBV_WR_RDMA_READ) {
			assert_int_equal(fr.wr.raddr,
					 reads ? (uintptr_t)s2 : (uintptr_t)s1);
			reads++;
			continue;
		}
		/* no FIN may go before the reads before it are over */
		assert_true(fr.parsed);
		assert_int_equal(fr.msg.hdr.type, EVR_T_CREDIT);
	}
	assert_int_equal(reads, 2);
	peer_ack(p);
	peer_pump(f->ctx);
	expect_fin(p, 1, 0);
	expect_fin(p, 2, 0);
	expect_fin(p, 3, -ECANCELED);
	expect_quiet(p); /* and no read of s3, ever */
	assert_int_equal(p->nmsgs, 1);
	assert_memory_equal(p->msgs[0].data, s1, sizeof(s1));
	assert_int_equal(p->nreqs, 1);
	assert_memory_equal(p->reqs[0].data, s2, sizeof(s2));
	assert_int_equal(stats(f->ctx).requests, 1);
	assert_int_equal(stats(f->ctx).requests_cancelled, 1);
	evr_request_drop(p->reqs[0].r);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A request cancelled while it is being read: the read completes, its
 * FIN says 0, it is not delivered; an eager request waiting behind a
 * read, cancelled, is not delivered either. */
static void test_serve_cancel_reading(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t s1[2000];
	struct peer_frame fr;

	peer_call_rndv_req(p, EVR_F_CALL, 30, s1, sizeof(s1), 0x11, 5, 0);
	peer_call_eager(p, EVR_F_CALL, 31, "behind", 6, 0);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
	peer_cancel(p, 30, 0);
	peer_cancel(p, 31, 0);
	peer_pump(f->ctx);
	peer_ack(p);
	peer_pump(f->ctx);
	expect_fin(p, 5, 0);
	expect_quiet(p);
	assert_int_equal(p->nreqs, 0);
	assert_int_equal(stats(f->ctx).requests, 0);
	assert_int_equal(stats(f->ctx).requests_cancelled, 2);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* A handle outlives its conn: after the conn ended, evr_reply sends
 * nothing and says -ENOTCONN (spent), evr_request_drop spends another;
 * evr_request_conn still names the conn. */
static void test_serve_handle_outlives_conn(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_conn *c = p->conn;

	peer_call_eager(p, EVR_F_CALL, 1, "a", 1, 0);
	peer_call_eager(p, EVR_F_CALL, 2, "b", 1, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nreqs, 2);
	assert_int_equal(evr_conn_close(c, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	peer_flush_closed(p, -ECANCELED);
	assert_ptr_equal(evr_request_conn(p->reqs[0].r), c);
	assert_int_equal(
	    evr_reply(p->reqs[0].r, "x", 1, peer_op_cb, peer_op_arg(p, 0)),
	    -ENOTCONN);
	evr_request_drop(p->reqs[1].r);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 0);
	expect_quiet(p);
}

/* evr_reply spends the handle whatever it returns: -EINVAL (buf NULL
 * with a length) and -EMSGSIZE send nothing and leave nothing to free;
 * an empty reply is a reply. */
static void test_serve_reply_errors(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_call_eager(p, EVR_F_CALL, 5, "q", 1, 0);
	peer_call_eager(p, EVR_F_CALL, 6, "r", 1, 0);
	peer_call_eager(p, EVR_F_CALL, 7, "s", 1, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nreqs, 3);
	assert_int_equal(
	    evr_reply(p->reqs[0].r, NULL, 1, peer_op_cb, peer_op_arg(p, 0)),
	    -EINVAL);
	assert_int_equal(evr_reply(p->reqs[1].r, p, (1u << 20) + 1, peer_op_cb,
				   peer_op_arg(p, 1)),
			 -EMSGSIZE);
	peer_pump(f->ctx);
	expect_quiet(p);
	assert_int_equal(evr_reply(p->reqs[2].r, NULL, 0, NULL, NULL), 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_REPLY, 7, NULL, 0);
	expect_quiet(p);
	assert_int_equal(p->op_calls[0], 0);
	assert_int_equal(p->op_calls[1], 0);
}

/* A request to a conn without on_request (our side, the caller, set
 * none): dropped, counted, nothing delivered or sent; the conn stays
 * up. */
static void test_request_unserved(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	unsigned posted = peer_recvs_posted(p);

	peer_call_eager(p, EVR_F_CALL, 9, "anyone?", 7, 0);
	peer_pump(f->ctx);
	assert_int_equal(stats(f->ctx).requests_unserved, 1);
	assert_int_equal(stats(f->ctx).requests, 0);
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->nreqs, 0);
	assert_int_equal(peer_recvs_posted(p), posted);
	expect_quiet(p);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* The server calls too, once agreed: either end may call. */
static void test_server_calls(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id;

	id = peer_call(p, "back", 4, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "back", 4);
	peer_ack(p);
	peer_call_eager(p, EVR_F_REPLY, id, "yes", 3, 1);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "yes", 3);
}

/* ---- what the peer may not send ---- */

/* A reply with id 0 is -EPROTO for the conn: calls in flight end with
 * it. */
static void test_reply_id_zero(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id;

	id = peer_call(p, "x", 1, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "x", 1);
	peer_ack(p);
	peer_call_eager(p, EVR_F_REPLY, 0, "bad", 3, 1);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
	expect_call(p, 0, -EPROTO, NULL, 0);
	assert_int_equal(p->calls_at_close, 1);
}

/* A call flag, or a CANCEL, where calls were not agreed: -EPROTO. */
static void test_call_flag_not_agreed(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_call_eager(p, EVR_F_CALL, 5, "x", 1, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
	assert_int_equal(stats(f->ctx).requests_unserved, 0);
}

static void test_cancel_not_agreed(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_cancel(p, 5, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
}

/* Both call flags at once: -EPROTO. */
static void test_call_and_reply(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_call_eager(p, EVR_F_CALL | EVR_F_REPLY, 5, "x", 1, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
	assert_int_equal(p->nreqs, 0);
}

/* A reply naming no call (none ever made, or an id not given): counted
 * late and dropped, the conn stays up, a call in flight is untouched. */
static void test_reply_unknown(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint32_t id;

	peer_call_eager(p, EVR_F_REPLY, 77, "who?", 4, 0);
	peer_pump(f->ctx);
	assert_int_equal(stats(f->ctx).late_replies, 1);
	id = peer_call(p, "x", 1, 0, 0);
	peer_pump(f->ctx);
	expect_eager(p, EVR_F_CALL, id, "x", 1);
	peer_ack(p);
	peer_call_eager(p, EVR_F_REPLY, id + 1, "not yours", 9, 1);
	peer_call_eager(p, EVR_F_REPLY, id ^ 0x80000000u, "nor this", 8, 0);
	peer_pump(f->ctx);
	assert_int_equal(stats(f->ctx).late_replies, 3);
	assert_int_equal(p->call_calls[0], 0);
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	peer_call_eager(p, EVR_F_REPLY, id, "yours", 5, 0);
	peer_pump(f->ctx);
	expect_call(p, 0, 0, "yours", 5);
}

#define T(fn, su) cmocka_unit_test_setup_teardown(fn, su, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_hs_connect_offers, setup),
	    T(test_hs_connect_refused, setup_no_calls),
	    T(test_hs_accept_serves, setup_server),
	    T(test_hs_accept_no_calls, setup_accept_no_serve),
	    T(test_hs_accept_no_calls, setup_accept_not_offered),
	    T(test_eager_call, setup),
	    T(test_call_from_region, setup),
	    T(test_eager_reply_before_ack, setup),
	    T(test_request_done_after_post, setup_deep),
	    T(test_rndv_reply_held, setup),
	    T(test_eager_quiet_wr, setup_interval),
	    T(test_reply_hold, setup),
	    T(test_eager_boundary, setup),
	    T(test_eager_inline, setup),
	    T(test_order_with_messages, setup),
	    T(test_rndv_call, setup),
	    T(test_rndv_reply, setup),
	    T(test_cancel_queued, setup),
	    T(test_cancel_before_pump, setup),
	    T(test_cancel_after_send, setup),
	    T(test_cancel_posted_eager, setup),
	    T(test_cancel_rndv, setup),
	    T(test_late_rndv_reply, setup),
	    T(test_deadline, setup),
	    T(test_deadline_loop, setup),
	    T(test_deadline_unsent, setup),
	    T(test_deadline_rndv, setup),
	    T(test_deadline_answered, setup),
	    T(test_end_peer_gone, setup),
	    T(test_end_abort, setup),
	    T(test_end_flush_bound, setup),
	    T(test_end_ctx_destroy, setup),
	    T(test_end_graceful, setup),
	    T(test_end_close_timeout, setup),
	    T(test_request_fails, setup),
	    T(test_max_calls, setup_max2),
	    T(test_not_agreed, setup_no_calls),
	    T(test_bad_args, setup),
	    T(test_max_calls_too_big, setup),
	    T(test_not_connected, setup),
	    T(test_serve_eager, setup_server),
	    T(test_serve_rndv_reply, setup_server),
	    T(test_serve_direct_reply, setup_server_interval),
	    T(test_serve_direct_reply_post_fails, setup_server_interval),
	    T(test_serve_direct_reply_bound, setup_server_interval),
	    T(test_serve_rndv_request, setup_server),
	    T(test_serve_cancel_delivered, setup_server),
	    T(test_serve_cancel_many, setup_server),
	    T(test_serve_cancel_answered, setup_server),
	    T(test_serve_cancel_unread, setup_server),
	    T(test_serve_cancel_reading, setup_server),
	    T(test_serve_handle_outlives_conn, setup_server),
	    T(test_serve_reply_errors, setup_server),
	    T(test_request_unserved, setup),
	    T(test_server_calls, setup_server),
	    T(test_reply_id_zero, setup),
	    T(test_call_flag_not_agreed, setup_no_calls),
	    T(test_cancel_not_agreed, setup_no_calls),
	    T(test_call_and_reply, setup),
	    T(test_reply_unknown, setup),
	    /* a shared receive queue: replies delivered at once and held,
	     * skipped reads */
	    T(test_eager_call, setup_srq),
	    T(test_eager_reply_before_ack, setup_srq),
	    T(test_rndv_reply_held, setup_srq),
	    T(test_reply_hold, setup_srq),
	    T(test_late_rndv_reply, setup_srq),
	    T(test_serve_eager, setup_server_srq),
	    T(test_serve_direct_reply, setup_server_srq_interval),
	    T(test_serve_cancel_unread, setup_server_srq),
	    T(test_serve_handle_outlives_conn, setup_server_srq),
	};

	int failed = cmocka_run_group_tests_name("headers in band", tests,
						 NULL, NULL);

	imm_all = true;
	return failed | cmocka_run_group_tests_name(
			    "headers in immediate data", tests, NULL, NULL);
}
