/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Threads: sends and calls into a ctx from other threads (evr_send_mt,
 * evr_ctx_call, evr_conn_ref), on both driving paths.
 *
 * A server ctx on the test's thread; two client ctxs, each on a thread of
 * its own (created there: that thread owns it), each with two conns to the
 * server; eight producer threads, two per conn, send through
 * evr_send_mt() -- small messages, and every 97th above the eager size, so
 * the copy goes by rendezvous -- and queue evr_ctx_call()s to the conn's
 * ctx.  The server checks every message: bytes, size, and each producer's
 * sequence (one conn per producer: its messages arrive in its order, once).
 * Every send callback and every call must run exactly once, on the thread
 * of its ctx.  Then a conn closed by a call gets an evr_send_mt() queued
 * behind the close: its callback says -EPIPE.  The client threads drive
 * their ctxs on a libev loop, or embedded in an epoll loop (rt_drive.h's
 * two paths); a wakeup of either that the eventfd failed to give leaves
 * messages queued and the test past its bound.
 *
 * One listener, its connections placed on two worker threads' ctxs
 * (evr_accept_on, least loaded), on both paths: every placed conn's
 * callbacks run on its worker's thread, each worker serves its share, and
 * the echoes come back intact; the closes reach the workers.  Each ctx's
 * evr_ctx_load() counts its conns, a placement from evr_accept_on on.
 *
 * A worker pool answering requests (both paths): the server's receive
 * callback hands each request, with a reference to its conn, to one of 3
 * pool threads, which answers it with evr_send_mt(); every reply arrives
 * once with the bytes computed from its request (some requests and some
 * replies by rendezvous), every send callback once on the ctx's thread.
 *
 * EVR_THREADS_MSGS sets the total number of messages (default 16000;
 * make check-long sends 1,000,000).
 */
#include "rt_drive.h"

#include <pthread.h>
#include <sched.h>

#define PRODUCERS 8
#define CLIENTS 2
#define CONNS_PER_CLIENT 2
#define BIG 12000 /* above the default eager size: rendezvous */
#define HDR 8	  /* producer, seq */

struct cli;

struct prod {
	int id;
	struct cli *cli;
	evr_conn *conn;
	uint32_t msgs;
	pthread_t tid;
	uint8_t buf[BIG];
	/* written by the conn's thread, read by the test's: atomics */
	uint32_t acked, bad_cb, calls;
};

struct cli {
	int idx;
	enum rt_path path;
	uint16_t port;
	pthread_t tid;
	evr_ctx *ctx;	     /* published once connected */
	struct ev_loop *loop; /* RT_LIBEV */
	evr_conn *conns[CONNS_PER_CLIENT];
	int nconnect; /* conns it makes to the server (0: a worker) */
	int up, stop, fail, epipe; /* atomics */
	/* placed conns served here (test_placed): atomics */
	int placed_up, placed_closed, placed_bad;
	uint32_t placed_echoed;
};

struct srv {
	evr_listener *l;
	int accepted;
	uint32_t next[PRODUCERS];
	uint32_t got, bad;
};

/* rt_drv_run_until for predicates other threads make true: the test's
 * loop sleeps as long as its own ctx allows, which nothing done on other
 * threads shortens, so it looks again every 50 ms. */
static int mt_run_until(struct rt_drv *d, int (*pred)(void *), void *arg,
			double seconds)
{
	double end = rt_now() + seconds * rt_timeout_scale();

	while (!pred(arg) && rt_now() < end)
		(void)rt_drv_run_until_exact(d, pred, arg, 0.05);
	return pred(arg) ? 0 : -1;
}

