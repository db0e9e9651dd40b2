/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Connections end to end on a real verbs stack, through the public API:
 * accept and reject (with the user bytes both ways), refused and timed-out
 * connects, graceful and aborting closes from either side in the middle of
 * traffic and from inside callbacks, closing a connection that is still
 * connecting, and destroying a ctx with connections open.  Throughout,
 * every callback must fire exactly once, with the documented status.
 */
#include "rt_pair.h"

#include <dlfcn.h>
#include <stdbool.h>

#include <rdma/rdma_cma.h>

/* An address on the guest's RDMA subnet where no host answers. */
#define NOBODY "10.77.0.99"

/* ------------------------------------------------------------------------ */
/* A connection end that streams messages and checks what it receives.     */

/* Message seq of an end: [u32 seq][u32 end id][pattern]; every eighth
 * goes by rendezvous. */
static size_t msg_len(uint32_t seq)
{
	if (seq % 8 == 3)
		return 16384 + (seq * 7919u) % 100000;
	return 16 + (seq * 131u) % 4000;
}

static uint8_t *msg_make(uint32_t id, uint32_t seq)
{
	size_t len = msg_len(seq);
	uint8_t *b = malloc(len);

	assert_non_null(b);
	memcpy(b, &seq, 4);
	memcpy(b + 4, &id, 4);
	for (size_t i = 8; i < len; i++)
		b[i] = rt_pat(seq ^ (id << 24), i);
	return b;
}

static int msg_check(const void *data, size_t len, uint32_t id, uint32_t seq)
{
	const uint8_t *p = data;
	uint32_t v;

	if (len != msg_len(seq))
		return 1;
	memcpy(&v, p, 4);
	if (v != seq)
		return 1;
	memcpy(&v, p + 4, 4);
	if (v != id)
		return 1;
	for (size_t i = 8; i < len; i++)
		if (p[i] != rt_pat(seq ^ (id << 24), i))
			return 1;
	return 0;
}

#define MAX_SEQ 100000

struct end {
	uint32_t id;
	struct end *peer;
	evr_conn *c; /* NULL once on_close (or a failed on_connect) fired */
	int connects, connect_status;
	int closes, close_status;
	int events_after_end; /* callbacks after the last one: a bug */
	/* sending */
	unsigned window; /* 0: no pump; else keep this many in flight */
	uint32_t total;	 /* messages to send in all */
	uint32_t sent;	 /* submitted */
	uint32_t ncb, cb_ok, cb_err, cb_canceled;
	uint8_t cb_count[MAX_SEQ];
	int first_err; /* first send error status seen */
	int send_rc;   /* an unexpected evr_send error */
	bool stopped;  /* evr_send said -EPIPE: the conn is ending */
	/* receiving */
	uint32_t next_recv;
	int bad;
	int recv_after_abort;
	bool aborted;
	bool hold; /* keep every message (never released: the ctx frees) */
	/* closing from inside callbacks: when message close_at arrives
	 * (on_recv) or completes (send callback) */
	int close_on_recv, close_on_sent; /* -1: never */
	unsigned close_flags;
	int close_rc, close2_rc, send_rc_after_close;
	bool close_called;
};

static void end_init(struct end *e, uint32_t id)
{
	memset(e, 0, sizeof(*e));
	e->id = id;
	e->close_on_recv = e->close_on_sent = -1;
	e->close_rc = e->close2_rc = e->send_rc_after_close = 1;
}

static void end_pump(struct end *e);

/* evr_conn_close from a callback, then the calls that must now fail. */
static void end_close_here(struct end *e, evr_conn *c)
{
	static const uint8_t x[8];

	e->close_called = true;
	e->close_rc = evr_conn_close(c, e->close_flags);
	e->close2_rc = evr_conn_close(c, e->close_flags);
	e->send_rc_after_close = evr_send(c, x, sizeof(x), NULL, NULL);
	if (e->close_flags & EVR_CLOSE_ABORT)
		e->aborted = true;
}

struct sendop {
	struct end *e;
	uint32_t seq;
	uint8_t *buf;
};

static void end_sent(evr_conn *c, int status, void *arg)
{
	struct sendop *op = arg;
	struct end *e = op->e;

	if (!e->c)
		e->events_after_end++;
	e->ncb++;
	e->cb_count[op->seq]++;
	if (status == 0) {
		e->cb_ok++;
	} else {
		e->cb_err++;
		if (status == -ECANCELED)
			e->cb_canceled++;
		if (!e->first_err)
			e->first_err = status;
	}
	if ((int)op->seq == e->close_on_sent)
		end_close_here(e, c);
	free(op->buf);
	free(op);
	end_pump(e);
}

static int end_send(struct end *e)
{
	struct sendop *op = calloc(1, sizeof(*op));
	int rc;

	assert_non_null(op);
	assert_true(e->sent < MAX_SEQ);
	op->e = e;
	op->seq = e->sent;
	op->buf = msg_make(e->id, e->sent);
	rc = evr_send(e->c, op->buf, msg_len(e->sent), end_sent, op);
	if (rc) {
		free(op->buf);
		free(op);
		return rc;
	}
	e->sent++;
	return 0;
}

