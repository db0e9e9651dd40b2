/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Wire protocol (lib/proto.c): message header and rendezvous bodies, and
 * the connect handshake carried in rdma_cm private data.
 *
 * Round trips for every message type and handshake kind; the little-endian
 * layout checked against literal bytes; and a table of malformed inputs,
 * each of which must be rejected with -EPROTO and a reason.  Every decoded
 * input sits in a heap buffer of exactly its length, so a decoder reading
 * past n is caught by the sanitizer build.
 */
#include "config.h"

#include <endian.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "bank.h"
#include "evrdma.h"
#include "proto.h"

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

static const struct evr__limits lim = {
    .max_eager = 8192,
    .max_msg = 1ull << 40,
};

/* Parse a copy of buf[0..n) held in a buffer of exactly n bytes. */
static int parse_exact(const void *buf, size_t n, const struct evr__limits *l,
		       struct evr__parsed *p, const char **why)
{
	void *copy = malloc(n ? n : 1);
	int rc;

	assert_non_null(copy);
	if (n)
		memcpy(copy, buf, n);
	rc = evr__msg_parse(copy, n, l, p, why);
	/* a payload pointer must point into the buffer given */
	if (rc == 0 && p->payload)
		assert_true(
		    (const uint8_t *)p->payload >= (const uint8_t *)copy &&
		    (const uint8_t *)p->payload <= (const uint8_t *)copy + n);
	if (rc == 0 && p->payload)
		p->payload =
		    (const uint8_t *)buf +
		    ((const uint8_t *)p->payload - (const uint8_t *)copy);
	free(copy);
	return rc;
}

static int hs_decode_exact(const void *buf, size_t n, struct evr__hs *hs,
			   const char **why)
{
	void *copy = malloc(n ? n : 1);
	int rc;

	assert_non_null(copy);
	if (n)
		memcpy(copy, buf, n);
	rc = evr__hs_decode(copy, n, hs, why);
	free(copy);
	return rc;
}

/* ---- message round trips ---- */

static void test_eager_roundtrip(void **state)
{
	static const size_t lens[] = {0, 1, 5, 8191, 8192};
	uint8_t buf[EVR_HDR_SIZE + 8192];
	struct evr__parsed p;
	size_t i, j;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(lens); i++) {
		struct evr__hdr h = {EVR_T_EAGER, 0, (uint16_t)(i * 1000 + 7),
				     (uint32_t)lens[i]};
		const char *why = NULL;

		evr__hdr_encode(buf, &h);
		for (j = 0; j < lens[i]; j++)
			buf[EVR_HDR_SIZE + j] = (uint8_t)(j * 31 + i);
		assert_int_equal(
		    parse_exact(buf, EVR_HDR_SIZE + lens[i], &lim, &p, &why),
		    0);
		assert_int_equal(p.hdr.type, EVR_T_EAGER);
		assert_int_equal(p.hdr.flags, 0);
		assert_int_equal(p.hdr.credits, i * 1000 + 7);
		assert_int_equal(p.hdr.len, lens[i]);
		assert_ptr_equal(p.payload, buf + EVR_HDR_SIZE);
	}
}

static void test_rndv_req_roundtrip(void **state)
{
	static const struct evr__rndv_req reqs[] = {
	    {0x00007f1234567000ull, 8193, 0xdeadbeef, 0},
	    {0x1000, 1ull << 40, 1, 0xffffffffu},
	    {UINT64_MAX - (1ull << 20), 1ull << 20, 0, 42},
	};
	uint8_t buf[EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE];
	struct evr__parsed p;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(reqs); i++) {
		struct evr__hdr h = {EVR_T_RNDV_REQ, 0, 65535,
				     EVR_RNDV_REQ_SIZE};
		const char *why = NULL;

		evr__hdr_encode(buf, &h);
		evr__rndv_req_encode(buf + EVR_HDR_SIZE, &reqs[i]);
		assert_int_equal(parse_exact(buf, sizeof(buf), &lim, &p, &why),
				 0);
		assert_int_equal(p.hdr.type, EVR_T_RNDV_REQ);
		assert_int_equal(p.hdr.credits, 65535);
		assert_true(p.rndv.addr == reqs[i].addr);
		assert_true(p.rndv.len == reqs[i].len);
		assert_int_equal(p.rndv.rkey, reqs[i].rkey);
		assert_int_equal(p.rndv.id, reqs[i].id);
	}
}

static void test_rndv_fin_roundtrip(void **state)
{
	static const struct {
		uint32_t id;
		int32_t status;
	} fins[] = {
	    {0, 0},
	    {7, -ECANCELED},
	    {0xffffffffu, -EIO},
	    {123456, -4095},
	};
	uint8_t buf[EVR_HDR_SIZE + EVR_RNDV_FIN_SIZE];
	struct evr__parsed p;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(fins); i++) {
		struct evr__hdr h = {EVR_T_RNDV_FIN, 0, 3, EVR_RNDV_FIN_SIZE};
		const char *why = NULL;

		evr__hdr_encode(buf, &h);
		evr__rndv_fin_encode(buf + EVR_HDR_SIZE, fins[i].id,
				     fins[i].status);
		assert_int_equal(parse_exact(buf, sizeof(buf), &lim, &p, &why),
				 0);
		assert_int_equal(p.hdr.type, EVR_T_RNDV_FIN);
		assert_int_equal(p.hdr.credits, 3);
		assert_int_equal(p.fin_id, fins[i].id);
		assert_int_equal(p.fin_status, fins[i].status);
	}
}

static void test_credit_roundtrip(void **state)
{
	static const uint16_t credits[] = {0, 1, 255, 256, 65535};
	uint8_t buf[EVR_HDR_SIZE];
	struct evr__parsed p;
	size_t i;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(credits); i++) {
		struct evr__hdr h = {EVR_T_CREDIT, 0, credits[i], 0};
		const char *why = NULL;

		evr__hdr_encode(buf, &h);
		assert_int_equal(parse_exact(buf, sizeof(buf), &lim, &p, &why),
				 0);
		assert_int_equal(p.hdr.type, EVR_T_CREDIT);
		assert_int_equal(p.hdr.credits, credits[i]);
		assert_int_equal(p.hdr.len, 0);
	}
}

/* ---- wire layout ---- */

static void test_msg_wire_layout(void **state)
{
	static const uint8_t hdr_bytes[] = {0x02, 0x00, 0x34, 0x12,
					    0x18, 0x00, 0x00, 0x00};
	static const uint8_t req_bytes[] = {
	    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* addr */
	    0x01, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, /* len */
	    0xef, 0xbe, 0xad, 0xde,			    /* rkey */
	    0x04, 0x03, 0x02, 0x01,			    /* id */
	};
	static const uint8_t fin_bytes[] = {0x78, 0x56, 0x34, 0x12,
					    0xfb, 0xff, 0xff, 0xff};
	struct evr__hdr h = {EVR_T_RNDV_REQ, 0, 0x1234, EVR_RNDV_REQ_SIZE};
	struct evr__rndv_req r = {0x0102030405060708ull, 0x0000000100000001ull,
				  0xdeadbeef, 0x01020304};
	uint8_t out[EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE];
	struct evr__parsed p;
	const char *why = NULL;

	(void)state;
	memset(out, 0xaa, sizeof(out));
	evr__hdr_encode(out, &h);
	assert_memory_equal(out, hdr_bytes, sizeof(hdr_bytes));
	evr__rndv_req_encode(out + EVR_HDR_SIZE, &r);
	assert_memory_equal(out + EVR_HDR_SIZE, req_bytes, sizeof(req_bytes));
	memset(out, 0xaa, sizeof(out));
	evr__rndv_fin_encode(out, 0x12345678, -5);
	assert_memory_equal(out, fin_bytes, sizeof(fin_bytes));
	assert_int_equal(out[EVR_RNDV_FIN_SIZE], 0xaa); /* no overrun */

	/* and the decoder reads the literal bytes the same way */
	memcpy(out, hdr_bytes, sizeof(hdr_bytes));
	memcpy(out + EVR_HDR_SIZE, req_bytes, sizeof(req_bytes));
	assert_int_equal(parse_exact(out, sizeof(out), &lim, &p, &why), 0);
	assert_int_equal(p.hdr.credits, 0x1234);
	assert_true(p.rndv.addr == 0x0102030405060708ull);
	assert_true(p.rndv.len == 0x0000000100000001ull);
	assert_int_equal(p.rndv.rkey, 0xdeadbeef);
	assert_int_equal(p.rndv.id, 0x01020304);
}

/* ---- malformed messages ---- */

struct bad_msg {
	const char *name;
	uint8_t type;
	uint8_t flags;
	uint32_t hdr_len;    /* the length the header claims */
	size_t body;	     /* bytes actually following the header */
	uint64_t addr, len;  /* RNDV_REQ body */
	uint32_t fin_status; /* RNDV_FIN body */
};

