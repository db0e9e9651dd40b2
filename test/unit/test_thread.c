/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The doors between threads (lib/thread.c), without a device.
 *
 * The cases: calls queued by one thread run in their order, each once,
 * with their argument, and a burst of them writes the eventfd once;
 * producers on several threads against a consumer that sleeps on the
 * eventfd, as a loop does: every call runs once, each producer's in its
 * order, none is left behind; the owner check: a function acting on a ctx
 * called from another thread aborts naming itself, from the owner it does
 * not, and evr_ctx_adopt() moves the ownership; references: the handle
 * outlives the ctx's reference until the last evr_conn_unref(); load:
 * evr_ctx_least_loaded() picks the fewest (the first of equals), placing
 * by it spreads evenly, and the count stays exact under a writer thread.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "evrdma-int.h"

static evr_ctx *fake_ctx(void)
{
	evr_ctx *ctx = calloc(1, sizeof(*ctx));

	assert_non_null(ctx);
	ctx->owner = pthread_self();
	assert_int_equal(evr__calls_init(&ctx->calls), 0);
	return ctx;
}

static void fake_ctx_free(evr_ctx *ctx)
{
	evr__calls_fini(&ctx->calls);
	free(ctx);
}

static uint64_t counter(int fd)
{
	uint64_t v = 0;

	if (read(fd, &v, sizeof(v)) != sizeof(v))
		return 0;
	return v;
}

struct seen {
	evr_ctx *ctx;
	int order[64];
	int n;
};

static struct seen seen1;

static void record(evr_ctx *ctx, void *arg)
{
	assert_ptr_equal(ctx, seen1.ctx);
	seen1.order[seen1.n++] = (int)(intptr_t)arg;
}

static void test_order_once(void **state)
{
	evr_ctx *ctx = fake_ctx();
	int i;

	(void)state;
	memset(&seen1, 0, sizeof(seen1));
	seen1.ctx = ctx;
	assert_int_equal(evr_ctx_call(NULL, record, NULL), -EINVAL);
	assert_int_equal(evr_ctx_call(ctx, NULL, NULL), -EINVAL);
	assert_int_equal(evr__calls_run(ctx), 0);
	for (i = 0; i < 10; i++)
		assert_int_equal(evr_ctx_call(ctx, record, (void *)(intptr_t)i),
				 0);
	/* ten calls, one write: the counter reads 1 (and is reset) */
	assert_int_equal(counter(ctx->calls.fd), 1);
	assert_int_equal(seen1.n, 0); /* nothing runs before the owner asks */
	assert_int_equal(evr__calls_run(ctx), 10);
	assert_int_equal(seen1.n, 10);
	for (i = 0; i < 10; i++)
		assert_int_equal(seen1.order[i], i);
	/* taken: the next call signals again */
	assert_int_equal(evr__calls_run(ctx), 0);
	assert_int_equal(evr_ctx_call(ctx, record, (void *)(intptr_t)10), 0);
	assert_int_equal(evr__calls_run(ctx), 1);
	assert_int_equal(seen1.order[10], 10);
	assert_int_equal(counter(ctx->calls.fd), 0); /* run reset it */
	fake_ctx_free(ctx);
}

/* ---- many producers, one consumer asleep on the eventfd ---- */

#define PRODUCERS 4
#define PER_PRODUCER 20000

struct mp {
	evr_ctx *ctx;
	pthread_t consumer;
	int next[PRODUCERS]; /* consumer only */
	long runs;	     /* consumer only */
	int bad;	     /* consumer only */
};

struct mp_call {
	struct evr__call call;
	struct mp *mp;
	int producer, seq;
};

static void mp_run(evr_ctx *ctx, struct evr__call *call)
{
	struct mp_call *c = (struct mp_call *)call;
	struct mp *mp = c->mp;

	if (ctx != mp->ctx || !pthread_equal(pthread_self(), mp->consumer) ||
	    c->seq != mp->next[c->producer])
		mp->bad++;
	mp->next[c->producer] = c->seq + 1;
	mp->runs++;
	free(c);
}

struct producer {
	struct mp *mp;
	int id;
};

static void *produce(void *arg)
{
	struct producer *p = arg;
	int i;

	for (i = 0; i < PER_PRODUCER; i++) {
		struct mp_call *c = malloc(sizeof(*c));

		if (!c)
			abort();
		c->call.run = mp_run;
		c->mp = p->mp;
		c->producer = p->id;
		c->seq = i;
		if (!evr__calls_push(&p->mp->ctx->calls, &c->call))
			abort();
		if (i % 1000 == 0)
			sched_yield();
	}
	return NULL;
}

static void *consume(void *arg)
{
	struct mp *mp = arg;
	struct pollfd pfd = {.fd = mp->ctx->calls.fd, .events = POLLIN};

	while (mp->runs < (long)PRODUCERS * PER_PRODUCER) {
		/* a lost wakeup leaves the calls queued: the bound fails it */
		if (poll(&pfd, 1, 10000) != 1)
			break;
		evr__calls_run(mp->ctx);
	}
	return NULL;
}

static void test_many_producers(void **state)
{
	struct mp mp;
	struct producer p[PRODUCERS];
	pthread_t t[PRODUCERS];
	int i;

	(void)state;
	memset(&mp, 0, sizeof(mp));
	mp.ctx = fake_ctx();
	assert_int_equal(pthread_create(&mp.consumer, NULL, consume, &mp), 0);
	for (i = 0; i < PRODUCERS; i++) {
		p[i].mp = &mp;
		p[i].id = i;
		assert_int_equal(pthread_create(&t[i], NULL, produce, &p[i]), 0);
	}
	for (i = 0; i < PRODUCERS; i++)
		pthread_join(t[i], NULL);
	pthread_join(mp.consumer, NULL);
	assert_int_equal(mp.runs, (long)PRODUCERS * PER_PRODUCER);
	assert_int_equal(mp.bad, 0);
	for (i = 0; i < PRODUCERS; i++)
		assert_int_equal(mp.next[i], PER_PRODUCER);
	assert_int_equal(evr__calls_run(mp.ctx), 0);
	fake_ctx_free(mp.ctx);
}

