/* Mock of the thin verbs layer (lib/verbs.h) for unit tests. */
#include "config.h"

#include <errno.h>

#include "mock_verbs.h"

int evr__post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		   struct ibv_send_wr **bad)
{
	(void)qp;
	(void)wr;
	(void)bad;
	return -ENOSYS;
}

int evr__post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		   struct ibv_recv_wr **bad)
{
	(void)qp;
	(void)wr;
	(void)bad;
	return -ENOSYS;
}

int evr__poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	(void)cq;
	(void)n;
	(void)wc;
	return 0;
}

int evr__req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
	(void)cq;
	(void)solicited_only;
	return 0;
}

int evr__get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq,
		      void **cq_ctx)
{
	(void)ch;
	(void)cq;
	(void)cq_ctx;
	return -EAGAIN;
}

void evr__ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
	(void)cq;
	(void)n;
}