static const struct bad_msg bad_msgs[] = {
    {"truncated eager", EVR_T_EAGER, 0, 5, 4, 0, 0, 0},
    {"trailing bytes after eager", EVR_T_EAGER, 0, 5, 6, 0, 0, 0},
    {"empty header claims payload", EVR_T_EAGER, 0, 1, 0, 0, 0, 0},
    {"length near 4 GiB", EVR_T_EAGER, 0, 0xffffffffu, 8, 0, 0, 0},
    {"unknown type 0", 0, 0, 0, 0, 0, 0, 0},
    {"unknown type 6", 6, 0, 0, 0, 0, 0, 0},
    {"unknown type 255", 255, 0, 4, 4, 0, 0, 0},
    {"flags 2", EVR_T_EAGER, 2, 4, 4, 0, 0, 0},
    {"flags 0x80", EVR_T_CREDIT, 0x80, 0, 0, 0, 0, 0},
    {"flags 0x81 on eager", EVR_T_EAGER, 0x81, 4, 4, 0, 0, 0},
    {"flags 0xff on rndv req", EVR_T_RNDV_REQ, 0xff, 24, 24, 0x1000, 1 << 20,
     0},
    {"want and give on credit", EVR_T_CREDIT, EVR_F_WANT | EVR_F_GIVE, 4, 4, 0,
     0, 0},
    {"want on credit with payload", EVR_T_CREDIT, EVR_F_WANT, 4, 4, 0, 0, 0},
    {"give without its count", EVR_T_CREDIT, EVR_F_GIVE, 0, 0, 0, 0, 0},
    {"give on bye", EVR_T_BYE, EVR_F_GIVE, 4, 4, 0, 0, 0},
    {"give on rndv req", EVR_T_RNDV_REQ, EVR_F_GIVE, 24, 24, 0x1000, 1 << 20,
     0},
    {"want on bye", EVR_T_BYE, EVR_F_WANT, 0, 0, 0, 0, 0},
    {"want on rndv fin", EVR_T_RNDV_FIN, EVR_F_WANT, 8, 8, 0, 0, 0},
    {"want on unknown type 6", 6, EVR_F_WANT, 0, 0, 0, 0, 0},
    {"want on eager larger than max_eager", EVR_T_EAGER, EVR_F_WANT, 8193, 8193,
     0, 0, 0},
    {"want on rndv len == max_eager", EVR_T_RNDV_REQ, EVR_F_WANT, 24, 24,
     0x1000, 8192, 0},
    {"eager larger than max_eager", EVR_T_EAGER, 0, 8193, 8193, 0, 0, 0},
    {"rndv req short", EVR_T_RNDV_REQ, 0, 23, 23, 0x1000, 1 << 20, 0},
    {"rndv req long", EVR_T_RNDV_REQ, 0, 25, 25, 0x1000, 1 << 20, 0},
    {"rndv req empty", EVR_T_RNDV_REQ, 0, 0, 0, 0, 0, 0},
    {"rndv len > max_msg", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000, (1ull << 40) + 1,
     0},
    {"rndv len == max_eager", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000, 8192, 0},
    {"rndv len 0", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000, 0, 0},
    {"rndv range wraps", EVR_T_RNDV_REQ, 0, 24, 24, UINT64_MAX - 100, 1 << 20,
     0},
    {"rndv range wraps far", EVR_T_RNDV_REQ, 0, 24, 24, UINT64_MAX, 1ull << 40,
     0},
    {"rndv fin short", EVR_T_RNDV_FIN, 0, 7, 7, 0, 0, 0},
    {"rndv fin long", EVR_T_RNDV_FIN, 0, 9, 9, 0, 0, 0},
    {"rndv fin empty", EVR_T_RNDV_FIN, 0, 0, 0, 0, 0, 0},
    {"rndv fin status 1", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0, 1},
    {"rndv fin status -4096", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0, (uint32_t)-4096},
    {"rndv fin status INT32_MIN", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0, 0x80000000u},
    {"rndv fin status INT32_MAX", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0, 0x7fffffffu},
    {"credit with payload", EVR_T_CREDIT, 0, 1, 1, 0, 0, 0},
    {"bye with payload", EVR_T_BYE, 0, 1, 1, 0, 0, 0},
    {"bye claiming payload", EVR_T_BYE, 0, 8, 0, 0, 0, 0},
    {"credit with rndv-sized payload", EVR_T_CREDIT, 0, 24, 24, 0, 0, 0},
};

static size_t build_msg(uint8_t *buf, const struct bad_msg *m)
{
	struct evr__hdr h = {m->type, m->flags, 1, m->hdr_len};

	memset(buf, 0x5a, EVR_HDR_SIZE + m->body);
	evr__hdr_encode(buf, &h);
	if (m->type == EVR_T_RNDV_REQ && m->body >= EVR_RNDV_REQ_SIZE) {
		struct evr__rndv_req r = {m->addr, m->len, 7, 9};

		evr__rndv_req_encode(buf + EVR_HDR_SIZE, &r);
	} else if (m->type == EVR_T_RNDV_FIN && m->body >= EVR_RNDV_FIN_SIZE) {
		evr__rndv_fin_encode(buf + EVR_HDR_SIZE, 1,
				     (int32_t)m->fin_status);
	}
	return EVR_HDR_SIZE + m->body;
}

static void test_msg_malformed(void **state)
{
	static uint8_t buf[EVR_HDR_SIZE + 9000];
	struct evr__parsed p;
	size_t i, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(bad_msgs); i++) {
		const char *why = NULL;
		int rc;

		n = build_msg(buf, &bad_msgs[i]);
		rc = parse_exact(buf, n, &lim, &p, &why);
		if (rc != -EPROTO || !why)
			fail_msg("case \"%s\": rc %d, why %s", bad_msgs[i].name,
				 rc, why ? why : "(null)");
		/* a NULL why is allowed and still rejects */
		assert_int_equal(parse_exact(buf, n, &lim, &p, NULL), -EPROTO);
	}
}

/* The same builder produces accepted messages at every boundary, so the
 * rejections above are due to the field under test. */
static void test_msg_boundaries_accepted(void **state)
{
	static const struct bad_msg good[] = {
	    {"eager at max_eager", EVR_T_EAGER, 0, 8192, 8192, 0, 0, 0},
	    {"eager empty", EVR_T_EAGER, 0, 0, 0, 0, 0, 0},
	    {"rndv len == max_msg", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000,
	     1ull << 40, 0},
	    {"rndv len == max_eager + 1", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000,
	     8193, 0},
	    {"rndv range ends at UINT64_MAX", EVR_T_RNDV_REQ, 0, 24, 24,
	     UINT64_MAX - (1 << 20), 1 << 20, 0},
	    {"rndv fin status 0", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0, 0},
	    {"rndv fin status -4095", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0,
	     (uint32_t)-4095},
	    {"credit", EVR_T_CREDIT, 0, 0, 0, 0, 0, 0},
	    {"bye", EVR_T_BYE, 0, 0, 0, 0, 0, 0},
	    {"want on eager at max_eager", EVR_T_EAGER, EVR_F_WANT, 8192, 8192,
	     0, 0, 0},
	    {"want on empty eager", EVR_T_EAGER, EVR_F_WANT, 0, 0, 0, 0, 0},
	    {"want on rndv len == max_eager + 1", EVR_T_RNDV_REQ, EVR_F_WANT,
	     24, 24, 0x1000, 8193, 0},
	};
	static uint8_t buf[EVR_HDR_SIZE + 9000];
	struct evr__parsed p;
	size_t i, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(good); i++) {
		const char *why = NULL;
		int rc;

		n = build_msg(buf, &good[i]);
		rc = parse_exact(buf, n, &lim, &p, &why);
		if (rc != 0)
			fail_msg("case \"%s\": rc %d, why %s", good[i].name, rc,
				 why ? why : "(null)");
	}
}

static void test_msg_short(void **state)
{
	uint8_t buf[EVR_HDR_SIZE] = {EVR_T_CREDIT, 0, 0, 0, 0, 0, 0, 0};
	struct evr__parsed p;
	size_t n;

	(void)state;
	for (n = 0; n < EVR_HDR_SIZE; n++) {
		const char *why = NULL;

		assert_int_equal(parse_exact(buf, n, &lim, &p, &why), -EPROTO);
		assert_non_null(why);
	}
	assert_int_equal(parse_exact(buf, n, &lim, &p, NULL), 0);
}

