/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The peer fixture, see peer.h.  Assertions are cmocka's: a peer that
 * cannot do what a test asks (no receive posted, a frame too large for it)
 * fails the test.
 */
#include "config.h"

#include <endian.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "peer.h"

void peer_ctx_opts(struct evr_ctx_opts *o)
{
	evr_ctx_opts_init(o);
	o->device = MOCK_DEV_NAME;
	o->mode = EVR_MODE_POLL;
	o->keepalive_ms = 0;
	o->signal_interval = 1;
	o->sq_depth = 32;
	o->recv_depth = 8;
	o->eager_size = 1024;
	o->max_msg_size = 1u << 20;
}

evr_ctx *peer_ctx_new(const struct evr_ctx_opts *o)
{
	struct evr_ctx_opts d;
	evr_ctx *ctx = NULL;

	if (!o) {
		peer_ctx_opts(&d);
		o = &d;
	}
	assert_int_equal(evr_ctx_create(&ctx, NULL, o), 0);
	assert_non_null(ctx);
	return ctx;
}

void peer_ctx_free(evr_ctx *ctx)
{
	evr_ctx_destroy(ctx);
	mock_cm_reset();
	mock_reset();
}

void peer_mocks_reset(void)
{
	mock_reset();
	mock_cm_reset();
}

void peer_pump(evr_ctx *ctx)
{
	int i;

	for (i = 0; i < 8; i++)
		assert_int_equal(evr_ctx_process(ctx), 0);
}

/* ---- callbacks ---- */

void peer_sleep_ms(unsigned ms)
{
	struct timespec ts = {0, (long)ms * 1000000};

	nanosleep(&ts, NULL);
}

unsigned peer_send_credits(evr_conn *c)
{
	struct evr_conn_info info;

	assert_int_equal(evr_conn_info(c, &info), 0);
	return info.send_credits;
}

static void on_connect(evr_conn *c, int status, void *arg)
{
	struct peer *p = arg;

	p->connects++;
	p->connect_status = status;
	p->connect_state = c->state;
	if (status)
		p->conn = NULL; /* freed when this returns */
}

static void on_close(evr_conn *c, int status, void *arg)
{
	struct peer *p = arg;

	p->closes++;
	p->close_status = status;
	p->close_state = c->state;
	p->ops_at_close = p->nop_calls;
	p->calls_at_close = p->ncall_calls;
	p->conn = NULL;
}

static void on_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct peer *p = arg;

	(void)c;
	assert_true(p->nmsgs < PEER_MAX_MSGS);
	p->msgs[p->nmsgs].data = malloc(len ? len : 1);
	assert_non_null(p->msgs[p->nmsgs].data);
	memcpy(p->msgs[p->nmsgs].data, data, len);
	p->msgs[p->nmsgs].len = len;
	p->nmsgs++;
	if (p->on_recv)
		p->on_recv(p, data, len);
}

static void on_imm(evr_conn *c, uint32_t imm, void *arg)
{
	struct peer *p = arg;

	(void)c;
	p->imms++;
	p->imm = imm;
}

static void on_request(evr_conn *c, evr_request *r, const void *data,
		       size_t len, void *arg)
{
	struct peer *p = arg;

	assert_ptr_equal(evr_request_conn(r), c);
	assert_true(p->nreqs < PEER_MAX_MSGS);
	p->reqs[p->nreqs].r = r;
	p->reqs[p->nreqs].data = malloc(len ? len : 1);
	assert_non_null(p->reqs[p->nreqs].data);
	if (len)
		memcpy(p->reqs[p->nreqs].data, data, len);
	p->reqs[p->nreqs].len = len;
	p->nreqs++;
	if (p->on_request)
		p->on_request(p, r, data, len);
}

static void on_drain(evr_conn *c, void *arg)
{
	struct peer *p = arg;

	(void)c;
	p->drains++;
}

