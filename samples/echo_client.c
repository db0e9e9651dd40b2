/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * echo_client: sends messages to an evrdma echo server and checks that
 * every echo comes back whole, in order and byte for byte.
 *
 *   echo_client -a ADDR [-p PORT] [-s SIZES] [-n COUNT] [-w WINDOW]
 *               [-c CONNS] [-m MODE] [-t SECONDS]
 *
 * Each connection sends COUNT messages, cycling through SIZES, keeping up to
 * WINDOW of them in flight.  Prints messages, bytes, the median and 99th
 * percentile round trip and the rates; exits non-zero on any mismatch,
 * error or timeout.
 *
 * All CONNS connects are issued at once (a burst), up to 10000.  The
 * limits are memory, not fds (one rdma_cm channel for all): about 0.5 MiB
 * of receive buffers per connection on each side with the default
 * options, plus a QP; and time: this process sets its QPs up one after the
 * other, which for many hundreds can outlast a connect's resolution bound.
 * Spread a large burst over several clients:
 *   for i in 1 2 3 4; do echo_client -a ADDR -c 250 & done; wait
 */
#include <ev.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <evrdma.h>

#define MAX_SIZES 32

struct slot {
	uint8_t *buf;
	int busy; /* waiting for its send callback and/or its echo */
	int send_done, echo_done;
	double t_sent;
};

struct cconn {
	struct client *cl;
	evr_conn *conn;
	unsigned idx;
	struct slot *slots;
	uint32_t sent, echoed;
	int up, closed;
};

