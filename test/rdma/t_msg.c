/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Two-sided messages end to end on a real verbs stack, through the public
 * API only:
 *
 *  - every size class around the eager/rendezvous threshold, from 0 bytes
 *    to the largest message a peer accepts, echoed back, contents compared,
 *    and the path each took checked in the statistics;
 *  - evr_sendv with several iovecs (empty ones included) on both paths;
 *  - an echo from the held received bytes: without a copy above the
 *    inline size (with headers in immediate data);
 *  - a long random stream in both directions that interleaves eager and
 *    rendezvous messages: each arrives whole, in order, exactly once;
 *  - IPv6 connect;
 *  - a message larger than the peer's maximum is -EMSGSIZE;
 *  - evr_conn_hold keeps a buffer valid past its callback, across more
 *    traffic and past the end of the connection, and evr_msg_release
 *    gives the receive credit back so traffic goes on;
 *  - messages of at most EVR_SEND_COPY_MAX bytes are copied by evr_send
 *    and evr_sendv: their buffers may be reused at once, and a server may
 *    send on_recv's data back without holding it;
 *  - messages without a callback (quiet: their WRs may end a batch
 *    unsignaled) arrive like the others, count as sent, leave fewer than
 *    one signaled WR per message, and a graceful close and an abort both
 *    end them without the flush waiting out its bound, on both driving
 *    paths (the ctx's libev loop, embedded in an epoll loop).
 */
#include "rt_drive.h"

#include <stdbool.h>
#include <sys/uio.h>

#define EAGER_DEFAULT 8192
#define T_MIN(a, b)   ((a) < (b) ? (a) : (b))

/* ------------------------------------------------------------------------ */
/* Sizes: client -> server -> client echo, contents checked both ways.      */

struct sizes_run {
	const size_t *sizes;
	int n;
	int srv_got, cli_got;
	int srv_bad, cli_bad;
	int sent_ok, sent_err;
	uint8_t *echo[16]; /* the server's copies; valid until sent */
	/* hold: the server echoes each message from its own bytes, held
	 * until the echo's callback, which releases it */
	bool hold;
	struct held_echo {
		struct sizes_run *r;
		evr_msg *m;
	} held[16];
};

static int check_sized(const struct sizes_run *r, int seq, const void *data,
		       size_t len)
{
	if (seq >= r->n || len != r->sizes[seq])
		return 1;
	return rt_verify(data, len, (uint32_t)seq) >= 0;
}

static void sizes_sent(evr_conn *c, int status, void *arg)
{
	struct sizes_run *r = arg;

	(void)c;
	if (status == 0)
		r->sent_ok++;
	else
		r->sent_err++;
}

static void sizes_held_sent(evr_conn *c, int status, void *arg)
{
	struct held_echo *h = arg;

	evr_msg_release(h->m);
	h->m = NULL;
	sizes_sent(c, status, h->r);
}

static void sizes_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct sizes_run *r = ((struct rt_side *)arg)->user;
	int seq = r->srv_got++;
	uint8_t *copy;

	r->srv_bad += check_sized(r, seq, data, len);
	assert_true(seq < 16);
	if (r->hold) {
		struct held_echo *h = &r->held[seq];

		h->r = r;
		h->m = evr_conn_hold(c);
		assert_non_null(h->m);
		assert_int_equal(evr_send(c, data, len, sizes_held_sent, h), 0);
		return;
	}
	copy = malloc(len ? len : 1);
	assert_non_null(copy);
	memcpy(copy, data, len);
	r->echo[seq] = copy;
	assert_int_equal(evr_send(c, copy, len, sizes_sent, r), 0);
}

static void sizes_cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct sizes_run *r = ((struct rt_side *)arg)->user;

	(void)c;
	r->cli_bad += check_sized(r, r->cli_got++, data, len);
}

static int sizes_done(void *arg)
{
	struct sizes_run *r = arg;

	return r->cli_got >= r->n && r->sent_ok + r->sent_err >= 2 * r->n;
}

/*
 * Sends sizes[] from the client with the given eager size on both ends
 * (over IPv6 if v6), checks what the server and then the client receive,
 * and that exactly the messages larger than eager went by rendezvous.
 * hold: the server echoes from the received bytes, held; those of the
 * eager ones that do not go inline (above rxe's 128 bytes) go without a
 * copy.  reg: the client sends from one region it registered
 * (evr_mr_reg), and those eager ones go without a copy as well.
 */