void *peer_op_arg(struct peer *p, unsigned i)
{
	assert_true(i < PEER_MAX_OPS);
	p->refs[i].p = p;
	p->refs[i].i = i;
	return &p->refs[i];
}

void peer_op_cb(evr_conn *c, int status, void *arg)
{
	struct peer_opref *r = arg;
	struct peer *p = r->p;

	(void)c;
	p->op_calls[r->i]++;
	p->op_status[r->i] = status;
	if (p->nop_calls < PEER_MAX_OPS * 2)
		p->op_order[p->nop_calls] = r->i;
	p->nop_calls++;
}

void *peer_call_arg(struct peer *p, unsigned i)
{
	assert_true(i < PEER_MAX_CALLS);
	p->call_refs[i].p = p;
	p->call_refs[i].i = i;
	return &p->call_refs[i];
}

void peer_call_cb(evr_conn *c, int status, const void *reply, size_t len,
		  void *arg)
{
	struct peer_opref *r = arg;
	struct peer *p = r->p;
	unsigned i = r->i;

	(void)c;
	p->call_calls[i]++;
	p->call_status[i] = status;
	free(p->call_reply[i].data);
	p->call_reply[i].data = malloc(len ? len : 1);
	assert_non_null(p->call_reply[i].data);
	if (len)
		memcpy(p->call_reply[i].data, reply, len);
	p->call_reply[i].len = len;
	p->ncall_calls++;
	if (p->on_call)
		p->on_call(p, i, status, reply, len);
}

evr_call_id peer_call(struct peer *p, const void *req, size_t len,
		      unsigned timeout_ms, unsigned i)
{
	evr_call_id id = 0;

	assert_int_equal(evr_call(p->conn, req, len, timeout_ms, peer_call_cb,
				  peer_call_arg(p, i), &id),
			 0);
	assert_int_not_equal(id, 0);
	return id;
}

/* ---- set up ---- */

void peer_send_op(struct peer *p, const void *data, size_t len, unsigned i)
{
	assert_int_equal(evr_send(p->conn, data, len, peer_op_cb,
				  peer_op_arg(p, i)),
			 0);
}

void peer_init(struct peer *p, evr_ctx *ctx)
{
	memset(p, 0, sizeof(*p));
	p->ctx = ctx;
	p->depth = 8;
	p->max_eager = 1024;
	p->max_msg = 1u << 20;
}

void peer_conn_opts(struct peer *p, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = on_connect;
	o->on_recv = on_recv;
	o->on_imm = on_imm;
	o->on_close = on_close;
	o->on_drain = on_drain;
	o->arg = p;
	o->keepalive_ms = p->keepalive_ms;
	if (p->serve)
		o->on_request = on_request;
	o->max_calls = p->max_calls;
}

void peer_fini(struct peer *p)
{
	unsigned i;

	for (i = 0; i < p->nmsgs; i++)
		free(p->msgs[i].data);
	p->nmsgs = 0;
	for (i = 0; i < PEER_MAX_CALLS; i++) {
		free(p->call_reply[i].data);
		p->call_reply[i].data = NULL;
	}
	for (i = 0; i < p->nreqs; i++)
		free(p->reqs[i].data);
	p->nreqs = 0;
}

evr_ctx *peer_start(struct peer *p, const struct evr_ctx_opts *o)
{
	evr_ctx *ctx = peer_ctx_new(o);

	peer_init(p, ctx);
	return ctx;
}

void peer_stop(struct peer *p)
{
	peer_ctx_free(p->ctx);
	peer_fini(p);
}

size_t peer_hs(const struct peer *p, uint8_t kind, uint8_t *buf)
{
	struct evr__hs hs;

	memset(&hs, 0, sizeof(hs));
	hs.kind = kind;
	hs.recv_depth = p->depth;
	hs.init_window = p->init_window;
	hs.max_eager = p->max_eager;
	hs.max_msg = p->max_msg;
	hs.features = (uint8_t)((p->calls ? EVR_HS_F_CALLS : 0) |
				(p->fin ? EVR_HS_F_FIN : 0) |
				(p->imm_hdr ? EVR_HS_F_IMM : 0) |
				p->newer_features);
	return evr__hs_encode(buf, &hs);
}

