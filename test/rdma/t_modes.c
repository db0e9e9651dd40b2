/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Completion modes on a real verbs stack: traffic must neither lose nor
 * delay a completion across thousands of forced switches between EVENT,
 * POLL and ADAPTIVE (each switch back to EVENT arms the CQs and polls once
 * more), and ADAPTIVE must go to POLL under load and back to EVENT when the
 * load stops, reporting each switch through the callback and the stats.
 * evr_stats.mode_switches counts every change of the mode in effect, the
 * forced ones and the adaptive ones, each exactly once; the callback
 * reports the adaptive ones only.
 */
#include "rt_drive.h"

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>

struct flow {
	uint32_t sent, got, bad;
	uint32_t window;
	uint8_t bufs[16][512];
	uint32_t echoed;
	uint8_t echo[16][512];
};

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct flow *f = s->user;
	uint8_t *b = f->echo[f->echoed++ % 16];

	/* window <= 16: a slot is free again once its echo came back */
	memcpy(b, data, len);
	assert_int_equal(evr_send(c, b, len, NULL, NULL), 0);
}

static void pump(struct rt_side *s)
{
	struct flow *f = s->user;

	while (s->conn && f->sent < f->got + f->window) {
		uint8_t *b = f->bufs[f->sent % 16];
		size_t len = 64 + f->sent % 400;

		rt_fill(b, len, f->sent);
		assert_int_equal(evr_send(s->conn, b, len, NULL, NULL), 0);
		f->sent++;
	}
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct flow *f = s->user;

	(void)c;
	if (len != 64 + f->got % 400 || rt_verify(data, len, f->got) >= 0)
		f->bad++;
	f->got++;
	pump(s);
}

struct toggler {
	evr_ctx *ctx;
	ev_timer t;
	unsigned n;
	unsigned event_switches; /* switches that had to arm + re-poll */
	unsigned forced;	 /* calls that changed the mode in effect */
};

static void on_toggle(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct toggler *tg = w->data;
	static const enum evr_mode seq[] = {EVR_MODE_POLL, EVR_MODE_EVENT,
					    EVR_MODE_ADAPTIVE, EVR_MODE_EVENT};

	(void)loop;
	(void)revents;
	enum evr_mode before = evr_ctx_mode(tg->ctx);

	if (seq[tg->n % 4] == EVR_MODE_EVENT && before == EVR_MODE_POLL)
		tg->event_switches++;
	assert_int_equal(evr_ctx_set_mode(tg->ctx, seq[tg->n % 4]), 0);
	if (evr_ctx_mode(tg->ctx) != before)
		tg->forced++;
	tg->n++;
}

/* A phase ends when n messages are back and the mode was set `toggles`
 * times: how many messages fit between two timer ticks depends on the
 * device and on how long the library keeps polling per loop iteration. */
struct target {
	struct flow *f;
	uint32_t n;
	const struct toggler *tg;
	unsigned toggles;
};

static int got_n(void *arg)
{
	struct target *t = arg;

	return t->f->got >= t->n && (!t->tg || t->tg->n >= t->toggles);
}

struct switches {
	int to_poll, to_event;
	enum evr_mode last;
};

static void on_switch(evr_ctx *ctx, enum evr_mode now, void *arg)
{
	struct switches *sw = arg;

	(void)ctx;
	if (now == EVR_MODE_POLL)
		sw->to_poll++;
	else
		sw->to_event++;
	sw->last = now;
}

