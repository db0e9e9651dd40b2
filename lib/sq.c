/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Send queue of one QP: batching and selective signaling.
 *
 * Ops submitted during a loop iteration are chained into one batch and
 * posted with one ibv_post_send.  An op holds its work request in compact
 * form (struct evr__wqe); the verbs WRs are built here just before the
 * post, in an array the ctx shares among its SQs.  It is as deep as an
 * SQ, so a batch is one chain; a batch longer than the array (only a test
 * gives a shorter one) goes out as several chains, one post each.  Only
 * one WR in `interval` is signaled, plus the last WR of every batch, so
 * the SQ does not end with an unsignaled tail whose completion nobody
 * would see -- unless that WR is a quiet op's: a message without a
 * callback, whose completion nobody waits for, and which would otherwise
 * cost a completion to poll and dispatch (in EVENT mode a wakeup) per
 * message of a ping-pong.  A quiet tail completes with the next signaled
 * WR: the interval's, the last of a later batch, the BYE of a graceful
 * close, or the marker a flush posts behind it (conn.c seal_sq); the
 * ops' memory and SQ slots wait that long, at most interval - 1 of
 * them.  RC completes send WRs in order, so the completion of a
 * signaled WR means every WR posted before it has completed too:
 * evr__sq_complete() walks the posted FIFO up to that op and completes
 * each one, in posting order.  A WR that fails produces a completion
 * whether signaled or not; the WRs before it had succeeded (in-order
 * execution), those after it are flushed.
 *
 * A reply's direct way (msg.c send_direct) posts a WR with no op: never
 * signaled, it is counted where it falls in the FIFO (sq->anon_head
 * before the first op, op->anon_after after one), so the completion of
 * the next op covers it too, and its own flush or error completion
 * (evr__sq_complete_direct) completes the ops before it.  The direct way
 * is open only while no batch is, and only for WRs the interval lets go
 * unsignaled.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <string.h>

void evr__sq_init(struct evr__sq *sq, struct ibv_qp *qp, unsigned depth,
		  unsigned interval, evr__sq_done_fn done, struct evr_stats *st,
		  struct evr__wr_chain *chain)
{
	sq->qp = qp;
	sq->depth = depth;
	sq->outstanding = 0;
	if (interval < 1)
		interval = 1;
	if (interval > depth / 2 && depth >= 2)
		interval = depth / 2;
	sq->interval = interval;
	sq->unsig_run = 0;
	sq->waiting = false;
	evr__list_init(&sq->posted);
	sq->anon_head = 0;
	evr__list_init(&sq->batch);
	sq->nbatch = 0;
	sq->done = done;
	sq->st = st;
	sq->chain = chain;
	sq->max_inline = 0;
	sq->sge2 = false;
}

void evr__sq_add(struct evr__sq *sq, struct evr__op *op)
{
	op->send_flags &= (uint8_t)~IBV_SEND_SIGNALED;
	if (++sq->unsig_run >= sq->interval) {
		op->send_flags |= IBV_SEND_SIGNALED;
		sq->unsig_run = 0;
		sq->waiting = false;
	} else if (!op->quiet) {
		sq->waiting = true;
	}
	evr__list_add_tail(&sq->batch, &op->h.link);
	sq->nbatch++;
}

/* Take the first op off the batch, or NULL. */
static struct evr__op *batch_pop(struct evr__sq *sq)
{
	struct evr__op *op =
	    evr__list_pop_entry(&sq->batch, struct evr__op, h.link);

	if (op)
		sq->nbatch--;
	return op;
}

/* An inline message in two pieces, header and payload (none when len is
 * 0; no header when hlen is 0, which a header in immediate data leaves):
 * the post copies both, no key is checked. */
static EVR__ALWAYS_INLINE void split_sges(struct ibv_send_wr *wr,
					  struct ibv_sge *sge, const void *hdr,
					  uint32_t hlen, const void *payload,
					  uint32_t len)
{
	struct ibv_sge *s = sge;

	if (hlen) {
		s->addr = (uintptr_t)hdr;
		s->length = hlen;
		s->lkey = 0;
		s++;
	}
	if (len) {
		s->addr = (uintptr_t)payload;
		s->length = len;
		s->lkey = 0;
		s++;
	}
	wr->sg_list = sge;
	wr->num_sge = (int)(s - sge);
}

