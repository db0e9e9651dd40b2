/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf-server.c: the server role of evrdma-perf (-s).
 *
 * One evr_ctx, one listener, any number of tests until SIGINT or SIGTERM.
 * Each connect request carries its test request in the user bytes (see
 * perf.h): what to do with the connection's messages (echo every one,
 * count them, or nothing at all) and the completion mode to run in.  The
 * mode is per ctx, so the latest request sets it for every connection;
 * once the last connection has closed the ctx goes back to EVENT mode and
 * sleeps until the next test.  An empty message is a report request,
 * answered with a report (perf-common.c).
 *
 * Every connection also serves calls (on_request is set, which is what
 * agrees to them), for -t rpc: a request is answered with itself -- at
 * once, held (evr_conn_hold) until the reply's send is done; or, when its
 * first byte is RPC_DELAY_BYTE, RPC_DELAY_MS later by a timer of the
 * server's loop, from a copy (a held receive buffer would keep its credit
 * from the client all that time).  A late answer to a call the client
 * gave up is harmless: evr_reply sends it (the client drops it), or
 * returns -ENOTCONN or -ECANCELED and sends nothing.  Requests still held
 * at exit are dropped.
 *
 * With -T THREADS the listener's ctx only listens: each connection is
 * placed (evr_accept_on) on the worker thread with the fewest open
 * connections, each worker running a ctx on a libev loop of its own, so
 * the mode a request asks for is set on its worker's ctx.  CPU time in
 * the reports is the whole process's.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* The listener's ctx, or a worker's (-T): each on its own thread. */
/* A request to be answered RPC_DELAY_MS late, on its server's list. */
struct held {
	ev_timer w;
	struct server *srv;
	evr_request *req;
	struct held *prev, *next;
	size_t len;
	uint8_t data[]; /* the request's, which the answer echoes */
};

struct server {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *listener;
	ev_signal sigint, sigterm;
	unsigned nopen; /* accepted and not yet closed */
	int verbose;
	uint64_t conns, errors;
	/* -T: the workers and their ctxs (listener's); the thread (worker's) */
	struct server *w;
	evr_ctx *wctx[MAX_THREADS];
	int nw;
	bool worker;
	pthread_t t;
	int ready; /* 1 made, -errno failed; under start_mu */
	struct held *held; /* delayed requests */
};

static pthread_mutex_t start_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start_cv = PTHREAD_COND_INITIALIZER;

struct sconn {
	struct server *srv;
	enum kind kind;
	int mode; /* the mode the test asked for */
	uint64_t msgs, bytes;
};

static void srv_conn_gone(struct server *srv)
{
	int rc;

	if (--srv->nopen)
		return;
	/* No test running: sleep instead of spinning between tests. */
	rc = evr_ctx_set_mode(srv->ctx, EVR_MODE_EVENT);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_set_mode: %s\n",
			evr_strerror(rc));
		srv->errors++;
	}
}

static void srv_on_echo_sent(evr_conn *conn, int status, void *arg)
{
	(void)conn;
	(void)status; /* a failed echo also ends the connection */
	evr_msg_release(arg);
}

static void srv_on_report_sent(evr_conn *conn, int status, void *arg)
{
	(void)conn;
	(void)status;
	free(arg);
}

static int srv_send_report(struct sconn *sc, evr_conn *conn)
{
	struct evr_stats st;
	struct report r;
	uint8_t *buf;
	int rc;

	rc = cpu_us(&r.cpu_us);
	if (rc < 0)
		return rc;
	evr_ctx_stats(sc->srv->ctx, &st);
	r.msgs = sc->msgs;
	r.bytes = sc->bytes;
	r.t_ns = now_ns();
	r.switches = st.mode_switches;
	r.wakeups = st.wakeups;
	buf = malloc(REPORT_LEN);
	if (!buf)
		return -ENOMEM;
	report_encode(buf, &r);
	rc = evr_send(conn, buf, REPORT_LEN, srv_on_report_sent, buf);
	if (rc < 0)
		free(buf);
	return rc;
}

