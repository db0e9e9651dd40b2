/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The credit bank of a shared receive queue, pure and inline.
 *
 * With an SRQ a ctx posts one pool of receive buffers for all its
 * connections, and credits become a budget it lends out.  Each connection
 * has a footprint: the credits its peer may still use (lent: held by the
 * peer, travelling to it, or owed and not yet announced) plus the buffers
 * its messages consumed and that are not re-posted yet (busy).  The bank
 * keeps
 *
 *	sum of footprints  <=  buffers it owns      (posted + busy + orphans)
 *
 * which is the same as: credits lent <= buffers posted.  Every message
 * that lands was covered by a credit, so a send never meets an empty SRQ:
 * no RNR, by construction, as with a queue per connection (credit.h).
 * Re-posted buffers may wait for a batched post (unposted): they count
 * as posted in the books, but the spare, out of which credits are lent,
 * leaves them out, so credits lent never exceed the buffers on the SRQ.
 *
 * A footprint grows only out of spare budget (posted - lent) and shrinks
 * by not re-granting when a consumed buffer is re-posted, down to the
 * minimum window, which leaves the peer its reserve for control messages
 * plus room for data (docs/credits.md says why), so credits always come
 * back and the exchange cannot deadlock; or when an idle peer gives back
 * all but its reserve and one (evr__bank_giveback), which it does only knowing
 * it can ask again.  Each connection has a target window: a message sent
 * while the window held its sender back (EVR_F_WANT) raises it by one,
 * any other message lowers it by one, down to the minimum; the footprint
 * follows the target at re-post time.  The pool grows in chunks up to a
 * limit when the spare runs low; at the limit a connection that cannot
 * get its initial window is refused (-ENOBUFS) and windows above a fair
 * share shrink.
 *
 * The ctx owns one struct evr__bank; each connection embeds a struct
 * evr__bank_conn.  Nothing here allocates, posts or knows of verbs.
 */
#ifndef EVR_BANK_H
#define EVR_BANK_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>

#include "credit.h"

struct evr__bank_cfg {
	uint32_t chunk;	   /* buffers added to the SRQ at a time */
	uint32_t limit;	   /* most buffers the pool may own */
	uint32_t win_min;  /* smallest window: >= reserve(win_max) + 2 */
	uint32_t win_init; /* window lent at admission */
	uint32_t win_max;  /* largest window, announced in the handshake */
};

struct evr__bank {
	struct evr__bank_cfg cfg;
	uint32_t posted;    /* receive buffers posted to the SRQ, or counted
			     * for its next batched post (unposted) */
	uint32_t unposted;  /* of posted, those waiting for that post */
	uint32_t lent;	    /* sum of the connections' lent */
	uint32_t total;	    /* buffers the pool owns: posted + busy + orphans */
	uint32_t orphans;   /* consumed by connections gone since */
	uint32_t nconns;    /* admitted, not detached */
	uint32_t low;	    /* below this much spare the pool wants a chunk */
	uint64_t grown;	    /* credits lent beyond a return */
	uint64_t withheld;  /* returns not re-granted */
	uint64_t reclaimed; /* credits given back by idle peers */
	uint64_t refused;   /* connections not admitted */
};

struct evr__bank_conn {
	uint32_t lent;	 /* credits its peer may still use (incl. owed) */
	uint32_t busy;	 /* buffers its messages hold, not re-posted */
	uint32_t window; /* target footprint (lent + busy) */
	uint32_t floor;	 /* the window never shrinks below this */
};

/* Buffers on the SRQ that no credit stands for. */
static inline uint32_t evr__bank_spare(const struct evr__bank *b)
{
	uint32_t on = b->posted - b->unposted;

	/* lent above posted only after a failed post (srq.c): no spare */
	return on > b->lent ? on - b->lent : 0;
}

/* Cannot lend more and cannot grow: windows above a fair share give back. */
static inline bool evr__bank_short(const struct evr__bank *b)
{
	return evr__bank_spare(b) < b->low && b->total >= b->cfg.limit;
}

/* The smallest window that keeps both data and control messages moving
 * for a peer whose largest window is win_max (docs/credits.md). */
static inline uint32_t evr__bank_min_window(uint32_t win_max)
{
	uint32_t m = evr__credit_reserve(win_max) + 2;

	return m < 4 ? 4 : m;
}

/* 0, or -EINVAL when the configuration cannot keep its promises.  The
 * pool starts empty: call evr__bank_want() and evr__bank_add(). */
static inline int evr__bank_init(struct evr__bank *b,
				 const struct evr__bank_cfg *cfg)
{
	if (cfg->win_max > 0xffff || cfg->win_init > cfg->win_max ||
	    cfg->win_min > cfg->win_init ||
	    cfg->win_min < evr__bank_min_window(cfg->win_max) ||
	    cfg->chunk == 0 || cfg->limit < cfg->win_init)
		return -EINVAL;
	b->cfg = *cfg;
	b->posted = b->unposted = b->lent = b->total = b->orphans = 0;
	b->nconns = 0;
	b->grown = b->withheld = b->refused = b->reclaimed = 0;
	/* room for two admissions, or half a chunk of growth */
	b->low = cfg->chunk / 2 > 2 * cfg->win_init ? cfg->chunk / 2
						    : 2 * cfg->win_init;
	return 0;
}

/* Buffers to add to the SRQ now (0 when the spare suffices or the pool is
 * at its limit).  The caller posts what it can and reports it with
 * evr__bank_add(). */
