/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Real implementation of the thin verbs layer (see verbs.h).  Each call
 * returns 0 or a negative errno; libibverbs itself mixes positive errno
 * returns (post, notify) with -1 + errno (get_cq_event), and that is
 * mapped here, in one place.
 */
#include "config.h"

#include <errno.h>

#include "verbs.h"

int evr__post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad)
{
	int rc = ibv_post_send(qp, wr, bad);

	return rc > 0 ? -rc : rc;
}

int evr__post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad)
{
	int rc = ibv_post_recv(qp, wr, bad);

	return rc > 0 ? -rc : rc;
}

int evr__post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad)
{
	int rc = ibv_post_srq_recv(srq, wr, bad);

	return rc > 0 ? -rc : rc;
}

int evr__poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int rc = ibv_poll_cq(cq, n, wc);

	return rc < 0 ? -EIO : rc;
}

int evr__req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	int rc = ibv_req_notify_cq(cq, solicited_only);

	return rc > 0 ? -rc : rc;
}

int evr__get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
		      void **cq_ctx)
{
	if (ibv_get_cq_event(ch, cq, cq_ctx) == 0)
		return 0;
	return errno ? -errno : -EIO;
}

void evr__ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	ibv_ack_cq_events(cq, n);
}
