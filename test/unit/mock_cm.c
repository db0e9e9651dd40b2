/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Mock of librdmacm and of the control path of libibverbs, see mock_cm.h.
 * Each call follows the contract of the real one as the library uses it:
 * librdmacm returns 0 or -1 with errno; libibverbs returns NULL with errno
 * for a failed constructor.
 */
#include "config.h"

#include <arpa/inet.h>
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "mock_cm.h"

struct mock_cm mock_cm;

struct mock_qp {
	struct ibv_qp qp; /* first */
	struct mock_qp *next;
	bool destroyed;
};

struct mock_mr {
	struct ibv_mr mr; /* first */
	struct mock_mr *next;
};

struct mock_ev {
	struct rdma_cm_event ev; /* first */
	struct mock_ev *next;
	uint8_t pd[256];
};

static struct ibv_device dev;
static struct ibv_context devctx;
static struct mock_qp *qps;
static struct mock_mr *mrs;
static struct mock_ev *evq, *evq_tail;
static unsigned nev;
static uint32_t next_key = 0x100, next_qpn = 0x40;

static int fail(int err)
{
	errno = err;
	return -1;
}

static void *zalloc(size_t n)
{
	void *p = calloc(1, n);

	assert(p);
	return p;
}

void mock_cm_reset(void)
{
	struct mock_id *id;
	struct mock_qp *q;
	struct mock_ev *e;
	struct mock_mr *m = NULL;

	while ((id = mock_cm.ids)) {
		mock_cm.ids = id->next;
		free(id);
	}
	while ((q = qps)) {
		qps = q->next;
		free(q);
	}
	while ((e = evq)) {
		evq = e->next;
		free(e);
	}
	evq_tail = NULL;
	nev = 0;
	/* a ctx deregisters everything it registered before it goes */
	assert(!mrs);
	(void)m;
	memset(&mock_cm, 0, sizeof(mock_cm));
}

struct rdma_cm_id *mock_cm_last_id(void)
{
	return mock_cm.ids ? &mock_cm.ids->id : NULL;
}

static void check_id(const struct rdma_cm_id *id)
{
	assert(id && !mock_id_of((struct rdma_cm_id *)id)->destroyed);
}

static struct mock_id *new_id(struct rdma_event_channel *ch, void *context)
{
	struct mock_id *m = zalloc(sizeof(*m));

	m->id.channel = ch;
	m->id.context = context;
	m->id.ps = RDMA_PS_TCP;
	m->next = mock_cm.ids;
	mock_cm.ids = m;
	return m;
}

static void wake(struct rdma_event_channel *ch)
{
	uint64_t one = 1;

	if (ch && write(ch->fd, &one, sizeof(one)) != sizeof(one))
		assert(!"eventfd write");
}

void mock_cm_event(struct rdma_cm_id *id, enum rdma_cm_event_type type,
		   int status, const void *pd, size_t pdlen)
{
	struct mock_ev *e = zalloc(sizeof(*e));

	assert(pdlen <= sizeof(e->pd));
	e->ev.id = id;
	e->ev.event = type;
	e->ev.status = status;
	if (pdlen) {
		memcpy(e->pd, pd, pdlen);
		e->ev.param.conn.private_data = e->pd;
		e->ev.param.conn.private_data_len = (uint8_t)pdlen;
	}
	if (evq_tail)
		evq_tail->next = e;
	else
		evq = e;
	evq_tail = e;
	nev++;
	wake(id->channel);
}

struct rdma_cm_id *mock_cm_request(struct rdma_cm_id *listen_id,
				   const void *pd, size_t pdlen)
{
	struct mock_id *m = new_id(listen_id->channel, NULL);

	m->id.verbs = &devctx;
	mock_cm_event(&m->id, RDMA_CM_EVENT_CONNECT_REQUEST, 0, pd, pdlen);
	evq_tail->ev.listen_id = listen_id;
	return &m->id;
}

unsigned mock_cm_pending(void)
{
	return nev;
}

struct ibv_mr *mock_mr_find(const void *addr, size_t len)
{
	uintptr_t a = (uintptr_t)addr;
	struct mock_mr *m;

	for (m = mrs; m; m = m->next) {
		uintptr_t s = (uintptr_t)m->mr.addr;

		if (a >= s && a + len <= s + m->mr.length)
			return &m->mr;
	}
	return NULL;
}

enum ibv_qp_state mock_qp_state(const struct ibv_qp *qp)
{
	return qp->state;
}

