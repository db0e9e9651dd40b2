/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Calls (evr_call: request/response with deadlines and cancellation) end
 * to end on a real verbs stack, through the public API only.  Every case
 * runs on both driving paths: on a libev loop, and embedded in an epoll
 * host loop that sleeps as evr_ctx_timeout_ms() says (rt_drive.h) -- a
 * call's deadline is a timer no fd announces.
 *
 *  - calls answered at once, every size class around the eager limit of a
 *    call (the eager size less the 4 bytes of the call id) and rendezvous
 *    sizes up to 1 MiB both ways, 0-byte requests and replies included:
 *    each callback fires once with 0 and the reply's bytes, and the
 *    statistics count what happened;
 *  - replies without a callback, one call at a time: the small ones go
 *    the direct way (direct_sends), the others through the queue, and
 *    every call gets its own reply once;
 *  - a deadline that expires while the server holds the request: -ETIMEDOUT
 *    once, not early; the late answer is refused (-ECANCELED) or counted
 *    and dropped at the client (late_replies), never delivered;
 *  - a server that drops the request: -ETIMEDOUT; timeout 0 is no deadline;
 *  - evr_call_cancel of a call whose request the server holds: -ECANCELED
 *    once, a second cancel is -ENOENT, the server's answer -ECANCELED;
 *  - cancel during a rendezvous request, at every point of its exchange
 *    (the client on a ctx of its own, each end stepped alone): the request
 *    buffer is overwritten in the callback, and the server sees the whole
 *    original request or nothing;
 *  - the end of the connection with calls in flight (either end aborts, or
 *    the server closes): every callback once, with the connection's error,
 *    before on_close; the server's held handles then -ENOTCONN;
 *  - plain messages and calls interleaved keep their order;
 *  - -EOPNOTSUPP without on_request at the accepting end (a request that
 *    comes to an end without one is dropped and counted), -ENOBUFS at
 *    max_calls and on_drain after a call ended, the argument checks, and
 *    evr_reply's errors, which spend the handle too;
 *  - evr_conn_hold in the call's callback keeps the reply, in on_request
 *    the request, past more traffic.
 *
 * Both ends of a pair are on one ctx (but in the rendezvous cancel case,
 * whose two ctxs' counts are summed), so its statistics are the sum of
 * the client's (calls, calls_ok, ..., late_replies) and the server's
 * (requests, requests_cancelled, requests_unserved); the tests compare
 * differences from right after the connect.
 */
#include "rt_drive.h"

#include <stdbool.h>

#define EAGER_DEFAULT 8192
#define CALL_EAGER    (EAGER_DEFAULT - 4) /* the call id takes 4 bytes */
#define KIB	      ((size_t)1024)
#define MIB	      (1024 * KIB)
#define CT_MAX	      160
#define LONG_MS	      30000u /* a deadline that must not expire */
#define SHORT_MS      150u   /* one that must (times the time scale) */

/* The patterns: request seq, its reply, what the client writes over a
 * request once its callback fired. */
#define REP_SEQ(seq)	((seq) + 0x10000u)
#define POISON_SEQ(seq) ((seq) + 0x20000u)

/* What the server does with a request when it comes. */
enum how {
	SRV_ANSWER, /* evr_reply from on_request */
	SRV_HOLD,   /* keep the handle; the test answers later, or never */
	SRV_DROP,   /* evr_request_drop from on_request */
};

struct ct;

struct call {
	struct ct *t;
	struct rt_side *side; /* the end that made it */
	uint32_t seq; /* pattern of the request (of the reply: REP_SEQ) */
	uint8_t *req;
	size_t req_len, rep_len;
	enum how how;
	unsigned timeout_ms;
	evr_call_id id;
	double t0, t1; /* made, ended */
	/* the caller's view */
	int fired, status;
	size_t got_len;
	int bad;	   /* the reply had the wrong length or bytes */
	bool in_cancel;	   /* fired from inside evr_call_cancel */
	const void *reply; /* the pointer the callback got */
	evr_msg *rep_msg;  /* the reply, held */
	/* the server's view */
	int delivered;
	int arrival;	/* place among all the server received */
	evr_request *r; /* held handle; NULL once spent */
	const void *req_data;
	evr_msg *req_msg;	 /* the request, held */
	uint8_t *rep;		 /* the reply's buffer */
	int rep_rc;		 /* what evr_reply returned */
	int rep_cbs, rep_status; /* its callback */
};

/* A plain message (the interleaving case). */
struct pmsg {
	struct ct *t;
	uint32_t seq;
	uint8_t *buf;
	size_t len;
	int arrival, got, sent_ok, sent_err;
};

struct ct {
	struct rt_drv d; /* drives the server's ctx, p.ctx */
	struct rt_pair p;
	/* split: the client on a ctx of its own, p.cctx, on a loop of its
	 * own (cloop) or embedded, so that each end can be stepped alone */
	bool split;
	struct ev_loop *cloop;
	struct evr_stats st0; /* right after the connect */
	enum how how;	      /* for the calls made next */
	uint32_t next_seq;    /* of calls and messages, in the order made */
	struct call calls[CT_MAX];
	int ncalls, fired;
	struct pmsg msgs[CT_MAX];
	int nmsgs, msg_next;
	/* the server */
	int srv_next; /* calls before it were delivered or skipped */
	int ndelivered, arrivals;
	int srv_bad; /* a request or message that matches none sent */
	int rep_cbs;
	/* a callback that fired where none may: inside evr_call, after
	 * on_close, on another conn */
	int api_bad;
	bool in_call, in_cancel;
	bool poison;   /* overwrite a request in its callback */
	bool hold_rep; /* evr_conn_hold in the call's callback */
	bool hold_req; /* evr_conn_hold in on_request */
	bool quiet_rep; /* evr_reply without a callback */
	int drains, fired_at_drain;
	int want; /* what the wait predicates wait for */
	/* run_cancel_rndv: cancel victim from a callback of trig: its
	 * on_request (trig_srv) or its call's callback */
	struct call *trig, *victim;
	bool trig_srv, trig_done;
	int trig_rc;
};

/* ------------------------------------------------------------------------ */
/* The pair, its callbacks and waits                                        */

static void ct_trigger(struct ct *t);

static unsigned short_ms(void)
{
	return (unsigned)(SHORT_MS * rt_timeout_scale());
}

/* A reply's send ended. */
static void ct_reply_done(evr_conn *c, int status, void *arg)
{
	struct call *k = arg;

	(void)c;
	k->rep_cbs++;
	k->rep_status = status;
	k->t->rep_cbs++;
}

/* Answer k (the server holds it): REP_SEQ of its seq, rep_len bytes.
 * Returns what evr_reply returned; the handle is spent either way. */
static int ct_answer(struct ct *t, struct call *k)
{
	int rc;

	assert_non_null(k->r);
	free(k->rep);
	k->rep = malloc(k->rep_len ? k->rep_len : 1);
	assert_non_null(k->rep);
	rt_fill(k->rep, k->rep_len, REP_SEQ(k->seq));
	rc = evr_reply(k->r, k->rep, k->rep_len,
		       t->quiet_rep ? NULL : ct_reply_done, k);
	k->rep_rc = rc;
	k->r = NULL;
	return rc;
}

/* The call a request is: the first one not delivered yet, from
 * srv_next on, whose length and bytes it has (calls whose requests were
 * not delivered are skipped).  NULL: it is none of them. */
static struct call *ct_match(struct ct *t, const void *data, size_t len)
{
	for (int j = t->srv_next; j < t->ncalls; j++) {
		struct call *k = &t->calls[j];

		if (k->side != &t->p.cli || k->delivered || k->req_len != len)
			continue;
		if (rt_verify(data, len, k->seq) >= 0)
			continue;
		t->srv_next = j + 1;
		return k;
	}
	return NULL;
}

static void ct_on_request(evr_conn *c, evr_request *r, const void *data,
			  size_t len, void *arg)
{
	struct ct *t = ((struct rt_side *)arg)->user;
	struct call *k = ct_match(t, data, len);

	if (c != t->p.srv.conn || evr_request_conn(r) != c)
		t->api_bad++;
	if (!k) {
		t->srv_bad++;
		evr_request_drop(r);
		return;
	}
	k->delivered++;
	k->arrival = t->arrivals++;
	k->r = r;
	k->req_data = data;
	t->ndelivered++;
	if (t->hold_req) {
		k->req_msg = evr_conn_hold(c);
		if (!k->req_msg || evr_msg_data(k->req_msg) != data ||
		    evr_msg_len(k->req_msg) != len)
			k->bad++;
	}
	switch (k->how) {
	case SRV_ANSWER:
		ct_answer(t, k);
		break;
	case SRV_DROP:
		evr_request_drop(r);
		k->r = NULL;
		break;
	case SRV_HOLD:
		break;
	}
	if (t->trig == k && t->trig_srv)
		ct_trigger(t);
}

static void ct_call_cb(evr_conn *c, int status, const void *reply, size_t len,
		       void *arg)
{
	struct call *k = arg;
	struct ct *t = k->t;

	k->fired++;
	t->fired++;
	k->status = status;
	k->got_len = len;
	k->reply = reply;
	k->t1 = rt_now();
	k->in_cancel = t->in_cancel;
	/* never from inside evr_call; on the conn it was made on, before
	 * that conn's on_close */
	if (t->in_call || c != k->side->conn || k->side->closes)
		t->api_bad++;
	if (status == 0) {
		if (len != k->rep_len ||
		    rt_verify(reply, len, REP_SEQ(k->seq)) >= 0)
			k->bad++;
		if (t->hold_rep) {
			k->rep_msg = evr_conn_hold(c);
			if (!k->rep_msg || evr_msg_data(k->rep_msg) != reply ||
			    evr_msg_len(k->rep_msg) != len)
				k->bad++;
		}
	}
	/* the buffer is the caller's again: a read of it from now on would
	 * hand the server other bytes */
	if (t->poison)
		rt_fill(k->req, k->req_len, POISON_SEQ(k->seq));
	if (t->trig == k && !t->trig_srv)
		ct_trigger(t);
}

static void ct_drain(evr_conn *c, void *arg)
{
	struct ct *t = ((struct rt_side *)arg)->user;

	(void)c;
	if (t->in_call)
		t->api_bad++;
	t->drains++;
	t->fired_at_drain = t->fired;
}

/* A plain message arrived at the server: the next one sent. */
static void ct_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct ct *t = ((struct rt_side *)arg)->user;
	struct pmsg *m;

	(void)c;
	if (t->msg_next >= t->nmsgs) {
		t->srv_bad++;
		return;
	}
	m = &t->msgs[t->msg_next++];
	m->got++;
	m->arrival = t->arrivals++;
	if (len != m->len || rt_verify(data, len, m->seq) >= 0)
		t->srv_bad++;
}

