/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Echo across two hosts: host 1 sends messages of eager and rendezvous
 * sizes (0 B to 4 MiB, around the 8 KiB eager limit) to an echo server on
 * host 2 over the emulated link, and checks every echo's length and bytes,
 * its order, and that every send callback fires exactly once with 0.
 */
#include "th.h"

#define PORT 7481

static const size_t sizes[] = {0,    1,	   64,	    4096,  8191,
			       8192, 8193, 65536, 1 << 20, 4 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))
#define ROUNDS 2

static size_t size_of(uint32_t seq)
{
	return sizes[seq % NSIZES];
}

static int run_client(void)
{
	struct evr_ctx_opts o;
	struct th_cli c;
	double t0, t;
	int rc;

	evr_ctx_opts_init(&o);
	o.local_addr = th.self;
	th_cli_init(&c, &o, 4 << 20, size_of, NSIZES * ROUNDS);
	th_waitfor("listening", 120);
	t0 = th_now();
	rc = th_cli_connect(&c, PORT, 0);
	if (rc)
		th_fail("connect: %s", evr_strerror(rc));
	printf("# connected in %.3f s\n", th_now() - t0);
	t0 = th_now();
	th_cli_pump(&c);
	if (th_run_until(c.loop, th_cli_all_echoed, &c, 90))
		th_fail("only %u of %u echoes after 90 s", c.echoed, c.total);
	t = th_now() - t0;
	/* seen under stress (1 run in 8, a hog beside, a receive queue per
	 * conn): every echo in, then the conn ended and the server saw
	 * ECONNRESET; say how it ended, and when */
	if (!c.conn)
		th_fail("the conn ended (%s, %d) %.3f s after the first send, "
			"with %u of %u echoes in and %u sends completed",
			evr_err_name(c.close_status), c.close_status,
			c.t_close - t0, c.echoed, c.total, c.sends_ok);
	TH_CHECK(c.bad == 0);
	TH_CHECK(c.echoed == c.total);
	TH_CHECK(c.sends_ok == c.total);
	th_cli_check_cbs(&c);
	printf("# %u messages (%zu..%zu B), %llu bytes echoed and verified "
	       "in %.2f s (%.1f MB/s each way)\n",
	       c.total, sizes[0], sizes[NSIZES - 1],
	       (unsigned long long)c.bytes, t, c.bytes / t / 1e6);
	TH_CHECK(evr_conn_close(c.conn, 0) == 0);
	TH_CHECK(th_run_until(c.loop, th_cli_closed_p, &c, 20) == 0);
	TH_CHECK(c.close_status == 0);
	th_cli_fini(&c);
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
	th_srv_serve(&s, 1, 140);
	TH_CHECK(s.closes == 1);
	TH_CHECK(s.msgs == NSIZES * ROUNDS);
	th_srv_stop(&s);
	return th_finish(0);
}

int main(void)
{
	/* the library's own account of a conn's end (its debug lines are
	 * few: state changes and failures) */
	setenv("EVR_LOG", "debug", 0);
	th_init("t_echo", 180);
	return th.id == 1 ? run_client() : run_server();
}
