/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A server as production runs it: an ordinary user, without
 * CAP_IPC_LOCK, under the usual 8 MiB locked-memory limit, with the
 * default options (the shared receive pool asked for by name).
 *
 * main() forks the server before anything touches a device.  The child
 * lowers RLIMIT_MEMLOCK to 8 MiB, becomes nobody (when started as root)
 * and serves: every message is answered with its length and FNV-1a digest;
 * the one-byte message "S" asks it to send UNPRIV_BIG_SEND bytes back,
 * which its limit cannot register, and it answers with the status that
 * send got and the number of locked-memory errors it logged.  The parent
 * (the clients, as the test runs) closes the pipe to end it and checks
 * its exit status: 0 when the child found no fault of its own.
 *
 * test_conns: UNPRIV_CONNS connections at once, each message's digest
 * right: the limit allows them.
 * test_past_limit: UNPRIV_MORE connections at once while those stay open:
 * each one connects, or is refused with -ECONNREFUSED and the reason
 * "no receive buffers" -- and some are (the limit is reached), none time
 * out or fail otherwise; the server logs the run of refusals once; it
 * still answers on the first connections.
 * test_big: a 64 MiB message arrives whole (received through a staging
 * buffer: the limit cannot register it at once), twice (4 MiB under
 * valgrind, staged as well).
 * test_big_then_small: a staged message and a small rendezvous one right
 * behind it arrive whole and in order, and both sends end with 0 (the
 * small one's read ends first; its FIN must not overtake the big one's).
 * test_send_past_limit: the server's own send of 16 MiB fails with
 * -ENOMEM and its log names the limit (once); the connection still
 * carries messages afterwards.
 */
#include "rt.h"

#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define UNPRIV_LIMIT	(8u << 20)
#define UNPRIV_CONNS	200
#define VG_UNPRIV_CONNS 40 /* under valgrind */
#define UNPRIV_MORE	400
#define VG_UNPRIV_MORE	300
#define UNPRIV_BIG	(64u << 20)
#define VG_UNPRIV_BIG	(4u << 20) /* under valgrind: staged still */
#define UNPRIV_BIG_SEND (16u << 20)
#define MSG_LEN		64
#define BOUND_S		120.0
#define NOBODY		65534

struct digest {
	uint64_t len, fnv;
};

static struct digest digest_of(const void *data, size_t len)
{
	const uint8_t *p = data;
	struct digest d = {len, 0xcbf29ce484222325ull};

	for (size_t i = 0; i < len; i++)
		d.fnv = (d.fnv ^ p[i]) * 0x100000001b3ull;
	return d;
}

/* ---- the server (child process) ---- */

struct srv {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	ev_io pipe_w;
	unsigned faults, memlock_errors, refusal_warnings, conns;
	void *big;
};

struct sconn {
	struct srv *s;
	/* a reply is read at its post: up to 4 requests at a time per conn */
	uint64_t reply[4][2];
	unsigned nreplies;
};

static void srv_fault(struct srv *s, const char *what)
{
	printf("# server: %s\n", what);
	s->faults++;
}

static void srv_log(enum evr_log_level lvl, const char *msg, void *arg)
{
	struct srv *s = arg;

	if (lvl == EVR_LOG_ERROR && strstr(msg, "RLIMIT_MEMLOCK") &&
	    strstr(msg, "ulimit -l"))
		s->memlock_errors++;
	if (lvl == EVR_LOG_WARN &&
	    strstr(msg, "no receive buffers for a new connection"))
		s->refusal_warnings++;
	else if (lvl <= EVR_LOG_WARN)
		printf("# server log: %s\n", msg);
}

static void srv_reply(evr_conn *c, struct sconn *sc, uint64_t a, uint64_t b)
{
	uint64_t *r = sc->reply[sc->nreplies++ % 4];

	r[0] = a;
	r[1] = b;
	if (evr_send(c, r, sizeof(sc->reply[0]), NULL, NULL))
		srv_fault(sc->s, "reply not sent");
}