static void ct_msg_sent(evr_conn *c, int status, void *arg)
{
	struct pmsg *m = arg;

	(void)c;
	if (status == 0)
		m->sent_ok++;
	else
		m->sent_err++;
}

static struct ct *ct_new2(enum rt_path path, const struct evr_ctx_opts *o,
			  bool split)
{
	struct ct *t = calloc(1, sizeof(*t));
	struct evr_ctx_opts co;

	assert_non_null(t);
	rt_drv_init(&t->d, path);
	rt_pair_init(&t->p, rt_drv_loop(&t->d), o);
	rt_drv_attach(&t->d, t->p.ctx);
	if (split) {
		struct epoll_event ev = {.events = EPOLLIN};

		t->split = true;
		if (path == RT_LIBEV) {
			t->cloop = ev_loop_new(EVFLAG_AUTO);
			assert_non_null(t->cloop);
		}
		rt_ctx_opts(&co);
		assert_int_equal(evr_ctx_create(&t->p.cctx, t->cloop, &co), 0);
		if (path == RT_EMBED) {
			/* the host loop wakes for either end */
			ev.data.fd = evr_ctx_fd(t->p.cctx);
			assert_true(ev.data.fd >= 0);
			assert_int_equal(
			    epoll_ctl(t->d.ep, EPOLL_CTL_ADD, ev.data.fd, &ev),
			    0);
		}
	}
	t->p.cli.user = t->p.srv.user = t;
	t->p.srv_opts.on_request = ct_on_request;
	t->p.srv_opts.on_recv = ct_srv_recv;
	t->p.cli_opts.on_drain = ct_drain;
	t->p.srv_opts.on_drain = ct_drain;
	return t;
}

static struct ct *ct_new(enum rt_path path, const struct evr_ctx_opts *o)
{
	return ct_new2(path, o, false);
}

/* One iteration of an end's loop that does not wait (split). */
static void ct_step_srv(struct ct *t)
{
	if (t->d.path == RT_LIBEV)
		ev_run(t->d.loop, EVRUN_NOWAIT);
	else
		assert_int_equal(evr_ctx_process(t->p.ctx), 0);
}

static void ct_step_cli(struct ct *t)
{
	if (t->d.path == RT_LIBEV)
		ev_run(t->cloop, EVRUN_NOWAIT);
	else
		assert_int_equal(evr_ctx_process(t->p.cctx), 0);
}

/* Both ends of a split pair, by turns, until pred holds or `seconds`
 * pass.  Embedded, the host loop sleeps as both ctxs' timeouts say;
 * two libev loops cannot wait together, so they take turns without
 * waiting. */
static int split_run_until(struct ct *t, int (*pred)(void *), void *arg,
			   double seconds)
{
	double end = rt_now() + seconds;

	while (!pred(arg) && rt_now() < end) {
		if (t->d.path == RT_EMBED) {
			struct epoll_event ev;
			int a = evr_ctx_timeout_ms(t->p.ctx);
			int b = evr_ctx_timeout_ms(t->p.cctx);
			int w = a < 0 ? b : b < 0 || a < b ? a : b;
			int cap = (int)((end - rt_now()) * 1000.0) + 1;

			if (w < 0 || w > cap)
				w = cap;
			if (epoll_wait(t->d.ep, &ev, 1, w) < 0)
				assert_int_equal(errno, EINTR);
		}
		ct_step_cli(t);
		if (pred(arg))
			break;
		ct_step_srv(t);
	}
	return pred(arg) ? 0 : -1;
}

/* rt_drv_run_until_exact, for either kind of pair. */
static int ct_run_until_exact(struct ct *t, int (*pred)(void *), void *arg,
			      double seconds)
{
	if (t->split)
		return split_run_until(t, pred, arg, seconds);
	return rt_drv_run_until_exact(&t->d, pred, arg, seconds);
}

/* rt_drv_run_until (EVR_TEST_TIMEOUT_SCALE applies). */
static int ct_run_until(struct ct *t, int (*pred)(void *), void *arg,
			double seconds)
{
	return ct_run_until_exact(t, pred, arg, seconds * rt_timeout_scale());
}

/* rt_drv_run_for. */
static void ct_run_for(struct ct *t, double seconds)
{
	(void)ct_run_until_exact(t, rt_never, NULL, seconds);
}

/* The call statistics and the rendezvous counts of both ends. */
static void ct_stats(const struct ct *t, struct evr_stats *s)
{
	struct evr_stats c;

	evr_ctx_stats(t->p.ctx, s);
	if (!t->p.cctx)
		return;
	evr_ctx_stats(t->p.cctx, &c);
	s->calls += c.calls;
	s->calls_ok += c.calls_ok;
	s->calls_expired += c.calls_expired;
	s->calls_cancelled += c.calls_cancelled;
	s->late_replies += c.late_replies;
	s->requests += c.requests;
	s->requests_cancelled += c.requests_cancelled;
	s->requests_unserved += c.requests_unserved;
	s->rndv_sent += c.rndv_sent;
	s->rndv_recv += c.rndv_recv;
}

static void ct_connect(struct ct *t)
{
	assert_int_equal(evr_connect(rt_pair_cli_ctx(&t->p), rt_addr(),
				     evr_listener_port(t->p.l), &t->p.cli_opts,
				     NULL),
			 0);
	assert_int_equal(ct_run_until(t, rt_pair_up_pred, &t->p, 20), 0);
	assert_int_equal(t->p.cli.connect_status, 0);
	assert_int_equal(t->p.srv.connect_status, 0);
	assert_non_null(t->p.cli.conn);
	assert_non_null(t->p.srv.conn);
	ct_stats(t, &t->st0);
}

static int ct_closed(void *arg);

/* The close the tests end with: the client's graceful one. */
static void ct_close(struct ct *t)
{
	if (t->p.cli.conn)
		assert_int_equal(evr_conn_close(t->p.cli.conn, 0), 0);
	assert_int_equal(ct_run_until(t, ct_closed, t, 20), 0);
	assert_int_equal(t->p.cli.closes, 1);
	assert_int_equal(t->p.srv.closes, 1);
	assert_int_equal(t->p.cli.close_status, 0);
	assert_int_equal(t->p.srv.close_status, -ESHUTDOWN);
}

static void ct_free(struct ct *t)
{
	if (t->split && t->d.path == RT_EMBED)
		assert_int_equal(epoll_ctl(t->d.ep, EPOLL_CTL_DEL,
					   evr_ctx_fd(t->p.cctx), NULL),
				 0);
	rt_drv_pair_fini(&t->d, &t->p);
	if (t->cloop)
		ev_loop_destroy(t->cloop);
	rt_drv_fini(&t->d);
	for (int i = 0; i < t->ncalls; i++) {
		struct call *k = &t->calls[i];

		assert_null(k->rep_msg);
		assert_null(k->req_msg);
		free(k->req);
		free(k->rep);
	}
	for (int i = 0; i < t->nmsgs; i++)
		free(t->msgs[i].buf);
	free(t);
}

/* The call statistics (and the rendezvous counts) since the connect. */
static void ct_delta(const struct ct *t, struct evr_stats *d)
{
	struct evr_stats s;

	ct_stats(t, &s);
	memset(d, 0, sizeof(*d));
	d->calls = s.calls - t->st0.calls;
	d->calls_ok = s.calls_ok - t->st0.calls_ok;
	d->calls_expired = s.calls_expired - t->st0.calls_expired;
	d->calls_cancelled = s.calls_cancelled - t->st0.calls_cancelled;
	d->late_replies = s.late_replies - t->st0.late_replies;
	d->requests = s.requests - t->st0.requests;
	d->requests_cancelled =
	    s.requests_cancelled - t->st0.requests_cancelled;
	d->requests_unserved = s.requests_unserved - t->st0.requests_unserved;
	d->rndv_sent = s.rndv_sent - t->st0.rndv_sent;
	d->rndv_recv = s.rndv_recv - t->st0.rndv_recv;
}

