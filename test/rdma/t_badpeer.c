/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Bad peers: a client built on raw rdma_cm and verbs (not on the library's
 * send path) completes a valid handshake with an evrdma server and then
 * sends malformed traffic -- or offers a malformed handshake.  Each case
 * must close only that connection (the server's on_close sees -EPROTO, the
 * raw client sees the disconnect or the reject).  After each one, a
 * well-behaved evrdma connection on the same server, open all along, must
 * still be echoing (content-checked, more echoes than before that peer
 * came), and a new connection must be accepted and served: one eager and
 * one rendezvous message echoed, then a graceful close.
 *
 * Most bad messages are built with the library's own encoder (lib/proto.c),
 * which makes them easy to aim at one check.  The "literal" cases are
 * written out byte by byte from the documented layout instead, so that a
 * bug shared by the encoder and the decoder cannot hide: two bad headers,
 * and one valid message -- after a literal handshake -- that the server
 * must accept and echo, header byte for byte, before the raw client says
 * goodbye with a literal BYE.
 *
 * The hostile cases read the server's rendezvous echo outside the range it
 * advertised (a byte before, a byte after) or again after their FIN: each
 * read must fail at the raw client with a remote access error, and only
 * that connection ends.  The echo comes from ordinary memory, or from
 * inside a region the server registered with EVR_ACCESS_REMOTE_READ (the
 * bytes beside the message are the region's, readable with the region's
 * own rkey, never with the one the peer gets).  The hostile cases run
 * three times: with the device's memory windows (a window bound over
 * each message), with EVR_MW=off (a registration of the message's bytes
 * per send), and with the registration cache on (EVR_REG_CACHE=8: the
 * registrations outlive the sends, the windows over them must not; where
 * the library does not use the device's windows, the cache is off and
 * the pass repeats the registrations').  A
 * fourth pass, EVR_MW=inside, binds windows inside the region even on a
 * device that does not bound reads to them (rdma_rxe): only the reads
 * after the FIN are tried there, which the window's end must stop, and
 * the read before it, which must give the message's bytes.
 *
 * The raw client runs in a child process of its own (fork + exec),
 * synchronously; the server and the good client run in the parent's loop.
 */
#include "rt_pair.h"

#include <endian.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdbool.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>

#include "proto.h"

enum bad_case {
	BAD_MAGIC,	 /* handshake: not an evrdma peer -> rejected */
	BAD_VERSION,	 /* handshake: unknown protocol version -> rejected */
	BAD_NO_PRIVDATA, /* handshake: nothing at all (rping-like) */
	BAD_TYPE,	 /* unknown message type */
	BAD_LEN_MAX,	 /* eager length beyond the eager maximum */
	BAD_OVERSIZE,	 /* more bytes than the receive buffer holds */
	BAD_TRUNCATED,	 /* header says more than was sent */
	BAD_FLAGS,	 /* unknown header flags */
	BAD_RNDV_RKEY,	 /* rendezvous with a bogus rkey/address */
	BAD_RNDV_LEN,	 /* rendezvous length beyond the maximum */
	BAD_CREDITS,	 /* returns credits that were never used */
	BAD_FIN,	 /* a finish for a rendezvous never sent */
	BAD_FIN_CARRIED, /* the same, carried by data (EVR_F_FIN agreed) */
	/* offers an unknown feature bit (a newer peer's): not agreed, nor
	 * carried FINs, which it then sends anyway */
	BAD_FIN_UNAGREED,
	BAD_CALL_FLAG,	 /* offers calls, not agreed: sends a call anyway */
	BAD_CANCEL,	 /* the same with a cancel */
	/* a header in immediate data (EVR_HS_F_IMM): not offered, sent
	 * anyway; offered and agreed, with an unknown tag; agreed, with a
	 * call's flag, calls not agreed */
	BAD_IMM_UNAGREED,
	BAD_IMM_TAG,
	BAD_IMM_CALL,
	LIT_TYPE,	 /* literal bytes: the type after the last one */
	LIT_LEN_BE,	 /* literal bytes: a length written big endian */
	LIT_VALID,	 /* literal bytes: a valid message, echoed */
	/* a hostile reader: the server's rendezvous echo, read outside the
	 * range it advertised, or again after the FIN */
	HOSTILE_BEFORE,	 /* one byte before the message */
	HOSTILE_AFTER,	 /* one byte after it */
	HOSTILE_AFTER_FIN, /* the message, right; then again after FIN */
	/* the same, the echo sent from inside a remote-read region */
	REGION_BEFORE,
	REGION_AFTER,
	REGION_AFTER_FIN,
	BAD_NCASES
};

/* What the server must do with the peer. */
enum expect {
	X_REJECT, /* reject the handshake, without asking the application */
	X_EPROTO, /* accept, then close with -EPROTO */
	X_ECHO,	  /* accept, echo, and see the peer's goodbye (-ESHUTDOWN) */
	X_DENIED, /* accept; the peer's out-of-range read fails at the peer
		   * (a remote access error), and the conn ends (its QP in
		   * error: any status but -EPROTO/-ESHUTDOWN) */
};

static const struct {
	const char *name;
	enum expect expect;
} cases[BAD_NCASES] = {
    [BAD_MAGIC] = {"bad magic", X_REJECT},
    [BAD_VERSION] = {"bad version", X_REJECT},
    [BAD_NO_PRIVDATA] = {"no private data", X_REJECT},
    [BAD_TYPE] = {"unknown type", X_EPROTO},
    [BAD_LEN_MAX] = {"length beyond maximum", X_EPROTO},
    [BAD_OVERSIZE] = {"oversize", X_EPROTO},
    [BAD_TRUNCATED] = {"truncated", X_EPROTO},
    [BAD_FLAGS] = {"unknown flags", X_EPROTO},
    [BAD_RNDV_RKEY] = {"bogus rendezvous rkey", X_EPROTO},
    [BAD_RNDV_LEN] = {"rendezvous length beyond maximum", X_EPROTO},
    [BAD_CREDITS] = {"credit overflow", X_EPROTO},
    [BAD_FIN] = {"unexpected finish", X_EPROTO},
    [BAD_FIN_CARRIED] = {"carried finish, unexpected", X_EPROTO},
    [BAD_FIN_UNAGREED] = {"carried finish, not agreed", X_EPROTO},
    [BAD_CALL_FLAG] = {"call flag, calls not agreed", X_EPROTO},
    [BAD_CANCEL] = {"cancel, calls not agreed", X_EPROTO},
    [BAD_IMM_UNAGREED] = {"header in immediate data, not agreed", X_EPROTO},
    [BAD_IMM_TAG] = {"immediate data, unknown tag", X_EPROTO},
    [BAD_IMM_CALL] = {"immediate data, a call not agreed", X_EPROTO},
    [LIT_TYPE] = {"literal: type after CANCEL", X_EPROTO},
    [LIT_LEN_BE] = {"literal: big-endian length", X_EPROTO},
    [LIT_VALID] = {"literal: valid message", X_ECHO},
    [HOSTILE_BEFORE] = {"hostile: read before the message", X_DENIED},
    [HOSTILE_AFTER] = {"hostile: read after the message", X_DENIED},
    [HOSTILE_AFTER_FIN] = {"hostile: read again after FIN", X_DENIED},
    [REGION_BEFORE] = {"region: read before the message", X_DENIED},
    [REGION_AFTER] = {"region: read after the message", X_DENIED},
    [REGION_AFTER_FIN] = {"region: read again after FIN", X_DENIED},
};

static bool is_hostile_case(enum bad_case c)
{
	return c >= HOSTILE_BEFORE && c <= REGION_AFTER_FIN;
}

/* The hostile peer's message: sent by rendezvous (its eager size is
 * HOSTILE_EAGER), echoed by the server from byte 1 on, so the echo
 * neither starts nor ends on a page boundary: a registration rounded out
 * to pages would let the reads beside it succeed. */
#define HOSTILE_LEN 4000
#define HOSTILE_EAGER 1024
/* The region cases' message: one byte longer, so the server knows to echo
 * it from inside its region, at REGION_AT (neither end on a page
 * boundary), between bytes of REGION_FILL. */
#define REGION_MSG_LEN (HOSTILE_LEN + 1)
#define REGION_SIZE 16384
#define REGION_AT 4097
#define REGION_FILL 0x5a
#define HOSTILE_READ_WR 100

static bool is_handshake_case(enum bad_case c)
{
	return cases[c].expect == X_REJECT;
}

static bool is_literal_case(enum bad_case c)
{
	return c == LIT_TYPE || c == LIT_LEN_BE || c == LIT_VALID;
}

/*
 * Wire bytes written out by hand from the layout documented in proto.h and
 * docs/protocol.md, not produced by the library's encoder.  A
 * message header is 8 bytes: type u8 | flags u8 | credits u16 | len u32,
 * multi-byte fields little endian; types EAGER 1, RNDV_REQ 2, RNDV_FIN 3,
 * CREDIT 4, BYE 5, CANCEL 6.
 */

/* Type 7, one past CANCEL, the last defined type; no payload. */
static const uint8_t lit_type7[8] = {
    0x07,		    /* type */
    0x00,		    /* flags */
    0x00, 0x00,		    /* credits */
    0x00, 0x00, 0x00, 0x00, /* len */
};

/* EAGER with 256 payload bytes, its length written big endian: read as
 * the documented little endian it says 65536, not the 256 that came. */
#define LIT_BE_PAYLOAD 256
static const uint8_t lit_len_be[8] = {
    0x01,		    /* type EAGER */
    0x00,		    /* flags */
    0x00, 0x00,		    /* credits */
    0x00, 0x00, 0x01, 0x00, /* len 256, big endian: wrong */
};

/* A valid EAGER message: 12 payload bytes, no credits returned. */
static const uint8_t lit_eager[8 + 12] = {
    0x01,		    /* type EAGER */
    0x00,		    /* flags */
    0x00, 0x00,		    /* credits */
    0x0c, 0x00, 0x00, 0x00, /* len 12 */
    'h',  'e',	'l',  'l',  'o', ' ', 'e', 'v', 'r', 'd', 'm', 'a',
};

/* BYE: the sender closes gracefully. */
static const uint8_t lit_bye[8] = {0x05, 0x00, 0x00, 0x00,
				   0x00, 0x00, 0x00, 0x00};

/* The connect request's private data (the handshake, fixed part only):
 * magic u32 "EVR1" | version u8 1 | kind u8 (REQ 1) | user_len u8 |
 * reserved u8 | recv_depth u16 | init_window u16 | max_eager u32 |
 * max_msg u64.  Window 0: all of recv_depth at once, as every peer before
 * the field sent. */
static const uint8_t lit_hs_req[24] = {
    'E',  'V',	'R',  '1',			    /* magic 0x31525645 */
    0x01,					    /* version */
    0x01,					    /* kind REQ */
    0x00,					    /* user_len */
    0x00,					    /* reserved */
    0x0f, 0x00,					    /* recv_depth 15 */
    0x00, 0x00,					    /* init_window 0 */
    0x00, 0x20, 0x00, 0x00,			    /* max_eager 8192 */
    0x00, 0x00, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, /* max_msg 1 MiB */
};

/* ---- the raw client (child process) ---- */

/* The private data of the last event wait_cm() took, and its length. */
static uint8_t cm_pdata[256];
static size_t cm_pdata_len;

static int wait_cm(struct rdma_event_channel *ec, enum rdma_cm_event_type want,
		   int timeout_ms, enum rdma_cm_event_type *got)
{
	struct pollfd pfd = {.fd = ec->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return -1;
	if (rdma_get_cm_event(ec, &ev))
		return -1;
	*got = ev->event;
	cm_pdata_len = 0;
	if (ev->param.conn.private_data) {
		cm_pdata_len = ev->param.conn.private_data_len;
		if (cm_pdata_len > sizeof(cm_pdata))
			cm_pdata_len = sizeof(cm_pdata);
		memcpy(cm_pdata, ev->param.conn.private_data, cm_pdata_len);
	}
	rdma_ack_cm_event(ev);
	return *got == want ? 0 : 1;
}

/* One work completion, polled for at most timeout_ms: 0, or -1. */
static int poll_wc(struct ibv_cq *cq, struct ibv_wc *wc, int timeout_ms)
{
	double end = rt_now() + timeout_ms / 1000.0;
	int n;

	while ((n = ibv_poll_cq(cq, 1, wc)) == 0) {
		if (rt_now() > end)
			return -1;
		usleep(1000);
	}
	return n == 1 ? 0 : -1;
}

static size_t craft(enum bad_case bc, uint8_t *buf)
{
	struct evr__hdr h = {0};
	struct evr__rndv_req r = {0};

	switch (bc) {
	case BAD_TYPE:
		h.type = 77;
		break;
	case BAD_LEN_MAX:
		h.type = EVR_T_EAGER;
		h.len = 8192 + 16; /* fits the buffer, beyond the maximum */
		evr__hdr_encode(buf, &h);
		memset(buf + EVR_HDR_SIZE, 0x5a, h.len);
		return EVR_HDR_SIZE + h.len;
	case BAD_OVERSIZE:
		h.type = EVR_T_EAGER;
		h.len = 32768;
		evr__hdr_encode(buf, &h);
		memset(buf + EVR_HDR_SIZE, 0x5a, h.len);
		return EVR_HDR_SIZE + h.len;
	case BAD_TRUNCATED:
		h.type = EVR_T_EAGER;
		h.len = 100;
		evr__hdr_encode(buf, &h);
		return EVR_HDR_SIZE + 10;
	case BAD_FLAGS:
		h.type = EVR_T_EAGER;
		h.flags = 0x80;
		break;
	case BAD_RNDV_RKEY:
	case BAD_RNDV_LEN:
		h.type = EVR_T_RNDV_REQ;
		h.len = EVR_RNDV_REQ_SIZE;
		r.addr = 0x1000;
		r.rkey = 0xdeadbeef;
		r.len = bc == BAD_RNDV_LEN ? (1ull << 40) : 65536;
		r.id = 0;
		evr__hdr_encode(buf, &h);
		evr__rndv_req_encode(buf + EVR_HDR_SIZE, &r);
		return EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE;
	case BAD_CREDITS:
		h.type = EVR_T_CREDIT;
		h.credits = 1000;
		break;
	case BAD_CALL_FLAG:
		h.type = EVR_T_EAGER;
		h.flags = EVR_F_CALL;
		h.len = EVR_CALL_ID_SIZE + 10;
		evr__hdr_encode(buf, &h);
		evr__call_id_encode(buf + EVR_HDR_SIZE, 1);
		memset(buf + EVR_HDR_SIZE + EVR_CALL_ID_SIZE, 0x33, 10);
		return EVR_HDR_SIZE + EVR_CALL_ID_SIZE + 10;
	case BAD_CANCEL:
		h.type = EVR_T_CANCEL;
		h.len = EVR_CALL_ID_SIZE;
		evr__hdr_encode(buf, &h);
		evr__call_id_encode(buf + EVR_HDR_SIZE, 1);
		return EVR_HDR_SIZE + EVR_CALL_ID_SIZE;
	case BAD_FIN:
		h.type = EVR_T_RNDV_FIN;
		h.len = EVR_RNDV_FIN_SIZE;
		evr__hdr_encode(buf, &h);
		evr__rndv_fin_encode(buf + EVR_HDR_SIZE, 12345, 0);
		return EVR_HDR_SIZE + EVR_RNDV_FIN_SIZE;
	case BAD_FIN_CARRIED:
	case BAD_FIN_UNAGREED:
		h.type = EVR_T_EAGER;
		h.flags = EVR_F_FIN;
		h.len = EVR_RNDV_FIN_SIZE + 10;
		evr__hdr_encode(buf, &h);
		evr__rndv_fin_encode(buf + EVR_HDR_SIZE, 12345, 0);
		memset(buf + EVR_HDR_SIZE + EVR_RNDV_FIN_SIZE, 0x33, 10);
		return EVR_HDR_SIZE + h.len;
	case BAD_IMM_UNAGREED:
	case BAD_IMM_TAG: /* all payload: the header is the immediate data */
	case BAD_IMM_CALL: /* a call's id (0x33333333), then payload */
		memset(buf, 0x33, 10);
		return 10;
	case LIT_TYPE:
		memcpy(buf, lit_type7, sizeof(lit_type7));
		return sizeof(lit_type7);
	case LIT_LEN_BE:
		memcpy(buf, lit_len_be, sizeof(lit_len_be));
		memset(buf + sizeof(lit_len_be), 0x5a, LIT_BE_PAYLOAD);
		return sizeof(lit_len_be) + LIT_BE_PAYLOAD;
	case LIT_VALID:
		memcpy(buf, lit_eager, sizeof(lit_eager));
		return sizeof(lit_eager);
	default:
		break;
	}
	evr__hdr_encode(buf, &h);
	return EVR_HDR_SIZE;
}

/* Post one signaled send of n bytes from mem[0]; with immediate data imm
 * (network order) when it is not 0. */
static int raw_send_imm(struct rdma_cm_id *id, struct ibv_mr *mr,
			uint8_t *buf, size_t n, uint32_t imm)
{
	struct ibv_send_wr swr = {0}, *bad_s;
	struct ibv_sge sge;

	sge.addr = (uintptr_t)buf;
	sge.length = (uint32_t)n;
	sge.lkey = mr->lkey;
	swr.wr_id = 0;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
	swr.imm_data = imm;
	swr.send_flags = IBV_SEND_SIGNALED;
	return ibv_post_send(id->qp, &swr, &bad_s);
}

static int raw_send(struct rdma_cm_id *id, struct ibv_mr *mr, uint8_t *buf,
		    size_t n)
{
	return raw_send_imm(id, mr, buf, n, 0);
}

/* The server's accept, checked byte by byte: magic, version, kind REP. */
static bool rep_ok(void)
{
	return cm_pdata_len >= 24 && cm_pdata[0] == 'E' && cm_pdata[1] == 'V' &&
	       cm_pdata[2] == 'R' && cm_pdata[3] == '1' && cm_pdata[4] == 1 &&
	       cm_pdata[5] == 2;
}

/* The echo of lit_eager, header byte by byte (the credits it returns may
 * be any number). */
static bool echo_ok(const uint8_t *b, uint32_t n)
{
	return n == sizeof(lit_eager) && b[0] == 0x01 && b[1] == 0x00 &&
	       b[4] == 0x0c && b[5] == 0 && b[6] == 0 && b[7] == 0 &&
	       !memcmp(b + 8, lit_eager + 8, sizeof(lit_eager) - 8);
}

/* A credit update, which the server may send at any time: type CREDIT,
 * no payload. */
static bool is_credit(const uint8_t *b, uint32_t n)
{
	return n == 8 && b[0] == 0x04 && b[1] == 0 && b[4] == 0 && b[5] == 0 &&
	       b[6] == 0 && b[7] == 0;
}

/* LIT_VALID after the literal message went out: its send completes, its
 * echo comes back; then a literal BYE and the disconnect.  0 or an exit
 * code. */
static int raw_echo_and_bye(struct rdma_cm_id *id, struct ibv_cq *cq,
			    struct ibv_mr *mr, uint8_t (*mem)[40000])
{
	struct ibv_wc wc;
	bool sent = false, echoed = false;

	while (!sent || !echoed) {
		if (poll_wc(cq, &wc, 10000))
			return 20;
		if (wc.status != IBV_WC_SUCCESS)
			return 21;
		if (wc.opcode == IBV_WC_SEND) {
			sent = true;
		} else if (wc.opcode != IBV_WC_RECV || wc.wr_id < 1 ||
			   wc.wr_id > 15) {
			return 22;
		} else if (!is_credit(mem[wc.wr_id], wc.byte_len)) {
			if (echoed || !echo_ok(mem[wc.wr_id], wc.byte_len))
				return 23;
			echoed = true;
		}
	}
	memcpy(mem[0], lit_bye, sizeof(lit_bye));
	if (raw_send(id, mr, mem[0], sizeof(lit_bye)))
		return 24;
	do {
		if (poll_wc(cq, &wc, 10000))
			return 25;
	} while (wc.opcode != IBV_WC_SEND);
	if (wc.status != IBV_WC_SUCCESS)
		return 26;
	return rdma_disconnect(id) ? 27 : 0;
}

/* One RDMA READ of n bytes at raddr/rkey into mem[0] (mr); its
 * completion's status, or -1 when none came.  Receives are skipped (a
 * failed read flushes them). */
static int raw_read(struct rdma_cm_id *id, struct ibv_cq *cq,
		    struct ibv_mr *mr, uint8_t *to, uint64_t raddr,
		    uint32_t rkey, uint32_t n)
{
	struct ibv_send_wr swr = {0}, *bad_s;
	struct ibv_sge sge = {(uintptr_t)to, n, mr->lkey};
	struct ibv_wc wc;

	swr.wr_id = HOSTILE_READ_WR;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_RDMA_READ;
	swr.send_flags = IBV_SEND_SIGNALED;
	swr.wr.rdma.remote_addr = raddr;
	swr.wr.rdma.rkey = rkey;
	if (ibv_post_send(id->qp, &swr, &bad_s))
		return -1;
	do {
		if (poll_wc(cq, &wc, 10000))
			return -1;
	} while (wc.wr_id != HOSTILE_READ_WR);
	return (int)wc.status;
}

/* The hostile cases, once connected: send a rendezvous request for our
 * HOSTILE_LEN bytes, take the server's FIN and its echo's request, then
 * read what the case says.  0 when every out-of-range read failed with a
 * remote access error (and the in-range one, before the FIN, gave the
 * bytes), else a code. */
static int raw_hostile(enum bad_case bc, struct rdma_cm_id *id,
		       struct ibv_cq *cq, struct ibv_mr *mr,
		       uint8_t (*mem)[40000])
{
	static uint8_t src[REGION_MSG_LEN];
	size_t len = bc >= REGION_BEFORE ? REGION_MSG_LEN : HOSTILE_LEN;
	struct evr__limits lim = {HOSTILE_EAGER, 1 << 20, 0};
	struct evr__hdr h = {0};
	struct evr__rndv_req r = {0};
	struct evr__parsed ps;
	struct ibv_mr *smr;
	struct ibv_wc wc;
	const char *why;
	bool fin = false, req = false;
	double end;
	int st;

	if (bc >= REGION_BEFORE) /* the same reads as the plain cases */
		bc = (enum bad_case)(HOSTILE_BEFORE + (bc - REGION_BEFORE));
	rt_fill(src, len, 77);
	smr = ibv_reg_mr(mr->pd, src, len,
			 IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!smr)
		return 40;
	h.type = EVR_T_RNDV_REQ;
	h.len = EVR_RNDV_REQ_SIZE;
	r.addr = (uintptr_t)src;
	r.len = len;
	r.rkey = smr->rkey;
	r.id = 7;
	evr__hdr_encode(mem[0], &h);
	evr__rndv_req_encode(mem[0] + EVR_HDR_SIZE, &r);
	if (raw_send(id, mr, mem[0], EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE))
		return 41;
	while (!fin || !req) {
		if (poll_wc(cq, &wc, 10000))
			return 42;
		if (wc.status != IBV_WC_SUCCESS)
			return 43;
		if (wc.opcode != IBV_WC_RECV)
			continue;
		if (evr__msg_parse(mem[wc.wr_id], wc.byte_len, &lim, &ps, &why))
			return 44;
		if (ps.hdr.type == EVR_T_RNDV_FIN && ps.fin_id == 7)
			fin = true;
		else if (ps.hdr.type == EVR_T_RNDV_REQ)
			req = true, r = ps.rndv;
	}
	if (r.len != len - 1)
		return 45;
	switch (bc) {
	case HOSTILE_BEFORE:
		st = raw_read(id, cq, mr, mem[0], r.addr - 1, r.rkey, 1);
		break;
	case HOSTILE_AFTER:
		st = raw_read(id, cq, mr, mem[0], r.addr + r.len, r.rkey, 1);
		break;
	default:
		/* in range, before the FIN: the echo's bytes */
		if (raw_read(id, cq, mr, mem[0], r.addr, r.rkey,
			     (uint32_t)r.len) != IBV_WC_SUCCESS)
			return 46;
		if (memcmp(mem[0], src + 1, r.len))
			return 47;
		h.type = EVR_T_RNDV_FIN;
		h.len = EVR_RNDV_FIN_SIZE;
		evr__hdr_encode(mem[1], &h);
		evr__rndv_fin_encode(mem[1] + EVR_HDR_SIZE, r.id, 0);
		if (raw_send(id, mr, mem[1], EVR_HDR_SIZE + EVR_RNDV_FIN_SIZE))
			return 48;
		/* the server's callback fires once the FIN is in; the
		 * access ends there.  Until the server has taken the FIN in
		 * a read still succeeds: read again until one fails, for a
		 * second (times the time scale: the server may run under
		 * valgrind). */
		end = rt_now() + rt_timeout_scale();
		do {
			usleep(100000);
			st = raw_read(id, cq, mr, mem[0], r.addr, r.rkey,
				      (uint32_t)r.len);
		} while (st == IBV_WC_SUCCESS && rt_now() < end);
		break;
	}
	if (st == IBV_WC_SUCCESS)
		return 49; /* read what it was not sent */
	if (st != IBV_WC_REM_ACCESS_ERR)
		return 50;
	return rdma_disconnect(id) ? 51 : 0;
}

/* Exit status: 0 when the server reacted as it must (reject for a bad
 * handshake, a disconnect after bad traffic, the echo of the valid
 * literal message and the disconnect after our goodbye), else a code
 * saying what went wrong. */
static int raw_client(enum bad_case bc, uint16_t port)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in dst = {0};
	struct ibv_qp_init_attr qa = {0};
	struct rdma_conn_param cp = {0};
	enum rdma_cm_event_type got;
	struct ibv_recv_wr rwr = {0}, *bad_r;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	static uint8_t mem[16][40000];
	uint8_t pdata[EVR_HS_MAX];
	struct evr__hs hs = {0};
	size_t n;
	int i, rc;

	dst.sin_family = AF_INET;
	dst.sin_port = htons(port);
	inet_pton(AF_INET, rt_addr(), &dst.sin_addr);
	if (!ec || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) ||
	    wait_cm(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000, &got))
		return 10;
	pd = ibv_alloc_pd(id->verbs);
	cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE);
	qa.send_cq = qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!pd || !cq || !mr || rdma_create_qp(id, pd, &qa))
		return 11;
	for (i = 1; i < 16; i++) {
		sge.addr = (uintptr_t)mem[i];
		sge.length = sizeof(mem[i]);
		sge.lkey = mr->lkey;
		rwr.wr_id = (uint64_t)i;
		rwr.sg_list = &sge;
		rwr.num_sge = 1;
		if (ibv_post_recv(id->qp, &rwr, &bad_r))
			return 12;
	}
	if (rdma_resolve_route(id, 2000) ||
	    wait_cm(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000, &got))
		return 13;

	if (is_literal_case(bc)) {
		/* 15 receives posted, 8 KiB eager, 1 MiB messages */
		memcpy(pdata, lit_hs_req, sizeof(lit_hs_req));
		n = sizeof(lit_hs_req);
	} else {
		hs.kind = EVR_HS_REQ;
		hs.recv_depth = 15;
		hs.max_eager = is_hostile_case(bc) ? HOSTILE_EAGER : 8192;
		hs.max_msg = 1 << 20;
		/* offered; a server that does not speak it must not agree */
		if (bc == BAD_CALL_FLAG || bc == BAD_CANCEL)
			hs.features = EVR_HS_F_CALLS;
		if (bc == BAD_FIN_CARRIED)
			hs.features = EVR_HS_F_FIN;
		if (bc == BAD_IMM_TAG || bc == BAD_IMM_CALL)
			hs.features = EVR_HS_F_IMM;
		n = evr__hs_encode(pdata, &hs);
	}
	if (bc == BAD_FIN_UNAGREED)
		pdata[7] = 0x40;
	if (bc == BAD_MAGIC)
		pdata[0] ^= 0xff;
	if (bc == BAD_VERSION)
		pdata[4] = 99;
	cp.private_data = bc == BAD_NO_PRIVDATA ? NULL : pdata;
	cp.private_data_len = bc == BAD_NO_PRIVDATA ? 0 : (uint8_t)n;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 6;
	if (rdma_connect(id, &cp))
		return 14;
	rc = wait_cm(ec, RDMA_CM_EVENT_ESTABLISHED, 10000, &got);
	if (is_handshake_case(bc))
		return rc == 1 && got == RDMA_CM_EVENT_REJECTED ? 0 : 15;
	if (rc)
		return 16;
	if (is_literal_case(bc) && !rep_ok())
		return 28;
	/* the reply's features byte: nothing agreed that it does not do */
	if ((bc == BAD_CALL_FLAG || bc == BAD_CANCEL ||
	     bc == BAD_FIN_UNAGREED || bc == BAD_IMM_UNAGREED) &&
	    (cm_pdata_len < 24 || cm_pdata[7] != 0))
		return 29;
	/* ... and what it does, when offered */
	if (bc == BAD_FIN_CARRIED &&
	    (cm_pdata_len < 24 || cm_pdata[7] != EVR_HS_F_FIN))
		return 29;
	if ((bc == BAD_IMM_TAG || bc == BAD_IMM_CALL) &&
	    (cm_pdata_len < 24 || cm_pdata[7] != EVR_HS_F_IMM))
		return 29;

	if (is_hostile_case(bc)) {
		if ((rc = raw_hostile(bc, id, cq, mr, mem)))
			return rc;
		goto wait_disconnect;
	}
	n = craft(bc, mem[0]);
	if (raw_send_imm(id, mr, mem[0], n,
			 bc == BAD_IMM_UNAGREED ? evr__imm_encode(0, 0)
			 : bc == BAD_IMM_TAG    ? htobe32(0xe2000000u)
			 : bc == BAD_IMM_CALL   ? evr__imm_encode(EVR_F_CALL, 0)
						: 0))
		return 17;
	if (bc == LIT_VALID && (rc = raw_echo_and_bye(id, cq, mr, mem)))
		return rc;
