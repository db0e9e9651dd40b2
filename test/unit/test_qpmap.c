/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * QP number -> owner map (lib/qpmap.c).
 *
 * The cases: an empty map finds nothing; put, get and delete of one key;
 * a second put of a key is -EEXIST and a NULL value -EINVAL; the map grows
 * past many keys and keeps every one; and a long random run of puts and
 * deletes, with keys chosen to collide (clustered, and equal modulo the
 * capacity), agrees with a plain array at every step -- which is what
 * catches a backward shift that loses or strands an entry.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "qpmap.h"

#define VAL(k) ((void *)(uintptr_t)(0x1000u + (k)))

static void test_empty(void **state)
{
	struct evr__qpmap m;

	(void)state;
	evr__qpmap_init(&m);
	assert_null(evr__qpmap_get(&m, 0));
	assert_null(evr__qpmap_get(&m, 77));
	assert_null(evr__qpmap_del(&m, 77));
	evr__qpmap_fini(&m);
}

static void test_one(void **state)
{
	struct evr__qpmap m;

	(void)state;
	evr__qpmap_init(&m);
	assert_int_equal(evr__qpmap_put(&m, 17, VAL(17)), 0);
	assert_ptr_equal(evr__qpmap_get(&m, 17), VAL(17));
	assert_null(evr__qpmap_get(&m, 18));
	assert_int_equal(evr__qpmap_put(&m, 17, VAL(1)), -EEXIST);
	assert_int_equal(evr__qpmap_put(&m, 18, NULL), -EINVAL);
	assert_ptr_equal(evr__qpmap_get(&m, 17), VAL(17));
	assert_int_equal(m.n, 1);
	assert_ptr_equal(evr__qpmap_del(&m, 17), VAL(17));
	assert_null(evr__qpmap_get(&m, 17));
	assert_null(evr__qpmap_del(&m, 17));
	assert_int_equal(m.n, 0);
	evr__qpmap_fini(&m);
}

static void test_grow(void **state)
{
	struct evr__qpmap m;
	uint32_t k;

	(void)state;
	evr__qpmap_init(&m);
	for (k = 1; k <= 20000; k++)
		assert_int_equal(evr__qpmap_put(&m, k * 3, VAL(k)), 0);
	assert_int_equal(m.n, 20000);
	assert_true(m.n * 2 <= m.mask + 1);
	for (k = 1; k <= 20000; k++) {
		assert_ptr_equal(evr__qpmap_get(&m, k * 3), VAL(k));
		assert_null(evr__qpmap_get(&m, k * 3 + 1));
	}
	evr__qpmap_fini(&m);
}

/* Against a reference: present[k] says whether key k is in the map. */
static void test_random(void **state)
{
	enum { NKEYS = 4096, STEPS = 200000 };
	static uint8_t present[NKEYS];
	struct evr__qpmap m;
	unsigned seed = 12345, step, k, n = 0;

	(void)state;
	evr__qpmap_init(&m);
	for (step = 0; step < STEPS; step++) {
		uint32_t key;

		seed = seed * 1103515245u + 12345u;
		k = (seed >> 8) % NKEYS;
		/* half the keys are multiples of 1024: the same slot in any
		 * table up to that size, long probe runs */
		key = k % 2 ? k : k * 1024u;
		if (present[k]) {
			assert_ptr_equal(evr__qpmap_del(&m, key), VAL(k));
			present[k] = 0;
			n--;
		} else {
			assert_int_equal(evr__qpmap_put(&m, key, VAL(k)), 0);
			present[k] = 1;
			n++;
		}
		assert_int_equal(m.n, n);
		if (step % 997 == 0) {
			unsigned j;

			for (j = 0; j < NKEYS; j++) {
				uint32_t kj = j % 2 ? j : j * 1024u;

				if (present[j])
					assert_ptr_equal(evr__qpmap_get(&m, kj),
							 VAL(j));
				else
					assert_null(evr__qpmap_get(&m, kj));
			}
		}
	}
	evr__qpmap_fini(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_empty),
	    cmocka_unit_test(test_one),
	    cmocka_unit_test(test_grow),
	    cmocka_unit_test(test_random),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
