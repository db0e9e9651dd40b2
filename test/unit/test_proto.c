/* Wire protocol encode/decode. */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proto.h"

static void test_eager_roundtrip(void **state)
{
	uint8_t buf[EVR_HDR_SIZE + 5];
	struct evr__hdr h = {EVR_T_EAGER, 0, 7, 5};
	struct evr__limits lim = {8192, 1 << 20};
	struct evr__parsed p;
	const char *why = NULL;

	(void)state;
	evr__hdr_encode(buf, &h);
	memcpy(buf + EVR_HDR_SIZE, "hello", 5);
	assert_int_equal(evr__msg_parse(buf, sizeof(buf), &lim, &p, &why), 0);
	assert_int_equal(p.hdr.type, EVR_T_EAGER);
	assert_int_equal(p.hdr.credits, 7);
	assert_int_equal(p.hdr.len, 5);
	assert_memory_equal(p.payload, "hello", 5);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_eager_roundtrip),
	};

	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
