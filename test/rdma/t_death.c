/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * A peer process dies with operations in flight.
 *
 * The peer is a child process: this program forks and re-executes itself
 * with "--child ..." arguments, so the child starts with fresh verbs and
 * rdma_cm state of its own, like any other process.  The child registers a
 * region, sends its key and serves; the parent queues writes, reads,
 * atomics and sends (eager and rendezvous) beyond what the SQ and the
 * credits let out at once, and the child is SIGKILLed: either after the
 * first of them were posted, or before, so that every one of them meets a
 * dead peer.  The kernel tears the child's QP and cm_id down and the
 * parent must see, on its ctx:
 *
 *  - every operation's callback exactly once; those that were not posted
 *    before the kill (or all, when the child died first) with an error,
 *  - on_close exactly once, with -ECONNRESET, after all of them, within
 *    DETECT_S of the kill,
 *  - no open conn left in evr_ctx_stats(), and its region no longer busy,
 *  - the next child connecting (or accepting) and exchanging messages.
 *
 * Both directions: the child connects to the parent's listener, and the
 * parent connects to the child's.  Every wait is bounded.
 */
#define _GNU_SOURCE /* pipe2 */
#include "rt.h"

#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#define REGION (1u << 20)
#define WLEN (16u << 10)
#define NOPS 600
#define SMALL 512
#define LARGE 100000 /* above the eager size: a rendezvous send */
#define RKEY_TAG "RKEY"
#define RKEY_MSG (4 + EVR_RKEY_PACKED_SIZE)
/* Seconds from the kill until on_close (times EVR_TEST_TIMEOUT_SCALE).  The
 * kernel disconnects a dead process's connections as it tears them down,
 * so the news takes one CM message: 0.01-0.02 s in the emulated guest.
 * The bound leaves room for a loaded host and stays below the ~1.9 s after
 * which transport retries alone would end the conn (7 tries of the 0.27 s
 * ACK timeout): a conn that ends only by those is a failure here. */
#define DETECT_S 1.5

/* ------------------------------------------------------------------ */
/* The child                                                          */

struct kid {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	evr_conn *conn;
	int fd;	      /* status pipe to the parent */
	bool greeter; /* exchange one message and close, vs serve */
	uint8_t *mem;
	evr_mr *mr;
	uint8_t rkmsg[RKEY_MSG];
	char hello[64], welcome[64];
	int rc;
};

static void kid_fail(const char *what, int err)
{
	fprintf(stderr, "t_death child %d: %s: %s\n", (int)getpid(), what,
		evr_strerror(err));
	_exit(20);
}

static void kid_say(struct kid *k, const char *fmt, unsigned v)
{
	char line[64];
	int n = snprintf(line, sizeof(line), fmt, v);

	if (write(k->fd, line, (size_t)n) != n)
		_exit(21);
}

static void kid_connected(evr_conn *c, int status, void *arg)
{
	struct kid *k = arg;
	int rc;

	if (status)
		kid_fail("connect", status);
	k->conn = c;
	if (k->greeter)
		rc = evr_send(c, k->hello, strlen(k->hello) + 1, NULL, NULL);
	else
		rc = evr_send(c, k->rkmsg, RKEY_MSG, NULL, NULL);
	if (rc)
		kid_fail("send", rc);
	kid_say(k, "up %u\n", 0);
}

static void kid_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct kid *k = arg;

	if (!k->greeter)
		return; /* a victim just takes what comes */
	if (len != strlen(k->welcome) + 1 || memcmp(data, k->welcome, len)) {
		fprintf(stderr, "t_death child: unexpected reply\n");
		_exit(22);
	}
	kid_say(k, "ok %u\n", 0);
	if (evr_conn_close(c, 0))
		_exit(23);
}

static void kid_closed(evr_conn *c, int status, void *arg)
{
	struct kid *k = arg;

	(void)c;
	k->rc = status == 0 ? 0 : 24;
	ev_break(k->loop, EVBREAK_ALL);
}

static void kid_opts(struct kid *k, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = kid_connected;
	o->on_recv = kid_recv;
	o->on_close = kid_closed;
	o->arg = k;
}

static void kid_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct kid *k = arg;
	struct evr_conn_opts o;
	int rc;

	(void)l;
	(void)ud;
	(void)ulen;
	if (k->conn) {
		evr_reject(req, "busy", 4);
		return;
	}
	kid_opts(k, &o);
	rc = evr_accept(req, &o, NULL);
	if (rc)
		kid_fail("accept", rc);
}

