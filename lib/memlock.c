/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Registered memory: every ibv_reg_mr of the library goes through here, so
 * a ctx knows how many bytes it holds registered (evr_ctx_stats), and a
 * registration refused because of the locked-memory limit says so, and how
 * to raise it, once per ctx rather than once per connection or message.
 *
 * Registering pins pages.  A process without CAP_IPC_LOCK may pin at most
 * RLIMIT_MEMLOCK bytes (`ulimit -l`, 8 MiB by default on most systems); the
 * kernel then refuses the registration with ENOMEM, which on its own reads
 * like an out-of-memory condition.
 */
#include "evrdma-int.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

#define CAP_IPC_LOCK_BIT 14

/* Does this process hold CAP_IPC_LOCK (effective)?  /proc says; without
 * it, assume not. */
static bool have_ipc_lock(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	bool yes = false;

	if (!f)
		return false;
	while (fgets(line, sizeof(line), f)) {
		unsigned long long caps;

		if (sscanf(line, "CapEff: %llx", &caps) == 1) {
			yes = (caps >> CAP_IPC_LOCK_BIT) & 1;
			break;
		}
	}
	fclose(f);
	return yes;
}

uint64_t evr__memlock_limit(void)
{
	struct rlimit rl;

	if (have_ipc_lock() || getrlimit(RLIMIT_MEMLOCK, &rl) ||
	    rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return (uint64_t)rl.rlim_cur;
}

uint32_t evr__eager_for_limit(uint64_t limit)
{
	uint64_t e = EVR_EAGER_DEFAULT;

	/* half the limit (the shared receive pool's part, srq.c) should
	 * hold 2048 buffers: under the usual 8 MiB that is 2 KiB each, and
	 * some 250 connections at their first window of 8 */
	while (e > EVR_EAGER_MIN_AUTO && e * 4096 > limit)
		e >>= 1;
	return (uint32_t)e;
}

static void fmt_bytes(char *buf, size_t n, uint64_t v)
{
	if (v >= (1u << 20) && v % (1u << 20) == 0)
		snprintf(buf, n, "%" PRIu64 " MiB", v >> 20);
	else
		snprintf(buf, n, "%" PRIu64 " KiB", (v + 1023) >> 10);
}

/* Why the registration of len bytes may have failed, told once. */
static void explain(struct evr__regacct *a, size_t len, const char *what,
		    int err)
{
	uint64_t lim = evr__memlock_limit();
	char l[32], h[32];

	if (err != ENOMEM && err != EAGAIN && err != EPERM)
		lim = UINT64_MAX; /* not the limit's doing */
	if (lim == UINT64_MAX) {
		EVR_WARN(a->ctx, "registering %zu bytes for %s failed: %s", len,
			 what, strerror(err));
		return;
	}
	if (a->told) {
		EVR_DBG(a->ctx,
			"registering %zu bytes for %s failed: "
			"locked-memory limit",
			len, what);
		return;
	}
	a->told = true;
	fmt_bytes(l, sizeof(l), lim);
	fmt_bytes(h, sizeof(h), a->bytes);
	EVR_ERR(a->ctx,
		"cannot register %zu bytes for %s: the locked-memory limit "
		"(RLIMIT_MEMLOCK) is %s and this ctx holds %s registered. "
		"Raise it: 'ulimit -l unlimited' (or a size in KiB) in the "
		"shell that starts the program, LimitMEMLOCK=infinity in a "
		"systemd unit, '--ulimit memlock=-1' for a container; or give "
		"the process CAP_IPC_LOCK (said once per ctx)",
		len, what, l, h);
}

struct ibv_mr *evr__reg_mr(struct evr__regacct *a, struct ibv_pd *pd,
			   void *addr, size_t len, int access, const char *what)
{
	struct ibv_mr *mr;
	int err;

	errno = 0;
	mr = ibv_reg_mr(pd, addr, len, access);
	if (mr) {
		a->bytes += len;
		return mr;
	}
	err = errno ? errno : ENOMEM;
	explain(a, len, what, err);
	errno = err;
	return NULL;
}

void evr__dereg_mr(struct evr__regacct *a, struct ibv_mr *mr)
{
	a->bytes -= mr->length;
	ibv_dereg_mr(mr);
}
