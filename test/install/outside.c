/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A program from outside the source tree: built against an installed
 * evrdma with `pkg-config --cflags --libs evrdma` and nothing else (no
 * path into the tree, no libev of its own: the ctx runs its private loop),
 * as test/install/run does.
 *
 *   outside ADDR
 *
 * Listens on ADDR, connects to itself, sends an eager message and one
 * large enough for rendezvous, and checks that each comes back echoed,
 * byte for byte; then closes.  Exit 0 when all of it went as it should.
 */
#include <evrdma.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG (256 * 1024)

struct state {
	evr_ctx *ctx;
	evr_conn *cli;
	unsigned char small[100], *big;
	int echoed, closed, failed;
};

static void fail(struct state *s, const char *what, int err)
{
	fprintf(stderr, "outside: %s: %s\n", what, evr_strerror(err));
	s->failed = 1;
	evr_ctx_stop(s->ctx);
}

static void echo_sent(evr_conn *c, int status, void *arg)
{
	(void)c;
	(void)status; /* a failed echo shows as a missing one */
	free(arg);
}

/* The server's side: echo a copy (the received bytes are only valid
 * during the callback). */
static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	void *copy = malloc(len ? len : 1);
	int rc;

	(void)arg;
	if (!copy) {
		evr_conn_close(c, EVR_CLOSE_ABORT);
		return;
	}
	memcpy(copy, data, len);
	rc = evr_send(c, copy, len, echo_sent, copy);
	if (rc < 0) {
		fprintf(stderr, "outside: echo: %s\n", evr_strerror(rc));
		free(copy);
		evr_conn_close(c, EVR_CLOSE_ABORT);
	}
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct evr_conn_opts o;

	(void)l;
	(void)arg;
	if (ulen != 7 || memcmp(ud, "outside", 7) != 0) {
		evr_reject(req, "who are you", 11);
		return;
	}
	evr_conn_opts_init(&o);
	o.on_recv = srv_recv;
	if (evr_accept(req, &o, NULL) < 0)
		exit(1);
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct state *s = arg;
	const unsigned char *want = len == sizeof(s->small) ? s->small : s->big;

	if ((len != sizeof(s->small) && len != BIG) ||
	    memcmp(data, want, len) != 0) {
		fail(s, "echo differs", -EPROTO);
		return;
	}
	if (++s->echoed == 2)
		evr_conn_close(c, 0);
}

static void cli_up(evr_conn *c, int status, void *arg)
{
	struct state *s = arg;
	int rc;

	if (status < 0) {
		fail(s, "connect", status);
		return;
	}
	s->cli = c;
	rc = evr_send(c, s->small, sizeof(s->small), NULL, NULL);
	if (rc == 0)
		rc = evr_send(c, s->big, BIG, NULL, NULL);
	if (rc < 0)
		fail(s, "send", rc);
}

static void cli_closed(evr_conn *c, int status, void *arg)
{
	struct state *s = arg;

	(void)c;
	if (status < 0)
		fail(s, "close", status);
	s->closed = 1;
	evr_ctx_stop(s->ctx);
}

int main(int argc, char **argv)
{
	struct state s;
	struct evr_ctx_opts co;
	struct evr_conn_opts o;
	evr_listener *l;
	size_t i;
	int rc;

	if (argc != 2) {
		fprintf(stderr, "usage: outside ADDR\n");
		return 2;
	}
	memset(&s, 0, sizeof(s));
	s.big = malloc(BIG);
	if (!s.big)
		return 1;
	for (i = 0; i < sizeof(s.small); i++)
		s.small[i] = (unsigned char)(i * 7 + 1);
	for (i = 0; i < BIG; i++)
		s.big[i] = (unsigned char)(i * 13 + 5);
	evr_ctx_opts_init(&co);
	rc = evr_ctx_create(&s.ctx, NULL, &co);
	if (rc < 0) {
		fprintf(stderr, "outside: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	rc = evr_listen(s.ctx, argv[1], 0, 0, on_accept, &s, &l);
	if (rc < 0) {
		fprintf(stderr, "outside: listen on %s: %s\n", argv[1],
			evr_strerror(rc));
		return 1;
	}
	evr_conn_opts_init(&o);
	o.on_connect = cli_up;
	o.on_recv = cli_recv;
	o.on_close = cli_closed;
	o.arg = &s;
	o.user_data = "outside";
	o.user_len = 7;
	rc = evr_connect(s.ctx, argv[1], evr_listener_port(l), &o, NULL);
	if (rc < 0) {
		fprintf(stderr, "outside: connect: %s\n", evr_strerror(rc));
		return 1;
	}
	rc = evr_ctx_run(s.ctx);
	if (rc < 0)
		fprintf(stderr, "outside: evr_ctx_run: %s\n", evr_strerror(rc));
	evr_listener_close(l);
	evr_ctx_destroy(s.ctx);
	free(s.big);
	if (rc < 0 || s.failed || !s.closed || s.echoed != 2)
		return 1;
	printf("outside: 2 messages echoed intact (%zu and %d bytes) through "
	       "the installed library on %s\n",
	       sizeof(s.small), BIG, argv[1]);
	return 0;
}
