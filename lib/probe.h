/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * Static trace probes (USDT, provider "evrdma") for bpftrace, perf and
 * SystemTap: each is a single nop in the code until a tracer attaches,
 * and compiles to nothing without sys/sdt.h (configure --disable-probes).
 * The probes, their arguments and one-liners that use them: evrdma(7),
 * "Tracing".  scripts/check-probes (make check) reads them from the
 * library's notes (readelf -n), so a probe renamed here must be renamed
 * there too.
 */
#ifndef EVR_PROBE_H
#define EVR_PROBE_H

#include "config.h"

#ifdef EVR_HAVE_PROBES
#include <sys/sdt.h>
#define EVR_PROBE2(name, a, b)	  DTRACE_PROBE2(evrdma, name, a, b)
#define EVR_PROBE3(name, a, b, c) DTRACE_PROBE3(evrdma, name, a, b, c)
#else
#define EVR_PROBE2(name, a, b)	  ((void)0)
#define EVR_PROBE3(name, a, b, c) ((void)0)
#endif

#endif