/* argv: --child victim|greeter connect PORT FD | listen FD */
static int kid_main(int argc, char **argv)
{
	struct kid k;
	struct evr_ctx_opts co;
	struct evr_conn_opts o;
	struct evr_rkey rk;
	int rc;

	if (argc < 5)
		return 30;
	memset(&k, 0, sizeof(k));
	alarm(60);
	k.greeter = !strcmp(argv[2], "greeter");
	k.fd = atoi(argv[argc - 1]);
	k.rc = 25;
	snprintf(k.hello, sizeof(k.hello), "HELLO %d", (int)getpid());
	snprintf(k.welcome, sizeof(k.welcome), "WELCOME %d", (int)getpid());
	k.loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&co);
	if ((rc = evr_ctx_create(&k.ctx, k.loop, &co)))
		kid_fail("ctx", rc);
	if (posix_memalign((void **)&k.mem, 4096, REGION))
		_exit(26);
	memset(k.mem, 0, REGION);
	if ((rc = evr_mr_reg(k.ctx, k.mem, REGION,
			     EVR_ACCESS_REMOTE_WRITE | EVR_ACCESS_REMOTE_READ |
				     EVR_ACCESS_REMOTE_ATOMIC,
			     &k.mr)))
		kid_fail("mr", rc);
	evr_mr_rkey(k.mr, &rk);
	memcpy(k.rkmsg, RKEY_TAG, 4);
	evr_rkey_pack(&rk, k.rkmsg + 4);
	if (!strcmp(argv[3], "connect") && argc == 6) {
		kid_opts(&k, &o);
		rc = evr_connect(k.ctx, rt_addr(), (uint16_t)atoi(argv[4]), &o,
				 NULL);
		if (rc)
			kid_fail("connect", rc);
	} else {
		rc = evr_listen(k.ctx, rt_addr(), 0, 4, kid_accept, &k, &k.l);
		if (rc)
			kid_fail("listen", rc);
		kid_say(&k, "port %u\n", evr_listener_port(k.l));
	}
	ev_run(k.loop, 0);
	/* only a greeter gets here, after its graceful close */
	if (k.l)
		evr_listener_close(k.l);
	evr_mr_dereg(k.mr);
	evr_ctx_destroy(k.ctx);
	ev_loop_destroy(k.loop);
	free(k.mem);
	return k.rc;
}

/* ------------------------------------------------------------------ */
/* The parent                                                         */

struct orec {
	int calls;
	int status;
	int seq; /* callback order, shared with on_close */
};

struct par {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	uint8_t *mem;
	evr_mr *mr;
	/* the current connection */
	evr_conn *conn;
	int connects, connect_status;
	int closes, close_status, close_seq;
	struct evr_rkey rk;
	int got_rkey;
	int hellos;
	char reply[64];
	int seq;
	struct orec ops[NOPS];
	/* the current child */
	pid_t pid;
	int rfd;
	ev_io pipe_w;
	char out[256];
	size_t outlen;
	bool eof;
};

static void par_reset_conn(struct par *p)
{
	p->conn = NULL;
	p->connects = p->connect_status = 0;
	p->closes = p->close_status = 0;
	p->close_seq = -1;
	p->got_rkey = p->hellos = 0;
	p->seq = 0;
	memset(p->ops, 0, sizeof(p->ops));
}

static void on_pipe(struct ev_loop *loop, ev_io *w, int revents)
{
	struct par *p = w->data;
	ssize_t n;

	(void)revents;
	n = read(p->rfd, p->out + p->outlen, sizeof(p->out) - 1 - p->outlen);
	if (n > 0) {
		p->outlen += (size_t)n;
		p->out[p->outlen] = 0;
	} else if (n == 0 || errno != EAGAIN) {
		p->eof = true;
		ev_io_stop(loop, w);
	}
}

