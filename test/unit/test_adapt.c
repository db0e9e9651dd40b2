/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The adaptive completion-mode machine (lib/adapt.c), driven by a fake
 * clock and scripted completion counts.
 *
 * A small simulator plays the caller's part: in EVENT mode every
 * completion arrival is one channel wakeup finding it; in POLL mode the
 * loop polls every POLL_STEP_NS and finds the arrivals since the last
 * pass.  Loads are given as arrival times.  The cases: light load stays in
 * EVENT; a burst or a sustained rate switches up; POLL holds while gaps
 * stay under quiet_us and drops exactly at quiet_us, and only after enough
 * empty polls (a pause of our own is not a quiet peer); a load inside the
 * hysteresis band never flaps; the switch counter and evr__adapt_force.
 *
 * Every case runs with the configuration a ctx gets from the default
 * options and an empty environment, through the library's own
 * evr__tune_resolve().  quiet_polls 0 (the time rule alone,
 * EVR_ADAPT_QUIET_POLLS=0) has a case of its own.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "evrdma-int.h"

#define US	     1000ull
#define MS	     1000000ull
#define SEC	     1000000000ull
#define T0	     (5 * SEC) /* the clock does not start at 0 */
#define POLL_STEP_NS (5 * US)

/* What a ctx with the default options runs with, filled in main(). */
static struct evr__adapt_cfg dflt;

static void cfg_resolve(struct evr__adapt_cfg *cfg,
			const struct evr_ctx_opts *o, const struct evr__env *env)
{
	struct evr__tune t;

	evr__tune_resolve(&t, o, env);
	*cfg = t.adapt;
}

static void cfg_default(struct evr__adapt_cfg *cfg)
{
	static const struct evr__env none;
	struct evr_ctx_opts o;

	evr_ctx_opts_init(&o);
	cfg_resolve(cfg, &o, &none);
}

/* quiet_polls - 1 empty polls spread over [from, until), none of which
 * may switch: the caller's next empty poll is the quiet_polls-th. */
static void empty_polls(struct evr__adapt *a, uint64_t from, uint64_t until)
{
	uint32_t n = a->cfg.quiet_polls, i;

	assert_true(until > from);
	for (i = 0; i + 1 < n; i++)
		assert_false(
		    evr__adapt_poll(a, from + (until - from) * i / n, 0));
}

struct sim {
	struct evr__adapt a;
	uint64_t switches; /* counted from the return values */
	uint64_t ups, downs;
	uint64_t first_up_ns, first_down_ns;
	uint64_t wakeups, polls;
};

static void sim_init(struct sim *s, const struct evr__adapt_cfg *cfg)
{
	memset(s, 0, sizeof(*s));
	evr__adapt_init(&s->a, cfg, T0);
}

static void note_switch(struct sim *s, uint64_t now, bool up)
{
	s->switches++;
	if (up) {
		if (!s->ups++)
			s->first_up_ns = now;
	} else {
		if (!s->downs++)
			s->first_down_ns = now;
	}
}

/*
 * Feed arrivals at[0..n) (sorted, absolute ns) and run until `end`.  In
 * EVENT mode each arrival is one wakeup finding `per` completions; in POLL
 * mode a pass every POLL_STEP_NS finds what arrived since the last one.
 */
static void sim_run(struct sim *s, const uint64_t *at, size_t n, unsigned per,
		    uint64_t end)
{
	uint64_t now = T0;
	size_t i = 0;

	while (now <= end) {
		if (!s->a.polling) {
			if (i >= n)
				break;
			now = at[i++];
			s->wakeups++;
			if (evr__adapt_wakeup(&s->a, now, per))
				note_switch(s, now, true);
		} else {
			unsigned found = 0;

			now += POLL_STEP_NS;
			while (i < n && at[i] <= now) {
				found += per;
				i++;
			}
			s->polls++;
			if (evr__adapt_poll(&s->a, now, found))
				note_switch(s, now, false);
		}
	}
}

