/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Public API pieces on a real verbs stack, each against what
 * include/evrdma.h says of it:
 *
 *  set_mode_in_callback  evr_ctx_set_mode() from inside on_recv, at both
 *                        ends, through every transition between EVENT,
 *                        POLL and ADAPTIVE, while a window of messages
 *                        (eager and rendezvous) is in flight: evr_ctx_mode()
 *                        and the stats follow each call, nothing is lost,
 *                        every byte arrives in order -- on a libev loop and
 *                        through the embedding fd.
 *  listener_close        evr_listener_close() with connect requests pending
 *                        (queued, not yet seen by the ctx) and from inside
 *                        the accept callback, before or after accepting
 *                        the request in hand: each refused client's
 *                        on_connect fires once with -ECONNREFUSED, the
 *                        accept callback never fires after the close, and a
 *                        new listener on the same port works.
 *  ctx_run               evr_ctx_run(), evr_ctx_stop(), evr_ctx_loop() and
 *                        evr_ctx_device() on a ctx with a private loop.
 *  conn_arg              evr_conn_set_arg() / evr_conn_arg(): every later
 *                        callback of the conn gets the new arg.
 *  conn_info             every field of evr_conn_info() from before the
 *                        connection is up to its close, against the limits
 *                        each end configured.
 *  recv_wrs              evr_stats.recv_wrs: the receives each connection
 *                        posts up front, plus one re-post per message
 *                        consumed (held messages only once released).
 *  device                evr_ctx_opts.device, EVR_DEVICE and local_addr,
 *                        and which of them wins; -ENODEV for a device that
 *                        does not exist and for an address on another
 *                        device (listen, connect); a request that reaches a
 *                        wildcard listener through another device than its
 *                        ctx's is rejected.  The cases that need a second
 *                        device run only in the Soft-RoCE guest.
 *  wildcard_listen       listening on NULL, "0.0.0.0" and "::": clients
 *                        reach it over IPv4 (and IPv6 for "::"), and an
 *                        unbound ctx binds to the device of the first.
 *  access                one-sided operations a region's EVR_ACCESS_*
 *                        flags refuse (-EACCES, and the connection fails)
 *                        and those they allow, into a local-only region.
 *  queue_lowat           an explicit send_queue_lowat: on_drain fires once,
 *                        exactly when the queued bytes reach it.
 *  peer_addr             evr_conn_req_peer_addr() in the accept callback,
 *                        evr_conn_peer_addr() and evr_conn_local_addr() at
 *                        both ends, over IPv4 and IPv6: the server sees the
 *                        client's own address and port, each end's peer is
 *                        the other's local; a short buffer gets the first
 *                        bytes and the whole size; a listener rejecting by
 *                        address refuses that client (-ECONNREFUSED with
 *                        its reason) and only it.
 */
#include "rt_pair.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdbool.h>

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

/* Options without local_addr: the ctx is not bound to a device until its
 * first listen or connect (unless EVR_DEVICE names one). */
static void bare_opts(struct evr_ctx_opts *o)
{
	rt_ctx_opts(o);
	o->local_addr = NULL;
}

/* EVR_DEVICE of the environment the test was started in, restored after
 * the cases that set or clear it. */
static char *saved_evr_device;

static void env_device(const char *v)
{
	if (v)
		assert_int_equal(setenv("EVR_DEVICE", v, 1), 0);
	else
		assert_int_equal(unsetenv("EVR_DEVICE"), 0);
}

static void env_device_restore(void)
{
	env_device(saved_evr_device);
}

static bool in_guest(void)
{
	const char *g = getenv("EVR_IN_GUEST");

	return g && *g;
}

/* A message buffer that frees itself in its send callback, counting the
 * callback in *ok or *err. */
struct owned {
	int *ok, *err;
	size_t len;
	uint8_t data[];
};

static void owned_sent(evr_conn *c, int status, void *arg)
{
	struct owned *m = arg;

	(void)c;
	if (status == 0)
		(*m->ok)++;
	else
		(*m->err)++;
	free(m);
}

static struct owned *owned_new(const void *data, size_t len, int *ok, int *err)
{
	struct owned *m = malloc(sizeof(*m) + (len ? len : 1));

	assert_non_null(m);
	m->ok = ok;
	m->err = err;
	m->len = len;
	if (len)
		memcpy(m->data, data, len);
	return m;
}

/* An echo server on any ctx: echoes every message it receives. */
struct echo_srv {
	evr_ctx *ctx;
	evr_listener *l;
	struct evr_conn_opts o;
	int accepts, connects, connect_status, closes, close_status;
	int recvs, sent_ok, sent_err;
};

static void es_connect(evr_conn *c, int status, void *arg)
{
	struct echo_srv *s = arg;

	(void)c;
	s->connects++;
	s->connect_status = status;
}

static void es_close(evr_conn *c, int status, void *arg)
{
	struct echo_srv *s = arg;

	(void)c;
	s->closes++;
	s->close_status = status;
}

static void es_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct echo_srv *s = arg;
	struct owned *m = owned_new(data, len, &s->sent_ok, &s->sent_err);

	s->recvs++;
	assert_int_equal(evr_send(c, m->data, len, owned_sent, m), 0);
}

static void es_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct echo_srv *s = arg;

	(void)l;
	(void)ud;
	(void)ulen;
	s->accepts++;
	assert_int_equal(evr_accept(req, &s->o, NULL), 0);
}

static void es_init(struct echo_srv *s, evr_ctx *ctx)
{
	memset(s, 0, sizeof(*s));
	s->ctx = ctx;
	evr_conn_opts_init(&s->o);
	s->o.on_connect = es_connect;
	s->o.on_recv = es_recv;
	s->o.on_close = es_close;
	s->o.arg = s;
}

/* Listen on host:port; returns evr_listen()'s result. */
static int es_listen(struct echo_srv *s, evr_ctx *ctx, const char *host,
		     uint16_t port)
{
	es_init(s, ctx);
	return evr_listen(ctx, host, port, 16, es_accept, s, &s->l);
}

static int es_closed(void *arg)
{
	struct echo_srv *s = arg;

	return s->closes >= s->accepts;
}

/* A client end: counts its callbacks and keeps the last message. */
struct cli {
	evr_conn *c;
	int connects, connect_status, closes, close_status;
	size_t rej_len; /* reject reason length seen in on_connect */
	int recvs;
	uint8_t got[512];
	size_t got_len;
	int sent_ok, sent_err;
};

static void cl_connect(evr_conn *c, int status, void *arg)
{
	struct cli *k = arg;

	k->connects++;
	k->connect_status = status;
	k->c = status ? NULL : c;
	if (status)
		(void)evr_conn_reject_reason(c, &k->rej_len);
}

static void cl_close(evr_conn *c, int status, void *arg)
{
	struct cli *k = arg;

	(void)c;
	k->closes++;
	k->close_status = status;
	k->c = NULL;
}

static void cl_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct cli *k = arg;

	(void)c;
	k->recvs++;
	k->got_len = len;
	memcpy(k->got, data, len < sizeof(k->got) ? len : sizeof(k->got));
}

static void cl_opts(struct cli *k, struct evr_conn_opts *o)
{
	memset(k, 0, sizeof(*k));
	evr_conn_opts_init(o);
	o->on_connect = cl_connect;
	o->on_recv = cl_recv;
	o->on_close = cl_close;
	o->arg = k;
}

static int cl_connected(void *arg)
{
	return ((struct cli *)arg)->connects > 0;
}

static int cl_echoed(void *arg)
{
	struct cli *k = arg;

	return k->recvs > 0 || k->closes > 0;
}

static int cl_closed(void *arg)
{
	return ((struct cli *)arg)->closes > 0;
}

/*
 * Connect from cctx to host:port (a server whose ctx runs on `loop` or is
 * driven from it), send one message, check that the echo is byte for byte
 * the message, and close gracefully.
 */
static void echo_once(struct ev_loop *loop, evr_ctx *cctx, const char *host,
		      uint16_t port)
{
	struct evr_conn_opts o;
	struct cli k;
	uint8_t msg[300];

	cl_opts(&k, &o);
	rt_fill(msg, sizeof(msg), port);
	assert_int_equal(evr_connect(cctx, host, port, &o, NULL), 0);
	assert_int_equal(rt_run_until(loop, cl_connected, &k, 20), 0);
	if (k.connect_status)
		printf("# connect to %s port %u: %s\n", host, port,
		       evr_err_name(k.connect_status));
	assert_int_equal(k.connect_status, 0);
	assert_int_equal(evr_send(k.c, msg, sizeof(msg), owned_sent,
				  owned_new(NULL, 0, &k.sent_ok, &k.sent_err)),
			 0);
	assert_int_equal(rt_run_until(loop, cl_echoed, &k, 20), 0);
	assert_int_equal(k.recvs, 1);
	assert_int_equal(k.got_len, sizeof(msg));
	assert_memory_equal(k.got, msg, sizeof(msg));
	assert_int_equal(evr_conn_close(k.c, 0), 0);
	assert_int_equal(rt_run_until(loop, cl_closed, &k, 20), 0);
	assert_int_equal(k.close_status, 0);
	assert_int_equal(k.connects, 1);
	assert_int_equal(k.closes, 1);
	assert_int_equal(k.sent_ok, 1);
	assert_int_equal(k.sent_err, 0);
}

/*
 * Drive a ctx that has a private loop the way an embedding host does:
 * evr_ctx_process(), then sleep in poll() on evr_ctx_fd() for at most
 * evr_ctx_timeout_ms().  Returns 0 once pred(arg) holds, -1 after
 * `seconds` (times EVR_TEST_TIMEOUT_SCALE).
 */
static int run_embedded(evr_ctx *ctx, int (*pred)(void *), void *arg,
			double seconds)
{
	double end = rt_now() + seconds * rt_timeout_scale();
	int fd = evr_ctx_fd(ctx);

	assert_true(fd >= 0);
	for (;;) {
		struct pollfd pfd = {.fd = fd, .events = POLLIN};
		double left;
		int t, ms;

		assert_int_equal(evr_ctx_process(ctx), 0);
		if (pred(arg))
			return 0;
		left = end - rt_now();
		if (left <= 0)
			return -1;
		ms = (int)(left * 1000.) + 1;
		t = evr_ctx_timeout_ms(ctx);
		if (t >= 0 && t < ms)
			ms = t;
		(void)poll(&pfd, 1, ms);
	}
}

/* ------------------------------------------------------------------------ */
/* evr_ctx_set_mode() from inside callbacks                                 */

#define SM_N   1500
#define SM_WIN 8
#define SM_BIG 20000 /* above the default eager size: a rendezvous */

struct sm {
	struct rt_pair *p;
	uint32_t sent, got, echoed;
	int send_ok, send_err, echo_ok, echo_err;
	int bad;	     /* a message that arrived wrong */
	unsigned sets;	     /* evr_ctx_set_mode() calls made from callbacks */
	unsigned seen[3][3]; /* transitions done: [before][requested] */
};

static size_t sm_len(uint32_t k)
{
	return k % 97 == 5 ? SM_BIG : 1 + (k * 37u) % 3000;
}