static inline uint32_t evr__bank_want(const struct evr__bank *b)
{
	uint32_t room = b->cfg.limit - b->total;

	if (evr__bank_spare(b) >= b->low)
		return 0;
	return room < b->cfg.chunk ? room : b->cfg.chunk;
}

/* n new buffers were posted to the SRQ. */
static inline void evr__bank_add(struct evr__bank *b, uint32_t n)
{
	b->posted += n;
	b->total += n;
}

/*
 * Lend a new connection its initial window (announced in its handshake
 * with win_max).  -ENOBUFS when the spare cannot cover it: the caller
 * grows the pool first (evr__bank_want()), and refuses the connection
 * with this reason if it still fails.
 */
static inline int evr__bank_admit(struct evr__bank *b,
				  struct evr__bank_conn *bc)
{
	if (evr__bank_spare(b) < b->cfg.win_init) {
		b->refused++;
		return -ENOBUFS;
	}
	bc->lent = bc->window = b->cfg.win_init;
	bc->floor = b->cfg.win_min;
	bc->busy = 0;
	b->lent += bc->lent;
	b->nconns++;
	return 0;
}

/*
 * A message of bc's peer landed in an SRQ buffer; want: its header said
 * the sender's window ran out (EVR_F_WANT).  -EPROTO when the peer had no
 * credit for it: a broken or hostile peer (with an honest one the RNR it
 * would have met cannot happen).
 */
static inline int evr__bank_consume(struct evr__bank *b,
				    struct evr__bank_conn *bc, bool want)
{
	if (bc->lent == 0 || b->posted == 0)
		return -EPROTO;
	bc->lent--;
	b->lent--;
	b->posted--;
	bc->busy++;
	if (want) {
		/* back to the floor at once after a give-back (an ask);
		 * else one more, as below the floor a data message and
		 * its returning credit cannot both be on the way */
		if (bc->window < bc->floor)
			bc->window = bc->floor;
		else if (bc->window < b->cfg.win_max && !evr__bank_short(b))
			bc->window++;
	} else if (bc->window > bc->floor) {
		bc->window--;
	}
	return 0;
}

/*
 * One of bc's consumed buffers is posted to the SRQ again.  Returns the
 * credits to owe its peer (0, 1, or 2 when its window grows), already
 * counted as lent, and tells cr (the connection's credit state) about
 * them; update: the buffer had held a bare credit update.
 */
static inline uint32_t evr__bank_repost(struct evr__bank *b,
					struct evr__bank_conn *bc,
					struct evr__credit *cr, bool update)
{
	uint32_t f, n = 0;

	b->posted++;
	bc->busy--;
	if (evr__bank_short(b) && bc->window > bc->floor &&
	    bc->window > b->total / b->nconns)
		bc->window--;
	f = bc->lent + bc->busy;
	/* covered by the buffer just posted; and never withheld from a
	 * peer left with no more than its reserve: buffers its messages
	 * still hold (messages held by the user, or queued behind a
	 * rendezvous read) count in its footprint, and withholding the
	 * credit of a re-posted control message would leave it unable to
	 * send the FIN or credit update that frees them */
	if (f < bc->window || bc->lent < evr__credit_reserve(b->cfg.win_max))
		n = 1;
	if (f + n < bc->window) {
		if (evr__bank_spare(b) - n > b->cfg.win_init) {
			n++;
			b->grown++;
		} else {
			bc->window = f + n; /* no budget: forget the target */
		}
	}
	if (n == 0)
		b->withheld++;
	bc->lent += n;
	b->lent += n;
	evr__credit_reposted(cr, n);
	if (update && n)
		evr__credit_got_update(cr);
	evr__credit_set_window(cr, bc->window);
	return n;
}

/*
 * bc's peer gives back n of the credits it holds (a credit update with
 * EVR_F_GIVE, consumed just before): it has been idle and keeps its
 * reserve and one.  Its target becomes what it keeps plus the buffers its
 * messages still hold, except the update's own, whose credit is not
 * re-granted at its re-post: the window may fall below the floor here,
 * and grows again when the peer asks (EVR_F_WANT on a data message or a
 * credit update).  -EPROTO when it gives back more than it was lent.
 */
static inline int evr__bank_giveback(struct evr__bank *b,
				     struct evr__bank_conn *bc, uint32_t n)
{
	if (n > bc->lent || bc->busy == 0)
		return -EPROTO;
	bc->lent -= n;
	b->lent -= n;
	bc->window = bc->lent + bc->busy - 1;
	b->reclaimed += n;
	return 0;
}

/*
 * bc's peer cannot be told of a window that moves (it lends us all of its
 * receives at once, or predates windows): it was announced win_init as our
 * depth and keeps exactly that, neither grown (it never asks) nor shrunk.
 */
static inline void evr__bank_fix_window(struct evr__bank_conn *bc)
{
	bc->floor = bc->window;
}

/* A buffer consumed by a connection since detached is posted again. */
static inline void evr__bank_repost_orphan(struct evr__bank *b)
{
	b->posted++;
	b->orphans--;
}

/*
 * bc's connection is gone, its QP can consume no more of the SRQ and
 * every completion it produced went through evr__bank_consume() (after
 * IBV_EVENT_QP_LAST_WQE_REACHED and a drain of its CQ): what it was lent
 * comes back, the buffers it still holds become orphans until they are
 * re-posted.
 */
static inline void evr__bank_detach(struct evr__bank *b,
				    struct evr__bank_conn *bc)
{
	b->lent -= bc->lent;
	b->orphans += bc->busy;
	b->nconns--;
	bc->lent = bc->busy = bc->window = 0;
}

#endif
