/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Helpers for the two-host tests.  Each test program runs in both guests
 * of test/vm/evr-2vm at once (EVR_HOST_ID says which role it plays) and
 * uses the public API only.  Host 1 is where results are judged: it waits
 * for host 2's verdict at the end, so its exit status covers both sides.
 *
 * The guests share a directory (EVR_2VM_DIR): barriers are files in
 * marks/, prefixed with the test's name; fault requests go to ctl/ and the
 * host answers each with a done file (see evr-2vm's header).
 * A program run outside evr-2vm exits 77 (SKIP) and says why.
 */
#ifndef EVR_TH_H
#define EVR_TH_H

#include <errno.h>
#include <ev.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "evrdma.h"

static struct {
	const char *name; /* the test's name: prefix of its barriers */
	const char *dir;  /* EVR_2VM_DIR */
	const char *self, *peer;
	int id;		  /* 1 or 2 */
	int boot;	  /* EVR_BOOT: 1, or more after a reboot */
	char fail_path[512];
} th;

static inline double th_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline void th_path(char *buf, size_t n, const char *sub,
			   const char *mark)
{
	snprintf(buf, n, "%s/%s/%s.%s", th.dir, sub, th.name, mark);
}

/* Create barrier NAME.mark (for the other host). */
static inline void th_mark(const char *mark)
{
	char p[512];
	int fd;

	th_path(p, sizeof(p), "marks", mark);
	fd = open(p, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
}

static inline int th_exists(const char *sub, const char *mark)
{
	char p[512];
	struct stat st;

	th_path(p, sizeof(p), sub, mark);
	return stat(p, &st) == 0;
}

/* Whether this run of the test is host 2's after host 1 powered it off
 * in this same test: its first run marked `mark` before the kill.  (The
 * boot count, EVR_BOOT, is the host's: it is past 1 for every test after
 * the first that reboots host 2.) */
static inline int th_reborn(const char *mark)
{
	return th.id == 2 && th_exists("marks", mark);
}

/* Mark this side failed (so the peer stops waiting) and exit 1. */
static inline void __attribute__((noreturn, format(printf, 1, 2)))
th_fail(const char *fmt, ...)
{
	va_list ap;
	int fd;

	printf("FAIL (host %d): ", th.id);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	fd = open(th.fail_path, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
	exit(1);
}

#define TH_CHECK(cond)                                                      \
	do {                                                                \
		if (!(cond))                                                \
			th_fail("%s:%d: %s", __FILE__, __LINE__, #cond);    \
	} while (0)

static void th_alarm(int sig)
{
	static const char m[] = "FAIL: test timed out\n";
	int fd;

	(void)sig;
	if (write(1, m, sizeof(m) - 1) < 0) {
		/* nothing more to do */
	}
	fd = open(th.fail_path, O_WRONLY | O_CREAT, 0644);
	if (fd >= 0)
		close(fd);
	_exit(1);
}

/* Wait up to secs for the peer's barrier; fails the test if the peer
 * failed or the time runs out. */
static inline void th_waitfor(const char *mark, double secs)
{
	double end = th_now() + secs;
	char failmark[64];

	snprintf(failmark, sizeof(failmark), "fail%d", 3 - th.id);
	while (!th_exists("marks", mark)) {
		if (th_exists("marks", failmark))
			th_fail("host %d failed (waiting for %s)", 3 - th.id,
				mark);
		if (th_now() > end)
			th_fail("timed out waiting for %s", mark);
		usleep(50000);
	}
}

static inline double th_hostreq(const char *action, int n,
				const char *arg);

/* Undo the faults an earlier test that failed midway may have left, so
 * that each test starts from healthy hosts and fails on its own account:
 * the netem on this host's NIC (t_loss), host 2's link off or its vCPUs
 * stopped (the host logs each one it undoes). */
static inline void th_restore(void)
{
	const char *nic = getenv("EVR_HOST_IF");
	char cmd[256];

	if (nic) {
		/* fails, quietly, where no qdisc of ours is installed */
		snprintf(cmd, sizeof(cmd),
			 "tc qdisc del dev %s root 2>/dev/null", nic);
		if (system(cmd) == 0)
			printf("# removed a netem left on %s\n", nic);
	}
	th_hostreq("restore", 2, NULL);
}

/* Call first.  timeout_s bounds the whole program on this host. */
static inline void th_init(const char *name, unsigned timeout_s)
{
	const char *s;

	setvbuf(stdout, NULL, _IOLBF, 0);
	th.name = name;
	th.dir = getenv("EVR_2VM_DIR");
	th.self = getenv("EVR_HOST_SELF");
	th.peer = getenv("EVR_HOST_PEER");
	s = getenv("EVR_HOST_ID");
	if (!th.dir || !th.self || !th.peer || !s) {
		printf("SKIP: not inside test/vm/evr-2vm (run make "
		       "check-twohost)\n");
		exit(77);
	}
	th.id = atoi(s);
	s = getenv("EVR_BOOT");
	th.boot = s ? atoi(s) : 1;
	snprintf(th.fail_path, sizeof(th.fail_path), "%s/marks/%s.fail%d",
		 th.dir, name, th.id);
	signal(SIGALRM, th_alarm);
	alarm(timeout_s);
	printf("# %s: host %d (%s, peer %s), boot %d\n", name, th.id,
	       th.self, th.peer, th.boot);
	if (th.id == 1 && th.boot == 1)
		th_restore();
}

/* The end: host 2 reports success; host 1 waits for it (secs at most). */
static inline int th_finish(double secs)
{
	if (th.id == 2) {
		th_mark("ok2");
		printf("# host 2 done\n");
		return 0;
	}
	th_waitfor("ok2", secs);
	printf("# both hosts done\n");
	return 0;
}

/* ---- loop helpers ---- */

struct th_wait {
	int (*pred)(void *);
	void *arg;
	int timed_out;
};

static void th_timeout_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)revents;
	((struct th_wait *)w->data)->timed_out = 1;
	ev_break(loop, EVBREAK_ALL);
}

static void th_prepare_cb(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct th_wait *tw = w->data;

	(void)revents;
	if (tw->pred(tw->arg))
		ev_break(loop, EVBREAK_ALL);
}

/* Run the loop until pred(arg) or secs pass: 0, or -1 on timeout. */
static inline int th_run_until(struct ev_loop *loop, int (*pred)(void *),
			       void *arg, double secs)
{
	struct th_wait tw = {pred, arg, 0};
	ev_timer t;
	ev_prepare prep;

	if (pred(arg))
		return 0;
	ev_timer_init(&t, th_timeout_cb, secs, 0.);
	t.data = &tw;
	ev_prepare_init(&prep, th_prepare_cb);
	ev_set_priority(&prep, EV_MINPRI);
	prep.data = &tw;
	ev_timer_start(loop, &t);
	ev_prepare_start(loop, &prep);
	while (!tw.timed_out && !pred(arg))
		ev_run(loop, EVRUN_ONCE);
	ev_timer_stop(loop, &t);
	ev_prepare_stop(loop, &prep);
	return pred(arg) ? 0 : -1;
}

static int th_never(void *arg)
{
	(void)arg;
	return 0;
}

static inline void th_run_for(struct ev_loop *loop, double secs)
{
	(void)th_run_until(loop, th_never, NULL, secs);
}

/* Ask the host for a fault: "kill|boot|stop|cont N" or "link N on|off".
 * Waits until the host has acted unless N is this host, running loop
 * meanwhile if there is one (traffic goes on until the fault hits).
 * Returns the time (th_now) at which the host confirmed it. */
static inline double th_hostreq_loop(struct ev_loop *loop, const char *action,
				     int n, const char *arg)
{
	char tmp[512], req[512], done[512];
	struct stat st;
	double end;
	FILE *f;

	snprintf(tmp, sizeof(tmp), "%s/ctl/.r%d.%s", th.dir, (int)getpid(),
		 action);
	snprintf(req, sizeof(req), "%s/ctl/req.%s.%d.%s.%d", th.dir,
		 th.name, th.id, action, n);
	snprintf(done, sizeof(done), "%s/ctl/done.%s.%d.%s.%d", th.dir,
		 th.name, th.id, action, n);
	unlink(done);
	f = fopen(tmp, "w");
	TH_CHECK(f != NULL);
	fprintf(f, "%s %d %s\n", action, n, arg ? arg : "");
	TH_CHECK(fclose(f) == 0);
	TH_CHECK(rename(tmp, req) == 0);
	if (n == th.id)
		return th_now();
	end = th_now() + 30;
	while (stat(done, &st) != 0) {
		if (th_now() > end)
			th_fail("host did not answer %s %d", action, n);
		if (loop)
			th_run_for(loop, 0.02);
		else
			usleep(20000);
	}
	unlink(done);
	printf("# host: %s %d %s done\n", action, n, arg ? arg : "");
	return th_now();
}

/* th_hostreq_loop without a loop to run while waiting. */
static inline double th_hostreq(const char *action, int n, const char *arg)
{
	return th_hostreq_loop(NULL, action, n, arg);
}

/* A deterministic byte pattern: message seq, byte i. */
static inline uint8_t th_pat(uint32_t seq, size_t i)
{
	uint32_t x = seq * 2654435761u + (uint32_t)i * 40503u;

	return (uint8_t)(x ^ (x >> 13));
}

static inline void th_fill(void *buf, size_t len, uint32_t seq)
{
	uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = th_pat(seq, i);
}

static inline int th_verify(const void *buf, size_t len, uint32_t seq)
{
	const uint8_t *p = buf;

	for (size_t i = 0; i < len; i++)
		if (p[i] != th_pat(seq, i))
			return -1;
	return 0;
}

/* ---- a heartbeat: was the loop ever blocked? ---- */

/* A 100 ms tick on a loop, recording the longest gap between two ticks
 * and when it ended: a loop held up by a blocking call (the library's or
 * the test's) shows as a gap far above 0.1 s. */
struct th_beat {
	ev_timer t;
	double last, max_gap, max_at;
};

static void th_beat_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
	struct th_beat *b = (struct th_beat *)w;
	double now = th_now();

	(void)loop;
	(void)revents;
	if (now - b->last > b->max_gap) {
		b->max_gap = now - b->last;
		b->max_at = now;
	}
	b->last = now;
}

static inline void th_beat_start(struct th_beat *b, struct ev_loop *loop)
{
	memset(b, 0, sizeof(*b));
	b->last = th_now();
	ev_timer_init(&b->t, th_beat_cb, 0.1, 0.1);
	ev_timer_start(loop, &b->t);
}

static inline void th_beat_stop(struct th_beat *b, struct ev_loop *loop)
{
	ev_timer_stop(loop, &b->t);
}

/* ---- the echo server every test runs on host 2 ---- */

struct th_srv {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	int conns, closes, last_status, want;
	unsigned long msgs;
};

static void th_srv_sent(evr_conn *c, int status, void *arg)
{
	(void)c;
	(void)status;
	evr_msg_release(arg);
}

static void th_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct th_srv *s = arg;
	evr_msg *m = evr_conn_hold(c);

	(void)data;
	s->msgs++;
	if (!m || evr_send(c, evr_msg_data(m), len, th_srv_sent, m) < 0) {
		if (m)
			evr_msg_release(m);
	}
}

