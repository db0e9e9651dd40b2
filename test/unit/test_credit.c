/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Credit accounting (lib/credit.h).
 *
 * The unit cases cover init, the reserve kept for control messages, grant
 * overflow, piggybacking, the explicit-update threshold, the starved-peer
 * rule and the no-echo property of updates.  A scripted exchange then
 * shows the shortest way two rendezvous peers can strand their credits.
 * Last, two simulated peers exchange messages the way conn.c and msg.c use
 * these functions -- random user sends both ways, eager and rendezvous,
 * FIN replies, receives re-posted after a random delay, messages in flight
 * for a random time, in order -- and the simulation checks that a message
 * never arrives without a posted receive (no RNR), that every grant is
 * accepted, that every message is delivered (no deadlock) and that the
 * exchange goes quiet once the data stops (credit updates do not echo).
 */
#include "config.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "credit.h"

static void test_init(void **state)
{
	static const struct {
		uint32_t peer, mine, reserved;
	} cases[] = {
	    {4, 64, 1}, {7, 7, 1}, {8, 4, 2}, {64, 64, 2}, {65535, 16, 2},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct evr__credit c;

		memset(&c, 0xff, sizeof(c));
		evr__credit_init(&c, cases[i].peer, cases[i].mine);
		assert_int_equal(c.avail, cases[i].peer);
		assert_int_equal(c.peer_depth, cases[i].peer);
		assert_int_equal(c.my_depth, cases[i].mine);
		assert_int_equal(c.reserved, cases[i].reserved);
		assert_int_equal(c.window, cases[i].mine);
		assert_int_equal(c.owed, 0);
		assert_int_equal(evr__credit_piggyback(&c), 0);
		assert_false(evr__credit_need_update(&c));
	}
}

/* Data stops at the reserve; control messages may use it. */
static void test_take_respects_reserve(void **state)
{
	static const uint32_t depths[] = {4, 5, 8, 16, 1000};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		struct evr__credit c;
		uint32_t k, data = 0, ctrl = 0;

		evr__credit_init(&c, depths[i], 64);
		/* this side owes a credit, as it does whenever it sends a
		 * control message: the message returns credits */
		evr__credit_reposted(&c, 1);
		while (evr__credit_take(&c, false))
			data++;
		assert_int_equal(data, depths[i] - c.reserved);
		assert_int_equal(c.avail, c.reserved);
		assert_false(evr__credit_can(&c, false));
		assert_true(evr__credit_can(&c, true));
		while (evr__credit_take(&c, true))
			ctrl++;
		assert_int_equal(ctrl, c.reserved);
		assert_int_equal(c.avail, 0);
		assert_false(evr__credit_can(&c, true));
		assert_false(evr__credit_take(&c, true));
		assert_false(evr__credit_take(&c, false));
		assert_int_equal(c.avail, 0);

		/* all credits back: the same again */
		assert_int_equal(evr__credit_grant(&c, depths[i]), 0);
		assert_int_equal(c.avail, depths[i]);
		/* control alone may take every credit */
		for (k = 0; k < depths[i]; k++)
			assert_true(evr__credit_take(&c, true));
		assert_false(evr__credit_take(&c, true));
	}
}

static void test_grant_overflow(void **state)
{
	struct evr__credit c;

	(void)state;
	evr__credit_init(&c, 16, 16);
	/* nothing outstanding: any grant is a lie */
	assert_int_equal(evr__credit_grant(&c, 1), -EPROTO);
	assert_int_equal(evr__credit_grant(&c, 0xffff), -EPROTO);
	assert_int_equal(c.avail, 16);
	assert_int_equal(evr__credit_grant(&c, 0), 0);

	assert_true(evr__credit_take(&c, false));
	assert_true(evr__credit_take(&c, false));
	assert_true(evr__credit_take(&c, true));
	assert_int_equal(evr__credit_grant(&c, 4), -EPROTO);
	assert_int_equal(c.avail, 13); /* a rejected grant changes nothing */
	assert_int_equal(evr__credit_grant(&c, 2), 0);
	assert_int_equal(c.avail, 15);
	assert_int_equal(evr__credit_grant(&c, 2), -EPROTO);
	assert_int_equal(evr__credit_grant(&c, 1), 0);
	assert_int_equal(c.avail, 16);
	assert_int_equal(evr__credit_grant(&c, 1), -EPROTO);
	/* a huge grant must not wrap the check */
	assert_int_equal(evr__credit_grant(&c, UINT32_MAX), -EPROTO);
	assert_int_equal(c.avail, 16);
}

