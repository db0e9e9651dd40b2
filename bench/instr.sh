#!/bin/bash
# SPDX-License-Identifier: BSD-2-Clause
# bench/instr.sh: instructions per round trip of an 8-byte ping-pong,
# evrdma-perf (POLL mode, or EVENT) against ib_send_lat, and of an 8-byte call
# (evr_call, one at a time: tool evrdma-call) counted by callgrind next to
# an RDMA device (normally inside the Soft-RoCE guest of test/vm/evr-vm).
#
#   bench/instr.sh BUILDDIR OUTDIR [quick]
#
# INSTR_SIZE sets the message size (default 8); INSTR_MODE=event counts
# the event-driven ping-pongs instead (evrdma-perf -m event against
# ib_send_lat -e: each side sleeps on its completion channel between
# messages).  INSTR_TOOLS, if set,
# names the tools to count (default "evrdma evrdma-call ib_send_lat ucx";
# ucx: UCX's ucx_perftest -t tag_lat, whose libraries -- libucp, libuct,
# libucs -- count as "other").
#
# Instruction counts do not drift with host load the way times do.  Each
# side of each tool is counted on its own: that side runs under
# valgrind --tool=callgrind, its peer natively, once with N1 and once with
# N2 round trips; (count(N2) - count(N1)) / (N2 - N1) is the side's cost of
# one round trip, with start-up, connection set-up and teardown cancelled
# out.  Counted: every user-space instruction of the process (application,
# library, libev, libibverbs and its provider, libc), except the sorting of
# the latency samples at the end (callgrind --toggle-collect=qsort; both
# tools sort).  The side under callgrind runs some fifty times slower than
# its peer, so the peer's message is mostly there when it polls; the
# empty polls left (waiting, not work) count the same way for both tools,
# and move a side's count by up to a fifth from one run to the next
# (bench/results/2026-12-07-r5/instr-note.txt): compare counts of several
# runs, not one.
#
# Writes OUTDIR/instr.csv (tool,side,n1,n2,total,provider,verbs,evrdma,
# libev,libc,app,other: instructions per round trip, by the object they
# ran in), OUTDIR/instr-top.txt (each side's costliest functions per round
# trip) and keeps the callgrind files in OUTDIR/callgrind/.
set -u

BUILD=$1 OUT=$2 QUICK=${3:-}
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
# PERF, DEV, ADDR, GID, PIN_S, PIN_C
. "$SRC/bench/env.sh"
SIZE=${INSTR_SIZE:-8}
[[ $SIZE =~ ^[0-9]+$ ]] || { echo "bench/instr.sh: INSTR_SIZE: not a number of bytes" >&2; exit 2; }
EV_MODE=poll PT_EV=()
case ${INSTR_MODE:-poll} in
poll) ;;
event) EV_MODE=event PT_EV=(-e) ;;
*) echo "bench/instr.sh: INSTR_MODE: poll or event" >&2; exit 2 ;;
esac
N1=1000 N2=5000
[ "$QUICK" = quick ] && N1=200 N2=600
CG=$OUT/callgrind
LOG=$OUT/instr-log.txt
mkdir -p "$CG" || exit 1
: > "$LOG"
command -v valgrind > /dev/null || { echo "bench/instr.sh: no valgrind" >&2; exit 1; }
# (--collect-atstart=yes after --toggle-collect, which turns it off)
VG=(valgrind --tool=callgrind --toggle-collect=qsort --collect-atstart=yes
	--compress-strings=no --compress-pos=no)

PORT=7700

