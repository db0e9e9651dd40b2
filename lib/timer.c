/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The ctx's deadlines: one binary min-heap holding every armed timer --
 * each conn's connect, close or flush bound and its keepalive tick, and
 * whatever timer comes next.  Both driving paths read it: loop.c keeps a
 * single libev timer at the earliest deadline, and evr_ctx_timeout_ms()
 * (embed.c) returns the time to it.  Finding the next deadline is O(1)
 * and arming or stopping one O(log n), where asking every conn for its
 * timers cost the embedding host O(conns) on each turn of its loop.
 *
 * The heap is pure: times come from the caller (the loop's clock, see
 * loop.c), so the unit tests run it without a loop.  It never allocates
 * while arming: each owner reserves its slots when it is made
 * (evr__timers_reserve), so that arming cannot fail in a callback.
 */
#include "config.h"

#include "timer.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>

void evr__timer_init(struct evr__timer *t, evr__timer_fn fn)
{
	t->at = 0;
	t->idx = 0;
	t->fn = fn;
}

int evr__timers_reserve(struct evr__timers *ts, unsigned more)
{
	unsigned need = ts->reserved + more;

	if (need > ts->cap) {
		unsigned cap = ts->cap ? ts->cap : 16;
		struct evr__timer **h;

		while (cap < need)
			cap *= 2;
		h = realloc(ts->h, cap * sizeof(*h));
		if (!h)
			return -ENOMEM;
		ts->h = h;
		ts->cap = cap;
	}
	ts->reserved = need;
	return 0;
}

void evr__timers_unreserve(struct evr__timers *ts, unsigned n)
{
	assert(ts->reserved >= n);
	ts->reserved -= n;
}

void evr__timers_free(struct evr__timers *ts)
{
	free(ts->h);
	ts->h = NULL;
	ts->n = ts->cap = ts->reserved = 0;
}

static void place(struct evr__timers *ts, unsigned i, struct evr__timer *t)
{
	ts->h[i] = t;
	t->idx = i + 1;
}

static void sift_up(struct evr__timers *ts, unsigned i)
{
	struct evr__timer *t = ts->h[i];

	while (i > 0) {
		unsigned p = (i - 1) / 2;

		if (ts->h[p]->at <= t->at)
			break;
		place(ts, i, ts->h[p]);
		i = p;
	}
	place(ts, i, t);
}

static void sift_down(struct evr__timers *ts, unsigned i)
{
	struct evr__timer *t = ts->h[i];

	for (;;) {
		unsigned l = 2 * i + 1, m = i;
		double best = t->at;

		if (l < ts->n && ts->h[l]->at < best)
			m = l, best = ts->h[l]->at;
		if (l + 1 < ts->n && ts->h[l + 1]->at < best)
			m = l + 1;
		if (m == i)
			break;
		place(ts, i, ts->h[m]);
		i = m;
	}
	place(ts, i, t);
}

void evr__timer_start(struct evr__timers *ts, struct evr__timer *t, double at)
{
	if (t->idx) { /* armed: move it */
		t->at = at;
		sift_up(ts, t->idx - 1);
		sift_down(ts, t->idx - 1);
		return;
	}
	assert(ts->n < ts->reserved); /* its owner reserved a slot */
	t->at = at;
	place(ts, ts->n++, t);
	sift_up(ts, ts->n - 1);
}

void evr__timer_stop(struct evr__timers *ts, struct evr__timer *t)
{
	struct evr__timer *last;
	unsigned i;

	if (!t->idx)
		return;
	i = t->idx - 1;
	t->idx = 0;
	if (i == --ts->n)
		return;
	/* the last one fills the hole, then finds its place */
	last = ts->h[ts->n];
	place(ts, i, last);
	sift_up(ts, i);
	sift_down(ts, last->idx - 1);
}

struct evr__timer *evr__timers_first(const struct evr__timers *ts)
{
	return ts->n ? ts->h[0] : NULL;
}

unsigned evr__timers_run(struct evr__timers *ts, double now)
{
	struct evr__timer *t;
	unsigned n = 0;

	while ((t = evr__timers_first(ts)) && t->at <= now) {
		evr__timer_stop(ts, t);
		n++;
		t->fn(t); /* may arm it, or any other, again */
	}
	return n;
}
