/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A connection's table of calls in flight (lib/calltab.h).
 *
 * The cases: bad limits; ids are never 0, distinct, and found while their
 * call is in flight; the limit holds (-ENOBUFS) and a removed call frees a
 * place; a removed call's id is not found again (a late reply, a second
 * cancel), nor is an id never given (a forged reply); slots are reused
 * oldest first, so ids do not repeat; a generation wraps past 0; a
 * connection's end finds every call once; and deadlines on the ctx's heap
 * with a fake clock: the calls past theirs end as expired, in deadline
 * order, the rest get their replies, and late replies find nothing.
 * Also the stash that keeps a conn's freed calls for reuse.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "calltab.h"
#include "queue.h"
#include "stash.h"
#include "timer.h"

static void test_limits(void **state)
{
	struct evr__calltab t;

	(void)state;
	assert_int_equal(evr__calltab_init(&t, 0), -EINVAL);
	assert_int_equal(evr__calltab_init(&t, EVR__CALLS_MAX + 1), -EINVAL);
	assert_int_equal(evr__calltab_init(&t, EVR__CALLS_MAX), 0);
	assert_int_equal(t.cap, EVR__CALLS_MAX);
	evr__calltab_fini(&t);
	assert_int_equal(evr__calltab_init(&t, 3), 0);
	assert_int_equal(t.cap, 4);
	evr__calltab_fini(&t);
	assert_int_equal(evr__calltab_init(&t, 1), 0);
	assert_int_equal(t.cap, 1);
	evr__calltab_fini(&t);
}

