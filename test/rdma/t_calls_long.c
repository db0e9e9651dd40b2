/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A long run of calls (make check-long), on a real verbs stack, public
 * API only: a million calls by default over two connections, 32 in
 * flight on each, every one of them planned at random from its sequence
 * number and the seed:
 *
 *  - the request's size: mostly eager (some empty), a few percent by
 *    rendezvous up to 256 KiB; the reply's likewise;
 *  - what the server does: answer from on_request, answer after a delay
 *    (an ev_timer of up to 60 ms), drop the request, or hold it until the
 *    end of the run and answer then;
 *  - the deadline: none, 30 s, or 20 to 150 ms (always one of those short
 *    ones for a request that is dropped or held);
 *  - a cancel: none, right after evr_call, or from a timer 0 to 30 ms
 *    later.
 *
 * A request carries its sequence number, the size of the reply, what the
 * server is to do, and a check word, in a header; the rest is a pattern of
 * the sequence number.  Once a call's callback fired, the client writes
 * over its request buffer and reuses it for a later call; the server
 * checks every request it gets, all of it, so a read of a request after
 * its callback -- the buffer no longer the library's -- shows as a
 * mismatch.
 *
 * Asserted: every callback fires exactly once; its status is one the plan
 * and the timing allow (0 only for a request the server answers, with the
 * reply's bytes, and not past the deadline; -ETIMEDOUT only for a call
 * with a deadline, not before it; -ECANCELED only after evr_call_cancel
 * returned 0, or from inside it); every request the server got is whole
 * and unchanged; every reply's send ends; no connection fails; and the
 * statistics agree with what the test saw: calls = calls_ok +
 * calls_expired + calls_cancelled, each equal to the test's count, every
 * reply that found no call counted in late_replies.  A summary line is
 * printed at the end.
 *
 *   EVR_CALLS_N     calls in all (default 1000000; 2000 under valgrind)
 *   EVR_CALLS_SEED  seed of the plans (default from the clock; printed)
 */
#include "rt.h"

#include <stdbool.h>

#define LC_CONNS      2
#define LC_WINDOW     32 /* calls in flight per connection */
#define LC_DEFAULT    1000000u
#define LC_VG_DEFAULT 2000u
#define LC_HDR	      16
#define LC_EAGER      (8192 - 4) /* largest eager call payload */
#define LC_MAX	      (256u << 10)
#define LC_LONG_MS    30000u
#define LC_STALL_S    60.0
#define LC_REPORT_S   30.0
#define REP_SEQ(seq)  ((seq) ^ 0x80000000u)
#define POISON	      0xa5

enum act { ACT_ANSWER, ACT_DELAY, ACT_DROP, ACT_HOLD, ACT_COUNT };

static const char *const act_str[ACT_COUNT] = {"answered", "delayed", "dropped",
					       "held"};

enum cancel { CANCEL_NONE, CANCEL_NOW, CANCEL_LATER };

/* A call's plan, a function of the seed and its sequence number. */
struct plan {
	size_t len, rep_len;
	enum act act;
	unsigned delay_ms;   /* ACT_DELAY */
	unsigned timeout_ms; /* 0: none */
	enum cancel cancel;
	unsigned cancel_ms; /* CANCEL_LATER */
};

struct lc;
struct lconn;

struct side {
	struct lconn *c;
	evr_conn *conn;
	int connects, connect_status, closes, close_status;
};

/* A call in flight: the request buffer is the slot's, reused once its
 * callback fired. */
struct slot {
	struct lconn *c;
	int idx;
	bool busy;
	uint32_t seq;
	struct plan pl;
	evr_call_id id;
	double t0;
	bool cancel_ok; /* evr_call_cancel returned 0: -ECANCELED is due */
	ev_timer cancel_w;
	uint8_t *buf;
};

struct lconn {
	struct lc *lc;
	struct side cli, srv;
	struct slot slots[LC_WINDOW];
	int free_idx[LC_WINDOW];
	int nfree;
	bool pumping;
};

