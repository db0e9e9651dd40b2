/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Soak: a long mixed stream over four connections while the completion
 * mode is switched under it, on a real verbs stack, public API only.
 *
 * Each connection carries one stream in each direction (eight streams).
 * Every message starts with a header -- stream id, sequence number, total
 * length and an FNV-1a checksum of the rest of the message -- and its
 * length is drawn at random: mostly small eager messages, a few percent
 * rendezvous ones up to 256 KiB.  Messages go out four ways: evr_send from
 * a copy, evr_sendv gathering a header and two slices of a shared pattern,
 * evr_send of a malloc'ed buffer the library registers itself, and
 * evr_send from a region registered with evr_mr_reg.  A few are in flight
 * per stream, and in bursts more than the peer has receive buffers for.
 * Receivers hold a few messages (evr_conn_hold) and release them later,
 * checking them again.  Client and server have a ctx each; a timer cycles
 * both through EVENT, POLL and ADAPTIVE every few ms, out of phase.
 *
 * Asserted: nothing lost, duplicated, reordered or corrupted; every send
 * callback fires exactly once, with 0; the statistics agree with what the
 * test sent.  Totals are printed at the end.
 *
 *   EVR_SOAK_MSGS  messages in all (default 1000000)
 *   EVR_TEST_SEED  seed of the sizes and the pattern
 */
#include "rt.h"

#include <stdbool.h>
#include <sys/uio.h>

#define SOAK_CONNS    4
#define SOAK_STREAMS  (2 * SOAK_CONNS)
#define SOAK_DEFAULT  1000000u
#define SOAK_WINDOW   4		     /* messages in flight per stream... */
#define SOAK_BURST    96	     /* ...but this many in one phase */
#define SOAK_PHASE    2048	     /* messages per phase */
#define SOAK_EAGER    8192	     /* the default eager size */
#define SOAK_MAX      (256u << 10)   /* largest message */
#define SOAK_PAT      (2 * SOAK_MAX) /* the shared pattern */
#define SOAK_HDR      16	     /* stream, seq, len, sum */
#define SOAK_RSLOTS   4		     /* registered buffers per stream */
#define SOAK_MAX_HELD 8		     /* held messages per stream */
#define SOAK_SWITCH_S 0.003	     /* mode switch period */
#define SOAK_STALL_S  60.0	     /* no progress for this long: fail */
#define SOAK_REPORT_S 30.0	     /* progress line period */
#define SOAK_MIX      0x5350u	     /* "SP": marks the stream id */

/* How a message was sent. */
enum way {
	WAY_COPY,   /* evr_send from the slot's own buffer (eager only) */
	WAY_GATHER, /* evr_sendv: header + two pattern slices */
	WAY_MALLOC, /* evr_send of a malloc'ed buffer (rendezvous only) */
	WAY_MR,	    /* evr_send from a registered region (rendezvous only) */
	WAY_COUNT
};

static const char *const way_str[WAY_COUNT] = {"copy", "gather", "malloc",
					       "registered"};