/* Fork and re-execute this program as a child with the given role. */
static void spawn(struct par *p, const char *role, uint16_t port)
{
	const char *self = rt_self_exe();
	char portstr[16], fdstr[16];
	int fds[2];

	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	snprintf(fdstr, sizeof(fdstr), "%d", fds[1]);
	snprintf(portstr, sizeof(portstr), "%u", port);
	p->pid = fork();
	assert_true(p->pid >= 0);
	if (p->pid == 0) {
		/* dies with the parent; keeps only the pipe's write end */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		fcntl(fds[1], F_SETFD, 0);
		if (port)
			execl(self, "t_death", "--child", role, "connect",
			      portstr, fdstr, (char *)NULL);
		else
			execl(self, "t_death", "--child", role, "listen", fdstr,
			      (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	p->rfd = fds[0];
	fcntl(p->rfd, F_SETFL, O_NONBLOCK);
	p->outlen = 0;
	p->out[0] = 0;
	p->eof = false;
	ev_io_init(&p->pipe_w, on_pipe, p->rfd, EV_READ);
	p->pipe_w.data = p;
	ev_io_start(p->loop, &p->pipe_w);
}

static void child_forget(struct par *p)
{
	ev_io_stop(p->loop, &p->pipe_w);
	close(p->rfd);
	p->rfd = -1;
	p->pid = 0;
}

struct exit_wait {
	struct par *p;
	int status;
	bool done;
};

static int child_exited(void *arg)
{
	struct exit_wait *x = arg;

	if (!x->done && waitpid(x->p->pid, &x->status, WNOHANG) == x->p->pid)
		x->done = true;
	return x->done;
}

static void tick(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)w;
	(void)revents;
}

/* Wait (bounded) for the current child to exit; its wait status.  A tick
 * keeps the loop polling: nothing else wakes it when the child exits. */
static int child_reap(struct par *p, double seconds)
{
	struct exit_wait x = {p, 0, false};
	ev_timer t;

	ev_timer_init(&t, tick, 0.01, 0.01);
	ev_timer_start(p->loop, &t);
	assert_int_equal(rt_run_until(p->loop, child_exited, &x, seconds), 0);
	ev_timer_stop(p->loop, &t);
	child_forget(p);
	return x.status;
}

static void op_cb(evr_conn *c, int status, void *arg)
{
	struct orec *r = arg;
	struct par *p = evr_conn_arg(c);

	r->calls++;
	r->status = status;
	r->seq = p->seq++;
}

static void par_connected(evr_conn *c, int status, void *arg)
{
	struct par *p = arg;

	p->connects++;
	p->connect_status = status;
	p->conn = status ? NULL : c;
}

static void par_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct par *p = arg;

	if (len == RKEY_MSG && !memcmp(data, RKEY_TAG, 4)) {
		evr_rkey_unpack(&p->rk, (const uint8_t *)data + 4);
		p->got_rkey++;
		return;
	}
	if (len > 6 && len < 32 && !memcmp(data, "HELLO ", 6) &&
	    ((const char *)data)[len - 1] == 0) {
		p->hellos++;
		snprintf(p->reply, sizeof(p->reply), "WELCOME %s",
			 (const char *)data + 6);
		assert_int_equal(evr_send(c, p->reply, strlen(p->reply) + 1,
					  NULL, NULL),
				 0);
	}
}

static void par_closed(evr_conn *c, int status, void *arg)
{
	struct par *p = arg;

	(void)c;
	p->closes++;
	p->close_status = status;
	p->close_seq = p->seq++;
	p->conn = NULL;
}

static void par_opts(struct par *p, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = par_connected;
	o->on_recv = par_recv;
	o->on_close = par_closed;
	o->arg = p;
}

static void par_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct par *p = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	par_opts(p, &o);
	assert_int_equal(evr_accept(req, &o, NULL), 0);
}

static int setup(void **state)
{
	struct par *p = calloc(1, sizeof(*p));
	struct evr_ctx_opts o;

	assert_non_null(p);
	p->rfd = -1;
	p->loop = ev_loop_new(EVFLAG_AUTO);
	rt_ctx_opts(&o);
	/* no spin after a post: "in flight" needs one loop iteration to
	 * post what it can and to complete none of it */
	o.adapt_spin_us = UINT_MAX;
	assert_int_equal(evr_ctx_create(&p->ctx, p->loop, &o), 0);
	assert_int_equal(posix_memalign((void **)&p->mem, 4096, REGION), 0);
	rt_fill(p->mem, REGION, 7);
	/* remote read: rendezvous sends from it borrow this registration */
	assert_int_equal(evr_mr_reg(p->ctx, p->mem, REGION,
				    EVR_ACCESS_REMOTE_READ, &p->mr),
			 0);
	*state = p;
	return 0;
}

