/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The library's one queue type: an intrusive, circular, doubly linked list
 * with a head (as the Linux list_head, libuv's QUEUE, nng's nni_list).
 *
 * An object that sits on a queue embeds a struct evr__list and is recovered
 * from it with evr__list_entry().  A head is a struct evr__list too: empty
 * when it points at itself.  Every operation is O(1) -- above all removing
 * an element from anywhere, which needs no search and no knowledge of the
 * queue it is on -- and none allocates.  Removing resets the element to
 * "alone" (pointing at itself), so evr__list_empty() on an element's link
 * tells whether it is queued, and removing twice is harmless.
 *
 * FIFO: push_tail + pop_head.  LIFO (free lists): push_head + pop_head.
 * Iteration: for_each, or for_each_safe when the body may remove the
 * element it is on.
 */
#ifndef EVRDMA_QUEUE_H
#define EVRDMA_QUEUE_H

#include <stdbool.h>
#include <stddef.h>

#define evr__container_of(ptr, type, member)                                   \
	((type *)((char *)(ptr)-offsetof(type, member)))

struct evr__list {
	struct evr__list *next, *prev;
};

/* An empty head, or an element on no queue. */
static inline void evr__list_init(struct evr__list *l)
{
	l->next = l->prev = l;
}

/* Of a head: no element.  Of an element's link: on no queue. */
static inline bool evr__list_empty(const struct evr__list *l)
{
	return l->next == l;
}

static inline void evr__list_insert(struct evr__list *n, struct evr__list *prev,
				    struct evr__list *next)
{
	n->prev = prev;
	n->next = next;
	prev->next = n;
	next->prev = n;
}

static inline void evr__list_add_tail(struct evr__list *head,
				      struct evr__list *n)
{
	evr__list_insert(n, head->prev, head);
}

static inline void evr__list_add_head(struct evr__list *head,
				      struct evr__list *n)
{
	evr__list_insert(n, head, head->next);
}

/* Unlink n from whatever queue it is on (or nothing, if it is alone). */
static inline void evr__list_del(struct evr__list *n)
{
	n->prev->next = n->next;
	n->next->prev = n->prev;
	n->next = n->prev = n;
}

/* The first / last element, or NULL when the queue is empty. */
static inline struct evr__list *evr__list_first(const struct evr__list *head)
{
	return head->next == head ? NULL : head->next;
}

static inline struct evr__list *evr__list_last(const struct evr__list *head)
{
	return head->prev == head ? NULL : head->prev;
}

/* The element after n on head's queue, or NULL when n is the last. */
static inline struct evr__list *evr__list_next(const struct evr__list *head,
					       const struct evr__list *n)
{
	return n->next == head ? NULL : n->next;
}

/* Take the first element off, or NULL when the queue is empty. */
static inline struct evr__list *evr__list_pop_head(struct evr__list *head)
{
	struct evr__list *n = evr__list_first(head);

	if (n)
		evr__list_del(n);
	return n;
}

/* Move every element of from to the end of head, in order; from is left
 * empty. */
static inline void evr__list_splice_tail(struct evr__list *head,
					 struct evr__list *from)
{
	if (evr__list_empty(from))
		return;
	from->next->prev = head->prev;
	head->prev->next = from->next;
	from->prev->next = head;
	head->prev = from->prev;
	evr__list_init(from);
}

/* The object of type that embeds the link n as member, or NULL for NULL:
 * so that evr__list_first/pop_head's NULL reads as "no object". */
static inline void *evr__list_obj(struct evr__list *n, size_t off)
{
	return n ? (char *)n - off : NULL;
}
#define evr__list_entry(n, type, member)                                       \
	((type *)evr__list_obj((n), offsetof(type, member)))
#define evr__list_first_entry(head, type, member)                              \
	evr__list_entry(evr__list_first(head), type, member)
#define evr__list_pop_entry(head, type, member)                                \
	evr__list_entry(evr__list_pop_head(head), type, member)

/* pos runs over the links of head's queue, first to last.  The body must
 * not remove pos; for_each_safe allows it (tmp holds the next one). */
#define evr__list_for_each(pos, head)                                          \
	for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)
#define evr__list_for_each_safe(pos, tmp, head)                                \
	for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head);       \
	     (pos) = (tmp), (tmp) = (pos)->next)

#endif