/* Arrivals at a steady rate (per second) from T0 for dur, with +-jit_pct
 * % of deterministic jitter on each gap. */
static uint64_t *steady(double rate, uint64_t dur, unsigned jit_pct, size_t *n)
{
	double gap = 1e9 / rate;
	size_t cap = (size_t)(rate * (double)dur / 1e9) + 2, k = 0;
	uint64_t *at = malloc(cap * sizeof(*at));
	uint64_t t = T0;
	unsigned seed = 12345;

	assert_non_null(at);
	for (;;) {
		double g = gap;

		if (jit_pct) {
			int r;

			seed = seed * 1103515245u + 12345u;
			r = (int)((seed >> 16) % (2 * jit_pct + 1)) -
			    (int)jit_pct;
			g = gap * (100.0 + r) / 100.0;
		}
		t += (uint64_t)g;
		if (t > T0 + dur || k == cap)
			break;
		at[k++] = t;
	}
	*n = k;
	return at;
}

/* The configuration of a default ctx is the one evrdma(7) documents; the
 * options' thresholds go through, and each EVR_ADAPT_* variable applies to
 * a threshold the options leave unset (a malformed one is ignored).  The
 * precedence itself is test_opts's. */
static void test_defaults(void **state)
{
	struct evr__env env = {0};
	struct evr__adapt_cfg cfg;
	struct evr_ctx_opts o;

	(void)state;
	assert_int_equal(dflt.up_rate, 2000);
	assert_int_equal(dflt.up_batch, 16);
	assert_int_equal(dflt.quiet_us, 1000);
	assert_int_equal(dflt.window_us, 10000);
	assert_int_equal(dflt.quiet_polls, 16);

	/* the options' thresholds go through */
	evr_ctx_opts_init(&o);
	o.adapt_up_rate = 7;
	o.adapt_up_batch = 8;
	o.adapt_quiet_us = 9;
	cfg_resolve(&cfg, &o, &env);
	assert_int_equal(cfg.up_rate, 7);
	assert_int_equal(cfg.up_batch, 8);
	assert_int_equal(cfg.quiet_us, 9);
	assert_int_equal(cfg.quiet_polls, dflt.quiet_polls);

	/* the environment, for thresholds left unset */
	evr_ctx_opts_init(&o);
	env.adapt_up_rate = "100";
	env.adapt_up_batch = "200";
	env.adapt_quiet_us = "300";
	env.adapt_quiet_polls = "0";
	cfg_resolve(&cfg, &o, &env);
	assert_int_equal(cfg.up_rate, 100);
	assert_int_equal(cfg.up_batch, 200);
	assert_int_equal(cfg.quiet_us, 300);
	assert_int_equal(cfg.quiet_polls, 0);
	assert_int_equal(cfg.window_us, dflt.window_us);
	env.adapt_quiet_polls = "many";
	cfg_resolve(&cfg, &o, &env);
	assert_int_equal(cfg.quiet_polls, dflt.quiet_polls);
}

static void test_light_load_stays_event(void **state)
{
	static const double rates[] = {1, 200, 900, 1500, 1800};
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		struct sim s;
		uint64_t *at = steady(rates[i], 10 * SEC, 0, &n);

		sim_init(&s, &dflt);
		sim_run(&s, at, n, 1, T0 + 10 * SEC);
		assert_int_equal(s.switches, 0);
		assert_false(s.a.polling);
		assert_int_equal(s.wakeups, n);
		free(at);
	}
}

