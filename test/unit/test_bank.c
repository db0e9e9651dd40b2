/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The credit bank of a shared receive queue (lib/bank.h).
 *
 * Unit cases cover the configuration check, pool growth in chunks up to
 * the limit, admission and refusal, window growth on WANT, shrinking on
 * other messages and when the bank is short, the minimum window, grant and
 * consumption overflow (-EPROTO) and detaching a connection.
 *
 * Then a simulation: one receiving ctx with one bank and an SRQ serves
 * hundreds to thousands of connections.  Each connection's remote side
 * keeps a receive queue of its own (credit.h as today) and sends data
 * (eager or rendezvous requests) in bursts -- a few connections busy, most
 * nearly idle; the ctx answers rendezvous with FINs and returns credits.
 * Messages travel for a random time, in order per connection; buffers are
 * re-posted after a random delay; the pool is refilled in chunks after a
 * random delay, up to its limit.  At every step the credits outstanding
 * over all connections (held by the peer, in messages either way, owed)
 * stay within the buffers posted to the SRQ and match the bank's books;
 * every message is delivered, the busy connections reach a large window,
 * the idle ones end at the minimum, and the exchange goes quiet when the
 * data stops.  Then late connections are admitted while the pool can grow
 * and refused (-ENOBUFS) only at its limit, and once every connection is
 * detached the whole pool is spare again.
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "bank.h"

static const struct evr__bank_cfg cfg_std = {
    .chunk = 64,
    .limit = 1024,
    .win_min = 4,
    .win_init = 8,
    .win_max = 64,
};

static void bank_setup(struct evr__bank *b, const struct evr__bank_cfg *cfg)
{
	uint32_t n;

	assert_int_equal(evr__bank_init(b, cfg), 0);
	while ((n = evr__bank_want(b)) > 0)
		evr__bank_add(b, n);
}

static void test_init(void **state)
{
	static const struct {
		struct evr__bank_cfg cfg;
		int rc;
	} cases[] = {
	    {{64, 1024, 4, 8, 64}, 0},
	    {{64, 1024, 4, 4, 4}, 0},
	    {{1, 8, 4, 8, 65535}, 0},
	    {{64, 1024, 3, 8, 64}, -EINVAL},	/* below reserve + 2 */
	    {{64, 1024, 3, 3, 4}, -EINVAL},	/* below the handshake's 4 */
	    {{64, 1024, 8, 4, 64}, -EINVAL},	/* min above init */
	    {{64, 1024, 4, 80, 64}, -EINVAL},	/* init above max */
	    {{64, 1024, 4, 8, 65536}, -EINVAL}, /* max beyond u16 */
	    {{0, 1024, 4, 8, 64}, -EINVAL},	/* no chunk */
	    {{64, 7, 4, 8, 64}, -EINVAL},	/* limit below init */
	};
	struct evr__bank b;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		memset(&b, 0xff, sizeof(b));
		assert_int_equal(evr__bank_init(&b, &cases[i].cfg),
				 cases[i].rc);
		if (cases[i].rc)
			continue;
		assert_int_equal(b.posted, 0);
		assert_int_equal(b.lent, 0);
		assert_int_equal(b.total, 0);
		assert_int_equal(b.nconns, 0);
		assert_true(b.low >= 2 * cases[i].cfg.win_init);
	}
	assert_int_equal(evr__bank_min_window(4), 4);
	assert_int_equal(evr__bank_min_window(64), 4);
}

/* The pool grows a chunk at a time while the spare is low, never past the
 * limit; a connection is refused only when the spare cannot cover its
 * initial window. */
static void test_admit_refuse(void **state)
{
	struct evr__bank_cfg cfg = {48, 100, 4, 8, 64};
	struct evr__bank b;
	struct evr__bank_conn bc[16] = {{0}};
	unsigned i, admitted = 0;
	int rc;

	(void)state;
	assert_int_equal(evr__bank_init(&b, &cfg), 0);
	assert_int_equal(evr__bank_want(&b), 48);
	/* empty pool: the first connection waits for a chunk */
	assert_int_equal(evr__bank_admit(&b, &bc[0]), -ENOBUFS);
	assert_int_equal(b.refused, 1);
	for (i = 0; i < 16; i++) {
		uint32_t n = evr__bank_want(&b);

		if (n)
			evr__bank_add(&b, n);
		rc = evr__bank_admit(&b, &bc[i]);
		if (rc) {
			assert_int_equal(rc, -ENOBUFS);
			break;
		}
		admitted++;
		assert_int_equal(bc[i].lent, 8);
		assert_int_equal(bc[i].window, 8);
		assert_true(b.lent <= b.posted);
	}
	/* 48 + 48 + 4 = 100 buffers: twelve windows of 8 */
	assert_int_equal(b.total, 100);
	assert_int_equal(admitted, 12);
	assert_int_equal(b.lent, 96);
	assert_int_equal(evr__bank_want(&b), 0); /* at the limit */
	assert_true(evr__bank_short(&b));
	/* a detached connection makes room for the next */
	evr__bank_detach(&b, &bc[0]);
	assert_int_equal(b.nconns, 11);
	assert_int_equal(evr__bank_admit(&b, &bc[12]), 0);
}

