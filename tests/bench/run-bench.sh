#!/usr/bin/env bash
# `make bench`: runs the benchmarks (in the VM where they need the device) and collects every
# "METRIC <name> <value> <unit>" line into BUILD/bench/metrics.txt.
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
build=${BUILD_DIR:-$src/build}
bin="/host$build/cmake/tests/bench"  # as the guest sees it
mkdir -p "$build/bench"
metrics="$build/bench/metrics.txt"
: > "$metrics"

# in_vm CONFIG COMMAND [NAME [run-vm options]]: one guest run; its METRIC lines join the others.
failed=0
in_vm() {
	local out="$build/bench/vm-${3:-$1}"
	"$src/qemu/run-vm.sh" --quiet --config "$1" --out "$out" "${@:4}" -- "$2" || failed=1
	grep -h '^METRIC ' "$out/cmd.log" | tr -d '\r' >> "$metrics" || true
}

in_vm noiommu "hostrun $bin/dma_selftest_bench 5 && hostrun $bin/engine_bench"
in_vm iommu "hostrun $bin/engine_bench _iommu"
# Registration costs are kernel work timed in guest time: a fixed icount shift, so that the
# guest clock counts instructions instead of following the host's load.
in_vm noiommu "hostrun $bin/pin_bench 7" pin-noiommu --icount-shift 0
in_vm iommu "hostrun $bin/pin_bench 7 _iommu" pin-iommu --icount-shift 0
# The same registrations against VFIO type1's MAP_DMA + UNMAP_DMA, on the same IOMMU: with
# the kernel's default lazy IOTLB flushing (DMA-FQ), then with edu_accel's device switched to
# strict flushing (its IOMMU group's type DMA), which VFIO's own domain always uses.
vfio="modprobe vfio-pci && modprobe vfio_iommu_type1 && hostrun $bin/vfio_bench"
in_vm iommu "$vfio" vfio --icount-shift 0
strict='d=$(ls /sys/bus/pci/drivers/edu_accel | grep -m1 ^0000) &&
	g=/sys/kernel/iommu_groups/$(basename $(readlink /sys/bus/pci/devices/$d/iommu_group)) &&
	echo $d > /sys/bus/pci/drivers/edu_accel/unbind && echo DMA > $g/type &&
	echo $d > /sys/bus/pci/drivers_probe'
in_vm iommu "$strict && $vfio 1 _strict" vfio-strict --icount-shift 0
# Real time (no icount): what submit-to-complete costs in wall time on top of the device.
in_vm smp2 "hostrun $bin/engine_bench _smp2 2 65520"

# The caching pool against the uncached driver path (host_alloc + free) on the real device
# (its own run directory, so the noiommu logs above stay).
"$src/qemu/run-vm.sh" --quiet --config noiommu --out "$build/bench/vm-pool" -- "hostrun $bin/pool_bench --driver" || failed=1
grep -h '^METRIC ' "$build/bench/vm-pool/cmd.log" | tr -d '\r' >> "$metrics" || true
# Host: the caching pool vs mimalloc, glibc and jemalloc (Emulated backend, no VM needed).
"$build/cmake/tests/bench/pool_bench" | tee "$build/bench/pool_bench.log" | grep '^METRIC ' >> "$metrics" || failed=1

echo "---- $metrics"
cat "$metrics"
exit $failed
