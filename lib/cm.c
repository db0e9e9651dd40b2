/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * rdma_cm: listening, connecting, accepting and rejecting, and the event
 * channel that drives them.
 *
 * Every event is copied (private data included) and acknowledged at once,
 * before it is handled: handlers may then destroy the cm_id the event was
 * for without deadlocking in rdma_destroy_id.  Each RDMA_CM_EVENT_* is
 * handled by name; an event that does not fit the conn's state is logged
 * and fails that conn.
 *
 * Active side:  RESOLVING_ADDR -> RESOLVING_ROUTE -> CONNECTING ->
 *               ESTABLISHED (the REP's private data gives the peer's
 *               limits).
 * Passive side: CONNECT_REQUEST (validated REQ) -> the user's accept
 *               callback -> ACCEPTING -> ESTABLISHED.
 * Addresses are numeric (IPv4 or IPv6): name resolution would block.
 */
#include "evrdma-int.h"
#include "probe.h"

#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cm_ev {
	enum rdma_cm_event_type type;
	int status;
	struct rdma_cm_id *id, *listen_id;
	uint8_t pd[256];
	size_t pdlen;
};

static const char *cm_event_str(enum rdma_cm_event_type t)
{
	return rdma_event_str(t);
}

static int parse_addr(const char *host, uint16_t port, bool passive,
		      struct sockaddr_storage *ss)
{
	struct addrinfo hints, *res = NULL;
	char pstr[8];
	int rc;

	memset(&hints, 0, sizeof(hints));
	hints.ai_flags =
	    AI_NUMERICHOST | AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	snprintf(pstr, sizeof(pstr), "%u", port);
	rc = getaddrinfo(host, pstr, &hints, &res);
	if (rc || !res)
		return -EINVAL;
	memset(ss, 0, sizeof(*ss));
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	freeaddrinfo(res);
	return 0;
}

static void conn_param(evr_ctx *ctx, struct rdma_conn_param *p, const void *pd,
		       size_t len)
{
	int rd =
	    EVR__MIN(ctx->dattr.max_qp_rd_atom, ctx->dattr.max_qp_init_rd_atom);

	memset(p, 0, sizeof(*p));
	p->private_data = pd;
	p->private_data_len = (uint8_t)len;
	p->responder_resources = (uint8_t)EVR__MIN(rd, 16);
	p->initiator_depth = (uint8_t)EVR__MIN(rd, 16);
	/* Bounded transport retries: 7 means "forever" to some providers,
	 * and a dead peer must end in an error.  No RNR retries at all: the
	 * credit protocol guarantees a posted receive for every send, so an
	 * RNR NAK is a bug that must surface, not be papered over. */
	p->retry_count = (uint8_t)ctx->o.retry_count;
	p->rnr_retry_count = 0;
}

/* The local ACK timeout bounds, with the retry count, how long a dead peer
 * can keep a WR in flight.  Failing to set it is not fatal (old kernels):
 * the path's default then applies. */
static void set_ack_timeout(evr_ctx *ctx, struct rdma_cm_id *id)
{
	uint8_t t = (uint8_t)ctx->o.ack_timeout;

	if (t && rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT,
				 &t, sizeof(t)))
		EVR_INFO(ctx, "cannot set the ACK timeout: %s",
			 evr_strerror(-errno));
}

/* The caller's options (NULL: the defaults), of whatever size its header
 * had, in a struct of ours (opts.c says the rules). */
static int take_conn_opts(evr_ctx *ctx, const struct evr_conn_opts *in,
			  struct evr_conn_opts *o)
{
	struct evr_conn_opts dflt;
	int err;

	evr_conn_opts_init(&dflt);
	err = evr__opts_take(ctx, "evr_conn_opts", o, sizeof(*o), &dflt,
			     in ? in : &dflt);
	if (!err && o->max_calls > EVR__CALLS_MAX) {
		EVR_WARN(ctx, "evr_conn_opts.max_calls %u is above %u",
			 o->max_calls, EVR__CALLS_MAX);
		err = -EINVAL;
	}
	return err;
}