void peer_connect(struct peer *p)
{
	struct evr_conn_opts o;
	uint8_t hs[EVR_HS_MAX];
	size_t n;

	peer_conn_opts(p, &o);
	assert_int_equal(evr_connect(p->ctx, "192.0.2.1", 7471, &o, &p->conn),
			 0);
	p->id = mock_cm_last_id();
	assert_ptr_equal(p->id->context, p->conn);
	assert_int_equal(p->conn->state, EVR_CS_RESOLVING_ADDR);
	mock_cm_event(p->id, RDMA_CM_EVENT_ADDR_RESOLVED, 0, NULL, 0);
	peer_pump(p->ctx);
	assert_int_equal(p->conn->state, EVR_CS_RESOLVING_ROUTE);
	/* the QP is made with the route, just before the request leaves */
	assert_null(p->id->qp);
	mock_cm_event(p->id, RDMA_CM_EVENT_ROUTE_RESOLVED, 0, NULL, 0);
	peer_pump(p->ctx);
	assert_int_equal(p->conn->state, EVR_CS_CONNECTING);
	p->qp = p->id->qp;
	assert_non_null(p->qp);
	n = peer_hs(p, EVR_HS_REP, hs);
	{
		/* a reply agrees to no more than the request offered */
		const struct mock_id *m = mock_id_of(p->id);
		struct evr__hs req;

		assert_int_equal(evr__hs_decode(m->pd, m->pdlen, &req, NULL),
				 0);
		hs[7] &= req.features;
	}
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, hs, n);
	peer_pump(p->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

static void accept_cb(evr_listener *l, evr_conn_req *req,
		      const void *user_data, size_t user_len, void *arg)
{
	struct peer *p = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)user_data;
	(void)user_len;
	peer_conn_opts(p, &o);
	assert_int_equal(evr_accept(req, &o, &p->conn), 0);
}

void peer_accept(struct peer *p)
{
	evr_listener *l = NULL;
	struct rdma_cm_id *lid;
	uint8_t hs[EVR_HS_MAX];
	size_t n;

	assert_int_equal(evr_listen(p->ctx, NULL, 7471, 0, accept_cb, p, &l),
			 0);
	lid = mock_cm_last_id();
	n = peer_hs(p, EVR_HS_REQ, hs);
	p->id = mock_cm_request(lid, hs, n);
	peer_pump(p->ctx);
	assert_non_null(p->conn);
	assert_int_equal(p->conn->state, EVR_CS_ACCEPTING);
	assert_int_equal(mock_id_of(p->id)->accept, 1);
	p->qp = p->id->qp;
	evr_listener_close(l);
	mock_cm_event(p->id, RDMA_CM_EVENT_ESTABLISHED, 0, NULL, 0);
	peer_pump(p->ctx);
	assert_int_equal(p->connects, 1);
	assert_int_equal(p->connect_status, 0);
	assert_int_equal(p->conn->state, EVR_CS_ESTABLISHED);
}

/* ---- what our side posted ---- */

bool peer_next(struct peer *p, struct peer_frame *f)
{
	struct evr__limits lim = {
		p->max_eager, p->max_msg,
		(uint8_t)((p->calls ? EVR_HS_F_CALLS : 0) |
			  (p->fin ? EVR_HS_F_FIN : 0) |
			  (p->imm_hdr ? EVR_HS_F_IMM : 0))};
	const char *why;

	for (; p->seen < mock_wrs.nsend; p->seen++) {
		if (mock_wrs.send[p->seen].qp != p->qp)
			continue;
		memset(f, 0, sizeof(*f));
		f->wr = mock_wrs.send[p->seen++];
		if (f->wr.opcode == IBV_WR_SEND_WITH_IMM)
			f->parsed = evr__imm_parse(f->wr.imm, f->wr.data,
						   f->wr.len, &lim, &f->msg,
						   &why) == 0;
		else
			f->parsed = f->wr.opcode == IBV_WR_SEND && f->wr.data &&
				    evr__msg_parse(f->wr.data, f->wr.len, &lim,
						   &f->msg, &why) == 0;
		return true;
	}
	return false;
}