static uint32_t ld(const uint32_t *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static int ldi(const int *p)
{
	return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void inc(uint32_t *p)
{
	__atomic_add_fetch(p, 1, __ATOMIC_ACQ_REL);
}

static size_t msg_size(uint32_t seq)
{
	return seq % 97 == 50 ? BIG : HDR + (seq * 7u) % 200u;
}

static uint32_t msgs_total(void)
{
	const char *s = getenv("EVR_THREADS_MSGS");
	unsigned long v = s ? strtoul(s, NULL, 10) : 0;

	return v >= PRODUCERS ? (uint32_t)v : 16000;
}

/* ---- server (the test's thread) ---- */

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct srv *s = arg;
	uint32_t id, seq;

	(void)c;
	if (len < HDR) {
		s->bad++;
		return;
	}
	memcpy(&id, data, 4);
	memcpy(&seq, (const uint8_t *)data + 4, 4);
	if (id >= PRODUCERS || seq != s->next[id] || len != msg_size(seq) ||
	    rt_verify((const uint8_t *)data + HDR, len - HDR, seq ^ id) >= 0)
		s->bad++;
	else
		s->next[id]++;
	s->got++;
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct srv *s = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_recv = srv_recv;
	o.arg = s;
	assert_int_equal(evr_accept(req, &o, NULL), 0);
	s->accepted++;
}

/* ---- client threads ---- */

static void cli_up(evr_conn *c, int status, void *arg)
{
	struct cli *k = arg;
	int i;

	if (status) {
		__atomic_store_n(&k->fail, 1, __ATOMIC_RELEASE);
		return;
	}
	for (i = 0; i < CONNS_PER_CLIENT && k->conns[i]; i++)
		;
	/* for the producers, who send on it from their threads */
	k->conns[i] = evr_conn_ref(c);
	__atomic_add_fetch(&k->up, 1, __ATOMIC_ACQ_REL);
}

static void cli_stop(evr_ctx *ctx, void *arg)
{
	struct cli *k = arg;

	if (ctx != k->ctx || !pthread_equal(pthread_self(), k->tid))
		__atomic_store_n(&k->fail, 1, __ATOMIC_RELEASE);
	__atomic_store_n(&k->stop, 1, __ATOMIC_RELEASE);
	if (k->loop)
		ev_break(k->loop, EVBREAK_ALL);
}

static void *cli_main(void *arg)
{
	struct cli *k = arg;
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	evr_ctx *ctx;
	int i, ep = -1;

	k->tid = pthread_self();
	rt_ctx_opts(&o);
	if (k->path == RT_LIBEV)
		k->loop = ev_loop_new(EVFLAG_AUTO);
	if ((k->path == RT_LIBEV && !k->loop) ||
	    evr_ctx_create(&ctx, k->loop, &o))
		abort();
	evr_conn_opts_init(&co);
	co.on_connect = cli_up;
	co.arg = k;
	for (i = 0; i < k->nconnect; i++)
		if (evr_connect(ctx, rt_addr(), k->port, &co, NULL))
			abort();
	__atomic_store_n(&k->ctx, ctx, __ATOMIC_RELEASE);
	if (k->path == RT_LIBEV) {
		ev_run(k->loop, 0); /* until cli_stop */
	} else {
		struct epoll_event ev = {.events = EPOLLIN};

		ep = epoll_create1(EPOLL_CLOEXEC);
		ev.data.fd = evr_ctx_fd(ctx);
		if (ep < 0 || ev.data.fd < 0 ||
		    epoll_ctl(ep, EPOLL_CTL_ADD, ev.data.fd, &ev))
			abort();
		while (!ldi(&k->stop)) {
			int t = evr_ctx_timeout_ms(ctx);

			/* no cap: a wakeup the calls' eventfd does not give
			 * stalls the test, which is what it looks for */
			epoll_wait(ep, &ev, 1, t);
			evr_ctx_process(ctx);
		}
		close(ep);
	}
	evr_ctx_destroy(ctx);
	if (k->loop)
		ev_loop_destroy(k->loop);
	return NULL;
}

/* ---- producers ---- */

static void on_sent(evr_conn *c, int status, void *arg)
{
	struct prod *p = arg;

	if (status || c != p->conn || !pthread_equal(pthread_self(), p->cli->tid))
		inc(&p->bad_cb);
	inc(&p->acked);
}

static void on_call(evr_ctx *ctx, void *arg)
{
	struct prod *p = arg;

	if (ctx != p->cli->ctx || !pthread_equal(pthread_self(), p->cli->tid))
		inc(&p->bad_cb);
	inc(&p->calls);
}

static void *produce(void *arg)
{
	struct prod *p = arg;
	uint32_t seq, id = (uint32_t)p->id;

	for (seq = 0; seq < p->msgs; seq++) {
		size_t len = msg_size(seq);

		/* a bound on what is queued: the copies are memory */
		while (seq - ld(&p->acked) > 512)
			sched_yield();
		memcpy(p->buf, &id, 4);
		memcpy(p->buf + 4, &seq, 4);
		rt_fill(p->buf + HDR, len - HDR, seq ^ id);
		if (evr_send_mt(p->conn, p->buf, len, on_sent, p))
			abort();
		/* the copy is made: the buffer is ours again at once */
		memset(p->buf, 0xee, len);
		if (seq % 50 == 0 && evr_ctx_call(p->cli->ctx, on_call, p))
			abort();
	}
	return NULL;
}

/* ---- the test ---- */

struct run {
	struct srv *s;
	struct cli *k;
	struct prod *p;
	uint32_t total;
};

static int up_pred(void *arg)
{
	struct run *r = arg;
	int i;

	for (i = 0; i < CLIENTS; i++)
		if (ldi(&r->k[i].up) < CONNS_PER_CLIENT || ldi(&r->k[i].fail))
			return ldi(&r->k[i].fail);
	return r->s->accepted == CLIENTS * CONNS_PER_CLIENT;
}

static int done_pred(void *arg)
{
	struct run *r = arg;
	int i;

	for (i = 0; i < PRODUCERS; i++)
		if (ld(&r->p[i].acked) < r->p[i].msgs ||
		    ld(&r->p[i].calls) < (r->p[i].msgs + 49) / 50)
			return 0;
	return r->s->got >= r->total;
}

static int epipe_pred(void *arg)
{
	return ldi(&((struct cli *)arg)->epipe);
}

static void close_first(evr_ctx *ctx, void *arg)
{
	struct cli *k = arg;

	(void)ctx;
	if (evr_conn_close(k->conns[0], 0))
		__atomic_store_n(&k->fail, 1, __ATOMIC_RELEASE);
}

static void after_close(evr_conn *c, int status, void *arg)
{
	struct cli *k = arg;

	if (c == k->conns[0] && status == -EPIPE &&
	    pthread_equal(pthread_self(), k->tid))
		__atomic_store_n(&k->epipe, 1, __ATOMIC_RELEASE);
	else
		__atomic_store_n(&k->epipe, -1, __ATOMIC_RELEASE);
}

static void run_threads(enum rt_path path)
{
	static struct prod p[PRODUCERS];
	struct cli k[CLIENTS];
	pthread_t kt[CLIENTS];
	struct srv s;
	struct run r = {&s, k, p, 0};
	struct rt_drv d;
	struct evr_ctx_opts o;
	evr_ctx *ctx;
	uint32_t total = msgs_total(), each = total / PRODUCERS, sum = 0;
	double t0;
	int i, j;

	printf("# %s: %u messages from %d threads\n", rt_path_name(path),
	       each * PRODUCERS, PRODUCERS);
	memset(&s, 0, sizeof(s));
	memset(k, 0, sizeof(k));
	memset(p, 0, sizeof(p));
	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	ctx = rt_drv_ctx(&d, &o);
	assert_int_equal(evr_listen(ctx, rt_addr(), 0, 0, on_accept, &s, &s.l),
			 0);
	for (i = 0; i < CLIENTS; i++) {
		k[i].idx = i;
		k[i].path = path;
		k[i].port = evr_listener_port(s.l);
		k[i].nconnect = CONNS_PER_CLIENT;
		assert_int_equal(pthread_create(&kt[i], NULL, cli_main, &k[i]),
				 0);
	}
	assert_int_equal(mt_run_until(&d, up_pred, &r, 30), 0);
	for (i = 0; i < CLIENTS; i++)
		assert_int_equal(ldi(&k[i].fail), 0);

	t0 = rt_now();
	for (i = 0; i < PRODUCERS; i++) {
		p[i].id = i;
		p[i].cli = &k[i % CLIENTS];
		p[i].conn = p[i].cli->conns[(i / CLIENTS) % CONNS_PER_CLIENT];
		p[i].msgs = each;
		r.total += each;
		assert_int_equal(pthread_create(&p[i].tid, NULL, produce, &p[i]),
				 0);
	}
	assert_int_equal(mt_run_until(&d, done_pred, &r, 60 + r.total / 500),
			 0);
	for (i = 0; i < PRODUCERS; i++)
		pthread_join(p[i].tid, NULL);
	printf("# %u messages in %.2f s\n", r.total, rt_now() - t0);
	/* nothing more comes: every callback fired once */
	rt_drv_run_for(&d, 0.2);
	assert_int_equal(s.bad, 0);
	assert_int_equal(s.got, r.total);
	for (i = 0; i < PRODUCERS; i++) {
		assert_int_equal(s.next[i], each);
		assert_int_equal(ld(&p[i].acked), each);
		assert_int_equal(ld(&p[i].calls), (each + 49) / 50);
		assert_int_equal(ld(&p[i].bad_cb), 0);
		sum += ld(&p[i].acked);
	}
	assert_int_equal(sum, r.total);

	/* a send queued behind the close of its conn: -EPIPE, on its thread */
	assert_int_equal(evr_ctx_call(k[0].ctx, close_first, &k[0]), 0);
	assert_int_equal(evr_send_mt(k[0].conns[0], "x", 1, after_close, &k[0]),
			 0);
	assert_int_equal(mt_run_until(&d, epipe_pred, &k[0], 20), 0);
	assert_int_equal(ldi(&k[0].epipe), 1);
	assert_int_equal(evr_send_mt(NULL, "x", 1, NULL, NULL), -EINVAL);
	assert_int_equal(evr_send_mt(k[0].conns[1], NULL, 1, NULL, NULL),
			 -EINVAL);
	assert_int_equal(evr_send_mt(k[0].conns[1], "x", o.max_msg_size + 1,
				     NULL, NULL),
			 -EMSGSIZE);

	for (i = 0; i < CLIENTS; i++) {
		assert_int_equal(evr_ctx_call(k[i].ctx, cli_stop, &k[i]), 0);
		pthread_join(kt[i], NULL);
		assert_int_equal(ldi(&k[i].fail), 0);
		/* the handles outlived their ctx: the last references go */
		for (j = 0; j < CONNS_PER_CLIENT; j++)
			evr_conn_unref(k[i].conns[j]);
	}
	rt_drv_detach(&d);
	evr_ctx_destroy(ctx);
	rt_drv_fini(&d);
}

/* ---- one listener, its conns placed on worker threads (evr_accept_on) --- */

#define PLACED 4	 /* connections */
#define PLACED_MSGS 200 /* echoed on each */

struct placed_run {
	struct cli w[CLIENTS]; /* workers: ctxs on their threads, no connects */
	evr_ctx *wctx[CLIENTS];
	evr_ctx *lctx; /* the listener's, where the test's clients are */
	evr_conn *cli[PLACED];
	int cli_up, cli_closed;
	uint32_t got[PLACED], bad;
	uint8_t msg[PLACED][256];
	unsigned placed, miscounted; /* the listener's thread only */
};

static void placed_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct cli *w = arg;

	if (!pthread_equal(pthread_self(), w->tid) ||
	    evr_send(c, data, len, NULL, NULL))
		__atomic_add_fetch(&w->placed_bad, 1, __ATOMIC_ACQ_REL);
	inc(&w->placed_echoed);
}

