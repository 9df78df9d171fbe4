#!/usr/bin/env bash
# Host tests of the VM run judge (qemu/check-guest.sh) and the GoogleTest report reader
# (tests/vm/gtest-summary.sh): each case builds the files a guest run leaves behind and
# checks the verdict and the reason the judge gives.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
judge="$src/qemu/check-guest.sh"
summary="$src/tests/vm/gtest-summary.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0 failed=0

clean_run() {
	local d="$tmp/$1"
	rm -rf "$d" && mkdir -p "$d"
	printf 'boot_s=4.1\ninsmod=0\ncmd_rc=0\nrmmod=0\npin_acquired=12\npin_released=12\ndone=1\n' > "$d/guest-result"
	printf '[    4.2] edu_accel 0000:00:02.0: [drm] bound\n' > "$d/dmesg.txt"
	printf 'Booting from ROM...\nall checks passed\n' > "$d/console.log"
	: > "$d/qemu.stderr"
	echo 9 > "$d/wall_s"
	echo "$d"
}

# expect NAME pass|fail QEMU_RC DIR [reason substring]
expect() {
	local name=$1 want=$2 qrc=$3 dir=$4 needle=${5:-} got reason
	reason=$("$judge" "$dir" "$qrc" 60) && got=pass || got=fail
	if [ "$got" = "$want" ] && [[ "$reason" == *"$needle"* ]]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "FAIL $name: want $want with '$needle', got $got: $reason"
	fi
}

d=$(clean_run clean); expect clean pass 0 "$d" "pins 12/12"

d=$(clean_run warn)
echo '[    5.1] WARNING: CPU: 0 PID: 71 at kernel/edu_accel_drv.c:80 edu_accel_probe+0x1/0x2' >> "$d/dmesg.txt"
expect kernel-warning fail 0 "$d" "guest kernel: WARNING: CPU: 0 PID: 71"

d=$(clean_run oops-on-console)
rm "$d/dmesg.txt"; sed -i '/^done=/d' "$d/guest-result"
echo '[    6.0] BUG: kernel NULL pointer dereference, address: 0000000000000008' >> "$d/console.log"
expect oops-before-dmesg fail 0 "$d" "BUG: kernel NULL pointer"

d=$(clean_run user-text)
echo 'WARNING: this line comes from a test, not the kernel' >> "$d/console.log"
expect user-warning-text pass 0 "$d"

d=$(clean_run edu-abort)
echo 'qemu-system-x86_64: hardware error: EDU: DMA range 0x40000-0x41000 out of bounds' > "$d/qemu.stderr"
sed -i '/^done=/d' "$d/guest-result"
expect edu-hardware-error fail 134 "$d" "edu hardware error, QEMU exit 134"

d=$(clean_run other-abort)
echo 'qemu-system-x86_64: error: failed to set MSR 0x10a' > "$d/qemu.stderr"
expect qemu-abort-not-edu fail 134 "$d" "QEMU aborted (exit 134)"

d=$(clean_run timeout); sed -i '/^done=/d' "$d/guest-result"
expect hard-timeout fail 124 "$d" "hard timeout"

d=$(clean_run pin-leak); sed -i 's/^pin_released=.*/pin_released=11/' "$d/guest-result"
expect pin-leak fail 0 "$d" "pinned pages leaked: nr_foll_pin_acquired=12 nr_foll_pin_released=11"

d=$(clean_run rmmod); sed -i 's/^rmmod=0/rmmod=1/' "$d/guest-result"
expect unload-failure fail 0 "$d" "failed to unload"

d=$(clean_run insmod); printf 'insmod=1\n' > "$d/guest-result"
expect insmod-failure fail 0 "$d" "insmod edu_accel failed"

d=$(clean_run cmd); sed -i 's/^cmd_rc=0/cmd_rc=3/' "$d/guest-result"
expect command-failure fail 0 "$d" "guest command exited 3"

# Debug-kernel reports.
d=$(clean_run kasan)
echo '[   12.5] BUG: KASAN: slab-use-after-free in edu_ioctl_submit+0x1a/0x2b [edu_accel]' >> "$d/dmesg.txt"
expect kasan fail 0 "$d" "BUG: KASAN: slab-use-after-free"

d=$(clean_run lockdep-info)
echo '[   12.5] INFO: possible recursive locking detected' >> "$d/dmesg.txt"
expect lockdep fail 0 "$d" "INFO: possible recursive locking"

