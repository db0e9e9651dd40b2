/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The message layer (lib/msg.c) and the conn's flush (lib/conn.c) on an
 * established connection, against the peer fixture: what goes on the wire
 * is decoded from the WRs our side posted, what the peer sends arrives as
 * receive completions.
 *
 * Cases: eager bytes and piggybacked credits; the sender stops when only
 * the reserve is left and resumes on a credit update; an explicit credit
 * update once a quarter of the receive queue is owed, not before;
 * rendezvous send (REQ with the buffer's address, length and key; the
 * callback only after both the REQ's completion and the FIN); rendezvous
 * receive (RDMA READs of the advertised buffer in port-sized chunks, FIN,
 * the bytes delivered); an eager message behind a rendezvous waits for it;
 * a held message keeps its receive buffer until released, and outlives
 * its conn; write with immediate data; vectored sends, eager and
 * rendezvous (gathered into a copy); rendezvous at the end of a conn; a
 * failed receive post.
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

#include "peer.h"

struct fix {
	evr_ctx *ctx;
	struct peer p;
};

/* port_max_msg_sz: what the port carries in one message (0: the mock's
 * default). */
static int setup_port(void **state, const struct evr_ctx_opts *o,
		      uint32_t port_max_msg_sz)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	peer_mocks_reset();
	mock_cm.port_max_msg_sz = port_max_msg_sz;
	f->ctx = peer_start(&f->p, o);
	peer_connect(&f->p);
	*state = f;
	return 0;
}

static int setup_opts(void **state, const struct evr_ctx_opts *o)
{
	return setup_port(state, o, 0);
}

static int setup(void **state)
{
	return setup_opts(state, NULL);
}

/* The port carries at most 64 KiB in one RDMA READ. */
static int setup_small_port(void **state)
{
	return setup_port(state, NULL, 64 << 10);
}

static int teardown(void **state)
{
	struct fix *f = *state;

	peer_stop(&f->p);
	free(f);
	return 0;
}

/* The next frame our side sent; it must be a well-formed message. */
static void next_msg(struct peer *p, struct peer_frame *fr)
{
	assert_true(peer_next(p, fr));
	assert_int_equal(fr->wr.opcode, IBV_WR_SEND);
	assert_true(fr->parsed);
}

/* An eager message goes out as one SEND: header and bytes; its callback
 * fires once, with 0, when the SEND completes (not before). */
static void test_eager_send(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	const char msg[] = "hello, peer";

	peer_send_op(p, msg, sizeof(msg), 0);
	assert_int_equal(peer_unread(p), 0); /* never inside the call */
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.len, sizeof(msg));
	assert_memory_equal(fr.msg.payload, msg, sizeof(msg));
	assert_int_equal(fr.msg.hdr.credits, 0); /* nothing owed yet */
	assert_false(peer_next(p, &fr));
	assert_int_equal(p->op_calls[0], 0);
	peer_ack_op(p, 0);
}

/* The peer posts 8 receives and keeps 2 for control messages: 6 data
 * messages go, the rest wait; a credit update lets exactly as many more go
 * as it returns; every callback fires once, in order. */
static void test_credit_stop_and_resume(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	char buf[10][8];
	unsigned i, n = 0;

	for (i = 0; i < 10; i++) {
		memset(buf[i], 'a' + (int)i, sizeof(buf[i]));
		assert_int_equal(evr_send(p->conn, buf[i], sizeof(buf[i]),
					  peer_op_cb, peer_op_arg(p, i)),
				 0);
	}
	peer_pump(f->ctx);
	while (peer_next(p, &fr)) {
		assert_true(fr.parsed);
		assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
		assert_memory_equal(fr.msg.payload, buf[n], 8);
		n++;
	}
	assert_int_equal(n, 6);
	assert_int_equal(peer_send_credits(p->conn), 2);
	/* completions are not credits: still stopped */
	peer_ack(p);
	peer_pump(f->ctx);
	assert_false(peer_next(p, &fr));
	assert_int_equal(p->nop_calls, 6);

	peer_credit(p, 3);
	peer_pump(f->ctx);
	for (i = 0; i < 3; i++) {
		next_msg(p, &fr);
		assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
		assert_memory_equal(fr.msg.payload, buf[6 + i], 8);
	}
	assert_false(peer_next(p, &fr));
	/* credits on an eager message count as well */
	peer_eager(p, "x", 1, 1);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_memory_equal(fr.msg.payload, buf[9], 8);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->nop_calls, 10);
	for (i = 0; i < 10; i++) {
		assert_int_equal(p->op_calls[i], 1);
		assert_int_equal(p->op_status[i], 0);
		assert_int_equal(p->op_order[i], i);
	}
}

/* Credits we owe ride on the next message; alone, they wait until a
 * quarter of our 8 receives (2) is owed, then go in an update of their
 * own. */
static void test_credit_piggyback_and_update(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct evr_stats st;

	peer_eager(p, "one", 3, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 1);
	assert_false(peer_next(p, &fr)); /* 1 owed: below the threshold */

	assert_int_equal(evr_send(p->conn, "ours", 4, NULL, NULL), 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.hdr.credits, 1);

	peer_eager(p, "two", 3, 0);
	peer_pump(f->ctx);
	assert_false(peer_next(p, &fr));
	peer_eager(p, "three", 5, 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_CREDIT);
	assert_int_equal(fr.msg.hdr.credits, 2);
	assert_int_equal(fr.msg.hdr.len, 0);
	assert_false(peer_next(p, &fr));
	evr_ctx_stats(f->ctx, &st);
	assert_int_equal(st.credit_updates, 1);
	assert_int_equal(p->nmsgs, 3);
	assert_memory_equal(p->msgs[2].data, "three", 5);
	/* the receive one update of the peer's takes never calls for an
	 * update back: updates cannot echo */
	peer_credit(p, 0);
	peer_pump(f->ctx);
	assert_false(peer_next(p, &fr));
}

/* A peer returning more credits than were used is broken: -EPROTO. */
static void test_credit_overflow(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_credit(p, 1); /* nothing was sent */
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
}

/* A message above the eager size goes by rendezvous: the REQ names our
 * buffer, its length and the key of a registration covering it; the
 * callback waits for both the REQ's completion and the FIN. */
