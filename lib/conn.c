/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Connection lifecycle: QP setup, the flush of queued work onto the QP,
 * failure, graceful close and teardown.
 *
 * A conn's state is one value of enum evr__conn_state (evrdma-int.h draws
 * the graph); evr__conn_to() makes every change, logs it and refuses an
 * illegal one.  What a close does next is decided by evr__conn_step(),
 * run from the run queue whenever something kicks the conn.
 *
 * A conn is freed only when none of its work requests can still produce a
 * completion: its QP is moved to the error state, every posted WR comes
 * back (flushed), and only then are the QP and cm_id destroyed and the
 * last user callback fired.  If the flushes do not arrive within a bound,
 * the user is told anyway (pending callbacks fire with -ECANCELED) and the
 * conn lingers as a zombie, without callbacks, until they do or the ctx is
 * destroyed -- so a stale wr_id can never point at freed memory.
 */
#include "evrdma-int.h"
#include "probe.h"

#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define EVR_FLUSH_BOUND_MS 3000

const char *evr__conn_state_str(enum evr__conn_state s)
{
	static const char *const names[] = {
		[EVR_CS_NEW] = "new",
		[EVR_CS_RESOLVING_ADDR] = "resolving-addr",
		[EVR_CS_RESOLVING_ROUTE] = "resolving-route",
		[EVR_CS_CONNECTING] = "connecting",
		[EVR_CS_ACCEPTING] = "accepting",
		[EVR_CS_ESTABLISHED] = "established",
		[EVR_CS_CLOSING] = "closing",
		[EVR_CS_CLOSING_BYE] = "closing-bye",
		[EVR_CS_FAILED] = "failed",
		[EVR_CS_FLUSHING] = "flushing",
		[EVR_CS_ZOMBIE] = "zombie",
		[EVR_CS_CLOSED] = "closed",
	};

	return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s]
							      : "unknown";
}

/* The transitions evr__conn_to() takes: legal[from] has bit "to" set. */
#define TO(s) (1u << EVR_CS_##s)
static const unsigned legal[] = {
	[EVR_CS_NEW] = TO(RESOLVING_ADDR) | TO(ACCEPTING) | TO(FAILED),
	[EVR_CS_RESOLVING_ADDR] = TO(RESOLVING_ROUTE) | TO(FAILED),
	[EVR_CS_RESOLVING_ROUTE] = TO(CONNECTING) | TO(FAILED),
	[EVR_CS_CONNECTING] = TO(ESTABLISHED) | TO(FAILED),
	[EVR_CS_ACCEPTING] = TO(ESTABLISHED) | TO(FAILED),
	[EVR_CS_ESTABLISHED] = TO(CLOSING) | TO(FAILED),
	[EVR_CS_CLOSING] = TO(CLOSING_BYE) | TO(FLUSHING) | TO(FAILED),
	[EVR_CS_CLOSING_BYE] = TO(FLUSHING) | TO(FAILED),
	[EVR_CS_FAILED] = TO(FLUSHING),
	[EVR_CS_FLUSHING] = TO(ZOMBIE) | TO(CLOSED),
	[EVR_CS_ZOMBIE] = TO(CLOSED),
	[EVR_CS_CLOSED] = 0,
};
#undef TO

/*
 * Every change of c->state comes through here: it is logged (EVR_LOG=debug)
 * and checked against the table above.  An illegal one is a bug of the
 * library: it stops a build with assertions, and is refused and logged
 * in one without (--disable-assert).  Leaving the live states records
 * which one was left (c->ended_in).
 */
void evr__conn_to(evr_conn *c, enum evr__conn_state to)
{
	enum evr__conn_state from = c->state;

	if (!(legal[from] & (1u << to))) {
		EVR_ERR(c->ctx, "conn %p: illegal state change %s -> %s",
			(void *)c, evr__conn_state_str(from),
			evr__conn_state_str(to));
		assert(!"illegal conn state change");
		return;
	}
	EVR_DBG(c->ctx, "conn %p: %s -> %s", (void *)c,
		evr__conn_state_str(from), evr__conn_state_str(to));
	if (from <= EVR_CS_ESTABLISHED && to > EVR_CS_ESTABLISHED)
		c->ended_in = from;
	c->state = to;
	EVR_PROBE3(conn_state, c, (int)from, (int)to);
}

static void on_timer(struct evr__timer *t);
static void on_keepalive(struct evr__timer *t);
static void on_idle(struct evr__timer *t);
static void idle_ask(evr_conn *c);
static bool post_credit_update(evr_conn *c, uint8_t flags);
static int take_and_prepare(evr_conn *c, struct evr__op *op, bool ctrl);

evr_conn *evr__conn_new(evr_ctx *ctx, struct rdma_cm_id *id, bool active,
			const struct evr_conn_opts *opts, bool *counted)
{
	evr_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	/* its timers can then always be armed, from any callback */
	if (evr__timers_reserve(&ctx->timers, EVR__CONN_TIMERS)) {
		free(c);
		return NULL;
	}
	c->cm_kind = EVR_CM_CONN;
	c->ctx = ctx;
	c->refs = 1; /* the ctx's */
	c->id = id;
	c->active = active;
	c->o = *opts;
	c->o.user_data = NULL;
	if (opts->user_data && opts->user_len) {
		c->ulen = EVR__MIN(opts->user_len, sizeof(c->udata));
		memcpy(c->udata, opts->user_data, c->ulen);
	}
	c->recv_depth = ctx->o.recv_depth;
	evr__list_init(&c->sendq);
	evr__list_init(&c->ctrlq);
	evr__list_init(&c->rndv_wait);
	evr__list_init(&c->rxq);
	evr__list_init(&c->rpc_reqs);
	evr__list_init(&c->repost);
	evr__list_init(&c->early);
	evr__list_init(&c->work_link);
	evr__list_init(&c->flush_link);
	evr__timer_init(&c->timer, on_timer);
	evr__timer_init(&c->ka, on_keepalive);
	evr__timer_init(&c->idle, on_idle);
	if (opts->keepalive_ms > 0)
		c->ka_idle = opts->keepalive_ms / 1000.0;
	else if (opts->keepalive_ms == 0)
		c->ka_idle = ctx->o.keepalive_ms / 1000.0;
	c->ka_timeout = ctx->o.keepalive_timeout_ms / 1000.0;
	evr__list_add_tail(&ctx->conns, &c->link);
	ctx->st.conns++;
	/* in the load until evr__conn_release: a placement's count, taken
	 * over, or a count of its own */
	if (counted && *counted)
		*counted = false;
	else
		evr__load_add(ctx, 1);
	return c;
}

void evr__conn_fill_hs(const evr_conn *c, struct evr__hs *hs)
{
	memset(hs, 0, sizeof(*hs));
	hs->recv_depth = (uint16_t)c->recv_depth;
	hs->init_window = c->lend_init;
	hs->max_eager = c->ctx->max_eager;
	hs->max_msg = c->ctx->o.max_msg_size;
}

void evr__conn_set_peer(evr_conn *c, const struct evr__hs *hs)
{
	c->peer_depth = hs->recv_depth;
	c->peer_max_eager = hs->max_eager;
	c->eager = EVR__MIN(hs->max_eager, c->ctx->max_eager);
	c->peer_max_msg = hs->max_msg;
	/* a peer that lends out of a shared queue starts us small and grows
	 * our window when we tell it we want more (EVR_F_WANT) */
	c->peer_windowed = evr__hs_windowed(hs);
	if (c->peer_windowed)
		evr__credit_init_lent(&c->cr, hs->recv_depth, hs->init_window,
				      c->recv_depth);
	else
		evr__credit_init(&c->cr, hs->recv_depth, c->recv_depth);
	if (c->srq)
		evr__credit_set_window(&c->cr, c->bank.window);
}