/* Switch the mode and check what the header promises right away: the
 * mode in effect is the one asked for, or for ADAPTIVE the one in effect
 * before (it starts from there); the stats report the same. */
static void sm_set(struct sm *s, evr_ctx *ctx, enum evr_mode m)
{
	enum evr_mode before = evr_ctx_mode(ctx);
	enum evr_mode want = m == EVR_MODE_ADAPTIVE ? before : m;
	struct evr_stats st;

	assert_int_equal(evr_ctx_set_mode(ctx, m), 0);
	assert_int_equal(evr_ctx_mode(ctx), want);
	evr_ctx_stats(ctx, &st);
	assert_int_equal(st.mode, want);
	s->seen[before][m]++;
	s->sets++;
}

static void sm_pump(struct sm *s)
{
	evr_conn *c = s->p->cli.conn;

	while (c && s->sent < SM_N && s->sent < s->got + SM_WIN) {
		size_t len = sm_len(s->sent);
		struct owned *m = owned_new(NULL, 0, &s->send_ok, &s->send_err);

		m = realloc(m, sizeof(*m) + len);
		assert_non_null(m);
		rt_fill(m->data, len, s->sent);
		assert_int_equal(evr_send(c, m->data, len, owned_sent, m), 0);
		s->sent++;
	}
}

/* Client: check the echo, switch the mode every 5th message (every
 * transition in turn: EVENT->POLL->EVENT->ADAPTIVE->POLL->ADAPTIVE->EVENT
 * when nothing else switches in between), send the next. */
static void sm_cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	static const enum evr_mode seq[] = {EVR_MODE_POLL,     EVR_MODE_EVENT,
					    EVR_MODE_ADAPTIVE, EVR_MODE_POLL,
					    EVR_MODE_ADAPTIVE, EVR_MODE_EVENT};
	struct sm *s = ((struct rt_side *)arg)->user;
	uint32_t k = s->got++;

	(void)c;

	if (len != sm_len(k) || rt_verify(data, len, k) >= 0)
		s->bad++;
	if (k == 1) {
		/* a mode that does not exist changes nothing */
		enum evr_mode now = evr_ctx_mode(s->p->ctx);

		assert_int_equal(evr_ctx_set_mode(s->p->ctx, (enum evr_mode)3),
				 -EINVAL);
		assert_int_equal(evr_ctx_mode(s->p->ctx), now);
	}
	if (k % 5 == 4)
		sm_set(s, s->p->ctx, seq[(k / 5) % ARRAY_SIZE(seq)]);
	sm_pump(s);
}

/* Server: echo, and switch too, at other times and in another order. */
static void sm_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	static const enum evr_mode seq[] = {EVR_MODE_ADAPTIVE, EVR_MODE_EVENT,
					    EVR_MODE_POLL};
	struct sm *s = ((struct rt_side *)arg)->user;
	struct owned *m = owned_new(data, len, &s->echo_ok, &s->echo_err);
	uint32_t n = s->echoed++;

	assert_int_equal(evr_send(c, m->data, len, owned_sent, m), 0);
	if (n % 7 == 3)
		sm_set(s, s->p->ctx, seq[(n / 7) % ARRAY_SIZE(seq)]);
}

static int sm_done(void *arg)
{
	struct sm *s = arg;

	return (s->got >= SM_N && s->send_ok + s->send_err >= SM_N &&
		s->echo_ok + s->echo_err >= SM_N) ||
	       s->bad || s->send_err || s->echo_err;
}

static void test_set_mode_in_callback(void **state)
{
	static const struct {
		const char *name;
		bool embedded; /* private loop, driven through evr_ctx_fd() */
		enum evr_mode start;
	} rows[] = {
	    {"libev loop, from EVENT", false, EVR_MODE_EVENT},
	    {"libev loop, from POLL", false, EVR_MODE_POLL},
	    {"embedding fd, from ADAPTIVE", true, EVR_MODE_ADAPTIVE},
	};

	(void)state;
	for (size_t i = 0; i < ARRAY_SIZE(rows); i++) {
		struct ev_loop *loop =
		    rows[i].embedded ? NULL : ev_loop_new(EVFLAG_AUTO);
		struct evr_ctx_opts o;
		struct rt_pair p;
		struct sm s;
		double t0;
		int rc;

		memset(&s, 0, sizeof(s));
		s.p = &p;
		rt_ctx_opts(&o);
		o.mode = rows[i].start;
		rt_pair_init(&p, loop, &o);
		if (rows[i].embedded)
			p.loop = evr_ctx_loop(p.ctx); /* for connect, close */
		p.cli.user = p.srv.user = &s;
		p.cli_opts.on_recv = sm_cli_recv;
		p.srv_opts.on_recv = sm_srv_recv;
		rt_pair_connect(&p);
		t0 = rt_now();
		sm_pump(&s);
		rc = rows[i].embedded ? run_embedded(p.ctx, sm_done, &s, 120)
				      : rt_run_until(p.loop, sm_done, &s, 120);
		printf("# %s: %u messages echoed, %u mode switches from "
		       "callbacks in %.2f s\n",
		       rows[i].name, s.got, s.sets, rt_now() - t0);
		printf("# requests from EVENT: EVENT %u, POLL %u, ADAPTIVE %u; "
		       "from POLL: EVENT %u, POLL %u, ADAPTIVE %u\n",
		       s.seen[0][0], s.seen[0][1], s.seen[0][2], s.seen[1][0],
		       s.seen[1][1], s.seen[1][2]);
		assert_int_equal(rc, 0);
		/* let a late duplicate show */
		rt_run_for(p.loop, 0.1);
		assert_int_equal(s.bad, 0);
		assert_int_equal(s.got, SM_N);
		assert_int_equal(s.sent, SM_N);
		assert_int_equal(s.send_ok, SM_N);
		assert_int_equal(s.send_err, 0);
		assert_int_equal(s.echo_ok, SM_N);
		assert_int_equal(s.echo_err, 0);
		assert_int_equal(s.sets, SM_N / 5 + (SM_N + 3) / 7);
		/* every mode was requested, from EVENT and from POLL */
		for (int b = 0; b < 2; b++)
			for (int m = 0; m < 3; m++)
				assert_true(s.seen[b][m] > 0);
		rt_pair_close(&p);
		assert_int_equal(p.cli.close_status, 0);
		assert_int_equal(p.srv.close_status, -ESHUTDOWN);
		rt_pair_fini(&p);
		if (loop)
			ev_loop_destroy(loop);
	}
}

/* ------------------------------------------------------------------------ */
/* evr_listener_close() with connect requests pending                       */

#define LC_CLIENTS 4

struct lc {
	evr_ctx *sctx, *cctx;
	struct ev_loop *cloop;
	evr_listener *l;
	uint16_t port;
	bool close_in_accept; /* accept the first request, then close */
	bool close_first;     /* ... close, then accept it */
	int accepts, accepts_after_close;
	bool closed;
	struct echo_srv es; /* the accepted conn's callbacks */
	struct cli k[LC_CLIENTS];
	evr_conn *h[LC_CLIENTS];
	ev_timer drive; /* runs the server's private loop from cloop */
};

static void lc_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct lc *t = arg;

	(void)ud;
	(void)ulen;
	t->accepts++;
	if (t->closed)
		t->accepts_after_close++;
	assert_ptr_equal(l, t->l);
	if (t->close_in_accept && t->close_first) {
		/* the request outlives its listener */
		evr_listener_close(l);
		t->l = NULL;
		t->closed = true;
		assert_int_equal(evr_accept(req, &t->es.o, NULL), 0);
	} else if (t->close_in_accept) {
		assert_int_equal(evr_accept(req, &t->es.o, NULL), 0);
		evr_listener_close(l);
		t->l = NULL;
		t->closed = true;
	}
	/* else: unanswered, which rejects it (not expected to happen) */
}

static void lc_drive(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct lc *t = w->data;

	(void)loop;
	(void)revents;
	assert_int_equal(evr_ctx_process(t->sctx), 0);
}

static int lc_all_answered(void *arg)
{
	struct lc *t = arg;

	for (int i = 0; i < LC_CLIENTS; i++)
		if (!t->k[i].connects)
			return 0;
	return 1;
}

static int lc_all_connecting(void *arg)
{
	struct lc *t = arg;
	struct evr_conn_info info;

	for (int i = 0; i < LC_CLIENTS; i++) {
		if (t->k[i].connects)
			return 1; /* answered already: the caller sees it */
		assert_int_equal(evr_conn_info(t->h[i], &info), 0);
		if (strcmp(info.state, "connecting"))
			return 0;
	}
	return 1;
}

static bool readable(int fd)
{
	struct pollfd pfd = {.fd = fd, .events = POLLIN};

	return poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN);
}

