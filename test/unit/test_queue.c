/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The queue type (lib/queue.h): an intrusive doubly linked list with a head.
 *
 * Cases: a new head is empty and yields nothing; push_tail + pop_head is
 * FIFO, push_head + pop_head is LIFO; removing from the head, the middle
 * and the tail unlinks just that element, in O(1), and leaves it alone (its
 * link empty, a second removal harmless); for_each_safe may remove the
 * element it is on; splice moves a whole queue in order; first/last/next
 * and entry recover the objects, and NULL means "none".  After every step
 * the queue is walked both ways and compared with the expected order.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "queue.h"

struct item {
	int pad; /* the link is not the first member: entry must subtract */
	struct evr__list link;
	int id;
};

#define N 8
static struct item items[N];

static void items_init(void)
{
	for (int i = 0; i < N; i++) {
		items[i].id = i;
		evr__list_init(&items[i].link);
	}
}

/* The queue holds exactly ids[0..n), in that order, walked forward with
 * for_each and next, and backward through prev; its links are consistent
 * both ways. */
static void expect(const struct evr__list *q, const int *ids, int n)
{
	const struct evr__list *pos;
	struct evr__list *it;
	int i = 0;

	evr__list_for_each(pos, q)
	{
		assert_true(i < n);
		assert_int_equal(evr__list_entry((struct evr__list *)pos,
						 struct item, link)->id,
				 ids[i]);
		assert_ptr_equal(pos->next->prev, pos);
		i++;
	}
	assert_int_equal(i, n);
	i = n;
	for (pos = q->prev; pos != q; pos = pos->prev)
		assert_int_equal(
			evr__list_entry((struct evr__list *)pos, struct item,
					link)->id,
			ids[--i]);
	assert_int_equal(i, 0);
	i = 0;
	for (it = evr__list_first(q); it; it = evr__list_next(q, it))
		assert_int_equal(evr__list_entry(it, struct item, link)->id,
				 ids[i++]);
	assert_int_equal(i, n);
	assert_int_equal(evr__list_empty(q), n == 0);
	if (n) {
		assert_int_equal(
			evr__list_first_entry(q, struct item, link)->id, ids[0]);
		assert_int_equal(evr__list_entry(evr__list_last(q),
						 struct item, link)->id,
				 ids[n - 1]);
	}
}

static void test_empty(void **state)
{
	struct evr__list q;

	(void)state;
	evr__list_init(&q);
	expect(&q, NULL, 0);
	assert_null(evr__list_first(&q));
	assert_null(evr__list_last(&q));
	assert_null(evr__list_pop_head(&q));
	assert_null(evr__list_pop_entry(&q, struct item, link));
	assert_null(evr__list_first_entry(&q, struct item, link));
	/* the entry of NULL is NULL, although link is not at offset 0 */
	assert_null(evr__list_entry(NULL, struct item, link));
}

static void test_fifo(void **state)
{
	static const int ids[] = {0, 1, 2, 3};
	struct evr__list q;
	struct item *it;

	(void)state;
	items_init();
	evr__list_init(&q);
	for (int i = 0; i < 4; i++) {
		evr__list_add_tail(&q, &items[i].link);
		expect(&q, ids, i + 1);
		assert_false(evr__list_empty(&items[i].link));
	}
	for (int i = 0; i < 4; i++) {
		it = evr__list_pop_entry(&q, struct item, link);
		assert_non_null(it);
		assert_int_equal(it->id, i);
		assert_true(evr__list_empty(&it->link)); /* alone again */
		expect(&q, ids + i + 1, 3 - i);
	}
	assert_null(evr__list_pop_head(&q));
}

static void test_lifo(void **state)
{
	static const int ids[] = {3, 2, 1, 0};
	struct evr__list q;

	(void)state;
	items_init();
	evr__list_init(&q);
	for (int i = 0; i < 4; i++)
		evr__list_add_head(&q, &items[i].link);
	expect(&q, ids, 4);
	for (int i = 3; i >= 0; i--)
		assert_int_equal(
			evr__list_pop_entry(&q, struct item, link)->id, i);
	expect(&q, NULL, 0);
}

/* Removal needs nothing but the element: middle, head, tail, last one. */
static void test_remove(void **state)
{
	static const int all[] = {0, 1, 2, 3, 4};
	static const int no2[] = {0, 1, 3, 4};
	static const int no02[] = {1, 3, 4};
	static const int no024[] = {1, 3};
	static const int only3[] = {3};
	struct evr__list q;

	(void)state;
	items_init();
	evr__list_init(&q);
	for (int i = 0; i < 5; i++)
		evr__list_add_tail(&q, &items[i].link);
	expect(&q, all, 5);
	evr__list_del(&items[2].link); /* middle */
	expect(&q, no2, 4);
	assert_true(evr__list_empty(&items[2].link));
	evr__list_del(&items[2].link); /* a second removal changes nothing */
	expect(&q, no2, 4);
	evr__list_del(&items[0].link); /* head */
	expect(&q, no02, 3);
	evr__list_del(&items[4].link); /* tail */
	expect(&q, no024, 2);
	evr__list_del(&items[1].link);
	expect(&q, only3, 1);
	evr__list_del(&items[3].link); /* the only one */
	expect(&q, NULL, 0);
	/* a removed element can be queued again, here or elsewhere */
	evr__list_add_tail(&q, &items[2].link);
	expect(&q, all + 2, 1);
}

/* for_each_safe may remove the element it is on: every other one here,
 * then the rest, including the last. */
static void test_foreach_safe_remove(void **state)
{
	static const int odd[] = {1, 3, 5, 7};
	struct evr__list q, *pos, *tmp;
	int seen = 0;

	(void)state;
	items_init();
	evr__list_init(&q);
	for (int i = 0; i < N; i++)
		evr__list_add_tail(&q, &items[i].link);
	evr__list_for_each_safe(pos, tmp, &q)
	{
		struct item *it = evr__list_entry(pos, struct item, link);

		assert_int_equal(it->id, seen++); /* each once, in order */
		if (it->id % 2 == 0)
			evr__list_del(pos);
	}
	assert_int_equal(seen, N);
	expect(&q, odd, 4);
	seen = 0;
	evr__list_for_each_safe(pos, tmp, &q)
	{
		evr__list_del(pos);
		seen++;
	}
	assert_int_equal(seen, 4);
	expect(&q, NULL, 0);
}

static void test_splice(void **state)
{
	static const int all[] = {0, 1, 2, 3, 4, 5};
	struct evr__list a, b;

	(void)state;
	items_init();
	evr__list_init(&a);
	evr__list_init(&b);
	evr__list_splice_tail(&a, &b); /* empty onto empty */
	expect(&a, NULL, 0);
	expect(&b, NULL, 0);
	for (int i = 3; i < 6; i++)
		evr__list_add_tail(&b, &items[i].link);
	evr__list_splice_tail(&a, &b); /* onto an empty queue */
	expect(&a, all + 3, 3);
	expect(&b, NULL, 0);
	for (int i = 0; i < 3; i++)
		evr__list_add_tail(&b, &items[i].link);
	evr__list_splice_tail(&b, &a); /* onto a non-empty one */
	expect(&b, all, 6);
	expect(&a, NULL, 0);
	evr__list_splice_tail(&b, &a); /* nothing to move */
	expect(&b, all, 6);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),
		cmocka_unit_test(test_fifo),
		cmocka_unit_test(test_lifo),
		cmocka_unit_test(test_remove),
		cmocka_unit_test(test_foreach_safe_remove),
		cmocka_unit_test(test_splice),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
