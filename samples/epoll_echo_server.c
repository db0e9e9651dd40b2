/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * epoll_echo_server: one thread, one plain epoll_wait() loop, serving TCP
 * echo clients and evrdma echo clients side by side.  evrdma is embedded
 * through its three-call contract (evr_ctx_fd, evr_ctx_timeout_ms,
 * evr_ctx_process) on a ctx that has no libev loop of the caller's.
 *
 *   epoll_echo_server [-a ADDR] [-p RDMA_PORT] [-t TCP_PORT] [-n CONNS]
 *                     [-m MODE] [-e]
 *
 * -e registers every fd edge-triggered (EPOLLET), to show that the contract
 * holds there too.  Runs until SIGINT/SIGTERM, or until CONNS evrdma
 * connections have closed.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "echo_common.h"

struct app {
	int ep;		  /* the host loop's epoll fd */
	int tcp_listen;	  /* TCP listening socket */
	int sfd;	  /* signalfd for SIGINT/SIGTERM */
	int evr_fd;	  /* evr_ctx_fd() */
	unsigned et;	  /* EPOLLET or 0 */
	int stop;
	evr_ctx *ctx;
	struct echo_server srv;
	unsigned long tcp_conns, tcp_bytes;
};

static void usage(void)
{
	fprintf(stderr,
		"usage: epoll_echo_server [-a ADDR] [-p RDMA_PORT] "
		"[-t TCP_PORT] [-n CONNS] [-m MODE] [-e]\n"
		"  -a ADDR      local address (default: any)\n"
		"  -p PORT      evrdma port (default 7471)\n"
		"  -t PORT      TCP echo port (default 7472)\n"
		"  -n CONNS     exit after CONNS evrdma connections closed\n"
		"  -m MODE      event | poll | adaptive (default adaptive)\n"
		"  -e           edge-triggered epoll registration\n");
	exit(2);
}

static int watch(struct app *app, int fd, unsigned events)
{
	struct epoll_event ev = {.events = events | app->et, .data.fd = fd};

	return epoll_ctl(app->ep, EPOLL_CTL_ADD, fd, &ev);
}

static void on_done(struct echo_server *srv)
{
	struct app *app = (struct app *)((char *)srv - offsetof(struct app, srv));

	app->stop = 1;
}

static int tcp_listen_on(const char *addr, int port)
{
	struct sockaddr_in6 sa6 = {0};
	struct sockaddr_in sa = {0};
	int fd, one = 1, v6 = addr && strchr(addr, ':');

	fd = socket(v6 ? AF_INET6 : AF_INET,
		    SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (v6) {
		sa6.sin6_family = AF_INET6;
		sa6.sin6_port = htons((uint16_t)port);
		if (inet_pton(AF_INET6, addr, &sa6.sin6_addr) != 1)
			goto err_inval;
		if (bind(fd, (struct sockaddr *)&sa6, sizeof(sa6)) < 0)
			goto err;
	} else {
		sa.sin_family = AF_INET;
		sa.sin_port = htons((uint16_t)port);
		if (addr && inet_pton(AF_INET, addr, &sa.sin_addr) != 1)
			goto err_inval;
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			goto err;
	}
	if (listen(fd, 64) < 0)
		goto err;
	return fd;
err_inval:
	errno = EINVAL;
err:
	close(fd);
	return -errno;
}

/* Echo what a TCP client sent; read until EAGAIN (edge-triggered safe).
 * A slow reader is simply dropped: this is a sample, not a TCP proxy. */
static void tcp_echo(struct app *app, int fd)
{
	char buf[16384];

	for (;;) {
		ssize_t n = read(fd, buf, sizeof(buf)), off = 0;

		if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
			close(fd); /* also leaves the epoll set */
			return;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return; /* EAGAIN: drained */
		}
		while (off < n) {
			ssize_t w = write(fd, buf + off, (size_t)(n - off));

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				close(fd);
				return;
			}
			off += w;
		}
		app->tcp_bytes += (unsigned long)n;
	}
}

static void tcp_accept(struct app *app)
{
	for (;;) {
		int fd = accept4(app->tcp_listen, NULL, NULL,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);

		if (fd < 0)
			return; /* EAGAIN (or a transient error) */
		if (watch(app, fd, EPOLLIN | EPOLLRDHUP) < 0) {
			close(fd);
			continue;
		}
		app->tcp_conns++;
	}
}