static void test_burst_switches_up(void **state)
{
	struct evr__adapt a;

	(void)state;
	evr__adapt_init(&a, &dflt, T0);
	/* a wakeup with up_batch - 1 completions is not a burst */
	assert_false(evr__adapt_wakeup(&a, T0 + 100 * MS, dflt.up_batch - 1));
	assert_false(a.polling);
	/* one with up_batch is, even after a long silence */
	assert_true(evr__adapt_wakeup(&a, T0 + 200 * MS, dflt.up_batch));
	assert_true(a.polling);
	assert_int_equal(a.switches, 1);
	/* already polling: wakeups are ignored */
	assert_false(evr__adapt_wakeup(&a, T0 + 201 * MS, 1000));
	assert_int_equal(a.switches, 1);
}

static void test_sustained_rate_switches_up(void **state)
{
	static const double rates[] = {2000, 2500, 10000, 100000};
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(rates) / sizeof(rates[0]); i++) {
		struct sim s;
		uint64_t *at = steady(rates[i], 1 * SEC, 0, &n);

		sim_init(&s, &dflt);
		/* stop as soon as it switched */
		sim_run(&s, at, n, 1, T0 + 1 * SEC);
		assert_true(s.ups >= 1);
		/* within two rate windows of the load starting */
		assert_true(s.first_up_ns <= T0 + 2 * dflt.window_us * US);
		free(at);
	}
}

static void test_poll_holds_while_busy(void **state)
{
	static const uint64_t gaps_us[] = {10, 500, 900, 999};
	size_t i, k;

	(void)state;
	for (i = 0; i < sizeof(gaps_us) / sizeof(gaps_us[0]); i++) {
		struct evr__adapt a;
		uint64_t now = T0, last = T0;

		evr__adapt_init(&a, &dflt, T0);
		evr__adapt_force(&a, true, T0);
		/* 2 s of completions every gaps_us, polled every 1 us */
		for (k = 0; now < T0 + 2 * SEC; k++) {
			unsigned found = 0;

			now += US;
			if (now - last >= gaps_us[i] * US) {
				found = 1;
				last = now;
			}
			assert_false(evr__adapt_poll(&a, now, found));
		}
		assert_true(a.polling);
		assert_int_equal(a.switches, 0);
	}
}

static void test_quiet_switches_down_exactly(void **state)
{
	static const uint32_t quiet[] = {1, 1000, 50000};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(quiet) / sizeof(quiet[0]); i++) {
		struct evr__adapt_cfg cfg = dflt;
		struct evr__adapt a;
		uint64_t last = T0 + 3 * MS, q = quiet[i] * US, t;

		cfg.quiet_us = quiet[i];
		evr__adapt_init(&a, &cfg, T0);
		assert_true(evr__adapt_wakeup(&a, T0 + 2 * MS, cfg.up_batch));
		assert_false(evr__adapt_poll(&a, last, 3));
		/* empty polls: still POLL right up to quiet_us, though enough
		 * of them have been made ... */
		for (t = last + 1; t < last + q; t += q / 64 + 1)
			assert_false(evr__adapt_poll(&a, t, 0));
		assert_true(a.empty_polls >= cfg.quiet_polls);
		assert_false(evr__adapt_poll(&a, last + q - 1, 0));
		assert_true(a.polling);
		/* ... and EVENT at exactly quiet_us */
		assert_true(evr__adapt_poll(&a, last + q, 0));
		assert_false(a.polling);
		assert_int_equal(a.switches, 2);
		/* in EVENT mode, polls are ignored */
		assert_false(evr__adapt_poll(&a, last + 10 * q, 0));
		assert_int_equal(a.switches, 2);
	}
}

/* The process was not running (preempted) for longer than quiet_us: the
 * time has passed, but the polls that would show the peer quiet have not
 * happened.  POLL holds until quiet_polls empty polls, the first of which
 * may come long after quiet_us; a completion found in between starts over. */
