/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A fixture for the unit tests of the upper layers: a ctx on the mocks
 * (mock_verbs, mock_cm), a connection made through the library's own
 * connect or accept path, and the peer at its other end, played by the
 * test.
 *
 * The peer reads what our side posted from the mock's WR log (decoded with
 * lib/proto.c) and answers with completions: it fills our posted receives
 * with its frames, completes our sends (carrying out our RDMA READs from
 * its memory, which is the test's), or flushes everything as a QP in the
 * error state does.  On a ctx with a shared receive queue the peer fills
 * the SRQ's next posted receive instead (mock_wrs.srecv), and its
 * completion names our conn's QP, as a device's does.  Nothing happens
 * until the test pumps the ctx (peer_pump: evr_ctx_process, which polls
 * the CQ in POLL mode and takes the scripted rdma_cm events).
 *
 * The conn's callbacks are recorded in the peer: how many times each
 * fired, with which status, in which state the conn was, and a copy of
 * every message received.  Calls (rpc.c) are off unless the test turns
 * them on before the conn is made (p->calls, p->serve): then the peer's
 * handshake speaks them, and the calls our side makes, their replies and
 * the requests it serves are recorded too.
 */
#ifndef EVR_PEER_H
#define EVR_PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "evrdma-int.h"
#include "mock_cm.h"
#include "mock_verbs.h"

#define PEER_MAX_MSGS  64
#define PEER_MAX_OPS   64
#define PEER_MAX_CALLS 64

struct peer;
typedef void (*peer_recv_hook)(struct peer *p, const void *data, size_t len);
/* Called from a call's callback (peer_call_cb) after it was recorded. */
typedef void (*peer_call_hook)(struct peer *p, unsigned i, int status,
			       const void *reply, size_t len);
/* Called from on_request after the request was recorded. */
typedef void (*peer_request_hook)(struct peer *p, evr_request *r,
				  const void *data, size_t len);

/* A frame our side sent, or another WR it posted. */
struct peer_frame {
	struct mock_wr wr;     /* as logged (wr.data: the bytes sent) */
	bool parsed;	       /* a SEND that evr__msg_parse accepted */
	struct evr__parsed msg; /* its header and body */
};

struct peer {
	evr_ctx *ctx;
	evr_conn *conn; /* NULL once it is freed */
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	/* the peer's handshake: our credits, and its limits */
	uint16_t depth;
	uint16_t init_window; /* 0: all of depth at once (no SRQ of its own) */
	uint32_t max_eager;
	uint64_t max_msg;
	int keepalive_ms; /* evr_conn_opts.keepalive_ms of our conn */
	/* progress through the WR logs (indexes of mock_wrs) */
	unsigned seen;	    /* send log: frames read by peer_next */
	unsigned done;	    /* send log: WRs completed */
	unsigned recv_next; /* receive log: next receive to fill */
	/* callbacks */
	unsigned connects, closes, drains;
	int connect_status, close_status;
	enum evr__conn_state connect_state, close_state;
	unsigned ops_at_close; /* op callbacks fired before on_close */
	struct {
		uint8_t *data;
		size_t len;
	} msgs[PEER_MAX_MSGS];
	unsigned nmsgs;
	unsigned imms;
	uint32_t imm;
	peer_recv_hook on_recv; /* called from on_recv after the copy */
	/* evr_op_cb of ops submitted with peer_op_arg: index -> count, status */
	unsigned op_calls[PEER_MAX_OPS];
	int op_status[PEER_MAX_OPS];
	unsigned nop_calls;
	unsigned op_order[PEER_MAX_OPS * 2];
	struct peer_opref {
		struct peer *p;
		unsigned i;
	} refs[PEER_MAX_OPS];
	/* Calls.  calls: the peer speaks them -- its handshake offers (a
	 * request) or agrees to (a reply) EVR_HS_F_CALLS, and peer_next
	 * parses frames with call flags and CANCELs.  serve: our conn's
	 * opts set on_request (recorded below).  max_calls: our conn's
	 * evr_conn_opts.max_calls.  All off by default. */
	bool calls, serve;
	unsigned max_calls;
	/* fin: the peer's handshake speaks EVR_HS_F_FIN (FINs carried by
	 * data), and peer_next parses frames with EVR_F_FIN.  Off by
	 * default, like calls. */
	bool fin;
	/* imm_hdr: the peer's handshake speaks EVR_HS_F_IMM (headers in
	 * immediate data), peer_next parses such frames, and
	 * peer_call_eager sends so.  Off by default. */
	bool imm_hdr;
	uint8_t newer_features; /* more bits its handshake offers (unknown) */
	/* evr_call_cb of calls made with peer_call_arg: index -> count,
	 * status, a copy of the reply */
	unsigned call_calls[PEER_MAX_CALLS];
	int call_status[PEER_MAX_CALLS];
	struct {
		uint8_t *data;
		size_t len;
	} call_reply[PEER_MAX_CALLS];
	unsigned ncall_calls;
	unsigned calls_at_close; /* call callbacks fired before on_close */
	peer_call_hook on_call;
	struct peer_opref call_refs[PEER_MAX_CALLS];
	/* on_request: each request's handle and a copy of its bytes */
	struct {
		evr_request *r;
		uint8_t *data;
		size_t len;
	} reqs[PEER_MAX_MSGS];
	unsigned nreqs;
	peer_request_hook on_request;
};

/* ctx options the tests start from: device mock0, POLL mode, no
 * keepalive, every send signaled, 8 receives, 1 KiB eager. */
void peer_ctx_opts(struct evr_ctx_opts *o);
/* A ctx on the mocks (NULL opts: peer_ctx_opts). */
evr_ctx *peer_ctx_new(const struct evr_ctx_opts *o);
/* Destroy the ctx, then free the mocks' leftovers. */
void peer_ctx_free(evr_ctx *ctx);
/* Fresh mocks: mock_verbs and mock_cm reset. */
void peer_mocks_reset(void);
/* Run the ctx until it settles. */
void peer_pump(evr_ctx *ctx);
/* Sleep ms milliseconds (to let a timer of the ctx expire). */
void peer_sleep_ms(unsigned ms);
/* The conn's send credits, from evr_conn_info. */
unsigned peer_send_credits(evr_conn *c);

/* A peer with the default handshake (8 receives, 1 KiB eager, 1 MiB
 * messages) and its conn options (callbacks recorded in p). */
void peer_init(struct peer *p, evr_ctx *ctx);
void peer_conn_opts(struct peer *p, struct evr_conn_opts *o);
void peer_fini(struct peer *p);
/* A ctx on the mocks as they stand (peer_ctx_new(o)) and p a peer on it
 * (peer_init); returns the ctx. */
evr_ctx *peer_start(struct peer *p, const struct evr_ctx_opts *o);
/* Undo peer_start: peer_ctx_free(p->ctx) (a test that destroyed the ctx
 * itself sets p->ctx NULL), then peer_fini(p). */
void peer_stop(struct peer *p);
/* The handshake the peer sends, encoded (kind: EVR_HS_REQ or _REP). */
size_t peer_hs(const struct peer *p, uint8_t kind, uint8_t *buf);
/* An established conn: ours connects (connect) or accepts (accept). */
void peer_connect(struct peer *p);
void peer_accept(struct peer *p);

/* The next WR our side posted on this conn's QP since the last call;
 * false if none. */
bool peer_next(struct peer *p, struct peer_frame *f);
/* Frames posted and not yet read. */
unsigned peer_unread(const struct peer *p);
/* Complete every send WR of ours posted so far, successfully; our RDMA
 * READs, WRITEs and atomics are carried out on the test's memory at
 * wr.raddr. */
void peer_ack(struct peer *p);
/* peer_ack and pump: then the callback of op i (peer_op_arg(p, i)) must
 * have fired once, with 0. */
void peer_ack_op(struct peer *p, unsigned i);
/* Complete every WR of ours still posted (sends and receives) as flushed. */
void peer_flush(struct peer *p);
/* The end of a conn: peer_flush and pump; then on_close must have fired
 * once, with status. */
void peer_flush_closed(struct peer *p, int status);
/* Complete our oldest unfinished send WR with status (the rest stays). */
void peer_fail_send(struct peer *p, enum ibv_wc_status status);

/* The peer sends: bytes into our next posted receive (asserts one is
 * there; the SRQ's if the ctx has one), as a completion with byte_len
 * len. */
void peer_raw(struct peer *p, const void *bytes, size_t len);
/* A frame: header (type, credits, len = blen) and body. */
void peer_frame(struct peer *p, uint8_t type, uint16_t credits,
		const void *body, uint32_t blen);
void peer_eager(struct peer *p, const void *data, size_t len,
		uint16_t credits);
void peer_credit(struct peer *p, uint16_t credits);
void peer_bye(struct peer *p, uint16_t credits);
void peer_rndv_req(struct peer *p, const void *addr, uint64_t len,
		   uint32_t rkey, uint32_t id, uint16_t credits);
void peer_fin(struct peer *p, uint32_t id, int32_t status, uint16_t credits);
/* An eager message carrying the FIN of our rendezvous send id
 * (EVR_F_FIN): len = 8 + dlen. */
void peer_fin_eager(struct peer *p, uint32_t id, int32_t status,
		    const void *data, size_t dlen, uint16_t credits);
void peer_write_imm(struct peer *p, uint32_t imm);
/* A plain eager message with its header in immediate data (EVR_HS_F_IMM):
 * imm (host order) as given -- evr__imm_encode's for a good one -- and
 * the len bytes of data, all payload. */
void peer_imm_raw(struct peer *p, uint32_t imm, const void *data, size_t len);
void peer_imm_eager(struct peer *p, const void *data, size_t len,
		    uint8_t flags, uint16_t credits);
/* Receives of ours posted and not yet filled (with a shared receive
 * queue: the SRQ's, for every conn, and the re-posts counted for its
 * next batched post). */
unsigned peer_recvs_posted(const struct peer *p);

/* The arg for an evr_op_cb that records op i in p (peer_op_cb). */
void *peer_op_arg(struct peer *p, unsigned i);
void peer_op_cb(evr_conn *c, int status, void *arg);
/* evr_send on p's conn as op i (recorded in p); it must return 0. */
void peer_send_op(struct peer *p, const void *data, size_t len, unsigned i);

/* Calls.  The arg for an evr_call_cb that records call i in p
 * (peer_call_cb: count, status, a copy of the reply). */
void *peer_call_arg(struct peer *p, unsigned i);
void peer_call_cb(evr_conn *c, int status, const void *reply, size_t len,
		  void *arg);
/* evr_call on p's conn as call i; it must return 0.  Returns the id. */
evr_call_id peer_call(struct peer *p, const void *req, size_t len,
		      unsigned timeout_ms, unsigned i);
/* The peer sends a data frame with call flags (EVR_F_CALL, EVR_F_REPLY,
 * both or none) and a call id after the header: len = 4 + blen. */
void peer_call_frame(struct peer *p, uint8_t type, uint8_t flags,
		     uint32_t cid, uint16_t credits, const void *body,
		     uint32_t blen);
void peer_call_eager(struct peer *p, uint8_t flags, uint32_t cid,
		     const void *data, size_t len, uint16_t credits);
void peer_call_rndv_req(struct peer *p, uint8_t flags, uint32_t cid,
			const void *addr, uint64_t len, uint32_t rkey,
			uint32_t id, uint16_t credits);
/* A CANCEL of call cid (the peer gave it up). */
void peer_cancel(struct peer *p, uint32_t cid, uint16_t credits);

#endif