int main(int argc, char **argv)
{
	struct app app = {.ep = -1};
	struct evr_ctx_opts o;
	const char *addr = NULL;
	int rport = 7471, tport = 7472, mode = EVR_MODE_ADAPTIVE, opt, rc;
	sigset_t mask;

	while ((opt = getopt(argc, argv, "a:p:t:n:m:eh")) != -1) {
		switch (opt) {
		case 'a':
			addr = optarg;
			break;
		case 'p':
			rport = atoi(optarg);
			break;
		case 't':
			tport = atoi(optarg);
			break;
		case 'n':
			app.srv.max_conns = atoi(optarg);
			break;
		case 'm':
			mode = echo_parse_mode(optarg);
			if (mode < 0)
				usage();
			break;
		case 'e':
			app.et = EPOLLET;
			break;
		default:
			usage();
		}
	}
	if (optind != argc || rport <= 0 || rport > 65535 || tport <= 0 ||
	    tport > 65535)
		usage();
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&mask);
	sigaddset(&mask, SIGINT);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);

	/* evrdma on its private loop (NULL), embedded through one fd */
	evr_ctx_opts_init(&o);
	o.local_addr = addr;
	o.mode = (enum evr_mode)mode;
	rc = evr_ctx_create(&app.ctx, NULL, &o);
	if (rc < 0) {
		fprintf(stderr, "epoll_echo_server: evr_ctx_create: %s\n",
			evr_strerror(rc));
		return 1;
	}
	app.srv.on_done = on_done;
	rc = echo_server_start(&app.srv, app.ctx, addr, (uint16_t)rport);
	if (rc < 0) {
		fprintf(stderr, "epoll_echo_server: evrdma listen: %s\n",
			evr_strerror(rc));
		return 1;
	}
	app.evr_fd = evr_ctx_fd(app.ctx);
	app.tcp_listen = tcp_listen_on(addr, tport);
	app.sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
	app.ep = epoll_create1(EPOLL_CLOEXEC);
	if (app.evr_fd < 0 || app.tcp_listen < 0 || app.sfd < 0 ||
	    app.ep < 0 || watch(&app, app.evr_fd, EPOLLIN) < 0 ||
	    watch(&app, app.tcp_listen, EPOLLIN) < 0 ||
	    watch(&app, app.sfd, EPOLLIN) < 0) {
		fprintf(stderr, "epoll_echo_server: setup failed: %s\n",
			strerror(app.tcp_listen < 0 ? -app.tcp_listen : errno));
		return 1;
	}
	printf("epoll_echo_server: evrdma on %s:%d, TCP on port %d%s\n",
	       addr ? addr : "*", rport, tport,
	       app.et ? " (edge-triggered)" : "");
	fflush(stdout);

	while (!app.stop) {
		struct epoll_event evs[64];
		/* ask right before sleeping, after all our calls into evrdma */
		int tmo = evr_ctx_timeout_ms(app.ctx), n, i;

		n = epoll_wait(app.ep, evs, 64, tmo);
		if (n < 0 && errno != EINTR) {
			perror("epoll_wait");
			break;
		}
		for (i = 0; i < n; i++) {
			int fd = evs[i].data.fd;

			if (fd == app.tcp_listen)
				tcp_accept(&app);
			else if (fd == app.sfd)
				app.stop = 1;
			else if (fd != app.evr_fd)
				tcp_echo(&app, fd);
		}
		/* always: completions, timers and deferred work */
		evr_ctx_process(app.ctx);
	}

	printf("epoll_echo_server: evrdma %llu connections, %llu messages, "
	       "%llu bytes; TCP %lu connections, %lu bytes\n",
	       (unsigned long long)app.srv.conns_closed,
	       (unsigned long long)app.srv.msgs,
	       (unsigned long long)app.srv.bytes, app.tcp_conns, app.tcp_bytes);
	epoll_ctl(app.ep, EPOLL_CTL_DEL, app.evr_fd, NULL);
	echo_server_stop(&app.srv);
	evr_ctx_destroy(app.ctx);
	close(app.ep);
	close(app.tcp_listen);
	close(app.sfd);
	return app.srv.errors ? 1 : 0;
}