static void test_forced_switches(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct flow *f = calloc(1, sizeof(*f));
	struct toggler tg = {0};
	struct switches sw = {0};
	struct target tgt = {f, 20000, &tg, 0};
	struct evr_stats st0, st1;
	struct rt_pair p;
	double t0;

	(void)state;
	rt_pair_init(&p, loop, NULL);
	p.cli.user = p.srv.user = f;
	p.cli_opts.on_recv = cli_recv;
	p.srv_opts.on_recv = srv_recv;
	rt_pair_connect(&p);
	/* a quarter of the time the mode is ADAPTIVE and may switch itself */
	evr_ctx_on_mode_switch(p.ctx, on_switch, &sw);
	evr_ctx_stats(p.ctx, &st0);

	tg.ctx = p.ctx;
	ev_timer_init(&tg.t, on_toggle, 0.0005, 0.0005);
	tg.t.data = &tg;
	ev_timer_start(loop, &tg.t);
	/* window 1: a completion that is lost or delayed across a switch
	 * stops the ping-pong and shows as a timeout, not as a slowdown */
	f->window = 1;
	tgt.n = 3000;
	tgt.toggles = 400;
	t0 = rt_now();
	pump(&p.cli);
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 120), 0);
	printf("# window 1: %u round trips, %u forced switches (%u back to "
	       "EVENT) in %.2f s\n",
	       f->got, tg.n, tg.event_switches, rt_now() - t0);
	/* then a window of 16 */
	f->window = 16;
	tgt.n = f->got + 20000;
	tgt.toggles = 1000;
	t0 = rt_now();
	pump(&p.cli);
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 120), 0);
	ev_timer_stop(loop, &tg.t);
	evr_ctx_stats(p.ctx, &st1);
	printf("# window 16: %u messages in total, %u evr_ctx_set_mode calls "
	       "(%u changed the mode), %d + %d adaptive switches, stats: %llu "
	       "mode switches, %llu wakeups, %llu polls\n",
	       f->got, tg.n, tg.forced, sw.to_poll, sw.to_event,
	       (unsigned long long)(st1.mode_switches - st0.mode_switches),
	       (unsigned long long)(st1.wakeups - st0.wakeups),
	       (unsigned long long)(st1.polls - st0.polls));
	assert_int_equal(f->bad, 0);
	assert_true(tg.n >= 1000);
	assert_true(tg.event_switches >= 250);
	/* POLL after EVENT and EVENT after POLL in every round of four */
	assert_true(tg.forced >= 2 * (tg.n / 4));
	/* every change of the mode in effect counts, once: the forced ones
	 * and those ADAPTIVE made in between */
	assert_int_equal(st1.mode_switches - st0.mode_switches,
			 tg.forced + (unsigned)(sw.to_poll + sw.to_event));
	/* stop sending, drain what is in flight, then close cleanly */
	f->window = 0;
	tgt.n = f->sent;
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 30), 0);
	assert_int_equal(f->got, f->sent);
	rt_pair_close(&p);
	rt_pair_fini(&p);
	free(f);
	ev_loop_destroy(loop);
}

static int in_event(void *arg)
{
	return evr_ctx_mode(arg) == EVR_MODE_EVENT;
}

static void test_adaptive_follows_load(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct flow *f = calloc(1, sizeof(*f));
	struct switches sw = {0};
	struct target tgt = {f, 0, NULL, 0};
	struct evr_stats st0, st1, sta;
	struct rt_pair p;
	double t0;

	(void)state;
	rt_pair_init(&p, loop, NULL); /* ADAPTIVE is the default */
	p.cli.user = p.srv.user = f;
	p.cli_opts.on_recv = cli_recv;
	p.srv_opts.on_recv = srv_recv;
	rt_pair_connect(&p);
	evr_ctx_on_mode_switch(p.ctx, on_switch, &sw);
	evr_ctx_stats(p.ctx, &sta);
	/* idle: EVENT */
	rt_run_for(loop, 0.2);
	assert_int_equal(evr_ctx_mode(p.ctx), EVR_MODE_EVENT);

	/* load: a window of 16 as fast as it goes -> POLL */
	f->window = 16;
	tgt.n = 5000;
	pump(&p.cli);
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 60), 0);
	assert_true(sw.to_poll >= 1);
	/* stop: the window drains, then after the quiet period -> EVENT */
	f->window = 0;
	tgt.n = f->sent;
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 30), 0);
	t0 = rt_now();
	assert_int_equal(rt_run_until(loop, in_event, p.ctx, 5), 0);
	printf("# adaptive: %d switches to POLL, %d to EVENT; back to EVENT "
	       "%.1f ms after the load stopped\n",
	       sw.to_poll, sw.to_event, (rt_now() - t0) * 1e3);
	assert_true(sw.to_event >= 1);
	assert_int_equal(sw.last, EVR_MODE_EVENT);
	/* the stats counted each of them, once */
	evr_ctx_stats(p.ctx, &st1);
	assert_int_equal(st1.mode_switches - sta.mode_switches,
			 (uint64_t)(sw.to_poll + sw.to_event));

	/* idle again: no spinning -- polls stay flat, no wakeups (once the
	 * spin after the last post, adapt_spin_us, has ended) */
	rt_run_for(loop, 0.05);
	evr_ctx_stats(p.ctx, &st0);
	rt_run_for(loop, 0.5);
	evr_ctx_stats(p.ctx, &st1);
	printf("# idle 0.5 s: %llu polls, %llu wakeups\n",
	       (unsigned long long)(st1.polls - st0.polls),
	       (unsigned long long)(st1.wakeups - st0.wakeups));
	assert_true(st1.polls - st0.polls < 10);
	assert_int_equal(st1.mode, EVR_MODE_EVENT);

	/* and traffic still flows after all that */
	f->window = 4;
	tgt.n = f->got + 200;
	pump(&p.cli);
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 30), 0);
	f->window = 0;
	tgt.n = f->sent;
	assert_int_equal(rt_run_until(loop, got_n, &tgt, 30), 0);
	assert_int_equal(f->bad, 0);
	rt_pair_close(&p);
	rt_pair_fini(&p);
	free(f);
	ev_loop_destroy(loop);
}