/* The limits are the receiver's: a smaller max_eager rejects more. */
static void test_msg_limits_are_the_callers(void **state)
{
	const struct evr__limits small = {64, 4096, 0};
	static const struct bad_msg cases[] = {
	    {"eager 65", EVR_T_EAGER, 0, 65, 65, 0, 0, 0},
	    {"rndv 64", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000, 64, 0},
	    {"rndv 4097", EVR_T_RNDV_REQ, 0, 24, 24, 0x1000, 4097, 0},
	};
	uint8_t buf[EVR_HDR_SIZE + 100];
	struct evr__parsed p;
	size_t i, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		const char *why = NULL;

		n = build_msg(buf, &cases[i]);
		assert_int_equal(parse_exact(buf, n, &small, &p, &why),
				 -EPROTO);
		assert_non_null(why);
	}
	/* the default limits accept the 65-byte eager */
	n = build_msg(buf, &cases[0]);
	assert_int_equal(parse_exact(buf, n, &lim, &p, NULL), 0);
}

/* ---- the window flag ---- */

/* EVR_F_WANT on a data message: byte 1 is 0x01 and it reads back. */
static void test_want_on_data(void **state)
{
	static const uint8_t eager_bytes[] = {
	    0x01, 0x01, 0x05, 0x00, 0x03, 0x00, 0x00, 0x00, 'a', 'b', 'c'};
	uint8_t buf[EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE];
	struct evr__hdr h = {EVR_T_EAGER, EVR_F_WANT, 5, 3};
	struct evr__rndv_req r = {0x1000, 8193, 7, 9};
	struct evr__parsed p;
	const char *why = NULL;

	(void)state;
	assert_int_equal(EVR_F_WANT, 0x01);
	memset(buf, 0xaa, sizeof(buf));
	evr__hdr_encode(buf, &h);
	memcpy(buf + EVR_HDR_SIZE, "abc", 3);
	assert_memory_equal(buf, eager_bytes, sizeof(eager_bytes));
	assert_int_equal(
	    parse_exact(eager_bytes, sizeof(eager_bytes), &lim, &p, &why), 0);
	assert_int_equal(p.hdr.type, EVR_T_EAGER);
	assert_int_equal(p.hdr.flags, EVR_F_WANT);
	assert_int_equal(p.hdr.credits, 5);
	assert_int_equal(p.hdr.len, 3);
	assert_ptr_equal(p.payload, eager_bytes + EVR_HDR_SIZE);

	h.type = EVR_T_RNDV_REQ;
	h.len = EVR_RNDV_REQ_SIZE;
	evr__hdr_encode(buf, &h);
	evr__rndv_req_encode(buf + EVR_HDR_SIZE, &r);
	assert_int_equal(buf[1], 0x01);
	assert_int_equal(parse_exact(buf, sizeof(buf), &lim, &p, &why), 0);
	assert_int_equal(p.hdr.type, EVR_T_RNDV_REQ);
	assert_int_equal(p.hdr.flags, EVR_F_WANT);
	assert_true(p.rndv.len == 8193);
	assert_int_equal(p.rndv.id, 9);
}

/*
 * A rendezvous finish or a goodbye that parses without flags is rejected
 * with EVR_F_WANT, for that reason: they ride the reserve and must not
 * grow a window (docs/credits.md); a credit update may ask (the idle
 * cycle, test_idle_flags).  Unknown bits stay unknown on every type, the
 * window flags with them included.
 */
static void test_want_only_on_data(void **state)
{
	static const struct {
		struct bad_msg m;
		const char *why;
	} cases[] = {
	    {{"fin", EVR_T_RNDV_FIN, 0, 8, 8, 0, 0, 0},
	     "window flag on a rendezvous finish"},
	    {{"bye", EVR_T_BYE, 0, 0, 0, 0, 0, 0}, "window flag on a goodbye"},
	};
	static const uint8_t types[] = {EVR_T_EAGER, EVR_T_RNDV_REQ,
					EVR_T_RNDV_FIN, EVR_T_CREDIT,
					EVR_T_BYE};
	uint8_t buf[EVR_HDR_SIZE + 64];
	struct evr__parsed p;
	size_t i, n;
	unsigned f;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(cases); i++) {
		struct bad_msg m = cases[i].m;
		const char *why = NULL;

		n = build_msg(buf, &m);
		assert_int_equal(parse_exact(buf, n, &lim, &p, &why), 0);
		m.flags = EVR_F_WANT;
		n = build_msg(buf, &m);
		assert_int_equal(parse_exact(buf, n, &lim, &p, &why), -EPROTO);
		assert_string_equal(why, cases[i].why);
	}
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		for (f = 4; f < 256; f++) {
			struct bad_msg m = {"", types[i], (uint8_t)f, 0,
					    0,	0x1000,	  1 << 20,    0};
			const char *why = NULL;

			if (types[i] == EVR_T_EAGER)
				m.hdr_len = m.body = 4;
			else if (types[i] == EVR_T_RNDV_REQ)
				m.hdr_len = m.body = 24;
			else if (types[i] == EVR_T_RNDV_FIN)
				m.hdr_len = m.body = 8;
			n = build_msg(buf, &m);
			assert_int_equal(parse_exact(buf, n, &lim, &p, &why),
					 -EPROTO);
			/* the call flags (0x04, 0x08) and the carried FIN's
			 * (0x10) are known, and refused without their
			 * extensions */
			if (f & ~0x1fu)
				assert_string_equal(why,
						    "unknown header flags");
		}
	}
}

/*
 * The idle cycle on a credit update: EVR_F_WANT asks (no body),
 * EVR_F_GIVE gives back a u32 count in a 4-byte body, 1..65535; both
 * together, a count out of range, a body of another size, or EVR_F_GIVE on
 * any other type is -EPROTO with its reason.
 */
static void test_idle_flags(void **state)
{
	static const uint8_t give_bytes[] = {0x04, 0x02, 0x03, 0x00, 0x04, 0x00,
					     0x00, 0x00, 0x06, 0x00, 0x00, 0x00};
	static const uint8_t types[] = {EVR_T_EAGER, EVR_T_RNDV_REQ,
					EVR_T_RNDV_FIN, EVR_T_BYE};
	static const uint32_t bad_counts[] = {0, 0x10000, 0xffffffffu};
	uint8_t buf[EVR_HDR_SIZE + 64];
	struct evr__hdr h = {EVR_T_CREDIT, EVR_F_WANT, 2, 0};
	struct evr__parsed p;
	const char *why = NULL;
	size_t i, n;

	(void)state;
	assert_int_equal(EVR_F_GIVE, 0x02);
	evr__hdr_encode(buf, &h);
	assert_int_equal(parse_exact(buf, EVR_HDR_SIZE, &lim, &p, &why), 0);
	assert_int_equal(p.hdr.flags, EVR_F_WANT);
	assert_int_equal(p.hdr.credits, 2);
	assert_int_equal(p.give, 0);

	assert_int_equal(
	    parse_exact(give_bytes, sizeof(give_bytes), &lim, &p, &why), 0);
	assert_int_equal(p.hdr.type, EVR_T_CREDIT);
	assert_int_equal(p.hdr.flags, EVR_F_GIVE);
	assert_int_equal(p.hdr.credits, 3);
	assert_int_equal(p.give, 6);
	memcpy(buf, give_bytes, sizeof(give_bytes));
	buf[8] = 0xff, buf[9] = 0xff; /* the largest window there is */
	assert_int_equal(parse_exact(buf, sizeof(give_bytes), &lim, &p, &why),
			 0);
	assert_int_equal(p.give, 0xffff);

	for (i = 0; i < ARRAY_SIZE(bad_counts); i++) {
		memcpy(buf, give_bytes, sizeof(give_bytes));
		buf[8] = (uint8_t)bad_counts[i];
		buf[9] = (uint8_t)(bad_counts[i] >> 8);
		buf[10] = (uint8_t)(bad_counts[i] >> 16);
		buf[11] = (uint8_t)(bad_counts[i] >> 24);
		assert_int_equal(
		    parse_exact(buf, sizeof(give_bytes), &lim, &p, &why),
		    -EPROTO);
		assert_string_equal(
		    why, "give-back of no credits or beyond any window");
	}
	for (n = 0; n < 9; n++) {
		struct bad_msg m = {"", EVR_T_CREDIT, EVR_F_GIVE, (uint32_t)n,
				    n,	0,	      0,	  0};

		if (n == EVR_GIVE_SIZE)
			continue;
		assert_int_equal(
		    parse_exact(buf, build_msg(buf, &m), &lim, &p, &why),
		    -EPROTO);
		assert_string_equal(why, "give-back of the wrong size");
	}
	{
		struct bad_msg m = {"", EVR_T_CREDIT, EVR_F_WANT | EVR_F_GIVE,
				    4,	4,	      0,
				    0,	0};

		n = build_msg(buf, &m);
		assert_int_equal(parse_exact(buf, n, &lim, &p, &why), -EPROTO);
		assert_string_equal(
		    why, "credit update that both asks and gives back");
	}
	for (i = 0; i < ARRAY_SIZE(types); i++) {
		struct bad_msg m = {"", types[i], EVR_F_GIVE, 4, 4, 0, 0, 0};

		n = build_msg(buf, &m);
		assert_int_equal(parse_exact(buf, n, &lim, &p, &why), -EPROTO);
		assert_string_equal(
		    why,
		    "give-back flag on a message other than a credit update");
	}
}