/*
 * Make a call from side s: a request of req_len bytes (pattern seq, the
 * next of the run; NULL for 0 bytes), rep_len bytes expected back, the
 * server to treat it as t->how says.  Returns evr_call's return; on an
 * error the entry is taken back (its callback must never fire).
 */
static int ct_call_from(struct ct *t, struct rt_side *s, size_t req_len,
			size_t rep_len, unsigned ms, struct call **out)
{
	struct call *k;
	int rc;

	assert_true(t->ncalls < CT_MAX);
	k = &t->calls[t->ncalls];
	memset(k, 0, sizeof(*k));
	k->t = t;
	k->side = s;
	k->seq = t->next_seq;
	k->req_len = req_len;
	k->rep_len = rep_len;
	k->how = t->how;
	k->timeout_ms = ms;
	k->req = malloc(req_len ? req_len : 1);
	assert_non_null(k->req);
	rt_fill(k->req, req_len, k->seq);
	k->t0 = rt_now();
	t->in_call = true;
	rc = evr_call(s->conn, req_len ? k->req : NULL, req_len, ms, ct_call_cb,
		      k, &k->id);
	t->in_call = false;
	if (rc) {
		free(k->req);
		memset(k, 0, sizeof(*k));
		return rc;
	}
	assert_int_not_equal(k->id, 0);
	t->next_seq++;
	t->ncalls++;
	if (out)
		*out = k;
	return 0;
}

/* A call from the client that evr_call must take. */
static struct call *ct_call(struct ct *t, size_t req_len, size_t rep_len,
			    unsigned ms)
{
	struct call *k = NULL;

	assert_int_equal(ct_call_from(t, &t->p.cli, req_len, rep_len, ms, &k),
			 0);
	return k;
}

/* Send a plain message of len bytes from the client (pattern: the next
 * seq of the run). */
static void ct_send(struct ct *t, size_t len)
{
	struct pmsg *m;

	assert_true(t->nmsgs < CT_MAX);
	m = &t->msgs[t->nmsgs++];
	m->t = t;
	m->seq = t->next_seq++;
	m->len = len;
	m->buf = malloc(len ? len : 1);
	assert_non_null(m->buf);
	rt_fill(m->buf, len, m->seq);
	assert_int_equal(evr_send(t->p.cli.conn, m->buf, len, ct_msg_sent, m),
			 0);
}

static int ct_cancel(struct ct *t, const struct call *k)
{
	int rc;

	t->in_cancel = true;
	rc = evr_call_cancel(k->side->conn, k->id);
	t->in_cancel = false;
	return rc;
}

static int ct_fired(void *arg)
{
	struct ct *t = arg;

	return t->fired >= t->want;
}

static int ct_delivered(void *arg)
{
	struct ct *t = arg;

	return t->ndelivered >= t->want;
}

static int ct_replied(void *arg)
{
	struct ct *t = arg;

	return t->rep_cbs >= t->want;
}

static int ct_drained(void *arg)
{
	struct ct *t = arg;

	return t->drains >= t->want;
}

/* Every message sent arrived and its send ended. */
static int ct_msgs_done(void *arg)
{
	struct ct *t = arg;

	for (int i = 0; i < t->nmsgs; i++)
		if (!t->msgs[i].got ||
		    !(t->msgs[i].sent_ok + t->msgs[i].sent_err))
			return 0;
	return 1;
}

static int ct_closed(void *arg)
{
	struct ct *t = arg;

	return rt_pair_closed_pred(&t->p);
}

static int ct_req_cancelled(void *arg)
{
	struct ct *t = arg;
	struct evr_stats d;

	ct_delta(t, &d);
	return d.requests_cancelled >= (uint64_t)t->want;
}

static int ct_late(void *arg)
{
	struct ct *t = arg;
	struct evr_stats d;

	ct_delta(t, &d);
	return d.late_replies >= (uint64_t)t->want;
}

/* Run until pred holds with t->want = want; fails the test after
 * `seconds` (times the scale). */
static void ct_wait(struct ct *t, int (*pred)(void *), int want, double seconds)
{
	t->want = want;
	assert_int_equal(ct_run_until(t, pred, t, seconds), 0);
}

/* Run the loop a little: a callback that fires twice, or a late one,
 * shows up by then. */
static void ct_settle(struct ct *t)
{
	ct_run_for(t, 0.1 * rt_timeout_scale());
}

/* k ended once, with status 0 and the reply it was owed. */
static void ct_assert_ok(const struct call *k)
{
	assert_int_equal(k->fired, 1);
	assert_int_equal(k->status, 0);
	assert_int_equal(k->got_len, k->rep_len);
	assert_int_equal(k->bad, 0);
	assert_int_equal(k->delivered, 1);
	assert_int_equal(k->rep_rc, 0);
}

/* k ended once with status at its deadline, not before it. */
static void ct_assert_expired(const struct call *k)
{
	assert_int_equal(k->fired, 1);
	assert_int_equal(k->status, -ETIMEDOUT);
	/* 20 ms for a loop's cached time, taken at the start of the
	 * iteration the call was made in */
	assert_true(k->t1 - k->t0 >= k->timeout_ms / 1000.0 - 0.02);
}

/* ------------------------------------------------------------------------ */
/* Calls answered at once                                                   */

struct sz {
	size_t req, rep;
};

static const struct sz eager_sizes[] = {
    {0, 0},	     {0, 1},	      {1, 0},	    {1, 1},
    {64, 200},	     {1000, 10},      {4096, 4096}, {CALL_EAGER, CALL_EAGER},
    {CALL_EAGER, 0}, {0, CALL_EAGER},
};

static const struct sz rndv_sizes[] = {
    {CALL_EAGER + 1, 16}, {16, CALL_EAGER + 1}, {EAGER_DEFAULT, EAGER_DEFAULT},
    {64 * KIB, 64 * KIB}, {64 * KIB, 0},	{0, 64 * KIB},
    {MIB, 100},		  {100, MIB},		{MIB, MIB},
};

/*
 * All the calls at once, answered from on_request.  Each callback fires
 * once, with 0 and its own reply's bytes (every reply has a pattern of
 * its own, so one delivered to the wrong call shows); the server got
 * every request whole, once.  Exactly the requests and replies above
 * CALL_EAGER went by rendezvous.  A call that ended cannot be cancelled.
 */
static void run_answered(enum rt_path path, const struct sz *sizes, int n,
			 const char *what)
{
	struct ct *t = ct_new(path, NULL);
	struct evr_stats st;
	uint64_t nrndv = 0;
	double t0;

	ct_connect(t);
	t->how = SRV_ANSWER;
	t0 = rt_now();
	for (int i = 0; i < n; i++) {
		ct_call(t, sizes[i].req, sizes[i].rep, LONG_MS);
		nrndv +=
		    (sizes[i].req > CALL_EAGER) + (sizes[i].rep > CALL_EAGER);
	}
	ct_wait(t, ct_fired, n, 30);
	ct_wait(t, ct_replied, n, 30);
	printf("# %s: %d %s calls in %.1f ms\n", rt_path_name(path), n, what,
	       (rt_now() - t0) * 1e3);
	ct_settle(t);
	for (int i = 0; i < n; i++) {
		const struct call *k = &t->calls[i];

		ct_assert_ok(k);
		assert_false(k->in_cancel);
		assert_int_equal(k->rep_cbs, 1);
		assert_int_equal(k->rep_status, 0);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(k->id, t->calls[j].id);
	}
	assert_int_equal(t->fired, n);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_delta(t, &st);
	assert_int_equal(st.calls, n);
	assert_int_equal(st.calls_ok, n);
	assert_int_equal(st.calls_expired, 0);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(st.requests, n);
	assert_int_equal(st.requests_cancelled, 0);
	assert_int_equal(st.requests_unserved, 0);
	assert_int_equal(st.rndv_sent, nrndv);
	assert_int_equal(st.rndv_recv, nrndv);

	for (int i = 0; i < n; i++)
		assert_int_equal(ct_cancel(t, &t->calls[i]), -ENOENT);
	ct_settle(t);
	assert_int_equal(t->fired, n);
	ct_delta(t, &st);
	assert_int_equal(st.calls_cancelled, 0);
	ct_close(t);
	assert_int_equal(t->api_bad, 0);
	ct_free(t);
}

static void test_eager_libev(void **state)
{
	(void)state;
	run_answered(RT_LIBEV, eager_sizes,
		     sizeof(eager_sizes) / sizeof(eager_sizes[0]), "eager");
}

static void test_eager_embed(void **state)
{
	(void)state;
	run_answered(RT_EMBED, eager_sizes,
		     sizeof(eager_sizes) / sizeof(eager_sizes[0]), "eager");
}

static void test_rndv_libev(void **state)
{
	(void)state;
	run_answered(RT_LIBEV, rndv_sizes,
		     sizeof(rndv_sizes) / sizeof(rndv_sizes[0]), "rendezvous");
}

static void test_rndv_embed(void **state)
{
	(void)state;
	run_answered(RT_EMBED, rndv_sizes,
		     sizeof(rndv_sizes) / sizeof(rndv_sizes[0]), "rendezvous");
}

