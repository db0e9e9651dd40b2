/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The run queue of a ctx: what is to be done before the loop sleeps, and
 * the ops' free list.
 *
 * Submission calls never run callbacks or post work requests themselves:
 * they queue the conn -- on ctx->flush when it has something to post
 * (evr__conn_dirty), on ctx->work when its state needs a step
 * (evr__conn_kick) -- and evr__ctx_progress(), called by the loop's
 * watchers after each batch of events, runs both until quiet, so a
 * callback's sends are posted in the same pass (one ibv_post_send per QP
 * per pass).  Both queues are intrusive lists: queuing and unlinking a
 * conn that is freed are O(1).  What a step or a flush does is the conn
 * layer's business, reached through ctx->hooks.
 */
#include "evrdma-int.h"

#include <stdlib.h>
#include <string.h>

/* Ops kept for reuse: enough for a deep pipeline, bounded so a burst
 * does not pin memory for ever. */
#define EVR_OP_FREE_MAX 4096

void evr__runq_init(evr_ctx *ctx)
{
	evr__list_init(&ctx->work);
	evr__list_init(&ctx->flush);
}

struct evr__op *evr__op_alloc(evr_ctx *ctx)
{
	/* the copy of a small message is written before it is read */
	struct evr__op *op =
	    evr__stash_get_part(&ctx->ops_free, sizeof(*op),
				offsetof(struct evr__op, copy));

	if (op)
		evr__list_init(&op->h.link);
	return op;
}

void evr__op_free(evr_ctx *ctx, struct evr__op *op)
{
	evr__stash_put(&ctx->ops_free, op,
		       ctx->destroying ? 0 : EVR_OP_FREE_MAX);
}

void evr__op_free_all(evr_ctx *ctx)
{
	evr__stash_free(&ctx->ops_free);
}

void evr__runq_forget(evr_conn *c)
{
	evr__list_del(&c->work_link);
	evr__list_del(&c->flush_link);
}

#define conn_pop(q, m) evr__list_pop_entry((q), evr_conn, m)

/* Run flushes and state steps until nothing is left: a callback may
 * submit more, which is posted in the same pass.  Reentrant calls (from
 * inside a dispatch) return at once: the outermost one does the work. */
void evr__ctx_run(evr_ctx *ctx)
{
	int round;

	if (ctx->dispatch_depth)
		return;
	ctx->dispatch_depth++;
	for (round = 0; round < 64 && evr__runq_busy(ctx); round++) {
		evr_conn *c;

		while ((c = conn_pop(&ctx->flush, flush_link)))
			ctx->hooks.conn_flush(c);
		while ((c = conn_pop(&ctx->work, work_link)))
			ctx->hooks.conn_step(c); /* may free c */
	}
	ctx->dispatch_depth--;
}
