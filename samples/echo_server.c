/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * echo_server: an evrdma echo server on a libev loop.
 *
 *   echo_server [-a ADDR] [-p PORT] [-m event|poll|adaptive] [-n CONNS]
 *               [-S SECS] [-v]
 *
 * Echoes every message on every connection until SIGINT/SIGTERM, or until
 * CONNS connections have closed (-n).  The RDMA device is the one that has
 * ADDR (default: the first device; set EVR_DEVICE to choose).
 */
#include <ev.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "echo_common.h"

struct app {
	struct ev_loop *loop;
	evr_ctx *ctx;
	struct echo_server srv;
	ev_signal sigint, sigterm;
	ev_timer stats_w; /* -S: the stats as JSON, every SECS */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: echo_server [-a ADDR] [-p PORT] [-m MODE] [-n CONNS] "
		"[-S SECS] [-v]\n"
		"  -a ADDR   local address to listen on (default: any)\n"
		"  -p PORT   port (default 7471)\n"
		"  -m MODE   event | poll | adaptive (default adaptive)\n"
		"  -n CONNS  exit after CONNS connections have closed\n"
		"  -S SECS   print the stats as a line of JSON every SECS "
		"seconds, and at exit\n"
		"  -v        log each connection\n");
	exit(2);
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

/* The ctx's stats as one line of JSON on standard output. */
static void print_stats(evr_ctx *ctx)
{
	struct evr_stats st;
	char line[4096];
	int n;

	evr_ctx_stats(ctx, &st);
	n = evr_stats_json(&st, line, sizeof(line));
	if (n < 0 || (size_t)n >= sizeof(line))
		return; /* cannot be: the line is some 1.3 KB */
	printf("%s\n", line);
	fflush(stdout);
}

static void on_stats(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct app *app = (struct app *)((char *)w -
					 offsetof(struct app, stats_w));

	(void)loop;
	(void)revents;
	print_stats(app->ctx);
}

static void on_done(struct echo_server *srv)
{
	struct app *app = (struct app *)((char *)srv - offsetof(struct app, srv));

	ev_break(app->loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
	struct app app = {0};
	struct evr_ctx_opts o;
	const char *addr = NULL;
	int port = 7471, mode = EVR_MODE_ADAPTIVE, opt, rc;
	double stats_every = 0;
	char *end;
	evr_ctx *ctx;

	while ((opt = getopt(argc, argv, "a:p:m:n:S:vh")) != -1) {
		switch (opt) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			if (port <= 0 || port > 65535)
				usage();
			break;
		case 'm':
			mode = echo_parse_mode(optarg);
			if (mode < 0)
				usage();
			break;
		case 'n':
			app.srv.max_conns = atoi(optarg);
			break;
		case 'S':
			stats_every = strtod(optarg, &end);
			if (*end || !(stats_every > 0 && stats_every <= 86400))
				usage();
			break;
		case 'v':
			app.srv.verbose = 1;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	app.loop = EV_DEFAULT;
	evr_ctx_opts_init(&o);
	o.local_addr = addr;
	o.mode = (enum evr_mode)mode;
	rc = evr_ctx_create(&ctx, app.loop, &o);
	app.ctx = ctx;
	if (rc < 0) {
		fprintf(stderr, "echo_server: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	app.srv.on_done = on_done;
	rc = echo_server_start(&app.srv, ctx, addr, (uint16_t)port);
	if (rc < 0) {
		fprintf(stderr, "echo_server: listen on %s:%d: %s\n",
			addr ? addr : "*", port, evr_strerror(rc));
		evr_ctx_destroy(ctx);
		return 1;
	}
	printf("echo_server: listening on %s:%d (device %s, mode %s)\n",
	       addr ? addr : "*", port, evr_ctx_device(ctx),
	       evr_mode_str((enum evr_mode)mode));
	fflush(stdout); /* scripts wait for this line */
	ev_signal_init(&app.sigint, on_signal, SIGINT);
	ev_signal_init(&app.sigterm, on_signal, SIGTERM);
	ev_signal_start(app.loop, &app.sigint);
	ev_signal_start(app.loop, &app.sigterm);
	if (stats_every > 0) {
		ev_timer_init(&app.stats_w, on_stats, stats_every, stats_every);
		ev_timer_start(app.loop, &app.stats_w);
	}
	ev_run(app.loop, 0);
	if (stats_every > 0)
		print_stats(ctx); /* the last word, after the conns closed */

	printf("echo_server: %llu connections, %llu messages, %llu bytes, "
	       "%llu errors\n",
	       (unsigned long long)app.srv.conns_closed,
	       (unsigned long long)app.srv.msgs,
	       (unsigned long long)app.srv.bytes,
	       (unsigned long long)app.srv.errors);
	echo_server_stop(&app.srv);
	evr_ctx_destroy(ctx);
	return app.srv.errors ? 1 : 0;
}