static void test_quiet_needs_empty_polls(void **state)
{
	const struct evr__adapt_cfg cfg = dflt;
	struct evr__adapt a;
	uint64_t t = T0 + 2 * MS, q = dflt.quiet_us * US;
	unsigned i;

	(void)state;
	assert_true(cfg.quiet_polls > 1);
	evr__adapt_init(&a, &cfg, T0);
	assert_true(evr__adapt_wakeup(&a, t, cfg.up_batch));
	/* a 4 ms pause of our own, then empty polls 1 us apart */
	t += 4 * q;
	for (i = 1; i < cfg.quiet_polls; i++, t += US)
		assert_false(evr__adapt_poll(&a, t, 0));
	/* the peer's message shows up before the 16th: stay, start over */
	assert_false(evr__adapt_poll(&a, t, 1));
	t += 4 * q;
	for (i = 1; i < cfg.quiet_polls; i++, t += US)
		assert_false(evr__adapt_poll(&a, t, 0));
	assert_true(a.polling);
	assert_int_equal(a.switches, 1);
	/* the 16th empty poll, well past quiet_us: now EVENT */
	assert_true(evr__adapt_poll(&a, t, 0));
	assert_false(a.polling);
	assert_int_equal(a.switches, 2);

	/* and enough empty polls alone do not switch before quiet_us */
	evr__adapt_force(&a, true, t);
	for (i = 0; i < 10 * cfg.quiet_polls; i++)
		assert_false(evr__adapt_poll(&a, t + i, 0));
	assert_true(evr__adapt_poll(&a, t + q, 0));
}

/* quiet_polls 0 (EVR_ADAPT_QUIET_POLLS=0, a supported setting) leaves
 * the time rule alone: the first empty poll at quiet_us switches down,
 * however few polls came before it. */
static void test_quiet_time_only(void **state)
{
	struct evr__adapt_cfg cfg = dflt;
	struct evr__adapt a;
	uint64_t up = T0 + 5 * SEC, q = dflt.quiet_us * US;

	(void)state;
	cfg.quiet_polls = 0;
	evr__adapt_init(&a, &cfg, T0);
	assert_true(evr__adapt_wakeup(&a, up, cfg.up_batch));
	assert_false(evr__adapt_poll(&a, up + q - 1, 0));
	assert_true(evr__adapt_poll(&a, up + q, 0));
	assert_int_equal(a.switches, 2);
	/* a completion found still restarts the quiet time */
	assert_true(evr__adapt_wakeup(&a, up + 2 * q, cfg.up_batch));
	assert_false(evr__adapt_poll(&a, up + 3 * q, 1));
	assert_false(evr__adapt_poll(&a, up + 4 * q - 1, 0));
	assert_true(evr__adapt_poll(&a, up + 4 * q, 0));
}

/* The quiet time counts from the switch up, not from an earlier
 * completion: a burst after a long silence must not drop straight back. */
static void test_quiet_counts_from_switch(void **state)
{
	struct evr__adapt a;
	uint64_t up = T0 + 5 * SEC;

	(void)state;
	evr__adapt_init(&a, &dflt, T0);
	assert_true(evr__adapt_wakeup(&a, up, 100));
	empty_polls(&a, up, up + dflt.quiet_us * US - 1);
	assert_false(evr__adapt_poll(&a, up + dflt.quiet_us * US - 1, 0));
	assert_true(evr__adapt_poll(&a, up + dflt.quiet_us * US, 0));
}

/* Same when the rate rule fires on wakeups that found nothing (the
 * completions were taken by an earlier poll): quiet counts from the
 * switch. */
static void test_quiet_counts_from_rate_switch(void **state)
{
	struct evr__adapt a;
	uint64_t t = T0 + 5 * SEC;
	unsigned k;

	(void)state;
	evr__adapt_init(&a, &dflt, T0);
	for (k = 0; k < 19; k++)
		assert_false(evr__adapt_wakeup(&a, t += 100 * US, 0));
	assert_true(evr__adapt_wakeup(&a, t += 100 * US, 0));
	empty_polls(&a, t, t + dflt.quiet_us * US - 1);
	assert_false(evr__adapt_poll(&a, t + dflt.quiet_us * US - 1, 0));
	assert_true(evr__adapt_poll(&a, t + dflt.quiet_us * US, 0));
}

