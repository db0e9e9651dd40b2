/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The completion path (lib/cq.c) against the mocked channel, poll, arm and
 * ack calls: a ctx built by hand with one fake CQ and one connection whose
 * send queue holds the ops the scripted work completions point at.
 *
 * Cases: a completion that lands between the last empty poll and the arm
 * is still dispatched in the same wakeup; channel events are acknowledged
 * in batches, and the rest when the CQs are destroyed; WCs are polled in
 * batches and each is dispatched once, in order; the adaptive switch to
 * POLL leaves the CQ unarmed; the WC status to errno table.
 *
 * A failing poll has a world of its own: two CQs and three connections
 * made by the library's constructor, with QPs that only this program sees
 * (it takes the place of ibv_modify_qp and rdma_destroy_qp, as of
 * ibv_destroy_cq).  The poll of one CQ fails: it is logged once, that CQ
 * is never polled, armed or given to a QP again, each conn on it ends
 * with -EIO and every op completes exactly once; the other CQ goes on.
 *
 * Each WC reaches its op's done hook: here the fixture's own, which
 * completes the SQ in order as the conn's does; the conn's and the
 * message layer's hooks are tested in test_conn.
 */
#include "config.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <rdma/rdma_cma.h>

#include "evrdma-int.h"
#include "mock_verbs.h"

#define NOPS	1024
#define FAKE_QP ((struct ibv_qp *)(uintptr_t)0x5150)

struct fix {
	evr_ctx *ctx;
	struct evr__cq *cq;
	struct ibv_cq ibcq; /* never handed to libibverbs */
	evr_conn *conn;
	struct evr__op ops[NOPS];
	unsigned nops;
	unsigned times_done[NOPS];
	int status[NOPS];
	unsigned order[NOPS]; /* op index of each completion */
	unsigned ndone;
	unsigned mode_cbs;
	enum evr_mode last_mode;
};

static struct fix *F; /* the fixture of the running test */

/*
 * evr__cq_destroy_all() destroys each CQ through libibverbs, which would
 * dereference the fake CQ.  This definition takes the place of the
 * library's for this program and checks that every event was acknowledged
 * before the destroy, as libibverbs requires (it would block otherwise).
 */
static unsigned destroyed;
static unsigned long acked_at_destroy;
int ibv_destroy_cq(struct ibv_cq *cq)
{
	(void)cq;
	destroyed++;
	acked_at_destroy = mock.acked;
	return 0;
}

static void on_done(struct evr__op *op, int status)
{
	unsigned i = (unsigned)(op - F->ops);

	assert_true(i < F->nops);
	F->times_done[i]++;
	F->status[i] = status;
	F->order[F->ndone++] = i;
}

/* The ops' CQ entry (op->done): what the conn's would do for a success,
 * completing the SQ in order up to this op, without the conn. */
static void fix_wc(struct evr__wr *w, const struct ibv_wc *wc)
{
	struct evr__op *op = evr__op_of(w);

	assert_ptr_equal(w->conn, F->conn);
	evr__sq_complete(&F->conn->sq, op, evr__wc_errno(wc->status));
}

static void on_mode(evr_ctx *ctx, enum evr_mode now, void *arg)
{
	(void)ctx;
	assert_ptr_equal(arg, F);
	F->mode_cbs++;
	F->last_mode = now;
}

static void on_idle(struct ev_loop *loop, ev_idle *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents;
}

/* (no test runs the loop: the watchers only need a callback) */
static void on_check(struct ev_loop *loop, ev_check *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents;
}

/* The ctx's array to build SQ batches in, as deep as the deepest SQ here
 * (one ctx at a time). */
static struct ibv_send_wr chain_wr[NOPS];
static struct ibv_sge chain_sge[NOPS * EVR__WR_SGES];

/* A ctx as evr_ctx_create leaves it in EVENT mode, without a device:
 * lists empty, a loop of its own. */