static void run_sizes_how(size_t eager, const size_t *sizes, int n, bool v6,
			  bool hold, bool reg)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	struct sizes_run r;
	struct evr_stats st;
	struct rt_pair p;
	evr_listener *l6 = NULL;
	uint8_t *bufs[16], *region = NULL;
	evr_mr *mr = NULL;
	uint64_t total = 0, nrndv = 0, nzc = 0, eager_mid = 0;
	double t0;
	int i;

	assert_true(n <= 16);
	memset(&r, 0, sizeof(r));
	r.sizes = sizes;
	r.n = n;
	r.hold = hold;
	rt_ctx_opts(&o);
	o.eager_size = eager;
	/* all sizes are queued at once: 64 MiB + 1 MiB is beyond the default
	 * send queue limit (t_flow tests that limit) */
	o.send_queue_limit = 256u << 20;
	rt_pair_init(&p, loop, &o);
	p.srv.user = p.cli.user = &r;
	p.srv_opts.on_recv = sizes_srv_recv;
	p.cli_opts.on_recv = sizes_cli_recv;
	if (v6) {
		assert_int_equal(evr_listen(p.ctx, rt_addr6(), 0, 16,
					    rt_pair_accept, &p, &l6),
				 0);
		rt_pair_connect_to(&p, rt_addr6(), evr_listener_port(l6));
	} else {
		rt_pair_connect(&p);
	}

	for (i = 0; i < n; i++) {
		total += sizes[i];
		nrndv += sizes[i] > eager;
		eager_mid += sizes[i] > 128 && sizes[i] <= eager;
	}
	if (reg) { /* the messages one after the other in one region */
		region = malloc(total + 1);
		assert_non_null(region);
		assert_int_equal(evr_mr_reg(p.ctx, region, total + 1,
					    EVR_ACCESS_LOCAL, &mr),
				 0);
	}
	for (i = 0; i < n; i++) {
		bufs[i] = reg ? (i ? bufs[i - 1] + sizes[i - 1] : region)
			      : malloc(sizes[i] ? sizes[i] : 1);
		assert_non_null(bufs[i]);
		rt_fill(bufs[i], sizes[i], (uint32_t)i);
	}
	t0 = rt_now();
	for (i = 0; i < n; i++)
		assert_int_equal(
		    evr_send(p.cli.conn, bufs[i], sizes[i], sizes_sent, &r), 0);
	assert_int_equal(rt_run_until(loop, sizes_done, &r, 60), 0);
	printf("# eager %zu%s: %d sizes up to %zu bytes echoed in %.2f s\n",
	       eager, v6 ? " (IPv6)" : "", n, sizes[n - 1], rt_now() - t0);

	assert_int_equal(r.srv_got, n);
	assert_int_equal(r.cli_got, n);
	assert_int_equal(r.srv_bad, 0);
	assert_int_equal(r.cli_bad, 0);
	assert_int_equal(r.sent_ok, 2 * n);
	assert_int_equal(r.sent_err, 0);
	/* one ctx holds both ends: every count is doubled */
	evr_ctx_stats(p.ctx, &st);
	assert_int_equal(st.msgs_sent, 2 * n);
	assert_int_equal(st.msgs_recv, 2 * n);
	assert_int_equal(st.bytes_sent, 2 * total);
	assert_int_equal(st.bytes_recv, 2 * total);
	assert_int_equal(st.rndv_sent, 2 * nrndv);
	assert_int_equal(st.rndv_recv, 2 * nrndv);
	nzc = (hold ? eager_mid : 0) + (reg ? eager_mid : 0);
	printf("# %llu sent without a copy (%s)\n",
	       (unsigned long long)st.zero_copy_sends,
	       hold ? "echoes from their held receive buffers"
		    : reg ? "from the registered region" : "none expected");
	assert_int_equal(st.zero_copy_sends, nzc);
	if (mr) /* free again: every send's callback has fired */
		assert_int_equal(evr_mr_dereg(mr), 0);

	rt_pair_close(&p);
	assert_int_equal(p.cli.close_status, 0);
	assert_int_equal(p.srv.close_status, -ESHUTDOWN);
	if (l6)
		evr_listener_close(l6);
	rt_pair_fini(&p);
	for (i = 0; i < n; i++) {
		if (!reg)
			free(bufs[i]);
		free(r.echo[i]);
	}
	free(region);
	ev_loop_destroy(loop);
}

static void run_sizes(size_t eager, const size_t *sizes, int n, bool v6)
{
	run_sizes_how(eager, sizes, n, v6, false, false);
}

static void test_sizes_default(void **state)
{
	static const size_t sizes[] = {
	    0,
	    1,
	    63,
	    64,
	    65,
	    EAGER_DEFAULT - 1,
	    EAGER_DEFAULT,
	    EAGER_DEFAULT + 1,
	    1u << 20,
	    64u << 20, /* the default max_msg_size */
	};

	(void)state;
	run_sizes(EAGER_DEFAULT, sizes, sizeof(sizes) / sizeof(sizes[0]),
		  false);
}

/* The threshold follows the eager_size option. */
static void test_sizes_eager_1000(void **state)
{
	static const size_t sizes[] = {
	    0, 1, 63, 64, 65, 999, 1000, 1001, EAGER_DEFAULT, 65536};

	(void)state;
	run_sizes(1000, sizes, sizeof(sizes) / sizeof(sizes[0]), false);
}

/* Sizes around the inline size (128) and an eager size of 1000, for the
 * two zero-copy runs below. */
static const size_t zc_sizes[] = {
    0, 1, 64, 65, 128, 129, 999, 1000, 1001, EAGER_DEFAULT, 65536};

/* The server echoes from the held received bytes: eager echoes above
 * the inline size go from the receive buffers themselves, and every
 * echo arrives whole. */
static void test_sizes_held(void **state)
{
	(void)state;
	run_sizes_how(1000, zc_sizes, sizeof(zc_sizes) / sizeof(zc_sizes[0]),
		      false, true, false);
}

/* The client sends from a region it registered: eager messages above the
 * inline size go from there without a copy, rendezvous ones as ever, and
 * every echo arrives whole; the region is free once the callbacks have
 * fired. */
static void test_sizes_registered(void **state)
{
	(void)state;
	run_sizes_how(1000, zc_sizes, sizeof(zc_sizes) / sizeof(zc_sizes[0]),
		      false, false, true);
}

static void test_ipv6(void **state)
{
	static const size_t sizes[] = {
	    0, 1, 4096, EAGER_DEFAULT, EAGER_DEFAULT + 1, 1u << 20};

	(void)state;
	run_sizes(EAGER_DEFAULT, sizes, sizeof(sizes) / sizeof(sizes[0]), true);
}

/* ------------------------------------------------------------------------ */
/* evr_sendv                                                                */

