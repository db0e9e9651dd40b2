/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The liveness guarantee (docs/liveness.md): a connection whose peer host
 * loses power ends within keepalive_ms * 1.5 + keepalive_timeout_ms (plus
 * the transport's retry bound where a WR is in flight), whatever it is
 * waiting for.  Host 1 has six connections to host 2, each held in one
 * state when host 2's QEMU is killed:
 *
 *   credits   sends wait for credits: host 2 holds every message it gets
 *             on this conn (evr_conn_hold, never released), so the window
 *             the peer lends fills and the idle cycle's window asks go
 *             unanswered; nothing of ours is in flight;
 *   close     the same, then closed gracefully by the user: the close
 *             waits for credits to send what is queued;
 *   fin       16 MiB rendezvous sends, one after another: one waits for
 *             the peer's FIN (host 2 reads it from us meanwhile);
 *   read      RDMA READs of 4 MiB of host 2's region, one after another:
 *             one in flight;
 *   write     RDMA WRITEs of 256 KiB to host 2's region, more than the
 *             SQ holds: the SQ full, the rest queued behind;
 *   idle      nothing.
 *
 * Host 1 has the six twice, on two ctxs: one on the test's libev loop,
 * one embedded -- created without a loop and driven through evr_ctx_fd(),
 * evr_ctx_process() and evr_ctx_timeout_ms() by a host loop (here the
 * test's libev loop, watching that fd and sleeping as long as the ctx
 * says): the keepalive tick is a timer no fd announces.  Host 1 must see
 * each of the twelve end within the bound: on_close once with an error,
 * every operation's callback once (those not done before the kill with an
 * error), none after on_close; evr_ctx_destroy() at once.  Host 2 is then
 * booted again for the tests after this one.  Measured times are printed.
 */
#include <stdbool.h>

#include "th.h"

#define PORT 7487
#define BOUND 9.0  /* keepalive_ms * 1.5 + keepalive_timeout_ms */
#define SLACK 3.0  /* the host's request takes up to ~1 s; timers tick */
#define REGION (16u << 20)
#define WLEN (256u << 10)
#define RLEN (4u << 20) /* rxe carries 8 MiB at most in one message */
#define MSG 512
#define NSEQ 100000

enum kind { K_CREDITS, K_CLOSE, K_FIN, K_READ, K_WRITE, K_IDLE, K_N };
static const char *const kind_str[K_N] = {"credits", "close", "fin",
					  "read",    "write", "idle"};
enum path { P_LIBEV, P_EMBED, P_N };
static const char *const path_str[P_N] = {"libev", "embedded"};

/* ---- host 2: holds what the credits/close conns send, and offers a
 * region to all ---- */

struct srv {
	struct ev_loop *loop;
	evr_ctx *ctx;
	evr_listener *l;
	evr_mr *mr;
	uint8_t key[EVR_RKEY_PACKED_SIZE];
	int conns;
	unsigned long held;
};

static void srv_hold(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct srv *s = arg;

	(void)data;
	(void)len;
	/* never released: the credit it stands for never comes back */
	if (evr_conn_hold(c))
		s->held++;
}

static void srv_drop(evr_conn *c, const void *data, size_t len, void *arg)
{
	(void)c;
	(void)data;
	(void)len;
	(void)arg;
}

static void srv_accept(evr_listener *l, evr_conn_req *req, const void *user,
		       size_t ulen, void *arg)
{
	struct srv *s = arg;
	struct evr_conn_opts co;
	evr_conn *c;

	(void)l;
	evr_conn_opts_init(&co);
	if (ulen == 1 && (*(const uint8_t *)user == K_CREDITS ||
			  *(const uint8_t *)user == K_CLOSE))
		co.on_recv = srv_hold;
	else
		co.on_recv = srv_drop;
	co.arg = s;
	if (evr_accept(req, &co, &c) == 0) {
		s->conns++;
		/* queued until established */
		TH_CHECK(evr_send(c, s->key, sizeof(s->key), NULL, NULL) == 0);
	}
}