static evr_ctx *ctx_new(void)
{
	evr_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return NULL;
	evr__list_init(&ctx->cqs);
	evr__list_init(&ctx->conns);
	evr__list_init(&ctx->listeners);
	evr__list_init(&ctx->mrs);
	evr__list_init(&ctx->regs);
	evr__list_init(&ctx->zombies);
	evr__list_init(&ctx->held);
	evr__runq_init(ctx);
	evr__pool_init(&ctx->pool, NULL, &ctx->reg, 64, 1); /* empty: grows on demand */
	evr__ctx_hooks_init(ctx); /* as evr_ctx_create does */
	ctx->chain.wr = chain_wr;
	ctx->chain.sge = chain_sge;
	ctx->chain.cap = NOPS;
	ctx->loop = ev_loop_new(0);
	if (!ctx->loop) {
		free(ctx);
		return NULL;
	}
	ev_idle_init(&ctx->idle_w, on_idle);
	ev_check_init(&ctx->check_w, on_check);
	ctx->mode = EVR_MODE_EVENT;
	ctx->polling = false;
	return ctx;
}

/* One CQ, armed, as cq_create leaves it. */
static struct evr__cq *cq_new(evr_ctx *ctx, struct ibv_cq *ibcq)
{
	struct evr__cq *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->ctx = ctx;
	c->cq = ibcq;
	c->cqe = 4096;
	c->armed = true;
	evr__list_add_tail(&ctx->cqs, &c->link);
	return c;
}

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	evr_ctx *ctx;

	if (!f)
		return -1;
	mock_reset();
	destroyed = 0;
	acked_at_destroy = 0;
	f->ctx = ctx = ctx_new();
	if (!ctx)
		return -1;
	ctx->mode_cb = on_mode;
	ctx->mode_arg = f;
	f->cq = cq_new(ctx, &f->ibcq);
	f->conn = calloc(1, sizeof(*f->conn));
	if (!f->cq || !f->conn)
		return -1;

	/* one established conn; every op signaled, so that each WC stands
	 * for exactly one op */
	f->conn->ctx = ctx;
	evr__list_init(&f->conn->work_link);
	evr__list_init(&f->conn->flush_link);
	evr__list_init(&f->conn->sendq);
	evr__list_init(&f->conn->ctrlq);
	evr__list_init(&f->conn->rndv_wait);
	evr__list_init(&f->conn->rxq);
	evr__list_init(&f->conn->repost);
	evr__list_init(&f->conn->early);
	f->conn->state = EVR_CS_ESTABLISHED;
	f->conn->cq = f->cq;
	evr__sq_init(&f->conn->sq, FAKE_QP, NOPS, 1, on_done, &ctx->st,
		     &ctx->chain);
	evr__list_add_tail(&ctx->conns, &f->conn->link);
	F = f;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	ev_idle_stop(f->ctx->loop, &f->ctx->idle_w);
	ev_check_stop(f->ctx->loop, &f->ctx->check_w);
	evr__cq_destroy_all(f->ctx); /* frees f->cq */
	ev_loop_destroy(f->ctx->loop);
	free(f->conn);
	free(f->ctx);
	free(f);
	F = NULL;
	return 0;
}

/* Post n one-sided writes on the conn; returns the index of the first. */
static unsigned post_ops(struct fix *f, unsigned n)
{
	unsigned first = f->nops, i;

	assert_true(first + n <= NOPS);
	for (i = first; i < first + n; i++) {
		f->ops[i].h.conn = f->conn;
		f->ops[i].kind = EVR_OP_WRITE;
		f->ops[i].h.done = fix_wc;
		f->ops[i].opcode = IBV_WR_RDMA_WRITE;
		evr__sq_add(&f->conn->sq, &f->ops[i]);
	}
	f->nops += n;
	assert_int_equal(evr__sq_commit(&f->conn->sq), 0);
	return first;
}

static struct ibv_wc wc_for(struct fix *f, unsigned i)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = (uintptr_t)&f->ops[i];
	wc.status = IBV_WC_SUCCESS;
	wc.opcode = IBV_WC_RDMA_WRITE;
	wc.qp_num = 7;
	return wc;
}

/* The channel fd is readable: libev calls the watcher (level-triggered)
 * as long as it stays readable, i.e. while events are pending; each call
 * consumes at most one event. */
