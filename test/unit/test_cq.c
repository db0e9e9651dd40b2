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
 * Not covered here: error completions and receive completions.  Those go
 * on into evr__conn_fail() and evr__recv_done(), which need a live
 * rdma_cm id and a buffer pool; the RDMA suite covers them.
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

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	evr_ctx *ctx;

	if (!f)
		return -1;
	mock_reset();
	destroyed = 0;
	acked_at_destroy = 0;
	f->ctx = ctx = calloc(1, sizeof(*ctx));
	f->cq = calloc(1, sizeof(*f->cq));
	f->conn = calloc(1, sizeof(*f->conn));
	if (!ctx || !f->cq || !f->conn)
		return -1;
	evr__list_init(&ctx->cqs);
	evr__list_init(&ctx->conns);
	evr__list_init(&ctx->listeners);
	evr__list_init(&ctx->mrs);
	evr__list_init(&ctx->regs);
	evr__list_init(&ctx->zombies);
	evr__list_init(&ctx->held);
	evr__opq_init(&ctx->done);
	ctx->loop = ev_loop_new(0);
	if (!ctx->loop)
		return -1;
	ev_idle_init(&ctx->idle_w, on_idle);
	ctx->mode = EVR_MODE_EVENT;
	ctx->polling = false;
	ctx->mode_cb = on_mode;
	ctx->mode_arg = f;

	/* one CQ, armed, as cq_create leaves it */
	f->cq->ctx = ctx;
	f->cq->cq = &f->ibcq;
	f->cq->cqe = 4096;
	f->cq->armed = true;
	evr__list_add_tail(&ctx->cqs, &f->cq->link);

	/* one established conn; every op signaled, so that each WC stands
	 * for exactly one op */
	f->conn->ctx = ctx;
	f->conn->state = EVR_CS_ESTABLISHED;
	f->conn->cq = f->cq;
	evr__sq_init(&f->conn->sq, FAKE_QP, NOPS, 1, on_done, &ctx->st);
	evr__list_add_tail(&ctx->conns, &f->conn->link);
	F = f;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	ev_idle_stop(f->ctx->loop, &f->ctx->idle_w);
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
		f->ops[i].conn = f->conn;
		f->ops[i].kind = EVR_OP_WRITE;
		f->ops[i].wr.opcode = IBV_WR_RDMA_WRITE;
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
static void wakeup(struct fix *f)
{
	unsigned calls = 0, before;

	do {
		before = mock.events_pending;
		evr__cq_on_channel(f->ctx->loop, &f->ctx->cq_w, EV_READ);
		calls++;
		assert_true(before == 0 || mock.events_pending == before - 1);
	} while (mock.events_pending > 0);
	assert_true(calls >= 1);
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

/* A failing poll dispatches nothing and the CQ is still re-armed. */
static void test_poll_error(void **state)
{
	struct fix *f = *state;

	mock.poll_rc = -EIO;
	mock_cq_events(&f->ibcq, f->cq, 1);
	wakeup(f);
	assert_int_equal(f->ndone, 0);
	assert_int_equal(mock.notify_calls, 1);
	assert_true(f->cq->armed);
	assert_int_equal(f->ctx->st.completions, 0);
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
	struct evr__adapt_cfg cfg;
	struct evr_ctx_opts o;
	struct fix *f = *state;
	struct ibv_wc wc;
	unsigned first, i;

	/* the configuration of a ctx with the default options */
	evr_ctx_opts_init(&o);
	evr__adapt_cfg_from_opts(&cfg, &o);
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
	assert_true(ev_is_active(&f->ctx->idle_w));
	assert_int_equal(f->ndone, 1 + cfg.up_batch);
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
	    T(test_poll_error),
	    T(test_arm_by_mode),
	    T(test_adaptive_switch_up),
	    cmocka_unit_test(test_wc_errno),
	};
#undef T

	return cmocka_run_group_tests_name("cq", tests, NULL, NULL);
}