unsigned peer_unread(const struct peer *p)
{
	unsigned i, n = 0;

	for (i = p->seen; i < mock_wrs.nsend; i++)
		n += mock_wrs.send[i].qp == p->qp;
	return n;
}

static void push_wc(struct peer *p, uint64_t wr_id, enum ibv_wc_status st,
		    enum ibv_wc_opcode op, uint32_t len, uint32_t imm)
{
	struct ibv_wc wc;

	memset(&wc, 0, sizeof(wc));
	wc.wr_id = wr_id;
	wc.status = st;
	wc.opcode = op;
	wc.byte_len = len;
	wc.imm_data = imm;
	wc.qp_num = p->qp->qp_num;
	if (op & IBV_WC_RECV)
		wc.wc_flags = imm ? IBV_WC_WITH_IMM : 0;
	mock_wc_push(&wc);
}

static enum ibv_wc_opcode wc_opcode(int wr_opcode)
{
	switch (wr_opcode) {
	case IBV_WR_RDMA_READ:
		return IBV_WC_RDMA_READ;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return IBV_WC_RDMA_WRITE;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return IBV_WC_FETCH_ADD;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return IBV_WC_COMP_SWAP;
	default:
		return IBV_WC_SEND;
	}
}

/* What the peer's device does for an RDMA op of ours, on the test's
 * memory at wr.raddr. */
static void carry_out(const struct mock_wr *w)
{
	uint64_t old;

	switch (w->opcode) {
	case IBV_WR_RDMA_READ:
		if (w->len)
			memcpy((void *)(uintptr_t)w->laddr,
			       (const void *)(uintptr_t)w->raddr, w->len);
		break;
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		if (w->len)
			memcpy((void *)(uintptr_t)w->raddr, w->data, w->len);
		break;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		memcpy(&old, (const void *)(uintptr_t)w->raddr, 8);
		memcpy((void *)(uintptr_t)w->laddr, &old, 8);
		if (w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
			old += w->compare_add;
		else if (old == w->compare_add)
			old = w->swap;
		memcpy((void *)(uintptr_t)w->raddr, &old, 8);
		break;
	default:
		break;
	}
}

void peer_ack(struct peer *p)
{
	for (; p->done < mock_wrs.nsend; p->done++) {
		const struct mock_wr *w = &mock_wrs.send[p->done];

		if (w->qp != p->qp)
			continue;
		carry_out(w);
		if (w->flags & IBV_SEND_SIGNALED)
			push_wc(p, w->wr_id, IBV_WC_SUCCESS,
				wc_opcode(w->opcode), 0, 0);
	}
}

void peer_ack_op(struct peer *p, unsigned i)
{
	peer_ack(p);
	peer_pump(p->ctx);
	assert_int_equal(p->op_calls[i], 1);
	assert_int_equal(p->op_status[i], 0);
}

void peer_fail_send(struct peer *p, enum ibv_wc_status status)
{
	for (; p->done < mock_wrs.nsend; p->done++) {
		const struct mock_wr *w = &mock_wrs.send[p->done];

		if (w->qp != p->qp)
			continue;
		push_wc(p, w->wr_id, status, wc_opcode(w->opcode), 0, 0);
		p->done++;
		return;
	}
	fail_msg("no send of ours to fail");
}

void peer_flush(struct peer *p)
{
	for (; p->done < mock_wrs.nsend; p->done++) {
		const struct mock_wr *w = &mock_wrs.send[p->done];

		if (w->qp == p->qp)
			push_wc(p, w->wr_id, IBV_WC_WR_FLUSH_ERR,
				wc_opcode(w->opcode), 0, 0);
	}
	for (; p->recv_next < mock_wrs.nrecv; p->recv_next++) {
		const struct mock_wr *w = &mock_wrs.recv[p->recv_next];

		if (w->qp == p->qp)
			push_wc(p, w->wr_id, IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV,
				0, 0);
	}
}

void peer_flush_closed(struct peer *p, int status)
{
	peer_flush(p);
	peer_pump(p->ctx);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->close_status, status);
}