static void wakeup_ctx(evr_ctx *ctx)
{
	unsigned calls = 0, before;

	do {
		before = mock.events_pending;
		evr__loop_on_cq_channel(ctx->loop, &ctx->cq_w, EV_READ);
		calls++;
		assert_true(before == 0 || mock.events_pending == before - 1);
	} while (mock.events_pending > 0);
	assert_true(calls >= 1);
}

static void wakeup(struct fix *f)
{
	wakeup_ctx(f->ctx);
}

/* A WC that becomes visible only after the re-arm (it landed between the
 * last empty poll and ibv_req_notify_cq, so it raises no event) must be
 * dispatched by this wakeup, not left for the next unrelated one. */
static void test_raced_arm(void **state)
{
	struct fix *f = *state;
	struct ibv_wc wc;
	unsigned i;

	i = post_ops(f, 1);
	wc = wc_for(f, i);
	mock_wc_after_arm(&wc);
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);

	assert_int_equal(mock.events_given, 1);
	assert_int_equal(mock.notify_calls, 1);
	assert_true(f->cq->armed);
	/* polled after the arm, found it, dispatched it */
	assert_true(mock.poll_calls > mock.notify_poll_seq);
	assert_int_equal(mock_wc_left(), 0);
	assert_int_equal(f->times_done[i], 1);
	assert_int_equal(f->status[i], 0);
	assert_int_equal(f->conn->sq.outstanding, 0);
	assert_int_equal(f->ctx->st.completions, 1);
}

/* Same, when the wakeup itself found other completions first. */
static void test_raced_arm_after_busy_poll(void **state)
{
	struct fix *f = *state;
	struct ibv_wc wc;
	unsigned first, i;

	first = post_ops(f, 5);
	for (i = first; i < first + 4; i++) {
		wc = wc_for(f, i);
		mock_wc_push(&wc);
	}
	wc = wc_for(f, first + 4);
	mock_wc_after_arm(&wc);
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);
	assert_int_equal(f->ndone, 5);
	for (i = 0; i < 5; i++) {
		assert_int_equal(f->order[i], first + i);
		assert_int_equal(f->times_done[first + i], 1);
	}
	assert_true(f->cq->armed);
	assert_int_equal(mock.notify_calls, 1);
}

/* Events are acknowledged in batches, never one call per event, and what
 * is left is acknowledged before the CQ is destroyed. */
static void test_acks_batched(void **state)
{
	struct fix *f = *state;
	unsigned w, events = 0, first;
	struct ibv_wc wc;

	first = post_ops(f, 100);
	for (w = 0; w < 100; w++) {
		wc = wc_for(f, first + w);
		mock_wc_push(&wc);
		mock_cq_events(&f->ibcq, f->cq, 1);
		events++;
		wakeup(f);
		/* every event is acknowledged or counted as owed */
		assert_int_equal(mock.acked + f->cq->unacked, events);
		assert_int_equal(mock.events_given, events);
	}
	assert_int_equal(f->ndone, 100);
	assert_true(mock.ack_calls >= 1);
	assert_true(mock.ack_calls <= events / 32);
	assert_true(mock.ack_max >= 32);
	assert_true(f->cq->unacked > 0); /* 100 is not a multiple */

	/* the rest go before the destroy */
	evr__cq_destroy_all(f->ctx);
	assert_int_equal(destroyed, 1);
	assert_int_equal(acked_at_destroy, events);
	assert_int_equal(mock.acked, events);
	assert_true(evr__list_empty(&f->ctx->cqs));
	assert_int_equal(f->ctx->st.cq_count, 0);
}

/* Several events pending at once, over many wakeups (one event read per
 * watcher call): the accounting stays exact. */
static void test_acks_many_events_per_wakeup(void **state)
{
	struct fix *f = *state;
	unsigned w, events = 0;

	for (w = 0; w < 300; w++) {
		unsigned n = 1 + (w * 7) % 5;

		mock_cq_events(&f->ibcq, f->cq, n);
		events += n;
		wakeup(f);
		assert_int_equal(mock.events_pending, 0);
		assert_int_equal(mock.acked + f->cq->unacked, events);
		assert_true(f->cq->armed);
	}
	assert_true(mock.ack_calls <= events / 32);
	assert_int_equal(f->ctx->st.wakeups, events);
	evr__cq_destroy_all(f->ctx);
	assert_int_equal(acked_at_destroy, events);
}

