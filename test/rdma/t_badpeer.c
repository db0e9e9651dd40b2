/*
 * Bad peers: a client built on raw rdma_cm and verbs (not on the library's
 * send path) completes a valid handshake with an evrdma server and then
 * sends malformed traffic -- or offers a malformed handshake.  Each case
 * must close only that connection (the server's on_close sees -EPROTO, the
 * raw client sees the disconnect or the reject) while a well-behaved
 * evrdma connection on the same server keeps echoing, content-checked.
 *
 * The raw client runs in a child process of its own (fork + exec),
 * synchronously; the server and the good client run in the parent's loop.
 */
#include "rt_pair.h"

#include <arpa/inet.h>
#include <poll.h>
#include <stdbool.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <sys/wait.h>

#include "proto.h"

enum bad_case {
	BAD_MAGIC,	 /* handshake: not an evrdma peer -> rejected */
	BAD_VERSION,	 /* handshake: unknown protocol version -> rejected */
	BAD_NO_PRIVDATA, /* handshake: nothing at all (rping-like) */
	BAD_TYPE,	 /* unknown message type */
	BAD_LEN_MAX,	 /* eager length beyond the eager maximum */
	BAD_OVERSIZE,	 /* more bytes than the receive buffer holds */
	BAD_TRUNCATED,	 /* header says more than was sent */
	BAD_FLAGS,	 /* unknown header flags */
	BAD_RNDV_RKEY,	 /* rendezvous with a bogus rkey/address */
	BAD_RNDV_LEN,	 /* rendezvous length beyond the maximum */
	BAD_CREDITS,	 /* returns credits that were never used */
	BAD_FIN,	 /* a finish for a rendezvous never sent */
	BAD_NCASES
};

static const char *const case_names[BAD_NCASES] = {
	"bad magic", "bad version", "no private data", "unknown type",
	"length beyond maximum", "oversize", "truncated", "unknown flags",
	"bogus rendezvous rkey", "rendezvous length beyond maximum",
	"credit overflow", "unexpected finish",
};

static bool is_handshake_case(enum bad_case c)
{
	return c == BAD_MAGIC || c == BAD_VERSION || c == BAD_NO_PRIVDATA;
}

/* ---- the raw client (child process) ---- */

static int wait_cm(struct rdma_event_channel *ec, enum rdma_cm_event_type want,
		   int timeout_ms, enum rdma_cm_event_type *got)
{
	struct pollfd pfd = {.fd = ec->fd, .events = POLLIN};
	struct rdma_cm_event *ev;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return -1;
	if (rdma_get_cm_event(ec, &ev))
		return -1;
	*got = ev->event;
	rdma_ack_cm_event(ev);
	return *got == want ? 0 : 1;
}

static size_t craft(enum bad_case bc, uint8_t *buf)
{
	struct evr__hdr h = {0};
	struct evr__rndv_req r = {0};

	switch (bc) {
	case BAD_TYPE:
		h.type = 77;
		break;
	case BAD_LEN_MAX:
		h.type = EVR_T_EAGER;
		h.len = 8192 + 16; /* fits the buffer, beyond the maximum */
		evr__hdr_encode(buf, &h);
		memset(buf + EVR_HDR_SIZE, 0x5a, h.len);
		return EVR_HDR_SIZE + h.len;
	case BAD_OVERSIZE:
		h.type = EVR_T_EAGER;
		h.len = 32768;
		evr__hdr_encode(buf, &h);
		memset(buf + EVR_HDR_SIZE, 0x5a, h.len);
		return EVR_HDR_SIZE + h.len;
	case BAD_TRUNCATED:
		h.type = EVR_T_EAGER;
		h.len = 100;
		evr__hdr_encode(buf, &h);
		return EVR_HDR_SIZE + 10;
	case BAD_FLAGS:
		h.type = EVR_T_EAGER;
		h.flags = 0x80;
		break;
	case BAD_RNDV_RKEY:
	case BAD_RNDV_LEN:
		h.type = EVR_T_RNDV_REQ;
		h.len = EVR_RNDV_REQ_SIZE;
		r.addr = 0x1000;
		r.rkey = 0xdeadbeef;
		r.len = bc == BAD_RNDV_LEN ? (1ull << 40) : 65536;
		r.id = 0;
		evr__hdr_encode(buf, &h);
		evr__rndv_req_encode(buf + EVR_HDR_SIZE, &r);
		return EVR_HDR_SIZE + EVR_RNDV_REQ_SIZE;
	case BAD_CREDITS:
		h.type = EVR_T_CREDIT;
		h.credits = 1000;
		break;
	case BAD_FIN:
		h.type = EVR_T_RNDV_FIN;
		h.len = EVR_RNDV_FIN_SIZE;
		evr__hdr_encode(buf, &h);
		evr__rndv_fin_encode(buf + EVR_HDR_SIZE, 12345, 0);
		return EVR_HDR_SIZE + EVR_RNDV_FIN_SIZE;
	default:
		break;
	}
	evr__hdr_encode(buf, &h);
	return EVR_HDR_SIZE;
}

