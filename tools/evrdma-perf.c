/*
 * evrdma-perf: latency, bandwidth, message-rate and connection-rate
 * measurements of evrdma, in the manner of perftest.
 *
 *   evrdma-perf -s [-a ADDR] [-p PORT] [-v]
 *   evrdma-perf -c ADDR [-p PORT] [-t lat|bw|rate|conn] [-S SIZES]
 *               [-n ITERS | -D SECONDS] [-w WINDOW] [-C CONNS]
 *               [-m event|poll|adaptive] [--load idle|light|sat]
 *               [--json | --csv]
 *
 * Design.  One program, two roles, one thread, one libev loop.  Each client
 * connection says in its connect user bytes what the server is to do with
 * it (echo every message, swallow them, or just connect and close) and in
 * which completion mode the server should run, so one server runs any
 * sequence of tests; while it has no connection it sleeps in EVENT mode.
 *
 * Data messages are never empty.  An empty message is a report request:
 * the server answers it with a report (messages and bytes it received on
 * that connection, its process CPU time, its clock and its evr_ctx_stats
 * counters).  Messages arrive in order, so the report also confirms that
 * everything sent before the request was received.  The client asks once
 * before it starts the clock and once after, which gives the server's CPU
 * time over the measurement and, for one-way tests, the receiver's
 * confirmation of the total.
 *
 * Per connection the client walks an explicit state machine (enum phase):
 * connect, warm up (echo tests), baseline report, wait for every other
 * connection, run, drain, final report, done, close.  The clock starts when
 * every connection is ready and stops when the last one has finished its
 * data (last echo, or the final report of a one-way test).  Latencies are
 * half the round trip, as perftest's ib_send_lat reports them, from a
 * CLOCK_MONOTONIC read just before the send to one when the echo is handed
 * to on_recv (the loop's ev_now would be stale: in POLL mode one loop
 * iteration polls many times).  CPU time per
 * message is the client's getrusage time over the measured interval over
 * its messages (round trips in echo tests, connections in the conn test).
 *
 * The conn test connects, closes each connection as soon as it is up and
 * starts the next, CONNS at a time; one untimed connection first binds the
 * ctx to its device.
 */
#include <errno.h>
#include <ev.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <evrdma.h>

#define PERF_PORT 7472
#define MAX_SIZES 64
#define MAX_MSG (64u << 20)	/* the library's default max_msg_size */
#define LIGHT_RATE 200		/* ping-pongs per second at --load light */
#define STALL_S 30.0		/* no progress for this long: give up */
#define PROGRESS_AFTER_S 3.0	/* runs longer than this print progress */

/* ------------------------------------------------------------------------ */
/* Wire: connect user bytes and reports                                     */

/* What the server does with a connection (connect user byte 4). */
enum kind {
	K_ECHO = 1, /* send every message back */
	K_SINK = 2, /* count messages, answer report requests only */
	K_CONN = 3, /* connect and close, no traffic */
};

#define DESC_LEN 6 /* "EVP1", kind, mode */
static const char desc_magic[4] = {'E', 'V', 'P', '1'};

#define REPORT_LEN 56
#define REPORT_MAGIC 0x52505645u /* "EVPR" little endian */

struct report {
	uint64_t msgs, bytes;	/* received on this connection */
	uint64_t cpu_us;	/* server process user + system time */
	uint64_t t_ns;		/* server CLOCK_MONOTONIC */
	uint64_t switches;	/* server ctx mode switches */
	uint64_t wakeups;	/* server ctx completion-channel wakeups */
};