/*
 * Replies without a callback, answered from on_request, one call at a
 * time: a small one goes the direct way (straight to the post, inline,
 * no op; docs/architecture.md), which the sizes here test around the
 * inline limit (the library asks for 128 bytes inline, which Soft-RoCE
 * gives: 4 of call id and up to 124 of reply, with the header in
 * immediate data; 116 with it in band, EVR_IMM=off), with one byte
 * more and 1000 bytes too large for it and sent through the queue.  Every call ends once with 0 and its own
 * reply's bytes; the direct way took every small reply but those the
 * signal interval sends through the queue (one in 16 of the server's
 * WRs) and those behind a credit update; the statistics count each
 * request and reply once, without the call id.  Then a burst of calls at
 * once, whose replies may go partly the direct way, partly queued behind
 * it in the same pass.
 */
#define QR_N	 100
#define QR_BURST 12
#define QR_NSIZES 6

/* The largest reply that goes inline: 128 - the header in band (only
 * with EVR_IMM off, evrdma(7)) - the call id. */
static size_t qr_inline(void)
{
	const char *e = getenv("EVR_IMM");
	bool in_band = e && (!strcmp(e, "off") || !strcmp(e, "0"));

	return 128 - (in_band ? 8 : 0) - 4;
}

/* The reply sizes, in turn: small, around the inline limit, large. */
static size_t qr_size(int i)
{
	static const size_t fixed[QR_NSIZES] = {0, 8, 64, 0, 0, 1000};
	int k = i % QR_NSIZES;

	return k == 3 ? qr_inline() : k == 4 ? qr_inline() + 1 : fixed[k];
}

static void run_quiet_replies(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	struct evr_stats s0, s1;
	uint64_t direct, updates, small = 0, bytes = 0;

	ct_connect(t);
	t->how = SRV_ANSWER;
	t->quiet_rep = true;
	evr_ctx_stats(t->p.ctx, &s0);
	for (int i = 0; i < QR_N; i++) {
		size_t rep = qr_size(i);

		small += rep <= qr_inline();
		bytes += 16 + rep;
		ct_call(t, 16, rep, LONG_MS);
		ct_wait(t, ct_fired, i + 1, 30);
	}
	ct_settle(t);
	for (int i = 0; i < QR_N; i++) {
		ct_assert_ok(&t->calls[i]);
		assert_int_equal(t->calls[i].rep_cbs, 0);
	}
	assert_int_equal(t->fired, QR_N);
	assert_int_equal(t->rep_cbs, 0);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	evr_ctx_stats(t->p.ctx, &s1);
	direct = s1.direct_sends - s0.direct_sends;
	updates = s1.credit_updates - s0.credit_updates;
	printf("# %s: %llu of %llu small replies sent the direct way "
	       "(%llu credit updates)\n",
	       rt_path_name(path), (unsigned long long)direct,
	       (unsigned long long)small, (unsigned long long)updates);
	assert_true(direct <= small);
	assert_true(direct + QR_N / 16 + 1 + updates >= small);
	assert_int_equal(s1.calls_ok - s0.calls_ok, QR_N);
	assert_int_equal(s1.requests - s0.requests, QR_N);
	/* requests and replies, each once, counted without the call id */
	assert_int_equal(s1.msgs_sent - s0.msgs_sent, 2 * QR_N);
	assert_int_equal(s1.bytes_sent - s0.bytes_sent, bytes);

	/* QR_BURST calls at once: the server may answer the first of one
	 * pass the direct way and the rest through the queue; every reply
	 * still reaches its own call, once */
	for (int i = 0; i < QR_BURST; i++)
		ct_call(t, 16, qr_size(i), LONG_MS);
	ct_wait(t, ct_fired, QR_N + QR_BURST, 30);
	ct_settle(t);
	for (int i = QR_N; i < QR_N + QR_BURST; i++) {
		ct_assert_ok(&t->calls[i]);
		assert_int_equal(t->calls[i].rep_cbs, 0);
	}
	assert_int_equal(t->fired, QR_N + QR_BURST);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	assert_int_equal(t->api_bad, 0);
	ct_free(t);
}

static void test_quiet_replies_libev(void **state)
{
	(void)state;
	run_quiet_replies(RT_LIBEV);
}

static void test_quiet_replies_embed(void **state)
{
	(void)state;
	run_quiet_replies(RT_EMBED);
}

/* ------------------------------------------------------------------------ */
/* Deadlines                                                                */

/*
 * The server holds an eager and a rendezvous request (a 64 KiB reply
 * owed: a late rendezvous reply) past their deadlines.  Each callback
 * fires once with -ETIMEDOUT, not before the deadline.  Then the server
 * answers: the first answer at once, before the client's word that it
 * gave up may have come, the second after a while.  evr_reply says 0 (the
 * reply goes out, and the client counts it in late_replies and drops it)
 * or -ECANCELED (the client's word came first; nothing is sent); the
 * handle is spent either way.  No callback fires again, and later calls
 * on the conn get their own replies.
 */
static void run_deadline_held(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	unsigned ms = short_ms();
	struct evr_stats st;
	struct call *k[2], *after[2];
	int rc[2], late = 0, refused = 0;

	ct_connect(t);
	t->how = SRV_HOLD;
	k[0] = ct_call(t, 100, 50, ms);
	k[1] = ct_call(t, 64 * KIB, 64 * KIB, ms);
	ct_wait(t, ct_fired, 2, 10 + ms / 1000.0);
	for (int i = 0; i < 2; i++) {
		ct_assert_expired(k[i]);
		/* the server had it, and holds it still */
		assert_int_equal(k[i]->delivered, 1);
		assert_non_null(k[i]->r);
	}
	rc[0] = ct_answer(t, k[0]);
	ct_run_for(t, 0.2);
	rc[1] = ct_answer(t, k[1]);
	for (int i = 0; i < 2; i++) {
		assert_true(rc[i] == 0 || rc[i] == -ECANCELED);
		assert_null(k[i]->r);
		late += rc[i] == 0;
		refused += rc[i] == -ECANCELED;
	}
	ct_wait(t, ct_late, late, 10);
	ct_wait(t, ct_replied, late, 10);
	ct_settle(t);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(k[i]->fired, 1);
		assert_int_equal(k[i]->status, -ETIMEDOUT);
		/* the reply's send ends once; a late rendezvous one may
		 * end with the client's refusal to read it */
		assert_int_equal(k[i]->rep_cbs, rc[i] == 0);
		if (rc[i] == 0)
			assert_true(k[i]->rep_status == 0 ||
				    k[i]->rep_status == -ECANCELED);
	}
	ct_delta(t, &st);
	printf("# %s: deadline %u ms: expired after %.1f and %.1f ms; late "
	       "answers: %s then %s; %llu late replies, %llu requests "
	       "cancelled\n",
	       rt_path_name(path), ms, (k[0]->t1 - k[0]->t0) * 1e3,
	       (k[1]->t1 - k[1]->t0) * 1e3, evr_err_name(rc[0]),
	       evr_err_name(rc[1]), (unsigned long long)st.late_replies,
	       (unsigned long long)st.requests_cancelled);
	assert_int_equal(st.calls, 2);
	assert_int_equal(st.calls_expired, 2);
	assert_int_equal(st.calls_ok, 0);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, late);
	assert_int_equal(st.requests, 2);
	assert_in_range(st.requests_cancelled, refused, 2);

	/* the conn goes on; a late reply was not taken for a later call's */
	t->how = SRV_ANSWER;
	after[0] = ct_call(t, 200, 300, LONG_MS);
	after[1] = ct_call(t, 64 * KIB, 64 * KIB, LONG_MS);
	ct_wait(t, ct_fired, 4, 30);
	ct_assert_ok(after[0]);
	ct_assert_ok(after[1]);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_deadline_held_libev(void **state)
{
	(void)state;
	run_deadline_held(RT_LIBEV);
}

static void test_deadline_held_embed(void **state)
{
	(void)state;
	run_deadline_held(RT_EMBED);
}

/*
 * The server drops an eager and a rendezvous request (evr_request_drop):
 * nothing goes back, and each call ends once at its deadline with
 * -ETIMEDOUT.  A third call, with timeout 0, has no deadline: it is still
 * in flight well past the others' and ends with its reply when the server
 * answers.
 */