wait_disconnect:
	/* the server must drop us (or answer our disconnect): DISCONNECTED
	 * within a bounded time */
	for (i = 0; i < 3; i++) {
		rc = wait_cm(ec, RDMA_CM_EVENT_DISCONNECTED, 10000, &got);
		if (rc == 0)
			break;
		if (rc < 0)
			return 18;
	}
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return rc == 0 ? 0 : 19;
}

/* ---- the parent: an evrdma echo server and a good client ---- */

struct server {
	evr_ctx *ctx;
	evr_listener *l;
	uint8_t *region; /* REGION_SIZE bytes, registered for remote read */
	evr_mr *mr;
	int accepted;
	/* on_close (or a failed on_connect) of the server's conns: -EPROTO,
	 * -ESHUTDOWN (the peer said goodbye), anything else */
	int closes_eproto, closes_shutdown, closes_other;
};

static void echo_sent(evr_conn *c, int status, void *arg)
{
	(void)c;
	(void)status;
	evr_msg_release(arg);
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct server *srv = arg;
	evr_msg *m;

	if (len == REGION_MSG_LEN) { /* see REGION_MSG_LEN */
		uint8_t *at = srv->region + REGION_AT;

		memset(srv->region, REGION_FILL, REGION_SIZE);
		memcpy(at, (const uint8_t *)data + 1, len - 1);
		(void)evr_send(c, at, len - 1, NULL, NULL);
		return;
	}
	m = evr_conn_hold(c);
	assert_non_null(m);
	if (len == HOSTILE_LEN) { /* see HOSTILE_LEN */
		data = (const uint8_t *)data + 1;
		len--;
	}
	if (evr_send(c, data, len, echo_sent, m) < 0)
		evr_msg_release(m);
}

