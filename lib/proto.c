/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Wire protocol encode/decode.  Peers are untrusted: every decode checks
 * lengths against the bytes actually received and the limits this side
 * negotiated, and reports a short static reason on failure.  No function
 * here allocates or reads past n.
 */
#include "config.h"

#include <endian.h>
#include <errno.h>
#include <string.h>

#include "bank.h"
#include "evrdma.h"
#include "proto.h"

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)get16(p) | ((uint32_t)get16(p + 2) << 16);
}

static uint64_t get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | ((uint64_t)get32(p + 4) << 32);
}

void evr__hdr_encode(uint8_t *out, const struct evr__hdr *h)
{
	out[0] = h->type;
	out[1] = h->flags;
	put16(out + 2, h->credits);
	put32(out + 4, h->len);
}

void evr__rndv_req_encode(uint8_t *out, const struct evr__rndv_req *r)
{
	put64(out, r->addr);
	put64(out + 8, r->len);
	put32(out + 16, r->rkey);
	put32(out + 20, r->id);
}

void evr__rndv_fin_encode(uint8_t *out, uint32_t id, int32_t status)
{
	put32(out, id);
	put32(out + 4, (uint32_t)status);
}

void evr__give_encode(uint8_t *out, uint32_t n)
{
	put32(out, n);
}

void evr__call_id_encode(uint8_t *out, uint32_t id)
{
	put32(out, id);
}

/* An RNDV_FIN's body into out; -EPROTO for a status no reader gives. */
static int fin_decode(const uint8_t *p, struct evr__parsed *out)
{
	out->fin = true;
	out->fin_id = get32(p);
	out->fin_status = (int32_t)get32(p + 4);
	return out->fin_status > 0 || out->fin_status < -4095 ? -EPROTO : 0;
}

#define FAIL(reason)                                                           \
	do {                                                                   \
		if (why)                                                       \
			*why = (reason);                                       \
		return -EPROTO;                                                \
	} while (0)

/* The types that carry the user's bytes: the only ones a call id or a
 * carried FIN may ride in. */
static bool is_data(uint8_t type)
{
	return type == EVR_T_EAGER || type == EVR_T_RNDV_REQ;
}

/* A call's id: the first 4 of the n bytes, never 0. */
static int call_id_take(const uint8_t *p, size_t n, uint32_t *id,
			const char **why)
{
	if (n < EVR_CALL_ID_SIZE)
		FAIL("call message shorter than its id");
	*id = get32(p);
	if (*id == 0)
		FAIL("call id 0");
	return 0;
}

/* The checks of a call's or reply's flags and id, in band and in
 * immediate data alike; data: the message is of a type that may carry
 * one (always so in immediate data). */
static int call_take(uint8_t flags, bool data, const uint8_t *p, size_t n,
		     const struct evr__limits *lim, uint32_t *id,
		     const char **why)
{
	if (!(lim->agreed & EVR_HS_F_CALLS))
		FAIL("call flag without the calls extension");
	if (!data)
		FAIL("call flag on a message other than data");
	if ((flags & (EVR_F_CALL | EVR_F_REPLY)) == (EVR_F_CALL | EVR_F_REPLY))
		FAIL("message both a call and a reply");
	return call_id_take(p, n, id, why);
}

int evr__msg_parse(const void *buf, size_t n, const struct evr__limits *lim,
		   struct evr__parsed *out, const char **why)
{
	const uint8_t *p = buf;
	uint32_t call = 0; /* the id's bytes after the header */
	uint32_t fin = 0;  /* a carried FIN's bytes after them */

	memset(out, 0, sizeof(*out));
	if (n < EVR_HDR_SIZE)
		FAIL("message shorter than the header");
	out->hdr.type = p[0];
	out->hdr.flags = p[1];
	out->hdr.credits = get16(p + 2);
	out->hdr.len = get32(p + 4);
	if (out->hdr.flags &
	    ~(EVR_F_WANT | EVR_F_GIVE | EVR_F_CALL | EVR_F_REPLY | EVR_F_FIN))
		FAIL("unknown header flags");
	if ((out->hdr.flags & EVR_F_GIVE) && out->hdr.type != EVR_T_CREDIT)
		FAIL("give-back flag on a message other than a credit update");
	if ((size_t)out->hdr.len != n - EVR_HDR_SIZE)
		FAIL("header length does not match the bytes received");
	p += EVR_HDR_SIZE;
	if (out->hdr.flags & (EVR_F_CALL | EVR_F_REPLY)) {
		if (call_take(out->hdr.flags, is_data(out->hdr.type), p,
			      out->hdr.len, lim, &out->call_id, why))
			return -EPROTO;
		p += EVR_CALL_ID_SIZE;
		call = EVR_CALL_ID_SIZE;
	}
	if (out->hdr.flags & EVR_F_FIN) {
		if (!(lim->agreed & EVR_HS_F_FIN))
			FAIL("carried finish without the extension");
		if (!is_data(out->hdr.type))
			FAIL("carried finish on a message other than data");
		if (out->hdr.len < call + EVR_RNDV_FIN_SIZE)
			FAIL("message shorter than its carried finish");
		fin = EVR_RNDV_FIN_SIZE;
		if (fin_decode(p, out))
			FAIL("rendezvous finish with a bad status");
		p += fin;
	}