/* ---- the owner check ---- */

static void *call_stats(void *arg)
{
	struct evr_stats st;

	evr_ctx_stats(arg, &st);
	return NULL;
}

static void *adopt_and_stats(void *arg)
{
	evr_ctx_adopt(arg);
	return call_stats(arg);
}

/* Run fn(ctx) on a new thread in a child process; its exit status and, in
 * err, what it wrote to stderr. */
static int in_child(void *(*fn)(void *), char *err, size_t errsz)
{
	int pfd[2], status;
	pid_t pid;
	ssize_t n;
	size_t got = 0;

	assert_int_equal(pipe(pfd), 0);
	fflush(NULL); /* the child exits through exit(): no output twice */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		evr_ctx *ctx = fake_ctx();
		pthread_t t;

		dup2(pfd[1], 2);
		close(pfd[0]);
		call_stats(ctx); /* the owner: fine */
		if (pthread_create(&t, NULL, fn, ctx))
			_exit(3);
		pthread_join(t, NULL);
		fake_ctx_free(ctx);
		/* exit(), not _exit(): the libraries' destructors free what
		 * they hold, which a leak checker would count otherwise */
		exit(0);
	}
	close(pfd[1]);
	while (got + 1 < errsz &&
	       (n = read(pfd[0], err + got, errsz - 1 - got)) > 0)
		got += (size_t)n;
	err[got] = 0;
	close(pfd[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	return status;
}

static void test_wrong_thread(void **state)
{
	char err[1024];
	int status;

	(void)state;
#ifdef NDEBUG
	skip(); /* --disable-assert: the check is compiled out */
#endif
	status = in_child(call_stats, err, sizeof(err));
	assert_true(WIFSIGNALED(status));
	assert_int_equal(WTERMSIG(status), SIGABRT);
	assert_non_null(strstr(err, "evr_ctx_stats() called from a thread "
				    "that does not own the ctx"));
	/* adopted first: the new owner may */
	status = in_child(adopt_and_stats, err, sizeof(err));
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_string_equal(err, "");
}

/* ---- references ---- */

static void test_refs(void **state)
{
	evr_conn *c = calloc(1, sizeof(*c));

	(void)state;
	assert_non_null(c);
	c->refs = 1; /* the ctx's */
	assert_ptr_equal(evr_conn_ref(c), c);
	assert_int_equal(c->refs, 2);
	evr__conn_unref(c); /* the ctx lets go: still there */
	assert_int_equal(c->refs, 1);
	evr_conn_unref(c); /* the last: freed (valgrind and ASan see a leak
			      or a double free otherwise) */
	assert_null(evr_conn_ref(NULL));
	evr_conn_unref(NULL);
}

/* ---- load and placement ---- */

struct loader {
	evr_ctx *ctx;
	int n;
};

/* A ctx's owner making and ending conns, as another thread reads. */
static void *load_up_down(void *arg)
{
	struct loader *l = arg;
	int i;

	for (i = 0; i < l->n; i++)
		evr__load_add(l->ctx, 1);
	for (i = 0; i < l->n; i++)
		evr__load_add(l->ctx, -1);
	return NULL;
}

static void test_load(void **state)
{
	evr_ctx *c[3] = {fake_ctx(), fake_ctx(), fake_ctx()};
	struct loader l = {c[2], 100000};
	pthread_t t;
	int i;

	(void)state;
	assert_null(evr_ctx_least_loaded(NULL, 3));
	assert_null(evr_ctx_least_loaded(c, 0));
	assert_int_equal(evr_ctx_load(NULL), 0);
	/* equals: the first */
	assert_ptr_equal(evr_ctx_least_loaded(c, 3), c[0]);
	evr__load_add(c[0], 1);
	evr__load_add(c[1], 1);
	assert_ptr_equal(evr_ctx_least_loaded(c, 3), c[2]);
	assert_ptr_equal(evr_ctx_least_loaded(c, 2), c[0]);
	evr__load_add(c[2], 2);
	evr__load_add(c[0], -1);
	assert_int_equal(evr_ctx_load(c[0]), 0);
	assert_int_equal(evr_ctx_load(c[2]), 2);
	assert_ptr_equal(evr_ctx_least_loaded(c, 3), c[0]);
	/* placing by it, one at a time, spreads evenly */
	for (i = 0; i < 6; i++)
		evr__load_add(evr_ctx_least_loaded(c, 3), 1);
	assert_int_equal(evr_ctx_load(c[0]), 3);
	assert_int_equal(evr_ctx_load(c[1]), 3);
	assert_int_equal(evr_ctx_load(c[2]), 3);
	/* read while another thread changes it: every change lands */
	assert_int_equal(pthread_create(&t, NULL, load_up_down, &l), 0);
	for (i = 0; i < 1000; i++)
		assert_true(evr_ctx_load(c[2]) <= 3u + 100000u);
	pthread_join(t, NULL);
	assert_int_equal(evr_ctx_load(c[2]), 3);
	for (i = 0; i < 3; i++)
		fake_ctx_free(c[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_once),
		cmocka_unit_test(test_many_producers),
		cmocka_unit_test(test_load),
		cmocka_unit_test(test_wrong_thread),
		cmocka_unit_test(test_refs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
