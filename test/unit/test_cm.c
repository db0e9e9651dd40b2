/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * rdma_cm (lib/cm.c) and the early states of a conn (lib/conn.c), on
 * mock_cm's scripted events.
 *
 * Active side: the resolve-address, resolve-route, connect, established
 * path with the states it passes and the handshake it sends; a reject and
 * its reason; every error event with the status on_connect reports; a bad
 * or missing reply handshake; an event out of place; the connect bound;
 * calls that fail at once (no callback, nothing left) or later (one
 * callback).  Passive side: a request accepted (handshake both ways),
 * rejected with a reason, left unanswered, malformed; the accept bound
 * (the accepted peer is disconnected); a failed rdma_accept; the listener
 * closed from its own callback; receives that arrive before ESTABLISHED;
 * the peer gone while we accept; events after the end change nothing.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <cmocka.h>

#include "peer.h"

struct fix {
	evr_ctx *ctx;
	struct peer p;
};

static struct fix *new_fix(const struct evr_ctx_opts *o)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	peer_mocks_reset();
	f->ctx = peer_start(&f->p, o);
	return f;
}

static int setup(void **state)
{
	*state = new_fix(NULL);
	return 0;
}

static int setup_short_bounds(void **state)
{
	struct evr_ctx_opts o;

	peer_ctx_opts(&o);
	o.connect_timeout_ms = 100;
	o.connect_reply_ms = 400;
	*state = new_fix(&o);
	return 0;
}

/* Per-step bounds with room for a loaded host: the steps sleep 600 ms
 * each, 400 ms short of the bound, yet together past it. */
static int setup_step_bounds(void **state)
{
	struct evr_ctx_opts o;

	peer_ctx_opts(&o);
	o.connect_timeout_ms = 1000;
	o.connect_reply_ms = 4000;
	*state = new_fix(&o);
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	peer_stop(&f->p);
	free(f);
	return 0;
}

/* Connect and drive the conn to state `to` (RESOLVING_ADDR,
 * RESOLVING_ROUTE or CONNECTING). */
static void connect_to(struct peer *p, enum evr__conn_state to)
{
	struct evr_conn_opts o;

	peer_conn_opts(p, &o);
	assert_int_equal(evr_connect(p->ctx, "192.0.2.7", 4791, &o, &p->conn),
			 0);
	p->id = mock_cm_last_id();
	if (to >= EVR_CS_RESOLVING_ROUTE) {
		mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
		peer_pump(p->ctx);
		assert_null(p->id->qp); /* made with the route */
	}
	if (to >= EVR_CS_CONNECTING) {
		mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
		peer_pump(p->ctx);
		p->qp = p->id->qp;
		assert_non_null(p->qp);
	}
	assert_int_equal(p->conn->state, to);
}

/* The handshake of kind that our side sent through m: the ctx's
 * defaults (8 receives, 1 KiB eager, 1 MiB messages). */
static void assert_hs_sent(struct mock_id *m, uint8_t kind,
			   struct evr__hs *hs)
{
	const char *why;

	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, hs, &why), 0);
	assert_int_equal(hs->kind, kind);
	assert_int_equal(hs->recv_depth, 8);
	assert_int_equal(hs->max_eager, 1024);
	assert_int_equal(hs->max_msg, 1u << 20);
}

/* The peer's ESTABLISHED event (no private data: the passive side's):
 * on_connect(0) once. */
static void established(struct peer *p)
{
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	peer_pump(p->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, 0);
}

/* The conn ends before it was up: on_connect(status) once, no on_close,
 * the id destroyed, whatever was posted flushed first. */
static void expect_connect_fails(struct peer *p, int status)
{
	struct rdma_cm_id *id = p->id;

	peer_pump(p->ctx);
	if (p->qp) {
		assert_int_equal(p->connects, 0); /* receives to flush */
		peer_flush(p);
		peer_pump(p->ctx);
	}
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, status);
	assert_int_equal(p->closes, 0);
	assert_true(mock_id_of(id)->destroyed);
	assert_int_equal(mock_id_of(id)->disconnect, 0);
	if (p->qp)
		assert_true(mock_qp_destroyed(p->qp));
}