/* Consume and re-post one message of bc, the way the receive path does;
 * returns the credits re-granted. */
static uint32_t roundtrip(struct evr__bank *b, struct evr__bank_conn *bc,
			  struct evr__credit *cr, bool want)
{
	assert_int_equal(evr__bank_consume(b, bc, want), 0);
	return evr__bank_repost(b, bc, cr, false);
}

/* Buffers counted for a later batched post are not on the SRQ: the spare
 * leaves them out, so an admission or a growth cannot lend them. */
static void test_unposted_not_spare(void **state)
{
	struct evr__bank b;
	struct evr__bank_conn c = {0}, d = {0};

	(void)state;
	bank_setup(&b, &cfg_std);
	assert_int_equal(evr__bank_admit(&b, &c), 0);
	evr__bank_fix_window(&c); /* every credit comes back */
	assert_int_equal(evr__bank_spare(&b), b.posted - 8);
	/* a message lands; its buffer is counted, not posted yet */
	assert_int_equal(evr__bank_consume(&b, &c, false), 0);
	b.unposted++;
	assert_int_equal(evr__bank_repost(&b, &c, &(struct evr__credit){0},
					  false),
			 1);
	assert_int_equal(b.posted, b.total);
	assert_int_equal(evr__bank_spare(&b), b.posted - 1 - 8);
	/* all but the unposted one lent: no room for an admission */
	b.unposted = evr__bank_spare(&b) + 1;
	assert_int_equal(evr__bank_spare(&b), 0);
	assert_int_equal(evr__bank_admit(&b, &d), -ENOBUFS);
	assert_int_equal(b.lent, 8);
	/* the batch is posted: the spare is back */
	b.unposted = 0;
	assert_int_equal(evr__bank_spare(&b), b.posted - 8);
	assert_int_equal(evr__bank_admit(&b, &d), 0);
}

/* WANT grows the window by one a message, two credits for one, up to the
 * largest window; the threshold of updates follows it. */
static void test_grow(void **state)
{
	struct evr__bank b;
	struct evr__bank_conn bc = {0};
	struct evr__credit cr;
	unsigned i;

	(void)state;
	bank_setup(&b, &cfg_std);
	assert_int_equal(evr__bank_admit(&b, &bc), 0);
	evr__credit_init(&cr, 16, cfg_std.win_max);
	for (i = 0; i < 56; i++) {
		uint32_t n = evr__bank_want(&b); /* the loop refills */

		if (n)
			evr__bank_add(&b, n);
		assert_int_equal(roundtrip(&b, &bc, &cr, true), 2);
		assert_int_equal(bc.window, 9 + i);
		assert_int_equal(bc.lent, bc.window);
		assert_int_equal(cr.window, bc.window);
	}
	assert_int_equal(b.grown, 56);
	assert_int_equal(cr.owed, 2 * 56);
	/* at the largest window: returns only */
	assert_int_equal(roundtrip(&b, &bc, &cr, true), 1);
	assert_int_equal(bc.window, 64);
	assert_int_equal(bc.lent, 64);
	assert_true(b.lent <= b.posted);
}

/* Without WANT the window shrinks by one a message, by not re-granting,
 * down to the minimum and no further. */
static void test_shrink_to_min(void **state)
{
	struct evr__bank b;
	struct evr__bank_conn bc = {0};
	struct evr__credit cr;
	uint32_t spare;
	unsigned i;

	(void)state;
	bank_setup(&b, &cfg_std);
	assert_int_equal(evr__bank_admit(&b, &bc), 0);
	evr__credit_init(&cr, 16, cfg_std.win_max);
	spare = evr__bank_spare(&b);
	for (i = 0; i < 4; i++) {
		assert_int_equal(roundtrip(&b, &bc, &cr, false), 0);
		assert_int_equal(bc.window, 7 - i);
		assert_int_equal(bc.lent, 7 - i);
	}
	assert_int_equal(b.withheld, 4);
	assert_int_equal(evr__bank_spare(&b), spare + 4);
	/* the minimum is kept */
	for (i = 0; i < 10; i++) {
		assert_int_equal(roundtrip(&b, &bc, &cr, false), 1);
		assert_int_equal(bc.window, 4);
		assert_int_equal(bc.lent, 4);
	}
	assert_int_equal(cr.owed, 10);
	/* a held buffer: the footprint stays, the re-grant waits */
	assert_int_equal(evr__bank_consume(&b, &bc, false), 0);
	assert_int_equal(bc.lent, 3);
	assert_int_equal(bc.busy, 1);
	assert_int_equal(evr__bank_repost(&b, &bc, &cr, true), 1);
	assert_int_equal(cr.quiet, 1); /* it held an update */
	assert_int_equal(bc.lent, 4);
}