/*
 * ADAPTIVE's spin, then block (evr_ctx_opts.adapt_spin_us), on both
 * driving paths: pings paced 20 ms apart, far below the rate that switches
 * to POLL, on one ctx.  With a spin longer than a round trip, the ping and
 * its echo (their receives and their sends' completions) are all taken by
 * the spin that follows the ping's post, without waiting for a wakeup (the
 * CQ armed while the pair idled may still raise one event for them); with
 * the spin off, the spin takes nothing and each ping needs a wakeup.  Idle
 * afterwards, nothing is polled.
 */
#define SPIN_PINGS 10

struct spin_run {
	struct rt_pair *p;
	unsigned got, echoed;
	uint8_t ping[64], echo[64];
};

static void spin_srv_recv(evr_conn *c, const void *data, size_t len,
			  void *arg)
{
	struct spin_run *r = ((struct rt_side *)arg)->user;

	memcpy(r->echo, data, len);
	assert_int_equal(evr_send(c, r->echo, len, NULL, NULL), 0);
	r->echoed++;
}

static void spin_cli_recv(evr_conn *c, const void *data, size_t len,
			  void *arg)
{
	struct spin_run *r = ((struct rt_side *)arg)->user;

	(void)c;
	assert_int_equal(len, sizeof(r->ping));
	assert_memory_equal(data, r->ping, len);
	r->got++;
}

static int rt_pair_up_pred2(void *arg)
{
	return ((struct rt_side *)arg)->connects > 0;
}

static int spin_got(void *arg)
{
	struct spin_run *r = arg;

	return r->got == r->echoed && r->got > 0 &&
	       r->got == (unsigned)r->ping[0];
}

static void run_spin(enum rt_path path, bool spin)
{
	struct evr_ctx_opts o;
	struct evr_stats st0, st1, st2;
	struct spin_run r = {0};
	struct rt_drv d;
	struct rt_pair p;
	unsigned i;

	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	/* longer than a round trip even under valgrind; off: UINT_MAX */
	o.adapt_spin_us = spin ? 100000 : UINT_MAX;
	rt_pair_init(&p, rt_drv_loop(&d), &o);
	rt_drv_attach(&d, p.ctx);
	r.p = &p;
	p.cli.user = p.srv.user = &r;
	p.srv_opts.on_recv = spin_srv_recv;
	p.cli_opts.on_recv = spin_cli_recv;
	rt_drv_pair_connect(&d, &p);
	assert_int_equal(evr_ctx_mode(p.ctx), EVR_MODE_EVENT); /* ADAPTIVE */
	rt_drv_run_for(&d, 0.2); /* the set-up's spins are over */
	evr_ctx_stats(p.ctx, &st0);
	for (i = 1; i <= SPIN_PINGS; i++) {
		memset(r.ping, (int)i, sizeof(r.ping));
		assert_int_equal(
		    evr_send(p.cli.conn, r.ping, sizeof(r.ping), NULL, NULL),
		    0);
		assert_int_equal(rt_drv_run_until(&d, spin_got, &r, 10), 0);
		rt_drv_run_for(&d, 0.02);
	}
	rt_drv_run_for(&d, 0.2); /* the last spin ends */
	evr_ctx_stats(p.ctx, &st1);
	rt_drv_run_for(&d, 0.5);
	evr_ctx_stats(p.ctx, &st2);
	printf("# %s, spin %s: %u pings, %llu wakeups, %llu completions taken "
	       "by the spin, %llu mode switches\n",
	       rt_path_name(path), spin ? "100 ms" : "off", r.got,
	       (unsigned long long)(st1.wakeups - st0.wakeups),
	       (unsigned long long)(st1.spin_hits - st0.spin_hits),
	       (unsigned long long)(st1.mode_switches - st0.mode_switches));
	assert_int_equal(r.got, SPIN_PINGS);
	assert_int_equal(st1.mode_switches, st0.mode_switches); /* no POLL */
	if (spin) {
		/* each ping and each echo received: all taken by the spin
		 * (their sends, without a callback, end their batches
		 * unsignaled: no completion for most of them, lib/sq.c); at
		 * most one (spurious) wakeup per ping */
		assert_true(st1.spin_hits - st0.spin_hits >= 2 * SPIN_PINGS);
		assert_true(st1.wakeups - st0.wakeups <= SPIN_PINGS);
	} else {
		/* each ping needs a wakeup */
		assert_int_equal(st1.spin_hits, st0.spin_hits);
		assert_true(st1.wakeups - st0.wakeups >= SPIN_PINGS);
	}
	/* idle: no spin, no poll */
	assert_int_equal(st2.polls, st1.polls);
	assert_int_equal(st2.spin_hits, st1.spin_hits);
	rt_drv_pair_close(&d, &p);
	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
}