static int run_server(void)
{
	struct evr_ctx_opts o;
	struct evr_rkey rk;
	struct srv s = {0};
	void *mem;

	if (th_reborn("listening")) { /* booted again after the kill */
		th_mark("reborn");
		th_waitfor("done", 150);
		return th_finish(0);
	}
	evr_ctx_opts_init(&o);
	o.local_addr = th.self;
	s.loop = ev_loop_new(EVFLAG_AUTO);
	TH_CHECK(evr_ctx_create(&s.ctx, s.loop, &o) == 0);
	mem = calloc(1, REGION);
	TH_CHECK(mem != NULL);
	TH_CHECK(evr_mr_reg(s.ctx, mem, REGION,
			    EVR_ACCESS_REMOTE_READ | EVR_ACCESS_REMOTE_WRITE,
			    &s.mr) == 0);
	evr_mr_rkey(s.mr, &rk);
	evr_rkey_pack(&rk, s.key);
	TH_CHECK(evr_listen(s.ctx, th.self, PORT, 16, srv_accept, &s, &s.l) ==
		 0);
	th_mark("listening");
	for (;;) { /* killed in here */
		th_run_for(s.loop, 0.5);
		if (th_exists("marks", "fail1"))
			th_fail("host 1 failed");
	}
}

/* ---- host 1 ---- */

struct side {
	enum path path;
	enum kind kind;
	evr_conn *conn;
	int up, closes, status;
	double t_close;
	bool got_key, stop;
	struct evr_rkey rk;
	uint32_t subm, cbs, ok, err, cbs_at_close, subm_at_kill, ok_at_kill;
	int first_err;
	uint8_t *once; /* per op: callbacks fired */
};

#define NSIDES (P_N * K_N)
static struct side sides[NSIDES];
static evr_mr *lmr[P_N];
static uint8_t *lmem;
static int late_cbs;

/* ---- the embedded ctx's host loop: the test's libev loop watches the
 * ctx's fd and sleeps no longer than evr_ctx_timeout_ms() ---- */

struct host {
	evr_ctx *ctx;
	ev_io io;
	ev_timer tmo;
	ev_prepare prep;
};

static void host_process(struct host *h)
{
	TH_CHECK(evr_ctx_process(h->ctx) == 0);
}

static void host_io(struct ev_loop *loop, ev_io *w, int revents)
{
	(void)loop;
	(void)revents;
	host_process(w->data);
}

static void host_tmo(struct ev_loop *loop, ev_timer *w, int revents)
{
	(void)loop;
	(void)revents;
	host_process(w->data);
}

/* Before the loop sleeps: the ctx's own deadline, as a timer. */
static void host_prep(struct ev_loop *loop, ev_prepare *w, int revents)
{
	struct host *h = w->data;
	int ms = evr_ctx_timeout_ms(h->ctx);

	(void)revents;
	ev_timer_stop(loop, &h->tmo);
	if (ms >= 0) {
		ev_timer_set(&h->tmo, ms / 1000.0, 0.);
		ev_timer_start(loop, &h->tmo);
	}
}

static void host_start(struct host *h, struct ev_loop *loop, evr_ctx *ctx)
{
	h->ctx = ctx;
	ev_io_init(&h->io, host_io, evr_ctx_fd(ctx), EV_READ);
	ev_timer_init(&h->tmo, host_tmo, 0., 0.);
	ev_prepare_init(&h->prep, host_prep);
	h->io.data = h->tmo.data = h->prep.data = h;
	TH_CHECK(h->io.fd >= 0);
	ev_io_start(loop, &h->io);
	ev_prepare_start(loop, &h->prep);
}

static void host_stop(struct host *h, struct ev_loop *loop)
{
	ev_io_stop(loop, &h->io);
	ev_timer_stop(loop, &h->tmo);
	ev_prepare_stop(loop, &h->prep);
}

static void submit(struct side *s);

static void op_done(evr_conn *c, int status, void *arg)
{
	uintptr_t v = (uintptr_t)arg;
	struct side *s = &sides[v >> 24];
	uint32_t seq = (uint32_t)(v & 0xffffff);

	(void)c;
	if (s->once[seq]++)
		th_fail("%s %s: op %u: callback fired twice",
			path_str[s->path], kind_str[s->kind], seq);
	if (s->closes)
		late_cbs++;
	s->cbs++;
	if (status) {
		if (!s->err++)
			s->first_err = status;
		return;
	}
	s->ok++;
	submit(s);
}

static void *op_arg(struct side *s)
{
	TH_CHECK(s->subm < NSEQ);
	return (void *)((uintptr_t)(s - sides) << 24 | s->subm);
}