static void test_piggyback(void **state)
{
	struct evr__credit c;

	(void)state;
	evr__credit_init(&c, 16, 64);
	evr__credit_reposted(&c, 3);
	evr__credit_reposted(&c, 2);
	assert_int_equal(c.owed, 5);
	assert_int_equal(evr__credit_piggyback(&c), 5);
	assert_int_equal(c.owed, 0);
	assert_int_equal(evr__credit_piggyback(&c), 0);

	/* capped to the u16 header field; the rest stays owed */
	evr__credit_reposted(&c, 70000);
	assert_int_equal(evr__credit_piggyback(&c), 65535);
	assert_int_equal(c.owed, 70000 - 65535);
	assert_int_equal(evr__credit_piggyback(&c), 70000 - 65535);
	assert_int_equal(c.owed, 0);
	evr__credit_reposted(&c, 65535);
	assert_int_equal(evr__credit_piggyback(&c), 65535);
	assert_int_equal(c.owed, 0);
}

/* The direct way's pair: evr__credit_owed_now() reads what a header may
 * carry and changes nothing (a post that fails leaves the books as they
 * were); evr__credit_sent() then spends the message's credit and counts
 * off what it carried, quiet ones first clamped as piggyback does. */
static void test_owed_now_sent(void **state)
{
	struct evr__credit c;

	(void)state;
	evr__credit_init(&c, 16, 64);
	evr__credit_reposted(&c, 4);
	evr__credit_got_update(&c);
	evr__credit_got_update(&c);
	assert_int_equal(evr__credit_owed_now(&c), 4);
	assert_int_equal(evr__credit_owed_now(&c), 4);
	assert_int_equal(c.owed, 4);
	assert_int_equal(c.quiet, 2);
	assert_int_equal(c.avail, 16);
	assert_true(evr__credit_can(&c, false));
	evr__credit_sent(&c, evr__credit_owed_now(&c));
	assert_int_equal(c.avail, 15);
	assert_int_equal(c.owed, 0);
	assert_int_equal(c.quiet, 0);

	/* capped like piggyback; the rest stays owed, quiet at most that */
	evr__credit_reposted(&c, 70000);
	c.quiet = 70000;
	assert_int_equal(evr__credit_owed_now(&c), 65535);
	evr__credit_sent(&c, 65535);
	assert_int_equal(c.avail, 14);
	assert_int_equal(c.owed, 70000 - 65535);
	assert_int_equal(c.quiet, 70000 - 65535);
	/* nothing owed: the message still spends its credit */
	evr__credit_sent(&c, 0);
	assert_int_equal(c.avail, 13);
	assert_int_equal(c.owed, 70000 - 65535);
}

/* An explicit update is due at max(2, my_depth / 4) owed credits. */
static void test_need_update_threshold(void **state)
{
	static const struct {
		uint32_t my_depth, thr;
	} cases[] = {
	    {1, 2},  {4, 2},   {8, 2},	 {11, 2},     {12, 3},
	    {16, 4}, {64, 16}, {65, 16}, {1000, 250}, {65535, 16383},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct evr__credit c;

		evr__credit_init(&c, 16, cases[i].my_depth);
		evr__credit_reposted(&c, cases[i].thr - 1);
		assert_false(evr__credit_need_update(&c));
		evr__credit_reposted(&c, 1);
		assert_true(evr__credit_need_update(&c));
		evr__credit_piggyback(&c);
		assert_false(evr__credit_need_update(&c));
	}
}