static void test_listener_close(void **state)
{
	static const struct {
		const char *name;
		bool in_accept, close_first;
	} rows[] = {
	    {"requests queued, not yet seen by the ctx", false, false},
	    {"closed from the accept callback of the first", true, false},
	    {"closed in the accept callback, then the first accepted", true,
	     true},
	};

	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		struct evr_ctx_opts o;
		struct evr_stats st;
		struct echo_srv es2;
		struct lc t;
		int refused = 0, ok = 0, ok_idx = -1;

		memset(&t, 0, sizeof(t));
		t.close_in_accept = rows[r].in_accept;
		t.close_first = rows[r].close_first;
		t.cloop = ev_loop_new(EVFLAG_AUTO);
		rt_ctx_opts(&o);
		/* the server on a loop of its own: it sees nothing until the
		 * test lets it */
		assert_int_equal(evr_ctx_create(&t.sctx, NULL, &o), 0);
		assert_int_equal(evr_ctx_create(&t.cctx, t.cloop, &o), 0);
		es_init(&t.es, t.sctx); /* for the conn accepted, if any */
		assert_int_equal(
		    evr_listen(t.sctx, rt_addr(), 0, 16, lc_accept, &t, &t.l),
		    0);
		t.port = evr_listener_port(t.l);
		ev_timer_init(&t.drive, lc_drive, 0.002, 0.002);
		t.drive.data = &t;
		if (t.close_in_accept)
			ev_timer_start(t.cloop, &t.drive);

		for (int i = 0; i < LC_CLIENTS; i++) {
			struct evr_conn_opts co;

			cl_opts(&t.k[i], &co);
			assert_int_equal(evr_connect(t.cctx, rt_addr(), t.port,
						     &co, &t.h[i]),
					 0);
		}
		if (!t.close_in_accept) {
			/* every client has sent its request; the server's
			 * rdma_cm channel holds it, unread */
			assert_int_equal(
			    rt_run_until(t.cloop, lc_all_connecting, &t, 20),
			    0);
			rt_run_for(t.cloop, 0.2);
			for (int i = 0; i < LC_CLIENTS; i++)
				assert_int_equal(t.k[i].connects, 0);
			assert_true(readable(evr_ctx_fd(t.sctx)));
			evr_listener_close(t.l);
			t.l = NULL;
			t.closed = true;
			ev_timer_start(t.cloop, &t.drive);
		}
		assert_int_equal(rt_run_until(t.cloop, lc_all_answered, &t, 20),
				 0);
		rt_run_for(t.cloop, 0.3); /* a second callback would show */
		for (int i = 0; i < LC_CLIENTS; i++) {
			assert_int_equal(t.k[i].connects, 1);
			if (t.k[i].connect_status == 0) {
				ok++;
				ok_idx = i;
				continue;
			}
			/* refused by the connection manager itself: no
			 * reason bytes from a peer */
			assert_int_equal(t.k[i].connect_status, -ECONNREFUSED);
			assert_int_equal(t.k[i].rej_len, 0);
			assert_int_equal(t.k[i].closes, 0);
			refused++;
		}
		printf("# %s: %d accepted, %d refused\n", rows[r].name, ok,
		       refused);
		assert_int_equal(t.accepts, t.close_in_accept ? 1 : 0);
		assert_int_equal(t.accepts_after_close, 0);
		assert_int_equal(ok, t.close_in_accept ? 1 : 0);
		assert_int_equal(refused, LC_CLIENTS - ok);
		evr_ctx_stats(t.sctx, &st);
		assert_int_equal(st.conns, ok);
		if (ok) {
			/* the connection accepted before the close works */
			uint8_t msg[64];

			assert_int_equal(t.es.connects, 1);
			assert_int_equal(t.es.connect_status, 0);
			rt_fill(msg, sizeof(msg), 7);
			assert_int_equal(evr_send(t.k[ok_idx].c, msg,
						  sizeof(msg), NULL, NULL),
					 0);
			assert_int_equal(
			    rt_run_until(t.cloop, cl_echoed, &t.k[ok_idx], 20),
			    0);
			assert_int_equal(t.k[ok_idx].got_len, sizeof(msg));
			assert_memory_equal(t.k[ok_idx].got, msg, sizeof(msg));
			assert_int_equal(evr_conn_close(t.k[ok_idx].c, 0), 0);
			assert_int_equal(
			    rt_run_until(t.cloop, cl_closed, &t.k[ok_idx], 20),
			    0);
			assert_int_equal(t.k[ok_idx].close_status, 0);
			t.es.accepts = 1; /* for es_closed */
			assert_int_equal(
			    rt_run_until(t.cloop, es_closed, &t.es, 20), 0);
			assert_int_equal(t.es.close_status, -ESHUTDOWN);
		}
		/* a new listener on the same port takes connections */
		assert_int_equal(es_listen(&es2, t.sctx, rt_addr(), t.port), 0);
		assert_int_equal(evr_listener_port(es2.l), t.port);
		echo_once(t.cloop, t.cctx, rt_addr(), t.port);
		assert_int_equal(es2.accepts, 1);
		assert_int_equal(t.accepts_after_close, 0);
		assert_int_equal(rt_run_until(t.cloop, es_closed, &es2, 20), 0);
		ev_timer_stop(t.cloop, &t.drive);
		evr_listener_close(es2.l);
		evr_ctx_destroy(t.cctx);
		evr_ctx_destroy(t.sctx);
		ev_loop_destroy(t.cloop);
	}
}

/* ------------------------------------------------------------------------ */
/* evr_ctx_run / evr_ctx_stop / evr_ctx_loop / evr_ctx_device               */

#define RUN_MSGS 5

struct runner {
	evr_ctx *ctx;
	int phase; /* 1 connect, 2 echo, 3 close */
	struct cli k;
	int srv_up, srv_closes, srv_close_status;
	int echo_ok, echo_err;
	int stops;
	int preps, preps_at_stop;
	int guard_fired;
	ev_prepare prep;
	ev_timer guard;
};

static void run_stop(struct runner *r)
{
	r->stops++;
	r->preps_at_stop = r->preps;
	evr_ctx_stop(r->ctx);
}

static void run_check_phase(struct runner *r)
{
	if (r->phase == 1 && r->k.connects && r->srv_up)
		run_stop(r);
	else if (r->phase == 2 && r->k.recvs == RUN_MSGS)
		run_stop(r);
	else if (r->phase == 3 && r->k.closes && r->srv_closes)
		run_stop(r);
}

static void run_cli_connect(evr_conn *c, int status, void *arg)
{
	struct runner *r = arg;

	r->k.connects++;
	r->k.connect_status = status;
	r->k.c = status ? NULL : c;
	run_check_phase(r);
}

static void run_cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct runner *r = arg;

	(void)c;
	if (len == 100 && rt_verify(data, len, (uint32_t)r->k.recvs) < 0)
		r->k.recvs++;
	else
		r->k.sent_err++; /* a wrong echo */
	run_check_phase(r);
}

static void run_cli_close(evr_conn *c, int status, void *arg)
{
	struct runner *r = arg;

	(void)c;
	r->k.closes++;
	r->k.close_status = status;
	r->k.c = NULL;
	run_check_phase(r);
}

static void run_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct runner *r = arg;
	struct owned *m = owned_new(data, len, &r->echo_ok, &r->echo_err);

	assert_int_equal(evr_send(c, m->data, len, owned_sent, m), 0);
}

static void run_srv_connect(evr_conn *c, int status, void *arg)
{
	struct runner *r = arg;

	(void)c;
	assert_int_equal(status, 0);
	r->srv_up++;
	run_check_phase(r);
}

static void run_srv_close(evr_conn *c, int status, void *arg)
{
	struct runner *r = arg;

	(void)c;
	r->srv_closes++;
	r->srv_close_status = status;
	run_check_phase(r);
}

static void run_srv_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			   size_t ulen, void *arg)
{
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = run_srv_connect;
	o.on_recv = run_srv_recv;
	o.on_close = run_srv_close;
	o.arg = arg;
	assert_int_equal(evr_accept(req, &o, NULL), 0);
}

static void run_prep(struct ev_loop *loop, ev_prepare *w, int revents)
{
	(void)loop;
	(void)revents;
	((struct runner *)w->data)->preps++;
}

static void run_guard(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct runner *r = w->data;

	(void)loop;
	(void)revents;
	r->guard_fired++;
	evr_ctx_stop(r->ctx);
}

/* One evr_ctx_run() of a phase: returns 0 once the phase's callback called
 * evr_ctx_stop(), and the loop ran no iteration after that one. */
static void run_phase(struct runner *r, int phase)
{
	struct ev_loop *loop = evr_ctx_loop(r->ctx);

	r->phase = phase;
	r->stops = 0;
	ev_timer_set(&r->guard, 20. * rt_timeout_scale(), 0.);
	ev_timer_start(loop, &r->guard);
	assert_int_equal(evr_ctx_run(r->ctx), 0);
	ev_timer_stop(loop, &r->guard);
	assert_int_equal(r->guard_fired, 0);
	assert_int_equal(r->stops, 1);
	/* "return after the current iteration": no prepare watcher (the
	 * start of the next iteration) ran after the stop */
	assert_int_equal(r->preps, r->preps_at_stop);
}

static void test_ctx_run(void **state)
{
	struct ev_loop *uloop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct runner *r = calloc(1, sizeof(*r));
	evr_listener *l;
	evr_ctx *uctx;
	uint8_t msgs[RUN_MSGS][100];

	(void)state;
	assert_non_null(r);
	/* a ctx on the caller's loop: that is its loop, and it has no
	 * private loop to run */
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&uctx, uloop, &o), 0);
	assert_ptr_equal(evr_ctx_loop(uctx), uloop);
	assert_int_equal(evr_ctx_run(uctx), -EINVAL);
	evr_ctx_destroy(uctx);

	/* a private loop; bound to the device of local_addr at once */
	assert_int_equal(evr_ctx_create(&r->ctx, NULL, &o), 0);
	assert_non_null(evr_ctx_loop(r->ctx));
	assert_ptr_not_equal(evr_ctx_loop(r->ctx), uloop);
	assert_ptr_equal(evr_ctx_loop(r->ctx), evr_ctx_loop(r->ctx));
	assert_true(strlen(evr_ctx_device(r->ctx)) > 0);
	if (in_guest())
		assert_string_equal(evr_ctx_device(r->ctx), "rxe0");
	ev_prepare_init(&r->prep, run_prep);
	r->prep.data = r;
	ev_prepare_start(evr_ctx_loop(r->ctx), &r->prep);
	ev_init(&r->guard, run_guard);
	r->guard.data = r;

	assert_int_equal(
	    evr_listen(r->ctx, rt_addr(), 0, 16, run_srv_accept, r, &l), 0);
	evr_conn_opts_init(&co);
	co.on_connect = run_cli_connect;
	co.on_recv = run_cli_recv;
	co.on_close = run_cli_close;
	co.arg = r;
	assert_int_equal(
	    evr_connect(r->ctx, rt_addr(), evr_listener_port(l), &co, NULL), 0);
	run_phase(r, 1);
	assert_int_equal(r->k.connects, 1);
	assert_int_equal(r->k.connect_status, 0);
	assert_int_equal(r->srv_up, 1);

	/* sends from outside the loop, echoed while it runs again */
	for (int i = 0; i < RUN_MSGS; i++) {
		rt_fill(msgs[i], sizeof(msgs[i]), (uint32_t)i);
		assert_int_equal(
		    evr_send(r->k.c, msgs[i], sizeof(msgs[i]), NULL, NULL), 0);
	}
	run_phase(r, 2);
	assert_int_equal(r->k.recvs, RUN_MSGS);
	assert_int_equal(r->k.sent_err, 0);
	assert_int_equal(r->echo_err, 0);

	assert_int_equal(evr_conn_close(r->k.c, 0), 0);
	run_phase(r, 3);
	assert_int_equal(r->k.closes, 1);
	assert_int_equal(r->k.close_status, 0);
	assert_int_equal(r->srv_closes, 1);
	assert_int_equal(r->srv_close_status, -ESHUTDOWN);
	assert_int_equal(r->echo_ok, RUN_MSGS);
	assert_int_equal(r->echo_err, 0);

	ev_prepare_stop(evr_ctx_loop(r->ctx), &r->prep);
	evr_listener_close(l);
	evr_ctx_destroy(r->ctx);
	free(r);
	ev_loop_destroy(uloop);
}

/* ------------------------------------------------------------------------ */
/* evr_conn_set_arg / evr_conn_arg                                          */

struct tag;

struct argfix {
	struct rt_pair p;
	struct tag *srv_next; /* what the server's on_connect switches to */
	evr_conn *srv;
};

/* Which callbacks ran with this tag as their arg. */
struct tag {
	struct argfix *f;
	int connects, recvs, imms, closes;
	int connect_status, close_status;
	uint32_t imm;
};

static void tag_connect(evr_conn *c, int status, void *arg)
{
	struct tag *t = arg;

	assert_ptr_equal(evr_conn_arg(c), arg);
	t->connects++;
	t->connect_status = status;
	if (status == 0 && t->f && t->f->srv_next) {
		/* a server end: switch again, from this callback */
		t->f->srv = c;
		evr_conn_set_arg(c, t->f->srv_next);
		assert_ptr_equal(evr_conn_arg(c), t->f->srv_next);
	}
}

static void tag_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct tag *t = arg;

	(void)data;
	(void)len;
	assert_ptr_equal(evr_conn_arg(c), arg);
	t->recvs++;
}

static void tag_imm(evr_conn *c, uint32_t imm, void *arg)
{
	struct tag *t = arg;

	assert_ptr_equal(evr_conn_arg(c), arg);
	t->imms++;
	t->imm = imm;
}