static void test_rndv_send(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t big[5000];
	struct ibv_mr *mr;
	uint32_t id;

	memset(big, 0x5a, sizeof(big));
	peer_send_op(p, big, sizeof(big), 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	assert_int_equal(fr.msg.rndv.addr, (uintptr_t)big);
	assert_int_equal(fr.msg.rndv.len, sizeof(big));
	mr = mock_mr_find(big, sizeof(big));
	assert_non_null(mr);
	assert_int_equal(fr.msg.rndv.rkey, mr->rkey);
	/* the peer may read the message's bytes, none beside them */
	assert_ptr_equal(mr->addr, big);
	assert_int_equal(mr->length, sizeof(big));
	id = fr.msg.rndv.id;

	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 0); /* the FIN is still to come */
	peer_fin(p, id, 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], 0);

	/* FIN first, then the completion: the same, once */
	peer_send_op(p, big, sizeof(big), 1);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	assert_int_not_equal(fr.msg.rndv.id, id);
	peer_fin(p, fr.msg.rndv.id, 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[1], 0);
	peer_ack_op(p, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* The peer's FIN may report that its read failed: the send fails with
 * that status, the conn stays up. */
static void test_rndv_send_fin_error(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t big[3000];

	peer_send_op(p, big, sizeof(big), 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	peer_ack(p);
	peer_fin(p, fr.msg.rndv.id, -ENOMEM, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], -ENOMEM);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* The peer's rendezvous: our side reads its buffer in chunks of the
 * port's largest message, at the advertised address and key, then sends
 * the FIN and delivers the bytes; an eager message that came behind the
 * REQ is delivered after it. */
/* The rendezvous message src[len] was delivered whole, then the eager
 * "after" behind it, and the FIN for id went out. */
static void expect_rndv_then_after(struct peer *p, const uint8_t *src,
				   size_t len, uint32_t id)
{
	struct peer_frame fr;

	assert_int_equal(p->nmsgs, 2);
	assert_int_equal(p->msgs[0].len, len);
	assert_memory_equal(p->msgs[0].data, src, len);
	assert_int_equal(p->msgs[1].len, 5);
	assert_memory_equal(p->msgs[1].data, "after", 5);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
	assert_int_equal(fr.msg.fin_id, id);
	assert_int_equal(fr.msg.fin_status, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

static void test_rndv_recv_chunks_and_order(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	const size_t len = 200000, chunk = 64 << 10;
	uint8_t *src = malloc(len);
	size_t off = 0, i;
	unsigned reads = 0;

	assert_non_null(src);
	for (i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 7 + 3);
	peer_rndv_req(p, src, len, 0xbeef, 41, 0);
	peer_eager(p, "after", 5, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 0); /* the eager one waits */

	while (peer_next(p, &fr)) {
		assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
		assert_int_equal(fr.wr.raddr, (uintptr_t)src + off);
		assert_int_equal(fr.wr.rkey, 0xbeef);
		assert_int_equal(fr.wr.len, EVR__MIN(chunk, len - off));
		off += fr.wr.len;
		reads++;
	}
	assert_int_equal(reads, 4);
	assert_int_equal(off, len);

	peer_ack(p);
	peer_pump(f->ctx);
	expect_rndv_then_after(p, src, len, 41);
	free(src);
}

/* Under a locked-memory limit a message larger than an eighth of it is
 * not registered whole: one chunk is read at a time into a registered
 * staging buffer and copied out; the bytes, the order and the FIN are as
 * before, and what the ctx registered stays below the message's size. */
static void test_rndv_recv_staged(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct evr_stats st;
	const size_t len = 200000, chunk = 64 << 10;
	uint8_t *src = malloc(len);
	uint64_t reg0;
	size_t off = 0, i;

	assert_non_null(src);
	for (i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 13 + 5);
	f->ctx->memlock = 1 << 20; /* as if ulimit -l 1024: staged > 128 KiB */
	evr_ctx_stats(f->ctx, &st);
	reg0 = st.reg_bytes;
	peer_rndv_req(p, src, len, 0xbeef, 42, 0);
	peer_eager(p, "after", 5, 0);
	peer_pump(f->ctx);
	while (off < len) {
		assert_true(peer_next(p, &fr));
		assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
		assert_int_equal(fr.wr.raddr, (uintptr_t)src + off);
		assert_int_equal(fr.wr.len, EVR__MIN(chunk, len - off));
		assert_false(peer_next(p, &fr)); /* one chunk at a time */
		evr_ctx_stats(f->ctx, &st);
		assert_true(st.reg_bytes - reg0 <= chunk);
		off += chunk < len - off ? chunk : len - off;
		assert_int_equal(p->nmsgs, 0);
		peer_ack(p);
		peer_pump(f->ctx);
	}
	expect_rndv_then_after(p, src, len, 42);
	free(src);
}

/* A read that ends before an earlier message's does not send its FIN
 * first: the sender matches FINs against its rendezvous sends in order.
 * A staged message (one chunk at a time) and a small one behind it are
 * read side by side; the small one's read ends first, its FIN waits for
 * the staged one's, and both arrive whole and in order. */
static void test_rndv_recv_fin_order(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	const size_t len = 200000;
	static uint8_t small[4096];
	uint8_t *src = malloc(len);
	uint32_t fins[2];
	unsigned nfins = 0, rounds = 0;
	size_t i;

	assert_non_null(src);
	for (i = 0; i < len; i++)
		src[i] = (uint8_t)(i * 11 + 1);
	memset(small, 0x5a, sizeof(small));
	f->ctx->memlock = 1 << 20; /* staged above 128 KiB */
	peer_rndv_req(p, src, len, 0xbeef, 1, 0);
	peer_rndv_req(p, small, sizeof(small), 0xcafe, 2, 0);
	peer_pump(f->ctx);
	while (p->nmsgs < 2 && rounds++ < 16) {
		while (peer_next(p, &fr)) {
			if (fr.wr.opcode != IBV_WR_SEND ||
			    fr.msg.hdr.type == EVR_T_CREDIT)
				continue;
			assert_true(fr.parsed);
			assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
			assert_int_equal(fr.msg.fin_status, 0);
			assert_true(nfins < 2);
			fins[nfins++] = fr.msg.fin_id;
		}
		peer_ack(p);
		peer_pump(f->ctx);
	}
	while (peer_next(p, &fr)) {
		assert_int_equal(fr.wr.opcode, IBV_WR_SEND);
		if (fr.msg.hdr.type == EVR_T_CREDIT)
			continue;
		assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
		assert_true(nfins < 2);
		fins[nfins++] = fr.msg.fin_id;
	}
	assert_int_equal(nfins, 2);
	assert_int_equal(fins[0], 1);
	assert_int_equal(fins[1], 2);
	assert_int_equal(p->nmsgs, 2);
	assert_int_equal(p->msgs[0].len, len);
	assert_memory_equal(p->msgs[0].data, src, len);
	assert_int_equal(p->msgs[1].len, sizeof(small));
	assert_memory_equal(p->msgs[1].data, small, sizeof(small));
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
	free(src);
}

/* A staged read that fails (the peer's key is bad) ends the conn with
 * -EPROTO, as an unstaged one does, and leaks nothing. */
static void test_rndv_recv_staged_fails(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[300000];

	f->ctx->memlock = 1 << 20;
	peer_rndv_req(p, src, sizeof(src), 1, 1, 0);
	peer_pump(f->ctx);
	peer_fail_send(p, IBV_WC_REM_ACCESS_ERR);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
	assert_int_equal(p->nmsgs, 0);
}

/* Two messages in flight each way keep their order too: eager, rndv,
 * eager arrive as sent. */
static void test_rndv_recv_between_eager(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[4096];

	memset(src, 0xc3, sizeof(src));
	peer_eager(p, "first", 5, 0);
	peer_rndv_req(p, src, sizeof(src), 7, 1, 0);
	peer_eager(p, "third", 5, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 1);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 3);
	assert_memory_equal(p->msgs[0].data, "first", 5);
	assert_int_equal(p->msgs[1].len, sizeof(src));
	assert_memory_equal(p->msgs[1].data, src, sizeof(src));
	assert_memory_equal(p->msgs[2].data, "third", 5);
}

/* A rendezvous read the peer's device refuses (bad key) is the peer's
 * fault: -EPROTO. */
static void test_rndv_recv_bad_key(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[2048];

	peer_rndv_req(p, src, sizeof(src), 1, 1, 0);
	peer_pump(f->ctx);
	peer_fail_send(p, IBV_WC_REM_ACCESS_ERR);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
	assert_int_equal(p->nmsgs, 0);
}

/* A held message keeps its bytes and its receive buffer past on_recv; the
 * buffer is posted again only on release. */
static evr_msg *held;

static void hold_it(struct peer *p, const void *data, size_t len)
{
	(void)data;
	(void)len;
	held = evr_conn_hold(p->conn);
	assert_non_null(held);
	assert_ptr_equal(evr_conn_hold(p->conn), held); /* same handle */
}

static void test_hold_release(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	unsigned posted;

	assert_null(evr_conn_hold(p->conn)); /* not in on_recv */
	p->on_recv = hold_it;
	posted = peer_recvs_posted(p);
	peer_eager(p, "keep me", 7, 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(p->nmsgs, 1);
	assert_non_null(held);
	assert_int_equal(evr_msg_len(held), 7);
	assert_memory_equal(evr_msg_data(held), "keep me", 7);
	assert_int_equal(peer_recvs_posted(p), posted - 1);

	peer_eager(p, "not kept", 8, 0);
	peer_pump(f->ctx);
	assert_int_equal(peer_recvs_posted(p), posted - 1); /* reposted */
	assert_memory_equal(evr_msg_data(held), "keep me", 7);

	evr_msg_release(held);
	held = NULL;
	peer_pump(f->ctx);
	assert_int_equal(peer_recvs_posted(p), posted);
}

/* Held and released in the same callback: holding it again gives NULL
 * (its buffer went back with the release), and the buffer is posted again
 * once, not a second time when the callback returns; a message held in an
 * earlier callback stays as it was. */
static evr_msg *hrh_again;

static void hold_release_hold(struct peer *p, const void *data, size_t len)
{
	evr_msg *m = evr_conn_hold(p->conn);

	(void)data;
	(void)len;
	assert_non_null(m);
	evr_msg_release(m);
	hrh_again = evr_conn_hold(p->conn);
}

/* One message in, held (held); the receives posted before it. */
static unsigned hold_first(struct fix *f, const char *s)
{
	struct peer *p = &f->p;
	unsigned posted = peer_recvs_posted(p);

	p->on_recv = hold_it;
	peer_eager(p, s, strlen(s), 0);
	peer_pump(f->ctx);
	assert_non_null(held);
	assert_int_equal(peer_recvs_posted(p), posted - 1);
	return posted;
}

/* A second message through cb, which sets *again to what holding after
 * a release gave: NULL; its buffer is back, the first still held. */
static void second_rehold(struct fix *f, unsigned posted,
			  void (*cb)(struct peer *, const void *, size_t),
			  const char *s, evr_msg **again)
{
	struct peer *p = &f->p;

	p->on_recv = cb;
	*again = (evr_msg *)1;
	peer_eager(p, s, strlen(s), 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(p->nmsgs, 2);
	assert_null(*again);
	assert_int_equal(peer_recvs_posted(p), posted - 1);
}

static void test_hold_release_hold(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	unsigned posted = hold_first(f, "keep me");

	second_rehold(f, posted, hold_release_hold, "let go", &hrh_again);
	assert_int_equal(f->ctx->st.msgs_recv, 2);
	assert_memory_equal(evr_msg_data(held), "keep me", 7);

	peer_eager(p, "next", 4, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 3);
	assert_int_equal(peer_recvs_posted(p), posted - 1);
	evr_msg_release(held);
	held = NULL;
	peer_pump(f->ctx);
	assert_int_equal(peer_recvs_posted(p), posted);
}

/* A callback run inside another (evr__msg_redeliver: a call's held
 * reply, ended from within a delivery) may release the outer callback's
 * held copy: back in the outer callback that copy is gone, and holding
 * again gives NULL, never the released handle. */
static evr_msg *nest_outer, *nest_inner, *nest_again;
static char nest_seen[8];

static void nest_inner_fn(evr_conn *c, const void *data, size_t len,
			  void *arg)
{
	(void)arg;
	assert_true(len < sizeof(nest_seen));
	memcpy(nest_seen, data, len);
	evr_msg_release(nest_outer);
	nest_inner = evr_conn_hold(c); /* the redelivered one, taken over */
	assert_non_null(nest_inner);
}

static void nest_outer_fn(struct peer *p, const void *data, size_t len)
{
	(void)data;
	(void)len;
	nest_outer = evr_conn_hold(p->conn);
	assert_non_null(nest_outer);
	evr__msg_redeliver(p->conn, held, nest_inner_fn, NULL);
	held = NULL; /* taken over by nest_inner */
	nest_again = evr_conn_hold(p->conn);
}

static void test_redeliver_releases_outer(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	unsigned posted = hold_first(f, "inner");

	/* the outer buffer is back, once; the inner one held anew */
	second_rehold(f, posted, nest_outer_fn, "outer", &nest_again);
	assert_memory_equal(nest_seen, "inner", 5);
	assert_int_equal(evr_msg_len(nest_inner), 5);
	assert_memory_equal(evr_msg_data(nest_inner), "inner", 5);
	assert_null(p->conn->held_up);
	evr_msg_release(nest_inner);
	nest_inner = NULL;
	peer_pump(f->ctx);
	assert_int_equal(peer_recvs_posted(p), posted);
}

/* A held message outlives its conn. */
static void test_hold_outlives_conn(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	p->on_recv = hold_it;
	peer_eager(p, "survivor", 8, 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_non_null(held);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->closes, 1);
	assert_memory_equal(evr_msg_data(held), "survivor", 8);
	evr_msg_release(held);
	held = NULL;
}

/* Held messages hold credits back: with all but the reserve held, the
 * credits owed go out at once however few, so the peer is never stuck. */
static evr_msg *helds[8];
static unsigned nheld;

static void hold_all(struct peer *p, const void *data, size_t len)
{
	(void)data;
	(void)len;
	helds[nheld++] = evr_conn_hold(p->conn);
}

static void test_hold_starved_peer(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	unsigned i;

	p->on_recv = hold_all;
	for (i = 0; i < 6; i++)
		peer_eager(p, "h", 1, 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(nheld, 6);
	assert_false(peer_next(p, &fr)); /* nothing owed: all held */
	evr_msg_release(helds[0]);
	peer_pump(f->ctx);
	/* one buffer back, and the peer holds only the reserve: tell it */
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_CREDIT);
	assert_int_equal(fr.msg.hdr.credits, 1);
	for (i = 1; i < 6; i++)
		evr_msg_release(helds[i]);
	nheld = 0;
}

/* A write with immediate data reaches on_imm with the value in host
 * order, and its receive is posted again. */
static void test_write_imm_recv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	unsigned posted = peer_recvs_posted(p);

	peer_write_imm(p, 0xdeadbeef);
	peer_pump(f->ctx);
	assert_int_equal(p->imms, 1);
	assert_int_equal(p->imm, 0xdeadbeef);
	assert_int_equal(peer_recvs_posted(p), posted);
	assert_int_equal(p->nmsgs, 0);
}

/* evr_sendv gathers its iovecs into one eager message. */
static void test_sendv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct iovec iov[3] = {
		{(void *)"abc", 3}, {(void *)"", 0}, {(void *)"defg", 4}};

	assert_int_equal(evr_sendv(p->conn, iov, 3, peer_op_cb,
				   peer_op_arg(p, 0)),
			 0);
	memset(iov, 0, sizeof(iov)); /* the array may be reused at once */
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.len, 7);
	assert_memory_equal(fr.msg.payload, "abcdefg", 7);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
}

/* A rendezvous send whose FIN never comes: the peer vanishes, the send
 * ends once with -ECONNRESET, before on_close. */
static void test_rndv_send_peer_gone(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t big[3000];

	peer_send_op(p, big, sizeof(big), 0);
	peer_pump(f->ctx);
	peer_ack(p);
	peer_pump(f->ctx);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], -ECONNRESET);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->ops_at_close, 1);
}