static void th_srv_close(evr_conn *c, int status, void *arg)
{
	struct th_srv *s = arg;

	(void)c;
	s->closes++;
	s->last_status = status;
	printf("# echo server: conn closed (%s), %lu messages echoed\n",
	       status ? evr_err_name(status) : "0", s->msgs);
}

static void th_srv_accept(evr_listener *l, evr_conn_req *req,
			  const void *user, size_t ulen, void *arg)
{
	struct th_srv *s = arg;
	struct evr_conn_opts co;

	(void)l;
	(void)user;
	(void)ulen;
	evr_conn_opts_init(&co);
	co.on_recv = th_srv_recv;
	co.on_close = th_srv_close;
	co.arg = s;
	if (evr_accept(req, &co, NULL) == 0)
		s->conns++;
}

static int th_srv_all_closed(void *arg)
{
	struct th_srv *s = arg;

	return s->conns >= s->want && s->closes >= s->conns;
}

/* Listen on this host's address and port, with these ctx options. */
static inline void th_srv_start(struct th_srv *s, const struct evr_ctx_opts *o,
				uint16_t port)
{
	memset(s, 0, sizeof(*s));
	s->loop = ev_loop_new(EVFLAG_AUTO);
	TH_CHECK(evr_ctx_create(&s->ctx, s->loop, o) == 0);
	TH_CHECK(evr_listen(s->ctx, th.self, port, 16, th_srv_accept, s,
			    &s->l) == 0);
}

