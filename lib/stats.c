/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A ctx's statistics as one line of JSON (evr_stats_json), for monitoring
 * systems to scrape: every field of struct evr_stats under its own name,
 * in the header's order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>

#include "evrdma.h"

/* The numeric fields, in the order of struct evr_stats. */
#define EVR_STATS_U64_A(X)                                                     \
	X(wakeups)                                                             \
	X(polls)                                                               \
	X(empty_polls)                                                         \
	X(completions)                                                         \
	X(post_send_calls)                                                     \
	X(send_wrs)                                                            \
	X(signaled_wrs)                                                        \
	X(recv_wrs)                                                            \
	X(mode_switches)                                                       \
	X(msgs_sent)                                                           \
	X(msgs_recv)                                                           \
	X(bytes_sent)                                                          \
	X(bytes_recv)                                                          \
	X(rndv_sent)                                                           \
	X(rndv_recv)                                                           \
	X(credit_updates)                                                      \
	X(cq_resizes)                                                          \
	X(keepalive_probes)                                                    \
	X(conns)                                                               \
	X(cq_count)                                                            \
	X(cq_capacity)                                                         \
	X(cq_reserved)
/* then mode, then: */
#define EVR_STATS_U64_B(X)                                                     \
	X(reg_bytes)                                                           \
	X(pool_bytes)
/* then memlock_limit, then: */
#define EVR_STATS_U64_C(X)                                                     \
	X(srq_buffers)                                                         \
	X(srq_posted)                                                          \
	X(srq_lent)                                                            \
	X(srq_refused)                                                         \
	X(srq_grown)                                                           \
	X(srq_withheld)                                                        \
	X(srq_bytes)                                                           \
	X(conn_bytes)                                                          \
	X(window_given)                                                        \
	X(window_asks)                                                         \
	X(srq_reclaimed)
/* then rndv_access, then: */
#define EVR_STATS_U64_D(X)                                                     \
	X(rndv_windows)                                                        \
	X(spin_hits)                                                           \
	X(calls)                                                               \
	X(calls_ok)                                                            \
	X(calls_expired)                                                       \
	X(calls_cancelled)                                                     \
	X(late_replies)                                                        \
	X(requests)                                                            \
	X(requests_cancelled)                                                  \
	X(requests_unserved)                                                   \
	X(direct_sends)                                                        \
	X(zero_copy_sends)

/* struct evr_stats grows by appending: a field added after the last one
 * here must be added above too. */
_Static_assert(offsetof(struct evr_stats, zero_copy_sends) + sizeof(uint64_t) ==
		   sizeof(struct evr_stats),
	       "struct evr_stats grew: add its new fields to evr_stats_json");

/* snprintf into what is left of the buffer; the length the whole line
 * needs is counted on past its end. */
struct out {
	char *p;
	size_t left;
	size_t n;
};

__attribute__((format(printf, 2, 3))) static void put(struct out *o,
						      const char *fmt, ...)
{
	va_list ap;
	int k;

	va_start(ap, fmt);
	k = vsnprintf(o->p, o->left, fmt, ap);
	va_end(ap);
	if (k < 0)
		return;
	o->n += (size_t)k;
	if ((size_t)k < o->left) {
		o->p += k;
		o->left -= (size_t)k;
	} else if (o->left) {
		o->p += o->left - 1; /* at the NUL vsnprintf wrote */
		o->left = 1;
	}
}

static const char *rndv_access_str(enum evr_rndv_access a)
{
	switch (a) {
	case EVR_RNDV_UNBOUND:
		return "unbound";
	case EVR_RNDV_WINDOW:
		return "window";
	case EVR_RNDV_REGISTER:
		return "register";
	}
	return "unknown";
}

int evr_stats_json(const struct evr_stats *st, char *buf, size_t len)
{
	struct out o = { buf, len, 0 };

	if (!st || (!buf && len))
		return -EINVAL;
		/* each field after the opening brace; the first without a comma
		 */
#define PUT(f)                                                                 \
	put(&o, "%s\"" #f "\":%" PRIu64, o.n > 1 ? "," : "", (uint64_t)st->f);
	put(&o, "{");
	EVR_STATS_U64_A(PUT)
	put(&o, ",\"mode\":\"%s\"", evr_mode_str(st->mode));
	EVR_STATS_U64_B(PUT)
	if (st->memlock_limit == UINT64_MAX) /* no limit */
		put(&o, ",\"memlock_limit\":null");
	else
		put(&o, ",\"memlock_limit\":%" PRIu64, st->memlock_limit);
	EVR_STATS_U64_C(PUT)
	put(&o, ",\"rndv_access\":\"%s\"", rndv_access_str(st->rndv_access));
	EVR_STATS_U64_D(PUT)
#undef PUT
	put(&o, "}");
	return o.n > INT32_MAX ? -EOVERFLOW : (int)o.n;
}
