/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Wire protocol: the fixed message header, the rendezvous bodies and the
 * connect handshake carried in rdma_cm private data.  Everything here is
 * pure (no verbs, no allocation) so it can be unit-tested and fuzzed.
 * All multi-byte fields are little endian on the wire, but for the
 * immediate data of a SEND, which verbs carries big endian.
 */
#ifndef EVR_PROTO_H
#define EVR_PROTO_H

#include <endian.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EVR_PROTO_MAGIC	  0x31525645u /* "EVR1" */
#define EVR_PROTO_VERSION 1

enum evr__msg_type {
	EVR_T_EAGER = 1,    /* header + payload */
	EVR_T_RNDV_REQ = 2, /* header + evr__rndv_req: read my buffer */
	EVR_T_RNDV_FIN = 3, /* header + evr__rndv_fin: done reading it */
	EVR_T_CREDIT = 4,   /* credits returned; asks or gives back (flags) */
	EVR_T_BYE = 5,	    /* header only: closing, all my messages are sent */
	EVR_T_CANCEL = 6,   /* header + call id u32: I gave up this call */
	EVR_T_MAX = 6,
};

/* type u8 | flags u8 | credits u16 | len u32 (payload bytes) */
#define EVR_HDR_SIZE	  8
#define EVR_RNDV_REQ_SIZE 24 /* addr u64 | len u64 | rkey u32 | id u32 */
#define EVR_RNDV_FIN_SIZE 8  /* id u32 | status u32 */
#define EVR_GIVE_SIZE	  4  /* count u32: credits given back */
#define EVR_CALL_ID_SIZE  4  /* call id u32, after the header (calls) */

/*
 * Header flags.  EVR_F_WANT: "my window held me back" -- more data
 * messages wait behind this one than the sender has data credits left, so
 * a receiver lending credits out of a shared receive queue grows the
 * sender's window (docs/credits.md).  Legal on data messages only (EAGER,
 * RNDV_REQ); a sender sets it only towards a peer whose handshake carried
 * a non-zero initial window.
 *
 * On a credit update (CREDIT) the two window flags are the idle cycle of
 * a windowed connection (docs/credits.md "Idle windows"): EVR_F_GIVE, "I
 * give back this many of the credits you lent me" (a u32 count in a
 * 4-byte body, 1..65535), sent by a side that has had nothing to send for
 * a while; EVR_F_WANT, "I have data waiting and only my reserve: lend me
 * a window again".  Both go only to a peer whose handshake carried a
 * non-zero initial window.  Both together, any other bit, or a flag on
 * RNDV_FIN or BYE is -EPROTO.
 */
#define EVR_F_WANT 0x01u
#define EVR_F_GIVE 0x02u

/*
 * Calls (request/response), only between peers whose handshakes both
 * carried EVR_HS_F_CALLS.  EVR_F_CALL marks a request, EVR_F_REPLY the
 * answer to one; either may be on a data message (EAGER, RNDV_REQ), not
 * both, and then the header is followed by the call's id (u32, not 0) and
 * the header's len counts it: an eager call's payload is len - 4 bytes,
 * at most max_eager - 4; a rendezvous call's body follows the id, and its
 * length is above max_eager - 4.  CANCEL carries a call id of the
 * sender's that it gave up (expired or cancelled): the receiver drops the
 * request if it has not answered it, and a read of the request's buffer
 * still to be made is not made (its RNDV_FIN says -ECANCELED).  A reply
 * or a cancel naming no call is the receiver's to count and drop, not a
 * protocol error; an id of 0 is.
 */
#define EVR_F_CALL  0x04u
#define EVR_F_REPLY 0x08u

/*
 * A FIN carried by a data message, only between peers whose handshakes
 * both carried EVR_HS_F_FIN.  EVR_F_FIN on a data message (EAGER,
 * RNDV_REQ) says an RNDV_FIN's body (id u32 | status u32) follows the
 * header and a call's id, and the header's len counts it: the message is
 * that FIN and then the data message, in that order, on one receive.  An
 * eager payload is then len - 8 bytes (less a call's id), and the FIN's
 * 8 bytes count towards max_eager; whether a message goes eager or by
 * rendezvous does not depend on them.
 */