/*
 * The connect bound.  conn_tmo_ms() (evr_conn_opts.timeout_ms, else the
 * ctx's connect_timeout_ms) bounds what only a silent network or a silent
 * server can make long: address and route resolution.  Once the request
 * is out, its answer may wait behind thousands of others in the server's
 * queue: the server's CM acknowledges a request it has queued (an MRA,
 * which stretches the client CM's own timeout), and the client's CM ends
 * a connect no one answers with UNREACHABLE/-ETIMEDOUT after its retries.
 * Our own timer then only guards against a CM that never says anything,
 * with reply_tmo_ms(): a bound a queue of thousands fits in.
 */
static unsigned conn_tmo_ms(const evr_conn *c)
{
	return c->o.timeout_ms ? c->o.timeout_ms : c->ctx->o.connect_timeout_ms;
}

static unsigned reply_tmo_ms(const evr_conn *c)
{
	return EVR__MAX(conn_tmo_ms(c), c->ctx->o.connect_reply_ms);
}

/* The extensions both sides agreed to, from the features of the reply
 * (sent or received). */
static void conn_agreed(evr_conn *c, uint8_t features)
{
	c->agreed = features & EVR_HS_F_ALL;
}

/* ---- active side ---- */

int evr_connect(evr_ctx *ctx, const char *host, uint16_t port,
		const struct evr_conn_opts *opts, evr_conn **out)
{
	struct sockaddr_storage dst;
	struct evr_conn_opts o;
	unsigned tmo;
	evr_conn *c;
	int err;

	EVR_OWNER(ctx);
	if (!ctx || !host || !port)
		return -EINVAL;
	err = take_conn_opts(ctx, opts, &o);
	if (err)
		return err;
	opts = &o;
	if (opts->user_len > EVR_MAX_USER_DATA ||
	    (opts->user_len && !opts->user_data))
		return -EINVAL;
	if (ctx->destroying)
		return -EPIPE;
	err = parse_addr(host, port, false, &dst);
	if (err)
		return err;
	c = evr__conn_new(ctx, NULL, true, opts, NULL);
	if (!c)
		return -ENOMEM;
	if (rdma_create_id(ctx->cm_ch, &c->id, c, RDMA_PS_TCP)) {
		err = -errno;
		goto err_free;
	}
	tmo = opts->timeout_ms ? opts->timeout_ms : ctx->o.connect_timeout_ms;
	if (rdma_resolve_addr(c->id, NULL, (struct sockaddr *)&dst,
			      (int)EVR__MAX(tmo / 2, 100u))) {
		err = -errno;
		EVR_INFO(ctx, "rdma_resolve_addr(%s): %s", host,
			 evr_strerror(err));
		goto err_free;
	}
	evr__conn_to(c, EVR_CS_RESOLVING_ADDR);
	evr__ctx_timer_after(ctx, &c->timer, tmo / 1000.0);
	if (out)
		*out = c;
	return 0;

err_free:
	/* never handed out (still NEW): freed by the loop, no callbacks */
	evr__conn_fail(c, err);
	return err;
}

static void on_addr_resolved(evr_conn *c)
{
	evr_ctx *ctx = c->ctx;
	unsigned tmo = conn_tmo_ms(c);
	int err;

	err = evr__dev_bind(ctx, c->id->verbs);
	if (err) {
		EVR_WARN(ctx, "address resolves to device %s, ctx is on %s",
			 c->id->verbs
			     ? ibv_get_device_name(c->id->verbs->device)
			     : "(none)",
			 ctx->devname);
		evr__conn_fail(c, err);
		return;
	}
	if (rdma_resolve_route(c->id, (int)EVR__MAX(tmo / 2, 100u))) {
		evr__conn_fail(c, -errno);
		return;
	}
	evr__conn_to(c, EVR_CS_RESOLVING_ROUTE);
	/* each step is bounded on its own: a busy loop of our own (setting
	 * up a thousand QPs) is not the network's silence */
	evr__ctx_timer_after(ctx, &c->timer, tmo / 1000.0);
}