	switch (out->hdr.type) {
	case EVR_T_EAGER:
		if (out->hdr.len > lim->max_eager)
			FAIL("eager payload larger than the receive buffer");
		out->payload = p;
		out->plen = out->hdr.len - call - fin;
		return 0;
	case EVR_T_RNDV_REQ:
		if (out->hdr.len != call + fin + EVR_RNDV_REQ_SIZE)
			FAIL("rendezvous request of the wrong size");
		out->rndv.addr = get64(p);
		out->rndv.len = get64(p + 8);
		out->rndv.rkey = get32(p + 16);
		out->rndv.id = get32(p + 20);
		if (out->rndv.len > lim->max_msg)
			FAIL("rendezvous length beyond the maximum message "
			     "size");
		if (out->rndv.len <= lim->max_eager - call)
			FAIL("rendezvous length small enough to be eager");
		if (out->rndv.addr + out->rndv.len < out->rndv.addr)
			FAIL("rendezvous address range wraps");
		return 0;
	/* control messages carry no flags but the idle cycle's on CREDIT */
	case EVR_T_RNDV_FIN:
		if (out->hdr.flags)
			FAIL("window flag on a rendezvous finish");
		if (out->hdr.len != EVR_RNDV_FIN_SIZE)
			FAIL("rendezvous finish of the wrong size");
		if (fin_decode(p, out))
			FAIL("rendezvous finish with a bad status");
		return 0;
	case EVR_T_CREDIT:
		if (out->hdr.flags == (EVR_F_WANT | EVR_F_GIVE))
			FAIL("credit update that both asks and gives back");
		if (!(out->hdr.flags & EVR_F_GIVE)) {
			if (out->hdr.len != 0)
				FAIL("credit update with a payload");
			return 0;
		}
		if (out->hdr.len != EVR_GIVE_SIZE)
			FAIL("give-back of the wrong size");
		out->give = get32(p);
		if (out->give == 0 || out->give > 0xffff)
			FAIL("give-back of no credits or beyond any window");
		return 0;
	case EVR_T_BYE:
		if (out->hdr.flags)
			FAIL("window flag on a goodbye");
		if (out->hdr.len != 0)
			FAIL("goodbye with a payload");
		return 0;
	case EVR_T_CANCEL:
		if (!(lim->agreed & EVR_HS_F_CALLS))
			FAIL("cancel without the calls extension");
		if (out->hdr.flags)
			FAIL("flag on a cancel");
		if (out->hdr.len != EVR_CALL_ID_SIZE)
			FAIL("cancel of the wrong size");
		return call_id_take(p, out->hdr.len, &out->call_id, why);
	default:
		FAIL("unknown message type");
	}
}

int evr__imm_parse(uint32_t imm, const void *buf, size_t n,
		   const struct evr__limits *lim, struct evr__parsed *out,
		   const char **why)
{
	uint32_t v = be32toh(imm);

	memset(out, 0, sizeof(*out));
	if (!(lim->agreed & EVR_HS_F_IMM))
		FAIL("header in immediate data without the extension");
	if (v >> 24 != EVR_IMM_EAGER)
		FAIL("unknown immediate data");
	out->hdr.type = EVR_T_EAGER;
	out->hdr.flags = (uint8_t)(v >> 16);
	out->hdr.credits = (uint16_t)v;
	if (out->hdr.flags & ~(EVR_F_WANT | EVR_F_CALL | EVR_F_REPLY))
		FAIL("flag other than the window's or a call's in immediate "
		     "data");
	if (n > lim->max_eager)
		FAIL("eager payload larger than the receive buffer");
	out->hdr.len = (uint32_t)n;
	out->payload = buf;
	out->plen = (uint32_t)n;
	if (out->hdr.flags & (EVR_F_CALL | EVR_F_REPLY)) {
		if (call_take(out->hdr.flags, true, buf, n, lim, &out->call_id,
			      why))
			return -EPROTO;
		out->payload = (const uint8_t *)buf + EVR_CALL_ID_SIZE;
		out->plen = (uint32_t)n - EVR_CALL_ID_SIZE;
	}
	return 0;
}