static void end_pump(struct end *e)
{
	while (e->c && e->window && !e->stopped && !e->send_rc &&
	       e->sent < e->total && e->sent - e->ncb < e->window) {
		int rc = end_send(e);

		if (rc == -EPIPE)
			e->stopped = true; /* closing: expected */
		else if (rc)
			e->send_rc = rc;
	}
}

static void end_connect(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	if (e->connects || e->closes)
		e->events_after_end++;
	e->connects++;
	e->connect_status = status;
	e->c = status == 0 ? c : NULL;
	if (status == 0)
		end_pump(e);
}

static void end_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct end *e = arg;

	if (!e->c)
		e->events_after_end++;
	if (e->aborted)
		e->recv_after_abort++;
	if (msg_check(data, len, e->peer ? e->peer->id : 0, e->next_recv))
		e->bad++;
	if (e->hold && !evr_conn_hold(c))
		e->bad++;
	if ((int)e->next_recv++ == e->close_on_recv)
		end_close_here(e, c);
}

static void end_close(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	(void)c;
	if (!e->c || e->closes)
		e->events_after_end++;
	e->closes++;
	e->close_status = status;
	e->c = NULL;
}

static void end_opts(struct end *e, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = end_connect;
	o->on_recv = end_recv;
	o->on_close = end_close;
	o->arg = e;
}

/* Every send callback fired exactly once. */
static void end_assert_once(const struct end *e)
{
	assert_int_equal(e->ncb, e->sent);
	for (uint32_t k = 0; k < e->sent; k++)
		if (e->cb_count[k] != 1)
			fail_msg("end %u message %u: %u callbacks", e->id, k,
				 e->cb_count[k]);
	assert_int_equal(e->cb_ok + e->cb_err, e->sent);
	assert_int_equal(e->events_after_end, 0);
	assert_int_equal(e->send_rc, 0);
	assert_int_equal(e->bad, 0);
}

/* ------------------------------------------------------------------------ */
/* A server ctx with a listener and a client ctx, on one loop.              */

struct duo {
	struct ev_loop *loop;
	evr_ctx *sctx, *cctx;
	evr_listener *l;
	struct end cli, srv;
	/* accept callback behaviour */
	const void *reject; /* reject with these bytes */
	size_t reject_len;
	bool answer_none; /* neither accept nor reject */
	int accepts;
	uint8_t seen[EVR_MAX_USER_DATA + 1];
	size_t seen_len;
	int accept_rc, reject_rc, bad_reject_rc, accept_after_reject_rc;
	/* what on_connect saw of a reject */
	uint8_t reason[EVR_MAX_USER_DATA + 1];
	size_t reason_len;
	bool reason_null;
};

static void duo_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct duo *d = arg;
	uint8_t big[EVR_MAX_USER_DATA + 1] = {0};
	struct evr_conn_opts o;

	(void)l;
	d->accepts++;
	d->seen_len = ulen;
	if (ulen <= sizeof(d->seen))
		memcpy(d->seen, ud, ulen);
	if (d->answer_none)
		return;
	if (d->reject || d->reject_len) {
		d->bad_reject_rc = evr_reject(req, big, sizeof(big));
		d->reject_rc = evr_reject(req, d->reject, d->reject_len);
		end_opts(&d->srv, &o);
		d->accept_after_reject_rc = evr_accept(req, &o, NULL);
		return;
	}
	end_opts(&d->srv, &o);
	d->accept_rc = evr_accept(req, &o, &d->srv.c);
}

static void duo_init(struct duo *d, const struct evr_ctx_opts *so)
{
	struct evr_ctx_opts o;

	memset(d, 0, sizeof(*d));
	d->loop = ev_loop_new(EVFLAG_AUTO);
	end_init(&d->cli, 1);
	end_init(&d->srv, 2);
	d->cli.peer = &d->srv;
	d->srv.peer = &d->cli;
	rt_ctx_opts(&o);
	/* the wait for a sent request's answer bounded by the connect bound
	 * too (not connect_reply_ms), so that test_connect_timeout's silent
	 * host is ended by it */
	o.connect_reply_ms = 1;
	assert_int_equal(evr_ctx_create(&d->cctx, d->loop, &o), 0);
	if (!so)
		so = &o;
	assert_int_equal(evr_ctx_create(&d->sctx, d->loop, so), 0);
	assert_int_equal(
	    evr_listen(d->sctx, rt_addr(), 0, 16, duo_accept, d, &d->l), 0);
}

static void duo_fini(struct duo *d)
{
	if (d->l)
		evr_listener_close(d->l);
	evr_ctx_destroy(d->cctx);
	evr_ctx_destroy(d->sctx);
	ev_loop_destroy(d->loop);
}