static void on_route_resolved(evr_conn *c)
{
	struct rdma_conn_param p;
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs;
	size_t n;
	int err;

	/* The QP is made here, not when the address resolved: in a burst
	 * of connects the route events queue behind every address event,
	 * and a QP made per address event would hold back the first
	 * request until all the QPs were made (the server idle meanwhile).
	 * Made here, each request leaves with its QP. */
	err = evr__conn_setup_qp(c);
	if (err) {
		evr__conn_fail(c, err);
		return;
	}
	evr__conn_fill_hs(c, &hs);
	hs.kind = EVR_HS_REQ;
	hs.features = evr__features(c->ctx);
	hs.user_len = (uint8_t)c->ulen;
	memcpy(hs.user, c->udata, c->ulen);
	n = evr__hs_encode(buf, &hs);
	conn_param(c->ctx, &p, buf, n);
	set_ack_timeout(c->ctx, c->id);
	if (rdma_connect(c->id, &p)) {
		evr__conn_fail(c, -errno);
		return;
	}
	evr__conn_to(c, EVR_CS_CONNECTING);
	/* resolution is done: from here on the CM watches for silence */
	evr__ctx_timer_after(c->ctx, &c->timer, reply_tmo_ms(c) / 1000.0);
}

static void on_rejected(evr_conn *c, const struct cm_ev *e)
{
	struct evr__hs hs;
	const char *why;

	if (evr__hs_decode(e->pd, e->pdlen, &hs, &why) == 0 &&
	    hs.kind == EVR_HS_REJ) {
		c->rej_len = hs.user_len;
		memcpy(c->rej, hs.user, hs.user_len);
	}
	if (c->rej_len) {
		char txt[EVR_HS_USER_MAX + 1];
		size_t i;

		/* the library's reasons are text; show a user's bytes too */
		for (i = 0; i < c->rej_len; i++)
			txt[i] = c->rej[i] >= 0x20 && c->rej[i] < 0x7f
				     ? (char)c->rej[i]
				     : '.';
		txt[i] = 0;
		EVR_INFO(c->ctx, "connect rejected (cm status %d): \"%s\"",
			 e->status, txt);
	} else {
		EVR_INFO(c->ctx, "connect rejected (cm status %d%s)", e->status,
			 e->status == 28 ? ": no listener on that port" : "");
	}
	EVR_PROBE2(connect_refused, c, e->status);
	evr__conn_fail(c, -ECONNREFUSED);
}

static void on_established(evr_conn *c, const struct cm_ev *e)
{
	struct evr__hs hs;
	const char *why = NULL;

	if (c->active) {
		if (evr__hs_decode(e->pd, e->pdlen, &hs, &why) == 0) {
			if (hs.kind != EVR_HS_REP)
				why = "not a reply";
			else if (!evr__hs_features_ok(evr__features(c->ctx),
						      &hs))
				why = "a feature the request did not offer";
		}
		if (why) {
			EVR_WARN(c->ctx, "bad accept from peer: %s", why);
			evr__conn_fail(c, -EPROTO);
			return;
		}
		evr__conn_set_peer(c, &hs);
		conn_agreed(c, hs.features);
	}
	evr__conn_established(c);
}

static int errno_or(int status, int dflt)
{
	return status < 0 ? status : dflt;
}

