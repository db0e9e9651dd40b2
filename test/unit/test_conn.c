/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * How a connection ends (lib/conn.c, with lib/msg.c and lib/cm.c), against
 * the peer fixture: every close path, the states it goes through, and the
 * callbacks -- each op's exactly once, then on_close (or on_connect for a
 * conn not yet up) exactly once, with the status the API promises.
 *
 * Cases: graceful close (our sends drain, BYE, flush, status 0); abort
 * (queued and posted ops -ECANCELED, no BYE); the peer's BYE then its
 * disconnect (-ESHUTDOWN, what it sent delivered first); the peer gone
 * without a BYE (-ECONNRESET, for the flushed ops too); a failed
 * completion (the op's own status, the conn's); flushes of unsignaled
 * sends; a failed post; a graceful close that times out; closing while
 * resolving, connecting and accepting (rdma_disconnect only for the
 * accepted one); destroying the ctx under an open conn; late events after
 * the end; keepalive probes, answered and not.  Bad peer input (short header, unknown type, wrong lengths,
 * an eager message above the eager size, an unknown FIN, a receive that
 * failed) fails that conn alone with -EPROTO.
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

struct fix {
	evr_ctx *ctx;
	struct peer p, q;
	const struct bad_frame *bad; /* test_bad_frame's case */
};

static struct fix *new_fix(const struct evr_ctx_opts *o)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	peer_mocks_reset();
	f->ctx = peer_start(&f->p, o);
	peer_init(&f->q, f->ctx);
	return f;
}

static int setup(void **state)
{
	struct fix *f = new_fix(NULL);

	peer_connect(&f->p);
	*state = f;
	return 0;
}

/* Nothing connected yet. */
static int setup_bare(void **state)
{
	*state = new_fix(NULL);
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	peer_stop(&f->p);
	peer_fini(&f->q);
	free(f);
	return 0;
}

/* Frames of the peer's reading from now on, by type; the others counted. */
static unsigned count_frames(struct peer *p, uint8_t type)
{
	struct peer_frame fr;
	unsigned n = 0;

	while (peer_next(p, &fr))
		n += fr.parsed && fr.msg.hdr.type == type;
	return n;
}

static void send_n(struct peer *p, unsigned from, unsigned n)
{
	static const char data[] = "payload";
	unsigned i;

	for (i = from; i < from + n; i++)
		assert_int_equal(evr_send(p->conn, data, sizeof(data),
					  peer_op_cb, peer_op_arg(p, i)),
				 0);
}

static void assert_ops(const struct peer *p, unsigned n, int status)
{
	unsigned i;

	for (i = 0; i < n; i++) {
		assert_int_equal(p->op_calls[i], 1);
		assert_int_equal(p->op_status[i], status);
	}
}

/* Graceful: our sends drain, then our BYE goes, then the QP is flushed
 * and the peer told; on_close(0) once, after every op's callback. */
static void test_close_graceful(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct rdma_cm_id *id = p->id;
	struct ibv_qp *qp = p->qp;

	send_n(p, 0, 2);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING);
	assert_int_equal(evr_conn_close(p->conn, 0), -EALREADY);
	assert_int_equal(evr_send(p->conn, "x", 1, NULL, NULL), -EPIPE);
	peer_pump(f->ctx);
	assert_int_equal(count_frames(p, EVR_T_EAGER), 2);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING); /* draining */
	peer_ack(p);
	peer_pump(f->ctx);
	assert_ops(p, 2, 0);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING_BYE);
	assert_int_equal(count_frames(p, EVR_T_BYE), 1);
	assert_int_equal(mock_id_of(id)->disconnect, 0);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	assert_int_equal(mock_qp_state(qp), IBV_QPS_ERR);
	assert_int_equal(mock_id_of(id)->disconnect, 1);
	assert_int_equal(p->closes, 0); /* receives still posted */
	peer_flush_closed(p, 0);
	assert_int_equal(p->close_state, EVR_CS_FLUSHING);
	assert_int_equal(p->ops_at_close, 2);
	assert_true(mock_qp_destroyed(qp));
	assert_true(mock_id_of(id)->destroyed);
	peer_pump(f->ctx);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->nop_calls, 2);
}