static void tag_close(evr_conn *c, int status, void *arg)
{
	struct tag *t = arg;

	assert_ptr_equal(evr_conn_arg(c), arg);
	t->closes++;
	t->close_status = status;
}

static void tag_opts(struct evr_conn_opts *o, struct tag *t)
{
	evr_conn_opts_init(o);
	o->on_connect = tag_connect;
	o->on_recv = tag_recv;
	o->on_imm = tag_imm;
	o->on_close = tag_close;
	o->arg = t;
}

/* srv_tags: [0] in the accept options, [1] set in the accept callback,
 * [2] set by on_connect */
static struct tag srv_tags[3];

static void arg_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct argfix *f = arg;
	struct evr_conn_opts o;
	evr_conn *c = NULL;

	(void)l;
	(void)ud;
	(void)ulen;
	tag_opts(&o, &srv_tags[0]);
	assert_int_equal(evr_accept(req, &o, &c), 0);
	assert_non_null(c);
	assert_ptr_equal(evr_conn_arg(c), &srv_tags[0]);
	evr_conn_set_arg(c, &srv_tags[1]);
	assert_ptr_equal(evr_conn_arg(c), &srv_tags[1]);
	f->srv_next = &srv_tags[2];
}

static int tag_connected(void *arg)
{
	return ((struct tag *)arg)->connects > 0;
}

static int tags_closed(void *arg)
{
	struct tag *t = arg; /* client's tag, then the server's last */

	return t[0].closes && srv_tags[2].closes;
}

static int srv_got_all(void *arg)
{
	struct tag *t = arg;

	return t->recvs >= 1 && t->imms >= 1;
}

static void test_conn_arg(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct argfix *f = calloc(1, sizeof(*f));
	struct tag ctags[2] = {{0}}; /* [0] set after connect, [1] given */
	struct tag refused[2] = {{0}};
	struct evr_conn_opts o;
	struct evr_rkey rk;
	evr_listener *l;
	evr_conn *c = NULL;
	evr_mr *smr, *cmr;
	uint8_t *smem = calloc(1, 4096), *cmem = calloc(1, 4096);
	uint16_t port;

	(void)state;
	assert_non_null(f);
	memset(srv_tags, 0, sizeof(srv_tags));
	for (int i = 0; i < 3; i++)
		srv_tags[i].f = f;
	rt_pair_init(&f->p, loop, NULL);
	/* the pair's listener is replaced by one with arg_accept */
	port = evr_listener_port(f->p.l);
	evr_listener_close(f->p.l);
	assert_int_equal(
	    evr_listen(f->p.ctx, rt_addr(), port, 16, arg_accept, f, &l), 0);
	f->p.l = l;

	/* client: set right after evr_connect, before anything fired */
	tag_opts(&o, &ctags[1]);
	assert_int_equal(evr_connect(f->p.ctx, rt_addr(), port, &o, &c), 0);
	assert_non_null(c);
	assert_ptr_equal(evr_conn_arg(c), &ctags[1]);
	evr_conn_set_arg(c, &ctags[0]);
	assert_ptr_equal(evr_conn_arg(c), &ctags[0]);
	assert_int_equal(rt_run_until(loop, tag_connected, &ctags[0], 20), 0);
	assert_int_equal(ctags[0].connect_status, 0);
	assert_int_equal(rt_run_until(loop, tag_connected, &srv_tags[1], 20),
			 0);
	assert_int_equal(srv_tags[1].connect_status, 0);

	/* a message and a write with immediate data reach the server end's
	 * latest arg */
	assert_int_equal(
	    evr_mr_reg(f->p.ctx, smem, 4096, EVR_ACCESS_REMOTE_WRITE, &smr), 0);
	assert_int_equal(
	    evr_mr_reg(f->p.ctx, cmem, 4096, EVR_ACCESS_LOCAL, &cmr), 0);
	evr_mr_rkey(smr, &rk);
	assert_int_equal(evr_send(c, "arg", 3, NULL, NULL), 0);
	assert_int_equal(
	    evr_write_imm(c, cmr, 0, &rk, 0, 16, 0xabcd1234u, NULL, NULL), 0);
	assert_int_equal(rt_run_until(loop, srv_got_all, &srv_tags[2], 20), 0);
	assert_int_equal(srv_tags[2].imm, 0xabcd1234u);

	assert_int_equal(evr_conn_close(c, 0), 0);
	assert_int_equal(rt_run_until(loop, tags_closed, ctags, 20), 0);
	rt_run_for(loop, 0.1);
	/* every callback went to the arg current at its time, once */
	assert_int_equal(ctags[0].connects, 1);
	assert_int_equal(ctags[0].closes, 1);
	assert_int_equal(ctags[0].close_status, 0);
	assert_int_equal(ctags[1].connects + ctags[1].recvs + ctags[1].imms +
			     ctags[1].closes,
			 0);
	assert_int_equal(srv_tags[0].connects + srv_tags[0].recvs +
			     srv_tags[0].imms + srv_tags[0].closes,
			 0);
	assert_int_equal(srv_tags[1].connects, 1);
	assert_int_equal(
	    srv_tags[1].recvs + srv_tags[1].imms + srv_tags[1].closes, 0);
	assert_int_equal(srv_tags[2].connects, 0);
	assert_int_equal(srv_tags[2].recvs, 1);
	assert_int_equal(srv_tags[2].imms, 1);
	assert_int_equal(srv_tags[2].closes, 1);
	assert_int_equal(srv_tags[2].close_status, -ESHUTDOWN);

	/* a connect that fails reports to the arg set after evr_connect */
	evr_listener_close(f->p.l);
	f->p.l = NULL;
	tag_opts(&o, &refused[1]);
	assert_int_equal(evr_connect(f->p.ctx, rt_addr(), port, &o, &c), 0);
	evr_conn_set_arg(c, &refused[0]);
	assert_int_equal(rt_run_until(loop, tag_connected, &refused[0], 20), 0);
	rt_run_for(loop, 0.1);
	assert_int_equal(refused[0].connects, 1);
	assert_int_equal(refused[0].connect_status, -ECONNREFUSED);
	assert_int_equal(refused[1].connects, 0);

	assert_int_equal(evr_mr_dereg(smr), 0);
	assert_int_equal(evr_mr_dereg(cmr), 0);
	rt_pair_fini(&f->p);
	free(smem);
	free(cmem);
	free(f);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* evr_conn_info                                                            */

/* The two ends configure different limits: each must see the other's. */
#define CI_SRV_DEPTH 16
#define CI_SRV_EAGER 4096
#define CI_SRV_MAX   (1u << 20)
#define CI_CLI_DEPTH 32
#define CI_CLI_EAGER 2048
#define CI_CLI_MAX   (2u << 20)
#define CI_LEN	     100

struct ci {
	struct rt_pair p;
	struct evr_conn_info at_accept, at_srv_connect, at_cli_connect;
	int accepted;
	bool hold;
	evr_msg *held[64];
	int nheld, recvs, bad;
};

static void ci_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct ci *f = arg;
	evr_conn *c = NULL;

	(void)l;
	(void)ud;
	(void)ulen;
	assert_int_equal(evr_accept(req, &f->p.srv_opts, &c), 0);
	/* accepting: the request told the peer's limits already */
	assert_int_equal(evr_conn_info(c, &f->at_accept), 0);
	f->accepted++;
}

static void ci_connect(evr_conn *c, int status, void *arg)
{
	struct rt_side *s = arg;
	struct ci *f = s->user;

	assert_int_equal(evr_conn_info(c, s == &f->p.cli ? &f->at_cli_connect
							 : &f->at_srv_connect),
			 0);
	rt_side_connect(c, status, arg);
}

static void ci_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct ci *f = ((struct rt_side *)arg)->user;

	if (len != CI_LEN || rt_verify(data, len, (uint32_t)f->recvs) >= 0)
		f->bad++;
	f->recvs++;
	if (f->hold) {
		evr_msg *m = evr_conn_hold(c);

		assert_non_null(m);
		assert_true(f->nheld < 64);
		f->held[f->nheld++] = m;
	}
}

struct ci_wait {
	struct ci *f;
	int recvs;
};

static int ci_got(void *arg)
{
	struct ci_wait *w = arg;

	return w->f->recvs >= w->recvs;
}

static void ci_info(evr_conn *c, struct evr_conn_info *info)
{
	assert_int_equal(evr_conn_info(c, info), 0);
}

/* Wait for n messages at the server, then a little more: the senders'
 * credit counts must have settled. */
static void ci_wait_for(struct ci *f, int n)
{
	struct ci_wait w = {f, n};

	assert_int_equal(rt_run_until(f->p.loop, ci_got, &w, 20), 0);
	rt_run_for(f->p.loop, 0.2);
	assert_int_equal(f->recvs, n);
	assert_int_equal(f->bad, 0);
}