/* ---- handshake ---- */

static void fill_hs(struct evr__hs *hs, uint8_t kind, uint8_t ulen)
{
	unsigned i;

	memset(hs, 0, sizeof(*hs));
	hs->kind = kind;
	hs->user_len = ulen;
	hs->recv_depth = 64;
	hs->max_eager = 8192;
	hs->max_msg = 64u << 20;
	for (i = 0; i < ulen && i < EVR_HS_USER_MAX; i++)
		hs->user[i] = (uint8_t)(0xa0 + i);
}

static void test_hs_roundtrip(void **state)
{
	static const uint8_t kinds[] = {EVR_HS_REQ, EVR_HS_REP, EVR_HS_REJ};
	static const uint8_t ulens[] = {0, 1, 31, 32};
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs in, out;
	size_t i, j, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(kinds); i++) {
		for (j = 0; j < ARRAY_SIZE(ulens); j++) {
			const char *why = NULL;

			fill_hs(&in, kinds[i], ulens[j]);
			in.recv_depth = (uint16_t)(4 + i * 1000 + j);
			/* no window, the smallest, the largest, one between */
			if (kinds[i] != EVR_HS_REJ && j == 1)
				in.init_window = EVR_HS_MIN_DEPTH;
			else if (kinds[i] != EVR_HS_REJ && j == 2)
				in.init_window = in.recv_depth;
			else if (kinds[i] != EVR_HS_REJ && j == 3)
				in.init_window = (uint16_t)((in.recv_depth +
							     EVR_HS_MIN_DEPTH) /
							    2);
			n = evr__hs_encode(buf, &in);
			assert_int_equal(n, EVR_HS_FIXED + ulens[j]);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.kind, kinds[i]);
			assert_int_equal(out.user_len, ulens[j]);
			assert_int_equal(out.recv_depth, in.recv_depth);
			assert_int_equal(out.init_window, in.init_window);
			assert_int_equal(out.max_eager, in.max_eager);
			assert_true(out.max_msg == in.max_msg);
			assert_memory_equal(out.user, in.user, ulens[j]);
		}
	}
}

static void test_hs_wire_layout(void **state)
{
	/* clang-format off */
	static const uint8_t want[EVR_HS_FIXED + 3] = {
		0x45, 0x56, 0x52, 0x31,	/* magic "EVR1" */
		0x01,			/* version */
		0x02,			/* kind: REP */
		0x03,			/* user_len */
		0x00,			/* reserved */
		0x34, 0x12,		/* recv_depth */
		0x00, 0x00,		/* init_window 0: all at once */
		0x00, 0x20, 0x00, 0x00,	/* max_eager 8192 */
		0x08, 0x07, 0x06, 0x05,	/* max_msg */
		0x04, 0x03, 0x02, 0x01,
		'a', 'b', 'c',		/* user data */
	};
	/* clang-format on */
	uint8_t buf[EVR_HS_MAX + 1];
	struct evr__hs hs;
	size_t n;

	(void)state;
	memset(&hs, 0, sizeof(hs));
	hs.kind = EVR_HS_REP;
	hs.user_len = 3;
	hs.recv_depth = 0x1234;
	hs.max_eager = 8192;
	hs.max_msg = 0x0102030405060708ull;
	memcpy(hs.user, "abc", 3);
	memset(buf, 0xee, sizeof(buf));
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(n, sizeof(want));
	assert_memory_equal(buf, want, sizeof(want));
	assert_int_equal(buf[n], 0xee); /* nothing written past the end */
}

/* Encoding clamps user_len to EVR_HS_USER_MAX. */
static void test_hs_encode_clamps_user(void **state)
{
	uint8_t buf[EVR_HS_MAX + 8];
	struct evr__hs hs, out;
	size_t n;

	(void)state;
	fill_hs(&hs, EVR_HS_REQ, EVR_HS_USER_MAX);
	hs.user_len = 200;
	memset(buf, 0xee, sizeof(buf));
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(n, EVR_HS_MAX);
	assert_int_equal(buf[6], EVR_HS_USER_MAX);
	assert_int_equal(buf[EVR_HS_MAX], 0xee);
	assert_int_equal(hs_decode_exact(buf, n, &out, NULL), 0);
	assert_int_equal(out.user_len, EVR_HS_USER_MAX);
}

/* rdma_cm pads private data: more bytes than the handshake needs. */
static void test_hs_accepts_padding(void **state)
{
	static const size_t pads[] = {1, 8, 32, 196 - EVR_HS_FIXED};
	uint8_t buf[256];
	struct evr__hs hs, out;
	size_t i, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(pads); i++) {
		const char *why = NULL;

		fill_hs(&hs, EVR_HS_REQ, 5);
		memset(buf, 0x77, sizeof(buf)); /* padding need not be zero */
		n = evr__hs_encode(buf, &hs);
		assert_int_equal(hs_decode_exact(buf, n + pads[i], &out, &why),
				 0);
		assert_int_equal(out.user_len, 5);
		assert_memory_equal(out.user, hs.user, 5);
		/* bytes past user_len are not user data */
		assert_int_equal(out.user[5], 0);
	}
	/* no user data, padded */
	fill_hs(&hs, EVR_HS_REP, 0);
	memset(buf, 0, sizeof(buf));
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(hs_decode_exact(buf, n + 32, &out, NULL), 0);
	assert_int_equal(out.user_len, 0);
}

/* A reject carries a reason only: its limits are not checked. */
static void test_hs_reject_needs_no_limits(void **state)
{
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs, out;
	size_t n;

	(void)state;
	memset(&hs, 0, sizeof(hs));
	hs.kind = EVR_HS_REJ;
	hs.user_len = 4;
	memcpy(hs.user, "busy", 4);
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(hs_decode_exact(buf, n, &out, NULL), 0);
	assert_int_equal(out.kind, EVR_HS_REJ);
	assert_memory_equal(out.user, "busy", 4);
}

struct bad_hs {
	const char *name;
	size_t off; /* byte to overwrite in a valid 24+8 byte REQ */
	size_t width;
	uint64_t val;
	int dn; /* bytes to add to (or drop from) the valid length */
};

static const struct bad_hs bad_hss[] = {
    {"bad magic", 0, 4, 0x31525646, 0},
    {"magic byte-swapped", 0, 4, 0x45565231, 0},
    {"version 0", 4, 1, 0, 0},
    {"version 2", 4, 1, 2, 0},
    {"kind 0", 5, 1, 0, 0},
    {"kind 4", 5, 1, 4, 0},
    {"user_len 33", 6, 1, 33, 25},
    {"user_len 255", 6, 1, 255, 300 - 32},
    {"user data truncated", 6, 1, 9, 0},
    {"init window 1", 10, 2, 1, 0},
    {"init window 3", 10, 2, EVR_HS_MIN_DEPTH - 1, 0},
    {"init window 0x8000 (depth 64)", 11, 1, 0x80, 0},
    {"init window 65 (depth 64)", 10, 2, 65, 0},
    {"init window 65535 (depth 64)", 10, 2, 65535, 0},
    {"depth 0", 8, 2, 0, 0},
    {"depth 3", 8, 2, EVR_HS_MIN_DEPTH - 1, 0},
    {"eager 0", 12, 4, 0, 0},
    {"eager 63", 12, 4, EVR_HS_MIN_EAGER - 1, 0},
    {"eager 1 MiB + 1", 12, 4, EVR_HS_MAX_EAGER + 1, 0},
    {"eager 4 GiB - 1", 12, 4, 0xffffffffu, 0},
    {"max_msg < eager", 16, 8, 8191, 0},
    {"max_msg 0", 16, 8, 0, 0},
};