static void placed_up(evr_conn *c, int status, void *arg)
{
	struct cli *w = arg;

	if (!pthread_equal(pthread_self(), w->tid) || status || !c)
		__atomic_add_fetch(&w->placed_bad, 1, __ATOMIC_ACQ_REL);
	else
		__atomic_add_fetch(&w->placed_up, 1, __ATOMIC_ACQ_REL);
}

static void placed_closed(evr_conn *c, int status, void *arg)
{
	struct cli *w = arg;

	(void)c;
	(void)status;
	if (!pthread_equal(pthread_self(), w->tid))
		__atomic_add_fetch(&w->placed_bad, 1, __ATOMIC_ACQ_REL);
	__atomic_add_fetch(&w->placed_closed, 1, __ATOMIC_ACQ_REL);
}

static void placed_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			  size_t ulen, void *arg)
{
	struct placed_run *r = arg;
	evr_ctx *to = evr_ctx_least_loaded(r->wctx, CLIENTS);
	struct cli *w = &r->w[0];
	struct evr_conn_opts o;
	unsigned seen = 0;
	int i;

	/* until the close, a worker's load is what was placed on it, at
	 * every moment: its thread taking a placement over must not show
	 * it twice (or not at all) to this one, or the placement skews */
	for (i = 0; i < CLIENTS; i++)
		seen += evr_ctx_load(r->wctx[i]);
	if (seen != r->placed)
		r->miscounted++;
	r->placed++;

	for (i = 1; i < CLIENTS; i++)
		if (r->w[i].ctx == to)
			w = &r->w[i];
	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = placed_up;
	o.on_recv = placed_recv;
	o.on_close = placed_closed;
	o.arg = w;
	assert_int_equal(evr_accept_on(req, to, &o), 0);
}

