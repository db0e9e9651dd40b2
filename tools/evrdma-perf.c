/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * evrdma-perf: latency, bandwidth, message-rate, call-rate and
 * connection-rate measurements of evrdma, in the manner of perftest.
 *
 *   evrdma-perf -s [-a ADDR] [-p PORT] [-v]
 *   evrdma-perf -c ADDR [-p PORT] [-t lat|bw|rate|conn|rpc] [-S SIZES]
 *               [-n ITERS | -D SECONDS] [-w WINDOW] [-C CONNS]
 *               [-m event|poll|adaptive] [--load idle|light|sat]
 *               [--rate R] [--ramp W] [--burst] [--json | --csv]
 *               [--rpc-cancel PCT] [--rpc-expire PCT]
 *
 * Design.  One program, two roles, one thread, one libev loop.  Each client
 * connection says in its connect user bytes what the server is to do with
 * it (echo every message, swallow them, or just connect and close) and in
 * which completion mode the server should run, so one server runs any
 * sequence of tests; while it has no connection it sleeps in EVENT mode.
 * Every connection also serves calls (evr_call), answered with as many
 * bytes as the request: the rpc test.
 * perf.h lists the files and what each holds.
 *
 * This file holds the command line: options, their checks and defaults,
 * the usage text, and main, which hands the options to the server
 * (perf-server.c) or the client (perf-client.c).
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

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
/* Command line                                                             */

