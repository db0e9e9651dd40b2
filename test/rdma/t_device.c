/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The RDMA device, or its port, goes away under traffic.
 *
 * This takes the Soft-RoCE test guest's network device down and deletes
 * its RDMA device, so it runs only there (EVR_IN_GUEST set) and puts both
 * back when done; anywhere else it skips: on a machine with real hardware
 * it must not touch the devices.
 *
 * A server ctx and a client ctx (one process, one loop) keep both
 * directions busy: each end keeps a window of sends in flight, eager and
 * rendezvous, and the client adds RDMA writes and reads of the server's
 * region; every completion submits the next operation.  Then the fault:
 *
 *  netdev_down    `ip link set dummy0 down` (rxe0's port goes down)
 *  device_delete  `rdma link delete rxe0` (the device is unregistered)
 *
 * and, for each, within a bound: both ends get on_close exactly once with
 * an error, every operation submitted gets its callback exactly once
 * (those still pending with an error) and before on_close, no conn is left
 * open, the process lives on.  Deleting the device also needs the process
 * to let go of it: evr_ctx_destroy() must return promptly (it runs under
 * an alarm) and the kernel's unregistration, which waits for every user of
 * the device, must then complete.  Afterwards the device is put back and a
 * new connection carries traffic again: on the same ctxs after the netdev
 * comes back, on fresh ctxs after the device is re-created.  (Soft-RoCE's
 * connection manager may not survive the netdev going down under
 * connections; when rping cannot connect either, the device is re-created
 * and fresh ctxs must connect.)  The errors, the log lines and the timings
 * are printed.
 */
#define _GNU_SOURCE
#include "rt.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

#define NETDEV	   "dummy0"
#define DEVICE	   "rxe0"
#define PORT_STATE "/sys/class/infiniband/" DEVICE "/ports/1/state"

#define WIN    24 /* operations in flight per end */
#define MAXOPS 200000
#define SMALL  512
#define LARGE  65536 /* a rendezvous send */
#define RLEN   16384 /* one-sided operations */
#define REGION (1u << 20)
/* Time bounds, in s, times EVR_TEST_TIMEOUT_SCALE (valgrind runs) */
#define FAIL_BOUND    (30.0 * rt_timeout_scale()) /* fault to both on_close */
#define DESTROY_BOUND ((unsigned)(20 * rt_timeout_scale())) /* ctx destroy */

/* ---- the system: commands, port state, addresses ---- */

static int sh(const char *cmd)
{
	int st;

	printf("    $ %s\n", cmd);
	fflush(stdout);
	st = system(cmd);
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* The port's state number (4: ACTIVE), or -1 without the device. */
static int port_state(void)
{
	FILE *f = fopen(PORT_STATE, "r");
	int s = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &s) != 1)
		s = -1;
	fclose(f);
	return s;
}

static bool wait_port_active(double seconds)
{
	double end = rt_now() + seconds;

	while (port_state() != 4) {
		if (rt_now() > end)
			return false;
		usleep(50000);
	}
	return true;
}

static bool has_addr(const char *addr)
{
	struct ifaddrs *ifa, *i;
	uint8_t want[16];
	int af = strchr(addr, ':') ? AF_INET6 : AF_INET;
	bool found = false;

	if (inet_pton(af, addr, want) != 1 || getifaddrs(&ifa))
		return false;
	for (i = ifa; i && !found; i = i->ifa_next) {
		const void *a;

		if (!i->ifa_addr || i->ifa_addr->sa_family != af ||
		    strcmp(i->ifa_name, NETDEV))
			continue;
		a = af == AF_INET
			? (const void *)&((struct sockaddr_in *)i->ifa_addr)
			      ->sin_addr
			: (const void *)&((struct sockaddr_in6 *)i->ifa_addr)
			      ->sin6_addr;
		found = !memcmp(a, want, af == AF_INET ? 4 : 16);
	}
	freeifaddrs(ifa);
	return found;
}

/* Whether the port's GID table holds the IPv4 address (as a mapped IPv6
 * address): rdma_cm resolves addresses through it. */