static void conn_event(evr_conn *c, const struct cm_ev *e)
{
	evr_ctx *ctx = c->ctx;
	enum evr__conn_state s = c->state;

	EVR_DBG(ctx, "conn %p: %s (status %d) in state %s", (void *)c,
		cm_event_str(e->type), e->status, evr__conn_state_str(s));
	switch (e->type) {
	case RDMA_CM_EVENT_ADDR_RESOLVED:
		if (s != EVR_CS_RESOLVING_ADDR)
			goto unexpected;
		on_addr_resolved(c);
		break;
	case RDMA_CM_EVENT_ADDR_ERROR:
		evr__conn_fail(c, errno_or(e->status, -EADDRNOTAVAIL));
		break;
	case RDMA_CM_EVENT_ROUTE_RESOLVED:
		if (s != EVR_CS_RESOLVING_ROUTE)
			goto unexpected;
		on_route_resolved(c);
		break;
	case RDMA_CM_EVENT_ROUTE_ERROR:
		evr__conn_fail(c, errno_or(e->status, -ENETUNREACH));
		break;
	case RDMA_CM_EVENT_UNREACHABLE:
		evr__conn_fail(c, e->status == -ETIMEDOUT ? -ETIMEDOUT
							  : -EHOSTUNREACH);
		break;
	case RDMA_CM_EVENT_REJECTED:
		if (s != EVR_CS_CONNECTING && s != EVR_CS_ACCEPTING)
			goto unexpected;
		on_rejected(c, e);
		break;
	case RDMA_CM_EVENT_CONNECT_ERROR:
		evr__conn_fail(c, errno_or(e->status, -ECONNRESET));
		break;
	case RDMA_CM_EVENT_ESTABLISHED:
		if (s != EVR_CS_CONNECTING && s != EVR_CS_ACCEPTING)
			goto unexpected;
		on_established(c, e);
		break;
	case RDMA_CM_EVENT_DISCONNECTED:
		if (s >= EVR_CS_FAILED) {
			evr__conn_kick(c);
			break;
		}
		EVR_DBG(ctx, "peer disconnected");
		/* A peer closing gracefully disconnects once all it sent has
		 * landed here: those receives are in the CQ already, and must
		 * be delivered before the conn fails and drops them -- the cm
		 * fd and the completion fd may be handled in either order. */
		evr__cq_poll_all(ctx, ~0u);
		/* a BYE came first if the peer closed gracefully */
		evr__conn_fail(c, c->peer_bye ? -ESHUTDOWN : -ECONNRESET);
		break;
	case RDMA_CM_EVENT_DEVICE_REMOVAL:
		EVR_ERR(ctx, "RDMA device removed");
		evr__conn_fail(c, -ENODEV);
		break;
	case RDMA_CM_EVENT_ADDR_CHANGE:
		EVR_WARN(ctx, "local address changed: failing the connection");
		evr__conn_fail(c, -ENETRESET);
		break;
	case RDMA_CM_EVENT_TIMEWAIT_EXIT:
		break;
	case RDMA_CM_EVENT_CONNECT_REQUEST:
	case RDMA_CM_EVENT_CONNECT_RESPONSE:
	case RDMA_CM_EVENT_MULTICAST_JOIN:
	case RDMA_CM_EVENT_MULTICAST_ERROR:
	default:
		goto unexpected;
	}
	return;

unexpected:
	if (s >= EVR_CS_FAILED)
		return; /* late events of a conn on its way out */
	EVR_WARN(ctx, "unexpected rdma_cm event %s in state %s",
		 cm_event_str(e->type), evr__conn_state_str(s));
	evr__conn_fail(c, -EPROTO);
}

/* ---- passive side ---- */

/* The kernel's cap on a listener's backlog (INT_MAX if unknown). */
static int max_backlog(void)
{
	FILE *f = fopen("/proc/sys/net/rdma_ucm/max_backlog", "re");
	int v = INT_MAX;

	if (f) {
		if (fscanf(f, "%d", &v) != 1 || v <= 0)
			v = INT_MAX;
		fclose(f);
	}
	return v;
}

