# SPDX-License-Identifier: BSD-2-Clause
# bench/env.sh: what the guest-side bench scripts (guest.sh, instr.sh,
# many-guest.sh) share; sourced with BUILD set to the build directory.
#
# PERF: evrdma-perf, without libtool's wrapper script when the build has
# its real binary (under emulation the wrapper's start-up costs more than
# a short test), LD_LIBRARY_PATH then pointing at the built library;
# DEV, ADDR, GID: the RDMA device, the address the servers listen on and
# perftest's GID index (BENCH_DEV, BENCH_ADDR, BENCH_GID; 1 is the
# IPv4-mapped RoCE v2 GID of rxe0); PIN_S, PIN_C: with two or more CPUs,
# servers on CPU 0 and clients on CPU 1, for every tool -- two
# busy-polling processes left to share one CPU would each wait for the
# other's time slice.

PERF=$BUILD/tools/evrdma-perf
if [ -x "$BUILD/tools/.libs/evrdma-perf" ] && [ -d "$BUILD/lib/.libs" ]; then
	PERF=$BUILD/tools/.libs/evrdma-perf
	LD_LIBRARY_PATH=$BUILD/lib/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	export LD_LIBRARY_PATH
fi
DEV=${BENCH_DEV:-rxe0}
ADDR=${BENCH_ADDR:-10.77.0.1}
GID=${BENCH_GID:-1}
PIN_S= PIN_C=
if [ "$(nproc)" -ge 2 ] && command -v taskset > /dev/null; then
	PIN_S="taskset -c 0" PIN_C="taskset -c 1"
fi
