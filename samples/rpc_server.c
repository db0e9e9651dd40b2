/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * rpc_server: a key-value service over evrdma calls, on a libev loop.
 *
 *   rpc_server [-a ADDR] [-p PORT]
 *
 * Every request is a call (evr_call on the client side); its first byte
 * says what to do, and every answer starts with a status byte:
 *
 *   'P' klen key value    put: store value (up to 1 MiB) under key
 *                         (1 to 255 bytes)       -> status
 *   'G' klen key          get                     -> status [value]
 *   'E' data              echo                    -> status data
 *   'S' delay data        slow echo: answer after delay ms (4 bytes,
 *                         little endian, at most 60000) -> status data
 *   'N' ...               never answer: the request is dropped, and the
 *                         caller's deadline or cancel ends its call
 *
 * Status: 0 ok, 1 no such key, 2 bad request, 3 no room.  Anything that
 * does not parse is answered "bad request"; nothing a client sends makes
 * the server fail.  rpc_client.c speaks the same protocol: the two files
 * must agree on the constants below.
 *
 * A reply is built in a buffer of its own, freed when its send is done:
 * a large value goes back by rendezvous (the client reads the buffer), and
 * a put that replaces the value meanwhile must not change what it reads.
 * A slow request is held with a timer; if its connection ends first,
 * evr_reply returns -ENOTCONN (and -ECANCELED when the client gave the
 * call up): the handle is spent either way, and nothing is sent.
 *
 * Calls are agreed to per connection, by the accept options: a conn
 * accepted with on_request set serves calls.  Runs until SIGINT/SIGTERM,
 * with a line per connection that comes up or closes.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <evrdma.h>

/* The protocol (as in rpc_client.c) */
enum { OP_PUT = 'P', OP_GET = 'G', OP_ECHO = 'E', OP_SLOW = 'S',
       OP_NEVER = 'N' };
enum { ST_OK = 0, ST_NOTFOUND = 1, ST_BADREQ = 2, ST_NOROOM = 3 };
#define MAX_VALUE (1u << 20)
#define MAX_DELAY_MS 60000u

/* What the store may hold in all (keys and values): past it, puts of new
 * bytes are answered "no room". */
#define STORE_MAX_BYTES (256u << 20)
#define STORE_BUCKETS 4096u

#define container_of(p, type, member) \
	((type *)((char *)(p) - offsetof(type, member)))

struct entry {
	struct entry *next;
	uint8_t *val;
	size_t vlen;
	uint8_t klen;
	uint8_t key[];
};

struct store {
	struct entry *bucket[STORE_BUCKETS];
	size_t bytes, keys;
};

/* A slow request waiting for its timer; on the server's list until then,
 * so that one still waiting at exit is dropped. */
struct held {
	ev_timer timer;
	struct server *srv;
	evr_request *req;
	uint8_t *reply;
	size_t len;
	struct held *prev, *next;
};

struct server {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *listener;
	ev_signal sigint, sigterm;
	struct store store;
	struct held *held;
	uint64_t conns, requests, bad, dropped, unanswered, errors;
};

/* Per connection; freed in on_close. */
struct rconn {
	struct server *srv;
	uint64_t requests;
	char peer[INET6_ADDRSTRLEN];
};

/* ---- the store ---- */

static uint32_t hash(const uint8_t *k, size_t n)
{
	uint32_t h = 2166136261u; /* FNV-1a */
	size_t i;

	for (i = 0; i < n; i++)
		h = (h ^ k[i]) * 16777619u;
	return h;
}

static struct entry **store_find(struct store *s, const uint8_t *k,
				 uint8_t klen)
{
	struct entry **e = &s->bucket[hash(k, klen) % STORE_BUCKETS];

	for (; *e; e = &(*e)->next)
		if ((*e)->klen == klen && !memcmp((*e)->key, k, klen))
			break;
	return e;
}

/* Store a copy of val under k: a status. */
static int store_put(struct store *s, const uint8_t *k, uint8_t klen,
		     const uint8_t *val, size_t vlen)
{
	struct entry **pe = store_find(s, k, klen), *e = *pe;
	size_t old = e ? e->vlen : 0, need = e ? 0 : sizeof(*e) + klen;
	uint8_t *v;

	if (s->bytes - old + vlen + need > STORE_MAX_BYTES)
		return ST_NOROOM;
	v = malloc(vlen ? vlen : 1);
	if (!v)
		return ST_NOROOM;
	memcpy(v, val, vlen);
	if (!e) {
		e = malloc(sizeof(*e) + klen);
		if (!e) {
			free(v);
			return ST_NOROOM;
		}
		e->klen = klen;
		memcpy(e->key, k, klen);
		e->val = NULL;
		e->vlen = 0;
		e->next = NULL;
		*pe = e;
		s->keys++;
	}
	free(e->val);
	e->val = v;
	e->vlen = vlen;
	s->bytes = s->bytes - old + vlen + need;
	return ST_OK;
}