static uint64_t mix64(uint64_t x)
{
	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

/*
 * The checksum: FNV-1a taken over 64-bit little-endian words rather than
 * bytes (the last word zero-padded), eight times fewer multiplications
 * than the bytewise hash -- the emulated guest is slow at them.  It
 * streams, so a message gathered from several slices hashes the same as
 * the contiguous copy the receiver gets.
 */
struct sum {
	uint64_t h;
	uint8_t tail[8];
	unsigned ntail;
};

#define FNV64_INIT  0xcbf29ce484222325ull
#define FNV64_PRIME 0x100000001b3ull

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static void sum_init(struct sum *s)
{
	s->h = FNV64_INIT;
	s->ntail = 0;
}

static void sum_add(struct sum *s, const void *data, size_t len)
{
	const uint8_t *p = data;

	while (s->ntail && len) {
		s->tail[s->ntail++] = *p++;
		len--;
		if (s->ntail == 8) {
			s->h = (s->h ^ le64(s->tail)) * FNV64_PRIME;
			s->ntail = 0;
		}
	}
	if (s->ntail)
		return; /* all of it went into the tail */
	for (; len >= 8; p += 8, len -= 8)
		s->h = (s->h ^ le64(p)) * FNV64_PRIME;
	memcpy(s->tail, p, len);
	s->ntail = (unsigned)len;
}

static uint32_t sum_end(struct sum *s)
{
	if (s->ntail) {
		memset(s->tail + s->ntail, 0, 8 - s->ntail);
		s->h = (s->h ^ le64(s->tail)) * FNV64_PRIME;
	}
	return (uint32_t)(s->h ^ s->h >> 32);
}

static void put32(uint8_t *p, uint32_t v)
{
	memcpy(p, &v, 4);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return v;
}

/*
 * Total length (header included) of message seq: 97 % eager -- most of
 * them under 256 bytes, some up to 2 KiB, a few up to the limit -- and 3 %
 * rendezvous spread evenly over the octaves up to SOAK_MAX (the emulated
 * guest moves some 30 MB/s).  A few land exactly on the threshold.
 */
static size_t soak_len(uint64_t seed, uint32_t seq)
{
	uint64_t h = mix64(seed ^ ((uint64_t)seq << 16));
	unsigned pick = (unsigned)(h % 1000);
	size_t lo;

	h >>= 10;
	if (pick < 700)
		return SOAK_HDR + (size_t)(h % 240);
	if (pick < 900)
		return 256 + (size_t)(h % (2048 - 255));
	if (pick < 968)
		return 2048 + (size_t)(h % (SOAK_EAGER - 2047));
	if (pick < 970)
		return h & 1 ? SOAK_EAGER : SOAK_EAGER + 1;
	lo = (size_t)(SOAK_EAGER + 1) << (h % 5);
	h >>= 3;
	return lo + (size_t)(h % (lo < SOAK_MAX - lo ? lo : SOAK_MAX - lo + 1));
}

/* ------------------------------------------------------------------------ */

struct soak;
struct stream;

struct slot {
	struct stream *s;
	uint32_t seq;
	uint32_t len;
	enum way way;
	int rslot;    /* registered buffer in use, or -1 */
	uint8_t *buf; /* malloc'ed message, or NULL */
	uint8_t hdr[SOAK_HDR];
	uint8_t data[SOAK_EAGER];
};

struct held {
	evr_msg *m;
	uint32_t seq;
};

/* One direction of one connection. */
struct stream {
	struct soak *sk;
	uint32_t id;
	uint64_t seed;
	uint32_t total;
	/* sending */
	evr_conn *tx;
	struct slot slots[SOAK_BURST];
	unsigned free_slots[SOAK_BURST];
	unsigned nfree;
	uint32_t next_send;
	uint8_t *cb_count; /* per seq */
	uint32_t cb_ok, cb_err;
	int send_err;
	uint8_t *region; /* SOAK_RSLOTS registered buffers */
	evr_mr *mr;
	unsigned rslot_busy; /* bit mask */
	uint64_t by_way[WAY_COUNT];
	uint64_t nrndv, bytes_sent;
	/* receiving */
	evr_conn *rx;
	uint32_t next_recv;
	uint64_t bytes_recv;
	uint32_t lost, dups, corrupt, held_bad;
	struct held held[SOAK_MAX_HELD];
	unsigned nheld;
	uint64_t holds;
};

/* One end of a connection: what it sends and what it receives. */
struct end {
	struct soak *sk;
	struct stream *out, *in;
	evr_conn *conn;
	int connects, connect_status;
	int closes, close_status;
	int stray; /* receives that belong to no stream */
};

struct soak {
	struct ev_loop *loop;
	evr_ctx *sctx, *cctx;
	evr_listener *l;
	uint8_t *pat;
	struct stream st[SOAK_STREAMS];
	struct end cli[SOAK_CONNS], srv[SOAK_CONNS];
	int accepts, bad_accepts;
	ev_timer switch_w;
	uint64_t set_mode_calls;
	int set_mode_err, mode_mismatch;
	char first_err[160];
};

static void soak_err(struct soak *sk, const char *fmt, ...)
{
	va_list ap;

	if (sk->first_err[0])
		return;
	va_start(ap, fmt);
	vsnprintf(sk->first_err, sizeof(sk->first_err), fmt, ap);
	va_end(ap);
}

/* Where message seq's payload slices start in the pattern. */
static size_t pat_off(uint64_t seed, uint32_t seq, int which)
{
	return (size_t)(mix64(~seed ^ seq ^ ((uint64_t)which << 40)) %
			(SOAK_PAT - SOAK_MAX));
}

/* Write message seq's header into hdr; the checksum covers the first 12
 * header bytes and the payload, given as up to two slices. */
static void make_hdr(uint8_t *hdr, const struct stream *s, uint32_t seq,
		     uint32_t len, const uint8_t *p1, size_t n1,
		     const uint8_t *p2, size_t n2)
{
	struct sum h;

	put32(hdr, SOAK_MIX << 16 | s->id);
	put32(hdr + 4, seq);
	put32(hdr + 8, len);
	sum_init(&h);
	sum_add(&h, hdr, 12);
	sum_add(&h, p1, n1);
	sum_add(&h, p2, n2);
	put32(hdr + 12, sum_end(&h));
}

/* Fill a contiguous message at m (len bytes) with seq's contents. */
static void make_msg(uint8_t *m, const struct stream *s, uint32_t seq,
		     uint32_t len)
{
	size_t n = len - SOAK_HDR;

	memcpy(m + SOAK_HDR, s->sk->pat + pat_off(s->seed, seq, 0), n);
	make_hdr(m, s, seq, len, m + SOAK_HDR, n, NULL, 0);
}

static void stream_pump(struct stream *s);

static void stream_sent(evr_conn *c, int status, void *arg)
{
	struct slot *sl = arg;
	struct stream *s = sl->s;

	(void)c;
	if (sl->seq >= s->total || ++s->cb_count[sl->seq] > 1) {
		/* a second callback: the slot may be in use again */
		soak_err(s->sk, "stream %u seq %u: another send callback",
			 s->id, sl->seq);
		return;
	}
	if (status == 0) {
		s->cb_ok++;
	} else {
		s->cb_err++;
		soak_err(s->sk, "stream %u seq %u: send callback %s", s->id,
			 sl->seq, evr_err_name(status));
	}
	free(sl->buf);
	sl->buf = NULL;
	if (sl->rslot >= 0)
		s->rslot_busy &= ~(1u << sl->rslot);
	s->free_slots[s->nfree++] = (unsigned)(sl - s->slots);
	stream_pump(s);
}

/* Submit message seq from slot sl; 0 or evr_send's error. */
static int stream_submit(struct stream *s, struct slot *sl, uint32_t seq)
{
	uint32_t len = (uint32_t)soak_len(s->seed, seq);
	uint64_t h = mix64(s->seed + seq);
	bool rndv = len > SOAK_EAGER;
	size_t n = len - SOAK_HDR;

	sl->seq = seq;
	sl->len = len;
	sl->rslot = -1;
	sl->buf = NULL;
	if (h % 8 == 0)
		sl->way = WAY_GATHER;
	else if (!rndv)
		sl->way = WAY_COPY;
	else
		sl->way = h % 2 ? WAY_MR : WAY_MALLOC;
	if (sl->way == WAY_MR) {
		unsigned i;

		for (i = 0; i < SOAK_RSLOTS; i++)
			if (!(s->rslot_busy & (1u << i)))
				break;
		if (i < SOAK_RSLOTS) {
			sl->rslot = (int)i;
			s->rslot_busy |= 1u << i;
		} else {
			sl->way = WAY_MALLOC;
		}
	}
	s->by_way[sl->way]++;
	s->nrndv += rndv;
	s->bytes_sent += len;

	switch (sl->way) {
	case WAY_GATHER: {
		/* the payload from two places in the pattern */
		size_t n1 = (size_t)(h >> 8) % (n + 1);
		const uint8_t *p1 = s->sk->pat + pat_off(s->seed, seq, 0);
		const uint8_t *p2 = s->sk->pat + pat_off(s->seed, seq, 1);
		struct iovec iov[3] = {
		    {sl->hdr, SOAK_HDR},
		    {(void *)p1, n1},
		    {(void *)p2, n - n1},
		};

		make_hdr(sl->hdr, s, seq, len, p1, n1, p2, n - n1);
		return evr_sendv(s->tx, iov, 3, stream_sent, sl);
	}
	case WAY_COPY:
		make_msg(sl->data, s, seq, len);
		return evr_send(s->tx, sl->data, len, stream_sent, sl);
	case WAY_MALLOC:
		sl->buf = malloc(len);
		assert_non_null(sl->buf);
		make_msg(sl->buf, s, seq, len);
		return evr_send(s->tx, sl->buf, len, stream_sent, sl);
	case WAY_MR:
	default: {
		uint8_t *m = s->region + (size_t)sl->rslot * SOAK_MAX;

		make_msg(m, s, seq, len);
		return evr_send(s->tx, m, len, stream_sent, sl);
	}
	}
}

/*
 * A few messages in flight keep the loop iterations short, so the mode
 * timer fires every few ms; in one phase of four the window opens wider
 * than the peer's receive queue and sends wait for credits.
 */
static unsigned stream_window(const struct stream *s)
{
	return (s->next_send / SOAK_PHASE) % 4 == 3 ? SOAK_BURST : SOAK_WINDOW;
}

static void stream_pump(struct stream *s)
{
	while (SOAK_BURST - s->nfree < stream_window(s) &&
	       s->next_send < s->total && !s->send_err) {
		struct slot *sl = &s->slots[s->free_slots[s->nfree - 1]];
		int rc;

		rc = stream_submit(s, sl, s->next_send);
		if (rc) {
			s->send_err = rc;
			soak_err(s->sk, "stream %u seq %u: evr_send %s", s->id,
				 s->next_send, evr_err_name(rc));
			free(sl->buf);
			sl->buf = NULL;
			return;
		}
		s->nfree--;
		s->next_send++;
	}
}

/* 0 when data is a whole message of stream s with a good checksum;
 * *seq gets the sequence number it claims. */
static int check_msg(const struct stream *s, const uint8_t *data, size_t len,
		     uint32_t *seq)
{
	struct sum h;

	if (len < SOAK_HDR)
		return 1;
	*seq = get32(data + 4);
	if (get32(data) != (SOAK_MIX << 16 | s->id) || get32(data + 8) != len)
		return 1;
	sum_init(&h);
	sum_add(&h, data, 12);
	sum_add(&h, data + SOAK_HDR, len - SOAK_HDR);
	if (sum_end(&h) != get32(data + 12))
		return 1;
	/* the length is also the one the sender drew for seq */
	return *seq >= s->total || soak_len(s->seed, *seq) != len;
}

static void stream_release(struct stream *s)
{
	for (unsigned i = 0; i < s->nheld; i++) {
		evr_msg *m = s->held[i].m;
		uint32_t seq = ~0u;

		if (check_msg(s, evr_msg_data(m), evr_msg_len(m), &seq) ||
		    seq != s->held[i].seq) {
			s->held_bad++;
			soak_err(s->sk,
				 "stream %u seq %u: held message changed",
				 s->id, s->held[i].seq);
		}
		evr_msg_release(m);
	}
	s->nheld = 0;
}

static void end_recv(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct end *e = arg;
	struct stream *s = e->in;
	uint32_t seq = 0;

	if (!s || c != s->rx) {
		e->stray++;
		return;
	}
	if (check_msg(s, data, len, &seq)) {
		s->corrupt++;
		soak_err(s->sk, "stream %u: message %u (%zu bytes) corrupt",
			 s->id, s->next_recv, len);
		s->next_recv++;
		return;
	}
	if (seq < s->next_recv) {
		s->dups++;
		soak_err(s->sk, "stream %u: seq %u again after %u", s->id, seq,
			 s->next_recv - 1);
		return;
	}
	if (seq > s->next_recv) {
		s->lost += seq - s->next_recv;
		soak_err(s->sk, "stream %u: seq %u while expecting %u", s->id,
			 seq, s->next_recv);
	}
	s->next_recv = seq + 1;
	s->bytes_recv += len;
	/* hold about one in 50 for a while */
	if (mix64(s->seed ^ ~(uint64_t)seq) % 50 == 0 &&
	    s->nheld < SOAK_MAX_HELD) {
		evr_msg *m = evr_conn_hold(c);

		if (!m) {
			s->held_bad++;
			soak_err(s->sk, "stream %u seq %u: hold failed", s->id,
				 seq);
			return;
		}
		s->held[s->nheld].m = m;
		s->held[s->nheld++].seq = seq;
		s->holds++;
	}
}

static void end_connect(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	e->connects++;
	e->connect_status = status;
	e->conn = status == 0 ? c : NULL;
}

static void end_close(evr_conn *c, int status, void *arg)
{
	struct end *e = arg;

	(void)c;
	e->closes++;
	e->close_status = status;
	e->conn = NULL;
}

static void end_opts(struct end *e, struct evr_conn_opts *o)
{
	evr_conn_opts_init(o);
	o->on_connect = end_connect;
	o->on_recv = end_recv;
	o->on_close = end_close;
	o->arg = e;
}

static void soak_accept(evr_listener *l, evr_conn_req *req, const void *ud,
			size_t ulen, void *arg)
{
	struct soak *sk = arg;
	struct evr_conn_opts o;
	uint8_t idx;

	(void)l;
	sk->accepts++;
	if (ulen != 1 || (idx = *(const uint8_t *)ud) >= SOAK_CONNS) {
		sk->bad_accepts++;
		evr_reject(req, NULL, 0);
		return;
	}
	end_opts(&sk->srv[idx], &o);
	assert_int_equal(evr_accept(req, &o, &sk->srv[idx].conn), 0);
}

/* Cycle both ctxs through the three modes, out of phase with each other;
 * release what the receivers hold. */
static void soak_switch(struct ev_loop *loop, ev_timer *w, int revents)
{
	static const enum evr_mode cycle[3] = {EVR_MODE_EVENT, EVR_MODE_POLL,
					       EVR_MODE_ADAPTIVE};
	struct soak *sk = w->data;
	evr_ctx *ctxs[2] = {sk->sctx, sk->cctx};

	(void)loop;
	(void)revents;
	for (int i = 0; i < 2; i++) {
		enum evr_mode m = cycle[(sk->set_mode_calls + (unsigned)i) % 3];
		int rc = evr_ctx_set_mode(ctxs[i], m);

		if (rc) {
			sk->set_mode_err++;
			soak_err(sk, "evr_ctx_set_mode: %s", evr_err_name(rc));
		}
		if (m != EVR_MODE_ADAPTIVE && evr_ctx_mode(ctxs[i]) != m)
			sk->mode_mismatch++;
	}
	sk->set_mode_calls++;
	for (int i = 0; i < SOAK_STREAMS; i++)
		stream_release(&sk->st[i]);
}

static int soak_up(void *arg)
{
	struct soak *sk = arg;

	for (int i = 0; i < SOAK_CONNS; i++)
		if (!sk->cli[i].connects || !sk->srv[i].connects)
			return 0;
	return 1;
}

static int soak_closed(void *arg)
{
	struct soak *sk = arg;

	for (int i = 0; i < SOAK_CONNS; i++)
		if (!sk->cli[i].closes || !sk->srv[i].closes)
			return 0;
	return 1;
}

static bool soak_failed(const struct soak *sk)
{
	for (int i = 0; i < SOAK_CONNS; i++)
		if (sk->cli[i].closes || sk->srv[i].closes ||
		    sk->cli[i].stray || sk->srv[i].stray)
			return true;
	return sk->first_err[0] != 0;
}

static bool soak_done(const struct soak *sk)
{
	for (int i = 0; i < SOAK_STREAMS; i++) {
		const struct stream *s = &sk->st[i];

		if (s->next_recv < s->total ||
		    s->cb_ok + s->cb_err < s->total || s->nheld)
			return false;
	}
	return true;
}

/* Messages received and send callbacks fired, in all streams. */
static uint64_t soak_progress(const struct soak *sk, uint64_t *received)
{
	uint64_t n = 0;

	*received = 0;
	for (int i = 0; i < SOAK_STREAMS; i++) {
		*received += sk->st[i].next_recv;
		n += sk->st[i].next_recv + sk->st[i].cb_ok;
	}
	return n;
}

static uint32_t soak_msgs(void)
{
	const char *e = getenv("EVR_SOAK_MSGS");
	unsigned long v;

	if (!e || !*e)
		return SOAK_DEFAULT;
	v = strtoul(e, NULL, 0);
	if (v < SOAK_STREAMS || v > 1000000000ul) {
		fprintf(stderr, "EVR_SOAK_MSGS: %s is out of range\n", e);
		exit(99);
	}
	return (uint32_t)v;
}

static void soak_stats_sum(const struct soak *sk, struct evr_stats *sum)
{
	struct evr_stats a, b;

	evr_ctx_stats(sk->sctx, &a);
	evr_ctx_stats(sk->cctx, &b);
	*sum = a;
	sum->mode_switches += b.mode_switches;
	sum->msgs_sent += b.msgs_sent;
	sum->msgs_recv += b.msgs_recv;
	sum->bytes_sent += b.bytes_sent;
	sum->bytes_recv += b.bytes_recv;
	sum->rndv_sent += b.rndv_sent;
	sum->rndv_recv += b.rndv_recv;
	sum->credit_updates += b.credit_updates;
	sum->wakeups += b.wakeups;
	sum->polls += b.polls;
	sum->completions += b.completions;
}

static void soak_setup(struct soak *sk, uint32_t total, uint64_t seed)
{
	struct evr_ctx_opts o;

	sk->loop = ev_loop_new(EVFLAG_AUTO);
	assert_non_null(sk->loop);
	sk->pat = malloc(SOAK_PAT);
	assert_non_null(sk->pat);
	for (size_t i = 0; i < SOAK_PAT; i += 8) {
		uint64_t x = mix64(seed + i);

		memcpy(sk->pat + i, &x, 8);
	}
	rt_ctx_opts(&o);
	assert_int_equal(evr_ctx_create(&sk->sctx, sk->loop, &o), 0);
	assert_int_equal(evr_ctx_create(&sk->cctx, sk->loop, &o), 0);
	assert_int_equal(
	    evr_listen(sk->sctx, rt_addr(), 0, 16, soak_accept, sk, &sk->l), 0);

	for (uint32_t i = 0; i < SOAK_STREAMS; i++) {
		struct stream *s = &sk->st[i];
		/* stream 2k: client -> server on conn k; 2k+1: back */
		bool from_cli = i % 2 == 0;

		s->sk = sk;
		s->id = i;
		s->seed = mix64(seed + 0x100 + i);
		s->total =
		    total / SOAK_STREAMS + (i < total % SOAK_STREAMS ? 1 : 0);
		s->cb_count = calloc(s->total, 1);
		assert_non_null(s->cb_count);
		for (unsigned k = 0; k < SOAK_BURST; k++) {
			s->slots[k].s = s;
			s->free_slots[k] = k;
		}
		s->nfree = SOAK_BURST;
		s->region = malloc((size_t)SOAK_RSLOTS * SOAK_MAX);
		assert_non_null(s->region);
		assert_int_equal(evr_mr_reg(from_cli ? sk->cctx : sk->sctx,
					    s->region,
					    (size_t)SOAK_RSLOTS * SOAK_MAX,
					    EVR_ACCESS_REMOTE_READ, &s->mr),
				 0);
	}
	for (uint8_t k = 0; k < SOAK_CONNS; k++) {
		struct evr_conn_opts co;

		sk->cli[k].sk = sk->srv[k].sk = sk;
		sk->cli[k].out = sk->srv[k].in = &sk->st[2 * k];
		sk->srv[k].out = sk->cli[k].in = &sk->st[2 * k + 1];
		end_opts(&sk->cli[k], &co);
		co.user_data = &k;
		co.user_len = 1;
		assert_int_equal(evr_connect(sk->cctx, rt_addr(),
					     evr_listener_port(sk->l), &co,
					     &sk->cli[k].conn),
				 0);
	}
	assert_int_equal(rt_run_until(sk->loop, soak_up, sk, 30), 0);
	assert_int_equal(sk->accepts, SOAK_CONNS);
	assert_int_equal(sk->bad_accepts, 0);
	for (int k = 0; k < SOAK_CONNS; k++) {
		assert_int_equal(sk->cli[k].connect_status, 0);
		assert_int_equal(sk->srv[k].connect_status, 0);
		sk->st[2 * k].tx = sk->st[2 * k + 1].rx = sk->cli[k].conn;
		sk->st[2 * k + 1].tx = sk->st[2 * k].rx = sk->srv[k].conn;
	}
}

static void soak_assert(const struct soak *sk)
{
	assert_int_equal(sk->set_mode_err, 0);
	assert_int_equal(sk->mode_mismatch, 0);
	for (int k = 0; k < SOAK_CONNS; k++) {
		assert_int_equal(sk->cli[k].closes, 0);
		assert_int_equal(sk->srv[k].closes, 0);
		assert_int_equal(sk->cli[k].stray, 0);
		assert_int_equal(sk->srv[k].stray, 0);
	}
	for (int i = 0; i < SOAK_STREAMS; i++) {
		const struct stream *s = &sk->st[i];

		assert_int_equal(s->send_err, 0);
		assert_int_equal(s->corrupt, 0);
		assert_int_equal(s->lost, 0);
		assert_int_equal(s->dups, 0);
		assert_int_equal(s->held_bad, 0);
		assert_int_equal(s->next_recv, s->total);
		assert_int_equal(s->next_send, s->total);
		assert_int_equal(s->cb_ok, s->total);
		assert_int_equal(s->cb_err, 0);
		assert_int_equal(s->nfree, SOAK_BURST);
		assert_int_equal(s->bytes_recv, s->bytes_sent);
		for (uint32_t k = 0; k < s->total; k++)
			if (s->cb_count[k] != 1)
				fail_msg("stream %d message %u: %u callbacks",
					 i, k, s->cb_count[k]);
	}
}

static void test_soak(void **state)
{
	struct soak *sk = calloc(1, sizeof(*sk));
	uint32_t total = soak_msgs();
	uint64_t seed = 0x50a4c0de;
	const char *env = getenv("EVR_TEST_SEED");
	uint64_t msgs = 0, bytes = 0, nrndv = 0, holds = 0;
	uint64_t ways[WAY_COUNT] = {0};
	uint64_t progress, received, last_progress = 0;
	double t0, dt, last_move, last_report;
	struct evr_stats st;

	(void)state;
	assert_non_null(sk);
	if (env && *env)
		seed = strtoull(env, NULL, 0);
	printf("# %u messages over %d connections, seed 0x%llx "
	       "(EVR_SOAK_MSGS, EVR_TEST_SEED)\n",
	       total, SOAK_CONNS, (unsigned long long)seed);
	soak_setup(sk, total, seed);

	ev_timer_init(&sk->switch_w, soak_switch, SOAK_SWITCH_S, SOAK_SWITCH_S);
	sk->switch_w.data = sk;
	ev_timer_start(sk->loop, &sk->switch_w);
	t0 = last_move = last_report = rt_now();
	for (int i = 0; i < SOAK_STREAMS; i++)
		stream_pump(&sk->st[i]);
	while (!soak_done(sk) && !soak_failed(sk)) {
		double now;

		ev_run(sk->loop, EVRUN_ONCE);
		now = rt_now();
		progress = soak_progress(sk, &received);
		if (progress != last_progress) {
			last_progress = progress;
			last_move = now;
		} else if (now - last_move > SOAK_STALL_S) {
			soak_err(sk, "no progress for %.0f s", SOAK_STALL_S);
			break;
		}
		if (now - last_report >= SOAK_REPORT_S) {
			last_report = now;
			printf("# %.0f s: %llu of %u messages received\n",
			       now - t0, (unsigned long long)received, total);
		}
	}
	dt = rt_now() - t0;
	ev_timer_stop(sk->loop, &sk->switch_w);
	for (int i = 0; i < SOAK_STREAMS; i++)
		stream_release(&sk->st[i]);
	if (sk->first_err[0])
		fail_msg("%s", sk->first_err);
	soak_assert(sk);

	for (int i = 0; i < SOAK_STREAMS; i++) {
		const struct stream *s = &sk->st[i];

		msgs += s->next_recv;
		bytes += s->bytes_recv;
		nrndv += s->nrndv;
		holds += s->holds;
		for (int w = 0; w < WAY_COUNT; w++)
			ways[w] += s->by_way[w];
	}
	soak_stats_sum(sk, &st);
	printf("# %llu messages, %.1f MB, %llu rendezvous, in %.1f s: "
	       "%.0f msg/s, %.1f MB/s\n",
	       (unsigned long long)msgs, (double)bytes / 1e6,
	       (unsigned long long)nrndv, dt, (double)msgs / dt,
	       (double)bytes / 1e6 / dt);
	printf("# sent by");
	for (int w = 0; w < WAY_COUNT; w++)
		printf(" %s %llu%s", way_str[w], (unsigned long long)ways[w],
		       w + 1 < WAY_COUNT ? "," : "");
	printf("; %llu held and released\n", (unsigned long long)holds);
	printf("# %llu evr_ctx_set_mode rounds in %u loop iterations, "
	       "%llu mode switches; %llu wakeups, %llu polls, "
	       "%llu completions, %llu credit updates\n",
	       (unsigned long long)sk->set_mode_calls, ev_iteration(sk->loop),
	       (unsigned long long)st.mode_switches,
	       (unsigned long long)st.wakeups, (unsigned long long)st.polls,
	       (unsigned long long)st.completions,
	       (unsigned long long)st.credit_updates);

	assert_int_equal(msgs, total);
	/* the library saw what the test did */
	assert_int_equal(st.msgs_sent, total);
	assert_int_equal(st.msgs_recv, total);
	assert_int_equal(st.rndv_sent, nrndv);
	assert_int_equal(st.rndv_recv, nrndv);
	/* both paths and every way of sending were used */
	assert_true(nrndv <= total / 10);
	if (total >= 10000) {
		assert_true(nrndv > 0);
		for (int w = 0; w < WAY_COUNT; w++)
			assert_true(ways[w] > 0);
	}
	/* the modes really changed under the traffic */
	assert_true(st.mode_switches >= sk->set_mode_calls / 2);

	for (int k = 0; k < SOAK_CONNS; k++)
		assert_int_equal(evr_conn_close(sk->cli[k].conn, 0), 0);
	assert_int_equal(rt_run_until(sk->loop, soak_closed, sk, 30), 0);
	for (int k = 0; k < SOAK_CONNS; k++) {
		assert_int_equal(sk->cli[k].closes, 1);
		assert_int_equal(sk->srv[k].closes, 1);
		assert_int_equal(sk->cli[k].close_status, 0);
		assert_int_equal(sk->srv[k].close_status, -ESHUTDOWN);
	}
	for (int i = 0; i < SOAK_STREAMS; i++) {
		assert_int_equal(evr_mr_dereg(sk->st[i].mr), 0);
		free(sk->st[i].region);
		free(sk->st[i].cb_count);
	}
	evr_listener_close(sk->l);
	evr_ctx_destroy(sk->cctx);
	evr_ctx_destroy(sk->sctx);
	ev_loop_destroy(sk->loop);
	free(sk->pat);
	free(sk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_soak),
	};
	/* some 5 minutes for the default in the emulated guest; the bound
	 * leaves a wide margin and grows with EVR_SOAK_MSGS */
	unsigned bound = 120 + soak_msgs() / 1000;

	rt_init(bound);
	return cmocka_run_group_tests_name("rdma_soak", tests, NULL, NULL);
}
