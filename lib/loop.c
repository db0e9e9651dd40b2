/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * What drives a ctx on its libev loop, and the mode (EVENT, POLL,
 * ADAPTIVE) it is driven in.
 *
 * Watchers:
 *   cq_w     completion channel fd: take the event, poll every CQ, then
 *            either re-arm (EVENT) or stay unarmed and poll (POLL)
 *   cm_w     rdma_cm event channel fd (cm.c)
 *   async_w  ibv_context->async_fd: QP/CQ/port/device events
 *   prep_w   ev_prepare: before the loop sleeps, run the run queue
 *            (runq.c): every flush and state step, so everything submitted
 *            during the iteration is posted (one ibv_post_send per QP);
 *            in ADAPTIVE's EVENT phase, then spin a while for the answer
 *            to what was posted before arming (spin_then_block: as long
 *            as answers have been taking, within bounds, adapt.h)
 *   check_w  ev_check, active only in POLL mode: poll the CQs after every
 *            loop wakeup, and on while completions keep coming (up to a
 *            budget); stopped in EVENT, where each wakeup would only run
 *            it to return
 *   idle_w   ev_idle: active only in POLL mode, keeps the loop from sleeping
 *            while other watchers still run every iteration
 *   timer_w  ev_timer at the earliest deadline of the ctx's heap (timer.c:
 *            connect, close and flush bounds, keepalive ticks): runs the
 *            due ones; on_prepare moves it when the heap's top changed
 *
 * User callbacks run only from these watchers (through the layers below):
 * submission calls queue their conn on the run queue and return.  The
 * adaptive mode's decisions are adapt.c's; this file applies them.
 */
#include "evrdma-int.h"
#include "probe.h"

#include <errno.h>

/* POLL mode: completions handled in one check before the loop runs its
 * other watchers again. */
#define EVR_CHECK_BUDGET 64

/* Back to sleeping on the completion channel: post what is waiting, arm
 * every CQ that is not armed, poll it until empty (nothing that completed
 * before the arm is left behind), and post what that poll's callbacks
 * submitted.  Posting before arming sends a reply one system call sooner,
 * and the completions of what was just posted that are in by the time of
 * the arm (a send's, on a fast or a software device) are taken by the poll
 * without raising one more event and wakeup. */
static void arm_all(evr_ctx *ctx)
{
	evr__ctx_progress(ctx);
	evr__cq_arm_unarmed(ctx);
	evr__ctx_progress(ctx);
}

void evr__loop_set_polling(evr_ctx *ctx, bool poll)
{
	if (ctx->polling == poll)
		return;
	ctx->polling = poll;
	if (poll) {
		ctx->need_arm = false;
		ev_check_start(ctx->loop, &ctx->check_w);
		ev_idle_start(ctx->loop, &ctx->idle_w);
	} else {
		ev_check_stop(ctx->loop, &ctx->check_w);
		ev_idle_stop(ctx->loop, &ctx->idle_w);
		/* arm, then poll once more: from the loop (on_prepare), since
		 * the poll dispatches callbacks and this may be a user call */
		ctx->need_arm = true;
	}
}

/* Keep timer_w at the heap's earliest deadline.  Re-set only when that
 * changed: in POLL mode this runs every iteration. */
static void timer_sync(evr_ctx *ctx)
{
	struct evr__timer *t = evr__timers_first(&ctx->timers);

	if (!t) {
		ev_timer_stop(ctx->loop, &ctx->timer_w);
		return;
	}
	if (ev_is_active(&ctx->timer_w) && ctx->timer_w_at == t->at)
		return;
	ev_timer_stop(ctx->loop, &ctx->timer_w);
	ev_timer_set(&ctx->timer_w, EVR__MAX(t->at - ev_now(ctx->loop), 0.),
		     0.);
	ev_timer_start(ctx->loop, &ctx->timer_w);
	ctx->timer_w_at = t->at;
}

static void on_timer(struct ev_loop *loop, ev_timer *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, timer_w);

	(void)revents;
	evr__timers_run(&ctx->timers, ev_now(loop));
	evr__ctx_progress(ctx);
	timer_sync(ctx);
}

/* ADAPTIVE decided on POLL (from EVENT, CQs not armed): the check
 * watcher polls from now on. */