static bool has_gid(void)
{
	char path[128], want[64], gid[64];
	struct in_addr a;
	bool found = false;

	if (inet_pton(AF_INET, rt_addr(), &a) != 1)
		return false;
	snprintf(want, sizeof(want),
		 "0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x",
		 ((uint8_t *)&a)[0], ((uint8_t *)&a)[1], ((uint8_t *)&a)[2],
		 ((uint8_t *)&a)[3]);
	for (int i = 0; i < 16 && !found; i++) {
		FILE *f;

		snprintf(path, sizeof(path),
			 "/sys/class/infiniband/" DEVICE "/ports/1/gids/%d", i);
		f = fopen(path, "r");
		if (!f)
			break;
		found = fscanf(f, "%63s", gid) == 1 && !strcmp(gid, want);
		fclose(f);
	}
	return found;
}

/* The netdev up with both addresses (IPv6 ones vanish when it goes down)
 * and the device on it, its port active. */
static void restore_system(void)
{
	char cmd[160];

	sh("ip link set " NETDEV " up");
	if (!has_addr(rt_addr())) {
		snprintf(cmd, sizeof(cmd), "ip addr add %s/24 dev " NETDEV,
			 rt_addr());
		sh(cmd);
	}
	if (!has_addr(rt_addr6())) {
		snprintf(cmd, sizeof(cmd),
			 "ip -6 addr add %s/64 dev " NETDEV " nodad",
			 rt_addr6());
		sh(cmd);
	}
	if (port_state() < 0)
		sh("rdma link add " DEVICE " type rxe netdev " NETDEV);
	assert_true(wait_port_active(20));
	for (int i = 0; i < 200 && !has_gid(); i++)
		usleep(50000);
	assert_true(has_gid());
}

/* Whether the device still has its user-space verbs node: the kernel
 * takes it away first when the device is being deleted (and then waits
 * for the processes that have the device open). */
static bool uverbs_present(void)
{
	char path[300], name[64];
	struct dirent *e;
	bool found = false;
	DIR *d = opendir("/sys/class/infiniband_verbs");

	if (!d)
		return false;
	while (!found && (e = readdir(d))) {
		FILE *f;

		if (strncmp(e->d_name, "uverbs", 6))
			continue;
		snprintf(path, sizeof(path),
			 "/sys/class/infiniband_verbs/%s/ibdev", e->d_name);
		f = fopen(path, "r");
		if (f && fscanf(f, "%63s", name) == 1)
			found = !strcmp(name, DEVICE);
		if (f)
			fclose(f);
	}
	closedir(d);
	return found;
}

/* Run argv quietly; its exit status, or -1 if it had to be killed after
 * `seconds`. */
