#!/usr/bin/env bash
# make run's demo and hostrt-smi in the VM, as a user would run them: the demo must pass its
# checks on every device and hostrt-smi must list every bound device with the driver's state.
#
# usage: tests/vm/tools-check.sh CONFIG USERSPACE_BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
config=$1 bin=$(cd "$2" && pwd -P)
build=$(cd "${BUILD_DIR:-$src/build}" 2>/dev/null && pwd -P || echo "$src/build")
out="$build/vm/runs/$config-tools"
"$src/qemu/run-vm.sh" --quiet --config "$config" --out "$out" -- \
	"hostrun /host$bin/hostrt-demo > /out/demo.txt && hostrun /host$bin/hostrt-smi > /out/smi.txt"
vm=$?
fail=0
check() { grep -q "$2" "$out/$1" 2>/dev/null || { echo "FAIL: $1 lacks '$2'"; fail=1; }; }
check demo.txt '^== all checks passed =='
check demo.txt 'DMA RAM -> device -> RAM: PASS'
devices=$(sed -n 's/^devices bound to edu_accel: //p' "$out/demo.txt" 2>/dev/null)
[ -n "$devices" ] && [ "$devices" -ge 1 ] || { echo "FAIL: the demo found no device"; fail=1; }
[ "$(grep -c 'renderD' "$out/smi.txt" 2>/dev/null)" -ge "${devices:-1}" ] ||
	{ echo "FAIL: hostrt-smi does not list the $devices devices"; fail=1; }
cat "$out/demo.txt" "$out/smi.txt" 2>/dev/null
echo "logs: $out"
[ $vm -eq 0 ] && [ $fail -eq 0 ]