static int teardown(void **state)
{
	struct par *p = *state;

	if (p->pid > 0) {
		kill(p->pid, SIGKILL);
		waitpid(p->pid, NULL, 0);
		child_forget(p);
	}
	if (p->mr)
		evr_mr_dereg(p->mr);
	if (p->l)
		evr_listener_close(p->l);
	evr_ctx_destroy(p->ctx);
	ev_loop_destroy(p->loop);
	free(p->mem);
	free(p);
	return 0;
}

static int connected_with_key(void *arg)
{
	struct par *p = arg;

	return (p->connects && p->connect_status) || p->eof ||
	       (p->conn && p->got_rkey);
}

static int child_port(void *arg)
{
	struct par *p = arg;

	return p->eof || strstr(p->out, "port ") != NULL;
}

/* Bring up a connection to a fresh child (the child connects to our
 * listener, or listens for us to connect). */
static void child_conn(struct par *p, const char *role, bool child_connects)
{
	par_reset_conn(p);
	if (child_connects) {
		spawn(p, role, evr_listener_port(p->l));
	} else {
		struct evr_conn_opts o;
		unsigned port = 0;

		spawn(p, role, 0);
		assert_int_equal(rt_run_until(p->loop, child_port, p, 30), 0);
		/* (the child may have died before telling its port) */
		assert_non_null(strstr(p->out, "port "));
		assert_int_equal(sscanf(strstr(p->out, "port "), "port %u",
					&port),
				 1);
		par_opts(p, &o);
		assert_int_equal(evr_connect(p->ctx, rt_addr(), (uint16_t)port,
					     &o, NULL),
				 0);
	}
}

static int all_over(void *arg)
{
	struct par *p = arg;

	if (!p->closes)
		return 0;
	for (int i = 0; i < NOPS; i++)
		if (!p->ops[i].calls)
			return 0;
	return 1;
}

/* Sends (eager, and every tenth a rendezvous) from the start of our
 * region; writes and reads of the peer's region, and atomics on its first
 * word, with the read data and old values landing in our region's end. */
static void queue_ops(struct par *p)
{
	const size_t in = REGION - 4 * WLEN - 8;

	for (int i = 0; i < NOPS; i++) {
		size_t off = (size_t)(i % 64) * WLEN;
		struct orec *r = &p->ops[i];
		int rc;

		switch (i % 6) {
		case 2:
		case 5:
			rc = evr_send(p->conn, p->mem + (size_t)i * 997,
				      i % 30 == 29 ? LARGE : SMALL, op_cb, r);
			break;
		case 1:
			rc = evr_read(p->conn, p->mr,
				      in + (size_t)(i % 4) * WLEN, &p->rk, off,
				      WLEN, op_cb, r);
			break;
		case 4:
			rc = evr_fetch_add(p->conn, p->mr, in - 8, &p->rk, 0, 1,
					   op_cb, r);
			break;
		default:
			rc = evr_write(p->conn, p->mr, off, &p->rk, off, WLEN,
				       op_cb, r);
			break;
		}
		assert_int_equal(rc, 0);
	}
}

static void kill_child(struct par *p)
{
	int st;

	assert_int_equal(kill(p->pid, SIGKILL), 0);
	/* by the time it is reaped, its QP and cm_id are gone */
	assert_int_equal(waitpid(p->pid, &st, 0), p->pid);
	assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	child_forget(p);
}

/*
 * One victim: connect it, queue NOPS ops and kill it -- after the first
 * batch was posted (in_flight) or before anything was (then every op meets
 * the dead peer).  Checks everything the parent must see.
 */