static int run_quiet(char *const argv[], double seconds, pid_t *bg)
{
	double end = rt_now() + seconds;
	pid_t pid;
	int st;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = open("/dev/null", O_WRONLY);

		dup2(fd, 1);
		dup2(fd, 2);
		execvp(argv[0], argv);
		_exit(127);
	}
	if (bg) {
		*bg = pid; /* runs on; the caller reaps it */
		return 0;
	}
	while (waitpid(pid, &st, WNOHANG) != pid) {
		if (rt_now() > end) {
			kill(pid, SIGKILL);
			waitpid(pid, &st, 0);
			return -1;
		}
		usleep(20000);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Can the kernel's connection manager connect on the device at all?  One
 * ping between an rping server and client (rdma-core's, no evrdma). */
static bool rping_works(void)
{
	char port[16], *addr = (char *)rt_addr();
	char *srv[] = {"rping", "-s", "-a", addr, "-p", port, "-C", "1", NULL};
	char *cli[] = {"rping", "-c", "-a", addr, "-p", port, "-C", "1", NULL};
	int rc = -1;

	/* below the ephemeral ports, apart from t_samples and t_storm */
	snprintf(port, sizeof(port), "%d", 30000 + (int)(getpid() % 2000));
	for (int i = 0; i < 3 && rc; i++) {
		pid_t s;
		double t0;

		run_quiet(srv, 0, &s);
		usleep(1000000); /* until it listens */
		t0 = rt_now();
		rc = run_quiet(cli, 15, NULL);
		/* after its one ping the server ends by itself */
		for (int j = 0; j < 100 && waitpid(s, NULL, WNOHANG) != s; j++)
			usleep(50000);
		if (kill(s, SIGKILL) == 0)
			waitpid(s, NULL, 0);
		if (rc && rt_now() - t0 > 10)
			break; /* it timed out: no use trying again */
	}
	return rc == 0;
}

/* ---- traffic ---- */

struct dt;

struct opr {
	uint8_t calls;
	int status;
	unsigned seq; /* callback order, shared with on_close */
};

struct errcount {
	int status;
	unsigned n;
};

struct end {
	struct dt *t;
	const char *name;
	evr_conn *conn;
	bool rma; /* also RDMA writes and reads of the peer's region */
	int connects, connect_status;
	int closes, close_status;
	unsigned close_seq;
	double t_close, t_first_err;
	unsigned next, done, ok, failed, dups, refused, recvd;
	struct errcount errs[6];
	struct opr *ops;
};

struct dt {
	struct ev_loop *loop;
	evr_ctx *sctx, *cctx;
	evr_listener *l;
	uint8_t *smem, *cmem;
	evr_mr *smr, *cmr;
	struct evr_rkey srk;
	struct end cli, srv;
	bool stop;
	unsigned seq;
	double t_fault;
	/* the library's log lines, as they came */
	char log[12][160];
	unsigned nlog, log_dropped;
	pid_t rdma_pid;
};

static void log_fn(enum evr_log_level lvl, const char *msg, void *arg)
{
	struct dt *t = arg;
	static const char *const lv[] = {"error", "warn", "info", "debug"};

	if (getenv("EVR_LOG"))
		fprintf(stderr, "evrdma %s: %s\n", lv[lvl], msg);
	if (lvl == EVR_LOG_DEBUG)
		return;
	if (t->nlog && strstr(t->log[t->nlog - 1], msg)) {
		t->log_dropped++; /* the same from the other ctx */
		return;
	}
	if (t->nlog == sizeof(t->log) / sizeof(t->log[0])) {
		t->log_dropped++;
		return;
	}
	snprintf(t->log[t->nlog++], sizeof(t->log[0]), "%s: %s", lv[lvl], msg);
}

static void count_err(struct end *e, int status)
{
	size_t i;

	for (i = 0; i < sizeof(e->errs) / sizeof(e->errs[0]); i++) {
		if (!e->errs[i].n || e->errs[i].status == status) {
			e->errs[i].status = status;
			e->errs[i].n++;
			return;
		}
	}
}

static void op_cb(evr_conn *c, int status, void *arg);

/* One more operation: small sends, a rendezvous send every fourth, and
 * for the client every other one an RDMA write or read. */
static void submit(struct end *e)
{
	struct dt *t = e->t;
	unsigned i = e->next;
	struct opr *r = &e->ops[i];
	uint8_t *mem = e->rma ? t->cmem : t->smem;
	size_t off = (size_t)(i % 32) * RLEN;
	int rc;

	if (t->stop || !e->conn || i >= MAXOPS)
		return;
	switch (e->rma ? i % 8 : i % 4) {
	case 3:
		rc = evr_send(e->conn, mem, LARGE, op_cb, r);
		break;
	case 4:
	case 5:
		rc = evr_write(e->conn, t->cmr, off, &t->srk, off, RLEN, op_cb,
			       r);
		break;
	case 6:
	case 7:
		rc = evr_read(e->conn, t->cmr, REGION / 2 + off, &t->srk, off,
			      RLEN, op_cb, r);
		break;
	default:
		rc = evr_send(e->conn, mem + i % 256, SMALL, op_cb, r);
		break;
	}
	if (rc) {
		e->refused++; /* no callback will come */
		return;
	}
	e->next++;
}

static void op_cb(evr_conn *c, int status, void *arg)
{
	struct opr *r = arg;
	struct end *e = evr_conn_arg(c);

	if (++r->calls > 1)
		e->dups++;
	r->status = status;
	r->seq = e->t->seq++;
	e->done++;
	if (status == 0) {
		e->ok++;
		submit(e);
		return;
	}
	if (!e->failed++)
		e->t_first_err = rt_now();
	count_err(e, status);
}

static void on_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct end *e = arg;

	(void)c;
	(void)data;
	(void)len;
	e->recvd++;
}

static void on_connect(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	e->connects++;
	e->connect_status = status;
	if (status)
		return;
	e->conn = c;
	for (int i = 0; i < WIN; i++)
		submit(e);
}

static void on_close(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	(void)c;
	e->closes++;
	e->close_status = status;
	e->close_seq = e->t->seq++;
	e->t_close = rt_now();
	e->conn = NULL;
}

static void end_opts(struct end *e, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = on_connect;
	o->on_recv = on_recv;
	o->on_close = on_close;
	o->arg = e;
}

static void on_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		      size_t ulen, void *arg)
{
	struct dt *t = arg;
	struct evr_conn_opts o;

	(void)l;
	(void)ud;
	(void)ulen;
	end_opts(&t->srv, &o);
	assert_int_equal(evr_accept(req, &o, NULL), 0);
}

