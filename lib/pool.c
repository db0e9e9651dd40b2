/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Registered buffer pool of a ctx: eager receive buffers and the copies of
 * outgoing small messages.  Buffers are cache-line aligned and carved out
 * of chunks registered once (one ibv_mr per chunk), so the data path never
 * registers memory.  The pool grows a chunk at a time and never shrinks
 * before the ctx is destroyed.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct evr__chunk {
	struct evr__list link;
	struct ibv_mr *mr;
	void *mem;
	struct evr__buf *bufs;
};

int evr__pool_init(struct evr__pool *p, struct ibv_pd *pd,
		   struct evr__regacct *acct, uint32_t buf_size,
		   unsigned per_chunk)
{
	int i;

	memset(p, 0, sizeof(*p));
	p->pd = pd;
	p->acct = acct;
	p->buf_size = (buf_size + EVR__CACHELINE - 1) & ~(EVR__CACHELINE - 1u);
	p->per_chunk = per_chunk ? per_chunk : 256;
	p->rfree_max = EVR_RBUF_CACHE_BYTES;
	evr__list_init(&p->free);
	evr__list_init(&p->chunks);
	for (i = 0; i < EVR_RBUF_CLASSES; i++)
		evr__list_init(&p->rfree[i]);
	return 0;
}

static int pool_grow(struct evr__pool *p)
{
	struct evr__chunk *c;
	size_t bytes = (size_t)p->buf_size * p->per_chunk;
	unsigned i;

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->bufs = calloc(p->per_chunk, sizeof(*c->bufs));
	if (!c->bufs)
		goto err_free_chunk;
	if (posix_memalign(&c->mem, 4096, bytes))
		goto err_free_bufs;
	c->mr = evr__reg_mr(p->acct, p->pd, c->mem, bytes,
			    IBV_ACCESS_LOCAL_WRITE, "the message buffer pool");
	if (!c->mr)
		goto err_free_mem;
	for (i = 0; i < p->per_chunk; i++) {
		struct evr__buf *b = &c->bufs[i];

		b->data = (uint8_t *)c->mem + (size_t)i * p->buf_size;
		b->lkey = c->mr->lkey;
		b->size = p->buf_size;
		evr__list_add_head(&p->free, evr__buf_link(b));
	}
	p->total += p->per_chunk;
	p->nfree += p->per_chunk;
	evr__list_add_tail(&p->chunks, &c->link);
	return 0;

err_free_mem:
	free(c->mem);
err_free_bufs:
	free(c->bufs);
err_free_chunk:
	free(c);
	return -ENOMEM;
}

struct evr__buf *evr__pool_get(struct evr__pool *p)
{
	struct evr__buf *b;

	if (evr__list_empty(&p->free) && pool_grow(p) < 0)
		return NULL;
	b = evr__buf_pop(&p->free);
	p->nfree--;
	return b;
}

void evr__pool_put(struct evr__pool *p, struct evr__buf *b)
{
	b->h.conn = NULL;
	evr__list_add_head(&p->free, evr__buf_link(b)); /* the warmest first */
	p->nfree++;
}

static int rbuf_class(size_t len)
{
	int shift = EVR_RBUF_MIN_SHIFT;

	while (shift <= EVR_RBUF_MAX_SHIFT && ((size_t)1 << shift) < len)
		shift++;
	return shift <= EVR_RBUF_MAX_SHIFT ? shift - EVR_RBUF_MIN_SHIFT : -1;
}

static void rbuf_free(struct evr__pool *p, struct evr__rbuf *rb)
{
	if (rb->mr)
		evr__dereg_mr(p->acct, rb->mr);
	free(rb->mem);
	free(rb);
}

/* A registered buffer of at least len bytes (a cached one if there is one
 * of len's size class), or NULL. */
struct evr__rbuf *evr__rbuf_get(struct evr__pool *p, size_t len)
{
	int cls = rbuf_class(len);
	struct evr__rbuf *rb;

	if (cls >= 0 && (rb = evr__list_pop_entry(&p->rfree[cls],
						  struct evr__rbuf, link))) {
		p->rfree_bytes -= rb->cap;
		return rb;
	}
	rb = calloc(1, sizeof(*rb));
	if (!rb)
		return NULL;
	rb->cls = cls;
	rb->cap = cls >= 0 ? (size_t)1 << (cls + EVR_RBUF_MIN_SHIFT)
			   : (len ? len : 1);
	if (posix_memalign((void **)&rb->mem, 4096, rb->cap))
		goto err_free;
	rb->mr = evr__reg_mr(p->acct, p->pd, rb->mem, rb->cap,
			     IBV_ACCESS_LOCAL_WRITE,
			     "a rendezvous message being received");
	if (!rb->mr)
		goto err_free_mem;
	return rb;

err_free_mem:
	free(rb->mem);
err_free:
	free(rb);
	return NULL;
}

struct evr__rbuf *evr__rbuf_plain(size_t len)
{
	struct evr__rbuf *rb = calloc(1, sizeof(*rb));

	if (!rb)
		return NULL;
	rb->cls = -1;
	rb->cap = len;
	if (!(rb->mem = malloc(len ? len : 1))) {
		free(rb);
		return NULL;
	}
	return rb;
}

/* Back to the cache while it has room, else deregistered and freed. */
void evr__rbuf_put(struct evr__pool *p, struct evr__rbuf *rb)
{
	if (!rb)
		return;
	if (rb->cls < 0 || p->rfree_bytes + rb->cap > p->rfree_max) {
		rbuf_free(p, rb);
		return;
	}
	evr__list_add_head(&p->rfree[rb->cls], &rb->link);
	p->rfree_bytes += rb->cap;
}

void evr__pool_fini(struct evr__pool *p)
{
	struct evr__list *pos, *tmp;
	struct evr__rbuf *rb;
	int i;

	for (i = 0; i < EVR_RBUF_CLASSES; i++) {
		while ((rb = evr__list_pop_entry(&p->rfree[i], struct evr__rbuf,
						 link)))
			rbuf_free(p, rb);
	}
	p->rfree_bytes = 0;

	evr__list_for_each_safe(pos, tmp, &p->chunks)
	{
		struct evr__chunk *c =
		    evr__container_of(pos, struct evr__chunk, link);

		evr__dereg_mr(p->acct, c->mr);
		free(c->mem);
		free(c->bufs);
		free(c);
	}
	evr__list_init(&p->chunks);
	evr__list_init(&p->free);
	p->total = p->nfree = 0;
}