/* A short bank (spare low, pool at its limit) grows no window and takes
 * back from windows above a fair share, never below the minimum. */
static void test_short_bank(void **state)
{
	struct evr__bank_cfg cfg = {32, 64, 4, 8, 64};
	struct evr__bank b;
	struct evr__bank_conn bc[5] = {{0}};
	struct evr__credit cr;
	unsigned i;

	(void)state;
	bank_setup(&b, &cfg);
	assert_int_equal(b.total, 32);
	assert_int_equal(evr__bank_admit(&b, &bc[0]), 0);
	evr__credit_init(&cr, 16, cfg.win_max);
	/* bc[0] grows while the spare exceeds the initial window */
	while (roundtrip(&b, &bc[0], &cr, true) == 2)
		;
	assert_int_equal(evr__bank_spare(&b), cfg.win_init);
	assert_int_equal(bc[0].lent, 32 - 8);
	/* growth stopped: the target went back to the footprint */
	assert_int_equal(bc[0].window, 24);
	/* more buffers: the limit */
	evr__bank_add(&b, evr__bank_want(&b));
	assert_int_equal(b.total, 64);
	assert_int_equal(evr__bank_want(&b), 0);
	for (i = 1; i < 5; i++)
		assert_int_equal(evr__bank_admit(&b, &bc[i]), 0);
	assert_int_equal(evr__bank_spare(&b), 64 - 24 - 32);
	assert_true(evr__bank_short(&b));
	/* bc[0] wants more and gets less, until the spare is back to the
	 * low-water mark (fair share: 64 / 5) */
	for (i = 0; i < 7; i++) {
		assert_int_equal(roundtrip(&b, &bc[0], &cr, true), 0);
		assert_int_equal(bc[0].lent, 23 - i);
	}
	assert_int_equal(bc[0].window, 17);
	assert_int_equal(evr__bank_spare(&b), 15);
	/* the next re-post brings the spare to the mark: a return again,
	 * no growth, and the window stays */
	assert_int_equal(roundtrip(&b, &bc[0], &cr, true), 1);
	assert_int_equal(bc[0].lent, 17);
	assert_int_equal(bc[0].window, 17);
	/* an idle window goes to the minimum and stays there */
	for (i = 0; i < 10; i++)
		roundtrip(&b, &bc[1], &cr, false);
	assert_int_equal(bc[1].window, 4);
	assert_int_equal(bc[1].lent, 4);
}

/* A message beyond the credits lent is the peer's fault: -EPROTO, books
 * unchanged.  Likewise a grant beyond the announced largest window. */
static void test_overflow(void **state)
{
	struct evr__bank b;
	struct evr__bank_conn bc = {0};
	struct evr__credit cr, peer;
	unsigned i;

	(void)state;
	bank_setup(&b, &cfg_std);
	assert_int_equal(evr__bank_admit(&b, &bc), 0);
	for (i = 0; i < 8; i++)
		assert_int_equal(evr__bank_consume(&b, &bc, false), 0);
	assert_int_equal(evr__bank_consume(&b, &bc, false), -EPROTO);
	assert_int_equal(bc.lent, 0);
	assert_int_equal(bc.busy, 8);
	assert_int_equal(b.lent, 0);

	/* the sending side of the same connection: lent 8 of 64 at most */
	evr__credit_init_lent(&peer, cfg_std.win_max, cfg_std.win_init, 16);
	evr__credit_init(&cr, 16, cfg_std.win_max);
	for (i = 0; i < 8; i++) {
		uint32_t n = evr__bank_repost(&b, &bc, &cr, false);

		assert_int_equal(evr__credit_grant(&peer, n), 0);
	}
	assert_int_equal(peer.avail, 8 + 4); /* 4 returned, 4 left */
	assert_int_equal(evr__credit_grant(&peer, 64 - 12), 0);
	assert_int_equal(evr__credit_grant(&peer, 1), -EPROTO);
	assert_int_equal(peer.avail, 64);
}

/* A connection gone: its loan returns at once, its held buffers when they
 * are re-posted. */
