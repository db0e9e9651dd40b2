/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Send queue batching and selective signaling (lib/sq.c), against the
 * mocked evr__post_send, which records every call and its WR chain.
 *
 * Cases: a batch that fits the chain array is one post; one longer than
 * the array goes out in chains of the array's length, one post each, its
 * WRs built from the ops' compact form (opcode, flags, SGE, remote address and
 * key, immediate data, atomic operands; a split op's header and payload); signaled WRs are one in
 * `interval` plus every batch tail but a quiet one, whose ops a later
 * signaled WR completes; a signaled completion completes its
 * predecessors in posting order, each exactly once, with the right status
 * for success, flush and error; a post failing in the middle of a chain
 * keeps the prefix posted and fails the rest, also when a later chain of
 * the batch fails; abandon completes everything
 * once; the room accounting never wraps and returns to zero; and WRs
 * posted without an op (evr__sq_post_direct) take slots until the next
 * op's completion, or their own flush or error, tells they are done.
 */
#include "config.h"

#include <endian.h>
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

#define MAX_OPS 4096
#define FAKE_QP ((struct ibv_qp *)(uintptr_t)0x5150)
/* A chain array shorter than the batches that test splitting: a ctx gives
 * its SQs one as deep as the SQ, where a batch is always one chain. */
#define SHORT_CHAIN 32

/* Every op completion, in the order done() was called. */
static struct {
	struct evr__op *op[4 * MAX_OPS];
	int status[4 * MAX_OPS];
	unsigned n;
} done_log;

static struct evr__op ops[MAX_OPS];
static uint8_t mem[2 * MAX_OPS]; /* what the ops' SGEs point at */
static unsigned times_done[MAX_OPS];
static struct ibv_send_wr chain_wr[MAX_OPS];
static struct ibv_sge chain_sge[MAX_OPS * EVR__WR_SGES];
static struct evr__wr_chain chain;

static unsigned op_idx(const struct evr__op *op)
{
	assert_true(op >= ops && op < ops + MAX_OPS);
	return (unsigned)(op - ops);
}

static void on_done(struct evr__op *op, int status)
{
	assert_true(done_log.n < 4 * MAX_OPS);
	done_log.op[done_log.n] = op;
	done_log.status[done_log.n] = status;
	done_log.n++;
	times_done[op_idx(op)]++;
}

/* The chain array an SQ builds its WRs in, cap WRs long. */
static struct evr__wr_chain *chain_of(unsigned cap)
{
	assert_true(cap >= 1 && cap <= MAX_OPS);
	chain.wr = chain_wr;
	chain.sge = chain_sge;
	chain.cap = cap;
	return &chain;
}

static int setup(void **state)
{
	(void)state;
	mock_reset();
	memset(&done_log, 0, sizeof(done_log));
	memset(ops, 0, sizeof(ops));
	memset(times_done, 0, sizeof(times_done));
	return 0;
}

/* Room is unsigned: it must never have wrapped. */
/* The ops on a queue, counted one by one. */
static unsigned qlen(const struct evr__list *q)
{
	const struct evr__list *pos;
	unsigned n = 0;

	evr__list_for_each(pos, q)
		n++;
	return n;
}

/* The op posted last. */
static struct evr__op *last_posted(struct evr__sq *sq)
{
	return evr__list_entry(evr__list_last(&sq->posted), struct evr__op,
			       h.link);
}

/* WRs posted without an op on the SQ: those at the head of the posted
 * FIFO and those after each op. */
static unsigned anon_total(const struct evr__sq *sq)
{
	const struct evr__list *pos;
	unsigned n = sq->anon_head;

	evr__list_for_each(pos, &sq->posted)
		n += ((const struct evr__op *)((const char *)pos -
					       offsetof(struct evr__op, h.link)))
			 ->anon_after;
	return n;
}

static void check_room(const struct evr__sq *sq)
{
	assert_int_equal(sq->nbatch, qlen(&sq->batch));
	assert_true(sq->outstanding + sq->nbatch <= sq->depth);
	assert_int_equal(evr__sq_room(sq),
			 sq->depth - sq->outstanding - sq->nbatch);
	assert_int_equal(sq->outstanding, qlen(&sq->posted) + anon_total(sq));
}

static void add_range(struct evr__sq *sq, unsigned from, unsigned n)
{
	unsigned i;

	for (i = from; i < from + n; i++) {
		assert_true(evr__sq_room(sq) > 0);
		ops[i].opcode = IBV_WR_SEND;
		ops[i].wqe.laddr = (uintptr_t)mem + i;
		ops[i].wqe.lkey = i;
		ops[i].wqe.len = i % 3; /* 0: no SGE */
		/* stale flags from an earlier use must not leak through */
		ops[i].send_flags = IBV_SEND_SIGNALED;
		evr__sq_add(sq, &ops[i]);
		check_room(sq);
	}
}

static bool signaled(const struct evr__op *op)
{
	return op->send_flags & IBV_SEND_SIGNALED;
}

/* The signaled ops among [from, from + n), completed as the HCA would:
 * a CQE for each signaled WR, in order. */
static void complete_signaled(struct evr__sq *sq, unsigned from, unsigned n)
{
	unsigned i;

	for (i = from; i < from + n; i++)
		if (signaled(&ops[i])) {
			evr__sq_complete(sq, &ops[i], 0);
			check_room(sq);
		}
}

