/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * evrdma - event-driven, asynchronous RDMA messaging over libibverbs,
 * librdmacm and libev.
 *
 * Conventions (the same everywhere in this header):
 *
 *  - Functions return 0 (or a non-negative value) on success and a negative
 *    errno on failure; evr_strerror() turns one into text.
 *  - A call that takes a callback and returns an error never invokes that
 *    callback.  A call that returns 0 invokes it exactly once, later, from
 *    loop processing -- never from inside the submitting call -- also when
 *    the operation fails, is flushed or its connection is closed.  (One
 *    call ends another's operation at once: evr_call_cancel() may fire
 *    the cancelled call's callback from inside itself.)
 *  - Handles are opaque and allocated by the library.  Who owns what, and
 *    for how long a pointer stays valid, is written on each prototype.
 *  - A context (evr_ctx) and everything created from it belong to one loop
 *    and one thread, its owner: the thread that created it (or took it
 *    over with evr_ctx_adopt()).  Use one ctx per thread.  Thread-safe, and
 *    nothing else: evr_ctx_call(), evr_send_mt(), evr_conn_ref(),
 *    evr_conn_unref(), evr_ctx_load(), evr_ctx_least_loaded() (see
 *    "Threads" below), evr_strerror(),
 *    evr_err_name(), evr_mode_str() and evr_*_opts_init().  In builds with
 *    assertions (the default; --disable-assert drops them) any other
 *    function that acts on a ctx, called from a thread other than its
 *    owner, aborts with a message naming the function.
 */
#ifndef EVRDMA_H
#define EVRDMA_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define EVR_EXPORT __attribute__((visibility("default")))
#else
#define EVR_EXPORT
#endif

struct ev_loop;

#define EVR_VERSION_MAJOR 0
#define EVR_VERSION_MINOR 1
#define EVR_VERSION_PATCH 0

/** Most user bytes a connect request (or a reject) may carry. */
#define EVR_MAX_USER_DATA 32

typedef struct evr_ctx evr_ctx;
typedef struct evr_listener evr_listener;
typedef struct evr_conn evr_conn;
typedef struct evr_conn_req evr_conn_req;
typedef struct evr_mr evr_mr;
typedef struct evr_msg evr_msg;

/* ------------------------------------------------------------------------ */
/* Errors and logging                                                       */

/** Text for a negative errno returned by this library (never NULL). */
EVR_EXPORT const char *evr_strerror(int err);
/** Symbolic name ("ECONNREFUSED") for a negative errno, "OK" for 0,
 *  "EUNKNOWN" for anything else (never NULL). */
EVR_EXPORT const char *evr_err_name(int err);

enum evr_log_level {
	EVR_LOG_ERROR = 0,
	EVR_LOG_WARN = 1,
	EVR_LOG_INFO = 2,
	EVR_LOG_DEBUG = 3,
};

/**
 * Log sink.  msg is a complete line without a trailing newline, valid only
 * during the call.  Logging is off unless a sink is set in the ctx options
 * or the environment variable EVR_LOG is set to error|warn|info|debug, in
 * which case lines go to stderr.
 */
typedef void (*evr_log_fn)(enum evr_log_level level, const char *msg,
			   void *arg);

/* ------------------------------------------------------------------------ */
/* Context                                                                  */

/** Completion handling modes; see evrdma(7), "Completion modes". */
enum evr_mode {
	EVR_MODE_EVENT = 0,    /**< CQs armed, the loop sleeps until events */
	EVR_MODE_POLL = 1,     /**< CQs polled every loop iteration */
	EVR_MODE_ADAPTIVE = 2, /**< EVENT when idle, POLL under load
				*   (evr_ctx_mode() says which, now) */
};

/** "event", "poll" or "adaptive"; "unknown" for any other value. */
EVR_EXPORT const char *evr_mode_str(enum evr_mode mode);

/*
 * Options structs (evr_ctx_opts, evr_conn_opts) can grow without breaking
 * programs built against an older evrdma.h.  Their first member, size, is
 * set by evr_ctx_opts_init() / evr_conn_opts_init() to the sizeof the
 * caller was compiled with; the library takes from a smaller struct the
 * fields it has and gives the missing ones their defaults, and accepts a
 * larger one (from a newer header) only if the fields it does not know are
 * all zero (else -E2BIG).  A struct never initialised (size 0) is refused
 * with -EINVAL.  So: always call the _init function first, then set
 * fields; copying an initialised struct is fine.
 * New fields are only ever appended, each starting at or after the
 * previous version's sizeof (never in its trailing padding, which a struct
 * assignment need not copy).
 *
 * Options and the environment: a numeric field left at 0 (what _init
 * leaves in the fields marked "env") means "unset": the environment
 * variable named applies if it is set to a number, else the built-in
 * default.  A non-zero field always wins over the environment.  The
 * environment is read once, by evr_ctx_create(); evrdma(7),
 * "Environment", lists every variable.
 */
/** Where a ctx's receive buffers are posted (evr_ctx_opts.srq). */
enum evr_srq_mode {
	EVR_SRQ_AUTO = 0, /**< shared where the device can */
	EVR_SRQ_ON = 1,	  /**< shared, or connections fail */
	EVR_SRQ_OFF = 2,  /**< a receive queue per connection */
};

struct evr_ctx_opts {
	/** sizeof(struct evr_ctx_opts) as the caller was built: set by
	 *  evr_ctx_opts_init(), do not change it. */
	size_t size;
	/** RDMA device name ("rxe0").  NULL: the device that has local_addr,
	 *  else the one named by the EVR_DEVICE environment variable, else
	 *  the device of the first address rdma_cm resolves for this ctx
	 *  (evr_listen, evr_connect) -- or the first device, if evr_mr_reg()
	 *  comes first.  A ctx serves one device. */
	const char *device;
	/** A local IP address whose device the ctx binds to (or NULL). */
	const char *local_addr;
	enum evr_mode mode;  /**< default EVR_MODE_ADAPTIVE */
	unsigned sq_depth;   /**< send WRs per connection, default 64 */
	unsigned recv_depth; /**< receive buffers per connection, default 64 */
	/** Largest eager payload (64 B .. 1 MiB).  0, the default: 8192,
	 *  or less under a small locked-memory limit so that the shared
	 *  receive pool still holds some 2048 buffers (2048 under the usual
	 *  8 MiB limit, 1024 at least; see evrdma(7), "Locked memory"). */
	size_t eager_size;
	size_t max_msg_size; /**< largest message accepted, default 64 MiB */
	unsigned signal_interval; /**< signal 1 send WR in N, default 16 */
	/** Bound on the silent steps of a connect, default 5000: past it
	 *  on_connect fires with -ETIMEDOUT (evr_conn_opts.timeout_ms
	 *  overrides it).  It bounds address resolution and route resolution,
	 *  each.  Once the
	 *  request is sent, the wait for the answer -- which may be queued
	 *  behind many others at a busy server -- is bounded by the rdma_cm
	 *  itself (the server's CM acknowledges a request it queued, and the
	 *  client's CM gives up on a server that never answers:
	 *  -ETIMEDOUT) and, as a safety net, by connect_reply_ms. */
	unsigned connect_timeout_ms;
	/** Bound on a graceful close, default 5000: past it the conn is
	 *  aborted and on_close fires with -ETIMEDOUT (see evr_conn_close). */
	unsigned close_timeout_ms;
	/** Transport retries before a send fails (0..6, default 6; 7 would
	 *  mean "forever" to some providers and is never used). */
	unsigned retry_count;
	/** Local ACK timeout exponent: 4.096 us * 2^n (default 16, ~0.27 s).
	 *  A dead peer fails the WRs in flight after about
	 *  (retry_count + 1) times that. */
	unsigned ack_timeout;
	/** Probe a connection idle this long (default 2000; 0: no keepalive).
	 *  The probe is a zero-length RDMA WRITE: no peer CPU, no credit.
	 *  Idleness is checked every keepalive_ms / 2, so a probe goes out
	 *  1 to 1.5 times keepalive_ms after the last completion (that of the
	 *  previous probe included); evr_stats.keepalive_probes counts them. */
	unsigned keepalive_ms;
	/** A probe not acknowledged within this fails the conn -ETIMEDOUT
	 *  (default 6000): a silent peer is detected within about
	 *  keepalive_ms * 1.5 + keepalive_timeout_ms. */
	unsigned keepalive_timeout_ms;
	size_t send_queue_limit; /**< bytes queued per conn, default 64 MiB */
	size_t
	    send_queue_lowat; /**< on_drain at or below this, default limit/2 */
	/* Adaptive mode thresholds (env: 0 takes the environment variable,
	 * else the default).  A rule is never met with UINT_MAX. */
	/** Wakeups per second that switch to POLL (env EVR_ADAPT_UP_RATE,
	 *  default 2000). */
	unsigned adapt_up_rate;
	/** Completions in one wakeup that switch to POLL (env
	 *  EVR_ADAPT_UP_BATCH, default 16). */
	unsigned adapt_up_batch;
	/** Time without a completion that switches back to EVENT, in us (env
	 *  EVR_ADAPT_QUIET_US, default 1000). */
	unsigned adapt_quiet_us;
	/** Log sink.  NULL: lines go to stderr at the level EVR_LOG names
	 *  (error|warn|info|debug), none if EVR_LOG is unset.  Set, it takes
	 *  every line at or below log_level and EVR_LOG is not read. */
	evr_log_fn log_fn;
	void *log_arg;
	enum evr_log_level log_level; /**< with log_fn, default EVR_LOG_WARN */
	/** Connect requests a listener lets wait in the kernel before its
	 *  accept callback sees them, when evr_listen() is given a backlog
	 *  of 0 or less (default 4096).  The kernel caps it at
	 *  net.rdma_ucm.max_backlog (1024 unless raised); a request beyond
	 *  it is dropped and the client's CM sends it again a few seconds
	 *  later. */
	unsigned listen_backlog;
	/** Safety bound on the wait for the answer to a connect request
	 *  that was sent, in ms (default 30000; never less than the connect
	 *  timeout): past it on_connect fires with -ETIMEDOUT.  An accepted
	 *  conn waits as long for the client to complete the handshake (the
	 *  client may have a queue of its own).  See connect_timeout_ms. */
	unsigned connect_reply_ms;
	/** Receive buffers: one pool shared by every connection of the ctx
	 *  (a shared receive queue, SRQ) or recv_depth of them per
	 *  connection.  EVR_SRQ_AUTO (default): shared where the device has
	 *  SRQs, else per connection; the environment variable EVR_SRQ
	 *  (on|off|auto) decides when this is left at AUTO.  EVR_SRQ_ON on a
	 *  device without SRQs fails the first connection with -EOPNOTSUPP.
	 *  Shared, recv_depth is the largest window of credits a connection
	 *  may reach; it starts at 8 and follows what the peer sends
	 *  (docs/credits.md). */
	enum evr_srq_mode srq;
	/** Most receive buffers the shared pool may hold (0: as many as the
	 *  device's SRQ takes, at most 65536, and at most half of the
	 *  locked-memory limit).  A connection that cannot get its first
	 *  window from it is refused with -ENOBUFS. */
	unsigned srq_buffers;
	/** A connection whose peer lends it a window out of a shared pool
	 *  and that has sent no data for this long gives back every credit
	 *  beyond its reserve, so that idle connections do not hold the
	 *  peer's receive buffers; the next message asks for a window again
	 *  (one round trip more, docs/credits.md "Idle windows").  In ms,
	 *  checked every window_idle_ms: credits go back 1 to 2 times it
	 *  after the last send.  0: the default, 2000; UINT_MAX: never. */
	unsigned window_idle_ms;
	/** ADAPTIVE, while in EVENT: after posting a message or a one-sided
	 *  operation (not the library's own credit updates), poll the CQs
	 *  at least this long (us) before sleeping -- spin, then block --
	 *  so that an answer that comes within it (a request's reply, a
	 *  reply's next request) is taken without a wakeup; each completion
	 *  it takes that produces another post starts the spin anew.  Where
	 *  answers take longer, the spin follows them: the time from a post
	 *  to the next message received, averaged, with half again as
	 *  margin, up to 16 times this value; answers slower than that are
	 *  waited for asleep after the short spin.  It costs up to the
	 *  spin's length in CPU per message sent while the traffic is too
	 *  light to switch to POLL, and nothing while idle.  0: the
	 *  environment variable EVR_ADAPT_SPIN_US, else the default, 50;
	 *  UINT_MAX (or EVR_ADAPT_SPIN_US=0): never spin.
	 *  evr_stats.spin_hits counts what it took. */
	unsigned adapt_spin_us;
};

/** Fill opts with the defaults and record sizeof(*opts) in opts->size, as
 *  compiled into the caller.  Always call it before setting fields. */
EVR_EXPORT void evr_ctx_opts_init_sz(struct evr_ctx_opts *opts, size_t size);
static inline void evr_ctx_opts_init(struct evr_ctx_opts *opts)
{
	evr_ctx_opts_init_sz(opts, sizeof(*opts));
}

/**
 * Create a context on loop (a libev loop the caller runs), or on a private
 * loop when loop is NULL (drive it with evr_ctx_run() or the embedding
 * calls below).  Creates the rdma_cm event channel and, once the device is
 * known (see evr_ctx_opts.device), the PD, the completion channel and the
 * CQs, and starts the watchers.  opts NULL: the defaults.  -EINVAL for
 * opts never initialised (size 0) or out of range, -E2BIG for opts from a
 * newer evrdma.h that set fields this library does not know.  Reads the
 * environment (evrdma(7), "Environment") once, here.
 * On success *out is owned by the caller until evr_ctx_destroy().
 */
EVR_EXPORT int evr_ctx_create(evr_ctx **out, struct ev_loop *loop,
			      const struct evr_ctx_opts *opts);

/**
 * Destroy a context.  Every connection and listener still open is aborted:
 * pending operations complete with -ECANCELED, connect callbacks with
 * -ECANCELED, close callbacks with -ECANCELED -- from inside this call,
 * which is the one exception to "never inside the call".  Registered
 * memory (evr_mr) still open is deregistered.  Must not be called from a
 * callback of this ctx.
 */
EVR_EXPORT void evr_ctx_destroy(evr_ctx *ctx);

/*
 * Threads.  A ctx's data path takes no lock: it runs on its owner thread.
 * Other threads reach it through a queue of calls, and an eventfd its loop
 * watches -- also through evr_ctx_fd(), which becomes readable -- so the
 * owner runs them at its next loop iteration, in the order they were
 * queued; a burst of calls costs one wakeup.  One listener spreads its
 * connections over the ctxs of other threads with evr_accept_on().
 */

/** A function to run on a ctx's thread (evr_ctx_call). */
typedef void (*evr_call_fn)(evr_ctx *ctx, void *arg);

/**
 * Thread-safe.  Run fn(ctx, arg) on the ctx's thread, from its loop (or
 * evr_ctx_process()), after the calls queued before it.  fn may call
 * anything a callback may.  0, or -EINVAL (ctx or fn NULL), -ENOMEM.
 * Calls still queued when evr_ctx_destroy() starts run inside it, first;
 * the ctx must stay alive until every thread is done calling this.
 */
EVR_EXPORT int evr_ctx_call(evr_ctx *ctx, evr_call_fn fn, void *arg);

/**
 * Make the calling thread the ctx's owner: to hand a ctx created on one
 * thread to another (e.g. create all ctxs, then start a thread per ctx).
 * The old owner must be done with it, and the hand-off ordered by the
 * application (pthread_create, a mutex), before the new owner calls this.
 */
EVR_EXPORT void evr_ctx_adopt(evr_ctx *ctx);

/**
 * Thread-safe.  How many connections the ctx has: those not yet ended
 * (made by evr_connect or accepted, up or still connecting, until their
 * last callback), and the requests evr_accept_on() queued for it and it
 * has not taken yet.  A snapshot: other threads change it meanwhile.
 */
EVR_EXPORT unsigned evr_ctx_load(const evr_ctx *ctx);

/**
 * Thread-safe.  Of ctxs[0..n-1], the one with the lowest evr_ctx_load()
 * (the first of equals), or NULL if n is 0 or ctxs NULL: the placement
 * helper for evr_accept_on(), e.g.
 *     evr_accept_on(req, evr_ctx_least_loaded(workers, n), &opts);
 * Round robin needs no helper: a counter modulo n.
 */
EVR_EXPORT evr_ctx *evr_ctx_least_loaded(evr_ctx *const *ctxs, size_t n);

/** The libev loop the ctx runs on (the private one if created with NULL). */
EVR_EXPORT struct ev_loop *evr_ctx_loop(evr_ctx *ctx);

/** Name of the RDMA device the ctx is bound to ("rxe0"; "" until bound). */
EVR_EXPORT const char *evr_ctx_device(const evr_ctx *ctx);

/** Switch the completion mode at run time.  A call that changes the mode
 *  in effect counts in evr_stats.mode_switches; the mode-switch callback
 *  is not called for it. */
EVR_EXPORT int evr_ctx_set_mode(evr_ctx *ctx, enum evr_mode mode);
/** The mode currently in effect: an ADAPTIVE ctx reports EVR_MODE_EVENT
 *  or EVR_MODE_POLL, whichever it is in, never EVR_MODE_ADAPTIVE. */
EVR_EXPORT enum evr_mode evr_ctx_mode(const evr_ctx *ctx);

/** How a peer reads the source of a rendezvous message.  Whichever, the
 *  peer's rkey reaches the message's bytes only, and stops working before
 *  the send's callback fires.  Chosen when the ctx binds to its device
 *  (evr_stats.rndv_access). */
enum evr_rndv_access {
	EVR_RNDV_UNBOUND = 0, /**< no device yet */
	/** A type 2 memory window bound over the message for the send, on
	 *  the connection's QP, deallocated at the FIN.  The registration
	 *  under it may be larger: a message sent from inside an evr_mr_reg()
	 *  region with EVR_ACCESS_REMOTE_READ borrows the region (zero copy,
	 *  nothing registered), and the registration cache (EVR_REG_CACHE)
	 *  serves any message inside a cached registration. */
	EVR_RNDV_WINDOW,
	/** No windows (the device has none, its windows cannot be used --
	 *  rdma_rxe's, see docs/protocol.md -- or EVR_MW=off): the
	 *  message's bytes are registered for the send alone and
	 *  deregistered at the FIN; no borrowing, no cache. */
	EVR_RNDV_REGISTER,
};

struct evr_stats {
	uint64_t wakeups;	  /**< completion-channel events handled */
	uint64_t polls;		  /**< ibv_poll_cq calls */
	uint64_t empty_polls;	  /**< of which returned nothing */
	uint64_t completions;	  /**< work completions processed */
	uint64_t post_send_calls; /**< ibv_post_send calls */
	uint64_t send_wrs;	  /**< send WRs posted */
	uint64_t signaled_wrs;	  /**< of which signaled */
	uint64_t recv_wrs;	  /**< receive WRs posted */
	/** Changes of the mode in effect (EVENT<->POLL), each counted once:
	 *  those ADAPTIVE makes (also reported by evr_ctx_on_mode_switch())
	 *  and those evr_ctx_set_mode() makes. */
	uint64_t mode_switches;
	/** msgs_sent: with a callback, counted when the send completed; an
	 *  eager one without, when posted (a rendezvous one at the peer's
	 *  FIN; after a device refused WRs in the error state, every message
	 *  when it completed) */
	uint64_t msgs_sent, msgs_recv;
	uint64_t bytes_sent, bytes_recv;
	uint64_t rndv_sent, rndv_recv;
	uint64_t credit_updates;   /**< explicit credit messages sent */
	uint64_t cq_resizes;	   /**< CQ grown (resize or extra CQ) */
	uint64_t keepalive_probes; /**< keepalive probes sent */
	uint32_t conns;		   /**< open connections */
	uint32_t cq_count;	   /**< CQs in use */
	uint32_t cq_capacity;	   /**< total CQEs of all CQs */
	uint32_t cq_reserved;	   /**< CQEs the open QPs may need */
	enum evr_mode mode;	   /**< mode in effect now */
	/** Bytes the ctx holds registered (pinned): message pool, receive
	 *  buffers of rendezvous messages, the rendezvous sources it
	 *  registered, evr_mr_reg() regions. */
	uint64_t reg_bytes;
	/** Of which the message buffer pool (eager sends and receives). */
	uint64_t pool_bytes;
	/** The locked-memory limit registration lives in (RLIMIT_MEMLOCK,
	 *  bytes); UINT64_MAX when there is none (unlimited, or
	 *  CAP_IPC_LOCK). */
	uint64_t memlock_limit;
	/** The shared receive queue (zero when the ctx has none): buffers
	 *  the pool owns, of which posted now, and credits lent out of them
	 *  to peers (never more than posted: no RNR). */
	uint32_t srq_buffers, srq_posted, srq_lent;
	/** Connections refused for want of receive buffers (-ENOBUFS). */
	uint32_t srq_refused;
	/** Credits lent beyond a return (windows grown), and returns not
	 *  re-granted (windows shrunk). */
	uint64_t srq_grown, srq_withheld;
	/** Registered bytes of the shared receive pool's srq_buffers (part
	 *  of pool_bytes): what every connection's receive windows share. */
	uint64_t srq_bytes;
	/** The library's own memory per open connection, in bytes (its
	 *  state; librdmacm's id, the provider's QP and the kernel's come on
	 *  top, and with a receive queue per connection its recv_depth
	 *  buffers of the pool). */
	uint32_t conn_bytes;
	/** The idle cycle (evr_ctx_opts.window_idle_ms): credits our
	 *  connections gave back to their peers' pools, and the times they
	 *  asked for a window again; with a shared receive queue, credits
	 *  our peers gave back to it (reclaimed for other connections). */
	uint64_t window_given, window_asks, srq_reclaimed;
	/** How peers read rendezvous sources in regions and the cache, and
	 *  the memory windows bound for that so far. */
	enum evr_rndv_access rndv_access;
	uint64_t rndv_windows;
	/** Completions taken by ADAPTIVE's spin after a post, each without a
	 *  wakeup (evr_ctx_opts.adapt_spin_us). */
	uint64_t spin_hits;
	/** Calls (evr_call): made, and ended with a reply, at the deadline,
	 *  by evr_call_cancel(); replies and rendezvous finishes that came
	 *  for calls no longer in flight (dropped); requests delivered to
	 *  on_request, and those the caller gave up before they were
	 *  answered (not delivered when not yet read); requests that came
	 *  to a conn without on_request (dropped).  A call its conn's end
	 *  ended counts in calls only; a request cancelled after its
	 *  delivery counts in both requests and requests_cancelled. */
	uint64_t calls, calls_ok, calls_expired, calls_cancelled;
	uint64_t late_replies;
	uint64_t requests, requests_cancelled, requests_unserved;
	/** Of msgs_sent: replies that went the direct way -- small,
	 *  without a callback, sent by evr_send() or evr_reply() from a
	 *  callback delivering a message on the same connection, which has
	 *  nothing queued: posted at once, inline and without the send
	 *  queue's machinery. */
	uint64_t direct_sends;
	/** Eager messages prepared to go without a copy, with a callback of
	 *  their own: from the receive buffer of a message held
	 *  (evr_conn_hold) in the callback that sent them, or from inside an
	 *  evr_mr_reg() region; above the inline size, between peers whose
	 *  messages carry their headers in immediate data (counted when
	 *  built, so also those that then fail). */
	uint64_t zero_copy_sends;
};

EVR_EXPORT void evr_ctx_stats(const evr_ctx *ctx, struct evr_stats *out);
/** Write *st as one line of JSON, an object of every field under its name
 *  (mode and rndv_access as words, memlock_limit null for no limit),
 *  NUL-terminated, into buf of len bytes.  Returns the line's length
 *  without the NUL, as snprintf(3): len or more means it was cut short;
 *  buf NULL with len 0 only counts.  -EINVAL for st NULL, or buf NULL
 *  with len > 0.  Pure: any thread, on a copy evr_ctx_stats() made. */
EVR_EXPORT int evr_stats_json(const struct evr_stats *st, char *buf,
			      size_t len);

/** Called on each switch ADAPTIVE makes (from loop processing), not for
 *  evr_ctx_set_mode(). */
typedef void (*evr_mode_cb)(evr_ctx *ctx, enum evr_mode now, void *arg);
EVR_EXPORT void evr_ctx_on_mode_switch(evr_ctx *ctx, evr_mode_cb cb, void *arg);

/**
 * Run the private loop until evr_ctx_stop() is called (the ctx's watchers
 * keep it running: it does not return because nothing is left to do).
 * -EINVAL for a ctx on a user loop (run that loop instead).
 */
EVR_EXPORT int evr_ctx_run(evr_ctx *ctx);
/** Make evr_ctx_run() return after the current iteration. */
EVR_EXPORT void evr_ctx_stop(evr_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Embedding in another event loop (epoll, poll, libuv, ...)                */

/*
 * For a ctx created with loop == NULL.  The contract, as for libuv's
 * uv_backend_fd() and UCX's ucp_worker_arm():
 *
 *   fd = evr_ctx_fd(ctx);            // once; add it to your poller (EPOLLIN)
 *   for (;;) {
 *       t = evr_ctx_timeout_ms(ctx); // 0: do not sleep; -1: no deadline
 *       wait for fd readable or t ms, merged with your own timeout;
 *       evr_ctx_process(ctx);        // never blocks
 *   }
 *
 * The fd becomes readable whenever a completion, rdma_cm event or device
 * event is waiting.  evr_ctx_process() drains everything that is ready (so
 * the fd is no longer readable when it returns unless something new came)
 * and re-arms the CQs with the arm-then-poll sequence, so a completion that
 * races the arm is either handled in that call or makes the fd readable
 * again: the contract holds with level- and edge-triggered epoll alike.
 * Work the library cannot do from the fd -- sends submitted from outside
 * its callbacks, POLL mode, rdma_cm events beyond the batch one call
 * handles (a connection storm must not hold up completions), and its timers
 * (connect and graceful-close bounds, keepalive) -- shows in
 * evr_ctx_timeout_ms() returning 0 or the time to the next deadline: always
 * call it right before sleeping, after all your own calls into the
 * library, and sleep no longer than it says, or timers fire late.
 */

/** The ctx's poll fd (-EINVAL for a ctx on a user libev loop).  Owned by
 *  the ctx: do not close it; remove it from your poller before
 *  evr_ctx_destroy(). */
EVR_EXPORT int evr_ctx_fd(evr_ctx *ctx);
/** Handle everything that is ready, without blocking.  Callbacks fire from
 *  here.  Returns 0 or a negative errno. */
EVR_EXPORT int evr_ctx_process(evr_ctx *ctx);
/** How long the host loop may sleep: 0 (call evr_ctx_process() again
 *  right away), a positive number of ms until the next deadline of the
 *  ctx (rounded up) -- the earliest of every conn's connect bound, graceful
 *  close bound, flush bound and keepalive tick, and of every call's
 *  deadline -- or -1 (no deadline: until
 *  the fd is readable).  An idle conn with keepalive on has a tick every
 *  keepalive_ms / 2, and one whose peer lends it a window a tick every
 *  window_idle_ms. */
EVR_EXPORT int evr_ctx_timeout_ms(evr_ctx *ctx);

/* ------------------------------------------------------------------------ */
/* Connections                                                              */

/** Connection established (status 0) or failed (negative errno).  When
 *  status < 0 the conn handle is freed as soon as this returns and no
 *  other callback of it fires. */
typedef void (*evr_connect_cb)(evr_conn *conn, int status, void *arg);

/** A whole message.  data is valid only during the call unless the
 *  callback takes it with evr_conn_hold(). */
typedef void (*evr_recv_cb)(evr_conn *conn, const void *data, size_t len,
			    void *arg);

/** The peer wrote with immediate data (evr_write_imm). */
typedef void (*evr_imm_cb)(evr_conn *conn, uint32_t imm, void *arg);

/** The last callback of an established conn: fired exactly once, after
 *  every pending operation's callback, when the conn ends -- status 0 after
 *  a graceful evr_conn_close(), -ECANCELED after an abort, -ESHUTDOWN when
 *  the peer closed gracefully (everything it sent was delivered first),
 *  -ECONNRESET when the peer went away without closing (it aborted, died
 *  or was destroyed; also when a send in flight learns of it first, from
 *  the remote error of a peer whose end is being torn down), or the error
 *  that killed it (-EPROTO, -EIO, -ETIMEDOUT: a graceful close ran past
 *  close_timeout_ms, or a keepalive probe went unanswered, ...).  -EIO is
 *  also what every conn on a completion queue gets when polling that queue
 *  fails (logged as an error; the ctx's other queues go on): its
 *  operations complete with -EIO at once, except those whose work requests
 *  are on the device: they complete with -ECANCELED a few seconds later,
 *  when their flushes can no longer be awaited, and then on_close (or
 *  on_connect, for a conn still connecting) fires with -EIO.  The handle
 *  is freed when it returns. */
typedef void (*evr_close_cb)(evr_conn *conn, int status, void *arg);

/** Queued send bytes fell to or below the low-watermark after the queue had
 *  reached the limit (an evr_send returned -ENOBUFS). */
typedef void (*evr_drain_cb)(evr_conn *conn, void *arg);

typedef struct evr_request evr_request;

/** A call's request arrived (the serving side, evr_conn_opts.on_request):
 *  req is the handle to answer it with (evr_reply) or drop it with
 *  (evr_request_drop), exactly once, from here or any time later.  data
 *  is valid only during the call unless evr_conn_hold() takes it. */
typedef void (*evr_request_cb)(evr_conn *conn, evr_request *req,
			       const void *data, size_t len, void *arg);

/* Growable like evr_ctx_opts (see there). */
struct evr_conn_opts {
	/** sizeof(struct evr_conn_opts) as the caller was built: set by
	 *  evr_conn_opts_init(), do not change it. */
	size_t size;
	evr_connect_cb on_connect;
	evr_recv_cb on_recv;
	evr_imm_cb on_imm;
	evr_close_cb on_close;
	evr_drain_cb on_drain;
	void *arg; /**< passed to every callback of the conn */
	/** User bytes sent with the connect request (evr_connect only). */
	const void *user_data;
	size_t user_len;     /**< at most EVR_MAX_USER_DATA */
	unsigned timeout_ms; /**< connect bound; 0: the ctx default */
	/** Keepalive idle time for this conn in ms, in place of the ctx's
	 *  keepalive_ms: 0 takes the ctx's, -1 turns keepalive off. */
	int keepalive_ms;
	/** Calls (evr_call): requests that arrive are handed here.  A conn
	 *  accepted with it set agrees to calls when the connecting side
	 *  offers them (evr_connect always does); one without refuses them,
	 *  and evr_call on either end returns -EOPNOTSUPP. */
	evr_request_cb on_request;
	/** Calls of this conn in flight at most (evr_call returns -ENOBUFS
	 *  beyond, then on_drain fires when one ends); 0: 256.  At most
	 *  65536: evr_connect() and the accepts refuse more with -EINVAL. */
	unsigned max_calls;
};

/** Zero opts and record sizeof(*opts) in opts->size, as compiled into the
 *  caller.  Always call it before setting fields. */
EVR_EXPORT void evr_conn_opts_init_sz(struct evr_conn_opts *opts, size_t size);
static inline void evr_conn_opts_init(struct evr_conn_opts *opts)
{
	evr_conn_opts_init_sz(opts, sizeof(*opts));
}

/**
 * Connect to host:port (a numeric IPv4 or IPv6 address: names are not
 * resolved, nothing in the library blocks; -EINVAL) through rdma_cm.
 * opts->on_connect fires once with 0 or: -ECONNREFUSED (no listener, or the
 * peer rejected: see evr_conn_reject_reason()), -ETIMEDOUT, -EHOSTUNREACH,
 * -EADDRNOTAVAIL / -ENETUNREACH (address or route resolution), -ENODEV (the
 * address is on another device than the ctx's), -EPROTO (peer answered
 * with a bad handshake).  *out (may be NULL) receives the handle, owned
 * by the library; it is valid until on_connect fails or on_close returns.
 * Sends may be issued before the connection is up; they are queued.
 * opts NULL: no callbacks, the defaults; -EINVAL for opts never
 * initialised (size 0), -E2BIG for fields this library does not know.
 */
EVR_EXPORT int evr_connect(evr_ctx *ctx, const char *host, uint16_t port,
			   const struct evr_conn_opts *opts, evr_conn **out);

/** evr_conn_close() flags. */
#define EVR_CLOSE_ABORT 1u /**< do not flush: pending ops get -ECANCELED */

/**
 * Close a connection.  Graceful by default: queued and in-flight sends
 * complete first, then on_close fires with 0.  This is bounded by
 * close_timeout_ms from this call: past it the conn is aborted, sends
 * still queued complete with -ETIMEDOUT and on_close fires with
 * -ETIMEDOUT (the peer, told nothing, sees -ECONNRESET).  EVR_CLOSE_ABORT
 * ends it at once: pending operations and on_close get -ECANCELED.
 * on_close (or, for a conn still connecting, on_connect with -ECANCELED)
 * fires later.
 * Safe from inside any callback.  -EALREADY if already closing.
 */
EVR_EXPORT int evr_conn_close(evr_conn *conn, unsigned flags);

/** The arg the conn's callbacks get: opts->arg at first; settable (e.g.
 *  from on_connect, for a conn accepted with a shared opts). */
EVR_EXPORT void *evr_conn_arg(const evr_conn *conn);
EVR_EXPORT void evr_conn_set_arg(evr_conn *conn, void *arg);

/** Reject reason bytes of a refused connect, valid during on_connect. */
EVR_EXPORT const void *evr_conn_reject_reason(const evr_conn *conn,
					      size_t *len);

/** Negotiated limits and state, for diagnostics. */
struct evr_conn_info {
	size_t peer_max_msg;	/**< largest message the peer accepts */
	size_t peer_eager_size; /**< largest eager payload the peer accepts */
	unsigned peer_recv_depth;
	unsigned send_credits; /**< credits available now */
	size_t queued_bytes;   /**< bytes waiting in the send queue */
	const char *state;     /**< state name, for logs */
	/** Credits we lend the peer now (its window): our recv_depth with a
	 *  receive queue per connection; with the shared one it moves between
	 *  a few and recv_depth (docs/credits.md). */
	unsigned recv_window;
	int srq; /**< 1: our receives come from the ctx's shared pool */
};
EVR_EXPORT int evr_conn_info(const evr_conn *conn, struct evr_conn_info *out);
/**
 * A connection's peer address (IP address and rdma_cm port) and its own,
 * as getpeername()/getsockname() give them: up to *len bytes of the
 * address are copied to addr and *len is set to its size (that of a
 * struct sockaddr_in or sockaddr_in6; a struct sockaddr_storage holds
 * either).  -ENOTCONN before a connecting conn has resolved its peer and
 * after the conn has closed; -EINVAL on NULL arguments.
 */
EVR_EXPORT int evr_conn_peer_addr(const evr_conn *conn, struct sockaddr *addr,
				  socklen_t *len);
EVR_EXPORT int evr_conn_local_addr(const evr_conn *conn, struct sockaddr *addr,
				   socklen_t *len);

/* ------------------------------------------------------------------------ */
/* Listening                                                                */

/**
 * An incoming connection request, valid only during the accept callback.
 * The callback must answer it with evr_accept() or evr_reject(); if it
 * does neither, the request is rejected.
 */
typedef void (*evr_accept_cb)(evr_listener *l, evr_conn_req *req,
			      const void *user_data, size_t user_len,
			      void *arg);

/**
 * Listen on host:port (host NULL or "0.0.0.0" or "::" for any).  port 0
 * picks a free port: see evr_listener_port().  backlog: connect requests
 * that may wait in the kernel for the accept callback; 0 or less takes
 * evr_ctx_opts.listen_backlog.  The loop hands a bounded batch of
 * requests to the callback per iteration, so completions keep flowing
 * under a burst of thousands of connects.  A request that cannot be taken
 * (bad handshake, wrong device, the callback answered nothing, setting up
 * its connection failed) is rejected with a reason, never left to time
 * out: the client sees -ECONNREFUSED.  On success *out is owned by the
 * caller until evr_listener_close().
 */
EVR_EXPORT int evr_listen(evr_ctx *ctx, const char *host, uint16_t port,
			  int backlog, evr_accept_cb cb, void *arg,
			  evr_listener **out);
EVR_EXPORT uint16_t evr_listener_port(const evr_listener *l);
/** Stop listening and free the listener (synchronous; no callback).
 *  Requests not yet handed to the accept callback are refused.  May be
 *  called from the accept callback: the request in hand can still be
 *  answered with evr_accept() or evr_reject(). */
EVR_EXPORT void evr_listener_close(evr_listener *l);

/**
 * Accept a request with the given callbacks (on_connect fires once the
 * connection is established, or with an error).  *out (may be NULL)
 * receives the handle, as for evr_connect().  opts as for evr_connect().
 * On an error the request has been refused (-ENOBUFS: the shared receive
 * pool cannot lend the connection its first window; the client reads
 * the reason "no receive buffers").
 */
EVR_EXPORT int evr_accept(evr_conn_req *req, const struct evr_conn_opts *opts,
			  evr_conn **out);

/**
 * Accept a request on another ctx, target, owned by another thread: one
 * listener, connections spread over worker ctxs.  Call it in the accept
 * callback, as evr_accept().  The connection is made on target's thread,
 * on its device binding, PD, CQs and receive pool, and every callback of
 * it (opts->on_connect first) fires there.  If making it fails there, the
 * request is refused and on_connect fires there with a NULL conn and the
 * error.  target == the listener's ctx is evr_accept().  0, or -EINVAL,
 * -ENOMEM, or the error of moving the request to target's event channel
 * (rdma_migrate_id); then the request is still the callback's to answer.
 * The target must outlive the call (it is queued as by evr_ctx_call).
 */
EVR_EXPORT int evr_accept_on(evr_conn_req *req, evr_ctx *target,
			     const struct evr_conn_opts *opts);
/** Where a request comes from, during the accept callback: as
 *  evr_conn_peer_addr().  The handshake authenticates nothing: use the
 *  address (and the user bytes) for policy, the network for isolation. */
EVR_EXPORT int evr_conn_req_peer_addr(const evr_conn_req *req,
				      struct sockaddr *addr, socklen_t *len);
/** Reject a request; the connector sees -ECONNREFUSED and these bytes (its
 *  log shows them).  len is at most EVR_MAX_USER_DATA (32).  0, or
 *  -EINVAL (req NULL or answered already, len above the limit, reason NULL
 *  with len > 0), or the error of rdma_reject(). */
EVR_EXPORT int evr_reject(evr_conn_req *req, const void *reason, size_t len);

/* ------------------------------------------------------------------------ */
/* Messages                                                                 */

/** Completion of a send or one-sided operation. */
typedef void (*evr_op_cb)(evr_conn *conn, int status, void *arg);

/** Messages of at most this many bytes are copied by evr_send() and
 *  evr_sendv() before they return (as libfabric's fi_inject does): the
 *  caller's buffer is free at once. */
#define EVR_SEND_COPY_MAX 64

/**
 * Send one message of len bytes (0 .. the peer's maximum).  The buffer is
 * the caller's and must stay valid and unchanged until cb fires (large
 * messages are read from it by the peer) -- unless len is at most
 * EVR_SEND_COPY_MAX: such a message is copied before evr_send returns,
 * and the buffer may be reused at once; from on_recv, the received bytes
 * themselves may be sent back without evr_conn_hold().  cb may be NULL:
 * the cheapest send (its completion is not polled for one by one), but
 * then nothing tells when the buffer is free again (a copied message's
 * is free at once).  cb and the peer's answer are not
 * ordered: a reply to this message may be delivered before cb fires.
 * Errors:
 * -EMSGSIZE (too large for the peer), -ENOBUFS (the send queue holds
 * send_queue_limit bytes; wait for on_drain), -EPIPE (closing or closed),
 * -ENOMEM.  Messages are delivered in order, whole, exactly once.
 */
EVR_EXPORT int evr_send(evr_conn *conn, const void *buf, size_t len,
			evr_op_cb cb, void *arg);
/** Vectored evr_send: the iovecs are gathered into one message; the
 *  iov array may be reused at once, the buffers it points to may not
 *  (unless the message is at most EVR_SEND_COPY_MAX bytes: gathered before
 *  evr_sendv returns). */
EVR_EXPORT int evr_sendv(evr_conn *conn, const struct iovec *iov, int iovcnt,
			 evr_op_cb cb, void *arg);

/**
 * Thread-safe evr_send: from any thread, for a conn the caller holds a
 * reference to (evr_conn_ref) or whose ctx it owns.  The len bytes are
 * copied (buf may be reused at once); the send is made on the conn's
 * thread, after the evr_send_mt() calls queued before it (a thread's
 * messages on one conn go out in its order), and cb (may be NULL) fires
 * there, exactly once, as for evr_send -- also with -EPIPE when the conn
 * has ended by then, or -EMSGSIZE when the peer's maximum is below len.
 * The send queue limit does not apply (the copy is made already).  Returns
 * 0, or -EINVAL, -EMSGSIZE (above the ctx's max_msg_size), -ENOMEM; then
 * cb never fires.
 */
EVR_EXPORT int evr_send_mt(evr_conn *conn, const void *buf, size_t len,
			   evr_op_cb cb, void *arg);

/**
 * Thread-safe.  Keep the conn's handle valid past on_close, for another
 * thread that will send on it (evr_send_mt) or look at it: the memory stays
 * until evr_conn_unref() drops the last reference.  Call it on the ctx's
 * thread (e.g. in on_recv, before handing the conn to a worker) or while
 * holding a reference already.  Only evr_send_mt() and evr_conn_unref()
 * may be called on a conn that has ended, and only evr_conn_unref() once
 * its ctx is destroyed.  Returns conn.
 */
EVR_EXPORT evr_conn *evr_conn_ref(evr_conn *conn);
/** Thread-safe.  Drop a reference taken with evr_conn_ref(). */
EVR_EXPORT void evr_conn_unref(evr_conn *conn);

/**
 * Keep the message being delivered past its callback (call only from
 * on_recv, on_request, or a call's callback with status 0 for its
 * reply).  Its memory stays valid, and its receive credit stays
 * with this side, until evr_msg_release().  The handle outlives the conn.
 * Called again in the same callback: the same handle, or NULL once that
 * callback has released it (its bytes went back with it).  NULL when
 * called outside on_recv, or out of memory.  Its bytes, sent
 * back on the same conn by evr_send() with a callback from the callback
 * that held it (release it in the send's callback), go from its receive
 * buffer without a copy when the peers agreed to headers in immediate
 * data and the message is eager, above the QP's inline size and carries
 * no FIN (evr_stats.zero_copy_sends); smaller ones are copied by the
 * post, others into a pool buffer.
 */
EVR_EXPORT evr_msg *evr_conn_hold(evr_conn *conn);
EVR_EXPORT const void *evr_msg_data(const evr_msg *msg);
EVR_EXPORT size_t evr_msg_len(const evr_msg *msg);
/** Release a held message; the buffer returns to the receive ring. */
EVR_EXPORT void evr_msg_release(evr_msg *msg);

/* ------------------------------------------------------------------------ */
/* Calls: request/response with deadlines and cancellation (docs/calls.md)  */

/** A call in flight on its conn (not 0). */
typedef uint32_t evr_call_id;

/** The end of a call, exactly once: status 0 with the reply (valid during
 *  the callback; evr_conn_hold() keeps it), -ETIMEDOUT at the deadline,
 *  -ECANCELED after evr_call_cancel(), or the connection's error when it
 *  ends first (as on_close reports it; -ECANCELED after a graceful
 *  evr_conn_close(), which does not wait for replies).  When it fires, no
 *  send of the request is left and no read of it by the peer can still
 *  come: its buffer is the caller's again. */
typedef void (*evr_call_cb)(evr_conn *conn, int status, const void *reply,
			    size_t len, void *arg);

/**
 * Send req (len bytes, any size up to the peer's max_msg_size) as a call
 * and fire cb when it ends.  req must stay valid and unchanged until cb
 * fires.  timeout_ms bounds the whole exchange (0: no deadline): the
 * deadline fires from the ctx's timers, as punctual as the loop is (a
 * pass that takes many completions runs them after), but a reply that
 * comes after it ends the call with -ETIMEDOUT all the same; *id (may
 * be NULL) receives the call's id for evr_call_cancel().  Calls and
 * messages share the conn; a call's request keeps its place among the
 * messages sent.  0, or: -EINVAL (no conn, no cb, req NULL with len),
 * -ENOTCONN (not established), -EPIPE (closing), -EOPNOTSUPP (the peer
 * did not agree to calls, or this side, accepting, has no on_request),
 * -EMSGSIZE (above the peer's max_msg_size), -ENOBUFS (max_calls in
 * flight, or the send queue limit: on_drain follows), -ENOMEM; then cb
 * never fires.
 */
EVR_EXPORT int evr_call(evr_conn *conn, const void *req, size_t len,
			unsigned timeout_ms, evr_call_cb cb, void *arg,
			evr_call_id *id);

/**
 * Give up a call: its cb fires with -ECANCELED -- at once (inside this
 * call) when its request was not posted, went eagerly (copied when
 * posted) or its rendezvous is over, else once the request's send and
 * the peer's read of it are over (the deadline does not bound that
 * wait: a peer that never finishes the read holds it until the conn
 * ends, by keepalive or the retry bound if the peer is dead).  A
 * request that was sent is cancelled at the peer too: it does not read
 * what it has not started to read, does not deliver what it has not
 * delivered, and its evr_reply() to one delivered returns -ECANCELED.  A reply
 * that comes later is counted (late_replies) and dropped.  -ENOENT for a call
 * that already ended or was cancelled (nothing changes), -EINVAL without a
 * conn.
 */
EVR_EXPORT int evr_call_cancel(evr_conn *conn, evr_call_id id);

/**
 * Answer a request (any size up to the caller's max_msg_size; buf must
 * stay valid until cb fires, as for evr_send, unless len is at most
 * EVR_SEND_COPY_MAX: copied at once; cb may be NULL).  The
 * handle is spent whatever this returns (but -EINVAL for req NULL): 0, or
 * -ENOTCONN (the conn ended or is closing), -ECANCELED (the caller gave
 * up), -EINVAL (buf NULL with len), -EMSGSIZE, -ENOMEM -- nothing is sent
 * then, and the caller's deadline ends its call.  A reply is not held to
 * the send queue limit (the caller's max_calls bounds replies).  Handles
 * must be spent before the ctx is destroyed.
 */
EVR_EXPORT int evr_reply(evr_request *req, const void *buf, size_t len,
			 evr_op_cb cb, void *arg);
/** Spend a request handle without answering (the caller's deadline, or
 *  its cancel, ends its call). */
EVR_EXPORT void evr_request_drop(evr_request *req);
/** The conn a request came on.  Its memory lives as long as the handle;
 *  once the conn has ended (evr_reply says -ENOTCONN) only what
 *  evr_conn_ref() allows on an ended conn may be called on it. */
EVR_EXPORT evr_conn *evr_request_conn(const evr_request *req);

/* ------------------------------------------------------------------------ */
/* Registered memory and one-sided operations                               */

/** Local use only: the peer can touch nothing of it.  Enough for a send's
 *  source, evr_read()'s destination and the atomics' result word (regions
 *  are always registered for local writes). */
#define EVR_ACCESS_LOCAL	 0u
#define EVR_ACCESS_REMOTE_READ	 1u
#define EVR_ACCESS_REMOTE_WRITE	 2u
#define EVR_ACCESS_REMOTE_ATOMIC 4u

/** Register [addr, addr+len) with the ctx's PD.  The memory stays the
 *  caller's; it must outlive the registration.  An eager message sent
 *  with a callback from inside a region (any access) goes from there
 *  without a copy, where the peers agreed to headers in immediate data
 *  and it is above the inline size (evr_stats.zero_copy_sends); the
 *  region is busy from its post until the callback.  A region with
 *  EVR_ACCESS_REMOTE_READ is also a zero-copy source of rendezvous
 *  messages where the device's memory windows bound reads
 *  (evr_stats.rndv_access EVR_RNDV_WINDOW; the region is then registered
 *  with the right to bind windows): a message sent from inside it is read
 *  by the peer through a window over exactly its bytes, never through the
 *  region's rkey.  Elsewhere such a message is registered for its send
 *  like one from ordinary memory. */
EVR_EXPORT int evr_mr_reg(evr_ctx *ctx, void *addr, size_t len, unsigned access,
			  evr_mr **out);
/** Deregister; -EBUSY while operations that use it are pending. */
EVR_EXPORT int evr_mr_dereg(evr_mr *mr);
EVR_EXPORT void *evr_mr_addr(const evr_mr *mr);
EVR_EXPORT size_t evr_mr_len(const evr_mr *mr);

/** What a peer needs to access a region: pass it in a message. */
struct evr_rkey {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
};
#define EVR_RKEY_PACKED_SIZE 20

EVR_EXPORT void evr_mr_rkey(const evr_mr *mr, struct evr_rkey *out);
/** Byte-order independent encoding for the wire, EVR_RKEY_PACKED_SIZE
 *  bytes, all little endian: addr (8 bytes) | len (8) | rkey (4). */
EVR_EXPORT void evr_rkey_pack(const struct evr_rkey *rk,
			      uint8_t out[EVR_RKEY_PACKED_SIZE]);
EVR_EXPORT void evr_rkey_unpack(struct evr_rkey *rk,
				const uint8_t in[EVR_RKEY_PACKED_SIZE]);

/*
 * One-sided operations.  Bounds are checked against both regions before
 * anything is posted (-ERANGE).  The peer's device checks its region's
 * flags (EVR_ACCESS_REMOTE_*), key and range: an operation they do not
 * allow fails with -EACCES in its cb, and ends the connection (the QP goes
 * to the error state: what is queued behind fails with -EACCES, on_close
 * gets -EACCES, and the peer's end closes with an error).  The calls
 * return 0 (cb then fires once), or: -EINVAL (a NULL argument, lmr of
 * another ctx; atomics: loff or the remote word not 8-aligned), -EPIPE
 * (the conn is closing or closed), -ERANGE, -EMSGSIZE (len above what the
 * port carries in one message), -EOPNOTSUPP (atomics on a device without
 * them), -ENOMEM.
 */

/**
 * RDMA WRITE len bytes from lmr+loff to the peer's region rk at roff.
 * cb fires once when the write is complete at the peer (or failed).
 */
EVR_EXPORT int evr_write(evr_conn *conn, evr_mr *lmr, size_t loff,
			 const struct evr_rkey *rk, uint64_t roff, size_t len,
			 evr_op_cb cb, void *arg);
/** RDMA WRITE with immediate data: the peer's on_imm fires with imm after
 *  the data is in place.  Uses a receive credit like a send. */
EVR_EXPORT int evr_write_imm(evr_conn *conn, evr_mr *lmr, size_t loff,
			     const struct evr_rkey *rk, uint64_t roff,
			     size_t len, uint32_t imm, evr_op_cb cb, void *arg);
/** RDMA READ len bytes of the peer's region rk at roff into lmr+loff. */
EVR_EXPORT int evr_read(evr_conn *conn, evr_mr *lmr, size_t loff,
			const struct evr_rkey *rk, uint64_t roff, size_t len,
			evr_op_cb cb, void *arg);
/** Atomic fetch-and-add on the 8-byte word at rk+roff (8-aligned); the
 *  old value lands in lmr+loff (8 bytes, host order). */
EVR_EXPORT int evr_fetch_add(evr_conn *conn, evr_mr *lmr, size_t loff,
			     const struct evr_rkey *rk, uint64_t roff,
			     uint64_t add, evr_op_cb cb, void *arg);
/** Atomic compare-and-swap on the 8-byte word at rk+roff (8-aligned): if
 *  it equals compare it becomes swap; the old value lands in lmr+loff
 *  either way (8 bytes, host order). */
EVR_EXPORT int evr_cmp_swap(evr_conn *conn, evr_mr *lmr, size_t loff,
			    const struct evr_rkey *rk, uint64_t roff,
			    uint64_t compare, uint64_t swap, evr_op_cb cb,
			    void *arg);

#ifdef __cplusplus
}
#endif
#endif /* EVRDMA_H */
