#!/usr/bin/env bash
# make trace: boots the VM, records the driver's tracepoints (edu_accel:*, with drm_sched's
# gpu_scheduler:* and dma_fence:* beside them) and hostrt's own events (HOSTRT_TRACE, one file
# per process) while `hostrt-demo --workload` runs, all on CLOCK_MONOTONIC, and turns them into
# one timeline: BUILD/trace/timeline.json (ui.perfetto.dev, chrome://tracing) and .png/.svg.
#   usage: scripts/record-trace.sh [CONFIG] [--check] [--run]
# --check also validates the JSON and the trace's invariants (scripts/trace-timeline.py).
# --run is make run: the showcase (hostrt-demo on every device) first, untraced, then the
# traced workload, and a short report of what the trace shows.
# DEMO=<path> runs another build's hostrt-demo (e.g. one with HOSTRT_POOL_UNSAFE_REUSE, which
# --check must catch).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd -P)
build=${BUILD_DIR:-$src/build}
config=${1:-noiommu}
demo_path=${DEMO:-\$BUILD/cmake/userspace/hostrt-demo}
check= showcase=: report=
for a in "${@:2}"; do
	case $a in
	--check) check=--check ;;
	--run) showcase="hostrun $demo_path > /out/demo.txt" report=--report ;;
	*) echo "record-trace: unknown option $a" >&2; exit 2 ;;
	esac
done
out=$build/trace
demo=$demo_path
rm -rf "$out/vm" && mkdir -p "$out"
t=/sys/kernel/tracing
vm=0
"$src/qemu/run-vm.sh" --quiet --config "$config" --out "$out/vm" -- \
	"$showcase; shown=\$?; \
	 echo 8192 > $t/buffer_size_kb && echo mono > $t/trace_clock && echo > $t/trace && \
	 echo 1 > $t/events/edu_accel/enable && echo 1 > $t/events/gpu_scheduler/enable && \
	 echo 1 > $t/events/dma_fence/enable && \
	 HOSTRT_TRACE=/out/hostrt.trace hostrun $demo --workload > /out/workload.txt; rc=\$?; \
	 cat /out/workload.txt; [ \$shown -eq 0 ] || rc=\$shown; \
	 echo 0 > $t/events/enable; cat $t/trace > /out/trace.txt; exit \$rc" || vm=$?
# Debian's python3, which has python3-matplotlib, even where another python3 comes first.
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
# A failed workload's trace is read too: it may say why it failed.
[ -f "$out/vm/trace.txt" ] || exit 1
[ -z "$report" ] || cat "$out/vm/demo.txt" "$out/vm/workload.txt" 2>/dev/null || true
rc=0
$py "$src/scripts/trace-timeline.py" "$out/vm/trace.txt" "$out/timeline" --runtime "$out"/vm/hostrt.trace* $check $report || rc=$?
[ -n "$report" ] ||
	echo "timeline: open $out/timeline.json in https://ui.perfetto.dev (or chrome://tracing); picture: $out/timeline.png"
[ "$vm" -eq 0 ] && [ "$rc" -eq 0 ]
