/* SPDX-License-Identifier: BSD-2-Clause */
/*
 * perf-output.c: the results of the evrdma-perf client -- the figures of
 * one measurement (struct result) from its counters, clocks and latency
 * samples, and their three forms: a table row printed as each size
 * finishes, CSV rows likewise, or one JSON document at the end.
 *
 * Latencies are in microseconds, the median and the 99th and 99.9th
 * percentiles of the sorted samples; a figure that was not measured is
 * NAN, printed as "-" in the table, empty in CSV and null in JSON.  CPU
 * time per message is the client's getrusage time over the measured
 * interval over its messages (round trips in echo tests, connections in
 * the conn test); the server's comes from the reports of connection 0.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "perf.h"

/* qsort order of doubles. */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double pct(const double *v, size_t n, double q)
{
	size_t i = (size_t)(q * (double)n);

	return v[i < n ? i : n - 1];
}

/* The percentiles of n samples (sorted here) into r. */
void lat_figures(double *v, size_t n, struct result *r)
{
	qsort(v, n, sizeof(double), cmp_double);
	r->lat_med = pct(v, n, 0.5);
	r->lat_p99 = pct(v, n, 0.99);
	r->lat_p999 = pct(v, n, 0.999);
}

/* r's traffic per message between st0 and st1; NAN without messages. */
static void traffic_fill(const struct evr_stats *st0,
			 const struct evr_stats *st1, uint64_t msgs,
			 struct result *r)
{
	const uint64_t d[TR_N] = {
		[TR_POSTS] = st1->post_send_calls - st0->post_send_calls,
		[TR_SEND_WRS] = st1->send_wrs - st0->send_wrs,
		[TR_RECV_WRS] = st1->recv_wrs - st0->recv_wrs,
		[TR_UPDATES] = st1->credit_updates - st0->credit_updates,
		[TR_WCS] = st1->completions - st0->completions};
	int k;

	for (k = 0; k < TR_N; k++)
		r->traffic[k] = msgs ? (double)d[k] / (double)msgs : NAN;
}

void result_fill(struct perf *p, struct result *r)
{
	double secs = (double)(p->t1 - p->t0) / 1e9;
	uint64_t bytes = 0;
	unsigned i;

	memset(r, 0, sizeof(*r));
	r->test = p->o.test;
	r->load = p->o.load;
	r->mode = p->o.mode;
	r->size = p->o.test == T_CONN || p->o.load == L_IDLE ? 0 : p->size;
	r->conns = p->o.conns;
	r->window = p->o.test == T_CONN ? 0 : p->window;
	r->secs = secs;
	if (p->o.test == T_CONN)
		r->msgs = p->finished;
	else
		for (i = 0; i < p->o.conns; i++)
			r->msgs += p->pc[i].sent;
	bytes = r->msgs * r->size;
	r->lat_med = r->lat_p99 = r->lat_p999 = NAN;
	if (p->nlat)
		lat_figures(p->lat, p->nlat, r);
	r->msg_s = secs > 0 ? (double)r->msgs / secs : NAN;
	r->mb_s = secs > 0 ? (double)bytes / secs / 1e6 : NAN;
	r->cpu_us_msg = r->msgs ? (double)(p->cpu1 - p->cpu0) / (double)r->msgs
				: NAN;
	r->cpu_pct = secs > 0 ? (double)(p->cpu1 - p->cpu0) / 1e4 / secs : NAN;
	r->switches = p->st1.mode_switches - p->st0.mode_switches;
	r->wakeups = p->st1.wakeups - p->st0.wakeups;
	traffic_fill(&p->st0, &p->st1, p->o.test == T_CONN ? 0 : r->msgs, r);
	r->skipped = p->o.load == L_LIGHT ? p->skipped : 0;
	r->srv_cpu_us_msg = r->srv_cpu_pct = NAN;
	if (p->o.test != T_CONN) {
		const struct report *b = &p->pc[0].base, *f = &p->pc[0].final;
		double ssecs = (double)(f->t_ns - b->t_ns) / 1e9;
		double scpu = (double)(f->cpu_us - b->cpu_us);

		r->srv_cpu_pct = ssecs > 0 ? scpu / 1e4 / ssecs : NAN;
		r->srv_cpu_us_msg = r->msgs ? scpu / (double)r->msgs : NAN;
		r->srv_switches = f->switches - b->switches;
	}
}

/* Run one measurement at one size; append its result. */
static void print_num(FILE *f, double v, const char *fmt, const char *none)
{
	if (isnan(v))
		fputs(none, f);
	else
		fprintf(f, fmt, v);
}

static void table_header(void)
{
	printf("%-5s %-8s %-5s %8s %5s %4s %9s %9s %9s %9s %10s %9s %8s "
	       "%7s %7s %8s %8s\n",
	       "test", "mode", "load", "size", "conns", "win", "msgs",
	       "lat_med", "lat_p99", "lat_p999", "msg/s", "MB/s",
	       "cpu_us/m", "cpu%", "srv%", "switch", "srv_sw");
}