unsigned peer_recvs_posted(const struct peer *p)
{
	unsigned i, n = 0;

	/* with a shared queue, also those counted for its next batched
	 * post: back in the bank, held by no one */
	if (p->ctx->srq)
		return mock_wrs.nsrecv - mock_wrs.srq_next +
		       p->ctx->bank.unposted;

	for (i = p->recv_next; i < mock_wrs.nrecv; i++)
		n += mock_wrs.recv[i].qp == p->qp;
	return n;
}

/* ---- what the peer sends ---- */

static const struct mock_wr *take_recv(struct peer *p)
{
	if (p->ctx->srq) {
		/* the completion names the QP (push_wc): how the library
		 * tells whose message landed in a shared buffer */
		if (mock_wrs.srq_next < mock_wrs.nsrecv)
			return &mock_wrs.srecv[mock_wrs.srq_next++];
		fail_msg("the peer sends, but the SRQ has no receive posted");
		return NULL;
	}
	for (; p->recv_next < mock_wrs.nrecv; p->recv_next++) {
		if (mock_wrs.recv[p->recv_next].qp == p->qp)
			return &mock_wrs.recv[p->recv_next++];
	}
	fail_msg("the peer sends, but no receive of ours is posted");
	return NULL;
}

void peer_raw(struct peer *p, const void *bytes, size_t len)
{
	const struct mock_wr *r = take_recv(p);

	assert_true(len <= r->len);
	if (len)
		memcpy((void *)(uintptr_t)r->laddr, bytes, len);
	push_wc(p, r->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, (uint32_t)len, 0);
}

void peer_frame(struct peer *p, uint8_t type, uint16_t credits,
		const void *body, uint32_t blen)
{
	struct evr__hdr h = {type, 0, credits, blen};
	uint8_t *buf = malloc(EVR_HDR_SIZE + blen);

	assert_non_null(buf);
	evr__hdr_encode(buf, &h);
	if (blen)
		memcpy(buf + EVR_HDR_SIZE, body, blen);
	peer_raw(p, buf, EVR_HDR_SIZE + blen);
	free(buf);
}

void peer_eager(struct peer *p, const void *data, size_t len,
		uint16_t credits)
{
	peer_frame(p, EVR_T_EAGER, credits, data, (uint32_t)len);
}

void peer_credit(struct peer *p, uint16_t credits)
{
	peer_frame(p, EVR_T_CREDIT, credits, NULL, 0);
}

void peer_bye(struct peer *p, uint16_t credits)
{
	peer_frame(p, EVR_T_BYE, credits, NULL, 0);
}

void peer_rndv_req(struct peer *p, const void *addr, uint64_t len,
		   uint32_t rkey, uint32_t id, uint16_t credits)
{
	struct evr__rndv_req r = {(uintptr_t)addr, len, rkey, id};
	uint8_t body[EVR_RNDV_REQ_SIZE];

	evr__rndv_req_encode(body, &r);
	peer_frame(p, EVR_T_RNDV_REQ, credits, body, sizeof(body));
}

void peer_fin(struct peer *p, uint32_t id, int32_t status, uint16_t credits)
{
	uint8_t body[EVR_RNDV_FIN_SIZE];

	evr__rndv_fin_encode(body, id, status);
	peer_frame(p, EVR_T_RNDV_FIN, credits, body, sizeof(body));
}

