/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * One-sided operations (lib/rma.c) and registrations (lib/mr.c) on an
 * established connection, against the peer fixture, whose "remote memory"
 * is this program's: the fixture carries out our READs, WRITEs and
 * atomics on it when it completes them.
 *
 * Cases: a write posts one RDMA WRITE at the local and remote offsets with
 * both keys, takes no credit, and completes once; a read brings the
 * peer's bytes; write with immediate data takes a credit and carries the
 * value big endian; fetch-add and compare-swap (old value back, remote
 * word changed) and their alignment rule; bounds of both regions; a
 * registration in use cannot be deregistered; ops on a closing conn are
 * refused and ops in flight when the peer vanishes end once with
 * -ECONNRESET.  Last, registered bytes are counted in the ctx's stats, and
 * a registration refused under a locked-memory limit (no CAP_IPC_LOCK)
 * names the limit and how to raise it, once per ctx.
 */
#include "config.h"

#include <endian.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "peer.h"

struct fix {
	evr_ctx *ctx;
	struct peer p;
	uint8_t local[256];
	uint8_t remote[256]; /* the peer's region */
	evr_mr *mr;
	struct evr_rkey rk;
};

static int setup(void **state)
{
	struct fix *f = calloc(1, sizeof(*f));
	unsigned i;

	assert_non_null(f);
	peer_mocks_reset();
	f->ctx = peer_start(&f->p, NULL);
	peer_connect(&f->p);
	assert_int_equal(evr_mr_reg(f->ctx, f->local, sizeof(f->local),
				    EVR_ACCESS_REMOTE_READ, &f->mr),
			 0);
	for (i = 0; i < sizeof(f->remote); i++)
		f->remote[i] = (uint8_t)(255 - i);
	f->rk.addr = (uintptr_t)f->remote;
	f->rk.len = sizeof(f->remote);
	f->rk.rkey = 0x7777;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;

	peer_stop(&f->p);
	free(f);
	return 0;
}

/* Pump; then the next WR our side posted must be of this opcode. */
static void next_wr(struct peer *p, struct peer_frame *fr, int opcode)
{
	peer_pump(p->ctx);
	assert_true(peer_next(p, fr));
	assert_int_equal(fr->wr.opcode, opcode);
}

static void test_write(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	struct ibv_mr *mr = mock_mr_find(f->local, sizeof(f->local));
	unsigned before = peer_send_credits(p->conn);

	memset(f->local, 0xab, sizeof(f->local));
	assert_ptr_equal(evr_mr_addr(f->mr), f->local);
	assert_int_equal(evr_mr_len(f->mr), sizeof(f->local));
	assert_int_equal(evr_write(p->conn, f->mr, 16, &f->rk, 32, 100,
				   peer_op_cb, peer_op_arg(p, 0)),
			 0);
	next_wr(p, &fr, IBV_WR_RDMA_WRITE);
	assert_int_equal(fr.wr.laddr, (uintptr_t)f->local + 16);
	assert_int_equal(fr.wr.lkey, mr->lkey);
	assert_int_equal(fr.wr.raddr, (uintptr_t)f->remote + 32);
	assert_int_equal(fr.wr.rkey, 0x7777);
	assert_int_equal(fr.wr.len, 100);
	assert_false(peer_next(p, &fr));
	assert_int_equal(peer_send_credits(p->conn), before); /* no receive used */
	assert_int_equal(evr_mr_dereg(f->mr), -EBUSY);
	peer_ack_op(p, 0);
	assert_int_equal(f->remote[31], 255 - 31);
	assert_int_equal(f->remote[32], 0xab);
	assert_int_equal(f->remote[131], 0xab);
	assert_int_equal(f->remote[132], (uint8_t)(255 - 132));
	assert_int_equal(evr_mr_dereg(f->mr), 0);
}

static void test_read(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;

	assert_int_equal(evr_read(p->conn, f->mr, 0, &f->rk, 200, 56,
				  peer_op_cb, peer_op_arg(p, 0)),
			 0);
	next_wr(p, &fr, IBV_WR_RDMA_READ);
	assert_int_equal(fr.wr.raddr, (uintptr_t)f->remote + 200);
	assert_int_equal(fr.wr.len, 56);
	peer_ack_op(p, 0);
	assert_memory_equal(f->local, f->remote + 200, 56);
}