/* The end of a send completion, once the SQ has counted it: a failure
 * fails the conn, a success may let a closing conn go on. */
static void send_wc_end(evr_conn *c, const struct ibv_wc *wc, int status)
{
	if (status)
		/* after the peer's BYE, a send that fails (a keepalive
		 * probe that met its QP gone) is the peer leaving as it
		 * said it would */
		evr__conn_fail(c, c->peer_bye ? -ESHUTDOWN
					      : evr__wc_conn_errno(wc->status));
	else if (!evr__conn_open(c))
		evr__conn_kick(c);
}

/*
 * The CQ's entry for every send-side op of a conn (its head's done): the SQ
 * completes every op posted up to this one, in order; an error fails the
 * conn; a closing conn may be done draining; and ops that waited for room
 * in the SQ (nothing else would flush them, e.g. one-sided writes beyond
 * the SQ depth) go now.
 */
static void send_wc(struct evr__wr *w, const struct ibv_wc *wc)
{
	struct evr__op *op = evr__op_of(w);
	evr_conn *c = op->h.conn;
	int status = evr__wc_errno(wc->status);

	c->last_act = ev_now(c->ctx->loop); /* a sign of life (keepalive) */
	evr__sq_complete(&c->sq, op, status);
	send_wc_end(c, wc, status);
	if (!evr__list_empty(&c->sendq) || !evr__list_empty(&c->ctrlq))
		evr__conn_dirty(c);
}

/* The completion of a WR posted without an op: never signaled, so an
 * error, or a flush, whose conn fails or is failing (as send_wc). */
static void direct_wc(struct evr__wr *w, const struct ibv_wc *wc)
{
	evr_conn *c = evr__container_of(w, evr_conn, direct_wr);
	int status = evr__wc_errno(wc->status);

	c->last_act = ev_now(c->ctx->loop);
	evr__sq_complete_direct(&c->sq, status);
	send_wc_end(c, wc, status);
}

struct evr__op *evr__conn_op_new(evr_conn *c, uint8_t kind,
				 const struct evr__op_class *cls)
{
	struct evr__op *op = evr__op_alloc(c->ctx);

	if (!op)
		return NULL;
	op->h.conn = c;
	op->h.done = send_wc;
	op->kind = kind;
	op->cls = cls;
	return op;
}

static void timer_start(evr_conn *c, unsigned ms)
{
	evr__ctx_timer_after(c->ctx, &c->timer, ms / 1000.0);
}

/* A buffer that reached no message processing (parked before the conn
 * was up, or never consumed in the books): back where it came from. */
static void drop_unconsumed(evr_conn *c, struct evr__buf *b)
{
	if (c->srq)
		evr__srq_put_back(c->ctx, b);
	else
		evr__pool_put(&c->ctx->pool, b);
}

/*
 * Re-posting the buffers on c->repost to the ctx's shared receive queue
 * takes two steps.  srq_count(): each was consumed by a message of c
 * (evr__bank_consume) and is c's until the bank takes it back: c's peer
 * gets its credit back, two when its window grows, none when it shrinks
 * (bank.h).  srq_post(): the buffers go to the SRQ, at once or, set
 * aside on ctx->srq_ready (counted unposted), with the next batch
 * (evr__conn_flush).  A conn on its way out is owed credits no one will
 * announce; the bank takes them back with the conn (evr__bank_detach).
 */
static void srq_count(evr_conn *c, struct evr__list *counted, bool later)
{
	evr_ctx *ctx = c->ctx;
	struct evr__buf *b;

	while ((b = evr__buf_pop(&c->repost))) {
		ctx->bank.unposted += later;
		evr__bank_repost(&ctx->bank, &c->bank, &c->cr, b->update);
		evr__list_add_tail(counted, evr__buf_link(b));
	}
	c->nrepost = 0;
}

/* Post the counted buffers.  One the SRQ refuses leaves the pool, and c,
 * the conn that posted (NULL: none), fails: the credits counted for it are
 * never announced. */
static void srq_post(evr_ctx *ctx, struct evr__list *counted, evr_conn *c)
{
	struct ibv_recv_wr wrs[64], *bad;
	struct ibv_sge sges[64];
	unsigned n, i;
	int rc, err = 0;

	while (!evr__list_empty(counted)) {
		struct evr__buf *b;

		for (n = 0; n < 64 && (b = evr__buf_pop(counted)); n++) {
			evr__srq_buf_prep(ctx, b);
			evr__recv_wr(&wrs[n], &sges[n], b);
			if (n)
				wrs[n - 1].next = &wrs[n];
		}
		rc = evr__srq_post(ctx, wrs, &bad);
		for (i = 0; i < n && !(rc && &wrs[i] == bad); i++)
			;
		ctx->st.recv_wrs += i;
		if (!rc)
			continue;
		EVR_ERR(ctx, "ibv_post_srq_recv failed: %s", evr_strerror(rc));
		for (; i < n; i++) { /* lost to the shared queue */
			ctx->bank.posted--;
			ctx->bank.total--;
			evr__pool_put(&ctx->pool, evr__recv_wr_buf(&wrs[i]));
		}
		err = rc;
	}
	if (err && c)
		evr__conn_fail(c, err);
}

/* The batch set aside, if any, goes to the SRQ; c as for srq_post(). */
static void srq_post_ready(evr_ctx *ctx, evr_conn *c)
{
	if (!ctx->bank.unposted)
		return;
	ctx->bank.unposted = 0; /* posted, or lost and uncounted */
	srq_post(ctx, &ctx->srq_ready, c);
}

static void post_srq_recvs(evr_conn *c)
{
	struct evr__list counted;

	evr__list_init(&counted);
	srq_count(c, &counted, false);
	srq_post(c->ctx, &counted, c);
	/* The credits these make owed go out with the next flush of c; a
	 * conn not up yet is flushed when it is (evr__conn_established). */
}

void evr__conn_recv_put(evr_conn *c, struct evr__buf *b)
{
	if (!c->srq) {
		evr__pool_put(&c->ctx->pool, b);
		return;
	}
	evr__list_add_head(&c->repost, evr__buf_link(b));
	c->nrepost++;
	if (c->state == EVR_CS_CLOSED)
		post_srq_recvs(c); /* in limbo: off the run queue */
	else
		evr__conn_dirty(c);
}

/* Post the receive buffers on c->repost as one chain.  Re-posted buffers
 * become credits owed to the peer (announce); the initial ones are not:
 * the handshake's recv_depth already told the peer about them. */
static void post_qp_recvs(evr_conn *c, bool announce);
static void post_recvs(evr_conn *c, bool announce)
{
	if (c->srq) {
		post_srq_recvs(c);
		return;
	}
	post_qp_recvs(c, announce);
}

static void post_qp_recvs(evr_conn *c, bool announce)
{
	struct ibv_recv_wr wrs[64], *bad;
	struct ibv_sge sges[64];
	unsigned n = 0;
	int rc;

	while (!evr__list_empty(&c->repost)) {
		struct evr__buf *b;

		if (!evr__conn_can_post(c)) {
			evr__pool_put(&c->ctx->pool, evr__buf_pop(&c->repost));
			continue;
		}
		for (n = 0; n < 64 && (b = evr__buf_pop(&c->repost)); n++) {
			b->h.conn = c;
			b->h.done = c->ctx->hooks.recv_done;
			evr__recv_wr(&wrs[n], &sges[n], b);
			if (n)
				wrs[n - 1].next = &wrs[n];
		}
		rc = evr__post_recv(c->qp, wrs, &bad);
		if (rc) {
			unsigned i;

			EVR_ERR(c->ctx, "ibv_post_recv failed: %s",
				evr_strerror(rc));
			for (i = 0; i < n; i++) {
				if (&wrs[i] == bad)
					break;
				c->recv_posted++;
			}
			for (; i < n; i++)
				evr__pool_put(&c->ctx->pool,
					      evr__recv_wr_buf(&wrs[i]));
			evr__conn_fail(c, rc);
			continue;
		}
		c->recv_posted += n;
		c->ctx->st.recv_wrs += n;
		if (announce)
			evr__credit_reposted(&c->cr, n);
	}
	c->nrepost = 0;
}