/* A CQ with nothing unacknowledged is destroyed without an ack call. */
static void test_destroy_no_ack_needed(void **state)
{
	struct fix *f = *state;

	evr__cq_destroy_all(f->ctx);
	assert_int_equal(destroyed, 1);
	assert_int_equal(mock.ack_calls, 0);
}

/* 100 WCs waiting: polled in batches of a sensible size, each dispatched
 * exactly once, in order. */
static void test_poll_batches(void **state)
{
	struct fix *f = *state;
	struct ibv_wc wc;
	unsigned first, i, nonempty = 0;

	first = post_ops(f, 100);
	for (i = 0; i < 100; i++) {
		wc = wc_for(f, first + i);
		mock_wc_push(&wc);
	}
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);

	assert_int_equal(mock_wc_left(), 0);
	assert_int_equal(f->ndone, 100);
	for (i = 0; i < 100; i++) {
		assert_int_equal(f->order[i], first + i);
		assert_int_equal(f->times_done[first + i], 1);
		assert_int_equal(f->status[first + i], 0);
	}
	assert_true(mock.poll_calls <= MOCK_MAX_CALLS);
	for (i = 0; i < mock.poll_calls; i++)
		assert_in_range(mock.poll_n[i], 16, 64);
	/* not one poll per WC */
	nonempty = mock.poll_calls - (unsigned)f->ctx->st.empty_polls;
	assert_true(nonempty <= 100 / 16 + 1);
	assert_int_equal(f->ctx->st.completions, 100);
	assert_int_equal(f->ctx->st.polls, mock.poll_calls);
	assert_int_equal(f->conn->sq.outstanding, 0);
}

/* A budget bounds one drain; the rest stays for the next pass. */
static void test_poll_budget(void **state)
{
	struct fix *f = *state;
	struct ibv_wc wc;
	unsigned first, i, got, more;

	first = post_ops(f, 300);
	for (i = 0; i < 300; i++) {
		wc = wc_for(f, first + i);
		mock_wc_push(&wc);
	}
	got = evr__cq_poll_all(f->ctx, 40);
	assert_true(got >= 40);
	assert_true(got < 40 + 64);
	assert_int_equal(f->ndone, got);
	assert_int_equal(mock_wc_left(), 300 - got);
	more = evr__cq_poll_all(f->ctx, ~0u);
	assert_int_equal(got + more, 300);
	for (i = 0; i < 300; i++) {
		assert_int_equal(f->order[i], first + i);
		assert_int_equal(f->times_done[first + i], 1);
	}
}


/* In EVENT mode every wakeup re-arms; in POLL mode none does (the check
 * watcher polls instead). */
static void test_arm_by_mode(void **state)
{
	struct fix *f = *state;
	unsigned w;

	for (w = 0; w < 5; w++) {
		mock_cq_events(&f->ibcq, f->cq, 1);
		wakeup(f);
		assert_true(f->cq->armed);
	}
	assert_int_equal(mock.notify_calls, 5);
	f->ctx->polling = true;
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);
	assert_false(f->cq->armed);
	assert_int_equal(mock.notify_calls, 5);
	assert_int_equal(f->mode_cbs, 0);
}

/* Adaptive: a burst of up_batch completions in one wakeup switches to
 * POLL; the CQ stays unarmed and the mode callback fires once. */