static void pc_up(evr_conn *c, int status, void *arg)
{
	struct placed_run *r = arg;

	if (status) {
		r->bad++;
		return;
	}
	r->cli[r->cli_up++] = c;
}

static void pc_closed(evr_conn *c, int status, void *arg)
{
	struct placed_run *r = arg;

	(void)c;
	(void)status;
	r->cli_closed++;
}

static void pc_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct placed_run *r = arg;
	int i;

	for (i = 0; i < PLACED && r->cli[i] != c; i++)
		;
	if (i == PLACED || len != sizeof(r->msg[i]) ||
	    rt_verify(data, len, r->got[i] + (uint32_t)i * 1000u) >= 0)
		r->bad++;
	else
		r->got[i]++;
	if (i < PLACED && r->got[i] < PLACED_MSGS) {
		rt_fill(r->msg[i], sizeof(r->msg[i]),
			r->got[i] + (uint32_t)i * 1000u);
		if (evr_send(c, r->msg[i], sizeof(r->msg[i]), NULL, NULL))
			r->bad++;
	}
}

static int placed_up_pred(void *arg)
{
	struct placed_run *r = arg;

	return r->cli_up == PLACED;
}

static int placed_echo_pred(void *arg)
{
	struct placed_run *r = arg;
	int i;

	for (i = 0; i < PLACED; i++)
		if (r->got[i] < PLACED_MSGS)
			return 0;
	return 1;
}

