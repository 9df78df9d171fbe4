#!/usr/bin/env bash
# Builds host test targets instrumented in a separate tree and runs them (the Drm cases skip
# on the host, so this exercises the Emulated backend and everything above it):
#   asan, tsan  sanitizers; any report fails the test
#   coverage    gcov counters, zeroed first, read by scripts/coverage-report.sh together with
#               the Drm cases' counters from the VM (vm.iommu.coverage)
# usage: instrumented_build.sh asan|tsan|coverage SOURCE_DIR BUILD_DIR TARGET...
set -euo pipefail
kind=$1 src=$2 build=$3
shift 3
case $kind in
  asan) opts=(-DHOSTRT_SANITIZE=address,undefined) ;;
  tsan) opts=(-DHOSTRT_SANITIZE=thread) ;;
  coverage) opts=(-DHOSTRT_COVERAGE=ON) ;;
  *) echo "unknown instrumentation $kind" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "no test targets given" >&2; exit 2; }
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug "${opts[@]}" -DHOSTRT_VM_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target "$@"
# Leak checking stays on for asan; TSan must see no race and no lock-order inversion.
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# The pool's model test is single-threaded (ASan covers it) and takes 45 s per configuration
# under TSan. RuntimeTrace's traced children start the emulated engine's threads after a fork
# of the (multi-threaded) test process, which TSan refuses to follow. TSan runs everything else.
[ "$kind" = tsan ] && export GTEST_FILTER='-*PoolModelTest*:*RuntimeTrace*:*PoolForkExitTest*'
# Counts of an earlier run (or of a since-rebuilt object) must not add to this one's.
[ "$kind" = coverage ] && find "$build" -name '*.gcda' -delete
for t in "$@"; do
  echo "== $kind: $t"
  "$build/tests/unit/$t" --gtest_brief=1
done