/* The verbs WR of op, built from its compact form, its SGEs in sge
 * (EVR__WR_SGES of them). */
static EVR__ALWAYS_INLINE void
build_wr(const struct evr__op *op, struct ibv_send_wr *wr, struct ibv_sge *sge)
{
	/* Field by field, not a memset of the whole WR: this runs for every
	 * message.  What an opcode does not use keeps an earlier WR's value
	 * (the array is reused), which the device ignores. */
	wr->wr_id = (uintptr_t)&op->h;
	wr->opcode = (enum ibv_wr_opcode)op->opcode;
	wr->send_flags = op->send_flags;
	wr->imm_data = 0;
	if (op->split) {
		split_sges(wr, sge, op->ihdr, op->ihdr_len,
			   (const void *)(uintptr_t)op->wqe.laddr, op->wqe.len);
	} else if (op->wqe.len) {
		sge->addr = op->wqe.laddr;
		sge->length = op->wqe.len;
		sge->lkey = op->wqe.lkey;
		wr->sg_list = sge;
		wr->num_sge = 1;
	} else {
		wr->sg_list = NULL;
		wr->num_sge = 0;
	}
	switch (wr->opcode) {
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		wr->wr.atomic.remote_addr = op->wqe.raddr;
		wr->wr.atomic.rkey = op->wqe.rkey;
		wr->wr.atomic.compare_add = op->u.rma.compare_add;
		wr->wr.atomic.swap = op->u.rma.swap;
		break;
	case IBV_WR_SEND_WITH_IMM: /* a header in immediate data */
		wr->imm_data = op->wqe.imm;
		break;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		wr->imm_data = op->wqe.imm;
		/* fall through */
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		wr->wr.rdma.remote_addr = op->wqe.raddr;
		wr->wr.rdma.rkey = op->wqe.rkey;
		break;
	case IBV_WR_BIND_MW: /* remote read of exactly those bytes */
		wr->bind_mw.mw = op->u.bind.mw;
		wr->bind_mw.rkey = op->wqe.rkey;
		wr->bind_mw.bind_info.mr = op->u.bind.mr;
		wr->bind_mw.bind_info.addr = op->wqe.raddr;
		wr->bind_mw.bind_info.length = op->u.bind.len;
		wr->bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_READ;
		break;
	default:
		break;
	}
}

/* Post the first n ops of the batch as one chain, built in wrs/sges.  The
 * posted ones join the posted FIFO; on failure the rest of the chain stays
 * on the batch and the error is returned. */
static EVR__ALWAYS_INLINE int post_chain(struct evr__sq *sq, unsigned n,
					 struct ibv_send_wr *wrs,
					 struct ibv_sge *sges)
{
	struct ibv_send_wr *bad = NULL;
	struct evr__list *pos = evr__list_first(&sq->batch);
	unsigned i, nsig = 0;
	int rc;

	for (i = 0; i < n; i++, pos = evr__list_next(&sq->batch, pos)) {
		const struct evr__op *op =
		    evr__list_entry(pos, struct evr__op, h.link);

		build_wr(op, &wrs[i], &sges[EVR__WR_SGES * i]);
		wrs[i].next = i + 1 < n ? &wrs[i + 1] : NULL;
		nsig += !!(op->send_flags & IBV_SEND_SIGNALED);
	}
	rc = evr__post_send(sq->qp, wrs, &bad);
	if (sq->st)
		sq->st->post_send_calls++;
	if (rc == 0) {
		bad = NULL;
		if (sq->st)
			sq->st->signaled_wrs += nsig;
	} else if (!bad) {
		bad = &wrs[0]; /* no word on where it stopped: none posted */
	}
	/* WRs before `bad` were posted (all of them on success) */
	for (i = 0; i < n && &wrs[i] != bad; i++) {
		struct evr__op *op = batch_pop(sq);

		op->anon_after = 0;
		evr__list_add_tail(&sq->posted, &op->h.link);
		sq->outstanding++;
		if (sq->st)
			sq->st->send_wrs++;
	}
	return rc;
}