/* The peer may be out of data credits when what it holds of our receives
 * (posted and announced: posted - owed) is within its reserve. */
static void test_peer_starved(void **state)
{
	struct evr__credit c;
	uint32_t d, owed;

	(void)state;
	evr__credit_init(&c, 16, 16); /* peer's reserve: 2 */
	assert_false(evr__credit_peer_starved(&c, 16));
	/* the user holds 13 messages: 3 receives posted, 1 re-posted and
	 * owed -- the peer holds 2 credits, its reserve */
	evr__credit_reposted(&c, 1);
	assert_true(evr__credit_peer_starved(&c, 3));
	assert_false(evr__credit_peer_starved(&c, 4));
	/* announced: nothing owed, nothing to do */
	assert_int_equal(evr__credit_piggyback(&c), 1);
	assert_false(evr__credit_peer_starved(&c, 3));
	assert_false(evr__credit_peer_starved(&c, 0));

	/* a receive that held a bare update does not count */
	evr__credit_got_update(&c);
	evr__credit_reposted(&c, 1);
	assert_false(evr__credit_peer_starved(&c, 2));
	/* ... but one more that held data does, and then all go */
	evr__credit_reposted(&c, 1);
	assert_true(evr__credit_peer_starved(&c, 2));
	assert_int_equal(evr__credit_piggyback(&c), 2);
	assert_int_equal(c.owed, 0);
	assert_int_equal(c.quiet, 0);
	evr__credit_reposted(&c, 1);
	assert_true(evr__credit_peer_starved(&c, 2));

	/* with nothing held (every receive posted) it never fires before
	 * the plain threshold */
	for (d = 4; d <= 1024; d++) {
		evr__credit_init(&c, 16, d);
		for (owed = 0; owed <= d; owed++) {
			c.owed = owed;
			if (evr__credit_peer_starved(&c, d))
				assert_true(evr__credit_need_update(&c));
		}
	}
}

/* A rendezvous FIN is a control message (msg.c: fin->ctrl): it may take
 * the credits kept in reserve.  Both the scripted case and the simulation
 * below send FINs this way. */
#define FIN_CTRL true

/*
 * The shortest road to a deadlock with rendezvous, scripted on two credit
 * states of depth 4 (reserve 1).  FINs are control messages, as conn.c
 * flushes them: they may take the reserved credits.  Each side X, with Y
 * doing the same at the same time:
 *   1. X sends REQ1, REQ2 (carrying nothing);            X avail 2
 *   2. X gets Y's REQs and re-posts them (owes 2), sends an eager message
 *      e1 carrying the 2;                                X avail 1
 *   3. X gets Y's e1 (2 credits back);                   X avail 3
 *      the user holds e1
 *   4. X sends e2, e3 (carrying nothing: e1 is held);    X avail 1
 *   5. X gets e2, e3 (held); its reads of Y's REQs end: FIN1 takes the
 *      last credit, carrying nothing;                    X avail 0
 *   6. X gets Y's FIN1 and re-posts it, the user lets go of e1..e3:
 *      X owes 4 and must send a credit update -- with no credit left.
 * Neither side can ever send again: FIN2 and both rendezvous sends hang.
 * A message that spends the last credit must bring credits back.
 */
struct side {
	struct evr__credit cr;
	uint16_t wire[8]; /* credits in the messages in flight to the peer */
	unsigned nwire;
};

/* Send if a credit allows; what the message carries goes on the wire. */
static bool side_send(struct side *x, bool ctrl)
{
	if (!evr__credit_take(&x->cr, ctrl))
		return false;
	assert_true(x->nwire < 8);
	x->wire[x->nwire++] = evr__credit_piggyback(&x->cr);
	return true;
}

/* y receives everything x sent. */
static void side_deliver(struct side *x, struct side *y)
{
	unsigned i;

	for (i = 0; i < x->nwire; i++)
		assert_int_equal(evr__credit_grant(&y->cr, x->wire[i]), 0);
	x->nwire = 0;
}

