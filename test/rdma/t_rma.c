/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One-sided operations on a real verbs stack, through the public API only.
 *
 * Each case starts from a connected pair whose two ends have registered a
 * region for remote read, write and atomics and have sent each other the
 * region's key (evr_rkey_pack / evr_rkey_unpack inside a message).  Then:
 * RDMA WRITE, WRITE with immediate data, READ, fetch-add and compare-swap,
 * with the bytes (or words) checked in both regions afterwards and every
 * callback counted: exactly once, in posting order, never from inside the
 * submitting call.  Argument errors (bounds, alignment, missing or
 * foreign handles, deregistering a region still in use, a closing conn)
 * must be synchronous and never reach a callback.  Operations submitted
 * before the connection is up wait for it; a graceful close lets those
 * submitted before it finish; a forged remote key fails the operation and
 * the connection.
 */
#include "rt_pair.h"

#define REGION (256u << 10)
#define MAXOPS 128
#define RKEY_TAG "RKEY"
#define RKEY_MSG (4 + EVR_RKEY_PACKED_SIZE)

struct fix;

/* One submitted operation. */
struct op_rec {
	struct fix *f;
	int calls;
	int status;
	int order; /* position among this case's completions */
};

/* One end of the pair: its region and what it learned from the peer. */
struct end {
	struct fix *f;
	uint8_t *mem;
	evr_mr *mr;
	uint8_t rkmsg[RKEY_MSG]; /* our key, as sent (must outlive the send) */
	struct evr_rkey peer;
	int got_rkey;
	int other_msgs;
	/* writes with immediate data that landed in this end's region */
	uint32_t imm[MAXOPS];
	int nimm;
	int imm_bad; /* on_imm ran before the data was in place */
	int close_order; /* position of on_close among the completions */
};

struct fix {
	struct ev_loop *loop;
	struct rt_pair p;
	struct end cli, srv;
	int ncompleted;
	/* what the writes with immediate data put where, for on_imm */
	size_t imm_off[MAXOPS], imm_len[MAXOPS];
	uint32_t imm_seed[MAXOPS];
};

static void op_cb(evr_conn *c, int status, void *arg)
{
	struct op_rec *r = arg;

	(void)c;
	r->calls++;
	r->status = status;
	r->order = r->f->ncompleted++;
}

static void recs_init(struct fix *f, struct op_rec *r, int n)
{
	memset(r, 0, sizeof(*r) * (size_t)n);
	for (int i = 0; i < n; i++)
		r[i].f = f;
	f->ncompleted = 0;
}

struct recs {
	struct op_rec *r;
	int n;
};

static int recs_done(void *arg)
{
	struct recs *w = arg;

	for (int i = 0; i < w->n; i++)
		if (!w->r[i].calls)
			return 0;
	return 1;
}

static int never(void *arg)
{
	(void)arg;
	return 0;
}

/* Let the loop run a little longer: a second callback would show now. */
static void settle(struct fix *f)
{
	rt_run_until(f->loop, never, NULL, 0.1);
}

/* Wait for n callbacks, then check each fired once with 0, in order. */
static void wait_ok_in_order(struct fix *f, struct op_rec *r, int n)
{
	struct recs w = {r, n};

	assert_int_equal(rt_run_until(f->loop, recs_done, &w, 30), 0);
	settle(f);
	for (int i = 0; i < n; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].status, 0);
		assert_int_equal(r[i].order, i);
	}
}

static void assert_no_calls(struct op_rec *r, int n)
{
	for (int i = 0; i < n; i++)
		assert_int_equal(r[i].calls, 0);
}

static void on_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct end *e = s->user;

	(void)c;
	if (len == RKEY_MSG && !memcmp(data, RKEY_TAG, 4)) {
		evr_rkey_unpack(&e->peer, (const uint8_t *)data + 4);
		e->got_rkey++;
		return;
	}
	e->other_msgs++;
}

static void on_imm(evr_conn *c, uint32_t imm, void *arg)
{
	struct rt_side *s = arg;
	struct end *e = s->user;
	struct fix *f = e->f;
	int i = e->nimm;

	(void)c;
	if (i >= MAXOPS) {
		e->imm_bad++;
		return;
	}
	e->imm[e->nimm++] = imm;
	/* the data of the i-th write must be in place when its imm shows */
	if (rt_verify(e->mem + f->imm_off[i], f->imm_len[i],
		      f->imm_seed[i]) >= 0)
		e->imm_bad++;
}