int evr_listen(evr_ctx *ctx, const char *host, uint16_t port, int backlog,
	       evr_accept_cb cb, void *arg, evr_listener **out)
{
	struct sockaddr_storage ss;
	evr_listener *l;
	int err, cap;

	EVR_OWNER(ctx);
	if (!ctx || !cb || !out)
		return -EINVAL;
	err = parse_addr(host ? host : "0.0.0.0", port, true, &ss);
	if (err)
		return err;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	l->cm_kind = EVR_CM_LISTENER;
	l->ctx = ctx;
	l->cb = cb;
	l->arg = arg;
	evr__list_init(&l->link);
	if (rdma_create_id(ctx->cm_ch, &l->id, l, RDMA_PS_TCP)) {
		err = -errno;
		goto err_free;
	}
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss)) {
		err = -errno;
		goto err_destroy;
	}
	if (l->id->verbs && (err = evr__dev_bind(ctx, l->id->verbs))) {
		EVR_ERR(ctx, "%s is on device %s, ctx is on %s", host,
			ibv_get_device_name(l->id->verbs->device),
			ctx->devname);
		goto err_destroy;
	}
	if (backlog <= 0)
		backlog =
		    (int)EVR__MIN(ctx->o.listen_backlog, (unsigned)INT_MAX);
	cap = max_backlog();
	if (backlog > cap)
		EVR_INFO(ctx,
			 "listen backlog %d: the kernel keeps %d "
			 "(net.rdma_ucm.max_backlog)",
			 backlog, cap);
	if (rdma_listen(l->id, backlog)) {
		err = -errno;
		goto err_destroy;
	}
	l->port = ntohs(rdma_get_src_port(l->id));
	evr__list_add_tail(&ctx->listeners, &l->link);
	*out = l;
	return 0;

err_destroy:
	rdma_destroy_id(l->id);
err_free:
	free(l);
	return err;
}

uint16_t evr_listener_port(const evr_listener *l)
{
	EVR_OWNER(l ? l->ctx : NULL);
	return l->port;
}

void evr_listener_close(evr_listener *l)
{
	EVR_OWNER(l ? l->ctx : NULL);
	if (!l)
		return;
	evr__list_del(&l->link);
	rdma_destroy_id(l->id);
	free(l);
}

static void reject_id(struct rdma_cm_id *id, const char *reason)
{
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs;
	size_t n;

	memset(&hs, 0, sizeof(hs));
	hs.kind = EVR_HS_REJ;
	n = EVR__MIN(strlen(reason), sizeof(hs.user));
	hs.user_len = (uint8_t)n;
	memcpy(hs.user, reason, n);
	n = evr__hs_encode(buf, &hs);
	EVR_PROBE2(request_refused, id, reason);
	rdma_reject(id, buf, (uint8_t)n);
}

static void on_connect_request(evr_ctx *ctx, const struct cm_ev *e)
{
	evr_listener *l = e->listen_id ? e->listen_id->context : NULL;
	struct evr_conn_req req;
	const char *why = NULL;

	memset(&req, 0, sizeof(req));
	if (!l || l->cm_kind != EVR_CM_LISTENER) {
		rdma_reject(e->id, NULL, 0);
		rdma_destroy_id(e->id);
		return;
	}
	if (evr__dev_bind(ctx, e->id->verbs)) {
		EVR_WARN(ctx, "connect request on device %s, ctx is on %s",
			 ibv_get_device_name(e->id->verbs->device),
			 ctx->devname);
		reject_id(e->id, "wrong device");
		rdma_destroy_id(e->id);
		return;
	}
	if (evr__hs_decode(e->pd, e->pdlen, &req.hs, &why) ||
	    req.hs.kind != EVR_HS_REQ) {
		EVR_WARN(ctx, "rejecting a connect request: %s",
			 why ? why : "not a connect request");
		reject_id(e->id, "bad handshake");
		rdma_destroy_id(e->id);
		return;
	}
	req.ctx = ctx;
	req.l = l;
	req.id = e->id;
	e->id->context = NULL;
	l->cb(l, &req, req.hs.user, req.hs.user_len, l->arg);
	if (!req.answered) {
		reject_id(e->id, "not accepted");
		rdma_destroy_id(e->id);
	}
}

