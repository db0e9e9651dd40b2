/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * mt_echo_server: one listener, connections spread over worker threads.
 *
 *   mt_echo_server [-a ADDR] [-p PORT] [-T THREADS] [-m event|poll|adaptive]
 *                  [-n CONNS] [-v]
 *
 * The main thread listens on its own ctx; each worker thread runs a ctx on
 * a libev loop of its own.  Each connection is placed, as it is accepted,
 * on the worker with the fewest connections (evr_ctx_least_loaded(),
 * evr_accept_on()), where it
 * is echoed as by echo_server; echo_client serves as the client unchanged.
 * Runs until SIGINT/SIGTERM, or until CONNS connections have closed (-n).
 */
#include <errno.h>
#include <ev.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "echo_common.h"

#define MAX_THREADS 64

struct worker;

struct app {
	struct ev_loop *loop; /* the main thread's */
	evr_ctx *ctx;	      /* the listener's */
	evr_listener *listener;
	struct worker *w;
	evr_ctx *ctxs[MAX_THREADS]; /* the workers' */
	int nw, max_conns, mode, verbose;
	const char *addr;
	ev_signal sigint, sigterm;
	/* atomics: workers touch them */
	int closed, errors;
	pthread_mutex_t mu; /* start-up: each worker publishes its ctx */
	pthread_cond_t cv;
};

struct worker {
	struct app *app;
	pthread_t t;
	struct ev_loop *loop;
	evr_ctx *ctx;	       /* NULL until made; the worker's to use */
	int err;	       /* its evr_ctx_create() failed */
	struct echo_server srv; /* its thread's only */
};

static void usage(void)
{
	fprintf(stderr,
		"usage: mt_echo_server [-a ADDR] [-p PORT] [-T THREADS] "
		"[-m MODE] [-n CONNS] [-v]\n"
		"  -a ADDR     local address to listen on (default: any)\n"
		"  -p PORT     port (default 7471)\n"
		"  -T THREADS  worker threads (default 2, at most %d)\n"
		"  -m MODE     event | poll | adaptive (default adaptive)\n"
		"  -n CONNS    exit after CONNS connections have closed\n"
		"  -v          log each connection\n",
		MAX_THREADS);
	exit(2);
}

static void stop_loop(evr_ctx *ctx, void *arg)
{
	(void)ctx;
	ev_break(arg, EVBREAK_ALL);
}

/* A worker's connection closed (on the worker's thread). */
static void on_closed(struct echo_server *srv)
{
	struct worker *w = (struct worker *)((char *)srv -
					     offsetof(struct worker, srv));
	struct app *app = w->app;
	int closed;

	closed = __atomic_add_fetch(&app->closed, 1, __ATOMIC_ACQ_REL);
	if (app->max_conns && closed == app->max_conns)
		evr_ctx_call(app->ctx, stop_loop, app->loop);
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct evr_ctx_opts o;
	evr_ctx *ctx = NULL;
	int rc;

	w->loop = ev_loop_new(EVFLAG_AUTO);
	evr_ctx_opts_init(&o);
	o.local_addr = w->app->addr;
	o.mode = (enum evr_mode)w->app->mode;
	rc = w->loop ? evr_ctx_create(&ctx, w->loop, &o) : -ENOMEM;
	w->srv.ctx = ctx;
	w->srv.verbose = w->app->verbose;
	w->srv.on_closed = on_closed;
	pthread_mutex_lock(&w->app->mu);
	w->ctx = ctx;
	w->err = rc;
	pthread_cond_broadcast(&w->app->cv);
	pthread_mutex_unlock(&w->app->mu);
	if (rc < 0)
		return NULL;
	ev_run(w->loop, 0); /* until the main thread calls stop_loop */
	evr_ctx_destroy(ctx);
	ev_loop_destroy(w->loop);
	return NULL;
}

/* On the main thread: place the request on the least loaded worker. */
static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct app *app = arg;
	evr_ctx *to = evr_ctx_least_loaded(app->ctxs, (size_t)app->nw);
	struct worker *w = &app->w[0];
	struct evr_conn_opts o;
	int i, rc;

	(void)l;
	(void)ud;
	(void)ulen;
	for (i = 1; i < app->nw; i++)
		if (app->w[i].ctx == to)
			w = &app->w[i];
	if (echo_conn_opts(&w->srv, &o) < 0) {
		evr_reject(req, "out of memory", 13);
		return;
	}
	rc = evr_accept_on(req, to, &o);
	if (rc < 0) { /* not answered: the listener refuses it */
		fprintf(stderr, "mt_echo_server: evr_accept_on: %s\n",
			evr_strerror(rc));
		__atomic_add_fetch(&app->errors, 1, __ATOMIC_RELAXED);
		echo_conn_opts_free(&o);
	}
}