/* A graceful close waits for the FIN of a rendezvous send. */
static void test_rndv_send_close_waits_for_fin(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t big[3000];

	peer_send_op(p, big, sizeof(big), 0);
	assert_int_equal(evr_conn_close(p->conn, 0), 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_CLOSING);
	assert_false(peer_next(p, &fr)); /* no BYE before the FIN */
	peer_fin(p, fr.msg.rndv.id, 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], 0);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_BYE);
	peer_ack(p);
	peer_pump(f->ctx);
	peer_flush_closed(p, 0);
}

/* The conn ends while our rendezvous reads are posted, an eager message
 * waiting behind them: nothing is delivered, nothing leaks. */
static void test_rndv_recv_aborted(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[200000];

	peer_rndv_req(p, src, sizeof(src), 5, 1, 0);
	peer_eager(p, "behind", 6, 0);
	peer_pump(f->ctx);
	assert_true(peer_unread(p) >= 1);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	peer_flush_closed(p, -ECANCELED);
	assert_int_equal(p->nmsgs, 0);
}

/* A held rendezvous message keeps its bytes after release of the rest,
 * and is freed with the ctx if never released. */
static void test_hold_rndv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[5000];

	memset(src, 0x11, sizeof(src));
	p->on_recv = hold_it;
	peer_rndv_req(p, src, sizeof(src), 5, 1, 0);
	peer_pump(f->ctx);
	peer_ack(p);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_non_null(held);
	assert_int_equal(evr_msg_len(held), sizeof(src));
	assert_memory_equal(evr_msg_data(held), src, sizeof(src));
	held = NULL; /* left to evr_ctx_destroy */
}