/* A graceful close holds while sends wait for credits; the BYE itself may
 * use the reserve. */
static void test_close_graceful_waits_for_credits(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	send_n(p, 0, 7); /* 6 go, 1 waits for credits */
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_pump(f->ctx);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(count_frames(p, EVR_T_EAGER), 6);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING);
	assert_int_equal(p->op_calls[6], 0);
	peer_credit(p, 6);
	peer_pump(f->ctx);
	assert_int_equal(count_frames(p, EVR_T_EAGER), 1);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING_BYE);
	assert_int_equal(count_frames(p, EVR_T_BYE), 1);
	peer_ack(p);
	peer_pump(f->ctx);
	peer_flush_closed(p, 0);
	assert_ops(p, 7, 0);
}

/* Abort: no BYE; queued ops end at once, posted ones when flushed, all
 * with -ECANCELED; then on_close(-ECANCELED). */
static void test_close_abort(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	send_n(p, 0, 8); /* 6 posted, 2 queued */
	peer_pump(f->ctx);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	assert_int_equal(p->conn->state, EVR_CS_FAILED);
	assert_int_equal(p->nop_calls, 0); /* never inside the call */
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	assert_int_equal(mock_id_of(p->id)->disconnect, 1);
	assert_int_equal(p->nop_calls, 2);
	assert_int_equal(p->op_calls[6], 1);
	assert_int_equal(p->op_status[6], -ECANCELED);
	assert_int_equal(p->op_calls[7], 1);
	assert_int_equal(count_frames(p, EVR_T_EAGER), 6);
	assert_int_equal(count_frames(p, EVR_T_BYE), 0);
	peer_flush_closed(p, -ECANCELED);
	assert_ops(p, 8, -ECANCELED);
	assert_int_equal(p->ops_at_close, 8);
}

/* The peer's BYE, then its disconnect: what it sent before is delivered,
 * on_close says -ESHUTDOWN. */
static void test_peer_bye(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_eager(p, "last words", 10, 0);
	peer_bye(p, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -ESHUTDOWN);
	assert_memory_equal(p->msgs[0].data, "last words", 10);
}

/* The disconnect may be handled before the completions of what the peer
 * sent (two fds): those are delivered first all the same. */
static void test_peer_bye_races_disconnect(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_eager(p, "in the CQ", 9, 0);
	peer_bye(p, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	assert_int_equal(evr_ctx_process(f->ctx), 0);
	peer_pump(f->ctx);
	peer_flush_closed(p, -ESHUTDOWN);
	assert_int_equal(p->nmsgs, 1);
}

/* The peer vanished (no BYE): -ECONNRESET, for the flushed ops as well;
 * each op and on_close exactly once; a second disconnect changes nothing. */
static void test_peer_vanished(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	send_n(p, 0, 3);
	peer_pump(f->ctx);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	assert_int_equal(p->nop_calls, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_flush_closed(p, -ECONNRESET);
	assert_ops(p, 3, -ECONNRESET);
	assert_int_equal(p->nop_calls, 3);
	assert_int_equal(p->ops_at_close, 3);
}

/* A send fails (transport retries exhausted): that op gets -ETIMEDOUT,
 * the ones after it are flushed, the conn ends with -ETIMEDOUT. */
static void test_failed_completion(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	send_n(p, 0, 3);
	peer_pump(f->ctx);
	peer_fail_send(p, IBV_WC_RETRY_EXC_ERR);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], -ETIMEDOUT);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -ETIMEDOUT);
	assert_ops(p, 3, -ETIMEDOUT);
}

/* A remote operational error is the peer's end failing: the op keeps
 * -EREMOTEIO, the conn reports -ECONNRESET. */