/* on_close, also placed in the order of the op callbacks */
static void on_close(evr_conn *c, int status, void *arg)
{
	struct rt_side *s = arg;
	struct end *e = s->user;

	e->close_order = e->f->ncompleted++;
	rt_side_close(c, status, arg);
}

static void end_init(struct fix *f, struct end *e)
{
	struct evr_rkey rk;

	e->f = f;
	assert_int_equal(posix_memalign((void **)&e->mem, 4096, REGION), 0);
	memset(e->mem, 0, REGION);
	assert_int_equal(evr_mr_reg(f->p.ctx, e->mem, REGION,
				    EVR_ACCESS_REMOTE_READ |
					    EVR_ACCESS_REMOTE_WRITE |
					    EVR_ACCESS_REMOTE_ATOMIC,
				    &e->mr),
			 0);
	assert_ptr_equal(evr_mr_addr(e->mr), e->mem);
	assert_int_equal(evr_mr_len(e->mr), REGION);
	evr_mr_rkey(e->mr, &rk);
	assert_int_equal(rk.addr, (uintptr_t)e->mem);
	assert_int_equal(rk.len, REGION);
	memcpy(e->rkmsg, RKEY_TAG, 4);
	evr_rkey_pack(&rk, e->rkmsg + 4);
}

static int keys_swapped(void *arg)
{
	struct fix *f = arg;

	return f->cli.got_rkey && f->srv.got_rkey;
}

/* Both ends' regions registered, nothing connected yet. */
static int setup_unconnected(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));

	assert_non_null(f);
	f->loop = ev_loop_new(EVFLAG_AUTO);
	rt_pair_init(&f->p, f->loop, NULL);
	end_init(f, &f->cli);
	end_init(f, &f->srv);
	f->p.cli.user = &f->cli;
	f->p.srv.user = &f->srv;
	f->p.cli_opts.on_recv = f->p.srv_opts.on_recv = on_recv;
	f->p.cli_opts.on_imm = f->p.srv_opts.on_imm = on_imm;
	f->p.cli_opts.on_close = f->p.srv_opts.on_close = on_close;
	*state = f;
	return 0;
}

/* Connected, and each end knows the other's region from a message. */
static int setup(void **state)
{
	struct fix *f;
	struct evr_rkey mine;

	setup_unconnected(state);
	f = *state;
	rt_pair_connect(&f->p);

	assert_int_equal(evr_send(f->p.cli.conn, f->cli.rkmsg, RKEY_MSG, NULL,
				  NULL),
			 0);
	assert_int_equal(evr_send(f->p.srv.conn, f->srv.rkmsg, RKEY_MSG, NULL,
				  NULL),
			 0);
	assert_int_equal(rt_run_until(f->loop, keys_swapped, f, 20), 0);
	assert_int_equal(f->cli.got_rkey, 1);
	assert_int_equal(f->srv.got_rkey, 1);
	/* what arrived is what the other side registered */
	evr_mr_rkey(f->srv.mr, &mine);
	assert_int_equal(f->cli.peer.addr, mine.addr);
	assert_int_equal(f->cli.peer.len, mine.len);
	assert_int_equal(f->cli.peer.rkey, mine.rkey);
	evr_mr_rkey(f->cli.mr, &mine);
	assert_int_equal(f->srv.peer.addr, mine.addr);
	assert_int_equal(f->srv.peer.len, mine.len);
	assert_int_equal(f->srv.peer.rkey, mine.rkey);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	if (f->p.cli.conn) {
		rt_pair_close(&f->p);
		assert_int_equal(f->p.cli.close_status, 0);
	}
	assert_int_equal(f->p.cli.closes, 1);
	assert_int_equal(f->p.srv.closes, 1);
	if (f->cli.mr)
		assert_int_equal(evr_mr_dereg(f->cli.mr), 0);
	if (f->srv.mr)
		assert_int_equal(evr_mr_dereg(f->srv.mr), 0);
	rt_pair_fini(&f->p);
	free(f->cli.mem);
	free(f->srv.mem);
	ev_loop_destroy(f->loop);
	free(f);
	return 0;
}

/* ------------------------------------------------------------------ */

struct span {
	size_t loff;
	uint64_t roff;
	size_t len;
};

/* Non-overlapping sources and destinations, odd offsets and sizes, the
 * whole region and nothing at all. */
