/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Host frozen: host 2's vCPUs are stopped (QEMU "stop": a hung host whose
 * NIC still exists but nothing answers), then resumed.  Host 1 keeps an
 * idle connection to host 2's echo server with keepalive_ms 2000 and
 * keepalive_timeout_ms 6000 (bound about 9 s).
 *   - frozen 1 s: the connection survives; echoes afterwards verified.
 *   - frozen until detected (at most 20 s): host 1's on_close fires with
 *     an error within the bound; after host 2 resumes, a new connection
 *     works.
 */
#include "th.h"

#define PORT 7489
#define BOUND 9.0
#define SLACK 3.0

static size_t size_of(uint32_t seq)
{
	return seq % 2 ? 65536 : 128;
}

static void echo_some(struct th_cli *c, uint32_t n)
{
	c->total = c->sent + n;
	th_cli_pump(c);
	TH_CHECK(th_run_until(c->loop, th_cli_all_echoed, c, 30) == 0);
	TH_CHECK(c->conn != NULL);
	TH_CHECK(c->bad == 0 && c->echoed == c->total);
	TH_CHECK(c->sends_ok == c->total);
}

static int run_client(void)
{
	struct evr_ctx_opts o;
	struct th_cli c;
	double t_stop, t_cont;

	evr_ctx_opts_init(&o);
	o.local_addr = th.self;
	o.keepalive_ms = 2000;
	o.keepalive_timeout_ms = 6000;
	th_cli_init(&c, &o, 65536, size_of, 0);
	c.ncbs = 1000;
	th_waitfor("listening", 120);
	TH_CHECK(th_cli_connect(&c, PORT, 0) == 0);
	echo_some(&c, 10);

	/* short freeze: survives */
	th_run_for(c.loop, 1.0);
	t_stop = th_hostreq_loop(c.loop, "stop", 2, NULL);
	th_run_for(c.loop, 1.0);
	t_cont = th_hostreq_loop(c.loop, "cont", 2, NULL);
	printf("# host 2 frozen for %.2f s\n", t_cont - t_stop);
	th_run_for(c.loop, 12.0); /* beyond the keepalive bound */
	if (c.closes)
		th_fail("short freeze: conn closed (%s) %.2f s after the stop",
			evr_err_name(c.close_status), c.t_close - t_stop);
	echo_some(&c, 10);
	printf("# short freeze: survived, 10 echoes verified after it\n");

	/* long freeze: detected */
	t_stop = th_hostreq_loop(c.loop, "stop", 2, NULL);
	if (th_run_until(c.loop, th_cli_closed_p, &c, 20)) {
		th_hostreq_loop(c.loop, "cont", 2, NULL);
		th_fail("long freeze: not detected in 20 s");
	}
	t_cont = th_hostreq_loop(c.loop, "cont", 2, NULL);
	printf("# long freeze: detected, on_close %s %.2f s after the stop "
	       "(bound %.0f s); host 2 frozen for %.2f s\n",
	       evr_err_name(c.close_status), c.t_close - t_stop, BOUND,
	       t_cont - t_stop);
	TH_CHECK(c.close_status < 0);
	TH_CHECK(c.t_close - t_stop <= BOUND + SLACK);
	th_cli_check_cbs(&c);
	th_cli_fini(&c);

	/* host 2 is back: a new connection works */
	th_cli_init(&c, &o, 65536, size_of, 0);
	c.ncbs = 1000;
	TH_CHECK(th_cli_connect(&c, PORT, 0) == 0);
	echo_some(&c, 10);
	printf("# after the long freeze: new connection, 10 echoes "
	       "verified\n");
	TH_CHECK(evr_conn_close(c.conn, 0) == 0);
	TH_CHECK(th_run_until(c.loop, th_cli_closed_p, &c, 30) == 0);
	TH_CHECK(c.close_status == 0);
	th_cli_fini(&c);
	th_mark("done");
	return th_finish(60);
}

static int run_server(void)
{
	struct evr_ctx_opts o;
	struct th_srv s;

	evr_ctx_opts_init(&o);
	o.local_addr = th.self;
	o.keepalive_ms = 2000;
	o.keepalive_timeout_ms = 6000;
	th_srv_start(&s, &o, PORT);
	th_mark("listening");
	th_srv_serve_until(&s, "done", 200);
	printf("# host 2: %d conns, %d closed (last %s), %lu echoed\n",
	       s.conns, s.closes, evr_err_name(s.last_status), s.msgs);
	TH_CHECK(s.conns == 2);
	th_srv_stop(&s);
	return th_finish(0);
}

int main(void)
{
	th_init("t_freeze", 300);
	return th.id == 1 ? run_client() : run_server();
}