static void end_reset(struct dt *t, struct end *e, const char *name, bool rma)
{
	struct opr *ops = e->ops;

	memset(e, 0, sizeof(*e));
	e->t = t;
	e->name = name;
	e->rma = rma;
	e->ops = ops ? ops : calloc(MAXOPS, sizeof(*ops));
	assert_non_null(e->ops);
	memset(e->ops, 0, MAXOPS * sizeof(*ops));
}

/* Both ctxs, the listener and the regions.  Right after the device came
 * back, binding to its address may take a moment: retried, bounded. */
static void ctxs_create(struct dt *t)
{
	struct evr_ctx_opts o;
	double end = rt_now() + 20;
	int rc;

	rt_ctx_opts(&o);
	/* a connect whose request is lost while the device comes back is
	 * retried (traffic_start): bound its wait for an answer by the
	 * connect bound, not connect_reply_ms */
	o.connect_reply_ms = 1;
	o.log_fn = log_fn;
	o.log_arg = t;
	o.log_level = getenv("EVR_LOG") && !strcmp(getenv("EVR_LOG"), "debug")
			  ? EVR_LOG_DEBUG
			  : EVR_LOG_INFO;
	while ((rc = evr_ctx_create(&t->sctx, t->loop, &o)) && rt_now() < end)
		usleep(100000);
	assert_int_equal(rc, 0);
	assert_int_equal(evr_ctx_create(&t->cctx, t->loop, &o), 0);
	assert_int_equal(
	    evr_listen(t->sctx, rt_addr(), 0, 8, on_accept, t, &t->l), 0);
	assert_int_equal(
	    evr_mr_reg(t->sctx, t->smem, REGION,
		       EVR_ACCESS_REMOTE_READ | EVR_ACCESS_REMOTE_WRITE,
		       &t->smr),
	    0);
	assert_int_equal(evr_mr_reg(t->cctx, t->cmem, REGION,
				    EVR_ACCESS_REMOTE_READ, &t->cmr),
			 0);
	evr_mr_rkey(t->smr, &t->srk);
}

static void alarm_handler(int sig)
{
	static const char msg[] = "t_device: evr_ctx_destroy() hangs\n";

	(void)sig;
	if (write(2, msg, sizeof(msg) - 1) < 0)
		_exit(99);
	_exit(99);
}

/* Destroy everything, bounded by an alarm; the time it took. */
static double ctxs_destroy(struct dt *t)
{
	unsigned left = alarm(0);
	double t0 = rt_now(), took;

	signal(SIGALRM, alarm_handler);
	alarm(DESTROY_BOUND);
	if (t->l)
		evr_listener_close(t->l);
	if (t->smr)
		evr_mr_dereg(t->smr);
	if (t->cmr)
		evr_mr_dereg(t->cmr);
	evr_ctx_destroy(t->cctx);
	evr_ctx_destroy(t->sctx);
	alarm(0);
	signal(SIGALRM, SIG_DFL);
	t->l = NULL;
	t->smr = t->cmr = NULL;
	t->cctx = t->sctx = NULL;
	took = rt_now() - t0;
	if (left) /* the run's own bound goes on */
		alarm(left > (unsigned)took + 1 ? left - (unsigned)took : 1);
	return took;
}