static void test_conn_info(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct ci *f = calloc(1, sizeof(*f));
	struct evr_ctx_opts so, co;
	struct evr_conn_info info;
	evr_conn *c = NULL;
	uint8_t msgs[40][CI_LEN];
	int n = 0;
	uint16_t port;

	(void)state;
	assert_non_null(f);
	for (int i = 0; i < 40; i++)
		rt_fill(msgs[i], CI_LEN, (uint32_t)i);
	rt_ctx_opts(&so);
	so.recv_depth = CI_SRV_DEPTH;
	so.eager_size = CI_SRV_EAGER;
	so.max_msg_size = CI_SRV_MAX;
	/* credits as a receive queue per connection gives them: all of the
	 * depth at once (t_srq has the shared queue's windows) */
	so.srq = EVR_SRQ_OFF;
	rt_ctx_opts(&co);
	co.srq = EVR_SRQ_OFF;
	co.recv_depth = CI_CLI_DEPTH;
	co.eager_size = CI_CLI_EAGER;
	co.max_msg_size = CI_CLI_MAX;
	rt_pair_init2(&f->p, loop, &so, &co);
	f->p.cli.user = f->p.srv.user = f;
	f->p.cli_opts.on_connect = f->p.srv_opts.on_connect = ci_connect;
	f->p.srv_opts.on_recv = ci_recv;
	port = evr_listener_port(f->p.l);
	evr_listener_close(f->p.l);
	assert_int_equal(
	    evr_listen(f->p.ctx, rt_addr(), port, 16, ci_accept, f, &f->p.l),
	    0);

	assert_int_equal(evr_conn_info(NULL, &info), -EINVAL);
	/* the server holds every message until told: no credit comes back
	 * until then */
	f->hold = true;

	/* connecting: nothing negotiated yet; a send waits in the queue */
	assert_int_equal(
	    evr_connect(f->p.cctx, rt_addr(), port, &f->p.cli_opts, &c), 0);
	assert_int_equal(evr_conn_info(c, NULL), -EINVAL);
	ci_info(c, &info);
	assert_string_equal(info.state, "resolving-addr");
	assert_int_equal(info.peer_max_msg, 0);
	assert_int_equal(info.peer_eager_size, 0);
	assert_int_equal(info.peer_recv_depth, 0);
	assert_int_equal(info.send_credits, 0);
	assert_int_equal(info.queued_bytes, 0);
	assert_int_equal(evr_send(c, msgs[n++], CI_LEN, NULL, NULL), 0);
	ci_info(c, &info);
	assert_int_equal(info.queued_bytes, CI_LEN);
	assert_int_equal(rt_run_until(loop, rt_pair_up_pred, &f->p, 20), 0);
	assert_int_equal(f->p.cli.connect_status, 0);
	assert_int_equal(f->p.srv.connect_status, 0);

	/* the server knew the client's limits when it accepted */
	assert_int_equal(f->accepted, 1);
	assert_string_equal(f->at_accept.state, "accepting");
	assert_int_equal(f->at_accept.peer_max_msg, CI_CLI_MAX);
	assert_int_equal(f->at_accept.peer_eager_size, CI_CLI_EAGER);
	assert_int_equal(f->at_accept.peer_recv_depth, CI_CLI_DEPTH);
	assert_int_equal(f->at_accept.send_credits, CI_CLI_DEPTH);
	assert_int_equal(f->at_accept.queued_bytes, 0);
	assert_string_equal(f->at_srv_connect.state, "established");
	assert_int_equal(f->at_srv_connect.peer_max_msg, CI_CLI_MAX);
	assert_int_equal(f->at_srv_connect.peer_eager_size, CI_CLI_EAGER);
	assert_int_equal(f->at_srv_connect.peer_recv_depth, CI_CLI_DEPTH);
	assert_int_equal(f->at_srv_connect.send_credits, CI_CLI_DEPTH);
	assert_int_equal(f->at_srv_connect.queued_bytes, 0);
	/* the client learned the server's from the reply; its early send
	 * is still queued when on_connect runs */
	assert_string_equal(f->at_cli_connect.state, "established");
	assert_int_equal(f->at_cli_connect.peer_max_msg, CI_SRV_MAX);
	assert_int_equal(f->at_cli_connect.peer_eager_size, CI_SRV_EAGER);
	assert_int_equal(f->at_cli_connect.peer_recv_depth, CI_SRV_DEPTH);
	assert_int_equal(f->at_cli_connect.send_credits, CI_SRV_DEPTH);
	assert_int_equal(f->at_cli_connect.queued_bytes, CI_LEN);

	/* one message sent: one credit used, none back (the server holds
	 * the message, so it owes none) */
	ci_wait_for(f, 1);
	ci_info(f->p.cli.conn, &info);
	assert_string_equal(info.state, "established");
	assert_int_equal(info.send_credits, CI_SRV_DEPTH - 1);
	assert_int_equal(info.queued_bytes, 0);
	assert_int_equal(info.peer_max_msg, CI_SRV_MAX);
	assert_int_equal(info.peer_eager_size, CI_SRV_EAGER);
	assert_int_equal(info.peer_recv_depth, CI_SRV_DEPTH);
	ci_info(f->p.srv.conn, &info);
	assert_int_equal(info.send_credits, CI_CLI_DEPTH);
	assert_int_equal(info.queued_bytes, 0);

	/* Of the server's CI_SRV_DEPTH receives the client keeps the last
	 * 2 for control messages (credit.h): CI_SRV_DEPTH - 3 more data
	 * messages go, the rest stay queued. */
	for (int i = 0; i < 20; i++)
		assert_int_equal(
		    evr_send(f->p.cli.conn, msgs[n++], CI_LEN, NULL, NULL), 0);
	ci_info(f->p.cli.conn, &info);
	assert_int_equal(info.queued_bytes, 20 * CI_LEN); /* not yet posted */
	ci_wait_for(f, CI_SRV_DEPTH - 2);
	ci_info(f->p.cli.conn, &info);
	assert_int_equal(info.send_credits, 2);
	assert_int_equal(info.queued_bytes,
			 (size_t)(n - (CI_SRV_DEPTH - 2)) * CI_LEN);
	/* releasing them lets the rest through */
	while (f->nheld)
		evr_msg_release(f->held[--f->nheld]);
	f->hold = false;
	ci_wait_for(f, n);
	ci_info(f->p.cli.conn, &info);
	assert_int_equal(info.queued_bytes, 0);
	assert_true(info.send_credits >= 2 &&
		    info.send_credits <= CI_SRV_DEPTH);

	/* closing gracefully */
	assert_int_equal(evr_conn_close(f->p.cli.conn, 0), 0);
	ci_info(f->p.cli.conn, &info);
	assert_string_equal(info.state, "closing");
	assert_int_equal(rt_run_until(loop, rt_pair_closed_pred, &f->p, 20), 0);
	assert_int_equal(f->p.cli.close_status, 0);
	assert_int_equal(f->p.srv.close_status, -ESHUTDOWN);
	rt_pair_fini(&f->p);
	free(f);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* evr_stats.recv_wrs                                                       */

#define RW_DEPTH 64

struct rw {
	struct rt_pair p;
	int recvs, echoes, bad;
	bool echo;
	int hold; /* hold this many of the first messages */
	evr_msg *held[64];
	int nheld;
	uint32_t pending; /* ping-pong: messages still to send */
	uint8_t msg[100];
};

static void rw_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rw *f = ((struct rt_side *)arg)->user;

	if (len != sizeof(f->msg) || memcmp(data, f->msg, len))
		f->bad++;
	f->recvs++;
	if (f->nheld < f->hold) {
		evr_msg *m = evr_conn_hold(c);

		assert_non_null(m);
		f->held[f->nheld++] = m;
	}
	if (f->echo)
		assert_int_equal(evr_send(c, f->msg, len, NULL, NULL), 0);
}

static void rw_cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rw *f = ((struct rt_side *)arg)->user;

	if (len != sizeof(f->msg) || memcmp(data, f->msg, len))
		f->bad++;
	f->echoes++;
	if (f->pending) {
		f->pending--;
		assert_int_equal(evr_send(c, f->msg, len, NULL, NULL), 0);
	}
}

struct rw_wait {
	struct rw *f;
	int n;
};

static int rw_got(void *arg)
{
	struct rw_wait *w = arg;

	return w->f->recvs >= w->n && (!w->f->echo || w->f->echoes >= w->n);
}

/* The receives of each ctx's one connection: recv_depth posted when its
 * QP was set up, plus one re-post for every message that consumed one
 * (the peer's data messages and its explicit credit updates) and was not
 * held.  After n messages to the server: the stats of both ctxs, and the
 * server's and the client's expected recv_wrs. */
struct rw_books {
	struct evr_stats s, c;
	uint64_t s_want, c_want;
};

static void rw_books(struct rw *f, int n, struct rw_books *b)
{
	evr_ctx_stats(f->p.ctx, &b->s);
	evr_ctx_stats(f->p.cctx, &b->c);
	b->s_want = RW_DEPTH + (uint64_t)(n - f->nheld) +
		    b->c.credit_updates;
	b->c_want = RW_DEPTH + (uint64_t)f->echoes + b->s.credit_updates;
}

static bool rw_balanced(struct rw *f, int n)
{
	struct rw_books b;

	rw_books(f, n, &b);
	return b.s.msgs_recv == (uint64_t)n && b.s.recv_wrs == b.s_want &&
	       b.c.recv_wrs == b.c_want;
}

static int rw_settled(void *arg)
{
	struct rw_wait *w = arg;

	return rw_balanced(w->f, w->n);
}

/* Waits for the last re-posts and updates (a slow run takes a while for
 * them), then a while longer: nothing more may come. */
static void rw_settle(struct ev_loop *loop, struct rw_wait *w)
{
	(void)rt_run_until(loop, rw_settled, w, 10); /* rw_check says */
	rt_run_for(loop, 0.3 * rt_timeout_scale());
}

static void rw_check(struct rw *f, int n, const char *name)
{
	struct rw_books b;

	rw_books(f, n, &b);
	printf("# %s: server recv_wrs %llu (%d messages, %llu credit "
	       "updates from the client); client recv_wrs %llu (%d echoes, "
	       "%llu credit updates from the server)\n",
	       name, (unsigned long long)b.s.recv_wrs, n,
	       (unsigned long long)b.c.credit_updates,
	       (unsigned long long)b.c.recv_wrs, f->echoes,
	       (unsigned long long)b.s.credit_updates);
	assert_int_equal(b.s.msgs_recv, n);
	assert_int_equal(b.s.recv_wrs, b.s_want);
	assert_int_equal(b.c.recv_wrs, b.c_want);
}

static void test_recv_wrs(void **state)
{
	static const struct {
		const char *name;
		int n;
		bool echo;
		int hold;
		int updates; /* -1: some, else exactly this many */
	} rows[] = {
	    /* fewer than a quarter of the receive queue: no update at all */
	    {"one way, 10 messages", 10, false, 0, 0},
	    /* every echo carries the credits back: no update either */
	    {"ping-pong, 100 round trips", 100, true, 0, 0},
	    /* more than the queue: the server must send updates */
	    {"one way, 300 messages", 300, false, 0, -1},
	    /* 15 re-posted: still below a quarter */
	    {"one way, 20 messages, 5 held", 20, false, 5, 0},
	};

	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
		struct rw *f = calloc(1, sizeof(*f));
		struct evr_ctx_opts o;
		struct evr_stats s, c;
		struct rw_wait w;

		assert_non_null(f);
		w.f = f;
		w.n = rows[r].n;
		rt_ctx_opts(&o);
		o.recv_depth = RW_DEPTH;
		o.srq = EVR_SRQ_OFF; /* receives per conn (t_srq: shared) */
		rt_pair_init2(&f->p, loop, &o, &o);
		f->echo = rows[r].echo;
		f->hold = rows[r].hold;
		rt_fill(f->msg, sizeof(f->msg), 42);
		f->p.cli.user = f->p.srv.user = f;
		f->p.srv_opts.on_recv = rw_srv_recv;
		f->p.cli_opts.on_recv = rw_cli_recv;
		rt_pair_connect(&f->p);
		rt_run_for(loop, 0.1);
		/* up, nothing sent: each end has posted its queue */
		evr_ctx_stats(f->p.ctx, &s);
		evr_ctx_stats(f->p.cctx, &c);
		assert_int_equal(s.recv_wrs, RW_DEPTH);
		assert_int_equal(c.recv_wrs, RW_DEPTH);

		if (f->echo) {
			f->pending = (uint32_t)rows[r].n - 1;
			assert_int_equal(evr_send(f->p.cli.conn, f->msg,
						  sizeof(f->msg), NULL, NULL),
					 0);
		} else {
			for (int i = 0; i < rows[r].n; i++)
				assert_int_equal(evr_send(f->p.cli.conn, f->msg,
							  sizeof(f->msg), NULL,
							  NULL),
						 0);
		}
		assert_int_equal(rt_run_until(loop, rw_got, &w, 30), 0);
		rw_settle(loop, &w);
		assert_int_equal(f->bad, 0);
		assert_int_equal(f->nheld, rows[r].hold);
		rw_check(f, rows[r].n, rows[r].name);
		evr_ctx_stats(f->p.ctx, &s);
		if (rows[r].updates >= 0)
			assert_int_equal(s.credit_updates, rows[r].updates);
		else
			assert_true(s.credit_updates > 0);
		if (f->nheld) {
			/* released: their buffers are posted again */
			while (f->nheld)
				evr_msg_release(f->held[--f->nheld]);
			rw_settle(loop, &w);
			rw_check(f, rows[r].n, "after the release");
		}
		rt_pair_close(&f->p);
		rt_pair_fini(&f->p);
		free(f);
		ev_loop_destroy(loop);
	}
}

