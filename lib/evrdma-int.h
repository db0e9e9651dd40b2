/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Internal declarations shared by the library's modules.  Nothing here is
 * exported: internal functions are named evr__* and the shared object only
 * exports evr_* (visibility + version script).
 */
#ifndef EVRDMA_INT_H
#define EVRDMA_INT_H

#include "config.h"

#include <ev.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>

#include "evrdma.h"
#include "adapt.h"
#include "bank.h"
#include "calltab.h"
#include "credit.h"
#include "proto.h"
#include "qpmap.h"
#include "queue.h"
#include "stash.h"
#include "timer.h"
#include "verbs.h"

#define EVR__MIN(a, b) ((a) < (b) ? (a) : (b))
#define EVR__MAX(a, b) ((a) > (b) ? (a) : (b))
#define EVR__CACHELINE 64
/* For a static function on every message's path with one or two callers:
 * its own call (saving and restoring registers, passing arguments) costs
 * ten to thirty instructions a message, which GCC's heuristics do not
 * weigh. */
#define EVR__ALWAYS_INLINE inline __attribute__((always_inline))
/* The other way: a rare branch of such a function, kept out of it so
 * that its registers and stack do not weigh on the common path. */
#define EVR__NOINLINE __attribute__((noinline))

/*
 * Memory the RDMA device writes -- receive buffers, rendezvous read
 * targets -- changes behind valgrind's back: memcheck would call every byte
 * a peer sent uninitialised.  Where the device wrote, say so.  The client
 * request is a no-op outside valgrind, but still some fifteen instructions
 * (its arguments go through memory), on every message received: it is made
 * only when the library was loaded under memcheck, the tool that tracks
 * what is defined (util.c).
 */
#if defined(__has_include)
#if __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#define EVR__HAVE_VALGRIND 1
extern bool evr__on_memcheck __attribute__((visibility("hidden")));
#define EVR__VG_DEFINED(p, n)                                                  \
	do {                                                                   \
		if (__builtin_expect(evr__on_memcheck, 0))                     \
			(void)VALGRIND_MAKE_MEM_DEFINED((p), (n));             \
	} while (0)
#endif
#endif
#ifndef EVR__VG_DEFINED
#define EVR__VG_DEFINED(p, n)                                                  \
	do {                                                                   \
		(void)(p);                                                     \
		(void)(n);                                                     \
	} while (0)
#endif

/* freed objects kept for reuse: stash.h */

/* ---- operations: one posted work request each ---- */
enum evr__op_kind {
	EVR_OP_EAGER,	  /* an eager message (user send) */
	EVR_OP_RNDV,	  /* a rendezvous message (user send) */
	EVR_OP_CTRL,	  /* a credit update or rendezvous finish */
	EVR_OP_WRITE,	  /* user RDMA WRITE */
	EVR_OP_WRITE_IMM, /* user RDMA WRITE with immediate */
	EVR_OP_READ,	  /* user RDMA READ */
	EVR_OP_ATOMIC,	  /* user fetch-add / compare-swap */
	EVR_OP_RREAD,	  /* internal: one chunk of a rendezvous read */
	EVR_OP_RECV,	  /* a posted receive buffer */
	EVR_OP_DRAIN,	  /* marker: flushed through a dead QP */
	EVR_OP_PROBE,	  /* keepalive: a zero-length RDMA WRITE */
	EVR_OP_BIND,	  /* binds a rendezvous source's memory window */
};

struct evr__buf;
struct evr__reg;
struct evr__rx;
struct evr__op;

/*
 * What the CQ knows of anything posted, send or receive: wr_id points at
 * this head and the completion goes to done(head, wc).  A send-side op's
 * done is the conn's (it completes the SQ in order); a receive buffer's is
 * the message layer's.  The link is the owner's: an op's queues (see
 * evr__op) or a buffer's (see evr__buf).
 */
struct evr__wr;
typedef void (*evr__wr_done_fn)(struct evr__wr *w, const struct ibv_wc *wc);
struct evr__wr {
	struct evr__list link;
	union {
		evr_conn *conn;
		/* a receive posted to the ctx's shared receive queue belongs
		 * to no conn until a message lands in it (srq.c) */
		evr_ctx *srq_ctx;
	};
	evr__wr_done_fn done;
};

/*
 * How an op of one class ends and is built, set by whoever makes it (the
 * layer that knows what the op is for), so that the layers below need not
 * know:
 *   complete  the op's end, exactly once, with its status: from the SQ in
 *             posting order, or from the conn for an op never posted.
 *   prepare   optional: fills the op's WR fields just before it is posted
 *             (an eager message is copied into a pool buffer only then,
 *             with the credits it piggybacks); NULL for ops built at
 *             submission.  It may add ops of its own to the batch first
 *             (a rendezvous binds its memory window), as many as wrs says.
 *   wrs       optional: the SQ slots the op may need when posted, itself
 *             included (1 when NULL, never more than EVR__OP_WRS_MAX);
 *             the flush waits for that many, and asks only when fewer
 *             than EVR__OP_WRS_MAX are free.
 *   carry     optional: can the op carry a FIN (EVR_F_FIN, proto.h)?  If
 *             so, the flush may set c->fin_carry before prepare, which
 *             then writes that FIN into the message and clears it.
 */
#define EVR__OP_WRS_MAX 2 /* a rendezvous request and its window's bind */
typedef void (*evr__op_complete_fn)(struct evr__op *op, int status);
typedef int (*evr__op_prepare_fn)(evr_conn *c, struct evr__op *op);
typedef unsigned (*evr__op_wrs_fn)(const evr_conn *c, const struct evr__op *op);
typedef bool (*evr__op_carry_fn)(const evr_conn *c, const struct evr__op *op);
struct evr__op_class {
	evr__op_complete_fn complete;
	evr__op_prepare_fn prepare;
	evr__op_wrs_fn wrs;
	evr__op_carry_fn carry;
};

/*
 * The work request an op stands for, in the fewest bytes: sq.c turns it
 * into a struct ibv_send_wr (128 bytes, plus 16 for its SGE) in the ctx's
 * chain array at post time, so no op carries one.  len 0 posts no SGE.
 */
struct evr__wqe {
	uint64_t laddr; /* local address */
	uint64_t raddr; /* RDMA and atomics: remote address */
	uint32_t len;	/* bytes at laddr */
	uint32_t lkey;
	uint32_t rkey;
	uint32_t imm; /* WITH_IMM opcodes: big endian, as verbs carries it */
};

/* Rendezvous send state, from the request's build to the FIN: on
 * c->rndv_wait in id order (the peer finishes messages in order). */
struct evr__rndv_tx {
	struct evr__list link;
	struct evr__op *op;
	struct evr__reg *reg; /* registration of the source */
	struct ibv_mw *mw;    /* bound over the message, or NULL */
	void *bounce;	      /* from iovecs: the gathered copy */
	uint32_t id;
};

/*
 * One send-side work request (a message, a control message, a one-sided
 * op, a chunk of a rendezvous read, a keepalive probe): 128 bytes, of
 * which the last 24 belong to the op's kind.
 */