static const struct span spans[] = {
	{0, 0, 1},
	{64, 4096 + 8, 64},
	{4096 + 100, 8192 + 1, 4096},
	{16384, 16384 + 3, 65536},
	{131072, REGION - 60000, 60000},
	{200000, 100000, 0},
};
#define NSPANS ((int)(sizeof(spans) / sizeof(spans[0])))

static void test_write(void **state)
{
	struct fix *f = *state;
	struct op_rec r[NSPANS];
	uint8_t *expect = malloc(REGION);
	int i;

	memset(f->srv.mem, 0x5a, REGION);
	memset(expect, 0x5a, REGION);
	recs_init(f, r, NSPANS);
	for (i = 0; i < NSPANS; i++) {
		rt_fill(f->cli.mem + spans[i].loff, spans[i].len,
			(uint32_t)i + 1);
		rt_fill(expect + spans[i].roff, spans[i].len, (uint32_t)i + 1);
		assert_int_equal(evr_write(f->p.cli.conn, f->cli.mr,
					   spans[i].loff, &f->cli.peer,
					   spans[i].roff, spans[i].len, op_cb,
					   &r[i]),
				 0);
	}
	assert_no_calls(r, NSPANS); /* never from inside the call */
	wait_ok_in_order(f, r, NSPANS);
	/* every written byte arrived, nothing around it was touched */
	assert_memory_equal(f->srv.mem, expect, REGION);
	assert_int_equal(f->srv.nimm, 0);
	assert_int_equal(f->srv.other_msgs, 0);

	/* and the other way round, server to client */
	memset(f->cli.mem, 0, REGION);
	rt_fill(f->srv.mem + 1000, 3000, 77);
	recs_init(f, r, 1);
	assert_int_equal(evr_write(f->p.srv.conn, f->srv.mr, 1000,
				   &f->srv.peer, 5, 3000, op_cb, &r[0]),
			 0);
	wait_ok_in_order(f, r, 1);
	assert_int_equal(rt_verify(f->cli.mem + 5, 3000, 77), -1);
	assert_int_equal(f->cli.mem[4], 0);
	assert_int_equal(f->cli.mem[3005], 0);
	free(expect);
}

#define NIMM 100

static void test_write_imm(void **state)
{
	struct fix *f = *state;
	struct op_rec r[NIMM];
	uint32_t want[NIMM];
	int i;

	/* more writes than the peer has receives: each one takes a credit,
	 * so this also runs the credit return for writes with imm */
	memset(f->srv.mem, 0, REGION);
	recs_init(f, r, NIMM);
	for (i = 0; i < NIMM; i++) {
		size_t off = (size_t)i * 2048;
		size_t len = (size_t)(i * 37) % 2000; /* i == 0: no data */

		f->imm_off[i] = off;
		f->imm_len[i] = len;
		f->imm_seed[i] = 500 + (uint32_t)i;
		want[i] = i == 0   ? 0
			  : i == 1 ? 0xffffffffu
				   : 0x9e3779b9u * (uint32_t)i;
		rt_fill(f->cli.mem + off, len, f->imm_seed[i]);
		assert_int_equal(evr_write_imm(f->p.cli.conn, f->cli.mr, off,
					       &f->cli.peer, off, len, want[i],
					       op_cb, &r[i]),
				 0);
	}
	assert_no_calls(r, NIMM);
	assert_int_equal(f->srv.nimm, 0);
	wait_ok_in_order(f, r, NIMM);
	{
		struct end *e = &f->srv;

		for (i = 0; i < 100 && e->nimm < NIMM; i++)
			rt_run_until(f->loop, never, NULL, 0.1);
	}
	assert_int_equal(f->srv.nimm, NIMM);
	assert_int_equal(f->srv.imm_bad, 0);
	for (i = 0; i < NIMM; i++)
		assert_int_equal(f->srv.imm[i], want[i]);
	for (i = 0; i < NIMM; i++)
		assert_int_equal(rt_verify(f->srv.mem + f->imm_off[i],
					   f->imm_len[i], f->imm_seed[i]),
				 -1);
	/* only the target end hears about it; no message was delivered */
	assert_int_equal(f->cli.nimm, 0);
	assert_int_equal(f->srv.other_msgs, 0);
	assert_int_equal(f->cli.other_msgs, 0);
}

