/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The adaptive completion-mode state machine, pure and clock-free: the
 * caller feeds it timestamps and completion counts, it answers with the
 * mode to be in.  See adapt.c for the rules.
 */
#ifndef EVR_ADAPT_H
#define EVR_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

/* Defaults of the thresholds (evr_ctx_opts.adapt_*, EVR_ADAPT_*). */
#define EVR_ADAPT_UP_RATE  2000
#define EVR_ADAPT_UP_BATCH 16
#define EVR_ADAPT_QUIET_US 1000
/* The rate window: wakeups are counted over this long. */
#define EVR_ADAPT_WINDOW_US 10000
/* POLL -> EVENT also needs this many empty loop iterations (each up to
 * EVR_POLL_SPIN passes) since the last completion: a process that was not
 * running for quiet_us has not seen the peer go quiet
 * (EVR_ADAPT_QUIET_POLLS; 0 leaves the time rule alone). */
#define EVR_ADAPT_QUIET_POLLS 16

struct evr__adapt_cfg {
	uint32_t up_rate;     /* wakeups per second that switch EVENT -> POLL */
	uint32_t up_batch;    /* completions in one wakeup that switch */
	uint32_t quiet_us;    /* no completion for this long: POLL -> EVENT */
	uint32_t window_us;   /* window over which up_rate is measured */
	uint32_t quiet_polls; /* ... and at least this many empty polls */
};

struct evr__adapt {
	struct evr__adapt_cfg cfg;
	bool polling;	       /* current mode: POLL (true) or EVENT */
	uint64_t win_start_ns; /* start of the current rate window */
	uint32_t win_wakeups;  /* wakeups counted in it */
	uint64_t last_busy_ns; /* last time a completion was seen */
	uint32_t empty_polls;  /* POLL: empty polls since then */
	uint64_t switches;
};

/* The configuration is filled by evr__tune_resolve() (opts.c): options,
 * then EVR_ADAPT_* variables, then the defaults above. */
void evr__adapt_init(struct evr__adapt *a, const struct evr__adapt_cfg *cfg,
		     uint64_t now_ns);
/* In EVENT mode: one completion-channel wakeup that found ncqe
 * completions.  Returns true when the caller must switch to POLL. */
bool evr__adapt_wakeup(struct evr__adapt *a, uint64_t now_ns, unsigned ncqe);
/* In POLL mode: one poll pass that found ncqe completions.  Returns true
 * when the caller must switch back to EVENT (arm, then poll once more). */
bool evr__adapt_poll(struct evr__adapt *a, uint64_t now_ns, unsigned ncqe);
/* Forced mode (evr_ctx_set_mode or a test): resets the counters. */
void evr__adapt_force(struct evr__adapt *a, bool polling, uint64_t now_ns);

/* ADAPTIVE's spin after a post, while in EVENT (loop.c): how long to poll
 * for the answer before sleeping.  At least base_ns (adapt_spin_us); when
 * answers have been taking longer, the time they take (a running average
 * of post-to-answer times, with half again as margin), up to
 * EVR_SPIN_STRETCH times base_ns.  Answers slower than that are waited
 * for asleep: spinning would cost the whole bound per message for
 * nothing, so the spin falls back to base_ns.  EVR_SPIN_MISSES longer
 * spins in a row that end without their answer forget the average and
 * spin base_ns for the next EVR_SPIN_BACKOFF posts: an answer that cannot
 * come while we spin (its sender runs on our own loop, or waits for
 * something we do) must not cost a long spin per message. */
#define EVR_SPIN_STRETCH 16
#define EVR_SPIN_MISSES	 2
#define EVR_SPIN_BACKOFF 64
struct evr__spin {
	uint64_t base_ns;
	uint64_t avg_ns;  /* 0: no answer timed yet */
	uint32_t backoff; /* posts left to spin base_ns only */
	uint32_t misses;  /* longer spins in a row without their answer */
};
void evr__spin_init(struct evr__spin *s, uint64_t base_ns);
/* One answer came took_ns after the post it answers: during the spin
 * (spun) or after it, found by a wakeup. */
void evr__spin_answer(struct evr__spin *s, uint64_t took_ns, bool spun);
/* How long the spin after the next post should be, without the backoff. */
uint64_t evr__spin_len(const struct evr__spin *s);
/* A post: how long to spin for its answer (0 when base_ns is 0). */
uint64_t evr__spin_begin(struct evr__spin *s);
/* A spin of spun_ns ended without an answer. */
void evr__spin_missed(struct evr__spin *s, uint64_t spun_ns);

#endif