static void test_spin_libev(void **state)
{
	(void)state;
	run_spin(RT_LIBEV, true);
	run_spin(RT_LIBEV, false);
}

static void test_spin_embed(void **state)
{
	(void)state;
	run_spin(RT_EMBED, true);
	run_spin(RT_EMBED, false);
}

/*
 * The spin follows a peer that answers later than adapt_spin_us: a server
 * on a thread of its own (its own ctx and loop, POLL) that takes 2.5 times
 * the client's spin to answer each ping.  The client's first pings spin,
 * miss and wait for a wakeup; the times those answers took make the spin
 * longer, and from then on the answers come within it: at least half of
 * the later pings are answered without a wakeup.  Without the longer spin
 * none would be (the client sends without callbacks: nothing else
 * completes).  On both driving paths; idle afterwards, nothing is polled.
 */
#define STRETCH_PINGS 12
#define STRETCH_LEARN 4 /* pings the client may need to time the answers */

struct slow_srv {
	double delay; /* seconds each answer takes */
	pthread_t tid;
	struct ev_loop *loop;
	evr_ctx *ctx;
	int port, fail, conns; /* atomics */
	uint8_t echo[64];
};

static void slow_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct slow_srv *s = arg;
	double until = rt_now() + s->delay;

	while (rt_now() < until)
		; /* a slow service */
	if (len > sizeof(s->echo) ||
	    (memcpy(s->echo, data, len),
	     evr_send(c, s->echo, len, NULL, NULL)))
		__atomic_store_n(&s->fail, 1, __ATOMIC_RELEASE);
}

static void slow_up(evr_conn *c, int status, void *arg)
{
	struct slow_srv *s = arg;

	(void)c;
	if (status)
		__atomic_store_n(&s->fail, 1, __ATOMIC_RELEASE);
	else
		__atomic_add_fetch(&s->conns, 1, __ATOMIC_ACQ_REL);
}

static void slow_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			size_t ulen, void *arg)
{
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = slow_up;
	o.on_recv = slow_recv;
	o.arg = arg;
	if (evr_accept(req, &o, NULL))
		__atomic_store_n(&((struct slow_srv *)arg)->fail, 1,
				 __ATOMIC_RELEASE);
}

static void slow_stop(evr_ctx *ctx, void *arg)
{
	struct slow_srv *s = arg;

	(void)ctx;
	ev_break(s->loop, EVBREAK_ALL);
}

static void *slow_main(void *arg)
{
	struct slow_srv *s = arg;
	struct evr_ctx_opts o;
	evr_listener *l;
	int port = -1;

	rt_ctx_opts(&o);
	o.mode = EVR_MODE_POLL;
	s->loop = ev_loop_new(EVFLAG_AUTO);
	if (s->loop && evr_ctx_create(&s->ctx, s->loop, &o) == 0 &&
	    evr_listen(s->ctx, rt_addr(), 0, 4, slow_accept, s, &l) == 0)
		port = evr_listener_port(l);
	__atomic_store_n(&s->port, port, __ATOMIC_RELEASE);
	if (port > 0)
		ev_run(s->loop, 0); /* until slow_stop */
	if (s->ctx)
		evr_ctx_destroy(s->ctx);
	if (s->loop)
		ev_loop_destroy(s->loop);
	return NULL;
}

static int slow_port_pred(void *arg)
{
	return __atomic_load_n(&((struct slow_srv *)arg)->port,
			       __ATOMIC_ACQUIRE) != 0;
}

static int slow_closed_pred(void *arg)
{
	return ((struct rt_side *)arg)->closes > 0;
}

static int stretch_got(void *arg)
{
	struct spin_run *r = arg;

	return r->got == (unsigned)r->ping[0];
}