static bool reap_number(evr_ctx *ctx, uint32_t qp_num);

/* CQEs a conn's QP may need: its SQ, and its receives -- its own queue,
 * or what the bank lends its peer at most, plus one receive of the shared
 * queue flushed when the QP goes down. */
static unsigned cq_need(const evr_conn *c)
{
	return c->ctx->o.sq_depth + c->recv_depth + (c->srq ? 1 : 0);
}

/*
 * Lend a new conn's peer its first window out of the shared queue,
 * growing the pool first if it is short.  What we announce depends on the
 * peer: one that connects to us lending all at once (window 0 in its
 * request: a receive queue per connection, or a version before windows)
 * gets a fixed window of win_init, announced as our depth; everyone else
 * gets win_max as the largest window and win_init now (docs/credits.md,
 * "Mixed versions").
 */
static int srq_admit(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	struct evr__bank *bk = &ctx->bank;
	uint64_t lim;

	c->srq = true;
	if (!c->active && !c->req_window) {
		c->recv_depth = bk->cfg.win_init;
		c->lend_init = 0;
	} else {
		c->recv_depth = bk->cfg.win_max;
		c->lend_init = (uint16_t)bk->cfg.win_init;
	}
	if (evr__bank_spare(bk) < bk->cfg.win_init) {
		srq_post_ready(ctx, NULL);
		if (evr__bank_spare(bk) < bk->cfg.win_init)
			evr__srq_refill(ctx);
	}
	if (evr__bank_admit(bk, &c->bank) == 0) {
		ctx->srq_refusing = false;
		if (!c->lend_init)
			evr__bank_fix_window(&c->bank);
		evr__credit_set_window(&c->cr, c->bank.window);
		return 0;
	}
	c->srq = false;		 /* nothing lent: nothing to take back */
	if (ctx->srq_refusing) { /* said at the first of this run */
		EVR_DBG(ctx, "no receive buffers for a new connection");
		return -ENOBUFS;
	}
	ctx->srq_refusing = true;
	lim = ctx->memlock;
	EVR_WARN(ctx,
		 "no receive buffers for a new connection: the shared pool "
		 "lends %u of its %u (at most %u: evr_ctx_opts.srq_buffers%s); "
		 "refusing until a connection gets its window again (each "
		 "counted in evr_stats.srq_refused)",
		 bk->lent, bk->total, bk->cfg.limit,
		 lim != UINT64_MAX && !ctx->o.srq_buffers
		     ? ", and half the locked-memory limit, ulimit -l"
		     : "");
	return -ENOBUFS;
}

/* The send capabilities a QP is asked for, the first a device accepts:
 * header and payload of a message up to 120 bytes inline in two pieces
 * (a 64-byte message and its header fit), then one piece of 64, then no
 * inline data. */
static const struct {
	uint32_t sges, inl;
} qp_caps[] = { { EVR__WR_SGES, 128 }, { 1, 64 }, { 1, 0 } };

int evr__conn_setup_qp(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	struct ibv_qp_init_attr a;
	unsigned need, i;
	int err;

	err = evr__srq_open(ctx);
	if (err)
		return err;
	if (ctx->srq && (err = srq_admit(c)))
		return err;
	need = cq_need(c);
	err = evr__cq_attach(ctx, need, &c->cq);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_context = c;
	a.send_cq = a.recv_cq = c->cq->cq;
	a.qp_type = IBV_QPT_RC;
	a.srq = ctx->srq;
	a.cap.max_send_wr = ctx->o.sq_depth;
	a.cap.max_recv_wr = c->srq ? 0 : c->recv_depth;
	a.cap.max_recv_sge = c->srq ? 0 : 1;
	/* Small messages go inline, header and payload gathered by the post
	 * (split ops, sq.c): ask for that, then for less, then for none. */
	for (i = 0; i < sizeof(qp_caps) / sizeof(qp_caps[0]); i++) {
		a.cap.max_send_sge = qp_caps[i].sges;
		a.cap.max_inline_data = qp_caps[i].inl;
		if (!rdma_create_qp(c->id, ctx->pd, &a))
			break;
		err = errno ? -errno : -ENOMEM;
	}
	if (i == sizeof(qp_caps) / sizeof(qp_caps[0])) {
		EVR_ERR(ctx, "rdma_create_qp failed: %s", evr_strerror(err));
		evr__cq_detach(ctx, c->cq, need);
		c->cq = NULL;
		return err;
	}
	c->qp = c->id->qp;
	evr__sq_init(&c->sq, c->qp, ctx->o.sq_depth, ctx->o.signal_interval,
		     evr__op_complete, &ctx->st, &ctx->chain);
	c->direct_wr.conn = c;
	c->direct_wr.done = direct_wc;
	/* what it got (rdma_create_qp wrote it back): no more than asked */
	c->sq.max_inline = EVR__MIN(a.cap.max_inline_data, qp_caps[i].inl);
	c->sq.sge2 = a.cap.max_send_sge >= EVR__WR_SGES &&
		     qp_caps[i].sges >= EVR__WR_SGES;
	if (c->srq) {
		/* its receives' completions name it by QP number only */
		err = evr__qpmap_put(&ctx->qpmap, c->qp->qp_num, c);
		if (err == -EEXIST && reap_number(ctx, c->qp->qp_num))
			err = evr__qpmap_put(&ctx->qpmap, c->qp->qp_num, c);
		if (err)
			return err; /* teardown destroys the QP */
		c->qp_num = c->qp->qp_num;
		return 0;
	}
	for (i = 0; i < c->recv_depth; i++) {
		struct evr__buf *b = evr__pool_get(&ctx->pool);

		if (!b)
			return -ENOMEM; /* teardown returns what was taken */
		evr__list_add_head(&c->repost, evr__buf_link(b));
	}
	post_recvs(c, false);
	return c->state == EVR_CS_FAILED ? c->error : 0;
}

static void parked_process(evr_conn *c)
{
	struct evr__buf *b;

	while ((b = evr__buf_pop(&c->early))) {
		if (evr__conn_up(c)) {
			struct ibv_wc wc;

			memset(&wc, 0, sizeof(wc));
			wc.status = IBV_WC_SUCCESS;
			wc.byte_len = b->byte_len;
			wc.opcode = (enum ibv_wc_opcode)b->opcode;
			wc.imm_data = b->imm;
			wc.wc_flags = b->wc_flags;
			if (!c->srq)
				c->recv_posted++; /* recv_done counts it off */
			c->ctx->hooks.recv_done(&b->h, &wc);
		} else {
			drop_unconsumed(c, b);
		}
	}
}

void evr__conn_established(evr_conn *c)
{
	evr__ctx_timer_stop(c->ctx, &c->timer);
	evr__conn_to(c, EVR_CS_ESTABLISHED);
	c->last_act = ev_now(c->ctx->loop);
	if (c->ka_idle > 0 && c->ka_timeout > 0) {
		/* tick at half the idle time: a probe goes out between 1 and
		 * 1.5 idle times after the last sign of life */
		evr__ctx_timer_after(c->ctx, &c->ka, c->ka_idle / 2);
	}
	if (c->peer_windowed && c->ctx->o.window_idle_ms != UINT_MAX)
		evr__ctx_timer_after(c->ctx, &c->idle,
				     c->ctx->o.window_idle_ms / 1000.0);
	EVR_DBG(c->ctx, "conn %p established (peer depth %u, eager %u)",
		(void *)c, c->peer_depth, c->peer_max_eager);
	if (c->o.on_connect)
		c->o.on_connect(c, 0, c->o.arg);
	parked_process(c);
	evr__conn_dirty(c);
}