/* The next operation of a conn that keeps one going (fin, read, write). */
static void submit(struct side *s)
{
	static uint8_t small[MSG];
	int rc;

	if (!s->conn || s->stop)
		return;
	switch (s->kind) {
	case K_FIN:
		rc = evr_send(s->conn, lmem, REGION, op_done, op_arg(s));
		break;
	case K_READ:
		rc = evr_read(s->conn, lmr[s->path], 0, &s->rk, 0, RLEN, op_done,
			      op_arg(s));
		break;
	case K_WRITE:
		rc = evr_write(s->conn, lmr[s->path], 0, &s->rk,
			       (uint64_t)(s->subm % (REGION / WLEN)) * WLEN,
			       WLEN, op_done, op_arg(s));
		break;
	case K_CREDITS:
	case K_CLOSE:
		rc = evr_send(s->conn, small, sizeof(small), op_done,
			      op_arg(s));
		break;
	default:
		return;
	}
	if (rc == -EPIPE)
		return;
	TH_CHECK(rc == 0);
	s->subm++;
}

static void side_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct side *s = arg;

	(void)c;
	if (s->got_key || len != EVR_RKEY_PACKED_SIZE)
		th_fail("%s %s: unexpected message of %zu bytes",
			path_str[s->path], kind_str[s->kind], len);
	evr_rkey_unpack(&s->rk, data);
	s->got_key = true;
}

static void side_connected(evr_conn *c, int status, void *arg)
{
	struct side *s = arg;

	(void)c;
	s->up = status ? status : 1;
}

static void side_closed(evr_conn *c, int status, void *arg)
{
	struct side *s = arg;

	(void)c;
	s->closes++;
	s->status = status;
	s->t_close = th_now();
	s->cbs_at_close = s->cbs;
	s->conn = NULL;
}

static int all_keyed(void *arg)
{
	(void)arg;
	for (int i = 0; i < NSIDES; i++)
		if (!sides[i].got_key)
			return 0;
	return 1;
}

static int all_closed(void *arg)
{
	(void)arg;
	for (int i = 0; i < NSIDES; i++)
		if (!sides[i].closes)
			return 0;
	return 1;
}

static void opts(struct evr_ctx_opts *o)
{
	evr_ctx_opts_init(o);
	o->local_addr = th.self;
	o->keepalive_ms = 2000;
	o->keepalive_timeout_ms = 6000;
	o->window_idle_ms = 500; /* window asks while host 2 lives */
}

static void print_state(const char *when)
{
	for (int i = 0; i < NSIDES; i++) {
		struct side *s = &sides[i];
		struct evr_conn_info ci;

		if (!s->conn || evr_conn_info(s->conn, &ci))
			continue;
		printf("# %s: %-8s %-7s state %s, %u send credits, %zu bytes "
		       "queued, %u ops submitted, %u done\n",
		       when, path_str[s->path], kind_str[s->kind], ci.state,
		       ci.send_credits, ci.queued_bytes, s->subm, s->cbs);
	}
}