/* A vectored rendezvous is gathered into a buffer of its own: the REQ
 * names that copy, which holds the iovecs' bytes in order. */
static void test_sendv_rndv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t a[2000], b[1500];
	struct iovec iov[2] = {{a, sizeof(a)}, {b, sizeof(b)}};
	const uint8_t *copy;

	memset(a, 'a', sizeof(a));
	memset(b, 'b', sizeof(b));
	assert_int_equal(evr_sendv(p->conn, iov, 2, peer_op_cb,
				   peer_op_arg(p, 0)),
			 0);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	assert_int_equal(fr.msg.rndv.len, sizeof(a) + sizeof(b));
	copy = (const uint8_t *)(uintptr_t)fr.msg.rndv.addr;
	assert_true(copy != a && copy != b);
	assert_non_null(mock_mr_find(copy, fr.msg.rndv.len));
	assert_memory_equal(copy, a, sizeof(a));
	assert_memory_equal(copy + sizeof(a), b, sizeof(b));
	peer_ack(p);
	peer_fin(p, fr.msg.rndv.id, 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], 0);
}

/* Posting a receive again fails: the conn ends with that error. */
static void test_post_recv_fails(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	mock.post_recv_rc = -ENOMEM;
	peer_eager(p, "m", 1, 0);
	peer_pump(f->ctx);
	mock.post_recv_rc = 0;
	assert_int_equal(p->nmsgs, 1);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -ENOMEM);
}

/* Destroying the ctx in the middle of everything: our reads posted, an
 * eager message behind them, a rendezvous send waiting for its FIN, an
 * eager send queued, a message held.  Each op once, on_close once, all
 * -ECANCELED; nothing leaks, nothing is touched after it is freed. */
static void test_ctx_destroy_busy(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	static uint8_t src[100000], big[4000];

	p->on_recv = hold_it;
	peer_eager(p, "held", 4, 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_non_null(held);
	peer_rndv_req(p, src, sizeof(src), 5, 1, 0);
	peer_eager(p, "behind", 6, 0);
	peer_send_op(p, big, sizeof(big), 0);
	peer_pump(f->ctx);
	peer_ack(p); /* the REQ's send completes; the reads too, unseen */
	peer_send_op(p, "q", 1, 1);
	evr_ctx_destroy(f->ctx);
	f->ctx = f->p.ctx = NULL;
	held = NULL; /* freed with the ctx */
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], -ECANCELED);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_status[1], -ECANCELED);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->close_status, -ECANCELED);
	assert_int_equal(p->ops_at_close, 2);
	assert_int_equal(p->nmsgs, 1);
}

/* Sizes: above the peer's largest message is refused at once. */
static void test_send_too_large(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	assert_int_equal(evr_send(p->conn, p, (1u << 20) + 1, peer_op_cb,
				  peer_op_arg(p, 0)),
			 -EMSGSIZE);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 0);
	assert_int_equal(peer_unread(p), 0);
}

/* ---- FINs carried by data (EVR_F_FIN) ---- */

/* The peer speaks EVR_HS_F_FIN. */
static int setup_fin(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	peer_mocks_reset();
	f->ctx = peer_start(&f->p, NULL);
	f->p.fin = true;
	peer_connect(&f->p);
	*state = f;
	return 0;
}

/* setup with the variable name set to value on our side, for the ctx's
 * creation alone. */
static int setup_env(void **state, const char *name, const char *value,
		     int (*setup_fn)(void **))
{
	int rc;

	assert_int_equal(setenv(name, value, 1), 0);
	rc = setup_fn(state);
	unsetenv(name);
	return rc;
}

/* The same, with EVR_FIN=alone on our side: the handshake leaves the
 * extension off. */
static int setup_fin_alone(void **state)
{
	return setup_env(state, "EVR_FIN", "alone", setup_fin);
}

static size_t reply_len; /* what answer_recv sends from on_recv */

static void answer_recv(struct peer *p, const void *data, size_t len)
{
	static uint8_t reply[4000];

	(void)data;
	(void)len;
	memset(reply, 0x6b, sizeof(reply));
	assert_true(reply_len <= sizeof(reply));
	assert_int_equal(evr_send(p->conn, reply, reply_len, NULL, NULL), 0);
}

