#!/usr/bin/env bash
# make run's demo, hostrt-smi and edu-inspect in the VM, as a user would run them: the demo
# must pass its checks on every device, hostrt-smi must list every bound device with the
# processes using it and the driver's state, and edu-inspect's views of one buffer (pagemap, debugfs, BO_INFO, a copy's
# trace, the pool) must agree with each other (its --check; make tour runs it in every
# configuration).
#
# usage: tests/vm/tools-check.sh CONFIG USERSPACE_BUILD_DIR
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/../.." && pwd -P)
config=$1 bin=$(cd "$2" && pwd -P)
build=$(cd "${BUILD_DIR:-$src/build}" 2>/dev/null && pwd -P || echo "$src/build")
out="$build/vm/runs/$config-tools"
"$src/qemu/run-vm.sh" --quiet --config "$config" --out "$out" -- \
	"echo \"test_mode=\$(cat /sys/module/edu_accel/parameters/test_mode)\" > /out/knobs.txt;
	 ls /sys/kernel/debug/dri/*/ | grep -c '^fault_' >> /out/knobs.txt;
	 hostrun /host$bin/hostrt-demo > /out/demo.txt && hostrun /host$bin/hostrt-smi > /out/smi.txt &&
	 hostrun /host$bin/edu-inspect --copy --pool --check > /out/inspect.txt"
vm=$?
fail=0
check() { grep -q "$2" "$out/$1" 2>/dev/null || { echo "FAIL: $1 lacks '$2'"; fail=1; }; }
check demo.txt '^== all checks passed =='
check demo.txt 'DMA RAM -> device -> RAM: PASS'
devices=$(sed -n 's/^devices bound to edu_accel: //p' "$out/demo.txt" 2>/dev/null)
[ -n "$devices" ] && [ "$devices" -ge 1 ] || { echo "FAIL: the demo found no device"; fail=1; }
[ "$(grep -c 'renderD' "$out/smi.txt" 2>/dev/null)" -ge "${devices:-1}" ] ||
	{ echo "FAIL: hostrt-smi does not list the $devices devices"; fail=1; }
# Its process list comes from fdinfo: hostrt-smi holds each device open, so it lists itself.
[ "$(grep -cE '^ +[0-9]+  .* [0-9]+ +[0-9]+ ns +[0-9]+ +[0-9]+ KiB  \(this process\)$' "$out/smi.txt" 2>/dev/null)" -ge "${devices:-1}" ] ||
	{ echo "FAIL: hostrt-smi's process lists (fdinfo) lack hostrt-smi itself"; fail=1; }
check inspect.txt '^checks: [0-9]* passed, 0 failed'
# Loaded as a user loads it (no test_mode): the fault knobs do not exist.
check knobs.txt '^test_mode=N$'
check knobs.txt '^0$'
# The IOMMU maps each buffer as one IOVA range: a 1 MiB copy is then 2 * ceil(1 MiB / 4095).
[ "$config" != iommu ] || check inspect.txt '^SUMMARY copy transfers=514 '
cat "$out/demo.txt" "$out/smi.txt" "$out/inspect.txt" 2>/dev/null
echo "logs: $out"
[ $vm -eq 0 ] && [ $fail -eq 0 ]