static void run_stretch(enum rt_path path)
{
	double k = rt_timeout_scale();
	unsigned base_us = (unsigned)(2000 * k), i;
	struct slow_srv s = {.delay = 2.5 * base_us * 1e-6};
	struct evr_stats st0, st1, st2;
	struct evr_ctx_opts o;
	struct spin_run r = {0};
	struct rt_side cli = {0};
	struct evr_conn_opts co;
	struct rt_drv d;
	evr_ctx *ctx;
	double t;

	assert_int_equal(pthread_create(&s.tid, NULL, slow_main, &s), 0);
	t = rt_now() + 20 * k;
	while (!slow_port_pred(&s) && rt_now() < t)
		usleep(1000);
	assert_true(__atomic_load_n(&s.port, __ATOMIC_ACQUIRE) > 0);

	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	o.adapt_spin_us = base_us;
	assert_int_equal(evr_ctx_create(&ctx, rt_drv_loop(&d), &o), 0);
	rt_drv_attach(&d, ctx);
	evr_conn_opts_init(&co);
	co.on_connect = rt_side_connect;
	co.on_close = rt_side_close;
	co.on_recv = spin_cli_recv;
	co.arg = &cli;
	cli.user = &r;
	assert_int_equal(evr_connect(ctx, rt_addr(), (uint16_t)s.port, &co,
				     NULL),
			 0);
	assert_int_equal(rt_drv_run_until(&d, rt_pair_up_pred2, &cli, 20), 0);
	assert_non_null(cli.conn);
	assert_int_equal(evr_ctx_mode(ctx), EVR_MODE_EVENT); /* ADAPTIVE */
	rt_drv_run_for(&d, 0.2);
	for (i = 1; i <= STRETCH_PINGS; i++) {
		if (i == STRETCH_LEARN + 1)
			evr_ctx_stats(ctx, &st0);
		memset(r.ping, (int)i, sizeof(r.ping));
		assert_int_equal(
		    evr_send(cli.conn, r.ping, sizeof(r.ping), NULL, NULL), 0);
		assert_int_equal(rt_drv_run_until(&d, stretch_got, &r, 20), 0);
		rt_drv_run_for(&d, 0.03);
	}
	rt_drv_run_for(&d, 0.2); /* the last spin ends */
	evr_ctx_stats(ctx, &st1);
	rt_drv_run_for(&d, 0.5);
	evr_ctx_stats(ctx, &st2);
	printf("# %s, spin %u us, answers in %.1f ms: %u pings, the last %u "
	       "with %llu wakeups and %llu answers taken by the spin\n",
	       rt_path_name(path), base_us, s.delay * 1e3, r.got,
	       STRETCH_PINGS - STRETCH_LEARN,
	       (unsigned long long)(st1.wakeups - st0.wakeups),
	       (unsigned long long)(st1.spin_hits - st0.spin_hits));
	assert_int_equal(r.got, STRETCH_PINGS);
	assert_int_equal(__atomic_load_n(&s.fail, __ATOMIC_ACQUIRE), 0);
	assert_int_equal(st1.mode_switches, st0.mode_switches); /* no POLL */
	/* under valgrind the two threads take turns: no timing holds, the
	 * run checks memory only (said, not skipped silently) */
	if (rt_on_valgrind())
		printf("# under valgrind: the spin's share is not checked\n");
	else
		assert_true(st1.spin_hits - st0.spin_hits >=
			    (STRETCH_PINGS - STRETCH_LEARN) / 2);
	/* idle: no spin, no poll */
	assert_int_equal(st2.polls, st1.polls);

	assert_int_equal(evr_conn_close(cli.conn, 0), 0);
	assert_int_equal(rt_drv_run_until(&d, slow_closed_pred, &cli, 20), 0);
	assert_int_equal(evr_ctx_call(s.ctx, slow_stop, &s), 0);
	assert_int_equal(pthread_join(s.tid, NULL), 0);
	assert_int_equal(__atomic_load_n(&s.conns, __ATOMIC_ACQUIRE), 1);
	rt_drv_detach(&d);
	evr_ctx_destroy(ctx);
	rt_drv_fini(&d);
}

static void test_stretch_libev(void **state)
{
	(void)state;
	run_stretch(RT_LIBEV);
}

static void test_stretch_embed(void **state)
{
	(void)state;
	run_stretch(RT_EMBED);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forced_switches),
		cmocka_unit_test(test_adaptive_follows_load),
		cmocka_unit_test(test_spin_libev),
		cmocka_unit_test(test_spin_embed),
		cmocka_unit_test(test_stretch_libev),
		cmocka_unit_test(test_stretch_embed),
	};

	rt_init(600);
	return cmocka_run_group_tests_name("rdma_modes", tests, NULL, NULL);
}
