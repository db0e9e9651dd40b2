/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf-client.c: the client role of evrdma-perf (-c ADDR) -- its setup,
 * one measurement per message size from the first connect to the last
 * close, and the progress timer every test shares.
 *
 * One evr_ctx, one libev loop, CONNS connections per measurement.  The
 * tests themselves are in perf-msg.c (lat, bw, rate, rpc) and perf-conn.c
 * (conn); this file starts them, starts the clock when every connection
 * is ready (run_start) and stops it when the last one has finished its
 * data (take_end): the last echo, the final report of a one-way test, or
 * the last connection of the conn test.  A progress timer prints how far
 * a long run has come and gives up when nothing has happened for STALL_S
 * seconds.  The send buffer, as large as the largest message size, is
 * allocated here once for all sizes.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "perf.h"

static uint64_t clamp_u64(uint64_t v, uint64_t lo, uint64_t hi)
{
	return v < lo ? lo : v > hi ? hi : v;
}

void client_fail(struct perf *p, const char *fmt, ...)
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

/* Start connecting pc to the server; the connect user bytes ask it for a
 * test of this kind, in the options' completion mode. */
int client_connect(struct pconn *pc, enum kind kind,
		   evr_connect_cb on_connect, evr_close_cb on_close)
{
	struct perf *p = pc->p;
	struct evr_conn_opts co;
	uint8_t desc[DESC_LEN];
	int rc;

	memcpy(desc, desc_magic, 4);
	desc[4] = (uint8_t)kind;
	desc[5] = (uint8_t)p->o.mode;
	evr_conn_opts_init(&co);
	co.on_connect = on_connect;
	co.on_recv = on_recv;
	co.on_close = on_close;
	co.arg = pc;
	co.user_data = desc;
	co.user_len = sizeof(desc);
	if (p->o.test == T_RPC)
		co.max_calls = p->window; /* a window above 256 is no error */
	rc = evr_connect(p->ctx, p->o.addr, (uint16_t)p->o.port, &co,
			 &pc->conn);
	if (rc < 0)
		client_fail(p, "evr_connect %s:%d: %s", p->o.addr, p->o.port,
			    evr_strerror(rc));
	return rc;
}

/* pc's connect ended with status < 0: the conn is gone; the run fails
 * (reported once). */
void client_connect_failed(struct pconn *pc, int status)
{
	struct perf *p = pc->p;

	pc->conn = NULL;
	pc->ph = PH_CLOSED;
	if (!p->failed)
		client_fail(p, "connect to %s:%d: %s", p->o.addr, p->o.port,
			    evr_strerror(status));
}

/* The end of the measured interval. */
void take_end(struct perf *p)
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
void data_done(struct pconn *pc)
{
	struct perf *p = pc->p;

	if (++p->ndata == p->o.conns)
		take_end(p);
}

void close_all(struct perf *p)
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

/* -T: a barrier the client threads meet at before each measurement, so
 * that their intervals coincide; bounded, so that a thread that failed
 * before it does not hold the others forever. */
struct tstart {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	unsigned n, waiting, gen;
};

/* Every thread expected is waiting: let them go.  Under t->mu. */
static void tstart_release(struct tstart *t)
{
	t->waiting = 0;
	t->gen++;
	pthread_cond_broadcast(&t->cv);
}

static int tstart_wait(struct tstart *t)
{
	struct timespec until;
	unsigned gen;
	int rc = 0;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 120;
	pthread_mutex_lock(&t->mu);
	gen = t->gen;
	if (++t->waiting == t->n)
		tstart_release(t);
	while (gen == t->gen && rc == 0)
		rc = pthread_cond_timedwait(&t->cv, &t->mu, &until);
	rc = gen == t->gen ? -ETIMEDOUT : 0;
	if (rc)
		t->waiting--;
	pthread_mutex_unlock(&t->mu);
	return rc;
}

