/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Mock of librdmacm and of the control path of libibverbs (device, PD,
 * completion channel, CQs, QPs, memory registration) for the unit tests
 * of the upper layers: with it and mock_verbs a whole ctx runs on this
 * host, with no device.
 *
 * The definitions here take the place of the libraries' for a program
 * linked with this module.  One fake device, "mock0", is all
 * rdma_get_devices() lists.  The channels are eventfds, so the ctx's
 * libev loop (and evr_ctx_process()) wakes for them as for real ones.
 *
 * rdma_cm events are scripted: a test queues them (mock_cm_event,
 * mock_cm_request) and the ctx takes them with rdma_get_cm_event.  Every
 * call is counted; the calls that can fail do so on demand (mock_cm.fail_*:
 * an errno, returned as -1 with errno set, as librdmacm does).  cm_ids
 * and QPs are freed only by mock_cm_reset(), so that a test may still ask
 * what happened to one the library destroyed; a call on a destroyed id or
 * QP stops the test (assert).
 */
#ifndef EVR_MOCK_CM_H
#define EVR_MOCK_CM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define MOCK_DEV_NAME "mock0"

/* What happened to one cm_id. */
struct mock_id {
	struct rdma_cm_id id; /* first: the library sees only this */
	struct mock_id *next; /* every id made since mock_cm_reset */
	bool destroyed;
	bool listening;
	int backlog; /* rdma_listen's */
	unsigned resolve_addr, resolve_route, connect, accept, reject,
		disconnect;
	int resolve_timeout_ms;
	uint8_t pd[256]; /* private data of connect, accept or reject */
	size_t pdlen;
	struct rdma_conn_param param; /* of connect or accept */
};

struct mock_cm {
	/* calls */
	unsigned create_id, destroy_id, create_qp, destroy_qp, modify_qp_err;
	unsigned reg_mr, dereg_mr, create_cq, destroy_cq, resize_cq;
	unsigned events_given, events_acked;
	unsigned create_srq, destroy_srq;
	/* scripted failures: an errno, 0 to succeed */
	int fail_create_id, fail_resolve_addr, fail_resolve_route;
	int fail_connect, fail_accept, fail_reject, fail_create_qp;
	int fail_bind, fail_listen;
	int fail_reg_mr; /* ibv_reg_mr and _iova2: NULL with this errno */
	int fail_create_srq; /* ibv_create_srq: NULL with this errno */
	/* the device's shared receive queues (ibv_query_device): 0, the
	 * default, for none, so that a ctx gives each conn its own queue */
	int max_srq, max_srq_wr;
	/* the last SRQ made (NULL if none), and its ibv_create_srq max_wr */
	struct ibv_srq *srq;
	uint32_t srq_max_wr;
	/* the port's largest message (rendezvous chunk size); 0: 1 GiB */
	uint32_t port_max_msg_sz;
	/* every id made, newest first */
	struct mock_id *ids;
};

extern struct mock_cm mock_cm;

/* Free every id, QP and event left and forget every counter and script;
 * call after evr_ctx_destroy(). */
void mock_cm_reset(void);
/* The library's view of an id, and back. */
static inline struct mock_id *mock_id_of(struct rdma_cm_id *id)
{
	return (struct mock_id *)id;
}
/* The newest id made (NULL if none). */
struct rdma_cm_id *mock_cm_last_id(void);
/* Queue an event for id (status and private data as given). */
void mock_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type type,
		   int status, const void *pd, size_t pdlen);
/* Queue a connect request on the listening id, with private data pd; the
 * new id it carries is returned. */
struct rdma_cm_id *mock_cm_request(struct rdma_cm_id *listen_id,
				   const void *pd, size_t pdlen);
/* Events queued and not yet taken. */
unsigned mock_cm_pending(void);
/* The live registration covering [addr, addr + len), or NULL. */
struct ibv_mr *mock_mr_find(const void *addr, size_t len);
/* The state a QP was last moved to (IBV_QPS_RESET if never). */
enum ibv_qp_state mock_qp_state(const struct ibv_qp *qp);
/* The QP was destroyed. */
bool mock_qp_destroyed(const struct ibv_qp *qp);
/* The SRQ a QP was made with (ibv_qp_init_attr.srq), NULL if none. */
struct ibv_srq *mock_qp_srq(const struct ibv_qp *qp);

#endif