static void test_fin_deadlock_scripted(void **state)
{
	struct side s[2];
	unsigned fin_due[2] = {2, 2};
	int x, round;

	(void)state;
	memset(s, 0, sizeof(s));
	for (x = 0; x < 2; x++)
		evr__credit_init(&s[x].cr, 4, 4);
	for (x = 0; x < 2; x++) { /* 1 */
		assert_true(side_send(&s[x], false));
		assert_true(side_send(&s[x], false));
	}
	for (x = 0; x < 2; x++) /* 2 */
		side_deliver(&s[!x], &s[x]);
	for (x = 0; x < 2; x++) {
		evr__credit_reposted(&s[x].cr, 2);
		assert_true(side_send(&s[x], false));
	}
	for (x = 0; x < 2; x++) /* 3 */
		side_deliver(&s[!x], &s[x]);
	for (x = 0; x < 2; x++) { /* 4 */
		assert_true(side_send(&s[x], false));
		assert_true(side_send(&s[x], false));
		assert_false(side_send(&s[x], false)); /* reserve reached */
	}
	for (x = 0; x < 2; x++) /* 5 */
		side_deliver(&s[!x], &s[x]);
	for (x = 0; x < 2; x++)
		while (fin_due[x] && side_send(&s[x], FIN_CTRL))
			fin_due[x]--;
	/* 6: deliver, re-post, let go of the held messages, and keep
	 * flushing FINs and credit updates as conn.c would */
	for (round = 0; round < 10; round++) {
		for (x = 0; x < 2; x++) {
			unsigned n = s[!x].nwire;

			side_deliver(&s[!x], &s[x]);
			evr__credit_reposted(&s[x].cr, n);
		}
		if (round == 0)
			for (x = 0; x < 2; x++)
				evr__credit_reposted(&s[x].cr, 3);
		for (x = 0; x < 2; x++) {
			while (fin_due[x] && side_send(&s[x], FIN_CTRL))
				fin_due[x]--;
			if (evr__credit_need_update(&s[x].cr))
				side_send(&s[x], true);
		}
	}
	if (fin_due[0] || fin_due[1])
		fail_msg("deadlock: FINs still waiting %u/%u, avail %u/%u, "
			 "owed %u/%u",
			 fin_due[0], fin_due[1], s[0].cr.avail, s[1].cr.avail,
			 s[0].cr.owed, s[1].cr.owed);
	/* and every credit came home */
	for (x = 0; x < 2; x++)
		assert_int_equal(s[x].cr.avail + s[!x].cr.owed, 4);
}

/* ---- two peers ---- */

/*
 * The model follows conn.c and msg.c.  A user message is an EAGER message
 * or a rendezvous request (RNDV_REQ): both are data and stop at the
 * reserve.  The receiver re-posts an RNDV_REQ's buffer at once and, after
 * its RDMA READ (a random time), answers with an RNDV_FIN, a control
 * message that may use the reserve.  An EAGER buffer is re-posted after a
 * random delay: the user holding the message, or the message waiting
 * behind a rendezvous for in-order delivery.  FIN and CREDIT buffers are
 * re-posted at once.  Every message carries the credits owed in its
 * header.
 */
enum { M_EAGER, M_REQ, M_FIN, M_CREDIT };

struct wire_msg {
	uint8_t type;
	uint16_t credits;
	uint64_t arrive; /* step at which it reaches the peer */
};

#define LINK_CAP 4096
#define PEND_CAP 4096

struct peer {
	struct evr__credit cr;
	unsigned depth;	 /* receives this side keeps posted */
	unsigned posted; /* receives posted now */
	/* consumed receives, re-posted at the given step */
	uint64_t repost_at[PEND_CAP];
	uint8_t repost_type[PEND_CAP];
	unsigned nrepost;
	/* rendezvous reads running; each ends in a FIN */
	uint64_t read_done[PEND_CAP];
	unsigned nread;
	unsigned fin_due; /* FINs waiting for a credit */
	unsigned to_send; /* user messages waiting for a credit */
	unsigned long sent, delivered, fins, updates, updates_late;
	unsigned busy; /* non-update messages for me not yet re-posted */
	/* messages this side sent, in flight to the other, in order */
	struct wire_msg link[LINK_CAP];
	unsigned head, tail;
};