static void run_never_answered(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	unsigned ms = short_ms();
	struct evr_stats st;
	struct call *k[2], *nodl;

	ct_connect(t);
	t->how = SRV_DROP;
	k[0] = ct_call(t, 100, 50, ms);
	k[1] = ct_call(t, 64 * KIB, 10, ms);
	t->how = SRV_HOLD;
	nodl = ct_call(t, 100, 70, 0);
	ct_wait(t, ct_fired, 2, 10 + ms / 1000.0);
	for (int i = 0; i < 2; i++) {
		ct_assert_expired(k[i]);
		assert_int_equal(k[i]->delivered, 1);
		assert_null(k[i]->r);
	}
	ct_run_for(t, 2 * ms / 1000.0);
	assert_int_equal(nodl->fired, 0);
	assert_int_equal(nodl->delivered, 1);
	assert_int_equal(ct_answer(t, nodl), 0);
	ct_wait(t, ct_fired, 3, 10);
	ct_settle(t);
	ct_assert_ok(nodl);
	assert_int_equal(k[0]->fired, 1);
	assert_int_equal(k[1]->fired, 1);
	assert_int_equal(t->fired, 3);
	ct_delta(t, &st);
	assert_int_equal(st.calls, 3);
	assert_int_equal(st.calls_expired, 2);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(st.requests, 3);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_never_answered_libev(void **state)
{
	(void)state;
	run_never_answered(RT_LIBEV);
}

static void test_never_answered_embed(void **state)
{
	(void)state;
	run_never_answered(RT_EMBED);
}

/* ------------------------------------------------------------------------ */
/* Cancellation                                                             */

/* Cancel k, held by the server, and see it end: -ECANCELED once (maybe
 * from inside evr_call_cancel), -ENOENT for a second cancel; once the
 * server learnt of it (requests_cancelled reaches `cancelled`), its
 * answer is -ECANCELED and spends the handle. */
static void cancel_held(struct ct *t, struct call *k, int cancelled)
{
	int fired = t->fired;

	assert_int_equal(ct_cancel(t, k), 0);
	ct_wait(t, ct_fired, fired + 1, 10);
	assert_int_equal(k->fired, 1);
	assert_int_equal(k->status, -ECANCELED);
	assert_int_equal(ct_cancel(t, k), -ENOENT);
	ct_wait(t, ct_req_cancelled, cancelled, 10);
	assert_non_null(k->r);
	assert_int_equal(ct_answer(t, k), -ECANCELED);
	assert_null(k->r);
}

/*
 * Calls whose requests the server holds, cancelled: an eager one and a
 * rendezvous one (read and delivered), each after the server got it; and
 * an eager one cancelled right after evr_call, before the loop ran, which
 * the server may or may not get.  Each callback fires once with
 * -ECANCELED, a second cancel is -ENOENT, and the server's answer to what
 * it holds is -ECANCELED: nothing goes back (no late reply).  The ids of
 * no call are -ENOENT, no conn -EINVAL.  The conn goes on.
 */
static void run_cancel_held(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	struct evr_stats st;
	struct call *k[3], *ok;
	int cancelled = 0;

	ct_connect(t);
	t->how = SRV_HOLD;
	k[0] = ct_call(t, 100, 10, LONG_MS);
	ct_wait(t, ct_delivered, 1, 10);
	cancel_held(t, k[0], ++cancelled);
	k[1] = ct_call(t, 64 * KIB, 64 * KIB, LONG_MS);
	ct_wait(t, ct_delivered, 2, 10);
	cancel_held(t, k[1], ++cancelled);

	k[2] = ct_call(t, 100, 10, LONG_MS);
	assert_int_equal(ct_cancel(t, k[2]), 0);
	ct_wait(t, ct_fired, 3, 10);
	assert_int_equal(k[2]->status, -ECANCELED);
	assert_int_equal(ct_cancel(t, k[2]), -ENOENT);
	ct_settle(t);
	if (k[2]->delivered) {
		ct_wait(t, ct_req_cancelled, ++cancelled, 10);
		assert_int_equal(ct_answer(t, k[2]), -ECANCELED);
	}
	printf("# %s: cancel: callback inside evr_call_cancel: %s, %s, %s; "
	       "a call cancelled at once reached the server: %s\n",
	       rt_path_name(path), k[0]->in_cancel ? "yes" : "no",
	       k[1]->in_cancel ? "yes" : "no", k[2]->in_cancel ? "yes" : "no",
	       k[2]->delivered ? "yes" : "no");

	assert_int_equal(evr_call_cancel(t->p.cli.conn, 0), -ENOENT);
	assert_int_equal(evr_call_cancel(t->p.cli.conn, k[0]->id ^ 0x40000000u),
			 -ENOENT);
	assert_int_equal(evr_call_cancel(NULL, k[0]->id), -EINVAL);

	t->how = SRV_ANSWER;
	ok = ct_call(t, 300, 400, LONG_MS);
	ct_wait(t, ct_fired, 4, 30);
	ct_settle(t);
	ct_assert_ok(ok);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(k[i]->fired, 1);
		assert_int_equal(k[i]->rep_cbs, 0);
	}
	ct_delta(t, &st);
	assert_int_equal(st.calls, 4);
	assert_int_equal(st.calls_cancelled, 3);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.calls_expired, 0);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(st.requests, 3 + (k[2]->delivered ? 1 : 0));
	assert_int_equal(st.requests_cancelled, cancelled);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_cancel_held_libev(void **state)
{
	(void)state;
	run_cancel_held(RT_LIBEV);
}

static void test_cancel_held_embed(void **state)
{
	(void)state;
	run_cancel_held(RT_EMBED);
}

#define BIG (4 * MIB)

/* When the victim of a round is cancelled. */
enum trig {
	TRIG_STEPS,   /* after so many steps of the ends, by turns */
	TRIG_SRV_REQ, /* in the server's on_request of the call before it */
	TRIG_CLI_CB,  /* in the callback of the call before it */
};

struct round {
	enum trig trig;
	int steps;
};

#define ROUNDS_STEPS 24
#define ROUNDS_MAX   (ROUNDS_STEPS + 2)

/* 0 to ROUNDS_STEPS - 1 steps, the client's first, then the server's,
 * and so on (each end's loop once, without waiting): the cancel comes at
 * every point of the exchange; then the two triggers. */
static int make_rounds(struct round *r)
{
	int n = 0;

	for (int i = 0; i < ROUNDS_STEPS; i++) {
		r[n].trig = TRIG_STEPS;
		r[n++].steps = i;
	}
	r[n++].trig = TRIG_SRV_REQ;
	r[n++].trig = TRIG_CLI_CB;
	return n;
}

/* The trigger's cancel (from a callback of the call before the victim). */
static void ct_trigger(struct ct *t)
{
	t->trig_rc = ct_cancel(t, t->victim);
	t->trig = NULL;
	t->trig_done = true;
}

static int ct_triggered(void *arg)
{
	struct ct *t = arg;

	return t->trig_done;
}

/*
 * Cancel during a rendezvous request: 4 MiB requests, which the server
 * reads for a while.  The client has a ctx of its own, so that each end
 * can be stepped alone.  A round makes three calls: A (4 MiB), B, the
 * victim (4 MiB), and C (16 bytes); requests keep their order, so B is
 * read after A, and C delivered after the server is done with B.  B is
 * cancelled at some point: after 0 to 23 steps of the two ends by turns
 * (B queued, posted, its request at the server and not read, being read,
 * read, answered), from the server's on_request of A, or from A's
 * callback.  B's callback
 * overwrites its request buffer at once.  So a read of it still in flight
 * when the callback fired would hand the server other bytes: the server
 * must see either the whole original request, or nothing; and its
 * reading must not fail (a read through an access the client revoked
 * already kills the connection).  A and C end with their replies.  When
 * B's reply came before the cancel, B ended with it (0) and the cancel
 * is -ENOENT.
 */
static void run_cancel_rndv(enum rt_path path)
{
	struct round rounds[ROUNDS_MAX];
	const int n = make_rounds(rounds);
	struct ct *t = ct_new2(path, NULL, true);
	struct evr_stats st;
	int ncancelled = 0, nlate = 0, nseen = 0, nok = 0;
	/* cancelled victims: [callback inside the cancel][delivered] */
	int kinds[2][2] = {{0, 0}, {0, 0}};

	ct_connect(t);
	t->poison = true;
	t->how = SRV_ANSWER;
	printf("# %s: cancel a %zu-byte request behind another after 0 to "
	       "%d steps: ",
	       rt_path_name(path), (size_t)BIG, ROUNDS_STEPS - 1);
	for (int i = 0; i < n; i++) {
		const struct round *r = &rounds[i];
		int fired = t->fired, rc = 0;
		struct call *a, *b, *c;

		a = ct_call(t, BIG, 32, LONG_MS);
		b = ct_call(t, BIG, 32, LONG_MS);
		c = ct_call(t, 16, 16, LONG_MS);
		t->victim = b;
		t->trig_done = false;
		switch (r->trig) {
		case TRIG_STEPS:
			for (int j = 0; j < r->steps && !b->fired; j++) {
				if (j % 2 == 0)
					ct_step_cli(t);
				else
					ct_step_srv(t);
			}
			rc = ct_cancel(t, b);
			break;
		case TRIG_SRV_REQ:
		case TRIG_CLI_CB:
			t->trig = a;
			t->trig_srv = r->trig == TRIG_SRV_REQ;
			assert_int_equal(ct_run_until(t, ct_triggered, t, 20),
					 0);
			rc = t->trig_rc;
			break;
		}
		assert_true(rc == 0 || rc == -ENOENT);
		ct_wait(t, ct_fired, fired + 3, 20);
		ct_assert_ok(a);
		ct_assert_ok(c);
		assert_int_equal(b->fired, 1);
		assert_in_range(b->delivered, 0, 1);
		nseen += b->delivered;
		if (rc == 0) {
			assert_int_equal(b->status, -ECANCELED);
			ncancelled++;
			kinds[b->in_cancel][b->delivered]++;
			/* the server answered it before it learnt of the
			 * cancel: that reply came late */
			nlate += b->delivered && b->rep_rc == 0;
		} else {
			/* it had ended with its reply already */
			assert_int_equal(b->status, 0);
			assert_int_equal(b->bad, 0);
			nok++;
		}
		if (r->trig != TRIG_STEPS)
			printf(" %s=", r->trig == TRIG_SRV_REQ ? "on_request"
							       : "callback");
		if (rc)
			printf("a");
		else if (b->delivered)
			printf("%c", b->in_cancel ? 'D' : 'd');
		else
			printf("%c", b->in_cancel ? 'U' : 'u');
	}
	printf("\n# (a: answered first; cancelled: d, D delivered, u, U "
	       "not; upper case: the callback fired inside the cancel)\n");
	ct_settle(t);
	ct_delta(t, &st);
	printf("# %s: %d cancelled (callback inside evr_call_cancel: %d, "
	       "of them delivered %d; later: %d, delivered %d), %d answered "
	       "first; %llu late replies, %llu requests cancelled\n",
	       rt_path_name(path), ncancelled, kinds[1][0] + kinds[1][1],
	       kinds[1][1], kinds[0][0] + kinds[0][1], kinds[0][1], nok,
	       (unsigned long long)st.late_replies,
	       (unsigned long long)st.requests_cancelled);
	/* every request the server got was the whole original */
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	assert_int_equal(t->p.cli.closes, 0);
	assert_int_equal(t->p.srv.closes, 0);
	assert_int_equal(t->fired, 3 * n);
	for (int i = 0; i < t->ncalls; i++)
		assert_int_equal(t->calls[i].fired, 1);
	assert_int_equal(st.calls, 3 * n);
	assert_int_equal(st.calls_cancelled, ncancelled);
	assert_int_equal(st.calls_ok, 2 * n + nok);
	assert_int_equal(st.calls_expired, 0);
	assert_int_equal(st.requests, 2 * n + nseen);
	assert_in_range(st.late_replies, nlate, nlate + ncancelled);
	ct_close(t);
	ct_free(t);
}