static void put_le(uint8_t *p, size_t width, uint64_t v)
{
	size_t i;

	for (i = 0; i < width; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static void test_hs_malformed(void **state)
{
	uint8_t buf[512];
	struct evr__hs hs, out;
	size_t i, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(bad_hss); i++) {
		const char *why = NULL;
		int rc;

		/* a valid REQ with 8 user bytes: 32 bytes ... */
		fill_hs(&hs, EVR_HS_REQ, 8);
		memset(buf, 0, sizeof(buf));
		n = evr__hs_encode(buf, &hs);
		assert_int_equal(hs_decode_exact(buf, n, &out, NULL), 0);
		/* ... with one field broken */
		put_le(buf + bad_hss[i].off, bad_hss[i].width, bad_hss[i].val);
		n = (size_t)((long)n + bad_hss[i].dn);
		rc = hs_decode_exact(buf, n, &out, &why);
		if (rc != -EPROTO || !why)
			fail_msg("case \"%s\": rc %d, why %s", bad_hss[i].name,
				 rc, why ? why : "(null)");
		assert_int_equal(hs_decode_exact(buf, n, &out, NULL), -EPROTO);
	}
}

/* Each limit at its boundary is accepted. */
static void test_hs_boundaries_accepted(void **state)
{
	static const struct bad_hs ok[] = {
	    {"depth 4", 8, 2, EVR_HS_MIN_DEPTH, 0},
	    {"depth 65535", 8, 2, 65535, 0},
	    {"init window 4", 10, 2, EVR_HS_MIN_DEPTH, 0},
	    {"init window 64 (depth 64)", 10, 2, 64, 0},
	    {"eager 64 (max_msg above)", 12, 4, EVR_HS_MIN_EAGER, 0},
	    {"max_msg == eager", 16, 8, 8192, 0},
	};
	uint8_t buf[64];
	struct evr__hs hs, out;
	size_t i, n;

	(void)state;
	for (i = 0; i < ARRAY_SIZE(ok); i++) {
		const char *why = NULL;
		int rc;

		fill_hs(&hs, EVR_HS_REQ, 8);
		n = evr__hs_encode(buf, &hs);
		put_le(buf + ok[i].off, ok[i].width, ok[i].val);
		rc = hs_decode_exact(buf, n, &out, &why);
		if (rc != 0)
			fail_msg("case \"%s\": rc %d, why %s", ok[i].name, rc,
				 why ? why : "(null)");
	}
	/* the largest eager size, with a max_msg to match */
	fill_hs(&hs, EVR_HS_REP, 0);
	hs.max_eager = EVR_HS_MAX_EAGER;
	hs.max_msg = EVR_HS_MAX_EAGER;
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(hs_decode_exact(buf, n, &out, NULL), 0);
}

/*
 * The initial window against the depth it is announced with, at both ends
 * of the legal range and one past each, for depths on both sides of where
 * the reserve changes; each rejection for its own reason.
 */
static void test_hs_window_range(void **state)
{
	static const uint16_t depths[] = {EVR_HS_MIN_DEPTH, 7, 8, 64, 65535};
	static const uint8_t kinds[] = {EVR_HS_REQ, EVR_HS_REP};
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs, out;
	size_t i, k, n;

	(void)state;
	for (k = 0; k < ARRAY_SIZE(kinds); k++) {
		for (i = 0; i < ARRAY_SIZE(depths); i++) {
			uint16_t d = depths[i];
			uint16_t lo = (uint16_t)evr__bank_min_window(d);
			const char *why = NULL;

			assert_true(lo >= EVR_HS_MIN_DEPTH && lo <= d);
			fill_hs(&hs, kinds[k], 0);
			hs.recv_depth = d;
			/* accepted: 0, the minimum, the depth */
			hs.init_window = 0;
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.init_window, 0);
			hs.init_window = lo;
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.init_window, lo);
			hs.init_window = d;
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.init_window, d);
			/* rejected: one below the minimum, 1, above the depth
			 */
			hs.init_window = (uint16_t)(lo - 1);
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(
			    why,
			    "peer initial window below the minimum window");
			hs.init_window = 1;
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(
			    why,
			    "peer initial window below the minimum window");
			if (d == 65535)
				continue;
			hs.init_window = (uint16_t)(d + 1);
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(
			    why, "peer initial window above its receive depth");
			hs.init_window = 65535;
			n = evr__hs_encode(buf, &hs);
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(
			    why, "peer initial window above its receive depth");
		}
	}
}

/* A reject lends nothing: a window in it is -EPROTO; byte 7 stays
 * reserved in every kind. */
static void test_hs_reject_and_reserved(void **state)
{
	static const uint8_t kinds[] = {EVR_HS_REQ, EVR_HS_REP, EVR_HS_REJ};
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs, out;
	const char *why = NULL;
	size_t i, n;

	(void)state;
	fill_hs(&hs, EVR_HS_REJ, 4);
	hs.init_window = 8;
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(hs_decode_exact(buf, n, &out, &why), -EPROTO);
	assert_string_equal(why, "reject with an initial window");
	hs.init_window = 0;
	n = evr__hs_encode(buf, &hs);
	assert_int_equal(hs_decode_exact(buf, n, &out, &why), 0);

	for (i = 0; i < ARRAY_SIZE(kinds); i++) {
		fill_hs(&hs, kinds[i], 0);
		if (kinds[i] != EVR_HS_REJ)
			hs.init_window = 8;
		n = evr__hs_encode(buf, &hs);
		assert_int_equal(buf[7], 0);
		assert_int_equal(hs_decode_exact(buf, n, &out, &why), 0);
		/* the features byte: known bits only, none on a reject;
		 * a request's unknown bits are dropped (a newer peer's
		 * offers) */
		buf[7] = 0x08;
		if (kinds[i] == EVR_HS_REQ) {
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.features, 0);
			buf[7] = 0x80 | EVR_HS_F_FIN;
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.features, EVR_HS_F_FIN);
		} else {
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(why,
					    "unknown handshake feature bits");
			buf[7] = 0x80;
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(why,
					    "unknown handshake feature bits");
		}
		buf[7] = EVR_HS_F_CALLS;
		if (kinds[i] == EVR_HS_REJ) {
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 -EPROTO);
			assert_string_equal(why, "reject with features");
		} else {
			assert_int_equal(hs_decode_exact(buf, n, &out, &why),
					 0);
			assert_int_equal(out.features, EVR_HS_F_CALLS);
		}
	}
}

/*
 * The calls extension in the handshake: a request offers it, a reply
 * carries it only when the request did and the replier speaks it, a
 * reject never (its encoder writes 0 whatever it is given), and a reply
 * carrying what was not offered is caught.
 */
static void test_hs_features(void **state)
{
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs req, rep, out;
	const char *why = NULL;
	size_t n;

	(void)state;
	fill_hs(&req, EVR_HS_REQ, 3);
	req.features = EVR_HS_F_CALLS;
	n = evr__hs_encode(buf, &req);
	assert_int_equal(buf[7], EVR_HS_F_CALLS);
	assert_int_equal(hs_decode_exact(buf, n, &out, &why), 0);
	assert_int_equal(out.features, EVR_HS_F_CALLS);
	assert_int_equal(evr__hs_reply_features(&out, EVR_HS_F_CALLS),
			 EVR_HS_F_CALLS);
	assert_int_equal(evr__hs_reply_features(&out, 0), 0);
	req.features = 0; /* an older peer's request */
	assert_int_equal(evr__hs_reply_features(&req, EVR_HS_F_CALLS), 0);

	fill_hs(&rep, EVR_HS_REP, 0);
	rep.features = EVR_HS_F_CALLS;
	assert_true(evr__hs_features_ok(EVR_HS_F_CALLS, &rep));
	assert_false(evr__hs_features_ok(0, &rep));
	rep.features = 0;
	assert_true(evr__hs_features_ok(EVR_HS_F_CALLS, &rep));

	fill_hs(&rep, EVR_HS_REJ, 2);
	rep.features = EVR_HS_F_CALLS;
	n = evr__hs_encode(buf, &rep);
	assert_int_equal(buf[7], 0);
	assert_int_equal(hs_decode_exact(buf, n, &out, &why), 0);
	assert_int_equal(out.features, 0);
}

/* ---- calls: EVR_F_CALL, EVR_F_REPLY, CANCEL ---- */

static const struct evr__limits lim_calls = {
    .max_eager = 8192,
    .max_msg = 1ull << 40,
    .agreed = EVR_HS_F_CALLS,
};

/* A call message: header, id, then body of blen bytes; its length. */
static size_t call_msg(uint8_t *buf, uint8_t type, uint8_t flags,
		       uint32_t id, const void *body, size_t blen)
{
	struct evr__hdr h = {type, flags, 9,
			     (uint32_t)(EVR_CALL_ID_SIZE + blen)};

	evr__hdr_encode(buf, &h);
	evr__call_id_encode(buf + EVR_HDR_SIZE, id);
	if (blen)
		memcpy(buf + EVR_HDR_SIZE + EVR_CALL_ID_SIZE, body, blen);
	return EVR_HDR_SIZE + EVR_CALL_ID_SIZE + blen;
}