/* The CQ of these conns broke (the cq_failed hook). */
void evr__conn_fail_cq(evr_ctx *ctx, struct evr__cq *cq, int err)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &ctx->conns)
	{
		evr_conn *c = evr__container_of(pos, evr_conn, link);

		if (c->cq == cq)
			evr__conn_fail(c, err);
	}
}

/* The conn ends now with err (the first reason given is kept); its next
 * step tears it down.  A conn already on its way out is only kicked. */
void evr__conn_fail(evr_conn *c, int err)
{
	if (c->state >= EVR_CS_FAILED) {
		evr__conn_kick(c);
		return;
	}
	if (!c->error)
		c->error = err;
	EVR_DBG(c->ctx, "conn %p fails in state %s: %s", (void *)c,
		evr__conn_state_str(c->state), evr_err_name(err));
	evr__conn_to(c, EVR_CS_FAILED);
	evr__conn_kick(c);
}

int evr_conn_close(evr_conn *c, unsigned flags)
{
	EVR_CONN_OWNER(c);
	if (!c || (flags & ~EVR_CLOSE_ABORT))
		return -EINVAL;
	if (!evr__conn_open(c))
		return -EALREADY;
	if (c->state != EVR_CS_ESTABLISHED || (flags & EVR_CLOSE_ABORT)) {
		/* still connecting: on_connect reports -ECANCELED; an abort:
		 * on_close and every pending op report -ECANCELED */
		c->error = -ECANCELED;
		evr__conn_to(c, EVR_CS_FAILED);
	} else {
		evr__conn_to(c, EVR_CS_CLOSING);
		timer_start(c, c->ctx->o.close_timeout_ms);
	}
	evr__conn_kick(c);
	return 0;
}

static void seal_complete(struct evr__op *op, int status)
{
	(void)status; /* flushed: that is all it is for */
	evr__op_free(op->h.conn->ctx, op);
}

static const struct evr__op_class seal_class = { seal_complete, NULL, NULL,
						 NULL };

/*
 * The QP is in the error state: every WR still posted comes back flushed,
 * and the flush waits for them all (c->sq.outstanding).  But quiet
 * messages at the tail of the SQ that the device had already executed
 * come back with no completion at all (sq.c).  A signaled WR posted
 * behind them now is flushed, and its completion completes them
 * (evr__sq_complete) -- as a verbs consumer drains a QP.  Tried at each
 * step of the flush until the marker is posted: an SQ still full waits
 * for the flushes of what fills it.  A device that refuses the WR leaves
 * this flush to its time bound (on_timer), and the ctx signals every
 * batch's end from then on.
 */
static void seal_sq(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	struct evr__op *op;
	int err;

	if (!c->qp_err || !evr__sq_open_tail(&c->sq) || c->sq.nbatch ||
	    evr__sq_room(&c->sq) == 0)
		return;
	op = evr__conn_op_new(c, EVR_OP_DRAIN, &seal_class);
	if (!op) {
		err = -ENOMEM;
	} else {
		op->opcode = IBV_WR_SEND; /* no SGE: nothing to send */
		evr__sq_add(&c->sq, op);
		err = evr__sq_commit(&c->sq); /* signals it: not quiet */
	}
	if (err) {
		EVR_WARN(ctx,
			 "qp %u: no marker posted behind its quiet sends "
			 "(%s): its flush waits %d ms; every send is signaled "
			 "from now on",
			 c->qp->qp_num, evr_strerror(err), EVR_FLUSH_BOUND_MS);
		ctx->quiet_off = true;
	}
}

/*
 * FAILED or a drained graceful close -> FLUSHING: tell the peer (if it may
 * think itself connected: we accepted, or were connected), move the QP to
 * the error state so that every WR posted comes back, and bound the wait
 * for them.
 */
static void start_flushing(evr_conn *c)
{
	struct ibv_qp_attr attr;

	evr__conn_to(c, EVR_CS_FLUSHING);
	if (c->id && c->ended_in >= EVR_CS_ACCEPTING && rdma_disconnect(c->id))
		EVR_DBG(c->ctx, "rdma_disconnect: %s", evr_err_name(-errno));
	if (!c->qp)
		return;
	memset(&attr, 0, sizeof(attr));
	attr.qp_state = IBV_QPS_ERR;
	if (ibv_modify_qp(c->qp, &attr, IBV_QP_STATE))
		EVR_WARN(c->ctx, "moving qp %u to the error state failed",
			 c->qp->qp_num);
	else
		c->qp_err = true; /* quiet sends may need a seal (seal_sq) */
	timer_start(c, EVR_FLUSH_BOUND_MS);
}

static void fail_queued(evr_conn *c, int status)
{
	struct evr__op *op;

	while ((op = evr__list_pop_entry(&c->ctrlq, struct evr__op, h.link)))
		evr__op_complete(op, status);
	while ((op = evr__list_pop_entry(&c->sendq, struct evr__op, h.link))) {
		if (op->credit)
			c->nsendq_credit--;
		evr__op_unqueue(c, op);
		evr__op_complete(op, status);
	}
	c->ctx->hooks.conn_teardown(c, status);
}

/* The user's last callback: on_close if on_connect(0) was delivered,
 * else on_connect with the error; none for a conn never handed out. */
static void notify_user(evr_conn *c)
{
	int status = c->error;

	if (c->ended_in == EVR_CS_NEW)
		return;
	if (evr__conn_was_up(c)) {
		if (c->o.on_close)
			c->o.on_close(c, status, c->o.arg);
	} else {
		if (!status)
			status = -ECANCELED;
		if (c->o.on_connect)
			c->o.on_connect(c, status, c->o.arg);
	}
}

/* The last of a conn: held messages outlive it, the bank takes back what
 * it lent (the buffers held become orphans), its CQ reservation goes. */
static void conn_free(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;

	ctx->hooks.conn_release(c);
	if (c->qp_num)
		evr__qpmap_del(&ctx->qpmap, c->qp_num);
	if (c->srq) {
		evr__bank_detach(&ctx->bank, &c->bank);
		srq_post_ready(ctx, NULL); /* the last conn may be gone */
	}
	evr__runq_forget(c);
	evr__timers_unreserve(&ctx->timers, EVR__CONN_TIMERS);
	evr__conn_unref(c); /* the ctx's; evr_conn_ref()'s may outlive it */
}

/*
 * Release a conn whose WRs have all come back (or never will: a zombie,
 * or the ctx going).  With a shared receive queue its QP's completions
 * are not all accounted for yet: receives it took from the SRQ complete
 * on its CQ, possibly after the flushes of its sends, and no event says
 * when the last one came.  A completion made before rdma_destroy_qp()
 * returned is in the CQ by then, so once the CQ has been polled empty
 * after it (cq->drains moves) nothing more of this QP can come: until
 * then the conn waits in ctx->limbo, still in the QP map and the bank, so
 * that a late message is counted against it (evr__conn_reap).
 */