static int run_client(void)
{
	struct evr_ctx_opts o;
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	evr_ctx *ctx[P_N];
	struct host host;
	double t_kill, t0, dt, worst = 0;

	opts(&o);
	TH_CHECK(evr_ctx_create(&ctx[P_LIBEV], loop, &o) == 0);
	TH_CHECK(evr_ctx_create(&ctx[P_EMBED], NULL, &o) == 0);
	host_start(&host, loop, ctx[P_EMBED]);
	lmem = malloc(REGION);
	TH_CHECK(lmem != NULL);
	memset(lmem, 0x5a, REGION);
	for (int p = 0; p < P_N; p++)
		TH_CHECK(evr_mr_reg(ctx[p], lmem, REGION, EVR_ACCESS_LOCAL,
				    &lmr[p]) == 0);
	th_waitfor("listening", 120);
	for (int i = 0; i < NSIDES; i++) {
		struct side *s = &sides[i];
		struct evr_conn_opts co;
		uint8_t user;

		s->path = (enum path)(i / K_N);
		s->kind = (enum kind)(i % K_N);
		user = (uint8_t)s->kind;
		s->once = calloc(NSEQ, 1);
		TH_CHECK(s->once != NULL);
		evr_conn_opts_init(&co);
		co.on_connect = side_connected;
		co.on_close = side_closed;
		co.on_recv = side_recv;
		co.user_data = &user;
		co.user_len = 1;
		co.arg = s;
		TH_CHECK(evr_connect(ctx[s->path], th.peer, PORT, &co,
				     &s->conn) == 0);
	}
	TH_CHECK(th_run_until(loop, all_keyed, NULL, 60) == 0);
	for (int i = 0; i < NSIDES; i++)
		TH_CHECK(sides[i].up == 1);

	/* into the states: more sends than a window can grow to (the
	 * peer's receive depth, 64) */
	for (int p = 0; p < P_N; p++) {
		struct side *s = &sides[p * K_N];

		for (int i = 0; i < 200; i++) {
			submit(&s[K_CREDITS]);
			submit(&s[K_CLOSE]);
		}
		s[K_CREDITS].stop = s[K_CLOSE].stop = true;
		submit(&s[K_FIN]);
		submit(&s[K_READ]);
		for (int i = 0; i < 64; i++) /* beyond the SQ: the rest queue */
			submit(&s[K_WRITE]);
	}
	th_run_for(loop, 2.0);
	for (int p = 0; p < P_N; p++)
		TH_CHECK(evr_conn_close(sides[p * K_N + K_CLOSE].conn, 0) == 0);
	th_run_for(loop, 1.0);
	print_state("before the kill");
	for (int i = 0; i < NSIDES; i++) {
		struct side *s = &sides[i];

		TH_CHECK(!s->closes);
		TH_CHECK(s->err == 0);
		if (s->kind == K_CREDITS || s->kind == K_CLOSE)
			TH_CHECK(s->cbs < s->subm); /* some wait */
		s->subm_at_kill = s->subm;
		s->ok_at_kill = s->ok;
	}

	t_kill = th_hostreq_loop(loop, "kill", 2, NULL);
	print_state("kill confirmed");
	if (th_run_until(loop, all_closed, NULL, BOUND + 20)) {
		print_state("still open");
		th_fail("not every conn closed %.0f s after the kill",
			BOUND + 20);
	}
	for (int i = 0; i < NSIDES; i++) {
		struct side *s = &sides[i];

		printf("# %-8s %-7s on_close %s %.2f s after the kill; %u ops: "
		       "%u ok (%u after the kill), %u failed (first %s)\n",
		       path_str[s->path], kind_str[s->kind],
		       evr_err_name(s->status), s->t_close - t_kill, s->subm,
		       s->ok, s->ok - s->ok_at_kill, s->err,
		       s->err ? evr_err_name(s->first_err) : "-");
		if (s->t_close - t_kill > worst)
			worst = s->t_close - t_kill;
	}
	/* nothing fires twice later */
	th_run_for(loop, 1.0);
	for (int i = 0; i < NSIDES; i++) {
		struct side *s = &sides[i];

		TH_CHECK(s->closes == 1);
		TH_CHECK(s->status < 0);
		TH_CHECK(s->t_close - t_kill <= BOUND + SLACK);
		/* every op once, all before on_close */
		TH_CHECK(s->cbs == s->subm);
		TH_CHECK(s->cbs_at_close == s->subm);
		for (uint32_t j = 0; j < s->subm; j++)
			TH_CHECK(s->once[j] == 1);
		/* what was waiting at the kill could not succeed */
		if (s->kind == K_CREDITS || s->kind == K_CLOSE)
			TH_CHECK(s->err > 0);
	}
	TH_CHECK(late_cbs == 0);
	printf("# the last conn ended %.2f s after the kill (bound %.0f + "
	       "%.0f s)\n",
	       worst, BOUND, SLACK);

	t0 = th_now();
	for (int p = 0; p < P_N; p++)
		TH_CHECK(evr_mr_dereg(lmr[p]) == 0);
	host_stop(&host, loop);
	evr_ctx_destroy(ctx[P_EMBED]);
	evr_ctx_destroy(ctx[P_LIBEV]);
	dt = th_now() - t0;
	printf("# evr_ctx_destroy x2 after the dead peer: %.3f s\n", dt);
	TH_CHECK(dt < 2.0);
	ev_loop_destroy(loop);

	th_hostreq("boot", 2, NULL);
	th_waitfor("reborn", 180);
	th_mark("done");
	return th_finish(60);
}

int main(void)
{
	th_init("t_silent", 400);
	return th.id == 1 ? run_client() : run_server();
}