static void test_failed_completion_remote(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	send_n(p, 0, 1);
	peer_pump(f->ctx);
	peer_fail_send(p, IBV_WC_REM_OP_ERR);
	peer_pump(f->ctx);
	peer_flush_closed(p, -ECONNRESET);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], -EREMOTEIO);
}

/* Unsignaled sends: a flush completes each, once. */
static void test_flush_unsignaled(void **state)
{
	struct evr_ctx_opts o;
	struct fix *f;
	struct peer *p;
	unsigned i, sig = 0;

	peer_ctx_opts(&o);
	o.signal_interval = 4;
	f = new_fix(&o);
	*state = f;
	p = &f->p;
	peer_connect(p);
	send_n(p, 0, 5);
	peer_pump(f->ctx);
	for (i = 0; i < mock_wrs.nsend; i++)
		sig += !!(mock_wrs.send[i].flags & IBV_SEND_SIGNALED);
	assert_int_equal(mock_wrs.nsend, 5);
	assert_true(sig < 5);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_ops(p, 5, -ECANCELED);
	assert_int_equal(p->nop_calls, 5);
	assert_int_equal(p->closes, 1);
}

/* A failed post fails the ops not posted with its error, and the conn. */
static void test_post_send_fails(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	mock.post_send_rc = -ENOMEM;
	send_n(p, 0, 2);
	peer_pump(f->ctx);
	mock.post_send_rc = 0;
	assert_ops(p, 2, -ENOMEM);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -ENOMEM);
}

/* A graceful close that cannot drain ends at close_timeout_ms: the
 * pending op and on_close get -ETIMEDOUT, the peer is disconnected. */
static void test_close_timeout(void **state)
{
	struct evr_ctx_opts o;
	struct fix *f;
	struct peer *p;

	peer_ctx_opts(&o);
	o.close_timeout_ms = 100;
	f = new_fix(&o);
	*state = f;
	p = &f->p;
	peer_connect(p);
	send_n(p, 0, 1);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING);
	peer_sleep_ms(150);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	assert_int_equal(mock_id_of(p->id)->disconnect, 1);
	peer_flush_closed(p, -ETIMEDOUT);
	assert_ops(p, 1, -ETIMEDOUT);
}

/* Closing while the request is out (QP made, receives posted): on_connect
 * reports -ECANCELED once the receives are flushed; the peer never
 * answered, so no rdma_disconnect. */
static void test_close_connecting(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	struct rdma_cm_id *id;

	peer_conn_opts(p, &o);
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 1, &o, &p->conn), 0);
	id = mock_cm_last_id();
	p->id = id;
	mock_cm_event(id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	mock_cm_event(id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	peer_pump(f->ctx);
	p->qp = id->qp;
	assert_non_null(p->qp);
	assert_int_equal(p->conn->state, EVR_CS_CONNECTING);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	assert_int_equal(evr_conn_close(p->conn, 0), -EALREADY);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 0);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, -ECANCELED);
	assert_int_equal(p->closes, 0);
	assert_int_equal(mock_id_of(id)->disconnect, 0);
	assert_true(mock_id_of(id)->destroyed);
}

/* Closing while the address resolves (no QP yet): -ECANCELED at the next
 * loop pass, never inside the call. */
static void test_close_resolving(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;

	peer_conn_opts(p, &o);
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 1, &o, &p->conn), 0);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	assert_int_equal(p->connects, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, -ECANCELED);
	assert_int_equal(p->connect_state, EVR_CS_FLUSHING);
	assert_int_equal(mock_id_of(mock_cm_last_id())->disconnect, 0);
	assert_true(mock_id_of(mock_cm_last_id())->destroyed);
}

/* Closing an accepted conn before it is established: the peer was told
 * it is accepted, so it is disconnected; on_connect(-ECANCELED). */
static evr_conn *accepted;
static void accept_cb(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	peer_conn_opts(arg, &o);
	assert_int_equal(evr_accept(req, &o, &accepted), 0);
}