static void conn_release(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	struct evr__buf *b;
	bool limbo = false;

	/* Some providers (mlx4, mlx5) take a QP's completions out of its
	 * CQ when it is destroyed, SRQ receives included: take them first.
	 * Its QP has been in the error state since the flush began. */
	if (c->qp && c->srq && c->cq && !ctx->destroying)
		evr__cq_poll_empty(ctx, c->cq);
	evr__conn_to(c, EVR_CS_CLOSED);
	evr__ctx_timer_stop(ctx, &c->timer);
	evr__ctx_timer_stop(ctx, &c->ka);
	evr__ctx_timer_stop(ctx, &c->idle);
	if (c->qp) {
		rdma_destroy_qp(c->id);
		c->qp = NULL;
		if (c->srq && c->cq && !c->cq->broken) {
			c->limbo_drains = c->cq->drains;
			limbo = true;
		}
	}
	if (c->id) {
		rdma_destroy_id(c->id);
		c->id = NULL;
	}
	/* its CQ room goes now: a late completion of the QP is one the CQ
	 * already holds (the reservation keeps 20 % spare anyway) */
	if (c->cq)
		evr__cq_detach(ctx, c->cq, cq_need(c));
	while ((b = evr__buf_pop(&c->early)))
		drop_unconsumed(c, b);
	if (c->srq)
		post_srq_recvs(c);
	while ((b = evr__buf_pop(&c->repost)))
		evr__pool_put(&ctx->pool, b);
	evr__runq_forget(c);
	evr__list_del(&c->link);
	ctx->st.conns--;
	evr__load_add(ctx, -1);
	if (limbo) {
		evr__list_add_tail(&ctx->limbo, &c->link);
		return;
	}
	conn_free(c);
}

/* A new QP got the number of one whose conn is still in limbo: the old
 * QP is gone, so its CQ, polled empty now, holds nothing more of it.
 * True when the number is free again. */
static bool reap_number(evr_ctx *ctx, uint32_t qp_num)
{
	evr_conn *old = evr__qpmap_get(&ctx->qpmap, qp_num);

	if (!old || old->state != EVR_CS_CLOSED)
		return false;
	if (!old->cq->broken)
		evr__cq_poll_empty(ctx, old->cq);
	evr__list_del(&old->link);
	conn_free(old);
	return true;
}

void evr__conn_reap(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &ctx->limbo)
	{
		evr_conn *c = evr__container_of(pos, evr_conn, link);

		if (c->cq->drains == c->limbo_drains && !c->cq->broken)
			evr__cq_poll_empty(ctx, c->cq);
		if (c->cq->drains == c->limbo_drains && !c->cq->broken)
			continue; /* cannot be: a poll until empty moves it */
		evr__list_del(&c->link);
		conn_free(c);
	}
	evr__srq_refill(ctx);
}

/*
 * A receive of the shared queue completed.  Its conn is the one that owns
 * the QP the completion names; the message layer takes it from there.  A
 * receive the QP took and then flushed, or one whose message failed, goes
 * straight back to the queue: the bank never counted it consumed.
 */
void evr__conn_srq_recv_done(struct evr__wr *w, const struct ibv_wc *wc)
{
	evr_ctx *ctx = w->srq_ctx;
	struct evr__buf *b = evr__buf_of(w);
	evr_conn *c = evr__qpmap_get(&ctx->qpmap, wc->qp_num);

	if (wc->status != IBV_WC_SUCCESS) {
		evr__srq_put_back(ctx, b);
		if (c && wc->status != IBV_WC_WR_FLUSH_ERR) {
			EVR_WARN(ctx,
				 "conn %p: receive failed (%s): the message "
				 "does not fit the receive buffer, or is "
				 "invalid",
				 (void *)c, ibv_wc_status_str(wc->status));
			evr__conn_fail(c, -EPROTO);
		}
		return;
	}
	if (!c) {
		EVR_ERR(ctx, "a receive completed on qp %u, which is not ours",
			wc->qp_num);
		evr__srq_put_back(ctx, b);
		return;
	}
	w->conn = c;
	if (c->state == EVR_CS_CLOSED) {
		/* in limbo: a message that landed before the QP went */
		if (evr__bank_consume(&ctx->bank, &c->bank, false))
			evr__srq_put_back(ctx, b);
		else
			evr__conn_recv_put(c, b);
		return;
	}
	ctx->hooks.recv_done(w, wc);
}

/* Orphan the posted ops: their callbacks fire now with -ECANCELED, their
 * memory stays until the flush completions come (or the ctx goes).  A
 * zero-copy echo's (msg.c held_src) is the user's held receive buffer,
 * which the callback may release, and which may then be filled again
 * while its WR waits for its flush: harmless, as the QP is in the error
 * state (start_flushing) and sends nothing more.  A send from a region of
 * the user's (msg.c user_src) keeps the region busy until that flush. */
static void orphan_posted(evr_conn *c)
{
	struct evr__list *pos;

	evr__list_for_each(pos, &c->sq.posted)
	{
		struct evr__op *op =
		    evr__list_entry(pos, struct evr__op, h.link);

		if (op->cb) {
			evr_op_cb cb = op->cb;

			op->cb = NULL;
			cb(c, -ECANCELED, op->arg);
		}
	}
}

/* Posted WRs a graceful close waits for: all but credit updates, which a
 * peer that keeps sending keeps calling for, and quiet messages, whose
 * completions come with the BYE's (sq.c). */
static bool sq_busy(const evr_conn *c)
{
	const struct evr__list *pos;

	evr__list_for_each(pos, &c->sq.posted)
	{
		const struct evr__op *op =
		    evr__container_of(pos, struct evr__op, h.link);

		if (!op->quiet &&
		    (op->kind != EVR_OP_CTRL || op->ctrl_type != EVR_T_CREDIT))
			return true;
	}
	return c->sq.nbatch > 0;
}

static void ctrl_complete(struct evr__op *op, int status)
{
	(void)status; /* a failed one fails the conn (send_wc) */
	if (op->u.ctrl.buf)
		evr__pool_put(&op->h.conn->ctx->pool, op->u.ctrl.buf);
	evr__op_free(op->h.conn->ctx, op);
}

/* A pool buffer carries a control message: header, and the FIN's body. */
static int ctrl_prepare(evr_conn *c, struct evr__op *op)
{
	evr_ctx *ctx = c->ctx;
	struct evr__hdr h = { 0 };
	struct evr__buf *b = evr__pool_get(&ctx->pool);
	uint32_t len;

	if (!b)
		return -ENOMEM;
	h.type = op->ctrl_type;
	h.credits = evr__credit_piggyback(&c->cr);
	if (op->ctrl_type == EVR_T_RNDV_FIN) {
		h.len = EVR_RNDV_FIN_SIZE;
		evr__rndv_fin_encode(b->data + EVR_HDR_SIZE, op->u.ctrl.fin_id,
				     op->u.ctrl.fin_status);
	} else if (op->ctrl_type == EVR_T_CANCEL) {
		h.len = EVR_CALL_ID_SIZE; /* the call's id, in fin_id */
		evr__call_id_encode(b->data + EVR_HDR_SIZE, op->u.ctrl.fin_id);
	} else if (op->ctrl_flags == EVR_F_WANT) {
		h.flags = EVR_F_WANT;
	} else if (op->ctrl_flags == EVR_F_GIVE) {
		/* all but the reserve and one, now that this update has its
		 * credit (credits that came since the tick included); none left
		 * makes it a plain update */
		uint32_t g = evr__credit_idle_excess(&c->cr);

		if (g) {
			h.flags = EVR_F_GIVE;
			h.len = EVR_GIVE_SIZE;
			evr__give_encode(b->data + EVR_HDR_SIZE, g);
			c->cr.avail -= g;
			c->gave_back = true;
			ctx->st.window_given += g;
		}
	}
	evr__hdr_encode(b->data, &h);
	len = EVR_HDR_SIZE + h.len;
	op->u.ctrl.buf = b;
	evr__op_set_send(op, b, len, &c->sq);
	return 0;
}

static const struct evr__op_class ctrl_class = { ctrl_complete, ctrl_prepare,
						 NULL, NULL };