/* Back in EVENT mode the rate window starts afresh: the wakeups that
 * switched up do not count again and a lone wakeup does not flap back. */
static void test_window_restarts_after_down(void **state)
{
	struct evr__adapt a;
	uint64_t t = T0 + MS;
	unsigned k;

	(void)state;
	evr__adapt_init(&a, &dflt, T0);
	for (k = 0; k < 19; k++)
		assert_false(evr__adapt_wakeup(&a, t += 50 * US, 1));
	assert_true(evr__adapt_wakeup(&a, t += 50 * US, 1));
	empty_polls(&a, t, t + dflt.quiet_us * US);
	t += dflt.quiet_us * US;
	assert_true(evr__adapt_poll(&a, t, 0));
	assert_false(evr__adapt_wakeup(&a, t += 100 * US, 1));
	assert_false(a.polling);
	assert_int_equal(a.switches, 2);
}

/* Hysteresis band: with the defaults, 1000/s < r < 2000/s keeps whichever
 * mode the machine is in. */
static void test_no_flapping_in_band(void **state)
{
	static const struct {
		double rate;
		unsigned jit;
		bool start_polling;
	} loads[] = {
	    {1500, 0, false}, {1500, 0, true},	{1500, 10, false},
	    {1500, 10, true}, {1200, 5, false}, {1200, 5, true},
	    {1800, 2, false}, {1800, 2, true},
	};
	size_t i, n;

	(void)state;
	for (i = 0; i < sizeof(loads) / sizeof(loads[0]); i++) {
		struct sim s;
		uint64_t *at =
		    steady(loads[i].rate, 10 * SEC, loads[i].jit, &n);

		sim_init(&s, &dflt);
		if (loads[i].start_polling)
			evr__adapt_force(&s.a, true, T0);
		/* up to the last arrival: the load ending is not the test */
		sim_run(&s, at, n, 1, at[n - 1]);
		if (s.switches > 1)
			fail_msg("%.0f/s +-%u%% from %s: %llu switches",
				 loads[i].rate, loads[i].jit,
				 loads[i].start_polling ? "POLL" : "EVENT",
				 (unsigned long long)s.switches);
		assert_int_equal(s.a.polling, loads[i].start_polling);
		assert_int_equal(s.a.switches, s.switches);
		free(at);
	}
}

/* Load that rises through the band and falls back: exactly one switch up
 * and one down, and the counter agrees. */
static void test_switch_counter(void **state)
{
	static uint64_t at[30000];
	uint64_t t = T0;
	size_t n = 0, k;
	struct sim s;

	(void)state;
	/* 1 s at 200/s, 1 s at 10000/s, 1 s at 200/s */
	for (k = 0; k < 200; k++)
		at[n++] = t += 5 * MS;
	for (k = 0; k < 10000; k++)
		at[n++] = t += 100 * US;
	for (k = 0; k < 200; k++)
		at[n++] = t += 5 * MS;
	sim_init(&s, &dflt);
	sim_run(&s, at, n, 1, t);
	assert_int_equal(s.ups, 1);
	assert_int_equal(s.downs, 1);
	assert_int_equal(s.a.switches, 2);
	assert_false(s.a.polling);
	assert_true(s.first_up_ns > T0 + 1 * SEC);
	assert_true(s.first_up_ns < T0 + 1 * SEC + 2 * dflt.window_us * US);
	assert_true(s.first_down_ns >= T0 + 2 * SEC);
	assert_true(s.first_down_ns <= T0 + 2 * SEC + 6 * MS);
}