static void test_connect_path(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	struct evr_conn_info info;
	struct mock_id *m;
	struct evr__hs hs;
	uint8_t rep[EVR_HS_MAX];

	peer_conn_opts(p, &o);
	o.user_data = "hello";
	o.user_len = 5;
	o.timeout_ms = 4000;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.7", 4791, &o, &p->conn),
			 0);
	p->id = mock_cm_last_id();
	m = mock_id_of(p->id);
	assert_int_equal(m->resolve_addr, 1);
	assert_int_equal(m->resolve_timeout_ms, 2000);
	assert_int_equal(p->conn->state, EVR_CS_RESOLVING_ADDR);
	assert_null(p->id->qp);

	mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_RESOLVING_ROUTE);
	assert_int_equal(m->resolve_route, 1);
	/* no QP yet: in a burst of connects, a QP made per address event
	 * would hold every request back until all were made */
	assert_null(p->id->qp);

	mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_CONNECTING);
	assert_int_equal(m->connect, 1);
	p->qp = p->id->qp;
	assert_non_null(p->qp);
	assert_int_equal(peer_recvs_posted(p), 8);
	assert_hs_sent(m, EVR_HS_REQ, &hs);
	assert_int_equal(hs.user_len, 5);
	assert_memory_equal(hs.user, "hello", 5);
	assert_int_equal(m->param.retry_count, 6);
	assert_int_equal(m->param.rnr_retry_count, 0);
	assert_int_equal(p->connects, 0);

	p->depth = 16;
	p->max_eager = 512;
	p->max_msg = 4096;
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, rep,
		      peer_hs(p, EVR_HS_REP, rep));
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, 0);
	assert_int_equal(p->connect_state, EVR_CS_ESTABLISHED);
	assert_int_equal(evr_conn_info(p->conn, &info), 0);
	assert_string_equal(info.state, "established");
	assert_int_equal(info.peer_recv_depth, 16);
	assert_int_equal(info.send_credits, 16);
	assert_int_equal(info.peer_eager_size, 512);
	assert_int_equal(info.peer_max_msg, 4096);
	/* the peer's limits apply */
	assert_int_equal(evr_send(p->conn, p, 4097, NULL, NULL), -EMSGSIZE);
}

/* Sends issued while connecting are queued and go once established. */
static void test_send_before_established(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	uint8_t rep[EVR_HS_MAX];

	connect_to(p, EVR_CS_RESOLVING_ADDR);
	peer_send_op(p, "early", 5, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	peer_pump(f->ctx);
	p->qp = p->id->qp;
	assert_false(peer_next(p, &fr));
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, rep,
		      peer_hs(p, EVR_HS_REP, rep));
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_true(fr.parsed);
	assert_memory_equal(fr.msg.payload, "early", 5);
}

static char reason[EVR_MAX_USER_DATA + 1];
static size_t reason_len;
static unsigned rejected_calls;

static int rejected_status;

/* Records only: an assertion failing here would leave the library in the
 * middle of a callback. */
static void on_connect_reason(evr_conn *c, int status, void *arg)
{
	const void *r = evr_conn_reject_reason(c, &reason_len);

	(void)arg;
	rejected_calls++;
	rejected_status = status;
	if (!r)
		reason_len = 0;
	else if (reason_len <= sizeof(reason))
		memcpy(reason, r, reason_len);
}

