/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Small shared helpers: logging (one function, levels, off by default),
 * error names and texts, non-blocking fds, parsing environment values,
 * and whether the library runs under valgrind's memcheck.
 */
#include "evrdma-int.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef EVR__HAVE_VALGRIND
bool evr__on_memcheck;

/* Once, as the library is loaded (EVR__VG_DEFINED): under valgrind, and
 * its tool is memcheck, whose preload (its malloc) valgrind names in
 * LD_PRELOAD.  Under another tool -- callgrind counting instructions --
 * the data path runs as it does outside valgrind. */
__attribute__((constructor)) static void evr__memcheck_check(void)
{
	const char *pre = getenv("LD_PRELOAD");

	evr__on_memcheck =
	    RUNNING_ON_VALGRIND && pre && strstr(pre, "vgpreload_memcheck");
}
#endif

int evr__log_level_parse(const char *s)
{
	if (!s || !*s)
		return -1;
	if (!strcasecmp(s, "error"))
		return EVR_LOG_ERROR;
	if (!strcasecmp(s, "warn"))
		return EVR_LOG_WARN;
	if (!strcasecmp(s, "info"))
		return EVR_LOG_INFO;
	if (!strcasecmp(s, "debug") || !strcmp(s, "1"))
		return EVR_LOG_DEBUG;
	return EVR_LOG_WARN;
}

void evr__log(const evr_ctx *ctx, enum evr_log_level lvl, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	char line[512];
	va_list ap;
	int env;

	if (ctx && ctx->o.log_fn) {
		if (lvl > ctx->o.log_level)
			return;
	} else {
		/* a ctx read EVR_LOG once, when created; only the option
		 * checks of evr_ctx_create() log before there is one */
		env = ctx ? (int)ctx->tune.log_stderr - 1
			  : evr__log_level_parse(getenv("EVR_LOG"));
		if (env < 0 || (int)lvl > env)
			return;
	}
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (ctx && ctx->o.log_fn)
		ctx->o.log_fn(lvl, line, ctx->o.log_arg);
	else
		fprintf(stderr, "evrdma %s: %s\n", names[lvl], line);
}

int evr__set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

bool evr__uint_parse(const char *s, unsigned *out)
{
	char *end;
	unsigned long v;

	if (!s || !isdigit((unsigned char)*s))
		return false; /* strtoul would take a sign and blanks */
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v > 0xffffffffu)
		return false;
	*out = (unsigned)v;
	return true;
}

/*
 * The C library's own table names every errno (glibc 2.32 and later, as
 * strerrordesc_np below): a table of our own would have to list each code
 * the verbs, rdma_cm and the kernel can hand back, and fell behind the
 * codes the library itself documents (ESHUTDOWN) once already.
 */
const char *evr_err_name(int err)
{
	const char *s;

	if (err == 0)
		return "OK";
	if (err < 0 && err > -4096) {
		s = strerrorname_np(-err);
		if (s)
			return s;
	}
	return "EUNKNOWN";
}

const char *evr_strerror(int err)
{
	switch (err) {
	case 0:
		return "success";
	case -EPROTO:
		return "protocol error: the peer sent invalid data";
	case -ECANCELED:
		return "operation canceled (flushed or connection closed)";
	case -ECONNREFUSED:
		return "connection refused (no listener, or rejected by the "
		       "peer)";
	case -ENOBUFS:
		return "out of buffers: the send queue is full (wait for the "
		       "drain callback), or the receive pool cannot take "
		       "another connection (evr_ctx_opts.srq_buffers)";
	case -E2BIG:
		return "options struct sets fields this library does not know "
		       "(built against a newer evrdma.h)";
	default:
		/* strerror() is not thread-safe; the table it reads is. */
		if (err < 0 && err > -4096) {
			const char *s = strerrordesc_np(-err);

			if (s)
				return s;
		}
		return "unknown error";
	}
}

const char *evr_mode_str(enum evr_mode mode)
{
	switch (mode) {
	case EVR_MODE_EVENT:
		return "event";
	case EVR_MODE_POLL:
		return "poll";
	case EVR_MODE_ADAPTIVE:
		return "adaptive";
	}
	return "unknown";
}

int evr__addr_copy(const struct sockaddr *sa, struct sockaddr *out,
		   socklen_t *len)
{
	socklen_t n;

	if (!out || !len)
		return -EINVAL;
	if (!sa)
		return -ENOTCONN;
	switch (sa->sa_family) {
	case AF_INET:
		n = sizeof(struct sockaddr_in);
		break;
	case AF_INET6:
		n = sizeof(struct sockaddr_in6);
		break;
	default: /* not resolved yet */
		return -ENOTCONN;
	}
	memcpy(out, sa, EVR__MIN(n, *len));
	*len = n;
	return 0;
}