#define EVR__HDR_BYTES 8 /* proto.h's EVR_HDR_SIZE (msg.c checks) */
struct evr__op {
	/* h.link: on one queue at a time: c->sendq or c->ctrlq, then
	 * sq->batch, then sq->posted; or, free, the ctx's stash of ops. */
	struct evr__wr h;
	const struct evr__op_class *cls;
	evr_op_cb cb;
	void *arg;
	int32_t status;	    /* first error seen / deferred status */
	uint8_t kind;	    /* enum evr__op_kind */
	uint8_t pending;    /* RNDV: send CQE and FIN both needed */
	uint8_t opcode;	    /* enum ibv_wr_opcode */
	uint8_t send_flags; /* IBV_SEND_INLINE, IBV_SEND_SIGNALED */
	bool credit;	    /* consumes a peer receive */
	bool ctrl;	    /* may use the reserved credits */
	bool queued;	    /* msg.len is counted in conn->queued_bytes */
	uint8_t ctrl_type;  /* CTRL: EVR_T_CREDIT or EVR_T_RNDV_FIN */
	uint8_t ctrl_flags; /* CTRL CREDIT: EVR_F_WANT or EVR_F_GIVE */
	bool quiet; /* EAGER without a callback: may end a batch unsignaled */
	bool cb_at_post; /* eager: cb fires once posted (the flush), quiet */
	/* EAGER inline in two pieces: the header (and a call's id) in ihdr,
	 * ihdr_len bytes (with the header in immediate data, only a call's
	 * id, or nothing), the payload
	 * at wqe.laddr (the user's buffer), copied into the WR by the post */
	bool split;
	/* EAGER: the payload lies in the receive buffer of a message held
	 * in the callback that sent it (msg.c held_src), or in a region of
	 * the user's (msg.umr), whose key is in wqe.lkey: with the header
	 * in immediate data, sent from there */
	bool zc;
	uint8_t ihdr_len;
	uint16_t iovcnt; /* EAGER/RNDV from iovecs, until built */
	/* on sq->posted: WRs posted without an op after this one, before
	 * the next op (evr__sq_post_direct) */
	uint32_t anon_after;
	uint8_t call_flags; /* EAGER/RNDV: EVR_F_CALL or EVR_F_REPLY, or 0 */
	uint32_t call_id;   /* with call_flags: the call's id */
	uint8_t ihdr[EVR__HDR_BYTES + 4];
	struct evr__wqe wqe;
	union {
		struct {		      /* EAGER, RNDV */
			struct evr__buf *buf; /* header (+ payload) copy */
			union {
				const void *src;   /* single buffer */
				struct iovec *iov; /* iovcnt > 0: our copy */
				struct evr__rndv_tx *rt; /* RNDV, once built */
			};
			size_t len; /* message length */
			/* zc from the user's region: kept from deregistering
			 * (busy) from the WR's build until its completion */
			evr_mr *umr;
		} msg;
		struct { /* CTRL */
			struct evr__buf *buf;
			uint32_t fin_id;
			int32_t fin_status;
		} ctrl;
		struct evr__rx *rx; /* RREAD: the message being read */
		struct {	    /* WRITE, WRITE_IMM, READ, ATOMIC */
			evr_mr *mr;
			uint64_t compare_add;
			uint64_t swap;
		} rma;
		struct { /* BIND: mw over [wqe.raddr, +len) of mr, new rkey
			  * wqe.rkey, remote read only */
			struct ibv_mw *mw;
			struct ibv_mr *mr;
			uint64_t len;
		} bind;
	} u;
	/* EAGER of at most EVR_SEND_COPY_MAX bytes: the message, copied at
	 * submission (msg.src points here) */
	uint8_t copy[EVR_SEND_COPY_MAX];
};

/* The send op may not grow: 232 bytes on LP64 today (docs/architecture.md),
 * of which 64 are the copy of a small message; the core/transport split
 * of the op (docs/transport.md, step 7) is to bring it to 128. */
_Static_assert(sizeof(struct evr__op) <= 232,
	       "struct evr__op grew: docs/architecture.md states its size");

#define evr__op_of(w)	 evr__container_of((w), struct evr__op, h)
#define evr__op_first(q) evr__list_first_entry((q), struct evr__op, h.link)

/* ---- send queue of one QP: batching and selective signaling (sq.c) ---- */
/* Room to build the verbs WRs of a batch in, shared by the SQs of a ctx
 * (one thread posts at a time): cap WRs and their SGEs. */
#define EVR__WR_SGES 2 /* SGEs per WR at most: a split op's (sq.c) */
struct evr__wr_chain {
	struct ibv_send_wr *wr;
	struct ibv_sge *sge; /* EVR__WR_SGES per WR */
	unsigned cap;
};
typedef void (*evr__sq_done_fn)(struct evr__op *op, int status);

struct evr__sq {
	struct ibv_qp *qp;
	unsigned depth;	      /* send WRs the QP holds */
	unsigned outstanding; /* posted, not yet known complete */
	unsigned interval;    /* signal one WR in this many */
	unsigned unsig_run;   /* unsignaled WRs since the last signaled */
	/* an unsignaled WR that waits for its completion (not quiet) came
	 * after the last signaled one: the batch's end must be signaled,
	 * also when its last WR is quiet */
	bool waiting;
	struct evr__list posted; /* posted ops in order (outstanding of them) */
	/* unsignaled WRs posted without an op (evr__sq_post_direct) before
	 * the first op on posted; those after an op are its anon_after */
	unsigned anon_head;
	struct evr__list batch; /* ops chained, not yet posted */
	unsigned nbatch;	/* ops on batch */
	evr__sq_done_fn done;	/* completion of each op, in order */
	struct evr_stats *st;
	struct evr__wr_chain *chain; /* cap >= 1; the ctx's is sq_depth */
	/* what the QP was created with: bytes a WR may carry inline, and
	 * whether a WR may have EVR__WR_SGES pieces (split ops) */
	unsigned max_inline;
	bool sge2;
};

void evr__sq_init(struct evr__sq *sq, struct ibv_qp *qp, unsigned depth,
		  unsigned interval, evr__sq_done_fn done, struct evr_stats *st,
		  struct evr__wr_chain *chain);
/* Free slots for new WRs (not counting the open batch). */
static inline unsigned evr__sq_room(const struct evr__sq *sq)
{
	return sq->depth - sq->outstanding - sq->nbatch;
}
/* Append op (its opcode and wqe filled in) to the open batch. */
void evr__sq_add(struct evr__sq *sq, struct evr__op *op);
/* Post the open batch: its WRs are built from the ops in the chain array,
 * cap at a time, each chain with one ibv_post_send: one call for a batch
 * that fits the array.  On failure the ops that were not posted are
 * completed through done() with the error, and it is returned. */
int evr__sq_commit(struct evr__sq *sq);
/*
 * Post one unsignaled SEND that has no op (the direct way of a quiet
 * message, msg.c): the hlen bytes at hdr, then the len bytes of payload
 * (either may be 0), inline -- the post copies them; with immediate data
 * imm (network order) when it is not 0.  Its wr_id names no op,
 * so that its completion -- only an error or a flush, it is never
 * signaled -- goes to evr__sq_complete_direct().  The caller checked that
 * the batch is empty, that there is room, that the WR need not be
 * signaled (evr__sq_direct_ok()) and that hlen + len fit max_inline with
 * sge2.  0, or the post's error (nothing posted).
 */
int evr__sq_post_direct(struct evr__sq *sq, const void *hdr, uint32_t hlen,
			const void *payload, uint32_t len, uint32_t imm,
			uint64_t wr_id);