static void test_adaptive_switch_up(void **state)
{
	static const struct evr__env env;
	struct evr__adapt_cfg cfg;
	struct evr__tune tune;
	struct evr_ctx_opts o;
	struct fix *f = *state;
	struct ibv_wc wc;
	unsigned first, i;

	/* the configuration of a ctx with the default options and no
	 * environment */
	evr_ctx_opts_init(&o);
	evr__tune_resolve(&tune, &o, &env);
	cfg = tune.adapt;
	assert_int_equal(cfg.quiet_polls, EVR_ADAPT_QUIET_POLLS);
	f->ctx->mode = EVR_MODE_ADAPTIVE;
	evr__adapt_init(&f->ctx->adapt, &cfg, evr__loop_ns(f->ctx));
	/* a small wakeup stays in EVENT mode */
	first = post_ops(f, 1 + cfg.up_batch);
	wc = wc_for(f, first);
	mock_wc_push(&wc);
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);
	assert_false(f->ctx->polling);
	assert_false(ev_is_active(&f->ctx->check_w));
	assert_true(f->cq->armed);
	assert_int_equal(mock.notify_calls, 1);
	/* a burst does not */
	for (i = 1; i <= cfg.up_batch; i++) {
		wc = wc_for(f, first + i);
		mock_wc_push(&wc);
	}
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);
	assert_true(f->ctx->polling);
	assert_false(f->cq->armed);
	assert_int_equal(mock.notify_calls, 1);
	assert_int_equal(f->ctx->st.mode_switches, 1);
	assert_int_equal(f->mode_cbs, 1);
	assert_int_equal(f->last_mode, EVR_MODE_POLL);
	/* POLL's watchers: the idle one keeps the loop awake, the check
	 * one polls (in EVENT it is stopped: nothing for it to do) */
	assert_true(ev_is_active(&f->ctx->idle_w));
	assert_true(ev_is_active(&f->ctx->check_w));
	assert_int_equal(f->ndone, 1 + cfg.up_batch);
}

/* ---- a failing poll ------------------------------------------------ */

/* The conns below have QPs that only this program knows: moving one to
 * the error state and destroying it are counted here instead. */
static unsigned qp_to_err, qp_destroyed;

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask)
{
	(void)qp;
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_ERR)
		qp_to_err++;
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	(void)id;
	qp_destroyed++;
}

#define PE_SQ	 4 /* send queue depth of each conn */
#define PE_OPS	 (PE_SQ + 2)
#define PE_CONNS 3

struct pe_rec {
	unsigned calls;
	int status;
};

struct pe_conn {
	evr_conn *c;
	struct ibv_qp qp;
	struct evr__op *ops[PE_OPS]; /* valid until completed */
	struct pe_rec rec[PE_OPS];
	unsigned nops;
	unsigned connects, closes;
	int close_status;
};

/* conns 0 and 1 on cq[0], whose poll fails; conn 2 on cq[1] */
struct pe {
	evr_ctx *ctx;
	struct ibv_cq ibcq[2];
	struct evr__cq *cq[2];
	struct pe_conn conn[PE_CONNS];
	unsigned errors; /* lines logged at EVR_LOG_ERROR */
	unsigned poll_errors; /* ... that name ibv_poll_cq and EIO */
};

static void pe_log(enum evr_log_level lvl, const char *msg, void *arg)
{
	struct pe *p = arg;

	if (lvl != EVR_LOG_ERROR)
		return;
	p->errors++;
	if (strstr(msg, "ibv_poll_cq") && strstr(msg, "EIO"))
		p->poll_errors++;
}

static void pe_connected(evr_conn *c, int status, void *arg)
{
	struct pe_conn *pc = arg;

	assert_ptr_equal(c, pc->c);
	assert_int_equal(status, 0);
	pc->connects++;
}

static void pe_closed(evr_conn *c, int status, void *arg)
{
	struct pe_conn *pc = arg;

	assert_ptr_equal(c, pc->c);
	pc->closes++;
	pc->close_status = status;
}

static void pe_op_done(evr_conn *c, int status, void *arg)
{
	struct pe_rec *r = arg;

	(void)c;
	r->calls++;
	r->status = status;
}

/* The end of a write (its class's complete), as the one-sided layer's
 * does. */
static void pe_complete(struct evr__op *op, int status)
{
	evr_conn *c = op->h.conn;

	if (op->cb)
		op->cb(c, evr__op_user_status(c, status), op->arg);
	evr__op_free(c->ctx, op);
}

static const struct evr__op_class pe_class = {pe_complete, NULL, NULL, NULL};