static void test_call_roundtrip(void **state)
{
	static const uint8_t flags[] = {EVR_F_CALL, EVR_F_REPLY,
					EVR_F_CALL | EVR_F_WANT};
	static const size_t lens[] = {0, 1, 100, 8188};
	uint8_t buf[EVR_HDR_SIZE + 8192], body[8192];
	uint8_t rb[EVR_RNDV_REQ_SIZE];
	struct evr__rndv_req r = {0x7f0000001000ull, 8189, 0x1234, 77};
	struct evr__parsed p;
	const char *why = NULL;
	size_t i, j, n;

	(void)state;
	for (j = 0; j < sizeof(body); j++)
		body[j] = (uint8_t)(j * 7 + 1);
	for (i = 0; i < ARRAY_SIZE(flags); i++) {
		for (j = 0; j < ARRAY_SIZE(lens); j++) {
			n = call_msg(buf, EVR_T_EAGER, flags[i],
				     0x80000001u + (uint32_t)j, body, lens[j]);
			assert_int_equal(
			    parse_exact(buf, n, &lim_calls, &p, &why), 0);
			assert_int_equal(p.hdr.flags, flags[i]);
			assert_int_equal(p.call_id, 0x80000001u + j);
			assert_int_equal(p.plen, lens[j]);
			assert_ptr_equal(p.payload,
					 buf + EVR_HDR_SIZE + EVR_CALL_ID_SIZE);
			if (lens[j])
				assert_memory_equal(p.payload, body, lens[j]);
		}
		/* rendezvous: from max_eager - 4 + 1 bytes on */
		evr__rndv_req_encode(rb, &r);
		n = call_msg(buf, EVR_T_RNDV_REQ, flags[i], 5, rb, sizeof(rb));
		assert_int_equal(parse_exact(buf, n, &lim_calls, &p, &why), 0);
		assert_int_equal(p.call_id, 5);
		assert_int_equal(p.rndv.len, 8189);
		assert_int_equal(p.rndv.addr, r.addr);
		assert_int_equal(p.rndv.rkey, r.rkey);
		assert_int_equal(p.rndv.id, 77);
	}
	/* a cancel */
	{
		struct evr__hdr h = {EVR_T_CANCEL, 0, 3, EVR_CALL_ID_SIZE};

		evr__hdr_encode(buf, &h);
		evr__call_id_encode(buf + EVR_HDR_SIZE, 0xffffffffu);
		assert_int_equal(parse_exact(buf, EVR_HDR_SIZE + 4, &lim_calls,
					     &p, &why),
				 0);
		assert_int_equal(p.hdr.type, EVR_T_CANCEL);
		assert_int_equal(p.call_id, 0xffffffffu);
		assert_int_equal(p.hdr.credits, 3);
	}
	/* a plain message on a calls connection has no id */
	{
		struct evr__hdr h = {EVR_T_EAGER, 0, 0, 3};

		evr__hdr_encode(buf, &h);
		memcpy(buf + EVR_HDR_SIZE, "abc", 3);
		assert_int_equal(parse_exact(buf, EVR_HDR_SIZE + 3, &lim_calls,
					     &p, &why),
				 0);
		assert_int_equal(p.call_id, 0);
		assert_int_equal(p.plen, 3);
	}
}

static void expect_proto(const void *buf, size_t n,
			 const struct evr__limits *l, const char *reason)
{
	struct evr__parsed p;
	const char *why = NULL;

	assert_int_equal(parse_exact(buf, n, l, &p, &why), -EPROTO);
	assert_string_equal(why, reason);
}

static void test_call_rejects(void **state)
{
	static const uint8_t zeros[8189];
	uint8_t buf[EVR_HDR_SIZE + 8200], rb[EVR_RNDV_REQ_SIZE];
	struct evr__rndv_req r = {0x1000, 8188, 1, 1};
	struct evr__hdr h;
	size_t n;

	(void)state;
	/* not negotiated */
	n = call_msg(buf, EVR_T_EAGER, EVR_F_CALL, 1, "x", 1);
	expect_proto(buf, n, &lim, "call flag without the calls extension");
	n = call_msg(buf, EVR_T_EAGER, EVR_F_REPLY, 1, "x", 1);
	expect_proto(buf, n, &lim, "call flag without the calls extension");
	h = (struct evr__hdr){EVR_T_CANCEL, 0, 0, EVR_CALL_ID_SIZE};
	evr__hdr_encode(buf, &h);
	evr__call_id_encode(buf + EVR_HDR_SIZE, 1);
	expect_proto(buf, EVR_HDR_SIZE + 4, &lim,
		     "cancel without the calls extension");
	/* both flags, id 0, flags on control messages */
	n = call_msg(buf, EVR_T_EAGER, EVR_F_CALL | EVR_F_REPLY, 1, "x", 1);
	expect_proto(buf, n, &lim_calls, "message both a call and a reply");
	n = call_msg(buf, EVR_T_EAGER, EVR_F_CALL, 0, "x", 1);
	expect_proto(buf, n, &lim_calls, "call id 0");
	n = call_msg(buf, EVR_T_CREDIT, EVR_F_REPLY, 1, NULL, 0);
	expect_proto(buf, n, &lim_calls,
		     "call flag on a message other than data");
	n = call_msg(buf, EVR_T_BYE, EVR_F_CALL, 1, NULL, 0);
	expect_proto(buf, n, &lim_calls,
		     "call flag on a message other than data");
	/* shorter than the id */
	h = (struct evr__hdr){EVR_T_EAGER, EVR_F_CALL, 0, 3};
	evr__hdr_encode(buf, &h);
	expect_proto(buf, EVR_HDR_SIZE + 3, &lim_calls,
		     "call message shorter than its id");
	/* the id counts against the receive buffer */
	n = call_msg(buf, EVR_T_EAGER, EVR_F_CALL, 1, zeros, 8189);
	expect_proto(buf, n, &lim_calls,
		     "eager payload larger than the receive buffer");
	/* a rendezvous call that would have fitted eager */
	evr__rndv_req_encode(rb, &r);
	n = call_msg(buf, EVR_T_RNDV_REQ, EVR_F_CALL, 1, rb, sizeof(rb));
	expect_proto(buf, n, &lim_calls,
		     "rendezvous length small enough to be eager");
	/* a rendezvous call without its id's room */
	h = (struct evr__hdr){EVR_T_RNDV_REQ, EVR_F_CALL, 0,
			      EVR_RNDV_REQ_SIZE};
	evr__hdr_encode(buf, &h);
	memcpy(buf + EVR_HDR_SIZE, rb, sizeof(rb));
	expect_proto(buf, EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE, &lim_calls,
		     "rendezvous request of the wrong size");
	/* cancels: no flags, exactly an id, not 0 */
	h = (struct evr__hdr){EVR_T_CANCEL, EVR_F_WANT, 0, EVR_CALL_ID_SIZE};
	evr__hdr_encode(buf, &h);
	evr__call_id_encode(buf + EVR_HDR_SIZE, 1);
	expect_proto(buf, EVR_HDR_SIZE + 4, &lim_calls, "flag on a cancel");
	h = (struct evr__hdr){EVR_T_CANCEL, 0, 0, 8};
	evr__hdr_encode(buf, &h);
	expect_proto(buf, EVR_HDR_SIZE + 8, &lim_calls,
		     "cancel of the wrong size");
	h = (struct evr__hdr){EVR_T_CANCEL, 0, 0, EVR_CALL_ID_SIZE};
	evr__hdr_encode(buf, &h);
	evr__call_id_encode(buf + EVR_HDR_SIZE, 0);
	expect_proto(buf, EVR_HDR_SIZE + 4, &lim_calls, "call id 0");
	/* an unknown flag is still unknown */
	h = (struct evr__hdr){EVR_T_EAGER, 0x20, 0, 0};
	evr__hdr_encode(buf, &h);
	expect_proto(buf, EVR_HDR_SIZE, &lim_calls, "unknown header flags");
}

/* ---- FINs carried by data (EVR_F_FIN) ---- */

static const struct evr__limits lim_fin = {
    .max_eager = 8192,
    .max_msg = 1ull << 40,
    .agreed = EVR_HS_F_CALLS | EVR_HS_F_FIN,
};

/* A data message with flags | EVR_F_FIN: [call id] FIN(fid, st) body;
 * returns its size. */
static size_t fin_msg(uint8_t *buf, uint8_t type, uint8_t flags,
		      uint32_t cid, uint32_t fid, int32_t st, const void *body,
		      size_t blen)
{
	uint32_t idlen = (flags & (EVR_F_CALL | EVR_F_REPLY)) ? 4 : 0;
	struct evr__hdr h = {type, (uint8_t)(flags | EVR_F_FIN), 3,
			     (uint32_t)(idlen + EVR_RNDV_FIN_SIZE + blen)};

	evr__hdr_encode(buf, &h);
	if (idlen)
		evr__call_id_encode(buf + EVR_HDR_SIZE, cid);
	evr__rndv_fin_encode(buf + EVR_HDR_SIZE + idlen, fid, st);
	if (blen)
		memmove(buf + EVR_HDR_SIZE + idlen + EVR_RNDV_FIN_SIZE, body,
			blen);
	return EVR_HDR_SIZE + h.len;
}