static void test_detach(void **state)
{
	struct evr__bank b;
	struct evr__bank_conn bc = {0};
	uint32_t spare;

	(void)state;
	bank_setup(&b, &cfg_std);
	spare = evr__bank_spare(&b);
	assert_int_equal(evr__bank_admit(&b, &bc), 0);
	assert_int_equal(evr__bank_consume(&b, &bc, false), 0);
	assert_int_equal(evr__bank_consume(&b, &bc, false), 0);
	evr__bank_detach(&b, &bc);
	assert_int_equal(b.orphans, 2);
	assert_int_equal(b.nconns, 0);
	assert_int_equal(evr__bank_spare(&b), spare - 2);
	evr__bank_repost_orphan(&b);
	evr__bank_repost_orphan(&b);
	assert_int_equal(b.orphans, 0);
	assert_int_equal(evr__bank_spare(&b), spare);
	assert_int_equal(b.posted, b.total);
}

/* ---- many connections on one bank ---- */

/* M_GIVE and M_ASK: credit updates with EVR_F_GIVE and EVR_F_WANT */
enum { M_EAGER, M_REQ, M_FIN, M_CREDIT, M_GIVE, M_ASK };

struct wmsg {
	uint32_t arrive;
	uint16_t credits;
	uint8_t type;
	uint8_t want;
	uint32_t give;
};

#define MAX_CONNS 2000
#define LATE_CAP  4096 /* connections admitted after the traffic */
#define AB_CAP	  256  /* >= win_max: what the remote side may have in flight */
#define BA_CAP	  32   /* >= the remote side's receive depth */
#define DA	  8    /* the remote side's receive depth */

struct sconn {
	/* the remote side: a receive queue of its own, depth DA */
	struct evr__credit a;
	unsigned a_posted;
	uint32_t a_repost_at[BA_CAP];
	unsigned a_nrepost;
	unsigned to_send;	    /* user messages waiting for a credit */
	unsigned long queued, sent; /* handed to to_send, sent */
	/* the ctx's side: the bank's */
	struct evr__credit b;
	struct evr__bank_conn bc;
	uint32_t b_repost_at[AB_CAP];
	uint8_t b_repost_type[AB_CAP];
	unsigned b_nrepost;
	uint32_t read_done[AB_CAP];
	unsigned nread, fin_due;
	unsigned long delivered, updates_late;
	unsigned inbusy; /* messages for the ctx, other than updates, not
			    re-posted yet */
	/* in flight, in order */
	struct wmsg ab[AB_CAP], ba[BA_CAP];
	unsigned ab_head, ab_tail, ba_head, ba_tail;
	unsigned ba_credits; /* credits carried by ba[] */
	uint32_t max_window;
	unsigned long wants; /* messages that said WANT */
	/* the idle cycle (conn.c on_idle, idle_ask) */
	uint32_t last_data, tick_at;
	bool gave_back, asked;
	unsigned ab_give; /* credits given back in ab[] */
	unsigned long gives, asks;
	bool busy;
	unsigned long total;
};

struct sim_cfg {
	unsigned nconns, nbusy;
	unsigned long busy_total, idle_total;
	unsigned idle_per_mille; /* chance of an idle burst each step */
	unsigned hold, read, latency, rndv_pct, refill;
	struct evr__bank_cfg bank;
	bool expect_big;     /* the limit leaves room for large windows; if not,
				the bank must have been short */
	unsigned idle_after; /* steps without data before a give-back; 0: off */
};

struct sim {
	struct sconn c[MAX_CONNS];
	struct evr__bank bank;
	const struct sim_cfg *cfg;
	unsigned srq_posted; /* buffers really posted to the SRQ */
	uint32_t refill_at, refill_n;
	uint32_t step;
	unsigned seed;
	bool settled;
	unsigned long short_steps; /* steps the bank was short */
};

static unsigned rnd(struct sim *w, unsigned n)
{
	w->seed = w->seed * 1103515245u + 12345u;
	return n ? (w->seed >> 8) % n : 0;
}

static uint32_t arrival(struct sim *w, const struct wmsg *ring, unsigned head,
			unsigned tail, unsigned cap)
{
	uint32_t t = w->step + 1 + rnd(w, w->cfg->latency);

	/* RC delivers in order: never before the message ahead */
	if (tail != head && ring[(tail - 1) % cap].arrive > t)
		t = ring[(tail - 1) % cap].arrive;
	return t;
}

/* The remote side sends to the ctx. */
static struct wmsg *send_ab(struct sim *w, struct sconn *c, uint8_t type,
			    bool want)
{
	struct wmsg *m;
	uint32_t t = arrival(w, c->ab, c->ab_head, c->ab_tail, AB_CAP);

	assert_true(c->ab_tail - c->ab_head < AB_CAP);
	m = &c->ab[c->ab_tail++ % AB_CAP];
	m->type = type;
	m->want = want;
	c->wants += want;
	m->credits = evr__credit_piggyback(&c->a);
	m->arrive = t;
	m->give = 0;
	if (type == M_EAGER || type == M_REQ || type == M_FIN)
		c->inbusy++;
	return m;
}

