/*
 * Embedding a ctx in a foreign event loop through one fd.
 *
 * The ctx runs on its private libev loop; evr_ctx_fd() is an epoll fd of
 * our own that watches the same three fds as that loop's watchers (the
 * completion channel, the rdma_cm channel and the device's async fd), so
 * it is readable exactly when one of them is.  evr_ctx_process() runs one
 * non-blocking iteration of the private loop (prepare: deferred work and
 * flushes; poll with timeout 0; check: POLL-mode polling; then the ready
 * watchers, each of which drains its fd to EAGAIN -- but the rdma_cm one,
 * which takes a bounded batch, see cm.c).  An epoll fd inside another
 * epoll reports a new event whenever one of its fds gets one, so
 * edge-triggered host loops are woken for every new arrival; and because
 * every handler drains to EAGAIN (or leaves evr_ctx_timeout_ms() at 0) and
 * re-arms with arm-then-poll, nothing that arrived before
 * evr_ctx_process() returned is left without a wakeup.
 *
 * What no fd can signal -- deferred work queued by calls the host made
 * outside our callbacks, POLL mode, rdma_cm events left over by a full
 * batch, and the timers of the private loop (each conn's connect / close /
 * flush bound and its keepalive tick) -- is reported through
 * evr_ctx_timeout_ms(): 0 for work to do now, else the time to the first
 * timer.  The loop's timers fire only in evr_ctx_process(), so one left
 * out there would never fire while the host sleeps on the fd.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <math.h>
#include <sys/epoll.h>
#include <unistd.h>

static int add_fd(int ep, int fd)
{
	struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};

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

	if (!ctx || !ctx->own_loop)
		return -EINVAL;
	if (ctx->efd >= 0)
		return ctx->efd;
	ctx->efd = epoll_create1(EPOLL_CLOEXEC);
	if (ctx->efd < 0)
		return -errno;
	err = add_fd(ctx->efd, ctx->cm_ch->fd);
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
	if (!ctx || !ctx->own_loop)
		return -EINVAL;
	ctx->cm_more = false; /* set again if a full batch leaves some */
	ev_run(ctx->loop, EVRUN_NOWAIT);
	/* sends submitted by callbacks of this iteration: post them now */
	evr__ctx_progress(ctx);
	return 0;
}

/* Seconds to the earlier of best (negative: none) and the active timer w. */
static double earlier(evr_ctx *ctx, double best, ev_timer *w)
{
	double r;

	if (!ev_is_active(w))
		return best;
	r = ev_timer_remaining(ctx->loop, w);
	return best < 0 || r < best ? r : best;
}

/*
 * Every timer of a ctx belongs to one of its conns: the connect, close or
 * flush bound (c->timer) and the keepalive tick (c->ka).  Zombies keep
 * theirs until they go.  The remaining time is measured from the loop's
 * clock, which stands where the last iteration left it; the host may have
 * worked since, so the clock is read again first.
 */
int evr_ctx_timeout_ms(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;
	double next = -1.;
	int pass;

	if (!ctx || !ctx->own_loop)
		return -1;
	if (ctx->polling || ctx->need_arm || evr__runq_busy(ctx) ||
	    ctx->cm_more)
		return 0;
	ev_now_update(ctx->loop);
	for (pass = 0; pass < 2; pass++) {
		struct evr__list *head = pass ? &ctx->zombies : &ctx->conns;

		evr__list_for_each_safe(pos, tmp, head)
		{
			evr_conn *c = evr__container_of(pos, evr_conn, link);

			next = earlier(ctx, next, &c->timer);
			next = earlier(ctx, next, &c->ka);
		}
	}
	if (next < 0)
		return -1;
	if (next <= 0)
		return 0;
	return (int)ceil(next * 1000.);
}
