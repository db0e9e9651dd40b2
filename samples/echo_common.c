/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The evrdma echo service used by both echo servers; see echo_common.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "echo_common.h"

/* Per-connection state; freed in on_close. */
struct echo_conn {
	struct echo_server *srv;
	uint64_t msgs, bytes;
};

static void on_echo_sent(evr_conn *conn, int status, void *arg)
{
	evr_msg *msg = arg;

	(void)conn;
	(void)status; /* an error also ends up in on_close */
	evr_msg_release(msg);
}

static void on_recv(evr_conn *conn, const void *data, size_t len, void *arg)
{
	struct echo_conn *ec = arg;
	evr_msg *msg = NULL;
	int rc;

	ec->msgs++;
	ec->bytes += len;
	ec->srv->msgs++;
	ec->srv->bytes += len;
	if (len <= EVR_SEND_COPY_MAX) {
		/* copied by evr_send: the received bytes go back as they are */
		rc = evr_send(conn, data, len, NULL, NULL);
	} else {
		/* sent from the received buffer itself, held until the send
		 * is done */
		msg = evr_conn_hold(conn);
		if (!msg) {
			fprintf(stderr, "echo_server: cannot hold a message\n");
			evr_conn_close(conn, EVR_CLOSE_ABORT);
			return;
		}
		rc = evr_send(conn, data, len, on_echo_sent, msg);
	}
	if (rc < 0) {
		/* -ENOBUFS: the client does not read its echoes; give up */
		fprintf(stderr, "echo_server: send: %s\n", evr_strerror(rc));
		evr_msg_release(msg);
		ec->srv->errors++;
		evr_conn_close(conn, EVR_CLOSE_ABORT);
	}
}

static void on_connect(evr_conn *conn, int status, void *arg)
{
	struct echo_conn *ec = arg;

	(void)conn;
	if (status < 0) {
		fprintf(stderr, "echo_server: accept failed: %s\n",
			evr_strerror(status));
		ec->srv->errors++;
		free(ec);
		return;
	}
	ec->srv->conns_open++;
	if (ec->srv->verbose)
		printf("echo_server: connection up\n");
}

static void on_close(evr_conn *conn, int status, void *arg)
{
	struct echo_conn *ec = arg;
	struct echo_server *srv = ec->srv;

	(void)conn;
	srv->conns_closed++;
	if (srv->verbose)
		printf("echo_server: connection closed (%s): %llu messages, "
		       "%llu bytes\n",
		       evr_err_name(status), (unsigned long long)ec->msgs,
		       (unsigned long long)ec->bytes);
	free(ec);
	if (srv->on_closed)
		srv->on_closed(srv);
	if (srv->max_conns && srv->conns_closed >= (uint64_t)srv->max_conns &&
	    srv->on_done)
		srv->on_done(srv);
}

int echo_conn_opts(struct echo_server *srv, struct evr_conn_opts *o)
{
	struct echo_conn *ec = calloc(1, sizeof(*ec));

	if (!ec)
		return -ENOMEM;
	ec->srv = srv;
	evr_conn_opts_init(o);
	o->on_connect = on_connect;
	o->on_recv = on_recv;
	o->on_close = on_close;
	o->arg = ec;
	return 0;
}

void echo_conn_opts_free(struct evr_conn_opts *o)
{
	free(o->arg);
	o->arg = NULL;
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct echo_server *srv = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	if (echo_conn_opts(srv, &o) < 0) {
		evr_reject(req, "out of memory", 13);
		return;
	}
	if (evr_accept(req, &o, NULL) < 0)
		echo_conn_opts_free(&o); /* the request is rejected for us */
}

int echo_server_start(struct echo_server *srv, evr_ctx *ctx, const char *addr,
		      uint16_t port)
{
	srv->ctx = ctx;
	return evr_listen(ctx, addr, port, 0, on_accept, srv,
			  &srv->listener);
}

void echo_server_stop(struct echo_server *srv)
{
	if (srv->listener)
		evr_listener_close(srv->listener);
	srv->listener = NULL;
}

int echo_parse_mode(const char *s)
{
	if (!strcmp(s, "event"))
		return EVR_MODE_EVENT;
	if (!strcmp(s, "poll"))
		return EVR_MODE_POLL;
	if (!strcmp(s, "adaptive"))
		return EVR_MODE_ADAPTIVE;
	return -1;
}