static int duo_cli_connected(void *arg)
{
	struct duo *d = arg;

	return d->cli.connects > 0;
}

static int duo_up(void *arg)
{
	struct duo *d = arg;

	return (d->cli.connects && d->srv.connects) ||
	       (d->cli.connects && d->cli.connect_status);
}

static void duo_connect(struct duo *d)
{
	struct evr_conn_opts o;
	evr_conn *c;

	end_opts(&d->cli, &o);
	assert_int_equal(
	    evr_connect(d->cctx, rt_addr(), evr_listener_port(d->l), &o, &c),
	    0);
	assert_int_equal(rt_run_until(d->loop, duo_up, d, 20), 0);
	assert_int_equal(d->cli.connect_status, 0);
	assert_int_equal(d->srv.connect_status, 0);
	assert_ptr_equal(d->cli.c, c);
	assert_non_null(d->srv.c);
}

static int duo_closed(void *arg)
{
	struct duo *d = arg;

	return d->cli.closes && d->srv.closes && d->cli.ncb == d->cli.sent &&
	       d->srv.ncb == d->srv.sent;
}

/* ------------------------------------------------------------------------ */
/* Accept, reject and the user bytes                                        */

static void reject_connect(evr_conn *c, int status, void *arg)
{
	struct duo *d = arg;
	const void *r;
	size_t len = 12345;

	d->cli.connects++;
	d->cli.connect_status = status;
	r = evr_conn_reject_reason(c, &len);
	d->reason_null = r == NULL;
	d->reason_len = len;
	if (r && len <= sizeof(d->reason))
		memcpy(d->reason, r, len);
}

static void test_reject(void **state)
{
	static const uint8_t bin[EVR_MAX_USER_DATA] = {
	    0,	 1,    2, 0, 0xff, 0xfe, 'r', 'e', 'j', 'e', 'c',
	    't', 9,    8, 7, 6,	   5,	 4,   3,   2,	1,   0,
	    0,	 0x80, 1, 1, 1,	   1,	 1,   1,   1,	0x7f};
	static const struct {
		const char *name;
		const void *reason;
		size_t len;
	} cases[] = {
	    {"text", "go away", 7},
	    {"32 binary bytes", bin, sizeof(bin)},
	    {"one byte", "x", 1},
	    {"no bytes", NULL, 0},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct duo d;
		struct evr_conn_opts o;
		double t0;

		duo_init(&d, NULL);
		d.reject = cases[i].reason;
		d.reject_len = cases[i].len;
		if (!cases[i].len)
			d.reject = "";
		end_opts(&d.cli, &o);
		o.on_connect = reject_connect;
		o.arg = &d;
		o.user_data = "knock";
		o.user_len = 5;
		t0 = rt_now();
		assert_int_equal(evr_connect(d.cctx, rt_addr(),
					     evr_listener_port(d.l), &o, NULL),
				 0);
		assert_int_equal(
		    rt_run_until(d.loop, duo_cli_connected, &d, 10), 0);
		printf("# reject (%s): refused in %.2f s\n", cases[i].name,
		       rt_now() - t0);
		rt_run_for(d.loop, 0.2);
		assert_int_equal(d.accepts, 1);
		assert_int_equal(d.seen_len, 5);
		assert_memory_equal(d.seen, "knock", 5);
		/* in the accept callback: too long a reason is refused, the
		 * real one goes, and the request is answered for good */
		assert_int_equal(d.bad_reject_rc, -EINVAL);
		assert_int_equal(d.reject_rc, 0);
		assert_int_equal(d.accept_after_reject_rc, -EINVAL);
		assert_int_equal(d.cli.connects, 1);
		assert_int_equal(d.cli.connect_status, -ECONNREFUSED);
		assert_int_equal(d.cli.closes, 0);
		assert_int_equal(d.srv.connects, 0);
		assert_int_equal(d.reason_len, cases[i].len);
		if (cases[i].len) {
			assert_false(d.reason_null);
			assert_memory_equal(d.reason, cases[i].reason,
					    cases[i].len);
		} else {
			assert_true(d.reason_null);
		}
		duo_fini(&d);
	}
}

/* An accept callback that answers nothing rejects the request. */
static void test_unanswered(void **state)
{
	struct duo d;
	struct evr_conn_opts o;

	(void)state;
	duo_init(&d, NULL);
	d.answer_none = true;
	end_opts(&d.cli, &o);
	assert_int_equal(
	    evr_connect(d.cctx, rt_addr(), evr_listener_port(d.l), &o, NULL),
	    0);
	assert_int_equal(rt_run_until(d.loop, duo_cli_connected, &d, 10), 0);
	rt_run_for(d.loop, 0.2);
	assert_int_equal(d.accepts, 1);
	assert_int_equal(d.cli.connects, 1);
	assert_int_equal(d.cli.connect_status, -ECONNREFUSED);
	assert_int_equal(d.cli.closes, 0);
	assert_int_equal(d.srv.connects, 0);
	duo_fini(&d);
}

