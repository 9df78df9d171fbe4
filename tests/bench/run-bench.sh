#!/usr/bin/env bash
# `make bench`: runs the benchmarks (in the VM where they need the device) and collects every
# "METRIC <name> <value> <unit>" line into BUILD/bench/metrics.txt.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
build=${BUILD_DIR:-$src/build}
bin="$build/cmake/tests/bench"
mkdir -p "$build/bench"
metrics="$build/bench/metrics.txt"
: > "$metrics"

"$src/qemu/run-vm.sh" --quiet --config noiommu --out "$build/bench/vm-noiommu" -- \
	"hostrun $bin/dma_selftest_bench 5"
grep -h '^METRIC ' "$build/bench/vm-noiommu/cmd.log" | tr -d '\r' >> "$metrics"

echo "---- $metrics"
cat "$metrics"
