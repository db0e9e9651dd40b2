/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Memory registration: the user's regions (evr_mr) and the registration
 * cache for rendezvous sources.
 *
 * A rendezvous exposes the sender's buffer for an RDMA READ, and the peer
 * must reach the message's bytes only, and only until its FIN.  How is
 * decided per device (ctx->rndv_access, dev.c):
 *
 * - EVR_RNDV_WINDOW: the peer never gets a registration's rkey.  The
 *   message layer binds a type 2 memory window over the message's bytes
 *   on the conn's QP, hands the peer the window's rkey and deallocates
 *   the window at the FIN.  The registration under it can then be
 *   anything that covers the message: an evr_mr the user registered for
 *   remote read (borrowed: zero copy, nothing registered), one shared by
 *   concurrent sends of the same bytes, or a cached one.
 * - EVR_RNDV_REGISTER (no windows): the message's bytes, exactly, are
 *   registered for this send alone (the pages are pinned whole, but the
 *   rkey reaches only those bytes) and deregistered at its FIN: never
 *   borrowed, shared or cached.
 *
 * Keeping registrations after the send (an LRU cache) is opt-in, with
 * EVR_REG_CACHE=N entries (read when the ctx is created, kept in
 * ctx->tune), and only with windows.  Without allocator hooks a cache
 * cannot see a buffer freed and its address range mapped again, and a
 * stale entry would send the old pages -- silent corruption; hence
 * opt-in.  The safe zero-cost path is to register long-lived buffers with
 * evr_mr_reg(EVR_ACCESS_REMOTE_READ).
 */
#include "evrdma-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int to_ibv_access(const evr_ctx *ctx, unsigned a)
{
	int f = IBV_ACCESS_LOCAL_WRITE;

	if (a & EVR_ACCESS_REMOTE_READ)
		f |= IBV_ACCESS_REMOTE_READ;
	/* a rendezvous source: the message layer binds windows in it */
	if ((a & EVR_ACCESS_REMOTE_READ) && ctx->rndv_access == EVR_RNDV_WINDOW)
		f |= IBV_ACCESS_MW_BIND;
	if (a & EVR_ACCESS_REMOTE_WRITE)
		f |= IBV_ACCESS_REMOTE_WRITE;
	if (a & EVR_ACCESS_REMOTE_ATOMIC)
		f |= IBV_ACCESS_REMOTE_ATOMIC;
	return f;
}