struct world {
	struct peer p[2];
	uint64_t step;
	unsigned seed;
	unsigned max_hold, max_read, max_latency, rndv_pct;
	unsigned long total;	 /* user messages each side sends */
	unsigned long queued[2]; /* handed to to_send so far */
	bool settled; /* data done: only credit updates may still move */
};

static unsigned rnd(struct world *w, unsigned n)
{
	w->seed = w->seed * 1103515245u + 12345u;
	return n ? (w->seed >> 8) % n : 0;
}

static void send_msg(struct world *w, int from, uint8_t type)
{
	struct peer *s = &w->p[from];
	struct wire_msg *m;
	uint64_t arrive = w->step + 1 + rnd(w, w->max_latency);

	assert_true(s->tail - s->head < LINK_CAP);
	/* RC delivers in order: never before the message ahead */
	if (s->tail != s->head &&
	    s->link[(s->tail - 1) % LINK_CAP].arrive > arrive)
		arrive = s->link[(s->tail - 1) % LINK_CAP].arrive;
	m = &s->link[s->tail++ % LINK_CAP];
	m->type = type;
	m->credits = evr__credit_piggyback(&s->cr);
	m->arrive = arrive;
	if (type != M_CREDIT)
		w->p[!from].busy++;
}

/* What evr__conn_flush does: re-post receives, then control messages
 * (may use the reserve), then user messages, then an explicit credit
 * update if one is due. */
static void flush(struct world *w, int me)
{
	struct peer *s = &w->p[me];
	unsigned i, n;

	for (i = 0; i < s->nrepost;) {
		if (s->repost_at[i] > w->step) {
			i++;
			continue;
		}
		if (s->repost_type[i] != M_CREDIT)
			s->busy--;
		s->nrepost--;
		s->repost_at[i] = s->repost_at[s->nrepost];
		s->repost_type[i] = s->repost_type[s->nrepost];
		s->posted++;
		assert_true(s->posted <= s->depth);
		evr__credit_reposted(&s->cr, 1);
	}
	for (i = 0; i < s->nread;) {
		if (s->read_done[i] > w->step) {
			i++;
			continue;
		}
		s->read_done[i] = s->read_done[--s->nread];
		s->fin_due++;
	}
	while (s->fin_due && evr__credit_take(&s->cr, FIN_CTRL)) {
		s->fin_due--;
		s->fins++;
		send_msg(w, me, M_FIN);
	}
	/* a random number of user messages become ready */
	n = rnd(w, 8);
	if (w->queued[me] + n > w->total)
		n = (unsigned)(w->total - w->queued[me]);
	w->queued[me] += n;
	s->to_send += n;
	n = 1 + rnd(w, 16); /* at most this many per pass */
	while (n-- && s->to_send && evr__credit_take(&s->cr, false)) {
		s->to_send--;
		s->sent++;
		send_msg(w, me, rnd(w, 100) < w->rndv_pct ? M_REQ : M_EAGER);
	}
	if ((evr__credit_need_update(&s->cr) ||
	     evr__credit_peer_starved(&s->cr, s->posted)) &&
	    evr__credit_take(&s->cr, true)) {
		s->updates++;
		if (w->settled)
			s->updates_late++;
		send_msg(w, me, M_CREDIT);
	}
}