static inline bool evr__sq_direct_ok(const struct evr__sq *sq)
{
	return sq->nbatch == 0 && evr__sq_room(sq) > 0 &&
	       sq->unsig_run + 1 < sq->interval;
}
/* The last posted WR is unsignaled (a quiet op's, or one without an op):
 * it, and the quiet WRs before it, complete only with a later signaled
 * WR. */
static inline bool evr__sq_open_tail(const struct evr__sq *sq)
{
	const struct evr__op *last;

	if (evr__list_empty(&sq->posted))
		return sq->anon_head > 0;
	last = evr__list_entry(evr__list_last(&sq->posted), struct evr__op,
			       h.link);
	return last->anon_after > 0 || !(last->send_flags & IBV_SEND_SIGNALED);
}
/* A send completion for op (signaled, or any op in error): completes every
 * posted op up to and including op, in order. */
void evr__sq_complete(struct evr__sq *sq, struct evr__op *op, int status);
/* The completion (an error or a flush) of a WR posted without an op: the
 * first such WR not known complete.  Completes every posted op before it,
 * in order. */
void evr__sq_complete_direct(struct evr__sq *sq, int status);
/* Complete every posted op with status (QP destroyed without flushes). */
void evr__sq_abandon(struct evr__sq *sq, int status);

/* ---- registered buffer pool (pool.c) ---- */
/* A pool buffer: a receive (wr_id points at h), or the header and payload
 * copy of a send.  h.link is the buffer's own: the pool's free list,
 * c->repost or c->early, one of them at most. */
struct evr__buf {
	struct evr__wr h;
	uint8_t *data;
	uint32_t lkey;
	uint32_t size;
	/* a receive parked until the conn is established */
	uint32_t byte_len;
	uint32_t imm;
	uint8_t opcode;
	uint8_t wc_flags; /* IBV_WC_WITH_IMM */
	bool update;	  /* SRQ: held a bare credit update (bank.h repost) */
};

/* The receive head: a cache line, next to the data it heads. */
_Static_assert(sizeof(struct evr__buf) <= 64,
	       "struct evr__buf (the receive head) outgrew a cache line");

#define evr__buf_link(b) (&(b)->h.link)
#define evr__buf_pop(q)	 evr__list_pop_entry((q), struct evr__buf, h.link)
#define evr__buf_of(w)	 evr__container_of((w), struct evr__buf, h)

/* wr receives into all of pool buffer b (one SGE, sge); next NULL. */
static inline void evr__recv_wr(struct ibv_recv_wr *wr, struct ibv_sge *sge,
				struct evr__buf *b)
{
	sge->addr = (uintptr_t)b->data;
	sge->length = b->size;
	sge->lkey = b->lkey;
	wr->wr_id = (uintptr_t)&b->h;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->next = NULL;
}

/* The pool buffer receive WR wr was made for (evr__recv_wr). */
static inline struct evr__buf *evr__recv_wr_buf(const struct ibv_recv_wr *wr)
{
	return evr__buf_of((struct evr__wr *)(uintptr_t)wr->wr_id);
}

/* The op sends len bytes of pool buffer b (inline when they fit sq). */
static inline void evr__op_set_send(struct evr__op *op, struct evr__buf *b,
				    uint32_t len, const struct evr__sq *sq)
{
	op->wqe.laddr = (uintptr_t)b->data;
	op->wqe.len = len;
	op->wqe.lkey = b->lkey;
	op->opcode = IBV_WR_SEND;
	op->send_flags = len <= sq->max_inline ? IBV_SEND_INLINE : 0;
}

/* A registered buffer that a rendezvous message is read into.  Freed ones
 * are kept per power-of-two size class (EVR_RBUF_MIN_SHIFT ..
 * EVR_RBUF_MAX_SHIFT), EVR_RBUF_CACHE_BYTES in all, so a stream of large
 * messages neither allocates nor registers per message. */
#define EVR_RBUF_MIN_SHIFT   14
#define EVR_RBUF_MAX_SHIFT   24
#define EVR_RBUF_CLASSES     (EVR_RBUF_MAX_SHIFT - EVR_RBUF_MIN_SHIFT + 1)
#define EVR_RBUF_CACHE_BYTES ((size_t)32 << 20)
struct evr__rbuf {
	struct evr__list link; /* on its class's free list when cached */
	struct ibv_mr *mr;     /* NULL: not registered (evr__rbuf_plain) */
	uint8_t *mem;
	size_t cap;
	int cls; /* size class, -1: not cached */
};

/* ---- registered memory (memlock.c) ---- */
struct evr__regacct {
	const evr_ctx *ctx; /* for the log */
	uint64_t bytes;	    /* registered now */
	bool told;	    /* the locked-memory limit was explained */
};
/* ibv_reg_mr, counted; on failure NULL with errno set, and a refusal for
 * the locked-memory limit explained (once per ctx).  what: for the log. */
struct ibv_mr *evr__reg_mr(struct evr__regacct *a, struct ibv_pd *pd,
			   void *addr, size_t len, int access,
			   const char *what);
void evr__dereg_mr(struct evr__regacct *a, struct ibv_mr *mr);
/* RLIMIT_MEMLOCK in bytes; UINT64_MAX when registration is not limited
 * (unlimited, or CAP_IPC_LOCK). */
uint64_t evr__memlock_limit(void);
/* The eager size a ctx takes when evr_ctx_opts.eager_size is 0: the
 * default, halved while the shared receive pool (half the limit) would
 * hold fewer than 2048 buffers of it, down to EVR_EAGER_MIN_AUTO. */
#define EVR_EAGER_DEFAULT  8192u
#define EVR_EAGER_MIN_AUTO 1024u
uint32_t evr__eager_for_limit(uint64_t limit);

struct evr__pool {
	struct ibv_pd *pd;
	struct evr__regacct *acct;
	uint32_t buf_size;
	unsigned per_chunk;
	struct evr__list free; /* of evr__buf, the last put first */
	struct evr__list chunks;
	unsigned total, nfree;
	struct evr__list rfree[EVR_RBUF_CLASSES]; /* of evr__rbuf */
	size_t rfree_bytes;
	size_t rfree_max; /* EVR_RBUF_CACHE_BYTES, less under a memlock limit */
};

int evr__pool_init(struct evr__pool *p, struct ibv_pd *pd,
		   struct evr__regacct *acct, uint32_t buf_size,
		   unsigned per_chunk);
void evr__pool_fini(struct evr__pool *p);
struct evr__buf *evr__pool_get(struct evr__pool *p);
void evr__pool_put(struct evr__pool *p, struct evr__buf *b);
struct evr__rbuf *evr__rbuf_get(struct evr__pool *p, size_t len);
/* A buffer of len bytes that is not registered (mr NULL, never cached):
 * a rendezvous message received through a registered staging buffer. */
struct evr__rbuf *evr__rbuf_plain(size_t len);
void evr__rbuf_put(struct evr__pool *p, struct evr__rbuf *rb);

/* ---- memory registration (mr.c) ---- */
struct evr_mr {
	evr_ctx *ctx;
	struct evr__list link;
	struct ibv_mr *mr;
	unsigned busy; /* pending operations using it */
	unsigned access;
};

/* A registration used for rendezvous sources: cached, or a user evr_mr. */
struct evr__reg {
	struct evr__list link;
	struct ibv_mr *mr;
	uintptr_t start, end;
	unsigned refs;
	evr_mr *user; /* non-NULL: borrowed from the user's registration */
};