static void srv_on_recv(evr_conn *conn, const void *data, size_t len,
			void *arg)
{
	struct sconn *sc = arg;
	evr_msg *msg;
	int rc = 0;

	if (len == 0) {
		rc = srv_send_report(sc, conn);
		goto out;
	}
	sc->msgs++;
	sc->bytes += len;
	if (sc->kind != K_ECHO)
		return;
	/* A small echo is copied by evr_send (EVR_SEND_COPY_MAX), as a
	 * server that answers from on_recv would send it. */
	if (len <= EVR_SEND_COPY_MAX) {
		rc = evr_send(conn, data, len, NULL, NULL);
		goto out;
	}
	/* A larger one goes from the received buffer itself, held until its
	 * send is done: evr_send reads its source when it posts, and a buffer
	 * given back after on_recv could hold the next message by then. */
	msg = evr_conn_hold(conn);
	if (!msg) {
		rc = -ENOMEM;
		goto out;
	}
	rc = evr_send(conn, data, len, srv_on_echo_sent, msg);
	if (rc < 0)
		evr_msg_release(msg);
out:
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: server send: %s\n",
			evr_strerror(rc));
		sc->srv->errors++;
		evr_conn_close(conn, EVR_CLOSE_ABORT);
	}
}

/* ---- calls ---- */

static void srv_on_copy_sent(evr_conn *conn, int status, void *arg)
{
	(void)conn;
	(void)status; /* a failed reply also ends the connection */
	free(arg);
}

/* Answer req with buf; done(arg) frees buf once the reply's send is done
 * -- or here, when there is no send. */
static void srv_reply(struct server *srv, evr_request *req, const void *buf,
		      size_t len, evr_op_cb done, void *arg)
{
	evr_conn *conn = evr_request_conn(req);
	int rc = evr_reply(req, buf, len, done, arg);

	if (rc == 0)
		return;
	if (done)
		done(NULL, rc, arg);
	/* the handle is spent either way */
	if (rc == -ENOTCONN || rc == -ECANCELED)
		return; /* the call ended without it */
	fprintf(stderr, "evrdma-perf: server reply: %s\n", evr_strerror(rc));
	srv->errors++;
	evr_conn_close(conn, EVR_CLOSE_ABORT);
}

static void held_unlink(struct held *h)
{
	if (h->prev)
		h->prev->next = h->next;
	else
		h->srv->held = h->next;
	if (h->next)
		h->next->prev = h->prev;
}

static void srv_on_held(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct held *h = (struct held *)((char *)w - offsetof(struct held, w));

	(void)loop;
	(void)revents;
	held_unlink(h);
	srv_reply(h->srv, h->req, h->data, h->len, srv_on_copy_sent, h);
}

static void srv_on_request(evr_conn *conn, evr_request *req,
			   const void *data, size_t len, void *arg)
{
	struct sconn *sc = arg;
	struct server *srv = sc->srv;
	evr_msg *msg;
	struct held *h;

	sc->msgs++;
	sc->bytes += len;
	if (len <= EVR_SEND_COPY_MAX &&
	    (!len || *(const uint8_t *)data != RPC_DELAY_BYTE)) {
		/* copied by evr_reply, as by evr_send: nothing to hold */
		srv_reply(srv, req, data, len, NULL, NULL);
		return;
	}
	if (!len || *(const uint8_t *)data != RPC_DELAY_BYTE) {
		msg = evr_conn_hold(conn);
		if (!msg)
			goto nomem;
		srv_reply(srv, req, data, len, srv_on_echo_sent, msg);
		return;
	}
	h = malloc(sizeof(*h) + len);
	if (!h)
		goto nomem;
	h->srv = srv;
	h->req = req;
	h->len = len;
	memcpy(h->data, data, len);
	h->prev = NULL;
	h->next = srv->held;
	if (h->next)
		h->next->prev = h;
	srv->held = h;
	ev_timer_init(&h->w, srv_on_held, RPC_DELAY_MS / 1000.0, 0.);
	ev_timer_start(srv->loop, &h->w);
	return;
nomem:
	fprintf(stderr, "evrdma-perf: server: out of memory for a request\n");
	srv->errors++;
	evr_request_drop(req);
	evr_conn_close(conn, EVR_CLOSE_ABORT);
}

/* Before the ctx goes: the requests still held are dropped. */
static void drop_held(struct server *srv)
{
	while (srv->held) {
		struct held *h = srv->held;

		ev_timer_stop(srv->loop, &h->w);
		held_unlink(h);
		evr_request_drop(h->req);
		free(h);
	}
}