/* Messages from `from` reach the other side. */
static void deliver(struct world *w, int from)
{
	struct peer *s = &w->p[from], *r = &w->p[!from];

	while (s->head != s->tail &&
	       s->link[s->head % LINK_CAP].arrive <= w->step) {
		struct wire_msg *m = &s->link[s->head++ % LINK_CAP];
		uint64_t when = w->step + 1;

		/* no RNR: a receive is posted for every message */
		if (r->posted == 0)
			fail_msg("RNR at step %llu: peer %d got a message "
				 "with no receive posted",
				 (unsigned long long)w->step, !from);
		r->posted--;
		if (evr__credit_grant(&r->cr, m->credits))
			fail_msg("grant of %u refused at step %llu", m->credits,
				 (unsigned long long)w->step);
		if (m->type == M_EAGER)
			when += rnd(w, w->max_hold);
		if (m->type == M_CREDIT)
			evr__credit_got_update(&r->cr);
		if (m->type == M_EAGER || m->type == M_REQ)
			r->delivered++;
		if (m->type == M_REQ) {
			assert_true(r->nread < PEND_CAP);
			r->read_done[r->nread++] =
			    w->step + 1 + rnd(w, w->max_read);
		}
		assert_true(r->nrepost < PEND_CAP);
		r->repost_type[r->nrepost] = m->type;
		r->repost_at[r->nrepost++] = when;
	}
}

static bool idle(const struct world *w)
{
	int i;

	for (i = 0; i < 2; i++) {
		const struct peer *s = &w->p[i];

		if (s->head != s->tail || s->nrepost || s->to_send ||
		    s->nread || s->fin_due || w->queued[i] < w->total)
			return false;
	}
	return true;
}

struct world_cfg {
	unsigned d0, d1;     /* receive depths */
	unsigned long total; /* user messages each way */
	unsigned hold;	     /* eager buffers re-posted within this */
	unsigned read;	     /* rendezvous reads take up to this */
	unsigned latency;    /* messages in flight up to this */
	unsigned rndv_pct;   /* share of rendezvous among user messages */
};

static void run_world(const struct world_cfg *cfg, unsigned seed)
{
	/* static: a failed check leaves by longjmp, nothing to free */
	static struct world world;
	struct world *w = &world;
	uint64_t quiet_since = 0, settled_at = 0;
	int i;

	memset(w, 0, sizeof(*w));
	w->seed = seed;
	w->total = cfg->total;
	w->max_hold = cfg->hold;
	w->max_read = cfg->read;
	w->max_latency = cfg->latency;
	w->rndv_pct = cfg->rndv_pct;
	w->p[0].depth = w->p[0].posted = cfg->d0;
	w->p[1].depth = w->p[1].posted = cfg->d1;
	/* each learns the other's depth from the handshake */
	evr__credit_init(&w->p[0].cr, cfg->d1, cfg->d0);
	evr__credit_init(&w->p[1].cr, cfg->d0, cfg->d1);

	for (w->step = 1;; w->step++) {
		i = (int)rnd(w, 2); /* who goes first this step */
		flush(w, i);
		flush(w, !i);
		deliver(w, 0);
		deliver(w, 1);
		/* every user message and FIN sent, delivered and its
		 * receive re-posted: only credit updates may still move,
		 * and they must die out */
		if (!w->settled && w->queued[0] == w->total &&
		    w->queued[1] == w->total && !w->p[0].to_send &&
		    !w->p[1].to_send && !w->p[0].nread && !w->p[1].nread &&
		    !w->p[0].fin_due && !w->p[1].fin_due && !w->p[0].busy &&
		    !w->p[1].busy) {
			w->settled = true;
			settled_at = w->step;
		}
		if (!idle(w))
			quiet_since = w->step;
		else if (w->step - quiet_since > 8)
			break; /* idle, and nothing more was sent */
		if (w->settled && w->step - settled_at > 4 * cfg->latency + 50)
			fail_msg("credit updates still bouncing %llu steps "
				 "after the data (seed %u): %lu/%lu late",
				 (unsigned long long)(w->step - settled_at),
				 seed, w->p[0].updates_late,
				 w->p[1].updates_late);
		if (w->step > 100 * w->total + 100000)
			fail_msg(
			    "deadlock (depths %u/%u, seed %u, step "
			    "%llu): sent %lu/%lu of %lu, avail %u/%u, "
			    "owed %u/%u, FINs waiting %u/%u, user "
			    "messages waiting %u/%u",
			    cfg->d0, cfg->d1, seed, (unsigned long long)w->step,
			    w->p[0].sent, w->p[1].sent, w->total,
			    w->p[0].cr.avail, w->p[1].cr.avail, w->p[0].cr.owed,
			    w->p[1].cr.owed, w->p[0].fin_due, w->p[1].fin_due,
			    w->p[0].to_send, w->p[1].to_send);
	}
	for (i = 0; i < 2; i++) {
		struct peer *s = &w->p[i], *o = &w->p[!i];

		assert_int_equal(s->sent, w->total);
		assert_int_equal(o->delivered, w->total);
		/* every receive is back */
		assert_int_equal(s->posted, s->depth);
		/* every credit is with its owner or owed back to it */
		assert_int_equal(s->cr.avail + o->cr.owed, o->depth);
		/* what is still owed is below the update threshold */
		assert_false(evr__credit_need_update(&o->cr));
		/* once only updates move, a couple more at most: each
		 * costs the other side one receive, below its threshold */
		assert_true(s->updates_late <= 2);
	}
}