/* Accept req on its ctx, with opts taken already (take_conn_opts). */
static int accept_req(evr_conn_req *req, const struct evr_conn_opts *opts,
		      evr_conn **out)
{
	struct rdma_conn_param p;
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs;
	evr_ctx *ctx = req->ctx;
	evr_conn *c;
	uint8_t mine;
	size_t n;
	int err;

	c = evr__conn_new(ctx, req->id, false, opts, &req->counted);
	if (!c)
		return -ENOMEM;
	c->ulen = 0;
	/* what the request lends decides what we lend (srq_admit) */
	c->req_window = req->hs.init_window;
	err = evr__conn_setup_qp(c);
	if (err)
		goto err_release;
	evr__conn_set_peer(c, &req->hs);
	evr__conn_fill_hs(c, &hs);
	hs.kind = EVR_HS_REP;
	/* calls: agreed to when this side serves them */
	mine = evr__features(ctx);
	if (!opts->on_request)
		mine &= (uint8_t)~EVR_HS_F_CALLS;
	hs.features = evr__hs_reply_features(&req->hs, mine);
	conn_agreed(c, hs.features);
	n = evr__hs_encode(buf, &hs);
	conn_param(ctx, &p, buf, n);
	p.responder_resources =
	    (uint8_t)EVR__MIN(p.responder_resources,
			      EVR__MAX(req->hs.recv_depth, 1));
	req->id->context = c;
	set_ack_timeout(ctx, req->id);
	if (rdma_accept(req->id, &p)) {
		err = -errno;
		goto err_release;
	}
	req->answered = true;
	evr__conn_to(c, EVR_CS_ACCEPTING);
	/* the client's answer (its RTU) may wait behind its own queue of
	 * connects: the reply bound, as for a connect's */
	evr__ctx_timer_after(ctx, &c->timer, reply_tmo_ms(c) / 1000.0);
	if (out)
		*out = c;
	return 0;

err_release:
	/* the conn owns the id now: reject, then tear down (flushing any
	 * receives already posted) without callbacks */
	if (err != -ENOBUFS) /* the pool's refusal is logged by srq_admit */
		EVR_WARN(ctx, "accept failed: %s", evr_strerror(err));
	reject_id(req->id,
		  err == -ENOBUFS ? "no receive buffers" : "accept failed");
	req->answered = true;
	req->id->context = c;
	evr__conn_fail(c, err); /* still NEW: no callbacks */
	return err;
}

int evr_accept(evr_conn_req *req, const struct evr_conn_opts *opts,
	       evr_conn **out)
{
	struct evr_conn_opts o;
	int err;

	EVR_OWNER(req ? req->ctx : NULL);
	if (!req || req->answered)
		return -EINVAL;
	err = take_conn_opts(req->ctx, opts, &o);
	if (err)
		return err;
	return accept_req(req, &o, out);
}

/*
 * Accepting on another ctx.  The request's id moves to the target's event
 * channel here, on the listener's thread, before anything is made for it
 * (rdma_migrate_id: the request event is acknowledged already, so it does
 * not wait); the rest -- binding the target to the device, the QP on its
 * PD and CQ, rdma_accept -- runs on the target's thread as a call, and
 * from then on the id's events arrive there.
 */
struct placed {
	struct evr__call call; /* first */
	struct rdma_cm_id *id;
	struct evr__hs hs;
	struct evr_conn_opts o;
};

static void placed_run(evr_ctx *ctx, struct evr__call *call)
{
	struct placed *pl = (struct placed *)call;
	evr_conn_req req;
	int err;

	memset(&req, 0, sizeof(req));
	req.ctx = ctx;
	req.id = pl->id;
	req.hs = pl->hs;
	req.counted = true; /* by evr_accept_on */
	err = ctx->destroying ? -ECANCELED : evr__dev_bind(ctx, pl->id->verbs);
	if (err) {
		EVR_WARN(ctx, "placed connect request: %s", evr_strerror(err));
		reject_id(pl->id, "accept failed");
		rdma_destroy_id(pl->id);
	} else {
		err = accept_req(&req, &pl->o, NULL);
	}
	if (err && pl->o.on_connect)
		pl->o.on_connect(NULL, err, pl->o.arg);
	if (req.counted) /* no conn took the count over */
		evr__load_add(ctx, -1);
	free(pl);
}