static int pe_setup(void **state)
{
	struct pe *p = calloc(1, sizeof(*p));
	evr_ctx *ctx;
	int i;

	if (!p)
		return -1;
	mock_reset();
	destroyed = 0;
	qp_to_err = qp_destroyed = 0;
	p->ctx = ctx = ctx_new();
	if (!ctx)
		return -1;
	ctx->o.sq_depth = PE_SQ;
	ctx->chain.cap = PE_SQ; /* as evr_ctx_create sizes it */
	ctx->o.log_fn = pe_log;
	ctx->o.log_arg = p;
	ctx->o.log_level = EVR_LOG_WARN;
	for (i = 0; i < 2; i++)
		if (!(p->cq[i] = cq_new(ctx, &p->ibcq[i])))
			return -1;
	for (i = 0; i < PE_CONNS; i++) {
		struct pe_conn *pc = &p->conn[i];
		struct evr__cq *cq = p->cq[i < 2 ? 0 : 1];
		struct evr_conn_opts o;
		evr_conn *c;

		evr_conn_opts_init(&o);
		o.on_connect = pe_connected;
		o.on_close = pe_closed;
		o.arg = pc;
		pc->c = c = evr__conn_new(ctx, NULL, true, &o, NULL);
		if (!c)
			return -1;
		/* what evr__cq_attach and evr__conn_setup_qp would do, on
		 * the CQ this test chooses */
		c->cq = cq;
		cq->reserved += PE_SQ;
		cq->nqp++;
		ctx->st.cq_reserved += PE_SQ;
		pc->qp.qp_num = 100 + (uint32_t)i;
		c->qp = &pc->qp;
		evr__sq_init(&c->sq, c->qp, PE_SQ, 1, evr__op_complete,
			     &ctx->st, &ctx->chain);
		c->state = EVR_CS_CONNECTING; /* as cm.c leaves it */
		evr__conn_established(c);
		assert_int_equal(pc->connects, 1);
	}
	evr__ctx_progress(ctx);
	*state = p;
	return 0;
}

static int pe_teardown(void **state)
{
	struct pe *p = *state;
	evr_ctx *ctx = p->ctx;

	evr__cq_destroy_all(ctx); /* frees the CQs */
	evr__op_free_all(ctx);
	evr__timers_free(&ctx->timers);
	ev_loop_destroy(ctx->loop);
	free(ctx);
	free(p);
	return 0;
}

/* Give conn i a one-sided write: posted, or queued behind a full SQ. */
static unsigned pe_op(struct pe *p, int i, bool post)
{
	struct pe_conn *pc = &p->conn[i];
	struct evr__op *op = evr__conn_op_new(pc->c, EVR_OP_WRITE, &pe_class);
	unsigned k = pc->nops++;

	assert_non_null(op);
	assert_true(k < PE_OPS);
	op->opcode = IBV_WR_RDMA_WRITE;
	op->cb = pe_op_done;
	op->arg = &pc->rec[k];
	pc->ops[k] = op;
	if (post) {
		evr__sq_add(&pc->c->sq, op);
		assert_int_equal(evr__sq_commit(&pc->c->sq), 0);
	} else {
		assert_int_equal(evr__sq_room(&pc->c->sq), 0);
		evr__list_add_tail(&pc->c->sendq, &op->h.link);
	}
	return k;
}

static void pe_wc(struct pe *p, int i, unsigned k)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = (uintptr_t)p->conn[i].ops[k];
	wc.status = IBV_WC_SUCCESS;
	wc.opcode = IBV_WC_RDMA_WRITE;
	wc.qp_num = p->conn[i].qp.qp_num;
	mock_wc_push(&wc);
}

/* ibv_poll_cq fails on one CQ: it surfaces, once, as an error in the log
 * and -EIO on every conn of that CQ, each op still completes exactly once,
 * and the other CQ goes on. */
