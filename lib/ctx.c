/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The context: creating and destroying it, and its public accessors.  The
 * top of the library: it wires the layers below together (ctx->hooks, see
 * docs/architecture.md), starts the loop's watchers (loop.c) and binds the
 * device when told which (dev.c).  Destroying a ctx ends everything still
 * open, every callback fired once, before anything is freed.
 */
#include "evrdma-int.h"
#include "probe.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <unistd.h>

/* The upward calls of the layers below (struct evr__hooks). */
void evr__ctx_hooks_init(evr_ctx *ctx)
{
	ctx->hooks.conn_step = evr__conn_step;
	ctx->hooks.conn_flush = evr__conn_flush;
	ctx->hooks.cq_failed = evr__conn_fail_cq;
	ctx->hooks.device_bound = evr__loop_add_device;
	ctx->hooks.recv_done = evr__msg_recv_done;
	ctx->hooks.conn_teardown = evr__rpc_teardown;
	ctx->hooks.conn_release = evr__rpc_release;
	ctx->hooks.srq_recv_done = evr__conn_srq_recv_done;
	ctx->hooks.rpc_request = evr__rpc_request;
	ctx->hooks.rpc_reply = evr__rpc_reply;
	ctx->hooks.rpc_cancel = evr__rpc_cancel;
	ctx->hooks.rpc_live = evr__rpc_live;
}

static void ctx_free(evr_ctx *ctx)
{
	if (ctx->loop)
		evr__loop_stop(ctx);
	if (ctx->efd >= 0)
		close(ctx->efd);
	evr__calls_fini(&ctx->calls);
	evr__reg_cache_fini(ctx);
	evr__srq_close(ctx); /* before the pool: buffers are posted to it */
	evr__qpmap_fini(&ctx->qpmap);
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
		evr__dev_release(ctx);
	evr__op_free_all(ctx);
	evr__stash_free(&ctx->msgs_free);
	free(ctx->chain.wr);
	free(ctx->chain.sge);
	evr__timers_free(&ctx->timers);
	if (ctx->own_loop && ctx->loop)
		ev_loop_destroy(ctx->loop);
	free(ctx);
}