/* ------------------------------------------------------------------------ */
/* Choosing the device                                                      */

/* The device of an address, as a ctx bound by local_addr sees it. */
static void device_of(const char *addr, char *out, size_t n)
{
	struct evr_ctx_opts o;
	evr_ctx *ctx;

	rt_ctx_opts(&o);
	o.local_addr = addr;
	assert_int_equal(evr_ctx_create(&ctx, NULL, &o), 0);
	snprintf(out, n, "%s", evr_ctx_device(ctx));
	evr_ctx_destroy(ctx);
}

/*
 * A second RDMA device, for an address on another device than the ctx's:
 * the guest's rxe_lo.  It is on lo, and rdma_cm binds lo's addresses to
 * no device and cannot route them through Soft-RoCE, so it carries no
 * connection; but a ctx can be bound to it by name, and that ctx must
 * refuse rxe0's addresses.
 */
#define OTHER_DEV "rxe_lo"
#define NO_DEV	  "evr-no-such-dev"
#define LO_ADDR	  "127.0.0.1"

struct dev_row {
	const char *name;
	const char *env;    /* EVR_DEVICE; NULL: unset */
	const char *device; /* evr_ctx_opts.device */
	const char *local;  /* evr_ctx_opts.local_addr */
	int create_rc;
	char bound; /* 'T' the test address's device, 'O' OTHER_DEV, 'U'
		       none until the first listen */
	bool guest; /* needs the Soft-RoCE guest's devices */
};

/* A ctx bound to the test address's device (or not yet bound): listens
 * there and serves a client; the loopback address, on no device a
 * connection can use, fails the connect with -ENODEV. */
static void dev_check_test_device(struct ev_loop *loop, evr_ctx *ctx,
				  evr_ctx *cctx, const struct dev_row *row,
				  const char *dev)
{
	struct echo_srv es;

	if (row->bound == 'U')
		assert_string_equal(evr_ctx_device(ctx), "");
	else
		assert_string_equal(evr_ctx_device(ctx), dev);
	assert_int_equal(es_listen(&es, ctx, rt_addr(), 0), 0);
	assert_string_equal(evr_ctx_device(ctx), dev);
	echo_once(loop, cctx, rt_addr(), evr_listener_port(es.l));
	assert_int_equal(rt_run_until(loop, es_closed, &es, 20), 0);
	assert_int_equal(es.accepts, 1);
	if (in_guest()) {
		struct evr_conn_opts co;
		struct cli k;

		cl_opts(&k, &co);
		assert_int_equal(evr_connect(ctx, LO_ADDR,
					     evr_listener_port(es.l), &co,
					     NULL),
				 0);
		assert_int_equal(rt_run_until(loop, cl_connected, &k, 20), 0);
		rt_run_for(loop, 0.2);
		assert_int_equal(k.connects, 1);
		assert_int_equal(k.connect_status, -ENODEV);
		assert_int_equal(es.accepts, 1);
	}
	evr_listener_close(es.l);
}

/* A ctx bound to another device: the test address is refused by
 * evr_listen() and, through on_connect, by evr_connect() -- and a request
 * that reaches its wildcard listener through the test device is
 * rejected without the accept callback. */
static void dev_check_other_device(struct ev_loop *loop, evr_ctx *ctx,
				   evr_ctx *cctx)
{
	struct evr_conn_opts co;
	struct echo_srv es, tes;
	struct cli k;
	evr_listener *l = NULL;

	assert_string_equal(evr_ctx_device(ctx), OTHER_DEV);
	assert_int_equal(evr_listen(ctx, rt_addr(), 0, 16, es_accept, &es, &l),
			 -ENODEV);
	assert_null(l);

	assert_int_equal(es_listen(&tes, cctx, rt_addr(), 0), 0);
	cl_opts(&k, &co);
	assert_int_equal(
	    evr_connect(ctx, rt_addr(), evr_listener_port(tes.l), &co, NULL),
	    0);
	assert_int_equal(rt_run_until(loop, cl_connected, &k, 20), 0);
	rt_run_for(loop, 0.2);
	assert_int_equal(k.connects, 1);
	assert_int_equal(k.connect_status, -ENODEV);
	assert_int_equal(tes.accepts, 0);
	evr_listener_close(tes.l);

	assert_int_equal(es_listen(&es, ctx, "0.0.0.0", 0), 0);
	cl_opts(&k, &co);
	assert_int_equal(
	    evr_connect(cctx, rt_addr(), evr_listener_port(es.l), &co, NULL),
	    0);
	assert_int_equal(rt_run_until(loop, cl_connected, &k, 20), 0);
	rt_run_for(loop, 0.2);
	assert_int_equal(k.connects, 1);
	assert_int_equal(k.connect_status, -ECONNREFUSED);
	assert_true(k.rej_len > 0); /* the library's reason, not the CM's */
	assert_int_equal(es.accepts, 0);
	assert_string_equal(evr_ctx_device(ctx), OTHER_DEV);
	evr_listener_close(es.l);
}

static void test_device(void **state)
{
	char dev[64];
	struct dev_row rows[] = {
	    {"device by name", NULL, dev, NULL, 0, 'T', false},
	    {"no such device", NULL, NO_DEV, NULL, -ENODEV, 0, false},
	    {"EVR_DEVICE", dev, NULL, NULL, 0, 'T', false},
	    {"EVR_DEVICE names no device", NO_DEV, NULL, NULL, -ENODEV, 0,
	     false},
	    {"device wins over EVR_DEVICE", NO_DEV, dev, NULL, 0, 'T', false},
	    {"local_addr wins over EVR_DEVICE", NO_DEV, NULL, NULL, 0, 'T',
	     false},
	    {"neither: the first listen binds", NULL, NULL, NULL, 0, 'U',
	     false},
	    {"another device by name", NULL, OTHER_DEV, NULL, 0, 'O', true},
	    {"EVR_DEVICE: another device", OTHER_DEV, NULL, NULL, 0, 'O', true},
	    {"local_addr on no RDMA device", NULL, NULL, LO_ADDR, -ENODEV, 0,
	     true},
	};
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	evr_ctx *cctx;

	(void)state;
	rows[5].local = rt_addr(); /* not a constant */
	env_device(NULL);
	device_of(rt_addr(), dev, sizeof(dev));
	printf("# %s is on %s\n", rt_addr(), dev);
	assert_true(*dev);
	if (in_guest())
		assert_string_equal(dev, "rxe0");
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&cctx, loop, &o), 0);

	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		evr_ctx *const untouched = (evr_ctx *)&rows[r];
		evr_ctx *ctx = untouched;

		if (rows[r].guest && !in_guest()) {
			printf("# %s: skipped (needs the Soft-RoCE guest)\n",
			       rows[r].name);
			continue;
		}
		env_device(rows[r].env);
		bare_opts(&o);
		o.device = rows[r].device;
		o.local_addr = rows[r].local;
		assert_int_equal(evr_ctx_create(&ctx, loop, &o),
				 rows[r].create_rc);
		env_device(NULL);
		if (rows[r].create_rc) {
			assert_ptr_equal(ctx, untouched);
			printf("# %s: %s\n", rows[r].name,
			       evr_err_name(rows[r].create_rc));
			continue;
		}
		if (rows[r].bound == 'O')
			dev_check_other_device(loop, ctx, cctx);
		else
			dev_check_test_device(loop, ctx, cctx, &rows[r], dev);
		printf("# %s: bound to %s\n", rows[r].name,
		       evr_ctx_device(ctx));
		evr_ctx_destroy(ctx);
	}

	/* evr_mr_reg() on an unbound ctx binds it to a device */
	{
		evr_ctx *ctx;
		evr_mr *mr;
		static uint8_t mem[4096];

		bare_opts(&o);
		assert_int_equal(evr_ctx_create(&ctx, loop, &o), 0);
		assert_string_equal(evr_ctx_device(ctx), "");
		assert_int_equal(
		    evr_mr_reg(ctx, mem, sizeof(mem), EVR_ACCESS_LOCAL, &mr),
		    0);
		assert_true(strlen(evr_ctx_device(ctx)) > 0);
		printf("# evr_mr_reg on an unbound ctx: bound to %s\n",
		       evr_ctx_device(ctx));
		assert_int_equal(evr_mr_dereg(mr), 0);
		evr_ctx_destroy(ctx);
	}
	env_device_restore();
	evr_ctx_destroy(cctx);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* Wildcard listeners                                                       */

static void test_wildcard_listen(void **state)
{
	static const struct {
		const char *host;
		bool v6; /* an IPv6 client too */
	} rows[] = {{NULL, false}, {"0.0.0.0", false}, {"::", true}};
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts co;
	evr_ctx *cctx;
	char dev[64];

	(void)state;
	env_device(NULL);
	device_of(rt_addr(), dev, sizeof(dev));
	rt_ctx_opts(&co);
	assert_int_equal(evr_ctx_create(&cctx, loop, &co), 0);
	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		struct evr_ctx_opts o;
		struct echo_srv es;
		evr_ctx *ctx;
		uint16_t port;

		/* unbound: a wildcard is on no device; the first request
		 * binds the ctx to the device it came through */
		bare_opts(&o);
		assert_int_equal(evr_ctx_create(&ctx, loop, &o), 0);
		assert_int_equal(es_listen(&es, ctx, rows[r].host, 0), 0);
		port = evr_listener_port(es.l);
		assert_true(port > 0);
		assert_string_equal(evr_ctx_device(ctx), "");
		echo_once(loop, cctx, rt_addr(), port);
		assert_string_equal(evr_ctx_device(ctx), dev);
		if (rows[r].v6)
			echo_once(loop, cctx, rt_addr6(), port);
		assert_int_equal(rt_run_until(loop, es_closed, &es, 20), 0);
		assert_int_equal(es.accepts, rows[r].v6 ? 2 : 1);
		assert_int_equal(es.closes, es.accepts);
		assert_int_equal(es.close_status, -ESHUTDOWN);
		printf("# listening on %s, port %u: %d clients echoed\n",
		       rows[r].host ? rows[r].host : "NULL", port, es.accepts);
		evr_listener_close(es.l);
		evr_ctx_destroy(ctx);
	}
	env_device_restore();
	evr_ctx_destroy(cctx);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* Operations the access flags refuse (or allow)                            */

#define AC_REGION 4096
#define AC_OFF	  64
#define AC_LEN	  256

enum ac_op { AC_WRITE, AC_WRITE_IMM, AC_READ, AC_FADD, AC_CSWAP };

struct ac {
	struct rt_pair p;
	int op_calls, op_status, after_calls, after_status;
	int srv_recvs, srv_imms;
};

static void ac_op_cb(evr_conn *c, int status, void *arg)
{
	struct ac *f = arg;

	(void)c;
	f->op_calls++;
	f->op_status = status;
}

static void ac_after_cb(evr_conn *c, int status, void *arg)
{
	struct ac *f = arg;

	(void)c;
	f->after_calls++;
	f->after_status = status;
}