static void test_poll_error(void **state)
{
	struct pe *p = *state;
	evr_ctx *ctx = p->ctx;
	struct evr__cq *got;
	unsigned k;
	int i;

	/* conn 0: a full SQ and one write waiting for room; conn 1: two
	 * writes posted; conn 2, on the other CQ: two, both completed */
	for (k = 0; k < PE_SQ; k++)
		pe_op(p, 0, true);
	pe_op(p, 0, false);
	pe_op(p, 1, true);
	pe_op(p, 1, true);
	pe_wc(p, 2, pe_op(p, 2, true));
	pe_wc(p, 2, pe_op(p, 2, true));

	mock.poll_rc = -EIO;
	mock.poll_rc_cq = &p->ibcq[0];
	mock_cq_events(&p->ibcq[0], p->cq[0], 1);
	wakeup_ctx(ctx);

	/* logged once, with its errno; that CQ is out of service */
	assert_int_equal(mock.poll_failed, 1);
	assert_int_equal(p->errors, 1);
	assert_int_equal(p->poll_errors, 1);
	assert_true(p->cq[0]->broken);
	assert_false(p->cq[0]->armed);
	assert_false(p->cq[1]->broken);
	/* its conns failed with -EIO: the QPs went to the error state and
	 * the write that was not posted completed with -EIO at once */
	for (i = 0; i < 2; i++) {
		assert_int_equal(p->conn[i].c->state, EVR_CS_FLUSHING);
		assert_int_equal(p->conn[i].c->error, -EIO);
		assert_int_equal(p->conn[i].closes, 0);
	}
	assert_int_equal(qp_to_err, 2);
	assert_int_equal(p->conn[0].rec[PE_SQ].calls, 1);
	assert_int_equal(p->conn[0].rec[PE_SQ].status, -EIO);
	for (k = 0; k < PE_SQ; k++)
		assert_int_equal(p->conn[0].rec[k].calls, 0);
	/* the conn on the other CQ got its completions */
	assert_int_equal(p->conn[2].c->state, EVR_CS_ESTABLISHED);
	for (k = 0; k < 2; k++) {
		assert_int_equal(p->conn[2].rec[k].calls, 1);
		assert_int_equal(p->conn[2].rec[k].status, 0);
	}

	/* later wakeups and polling passes leave the broken CQ alone, and
	 * the other one works on */
	pe_wc(p, 2, pe_op(p, 2, true));
	mock_cq_events(&p->ibcq[1], p->cq[1], 1);
	wakeup_ctx(ctx);
	assert_int_equal(p->conn[2].rec[2].calls, 1);
	assert_int_equal(p->conn[2].rec[2].status, 0);
	evr__cq_poll_all(ctx, ~0u);
	assert_int_equal(mock.poll_failed, 1);
	assert_int_equal(p->errors, 1);
	assert_false(p->cq[0]->armed);
	assert_true(p->cq[1]->armed);
	/* nor does a new QP go on it */
	ctx->dattr.max_cqe = 1 << 16;
	assert_int_equal(evr__cq_attach(ctx, PE_SQ, &got), 0);
	assert_ptr_equal(got, p->cq[1]);
	evr__cq_detach(ctx, got, PE_SQ);

	/* the flushes of the posted writes cannot come: at the conn's flush
	 * bound they complete with -ECANCELED and on_close reports -EIO */
	for (i = 0; i < 2; i++) {
		struct evr__timer *t = &p->conn[i].c->timer;

		assert_true(t->idx != 0); /* armed on the ctx's heap */
		evr__timer_stop(&ctx->timers, t);
		t->fn(t);
	}
	for (i = 0; i < 2; i++) {
		struct pe_conn *pc = &p->conn[i];

		assert_int_equal(pc->closes, 1);
		assert_int_equal(pc->close_status, -EIO);
		for (k = 0; k < pc->nops; k++) {
			assert_int_equal(pc->rec[k].calls, 1);
			if (i == 0 && k == PE_SQ)
				continue; /* the queued one, -EIO above */
			assert_int_equal(pc->rec[k].status, -ECANCELED);
		}
	}
	assert_int_equal(p->conn[2].closes, 0);

	/* the ctx goes: conn 2 ends as the destroy contract says, the
	 * others fire nothing more */
	ctx->destroying = true;
	evr__conn_free_all(ctx);
	assert_int_equal(p->conn[2].closes, 1);
	assert_int_equal(p->conn[2].close_status, -ECANCELED);
	for (i = 0; i < PE_CONNS; i++) {
		assert_int_equal(p->conn[i].connects, 1);
		assert_int_equal(p->conn[i].closes, 1);
		for (k = 0; k < p->conn[i].nops; k++)
			assert_int_equal(p->conn[i].rec[k].calls, 1);
	}
	assert_int_equal(qp_destroyed, PE_CONNS);
	assert_int_equal(ctx->st.conns, 0);
	assert_int_equal(ctx->st.cq_reserved, 0);
	assert_int_equal(mock.poll_failed, 1);
}