static void test_read(void **state)
{
	struct fix *f = *state;
	struct op_rec r[NSPANS];
	uint8_t *expect = malloc(REGION);
	int i;

	/* the reader's spans are (roff -> loff): swap the roles of spans */
	rt_fill(f->srv.mem, REGION, 4242);
	memset(f->cli.mem, 0xa5, REGION);
	memset(expect, 0xa5, REGION);
	recs_init(f, r, NSPANS);
	for (i = 0; i < NSPANS; i++) {
		memcpy(expect + spans[i].loff, f->srv.mem + spans[i].roff,
		       spans[i].len);
		assert_int_equal(evr_read(f->p.cli.conn, f->cli.mr,
					  spans[i].loff, &f->cli.peer,
					  spans[i].roff, spans[i].len, op_cb,
					  &r[i]),
				 0);
	}
	assert_no_calls(r, NSPANS);
	wait_ok_in_order(f, r, NSPANS);
	assert_memory_equal(f->cli.mem, expect, REGION);
	/* the source is untouched */
	assert_int_equal(rt_verify(f->srv.mem, REGION, 4242), -1);
	free(expect);
}

static uint64_t word(const uint8_t *mem, size_t off)
{
	uint64_t v;

	memcpy(&v, mem + off, 8);
	return v;
}

static void set_word(uint8_t *mem, size_t off, uint64_t v)
{
	memcpy(mem + off, &v, 8);
}

static int one_imm(void *arg)
{
	return ((struct end *)arg)->nimm >= 1;
}

#define NADD 32
#define ROUNDS 3

/* Distinct addends; the very last one wraps the word around 2^64. */
static uint64_t add_of(int round, int i)
{
	if (round == ROUNDS - 1 && i == NADD - 1)
		return ~0ull;
	return (uint64_t)(round * NADD + i + 1);
}

static void test_fetch_add(void **state)
{
	struct fix *f = *state;
	const size_t roff = 64, res = 4096;
	const uint64_t start = 0x0123456789abcdefull;
	struct op_rec r[NADD];
	uint64_t expect = start;
	int round, i;

	set_word(f->srv.mem, roff, start);
	for (round = 0; round < ROUNDS; round++) {
		for (i = 0; i < NADD; i++)
			set_word(f->cli.mem, res + 8 * (size_t)i,
				 0xdeadbeefdeadbeefull);
		recs_init(f, r, NADD);
		/* all of a round in flight at once: the adds execute in
		 * posting order, so each sees the sum of those before it */
		for (i = 0; i < NADD; i++) {
			uint64_t add = add_of(round, i);

			assert_int_equal(evr_fetch_add(f->p.cli.conn,
						       f->cli.mr,
						       res + 8 * (size_t)i,
						       &f->cli.peer, roff, add,
						       op_cb, &r[i]),
					 0);
		}
		assert_no_calls(r, NADD);
		wait_ok_in_order(f, r, NADD);
		for (i = 0; i < NADD; i++) {
			uint64_t add = add_of(round, i);

			assert_int_equal(word(f->cli.mem, res + 8 * (size_t)i),
					 expect);
			expect += add;
		}
		assert_int_equal(word(f->srv.mem, roff), expect);
	}
	/* the neighbours of the word are untouched */
	assert_int_equal(word(f->srv.mem, roff - 8), 0);
	assert_int_equal(word(f->srv.mem, roff + 8), 0);
}

static void test_cmp_swap(void **state)
{
	struct fix *f = *state;
	const uint64_t a = 0x1111222233334444ull, b = 0x5555666677778888ull,
		       c = 0x9999aaaabbbbccccull;
	const size_t roff = 128, res = 8192;
	struct op_rec r[4];

	set_word(f->srv.mem, roff, a);
	recs_init(f, r, 4);
	/* equal: swapped; stale compare: not swapped; equal again: swapped */
	assert_int_equal(evr_cmp_swap(f->p.cli.conn, f->cli.mr, res,
				      &f->cli.peer, roff, a, b, op_cb, &r[0]),
			 0);
	assert_int_equal(evr_cmp_swap(f->p.cli.conn, f->cli.mr, res + 8,
				      &f->cli.peer, roff, a, c, op_cb, &r[1]),
			 0);
	assert_int_equal(evr_cmp_swap(f->p.cli.conn, f->cli.mr, res + 16,
				      &f->cli.peer, roff, b, 0, op_cb, &r[2]),
			 0);
	/* the server swaps a word of the client's region: fails, ~0 != c */
	set_word(f->cli.mem, 24, c);
	assert_int_equal(evr_cmp_swap(f->p.srv.conn, f->srv.mr, 16,
				      &f->srv.peer, 24, ~0ull, a, op_cb,
				      &r[3]),
			 0);
	assert_no_calls(r, 4);
	{
		struct recs w = {r, 4};

		assert_int_equal(rt_run_until(f->loop, recs_done, &w, 30), 0);
	}
	settle(f);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].status, 0);
	}
	/* one QP executes in order */
	assert_true(r[0].order < r[1].order && r[1].order < r[2].order);
	assert_int_equal(word(f->cli.mem, res), a);
	assert_int_equal(word(f->cli.mem, res + 8), b);
	assert_int_equal(word(f->cli.mem, res + 16), b);
	assert_int_equal(word(f->srv.mem, roff), 0);
	assert_int_equal(word(f->srv.mem, 16), c);
	assert_int_equal(word(f->cli.mem, 24), c);
}