static void test_connect_rejected(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr__hs hs;
	uint8_t buf[EVR_HS_MAX];

	connect_to(p, EVR_CS_CONNECTING);
	p->conn->o.on_connect = on_connect_reason;
	memset(&hs, 0, sizeof(hs));
	hs.kind = EVR_HS_REJ;
	hs.user_len = 4;
	memcpy(hs.user, "busy", 4);
	rejected_calls = 0;
	mock_cm_event(p->id, RDMA_CM_EVENT_REJECTED, 28, buf,
		      evr__hs_encode(buf, &hs));
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(rejected_calls, 1);
	assert_int_equal(rejected_status, -ECONNREFUSED);
	assert_int_equal(reason_len, 4);
	assert_memory_equal(reason, "busy", 4);
	assert_true(mock_id_of(p->id)->destroyed);
	assert_int_equal(mock_id_of(p->id)->disconnect, 0);
}

/* Each error event, in the state it comes in, and what on_connect says. */
static void test_error_events(void **state)
{
	static const struct {
		enum evr__conn_state in;
		enum rdma_cm_event_type ev;
		int status;
		int expect;
	} cases[] = {
		{EVR_CS_RESOLVING_ADDR, RDMA_CM_EVENT_ADDR_ERROR, 0,
		 -EADDRNOTAVAIL},
		{EVR_CS_RESOLVING_ADDR, RDMA_CM_EVENT_ADDR_ERROR, -ENETUNREACH,
		 -ENETUNREACH},
		{EVR_CS_RESOLVING_ROUTE, RDMA_CM_EVENT_ROUTE_ERROR, 0,
		 -ENETUNREACH},
		{EVR_CS_RESOLVING_ROUTE, RDMA_CM_EVENT_ROUTE_ERROR, -ETIMEDOUT,
		 -ETIMEDOUT},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_UNREACHABLE, -ETIMEDOUT,
		 -ETIMEDOUT},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_UNREACHABLE, -EHOSTUNREACH,
		 -EHOSTUNREACH},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_UNREACHABLE, 0, -EHOSTUNREACH},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_CONNECT_ERROR, 0,
		 -ECONNRESET},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_REJECTED, 0, -ECONNREFUSED},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_DEVICE_REMOVAL, 0, -ENODEV},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_ADDR_CHANGE, 0, -ENETRESET},
		/* out of place: the conn fails with -EPROTO */
		{EVR_CS_RESOLVING_ADDR, RDMA_CM_EVENT_ROUTE_RESOLVED, 0,
		 -EPROTO},
		{EVR_CS_RESOLVING_ADDR, RDMA_CM_EVENT_ESTABLISHED, 0, -EPROTO},
		{EVR_CS_RESOLVING_ROUTE, RDMA_CM_EVENT_ADDR_RESOLVED, 0,
		 -EPROTO},
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_CONNECT_RESPONSE, 0,
		 -EPROTO},
		/* a reply handshake missing or of the wrong kind */
		{EVR_CS_CONNECTING, RDMA_CM_EVENT_ESTABLISHED, 0, -EPROTO},
	};
	struct fix *f = *state;
	unsigned i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct peer p;

		peer_init(&p, f->ctx);
		connect_to(&p, cases[i].in);
		mock_cm_event(p.id, cases[i].ev, cases[i].status, NULL, 0);
		expect_connect_fails(&p, cases[i].expect);
		peer_fini(&p);
	}
}

/* A reply handshake that does not decode, or is a request. */
static void test_bad_reply(void **state)
{
	struct fix *f = *state;
	uint8_t buf[EVR_HS_MAX];
	unsigned i;

	for (i = 0; i < 3; i++) {
		struct peer p;
		size_t n;

		peer_init(&p, f->ctx);
		connect_to(&p, EVR_CS_CONNECTING);
		n = peer_hs(&p, i == 0 ? EVR_HS_REQ : EVR_HS_REP, buf);
		if (i == 1)
			buf[0] ^= 0xff; /* magic */
		if (i == 2)
			n = 10; /* truncated */
		mock_cm_event(p.id, RDMA_CM_EVENT_ESTABLISHED, 0, buf, n);
		expect_connect_fails(&p, -EPROTO);
		peer_fini(&p);
	}
}

/* No answer within the connect bound: -ETIMEDOUT, in every state before
 * ESTABLISHED.  Resolution is bounded by connect_timeout_ms (100 ms here);
 * a request that was sent waits for the reply bound (connect_reply_ms,
 * 400 ms): it may be queued behind many others at the server. */
