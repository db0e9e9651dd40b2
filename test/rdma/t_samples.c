/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * The samples, run as processes the way a user runs them: echo_client
 * against echo_server and against epoll_echo_server, over sizes on both
 * the eager and the rendezvous path and several connections, every echo
 * verified by the client (it exits non-zero on any mismatch); and against
 * mt_echo_server, whose worker threads must each serve some connections;
 * and evrdma-perf's threaded modes (server -T, client -T, --mt).  While an
 * RDMA client floods epoll_echo_server, a TCP client talks to the same
 * single-threaded server and must keep getting its echoes.  rpc_client's
 * workload against rpc_server (it exits non-zero unless every call ended
 * once, as expected: answered and verified, expired, cancelled), and
 * evrdma-perf's call test with cancelled and expiring calls.
 *
 * The programs are found relative to the build directory, where the test
 * harness runs.
 */
#include "rt.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

/* Every process started, so that a failed test leaves none behind. */
static pid_t spawned[16];
static int nspawned;
static FILE *server_out;

static void drain_server_out(void)
{
	char line[256];

	if (!server_out)
		return;
	while (fgets(line, sizeof(line), server_out))
		printf("%s", line);
	fclose(server_out);
	server_out = NULL;
}

static pid_t spawn(char *const argv[])
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		execv(argv[0], argv);
		fprintf(stderr, "exec %s failed\n", argv[0]);
		_exit(127);
	}
	if (nspawned < 16)
		spawned[nspawned++] = pid;
	return pid;
}

/* Start a server and wait until it says it is listening (its first line
 * of output), however slow the machine is.  The rest of its output goes
 * to ours. */
static pid_t spawn_server(char *const argv[])
{
	int fds[2];
	pid_t pid;
	FILE *f;
	char line[256];

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		signal(SIGPIPE, SIG_DFL);
		dup2(fds[1], 1);
		close(fds[0]);
		close(fds[1]);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fds[1]);
	if (nspawned < 16)
		spawned[nspawned++] = pid;
	f = fdopen(fds[0], "r");
	assert_non_null(f);
	assert_non_null(fgets(line, sizeof(line), f)); /* blocks until up */
	printf("%s", line);
	/* the server's later lines are few: let it write them to the pipe,
	 * read them when the test ends (kept open, read in teardown) */
	server_out = f;
	return pid;
}

static int teardown(void **state)
{
	int i;

	(void)state;
	for (i = 0; i < nspawned; i++) {
		if (waitpid(spawned[i], NULL, WNOHANG) == 0) {
			kill(spawned[i], SIGKILL);
			waitpid(spawned[i], NULL, 0);
		}
	}
	nspawned = 0;
	drain_server_out();
	return 0;
}

/* Wait for pid for at most secs; returns its exit status, or -1 (killed). */
static int wait_exit(pid_t pid, int secs)
{
	int st, i;

	for (i = 0; i < secs * 20; i++) {
		if (waitpid(pid, &st, WNOHANG) == pid)
			return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
		usleep(50000);
	}
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	return -1;
}

static char port_str[16], tport_str[16];

static void pick_ports(void)
{
	/* Distinct per test and per run, in 20000-27999: below the ports
	 * rdma_cm hands out itself (ip_local_port_range, from 32768), and
	 * apart from those t_storm (28000-) and t_device (30000-) take. */
	static unsigned next;
	unsigned p = 20000 + (unsigned)(getpid() % 250) * 32 +
		     (next++ % 16) * 2;

	snprintf(port_str, sizeof(port_str), "%u", p);
	snprintf(tport_str, sizeof(tport_str), "%u", p + 1);
}

static int run_client(const char *sizes, const char *n, const char *w,
		      const char *c, const char *mode)
{
	char *argv[] = {"samples/echo_client", "-a", (char *)rt_addr(),
			"-p", port_str, "-s", (char *)sizes, "-n", (char *)n,
			"-w", (char *)w, "-c", (char *)c, "-m", (char *)mode,
			"-t", "100", NULL};

	return wait_exit(spawn(argv), 120);
}

