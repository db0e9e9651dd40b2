/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A connected client/server pair on one ctx (one loop), for RDMA tests.
 * The test supplies the callbacks through the two evr_conn_opts; the
 * helper counts connects and closes and records their statuses.
 */
#ifndef EVR_RT_PAIR_H
#define EVR_RT_PAIR_H

#include "rt.h"

struct rt_side {
	struct rt_pair *pair;
	evr_conn *conn;
	int connects, connect_status;
	int closes, close_status;
	void *user; /* the test's own state */
};

struct rt_pair {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	struct rt_side cli, srv;
	struct evr_conn_opts cli_opts, srv_opts;
	int accepts;
	const char *reject; /* reject requests with this reason */
	uint8_t seen_user[EVR_MAX_USER_DATA];
	size_t seen_user_len;
	evr_ctx *cctx; /* the client's own ctx (rt_pair_init2), or NULL */
};

static void rt_side_connect(evr_conn *c, int status, void *arg)
{
	struct rt_side *s = arg;

	s->connects++;
	s->connect_status = status;
	if (status == 0)
		s->conn = c;
	else
		s->conn = NULL;
}

static void rt_side_close(evr_conn *c, int status, void *arg)
{
	struct rt_side *s = arg;

	(void)c;
	s->closes++;
	s->close_status = status;
	s->conn = NULL;
}

static void rt_pair_accept(evr_listener *l, evr_conn_req *req,
			   const void *ud, size_t ulen, void *arg)
{
	struct rt_pair *p = arg;
	int rc;

	(void)l;
	p->accepts++;
	memcpy(p->seen_user, ud, ulen);
	p->seen_user_len = ulen;
	if (p->reject) {
		rc = evr_reject(req, p->reject, strlen(p->reject));
		assert_int_equal(rc, 0);
		return;
	}
	rc = evr_accept(req, &p->srv_opts, NULL);
	assert_int_equal(rc, 0);
}

/* Prepare options with the counting callbacks; the test may then set
 * on_recv/on_imm/on_drain and override the rest before rt_pair_connect. */
static inline void rt_pair_init(struct rt_pair *p, struct ev_loop *loop,
				const struct evr_ctx_opts *copts)
{
	struct evr_ctx_opts o;
	int rc;

	memset(p, 0, sizeof(*p));
	p->loop = loop;
	p->cli.pair = p->srv.pair = p;
	if (!copts) {
		rt_ctx_opts(&o);
		copts = &o;
	}
	rc = evr_ctx_create(&p->ctx, loop, copts);
	assert_int_equal(rc, 0);
	evr_conn_opts_init(&p->cli_opts);
	evr_conn_opts_init(&p->srv_opts);
	p->cli_opts.on_connect = p->srv_opts.on_connect = rt_side_connect;
	p->cli_opts.on_close = p->srv_opts.on_close = rt_side_close;
	p->cli_opts.arg = &p->cli;
	p->srv_opts.arg = &p->srv;
	rc = evr_listen(p->ctx, rt_addr(), 0, 16, rt_pair_accept, p, &p->l);
	assert_int_equal(rc, 0);
	assert_true(evr_listener_port(p->l) > 0);
}

static int rt_pair_up_pred(void *arg)
{
	struct rt_pair *p = arg;

	return (p->cli.connects && p->srv.connects) ||
	       (p->cli.connects && p->cli.connect_status);
}

/* The ctx the client connects from. */
static inline evr_ctx *rt_pair_cli_ctx(const struct rt_pair *p)
{
	return p->cctx ? p->cctx : p->ctx;
}

/* Connect the client to host:port (a listener of the pair: the server's
 * address in another family, say); asserts both ends came up. */
static inline void rt_pair_connect_to(struct rt_pair *p, const char *host,
				      uint16_t port)
{
	int rc = evr_connect(rt_pair_cli_ctx(p), host, port, &p->cli_opts,
			     NULL);

	assert_int_equal(rc, 0);
	assert_int_equal(rt_run_until(p->loop, rt_pair_up_pred, p, 20), 0);
	assert_int_equal(p->cli.connect_status, 0);
	assert_int_equal(p->srv.connect_status, 0);
	assert_non_null(p->cli.conn);
	assert_non_null(p->srv.conn);
}

/* Connect the client to the server; asserts both ends came up. */
static inline void rt_pair_connect(struct rt_pair *p)
{
	rt_pair_connect_to(p, rt_addr(), evr_listener_port(p->l));
}

static int rt_pair_closed_pred(void *arg)
{
	struct rt_pair *p = arg;

	return p->cli.closes && p->srv.closes;
}

/* Close the client gracefully and wait for both on_close callbacks. */
static inline void rt_pair_close(struct rt_pair *p)
{
	if (p->cli.conn)
		assert_int_equal(evr_conn_close(p->cli.conn, 0), 0);
	assert_int_equal(rt_run_until(p->loop, rt_pair_closed_pred, p, 20), 0);
	assert_int_equal(p->cli.closes, 1);
	assert_int_equal(p->srv.closes, 1);
}

/* As rt_pair_init, but the client gets a ctx of its own, created with
 * cli_copts (NULL: the defaults of rt_ctx_opts): the two ends can then
 * differ in their limits, and their statistics are apart. */
static inline void rt_pair_init2(struct rt_pair *p, struct ev_loop *loop,
				 const struct evr_ctx_opts *srv_copts,
				 const struct evr_ctx_opts *cli_copts)
{
	struct evr_ctx_opts o;

	rt_pair_init(p, loop, srv_copts);
	if (!cli_copts) {
		rt_ctx_opts(&o);
		cli_copts = &o;
	}
	assert_int_equal(evr_ctx_create(&p->cctx, loop, cli_copts), 0);
}

static inline void rt_pair_fini(struct rt_pair *p)
{
	evr_listener_close(p->l);
	evr_ctx_destroy(p->cctx);
	evr_ctx_destroy(p->ctx);
}

#endif