static void test_connect_timeout(void **state)
{
	static const enum evr__conn_state in[] = {
		EVR_CS_RESOLVING_ADDR, EVR_CS_RESOLVING_ROUTE,
		EVR_CS_CONNECTING};
	struct fix *f = *state;
	unsigned i;

	for (i = 0; i < 3; i++) {
		struct peer p;

		peer_init(&p, f->ctx);
		connect_to(&p, in[i]);
		peer_pump(f->ctx);
		assert_int_equal(p.connects, 0);
		peer_sleep_ms(150);
		if (in[i] == EVR_CS_CONNECTING) {
			peer_pump(f->ctx);
			assert_int_equal(p.connects, 0); /* still waiting */
			assert_int_equal(p.conn->state, EVR_CS_CONNECTING);
			peer_sleep_ms(300);
		}
		expect_connect_fails(&p, -ETIMEDOUT);
		peer_fini(&p);
	}
}

/* Each resolution step has the connect bound of its own: a slow address
 * resolution does not eat into the route's. */
static void test_connect_timeout_per_step(void **state)
{
	struct fix *f = *state;
	struct peer p;

	peer_init(&p, f->ctx);
	connect_to(&p, EVR_CS_RESOLVING_ADDR);
	peer_sleep_ms(600);
	mock_cm_event(p.id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p.conn->state, EVR_CS_RESOLVING_ROUTE);
	p.qp = p.id->qp;
	peer_sleep_ms(600); /* 1200 ms since evr_connect, 600 in this step */
	peer_pump(f->ctx);
	assert_int_equal(p.connects, 0);
	peer_sleep_ms(500);
	expect_connect_fails(&p, -ETIMEDOUT);
	peer_fini(&p);
}

/* Events that come after the conn failed change nothing: one
 * on_connect, with the first error. */
static void test_late_events(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	uint8_t rep[EVR_HS_MAX];

	connect_to(p, EVR_CS_CONNECTING);
	peer_sleep_ms(450); /* the reply bound */
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, rep,
		      peer_hs(p, EVR_HS_REP, rep));
	mock_cm_event(p->id, RDMA_CM_EVENT_REJECTED, 0, NULL, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_TIMEWAIT_EXIT, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 0);
	expect_connect_fails(p, -ETIMEDOUT);
}

/* Calls that fail inside evr_connect: an error, never a callback, nothing
 * left behind. */
static void test_connect_fails_at_once(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	char ud[EVR_MAX_USER_DATA + 1] = {0};

	peer_conn_opts(p, &o);
	assert_int_equal(evr_connect(f->ctx, "not an address", 1, &o, NULL),
			 -EINVAL);
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 0, &o, NULL),
			 -EINVAL);
	o.user_data = ud;
	o.user_len = sizeof(ud);
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 1, &o, NULL),
			 -EINVAL);
	o.user_len = 0;
	mock_cm.fail_create_id = ENOMEM;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 1, &o, NULL),
			 -ENOMEM);
	mock_cm.fail_create_id = 0;
	mock_cm.fail_resolve_addr = EADDRNOTAVAIL;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.1", 1, &o, NULL),
			 -EADDRNOTAVAIL);
	mock_cm.fail_resolve_addr = 0;
	peer_pump(f->ctx); /* the conn never handed out is freed */
	assert_true(mock_id_of(mock_cm_last_id())->destroyed);
	assert_int_equal(p->connects, 0);
	assert_int_equal(p->closes, 0);
	assert_int_equal(mock_cm.create_id, 2);
	assert_int_equal(mock_cm.destroy_id, 1);
}

/* Calls that fail on the way (route, QP, connect): one on_connect with the
 * error. */