size_t evr__hs_encode(uint8_t *out, const struct evr__hs *hs)
{
	size_t ulen =
	    hs->user_len > EVR_HS_USER_MAX ? EVR_HS_USER_MAX : hs->user_len;

	put32(out, EVR_PROTO_MAGIC);
	out[4] = EVR_PROTO_VERSION;
	out[5] = hs->kind;
	out[6] = (uint8_t)ulen;
	out[7] = hs->kind == EVR_HS_REJ ? 0 : hs->features;
	put16(out + 8, hs->recv_depth);
	put16(out + 10, hs->init_window);
	put32(out + 12, hs->max_eager);
	put64(out + 16, hs->max_msg);
	memcpy(out + EVR_HS_FIXED, hs->user, ulen);
	return EVR_HS_FIXED + ulen;
}

int evr__hs_decode(const void *buf, size_t n, struct evr__hs *out,
		   const char **why)
{
	const uint8_t *p = buf;

	memset(out, 0, sizeof(*out));
	if (!buf || n < EVR_HS_FIXED)
		FAIL("handshake shorter than its fixed part");
	if (get32(p) != EVR_PROTO_MAGIC)
		FAIL("bad handshake magic (not an evrdma peer)");
	if (p[4] != EVR_PROTO_VERSION)
		FAIL("unsupported protocol version");
	out->kind = p[5];
	if (out->kind < EVR_HS_REQ || out->kind > EVR_HS_REJ)
		FAIL("unknown handshake kind");
	out->user_len = p[6];
	out->features = p[7];
	/* a request may offer extensions newer than this side, which it
	 * then does not agree to; a reply carries only what was offered,
	 * so there an unknown bit is an error */
	if (out->kind == EVR_HS_REQ)
		out->features &= EVR_HS_F_ALL;
	if (out->features & ~EVR_HS_F_ALL)
		FAIL("unknown handshake feature bits");
	if (out->user_len > EVR_HS_USER_MAX)
		FAIL("handshake user data too long");
	if (EVR_HS_FIXED + (size_t)out->user_len > n)
		FAIL("handshake user data truncated");
	out->recv_depth = get16(p + 8);
	out->init_window = get16(p + 10);
	out->max_eager = get32(p + 12);
	out->max_msg = get64(p + 16);
	memcpy(out->user, p + EVR_HS_FIXED, out->user_len);
	if (out->kind == EVR_HS_REJ) {
		/* a reject carries only its reason: it lends nothing */
		if (out->init_window != 0)
			FAIL("reject with an initial window");
		if (out->features)
			FAIL("reject with features");
		return 0;
	}
	if (out->recv_depth < EVR_HS_MIN_DEPTH)
		FAIL("peer receive depth too small");
	/* 0: all of recv_depth at once (a queue per connection) */
	if (out->init_window > out->recv_depth)
		FAIL("peer initial window above its receive depth");
	if (out->init_window != 0 &&
	    out->init_window < evr__bank_min_window(out->recv_depth))
		FAIL("peer initial window below the minimum window");
	if (out->max_eager < EVR_HS_MIN_EAGER ||
	    out->max_eager > EVR_HS_MAX_EAGER)
		FAIL("peer eager size out of range");
	if (out->max_msg < out->max_eager)
		FAIL("peer maximum message smaller than its eager size");
	return 0;
}

/* ---- a remote key as 20 bytes (evrdma.h, docs/protocol.md) ---- */

void evr_rkey_pack(const struct evr_rkey *rk, uint8_t out[EVR_RKEY_PACKED_SIZE])
{
	put64(out, rk->addr);
	put64(out + 8, rk->len);
	put32(out + 16, rk->rkey);
}

void evr_rkey_unpack(struct evr_rkey *rk,
		     const uint8_t in[EVR_RKEY_PACKED_SIZE])
{
	rk->addr = get64(in);
	rk->len = get64(in + 8);
	rk->rkey = get32(in + 16);
}