static int placed_closed_pred(void *arg)
{
	return ((struct placed_run *)arg)->cli_closed == PLACED;
}

static int workers_ready_pred(void *arg)
{
	struct placed_run *r = arg;
	int i;

	for (i = 0; i < CLIENTS; i++)
		if (!__atomic_load_n(&r->w[i].ctx, __ATOMIC_ACQUIRE))
			return 0;
	return 1;
}

static int workers_closed_pred(void *arg)
{
	struct placed_run *r = arg;
	int i;

	for (i = 0; i < CLIENTS; i++)
		if (ldi(&r->w[i].placed_closed) < PLACED / CLIENTS)
			return 0;
	return 1;
}

static int workers_idle_pred(void *arg)
{
	struct placed_run *r = arg;
	int i;

	for (i = 0; i < CLIENTS; i++)
		if (evr_ctx_load(r->wctx[i]))
			return 0;
	return evr_ctx_load(r->lctx) == 0;
}

static void run_placed(enum rt_path path)
{
	static struct placed_run r;
	pthread_t wt[CLIENTS];
	struct rt_drv d;
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	evr_listener *l;
	evr_ctx *ctx;
	int i;

	printf("# %s: %d connections placed on %d worker threads\n",
	       rt_path_name(path), PLACED, CLIENTS);
	memset(&r, 0, sizeof(r));
	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	ctx = rt_drv_ctx(&d, &o);
	r.lctx = ctx;
	assert_int_equal(evr_listen(ctx, rt_addr(), 0, 0, placed_accept, &r,
				    &l),
			 0);
	for (i = 0; i < CLIENTS; i++) {
		r.w[i].idx = i;
		r.w[i].path = path;
		assert_int_equal(pthread_create(&wt[i], NULL, cli_main,
						&r.w[i]),
				 0);
	}
	assert_int_equal(mt_run_until(&d, workers_ready_pred, &r, 30), 0);
	for (i = 0; i < CLIENTS; i++)
		r.wctx[i] = r.w[i].ctx;
	assert_null(evr_ctx_least_loaded(NULL, CLIENTS));
	assert_null(evr_ctx_least_loaded(r.wctx, 0));
	assert_ptr_equal(evr_ctx_least_loaded(r.wctx, CLIENTS), r.wctx[0]);
	evr_conn_opts_init(&co);
	co.on_connect = pc_up;
	co.on_recv = pc_recv;
	co.on_close = pc_closed;
	co.arg = &r;
	for (i = 0; i < PLACED; i++)
		assert_int_equal(evr_connect(ctx, rt_addr(),
					     evr_listener_port(l), &co, NULL),
				 0);
	assert_int_equal(mt_run_until(&d, placed_up_pred, &r, 30), 0);
	for (i = 0; i < PLACED; i++) {
		rt_fill(r.msg[i], sizeof(r.msg[i]), (uint32_t)i * 1000u);
		assert_int_equal(evr_send(r.cli[i], r.msg[i], sizeof(r.msg[i]),
					  NULL, NULL),
				 0);
	}
	assert_int_equal(mt_run_until(&d, placed_echo_pred, &r, 60), 0);
	assert_int_equal(r.bad, 0);
	assert_int_equal(r.placed, PLACED);
	assert_int_equal(r.miscounted, 0);
	/* least loaded: placements count from evr_accept_on on, so the
	 * workers take turns; each ctx counts only its own conns */
	for (i = 0; i < CLIENTS; i++)
		assert_int_equal(evr_ctx_load(r.wctx[i]), PLACED / CLIENTS);
	assert_int_equal(evr_ctx_load(ctx), PLACED);
	for (i = 0; i < PLACED; i++)
		assert_int_equal(evr_conn_close(r.cli[i], 0), 0);
	assert_int_equal(mt_run_until(&d, placed_closed_pred, &r, 30), 0);

	/* each worker served its share, every callback on its thread */
	assert_int_equal(mt_run_until(&d, workers_closed_pred, &r, 30), 0);
	assert_int_equal(mt_run_until(&d, workers_idle_pred, &r, 30), 0);
	for (i = 0; i < CLIENTS; i++) {
		assert_int_equal(ldi(&r.w[i].placed_up), PLACED / CLIENTS);
		assert_int_equal(ld(&r.w[i].placed_echoed),
				 PLACED_MSGS * PLACED / CLIENTS);
		assert_int_equal(ldi(&r.w[i].placed_bad), 0);
		assert_int_equal(evr_ctx_call(r.w[i].ctx, cli_stop, &r.w[i]),
				 0);
		pthread_join(wt[i], NULL);
		assert_int_equal(ldi(&r.w[i].fail), 0);
	}
	evr_listener_close(l);
	rt_drv_detach(&d);
	evr_ctx_destroy(ctx);
	rt_drv_fini(&d);
}