#define EVR_F_FIN 0x10u

/*
 * The header in immediate data, only between peers whose handshakes both
 * carried EVR_HS_F_IMM.  An EAGER message without a carried FIN may go as
 * a SEND with immediate data, whose 32 bits (big endian on the wire, as
 * verbs carries them) are
 *
 *   EVR_IMM_EAGER u8 | flags u8 | credits u16
 *
 * and whose length is the receive's byte count.  flags: EVR_F_WANT, and
 * EVR_F_CALL or EVR_F_REPLY (with the calls extension), under the rules
 * of the header's.  A call's request or reply starts with its id (u32,
 * not 0), the rest is payload; a plain message is all payload.  So a
 * message puts 8 bytes fewer on the wire; at 4 KiB, one packet fewer.
 * A receiver tells it apart by IBV_WC_WITH_IMM on a receive completion
 * (a user's write with immediate data completes as another opcode).
 * Every other message keeps the header in band.
 */
#define EVR_IMM_EAGER 0xe1u

struct evr__hdr {
	uint8_t type;
	uint8_t flags;
	uint16_t credits;
	uint32_t len;
};

struct evr__rndv_req {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t id;
};

/* What a receiver accepts; anything outside is -EPROTO. */
struct evr__limits {
	uint32_t max_eager; /* largest eager payload (my receive buffers) */
	uint64_t max_msg;   /* largest message, eager or rendezvous */
	uint8_t agreed;	    /* the EVR_HS_F_* both handshakes carried */
};

/* A decoded, validated message. */
struct evr__parsed {
	struct evr__hdr hdr;
	const uint8_t *payload;	   /* EAGER: the payload (after a call id) */
	uint32_t plen;		   /* EAGER: its bytes */
	uint32_t call_id;	   /* EVR_F_CALL, EVR_F_REPLY, CANCEL: not 0 */
	struct evr__rndv_req rndv; /* RNDV_REQ */
	bool fin;		   /* RNDV_FIN, or EVR_F_FIN on data */
	uint32_t fin_id;	   /* then: the rendezvous read */
	int32_t fin_status;	   /* then: 0 or -errno of the reader */
	uint32_t give;		   /* CREDIT with EVR_F_GIVE: credits back */
};

void evr__hdr_encode(uint8_t *out, const struct evr__hdr *h);
void evr__rndv_req_encode(uint8_t *out, const struct evr__rndv_req *r);
void evr__rndv_fin_encode(uint8_t *out, uint32_t id, int32_t status);
void evr__give_encode(uint8_t *out, uint32_t n); /* EVR_F_GIVE's body */
/* A call id after the header (EVR_F_CALL, EVR_F_REPLY), or CANCEL's body. */
void evr__call_id_encode(uint8_t *out, uint32_t id);

/*
 * Decode and validate a received message of n bytes.  Returns 0, or
 * -EPROTO with *why set to a static reason.
 */
int evr__msg_parse(const void *buf, size_t n, const struct evr__limits *lim,
		   struct evr__parsed *out, const char **why);

/* The immediate data of an eager message (network order, for
 * ibv_send_wr.imm_data); inline, since every such message takes it. */
static inline uint32_t evr__imm_encode(uint8_t flags, uint16_t credits)
{
	return htobe32(EVR_IMM_EAGER << 24 | (uint32_t)flags << 16 | credits);
}

/*
 * Decode and validate a message of n bytes at buf that came with
 * immediate data imm (network order, from ibv_wc.imm_data).  Returns 0,
 * or -EPROTO with *why set to a static reason.
 */
int evr__imm_parse(uint32_t imm, const void *buf, size_t n,
		   const struct evr__limits *lim, struct evr__parsed *out,
		   const char **why);

/* Handshake in rdma_cm private data (connect request, accept, reject). */
enum evr__hs_kind { EVR_HS_REQ = 1, EVR_HS_REP = 2, EVR_HS_REJ = 3 };

#define EVR_HS_FIXED	24
#define EVR_HS_USER_MAX 32
#define EVR_HS_MAX	(EVR_HS_FIXED + EVR_HS_USER_MAX)

