/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Completion queues.
 *
 * All CQs of a ctx share one completion channel, watched by the loop
 * (loop.c).  This file creates, sizes and destroys CQs, takes channel
 * events (one per call, acks batched), polls, and arms with arm-then-poll:
 * a completion that landed between the last empty poll and the arm raises
 * no event, so every arm is followed by a poll until empty (see test_cq's
 * "raced arm" case).  Each work completion goes to what was posted --
 * wr_id is the address of its head (struct evr__wr, an op's or a receive
 * buffer's) -- through the head's done: this file knows nothing of what
 * the ops are for.
 *
 * A CQ is shared by many QPs.  Its depth is kept at least 20 % above the
 * sum of (SQ depth + RQ depth) of its QPs, so it cannot overflow: every
 * outstanding WR has a CQE slot.  When a QP would break that bound the CQ
 * is resized, and when resizing is impossible a new CQ is created.
 *
 * A failing ibv_poll_cq means the CQ is unusable (the device or provider
 * gave up on it) and the completions in it are lost.  It is logged with
 * its errno, the CQ is marked broken -- never polled, armed or given to a
 * new QP again -- and the cq_failed hook fails every connection on it
 * with -EIO; the device's async CQ error does the same (evr__cq_break).  Their
 * ops still complete exactly once: with -EIO at once, except those with a WR on
 * the device, which end with -ECANCELED when the conn's flush bound has passed
 * (their flush completions cannot come); on_close (or on_connect) reports -EIO.
 * The other CQs of the ctx go on.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <stdlib.h>

#define EVR_CQ_BATCH	 32 /* WCs per ibv_poll_cq */
#define EVR_CQ_ACK_BATCH 64 /* events acknowledged at once */
#define EVR_CQ_MIN	 1024

static unsigned cq_needed(unsigned reserved)
{
	return reserved + (reserved + 4) / 5; /* +20 % */
}

static int cq_create(evr_ctx *ctx, unsigned cqe, struct evr__cq **out)
{
	struct evr__cq *c = calloc(1, sizeof(*c));
	int err;

	if (!c)
		return -ENOMEM;
	c->ctx = ctx;
	c->cq = ibv_create_cq(ctx->verbs, (int)cqe, c, ctx->ch, 0);
	if (!c->cq) {
		err = errno ? -errno : -ENOMEM;
		EVR_ERR(ctx, "ibv_create_cq(%u) failed: %s", cqe,
			evr_strerror(err));
		free(c);
		return err;
	}
	c->cqe = (unsigned)c->cq->cqe;
	if (!ctx->polling) {
		err = evr__req_notify_cq(c->cq, 0);
		if (err) {
			ibv_destroy_cq(c->cq);
			free(c);
			return err;
		}
		c->armed = true;
	}
	evr__list_add_tail(&ctx->cqs, &c->link);
	ctx->st.cq_count++;
	ctx->st.cq_capacity += c->cqe;
	*out = c;
	return 0;
}

int evr__cq_attach(evr_ctx *ctx, unsigned need, struct evr__cq **out)
{
	unsigned max = (unsigned)ctx->dattr.max_cqe;
	struct evr__list *pos, *tmp;
	struct evr__cq *c, *grow = NULL;
	unsigned want;
	int err;

	if (cq_needed(need) > max)
		return -EINVAL;
	evr__list_for_each_safe(pos, tmp, &ctx->cqs)
	{
		c = evr__container_of(pos, struct evr__cq, link);
		if (c->broken)
			continue;
		if (cq_needed(c->reserved + need) <= c->cqe)
			goto found;
		if (!grow && cq_needed(c->reserved + need) <= max)
			grow = c;
	}
	if (grow) {
		/* grow geometrically, bounded by the device */
		want = EVR__MIN(EVR__MAX(cq_needed(grow->reserved + need),
					 grow->cqe * 2),
				max);
		err = ibv_resize_cq(grow->cq, (int)want);
		if (err == 0 && (unsigned)grow->cq->cqe >= want) {
			ctx->st.cq_capacity +=
			    (unsigned)grow->cq->cqe - grow->cqe;
			grow->cqe = (unsigned)grow->cq->cqe;
			ctx->st.cq_resizes++;
			EVR_DBG(ctx, "CQ resized to %u CQEs", grow->cqe);
			c = grow;
			goto found;
		}
		EVR_INFO(ctx, "ibv_resize_cq(%u) failed (%d): adding a CQ",
			 want, err);
	}
	want = EVR__MIN(EVR__MAX(cq_needed(need) * 4, EVR_CQ_MIN), max);
	err = cq_create(ctx, want, &c);
	if (err)
		return err;
	if (ctx->st.cq_count > 1)
		ctx->st.cq_resizes++;
found:
	c->reserved += need;
	c->nqp++;
	ctx->st.cq_reserved += need;
	*out = c;
	return 0;
}

void evr__cq_detach(evr_ctx *ctx, struct evr__cq *c, unsigned need)
{
	c->reserved -= need;
	c->nqp--;
	ctx->st.cq_reserved -= need;
}

void evr__cq_destroy_all(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &ctx->cqs)
	{
		struct evr__cq *c =
		    evr__container_of(pos, struct evr__cq, link);

		/* every event must be acknowledged before the destroy */
		if (c->unacked)
			evr__ack_cq_events(c->cq, c->unacked);
		if (ibv_destroy_cq(c->cq))
			EVR_ERR(ctx, "ibv_destroy_cq failed");
		evr__list_del(&c->link);
		free(c);
	}
	ctx->st.cq_count = 0;
	ctx->st.cq_capacity = 0;
}