static void test_cancel_rndv_libev(void **state)
{
	(void)state;
	run_cancel_rndv(RT_LIBEV);
}

static void test_cancel_rndv_embed(void **state)
{
	(void)state;
	run_cancel_rndv(RT_EMBED);
}

/* ------------------------------------------------------------------------ */
/* The end of the connection                                                */

enum end_how { END_CLIENT_ABORT, END_SERVER_ABORT, END_SERVER_CLOSE };

static const char *const end_str[] = {"client aborts", "server aborts",
				      "server closes"};

/*
 * Calls in flight when the connection ends: six the server holds (eager,
 * 0 bytes, rendezvous up to 1 MiB, one without a deadline) and two made
 * just before the end.  Every callback fires once, with the connection's
 * error (its on_close status), before on_close; no reply, no deadline.
 * On the closing conn evr_call is -EPIPE.  The server's handles outlive
 * the conn: evr_request_conn still answers, evr_reply is -ENOTCONN (and
 * spends the handle, sending nothing), evr_request_drop spends one.
 */
static void run_conn_end(enum rt_path path, enum end_how end)
{
	struct ct *t = ct_new(path, NULL);
	struct evr_stats st;
	evr_conn *sc;
	int n, nheld = 0, status;

	ct_connect(t);
	t->how = SRV_HOLD;
	ct_call(t, 100, 10, LONG_MS);
	ct_call(t, 0, 10, LONG_MS);
	ct_call(t, 5000, 10, LONG_MS);
	ct_call(t, 64 * KIB, 64 * KIB, LONG_MS);
	ct_call(t, MIB, 10, LONG_MS);
	ct_call(t, 100, 10, 0);
	ct_wait(t, ct_delivered, 6, 20);
	ct_call(t, 200, 10, LONG_MS);
	ct_call(t, 256 * KIB, 10, LONG_MS);
	n = t->ncalls;
	sc = t->p.srv.conn;
	switch (end) {
	case END_CLIENT_ABORT:
		assert_int_equal(evr_conn_close(t->p.cli.conn, EVR_CLOSE_ABORT),
				 0);
		assert_int_equal(
		    ct_call_from(t, &t->p.cli, 10, 10, LONG_MS, NULL), -EPIPE);
		break;
	case END_SERVER_ABORT:
		assert_int_equal(evr_conn_close(sc, EVR_CLOSE_ABORT), 0);
		break;
	case END_SERVER_CLOSE:
		assert_int_equal(evr_conn_close(sc, 0), 0);
		break;
	}
	assert_int_equal(t->ncalls, n);
	ct_wait(t, ct_closed, 0, 20);
	ct_settle(t);
	status = t->p.cli.close_status;
	printf("# %s: %s: client %s, server %s; %d calls in flight, %d of "
	       "them delivered\n",
	       rt_path_name(path), end_str[end], evr_err_name(status),
	       evr_err_name(t->p.srv.close_status), n, t->ndelivered);
	assert_int_equal(t->p.cli.closes, 1);
	assert_int_equal(t->p.srv.closes, 1);
	switch (end) {
	case END_CLIENT_ABORT:
		assert_int_equal(status, -ECANCELED);
		assert_int_equal(t->p.srv.close_status, -ECONNRESET);
		break;
	case END_SERVER_ABORT:
		assert_int_equal(t->p.srv.close_status, -ECANCELED);
		assert_int_equal(status, -ECONNRESET);
		break;
	case END_SERVER_CLOSE:
		assert_int_equal(t->p.srv.close_status, 0);
		assert_int_equal(status, -ESHUTDOWN);
		break;
	}
	assert_int_equal(t->fired, n);
	for (int i = 0; i < n; i++) {
		const struct call *k = &t->calls[i];

		assert_int_equal(k->fired, 1);
		assert_int_equal(k->status, status);
	}
	/* no callback after on_close, none inside a call */
	assert_int_equal(t->api_bad, 0);
	assert_int_equal(t->srv_bad, 0);
	assert_true(t->ndelivered >= 6);

	for (int i = 0; i < n; i++) {
		struct call *k = &t->calls[i];

		if (!k->r)
			continue;
		assert_ptr_equal(evr_request_conn(k->r), sc);
		if (++nheld == 3) {
			evr_request_drop(k->r);
			k->r = NULL;
			continue;
		}
		assert_int_equal(ct_answer(t, k), -ENOTCONN);
		assert_null(k->r);
	}
	assert_int_equal(nheld, t->ndelivered);
	ct_settle(t);
	assert_int_equal(t->rep_cbs, 0);
	assert_int_equal(t->fired, n);
	ct_delta(t, &st);
	assert_int_equal(st.calls, n);
	assert_int_equal(st.calls_ok, 0);
	assert_int_equal(st.calls_expired, 0);
	assert_int_equal(st.calls_cancelled, 0);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(st.requests, t->ndelivered);
	evr_ctx_stats(t->p.ctx, &st);
	assert_int_equal(st.conns, 0);
	ct_free(t);
}

static void test_client_abort_libev(void **state)
{
	(void)state;
	run_conn_end(RT_LIBEV, END_CLIENT_ABORT);
}

static void test_client_abort_embed(void **state)
{
	(void)state;
	run_conn_end(RT_EMBED, END_CLIENT_ABORT);
}

static void test_server_abort_libev(void **state)
{
	(void)state;
	run_conn_end(RT_LIBEV, END_SERVER_ABORT);
}

static void test_server_abort_embed(void **state)
{
	(void)state;
	run_conn_end(RT_EMBED, END_SERVER_ABORT);
}

static void test_server_close_libev(void **state)
{
	(void)state;
	run_conn_end(RT_LIBEV, END_SERVER_CLOSE);
}

static void test_server_close_embed(void **state)
{
	(void)state;
	run_conn_end(RT_EMBED, END_SERVER_CLOSE);
}

/* ------------------------------------------------------------------------ */
/* Calls among plain messages                                               */

static const size_t mix_sizes[] = {
    0,	   10,	1000,  CALL_EAGER,    CALL_EAGER + 1,
    20000, 100, 70000, EAGER_DEFAULT, 3};
#define MIX_N 36

/*
 * Messages and calls on one conn, every third item a call, of sizes
 * across both paths (a rendezvous message before an eager request, and
 * the reverse).  The server gets them all in the order sent -- a call's
 * request in its place among the messages -- each whole; every call ends
 * with its own reply, every send with 0.
 */
static void run_interleave(enum rt_path path)
{
	const int nsz = sizeof(mix_sizes) / sizeof(mix_sizes[0]);
	struct ct *t = ct_new(path, NULL);
	struct evr_stats st;
	int ncalls = 0;

	ct_connect(t);
	t->how = SRV_ANSWER;
	for (int j = 0; j < MIX_N; j++) {
		size_t len = mix_sizes[j % nsz];

		if (j % 3 == 1) {
			ct_call(t, len, mix_sizes[(j + 3) % nsz], LONG_MS);
			ncalls++;
		} else {
			ct_send(t, len);
		}
	}
	ct_wait(t, ct_fired, ncalls, 30);
	ct_wait(t, ct_replied, ncalls, 30);
	ct_wait(t, ct_msgs_done, 0, 30);
	ct_settle(t);
	assert_int_equal(t->msg_next, t->nmsgs);
	assert_int_equal(t->arrivals, MIX_N);
	for (int i = 0; i < t->ncalls; i++) {
		const struct call *k = &t->calls[i];

		ct_assert_ok(k);
		assert_int_equal(k->arrival, (int)k->seq);
	}
	for (int i = 0; i < t->nmsgs; i++) {
		const struct pmsg *m = &t->msgs[i];

		assert_int_equal(m->got, 1);
		assert_int_equal(m->arrival, (int)m->seq);
		assert_int_equal(m->sent_ok, 1);
		assert_int_equal(m->sent_err, 0);
	}
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_delta(t, &st);
	assert_int_equal(st.calls, ncalls);
	assert_int_equal(st.calls_ok, ncalls);
	assert_int_equal(st.requests, ncalls);
	ct_close(t);
	ct_free(t);
}