/* Exit status: 0 when the server reacted as it must (reject for a bad
 * handshake, a disconnect after bad traffic), else a code saying what
 * went wrong. */
static int raw_client(enum bad_case bc, uint16_t port)
{
	struct rdma_event_channel *ec = rdma_create_event_channel();
	struct rdma_cm_id *id = NULL;
	struct sockaddr_in dst = {0};
	struct ibv_qp_init_attr qa = {0};
	struct rdma_conn_param cp = {0};
	enum rdma_cm_event_type got;
	struct ibv_send_wr swr = {0}, *bad_s;
	struct ibv_recv_wr rwr = {0}, *bad_r;
	struct ibv_sge sge;
	struct ibv_wc wc;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	static uint8_t mem[16][40000];
	uint8_t pdata[EVR_HS_MAX];
	struct evr__hs hs = {0};
	size_t n;
	int i, rc;

	dst.sin_family = AF_INET;
	dst.sin_port = htons(port);
	inet_pton(AF_INET, rt_addr(), &dst.sin_addr);
	if (!ec || rdma_create_id(ec, &id, NULL, RDMA_PS_TCP) ||
	    rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) ||
	    wait_cm(ec, RDMA_CM_EVENT_ADDR_RESOLVED, 5000, &got))
		return 10;
	pd = ibv_alloc_pd(id->verbs);
	cq = ibv_create_cq(id->verbs, 64, NULL, NULL, 0);
	mr = ibv_reg_mr(pd, mem, sizeof(mem), IBV_ACCESS_LOCAL_WRITE);
	qa.send_cq = qa.recv_cq = cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 16;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	if (!pd || !cq || !mr || rdma_create_qp(id, pd, &qa))
		return 11;
	for (i = 1; i < 16; i++) {
		sge.addr = (uintptr_t)mem[i];
		sge.length = sizeof(mem[i]);
		sge.lkey = mr->lkey;
		rwr.wr_id = (uint64_t)i;
		rwr.sg_list = &sge;
		rwr.num_sge = 1;
		if (ibv_post_recv(id->qp, &rwr, &bad_r))
			return 12;
	}
	if (rdma_resolve_route(id, 2000) ||
	    wait_cm(ec, RDMA_CM_EVENT_ROUTE_RESOLVED, 5000, &got))
		return 13;

	hs.kind = EVR_HS_REQ;
	hs.recv_depth = 15;
	hs.max_eager = 8192;
	hs.max_msg = 1 << 20;
	n = evr__hs_encode(pdata, &hs);
	if (bc == BAD_MAGIC)
		pdata[0] ^= 0xff;
	if (bc == BAD_VERSION)
		pdata[4] = 99;
	cp.private_data = bc == BAD_NO_PRIVDATA ? NULL : pdata;
	cp.private_data_len = bc == BAD_NO_PRIVDATA ? 0 : (uint8_t)n;
	cp.responder_resources = cp.initiator_depth = 1;
	cp.retry_count = 6;
	if (rdma_connect(id, &cp))
		return 14;
	rc = wait_cm(ec, RDMA_CM_EVENT_ESTABLISHED, 10000, &got);
	if (is_handshake_case(bc))
		return rc == 1 && got == RDMA_CM_EVENT_REJECTED ? 0 : 15;
	if (rc)
		return 16;

	n = craft(bc, mem[0]);
	sge.addr = (uintptr_t)mem[0];
	sge.length = (uint32_t)n;
	sge.lkey = mr->lkey;
	swr.wr_id = 0;
	swr.sg_list = &sge;
	swr.num_sge = 1;
	swr.opcode = IBV_WR_SEND;
	swr.send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(id->qp, &swr, &bad_s))
		return 17;
	/* the server must drop us: DISCONNECTED within a bounded time */
	for (i = 0; i < 3; i++) {
		rc = wait_cm(ec, RDMA_CM_EVENT_DISCONNECTED, 10000, &got);
		if (rc == 0)
			break;
		if (rc < 0)
			return 18;
	}
	while (ibv_poll_cq(cq, 1, &wc) > 0)
		;
	rdma_destroy_qp(id);
	rdma_destroy_id(id);
	rdma_destroy_event_channel(ec);
	return rc == 0 ? 0 : 19;
}

