/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Credit accounting for two-sided traffic, pure and inline.
 *
 * The peer posts peer_depth receives; every message that consumes one of
 * them (a send, or a write with immediate data) costs one credit.  Credits
 * come back in the header of any message from the peer (or in an explicit
 * CREDIT message) after the peer has re-posted the receive, so a send can
 * never meet an empty receive queue: no RNR, by construction.
 *
 * The last `reserved` credits are kept for control messages (credit
 * updates, rendezvous finish): data cannot exhaust them, so a side that
 * owes credits can always return them and the exchange cannot deadlock.
 *
 * Credits owed are announced on the next message, or in an update of their
 * own once a quarter of the receive queue is owed -- or at once when the
 * peer may have none left (see evr__credit_peer_starved()).
 *
 * With a shared receive queue (bank.h, docs/credits.md) the peer's window
 * moves: the handshake announces its largest value (peer_depth here, which
 * also fixes the reserve) and the credits lent at first, later grants may
 * add credits as well as return them, and the receiving side's update
 * threshold follows the window its bank lends (evr__credit_set_window()).
 * With a receive queue per connection the window is the depth, always.
 */
#ifndef EVR_CREDIT_H
#define EVR_CREDIT_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

struct evr__credit {
	uint32_t avail;	     /* sends we may post now */
	uint32_t peer_depth; /* receives the peer keeps posted */
	uint32_t reserved;   /* kept back for control messages */
	uint32_t owed;	     /* receives we re-posted, not yet announced */
	uint32_t my_depth;   /* receives we keep posted */
	uint32_t quiet;	     /* of owed: receives that held a bare update */
	uint32_t window;     /* receives we keep for the peer now */
};

/* Credits a side keeps for control messages when its peer posts depth
 * receives (both sides apply it: each knows the other's reserve). */
static inline uint32_t evr__credit_reserve(uint32_t depth)
{
	return depth >= 8 ? 2 : 1;
}

/*
 * The peer lends us peer_init credits now and never more than peer_depth
 * at a time (an SRQ peer; 0 < peer_init <= peer_depth, checked by the
 * handshake).  We keep my_depth receives for it, or announced my_depth as
 * the largest window our bank may lend.
 */
static inline void evr__credit_init_lent(struct evr__credit *c,
					 uint32_t peer_depth,
					 uint32_t peer_init, uint32_t my_depth)
{
	c->peer_depth = peer_depth;
	c->avail = peer_init;
	c->reserved = evr__credit_reserve(peer_depth);
	c->owed = 0;
	c->my_depth = my_depth;
	c->quiet = 0;
	c->window = my_depth;
}

/* A peer with a receive queue of peer_depth for us: all lent at once. */
static inline void evr__credit_init(struct evr__credit *c, uint32_t peer_depth,
				    uint32_t my_depth)
{
	evr__credit_init_lent(c, peer_depth, peer_depth, my_depth);
}

/* Our bank now lends the peer `window` receives (SRQ): updates are due
 * at a quarter of that.  The reserve stays what my_depth made it: the
 * peer computed it once, from the handshake. */
static inline void evr__credit_set_window(struct evr__credit *c,
					  uint32_t window)
{
	c->window = window;
}

/*
 * May a message be sent now?  Data must leave the reserve untouched.  A
 * control message may use the reserve, but the very last credit only if
 * it brings credits back (the message carries what we owe): a rendezvous
 * FIN spending it empty-handed could leave both sides with none left,
 * owing each other credits they can no longer announce.
 */
static inline bool evr__credit_can(const struct evr__credit *c, bool ctrl)
{
	if (!ctrl)
		return c->avail > c->reserved;
	return c->avail > 1 || (c->avail == 1 && c->owed > 0);
}

static inline bool evr__credit_take(struct evr__credit *c, bool ctrl)
{
	if (!evr__credit_can(c, ctrl))
		return false;
	c->avail--;
	return true;
}

/* Credits announced by the peer.  More than its largest window can hold
 * (with a queue per connection: more than we have outstanding) means the
 * peer is broken or hostile: -EPROTO.  With an SRQ peer the grant may be
 * larger than what we used: its bank grew our window. */
static inline int evr__credit_grant(struct evr__credit *c, uint32_t n)
{
	if (n > c->peer_depth - c->avail)
		return -EPROTO;
	c->avail += n;
	return 0;
}