static void to_poll(evr_ctx *ctx)
{
	evr__loop_set_polling(ctx, true);
	ctx->spin_t0 = 0; /* POLL takes answers as they come */
	ctx->st.mode_switches++;
	EVR_PROBE2(mode_switch, ctx, (int)EVR_MODE_POLL);
	if (ctx->mode_cb)
		ctx->mode_cb(ctx, EVR_MODE_POLL, ctx->mode_arg);
}

/* ADAPTIVE in EVENT, something that awaits an answer or a completion was
 * posted since the last spin (a message, a one-sided op, a rendezvous
 * read; not a credit update, a FIN or a BYE): poll for the answer a while
 * before sleeping (evr_ctx_opts.adapt_spin_us).  A
 * completion taken here needs no wakeup; one whose callbacks post again
 * starts the spin anew, up to EVR_CHECK_BUDGET completions, after which
 * the loop runs its other watchers and the next prepare spins on. */
static bool spin_wanted(const evr_ctx *ctx)
{
	return ctx->tune.spin_us && ctx->mode == EVR_MODE_ADAPTIVE &&
	       !ctx->polling && ctx->answer_posts != ctx->spin_mark;
}

/* A post at now: its answer is awaited from now, by a spin of
 * ctx->spin_ns (adapt.h). */
static double spin_start(evr_ctx *ctx, double now)
{
	ctx->spin_t0 = now;
	ctx->spin_recv = ctx->st.msgs_recv;
	ctx->spin_ns = evr__spin_begin(&ctx->spin);
	return now + (double)ctx->spin_ns * 1e-9;
}

/* Completions were taken at now: if a message came among them, it is the
 * answer to the post at spin_t0 (by the spin, or by the wakeup after it:
 * then the time includes the wakeup's, which the next spin will cover). */
static void spin_timed(evr_ctx *ctx, double now, bool spun)
{
	if (ctx->spin_t0 != 0 && ctx->st.msgs_recv != ctx->spin_recv) {
		evr__spin_answer(&ctx->spin,
				 (uint64_t)((now - ctx->spin_t0) * 1e9), spun);
		ctx->spin_t0 = 0;
	}
}

static void spin_then_block(evr_ctx *ctx)
{
	double now, end = spin_start(ctx, ev_time());
	unsigned n, total = 0;

	ctx->spin_mark = ctx->answer_posts;
	while (ctx->mode == EVR_MODE_ADAPTIVE && !ctx->polling) {
		n = evr__cq_poll_all(ctx, 256);
		if (!n) {
			if (ev_time() >= end) {
				/* the wakeup times the answer */
				if (ctx->spin_t0 != 0)
					evr__spin_missed(&ctx->spin,
							 ctx->spin_ns);
				return;
			}
			continue;
		}
		if (ctx->spin_t0 != 0) {
			now = ev_time();
			spin_timed(ctx, now, true);
			/* answered: what else comes soon is taken by a spin
			 * of base length, not of the longer one */
			if (ctx->spin_t0 == 0)
				end = EVR__MIN(end,
					       now + ctx->spin.base_ns * 1e-9);
		}
		ctx->st.spin_hits += n;
		total += n;
		/* a take counts as a wakeup would towards POLL, with all this
		 * spin took as its batch: traffic that keeps the spin busy
		 * (a stream, a fast back-to-back ping-pong) is POLL's */
		if (evr__adapt_wakeup(&ctx->adapt, evr__loop_ns(ctx), total)) {
			to_poll(ctx);
			evr__ctx_progress(ctx);
			return;
		}
		evr__ctx_progress(ctx);
		if (ctx->answer_posts != ctx->spin_mark) {
			ctx->spin_mark = ctx->answer_posts;
			end = spin_start(ctx, ev_time()); /* an answer is due */
		}
		if (total >= EVR_CHECK_BUDGET) {
			ctx->spin_mark--; /* the next prepare spins on */
			return;
		}
	}
}

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, prep_w);

	(void)loop;
	(void)revents;
	evr__ctx_progress(ctx);
	if (spin_wanted(ctx))
		spin_then_block(ctx);
	if (ctx->need_arm && !ctx->polling) {
		ctx->need_arm = false;
		arm_all(ctx); /* posts too, before and after */
	}
	if (ctx->srq) {
		/* conns gone since: free them; the shared queue's refill */
		evr__conn_reap(ctx);
		evr__ctx_progress(ctx);
	}
	timer_sync(ctx); /* after the steps, which may arm timers */
}

