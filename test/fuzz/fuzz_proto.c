/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * libFuzzer target for everything a peer controls before any other check:
 * the message header and bodies (evr__msg_parse), a header in immediate
 * data (evr__imm_parse) and the connect handshake (evr__hs_decode).  The
 * first input byte picks the parser and the limits;
 * the rest is the peer's bytes.  Every accepted input is re-encoded with
 * the library's encoders and must give back the very bytes received: a
 * message exactly (its length is the header's), a handshake up to its
 * encoded length (rdma_cm pads private data, so bytes past it are ignored
 * by design).  Parsers and encoders therefore agree on every field of
 * every message type, and no accepted input carries bytes the library
 * would not have sent.  An accepted header flag is EVR_F_WANT on a data
 * message or a credit update, or EVR_F_GIVE (with a count of 1..65535) on
 * a credit update, never both; a call or reply flag (one of them, only
 * when the limits say the calls extension is on) on a data message with
 * a call id that is not 0, as is a cancel's; an accepted initial window is
 * 0 or within its range, and handshake features are known ones.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bank.h"
#include "proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Re-encode an accepted message; returns its length (the bytes it fills). */
static size_t encode_msg(uint8_t *buf, const struct evr__parsed *m)
{
	size_t at = EVR_HDR_SIZE;

	evr__hdr_encode(buf, &m->hdr);
	if (m->hdr.flags & (EVR_F_CALL | EVR_F_REPLY)) {
		evr__call_id_encode(buf + at, m->call_id);
		at += EVR_CALL_ID_SIZE;
	}
	if (m->hdr.flags & EVR_F_FIN) {
		evr__rndv_fin_encode(buf + at, m->fin_id, m->fin_status);
		at += EVR_RNDV_FIN_SIZE;
	}
	switch (m->hdr.type) {
	case EVR_T_EAGER:
		memcpy(buf + at, m->payload, m->plen);
		break;
	case EVR_T_RNDV_REQ:
		evr__rndv_req_encode(buf + at, &m->rndv);
		break;
	case EVR_T_CANCEL:
		evr__call_id_encode(buf + at, m->call_id);
		break;
	case EVR_T_RNDV_FIN:
		evr__rndv_fin_encode(buf + EVR_HDR_SIZE, m->fin_id,
				     m->fin_status);
		break;
	case EVR_T_CREDIT:
		if (m->hdr.flags & EVR_F_GIVE)
			evr__give_encode(buf + EVR_HDR_SIZE, m->give);
		break;
	case EVR_T_BYE:
		break;
	default:
		abort(); /* the parser accepted a type it does not know */
	}
	return EVR_HDR_SIZE + m->hdr.len;
}

static void check_msg(const uint8_t *p, size_t n, uint8_t sel)
{
	/* bits 0-2: eager size; 3-5: largest message; 6: calls and
	 * carried FINs */
	struct evr__limits lim = {64u << (sel & 7),
				  1ull << (10 + ((sel >> 3) & 7)),
				  (uint8_t)(sel & 0x40 ? EVR_HS_F_CALLS | EVR_HS_F_FIN
							 : 0)};
	uint32_t call, fin;
	struct evr__parsed m, m2;
	static uint8_t buf[EVR_HDR_SIZE + (64u << 7)];
	const char *why = NULL;

	if (evr__msg_parse(p, n, &lim, &m, &why)) {
		if (!why)
			abort(); /* every rejection has a reason */
		return;
	}
	/* a call or a reply: only with the extension, on data, one of
	 * the two, its id not 0 and after the header */
	call = m.hdr.flags & (EVR_F_CALL | EVR_F_REPLY) ? EVR_CALL_ID_SIZE : 0;
	if (call && (!(lim.agreed & EVR_HS_F_CALLS) || m.call_id == 0 ||
		     (m.hdr.flags & (EVR_F_CALL | EVR_F_REPLY)) ==
			     (EVR_F_CALL | EVR_F_REPLY) ||
		     (m.hdr.type != EVR_T_EAGER &&
		      m.hdr.type != EVR_T_RNDV_REQ)))
		abort();
	if (m.hdr.type == EVR_T_CANCEL && (!(lim.agreed & EVR_HS_F_CALLS) || m.call_id == 0))
		abort();
	if (!call && m.hdr.type != EVR_T_CANCEL && m.call_id)
		abort();
	/* a carried FIN: only with the extension, on data, after the id;
	 * a FIN of its own otherwise, or none */
	fin = m.hdr.flags & EVR_F_FIN ? EVR_RNDV_FIN_SIZE : 0;
	if (fin && (!(lim.agreed & EVR_HS_F_FIN) || !m.fin ||
		    (m.hdr.type != EVR_T_EAGER && m.hdr.type != EVR_T_RNDV_REQ)))
		abort();
	if (m.fin != (fin || m.hdr.type == EVR_T_RNDV_FIN) ||
	    (m.fin && (m.fin_status > 0 || m.fin_status < -4095)))
		abort();
	if (m.hdr.type == EVR_T_EAGER &&
	    (m.payload != p + EVR_HDR_SIZE + call + fin ||
	     m.plen != m.hdr.len - call - fin || m.hdr.len > lim.max_eager))
		abort();
	if (m.hdr.type == EVR_T_RNDV_REQ &&
	    m.hdr.len != call + fin + EVR_RNDV_REQ_SIZE)
		abort();
	if (m.hdr.type == EVR_T_RNDV_REQ &&
	    (m.rndv.len > lim.max_msg || m.rndv.len <= lim.max_eager - call))
		abort();
	/* EVR_F_WANT on data messages and credit updates; EVR_F_GIVE on
	 * credit updates only, with its count in range; never both */
	if ((m.hdr.flags & ~(EVR_F_WANT | EVR_F_GIVE | EVR_F_CALL |
			     EVR_F_REPLY | EVR_F_FIN)) ||
	    m.hdr.flags == (EVR_F_WANT | EVR_F_GIVE) ||
	    ((m.hdr.flags & EVR_F_WANT) && m.hdr.type != EVR_T_EAGER &&
	     m.hdr.type != EVR_T_RNDV_REQ && m.hdr.type != EVR_T_CREDIT) ||
	    ((m.hdr.flags & EVR_F_GIVE) &&
	     (m.hdr.type != EVR_T_CREDIT || m.give == 0 || m.give > 0xffff)) ||
	    (!(m.hdr.flags & EVR_F_GIVE) && m.give))
		abort();
	/* the bytes received, exactly */
	if (encode_msg(buf, &m) != n || memcmp(buf, p, n))
		abort();
	/* and what they decode to once more is the same message */
	if (evr__msg_parse(buf, n, &lim, &m2, &why) ||
	    memcmp(&m.hdr, &m2.hdr, sizeof(m.hdr)) ||
	    memcmp(&m.rndv, &m2.rndv, sizeof(m.rndv)) ||
	    m.fin != m2.fin || m.fin_id != m2.fin_id ||
	    m.fin_status != m2.fin_status ||
	    m.give != m2.give || m.call_id != m2.call_id || m.plen != m2.plen)
		abort();
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
	if (hs.user_len > EVR_HS_USER_MAX || (hs.features & ~EVR_HS_F_ALL) ||
	    (hs.kind == EVR_HS_REJ && hs.features))
		abort();
	/* an initial window is 0 (all at once), or between the minimum
	 * window and the depth; a reject lends nothing */
	if (hs.init_window &&
	    (hs.kind == EVR_HS_REJ || hs.init_window > hs.recv_depth ||
	     hs.init_window < evr__bank_min_window(hs.recv_depth)))
		abort();
	len = evr__hs_encode(buf, &hs);
	/* the bytes received up to the encoded length, exactly, but for
	 * a request's feature bits this side does not know (dropped) */
	if (len > EVR_HS_MAX || len > n || memcmp(buf, p, 7) ||
	    buf[7] != (hs.kind == EVR_HS_REQ ? p[7] & EVR_HS_F_ALL : p[7]) ||
	    memcmp(buf + 8, p + 8, len - 8))
		abort();
	if (evr__hs_decode(buf, len, &hs2, &why) ||
	    memcmp(&hs, &hs2, sizeof(hs)))
		abort();
}

/* A message with its header in immediate data: the first 4 bytes are
 * the immediate data as verbs gives it (network order), the rest the
 * bytes received. */
static void check_imm(const uint8_t *p, size_t n, uint8_t sel)
{
	/* bits 0-2: eager size; 3: the extension agreed; 4: calls */
	struct evr__limits lim = {64u << (sel & 7), 1u << 20,
				  (uint8_t)((sel & 0x10 ? EVR_HS_F_CALLS : 0) |
					    (sel & 0x08 ? EVR_HS_F_IMM : 0))};
	uint8_t callf;
	struct evr__parsed m;
	const char *why = NULL;
	uint32_t imm;

	if (n < 4)
		return;
	memcpy(&imm, p, 4);
	if (evr__imm_parse(imm, p + 4, n - 4, &lim, &m, &why)) {
		if (!why)
			abort();
		return;
	}
	/* only with the extension: an eager message, its flags the
	 * window's and (with calls) one of a call's at most, within the
	 * eager size, its immediate data what the encoder gives for them;
	 * all its bytes payload, or a call's id (not 0) and then payload */
	callf = m.hdr.flags & (EVR_F_CALL | EVR_F_REPLY);
	if (!(lim.agreed & EVR_HS_F_IMM) || m.hdr.type != EVR_T_EAGER ||
	    (m.hdr.flags & ~(EVR_F_WANT | EVR_F_CALL | EVR_F_REPLY)) ||
	    (callf && !(lim.agreed & EVR_HS_F_CALLS)) || callf == (EVR_F_CALL | EVR_F_REPLY) ||
	    m.hdr.len != n - 4 || m.hdr.len > lim.max_eager || m.fin ||
	    m.give || evr__imm_encode(m.hdr.flags, m.hdr.credits) != imm)
		abort();
	if (callf ? !m.call_id || m.payload != p + 8 || m.plen != n - 8
		  : m.call_id || m.payload != p + 4 || m.plen != n - 4)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	if ((data[0] & 0xc0) == 0xc0)
		check_imm(data + 1, size - 1, data[0]);
	else if (data[0] & 0x80)
		check_hs(data + 1, size - 1);
	else
		check_msg(data + 1, size - 1, data[0]);
	return 0;
}
