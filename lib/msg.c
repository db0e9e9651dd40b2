/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Two-sided messages: eager sends, rendezvous, receive processing,
 * in-order delivery and held buffers.  A message op is built when it is
 * posted (its class's prepare) and ends through its complete; receives
 * come in through evr__msg_recv_done (the recv_done hook the conn posts
 * them with).
 *
 * Eager (len <= both sides' eager size): header + payload are copied into a
 * registered pool buffer and sent into one of the peer's pre-posted
 * receive buffers.
 *
 * Rendezvous (larger): the sender registers its buffer (or borrows the
 * user's evr_mr) and sends RNDV_REQ {addr, len, rkey, id}; the receiver
 * allocates the destination (bounded by its own max_msg_size, at most
 * EVR_RNDV_ACTIVE reads at a time per conn), RDMA-READs it in chunks,
 * sends RNDV_FIN {id, status} and delivers the message.  The sender's
 * callback fires when both its REQ send has completed and the FIN came.
 *
 * Ordering: messages are delivered in arrival order.  An eager message that
 * arrives while an earlier rendezvous is still being read waits behind it
 * (its receive buffer, and so its credit, is kept until then).
 */
#include "evrdma-int.h"
#include "probe.h"

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define EVR_RNDV_ACTIVE 2	   /* concurrent rendezvous reads per conn */
#define EVR_RNDV_CHUNK	(1u << 20) /* bytes per RDMA READ */

_Static_assert(EVR__HDR_BYTES == EVR_HDR_SIZE, "struct evr__op's ihdr");

static size_t eager_limit(const evr_conn *c)
{
	return c->eager; /* min(the peer's, ours): set at the handshake */
}

/* An op's eager limit: a call's id takes 4 bytes of the eager size. */
static size_t op_eager_limit(const evr_conn *c, const struct evr__op *op)
{
	return eager_limit(c) - (op->call_flags ? EVR_CALL_ID_SIZE : 0);
}

static int send_prepare(evr_conn *c, struct evr__op *op);

/* The header flags of a data message that has just taken its credit:
 * EVR_F_WANT when the peer lends us a window and that window, not the
 * user, holds back the messages queued behind it (credit.h). */
static uint8_t data_flags(const evr_conn *c)
{
	return c->peer_windowed && evr__credit_want(&c->cr, c->nsendq_credit)
		   ? EVR_F_WANT
		   : 0;
}
static void send_complete(struct evr__op *op, int status);
static unsigned send_wrs(const evr_conn *c, const struct evr__op *op);
static bool send_carry(const evr_conn *c, const struct evr__op *op);
static const struct evr__op_class send_class = { send_complete, send_prepare,
						 send_wrs, send_carry };

/* ---- submission ---- */

/* A small message (at most EVR_SEND_COPY_MAX bytes) to dst, eight bytes
 * at a time in general-purpose registers.  Not memcpy: at these sizes it
 * takes vector registers, which an emulated CPU (QEMU's TCG, where the
 * test bed runs) makes cost about two microseconds a copy of 64 bytes --
 * a measured 20 % of a 64-byte round trip -- and which a real one saves
 * nothing with. */
static void copy_small(uint8_t *dst, const uint8_t *src, size_t len)
{
	uint64_t w;

	for (; len >= 8; len -= 8, src += 8, dst += 8) {
		memcpy(&w, src, 8);
		memcpy(dst, &w, 8);
	}
	while (len--)
		*dst++ = *src++;
}

/* The len bytes of buf, or of iovcnt iovecs, to dst. */
static void copy_in(uint8_t *dst, const void *buf, const struct iovec *iov,
		    int iovcnt, size_t len)
{
	int i;

	if (!iov) {
		if (len <= EVR_SEND_COPY_MAX)
			copy_small(dst, buf, len);
		else
			memcpy(dst, buf, len);
		return;
	}
	for (i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len)
			memcpy(dst, iov[i].iov_base, iov[i].iov_len);
		dst += iov[i].iov_len;
	}
}

/* Do the len bytes at src lie in the receive buffer of the message held
 * in the running callback (evr_conn_hold)?  Then *lkey is the buffer's
 * key.  Such bytes, sent back with a callback, stay in place until it
 * fires (evr_send's contract), and the buffer is the holder's until the
 * release: the message may go from there, without a copy. */
static bool held_src(const evr_conn *c, const void *src, size_t len,
		     uint32_t *lkey)
{
	const evr_msg *m = c->cur_held;
	uintptr_t off;

	if (!m || !m->buf)
		return false;
	/* below the buffer, off wraps past any size */
	off = (uintptr_t)src - (uintptr_t)m->buf->data;
	if (off > m->buf->size || len > m->buf->size - off)
		return false;
	*lkey = m->buf->lkey;
	return true;
}

/* Does op's message, one buffer above the inline size sent with a
 * callback, lie in a region the user registered (evr_mr_reg)?  Then it
 * goes from there, without a copy (send_prepare, as it is built): the
 * region is op's (busy: not deregistered until send_complete), its key
 * in wqe.lkey.  The bytes stay in place until the callback (evr_send's
 * contract). */
static bool user_src(evr_conn *c, struct evr__op *op)
{
	evr_mr *m;

	if (!op->cb || op->iovcnt || op->u.msg.len <= c->sq.max_inline ||
	    !(m = evr__mr_local(c->ctx, op->u.msg.src, op->u.msg.len)))
		return false;
	m->busy++;
	op->u.msg.umr = m;
	op->wqe.lkey = m->mr->lkey;
	op->zc = true;
	return true;
}

/* Inlined into each entry point: evr_send() runs for every message, and
 * a call with nine arguments costs about 25 instructions of its own. */
static EVR__ALWAYS_INLINE int send_common(evr_conn *c, const void *buf,
					  const struct iovec *iov, int iovcnt,
					  size_t len, evr_op_cb cb, void *arg,
					  bool limit, struct evr__op **opp)
{
	evr_ctx *ctx;
	struct evr__op *op;
	uint64_t max;

	if (!c)
		return -EINVAL;
	ctx = c->ctx;
	if (!evr__conn_open(c))
		return -EPIPE;
	max = c->peer_depth ? c->peer_max_msg : ctx->o.max_msg_size;
	if (len > max)
		return -EMSGSIZE;
	if (limit && c->queued_bytes &&
	    c->queued_bytes + len > ctx->o.send_queue_limit) {
		c->over_limit = true;
		return -ENOBUFS;
	}
	op = evr__conn_op_new(c, EVR_OP_EAGER, &send_class);
	if (!op)
		return -ENOMEM;
	if (len <= EVR_SEND_COPY_MAX) {
		/* copied now: the caller's buffer is free on return */
		copy_in(op->copy, buf, iov, iovcnt, len);
		op->u.msg.src = op->copy;
	} else if (iov) {
		op->u.msg.iov = malloc(sizeof(*iov) * (size_t)iovcnt);
		if (!op->u.msg.iov) {
			evr__op_free(ctx, op);
			return -ENOMEM;
		}
		memcpy(op->u.msg.iov, iov, sizeof(*iov) * (size_t)iovcnt);
		op->iovcnt = (uint16_t)iovcnt;
	} else {
		op->u.msg.src = buf;
		op->zc = cb && held_src(c, buf, len, &op->wqe.lkey);
	}
	/* EVR_OP_EAGER for now: eager or rendezvous is decided at post */
	op->u.msg.len = len;
	op->cb = cb;
	op->arg = arg;
	op->credit = true;
	op->queued = true;
	c->queued_bytes += len;
	c->nsendq_credit++;
	evr__list_add_tail(&c->sendq, &op->h.link);
	evr__conn_dirty(c);
	EVR_PROBE2(msg_send, c, len);
	if (opp)
		*opp = op;
	return 0;
}

/* A message's header, and a call's id after it (call_flags not 0), at
 * out; returns their length. */
static EVR__ALWAYS_INLINE uint32_t encode_hdr(uint8_t *out,
					      const struct evr__hdr *h,
					      uint8_t call_flags, uint32_t id)
{
	evr__hdr_encode(out, h);
	if (!call_flags)
		return EVR_HDR_SIZE;
	evr__call_id_encode(out + EVR_HDR_SIZE, id);
	return EVR_HDR_SIZE + EVR_CALL_ID_SIZE;
}

/*
 * The direct way of a reply (docs/architecture.md): a small message
 * without a callback -- a plain one (flags 0), or a call's reply
 * (EVR_F_REPLY, its id) -- sent from on_recv or on_request on an
 * established conn with nothing queued or batched, a data credit and
 * room in the SQ, goes from evr_send() or evr_reply() to ibv_post_send()
 * at once: inline, in two pieces (the header, and a reply's id, here;
 * the payload from the caller's buffer; both copied by the post),
 * unsignaled, and without an op.  Its WR is counted in the SQ
 * (evr__sq_post_direct), and only an error or a flush of it comes back,
 * through c->direct_wr.  It carries the credits owed so far; the receive
 * of the message it answers is re-posted after the callback returns, and
 * its credit goes with the next message or update.  One message a flush
 * goes this way: further sends from the same round wait for the flush and
 * go in one batch, as before, so streams keep their batching.  Returns 0
 * once posted, 1 when the message must take the queue (also when the
 * post fails: the flush then posts it again, and fails the conn).
 */
static EVR__ALWAYS_INLINE int send_direct(evr_conn *c, const void *buf,
					  size_t len, uint8_t flags,
					  uint32_t id)
{
	evr_ctx *ctx = c->ctx;
	struct evr__hdr h;
	uint8_t hdr[EVR_HDR_SIZE + EVR_CALL_ID_SIZE];
	uint32_t idlen = flags ? EVR_CALL_ID_SIZE : 0;
	/* the header may go in immediate data, a reply's id before the
	 * payload (proto.h) */
	bool imm = evr__agreed(c, EVR_HS_F_IMM);
	uint32_t hlen = (imm ? 0 : EVR_HDR_SIZE) + idlen;

	if (!c->in_recv || c->direct_sent || c->state != EVR_CS_ESTABLISHED ||
	    !c->sq.sge2 || c->sq.max_inline < hlen ||
	    len > c->sq.max_inline - hlen || len > eager_limit(c) - idlen ||
	    !evr__list_empty(&c->sendq) || !evr__list_empty(&c->ctrlq) ||
	    !evr__sq_direct_ok(&c->sq) || ctx->quiet_off ||
	    !evr__credit_can(&c->cr, false))
		return 1;
	h.type = EVR_T_EAGER;
	h.flags = flags; /* nothing queued behind it: no EVR_F_WANT */
	h.len = (uint32_t)(idlen + len);
	h.credits = evr__credit_owed_now(&c->cr);
	if (!imm)
		encode_hdr(hdr, &h, flags, id);
	else if (idlen)
		evr__call_id_encode(hdr, id);
	if (evr__sq_post_direct(&c->sq, hdr, hlen, buf, (uint32_t)len,
				imm ? evr__imm_encode(flags, h.credits) : 0,
				(uintptr_t)&c->direct_wr))
		return 1; /* not sent: the queue sends it */
	evr__credit_sent(&c->cr, h.credits);
	c->direct_sent = true;
	evr__conn_dirty(c);  /* (it is, by the delivery): its flush reopens */
	c->sent_data = true; /* not idle (on_idle) */
	ctx->answer_posts++;
	ctx->st.msgs_sent++;
	ctx->st.bytes_sent += len;
	ctx->st.direct_sends++;
	return 0;
}

int evr__msg_send_call(evr_conn *c, const void *buf, size_t len, uint8_t flags,
		       uint32_t id, evr_op_cb cb, void *arg,
		       struct evr__op **opp)
{
	struct evr__op *op;
	int err;

	/* a reply without a callback may go at once (send_direct) */
	if (!cb && !opp && (flags & EVR_F_REPLY) &&
	    send_direct(c, buf, len, flags, id) == 0)
		return 0;
	/* a reply is no new work: the caller's max_calls bounds replies, the
	 * send queue limit does not */
	err = send_common(c, buf, NULL, 0, len, cb, arg, !(flags & EVR_F_REPLY),
			  &op);

	if (err)
		return err;
	op->call_flags = flags;
	op->call_id = id;
	/* a request's sender waits for the end of its send only while the
	 * peer can read its buffer: an eager one is done with at its post */
	op->cb_at_post = (flags & EVR_F_CALL) != 0;
	if (opp)
		*opp = op;
	return 0;
}

bool evr__msg_withdraw(evr_conn *c, struct evr__op *op)
{
	if (!op->queued)
		return false; /* posted (or being built) */
	evr__list_del(&op->h.link);
	c->nsendq_credit--;
	evr__op_unqueue(c, op);
	evr__op_complete(op, -ECANCELED);
	evr__conn_dirty(c); /* the queue shrank: on_drain may be due */
	return true;
}

/* A CANCEL takes a data credit in the send queue's order, not the
 * reserve control messages may take: it is no answer the peer waits for,
 * and comes behind the request it cancels. */
int evr__msg_send_cancel(evr_conn *c, uint32_t id)
{
	struct evr__op *op = evr__ctrl_op_new(c, EVR_T_CANCEL);

	if (!op)
		return -ENOMEM;
	op->ctrl = false;
	op->u.ctrl.fin_id = id;
	c->nsendq_credit++;
	evr__list_add_tail(&c->sendq, &op->h.link);
	evr__conn_dirty(c);
	return 0;
}

int evr_send(evr_conn *c, const void *buf, size_t len, evr_op_cb cb, void *arg)
{
	if (!buf && len)
		return -EINVAL;
	EVR_CONN_OWNER(c);
	if (!cb && c && send_direct(c, buf, len, 0, 0) == 0)
		return 0;
	return send_common(c, buf, NULL, 0, len, cb, arg, true, NULL);
}

/* evr_send_mt(): the message, copied, on its way to the conn's thread. */
struct mt_send {
	struct evr__call call; /* first */
	evr_conn *c;	       /* a reference */
	evr_op_cb cb;
	void *arg;
	size_t len;
	unsigned char data[];
};

static void mt_send_done(evr_conn *c, int status, void *arg)
{
	struct mt_send *m = arg;

	if (m->cb)
		m->cb(c, status, m->arg);
	free(m);
	evr__conn_unref(c);
}

/* On the conn's thread, in the order the sends were queued.  The message
 * is past its sender's control already: the send queue limit does not
 * apply (the bytes are in memory either way). */
static void mt_send_run(evr_ctx *ctx, struct evr__call *call)
{
	struct mt_send *m = (struct mt_send *)call;
	int rc = send_common(m->c, m->data, NULL, 0, m->len, mt_send_done, m,
			     false, NULL);

	(void)ctx;
	if (rc)
		mt_send_done(m->c, rc, m);
}

int evr_send_mt(evr_conn *c, const void *buf, size_t len, evr_op_cb cb,
		void *arg)
{
	struct mt_send *m;

	if (!c || (!buf && len))
		return -EINVAL;
	/* the ctx's option, not the peer's limit, which its thread owns: a
	 * message between the two fails in cb with -EMSGSIZE */
	if (len > c->ctx->o.max_msg_size)
		return -EMSGSIZE;
	m = malloc(sizeof(*m) + len);
	if (!m)
		return -ENOMEM;
	m->call.run = mt_send_run;
	evr__conn_ref(c);
	m->c = c;
	m->cb = cb;
	m->arg = arg;
	m->len = len;
	if (len)
		memcpy(m->data, buf, len);
	evr__calls_push(&c->ctx->calls, &m->call);
	return 0;
}

int evr_sendv(evr_conn *c, const struct iovec *iov, int iovcnt, evr_op_cb cb,
	      void *arg)
{
	size_t len = 0;
	int i;

	if (iovcnt < 0 || (iovcnt > 0 && !iov) || iovcnt > 1024)
		return -EINVAL;
	for (i = 0; i < iovcnt; i++) {
		if (!iov[i].iov_base && iov[i].iov_len)
			return -EINVAL;
		if (len + iov[i].iov_len < len)
			return -EMSGSIZE;
		len += iov[i].iov_len;
	}
	EVR_CONN_OWNER(c);
	if (iovcnt == 1)
		return send_common(c, iov[0].iov_base, NULL, 0, len, cb, arg,
				   true, NULL);
	return send_common(c, NULL, iovcnt ? iov : NULL, iovcnt, len, cb, arg,
			   true, NULL);
}

static void gather(uint8_t *dst, const struct evr__op *op)
{
	copy_in(dst, op->u.msg.src, op->iovcnt ? op->u.msg.iov : NULL,
		op->iovcnt, op->u.msg.len);
}

/* SQ slots a message needs: a rendezvous also binds its window. */
static unsigned send_wrs(const evr_conn *c, const struct evr__op *op)
{
	return op->u.msg.len > op_eager_limit(c, op) &&
		       c->ctx->rndv_access != EVR_RNDV_REGISTER
		   ? 2
		   : 1;
}

/* Can a message carry a FIN?  A rendezvous request always; an eager
 * message when the FIN's 8 bytes still fit the eager size beside it. */
static bool send_carry(const evr_conn *c, const struct evr__op *op)
{
	size_t lim = op_eager_limit(c, op);

	return op->kind == EVR_OP_EAGER &&
	       (op->u.msg.len > lim ||
		op->u.msg.len + EVR_RNDV_FIN_SIZE <= lim);
}

/* The FIN the message being built carries (c->fin_carry, set by the
 * flush), written at out: its bytes after the header and a call's id.
 * The FIN is then the flush's to free.  Returns its length: 0 if none. */
static uint32_t fin_put(evr_conn *c, uint8_t *out)
{
	const struct evr__op *fin = c->fin_carry;

	if (!fin)
		return 0;
	evr__rndv_fin_encode(out, fin->u.ctrl.fin_id, fin->u.ctrl.fin_status);
	c->fin_carry = NULL;
	return EVR_RNDV_FIN_SIZE;
}

static void bind_complete(struct evr__op *op, int status)
{
	(void)status; /* a failed one fails the conn (send_wc), and the
		       * request behind it is flushed */
	evr__op_free(op->h.conn->ctx, op);
}

static const struct evr__op_class bind_class = { bind_complete, NULL, NULL,
						 NULL };

/* Bind a type 2 memory window over [addr, addr+len) of the source's
 * registration, on c's QP: only this peer can use it, and only for those
 * bytes.  The bind goes into the batch ahead of the request (send_wrs kept
 * the slot), so it is in place before the peer learns the rkey; the
 * window is deallocated at the FIN (rndv_finish). */
static int rndv_bind(evr_conn *c, struct evr__rndv_tx *rt, uintptr_t addr,
		     size_t len, uint32_t *rkey)
{
	evr_ctx *ctx = c->ctx;
	struct ibv_mw *mw = ibv_alloc_mw(ctx->pd, IBV_MW_TYPE_2);
	struct evr__op *op;

	if (!mw) {
		int err = errno ? -errno : -ENOMEM;

		EVR_WARN(ctx,
			 "ibv_alloc_mw failed: %s (the device holds %d "
			 "memory windows; one per rendezvous being sent)",
			 evr_strerror(err), ctx->dattr.max_mw);
		return err;
	}
	op = evr__conn_op_new(c, EVR_OP_BIND, &bind_class);
	if (!op) {
		ibv_dealloc_mw(mw);
		return -ENOMEM;
	}
	op->opcode = IBV_WR_BIND_MW;
	op->send_flags = 0;
	op->wqe.raddr = addr;
	op->wqe.rkey = ibv_inc_rkey(mw->rkey);
	op->u.bind.mw = mw;
	op->u.bind.mr = rt->reg->mr;
	op->u.bind.len = len;
	evr__sq_add(&c->sq, op);
	rt->mw = mw;
	*rkey = op->wqe.rkey;
	ctx->st.rndv_windows++;
	return 0;
}

/* The request of a rendezvous in pool buffer b: the source (gathered into
 * a bounce buffer if it comes in pieces) is registered for the peer to read
 * (through a window bound over it, where the device has them: mr.c) and
 * the op waits for both its send and the peer's FIN. */
static int rndv_prepare(evr_conn *c, struct evr__op *op, struct evr__buf *b)
{
	evr_ctx *ctx = c->ctx;
	struct evr__hdr h = { 0 };
	struct evr__rndv_req r;
	struct evr__rndv_tx *rt = calloc(1, sizeof(*rt));
	const void *src = op->u.msg.src;
	uint32_t idlen;
	int err;

	if (!rt)
		return -ENOMEM;
	if (op->iovcnt) {
		if (!(rt->bounce = malloc(op->u.msg.len))) {
			free(rt);
			return -ENOMEM;
		}
		gather(rt->bounce, op);
		src = rt->bounce;
	}
	err = evr__reg_get(ctx, src, op->u.msg.len, &rt->reg);
	if (!err && ctx->rndv_access != EVR_RNDV_REGISTER) {
		err = rndv_bind(c, rt, (uintptr_t)src, op->u.msg.len, &r.rkey);
		if (err)
			evr__reg_put(ctx, rt->reg);
	} else if (!err) {
		r.rkey = rt->reg->mr->rkey;
	}
	if (err) {
		free(rt->bounce);
		free(rt);
		return err;
	}
	if (op->iovcnt) { /* gathered: the iovecs are no longer needed */
		free(op->u.msg.iov);
		op->iovcnt = 0;
	}
	rt->op = op;
	rt->id = c->next_rndv_id++;
	op->kind = EVR_OP_RNDV;
	op->u.msg.rt = rt;
	op->u.msg.buf = b;
	r.addr = (uintptr_t)src;
	r.len = op->u.msg.len;
	r.id = rt->id;
	idlen = op->call_flags ? EVR_CALL_ID_SIZE : 0;
	if (idlen)
		evr__call_id_encode(b->data + EVR_HDR_SIZE, op->call_id);
	h.len = idlen + fin_put(c, b->data + EVR_HDR_SIZE + idlen);
	h.type = EVR_T_RNDV_REQ;
	h.flags = (uint8_t)(data_flags(c) | op->call_flags |
			    (h.len > idlen ? EVR_F_FIN : 0));
	evr__rndv_req_encode(b->data + EVR_HDR_SIZE + h.len, &r);
	h.len += EVR_RNDV_REQ_SIZE;
	h.credits = evr__credit_piggyback(&c->cr);
	evr__hdr_encode(b->data, &h);
	evr__op_set_send(op, b, EVR_HDR_SIZE + h.len, &c->sq);
	/* done when both the send and the FIN completed */
	op->pending = 2;
	evr__list_add_tail(&c->rndv_wait, &rt->link);
	return 0;
}

/* Build the WR of a message just before it is posted (its class's
 * prepare): eager, or the request of a rendezvous. */
static int send_prepare(evr_conn *c, struct evr__op *op)
{
	evr_ctx *ctx = c->ctx;
	struct evr__hdr h = { 0 };
	struct evr__buf *b;
	/* a call's id follows the header */
	uint32_t idlen = op->call_flags ? EVR_CALL_ID_SIZE : 0;
	/* the header may go in immediate data (proto.h), not that of a
	 * message that carries a FIN */
	bool imm = evr__agreed(c, EVR_HS_F_IMM) && !c->fin_carry;
	uint32_t hlen = (imm ? 0 : EVR_HDR_SIZE) + idlen;
	bool rndv;
	int err;

	if (op->kind != EVR_OP_EAGER)
		return -EINVAL; /* only messages come here */
	if (op->u.msg.len > c->peer_max_msg)
		return -EMSGSIZE;
	rndv = op->u.msg.len > op_eager_limit(c, op);
	if (!rndv && !op->iovcnt && c->sq.sge2 && !c->fin_carry &&
	    hlen + op->u.msg.len <= c->sq.max_inline) {
		/* inline in two pieces: no buffer, no copy but the post's */
		b = NULL;
		op->split = true;
		op->wqe.laddr = (uintptr_t)op->u.msg.src;
		op->wqe.len = (uint32_t)op->u.msg.len;
		op->wqe.lkey = 0;
		op->opcode = IBV_WR_SEND;
		op->send_flags = IBV_SEND_INLINE;
	} else if (!rndv && imm && !idlen && !op->cb_at_post &&
		   (op->zc || user_src(c, op))) {
		b = NULL; /* from the held buffer or the user's region */
	} else {
		b = evr__pool_get(&ctx->pool);
		if (!b)
			return -ENOMEM;
	}
	if (rndv) {
		op->cb_at_post = false; /* a request read by the peer: at FIN */
		err = rndv_prepare(c, op, b);
		if (err)
			evr__pool_put(&ctx->pool, b);
		return err;
	}
	h.type = EVR_T_EAGER;
	h.flags = (uint8_t)(data_flags(c) | op->call_flags);
	h.len = (uint32_t)(idlen + op->u.msg.len);
	h.credits = evr__credit_piggyback(&c->cr);
	if (imm) {
		/* a call's id and the payload: in two pieces with no header,
		 * from the held receive buffer (no id), or gathered */
		if (op->split) {
			if (idlen)
				evr__call_id_encode(op->ihdr, op->call_id);
			op->ihdr_len = (uint8_t)idlen;
		} else if (!b) {
			op->wqe.laddr = (uintptr_t)op->u.msg.src;
			op->wqe.len = h.len; /* wqe.lkey: the buffer's */
			op->send_flags = 0;  /* above max_inline (not split) */
			ctx->st.zero_copy_sends++;
		} else {
			if (idlen)
				evr__call_id_encode(b->data, op->call_id);
			gather(b->data + idlen, op);
			op->u.msg.buf = b;
			evr__op_set_send(op, b, h.len, &c->sq);
		}
		op->opcode = IBV_WR_SEND_WITH_IMM;
		op->wqe.imm = evr__imm_encode(h.flags, h.credits);
	} else if (op->split) {
		op->ihdr_len = (uint8_t)encode_hdr(op->ihdr, &h, op->call_flags,
						   op->call_id);
	} else {
		/* a carried FIN after a call's id, then the payload */
		uint32_t fin = fin_put(c, b->data + EVR_HDR_SIZE + idlen);

		h.len += fin;
		h.flags |= fin ? EVR_F_FIN : 0;
		encode_hdr(b->data, &h, op->call_flags, op->call_id);
		gather(b->data + EVR_HDR_SIZE + idlen + fin, op);
		op->u.msg.buf = b;
		evr__op_set_send(op, b, EVR_HDR_SIZE + h.len, &c->sq);
	}
	/* Nobody waits for the completion of a message without a callback,
	 * nor for that of a call's eager request, which is the caller's no
	 * more once posted (copied, or inline: the flush calls back then,
	 * cb_at_post): its WR may end the batch unsignaled (sq.c), and it
	 * counts as sent once posted -- its completion may come much later. */
	op->quiet = (!op->cb || op->cb_at_post) && !ctx->quiet_off;
	if (op->quiet) {
		ctx->st.msgs_sent++;
		ctx->st.bytes_sent += op->u.msg.len;
	}
	return 0;
}

/* ---- completion of ops ---- */

static void rndv_finish(evr_conn *c, struct evr__op *op)
{
	evr_ctx *ctx = c->ctx;
	struct evr__rndv_tx *rt = op->u.msg.rt;

	/* the window first: a registration with a window bound cannot go */
	if (rt->mw && ibv_dealloc_mw(rt->mw))
		EVR_ERR(ctx, "ibv_dealloc_mw failed: %s", evr_strerror(-errno));
	evr__reg_put(ctx, rt->reg);
	free(rt->bounce);
	free(rt);
	if (op->status == 0) {
		ctx->st.msgs_sent++;
		ctx->st.bytes_sent += op->u.msg.len;
		ctx->st.rndv_sent++;
	}
	if (op->cb)
		op->cb(c, evr__op_user_status(c, op->status), op->arg);
	evr__op_free(ctx, op);
}

static void rx_start_reads(evr_conn *c);
static int rx_read_next(evr_conn *c, struct evr__rx *rx);
static void deliver_ready(evr_conn *c);
static void rx_fins(evr_conn *c);

static void rread_done(evr_conn *c, struct evr__op *op, int status)
{
	struct evr__rx *rx = op->u.rx;
	int err;

	if (status && !rx->status)
		rx->status = status;
	if (rx->stage && !rx->status) {
		/* staged: the chunk just read, to its place */
		EVR__VG_DEFINED(rx->stage->mem, op->wqe.len);
		memcpy(rx->rb->mem + (op->wqe.raddr - rx->raddr),
		       rx->stage->mem, op->wqe.len);
	}
	if (--rx->reads > 0)
		return;
	if (rx->stage && !rx->status && rx->next < rx->len) {
		if ((err = rx_read_next(c, rx)))
			evr__conn_fail(c, err);
		else
			evr__conn_dirty(c);
		return;
	}
	c->rndv_active--;
	evr__rbuf_put(&c->ctx->pool, rx->stage);
	rx->stage = NULL;
	if (rx->status) {
		/* The responder refusing the read is the peer's doing (a bad
		 * address, length or key); a flush or a transport timeout is
		 * the connection's, and keeps its own status. */
		if (rx->status == -EACCES || rx->status == -EINVAL ||
		    rx->status == -EREMOTEIO) {
			EVR_WARN(c->ctx,
				 "rendezvous read of %zu bytes failed (%s): "
				 "the peer advertised a bad buffer",
				 rx->len, evr_err_name(rx->status));
			evr__conn_fail(c, -EPROTO);
		} else if (rx->status != -ECANCELED) {
			evr__conn_fail(c, rx->status);
		}
		return; /* freed with the rx queue at teardown */
	}
	rx->ready = true;
	EVR__VG_DEFINED(rx->rb->mem, rx->len); /* the device read it in */
	c->ctx->st.rndv_recv++;
	rx_fins(c); /* tell the sender it may reuse its buffer */
	rx_start_reads(c);
	deliver_ready(c);
	evr__conn_dirty(c);
}

/* The end of a message send (its class's complete): eager when its send
 * completed; rendezvous when both its request's send and the FIN have. */
static void send_complete(struct evr__op *op, int status)
{
	evr_conn *c = op->h.conn;
	evr_ctx *ctx = c->ctx;

	if (op->u.msg.buf) {
		evr__pool_put(&ctx->pool, op->u.msg.buf);
		op->u.msg.buf = NULL;
	}
	if (op->u.msg.umr) { /* sent from the user's region */
		op->u.msg.umr->busy--;
		op->u.msg.umr = NULL;
	}
	if (op->kind == EVR_OP_RNDV) {
		if (status && !op->status)
			op->status = status;
		if (--op->pending == 0)
			rndv_finish(c, op);
		return;
	}
	if (status == 0 && !op->quiet) {
		ctx->st.msgs_sent++;
		ctx->st.bytes_sent += op->u.msg.len;
	}
	if (op->iovcnt)
		free(op->u.msg.iov);
	if (op->cb)
		op->cb(c, evr__op_user_status(c, status), op->arg);
	evr__op_free(ctx, op);
}

/* One chunk of a rendezvous read ended (its class's complete). */
static void rread_complete(struct evr__op *op, int status)
{
	rread_done(op->h.conn, op, status);
	evr__op_free(op->h.conn->ctx, op);
}

static const struct evr__op_class rread_class = { rread_complete, NULL, NULL,
						  NULL };

/* Rendezvous sends whose FIN will never come (the conn is going away). */
static void rndv_fail_waiting(evr_conn *c, int status)
{
	struct evr__rndv_tx *rt;

	while ((rt = evr__list_pop_entry(&c->rndv_wait, struct evr__rndv_tx,
					 link))) {
		struct evr__op *op = rt->op;

		if (!op->status)
			op->status = status;
		if (--op->pending == 0)
			rndv_finish(c, op);
	}
}

/* ---- receiving ---- */

/* A consumed receive buffer of c is free again: re-posted, and its
 * credit owed to the peer (with a shared queue, as the bank decides). */
static void repost(evr_conn *c, struct evr__buf *b)
{
	if (c->srq || !evr__conn_can_post(c)) {
		evr__conn_recv_put(c, b);
		return;
	}
	evr__list_add_head(&c->repost, evr__buf_link(b));
	c->nrepost++;
	evr__conn_dirty(c);
}

/* A message to its callback: on_recv, or a call's request or reply to
 * the call layer (flags EVR_F_CALL / EVR_F_REPLY, id). */
static EVR__ALWAYS_INLINE void deliver(evr_conn *c, struct evr__buf *b,
				       struct evr__rbuf *rb, const void *data,
				       size_t len, uint8_t flags, uint32_t id)
{
	evr_ctx *ctx = c->ctx;
	evr_msg m;

	ctx->st.msgs_recv++;
	ctx->st.bytes_recv += len;
	EVR_PROBE2(msg_recv, c, len);
	if (c->state >= EVR_CS_FAILED || (!flags && !c->o.on_recv)) {
		if (b)
			repost(c, b);
		evr__rbuf_put(&ctx->pool, rb);
		return;
	}
	memset(&m, 0, sizeof(m));
	m.ctx = c->ctx;
	m.conn = c;
	m.buf = b;
	m.rb = rb;
	m.data = data;
	m.len = len;
	c->cur_msg = &m;
	c->cur_held = NULL;
	c->cur_taken = false;
	c->in_recv = true;
	if (flags & EVR_F_CALL)
		ctx->hooks.rpc_request(c, id, data, len);
	else if (flags & EVR_F_REPLY)
		ctx->hooks.rpc_reply(c, id, data, len);
	else
		c->o.on_recv(c, data, len, c->o.arg);
	c->in_recv = false;
	c->cur_msg = NULL;
	c->cur_held = NULL;
	if (c->cur_taken) { /* ownership moved to the evr_msg */
		/* one receive fewer posted: credits we owe may now be all the
		 * peer can wait for (evr__credit_peer_starved) */
		evr__conn_dirty(c);
		return;
	}
	if (b)
		repost(c, b);
	evr__rbuf_put(&c->ctx->pool, rb);
}

static struct evr__rx *rx_first(evr_conn *c)
{
	return evr__list_first_entry(&c->rxq, struct evr__rx, link);
}

static void deliver_ready(evr_conn *c)
{
	struct evr__rx *rx;

	while ((rx = rx_first(c)) && rx->ready) {
		evr__list_del(&rx->link);
		if (rx->dropped) { /* a call given up, a late reply */
			if (rx->buf)
				repost(c, rx->buf);
			evr__rbuf_put(&c->ctx->pool, rx->rb);
		} else if (rx->rndv) {
			deliver(c, NULL, rx->rb, rx->rb->mem, rx->len,
				rx->call_flags, rx->call_id);
		} else {
			deliver(c, rx->buf, NULL, rx->data, rx->len,
				rx->call_flags, rx->call_id);
		}
		free(rx);
	}
}

/* Queue the RNDV_FIN of rx's message with status. */
static int rx_fin(evr_conn *c, const struct evr__rx *rx, int status)
{
	struct evr__op *fin = evr__ctrl_op_new(c, EVR_T_RNDV_FIN);

	if (!fin)
		return -ENOMEM;
	fin->u.ctrl.fin_id = rx->id;
	fin->u.ctrl.fin_status = status;
	evr__list_add_tail(&c->ctrlq, &fin->h.link);
	evr__conn_dirty(c);
	return 0;
}

/* The FINs of rendezvous messages, in the order the messages came: the
 * sender matches FINs against its rendezvous sends in order.  A message
 * read (ready) gets 0, one not to be read (skip) -ECANCELED; a read that
 * ends before an earlier one's waits for it.  The walk stops at the first
 * message still being read or waiting to be, so it passes each message
 * once or twice. */
static void rx_fins(evr_conn *c)
{
	struct evr__list *pos;

	evr__list_for_each(pos, &c->rxq)
	{
		struct evr__rx *rx =
		    evr__container_of(pos, struct evr__rx, link);
		int status = 0;

		if (!rx->rndv || rx->fin)
			continue;
		if (rx->skip && !rx->started) {
			rx->started = rx->ready = true;
			status = -ECANCELED;
		} else if (!rx->ready) {
			return; /* being read, or waiting to be */
		}
		rx->fin = true;
		if (rx_fin(c, rx, status)) {
			evr__conn_fail(c, -ENOMEM);
			return;
		}
	}
}

static void rx_push(evr_conn *c, struct evr__rx *rx)
{
	evr__list_add_tail(&c->rxq, &rx->link);
}

/* The chunk size of rendezvous reads: one RDMA READ each. */
static size_t rndv_chunk(const evr_ctx *ctx)
{
	return EVR__MIN((size_t)ctx->max_msg_sz, (size_t)EVR_RNDV_CHUNK);
}

/* Under a locked-memory limit a message larger than an eighth of it is
 * not registered whole: it is read a chunk at a time into a registered
 * staging buffer and copied out (a server under the usual 8 MiB limit
 * receives messages of 64 MiB this way). */
static bool rndv_staged(const evr_ctx *ctx, size_t len)
{
	return ctx->memlock != UINT64_MAX && len > ctx->memlock / 8 &&
	       len > rndv_chunk(ctx);
}

/* Queue the read of bytes [off, off + n) of rx's message into laddr. */
static int rx_queue_read(evr_conn *c, struct evr__rx *rx, size_t off, size_t n,
			 uint8_t *laddr, uint32_t lkey)
{
	struct evr__op *op = evr__conn_op_new(c, EVR_OP_RREAD, &rread_class);

	if (!op)
		return -ENOMEM;
	op->u.rx = rx;
	op->opcode = IBV_WR_RDMA_READ;
	op->wqe.laddr = (uintptr_t)laddr;
	op->wqe.len = (uint32_t)n;
	op->wqe.lkey = lkey;
	op->wqe.raddr = rx->raddr + off;
	op->wqe.rkey = rx->rkey;
	rx->reads++;
	evr__list_add_tail(&c->ctrlq, &op->h.link);
	return 0;
}

/* A staged message's next chunk, into the staging buffer. */
static int rx_read_next(evr_conn *c, struct evr__rx *rx)
{
	size_t n = EVR__MIN(rndv_chunk(c->ctx), rx->len - rx->next);
	int err = rx_queue_read(c, rx, rx->next, n, rx->stage->mem,
				rx->stage->mr->lkey);

	if (!err)
		rx->next += n;
	return err;
}

/* Where rx's message is read into: registered whole, or (staged) plain
 * memory and a registered buffer of one chunk. */
static int rx_alloc(evr_ctx *ctx, struct evr__rx *rx)
{
	if (!rndv_staged(ctx, rx->len)) {
		rx->rb = evr__rbuf_get(&ctx->pool, rx->len);
		return rx->rb ? 0 : -ENOMEM;
	}
	rx->rb = evr__rbuf_plain(rx->len);
	rx->stage = evr__rbuf_get(&ctx->pool, rndv_chunk(ctx));
	return rx->rb && rx->stage ? 0 : -ENOMEM;
}

/* Start the reads of queued rendezvous messages, EVR_RNDV_ACTIVE at most. */
static void rx_start_reads(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	struct evr__rx *rx;
	size_t chunk = rndv_chunk(ctx);

	/* A closing conn finishes the reads it started, no more: a peer that
	 * keeps sending must not hold a graceful close open. */
	if (!evr__conn_open(c))
		return;
	for (rx = rx_first(c); rx && c->rndv_active < EVR_RNDV_ACTIVE;
	     rx = evr__list_entry(evr__list_next(&c->rxq, &rx->link),
				  struct evr__rx, link)) {
		size_t off;
		int err = 0;

		if (!rx->rndv || rx->started || rx->skip)
			continue;
		rx->started = true;
		if (rx_alloc(ctx, rx)) {
			EVR_ERR(ctx,
				"cannot allocate %zu bytes for a "
				"rendezvous message",
				rx->len);
			evr__conn_fail(c, -ENOMEM);
			return;
		}
		c->rndv_active++;
		if (rx->stage)
			err = rx_read_next(c, rx);
		for (off = 0; !rx->stage && !err && off < rx->len; off += chunk)
			err =
			    rx_queue_read(c, rx, off,
					  EVR__MIN(chunk, rx->len - off),
					  rx->rb->mem + off, rx->rb->mr->lkey);
		if (err) {
			evr__conn_fail(c, err);
			return;
		}
	}
	evr__conn_dirty(c);
}

static void rx_free_all(evr_conn *c)
{
	struct evr__rx *rx;

	while ((rx = rx_first(c))) {
		if (rx->rndv && rx->reads > 0)
			break; /* reads still posted: freed when they flush */
		evr__list_del(&rx->link);
		evr__rbuf_put(&c->ctx->pool, rx->rb);
		evr__rbuf_put(&c->ctx->pool, rx->stage);
		if (rx->buf)
			evr__conn_recv_put(c, rx->buf);
		free(rx);
	}
}

static void proto_error(evr_conn *c, const char *why)
{
	EVR_WARN(c->ctx, "conn %p: protocol error from peer: %s", (void *)c,
		 why);
	evr__conn_fail(c, -EPROTO);
}

#define CALLF (EVR_F_CALL | EVR_F_REPLY)

/* The peer gave up its call id: a request of it still waiting to be read
 * is not read (its FIN says -ECANCELED), one being read or waiting for
 * delivery is not delivered; one delivered is the call layer's. */
static void rx_cancel(evr_conn *c, uint32_t id)
{
	struct evr__list *pos;

	evr__list_for_each(pos, &c->rxq)
	{
		struct evr__rx *rx =
		    evr__container_of(pos, struct evr__rx, link);

		if (!(rx->call_flags & EVR_F_CALL) || rx->call_id != id ||
		    rx->dropped)
			continue;
		rx->dropped = true;
		if (c->o.on_request) /* else it is unserved, not cancelled */
			c->ctx->st.requests_cancelled++;
		if (rx->rndv && !rx->started) {
			rx->skip = true; /* it held no read slot */
			rx_fins(c);
		}
		deliver_ready(c);
		return;
	}
	c->ctx->hooks.rpc_cancel(c, id);
}

/* The peer's FIN for our oldest rendezvous send (they come in order);
 * -EPROTO if it names another. */
static int fin_got(evr_conn *c, const struct evr__parsed *p)
{
	struct evr__rndv_tx *rt =
	    evr__list_first_entry(&c->rndv_wait, struct evr__rndv_tx, link);
	struct evr__op *op;

	if (!rt || rt->id != p->fin_id)
		return -EPROTO;
	evr__list_del(&rt->link);
	op = rt->op;
	if (p->fin_status && !op->status)
		op->status = p->fin_status;
	if (--op->pending == 0)
		rndv_finish(c, op);
	return 0;
}

/* What each type of message does once parsed and its credits counted
 * (process_recv): the handler owns b from here -- it reposts it, keeps it
 * for delivery, or puts it back on a protocol error.  A new message type
 * is its parser's case in proto.c, its handler here and its entry in
 * rx_types[]. */
typedef void (*rx_type_fn)(evr_conn *c, struct evr__buf *b,
			   const struct evr__parsed *p);

/* a credit update; with a shared queue, the idle cycle's ask or give-back
 * (conn.c on_idle): only towards a window we lend, which the bank has
 * grown already for an ask */
static void rx_credit(evr_conn *c, struct evr__buf *b,
		      const struct evr__parsed *p)
{
	evr_ctx *ctx = c->ctx;

	if (p->hdr.flags && !(c->srq && c->lend_init)) {
		evr__conn_recv_put(c, b);
		proto_error(c, "window flags from a peer lent no window");
		return;
	}
	if (p->give && evr__bank_giveback(&ctx->bank, &c->bank, p->give)) {
		evr__conn_recv_put(c, b);
		proto_error(c, "more credits given back than lent");
		return;
	}
	/* with a shared queue the bank tells the credit state when (and if)
	 * it re-grants this buffer's credit; an ask is no bare update: its
	 * credit comes back at once (a starved peer), so that it can ask
	 * again */
	if (c->srq)
		b->update = !(p->hdr.flags & EVR_F_WANT);
	else
		evr__credit_got_update(&c->cr);
	repost(c, b);
}

/* the peer closes gracefully: everything it sent is here */
static void rx_bye(evr_conn *c, struct evr__buf *b, const struct evr__parsed *p)
{
	(void)p;
	c->peer_bye = true;
	repost(c, b);
}

/* an eager message: delivered now, or queued behind a rendezvous read */
static void rx_eager(evr_conn *c, struct evr__buf *b,
		     const struct evr__parsed *p)
{
	struct evr__rx *rx;

	if (evr__list_empty(&c->rxq)) {
		deliver(c, b, NULL, p->payload, p->plen, p->hdr.flags & CALLF,
			p->call_id);
		return;
	}
	rx = calloc(1, sizeof(*rx));
	if (!rx) {
		evr__conn_recv_put(c, b);
		evr__conn_fail(c, -ENOMEM);
		return;
	}
	rx->ready = true;
	rx->buf = b;
	rx->data = (uint8_t *)p->payload;
	rx->len = p->plen;
	rx->call_flags = p->hdr.flags & CALLF;
	rx->call_id = p->call_id;
	rx_push(c, rx);
}

/* a rendezvous request: read the peer's buffer, in order of arrival */
static void rx_rndv_req(evr_conn *c, struct evr__buf *b,
			const struct evr__parsed *p)
{
	evr_ctx *ctx = c->ctx;
	struct evr__rx *rx;

	repost(c, b);
	rx = calloc(1, sizeof(*rx));
	if (!rx) {
		evr__conn_fail(c, -ENOMEM);
		return;
	}
	rx->rndv = true;
	rx->len = p->rndv.len;
	rx->raddr = p->rndv.addr;
	rx->rkey = p->rndv.rkey;
	rx->id = p->rndv.id;
	rx->call_flags = p->hdr.flags & CALLF;
	rx->call_id = p->call_id;
	if ((rx->call_flags & EVR_F_REPLY) &&
	    !ctx->hooks.rpc_live(c, rx->call_id)) {
		/* its call is over: not read, no copy */
		rx->skip = rx->dropped = true;
		ctx->st.late_replies++;
	}
	rx_push(c, rx);
	rx_fins(c);
	rx_start_reads(c);
	deliver_ready(c); /* a skipped one at the head goes */
}

/* the peer gave up a call it made */
static void rx_cancel_call(evr_conn *c, struct evr__buf *b,
			   const struct evr__parsed *p)
{
	repost(c, b);
	rx_cancel(c, p->call_id);
}

/* the peer read one of our rendezvous messages */
static void rx_rndv_fin(evr_conn *c, struct evr__buf *b,
			const struct evr__parsed *p)
{
	repost(c, b);
	if (fin_got(c, p))
		proto_error(c, "rendezvous finish for an unknown id");
}

/* Indexed by type: the parser let through only the types listed here. */
static const rx_type_fn rx_types[EVR_T_MAX + 1] = {
	[EVR_T_EAGER] = rx_eager,	[EVR_T_RNDV_REQ] = rx_rndv_req,
	[EVR_T_RNDV_FIN] = rx_rndv_fin, [EVR_T_CREDIT] = rx_credit,
	[EVR_T_BYE] = rx_bye,		[EVR_T_CANCEL] = rx_cancel_call,
};

static void process_recv(evr_conn *c, struct evr__buf *b,
			 const struct ibv_wc *wc)
{
	evr_ctx *ctx = c->ctx;
	/* the sender goes eager up to min(its eager size, ours): the same
	 * negotiated limit must judge what arrives */
	struct evr__limits lim = { (uint32_t)eager_limit(c),
				   ctx->o.max_msg_size, c->agreed };
	struct evr__parsed p;
	const char *why = "?";

	if (c->srq) {
		/* the bank first: it counts what the sender's window allowed
		 * (its header's EVR_F_WANT, checked again by the parser) */
		bool want =
		    wc->opcode == IBV_WC_RECV &&
		    ((wc->wc_flags & IBV_WC_WITH_IMM)
			 ? (be32toh(wc->imm_data) >> 16) & EVR_F_WANT
			 : wc->byte_len >= 2 && (b->data[1] & EVR_F_WANT));

		if (evr__bank_consume(&ctx->bank, &c->bank, want)) {
			evr__srq_put_back(ctx, b);
			proto_error(c, "a message beyond the credits lent");
			return;
		}
	}
	if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
		uint32_t imm = be32toh(wc->imm_data);

		repost(c, b);
		if (c->o.on_imm && c->state < EVR_CS_FAILED)
			c->o.on_imm(c, imm, c->o.arg);
		return;
	}
	if (wc->wc_flags & IBV_WC_WITH_IMM
		? evr__imm_parse(wc->imm_data, b->data, wc->byte_len, &lim, &p,
				 &why)
		: evr__msg_parse(b->data, wc->byte_len, &lim, &p, &why)) {
		evr__conn_recv_put(c, b);
		proto_error(c, why);
		return;
	}
	if (evr__credit_grant(&c->cr, p.hdr.credits)) {
		evr__conn_recv_put(c, b);
		proto_error(c, "credit overflow: more credits returned than "
			       "were used");
		return;
	}
	if (p.hdr.credits)
		evr__conn_dirty(c); /* queued sends may go now */
	if (p.hdr.flags & EVR_F_FIN) {
		/* a FIN carried by data: first, as if it had come alone */
		if (fin_got(c, &p)) {
			evr__conn_recv_put(c, b);
			proto_error(c, "rendezvous finish for an unknown id");
			return;
		}
		if (c->state >= EVR_CS_FAILED) {
			/* its callback failed the conn: what came after the
			 * FIN goes unread (evr__msg_recv_done) */
			evr__conn_recv_put(c, b);
			evr__conn_kick(c);
			return;
		}
	}

	if (p.hdr.type == EVR_T_EAGER) { /* the common case: a direct call */
		rx_eager(c, b, &p);
		return;
	}
	if (p.hdr.type > EVR_T_MAX || !rx_types[p.hdr.type]) {
		evr__conn_recv_put(c, b); /* the parser knows no other */
		proto_error(c, "unknown message type");
		return;
	}
	rx_types[p.hdr.type](c, b, &p);
}

/* The CQ's entry for a receive buffer (its head's done). */
void evr__msg_recv_done(struct evr__wr *w, const struct ibv_wc *wc)
{
	struct evr__buf *b = evr__buf_of(w);
	evr_conn *c = w->conn;
	evr_ctx *ctx = c->ctx;

	c->last_act = ev_now(ctx->loop); /* a sign of life (keepalive) */
	if (!c->srq) /* a shared queue's completions come in good */
		c->recv_posted--;
	if (wc->status != IBV_WC_SUCCESS) {
		int err = evr__wc_errno(wc->status);

		evr__pool_put(&ctx->pool, b);
		/* A receive fails (other than by a flush) only because of what
		 * arrived: typically a message larger than the buffer, which
		 * providers report as a length or a QP operation error. */
		if (err == -ECANCELED)
			evr__conn_fail(c, err);
		else
			proto_error(c, "receive failed: the message does not "
				       "fit the receive buffer, or is invalid");
		return;
	}
	if (wc->opcode == IBV_WC_RECV) /* the device wrote the buffer */
		EVR__VG_DEFINED(b->data, EVR__MIN(wc->byte_len, b->size));
	if (c->state >= EVR_CS_FAILED) {
		/* no one reads it; its credit was used all the same */
		if (c->srq && evr__bank_consume(&ctx->bank, &c->bank, false))
			evr__srq_put_back(ctx, b);
		else
			evr__conn_recv_put(c, b);
		evr__conn_kick(c);
		return;
	}
	if (c->state < EVR_CS_ESTABLISHED) {
		/* arrived before our ESTABLISHED event: keep it for later */
		b->byte_len = wc->byte_len;
		b->opcode = (uint8_t)wc->opcode;
		b->imm = wc->imm_data;
		b->wc_flags = (uint8_t)(wc->wc_flags & IBV_WC_WITH_IMM);
		evr__list_add_tail(&c->early, evr__buf_link(b));
		return;
	}
	process_recv(c, b, wc);
}

/* ---- holding received messages ---- */

/* Held message handles kept for reuse at most (a server that answers
 * from the received buffer holds one per message). */
#define EVR_MSGS_FREE_MAX 64

static void msg_free(evr_ctx *ctx, evr_msg *m)
{
	evr__stash_put(&ctx->msgs_free, m, EVR_MSGS_FREE_MAX);
}

evr_msg *evr_conn_hold(evr_conn *c)
{
	evr_msg *m;

	EVR_CONN_OWNER(c);
	if (!c || !c->in_recv || !c->cur_msg)
		return NULL;
	if (c->cur_taken)
		return c->cur_held; /* NULL once released: its buffer is gone */
	m = evr__stash_get(&c->ctx->msgs_free, sizeof(*m));
	if (!m)
		return NULL;
	*m = *c->cur_msg;
	evr__list_add_tail(&c->ctx->held, &m->link);
	c->cur_held = m;
	c->cur_taken = true;
	return m;
}

void evr__msg_redeliver(evr_conn *c, evr_msg *m,
			void (*fn)(evr_conn *c, const void *data, size_t len,
				   void *arg),
			void *arg)
{
	evr_msg cur = *m, *outer = c->cur_msg;
	struct evr__held_frame fr = { c->cur_held, c->held_up };
	bool outer_in = c->in_recv, outer_taken = c->cur_taken, taken;

	c->cur_msg = &cur;
	c->cur_held = NULL;
	c->cur_taken = false;
	c->held_up = &fr; /* fn may release the outer copy */
	c->in_recv = true;
	fn(c, m->data, m->len, arg);
	taken = c->cur_taken;
	c->in_recv = outer_in;
	c->cur_msg = outer;
	c->held_up = fr.up;
	c->cur_held = fr.held; /* NULL if fn released it */
	c->cur_taken = outer_taken;
	if (taken) { /* taken over: the buffer is the new handle's */
		evr__list_del(&m->link);
		msg_free(c->ctx, m);
		return;
	}
	evr_msg_release(m);
}

const void *evr_msg_data(const evr_msg *m)
{
	return m->data;
}

size_t evr_msg_len(const evr_msg *m)
{
	return m->len;
}

void evr_msg_release(evr_msg *m)
{
	EVR_OWNER(m ? m->ctx : NULL);
	if (!m)
		return;
	evr__list_del(&m->link);
	if (m->conn) { /* released in the callback, or one outside it */
		struct evr__held_frame *fr;

		if (m->conn->cur_held == m)
			m->conn->cur_held = NULL;
		for (fr = m->conn->held_up; fr; fr = fr->up)
			if (fr->held == m)
				fr->held = NULL;
	}
	if (m->buf) {
		if (m->conn) {
			repost(m->conn, m->buf);
		} else if (m->ctx->srq) {
			/* its conn is gone: the bank counts it an orphan */
			evr__bank_repost_orphan(&m->ctx->bank);
			evr__srq_put_back(m->ctx, m->buf);
		} else {
			evr__pool_put(&m->ctx->pool, m->buf);
		}
	}
	evr__rbuf_put(&m->ctx->pool, m->rb);
	msg_free(m->ctx, m);
}

/* The conn is being freed: its held messages stay valid, detached. */
void evr__msg_detach_held(evr_conn *c)
{
	struct evr__list *pos, *tmp;

	evr__list_for_each_safe(pos, tmp, &c->ctx->held)
	{
		evr_msg *m = evr__container_of(pos, evr_msg, link);

		if (m->conn == c)
			m->conn = NULL;
	}
}

/* The conn ends (the conn_teardown hook): rendezvous sends whose FIN will
 * not come end with status; messages waiting for delivery are dropped,
 * but for those whose reads are still posted (freed when they flush). */
void evr__msg_teardown(evr_conn *c, int status)
{
	rndv_fail_waiting(c, status);
	rx_free_all(c);
}