int evr_accept_on(evr_conn_req *req, evr_ctx *target,
		  const struct evr_conn_opts *opts)
{
	struct placed *pl;
	int err;

	EVR_OWNER(req ? req->ctx : NULL);
	if (!req || req->answered || !target)
		return -EINVAL;
	if (target == req->ctx)
		return evr_accept(req, opts, NULL);
	pl = calloc(1, sizeof(*pl));
	if (!pl)
		return -ENOMEM;
	err = take_conn_opts(req->ctx, opts, &pl->o);
	if (err)
		goto fail;
	if (rdma_migrate_id(req->id, target->cm_ch)) {
		err = errno ? -errno : -EIO;
		EVR_WARN(req->ctx, "rdma_migrate_id: %s", evr_strerror(err));
		goto fail;
	}
	pl->call.run = placed_run;
	pl->id = req->id;
	pl->hs = req->hs;
	req->answered = true;	  /* the target's now */
	evr__load_add(target, 1); /* until placed_run: see evr_ctx_load */
	evr__calls_push(&target->calls, &pl->call);
	return 0;

fail:
	free(pl);
	return err;
}

int evr_conn_req_peer_addr(const evr_conn_req *req, struct sockaddr *addr,
			   socklen_t *len)
{
	EVR_OWNER(req ? req->ctx : NULL);
	if (!req)
		return -EINVAL;
	return evr__addr_copy(rdma_get_peer_addr(req->id), addr, len);
}

int evr_reject(evr_conn_req *req, const void *reason, size_t len)
{
	EVR_OWNER(req ? req->ctx : NULL);
	uint8_t buf[EVR_HS_MAX];
	struct evr__hs hs;
	size_t n;

	if (!req || req->answered || len > EVR_MAX_USER_DATA ||
	    (len && !reason))
		return -EINVAL;
	memset(&hs, 0, sizeof(hs));
	hs.kind = EVR_HS_REJ;
	hs.user_len = (uint8_t)len;
	if (len)
		memcpy(hs.user, reason, len);
	n = evr__hs_encode(buf, &hs);
	req->answered = true;
	EVR_PROBE2(request_refused, req->id, "evr_reject");
	if (rdma_reject(req->id, buf, (uint8_t)n)) {
		int err = -errno;

		rdma_destroy_id(req->id);
		return err;
	}
	rdma_destroy_id(req->id);
	return 0;
}

/* ---- the event channel ---- */

/*
 * Events handled per wakeup.  Under a connection storm the channel may
 * never run dry: draining it to EAGAIN kept the loop in here for seconds
 * while completions (another fd of the same loop) waited, and connections
 * stalled.  The rest waits for the next loop iteration: the ev_io is
 * level-triggered, and an embedding host is told by evr_ctx_timeout_ms().
 */
#define EVR_CM_BATCH 16

void evr__cm_on_channel(struct ev_loop *loop, ev_io *w, int revents)
{
	evr_ctx *ctx = evr__container_of(w, evr_ctx, cm_w);
	struct rdma_cm_event *ev;
	struct cm_ev e;
	int n;

	(void)loop;
	(void)revents;
	ctx->cm_more = true;
	for (n = 0; n < EVR_CM_BATCH; n++) {
		if (rdma_get_cm_event(ctx->cm_ch, &ev)) {
			ctx->cm_more = false;
			break;
		}
		e.type = ev->event;
		e.status = ev->status;
		e.id = ev->id;
		e.listen_id = ev->listen_id;
		e.pdlen = 0;
		if (ev->param.conn.private_data &&
		    ev->param.conn.private_data_len) {
			e.pdlen =
			    EVR__MIN((size_t)ev->param.conn.private_data_len,
				     sizeof(e.pd));
			memcpy(e.pd, ev->param.conn.private_data, e.pdlen);
		}
		rdma_ack_cm_event(ev);

		if (e.type == RDMA_CM_EVENT_CONNECT_REQUEST) {
			on_connect_request(ctx, &e);
		} else if (e.id && e.id->context) {
			uint8_t kind = *(uint8_t *)e.id->context;

			if (kind == EVR_CM_CONN)
				conn_event(e.id->context, &e);
			else
				EVR_INFO(ctx, "listener event %s",
					 cm_event_str(e.type));
		} else {
			EVR_DBG(ctx, "event %s for an id without owner",
				cm_event_str(e.type));
		}
		evr__ctx_progress(ctx);
	}
}
