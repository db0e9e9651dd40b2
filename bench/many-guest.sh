#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# bench/many-guest.sh: the measurements of bench/many, next to an RDMA
# device (normally inside the Soft-RoCE guest of test/vm/evr-vm).
#
#   bench/many-guest.sh BUILDDIR OUTDIR [quick|full [PART...]]
#
# The parts (all unless PARTs are named), all against one address
# (BENCH_ADDR, default 10.77.0.1):
#  burst  BURST clients connecting at once to one server: cmtime -c BURST
#         and evrdma-perf -t conn --burst -C BURST alternately, REPS times
#         each; OUTDIR/burst.csv.
#  mem-on, mem-off
#         N idle connections open on one server ctx, for each N of
#         MEM_CONNS (the first that fails ends the list), opened RAMP at a
#         time, with the shared receive queue (mem-on) and with
#         EVR_SRQ=off (mem-off): a fresh evrdma-perf server,
#         one warm-up connection, a snapshot of the server's
#         /proc/PID/status and of /proc/meminfo, then evrdma-perf
#         --load idle -C N and the same snapshot once every QP is up;
#         OUTDIR/mem-on.csv, mem-off.csv (kB, as the kernel reports
#         them).
#  mem-small
#         mem-on with receive buffers of 4 KiB instead of 8 KiB: the
#         server's eager size is SMALL_EAGER (evrdma-perf --eager-size);
#         OUTDIR/mem-small.csv.
#  light  LIGHT_CONNS connections each pinging every 100 ms, a tenth as
#         many, and one connection at the same rate; the evrdma-perf CSV lines go to
#         OUTDIR/light.csv.
# Every server runs on CPU 0 and every client on CPU 1 (as in
# bench/guest.sh).  Everything the tools print goes to OUTDIR/log.txt.
# "quick" makes every part small (to try the script, not to measure).
set -u