d=$(clean_run dma-api)
echo '[    1.0] DMA-API: debugging enabled by kernel config' >> "$d/dmesg.txt"
echo '[   12.5] DMA-API: edu_accel 0000:00:03.0: device driver has pending DMA allocations while released from device [count=1]' >> "$d/dmesg.txt"
expect dma-api-debug fail 0 "$d" "DMA-API: edu_accel 0000:00:03.0: device driver has pending"

d=$(clean_run dma-api-banner)
echo '[    1.0] DMA-API: debugging enabled by kernel config' >> "$d/dmesg.txt"
expect dma-api-banner-only pass 0 "$d"

d=$(clean_run sleep-in-atomic)
echo '[   12.5] BUG: sleeping function called from invalid context at mm/slab.h:742' >> "$d/dmesg.txt"
expect sleep-in-atomic fail 0 "$d" "BUG: sleeping function called"

d=$(clean_run kmemleak)
printf 'unreferenced object 0xffff888004b3c000 (size 512):\n  comm "edu_vm_job", pid 77\n  backtrace:\n    [<0>] kmalloc_trace+0x26/0x90\n    [<0>] edu_ioctl_submit+0x1a/0x2b [edu_accel]\n' > "$d/kmemleak.txt"
expect kmemleak-driver fail 0 "$d" "kmemleak: 1 leaked objects allocated through edu_accel, first: unreferenced object 0xffff888004b3c000 (size 512)"

d=$(clean_run kmemleak-unloaded)
printf 'unreferenced object 0xff110000072ee600 (size 64):\n  backtrace:\n    [<00000000e1ff60b0>] kmalloc_trace+0x26/0xc0\n    [<000000000dfedbe1>] 0xffffffffc0325d4b\n    [<00000000d46736da>] drm_ioctl_kernel+0x1f8/0x3e0\n' > "$d/kmemleak.txt"
expect kmemleak-unloaded-module fail 0 "$d" "kmemleak: 1 leaked objects"

d=$(clean_run kmemleak-other)
printf 'unreferenced object 0xffff888004b3c000 (size 64):\n  backtrace:\n    [<0>] acpi_os_allocate+0x1/0x2\n' > "$d/kmemleak.txt"
expect kmemleak-not-ours pass 0 "$d"

d=$(clean_run no-result); rm "$d/guest-result"
expect missing-result fail 0 "$d" "did not finish"

# expect_summary NAME pass|fail FILE substring
expect_summary() {
	local name=$1 want=$2 file=$3 needle=$4 got text
	text=$("$summary" "$file") && got=pass || got=fail
	if [ "$got" = "$want" ] && [[ "$text" == *"$needle"* ]]; then
		passed=$((passed + 1))
	else
		failed=$((failed + 1))
		echo "FAIL $name: want $want with '$needle', got $got: $text"
	fi
}

cat > "$tmp/ok.xml" <<'XML'
<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="0" disabled="0" errors="0" time="0.1" name="AllTests">
  <testsuite name="Smoke" tests="3" failures="0" disabled="0" skipped="1" errors="0">
    <testcase name="A" status="run" result="completed" classname="Smoke" />
    <testcase name="B" status="run" result="completed" classname="Smoke" />
    <testcase name="C" status="run" result="skipped" classname="Smoke"><skipped message="no iommu"/></testcase>
  </testsuite>
</testsuites>
XML
expect_summary xml-pass pass "$tmp/ok.xml" "2 passed, 0 failed, 1 skipped"

sed -e 's/testsuites tests="3" failures="0"/testsuites tests="3" failures="1"/' \
    -e 's|<testcase name="B" status="run" result="completed" classname="Smoke" />|<testcase name="B" status="run" result="completed" classname="Smoke"><failure message="x"/></testcase>|' \
    "$tmp/ok.xml" > "$tmp/fail.xml"
expect_summary xml-failure fail "$tmp/fail.xml" "FAILED Smoke.B"
expect_summary xml-missing fail "$tmp/none.xml" "no GoogleTest report"
sed 's/testsuites tests="3"/testsuites tests="0"/; s/skipped="1"/skipped="0"/; /result="skipped"/d' "$tmp/ok.xml" > "$tmp/empty.xml"
expect_summary xml-no-tests fail "$tmp/empty.xml" "ran no test"
# A driver that binds no device makes every test skip: that must not read as green.
sed -e 's/result="completed"/result="skipped"/' -e 's/skipped="1"/skipped="3"/' "$tmp/ok.xml" > "$tmp/allskip.xml"
expect_summary xml-all-skipped fail "$tmp/allskip.xml" "every test was skipped"

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