/* A control message of c (EVR_T_CREDIT, _RNDV_FIN, _BYE): it takes a
 * credit and may take the last one.  NULL when out of memory. */
struct evr__op *evr__ctrl_op_new(evr_conn *c, uint8_t type)
{
	struct evr__op *op = evr__conn_op_new(c, EVR_OP_CTRL, &ctrl_class);

	if (!op)
		return NULL;
	op->ctrl_type = type;
	op->ctrl_flags = 0;
	op->credit = op->ctrl = true;
	return op;
}

/* Queue our BYE; true when queued.  It goes when a credit allows (a
 * control message may take the last one), like everything else the close
 * waits for, within close_timeout_ms. */
static bool queue_bye(evr_conn *c)
{
	struct evr__op *op;

	if (!evr__conn_can_post(c))
		return false;
	op = evr__ctrl_op_new(c, EVR_T_BYE);
	if (!op)
		return false;
	evr__list_add_tail(&c->ctrlq, &op->h.link);
	evr__conn_dirty(c);
	return true;
}

/* A graceful close still has work on the wire: our sends, and the reads
 * and FINs already under way (messages the peer keeps sending do not hold
 * the close open: no new reads start, see rx_start_reads, and what waits
 * behind them is dropped at teardown). */
static bool draining(const evr_conn *c)
{
	return !evr__list_empty(&c->sendq) || !evr__list_empty(&c->ctrlq) ||
	       sq_busy(c) || !evr__list_empty(&c->rndv_wait);
}

/*
 * One step of a conn's state machine, run from evr__ctx_progress() when
 * the conn was kicked:
 *   CLOSING      drained: queue our BYE (CLOSING_BYE), or if it cannot go,
 *                start flushing;
 *   CLOSING_BYE  the BYE and everything before it completed: flush;
 *   FAILED       flush at once;
 *   FLUSHING     fail what is queued; once every posted WR came back, the
 *   ZOMBIE       user's last callback (not again for a zombie), release.
 */
void evr__conn_step(evr_conn *c)
{
	switch (c->state) {
	case EVR_CS_CLOSING:
		if (draining(c))
			return; /* the flush and completions kick us again */
		/* Say goodbye: the peer then knows that all we sent has
		 * arrived, and reports -ESHUTDOWN rather than the
		 * -ECONNRESET of a peer that vanished. */
		if (queue_bye(c)) {
			evr__conn_to(c, EVR_CS_CLOSING_BYE);
			return; /* its completion kicks us */
		}
		start_flushing(c);
		break;
	case EVR_CS_CLOSING_BYE:
		if (draining(c))
			return;
		start_flushing(c);
		break;
	case EVR_CS_FAILED:
		start_flushing(c);
		break;
	case EVR_CS_FLUSHING:
	case EVR_CS_ZOMBIE:
		break;
	default:
		return;
	}

	fail_queued(c, c->error ? c->error : -ECANCELED);
	if (!evr__list_empty(&c->repost))
		post_recvs(c, true); /* back to the pool: QP in error */
	if (c->state == EVR_CS_FLUSHING)
		seal_sq(c);
	if (c->sq.outstanding || c->recv_posted)
		return; /* their flushes kick us */
	if (c->state == EVR_CS_FLUSHING)
		notify_user(c);
	conn_release(c);
}

static void on_timer(struct evr__timer *t)
{
	evr_conn *c = evr__container_of(t, evr_conn, timer);
	evr_ctx *ctx = c->ctx;

	switch (c->state) {
	case EVR_CS_RESOLVING_ADDR:
	case EVR_CS_RESOLVING_ROUTE:
	case EVR_CS_CONNECTING:
	case EVR_CS_ACCEPTING:
		EVR_INFO(ctx, "connect timed out in state %s",
			 evr__conn_state_str(c->state));
		evr__conn_fail(c, -ETIMEDOUT);
		break;
	case EVR_CS_CLOSING:
	case EVR_CS_CLOSING_BYE:
		EVR_WARN(ctx, "graceful close timed out: aborting");
		evr__conn_fail(c, -ETIMEDOUT);
		break;
	case EVR_CS_FLUSHING:
		if (!c->sq.outstanding && !c->recv_posted)
			break;
		EVR_WARN(ctx,
			 "qp %u: %u send / %u receive WRs not flushed after "
			 "%d ms; closing without them",
			 c->qp ? c->qp->qp_num : 0, c->sq.outstanding,
			 c->recv_posted, EVR_FLUSH_BOUND_MS);
		orphan_posted(c);
		notify_user(c);
		evr__conn_to(c, EVR_CS_ZOMBIE);
		evr__list_del(&c->link);
		evr__list_add_tail(&ctx->zombies, &c->link);
		break;
	default:
		break;
	}
	/* the loop's timer watcher runs the steps this queued */
}

/*
 * Keepalive.  A connection with no completion for ka_idle seconds gets a
 * probe: a zero-length RDMA WRITE, which needs no credit, no receive and no
 * CPU at the peer -- only its RDMA device must answer.  A dead or silent
 * peer never acknowledges it: either the transport gives up (retry count x
 * ACK timeout, an error completion) or ka_timeout passes first and the
 * conn fails with -ETIMEDOUT.  Every completion counts as a sign of life,
 * so a busy connection never sends probes.
 */
static void probe_complete(struct evr__op *op, int status)
{
	(void)status; /* a failed one fails the conn (send_wc) */
	op->h.conn->probe_sent = 0;
	evr__op_free(op->h.conn->ctx, op);
}

static const struct evr__op_class probe_class = { probe_complete, NULL, NULL,
						  NULL };

static void on_keepalive(struct evr__timer *t)
{
	evr_conn *c = evr__container_of(t, evr_conn, ka);
	double now = ev_now(c->ctx->loop);
	struct evr__op *op;

	if (!evr__conn_up(c))
		return; /* and no next tick */
	evr__timer_start(&c->ctx->timers, t, now + c->ka_idle / 2);
	if (c->peer_bye) {
		/* The peer closes gracefully: its disconnect ends the conn,
		 * and a probe would only race it (behind a burst of closes
		 * the DISCONNECTED event can wait seconds).  A peer that
		 * said BYE and then went silent has left as it said. */
		if (now - c->last_act >= c->ka_idle + c->ka_timeout)
			evr__conn_fail(c, -ESHUTDOWN);
		return;
	}
	if (c->probe_sent > 0) {
		if (now - c->probe_sent >= c->ka_timeout) {
			EVR_WARN(c->ctx,
				 "conn %p: peer silent for %.1f s: "
				 "keepalive timed out",
				 (void *)c, now - c->last_act);
			evr__conn_fail(c, -ETIMEDOUT);
		}
		return;
	}
	if (now - c->last_act < c->ka_idle)
		return;
	op = evr__conn_op_new(c, EVR_OP_PROBE, &probe_class);
	if (!op)
		return;			/* try again at the next tick */
	op->opcode = IBV_WR_RDMA_WRITE; /* no bytes, no key: no wqe */
	c->probe_sent = now;
	c->ctx->st.keepalive_probes++;
	evr__list_add_tail(&c->ctrlq, &op->h.link);
	evr__conn_dirty(c);
}

/*
 * The idle cycle (docs/credits.md "Idle windows").  A connection whose
 * peer lends it a window out of a shared pool and that sent no data for a
 * whole tick (window_idle_ms) gives back every credit beyond its reserve
 * and one: a credit update with EVR_F_GIVE.  What it keeps is not enough
 * for a second message in flight; when data waits for a credit, it asks
 * for a window again with a credit update carrying EVR_F_WANT, once per
 * tick: the peer's bank restores the window as for a data message sent
 * with EVR_F_WANT, or, short of buffers, only returns the ask's credit,
 * and the next tick asks again.  Data that waited a whole tick for a
 * credit asks as well, given back or not: a safety net that costs one
 * message per tick.
 */
