/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Link cut for 3 s, then restored, with the library's defaults (retry
 * count 6, ACK timeout 16 = 0.27 s, keepalive 2000/6000 ms).  Host 1 has a
 * streaming connection A and an idle one B to host 2's echo server; host
 * 2's NIC loses its carrier (QEMU set_link off: every frame dropped, both
 * ways) for 3 s.  Each connection must either survive -- every echo
 * afterwards verified, none lost or duplicated -- or fail cleanly: an
 * error on_close, every pending callback exactly once; never hang.  What
 * happened to each is printed.  Afterwards a new connection must work.
 */
#include "th.h"

#define PORT 7487

static size_t size_of(uint32_t seq)
{
	return seq % 4 == 3 ? 16384 : 256;
}

static void report(const char *name, struct th_cli *c, double t_cut,
		   uint32_t echoed_at_restore)
{
	if (c->closes)
		printf("# %s: FAILED CLEANLY: on_close %s %.2f s after the "
		       "cut; %u sends ok, %u failed (%s), %u echoes verified\n",
		       name, evr_err_name(c->close_status),
		       c->t_close - t_cut, c->sends_ok, c->sends_err,
		       c->sends_err ? evr_err_name(c->first_err) : "-",
		       c->echoed);
	else
		printf("# %s: SURVIVED: %u echoes verified, %u of them after "
		       "the link came back\n",
		       name, c->echoed, c->echoed - echoed_at_restore);
	TH_CHECK(c->bad == 0);
	if (c->closes) {
		TH_CHECK(c->close_status < 0);
		TH_CHECK(c->sends_done == c->sent);
		th_cli_check_cbs(c);
	}
}

static int run_client(void)
{
	struct evr_ctx_opts o;
	struct th_cli a, b, d;
	double t_cut, t_on;
	uint32_t ea, eb;

	evr_ctx_opts_init(&o);
	o.local_addr = th.self;
	th_cli_init(&a, &o, 16384, size_of, 0);
	th_cli_init(&b, &o, 16384, size_of, 0);
	b.stop = 1; /* idle until the link is back */
	th_waitfor("listening", 120);
	TH_CHECK(th_cli_connect(&a, PORT, 0) == 0);
	TH_CHECK(th_cli_connect(&b, PORT, 0) == 0);
	th_cli_pump(&a);
	th_run_for(a.loop, 2.0);
	TH_CHECK(a.echoed > 0 && a.bad == 0);

	t_cut = th_hostreq_loop(a.loop, "link", 2, "off");
	/* both loops must run: A and B are on separate ctxs */
	while (th_now() - t_cut < 3.0) {
		th_run_for(a.loop, 0.05);
		th_run_for(b.loop, 0.05);
	}
	t_on = th_hostreq("link", 2, "on");
	printf("# link of host 2 was off for %.2f s\n", t_on - t_cut);
	ea = a.echoed;
	eb = b.echoed;
	/* then B sends too: does it still work? */
	b.total = b.echoed + 20;
	b.stop = 0;
	th_cli_pump(&b);
	while (th_now() - t_on < 15.0) {
		th_run_for(a.loop, 0.05);
		th_run_for(b.loop, 0.05);
	}
	a.stop = 1;
	report("A (streaming)", &a, t_cut, ea);
	report("B (idle)", &b, t_cut, eb);
	if (!a.closes)
		TH_CHECK(a.echoed > ea + 10);
	if (!b.closes)
		TH_CHECK(b.echoed == b.total);
	/* drain A, then close what survived */
	a.total = a.sent;
	TH_CHECK(th_run_until(a.loop, th_cli_all_echoed, &a, 30) == 0);
	if (a.conn) {
		TH_CHECK(evr_conn_close(a.conn, 0) == 0);
		TH_CHECK(th_run_until(a.loop, th_cli_closed_p, &a, 30) == 0);
	}
	if (b.conn) {
		TH_CHECK(evr_conn_close(b.conn, 0) == 0);
		TH_CHECK(th_run_until(b.loop, th_cli_closed_p, &b, 30) == 0);
	}
	th_cli_fini(&a);
	th_cli_fini(&b);

	th_cli_init(&d, &o, 16384, size_of, 50);
	TH_CHECK(th_cli_connect(&d, PORT, 0) == 0);
	th_cli_pump(&d);
	TH_CHECK(th_run_until(d.loop, th_cli_all_echoed, &d, 30) == 0);
	TH_CHECK(d.bad == 0 && d.echoed == 50 && d.sends_ok == 50);
	printf("# a new connection after the cut: 50 echoes verified\n");
	TH_CHECK(evr_conn_close(d.conn, 0) == 0);
	TH_CHECK(th_run_until(d.loop, th_cli_closed_p, &d, 30) == 0);
	th_cli_fini(&d);
	th_mark("done");
	return th_finish(60);
}

static int run_server(void)
{
	struct evr_ctx_opts o;
	struct th_srv s;

	evr_ctx_opts_init(&o);
	o.local_addr = th.self;
	th_srv_start(&s, &o, PORT);
	th_mark("listening");
	th_srv_serve_until(&s, "done", 200);
	printf("# host 2: %d conns, %d closed, %lu messages echoed\n",
	       s.conns, s.closes, s.msgs);
	th_srv_stop(&s);
	return th_finish(0);
}

int main(void)
{
	th_init("t_link", 300);
	return th.id == 1 ? run_client() : run_server();
}