static const struct vcase {
	const char *name;
	int iovcnt;
	size_t len[6]; /* iovec lengths; past 6 iovecs, all are len[0] */
} vcases[] = {
    {"no iovec", 0, {0}},
    {"one iovec", 1, {777}},
    {"eager, empty iovecs among them", 6, {0, 1, 100, 0, 1000, 3}},
    {"eager, exactly the threshold", 2, {4096, 4096}},
    {"rendezvous, one byte past", 2, {EAGER_DEFAULT, 1}},
    {"rendezvous, empty iovecs among them", 5, {100000, 0, 50000, 7, 200000}},
    {"eager, 64 iovecs", 64, {37}},
    {"rendezvous, 64 iovecs", 64, {5000}},
    {"rendezvous, 1 MiB in 3", 3, {1u << 19, 1u << 18, 1u << 18}},
};
#define NVCASES (int)(sizeof(vcases) / sizeof(vcases[0]))

static size_t vcase_iov_len(const struct vcase *v, int i)
{
	return v->iovcnt > 6 ? v->len[0] : v->len[i];
}

static size_t vcase_len(const struct vcase *v)
{
	size_t n = 0;

	for (int i = 0; i < v->iovcnt; i++)
		n += vcase_iov_len(v, i);
	return n;
}

/* The segments of one vectored message, freed when its send completes. */
struct vmsg {
	int *done;
	int *bad;
	int nseg;
	void *seg[64];
};

struct vrecv {
	int got, bad;
};

static void vmsg_sent(evr_conn *c, int status, void *arg)
{
	struct vmsg *m = arg;

	(void)c;
	if (status)
		(*m->bad)++;
	(*m->done)++;
	for (int i = 0; i < m->nseg; i++)
		free(m->seg[i]);
	free(m);
}

static void vrecv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct vrecv *r = ((struct rt_side *)arg)->user;
	int seq = r->got++;

	(void)c;
	if (seq >= NVCASES || len != vcase_len(&vcases[seq]) ||
	    rt_verify(data, len, (uint32_t)seq) >= 0)
		r->bad++;
}

struct vwait {
	struct vrecv *r;
	int *done;
};

static int vdone(void *arg)
{
	struct vwait *w = arg;

	return w->r->got >= NVCASES && *w->done >= NVCASES;
}

static void test_sendv(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct vrecv r = {0};
	struct iovec iov[64];
	struct evr_stats st;
	struct rt_pair p;
	int done = 0, bad = 0, nrndv = 0;
	struct vwait w = {&r, &done};

	(void)state;
	rt_pair_init(&p, loop, NULL);
	p.srv.user = &r;
	p.srv_opts.on_recv = vrecv;
	rt_pair_connect(&p);

	for (int k = 0; k < NVCASES; k++) {
		const struct vcase *v = &vcases[k];
		struct vmsg *m = calloc(1, sizeof(*m));
		size_t off = 0;

		assert_non_null(m);
		m->done = &done;
		m->bad = &bad;
		m->nseg = v->iovcnt;
		/* each iovec its own buffer, holding its slice of the
		 * message's pattern */
		for (int i = 0; i < v->iovcnt; i++) {
			size_t len = vcase_iov_len(v, i);
			uint8_t *s = malloc(len ? len : 1);

			assert_non_null(s);
			for (size_t j = 0; j < len; j++)
				s[j] = rt_pat((uint32_t)k, off + j);
			off += len;
			m->seg[i] = s;
			iov[i].iov_base = len ? s : NULL;
			iov[i].iov_len = len;
		}
		nrndv += off > EAGER_DEFAULT;
		assert_int_equal(evr_sendv(p.cli.conn, v->iovcnt ? iov : NULL,
					   v->iovcnt, vmsg_sent, m),
				 0);
		/* the iovec array is the caller's again at once */
		memset(iov, 0xa5, sizeof(iov));
	}
	assert_int_equal(rt_run_until(loop, vdone, &w, 60), 0);
	assert_int_equal(r.got, NVCASES);
	assert_int_equal(r.bad, 0);
	assert_int_equal(done, NVCASES);
	assert_int_equal(bad, 0);
	evr_ctx_stats(p.ctx, &st);
	assert_int_equal(st.rndv_sent, nrndv);
	assert_int_equal(st.msgs_sent - st.rndv_sent, NVCASES - nrndv);

	/* invalid vectors are refused synchronously */
	iov[0].iov_base = NULL;
	iov[0].iov_len = 10;
	assert_int_equal(evr_sendv(p.cli.conn, iov, 1, NULL, NULL), -EINVAL);
	assert_int_equal(evr_sendv(p.cli.conn, NULL, 2, NULL, NULL), -EINVAL);
	assert_int_equal(evr_sendv(p.cli.conn, iov, -1, NULL, NULL), -EINVAL);

	rt_pair_close(&p);
	rt_pair_fini(&p);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* A random stream in both directions, eager and rendezvous interleaved.    */

#define RS_MSGS	  10000
#define RS_MAX	  (256u << 10)
#define RS_WINDOW 128
#define RS_PAT	  (RS_MAX * 2)

struct rstream {
	evr_conn **conn;
	uint64_t seed;
	const uint8_t *pat;
	/* sending */
	uint32_t next_send;
	int inflight;
	int cb_ok, cb_err, send_err;
	uint8_t cb_count[RS_MSGS];
	uint32_t nrndv;
	/* receiving (what the peer's stream delivers here) */
	uint32_t next_recv;
	int bad;
	uint64_t bytes;
};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/* Length of message seq: a function of the seed and seq, so the receiver
 * knows what to expect.  85 % eager, 12 % rendezvous spread evenly over
 * the octaves up to RS_MAX (the emulated guest moves only some 20 MB/s),
 * the rest exactly on the edges. */
static size_t rs_len(uint64_t seed, uint32_t seq)
{
	static const size_t edges[] = {4, EAGER_DEFAULT - 1, EAGER_DEFAULT,
				       EAGER_DEFAULT + 1, RS_MAX};
	uint64_t h = mix64(seed ^ seq);
	unsigned pick = (unsigned)(h % 100);
	size_t lo;

	h >>= 8;
	if (pick < 85)
		return 4 + (size_t)(h % (EAGER_DEFAULT - 3));
	if (pick < 97) {
		lo = (size_t)(EAGER_DEFAULT + 1) << (h % 5);
		return lo + (size_t)((h >> 3) % T_MIN(lo, RS_MAX - lo + 1));
	}
	return edges[h % 5];
}

/* Where in the pattern buffer message seq's payload starts. */
static size_t rs_off(uint64_t seed, uint32_t seq)
{
	return (size_t)(mix64(~seed ^ seq) % (RS_PAT - RS_MAX));
}

static void rs_pump(struct rstream *s);

static void rs_sent(evr_conn *c, int status, void *arg)
{
	struct rstream *s = ((struct rt_side *)evr_conn_arg(c))->user;
	uint8_t *buf = arg;
	uint32_t seq;

	memcpy(&seq, buf, 4);
	if (seq < RS_MSGS)
		s->cb_count[seq]++;
	if (status == 0)
		s->cb_ok++;
	else
		s->cb_err++;
	s->inflight--;
	free(buf);
	rs_pump(s);
}

static void rs_pump(struct rstream *s)
{
	while (s->inflight < RS_WINDOW && s->next_send < RS_MSGS && *s->conn) {
		uint32_t seq = s->next_send;
		size_t len = rs_len(s->seed, seq);
		uint8_t *buf = malloc(len);
		int rc;

		assert_non_null(buf);
		memcpy(buf, &seq, 4);
		memcpy(buf + 4, s->pat + rs_off(s->seed, seq), len - 4);
		rc = evr_send(*s->conn, buf, len, rs_sent, buf);
		if (rc) {
			free(buf);
			s->send_err++;
			return;
		}
		s->nrndv += len > EAGER_DEFAULT;
		s->next_send++;
		s->inflight++;
	}
}

/* Messages from the peer's stream (whose seed is `peer`). */
struct rs_side {
	struct rstream out;
	uint64_t peer_seed;
};

static void rs_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rs_side *me = ((struct rt_side *)arg)->user;
	struct rstream *s = &me->out;
	uint32_t seq;

	(void)c;
	if (len < 4) {
		s->bad++;
		return;
	}
	memcpy(&seq, data, 4);
	if (seq != s->next_recv || len != rs_len(me->peer_seed, seq) ||
	    memcmp((const uint8_t *)data + 4,
		   s->pat + rs_off(me->peer_seed, seq), len - 4))
		s->bad++;
	s->next_recv = seq + 1;
	s->bytes += len;
}