static void put_le(uint8_t *p, uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void report_encode(uint8_t *p, const struct report *r)
{
	put_le(p, REPORT_MAGIC, 4);
	put_le(p + 4, 1, 4);
	put_le(p + 8, r->msgs, 8);
	put_le(p + 16, r->bytes, 8);
	put_le(p + 24, r->cpu_us, 8);
	put_le(p + 32, r->t_ns, 8);
	put_le(p + 40, r->switches, 8);
	put_le(p + 48, r->wakeups, 8);
}

static int report_decode(const void *data, size_t len, struct report *r)
{
	const uint8_t *p = data;

	if (len != REPORT_LEN || get_le(p, 4) != REPORT_MAGIC ||
	    get_le(p + 4, 4) != 1)
		return -1;
	r->msgs = get_le(p + 8, 8);
	r->bytes = get_le(p + 16, 8);
	r->cpu_us = get_le(p + 24, 8);
	r->t_ns = get_le(p + 32, 8);
	r->switches = get_le(p + 40, 8);
	r->wakeups = get_le(p + 48, 8);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Helpers                                                                  */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static ev_tstamp mono_s(void)
{
	return (ev_tstamp)now_ns() * 1e-9;
}

/* This process's user + system CPU time in microseconds. */
static int cpu_us(uint64_t *out)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return -errno;
	*out = (uint64_t)ru.ru_utime.tv_sec * 1000000u +
	       (uint64_t)ru.ru_utime.tv_usec +
	       (uint64_t)ru.ru_stime.tv_sec * 1000000u +
	       (uint64_t)ru.ru_stime.tv_usec;
	return 0;
}

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

static int parse_mode(const char *s)
{
	if (!strcmp(s, "event"))
		return EVR_MODE_EVENT;
	if (!strcmp(s, "poll"))
		return EVR_MODE_POLL;
	if (!strcmp(s, "adaptive"))
		return EVR_MODE_ADAPTIVE;
	return -1;
}

static const char *mode_name(int mode)
{
	switch (mode) {
	case EVR_MODE_EVENT:
		return "event";
	case EVR_MODE_POLL:
		return "poll";
	case EVR_MODE_ADAPTIVE:
		return "adaptive";
	}
	return "?";
}

/* A decimal number in [lo, hi] with nothing after it. */
static int parse_ull(const char *s, unsigned long long lo,
		     unsigned long long hi, unsigned long long *out)
{
	char *end;
	unsigned long long v;

	if (!*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

/* A size: digits with an optional k, M or G suffix (powers of 1024). */
static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;
	unsigned shift = 0;

	if (!*s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	if (*end == 'k' || *end == 'K')
		shift = 10, end++;
	else if (*end == 'm' || *end == 'M')
		shift = 20, end++;
	else if (*end == 'g' || *end == 'G')
		shift = 30, end++;
	if (*end || v > (MAX_MSG >> shift))
		return -1;
	*out = (size_t)(v << shift);
	return 0;
}

/* A comma-separated list of sizes and ranges: "64,4k,1M", "8:1M" (doubling
 * from the first to at most the second) or both ("1,8:64"). */
static int parse_sizes(char *arg, size_t *sizes, int *n)
{
	char *tok, *save = NULL, *colon;
	size_t lo, hi;

	*n = 0;
	for (tok = strtok_r(arg, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		colon = strchr(tok, ':');
		if (colon)
			*colon = '\0';
		if (parse_size(tok, &lo) < 0 || lo == 0)
			return -1;
		hi = lo;
		if (colon && (parse_size(colon + 1, &hi) < 0 || hi < lo))
			return -1;
		for (; lo <= hi; lo *= 2) {
			if (*n == MAX_SIZES)
				return -1;
			sizes[(*n)++] = lo;
		}
	}
	return *n ? 0 : -1;
}

/* ------------------------------------------------------------------------ */
/* Server                                                                   */

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

static int run_server(const char *addr, int port, int verbose)
{
	struct server srv = {0};
	struct evr_ctx_opts o;
	int rc;

	srv.loop = EV_DEFAULT;
	srv.verbose = verbose;
	evr_ctx_opts_init(&o);
	o.local_addr = addr;
	o.mode = EVR_MODE_EVENT;
	rc = evr_ctx_create(&srv.ctx, srv.loop, &o);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	rc = evr_listen(srv.ctx, addr, (uint16_t)port, 1024, srv_on_accept,
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

/* ------------------------------------------------------------------------ */
/* Client: options and results                                              */

enum test { T_LAT, T_BW, T_RATE, T_CONN };
static const char *const test_str[] = {"lat", "bw", "rate", "conn"};

enum load { L_NONE, L_IDLE, L_LIGHT, L_SAT };
static const char *const load_str[] = {"-", "idle", "light", "sat"};

enum fmt { F_TABLE, F_JSON, F_CSV };

struct opts {
	const char *addr;
	int port;
	enum test test;
	enum load load;
	size_t sizes[MAX_SIZES];
	int nsizes;
	uint64_t iters; /* per connection (conn: connections in all) */
	double secs;	/* 0: count-based */
	unsigned window, conns;
	int mode;
	enum fmt fmt;
};

/* One row of output. */
struct result {
	enum test test;
	enum load load;
	int mode;
	size_t size;
	unsigned conns, window;
	uint64_t msgs;
	double secs;
	double lat_med, lat_p99, lat_p999; /* us; NAN when not measured */
	double msg_s, mb_s;
	double cpu_us_msg, cpu_pct;	  /* client */
	double srv_cpu_us_msg, srv_cpu_pct; /* NAN when not known */
	uint64_t switches, srv_switches, wakeups;
};

/* ------------------------------------------------------------------------ */
/* Client: one measurement                                                  */

/* Per-connection state machine of a measurement. */
enum phase {
	PH_IDLE,	/* not started */
	PH_CONNECTING,
	PH_WARMUP,	/* echo tests: unmeasured ping-pongs */
	PH_BASE,	/* waiting for the baseline report */
	PH_READY,	/* waiting for the other connections */
	PH_RUN,
	PH_DRAIN,	/* no new sends; waiting for the outstanding echoes */
	PH_FINAL,	/* waiting for the final report */
	PH_DONE,
	PH_CLOSING,
	PH_CLOSED,
};

static const char *const phase_str[] = {
	"idle", "connecting", "warmup", "base", "ready", "run",
	"drain", "final", "done", "closing", "closed",
};

struct perf;

struct pconn {
	struct perf *p;
	evr_conn *conn;
	unsigned idx;
	enum phase ph;
	uint64_t sent, echoed, acked; /* data messages */
	uint64_t warm_left;
	ev_tstamp *t_sent;	/* send time, ring of window entries */
	uint64_t t_conn;	/* conn test: when evr_connect was called */
	struct report base, final;
};

struct perf {
	struct opts o;
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_mr *mr;	/* the send buffer, readable by the peer */
	uint8_t *buf;
	size_t buf_len;
	struct pconn *pc;
	int failed;

	/* the measurement in progress */
	enum kind kind;
	size_t size;
	uint64_t n;	 /* iterations per conn; 0: until stop */
	uint64_t warm;	 /* warm-up ping-pongs per conn */
	unsigned window;
	bool stop;	 /* duration over */
	unsigned nready, ndata, ndone, nclosed;
	uint64_t started, finished; /* conn test */
	bool conn_warm;	 /* conn test: the untimed first connection */
	uint64_t t_begin, t0, t1, cpu0, cpu1;
	struct evr_stats st0, st1;
	double *lat;	 /* half round trips, us */
	size_t nlat, lat_cap;
	uint64_t events, events_seen; /* progress, for stall detection */
	double stall_s;
	bool progress_shown;
	ev_timer stop_w, tick_w, prog_w;

	struct result *res;
	size_t nres;
};

static void client_fail(struct perf *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void client_fail(struct perf *p, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "evrdma-perf: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	p->failed = 1;
	ev_break(p->loop, EVBREAK_ALL);
}

static int lat_add(struct perf *p, double us)
{
	if (p->nlat == p->lat_cap) {
		size_t cap = p->lat_cap ? p->lat_cap * 2 : 4096;
		double *n = realloc(p->lat, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->lat = n;
		p->lat_cap = cap;
	}
	p->lat[p->nlat++] = us;
	return 0;
}

static void on_sent(evr_conn *conn, int status, void *arg);
static void run_start(struct perf *p);

/* Send one data message (or, with len 0, a report request). */
static int send_msg(struct pconn *pc, size_t len)
{
	int rc = evr_send(pc->conn, pc->p->buf, len, on_sent, pc);

	if (rc < 0)
		client_fail(pc->p, "conn %u: evr_send of %zu bytes in phase "
				   "%s: %s",
			    pc->idx, len, phase_str[pc->ph], evr_strerror(rc));
	return rc;
}

static void request_report(struct pconn *pc, enum phase next)
{
	pc->ph = next;
	send_msg(pc, 0);
}

/* The end of the measured interval. */
static void take_end(struct perf *p)
{
	int rc;

	p->t1 = now_ns();
	rc = cpu_us(&p->cpu1);
	if (rc < 0)
		client_fail(p, "getrusage: %s", evr_strerror(rc));
	evr_ctx_stats(p->ctx, &p->st1);
	ev_timer_stop(p->loop, &p->stop_w);
	ev_timer_stop(p->loop, &p->tick_w);
}

/* A connection has finished its data; the last one stops the clock. */
static void data_done(struct pconn *pc)
{
	struct perf *p = pc->p;

	if (++p->ndata == p->o.conns)
		take_end(p);
}

static void close_all(struct perf *p)
{
	unsigned i;

	for (i = 0; i < p->o.conns; i++) {
		struct pconn *pc = &p->pc[i];
		int rc;

		if (pc->ph == PH_CLOSED || pc->ph == PH_CLOSING || !pc->conn)
			continue;
		pc->ph = PH_CLOSING;
		rc = evr_conn_close(pc->conn, 0);
		if (rc < 0 && rc != -EALREADY)
			client_fail(p, "conn %u: evr_conn_close: %s", i,
				    evr_strerror(rc));
	}
}

/* Echo tests: keep the window full. */
static void pump_echo(struct pconn *pc)
{
	struct perf *p = pc->p;

	while (pc->ph == PH_RUN && !p->stop && (!p->n || pc->sent < p->n) &&
	       pc->sent - pc->echoed < p->window) {
		pc->t_sent[pc->sent % p->window] = mono_s();
		if (send_msg(pc, p->size) < 0)
			return;
		pc->sent++;
	}
}

/* One-way tests: keep the window of unfinished sends full, then ask for
 * the final report, which confirms the total. */
static void pump_sink(struct pconn *pc)
{
	struct perf *p = pc->p;

	if (pc->ph != PH_RUN)
		return;
	while (!p->stop && (!p->n || pc->sent < p->n) &&
	       pc->sent - pc->acked < p->window) {
		if (send_msg(pc, p->size) < 0)
			return;
		pc->sent++;
	}
	if (p->stop || (p->n && pc->sent == p->n))
		request_report(pc, PH_FINAL);
}

/* An echo test connection has no more sends to make: finish when the
 * outstanding echoes are in. */
static void echo_check_end(struct pconn *pc)
{
	struct perf *p = pc->p;

	if (pc->ph == PH_RUN && (p->stop || (p->n && pc->sent == p->n)))
		pc->ph = PH_DRAIN;
	if (pc->ph == PH_DRAIN && pc->echoed == pc->sent) {
		data_done(pc);
		request_report(pc, PH_FINAL);
	}
}

static void on_sent(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;

	(void)conn;
	if (status < 0) {
		if (!p->failed && pc->ph < PH_CLOSING)
			client_fail(p, "conn %u: send failed in phase %s: %s",
				    pc->idx, phase_str[pc->ph],
				    evr_strerror(status));
		return;
	}
	p->events++;
	if (pc->ph != PH_RUN || p->kind != K_SINK)
		return;
	pc->acked++;
	pump_sink(pc);
}

static void on_report(struct pconn *pc, const void *data, size_t len)
{
	struct perf *p = pc->p;
	struct report r;

	if (report_decode(data, len, &r) < 0) {
		client_fail(p, "conn %u: bad report (%zu bytes) in phase %s",
			    pc->idx, len, phase_str[pc->ph]);
		return;
	}
	if (pc->ph == PH_BASE) {
		pc->base = r;
		pc->ph = PH_READY;
		if (++p->nready == p->o.conns)
			run_start(p);
		return;
	}
	pc->final = r;
	if (p->kind == K_SINK) {
		if (r.msgs - pc->base.msgs != pc->sent) {
			client_fail(p, "conn %u: server received %llu of %llu "
				       "messages",
				    pc->idx,
				    (unsigned long long)(r.msgs -
							 pc->base.msgs),
				    (unsigned long long)pc->sent);
			return;
		}
		data_done(pc);
	}
	pc->ph = PH_DONE;
	if (++p->ndone == p->o.conns)
		close_all(p);
}

static void on_recv(evr_conn *conn, const void *data, size_t len, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;
	ev_tstamp t = mono_s();

	(void)conn;
	p->events++;
	switch (pc->ph) {
	case PH_WARMUP:
		if (len != p->size)
			break;
		if (--pc->warm_left == 0)
			request_report(pc, PH_BASE);
		else
			send_msg(pc, p->size);
		return;
	case PH_RUN:
	case PH_DRAIN:
		if (p->kind != K_ECHO || len != p->size ||
		    pc->echoed == pc->sent)
			break;
		if (lat_add(p, (t - pc->t_sent[pc->echoed % p->window]) *
				       1e6 / 2) < 0) {
			client_fail(p, "out of memory");
			return;
		}
		pc->echoed++;
		echo_check_end(pc);
		if (p->o.load != L_LIGHT) /* light: the ticks send */
			pump_echo(pc);
		return;
	case PH_BASE:
	case PH_FINAL:
		on_report(pc, data, len);
		return;
	default:
		break;
	}
	client_fail(p, "conn %u: unexpected %zu-byte message in phase %s",
		    pc->idx, len, phase_str[pc->ph]);
}

static void on_connect(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;
	int rc;

	p->events++;
	if (status < 0) {
		pc->conn = NULL;
		pc->ph = PH_CLOSED;
		p->nclosed++;
		if (!p->failed)
			client_fail(p, "connect to %s:%d: %s", p->o.addr,
				    p->o.port, evr_strerror(status));
		return;
	}
	if (!p->mr) {
		/* Registered once the ctx is bound to the device the server
		 * is reached through; rendezvous sends then cost nothing. */
		rc = evr_mr_reg(p->ctx, p->buf, p->buf_len,
				EVR_ACCESS_REMOTE_READ, &p->mr);
		if (rc < 0) {
			client_fail(p, "evr_mr_reg of %zu bytes: %s",
				    p->buf_len, evr_strerror(rc));
			return;
		}
	}
	pc->conn = conn;
	if (p->kind == K_ECHO && p->warm) {
		pc->ph = PH_WARMUP;
		pc->warm_left = p->warm;
		send_msg(pc, p->size);
	} else {
		request_report(pc, PH_BASE);
	}
}

static void on_close(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;
	enum phase was = pc->ph;

	(void)conn;
	p->events++;
	pc->conn = NULL;
	pc->ph = PH_CLOSED;
	p->nclosed++;
	if (p->failed)
		return;
	if (was != PH_CLOSING || status < 0) {
		client_fail(p, "conn %u closed in phase %s: %s", pc->idx,
			    phase_str[was], evr_strerror(status));
		return;
	}
	if (p->nclosed == p->o.conns)
		ev_break(p->loop, EVBREAK_ALL);
}

/* ---- the conn test: connect, close as soon as established, repeat ---- */

static void cc_start(struct pconn *pc);
static void cc_launch(struct perf *p);

static void cc_on_connect(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;
	int rc;

	p->events++;
	if (status < 0) {
		pc->conn = NULL;
		pc->ph = PH_CLOSED;
		if (!p->failed)
			client_fail(p, "connect to %s:%d: %s", p->o.addr,
				    p->o.port, evr_strerror(status));
		return;
	}
	if (lat_add(p, (double)(now_ns() - pc->t_conn) / 1e3) < 0) {
		client_fail(p, "out of memory");
		return;
	}
	pc->ph = PH_CLOSING;
	rc = evr_conn_close(conn, 0);
	if (rc < 0)
		client_fail(p, "evr_conn_close: %s", evr_strerror(rc));
}

static void cc_on_close(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;

	(void)conn;
	p->events++;
	pc->conn = NULL;
	pc->ph = PH_CLOSED;
	if (p->failed)
		return;
	if (status < 0) {
		client_fail(p, "conn test: connection closed: %s",
			    evr_strerror(status));
		return;
	}
	p->finished++;
	if (p->conn_warm) {
		/* The ctx is bound to its device now: start the clock. */
		p->conn_warm = false;
		p->started = p->finished = 0;
		p->nlat = 0;
		cc_launch(p);
		return;
	}
	if (p->started < p->n) {
		cc_start(pc);
		return;
	}
	if (p->finished == p->n) {
		take_end(p);
		ev_break(p->loop, EVBREAK_ALL);
	}
}

static void cc_start(struct pconn *pc)
{
	struct perf *p = pc->p;
	struct evr_conn_opts co;
	uint8_t desc[DESC_LEN];
	int rc;

	memcpy(desc, desc_magic, 4);
	desc[4] = K_CONN;
	desc[5] = (uint8_t)p->o.mode;
	evr_conn_opts_init(&co);
	co.on_connect = cc_on_connect;
	co.on_recv = on_recv;
	co.on_close = cc_on_close;
	co.arg = pc;
	co.user_data = desc;
	co.user_len = sizeof(desc);
	pc->ph = PH_CONNECTING;
	pc->t_conn = now_ns();
	p->started++;
	rc = evr_connect(p->ctx, p->o.addr, (uint16_t)p->o.port, &co,
			 &pc->conn);
	if (rc < 0) {
		pc->ph = PH_CLOSED;
		client_fail(p, "evr_connect %s:%d: %s", p->o.addr, p->o.port,
			    evr_strerror(rc));
	}
}

/* Start the timed connections, CONNS at a time. */
static void cc_launch(struct perf *p)
{
	unsigned i;

	run_start(p);
	for (i = 0; i < p->o.conns && p->started < p->n && !p->failed; i++)
		cc_start(&p->pc[i]);
}

/* ---- timers ---- */

static void on_stop(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct perf *p = w->data;
	unsigned i;

	(void)loop;
	(void)revents;
	p->stop = true;
	if (p->o.test == T_CONN)
		return;
	for (i = 0; i < p->o.conns && !p->failed; i++) {
		struct pconn *pc = &p->pc[i];

		if (pc->ph != PH_RUN)
			continue;
		if (p->kind == K_ECHO)
			echo_check_end(pc);
		else
			pump_sink(pc);
	}
}

/* --load light: one ping per connection per tick, if its last one is
 * back (the load is offered, not closed-loop). */
static void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct perf *p = w->data;
	unsigned i;

	(void)loop;
	(void)revents;
	for (i = 0; i < p->o.conns && !p->failed; i++) {
		struct pconn *pc = &p->pc[i];

		if (pc->ph != PH_RUN || pc->sent != pc->echoed)
			continue;
		pc->t_sent[pc->sent % p->window] = mono_s();
		if (send_msg(pc, p->size) < 0)
			return;
		pc->sent++;
	}
}

static void on_progress(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct perf *p = w->data;
	double el = (double)(now_ns() - p->t_begin) / 1e9;
	uint64_t done = 0;
	unsigned i;

	(void)loop;
	(void)revents;
	if (p->events != p->events_seen) {
		p->events_seen = p->events;
		p->stall_s = 0;
	} else if (!(p->o.load == L_IDLE && p->t0 && !p->stop) &&
		   (p->stall_s += w->repeat) >= STALL_S) {
		client_fail(p, "no progress for %.0f s (%u of %u connections "
			       "ready, %u done)",
			    p->stall_s, p->nready, p->o.conns, p->ndone);
		return;
	}
	if (el < PROGRESS_AFTER_S)
		return;
	if (p->o.test == T_CONN)
		done = p->finished;
	else
		for (i = 0; i < p->o.conns; i++)
			done += p->kind == K_ECHO ? p->pc[i].echoed
						  : p->pc[i].acked;
	fprintf(stderr, "%sevrdma-perf: %s%s%s %zu B: %llu done, %.0f s",
		isatty(2) ? "\r" : "", test_str[p->o.test],
		p->o.load ? "/" : "", p->o.load ? load_str[p->o.load] : "",
		p->size, (unsigned long long)done, el);
	fputs(isatty(2) ? "   " : "\n", stderr);
	p->progress_shown = true;
}

/* Every connection is ready: start the clock and the traffic. */
static void run_start(struct perf *p)
{
	unsigned i;
	int rc;

	rc = cpu_us(&p->cpu0);
	if (rc < 0) {
		client_fail(p, "getrusage: %s", evr_strerror(rc));
		return;
	}
	evr_ctx_stats(p->ctx, &p->st0);
	p->t0 = now_ns();
	if (p->o.test == T_CONN)
		return;
	if (p->o.secs > 0) {
		ev_timer_set(&p->stop_w, p->o.secs, 0.);
		ev_timer_start(p->loop, &p->stop_w);
	}
	if (p->o.load == L_LIGHT) {
		ev_timer_set(&p->tick_w, 0., 1. / LIGHT_RATE);
		ev_timer_start(p->loop, &p->tick_w);
	}
	for (i = 0; i < p->o.conns; i++) {
		struct pconn *pc = &p->pc[i];

		pc->ph = PH_RUN;
		pc->sent = pc->echoed = pc->acked = 0;
	}
	if (p->o.load == L_IDLE || p->o.load == L_LIGHT)
		return;
	for (i = 0; i < p->o.conns && !p->failed; i++) {
		if (p->kind == K_ECHO)
			pump_echo(&p->pc[i]);
		else
			pump_sink(&p->pc[i]);
	}
}

static void on_idle_end(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct perf *p = w->data;
	unsigned i;

	(void)loop;
	(void)revents;
	p->stop = true;
	for (i = 0; i < p->o.conns && !p->failed; i++) {
		data_done(&p->pc[i]);
		request_report(&p->pc[i], PH_FINAL);
	}
}

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

static void result_fill(struct perf *p, struct result *r)
{
	double secs = (double)(p->t1 - p->t0) / 1e9;
	uint64_t bytes = 0;
	unsigned i;

	memset(r, 0, sizeof(*r));
	r->test = p->o.test;
	r->load = p->o.load;
	r->mode = p->o.mode;
	r->size = p->o.test == T_CONN || p->o.load == L_IDLE ? 0 : p->size;
	r->conns = p->o.conns;
	r->window = p->o.test == T_CONN ? 0 : p->window;
	r->secs = secs;
	if (p->o.test == T_CONN)
		r->msgs = p->finished;
	else
		for (i = 0; i < p->o.conns; i++)
			r->msgs += p->pc[i].sent;
	bytes = r->msgs * r->size;
	r->lat_med = r->lat_p99 = r->lat_p999 = NAN;
	if (p->nlat) {
		qsort(p->lat, p->nlat, sizeof(double), cmp_double);
		r->lat_med = pct(p->lat, p->nlat, 0.5);
		r->lat_p99 = pct(p->lat, p->nlat, 0.99);
		r->lat_p999 = pct(p->lat, p->nlat, 0.999);
	}
	r->msg_s = secs > 0 ? (double)r->msgs / secs : NAN;
	r->mb_s = secs > 0 ? (double)bytes / secs / 1e6 : NAN;
	r->cpu_us_msg = r->msgs ? (double)(p->cpu1 - p->cpu0) / (double)r->msgs
				: NAN;
	r->cpu_pct = secs > 0 ? (double)(p->cpu1 - p->cpu0) / 1e4 / secs : NAN;
	r->switches = p->st1.mode_switches - p->st0.mode_switches;
	r->wakeups = p->st1.wakeups - p->st0.wakeups;
	r->srv_cpu_us_msg = r->srv_cpu_pct = NAN;
	if (p->o.test != T_CONN) {
		const struct report *b = &p->pc[0].base, *f = &p->pc[0].final;
		double ssecs = (double)(f->t_ns - b->t_ns) / 1e9;
		double scpu = (double)(f->cpu_us - b->cpu_us);

		r->srv_cpu_pct = ssecs > 0 ? scpu / 1e4 / ssecs : NAN;
		r->srv_cpu_us_msg = r->msgs ? scpu / (double)r->msgs : NAN;
		r->srv_switches = f->switches - b->switches;
	}
}

/* Run one measurement at one size; append its result. */
static int run_one(struct perf *p, size_t size)
{
	struct result *res;
	uint8_t desc[DESC_LEN];
	unsigned i;

	p->size = size;
	p->stop = false;
	p->nready = p->ndata = p->ndone = p->nclosed = 0;
	p->started = p->finished = 0;
	p->t0 = p->t1 = 0;
	p->nlat = 0;
	p->events = p->events_seen = 0;
	p->stall_s = 0;
	p->progress_shown = false;
	p->t_begin = now_ns();
	ev_timer_init(&p->stop_w, p->o.load == L_IDLE ? on_idle_end : on_stop,
		      1., 0.);
	ev_timer_init(&p->tick_w, on_tick, 0., 1.);
	ev_timer_init(&p->prog_w, on_progress, 1., 1.);
	p->stop_w.data = p->tick_w.data = p->prog_w.data = p;
	ev_timer_start(p->loop, &p->prog_w);

	if (p->o.test == T_CONN) {
		p->n = p->o.iters;
		for (i = 0; i < p->o.conns; i++) {
			p->pc[i].p = p;
			p->pc[i].idx = i;
		}
		/* One untimed connection first, which binds the ctx to the
		 * device (on the first run) and warms both sides up. */
		p->conn_warm = true;
		cc_start(&p->pc[0]);
	} else {
		memcpy(desc, desc_magic, 4);
		desc[4] = (uint8_t)p->kind;
		desc[5] = (uint8_t)p->o.mode;
		for (i = 0; i < p->o.conns && !p->failed; i++) {
			struct pconn *pc = &p->pc[i];
			struct evr_conn_opts co;
			int rc;

			memset(&pc->base, 0, sizeof(pc->base));
			memset(&pc->final, 0, sizeof(pc->final));
			pc->p = p;
			pc->idx = i;
			pc->sent = pc->echoed = pc->acked = 0;
			pc->ph = PH_CONNECTING;
			evr_conn_opts_init(&co);
			co.on_connect = on_connect;
			co.on_recv = on_recv;
			co.on_close = on_close;
			co.arg = pc;
			co.user_data = desc;
			co.user_len = sizeof(desc);
			rc = evr_connect(p->ctx, p->o.addr, (uint16_t)p->o.port,
					 &co, &pc->conn);
			if (rc < 0) {
				pc->ph = PH_CLOSED;
				p->nclosed++;
				client_fail(p, "evr_connect %s:%d: %s",
					    p->o.addr, p->o.port,
					    evr_strerror(rc));
			}
		}
	}
	if (!p->failed)
		ev_run(p->loop, 0);
	ev_timer_stop(p->loop, &p->prog_w);
	ev_timer_stop(p->loop, &p->stop_w);
	ev_timer_stop(p->loop, &p->tick_w);
	if (p->progress_shown && isatty(2))
		fputc('\n', stderr);
	if (p->failed)
		return -1;
	res = realloc(p->res, (p->nres + 1) * sizeof(*res));
	if (!res) {
		fprintf(stderr, "evrdma-perf: out of memory\n");
		return -1;
	}
	p->res = res;
	result_fill(p, &p->res[p->nres++]);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Client: output                                                           */

static void print_num(FILE *f, double v, const char *fmt, const char *none)
{
	if (isnan(v))
		fputs(none, f);
	else
		fprintf(f, fmt, v);
}

static void table_header(void)
{
	printf("%-5s %-8s %-5s %8s %5s %4s %9s %9s %9s %9s %10s %9s %8s "
	       "%7s %7s %8s %8s\n",
	       "test", "mode", "load", "size", "conns", "win", "msgs",
	       "lat_med", "lat_p99", "lat_p999", "msg/s", "MB/s",
	       "cpu_us/m", "cpu%", "srv%", "switch", "srv_sw");
}

static void table_row(const struct result *r)
{
	printf("%-5s %-8s %-5s %8zu %5u %4u %9llu ", test_str[r->test],
	       mode_name(r->mode), load_str[r->load], r->size, r->conns,
	       r->window, (unsigned long long)r->msgs);
	print_num(stdout, r->lat_med, "%9.2f ", "        - ");
	print_num(stdout, r->lat_p99, "%9.2f ", "        - ");
	print_num(stdout, r->lat_p999, "%9.2f ", "        - ");
	print_num(stdout, r->msg_s, "%10.0f ", "         - ");
	print_num(stdout, r->mb_s, "%9.2f ", "        - ");
	print_num(stdout, r->cpu_us_msg, "%8.2f ", "       - ");
	print_num(stdout, r->cpu_pct, "%7.2f ", "      - ");
	print_num(stdout, r->srv_cpu_pct, "%7.2f ", "      - ");
	printf("%8llu ", (unsigned long long)r->switches);
	if (r->test == T_CONN)
		printf("%8s\n", "-");
	else
		printf("%8llu\n", (unsigned long long)r->srv_switches);
}

static const char csv_header[] =
	"test,mode,load,size,conns,window,msgs,secs,lat_med_us,lat_p99_us,"
	"lat_p999_us,msg_s,mb_s,cpu_us_per_msg,cpu_pct,srv_cpu_us_per_msg,"
	"srv_cpu_pct,switches,srv_switches,wakeups";

/* CSV and JSON rows share the field order of csv_header. */
static void data_row(const struct result *r, int json)
{
	const char *none = json ? "null" : "";
	const char *sep = json ? ", " : ",";
	double v[] = {r->lat_med, r->lat_p99, r->lat_p999, r->msg_s, r->mb_s,
		      r->cpu_us_msg, r->cpu_pct, r->srv_cpu_us_msg,
		      r->srv_cpu_pct};
	static const char *const vname[] = {
		"lat_med_us", "lat_p99_us", "lat_p999_us", "msg_s", "mb_s",
		"cpu_us_per_msg", "cpu_pct", "srv_cpu_us_per_msg",
		"srv_cpu_pct"};
	size_t i;

	if (json)
		printf("    {\"test\": \"%s\", \"mode\": \"%s\", \"load\": "
		       "\"%s\", \"size\": %zu, \"conns\": %u, \"window\": "
		       "%u, \"msgs\": %llu, \"secs\": %.6f",
		       test_str[r->test], mode_name(r->mode),
		       r->load ? load_str[r->load] : "", r->size, r->conns,
		       r->window, (unsigned long long)r->msgs, r->secs);
	else
		printf("%s,%s,%s,%zu,%u,%u,%llu,%.6f", test_str[r->test],
		       mode_name(r->mode), r->load ? load_str[r->load] : "",
		       r->size, r->conns, r->window,
		       (unsigned long long)r->msgs, r->secs);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		fputs(sep, stdout);
		if (json)
			printf("\"%s\": ", vname[i]);
		print_num(stdout, v[i], "%.3f", none);
	}
	if (json)
		printf(", \"switches\": %llu, \"srv_switches\": ",
		       (unsigned long long)r->switches);
	else
		printf(",%llu,", (unsigned long long)r->switches);
	if (r->test == T_CONN)
		fputs(none, stdout);
	else
		printf("%llu", (unsigned long long)r->srv_switches);
	if (json)
		printf(", \"wakeups\": %llu}", (unsigned long long)r->wakeups);
	else
		printf(",%llu\n", (unsigned long long)r->wakeups);
}

static void emit_row(const struct perf *p, size_t i)
{
	if (p->o.fmt == F_TABLE) {
		if (i == 0)
			table_header();
		table_row(&p->res[i]);
	} else if (p->o.fmt == F_CSV) {
		if (i == 0)
			puts(csv_header);
		data_row(&p->res[i], 0);
	}
	fflush(stdout);
}

static void emit_json(const struct perf *p)
{
	size_t i;

	printf("{\n  \"tool\": \"evrdma-perf\",\n  \"results\": [\n");
	for (i = 0; i < p->nres; i++) {
		data_row(&p->res[i], 1);
		printf("%s\n", i + 1 < p->nres ? "," : "");
	}
	printf("  ]\n}\n");
}

/* ------------------------------------------------------------------------ */
/* Client: setup                                                            */

static int run_client(struct opts *o)
{
	struct perf p = {0};
	struct evr_ctx_opts co;
	size_t max = 1;
	int i, rc, ret = 1;
	unsigned j;

	p.o = *o;
	p.loop = EV_DEFAULT;
	switch (o->test) {
	case T_LAT:
		p.kind = K_ECHO;
		p.window = o->load == L_SAT ? o->window : 1;
		break;
	case T_BW:
	case T_RATE:
		p.kind = K_SINK;
		p.window = o->window;
		break;
	case T_CONN:
		p.kind = K_CONN;
		p.window = 1;
		break;
	}
	for (i = 0; i < o->nsizes; i++)
		if (o->sizes[i] > max)
			max = o->sizes[i];
	p.buf_len = max;
	p.buf = malloc(max);
	p.pc = calloc(o->conns, sizeof(*p.pc));
	if (!p.buf || !p.pc) {
		fprintf(stderr, "evrdma-perf: out of memory\n");
		goto out_free;
	}
	memset(p.buf, 0xa5, max);
	for (j = 0; j < o->conns; j++) {
		p.pc[j].t_sent = calloc(p.window, sizeof(ev_tstamp));
		if (!p.pc[j].t_sent) {
			fprintf(stderr, "evrdma-perf: out of memory\n");
			goto out_free;
		}
	}
	evr_ctx_opts_init(&co);
	co.mode = (enum evr_mode)o->mode;
	rc = evr_ctx_create(&p.ctx, p.loop, &co);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_create: %s\n",
			evr_strerror(rc));
		goto out_free;
	}
	for (i = 0; i < o->nsizes; i++) {
		size_t s = o->sizes[i];

		/* iterations: the user's, or enough for a steady figure */
		if (o->secs > 0)
			p.n = 0;
		else if (o->iters)
			p.n = o->iters;
		else if (o->test == T_LAT)
			p.n = 10000;
		else if (o->test == T_RATE)
			p.n = 50000;
		else /* bw: 256 MiB worth */
			p.n = clamp_u64((256u << 20) / s, 100, 50000);
		/* echo tests warm up with a tenth of the run, or 100 */
		p.warm = 0;
		if (o->test == T_LAT && o->load != L_IDLE)
			p.warm = p.n ? clamp_u64(p.n / 10, 10, 1000) : 100;
		if (run_one(&p, s) < 0)
			goto out_destroy;
		emit_row(&p, p.nres - 1);
	}
	if (o->fmt == F_JSON)
		emit_json(&p);
	ret = 0;
out_destroy:
	if (p.mr) {
		rc = evr_mr_dereg(p.mr);
		if (rc < 0 && !p.failed) {
			fprintf(stderr, "evrdma-perf: evr_mr_dereg: %s\n",
				evr_strerror(rc));
			ret = 1;
		}
	}
	p.failed = 1; /* the aborts of evr_ctx_destroy are expected */
	evr_ctx_destroy(p.ctx);
out_free:
	if (p.pc)
		for (j = 0; j < o->conns; j++)
			free(p.pc[j].t_sent);
	free(p.pc);
	free(p.buf);
	free(p.lat);
	free(p.res);
	return ret;
}

/* ------------------------------------------------------------------------ */
/* Command line                                                             */

static void usage(void)
{
	fprintf(stderr,
"usage: evrdma-perf -s [-a ADDR] [-p PORT] [-v]\n"
"       evrdma-perf -c ADDR [-p PORT] [-t lat|bw|rate|conn] [-S SIZES]\n"
"                   [-n ITERS | -D SECONDS] [-w WINDOW] [-C CONNS]\n"
"                   [-m event|poll|adaptive] [--load idle|light|sat]\n"
"                   [--json | --csv]\n"
"  -s            serve (any number of tests, until SIGINT/SIGTERM)\n"
"  -a ADDR       server: local address to listen on (default any)\n"
"  -c ADDR       client: the server's address (IPv4 or IPv6)\n"
"  -p PORT       port (default %d)\n"
"  -t TEST       lat: ping-pong; bw: one-way stream; rate: small-message\n"
"                rate (one-way); conn: connect/close rate (default lat)\n"
"  -S SIZES      message sizes, comma separated: 64,4k,1M; a range A:B\n"
"                doubles from A to B (8:1M); 1 byte to 64M (default 64;\n"
"                bw: 64k)\n"
"  -n ITERS      messages per connection (conn: connections in all)\n"
"  -D SECONDS    run each size this long instead of -n\n"
"  -w WINDOW     messages in flight per connection (bw, rate, --load sat;\n"
"                default 16, rate 64)\n"
"  -C CONNS      connections in parallel (default 1)\n"
"  -m MODE       completion mode of both sides (default adaptive)\n"
"  --load LOAD   ping-pong under an offered load (with -t lat):\n"
"                idle: connections open, no traffic (default -D 10);\n"
"                light: %d ping-pongs/s (default -D 10);\n"
"                sat: as fast as the window allows (default -D 5)\n"
"  --json, --csv machine-readable output instead of the table\n"
"Latencies are half round trips (us); cpu_us/m is the client's CPU time\n"
"per message, cpu%% and srv%% the client's and server's CPU time per wall\n"
"second (getrusage), switch the adaptive mode switches.\n",
		PERF_PORT, LIGHT_RATE);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"json", no_argument, NULL, 'J'},
		{"csv", no_argument, NULL, 'V'},
		{"load", required_argument, NULL, 'L'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {0};
	const char *listen_addr = NULL;
	char *sizes = NULL;
	int server = 0, verbose = 0, have_w = 0, have_n = 0, opt;
	unsigned long long v;
	char *end;

	o.port = PERF_PORT;
	o.test = T_LAT;
	o.mode = EVR_MODE_ADAPTIVE;
	o.conns = 1;
	while ((opt = getopt_long(argc, argv, "sa:c:p:t:S:n:D:w:C:m:vh", lopts,
				  NULL)) != -1) {
		switch (opt) {
		case 's':
			server = 1;
			break;
		case 'a':
			listen_addr = optarg;
			break;
		case 'c':
			o.addr = optarg;
			break;
		case 'p':
			if (parse_ull(optarg, 1, 65535, &v) < 0)
				usage();
			o.port = (int)v;
			break;
		case 't':
			for (v = 0; v < 4 && strcmp(optarg, test_str[v]); v++)
				;
			if (v == 4)
				usage();
			o.test = (enum test)v;
			break;
		case 'S':
			sizes = optarg;
			break;
		case 'n':
			if (parse_ull(optarg, 1, 1ull << 40, &v) < 0)
				usage();
			o.iters = v;
			have_n = 1;
			break;
		case 'D':
			errno = 0;
			o.secs = strtod(optarg, &end);
			if (errno || *end || !(o.secs > 0) || o.secs > 86400)
				usage();
			break;
		case 'w':
			if (parse_ull(optarg, 1, 4096, &v) < 0)
				usage();
			o.window = (unsigned)v;
			have_w = 1;
			break;
		case 'C':
			if (parse_ull(optarg, 1, 1024, &v) < 0)
				usage();
			o.conns = (unsigned)v;
			break;
		case 'm':
			o.mode = parse_mode(optarg);
			if (o.mode < 0)
				usage();
			break;
		case 'L':
			if (!strcmp(optarg, "idle"))
				o.load = L_IDLE;
			else if (!strcmp(optarg, "light"))
				o.load = L_LIGHT;
			else if (!strcmp(optarg, "sat"))
				o.load = L_SAT;
			else
				usage();
			break;
		case 'J':
			o.fmt = F_JSON;
			break;
		case 'V':
			o.fmt = F_CSV;
			break;
		case 'v':
			verbose = 1;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || server == !!o.addr)
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (server)
		return run_server(listen_addr, o.port, verbose);

	if (listen_addr || (have_n && o.secs > 0) ||
	    (o.load && o.test != T_LAT))
		usage();
	/* the window is for the windowed tests only */
	if (have_w && o.test != T_BW && o.test != T_RATE && o.load != L_SAT)
		usage();
	if (!have_w)
		o.window = o.test == T_RATE ? 64 : 16;
	if (sizes && (o.test == T_CONN || o.load == L_IDLE))
		usage();
	if (sizes) {
		if (parse_sizes(sizes, o.sizes, &o.nsizes) < 0)
			usage();
	} else {
		o.sizes[0] = o.test == T_BW ? 65536 : 64;
		o.nsizes = 1;
	}
	if (o.load && !have_n && !(o.secs > 0))
		o.secs = o.load == L_SAT ? 5 : 10;
	if ((o.load == L_IDLE || o.load == L_LIGHT) && have_n)
		usage(); /* they run for a duration */
	if (o.test == T_CONN) {
		if (o.secs > 0)
			usage();
		if (!o.iters)
			o.iters = 100;
		if (o.conns > o.iters)
			o.conns = (unsigned)o.iters;
	}
	return run_client(&o);
}