/* ---- the parent: an evrdma echo server and a good client ---- */

struct server {
	evr_ctx *ctx;
	evr_listener *l;
	int accepted;
	int closes_eproto, closes_other;
};

static void echo_sent(evr_conn *c, int status, void *arg)
{
	(void)c;
	(void)status;
	evr_msg_release(arg);
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	evr_msg *m = evr_conn_hold(c);

	(void)arg;
	assert_non_null(m);
	if (evr_send(c, data, len, echo_sent, m) < 0)
		evr_msg_release(m);
}

static void srv_close(evr_conn *c, int status, void *arg)
{
	struct server *srv = arg;

	(void)c;
	if (status == -EPROTO)
		srv->closes_eproto++;
	else
		srv->closes_other++;
}

/* A conn that fails before it is established reports through on_connect
 * (a bad message can arrive before the server's ESTABLISHED event). */
static void srv_connect(evr_conn *c, int status, void *arg)
{
	if (status < 0)
		srv_close(c, status, arg);
}

static void srv_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct server *srv = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	evr_conn_opts_init(&o);
	o.on_connect = srv_connect;
	o.on_recv = srv_recv;
	o.on_close = srv_close;
	o.arg = srv;
	assert_int_equal(evr_accept(req, &o, NULL), 0);
	srv->accepted++;
}

struct good {
	evr_conn *conn;
	int up, closed, bad;
	uint32_t sent, echoed;
	uint8_t buf[4][2048];
};

static void good_pump(struct good *g);

static void good_sent(evr_conn *c, int status, void *arg)
{
	struct good *g = arg;

	(void)c;
	if (status)
		g->bad++;
}

static void good_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct good *g = arg;
	size_t want = 100 + (g->echoed % 7) * 250;

	(void)c;
	if (len != want || rt_verify(data, len, g->echoed) >= 0)
		g->bad++;
	g->echoed++;
	good_pump(g);
}

static void good_pump(struct good *g)
{
	/* window of 2: buffers are reused only after their echo came back,
	 * which (in order) means their send completed too */
	while (g->up && g->sent < g->echoed + 2) {
		uint8_t *b = g->buf[g->sent % 4];
		size_t len = 100 + (g->sent % 7) * 250;

		rt_fill(b, len, g->sent);
		assert_int_equal(evr_send(g->conn, b, len, good_sent, g), 0);
		g->sent++;
	}
}

static void good_connect(evr_conn *c, int status, void *arg)
{
	struct good *g = arg;

	assert_int_equal(status, 0);
	g->conn = c;
	g->up = 1;
	good_pump(g);
}

static void good_close(evr_conn *c, int status, void *arg)
{
	struct good *g = arg;

	(void)c;
	(void)status;
	g->up = 0;
	g->closed++;
}