/* ---- a worker pool answering requests from other threads ---- */

#define POOL_WORKERS 3
#define POOL_REQS 4000
#define POOL_WINDOW 32

struct job {
	struct job *next;
	evr_conn *conn; /* a reference (evr_conn_ref) */
	size_t len;
	uint8_t data[];
};

struct pool {
	pthread_t test_tid;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct job *head, **tail;
	int stop;
	pthread_t w[POOL_WORKERS];
	uint32_t answered[POOL_WORKERS]; /* atomics */
	uint32_t worker_fail;		  /* atomic */
	/* the test's thread only */
	uint32_t reqs, srv_bad, sent_cb, sent_bad;
	uint32_t req_sent, req_cb, got, cli_bad;
	uint8_t seen[POOL_REQS];
	evr_conn *cli;
};

struct pool_arg {
	struct pool *p;
	int idx;
};

static size_t req_size(uint32_t seq)
{
	return seq % 61 == 3 ? BIG : 8 + (seq * 13u) % 300u;
}

static size_t reply_size(uint32_t seq)
{
	return seq % 53 == 5 ? BIG : req_size(seq);
}

/* The answer to request seq: its bytes, each plus one, as long as the
 * reply (a reply longer than its request repeats it). */
static void make_reply(uint8_t *out, const uint8_t *req, uint32_t seq)
{
	size_t i, body = req_size(seq) - 4, n = reply_size(seq);

	memcpy(out, &seq, 4);
	for (i = 4; i < n; i++)
		out[i] = (uint8_t)(req[4 + (i - 4) % body] + 1u);
}