/* Write with immediate data uses one of the peer's receives: a credit. */
static void test_write_imm(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	unsigned before = peer_send_credits(p->conn);

	assert_int_equal(evr_write_imm(p->conn, f->mr, 0, &f->rk, 0, 8,
				       0x01020304, peer_op_cb,
				       peer_op_arg(p, 0)),
			 0);
	next_wr(p, &fr, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_int_equal(fr.wr.imm, htobe32(0x01020304));
	assert_int_equal(peer_send_credits(p->conn), before - 1);
	peer_ack_op(p, 0);
}

static void test_atomics(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct peer_frame fr;
	uint64_t v = 40, got;

	memcpy(f->remote + 8, &v, 8);
	assert_int_equal(evr_fetch_add(p->conn, f->mr, 0, &f->rk, 4, 2,
				       peer_op_cb, peer_op_arg(p, 9)),
			 -EINVAL);
	assert_int_equal(evr_fetch_add(p->conn, f->mr, 3, &f->rk, 8, 2,
				       peer_op_cb, peer_op_arg(p, 9)),
			 -EINVAL);
	assert_int_equal(evr_fetch_add(p->conn, f->mr, 0, &f->rk, 8, 2,
				       peer_op_cb, peer_op_arg(p, 0)),
			 0);
	assert_int_equal(evr_cmp_swap(p->conn, f->mr, 8, &f->rk, 8, 42, 7,
				      peer_op_cb, peer_op_arg(p, 1)),
			 0);
	next_wr(p, &fr, IBV_WR_ATOMIC_FETCH_AND_ADD);
	assert_int_equal(fr.wr.raddr, (uintptr_t)f->remote + 8);
	assert_int_equal(fr.wr.rkey, 0x7777);
	assert_int_equal(fr.wr.compare_add, 2);
	assert_true(peer_next(p, &fr));
	assert_int_equal(fr.wr.opcode, IBV_WR_ATOMIC_CMP_AND_SWP);
	assert_int_equal(fr.wr.compare_add, 42);
	assert_int_equal(fr.wr.swap, 7);
	peer_ack(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_calls[9], 0);
	memcpy(&got, f->local, 8);
	assert_int_equal(got, 40);
	memcpy(&got, f->local + 8, 8);
	assert_int_equal(got, 42);
	memcpy(&got, f->remote + 8, 8);
	assert_int_equal(got, 7);
}

static void test_bounds(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;
	struct evr_rkey rk;

	assert_int_equal(evr_write(p->conn, f->mr, 200, &f->rk, 0, 57, NULL,
				   NULL),
			 -ERANGE);
	assert_int_equal(evr_write(p->conn, f->mr, 257, &f->rk, 0, 0, NULL,
				   NULL),
			 -ERANGE);
	assert_int_equal(evr_read(p->conn, f->mr, 0, &f->rk, 250, 7, NULL,
				  NULL),
			 -ERANGE);
	assert_int_equal(evr_read(p->conn, f->mr, 0, &f->rk, ~0ull, 1, NULL,
				  NULL),
			 -ERANGE);
	assert_int_equal(evr_write(p->conn, NULL, 0, &f->rk, 0, 1, NULL,
				   NULL),
			 -EINVAL);
	evr_mr_rkey(f->mr, &rk);
	assert_int_equal(rk.addr, (uintptr_t)f->local);
	assert_int_equal(rk.len, sizeof(f->local));
	assert_int_equal(rk.rkey, mock_mr_find(f->local, 1)->rkey);
	peer_pump(f->ctx);
	assert_int_equal(peer_unread(p), 0);
}

/* Refused once closing; in flight when the peer vanishes: -ECONNRESET,
 * once, before on_close. */
static void test_ops_and_the_end(void **state)
{
	struct fix *f = *state;
	struct peer *p = &f->p;

	assert_int_equal(evr_write(p->conn, f->mr, 0, &f->rk, 0, 8,
				   peer_op_cb, peer_op_arg(p, 0)),
			 0);
	assert_int_equal(evr_read(p->conn, f->mr, 0, &f->rk, 0, 8, peer_op_cb,
				  peer_op_arg(p, 1)),
			 0);
	peer_pump(f->ctx);
	mock_cm_event(p->id, RDMA_CM_EVENT_DISCONNECTED, 0, NULL, 0);
	peer_pump(f->ctx);
	assert_int_equal(evr_write(p->conn, f->mr, 0, &f->rk, 0, 8,
				   peer_op_cb, peer_op_arg(p, 2)),
			 -EPIPE);
	peer_flush(p);
	peer_pump(f->ctx);
	assert_int_equal(p->op_calls[0], 1);
	assert_int_equal(p->op_status[0], -ECONNRESET);
	assert_int_equal(p->op_calls[1], 1);
	assert_int_equal(p->op_status[1], -ECONNRESET);
	assert_int_equal(p->op_calls[2], 0);
	assert_int_equal(p->closes, 1);
	assert_int_equal(p->ops_at_close, 2);
	assert_int_equal(evr_mr_dereg(f->mr), 0);
}

static struct {
	unsigned errors, warnings;
	char last_error[1024], last_warning[1024];
} logged;

static void log_to(enum evr_log_level lvl, const char *msg, void *arg)
{
	(void)arg;
	if (lvl == EVR_LOG_ERROR) {
		logged.errors++;
		snprintf(logged.last_error, sizeof(logged.last_error), "%s",
			 msg);
	} else if (lvl == EVR_LOG_WARN) {
		logged.warnings++;
		snprintf(logged.last_warning, sizeof(logged.last_warning), "%s",
			 msg);
	}
}

/* Run as a server would: without CAP_IPC_LOCK, under an 8 MiB limit. */
static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	struct rlimit rl;

	assert_int_equal(syscall(SYS_capget, &h, d), 0);
	d[0].effective &= ~(1u << CAP_IPC_LOCK);
	assert_int_equal(syscall(SYS_capset, &h, d), 0);
	assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &rl), 0);
	rl.rlim_cur = 8u << 20;
	if (rl.rlim_max != RLIM_INFINITY && rl.rlim_max < rl.rlim_cur)
		rl.rlim_cur = rl.rlim_max;
	assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &rl), 0);
	assert_int_equal(rl.rlim_cur, 8u << 20);
}

