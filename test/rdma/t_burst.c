/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Bursts of connects: many clients connect to one listener at the same
 * moment.
 *
 * test_burst: BURST_CONNS connects are issued at once from BURST_CTXS
 * client ctxs of this process (one loop, the server's ctx on it too).
 * Every one must connect, send one message, get it back byte for byte and
 * close gracefully (on_close 0 at the client, -ESHUTDOWN at the server),
 * within BURST_BOUND_S.  A connect queued behind hundreds of others at
 * the server must not time out: the connect bound measures silence, not
 * the server's queue.  The conns are small (recv_depth 8, sq_depth 16,
 * eager 1 KiB) so that thousands fit in the test guest's memory.  Under
 * valgrind, VG_BURST_CONNS.
 *
 * test_refused: REFUSE_CONNS connects at once to a listener that takes
 * none of them: even ones it rejects with a reason of its own (evr_reject),
 * odd ones its callback leaves unanswered (the library rejects them,
 * "not accepted").  Every client must get -ECONNREFUSED with the reason
 * bytes, promptly (REFUSE_BOUND_S): a refusal, never a timeout.
 *
 * Failures name the count of each status seen.
 */
#include "rt.h"

#include <stdbool.h>

#define BURST_CONNS    1000
#define VG_BURST_CONNS 100 /* under valgrind */
#define BURST_CTXS     4
#define BURST_BOUND_S  120.0
#define REFUSE_CONNS   200
#define REFUSE_BOUND_S 20.0
#define MSG_LEN        64
#define NSTAT          16

/* how many times each status was seen */
struct stats {
	int status[NSTAT];
	unsigned count[NSTAT];
	unsigned n;
};

static void stat_add(struct stats *s, int status)
{
	unsigned i;

	for (i = 0; i < s->n; i++)
		if (s->status[i] == status)
			break;
	if (i == s->n) {
		if (s->n == NSTAT)
			i = NSTAT - 1; /* lumped with the last */
		else
			s->status[s->n++] = status;
	}
	s->count[i]++;
}

static unsigned stat_get(const struct stats *s, int status)
{
	for (unsigned i = 0; i < s->n; i++)
		if (s->status[i] == status)
			return s->count[i];
	return 0;
}

static const char *stat_str(const struct stats *s, char *buf, size_t len)
{
	size_t o = 0;

	buf[0] = 0;
	for (unsigned i = 0; i < s->n && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s%u x %s",
				      i ? ", " : "", s->count[i],
				      s->status[i] ? evr_strerror(s->status[i])
						   : "ok");
	return buf;
}

struct burst;

struct cconn {
	struct burst *b;
	unsigned idx;
	uint8_t msg[MSG_LEN];
	bool done; /* connect failed, or closed */
};

struct sconn {
	struct burst *b;
	uint8_t echo[MSG_LEN];
};

struct burst {
	struct ev_loop *loop;
	evr_ctx *sctx, *cctx[BURST_CTXS];
	evr_listener *l;
	struct cconn *cc;
	unsigned n, done;
	bool refuse;
	struct stats connect, close, srv_connect, srv_close;
	unsigned echoes, bad, sent_err, reasons_ok;
	unsigned srv_accepted, srv_closed, srv_unanswered;
	double t0, t_last_up, t_end;
};

static void cli_fill(struct cconn *cc)
{
	memcpy(cc->msg, &cc->idx, 4);
	rt_fill(cc->msg + 4, MSG_LEN - 4, cc->idx);
}

static void cli_done(struct cconn *cc)
{
	assert_false(cc->done);
	cc->done = true;
	if (++cc->b->done == cc->b->n)
		cc->b->t_end = rt_now();
}

static void cli_sent(evr_conn *c, int status, void *arg)
{
	struct cconn *cc = arg;

	(void)c;
	if (status)
		cc->b->sent_err++;
}

static void cli_connected(evr_conn *c, int status, void *arg)
{
	struct cconn *cc = arg;
	struct burst *b = cc->b;

	stat_add(&b->connect, status);
	if (status < 0) {
		size_t len = 0;
		const void *r = evr_conn_reject_reason(c, &len);
		const char *want =
		    cc->idx % 2 ? "not accepted" : "server full";

		if (b->refuse && status == -ECONNREFUSED && r &&
		    len == strlen(want) && !memcmp(r, want, len))
			b->reasons_ok++;
		cli_done(cc);
		return;
	}
	b->t_last_up = rt_now();
	if (evr_send(c, cc->msg, MSG_LEN, cli_sent, cc))
		b->sent_err++;
}