static void on_check(struct ev_loop *loop, ev_check *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, check_w);
	unsigned n, total = 0, empty = 0;

	(void)loop;
	(void)revents;
	if (!ctx->polling)
		return;
	/* A loop iteration costs a syscall (epoll_wait with timeout 0), clock
	 * reads and the watchers' bookkeeping: more than the work of a small
	 * message.  So stay here while completions keep coming -- poll,
	 * dispatch, post what the callbacks submitted, poll again -- and go
	 * back to the loop after poll_spin empty passes in a row, or after
	 * EVR_CHECK_BUDGET completions, so other watchers (the user's fds,
	 * timers, rdma_cm) still run often.  A ping-pong's reply is thus
	 * posted and its answer polled for without a loop iteration. */
	while (ctx->polling) {
		n = evr__cq_poll_all(ctx, 256);
		if (n) {
			evr__ctx_progress(ctx);
			total += n;
			empty = 0;
			if (total >= EVR_CHECK_BUDGET)
				break;
		} else if (++empty > ctx->tune.poll_spin) {
			break;
		}
	}
	if (ctx->polling && ctx->mode == EVR_MODE_ADAPTIVE &&
	    evr__adapt_poll(&ctx->adapt, evr__loop_ns(ctx), total)) {
		ctx->st.mode_switches++;
		EVR_PROBE2(mode_switch, ctx, (int)EVR_MODE_EVENT);
		evr__loop_set_polling(ctx, false);
		ctx->need_arm = false;
		arm_all(ctx); /* we are in the loop: arm and re-poll now */
		if (ctx->mode_cb)
			ctx->mode_cb(ctx, EVR_MODE_EVENT, ctx->mode_arg);
	}
	evr__ctx_progress(ctx);
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
	/* nothing: being active keeps the loop's timeout at zero */
	(void)loop;
	(void)w;
	(void)revents;
}

/* ---- device async events ---- */

static const char *async_str(enum ibv_event_type t)
{
	return ibv_event_type_str(t);
}

static void fail_all(evr_ctx *ctx, int err)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &ctx->conns)
	    evr__conn_fail(evr__container_of(pos, evr_conn, link), err);
}

static void on_async(struct ev_loop *loop, ev_io *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, async_w);
	struct ibv_async_event ev;

	(void)loop;
	(void)revents;
	while (ibv_get_async_event(ctx->verbs, &ev) == 0) {
		evr_conn *c = NULL;

		switch (ev.event_type) {
		case IBV_EVENT_QP_FATAL:
		case IBV_EVENT_QP_REQ_ERR:
		case IBV_EVENT_QP_ACCESS_ERR:
			c = ev.element.qp->qp_context;
			EVR_WARN(ctx, "async event %s on qp %u",
				 async_str(ev.event_type),
				 ev.element.qp->qp_num);
			if (c)
				evr__conn_fail(c,
					       ev.event_type ==
						       IBV_EVENT_QP_ACCESS_ERR
						   ? -EACCES
						   : -EIO);
			break;
		case IBV_EVENT_COMM_EST:
			/* a receive arrived before ESTABLISHED was reported */
			c = ev.element.qp->qp_context;
			if (c && c->id)
				rdma_notify(c->id, IBV_EVENT_COMM_EST);
			break;
		case IBV_EVENT_SQ_DRAINED:
		case IBV_EVENT_QP_LAST_WQE_REACHED:
		case IBV_EVENT_PATH_MIG:
		case IBV_EVENT_PATH_MIG_ERR:
			EVR_DBG(ctx, "async event %s",
				async_str(ev.event_type));
			break;
		case IBV_EVENT_CQ_ERR: {
			struct evr__cq *cq = evr__cq_find(ctx, ev.element.cq);

			if (cq)
				evr__cq_break(ctx, cq, "async event CQ_ERR",
					      -EIO);
			else
				EVR_ERR(ctx, "async event %s on an unknown CQ",
					async_str(ev.event_type));
			break;
		}
		case IBV_EVENT_PORT_ERR:
			EVR_WARN(ctx, "port %d down: failing connections",
				 ev.element.port_num);
			fail_all(ctx, -ENETDOWN);
			break;
		case IBV_EVENT_DEVICE_FATAL:
			EVR_ERR(ctx, "device %s fatal error", ctx->devname);
			fail_all(ctx, -ENODEV);
			break;
		case IBV_EVENT_PORT_ACTIVE:
		case IBV_EVENT_LID_CHANGE:
		case IBV_EVENT_PKEY_CHANGE:
		case IBV_EVENT_SM_CHANGE:
		case IBV_EVENT_CLIENT_REREGISTER:
		case IBV_EVENT_GID_CHANGE:
			EVR_INFO(ctx, "async event %s on port %d",
				 async_str(ev.event_type), ev.element.port_num);
			break;
		default:
			EVR_INFO(ctx, "async event %s",
				 async_str(ev.event_type));
			break;
		}
		ibv_ack_async_event(&ev);
	}
	evr__ctx_progress(ctx);
}