static void test_memlock_explained(void **state)
{
	static uint8_t buf[8192];
	struct evr_ctx_opts o;
	struct evr_stats st;
	uint64_t before;
	struct peer p;
	evr_ctx *ctx;
	evr_mr *mr = NULL;

	(void)state;
	drop_ipc_lock();
	memset(&logged, 0, sizeof(logged));
	peer_mocks_reset();
	peer_ctx_opts(&o);
	o.log_fn = log_to;
	o.log_level = EVR_LOG_WARN;
	ctx = peer_start(&p, &o);

	/* counted while they live */
	assert_int_equal(evr_mr_reg(ctx, buf, sizeof(buf), 0, &mr), 0);
	evr_ctx_stats(ctx, &st);
	assert_int_equal(st.memlock_limit, 8u << 20);
	assert_true(st.reg_bytes >= sizeof(buf));
	assert_true(st.pool_bytes <= st.reg_bytes);
	before = st.reg_bytes - sizeof(buf);
	assert_int_equal(evr_mr_dereg(mr), 0);
	evr_ctx_stats(ctx, &st);
	assert_int_equal(st.reg_bytes, before);

	/* refused for the limit: said once, with the fixes */
	mock_cm.fail_reg_mr = ENOMEM;
	assert_int_equal(evr_mr_reg(ctx, buf, sizeof(buf), 0, &mr), -ENOMEM);
	assert_int_equal(logged.errors, 1);
	assert_non_null(strstr(logged.last_error, "RLIMIT_MEMLOCK) is 8 MiB"));
	assert_non_null(strstr(logged.last_error, "8192 bytes for evr_mr_reg"));
	assert_non_null(strstr(logged.last_error, "ulimit -l"));
	assert_non_null(strstr(logged.last_error, "LimitMEMLOCK="));
	assert_non_null(strstr(logged.last_error, "--ulimit memlock"));
	assert_int_equal(evr_mr_reg(ctx, buf, sizeof(buf), 0, &mr), -ENOMEM);
	assert_int_equal(logged.errors, 1);
	/* another cause is not blamed on the limit */
	mock_cm.fail_reg_mr = EINVAL;
	assert_int_equal(evr_mr_reg(ctx, buf, sizeof(buf), 0, &mr), -EINVAL);
	assert_int_equal(logged.errors, 1);
	assert_int_equal(logged.warnings, 1);
	assert_null(strstr(logged.last_warning, "RLIMIT"));
	evr_ctx_stats(ctx, &st);
	assert_int_equal(st.reg_bytes, before);
	mock_cm.fail_reg_mr = 0;
	peer_stop(&p);
}

/* The eager size left at 0 is planned within the limit: the default
 * 8192 halved while half the limit holds fewer than 2048 buffers, down
 * to 1024; the cache of rendezvous buffers keeps a quarter of the limit.
 * (After test_memlock_explained: runs without CAP_IPC_LOCK, at 8 MiB.) */
static void test_memlock_plans(void **state)
{
	struct evr_ctx_opts o;
	struct peer p;
	evr_ctx *ctx;

	(void)state;
	assert_int_equal(evr__eager_for_limit(UINT64_MAX), 8192);
	assert_int_equal(evr__eager_for_limit(64u << 20), 8192);
	assert_int_equal(evr__eager_for_limit(32u << 20), 8192);
	assert_int_equal(evr__eager_for_limit((32u << 20) - 1), 4096);
	assert_int_equal(evr__eager_for_limit(16u << 20), 4096);
	assert_int_equal(evr__eager_for_limit(8u << 20), 2048);
	assert_int_equal(evr__eager_for_limit(4u << 20), 1024);
	assert_int_equal(evr__eager_for_limit(64u << 10), 1024);

	peer_mocks_reset();
	peer_ctx_opts(&o);
	o.eager_size = 0;
	ctx = peer_start(&p, &o);
	assert_int_equal(ctx->memlock, 8u << 20);
	assert_int_equal(ctx->max_eager, 2048);
	assert_int_equal(ctx->pool.rfree_max, 2u << 20);
	peer_stop(&p);

	/* a size asked for is taken as it is */
	peer_mocks_reset();
	peer_ctx_opts(&o);
	o.eager_size = 8192;
	ctx = peer_start(&p, &o);
	assert_int_equal(ctx->max_eager, 8192);
	peer_stop(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_write, setup, teardown),
		/* test_memlock_explained goes last: it drops CAP_IPC_LOCK */
		cmocka_unit_test_setup_teardown(test_read, setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_imm, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_atomics, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bounds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ops_and_the_end, setup,
						teardown),
		cmocka_unit_test(test_memlock_explained),
		cmocka_unit_test(test_memlock_plans), /* after the drop */
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