int evr__wc_errno(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_SUCCESS:
		return 0;
	case IBV_WC_WR_FLUSH_ERR:
		return -ECANCELED;
	case IBV_WC_RETRY_EXC_ERR:
	case IBV_WC_RESP_TIMEOUT_ERR:
		return -ETIMEDOUT;
	case IBV_WC_RNR_RETRY_EXC_ERR:
		return -ENOBUFS;
	case IBV_WC_LOC_LEN_ERR:
		return -EMSGSIZE;
	case IBV_WC_LOC_PROT_ERR:
	case IBV_WC_LOC_ACCESS_ERR:
		return -EFAULT;
	case IBV_WC_REM_ACCESS_ERR:
		return -EACCES;
	case IBV_WC_REM_INV_REQ_ERR:
	case IBV_WC_REM_INV_RD_REQ_ERR:
		return -EINVAL;
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_ABORT_ERR:
		return -EREMOTEIO;
	default:
		return -EIO;
	}
}

/*
 * The status a failed work completion gives its connection (on_close); the
 * op itself keeps evr__wc_errno()'s.  A remote operational or abort error
 * says the responder's end of the connection failed for a reason of its
 * own -- its QP is in the error state -- and not because of what was asked
 * of it.  An evrdma peer does that when its process dies: the kernel may
 * deregister its receive buffers before it destroys its QP, and a send that
 * arrives in between finds a receive it cannot write.  That is the peer
 * vanishing, reported as -ECONNRESET like the disconnect that comes right
 * after it.  Errors caused by the request itself (a bad key or range:
 * -EACCES, -EINVAL) and by the transport (-ETIMEDOUT) keep their status.
 */
int evr__wc_conn_errno(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_REM_OP_ERR:
	case IBV_WC_REM_ABORT_ERR:
		return -ECONNRESET;
	default:
		return evr__wc_errno(st);
	}
}

/* One completion: to what was posted (wr_id: an op's or a receive
 * buffer's head), which knows how it completes. */
static EVR__ALWAYS_INLINE void dispatch_wc(evr_ctx *ctx, struct ibv_wc *wc)
{
	struct evr__wr *w = (struct evr__wr *)(uintptr_t)wc->wr_id;

	if (wc->status != IBV_WC_SUCCESS && wc->status != IBV_WC_WR_FLUSH_ERR)
		EVR_WARN(ctx,
			 "work completion error on qp %u: %s (vendor 0x%x)",
			 wc->qp_num, ibv_wc_status_str(wc->status),
			 wc->vendor_err);
	w->done(w, wc);
}