static void fill_req(uint8_t *buf, uint32_t seq)
{
	memcpy(buf, &seq, 4);
	rt_fill(buf + 4, req_size(seq) - 4, seq);
}

/* A reply's send callback: on the conn's thread, the test's. */
static void pool_reply_sent(evr_conn *c, int status, void *arg)
{
	struct pool *p = arg;

	(void)c;
	if (status || !pthread_equal(pthread_self(), p->test_tid))
		p->sent_bad++;
	p->sent_cb++;
}

static void *pool_worker(void *arg)
{
	struct pool_arg *a = arg;
	struct pool *p = a->p;
	static __thread uint8_t reply[BIG];
	struct job *j;
	uint32_t seq;

	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->head && !p->stop)
			pthread_cond_wait(&p->cv, &p->mu);
		j = p->head;
		if (j) {
			p->head = j->next;
			if (!p->head)
				p->tail = &p->head;
		}
		pthread_mutex_unlock(&p->mu);
		if (!j)
			return NULL;
		memcpy(&seq, j->data, 4);
		make_reply(reply, j->data, seq);
		if (evr_send_mt(j->conn, reply, reply_size(seq), pool_reply_sent,
				p) < 0)
			__atomic_add_fetch(&p->worker_fail, 1, __ATOMIC_ACQ_REL);
		evr_conn_unref(j->conn);
		free(j);
		inc(&p->answered[a->idx]);
	}
}

/* The server's receive, on the test's thread: hand the request over. */
static void pool_srv_recv(evr_conn *c, const void *data, size_t len,
			  void *arg)
{
	struct pool *p = ((struct rt_side *)arg)->user;
	struct job *j;
	uint32_t seq;

	if (len < 4) {
		p->srv_bad++;
		return;
	}
	memcpy(&seq, data, 4);
	if (seq >= POOL_REQS || len != req_size(seq)) {
		p->srv_bad++;
		return;
	}
	j = malloc(sizeof(*j) + len);
	assert_non_null(j);
	j->next = NULL;
	j->conn = evr_conn_ref(c);
	j->len = len;
	memcpy(j->data, data, len);
	p->reqs++;
	pthread_mutex_lock(&p->mu);
	*p->tail = j;
	p->tail = &j->next;
	pthread_cond_signal(&p->cv);
	pthread_mutex_unlock(&p->mu);
}

static void pool_req_sent(evr_conn *c, int status, void *arg)
{
	struct pool *p = ((struct rt_side *)evr_conn_arg(c))->user;

	if (status || !pthread_equal(pthread_self(), p->test_tid))
		p->cli_bad++;
	p->req_cb++;
	free(arg);
}

static int pool_send_req(struct pool *p)
{
	uint32_t seq = p->req_sent;
	uint8_t *buf = malloc(req_size(seq));

	assert_non_null(buf);
	fill_req(buf, seq);
	p->req_sent++;
	return evr_send(p->cli, buf, req_size(seq), pool_req_sent, buf);
}

/* The client's receive: a reply, once per request, with the right bytes;
 * then the next request. */