static void test_bounds(void **state)
{
	struct fix *f = *state;
	evr_conn *c = f->p.cli.conn;
	evr_mr *m = f->cli.mr;
	const struct evr_rkey *rk = &f->cli.peer;
	struct op_rec bad, good[4];
	const uint64_t rl = rk->len;
	const int erange = -ERANGE;

	recs_init(f, &bad, 1);
	recs_init(f, good, 4);
	/* remote span past the end, by one byte */
	assert_int_equal(evr_write(c, m, 0, rk, rl - 10, 11, op_cb, &bad),
			 erange);
	assert_int_equal(evr_write_imm(c, m, 0, rk, rl - 10, 11, 1, op_cb,
				       &bad),
			 erange);
	assert_int_equal(evr_read(c, m, 0, rk, rl - 10, 11, op_cb, &bad),
			 erange);
	/* local span past the end */
	assert_int_equal(evr_write(c, m, REGION - 10, rk, 0, 11, op_cb, &bad),
			 erange);
	assert_int_equal(evr_write_imm(c, m, REGION - 10, rk, 0, 11, 1, op_cb,
				       &bad),
			 erange);
	assert_int_equal(evr_read(c, m, REGION - 10, rk, 0, 11, op_cb, &bad),
			 erange);
	/* offsets past the end, even with nothing to move */
	assert_int_equal(evr_write(c, m, 0, rk, rl + 1, 0, op_cb, &bad),
			 erange);
	assert_int_equal(evr_read(c, m, REGION + 1, rk, 0, 0, op_cb, &bad),
			 erange);
	/* sums that wrap around */
	assert_int_equal(evr_write(c, m, 0, rk, UINT64_MAX, 2, op_cb, &bad),
			 erange);
	assert_int_equal(evr_read(c, m, SIZE_MAX, rk, 0, 2, op_cb, &bad),
			 erange);
	assert_int_equal(evr_write(c, m, 16, rk, 16, SIZE_MAX, op_cb, &bad),
			 erange);
	/* atomics: an aligned word just past either end */
	assert_int_equal(evr_fetch_add(c, m, 0, rk, rl, 1, op_cb, &bad),
			 erange);
	assert_int_equal(evr_cmp_swap(c, m, 0, rk, rl, 0, 1, op_cb, &bad),
			 erange);
	assert_int_equal(evr_fetch_add(c, m, REGION, rk, 0, 1, op_cb, &bad),
			 erange);
	assert_int_equal(evr_cmp_swap(c, m, REGION, rk, 0, 0, 1, op_cb, &bad),
			 erange);

	/* the exact ends are fine, and the conn still works */
	rt_fill(f->cli.mem + REGION - 11, 11, 9);
	assert_int_equal(evr_write(c, m, REGION - 11, rk, 1000, 11, op_cb,
				   &good[0]),
			 0);
	set_word(f->srv.mem, REGION - 8, 40);
	assert_int_equal(evr_fetch_add(c, m, REGION - 24, rk, rl - 8, 2, op_cb,
				       &good[1]),
			 0);
	assert_int_equal(evr_read(c, m, 2000, rk, rl - 11, 11, op_cb,
				  &good[2]),
			 0);
	assert_int_equal(evr_read(c, m, 0, rk, rl, 0, op_cb, &good[3]), 0);
	wait_ok_in_order(f, good, 4);
	assert_int_equal(rt_verify(f->srv.mem + 1000, 11, 9), -1);
	assert_int_equal(word(f->srv.mem, REGION - 8), 42);
	assert_int_equal(word(f->cli.mem, REGION - 24), 40);
	/* the read ran after the add: it sees 42 */
	assert_memory_equal(f->cli.mem + 2000, f->srv.mem + REGION - 11, 11);
	assert_int_equal(word(f->cli.mem, 2003), 42);
	assert_int_equal(bad.calls, 0);
}

