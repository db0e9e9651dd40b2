/*
 * The context: device, PD, completion channel and CQs, rdma_cm event
 * channel, device async events, buffer pool, and the libev watchers that
 * drive them all.
 *
 * Watchers:
 *   cq_w     completion channel fd (cq.c)
 *   cm_w     rdma_cm event channel fd (cm.c)
 *   async_w  ibv_context->async_fd: QP/CQ/port/device events
 *   prep_w   ev_prepare: before the loop sleeps, run deferred work and post
 *            everything submitted during the iteration (one ibv_post_send
 *            per QP per iteration)
 *   check_w  ev_check: in POLL mode, poll the CQs after every loop wakeup
 *   idle_w   ev_idle: active only in POLL mode, keeps the loop from sleeping
 *            while other watchers still run every iteration
 *
 * Deferred work: user callbacks run only from these watchers.  Submission
 * calls never invoke callbacks; failures found later (a failed post, an
 * abort) queue the op on ctx->done, and state changes queue the conn on
 * ctx->work; evr__ctx_progress() runs both and the flush until quiet.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

void evr_ctx_opts_init(struct evr_ctx_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->mode = EVR_MODE_ADAPTIVE;
	o->sq_depth = 256;
	o->recv_depth = 64;
	o->eager_size = 8192;
	o->max_msg_size = 64u << 20;
	o->signal_interval = 16;
	o->connect_timeout_ms = 5000;
	o->close_timeout_ms = 5000;
	o->retry_count = 6;
	o->ack_timeout = 16;
	o->keepalive_ms = 2000;
	o->keepalive_timeout_ms = 6000;
	o->send_queue_limit = 64u << 20;
	o->send_queue_lowat = 0;
	o->adapt_up_rate = 2000;
	o->adapt_up_batch = 16;
	o->adapt_quiet_us = 1000;
	o->log_level = EVR_LOG_WARN;
}

struct evr__op *evr__op_alloc(evr_ctx *ctx)
{
	struct evr__op *op = ctx->op_free;

	if (op) {
		ctx->op_free = op->next;
		ctx->nop_free--;
		memset(op, 0, sizeof(*op));
		return op;
	}
	return calloc(1, sizeof(*op));
}

void evr__op_free(evr_ctx *ctx, struct evr__op *op)
{
	if (ctx->nop_free >= 4096 || ctx->destroying) {
		free(op);
		return;
	}
	op->next = ctx->op_free;
	ctx->op_free = op;
	ctx->nop_free++;
}

void evr__op_defer(evr_ctx *ctx, struct evr__op *op, int status)
{
	op->status = status;
	evr__opq_push(&ctx->done, op);
}

void evr__conn_kick(evr_conn *c)
{
	if (c->on_work)
		return;
	c->on_work = true;
	c->work_next = c->ctx->work;
	c->ctx->work = c;
}

void evr__conn_dirty(evr_conn *c)
{
	if (c->on_flush)
		return;
	c->on_flush = true;
	c->flush_next = c->ctx->flush;
	c->ctx->flush = c;
}

/* Run deferred completions, conn state steps and flushes until nothing is
 * left: a callback may submit more, which is posted in the same pass. */
void evr__ctx_progress(evr_ctx *ctx)
{
	int round;

	if (ctx->dispatch_depth)
		return; /* the outermost caller will do it */
	ctx->dispatch_depth++;
	for (round = 0; round < 64; round++) {
		struct evr__op *op;
		evr_conn *c;
		bool busy = false;

		while ((op = evr__opq_pop(&ctx->done))) {
			busy = true;
			evr__conn_sq_done(op, op->status);
		}
		while ((c = ctx->flush)) {
			busy = true;
			ctx->flush = c->flush_next;
			c->on_flush = false;
			evr__conn_flush(c);
		}
		while ((c = ctx->work)) {
			busy = true;
			ctx->work = c->work_next;
			c->on_work = false;
			evr__conn_step(c); /* may free c */
		}
		if (!busy)
			break;
	}
	ctx->dispatch_depth--;
}