/* A batch longer than the chain array: chains of the array's length. */
static void test_chains_per_batch(void **state)
{
	struct evr_stats st;
	struct evr__sq sq;
	unsigned i, nsig = 0;

	(void)state;
	memset(&st, 0, sizeof(st));
	evr__sq_init(&sq, FAKE_QP, 1024, 16, on_done, &st,
		     chain_of(SHORT_CHAIN));
	add_range(&sq, 0, 1000);
	assert_int_equal(mock.post_send_calls, 0); /* nothing until commit */
	assert_int_equal(evr__sq_room(&sq), 24);
	assert_int_equal(evr__sq_commit(&sq), 0);

	/* ceil(1000 / SHORT_CHAIN) posts, full chains and the rest */
	assert_int_equal(mock.post_send_calls,
			 (1000 + SHORT_CHAIN - 1) / SHORT_CHAIN);
	for (i = 0; i < mock.post_send_calls; i++) {
		assert_ptr_equal(mock.posts[i].qp, FAKE_QP);
		assert_int_equal(mock.posts[i].nwr,
				 EVR__MIN(SHORT_CHAIN, 1000 - i * SHORT_CHAIN));
		nsig += mock.posts[i].nsig;
	}
	/* the WRs are the ops, in order, each wr_id pointing at its op's
	 * head, built from the op's compact form */
	assert_int_equal(mock_wrs.nsend, 1000);
	for (i = 0; i < 1000; i++) {
		const struct mock_wr *w = &mock_wrs.send[i];

		assert_true(w->wr_id == (uintptr_t)&ops[i].h);
		assert_int_equal(w->opcode, IBV_WR_SEND);
		assert_int_equal(w->len, i % 3);
		if (w->len) {
			assert_int_equal(w->laddr, (uintptr_t)mem + i);
			assert_int_equal(w->lkey, i);
		}
		assert_int_equal(!!(w->flags & IBV_SEND_SIGNALED),
				 signaled(&ops[i]));
	}
	assert_int_equal(sq.outstanding, 1000);
	assert_int_equal(qlen(&sq.batch), 0);
	assert_int_equal(evr__sq_room(&sq), 24);
	/* 62 in 16 (the 16th, 32nd, ... 992nd) plus the tail */
	assert_int_equal(nsig, 63);
	assert_int_equal(st.post_send_calls, mock.post_send_calls);
	assert_int_equal(st.send_wrs, 1000);
	assert_int_equal(st.signaled_wrs, 63);
	/* an empty commit posts nothing */
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(st.post_send_calls, mock.post_send_calls);
	assert_int_equal(done_log.n, 0);
}

/*
 * Over many batches of random sizes: a signaled WR that is not a batch
 * tail comes exactly `interval` WRs after the previous signaled one, no
 * run of unsignaled WRs reaches `interval`, and every batch tail is
 * signaled.
 */
static void test_signal_interval(void **state)
{
	static const unsigned intervals[] = {1, 2, 7, 16, 64};
	size_t t;

	(void)state;
	for (t = 0; t < sizeof(intervals) / sizeof(intervals[0]); t++) {
		struct evr__sq sq;
		unsigned seed = 99, next = 0, since = 0, b, i, call = 0;

		setup(NULL);
		evr__sq_init(&sq, FAKE_QP, 256, intervals[t], on_done, NULL,
			     chain_of(SHORT_CHAIN));
		assert_int_equal(sq.interval, intervals[t]);
		while (next < 3000) {
			unsigned n;

			seed = seed * 1103515245u + 12345u;
			n = 1 + (seed >> 8) % 40;
			if (n > evr__sq_room(&sq))
				n = evr__sq_room(&sq);
			if (next + n > 3000)
				n = 3000 - next;
			add_range(&sq, next, n);
			assert_int_equal(evr__sq_commit(&sq), 0);
			for (b = 0; b < n; b += SHORT_CHAIN, call++)
				assert_int_equal(mock.posts[call].nwr,
						 EVR__MIN(SHORT_CHAIN, n - b));
			assert_int_equal(mock.post_send_calls, call);
			for (b = 0; b < n; b++) {
				i = next + b;
				since++;
				if (!signaled(&ops[i])) {
					assert_true(since < intervals[t]);
					continue;
				}
				if (b != n - 1)
					assert_int_equal(since, intervals[t]);
				since = 0;
			}
			assert_true(signaled(&ops[next + n - 1]));
			/* the HCA completes everything posted */
			complete_signaled(&sq, next, n);
			assert_int_equal(sq.outstanding, 0);
			next += n;
		}
		assert_int_equal(done_log.n, 3000);
		for (i = 0; i < 3000; i++) {
			assert_ptr_equal(done_log.op[i], &ops[i]);
			assert_int_equal(done_log.status[i], 0);
		}
	}
}

/* interval is clamped to [1, depth / 2]: a full SQ always holds a
 * signaled WR. */
