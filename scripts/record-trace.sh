#!/usr/bin/env bash
# make trace: boots the VM, records the driver's tracepoints (edu_accel:*, with drm_sched's
# gpu_scheduler:* beside them) while `hostrt-demo --workload` runs, and turns the trace into a
# timeline: BUILD/trace/timeline.json (ui.perfetto.dev, chrome://tracing) and .png/.svg.
#   usage: scripts/record-trace.sh [CONFIG] [--check]
# --check also validates the JSON and the trace's invariants (scripts/trace-timeline.py).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd -P)
build=${BUILD_DIR:-$src/build}
config=${1:-noiommu}
check=${2:-}
out=$build/trace
rm -rf "$out/vm" && mkdir -p "$out"
t=/sys/kernel/tracing
"$src/qemu/run-vm.sh" --quiet --config "$config" --out "$out/vm" -- \
	"echo 8192 > $t/buffer_size_kb && echo > $t/trace && echo 1 > $t/events/edu_accel/enable && \
	 echo 1 > $t/events/gpu_scheduler/enable && \
	 hostrun \$BUILD/cmake/userspace/hostrt-demo --workload; rc=\$?; \
	 echo 0 > $t/events/enable; cat $t/trace > /out/trace.txt; exit \$rc"
# Debian's python3, which has python3-matplotlib, even where another python3 comes first.
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
$py "$src/scripts/trace-timeline.py" "$out/vm/trace.txt" "$out/timeline" $check
echo "timeline: open $out/timeline.json in https://ui.perfetto.dev (or chrome://tracing); picture: $out/timeline.png"
