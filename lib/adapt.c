/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Adaptive mode rules.
 *
 * EVENT -> POLL when the completion channel is busy: either one wakeup
 * brought at least up_batch completions (a burst that polling would have
 * picked up without the interrupt and syscalls), or the wakeup rate over a
 * window of window_us reached up_rate per second.
 *
 * POLL -> EVENT after quiet_us without a single completion, during which
 * at least quiet_polls polls found nothing: when the process itself was
 * not running (preempted by another, a stopped guest CPU) the time passed
 * but nothing was watched, and the peer is not known to be quiet.  The two
 * thresholds form a hysteresis band: at a load of r wakeups per second the
 * machine goes up only when r >= up_rate and comes down only when the gaps
 * exceed quiet_us, i.e. r < 1e6 / quiet_us, so with the defaults
 * (up_rate 2000/s, quiet 1000 us) a load between 1000/s and 2000/s keeps
 * whichever mode it is in and never flaps.  The caller arms the CQs and
 * polls once more on the way down, so nothing that raced the arm is lost.
 *
 * The machine is pure: time and counts come from the caller, and its
 * configuration from evr__tune_resolve() (opts.c), which a ctx and the
 * unit tests share.
 */
#include "config.h"

#include "adapt.h"

void evr__adapt_init(struct evr__adapt *a, const struct evr__adapt_cfg *cfg,
		     uint64_t now_ns)
{
	a->cfg = *cfg;
	if (a->cfg.window_us == 0)
		a->cfg.window_us = EVR_ADAPT_WINDOW_US;
	a->polling = false;
	a->win_start_ns = now_ns;
	a->win_wakeups = 0;
	a->last_busy_ns = now_ns;
	a->empty_polls = 0;
	a->switches = 0;
}

void evr__adapt_force(struct evr__adapt *a, bool polling, uint64_t now_ns)
{
	a->polling = polling;
	a->win_start_ns = now_ns;
	a->win_wakeups = 0;
	a->last_busy_ns = now_ns;
	a->empty_polls = 0;
}

bool evr__adapt_wakeup(struct evr__adapt *a, uint64_t now_ns, unsigned ncqe)
{
	uint64_t win_ns = (uint64_t)a->cfg.window_us * 1000;
	uint64_t need;

	if (a->polling)
		return false;
	if (ncqe > 0)
		a->last_busy_ns = now_ns;
	if (now_ns < a->win_start_ns || now_ns - a->win_start_ns >= win_ns) {
		a->win_start_ns = now_ns;
		a->win_wakeups = 0;
	}
	a->win_wakeups++;
	/* wakeups needed in one window to reach up_rate per second */
	need = ((uint64_t)a->cfg.up_rate * a->cfg.window_us + 999999) / 1000000;
	if (need < 2)
		need = 2;
	if ((a->cfg.up_batch && ncqe >= a->cfg.up_batch) ||
	    (a->cfg.up_rate && a->win_wakeups >= need)) {
		a->polling = true;
		a->last_busy_ns = now_ns;
		a->empty_polls = 0;
		a->switches++;
		return true;
	}
	return false;
}

bool evr__adapt_poll(struct evr__adapt *a, uint64_t now_ns, unsigned ncqe)
{
	if (!a->polling)
		return false;
	if (ncqe > 0) {
		a->last_busy_ns = now_ns;
		a->empty_polls = 0;
		return false;
	}
	if (a->empty_polls < UINT32_MAX)
		a->empty_polls++;
	if (a->empty_polls < a->cfg.quiet_polls)
		return false;
	if (now_ns < a->last_busy_ns ||
	    now_ns - a->last_busy_ns < (uint64_t)a->cfg.quiet_us * 1000)
		return false; /* not quiet long enough (or the clock stepped) */
	a->polling = false;
	a->win_start_ns = now_ns;
	a->win_wakeups = 0;
	a->switches++;
	return true;
}

/* ---- the spin after a post ---- */

void evr__spin_init(struct evr__spin *s, uint64_t base_ns)
{
	s->base_ns = base_ns;
	s->avg_ns = 0;
	s->backoff = 0;
	s->misses = 0;
}

void evr__spin_answer(struct evr__spin *s, uint64_t took_ns, bool spun)
{
	/* one stall (the peer preempted) moves the average by a bounded
	 * amount: a quarter of at most twice the bound */
	uint64_t cap = 2 * EVR_SPIN_STRETCH * s->base_ns;

	if (spun)
		s->misses = 0;
	if (took_ns > cap)
		took_ns = cap;
	if (!s->avg_ns)
		s->avg_ns = took_ns ? took_ns : 1;
	else if (took_ns >= s->avg_ns)
		s->avg_ns += (took_ns - s->avg_ns) / 4;
	else
		s->avg_ns -= (s->avg_ns - took_ns) / 4;
}

uint64_t evr__spin_len(const struct evr__spin *s)
{
	uint64_t want = s->avg_ns + s->avg_ns / 2;

	if (want <= s->base_ns || want > EVR_SPIN_STRETCH * s->base_ns)
		return s->base_ns;
	return want;
}

uint64_t evr__spin_begin(struct evr__spin *s)
{
	if (s->backoff) {
		s->backoff--;
		return s->base_ns;
	}
	return evr__spin_len(s);
}

void evr__spin_missed(struct evr__spin *s, uint64_t spun_ns)
{
	if (spun_ns <= s->base_ns)
		return; /* the short spin: the answer is slower, as known */
	if (++s->misses < EVR_SPIN_MISSES)
		return; /* a late answer, once: the average takes it in */
	s->misses = 0;
	s->avg_ns = 0;
	s->backoff = EVR_SPIN_BACKOFF;
}