/* The CQ failed (see the top of the file): never used again, and what
 * uses it is failed by the hook (the conn layer). */
void evr__cq_break(evr_ctx *ctx, struct evr__cq *cq, const char *what, int err)
{
	if (cq->broken)
		return;
	EVR_ERR(ctx, "%s: %s (%s): failing the %u QP(s) on that CQ with EIO",
		what, evr_strerror(err), evr_err_name(err), cq->nqp);
	cq->broken = true;
	ctx->hooks.cq_failed(ctx, cq, -EIO);
}

struct evr__cq *evr__cq_find(evr_ctx *ctx, const struct ibv_cq *ibcq)
{
	struct evr__list *pos;

	evr__list_for_each(pos, &ctx->cqs)
	{
		struct evr__cq *c =
		    evr__container_of(pos, struct evr__cq, link);

		if (c->cq == ibcq)
			return c;
	}
	return NULL;
}

static unsigned cq_drain(evr_ctx *ctx, struct evr__cq *c, unsigned budget)
{
	struct ibv_wc wc[EVR_CQ_BATCH];
	unsigned total = 0;
	int n, i;

	if (c->broken)
		return 0;
	do {
		n = evr__poll_cq(c->cq, EVR_CQ_BATCH, wc);
		ctx->st.polls++;
		if (n < 0) {
			evr__cq_break(ctx, c, "ibv_poll_cq failed", n);
			break;
		}
		if (n < EVR_CQ_BATCH)
			c->drains++; /* it was empty after these */
		if (n == 0) {
			ctx->st.empty_polls++;
			break;
		}
		ctx->dispatch_depth++;
		for (i = 0; i < n; i++)
			dispatch_wc(ctx, &wc[i]);
		ctx->dispatch_depth--;
		total += (unsigned)n;
		ctx->st.completions += (unsigned)n;
	} while (n == EVR_CQ_BATCH && total < budget);
	return total;
}

unsigned evr__cq_poll_empty(evr_ctx *ctx, struct evr__cq *cq)
{
	return cq_drain(ctx, cq, ~0u);
}

unsigned evr__cq_poll_all(evr_ctx *ctx, unsigned budget)
{
	struct evr__list *pos, *tmp;
	unsigned total = 0;

	evr__list_for_each_safe(pos, tmp, &ctx->cqs) total +=
	    cq_drain(ctx, evr__container_of(pos, struct evr__cq, link), budget);
	return total;
}

/* Arm every CQ that is not armed, then poll it until empty: nothing that
 * completed before the arm is left behind.  Returns completions found. */
unsigned evr__cq_arm_unarmed(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;
	unsigned total = 0;

	evr__list_for_each_safe(pos, tmp, &ctx->cqs)
	{
		struct evr__cq *c =
		    evr__container_of(pos, struct evr__cq, link);

		if (c->armed || c->broken)
			continue;
		if (evr__req_notify_cq(c->cq, 0)) {
			EVR_ERR(ctx, "ibv_req_notify_cq failed");
			continue;
		}
		c->armed = true;
		total += cq_drain(ctx, c, ~0u);
	}
	return total;
}

/*
 * One event per call: the watcher is level-triggered, so another CQ's
 * event brings us back on the next iteration, and reading on until EAGAIN
 * would cost a system call on every wakeup for nothing (the caller polls
 * every CQ anyway).  Acknowledgements are batched: ibv_ack_cq_events takes
 * a mutex.
 */
void evr__cq_take_event(evr_ctx *ctx)
{
	struct ibv_cq *ibcq;
	void *cqctx;

	if (evr__get_cq_event(ctx->ch, &ibcq, &cqctx) == 0) {
		struct evr__cq *c = cqctx;

		c->armed = false;
		if (++c->unacked >= EVR_CQ_ACK_BATCH) {
			evr__ack_cq_events(c->cq, c->unacked);
			c->unacked = 0;
		}
		ctx->st.wakeups++;
	}
}
