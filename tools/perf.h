/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf.h: what the files of evrdma-perf share -- limits, the wire format
 * of a test request and of a report, the options and results of a
 * measurement, the client's per-connection state, and the functions one
 * file calls in another.
 *
 * The files: evrdma-perf.c (command line, main), perf-common.c (wire
 * encoding, clocks, CPU time, latency samples), perf-server.c (the server),
 * perf-client.c (the client: one measurement from connect to close, its
 * timers), perf-msg.c (the message tests lat, bw and rate, and the call
 * test rpc), perf-conn.c (the connection-rate test), perf-output.c (a
 * result's figures and their table, CSV and JSON forms).
 */
#ifndef EVRDMA_PERF_H
#define EVRDMA_PERF_H

#include <ev.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <evrdma.h>

#define PERF_PORT 7472
#define MAX_SIZES 64
#define MAX_MSG (64u << 20)	/* the library's default max_msg_size */
#define LIGHT_RATE 200		/* --load light: ping-pongs per second per
				   connection, unless --rate */
#define STALL_S 30.0		/* no progress for this long: give up */
#define PROGRESS_AFTER_S 3.0	/* runs longer than this print progress */

/* ------------------------------------------------------------------------ */
/* Wire: connect user bytes and reports                                     */

/* What the server does with a connection (connect user byte 4). */
enum kind {
	K_ECHO = 1, /* send every message back */
	K_SINK = 2, /* count messages, answer report requests only */
	K_CONN = 3, /* connect and close, no traffic */
};

#define DESC_LEN 6 /* "EVP1", kind, mode */
extern const char desc_magic[4];

#define REPORT_LEN 56
#define REPORT_MAGIC 0x52505645u /* "EVPR" little endian */

struct report {
	uint64_t msgs, bytes;	/* received on this connection */
	uint64_t cpu_us;	/* server process user + system time */
	uint64_t t_ns;		/* server CLOCK_MONOTONIC */
	uint64_t switches;	/* server ctx mode switches */
	uint64_t wakeups;	/* server ctx completion-channel wakeups */
};

/* -t rpc: every connection serves calls (evr_call); the server answers a
 * request at once with as many bytes, or RPC_DELAY_MS later when its first
 * byte is RPC_DELAY_BYTE (the client gives those calls RPC_EXPIRE_MS). */
#define RPC_DELAY_BYTE 0xde
#define RPC_DELAY_MS 20
#define RPC_EXPIRE_MS 1

/* ------------------------------------------------------------------------ */
/* Client: options and results                                              */

enum test { T_LAT, T_BW, T_RATE, T_CONN, T_RPC };
#define T_COUNT (T_RPC + 1)
extern const char *const test_str[];

enum load { L_NONE, L_IDLE, L_LIGHT, L_SAT };
extern const char *const load_str[];

enum fmt { F_TABLE, F_JSON, F_CSV };

struct opts {
	const char *addr;
	int port;
	enum test test;
	enum load load;
	size_t sizes[MAX_SIZES];
	int nsizes;
	uint64_t iters; /* per connection (conn: connections in all) */
	double secs;	/* 0: count-based */
	unsigned window, conns;
	bool burst;	/* conn: all CONNS at once, held until all are up */
	double rate;	/* --load light: pings per second per connection */
	unsigned ramp;	/* message tests: connects outstanding; 0: all */
	int mode;
	enum fmt fmt;
	bool mt;	/* bw, rate: send from another thread (evr_send_mt) */
	bool send_cb;	/* lat only: each message with a send callback */
	unsigned threads; /* client threads, each a ctx (0, 1: one) */
	/* rpc: percent of the calls cancelled right after evr_call, and
	 * made with an RPC_EXPIRE_MS deadline against a delayed answer */
	unsigned rpc_cancel, rpc_expire;
};

/* One row of output. */
/* The verbs traffic counted per message (struct result's traffic). */
enum traffic { TR_POSTS, TR_SEND_WRS, TR_RECV_WRS, TR_UPDATES, TR_WCS, TR_N };

struct result {
	enum test test;
	enum load load;
	int mode;
	size_t size;
	unsigned conns, window;
	uint64_t msgs;
	double secs;
	double lat_med, lat_p99, lat_p999; /* us; NAN when not measured */
	double msg_s, mb_s;
	double cpu_us_msg, cpu_pct;	  /* client */
	double srv_cpu_us_msg, srv_cpu_pct; /* NAN when not known */
	uint64_t switches, srv_switches, wakeups;
	uint64_t skipped; /* --load light: pings not sent, the last one out */
	/* the client ctx's verbs traffic per message (NAN in conn): what the
	 * protocol costs, independent of time (evr_stats; names: perf-output.c
	 * traffic_name) */
	double traffic[TR_N];
};

/* ------------------------------------------------------------------------ */
/* Client: one measurement                                                  */

/* Per-connection state machine of a measurement. */
enum phase {
	PH_IDLE,	/* not started */
	PH_CONNECTING,
	PH_WARMUP,	/* echo tests: unmeasured ping-pongs */
	PH_BASE,	/* waiting for the baseline report */
	PH_READY,	/* waiting for the other connections */
	PH_RUN,
	PH_DRAIN,	/* no new sends; waiting for the outstanding echoes */
	PH_FINAL,	/* waiting for the final report */
	PH_DONE,
	PH_CLOSING,
	PH_CLOSED,
};

struct perf;

/* -t rpc: how a call is made, and what must end it. */
enum rpc_how {
	RPC_PLAIN,  /* answered: status 0, p->size bytes back */
	RPC_CANCEL, /* cancelled at once: -ECANCELED */
	RPC_EXPIRE, /* answered too late: -ETIMEDOUT */
};

/* -t rpc: a call in flight, in its connection's window. */
struct rpc_slot {
	struct pconn *pc;
	ev_tstamp t; /* when it was made */
	enum rpc_how how;
};

struct pconn {
	struct perf *p;
	evr_conn *conn;
	unsigned idx;
	enum phase ph;
	uint64_t sent, echoed, acked; /* data messages */
	uint64_t warm_left;
	ev_tstamp *t_sent;	/* send time, ring of window entries */
	uint64_t t_conn;	/* conn test: when evr_connect was called */
	struct report base, final;
	/* rpc: the window's slots, those free (a stack), and whether
	 * pump_rpc is on the stack (a call's callback can fire inside
	 * evr_call_cancel) */
	struct rpc_slot *rs;
	unsigned *rfree, nfree;
	bool in_pump;
};

struct perf {
	struct opts o;
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_mr *mr;	/* the send buffer, readable by the peer */
	uint8_t *buf;
	size_t buf_len;
	uint8_t *dbuf;	/* rpc: requests to be answered late (in buf) */
	struct pconn *pc;
	int failed;

	/* the measurement in progress */
	enum kind kind;
	size_t size;
	uint64_t n;	 /* iterations per conn; 0: until stop */
	uint64_t warm;	 /* warm-up ping-pongs per conn */
	unsigned window;
	bool stop;	 /* duration over */
	ev_tstamp tick0; /* --load light: when turn 0 was due */
	double slot_s;	 /* --load light: between two connections' turns */
	uint64_t slot, skipped;
	unsigned nlaunched, nanswered; /* message tests: connects */
	unsigned nready, ndata, ndone, nclosed;
	uint64_t started, finished; /* conn test */
	/* rpc: calls ended; expiring ones answered all the same */
	uint64_t rpc_ok, rpc_cancelled, rpc_expired, rpc_overran;
	bool conn_warm;	 /* conn test: the untimed first connection */
	uint64_t t_begin, t0, t1, cpu0, cpu1;
	struct evr_stats st0, st1;
	double *lat;	 /* half round trips, us */
	size_t nlat, lat_cap;
	uint64_t events, events_seen; /* progress, for stall detection */
	double stall_s;
	bool progress_shown;
	ev_timer stop_w, tick_w, prog_w;

	/* --mt: the thread that sends; p->stop, pc->sent and pc->acked are
	 * then read and written with atomics */
	pthread_t mt_t;
	bool mt_running, mt_done;
	unsigned mt_gen;
	int mt_err;
	pthread_mutex_t mt_mu; /* the sending thread waits for room here */
	pthread_cond_t mt_cv;
	int mt_waiting;	       /* atomic */
	uint64_t mt_loop_cpu0, mt_cpu_ns; /* thread CPU time: loop, sender */

	struct result *res;
	size_t nres;

	/* -T: the threads start each measurement together; each keeps its
	 * latency samples of every size for the merged percentiles */
	struct tstart *tstart;
	double **keep;
	size_t *nkeep;
	pthread_t thread;
	int thread_rc;
};
/* ------------------------------------------------------------------------ */
/* Functions shared between files                                           */

/* perf-common.c */
void report_encode(uint8_t *p, const struct report *r);
int report_decode(const void *data, size_t len, struct report *r);
uint64_t now_ns(void);
ev_tstamp mono_s(void);
int cpu_us(uint64_t *out);
int lat_add(struct perf *p, double us);

/* ctx options either role takes from the command line (0: the library's
 * default) */
struct perf_tune {
	unsigned sq_depth, srq_buffers, window_idle_ms;
	size_t eager_size;
};
extern struct perf_tune perf_tune;
void perf_tune_apply(struct evr_ctx_opts *o);

/* perf-server.c */
#define MAX_THREADS 64
int run_server(const char *addr, int port, int verbose, int threads);

/* perf-client.c */
struct tstart;
int run_client(struct opts *o);
void client_fail(struct perf *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
int client_connect(struct pconn *pc, enum kind kind,
		   evr_connect_cb on_connect, evr_close_cb on_close);
void client_connect_failed(struct pconn *pc, int status);
void run_start(struct perf *p);
void take_end(struct perf *p);
void data_done(struct pconn *pc);
void close_all(struct perf *p);

/* perf-msg.c */
void msg_begin(struct perf *p);
void pump_echo(struct pconn *pc);
void pump_rpc(struct pconn *pc);
void pump_sink(struct pconn *pc);
void msg_end(struct perf *p);
void on_recv(evr_conn *conn, const void *data, size_t len, void *arg);
void on_stop(struct ev_loop *loop, ev_timer *w, int revents);
void on_tick(struct ev_loop *loop, ev_timer *w, int revents);
void on_idle_end(struct ev_loop *loop, ev_timer *w, int revents);

/* perf-conn.c */
void cc_begin(struct perf *p);

/* perf-output.c */
void result_fill(struct perf *p, struct result *r);
void lat_figures(double *v, size_t n, struct result *r);
void emit_row(const struct perf *p, size_t i);
void emit_json(const struct perf *p);

#endif
