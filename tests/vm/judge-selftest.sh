#!/usr/bin/env bash
# Proves that the debug kernel and the run's judge still catch the bugs they exist for: a
# module with planted bugs (tests/vm/planted/) is built against the debug kernel's tree and
# loaded in the `debug` configuration, once per bug. Each run must FAIL, naming the report:
#   uaf   a read of freed slab memory    -> "BUG: KASAN: use-after-free"
#   lock  two mutexes taken in both orders -> lockdep's "possible circular locking dependency"
#   leak  an allocation lost by a module unloaded before the scan -> "kmemleak: 1 leaked"
# A kernel built without KASAN, lockdep or kmemleak, or a judge that stops reading them, fails
# this. (The judge once missed every leak: frames printed as "[<(____ptrval____)>] 0xffff...".)
#
# usage: tests/vm/judge-selftest.sh
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
build=$(mkdir -p "${BUILD_DIR:-$src/build}" && cd "${BUILD_DIR:-$src/build}" && pwd -P)
dbg=$("$src/scripts/build-debug-kernel.sh") || exit 1
mod=$build/kernel-debug-planted
mkdir -p "$mod"
ln -sfn "$here/planted/planted_bugs.c" "$mod/planted_bugs.c"
ln -sfn "$here/planted/Kbuild" "$mod/Kbuild"
make -s -C "$dbg/linux" M="$mod" modules > "$mod/build.log" 2>&1 || { cat "$mod/build.log"; exit 1; }

passed=0 failed=0
check() {
	local bug=$1 want=$2 out=$build/vm/runs/debug-judge-$1 line
	line=$("$src/qemu/run-vm.sh" --quiet --config debug --out "$out" --timeout "${VM_TIMEOUT:-600}" -- \
		"insmod /host$mod/planted_bugs.ko bug=$bug && rmmod planted_bugs" | grep '^VM-RESULT')
	echo "planted $bug: $line"
	case "$line" in
	"VM-RESULT debug FAIL "*"$want"*) passed=$((passed + 1)) ;;
	*) echo "planted $bug: expected a FAIL naming '$want' (logs: $out)"; failed=$((failed + 1)) ;;
	esac
}
check uaf "BUG: KASAN: use-after-free"
check lock "possible circular locking dependency"
check leak "kmemleak: 1 leaked"
echo "judge self-test: $passed passed, $failed failed"
[ $failed = 0 ]
