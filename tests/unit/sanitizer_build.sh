#!/usr/bin/env bash
# Builds the host tests with a sanitizer in a separate tree and runs them (Emulated backend).
# usage: sanitizer_build.sh asan|tsan SOURCE_DIR BUILD_DIR
set -euo pipefail
kind=$1 src=$2 build=$3
case $kind in
  asan) san=address,undefined ;;
  tsan) san=thread ;;
  *) echo "unknown sanitizer $kind" >&2; exit 2 ;;
esac
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHOSTRT_SANITIZE="$san" -DHOSTRT_VM_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target hostrt_conformance
# Leak checking stays on for asan; TSan must see no race and no lock-order inversion.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
"$build/tests/unit/hostrt_conformance" --gtest_brief=1