static int rs_done(void *arg)
{
	struct rs_side *sides = arg;

	for (int i = 0; i < 2; i++) {
		struct rstream *s = &sides[i].out;

		if (s->next_recv < RS_MSGS || s->cb_ok + s->cb_err < RS_MSGS)
			return 0;
		if (s->bad || s->send_err)
			return 1; /* fail now, not at the timeout */
	}
	return 1;
}

static void test_random_stream(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct rs_side *sides = calloc(2, sizeof(*sides));
	uint8_t *pat = malloc(RS_PAT);
	uint64_t seed = 0x5eed0001;
	const char *env = getenv("EVR_TEST_SEED");
	struct evr_stats st;
	struct rt_pair p;
	double t0, dt;

	(void)state;
	assert_non_null(sides);
	assert_non_null(pat);
	if (env && *env)
		seed = strtoull(env, NULL, 0);
	printf("# seed 0x%llx (set EVR_TEST_SEED to repeat another)\n",
	       (unsigned long long)seed);
	rt_fill(pat, RS_PAT, (uint32_t)seed);
	rt_pair_init(&p, loop, NULL);
	p.cli.user = &sides[0];
	p.srv.user = &sides[1];
	p.cli_opts.on_recv = p.srv_opts.on_recv = rs_recv;
	sides[0].out.conn = &p.cli.conn;
	sides[1].out.conn = &p.srv.conn;
	sides[0].out.seed = sides[1].peer_seed = mix64(seed);
	sides[1].out.seed = sides[0].peer_seed = mix64(seed + 1);
	sides[0].out.pat = sides[1].out.pat = pat;
	rt_pair_connect(&p);

	t0 = rt_now();
	rs_pump(&sides[0].out);
	rs_pump(&sides[1].out);
	assert_int_equal(rt_run_until(loop, rs_done, sides, 80), 0);
	dt = rt_now() - t0;
	evr_ctx_stats(p.ctx, &st);
	printf("# 2 x %d messages (%u + %u rendezvous), %.1f MB, in %.1f s: "
	       "%.0f msgs/s, %.1f MB/s\n",
	       RS_MSGS, sides[0].out.nrndv, sides[1].out.nrndv,
	       (double)(sides[0].out.bytes + sides[1].out.bytes) / 1e6, dt,
	       2 * RS_MSGS / dt,
	       (double)(sides[0].out.bytes + sides[1].out.bytes) / 1e6 / dt);

	for (int i = 0; i < 2; i++) {
		struct rstream *s = &sides[i].out;

		assert_int_equal(s->send_err, 0);
		assert_int_equal(s->bad, 0);
		assert_int_equal(s->next_recv, RS_MSGS);
		assert_int_equal(s->cb_ok, RS_MSGS);
		assert_int_equal(s->cb_err, 0);
		for (uint32_t k = 0; k < RS_MSGS; k++)
			if (s->cb_count[k] != 1)
				fail_msg("side %d message %u: %u callbacks", i,
					 k, s->cb_count[k]);
		/* both paths were really interleaved */
		assert_true(s->nrndv > RS_MSGS / 20);
		assert_true(s->nrndv < RS_MSGS / 4);
	}
	assert_int_equal(st.msgs_recv, 2 * RS_MSGS);
	assert_int_equal(st.rndv_recv, sides[0].out.nrndv + sides[1].out.nrndv);

	rt_pair_close(&p);
	rt_pair_fini(&p);
	free(pat);
	free(sides);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* The peer's maximum message size                                          */

struct sres {
	int fired;
	int status;
};

static void sres_cb(evr_conn *c, int status, void *arg)
{
	struct sres *s = arg;

	(void)c;
	s->fired++;
	s->status = status;
}

struct maxrecv {
	int got, bad;
	size_t expect[4];
	uint32_t seq[4];
};

static void max_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct maxrecv *r = ((struct rt_side *)arg)->user;
	int i = r->got++;

	(void)c;
	if (i >= 4 || len != r->expect[i] ||
	    rt_verify(data, len, r->seq[i]) >= 0)
		r->bad++;
}