/* up_batch 0 and up_rate 0 disable their rule. */
static void test_rules_disabled(void **state)
{
	struct evr__adapt_cfg cfg = dflt;
	struct evr__adapt a;
	uint64_t t = T0;
	unsigned k;

	(void)state;
	cfg.up_batch = 0;
	evr__adapt_init(&a, &cfg, T0);
	assert_false(evr__adapt_wakeup(&a, t += MS, 1u << 20));
	cfg = dflt;
	cfg.up_rate = 0;
	evr__adapt_init(&a, &cfg, T0);
	for (k = 0; k < 10000; k++)
		assert_false(evr__adapt_wakeup(&a, t += US, 1));
	assert_true(evr__adapt_wakeup(&a, t += US, cfg.up_batch));
	/* window_us 0 takes the default, 10 ms */
	cfg = dflt;
	cfg.window_us = 0;
	evr__adapt_init(&a, &cfg, T0);
	assert_int_equal(a.cfg.window_us, 10000);
}

static void test_force_resets(void **state)
{
	struct evr__adapt a;
	uint64_t t = T0 + MS;
	unsigned k;

	(void)state;
	evr__adapt_init(&a, &dflt, T0);
	/* 19 wakeups in the window: one more would switch ... */
	for (k = 0; k < 19; k++)
		assert_false(evr__adapt_wakeup(&a, t += 10 * US, 1));
	/* ... but forcing EVENT again empties the window */
	evr__adapt_force(&a, false, t);
	assert_int_equal(a.win_wakeups, 0);
	assert_false(evr__adapt_wakeup(&a, t += 10 * US, 1));
	assert_int_equal(a.switches, 0);

	/* forced POLL: the quiet time counts from the force */
	t += 50 * MS;
	evr__adapt_force(&a, true, t);
	assert_true(a.polling);
	empty_polls(&a, t, t + dflt.quiet_us * US - 1);
	assert_false(evr__adapt_poll(&a, t + dflt.quiet_us * US - 1, 0));
	assert_true(evr__adapt_poll(&a, t + dflt.quiet_us * US, 0));
	/* a forced mode is not an adaptive switch */
	assert_int_equal(a.switches, 1);

	/* forced EVENT while polling: wakeups are counted again */
	evr__adapt_force(&a, true, t);
	evr__adapt_force(&a, false, t + MS);
	assert_false(a.polling);
	assert_true(evr__adapt_wakeup(&a, t + 2 * MS, dflt.up_batch));
}

/* The spin after a post: the base until answers are timed; then the
 * answers' time with half again as margin while that is within 16 times
 * the base, the base beyond; the average follows a changed answer time
 * within a few answers, and one stall moves it by a bounded amount. */
static void test_spin_len(void **state)
{
	const uint64_t base = 50 * US;
	struct evr__spin s;
	unsigned k;

	(void)state;
	evr__spin_init(&s, base);
	assert_int_equal(evr__spin_len(&s), base);
	/* answers within the base: the base */
	for (k = 0; k < 8; k++)
		evr__spin_answer(&s, 20 * US, false);
	assert_int_equal(evr__spin_len(&s), base);
	/* answers at 300 us (an emulated round trip): spin 450 us */
	for (k = 0; k < 40; k++)
		evr__spin_answer(&s, 300 * US, false);
	assert_true(evr__spin_len(&s) >= 440 * US);
	assert_true(evr__spin_len(&s) <= 450 * US);
	/* one stall of a second: the spin falls back to the base for a
	 * while, not for ever */
	evr__spin_answer(&s, 1000 * MS, false);
	assert_true(s.avg_ns <= 300 * US + (2 * 16 * base) / 4 + 1);
	for (k = 0; k < 12; k++)
		evr__spin_answer(&s, 300 * US, false);
	assert_true(evr__spin_len(&s) >= 440 * US);
	assert_true(evr__spin_len(&s) <= 16 * base);
	/* a peer that answers in 5 ms (think time, a server waiting for the
	 * next request): never spin that long, the base */
	for (k = 0; k < 40; k++)
		evr__spin_answer(&s, 5 * MS, false);
	assert_int_equal(evr__spin_len(&s), base);
	/* just within the bound: 16 x base / 1.5 */
	evr__spin_init(&s, base);
	evr__spin_answer(&s, 16 * base * 2 / 3, false);
	assert_true(evr__spin_len(&s) > 16 * base - 2);
	assert_true(evr__spin_len(&s) <= 16 * base);
	evr__spin_init(&s, base);
	evr__spin_answer(&s, 16 * base * 2 / 3 + 2, false);
	assert_int_equal(evr__spin_len(&s), base);
	/* base 0 (EVR_ADAPT_SPIN_US=0): never spin, whatever the answers */
	evr__spin_init(&s, 0);
	for (k = 0; k < 8; k++)
		evr__spin_answer(&s, 300 * US, false);
	assert_int_equal(evr__spin_len(&s), 0);
}

