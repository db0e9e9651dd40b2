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
};

/* Credits a side keeps for control messages when its peer posts depth
 * receives (both sides apply it: each knows the other's reserve). */
static inline uint32_t evr__credit_reserve(uint32_t depth)
{
	return depth >= 8 ? 2 : 1;
}

static inline void evr__credit_init(struct evr__credit *c, uint32_t peer_depth,
				    uint32_t my_depth)
{
	c->peer_depth = peer_depth;
	c->avail = peer_depth;
	c->reserved = evr__credit_reserve(peer_depth);
	c->owed = 0;
	c->my_depth = my_depth;
	c->quiet = 0;
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

/* Credits announced by the peer.  More than we have outstanding means the
 * peer is broken or hostile: -EPROTO. */
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

/* Credits to put in an outgoing header (all of them; capped to u16). */
static inline uint16_t evr__credit_piggyback(struct evr__credit *c)
{
	uint32_t n = c->owed > 0xffff ? 0xffff : c->owed;

	c->owed -= n;
	if (c->quiet > c->owed)
		c->quiet = c->owed;
	return (uint16_t)n;
}

/* Should an explicit credit update go out (no traffic to carry it)?  A
 * quarter of our receive queue is worth a message of its own.  The
 * threshold is at least 2 so that the one receive an update consumes on
 * the other side never triggers an update back: updates cannot echo. */
static inline bool evr__credit_need_update(const struct evr__credit *c)
{
	uint32_t thr = c->my_depth / 4;

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