static void on_signal(struct ev_loop *loop, ev_signal *w, int revents)
{
	(void)w;
	(void)revents;
	ev_break(loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
	static struct worker workers[MAX_THREADS];
	struct app app = {0};
	struct evr_ctx_opts o;
	uint64_t msgs = 0, bytes = 0, conns = 0;
	int port = 7471, opt, rc, i, started = 0;

	app.nw = 2;
	app.mode = EVR_MODE_ADAPTIVE;
	app.w = workers;
	while ((opt = getopt(argc, argv, "a:p:T:m:n:vh")) != -1) {
		switch (opt) {
		case 'a':
			app.addr = optarg;
			break;
		case 'p':
			port = atoi(optarg);
			if (port <= 0 || port > 65535)
				usage();
			break;
		case 'T':
			app.nw = atoi(optarg);
			if (app.nw < 1 || app.nw > MAX_THREADS)
				usage();
			break;
		case 'm':
			app.mode = echo_parse_mode(optarg);
			if (app.mode < 0)
				usage();
			break;
		case 'n':
			app.max_conns = atoi(optarg);
			break;
		case 'v':
			app.verbose = 1;
			break;
		default:
			usage();
		}
	}
	if (optind != argc)
		usage();
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&app.mu, NULL);
	pthread_cond_init(&app.cv, NULL);
	app.loop = EV_DEFAULT;
	evr_ctx_opts_init(&o);
	o.local_addr = app.addr;
	o.mode = (enum evr_mode)app.mode;
	rc = evr_ctx_create(&app.ctx, app.loop, &o);
	if (rc < 0) {
		fprintf(stderr, "mt_echo_server: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	for (i = 0; i < app.nw; i++) {
		workers[i].app = &app;
		workers[i].err = 1; /* not yet made */
		if (pthread_create(&workers[i].t, NULL, worker_main,
				   &workers[i]))
			break;
		started++;
	}
	/* every worker's ctx made before the first request is placed */
	pthread_mutex_lock(&app.mu);
	for (i = 0; i < started; i++)
		while (workers[i].err == 1)
			pthread_cond_wait(&app.cv, &app.mu);
	pthread_mutex_unlock(&app.mu);
	rc = started == app.nw ? 0 : -EAGAIN;
	for (i = 0; i < started; i++)
		app.ctxs[i] = workers[i].ctx;
	for (i = 0; i < started && rc == 0; i++)
		if (workers[i].err < 0) {
			rc = workers[i].err;
			fprintf(stderr, "mt_echo_server: worker %d: "
					"evr_ctx_create: %s\n",
				i, evr_strerror(rc));
		}
	if (rc == 0) {
		rc = evr_listen(app.ctx, app.addr, (uint16_t)port, 0,
				on_accept, &app, &app.listener);
		if (rc < 0)
			fprintf(stderr, "mt_echo_server: listen on %s:%d: %s\n",
				app.addr ? app.addr : "*", port,
				evr_strerror(rc));
	}
	if (rc == 0) {
		printf("mt_echo_server: listening on %s:%d (device %s, mode "
		       "%s, %d threads)\n",
		       app.addr ? app.addr : "*", port, evr_ctx_device(app.ctx),
		       evr_mode_str((enum evr_mode)app.mode), app.nw);
		fflush(stdout); /* scripts wait for this line */
		ev_signal_init(&app.sigint, on_signal, SIGINT);
		ev_signal_init(&app.sigterm, on_signal, SIGTERM);
		ev_signal_start(app.loop, &app.sigint);
		ev_signal_start(app.loop, &app.sigterm);
		ev_run(app.loop, 0);
		evr_listener_close(app.listener);
	}
	for (i = 0; i < started; i++) {
		if (workers[i].ctx)
			evr_ctx_call(workers[i].ctx, stop_loop,
				     workers[i].loop);
		pthread_join(workers[i].t, NULL);
		/* joined: its counters are ours to read */
		msgs += workers[i].srv.msgs;
		bytes += workers[i].srv.bytes;
		conns += workers[i].srv.conns_closed;
		app.errors += (int)workers[i].srv.errors;
		if (rc == 0)
			printf("mt_echo_server: thread %d: %llu connections, "
			       "%llu messages\n",
			       i, (unsigned long long)workers[i].srv.conns_closed,
			       (unsigned long long)workers[i].srv.msgs);
	}
	evr_ctx_destroy(app.ctx);
	if (rc < 0)
		return 1;
	printf("mt_echo_server: %llu connections, %llu messages, %llu bytes, "
	       "%d errors\n",
	       (unsigned long long)conns, (unsigned long long)msgs,
	       (unsigned long long)bytes, app.errors);
	return app.errors ? 1 : 0;
}