static void test_user_data(void **state)
{
	static const uint8_t bin[EVR_MAX_USER_DATA] = {
	    0xff, 0,  0,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11, 12,
	    13,	  14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 0,  0,  0};
	static const struct {
		const void *data;
		size_t len;
	} cases[] = {
	    {NULL, 0},
	    {"A", 1},
	    {bin, sizeof(bin)},
	};
	uint8_t big[EVR_MAX_USER_DATA + 1] = {0};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct duo d;
		struct evr_conn_opts o;
		evr_conn *c;

		duo_init(&d, NULL);
		end_opts(&d.cli, &o);
		o.user_data = cases[i].data;
		o.user_len = cases[i].len;
		assert_int_equal(evr_connect(d.cctx, rt_addr(),
					     evr_listener_port(d.l), &o, &c),
				 0);
		assert_int_equal(rt_run_until(d.loop, duo_up, &d, 20), 0);
		assert_int_equal(d.cli.connect_status, 0);
		assert_int_equal(d.srv.connect_status, 0);
		assert_int_equal(d.accept_rc, 0);
		assert_int_equal(d.seen_len, cases[i].len);
		if (cases[i].len)
			assert_memory_equal(d.seen, cases[i].data,
					    cases[i].len);
		duo_fini(&d);
	}

	/* refused synchronously, and no callback ever fires */
	{
		struct duo d;
		struct evr_conn_opts o;
		evr_conn *c = NULL;

		duo_init(&d, NULL);
		end_opts(&d.cli, &o);
		o.user_data = big;
		o.user_len = sizeof(big);
		assert_int_equal(evr_connect(d.cctx, rt_addr(),
					     evr_listener_port(d.l), &o, &c),
				 -EINVAL);
		o.user_data = NULL;
		o.user_len = 4;
		assert_int_equal(evr_connect(d.cctx, rt_addr(),
					     evr_listener_port(d.l), &o, &c),
				 -EINVAL);
		assert_null(c);
		rt_run_for(d.loop, 0.3);
		assert_int_equal(d.accepts, 0);
		assert_int_equal(d.cli.connects, 0);
		duo_fini(&d);
	}
}

/* ------------------------------------------------------------------------ */
/* Refused and unanswered connects                                          */

static void test_no_listener(void **state)
{
	static const struct {
		const char *name;
		const char *(*addr)(void);
	} cases[] = {{"IPv4", rt_addr}, {"IPv6", rt_addr6}};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct duo d;
		struct evr_conn_opts o;
		uint16_t port;
		double t0, dt;

		duo_init(&d, NULL);
		/* a port that just had a listener, and has none now */
		port = evr_listener_port(d.l);
		evr_listener_close(d.l);
		d.l = NULL;
		end_opts(&d.cli, &o);
		t0 = rt_now();
		assert_int_equal(
		    evr_connect(d.cctx, cases[i].addr(), port, &o, NULL), 0);
		assert_int_equal(
		    rt_run_until(d.loop, duo_cli_connected, &d, 10), 0);
		dt = rt_now() - t0;
		printf("# no listener (%s): %s in %.2f s\n", cases[i].name,
		       evr_err_name(d.cli.connect_status), dt);
		assert_int_equal(d.cli.connect_status, -ECONNREFUSED);
		assert_true(dt < 5.0);
		rt_run_for(d.loop, 0.2);
		assert_int_equal(d.cli.connects, 1);
		assert_int_equal(d.cli.closes, 0);
		duo_fini(&d);
	}
}

static void test_connect_timeout(void **state)
{
	static const unsigned tmo[] = {500, 1500};

	(void)state;
	for (size_t i = 0; i < sizeof(tmo) / sizeof(tmo[0]); i++) {
		struct duo d;
		struct evr_conn_opts o;
		double t0, dt;

		duo_init(&d, NULL);
		end_opts(&d.cli, &o);
		o.timeout_ms = tmo[i];
		t0 = rt_now();
		assert_int_equal(evr_connect(d.cctx, NOBODY, 7471, &o, NULL),
				 0);
		assert_int_equal(
		    rt_run_until(d.loop, duo_cli_connected, &d, 20), 0);
		dt = rt_now() - t0;
		printf("# connect to %s, timeout %u ms: %s after %.2f s\n",
		       NOBODY, tmo[i], evr_err_name(d.cli.connect_status), dt);
		/* Nothing answers at all (on this subnet not even ARP
		 * says no), so the connect bound is what ends it. */
		assert_int_equal(d.cli.connect_status, -ETIMEDOUT);
		assert_true(dt >= tmo[i] / 1000.0 * 0.9);
		assert_true(dt < tmo[i] / 1000.0 + 2.0);
		rt_run_for(d.loop, 0.2);
		assert_int_equal(d.cli.connects, 1);
		assert_int_equal(d.cli.closes, 0);
		duo_fini(&d);
	}
}

/* ------------------------------------------------------------------------ */
/* Closing in the middle of traffic                                         */