struct max_wait {
	struct rt_pair *p;
	struct maxrecv *r;
	struct sres *s;
	int got;
};

static int max_wait_pred(void *arg)
{
	struct max_wait *w = arg;

	return rt_pair_up_pred(w->p) && w->r->got >= w->got && w->s->fired;
}

static void test_peer_max(void **state)
{
	const size_t max = 256u << 10;
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts so;
	struct evr_conn_info info;
	struct maxrecv r = {0};
	struct sres big = {0}, small = {0}, over = {0}, fit = {0};
	struct iovec iov[3];
	struct rt_pair p;
	uint8_t *buf = malloc(2 * max);
	struct max_wait w;
	evr_conn *c = NULL;

	(void)state;
	assert_non_null(buf);
	rt_ctx_opts(&so);
	so.max_msg_size = max;
	rt_pair_init2(&p, loop, &so, NULL);
	p.srv.user = &r;
	p.srv_opts.on_recv = max_recv;

	/* Before the handshake the peer's limit is unknown: a message too
	 * large for it is accepted, then completes with -EMSGSIZE, and the
	 * connection carries on with the next one. */
	rt_fill(buf, 2 * max, 1);
	assert_int_equal(evr_connect(p.cctx, rt_addr(), evr_listener_port(p.l),
				     &p.cli_opts, &c),
			 0);
	assert_int_equal(evr_send(c, buf, 2 * max, sres_cb, &big), 0);
	assert_int_equal(evr_send(c, buf, 1000, sres_cb, &small), 0);
	r.expect[0] = 1000;
	r.seq[0] = 1;
	w = (struct max_wait){&p, &r, &small, 1};
	assert_int_equal(rt_run_until(loop, max_wait_pred, &w, 20), 0);
	assert_int_equal(p.cli.connect_status, 0);
	assert_int_equal(p.srv.connect_status, 0);
	assert_int_equal(big.fired, 1);
	assert_int_equal(big.status, -EMSGSIZE);
	assert_int_equal(small.fired, 1);
	assert_int_equal(small.status, 0);
	assert_int_equal(r.got, 1);

	/* Once connected the limit is known: too large is refused at once,
	 * and its callback never fires; exactly the limit goes through. */
	assert_int_equal(evr_conn_info(c, &info), 0);
	assert_int_equal(info.peer_max_msg, max);
	assert_int_equal(evr_send(c, buf, max + 1, sres_cb, &over), -EMSGSIZE);
	iov[0].iov_base = buf;
	iov[0].iov_len = 1000;
	iov[1].iov_base = buf + 1000;
	iov[1].iov_len = max - 2000;
	iov[2].iov_base = buf + max - 1000;
	iov[2].iov_len = 1001;
	assert_int_equal(evr_sendv(c, iov, 3, sres_cb, &over), -EMSGSIZE);
	assert_int_equal(evr_send(c, buf, 2 * max, sres_cb, &over), -EMSGSIZE);
	assert_int_equal(evr_send(c, buf, max, sres_cb, &fit), 0);
	r.expect[1] = max;
	r.seq[1] = 1;
	w = (struct max_wait){&p, &r, &fit, 2};
	assert_int_equal(rt_run_until(loop, max_wait_pred, &w, 20), 0);
	assert_int_equal(fit.fired, 1);
	assert_int_equal(fit.status, 0);
	assert_int_equal(r.got, 2);
	assert_int_equal(r.bad, 0);
	rt_run_for(loop, 0.2);
	assert_int_equal(over.fired, 0);
	assert_int_equal(p.cli.closes, 0);
	assert_int_equal(p.srv.closes, 0);

	rt_pair_close(&p);
	rt_pair_fini(&p);
	free(buf);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* Holding received messages                                                */

#define HOLD_DEPTH 16 /* receive buffers per conn in this test */
#define HOLD_MAX   64

/* Message seq: every fourth (from 1) by rendezvous, the rest eager. */
static size_t hold_len(uint32_t seq)
{
	return seq % 4 == 1 ? 100000 + seq : 1000 + seq;
}

struct holder {
	bool hold;		 /* hold what arrives */
	evr_msg *held[HOLD_MAX]; /* oldest first */
	uint32_t held_seq[HOLD_MAX];
	int nheld;
	uint32_t next; /* expected sequence number */
	int bad, api_bad;
};

static void hold_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct holder *h = ((struct rt_side *)arg)->user;
	uint32_t seq = h->next++;
	evr_msg *m;

	if (len != hold_len(seq) || rt_verify(data, len, seq) >= 0)
		h->bad++;
	if (!h->hold)
		return;
	m = evr_conn_hold(c);
	/* holding twice gives the same handle, on the same bytes */
	if (!m || evr_conn_hold(c) != m || evr_msg_data(m) != data ||
	    evr_msg_len(m) != len || h->nheld >= HOLD_MAX) {
		h->api_bad++;
		return;
	}
	h->held[h->nheld] = m;
	h->held_seq[h->nheld++] = seq;
}