static void set_polling(evr_ctx *ctx, bool poll)
{
	if (ctx->polling == poll)
		return;
	ctx->polling = poll;
	if (poll) {
		ctx->need_arm = false;
		ev_idle_start(ctx->loop, &ctx->idle_w);
	} else {
		ev_idle_stop(ctx->loop, &ctx->idle_w);
		/* arm, then poll once more: from the loop (on_prepare), since
		 * the poll dispatches callbacks and this may be a user call */
		ctx->need_arm = true;
	}
}

static void on_prepare(struct ev_loop *loop, ev_prepare *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, prep_w);

	(void)loop;
	(void)revents;
	if (ctx->need_arm && !ctx->polling) {
		ctx->need_arm = false;
		evr__cq_arm_all(ctx); /* posts too, before and after */
	} else {
		evr__ctx_progress(ctx);
	}
}

static void on_check(struct ev_loop *loop, ev_check *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, check_w);
	unsigned i, n;

	(void)loop;
	(void)revents;
	if (!ctx->polling)
		return;
	/* A loop iteration costs a syscall (epoll_wait with timeout 0) and
	 * clock reads; poll a while before paying it again, but return to the
	 * loop as soon as there is work, so nothing else waits long. */
	n = evr__cq_poll_all(ctx, 256);
	for (i = 0; n == 0 && i < ctx->poll_spin; i++)
		n = evr__cq_poll_all(ctx, 256);
	if (ctx->mode == EVR_MODE_ADAPTIVE &&
	    evr__adapt_poll(&ctx->adapt, evr__loop_ns(ctx), n)) {
		ctx->st.mode_switches++;
		set_polling(ctx, false);
		ctx->need_arm = false;
		evr__cq_arm_all(ctx); /* we are in the loop: arm and re-poll now */
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

void evr__ctx_fail_all(evr_ctx *ctx, int err)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &ctx->conns)
		evr__conn_fail(evr__container_of(pos, evr_conn, link), err);
}