/* Serve until nconns connections have come and gone, or secs pass. */
static inline void th_srv_serve(struct th_srv *s, int nconns, double secs)
{
	double end = th_now() + secs;

	s->want = nconns;
	while (th_run_until(s->loop, th_srv_all_closed, s, 0.5)) {
		if (th_exists("marks", "fail1"))
			th_fail("host 1 failed");
		if (th_now() > end) {
			printf("# echo server: %d of %d conns closed after "
			       "%.0f s\n", s->closes, nconns, secs);
			return;
		}
	}
}

/* Serve until host 1 creates the barrier mark and every conn has closed
 * (at most 5 s more), or secs pass. */
static inline void th_srv_serve_until(struct th_srv *s, const char *mark,
				      double secs)
{
	double end = th_now() + secs, grace = 0;

	s->want = 0;
	for (;;) {
		th_run_for(s->loop, 0.5);
		if (th_exists("marks", "fail1"))
			th_fail("host 1 failed");
		if (!grace && th_exists("marks", mark))
			grace = th_now() + 5;
		if (grace && (s->closes >= s->conns || th_now() > grace))
			return;
		if (th_now() > end)
			th_fail("host 1 never marked %s", mark);
	}
}

static inline void th_srv_stop(struct th_srv *s)
{
	evr_listener_close(s->l);
	evr_ctx_destroy(s->ctx);
	ev_loop_destroy(s->loop);
}