static void srv_big_sent(evr_conn *c, int status, void *arg)
{
	struct sconn *sc = arg;

	srv_reply(c, sc, (uint64_t)(int64_t)status, sc->s->memlock_errors);
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct sconn *sc = arg;
	struct srv *s = sc->s;
	struct digest d;
	int rc;

	if (len == 1 && *(const char *)data == 'S') {
		if (!s->big && !(s->big = calloc(1, UNPRIV_BIG_SEND))) {
			srv_fault(s, "no memory for the big send");
			return;
		}
		rc = evr_send(c, s->big, UNPRIV_BIG_SEND, srv_big_sent, sc);
		if (rc) /* refused at once: no callback */
			srv_big_sent(c, rc, sc);
		return;
	}
	d = digest_of(data, len);
	srv_reply(c, sc, d.len, d.fnv);
}

static void srv_closed(evr_conn *c, int status, void *arg)
{
	(void)c;
	(void)status;
	free(arg);
}

static void srv_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct srv *s = arg;
	struct evr_conn_opts o;
	struct sconn *sc = calloc(1, sizeof(*sc));

	(void)l;
	(void)ud;
	(void)ulen;
	if (!sc) {
		srv_fault(s, "calloc");
		return;
	}
	sc->s = s;
	evr_conn_opts_init(&o);
	o.on_recv = srv_recv;
	o.on_close = srv_closed;
	o.arg = sc;
	/* refused for want of receive buffers: the library has answered
	 * the request with its reason (what test_past_limit checks) */
	if (evr_accept(req, &o, NULL) == 0)
		s->conns++;
	else
		free(sc);
}

static void srv_pipe(struct ev_loop *loop, ev_io *w, int revents)
{
	char buf[16];

	(void)revents;
	if (read(w->fd, buf, sizeof(buf)) <= 0) /* the parent is done */
		ev_break(loop, EVBREAK_ALL);
}

/* Become an ordinary user under the usual limit. */
static int drop_privileges(void)
{
	struct rlimit rl = {UNPRIV_LIMIT, UNPRIV_LIMIT};

	if (setrlimit(RLIMIT_MEMLOCK, &rl)) {
		perror("# server: setrlimit");
		return -1;
	}
	if (geteuid() != 0)
		return 0; /* already one (without CAP_IPC_LOCK, presumably:
			   * checked below) */
	if (setgroups(0, NULL) || setgid(NOBODY) || setuid(NOBODY)) {
		perror("# server: becoming nobody");
		return -1;
	}
	return 0;
}

static int server_main(int port_fd, int ctl_fd)
{
	struct evr_ctx_opts o;
	struct evr_stats st;
	struct srv s;
	uint16_t port;
	int rc;

	memset(&s, 0, sizeof(s));
	if (drop_privileges())
		return 2;
	s.loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&o); /* the defaults, on the test address */
	/* the shared receive pool, also in a run with EVR_SRQ=off: a queue
	 * per connection holds some 30 connections under this limit */
	o.srq = EVR_SRQ_ON;
	o.log_fn = srv_log;
	o.log_arg = &s;
	o.log_level = EVR_LOG_WARN;
	rc = evr_ctx_create(&s.ctx, s.loop, &o);
	if (rc) {
		printf("# server: evr_ctx_create: %s\n", evr_strerror(rc));
		return 2;
	}
	evr_ctx_stats(s.ctx, &st);
	if (st.memlock_limit != UNPRIV_LIMIT) {
		printf("# server: memlock_limit %llu, not %u: still "
		       "privileged?\n",
		       (unsigned long long)st.memlock_limit, UNPRIV_LIMIT);
		return 2;
	}
	rc = evr_listen(s.ctx, rt_addr(), 0, 0, srv_accept, &s, &s.l);
	if (rc) {
		printf("# server: evr_listen: %s (as uid %u: are "
		       "/dev/infiniband/uverbs* and rdma_cm 0666, as "
		       "rdma-core's udev rules make them?)\n",
		       evr_strerror(rc), (unsigned)getuid());
		return 2;
	}
	port = evr_listener_port(s.l);
	if (write(port_fd, &port, sizeof(port)) != sizeof(port))
		return 2;
	close(port_fd);
	ev_io_init(&s.pipe_w, srv_pipe, ctl_fd, EV_READ);
	ev_io_start(s.loop, &s.pipe_w);
	ev_run(s.loop, 0);
	evr_ctx_stats(s.ctx, &st);
	printf("# server: %u connections accepted, %u refused; %llu bytes "
	       "registered of %u; pool of %u receive buffers, %u lent\n",
	       s.conns, st.srq_refused, (unsigned long long)st.reg_bytes,
	       UNPRIV_LIMIT, st.srq_buffers, st.srq_lent);
	if (st.reg_bytes > UNPRIV_LIMIT)
		srv_fault(&s, "registered more than the limit");
	/* a run of refusals is logged once, not per connection */
	if (st.srq_refused && s.refusal_warnings != 1)
		srv_fault(&s, "refusals not logged exactly once");
	evr_listener_close(s.l);
	evr_ctx_destroy(s.ctx);
	ev_loop_destroy(s.loop);
	free(s.big);
	return s.faults ? 1 : 0;
}