# Self cost by object of one callgrind file: "total provider verbs evrdma
# libev libc app other".  A cost line after calls= is the call's
# inclusive cost, counted in the callee already.
by_object() {
	awk '
	function cls(o) {
		if (o ~ /\/libibverbs\/lib[^\/]*-rdmav[0-9]+\.so/) return "provider"
		if (o ~ /libibverbs\.so/) return "verbs"
		if (o ~ /libevrdma\.so/) return "evrdma"
		if (o ~ /libev\.so/) return "libev"
		if (o ~ /libc\.so/) return "libc"
		if (o ~ /(evrdma-perf|ib_send_lat|ucx_perftest)$/)
			return "app"
		return "other"
	}
	# object names: "ob=NAME", or compressed "ob=(ID) NAME" the first
	# time (in an ob= or a cob= line) and "ob=(ID)" after
	function obj(o,   id) {
		if (!match(o, /^\([0-9]+\)/))
			return o
		id = substr(o, 2, RLENGTH - 2)
		if (RLENGTH < length(o))
			name[id] = substr(o, RLENGTH + 2)
		return name[id]
	}
	/^ob=/ { ob = cls(obj(substr($0, 4))); next }
	/^cob=/ { obj(substr($0, 5)); next }
	/^calls=/ { skip = 1; next }
	/^[0-9+*-]/ {
		if (skip) { skip = 0; next }
		c[ob] += $NF; t += $NF; next
	}
	END {
		printf "%d %d %d %d %d %d %d %d\n", t, c["provider"], c["verbs"],
			c["evrdma"], c["libev"], c["libc"], c["app"], c["other"]
	}' "$1"
}

# Self cost by function of one callgrind file, "function|count" sorted by
# function (for join).
fns() {
	callgrind_annotate --auto=no --threshold=100 "$1" |
		awk -v src="$SRC/" '/^ *[0-9,]+ .*[^ ]/ && !/PROGRAM TOTALS/ {
			v = $1; gsub(",", "", v); $1 = ""
			sub(/^ *(\( *[0-9.]+%\) *)?/, "")
			# source files relative to the tree, objects by name
			while ((i = index($0, src)) > 0)
				$0 = substr($0, 1, i - 1) substr($0, i + length(src))
			gsub(/\[[^]]*\//, "[")
			print $0 "|" v }' |
		LC_ALL=C sort -t'|' -k1,1
}

# The server and the client of one evrdma-perf ping-pong (TOOL evrdma:
# -t lat) or of calls one at a time (evrdma-call: -t rpc -w 1), SIDE
# under callgrind: ev_run TOOL SIDE N
ev_run() {
	local tool=$1 side=$2 n=$3 f=$CG/$1-$2-$3 spid i sv=() cv=()
	local test=(-t lat)
	[ "$tool" = evrdma-call ] && test=(-t rpc -w 1)
	PORT=$((PORT + 1))
	[ "$side" = server ] && sv=("${VG[@]}" --callgrind-out-file=$f.cg)
	[ "$side" = client ] && cv=("${VG[@]}" --callgrind-out-file=$f.cg)
	$PIN_S "${sv[@]}" "$PERF" -s -a "$ADDR" -p $PORT > "$f.srv" 2>&1 &
	spid=$!
	for i in $(seq 1 300); do
		grep -q listening "$f.srv" && break
		sleep 0.2
	done
	$PIN_C timeout 600 "${cv[@]}" "$PERF" -c "$ADDR" -p $PORT "${test[@]}" \
		-m $EV_MODE -S $SIZE -n "$n" > "$f.cli" 2>&1 ||
		echo "evrdma-perf ${test[*]} $side $n failed" >> "$LOG"
	kill -INT "$spid"
	wait "$spid"
	cat "$f.srv" "$f.cli" >> "$LOG"
}

# UCX's tag-matching ping-pong (ucx_perftest -t tag_lat over rc_verbs,
# wired up as in guest.sh), SIDE under callgrind: ucx_run SIDE N.
# (rsockets' rstream is not counted: it busy-polls while it waits, and
# its counts do not grow with the round trips.)
ucx_run() {
	local side=$1 n=$2 f=$CG/ucx-$1-$2 spid i sv=() cv=()
	local env=(env UCX_TLS=rc_verbs,ud_verbs "UCX_NET_DEVICES=$DEV:1"
		UCX_IB_GID_INDEX=0)
	PORT=$((PORT + 1))
	[ "$side" = server ] && sv=("${VG[@]}" --callgrind-out-file=$f.cg)
	[ "$side" = client ] && cv=("${VG[@]}" --callgrind-out-file=$f.cg)
	$PIN_S timeout 900 "${env[@]}" "${sv[@]}" ucx_perftest -p $PORT \
		> "$f.srv" 2>&1 &
	spid=$!
	for i in $(seq 1 120); do
		sleep 0.5
		# (until the server, slowed down by callgrind, listens)
		$PIN_C timeout 900 "${env[@]}" "${cv[@]}" ucx_perftest "$ADDR" \
			-p $PORT -t tag_lat -s $SIZE -n "$n" > "$f.cli" 2>&1 &&
			break
	done
	wait "$spid"
	cat "$f.srv" "$f.cli" >> "$LOG"
}