static void test_connect_fails_later(void **state)
{
	struct fix *f = *state;
	unsigned i;

	for (i = 0; i < 3; i++) {
		struct peer p;

		peer_init(&p, f->ctx);
		connect_to(&p, i > 0 ? EVR_CS_RESOLVING_ROUTE
				     : EVR_CS_RESOLVING_ADDR);
		if (i == 0)
			mock_cm.fail_resolve_route = EHOSTUNREACH;
		else if (i == 1)
			mock_cm.fail_create_qp = ENOMEM;
		else
			mock_cm.fail_connect = ECONNREFUSED;
		mock_cm_event(p.id, i > 0 ? RDMA_CM_EVENT_ROUTE_RESOLVED
					  : RDMA_CM_EVENT_ADDR_RESOLVED,
			      0, NULL, 0);
		peer_pump(f->ctx);
		mock_cm.fail_resolve_route = 0;
		mock_cm.fail_create_qp = 0;
		mock_cm.fail_connect = 0;
		p.qp = p.id->qp; /* made before the failure, or never */
		assert_true((i == 2) == !!p.qp);
		expect_connect_fails(&p, i == 0   ? -EHOSTUNREACH
					 : i == 1 ? -ENOMEM
						  : -ECONNREFUSED);
		peer_fini(&p);
	}
}

/* ---- passive side ---- */

static struct {
	unsigned calls;
	uint8_t user[EVR_MAX_USER_DATA];
	size_t ulen;
	int answer; /* 0 accept, 1 reject, 2 nothing, 3 close l, accept */
	int rc;
	evr_conn *conn;
	struct peer *p;
} acc;

static void accept_cb(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct evr_conn_opts o;

	(void)arg;
	acc.calls++;
	acc.ulen = ulen;
	memcpy(acc.user, ud, ulen);
	peer_conn_opts(acc.p, &o);
	switch (acc.answer) {
	case 0:
		acc.rc = evr_accept(req, &o, &acc.conn);
		break;
	case 1:
		acc.rc = evr_reject(req, "nope", 4);
		assert_int_equal(evr_reject(req, "again", 5), -EINVAL);
		assert_int_equal(evr_accept(req, &o, NULL), -EINVAL);
		break;
	case 3:
		evr_listener_close(l);
		acc.rc = evr_accept(req, &o, &acc.conn);
		break;
	default:
		break;
	}
}

static evr_listener *listen_on(struct fix *f, int answer)
{
	evr_listener *l = NULL;

	memset(&acc, 0, sizeof(acc));
	acc.answer = answer;
	acc.p = &f->p;
	assert_int_equal(evr_listen(f->ctx, NULL, 7000, 0, accept_cb, NULL,
				    &l),
			 0);
	assert_int_equal(evr_listener_port(l), 7000);
	assert_true(mock_id_of(mock_cm_last_id())->listening);
	return l;
}

static struct rdma_cm_id *request(struct fix *f, const char *user)
{
	struct evr__hs hs;
	uint8_t buf[EVR_HS_MAX];

	memset(&hs, 0, sizeof(hs));
	hs.kind = EVR_HS_REQ;
	hs.recv_depth = 8;
	hs.max_eager = 1024;
	hs.max_msg = 1u << 20;
	hs.user_len = (uint8_t)strlen(user);
	memcpy(hs.user, user, hs.user_len);
	return mock_cm_request(mock_cm_last_id(), buf,
			       evr__hs_encode(buf, &hs));
}

/* A request that the listener accepts: the conn, in ACCEPTING, is p's. */
static void accepting(struct fix *f)
{
	struct peer *p = &f->p;

	p->id = request(f, "");
	peer_pump(f->ctx);
	p->conn = acc.conn;
	p->qp = p->id->qp;
}

/* The REJ handshake in the private data of a reject, with its reason. */
static void assert_rejected(struct rdma_cm_id *id, const char *why)
{
	struct mock_id *m = mock_id_of(id);
	struct evr__hs hs;
	const char *err;

	assert_int_equal(m->reject, 1);
	assert_int_equal(m->accept, 0);
	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, &err), 0);
	assert_int_equal(hs.kind, EVR_HS_REJ);
	assert_int_equal(hs.user_len, strlen(why));
	assert_memory_equal(hs.user, why, strlen(why));
	assert_true(m->destroyed);
}

