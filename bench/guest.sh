#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# bench/guest.sh: the measurements of bench/run, next to an RDMA device
# (normally inside the Soft-RoCE guest of test/vm/evr-vm).
#
#   bench/guest.sh BUILDDIR OUTDIR [REPS [quick]]
#
# Runs the perftest baselines and evrdma-perf alternately, REPS times each
# (default 3), and writes one line per run to OUTDIR/raw.csv; everything
# the tools print goes to OUTDIR/log.txt.  With two or more CPUs, every
# server (perftest's and evrdma-perf's) runs on CPU 0 and every client on
# CPU 1: two busy-polling processes left to share one CPU would each wait
# for the other's time slice.  "quick" shortens every run (to
# try the script, not to measure).  Environment: BENCH_DEV (rxe0),
# BENCH_ADDR (10.77.0.1), BENCH_GID (perftest's GID index; 1 is the
# IPv4-mapped RoCE v2 GID of rxe0).
set -u

BUILD=$1 OUT=$2 REPS=${3:-3} QUICK=${4:-}
# PERF, DEV, ADDR, GID, PIN_S, PIN_C
. "$(dirname "${BASH_SOURCE[0]}")/env.sh"
LOG=$OUT/log.txt RAW=$OUT/raw.csv

# Message sizes and iteration counts (chosen so that one pass stays short
# under software emulation).
LAT_SIZES="8 64 4096 65536"
LAT_ITERS=1000
RATE_ITERS=30000
BW_SIZES="65536 1048576"
declare -A BW_ITERS=([65536]=500 [1048576]=50)
CONNS=50
IDLE_S=10 LIGHT_S=5 SAT_S=3
if [ "$QUICK" = quick ]; then
	LAT_SIZES="64 4096" LAT_ITERS=200 RATE_ITERS=5000
	BW_SIZES="65536 1048576" BW_ITERS=([65536]=50 [1048576]=10)
	CONNS=10 IDLE_S=1 LIGHT_S=1 SAT_S=1
fi

PORT=20000 SRV_PID= REG_PID= BIG_PID=
# The second evrdma-perf server's port: EVR_MW=inside (below); the
# third's: eager messages up to 64 KiB
REG_PORT=7473 BIG_PORT=7474
mkdir -p "$OUT" || exit 1
: > "$LOG"
COLS="rep,group,tool,mode,load,size,lat_med,lat_p99,lat_p999,msg_s,mb_s"
COLS+=",cpu_us_msg,cpu_pct,srv_cpu_pct,srv_cpu_us_msg,switches,srv_switches"
echo "$COLS" > "$RAW"

log() { echo "$*" >> "$LOG"; }
note() { echo "bench: [${SECONDS}s] $*" >&2; log "### [${SECONDS}s] $*"; }
# row REP GROUP TOOL MODE LOAD SIZE [metrics...]
row() {
	local IFS=,
	echo "$*" >> "$RAW"
}

# A perftest pair: pt TOOL ARGS...; the client, retried until the server
# listens, leaves its output in PT_OUT.
pt() {
	local tool=$1 i out spid
	shift
	PORT=$((PORT + 1))
	$PIN_S timeout 120 "$tool" -d "$DEV" -x "$GID" -p $PORT "$@" \
		>> "$LOG" 2>&1 &
	spid=$!
	for i in $(seq 1 80); do
		out=$($PIN_C timeout 120 "$tool" -d "$DEV" -x "$GID" -p $PORT \
			"$@" "$ADDR" 2>&1)
		grep -q "Couldn't connect\|Unable to init" <<< "$out" || break
		sleep 0.25
	done
	wait $spid
	log "--- $tool $* (port $PORT)"
	log "$out"
	PT_OUT=$out
}

# perftest estimates the CPU clock rate for its reports and, under
# emulation, sometimes gives up ("Correlation coefficient ... Can't produce
# a report") or prints inf: such a run is repeated, up to 3 times.
valid() { [[ $1 =~ ^[0-9]+(\.[0-9]+)?(,[0-9]+(\.[0-9]+)?)*$ ]]; }

