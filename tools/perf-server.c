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
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

struct server {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *listener;
	ev_signal sigint, sigterm;
	unsigned nopen; /* accepted and not yet closed */
	int verbose;
	uint64_t conns, errors;
};

struct sconn {
	struct server *srv;
	enum kind kind;
	uint64_t msgs, bytes;
	size_t eager; /* the peer's eager size */
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
	/* An eager echo is copied by evr_send anyway; a large one is sent back
	 * from the received buffer itself, held until the send is done. */
	if (len <= sc->eager) {
		rc = evr_send(conn, data, len, NULL, NULL);
		goto out;
	}
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

static void srv_on_connect(evr_conn *conn, int status, void *arg)
{
	struct sconn *sc = arg;
	struct server *srv = sc->srv;

	if (status < 0) {
		fprintf(stderr, "evrdma-perf: accept failed: %s\n",
			evr_strerror(status));
		srv->errors++;
		free(sc);
		srv_conn_gone(srv);
		return;
	}
	srv->conns++;
	{
		struct evr_conn_info ci;

		sc->eager = evr_conn_info(conn, &ci) == 0 ? ci.peer_eager_size
							  : 0;
	}
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
	/* The mode is per ctx: the latest request sets it for all. */
	rc = evr_ctx_set_mode(srv->ctx, (enum evr_mode)u[5]);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_set_mode: %s\n",
			evr_strerror(rc));
		srv->errors++;
	}
	evr_conn_opts_init(&co);
	co.on_connect = srv_on_connect;
	co.on_recv = srv_on_recv;
	co.on_close = srv_on_close;
	co.arg = sc;
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

int run_server(const char *addr, int port, int verbose)
{
	struct server srv = {0};
	struct evr_ctx_opts o;
	int rc;

	srv.loop = EV_DEFAULT;
	srv.verbose = verbose;
	evr_ctx_opts_init(&o);
	o.local_addr = addr;
	o.mode = EVR_MODE_EVENT;
	perf_tune_apply(&o);
	rc = evr_ctx_create(&srv.ctx, srv.loop, &o);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	rc = evr_listen(srv.ctx, addr, (uint16_t)port, 0, srv_on_accept,
			&srv, &srv.listener);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: listen on %s:%d: %s\n",
			addr ? addr : "*", port, evr_strerror(rc));
		evr_ctx_destroy(srv.ctx);
		return 1;
	}
	printf("evrdma-perf: server listening on %s:%d\n", addr ? addr : "*",
	       port);
	fflush(stdout);
	ev_signal_init(&srv.sigint, srv_on_signal, SIGINT);
	ev_signal_init(&srv.sigterm, srv_on_signal, SIGTERM);
	ev_signal_start(srv.loop, &srv.sigint);
	ev_signal_start(srv.loop, &srv.sigterm);
	ev_run(srv.loop, 0);

	printf("evrdma-perf: server done: %llu connections, %llu errors\n",
	       (unsigned long long)srv.conns,
	       (unsigned long long)srv.errors);
	evr_listener_close(srv.listener);
	evr_ctx_destroy(srv.ctx);
	return srv.errors ? 1 : 0;
}