static int up_pred(void *arg)
{
	struct dt *t = arg;

	return (t->cli.connects && t->cli.connect_status) ||
	       (t->cli.conn && t->srv.conn && t->cli.ok >= 50 &&
		t->srv.ok >= 50);
}

static void print_log(struct dt *t);

/* Connect and wait for traffic to flow both ways (bounded).  After the
 * device came back the first connects may fail while its addresses are
 * set up again: failed connects are retried for retry_s seconds.  Returns
 * the number of attempts, or the last connect error. */
static int traffic_start(struct dt *t, double retry_s)
{
	struct evr_conn_opts o;
	double end = rt_now() + retry_s;
	int attempts = 0;

	t->stop = false;
	do {
		end_reset(t, &t->cli, "client", true);
		end_reset(t, &t->srv, "server", false);
		end_opts(&t->cli, &o);
		attempts++;
		assert_int_equal(evr_connect(t->cctx, rt_addr(),
					     evr_listener_port(t->l), &o, NULL),
				 0);
		if (rt_run_until(t->loop, up_pred, t, 30)) {
			/* say where it stood, for the failure below */
			printf("    not up after 30 s: client connects %d (%s), "
			       "%u ops ok, %u received; server connects %d "
			       "(%s), %u ops ok, %u received\n",
			       t->cli.connects,
			       evr_err_name(t->cli.connect_status), t->cli.ok,
			       t->cli.recvd, t->srv.connects,
			       evr_err_name(t->srv.connect_status), t->srv.ok,
			       t->srv.recvd);
			print_log(t);
			fail();
		}
		if (t->cli.connect_status) {
			printf("    connect: %s\n",
			       evr_err_name(t->cli.connect_status));
			if (rt_now() < end)
				usleep(200000);
		}
	} while (t->cli.connect_status && rt_now() < end);
	if (t->cli.connect_status)
		return t->cli.connect_status;
	assert_int_equal(t->srv.connect_status, 0);
	return attempts;
}

static int all_over(void *arg)
{
	struct dt *t = arg;

	return t->cli.closes && t->srv.closes && t->cli.done == t->cli.next &&
	       t->srv.done == t->srv.next;
}

static void check_end(struct end *e)
{
	for (unsigned i = 0; i < e->next; i++) {
		assert_int_equal(e->ops[i].calls, 1);
		assert_true(e->ops[i].seq < e->close_seq);
	}
	assert_int_equal(e->dups, 0);
	assert_int_equal(e->closes, 1);
	assert_null(e->conn);
}

static void print_end(const struct dt *t, const struct end *e)
{
	char errs[160] = "";
	size_t n = 0;

	for (size_t i = 0;
	     i < sizeof(e->errs) / sizeof(e->errs[0]) && e->errs[i].n; i++)
		n += (size_t)snprintf(errs + n, sizeof(errs) - n, " %s x%u",
				      evr_err_name(e->errs[i].status),
				      e->errs[i].n);
	printf("    %s: %u ops (%u ok, %u failed:%s), %u messages received; "
	       "first error after %.2f s, on_close(%s) after %.2f s\n",
	       e->name, e->next, e->ok, e->failed, n ? errs : " none", e->recvd,
	       e->failed ? e->t_first_err - t->t_fault : 0.,
	       evr_err_name(e->close_status), e->t_close - t->t_fault);
}

static void print_log(struct dt *t)
{
	for (unsigned i = 0; i < t->nlog; i++)
		printf("    log %s\n", t->log[i]);
	if (t->log_dropped)
		printf("    log: %u more lines, repeated or beyond these\n",
		       t->log_dropped);
	t->nlog = t->log_dropped = 0;
}

/* After the fault: both ends closed with an error, every op called back
 * once, before on_close, nothing open. */