bool mock_qp_destroyed(const struct ibv_qp *qp)
{
	return ((const struct mock_qp *)qp)->destroyed;
}

struct ibv_srq *mock_qp_srq(const struct ibv_qp *qp)
{
	return qp->srq;
}

/* ---- librdmacm ---- */

struct rdma_event_channel *rdma_create_event_channel(void)
{
	struct rdma_event_channel *ch = zalloc(sizeof(*ch));

	ch->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert(ch->fd >= 0);
	return ch;
}

void rdma_destroy_event_channel(struct rdma_event_channel *ch)
{
	close(ch->fd);
	free(ch);
}

int rdma_get_cm_event(struct rdma_event_channel *ch,
		      struct rdma_cm_event **event)
{
	struct mock_ev *e = evq;
	uint64_t v;

	if (!e) {
		if (read(ch->fd, &v, sizeof(v)) < 0)
			(void)v; /* nothing to clear */
		return fail(EAGAIN);
	}
	evq = e->next;
	if (!evq)
		evq_tail = NULL;
	nev--;
	mock_cm.events_given++;
	*event = &e->ev;
	return 0;
}

int rdma_ack_cm_event(struct rdma_cm_event *event)
{
	mock_cm.events_acked++;
	free(event);
	return 0;
}

int rdma_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id,
		   void *context, enum rdma_port_space ps)
{
	(void)ps;
	mock_cm.create_id++;
	if (mock_cm.fail_create_id)
		return fail(mock_cm.fail_create_id);
	*id = &new_id(ch, context)->id;
	return 0;
}

/* The kernel discards the events of an id being destroyed that were not
 * taken yet (and the ids of connect requests to a listener): none is
 * reported after the destroy. */
static void drop_events(struct rdma_cm_id *id)
{
	struct mock_ev **pp = &evq, *e;

	evq_tail = NULL;
	while ((e = *pp)) {
		if (e->ev.id == id || e->ev.listen_id == id) {
			if (e->ev.listen_id == id)
				mock_id_of(e->ev.id)->destroyed = true;
			*pp = e->next;
			nev--;
			free(e);
			continue;
		}
		evq_tail = e;
		pp = &e->next;
	}
}

int rdma_destroy_id(struct rdma_cm_id *id)
{
	check_id(id);
	assert(!id->qp || mock_qp_destroyed(id->qp)); /* as librdmacm wants */
	mock_cm.destroy_id++;
	mock_id_of(id)->destroyed = true;
	drop_events(id);
	return 0;
}

int rdma_bind_addr(struct rdma_cm_id *id, struct sockaddr *addr)
{
	check_id(id);
	if (mock_cm.fail_bind)
		return fail(mock_cm.fail_bind);
	if (addr->sa_family == AF_INET)
		memcpy(&id->route.addr.src_sin, addr, sizeof(struct sockaddr_in));
	id->verbs = &devctx;
	return 0;
}

int rdma_listen(struct rdma_cm_id *id, int backlog)
{
	check_id(id);
	if (mock_cm.fail_listen)
		return fail(mock_cm.fail_listen);
	mock_id_of(id)->listening = true;
	mock_id_of(id)->backlog = backlog;
	return 0;
}

__be16 rdma_get_src_port(struct rdma_cm_id *id)
{
	check_id(id);
	if (!id->route.addr.src_sin.sin_port)
		return htons(7471);
	return id->route.addr.src_sin.sin_port;
}

int rdma_resolve_addr(struct rdma_cm_id *id, struct sockaddr *src_addr,
		      struct sockaddr *dst_addr, int timeout_ms)
{
	(void)src_addr;
	(void)dst_addr;
	check_id(id);
	mock_id_of(id)->resolve_addr++;
	mock_id_of(id)->resolve_timeout_ms = timeout_ms;
	if (mock_cm.fail_resolve_addr)
		return fail(mock_cm.fail_resolve_addr);
	id->verbs = &devctx;
	return 0;
}

int rdma_resolve_route(struct rdma_cm_id *id, int timeout_ms)
{
	(void)timeout_ms;
	check_id(id);
	mock_id_of(id)->resolve_route++;
	if (mock_cm.fail_resolve_route)
		return fail(mock_cm.fail_resolve_route);
	return 0;
}

static void keep_param(struct mock_id *m, const struct rdma_conn_param *p)
{
	m->param = *p;
	m->param.private_data = NULL;
	m->pdlen = p->private_data_len;
	memcpy(m->pd, p->private_data, m->pdlen);
}