static void store_free(struct store *s)
{
	unsigned i;

	for (i = 0; i < STORE_BUCKETS; i++) {
		while (s->bucket[i]) {
			struct entry *e = s->bucket[i];

			s->bucket[i] = e->next;
			free(e->val);
			free(e);
		}
	}
}

/* ---- answering ---- */

static void on_reply_sent(evr_conn *conn, int status, void *arg)
{
	(void)conn;
	(void)status; /* a failed send also ends the connection */
	free(arg);
}

/* Send buf (malloc'd, owned from here on) as req's answer. */
static void answer_buf(struct server *srv, evr_request *req, uint8_t *buf,
		       size_t len)
{
	int rc = evr_reply(req, buf, len, on_reply_sent, buf);

	if (rc == 0)
		return;
	free(buf); /* the handle is spent either way */
	if (rc == -ENOTCONN || rc == -ECANCELED) {
		/* the conn ended, or the client gave up */
		srv->unanswered++;
		return;
	}
	/* -ENOMEM, -EMSGSIZE: the client's deadline ends its call */
	fprintf(stderr, "rpc_server: evr_reply of %zu bytes: %s\n", len,
		evr_strerror(rc));
	srv->errors++;
}

/* Answer status followed by n bytes of data. */
static void answer(struct server *srv, evr_request *req, uint8_t status,
		   const void *data, size_t n)
{
	/* for when there is no memory for a reply: never changed */
	static const uint8_t noroom = ST_NOROOM;
	uint8_t *buf = malloc(1 + n);
	int rc;

	if (!buf) {
		rc = evr_reply(req, &noroom, 1, NULL, NULL);
		if (rc == -ENOTCONN || rc == -ECANCELED)
			srv->unanswered++;
		else if (rc < 0)
			evr_request_drop(req);
		return;
	}
	buf[0] = status;
	if (n)
		memcpy(buf + 1, data, n);
	answer_buf(srv, req, buf, 1 + n);
}