static void usage(void)
{
	fprintf(stderr,
"usage: evrdma-perf -s [-a ADDR] [-p PORT] [-T THREADS] [-v] [CTX-OPTIONS]\n"
"       evrdma-perf -c ADDR [-p PORT] [-t lat|bw|rate|conn|rpc] [-S SIZES]\n"
"                   [-T THREADS]\n"
"                   [-n ITERS | -D SECONDS] [-w WINDOW] [-C CONNS]\n"
"                   [-m event|poll|adaptive] [--load idle|light|sat]\n"
"                   [--rate R] [--ramp W] [--burst] [--mt]\n"
"                   [--rpc-cancel PCT] [--rpc-expire PCT]\n"
"                   [--json | --csv] [CTX-OPTIONS]\n"
"  -s            serve (any number of tests, until SIGINT/SIGTERM)\n"
"  -a ADDR       server: local address to listen on (default any)\n"
"  -T THREADS    server: serve the connections on THREADS worker threads,\n"
"                each with its own ctx, placing each on the least loaded\n"
"                (default: on the listener's thread); 1 to %d.  Client\n"
"                (lat, bw, rate, rpc): THREADS threads, each with its ctx\n"
"                and its share of the CONNS connections, measuring\n"
"                together; rates add up, latencies are merged\n"
"  -c ADDR       client: the server's address (IPv4 or IPv6)\n"
"  -p PORT       port (default %d)\n"
"  -t TEST       lat: ping-pong; bw: one-way stream; rate: small-message\n"
"                rate (one-way); conn: connect/close rate; rpc: calls\n"
"                (evr_call), WINDOW in flight, each answered at once with\n"
"                as many bytes (default lat)\n"
"  -S SIZES      message sizes, comma separated: 64,4k,1M; a range A:B\n"
"                doubles from A to B (8:1M); 1 byte to 64M (default 64;\n"
"                bw: 64k)\n"
"  -n ITERS      messages (rpc: calls) per connection (conn: connections\n"
"                in all)\n"
"  -D SECONDS    run each size this long instead of -n\n"
"  -w WINDOW     messages in flight per connection (bw, rate, rpc,\n"
"                --load sat; default 16, rate 64)\n"
"  -C CONNS      connections in parallel (default 1, at most 10000)\n"
"  --burst       with -t conn: CONNS connects at once, each held open\n"
"                until the last is up; the time is the burst's setup,\n"
"                msg/s its connections per second\n"
"  -m MODE       completion mode of both sides (default adaptive)\n"
"  --load LOAD   ping-pong under an offered load (with -t lat):\n"
"                idle: connections open, no traffic (default -D 10);\n"
"                light: %d ping-pongs/s per connection, the\n"
"                connections taking turns (default -D 10);\n"
"                sat: as fast as the window allows (default -D 5)\n"
"  --rate R      with --load light: R pings/s per connection instead;\n"
"                a connection whose last ping is not back skips its\n"
"                turn (CSV and JSON count these as skipped)\n"
"  --ramp W      lat, bw, rate, rpc: open the CONNS connections W connects\n"
"                at a time instead of all at once\n"
"  --mt          bw, rate: the sends come from another thread\n"
"                (evr_send_mt: copied, sent from the ctx's thread)\n"
"  --rpc-cancel PCT  rpc: PCT%% of the calls are cancelled right after\n"
"                they are made (they must end -ECANCELED)\n"
"  --rpc-expire PCT  rpc: PCT%% of the calls get a deadline of %d ms and\n"
"                ask the server to answer %d ms late (they must end\n"
"                -ETIMEDOUT, or answered if the deadline ran that late);\n"
"                the latencies are of the other calls answered\n"
"  --send-cb     lat: each message sent with a callback, as a\n"
"                sender that reuses its buffer would (the client's\n"
"                buffer is registered: its messages then go without a\n"
"                copy); the default sends without one\n"
"  --json, --csv machine-readable output instead of the table\n"
"CTX-OPTIONS set evr_ctx_opts fields of this side's ctx (default: the\n"
"library's): --sq-depth N, --srq-buffers N, --window-idle MS,\n"
"--eager-size BYTES (64 to 1M: the receive buffers are this plus 8,\n"
"rounded up to 64)\n"
"Latencies are half round trips (us; rpc: whole calls); cpu_us/m is the\n"
"client's CPU time per message (rpc: per call), cpu%% and srv%% the\n"
"client's and server's CPU time per wall second (getrusage), switch the\n"
"adaptive mode switches.\n",
		MAX_THREADS, PERF_PORT, LIGHT_RATE, RPC_EXPIRE_MS,
		RPC_DELAY_MS);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option lopts[] = {
		{"json", no_argument, NULL, 'J'},
		{"csv", no_argument, NULL, 'V'},
		{"load", required_argument, NULL, 'L'},
		{"burst", no_argument, NULL, 'B'},
		{"rate", required_argument, NULL, 'R'},
		{"ramp", required_argument, NULL, 'P'},
		{"sq-depth", required_argument, NULL, 'Q'},
		{"srq-buffers", required_argument, NULL, 'F'},
		{"window-idle", required_argument, NULL, 'I'},
		{"eager-size", required_argument, NULL, 'E'},
		{"mt", no_argument, NULL, 'M'},
		{"send-cb", no_argument, NULL, 'G'},
		{"rpc-cancel", required_argument, NULL, 'K'},
		{"rpc-expire", required_argument, NULL, 'X'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct opts o = {0};
	const char *listen_addr = NULL;
	char *sizes = NULL;
	int server = 0, verbose = 0, have_w = 0, have_n = 0, threads = 0, opt;
	bool have_rpc = false;
	unsigned long long v;
	size_t sz;
	char *end;

	o.port = PERF_PORT;
	o.test = T_LAT;
	o.mode = EVR_MODE_ADAPTIVE;
	o.conns = 1;
	while ((opt = getopt_long(argc, argv, "sa:c:p:t:S:n:D:w:C:m:T:vh", lopts,
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
			for (v = 0; v < T_COUNT && strcmp(optarg, test_str[v]);
			     v++)
				;
			if (v == T_COUNT)
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
			if (parse_ull(optarg, 1, 10000, &v) < 0)
				usage();
			o.conns = (unsigned)v;
			break;
		case 'B':
			o.burst = true;
			break;
		case 'R':
			errno = 0;
			o.rate = strtod(optarg, &end);
			if (errno || *end || !(o.rate > 0) || o.rate > 1e6)
				usage();
			break;
		case 'P':
			if (parse_ull(optarg, 1, 10000, &v) < 0)
				usage();
			o.ramp = (unsigned)v;
			break;
		case 'Q':
			if (parse_ull(optarg, 1, 65536, &v) < 0)
				usage();
			perf_tune.sq_depth = (unsigned)v;
			break;
		case 'F':
			if (parse_ull(optarg, 1, 1u << 24, &v) < 0)
				usage();
			perf_tune.srq_buffers = (unsigned)v;
			break;
		case 'I':
			if (parse_ull(optarg, 1, UINT_MAX, &v) < 0)
				usage();
			perf_tune.window_idle_ms = (unsigned)v;
			break;
		case 'E':
			if (parse_size(optarg, &sz) < 0 || sz < 64 ||
			    sz > (1u << 20))
				usage();
			perf_tune.eager_size = sz;
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
		case 'M':
			o.mt = true;
			break;
		case 'G':
			o.send_cb = true;
			break;
		case 'K':
		case 'X':
			if (parse_ull(optarg, 0, 100, &v) < 0)
				usage();
			*(opt == 'K' ? &o.rpc_cancel : &o.rpc_expire) =
				(unsigned)v;
			have_rpc = true;
			break;
		case 'T':
			if (parse_ull(optarg, 1, MAX_THREADS, &v) < 0)
				usage();
			threads = (int)v;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || server == !!o.addr)
		usage();
	signal(SIGPIPE, SIG_IGN);
	if (server)
		return run_server(listen_addr, o.port, verbose, threads);
	/* client threads: the message tests, a connection each at least */
	if (threads && (o.test == T_CONN || (unsigned)threads > o.conns))
		usage();
	o.threads = (unsigned)threads;

	if (listen_addr || (have_n && o.secs > 0) ||
	    (o.load && o.test != T_LAT))
		usage();
	/* the window is for the windowed tests only */
	if (have_w && o.test != T_BW && o.test != T_RATE && o.test != T_RPC &&
	    o.load != L_SAT)
		usage();
	if (have_rpc && (o.test != T_RPC || o.rpc_cancel + o.rpc_expire > 100))
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
	if (o.burst && (o.test != T_CONN || have_n))
		usage();
	if (o.mt && o.test != T_BW && o.test != T_RATE)
		usage();
	if (o.send_cb && o.test != T_LAT)
		usage();
	if ((o.rate > 0 && o.load != L_LIGHT) || (o.ramp && o.test == T_CONN))
		usage();
	if (!(o.rate > 0))
		o.rate = LIGHT_RATE;
	if (o.burst)
		o.iters = o.conns;
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