int rdma_connect(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	check_id(id);
	mock_id_of(id)->connect++;
	if (mock_cm.fail_connect)
		return fail(mock_cm.fail_connect);
	keep_param(mock_id_of(id), p);
	return 0;
}

int rdma_accept(struct rdma_cm_id *id, struct rdma_conn_param *p)
{
	check_id(id);
	mock_id_of(id)->accept++;
	if (mock_cm.fail_accept)
		return fail(mock_cm.fail_accept);
	keep_param(mock_id_of(id), p);
	return 0;
}

int rdma_reject(struct rdma_cm_id *id, const void *pd, uint8_t len)
{
	struct mock_id *m = mock_id_of(id);

	check_id(id);
	m->reject++;
	m->pdlen = len;
	if (len)
		memcpy(m->pd, pd, len);
	if (mock_cm.fail_reject)
		return fail(mock_cm.fail_reject);
	return 0;
}

int rdma_disconnect(struct rdma_cm_id *id)
{
	check_id(id);
	mock_id_of(id)->disconnect++;
	return 0;
}

int rdma_set_option(struct rdma_cm_id *id, int level, int optname,
		    void *optval, size_t optlen)
{
	(void)level;
	(void)optname;
	(void)optval;
	(void)optlen;
	check_id(id);
	return 0;
}

int rdma_notify(struct rdma_cm_id *id, enum ibv_event_type event)
{
	(void)event;
	check_id(id);
	return 0;
}

int rdma_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd,
		   struct ibv_qp_init_attr *a)
{
	struct mock_qp *q;

	check_id(id);
	assert(!id->qp);
	mock_cm.create_qp++;
	if (mock_cm.fail_create_qp)
		return fail(mock_cm.fail_create_qp);
	q = zalloc(sizeof(*q));
	q->qp.context = &devctx;
	q->qp.qp_context = a->qp_context;
	q->qp.pd = pd;
	q->qp.send_cq = a->send_cq;
	q->qp.recv_cq = a->recv_cq;
	q->qp.srq = a->srq;
	q->qp.qp_num = next_qpn++;
	q->qp.qp_type = a->qp_type;
	q->qp.state = IBV_QPS_RESET;
	q->next = qps;
	qps = q;
	id->qp = &q->qp;
	return 0;
}

void rdma_destroy_qp(struct rdma_cm_id *id)
{
	struct mock_qp *q = (struct mock_qp *)id->qp;

	check_id(id);
	assert(q && !q->destroyed);
	mock_cm.destroy_qp++;
	q->destroyed = true;
	id->qp = NULL;
}

struct ibv_context **rdma_get_devices(int *num)
{
	struct ibv_context **l = zalloc(2 * sizeof(*l));

	if (!dev.name[0]) {
		strcpy(dev.name, MOCK_DEV_NAME);
		devctx.device = &dev;
		devctx.async_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		assert(devctx.async_fd >= 0);
	}
	l[0] = &devctx;
	if (num)
		*num = 1;
	return l;
}

void rdma_free_devices(struct ibv_context **list)
{
	free(list);
}

int rdma_getaddrinfo(const char *node, const char *service,
		     const struct rdma_addrinfo *hints,
		     struct rdma_addrinfo **res)
{
	(void)node;
	(void)service;
	(void)hints;
	*res = NULL;
	return fail(ENOSYS); /* the tests name the device */
}

void rdma_freeaddrinfo(struct rdma_addrinfo *res)
{
	(void)res;
}

/* ---- libibverbs: device, PD, channel, CQ, QP state, MR ---- */

const char *ibv_get_device_name(struct ibv_device *device)
{
	return device->name;
}

int ibv_query_device(struct ibv_context *context,
		     struct ibv_device_attr *attr)
{
	(void)context;
	memset(attr, 0, sizeof(*attr));
	attr->max_qp_wr = 16384;
	attr->max_cqe = 1 << 20;
	attr->max_qp_rd_atom = 16;
	attr->max_qp_init_rd_atom = 16;
	attr->max_sge = 4;
	attr->atomic_cap = IBV_ATOMIC_HCA;
	attr->max_srq = mock_cm.max_srq;
	attr->max_srq_wr = mock_cm.max_srq_wr;
	attr->max_srq_sge = mock_cm.max_srq ? 1 : 0;
	return 0;
}

#undef ibv_query_port
int ibv_query_port(struct ibv_context *context, uint8_t port_num,
		   struct _compat_ibv_port_attr *port_attr)
{
	struct ibv_port_attr *a = (struct ibv_port_attr *)port_attr;