static void test_close_accepting(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_listener *l;
	uint8_t hs[EVR_HS_MAX];

	assert_int_equal(evr_listen(f->ctx, NULL, 7000, 0, accept_cb, p, &l),
			 0);
	p->id = mock_cm_request(mock_cm_last_id(), hs,
				peer_hs(p, EVR_HS_REQ, hs));
	peer_pump(f->ctx);
	p->conn = accepted;
	assert_non_null(p->conn);
	p->qp = p->id->qp;
	assert_int_equal(p->conn->state, EVR_CS_ACCEPTING);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_pump(f->ctx);
	assert_int_equal(mock_id_of(p->id)->disconnect, 1);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, -ECANCELED);
	assert_int_equal(p->closes, 0);
	assert_int_equal(mock_id_of(p->id)->disconnect, 1);
	evr_listener_close(l);
}

/* Destroying the ctx ends an open conn from inside the call: each op and
 * on_close once, -ECANCELED. */
static void test_ctx_destroy_open_conn(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	send_n(p, 0, 8);
	peer_pump(f->ctx);
	evr_ctx_destroy(f->ctx);
	f->ctx = f->p.ctx = NULL;
	assert_ops(p, 8, -ECANCELED);
	assert_int_equal(p->nop_calls, 8);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->close_status, -ECANCELED);
}

/* Keepalive: an idle conn sends a zero-length RDMA WRITE (no credit); an
 * acknowledged probe keeps it up, an unanswered one ends it with
 * -ETIMEDOUT after keepalive_timeout_ms. */
static void test_keepalive(void **state)
{
	struct evr_ctx_opts o;
	struct peer_frame fr;
	struct evr_stats st;
	struct fix *f;
	struct peer *p;
	unsigned cr;

	peer_ctx_opts(&o);
	o.keepalive_timeout_ms = 200;
	f = new_fix(&o);
	*state = f;
	p = &f->p;
	p->keepalive_ms = 50;
	peer_connect(p);
	cr = peer_send_credits(p->conn);
	peer_sleep_ms(80);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_WRITE);
	assert_int_equal(fr.wr.len, 0);
	assert_false(peer_next(p, &fr));
	assert_int_equal(peer_send_credits(p->conn), cr);
	evr_ctx_stats(f->ctx, &st);
	assert_int_equal(st.keepalive_probes, 1);
	peer_ack(p);
	peer_pump(f->ctx);
	peer_sleep_ms(80); /* acknowledged: no timeout, a new probe */
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.len, 0);
	peer_sleep_ms(250); /* this one is never answered */
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -ETIMEDOUT);
}

/*
 * A peer that goes silent while the conn waits for it, with nothing in
 * flight that the transport could time out (every WR posted was
 * acknowledged): only the keepalive can end the conn, and it must -- a
 * probe after keepalive_ms of silence, then -ETIMEDOUT after
 * keepalive_timeout_ms; every op still waiting ends with an error, once,
 * before on_close.  One case a state (docs/liveness.md):
 *  credits       sends wait for credits, the peer's whole window used (8,
 *                2 kept for control);
 *  credits_lent  the same with a window lent out of the peer's shared
 *                pool (4 at first): the idle cycle asks for more every
 *                window_idle_ms, and the asks go unanswered;
 *  fin           a rendezvous send waits for the peer's FIN;
 *  close         a graceful close waits for credits to send what is
 *                queued (its close bound is longer than the keepalive's).
 */
enum silent_case { SILENT_CREDITS, SILENT_CREDITS_LENT, SILENT_FIN,
		   SILENT_CLOSE };

