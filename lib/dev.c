/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The device of a ctx: choosing it (by name, by a local address, or the
 * one an rdma_cm id resolved to), and binding to it -- its PD, completion
 * channel and buffer pool.  A ctx serves one device, bound at creation
 * when told which, else lazily by the first cm_id (listen, connect,
 * incoming request) or memory registration.  Once bound, the
 * device_bound hook has the loop watch the device's fds.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* The device context must be librdmacm's own: cm_ids carry that
 * ibv_context, and a QP must be created on a PD of the same context. */
int evr__dev_open_by_name(evr_ctx *ctx, const char *name)
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

int evr__dev_open_by_addr(evr_ctx *ctx, const char *addr)
{
	struct rdma_addrinfo hints = { 0 }, *res = NULL;
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
	err =
	    evr__dev_open_by_name(ctx, ibv_get_device_name(id->verbs->device));
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
void evr__dev_release(evr_ctx *ctx)
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

/* rdma_rxe (vendor 0xffffff) offers type 2 windows but (Linux 6.1) does
 * not make them safe to rely on: it checks a read through a window
 * against the window's registration, not the window's own bounds
 * (t_badpeer read before a message through its window), and 1 MiB reads
 * through a window between two hosts ended in transport retry errors
 * (test/twohost/t_echo).  It gets registrations. */
static bool mw_unusable(const struct ibv_device_attr *a)
{
	return a->vendor_id == 0xffffff && a->vendor_part_id == 0;
}

/* How peers will read rendezvous sources (mr.c): through type 2 memory
 * windows where the device has usable ones, else through registrations
 * made for each send -- without the cache, whose registrations' rkeys
 * would outlive their messages. */
static void rndv_access_pick(evr_ctx *ctx)
{
	const struct ibv_device_attr *a = &ctx->dattr;
	bool mw = a->max_mw > 0 &&
		  (a->device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A |
					  IBV_DEVICE_MEM_WINDOW_TYPE_2B));
	bool usable = mw && !mw_unusable(a);

	if (mw && ctx->tune.mw == EVR_RNDV_WINDOW)
		ctx->rndv_access = EVR_RNDV_WINDOW; /* EVR_MW=inside */
	else if (usable && ctx->tune.mw != EVR_RNDV_REGISTER)
		ctx->rndv_access = EVR_RNDV_WINDOW;
	else
		ctx->rndv_access = EVR_RNDV_REGISTER;
	if (ctx->rndv_access == EVR_RNDV_WINDOW && !usable)
		EVR_WARN(ctx,
			 "EVR_MW=inside: memory windows on %s, which does "
			 "not bound reads to them; a peer can read the "
			 "whole region (for tests only)",
			 ctx->devname);
	if (ctx->rndv_access != EVR_RNDV_REGISTER)
		return;
	EVR_INFO(ctx, "%s: rendezvous sources are registered for each send",
		 !mw	   ? "the device has no type 2 memory windows"
		 : !usable ? "the device's memory windows are not used "
			     "(rdma_rxe)"
			   : "memory windows off (EVR_MW=off)");
	if (ctx->tune.reg_cache_max) {
		EVR_WARN(ctx,
			 "EVR_REG_CACHE=%u ignored without memory "
			 "windows: a cached registration's rkey would "
			 "outlive its message",
			 ctx->tune.reg_cache_max);
		ctx->tune.reg_cache_max = 0;
	}
}

/*
 * Set up everything that belongs to the device: PD, completion channel and
 * buffer pool; then the hook starts watching its fds (loop.c).  verbs is the
 * librdmacm context of a cm_id (lazy binding), or NULL when ctx->verbs was
 * already chosen.  A ctx serves one device; -ENODEV for another one.
 */
int evr__dev_bind(evr_ctx *ctx, struct ibv_context *verbs)
{
	struct ibv_port_attr pattr;
	int err;

	if (ctx->pd)
		return verbs && verbs != ctx->verbs ? -ENODEV : 0;
	if (verbs) {
		err = evr__dev_open_by_name(ctx,
					    ibv_get_device_name(verbs->device));
		if (err)
			return err;
		if (ctx->verbs != verbs)
			return -ENODEV;
	}
	if (!ctx->verbs) {
		err = evr__dev_open_by_name(ctx, NULL);
		if (err)
			return err;
	}
	snprintf(ctx->devname, sizeof(ctx->devname), "%s",
		 ibv_get_device_name(ctx->verbs->device));
	if (ibv_query_device(ctx->verbs, &ctx->dattr))
		return errno ? -errno : -EIO;
	rndv_access_pick(ctx);
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
	/* at once: a ctx with a pd has a pool (its lists), which ctx_free
	 * empties even if the rest of the binding fails */
	err = evr__pool_init(&ctx->pool, ctx->pd, &ctx->reg,
			     EVR_HDR_SIZE + ctx->max_eager, 0);
	if (err)
		return err;
	/* cached rendezvous buffers stay registered: a quarter of a limit */
	if (ctx->memlock != UINT64_MAX)
		ctx->pool.rfree_max =
		    (size_t)EVR__MIN((uint64_t)ctx->pool.rfree_max,
				     ctx->memlock / 4);
	ctx->ch = ibv_create_comp_channel(ctx->verbs);
	if (!ctx->ch)
		return errno ? -errno : -ENOMEM;
	if ((err = evr__set_nonblock(ctx->ch->fd)) ||
	    (err = evr__set_nonblock(ctx->verbs->async_fd)))
		return err;
	err = ctx->hooks.device_bound(ctx);
	if (err)
		return err;
	EVR_INFO(ctx, "ctx on %s, mode %s", ctx->devname,
		 evr_mode_str(ctx->mode));
	return 0;
}