	(void)context;
	(void)port_num;
	a->state = IBV_PORT_ACTIVE;
	a->max_msg_sz = mock_cm.port_max_msg_sz ? mock_cm.port_max_msg_sz
						: 1u << 30;
	return 0;
}

struct ibv_pd *ibv_alloc_pd(struct ibv_context *context)
{
	struct ibv_pd *pd = zalloc(sizeof(*pd));

	pd->context = context;
	return pd;
}

int ibv_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	return 0;
}

struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *context)
{
	struct ibv_comp_channel *ch = zalloc(sizeof(*ch));

	ch->context = context;
	ch->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	assert(ch->fd >= 0);
	return ch;
}

int ibv_destroy_comp_channel(struct ibv_comp_channel *ch)
{
	close(ch->fd);
	free(ch);
	return 0;
}

struct ibv_cq *ibv_create_cq(struct ibv_context *context, int cqe,
			     void *cq_context, struct ibv_comp_channel *channel,
			     int comp_vector)
{
	struct ibv_cq *cq = zalloc(sizeof(*cq));

	(void)comp_vector;
	mock_cm.create_cq++;
	cq->context = context;
	cq->channel = channel;
	cq->cq_context = cq_context;
	cq->cqe = cqe;
	return cq;
}

int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
	mock_cm.resize_cq++;
	cq->cqe = cqe;
	return 0;
}

int ibv_destroy_cq(struct ibv_cq *cq)
{
	mock_cm.destroy_cq++;
	free(cq);
	return 0;
}

int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	assert(!mock_qp_destroyed(qp));
	if (mask & IBV_QP_STATE) {
		qp->state = attr->qp_state;
		if (attr->qp_state == IBV_QPS_ERR)
			mock_cm.modify_qp_err++;
	}
	return 0;
}

struct ibv_srq *ibv_create_srq(struct ibv_pd *pd,
			       struct ibv_srq_init_attr *attr)
{
	struct ibv_srq *srq;

	mock_cm.create_srq++;
	/* the library asks only a device that said it has them */
	assert(mock_cm.max_srq > 0);
	if (mock_cm.fail_create_srq) {
		errno = mock_cm.fail_create_srq;
		return NULL;
	}
	assert(attr->attr.max_wr <= (uint32_t)mock_cm.max_srq_wr);
	srq = zalloc(sizeof(*srq));
	srq->context = pd->context;
	srq->pd = pd;
	srq->srq_context = attr->srq_context;
	mock_cm.srq = srq;
	mock_cm.srq_max_wr = attr->attr.max_wr;
	return srq;
}

int ibv_destroy_srq(struct ibv_srq *srq)
{
	assert(srq == mock_cm.srq);
	mock_cm.destroy_srq++;
	mock_cm.srq = NULL;
	free(srq);
	return 0;
}

int ibv_get_async_event(struct ibv_context *context,
			struct ibv_async_event *event)
{
	(void)context;
	(void)event;
	errno = EAGAIN;
	return -1;
}

void ibv_ack_async_event(struct ibv_async_event *event)
{
	(void)event;
}

static struct ibv_mr *reg(struct ibv_pd *pd, void *addr, size_t length)
{
	struct mock_mr *m;

	mock_cm.reg_mr++;
	if (mock_cm.fail_reg_mr) {
		errno = mock_cm.fail_reg_mr;
		return NULL;
	}
	m = zalloc(sizeof(*m));
	m->mr.context = pd->context;
	m->mr.pd = pd;
	m->mr.addr = addr;
	m->mr.length = length;
	m->mr.lkey = next_key++;
	m->mr.rkey = 0x10000u | next_key++;
	m->next = mrs;
	mrs = m;
	return &m->mr;
}

#undef ibv_reg_mr
struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			  int access)
{
	(void)access;
	return reg(pd, addr, length);
}

struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t length,
				uint64_t iova, unsigned int access)
{
	(void)iova;
	(void)access;
	return reg(pd, addr, length);
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	struct mock_mr **pp;

	for (pp = &mrs; *pp; pp = &(*pp)->next) {
		if (&(*pp)->mr == mr) {
			struct mock_mr *m = *pp;

			*pp = m->next;
			mock_cm.dereg_mr++;
			free(m);
			return 0;
		}
	}
	assert(!"ibv_dereg_mr of an unknown MR");
	return EINVAL;
}
