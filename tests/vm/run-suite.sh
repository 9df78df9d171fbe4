#!/usr/bin/env bash
# Runs GoogleTest binaries inside one boot of the test VM in one machine configuration and
# reports both verdicts: the VM's (kernel health, pins, unload, kmemleak: for the boot as a
# whole) and each suite's (from its XML). Several suites share a boot to save its cost (a few
# seconds on Debian's kernel, much more on the debug kernel); they run one after the other,
# in the order given, and every one runs even when an earlier one failed.
#
# usage: tests/vm/run-suite.sh [--name NAME] CONFIG BINARY [gtest arguments...]
#                              [--and BINARY [args...]]...
# --name: the run's directory, build/vm/runs/CONFIG-NAME (default: the suite's name, or
# "suites" for several). $VM_SUITE_ENV (NAME=VALUE words) is exported to the suites.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
name=
if [ "${1:-}" = --name ]; then
	name=$2
	shift 2
fi
config=$1
shift
build=$(cd "${BUILD_DIR:-$src/build}" 2>/dev/null && pwd -P || echo "$src/build")

suites=() cmd=
add_suite() {
	local bin=$1 suite args
	shift
	suite=$(basename "$bin")
	bin=$(cd "$(dirname "$bin")" && pwd -P)/$suite
	# GTEST_* from the host (filters) are passed on explicitly.
	local extra=("$@")
	[ -n "${GTEST_FILTER:-}" ] && extra+=("--gtest_filter=$GTEST_FILTER")
	args=
	[ ${#extra[@]} -gt 0 ] && args=$(printf ' %q' "${extra[@]}")
	suites+=("$suite")
	cmd+="echo '== suite $suite'; hostrun /host$bin --gtest_output=xml:/out/$suite.xml$args || rc=1; "
}
while [ $# -gt 0 ]; do
	one=("$1")
	shift
	while [ $# -gt 0 ] && [ "$1" != --and ]; do
		one+=("$1")
		shift
	done
	[ $# -gt 0 ] && shift
	add_suite "${one[@]}"
done
[ ${#suites[@]} -gt 0 ] || { echo "usage: run-suite.sh CONFIG BINARY [args] [--and BINARY [args]]..." >&2; exit 2; }

if [ -z "$name" ]; then
	name=${suites[0]}
	[ ${#suites[@]} -gt 1 ] && name=suites
fi
[ -n "${VM_SUITE_ENV:-}" ] && cmd="export ${VM_SUITE_ENV}; $cmd"
out="$build/vm/runs/$config-$name"
"$src/qemu/run-vm.sh" --quiet --test-mode --config "$config" --out "$out" --timeout "${VM_TIMEOUT:-900}" -- \
	"rc=0; ${cmd}exit \$rc"
vm=$?
sum=0
for suite in "${suites[@]}"; do
	summary=$("$here/gtest-summary.sh" "$out/$suite.xml") || sum=1
	echo "$suite in $config: $summary"
done
echo "logs: $out"
[ $vm -eq 0 ] && [ $sum -eq 0 ]