static void victim(struct par *p, bool child_connects, bool in_flight)
{
	struct evr_stats st0, st1, st2;
	uint64_t posted = 0;
	int i, errors = 0;
	double t0, t1;

	child_conn(p, "victim", child_connects);
	assert_int_equal(rt_run_until(p->loop, connected_with_key, p, 30), 0);
	assert_int_equal(p->connect_status, 0);
	assert_non_null(p->conn);
	assert_int_equal(p->got_rkey, 1);
	assert_int_equal(p->rk.len, REGION);

	evr_ctx_stats(p->ctx, &st0);
	assert_int_equal(st0.conns, 1);
	if (in_flight) {
		queue_ops(p);
		/* one iteration posts what the SQ and the credits allow */
		ev_run(p->loop, EVRUN_NOWAIT);
		evr_ctx_stats(p->ctx, &st1);
		posted = st1.send_wrs - st0.send_wrs;
		assert_true(posted > 0);
		assert_true(posted < NOPS);
		kill_child(p);
	} else {
		kill_child(p);
		/* it is dead; our side does not know yet */
		queue_ops(p);
		for (i = 0; i < NOPS; i++)
			assert_int_equal(p->ops[i].calls, 0);
	}

	ev_now_update(p->loop);
	t0 = ev_now(p->loop);
	assert_int_equal(rt_run_until(p->loop, all_over, p, 40), 0);
	ev_now_update(p->loop);
	t1 = ev_now(p->loop);
	rt_run_until(p->loop, all_over, p, 0.1); /* nothing fires twice */
	evr_ctx_stats(p->ctx, &st2);
	for (i = 0; i < NOPS; i++) {
		assert_int_equal(p->ops[i].calls, 1);
		assert_true(p->ops[i].status <= 0);
		/* the ops left in the queue at the kill all failed (the
		 * queue goes out in order, so those are the last ones) */
		if ((uint64_t)i >= posted)
			assert_true(p->ops[i].status < 0);
		assert_true(p->ops[i].seq < p->close_seq);
		errors += p->ops[i].status < 0;
	}
	printf("    %s dies, ops %s: %llu posted before the kill, "
	       "%d of %d failed, on_close %s after %.2f s\n",
	       child_connects ? "connector" : "acceptor",
	       in_flight ? "in flight" : "queued after",
	       (unsigned long long)posted, errors, NOPS,
	       evr_err_name(p->close_status), t1 - t0);
	assert_int_equal(p->closes, 1);
	/* the peer vanished (no goodbye): that, and only that, whether the
	 * disconnect or a send's remote error tells of it first */
	if (p->close_status != -ECONNRESET)
		fail_msg("on_close %s, want ECONNRESET",
			 evr_err_name(p->close_status));
	if (t1 - t0 >= DETECT_S * rt_timeout_scale())
		fail_msg("on_close after %.3f s, bound %.3f s", t1 - t0,
			 DETECT_S * rt_timeout_scale());
	assert_int_equal(st2.conns, 0);
	assert_null(p->conn);
}

/* The greeter's goodbye reached us (on_close), or it ended without its
 * welcome, when no close is coming.  Its end of output alone is no sign:
 * it may exit before its goodbye's disconnect reaches us. */
static int greeted(void *arg)
{
	struct par *p = arg;

	if (p->closes)
		return 1;
	return p->eof && !strstr(p->out, "ok ");
}

/* A fresh child says hello, gets its welcome and closes gracefully. */
static void greeter(struct par *p, bool child_connects)
{
	struct evr_stats st;
	int status;

	child_conn(p, "greeter", child_connects);
	assert_int_equal(rt_run_until(p->loop, greeted, p, 30), 0);
	assert_int_equal(p->connect_status, 0);
	assert_int_equal(p->hellos, 1);
	assert_non_null(strstr(p->out, "ok "));
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->close_status, -ESHUTDOWN); /* it said goodbye */
	status = child_reap(p, 20);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	evr_ctx_stats(p->ctx, &st);
	assert_int_equal(st.conns, 0);
}

static void finish(struct par *p)
{
	/* no failed op kept the region busy */
	assert_int_equal(evr_mr_dereg(p->mr), 0);
	p->mr = NULL;
}

static void test_connector_dies(void **state)
{
	struct par *p = *state;

	assert_int_equal(evr_listen(p->ctx, rt_addr(), 0, 8, par_accept, p,
				    &p->l),
			 0);
	victim(p, true, true);
	victim(p, true, false);
	/* the listener is still there for the next one */
	greeter(p, true);
	finish(p);
}

static void test_acceptor_dies(void **state)
{
	struct par *p = *state;

	victim(p, false, true);
	victim(p, false, false);
	greeter(p, false);
	finish(p);
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_connector_dies, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_acceptor_dies, setup,
						teardown),
	};

	if (argc > 1 && !strcmp(argv[1], "--child"))
		return kid_main(argc, argv);
	rt_init(300);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("rdma_death", tests, NULL, NULL);
}
