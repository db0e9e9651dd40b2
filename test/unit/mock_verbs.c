/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Mock of the thin verbs layer (lib/verbs.h) for the unit tests: counters
 * and scripted results in the global `mock`, see mock_verbs.h.  Each mock
 * follows the contract of the real one in lib/verbs.c: 0 or a negative
 * errno, poll_cq returns the number of WCs, get_cq_event -EAGAIN when the
 * channel is empty.
 */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mock_verbs.h"

struct mock_verbs mock;
struct mock_wr_log mock_wrs;

void mock_reset(void)
{
	unsigned i;

	memset(&mock, 0, sizeof(mock));
	for (i = 0; i < mock_wrs.nsend; i++)
		free(mock_wrs.send[i].data);
	free(mock_wrs.send);
	free(mock_wrs.recv);
	free(mock_wrs.srecv);
	memset(&mock_wrs, 0, sizeof(mock_wrs));
}

static struct mock_wr *log_slot(struct mock_wr **arr, unsigned *n,
				unsigned *cap)
{
	if (*n == *cap) {
		*cap = *cap ? *cap * 2 : 64;
		*arr = realloc(*arr, *cap * sizeof(**arr));
		assert(*arr);
	}
	memset(&(*arr)[*n], 0, sizeof(**arr));
	return &(*arr)[(*n)++];
}

static void log_send(struct ibv_qp *qp, const struct ibv_send_wr *w)
{
	struct mock_wr *r = log_slot(&mock_wrs.send, &mock_wrs.nsend,
				     &mock_wrs.cap_send);
	bool copy = w->opcode == IBV_WR_SEND ||
		    w->opcode == IBV_WR_SEND_WITH_IMM ||
		    w->opcode == IBV_WR_RDMA_WRITE ||
		    w->opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
	uint32_t off = 0;
	int i;

	r->qp = qp;
	r->wr_id = w->wr_id;
	r->opcode = w->opcode;
	r->flags = w->send_flags;
	r->imm = w->imm_data;
	if (w->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD ||
	    w->opcode == IBV_WR_ATOMIC_CMP_AND_SWP) {
		r->raddr = w->wr.atomic.remote_addr;
		r->rkey = w->wr.atomic.rkey;
		r->compare_add = w->wr.atomic.compare_add;
		r->swap = w->wr.atomic.swap;
	} else {
		r->raddr = w->wr.rdma.remote_addr;
		r->rkey = w->wr.rdma.rkey;
	}
	if (w->num_sge > 0) {
		r->laddr = w->sg_list[0].addr;
		r->lkey = w->sg_list[0].lkey;
	}
	for (i = 0; i < w->num_sge; i++)
		r->len += w->sg_list[i].length;
	if (!copy || !r->len)
		return;
	r->data = malloc(r->len);
	assert(r->data);
	for (i = 0; i < w->num_sge; i++) {
		memcpy(r->data + off, (const void *)(uintptr_t)w->sg_list[i].addr,
		       w->sg_list[i].length);
		off += w->sg_list[i].length;
	}
}

static void log_recv_to(struct mock_wr *r, const struct ibv_recv_wr *w)
{
	int i;

	r->wr_id = w->wr_id;
	r->opcode = -1;
	if (w->num_sge > 0) {
		r->laddr = w->sg_list[0].addr;
		r->lkey = w->sg_list[0].lkey;
	}
	for (i = 0; i < w->num_sge; i++)
		r->len += w->sg_list[i].length;
}

static void log_recv(struct ibv_qp *qp, const struct ibv_recv_wr *w)
{
	struct mock_wr *r = log_slot(&mock_wrs.recv, &mock_wrs.nrecv,
				     &mock_wrs.cap_recv);

	log_recv_to(r, w);
	r->qp = qp;
}

static void log_srq_recv(struct ibv_srq *srq, const struct ibv_recv_wr *w)
{
	struct mock_wr *r = log_slot(&mock_wrs.srecv, &mock_wrs.nsrecv,
				     &mock_wrs.cap_srecv);

	log_recv_to(r, w);
	r->srq = srq;
}