static void set_mode(struct server *srv, int mode)
{
	int rc = evr_ctx_set_mode(srv->ctx, (enum evr_mode)mode);

	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_set_mode: %s\n",
			evr_strerror(rc));
		srv->errors++;
	}
}

static void srv_on_connect(evr_conn *conn, int status, void *arg)
{
	struct sconn *sc = arg;
	struct server *srv = sc->srv;

	if (srv->worker) { /* placed on a worker: counted and set up here */
		srv->nopen++;
		if (status == 0)
			set_mode(srv, sc->mode);
	}
	if (status < 0) {
		fprintf(stderr, "evrdma-perf: accept failed: %s\n",
			evr_strerror(status));
		srv->errors++;
		free(sc);
		srv_conn_gone(srv);
		return;
	}
	srv->conns++;
}

static void srv_on_close(evr_conn *conn, int status, void *arg)
{
	struct sconn *sc = arg;
	struct server *srv = sc->srv;

	(void)conn;
	if (srv->verbose)
		fprintf(stderr, "evrdma-perf: connection closed (%s): %llu "
				"messages, %llu bytes\n",
			evr_err_name(status), (unsigned long long)sc->msgs,
			(unsigned long long)sc->bytes);
	free(sc);
	srv_conn_gone(srv);
}

/* The worker serving the fewest connections (evr_ctx_load counts them
 * from evr_accept_on on). */
static struct server *least_loaded(struct server *srv)
{
	evr_ctx *to = evr_ctx_least_loaded(srv->wctx, (size_t)srv->nw);
	int i;

	for (i = 1; i < srv->nw; i++)
		if (srv->w[i].ctx == to)
			return &srv->w[i];
	return &srv->w[0];
}

static void srv_on_accept(evr_listener *l, evr_conn_req *req,
			  const void *user, size_t ulen, void *arg)
{
	static const char bad[] = "evrdma-perf: bad test request";
	struct server *srv = arg;
	const uint8_t *u = user;
	struct evr_conn_opts co;
	struct sconn *sc;
	int rc;

	(void)l;
	if (ulen != DESC_LEN || memcmp(u, desc_magic, 4) || u[4] < K_ECHO ||
	    u[4] > K_CONN || u[5] > EVR_MODE_ADAPTIVE) {
		rc = evr_reject(req, bad, sizeof(bad) - 1);
		if (rc < 0)
			fprintf(stderr, "evrdma-perf: evr_reject: %s\n",
				evr_strerror(rc));
		return;
	}
	sc = calloc(1, sizeof(*sc));
	if (!sc) {
		evr_reject(req, "out of memory", 13);
		return;
	}
	sc->srv = srv;
	sc->kind = (enum kind)u[4];
	sc->mode = u[5];
	evr_conn_opts_init(&co);
	co.on_connect = srv_on_connect;
	co.on_recv = srv_on_recv;
	co.on_close = srv_on_close;
	co.on_request = srv_on_request; /* serve calls (-t rpc) */
	co.arg = sc;
	if (srv->nw) {
		struct server *w = least_loaded(srv);

		sc->srv = w;
		rc = evr_accept_on(req, w->ctx, &co);
		if (rc < 0) { /* not answered: the listener refuses it */
			fprintf(stderr, "evrdma-perf: evr_accept_on: %s\n",
				evr_strerror(rc));
			srv->errors++;
			free(sc);
		}
		return;
	}
	/* The mode is per ctx: the latest request sets it for all. */
	set_mode(srv, sc->mode);
	rc = evr_accept(req, &co, NULL);
	if (rc < 0) {
		/* the request is rejected for us */
		fprintf(stderr, "evrdma-perf: evr_accept: %s\n",
			evr_strerror(rc));
		srv->errors++;
		free(sc);
		srv->nopen++;
		srv_conn_gone(srv);
		return;
	}
	srv->nopen++;
}

static void srv_on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

static void stop_loop(evr_ctx *ctx, void *arg)
{
	(void)ctx;
	ev_break(arg, EVBREAK_ALL);
}

static int make_ctx(struct server *srv, const char *addr)
{
	struct evr_ctx_opts o;
	int rc;

	evr_ctx_opts_init(&o);
	o.local_addr = addr;
	o.mode = EVR_MODE_EVENT;
	perf_tune_apply(&o);
	rc = evr_ctx_create(&srv->ctx, srv->loop, &o);
	if (rc < 0)
		fprintf(stderr, "evrdma-perf: evr_ctx_create: %s\n",
			evr_strerror(rc));
	return rc;
}