static void on_async(struct ev_loop *loop, ev_io *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, async_w);
	struct ibv_async_event ev;
	struct evr__list *pos, *tmp;

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
				evr__conn_fail(c, ev.event_type ==
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
		case IBV_EVENT_CQ_ERR:
			EVR_ERR(ctx, "async event %s: failing its connections",
				async_str(ev.event_type));
			evr__list_for_each_safe(pos, tmp, &ctx->conns)
			{
				c = evr__container_of(pos, evr_conn, link);
				if (c->cq && c->cq->cq == ev.element.cq)
					evr__conn_fail(c, -EIO);
			}
			break;
		case IBV_EVENT_PORT_ERR:
			EVR_WARN(ctx, "port %d down: failing connections",
				 ev.element.port_num);
			evr__ctx_fail_all(ctx, -ENETDOWN);
			break;
		case IBV_EVENT_DEVICE_FATAL:
			EVR_ERR(ctx, "device %s fatal error", ctx->devname);
			evr__ctx_fail_all(ctx, -ENODEV);
			break;
		case IBV_EVENT_PORT_ACTIVE:
		case IBV_EVENT_LID_CHANGE:
		case IBV_EVENT_PKEY_CHANGE:
		case IBV_EVENT_SM_CHANGE:
		case IBV_EVENT_CLIENT_REREGISTER:
		case IBV_EVENT_GID_CHANGE:
			EVR_INFO(ctx, "async event %s on port %d",
				 async_str(ev.event_type),
				 ev.element.port_num);
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

/* ---- device selection ---- */

/* The device context must be librdmacm's own: cm_ids carry that
 * ibv_context, and a QP must be created on a PD of the same context. */
static int open_by_name(evr_ctx *ctx, const char *name)
{
	struct ibv_context **list;
	int n, i;

	if (ctx->devlist) {
		rdma_free_devices(ctx->devlist);
		ctx->devlist = NULL;
		ctx->verbs = NULL;
	}
	list = rdma_get_devices(&n);
	if (!list)
		return errno ? -errno : -ENODEV;
	for (i = 0; i < n; i++) {
		if (name && strcmp(ibv_get_device_name(list[i]->device), name))
			continue;
		ctx->verbs = list[i];
		ctx->devlist = list;
		return 0;
	}
	rdma_free_devices(list);
	EVR_ERR(ctx, "RDMA device %s not found", name ? name : "(any)");
	return -ENODEV;
}

static int open_by_addr(evr_ctx *ctx, const char *addr)
{
	struct rdma_addrinfo hints = {0}, *res = NULL;
	struct rdma_cm_id *id = NULL;
	int err;

	hints.ai_flags = RAI_PASSIVE | RAI_NUMERICHOST;
	hints.ai_port_space = RDMA_PS_TCP;
	if (rdma_getaddrinfo(addr, NULL, &hints, &res))
		return -EINVAL;
	err = rdma_create_id(NULL, &id, NULL, RDMA_PS_TCP);
	if (err) {
		err = -errno;
		goto out;
	}
	if (rdma_bind_addr(id, res->ai_src_addr)) {
		err = -errno;
		EVR_ERR(ctx, "no RDMA device has address %s", addr);
		goto out;
	}
	if (!id->verbs) {
		err = -ENODEV;
		goto out;
	}
	err = open_by_name(ctx, ibv_get_device_name(id->verbs->device));
out:
	if (id)
		rdma_destroy_id(id);
	rdma_freeaddrinfo(res);
	return err;
}

/*
 * Give the device list back to librdmacm.  It closes a removed device (the
 * kernel's unregistration waits for that) once it has noticed the removal
 * -- only when it next lists the devices -- and the last user let go: let
 * it look right after, or the device would stay held until this process
 * exits.  Our device goes last in the list: librdmacm's
 * rdma_free_devices() still reads a device it has just closed while it
 * compares it with the entries that follow.
 */
static void release_devices(evr_ctx *ctx)
{
	struct ibv_context **now, **l = ctx->devlist;
	int n, i;

	for (n = 0; l[n]; n++)
		;
	for (i = 0; i < n - 1; i++) {
		if (l[i] == ctx->verbs) {
			l[i] = l[n - 1];
			l[n - 1] = ctx->verbs;
			break;
		}
	}
	rdma_free_devices(l);
	ctx->devlist = NULL;
	now = rdma_get_devices(NULL);
	if (now)
		rdma_free_devices(now);
}

static void ctx_free(evr_ctx *ctx)
{
	struct evr__op *op;

	if (ctx->loop) {
		ev_io_stop(ctx->loop, &ctx->cq_w);
		ev_io_stop(ctx->loop, &ctx->cm_w);
		ev_io_stop(ctx->loop, &ctx->async_w);
		ev_prepare_stop(ctx->loop, &ctx->prep_w);
		ev_check_stop(ctx->loop, &ctx->check_w);
		ev_idle_stop(ctx->loop, &ctx->idle_w);
	}
	if (ctx->efd >= 0)
		close(ctx->efd);
	evr__reg_cache_fini(ctx);
	if (ctx->pd)
		evr__pool_fini(&ctx->pool);
	evr__cq_destroy_all(ctx);
	if (ctx->ch)
		ibv_destroy_comp_channel(ctx->ch);
	if (ctx->cm_ch)
		rdma_destroy_event_channel(ctx->cm_ch);
	if (ctx->pd)
		ibv_dealloc_pd(ctx->pd);
	if (ctx->devlist)
		release_devices(ctx);
	while ((op = ctx->op_free)) {
		ctx->op_free = op->next;
		free(op);
	}
	if (ctx->own_loop && ctx->loop)
		ev_loop_destroy(ctx->loop);
	free(ctx);
}

/*
 * Set up everything that belongs to the device: PD, completion channel,
 * buffer pool and the completion and async-event watchers.  verbs is the
 * librdmacm context of a cm_id (lazy binding), or NULL when ctx->verbs was
 * already chosen.  A ctx serves one device; -ENODEV for another one.
 */
int evr__ctx_bind(evr_ctx *ctx, struct ibv_context *verbs)
{
	struct ibv_port_attr pattr;
	int err;

	if (ctx->pd)
		return verbs && verbs != ctx->verbs ? -ENODEV : 0;
	if (verbs) {
		err = open_by_name(ctx, ibv_get_device_name(verbs->device));
		if (err)
			return err;
		if (ctx->verbs != verbs)
			return -ENODEV;
	}
	if (!ctx->verbs) {
		err = open_by_name(ctx, NULL);
		if (err)
			return err;
	}
	snprintf(ctx->devname, sizeof(ctx->devname), "%s",
		 ibv_get_device_name(ctx->verbs->device));
	if (ibv_query_device(ctx->verbs, &ctx->dattr))
		return errno ? -errno : -EIO;
	ctx->max_msg_sz = 1u << 30;
	if (ibv_query_port(ctx->verbs, 1, &pattr) == 0 && pattr.max_msg_sz)
		ctx->max_msg_sz = pattr.max_msg_sz;
	if ((unsigned)ctx->dattr.max_qp_wr < ctx->o.sq_depth ||
	    (unsigned)ctx->dattr.max_qp_wr < ctx->o.recv_depth) {
		EVR_ERR(ctx, "queue depth beyond the device limit %d",
			ctx->dattr.max_qp_wr);
		return -EINVAL;
	}
	ctx->pd = ibv_alloc_pd(ctx->verbs);
	if (!ctx->pd)
		return errno ? -errno : -ENOMEM;
	ctx->ch = ibv_create_comp_channel(ctx->verbs);
	if (!ctx->ch)
		return errno ? -errno : -ENOMEM;
	if ((err = evr__set_nonblock(ctx->ch->fd)) ||
	    (err = evr__set_nonblock(ctx->verbs->async_fd)))
		return err;
	err = evr__pool_init(&ctx->pool, ctx->pd,
			     EVR_HDR_SIZE + ctx->max_eager, 0);
	if (err)
		return err;
	ev_io_init(&ctx->cq_w, evr__cq_on_channel, ctx->ch->fd, EV_READ);
	ev_io_init(&ctx->async_w, on_async, ctx->verbs->async_fd, EV_READ);
	ev_io_start(ctx->loop, &ctx->cq_w);
	ev_io_start(ctx->loop, &ctx->async_w);
	if (ctx->efd >= 0) {
		err = evr__embed_add_device(ctx);
		if (err)
			return err;
	}
	EVR_INFO(ctx, "ctx on %s, mode %s", ctx->devname,
		 evr_mode_str(ctx->mode));
	return 0;
}

int evr_ctx_create(evr_ctx **out, struct ev_loop *loop,
		   const struct evr_ctx_opts *opts)
{
	struct evr_ctx_opts dflt;
	struct evr__adapt_cfg acfg;
	const char *dev;
	evr_ctx *ctx;
	int err;

	if (!out)
		return -EINVAL;
	if (!opts) {
		evr_ctx_opts_init(&dflt);
		opts = &dflt;
	}
	if (opts->mode > EVR_MODE_ADAPTIVE || opts->sq_depth < 4 ||
	    opts->recv_depth < EVR_HS_MIN_DEPTH || opts->recv_depth > 0xffff ||
	    opts->eager_size < EVR_HS_MIN_EAGER ||
	    opts->eager_size > EVR_HS_MAX_EAGER ||
	    opts->max_msg_size < opts->eager_size ||
	    opts->max_msg_size > (1ull << 40) || opts->retry_count > 6 ||
	    opts->ack_timeout > 31)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->o = *opts;
	ctx->efd = -1;
	if (!ctx->o.signal_interval)
		ctx->o.signal_interval = 1;
	if (!ctx->o.send_queue_lowat)
		ctx->o.send_queue_lowat = ctx->o.send_queue_limit / 2;
	ctx->o.device = NULL; /* not kept: the caller owns the strings */
	ctx->o.local_addr = NULL;
	ctx->max_eager = (uint32_t)opts->eager_size;
	evr__list_init(&ctx->cqs);
	evr__list_init(&ctx->conns);
	evr__list_init(&ctx->listeners);
	evr__list_init(&ctx->mrs);
	evr__list_init(&ctx->regs);
	evr__list_init(&ctx->zombies);
	evr__list_init(&ctx->held);
	evr__opq_init(&ctx->done);

	if (loop) {
		ctx->loop = loop;
	} else {
		ctx->loop = ev_loop_new(EVFLAG_AUTO);
		ctx->own_loop = true;
		if (!ctx->loop) {
			err = -ENOMEM;
			goto err_free;
		}
	}

	ctx->cm_ch = rdma_create_event_channel();
	if (!ctx->cm_ch) {
		err = errno ? -errno : -ENOMEM;
		goto err_free;
	}
	err = evr__set_nonblock(ctx->cm_ch->fd);
	if (err)
		goto err_free;
	/* Bind to a device now if told which; otherwise the first address
	 * rdma_cm resolves (listen, connect, incoming request) decides. */
	dev = opts->device;
	if (!dev && !opts->local_addr)
		dev = getenv("EVR_DEVICE");
	if (dev)
		err = open_by_name(ctx, dev);
	else if (opts->local_addr)
		err = open_by_addr(ctx, opts->local_addr);
	if (err)
		goto err_free;

	ctx->mode = opts->mode;
	ctx->polling = opts->mode == EVR_MODE_POLL;
	evr__adapt_cfg_from_opts(&acfg, opts);
	evr__adapt_init(&ctx->adapt, &acfg, evr__loop_ns(ctx));
	ctx->poll_spin = evr__env_uint("EVR_POLL_SPIN", EVR_POLL_SPIN);

	ev_io_init(&ctx->cm_w, evr__cm_on_channel, ctx->cm_ch->fd, EV_READ);
	ev_prepare_init(&ctx->prep_w, on_prepare);
	ev_check_init(&ctx->check_w, on_check);
	ev_idle_init(&ctx->idle_w, on_idle);
	ev_io_start(ctx->loop, &ctx->cm_w);
	ev_prepare_start(ctx->loop, &ctx->prep_w);
	ev_check_start(ctx->loop, &ctx->check_w);
	if (ctx->polling)
		ev_idle_start(ctx->loop, &ctx->idle_w);
	if (ctx->verbs) {
		err = evr__ctx_bind(ctx, NULL);
		if (err)
			goto err_free;
	}
	*out = ctx;
	return 0;

err_free:
	ctx_free(ctx);
	return err;
}

void evr_ctx_destroy(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;

	if (!ctx)
		return;
	ctx->destroying = true;
	evr__list_for_each_safe(pos, tmp, &ctx->listeners)
		evr_listener_close(evr__container_of(pos, evr_listener, link));
	evr__conn_free_all(ctx);
	/* held messages die with the ctx (their buffers are in its pool) */
	evr__list_for_each_safe(pos, tmp, &ctx->held)
	{
		evr_msg *m = evr__container_of(pos, evr_msg, link);

		evr__list_del(&m->link);
		evr__rbuf_put(&ctx->pool, m->rb);
		free(m);
	}
	evr__list_for_each_safe(pos, tmp, &ctx->mrs)
	{
		evr_mr *m = evr__container_of(pos, evr_mr, link);

		m->busy = 0;
		evr_mr_dereg(m);
	}
	ctx_free(ctx);
}

struct ev_loop *evr_ctx_loop(evr_ctx *ctx)
{
	return ctx->loop;
}

const char *evr_ctx_device(const evr_ctx *ctx)
{
	return ctx->devname;
}

int evr_ctx_set_mode(evr_ctx *ctx, enum evr_mode mode)
{
	bool poll;

	if (!ctx || mode > EVR_MODE_ADAPTIVE)
		return -EINVAL;
	ctx->mode = mode;
	poll = mode == EVR_MODE_POLL ||
	       (mode == EVR_MODE_ADAPTIVE && ctx->polling);
	if (poll != ctx->polling)
		ctx->st.mode_switches++;
	evr__adapt_force(&ctx->adapt, poll, evr__loop_ns(ctx));
	set_polling(ctx, poll);
	return 0;
}

enum evr_mode evr_ctx_mode(const evr_ctx *ctx)
{
	return ctx->polling ? EVR_MODE_POLL : EVR_MODE_EVENT;
}

void evr_ctx_stats(const evr_ctx *ctx, struct evr_stats *out)
{
	*out = ctx->st;
	out->mode = evr_ctx_mode(ctx);
}

void evr_ctx_on_mode_switch(evr_ctx *ctx, evr_mode_cb cb, void *arg)
{
	ctx->mode_cb = cb;
	ctx->mode_arg = arg;
}

/* The ctx's watchers keep ev_run() going: a loop with a ctx on it runs
 * until ev_break() / evr_ctx_stop(), like a server's loop. */
int evr_ctx_run(evr_ctx *ctx)
{
	if (!ctx->own_loop)
		return -EINVAL;
	ev_run(ctx->loop, 0);
	return 0;
}

void evr_ctx_stop(evr_ctx *ctx)
{
	ev_break(ctx->loop, EVBREAK_ALL);
}