int evr__reg_get(evr_ctx *ctx, const void *addr, size_t len,
		 struct evr__reg **out);
void evr__reg_put(evr_ctx *ctx, struct evr__reg *r);
void evr__reg_cache_fini(evr_ctx *ctx);
/* The user's region (evr_mr_reg) that holds all len bytes at addr, any
 * access: a send's source without a copy; NULL if none. */
evr_mr *evr__mr_local(evr_ctx *ctx, const void *addr, size_t len);

/* ---- completion queues (cq.c) ---- */
struct evr__cq {
	struct evr__list link;
	evr_ctx *ctx;
	struct ibv_cq *cq;
	unsigned cqe;	   /* capacity */
	unsigned reserved; /* CQEs the QPs on it may need */
	unsigned unacked;  /* events not yet acknowledged */
	bool armed;
	bool broken; /* a poll failed: never polled, armed or used again */
	unsigned nqp;
	/* polls that found it empty (or returned less than asked): every
	 * completion made before such a poll has been dispatched */
	unsigned drains;
};

int evr__cq_attach(evr_ctx *ctx, unsigned need, struct evr__cq **out);
void evr__cq_detach(evr_ctx *ctx, struct evr__cq *cq, unsigned need);
void evr__cq_destroy_all(evr_ctx *ctx);
/* Take one completion-channel event, if there is one (ack batched). */
void evr__cq_take_event(evr_ctx *ctx);
unsigned evr__cq_poll_all(evr_ctx *ctx, unsigned budget);
/* Poll one CQ until it is empty (cq->drains moves, unless it is broken). */
unsigned evr__cq_poll_empty(evr_ctx *ctx, struct evr__cq *cq);
/* Arm every CQ that is not armed and poll it until empty; returns the
 * completions found. */
unsigned evr__cq_arm_unarmed(evr_ctx *ctx);
/* The CQ is unusable (what: the failed call or event, err: its errno):
 * mark it, log once and tell the hook (ctx->hooks.cq_failed). */
void evr__cq_break(evr_ctx *ctx, struct evr__cq *cq, const char *what, int err);
struct evr__cq *evr__cq_find(evr_ctx *ctx, const struct ibv_cq *ibcq);
int evr__wc_errno(enum ibv_wc_status st);
int evr__wc_conn_errno(enum ibv_wc_status st);

/* ---- connections (cm.c, conn.c, msg.c) ---- */
/*
 * A connection's life, one value at a time (conn.c, evr__conn_to()):
 *
 *   NEW -> RESOLVING_ADDR -> RESOLVING_ROUTE -> CONNECTING -+
 *   NEW -> ACCEPTING ---------------------------------------+-> ESTABLISHED
 *   ESTABLISHED -> CLOSING -> CLOSING_BYE -> FLUSHING        (graceful)
 *   any state before FLUSHING -> FAILED -> FLUSHING          (error, abort,
 *                                                            timeout)
 *   FLUSHING -> CLOSED, or FLUSHING -> ZOMBIE -> CLOSED
 *
 * The order matters: the states up to ESTABLISHED are "live", from
 * CLOSING on the conn takes no new work.  ended_in remembers the live
 * state the conn left, which decides what the end looks like to the user
 * (on_connect or on_close) and to the peer (told with rdma_disconnect).
 */
enum evr__conn_state {
	EVR_CS_NEW, /* made; not yet handed to the user */
	EVR_CS_RESOLVING_ADDR,
	EVR_CS_RESOLVING_ROUTE,
	EVR_CS_CONNECTING,  /* rdma_connect issued */
	EVR_CS_ACCEPTING,   /* rdma_accept issued */
	EVR_CS_ESTABLISHED, /* on_connect(0) delivered */
	EVR_CS_CLOSING,	    /* graceful close: our sends drain */
	EVR_CS_CLOSING_BYE, /* graceful close: our BYE in flight */
	EVR_CS_FAILED,	    /* error, abort or timeout: teardown next */
	EVR_CS_FLUSHING,    /* QP in error: its WRs come back flushed */
	EVR_CS_ZOMBIE,	    /* user told; QP kept until the flushes come */
	EVR_CS_CLOSED,	    /* released (never seen by anyone) */
};

const char *evr__conn_state_str(enum evr__conn_state s);

enum evr__cm_kind { EVR_CM_CONN = 1, EVR_CM_LISTENER = 2 };

/* A message waiting for in-order delivery behind a rendezvous read. */
struct evr__rx {
	struct evr__list link; /* on c->rxq */
	bool rndv;
	bool ready;
	int status;
	struct evr__buf *buf; /* eager: the receive buffer */
	uint8_t *data;
	size_t len;
	/* rendezvous */
	struct evr__rbuf *rb;
	uint64_t raddr;
	uint32_t rkey;
	uint32_t id;
	unsigned reads; /* chunks not yet read */
	bool started;
	bool fin; /* its FIN is queued (they go in order: rx_fins) */
	/* calls: a request (EVR_F_CALL) or a reply (EVR_F_REPLY) and its id;
	 * dropped: not delivered (a request its caller gave up, a late
	 * reply); skip: a rendezvous not to read (its FIN says -ECANCELED) */
	uint8_t call_flags;
	bool dropped, skip;
	uint32_t call_id;
	/* staged (under a locked-memory limit): rb is not registered; the
	 * chunks are read one at a time into stage and copied from there */
	struct evr__rbuf *stage;
	size_t next; /* offset of the next chunk to read */
};

struct evr_msg {
	struct evr__list link; /* ctx->held */
	evr_ctx *ctx;
	evr_conn *conn;	      /* NULL once the conn is gone */
	struct evr__buf *buf; /* eager: the receive buffer */
	struct evr__rbuf *rb; /* rendezvous: the buffer read into */
	const void *data;
	size_t len;
};

/* deadlines: timer.h */