static void table_row(const struct result *r)
{
	printf("%-5s %-8s %-5s %8zu %5u %4u %9llu ", test_str[r->test],
	       evr_mode_str(r->mode), load_str[r->load], r->size, r->conns,
	       r->window, (unsigned long long)r->msgs);
	print_num(stdout, r->lat_med, "%9.2f ", "        - ");
	print_num(stdout, r->lat_p99, "%9.2f ", "        - ");
	print_num(stdout, r->lat_p999, "%9.2f ", "        - ");
	print_num(stdout, r->msg_s, "%10.0f ", "         - ");
	print_num(stdout, r->mb_s, "%9.2f ", "        - ");
	print_num(stdout, r->cpu_us_msg, "%8.2f ", "       - ");
	print_num(stdout, r->cpu_pct, "%7.2f ", "      - ");
	print_num(stdout, r->srv_cpu_pct, "%7.2f ", "      - ");
	printf("%8llu ", (unsigned long long)r->switches);
	if (r->test == T_CONN)
		printf("%8s\n", "-");
	else
		printf("%8llu\n", (unsigned long long)r->srv_switches);
}

static const char csv_header[] =
	"test,mode,load,size,conns,window,msgs,secs,lat_med_us,lat_p99_us,"
	"lat_p999_us,msg_s,mb_s,cpu_us_per_msg,cpu_pct,srv_cpu_us_per_msg,"
	"srv_cpu_pct,switches,srv_switches,wakeups,skipped,posts_per_msg,"
	"send_wrs_per_msg,recv_wrs_per_msg,updates_per_msg,wcs_per_msg";

/* The CSV and JSON names of struct result's traffic, in csv_header. */
static const char *const traffic_name[TR_N] = {
	[TR_POSTS] = "posts_per_msg",
	[TR_SEND_WRS] = "send_wrs_per_msg",
	[TR_RECV_WRS] = "recv_wrs_per_msg",
	[TR_UPDATES] = "updates_per_msg",
	[TR_WCS] = "wcs_per_msg"};

/* CSV and JSON rows share the field order of csv_header. */
static void data_row(const struct result *r, int json)
{
	const char *none = json ? "null" : "";
	const char *sep = json ? ", " : ",";
	double v[] = {r->lat_med, r->lat_p99, r->lat_p999, r->msg_s, r->mb_s,
		      r->cpu_us_msg, r->cpu_pct, r->srv_cpu_us_msg,
		      r->srv_cpu_pct};
	static const char *const vname[] = {
		"lat_med_us", "lat_p99_us", "lat_p999_us", "msg_s", "mb_s",
		"cpu_us_per_msg", "cpu_pct", "srv_cpu_us_per_msg",
		"srv_cpu_pct"};
	size_t i;

	if (json)
		printf("    {\"test\": \"%s\", \"mode\": \"%s\", \"load\": "
		       "\"%s\", \"size\": %zu, \"conns\": %u, \"window\": "
		       "%u, \"msgs\": %llu, \"secs\": %.6f",
		       test_str[r->test], evr_mode_str(r->mode),
		       r->load ? load_str[r->load] : "", r->size, r->conns,
		       r->window, (unsigned long long)r->msgs, r->secs);
	else
		printf("%s,%s,%s,%zu,%u,%u,%llu,%.6f", test_str[r->test],
		       evr_mode_str(r->mode), r->load ? load_str[r->load] : "",
		       r->size, r->conns, r->window,
		       (unsigned long long)r->msgs, r->secs);
	for (i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		fputs(sep, stdout);
		if (json)
			printf("\"%s\": ", vname[i]);
		print_num(stdout, v[i], "%.3f", none);
	}
	if (json)
		printf(", \"switches\": %llu, \"srv_switches\": ",
		       (unsigned long long)r->switches);
	else
		printf(",%llu,", (unsigned long long)r->switches);
	if (r->test == T_CONN)
		fputs(none, stdout);
	else
		printf("%llu", (unsigned long long)r->srv_switches);
	if (json)
		printf(", \"wakeups\": %llu, \"skipped\": %llu",
		       (unsigned long long)r->wakeups,
		       (unsigned long long)r->skipped);
	else
		printf(",%llu,%llu", (unsigned long long)r->wakeups,
		       (unsigned long long)r->skipped);
	for (i = 0; i < TR_N; i++) {
		fputs(sep, stdout);
		if (json)
			printf("\"%s\": ", traffic_name[i]);
		print_num(stdout, r->traffic[i], "%.3f", none);
	}
	fputs(json ? "}" : "\n", stdout);
}

void emit_row(const struct perf *p, size_t i)
{
	if (p->o.fmt == F_TABLE) {
		if (i == 0)
			table_header();
		table_row(&p->res[i]);
	} else if (p->o.fmt == F_CSV) {
		if (i == 0)
			puts(csv_header);
		data_row(&p->res[i], 0);
	}
	fflush(stdout);
}

void emit_json(const struct perf *p)
{
	size_t i;

	printf("{\n  \"tool\": \"evrdma-perf\",\n  \"results\": [\n");
	for (i = 0; i < p->nres; i++) {
		data_row(&p->res[i], 1);
		printf("%s\n", i + 1 < p->nres ? "," : "");
	}
	printf("  ]\n}\n");
}