# ib_send_lat: t_typical (the median), 99% and 99.9% percentiles.
# lat_pt REP LABEL MODE SIZE PERFTEST-ARGS...
lat_pt() {
	local rep=$1 label=$2 mode=$3 size=$4 v try
	shift 4
	for try in 1 2 3; do
		pt ib_send_lat "$@"
		v=$(awk '/t_typical/ { h = 1; next }
			h && NF >= 9 && $1 ~ /^[0-9]+$/ {
				print $5 "," $8 "," $9; exit }' <<< "$PT_OUT")
		valid "$v" && break
		note "no result from ib_send_lat $* (try $try)"
		v=",,"
	done
	row "$rep" lat "$label" "$mode" "" "$size" "$v" "" "" "" "" "" "" "" ""
}

# ib_*_bw: BW average is in MiB/s; msg/s derived from it (the MsgRate
# column has too few digits for large messages).
# bw_pt REP GROUP TOOL SIZE PERFTEST-ARGS...
bw_pt() {
	local rep=$1 group=$2 tool=$3 size=$4 v try
	shift 4
	for try in 1 2 3; do
		pt "$tool" "$@"
		v=$(awk -v s="$size" '/MsgRate/ { h = 1; next }
			h && NF >= 5 && $1 ~ /^[0-9]+$/ {
				b = $4 * 1048576
				printf "%.3f,%.3f", b / s, b / 1e6; exit
			}' <<< "$PT_OUT")
		valid "$v" && break
		note "no result from $tool $* (try $try)"
		v=","
	done
	row "$rep" "$group" "$tool" poll "" "$size" "" "" "" "$v" \
		"" "" "" "" "" ""
}

# The evrdma-perf server, started once and again if it died; it sleeps
# between tests.
srv_up() {
	local i
	if [ -n "$SRV_PID" ] && kill -0 "$SRV_PID" 2>/dev/null; then return; fi
	: > "$OUT/server.txt"
	$PIN_S "$PERF" -s -a "$ADDR" > "$OUT/server.txt" 2>&1 &
	SRV_PID=$!
	for i in $(seq 1 100); do
		grep -q listening "$OUT/server.txt" && return
		sleep 0.1
	done
	note "evrdma-perf server not listening: $(cat "$OUT/server.txt")"
}

# An evrdma-perf server beside the first, started once and again if it
# died: aux_up PIDVAR LOGNAME WHAT [ENV=VALUE...] -- ARGS...
aux_up() {
	local -n pid=$1
	local txt=$OUT/$2 what=$3 envs=() i
	shift 3
	while [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then return; fi
	: > "$txt"
	env "${envs[@]}" $PIN_S "$PERF" -s -a "$ADDR" "$@" > "$txt" 2>&1 &
	pid=$!
	for i in $(seq 1 100); do
		grep -q listening "$txt" && return
		sleep 0.1
	done
	note "evrdma-perf $what server not listening: $(cat "$txt")"
}

# A second server, and its clients, with EVR_MW=inside: a memory window
# bound over each rendezvous message, even on rdma_rxe, whose windows the
# library does not use by default; against a registration per message
# (the default there) it is the windows' cost.
reg_up() {
	aux_up REG_PID server-reg.txt EVR_MW=inside EVR_MW=inside -- \
		-p $REG_PORT
}

# A third server, and its clients, with --eager-size 65536: receive
# buffers as large as ib_send_lat's at 64 KiB, so that messages up to
# 64 KiB go eager, as a single SEND, as perftest's do.
big_up() {
	aux_up BIG_PID server-big.txt "--eager-size 65536" -- \
		-p $BIG_PORT --eager-size 65536
}

# Its 64 KiB receive buffers are not left beside the other tests.
big_down() {
	[ -n "$BIG_PID" ] || return
	kill "$BIG_PID"
	wait "$BIG_PID"
	cat "$OUT/server-big.txt" >> "$LOG"
	BIG_PID=
}

# evrdma-perf client: ev REP GROUP ARGS...; one raw row per CSV line.  A
# failed run (its error is in the log) is repeated once.  With EV_MW=1,
# against the EVR_MW=inside server and with EVR_MW=inside itself; with
# EV_BIG=1, against the --eager-size 65536 server and with that size
# itself.
ev() {
	local rep=$1 group=$2 out try
	local env=() port=()
	shift 2
	[ "${EV_MW:-}" = 1 ] && env=(EVR_MW=inside) port=(-p $REG_PORT)
	[ "${EV_BIG:-}" = 1 ] && port=(-p $BIG_PORT --eager-size 65536)
	for try in 1 2; do
		if [ "${EV_MW:-}" = 1 ]; then reg_up;
		elif [ "${EV_BIG:-}" = 1 ]; then big_up; else srv_up; fi
		log "--- ${env[*]} evrdma-perf ${port[*]} $*"
		out=$(env "${env[@]}" $PIN_C timeout 300 "$PERF" -c "$ADDR" \
			"${port[@]}" --csv "$@" 2>> "$LOG") &&
			break
		note "evrdma-perf $* failed (try $try)"
		out=
	done
	log "$out"
	[ -n "$out" ] || return
	awk -F, -v rep="$rep" -v g="$group" 'NR > 1 {
		printf "%s,%s,evrdma,%s,%s,%s,%s,%s,%s,%s,%s,",
			rep, g, $2, $3, $4, $9, $10, $11, $12, $13
		printf "%s,%s,%s,%s,%s,%s\n", $14, $15, $17, $16, $18, $19
	}' <<< "$out" >> "$RAW"
}

# cmtime runs each step (create id, resolve address and route, create QP,
# connect, disconnect, destroy) for all its connections at once; the sum of
# the step times is the wall time of the whole cycle.  cm_pt REP
cm_pt() {
	local out spid i v try
	for try in 1 2 3; do
		PORT=$((PORT + 1))
		$PIN_S timeout 120 cmtime -b "$ADDR" -p $PORT -c $CONNS \
			>> "$LOG" 2>&1 &
		spid=$!
		for i in $(seq 1 40); do
			sleep 0.5
			out=$($PIN_C timeout 120 cmtime -s "$ADDR" -p $PORT \
				-c $CONNS 2>&1) &&
				break
		done
		# the cmtime server does not exit by itself
		kill "$spid" 2> /dev/null
		wait "$spid"
		log "--- cmtime -c $CONNS (port $PORT)"
		log "$out"
		v=$(awk -v c=$CONNS '$2 == ":" || $3 == ":" { t += $(NF - 3) }
			END { if (t > 0) printf "%.3f", c / (t / 1000) }' \
			<<< "$out")
		valid "$v" && break
		note "no result from cmtime (try $try)"
		v=
	done
	row "$1" conn cmtime "" "" 0 "" "" "" "$v" "" "" "" "" "" "" ""
}

# Other libraries on the same device (issue 17), each as a new user would
# run it.  UCX: ucx_perftest's tag-matching ping-pong over rc_verbs, wired
# up over ud_verbs, on rxe0's GID 0 (with the IPv4-mapped GID its UD
# wire-up times out); it reports the median.  rsockets: rstream back to
# back, busy polling (-T n) and blocking (-T b: rsockets polls a few
# microseconds, then blocks), which reports the mean; and bench/rs-ping,
# blocking rsockets paced at 200 ping-pongs/s like evrdma-perf's light
# load.
UCX_ENV=(UCX_TLS=rc_verbs,ud_verbs "UCX_NET_DEVICES=$DEV:1" UCX_IB_GID_INDEX=0)
RSPING=$BUILD/bench/rs-ping
PEER_SIZES="8 64"

# ucx_pt REP SIZE
ucx_pt() {
	local rep=$1 size=$2 spid i out v= try
	for try in 1 2 3; do
		PORT=$((PORT + 1))
		env "${UCX_ENV[@]}" $PIN_S timeout 120 ucx_perftest -p $PORT \
			>> "$LOG" 2>&1 &
		spid=$!
		for i in $(seq 1 40); do
			sleep 0.25
			out=$(env "${UCX_ENV[@]}" $PIN_C timeout 120 ucx_perftest \
				"$ADDR" -p $PORT -t tag_lat -s "$size" \
				-n $((LAT_ITERS * 2)) 2>&1) && break
			grep -q "refused" <<< "$out" || break
		done
		wait $spid
		log "--- ucx_perftest -t tag_lat -s $size (port $PORT)"
		log "$out"
		v=$(awk '$1 == "Final:" { print $3; exit }' <<< "$out")
		valid "$v" && break
		note "no result from ucx_perftest -s $size (try $try)"
		v=
	done
	row "$rep" lat "ucx_perftest" poll "" "$size" "$v" "" "" "" "" "" "" \
		"" "" "" ""
}

# rstream_pt REP T SIZE: T is rstream's -T (n or b)
rstream_pt() {
	local rep=$1 t=$2 size=$3 spid i out v= try
	local args=(-p 0 -S "$size" -C 1 -I $((LAT_ITERS * 2)) -T "$t")
	for try in 1 2 3; do
		PORT=$((PORT + 1))
		args[1]=$PORT
		$PIN_S timeout 120 rstream -b "$ADDR" "${args[@]}" >> "$LOG" 2>&1 &
		spid=$!
		for i in $(seq 1 40); do
			sleep 0.25
			out=$($PIN_C timeout 120 rstream -s "$ADDR" "${args[@]}" 2>&1) &&
				break
		done
		wait $spid
		log "--- rstream ${args[*]}"
		log "$out"
		v=$(awk '$1 == "custom" { print $NF }' <<< "$out" | tail -1)
		valid "$v" && break
		note "no result from rstream -T $t -S $size (try $try)"
		v=
	done
	row "$rep" lat "rstream -T $t" poll "" "$size" "$v" "" "" "" "" "" "" \
		"" "" "" ""
}

# rsping_light REP: 64 bytes, 200 ping-pongs/s for LIGHT_S seconds
rsping_light() {
	local rep=$1 spid i out v=
	PORT=$((PORT + 1))
	$PIN_S "$RSPING" -s "$ADDR" -p $PORT -S 64 >> "$LOG" 2>&1 &
	spid=$!
	for i in $(seq 1 40); do
		sleep 0.25
		out=$($PIN_C timeout 120 "$RSPING" -c "$ADDR" -p $PORT -S 64 \
			-r 200 -D "$LIGHT_S" 2>&1) && break
	done
	kill "$spid" 2> /dev/null
	wait "$spid"
	log "--- rs-ping -S 64 -r 200 -D $LIGHT_S (port $PORT)"
	log "$out"
	# size,rate,pings,lat_med_us,lat_p99_us,cpu_pct
	v=$(awk -F, -v d="$LIGHT_S" 'NR == 2 {
		printf "%s,%s,,%.3f,,,%s", $4, $5, $3 / d, $6 }' <<< "$out")
	valid "${v%%,*}" || { note "no result from rs-ping"; v=; }
	row "$rep" mode rs-ping blocking light 64 "${v:-,,,,,,}" "" "" "" ""
}

ev_sizes=$(echo $LAT_SIZES | tr ' ' ,)
for rep in $(seq 1 "$REPS"); do
	note "pass $rep/$REPS: latency"
	for s in $LAT_SIZES; do
		lat_pt "$rep" ib_send_lat poll "$s" -s "$s" -n $LAT_ITERS
	done
	# 4 KiB plus an 8-byte header: the bytes an evrdma message of 4 KiB
	# puts on the wire with its header in band (EVR_IMM=off, or a
	# call), one packet more at an MTU of 1024 or 4096
	case " $LAT_SIZES " in *" 4096 "*)
		lat_pt "$rep" "ib_send_lat +8" poll 4096 -s 4104 -n $LAT_ITERS ;;
	esac
	ev "$rep" lat -t lat -m poll -S "$ev_sizes" -n $LAT_ITERS
	ev "$rep" lat -t lat -m adaptive -S "$ev_sizes" -n $LAT_ITERS
	for s in $LAT_SIZES; do
		lat_pt "$rep" "ib_send_lat -e" event "$s" -e -s "$s" \
			-n $LAT_ITERS
	done
	ev "$rep" lat -t lat -m event -S "$ev_sizes" -n $LAT_ITERS
	for s in $PEER_SIZES; do
		ucx_pt "$rep" "$s"
		rstream_pt "$rep" n "$s"
		rstream_pt "$rep" b "$s"
	done
	# rendezvous through memory windows (65536: above the eager size)
	EV_MW=1 ev "$rep" latmw -t lat -m poll -S 65536 -n $LAT_ITERS
	# as perftest sends: from registered memory, with a completion
	# (--send-cb: without a copy), eager up to 64 KiB
	case " $LAT_SIZES " in *" 65536 "*)
		EV_BIG=1 ev "$rep" latzc -t lat -m poll -S 4096,65536 \
			-n $LAT_ITERS --send-cb
		big_down ;;
	esac

	note "pass $rep/$REPS: message rate"
	bw_pt "$rep" rate ib_send_bw 64 -s 64 -n $RATE_ITERS
	ev "$rep" rate -t rate -m poll -S 64 -n $RATE_ITERS -w 128
	ev "$rep" rate -t rate -m adaptive -S 64 -n $RATE_ITERS -w 128

	note "pass $rep/$REPS: bandwidth"
	for s in $BW_SIZES; do
		bw_pt "$rep" bw ib_send_bw "$s" -s "$s" -n "${BW_ITERS[$s]}"
		bw_pt "$rep" bw ib_read_bw "$s" -s "$s" -n "${BW_ITERS[$s]}"
		ev "$rep" bw -t bw -m poll -S "$s" -n "${BW_ITERS[$s]}"
		ev "$rep" bw -t bw -m adaptive -S "$s" -n "${BW_ITERS[$s]}"
		EV_MW=1 ev "$rep" bwmw -t bw -m poll -S "$s" \
			-n "${BW_ITERS[$s]}"
	done

	note "pass $rep/$REPS: connection rate"
	cm_pt "$rep"
	# 10 waves: the first one also grows the client's registered buffer
	# pool (64 receive buffers per connection), which a long-running
	# process does once; cmtime posts no buffers at all.
	ev "$rep" conn -t conn -n $((CONNS * 10)) -C $CONNS
done

for rep in $(seq 1 "$REPS"); do
	note "pass $rep/$REPS: rsockets light"
	rsping_light "$rep"
	for m in event poll adaptive; do
		note "pass $rep/$REPS: $m idle, light, sat"
		ev "$rep" mode -t lat --load idle -D $IDLE_S -m $m
		ev "$rep" mode -t lat --load light -D $LIGHT_S -m $m
		ev "$rep" mode -t lat --load sat -D $SAT_S -w 16 -m $m
	done
done

note "instructions per round trip (callgrind)"
bash "$(dirname "${BASH_SOURCE[0]}")/instr.sh" "$BUILD" "$OUT" $QUICK >> "$LOG" 2>&1 ||
	note "bench/instr.sh failed"
note "instructions per round trip in EVENT mode (callgrind)"
rm -rf "$OUT/event"
INSTR_MODE=event INSTR_TOOLS="evrdma ib_send_lat" \
	bash "$(dirname "${BASH_SOURCE[0]}")/instr.sh" "$BUILD" "$OUT/event" \
	$QUICK >> "$LOG" 2>&1 || note "bench/instr.sh (EVENT) failed"
for f in instr.csv instr-top.txt; do
	[ ! -e "$OUT/event/$f" ] || cp "$OUT/event/$f" "$OUT/event-$f"
done

if [ -n "$SRV_PID" ]; then
	kill "$SRV_PID"
	wait "$SRV_PID"
	cat "$OUT/server.txt" >> "$LOG"
fi
if [ -n "$REG_PID" ]; then
	kill "$REG_PID"
	wait "$REG_PID"
	cat "$OUT/server-reg.txt" >> "$LOG"
fi
note "done"