/* ---- the echo client: a window of messages, each echo checked ---- */

#define TH_WIN 8

struct th_cli {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_conn *conn;
	int connected;	  /* 1 up, <0 connect error */
	int closes, close_status;
	double t_close;	  /* th_now() of on_close */
	size_t (*size_of)(uint32_t seq);
	uint32_t total;	  /* messages to send (0: until stopped) */
	int stop;	  /* pump no more */
	uint32_t sent, echoed, sends_ok, sends_err, sends_done;
	uint32_t bad;	  /* echoes lost, duplicated or corrupted */
	int first_err;
	uint64_t bytes;
	uint8_t *cbs;	  /* per seq: op callbacks fired (must be 1) */
	uint32_t ncbs;
	uint8_t *buf[TH_WIN];
	uint32_t slot_seq[TH_WIN];
	int slot_busy[TH_WIN]; /* 2: send pending and echo awaited */
};

static void th_cli_pump(struct th_cli *c);

static void th_cli_release(struct th_cli *c, uint32_t seq)
{
	unsigned k = seq % TH_WIN;

	if (c->slot_busy[k] > 0 && c->slot_seq[k] == seq)
		c->slot_busy[k]--;
}

static void th_cli_sent(evr_conn *conn, int status, void *arg)
{
	struct th_cli *c = evr_conn_arg(conn);
	uint32_t seq = (uint32_t)(uintptr_t)arg;

	if (seq < c->ncbs && c->cbs[seq]++)
		th_fail("send %u: callback fired twice", seq);
	c->sends_done++;
	if (status) {
		if (!c->sends_err++)
			c->first_err = status;
	} else {
		c->sends_ok++;
	}
	th_cli_release(c, seq);
	if (!status)
		th_cli_pump(c);
}

static void th_cli_recv(evr_conn *conn, const void *data, size_t len,
			void *arg)
{
	struct th_cli *c = arg;
	uint32_t seq = c->echoed;

	(void)conn;
	if (seq >= c->sent || len != c->size_of(seq) ||
	    th_verify(data, len, seq)) {
		c->bad++;
		printf("# echo %u: wrong (len %zu, expected %zu)\n", seq, len,
		       seq < c->sent ? c->size_of(seq) : 0);
	}
	c->echoed++;
	c->bytes += len;
	th_cli_release(c, seq);
	th_cli_pump(c);
}