struct evr_conn {
	uint8_t cm_kind; /* EVR_CM_CONN: first, see cm.c */
	evr_ctx *ctx;
	/* References to the handle: the ctx's own (dropped when it frees the
	 * conn) and evr_conn_ref()'s; the memory goes with the last
	 * (evr__conn_unref).  Atomic: other threads hold and drop them. */
	unsigned refs;
	struct evr__list link; /* ctx->conns */
	struct rdma_cm_id *id;
	struct ibv_qp *qp;
	struct evr__cq *cq;
	enum evr__conn_state state;    /* changed by evr__conn_to() only */
	enum evr__conn_state ended_in; /* the live state it left */
	bool active;		       /* we connected (vs accepted) */
	bool over_limit;	       /* an evr_send returned -ENOBUFS */
	bool in_recv; /* inside on_recv (evr_conn_hold allowed) */
	int error;    /* why it ends (0: local graceful close) */
	struct evr_conn_opts o;
	/* On the ctx's deadline heap (timer.c); EVR__CONN_TIMERS slots
	 * reserved per conn */
	struct evr__timer timer;    /* connect / close / flush bound */
	struct evr__timer ka;	    /* keepalive tick */
	struct evr__timer idle;	    /* idle window tick (window_idle_ms) */
	double ka_idle, ka_timeout; /* seconds; ka_idle 0: off */
	double last_act;	    /* ev_now() of the last completion */
	double probe_sent;	    /* ev_now() of the probe in flight, or 0 */
	/* peer's limits, from the handshake */
	uint32_t peer_max_eager;
	uint32_t eager; /* min(peer_max_eager, ctx->max_eager): the eager
			 * limit of what either side sends (msg.c) */
	uint64_t peer_max_msg;
	uint16_t peer_depth;
	struct evr__credit cr;
	/* send side */
	struct evr__list sendq; /* user ops not yet posted, in order */
	struct evr__list ctrlq; /* control messages and rendezvous reads */
	size_t queued_bytes;
	struct evr__sq sq;
	/* the wr_id of the WRs posted without an op (msg.c send_direct):
	 * their errors and flushes come back through it */
	struct evr__wr direct_wr;
	/* a message went the direct way since the last flush: the next ones
	 * wait for the flush, in one batch */
	bool direct_sent;
	struct evr__list rndv_wait; /* rendezvous sends awaiting FIN, by id */
	uint32_t next_rndv_id;
	/* receive side */
	unsigned recv_depth;
	unsigned recv_posted;
	struct evr__list repost; /* buffers to post again (evr__buf) */
	unsigned nrepost;
	struct evr__list rxq; /* in-order delivery queue */
	evr_msg *cur_msg;     /* message in on_recv */
	evr_msg *cur_held;    /* its held copy, if taken */
	bool cur_taken;	      /* it was held in this callback (maybe released
			       * since): its buffer is no longer the callback's */
	/* the held copies of the callbacks this one runs inside
	 * (evr__msg_redeliver): a release there forgets them too */
	struct evr__held_frame *held_up;
	struct evr__list early; /* receives before established */
	unsigned rndv_active;	/* rendezvous reads running */
	bool peer_bye; /* the peer's BYE arrived: it closes gracefully */
	bool qp_err;   /* flushing: we moved the QP to the error state */
	/* shared receive queue (srq.c, bank.h): our receives come from the
	 * ctx's pool and the bank lends the peer its window */
	bool srq;
	bool peer_windowed; /* the peer lends us a window: tell it EVR_F_WANT */
	/* the idle cycle (docs/credits.md "Idle windows") */
	bool sent_data;	     /* a data message went since the last idle tick */
	bool gave_back;	     /* we gave the window back: ask before sending */
	bool asked;	     /* asked for a window this idle tick */
	uint16_t lend_init;  /* handshake init_window we announce (0: all) */
	uint16_t req_window; /* accepting: the request's init_window */
	/* The extensions both handshakes agreed to (evr__agreed): EVR_HS_F_
	 * CALLS (rpc.c), FIN (a FIN may ride on data), IMM (plain eager
	 * messages carry their header in immediate data). */
	uint8_t agreed;
	/* the FIN the message being built carries (flush_ops), then NULL */
	struct evr__op *fin_carry;
	/* calls (rpc.c) */
	bool rpc_over; /* evr_call said -ENOBUFS: on_drain when one ends */
	struct evr__calltab rpc_tab; /* calls in flight; no slots until the
				      * first call */
	struct evr__list rpc_reqs;   /* requests delivered, not answered */
	struct evr_request **rpc_ix; /* the same by id (rpc.c req_index) */
	uint32_t rpc_ix_mask, rpc_ix_seed, rpc_nreqs;
	/* freed calls and request handles (a handle may outlive the conn's
	 * ctx: freed with the conn's last reference) */
	struct evr__stash rpc_calls_free, rpc_reqs_free;
	struct evr__bank_conn bank;
	uint32_t qp_num;	/* in ctx->qpmap while attached */
	unsigned limbo_drains;	/* its CQ's drains when its QP was destroyed */
	unsigned nsendq_credit; /* ops on sendq that take a credit */
	uint8_t udata[EVR_MAX_USER_DATA]; /* connect request user bytes */
	size_t ulen;
	/* reject reason */
	uint8_t rej[EVR_MAX_USER_DATA];
	size_t rej_len;
	struct evr__list work_link;  /* on ctx->work (runq.c), or alone */
	struct evr__list flush_link; /* on ctx->flush (runq.c), or alone */
};

struct evr_conn_req {
	evr_ctx *ctx; /* the callback may close l before answering */
	evr_listener *l;
	struct rdma_cm_id *id;
	struct evr__hs hs;
	bool answered;
	/* placed (evr_accept_on): the target counted it in its load already,
	 * and the conn takes that count over, so no other thread sees it
	 * counted twice (or not at all) in between */
	bool counted;
};

struct evr_listener {
	uint8_t cm_kind; /* EVR_CM_LISTENER */
	evr_ctx *ctx;
	struct evr__list link;
	struct rdma_cm_id *id;
	evr_accept_cb cb;
	void *arg;
	uint16_t port;
};

/*
 * Calls from a lower layer up to a higher one go through these, set by
 * ctx.c when it makes the ctx (see docs/architecture.md); the lower layer
 * includes nothing of the upper one.
 */
struct evr__hooks {
	/* runq.c: a conn queued by evr__conn_kick / evr__conn_dirty */
	void (*conn_step)(evr_conn *c);
	void (*conn_flush)(evr_conn *c);
	/* cq.c: a CQ broke; fail what uses it */
	void (*cq_failed)(evr_ctx *ctx, struct evr__cq *cq, int err);
	/* dev.c: the ctx was bound to its device; watch its fds */
	int (*device_bound)(evr_ctx *ctx);
	/* conn.c: the completion of a receive buffer (message layer) */
	evr__wr_done_fn recv_done;
	/* conn.c: the conn ends (status: why): the message layer fails what
	 * waits on the peer and drops what waits for delivery */
	void (*conn_teardown)(evr_conn *c, int status);
	/* conn.c: the conn is freed: held messages outlive it */
	void (*conn_release)(evr_conn *c);
	/* srq.c: the completion of a receive posted to the shared queue,
	 * whose conn only the QP number tells (conn layer) */
	evr__wr_done_fn srq_recv_done;
	/* msg.c: calls (rpc.c).  A request or a reply is delivered (data
	 * valid during the call, evr_conn_hold() may keep it); a CANCEL
	 * came for a request no longer waiting to be read or delivered; is
	 * the call of a rendezvous reply still in flight (else it is not
	 * read)? */
	void (*rpc_request)(evr_conn *c, uint32_t id, const void *data,
			    size_t len);
	void (*rpc_reply)(evr_conn *c, uint32_t id, const void *data,
			  size_t len);
	void (*rpc_cancel)(evr_conn *c, uint32_t id);
	bool (*rpc_live)(const evr_conn *c, uint32_t id);
};

/* What a ctx runs with, resolved from its options and the environment
 * once, at creation (opts.c). */
struct evr__tune {
	struct evr__adapt_cfg adapt;
	unsigned poll_spin; /* POLL: empty passes in a row per check */
	unsigned spin_us;   /* ADAPTIVE in EVENT: spin after a post (0: no) */
	unsigned reg_cache_max; /* registrations kept after use (mr.c) */
	/* without a log sink: lines at or below log_stderr - 1 go to
	 * stderr; 0 (also a zeroed ctx): none */
	unsigned log_stderr;
	enum evr_srq_mode srq; /* the option, else EVR_SRQ, else AUTO */
	unsigned srq_batch;    /* EVR_SRQ_REPOST_BATCH (1: each flush) */
	/* EVR_MW: 0 (unset: the device decides), EVR_RNDV_REGISTER (off),
	 * EVR_RNDV_WINDOW (inside: windows inside larger registrations
	 * even where the device does not bound them -- to test that path) */
	enum evr_rndv_access mw;
	bool fin_alone; /* EVR_FIN=alone: no FIN rides on data (proto.h) */
	bool imm_off;	/* EVR_IMM=off: every header in band (proto.h) */
};

