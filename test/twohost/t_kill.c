/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Peer host killed (power loss) mid-stream.  Host 1 has three connections
 * to host 2's echo server: A streams messages (eager and rendezvous), B is
 * idle, C is closed gracefully by the user right after the kill.  Then host
 * 2's QEMU is killed: no FIN, no DREQ, nothing -- only silence.  Host 1
 * must see, within the keepalive bound (keepalive_ms 2000,
 * keepalive_timeout_ms 6000: about 2000 * 1.5 + 6000 = 9 s):
 *   - A fail with an error, every pending send's callback fire exactly
 *     once, those sent after the kill with an error (one is sent right
 *     after it: A's window may be full of awaited echoes then), then
 *     on_close exactly once;
 *   - B (idle) fail through its keepalive, on_close exactly once;
 *   - C, given a 1 MiB (rendezvous) send right after the kill and then
 *     closed gracefully by the user, end in bounded time (the send's
 *     callback with an error, then on_close): never after the ~100 s
 *     rdma_cm takes to report a disconnect on a dead link;
 *   - evr_ctx_destroy() return at once.
 * Then host 2 is booted again, and a new connection to the restarted echo
 * server works.  Measured times are printed.
 */
#include "th.h"

#define PORT 7483
#define BOUND 9.0  /* keepalive_ms * 1.5 + keepalive_timeout_ms */
#define SLACK 3.0  /* the host's request takes up to ~1 s; timers tick */

static size_t size_of(uint32_t seq)
{
	return seq % 4 == 3 ? 65536 : 512;
}

static size_t size_small(uint32_t seq)
{
	return seq % 2 ? 1 << 20 : 64;
}

struct side {
	evr_conn *conn;
	int up, closes, status;
	double t_close;
	int op_cbs, op_status;
};

static void side_sent(evr_conn *c, int status, void *arg)
{
	struct side *s = arg;

	(void)c;
	s->op_cbs++;
	s->op_status = status;
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
}

static int side_up(void *arg)
{
	return ((struct side *)arg)->up != 0;
}

static void side_connect(struct th_cli *c, struct side *s)
{
	struct evr_conn_opts co;

	evr_conn_opts_init(&co);
	co.on_connect = side_connected;
	co.on_close = side_closed;
	co.arg = s;
	TH_CHECK(evr_connect(c->ctx, th.peer, PORT, &co, &s->conn) == 0);
	TH_CHECK(th_run_until(c->loop, side_up, s, 30) == 0);
	TH_CHECK(s->up == 1);
}

struct all {
	struct th_cli *a;
	struct side *b, *c;
};

static int all_closed(void *arg)
{
	struct all *x = arg;

	return x->a->closes && x->b->closes && x->c->closes;
}

static void opts(struct evr_ctx_opts *o)
{
	evr_ctx_opts_init(o);
	o->local_addr = th.self;
	o->keepalive_ms = 2000;
	o->keepalive_timeout_ms = 6000;
}

static void reconnect(void)
{
	struct evr_ctx_opts o;
	struct th_cli c;
	double t0 = th_now();
	int rc;

	opts(&o);
	th_cli_init(&c, &o, 1 << 20, size_small, 6);
	rc = th_cli_connect(&c, PORT, 0);
	if (rc)
		th_fail("connect to the restarted host: %s", evr_strerror(rc));
	th_cli_pump(&c);
	TH_CHECK(th_run_until(c.loop, th_cli_all_echoed, &c, 60) == 0);
	TH_CHECK(c.bad == 0 && c.echoed == 6 && c.sends_ok == 6);
	th_cli_check_cbs(&c);
	printf("# restarted host: connected and 6 echoes (64 B, 1 MiB) "
	       "verified in %.2f s\n", th_now() - t0);
	TH_CHECK(evr_conn_close(c.conn, 0) == 0);
	TH_CHECK(th_run_until(c.loop, th_cli_closed_p, &c, 20) == 0);
	TH_CHECK(c.close_status == 0);
	th_cli_fini(&c);
}

static uint8_t big[1 << 20];

static int run_client(void)
{
	struct evr_ctx_opts o;
	struct th_cli a;
	struct side b = {0}, c = {0}, a_late = {0};
	uint32_t sent_k;
	int late_rc;
	struct all x = {&a, &b, &c};
	double t_kill, t0, dt;
	struct th_beat beat;
	struct evr_stats st;

	opts(&o);
	th_cli_init(&a, &o, 65536, size_of, 0);
	th_waitfor("listening", 120);
	TH_CHECK(th_cli_connect(&a, PORT, 0) == 0);
	side_connect(&a, &b);
	side_connect(&a, &c);
	th_cli_pump(&a);
	th_beat_start(&beat, a.loop);
	th_run_for(a.loop, 3.0);
	TH_CHECK(a.bad == 0 && a.conn && a.echoed > 0);
	printf("# streaming: %u echoes verified in 3 s; killing host 2\n",
	       a.echoed);

	t_kill = th_hostreq_loop(a.loop, "kill", 2, NULL);
	printf("# kill confirmed: A has %u sent, %u echoed, %u send "
	       "callbacks pending\n",
	       a.sent, a.echoed, a.sent - a.sends_done);
	sent_k = a.sent;
	/* refused only if A has failed already (a slow host confirms late) */
	late_rc = a.conn ? evr_send(a.conn, big, 512, side_sent, &a_late)
			 : -EPIPE;
	TH_CHECK(late_rc == 0 || late_rc == -EPIPE);
	TH_CHECK(evr_send(c.conn, big, sizeof(big), side_sent, &c) == 0);
	TH_CHECK(evr_conn_close(c.conn, 0) == 0);
	if (th_run_until(a.loop, all_closed, &x, BOUND + 20)) {
		struct evr_conn_info ai;

		/* what A waits for, for the log */
		if (!a.closes && a.conn && evr_conn_info(a.conn, &ai) == 0)
			printf("# A: state %s, %u send credits, %zu bytes "
			       "queued, %u sent, %u echoed, %u sends done\n",
			       ai.state, ai.send_credits, ai.queued_bytes,
			       a.sent, a.echoed, a.sends_done);
		/* whether A's keepalive ran, and whether the loop did */
		evr_ctx_stats(a.ctx, &st);
		printf("# keepalive probes sent: %llu; the loop's longest "
		       "gap: %.2f s, ending %.1f s after the kill\n",
		       (unsigned long long)st.keepalive_probes, beat.max_gap,
		       beat.max_at - t_kill);
		th_fail("not all conns closed %.0f s after the kill "
			"(A %d, B %d, C %d)", BOUND + 20, a.closes, b.closes,
			c.closes);
	}
	printf("# A (streaming): on_close %s %.2f s after the kill; %u sends "
	       "done (%u ok, %u failed, first error %s); the send after the "
	       "kill: %s\n",
	       evr_err_name(a.close_status), a.t_close - t_kill, a.sends_done,
	       a.sends_ok, a.sends_err,
	       a.sends_err ? evr_err_name(a.first_err) : "-",
	       late_rc ? "refused (A had failed)"
		       : a_late.op_cbs ? evr_err_name(a_late.op_status)
				       : "no callback");
	printf("# B (idle): on_close %s %.2f s after the kill\n",
	       evr_err_name(b.status), b.t_close - t_kill);
	printf("# C (1 MiB send, then closed by the user at the kill): send "
	       "callback %s, on_close %s %.2f s after the kill\n",
	       evr_err_name(c.op_status),
	       c.status ? evr_err_name(c.status) : "0", c.t_close - t_kill);
	printf("# the loop's longest gap: %.2f s\n", beat.max_gap);
	th_beat_stop(&beat, a.loop);
	TH_CHECK(c.op_cbs == 1 && c.op_status < 0);
	TH_CHECK(a.close_status < 0 && b.status < 0);
	TH_CHECK(a.t_close - t_kill <= BOUND + SLACK);
	TH_CHECK(b.t_close - t_kill <= BOUND + SLACK);
	TH_CHECK(c.t_close - t_kill <= BOUND + SLACK);
	TH_CHECK(a.sends_done == a.sent);
	/* what A sent after the kill cannot succeed: the late send, and any
	 * the window let through after it (sent before it, they may have
	 * been acknowledged before the host acted) */
	TH_CHECK(a_late.op_cbs == (late_rc == 0));
	if (late_rc == 0) /* flushed behind another: -ECANCELED */
		TH_CHECK(a_late.op_status < 0);
	TH_CHECK(a.sends_err >= a.sent - sent_k);
	if (a.sends_err)
		TH_CHECK(a.first_err == -ETIMEDOUT ||
			 a.first_err == -ECONNRESET);
	TH_CHECK(a.bad == 0);
	th_cli_check_cbs(&a);
	/* nothing fires twice later */
	th_run_for(a.loop, 1.0);
	TH_CHECK(a.closes == 1 && b.closes == 1 && c.closes == 1);
	TH_CHECK(a_late.op_cbs == (late_rc == 0) && c.op_cbs == 1);

	t0 = th_now();
	evr_ctx_destroy(a.ctx);
	a.ctx = NULL;
	dt = th_now() - t0;
	printf("# evr_ctx_destroy after the dead peer: %.3f s\n", dt);
	TH_CHECK(dt < 2.0);
	th_cli_fini(&a);

	th_hostreq("boot", 2, NULL);
	t0 = th_now();
	th_waitfor("reborn", 180);
	printf("# host 2 booted again and listening after %.1f s\n",
	       th_now() - t0);
	reconnect();
	th_mark("done");
	return th_finish(60);
}

static int run_server(void)
{
	struct evr_ctx_opts o;
	struct th_srv s;

	opts(&o);
	th_srv_start(&s, &o, PORT);
	if (!th_reborn("listening")) {
		th_mark("listening");
		/* killed in here */
		th_srv_serve_until(&s, "done", 120);
		th_fail("still alive: host 1 never killed this host");
	}
	th_mark("reborn");
	th_srv_serve_until(&s, "done", 150);
	/* the peer closed gracefully (-ESHUTDOWN here) */
	TH_CHECK(s.conns == 1 && s.closes == 1);
	th_srv_stop(&s);
	return th_finish(0);
}

int main(void)
{
	th_init("t_kill", 400);
	return th.id == 1 ? run_client() : run_server();
}