/* A number field of a JSON line of evr_stats_json; -1 when absent. */
static long long json_num(const char *line, const char *key)
{
	char pat[64];
	const char *p;

	snprintf(pat, sizeof(pat), "\"%s\":", key);
	p = strstr(line, pat);
	return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static void test_echo_server(void **state)
{
	/* -S: the stats as JSON every 10 s (a few lines: the pipe holds
	 * them until teardown) and at exit */
	char *srv[] = {"samples/echo_server", "-a", (char *)rt_addr(), "-p",
		       port_str, "-n", "7", "-S", "10", NULL};
	char line[4096], last[4096] = "";
	pid_t s;

	(void)state;
	pick_ports();
	s = spawn_server(srv);
	/* eager, threshold edges and rendezvous; several connections */
	assert_int_equal(run_client("0,1,64,8192,8193,65536,1M", "300", "8",
				    "3", "adaptive"),
			 0);
	assert_int_equal(run_client("64", "2000", "32", "2", "event"), 0);
	assert_int_equal(run_client("4k,200k", "200", "4", "2", "poll"), 0);
	/* the server exits 0 after its 7 connections closed */
	assert_int_equal(wait_exit(s, 30), 0);
	/* its last JSON line, at exit: every message it got echoed */
	while (fgets(line, sizeof(line), server_out)) {
		printf("%s", line);
		if (line[0] == '{')
			snprintf(last, sizeof(last), "%s", line);
	}
	assert_true(last[0] == '{');
	assert_true(json_num(last, "msgs_recv") > 0);
	assert_int_equal(json_num(last, "msgs_sent"),
			 json_num(last, "msgs_recv"));
	assert_int_equal(json_num(last, "bytes_sent"),
			 json_num(last, "bytes_recv"));
}

/* One listener, connections spread over 3 worker threads: echo_client
 * unchanged; every thread must have served some of the 8 connections. */
static void test_mt_echo_server(void **state)
{
	char *srv[] = {"samples/mt_echo_server", "-a", (char *)rt_addr(),
		       "-p", port_str, "-T", "3", "-n", "8", NULL};
	char line[256];
	int busy = 0, t, n;
	pid_t s;

	(void)state;
	pick_ports();
	s = spawn_server(srv);
	assert_int_equal(run_client("0,64,8193,1M", "200", "8", "4",
				    "adaptive"),
			 0);
	assert_int_equal(run_client("64", "1000", "16", "4", "poll"), 0);
	assert_int_equal(wait_exit(s, 30), 0);
	while (fgets(line, sizeof(line), server_out)) {
		printf("%s", line);
		if (sscanf(line, "mt_echo_server: thread %d: %d connections",
			   &t, &n) == 2 && n > 0)
			busy++;
	}
	assert_int_equal(busy, 3);
}

/* Columns of evrdma-perf's last CSV row, found by the header's names:
 * out[i] the value of names[i], NAN when empty or missing; -1 when the
 * command failed or printed no row. */
static int perf_cols(const char *args, const char *const *names, int n,
		     double *out)
{
	char cmd[512], line[1024], head[1024] = "", last[1024] = "";
	char *hp, *lp, *h, *v;
	FILE *f;
	int i, st;

	snprintf(cmd, sizeof(cmd),
		 "timeout %.0f tools/evrdma-perf -c %s -p %s --csv %s",
		 120 * rt_timeout_scale(), rt_addr(), port_str, args);
	fflush(NULL);
	f = popen(cmd, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		snprintf(strncmp(line, "test,", 5) ? last : head, sizeof(last),
			 "%s", line);
	st = pclose(f);
	printf("# %s:\n#   %s#   %s", args, head, last);
	for (i = 0; i < n; i++)
		out[i] = NAN;
	if (st != 0 || !*head || !*last)
		return -1;
	head[strcspn(head, "\n")] = last[strcspn(last, "\n")] = '\0';
	/* fields may be empty: split on each comma, not on runs of them */
	for (hp = head, lp = last; hp && lp;) {
		h = hp;
		v = lp;
		hp = strchr(hp, ',');
		lp = strchr(lp, ',');
		if (hp)
			*hp++ = '\0';
		if (lp)
			*lp++ = '\0';
		for (i = 0; i < n; i++)
			if (!strcmp(h, names[i]) && *v)
				out[i] = strtod(v, NULL);
	}
	return 0;
}

/* evrdma-perf's msgs column of one measurement, or -1 when the command
 * failed or printed no row. */
static long perf_msgs(const char *args)
{
	static const char *const names[] = {"msgs"};
	double v;

	if (perf_cols(args, names, 1, &v) || isnan(v))
		return -1;
	return (long)v;
}

/* evrdma-perf's threads: a server placing connections on 2 workers (-T),
 * a client of 2 threads (-T), sends from another thread (--mt); each run
 * must end well and count every message. */
static void test_perf_threads(void **state)
{
	char *srv[] = {"tools/evrdma-perf", "-s", "-a", (char *)rt_addr(),
		       "-p", port_str, "-T", "2", NULL};
	pid_t s;

	(void)state;
	pick_ports();
	s = spawn_server(srv);
	assert_int_equal(perf_msgs("-t rate -S 64 -n 3000 -C 2 -T 2"), 6000);
	assert_int_equal(perf_msgs("-t rate -S 64 -n 3000 -C 2 --mt"), 6000);
	assert_int_equal(perf_msgs("-t bw -S 64k -n 200 -w 4 --mt"), 200);
	assert_int_equal(perf_msgs("-t lat -S 64 -n 500 -C 3 -T 2"), 1500);
	kill(s, SIGINT);
	assert_int_equal(wait_exit(s, 30), 0);
}

static int run_rpc_client(const char *n, const char *w)
{
	char *argv[] = {"samples/rpc_client", "-a", (char *)rt_addr(), "-p",
			port_str, "-n", (char *)n, "-w", (char *)w, "-t", "100",
			NULL};

	return wait_exit(spawn(argv), 120);
}

/* rpc_client's workload, at three windows, against one rpc_server: every
 * run ends well, and the server logged each connection up and closed. */
static void test_rpc(void **state)
{
	char *srv[] = {"samples/rpc_server", "-a", (char *)rt_addr(), "-p",
		       port_str, NULL};
	char line[256];
	int up = 0, closed = 0;
	pid_t s;

	(void)state;
	pick_ports();
	s = spawn_server(srv);
	assert_int_equal(run_rpc_client("2000", "16"), 0);
	assert_int_equal(run_rpc_client("300", "1"), 0);
	assert_int_equal(run_rpc_client("4000", "64"), 0);
	kill(s, SIGINT);
	assert_int_equal(wait_exit(s, 30), 0);
	while (fgets(line, sizeof(line), server_out)) {
		printf("%s", line);
		if (!strstr(line, "rpc_server: connection from"))
			continue;
		if (strstr(line, " up\n"))
			up++;
		else
			closed++;
	}
	assert_int_equal(up, 3);
	assert_int_equal(closed, 3);
}

/* A server that does not serve calls (echo_server: its conns agree to
 * none): rpc_client fails, exit 1; bad options: exit 2. */
static void test_rpc_client_refused(void **state)
{
	char *srv[] = {"samples/echo_server", "-a", (char *)rt_addr(), "-p",
		       port_str, "-n", "1", NULL};
	char *bad[] = {"samples/rpc_client", "-n", "10", NULL};
	pid_t s;

	(void)state;
	assert_int_equal(wait_exit(spawn(bad), 30), 2);
	pick_ports();
	s = spawn_server(srv);
	assert_int_equal(run_rpc_client("10", "4"), 1);
	assert_int_equal(wait_exit(s, 30), 0);
}

/* evrdma-perf -t rpc: every call counted, with cancelled and expiring
 * calls among them, on eager and rendezvous sizes, with client threads;
 * the server (which held some requests) exits cleanly. */
static void test_perf_rpc(void **state)
{
	char *srv[] = {"tools/evrdma-perf", "-s", "-a", (char *)rt_addr(),
		       "-p", port_str, NULL};
	pid_t s;

	(void)state;
	pick_ports();
	s = spawn_server(srv);
	assert_int_equal(perf_msgs("-t rpc -S 64 -n 2000 -C 2 --rpc-cancel 10 "
				   "--rpc-expire 10"),
			 4000);
	assert_int_equal(perf_msgs("-t rpc -S 64k -n 300 -w 8 --rpc-cancel 20 "
				   "--rpc-expire 20"),
			 300);
	assert_int_equal(perf_msgs("-t rpc -S 4k -n 1000 -C 2 -T 2 -m poll"),
			 2000);
	kill(s, SIGINT);
	assert_int_equal(wait_exit(s, 30), 0);
}

/* evrdma-perf's verbs counters per message (the client's ctx): a small
 * ping-pong posts one send WR a round trip, in one post, with no credit
 * update (the reply carries the credits) and about one completion (the
 * receive; sends are signaled one in 16).  A rendezvous round trip is
 * two WRs, the request carrying the FIN of the echo before it and the
 * read of the echo, and no update, with three completions (the
 * request's send, the echo's receive, the read); with a client that
 * does not offer carried FINs (EVR_FIN=alone), the server agrees to
 * none either, and each FIN is a WR of its own.  With the shared
 * receive queue or a queue per connection (EVR_SRQ=off). */
static void test_perf_counters(void **state)
{
	static const char *const names[] = {
		"msgs", "posts_per_msg", "send_wrs_per_msg", "recv_wrs_per_msg",
		"updates_per_msg", "wcs_per_msg"};
	char *srv[] = {"tools/evrdma-perf", "-s", "-a", (char *)rt_addr(),
		       "-p", port_str, NULL};
	double v[6];
	pid_t s;

	(void)state;
	pick_ports();
	s = spawn_server(srv);
	assert_int_equal(perf_cols("-t lat -S 64 -n 2000 -m poll", names, 6, v),
			 0);
	/* the counts are the ctx's between the clock's start and stop: a
	 * WR or two of the round trips at either end may fall outside */
	assert_true(v[0] == 2000);
	assert_true(v[1] >= 0.995 && v[1] <= 1.01);
	assert_true(v[2] >= 0.995 && v[2] <= 1.01);
	assert_true(v[3] >= 0.99 && v[3] <= 1.1);
	assert_true(v[4] <= 0.005);
	assert_true(v[5] >= 0.995 && v[5] <= 1.2);
	assert_int_equal(perf_cols("-t lat -S 64k -n 200 -m poll", names, 6, v),
			 0);
	assert_true(v[0] == 200);
	assert_true(v[1] >= 1.98 && v[1] <= 2.02);
	assert_true(v[2] >= 1.98 && v[2] <= 2.02);
	assert_true(v[4] <= 0.01);
	assert_true(v[5] >= 2.97 && v[5] <= 3.03);
	assert_int_equal(setenv("EVR_FIN", "alone", 1), 0);
	assert_int_equal(perf_cols("-t lat -S 64k -n 200 -m poll", names, 6, v),
			 0);
	unsetenv("EVR_FIN");
	assert_true(v[0] == 200);
	assert_true(v[2] >= 2.98); /* the FIN, the request, the read */
	/* not measured for connection tests: empty */
	assert_int_equal(perf_cols("-t conn -n 20", names, 6, v), 0);
	assert_true(v[0] == 20);
	assert_true(isnan(v[1]) && isnan(v[2]) && isnan(v[4]));
	kill(s, SIGINT);
	assert_int_equal(wait_exit(s, 30), 0);
}

/* A blocking TCP echo round trip of len bytes; 0 when the echo matches. */
static int tcp_roundtrip(int fd, uint32_t seq, size_t len)
{
	static uint8_t out[8192], in[8192];
	size_t got = 0;

	rt_fill(out, len, seq);
	if (write(fd, out, len) != (ssize_t)len)
		return -1;
	while (got < len) {
		ssize_t n = read(fd, in + got, len - got);

		if (n <= 0)
			return -1;
		got += (size_t)n;
	}
	return memcmp(in, out, len) ? -1 : 0;
}

static int tcp_connect(const char *addr, int port)
{
	struct sockaddr_in sa = {0};
	struct timeval tv = {5, 0};
	int fd = socket(AF_INET, SOCK_STREAM, 0), i;

	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	inet_pton(AF_INET, addr, &sa.sin_addr);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	for (i = 0; i < 50; i++) {
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		usleep(100000);
	}
	close(fd);
	return -1;
}

static void run_epoll_server(int edge)
{
	char *srv[] = {"samples/epoll_echo_server", "-a", (char *)rt_addr(),
		       "-p", port_str, "-t", tport_str, "-n", "3",
		       edge ? "-e" : NULL, NULL};
	char *flood[] = {"samples/echo_client", "-a", (char *)rt_addr(),
			 "-p", port_str, "-s", "64,4k", "-n", "20000", "-w",
			 "64", "-c", "2", "-t", "100", NULL};
	pid_t s, f;
	int fd, i, tcp_ok = 0, st = -1;
	struct timespec t0, t1;

	pick_ports();
	s = spawn_server(srv);
	fd = tcp_connect(rt_addr(), atoi(tport_str));
	assert_true(fd >= 0);
	/* TCP works before any RDMA client shows up */
	assert_int_equal(tcp_roundtrip(fd, 0, 100), 0);

	/* flood it over RDMA; meanwhile the TCP client keeps talking */
	f = spawn(flood);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (i = 1;; i++) {
		assert_int_equal(tcp_roundtrip(fd, (uint32_t)i,
					       (size_t)(1 + i % 8000)),
				 0);
		tcp_ok++;
		if (waitpid(f, &st, WNOHANG) == f)
			break;
		clock_gettime(CLOCK_MONOTONIC, &t1);
		assert_true(t1.tv_sec - t0.tv_sec < 110);
	}
	printf("# %s: %d TCP round trips during the RDMA flood\n",
	       edge ? "edge-triggered" : "level-triggered", tcp_ok);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(tcp_ok > 10);
	close(fd);
	/* one more RDMA client, sizes on both paths */
	assert_int_equal(run_client("1,8193,300k", "100", "4", "1", "event"),
			 0);
	assert_int_equal(wait_exit(s, 30), 0);
}

static void test_epoll_server_lt(void **state)
{
	(void)state;
	run_epoll_server(0);
}

static void test_epoll_server_et(void **state)
{
	(void)state;
	run_epoll_server(1);
}

static void test_client_usage(void **state)
{
	char *bad[] = {"samples/echo_client", "-s", "64", NULL};
	char *bad2[] = {"samples/echo_client", "-a", (char *)rt_addr(), "-s",
			"1x", NULL};

	(void)state;
	/* no address / a bad size: usage, exit 2 */
	assert_int_equal(wait_exit(spawn(bad), 30), 2);
	assert_int_equal(wait_exit(spawn(bad2), 30), 2);
}

static void test_client_no_server(void **state)
{
	(void)state;
	pick_ports();
	/* nothing listens: the client fails (exit 1), in bounded time */
	assert_int_equal(run_client("64", "10", "1", "1", "adaptive"), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_echo_server, teardown),
		cmocka_unit_test_teardown(test_mt_echo_server, teardown),
		cmocka_unit_test_teardown(test_perf_threads, teardown),
		cmocka_unit_test_teardown(test_epoll_server_lt, teardown),
		cmocka_unit_test_teardown(test_epoll_server_et, teardown),
		cmocka_unit_test_teardown(test_client_usage, teardown),
		cmocka_unit_test_teardown(test_client_no_server, teardown),
		cmocka_unit_test_teardown(test_rpc, teardown),
		cmocka_unit_test_teardown(test_rpc_client_refused, teardown),
		cmocka_unit_test_teardown(test_perf_rpc, teardown),
		cmocka_unit_test_teardown(test_perf_counters, teardown),
	};

	rt_init(900);
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests_name("rdma_samples", tests, NULL, NULL);
}