/* ---- the doors between threads (thread.c) ---- */

/* A call queued for a ctx's thread: run(ctx, call) there, which frees it. */
struct evr__call;
typedef void (*evr__call_fn)(evr_ctx *ctx, struct evr__call *call);
struct evr__call {
	struct evr__call *next;
	evr__call_fn run;
};

/* Multi-producer queue of calls, and the eventfd that is readable while
 * it may hold some.  The only state of a ctx other threads touch. */
struct evr__calls {
	pthread_mutex_t mu;
	struct evr__call *head, **tail;
	bool signaled; /* fd written since the owner last took the queue */
	int fd;	       /* eventfd, or -1 */
};

int evr__calls_init(struct evr__calls *q);
void evr__calls_fini(struct evr__calls *q);
/* Append; false if the eventfd could not be written (the call is queued
 * all the same: the next wakeup takes it). */
bool evr__calls_push(struct evr__calls *q, struct evr__call *call);
/* Take everything queued, oldest first, and reset the eventfd. */
/* Run what is queued for ctx (on its thread); the number run. */
unsigned evr__calls_run(evr_ctx *ctx);
_Noreturn void evr__wrong_thread(const char *fn);

/* Entry points other than the documented thread-safe ones call this on
 * the ctx they act on: with assertions on (the default build), a call from
 * a thread other than the ctx's owner aborts, naming the function. */
#ifndef NDEBUG
#define EVR_OWNER(ctx)                                                         \
	do {                                                                   \
		if ((ctx) && !pthread_equal((ctx)->owner, pthread_self()))     \
			evr__wrong_thread(__func__);                           \
	} while (0)
#else
#define EVR_OWNER(ctx) ((void)0)
#endif
/* The same for an entry point given a conn (NULL passes). */
#define EVR_CONN_OWNER(c) EVR_OWNER((c) ? (c)->ctx : NULL)

static inline void evr__conn_ref(evr_conn *c)
{
	__atomic_add_fetch(&c->refs, 1, __ATOMIC_RELAXED);
}

/* Drop a reference; the last frees the handle (whatever the ctx had of it
 * is gone by then: conn.c conn_free). */
static inline void evr__conn_unref(evr_conn *c)
{
	if (__atomic_sub_fetch(&c->refs, 1, __ATOMIC_ACQ_REL) == 0) {
		evr__stash_free(&c->rpc_calls_free);
		evr__stash_free(&c->rpc_reqs_free);
		free(c);
	}
}

/* ---- the context (ctx.c) ---- */
struct evr_ctx {
	struct ev_loop *loop;
	bool own_loop;
	bool destroying;
	/* The device took no WR in the error state (conn.c seal_sq): every
	 * batch ends signaled, quiet or not. */
	bool quiet_off;
	struct evr_ctx_opts o;
	uint32_t max_eager;	   /* eager payload, this side */
	uint64_t memlock;	   /* RLIMIT_MEMLOCK at creation (memlock.c) */
	struct ibv_context *verbs; /* librdmacm's context of the device */
	struct ibv_context **devlist; /* rdma_get_devices(), freed last */
	struct ibv_pd *pd;
	struct ibv_device_attr dattr;
	/* rendezvous sources in regions and the cache: windows or
	 * registrations (mr.c), decided at binding (dev.c) */
	enum evr_rndv_access rndv_access;
	uint32_t max_msg_sz; /* port limit for one RDMA READ/WRITE */
	char devname[64];
	struct ibv_comp_channel *ch;
	struct evr__list cqs;
	struct rdma_event_channel *cm_ch;
	ev_io cq_w, cm_w, async_w;
	ev_prepare prep_w;
	ev_check check_w;
	ev_idle idle_w;
	struct evr__timers timers; /* every deadline of the ctx (timer.c) */
	ev_timer timer_w;	   /* at the earliest of them (loop.c) */
	double timer_w_at;	   /* the deadline timer_w is set for */
	int efd; /* evr_ctx_fd(): epoll fd for foreign loops, or -1 */
	enum evr_mode mode; /* requested */
	bool polling;	    /* in effect: CQs not armed, loop spinning */
	bool need_arm;	    /* back to EVENT: arm + re-poll in on_prepare */
	bool cm_more;	    /* rdma_cm events left for the next iteration */
	struct evr__adapt adapt;
	/* ops posted that await an answer or a completion: the user's and
	 * rendezvous reads, not credit updates, FINs or BYEs (conn.c) */
	uint64_t answer_posts;
	uint64_t spin_mark; /* answer_posts at the last spin's last post */
	/* the spin's length (adapt.h): post-to-answer times, the post's
	 * time and msgs_recv then, while an answer is awaited (t0 != 0) */
	struct evr__spin spin;
	uint64_t spin_ns; /* the length of the spin under way */
	double spin_t0;
	uint64_t spin_recv;
	struct evr__tune tune;
	evr_mode_cb mode_cb;
	void *mode_arg;
	struct evr__pool pool;
	struct evr__list conns, listeners, mrs, regs, zombies, held;
	unsigned nregs;
	struct evr__hooks hooks;
	struct evr__list work;	     /* conns whose state needs a step */
	struct evr__list flush;	     /* conns with something to post */
	struct evr__stash ops_free;  /* ops kept for reuse (runq.c) */
	struct evr__stash msgs_free; /* freed evr_msg handles (msg.c) */
	struct evr_stats st;
	struct evr__regacct reg;    /* what the ctx has registered */
	struct evr__wr_chain chain; /* WRs of one SQ batch, o.sq_depth */
	unsigned dispatch_depth;
	/* the shared receive queue (srq.c), NULL with a queue per conn */
	struct ibv_srq *srq;
	bool srq_refusing;     /* refusals logged since the last admission */
	bool srq_decided;      /* srq chosen (or not) for good */
	struct evr__bank bank; /* its credits (bank.h) */
	struct evr__list srq_ready; /* re-posts counted, waiting for their
				       batched post (bank.unposted) */
	struct evr__qpmap qpmap;    /* qp_num -> conn, for its completions */
	struct evr__list limbo;	    /* conns whose QP is gone, whose CQ is
				       not yet polled empty since (conn.c) */
	pthread_t owner;	    /* the thread that may use it (thread.c) */
	struct evr__calls calls;    /* from other threads (thread.c) */
	ev_io calls_w;		    /* calls.fd readable */
	/* atomic: conns not yet ended, and placements queued for it
	 * (evr_ctx_load); read by any thread */
	uint32_t load;
};

/* The handshake extensions this build speaks (EVR_HS_F_*, proto.h): a
 * connect request offers them, a reply agrees to those of them the request
 * offered, and a reply agreeing to more is a protocol error.  Calls are
 * agreed to by an accepting side whose opts have on_request (cm.c). */
#define EVR__FEATURES (EVR_HS_F_CALLS | EVR_HS_F_FIN | EVR_HS_F_IMM)

/* Those a ctx offers: all but a carried FIN with EVR_FIN=alone, and the
 * header in immediate data with EVR_IMM=off or on iWARP, which has no
 * SEND with immediate data. */