/* Every held message still has its bytes; returns how many are eager. */
static int hold_check(const struct holder *h)
{
	int eager = 0;

	for (int i = 0; i < h->nheld; i++) {
		const evr_msg *m = h->held[i];
		uint32_t seq = h->held_seq[i];

		assert_int_equal(evr_msg_len(m), hold_len(seq));
		if (rt_verify(evr_msg_data(m), evr_msg_len(m), seq) >= 0)
			fail_msg("held message %u changed", seq);
		eager += hold_len(seq) <= EAGER_DEFAULT;
	}
	return eager;
}

/* Release the i-th oldest held message. */
static void hold_release(struct holder *h, int i)
{
	evr_msg_release(h->held[i]);
	memmove(&h->held[i], &h->held[i + 1],
		sizeof(h->held[0]) * (size_t)(h->nheld - i - 1));
	memmove(&h->held_seq[i], &h->held_seq[i + 1],
		sizeof(h->held_seq[0]) * (size_t)(h->nheld - i - 1));
	h->nheld--;
}

struct hold_send {
	uint8_t *bufs[HOLD_MAX * 2];
	uint32_t next;
	int ok, err;
};

static void hold_sent(evr_conn *c, int status, void *arg)
{
	struct hold_send *s = arg;

	(void)c;
	if (status == 0)
		s->ok++;
	else
		s->err++;
}

static void hold_submit(evr_conn *c, struct hold_send *s, int n)
{
	for (int i = 0; i < n; i++) {
		uint32_t seq = s->next++;
		size_t len = hold_len(seq);

		assert_true(seq < HOLD_MAX * 2);
		s->bufs[seq] = malloc(len);
		assert_non_null(s->bufs[seq]);
		rt_fill(s->bufs[seq], len, seq);
		assert_int_equal(evr_send(c, s->bufs[seq], len, hold_sent, s),
				 0);
	}
}

/* Run until the receiver has seen `n` messages in all. */
struct hold_wait {
	struct holder *h;
	uint32_t n;
};

static int hold_got(void *arg)
{
	struct hold_wait *w = arg;

	return w->h->next >= w->n;
}

/* Run until nothing arrives for a second; returns what has arrived. */
static uint32_t hold_settle(struct ev_loop *loop, struct holder *h)
{
	uint32_t prev;

	do {
		prev = h->next;
		rt_run_for(loop, 1.0);
	} while (h->next != prev);
	return h->next;
}

static void test_hold(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	struct evr_ctx_opts o;
	struct holder h;
	struct hold_send s;
	struct hold_wait w = {&h, 0};
	struct rt_pair p;
	uint32_t got;
	int eager;

	(void)state;
	memset(&h, 0, sizeof(h));
	memset(&s, 0, sizeof(s));
	rt_ctx_opts(&o);
	o.recv_depth = HOLD_DEPTH;
	rt_pair_init(&p, loop, &o);
	p.srv.user = &h;
	p.srv_opts.on_recv = hold_recv;
	rt_pair_connect(&p);
	/* not inside on_recv: nothing to hold */
	assert_null(evr_conn_hold(p.srv.conn));
	evr_msg_release(NULL);

	/* 1. Hold everything: the sender runs out of credits once the
	 * receiver holds (about) all of its eager receive buffers; the
	 * rendezvous ones do not pin a receive buffer. */
	h.hold = true;
	hold_submit(p.cli.conn, &s, 40);
	got = hold_settle(loop, &h);
	eager = hold_check(&h);
	printf("# holding: %u of 40 arrived (%d eager), then the sender "
	       "stalled\n",
	       got, eager);
	assert_true(got > 0 && got < 40);
	assert_true(eager <= HOLD_DEPTH && eager >= HOLD_DEPTH / 2);
	assert_int_equal(h.nheld, (int)got);
	assert_int_equal(s.ok, (int)got);
	assert_int_equal(h.bad, 0);
	assert_int_equal(h.api_bad, 0);

	/* 2. Releasing one eager message returns its credit: exactly the
	 * traffic it pays for moves on (one more message at least), held
	 * again; the bytes held all along are intact. */
	for (int round = 0; round < 3; round++) {
		int i = 0;

		while (hold_len(h.held_seq[i]) > EAGER_DEFAULT)
			i++;
		hold_release(&h, i);
		w.n = got + 1;
		assert_int_equal(rt_run_until(loop, hold_got, &w, 10), 0);
		got = hold_settle(loop, &h);
		hold_check(&h);
		assert_true(got < 40);
	}

	/* 3. Stop holding and release everything: the rest arrives, and a
	 * second batch flows freely. */
	h.hold = false;
	while (h.nheld)
		hold_release(&h, 0);
	w.n = 40;
	assert_int_equal(rt_run_until(loop, hold_got, &w, 20), 0);
	hold_submit(p.cli.conn, &s, 40);
	w.n = 80;
	assert_int_equal(rt_run_until(loop, hold_got, &w, 20), 0);
	assert_int_equal(h.bad, 0);
	assert_int_equal(h.api_bad, 0);

	/* 4. Held messages outlive their conn (and the close). */
	h.hold = true;
	hold_submit(p.cli.conn, &s, 6);
	w.n = 86;
	assert_int_equal(rt_run_until(loop, hold_got, &w, 20), 0);
	assert_int_equal(h.nheld, 6);
	rt_pair_close(&p);
	assert_int_equal(p.cli.close_status, 0);
	assert_int_equal(p.srv.close_status, -ESHUTDOWN);
	assert_int_equal(hold_check(&h), 4);
	while (h.nheld)
		hold_release(&h, h.nheld - 1);
	assert_int_equal(s.ok, 86);
	assert_int_equal(s.err, 0);
	assert_int_equal(h.next, 86);
	assert_int_equal(h.bad, 0);
	assert_int_equal(h.api_bad, 0);

	rt_pair_fini(&p);
	for (uint32_t i = 0; i < s.next; i++)
		free(s.bufs[i]);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* Copied sends: a message of at most EVR_SEND_COPY_MAX bytes is copied
 * before evr_send / evr_sendv return.  The client sends every message from
 * the same buffers and wipes them as each call returns, all before the
 * loop runs (the flush that builds the WRs comes later); the server sends
 * each message back straight from on_recv's data, without holding it. */

#define CN 300

struct copy_run {
	int srv_got, cli_got, srv_bad, cli_bad, send_err;
};

static size_t copy_len(int seq)
{
	return (size_t)seq % (EVR_SEND_COPY_MAX + 1); /* 0 .. the maximum */
}

static int copy_bad(const void *data, size_t len, int seq)
{
	return seq >= CN || len != copy_len(seq) ||
	       rt_verify(data, len, (uint32_t)seq) >= 0;
}

static void copy_srv_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct copy_run *r = s->user;

	r->srv_bad += copy_bad(data, len, r->srv_got++);
	if (evr_send(c, data, len, NULL, NULL))
		r->send_err++;
}