static void test_interval_clamped(void **state)
{
	static const struct {
		unsigned depth, interval, want;
	} cases[] = {
	    {256, 0, 1}, {256, 16, 16}, {256, 128, 128}, {256, 129, 128},
	    {8, 16, 4},	 {4, 1000, 2},	{2, 2, 1},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct evr__sq sq;

		evr__sq_init(&sq, FAKE_QP, cases[i].depth, cases[i].interval,
			     on_done, NULL, chain_of(cases[i].depth));
		assert_int_equal(sq.interval, cases[i].want);
		assert_int_equal(evr__sq_room(&sq), cases[i].depth);
	}
}

/* A batch that ends with a quiet op (a message nobody waits for) is
 * posted with an unsignaled tail; the quiet ops stay posted, holding
 * their slots, until a later signaled WR -- a non-quiet batch end, or the
 * interval's -- completes them, in order and once each.  A quiet op in
 * the middle of a batch changes nothing. */
static void test_quiet_tail(void **state)
{
	struct evr__sq sq;
	unsigned i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 4, on_done, NULL, chain_of(64));
	assert_false(evr__sq_open_tail(&sq));
	/* a ping-pong's replies: one quiet op per batch */
	for (i = 0; i < 3; i++) {
		ops[i].quiet = true;
		add_range(&sq, i, 1);
		assert_int_equal(evr__sq_commit(&sq), 0);
		assert_false(signaled(&ops[i]));
		assert_true(evr__sq_open_tail(&sq));
	}
	assert_int_equal(sq.outstanding, 3);
	assert_int_equal(evr__sq_room(&sq), 61);
	assert_int_equal(done_log.n, 0);
	/* the 4th is the interval's: signaled although quiet */
	ops[3].quiet = true;
	add_range(&sq, 3, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_true(signaled(&ops[3]));
	assert_false(evr__sq_open_tail(&sq));
	evr__sq_complete(&sq, &ops[3], 0);
	assert_int_equal(done_log.n, 4);
	assert_int_equal(sq.outstanding, 0);

	/* two quiet, then a batch of quiet + not quiet: its end signaled */
	ops[4].quiet = ops[5].quiet = ops[6].quiet = true;
	add_range(&sq, 4, 2);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_true(evr__sq_open_tail(&sq));
	add_range(&sq, 6, 2);
	assert_int_equal(evr__sq_commit(&sq), 0);
	for (i = 4; i < 8; i++)
		assert_int_equal(signaled(&ops[i]), i == 7);
	assert_ptr_equal(last_posted(&sq), &ops[7]);
	assert_false(evr__sq_open_tail(&sq));
	evr__sq_complete(&sq, &ops[7], 0);
	assert_int_equal(done_log.n, 8);
	for (i = 0; i < 8; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], 0);
		assert_int_equal(times_done[i], 1);
	}
	check_room(&sq);
	assert_int_equal(evr__sq_room(&sq), 64);
}

/* A batch whose quiet tail comes after an op that waits for its
 * completion (a message with a callback) ends signaled: else that op's
 * completion would wait for some later signaled WR.  A quiet batch after
 * it keeps its unsignaled tail. */
static void test_waiting_before_quiet_tail(void **state)
{
	struct evr__sq sq;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 16, on_done, NULL, chain_of(64));
	ops[0].quiet = false;
	ops[1].quiet = true;
	add_range(&sq, 0, 2);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_false(signaled(&ops[0]));
	assert_true(signaled(&ops[1]));
	assert_false(evr__sq_open_tail(&sq));
	evr__sq_complete(&sq, &ops[1], 0);
	assert_int_equal(done_log.n, 2);
	assert_int_equal(times_done[0], 1);
	/* nothing waits now: a quiet batch stays unsignaled */
	ops[2].quiet = true;
	add_range(&sq, 2, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_false(signaled(&ops[2]));
	assert_true(evr__sq_open_tail(&sq));
}

/* A CQE for a signaled op completes all posted before it, in order,
 * exactly once; later ops stay posted. */
static void test_complete_in_order(void **state)
{
	struct evr__sq sq;
	unsigned i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 4, on_done, NULL, chain_of(64));
	add_range(&sq, 0, 10);
	assert_int_equal(evr__sq_commit(&sq), 0);
	/* signaled: 3 (4th), 7 (8th) and the tail 9 */
	for (i = 0; i < 10; i++)
		assert_int_equal(signaled(&ops[i]), i == 3 || i == 7 || i == 9);

	evr__sq_complete(&sq, &ops[3], 0);
	assert_int_equal(done_log.n, 4);
	assert_int_equal(sq.outstanding, 6);
	check_room(&sq);
	evr__sq_complete(&sq, &ops[7], 0);
	assert_int_equal(done_log.n, 8);
	assert_int_equal(sq.outstanding, 2);
	evr__sq_complete(&sq, &ops[9], 0);
	assert_int_equal(done_log.n, 10);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(evr__sq_room(&sq), 64);
	for (i = 0; i < 10; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], 0);
		assert_int_equal(times_done[i], 1);
	}
}

/* A flush error: everything before the op was flushed as well. */
static void test_complete_flush(void **state)
{
	struct evr__sq sq;
	unsigned i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 16, on_done, NULL, chain_of(64));
	add_range(&sq, 0, 12);
	assert_int_equal(evr__sq_commit(&sq), 0);
	/* the QP went to error: a flushed CQE for op 5 (flushed WRs
	 * complete whether signaled or not) */
	evr__sq_complete(&sq, &ops[5], -ECANCELED);
	assert_int_equal(done_log.n, 6);
	for (i = 0; i < 6; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], -ECANCELED);
	}
	/* and the rest flush one by one */
	for (i = 6; i < 12; i++)
		evr__sq_complete(&sq, &ops[i], -ECANCELED);
	assert_int_equal(done_log.n, 12);
	for (i = 0; i < 12; i++) {
		assert_int_equal(times_done[i], 1);
		assert_int_equal(done_log.status[i], -ECANCELED);
	}
	assert_int_equal(sq.outstanding, 0);
}

