/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The doors between threads.  A ctx belongs to one thread, its owner: the
 * one that created it, or that took it over with evr_ctx_adopt().  Its data
 * path takes no lock.  Other threads reach it through one queue of calls:
 * a mutex-protected FIFO plus an eventfd that the ctx's loop watches (and
 * that is in the epoll set of evr_ctx_fd(), so an embedding host loop is
 * woken too), as libuv's uv_async_send wakes a loop.  The eventfd is
 * written only by the call that finds the queue not yet signaled, so a
 * burst of calls costs one write and one wakeup; the owner resets it when
 * it takes the queue, then runs the calls in the order they were queued.
 *
 * evr_ctx_call() and evr_send_mt() (msg.c) queue here; evr_conn_ref() and
 * evr_conn_unref() keep a conn's handle valid on other threads.  Every
 * other entry point checks, in builds with assertions, that its caller is
 * the owner (EVR_OWNER), and aborts naming itself if not.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

int evr__calls_init(struct evr__calls *q)
{
	int err = pthread_mutex_init(&q->mu, NULL);

	if (err)
		return -err;
	q->head = NULL;
	q->tail = &q->head;
	q->signaled = false;
	q->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (q->fd < 0) {
		err = -errno;
		pthread_mutex_destroy(&q->mu);
		return err;
	}
	return 0;
}

void evr__calls_fini(struct evr__calls *q)
{
	if (q->fd < 0)
		return;
	close(q->fd);
	q->fd = -1;
	pthread_mutex_destroy(&q->mu);
}

bool evr__calls_push(struct evr__calls *q, struct evr__call *call)
{
	uint64_t one = 1;
	bool signal;

	call->next = NULL;
	pthread_mutex_lock(&q->mu);
	*q->tail = call;
	q->tail = &call->next;
	signal = !q->signaled;
	q->signaled = true;
	pthread_mutex_unlock(&q->mu);
	/* Written after the call is queued: the wakeup it causes finds it.
	 * A counter that is already readable stays so; EAGAIN (the counter
	 * at its maximum) cannot happen with one write per taking. */
	if (signal && write(q->fd, &one, sizeof(one)) != sizeof(one))
		return false;
	return true;
}

static struct evr__call *calls_take(struct evr__calls *q)
{
	struct evr__call *head;
	uint64_t v;

	/* Reset first: a push after this either lands in what we take or
	 * writes the counter again (signaled is cleared below, under the
	 * lock that orders it with the push). */
	if (read(q->fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		return NULL;
	pthread_mutex_lock(&q->mu);
	head = q->head;
	q->head = NULL;
	q->tail = &q->head;
	q->signaled = false;
	pthread_mutex_unlock(&q->mu);
	return head;
}

unsigned evr__calls_run(evr_ctx *ctx)
{
	struct evr__call *call, *next;
	unsigned n = 0;

	for (call = calls_take(&ctx->calls); call; call = next) {
		next = call->next;
		call->run(ctx, call);
		n++;
	}
	return n;
}

void evr__wrong_thread(const char *fn)
{
	fprintf(stderr,
		"evrdma: %s() called from a thread that does not own the ctx: "
		"only evr_ctx_call(), evr_send_mt(), evr_conn_ref(), "
		"evr_conn_unref(), evr_ctx_load() and evr_ctx_least_loaded() "
		"may be called from other threads "
		"(evr_ctx_adopt() hands a ctx to another thread)\n",
		fn);
	abort();
}

/* ---- public ---- */

struct user_call {
	struct evr__call call; /* first */
	evr_call_fn fn;
	void *arg;
};

static void run_user_call(evr_ctx *ctx, struct evr__call *call)
{
	struct user_call *u = (struct user_call *)call;
	evr_call_fn fn = u->fn;
	void *arg = u->arg;

	free(u);
	fn(ctx, arg);
}

int evr_ctx_call(evr_ctx *ctx, evr_call_fn fn, void *arg)
{
	struct user_call *u;

	if (!ctx || !fn)
		return -EINVAL;
	u = malloc(sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->call.run = run_user_call;
	u->fn = fn;
	u->arg = arg;
	evr__calls_push(&ctx->calls, &u->call);
	return 0;
}

void evr_ctx_adopt(evr_ctx *ctx)
{
	if (ctx)
		ctx->owner = pthread_self();
}

unsigned evr_ctx_load(const evr_ctx *ctx)
{
	return ctx ? __atomic_load_n(&ctx->load, __ATOMIC_RELAXED) : 0;
}

evr_ctx *evr_ctx_least_loaded(evr_ctx *const *ctxs, size_t n)
{
	evr_ctx *best = NULL;
	unsigned least = 0, l;
	size_t i;

	for (i = 0; ctxs && i < n; i++) {
		if (!ctxs[i])
			continue;
		l = evr_ctx_load(ctxs[i]);
		if (!best || l < least) {
			best = ctxs[i];
			least = l;
		}
	}
	return best;
}

evr_conn *evr_conn_ref(evr_conn *conn)
{
	if (conn)
		evr__conn_ref(conn);
	return conn;
}

void evr_conn_unref(evr_conn *conn)
{
	if (conn)
		evr__conn_unref(conn);
}