int evr_mr_reg(evr_ctx *ctx, void *addr, size_t len, unsigned access,
	       evr_mr **out)
{
	EVR_OWNER(ctx);
	evr_mr *m;

	if (!ctx || !addr || !len || !out ||
	    (access & ~(EVR_ACCESS_REMOTE_READ | EVR_ACCESS_REMOTE_WRITE |
			EVR_ACCESS_REMOTE_ATOMIC)))
		return -EINVAL;
	if (!ctx->pd) {
		/* not bound yet: registration needs a device, take the
		 * default one (EVR_DEVICE or the first) */
		int err = evr__dev_bind(ctx, NULL);

		if (err)
			return err;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->mr = evr__reg_mr(&ctx->reg, ctx->pd, addr, len,
			    to_ibv_access(ctx, access), "evr_mr_reg");
	if (!m->mr) {
		int err = errno ? -errno : -ENOMEM;

		free(m);
		return err;
	}
	m->ctx = ctx;
	m->access = access;
	evr__list_add_tail(&ctx->mrs, &m->link);
	*out = m;
	return 0;
}

int evr_mr_dereg(evr_mr *m)
{
	EVR_OWNER(m ? m->ctx : NULL);
	if (!m)
		return -EINVAL;
	if (m->busy)
		return -EBUSY;
	evr__list_del(&m->link);
	evr__dereg_mr(&m->ctx->reg, m->mr);
	free(m);
	return 0;
}

void *evr_mr_addr(const evr_mr *m)
{
	return m->mr->addr;
}

size_t evr_mr_len(const evr_mr *m)
{
	return m->mr->length;
}

void evr_mr_rkey(const evr_mr *m, struct evr_rkey *out)
{
	out->addr = (uint64_t)(uintptr_t)m->mr->addr;
	out->len = m->mr->length;
	out->rkey = m->mr->rkey;
}

/* ---- registration cache ---- */

static void reg_free(evr_ctx *ctx, struct evr__reg *r)
{
	evr__list_del(&r->link);
	if (!r->user)
		evr__dereg_mr(&ctx->reg, r->mr);
	free(r);
}

static void reg_trim(evr_ctx *ctx)
{
	unsigned max = ctx->tune.reg_cache_max;
	struct evr__list *pos, *tmp;

	/* the list is in LRU order: oldest first */
	evr__list_for_each_safe(pos, tmp, &ctx->regs)
	{
		struct evr__reg *r =
		    evr__container_of(pos, struct evr__reg, link);

		if (ctx->nregs <= max)
			break;
		if (r->refs == 0) {
			reg_free(ctx, r);
			ctx->nregs--;
		}
	}
}

/* A registration of ours that covers [s, e): in use by another send of
 * those bytes, or cached. */
static struct evr__reg *reg_covering(evr_ctx *ctx, uintptr_t s, uintptr_t e)
{
	struct evr__list *pos;

	evr__list_for_each(pos, &ctx->regs)
	{
		struct evr__reg *r =
		    evr__container_of(pos, struct evr__reg, link);

		if (r->start <= s && e <= r->end)
			return r;
	}
	return NULL;
}

/* The user's region, with at least the access of need, that holds all of
 * [s, e); NULL if none. */
static evr_mr *mr_covering(evr_ctx *ctx, uintptr_t s, uintptr_t e,
			   unsigned need)
{
	struct evr__list *pos;

	evr__list_for_each(pos, &ctx->mrs)
	{
		evr_mr *m = evr__container_of(pos, evr_mr, link);
		uintptr_t ms = (uintptr_t)m->mr->addr;

		if ((m->access & need) == need && ms <= s &&
		    e <= ms + m->mr->length)
			return m;
	}
	return NULL;
}

evr_mr *evr__mr_local(evr_ctx *ctx, const void *addr, size_t len)
{
	uintptr_t s = (uintptr_t)addr;

	if (evr__list_empty(&ctx->mrs) || s + len < s)
		return NULL;
	return mr_covering(ctx, s, s + len, EVR_ACCESS_LOCAL);
}

int evr__reg_get(evr_ctx *ctx, const void *addr, size_t len,
		 struct evr__reg **out)
{
	uintptr_t s = (uintptr_t)addr, e = s + len;
	struct evr__reg *r;
	evr_mr *m;

	/* without windows: one registration per send, never shared */
	if (ctx->rndv_access != EVR_RNDV_REGISTER &&
	    (r = reg_covering(ctx, s, e))) {
		r->refs++;
		/* move to the MRU end */
		evr__list_del(&r->link);
		evr__list_add_tail(&ctx->regs, &r->link);
		*out = r;
		return 0;
	}
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	evr__list_init(&r->link);
	/* a user registration, borrowed: read through a window over the
	 * message (never without one) */
	if (ctx->rndv_access == EVR_RNDV_WINDOW &&
	    (m = mr_covering(ctx, s, e, EVR_ACCESS_REMOTE_READ))) {
		r->user = m;
		r->mr = m->mr;
		r->start = s;
		r->end = e;
		m->busy++;
		r->refs = 1;
		*out = r;
		return 0;
	}
	/* the message's bytes exactly, not the pages around them: the
	 * peer's rkey must not reach the heap beside the message (pinning
	 * is by the page; the device checks remote access by the byte).
	 * With windows the registration itself allows no remote access at
	 * all: only the window bound over the message does. */
	r->start = s;
	r->end = e;
	r->mr =
	    evr__reg_mr(&ctx->reg, ctx->pd, (void *)r->start, r->end - r->start,
			IBV_ACCESS_LOCAL_WRITE |
			    (ctx->rndv_access == EVR_RNDV_REGISTER
				 ? IBV_ACCESS_REMOTE_READ
				 : IBV_ACCESS_MW_BIND),
			"a rendezvous message being sent");
	if (!r->mr) {
		int err = errno ? -errno : -ENOMEM;

		free(r);
		return err;
	}
	r->refs = 1;
	evr__list_add_tail(&ctx->regs, &r->link);
	ctx->nregs++;
	reg_trim(ctx);
	*out = r;
	return 0;
}

void evr__reg_put(evr_ctx *ctx, struct evr__reg *r)
{
	if (r->user) {
		/* borrowed: never cached, the user owns the registration */
		r->user->busy--;
		free(r);
		return;
	}
	if (--r->refs == 0)
		reg_trim(ctx);
}

void evr__reg_cache_fini(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &ctx->regs)
	    reg_free(ctx, evr__container_of(pos, struct evr__reg, link));
	ctx->nregs = 0;
}