static void silent_peer(void **state, enum silent_case k)
{
	static uint8_t big[5000];
	struct evr_ctx_opts o;
	struct peer_frame fr;
	struct fix *f;
	struct peer *p;
	unsigned i, nops, went = 0, probes = 0;

	peer_ctx_opts(&o);
	o.keepalive_timeout_ms = 200;
	o.window_idle_ms = 20;
	o.close_timeout_ms = 5000;
	f = new_fix(&o);
	*state = f;
	p = &f->p;
	p->keepalive_ms = 50;
	p->init_window = k == SILENT_CREDITS_LENT ? 4 : 0;
	peer_connect(p);
	if (k == SILENT_FIN) {
		nops = 1;
		peer_send_op(p, big, sizeof(big), 0);
	} else {
		nops = 10;
		send_n(p, 0, nops);
	}
	peer_pump(f->ctx);
	while (peer_next(p, &fr))
		went += fr.parsed && (fr.msg.hdr.type == EVR_T_EAGER ||
				      fr.msg.hdr.type == EVR_T_RNDV_REQ);
	assert_int_equal(went, k == SILENT_FIN ? 1
			       : k == SILENT_CREDITS_LENT ? 2
							  : 6);
	if (k == SILENT_CLOSE)
		assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_ack(p); /* all went through: nothing is in flight */
	peer_pump(f->ctx);
	if (k != SILENT_FIN)
		assert_ops(p, went, 0);
	assert_int_equal(p->op_calls[k == SILENT_FIN ? 0 : went], 0);
	/* silence from here on: no credit, no FIN, no acknowledgement */
	for (i = 0; i < 4; i++) { /* the idle cycle's ticks, then a probe */
		peer_sleep_ms(20);
		peer_pump(f->ctx);
	}
	while (peer_next(p, &fr))
		probes += fr.wr.opcode == IBV_WR_RDMA_WRITE && fr.wr.len == 0;
	assert_int_equal(probes, 1);
	assert_int_equal(p->conn->state, k == SILENT_CLOSE ? EVR_CS_CLOSING
							   : EVR_CS_ESTABLISHED);
	for (i = 0; i < 13; i++) {
		peer_sleep_ms(20);
		peer_pump(f->ctx);
	}
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -ETIMEDOUT);
	for (i = k == SILENT_FIN ? 0 : went; i < nops; i++) {
		assert_int_equal(p->op_calls[i], 1);
		assert_true(p->op_status[i] < 0);
	}
	assert_int_equal(p->ops_at_close, nops);
}

static void test_silent_credits(void **state)
{
	silent_peer(state, SILENT_CREDITS);
}

static void test_silent_credits_lent(void **state)
{
	silent_peer(state, SILENT_CREDITS_LENT);
}

static void test_silent_fin(void **state)
{
	silent_peer(state, SILENT_FIN);
}

static void test_silent_close(void **state)
{
	silent_peer(state, SILENT_CLOSE);
}

/* Closing from the callbacks themselves. */
static void abort_in_recv(struct peer *p, const void *data, size_t len)
{
	(void)data;
	(void)len;
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	assert_int_equal(evr_conn_close(p->conn, 0), -EALREADY);
	assert_int_equal(evr_send(p->conn, "x", 1, NULL, NULL), -EPIPE);
}

/* An abort from on_recv: the messages behind it in the same batch are not
 * delivered; on_close once. */
static void test_abort_in_recv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	p->on_recv = abort_in_recv;
	peer_eager(p, "1", 1, 0);
	peer_eager(p, "2", 1, 0);
	peer_eager(p, "3", 1, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 1);
	peer_flush_closed(p, -ECANCELED);
	assert_int_equal(p->nmsgs, 1);
}

static unsigned close_cb_calls;
static int close_cb_rc[2];

static void close_in_connect(evr_conn *c, int status, void *arg)
{
	struct peer *p = arg;

	p->connects++;
	p->connect_status = status;
	assert_int_equal(status, 0);
	assert_int_equal(evr_conn_close(c, 0), 0);
}

static void calls_in_close(evr_conn *c, int status, void *arg)
{
	struct peer *p = arg;

	p->closes++;
	p->close_status = status;
	close_cb_calls++;
	close_cb_rc[0] = evr_conn_close(c, 0);
	close_cb_rc[1] = evr_send(c, "x", 1, NULL, NULL);
	p->conn = NULL;
}