static void srv_close(evr_conn *c, int status, void *arg)
{
	struct server *srv = arg;

	(void)c;
	if (status == -EPROTO)
		srv->closes_eproto++;
	else if (status == -ESHUTDOWN)
		srv->closes_shutdown++;
	else
		srv->closes_other++;
}

/* A conn that fails before it is established reports through on_connect
 * (a bad message can arrive before the server's ESTABLISHED event). */
static void srv_connect(evr_conn *c, int status, void *arg)
{
	if (status < 0)
		srv_close(c, status, arg);
}

static void srv_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct server *srv = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = srv_connect;
	o.on_recv = srv_recv;
	o.on_close = srv_close;
	o.arg = srv;
	assert_int_equal(evr_accept(req, &o, NULL), 0);
	srv->accepted++;
}

struct good {
	evr_conn *conn;
	int up, closed, bad;
	uint32_t sent, echoed;
	uint8_t buf[4][2048];
};

static void good_pump(struct good *g);

static void good_sent(evr_conn *c, int status, void *arg)
{
	struct good *g = arg;

	(void)c;
	if (status)
		g->bad++;
}

static void good_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct good *g = arg;
	size_t want = 100 + (g->echoed % 7) * 250;

	(void)c;
	if (len != want || rt_verify(data, len, g->echoed) >= 0)
		g->bad++;
	g->echoed++;
	good_pump(g);
}

