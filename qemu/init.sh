#!/bin/busybox sh
# PID 1 of the test VM. Mounts the host's root (read-only) at /host and the run's output
# directory at /out, loads edu_accel, runs /out/cmd.sh, then checks what the host cannot see
# from outside: that the module unloads and that every pinned page was released.
# Results go to /out/guest-result as key=value lines; the host decides PASS or FAIL.
/bin/busybox --install -s /bin
export PATH=/bin:/sbin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /tmp
mount -t debugfs debugfs /sys/kernel/debug
# Where the docs point for the driver's tracepoints (also reachable under debugfs/tracing).
mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null || true
mkdir -p /dev/pts && mount -t devpts devpts /dev/pts

die() {
	echo "vm-init: $*"
	sync
	poweroff -f
}

mode=run
for arg in $(cat /proc/cmdline); do
	case "$arg" in
	eduvm.mode=*) mode=${arg#eduvm.mode=} ;;
	esac
done

# Built into the debug kernel: modprobe then finds them in modules.builtin and succeeds.
# vgem: a second DRM driver with PRIME, the peer of the dma-buf tests.
for m in 9pnet_virtio 9p virtio_pci drm gpu-sched drm_shmem_helper vgem; do
	modprobe "$m" || die "modprobe $m failed"
done
mkdir -p /host /out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro hostroot /host || die "cannot mount host root"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 out /out || die "cannot mount /out"
. /out/vm.env

result() { echo "$1=$2" >> /out/guest-result; }
pins() { awk -v k="$1" '$1 == k { print $2 }' /proc/vmstat; }
: > /out/guest-result
result boot_s "$(cut -d' ' -f1 /proc/uptime)"

# shellcheck disable=SC2086
if insmod "$EDU_KO" $EDU_KO_ARGS; then
	result insmod 0
else
	result insmod 1
	die "insmod $EDU_KO failed"
fi

if [ "$mode" = shell ]; then
	echo 7 > /proc/sys/kernel/printk
	echo "vm-init: edu_accel loaded; host / is at /host, the build tree at $BUILD."
	echo "vm-init: 'hostrun BIN' runs a host binary; exit the shell to power off."
	cd "$BUILD" 2>/dev/null || cd /
	setsid cttyhack sh -l
	cd /
else
	cd /out
	set -o pipefail
	sh /out/cmd.sh 2>&1 | tee /out/cmd.log
	result cmd_rc $?
	set +o pipefail
	cd /
fi

# Stray children of the command would hold the device open and block the unload.
kill -9 -1 2>/dev/null
sleep 1
# Where the module's code was: kmemleak's frames after the unload are bare addresses.
cat /sys/module/edu_accel/sections/.text > /out/module-text 2>/dev/null
if rmmod edu_accel; then result rmmod 0; else result rmmod 1; fi
# gcov counters of an instrumented module (the debug build) outlive its unload, so they
# include the remove and exit paths: copied out for scripts/coverage-report.sh.
if [ -d /sys/kernel/debug/gcov ]; then
	n=0
	for f in $(find /sys/kernel/debug/gcov -name 'edu_accel*.gcda'); do
		mkdir -p /out/gcov && cat "$f" > "/out/gcov/${f##*/}" && n=$((n + 1))
	done
	result gcov_files "$n"
fi
# vmstat counters sit in per-CPU deltas until folded: fold them, or a leak can hide.
echo 1 > /proc/sys/vm/stat_refresh
result pin_acquired "$(pins nr_foll_pin_acquired)"
result pin_released "$(pins nr_foll_pin_released)"
# Debug kernel: leaks are reported for objects unreferenced across two scans, each at least
# kmemleak's minimum age old; the driver is gone by now, so anything of it still held leaked.
if [ -w /sys/kernel/debug/kmemleak ]; then
	echo scan > /sys/kernel/debug/kmemleak
	sleep 6
	echo scan > /sys/kernel/debug/kmemleak
	cat /sys/kernel/debug/kmemleak > /out/kmemleak.txt
	result kmemleak_scanned 1
fi
dmesg > /out/dmesg.txt
result done 1
sync
umount /out
poweroff -f