static bool idle_blocked(evr_conn *c)
{
	struct evr__op *op =
	    evr__list_first_entry(&c->sendq, struct evr__op, h.link);

	return op && op->credit && !evr__credit_can(&c->cr, false);
}

static void on_idle(struct evr__timer *t)
{
	evr_conn *c = evr__container_of(t, evr_conn, idle);
	evr_ctx *ctx = c->ctx;
	struct evr__op *op;
	bool sent = c->sent_data;

	if (!evr__conn_up(c))
		return; /* and no next tick */
	evr__ctx_timer_after(ctx, t, ctx->o.window_idle_ms / 1000.0);
	c->sent_data = false;
	c->asked = false; /* may ask again */
	if (!sent && idle_blocked(c)) {
		c->gave_back = true;
		evr__conn_dirty(c);
		return;
	}
	if (sent || !evr__list_empty(&c->sendq) ||
	    !evr__list_empty(&c->ctrlq) || c->peer_bye ||
	    !evr__credit_idle_worth(&c->cr))
		return;
	op = evr__ctrl_op_new(c, EVR_T_CREDIT);
	if (!op)
		return; /* the next tick tries again */
	op->ctrl_flags = EVR_F_GIVE;
	evr__list_add_tail(&c->ctrlq, &op->h.link);
	evr__conn_dirty(c);
}

/* From the flush of a conn that gave its window back (or starved a
 * tick): done once data credits came back; else, with data waiting for
 * one, ask. */
static void idle_ask(evr_conn *c)
{
	if (evr__credit_can(&c->cr, false)) {
		c->gave_back = c->asked = false;
		return;
	}
	if (c->asked || !idle_blocked(c) || !evr__credit_can(&c->cr, true) ||
	    evr__sq_room(&c->sq) == 0)
		return;
	if (post_credit_update(c, EVR_F_WANT)) {
		c->asked = true;
		c->ctx->st.window_asks++;
	}
}

/* Add an explicit credit update (flags: 0, or EVR_F_WANT) to the batch,
 * past the control queue: the caller checked that a control credit and
 * an SQ slot are free.  False when it could not be made (no op; the next
 * flush tries again). */
static bool post_credit_update(evr_conn *c, uint8_t flags)
{
	struct evr__op *op = evr__ctrl_op_new(c, EVR_T_CREDIT);

	if (!op)
		return false;
	op->ctrl_flags = flags;
	if (take_and_prepare(c, op, true)) {
		evr__op_free(c->ctx, op);
		return false;
	}
	evr__sq_add(&c->sq, op);
	return true;
}

/* Take the op's credit, then build its WR.  In this order: whether the
 * last credit may go depends on the credits owed (credit.h), and building
 * the header piggybacks them.  A failed build gives the credit back (it
 * fails before anything is piggybacked). */
static int take_and_prepare(evr_conn *c, struct evr__op *op, bool ctrl)
{
	int err;

	if (op->credit && !evr__credit_take(&c->cr, ctrl))
		return -EAGAIN; /* checked by the caller: cannot happen */
	if (!op->cls->prepare)
		return 0; /* built at submission (one-sided ops, reads) */
	err = op->cls->prepare(c, op);
	if (err && op->credit)
		c->cr.avail++;
	return err;
}

/* Callbacks due once their ops are posted (cb_at_post), at most
 * EVR__DUE_MAX a post. */
#define EVR__DUE_MAX 16
struct due {
	unsigned n;
	evr_op_cb cb[EVR__DUE_MAX];
	void *arg[EVR__DUE_MAX];
};

/* Post what the flush built; a failed post fails the conn.  (Most
 * flushes of a ping-pong built nothing: its reply went the direct way.) */
static int flush_post(evr_conn *c)
{
	int err;

	if (!c->sq.nbatch)
		return 0;
	err = evr__sq_commit(&c->sq);
	if (err) {
		EVR_ERR(c->ctx, "ibv_post_send failed: %s", evr_strerror(err));
		evr__conn_fail(c, err);
	}
	return err;
}

/* The callbacks due at the post, with its status. */
static void due_fire(evr_conn *c, struct due *d, int err)
{
	unsigned i;

	for (i = 0; i < d->n; i++)
		d->cb[i](c, err, d->arg[i]);
	d->n = 0;
}

static EVR__ALWAYS_INLINE void flush_ops(evr_conn *c);

/* A control message, read or probe into the batch, its credit taken. */
static void ctrl_add(evr_conn *c, struct evr__op *op)
{
	int err = take_and_prepare(c, op, true);

	if (err) {
		evr__op_complete(op, err);
		return;
	}
	/* a read or a probe awaits its completion (loop.c's spin); a credit
	 * update, a FIN, a BYE, nothing */
	if (op->kind != EVR_OP_CTRL)
		c->ctx->answer_posts++;
	evr__sq_add(&c->sq, op);
}

static bool is_fin(const struct evr__op *op)
{
	return op->kind == EVR_OP_CTRL && op->ctrl_type == EVR_T_RNDV_FIN;
}

/* The FINs at the end of the control queue, the first of them: the data
 * messages queued behind may carry them (EVR_F_FIN), when the peer agreed
 * -- one fewer message, receive and completion on each side for each.
 * NULL when none. */
static struct evr__op *fins_to_carry(evr_conn *c)
{
	struct evr__list *pos;
	struct evr__op *first = NULL;

	if (!evr__agreed(c, EVR_HS_F_FIN) || evr__list_empty(&c->sendq))
		return NULL;
	for (pos = c->ctrlq.prev; pos != &c->ctrlq; pos = pos->prev) {
		struct evr__op *op =
		    evr__list_entry(pos, struct evr__op, h.link);

		if (!is_fin(op))
			break;
		first = op;
	}
	return first;
}

/* The run's next FIN: the op at after, NULL at the queue's end. */
static struct evr__op *run_next(evr_conn *c, struct evr__list *after)
{
	return after == &c->ctrlq
		   ? NULL
		   : evr__list_entry(after, struct evr__op, h.link);
}

/* The run's first FIN goes alone, if a credit and a slot allow. */
static bool fin_alone(evr_conn *c, struct evr__op **run)
{
	struct evr__op *fin = *run;

	if (!evr__credit_can(&c->cr, true) || evr__sq_room(&c->sq) == 0)
		return false;
	*run = run_next(c, fin->h.link.next);
	evr__list_del(&fin->h.link);
	ctrl_add(c, fin);
	return true;
}

/* take_and_prepare() of a data message that carries the run's first FIN
 * (c->fin_carry for its prepare); the FIN then is done, or back in its
 * place if the message was not built.  Out of the way of the flush of
 * messages that carry none. */
static EVR__NOINLINE int carry_prepare(evr_conn *c, struct evr__op *op,
				       struct evr__op **run)
{
	struct evr__op *fin = *run;
	struct evr__list *after = fin->h.link.next;
	int err;

	evr__list_del(&fin->h.link);
	c->fin_carry = fin;
	err = take_and_prepare(c, op, false);
	if (!c->fin_carry) { /* in the message */
		evr__op_free(c->ctx, fin);
		*run = run_next(c, after);
	} else {
		c->fin_carry = NULL;
		evr__list_add_tail(after, &fin->h.link);
	}
	return err;
}

/*
 * Post what can be posted: receives first (they are what the credits we
 * return stand for), then control messages and rendezvous reads, then the
 * user's ops in order, as one chain.  When the peer agreed to carried
 * FINs, the FINs at the end of the control queue ride inside the user's
 * messages, one a message, in order; those no message can carry go alone
 * (flush_ops).  With the shared receive queue, the receives are counted
 * first and posted later -- a reply sent from on_recv goes out before the
 * re-post of its request's buffer, which is not on the way to the peer's
 * answer -- in batches of srq_batch (one post instead of one per
 * message), when the bank's spare covers every credit the count can grant
 * (two a buffer): credits lent then never exceed buffers on the SRQ, at
 * any moment (bank.h).  When it does not, the batch set aside goes first,
 * which grows the spare, and what is still not covered is posted before
 * it is counted.
 */
