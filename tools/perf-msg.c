/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf-msg.c: the message tests of the evrdma-perf client -- lat (echo
 * ping-pong, also under --load idle, light or sat), bw and rate (a
 * one-way stream the server swallows) -- and rpc, the echo's walk made
 * with calls.
 *
 * Each connection walks the phases of enum phase (perf.h): connect, warm
 * up (echo tests), baseline report, wait for the others (perf-client.c
 * starts the clock when all are ready), run, drain, final report, done,
 * close.  Echo tests keep WINDOW ping-pongs in flight (one, unless --load
 * sat) and take a latency sample per echo: half the round trip, as
 * perftest's ib_send_lat reports it, from a CLOCK_MONOTONIC read just
 * before the send to one when the echo is handed to on_recv (the loop's
 * ev_now would be stale: in POLL mode one loop iteration polls many
 * times).  One-way tests keep WINDOW sends unfinished, then ask for the
 * final report, whose count must match what was sent.  The first
 * connection to come up registers the send buffer, so that rendezvous
 * sends of large messages cost no registration.
 *
 * rpc keeps WINDOW calls (evr_call) in flight per connection, warm-up
 * included, each answered with as many bytes; a latency sample is a whole
 * call, from just before evr_call to its callback.  A share of the calls
 * may be cancelled right after evr_call (--rpc-cancel: they must end
 * -ECANCELED, possibly from inside evr_call_cancel) or made with an
 * RPC_EXPIRE_MS deadline from a copy of the buffer whose first byte asks
 * the server to answer RPC_DELAY_MS late (--rpc-expire: they end
 * -ETIMEDOUT; or with the answer, when the loop ran their deadline that
 * much late -- counted and reported, not a failure: a busy loop runs its
 * timers late).  Calls end out of order, so each takes a slot of the
 * window for its start time; the report requests are plain messages.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <string.h>

#include "perf.h"

static const char *const phase_str[] = {
	"idle", "connecting", "warmup", "base", "ready", "run",
	"drain", "final", "done", "closing", "closed",
};

static void on_sent(evr_conn *conn, int status, void *arg);

/* A data send completed: false (and the run failed) if it failed. */
static bool sent_ok(struct pconn *pc, int status)
{
	struct perf *p = pc->p;

	if (status < 0) {
		if (!p->failed && pc->ph < PH_CLOSING)
			client_fail(p, "conn %u: send failed in phase %s: %s",
				    pc->idx, phase_str[pc->ph],
				    evr_strerror(status));
		return false;
	}
	p->events++;
	return true;
}

/* Send one data message (or, with len 0, a report request).  Echo tests
 * need no send callback -- the echo tells the message went, the buffer
 * stays valid, and a failed send fails the conn (on_close) -- and send
 * without one, as an application would: the cheapest send; with
 * --send-cb they have one all the same. */
