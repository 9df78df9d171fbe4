#!/usr/bin/env bash
# Line and branch coverage of the driver and the runtime, from the gcov counters the test
# runs left behind: lcov tracefiles, a per-file table, METRIC lines, an HTML report and the
# list of functions, gotos, goto labels and catch blocks no run reached.
#
# usage: scripts/coverage-report.sh kernel OUT RUN_DIR...
#            RUN_DIR/gcov of debug-kernel VM runs (qemu/init.sh copies them after rmmod);
#            $COVERAGE_METRIC names the figures (default kernel)
#        scripts/coverage-report.sh fuzz OUT RUN_DIR
#            what the stress fuzzer alone reached: the difference of the snapshots edu_stress
#            took before and after its fuzz part (RUN_DIR/gcov-parts)
#        scripts/coverage-report.sh runtime OUT HOST_BUILD [VM_RUN_DIR...]
#            the coverage build's host counters plus the counters its binaries wrote in the VM
#            (VM_RUN_DIR/gcov-rt)
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd -P)
mode=$1 out=$2
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
rm -rf "$out"/*.info "$out/html"
cap=$src/scripts/coverage-capture.sh
py=$src/scripts/coverage.py
infos=()

case "$mode" in
kernel)
	metric=${COVERAGE_METRIC:-kernel} keep=$src/kernel
	for run in "$@"; do
		[ -d "$run/gcov" ] || continue
		"$cap" "${BUILD_DIR:-$src/build}/kernel-debug" "$run/gcov" "$out/run-$(basename "$run").info"
		infos+=("$out/run-$(basename "$run").info")
	done
	;;
fuzz)
	metric=stress_fuzz keep=$src/kernel
	snaps=$1/gcov-parts
	after=$(find "$snaps" -mindepth 1 -maxdepth 1 -name '*-fuzz' 2>/dev/null | sort | head -n1)
	[ -n "$after" ] || { echo "coverage-report: no fuzz snapshot under $snaps" >&2; exit 1; }
	before=$(find "$snaps" -mindepth 1 -maxdepth 1 | sort | grep -B1 -x "$after" | head -n1)
	for s in "$before" "$after"; do
		"$cap" "${BUILD_DIR:-$src/build}/kernel-debug" "$s" "$out/$(basename "$s").info"
	done
	python3 "$py" diff "$out/fuzz-only.info" "$out/$(basename "$after").info" "$out/$(basename "$before").info"
	infos+=("$out/fuzz-only.info")
	;;
runtime)
	metric=runtime keep=$src/userspace host=$1
	shift
	# The tests' objects too: runtime code inlined or instantiated there (the C API's
	# exception translation, a template) counts as the runtime's, by its source file.
	lcov --quiet --rc lcov_branch_coverage=1 --capture --directory "$host" \
		--output-file "$out/host.info" 2> >(grep -v 'redefined at' >&2)
	infos+=("$out/host.info")
	for run in "$@"; do
		[ -d "$run/gcov-rt" ] || continue
		# The guest wrote them under GCOV_PREFIX with the host's absolute object paths.
		"$cap" / "$run/gcov-rt" "$out/vm-$(basename "$run").info"
		infos+=("$out/vm-$(basename "$run").info")
	done
	;;
*) echo "usage: coverage-report.sh kernel|fuzz|runtime OUT ..." >&2; exit 2 ;;
esac
[ ${#infos[@]} -gt 0 ] || { echo "coverage-report: no counters found for $mode" >&2; exit 1; }

python3 "$py" merge "$out/$metric.info" "${infos[@]}" --keep "$keep"
genhtml --quiet --rc lcov_branch_coverage=1 --legend --title "$metric coverage" \
	--output-directory "$out/html" "$out/$metric.info" > /dev/null 2> >(grep -v 'redefined at' >&2)
python3 "$py" report "$out/$metric.info" --metric "$metric" --uncovered "$out/uncovered.txt" |
	tee "$out/summary.txt"
echo "coverage: $metric from ${#infos[@]} run(s); HTML in $out/html/index.html"