static void good_pump(struct good *g)
{
	/* window of 2: buffers are reused only after their echo came back,
	 * which (in order) means their send completed too */
	while (g->up && g->sent < g->echoed + 2) {
		uint8_t *b = g->buf[g->sent % 4];
		size_t len = 100 + (g->sent % 7) * 250;

		rt_fill(b, len, g->sent);
		assert_int_equal(evr_send(g->conn, b, len, good_sent, g), 0);
		g->sent++;
	}
}

static void good_connect(evr_conn *c, int status, void *arg)
{
	struct good *g = arg;

	assert_int_equal(status, 0);
	g->conn = c;
	g->up = 1;
	good_pump(g);
}

static void good_close(evr_conn *c, int status, void *arg)
{
	struct good *g = arg;

	(void)c;
	(void)status;
	g->up = 0;
	g->closed++;
}

/* ---- a new connection after each bad peer ---- */

#define PROBE_MSGS 2

/* A fresh evrdma connection: one eager and one rendezvous message, each
 * echoed and checked, then a graceful close. */
struct probe {
	int connects, connect_status;
	int echoes, bad;
	int closes, close_status;
	uint8_t *buf[PROBE_MSGS];
};

static const size_t probe_len[PROBE_MSGS] = {1000, 30000};

static void probe_connect(evr_conn *c, int status, void *arg)
{
	struct probe *p = arg;

	p->connects++;
	p->connect_status = status;
	if (status)
		return;
	for (int i = 0; i < PROBE_MSGS; i++)
		if (evr_send(c, p->buf[i], probe_len[i], NULL, NULL))
			p->bad++;
}

