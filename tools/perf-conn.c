/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf-conn.c: the connection-rate test of the evrdma-perf client
 * (-t conn).
 *
 * It connects, closes each connection as soon as it is up and starts the
 * next, CONNS at a time, until ITERS connections have come and gone; the
 * time from evr_connect to on_connect is the latency sample.  One untimed
 * connection first binds the ctx to its device and warms both sides up;
 * the clock starts when it has closed.  The test request in the connect
 * user bytes asks the server for no traffic (K_CONN).
 *
 * --burst: CONNS connects are issued at once and each is held open; the
 * clock stops when the last is up (the burst's setup time), then all
 * close.
 */
#include "perf.h"

static void cc_start(struct pconn *pc);
static void cc_launch(struct perf *p);

/* The burst is up: close every connection of it. */
static void burst_close(struct perf *p)
{
	unsigned i;
	int rc;

	for (i = 0; i < p->o.conns; i++) {
		struct pconn *pc = &p->pc[i];

		if (pc->ph != PH_READY || !pc->conn)
			continue;
		pc->ph = PH_CLOSING;
		rc = evr_conn_close(pc->conn, 0);
		if (rc < 0) {
			client_fail(p, "evr_conn_close: %s",
				    evr_strerror(rc));
			return;
		}
	}
}

static void cc_on_connect(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;
	int rc;

	p->events++;
	if (status < 0) {
		client_connect_failed(pc, status);
		return;
	}
	if (lat_add(p, (double)(now_ns() - pc->t_conn) / 1e3) < 0) {
		client_fail(p, "out of memory");
		return;
	}
	if (p->o.burst && !p->conn_warm) {
		/* held open until the whole burst is up */
		pc->ph = PH_READY;
		if (++p->nready < p->n)
			return;
		take_end(p);
		burst_close(p);
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
		p->nready = 0;
		p->nlat = 0;
		cc_launch(p);
		return;
	}
	if (p->started < p->n) {
		cc_start(pc);
		return;
	}
	if (p->finished == p->n) {
		if (!p->o.burst) /* a burst's clock stopped when all were up */
			take_end(p);
		ev_break(p->loop, EVBREAK_ALL);
	}
}

static void cc_start(struct pconn *pc)
{
	pc->ph = PH_CONNECTING;
	pc->t_conn = now_ns();
	pc->p->started++;
	if (client_connect(pc, K_CONN, cc_on_connect, cc_on_close) < 0)
		pc->ph = PH_CLOSED;
}

/* Start the timed connections, CONNS at a time. */
static void cc_launch(struct perf *p)
{
	unsigned i;

	run_start(p);
	for (i = 0; i < p->o.conns && p->started < p->n && !p->failed; i++)
		cc_start(&p->pc[i]);
}

/* Begin a conn test: the untimed connection first. */
void cc_begin(struct perf *p)
{
	unsigned i;

	p->n = p->o.iters;
	for (i = 0; i < p->o.conns; i++) {
		p->pc[i].p = p;
		p->pc[i].idx = i;
	}
	/* One untimed connection first, which binds the ctx to the
	 * device (on the first run) and warms both sides up. */
	p->conn_warm = true;
	cc_start(&p->pc[0]);
}