/* The ctx sends to the remote side. */
static void send_ba(struct sim *w, struct sconn *c, uint8_t type)
{
	struct wmsg *m;
	uint32_t t = arrival(w, c->ba, c->ba_head, c->ba_tail, BA_CAP);

	assert_true(c->ba_tail - c->ba_head < BA_CAP);
	m = &c->ba[c->ba_tail++ % BA_CAP];
	m->type = type;
	m->want = 0;
	m->credits = evr__credit_piggyback(&c->b);
	m->arrive = t;
	c->ba_credits += m->credits;
}

/* The remote side's flush, as conn.c does it: re-post, user messages
 * (WANT while the window holds them back), a credit update if due. */
static void flush_remote(struct sim *w, struct sconn *c)
{
	unsigned i, n;

	for (i = 0; i < c->a_nrepost;) {
		if (c->a_repost_at[i] > w->step) {
			i++;
			continue;
		}
		c->a_repost_at[i] = c->a_repost_at[--c->a_nrepost];
		c->a_posted++;
		assert_true(c->a_posted <= DA);
		evr__credit_reposted(&c->a, 1);
	}
	if (c->queued < c->total) {
		if (c->busy)
			n = rnd(w, 8);
		else if (!c->to_send && rnd(w, 1000) < w->cfg->idle_per_mille)
			/* a first burst that fits the initial window, then
			 * single messages now and then */
			n = c->queued ? 1 : 1 + rnd(w, 6);
		else
			n = 0;
		if (c->queued + n > c->total)
			n = (unsigned)(c->total - c->queued);
		c->queued += n;
		c->to_send += n;
	}
	n = 1 + rnd(w, 16); /* at most this many per pass */
	while (n-- && c->to_send && evr__credit_take(&c->a, false)) {
		c->to_send--;
		c->sent++;
		c->last_data = w->step;
		send_ab(w, c, rnd(w, 100) < w->cfg->rndv_pct ? M_REQ : M_EAGER,
			evr__credit_want(&c->a, c->to_send));
	}
	if (w->cfg->idle_after) {
		unsigned tick = w->cfg->idle_after;
		struct wmsg *m;

		bool give = false;

		if (w->step - c->tick_at >= tick) {
			/* on_idle: data that waited a whole tick asks, a
			 * conn that sent nothing gives back */
			bool sent = c->last_data >= c->tick_at;

			c->tick_at = w->step;
			c->asked = false;
			if (!sent && c->to_send &&
			    !evr__credit_can(&c->a, false))
				c->gave_back = true;
			give = !sent && !c->to_send;
		}
		if (c->gave_back && evr__credit_can(&c->a, false))
			c->gave_back = c->asked = false;
		if (c->gave_back && !c->asked && c->to_send &&
		    evr__credit_take(&c->a, true)) {
			send_ab(w, c, M_ASK, true);
			c->asked = true;
			c->asks++;
		}
		if (give && evr__credit_idle_worth(&c->a) &&
		    evr__credit_take(&c->a, true)) {
			m = send_ab(w, c, M_GIVE, false);
			m->give = evr__credit_idle_excess(&c->a);
			c->a.avail -= m->give;
			c->ab_give += m->give;
			c->gave_back = true;
			c->gives++;
		}
	}
	if ((evr__credit_need_update(&c->a) ||
	     evr__credit_peer_starved(&c->a, c->a_posted)) &&
	    evr__credit_take(&c->a, true))
		send_ab(w, c, M_CREDIT, false);
}

/* The ctx's flush: re-post to the SRQ (the bank re-grants), FINs, a
 * credit update if due. */
static void flush_ctx(struct sim *w, struct sconn *c)
{
	unsigned i;

	for (i = 0; i < c->b_nrepost;) {
		if (c->b_repost_at[i] > w->step) {
			i++;
			continue;
		}
		if (c->b_repost_type[i] < M_CREDIT)
			c->inbusy--;
		w->srq_posted++;
		evr__bank_repost(&w->bank, &c->bc, &c->b,
				 c->b_repost_type[i] == M_CREDIT ||
				     c->b_repost_type[i] == M_GIVE);
		c->b_nrepost--;
		c->b_repost_at[i] = c->b_repost_at[c->b_nrepost];
		c->b_repost_type[i] = c->b_repost_type[c->b_nrepost];
	}
	for (i = 0; i < c->nread;) {
		if (c->read_done[i] > w->step) {
			i++;
			continue;
		}
		c->read_done[i] = c->read_done[--c->nread];
		c->fin_due++;
	}
	while (c->fin_due && evr__credit_take(&c->b, true)) {
		c->fin_due--;
		send_ba(w, c, M_FIN);
	}
	if ((evr__credit_need_update(&c->b) ||
	     evr__credit_peer_starved(&c->b, c->bc.lent)) &&
	    evr__credit_take(&c->b, true)) {
		if (w->settled)
			c->updates_late++;
		send_ba(w, c, M_CREDIT);
	}
}