/* Every connection is ready: start the clock and the traffic. */
void run_start(struct perf *p)
{
	unsigned i;
	int rc;

	if (p->tstart && tstart_wait(p->tstart) < 0) {
		client_fail(p, "the client threads did not start together");
		return;
	}
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
		/* Every connection pings RATE times a second, the pings of
		 * all spread evenly over the period (on_tick); a timer faster
		 * than 1 ms would cost more than the pings it paces. */
		double tick_s;

		p->slot_s = 1. / (p->o.rate * p->o.conns);
		tick_s = p->slot_s < 1e-3 ? 1e-3 : p->slot_s;
		p->slot = p->skipped = 0;
		/* Ticks land half a tick past the turns' boundaries: a tick
		 * a little early or late still takes the turns of its own. */
		p->tick0 = mono_s() - tick_s / 2;
		ev_timer_set(&p->tick_w, 0., tick_s);
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
		if (p->o.test == T_RPC)
			pump_rpc(&p->pc[i]);
		else if (p->kind == K_ECHO)
			pump_echo(&p->pc[i]);
		else
			pump_sink(&p->pc[i]);
	}
}

/* Run one measurement at one size; append its result. */
static int run_one(struct perf *p, size_t size)
{
	struct result *res;

	p->size = size;
	p->stop = false;
	p->nready = p->ndata = p->ndone = p->nclosed = 0;
	p->nlaunched = p->nanswered = 0;
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

	if (p->o.test == T_CONN)
		cc_begin(p);
	else
		msg_begin(p);
	if (!p->failed)
		ev_run(p->loop, 0);
	if (p->o.test != T_CONN)
		msg_end(p);
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

/* One client: its ctx on p->loop, every size in turn.  Rows are printed as
 * each size finishes unless p->keep (a thread of -T: run_client merges). */
static int client_run(struct perf *p)
{
	const struct opts *o = &p->o;
	struct evr_ctx_opts co;
	size_t max = 1;
	int i, rc, ret = 1;
	unsigned j;

	pthread_mutex_init(&p->mt_mu, NULL);
	pthread_cond_init(&p->mt_cv, NULL);
	switch (o->test) {
	case T_LAT:
		p->kind = K_ECHO;
		p->window = o->load == L_SAT ? o->window : 1;
		break;
	case T_BW:
	case T_RATE:
		p->kind = K_SINK;
		p->window = o->window;
		break;
	case T_CONN:
		p->kind = K_CONN;
		p->window = 1;
		break;
	case T_RPC: /* the server answers calls on any connection */
		p->kind = K_ECHO;
		p->window = o->window;
		break;
	}
	for (i = 0; i < o->nsizes; i++)
		if (o->sizes[i] > max)
			max = o->sizes[i];
	/* rpc: a second copy whose first byte asks for a late answer */
	p->buf_len = o->test == T_RPC ? 2 * max : max;
	p->buf = malloc(p->buf_len);
	p->pc = calloc(o->conns, sizeof(*p->pc));
	if (!p->buf || !p->pc) {
		fprintf(stderr, "evrdma-perf: out of memory\n");
		goto out_free;
	}
	memset(p->buf, 0xa5, p->buf_len);
	if (o->test == T_RPC) {
		p->dbuf = p->buf + max;
		p->dbuf[0] = RPC_DELAY_BYTE;
	}
	for (j = 0; j < o->conns; j++) {
		struct pconn *pc = &p->pc[j];

		pc->t_sent = calloc(p->window, sizeof(ev_tstamp));
		if (o->test == T_RPC) {
			pc->rs = calloc(p->window, sizeof(*pc->rs));
			pc->rfree = calloc(p->window, sizeof(*pc->rfree));
		}
		if (!pc->t_sent ||
		    (o->test == T_RPC && (!pc->rs || !pc->rfree))) {
			fprintf(stderr, "evrdma-perf: out of memory\n");
			goto out_free;
		}
	}
	evr_ctx_opts_init(&co);
	co.mode = (enum evr_mode)o->mode;
	perf_tune_apply(&co);
	rc = evr_ctx_create(&p->ctx, p->loop, &co);
	if (rc < 0) {
		fprintf(stderr, "evrdma-perf: evr_ctx_create: %s\n",
			evr_strerror(rc));
		goto out_free;
	}
	for (i = 0; i < o->nsizes; i++) {
		size_t s = o->sizes[i];

		/* iterations: the user's, or enough for a steady figure */
		if (o->secs > 0)
			p->n = 0;
		else if (o->iters)
			p->n = o->iters;
		else if (o->test == T_LAT || o->test == T_RPC)
			p->n = 10000;
		else if (o->test == T_RATE)
			p->n = 50000;
		else /* bw: 256 MiB worth */
			p->n = clamp_u64((256u << 20) / s, 100, 50000);
		/* echo and call tests warm up with a tenth of the run, or
		 * 100 */
		p->warm = 0;
		if ((o->test == T_LAT || o->test == T_RPC) &&
		    o->load != L_IDLE)
			p->warm = p->n ? clamp_u64(p->n / 10, 10, 1000) : 100;
		if (run_one(p, s) < 0)
			goto out_destroy;
		if (p->keep) {
			/* result_fill sorted them: a copy for the merge */
			p->keep[i] = malloc((p->nlat ? p->nlat : 1) *
					    sizeof(double));
			if (!p->keep[i]) {
				fprintf(stderr, "evrdma-perf: out of memory\n");
				goto out_destroy;
			}
			if (p->nlat)
				memcpy(p->keep[i], p->lat,
				       p->nlat * sizeof(double));
			p->nkeep[i] = p->nlat;
		} else {
			emit_row(p, p->nres - 1);
		}
	}
	if (o->fmt == F_JSON && !p->keep)
		emit_json(p);
	ret = 0;
out_destroy:
	if (p->mr) {
		rc = evr_mr_dereg(p->mr);
		if (rc < 0 && !p->failed) {
			fprintf(stderr, "evrdma-perf: evr_mr_dereg: %s\n",
				evr_strerror(rc));
			ret = 1;
		}
	}
	p->failed = 1; /* the aborts of evr_ctx_destroy are expected */
	evr_ctx_destroy(p->ctx);
out_free:
	if (p->pc) {
		for (j = 0; j < o->conns; j++) {
			free(p->pc[j].t_sent);
			free(p->pc[j].rs);
			free(p->pc[j].rfree);
		}
	}
	free(p->pc);
	free(p->buf);
	free(p->lat);
	pthread_cond_destroy(&p->mt_cv);
	pthread_mutex_destroy(&p->mt_mu);
	return ret;
}

static void *client_thread(void *arg)
{
	struct perf *p = arg;

	p->loop = ev_loop_new(EVFLAG_AUTO);
	if (!p->loop) {
		fprintf(stderr, "evrdma-perf: ev_loop_new failed\n");
		p->thread_rc = 1;
		return NULL;
	}
	p->thread_rc = client_run(p);
	ev_loop_destroy(p->loop);
	return NULL;
}

/* The figures of size k over the threads: counts and rates add up, the
 * latencies are the percentiles of every thread's samples together; CPU
 * is the process's (as any thread measured it over its interval), per
 * message of them all. */
static int merge_row(struct perf *ps, unsigned nt, size_t k, struct result *r)
{
	size_t n = 0, at = 0;
	double *all, traffic[TR_N];
	unsigned t;
	int i;

	*r = ps[0].res[k];
	r->conns = 0;
	r->msgs = 0;
	r->msg_s = r->mb_s = 0;
	r->switches = r->wakeups = r->skipped = 0;
	for (i = 0; i < TR_N; i++)
		traffic[i] = 0;
	for (t = 0; t < nt; t++) {
		const struct result *x = &ps[t].res[k];

		/* per message: each thread's ctx weighed by its messages */
		for (i = 0; i < TR_N && x->msgs; i++)
			traffic[i] += x->traffic[i] * (double)x->msgs;
		r->conns += x->conns;
		r->msgs += x->msgs;
		r->msg_s += x->msg_s;
		r->mb_s += x->mb_s;
		if (x->secs > r->secs)
			r->secs = x->secs;
		r->switches += x->switches;
		r->wakeups += x->wakeups;
		r->skipped += x->skipped;
		n += ps[t].nkeep[k];
	}
	for (i = 0; i < TR_N; i++) /* NAN in conn (as each thread's) */
		r->traffic[i] = r->test == T_CONN || !r->msgs
					? NAN
					: traffic[i] / (double)r->msgs;
	r->cpu_us_msg = r->msg_s > 0 ? r->cpu_pct * 1e4 / r->msg_s : NAN;
	r->srv_cpu_us_msg = r->msg_s > 0 ? r->srv_cpu_pct * 1e4 / r->msg_s
					 : NAN;
	if (!n)
		return 0;
	all = malloc(n * sizeof(double));
	if (!all)
		return -1;
	for (t = 0; t < nt; t++) {
		memcpy(all + at, ps[t].keep[k], ps[t].nkeep[k] * sizeof(double));
		at += ps[t].nkeep[k];
	}
	lat_figures(all, n, r);
	free(all);
	return 0;
}

int run_client(struct opts *o)
{
	struct perf one = {0}, out = {0}, *ps;
	struct tstart ts;
	unsigned nt = o->threads > 1 ? o->threads : 1, t, started = 0;
	int i, ret = 0;

	if (nt == 1) {
		one.o = *o;
		one.loop = EV_DEFAULT;
		ret = client_run(&one);
		free(one.res);
		return ret;
	}
	ps = calloc(nt, sizeof(*ps));
	out.res = calloc((size_t)o->nsizes, sizeof(*out.res));
	if (!ps || !out.res) {
		fprintf(stderr, "evrdma-perf: out of memory\n");
		free(ps);
		free(out.res);
		return 1;
	}
	pthread_mutex_init(&ts.mu, NULL);
	pthread_cond_init(&ts.cv, NULL);
	ts.n = nt;
	ts.waiting = ts.gen = 0;
	for (t = 0; t < nt; t++) {
		ps[t].o = *o;
		/* the connections dealt out: an equal share each, the rest
		 * one more to the first threads */
		ps[t].o.conns = o->conns / nt + (t < o->conns % nt);
		ps[t].tstart = &ts;
		ps[t].keep = calloc((size_t)o->nsizes, sizeof(double *));
		ps[t].nkeep = calloc((size_t)o->nsizes, sizeof(size_t));
		if (!ps[t].keep || !ps[t].nkeep ||
		    pthread_create(&ps[t].thread, NULL, client_thread, &ps[t]))
			break;
		started++;
	}
	if (started < nt) {
		fprintf(stderr, "evrdma-perf: could not start %u threads\n", nt);
		/* the others must not wait for them */
		pthread_mutex_lock(&ts.mu);
		ts.n = started;
		if (started && ts.waiting >= started)
			tstart_release(&ts);
		pthread_mutex_unlock(&ts.mu);
		ret = 1;
	}
	for (t = 0; t < started; t++) {
		pthread_join(ps[t].thread, NULL);
		if (ps[t].thread_rc || ps[t].nres != (size_t)o->nsizes)
			ret = 1;
	}
	out.o = *o;
	for (i = 0; ret == 0 && i < o->nsizes; i++) {
		if (merge_row(ps, nt, (size_t)i, &out.res[i]) < 0) {
			fprintf(stderr, "evrdma-perf: out of memory\n");
			ret = 1;
			break;
		}
		out.nres++;
		emit_row(&out, (size_t)i);
	}
	if (ret == 0 && o->fmt == F_JSON)
		emit_json(&out);
	for (t = 0; t < nt; t++) {
		if (ps[t].keep)
			for (i = 0; i < o->nsizes; i++)
				free(ps[t].keep[i]);
		free(ps[t].keep);
		free(ps[t].nkeep);
		free(ps[t].res);
	}
	free(ps);
	free(out.res);
	pthread_cond_destroy(&ts.cv);
	pthread_mutex_destroy(&ts.mu);
	return ret;
}