static void test_add_find_take(void **state)
{
	struct evr__calltab t;
	int calls[4];
	uint32_t id[4], late;
	int i, j;

	(void)state;
	assert_int_equal(evr__calltab_init(&t, 3), 0);
	assert_null(evr__calltab_find(&t, 0));
	for (i = 0; i < 3; i++) {
		assert_int_equal(evr__calltab_add(&t, &calls[i], &id[i]), 0);
		assert_true(id[i] != 0);
		for (j = 0; j < i; j++)
			assert_true(id[i] != id[j]);
	}
	for (i = 0; i < 3; i++)
		assert_ptr_equal(evr__calltab_find(&t, id[i]), &calls[i]);
	assert_int_equal(t.n, 3);
	/* the limit, though a slot is free */
	assert_int_equal(evr__calltab_add(&t, &calls[3], &id[3]), -ENOBUFS);

	/* removed: not found again, a place is free */
	assert_ptr_equal(evr__calltab_take(&t, id[1]), &calls[1]);
	assert_null(evr__calltab_find(&t, id[1]));
	assert_null(evr__calltab_take(&t, id[1]));
	late = id[1];
	assert_int_equal(evr__calltab_add(&t, &calls[3], &id[3]), 0);
	assert_true(id[3] != late && id[3] != 0);
	assert_null(evr__calltab_find(&t, late));
	assert_ptr_equal(evr__calltab_find(&t, id[3]), &calls[3]);
	assert_ptr_equal(evr__calltab_find(&t, id[0]), &calls[0]);

	/* ids never given: their slot's generation does not match */
	assert_null(evr__calltab_find(&t, id[0] + t.cap));
	assert_null(evr__calltab_find(&t, id[0] ^ 0x80000000u));
	assert_null(evr__calltab_find(&t, UINT32_MAX));
	evr__calltab_fini(&t);
	assert_null(evr__calltab_find(&t, id[0])); /* finished: nothing */
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

/* One call at a time in a table of 8: the freed slot goes to the back, so
 * the ids of 100,000 calls are all different. */
static void test_ids_do_not_repeat(void **state)
{
	enum { N = 100000 };
	struct evr__calltab t;
	uint32_t *ids = malloc(N * sizeof(*ids));
	int call, i;

	(void)state;
	assert_non_null(ids);
	assert_int_equal(evr__calltab_init(&t, 8), 0);
	for (i = 0; i < N; i++) {
		assert_int_equal(evr__calltab_add(&t, &call, &ids[i]), 0);
		assert_true(ids[i] != 0);
		/* oldest first: the slots in turn, not the one just freed */
		assert_int_equal(ids[i] & (t.cap - 1), (uint32_t)i % t.cap);
		assert_ptr_equal(evr__calltab_take(&t, ids[i]), &call);
	}
	qsort(ids, N, sizeof(*ids), cmp_u32);
	for (i = 1; i < N; i++)
		assert_true(ids[i] != ids[i - 1]);
	assert_int_equal(t.n, 0);
	evr__calltab_fini(&t);
	free(ids);
}

/* The generation wraps to 1, never to 0: no id is 0. */
static void test_generation_wraps(void **state)
{
	struct evr__calltab t;
	uint32_t id, old;
	int call;

	(void)state;
	assert_int_equal(evr__calltab_init(&t, EVR__CALLS_MAX), 0);
	t.s[0].gen = UINT32_MAX >> t.shift; /* the largest */
	t.head = 1;			    /* slot 0 first */
	assert_int_equal(evr__calltab_add(&t, &call, &old), 0);
	assert_int_equal(old, 0xffff0000u);
	assert_ptr_equal(evr__calltab_take(&t, old), &call);
	assert_int_equal(t.s[0].gen, 1);
	/* slot 0 is at the back now: take the others' turn out of the way */
	t.head = 1;
	t.s[0].next = 0;
	t.tail = 1;
	assert_int_equal(evr__calltab_add(&t, &call, &id), 0);
	assert_int_equal(id, 0x00010000u);
	assert_null(evr__calltab_find(&t, old));
	assert_ptr_equal(evr__calltab_find(&t, id), &call);
	evr__calltab_fini(&t);
}

/* The connection ends: every call in flight is found once. */
static void test_first_drains(void **state)
{
	struct evr__calltab t;
	int calls[10], seen[10] = {0};
	uint32_t id[10], x;
	int i, n = 0;

	(void)state;
	assert_int_equal(evr__calltab_init(&t, 10), 0);
	assert_int_equal(evr__calltab_first(&t), 0);
	for (i = 0; i < 10; i++)
		assert_int_equal(evr__calltab_add(&t, &calls[i], &id[i]), 0);
	for (i = 0; i < 10; i += 3)
		assert_non_null(evr__calltab_take(&t, id[i]));
	while ((x = evr__calltab_first(&t))) {
		int *c = evr__calltab_take(&t, x);

		assert_non_null(c);
		seen[c - calls]++;
		n++;
	}
	assert_int_equal(n, 6);
	for (i = 0; i < 10; i++)
		assert_int_equal(seen[i], i % 3 ? 1 : 0);
	assert_int_equal(t.n, 0);
	evr__calltab_fini(&t);
}

/* ---- deadlines: the ctx's heap, a fake clock ---- */

struct call {
	struct evr__timer deadline;
	struct evr__calltab *tab;
	uint32_t id;
	int status; /* 1: not ended yet */
	int ends;
};

static int expired_order[8], nexpired;

static void on_deadline(struct evr__timer *tm)
{
	struct call *c = evr__container_of(tm, struct call, deadline);

	assert_ptr_equal(evr__calltab_take(c->tab, c->id), c);
	c->status = -ETIMEDOUT;
	c->ends++;
	expired_order[nexpired++] = (int)c->id;
}

/* A reply for id: the call it ends, or NULL (late, unknown). */
static struct call *reply(struct evr__timers *ts, struct evr__calltab *t,
			  uint32_t id)
{
	struct call *c = evr__calltab_take(t, id);

	if (!c)
		return NULL;
	evr__timer_stop(ts, &c->deadline);
	c->status = 0;
	c->ends++;
	return c;
}

static void test_deadlines(void **state)
{
	static const double timeout[6] = {0.5, 0.1, 0.3, 5, 0.2, 1};
	struct evr__timers ts;
	struct evr__calltab t;
	struct call calls[6];
	int i;

	(void)state;
	memset(&ts, 0, sizeof(ts));
	nexpired = 0;
	assert_int_equal(evr__timers_reserve(&ts, 6), 0);
	assert_int_equal(evr__calltab_init(&t, 6), 0);
	for (i = 0; i < 6; i++) {
		memset(&calls[i], 0, sizeof(calls[i]));
		calls[i].tab = &t;
		calls[i].status = 1;
		evr__timer_init(&calls[i].deadline, on_deadline);
		assert_int_equal(evr__calltab_add(&t, &calls[i], &calls[i].id),
				 0);
		evr__timer_start(&ts, &calls[i].deadline, 10.0 + timeout[i]);
	}
	/* at 10.25: calls 1 (0.1) and 4 (0.2) expired, in that order */
	assert_int_equal(evr__timers_run(&ts, 10.25), 2);
	assert_int_equal(nexpired, 2);
	assert_int_equal(expired_order[0], (int)calls[1].id);
	assert_int_equal(expired_order[1], (int)calls[4].id);
	/* replies: call 2 in time, call 1 late (dropped) */
	assert_ptr_equal(reply(&ts, &t, calls[2].id), &calls[2]);
	assert_null(reply(&ts, &t, calls[1].id));
	/* at 11: call 0 (0.5) expired; call 2 replied, so not; call 5 (1.0)
	 * is due exactly now */
	assert_int_equal(evr__timers_run(&ts, 11.0), 2);
	assert_int_equal(expired_order[2], (int)calls[0].id);
	assert_int_equal(expired_order[3], (int)calls[5].id);
	assert_ptr_equal(reply(&ts, &t, calls[3].id), &calls[3]);
	assert_int_equal(evr__timers_run(&ts, 100.0), 0);
	for (i = 0; i < 6; i++) {
		assert_int_equal(calls[i].ends, 1);
		assert_int_equal(calls[i].status,
				 i == 2 || i == 3 ? 0 : -ETIMEDOUT);
	}
	assert_int_equal(t.n, 0);
	assert_null(evr__timers_first(&ts));
	evr__calltab_fini(&t);
	evr__timers_free(&ts);
}

/* A conn's stash of freed calls (evr__stash): objects come back zeroed,
 * the warmest first; at most max are kept, the rest freed; the stash's
 * end frees what it kept (valgrind and ASan see no leak).  Under ASan
 * nothing is kept, so that a use after release is still caught. */
static void test_stash(void **state)
{
	struct evr__stash s = {0};
	unsigned char *p[4];
	unsigned i;

	(void)state;
	for (i = 0; i < 4; i++) {
		p[i] = evr__stash_get(&s, 40);
		assert_non_null(p[i]);
		memset(p[i], 0xa5, 40);
	}
	for (i = 0; i < 4; i++)
		evr__stash_put(&s, p[i], 3);
#ifdef EVR__STASH_OFF
	assert_int_equal(s.n, 0);
	assert_null(s.head);
#else
	assert_int_equal(s.n, 3); /* the fourth was freed */
	for (i = 3; i-- > 0;) {
		unsigned char *q = evr__stash_get(&s, 40);
		size_t j;

		assert_ptr_equal(q, p[i]); /* last in, first out */
		for (j = 0; j < 40; j++)
			assert_int_equal(q[j], 0);
		p[i] = q;
	}
	assert_int_equal(s.n, 0);
	assert_null(s.head);
	for (i = 0; i < 3; i++)
		evr__stash_put(&s, p[i], 3);
	assert_int_equal(s.n, 3);
#endif
	evr__stash_free(&s);
	assert_int_equal(s.n, 0);
	assert_null(s.head);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limits),
		cmocka_unit_test(test_add_find_take),
		cmocka_unit_test(test_ids_do_not_repeat),
		cmocka_unit_test(test_generation_wraps),
		cmocka_unit_test(test_first_drains),
		cmocka_unit_test(test_deadlines),
		cmocka_unit_test(test_stash),
	};

	return cmocka_run_group_tests_name("calltab", tests, NULL, NULL);
}