/* ---- the clients (the tests) ---- */

static pid_t server_pid;
static int server_ctl = -1;
static uint16_t server_port;

static struct ev_loop *loop;
static evr_ctx *cctx;

struct cconn {
	evr_conn *c;
	unsigned idx;
	int connect_status; /* 1 until on_connect */
	bool refused_full;  /* "no receive buffers" */
	bool closed;
	uint8_t msg[MSG_LEN];
	unsigned replies;
	uint64_t reply[2];
	uint64_t log[4][2]; /* replies, by number modulo 4 */
};

static struct cconn *conns;
static unsigned nconns, nconnected, nfinished, nreplies, nbad;

static void cli_connected(evr_conn *c, int status, void *arg)
{
	struct cconn *cc = arg;
	size_t len = 0;
	const void *r;

	cc->connect_status = status;
	nfinished++;
	if (status == 0) {
		nconnected++;
		return;
	}
	r = evr_conn_reject_reason(c, &len);
	cc->refused_full = status == -ECONNREFUSED && r &&
			   len == strlen("no receive buffers") &&
			   !memcmp(r, "no receive buffers", len);
	cc->c = NULL;
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct cconn *cc = arg;

	(void)c;
	if (len != sizeof(cc->reply)) {
		nbad++;
		return;
	}
	memcpy(cc->reply, data, len);
	memcpy(cc->log[cc->replies % 4], data, len);
	cc->replies++;
	nreplies++;
}

static void cli_closed(evr_conn *c, int status, void *arg)
{
	struct cconn *cc = arg;

	(void)c;
	(void)status;
	cc->closed = true;
	cc->c = NULL;
}

static void connect_n(unsigned first, unsigned n)
{
	for (unsigned i = first; i < first + n; i++) {
		struct cconn *cc = &conns[i];
		struct evr_conn_opts o;

		memset(cc, 0, sizeof(*cc));
		cc->idx = i;
		cc->connect_status = 1;
		rt_fill(cc->msg, MSG_LEN, i);
		evr_conn_opts_init(&o);
		o.on_connect = cli_connected;
		o.on_recv = cli_recv;
		o.on_close = cli_closed;
		o.arg = cc;
		assert_int_equal(evr_connect(cctx, rt_addr(), server_port, &o,
					     &cc->c),
				 0);
	}
}

static unsigned target;

/* *arg, a send's status, is set (it starts at 1) */
static int sends_done(void *arg)
{
	return *(int *)arg != 1;
}

static int finished(void *arg)
{
	(void)arg;
	return nfinished >= target;
}

static int replied(void *arg)
{
	(void)arg;
	return nreplies >= target;
}