/* Eager traffic only: the reserve is used by credit updates alone. */
static void test_two_peers_eager(void **state)
{
	/* clang-format off */
	static const struct world_cfg cfgs[] = {
		/* d0  d1  total hold read lat rndv% */
		{4,   4,   2000, 20,  0,   3,  0}, /* smallest, slow reposts */
		{4,   4,   2000, 50,  0,   10, 0},
		{4,   64,  3000, 10,  0,   5,  0}, /* asymmetric */
		{64,  4,   3000, 10,  0,   5,  0},
		{7,   9,   3000, 30,  0,   2,  0},
		{64,  64, 20000, 2,   0,   1,  0}, /* fast receiver */
		{64,  64, 20000, 200, 0,   20, 0}, /* slow receiver */
		{256, 16, 20000, 5,   0,   50, 0},
	};
	/* clang-format on */
	unsigned seed;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		for (seed = 1; seed <= 20; seed++)
			run_world(&cfgs[i], seed * 7919 + (unsigned)i);
}

/* With rendezvous: FINs are control messages and may use the reserve. */
static void test_two_peers_rndv(void **state)
{
	/* clang-format off */
	static const struct world_cfg cfgs[] = {
		/* d0  d1  total hold read lat rndv% */
		{4,   4,   2000, 20,  10,  3,  30},
		{4,   4,   2000, 50,  30,  10, 100},
		{4,   64,  3000, 10,  10,  5,  20},
		{64,  4,   3000, 10,  10,  5,  20},
		{7,   9,   3000, 30,  5,   2,  50},
		{64,  64, 20000, 2,   2,   1,  10},
		{64,  64, 20000, 200, 50,  20, 10},
		{256, 16, 20000, 5,   20,  50, 100},
	};
	/* clang-format on */
	unsigned seed;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cfgs) / sizeof(cfgs[0]); i++)
		for (seed = 1; seed <= 20; seed++)
			run_world(&cfgs[i], seed * 7919 + (unsigned)i);
}

/* A lone credit update costs the receiver one receive, which it re-posts
 * and now owes back: that single credit must not trigger an update of its
 * own, whatever the depth. */
static void test_update_does_not_echo(void **state)
{
	static const uint32_t depths[] = {4, 5, 8, 9, 16, 64, 1024};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		struct evr__credit a, b;
		uint32_t thr, k;
		uint16_t n;

		evr__credit_init(&a, depths[i], depths[i]);
		evr__credit_init(&b, depths[i], depths[i]);
		/* b sends data until a owes enough for an update */
		for (k = 0; !evr__credit_need_update(&a); k++) {
			assert_true(evr__credit_take(&b, false));
			evr__credit_reposted(&a, 1);
		}
		thr = k;
		assert_true(thr >= 2);
		/* a sends the update; b takes the credits, re-posts the
		 * receive the update used and owes a exactly one */
		assert_true(evr__credit_take(&a, true));
		n = evr__credit_piggyback(&a);
		assert_int_equal(n, thr);
		assert_int_equal(evr__credit_grant(&b, n), 0);
		evr__credit_reposted(&b, 1);
		assert_false(evr__credit_need_update(&b));
		assert_false(evr__credit_need_update(&a));
	}
}