void evr__loop_on_cq_channel(struct ev_loop *loop, ev_io *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, cq_w);
	unsigned n;
	bool up;

	(void)loop;
	(void)revents;
	evr__cq_take_event(ctx);
	n = evr__cq_poll_all(ctx, ~0u);
	if (n && ctx->spin_t0 != 0) /* an ADAPTIVE spin awaits an answer */
		spin_timed(ctx, ev_time(), false);
	up = ctx->mode == EVR_MODE_ADAPTIVE &&
	     evr__adapt_wakeup(&ctx->adapt, evr__loop_ns(ctx), n);
	if (!ctx->polling && !up) {
		if (ctx->mode == EVR_MODE_ADAPTIVE && ctx->tune.spin_us) {
			/* post now; on_prepare spins for the answer, then
			 * arms (a CQ armed during the spin would raise an
			 * event for what the spin takes) */
			ctx->need_arm = true;
			evr__ctx_progress(ctx);
			return;
		}
		arm_all(ctx); /* posts first, see there */
		return;
	}
	/* stay unarmed: the check watcher polls from now on */
	if (up)
		to_poll(ctx);
	evr__ctx_progress(ctx);
}

/* Calls from other threads (thread.c); what they submit is posted by the
 * prepare watcher or, embedded, at the end of evr_ctx_process(). */
static void on_calls(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	evr__calls_run(evr__container_of(w, evr_ctx, calls_w));
}

/* The watchers that do not need a device: rdma_cm, calls from other
 * threads, prepare, check, and idle in POLL mode. */
void evr__loop_start(evr_ctx *ctx)
{
	ev_io_init(&ctx->cm_w, evr__cm_on_channel, ctx->cm_ch->fd, EV_READ);
	ev_io_init(&ctx->calls_w, on_calls, ctx->calls.fd, EV_READ);
	ev_io_start(ctx->loop, &ctx->calls_w);
	ev_prepare_init(&ctx->prep_w, on_prepare);
	ev_check_init(&ctx->check_w, on_check);
	ev_idle_init(&ctx->idle_w, on_idle);
	ev_timer_init(&ctx->timer_w, on_timer, 0., 0.);
	ev_io_start(ctx->loop, &ctx->cm_w);
	ev_prepare_start(ctx->loop, &ctx->prep_w);
	if (ctx->polling) {
		ev_check_start(ctx->loop, &ctx->check_w);
		ev_idle_start(ctx->loop, &ctx->idle_w);
	}
}

/* The device is bound (the device_bound hook): watch its completion
 * channel and async fd, here and in the embedding epoll set if any. */
int evr__loop_add_device(evr_ctx *ctx)
{
	ev_io_init(&ctx->cq_w, evr__loop_on_cq_channel, ctx->ch->fd, EV_READ);
	ev_io_init(&ctx->async_w, on_async, ctx->verbs->async_fd, EV_READ);
	ev_io_start(ctx->loop, &ctx->cq_w);
	ev_io_start(ctx->loop, &ctx->async_w);
	return ctx->efd >= 0 ? evr__embed_add_device(ctx) : 0;
}

void evr__loop_stop(evr_ctx *ctx)
{
	ev_io_stop(ctx->loop, &ctx->cq_w);
	ev_io_stop(ctx->loop, &ctx->cm_w);
	ev_io_stop(ctx->loop, &ctx->async_w);
	ev_io_stop(ctx->loop, &ctx->calls_w);
	ev_prepare_stop(ctx->loop, &ctx->prep_w);
	ev_check_stop(ctx->loop, &ctx->check_w);
	ev_idle_stop(ctx->loop, &ctx->idle_w);
	ev_timer_stop(ctx->loop, &ctx->timer_w);
}
