/*
 * libFuzzer target for everything a peer controls before any other check:
 * the message header and bodies (evr__msg_parse) and the connect handshake
 * (evr__hs_decode).  The first input byte picks the parser and the limits;
 * the rest is the peer's bytes.  Accepted input is re-encoded and must
 * decode to the same values (the parsers and encoders agree).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_msg(const uint8_t *p, size_t n, uint8_t sel)
{
	struct evr__limits lim = {64u << (sel & 7), 1ull << (10 + (sel >> 3))};
	struct evr__parsed m, m2;
	uint8_t buf[EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE];
	const char *why = NULL;

	if (evr__msg_parse(p, n, &lim, &m, &why)) {
		if (!why)
			abort(); /* every rejection has a reason */
		return;
	}
	if (m.hdr.type == EVR_T_EAGER &&
	    (m.payload != p + EVR_HDR_SIZE || m.hdr.len > lim.max_eager))
		abort();
	if (m.hdr.type == EVR_T_RNDV_REQ) {
		if (m.rndv.len > lim.max_msg || m.rndv.len <= lim.max_eager)
			abort();
		evr__hdr_encode(buf, &m.hdr);
		evr__rndv_req_encode(buf + EVR_HDR_SIZE, &m.rndv);
		if (evr__msg_parse(buf, sizeof(buf), &lim, &m2, &why) ||
		    memcmp(&m.rndv, &m2.rndv, sizeof(m.rndv)))
			abort();
	}
}

static void check_hs(const uint8_t *p, size_t n)
{
	struct evr__hs hs, hs2;
	uint8_t buf[EVR_HS_MAX];
	const char *why = NULL;
	size_t len;

	if (evr__hs_decode(p, n, &hs, &why)) {
		if (!why)
			abort();
		return;
	}
	if (hs.user_len > EVR_HS_USER_MAX)
		abort();
	len = evr__hs_encode(buf, &hs);
	if (len > EVR_HS_MAX || evr__hs_decode(buf, len, &hs2, &why) ||
	    memcmp(&hs, &hs2, sizeof(hs)))
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if (data[0] & 0x80)
		check_hs(data + 1, size - 1);
	else
		check_msg(data + 1, size - 1, data[0]);
	return 0;
}