static void ac_srv_recv(evr_conn *c, const void *d, size_t len, void *arg)
{
	struct ac *f = ((struct rt_side *)arg)->user;

	(void)c;
	(void)d;
	(void)len;
	f->srv_recvs++;
}

static void ac_srv_imm(evr_conn *c, uint32_t imm, void *arg)
{
	struct ac *f = ((struct rt_side *)arg)->user;

	(void)c;
	(void)imm;
	f->srv_imms++;
}

static int ac_settled(void *arg)
{
	struct ac *f = arg;

	return f->op_calls && f->after_calls &&
	       ((f->p.cli.closes && f->p.srv.closes) || f->srv_recvs);
}

static int ac_submit(struct ac *f, enum ac_op op, evr_mr *lmr,
		     const struct evr_rkey *rk)
{
	evr_conn *c = f->p.cli.conn;

	switch (op) {
	case AC_WRITE:
		return evr_write(c, lmr, AC_OFF, rk, AC_OFF, AC_LEN, ac_op_cb,
				 f);
	case AC_WRITE_IMM:
		return evr_write_imm(c, lmr, AC_OFF, rk, AC_OFF, AC_LEN, 77,
				     ac_op_cb, f);
	case AC_READ:
		return evr_read(c, lmr, AC_OFF, rk, AC_OFF, AC_LEN, ac_op_cb,
				f);
	case AC_FADD:
		return evr_fetch_add(c, lmr, AC_OFF, rk, AC_OFF, 5, ac_op_cb,
				     f);
	case AC_CSWAP:
		return evr_cmp_swap(c, lmr, AC_OFF, rk, AC_OFF, 0, 9, ac_op_cb,
				    f);
	}
	return -EINVAL;
}

static void test_access(void **state)
{
	static const struct {
		const char *name;
		enum ac_op op;
		unsigned remote; /* the server region's flags */
		int status;	 /* of the operation */
	} rows[] = {
	    {"write, no REMOTE_WRITE", AC_WRITE,
	     EVR_ACCESS_REMOTE_READ | EVR_ACCESS_REMOTE_ATOMIC, -EACCES},
	    {"write_imm, no REMOTE_WRITE", AC_WRITE_IMM,
	     EVR_ACCESS_REMOTE_READ | EVR_ACCESS_REMOTE_ATOMIC, -EACCES},
	    {"read, no REMOTE_READ", AC_READ,
	     EVR_ACCESS_REMOTE_WRITE | EVR_ACCESS_REMOTE_ATOMIC, -EACCES},
	    {"fetch_add, no REMOTE_ATOMIC", AC_FADD,
	     EVR_ACCESS_REMOTE_READ | EVR_ACCESS_REMOTE_WRITE, -EACCES},
	    {"cmp_swap, local only", AC_CSWAP, EVR_ACCESS_LOCAL, -EACCES},
	    /* each flag alone allows its operation; the local region is
	     * EVR_ACCESS_LOCAL, which a read or an atomic may write */
	    {"write, REMOTE_WRITE", AC_WRITE, EVR_ACCESS_REMOTE_WRITE, 0},
	    {"write_imm, REMOTE_WRITE", AC_WRITE_IMM, EVR_ACCESS_REMOTE_WRITE,
	     0},
	    {"read, REMOTE_READ", AC_READ, EVR_ACCESS_REMOTE_READ, 0},
	    {"fetch_add, REMOTE_ATOMIC", AC_FADD, EVR_ACCESS_REMOTE_ATOMIC, 0},
	    {"cmp_swap, REMOTE_ATOMIC", AC_CSWAP, EVR_ACCESS_REMOTE_ATOMIC, 0},
	};

	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
		struct ac *f = calloc(1, sizeof(*f));
		uint8_t *smem = malloc(AC_REGION), *cmem = malloc(AC_REGION);
		uint8_t *s0 = malloc(AC_REGION), *c0 = malloc(AC_REGION);
		struct evr_rkey rk;
		evr_mr *smr, *cmr;
		bool refused = rows[r].status != 0;
		uint64_t w;

		assert_true(f && smem && cmem && s0 && c0);
		rt_fill(smem, AC_REGION, 1);
		rt_fill(cmem, AC_REGION, 2);
		memset(smem + AC_OFF, 0, 8); /* the atomic word: 0 */
		memcpy(s0, smem, AC_REGION);
		memcpy(c0, cmem, AC_REGION);
		rt_pair_init(&f->p, loop, NULL);
		f->p.cli.user = f->p.srv.user = f;
		f->p.srv_opts.on_recv = ac_srv_recv;
		f->p.srv_opts.on_imm = ac_srv_imm;
		rt_pair_connect(&f->p);
		assert_int_equal(
		    evr_mr_reg(f->p.ctx, smem, AC_REGION, rows[r].remote, &smr),
		    0);
		assert_int_equal(evr_mr_reg(f->p.ctx, cmem, AC_REGION,
					    EVR_ACCESS_LOCAL, &cmr),
				 0);
		evr_mr_rkey(smr, &rk);

		assert_int_equal(ac_submit(f, rows[r].op, cmr, &rk), 0);
		/* a message behind it, in the same batch */
		assert_int_equal(
		    evr_send(f->p.cli.conn, "after", 5, ac_after_cb, f), 0);
		assert_int_equal(rt_run_until(loop, ac_settled, f, 20), 0);
		rt_run_for(loop, 0.2); /* a second callback would show */
		printf("# %s: operation %s, the send behind it %s; client "
		       "on_close %s, server on_close %s\n",
		       rows[r].name, evr_err_name(f->op_status),
		       evr_err_name(f->after_status),
		       f->p.cli.closes ? evr_err_name(f->p.cli.close_status)
				       : "-",
		       f->p.srv.closes ? evr_err_name(f->p.srv.close_status)
				       : "-");
		assert_int_equal(f->op_calls, 1);
		assert_int_equal(f->op_status, rows[r].status);
		assert_int_equal(f->after_calls, 1);
		if (refused) {
			/* The refusal kills the connection: what was queued
			 * behind the operation fails with the same error,
			 * which is also the client's on_close status.  The
			 * server end, whose QP the refusal moved to the
			 * error state, closes once with an error. */
			assert_int_equal(f->after_status, rows[r].status);
			assert_int_equal(f->p.cli.closes, 1);
			assert_int_equal(f->p.cli.close_status, rows[r].status);
			assert_int_equal(f->p.srv.closes, 1);
			assert_true(f->p.srv.close_status < 0);
			assert_int_equal(f->srv_recvs, 0);
			assert_int_equal(f->srv_imms, 0);
			/* nothing moved, in either region */
			assert_memory_equal(smem, s0, AC_REGION);
			assert_memory_equal(cmem, c0, AC_REGION);
		} else {
			assert_int_equal(f->after_status, 0);
			assert_int_equal(f->srv_recvs, 1);
			assert_int_equal(f->srv_imms,
					 rows[r].op == AC_WRITE_IMM ? 1 : 0);
			switch (rows[r].op) {
			case AC_WRITE:
			case AC_WRITE_IMM:
				assert_memory_equal(smem + AC_OFF, c0 + AC_OFF,
						    AC_LEN);
				assert_memory_equal(cmem, c0, AC_REGION);
				break;
			case AC_READ:
				assert_memory_equal(cmem + AC_OFF, s0 + AC_OFF,
						    AC_LEN);
				assert_memory_equal(smem, s0, AC_REGION);
				break;
			case AC_FADD:
			case AC_CSWAP:
				/* the old value (0) lands locally, the word
				 * becomes 5 (0 + 5) or 9 (0 == 0: swapped) */
				memcpy(&w, cmem + AC_OFF, 8);
				assert_int_equal(w, 0);
				memcpy(&w, smem + AC_OFF, 8);
				assert_int_equal(w,
						 rows[r].op == AC_FADD ? 5 : 9);
				break;
			}
			assert_int_equal(f->p.cli.closes, 0);
			assert_int_equal(f->p.srv.closes, 0);
			rt_pair_close(&f->p);
			assert_int_equal(f->p.cli.close_status, 0);
			assert_int_equal(f->p.srv.close_status, -ESHUTDOWN);
		}
		assert_int_equal(evr_mr_dereg(smr), 0);
		assert_int_equal(evr_mr_dereg(cmr), 0);
		rt_pair_fini(&f->p);
		free(smem);
		free(cmem);
		free(s0);
		free(c0);
		free(f);
		ev_loop_destroy(loop);
	}
}

/* ------------------------------------------------------------------------ */
/* An explicit send_queue_lowat                                             */

/*
 * The server posts QL_DEPTH receives and holds every message: the client
 * can post QL_DEPTH - 2 data messages (two credits stay for control
 * messages, credit.h) and the rest of what it submitted stays queued.
 * Each message the server then releases brings back exactly one credit
 * (the server has too few receives posted to wait for more: credit.h's
 * starved peer), which moves exactly one message from the queue: the
 * queued bytes go down one message at a time, and on_drain must fire at
 * the first of those steps that reaches the low-watermark.
 */
#define QL_DEPTH 8
#define QL_LEN	 1000
#define QL_FIT	 10 /* send_queue_limit, in messages */

struct ql {
	struct rt_pair p;
	uint8_t msgs[2 * QL_FIT][QL_LEN];
	int sent, ok, err;
	int drains;
	size_t queued_at_drain;
	int recvs, bad;
	evr_msg *held[2 * QL_FIT];
	int nheld;
	bool hold;
};

static void ql_sent(evr_conn *c, int status, void *arg)
{
	struct ql *f = arg;

	(void)c;
	if (status == 0)
		f->ok++;
	else
		f->err++;
}

static void ql_drain(evr_conn *c, void *arg)
{
	struct ql *f = ((struct rt_side *)arg)->user;
	struct evr_conn_info info;

	assert_int_equal(evr_conn_info(c, &info), 0);
	f->drains++;
	f->queued_at_drain = info.queued_bytes;
}

static void ql_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct ql *f = ((struct rt_side *)arg)->user;

	if (len != QL_LEN || rt_verify(data, len, (uint32_t)f->recvs) >= 0)
		f->bad++;
	f->recvs++;
	if (f->hold) {
		evr_msg *m = evr_conn_hold(c);

		assert_non_null(m);
		f->held[f->nheld++] = m;
	}
}

static int ql_send(struct ql *f)
{
	int rc = evr_send(f->p.cli.conn, f->msgs[f->sent], QL_LEN, ql_sent, f);

	if (rc == 0)
		f->sent++;
	return rc;
}

struct ql_wait {
	struct ql *f;
	int n;
};

static int ql_got(void *arg)
{
	struct ql_wait *w = arg;

	return w->f->recvs >= w->n;
}

static size_t ql_queued(struct ql *f)
{
	struct evr_conn_info info;

	assert_int_equal(evr_conn_info(f->p.cli.conn, &info), 0);
	return info.queued_bytes;
}

/* Every send's callback has run. */
static int ql_all_done(void *arg)
{
	struct ql *f = arg;

	return f->ok + f->err >= f->sent;
}