void evr__conn_flush(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	bool later = false;

	c->direct_sent = false;
	if (!evr__list_empty(&c->repost)) {
		if (c->srq && evr__conn_up(c) && evr__conn_can_post(c)) {
			later = evr__bank_spare(&ctx->bank) >= 2 * c->nrepost;
			if (!later && ctx->bank.unposted) {
				srq_post_ready(ctx, c);
				later = evr__bank_spare(&ctx->bank) >=
					2 * c->nrepost;
			}
		}
		if (later)
			srq_count(c, &ctx->srq_ready, true);
		else
			post_recvs(c, true);
	}
	flush_ops(c);
	if (later && ctx->bank.unposted >= ctx->tune.srq_batch)
		srq_post_ready(ctx, c);
}

static EVR__ALWAYS_INLINE void flush_ops(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	struct evr__list *pos, *next;
	struct evr__op *op, *run; /* FINs the messages may carry, in order */
	struct due due;
	int err;

	if (!evr__conn_can_post(c) || !evr__conn_up(c))
		return;
	due.n = 0;
	run = evr__list_empty(&c->ctrlq) ? NULL : fins_to_carry(c);

	/* Control messages in order; rendezvous reads and keepalive probes
	 * take no credit and go past one that waits for a credit: the
	 * credits it waits for may come back only once a read has let the
	 * messages queued behind it be delivered (and their buffers
	 * re-posted).  A blocked control message blocks every later one
	 * (the same test), so FINs keep their order. */
	for (pos = c->ctrlq.next; pos != &c->ctrlq && evr__sq_room(&c->sq) > 0;
	     pos = next) {
		next = pos->next;
		op = evr__list_entry(pos, struct evr__op, h.link);
		if (op == run)
			break; /* the rest waits for the data messages */
		if (op->credit && !evr__credit_can(&c->cr, true))
			continue;
		evr__list_del(&op->h.link);
		ctrl_add(c, op);
	}
	/* The user's ops in order, the first FIN of the run in each message
	 * that can carry one; before one that cannot, the rest of the run
	 * goes alone, as without the extension.  FINs keep their order. */
	while ((op = evr__op_first(&c->sendq)) && evr__sq_room(&c->sq) > 0) {
		if (run && !(op->cls->carry && op->cls->carry(c, op))) {
			if (!fin_alone(c, &run))
				break; /* no credit for it: none for data */
			continue;
		}
		if (op->credit && !evr__credit_can(&c->cr, false))
			break;
		if (op->cls->wrs && evr__sq_room(&c->sq) < EVR__OP_WRS_MAX &&
		    evr__sq_room(&c->sq) < op->cls->wrs(c, op))
			break; /* a rendezvous binding its window: 2 */
		evr__list_del(&op->h.link);
		if (op->credit) {
			c->nsendq_credit--;  /* what waits behind it (WANT) */
			c->sent_data = true; /* not idle (on_idle) */
		}
		evr__op_unqueue(c, op);
		err = run ? carry_prepare(c, op, &run)
			  : take_and_prepare(c, op, false);
		if (err) {
			evr__op_complete(op, err);
			continue;
		}
		ctx->answer_posts++;
		if (op->cb_at_post) {
			/* done with once posted: its callback then */
			due.cb[due.n] = op->cb;
			due.arg[due.n++] = op->arg;
			op->cb = NULL;
		}
		evr__sq_add(&c->sq, op);
		if (due.n == EVR__DUE_MAX) {
			err = flush_post(c);
			due_fire(c, &due, err);
			if (err)
				return;
		}
	}
	/* FINs no message carried: alone, as they would have gone */
	while (run && fin_alone(c, &run))
		;
	if (c->gave_back)
		idle_ask(c);
	if ((evr__credit_need_update(&c->cr) ||
	     evr__credit_peer_starved(&c->cr, c->srq ? c->bank.lent
						     : c->recv_posted)) &&
	    evr__credit_can(&c->cr, true) && evr__sq_room(&c->sq) > 0 &&
	    post_credit_update(c, 0))
		ctx->st.credit_updates++;
	err = flush_post(c);
	if (due.n)
		due_fire(c, &due, err);
	if (err)
		return;
	if (c->over_limit && c->queued_bytes <= ctx->o.send_queue_lowat) {
		c->over_limit = false;
		if (c->o.on_drain)
			c->o.on_drain(c, c->o.arg);
	}
	if (c->state == EVR_CS_CLOSING || c->state == EVR_CS_CLOSING_BYE)
		evr__conn_kick(c);
}

/* ctx destroy: everything still open ends now, callbacks included. */
void evr__conn_free_all(evr_ctx *ctx)
{
	struct evr__list *pos, *tmp;
	int pass;

	for (pass = 0; pass < 2; pass++) {
		struct evr__list *head = pass ? &ctx->zombies : &ctx->conns;

		evr__list_for_each_safe(pos, tmp, head)
		{
			evr_conn *c = evr__container_of(pos, evr_conn, link);

			evr__conn_fail(c, -ECANCELED);
			if (c->state == EVR_CS_FAILED)
				start_flushing(c);
			fail_queued(c, -ECANCELED);
			evr__sq_abandon(&c->sq, -ECANCELED);
			/* rendezvous reads still posted kept their messages
			 * queued; the abandon just ended them */
			ctx->hooks.conn_teardown(c, -ECANCELED);
			c->recv_posted = 0;
			if (c->state == EVR_CS_FLUSHING)
				notify_user(c);
			conn_release(c);
		}
	}
	/* every QP is gone: nothing completes any more */
	while ((pos = evr__list_pop_head(&ctx->limbo)))
		conn_free(evr__container_of(pos, evr_conn, link));
}

void *evr_conn_arg(const evr_conn *c)
{
	EVR_CONN_OWNER(c);
	return c->o.arg;
}

void evr_conn_set_arg(evr_conn *c, void *arg)
{
	EVR_CONN_OWNER(c);
	c->o.arg = arg;
}

const void *evr_conn_reject_reason(const evr_conn *c, size_t *len)
{
	EVR_CONN_OWNER(c);
	if (len)
		*len = c->rej_len;
	return c->rej_len ? c->rej : NULL;
}

int evr_conn_peer_addr(const evr_conn *c, struct sockaddr *addr, socklen_t *len)
{
	EVR_CONN_OWNER(c);
	if (!c)
		return -EINVAL;
	return evr__addr_copy(c->id ? rdma_get_peer_addr(c->id) : NULL, addr,
			      len);
}

int evr_conn_local_addr(const evr_conn *c, struct sockaddr *addr,
			socklen_t *len)
{
	EVR_CONN_OWNER(c);
	if (!c)
		return -EINVAL;
	return evr__addr_copy(c->id ? rdma_get_local_addr(c->id) : NULL, addr,
			      len);
}

int evr_conn_info(const evr_conn *c, struct evr_conn_info *out)
{
	EVR_CONN_OWNER(c);
	if (!c || !out)
		return -EINVAL;
	out->peer_max_msg = c->peer_max_msg;
	out->peer_eager_size = c->peer_max_eager;
	out->peer_recv_depth = c->peer_depth;
	out->send_credits = c->cr.avail;
	out->queued_bytes = c->queued_bytes;
	out->state = evr__conn_state_str(c->state);
	out->recv_window = c->srq ? c->bank.window : c->recv_depth;
	out->srq = c->srq;
	return 0;
}