static void deliver(struct sim *w, struct sconn *c)
{
	while (c->ab_head != c->ab_tail &&
	       c->ab[c->ab_head % AB_CAP].arrive <= w->step) {
		struct wmsg *m = &c->ab[c->ab_head++ % AB_CAP];
		uint32_t when = w->step + 1;

		if (w->srq_posted == 0)
			fail_msg("RNR at step %u: the SRQ is empty", w->step);
		w->srq_posted--;
		assert_int_equal(evr__bank_consume(&w->bank, &c->bc, m->want),
				 0);
		if (evr__credit_grant(&c->b, m->credits))
			fail_msg("grant of %u refused at step %u", m->credits,
				 w->step);
		if (m->type == M_GIVE) {
			assert_int_equal(
			    evr__bank_giveback(&w->bank, &c->bc, m->give), 0);
			c->ab_give -= m->give;
		}
		if (m->type == M_EAGER)
			when += rnd(w, w->cfg->hold);
		if (m->type == M_EAGER || m->type == M_REQ)
			c->delivered++;
		if (m->type == M_REQ) {
			assert_true(c->nread < AB_CAP);
			c->read_done[c->nread++] =
			    w->step + 1 + rnd(w, w->cfg->read);
		}
		assert_true(c->b_nrepost < AB_CAP);
		c->b_repost_type[c->b_nrepost] = m->type;
		c->b_repost_at[c->b_nrepost++] = when;
	}
	while (c->ba_head != c->ba_tail &&
	       c->ba[c->ba_head % BA_CAP].arrive <= w->step) {
		struct wmsg *m = &c->ba[c->ba_head++ % BA_CAP];

		if (c->a_posted == 0)
			fail_msg("RNR at step %u on a remote side", w->step);
		c->a_posted--;
		c->ba_credits -= m->credits;
		/* a grant beyond the announced window is -EPROTO */
		if (evr__credit_grant(&c->a, m->credits))
			fail_msg("grant of %u refused by a remote side at step "
				 "%u (avail %u)",
				 m->credits, w->step, c->a.avail);
		if (m->type == M_CREDIT)
			evr__credit_got_update(&c->a);
		assert_true(c->a_nrepost < BA_CAP);
		c->a_repost_at[c->a_nrepost++] = w->step + 1;
	}
}

/* The pool is refilled a while after it asks. */
static void refill(struct sim *w)
{
	if (w->refill_n && w->refill_at <= w->step) {
		evr__bank_add(&w->bank, w->refill_n);
		w->srq_posted += w->refill_n;
		w->refill_n = 0;
	}
	if (!w->refill_n) {
		w->refill_n = evr__bank_want(&w->bank);
		w->refill_at = w->step + 1 + rnd(w, w->cfg->refill);
	}
}

/* Credits outstanding, counted from what is really where, against the
 * buffers really posted and against the bank's books. */
static void check_books(struct sim *w)
{
	unsigned long sum = 0, lent = 0;
	unsigned i;

	for (i = 0; i < w->cfg->nconns; i++) {
		struct sconn *c = &w->c[i];
		unsigned out = c->a.avail + (c->ab_tail - c->ab_head) +
			       c->ab_give + c->ba_credits + c->b.owed;

		if (out != c->bc.lent)
			fail_msg("conn %u at step %u: %u credits out, the "
				 "bank says %u",
				 i, w->step, out, c->bc.lent);
		sum += out;
		lent += c->bc.lent;
		if (c->bc.window > c->max_window)
			c->max_window = c->bc.window;
		/* below the minimum only by giving back, never below the
		 * reserve */
		if (c->bc.lent + c->bc.busy < w->cfg->bank.win_min &&
		    (!c->gives ||
		     c->bc.lent + c->bc.busy <
			 evr__credit_reserve(w->cfg->bank.win_max)))
			fail_msg("conn %u below the minimum window", i);
	}
	if (sum > w->srq_posted)
		fail_msg("step %u: %lu credits outstanding, %u buffers posted",
			 w->step, sum, w->srq_posted);
	assert_int_equal(lent, w->bank.lent);
	w->short_steps += evr__bank_short(&w->bank);
	assert_int_equal(w->srq_posted, w->bank.posted);
	assert_true(w->bank.total <= w->cfg->bank.limit);
}