/* A graceful close from on_connect: our BYE is all that goes; from
 * on_close, close and send are refused. */
static void test_close_in_connect(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	uint8_t rep[EVR_HS_MAX];

	peer_conn_opts(p, &o);
	o.on_connect = close_in_connect;
	o.on_close = calls_in_close;
	close_cb_calls = 0;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 9, &o, &p->conn), 0);
	p->id = mock_cm_last_id();
	mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, rep,
		      peer_hs(p, EVR_HS_REP, rep));
	peer_pump(f->ctx);
	p->qp = p->id->qp;
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING_BYE);
	assert_int_equal(count_frames(p, EVR_T_BYE), 1);
	peer_ack(p);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(close_cb_calls, 1);
	assert_int_equal(p->close_status, 0);
	assert_int_equal(close_cb_rc[0], -EALREADY);
	assert_int_equal(close_cb_rc[1], -EPIPE);
}

/* Sends beyond send_queue_limit are refused with -ENOBUFS; on_drain fires
 * once the queue falls to the low-watermark. */
static void test_queue_limit_and_drain(void **state)
{
	struct evr_ctx_opts o;
	struct fix *f;
	struct peer *p;
	static const char data[40];

	peer_ctx_opts(&o);
	o.send_queue_limit = 64;
	f = new_fix(&o);
	*state = f;
	p = &f->p;
	peer_connect(p);
	assert_int_equal(evr_send(p->conn, data, 40, NULL, NULL), 0);
	assert_int_equal(evr_send(p->conn, data, 40, NULL, NULL), -ENOBUFS);
	assert_int_equal(p->drains, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->drains, 1);
	assert_int_equal(evr_send(p->conn, data, 40, NULL, NULL), 0);
	peer_pump(f->ctx);
	assert_int_equal(p->drains, 1); /* the limit was not reached again */
}

/* ---- bad peer input: -EPROTO for that conn, the other goes on ---- */

static void expect_eproto(struct fix *f)
{
	struct peer *p = &f->p, *q = &f->q;
	struct peer_frame fr;

	peer_pump(f->ctx);
	assert_non_null(p->conn);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
	assert_int_equal(p->nmsgs, 0);
	/* the other conn of the ctx is untouched */
	assert_int_equal(q->conn->state, EVR_CS_ESTABLISHED);
	assert_int_equal(q->closes, 0);
	peer_eager(q, "fine", 4, 0);
	assert_int_equal(evr_send(q->conn, "ok", 2, NULL, NULL), 0);
	peer_pump(f->ctx);
	assert_int_equal(q->nmsgs, 1);
	assert_true(peer_next(q, &fr));
	assert_true(fr.parsed);
	assert_memory_equal(fr.msg.payload, "ok", 2);
}

static int setup_two(void **state)
{
	struct fix *f = new_fix(NULL);

	f->bad = *state; /* the case's initial state, if any */
	peer_connect(&f->p);
	peer_connect(&f->q);
	*state = f;
	return 0;
}

static void test_bad_short_header(void **state)
{
	struct fix *f = *state;

	peer_raw(&f->p, "\x01\x00\x00", 3);
	expect_eproto(f);
}

/* The header's length and the bytes received disagree. */
static void test_bad_length(void **state)
{
	struct fix *f = *state;
	uint8_t buf[EVR_HDR_SIZE + 4];
	struct evr__hdr h = {EVR_T_EAGER, 0, 0, 10};

	evr__hdr_encode(buf, &h);
	memcpy(buf + EVR_HDR_SIZE, "abcd", 4);
	peer_raw(&f->p, buf, sizeof(buf));
	expect_eproto(f);
}

/* An eager message above the negotiated eager size. */
static void test_bad_eager_size(void **state)
{
	struct fix *f = *state;
	static uint8_t big[1025];

	peer_eager(&f->p, big, sizeof(big), 0);
	expect_eproto(f);
}