struct worker_arg {
	struct server *w;
	const char *addr;
};

static void *worker_main(void *arg)
{
	struct worker_arg *a = arg;
	struct server *w = a->w;
	int rc;

	w->loop = ev_loop_new(EVFLAG_AUTO);
	rc = w->loop ? make_ctx(w, a->addr) : -ENOMEM;
	pthread_mutex_lock(&start_mu);
	w->ready = rc < 0 ? rc : 1;
	pthread_cond_broadcast(&start_cv);
	pthread_mutex_unlock(&start_mu);
	if (rc < 0)
		return NULL;
	ev_run(w->loop, 0); /* until the listener's thread calls stop_loop */
	drop_held(w);
	evr_ctx_destroy(w->ctx);
	ev_loop_destroy(w->loop);
	return NULL;
}

/* Start nw workers; 0 when every one has its ctx. */
static int start_workers(struct server *srv, const char *addr, int nw)
{
	static struct worker_arg args[MAX_THREADS];
	int i, rc = 0;

	srv->w = calloc((size_t)nw, sizeof(*srv->w));
	if (!srv->w)
		return -ENOMEM;
	for (i = 0; i < nw; i++) {
		srv->w[i].verbose = srv->verbose;
		srv->w[i].worker = true;
		args[i].w = &srv->w[i];
		args[i].addr = addr;
		if (pthread_create(&srv->w[i].t, NULL, worker_main, &args[i]))
			break;
		srv->nw++;
	}
	pthread_mutex_lock(&start_mu);
	for (i = 0; i < srv->nw; i++) {
		while (!srv->w[i].ready)
			pthread_cond_wait(&start_cv, &start_mu);
		if (srv->w[i].ready < 0)
			rc = srv->w[i].ready;
		srv->wctx[i] = srv->w[i].ctx;
	}
	pthread_mutex_unlock(&start_mu);
	return srv->nw < nw ? -EAGAIN : rc;
}

static void stop_workers(struct server *srv)
{
	int i;

	for (i = 0; i < srv->nw; i++) {
		if (srv->w[i].ready > 0)
			evr_ctx_call(srv->w[i].ctx, stop_loop, srv->w[i].loop);
		pthread_join(srv->w[i].t, NULL);
		/* joined: its counters are ours to read */
		srv->conns += srv->w[i].conns;
		srv->errors += srv->w[i].errors;
	}
	free(srv->w);
}

int run_server(const char *addr, int port, int verbose, int threads)
{
	struct server srv = {0};
	int rc;

	srv.loop = EV_DEFAULT;
	srv.verbose = verbose;
	if (make_ctx(&srv, addr) < 0)
		return 1;
	rc = threads ? start_workers(&srv, addr, threads) : 0;
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: starting %d threads: %s\n",
			threads, evr_strerror(rc));
		stop_workers(&srv);
		evr_ctx_destroy(srv.ctx);
		return 1;
	}
	rc = evr_listen(srv.ctx, addr, (uint16_t)port, 0, srv_on_accept,
			&srv, &srv.listener);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: listen on %s:%d: %s\n",
			addr ? addr : "*", port, evr_strerror(rc));
		stop_workers(&srv);
		evr_ctx_destroy(srv.ctx);
		return 1;
	}
	if (threads)
		printf("evrdma-perf: server listening on %s:%d, %d threads\n",
		       addr ? addr : "*", port, threads);
	else
		printf("evrdma-perf: server listening on %s:%d\n",
		       addr ? addr : "*", port);
	fflush(stdout);
	ev_signal_init(&srv.sigint, srv_on_signal, SIGINT);
	ev_signal_init(&srv.sigterm, srv_on_signal, SIGTERM);
	ev_signal_start(srv.loop, &srv.sigint);
	ev_signal_start(srv.loop, &srv.sigterm);
	ev_run(srv.loop, 0);

	evr_listener_close(srv.listener);
	drop_held(&srv);
	if (srv.nw)
		stop_workers(&srv);
	printf("evrdma-perf: server done: %llu connections, %llu errors\n",
	       (unsigned long long)srv.conns,
	       (unsigned long long)srv.errors);
	evr_ctx_destroy(srv.ctx);
	return srv.errors ? 1 : 0;
}
