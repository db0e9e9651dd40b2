/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf-common.c: what both roles of evrdma-perf use -- the encoding of the
 * server's report, the clocks, this process's CPU time, and the buffer of
 * latency samples a measurement collects.
 *
 * Data messages are never empty.  An empty message is a report request:
 * the server answers it with a report (messages and bytes it received on
 * that connection, its process CPU time, its clock and its evr_ctx_stats
 * counters).  Messages arrive in order, so the report also confirms that
 * everything sent before the request was received.  The client asks once
 * before it starts the clock and once after, which gives the server's CPU
 * time over the measurement and, for one-way tests, the receiver's
 * confirmation of the total.  A report is REPORT_LEN bytes, little endian:
 * magic, version 1, then the six counters of struct report.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include "perf.h"

const char desc_magic[4] = {'E', 'V', 'P', '1'};
const char *const test_str[T_COUNT] = {"lat", "bw", "rate", "conn", "rpc"};
const char *const load_str[] = {"-", "idle", "light", "sat"};

struct perf_tune perf_tune;

void perf_tune_apply(struct evr_ctx_opts *o)
{
	if (perf_tune.sq_depth)
		o->sq_depth = perf_tune.sq_depth;
	if (perf_tune.srq_buffers)
		o->srq_buffers = perf_tune.srq_buffers;
	if (perf_tune.window_idle_ms)
		o->window_idle_ms = perf_tune.window_idle_ms;
	if (perf_tune.eager_size)
		o->eager_size = perf_tune.eager_size;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
	int i;

	for (i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
	uint64_t v = 0;
	int i;

	for (i = n - 1; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

void report_encode(uint8_t *p, const struct report *r)
{
	put_le(p, REPORT_MAGIC, 4);
	put_le(p + 4, 1, 4);
	put_le(p + 8, r->msgs, 8);
	put_le(p + 16, r->bytes, 8);
	put_le(p + 24, r->cpu_us, 8);
	put_le(p + 32, r->t_ns, 8);
	put_le(p + 40, r->switches, 8);
	put_le(p + 48, r->wakeups, 8);
}

int report_decode(const void *data, size_t len, struct report *r)
{
	const uint8_t *p = data;

	if (len != REPORT_LEN || get_le(p, 4) != REPORT_MAGIC ||
	    get_le(p + 4, 4) != 1)
		return -1;
	r->msgs = get_le(p + 8, 8);
	r->bytes = get_le(p + 16, 8);
	r->cpu_us = get_le(p + 24, 8);
	r->t_ns = get_le(p + 32, 8);
	r->switches = get_le(p + 40, 8);
	r->wakeups = get_le(p + 48, 8);
	return 0;
}

/* ------------------------------------------------------------------------ */
/* Clocks and CPU time                                                      */

uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

ev_tstamp mono_s(void)
{
	return (ev_tstamp)now_ns() * 1e-9;
}

/* This process's user + system CPU time in microseconds. */
int cpu_us(uint64_t *out)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru) < 0)
		return -errno;
	*out = (uint64_t)ru.ru_utime.tv_sec * 1000000u +
	       (uint64_t)ru.ru_utime.tv_usec +
	       (uint64_t)ru.ru_stime.tv_sec * 1000000u +
	       (uint64_t)ru.ru_stime.tv_usec;
	return 0;
}

/* Keep one latency sample (us) of the measurement in progress. */
int lat_add(struct perf *p, double us)
{
	if (p->nlat == p->lat_cap) {
		size_t cap = p->lat_cap ? p->lat_cap * 2 : 4096;
		double *n = realloc(p->lat, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		p->lat = n;
		p->lat_cap = cap;
	}
	p->lat[p->nlat++] = us;
	return 0;
}