struct midstream {
	const char *name;
	bool server_closes;
	unsigned flags;
};

/*
 * The closer submits 1000 messages at once and closes after 100 of them
 * completed; the other end keeps streaming (64 in flight) until its sends
 * fail.  Graceful: the closer's messages all complete with 0 and all
 * arrive, in order; the other end's each complete once, with 0 or an
 * error.  Abort: every callback once, pending ones -ECANCELED.
 */
static void run_midstream(const struct midstream *m)
{
	const uint32_t burst = 1000;
	struct duo d;
	struct end *closer, *other;
	uint32_t done_at_close;
	double t0, dt;
	int rc;

	duo_init(&d, NULL);
	duo_connect(&d);
	closer = m->server_closes ? &d.srv : &d.cli;
	other = m->server_closes ? &d.cli : &d.srv;
	other->window = 64;
	other->total = MAX_SEQ;
	end_pump(other);
	closer->total = burst;
	for (uint32_t k = 0; k < burst; k++)
		assert_int_equal(end_send(closer), 0);

	while (closer->ncb < burst / 10 && !closer->closes)
		ev_run(d.loop, EVRUN_ONCE);
	done_at_close = closer->ncb;
	t0 = rt_now();
	rc = evr_conn_close(closer->c, m->flags);
	assert_int_equal(rc, 0);
	assert_int_equal(evr_conn_close(closer->c, m->flags), -EALREADY);
	assert_int_equal(evr_conn_close(closer->c, m->flags ^ EVR_CLOSE_ABORT),
			 -EALREADY);
	assert_int_equal(evr_send(closer->c, "x", 1, NULL, NULL), -EPIPE);
	/* nothing fires from inside the call */
	assert_int_equal(closer->ncb, done_at_close);
	assert_int_equal(closer->closes, 0);
	if (m->flags & EVR_CLOSE_ABORT)
		closer->aborted = true;

	assert_int_equal(rt_run_until(d.loop, duo_closed, &d, 30), 0);
	dt = rt_now() - t0;
	printf("# %s: %u of %u done at the close, closed in %.2f s; "
	       "closer %u ok / %u failed, other %u ok / %u failed (%s)\n",
	       m->name, done_at_close, burst, dt, closer->cb_ok, closer->cb_err,
	       other->cb_ok, other->cb_err, evr_err_name(other->first_err));
	end_assert_once(closer);
	end_assert_once(other);
	assert_int_equal(closer->closes, 1);
	assert_int_equal(other->closes, 1);
	/* a graceful close says goodbye, an abort does not */
	assert_int_equal(other->close_status, (m->flags & EVR_CLOSE_ABORT)
						      ? -ECONNRESET
						      : -ESHUTDOWN);
	assert_int_equal(closer->recv_after_abort, 0);
	assert_true(other->sent > 0);
	if (m->flags & EVR_CLOSE_ABORT) {
		assert_int_equal(closer->close_status, -ECANCELED);
		/* what had not completed is canceled, nothing else fails */
		assert_true(closer->cb_canceled > 0);
		assert_int_equal(closer->cb_err, closer->cb_canceled);
	} else {
		/* a graceful close delivers everything first -- also at the
		 * peer, which must take in what is in its CQ before it acts
		 * on the disconnect */
		assert_int_equal(closer->close_status, 0);
		assert_int_equal(closer->cb_ok, burst);
		assert_int_equal(closer->cb_err, 0);
		assert_int_equal(other->next_recv, burst);
		assert_true(dt < 10);
	}
	duo_fini(&d);
}