static void test_wc_errno(void **state)
{
	static const struct {
		enum ibv_wc_status st;
		int err;
	} cases[] = {
	    {IBV_WC_SUCCESS, 0},
	    {IBV_WC_WR_FLUSH_ERR, -ECANCELED},
	    {IBV_WC_RETRY_EXC_ERR, -ETIMEDOUT},
	    {IBV_WC_RESP_TIMEOUT_ERR, -ETIMEDOUT},
	    {IBV_WC_RNR_RETRY_EXC_ERR, -ENOBUFS},
	    {IBV_WC_LOC_LEN_ERR, -EMSGSIZE},
	    {IBV_WC_LOC_PROT_ERR, -EFAULT},
	    {IBV_WC_LOC_ACCESS_ERR, -EFAULT},
	    {IBV_WC_REM_ACCESS_ERR, -EACCES},
	    {IBV_WC_REM_INV_REQ_ERR, -EINVAL},
	    {IBV_WC_REM_INV_RD_REQ_ERR, -EINVAL},
	    {IBV_WC_REM_OP_ERR, -EREMOTEIO},
	    {IBV_WC_REM_ABORT_ERR, -EREMOTEIO},
	    {IBV_WC_GENERAL_ERR, -EIO},
	    {IBV_WC_FATAL_ERR, -EIO},
	    {(enum ibv_wc_status)9999, -EIO},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(evr__wc_errno(cases[i].st), cases[i].err);
}

/* What a failed completion makes of its connection: a remote operational
 * or abort error is the peer's end going away (-ECONNRESET); everything
 * else keeps the op's status. */
static void test_wc_conn_errno(void **state)
{
	static const enum ibv_wc_status same[] = {
	    IBV_WC_WR_FLUSH_ERR,       IBV_WC_RETRY_EXC_ERR,
	    IBV_WC_RESP_TIMEOUT_ERR,   IBV_WC_RNR_RETRY_EXC_ERR,
	    IBV_WC_LOC_LEN_ERR,	       IBV_WC_LOC_PROT_ERR,
	    IBV_WC_REM_ACCESS_ERR,     IBV_WC_REM_INV_REQ_ERR,
	    IBV_WC_REM_INV_RD_REQ_ERR, IBV_WC_GENERAL_ERR,
	    IBV_WC_FATAL_ERR,
	};
	size_t i;

	(void)state;
	assert_int_equal(evr__wc_conn_errno(IBV_WC_REM_OP_ERR), -ECONNRESET);
	assert_int_equal(evr__wc_conn_errno(IBV_WC_REM_ABORT_ERR), -ECONNRESET);
	for (i = 0; i < sizeof(same) / sizeof(same[0]); i++)
		assert_int_equal(evr__wc_conn_errno(same[i]),
				 evr__wc_errno(same[i]));
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_raced_arm),
	    T(test_raced_arm_after_busy_poll),
	    T(test_acks_batched),
	    T(test_acks_many_events_per_wakeup),
	    T(test_destroy_no_ack_needed),
	    T(test_poll_batches),
	    T(test_poll_budget),
	    cmocka_unit_test_setup_teardown(test_poll_error, pe_setup,
					    pe_teardown),
	    T(test_arm_by_mode),
	    T(test_adaptive_switch_up),
	    cmocka_unit_test(test_wc_errno),
	    cmocka_unit_test(test_wc_conn_errno),
	};
#undef T

	return cmocka_run_group_tests_name("cq", tests, NULL, NULL);
}