/* A request the server answers later. */
struct pend {
	struct lc *lc;
	evr_request *r;
	uint32_t seq;
	size_t rep_len;
	ev_timer w;
};

struct lc {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	struct lconn conns[LC_CONNS];
	uint64_t seed;
	uint32_t total, next;
	uint8_t *cbs; /* callbacks per call */
	uint64_t fired;
	double slack; /* seconds a callback may come after its deadline */
	/* set while inside evr_call_cancel for the slot, and whether its
	 * callback fired in there */
	struct slot *cancelling;
	bool cancel_fired;
	/* the client's view */
	uint64_t n_ok, n_expired, n_cancelled;
	uint64_t by_act[ACT_COUNT], ok_by_act[ACT_COUNT];
	uint64_t cancels_now, cancels_later, cancels_inside, cancel_enoent;
	uint64_t rndv_req, rndv_rep, bytes;
	/* the server's view */
	uint64_t requests, answered, refused, reply_cbs, reply_cb_err;
	uint64_t srv_by_act[ACT_COUNT];
	uint32_t pending; /* delayed answers not sent yet */
	struct pend **held;
	size_t nheld, held_cap;
	int accepts;
	char first_err[512];
	uint64_t nerr;
};

static void lc_err(struct lc *lc, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static void lc_err(struct lc *lc, const char *fmt, ...)
{
	va_list ap;

	if (lc->nerr++)
		return;
	va_start(ap, fmt);
	vsnprintf(lc->first_err, sizeof(lc->first_err), fmt, ap);
	va_end(ap);
}

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* The next draw, 0 .. n - 1, from the state *h. */
static uint64_t draw(uint64_t *h, uint64_t n)
{
	*h = mix64(*h);
	return *h % n;
}

/* Sizes: mostly eager and small, a few percent by rendezvous, skewed
 * towards 64 KiB and below. */
static size_t draw_len(uint64_t *h, bool req)
{
	uint64_t r = draw(h, 1000);

	if (r < 5)
		return 0;
	if (r < 600)
		return LC_HDR + (size_t)draw(h, 241);
	if (r < 960)
		return LC_HDR + (size_t)draw(h, LC_EAGER - LC_HDR + 1);
	if (!req && r < 965)
		return LC_EAGER + 1; /* the smallest rendezvous reply */
	if (r < 990)
		return LC_EAGER + 1 + (size_t)draw(h, (64u << 10) - LC_EAGER);
	return LC_EAGER + 1 + (size_t)draw(h, LC_MAX - LC_EAGER);
}

static void plan_of(uint64_t seed, uint32_t seq, struct plan *p)
{
	uint64_t h = mix64(seed ^ ((uint64_t)seq << 24) ^ 0xca11ull);
	uint64_t r;

	memset(p, 0, sizeof(*p));
	p->len = draw_len(&h, true);
	p->rep_len = draw_len(&h, false);
	r = draw(&h, 1000);
	p->act = r < 970   ? ACT_ANSWER
		 : r < 990 ? ACT_DELAY
		 : r < 995 ? ACT_DROP
			   : ACT_HOLD;
	if (p->len == 0) {
		/* no header: the server answers it with nothing, at once */
		p->act = ACT_ANSWER;
		p->rep_len = 0;
	}
	if (p->act == ACT_DELAY)
		p->delay_ms = 1 + (unsigned)draw(&h, 60);
	r = draw(&h, 100);
	if (p->act == ACT_DROP || p->act == ACT_HOLD || r >= 85)
		p->timeout_ms = 20 + (unsigned)draw(&h, 131);
	else if (r >= 10)
		p->timeout_ms = LC_LONG_MS;
	r = draw(&h, 1000);
	if (r < 15) {
		p->cancel = CANCEL_NOW;
	} else if (r < 40) {
		p->cancel = CANCEL_LATER;
		p->cancel_ms = (unsigned)draw(&h, 31);
	}
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

static uint32_t hdr_check(uint32_t seq, uint32_t rep_len, uint8_t act,
			  uint16_t delay, size_t len)
{
	return (uint32_t)mix64((uint64_t)seq << 32 ^ rep_len ^
			       (uint64_t)act << 56 ^ (uint64_t)delay << 40 ^
			       (uint64_t)len * 0x9e3779b97f4a7c15ull);
}

/* The request of call seq: header, then rt_pat(seq, i). */
static void req_fill(uint8_t *b, uint32_t seq, const struct plan *p)
{
	rt_fill(b, p->len, seq);
	if (p->len < LC_HDR)
		return;
	put32(b, seq);
	put32(b + 4, (uint32_t)p->rep_len);
	b[8] = (uint8_t)p->act;
	b[9] = 0;
	b[10] = (uint8_t)p->delay_ms;
	b[11] = (uint8_t)(p->delay_ms >> 8);
	put32(b + 12, hdr_check(seq, (uint32_t)p->rep_len, (uint8_t)p->act,
				(uint16_t)p->delay_ms, p->len));
}

/* ------------------------------------------------------------------------ */
/* The server                                                               */

static void reply_done(evr_conn *c, int status, void *arg)
{
	struct pend *q = arg;
	struct lc *lc = q->lc;

	(void)c;
	lc->reply_cbs++;
	/* a late rendezvous reply may be refused by the client unread */
	if (status) {
		lc->reply_cb_err++;
		if (status != -ECANCELED)
			lc_err(lc, "reply to call %u: its send ended with %s",
			       q->seq, evr_err_name(status));
	}
	free(q);
}

/* Answer q's request, and free q (now, or when the reply's send ends). */
static void answer(struct pend *q)
{
	struct lc *lc = q->lc;
	struct pend *rq;
	uint32_t seq = q->seq;
	int rc;

	/* the reply's buffer lives behind its pend until the send ends */
	rq = malloc(sizeof(*rq) + (q->rep_len ? q->rep_len : 1));
	if (!rq) {
		lc_err(lc, "out of memory");
		evr_request_drop(q->r);
		free(q);
		return;
	}
	*rq = *q;
	rt_fill(rq + 1, q->rep_len, REP_SEQ(q->seq));
	rc = evr_reply(q->r, rq + 1, q->rep_len, reply_done, rq);
	free(q);
	if (rc == 0) {
		lc->answered++;
		return;
	}
	free(rq);
	if (rc == -ECANCELED)
		lc->refused++;
	else
		lc_err(lc, "evr_reply to call %u: %s", seq, evr_err_name(rc));
}

static void pend_due(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct pend *q = w->data;

	(void)loop;
	(void)revents;
	q->lc->pending--;
	answer(q);
}

static void srv_request(evr_conn *c, evr_request *r, const void *data,
			size_t len, void *arg)
{
	struct side *s = arg;
	struct lc *lc = s->c->lc;
	const uint8_t *p = data;
	struct pend *q;
	uint32_t seq, rep_len, chk;
	uint16_t delay;
	uint8_t act;

	lc->requests++;
	if (c != s->conn || evr_request_conn(r) != c)
		lc_err(lc, "on_request on the wrong conn");
	if (len == 0) {
		/* an empty request: an empty reply */
		q = calloc(1, sizeof(*q));
		if (!q) {
			lc_err(lc, "out of memory");
			evr_request_drop(r);
			return;
		}
		q->lc = lc;
		q->r = r;
		q->seq = UINT32_MAX;
		lc->srv_by_act[ACT_ANSWER]++;
		answer(q);
		return;
	}
	if (len < LC_HDR) {
		lc_err(lc, "a request of %zu bytes: none was sent", len);
		evr_request_drop(r);
		return;
	}
	seq = get32(p);
	rep_len = get32(p + 4);
	act = p[8];
	delay = (uint16_t)(p[10] | p[11] << 8);
	chk = get32(p + 12);
	if (chk != hdr_check(seq, rep_len, act, delay, len) ||
	    seq >= lc->total || act >= ACT_COUNT) {
		lc_err(lc,
		       "a request of %zu bytes with a bad header (seq %u): "
		       "read after its callback?",
		       len, seq);
		evr_request_drop(r);
		return;
	}
	for (size_t i = LC_HDR; i < len; i++)
		if (p[i] != rt_pat(seq, i)) {
			lc_err(lc,
			       "request %u (%zu bytes): byte %zu is 0x%02x, "
			       "not 0x%02x: read after its callback?",
			       seq, len, i, p[i], rt_pat(seq, i));
			evr_request_drop(r);
			return;
		}
	lc->srv_by_act[act]++;
	if (act == ACT_DROP) {
		evr_request_drop(r);
		return;
	}
	q = calloc(1, sizeof(*q));
	if (!q) {
		lc_err(lc, "out of memory");
		evr_request_drop(r);
		return;
	}
	q->lc = lc;
	q->r = r;
	q->seq = seq;
	q->rep_len = rep_len;
	switch (act) {
	case ACT_ANSWER:
		answer(q);
		break;
	case ACT_DELAY:
		ev_timer_init(&q->w, pend_due, delay / 1000.0, 0.);
		q->w.data = q;
		ev_timer_start(lc->loop, &q->w);
		lc->pending++;
		break;
	default:
		if (lc->nheld == lc->held_cap) {
			size_t cap = lc->held_cap ? 2 * lc->held_cap : 64;
			struct pend **h = realloc(lc->held, cap * sizeof(*h));

			if (!h) {
				lc_err(lc, "out of memory");
				evr_request_drop(r);
				free(q);
				return;
			}
			lc->held = h;
			lc->held_cap = cap;
		}
		lc->held[lc->nheld++] = q;
		break;
	}
}

/* ------------------------------------------------------------------------ */
/* The client                                                               */

static void pump(struct lconn *c);

/* Cancel the call in s, which is in flight. */
static void do_cancel(struct slot *s)
{
	struct lc *lc = s->c->lc;
	int rc;

	lc->cancelling = s;
	lc->cancel_fired = false;
	rc = evr_call_cancel(s->c->cli.conn, s->id);
	lc->cancelling = NULL;
	if (rc == 0) {
		if (lc->cancel_fired)
			lc->cancels_inside++;
		else
			s->cancel_ok = true;
	} else if (rc == -ENOENT) {
		/* it ended already: its callback is due in this iteration */
		lc->cancel_enoent++;
		if (lc->cancel_fired)
			lc_err(lc,
			       "call %u: evr_call_cancel fired the callback "
			       "and returned -ENOENT",
			       s->seq);
	} else {
		lc_err(lc, "call %u: evr_call_cancel: %s", s->seq,
		       evr_err_name(rc));
	}
}

static void cancel_due(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct slot *s = w->data;

	(void)loop;
	(void)revents;
	if (!s->busy)
		return;
	s->c->lc->cancels_later++;
	do_cancel(s);
	pump(s->c);
}

static void call_cb(evr_conn *conn, int status, const void *reply, size_t len,
		    void *arg)
{
	struct slot *s = arg;
	struct lconn *c = s->c;
	struct lc *lc = c->lc;
	const struct plan *pl = &s->pl;
	double took = rt_now() - s->t0;
	bool inside = lc->cancelling == s;
	long bad;

	if (!s->busy) {
		lc_err(lc, "a callback (%s) for no call in flight",
		       evr_err_name(status));
		return;
	}
	if (conn != c->cli.conn || c->cli.closes)
		lc_err(lc, "call %u: callback on the wrong conn", s->seq);
	if (++lc->cbs[s->seq] != 1)
		lc_err(lc, "call %u: callback %u", s->seq, lc->cbs[s->seq]);
	ev_timer_stop(lc->loop, &s->cancel_w);
	if (inside)
		lc->cancel_fired = true;
	switch (status) {
	case 0:
		lc->n_ok++;
		lc->ok_by_act[pl->act]++;
		if (pl->act == ACT_DROP || pl->act == ACT_HOLD)
			lc_err(lc, "call %u: a reply, but the server %s it",
			       s->seq, act_str[pl->act]);
		if (inside || s->cancel_ok)
			lc_err(lc, "call %u: a reply after its cancel", s->seq);
		if (pl->timeout_ms &&
		    took > pl->timeout_ms / 1000.0 + lc->slack)
			lc_err(lc,
			       "call %u: a reply %.3f s after the call, past "
			       "its deadline of %u ms",
			       s->seq, took, pl->timeout_ms);
		if (len != pl->rep_len) {
			lc_err(lc, "call %u: a reply of %zu bytes, not %zu",
			       s->seq, len, pl->rep_len);
			break;
		}
		bad = rt_verify(reply, len, REP_SEQ(s->seq));
		if (bad >= 0)
			lc_err(lc, "call %u: reply byte %ld differs", s->seq,
			       bad);
		break;
	case -ETIMEDOUT:
		lc->n_expired++;
		if (!pl->timeout_ms)
			lc_err(lc, "call %u: -ETIMEDOUT without a deadline",
			       s->seq);
		else if (took < pl->timeout_ms / 1000.0 - 0.02)
			lc_err(lc,
			       "call %u: -ETIMEDOUT after %.3f s, deadline "
			       "%u ms",
			       s->seq, took, pl->timeout_ms);
		if (inside || s->cancel_ok)
			lc_err(lc, "call %u: -ETIMEDOUT after its cancel",
			       s->seq);
		break;
	case -ECANCELED:
		lc->n_cancelled++;
		if (!inside && !s->cancel_ok)
			lc_err(lc, "call %u: -ECANCELED, not cancelled",
			       s->seq);
		break;
	default:
		lc_err(lc, "call %u: status %s", s->seq, evr_err_name(status));
		break;
	}
	/* the buffer is the caller's again: a read of it from now on would
	 * hand the server other bytes */
	memset(s->buf, POISON, pl->len);
	s->busy = false;
	c->free_idx[c->nfree++] = s->idx;
	lc->fired++;
	pump(c);
}

/* Make calls on c until its window is full or all are made.  Not
 * reentered: a callback from inside the cancel below does not pump. */
static void pump(struct lconn *c)
{
	struct lc *lc = c->lc;

	if (c->pumping)
		return;
	c->pumping = true;
	while (c->nfree && lc->next < lc->total && !lc->nerr && c->cli.conn) {
		struct slot *s = &c->slots[c->free_idx[c->nfree - 1]];
		struct plan *pl = &s->pl;
		int rc;

		s->seq = lc->next++;
		plan_of(lc->seed, s->seq, pl);
		req_fill(s->buf, s->seq, pl);
		s->cancel_ok = false;
		s->busy = true;
		c->nfree--;
		lc->by_act[pl->act]++;
		lc->rndv_req += pl->len > LC_EAGER;
		lc->rndv_rep += pl->rep_len > LC_EAGER;
		lc->bytes += pl->len + pl->rep_len;
		s->t0 = rt_now();
		rc = evr_call(c->cli.conn, pl->len ? s->buf : NULL, pl->len,
			      pl->timeout_ms, call_cb, s, &s->id);
		if (rc) {
			lc_err(lc, "evr_call %u: %s", s->seq, evr_err_name(rc));
			s->busy = false;
			c->nfree++;
			break;
		}
		if (pl->cancel == CANCEL_NOW) {
			lc->cancels_now++;
			do_cancel(s);
		} else if (pl->cancel == CANCEL_LATER) {
			ev_timer_set(&s->cancel_w, pl->cancel_ms / 1000.0, 0.);
			ev_timer_start(lc->loop, &s->cancel_w);
		}
	}
	c->pumping = false;
}

/* ------------------------------------------------------------------------ */
/* Connections                                                              */

static void side_connect(evr_conn *c, int status, void *arg)
{
	struct side *s = arg;

	s->connects++;
	s->connect_status = status;
	s->conn = status ? NULL : c;
}

static void side_close(evr_conn *c, int status, void *arg)
{
	struct side *s = arg;

	(void)c;
	s->closes++;
	s->close_status = status;
	s->conn = NULL;
}

static void lc_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct lc *lc = arg;
	struct evr_conn_opts o;
	uint8_t k = ulen == 1 ? *(const uint8_t *)ud : 0xff;

	(void)l;
	lc->accepts++;
	if (k >= LC_CONNS) {
		evr_reject(req, "?", 1);
		return;
	}
	evr_conn_opts_init(&o);
	o.on_connect = side_connect;
	o.on_close = side_close;
	o.on_request = srv_request;
	o.arg = &lc->conns[k].srv;
	if (evr_accept(req, &o, NULL))
		lc_err(lc, "evr_accept failed");
}

static int lc_up(void *arg)
{
	struct lc *lc = arg;

	for (int k = 0; k < LC_CONNS; k++)
		if (!lc->conns[k].cli.connects || !lc->conns[k].srv.connects)
			return 0;
	return 1;
}

static int lc_closed(void *arg)
{
	struct lc *lc = arg;

	for (int k = 0; k < LC_CONNS; k++)
		if (!lc->conns[k].cli.closes || !lc->conns[k].srv.closes)
			return 0;
	return 1;
}

static int lc_quiet(void *arg)
{
	struct lc *lc = arg;
	struct evr_stats st;

	evr_ctx_stats(lc->ctx, &st);
	return lc->pending == 0 && lc->reply_cbs >= lc->answered &&
	       st.late_replies + lc->n_ok >= lc->answered;
}

static uint32_t lc_calls(void)
{
	const char *e = getenv("EVR_CALLS_N");
	unsigned long v;

	if (!e || !*e)
		return rt_on_valgrind() ? LC_VG_DEFAULT : LC_DEFAULT;
	v = strtoul(e, NULL, 0);
	if (v < 1 || v > 1000000000ul) {
		fprintf(stderr, "EVR_CALLS_N: %s is out of range\n", e);
		exit(99);
	}
	return (uint32_t)v;
}

static void lc_setup(struct lc *lc)
{
	struct evr_ctx_opts o;

	lc->loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(lc->loop);
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&lc->ctx, lc->loop, &o), 0);
	assert_int_equal(
	    evr_listen(lc->ctx, rt_addr(), 0, 16, lc_accept, lc, &lc->l), 0);
	for (uint8_t k = 0; k < LC_CONNS; k++) {
		struct lconn *c = &lc->conns[k];
		struct evr_conn_opts co;

		c->lc = lc;
		c->cli.c = c->srv.c = c;
		for (int i = 0; i < LC_WINDOW; i++) {
			struct slot *s = &c->slots[i];

			s->c = c;
			s->idx = i;
			s->buf = malloc(LC_MAX);
			assert_non_null(s->buf);
			ev_timer_init(&s->cancel_w, cancel_due, 0., 0.);
			s->cancel_w.data = s;
			c->free_idx[i] = i;
		}
		c->nfree = LC_WINDOW;
		evr_conn_opts_init(&co);
		co.on_connect = side_connect;
		co.on_close = side_close;
		co.arg = &c->cli;
		co.user_data = &k;
		co.user_len = 1;
		assert_int_equal(evr_connect(lc->ctx, rt_addr(),
					     evr_listener_port(lc->l), &co,
					     NULL),
				 0);
	}
	assert_int_equal(rt_run_until(lc->loop, lc_up, lc, 30), 0);
	assert_int_equal(lc->accepts, LC_CONNS);
	for (int k = 0; k < LC_CONNS; k++) {
		assert_int_equal(lc->conns[k].cli.connect_status, 0);
		assert_int_equal(lc->conns[k].srv.connect_status, 0);
	}
}