static void probe_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct probe *p = arg;
	int i = p->echoes++;

	if (i >= PROBE_MSGS || len != probe_len[i] ||
	    rt_verify(data, len, 1000 + (uint32_t)i) >= 0)
		p->bad++;
	if (p->echoes == PROBE_MSGS && evr_conn_close(c, 0))
		p->bad++;
}

static void probe_close(evr_conn *c, int status, void *arg)
{
	struct probe *p = arg;

	(void)c;
	p->closes++;
	p->close_status = status;
}

struct probe_wait {
	struct probe *p;
	struct server *srv;
	int want_shutdown;
};

static int probe_done(void *arg)
{
	struct probe_wait *w = arg;

	return (w->p->connects && w->p->connect_status) ||
	       (w->p->closes && w->srv->closes_shutdown >= w->want_shutdown);
}

/* The server accepts a new connection and serves it; its end sees the
 * goodbye (-ESHUTDOWN). */
static void probe_run(struct ev_loop *loop, struct server *srv, uint16_t port,
		      const char *after)
{
	struct probe p = {0};
	struct probe_wait w = {&p, srv, srv->closes_shutdown + 1};
	struct evr_conn_opts co;
	int accepted = srv->accepted;

	for (int i = 0; i < PROBE_MSGS; i++) {
		p.buf[i] = malloc(probe_len[i]);
		assert_non_null(p.buf[i]);
		rt_fill(p.buf[i], probe_len[i], 1000 + (uint32_t)i);
	}
	evr_conn_opts_init(&co);
	co.on_connect = probe_connect;
	co.on_recv = probe_recv;
	co.on_close = probe_close;
	co.arg = &p;
	assert_int_equal(evr_connect(srv->ctx, rt_addr(), port, &co, NULL), 0);
	if (rt_run_until(loop, probe_done, &w, 20))
		fail_msg("after '%s': a new connection did not finish in time "
			 "(%d connects, %d echoes, %d closes)",
			 after, p.connects, p.echoes, p.closes);
	if (p.connect_status || p.bad || p.echoes != PROBE_MSGS ||
	    p.close_status || p.closes != 1 || srv->accepted != accepted + 1)
		fail_msg("after '%s': a new connection: connect %s, %d of %d "
			 "echoes, %d bad, close %s, %d accepted",
			 after, evr_err_name(p.connect_status), p.echoes,
			 PROBE_MSGS, p.bad, evr_err_name(p.close_status),
			 srv->accepted - accepted);
	for (int i = 0; i < PROBE_MSGS; i++)
		free(p.buf[i]);
}