/* The peer's rendezvous message of 3000 bytes (id 41) is read and
 * delivered, and on_recv answers with reply_len bytes. */
static void rndv_in_answered(struct fix *f, size_t rlen)
{
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t src[3000];

	memset(src, 0x3c, sizeof(src));
	reply_len = rlen;
	p->on_recv = answer_recv;
	peer_rndv_req(p, src, sizeof(src), 0xbeef, 41, 0);
	peer_pump(f->ctx);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
	peer_ack(p);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(p->nmsgs, 1);
	assert_int_equal(p->msgs[0].len, sizeof(src));
	assert_memory_equal(p->msgs[0].data, src, sizeof(src));
}

/* The next frame is the peer's FIN for 41, alone. */
static void expect_fin_alone(struct peer *p)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
	assert_int_equal(fr.msg.fin_id, 41);
	assert_int_equal(fr.msg.fin_status, 0);
}

/* The next frame is the reply of rlen bytes, of type, carrying the FIN
 * for 41 or not. */
static void expect_reply(struct peer *p, uint8_t type, size_t rlen,
			 bool fin)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, type);
	assert_int_equal(!!(fr.msg.hdr.flags & EVR_F_FIN), fin);
	assert_int_equal(fr.msg.fin, fin);
	if (fin) {
		assert_int_equal(fr.msg.fin_id, 41);
		assert_int_equal(fr.msg.fin_status, 0);
	}
	if (type == EVR_T_EAGER) {
		assert_int_equal(fr.msg.plen, rlen);
		assert_int_equal(fr.msg.hdr.len,
				 rlen + (fin ? EVR_RNDV_FIN_SIZE : 0));
		if (rlen) {
			const uint8_t *d = fr.msg.payload;

			assert_int_equal(d[0], 0x6b);
			assert_int_equal(d[rlen - 1], 0x6b);
		}
	} else {
		assert_int_equal(fr.msg.rndv.len, rlen);
	}
}

/* A reply sent from on_recv carries the FIN of the message it answers:
 * one message, not two. */
static void test_fin_carried_eager(void **state)
{
	struct fix *f = *state;

	rndv_in_answered(f, 4);
	expect_reply(&f->p, EVR_T_EAGER, 4, true);
	assert_int_equal(peer_unread(&f->p), 0);
	assert_int_equal(f->p.conn->state, EVR_CS_ESTABLISHED);
}

/* The largest eager reply that leaves the FIN room (1 KiB eager: 1016
 * bytes) carries it; one byte more and the FIN goes alone, first. */
static void test_fin_carried_fits(void **state)
{
	struct fix *f = *state;

	rndv_in_answered(f, 1016);
	expect_reply(&f->p, EVR_T_EAGER, 1016, true);
	assert_int_equal(peer_unread(&f->p), 0);
	peer_ack(&f->p);
	peer_fini(&f->p);
	rndv_in_answered(f, 1017);
	expect_fin_alone(&f->p);
	expect_reply(&f->p, EVR_T_EAGER, 1017, false);
	assert_int_equal(peer_unread(&f->p), 0);
}

/* A rendezvous reply carries it in its request. */
static void test_fin_carried_rndv(void **state)
{
	struct fix *f = *state;

	rndv_in_answered(f, 4000);
	expect_reply(&f->p, EVR_T_RNDV_REQ, 4000, true);
	assert_int_equal(peer_unread(&f->p), 0);
}

/* Without a reply the FIN goes alone; and with a peer that did not agree
 * to the extension (or EVR_FIN=alone here), it goes alone before the
 * reply. */
static void test_fin_alone(void **state)
{
	struct fix *f = *state;

	rndv_in_answered(f, 0);
	if (f->p.fin && evr__agreed(f->p.conn, EVR_HS_F_FIN)) {
		/* an empty reply carries it too */
		expect_reply(&f->p, EVR_T_EAGER, 0, true);
	} else {
		expect_fin_alone(&f->p);
		next_msg(&f->p, &(struct peer_frame){0});
	}
	assert_int_equal(peer_unread(&f->p), 0);
}

/* The peer's FIN carried by its eager message: our rendezvous send
 * completes with the FIN's status, then the message is delivered. */
static void test_fin_carried_recv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t big[3000];

	peer_send_op(p, big, sizeof(big), 0);
	peer_send_op(p, big, sizeof(big), 1);
	peer_pump(f->ctx);
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	peer_ack(p);
	peer_fin_eager(p, fr.msg.rndv.id, 0, "hi", 2, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], 0);
	assert_int_equal(p->nmsgs, 1);
	assert_int_equal(p->msgs[0].len, 2);
	assert_memory_equal(p->msgs[0].data, "hi", 2);
	/* the reader's error comes to the send, the message still in */
	next_msg(p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_REQ);
	peer_fin_eager(p, fr.msg.rndv.id, -EIO, "", 0, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_status[1], -EIO);
	assert_int_equal(p->nmsgs, 2);
	assert_int_equal(p->msgs[1].len, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

static const size_t *seq_lens; /* answer_seq: the reply to message i */

static void answer_seq(struct peer *p, const void *data, size_t len)
{
	reply_len = seq_lens[p->nmsgs - 1];
	if (reply_len != SIZE_MAX)
		answer_recv(p, data, len);
}

/* The peer's rendezvous messages 41 and 42 are read at once and answered
 * (lens[i]: the reply to each, SIZE_MAX: none). */
static void two_in_answered(struct fix *f, const size_t *lens)
{
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t src[3000];
	unsigned reads = 0;

	seq_lens = lens;
	p->on_recv = answer_seq;
	peer_rndv_req(p, src, sizeof(src), 0xbeef, 41, 0);
	peer_rndv_req(p, src, sizeof(src), 0xbeef, 42, 0);
	peer_pump(f->ctx);
	while (peer_next(p, &fr)) {
		if (fr.parsed && fr.msg.hdr.type == EVR_T_CREDIT)
			continue; /* the two requests' credits, owed */
		assert_int_equal(fr.wr.opcode, IBV_WR_RDMA_READ);
		reads++;
	}
	assert_int_equal(reads, 2);
	peer_ack(p);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(p->nmsgs, 2);
}

/* The next frame: an eager reply of len bytes carrying the FIN for id,
 * or (len SIZE_MAX) that FIN alone. */
static void expect_fin(struct peer *p, size_t len, uint32_t id, bool carried)
{
	struct peer_frame fr;

	next_msg(p, &fr);
	assert_true(fr.msg.fin);
	assert_int_equal(fr.msg.fin_id, id);
	if (!carried) {
		assert_int_equal(fr.msg.hdr.type, EVR_T_RNDV_FIN);
		return;
	}
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr.msg.plen, len);
}

/* Two FINs due and two replies: each carries one, in order. */
static void test_fin_carried_two(void **state)
{
	static const size_t lens[] = {4, 5};
	struct fix *f = *state;

	two_in_answered(f, lens);
	expect_fin(&f->p, 4, 41, true);
	expect_fin(&f->p, 5, 42, true);
	assert_int_equal(peer_unread(&f->p), 0);
}

