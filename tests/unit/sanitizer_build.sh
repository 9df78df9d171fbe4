#!/usr/bin/env bash
# Builds host test targets with a sanitizer in a separate tree and runs them (the Drm cases
# skip on the host, so this exercises the Emulated backend and everything above it).
# usage: sanitizer_build.sh asan|tsan SOURCE_DIR BUILD_DIR TARGET...
set -euo pipefail
kind=$1 src=$2 build=$3
shift 3
case $kind in
  asan) san=address,undefined ;;
  tsan) san=thread ;;
  *) echo "unknown sanitizer $kind" >&2; exit 2 ;;
esac
[ $# -gt 0 ] || { echo "no test targets given" >&2; exit 2; }
cmake -S "$src" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DHOSTRT_SANITIZE="$san" -DHOSTRT_VM_TESTS=OFF >/dev/null
cmake --build "$build" -j2 --target "$@"
# Leak checking stays on for asan; TSan must see no race and no lock-order inversion.
export ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# The pool's model test is single-threaded (ASan covers it) and takes 45 s per configuration
# under TSan; TSan runs everything else.
[ "$kind" = tsan ] && export GTEST_FILTER='-*PoolModelTest*'
for t in "$@"; do
  echo "== $kind: $t"
  "$build/tests/unit/$t" --gtest_brief=1
done