static void test_accept(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_listener *l = listen_on(f, 0);
	struct evr__hs hs;
	struct mock_id *m;

	p->id = request(f, "abc");
	m = mock_id_of(p->id);
	peer_pump(f->ctx);
	assert_int_equal(acc.calls, 1);
	assert_int_equal(acc.ulen, 3);
	assert_memory_equal(acc.user, "abc", 3);
	assert_int_equal(acc.rc, 0);
	p->conn = acc.conn;
	p->qp = p->id->qp;
	assert_int_equal(p->conn->state, EVR_CS_ACCEPTING);
	assert_int_equal(m->accept, 1);
	assert_hs_sent(m, EVR_HS_REP, &hs);
	assert_int_equal(peer_recvs_posted(p), 8);
	assert_int_equal(p->connects, 0);
	established(p);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	evr_listener_close(l);
}

/* What the peer sends before our ESTABLISHED event is kept, and
 * delivered in order after on_connect. */
static void test_accept_early_receives(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_listener *l = listen_on(f, 0);

	accepting(f);
	peer_eager(p, "one", 3, 0);
	peer_eager(p, "two", 3, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 0);
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->nmsgs, 2);
	assert_memory_equal(p->msgs[0].data, "one", 3);
	assert_memory_equal(p->msgs[1].data, "two", 3);
	assert_int_equal(peer_recvs_posted(p), 8);
	evr_listener_close(l);
}

static void test_reject(void **state)
{
	struct fix *f = *state;
	evr_listener *l = listen_on(f, 1);
	struct rdma_cm_id *id = request(f, "x");

	peer_pump(f->ctx);
	assert_int_equal(acc.calls, 1);
	assert_int_equal(acc.rc, 0);
	assert_rejected(id, "nope");
	assert_int_equal(mock_cm.create_qp, 0);
	evr_listener_close(l);
}

static void test_unanswered(void **state)
{
	struct fix *f = *state;
	evr_listener *l = listen_on(f, 2);
	struct rdma_cm_id *id = request(f, "x");

	peer_pump(f->ctx);
	assert_int_equal(acc.calls, 1);
	assert_rejected(id, "not accepted");
	evr_listener_close(l);
}

static void test_bad_request(void **state)
{
	struct fix *f = *state;
	evr_listener *l = listen_on(f, 0);
	struct rdma_cm_id *id;
	uint8_t junk[EVR_HS_FIXED] = {1, 2, 3};

	id = mock_cm_request(mock_cm_last_id(), junk, sizeof(junk));
	peer_pump(f->ctx);
	assert_int_equal(acc.calls, 0);
	assert_rejected(id, "bad handshake");
	evr_listener_close(l);
}

/* The listener closed in its callback: the request in hand is still
 * answered; later requests are not handed to anyone. */
static void test_listener_closed_in_callback(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	listen_on(f, 3);
	p->id = request(f, "");
	peer_pump(f->ctx);
	assert_int_equal(acc.calls, 1);
	assert_int_equal(acc.rc, 0);
	p->conn = acc.conn;
	p->qp = p->id->qp;
	established(p);
}

/* The accept bound: the peer, told it was accepted, is disconnected. */
static void test_accept_timeout(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_listener *l = listen_on(f, 0);

	accepting(f);
	peer_sleep_ms(150); /* past connect_timeout_ms: still waiting */
	peer_pump(f->ctx);
	assert_int_equal(mock_id_of(p->id)->disconnect, 0);
	assert_int_equal(p->connects, 0);
	peer_sleep_ms(300); /* past the reply bound */
	peer_pump(f->ctx);
	assert_int_equal(mock_id_of(p->id)->disconnect, 1);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, -ETIMEDOUT);
	assert_int_equal(p->connect_state, EVR_CS_FLUSHING);
	assert_true(mock_id_of(p->id)->destroyed);
	evr_listener_close(l);
}