/* We re-posted n receives: the peer may use them once told. */
static inline void evr__credit_reposted(struct evr__credit *c, uint32_t n)
{
	c->owed += n;
}

/* A receive was consumed by a bare credit update.  Its re-post is owed
 * like any other, but it must not by itself make us announce credits to a
 * starved peer: two starved sides would bounce updates forever. */
static inline void evr__credit_got_update(struct evr__credit *c)
{
	c->quiet++;
}

/* Credits an outgoing header may carry (all we owe; capped to u16),
 * still owed until evr__credit_carried() says they went out. */
static inline uint16_t evr__credit_owed_now(const struct evr__credit *c)
{
	return c->owed > 0xffff ? 0xffff : (uint16_t)c->owed;
}

/* A message went out carrying n credits (at most evr__credit_owed_now()). */
static inline void evr__credit_carried(struct evr__credit *c, uint16_t n)
{
	c->owed -= n;
	if (c->quiet > c->owed)
		c->quiet = c->owed;
}

/* Credits to put in an outgoing header, counted as sent at once: for a
 * message that cannot fail to go once built (a failed post fails the
 * conn). */
static inline uint16_t evr__credit_piggyback(struct evr__credit *c)
{
	uint16_t n = evr__credit_owed_now(c);

	evr__credit_carried(c, n);
	return n;
}

/* A data message that evr__credit_can(c, false) allowed was posted,
 * carrying n credits (evr__credit_owed_now()): its credit is spent and
 * those are announced.  The direct way (msg.c) checks first and counts
 * only once the post succeeded, so a failed post leaves nothing to undo. */
static inline void evr__credit_sent(struct evr__credit *c, uint16_t n)
{
	c->avail--;
	evr__credit_carried(c, n);
}

/*
 * Is the window what holds us back?  Asked when a data message has taken
 * its credit, with `queued` data messages still waiting behind it: yes
 * when they are more than the data credits left, so the window runs out
 * before the queue.  Every message sent while this holds tells an SRQ
 * peer that we want a larger window (EVR_F_WANT, docs/credits.md); a
 * peer with a queue per connection ignores it.  A message that takes the
 * last data credit with nothing behind it wants nothing.
 */
static inline bool evr__credit_want(const struct evr__credit *c,
				    uint32_t queued)
{
	return queued > 0 && (uint64_t)queued + c->reserved > c->avail;
}

/*
 * Credits to give back after an idle spell, when the give-back (a credit
 * update, which takes one of them first) has its credit: all but the
 * reserve and one.  The one keeps the next ask possible: a bare credit
 * update may take a credit the peer then returns only with its next
 * message, and an ask needs two (the last credit goes only with credits
 * on board, evr__credit_can()); it is also the first message's credit
 * when the window comes back.  0 when nothing more is held.
 */
static inline uint32_t evr__credit_idle_excess(const struct evr__credit *c)
{
	return c->avail > c->reserved + 1 ? c->avail - c->reserved - 1 : 0;
}

/* Is an idle give-back worth a message?  Yes with a credit to give back
 * beyond the one the message itself takes: the peer's pool gets both (it
 * does not re-grant the message's own). */
static inline bool evr__credit_idle_worth(const struct evr__credit *c)
{
	return c->avail >= c->reserved + 3;
}

/* Should an explicit credit update go out (no traffic to carry it)?  A
 * quarter of our receive queue (of the window we lend) is worth a message
 * of its own.  The
 * threshold is at least 2 so that the one receive an update consumes on
 * the other side never triggers an update back: updates cannot echo. */
static inline bool evr__credit_need_update(const struct evr__credit *c)
{
	uint32_t thr = c->window / 4;

	if (thr < 2)
		thr = 2;
	return c->owed >= thr;
}

/*
 * Must the credits owed go out now, however few?  Yes when the peer may
 * have no data credit left: it holds at most the receives we have posted
 * and announced (posted - owed), and if that is no more than its reserve it
 * cannot send data until it hears of these.  Without holds this never
 * comes before the threshold above; with messages held (evr_conn_hold) it
 * does, and a release of one message must still let one more through --
 * the user may be waiting for it before releasing others.  Receives that
 * held only an update do not count (evr__credit_got_update()).
 */
static inline bool evr__credit_peer_starved(const struct evr__credit *c,
					    uint32_t posted)
{
	return c->owed > c->quiet &&
	       posted <= c->owed + evr__credit_reserve(c->my_depth);
}

#endif