BUILD=$1 OUT=$2 QUICK=${3:-}
shift $(($# < 3 ? $# : 3))
PARTS=${*:-burst mem-on mem-off mem-small light}
# PERF, DEV, ADDR, PIN_S, PIN_C
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
LOG=$OUT/log.txt

REPS=3 BURST=1000
# The idle and light tests open their connections RAMP at a time: they
# measure connections that are up, not how fast they come up.
RAMP=100
MEM_CONNS="1000 2000 5000 10000"
SMALL_EAGER=4088
LIGHT_CONNS=1000 LIGHT_RATE=10 LIGHT_S=20 ONE_S=30
if [ "$QUICK" = quick ]; then
	REPS=2 BURST=100 MEM_CONNS="100 300" LIGHT_CONNS=100 LIGHT_S=3 ONE_S=3
	RAMP=50
fi

PORT=21000 SRV_PID=
mkdir -p "$OUT" || exit 1
: > "$LOG"

log() { echo "$*" >> "$LOG"; }
note() { echo "bench: [${SECONDS}s] $*" >&2; log "### [${SECONDS}s] $*"; }
# csv FILE FIELDS...: one line of FILE
csv() {
	local f=$1 IFS=,
	shift
	echo "$*" >> "$f"
}

# A burst of BURST connects is more than the kernel's default backlog of
# connect requests (net.rdma_ucm.max_backlog) lets wait at a listener
# when the idle test opens thousands; raised for both tools alike.
old_backlog=$(sysctl -n net.rdma_ucm.max_backlog 2> /dev/null)
sysctl -qw net.rdma_ucm.max_backlog=16384 2> /dev/null
log "net.rdma_ucm.max_backlog: ${old_backlog:-?} -> $(sysctl -n net.rdma_ucm.max_backlog 2> /dev/null)"
{
	echo "guest: $(nproc) CPU(s), $(uname -r)"
	grep -E '^(MemTotal|MemFree|MemAvailable):' /proc/meminfo
	echo "max_backlog: $(sysctl -n net.rdma_ucm.max_backlog 2> /dev/null)"
} > "$OUT/guest.txt"

# The clients log the library's warnings and errors: why a connect failed.
CLI_ENV="EVR_LOG=warn"

# An evrdma-perf server on a port of its own: srv_start [ENV...]
srv_start() {
	local i
	PORT=$((PORT + 1))
	: > "$OUT/server.txt"
	env "$@" $PIN_S "$PERF" -s -a "$ADDR" -p $PORT ${SRV_ARGS:-} \
		> "$OUT/server.txt" 2>&1 &
	SRV_PID=$!
	for i in $(seq 1 100); do
		grep -q listening "$OUT/server.txt" && return 0
		sleep 0.1
	done
	note "evrdma-perf server not listening: $(cat "$OUT/server.txt")"
	return 1
}

srv_stop() {
	[ -n "$SRV_PID" ] || return
	kill "$SRV_PID" 2> /dev/null
	wait "$SRV_PID" 2> /dev/null
	log "--- server $PORT"
	cat "$OUT/server.txt" >> "$LOG"
	SRV_PID=
}

# ---- burst ----
# cmtime does each step for every connection before the next step (create
# id, resolve address, resolve route, create QP, connect, then disconnect
# and destroy); the sum of the first five step times is the setup of the
# whole burst, what evrdma-perf --burst times.
cm_burst() {
	local rep=$1 out spid i v setup total ok=0
	PORT=$((PORT + 1))
	$PIN_S timeout 300 cmtime -b "$ADDR" -p $PORT -c "$BURST" \
		>> "$LOG" 2>&1 &
	spid=$!
	for i in $(seq 1 40); do
		sleep 0.5
		out=$($PIN_C timeout 300 cmtime -s "$ADDR" -p $PORT \
			-c "$BURST" 2>&1) && ok=1 && break
	done
	# the cmtime server does not exit by itself
	kill "$spid" 2> /dev/null
	wait "$spid"
	log "--- cmtime -c $BURST (port $PORT)"
	log "$out"
	v=$(awk -F: '
		NF == 2 && $2 ~ /^ *[0-9.]+ +[0-9.]+/ {
			name = $1; gsub(/^ +| +$/, "", name)
			split($2, f, " "); all += f[1]
			if (name !~ /^(disconnect|destroy)$/) setup += f[1]
		}
		END { printf "%.6f %.6f\n", setup / 1000, all / 1000 }' \
		<<< "$out")
	setup=${v% *} total=${v#* }
	[ "$ok" = 1 ] || note "cmtime -c $BURST failed"
	csv "$OUT/burst.csv" "$rep" cmtime "$BURST" "$ok" "$setup" "$total"
}

ev_burst() {
	local rep=$1 out ok=0 v secs= n=
	srv_start || return
	log "--- evrdma-perf -t conn --burst -C $BURST"
	if out=$($PIN_C timeout 300 "$PERF" -c "$ADDR" -p $PORT -t conn \
		--burst -C "$BURST" --csv 2>> "$LOG"); then
		ok=1
	else
		note "evrdma-perf --burst -C $BURST failed"
	fi
	log "$out"
	srv_stop
	# msgs is the count of connections that came up and closed
	v=$(awk -F, 'NR == 2 { print $7, $8 }' <<< "$out")
	n=${v% *} secs=${v#* }
	[ "${n:-0}" = "$BURST" ] || ok=0
	csv "$OUT/burst.csv" "$rep" evrdma "$BURST" "$ok" "$secs" ""
}

# ---- mem ----
qps() { # QPs on DEV now
	rdma resource show 2> /dev/null |
		awk -v d="$DEV" '$2 == d ":" {
			for (i = 3; i < NF; i++) if ($i == "qp") print $(i + 1) }'
}

# snap SRQ N WHEN CLIENT_PID: one line of mem.csv
snap() {
	local srq=$1 n=$2 when=$3 cpid=$4
	local s m c
	s=$(awk '/^(VmRSS|RssAnon|RssFile|RssShmem|VmPin|VmLck):/ {
		v[$1] = $2 }
		END { printf "%d,%d,%d,%d,%d,%d", v["VmRSS:"], v["RssAnon:"],
			v["RssFile:"], v["RssShmem:"], v["VmPin:"], v["VmLck:"] }' \
		"/proc/$SRV_PID/status")
	c=0,0
	[ -z "$cpid" ] || c=$(awk '/^(VmRSS|RssAnon):/ { v[$1] = $2 }
		END { printf "%d,%d", v["VmRSS:"], v["RssAnon:"] }' \
		"/proc/$cpid/status" 2> /dev/null)
	m=$(awk '/^(MemFree|Slab|SUnreclaim|VmallocUsed|PageTables):/ {
		v[$1] = $2 }
		END { printf "%d,%d,%d,%d,%d", v["MemFree:"], v["Slab:"],
			v["SUnreclaim:"], v["VmallocUsed:"], v["PageTables:"] }' \
		/proc/meminfo)
	csv "$OUT/mem-$srq.csv" "$srq" "$n" "$when" "$(qps)" "$s" "${c:-0,0}" "$m"
}

# mem_run SRQ N: N idle connections on a fresh server; fails if they
# could not all be opened.
mem_run() {
	local srq=$1 n=$2 env=() cpid want i rc hold=15 q last=-1 same=0
	local SRV_ARGS=
	[ "$srq" = off ] && env=(EVR_SRQ=off)
	# small: the shared receive queue with 4 KiB buffers (an eager
	# size of 4088 bytes and the 8-byte header)
	[ "$srq" = small ] && SRV_ARGS="--eager-size $SMALL_EAGER"
	note "mem: $n idle connections, shared receive queue $srq${SRV_ARGS:+ ($SRV_ARGS)}"
	srv_start "${env[@]}" || return 1
	# Bind the server's ctx to the device first: its fixed cost is not
	# a connection's.
	log "--- warm-up connection"
	$PIN_C timeout 60 "$PERF" -c "$ADDR" -p $PORT -t conn -n 1 --csv \
		>> "$LOG" 2>&1 || note "warm-up connection failed"
	sleep 2
	snap "$srq" "$n" base ""
	want=$(( $(qps) + 2 * n ))	# both ends' QPs are on DEV
	log "--- evrdma-perf --load idle -C $n -D $hold (srq $srq)"
	# no timeout(1) in between: the snapshot wants the client's own PID
	# (it gives up by itself when nothing moves for 30 s)
	env $CLI_ENV $PIN_C "$PERF" -c "$ADDR" -p $PORT -t lat --load idle -C "$n" \
		--ramp $RAMP -D $hold --csv > "$OUT/idle.out" 2>> "$LOG" &
	cpid=$!
	# Every QP up, and the count steady for 2 s (the reports that start
	# the idle time follow the connect at once).
	for i in $(seq 1 1200); do
		sleep 1
		kill -0 $cpid 2> /dev/null || break
		q=$(qps)
		if [ "${q:-0}" -ge "$want" ] && [ "$q" = "$last" ]; then
			same=$((same + 1))
			[ $same -ge 2 ] && break
		else
			same=0
		fi
		last=$q
	done
	if kill -0 $cpid 2> /dev/null && [ "${q:-0}" -ge "$want" ]; then
		snap "$srq" "$n" open $cpid
		note "mem: $n open, $q QPs on $DEV after $i s"
	else
		note "mem: $n connections did not all come up ($q of $want QPs)"
	fi
	wait $cpid
	rc=$?
	cat "$OUT/idle.out" >> "$LOG"
	srv_stop
	grep -E '^(MemFree|MemAvailable):' /proc/meminfo >> "$LOG"
	[ $rc = 0 ] || note "mem: evrdma-perf -C $n exited with $rc"
	csv "$OUT/mem-$srq.csv" "$srq" "$n" "rc=$rc" "" "" "" "" "" "" "" "" "" \
		"" "" "" "" ""
	# let the kernel finish tearing the QPs down before the next run
	for i in $(seq 1 60); do
		[ "$(qps)" -le "$((want - 2 * n))" ] && break
		sleep 1
	done
	return $rc
}

# ---- light ----
light_run() {
	local conns=$1 secs=$2 out
	note "light: $conns connection(s), $LIGHT_RATE pings/s each, $secs s"
	srv_start || return
	log "--- evrdma-perf --load light --rate $LIGHT_RATE -C $conns -D $secs"
	if out=$(env $CLI_ENV $PIN_C timeout 900 "$PERF" -c "$ADDR" -p $PORT -t lat \
		--load light --rate $LIGHT_RATE -C "$conns" --ramp $RAMP \
		-D "$secs" --csv \
		2>> "$LOG"); then
		log "$out"
		[ -s "$OUT/light.csv" ] || head -1 <<< "$out" |
			sed 's/^/ok,rate,/' > "$OUT/light.csv"
		tail -n +2 <<< "$out" | sed "s/^/1,$LIGHT_RATE,/" \
			>> "$OUT/light.csv"
	else
		note "light: -C $conns failed"
		log "$out"
		echo "0,$LIGHT_RATE,lat,,light,64,$conns" >> "$OUT/light.csv"
	fi
	srv_stop
}

has() { [[ " $PARTS " == *" $1 "* ]]; }

if has burst; then
	echo "rep,tool,conns,ok,setup_s,total_s" > "$OUT/burst.csv"
	for rep in $(seq 1 $REPS); do
		note "burst $rep/$REPS: $BURST connects at once"
		cm_burst "$rep"
		ev_burst "$rep"
	done
fi

for srq in on off small; do
	has "mem-$srq" || continue
	echo "srq,conns,when,qps,srv_rss,srv_anon,srv_file,srv_shmem,srv_pin,srv_lck,cli_rss,cli_anon,memfree,slab,sunreclaim,vmalloc,pagetables" \
		> "$OUT/mem-$srq.csv"
	for n in $MEM_CONNS; do
		mem_run "$srq" "$n" || break
	done
done

if has light; then
	: > "$OUT/light.csv"
	light_run "$LIGHT_CONNS" $LIGHT_S
	light_run $((LIGHT_CONNS / 10)) $LIGHT_S
	light_run 1 $ONE_S
fi

grep -E '^(MemFree|MemAvailable):' /proc/meminfo >> "$OUT/guest.txt"
note "done"