/* Send cc its message and wait for its digest. */
static void check_digest(struct cconn *cc, const void *data, size_t len)
{
	struct digest d = digest_of(data, len);

	target = nreplies + 1;
	assert_int_equal(evr_send(cc->c, data, len, NULL, NULL), 0);
	assert_int_equal(rt_run_until(loop, replied, NULL, BOUND_S), 0);
	assert_int_equal(cc->reply[0], d.len);
	assert_int_equal(cc->reply[1], d.fnv);
}

static unsigned n_conns(void)
{
	return rt_on_valgrind() ? VG_UNPRIV_CONNS : UNPRIV_CONNS;
}

static unsigned n_more(void)
{
	return rt_on_valgrind() ? VG_UNPRIV_MORE : UNPRIV_MORE;
}

static void test_conns(void **state)
{
	unsigned n = n_conns(), i, r0 = nreplies;

	(void)state;
	connect_n(0, n);
	nconns = n;
	target = n;
	assert_int_equal(rt_run_until(loop, finished, NULL, BOUND_S), 0);
	printf("# %u of %u connected to the limited server\n", nconnected, n);
	assert_int_equal(nconnected, n);
	for (i = 0; i < n; i++)
		assert_int_equal(
		    evr_send(conns[i].c, conns[i].msg, MSG_LEN, NULL, NULL), 0);
	target = r0 + n;
	assert_int_equal(rt_run_until(loop, replied, NULL, BOUND_S), 0);
	assert_int_equal(nbad, 0);
	for (i = 0; i < n; i++) {
		struct digest d = digest_of(conns[i].msg, MSG_LEN);

		assert_int_equal(conns[i].replies, 1);
		assert_int_equal(conns[i].reply[0], d.len);
		assert_int_equal(conns[i].reply[1], d.fnv);
	}
}

static void test_past_limit(void **state)
{
	unsigned n = n_more(), first = nconns, i, ok = 0, full = 0;

	(void)state;
	assert_int_equal(nconnected, nconns); /* test_conns ran */
	connect_n(first, n);
	nconns += n;
	target = nconns;
	assert_int_equal(rt_run_until(loop, finished, NULL, BOUND_S), 0);
	for (i = first; i < nconns; i++) {
		if (conns[i].connect_status == 0)
			ok++;
		else if (conns[i].refused_full)
			full++;
		else
			printf("# conn %u: %s\n", i,
			       evr_strerror(conns[i].connect_status));
	}
	printf("# %u more: %u connected, %u refused for want of receive "
	       "buffers\n",
	       n, ok, full);
	assert_int_equal(ok + full, n); /* no timeout, no other error */
	assert_true(full > 0);		/* the limit was reached */
	/* the first ones are served still */
	check_digest(&conns[0], conns[0].msg, MSG_LEN);
	check_digest(&conns[first - 1], conns[first - 1].msg, MSG_LEN);
}

static void test_big(void **state)
{
	size_t len = rt_on_valgrind() ? VG_UNPRIV_BIG : UNPRIV_BIG;
	uint8_t *big = malloc(len);

	(void)state;
	assert_non_null(big);
	assert_non_null(conns[0].c);
	rt_fill(big, len, 7);
	check_digest(&conns[0], big, len);
	rt_fill(big, len, 8);
	check_digest(&conns[1], big, len);
	free(big);
}

static void sent_cb(evr_conn *c, int status, void *arg)
{
	int *st = arg;

	(void)c;
	*st = status;
}

/* A staged message and a small rendezvous one right behind it: the
 * server reads them side by side, the small one's read ends first, yet
 * its FIN waits for the big one's (the sender matches them in order).
 * Both sends end with 0, both digests come back right and in order. */