/* An SRQ peer lends less than its largest window at first; its grants
 * may then exceed what we used (the window grows), never the largest
 * window.  The reserve comes from the largest window. */
static void test_init_lent_grant(void **state)
{
	struct evr__credit c;

	(void)state;
	evr__credit_init_lent(&c, 64, 8, 16);
	assert_int_equal(c.avail, 8);
	assert_int_equal(c.peer_depth, 64);
	assert_int_equal(c.reserved, 2);
	assert_int_equal(c.window, 16);
	assert_int_equal(evr__credit_grant(&c, 8), 0); /* growth */
	assert_int_equal(c.avail, 16);
	assert_int_equal(evr__credit_grant(&c, 49), -EPROTO);
	assert_int_equal(c.avail, 16);
	assert_int_equal(evr__credit_grant(&c, 48), 0);
	assert_int_equal(c.avail, 64);
	assert_int_equal(evr__credit_grant(&c, 1), -EPROTO);
	assert_true(evr__credit_take(&c, false));
	assert_int_equal(evr__credit_grant(&c, 2), -EPROTO);
	assert_int_equal(evr__credit_grant(&c, 1), 0);
}

/* The update threshold follows the window the bank lends. */
static void test_set_window(void **state)
{
	struct evr__credit c;

	(void)state;
	evr__credit_init(&c, 16, 256); /* threshold 64 */
	evr__credit_reposted(&c, 3);
	assert_false(evr__credit_need_update(&c));
	evr__credit_set_window(&c, 12); /* threshold 3 */
	assert_true(evr__credit_need_update(&c));
	evr__credit_set_window(&c, 4); /* threshold 2, never less */
	assert_true(evr__credit_need_update(&c));
	assert_int_equal(evr__credit_piggyback(&c), 3);
	evr__credit_reposted(&c, 1);
	assert_false(evr__credit_need_update(&c));
	/* the reserve the peer keeps is still the one of my_depth */
	assert_true(evr__credit_peer_starved(&c, 3));
	assert_false(evr__credit_peer_starved(&c, 4));
}

/* WANT: the queue behind a data message is longer than the data credits
 * left; nothing queued, nothing wanted. */
static void test_want(void **state)
{
	static const struct {
		uint32_t avail, queued;
		bool want;
	} cases[] = {
	    {2, 0, false}, {2, 1, true}, {2, 5, true},	 {3, 0, false},
	    {3, 1, false}, {3, 2, true}, {10, 8, false}, {10, 9, true},
	    {0, 0, false}, {0, 1, true}, {1, 1, true},
	};
	struct evr__credit c;
	size_t i;

	(void)state;
	evr__credit_init(&c, 64, 64); /* reserve 2 */
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		c.avail = cases[i].avail;
		assert_int_equal(evr__credit_want(&c, cases[i].queued),
				 cases[i].want);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init),
	    cmocka_unit_test(test_take_respects_reserve),
	    cmocka_unit_test(test_grant_overflow),
	    cmocka_unit_test(test_init_lent_grant),
	    cmocka_unit_test(test_set_window),
	    cmocka_unit_test(test_want),
	    cmocka_unit_test(test_piggyback),
	    cmocka_unit_test(test_owed_now_sent),
	    cmocka_unit_test(test_need_update_threshold),
	    cmocka_unit_test(test_update_does_not_echo),
	    cmocka_unit_test(test_peer_starved),
	    cmocka_unit_test(test_fin_deadlock_scripted),
	    cmocka_unit_test(test_two_peers_eager),
	    cmocka_unit_test(test_two_peers_rndv),
	};

	return cmocka_run_group_tests_name("credit", tests, NULL, NULL);
}
