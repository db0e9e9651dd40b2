/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One-sided operations on registered memory: RDMA WRITE (with and without
 * immediate data), RDMA READ, atomic fetch-add and compare-swap.  Each is
 * validated against both regions, queued in order with the conn's sends
 * and completes through its callback exactly once.  Only WRITE with
 * immediate consumes a receive at the peer, so only it takes a credit.
 */
#include "evrdma-int.h"

#include <endian.h>
#include <errno.h>

/* The end of a one-sided op (its class's complete). */
static void rma_complete(struct evr__op *op, int status)
{
	evr_conn *c = op->h.conn;

	if (op->u.rma.mr)
		op->u.rma.mr->busy--;
	if (op->cb)
		op->cb(c, evr__op_user_status(c, status), op->arg);
	evr__op_free(c->ctx, op);
}

static const struct evr__op_class rma_class = { rma_complete, NULL, NULL,
						NULL };

static int rma_submit(evr_conn *c, enum evr__op_kind kind,
		      enum ibv_wr_opcode opcode, evr_mr *lmr, size_t loff,
		      const struct evr_rkey *rk, uint64_t roff, size_t len,
		      evr_op_cb cb, void *arg, struct evr__op **out)
{
	evr_ctx *ctx;
	struct evr__op *op;

	if (!c || !lmr || !rk || lmr->ctx != c->ctx)
		return -EINVAL;
	ctx = c->ctx;
	if (!evr__conn_open(c))
		return -EPIPE;
	if (loff > lmr->mr->length || len > lmr->mr->length - loff)
		return -ERANGE;
	if (roff > rk->len || len > rk->len - roff)
		return -ERANGE;
	if (len > ctx->max_msg_sz)
		return -EMSGSIZE;
	op = evr__conn_op_new(c, (uint8_t)kind, &rma_class);
	if (!op)
		return -ENOMEM;
	op->cb = cb;
	op->arg = arg;
	op->u.rma.mr = lmr;
	op->credit = kind == EVR_OP_WRITE_IMM;
	op->opcode = (uint8_t)opcode;
	op->wqe.laddr = (uintptr_t)lmr->mr->addr + loff;
	op->wqe.len = (uint32_t)len;
	op->wqe.lkey = lmr->mr->lkey;
	op->wqe.raddr = rk->addr + roff;
	op->wqe.rkey = rk->rkey;
	lmr->busy++;
	*out = op;
	return 0;
}

static void rma_queue(struct evr__op *op)
{
	if (op->credit)
		op->h.conn->nsendq_credit++;
	evr__list_add_tail(&op->h.conn->sendq, &op->h.link);
	evr__conn_dirty(op->h.conn);
}

int evr_write(evr_conn *c, evr_mr *lmr, size_t loff, const struct evr_rkey *rk,
	      uint64_t roff, size_t len, evr_op_cb cb, void *arg)
{
	struct evr__op *op;
	int err;

	EVR_CONN_OWNER(c);
	err = rma_submit(c, EVR_OP_WRITE, IBV_WR_RDMA_WRITE, lmr, loff, rk,
			 roff, len, cb, arg, &op);
	if (err)
		return err;
	rma_queue(op);
	return 0;
}

int evr_write_imm(evr_conn *c, evr_mr *lmr, size_t loff,
		  const struct evr_rkey *rk, uint64_t roff, size_t len,
		  uint32_t imm, evr_op_cb cb, void *arg)
{
	struct evr__op *op;
	int err;

	EVR_CONN_OWNER(c);
	err = rma_submit(c, EVR_OP_WRITE_IMM, IBV_WR_RDMA_WRITE_WITH_IMM, lmr,
			 loff, rk, roff, len, cb, arg, &op);
	if (err)
		return err;
	op->wqe.imm = htobe32(imm); /* verbs carries it big endian */
	rma_queue(op);
	return 0;
}

int evr_read(evr_conn *c, evr_mr *lmr, size_t loff, const struct evr_rkey *rk,
	     uint64_t roff, size_t len, evr_op_cb cb, void *arg)
{
	struct evr__op *op;
	int err;

	EVR_CONN_OWNER(c);
	err = rma_submit(c, EVR_OP_READ, IBV_WR_RDMA_READ, lmr, loff, rk, roff,
			 len, cb, arg, &op);
	if (err)
		return err;
	rma_queue(op);
	return 0;
}

static int atomic_submit(evr_conn *c, enum ibv_wr_opcode opcode, evr_mr *lmr,
			 size_t loff, const struct evr_rkey *rk, uint64_t roff,
			 uint64_t a, uint64_t b, evr_op_cb cb, void *arg)
{
	struct evr__op *op;
	int err;

	if (!rk || ((rk->addr + roff) & 7) || (loff & 7))
		return -EINVAL;
	if (c && c->ctx->dattr.atomic_cap == IBV_ATOMIC_NONE)
		return -EOPNOTSUPP;
	err = rma_submit(c, EVR_OP_ATOMIC, opcode, lmr, loff, rk, roff, 8, cb,
			 arg, &op);
	if (err)
		return err;
	op->u.rma.compare_add = a;
	op->u.rma.swap = b;
	rma_queue(op);
	return 0;
}

int evr_fetch_add(evr_conn *c, evr_mr *lmr, size_t loff,
		  const struct evr_rkey *rk, uint64_t roff, uint64_t add,
		  evr_op_cb cb, void *arg)
{
	EVR_CONN_OWNER(c);
	return atomic_submit(c, IBV_WR_ATOMIC_FETCH_AND_ADD, lmr, loff, rk,
			     roff, add, 0, cb, arg);
}

int evr_cmp_swap(evr_conn *c, evr_mr *lmr, size_t loff,
		 const struct evr_rkey *rk, uint64_t roff, uint64_t compare,
		 uint64_t swap, evr_op_cb cb, void *arg)
{
	EVR_CONN_OWNER(c);
	return atomic_submit(c, IBV_WR_ATOMIC_CMP_AND_SWP, lmr, loff, rk, roff,
			     compare, swap, cb, arg);
}