/* Two FINs, one reply: the first FIN in it, the second alone after it. */
static void test_fin_carried_two_one(void **state)
{
	static const size_t lens[] = {4, SIZE_MAX};
	struct fix *f = *state;

	two_in_answered(f, lens);
	expect_fin(&f->p, 4, 41, true);
	expect_fin(&f->p, 0, 42, false);
	assert_int_equal(peer_unread(&f->p), 0);
}

/* A first reply with no room for a FIN: the FINs go alone before it, as
 * they would without the extension, and the next reply carries none. */
static void test_fin_carried_two_big(void **state)
{
	static const size_t lens[] = {1017, 5};
	struct fix *f = *state;
	struct peer_frame fr;

	two_in_answered(f, lens);
	expect_fin(&f->p, 0, 41, false);
	expect_fin(&f->p, 0, 42, false);
	next_msg(&f->p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_false(fr.msg.fin);
	assert_int_equal(fr.msg.plen, 1017);
	next_msg(&f->p, &fr);
	assert_int_equal(fr.msg.hdr.type, EVR_T_EAGER);
	assert_false(fr.msg.fin);
	assert_int_equal(fr.msg.plen, 5);
	assert_int_equal(peer_unread(&f->p), 0);
	assert_int_equal(f->p.conn->state, EVR_CS_ESTABLISHED);
}

/* A request from a newer peer, offering carried FINs and an extension
 * this side does not know: the reply agrees to carried FINs alone, and
 * they are used. */
static void test_fin_accept_newer_peer(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct evr__hs hs;
	const struct mock_id *m;

	assert_non_null(f);
	peer_mocks_reset();
	f->ctx = peer_start(&f->p, NULL);
	*state = f; /* the teardown's */
	f->p.fin = true;
	f->p.newer_features = 0x80;
	peer_accept(&f->p);
	m = mock_id_of(f->p.id);
	assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &hs, NULL), 0);
	assert_int_equal(hs.kind, EVR_HS_REP);
	assert_int_equal(hs.features, EVR_HS_F_FIN);
	assert_true(evr__agreed(f->p.conn, EVR_HS_F_FIN));
	rndv_in_answered(f, 4);
	expect_reply(&f->p, EVR_T_EAGER, 4, true);
}

/* ---- headers in immediate data (EVR_HS_F_IMM) ---- */

/* The peer speaks EVR_HS_F_IMM; fin as well when asked.  One send WR in
 * 4 is signaled, so that answers may go the direct way. */
static int setup_imm_how(void **state, bool fin)
{
	struct fix *f = calloc(1, sizeof(*f));
	struct evr_ctx_opts o;

	assert_non_null(f);
	peer_mocks_reset();
	peer_ctx_opts(&o);
	o.signal_interval = 4;
	f->ctx = peer_start(&f->p, &o);
	f->p.imm_hdr = true;
	f->p.fin = fin;
	peer_connect(&f->p);
	*state = f;
	return 0;
}

static int setup_imm(void **state)
{
	return setup_imm_how(state, false);
}

static int setup_imm_fin(void **state)
{
	return setup_imm_how(state, true);
}

/* With EVR_IMM=off on our side: the handshake leaves the extension off. */
static int setup_imm_off(void **state)
{
	return setup_env(state, "EVR_IMM", "off", setup_imm);
}

/* The next frame is a SEND with its header in immediate data, and bytes
 * len bytes of data, nothing else: no header in band. */
static void expect_imm(struct peer *p, const void *data, size_t len,
		       struct peer_frame *fr)
{
	assert_true(peer_next(p, fr));
	assert_int_equal(fr->wr.opcode, IBV_WR_SEND_WITH_IMM);
	assert_true(fr->parsed);
	assert_int_equal(be32toh(fr->wr.imm) >> 24, EVR_IMM_EAGER);
	assert_int_equal(fr->wr.len, len);
	assert_int_equal(fr->msg.hdr.type, EVR_T_EAGER);
	assert_int_equal(fr->msg.plen, len);
	if (len)
		assert_memory_equal(fr->wr.data, data, len);
}

/* Both sides agree to it: a small message (inline, in one piece), a
 * larger one (copied into a buffer) and an empty one go as SENDs with
 * immediate data and exactly their bytes; each callback fires once,
 * with 0. */
static void test_imm_send(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	static uint8_t big[900];
	const char small[] = "sixteen bytes!!";
	unsigned i;

	assert_true(evr__agreed(p->conn, EVR_HS_F_IMM));
	for (i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7);
	peer_send_op(p, small, sizeof(small), 0);
	peer_send_op(p, big, sizeof(big), 1);
	peer_send_op(p, "", 0, 2);
	peer_pump(f->ctx);
	expect_imm(p, small, sizeof(small), &fr);
	assert_int_equal(fr.msg.hdr.credits, 0);
	expect_imm(p, big, sizeof(big), &fr);
	expect_imm(p, NULL, 0, &fr);
	assert_false(peer_next(p, &fr));
	peer_ack(p);
	peer_pump(f->ctx);
	for (i = 0; i < 3; i++) {
		assert_int_equal(p->op_calls[i], 1);
		assert_int_equal(p->op_status[i], 0);
	}
}

/* The peer's message with its header in immediate data: its bytes are
 * delivered, all of them payload, and its credits are granted. */
static void test_imm_recv(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	uint8_t data[300];
	unsigned before, i;

	for (i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i ^ 0x5a);
	/* use two credits, then have them back with the peer's message */
	peer_send_op(p, "a", 1, 0);
	peer_send_op(p, "b", 1, 1);
	peer_pump(f->ctx);
	before = peer_send_credits(p->conn);
	peer_imm_eager(p, data, sizeof(data), 0, 2);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 1);
	assert_int_equal(p->msgs[0].len, sizeof(data));
	assert_memory_equal(p->msgs[0].data, data, sizeof(data));
	assert_int_equal(peer_send_credits(p->conn), before + 2);
	/* our next message returns the credit of the one delivered */
	peer_send_op(p, "c", 1, 2);
	peer_pump(f->ctx);
	expect_imm(p, "a", 1, &fr);
	expect_imm(p, "b", 1, &fr);
	expect_imm(p, "c", 1, &fr);
	assert_int_equal(fr.msg.hdr.credits, 1);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* An answer from on_recv to such a message goes the direct way, with its
 * header in immediate data too. */