static void test_big_then_small(void **state)
{
	/* half the 64 MiB: both fit the send queue limit */
	size_t len = (rt_on_valgrind() ? VG_UNPRIV_BIG : UNPRIV_BIG) / 2;
	const size_t small = 256u << 10; /* rendezvous, not staged */
	struct cconn *cc = &conns[3];
	uint8_t *big = malloc(len);
	struct digest d0, d1;
	int st0 = 1, st1 = 1;
	unsigned r0 = cc->replies;

	(void)state;
	assert_non_null(big);
	assert_non_null(cc->c);
	rt_fill(big, len, 9);
	d0 = digest_of(big, len);
	d1 = digest_of(big + len - small, small);
	target = nreplies + 2;
	assert_int_equal(evr_send(cc->c, big, len, sent_cb, &st0), 0);
	assert_int_equal(
	    evr_send(cc->c, big + len - small, small, sent_cb, &st1), 0);
	assert_int_equal(rt_run_until(loop, replied, NULL, BOUND_S), 0);
	assert_int_equal(cc->replies, r0 + 2);
	assert_int_equal(cc->log[r0 % 4][0], d0.len);
	assert_int_equal(cc->log[r0 % 4][1], d0.fnv);
	assert_int_equal(cc->log[(r0 + 1) % 4][0], d1.len);
	assert_int_equal(cc->log[(r0 + 1) % 4][1], d1.fnv);
	assert_int_equal(rt_run_until(loop, sends_done, &st1, BOUND_S), 0);
	assert_int_equal(st0, 0);
	assert_int_equal(st1, 0);
	free(big);
}

static void test_send_past_limit(void **state)
{
	struct cconn *cc = &conns[2];

	(void)state;
	target = nreplies + 1;
	assert_int_equal(evr_send(cc->c, "S", 1, NULL, NULL), 0);
	assert_int_equal(rt_run_until(loop, replied, NULL, BOUND_S), 0);
	assert_int_equal((int64_t)cc->reply[0], -ENOMEM);
	assert_int_equal(cc->reply[1], 1); /* said once, naming the limit */
	check_digest(cc, cc->msg, MSG_LEN);
}

static int group_setup(void **state)
{
	struct evr_ctx_opts o;

	(void)state;
	loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&o);
	/* the connections keep the windows the server lent them: one idle
	 * long enough to give its window back (a slow run) would make room
	 * for another, and test_past_limit counts the refused */
	o.window_idle_ms = UINT_MAX;
	assert_int_equal(evr_ctx_create(&cctx, loop, &o), 0);
	conns = calloc(UNPRIV_CONNS + UNPRIV_MORE, sizeof(*conns));
	assert_non_null(conns);
	return 0;
}

static int group_teardown(void **state)
{
	int st = 0;

	(void)state;
	evr_ctx_destroy(cctx);
	ev_loop_destroy(loop);
	free(conns);
	close(server_ctl);
	if (waitpid(server_pid, &st, 0) != server_pid || !WIFEXITED(st) ||
	    WEXITSTATUS(st)) {
		printf("# the server process failed (status 0x%x)\n", st);
		return -1;
	}
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_conns),
	    cmocka_unit_test(test_past_limit),
	    cmocka_unit_test(test_big),
	    cmocka_unit_test(test_big_then_small),
	    cmocka_unit_test(test_send_past_limit),
	};
	int port_pipe[2], ctl_pipe[2];

	rt_init(600);
	/* the server first, before this process touches a device */
	if (pipe(port_pipe) || pipe(ctl_pipe))
		return 1;
	fflush(stdout);
	server_pid = fork();
	if (server_pid < 0)
		return 1;
	if (server_pid == 0) {
		close(port_pipe[0]);
		close(ctl_pipe[1]);
		_exit(server_main(port_pipe[1], ctl_pipe[0]));
	}
	close(port_pipe[1]);
	close(ctl_pipe[0]);
	server_ctl = ctl_pipe[1];
	if (read(port_pipe[0], &server_port, sizeof(server_port)) !=
	    sizeof(server_port)) {
		int st = 0;

		waitpid(server_pid, &st, 0);
		printf("the server process did not start (status 0x%x)\n", st);
		return 1;
	}
	close(port_pipe[0]);
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
