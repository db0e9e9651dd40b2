/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A connection's calls in flight, by id: the table request/response
 * correlates a reply with its call through.  Pure and inline.
 *
 * A call is stored in a slot; its id is the slot's index in the low bits
 * and the slot's generation above them.  A slot's generation moves on
 * each time it is freed, and freed slots are reused oldest first (a FIFO),
 * so an id comes back only after 2^32 calls have been made on the
 * connection: a reply that arrives late -- after its call expired or was
 * cancelled -- finds no call, or a call of its own, never another's.  Id 0
 * is never given out.
 *
 * The table holds at most `limit` calls (the back-pressure of calls in
 * flight: evr__calltab_add() says -ENOBUFS beyond it); its slots are
 * limit rounded up to a power of two.  Looking up, adding and removing are
 * O(1); evr__calltab_first() walks the slots, for a connection's end.
 */
#ifndef EVR_CALLTAB_H
#define EVR_CALLTAB_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#define EVR__CALLS_MAX 65536u /* the largest limit */

struct evr__call_slot {
	void *call;    /* NULL: free */
	uint32_t gen;  /* the generation of the id stored or next given */
	uint32_t next; /* free: 1 + the next free slot, 0 at the tail */
};

struct evr__calltab {
	struct evr__call_slot *s;
	uint32_t cap;	     /* slots, a power of two */
	uint32_t shift;	     /* log2(cap): the index bits of an id */
	uint32_t limit;	     /* calls in flight at most */
	uint32_t n;	     /* calls in flight */
	uint32_t head, tail; /* free FIFO: 1 + a slot, 0 when empty */
};

/* 0, -EINVAL (limit 0 or above EVR__CALLS_MAX) or -ENOMEM. */
static inline int evr__calltab_init(struct evr__calltab *t, uint32_t limit)
{
	uint32_t i;

	t->s = NULL;
	t->n = t->head = t->tail = 0;
	if (limit == 0 || limit > EVR__CALLS_MAX)
		return -EINVAL;
	t->limit = limit;
	for (t->cap = 1, t->shift = 0; t->cap < limit; t->cap *= 2)
		t->shift++;
	t->s = calloc(t->cap, sizeof(*t->s));
	if (!t->s)
		return -ENOMEM;
	for (i = 0; i < t->cap; i++) {
		t->s[i].gen = 1; /* so that no id is 0 */
		t->s[i].next = i + 1 < t->cap ? i + 2 : 0;
	}
	t->head = 1;
	t->tail = t->cap;
	return 0;
}

static inline void evr__calltab_fini(struct evr__calltab *t)
{
	free(t->s);
	t->s = NULL;
	t->n = t->head = t->tail = 0;
}

/* The generations an id can carry: 32 - shift bits, never 0. */
static inline uint32_t evr__calltab_gen_next(const struct evr__calltab *t,
					     uint32_t gen)
{
	uint32_t mask =
	    t->shift ? (uint32_t)(UINT32_MAX >> t->shift) : UINT32_MAX;

	gen = (gen + 1) & mask;
	return gen ? gen : 1;
}

/* The id of slot i: its generation above the index bits. */
static inline uint32_t evr__calltab_id(const struct evr__calltab *t, uint32_t i)
{
	return (uint32_t)((uint64_t)t->s[i].gen << t->shift) | i;
}

/* Store call (not NULL); its id in *id.  0, or -ENOBUFS: the limit is
 * reached. */
static inline int evr__calltab_add(struct evr__calltab *t, void *call,
				   uint32_t *id)
{
	uint32_t i;

	if (t->n >= t->limit || !t->head)
		return -ENOBUFS;
	i = t->head - 1;
	t->head = t->s[i].next;
	if (!t->head)
		t->tail = 0;
	t->s[i].call = call;
	t->s[i].next = 0;
	t->n++;
	*id = evr__calltab_id(t, i);
	return 0;
}

/* The call stored under id, or NULL: an id never given, or one whose call
 * was removed (a late or forged reply). */
static inline void *evr__calltab_find(const struct evr__calltab *t, uint32_t id)
{
	uint32_t i = id & (t->cap - 1);

	if (!t->s || !t->s[i].call || evr__calltab_id(t, i) != id)
		return NULL;
	return t->s[i].call;
}

/* Remove the call stored under id and return it; NULL as _find. */
static inline void *evr__calltab_take(struct evr__calltab *t, uint32_t id)
{
	void *call = evr__calltab_find(t, id);
	uint32_t i = id & (t->cap - 1);

	if (!call)
		return NULL;
	t->s[i].call = NULL;
	t->s[i].gen = evr__calltab_gen_next(t, t->s[i].gen);
	if (t->tail)
		t->s[t->tail - 1].next = i + 1;
	else
		t->head = i + 1;
	t->tail = i + 1;
	t->n--;
	return call;
}

/* The id of a call in flight (the lowest slot's), to end every call when
 * the connection ends; 0 when none is left. */
static inline uint32_t evr__calltab_first(const struct evr__calltab *t)
{
	uint32_t i;

	for (i = 0; t->n && i < t->cap; i++)
		if (t->s[i].call)
			return evr__calltab_id(t, i);
	return 0;
}

#endif
