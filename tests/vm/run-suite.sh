#!/usr/bin/env bash
# Runs one GoogleTest binary inside the test VM in one machine configuration and reports
# both verdicts: the VM's (kernel health, pins, unload) and the suite's (from its XML).
#
# usage: tests/vm/run-suite.sh CONFIG BINARY [gtest arguments...]
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
config=$1 bin=$2
shift 2
suite=$(basename "$bin")
build=$(cd "${BUILD_DIR:-$src/build}" 2>/dev/null && pwd -P || echo "$src/build")
out="$build/vm/runs/$config-$suite"
bin=$(cd "$(dirname "$bin")" && pwd -P)/$(basename "$bin")

# GTEST_* from the host (shuffle seeds, filters) are passed on explicitly.
extra=("$@")
[ -n "${GTEST_FILTER:-}" ] && extra+=("--gtest_filter=$GTEST_FILTER")
args=$(printf ' %q' "${extra[@]}")
[ ${#extra[@]} -eq 0 ] && args=
"$src/qemu/run-vm.sh" --quiet --config "$config" --out "$out" --timeout "${VM_TIMEOUT:-900}" -- \
	"hostrun /host$bin --gtest_output=xml:/out/$suite.xml$args"
vm=$?
summary=$("$here/gtest-summary.sh" "$out/$suite.xml")
sum=$?
echo "$suite in $config: $summary"
echo "logs: $out"
[ $vm -eq 0 ] && [ $sum -eq 0 ]