/* Longer spins that miss their answer twice in a row (the answer cannot
 * come while we spin) forget the average: the next EVR_SPIN_BACKOFF posts
 * spin the base only, then the answers timed meanwhile count again.  One
 * miss, or misses with an answer taken by a spin between them, or a short
 * spin missing, change nothing. */
static void test_spin_backoff(void **state)
{
	const uint64_t base = 50 * US;
	struct evr__spin s;
	uint64_t len;
	unsigned k;

	(void)state;
	evr__spin_init(&s, base);
	evr__spin_answer(&s, 300 * US, false);
	len = evr__spin_begin(&s);
	assert_int_equal(len, 450 * US);
	/* the short spin missing is the known case: no change */
	evr__spin_missed(&s, base);
	evr__spin_missed(&s, base);
	assert_int_equal(evr__spin_begin(&s), 450 * US);
	/* a long one missing once, then a hit, then once more: no change */
	evr__spin_missed(&s, len);
	evr__spin_answer(&s, 300 * US, true);
	evr__spin_missed(&s, len);
	assert_int_equal(evr__spin_begin(&s), 450 * US);
	/* twice in a row (a wakeup's answer between them does not count):
	 * base for the next 64 posts */
	evr__spin_answer(&s, 300 * US, false);
	evr__spin_missed(&s, len);
	assert_int_equal(s.avg_ns, 0);
	for (k = 0; k < EVR_SPIN_BACKOFF; k++) {
		assert_int_equal(evr__spin_begin(&s), base);
		evr__spin_answer(&s, 300 * US, false); /* by the wakeups */
	}
	assert_int_equal(evr__spin_begin(&s), 450 * US);
	/* base 0: begin never spins, a miss changes nothing */
	evr__spin_init(&s, 0);
	evr__spin_answer(&s, 300 * US, false);
	assert_int_equal(evr__spin_begin(&s), 0);
	evr__spin_missed(&s, 0);
	assert_int_equal(evr__spin_begin(&s), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_defaults),
	    cmocka_unit_test(test_light_load_stays_event),
	    cmocka_unit_test(test_burst_switches_up),
	    cmocka_unit_test(test_sustained_rate_switches_up),
	    cmocka_unit_test(test_poll_holds_while_busy),
	    cmocka_unit_test(test_quiet_switches_down_exactly),
	    cmocka_unit_test(test_quiet_needs_empty_polls),
	    cmocka_unit_test(test_quiet_time_only),
	    cmocka_unit_test(test_quiet_counts_from_switch),
	    cmocka_unit_test(test_quiet_counts_from_rate_switch),
	    cmocka_unit_test(test_window_restarts_after_down),
	    cmocka_unit_test(test_no_flapping_in_band),
	    cmocka_unit_test(test_switch_counter),
	    cmocka_unit_test(test_rules_disabled),
	    cmocka_unit_test(test_force_resets),
	    cmocka_unit_test(test_spin_len),
	    cmocka_unit_test(test_spin_backoff),
	};

	cfg_default(&dflt);
	return cmocka_run_group_tests_name("adapt", tests, NULL, NULL);
}
