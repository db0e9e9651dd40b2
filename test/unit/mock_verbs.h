/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Mock of the thin verbs layer (lib/verbs.h) for the unit tests.
 *
 * The library's data path calls only the six functions of verbs.h; this
 * module implements them with counters and scripted results, all in one
 * global struct `mock` that a test resets with mock_reset() and then
 * inspects.  Nothing here touches a device.
 *
 *   post_send    records every call: the WR chain's length and how many
 *                WRs are signaled; fails on demand (every call, or every
 *                call after the first post_send_ok_calls) with *bad
 *                pointing at a chosen WR.
 *   post_recv    counts calls and WRs; fails on demand.
 *   post_srq_recv  the same, for the shared receive queue.
 *   All three keep a log of every WR they accepted (mock_wr_log): its QP,
 *   wr_id, opcode, flags, remote address and key, local address and key,
 *   length and, for sends and writes, a copy of the bytes its SGEs held at
 *   post time -- what the peer would receive.  A test reads the log to see
 *   what went on the wire and answers with completions of its choosing
 *   (mock_wc_push) for the logged wr_ids.
 *   poll_cq      hands out scripted work completions from a FIFO, at most
 *                n per call, and records every n it was asked for; fails
 *                on demand, on every CQ or on one.  WCs
 *                queued with mock_wc_after_arm() become visible only when
 *                req_notify_cq is next called: the completion that lands
 *                between the last empty poll and the arm.
 *   req_notify_cq  counts calls; fails on demand.
 *   get_cq_event   returns the scripted events, then -EAGAIN.
 *   ack_cq_events  counts calls and the events acknowledged.
 */
#ifndef EVR_MOCK_VERBS_H
#define EVR_MOCK_VERBS_H

#include <stdbool.h>
#include <stdint.h>

#include "verbs.h"

#define MOCK_MAX_CALLS 1024 /* calls recorded (counters go on past it) */
#define MOCK_MAX_WC    4096 /* scripted work completions queued at once */

struct mock_post {
	struct ibv_qp *qp;
	struct ibv_send_wr *head; /* first WR: valid during the call only */
	unsigned nwr;		  /* WRs in the chain */
	unsigned nsig;		  /* of which IBV_SEND_SIGNALED */
};

struct mock_verbs {
	/* evr__post_send */
	unsigned post_send_calls;
	unsigned post_send_wrs; /* WRs in all chains, accepted or not */
	struct mock_post posts[MOCK_MAX_CALLS];
	int post_send_rc;	    /* scripted: nonzero fails every call */
	unsigned post_send_bad_idx; /* ... with *bad at this WR of the chain
				       (past the end: *bad = NULL) */
	unsigned post_send_ok_calls; /* ... after this many calls succeeded */

	/* evr__post_recv */
	unsigned post_recv_calls;
	unsigned post_recv_wrs;
	int post_recv_rc;

	/* evr__post_srq_recv */
	unsigned post_srq_calls;
	unsigned post_srq_wrs;
	int post_srq_rc; /* scripted: nonzero fails every call, *bad = wr */

	/* evr__poll_cq */
	unsigned poll_calls;
	int poll_n[MOCK_MAX_CALLS]; /* the n of each call */
	unsigned wc_dispensed;
	struct ibv_wc wc[MOCK_MAX_WC]; /* visible FIFO */
	unsigned wc_head, wc_tail;
	struct ibv_wc wc_arm[MOCK_MAX_WC]; /* visible after the next arm */
	unsigned wc_arm_n;
	int poll_rc; /* scripted: negative fails every call ... */
	struct ibv_cq *poll_rc_cq; /* ... on this CQ only, if set */
	unsigned poll_failed;	   /* calls that returned poll_rc */

	/* evr__req_notify_cq */
	unsigned notify_calls;
	unsigned notify_poll_seq; /* poll_calls when last armed */
	int notify_rc;

	/* evr__get_cq_event */
	unsigned event_calls;
	unsigned events_pending;
	unsigned events_given;
	struct ibv_cq *event_cq;
	void *event_cq_ctx;

	/* evr__ack_cq_events */
	unsigned ack_calls;
	unsigned long acked; /* sum of all n */
	unsigned ack_max;    /* largest n in one call */
};

extern struct mock_verbs mock;

/* One WR accepted by evr__post_send, evr__post_recv or
 * evr__post_srq_recv. */
struct mock_wr {
	struct ibv_qp *qp; /* NULL for a receive of the SRQ */
	struct ibv_srq *srq; /* the SRQ's receives: their SRQ */
	uint64_t wr_id;
	int opcode;	/* enum ibv_wr_opcode; -1 for a receive */
	unsigned flags; /* send_flags */
	uint32_t imm;	/* imm_data, as posted (network order) */
	uint64_t raddr; /* RDMA and atomics: remote address and key */
	uint32_t rkey;
	uint64_t compare_add, swap; /* atomics */
	uint64_t laddr; /* first SGE: local address and key */
	uint32_t lkey;
	uint32_t len;  /* all SGEs */
	uint8_t *data; /* sends and writes: the bytes, len of them */
};

struct mock_wr_log {
	struct mock_wr *send; /* in posting order */
	unsigned nsend;
	struct mock_wr *recv;
	unsigned nrecv;
	/* the shared receive queue's, in posting order; the receives before
	 * srq_next are filled (a peer takes the next one, whichever conn it
	 * plays, as a device takes the SRQ's next WR for any QP) */
	struct mock_wr *srecv;
	unsigned nsrecv, srq_next;
	unsigned cap_send, cap_recv, cap_srecv;
};

extern struct mock_wr_log mock_wrs;

/* Forget every counter and script (and the WR log). */
void mock_reset(void);
/* Queue a WC that poll_cq will return (visible now). */
void mock_wc_push(const struct ibv_wc *wc);
/* Queue a WC that becomes visible when req_notify_cq is next called. */
void mock_wc_after_arm(const struct ibv_wc *wc);
/* WCs visible and not yet polled. */
unsigned mock_wc_left(void);
/* Queue n completion-channel events for cq, with cq_ctx as its context. */
void mock_cq_events(struct ibv_cq *cq, void *cq_ctx, unsigned n);

#endif
