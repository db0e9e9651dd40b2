/* SPDX-License-Identifier: BSD-2-Clause */
#ifndef EVR_STASH_H
#define EVR_STASH_H

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/*
 * A few freed objects of one kind, kept for reuse: ops, call structs, request
 * handles and held messages come and go with every exchange, and malloc
 * plus free cost more than the rest of a call's bookkeeping.  An object
 * in a stash is linked through its first bytes.  Under AddressSanitizer
 * nothing is kept, so that a use after release is still caught (every
 * test runs under it).  No memcheck hints here: marking an object
 * inaccessible in the stash and usable again took three client requests,
 * some 40 instructions an object, on every message's path; to memcheck a
 * kept object is still allocated.
 */
#if defined(__SANITIZE_ADDRESS__)
#define EVR__STASH_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define EVR__STASH_OFF 1
#endif
#endif

struct evr__stash {
	void *head;
	unsigned n;
};

/* An object of size bytes, one kept or a new one (NULL: ENOMEM), whose
 * first zero bytes are zeroed (a new one's all of them): what follows is
 * written before it is read. */
static inline void *evr__stash_get_part(struct evr__stash *s, size_t size,
					size_t zero)
{
	void *p = s->head;

	if (!p)
		return calloc(1, size);
	s->head = *(void **)p;
	s->n--;
	memset(p, 0, zero);
	return p;
}

/* A zeroed object of size bytes: one kept, or a new one (NULL: ENOMEM). */
static inline void *evr__stash_get(struct evr__stash *s, size_t size)
{
	return evr__stash_get_part(s, size, size);
}

/* Release p: kept while the stash holds fewer than max. */
static inline void evr__stash_put(struct evr__stash *s, void *p, unsigned max)
{
#ifdef EVR__STASH_OFF
	max = 0;
#endif
	if (s->n >= max) {
		free(p);
		return;
	}
	*(void **)p = s->head;
	s->head = p;
	s->n++;
}

static inline void evr__stash_free(struct evr__stash *s)
{
	while (s->head) {
		void *p = s->head;

		s->head = *(void **)p;
		free(p);
	}
	s->n = 0;
}

#endif