static void copy_cli_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rt_side *s = arg;
	struct copy_run *r = s->user;

	(void)c;
	r->cli_bad += copy_bad(data, len, r->cli_got++);
}

static int copy_done(void *arg)
{
	const struct copy_run *r = arg;

	return r->cli_got >= CN || r->send_err;
}

static void test_send_copy(void **state)
{
	struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
	uint8_t buf[EVR_SEND_COPY_MAX], b2[EVR_SEND_COPY_MAX];
	struct evr_ctx_opts o;
	struct copy_run r = {0};
	struct rt_pair p;
	int seq;

	(void)state;
	rt_ctx_opts(&o);
	rt_pair_init(&p, loop, &o);
	p.cli.user = p.srv.user = &r;
	p.srv_opts.on_recv = copy_srv_recv;
	p.cli_opts.on_recv = copy_cli_recv;
	rt_pair_connect(&p);
	for (seq = 0; seq < CN; seq++) {
		size_t len = copy_len(seq), h = len / 2;
		uint8_t msg[EVR_SEND_COPY_MAX];
		int rc;

		rt_fill(msg, len, (uint32_t)seq);
		if (seq % 2) { /* two iovecs, the second possibly empty */
			struct iovec iov[2] = {{buf, h}, {b2, len - h}};

			memcpy(buf, msg, h);
			memcpy(b2, msg + h, len - h);
			rc = evr_sendv(p.cli.conn, iov, 2, NULL, NULL);
		} else {
			memcpy(buf, msg, len);
			rc = evr_send(p.cli.conn, buf, len, NULL, NULL);
		}
		assert_int_equal(rc, 0);
		memset(buf, 0xee, sizeof(buf)); /* free again: reused */
		memset(b2, 0xee, sizeof(b2));
	}
	assert_int_equal(rt_run_until(loop, copy_done, &r, 20), 0);
	printf("# %d messages of 0..%d bytes, sent from one reused buffer "
	       "and echoed from on_recv's data: %d bad at the server, %d at "
	       "the client\n",
	       CN, EVR_SEND_COPY_MAX, r.srv_bad, r.cli_bad);
	assert_int_equal(r.send_err, 0);
	assert_int_equal(r.srv_got, CN);
	assert_int_equal(r.cli_got, CN);
	assert_int_equal(r.srv_bad, 0);
	assert_int_equal(r.cli_bad, 0);
	rt_pair_close(&p);
	rt_pair_fini(&p);
	ev_loop_destroy(loop);
}

/* ------------------------------------------------------------------------ */
/* Quiet sends: messages without a callback.  Their WRs may end a batch
 * unsignaled (lib/sq.c), so a ping-pong of them polls no send completion
 * per message; what is left unsignaled at the tail of the SQ must still
 * end when the conn does: with the BYE of a graceful close, or with the
 * marker a flush posts behind it (lib/conn.c seal_sq) -- not by the flush
 * waiting out its time bound, which logs a warning.  The echoes and the
 * pings sent from on_recv go the direct way (lib/msg.c send_direct), WRs
 * without an op, which the same ends must complete.                      */

#define QN   50 /* 3 * 16 + 2: the SQ ends with 2 quiet, unsignaled WRs */
#define QLEN 64

struct quiet_run {
	int srv_got, cli_got, bad, send_err;
	int warns;
	uint8_t out[QN][QLEN], echo[QN][QLEN];
};

static void quiet_log(enum evr_log_level lvl, const char *msg, void *arg)
{
	struct quiet_run *q = arg;

	if (lvl <= EVR_LOG_WARN) {
		q->warns++;
		fprintf(stderr, "    library: %s\n", msg);
	}
}

static void quiet_ping(evr_conn *c, struct quiet_run *q)
{
	uint8_t *m = q->out[q->cli_got];

	rt_fill(m, QLEN, (uint32_t)q->cli_got);
	if (evr_send(c, m, QLEN, NULL, NULL))
		q->send_err++;
}

static void quiet_srv_recv(evr_conn *c, const void *data, size_t len,
			   void *arg)
{
	struct rt_side *s = arg;
	struct quiet_run *q = s->user;

	if (q->srv_got >= QN || len != QLEN) {
		q->bad++;
		return;
	}
	/* the receive buffer is ours only during this callback */
	memcpy(q->echo[q->srv_got], data, len);
	if (evr_send(c, q->echo[q->srv_got], len, NULL, NULL))
		q->send_err++;
	q->srv_got++;
}

