/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * rpc_client: drives rpc_server with calls and checks that every call
 * ends as it should, exactly once.
 *
 *   rpc_client -a ADDR [-p PORT] [-n CALLS] [-w WINDOW] [-t SECONDS]
 *
 * The workload, CALLS calls with up to WINDOW in flight: first a quarter
 * of them put values of random sizes up to 64 KiB under as many keys
 * (values above the eager size, 8 KiB by default, go by rendezvous);
 * once every put has been answered, the rest are mixed: gets of those
 * keys, whose values are compared byte for byte; echoes of random sizes;
 * a few gets of missing keys and malformed requests (answered "not found"
 * and "bad request"); slow calls whose delay at the server exceeds their
 * deadline and calls the server never answers (both must end with
 * -ETIMEDOUT); calls cancelled right after evr_call (-ECANCELED); and
 * calls cancelled a little later, which end with -ECANCELED when
 * evr_call_cancel returned 0, or with their reply when it returned
 * -ENOENT (the reply beat the cancel) or when the reply came before the
 * cancel was due.  The plan comes from a fixed seed: a run can be
 * repeated.
 *
 * Each call's expected end is set when it is made; its callback checks
 * the status and the reply, and that it fires once.  The callback may
 * fire from inside evr_call_cancel: a call's outcome is judged once both
 * the callback and the cancel's return are in.  At the end it prints the
 * calls per status, calls per second, the median and 99th percentile
 * latency of the calls that were answered, and the library's call
 * counters, which must agree.  Exit status 0 only if every call ended as
 * expected; 1 otherwise; 2 for bad options.
 *
 * The protocol is rpc_server.c's: the two files must agree on the
 * constants below.
 */
#include <errno.h>
#include <ev.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <evrdma.h>

/* The protocol (as in rpc_server.c) */
enum { OP_PUT = 'P', OP_GET = 'G', OP_ECHO = 'E', OP_SLOW = 'S',
       OP_NEVER = 'N' };
enum { ST_OK = 0, ST_NOTFOUND = 1, ST_BADREQ = 2, ST_NOROOM = 3 };

#define MAX_SIZE (64u << 10) /* largest value or echo */
#define DEADLINE_MS 10000    /* calls that must be answered */
#define SLOW_MARGIN_MS 500   /* slow calls: the answer's delay past the
				deadline */
#define MAX_REPORTED 10	     /* mismatches printed one by one */

#define container_of(p, type, member) \
	((type *)((char *)(p) - offsetof(type, member)))

enum kind {
	C_PUT,
	C_GET,
	C_MISSING,	/* get of a key never put: "not found" */
	C_BAD,		/* a malformed request: "bad request" */
	C_ECHO,
	C_SLOW,		/* answered after its deadline: -ETIMEDOUT */
	C_NEVER,	/* never answered: -ETIMEDOUT */
	C_CANCEL_NOW,	/* cancelled right after evr_call: -ECANCELED */
	C_CANCEL_LATER, /* cancelled after a while: -ECANCELED or answered */
	C__COUNT
};

static const char *const kind_str[] = {
	"put", "get", "missing", "bad", "echo", "slow", "never",
	"cancel-now", "cancel-later",
};

/* Shares of the calls after the puts (in percent: they add up to 100). */
static const unsigned kind_weight[C__COUNT] = {
	[C_GET] = 34, [C_MISSING] = 3, [C_BAD] = 3, [C_ECHO] = 30,
	[C_SLOW] = 6, [C_NEVER] = 6, [C_CANCEL_NOW] = 9, [C_CANCEL_LATER] = 9,
};

/* Where a call's cancel is: judging waits while it is being issued (the
 * callback may fire from inside evr_call_cancel). */
enum cancel { CN_NONE, CN_ISSUING, CN_DONE };

struct call {
	struct client *cl;
	unsigned idx;
	enum kind kind;
	unsigned key;	     /* put, get */
	size_t plen;	     /* echoed payload, or the value of a put */
	unsigned timeout_ms; /* the call's deadline */
	uint32_t delay_ms;   /* slow, cancel-later: the server's delay */
	double cancel_s;     /* cancel-later: after this long */
	uint8_t *req;	     /* from evr_call until the callback */
	size_t len;
	double t0;
	evr_call_id id;
	ev_timer cancel_w;
	enum cancel cancel;
	int cancel_rc, status;
	bool ended, reply_ok;
};