/* ---- the test ---- */

struct wait_child {
	pid_t pid;
	int status;
	int done;
	struct server *srv;
	int want_closes;
};

static int child_and_close(void *arg)
{
	struct wait_child *w = arg;

	if (!w->done && waitpid(w->pid, &w->status, WNOHANG) == w->pid)
		w->done = 1;
	return w->done && w->srv->closes_eproto + w->srv->closes_shutdown +
				  w->srv->closes_other >=
			      w->want_closes;
}

static int good_up(void *arg)
{
	struct good *g = arg;

	return g->up && g->echoed >= 10;
}

struct progress {
	struct good *g;
	uint32_t want;
};

/* The good connection is up and has echoed `want` messages. */
static int good_progress(void *arg)
{
	struct progress *pr = arg;

	return !pr->g->up || pr->g->echoed >= pr->want;
}

/* Echoes the good connection must make after each bad peer is dealt with. */
#define GOOD_MORE 10

/* Run the raw client of case bc in a child process until it exits and the
 * server has closed its conn (if it had one). */
static int run_raw_client(struct ev_loop *loop, struct server *srv,
			  enum bad_case bc, uint16_t port)
{
	struct wait_child w = {0};
	const char *self = rt_self_exe();

	w.srv = srv;
	w.want_closes = srv->closes_eproto + srv->closes_shutdown +
			srv->closes_other + (is_handshake_case(bc) ? 0 : 1);
	fflush(NULL);
	w.pid = fork();
	assert_true(w.pid >= 0);
	if (w.pid == 0) {
		/* a fresh process: verbs resources must not be shared across
		 * fork() with the parent's rdma_cm state */
		char a1[16], a2[16];

		snprintf(a1, sizeof(a1), "%d", bc);
		snprintf(a2, sizeof(a2), "%u", port);
		execl(self, "t_badpeer", "--raw-client", a1, a2, (char *)NULL);
		_exit(127);
	}
	if (rt_run_until(loop, child_and_close, &w, 40)) {
		kill(w.pid, SIGKILL);
		waitpid(w.pid, NULL, 0);
		fail_msg("case '%s': no reaction in time", cases[bc].name);
	}
	return w.status;
}