static void quiet_cli_recv(evr_conn *c, const void *data, size_t len,
			   void *arg)
{
	struct rt_side *s = arg;
	struct quiet_run *q = s->user;

	if (len != QLEN || rt_verify(data, len, (uint32_t)q->cli_got) >= 0)
		q->bad++;
	if (++q->cli_got < QN)
		quiet_ping(c, q);
}

static int quiet_done(void *arg)
{
	const struct quiet_run *q = arg;

	return q->cli_got >= QN || q->bad || q->send_err;
}

/* Both ends on one ctx, driven by its libev loop or embedded: every
 * count covers both. */
static void quiet_case(enum rt_path path, bool abort_close)
{
	struct quiet_run *q = calloc(1, sizeof(*q));
	struct evr_ctx_opts o;
	struct evr_stats st;
	struct rt_drv d;
	struct rt_pair p;

	assert_non_null(q);
	rt_drv_init(&d, path);
	rt_ctx_opts(&o);
	o.log_fn = quiet_log;
	o.log_arg = q;
	rt_pair_init(&p, rt_drv_loop(&d), &o);
	rt_drv_attach(&d, p.ctx);
	p.srv.user = p.cli.user = q;
	p.srv_opts.on_recv = quiet_srv_recv;
	p.cli_opts.on_recv = quiet_cli_recv;
	rt_drv_pair_connect(&d, &p);

	quiet_ping(p.cli.conn, q);
	assert_int_equal(rt_drv_run_until(&d, quiet_done, q, 30), 0);
	assert_int_equal(q->cli_got, QN);
	assert_int_equal(q->srv_got, QN);
	assert_int_equal(q->bad, 0);
	assert_int_equal(q->send_err, 0);

	/* every message counts as sent once posted; each SQ signals one WR
	 * in 16, plus the ends of batches that are not quiet (credit
	 * updates): fewer than one per message */
	evr_ctx_stats(p.ctx, &st);
	printf("# %s: %llu send WRs, %llu signaled, %llu credit updates\n",
	       rt_path_name(path), (unsigned long long)st.send_wrs,
	       (unsigned long long)st.signaled_wrs,
	       (unsigned long long)st.credit_updates);
	assert_int_equal(st.msgs_sent, 2 * QN);
	assert_int_equal(st.bytes_sent, 2 * QN * QLEN);
	assert_int_equal(st.send_wrs - st.credit_updates, 2 * QN);
	assert_true(st.signaled_wrs <= 2 * (QN / 16) + st.credit_updates);
	/* the replies (all sends but the first ping) go the direct way but
	 * for those the signal interval sends through the queue: at most
	 * one in 16, plus one after each credit update */
	printf("# %s: %llu of %d messages sent the direct way\n",
	       rt_path_name(path), (unsigned long long)st.direct_sends,
	       2 * QN);
	assert_true(st.direct_sends <= 2 * QN - 1);
	assert_true(st.direct_sends + 2 * (QN / 16 + 1) + st.credit_updates >=
		    2 * QN - 1);

	if (abort_close) {
		/* the client's flush seals its quiet tail; the server's
		 * conn fails (-ECONNRESET) and its flush seals its own */
		assert_int_equal(evr_conn_close(p.cli.conn, EVR_CLOSE_ABORT),
				 0);
		assert_int_equal(
		    rt_drv_run_until(&d, rt_pair_closed_pred, &p, 20), 0);
		assert_int_equal(p.cli.closes, 1);
		assert_int_equal(p.srv.closes, 1);
		assert_int_equal(p.cli.close_status, -ECANCELED);
		assert_int_equal(p.srv.close_status, -ECONNRESET);
	} else {
		/* the BYE goes behind the quiet tail and completes it */
		rt_drv_pair_close(&d, &p);
		assert_int_equal(p.cli.close_status, 0);
		assert_int_equal(p.srv.close_status, -ESHUTDOWN);
	}
	/* no flush waited out its bound ("... not flushed after ...") */
	assert_int_equal(q->warns, 0);
	evr_ctx_stats(p.ctx, &st);
	assert_int_equal(st.conns, 0);

	rt_drv_pair_fini(&d, &p);
	rt_drv_fini(&d);
	free(q);
}

static void test_quiet_graceful_libev(void **state)
{
	(void)state;
	quiet_case(RT_LIBEV, false);
}

static void test_quiet_graceful_embed(void **state)
{
	(void)state;
	quiet_case(RT_EMBED, false);
}

static void test_quiet_abort_libev(void **state)
{
	(void)state;
	quiet_case(RT_LIBEV, true);
}

static void test_quiet_abort_embed(void **state)
{
	(void)state;
	quiet_case(RT_EMBED, true);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_sizes_default),
	    cmocka_unit_test(test_sizes_eager_1000),
	    cmocka_unit_test(test_sizes_held),
	    cmocka_unit_test(test_sizes_registered),
	    cmocka_unit_test(test_sendv),
	    cmocka_unit_test(test_random_stream),
	    cmocka_unit_test(test_ipv6),
	    cmocka_unit_test(test_peer_max),
	    cmocka_unit_test(test_hold),
	    cmocka_unit_test(test_send_copy),
	    cmocka_unit_test(test_quiet_graceful_libev),
	    cmocka_unit_test(test_quiet_graceful_embed),
	    cmocka_unit_test(test_quiet_abort_libev),
	    cmocka_unit_test(test_quiet_abort_embed),
	};

	rt_init(170);
	return cmocka_run_group_tests_name("rdma_msg", tests, NULL, NULL);
}