static void pool_cli_recv(evr_conn *c, const void *data, size_t len,
			  void *arg)
{
	struct pool *p = ((struct rt_side *)arg)->user;
	static uint8_t req[BIG], want[BIG];
	uint32_t seq;

	(void)c;
	p->got++;
	if (len < 4) {
		p->cli_bad++;
		return;
	}
	memcpy(&seq, data, 4);
	if (seq >= POOL_REQS || p->seen[seq]++ || len != reply_size(seq)) {
		p->cli_bad++;
		return;
	}
	fill_req(req, seq);
	make_reply(want, req, seq);
	if (memcmp(want, data, len))
		p->cli_bad++;
	if (p->req_sent < POOL_REQS && pool_send_req(p) < 0)
		p->cli_bad++;
}

static int pool_done_pred(void *arg)
{
	struct pool *p = arg;

	return p->got == POOL_REQS && p->req_cb == POOL_REQS &&
	       p->sent_cb == POOL_REQS;
}

static void run_pool(enum rt_path path)
{
	static struct pool p;
	struct pool_arg a[POOL_WORKERS];
	struct rt_drv d;
	struct rt_pair pr;
	uint32_t total = 0;
	int i;

	printf("# %s: %d requests answered by %d pool threads\n",
	       rt_path_name(path), POOL_REQS, POOL_WORKERS);
	memset(&p, 0, sizeof(p));
	p.test_tid = pthread_self();
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv, NULL);
	p.tail = &p.head;
	for (i = 0; i < POOL_WORKERS; i++) {
		a[i].p = &p;
		a[i].idx = i;
		assert_int_equal(pthread_create(&p.w[i], NULL, pool_worker,
						&a[i]),
				 0);
	}
	rt_drv_init(&d, path);
	rt_pair_init(&pr, rt_drv_loop(&d), NULL);
	rt_drv_attach(&d, pr.ctx);
	pr.srv.user = pr.cli.user = &p;
	pr.srv_opts.on_recv = pool_srv_recv;
	pr.cli_opts.on_recv = pool_cli_recv;
	rt_drv_pair_connect(&d, &pr);
	p.cli = pr.cli.conn;
	for (i = 0; i < POOL_WINDOW; i++)
		assert_int_equal(pool_send_req(&p), 0);
	assert_int_equal(mt_run_until(&d, pool_done_pred, &p, 120), 0);
	assert_int_equal(p.cli_bad, 0);
	assert_int_equal(p.srv_bad, 0);
	assert_int_equal(p.sent_bad, 0);
	assert_int_equal(p.reqs, POOL_REQS);
	for (i = 0; i < POOL_REQS; i++)
		assert_int_equal(p.seen[i], 1);

	pthread_mutex_lock(&p.mu);
	p.stop = 1;
	pthread_cond_broadcast(&p.cv);
	pthread_mutex_unlock(&p.mu);
	for (i = 0; i < POOL_WORKERS; i++) {
		pthread_join(p.w[i], NULL);
		total += ld(&p.answered[i]);
	}
	assert_int_equal(total, POOL_REQS);
	assert_int_equal(ld(&p.worker_fail), 0);
	rt_drv_pair_close(&d, &pr);
	rt_drv_pair_fini(&d, &pr);
	rt_drv_fini(&d);
	pthread_cond_destroy(&p.cv);
	pthread_mutex_destroy(&p.mu);
}

static void test_pool_libev(void **state)
{
	(void)state;
	run_pool(RT_LIBEV);
}

static void test_pool_embed(void **state)
{
	(void)state;
	run_pool(RT_EMBED);
}

static void test_placed_libev(void **state)
{
	(void)state;
	run_placed(RT_LIBEV);
}

static void test_placed_embed(void **state)
{
	(void)state;
	run_placed(RT_EMBED);
}

static void test_threads_libev(void **state)
{
	(void)state;
	run_threads(RT_LIBEV);
}

static void test_threads_embed(void **state)
{
	(void)state;
	run_threads(RT_EMBED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_threads_libev),
		cmocka_unit_test(test_threads_embed),
		cmocka_unit_test(test_placed_libev),
		cmocka_unit_test(test_placed_embed),
		cmocka_unit_test(test_pool_libev),
		cmocka_unit_test(test_pool_embed),
	};

	rt_init(1800);
	return cmocka_run_group_tests_name("rdma_threads", tests, NULL, NULL);
}