/* A real error on one WR: those before it succeeded (RC executes in
 * order), it gets the error, those after it are untouched. */
static void test_complete_error(void **state)
{
	struct evr__sq sq;
	unsigned i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 16, on_done, NULL, chain_of(64));
	add_range(&sq, 0, 8);
	assert_int_equal(evr__sq_commit(&sq), 0);
	evr__sq_complete(&sq, &ops[4], -EREMOTEIO);
	assert_int_equal(done_log.n, 5);
	for (i = 0; i < 4; i++)
		assert_int_equal(done_log.status[i], 0);
	assert_ptr_equal(done_log.op[4], &ops[4]);
	assert_int_equal(done_log.status[4], -EREMOTEIO);
	assert_int_equal(sq.outstanding, 3);
	check_room(&sq);
	evr__sq_abandon(&sq, -ECANCELED);
	assert_int_equal(done_log.n, 8);
	for (i = 5; i < 8; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], -ECANCELED);
	}
	for (i = 0; i < 8; i++)
		assert_int_equal(times_done[i], 1);
	assert_int_equal(sq.outstanding, 0);
}

/* ibv_post_send fails with *bad in the middle of the chain: the WRs
 * before it were posted and stay outstanding (they will flush), the rest
 * fail at once through done() with the error. */
static void test_post_failure_mid_chain(void **state)
{
	static const unsigned bads[] = {0, 1, 4, 9};
	size_t t;

	(void)state;
	for (t = 0; t < sizeof(bads) / sizeof(bads[0]); t++) {
		struct evr_stats st;
		struct evr__sq sq;
		unsigned i, bad = bads[t];

		setup(NULL);
		memset(&st, 0, sizeof(st));
		evr__sq_init(&sq, FAKE_QP, 32, 4, on_done, &st, chain_of(32));
		/* something already posted before */
		add_range(&sq, 0, 3);
		assert_int_equal(evr__sq_commit(&sq), 0);
		mock.post_send_rc = -ENOMEM;
		mock.post_send_bad_idx = bad;
		add_range(&sq, 3, 10);
		assert_int_equal(evr__sq_commit(&sq), -ENOMEM);
		assert_int_equal(mock.post_send_calls, 2);
		assert_int_equal(mock.posts[1].nwr, 10);
		/* the prefix stays posted */
		assert_int_equal(sq.outstanding, 3 + bad);
		assert_int_equal(qlen(&sq.batch), 0);
		check_room(&sq);
		assert_int_equal(st.send_wrs, 3 + bad);
		/* the rest failed, in order, once */
		assert_int_equal(done_log.n, 10 - bad);
		for (i = 0; i < 10 - bad; i++) {
			assert_ptr_equal(done_log.op[i], &ops[3 + bad + i]);
			assert_int_equal(done_log.status[i], -ENOMEM);
		}
		/* the QP is dead now: the posted prefix flushes */
		mock.post_send_rc = 0;
		if (sq.outstanding)
			evr__sq_complete(&sq, last_posted(&sq), -ECANCELED);
		assert_int_equal(sq.outstanding, 0);
		assert_int_equal(evr__sq_room(&sq), 32);
		for (i = 0; i < 13; i++)
			assert_int_equal(times_done[i], 1);
		for (i = 10 - bad; i < done_log.n; i++)
			assert_int_equal(done_log.status[i], -ECANCELED);
		/* and the SQ is usable again */
		add_range(&sq, 13, 2);
		assert_int_equal(evr__sq_commit(&sq), 0);
		assert_int_equal(sq.outstanding, 2);
	}
}

/* A batch longer than the chain array whose second chain fails: the first
 * chain and the prefix of the second stay posted, the rest fail once each
 * and no third chain is posted. */
static void test_post_failure_later_chain(void **state)
{
	struct evr__sq sq;
	unsigned i, n = 2 * SHORT_CHAIN + 10, bad = 4;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 256, 8, on_done, NULL,
		     chain_of(SHORT_CHAIN));
	mock.post_send_rc = -ENOMEM;
	mock.post_send_ok_calls = 1;
	mock.post_send_bad_idx = bad;
	add_range(&sq, 0, n);
	assert_int_equal(evr__sq_commit(&sq), -ENOMEM);
	assert_int_equal(mock.post_send_calls, 2);
	assert_int_equal(sq.outstanding, SHORT_CHAIN + bad);
	assert_int_equal(mock_wrs.nsend, SHORT_CHAIN + bad);
	check_room(&sq);
	assert_int_equal(mock.posts[0].nwr, SHORT_CHAIN);
	assert_int_equal(mock.posts[1].nwr, SHORT_CHAIN);
	assert_int_equal(done_log.n, n - SHORT_CHAIN - bad);
	for (i = 0; i < done_log.n; i++) {
		assert_ptr_equal(done_log.op[i], &ops[SHORT_CHAIN + bad + i]);
		assert_int_equal(done_log.status[i], -ENOMEM);
	}
	evr__sq_complete(&sq, last_posted(&sq), -ECANCELED);
	for (i = 0; i < n; i++)
		assert_int_equal(times_done[i], 1);
}