static inline uint8_t evr__features(const evr_ctx *ctx)
{
	bool no_imm = ctx->tune.imm_off ||
		      (ctx->verbs && ctx->verbs->device->transport_type ==
					 IBV_TRANSPORT_IWARP);

	return (uint8_t)(EVR__FEATURES &
			 ~(ctx->tune.fin_alone ? EVR_HS_F_FIN : 0u) &
			 ~(no_imm ? EVR_HS_F_IMM : 0u));
}

/* The ctx's load (evr_ctx_load) goes up or down by one. */
static inline void evr__load_add(evr_ctx *ctx, int d)
{
	__atomic_add_fetch(&ctx->load, (uint32_t)d, __ATOMIC_RELAXED);
}

/* util.c */
/* Copy sa as getpeername() does (at most *len bytes, *len set to its
 * size); -ENOTCONN when sa is NULL or not an IPv4/IPv6 address yet. */
int evr__addr_copy(const struct sockaddr *sa, struct sockaddr *out,
		   socklen_t *len);
void evr__log(const evr_ctx *ctx, enum evr_log_level lvl, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define EVR_ERR(ctx, ...)  evr__log((ctx), EVR_LOG_ERROR, __VA_ARGS__)
#define EVR_WARN(ctx, ...) evr__log((ctx), EVR_LOG_WARN, __VA_ARGS__)
#define EVR_INFO(ctx, ...) evr__log((ctx), EVR_LOG_INFO, __VA_ARGS__)
#define EVR_DBG(ctx, ...)  evr__log((ctx), EVR_LOG_DEBUG, __VA_ARGS__)
/* The loop's time (ev_now) in ns: what the adaptive mode measures with, so
 * the data path reads no clock of its own. */
static inline uint64_t evr__loop_ns(evr_ctx *ctx)
{
	return (uint64_t)(ev_now(ctx->loop) * 1e9);
}
/* Arm t to fire s seconds from now on the loop's clock (read afresh: a
 * user call may come long after the last loop iteration).  loop.c moves
 * its one libev timer to the heap's top before the loop sleeps. */
static inline void evr__ctx_timer_after(evr_ctx *ctx, struct evr__timer *t,
					double s)
{
	ev_now_update(ctx->loop);
	evr__timer_start(&ctx->timers, t, ev_now(ctx->loop) + s);
}
static inline void evr__ctx_timer_stop(evr_ctx *ctx, struct evr__timer *t)
{
	evr__timer_stop(&ctx->timers, t);
}
/* ADAPTIVE in EVENT: how long to poll after a post (EVR_ADAPT_SPIN_US). */
#define EVR_ADAPT_SPIN_US 50
/* POLL: empty CQ poll passes in a row before the check watcher returns to
 * the loop (EVR_POLL_SPIN). */
#define EVR_POLL_SPIN 64
/* Buffers re-posted to a shared receive queue go out in one post of this
 * many (conn.c evr__conn_flush), or sooner when the spare cannot cover
 * the wait. */
#define EVR_SRQ_REPOST_BATCH 16
int evr__set_nonblock(int fd);
/* "error"|"warn"|"info"|"debug" (any case; "1": debug, other text: warn)
 * to a level; NULL or "": -1, no logging. */
int evr__log_level_parse(const char *s);
/* A decimal unsigned without sign or blanks; false (out untouched) for
 * NULL, "" or anything else. */
bool evr__uint_parse(const char *s, unsigned *out);

/* opts.c: options structs that can grow, and the environment */
#define EVR__OPTS_MAX_SIZE 4096 /* larger: -E2BIG, surely not a struct */
/* Copy the caller's options src (first member: its size) into dst, a
 * struct of the library's dst_size: defaults for what src lacks.  0, or
 * -EINVAL (size 0 or too small to hold size) or -E2BIG (larger than
 * EVR__OPTS_MAX_SIZE, or a non-zero byte past dst_size). */
int evr__opts_copy(void *dst, size_t dst_size, const void *defaults,
		   const void *src);
/* evr__opts_copy() that logs a refusal, naming the struct (what). */
int evr__opts_take(const evr_ctx *ctx, const char *what, void *dst,
		   size_t dst_size, const void *defaults, const void *src);
/* The environment a ctx reads, once, in evr_ctx_create(); NULL: unset.
 * The strings are getenv()'s: use them before returning. */
struct evr__env {
	const char *device;	       /* EVR_DEVICE */
	const char *log;	       /* EVR_LOG */
	const char *adapt_up_rate;     /* EVR_ADAPT_UP_RATE */
	const char *adapt_up_batch;    /* EVR_ADAPT_UP_BATCH */
	const char *adapt_quiet_us;    /* EVR_ADAPT_QUIET_US */
	const char *adapt_quiet_polls; /* EVR_ADAPT_QUIET_POLLS */
	const char *poll_spin;	       /* EVR_POLL_SPIN */
	const char *adapt_spin_us;     /* EVR_ADAPT_SPIN_US */
	const char *reg_cache;	       /* EVR_REG_CACHE */
	const char *srq;	       /* EVR_SRQ */
	const char *mw;		       /* EVR_MW */
	const char *fin;	       /* EVR_FIN */
	const char *imm;	       /* EVR_IMM */
};
void evr__env_read(struct evr__env *env);
/* The precedence: a non-zero option, else the variable if it is a number,
 * else the default. */
unsigned evr__opt_pick(unsigned opt, const char *env, unsigned dflt);
/* Everything a ctx takes from options and environment together. */
void evr__tune_resolve(struct evr__tune *t, const struct evr_ctx_opts *o,
		       const struct evr__env *env);

/* dev.c: choosing and opening the device */
int evr__dev_open_by_name(evr_ctx *ctx, const char *name);
int evr__dev_open_by_addr(evr_ctx *ctx, const char *addr);
int evr__dev_bind(evr_ctx *ctx, struct ibv_context *verbs);
void evr__dev_release(evr_ctx *ctx);

/* runq.c: ops, and the conns with work to do */
void evr__runq_init(evr_ctx *ctx);
struct evr__op *evr__op_alloc(evr_ctx *ctx);
void evr__op_free(evr_ctx *ctx, struct evr__op *op);
void evr__op_free_all(evr_ctx *ctx);
/* c needs a state step */
static inline void evr__conn_kick(evr_conn *c)
{
	if (evr__list_empty(&c->work_link))
		evr__list_add_tail(&c->ctx->work, &c->work_link);
}

/* c has something to post (every send passes here: inline) */
static inline void evr__conn_dirty(evr_conn *c)
{
	if (evr__list_empty(&c->flush_link))
		evr__list_add_tail(&c->ctx->flush, &c->flush_link);
}

void evr__runq_forget(evr_conn *c); /* off both queues (it is freed) */
static inline bool evr__runq_busy(const evr_ctx *ctx)
{
	return !evr__list_empty(&ctx->work) || !evr__list_empty(&ctx->flush);
}

void evr__ctx_run(evr_ctx *ctx);

/* Run flushes and state steps until nothing is left (runq.c).  Inline,
 * for the many calls that find the run queue empty (a wakeup makes
 * several). */
static inline void evr__ctx_progress(evr_ctx *ctx)
{
	if (evr__runq_busy(ctx))
		evr__ctx_run(ctx);
}

/* conn.c */
/* A new conn, counted in ctx's load: *counted, if set, is a placement's
 * count (evr_accept_on), which it takes over and clears. */
evr_conn *evr__conn_new(evr_ctx *ctx, struct rdma_cm_id *id, bool active,
			const struct evr_conn_opts *opts, bool *counted);
int evr__conn_setup_qp(evr_conn *c);
void evr__conn_set_peer(evr_conn *c, const struct evr__hs *hs);
void evr__conn_to(evr_conn *c, enum evr__conn_state to);
void evr__conn_fail(evr_conn *c, int err);
void evr__conn_fail_cq(evr_ctx *ctx, struct evr__cq *cq, int err);
void evr__conn_established(evr_conn *c);
void evr__conn_step(evr_conn *c);
void evr__conn_flush(evr_conn *c);
void evr__conn_free_all(evr_ctx *ctx);
void evr__conn_fill_hs(const evr_conn *c, struct evr__hs *hs);
/* A send-side op of c; cls is how it ends and is built (see struct
 * evr__op_class). */
struct evr__op *evr__conn_op_new(evr_conn *c, uint8_t kind,
				 const struct evr__op_class *cls);
/* A control message of c (EVR_T_CREDIT, _RNDV_FIN, _BYE). */
struct evr__op *evr__ctrl_op_new(evr_conn *c, uint8_t type);

/* Takes new sends, writes, reads (queued until established). */
static inline bool evr__conn_open(const evr_conn *c)
{
	return c->state < EVR_CS_CLOSING;
}

/* Established or closing gracefully: its QP carries traffic. */
static inline bool evr__conn_up(const evr_conn *c)
{
	return c->state >= EVR_CS_ESTABLISHED && c->state <= EVR_CS_CLOSING_BYE;
}

/* WRs may be posted on its QP: it has one, and it is not on its way into
 * the error state. */
static inline bool evr__conn_can_post(const evr_conn *c)
{
	return c->qp && c->state < EVR_CS_FAILED;
}

/* on_connect(0) was delivered: its end is reported by on_close. */
/* Both handshakes agreed to the extension f (an EVR_HS_F_* bit). */
static inline bool evr__agreed(const evr_conn *c, uint8_t f)
{
	return (c->agreed & f) != 0;
}

static inline bool evr__conn_was_up(const evr_conn *c)
{
	return evr__conn_up(c) ||
	       (c->state >= EVR_CS_FAILED && c->ended_in == EVR_CS_ESTABLISHED);
}

/* The end of an op (the SQ's completion callback of every conn). */
static inline void evr__op_complete(struct evr__op *op, int status)
{
	op->cls->complete(op, status);
}

/* A message op leaves the conn's send queue: its bytes no longer count
 * against send_queue_limit. */
static inline void evr__op_unqueue(evr_conn *c, struct evr__op *op)
{
	if (op->queued) {
		c->queued_bytes -= op->u.msg.len;
		op->queued = false;
	}
}

/* The status an op's user callback gets: a WR flushed because its conn
 * failed reports why the conn failed (-ETIMEDOUT for a dead peer,
 * -ECONNRESET, ...) rather than the flush; an abort stays -ECANCELED. */
static inline int evr__op_user_status(const evr_conn *c, int status)
{
	if (status == -ECANCELED && c->error)
		return c->error;
	return status;
}

/* msg.c */
void evr__msg_recv_done(struct evr__wr *w, const struct ibv_wc *wc);
void evr__msg_teardown(evr_conn *c, int status);
void evr__msg_detach_held(evr_conn *c);
/* Queue a call's request (flags EVR_F_CALL) or reply (EVR_F_REPLY) of
 * call id, as evr_send would a message; *op (may be NULL) receives the
 * op, which is the caller's to withdraw until cb fires.  A reply without
 * cb and op may instead be posted at once (the direct way, as
 * evr_send's). */
int evr__msg_send_call(evr_conn *c, const void *buf, size_t len, uint8_t flags,
		       uint32_t id, evr_op_cb cb, void *arg,
		       struct evr__op **op);
/* An op of evr__msg_send_call still queued: taken off the queue, and
 * completed (cb) with -ECANCELED; true.  False when it has been posted. */
bool evr__msg_withdraw(evr_conn *c, struct evr__op *op);
/* Queue a CANCEL of call id to the peer (behind what is queued). */
int evr__msg_send_cancel(evr_conn *c, uint32_t id);
/* An outer callback's held copy, kept while evr__msg_redeliver runs
 * another callback inside it (c->held_up). */
struct evr__held_frame {
	evr_msg *held;
	struct evr__held_frame *up;
};
/* Deliver a message held with evr_conn_hold() again, inside fn (where
 * evr_conn_hold() takes it over); released after fn unless taken. */
void evr__msg_redeliver(evr_conn *c, evr_msg *m,
			void (*fn)(evr_conn *c, const void *data, size_t len,
				   void *arg),
			void *arg);

/* rpc.c: calls, above the message layer */
void evr__rpc_teardown(evr_conn *c, int status); /* the conn_teardown hook */
void evr__rpc_request(evr_conn *c, uint32_t id, const void *data, size_t len);
void evr__rpc_reply(evr_conn *c, uint32_t id, const void *data, size_t len);
void evr__rpc_cancel(evr_conn *c, uint32_t id);
bool evr__rpc_live(const evr_conn *c, uint32_t id);
/* The conn is freed: its call table goes (the conn_release hook). */
void evr__rpc_release(evr_conn *c);

/* srq.c: the shared receive queue of a ctx */
/* Decide once whether the ctx's conns share a receive queue, and create it
 * (with its first buffers) if so.  0 (ctx->srq set or not), or an error
 * for EVR_SRQ_ON that cannot be met. */
int evr__srq_open(evr_ctx *ctx);
void evr__srq_close(evr_ctx *ctx);
/* Post what the bank wants (evr__bank_want); 0, or the error that
 * stopped it (-ENOMEM: the pool could not grow). */
int evr__srq_refill(evr_ctx *ctx);
/* Make b a receive of the shared queue (its head's ctx and done). */
void evr__srq_buf_prep(evr_ctx *ctx, struct evr__buf *b);
/* Post a chain of prepared buffers; ibv_post_srq_recv's result. */
int evr__srq_post(evr_ctx *ctx, struct ibv_recv_wr *wr,
		  struct ibv_recv_wr **bad);
/* Post b again without telling the bank: it was counted as posted all
 * along (a flushed receive, or one no credit covered). */
void evr__srq_put_back(evr_ctx *ctx, struct evr__buf *b);

/* conn.c: receive buffers and the shared queue */
/* A receive buffer of c is done with: posted again (its credit owed). */
void evr__conn_recv_put(evr_conn *c, struct evr__buf *b);
/* A shared-queue receive completed: find its conn (srq_recv_done hook). */
void evr__conn_srq_recv_done(struct evr__wr *w, const struct ibv_wc *wc);
/* Free the conns in limbo whose CQ has been polled empty since their QP
 * was destroyed (polling it if need be), and refill the shared queue. */
void evr__conn_reap(evr_ctx *ctx);

/* ctx.c */
void evr__ctx_hooks_init(evr_ctx *ctx);

/* loop.c: the libev watchers that drive the ctx, and the mode */
void evr__loop_start(evr_ctx *ctx);
void evr__loop_stop(evr_ctx *ctx);
int evr__loop_add_device(evr_ctx *ctx);
void evr__loop_set_polling(evr_ctx *ctx, bool poll);
void evr__loop_on_cq_channel(struct ev_loop *loop, ev_io *w, int revents);

/* embed.c */
int evr__embed_add_device(evr_ctx *ctx);

/* cm.c */
void evr__cm_on_channel(struct ev_loop *loop, ev_io *w, int revents);

#endif