static int send_msg(struct pconn *pc, size_t len)
{
	bool cb = pc->p->kind == K_SINK || (pc->p->o.send_cb && len);
	int rc = evr_send(pc->conn, pc->p->buf, len, cb ? on_sent : NULL, pc);

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
/* Echo tests: keep the window full. */
void pump_echo(struct pconn *pc)
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

/* ---- --mt: the one-way stream sent from another thread ---- */

/* A producer thread keeps every connection's window full with
 * evr_send_mt() (the message copied, then sent from the loop's thread),
 * and sleeps while every window is full; the completions come back here,
 * on the loop's thread, which wakes it.  When it is done (the count
 * reached, or the duration over) it tells the loop with evr_ctx_call(),
 * and each connection asks for its final report once its last send has
 * completed.  Each thread's CPU time is measured on its own (msg_end
 * prints it): on a host with a core for each, the loop thread's time per
 * message is what bounds the rate. */

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Wake the producer if it sleeps (the loop's side of mt_wait). */
static void mt_wake(struct perf *p)
{
	if (!__atomic_load_n(&p->mt_waiting, __ATOMIC_SEQ_CST))
		return;
	pthread_mutex_lock(&p->mt_mu);
	p->mt_waiting = 0;
	pthread_cond_signal(&p->mt_cv);
	pthread_mutex_unlock(&p->mt_mu);
}

static bool mt_room(struct perf *p)
{
	unsigned i;

	if (__atomic_load_n(&p->stop, __ATOMIC_SEQ_CST))
		return true;
	for (i = 0; i < p->o.conns; i++) {
		struct pconn *pc = &p->pc[i];

		if (pc->sent - __atomic_load_n(&pc->acked, __ATOMIC_SEQ_CST) <
		    p->window)
			return true;
	}
	return false;
}

/* The producer's: sleep until a window has room (or the run stops).  The
 * flag is set before the windows are looked at, and the loop increments a
 * window's count before it looks at the flag: one of the two sees the
 * other. */
static void mt_wait(struct perf *p)
{
	pthread_mutex_lock(&p->mt_mu);
	__atomic_store_n(&p->mt_waiting, 1, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&p->mt_waiting, __ATOMIC_SEQ_CST) && !mt_room(p))
		pthread_cond_wait(&p->mt_cv, &p->mt_mu);
	__atomic_store_n(&p->mt_waiting, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&p->mt_mu);
}
struct mt_end {
	struct perf *p;
	unsigned gen;
};

static void mt_check_end(struct pconn *pc)
{
	if (pc->ph == PH_RUN && pc->p->mt_done && pc->acked == pc->sent)
		request_report(pc, PH_FINAL);
}

static void mt_on_sent(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;

	(void)conn;
	if (!sent_ok(pc, status))
		return;
	/* the only writer; the producer reads it */
	__atomic_store_n(&pc->acked, pc->acked + 1, __ATOMIC_SEQ_CST);
	mt_wake(p);
	mt_check_end(pc);
}

static void mt_finished(evr_ctx *ctx, void *arg)
{
	struct mt_end *e = arg;
	struct perf *p = e->p;
	unsigned i;

	(void)ctx;
	if (e->gen != p->mt_gen || !p->mt_running) {
		free(e); /* a run ended early (msg_end) joined it already */
		return;
	}
	free(e);
	pthread_join(p->mt_t, NULL);
	p->mt_running = false;
	p->mt_done = true;
	if (p->mt_err) {
		client_fail(p, "evr_send_mt: %s", evr_strerror(p->mt_err));
		return;
	}
	for (i = 0; i < p->o.conns; i++)
		mt_check_end(&p->pc[i]);
}

static void *mt_produce(void *arg)
{
	struct perf *p = arg;
	struct mt_end *e = malloc(sizeof(*e));
	uint64_t cpu0 = thread_cpu_ns();
	bool more = true;
	unsigned i;

	while (more && !p->mt_err) {
		bool moved = false;

		more = false;
		for (i = 0; i < p->o.conns; i++) {
			struct pconn *pc = &p->pc[i];
			uint64_t sent = pc->sent; /* ours while we run */
			int rc;

			if (__atomic_load_n(&p->stop, __ATOMIC_SEQ_CST) ||
			    (p->n && sent >= p->n))
				continue;
			more = true;
			if (sent - __atomic_load_n(&pc->acked,
						   __ATOMIC_SEQ_CST) >=
			    p->window)
				continue;
			rc = evr_send_mt(pc->conn, p->buf, p->size, mt_on_sent,
					 pc);
			if (rc < 0) {
				p->mt_err = rc;
				break;
			}
			__atomic_store_n(&pc->sent, sent + 1, __ATOMIC_RELEASE);
			moved = true;
		}
		if (more && !moved)
			mt_wait(p);
	}
	p->mt_cpu_ns = thread_cpu_ns() - cpu0;
	if (!e) {
		p->mt_err = -ENOMEM; /* told by msg_end's join */
		return NULL;
	}
	e->p = p;
	e->gen = p->mt_gen;
	if (evr_ctx_call(p->ctx, mt_finished, e) < 0)
		free(e);
	return NULL;
}

static void mt_start(struct perf *p)
{
	int rc;

	if (p->mt_running || p->mt_done || p->failed)
		return;
	p->mt_gen++;
	p->mt_err = 0;
	p->mt_waiting = 0;
	p->mt_cpu_ns = 0;
	p->mt_loop_cpu0 = thread_cpu_ns();
	rc = pthread_create(&p->mt_t, NULL, mt_produce, p);
	if (rc) {
		client_fail(p, "pthread_create: %s", evr_strerror(-rc));
		return;
	}
	p->mt_running = true;
}

/* After a measurement's loop: a producer still running (the run failed)
 * is stopped and joined before anything it uses goes. */
void msg_end(struct perf *p)
{
	uint64_t n = 0;
	unsigned i;

	if (p->o.test == T_RPC && !p->failed) {
		struct evr_stats st;

		evr_ctx_stats(p->ctx, &st);
		fprintf(stderr, "evrdma-perf: rpc %zu B: %llu calls answered, "
				"%llu cancelled, %llu expired; %llu late "
				"replies\n",
			p->size, (unsigned long long)p->rpc_ok,
			(unsigned long long)p->rpc_cancelled,
			(unsigned long long)p->rpc_expired,
			(unsigned long long)(st.late_replies -
					     p->st0.late_replies));
		if (p->rpc_overran)
			fprintf(stderr, "evrdma-perf: rpc %zu B: %llu calls "
					"with a %d ms deadline were answered "
					"(%d ms late): their deadline ran "
					"late\n",
				p->size, (unsigned long long)p->rpc_overran,
				RPC_EXPIRE_MS, RPC_DELAY_MS);
	}
	if (p->mt_running) {
		__atomic_store_n(&p->stop, true, __ATOMIC_SEQ_CST);
		mt_wake(p);
		pthread_join(p->mt_t, NULL);
		p->mt_running = false;
		return;
	}
	if (!p->o.mt || !p->mt_done || p->failed)
		return;
	for (i = 0; i < p->o.conns; i++)
		n += p->pc[i].sent;
	if (n)
		fprintf(stderr, "evrdma-perf: --mt: %llu messages; thread CPU "
				"per message: loop %.3f us, sending thread "
				"%.3f us\n",
			(unsigned long long)n,
			(double)(thread_cpu_ns() - p->mt_loop_cpu0) / 1e3 /
				(double)n,
			(double)p->mt_cpu_ns / 1e3 / (double)n);
}

/* One-way tests: keep the window of unfinished sends full, then ask for
 * the final report, which confirms the total. */
void pump_sink(struct pconn *pc)
{
	struct perf *p = pc->p;

	if (pc->ph != PH_RUN)
		return;
	if (p->o.mt) {
		mt_start(p);
		return;
	}
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
	if (!sent_ok(pc, status))
		return;
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

void on_recv(evr_conn *conn, const void *data, size_t len, void *arg)
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

/* ---- rpc: calls ---- */

static const char *const rpc_how_str[] = {"plain", "cancelled", "expiring"};

static void rpc_on_end(evr_conn *conn, int status, const void *reply,
		       size_t len, void *arg);

/* Which share call k is in: 37 is prime to 100, so every 100 calls in a
 * row take each residue once -- exact shares, spread out. */
static enum rpc_how rpc_how(const struct perf *p, uint64_t k)
{
	unsigned r = (unsigned)(k * 37 % 100);

	if (r < p->o.rpc_cancel)
		return RPC_CANCEL;
	if (r < p->o.rpc_cancel + p->o.rpc_expire)
		return RPC_EXPIRE;
	return RPC_PLAIN;
}

/* Make one call in a free slot of the window: 0, or the run failed. */
static int rpc_make(struct pconn *pc, enum rpc_how how)
{
	struct perf *p = pc->p;
	struct rpc_slot *s = &pc->rs[pc->rfree[--pc->nfree]];
	evr_call_id id;
	int rc;

	s->pc = pc;
	s->how = how;
	s->t = mono_s();
	rc = evr_call(pc->conn, how == RPC_EXPIRE ? p->dbuf : p->buf, p->size,
		      how == RPC_EXPIRE ? RPC_EXPIRE_MS : 0, rpc_on_end, s,
		      &id);
	if (rc < 0) {
		pc->nfree++; /* the slot's index is still there */
		client_fail(p, "conn %u: evr_call of %zu bytes in phase %s: "
			       "%s%s",
			    pc->idx, p->size, phase_str[pc->ph],
			    evr_strerror(rc),
			    rc == -EOPNOTSUPP ? " (the server serves no calls)"
					      : "");
		return rc;
	}
	pc->sent++; /* before the cancel, whose callback may fire inside */
	if (how == RPC_CANCEL) {
		rc = evr_call_cancel(pc->conn, id);
		if (rc < 0) {
			client_fail(p, "conn %u: evr_call_cancel right after "
				       "evr_call: %s",
				    pc->idx, evr_strerror(rc));
			return rc;
		}
	}
	return 0;
}

/* Keep the window of calls full. */
void pump_rpc(struct pconn *pc)
{
	struct perf *p = pc->p;

	pc->in_pump = true;
	while (pc->ph == PH_RUN && !p->stop && !p->failed &&
	       (!p->n || pc->sent < p->n) &&
	       pc->sent - pc->echoed < p->window) {
		if (rpc_make(pc, rpc_how(p, pc->sent)) < 0)
			break;
	}
	pc->in_pump = false;
}

static void rpc_on_end(evr_conn *conn, int status, const void *reply,
		       size_t len, void *arg)
{
	static const int want[] = {[RPC_PLAIN] = 0,
				   [RPC_CANCEL] = -ECANCELED,
				   [RPC_EXPIRE] = -ETIMEDOUT};
	struct rpc_slot *s = arg;
	struct pconn *pc = s->pc;
	struct perf *p = pc->p;
	enum rpc_how how = s->how;
	ev_tstamp t = mono_s();

	(void)conn;
	(void)reply;
	pc->rfree[pc->nfree++] = (unsigned)(s - pc->rs);
	p->events++;
	if (p->failed)
		return; /* the run broke off: the conn's end ends its calls */
	if ((status != want[how] && !(how == RPC_EXPIRE && status == 0)) ||
	    (status == 0 && len != p->size) ||
	    (pc->ph != PH_WARMUP && pc->ph != PH_RUN && pc->ph != PH_DRAIN)) {
		client_fail(p, "conn %u: a %s call ended with %s (%zu bytes) "
			       "in phase %s",
			    pc->idx, rpc_how_str[how], evr_strerror(status),
			    len, phase_str[pc->ph]);
		return;
	}
	if (pc->ph == PH_WARMUP) {
		if (--pc->warm_left == 0)
			request_report(pc, PH_BASE);
		else
			rpc_make(pc, RPC_PLAIN);
		return;
	}
	if (how == RPC_PLAIN) {
		p->rpc_ok++;
		if (lat_add(p, (t - s->t) * 1e6) < 0) {
			client_fail(p, "out of memory");
			return;
		}
	} else if (how == RPC_CANCEL) {
		p->rpc_cancelled++;
	} else if (status == 0) {
		p->rpc_overran++;
	} else {
		p->rpc_expired++;
	}
	pc->echoed++;
	echo_check_end(pc);
	if (!pc->in_pump)
		pump_rpc(pc);
}

static void on_connect(evr_conn *conn, int status, void *arg);
static void on_close(evr_conn *conn, int status, void *arg);

/* Start connects until RAMP are unanswered (all, without --ramp). */
static void connect_more(struct perf *p)
{
	while (!p->failed && p->nlaunched < p->o.conns &&
	       (!p->o.ramp || p->nlaunched - p->nanswered < p->o.ramp)) {
		struct pconn *pc = &p->pc[p->nlaunched++];

		pc->ph = PH_CONNECTING;
		if (client_connect(pc, p->kind, on_connect, on_close) < 0) {
			pc->ph = PH_CLOSED;
			p->nclosed++;
		}
	}
}

static void on_connect(evr_conn *conn, int status, void *arg)
{
	struct pconn *pc = arg;
	struct perf *p = pc->p;
	int rc;

	p->events++;
	p->nanswered++;
	if (status < 0) {
		p->nclosed++;
		client_connect_failed(pc, status);
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
	connect_more(p);
	if (p->kind == K_ECHO && p->warm) {
		pc->ph = PH_WARMUP;
		pc->warm_left = p->warm;
		if (p->o.test == T_RPC)
			rpc_make(pc, RPC_PLAIN);
		else
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

/* Connect every connection of a message test: all at once, or RAMP at a
 * time. */
void msg_begin(struct perf *p)
{
	unsigned i;

	p->mt_done = false;
	p->rpc_ok = p->rpc_cancelled = p->rpc_expired = p->rpc_overran = 0;
	for (i = 0; i < p->o.conns; i++) {
		struct pconn *pc = &p->pc[i];
		unsigned k;

		memset(&pc->base, 0, sizeof(pc->base));
		memset(&pc->final, 0, sizeof(pc->final));
		pc->p = p;
		pc->idx = i;
		pc->sent = pc->echoed = pc->acked = 0;
		pc->ph = PH_IDLE;
		if (pc->rfree) /* rpc: every slot free */
			for (k = 0, pc->nfree = p->window; k < p->window; k++)
				pc->rfree[k] = k;
	}
	connect_more(p);
}

/* ---- timers ---- */

void on_stop(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct perf *p = w->data;
	unsigned i;

	(void)loop;
	(void)revents;
	__atomic_store_n(&p->stop, true, __ATOMIC_SEQ_CST); /* --mt reads it */
	if (p->o.mt)
		mt_wake(p);
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

/* --load light: turn k is due at tick0 + k * slot_s and belongs to
 * connection k % CONNS, so each connection pings RATE times a second and
 * the connections take turns instead of all sending at once.  A tick takes
 * every turn that has come due, as the clock says (libev does not repeat
 * the ticks a busy loop missed), but at most one per connection: a tick a
 * hair early followed by one a hair late must not give a connection two
 * turns at once; turns further behind than a whole round are skipped.  A
 * connection whose last ping is not back yet skips its turn too (the load
 * is offered, not closed-loop).  msgs + skipped is the offered load. */
void on_tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct perf *p = w->data;
	uint64_t due = (uint64_t)((mono_s() - p->tick0) / p->slot_s) + 1;

	(void)loop;
	(void)revents;
	if (due > p->slot + p->o.conns) {
		p->skipped += due - p->slot - p->o.conns;
		p->slot = due - p->o.conns;
	}
	while (p->slot < due && !p->failed && !p->stop) {
		struct pconn *pc = &p->pc[p->slot++ % p->o.conns];

		if (pc->ph != PH_RUN)
			continue;
		if (pc->sent != pc->echoed) {
			p->skipped++;
			continue;
		}
		pc->t_sent[pc->sent % p->window] = mono_s();
		if (send_msg(pc, p->size) < 0)
			return;
		pc->sent++;
	}
}

/* --load idle: the duration is over; every connection asks for its final
 * report. */
void on_idle_end(struct ev_loop *loop, ev_timer *w, int revents)
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
