/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * QP number -> owner (qpmap.h): growth and deletion.
 */
#include "qpmap.h"

#include <errno.h>
#include <stdlib.h>

#define QPMAP_MIN 64

static void insert(struct evr__qpmap *m, uint32_t key, void *val)
{
	uint32_t i = evr__qpmap_hash(key, m->mask);

	while (m->slot[i].val)
		i = (i + 1) & m->mask;
	m->slot[i].key = key;
	m->slot[i].val = val;
}

static int resize(struct evr__qpmap *m, uint32_t cap)
{
	struct evr__qpmap_slot *old = m->slot;
	uint32_t i, oldcap = m->slot ? m->mask + 1 : 0;

	m->slot = calloc(cap, sizeof(*m->slot));
	if (!m->slot) {
		m->slot = old;
		return -ENOMEM;
	}
	m->mask = cap - 1;
	for (i = 0; i < oldcap; i++)
		if (old[i].val)
			insert(m, old[i].key, old[i].val);
	free(old);
	return 0;
}

int evr__qpmap_put(struct evr__qpmap *m, uint32_t key, void *val)
{
	int err;

	if (!val)
		return -EINVAL;
	if (evr__qpmap_get(m, key))
		return -EEXIST;
	if (!m->slot || (m->n + 1) * 2 > m->mask + 1) {
		if (m->slot && m->mask + 1 > UINT32_MAX / 2)
			return -ENOMEM;
		err = resize(m, m->slot ? (m->mask + 1) * 2 : QPMAP_MIN);
		if (err)
			return err;
	}
	insert(m, key, val);
	m->n++;
	return 0;
}

void *evr__qpmap_del(struct evr__qpmap *m, uint32_t key)
{
	uint32_t i, j;
	void *val;

	if (!m->slot)
		return NULL;
	for (i = evr__qpmap_hash(key, m->mask); m->slot[i].key != key;
	     i = (i + 1) & m->mask)
		if (!m->slot[i].val)
			return NULL;
	if (!m->slot[i].val)
		return NULL;
	val = m->slot[i].val;
	m->slot[i].val = NULL;
	m->n--;
	/* Shift back every entry of the run after i that may move to the
	 * hole: one whose home is not cyclically in (i, j]. */
	for (j = (i + 1) & m->mask; m->slot[j].val; j = (j + 1) & m->mask) {
		uint32_t home = evr__qpmap_hash(m->slot[j].key, m->mask);

		if (((j - home) & m->mask) >= ((j - i) & m->mask)) {
			m->slot[i] = m->slot[j];
			m->slot[j].val = NULL;
			i = j;
		}
	}
	return val;
}

void evr__qpmap_fini(struct evr__qpmap *m)
{
	free(m->slot);
	evr__qpmap_init(m);
}