int evr__sq_commit(struct evr__sq *sq)
{
	const struct evr__wr_chain *ch = sq->chain;
	struct evr__op *op, *last;
	int rc = 0;

	if (!sq->nbatch)
		return 0;
	last =
	    evr__list_entry(evr__list_last(&sq->batch), struct evr__op, h.link);
	/* The batch ends signaled unless all that is unsignaled in it since
	 * the last signaled WR is quiet: RC completes in order, so that one
	 * completion tells of every WR before it. */
	if (!(last->send_flags & IBV_SEND_SIGNALED) &&
	    (!last->quiet || sq->waiting)) {
		last->send_flags |= IBV_SEND_SIGNALED;
		sq->unsig_run = 0;
	}
	sq->waiting = false;
	if (sq->nbatch == 1) {
		/* a ping-pong's every post: its WR on the stack */
		struct ibv_send_wr wr;
		struct ibv_sge sge[EVR__WR_SGES];

		rc = post_chain(sq, 1, &wr, sge);
	}
	while (sq->nbatch && rc == 0)
		rc = post_chain(sq, EVR__MIN(sq->nbatch, ch->cap), ch->wr,
				ch->sge);
	if (rc == 0)
		return 0;

	/* The posted prefix may end unsignaled; a post error means the QP is
	 * unusable, so the caller fails the conn, the QP goes to the error
	 * state and every posted WR, signaled or not, completes as
	 * flushed. */
	while ((op = batch_pop(sq)))
		sq->done(op, rc);
	return rc;
}

int evr__sq_post_direct(struct evr__sq *sq, const void *hdr, uint32_t hlen,
			const void *payload, uint32_t len, uint32_t imm,
			uint64_t wr_id)
{
	struct ibv_send_wr wr, *bad;
	struct ibv_sge sge[EVR__WR_SGES];
	int rc;

	split_sges(&wr, sge, hdr, hlen, payload, len);
	wr.wr_id = wr_id;
	wr.next = NULL;
	wr.opcode = imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
	wr.imm_data = imm;
	wr.send_flags = IBV_SEND_INLINE;
	rc = evr__post_send(sq->qp, &wr, &bad);
	if (sq->st)
		sq->st->post_send_calls++;
	if (rc)
		return rc;
	if (evr__list_empty(&sq->posted))
		sq->anon_head++;
	else
		evr__list_entry(evr__list_last(&sq->posted), struct evr__op,
				h.link)
		    ->anon_after++;
	sq->outstanding++;
	sq->unsig_run++;
	if (sq->st)
		sq->st->send_wrs++;
	return 0;
}

/* Take the first posted op off the FIFO, with the WRs without an op
 * before it, which are known complete with it; NULL when none is left. */
static struct evr__op *posted_pop(struct evr__sq *sq)
{
	struct evr__op *op =
	    evr__list_pop_entry(&sq->posted, struct evr__op, h.link);

	if (!op)
		return NULL;
	sq->outstanding -= 1 + sq->anon_head;
	sq->anon_head = op->anon_after;
	return op;
}

/* The status of the ops posted before a WR that completed with status:
 * they succeeded (in-order execution) -- unless the failure is a flush,
 * in which case they were flushed as well. */
static int before_status(int status)
{
	return status == -ECANCELED ? -ECANCELED : 0;
}

void evr__sq_complete(struct evr__sq *sq, struct evr__op *upto, int status)
{
	struct evr__op *op;
	int before = before_status(status);

	while ((op = posted_pop(sq))) {
		if (op == upto) {
			sq->done(op, status);
			return;
		}
		sq->done(op, before);
	}
}

void evr__sq_complete_direct(struct evr__sq *sq, int status)
{
	struct evr__op *op;
	int before = before_status(status);

	while (sq->anon_head == 0 && (op = posted_pop(sq)))
		sq->done(op, before);
	if (sq->anon_head) {
		sq->anon_head--;
		sq->outstanding--;
	}
}

void evr__sq_abandon(struct evr__sq *sq, int status)
{
	struct evr__op *op;

	while ((op = posted_pop(sq)))
		sq->done(op, status);
	sq->outstanding -= sq->anon_head;
	sq->anon_head = 0;
	while ((op = batch_pop(sq)))
		sq->done(op, status);
}
