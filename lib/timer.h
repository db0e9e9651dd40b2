/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The ctx's deadlines (timer.c): one binary min-heap per ctx.  Pure: it
 * needs nothing of verbs or libev, and its unit test links timer.c alone.
 */
#ifndef EVR_TIMER_H
#define EVR_TIMER_H

#define EVR__CONN_TIMERS 3 /* timer, ka, idle: slots a conn reserves */
struct evr__timer;
typedef void (*evr__timer_fn)(struct evr__timer *t);
struct evr__timer {
	double at;	  /* deadline, on the loop's clock (ev_now) */
	unsigned idx;	  /* 1 + its place in the heap; 0: not armed */
	evr__timer_fn fn; /* runs once when due; may arm it again */
};
struct evr__timers {
	struct evr__timer **h;
	unsigned n, cap, reserved;
};
void evr__timer_init(struct evr__timer *t, evr__timer_fn fn);
int evr__timers_reserve(struct evr__timers *ts, unsigned more);
void evr__timers_unreserve(struct evr__timers *ts, unsigned n);
void evr__timers_free(struct evr__timers *ts);
void evr__timer_start(struct evr__timers *ts, struct evr__timer *t, double at);
void evr__timer_stop(struct evr__timers *ts, struct evr__timer *t);
struct evr__timer *evr__timers_first(const struct evr__timers *ts);
unsigned evr__timers_run(struct evr__timers *ts, double now);

#endif