void peer_fin_eager(struct peer *p, uint32_t id, int32_t status,
		    const void *data, size_t dlen, uint16_t credits)
{
	struct evr__hdr h = {EVR_T_EAGER, EVR_F_FIN, credits,
			     (uint32_t)(EVR_RNDV_FIN_SIZE + dlen)};
	uint8_t *buf = malloc(EVR_HDR_SIZE + h.len);

	assert_non_null(buf);
	evr__hdr_encode(buf, &h);
	evr__rndv_fin_encode(buf + EVR_HDR_SIZE, id, status);
	if (dlen)
		memcpy(buf + EVR_HDR_SIZE + EVR_RNDV_FIN_SIZE, data, dlen);
	peer_raw(p, buf, EVR_HDR_SIZE + h.len);
	free(buf);
}

void peer_call_frame(struct peer *p, uint8_t type, uint8_t flags,
		     uint32_t cid, uint16_t credits, const void *body,
		     uint32_t blen)
{
	struct evr__hdr h = {type, flags, credits, EVR_CALL_ID_SIZE + blen};
	uint8_t *buf = malloc(EVR_HDR_SIZE + h.len);

	assert_non_null(buf);
	evr__hdr_encode(buf, &h);
	evr__call_id_encode(buf + EVR_HDR_SIZE, cid);
	if (blen)
		memcpy(buf + EVR_HDR_SIZE + EVR_CALL_ID_SIZE, body, blen);
	peer_raw(p, buf, EVR_HDR_SIZE + h.len);
	free(buf);
}

void peer_call_eager(struct peer *p, uint8_t flags, uint32_t cid,
		     const void *data, size_t len, uint16_t credits)
{
	uint8_t *buf;

	if (!p->imm_hdr) {
		peer_call_frame(p, EVR_T_EAGER, flags, cid, credits, data,
				(uint32_t)len);
		return;
	}
	/* the header in immediate data, the id before the payload */
	buf = malloc(EVR_CALL_ID_SIZE + len);
	assert_non_null(buf);
	evr__call_id_encode(buf, cid);
	if (len)
		memcpy(buf + EVR_CALL_ID_SIZE, data, len);
	peer_imm_raw(p, be32toh(evr__imm_encode(flags, credits)), buf,
		     EVR_CALL_ID_SIZE + len);
	free(buf);
}

void peer_call_rndv_req(struct peer *p, uint8_t flags, uint32_t cid,
			const void *addr, uint64_t len, uint32_t rkey,
			uint32_t id, uint16_t credits)
{
	struct evr__rndv_req r = {(uintptr_t)addr, len, rkey, id};
	uint8_t body[EVR_RNDV_REQ_SIZE];

	evr__rndv_req_encode(body, &r);
	peer_call_frame(p, EVR_T_RNDV_REQ, flags, cid, credits, body,
			sizeof(body));
}

void peer_cancel(struct peer *p, uint32_t cid, uint16_t credits)
{
	uint8_t body[EVR_CALL_ID_SIZE];

	evr__call_id_encode(body, cid);
	peer_frame(p, EVR_T_CANCEL, credits, body, sizeof(body));
}

void peer_write_imm(struct peer *p, uint32_t imm)
{
	const struct mock_wr *r = take_recv(p);

	push_wc(p, r->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, 0,
		htobe32(imm));
}

void peer_imm_raw(struct peer *p, uint32_t imm, const void *data, size_t len)
{
	const struct mock_wr *r = take_recv(p);

	assert_true(len <= r->len);
	if (len)
		memcpy((void *)(uintptr_t)r->laddr, data, len);
	push_wc(p, r->wr_id, IBV_WC_SUCCESS, IBV_WC_RECV, (uint32_t)len,
		htobe32(imm));
}

void peer_imm_eager(struct peer *p, const void *data, size_t len,
		    uint8_t flags, uint16_t credits)
{
	peer_imm_raw(p, be32toh(evr__imm_encode(flags, credits)), data, len);
}