/* Wait until the server has n messages, and a little longer. */
static void ql_wait_for(struct ql *f, int n)
{
	struct ql_wait w = {f, n};

	assert_int_equal(rt_run_until(f->p.loop, ql_got, &w, 20), 0);
	rt_run_for(f->p.loop, 0.1);
	assert_int_equal(f->recvs, n);
	assert_int_equal(f->bad, 0);
}

static void test_queue_lowat(void **state)
{
	static const struct {
		const char *name;
		size_t lowat;
		bool fill;    /* to -ENOBUFS; else stay below the limit */
		int releases; /* messages released when on_drain fires */
	} rows[] = {
	    /* QL_FIT - (QL_DEPTH - 2) = 4 messages stay queued at first */
	    {"between 3 and 4 messages", 3 * QL_LEN + QL_LEN / 2, true, 1},
	    /* at or below it: the header says "below"; reaching it counts */
	    {"exactly 3 messages", 3 * QL_LEN, true, 1},
	    {"exactly 2 messages", 2 * QL_LEN, true, 2},
	    {"one byte: when the queue is empty", 1, true, 4},
	    {"at 4 messages: at the first flush", 4 * QL_LEN, true, 0},
	    {"never full: no on_drain", 3 * QL_LEN + QL_LEN / 2, false, -1},
	};

	(void)state;
	for (size_t r = 0; r < ARRAY_SIZE(rows); r++) {
		struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
		struct ql *f = calloc(1, sizeof(*f));
		struct evr_ctx_opts so, co;
		int first = QL_DEPTH - 2;
		int nsend = rows[r].fill ? QL_FIT : QL_FIT - 1;

		assert_non_null(f);
		for (int i = 0; i < 2 * QL_FIT; i++)
			rt_fill(f->msgs[i], QL_LEN, (uint32_t)i);
		rt_ctx_opts(&so);
		so.recv_depth = QL_DEPTH;
		rt_ctx_opts(&co);
		co.send_queue_limit = QL_FIT * QL_LEN;
		co.send_queue_lowat = rows[r].lowat;
		rt_pair_init2(&f->p, loop, &so, &co);
		f->p.cli.user = f->p.srv.user = f;
		f->p.cli_opts.on_drain = ql_drain;
		f->p.srv_opts.on_recv = ql_recv;
		rt_pair_connect(&f->p);
		f->hold = true;

		for (int i = 0; i < nsend; i++)
			assert_int_equal(ql_send(f), 0);
		assert_int_equal(ql_queued(f), (size_t)nsend * QL_LEN);
		if (rows[r].fill) {
			/* the limit is reached: refused, however small */
			assert_int_equal(ql_send(f), -ENOBUFS);
			assert_int_equal(
			    evr_send(f->p.cli.conn, "x", 1, ql_sent, f),
			    -ENOBUFS);
		}
		assert_int_equal(f->drains, 0); /* never inside a call */
		ql_wait_for(f, first);
		assert_int_equal(ql_queued(f),
				 (size_t)(nsend - first) * QL_LEN);
		assert_int_equal(f->drains, rows[r].releases == 0 ? 1 : 0);
		/* one message at a time */
		for (int i = 1; i <= nsend - first; i++) {
			evr_msg_release(f->held[--f->nheld]);
			ql_wait_for(f, first + i);
			assert_int_equal(ql_queued(f),
					 (size_t)(nsend - first - i) * QL_LEN);
			assert_int_equal(f->drains, rows[r].releases >= 0 &&
							i >= rows[r].releases);
		}
		if (rows[r].releases >= 0)
			assert_int_equal(
			    f->queued_at_drain,
			    (size_t)(nsend - first - rows[r].releases) *
				QL_LEN);
		/* after on_drain the queue takes sends again */
		f->hold = false;
		while (f->nheld)
			evr_msg_release(f->held[--f->nheld]);
		for (int i = 0; i < 5; i++)
			assert_int_equal(ql_send(f), 0);
		ql_wait_for(f, f->sent);
		/* the sender hears of the last sends after their receiver */
		assert_int_equal(rt_run_until(loop, ql_all_done, f, 10), 0);
		assert_int_equal(f->ok, f->sent);
		assert_int_equal(f->err, 0);
		assert_int_equal(f->drains, rows[r].releases >= 0 ? 1 : 0);
		printf("# lowat %s (%zu bytes): on_drain %d time(s), at %zu "
		       "queued bytes\n",
		       rows[r].name, rows[r].lowat, f->drains,
		       f->queued_at_drain);
		rt_pair_close(&f->p);
		assert_int_equal(f->p.cli.close_status, 0);
		rt_pair_fini(&f->p);
		free(f);
		ev_loop_destroy(loop);
	}
}

struct addr_fix {
	struct rt_pair p;
	struct sockaddr_storage seen, deny;
	socklen_t seen_len;
	int seen_rc, denied;
	bool deny_on;
};

static bool same_ip(const struct sockaddr_storage *a,
		    const struct sockaddr_storage *b)
{
	if (a->ss_family != b->ss_family)
		return false;
	if (a->ss_family == AF_INET)
		return !memcmp(&((const struct sockaddr_in *)a)->sin_addr,
			       &((const struct sockaddr_in *)b)->sin_addr, 4);
	return !memcmp(&((const struct sockaddr_in6 *)a)->sin6_addr,
		       &((const struct sockaddr_in6 *)b)->sin6_addr, 16);
}

static uint16_t port_of(const struct sockaddr_storage *a)
{
	return ntohs(a->ss_family == AF_INET
			 ? ((const struct sockaddr_in *)a)->sin_port
			 : ((const struct sockaddr_in6 *)a)->sin6_port);
}

static void addr_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			size_t ulen, void *arg)
{
	struct addr_fix *f = arg;

	(void)l;
	(void)ud;
	(void)ulen;
	f->p.accepts++;
	f->seen_len = sizeof(f->seen);
	f->seen_rc = evr_conn_req_peer_addr(req, (struct sockaddr *)&f->seen,
					    &f->seen_len);
	if (f->deny_on && f->seen_rc == 0 && same_ip(&f->seen, &f->deny)) {
		f->denied++;
		assert_int_equal(evr_reject(req, "address denied", 14), 0);
		return;
	}
	assert_int_equal(evr_accept(req, &f->p.srv_opts, NULL), 0);
}

/* The address of c (peer or local), asserting it is there. */
static struct sockaddr_storage conn_addr(evr_conn *c, bool peer)
{
	struct sockaddr_storage a;
	socklen_t len = sizeof(a);

	memset(&a, 0, sizeof(a));
	assert_int_equal(peer ? evr_conn_peer_addr(c, (struct sockaddr *)&a,
						   &len)
			      : evr_conn_local_addr(c, (struct sockaddr *)&a,
						    &len),
			 0);
	assert_int_equal(len, a.ss_family == AF_INET
				  ? sizeof(struct sockaddr_in)
				  : sizeof(struct sockaddr_in6));
	return a;
}

static int cli_twice(void *arg)
{
	return ((struct rt_pair *)arg)->cli.connects == 2;
}

static void test_peer_addr(void **state)
{
	static const struct {
		const char *name;
		const char *(*addr)(void);
		int family;
	} cases[] = {{"IPv4", rt_addr, AF_INET}, {"IPv6", rt_addr6, AF_INET6}};

	(void)state;
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
		struct addr_fix *f = calloc(1, sizeof(*f));
		struct sockaddr_storage cl, cp, sl, sp;
		struct sockaddr_in6 part;
		evr_conn *first;
		socklen_t len;
		evr_listener *l;
		uint16_t port;

		assert_non_null(f);
		rt_pair_init(&f->p, loop, NULL);
		assert_int_equal(evr_listen(f->p.ctx, cases[k].addr(), 0, 16,
					    addr_accept, f, &l),
				 0);
		port = evr_listener_port(l);
		rt_pair_connect_to(&f->p, cases[k].addr(), port);
		assert_int_equal(f->seen_rc, 0);
		assert_int_equal(f->seen.ss_family, cases[k].family);
		cl = conn_addr(f->p.cli.conn, false);
		cp = conn_addr(f->p.cli.conn, true);
		sl = conn_addr(f->p.srv.conn, false);
		sp = conn_addr(f->p.srv.conn, true);
		/* the request came from the client's own address and port */
		assert_true(same_ip(&f->seen, &cl));
		assert_int_equal(port_of(&f->seen), port_of(&cl));
		assert_true(same_ip(&sp, &cl));
		assert_int_equal(port_of(&sp), port_of(&cl));
		/* and went to the listener's */
		assert_true(same_ip(&cp, &sl));
		assert_int_equal(port_of(&cp), port);
		assert_int_equal(port_of(&sl), port);
		printf("# %s: request from port %u to port %u\n", cases[k].name,
		       port_of(&f->seen), port);

		/* a short buffer: its bytes, and the size it needed */
		memset(&part, 0xee, sizeof(part));
		len = 4;
		assert_int_equal(evr_conn_peer_addr(f->p.srv.conn,
						    (struct sockaddr *)&part,
						    &len),
				 0);
		assert_int_equal(len, cases[k].family == AF_INET
					  ? sizeof(struct sockaddr_in)
					  : sizeof(struct sockaddr_in6));
		assert_memory_equal(&part, &sp, 4);
		assert_int_equal(((uint8_t *)&part)[4], 0xee);
		assert_int_equal(evr_conn_peer_addr(f->p.srv.conn, NULL, &len),
				 -EINVAL);
		assert_int_equal(evr_conn_peer_addr(NULL, (struct sockaddr *)&part,
						    &len),
				 -EINVAL);
		assert_int_equal(evr_conn_req_peer_addr(NULL,
							(struct sockaddr *)&part,
							&len),
				 -EINVAL);

		/* deny the client's address: refused with the reason, and
		 * the connection already up is untouched */
		first = f->p.cli.conn;
		f->deny = cl;
		f->deny_on = true;
		assert_int_equal(evr_connect(f->p.ctx, cases[k].addr(), port,
					     &f->p.cli_opts, NULL),
				 0);
		assert_int_equal(rt_run_until(loop, cli_twice, &f->p, 20), 0);
		assert_int_equal(f->p.cli.connect_status, -ECONNREFUSED);
		assert_int_equal(f->denied, 1);
		assert_int_equal(f->p.srv.closes, 0);
		evr_listener_close(l);
		assert_int_equal(evr_conn_close(first, 0), 0);
		assert_int_equal(rt_run_until(loop, rt_pair_closed_pred, &f->p,
					      20),
				 0);
		rt_pair_fini(&f->p);
		free(f);
		ev_loop_destroy(loop);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_set_mode_in_callback),
	    cmocka_unit_test(test_listener_close),
	    cmocka_unit_test(test_ctx_run),
	    cmocka_unit_test(test_conn_arg),
	    cmocka_unit_test(test_conn_info),
	    cmocka_unit_test(test_recv_wrs),
	    cmocka_unit_test(test_device),
	    cmocka_unit_test(test_wildcard_listen),
	    cmocka_unit_test(test_access),
	    cmocka_unit_test(test_queue_lowat),
	    cmocka_unit_test(test_peer_addr),
	};
	const char *d = getenv("EVR_DEVICE");

	rt_init(300);
	saved_evr_device = d ? strdup(d) : NULL;
	return cmocka_run_group_tests_name("rdma_api", tests, NULL, NULL);
}
