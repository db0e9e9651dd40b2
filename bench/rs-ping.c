/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * rs-ping: a ping-pong over rsockets (librdmacm's sockets over RDMA),
 * paced or back to back, for the benchmark's comparison of evrdma's
 * ADAPTIVE mode with rsockets' blocking calls (rstream -T b) under the
 * same offered load as `evrdma-perf -t lat --load light`.
 *
 *   rs-ping -s ADDR [-p PORT]
 *   rs-ping -c ADDR [-p PORT] [-S SIZE] [-r RATE] [-D SECONDS] [-n ITERS]
 *
 * The server echoes every SIZE bytes it receives, one connection at a
 * time.  The client sends SIZE bytes and waits for them to come back:
 * RATE times a second (each ping due at start + k / RATE, the wait until
 * then a sleep) for SECONDS, or with -r 0 ITERS times back to back.
 * Both use blocking rsockets calls, which poll the completion queue for a
 * while (rsockets' polling_time, 10 us by default) and then block on its
 * completion channel: rsockets' own spin-then-block.  The client prints
 * one CSV line: size,rate,pings,lat_med_us,lat_p99_us,cpu_pct -- the
 * latency is half the round trip, as perftest and evrdma-perf report it;
 * cpu_pct the client's CPU time per wall second.
 */
#include <errno.h>
#include <stdbool.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <rdma/rsocket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static double mono_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
	       (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static int resolve(const char *host, const char *port, bool passive,
		   struct addrinfo **out)
{
	struct addrinfo hints;
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = passive ? AI_PASSIVE : 0;
	rc = getaddrinfo(host, port, &hints, out);
	if (rc) {
		fprintf(stderr, "rs-ping: %s: %s\n", host, gai_strerror(rc));
		return -1;
	}
	return 0;
}

/* All len bytes, or -1. */
static int xfer(int fd, char *buf, size_t len, bool out)
{
	size_t off = 0;

	while (off < len) {
		ssize_t n = out ? rsend(fd, buf + off, len - off, 0)
				: rrecv(fd, buf + off, len - off, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		off += (size_t)n;
	}
	return 0;
}

static int nodelay(int fd)
{
	int one = 1;

	return rsetsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int serve(struct addrinfo *ai, size_t size)
{
	char *buf = malloc(size);
	int lfd, fd, one = 1;

	lfd = rsocket(ai->ai_family, SOCK_STREAM, 0);
	if (!buf || lfd < 0 ||
	    rsetsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    rbind(lfd, ai->ai_addr, ai->ai_addrlen) || rlisten(lfd, 4)) {
		perror("rs-ping: listen");
		return 1;
	}
	printf("rs-ping: listening\n");
	fflush(stdout);
	for (;;) {
		fd = raccept(lfd, NULL, NULL);
		if (fd < 0) {
			perror("rs-ping: accept");
			return 1;
		}
		nodelay(fd);
		while (xfer(fd, buf, size, false) == 0 &&
		       xfer(fd, buf, size, true) == 0)
			;
		rclose(fd);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int ping(struct addrinfo *ai, size_t size, double rate, double secs,
		long iters)
{
	long cap = rate > 0 ? (long)(rate * secs) + 1 : iters, n = 0;
	double *lat = calloc((size_t)cap, sizeof(*lat));
	char *buf = calloc(1, size);
	double t0, c0, due;
	int fd;

	fd = rsocket(ai->ai_family, SOCK_STREAM, 0);
	if (!lat || !buf || fd < 0 || nodelay(fd) ||
	    rconnect(fd, ai->ai_addr, ai->ai_addrlen)) {
		perror("rs-ping: connect");
		return 1;
	}
	t0 = mono_s();
	c0 = cpu_s();
	while (n < cap) {
		double a;

		if (rate > 0) {
			due = t0 + (double)n / rate;
			a = mono_s();
			if (due > t0 + secs)
				break;
			if (due > a)
				usleep((useconds_t)((due - a) * 1e6));
		}
		a = mono_s();
		if (xfer(fd, buf, size, true) || xfer(fd, buf, size, false)) {
			perror("rs-ping: ping");
			return 1;
		}
		lat[n++] = (mono_s() - a) * 1e6 / 2;
	}
	t0 = mono_s() - t0;
	c0 = cpu_s() - c0;
	rclose(fd);
	if (n == 0) {
		fprintf(stderr, "rs-ping: no ping done\n");
		return 1;
	}
	qsort(lat, (size_t)n, sizeof(*lat), cmp_double);
	printf("size,rate,pings,lat_med_us,lat_p99_us,cpu_pct\n");
	printf("%zu,%g,%ld,%.2f,%.2f,%.2f\n", size, rate, n, lat[n / 2],
	       lat[(long)((double)(n - 1) * 0.99)], 100 * c0 / t0);
	return 0;
}

static void usage(void)
{
	fprintf(stderr, "usage: rs-ping -s ADDR [-p PORT] [-S SIZE]\n"
			"       rs-ping -c ADDR [-p PORT] [-S SIZE] [-r RATE] "
			"[-D SECONDS] [-n ITERS]\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *srv = NULL, *cli = NULL, *port = "7480";
	double rate = 200, secs = 5;
	long iters = 1000, size = 8;
	struct addrinfo *ai;
	int o;

	while ((o = getopt(argc, argv, "s:c:p:S:r:D:n:")) != -1) {
		switch (o) {
		case 's': srv = optarg; break;
		case 'c': cli = optarg; break;
		case 'p': port = optarg; break;
		case 'S': size = atol(optarg); break;
		case 'r': rate = atof(optarg); break;
		case 'D': secs = atof(optarg); break;
		case 'n': iters = atol(optarg); break;
		default: usage();
		}
	}
	if (!srv == !cli || size < 1 || rate < 0 || secs <= 0 || iters < 1)
		usage();
	if (resolve(srv ? srv : cli, port, srv != NULL, &ai))
		return 1;
	if (srv)
		return serve(ai, (size_t)size);
	return ping(ai, (size_t)size, rate, secs, iters);
}