/* Whether the device has type 2 memory windows, asked of verbs directly:
 * what the library must then use. */
static bool device_has_mw(void)
{
	struct ibv_context **devs = rdma_get_devices(NULL);
	struct ibv_device_attr a;
	bool mw = false;

	assert_non_null(devs);
	assert_non_null(devs[0]);
	assert_int_equal(ibv_query_device(devs[0], &a), 0);
	mw = a.max_mw > 0 && (a.device_cap_flags &
			      (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
			       IBV_DEVICE_MEM_WINDOW_TYPE_2B));
	rdma_free_devices(devs);
	return mw;
}

enum pass {
	PASS_ALL,	 /* every case, the library's defaults */
	PASS_NO_WINDOWS, /* the hostile cases, EVR_MW=off */
	PASS_CACHE,	 /* the hostile cases, EVR_REG_CACHE=8 */
	PASS_INSIDE,	 /* the reads after FIN, EVR_MW=inside */
};

static bool in_pass(enum pass pass, enum bad_case bc)
{
	switch (pass) {
	case PASS_ALL:
		return true;
	case PASS_INSIDE:
		return bc == HOSTILE_AFTER_FIN || bc == REGION_AFTER_FIN;
	default:
		return is_hostile_case(bc);
	}
}

/* The cases of a pass against one server: with the device's memory
 * windows (the default), or with EVR_MW=off (the per-send registrations
 * a device without windows gets), or with the registration cache. */