static void test_imm_direct(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;

	reply_len = 5;
	p->on_recv = answer_recv;
	peer_imm_eager(p, "ping", 4, 0, 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(p->nmsgs, 1);
	assert_memory_equal(p->msgs[0].data, "ping", 4);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_SEND_WITH_IMM);
	assert_true(fr.parsed);
	assert_int_equal(fr.msg.plen, 5);
	assert_int_equal(fr.wr.len, 5);
	assert_memory_equal(fr.wr.data, "kkkkk", 5);
	assert_int_equal(f->ctx->st.direct_sends, 1);
	assert_int_equal(fr.wr.flags, IBV_SEND_INLINE); /* unsignaled */
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* What hold_echo did: the held message, where its bytes were, and how
 * the echo was sent (with a callback, op 0, or without). */
static struct {
	evr_msg *m;
	const void *data;
	bool cb;
	const void *src; /* the echo's bytes: data, or a copy elsewhere */
	uint8_t copy[1024];
} he;

/* on_recv: hold the message and send its bytes (or a copy of them)
 * back. */
static void hold_echo(struct peer *p, const void *data, size_t len)
{
	he.m = evr_conn_hold(p->conn);
	assert_non_null(he.m);
	he.data = data;
	if (he.src == he.copy) {
		assert_true(len <= sizeof(he.copy));
		memcpy(he.copy, data, len);
	} else {
		he.src = data;
	}
	assert_int_equal(evr_send(p->conn, he.src, len,
				  he.cb ? peer_op_cb : NULL,
				  he.cb ? peer_op_arg(p, 0) : NULL),
			 0);
}

/* The peer sends 900 bytes; hold_echo answers (from the held buffer,
 * with a callback, when from_held and cb).  Returns the echo's frame,
 * checked for the bytes; the message stays held. */
static void held_echo(struct fix *f, bool from_held, bool cb,
		      struct peer_frame *fr)
{
	struct peer *p = &f->p;
	uint8_t data[900];
	unsigned i, n0 = p->nmsgs;

	for (i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 13 + 1);
	memset(&he, 0, sizeof(he));
	he.cb = cb;
	he.src = from_held ? NULL : he.copy;
	p->on_recv = hold_echo;
	if (evr__agreed(p->conn, EVR_HS_F_IMM))
		peer_imm_eager(p, data, sizeof(data), 0, 0);
	else
		peer_eager(p, data, sizeof(data), 0);
	peer_pump(f->ctx);
	p->on_recv = NULL;
	assert_int_equal(p->nmsgs, n0 + 1);
	assert_true(peer_next(p, fr));
	assert_true(fr->parsed);
	assert_int_equal(fr->msg.plen, sizeof(data));
	assert_memory_equal(fr->msg.payload, data, sizeof(data));
}

/* The receive of ours the peer filled last. */
static const struct mock_wr *last_recv(const struct fix *f)
{
	if (f->ctx->srq)
		return &mock_wrs.srecv[mock_wrs.srq_next - 1];
	return &mock_wrs.recv[f->p.recv_next - 1];
}

/* A held message's bytes sent back with a callback go from its receive
 * buffer (the receive's address and key), not a copy; the callback fires
 * once, with 0, at the completion, and the message is the holder's to
 * release then. */
static void test_imm_held_zero_copy(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	const struct mock_wr *r;

	held_echo(f, true, true, &fr);
	r = last_recv(f);
	assert_int_equal(fr.wr.opcode, IBV_WR_SEND_WITH_IMM);
	assert_int_equal(fr.wr.laddr, (uintptr_t)he.data);
	assert_int_equal(fr.wr.laddr, r->laddr);
	assert_int_equal(fr.wr.lkey, r->lkey);
	assert_int_equal(fr.wr.len, 900);
	assert_int_equal(f->ctx->st.zero_copy_sends, 1);
	assert_int_equal(p->op_calls[0], 0);
	peer_ack_op(p, 0);
	evr_msg_release(he.m);
	peer_pump(f->ctx);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* Copied instead: without a callback (nothing would say when the buffer
 * is free), and bytes from elsewhere than the held buffer. */
static void test_imm_held_copied(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	const struct mock_wr *r;

	held_echo(f, true, false, &fr);
	r = last_recv(f);
	assert_int_equal(fr.wr.opcode, IBV_WR_SEND_WITH_IMM);
	assert_true(fr.wr.laddr != r->laddr);
	assert_true(fr.wr.lkey != r->lkey || fr.wr.laddr < r->laddr ||
		    fr.wr.laddr >= r->laddr + r->len);
	evr_msg_release(he.m);
	peer_ack(p);
	peer_pump(f->ctx);

	held_echo(f, false, true, &fr);
	assert_true(fr.wr.laddr != (uintptr_t)he.data);
	assert_int_equal(f->ctx->st.zero_copy_sends, 0);
	peer_ack_op(p, 0);
	evr_msg_release(he.m);
}

/* Bytes in a region the user registered (evr_mr_reg), sent with a
 * callback, go from there: the region's key, no copy; the region is busy
 * (not deregistered) until the callback.  Bytes reaching past its end
 * are copied; a message that fits inline goes inline. */
static uint8_t ureg[8192];

/* Its first 4096 bytes registered; then len bytes at off sent with
 * op 0, and the ctx pumped. */
static evr_mr *ureg_send(struct fix *f, size_t off, size_t len)
{
	evr_mr *mr;
	unsigned i;

	for (i = 0; i < sizeof(ureg); i++)
		ureg[i] = (uint8_t)(i * 11 + 3);
	assert_int_equal(evr_mr_reg(f->ctx, ureg, 4096, EVR_ACCESS_LOCAL, &mr),
			 0);
	peer_send_op(&f->p, ureg + off, len, 0);
	peer_pump(f->ctx);
	return mr;
}

static void test_imm_user_zero_copy(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	evr_mr *mr = ureg_send(f, 100, 900);

	expect_imm(p, ureg + 100, 900, &fr);
	assert_int_equal(fr.wr.laddr, (uintptr_t)(ureg + 100));
	assert_int_equal(fr.wr.lkey, mr->mr->lkey);
	assert_int_equal(fr.wr.flags & IBV_SEND_INLINE, 0);
	assert_int_equal(f->ctx->st.zero_copy_sends, 1);
	assert_int_equal(p->op_calls[0], 0);
	assert_int_equal(evr_mr_dereg(mr), -EBUSY);
	peer_ack_op(p, 0);
	assert_int_equal(mr->busy, 0);

	peer_send_op(p, ureg + 3500, 900, 1); /* 304 bytes past the end */
	peer_send_op(p, ureg + 200, 100, 2);  /* inline */
	peer_pump(f->ctx);
	expect_imm(p, ureg + 3500, 900, &fr);
	assert_true(fr.wr.laddr != (uintptr_t)(ureg + 3500));
	assert_true(fr.wr.lkey != mr->mr->lkey);
	expect_imm(p, ureg + 200, 100, &fr);
	assert_true(fr.wr.flags & IBV_SEND_INLINE);
	assert_int_equal(f->ctx->st.zero_copy_sends, 1);
	assert_int_equal(mr->busy, 0);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_calls[2], 1);
	assert_int_equal(evr_mr_dereg(mr), 0);
}

/* The conn ends with such a send posted: its callback fires once, with
 * the error, and the region is free again. */
static void test_imm_user_zero_copy_abort(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	evr_mr *mr = ureg_send(f, 0, 1000);

	assert_int_equal(f->ctx->st.zero_copy_sends, 1);
	assert_int_equal(evr_mr_dereg(mr), -EBUSY);
	assert_int_equal(evr_conn_close(p->conn, EVR_CLOSE_ABORT), 0);
	peer_pump(f->ctx);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_true(p->op_status[0] < 0);
	assert_int_equal(evr_mr_dereg(mr), 0);
}

/* With the header in band, bytes from a region are copied behind it, and
 * the region stays free. */
static void test_imm_off_user_copied(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	evr_mr *mr = ureg_send(f, 100, 900);

	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_SEND);
	assert_int_equal(fr.msg.plen, 900);
	assert_memory_equal(fr.msg.payload, ureg + 100, 900);
	assert_true(fr.wr.lkey != mr->mr->lkey);
	assert_int_equal(f->ctx->st.zero_copy_sends, 0);
	assert_int_equal(mr->busy, 0); /* copied: nothing holds it */
	peer_ack_op(p, 0);
	assert_int_equal(evr_mr_dereg(mr), 0);
}

