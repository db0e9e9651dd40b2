/*
 * Send queue of one QP: batching and selective signaling.
 *
 * Ops submitted during a loop iteration are chained into one batch and
 * posted with a single ibv_post_send.  Only one WR in `interval` is
 * signaled, plus the last WR of every batch, so the SQ never ends with an
 * unsignaled tail whose completion nobody would ever see.  RC completes
 * send WRs in order, so the completion of a signaled WR means every WR
 * posted before it has completed too: evr__sq_complete() walks the posted
 * FIFO up to that op and completes each one, in posting order.  A WR that
 * fails produces a completion whether signaled or not; the WRs before it
 * had succeeded (in-order execution), those after it are flushed.
 */
#include "evrdma-int.h"

#include <errno.h>

void evr__sq_init(struct evr__sq *sq, struct ibv_qp *qp, unsigned depth,
		  unsigned interval, evr__sq_done_fn done, struct evr_stats *st)
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
	evr__list_init(&sq->posted);
	evr__list_init(&sq->batch);
	sq->nbatch = 0;
	sq->done = done;
	sq->st = st;
}

void evr__sq_add(struct evr__sq *sq, struct evr__op *op)
{
	struct evr__op *prev =
		evr__list_entry(evr__list_last(&sq->batch), struct evr__op, link);

	op->wr.wr_id = (uintptr_t)op;
	op->wr.next = NULL;
	op->wr.send_flags &= ~IBV_SEND_SIGNALED;
	if (++sq->unsig_run >= sq->interval) {
		op->wr.send_flags |= IBV_SEND_SIGNALED;
		sq->unsig_run = 0;
	}
	if (prev)
		prev->wr.next = &op->wr;
	evr__list_add_tail(&sq->batch, &op->link);
	sq->nbatch++;
}

/* Take the first op off the batch, or NULL. */
static struct evr__op *batch_pop(struct evr__sq *sq)
{
	struct evr__op *op =
		evr__list_pop_entry(&sq->batch, struct evr__op, link);

	if (op)
		sq->nbatch--;
	return op;
}

int evr__sq_commit(struct evr__sq *sq)
{
	struct ibv_send_wr *bad = NULL;
	struct evr__op *op, *first, *last;
	struct evr__list *pos;
	unsigned n = sq->nbatch, nsig = 0;
	int rc;

	if (!n)
		return 0;
	first = evr__list_first_entry(&sq->batch, struct evr__op, link);
	last = evr__list_entry(evr__list_last(&sq->batch), struct evr__op,
			       link);
	if (!(last->wr.send_flags & IBV_SEND_SIGNALED)) {
		last->wr.send_flags |= IBV_SEND_SIGNALED;
		sq->unsig_run = 0;
	}
	evr__list_for_each(pos, &sq->batch)
	{
		op = evr__list_entry(pos, struct evr__op, link);
		nsig += !!(op->wr.send_flags & IBV_SEND_SIGNALED);
	}

	rc = evr__post_send(sq->qp, &first->wr, &bad);
	if (sq->st) {
		sq->st->post_send_calls++;
	}
	if (rc == 0) {
		if (sq->st) {
			sq->st->send_wrs += n;
			sq->st->signaled_wrs += nsig;
		}
		/* the whole batch joins the posted FIFO */
		evr__list_splice_tail(&sq->posted, &sq->batch);
		sq->nbatch = 0;
		sq->outstanding += n;
		return 0;
	}

	/* WRs before `bad` were posted, the rest were not.  The posted prefix
	 * may end unsignaled; a post error means the QP is unusable, so the
	 * caller fails the conn, the QP goes to the error state and every
	 * posted WR, signaled or not, completes as flushed. */
	while (bad &&
	       (op = evr__list_first_entry(&sq->batch, struct evr__op, link)) &&
	       &op->wr != bad) {
		batch_pop(sq);
		evr__list_add_tail(&sq->posted, &op->link);
		sq->outstanding++;
		if (sq->st)
			sq->st->send_wrs++;
	}
	while ((op = batch_pop(sq)))
		sq->done(op, rc);
	return rc;
}

void evr__sq_complete(struct evr__sq *sq, struct evr__op *upto, int status)
{
	struct evr__op *op;
	/* Predecessors of a failed WR succeeded -- unless the failure is a
	 * flush, in which case they were flushed as well. */
	int before = status == -ECANCELED ? -ECANCELED : 0;

	while ((op = evr__list_pop_entry(&sq->posted, struct evr__op, link))) {
		sq->outstanding--;
		if (op == upto) {
			sq->done(op, status);
			return;
		}
		sq->done(op, before);
	}
}

void evr__sq_abandon(struct evr__sq *sq, int status)
{
	struct evr__op *op;

	while ((op = evr__list_pop_entry(&sq->posted, struct evr__op, link))) {
		sq->outstanding--;
		sq->done(op, status);
	}
	while ((op = batch_pop(sq)))
		sq->done(op, status);
}