static void test_close_midstream(void **state)
{
	static const struct midstream cases[] = {
	    {"client closes", false, 0},
	    {"server closes", true, 0},
	    {"client aborts", false, EVR_CLOSE_ABORT},
	    {"server aborts", true, EVR_CLOSE_ABORT},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_midstream(&cases[i]);
}

/* Aborting with sends only queued: every one is canceled, none is sent. */
static void test_abort_queued(void **state)
{
	struct duo d;
	const uint32_t n = 300;

	(void)state;
	duo_init(&d, NULL);
	duo_connect(&d);
	d.cli.total = n;
	for (uint32_t k = 0; k < n; k++)
		assert_int_equal(end_send(&d.cli), 0);
	assert_int_equal(evr_conn_close(d.cli.c, EVR_CLOSE_ABORT), 0);
	assert_int_equal(evr_conn_close(d.cli.c, 0), -EALREADY);
	assert_int_equal(d.cli.ncb, 0);
	assert_int_equal(rt_run_until(d.loop, duo_closed, &d, 20), 0);
	end_assert_once(&d.cli);
	assert_int_equal(d.cli.cb_canceled, n);
	assert_int_equal(d.cli.close_status, -ECANCELED);
	assert_int_equal(d.srv.close_status, -ECONNRESET);
	assert_int_equal(d.srv.next_recv, 0);
	duo_fini(&d);
}

/* ------------------------------------------------------------------------ */
/* evr_conn_close from inside callbacks                                     */

struct incb {
	const char *name;
	bool server_closes;
	bool on_recv; /* else from a send callback */
	unsigned flags;
};

static void run_close_in_cb(const struct incb *t)
{
	const uint32_t n = 400, at = 150;
	struct duo d;
	struct end *closer, *other;

	duo_init(&d, NULL);
	duo_connect(&d);
	closer = t->server_closes ? &d.srv : &d.cli;
	other = t->server_closes ? &d.cli : &d.srv;
	/* both ends stream; the closer closes at its message `at` */
	d.cli.window = d.srv.window = 32;
	d.cli.total = d.srv.total = n;
	closer->close_flags = t->flags;
	if (t->on_recv)
		closer->close_on_recv = (int)at;
	else
		closer->close_on_sent = (int)at;
	end_pump(&d.cli);
	end_pump(&d.srv);
	assert_int_equal(rt_run_until(d.loop, duo_closed, &d, 30), 0);
	printf("# close %s: closer %u sent, %u ok; other %u sent, %u ok, "
	       "closes %s / %s\n",
	       t->name, closer->sent, closer->cb_ok, other->sent, other->cb_ok,
	       evr_err_name(closer->close_status),
	       evr_err_name(other->close_status));
	assert_true(closer->close_called);
	assert_int_equal(closer->close_rc, 0);
	assert_int_equal(closer->close2_rc, -EALREADY);
	assert_int_equal(closer->send_rc_after_close, -EPIPE);
	end_assert_once(closer);
	end_assert_once(other);
	assert_int_equal(closer->closes, 1);
	assert_int_equal(other->closes, 1);
	assert_int_equal(other->close_status, (t->flags & EVR_CLOSE_ABORT)
						      ? -ECONNRESET
						      : -ESHUTDOWN);
	assert_int_equal(closer->recv_after_abort, 0);
	if (t->flags & EVR_CLOSE_ABORT) {
		assert_int_equal(closer->close_status, -ECANCELED);
		assert_int_equal(closer->cb_err, closer->cb_canceled);
	} else {
		/* everything the closer had sent arrives */
		assert_int_equal(closer->close_status, 0);
		assert_int_equal(closer->cb_err, 0);
		assert_int_equal(other->next_recv, closer->sent);
	}
	if (t->on_recv)
		assert_int_equal(closer->next_recv >= at + 1, 1);
	else
		assert_true(closer->sent > at);
	duo_fini(&d);
}

static void test_close_in_callbacks(void **state)
{
	static const struct incb cases[] = {
	    {"in on_recv, client", false, true, 0},
	    {"in on_recv, server", true, true, 0},
	    {"in on_recv, abort", false, true, EVR_CLOSE_ABORT},
	    {"in a send callback, client", false, false, 0},
	    {"in a send callback, server", true, false, 0},
	    {"in a send callback, abort", true, false, EVR_CLOSE_ABORT},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		run_close_in_cb(&cases[i]);
}

static void test_close_args(void **state)
{
	struct duo d;

	(void)state;
	duo_init(&d, NULL);
	duo_connect(&d);
	assert_int_equal(evr_conn_close(NULL, 0), -EINVAL);
	assert_int_equal(evr_conn_close(d.cli.c, 0x80), -EINVAL);
	assert_int_equal(evr_conn_close(d.srv.c, 0), 0);
	assert_int_equal(evr_conn_close(d.srv.c, 0), -EALREADY);
	assert_int_equal(evr_conn_close(d.srv.c, EVR_CLOSE_ABORT), -EALREADY);
	assert_int_equal(rt_run_until(d.loop, duo_closed, &d, 20), 0);
	assert_int_equal(d.srv.closes, 1);
	assert_int_equal(d.srv.close_status, 0);
	assert_int_equal(d.cli.closes, 1);
	assert_int_equal(d.cli.close_status, -ESHUTDOWN);
	duo_fini(&d);
}

/* ------------------------------------------------------------------------ */
/* Closing a connection that is still connecting                            */

struct state_wait {
	evr_conn *c;
	struct end *e;
	const char *state;
};

static int reached(void *arg)
{
	struct state_wait *w = arg;
	struct evr_conn_info info;

	if (w->e->connects)
		return 1;
	return evr_conn_info(w->c, &info) == 0 &&
	       strcmp(info.state, w->state) == 0;
}

static int server_settled(void *arg)
{
	struct duo *d = arg;

	/* the request failed to be accepted (no callback then), or the
	 * server end failed to connect, or came and went */
	return d->accepts &&
	       (d->accept_rc ||
		(d->srv.connects && (d->srv.connect_status || d->srv.closes)));
}

/*
 * Run the loop, never blocking, until pred(arg) or `seconds` pass.  A
 * callback the library fires from its prepare watcher (for work submitted
 * from outside the loop, with no fd activity to follow, as when a conn
 * that has no QP yet is closed) comes just before the loop sleeps, so
 * rt_run_until, which looks after the wakeup, would see it only at the
 * next unrelated event.
 */
static int spin_until(struct ev_loop *loop, int (*pred)(void *), void *arg,
		      double seconds)
{
	double t0 = rt_now();

	while (!pred(arg)) {
		if (rt_now() - t0 > seconds)
			return -1;
		ev_run(loop, EVRUN_NOWAIT);
	}
	return 0;
}

/*
 * A shim over librdmacm's rdma_get_cm_event, for test_close_connecting:
 * with hold_route set, the call after one that returned an
 * ADDR_RESOLVED event says EAGAIN, so the library's event handler returns
 * to the loop between the address event and the route event -- which it
 * would otherwise take in the same batch whenever the kernel is quicker
 * than the handler (always under valgrind).  The route event stays in the
 * channel, whose fd stays readable: the next loop iteration takes it.
 * The program's own definition interposes the library's (librdmacm is a
 * shared library the test links against); RTLD_NEXT is the real one.
 */
static bool hold_route;

int rdma_get_cm_event(struct rdma_event_channel *ch,
		      struct rdma_cm_event **event)
{
	static int (*real)(struct rdma_event_channel *,
			   struct rdma_cm_event **);
	static bool held;
	int rc;

	if (!real) {
		*(void **)&real = dlsym(RTLD_NEXT, "rdma_get_cm_event");
		assert_non_null(real);
	}
	if (held) {
		held = false;
		errno = EAGAIN;
		return -1;
	}
	rc = real(ch, event);
	if (rc == 0 && hold_route &&
	    (*event)->event == RDMA_CM_EVENT_ADDR_RESOLVED)
		held = true;
	return rc;
}

/* The cases of test_close_connecting. */
struct connecting_case {
	const char *state; /* close once the conn is in it */
	bool nobody;	   /* to an address where no host answers */
	bool hold_route;   /* the shim above keeps the route event back */
};

/*
 * Connect, queue five sends and close the conn as soon as it is in the
 * case's state; check what every callback says.  Returns false, after
 * cleaning up, when the conn got past the state before the loop returned
 * to us.
 */
static bool close_connecting_once(const struct connecting_case *k)
{
	struct duo d;
	struct evr_ctx_opts so;
	struct evr_conn_opts o;
	struct state_wait w;
	evr_conn *c;
	double t0;

	rt_ctx_opts(&so);
	so.connect_timeout_ms = 2000;
	duo_init(&d, &so);
	hold_route = k->hold_route;
	end_opts(&d.cli, &o);
	assert_int_equal(evr_connect(d.cctx, k->nobody ? NOBODY : rt_addr(),
				     evr_listener_port(d.l), &o, &c),
			 0);
	/* sends queued before the connection */
	d.cli.c = c;
	d.cli.total = 5;
	for (int i = 0; i < 5; i++)
		assert_int_equal(end_send(&d.cli), 0);
	w = (struct state_wait){c, &d.cli, k->state};
	while (!reached(&w))
		ev_run(d.loop, EVRUN_ONCE);
	hold_route = false;
	if (d.cli.connects) {
		/* it got through before we could catch the state */
		duo_fini(&d);
		return false;
	}
	t0 = rt_now();
	assert_int_equal(evr_conn_close(c, 0), 0);
	assert_int_equal(evr_conn_close(c, 0), -EALREADY);
	assert_int_equal(d.cli.connects, 0);
	assert_int_equal(spin_until(d.loop, duo_cli_connected, &d, 10), 0);
	printf("# close while %s%s: on_connect %s after %.2f s\n", k->state,
	       k->nobody ? " (nobody there)" : "",
	       evr_err_name(d.cli.connect_status), rt_now() - t0);
	assert_int_equal(d.cli.connect_status, -ECANCELED);
	assert_true(rt_now() - t0 < 5);
	/* a request that reached the server ends there too */
	rt_run_for(d.loop, 0.5);
	if (d.accepts)
		assert_int_equal(rt_run_until(d.loop, server_settled, &d, 10),
				 0);
	printf("#   server end: %d request(s), accept %s, %d "
	       "on_connect (%s), %d on_close\n",
	       d.accepts, evr_err_name(d.accept_rc), d.srv.connects,
	       evr_err_name(d.srv.connect_status), d.srv.closes);
	assert_int_equal(d.cli.connects, 1);
	assert_int_equal(d.cli.closes, 0);
	/* the queued sends are canceled, each once */
	end_assert_once(&d.cli);
	assert_int_equal(d.cli.cb_canceled, 5);
	assert_true(d.accepts <= 1);
	assert_true(d.srv.connects <= 1);
	assert_true(d.srv.closes <= 1);
	if (d.accept_rc) /* a failed call fires no callback */
		assert_int_equal(d.srv.connects, 0);
	assert_int_equal(d.srv.events_after_end, 0);
	if (d.srv.connects && d.srv.connect_status == 0)
		assert_int_equal(d.srv.closes, 1);
	duo_fini(&d);
	return true;
}

/*
 * Tries per case.  "resolving-addr" is caught every time (evr_connect
 * returns in it) and "connecting" too (the server's answer needs a loop
 * iteration of its own); "resolving-route" lasts from the address event
 * to the route event, which the kernel may queue before the library's
 * event handler returns: the rdma_get_cm_event shim above holds the route
 * event back for one loop iteration, so that one is caught every time too.
 * A state not caught in 20 tries fails the test, naming it.
 */
#define CONNECTING_TRIES 20

static void test_close_connecting(void **state)
{
	static const struct connecting_case cases[] = {
	    {"resolving-addr", false, false},
	    {"resolving-route", false, true},
	    {"connecting", false, false},
	    {"connecting", true, false},
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int tries = 0;

		while (!close_connecting_once(&cases[i]))
			if (++tries == CONNECTING_TRIES)
				fail_msg("close while %s%s: never caught the "
					 "state in %d tries",
					 cases[i].state,
					 cases[i].nobody ? " (nobody there)"
							 : "",
					 tries);
		printf("#   (caught %s after %d miss(es))\n", cases[i].state,
		       tries);
	}
}

/* ------------------------------------------------------------------------ */
/* Destroying a ctx with connections open                                   */

static int destroy_ready(void *arg)
{
	struct duo *d = arg;

	/* the client is stalled: its receiver holds everything (with a
	 * shared receive queue, after the 6 data credits of its first
	 * window: held buffers are not re-posted, so it does not grow) */
	return d->srv.next_recv >= 5 && d->cli.next_recv >= 5;
}

static int srv_closed(void *arg)
{
	struct duo *d = arg;

	return d->srv.closes && d->srv.ncb == d->srv.sent;
}

static void test_ctx_destroy(void **state)
{
	struct duo d;
	struct end nobody;
	struct evr_conn_opts o;
	uint32_t before_ok, before_err, srv_cb_at_destroy;
	double t0;

	(void)state;
	duo_init(&d, NULL);
	end_init(&nobody, 3);
	duo_connect(&d);
	/* Both ends hold all they get, so the sends of both back up, eager
	 * and rendezvous ones, and the ctx has held messages to free. */
	d.srv.hold = d.cli.hold = true;
	d.cli.total = 2000;
	for (uint32_t k = 0; k < 2000; k++)
		assert_int_equal(end_send(&d.cli), 0);
	d.srv.window = 16;
	d.srv.total = MAX_SEQ;
	end_pump(&d.srv);
	/* a connect that is still going on */
	end_opts(&nobody, &o);
	assert_int_equal(evr_connect(d.cctx, NOBODY, 7471, &o, NULL), 0);
	assert_int_equal(rt_run_until(d.loop, destroy_ready, &d, 20), 0);

	before_ok = d.cli.cb_ok;
	before_err = d.cli.cb_err;
	srv_cb_at_destroy = d.srv.ncb;
	assert_int_equal(before_err, 0);
	assert_true(before_ok < 2000);
	assert_int_equal(nobody.connects, 0);
	evr_ctx_destroy(d.cctx);
	d.cctx = NULL;
	/* every pending callback fired, inside the call, once */
	printf("# ctx destroyed with %u of 2000 sends done: %u canceled\n",
	       before_ok, d.cli.cb_canceled);
	end_assert_once(&d.cli);
	assert_int_equal(d.cli.cb_ok, before_ok);
	assert_int_equal(d.cli.cb_canceled, 2000 - before_ok);
	assert_int_equal(d.cli.closes, 1);
	assert_int_equal(d.cli.close_status, -ECANCELED);
	assert_int_equal(nobody.connects, 1);
	assert_int_equal(nobody.connect_status, -ECANCELED);
	assert_int_equal(nobody.closes, 0);
	assert_int_equal(nobody.events_after_end, 0);

	/* the server end learns of it */
	t0 = rt_now();
	assert_int_equal(rt_run_until(d.loop, srv_closed, &d, 20), 0);
	printf("# the peer saw %s after %.2f s\n",
	       evr_err_name(d.srv.close_status), rt_now() - t0);
	assert_int_equal(d.srv.close_status, -ECONNRESET);
	end_assert_once(&d.srv);
	assert_true(d.srv.ncb >= srv_cb_at_destroy);
	duo_fini(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_reject),
	    cmocka_unit_test(test_unanswered),
	    cmocka_unit_test(test_user_data),
	    cmocka_unit_test(test_no_listener),
	    cmocka_unit_test(test_connect_timeout),
	    cmocka_unit_test(test_close_midstream),
	    cmocka_unit_test(test_abort_queued),
	    cmocka_unit_test(test_close_in_callbacks),
	    cmocka_unit_test(test_close_args),
	    cmocka_unit_test(test_close_connecting),
	    cmocka_unit_test(test_ctx_destroy),
	};

	rt_init(170);
	return cmocka_run_group_tests_name("rdma_conn", tests, NULL, NULL);
}