static void run_bad_peers(enum pass pass)
{
	bool windows = pass != PASS_NO_WINDOWS;
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct server srv = {0};
	struct good *g = calloc(1, sizeof(*g));
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	struct evr_stats st;
	uint16_t port;
	int bc, probes = 0, rndv = 0;
	bool mw = windows && device_has_mw();

	rt_ctx_opts(&o);
	if (pass == PASS_NO_WINDOWS)
		assert_int_equal(setenv("EVR_MW", "off", 1), 0);
	if (pass == PASS_CACHE)
		assert_int_equal(setenv("EVR_REG_CACHE", "8", 1), 0);
	if (pass == PASS_INSIDE)
		assert_int_equal(setenv("EVR_MW", "inside", 1), 0);
	assert_int_equal(evr_ctx_create(&srv.ctx, loop, &o), 0);
	assert_int_equal(unsetenv("EVR_MW"), 0);
	assert_int_equal(unsetenv("EVR_REG_CACHE"), 0);
	assert_int_equal(posix_memalign((void **)&srv.region, 4096,
					REGION_SIZE),
			 0);
	assert_int_equal(evr_mr_reg(srv.ctx, srv.region, REGION_SIZE,
				    EVR_ACCESS_REMOTE_READ, &srv.mr),
			 0);
	evr_ctx_stats(srv.ctx, &st);
	printf("# %s: rendezvous sources read through %s\n",
	       pass == PASS_ALL		? "defaults"
	       : pass == PASS_CACHE	? "EVR_REG_CACHE=8"
	       : pass == PASS_INSIDE	? "EVR_MW=inside"
					: "EVR_MW=off",
	       st.rndv_access == EVR_RNDV_WINDOW ? "memory windows"
						 : "per-send registrations");
	if (windows && !mw)
		printf("# the device has no type 2 memory windows: every pass "
		       "tests the registrations\n");
	/* with windows unless the device has none, or they were turned off,
	 * or the library does not trust this device's (rdma_rxe:
	 * docs/protocol.md, "What a peer can touch") */
	if (!mw || pass == PASS_NO_WINDOWS)
		assert_int_equal(st.rndv_access, EVR_RNDV_REGISTER);
	else if (pass == PASS_INSIDE)
		assert_int_equal(st.rndv_access, EVR_RNDV_WINDOW);
	else
		assert_true(st.rndv_access == EVR_RNDV_WINDOW ||
			    st.rndv_access == EVR_RNDV_REGISTER);
	mw = st.rndv_access == EVR_RNDV_WINDOW;
	assert_int_equal(evr_listen(srv.ctx, rt_addr(), 0, 16, srv_accept,
				    &srv, &srv.l),
			 0);
	port = evr_listener_port(srv.l);

	evr_conn_opts_init(&co);
	co.on_connect = good_connect;
	co.on_recv = good_recv;
	co.on_close = good_close;
	co.arg = g;
	assert_int_equal(evr_connect(srv.ctx, rt_addr(), port, &co, NULL), 0);
	assert_int_equal(rt_run_until(loop, good_up, g, 20), 0);
	assert_int_equal(srv.accepted, 1);

	for (bc = 0; bc < BAD_NCASES; bc++) {
		enum expect x = cases[bc].expect;
		struct progress pr = {g, 0};
		uint32_t before = g->echoed, dealt;
		int eproto = srv.closes_eproto, shut = srv.closes_shutdown;
		int other = srv.closes_other;
		int accepted = srv.accepted, status;

		if (!in_pass(pass, (enum bad_case)bc))
			continue;
		rndv += is_hostile_case((enum bad_case)bc);
		status = run_raw_client(loop, &srv, (enum bad_case)bc, port);
		dealt = g->echoed;
		/* the good connection is untouched and keeps echoing:
		 * GOOD_MORE echoes after the server is done with the peer,
		 * so more than it had when the peer came */
		pr.want = dealt + GOOD_MORE;
		(void)rt_run_until(loop, good_progress, &pr, 10);
		printf("# %-32s raw client exit %d, server: %d accepted, "
		       "closes -EPROTO %d -ESHUTDOWN %d; good echoes %u "
		       "meanwhile, %u after\n",
		       cases[bc].name, WEXITSTATUS(status),
		       srv.accepted - accepted, srv.closes_eproto - eproto,
		       srv.closes_shutdown - shut, dealt - before,
		       g->echoed - dealt);
		if (!WIFEXITED(status) || WEXITSTATUS(status) ||
		    srv.accepted != accepted + (x != X_REJECT) ||
		    srv.closes_eproto != eproto + (x == X_EPROTO) ||
		    srv.closes_shutdown != shut + (x == X_ECHO) ||
		    srv.closes_other != other + (x == X_DENIED))
			fail_msg("case '%s': raw client exit %d (want 0), "
				 "server accepted %d (want %d), closes -EPROTO "
				 "%d (want %d) -ESHUTDOWN %d (want %d), other "
				 "%d (want %d)",
				 cases[bc].name,
				 WIFEXITED(status) ? WEXITSTATUS(status) : -1,
				 srv.accepted - accepted, x != X_REJECT,
				 srv.closes_eproto - eproto, x == X_EPROTO,
				 srv.closes_shutdown - shut, x == X_ECHO,
				 srv.closes_other - other, x == X_DENIED);
		if (!g->up || g->closed || g->bad || g->echoed < pr.want)
			fail_msg("after '%s': the good connection is %s, %d "
				 "closes, %d bad, %u echoes (want %u)",
				 cases[bc].name, g->up ? "up" : "down",
				 g->closed, g->bad, g->echoed, pr.want);
		/* the server still accepts and serves new connections */
		probe_run(loop, &srv, port, cases[bc].name);
		probes++;
		assert_int_equal(srv.closes_other, other + (x == X_DENIED));
	}
	printf("# %d new connections served, one after each peer\n", probes);
	/* a window for each rendezvous the server sent: the hostile echoes
	 * and one per probe (the good connection's messages are eager) */
	evr_ctx_stats(srv.ctx, &st);
	printf("# %llu memory windows bound\n",
	       (unsigned long long)st.rndv_windows);
	if (mw)
		assert_true(st.rndv_windows >= (uint64_t)(rndv + probes));
	else
		assert_int_equal(st.rndv_windows, 0);
	assert_int_equal(evr_mr_dereg(srv.mr), 0);
	free(srv.region);
	evr_listener_close(srv.l);
	evr_ctx_destroy(srv.ctx);
	assert_int_equal(g->closed, 1); /* on_close(-ECANCELED) at destroy */
	free(g);
	ev_loop_destroy(loop);
}

static void test_pass(void **state)
{
	run_bad_peers(*(const enum pass *)*state);
}

int main(int argc, char **argv)
{
	static enum pass passes[] = {PASS_ALL, PASS_NO_WINDOWS,
					   PASS_CACHE, PASS_INSIDE};
	const struct CMUnitTest tests[] = {
		{"bad_peers", test_pass, NULL, NULL, &passes[0]},
		{"hostile_without_windows", test_pass, NULL, NULL,
		 &passes[1]},
		{"hostile_with_cache", test_pass, NULL, NULL, &passes[2]},
		{"windows_inside_region", test_pass, NULL, NULL,
		 &passes[3]},
	};

	/* The raw client keeps its verbs objects to the end (some of its
	 * exits are early ones): _exit, no leak report for a helper process
	 * that is not the code under test. */
	if (argc == 4 && !strcmp(argv[1], "--raw-client"))
		_exit(raw_client((enum bad_case)atoi(argv[2]),
				 (uint16_t)atoi(argv[3])));

	rt_init(600);
	return cmocka_run_group_tests_name("rdma_badpeer", tests, NULL, NULL);
}
