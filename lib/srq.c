/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The shared receive queue (SRQ) of a ctx: one pool of receive buffers
 * for every connection, instead of recv_depth buffers each.
 *
 * Whether a ctx has one is decided once, when its first QP is made
 * (evr_ctx_opts.srq, EVR_SRQ, and whether the device has SRQs).  Its
 * credits are a budget the ctx lends to its peers (struct evr__bank,
 * bank.h; docs/credits.md has the scheme and its invariant, "credits lent
 * never exceed the buffers posted", which is what keeps RNR impossible).
 * This file makes and destroys the SRQ and posts buffers to it: the
 * chunks the bank asks for (evr__srq_refill, from the loop and before a
 * connection is admitted), and buffers handed back.  Which connection a
 * receive belongs to is known only once a message lands in it: its head
 * carries the ctx, and its done (the srq_recv_done hook, conn layer) finds
 * the connection by the completion's QP number.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <string.h>

#define EVR_SRQ_MAX_DEFAULT 65536u /* buffers, when the option is 0 */
#define EVR_SRQ_WIN_INIT    8u	   /* credits lent at admission */
#define EVR_SRQ_POST_BATCH  64u	   /* WRs per ibv_post_srq_recv */

void evr__srq_buf_prep(evr_ctx *ctx, struct evr__buf *b)
{
	b->h.srq_ctx = ctx;
	b->h.done = ctx->hooks.srq_recv_done;
	b->update = false;
}

int evr__srq_post(evr_ctx *ctx, struct ibv_recv_wr *wr,
		  struct ibv_recv_wr **bad)
{
	return evr__post_srq_recv(ctx->srq, wr, bad);
}

/* The most buffers the pool may own: the option, else the default, within
 * what the device's SRQ holds and half the locked-memory limit (the rest
 * is for send copies and rendezvous). */
static uint32_t srq_limit(const evr_ctx *ctx)
{
	uint64_t lim =
	    ctx->o.srq_buffers ? ctx->o.srq_buffers : EVR_SRQ_MAX_DEFAULT;
	if (!ctx->o.srq_buffers && ctx->memlock != UINT64_MAX)
		lim = EVR__MIN(lim, ctx->memlock / 2 / ctx->pool.buf_size);
	lim = EVR__MIN(lim, (uint64_t)ctx->dattr.max_srq_wr);
	return (uint32_t)lim;
}

int evr__srq_open(evr_ctx *ctx)
{
	struct ibv_srq_init_attr a;
	struct evr__bank_cfg cfg;
	enum evr_srq_mode want = ctx->tune.srq;
	int err;

	if (ctx->srq_decided)
		return ctx->srq || want != EVR_SRQ_ON ? 0 : -EOPNOTSUPP;
	ctx->srq_decided = true;
	if (want == EVR_SRQ_OFF)
		return 0;
	if (ctx->dattr.max_srq <= 0 || ctx->dattr.max_srq_wr <= 0) {
		if (want == EVR_SRQ_ON) {
			EVR_ERR(ctx,
				"device %s has no shared receive queues "
				"(srq = EVR_SRQ_ON)",
				ctx->devname);
			return -EOPNOTSUPP;
		}
		EVR_INFO(ctx,
			 "device %s has no shared receive queues: a "
			 "receive queue per connection",
			 ctx->devname);
		return 0;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.win_max = ctx->o.recv_depth;
	cfg.win_init = EVR__MIN(EVR_SRQ_WIN_INIT, cfg.win_max);
	cfg.win_min = evr__bank_min_window(cfg.win_max);
	cfg.chunk = ctx->pool.per_chunk;
	cfg.limit = EVR__MAX(srq_limit(ctx), cfg.win_init);
	if (evr__bank_init(&ctx->bank, &cfg)) {
		EVR_ERR(ctx, "shared receive queue: bad windows (%u..%u)",
			cfg.win_min, cfg.win_max);
		return want == EVR_SRQ_ON ? -EINVAL : 0;
	}
	memset(&a, 0, sizeof(a));
	a.attr.max_wr = cfg.limit;
	a.attr.max_sge = 1;
	ctx->srq = ibv_create_srq(ctx->pd, &a);
	if (!ctx->srq) {
		err = errno ? -errno : -ENOMEM;
		EVR_WARN(ctx, "ibv_create_srq(%u) failed: %s%s", cfg.limit,
			 evr_strerror(err),
			 want == EVR_SRQ_ON
			     ? ""
			     : ": a receive queue per connection");
		return want == EVR_SRQ_ON ? err : 0;
	}
	EVR_INFO(ctx,
		 "shared receive queue of up to %u buffers; windows "
		 "%u..%u, %u at first",
		 cfg.limit, cfg.win_min, cfg.win_max, cfg.win_init);
	evr__srq_refill(ctx); /* what fails is retried at the next need */
	return 0;
}

void evr__srq_close(evr_ctx *ctx)
{
	if (ctx->srq && ibv_destroy_srq(ctx->srq))
		EVR_ERR(ctx, "ibv_destroy_srq failed");
	ctx->srq = NULL;
}

int evr__srq_refill(evr_ctx *ctx)
{
	struct ibv_recv_wr wrs[EVR_SRQ_POST_BATCH], *bad;
	struct ibv_sge sges[EVR_SRQ_POST_BATCH];
	uint32_t want;
	int err = 0;

	if (!ctx->srq)
		return 0;
	while (!err && (want = evr__bank_want(&ctx->bank)) > 0) {
		unsigned n, i;

		want = EVR__MIN(want, EVR_SRQ_POST_BATCH);
		for (n = 0; n < want; n++) {
			struct evr__buf *b = evr__pool_get(&ctx->pool);

			if (!b) {
				err = -ENOMEM; /* reg_mr explained why */
				break;
			}
			evr__srq_buf_prep(ctx, b);
			evr__recv_wr(&wrs[n], &sges[n], b);
			if (n)
				wrs[n - 1].next = &wrs[n];
		}
		if (n == 0)
			break;
		err = evr__srq_post(ctx, wrs, &bad);
		for (i = 0; i < n; i++) {
			if (err && &wrs[i] == bad)
				break;
			ctx->st.recv_wrs++;
		}
		evr__bank_add(&ctx->bank, i);
		if (err)
			EVR_ERR(ctx, "ibv_post_srq_recv failed: %s",
				evr_strerror(err));
		for (; i < n; i++)
			evr__pool_put(&ctx->pool, evr__recv_wr_buf(&wrs[i]));
	}
	return err;
}

void evr__srq_put_back(evr_ctx *ctx, struct evr__buf *b)
{
	struct ibv_recv_wr wr, *bad;
	struct ibv_sge sge;
	int err;

	evr__srq_buf_prep(ctx, b);
	evr__recv_wr(&wr, &sge, b);
	err = evr__srq_post(ctx, &wr, &bad);
	if (err) {
		/* the bank counted it as posted: it owns one fewer now */
		EVR_ERR(ctx, "ibv_post_srq_recv failed: %s", evr_strerror(err));
		ctx->bank.posted--;
		ctx->bank.total--;
		evr__pool_put(&ctx->pool, b);
		return;
	}
	ctx->st.recv_wrs++;
}