/* With a chain array as deep as the SQ (what a ctx gives its SQs), a
 * batch of any length is one post. */
static void test_one_post_with_chain(void **state)
{
	struct evr_stats st;
	struct evr__sq sq;
	unsigned i;

	(void)state;
	memset(&st, 0, sizeof(st));
	evr__sq_init(&sq, FAKE_QP, 1024, 16, on_done, &st, chain_of(1024));
	add_range(&sq, 0, 1000);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(mock.post_send_calls, 1);
	assert_int_equal(mock.posts[0].nwr, 1000);
	assert_int_equal(mock.posts[0].nsig, 63);
	assert_int_equal(st.post_send_calls, 1);
	assert_int_equal(mock_wrs.nsend, 1000);
	for (i = 0; i < 1000; i++)
		assert_true(mock_wrs.send[i].wr_id == (uintptr_t)&ops[i].h);
	/* a second batch reuses the array */
	complete_signaled(&sq, 0, 1000);
	add_range(&sq, 1000, 10);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(mock.post_send_calls, 2);
	assert_int_equal(mock_wrs.send[1009].wr_id, (uintptr_t)&ops[1009].h);
}

/* Each kind of WR is built with the fields its opcode needs. */
static void test_build_opcodes(void **state)
{
	static const struct {
		enum ibv_wr_opcode opcode;
		uint32_t len;
	} cases[] = {
	    {IBV_WR_SEND, 64},
	    {IBV_WR_RDMA_WRITE, 0}, /* a keepalive probe: no SGE, no key */
	    {IBV_WR_RDMA_WRITE, 100},
	    {IBV_WR_RDMA_WRITE_WITH_IMM, 7},
	    {IBV_WR_RDMA_READ, 4096},
	    {IBV_WR_ATOMIC_FETCH_AND_ADD, 8},
	    {IBV_WR_ATOMIC_CMP_AND_SWP, 8},
	};
	struct evr__sq sq;
	unsigned i, n = sizeof(cases) / sizeof(cases[0]);

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 1, on_done, NULL, chain_of(64));
	for (i = 0; i < n; i++) {
		struct evr__op *op = &ops[i];

		op->opcode = (uint8_t)cases[i].opcode;
		op->send_flags = IBV_SEND_INLINE;
		op->wqe.len = cases[i].len;
		op->wqe.laddr = (uintptr_t)mem + 0x100 * (i + 1);
		op->wqe.lkey = 10 + i;
		if (cases[i].len) {
			op->wqe.raddr = 0x900000 + i;
			op->wqe.rkey = 20 + i;
		}
		op->wqe.imm = 0xabcd0000 + i;
		op->u.rma.compare_add = 30 + i;
		op->u.rma.swap = 40 + i;
		evr__sq_add(&sq, op);
	}
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(mock_wrs.nsend, n);
	for (i = 0; i < n; i++) {
		const struct mock_wr *w = &mock_wrs.send[i];
		bool rdma = cases[i].opcode != IBV_WR_SEND;
		bool atomic = cases[i].opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
			      cases[i].opcode == IBV_WR_ATOMIC_CMP_AND_SWP;

		assert_int_equal(w->opcode, cases[i].opcode);
		assert_int_equal(w->flags, IBV_SEND_INLINE | IBV_SEND_SIGNALED);
		assert_int_equal(w->len, cases[i].len);
		assert_int_equal(w->laddr,
				 cases[i].len ? (uintptr_t)mem + 0x100 * (i + 1) : 0);
		assert_int_equal(w->lkey, cases[i].len ? 10 + i : 0);
		assert_int_equal(w->raddr,
				 rdma && cases[i].len ? 0x900000 + i : 0);
		assert_int_equal(w->rkey, rdma && cases[i].len ? 20 + i : 0);
		assert_int_equal(w->imm,
				 cases[i].opcode == IBV_WR_RDMA_WRITE_WITH_IMM
					 ? 0xabcd0000 + i
					 : 0);
		assert_int_equal(w->compare_add, atomic ? 30 + i : 0);
		assert_int_equal(w->swap, atomic ? 40 + i : 0);
	}
}

/* A split op (a small message inline in two pieces): the WR gathers the
 * op's header (ihdr_len bytes: 8, or 12 with a call's id) and the
 * payload, in that order, inline; with no payload, the header alone.  A
 * split op built after a plain one in the same chain keeps its own SGEs
 * (two per WR in the array). */