static bool conn_active(const struct sim *w, const struct sconn *c)
{
	return c->queued < c->total || c->to_send || c->nread || c->fin_due ||
	       c->inbusy ||
	       (w->cfg->idle_after && evr__credit_idle_worth(&c->a));
}

static bool conn_moving(const struct sconn *c)
{
	return c->ab_head != c->ab_tail || c->ba_head != c->ba_tail ||
	       c->b_nrepost || c->a_nrepost;
}

static void run_sim(const struct sim_cfg *cfg, unsigned seed)
{
	/* static: a failed check leaves by longjmp, nothing to free */
	static struct sim sim;
	static struct evr__bank_conn late[LATE_CAP];
	struct sim *w = &sim;
	unsigned nlate;
	uint32_t settled_at = 0, quiet_since = 0;
	unsigned i, n;
	bool active, moving;

	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->seed = seed;
	assert_true(cfg->nconns <= MAX_CONNS);
	assert_true(cfg->bank.win_max <= AB_CAP);
	assert_int_equal(evr__bank_init(&w->bank, &cfg->bank), 0);
	for (i = 0; i < cfg->nconns; i++) {
		struct sconn *c = &w->c[i];

		while (evr__bank_admit(&w->bank, &c->bc)) {
			n = evr__bank_want(&w->bank);
			if (!n)
				fail_msg("conn %u refused", i);
			evr__bank_add(&w->bank, n);
			w->srq_posted += n;
		}
		/* the handshake: the ctx announces win_max and win_init */
		evr__credit_init_lent(&c->a, cfg->bank.win_max,
				      cfg->bank.win_init, DA);
		evr__credit_init(&c->b, DA, cfg->bank.win_max);
		evr__credit_set_window(&c->b, c->bc.window);
		c->a_posted = DA;
		c->busy = i < cfg->nbusy;
		c->total = c->busy ? cfg->busy_total : cfg->idle_total;
	}
	for (w->step = 1;; w->step++) {
		refill(w);
		active = moving = false;
		for (i = 0; i < cfg->nconns; i++) {
			struct sconn *c = &w->c[i];

			if (rnd(w, 2)) {
				flush_remote(w, c);
				flush_ctx(w, c);
			} else {
				flush_ctx(w, c);
				flush_remote(w, c);
			}
			deliver(w, c);
			active |= conn_active(w, c);
			moving |= conn_moving(c);
		}
		check_books(w);
		if (!w->settled && !active) {
			w->settled = true;
			settled_at = w->step;
		}
		if (active || moving)
			quiet_since = w->step;
		else if (w->step - quiet_since > 8)
			break;
		if (w->settled && w->step - settled_at > 4 * cfg->latency + 50)
			fail_msg("credit updates still moving %u steps after "
				 "the data (seed %u)",
				 w->step - settled_at, seed);
		if (w->step > 20 * cfg->busy_total + 200000) {
			for (i = 0; i < cfg->nconns; i++) {
				struct sconn *c = &w->c[i];

				if (conn_active(w, c) || conn_moving(c))
					print_message(
					    "conn %u: queued %lu/%lu to_send "
					    "%u avail %u owed %u "
					    "inbusy %u nread %u fin %u | lent "
					    "%u busy %u win %u b.avail %u "
					    "b.owed %u quiet %u gave %d asked "
					    "%d\n",
					    i, c->queued, c->total, c->to_send,
					    c->a.avail, c->a.owed, c->inbusy,
					    c->nread, c->fin_due, c->bc.lent,
					    c->bc.busy, c->bc.window,
					    c->b.avail, c->b.owed, c->b.quiet,
					    c->gave_back, c->asked);
			}
			fail_msg("deadlock (seed %u, step %u)", seed, w->step);
		}
	}
	for (i = 0; i < cfg->nconns; i++) {
		struct sconn *c = &w->c[i];

		assert_int_equal(c->sent, c->total);
		assert_int_equal(c->delivered, c->total);
		assert_true(c->updates_late <= 2);
		if (c->busy && cfg->expect_big &&
		    c->max_window < cfg->bank.win_max / 2)
			fail_msg("busy conn %u reached a window of %u only "
				 "(seed %u)",
				 i, c->max_window, seed);
		if (cfg->idle_after) {
			/* every conn ends idle: its reserve and one, and
			 * what came back since (less than 2 more, else it
			 * would give back again), the pool's buffers free
			 * for others */
			uint32_t r = evr__credit_reserve(cfg->bank.win_max);

			if (c->a.avail > r + 2 || c->bc.lent > r + 3 ||
			    c->bc.lent != c->a.avail + c->b.owed)
				fail_msg("idle conn %u holds %u credits, lent "
					 "%u (seed %u)",
					 i, c->a.avail, c->bc.lent, seed);
		} else if (!c->busy && (c->bc.window != cfg->bank.win_min ||
					c->bc.lent != cfg->bank.win_min))
			fail_msg("idle conn %u ends with window %u, lent %u "
				 "(%lu of %lu messages said WANT, seed %u)",
				 i, c->bc.window, c->bc.lent, c->wants,
				 c->total, seed);
	}
	assert_int_equal(w->bank.posted, w->bank.total);
	if (cfg->idle_after) {
		unsigned long gives = 0, asks = 0;

		for (i = 0; i < cfg->nconns; i++)
			gives += w->c[i].gives, asks += w->c[i].asks;
		if (!gives || !asks || !w->bank.reclaimed)
			fail_msg(
			    "idle cycle not run: %lu give-backs, %lu asks, "
			    "%lu reclaimed (seed %u)",
			    gives, asks, (unsigned long)w->bank.reclaimed,
			    seed);
	}
	if (!cfg->expect_big && !w->short_steps)
		fail_msg("the bank was never short (seed %u)", seed);
	/* late connections: admitted while the pool can grow, refused only
	 * at the limit with less spare than an initial window */
	for (nlate = 0;; nlate++) {
		assert_true(nlate < LATE_CAP);
		n = evr__bank_want(&w->bank);
		if (n)
			evr__bank_add(&w->bank, n);
		if (evr__bank_admit(&w->bank, &late[nlate]) == 0)
			continue;
		assert_int_equal(evr__bank_want(&w->bank), 0);
		assert_true(w->bank.total + cfg->bank.win_init >
			    cfg->bank.limit);
		assert_true(evr__bank_spare(&w->bank) < cfg->bank.win_init);
		break;
	}
	assert_true(w->bank.total <= cfg->bank.limit);
	/* every connection closes: the whole pool is spare again */
	for (i = 0; i < nlate; i++)
		evr__bank_detach(&w->bank, &late[i]);
	for (i = 0; i < cfg->nconns; i++)
		evr__bank_detach(&w->bank, &w->c[i].bc);
	assert_int_equal(w->bank.lent, 0);
	assert_int_equal(w->bank.nconns, 0);
	assert_int_equal(w->bank.orphans, 0);
	assert_int_equal(evr__bank_spare(&w->bank), w->bank.total);
}

