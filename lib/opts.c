/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Options: their defaults, taking a caller's struct, and the environment.
 *
 * The options structs can grow.  Their first member, size, is the sizeof
 * the caller was compiled with (the _init functions are inline in
 * evrdma.h so that the caller's sizeof is the one recorded).  Every entry
 * point that takes options copies them with evr__opts_copy() into a struct
 * of the library's own size: the defaults first, then the caller's bytes
 * over them.  A struct from an older header thus leaves its missing tail
 * at the defaults; one from a newer header is accepted when the fields this
 * library does not know are all zero -- what its _init put there, i.e.
 * the caller asked for nothing this library cannot do -- and refused with
 * -E2BIG otherwise, rather than silently ignoring a setting.  A size of 0
 * means a struct that never went through _init (or was zeroed by hand):
 * -EINVAL, since its other fields are not defaults either.
 *
 * The environment is read once, by evr_ctx_create(), into struct evr__env,
 * and evr__tune_resolve() decides each value from the options and that
 * struct alone: a non-zero option wins, else a well-formed variable, else
 * the built-in default.  Resolution is pure so the precedence can be
 * tested without a device, and nothing reads the environment after the ctx
 * exists (getenv is not thread-safe against setenv, and a value that
 * changes under a running ctx helps nobody).
 */
#include "evrdma-int.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

void evr_ctx_opts_init_sz(struct evr_ctx_opts *opts, size_t size)
{
	struct evr_ctx_opts o;

	if (!opts || size < sizeof(o.size))
		return;
	memset(&o, 0, sizeof(o));
	o.mode = EVR_MODE_ADAPTIVE;
	o.sq_depth = 64;
	o.recv_depth = 64;
	o.eager_size = 0; /* planned: 8192, less under a memlock limit */
	o.max_msg_size = 64u << 20;
	o.signal_interval = 16;
	o.connect_timeout_ms = 5000;
	o.close_timeout_ms = 5000;
	o.retry_count = 6;
	o.ack_timeout = 16;
	o.keepalive_ms = 2000;
	o.keepalive_timeout_ms = 6000;
	o.send_queue_limit = 64u << 20;
	o.send_queue_lowat = 0;
	/* adapt_*: 0, "unset" -- the environment or the default decides */
	o.log_level = EVR_LOG_WARN;
	o.listen_backlog = 4096;
	o.connect_reply_ms = 30000;
	o.srq = EVR_SRQ_AUTO;
	o.window_idle_ms = 2000;
	/* write no more than the caller's struct holds; zero what it has
	 * beyond ours (fields of a newer header: theirs default to 0) */
	memcpy(opts, &o, EVR__MIN(size, sizeof(o)));
	if (size > sizeof(o))
		memset((char *)opts + sizeof(o), 0, size - sizeof(o));
	opts->size = size;
}

void evr_conn_opts_init_sz(struct evr_conn_opts *opts, size_t size)
{
	if (!opts || size < sizeof(opts->size))
		return;
	memset(opts, 0, size);
	opts->size = size;
}

int evr__opts_copy(void *dst, size_t dst_size, const void *defaults,
		   const void *src)
{
	const unsigned char *tail = src;
	size_t size, i;

	memcpy(&size, src, sizeof(size));
	if (size < sizeof(size))
		return -EINVAL; /* 0: never initialised */
	if (size > EVR__OPTS_MAX_SIZE)
		return -E2BIG;
	for (i = dst_size; i < size; i++)
		if (tail[i])
			return -E2BIG;
	memcpy(dst, defaults, dst_size);
	memcpy(dst, src, EVR__MIN(size, dst_size));
	memcpy(dst, &dst_size, sizeof(dst_size));
	return 0;
}

int evr__opts_take(const evr_ctx *ctx, const char *what, void *dst,
		   size_t dst_size, const void *defaults, const void *src)
{
	size_t size;
	int err = evr__opts_copy(dst, dst_size, defaults, src);

	if (!err)
		return 0;
	memcpy(&size, src, sizeof(size));
	if (err == -EINVAL)
		EVR_WARN(ctx,
			 "struct %s not initialised (size %zu): call %s_init()"
			 " before setting fields",
			 what, size, what);
	else
		EVR_WARN(ctx,
			 "struct %s of %zu bytes sets fields this library "
			 "(%zu bytes) does not know",
			 what, size, dst_size);
	return err;
}

void evr__env_read(struct evr__env *env)
{
	env->device = getenv("EVR_DEVICE");
	env->log = getenv("EVR_LOG");
	env->adapt_up_rate = getenv("EVR_ADAPT_UP_RATE");
	env->adapt_up_batch = getenv("EVR_ADAPT_UP_BATCH");
	env->adapt_quiet_us = getenv("EVR_ADAPT_QUIET_US");
	env->adapt_quiet_polls = getenv("EVR_ADAPT_QUIET_POLLS");
	env->adapt_spin_us = getenv("EVR_ADAPT_SPIN_US");
	env->poll_spin = getenv("EVR_POLL_SPIN");
	env->reg_cache = getenv("EVR_REG_CACHE");
	env->srq = getenv("EVR_SRQ");
	env->mw = getenv("EVR_MW");
	env->fin = getenv("EVR_FIN");
	env->imm = getenv("EVR_IMM");
}

unsigned evr__opt_pick(unsigned opt, const char *env, unsigned dflt)
{
	unsigned v;

	if (opt)
		return opt;
	if (evr__uint_parse(env, &v))
		return v;
	return dflt;
}

void evr__tune_resolve(struct evr__tune *t, const struct evr_ctx_opts *o,
		       const struct evr__env *env)
{
	int lvl = evr__log_level_parse(env->log);

	memset(t, 0, sizeof(*t));
	t->adapt.up_rate = evr__opt_pick(o->adapt_up_rate, env->adapt_up_rate,
					 EVR_ADAPT_UP_RATE);
	t->adapt.up_batch =
	    evr__opt_pick(o->adapt_up_batch, env->adapt_up_batch,
			  EVR_ADAPT_UP_BATCH);
	t->adapt.quiet_us =
	    evr__opt_pick(o->adapt_quiet_us, env->adapt_quiet_us,
			  EVR_ADAPT_QUIET_US);
	t->adapt.window_us = EVR_ADAPT_WINDOW_US;
	/* no option field: the variable or the default (0 is a setting) */
	t->adapt.quiet_polls =
	    evr__opt_pick(0, env->adapt_quiet_polls, EVR_ADAPT_QUIET_POLLS);
	t->poll_spin = evr__opt_pick(0, env->poll_spin, EVR_POLL_SPIN);
	t->spin_us = evr__opt_pick(o->adapt_spin_us, env->adapt_spin_us,
				   EVR_ADAPT_SPIN_US);
	if (t->spin_us == UINT_MAX)
		t->spin_us = 0; /* never */
	t->reg_cache_max = evr__opt_pick(0, env->reg_cache, 0);
	/* a log sink in the options takes the lines: EVR_LOG is not read */
	t->log_stderr = o->log_fn || lvl < 0 ? 0 : (unsigned)lvl + 1;
	t->srq = o->srq;
	t->srq_batch = EVR_SRQ_REPOST_BATCH;
	if (t->srq == EVR_SRQ_AUTO && env->srq) {
		if (!strcasecmp(env->srq, "on") || !strcmp(env->srq, "1"))
			t->srq = EVR_SRQ_ON;
		else if (!strcasecmp(env->srq, "off") || !strcmp(env->srq, "0"))
			t->srq = EVR_SRQ_OFF;
	}
	if (env->mw && (!strcasecmp(env->mw, "off") || !strcmp(env->mw, "0")))
		t->mw = EVR_RNDV_REGISTER;
	else if (env->mw && !strcasecmp(env->mw, "inside"))
		t->mw = EVR_RNDV_WINDOW;
	t->fin_alone = env->fin && !strcasecmp(env->fin, "alone");
	t->imm_off = env->imm &&
		     (!strcasecmp(env->imm, "off") || !strcmp(env->imm, "0"));
}