static void test_build_split(void **state)
{
	static const uint8_t hdr[EVR__HDR_BYTES + 4] = {1, 2,  3,  4,  5,  6,
							7, 8, 9, 10, 11, 12};
	static const uint8_t payload[] = "0123456789abcdef";
	static const uint32_t lens[] = {16, 0, 5, 7};
	static const uint8_t hlens[] = {8, 8, 8, 12};
	struct evr__sq sq;
	unsigned i, n = sizeof(lens) / sizeof(lens[0]);

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 1, on_done, NULL, chain_of(64));
	/* a plain op first: its one SGE must not be overwritten */
	ops[0].opcode = IBV_WR_SEND;
	ops[0].wqe.laddr = (uintptr_t)mem;
	ops[0].wqe.len = 3;
	ops[0].wqe.lkey = 77;
	evr__sq_add(&sq, &ops[0]);
	for (i = 0; i < n; i++) {
		struct evr__op *op = &ops[1 + i];

		op->opcode = IBV_WR_SEND;
		op->split = true;
		op->send_flags = IBV_SEND_INLINE;
		memcpy(op->ihdr, hdr, sizeof(hdr));
		op->ihdr_len = hlens[i];
		op->ihdr[0] = (uint8_t)(0x40 + i);
		op->wqe.laddr = (uintptr_t)payload + i;
		op->wqe.len = lens[i];
		evr__sq_add(&sq, op);
	}
	memset(mem, 0x5a, 3);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(mock.post_send_calls, 1);
	assert_int_equal(mock_wrs.nsend, n + 1);
	assert_int_equal(mock_wrs.send[0].len, 3);
	assert_int_equal(mock_wrs.send[0].lkey, 77);
	assert_memory_equal(mock_wrs.send[0].data, mem, 3);
	for (i = 0; i < n; i++) {
		const struct mock_wr *w = &mock_wrs.send[1 + i];

		assert_int_equal(w->opcode, IBV_WR_SEND);
		assert_true(w->flags & IBV_SEND_INLINE);
		assert_int_equal(w->len, hlens[i] + lens[i]);
		assert_int_equal(w->data[0], 0x40 + i);
		assert_memory_equal(w->data + 1, hdr + 1, hlens[i] - 1u);
		if (lens[i])
			assert_memory_equal(w->data + hlens[i], payload + i,
					    lens[i]);
	}
}

/* A driver that fails without setting *bad: nothing can be assumed
 * posted, every op of the batch fails. */
static void test_post_failure_no_bad(void **state)
{
	struct evr__sq sq;
	unsigned i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 32, 4, on_done, NULL, chain_of(32));
	mock.post_send_rc = -EINVAL;
	mock.post_send_bad_idx = 1000; /* past the end: *bad = NULL */
	add_range(&sq, 0, 6);
	assert_int_equal(evr__sq_commit(&sq), -EINVAL);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(done_log.n, 6);
	for (i = 0; i < 6; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], -EINVAL);
	}
	assert_int_equal(evr__sq_room(&sq), 32);
}

/* A batch of one op (posted without the chain array): posted, it is
 * outstanding and completes once; refused, it fails once with the post's
 * error and leaves the SQ empty. */
static void test_single_op(void **state)
{
	struct evr__sq sq;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 8, 4, on_done, NULL, chain_of(8));
	add_range(&sq, 0, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(mock.post_send_calls, 1);
	assert_int_equal(mock_wrs.nsend, 1);
	assert_int_equal(mock_wrs.send[0].len, 0); /* op 0: i % 3 */
	assert_true(signaled(&ops[0])); /* the batch's tail */
	assert_int_equal(sq.outstanding, 1);
	assert_int_equal(sq.nbatch, 0);
	check_room(&sq);
	evr__sq_complete(&sq, &ops[0], 0);
	assert_int_equal(done_log.n, 1);
	assert_int_equal(done_log.status[0], 0);
	check_room(&sq);

	mock.post_send_rc = -ENOMEM;
	add_range(&sq, 1, 1);
	assert_int_equal(evr__sq_commit(&sq), -ENOMEM);
	assert_int_equal(done_log.n, 2);
	assert_ptr_equal(done_log.op[1], &ops[1]);
	assert_int_equal(done_log.status[1], -ENOMEM);
	assert_int_equal(times_done[1], 1);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(evr__sq_room(&sq), 8);
	check_room(&sq);
}

/* Abandon (QP destroyed without flushes): posted ops, then the open
 * batch, each completed once with the status. */
static void test_abandon(void **state)
{
	struct evr__sq sq;
	unsigned i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 64, 8, on_done, NULL, chain_of(64));
	add_range(&sq, 0, 20);
	assert_int_equal(evr__sq_commit(&sq), 0);
	evr__sq_complete(&sq, &ops[7], 0);
	add_range(&sq, 20, 5); /* not committed */
	evr__sq_abandon(&sq, -ECONNRESET);
	assert_int_equal(done_log.n, 25);
	for (i = 0; i < 25; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], i < 8 ? 0 : -ECONNRESET);
		assert_int_equal(times_done[i], 1);
	}
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(qlen(&sq.batch), 0);
	assert_int_equal(evr__sq_room(&sq), 64);
	/* twice is harmless */
	evr__sq_abandon(&sq, -ECONNRESET);
	assert_int_equal(done_log.n, 25);
	assert_int_equal(mock.post_send_calls, 1);
}

/* One direct WR (evr__sq_post_direct), its wr_id DIRECT_ID: a 3-byte
 * header and a 5-byte payload. */
#define DIRECT_ID ((uint64_t)0xd1ec7)
static const uint8_t direct_hdr[3] = {0xa1, 0xa2, 0xa3};
static const uint8_t direct_pay[5] = {1, 2, 3, 4, 5};
static int post_direct(struct evr__sq *sq)
{
	return evr__sq_post_direct(sq, direct_hdr, sizeof(direct_hdr),
				   direct_pay, sizeof(direct_pay), 0, DIRECT_ID);
}