static void th_cli_connected(evr_conn *conn, int status, void *arg)
{
	struct th_cli *c = arg;

	(void)conn;
	c->connected = status ? status : 1;
	if (status)
		c->conn = NULL;
	else
		th_cli_pump(c);
}

static void th_cli_closed(evr_conn *conn, int status, void *arg)
{
	struct th_cli *c = arg;

	(void)conn;
	c->closes++;
	c->close_status = status;
	c->t_close = th_now();
	c->conn = NULL;
}

static void th_cli_pump(struct th_cli *c)
{
	while (c->conn && c->connected == 1 && !c->stop &&
	       (!c->total || c->sent < c->total) && c->sent < c->ncbs) {
		uint32_t seq = c->sent;
		unsigned k = seq % TH_WIN;
		size_t len = c->size_of(seq);
		int rc;

		if (c->slot_busy[k])
			return;
		th_fill(c->buf[k], len, seq);
		c->slot_seq[k] = seq;
		c->slot_busy[k] = 2;
		rc = evr_send(c->conn, c->buf[k], len, th_cli_sent,
			      (void *)(uintptr_t)seq);
		if (rc < 0) {
			c->slot_busy[k] = 0;
			if (rc == -EPIPE)
				return;
			th_fail("evr_send: %s", evr_strerror(rc));
		}
		c->sent++;
	}
}

/* A ctx with these options and buffers for messages up to maxlen. */
static inline void th_cli_init(struct th_cli *c, const struct evr_ctx_opts *o,
			       size_t maxlen, size_t (*size_of)(uint32_t),
			       uint32_t total)
{
	memset(c, 0, sizeof(*c));
	c->loop = ev_loop_new(EVFLAG_AUTO);
	TH_CHECK(evr_ctx_create(&c->ctx, c->loop, o) == 0);
	c->size_of = size_of;
	c->total = total;
	c->ncbs = total ? total : 1000000;
	c->cbs = calloc(c->ncbs, 1);
	TH_CHECK(c->cbs != NULL);
	for (int k = 0; k < TH_WIN; k++) {
		c->buf[k] = malloc(maxlen ? maxlen : 1);
		TH_CHECK(c->buf[k] != NULL);
	}
}

static int th_cli_up(void *arg)
{
	return ((struct th_cli *)arg)->connected != 0;
}

/* Connect to the peer's port (keepalive_ms as in evr_conn_opts); returns
 * the connect status. */
static inline int th_cli_connect(struct th_cli *c, uint16_t port,
				 int keepalive_ms)
{
	struct evr_conn_opts co;

	evr_conn_opts_init(&co);
	co.on_connect = th_cli_connected;
	co.on_recv = th_cli_recv;
	co.on_close = th_cli_closed;
	co.arg = c;
	co.keepalive_ms = keepalive_ms;
	c->connected = 0;
	TH_CHECK(evr_connect(c->ctx, th.peer, port, &co, &c->conn) == 0);
	TH_CHECK(th_run_until(c->loop, th_cli_up, c, 30) == 0);
	return c->connected == 1 ? 0 : c->connected;
}

static inline int th_cli_all_echoed(void *arg)
{
	struct th_cli *c = arg;

	return !c->conn || (c->echoed >= c->total &&
			    c->sends_done >= c->total);
}

static inline int th_cli_closed_p(void *arg)
{
	return ((struct th_cli *)arg)->closes > 0;
}

/* Every op callback fired exactly once (checked as they fire) and, for
 * the ones sent, at all. */
static inline void th_cli_check_cbs(const struct th_cli *c)
{
	for (uint32_t i = 0; i < c->sent; i++)
		if (c->cbs[i] != 1)
			th_fail("send %u: %u callbacks", i, c->cbs[i]);
}

static inline void th_cli_fini(struct th_cli *c)
{
	if (c->ctx)
		evr_ctx_destroy(c->ctx);
	ev_loop_destroy(c->loop);
	for (int k = 0; k < TH_WIN; k++)
		free(c->buf[k]);
	free(c->cbs);
}

#endif