static void test_many_conns(void **state)
{
	/* clang-format off */
	static const struct sim_cfg cfgs[] = {
	/* conns busy  busy-n idle-n idle‰ hold read lat rndv refill
	 * {chunk, limit, min, init, max}              big  idle-after */
	{ 200,  4, 20000,  8, 10, 10, 10,  5, 20, 20,
	  {64,  4096, 4, 8, 128}, true,  0 },
	{ 200,  8, 10000, 12, 20, 50, 30, 10, 50,  5,
	  {32,  4096, 4, 8, 256}, true,  0 },
	/* the limit: little room to grow, windows shrink when short */
	{ 200, 20,  5000,  8, 10, 20, 10,  5, 20, 10,
	  {64,  1700, 4, 8, 128}, false, 0 },
	{ 500,  2,  8000,  6,  5,  5,  5,  3, 10, 50,
	  {128, 8192, 4, 8, 64}, true,  0 },
	{2000,  4,  6000,  8,  5, 10, 10,  3, 20, 30,
	  {256, 20000, 4, 8, 128}, true,  0 },
	/* the idle cycle: conns give their windows back between messages
	 * and ask again; busy ones still grow (idle after N steps) */
	{ 200,  4, 20000,  8, 10, 10, 10,  5, 20, 20,
	  {64,  4096, 4, 8, 128}, true, 30 },
	{ 200, 20,  5000, 12, 10, 20, 10,  5, 20, 10,
	  {64,  1700, 4, 8, 128}, false, 20 },
	{ 500,  2,  8000,  6,  2,  5,  5,  3, 10, 50,
	  {128, 8192, 4, 8, 64}, true, 5 },
	};
	/* clang-format on */
	unsigned seed;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		for (seed = 1; seed <= (cfgs[i].nconns > 500 ? 1u : 3u); seed++)
			run_sim(&cfgs[i], seed * 7919 + (unsigned)i);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init),
	    cmocka_unit_test(test_admit_refuse),
	    cmocka_unit_test(test_unposted_not_spare),
	    cmocka_unit_test(test_grow),
	    cmocka_unit_test(test_shrink_to_min),
	    cmocka_unit_test(test_short_bank),
	    cmocka_unit_test(test_overflow),
	    cmocka_unit_test(test_detach),
	    cmocka_unit_test(test_many_conns),
	};

	return cmocka_run_group_tests_name("bank", tests, NULL, NULL);
}