/* Frames the peer must not send, each a case of its own (the case is the
 * initial state, kept by setup_two). */
static const struct bad_frame {
	const char *name;
	uint8_t type;
	const char *body;
	uint32_t blen;
} bad_frames[] = {
	{"test_bad_type", 9, NULL, 0}, /* no such type */
	{"test_bad_type_zero", 0, "abc", 3},
	/* a rendezvous request with a short body */
	{"test_bad_rndv_body", EVR_T_RNDV_REQ, "short", 5},
	/* a control message with a body it must not have */
	{"test_bad_credit_body", EVR_T_CREDIT, "xx", 2},
};

static void test_bad_frame(void **state)
{
	struct fix *f = *state;

	peer_frame(&f->p, f->bad->type, 0, f->bad->body, f->bad->blen);
	expect_eproto(f);
}

/* A rendezvous request larger than our max_msg_size. */
static void test_bad_rndv_size(void **state)
{
	struct fix *f = *state;
	static uint8_t src[16];

	peer_rndv_req(&f->p, src, (1u << 20) + 1, 1, 1, 0);
	expect_eproto(f);
}

/* A FIN for a rendezvous we never sent. */
static void test_bad_fin(void **state)
{
	struct fix *f = *state;

	peer_fin(&f->p, 77, 0, 0);
	expect_eproto(f);
}

/* A receive that failed (a message too large for the buffer). */
static void test_bad_recv_status(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct ibv_wc wc;
	unsigned i;

	for (i = p->recv_next; mock_wrs.recv[i].qp != p->qp; i++)
		;
	memset(&wc, 0, sizeof(wc));
	wc.wr_id = mock_wrs.recv[i].wr_id;
	wc.status = IBV_WC_LOC_LEN_ERR;
	wc.opcode = IBV_WC_RECV;
	wc.qp_num = p->qp->qp_num;
	mock_wc_push(&wc);
	p->recv_next = i + 1;
	expect_eproto(f);
}

#define BAD_FRAME_CASE(i)                                                     \
	{bad_frames[i].name, test_bad_frame, setup_two, teardown,             \
	 (void *)&bad_frames[i]}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_close_graceful, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_close_graceful_waits_for_credits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_abort, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_peer_bye, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_bye_races_disconnect,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_vanished, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_failed_completion, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_failed_completion_remote,
						setup, teardown),
		cmocka_unit_test_teardown(test_flush_unsignaled, teardown),
		cmocka_unit_test_setup_teardown(test_post_send_fails, setup,
						teardown),
		cmocka_unit_test_teardown(test_close_timeout, teardown),
		cmocka_unit_test_teardown(test_keepalive, teardown),
		cmocka_unit_test_teardown(test_silent_credits, teardown),
		cmocka_unit_test_teardown(test_silent_credits_lent, teardown),
		cmocka_unit_test_teardown(test_silent_fin, teardown),
		cmocka_unit_test_teardown(test_silent_close, teardown),
		cmocka_unit_test_setup_teardown(test_abort_in_recv, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_close_in_connect,
						setup_bare, teardown),
		cmocka_unit_test_teardown(test_queue_limit_and_drain,
					  teardown),
		cmocka_unit_test_setup_teardown(test_close_connecting,
						setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_close_resolving,
						setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_close_accepting,
						setup_bare, teardown),
		cmocka_unit_test_setup_teardown(test_ctx_destroy_open_conn,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_short_header,
						setup_two, teardown),
		BAD_FRAME_CASE(0),
		BAD_FRAME_CASE(1),
		cmocka_unit_test_setup_teardown(test_bad_length, setup_two,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_eager_size, setup_two,
						teardown),
		BAD_FRAME_CASE(2),
		cmocka_unit_test_setup_teardown(test_bad_rndv_size, setup_two,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_fin, setup_two,
						teardown),
		BAD_FRAME_CASE(3),
		cmocka_unit_test_setup_teardown(test_bad_recv_status, setup_two,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
