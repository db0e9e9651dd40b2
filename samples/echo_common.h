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
	uint64_t conns_open, conns_closed, msgs, bytes, errors;
};

/* Listen on addr:port and echo.  Returns 0 or a negative errno. */
int echo_server_start(struct echo_server *srv, evr_ctx *ctx, const char *addr,
		      uint16_t port);
void echo_server_stop(struct echo_server *srv);

/* "event" | "poll" | "adaptive" -> mode; -1 if unknown. */
int echo_parse_mode(const char *s);

#endif