static void test_interleave_libev(void **state)
{
	(void)state;
	run_interleave(RT_LIBEV);
}

static void test_interleave_embed(void **state)
{
	(void)state;
	run_interleave(RT_EMBED);
}

/* ------------------------------------------------------------------------ */
/* Refusals, limits, arguments                                              */

static void reset_sides(struct ct *t)
{
	t->p.cli.connects = t->p.cli.closes = 0;
	t->p.srv.connects = t->p.srv.closes = 0;
}

/*
 * 1. The server accepts without on_request: calls are not agreed, and
 *    evr_call is -EOPNOTSUPP on both ends (no callback, not counted);
 *    plain messages still flow.
 * 2. The server accepts with on_request, the client has none: calls are
 *    agreed, and the server may call the client, but the request is
 *    dropped there (requests_unserved) and the server's call ends at its
 *    deadline; the client's calls are served.
 */
static void run_not_agreed(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	unsigned ms = short_ms();
	struct evr_stats st;
	struct call *k, *up;

	t->p.srv_opts.on_request = NULL;
	ct_connect(t);
	assert_int_equal(ct_call_from(t, &t->p.cli, 10, 10, LONG_MS, NULL),
			 -EOPNOTSUPP);
	assert_int_equal(ct_call_from(t, &t->p.srv, 10, 10, LONG_MS, NULL),
			 -EOPNOTSUPP);
	assert_int_equal(ct_call_from(t, &t->p.cli, 0, 0, 0, NULL),
			 -EOPNOTSUPP);
	/* a message goes through, as before */
	ct_send(t, 16);
	ct_wait(t, ct_msgs_done, 0, 10);
	assert_int_equal(t->msgs[0].got, 1);
	assert_int_equal(t->msgs[0].sent_ok, 1);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->fired, 0);
	ct_delta(t, &st);
	assert_int_equal(st.calls, 0);
	ct_close(t);

	reset_sides(t);
	t->p.srv_opts.on_request = ct_on_request;
	ct_connect(t);
	t->how = SRV_ANSWER;
	assert_int_equal(ct_call_from(t, &t->p.srv, 100, 10, ms, &k), 0);
	up = ct_call(t, 100, 10, LONG_MS);
	ct_wait(t, ct_fired, 2, 10 + ms / 1000.0);
	ct_settle(t);
	ct_assert_expired(k);
	ct_assert_ok(up);
	ct_delta(t, &st);
	assert_int_equal(st.requests_unserved, 1);
	assert_int_equal(st.requests, 1);
	assert_int_equal(st.calls, 2);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.calls_expired, 1);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_not_agreed_libev(void **state)
{
	(void)state;
	run_not_agreed(RT_LIBEV);
}

static void test_not_agreed_embed(void **state)
{
	(void)state;
	run_not_agreed(RT_EMBED);
}

#define MAXC 4

/*
 * max_calls 4: a fifth call is -ENOBUFS (its callback never fires, it is
 * not counted) as long as four are in flight.  When one ends -- answered,
 * or cancelled -- on_drain fires, after that call's callback, never
 * inside evr_call, once for each time evr_call said -ENOBUFS; then
 * evr_call takes one more again.
 */
static void run_max_calls(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	struct evr_stats st;
	struct call *k[MAXC + 2];

	t->p.cli_opts.max_calls = MAXC;
	t->p.srv_opts.max_calls = MAXC;
	ct_connect(t);
	t->how = SRV_HOLD;
	for (int i = 0; i < MAXC; i++)
		k[i] = ct_call(t, i == 2 ? 64 * KIB : 100, 10, LONG_MS);
	assert_int_equal(ct_call_from(t, &t->p.cli, 100, 10, LONG_MS, NULL),
			 -ENOBUFS);
	assert_int_equal(ct_call_from(t, &t->p.cli, 0, 0, 0, NULL), -ENOBUFS);
	ct_wait(t, ct_delivered, MAXC, 10);
	ct_settle(t);
	assert_int_equal(t->drains, 0);
	assert_int_equal(t->fired, 0);

	/* one answered: its callback, then on_drain */
	assert_int_equal(ct_answer(t, k[1]), 0);
	ct_wait(t, ct_drained, 1, 10);
	ct_assert_ok(k[1]);
	assert_int_equal(t->fired_at_drain, 1);
	k[MAXC] = ct_call(t, 100, 10, LONG_MS);
	assert_int_equal(ct_call_from(t, &t->p.cli, 100, 10, LONG_MS, NULL),
			 -ENOBUFS);

	/* one cancelled: the same */
	assert_int_equal(ct_cancel(t, k[0]), 0);
	ct_wait(t, ct_drained, 2, 10);
	assert_int_equal(k[0]->fired, 1);
	assert_int_equal(k[0]->status, -ECANCELED);
	assert_int_equal(t->fired_at_drain, 2);
	k[MAXC + 1] = ct_call(t, 100, 10, LONG_MS);
	assert_int_equal(ct_call_from(t, &t->p.cli, 100, 10, LONG_MS, NULL),
			 -ENOBUFS);

	/* answer the rest */
	ct_wait(t, ct_delivered, MAXC + 2, 10);
	for (int i = 2; i < MAXC + 2; i++)
		assert_int_equal(ct_answer(t, k[i]), 0);
	ct_wait(t, ct_fired, MAXC + 2, 10);
	ct_settle(t);
	for (int i = 1; i < MAXC + 2; i++)
		ct_assert_ok(k[i]);
	assert_int_equal(k[0]->fired, 1);
	/* the CANCEL came, so the held request was refused its answer */
	ct_wait(t, ct_req_cancelled, 1, 10);
	assert_int_equal(ct_answer(t, k[0]), -ECANCELED);
	ct_delta(t, &st);
	printf("# %s: max_calls %d: %d on_drain\n", rt_path_name(path), MAXC,
	       t->drains);
	/* one for each -ENOBUFS: the last came before the rest ended */
	assert_int_equal(t->drains, 3);
	assert_int_equal(st.calls, MAXC + 2);
	assert_int_equal(st.calls_ok, MAXC + 1);
	assert_int_equal(st.calls_cancelled, 1);
	assert_int_equal(t->ncalls, MAXC + 2);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_max_calls_libev(void **state)
{
	(void)state;
	run_max_calls(RT_LIBEV);
}

static void test_max_calls_embed(void **state)
{
	(void)state;
	run_max_calls(RT_EMBED);
}

static void never_cb(evr_conn *c, int status, const void *reply, size_t len,
		     void *arg)
{
	struct ct *t = arg;

	(void)c;
	(void)status;
	(void)reply;
	(void)len;
	t->api_bad++;
}

/* A buffer above the peer's max_msg_size (MIB) in run_bad_input and
 * run_reply_errors. */
static uint8_t big[MIB + 1];

/*
 * The argument checks of evr_call and evr_call_cancel, none of which
 * fires a callback or counts a call: max_calls 65536 is taken (above it
 * evr_connect refuses the opts); evr_call on a conn still connecting is
 * -ENOTCONN, without a conn or a callback, or with a NULL request of some
 * length, -EINVAL, above the peer's max_msg_size -EMSGSIZE (exactly that
 * is fine, both ways), on a closing conn -EPIPE; evr_call_cancel of no
 * call is -ENOENT, without a conn -EINVAL; evr_reply without a handle
 * -EINVAL.
 */
static void run_bad_input(enum rt_path path)
{
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct evr_stats st;
	struct ct *t;
	struct call *k;
	evr_conn *c;
	uint8_t buf[16] = {0};

	rt_ctx_opts(&o);
	o.max_msg_size = MIB;
	t = ct_new(path, &o);
	t->p.cli_opts.max_calls = 65536;
	assert_int_equal(evr_connect(t->p.ctx, rt_addr(),
				     evr_listener_port(t->p.l), &t->p.cli_opts,
				     &c),
			 0);
	assert_int_equal(
	    evr_call(c, buf, sizeof(buf), LONG_MS, never_cb, t, NULL),
	    -ENOTCONN);
	assert_int_equal(ct_run_until(t, rt_pair_up_pred, &t->p, 20), 0);
	assert_int_equal(t->p.cli.connect_status, 0);
	assert_int_equal(t->p.srv.connect_status, 0);
	assert_ptr_equal(t->p.cli.conn, c);
	ct_stats(t, &t->st0);

	assert_int_equal(
	    evr_call(NULL, buf, sizeof(buf), LONG_MS, never_cb, t, NULL),
	    -EINVAL);
	assert_int_equal(evr_call(c, buf, sizeof(buf), LONG_MS, NULL, t, NULL),
			 -EINVAL);
	assert_int_equal(evr_call(c, NULL, 10, LONG_MS, never_cb, t, NULL),
			 -EINVAL);
	assert_int_equal(evr_call(c, big, MIB + 1, LONG_MS, never_cb, t, NULL),
			 -EMSGSIZE);
	assert_int_equal(evr_call_cancel(c, 0), -ENOENT);
	assert_int_equal(evr_call_cancel(c, 0xdeadbeefu), -ENOENT);
	assert_int_equal(evr_call_cancel(NULL, 1), -EINVAL);
	assert_int_equal(evr_reply(NULL, buf, sizeof(buf), NULL, NULL),
			 -EINVAL);

	/* the largest request and reply the peer takes */
	t->how = SRV_ANSWER;
	k = ct_call(t, MIB, MIB, LONG_MS);
	ct_wait(t, ct_fired, 1, 20);
	ct_settle(t);
	ct_assert_ok(k);
	assert_int_equal(k->rep_cbs, 1);
	assert_int_equal(k->rep_status, 0);

	assert_int_equal(evr_conn_close(c, 0), 0);
	assert_int_equal(
	    evr_call(c, buf, sizeof(buf), LONG_MS, never_cb, t, NULL), -EPIPE);
	ct_wait(t, ct_closed, 0, 20);
	assert_int_equal(t->p.cli.close_status, 0);
	assert_int_equal(t->p.srv.close_status, -ESHUTDOWN);
	assert_int_equal(t->api_bad, 0);
	ct_delta(t, &st);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.calls_ok, 1);

	/* above the limit: refused with the opts, as their other fields */
	evr_conn_opts_init(&co);
	co.max_calls = 65537;
	assert_int_equal(evr_connect(t->p.ctx, rt_addr(),
				     evr_listener_port(t->p.l), &co, NULL),
			 -EINVAL);
	ct_free(t);
}