struct client {
	struct ev_loop *loop;
	evr_ctx *ctx;
	const char *addr;
	int port;
	size_t sizes[MAX_SIZES];
	int nsizes;
	size_t max_size;
	uint32_t count;
	unsigned window, nconns;
	struct cconn *conns;
	double *rtt;
	size_t nrtt;
	unsigned closed;
	uint64_t bytes;
	int errors;
	double t_start, t_end;
	ev_timer deadline;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static uint8_t pat(unsigned conn, uint32_t seq, size_t i)
{
	uint32_t x = (seq + 1) * 2654435761u ^ (uint32_t)(i * 40503u) ^ conn;

	return (uint8_t)(x ^ (x >> 11));
}

static size_t size_of(const struct client *cl, uint32_t seq)
{
	return cl->sizes[seq % (uint32_t)cl->nsizes];
}

static void fail(struct client *cl, const char *what)
{
	fprintf(stderr, "echo_client: %s\n", what);
	cl->errors++;
	ev_break(cl->loop, EVBREAK_ALL);
}

static void pump(struct cconn *cc);

static void slot_check_free(struct cconn *cc, struct slot *s)
{
	if (s->busy && s->send_done && s->echo_done) {
		s->busy = 0;
		pump(cc);
	}
}

static void on_sent(evr_conn *conn, int status, void *arg)
{
	struct slot *s = arg;
	struct cconn *cc = evr_conn_arg(conn);

	if (status < 0) {
		fprintf(stderr, "echo_client: send failed: %s\n",
			evr_strerror(status));
		cc->cl->errors++;
		return;
	}
	s->send_done = 1;
	slot_check_free(cc, s);
}

/* Send while the window has room and messages are left. */
static void pump(struct cconn *cc)
{
	struct client *cl = cc->cl;

	while (cc->up && cc->sent < cl->count) {
		struct slot *s = &cc->slots[cc->sent % cl->window];
		size_t len = size_of(cl, cc->sent), i;
		int rc;

		if (s->busy)
			return;
		for (i = 0; i < len; i++)
			s->buf[i] = pat(cc->idx, cc->sent, i);
		s->busy = 1;
		s->send_done = s->echo_done = 0;
		s->t_sent = now_s();
		rc = evr_send(cc->conn, s->buf, len, on_sent, s);
		if (rc < 0) {
			s->busy = 0;
			fprintf(stderr, "echo_client: evr_send: %s\n",
				evr_strerror(rc));
			fail(cl, "send refused");
			return;
		}
		cc->sent++;
	}
}

static void on_recv(evr_conn *conn, const void *data, size_t len, void *arg)
{
	struct cconn *cc = arg;
	struct client *cl = cc->cl;
	uint32_t seq = cc->echoed;
	struct slot *s = &cc->slots[seq % cl->window];
	const uint8_t *p = data;
	size_t i;

	if (seq >= cc->sent) {
		fail(cl, "echo for a message never sent");
		return;
	}
	if (len != size_of(cl, seq)) {
		fprintf(stderr, "echo_client: conn %u message %u: %zu bytes "
				"echoed, %zu sent\n",
			cc->idx, seq, len, size_of(cl, seq));
		fail(cl, "length mismatch");
		return;
	}
	for (i = 0; i < len; i++) {
		if (p[i] != pat(cc->idx, seq, i)) {
			fprintf(stderr, "echo_client: conn %u message %u: "
					"byte %zu differs\n",
				cc->idx, seq, i);
			fail(cl, "content mismatch");
			return;
		}
	}
	cl->rtt[cl->nrtt++] = now_s() - s->t_sent;
	cl->bytes += len;
	cc->echoed++;
	s->echo_done = 1;
	if (cc->echoed == cl->count) {
		evr_conn_close(conn, 0);
		return;
	}
	slot_check_free(cc, s);
}

static void on_connect(evr_conn *conn, int status, void *arg)
{
	struct cconn *cc = arg;

	if (status < 0) {
		fprintf(stderr, "echo_client: connect to %s:%d: %s\n",
			cc->cl->addr, cc->cl->port, evr_strerror(status));
		cc->closed = 1;
		cc->cl->closed++;
		fail(cc->cl, "connect failed");
		return;
	}
	cc->conn = conn;
	cc->up = 1;
	pump(cc);
}

static void on_close(evr_conn *conn, int status, void *arg)
{
	struct cconn *cc = arg;
	struct client *cl = cc->cl;

	(void)conn;
	cc->up = 0;
	cc->closed = 1;
	cl->closed++;
	if (status < 0 || cc->echoed != cl->count) {
		fprintf(stderr, "echo_client: conn %u closed (%s) after %u of "
				"%u echoes\n",
			cc->idx, evr_err_name(status), cc->echoed, cl->count);
		cl->errors++;
	}
	if (cl->closed == cl->nconns) {
		cl->t_end = now_s();
		ev_break(cl->loop, EVBREAK_ALL);
	}
}

static void on_deadline(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct client *cl = w->data;

	(void)loop;
	(void)revents;
	fail(cl, "timed out");
}

static int parse_size(const char *s, size_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return -1;
	if (*end == 'k' || *end == 'K')
		v <<= 10, end++;
	else if (*end == 'm' || *end == 'M')
		v <<= 20, end++;
	if (*end)
		return -1;
	*out = (size_t)v;
	return 0;
}

static int parse_sizes(struct client *cl, char *list)
{
	char *tok, *save = NULL;

	for (tok = strtok_r(list, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (cl->nsizes == MAX_SIZES ||
		    parse_size(tok, &cl->sizes[cl->nsizes]) < 0)
			return -1;
		if (cl->sizes[cl->nsizes] > cl->max_size)
			cl->max_size = cl->sizes[cl->nsizes];
		cl->nsizes++;
	}
	return cl->nsizes ? 0 : -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: echo_client -a ADDR [-p PORT] [-s SIZES] [-n COUNT] "
		"[-w WINDOW] [-c CONNS] [-m MODE] [-t SECONDS]\n"
		"  -a ADDR     server address (IPv4 or IPv6)\n"
		"  -p PORT     server port (default 7471)\n"
		"  -s SIZES    message sizes, comma separated, k/M suffixes "
		"(default 64)\n"
		"  -n COUNT    messages per connection (default 1000)\n"
		"  -w WINDOW   messages in flight per connection (default 16)\n"
		"  -c CONNS    connections, connected all at once (default 1,\n"
		"              at most 10000)\n"
		"  -m MODE     event | poll | adaptive (default adaptive)\n"
		"  -t SECONDS  give up after this long (default 120)\n");
	exit(2);
}

int main(int argc, char **argv)
{
	struct client cl = {0};
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	char *sizes = NULL;
	double tmo = 120, secs, med = 0, p99 = 0;
	int opt, rc, mode = EVR_MODE_ADAPTIVE;
	unsigned i, j;

	cl.port = 7471;
	cl.count = 1000;
	cl.window = 16;
	cl.nconns = 1;
	while ((opt = getopt(argc, argv, "a:p:s:n:w:c:m:t:h")) != -1) {
		switch (opt) {
		case 'a':
			cl.addr = optarg;
			break;
		case 'p':
			cl.port = atoi(optarg);
			break;
		case 's':
			sizes = optarg;
			break;
		case 'n':
			cl.count = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'w':
			cl.window = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'c':
			cl.nconns = (unsigned)strtoul(optarg, NULL, 10);
			break;
		case 'm':
			if (!strcmp(optarg, "event"))
				mode = EVR_MODE_EVENT;
			else if (!strcmp(optarg, "poll"))
				mode = EVR_MODE_POLL;
			else if (!strcmp(optarg, "adaptive"))
				mode = EVR_MODE_ADAPTIVE;
			else
				usage();
			break;
		case 't':
			tmo = atof(optarg);
			break;
		default:
			usage();
		}
	}
	if (!cl.addr || optind != argc || cl.port <= 0 || cl.port > 65535 ||
	    !cl.count || !cl.window || !cl.nconns || cl.nconns > 10000 ||
	    tmo <= 0)
		usage();
	if (parse_sizes(&cl, sizes ? sizes : (char[]){"64"}) < 0)
		usage();

	cl.loop = EV_DEFAULT;
	evr_ctx_opts_init(&o);
	o.mode = (enum evr_mode)mode;
	rc = evr_ctx_create(&cl.ctx, cl.loop, &o);
	if (rc < 0) {
		fprintf(stderr, "echo_client: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	cl.conns = calloc(cl.nconns, sizeof(*cl.conns));
	cl.rtt = calloc((size_t)cl.count * cl.nconns, sizeof(*cl.rtt));
	if (!cl.conns || !cl.rtt)
		return 1;
	cl.t_start = now_s();
	for (i = 0; i < cl.nconns; i++) {
		struct cconn *cc = &cl.conns[i];

		cc->cl = &cl;
		cc->idx = i;
		cc->slots = calloc(cl.window, sizeof(*cc->slots));
		if (!cc->slots)
			return 1;
		for (j = 0; j < cl.window; j++) {
			cc->slots[j].buf = malloc(cl.max_size ? cl.max_size : 1);
			if (!cc->slots[j].buf)
				return 1;
		}
		evr_conn_opts_init(&co);
		co.on_connect = on_connect;
		co.on_recv = on_recv;
		co.on_close = on_close;
		co.arg = cc;
		rc = evr_connect(cl.ctx, cl.addr, (uint16_t)cl.port, &co, NULL);
		if (rc < 0) {
			fprintf(stderr, "echo_client: evr_connect %s:%d: %s\n",
				cl.addr, cl.port, evr_strerror(rc));
			return 1;
		}
	}
	ev_timer_init(&cl.deadline, on_deadline, tmo, 0.);
	cl.deadline.data = &cl;
	ev_timer_start(cl.loop, &cl.deadline);
	ev_run(cl.loop, 0);
	if (!cl.t_end)
		cl.t_end = now_s();

	secs = cl.t_end - cl.t_start;
	if (cl.nrtt) {
		qsort(cl.rtt, cl.nrtt, sizeof(double), cmp_double);
		med = cl.rtt[cl.nrtt / 2];
		p99 = cl.rtt[(cl.nrtt * 99) / 100 < cl.nrtt
				     ? (cl.nrtt * 99) / 100
				     : cl.nrtt - 1];
	}
	printf("echo_client: %zu messages, %llu bytes echoed and verified on "
	       "%u connection(s) in %.3f s\n",
	       cl.nrtt, (unsigned long long)cl.bytes, cl.nconns, secs);
	printf("echo_client: round trip median %.1f us, p99 %.1f us; "
	       "%.0f msg/s, %.2f MB/s; errors %d\n",
	       med * 1e6, p99 * 1e6, secs > 0 ? (double)cl.nrtt / secs : 0,
	       secs > 0 ? (double)cl.bytes / secs / 1e6 : 0, cl.errors);
	evr_ctx_destroy(cl.ctx);
	for (i = 0; i < cl.nconns; i++) {
		for (j = 0; j < cl.window; j++)
			free(cl.conns[i].slots[j].buf);
		free(cl.conns[i].slots);
	}
	free(cl.conns);
	free(cl.rtt);
	return cl.errors || cl.nrtt != (size_t)cl.count * cl.nconns ? 1 : 0;
}
