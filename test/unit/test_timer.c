/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The ctx's deadline heap (lib/timer.c), with times given by the test:
 * timers fire in deadline order, each exactly once; stopping or moving
 * one anywhere in the heap keeps the order of the rest; a callback may
 * arm timers again (a periodic tick) or stop others; slots are reserved
 * ahead, so arming never allocates; and a randomised run against a
 * sorted reference.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "timer.h"
#include "queue.h"

#define N 200

struct tt {
	struct evr__timer t;
	int id;
	unsigned fired;
	double period; /* > 0: arms itself again */
	struct evr__timer *stop_other;
};

static struct evr__timers TS;
static int order[4 * N];
static unsigned norder;
static double now;

static void on_fire(struct evr__timer *t)
{
	struct tt *x = evr__container_of(t, struct tt, t);

	x->fired++;
	order[norder++] = x->id;
	if (x->period > 0)
		evr__timer_start(&TS, t, now + x->period);
	if (x->stop_other)
		evr__timer_stop(&TS, x->stop_other);
}

static int setup(void **state)
{
	(void)state;
	memset(&TS, 0, sizeof(TS));
	norder = 0;
	now = 0;
	return evr__timers_reserve(&TS, N);
}

static int teardown(void **state)
{
	(void)state;
	evr__timers_free(&TS);
	return 0;
}

static void mk(struct tt *x, int id)
{
	memset(x, 0, sizeof(*x));
	x->id = id;
	evr__timer_init(&x->t, on_fire);
}

static void test_order(void **state)
{
	static const double at[] = {5, 1, 4, 2, 3, 2.5, 0.5};
	struct tt x[7];
	unsigned i;

	(void)state;
	for (i = 0; i < 7; i++) {
		mk(&x[i], (int)i);
		evr__timer_start(&TS, &x[i].t, at[i]);
	}
	assert_ptr_equal(evr__timers_first(&TS), &x[6].t);
	/* nothing is due before its time */
	assert_int_equal(evr__timers_run(&TS, 0.49), 0);
	assert_int_equal(evr__timers_run(&TS, 2.5), 4);
	assert_int_equal(norder, 4);
	assert_int_equal(order[0], 6);
	assert_int_equal(order[1], 1);
	assert_int_equal(order[2], 3);
	assert_int_equal(order[3], 5);
	assert_false(x[1].t.idx);
	assert_true(x[4].t.idx);
	assert_int_equal(evr__timers_run(&TS, 100), 3);
	assert_int_equal(order[4], 4);
	assert_int_equal(order[5], 2);
	assert_int_equal(order[6], 0);
	for (i = 0; i < 7; i++)
		assert_int_equal(x[i].fired, 1);
	assert_null(evr__timers_first(&TS));
}

static void test_stop_and_move(void **state)
{
	struct tt x[10];
	unsigned i;

	(void)state;
	for (i = 0; i < 10; i++) {
		mk(&x[i], (int)i);
		evr__timer_start(&TS, &x[i].t, 10.0 + i);
	}
	/* stop the first, one in the middle, the last; twice is harmless */
	evr__timer_stop(&TS, &x[0].t);
	evr__timer_stop(&TS, &x[5].t);
	evr__timer_stop(&TS, &x[9].t);
	evr__timer_stop(&TS, &x[9].t);
	assert_int_equal(TS.n, 7);
	/* move one earlier, one later, one to the same place */
	evr__timer_start(&TS, &x[8].t, 1.0);
	evr__timer_start(&TS, &x[1].t, 50.0);
	evr__timer_start(&TS, &x[4].t, 14.0);
	assert_int_equal(TS.n, 7);
	assert_int_equal(evr__timers_run(&TS, 1000), 7);
	{
		static const int want[] = {8, 2, 3, 4, 6, 7, 1};

		for (i = 0; i < 7; i++)
			assert_int_equal(order[i], want[i]);
	}
	assert_int_equal(x[0].fired + x[5].fired + x[9].fired, 0);
}

static void test_callbacks_rearm_and_stop(void **state)
{
	struct tt tick, victim, late;

	(void)state;
	mk(&tick, 1);
	mk(&victim, 2);
	mk(&late, 3);
	tick.period = 1.0;
	evr__timer_start(&TS, &tick.t, 1.0);
	evr__timer_start(&TS, &victim.t, 4.5);
	evr__timer_start(&TS, &late.t, 10.0);
	for (now = 1.0; now <= 3.0; now += 1.0)
		assert_int_equal(evr__timers_run(&TS, now), 1);
	assert_int_equal(tick.fired, 3);
	/* the tick stops the victim before its time comes */
	tick.stop_other = &victim.t;
	now = 4.0;
	assert_int_equal(evr__timers_run(&TS, now), 1);
	assert_int_equal(victim.fired, 0);
	assert_int_equal(tick.fired, 4);
	/* a due periodic timer re-armed for now + period does not run twice
	 * in one pass */
	tick.stop_other = NULL;
	now = 4.5;
	assert_int_equal(evr__timers_run(&TS, now), 0);
	now = 10.0;
	assert_int_equal(evr__timers_run(&TS, now), 2);
	assert_int_equal(late.fired, 1);
	evr__timer_stop(&TS, &tick.t);
	assert_int_equal(TS.n, 0);
}

static void test_reserve(void **state)
{
	struct evr__timers ts;

	(void)state;
	memset(&ts, 0, sizeof(ts));
	assert_int_equal(evr__timers_reserve(&ts, 2), 0);
	assert_true(ts.cap >= 2);
	assert_int_equal(evr__timers_reserve(&ts, 1000), 0);
	assert_true(ts.cap >= 1002);
	evr__timers_unreserve(&ts, 1000);
	assert_int_equal(ts.reserved, 2);
	evr__timers_free(&ts);
	assert_null(ts.h);
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Random starts, moves and stops against a sorted reference. */
static void test_random(void **state)
{
	static struct tt x[N];
	double want[N];
	unsigned i, k, live = 0;
	struct evr__timer *t;

	(void)state;
	srand(7);
	for (i = 0; i < N; i++)
		mk(&x[i], (int)i);
	for (k = 0; k < 5000; k++) {
		struct tt *p = &x[rand() % N];

		if (rand() % 4 == 0)
			evr__timer_stop(&TS, &p->t);
		else
			evr__timer_start(&TS, &p->t, (rand() % 100000) / 7.0);
	}
	for (i = 0; i < N; i++)
		if (x[i].t.idx)
			want[live++] = x[i].t.at;
	assert_int_equal(TS.n, live);
	qsort(want, live, sizeof(want[0]), cmp_dbl);
	while ((t = evr__timers_first(&TS)))
		assert_true(evr__timers_run(&TS, t->at) >= 1);
	/* each fired once, in deadline order */
	assert_int_equal(norder, live);
	for (i = 0; i < live; i++) {
		assert_int_equal(x[order[i]].fired, 1);
		assert_true(x[order[i]].t.at == want[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_and_move, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_callbacks_rearm_and_stop,
					    setup, teardown),
	    cmocka_unit_test(test_reserve),
	    cmocka_unit_test_setup_teardown(test_random, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