static void test_bad_input_libev(void **state)
{
	(void)state;
	run_bad_input(RT_LIBEV);
}

static void test_bad_input_embed(void **state)
{
	(void)state;
	run_bad_input(RT_EMBED);
}

/*
 * evr_reply's errors spend the handle: a NULL buffer of some length
 * (-EINVAL), a reply above the peer's max_msg_size (-EMSGSIZE).  Nothing
 * is sent, so those calls end at their deadline; a third call on the
 * same conn, answered, ends with its reply: the conn is unharmed.
 */
static void run_reply_errors(enum rt_path path)
{
	struct evr_ctx_opts o;
	struct evr_stats st;
	struct ct *t;
	struct call *k[3];
	unsigned ms = short_ms();

	rt_ctx_opts(&o);
	o.max_msg_size = MIB;
	t = ct_new(path, &o);
	ct_connect(t);
	t->how = SRV_HOLD;
	k[0] = ct_call(t, 100, 200, ms);
	k[1] = ct_call(t, 300, 400, ms);
	k[2] = ct_call(t, 500, 600, LONG_MS);
	ct_wait(t, ct_delivered, 3, 20);
	assert_ptr_equal(evr_request_conn(k[0]->r), t->p.srv.conn);
	assert_int_equal(evr_reply(k[0]->r, NULL, 5, NULL, NULL), -EINVAL);
	k[0]->r = NULL; /* spent */
	assert_int_equal(evr_reply(k[1]->r, big, MIB + 1, NULL, NULL),
			 -EMSGSIZE);
	k[1]->r = NULL;
	assert_int_equal(ct_answer(t, k[2]), 0);
	ct_wait(t, ct_fired, 3, 20 + ms / 1000.0);
	ct_settle(t);
	ct_assert_expired(k[0]);
	ct_assert_expired(k[1]);
	ct_assert_ok(k[2]);
	assert_int_equal(k[2]->rep_cbs, 1);
	ct_delta(t, &st);
	assert_int_equal(st.calls, 3);
	assert_int_equal(st.calls_ok, 1);
	assert_int_equal(st.calls_expired, 2);
	assert_int_equal(st.late_replies, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_reply_errors_libev(void **state)
{
	(void)state;
	run_reply_errors(RT_LIBEV);
}

static void test_reply_errors_embed(void **state)
{
	(void)state;
	run_reply_errors(RT_EMBED);
}

/* ------------------------------------------------------------------------ */
/* Holding replies and requests                                             */

static const struct sz hold_sizes[] = {
    {100, 100}, {5000, 20000}, {70000, 300}, {1, CALL_EAGER}, {CALL_EAGER, 1}};
#define HOLD_N	  (int)(sizeof(hold_sizes) / sizeof(hold_sizes[0]))
#define HOLD_MORE 24

/* Every held reply and request still has its bytes, where it was. */
static void hold_check(const struct ct *t)
{
	for (int i = 0; i < HOLD_N; i++) {
		const struct call *k = &t->calls[i];

		assert_non_null(k->rep_msg);
		assert_ptr_equal(evr_msg_data(k->rep_msg), k->reply);
		assert_int_equal(evr_msg_len(k->rep_msg), k->rep_len);
		if (rt_verify(k->reply, k->rep_len, REP_SEQ(k->seq)) >= 0)
			fail_msg("held reply %d changed", i);
		assert_non_null(k->req_msg);
		assert_ptr_equal(evr_msg_data(k->req_msg), k->req_data);
		assert_int_equal(evr_msg_len(k->req_msg), k->req_len);
		if (rt_verify(k->req_data, k->req_len, k->seq) >= 0)
			fail_msg("held request %d changed", i);
	}
}

/*
 * evr_conn_hold in the call's callback (status 0) keeps the reply, and in
 * on_request the request, eager and rendezvous: their bytes stay where
 * they were past the callbacks and past many more calls through the
 * same receive buffers, until evr_msg_release.  Then calls go on.
 */
static void run_hold(enum rt_path path)
{
	struct ct *t = ct_new(path, NULL);
	int n;

	ct_connect(t);
	t->how = SRV_ANSWER;
	t->hold_rep = t->hold_req = true;
	for (int i = 0; i < HOLD_N; i++)
		ct_call(t, hold_sizes[i].req, hold_sizes[i].rep, LONG_MS);
	ct_wait(t, ct_fired, HOLD_N, 30);
	t->hold_rep = t->hold_req = false;
	for (int i = 0; i < HOLD_N; i++)
		ct_assert_ok(&t->calls[i]);
	hold_check(t);

	/* traffic through the same buffers */
	for (int r = 0; r < 2; r++) {
		n = t->ncalls;
		for (int i = 0; i < HOLD_MORE / 2; i++)
			ct_call(t, 100 + (size_t)i * 700,
				3000 - (size_t)i * 200, LONG_MS);
		ct_wait(t, ct_fired, n + HOLD_MORE / 2, 30);
		hold_check(t);
	}
	for (int i = 0; i < HOLD_N; i++) {
		evr_msg_release(t->calls[i].rep_msg);
		evr_msg_release(t->calls[i].req_msg);
		t->calls[i].rep_msg = t->calls[i].req_msg = NULL;
	}
	n = t->ncalls;
	ct_call(t, 64 * KIB, 64 * KIB, LONG_MS);
	ct_call(t, 10, 10, LONG_MS);
	ct_wait(t, ct_fired, n + 2, 30);
	ct_settle(t);
	for (int i = 0; i < t->ncalls; i++)
		ct_assert_ok(&t->calls[i]);
	assert_int_equal(t->srv_bad, 0);
	assert_int_equal(t->api_bad, 0);
	ct_close(t);
	ct_free(t);
}

static void test_hold_libev(void **state)
{
	(void)state;
	run_hold(RT_LIBEV);
}

static void test_hold_embed(void **state)
{
	(void)state;
	run_hold(RT_EMBED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_eager_libev),
	    cmocka_unit_test(test_eager_embed),
	    cmocka_unit_test(test_rndv_libev),
	    cmocka_unit_test(test_rndv_embed),
	    cmocka_unit_test(test_quiet_replies_libev),
	    cmocka_unit_test(test_quiet_replies_embed),
	    cmocka_unit_test(test_deadline_held_libev),
	    cmocka_unit_test(test_deadline_held_embed),
	    cmocka_unit_test(test_never_answered_libev),
	    cmocka_unit_test(test_never_answered_embed),
	    cmocka_unit_test(test_cancel_held_libev),
	    cmocka_unit_test(test_cancel_held_embed),
	    cmocka_unit_test(test_cancel_rndv_libev),
	    cmocka_unit_test(test_cancel_rndv_embed),
	    cmocka_unit_test(test_client_abort_libev),
	    cmocka_unit_test(test_client_abort_embed),
	    cmocka_unit_test(test_server_abort_libev),
	    cmocka_unit_test(test_server_abort_embed),
	    cmocka_unit_test(test_server_close_libev),
	    cmocka_unit_test(test_server_close_embed),
	    cmocka_unit_test(test_interleave_libev),
	    cmocka_unit_test(test_interleave_embed),
	    cmocka_unit_test(test_not_agreed_libev),
	    cmocka_unit_test(test_not_agreed_embed),
	    cmocka_unit_test(test_max_calls_libev),
	    cmocka_unit_test(test_max_calls_embed),
	    cmocka_unit_test(test_hold_libev),
	    cmocka_unit_test(test_hold_embed),
	    cmocka_unit_test(test_bad_input_libev),
	    cmocka_unit_test(test_bad_input_embed),
	    cmocka_unit_test(test_reply_errors_libev),
	    cmocka_unit_test(test_reply_errors_embed),
	};

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_calls", tests, NULL, NULL);
}