/* The peer goes away while we accept: on_connect(-ECONNRESET) once. */
static void test_disconnect_while_accepting(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_listener *l = listen_on(f, 0);

	accepting(f);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, -ECONNRESET);
	assert_int_equal(p->closes, 0);
	assert_true(mock_id_of(p->id)->destroyed);
	evr_listener_close(l);
}

/* rdma_accept fails: evr_accept returns the error, the request is
 * rejected, no callback ever. */
static void test_accept_fails(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_listener *l = listen_on(f, 0);

	mock_cm.fail_accept = EIO;
	p->id = request(f, "");
	peer_pump(f->ctx);
	mock_cm.fail_accept = 0;
	assert_int_equal(acc.rc, -EIO);
	/* its receives were posted: the conn goes once they are flushed */
	p->qp = p->id->qp;
	assert_non_null(p->qp);
	assert_false(mock_id_of(p->id)->destroyed);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_true(mock_qp_destroyed(p->qp));
	assert_int_equal(p->connects, 0);
	assert_int_equal(p->closes, 0);
	assert_int_equal(mock_id_of(p->id)->reject, 1);
	assert_true(mock_id_of(p->id)->destroyed);
	evr_listener_close(l);
}

/* The backlog: the caller's, else the ctx's listen_backlog (large by
 * default: a burst of connects must not overflow it). */
static void test_listen_backlog(void **state)
{
	struct fix *f = *state;
	evr_listener *l = NULL;

	assert_int_equal(evr_listen(f->ctx, NULL, 7000, 0, accept_cb, NULL,
				    &l),
			 0);
	assert_int_equal(mock_id_of(mock_cm_last_id())->backlog, 4096);
	evr_listener_close(l);
	assert_int_equal(evr_listen(f->ctx, NULL, 7000, 10, accept_cb, NULL,
				    &l),
			 0);
	assert_int_equal(mock_id_of(mock_cm_last_id())->backlog, 10);
	evr_listener_close(l);
}

static void test_listen_fails(void **state)
{
	struct fix *f = *state;
	evr_listener *l = NULL;

	mock_cm.fail_bind = EADDRINUSE;
	assert_int_equal(evr_listen(f->ctx, NULL, 7000, 0, accept_cb, NULL,
				    &l),
			 -EADDRINUSE);
	mock_cm.fail_bind = 0;
	mock_cm.fail_listen = EADDRINUSE;
	assert_int_equal(evr_listen(f->ctx, NULL, 7000, 0, accept_cb, NULL,
				    &l),
			 -EADDRINUSE);
	mock_cm.fail_listen = 0;
	assert_null(l);
	assert_int_equal(mock_cm.destroy_id, 2);
	assert_int_equal(evr_listen(f->ctx, "bad", 7000, 0, accept_cb, NULL,
				    &l),
			 -EINVAL);
}

/* evr_ctx_set_mode: each change of the mode in effect counted once (and
 * traced: the mode_switch probe), a repeat not, a bad mode refused. */
static void test_set_mode(void **state)
{
	struct fix *f = *state;
	struct evr_stats st;
	uint64_t n0;

	/* the peer's ctx polls (peer_ctx_opts) */
	assert_int_equal(evr_ctx_mode(f->ctx), EVR_MODE_POLL);
	evr_ctx_stats(f->ctx, &st);
	n0 = st.mode_switches;
	assert_int_equal(evr_ctx_set_mode(f->ctx, EVR_MODE_EVENT), 0);
	assert_int_equal(evr_ctx_mode(f->ctx), EVR_MODE_EVENT);
	assert_int_equal(evr_ctx_set_mode(f->ctx, EVR_MODE_EVENT), 0);
	evr_ctx_stats(f->ctx, &st);
	assert_int_equal(st.mode_switches, n0 + 1);
	assert_int_equal(evr_ctx_set_mode(f->ctx, EVR_MODE_POLL), 0);
	assert_int_equal(evr_ctx_mode(f->ctx), EVR_MODE_POLL);
	evr_ctx_stats(f->ctx, &st);
	assert_int_equal(st.mode_switches, n0 + 2);
	assert_int_equal(evr_ctx_set_mode(f->ctx, (enum evr_mode)7), -EINVAL);
	assert_int_equal(evr_ctx_mode(f->ctx), EVR_MODE_POLL);
}

