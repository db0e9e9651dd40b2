/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Calls: request/response with deadlines and cancellation
 * (docs/calls.md), above the message layer.  A call's request and its
 * reply are messages of msg.c carrying a call id (EVR_F_CALL /
 * EVR_F_REPLY); msg.c hands them back up through the ctx's hooks
 * (rpc_request, rpc_reply, rpc_cancel, rpc_live), and the conn's end
 * through conn_teardown.
 *
 * Client side, a call ends -- its callback fires, exactly once -- when
 * both are true: its outcome is known (the reply, the deadline, a cancel,
 * the conn's end) and its request's send is over (eager: posted, its
 * bytes copied; rendezvous: its completion and the peer's FIN).
 * The second is what makes the request buffer the caller's again when the
 * callback fires: nothing reads it any more, here or at the peer.  A call
 * given up is out of the table at once (a late reply finds nothing); its
 * request is withdrawn when still queued, else the peer is told (CANCEL),
 * which makes it skip a read it has not started.  A reply to a
 * rendezvous request that comes before the request's completion was
 * polled is held (evr_conn_hold) until then.
 *
 * Server side, a request is delivered with a handle that holds a
 * reference to the conn; the handle is the user's until answered or
 * dropped, also after the conn ended.
 */
#include "evrdma-int.h"
#include "probe.h"

#include <errno.h>
#include <stdlib.h>
#include <sys/random.h>

#define EVR_CALLS_DEFAULT 256u
/* calls and request handles a conn keeps for reuse, each kind */
#define EVR_RPC_FREE_MAX 16u

/* A call in flight (client side). */
struct rpc_call {
	evr_conn *c;
	evr_call_cb cb;
	void *arg;
	uint32_t id;
	struct evr__op *op;   /* the request's send, until it is over */
	struct evr__timer tm; /* the deadline, when there is one */
	bool timed;	      /* tm holds a slot of the ctx's heap */
	bool known;	      /* the outcome is known: status (and reply) */
	uint8_t cause;	      /* what ended it (enum cause), for the stats */
	int status;
	evr_msg *reply; /* status 0 before the request's send was over */
};

/* What ended a call: the stats count calls_ok, calls_expired and
 * calls_cancelled by cause, not by status (a conn's end may say
 * -ECANCELED or -ETIMEDOUT too). */
enum cause { BY_CONN, BY_REPLY, BY_DEADLINE, BY_CANCEL };

/* A request delivered (server side). */
enum req_state { REQ_OPEN, REQ_CANCELLED, REQ_GONE };

struct evr_request {
	struct evr__list link;	   /* c->rpc_reqs while REQ_OPEN or CANCELLED */
	struct evr_request *hnext; /* its bucket of c->rpc_ix, meanwhile */
	evr_conn *c;		   /* a reference */
	uint32_t id;
	uint8_t state; /* enum req_state */
};

static struct rpc_call *call_of(struct evr__timer *t)
{
	return evr__container_of(t, struct rpc_call, tm);
}

static void call_free(evr_ctx *ctx, struct rpc_call *k)
{
	if (k->timed) {
		evr__timer_stop(&ctx->timers, &k->tm);
		evr__timers_unreserve(&ctx->timers, 1);
	}
	evr__stash_put(&k->c->rpc_calls_free, k, EVR_RPC_FREE_MAX);
}

/* The reply, to the callback, with evr_conn_hold() at hand. */
static void reply_cb(evr_conn *c, const void *data, size_t len, void *arg)
{
	struct rpc_call *k = arg;

	k->cb(c, 0, data, len, k->arg);
}

/* The call ends: counted, freed, its callback fired -- with the reply
 * held (k->reply), or data: a reply being delivered now, or none. */
static void call_end(struct rpc_call *k, const void *data, size_t len)
{
	evr_conn *c = k->c;
	evr_ctx *ctx = c->ctx;
	evr_call_cb cb = k->cb;
	void *arg = k->arg;
	int status = k->status;

	if (k->cause == BY_REPLY && status == 0)
		ctx->st.calls_ok++;
	else if (k->cause == BY_DEADLINE)
		ctx->st.calls_expired++;
	else if (k->cause == BY_CANCEL)
		ctx->st.calls_cancelled++;
	EVR_PROBE3(call_end, c, k->id, status);
	if (k->reply) {
		evr__msg_redeliver(c, k->reply, reply_cb, k);
		call_free(ctx, k);
	} else {
		call_free(ctx, k);
		cb(c, status, data, len, arg);
	}
	/* a call ended: room for more (after an -ENOBUFS) */
	if (c->rpc_over && c->rpc_tab.n < c->rpc_tab.limit) {
		c->rpc_over = false;
		if (c->o.on_drain && evr__conn_open(c))
			c->o.on_drain(c, c->o.arg);
	}
}

/* End the call if both halves are done. */
static void call_maybe_end(struct rpc_call *k)
{
	if (k->known && !k->op)
		call_end(k, NULL, 0);
}

/* The request's send is over (its op's callback): an eager one's once
 * it is posted (cb_at_post: the flush calls back after the post), a
 * rendezvous one's when both its send and the peer's FIN are. */
static void request_sent(evr_conn *c, int status, void *arg)
{
	struct rpc_call *k = arg;

	(void)c;
	k->op = NULL;
	if (!k->known && status) {
		/* not sent: the call ends with why */
		evr__calltab_take(&c->rpc_tab, k->id);
		k->known = true;
		k->status = status;
	}
	call_maybe_end(k);
}

/* The call ends with status (deadline, cancel): out of the table, its
 * request withdrawn or the peer told. */
static void call_give_up(evr_conn *c, struct rpc_call *k, int status)
{
	k->known = true;
	k->status = status;
	k->cause = status == -ETIMEDOUT ? BY_DEADLINE : BY_CANCEL;
	if (k->timed)
		evr__timer_stop(&c->ctx->timers, &k->tm);
	if (k->op && evr__msg_withdraw(c, k->op))
		return; /* never posted: request_sent ended it */
	/* Posted: the peer drops the request, and does not read it if it
	 * has not begun to.  Without memory for the CANCEL the call still
	 * ends; the peer answers into nothing.  Not once closing: nothing
	 * may follow our BYE, and the close ends the peer's side anyway. */
	if (c->state == EVR_CS_ESTABLISHED && evr__msg_send_cancel(c, k->id))
		EVR_WARN(c->ctx,
			 "conn %p: no memory for the cancel of call "
			 "%u: the peer is not told",
			 (void *)c, k->id);
	call_maybe_end(k);
}

static void on_deadline(struct evr__timer *t)
{
	struct rpc_call *k = call_of(t);

	evr__calltab_take(&k->c->rpc_tab, k->id);
	call_give_up(k->c, k, -ETIMEDOUT);
}

int evr_call(evr_conn *c, const void *req, size_t len, unsigned timeout_ms,
	     evr_call_cb cb, void *arg, evr_call_id *idp)
{
	evr_ctx *ctx;
	struct rpc_call *k;
	int err;

	if (!c || !cb || (!req && len))
		return -EINVAL;
	EVR_CONN_OWNER(c);
	ctx = c->ctx;
	if (!evr__conn_open(c))
		return -EPIPE;
	if (c->state != EVR_CS_ESTABLISHED)
		return -ENOTCONN;
	if (!evr__agreed(c, EVR_HS_F_CALLS))
		return -EOPNOTSUPP;
	if (!c->rpc_tab.s) { /* max_calls was checked at connect / accept */
		err = evr__calltab_init(&c->rpc_tab, c->o.max_calls
							 ? c->o.max_calls
							 : EVR_CALLS_DEFAULT);
		if (err)
			return err;
	}
	if (c->rpc_tab.n >= c->rpc_tab.limit) {
		c->rpc_over = true;
		return -ENOBUFS;
	}
	k = evr__stash_get(&c->rpc_calls_free, sizeof(*k));
	if (!k)
		return -ENOMEM;
	k->c = c;
	k->cb = cb;
	k->arg = arg;
	evr__timer_init(&k->tm, on_deadline);
	if (timeout_ms) {
		if (evr__timers_reserve(&ctx->timers, 1)) {
			call_free(ctx, k);
			return -ENOMEM;
		}
		k->timed = true;
	}
	evr__calltab_add(&c->rpc_tab, k, &k->id); /* room: checked above */
	err = evr__msg_send_call(c, req, len, EVR_F_CALL, k->id, request_sent,
				 k, &k->op);
	if (err) {
		evr__calltab_take(&c->rpc_tab, k->id);
		call_free(ctx, k);
		return err;
	}
	if (timeout_ms)
		evr__ctx_timer_after(ctx, &k->tm, timeout_ms / 1000.0);
	ctx->st.calls++;
	EVR_PROBE3(call_start, c, k->id, len);
	if (idp)
		*idp = k->id;
	return 0;
}

int evr_call_cancel(evr_conn *c, evr_call_id id)
{
	struct rpc_call *k;

	if (!c)
		return -EINVAL;
	EVR_CONN_OWNER(c);
	k = evr__calltab_take(&c->rpc_tab, id);
	if (!k)
		return -ENOENT;
	call_give_up(c, k, -ECANCELED);
	return 0;
}

/* ---- hooks of the message layer ---- */

void evr__rpc_reply(evr_conn *c, uint32_t id, const void *data, size_t len)
{
	struct rpc_call *k = evr__calltab_find(&c->rpc_tab, id);

	/* given up, or never made; or the reply of a request not even sent
	 * (a peer guessing ids): nothing the call waits for */
	if (!k || (k->op && k->op->queued)) {
		c->ctx->st.late_replies++;
		return;
	}
	evr__calltab_take(&c->rpc_tab, id);
	k->known = true;
	k->status = 0;
	k->cause = BY_REPLY;
	if (k->timed) {
		evr__timer_stop(&c->ctx->timers, &k->tm);
		/* A pass of the loop that takes many completions runs its
		 * timers after them: a reply that came after the deadline
		 * still ends the call as the deadline would have. */
		if (ev_time() >= k->tm.at) {
			c->ctx->st.late_replies++;
			k->status = -ETIMEDOUT;
			k->cause = BY_DEADLINE;
			call_maybe_end(k);
			return;
		}
	}
	if (!k->op) {
		call_end(k, data, len); /* inside the delivery: hold works */
		return;
	}
	/* the request's completion is still to be polled: keep the reply */
	k->reply = evr_conn_hold(c);
	if (!k->reply) {
		k->status = -ENOMEM;
		EVR_WARN(c->ctx,
			 "conn %p: no memory to keep the reply of call "
			 "%u",
			 (void *)c, id);
	}
}

bool evr__rpc_live(const evr_conn *c, uint32_t id)
{
	return evr__calltab_find(&c->rpc_tab, id) != NULL;
}

/*
 * The requests a conn holds, by id (the peer's CANCEL names one).  A
 * CANCEL that finds more than EVR_RPC_IX_MIN held builds chained buckets,
 * at least as many as requests, kept up from then on, so a CANCEL costs
 * the same with 17 requests held or 65536; a conn whose peer never
 * cancels, or holds few, pays nothing for them on its requests.  Ids are
 * the peer's choice, so the hash mixes in a secret of the conn's: a peer
 * cannot aim its ids at one bucket.  Without memory for the buckets,
 * CANCEL walks the list.
 */
#define EVR_RPC_IX_MIN 16u

static uint32_t req_bucket(const evr_conn *c, uint32_t id)
{
	uint32_t h = id ^ c->rpc_ix_seed; /* murmur3's finalizer */

	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h & c->rpc_ix_mask;
}

/* At least want buckets, twice as many as before, every request held
 * hashed anew; false without memory (the old buckets stay). */
static bool req_ix_grow(evr_conn *c, uint32_t want)
{
	uint32_t nb = c->rpc_ix ? (c->rpc_ix_mask + 1) * 2 : EVR_RPC_IX_MIN;
	struct evr_request **ix;
	struct evr__list *pos;

	while (nb < want && nb < (1u << 30))
		nb *= 2;
	ix = calloc(nb, sizeof(*ix));
	if (!ix)
		return false;
	if (!c->rpc_ix &&
	    getrandom(&c->rpc_ix_seed, sizeof(c->rpc_ix_seed), GRND_NONBLOCK) !=
		(ssize_t)sizeof(c->rpc_ix_seed))
		c->rpc_ix_seed = (uint32_t)((uintptr_t)c >> 4) * 2654435761u;
	free(c->rpc_ix);
	c->rpc_ix = ix;
	c->rpc_ix_mask = nb - 1;
	evr__list_for_each(pos, &c->rpc_reqs)
	{
		struct evr_request *r =
		    evr__container_of(pos, struct evr_request, link);
		uint32_t b = req_bucket(c, r->id);

		r->hnext = ix[b];
		ix[b] = r;
	}
	return true;
}

/* r, on c->rpc_reqs already, into the buckets once there are some. */
static void req_index(evr_conn *c, struct evr_request *r)
{
	uint32_t b;

	c->rpc_nreqs++;
	if (!c->rpc_ix)
		return; /* no CANCEL has needed them yet */
	if (c->rpc_nreqs > c->rpc_ix_mask + 1 && req_ix_grow(c, c->rpc_nreqs))
		return; /* r was hashed with the rest */
	b = req_bucket(c, r->id);
	r->hnext = c->rpc_ix[b];
	c->rpc_ix[b] = r;
}

/* The open request of id, or NULL. */
/* Whether r is the open request id: what a CANCEL for id may end. */
static bool req_is(const struct evr_request *r, uint32_t id)
{
	return r->id == id && r->state == REQ_OPEN;
}

static struct evr_request *req_find(evr_conn *c, uint32_t id)
{
	struct evr__list *pos;
	struct evr_request *r;

	if (!c->rpc_ix && c->rpc_nreqs > EVR_RPC_IX_MIN)
		req_ix_grow(c, c->rpc_nreqs); /* else the walk below */
	if (c->rpc_ix) {
		for (r = c->rpc_ix[req_bucket(c, id)]; r; r = r->hnext)
			if (req_is(r, id))
				return r;
		return NULL;
	}
	evr__list_for_each(pos, &c->rpc_reqs)
	{
		r = evr__container_of(pos, struct evr_request, link);
		if (req_is(r, id))
			return r;
	}
	return NULL;
}

static void req_unlink(struct evr_request *r)
{
	evr_conn *c = r->c;

	if (r->state == REQ_GONE)
		return;
	evr__list_del(&r->link);
	r->state = REQ_GONE;
	c->rpc_nreqs--;
	if (c->rpc_ix) {
		struct evr_request **pp = &c->rpc_ix[req_bucket(c, r->id)];

		while (*pp && *pp != r)
			pp = &(*pp)->hnext;
		if (*pp)
			*pp = r->hnext;
	}
}

/* The conn ended: every request it holds is answered by nothing now. */
static void reqs_gone(evr_conn *c)
{
	while (!evr__list_empty(&c->rpc_reqs)) {
		struct evr_request *r =
		    evr__container_of(c->rpc_reqs.next, struct evr_request,
				      link);

		evr__list_del(&r->link);
		r->state = REQ_GONE;
	}
	c->rpc_nreqs = 0;
	free(c->rpc_ix);
	c->rpc_ix = NULL;
	c->rpc_ix_mask = 0;
}

static void req_free(struct evr_request *r)
{
	evr_conn *c = r->c;

	req_unlink(r);
	/* (the handle's reference keeps c until after the stash took r) */
	evr__stash_put(&c->rpc_reqs_free, r, EVR_RPC_FREE_MAX);
	evr__conn_unref(c);
}

void evr__rpc_request(evr_conn *c, uint32_t id, const void *data, size_t len)
{
	evr_ctx *ctx = c->ctx;
	struct evr_request *r;

	if (!c->o.on_request) {
		ctx->st.requests_unserved++;
		return;
	}
	r = evr__stash_get(&c->rpc_reqs_free, sizeof(*r));
	if (!r) {
		EVR_ERR(ctx, "conn %p: no memory for a request handle",
			(void *)c);
		evr__conn_fail(c, -ENOMEM);
		return;
	}
	evr__conn_ref(c);
	r->c = c;
	r->id = id;
	r->state = REQ_OPEN;
	evr__list_add_tail(&c->rpc_reqs, &r->link);
	req_index(c, r);
	ctx->st.requests++;
	c->o.on_request(c, r, data, len, c->o.arg);
}

void evr__rpc_cancel(evr_conn *c, uint32_t id)
{
	struct evr_request *r = req_find(c, id);

	/* none: answered already, or never delivered; nothing to do */
	if (r) {
		r->state = REQ_CANCELLED;
		c->ctx->st.requests_cancelled++;
	}
}

int evr_reply(evr_request *r, const void *buf, size_t len, evr_op_cb cb,
	      void *arg)
{
	evr_conn *c;
	int err;

	if (!r)
		return -EINVAL;
	c = r->c;
	EVR_CONN_OWNER(c);
	if (!buf && len)
		err = -EINVAL;
	else if (r->state == REQ_CANCELLED)
		err = -ECANCELED;
	else if (r->state == REQ_GONE || !evr__conn_open(c))
		err = -ENOTCONN;
	else
		err = evr__msg_send_call(c, buf, len, EVR_F_REPLY, r->id, cb,
					 arg, NULL);
	if (err == -EPIPE)
		err = -ENOTCONN;
	req_free(r); /* spent, whatever the outcome */
	return err;
}

void evr_request_drop(evr_request *r)
{
	if (!r)
		return;
	EVR_CONN_OWNER(r->c);
	req_free(r);
}

evr_conn *evr_request_conn(const evr_request *r)
{
	return r ? r->c : NULL;
}

/* ---- the conn's end ---- */

void evr__rpc_teardown(evr_conn *c, int status)
{
	struct evr__calltab *t = &c->rpc_tab;
	uint32_t i;

	evr__msg_teardown(c, status);
	/* requests: the handles stay the user's, answering sends nothing */
	reqs_gone(c);
	/* calls: each ends with the conn's error, once its request's send
	 * is over (flushed, if it is still posted); one walk of the slots,
	 * since no call can be made on a conn that ended */
	for (i = 0; t->n && i < t->cap; i++) {
		struct rpc_call *k;

		if (!t->s[i].call)
			continue;
		k = evr__calltab_take(t, evr__calltab_id(t, i));
		k->known = true;
		k->status =
		    evr__op_user_status(c, status ? status : -ECANCELED);
		if (k->timed)
			evr__timer_stop(&c->ctx->timers, &k->tm);
		call_maybe_end(k);
	}
}

void evr__rpc_release(evr_conn *c)
{
	reqs_gone(c); /* (after the teardown: nothing left) */
	evr__msg_detach_held(c);
	evr__calltab_fini(&c->rpc_tab);
}