/* With the header in band (EVR_IMM=off), a held message's echo is
 * copied behind its header. */
static void test_imm_off_held_copied(void **state)
{
	struct fix *f = *state;
	struct peer_frame fr;

	held_echo(f, true, true, &fr);
	assert_int_equal(fr.wr.opcode, IBV_WR_SEND);
	assert_int_equal(fr.wr.len, EVR_HDR_SIZE + 900);
	assert_true(fr.wr.laddr != (uintptr_t)he.data);
	assert_int_equal(f->ctx->st.zero_copy_sends, 0);
	peer_ack_op(&f->p, 0);
	evr_msg_release(he.m);
}

/* A message that carries a FIN keeps its header in band (the FIN is in
 * its body); the next plain one goes with immediate data again. */
static void test_imm_fin_in_band(void **state)
{
	struct fix *f = *state;
	struct peer_frame fr;

	assert_true(evr__agreed(f->p.conn, EVR_HS_F_IMM));
	assert_true(evr__agreed(f->p.conn, EVR_HS_F_FIN));
	rndv_in_answered(f, 4);
	expect_reply(&f->p, EVR_T_EAGER, 4, true);
	peer_send_op(&f->p, "after", 5, 0);
	peer_pump(f->ctx);
	expect_imm(&f->p, "after", 5, &fr);
	assert_int_equal(peer_unread(&f->p), 0);
}

/* EVR_IMM=off: the request does not offer the extension, so the peer's
 * reply cannot agree to it, and headers stay in band. */
static void test_imm_off(void **state)
{
	struct fix *f = *state;
	struct peer_frame fr;

	assert_false(evr__agreed(f->p.conn, EVR_HS_F_IMM));
	peer_send_op(&f->p, "hello", 5, 0);
	peer_pump(f->ctx);
	next_msg(&f->p, &fr);
	assert_int_equal(fr.msg.plen, 5);
	assert_int_equal(fr.wr.len, EVR_HDR_SIZE + 5);
	peer_ack_op(&f->p, 0);
}

/* What the peer sends with immediate data must be a message of the
 * extension, or the conn ends with -EPROTO and nothing is delivered:
 * imm as sent, on a conn set up by the setup given. */
static void imm_rejected(void **state, uint32_t imm)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_imm_raw(p, imm, "hi", 2);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
}

/* A peer that did not agree to the extension may not use it. */
static void test_imm_not_agreed(void **state)
{
	assert_false(evr__agreed(((struct fix *)*state)->p.conn, EVR_HS_F_IMM));
	imm_rejected(state, EVR_IMM_EAGER << 24);
}

/* Another tag than EVR_IMM_EAGER's. */
static void test_imm_bad_tag(void **state)
{
	imm_rejected(state, (EVR_IMM_EAGER + 1) << 24);
}

/* A flag other than EVR_F_WANT (here a call's, which needs its id in
 * band). */
static void test_imm_bad_flag(void **state)
{
	imm_rejected(state, EVR_IMM_EAGER << 24 | EVR_F_CALL << 16);
}

/* A carried FIN naming no send of ours is a protocol error: the message
 * is not delivered and the conn ends with -EPROTO. */
static void test_fin_carried_unknown(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	peer_fin_eager(p, 999, 0, "hi", 2, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
}

/* A peer that did not agree to the extension may not use it. */
static void test_fin_carried_not_agreed(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	assert_false(evr__agreed(p->conn, EVR_HS_F_FIN));
	peer_fin_eager(p, 0, 0, "hi", 2, 0);
	peer_pump(f->ctx);
	assert_int_equal(p->nmsgs, 0);
	assert_int_equal(p->conn->state, EVR_CS_FLUSHING);
	peer_flush_closed(p, -EPROTO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_eager_send, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_eager,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_fits,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_rndv,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_two,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_two_one,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_two_big,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_alone, setup_fin,
						teardown),
		cmocka_unit_test_setup_teardown(test_fin_alone, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_fin_alone,
						setup_fin_alone, teardown),
		cmocka_unit_test_teardown(test_fin_accept_newer_peer, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_recv,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_unknown,
						setup_fin, teardown),
		cmocka_unit_test_setup_teardown(test_fin_carried_not_agreed,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_imm_send, setup_imm,
						teardown),
		cmocka_unit_test_setup_teardown(test_imm_recv, setup_imm,
						teardown),
		cmocka_unit_test_setup_teardown(test_imm_direct, setup_imm,
						teardown),
		cmocka_unit_test_setup_teardown(test_imm_held_zero_copy,
						setup_imm, teardown),
		cmocka_unit_test_setup_teardown(test_imm_held_copied,
						setup_imm, teardown),
		cmocka_unit_test_setup_teardown(test_imm_off_held_copied,
						setup_imm_off, teardown),
		cmocka_unit_test_setup_teardown(test_imm_user_zero_copy,
						setup_imm, teardown),
		cmocka_unit_test_setup_teardown(test_imm_user_zero_copy_abort,
						setup_imm, teardown),
		cmocka_unit_test_setup_teardown(test_imm_off_user_copied,
						setup_imm_off, teardown),
		cmocka_unit_test_setup_teardown(test_imm_fin_in_band,
						setup_imm_fin, teardown),
		cmocka_unit_test_setup_teardown(test_imm_off, setup_imm_off,
						teardown),
		cmocka_unit_test_setup_teardown(test_imm_not_agreed, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_imm_bad_tag, setup_imm,
						teardown),
		cmocka_unit_test_setup_teardown(test_imm_bad_flag, setup_imm,
						teardown),
		cmocka_unit_test_setup_teardown(test_credit_stop_and_resume,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_credit_piggyback_and_update, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credit_overflow, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rndv_send, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rndv_send_fin_error,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_rndv_recv_chunks_and_order, setup_small_port,
			teardown),
		cmocka_unit_test_setup_teardown(test_rndv_recv_fin_order,
						setup_small_port, teardown),
		cmocka_unit_test_setup_teardown(test_rndv_recv_staged,
						setup_small_port, teardown),
		cmocka_unit_test_setup_teardown(test_rndv_recv_staged_fails,
						setup_small_port, teardown),
		cmocka_unit_test_setup_teardown(test_rndv_recv_between_eager,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_rndv_recv_bad_key, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hold_release, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hold_release_hold, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_redeliver_releases_outer,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_outlives_conn,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_starved_peer, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_write_imm_recv, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_sendv, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sendv_rndv, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_post_recv_fails, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_ctx_destroy_busy, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_rndv_send_peer_gone, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_rndv_send_close_waits_for_fin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rndv_recv_aborted, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_hold_rndv, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_send_too_large, setup,
						teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
