/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The thin verbs layer: the data-path calls of libibverbs that the rest of
 * the library makes, behind plain functions.  lib/verbs.c implements them
 * on libibverbs (where ibv_post_send and ibv_poll_cq are static inlines,
 * which --wrap cannot intercept); unit tests link a mock instead.
 */
#ifndef EVR_VERBS_H
#define EVR_VERBS_H

#include <infiniband/verbs.h>

int evr__post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad);
int evr__post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad);
int evr__post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad);
int evr__poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
int evr__req_notify_cq(struct ibv_cq *cq, int solicited_only);
int evr__get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
		      void **cq_ctx);
void evr__ack_cq_events(struct ibv_cq *cq, unsigned int n);

#endif