void mock_wc_push(const struct ibv_wc *wc)
{
	assert(mock.wc_tail < MOCK_MAX_WC);
	mock.wc[mock.wc_tail++] = *wc;
}

void mock_wc_after_arm(const struct ibv_wc *wc)
{
	assert(mock.wc_arm_n < MOCK_MAX_WC);
	mock.wc_arm[mock.wc_arm_n++] = *wc;
}

unsigned mock_wc_left(void)
{
	return mock.wc_tail - mock.wc_head;
}

void mock_cq_events(struct ibv_cq *cq, void *cq_ctx, unsigned n)
{
	mock.event_cq = cq;
	mock.event_cq_ctx = cq_ctx;
	mock.events_pending += n;
}

int evr__post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad)
{
	struct mock_post rec = {qp, wr, 0, 0};
	struct ibv_send_wr *w, *fail = NULL;
	int rc = mock.post_send_calls < mock.post_send_ok_calls
			 ? 0
			 : mock.post_send_rc;

	for (w = wr; w; w = w->next) {
		if (rec.nwr == mock.post_send_bad_idx)
			fail = w;
		rec.nwr++;
		rec.nsig += !!(w->send_flags & IBV_SEND_SIGNALED);
	}
	if (mock.post_send_calls < MOCK_MAX_CALLS)
		mock.posts[mock.post_send_calls] = rec;
	mock.post_send_calls++;
	mock.post_send_wrs += rec.nwr;
	for (w = wr; w && (!rc || w != fail); w = w->next)
		log_send(qp, w);
	if (rc) {
		*bad = fail;
		return rc;
	}
	return 0;
}

int evr__post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *w;

	mock.post_recv_calls++;
	for (w = wr; w; w = w->next)
		mock.post_recv_wrs++;
	if (mock.post_recv_rc) {
		*bad = wr;
		return mock.post_recv_rc;
	}
	for (w = wr; w; w = w->next)
		log_recv(qp, w);
	return 0;
}

int evr__post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad)
{
	struct ibv_recv_wr *w;

	mock.post_srq_calls++;
	for (w = wr; w; w = w->next)
		mock.post_srq_wrs++;
	if (mock.post_srq_rc) {
		*bad = wr;
		return mock.post_srq_rc;
	}
	for (w = wr; w; w = w->next)
		log_srq_recv(srq, w);
	return 0;
}

int evr__poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int i;

	if (mock.poll_calls < MOCK_MAX_CALLS)
		mock.poll_n[mock.poll_calls] = n;
	mock.poll_calls++;
	if (mock.poll_rc < 0 && (!mock.poll_rc_cq || mock.poll_rc_cq == cq)) {
		mock.poll_failed++;
		return mock.poll_rc;
	}
	for (i = 0; i < n && mock.wc_head < mock.wc_tail; i++)
		wc[i] = mock.wc[mock.wc_head++];
	mock.wc_dispensed += (unsigned)i;
	return i;
}

int evr__req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	unsigned i;

	(void)cq;
	(void)solicited_only;
	mock.notify_calls++;
	mock.notify_poll_seq = mock.poll_calls;
	if (mock.notify_rc)
		return mock.notify_rc;
	for (i = 0; i < mock.wc_arm_n; i++)
		mock_wc_push(&mock.wc_arm[i]);
	mock.wc_arm_n = 0;
	return 0;
}

int evr__get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
		      void **cq_ctx)
{
	(void)ch;
	mock.event_calls++;
	if (!mock.events_pending)
		return -EAGAIN;
	mock.events_pending--;
	mock.events_given++;
	*cq = mock.event_cq;
	*cq_ctx = mock.event_cq_ctx;
	return 0;
}

void evr__ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	mock.ack_calls++;
	mock.acked += n;
	if (n > mock.ack_max)
		mock.ack_max = n;
}
