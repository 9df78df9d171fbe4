#!/usr/bin/env bash
# Judges one guest run from what it left in its output directory. Prints the reason on one
# line (every problem found, most fundamental first) and exits 0 only when the run is clean.
#
# usage: qemu/check-guest.sh OUTDIR QEMU_EXIT_STATUS TIMEOUT_SECONDS
# OUTDIR holds console.log and qemu.stderr (host side), and guest-result and dmesg.txt
# (written by the guest's /init).
set -uo pipefail
out=$1
qrc=$2
limit=${3:-?}
problems=()

get() { sed -n "s/^$1=//p" "$out/guest-result" 2>/dev/null | tail -n 1; }

# A kernel line: "[   12.345678] " then one of the markers of a kernel bug. Anchoring on
# the printk timestamp keeps a test that merely prints "WARNING:" from failing the run.
# The debug kernel adds KASAN ("BUG: KASAN"), lockdep ("WARNING: possible ...", "INFO:
# possible ..."), DEBUG_ATOMIC_SLEEP ("BUG: sleeping function"), DMA-API debug (one WARNING,
# then "DMA-API: <driver> <device>: ..." lines) and debugobjects ("ODEBUG:").
kpat='^\[ *[0-9]+\.[0-9]+\] (.*)?(Oops|BUG:|kernel BUG|WARNING:|refcount_t:|general protection|Kernel panic|UBSAN:|INFO: task .* blocked|INFO: (possible|inconsistent)|watchdog: BUG|ODEBUG:|DMA-API: [^ ]+ [0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9]: )'

qerr=$(grep -m1 -E 'error|abort' "$out/qemu.stderr" 2>/dev/null)
if grep -q 'EDU: DMA range' "$out/qemu.stderr" 2>/dev/null; then
	problems+=("edu hardware error, QEMU exit $qrc ($qerr): the driver started a DMA edu refuses")
elif [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
	problems+=("hard timeout: the VM ran past ${limit}s and was killed")
elif [ "$qrc" = 134 ]; then
	problems+=("QEMU aborted (exit 134): ${qerr:-no message}")
elif [ "$qrc" != 0 ]; then
	problems+=("QEMU exited $qrc: ${qerr:-$(head -c 300 "$out/qemu.stderr" 2>/dev/null | tr '\n' ' ')}")
fi

kline=$(cat "$out/dmesg.txt" "$out/console.log" 2>/dev/null | tr -d '\r' | grep -E -m1 "$kpat")
[ -n "$kline" ] && problems+=("guest kernel: ${kline#*] }")

if [ "$(get done)" != 1 ]; then
	last=$(tr -d '\r' < "$out/console.log" 2>/dev/null | grep -v '^\s*$' | tail -n 1)
	problems+=("guest did not finish its run (last console line: ${last:-none})")
fi
# kmemleak (debug kernel): an unreferenced object allocated on a path through the driver.
if [ -s "$out/kmemleak.txt" ]; then
	nleak=$(awk -f "$(dirname "$0")/kmemleak-ours.awk" "$out/kmemleak.txt")
	if [ "$(head -n1 <<<"$nleak")" != 0 ]; then
		problems+=("kmemleak: $(head -n1 <<<"$nleak") leaked objects allocated through edu_accel, first: $(sed -n 2p <<<"$nleak" | tr -s ' ') (kmemleak.txt)")
	fi
fi
[ "$(get insmod)" = 1 ] && problems+=("insmod edu_accel failed")
[ "$(get rmmod)" = 1 ] && problems+=("module edu_accel failed to unload")

acq=$(get pin_acquired) rel=$(get pin_released)
if [ -n "$acq" ] && [ "$acq" != "$rel" ]; then
	problems+=("pinned pages leaked: nr_foll_pin_acquired=$acq nr_foll_pin_released=$rel")
fi

rc=$(get cmd_rc)
[ -n "$rc" ] && [ "$rc" != 0 ] && problems+=("guest command exited $rc")

if [ ${#problems[@]} -eq 0 ]; then
	echo "boot $(get boot_s)s, wall $(cat "$out/wall_s" 2>/dev/null)s, pins $acq/$rel"
	exit 0
fi
(IFS=';'; echo "${problems[*]}" | sed 's/;/; /g')
exit 1
