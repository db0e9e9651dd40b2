/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * QP number -> owner, for completions that carry no pointer of ours.
 *
 * A receive posted to a shared receive queue belongs to no connection
 * until a message lands in it; its work completion names the QP only by
 * number (wc->qp_num).  This map finds the connection: open addressing
 * with linear probing, a multiplicative hash, at most half full, and
 * deletion by shifting the following entries back (no tombstones), so a
 * lookup is a short run of adjacent slots however many QPs came and went.
 * Pure: nothing here knows of verbs or connections.
 */
#ifndef EVR_QPMAP_H
#define EVR_QPMAP_H

#include <stddef.h>
#include <stdint.h>

struct evr__qpmap_slot {
	uint32_t key;
	void *val; /* NULL: empty */
};

struct evr__qpmap {
	struct evr__qpmap_slot *slot;
	uint32_t mask; /* capacity - 1 (a power of two), or 0 when empty */
	uint32_t n;
};

static inline void evr__qpmap_init(struct evr__qpmap *m)
{
	m->slot = NULL;
	m->mask = 0;
	m->n = 0;
}

static inline uint32_t evr__qpmap_hash(uint32_t key, uint32_t mask)
{
	return (key * 0x9e3779b1u) >> 7 & mask;
}

static inline void *evr__qpmap_get(const struct evr__qpmap *m, uint32_t key)
{
	uint32_t i;

	if (!m->slot)
		return NULL;
	for (i = evr__qpmap_hash(key, m->mask); m->slot[i].val;
	     i = (i + 1) & m->mask)
		if (m->slot[i].key == key)
			return m->slot[i].val;
	return NULL;
}

/* 0; -EEXIST if key is there; -ENOMEM; -EINVAL for a NULL val. */
int evr__qpmap_put(struct evr__qpmap *m, uint32_t key, void *val);
/* The value key had (now removed), or NULL. */
void *evr__qpmap_del(struct evr__qpmap *m, uint32_t key);
void evr__qpmap_fini(struct evr__qpmap *m);

#endif
