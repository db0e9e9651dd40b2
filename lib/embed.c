/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Embedding a ctx in a foreign event loop through one fd.
 *
 * The ctx runs on its private libev loop; evr_ctx_fd() is an epoll fd of
 * our own that watches the same four fds as that loop's watchers (the
 * completion channel, the rdma_cm channel, the device's async fd and the
 * eventfd of calls from other threads, thread.c), so
 * it is readable exactly when one of them is.  evr_ctx_process() runs one
 * non-blocking iteration of the private loop (prepare: deferred work and
 * flushes; poll with timeout 0; check: POLL-mode polling; then the ready
 * watchers: the completion channel's takes one event and polls every CQ
 * (loop.c), the async fd's drains to EAGAIN, the rdma_cm one takes a
 * bounded batch (cm.c)).  An epoll fd inside another epoll reports a new
 * event whenever one of its fds gets one, so edge-triggered host loops are
 * woken for every new arrival; and because every CQ is polled, then armed
 * and polled again (arm-then-poll), and rdma_cm events left over by a full
 * batch keep evr_ctx_timeout_ms() at 0, nothing that arrived before
 * evr_ctx_process() returned is left without a wakeup.
 *
 * What no fd can signal -- deferred work queued by calls the host made
 * outside our callbacks, POLL mode, rdma_cm events left over by a full
 * batch, and the ctx's deadlines (timer.c: each conn's connect / close /
 * flush bound and its keepalive tick) -- is reported through
 * evr_ctx_timeout_ms(): 0 for work to do now, else the time to the first
 * deadline.  Deadlines fire only in evr_ctx_process(), where the private
 * loop's one timer stands at the heap's top.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <math.h>
#include <sys/epoll.h>
#include <unistd.h>

static int add_fd(int ep, int fd)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = fd };

	return epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

/* The device's fds join the epoll set when the ctx binds to a device. */
int evr__embed_add_device(evr_ctx *ctx)
{
	int err;

	if ((err = add_fd(ctx->efd, ctx->ch->fd)) ||
	    (err = add_fd(ctx->efd, ctx->verbs->async_fd)))
		return err;
	return 0;
}

int evr_ctx_fd(evr_ctx *ctx)
{
	int err;

	EVR_OWNER(ctx);
	if (!ctx || !ctx->own_loop)
		return -EINVAL;
	if (ctx->efd >= 0)
		return ctx->efd;
	ctx->efd = epoll_create1(EPOLL_CLOEXEC);
	if (ctx->efd < 0)
		return -errno;
	err = add_fd(ctx->efd, ctx->cm_ch->fd);
	if (!err)
		err = add_fd(ctx->efd, ctx->calls.fd);
	if (!err && ctx->pd)
		err = evr__embed_add_device(ctx);
	if (err) {
		close(ctx->efd);
		ctx->efd = -1;
		return err;
	}
	return ctx->efd;
}

int evr_ctx_process(evr_ctx *ctx)
{
	EVR_OWNER(ctx);
	if (!ctx || !ctx->own_loop)
		return -EINVAL;
	ctx->cm_more = false; /* set again if a full batch leaves some */
	ev_run(ctx->loop, EVRUN_NOWAIT);
	/* sends submitted by callbacks of this iteration: post them now */
	evr__ctx_progress(ctx);
	return 0;
}

/*
 * Every deadline of the ctx is on its heap (timer.c), whose top is the
 * next: O(1) however many conns there are.  The remaining time is measured
 * from the loop's clock, which stands where the last iteration left it;
 * the host may have worked since, so the clock is read again first.
 */
int evr_ctx_timeout_ms(evr_ctx *ctx)
{
	struct evr__timer *t;
	double next;

	EVR_OWNER(ctx);
	if (!ctx || !ctx->own_loop)
		return -1;
	if (ctx->polling || ctx->need_arm || evr__runq_busy(ctx) ||
	    ctx->cm_more || !evr__list_empty(&ctx->limbo))
		return 0; /* limbo: released conns to reap (conn.c) */
	t = evr__timers_first(&ctx->timers);
	if (!t)
		return -1;
	ev_now_update(ctx->loop);
	next = t->at - ev_now(ctx->loop);
	if (next <= 0)
		return 0;
	return (int)ceil(next * 1000.);
}
