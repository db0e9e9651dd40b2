/*
 * The adaptive completion-mode state machine, pure and clock-free: the
 * caller feeds it timestamps and completion counts, it answers with the
 * mode to be in.  See adapt.c for the rules.
 */
#ifndef EVR_ADAPT_H
#define EVR_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

struct evr__adapt_cfg {
	uint32_t up_rate;  /* wakeups per second that switch EVENT -> POLL */
	uint32_t up_batch; /* completions in one wakeup that switch */
	uint32_t quiet_us; /* no completion for this long: POLL -> EVENT */
	uint32_t window_us; /* window over which up_rate is measured */
	uint32_t quiet_polls; /* ... and at least this many empty polls */
};

struct evr__adapt {
	struct evr__adapt_cfg cfg;
	bool polling;		/* current mode: POLL (true) or EVENT */
	uint64_t win_start_ns;	/* start of the current rate window */
	uint32_t win_wakeups;	/* wakeups counted in it */
	uint64_t last_busy_ns;	/* last time a completion was seen */
	uint32_t empty_polls;	/* POLL: empty polls since then */
	uint64_t switches;
};

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

#endif