/*
 * WRs posted without an op (a reply's direct way): each takes a slot and
 * counts towards the signal interval; never signaled, they are known
 * complete with the next op's completion, once each, in order.  A flush
 * or an error completion of one completes the ops before it.  The direct
 * way is closed while a batch is open, when the interval is one WR away,
 * and when the SQ is full; a failed post counts nothing.
 */
static void test_direct(void **state)
{
	struct evr_stats st;
	struct evr__sq sq;
	unsigned i;

	(void)state;
	memset(&st, 0, sizeof(st));
	evr__sq_init(&sq, FAKE_QP, 64, 8, on_done, &st, chain_of(64));
	assert_true(evr__sq_direct_ok(&sq));
	assert_int_equal(post_direct(&sq), 0);
	assert_int_equal(post_direct(&sq), 0);
	assert_int_equal(sq.anon_head, 2);
	assert_int_equal(sq.unsig_run, 2);
	assert_true(evr__sq_open_tail(&sq));
	check_room(&sq);
	assert_int_equal(mock.post_send_calls, 2);
	assert_true(mock_wrs.send[0].wr_id == DIRECT_ID);
	assert_int_equal(mock_wrs.send[0].opcode, IBV_WR_SEND);
	assert_int_equal(mock_wrs.send[0].flags, IBV_SEND_INLINE);
	/* header then payload, gathered by the post */
	assert_int_equal(mock_wrs.send[0].len, 8);
	assert_memory_equal(mock_wrs.send[0].data, direct_hdr, 3);
	assert_memory_equal(mock_wrs.send[0].data + 3, direct_pay, 5);
	assert_int_equal(st.send_wrs, 2);
	assert_int_equal(st.post_send_calls, 2);

	/* a quiet op, another direct WR, then an op that waits: signaled */
	ops[0].quiet = true;
	add_range(&sq, 0, 1);
	assert_false(evr__sq_direct_ok(&sq)); /* the batch is open */
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_false(signaled(&ops[0]));
	assert_int_equal(post_direct(&sq), 0);
	assert_int_equal(ops[0].anon_after, 1);
	assert_true(evr__sq_open_tail(&sq));
	add_range(&sq, 1, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_true(signaled(&ops[1]));
	assert_false(evr__sq_open_tail(&sq));
	assert_int_equal(sq.outstanding, 5);
	check_room(&sq);
	evr__sq_complete(&sq, &ops[1], 0);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(sq.anon_head, 0);
	assert_int_equal(done_log.n, 2);
	for (i = 0; i < 2; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(done_log.status[i], 0);
	}

	/* the interval: after 6 direct WRs the 7th would need the 8th to be
	 * signaled by an op, so the direct way closes at 7 */
	for (i = 0; i < 7; i++) {
		assert_true(evr__sq_direct_ok(&sq));
		assert_int_equal(post_direct(&sq), 0);
	}
	assert_false(evr__sq_direct_ok(&sq));
	add_range(&sq, 2, 1); /* the 8th: signaled although quiet */
	ops[2].quiet = true;
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_true(signaled(&ops[2]));
	assert_true(evr__sq_direct_ok(&sq));
	evr__sq_complete(&sq, &ops[2], 0);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(done_log.n, 3);

	/* a flush: direct, quiet op, direct, direct -- each CQE in order */
	assert_int_equal(post_direct(&sq), 0);
	ops[3].quiet = true;
	add_range(&sq, 3, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(post_direct(&sq), 0);
	assert_int_equal(post_direct(&sq), 0);
	check_room(&sq);
	evr__sq_complete_direct(&sq, -ECANCELED);
	assert_int_equal(done_log.n, 3);
	assert_int_equal(sq.outstanding, 3);
	evr__sq_complete(&sq, &ops[3], -ECANCELED);
	assert_int_equal(done_log.n, 4);
	assert_int_equal(done_log.status[3], -ECANCELED);
	assert_int_equal(sq.outstanding, 2);
	evr__sq_complete_direct(&sq, -ECANCELED);
	evr__sq_complete_direct(&sq, -ECANCELED);
	assert_int_equal(sq.outstanding, 0);
	check_room(&sq);

	/* an error on a direct WR: the quiet op before it had succeeded */
	ops[4].quiet = true;
	add_range(&sq, 4, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(post_direct(&sq), 0);
	evr__sq_complete_direct(&sq, -ETIMEDOUT);
	assert_int_equal(done_log.n, 5);
	assert_ptr_equal(done_log.op[4], &ops[4]);
	assert_int_equal(done_log.status[4], 0);
	assert_int_equal(sq.outstanding, 0);

	/* a failed post counts nothing */
	mock.post_send_rc = ENOMEM;
	assert_int_equal(post_direct(&sq), ENOMEM);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(sq.anon_head, 0);
	mock.post_send_rc = 0;

	/* abandon: the direct WRs' slots come back too */
	assert_int_equal(post_direct(&sq), 0);
	ops[5].quiet = true;
	add_range(&sq, 5, 1);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(post_direct(&sq), 0);
	evr__sq_abandon(&sq, -ECONNRESET);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(sq.anon_head, 0);
	assert_int_equal(done_log.n, 6);
	assert_int_equal(done_log.status[5], -ECONNRESET);
	assert_int_equal(evr__sq_room(&sq), 64);

	/* a full SQ: no direct way */
	evr__sq_init(&sq, FAKE_QP, 4, 4, on_done, NULL, chain_of(4));
	assert_int_equal(sq.interval, 2);
	add_range(&sq, 6, 4);
	assert_int_equal(evr__sq_commit(&sq), 0);
	assert_int_equal(evr__sq_room(&sq), 0);
	assert_false(evr__sq_direct_ok(&sq));
	for (i = 0; i < 6; i++)
		assert_int_equal(times_done[i], 1);

	/* no payload: the header alone, in one piece */
	mock_reset();
	evr__sq_init(&sq, FAKE_QP, 8, 4, on_done, NULL, chain_of(8));
	assert_int_equal(evr__sq_post_direct(&sq, direct_hdr, 3, NULL, 0, 0,
					     DIRECT_ID),
			 0);
	assert_int_equal(mock_wrs.nsend, 1);
	assert_int_equal(mock_wrs.send[0].len, 3);
	assert_memory_equal(mock_wrs.send[0].data, direct_hdr, 3);
	assert_int_equal(mock_wrs.send[0].opcode, IBV_WR_SEND);
	assert_int_equal(sq.anon_head, 1);

	/* the header in immediate data: the payload alone, in one piece,
	 * as a SEND with that immediate data */
	mock_reset();
	evr__sq_init(&sq, FAKE_QP, 8, 4, on_done, NULL, chain_of(8));
	assert_int_equal(evr__sq_post_direct(&sq, NULL, 0, direct_pay,
					     sizeof(direct_pay),
					     htobe32(0xe1000005u), DIRECT_ID),
			 0);
	assert_int_equal(mock_wrs.nsend, 1);
	assert_int_equal(mock_wrs.send[0].opcode, IBV_WR_SEND_WITH_IMM);
	assert_int_equal(mock_wrs.send[0].imm, htobe32(0xe1000005u));
	assert_int_equal(mock_wrs.send[0].laddr, (uintptr_t)direct_pay);
	assert_int_equal(mock_wrs.send[0].len, sizeof(direct_pay));
	assert_memory_equal(mock_wrs.send[0].data, direct_pay,
			    sizeof(direct_pay));
	assert_int_equal(sq.anon_head, 1);
}

/* Fill to the brim repeatedly, completing at random points: room stays
 * within [0, depth] and every op completes exactly once, in order. */
static void test_room_accounting(void **state)
{
	struct evr__sq sq;
	unsigned seed = 7, next = 0, completed = 0, i;

	(void)state;
	evr__sq_init(&sq, FAKE_QP, 100, 16, on_done, NULL, chain_of(100));
	while (next < MAX_OPS) {
		unsigned n;

		seed = seed * 1103515245u + 12345u;
		n = (seed >> 8) % (evr__sq_room(&sq) + 1);
		if (next + n > MAX_OPS)
			n = MAX_OPS - next;
		add_range(&sq, next, n);
		assert_int_equal(evr__sq_commit(&sq), 0);
		check_room(&sq);
		next += n;
		/* the HCA completes a random prefix of the posted ops */
		seed = seed * 1103515245u + 12345u;
		n = (seed >> 8) % (next - completed + 1);
		for (i = completed; i < completed + n; i++)
			if (signaled(&ops[i])) {
				evr__sq_complete(&sq, &ops[i], 0);
				check_room(&sq);
			}
		completed = next - sq.outstanding;
	}
	evr__sq_complete(&sq, last_posted(&sq), 0);
	assert_int_equal(sq.outstanding, 0);
	assert_int_equal(evr__sq_room(&sq), 100);
	assert_int_equal(done_log.n, MAX_OPS);
	for (i = 0; i < MAX_OPS; i++) {
		assert_ptr_equal(done_log.op[i], &ops[i]);
		assert_int_equal(times_done[i], 1);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup(test_chains_per_batch, setup),
	    cmocka_unit_test_setup(test_one_post_with_chain, setup),
	    cmocka_unit_test_setup(test_build_opcodes, setup),
	    cmocka_unit_test_setup(test_build_split, setup),
	    cmocka_unit_test_setup(test_signal_interval, setup),
	    cmocka_unit_test_setup(test_interval_clamped, setup),
	    cmocka_unit_test_setup(test_quiet_tail, setup),
	    cmocka_unit_test_setup(test_waiting_before_quiet_tail, setup),
	    cmocka_unit_test_setup(test_complete_in_order, setup),
	    cmocka_unit_test_setup(test_complete_flush, setup),
	    cmocka_unit_test_setup(test_complete_error, setup),
	    cmocka_unit_test_setup(test_post_failure_mid_chain, setup),
	    cmocka_unit_test_setup(test_post_failure_later_chain, setup),
	    cmocka_unit_test_setup(test_post_failure_no_bad, setup),
	    cmocka_unit_test_setup(test_single_op, setup),
	    cmocka_unit_test_setup(test_abandon, setup),
	    cmocka_unit_test_setup(test_room_accounting, setup),
	    cmocka_unit_test_setup(test_direct, setup),
	};

	return cmocka_run_group_tests_name("sq", tests, NULL, NULL);
}