/* The embedding API on the mocked stack: one epoll fd, the same on each
 * call, holding the cm channel, the queue of calls from other threads
 * and, once the ctx binds to a device, the device's fds -- readable when
 * an event waits; the time to the next deadline (0 while polling, -1
 * with no deadline, else the connect's bound); bad arguments refused. */
static void test_embed(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_conn_opts o;
	struct epoll_event ev;
	unsigned bound;
	int fd, t;

	fd = evr_ctx_fd(f->ctx);
	assert_true(fd >= 0);
	assert_int_equal(evr_ctx_fd(f->ctx), fd);
	assert_int_equal(epoll_wait(fd, &ev, 1, 0), 0);
	/* the peer's ctx polls: the host must come back at once */
	assert_int_equal(evr_ctx_timeout_ms(f->ctx), 0);
	assert_int_equal(evr_ctx_set_mode(f->ctx, EVR_MODE_EVENT), 0);
	assert_int_equal(evr_ctx_process(f->ctx), 0); /* arms, re-polls */
	assert_int_equal(evr_ctx_timeout_ms(f->ctx), -1);

	peer_conn_opts(p, &o);
	o.timeout_ms = 4000;
	assert_int_equal(evr_connect(f->ctx, "192.0.2.7", 4791, &o, &p->conn),
			 0);
	p->id = mock_cm_last_id();
	assert_int_equal(evr_ctx_process(f->ctx), 0);
	bound = EVR__MAX(4000u, f->ctx->o.connect_reply_ms);
	t = evr_ctx_timeout_ms(f->ctx);
	assert_true(t > 0 && (unsigned)t <= bound);

	/* a cm event wakes the fd; processing takes it */
	mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	assert_int_equal(epoll_wait(fd, &ev, 1, 0), 1);
	assert_int_equal(evr_ctx_process(f->ctx), 0);
	assert_int_equal(p->conn->state, EVR_CS_RESOLVING_ROUTE);
	/* the route binds the device: its fds join the set */
	mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	assert_int_equal(evr_ctx_process(f->ctx), 0);
	assert_int_equal(p->conn->state, EVR_CS_CONNECTING);
	assert_non_null(f->ctx->pd);
	assert_int_equal(epoll_ctl(fd, EPOLL_CTL_ADD, f->ctx->ch->fd, &ev), -1);
	assert_int_equal(errno, EEXIST);
	assert_int_equal(epoll_ctl(fd, EPOLL_CTL_ADD,
				   f->ctx->verbs->async_fd, &ev),
			 -1);
	assert_int_equal(errno, EEXIST);

	assert_int_equal(evr_ctx_fd(NULL), -EINVAL);
	assert_int_equal(evr_ctx_process(NULL), -EINVAL);
	assert_int_equal(evr_ctx_timeout_ms(NULL), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_embed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_set_mode, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_path, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_send_before_established,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_rejected, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_error_events, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_reply, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_connect_timeout,
						setup_short_bounds, teardown),
		cmocka_unit_test_setup_teardown(test_connect_timeout_per_step,
						setup_step_bounds, teardown),
		cmocka_unit_test_setup_teardown(test_late_events,
						setup_short_bounds, teardown),
		cmocka_unit_test_setup_teardown(test_disconnect_while_accepting,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_fails_at_once,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_fails_later,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_accept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_accept_early_receives,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_reject, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unanswered, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_bad_request, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_listener_closed_in_callback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_accept_timeout,
						setup_short_bounds, teardown),
		cmocka_unit_test_setup_teardown(test_accept_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_listen_backlog, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_listen_fails, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