/*
 * magic u32 | version u8 | kind u8 | user_len u8 | features u8 |
 * recv_depth u16 | init_window u16 | max_eager u32 | max_msg u64 | user
 *
 * features: the extensions the sender speaks (EVR_HS_F_*).  A connect
 * request offers its own; a reply carries those of the request's it
 * speaks too (evr__hs_reply_features()), never another, since older
 * parsers reject a non-zero byte there; a reject carries none.  An
 * extension is in use when the reply carries it.  The decoder drops the
 * bits of a request it does not know (a newer peer's offers: not agreed
 * to), and fails a reply or reject with any.  Parsers before
 * EVR_HS_F_FIN failed a request with unknown bits too, so they refuse a
 * request offering EVR_HS_F_FIN (the connect fails, -ECONNREFUSED).
 *
 * init_window is the number of credits I lend you now, when I lend out of
 * a shared receive queue: at least evr__bank_min_window(recv_depth), at
 * most recv_depth, and recv_depth stays the most you may ever hold.  Zero
 * means all of recv_depth now (a receive queue per connection, and every
 * peer older than the field).  A non-zero init_window in a connect request
 * also says "I parse init_window and EVR_F_WANT": a reply carries a
 * non-zero one only when the request did (evr__hs_reply_window()), since
 * older parsers reject non-zero reserved bytes.  A reject carries zero.
 */
struct evr__hs {
	uint8_t kind;
	uint8_t user_len;
	uint16_t recv_depth;  /* receive buffers I post (your credits) */
	uint16_t init_window; /* credits lent now; 0: all of recv_depth */
	uint8_t features;     /* EVR_HS_F_* */
	uint32_t max_eager;   /* largest eager payload I accept */
	uint64_t max_msg;     /* largest message I accept */
	uint8_t user[EVR_HS_USER_MAX];
};

/* Returns the encoded length (<= EVR_HS_MAX). */
size_t evr__hs_encode(uint8_t *out, const struct evr__hs *hs);
/* Validates magic, version, kind and every field; -EPROTO with *why. */
int evr__hs_decode(const void *buf, size_t n, struct evr__hs *out,
		   const char **why);

/*
 * The initial window a reply to req may carry when this side would lend
 * `mine` credits at first: `mine` when the request carried a non-zero
 * initial window (its sender parses the field), else 0 -- the requester
 * may predate the field and would reject the reply, so this side must
 * lend all of the recv_depth it announces, or refuse the connection.
 */
static inline uint16_t evr__hs_reply_window(const struct evr__hs *req,
					    uint16_t mine)
{
	return req->init_window ? mine : 0;
}

/* Does the peer of this handshake lend me a window out of a shared
 * receive queue?  Only then may my data messages to it carry EVR_F_WANT
 * (a peer that sent 0 may predate the flag and reject it). */
static inline bool evr__hs_windowed(const struct evr__hs *peer)
{
	return peer->init_window != 0;
}

#define EVR_HS_F_CALLS 0x01u /* calls: EVR_F_CALL, EVR_F_REPLY, CANCEL */
#define EVR_HS_F_FIN   0x02u /* EVR_F_FIN: a FIN carried by data */
#define EVR_HS_F_IMM   0x04u /* EVR_IMM_EAGER: the header in immediate data */
#define EVR_HS_F_ALL   (EVR_HS_F_CALLS | EVR_HS_F_FIN | EVR_HS_F_IMM)

/* The features a reply to req carries when this side speaks `mine`. */
static inline uint8_t evr__hs_reply_features(const struct evr__hs *req,
					     uint8_t mine)
{
	return (uint8_t)(req->features & mine);
}

/* A reply may carry only what the request offered: false if rep does
 * more (a protocol error of the replier). */
static inline bool evr__hs_features_ok(uint8_t offered,
				       const struct evr__hs *rep)
{
	return (rep->features & ~offered) == 0;
}

/* Sanity bounds a peer's handshake must respect. */
#define EVR_HS_MIN_DEPTH 4
#define EVR_HS_MIN_EAGER 64
#define EVR_HS_MAX_EAGER (1u << 20)

#endif