static void cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct cconn *cc = arg;

	if (len == MSG_LEN && !memcmp(data, cc->msg, MSG_LEN))
		cc->b->echoes++;
	else
		cc->b->bad++;
	evr_conn_close(c, 0);
}

static void cli_closed(evr_conn *c, int status, void *arg)
{
	struct cconn *cc = arg;

	(void)c;
	stat_add(&cc->b->close, status);
	cli_done(cc);
}

static void srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct sconn *sc = arg;

	if (len != MSG_LEN) {
		sc->b->bad++;
		return;
	}
	memcpy(sc->echo, data, len);
	if (evr_send(c, sc->echo, len, NULL, NULL))
		sc->b->sent_err++;
}

static void srv_connected(evr_conn *c, int status, void *arg)
{
	struct sconn *sc = arg;
	struct burst *b = sc->b;

	(void)c;
	stat_add(&b->srv_connect, status);
	if (status < 0) {
		b->srv_closed++;
		free(sc);
	}
}

static void srv_closed(evr_conn *c, int status, void *arg)
{
	struct sconn *sc = arg;

	(void)c;
	stat_add(&sc->b->srv_close, status);
	sc->b->srv_closed++;
	free(sc);
}

static void srv_accept(evr_listener *l, evr_conn_req *req, const void *ud,
		       size_t ulen, void *arg)
{
	struct burst *b = arg;
	struct evr_conn_opts o;
	struct sconn *sc;
	uint32_t idx = 0;
	int rc;

	(void)l;
	if (ulen == 4)
		memcpy(&idx, ud, 4);
	if (b->refuse) {
		if (idx % 2 == 0)
			assert_int_equal(evr_reject(req, "server full", 11), 0);
		else
			b->srv_unanswered++; /* the library rejects it */
		return;
	}
	sc = calloc(1, sizeof(*sc));
	assert_non_null(sc);
	sc->b = b;
	evr_conn_opts_init(&o);
	o.on_connect = srv_connected;
	o.on_recv = srv_recv;
	o.on_close = srv_closed;
	o.arg = sc;
	rc = evr_accept(req, &o, NULL);
	if (rc) { /* counted: the failure message names it */
		stat_add(&b->srv_connect, rc);
		free(sc);
		return;
	}
	b->srv_accepted++;
}

static void small_opts(struct evr_ctx_opts *o)
{
	rt_ctx_opts(o);
	o->recv_depth = 8;
	o->sq_depth = 16;
	o->eager_size = 1024;
}

static void burst_init(struct burst *b, unsigned n, bool refuse)
{
	struct evr_ctx_opts o;
	unsigned i;

	memset(b, 0, sizeof(*b));
	b->loop = ev_loop_new(EVFLAG_AUTO);
	b->n = n;
	b->refuse = refuse;
	small_opts(&o);
	assert_int_equal(evr_ctx_create(&b->sctx, b->loop, &o), 0);
	for (i = 0; i < BURST_CTXS; i++)
		assert_int_equal(evr_ctx_create(&b->cctx[i], b->loop, &o), 0);
	/* backlog 0: the default, which must take a burst */
	assert_int_equal(
	    evr_listen(b->sctx, rt_addr(), 0, 0, srv_accept, b, &b->l), 0);
	b->cc = calloc(n, sizeof(*b->cc));
	assert_non_null(b->cc);
}

static void burst_fini(struct burst *b)
{
	evr_listener_close(b->l);
	for (unsigned i = 0; i < BURST_CTXS; i++)
		evr_ctx_destroy(b->cctx[i]);
	evr_ctx_destroy(b->sctx);
	ev_loop_destroy(b->loop);
	free(b->cc);
}