int evr_ctx_create(evr_ctx **out, struct ev_loop *loop,
		   const struct evr_ctx_opts *opts)
{
	struct evr_ctx_opts dflt, o;
	struct evr__env env;
	const char *dev;
	evr_ctx *ctx;
	int err;

	if (!out)
		return -EINVAL;
	evr_ctx_opts_init(&dflt);
	err = evr__opts_take(NULL, "evr_ctx_opts", &o, sizeof(o), &dflt,
			     opts ? opts : &dflt);
	if (err)
		return err;
	opts = &o;
	if (opts->mode > EVR_MODE_ADAPTIVE || opts->sq_depth < 4 ||
	    opts->recv_depth < EVR_HS_MIN_DEPTH || opts->recv_depth > 0xffff ||
	    (opts->eager_size && (opts->eager_size < EVR_HS_MIN_EAGER ||
				  opts->eager_size > EVR_HS_MAX_EAGER)) ||
	    opts->max_msg_size < EVR__MAX(opts->eager_size, EVR_HS_MIN_EAGER) ||
	    opts->max_msg_size > (1ull << 40) || opts->retry_count > 6 ||
	    opts->ack_timeout > 31 || opts->srq > EVR_SRQ_OFF)
		return -EINVAL;
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return -ENOMEM;
	ctx->o = *opts;
	ctx->efd = -1;
	ctx->calls.fd = -1;
	ctx->owner = pthread_self();
	ctx->reg.ctx = ctx;
	if (!ctx->o.signal_interval)
		ctx->o.signal_interval = 1;
	if (!ctx->o.listen_backlog)
		ctx->o.listen_backlog = 4096;
	if (!ctx->o.connect_reply_ms)
		ctx->o.connect_reply_ms = 30000;
	if (!ctx->o.window_idle_ms)
		ctx->o.window_idle_ms = 2000;
	if (!ctx->o.send_queue_lowat)
		ctx->o.send_queue_lowat = ctx->o.send_queue_limit / 2;
	ctx->o.device = NULL; /* not kept: the caller owns the strings */
	ctx->o.local_addr = NULL;
	ctx->memlock = evr__memlock_limit();
	/* 0: planned within the locked-memory budget (memlock.c) */
	ctx->max_eager = opts->eager_size ? (uint32_t)opts->eager_size
					  : evr__eager_for_limit(ctx->memlock);
	if (!opts->eager_size && ctx->max_eager > ctx->o.max_msg_size)
		ctx->max_eager = (uint32_t)ctx->o.max_msg_size;
	/* the environment, once: nothing reads it after this call */
	evr__env_read(&env);
	evr__tune_resolve(&ctx->tune, opts, &env);
	evr__list_init(&ctx->cqs);
	evr__list_init(&ctx->conns);
	evr__list_init(&ctx->listeners);
	evr__list_init(&ctx->mrs);
	evr__list_init(&ctx->regs);
	evr__list_init(&ctx->zombies);
	evr__list_init(&ctx->held);
	evr__list_init(&ctx->limbo);
	evr__list_init(&ctx->srq_ready);
	evr__qpmap_init(&ctx->qpmap);
	evr__runq_init(ctx);
	evr__ctx_hooks_init(ctx);
	/* one SQ batch of WRs, built at post time (sq.c): an op holds none */
	ctx->chain.wr = calloc(ctx->o.sq_depth, sizeof(*ctx->chain.wr));
	ctx->chain.sge = calloc((size_t)ctx->o.sq_depth * EVR__WR_SGES,
				sizeof(*ctx->chain.sge));
	if (!ctx->chain.wr || !ctx->chain.sge) {
		err = -ENOMEM;
		goto err_free;
	}
	ctx->chain.cap = ctx->o.sq_depth;
	err = evr__calls_init(&ctx->calls);
	if (err)
		goto err_free;

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
		dev = env.device;
	if (dev)
		err = evr__dev_open_by_name(ctx, dev);
	else if (opts->local_addr)
		err = evr__dev_open_by_addr(ctx, opts->local_addr);
	if (err)
		goto err_free;

	ctx->mode = opts->mode;
	ctx->polling = opts->mode == EVR_MODE_POLL;
	evr__adapt_init(&ctx->adapt, &ctx->tune.adapt, evr__loop_ns(ctx));
	evr__spin_init(&ctx->spin, (uint64_t)ctx->tune.spin_us * 1000);

	evr__loop_start(ctx);
	if (ctx->verbs) {
		err = evr__dev_bind(ctx, NULL);
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
	EVR_OWNER(ctx);
	/* calls queued by other threads run first, on a whole ctx */
	evr__calls_run(ctx);
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
	/* and those queued meanwhile: their conns are closed (-EPIPE) */
	evr__calls_run(ctx);
	ctx_free(ctx);
}

struct ev_loop *evr_ctx_loop(evr_ctx *ctx)
{
	EVR_OWNER(ctx);
	return ctx->loop;
}

const char *evr_ctx_device(const evr_ctx *ctx)
{
	EVR_OWNER(ctx);
	return ctx->devname;
}

int evr_ctx_set_mode(evr_ctx *ctx, enum evr_mode mode)
{
	bool poll;

	EVR_OWNER(ctx);
	if (!ctx || mode > EVR_MODE_ADAPTIVE)
		return -EINVAL;
	ctx->mode = mode;
	poll = mode == EVR_MODE_POLL ||
	       (mode == EVR_MODE_ADAPTIVE && ctx->polling);
	if (poll != ctx->polling) {
		ctx->st.mode_switches++;
		EVR_PROBE2(mode_switch, ctx,
			   (int)(poll ? EVR_MODE_POLL : EVR_MODE_EVENT));
	}
	evr__adapt_force(&ctx->adapt, poll, evr__loop_ns(ctx));
	evr__loop_set_polling(ctx, poll);
	return 0;
}

enum evr_mode evr_ctx_mode(const evr_ctx *ctx)
{
	EVR_OWNER(ctx);
	return ctx->polling ? EVR_MODE_POLL : EVR_MODE_EVENT;
}

void evr_ctx_stats(const evr_ctx *ctx, struct evr_stats *out)
{
	EVR_OWNER(ctx);
	*out = ctx->st;
	out->mode = evr_ctx_mode(ctx);
	out->reg_bytes = ctx->reg.bytes;
	out->pool_bytes = (uint64_t)ctx->pool.total * ctx->pool.buf_size;
	out->memlock_limit = evr__memlock_limit();
	out->conn_bytes = sizeof(struct evr_conn);
	out->rndv_access = ctx->rndv_access;
	if (ctx->srq) {
		out->srq_bytes = (uint64_t)ctx->bank.total * ctx->pool.buf_size;
		out->srq_buffers = ctx->bank.total;
		out->srq_posted = ctx->bank.posted - ctx->bank.unposted;
		out->srq_lent = ctx->bank.lent;
		out->srq_refused = (uint32_t)ctx->bank.refused;
		out->srq_grown = ctx->bank.grown;
		out->srq_withheld = ctx->bank.withheld;
		out->srq_reclaimed = ctx->bank.reclaimed;
	}
}

void evr_ctx_on_mode_switch(evr_ctx *ctx, evr_mode_cb cb, void *arg)
{
	EVR_OWNER(ctx);
	ctx->mode_cb = cb;
	ctx->mode_arg = arg;
}

/* The ctx's watchers keep ev_run() going: a loop with a ctx on it runs
 * until ev_break() / evr_ctx_stop(), like a server's loop. */
int evr_ctx_run(evr_ctx *ctx)
{
	EVR_OWNER(ctx);
	if (!ctx->own_loop)
		return -EINVAL;
	ev_run(ctx->loop, 0);
	return 0;
}

void evr_ctx_stop(evr_ctx *ctx)
{
	EVR_OWNER(ctx);
	ev_break(ctx->loop, EVBREAK_ALL);
}