static void bad_request(struct server *srv, evr_request *req)
{
	srv->bad++;
	answer(srv, req, ST_BADREQ, NULL, 0);
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

static void on_held_due(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct held *h = container_of(w, struct held, timer);

	(void)loop;
	(void)revents;
	held_unlink(h);
	answer_buf(h->srv, h->req, h->reply, h->len);
	free(h);
}

/* 'S' delay data: the answer is built now, sent when the timer fires. */
static void do_slow(struct server *srv, evr_request *req, const uint8_t *p,
		    size_t len)
{
	uint32_t delay;
	struct held *h;

	if (len < 5) {
		bad_request(srv, req);
		return;
	}
	delay = (uint32_t)p[1] | (uint32_t)p[2] << 8 | (uint32_t)p[3] << 16 |
		(uint32_t)p[4] << 24;
	if (delay > MAX_DELAY_MS) {
		bad_request(srv, req);
		return;
	}
	h = calloc(1, sizeof(*h));
	if (h)
		h->reply = malloc(len - 4);
	if (!h || !h->reply) {
		free(h);
		answer(srv, req, ST_NOROOM, NULL, 0);
		return;
	}
	h->srv = srv;
	h->req = req;
	h->len = len - 4;
	h->reply[0] = ST_OK;
	memcpy(h->reply + 1, p + 5, len - 5);
	h->next = srv->held;
	if (h->next)
		h->next->prev = h;
	srv->held = h;
	ev_timer_init(&h->timer, on_held_due, delay / 1000.0, 0.);
	ev_timer_start(srv->loop, &h->timer);
}

static void on_request(evr_conn *conn, evr_request *req, const void *data,
		       size_t len, void *arg)
{
	struct rconn *rc = arg;
	struct server *srv = rc->srv;
	const uint8_t *p = data;
	struct entry *e;

	(void)conn;
	rc->requests++;
	srv->requests++;
	if (len == 0) {
		bad_request(srv, req);
		return;
	}
	switch (p[0]) {
	case OP_PUT: /* klen >= 1, the key whole; the rest is the value */
		if (len < 2 || !p[1] || len < 2u + p[1] ||
		    len - 2 - p[1] > MAX_VALUE)
			break;
		answer(srv, req,
		       (uint8_t)store_put(&srv->store, p + 2, p[1],
					  p + 2 + p[1], len - 2 - p[1]),
		       NULL, 0);
		return;
	case OP_GET: /* klen >= 1 and the key, nothing after it */
		if (len < 2 || !p[1] || len != 2u + p[1])
			break;
		e = *store_find(&srv->store, p + 2, p[1]);
		if (e)
			answer(srv, req, ST_OK, e->val, e->vlen);
		else
			answer(srv, req, ST_NOTFOUND, NULL, 0);
		return;
	case OP_ECHO:
		answer(srv, req, ST_OK, p + 1, len - 1);
		return;
	case OP_SLOW:
		do_slow(srv, req, p, len);
		return;
	case OP_NEVER:
		srv->dropped++;
		evr_request_drop(req);
		return;
	default:
		break;
	}
	bad_request(srv, req);
}

/* ---- connections ---- */

static void on_connect(evr_conn *conn, int status, void *arg)
{
	struct rconn *rc = arg;
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	const void *a = NULL;

	if (status < 0) {
		fprintf(stderr, "rpc_server: accept failed: %s\n",
			evr_strerror(status));
		rc->srv->errors++;
		free(rc);
		return;
	}
	rc->srv->conns++;
	if (evr_conn_peer_addr(conn, (struct sockaddr *)&ss, &sl) == 0)
		a = ss.ss_family == AF_INET6
			    ? (const void *)&((struct sockaddr_in6 *)&ss)
				      ->sin6_addr
			    : (const void *)&((struct sockaddr_in *)&ss)
				      ->sin_addr;
	if (!a || !inet_ntop(ss.ss_family, a, rc->peer, sizeof(rc->peer)))
		snprintf(rc->peer, sizeof(rc->peer), "?");
	printf("rpc_server: connection from %s up\n", rc->peer);
	fflush(stdout);
}

static void on_close(evr_conn *conn, int status, void *arg)
{
	struct rconn *rc = arg;

	(void)conn;
	printf("rpc_server: connection from %s closed (%s): %llu requests\n",
	       rc->peer, evr_err_name(status),
	       (unsigned long long)rc->requests);
	fflush(stdout);
	free(rc);
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct server *srv = arg;
	struct evr_conn_opts o;
	struct rconn *rc;

	(void)l;
	(void)ud;
	(void)ulen;
	rc = calloc(1, sizeof(*rc));
	if (!rc) {
		evr_reject(req, "out of memory", 13);
		return;
	}
	rc->srv = srv;
	evr_conn_opts_init(&o);
	o.on_connect = on_connect;
	o.on_close = on_close;
	o.on_request = on_request; /* this is what agrees to calls */
	o.arg = rc;
	if (evr_accept(req, &o, NULL) < 0)
		free(rc); /* the request is rejected for us */
}

/* ---- main ---- */

static void usage(void)
{
	fprintf(stderr,
		"usage: rpc_server [-a ADDR] [-p PORT]\n"
		"  -a ADDR   local address to listen on (default: any)\n"
		"  -p PORT   port (default 7471)\n");
	exit(2);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

/* Exit: the slow requests still waiting are dropped (their handles must
 * be spent before the ctx goes). */
static void drop_held(struct server *srv)
{
	while (srv->held) {
		struct held *h = srv->held;

		ev_timer_stop(srv->loop, &h->timer);
		held_unlink(h);
		evr_request_drop(h->req);
		srv->unanswered++;
		free(h->reply);
		free(h);
	}
}

int main(int argc, char **argv)
{
	struct server srv = {0};
	struct evr_ctx_opts o;
	const char *addr = NULL;
	int port = 7471, opt, rc;

	while ((opt = getopt(argc, argv, "a:p:h")) != -1) {
		switch (opt) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			if (port <= 0 || port > 65535)
				usage();
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	srv.loop = EV_DEFAULT;
	evr_ctx_opts_init(&o);
	o.local_addr = addr;
	rc = evr_ctx_create(&srv.ctx, srv.loop, &o);
	if (rc < 0) {
		fprintf(stderr, "rpc_server: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	rc = evr_listen(srv.ctx, addr, (uint16_t)port, 0, on_accept, &srv,
			&srv.listener);
	if (rc < 0) {
		fprintf(stderr, "rpc_server: listen on %s:%d: %s\n",
			addr ? addr : "*", port, evr_strerror(rc));
		evr_ctx_destroy(srv.ctx);
		return 1;
	}
	printf("rpc_server: listening on %s:%d (device %s)\n",
	       addr ? addr : "*", port, evr_ctx_device(srv.ctx));
	fflush(stdout); /* scripts wait for this line */
	ev_signal_init(&srv.sigint, on_signal, SIGINT);
	ev_signal_init(&srv.sigterm, on_signal, SIGTERM);
	ev_signal_start(srv.loop, &srv.sigint);
	ev_signal_start(srv.loop, &srv.sigterm);
	ev_run(srv.loop, 0);

	drop_held(&srv);
	evr_listener_close(srv.listener);
	evr_ctx_destroy(srv.ctx);
	printf("rpc_server: %llu connections, %llu requests (%llu bad, %llu "
	       "never answered, %llu answers not sent), %zu keys, %zu bytes "
	       "stored, %llu errors\n",
	       (unsigned long long)srv.conns,
	       (unsigned long long)srv.requests, (unsigned long long)srv.bad,
	       (unsigned long long)srv.dropped,
	       (unsigned long long)srv.unanswered, srv.store.keys,
	       srv.store.bytes, (unsigned long long)srv.errors);
	store_free(&srv.store);
	return srv.errors ? 1 : 0;
}