static void test_fin_carried(void **state)
{
	static uint8_t big[8192];
	uint8_t buf[EVR_HDR_SIZE + 8200], rb[EVR_RNDV_REQ_SIZE];
	struct evr__rndv_req r = {0x7f0000001000ull, 9000, 0x1234, 77};
	struct evr__parsed p;
	const char *why = NULL;
	size_t n;
	int t;

	(void)state;
	/* eager: the FIN, then the payload */
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 5, -EIO, "abc", 3);
	assert_int_equal(parse_exact(buf, n, &lim_fin, &p, &why), 0);
	assert_true(p.fin);
	assert_int_equal(p.fin_id, 5);
	assert_int_equal(p.fin_status, -EIO);
	assert_int_equal(p.plen, 3);
	assert_memory_equal(p.payload, "abc", 3);
	assert_int_equal(p.hdr.credits, 3);
	/* a call's id first; an empty payload */
	n = fin_msg(buf, EVR_T_EAGER, EVR_F_CALL | EVR_F_WANT, 9, 6, 0, NULL,
		    0);
	assert_int_equal(parse_exact(buf, n, &lim_fin, &p, &why), 0);
	assert_int_equal(p.call_id, 9);
	assert_true(p.fin);
	assert_int_equal(p.fin_id, 6);
	assert_int_equal(p.plen, 0);
	/* the FIN counts against the receive buffer */
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 1, 0, big, 8184);
	assert_int_equal(parse_exact(buf, n, &lim_fin, &p, &why), 0);
	assert_int_equal(p.plen, 8184);
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 1, 0, big, 8185);
	expect_proto(buf, n, &lim_fin,
		     "eager payload larger than the receive buffer");
	/* a rendezvous request: the FIN, then the request */
	evr__rndv_req_encode(rb, &r);
	n = fin_msg(buf, EVR_T_RNDV_REQ, 0, 0, 7, 0, rb, sizeof(rb));
	assert_int_equal(parse_exact(buf, n, &lim_fin, &p, &why), 0);
	assert_true(p.fin);
	assert_int_equal(p.fin_id, 7);
	assert_int_equal(p.rndv.len, 9000);
	assert_int_equal(p.rndv.id, 77);
	assert_int_equal(p.rndv.rkey, 0x1234);
	n = fin_msg(buf, EVR_T_RNDV_REQ, EVR_F_REPLY, 4, 8, 0, rb,
		    sizeof(rb));
	assert_int_equal(parse_exact(buf, n, &lim_fin, &p, &why), 0);
	assert_int_equal(p.call_id, 4);
	assert_int_equal(p.fin_id, 8);
	assert_int_equal(p.rndv.id, 77);
	/* the FIN does not make a rendezvous of what would fit eager */
	r.len = 8192;
	evr__rndv_req_encode(rb, &r);
	n = fin_msg(buf, EVR_T_RNDV_REQ, 0, 0, 7, 0, rb, sizeof(rb));
	expect_proto(buf, n, &lim_fin,
		     "rendezvous length small enough to be eager");
	n = fin_msg(buf, EVR_T_RNDV_REQ, 0, 0, 7, 0, rb, sizeof(rb) - 1);
	expect_proto(buf, n, &lim_fin, "rendezvous request of the wrong size");

	/* not agreed; not on control messages */
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 5, 0, "abc", 3);
	expect_proto(buf, n, &lim_calls,
		     "carried finish without the extension");
	for (t = EVR_T_RNDV_FIN; t <= EVR_T_BYE; t++) {
		n = fin_msg(buf, (uint8_t)t, 0, 0, 5, 0, NULL, 0);
		expect_proto(buf, n, &lim_fin,
			     "carried finish on a message other than data");
	}
	/* too short for it; a status no reader gives */
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 5, 0, NULL, 0);
	buf[4] = EVR_RNDV_FIN_SIZE - 1;
	expect_proto(buf, n - 1, &lim_fin,
		     "message shorter than its carried finish");
	n = fin_msg(buf, EVR_T_EAGER, EVR_F_CALL, 2, 5, 0, NULL, 0);
	buf[4] = EVR_CALL_ID_SIZE + EVR_RNDV_FIN_SIZE - 1;
	expect_proto(buf, n - 1, &lim_fin,
		     "message shorter than its carried finish");
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 5, 1, "abc", 3);
	expect_proto(buf, n, &lim_fin, "rendezvous finish with a bad status");
	n = fin_msg(buf, EVR_T_EAGER, 0, 0, 5, -4096, "abc", 3);
	expect_proto(buf, n, &lim_fin, "rendezvous finish with a bad status");
}

/* ---- the header in immediate data (EVR_HS_F_IMM) ---- */

static const struct evr__limits lim_imm = {
    .max_eager = 8192,
    .max_msg = 1ull << 40,
    .agreed = EVR_HS_F_IMM,
};

/* The immediate data's layout, byte by byte on the wire (network order):
 * tag, flags, credits high, credits low; and what it decodes to with the
 * bytes received, all of them payload. */
static void test_imm_roundtrip(void **state)
{
	static const uint8_t want[4] = {EVR_IMM_EAGER, EVR_F_WANT, 0x12,
					0x34};
	static uint8_t payload[8192];
	uint32_t imm = evr__imm_encode(EVR_F_WANT, 0x1234);
	struct evr__parsed p;
	const char *why = NULL;

	(void)state;
	assert_memory_equal(&imm, want, 4);
	assert_int_equal(evr__imm_parse(imm, payload, 5, &lim_imm, &p, &why),
			 0);
	assert_int_equal(p.hdr.type, EVR_T_EAGER);
	assert_int_equal(p.hdr.flags, EVR_F_WANT);
	assert_int_equal(p.hdr.credits, 0x1234);
	assert_int_equal(p.hdr.len, 5);
	assert_ptr_equal(p.payload, payload);
	assert_int_equal(p.plen, 5);
	assert_int_equal(p.call_id, 0);
	assert_false(p.fin);
	/* empty, and as large as the eager size */
	imm = evr__imm_encode(0, 0);
	assert_int_equal(evr__imm_parse(imm, payload, 0, &lim_imm, &p, &why),
			 0);
	assert_int_equal(p.plen, 0);
	assert_int_equal(p.hdr.flags, 0);
	assert_int_equal(evr__imm_parse(imm, payload, sizeof(payload),
					&lim_imm, &p, &why),
			 0);
	assert_int_equal(p.plen, sizeof(payload));
}

static void expect_imm_proto(uint32_t imm, size_t n,
			     const struct evr__limits *l, const char *reason)
{
	static uint8_t payload[8200];
	struct evr__parsed p;
	const char *why = NULL;

	assert_true(n <= sizeof(payload));
	assert_int_equal(evr__imm_parse(imm, payload, n, l, &p, &why),
			 -EPROTO);
	assert_string_equal(why, reason);
}

static const struct evr__limits lim_imm_calls = {
    .max_eager = 8192,
    .max_msg = 1ull << 40,
    .agreed = EVR_HS_F_CALLS | EVR_HS_F_IMM,
};

/* A call's request and reply with the header in immediate data: the id
 * is the first 4 bytes (little endian, as in band), the payload the
 * rest. */
static void test_imm_calls(void **state)
{
	static uint8_t buf[8192] = {0x12, 0x34, 0x56, 0x78, 'h', 'i'};
	struct evr__parsed p;
	const char *why = NULL;

	(void)state;
	assert_int_equal(evr__imm_parse(evr__imm_encode(EVR_F_CALL |
							    EVR_F_WANT,
							7),
					buf, 6, &lim_imm_calls, &p, &why),
			 0);
	assert_int_equal(p.hdr.flags, EVR_F_CALL | EVR_F_WANT);
	assert_int_equal(p.hdr.credits, 7);
	assert_int_equal(p.hdr.len, 6);
	assert_int_equal(p.call_id, 0x78563412);
	assert_ptr_equal(p.payload, buf + 4);
	assert_int_equal(p.plen, 2);
	/* a reply with nothing but its id; one as large as the eager size */
	assert_int_equal(evr__imm_parse(evr__imm_encode(EVR_F_REPLY, 0), buf,
					4, &lim_imm_calls, &p, &why),
			 0);
	assert_int_equal(p.hdr.flags, EVR_F_REPLY);
	assert_int_equal(p.call_id, 0x78563412);
	assert_int_equal(p.plen, 0);
	assert_int_equal(evr__imm_parse(evr__imm_encode(EVR_F_REPLY, 0), buf,
					sizeof(buf), &lim_imm_calls, &p, &why),
			 0);
	assert_int_equal(p.plen, sizeof(buf) - 4);
}

/* Without the extension; another tag; any flag but the window's and a
 * call's; a call's without the calls extension, both of them, no room
 * for the id, id 0; more bytes than the eager size. */