static void test_misaligned(void **state)
{
	struct fix *f = *state;
	evr_conn *c = f->p.cli.conn;
	evr_mr *m = f->cli.mr;
	struct evr_rkey rk = f->cli.peer;
	struct op_rec bad, good;
	uint64_t off;

	recs_init(f, &bad, 1);
	for (off = 1; off < 8; off++) {
		assert_int_equal(evr_fetch_add(c, m, 0, &rk, 64 + off, 1,
					       op_cb, &bad),
				 -EINVAL);
		assert_int_equal(evr_cmp_swap(c, m, 0, &rk, 64 + off, 0, 1,
					      op_cb, &bad),
				 -EINVAL);
		assert_int_equal(evr_fetch_add(c, m, 8 + off, &rk, 64, 1,
					       op_cb, &bad),
				 -EINVAL);
		assert_int_equal(evr_cmp_swap(c, m, 8 + off, &rk, 64, 0, 1,
					      op_cb, &bad),
				 -EINVAL);
	}
	/* a key whose base address is off alignment */
	rk.addr += 4;
	rk.len -= 4;
	assert_int_equal(evr_fetch_add(c, m, 0, &rk, 0, 1, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_cmp_swap(c, m, 0, &rk, 8, 0, 1, op_cb, &bad),
			 -EINVAL);
	recs_init(f, &good, 1);
	set_word(f->srv.mem, 64, 7);
	assert_int_equal(evr_fetch_add(c, m, 0, &f->cli.peer, 64, 1, op_cb,
				       &good),
			 0);
	wait_ok_in_order(f, &good, 1);
	assert_int_equal(word(f->srv.mem, 64), 8);
	assert_int_equal(bad.calls, 0);
}

static void test_dereg_busy(void **state)
{
	struct fix *f = *state;
	evr_conn *c = f->p.cli.conn;
	uint8_t *expect = malloc(REGION);
	struct op_rec r[3];
	uint64_t w8;

	recs_init(f, r, 3);
	rt_fill(f->cli.mem, REGION, 31);
	rt_fill(expect, REGION, 31);
	w8 = word(expect, 8);
	set_word(expect, 8, w8 + 1);
	assert_int_equal(evr_write(c, f->cli.mr, 0, &f->cli.peer, 0, REGION,
				   op_cb, &r[0]),
			 0);
	assert_int_equal(evr_mr_dereg(f->cli.mr), -EBUSY);
	assert_int_equal(evr_read(c, f->cli.mr, 0, &f->cli.peer, 0, 4096,
				  op_cb, &r[1]),
			 0);
	assert_int_equal(evr_fetch_add(c, f->cli.mr, 8192, &f->cli.peer, 8, 1,
				       op_cb, &r[2]),
			 0);
	assert_int_equal(evr_mr_dereg(f->cli.mr), -EBUSY);
	/* still registered and usable: the ops go through, in order */
	wait_ok_in_order(f, r, 3);
	assert_memory_equal(f->srv.mem, expect, REGION);
	assert_int_equal(rt_verify(f->cli.mem, 4096, 31), -1);
	assert_int_equal(word(f->cli.mem, 8192), w8);
	/* idle again: it can go */
	assert_int_equal(evr_mr_dereg(f->cli.mr), 0);
	f->cli.mr = NULL;
	free(expect);
}

/* Operations submitted while the connection is still being set up wait
 * for it and then go out in order. */
static void test_before_connected(void **state)
{
	struct fix *f = *state;
	uint8_t packed[EVR_RKEY_PACKED_SIZE];
	struct evr_rkey rk;
	struct op_rec r[4];
	evr_conn *c = NULL;

	/* the key reaches the client some other way */
	evr_mr_rkey(f->srv.mr, &rk);
	evr_rkey_pack(&rk, packed);
	evr_rkey_unpack(&f->cli.peer, packed);
	rt_fill(f->cli.mem, 4096, 60);
	f->imm_off[0] = 8192;
	f->imm_len[0] = 100;
	f->imm_seed[0] = 61;
	rt_fill(f->cli.mem + 8192, 100, 61);
	rt_fill(f->srv.mem + 16384, 4096, 62);
	set_word(f->srv.mem, 12288, 5);

	assert_int_equal(evr_connect(f->p.ctx, rt_addr(),
				     evr_listener_port(f->p.l), &f->p.cli_opts,
				     &c),
			 0);
	assert_non_null(c);
	recs_init(f, r, 4);
	assert_int_equal(evr_write(c, f->cli.mr, 0, &f->cli.peer, 0, 4096,
				   op_cb, &r[0]),
			 0);
	assert_int_equal(evr_write_imm(c, f->cli.mr, 8192, &f->cli.peer, 8192,
				       100, 0x77, op_cb, &r[1]),
			 0);
	assert_int_equal(evr_read(c, f->cli.mr, 20000, &f->cli.peer, 16384,
				  4096, op_cb, &r[2]),
			 0);
	assert_int_equal(evr_fetch_add(c, f->cli.mr, 32768, &f->cli.peer,
				       12288, 3, op_cb, &r[3]),
			 0);
	assert_no_calls(r, 4);
	assert_int_equal(rt_run_until(f->loop, rt_pair_up_pred, &f->p, 20), 0);
	assert_int_equal(f->p.cli.connect_status, 0);
	assert_ptr_equal(f->p.cli.conn, c);
	wait_ok_in_order(f, r, 4);
	assert_int_equal(rt_verify(f->srv.mem, 4096, 60), -1);
	assert_int_equal(rt_run_until(f->loop, one_imm, &f->srv, 10), 0);
	assert_int_equal(f->srv.nimm, 1);
	assert_int_equal(f->srv.imm[0], 0x77);
	assert_int_equal(f->srv.imm_bad, 0);
	assert_int_equal(rt_verify(f->cli.mem + 20000, 4096, 62), -1);
	assert_int_equal(word(f->cli.mem, 32768), 5);
	assert_int_equal(word(f->srv.mem, 12288), 8);
}

/* A graceful close lets the operations already submitted finish before
 * on_close; new ones are refused at once. */
static void test_close_drains(void **state)
{
	struct fix *f = *state;
	evr_conn *c = f->p.cli.conn;
	struct op_rec r[51], bad;
	int i;

	recs_init(f, r, 51);
	recs_init(f, &bad, 1);
	memset(f->srv.mem, 0, REGION);
	for (i = 0; i < 50; i++) {
		rt_fill(f->cli.mem + i * 4096, 4096, 300 + (uint32_t)i);
		assert_int_equal(evr_write(c, f->cli.mr, (size_t)i * 4096,
					   &f->cli.peer, (uint64_t)i * 4096,
					   4096, op_cb, &r[i]),
				 0);
	}
	set_word(f->srv.mem, REGION - 8, 99);
	assert_int_equal(evr_read(c, f->cli.mr, REGION - 4096, &f->cli.peer,
				  REGION - 4096, 4096, op_cb, &r[50]),
			 0);
	assert_int_equal(evr_conn_close(c, 0), 0);
	assert_int_equal(evr_write(c, f->cli.mr, 0, &f->cli.peer, 0, 8, op_cb,
				   &bad),
			 -EPIPE);
	assert_int_equal(evr_write_imm(c, f->cli.mr, 0, &f->cli.peer, 0, 8, 1,
				       op_cb, &bad),
			 -EPIPE);
	assert_int_equal(evr_read(c, f->cli.mr, 0, &f->cli.peer, 0, 8, op_cb,
				  &bad),
			 -EPIPE);
	assert_int_equal(evr_fetch_add(c, f->cli.mr, 0, &f->cli.peer, 0, 1,
				       op_cb, &bad),
			 -EPIPE);
	assert_int_equal(evr_cmp_swap(c, f->cli.mr, 0, &f->cli.peer, 0, 0, 1,
				      op_cb, &bad),
			 -EPIPE);
	assert_no_calls(r, 51);
	assert_int_equal(rt_run_until(f->loop, rt_pair_closed_pred, &f->p, 30),
			 0);
	settle(f);
	for (i = 0; i < 51; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_int_equal(r[i].status, 0);
		assert_int_equal(r[i].order, i);
	}
	/* on_close is the last callback of the conn */
	assert_true(f->cli.close_order > r[50].order);
	assert_int_equal(f->p.cli.closes, 1);
	assert_int_equal(f->p.cli.close_status, 0);
	assert_int_equal(bad.calls, 0);
	for (i = 0; i < 50; i++)
		assert_int_equal(rt_verify(f->srv.mem + i * 4096, 4096,
					   300 + (uint32_t)i),
				 -1);
	assert_int_equal(word(f->cli.mem, REGION - 8), 99);
}

/* Missing handles, and a region of another ctx: -EINVAL, no callback. */
static void test_bad_args(void **state)
{
	struct fix *f = *state;
	evr_conn *c = f->p.cli.conn;
	const struct evr_rkey *rk = &f->cli.peer;
	struct evr_ctx_opts o;
	struct op_rec bad;
	evr_ctx *other = NULL;
	evr_mr *m2 = NULL;
	uint8_t *mem2 = NULL;

	recs_init(f, &bad, 1);
	assert_int_equal(evr_write(NULL, f->cli.mr, 0, rk, 0, 8, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_write(c, NULL, 0, rk, 0, 8, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_write(c, f->cli.mr, 0, NULL, 0, 8, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_read(c, NULL, 0, rk, 0, 8, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_fetch_add(c, f->cli.mr, 0, NULL, 0, 1, op_cb,
				       &bad),
			 -EINVAL);
	assert_int_equal(evr_cmp_swap(NULL, f->cli.mr, 0, rk, 0, 0, 1, op_cb,
				      &bad),
			 -EINVAL);

	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&other, f->loop, &o), 0);
	assert_int_equal(posix_memalign((void **)&mem2, 4096, 4096), 0);
	assert_int_equal(evr_mr_reg(other, mem2, 4096, 0, &m2), 0);
	assert_int_equal(evr_write(c, m2, 0, rk, 0, 8, op_cb, &bad), -EINVAL);
	assert_int_equal(evr_write_imm(c, m2, 0, rk, 0, 8, 1, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_read(c, m2, 0, rk, 0, 8, op_cb, &bad), -EINVAL);
	assert_int_equal(evr_fetch_add(c, m2, 0, rk, 0, 1, op_cb, &bad),
			 -EINVAL);
	assert_int_equal(evr_cmp_swap(c, m2, 0, rk, 0, 0, 1, op_cb, &bad),
			 -EINVAL);
	settle(f);
	assert_int_equal(bad.calls, 0);
	assert_int_equal(evr_mr_dereg(m2), 0);
	evr_ctx_destroy(other);
	free(mem2);
}

/* A key the peer never issued: the write fails at the peer, its callback
 * gets the error once, the ops queued behind it are flushed, and the
 * connection ends on both sides with an error. */
static void test_bad_rkey(void **state)
{
	struct fix *f = *state;
	struct evr_rkey rk = f->cli.peer;
	struct op_rec r[4];
	int i;

	rk.rkey ^= 0x5a5a00u;
	recs_init(f, r, 4);
	assert_int_equal(evr_write(f->p.cli.conn, f->cli.mr, 0, &rk, 0, 64,
				   op_cb, &r[0]),
			 0);
	for (i = 1; i < 4; i++)
		assert_int_equal(evr_write(f->p.cli.conn, f->cli.mr, 0,
					   &f->cli.peer, 0, 64, op_cb, &r[i]),
				 0);
	{
		struct recs w = {r, 4};

		assert_int_equal(rt_run_until(f->loop, recs_done, &w, 30), 0);
	}
	assert_int_equal(rt_run_until(f->loop, rt_pair_closed_pred, &f->p, 30),
			 0);
	settle(f);
	assert_int_equal(r[0].calls, 1);
	assert_int_equal(r[0].status, -EACCES);
	for (i = 1; i < 4; i++) {
		assert_int_equal(r[i].calls, 1);
		assert_true(r[i].status < 0);
	}
	assert_int_equal(f->p.cli.closes, 1);
	assert_int_equal(f->p.cli.close_status, -EACCES);
	assert_int_equal(f->p.srv.closes, 1);
	assert_true(f->p.srv.close_status < 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_write),	     T(test_write_imm), T(test_read),
		T(test_fetch_add),   T(test_cmp_swap),	T(test_bounds),
		T(test_misaligned),  T(test_dereg_busy), T(test_close_drains),
		T(test_bad_args),    T(test_bad_rkey),
		cmocka_unit_test_setup_teardown(test_before_connected,
						setup_unconnected, teardown),
	};
#undef T

	rt_init(300);
	return cmocka_run_group_tests_name("rdma_rma", tests, NULL, NULL);
}