struct wait_child {
	pid_t pid;
	int status;
	int done;
	struct server *srv;
	int want_closes;
};

static int child_and_close(void *arg)
{
	struct wait_child *w = arg;

	if (!w->done && waitpid(w->pid, &w->status, WNOHANG) == w->pid)
		w->done = 1;
	return w->done &&
	       w->srv->closes_eproto + w->srv->closes_other >= w->want_closes;
}

static int good_up(void *arg)
{
	struct good *g = arg;

	return g->up && g->echoed >= 10;
}

static void test_bad_peers(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct server srv = {0};
	struct good *g = calloc(1, sizeof(*g));
	struct evr_ctx_opts o;
	struct evr_conn_opts co;
	const char *self;
	uint16_t port;
	int bc;

	(void)state;
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&srv.ctx, loop, &o), 0);
	assert_int_equal(evr_listen(srv.ctx, rt_addr(), 0, 16, srv_accept,
				    &srv, &srv.l),
			 0);
	port = evr_listener_port(srv.l);

	evr_conn_opts_init(&co);
	co.on_connect = good_connect;
	co.on_recv = good_recv;
	co.on_close = good_close;
	co.arg = g;
	assert_int_equal(evr_connect(srv.ctx, rt_addr(), port, &co, NULL), 0);
	assert_int_equal(rt_run_until(loop, good_up, g, 20), 0);

	for (bc = 0; bc < BAD_NCASES; bc++) {
		struct wait_child w = {0};
		uint32_t before = g->echoed;
		int closes = srv.closes_eproto;

		w.srv = &srv;
		w.want_closes = srv.closes_eproto + srv.closes_other +
				(is_handshake_case(bc) ? 0 : 1);
		self = rt_self_exe();
		fflush(NULL);
		w.pid = fork();
		assert_true(w.pid >= 0);
		if (w.pid == 0) {
			/* a fresh process: verbs resources must not be shared
			 * across fork() with the parent's rdma_cm state */
			char a1[16], a2[16];

			snprintf(a1, sizeof(a1), "%d", bc);
			snprintf(a2, sizeof(a2), "%u", port);
			execl(self, "t_badpeer", "--raw-client", a1, a2,
			      (char *)NULL);
			_exit(127);
		}
		if (rt_run_until(loop, child_and_close, &w, 40)) {
			kill(w.pid, SIGKILL);
			waitpid(w.pid, NULL, 0);
			fail_msg("case '%s': no reaction in time",
				 case_names[bc]);
		}
		printf("# %-32s raw client exit %d, server closes with "
		       "-EPROTO %d, good echoes %u\n",
		       case_names[bc], WEXITSTATUS(w.status),
		       srv.closes_eproto - closes, g->echoed - before);
		assert_true(WIFEXITED(w.status));
		assert_int_equal(WEXITSTATUS(w.status), 0);
		if (!is_handshake_case(bc))
			assert_int_equal(srv.closes_eproto, closes + 1);
		assert_int_equal(srv.closes_other, 0);
		/* the good connection is untouched and keeps echoing */
		assert_true(g->up);
		assert_int_equal(g->closed, 0);
		assert_int_equal(g->bad, 0);
		before = g->echoed;
		assert_int_equal(rt_run_until(loop, good_up, g, 10), 0);
	}
	/* the server still accepts and serves new connections */
	evr_listener_close(srv.l);
	evr_ctx_destroy(srv.ctx);
	assert_int_equal(g->closed, 1); /* on_close(-ECANCELED) at destroy */
	free(g);
	ev_loop_destroy(loop);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_peers),
	};

	/* The raw client keeps its verbs objects to the end (some of its
	 * exits are early ones): _exit, no leak report for a helper process
	 * that is not the code under test. */
	if (argc == 4 && !strcmp(argv[1], "--raw-client"))
		_exit(raw_client((enum bad_case)atoi(argv[2]),
				 (uint16_t)atoi(argv[3])));

	rt_init(600);
	return cmocka_run_group_tests_name("rdma_badpeer", tests, NULL, NULL);
}