static void test_imm_rejects(void **state)
{
	static const uint8_t id0[4];
	uint8_t f;

	(void)state;
	expect_imm_proto(evr__imm_encode(0, 1), 4, &lim,
			 "header in immediate data without the extension");
	expect_imm_proto(htobe32(0), 4, &lim_imm, "unknown immediate data");
	expect_imm_proto(htobe32((EVR_IMM_EAGER ^ 1) << 24), 4, &lim_imm,
			 "unknown immediate data");
	for (f = 1; f; f = (uint8_t)(f << 1)) {
		if (f == EVR_F_WANT || f == EVR_F_CALL || f == EVR_F_REPLY)
			continue;
		expect_imm_proto(evr__imm_encode(f, 0), 4, &lim_imm_calls,
				 "flag other than the window's or a call's in "
				 "immediate data");
	}
	expect_imm_proto(evr__imm_encode(EVR_F_CALL, 0), 4, &lim_imm,
			 "call flag without the calls extension");
	expect_imm_proto(evr__imm_encode(EVR_F_REPLY, 0), 4, &lim_imm,
			 "call flag without the calls extension");
	expect_imm_proto(evr__imm_encode(EVR_F_CALL | EVR_F_REPLY, 0), 4,
			 &lim_imm_calls, "message both a call and a reply");
	expect_imm_proto(evr__imm_encode(EVR_F_CALL, 0), 3, &lim_imm_calls,
			 "call message shorter than its id");
	{
		struct evr__parsed p;
		const char *why = NULL;

		assert_int_equal(evr__imm_parse(evr__imm_encode(EVR_F_REPLY,
								0),
						id0, 4, &lim_imm_calls, &p,
						&why),
				 -EPROTO);
		assert_string_equal(why, "call id 0");
	}
	expect_imm_proto(evr__imm_encode(0, 0), 8193, &lim_imm,
			 "eager payload larger than the receive buffer");
	expect_imm_proto(evr__imm_encode(EVR_F_CALL, 0), 8193, &lim_imm_calls,
			 "eager payload larger than the receive buffer");
}

/*
 * Mixed versions.  A peer older than the initial window sends literal
 * zero in bytes 10-11 and rejects anything else there.  Its request
 * decodes to window 0 (all of recv_depth, mode 1); the reply to it then
 * carries 0 whatever this side would lend, which an old parser accepts,
 * and EVR_F_WANT is never sent to it.  A request with a window answers
 * with one and gets EVR_F_WANT.
 */
static void test_hs_old_peer(void **state)
{
	/* clang-format off */
	static const uint8_t old_req[EVR_HS_FIXED] = {
		0x45, 0x56, 0x52, 0x31,	/* magic "EVR1" */
		0x01,			/* version */
		0x01,			/* kind: REQ */
		0x00,			/* user_len */
		0x00,			/* reserved */
		0x40, 0x00,		/* recv_depth 64 */
		0x00, 0x00,		/* reserved in the old layout */
		0x00, 0x20, 0x00, 0x00,	/* max_eager 8192 */
		0x00, 0x00, 0x00, 0x04,	/* max_msg 64 MiB */
		0x00, 0x00, 0x00, 0x00,
	};
	/* clang-format on */
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs req, rep, out;
	const char *why = NULL;
	size_t n;

	(void)state;
	assert_int_equal(hs_decode_exact(old_req, sizeof(old_req), &req, &why),
			 0);
	assert_int_equal(req.recv_depth, 64);
	assert_int_equal(req.init_window, 0);
	assert_false(evr__hs_windowed(&req));
	/* an SRQ side that would lend 8 must answer an old peer with 0 ... */
	fill_hs(&rep, EVR_HS_REP, 0);
	rep.init_window = evr__hs_reply_window(&req, 8);
	assert_int_equal(rep.init_window, 0);
	n = evr__hs_encode(buf, &rep);
	/* ... which is byte for byte what an old side encodes: bytes 10-11
	 * zero, the only value an old parser takes there */
	assert_int_equal(buf[10], 0);
	assert_int_equal(buf[11], 0);
	assert_int_equal(hs_decode_exact(buf, n, &out, &why), 0);
	assert_false(evr__hs_windowed(&out));

	/* a request with a window gets one back and takes EVR_F_WANT */
	fill_hs(&req, EVR_HS_REQ, 0);
	req.init_window = 8;
	n = evr__hs_encode(buf, &req);
	assert_int_equal(buf[10], 8);
	assert_int_equal(buf[11], 0);
	assert_int_equal(hs_decode_exact(buf, n, &out, &why), 0);
	assert_true(evr__hs_windowed(&out));
	assert_int_equal(evr__hs_reply_window(&out, 16), 16);
	/* a mode-1 side answers it with 0 all the same */
	assert_int_equal(evr__hs_reply_window(&out, 0), 0);
}

static void test_hs_short(void **state)
{
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs, out;
	size_t n, full;

	(void)state;
	fill_hs(&hs, EVR_HS_REQ, 0);
	full = evr__hs_encode(buf, &hs);
	for (n = 0; n < full; n++) {
		const char *why = NULL;

		assert_int_equal(hs_decode_exact(buf, n, &out, &why), -EPROTO);
		assert_non_null(why);
	}
	{
		const char *why = NULL;

		assert_int_equal(evr__hs_decode(NULL, 0, &out, &why), -EPROTO);
		assert_non_null(why);
		assert_int_equal(evr__hs_decode(NULL, 56, &out, &why), -EPROTO);
	}
	assert_int_equal(hs_decode_exact(buf, full, &out, NULL), 0);
}

/*
 * evr_rkey_pack's documented layout (addr u64 | len u64 | rkey u32, little
 * endian) against literal bytes, both ways: a pack/unpack pair that agreed
 * on some other layout would pass a round trip but not this.
 */
static void test_rkey_layout(void **state)
{
	static const uint8_t wire[EVR_RKEY_PACKED_SIZE] = {
	    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* addr */
	    0x18, 0x17, 0x16, 0x15, 0x14, 0x13, 0x12, 0x11, /* len */
	    0x24, 0x23, 0x22, 0x21,			    /* rkey */
	};
	const struct evr_rkey rk = {
	    .addr = 0x0102030405060708ull,
	    .len = 0x1112131415161718ull,
	    .rkey = 0x21222324u,
	};
	uint8_t out[EVR_RKEY_PACKED_SIZE + 1];
	struct evr_rkey back;

	(void)state;
	memset(out, 0xee, sizeof(out));
	evr_rkey_pack(&rk, out);
	assert_memory_equal(out, wire, sizeof(wire));
	assert_int_equal(out[EVR_RKEY_PACKED_SIZE], 0xee); /* no overrun */
	memset(&back, 0, sizeof(back));
	evr_rkey_unpack(&back, wire);
	assert_true(back.addr == rk.addr);
	assert_true(back.len == rk.len);
	assert_int_equal(back.rkey, rk.rkey);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_eager_roundtrip),
	    cmocka_unit_test(test_rndv_req_roundtrip),
	    cmocka_unit_test(test_rndv_fin_roundtrip),
	    cmocka_unit_test(test_credit_roundtrip),
	    cmocka_unit_test(test_msg_wire_layout),
	    cmocka_unit_test(test_msg_short),
	    cmocka_unit_test(test_msg_malformed),
	    cmocka_unit_test(test_msg_boundaries_accepted),
	    cmocka_unit_test(test_msg_limits_are_the_callers),
	    cmocka_unit_test(test_want_on_data),
	    cmocka_unit_test(test_want_only_on_data),
	    cmocka_unit_test(test_idle_flags),
	    cmocka_unit_test(test_hs_roundtrip),
	    cmocka_unit_test(test_hs_wire_layout),
	    cmocka_unit_test(test_hs_encode_clamps_user),
	    cmocka_unit_test(test_hs_accepts_padding),
	    cmocka_unit_test(test_hs_reject_needs_no_limits),
	    cmocka_unit_test(test_hs_short),
	    cmocka_unit_test(test_hs_malformed),
	    cmocka_unit_test(test_hs_boundaries_accepted),
	    cmocka_unit_test(test_hs_window_range),
	    cmocka_unit_test(test_hs_reject_and_reserved),
	    cmocka_unit_test(test_hs_features),
	    cmocka_unit_test(test_call_roundtrip),
	    cmocka_unit_test(test_call_rejects),
	    cmocka_unit_test(test_fin_carried),
	    cmocka_unit_test(test_imm_roundtrip),
	    cmocka_unit_test(test_imm_calls),
	    cmocka_unit_test(test_imm_rejects),
	    cmocka_unit_test(test_hs_old_peer),
	    cmocka_unit_test(test_rkey_layout),
	};

	return cmocka_run_group_tests_name("proto", tests, NULL, NULL);
}