static void check_failed(struct dt *t)
{
	struct evr_stats ss, cs;

	assert_int_equal(rt_run_until_exact(t->loop, all_over, t, FAIL_BOUND),
			 0);
	rt_run_for(t->loop, 0.3); /* nothing fires twice */
	print_end(t, &t->cli);
	print_end(t, &t->srv);
	print_log(t);
	check_end(&t->cli);
	check_end(&t->srv);
	assert_true(t->cli.close_status < 0);
	assert_true(t->srv.close_status < 0);
	/* the window in flight at the fault failed */
	assert_true(t->cli.failed + t->srv.failed > 0);
	assert_true(t->cli.t_close - t->t_fault < FAIL_BOUND);
	assert_true(t->srv.t_close - t->t_fault < FAIL_BOUND);
	evr_ctx_stats(t->sctx, &ss);
	evr_ctx_stats(t->cctx, &cs);
	assert_int_equal(ss.conns, 0);
	assert_int_equal(cs.conns, 0);
}

static int drained(void *arg)
{
	struct dt *t = arg;

	return t->cli.done == t->cli.next && t->srv.done == t->srv.next;
}

/* Stop submitting, let what is in flight complete, close gracefully:
 * everything succeeds. */
static void traffic_finish(struct dt *t)
{
	t->stop = true;
	assert_int_equal(rt_run_until(t->loop, drained, t, 30), 0);
	assert_int_equal(t->cli.failed, 0);
	assert_int_equal(t->srv.failed, 0);
	assert_int_equal(evr_conn_close(t->cli.conn, 0), 0);
	assert_int_equal(rt_run_until(t->loop, all_over, t, 30), 0);
	check_end(&t->cli);
	check_end(&t->srv);
	assert_int_equal(t->cli.close_status, 0);
	assert_int_equal(t->srv.close_status, -ESHUTDOWN);
	assert_true(t->srv.recvd > 0 && t->cli.recvd > 0);
}

static int setup(void **state)
{
	struct dt *t = calloc(1, sizeof(*t));

	assert_non_null(t);
	t->loop = ev_loop_new(EVFLAG_AUTO);
	assert_int_equal(posix_memalign((void **)&t->smem, 4096, REGION), 0);
	assert_int_equal(posix_memalign((void **)&t->cmem, 4096, REGION), 0);
	rt_fill(t->smem, REGION, 1);
	rt_fill(t->cmem, REGION, 2);
	restore_system();
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct dt *t = *state;
	int st;

	if (t->sctx || t->cctx)
		ctxs_destroy(t);
	if (t->rdma_pid > 0) {
		/* it waits for every user of the device: we are none now */
		for (int i = 0; i < 200 && waitpid(t->rdma_pid, &st, WNOHANG) !=
					       t->rdma_pid;
		     i++)
			usleep(100000);
	}
	restore_system();
	ev_loop_destroy(t->loop);
	free(t->cli.ops);
	free(t->srv.ops);
	free(t->smem);
	free(t->cmem);
	free(t);
	return 0;
}

static int rdma_exited(pid_t pid, double seconds, int *status)
{
	double end = rt_now() + seconds * rt_timeout_scale();

	while (waitpid(pid, status, WNOHANG) != pid) {
		if (rt_now() > end)
			return -1;
		usleep(20000);
	}
	return 0;
}