struct client {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_conn *conn;
	const char *addr;
	int port;
	unsigned n, window, nputs;
	struct call *calls;
	size_t *vlen; /* per key: the size of its value */
	unsigned next, inflight, nstarted, nended, njudged;
	bool up, closing, closed, blocked, pumping, stopping;
	uint64_t rng;
	unsigned by_kind[C__COUNT];
	uint64_t ok, timedout, cancelled, other;
	int errors;
	double *lat; /* of the calls answered, s */
	size_t nlat;
	double t_start, t_end;
	ev_timer deadline;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint32_t rnd(struct client *cl)
{
	/* xorshift64*: a fixed seed gives the same plan every run */
	cl->rng ^= cl->rng >> 12;
	cl->rng ^= cl->rng << 25;
	cl->rng ^= cl->rng >> 27;
	return (uint32_t)((cl->rng * 2685821657736338717ull) >> 32);
}

/* Half small, then up to the eager size, then up to MAX_SIZE. */
static size_t rnd_size(struct client *cl)
{
	unsigned r = rnd(cl) % 10;

	if (r < 5)
		return 1 + rnd(cl) % 256;
	if (r < 8)
		return 257 + rnd(cl) % (8192 - 256);
	return 8193 + rnd(cl) % (MAX_SIZE - 8192);
}

static uint8_t pat(uint32_t a, size_t i)
{
	uint32_t x = (a + 1) * 2654435761u ^ (uint32_t)(i * 40503u);

	return (uint8_t)(x ^ (x >> 13));
}

static void fail(struct client *cl, const char *what)
{
	fprintf(stderr, "rpc_client: %s\n", what);
	cl->errors++;
	ev_break(cl->loop, EVBREAK_ALL);
}

static void mismatch(struct call *c, const char *why)
{
	struct client *cl = c->cl;

	if (cl->errors++ < MAX_REPORTED)
		fprintf(stderr, "rpc_client: call %u (%s): %s (status %s, "
				"cancel %s)\n",
			c->idx, kind_str[c->kind], why,
			c->ended ? evr_err_name(c->status) : "-",
			c->cancel == CN_DONE ? evr_err_name(c->cancel_rc)
					     : "-");
}

/* ---- the plan ---- */

static int plan(struct client *cl)
{
	unsigned i, k, r, total = 0;

	cl->rng = 0x9e3779b97f4a7c15ull;
	for (k = 0; k < C__COUNT; k++)
		total += kind_weight[k];
	cl->nputs = (cl->n + 3) / 4;
	cl->calls = calloc(cl->n, sizeof(*cl->calls));
	cl->vlen = calloc(cl->nputs, sizeof(*cl->vlen));
	cl->lat = calloc(cl->n, sizeof(*cl->lat));
	if (!cl->calls || !cl->vlen || !cl->lat)
		return -ENOMEM;
	for (i = 0; i < cl->n; i++) {
		struct call *c = &cl->calls[i];

		c->cl = cl;
		c->idx = i;
		c->timeout_ms = DEADLINE_MS;
		if (i < cl->nputs) {
			c->kind = C_PUT;
			c->key = i;
			c->plen = cl->vlen[i] = rnd_size(cl);
			continue;
		}
		r = rnd(cl) % total;
		for (k = 0; r >= kind_weight[k]; k++)
			r -= kind_weight[k];
		c->kind = (enum kind)k;
		switch (c->kind) {
		case C_GET:
			c->key = rnd(cl) % cl->nputs;
			break;
		case C_SLOW:
			/* answered well after its deadline: a busy loop may
			 * run a deadline some ms late */
			c->timeout_ms = 10 + rnd(cl) % 40;
			c->delay_ms = c->timeout_ms + SLOW_MARGIN_MS;
			c->plen = rnd_size(cl);
			break;
		case C_NEVER:
			c->timeout_ms = 10 + rnd(cl) % 40;
			break;
		case C_CANCEL_LATER: /* either may come first */
			c->delay_ms = rnd(cl) % 3;
			c->cancel_s = (rnd(cl) % 3000) * 1e-6;
			c->plen = rnd_size(cl);
			break;
		case C_ECHO:
		case C_CANCEL_NOW:
			c->plen = rnd_size(cl);
			break;
		default:
			break;
		}
		cl->by_kind[c->kind]++;
	}
	cl->by_kind[C_PUT] = cl->nputs;
	return 0;
}

static int key_text(char *buf, size_t size, const char *prefix, unsigned k)
{
	return snprintf(buf, size, "%s-%u", prefix, k);
}

/* A malformed request, one of five shapes. */
static size_t bad_request(uint8_t *p, unsigned idx)
{
	switch (idx % 5) {
	case 0: /* no such operation */
		memcpy(p, "X123", 4);
		return 4;
	case 1: /* empty */
		return 0;
	case 2: /* a put whose key runs past the end */
		p[0] = OP_PUT;
		p[1] = 200;
		memset(p + 2, 'k', 8);
		return 10;
	case 3: /* a slow call without its delay */
		p[0] = OP_SLOW;
		p[1] = 1;
		return 2;
	default: /* a get of an empty key */
		p[0] = OP_GET;
		p[1] = 0;
		return 2;
	}
}

/* Build c's request in c->req; -ENOMEM. */
static int build(struct call *c)
{
	size_t cap = 2 + 32 + c->plen + 5, i;
	char key[32];
	uint8_t *p = malloc(cap);
	int kl;

	if (!p)
		return -ENOMEM;
	c->req = p;
	switch (c->kind) {
	case C_PUT:
	case C_GET:
	case C_MISSING:
		kl = key_text(key, sizeof(key),
			      c->kind == C_MISSING ? "missing" : "key",
			      c->kind == C_MISSING ? c->idx : c->key);
		p[0] = c->kind == C_PUT ? OP_PUT : OP_GET;
		p[1] = (uint8_t)kl;
		memcpy(p + 2, key, (size_t)kl);
		c->len = 2 + (size_t)kl;
		if (c->kind == C_PUT)
			for (i = 0; i < c->plen; i++)
				p[c->len++] = pat(c->key, i);
		return 0;
	case C_BAD:
		c->len = bad_request(p, c->idx);
		return 0;
	case C_NEVER:
		p[0] = OP_NEVER;
		c->len = 1;
		return 0;
	case C_SLOW:
	case C_CANCEL_LATER:
		p[0] = OP_SLOW;
		p[1] = (uint8_t)c->delay_ms;
		p[2] = (uint8_t)(c->delay_ms >> 8);
		p[3] = (uint8_t)(c->delay_ms >> 16);
		p[4] = (uint8_t)(c->delay_ms >> 24);
		c->len = 5;
		break;
	default: /* echo, cancel-now */
		p[0] = OP_ECHO;
		c->len = 1;
		break;
	}
	for (i = 0; i < c->plen; i++)
		p[c->len++] = pat(0x80000000u | c->idx, i);
	return 0;
}

/* The reply is what c should get back. */
static bool reply_matches(const struct call *c, const uint8_t *r, size_t len)
{
	uint8_t st = ST_OK;
	size_t i, n = 0;
	uint32_t a = 0x80000000u | c->idx;

	switch (c->kind) {
	case C_PUT:
		break;
	case C_GET:
		n = c->cl->vlen[c->key];
		a = c->key;
		break;
	case C_MISSING:
		st = ST_NOTFOUND;
		break;
	case C_BAD:
		st = ST_BADREQ;
		break;
	case C_ECHO:
	case C_CANCEL_NOW:
	case C_CANCEL_LATER:
		n = c->plen;
		break;
	default: /* slow, never: no reply may come */
		return false;
	}
	if (len != 1 + n || r[0] != st)
		return false;
	for (i = 0; i < n; i++)
		if (r[1 + i] != pat(a, i))
			return false;
	return true;
}

/* Both the callback and any cancel's return are in: did c end as it
 * should? */
static void judge(struct call *c)
{
	struct client *cl = c->cl;
	bool answered = c->status == 0 && c->reply_ok, good;

	cl->njudged++;
	if (c->status == 0)
		cl->ok++;
	else if (c->status == -ETIMEDOUT)
		cl->timedout++;
	else if (c->status == -ECANCELED)
		cl->cancelled++;
	else
		cl->other++;
	switch (c->kind) {
	case C_SLOW:
	case C_NEVER:
		good = c->status == -ETIMEDOUT;
		break;
	case C_CANCEL_NOW:
		good = c->cancel_rc == 0 && c->status == -ECANCELED;
		break;
	case C_CANCEL_LATER:
		/* 0: the cancel took; -ENOENT: the reply was in first */
		if (c->cancel == CN_NONE || c->cancel_rc == -ENOENT)
			good = answered;
		else
			good = c->cancel_rc == 0 && c->status == -ECANCELED;
		break;
	default:
		good = answered;
		break;
	}
	if (!good)
		mismatch(c, c->status == 0 && !c->reply_ok
				    ? "wrong reply"
				    : "ended otherwise than expected");
}

/* ---- making calls ---- */

static void pump(struct client *cl);

static void on_call_end(evr_conn *conn, int status, const void *reply,
			size_t len, void *arg)
{
	struct call *c = arg;
	struct client *cl = c->cl;

	(void)conn;
	if (c->ended) {
		mismatch(c, "callback fired twice");
		return;
	}
	c->ended = true;
	c->status = status;
	cl->inflight--;
	cl->nended++;
	free(c->req); /* ours again: no send or read of it is left */
	c->req = NULL;
	if (c->kind == C_CANCEL_LATER)
		ev_timer_stop(cl->loop, &c->cancel_w);
	if (status == 0) {
		c->reply_ok = reply_matches(c, reply, len);
		cl->lat[cl->nlat++] = now_s() - c->t0;
	}
	if (c->cancel != CN_ISSUING)
		judge(c);
	if (!cl->pumping && !cl->stopping)
		pump(cl);
}

static void cancel(struct call *c)
{
	c->cancel = CN_ISSUING;
	c->cancel_rc = evr_call_cancel(c->cl->conn, c->id);
	c->cancel = CN_DONE;
	if (c->ended) /* the callback fired inside, or before */
		judge(c);
}

static void on_cancel_due(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct call *c = container_of(w, struct call, cancel_w);

	(void)loop;
	(void)revents;
	cancel(c);
}

/* Make call c: 0, -ENOBUFS (try again at on_drain), or another error. */
static int start(struct client *cl, struct call *c)
{
	int rc = build(c);

	if (rc < 0)
		return rc;
	c->t0 = now_s();
	rc = evr_call(cl->conn, c->req, c->len, c->timeout_ms, on_call_end, c,
		      &c->id);
	if (rc < 0) {
		free(c->req);
		c->req = NULL;
		return rc;
	}
	cl->inflight++;
	cl->nstarted++;
	if (c->kind == C_CANCEL_NOW) {
		cancel(c);
	} else if (c->kind == C_CANCEL_LATER) {
		ev_timer_init(&c->cancel_w, on_cancel_due, c->cancel_s, 0.);
		ev_timer_start(cl->loop, &c->cancel_w);
	}
	return 0;
}

/* Make calls while the window has room; the mixed calls only once every
 * put has been answered.  Close when every call has ended. */
static void pump(struct client *cl)
{
	int rc;

	cl->pumping = true;
	while (cl->up && !cl->blocked && cl->inflight < cl->window &&
	       cl->next < cl->n) {
		if (cl->next == cl->nputs && cl->nended < cl->nputs)
			break;
		rc = start(cl, &cl->calls[cl->next]);
		if (rc == -ENOBUFS) {
			cl->blocked = true; /* on_drain follows */
			break;
		}
		if (rc < 0) {
			fprintf(stderr, "rpc_client: evr_call: %s\n",
				evr_strerror(rc));
			fail(cl, rc == -EOPNOTSUPP
					 ? "the server does not serve calls"
					 : "call refused");
			break;
		}
		cl->next++;
	}
	cl->pumping = false;
	if (cl->up && !cl->closing && cl->nended == cl->n) {
		cl->closing = true;
		cl->t_end = now_s();
		rc = evr_conn_close(cl->conn, 0);
		if (rc < 0) {
			fprintf(stderr, "rpc_client: evr_conn_close: %s\n",
				evr_strerror(rc));
			fail(cl, "close failed");
		}
	}
}

static void on_drain(evr_conn *conn, void *arg)
{
	struct client *cl = arg;

	(void)conn;
	cl->blocked = false;
	pump(cl);
}

static void on_connect(evr_conn *conn, int status, void *arg)
{
	struct client *cl = arg;

	if (status < 0) {
		fprintf(stderr, "rpc_client: connect to %s:%d: %s\n", cl->addr,
			cl->port, evr_strerror(status));
		cl->closed = true;
		fail(cl, "connect failed");
		return;
	}
	cl->conn = conn;
	cl->up = true;
	cl->t_start = now_s();
	pump(cl);
}

static void on_close(evr_conn *conn, int status, void *arg)
{
	struct client *cl = arg;

	(void)conn;
	cl->up = false;
	cl->closed = true;
	if (status < 0 || !cl->closing) {
		fprintf(stderr, "rpc_client: connection closed (%s) after %u "
				"of %u calls\n",
			evr_err_name(status), cl->nended, cl->n);
		cl->errors++;
	}
	ev_break(cl->loop, EVBREAK_ALL);
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct client *cl = w->data;

	(void)loop;
	(void)revents;
	fprintf(stderr, "rpc_client: %u of %u calls made, %u ended, %u in "
			"flight\n",
		cl->next, cl->n, cl->nended, cl->inflight);
	fail(cl, "timed out");
}

/* ---- the end ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double q)
{
	size_t i = (size_t)(q * (double)n);

	return v[i < n ? i : n - 1];
}

/* Every call made and ended once, as expected; the library counted the
 * same (st, NULL when the run broke off).  Errors are counted in
 * cl->errors. */
static void check_all(struct client *cl, const struct evr_stats *st)
{
	unsigned i;

	for (i = 0; i < cl->n; i++) {
		struct call *c = &cl->calls[i];

		if (i >= cl->nstarted)
			break; /* fail() said why */
		if (!c->ended)
			mismatch(c, "never ended");
	}
	if (cl->njudged != cl->nended) {
		fprintf(stderr, "rpc_client: %u calls ended, %u judged\n",
			cl->nended, cl->njudged);
		cl->errors++;
	}
	if (!st)
		return;
	if (st->calls != cl->nstarted || st->calls_ok != cl->ok ||
	    st->calls_expired != cl->timedout ||
	    st->calls_cancelled != cl->cancelled) {
		fprintf(stderr, "rpc_client: the library counted %llu calls: "
				"%llu ok, %llu expired, %llu cancelled; we "
				"made %u: %llu ok, %llu timed out, %llu "
				"cancelled\n",
			(unsigned long long)st->calls,
			(unsigned long long)st->calls_ok,
			(unsigned long long)st->calls_expired,
			(unsigned long long)st->calls_cancelled, cl->nstarted,
			(unsigned long long)cl->ok,
			(unsigned long long)cl->timedout,
			(unsigned long long)cl->cancelled);
		cl->errors++;
	}
}

static void summary(struct client *cl, const struct evr_stats *st)
{
	double secs = cl->t_end > cl->t_start ? cl->t_end - cl->t_start : 0;
	double p50 = 0, p99 = 0;
	unsigned k;

	if (cl->nlat) {
		qsort(cl->lat, cl->nlat, sizeof(double), cmp_double);
		p50 = pct(cl->lat, cl->nlat, 0.5);
		p99 = pct(cl->lat, cl->nlat, 0.99);
	}
	printf("rpc_client: calls:");
	for (k = 0; k < C__COUNT; k++)
		printf(" %s %u%s", kind_str[k], cl->by_kind[k],
		       k + 1 < C__COUNT ? "," : "\n");
	printf("rpc_client: %u of %u calls ended in %.3f s, %.0f calls/s: "
	       "OK %llu, ETIMEDOUT %llu, ECANCELED %llu, other %llu\n",
	       cl->nended, cl->n, secs, secs > 0 ? cl->nended / secs : 0,
	       (unsigned long long)cl->ok, (unsigned long long)cl->timedout,
	       (unsigned long long)cl->cancelled,
	       (unsigned long long)cl->other);
	printf("rpc_client: answered calls: latency p50 %.1f us, p99 %.1f "
	       "us; late replies %llu; errors %d\n",
	       p50 * 1e6, p99 * 1e6, (unsigned long long)st->late_replies,
	       cl->errors);
}

static void usage(void)
{
	fprintf(stderr,
		"usage: rpc_client -a ADDR [-p PORT] [-n CALLS] [-w WINDOW] "
		"[-t SECONDS]\n"
		"  -a ADDR     server address (IPv4 or IPv6)\n"
		"  -p PORT     server port (default 7471)\n"
		"  -n CALLS    calls in all (default 2000)\n"
		"  -w WINDOW   calls in flight (default 16, at most 65536)\n"
		"  -t SECONDS  give up after this long (default 120)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct client cl = {0};
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct evr_stats st;
	double tmo = 120;
	int opt, rc;
	unsigned i;

	cl.port = 7471;
	cl.n = 2000;
	cl.window = 16;
	while ((opt = getopt(argc, argv, "a:p:n:w:t:h")) != -1) {
		switch (opt) {
		case 'a':
			cl.addr = optarg;
			break;
		case 'p':
			cl.port = atoi(optarg);
			break;
		case 'n':
			cl.n = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'w':
			cl.window = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 't':
			tmo = atof(optarg);
			break;
		default:
			usage();
		}
	}
	if (!cl.addr || optind != argc || cl.port <= 0 || cl.port > 65535 ||
	    !cl.n || cl.n > 100000000 || !cl.window || cl.window > 65536 ||
	    tmo <= 0)
		usage();
	if (plan(&cl) < 0) {
		fprintf(stderr, "rpc_client: out of memory\n");
		return 1;
	}

	cl.loop = EV_DEFAULT;
	evr_ctx_opts_init(&o);
	rc = evr_ctx_create(&cl.ctx, cl.loop, &o);
	if (rc < 0) {
		fprintf(stderr, "rpc_client: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	evr_conn_opts_init(&co);
	co.on_connect = on_connect;
	co.on_close = on_close;
	co.on_drain = on_drain;
	co.arg = &cl;
	co.max_calls = cl.window; /* the window, not the default 256 */
	rc = evr_connect(cl.ctx, cl.addr, (uint16_t)cl.port, &co, NULL);
	if (rc < 0) {
		fprintf(stderr, "rpc_client: evr_connect %s:%d: %s\n", cl.addr,
			cl.port, evr_strerror(rc));
		evr_ctx_destroy(cl.ctx);
		return 1;
	}
	ev_timer_init(&cl.deadline, on_deadline, tmo, 0.);
	cl.deadline.data = &cl;
	ev_timer_start(cl.loop, &cl.deadline);
	ev_run(cl.loop, 0);
	if (!cl.t_end)
		cl.t_end = now_s();

	/* After a failure, calls still in flight end inside the destroy
	 * (-ECANCELED): judged, but no new call is made, and the library's
	 * counters (taken before) are not compared. */
	cl.stopping = true;
	for (i = 0; i < cl.n; i++)
		if (cl.calls[i].kind == C_CANCEL_LATER)
			ev_timer_stop(cl.loop, &cl.calls[i].cancel_w);
	evr_ctx_stats(cl.ctx, &st);
	evr_ctx_destroy(cl.ctx);
	check_all(&cl, cl.closed && cl.closing ? &st : NULL);
	summary(&cl, &st);
	for (i = 0; i < cl.n; i++)
		free(cl.calls[i].req);
	free(cl.calls);
	free(cl.vlen);
	free(cl.lat);
	return cl.errors || cl.nended != cl.n ? 1 : 0;
}