pt_run() {
	local side=$1 n=$2 f=$CG/ib_send_lat-$1-$2 spid i sv=() cv=()
	PORT=$((PORT + 1))
	[ "$side" = server ] && sv=("${VG[@]}" --callgrind-out-file=$f.cg)
	[ "$side" = client ] && cv=("${VG[@]}" --callgrind-out-file=$f.cg)
	$PIN_S timeout 600 "${sv[@]}" ib_send_lat -d "$DEV" -x "$GID" \
		-p $PORT "${PT_EV[@]}" -s $SIZE -n "$n" > "$f.srv" 2>&1 &
	spid=$!
	for i in $(seq 1 240); do
		sleep 0.5
		$PIN_C timeout 600 "${cv[@]}" ib_send_lat -d "$DEV" -x "$GID" \
			-p $PORT "${PT_EV[@]}" -s $SIZE -n "$n" "$ADDR" \
			> "$f.cli" 2>&1
		grep -q "Couldn't connect\|Unable to init" "$f.cli" || break
	done
	wait "$spid"
	cat "$f.srv" "$f.cli" >> "$LOG"
}

echo "tool,side,n1,n2,total,provider,verbs,evrdma,libev,libc,app,other" \
	> "$OUT/instr.csv"
: > "$OUT/instr-top.txt"
for tool in ${INSTR_TOOLS:-evrdma evrdma-call ib_send_lat ucx}; do
	if [ "$tool" = ucx ] && [ $EV_MODE = event ]; then
		echo "bench/instr.sh: ucx_perftest has no event-driven ping-pong: not counted" >&2
		continue
	fi
	for side in server client; do
		for n in $N1 $N2; do
			case $tool in
			evrdma*) ev_run $tool $side $n ;;
			ucx) ucx_run $side $n ;;
			*) pt_run $side $n ;;
			esac
		done
		a=$CG/$tool-$side-$N1.cg b=$CG/$tool-$side-$N2.cg
		if [ ! -s "$a" ] || [ ! -s "$b" ]; then
			echo "bench/instr.sh: no count for $tool $side" >&2
			continue
		fi
		# (temporary files, not <(...): the guest may have no /dev/fd)
		by_object "$a" > "$CG/a.txt"
		by_object "$b" > "$CG/b.txt"
		paste -d' ' "$CG/a.txt" "$CG/b.txt" |
			awk -v t=$tool -v s=$side -v n1=$N1 -v n2=$N2 '{
				printf "%s,%s,%d,%d", t, s, n1, n2
				for (i = 1; i <= 8; i++)
					printf ",%.0f", ($(i + 8) - $i) / (n2 - n1)
				printf "\n"
			}' >> "$OUT/instr.csv"
		# the costliest functions, per round trip
		fns "$a" > "$CG/a.txt"
		fns "$b" > "$CG/b.txt"
		{
			echo "== $tool $side: instructions per round trip by function (self)"
			LC_ALL=C join -t'|' -j1 -a2 -e0 -o 0,1.2,2.2 "$CG/a.txt" "$CG/b.txt" |
				awk -F'|' -v d=$((N2 - N1)) '{ v = ($3 - $2) / d
					if (v >= 5) printf "%6.0f  %s\n", v, $1 }' |
				sort -rn | head -40
			echo
		} >> "$OUT/instr-top.txt"
		rm -f "$CG/a.txt" "$CG/b.txt"
	done
done
cat "$OUT/instr.csv"