/* Issue every connect at once, round robin over the client ctxs. */
static void burst_start(struct burst *b)
{
	uint16_t port = evr_listener_port(b->l);
	unsigned i;

	b->t0 = rt_now();
	for (i = 0; i < b->n; i++) {
		struct cconn *cc = &b->cc[i];
		struct evr_conn_opts o;

		cc->b = b;
		cc->idx = i;
		cli_fill(cc);
		evr_conn_opts_init(&o);
		o.on_connect = cli_connected;
		o.on_recv = cli_recv;
		o.on_close = cli_closed;
		o.arg = cc;
		o.user_data = &cc->idx;
		o.user_len = 4;
		assert_int_equal(evr_connect(b->cctx[i % BURST_CTXS], rt_addr(),
					     port, &o, NULL),
				 0);
	}
}

static int all_done(void *arg)
{
	struct burst *b = arg;

	return b->done == b->n && b->srv_closed == b->srv_accepted;
}

static void report(const struct burst *b, const char *what)
{
	char c1[256], c2[256], s1[256], s2[256];

	printf("# %s: %u connects in %.2f s (last up at %.2f s): client "
	       "connect [%s], close [%s]; server accepted %u, connect [%s], "
	       "close [%s]; %u echoes, %u bad, %u send errors\n",
	       what, b->n, (b->done == b->n ? b->t_end : rt_now()) - b->t0,
	       b->t_last_up ? b->t_last_up - b->t0 : 0.0,
	       stat_str(&b->connect, c1, sizeof(c1)),
	       stat_str(&b->close, c2, sizeof(c2)), b->srv_accepted,
	       stat_str(&b->srv_connect, s1, sizeof(s1)),
	       stat_str(&b->srv_close, s2, sizeof(s2)), b->echoes, b->bad,
	       b->sent_err);
}

static void test_burst(void **state)
{
	struct burst b;
	double bound = BURST_BOUND_S * rt_timeout_scale();
	int rc;

	(void)state;
	burst_init(&b, rt_on_valgrind() ? VG_BURST_CONNS : BURST_CONNS, false);
	burst_start(&b);
	rc = rt_run_until(b.loop, all_done, &b, bound);
	report(&b, "burst");
	if (rc)
		fail_msg("burst of %u: not over after %.0f s (%u done)", b.n,
			 bound, b.done);
	if (stat_get(&b.connect, 0) != b.n || stat_get(&b.close, 0) != b.n ||
	    stat_get(&b.srv_close, -ESHUTDOWN) != b.n || b.echoes != b.n ||
	    b.bad || b.sent_err) {
		char c1[256], c2[256];

		char s1[256];

		fail_msg("burst of %u: client connects [%s], closes [%s], "
			 "%u echoes (%u bad); server accepts and connects "
			 "[%s]; every one must connect, echo and close with 0",
			 b.n, stat_str(&b.connect, c1, sizeof(c1)),
			 stat_str(&b.close, c2, sizeof(c2)), b.echoes, b.bad,
			 stat_str(&b.srv_connect, s1, sizeof(s1)));
	}
	assert_int_equal(b.srv_accepted, b.n);
	burst_fini(&b);
}

static void test_refused(void **state)
{
	struct burst b;
	double bound = REFUSE_BOUND_S * rt_timeout_scale();
	int rc;

	(void)state;
	burst_init(&b, REFUSE_CONNS, true);
	burst_start(&b);
	rc = rt_run_until(b.loop, all_done, &b, bound + 30);
	report(&b, "refused");
	if (rc)
		fail_msg("refused burst of %u: not over after %.0f s (%u "
			 "done)",
			 b.n, bound + 30, b.done);
	if (stat_get(&b.connect, -ECONNREFUSED) != b.n) {
		char c1[256];

		fail_msg("refused burst of %u: client connects [%s]; every "
			 "one must be refused (-ECONNREFUSED)",
			 b.n, stat_str(&b.connect, c1, sizeof(c1)));
	}
	if (b.t_end - b.t0 > bound)
		fail_msg("refused burst of %u: refusals took %.2f s (bound "
			 "%.0f s): refusals must be prompt",
			 b.n, b.t_end - b.t0, bound);
	assert_int_equal(b.reasons_ok, b.n);
	assert_int_equal(b.srv_unanswered, b.n / 2);
	assert_int_equal(b.srv_accepted, 0);
	burst_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_burst),
	};

	rt_init(600);
	return cmocka_run_group_tests_name("rdma_burst", tests, NULL, NULL);
}
