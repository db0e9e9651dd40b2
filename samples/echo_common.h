/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The evrdma side of the echo servers, shared by echo_server (libev) and
 * epoll_echo_server (plain epoll): accept every connection and send every
 * message back.  The echo is zero-copy: the received buffer is held past
 * its callback (evr_conn_hold) and released when its echo has been sent.
 */
#ifndef ECHO_COMMON_H
#define ECHO_COMMON_H

#include <stdint.h>

#include <evrdma.h>

struct echo_server {
	evr_ctx *ctx;
	evr_listener *listener;
	int max_conns;	  /* stop after this many conns closed (0: never) */
	int verbose;
	void (*on_done)(struct echo_server *srv); /* max_conns reached */
	void (*on_closed)(struct echo_server *srv); /* each close, if set */
	uint64_t conns_open, conns_closed, msgs, bytes, errors;
};

/* Listen on addr:port and echo.  Returns 0 or a negative errno. */
int echo_server_start(struct echo_server *srv, evr_ctx *ctx, const char *addr,
		      uint16_t port);
void echo_server_stop(struct echo_server *srv);

/* The echo's callbacks for a connection served by srv, in *o (for
 * evr_accept or evr_accept_on); -ENOMEM.  After a failed accept call,
 * echo_conn_opts_free(o). */
int echo_conn_opts(struct echo_server *srv, struct evr_conn_opts *o);
void echo_conn_opts_free(struct evr_conn_opts *o);

/* "event" | "poll" | "adaptive" -> mode; -1 if unknown. */
int echo_parse_mode(const char *s);

#endif