static void tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents;
}

static void test_calls_long(void **state)
{
	struct lc *lc = calloc(1, sizeof(*lc));
	const char *env = getenv("EVR_CALLS_SEED");
	struct evr_stats st;
	uint64_t last_fired = 0, late;
	double t0, dt, last_move, last_report;
	ev_timer tk;

	(void)state;
	assert_non_null(lc);
	lc->total = lc_calls();
	lc->seed = env && *env
		       ? strtoull(env, NULL, 0)
		       : mix64((uint64_t)time(NULL) ^ (uint64_t)getpid() << 32);
	lc->slack = 1.0 * rt_timeout_scale();
	lc->cbs = calloc(lc->total, 1);
	assert_non_null(lc->cbs);
	printf("# %u calls over %d connections, %d in flight on each, seed "
	       "0x%llx (EVR_CALLS_N, EVR_CALLS_SEED)\n",
	       lc->total, LC_CONNS, LC_WINDOW, (unsigned long long)lc->seed);
	lc_setup(lc);

	/* a wakeup a second at least, for the stall check */
	ev_timer_init(&tk, tick, 1., 1.);
	ev_timer_start(lc->loop, &tk);
	t0 = last_move = last_report = rt_now();
	for (int k = 0; k < LC_CONNS; k++)
		pump(&lc->conns[k]);
	while (lc->fired < lc->total && !lc->nerr) {
		double now;

		ev_run(lc->loop, EVRUN_ONCE);
		now = rt_now();
		if (lc->fired != last_fired) {
			last_fired = lc->fired;
			last_move = now;
		} else if (now - last_move > LC_STALL_S * rt_timeout_scale()) {
			lc_err(lc, "no call ended for %.0f s (%llu of %u)",
			       now - last_move, (unsigned long long)lc->fired,
			       lc->total);
			break;
		}
		if (now - last_report >= LC_REPORT_S) {
			last_report = now;
			printf("# %.0f s: %llu of %u calls ended\n", now - t0,
			       (unsigned long long)lc->fired, lc->total);
		}
		for (int k = 0; k < LC_CONNS; k++)
			if (lc->conns[k].cli.closes || lc->conns[k].srv.closes)
				lc_err(
				    lc, "connection %d ended: %s / %s", k,
				    evr_err_name(lc->conns[k].cli.close_status),
				    evr_err_name(
					lc->conns[k].srv.close_status));
	}
	dt = rt_now() - t0;
	ev_timer_stop(lc->loop, &tk);
	if (lc->nerr)
		fail_msg("%s (%llu errors)", lc->first_err,
			 (unsigned long long)lc->nerr);

	/* the delayed answers go out; then the held ones, long after their
	 * calls ended (refused, or late replies) */
	assert_int_equal(rt_run_until(lc->loop, lc_quiet, lc, 30), 0);
	for (size_t i = 0; i < lc->nheld; i++)
		answer(lc->held[i]);
	lc->nheld = 0;
	assert_int_equal(rt_run_until(lc->loop, lc_quiet, lc, 30), 0);
	rt_run_for(lc->loop, 0.1 * rt_timeout_scale());
	if (lc->nerr)
		fail_msg("%s (%llu errors)", lc->first_err,
			 (unsigned long long)lc->nerr);

	evr_ctx_stats(lc->ctx, &st);
	late = lc->answered - lc->n_ok;
	printf("# %u calls in %.1f s: %.0f calls/s, %.1f MB; ok %llu, "
	       "timed out %llu, cancelled %llu (at once %llu, later %llu; "
	       "%llu callbacks inside evr_call_cancel, %llu -ENOENT); "
	       "rendezvous %llu requests, %llu replies\n",
	       lc->total, dt, lc->total / dt, (double)lc->bytes / 1e6,
	       (unsigned long long)lc->n_ok, (unsigned long long)lc->n_expired,
	       (unsigned long long)lc->n_cancelled,
	       (unsigned long long)lc->cancels_now,
	       (unsigned long long)lc->cancels_later,
	       (unsigned long long)lc->cancels_inside,
	       (unsigned long long)lc->cancel_enoent,
	       (unsigned long long)lc->rndv_req,
	       (unsigned long long)lc->rndv_rep);
	printf("# server: %llu requests (%llu answered, %llu delayed, %llu "
	       "dropped, %llu held), %llu answers refused (-ECANCELED), "
	       "%llu late replies, %llu late rendezvous replies refused; "
	       "stats: requests_cancelled %llu\n",
	       (unsigned long long)lc->requests,
	       (unsigned long long)lc->srv_by_act[ACT_ANSWER],
	       (unsigned long long)lc->srv_by_act[ACT_DELAY],
	       (unsigned long long)lc->srv_by_act[ACT_DROP],
	       (unsigned long long)lc->srv_by_act[ACT_HOLD],
	       (unsigned long long)lc->refused, (unsigned long long)late,
	       (unsigned long long)lc->reply_cb_err,
	       (unsigned long long)st.requests_cancelled);

	/* every call ended once */
	for (uint32_t k = 0; k < lc->total; k++)
		if (lc->cbs[k] != 1)
			fail_msg("call %u: %u callbacks", k, lc->cbs[k]);
	assert_int_equal(lc->fired, lc->total);
	assert_int_equal(lc->n_ok + lc->n_expired + lc->n_cancelled, lc->total);
	for (int k = 0; k < LC_CONNS; k++)
		assert_int_equal(lc->conns[k].nfree, LC_WINDOW);
	/* the library counted what the test saw; no call ended with its
	 * connection */
	assert_int_equal(st.calls, lc->total);
	assert_int_equal(st.calls_ok, lc->n_ok);
	assert_int_equal(st.calls_expired, lc->n_expired);
	assert_int_equal(st.calls_cancelled, lc->n_cancelled);
	assert_int_equal(st.calls,
			 st.calls_ok + st.calls_expired + st.calls_cancelled);
	assert_int_equal(st.requests, lc->requests);
	assert_int_equal(st.requests_unserved, 0);
	/* a reply that went out found its call, or was counted late */
	assert_int_equal(lc->reply_cbs, lc->answered);
	assert_int_equal(st.late_replies, late);
	/* the plans were carried out: answered calls ended with replies */
	assert_int_equal(lc->ok_by_act[ACT_DROP] + lc->ok_by_act[ACT_HOLD], 0);
	if (lc->total >= 100000) {
		assert_true(lc->n_expired > 0);
		assert_true(lc->n_cancelled > 0);
		assert_true(lc->rndv_req > 0 && lc->rndv_rep > 0);
		assert_true(lc->srv_by_act[ACT_DROP] > 0);
		assert_true(lc->srv_by_act[ACT_HOLD] > 0);
	}

	for (int k = 0; k < LC_CONNS; k++)
		assert_int_equal(evr_conn_close(lc->conns[k].cli.conn, 0), 0);
	assert_int_equal(rt_run_until(lc->loop, lc_closed, lc, 30), 0);
	for (int k = 0; k < LC_CONNS; k++) {
		assert_int_equal(lc->conns[k].cli.closes, 1);
		assert_int_equal(lc->conns[k].srv.closes, 1);
		assert_int_equal(lc->conns[k].cli.close_status, 0);
		assert_int_equal(lc->conns[k].srv.close_status, -ESHUTDOWN);
	}
	evr_listener_close(lc->l);
	evr_ctx_destroy(lc->ctx);
	ev_loop_destroy(lc->loop);
	for (int k = 0; k < LC_CONNS; k++)
		for (int i = 0; i < LC_WINDOW; i++)
			free(lc->conns[k].slots[i].buf);
	free(lc->held);
	free(lc->cbs);
	free(lc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_calls_long),
	};
	/* a wide margin over the default run's time in the emulated guest;
	 * it grows with EVR_CALLS_N */
	unsigned bound = 300 + lc_calls() / 400;

	rt_init(bound);
	return cmocka_run_group_tests_name("rdma_calls_long", tests, NULL,
					   NULL);
}