static void test_netdev_down(void **state)
{
	struct dt *t = *state;
	char *del[] = {"rdma", "link", "delete", DEVICE, NULL};
	double destroy_s;
	int attempts, i, st = 0;

	ctxs_create(t);
	assert_true(traffic_start(t, 0) > 0);
	print_log(t);

	t->t_fault = rt_now();
	assert_int_equal(sh("ip link set " NETDEV " down"), 0);
	printf("    (it took %.2f s; times below are from its start)\n",
	       rt_now() - t->t_fault);
	check_failed(t);

	restore_system();
	printf("    %s back up after %.2f s\n", NETDEV, rt_now() - t->t_fault);
	/* the same ctxs and listener serve a new connection */
	attempts = traffic_start(t, 0);
	if (attempts > 0) {
		traffic_finish(t);
		printf("    new connection on the same ctxs: %u + %u ops ok\n",
		       t->cli.ok, t->srv.ok);
		print_log(t);
		ctxs_destroy(t);
		return;
	}
	/*
	 * Soft-RoCE may not come back: a connection manager message sent
	 * while the port was down (our disconnects, or the kernel's own when
	 * a connected id is destroyed) can leave it unable to connect anyone
	 * until the device is re-created.  Tell that from a library failure:
	 * rping must fail too.  Then the old ctxs must go promptly and fresh
	 * ones on the re-created device must work.
	 */
	print_log(t);
	assert_false(rping_works());
	printf("    rping cannot connect either: %s's connection manager did "
	       "not survive the flap (a kernel matter); re-creating it\n",
	       DEVICE);
	/* the deletion waits for us to let go of the device */
	printf("    $ rdma link delete " DEVICE "\n");
	run_quiet(del, 0, &t->rdma_pid);
	for (i = 0; i < 400 && uverbs_present(); i++)
		usleep(50000);
	destroy_s = ctxs_destroy(t);
	assert_int_equal(rdma_exited(t->rdma_pid, 20, &st), 0);
	t->rdma_pid = 0;
	printf("    evr_ctx_destroy x2: %.3f s, then the device was gone\n",
	       destroy_s);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	restore_system();
	assert_true(rping_works());
	ctxs_create(t);
	attempts = traffic_start(t, 20);
	assert_true(attempts > 0);
	traffic_finish(t);
	printf("    fresh ctxs on the re-created %s (attempt %d): %u + %u "
	       "ops ok\n",
	       DEVICE, attempts, t->cli.ok, t->srv.ok);
	print_log(t);
	ctxs_destroy(t);
}

static void test_device_delete(void **state)
{
	struct dt *t = *state;
	char *argv[] = {"rdma", "link", "delete", DEVICE, NULL};
	double destroy_s, t_gone;
	int st = 0, attempts;
	bool done_early;

	ctxs_create(t);
	assert_true(traffic_start(t, 0) > 0);
	print_log(t);

	/* the kernel waits for the device's users: run it beside us */
	printf("    $ rdma link delete " DEVICE "\n");
	fflush(NULL);
	t->t_fault = rt_now();
	t->rdma_pid = fork();
	assert_true(t->rdma_pid >= 0);
	if (t->rdma_pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	check_failed(t);
	done_early = waitpid(t->rdma_pid, &st, WNOHANG) == t->rdma_pid;
	printf("    rdma link delete: %s when the conns had closed\n",
	       done_early ? "done" : "still waiting for the device's users");

	destroy_s = ctxs_destroy(t);
	if (!done_early)
		assert_int_equal(rdma_exited(t->rdma_pid, 20, &st), 0);
	t_gone = rt_now() - t->t_fault;
	t->rdma_pid = 0;
	printf("    evr_ctx_destroy x2: %.3f s; device gone %.2f s after the "
	       "delete began\n",
	       destroy_s, t_gone);
	print_log(t);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_int_equal(port_state(), -1);

	/* put it back: fresh ctxs connect and carry traffic */
	restore_system();
	ctxs_create(t);
	attempts = traffic_start(t, 20);
	assert_true(attempts > 0);
	traffic_finish(t);
	printf("    %s re-created: fresh ctxs connect (attempt %d), %u + %u "
	       "ops ok\n",
	       DEVICE, attempts, t->cli.ok, t->srv.ok);
	print_log(t);
	ctxs_destroy(t);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_netdev_down, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_device_delete, setup,
					    teardown),
	};
	const char *g = getenv("EVR_IN_GUEST");

	rt_init(300);
	if (!g || !*g) {
		printf("SKIP: needs the Soft-RoCE guest (test/vm/evr-vm): it "
		       "takes " NETDEV " down and deletes " DEVICE "\n");
		return 77;
	}
	if (port_state() < 0) {
		printf("SKIP: no %s in this guest\n", DEVICE);
		return 77;
	}
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("rdma_device", tests, NULL, NULL);
}
