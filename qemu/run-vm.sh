#!/usr/bin/env bash
# Boots Debian's kernel in QEMU with edu devices, loads edu_accel from the build tree, runs a
# command in the guest and judges the run (qemu/check-guest.sh). Prints one line
#   VM-RESULT <config> PASS|FAIL <reason>
# and exits 0 only on PASS.
#
# usage: qemu/run-vm.sh [options] [--] 'shell command run in the guest'
#   --config NAME     qemu/configs/NAME.conf (default: noiommu)
#   --smp N  --mem SIZE  --edu N  --iommu on|off  --icount on|off  --dma-mask HEX
#   --hotplug on|off  each edu device behind its own pcie-root-port (ACPI hotplug, the guest's
#                     acpiphp) and qemu/hotplug-agent.py serving the guest's device_del
#                     and device_add requests (files in /out/hotplug; see that script)
#   --kvm on|off      KVM for configurations without icount (default off, or $VM_KVM). On
#                     this project's machines /dev/kvm exists but a KVM guest hangs in early
#                     boot, so TCG is the default; icount configurations are TCG-only anyway.
#   --icount-shift N|auto  instructions per guest ns as 2^N (default auto, which speeds the
#                     guest clock up and down with the host's load in steps of 2x: use a
#                     fixed 0 to time kernel work side by side)
#   --module-args "..."  parameters for insmod edu_accel
#   --test-mode       load it with test_mode=1: the debugfs fault knobs the tests use (an
#                     unsafe parameter: it taints the guest kernel)
#   --timeout SEC     hard limit for the whole run (default 900)
#   --out DIR         where results land (default BUILD/vm/runs/CONFIG); the guest sees /out
#   --shell           interactive shell on the serial console instead of a command
#   --quiet           console to DIR/console.log only; its tail is printed on failure
#   --qemu-trace PAT  enable QEMU's own trace events matching PAT (repeatable; list them with
#                     `qemu-system-x86_64 -trace help`), logged to DIR/qemu-trace.log: what the
#                     emulated hardware did, e.g. vtd_dmar_translate (IOVA -> guest-physical)
# In the guest: $BUILD and $SRC are the host's build and source trees (under /host),
# `hostrun BIN` runs a host binary, and $VM_* describe the machine.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd -P)
src=$(cd "$here/.." && pwd -P)
build=${BUILD_DIR:-$src/build}
mkdir -p "$build" && build=$(cd "$build" && pwd -P)

config=noiommu timeout_s=900 out= shell=0 quiet=0 test_mode=0 icount_shift=auto kvm=${VM_KVM:-off}
qtrace=()
declare -A over=()
while [ $# -gt 0 ]; do
	case "$1" in
	--config) config=$2; shift 2 ;;
	--smp) over[SMP]=$2; shift 2 ;;
	--mem) over[MEM]=$2; shift 2 ;;
	--edu) over[EDU]=$2; shift 2 ;;
	--iommu) over[IOMMU]=$2; shift 2 ;;
	--icount) over[ICOUNT]=$2; shift 2 ;;
	--icount-shift) icount_shift=$2; shift 2 ;;
	--dma-mask) over[DMA_MASK]=$2; shift 2 ;;
	--hotplug) over[HOTPLUG]=$2; shift 2 ;;
	--module-args) over[EDU_KO_ARGS]=$2; shift 2 ;;
	--test-mode) test_mode=1; shift ;;
	--kvm) kvm=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--out) out=$2; shift 2 ;;
	--shell) shell=1; shift ;;
	--quiet) quiet=1; shift ;;
	--qemu-trace) qtrace+=(-trace "enable=$2"); shift 2 ;;
	--) shift; break ;;
	-*) echo "run-vm: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
cmd="$*"
[ -n "$cmd" ] || [ "$shell" = 1 ] || { echo "run-vm: no command given (or --shell)" >&2; exit 2; }

SMP=1 ICOUNT=on IOMMU=off MEM=256M EDU=1 DMA_MASK= EDU_KO_ARGS= KERNEL=debian APPEND= HOTPLUG=off
conf="$here/configs/$config.conf"
[ -f "$conf" ] || { echo "run-vm: no configuration $conf" >&2; exit 2; }
# shellcheck source=/dev/null
. "$conf"
for k in "${!over[@]}"; do printf -v "$k" '%s' "${over[$k]}"; done
[ "$test_mode" = 1 ] && EDU_KO_ARGS="${EDU_KO_ARGS:+$EDU_KO_ARGS }test_mode=1"
if [ "$ICOUNT" = on ] && [ "$SMP" != 1 ]; then
	echo "run-vm: icount hangs QEMU 7.2 with -smp $SMP; use --icount off" >&2
	exit 2
fi

# make check runs VMs two at a time: the kernel trees and the initramfs they share are
# prepared by one run while the others wait.
mkdir -p "$build/vm"
exec 8> "$build/vm/.prepare.lock"
flock 8
case "$KERNEL" in
debian)
	# Debian's production kernel, the release whose headers are installed.
	kver=$("$src/scripts/kver.sh")
	kdir="$build/vm/kernel-$kver"
	ko="$src/kernel/edu_accel.ko"
	"$src/scripts/fetch-kernel.sh" "$kver" "$kdir"
	;;
debug)
	# The debug kernel (scripts/build-debug-kernel.sh, cached outside the clone) and the
	# module built against its tree (make kernel-debug).
	dbg=$("$src/scripts/build-debug-kernel.sh")
	kver=$(cat "$dbg/release")
	kdir="$build/vm/kernel-$kver"
	ko="$build/kernel-debug/edu_accel.ko"
	"$src/scripts/stage-debug-kernel.sh" "$dbg" "$kdir"
	;;
*) echo "run-vm: unknown KERNEL=$KERNEL in $conf" >&2; exit 2 ;;
esac
initrd="$build/vm/initramfs-$kver.cpio.gz"
if [ ! -f "$initrd" ] || [ -n "$(find "$here/init.sh" "$here/hostrun.sh" "$here/mkinitramfs.sh" \
	"$kdir/.complete" -newer "$initrd" 2>/dev/null)" ]; then
	"$here/mkinitramfs.sh" "$kdir" "$initrd"
fi
flock -u 8
exec 8>&-
[ -f "$ko" ] || { echo "run-vm: $ko is not built (make kernel)" >&2; exit 2; }

out=${out:-$build/vm/runs/$config}
rm -rf "$out"
mkdir -p "$out"
out=$(cd "$out" && pwd -P)
{
	printf 'export EDU_KO=%q EDU_KO_ARGS=%q\n' "/host$ko" "$EDU_KO_ARGS"
	printf 'export BUILD=%q SRC=%q OUT=/out\n' "/host$build" "/host$src"
	printf 'export VM_CONFIG=%q VM_SMP=%q VM_ICOUNT=%q VM_IOMMU=%q VM_MEM=%q VM_EDU=%q VM_DMA_MASK=%q VM_KERNEL=%q VM_HOTPLUG=%q\n' \
		"$config" "$SMP" "$ICOUNT" "$IOMMU" "$MEM" "$EDU" "$DMA_MASK" "$KERNEL" "$HOTPLUG"
} > "$out/vm.env"
printf '%s\n' "$cmd" > "$out/cmd.sh"

accel=(-accel tcg -cpu max)
if [ "$ICOUNT" = on ]; then
	accel+=(-icount "shift=$icount_shift,sleep=off")
elif [ "$kvm" = on ]; then
	accel=(-accel kvm -cpu host)
fi
machine=q35
append="console=ttyS0 panic=-1 quiet eduvm.mode=$([ "$shell" = 1 ] && echo shell || echo run)${APPEND:+ $APPEND}"
iommu_dev=()
if [ "$IOMMU" = on ]; then
	machine=q35,kernel-irqchip=split
	iommu_dev=(-device intel-iommu,intremap=on)
	append+=" intel_iommu=on"
fi
edu_dev=() agent_devs=
case "$HOTPLUG" in
on)
	command -v python3 > /dev/null || { echo "run-vm: HOTPLUG=on needs python3 (qemu/hotplug-agent.py)" >&2; exit 2; }
	# q35's default since QEMU 6.1: ACPI hotplug on the root ports, served by the guest's
	# acpiphp (both kernels have it). Native PCIe hotplug (pciehp) is not used: on the debug
	# kernel Debian 6.1's pciehp_unconfigure_device() retakes ctrl->reset_lock under
	# pci_rescan_remove_lock, and lockdep reports that on every hot-unplug, whatever the driver,
	# and is off for the rest of the boot.
	for ((i = 0; i < EDU; i++)); do
		# One device per port: a port's slot holds one device, and device_del empties it.
		edu_dev+=(-device "pcie-root-port,id=rp$i,chassis=$((i + 1)),slot=$((i + 1))"
			-device "edu,id=edu$i,bus=rp$i${DMA_MASK:+,dma_mask=$DMA_MASK}")
		agent_devs+="${agent_devs:+, }\"edu$i\": {\"driver\": \"edu\", \"id\": \"edu$i\", \"bus\": \"rp$i\"${DMA_MASK:+, \"dma_mask\": \"$DMA_MASK\"}}"
	done
	;;
off)
	for ((i = 0; i < EDU; i++)); do
		edu_dev+=(-device "edu${DMA_MASK:+,dma_mask=$DMA_MASK}")
	done
	;;
*) echo "run-vm: HOTPLUG must be on or off, not $HOTPLUG" >&2; exit 2 ;;
esac

qemu=(qemu-system-x86_64 -machine "$machine" "${accel[@]}" -m "$MEM" -smp "$SMP"
	-nographic -no-reboot -nic none
	-kernel "$kdir/vmlinuz" -initrd "$initrd" -append "$append"
	"${iommu_dev[@]}" "${edu_dev[@]}"
	-virtfs "local,path=/,mount_tag=hostroot,security_model=none,readonly=on"
	-virtfs "local,path=$out,mount_tag=out,security_model=none")
# One log for every pattern: the file= of the last -trace option wins.
[ ${#qtrace[@]} -eq 0 ] || qemu+=("${qtrace[@]}" -trace "file=$out/qemu-trace.log")
agent=
if [ "$HOTPLUG" = on ]; then
	# The monitor socket lives outside the shared directory (the guest has no business with
	# it, and a unix socket path must stay under 108 bytes).
	qmpdir=$(mktemp -d "${TMPDIR:-/tmp}/eduvm-qmp.XXXXXX")
	trap 'rm -rf "$qmpdir"' EXIT
	qemu+=(-qmp "unix:$qmpdir/qmp.sock,server=on,wait=off")
	mkdir -p "$out/hotplug"
	python3 "$here/hotplug-agent.py" "$qmpdir/qmp.sock" "$out/hotplug" "{$agent_devs}" \
		> "$out/hotplug-agent.log" 2>&1 &
	agent=$!
fi
echo "${qemu[*]}" > "$out/qemu.cmdline"

start=$(date +%s)
set +e
if [ "$shell" = 1 ]; then
	"${qemu[@]}" 2> "$out/qemu.stderr"
	qrc=$?
elif [ "$quiet" = 1 ]; then
	timeout -k 10 "$timeout_s" "${qemu[@]}" < /dev/null > "$out/console.log" 2> "$out/qemu.stderr"
	qrc=$?
else
	timeout -k 10 "$timeout_s" "${qemu[@]}" < /dev/null 2> "$out/qemu.stderr" |
		tee "$out/console.log" | tr -d '\r' |
		sed -u -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1bc//g' -e '/^SeaBIOS (version/d' -e '/^Booting from ROM/d'
	qrc=${PIPESTATUS[0]}
fi
set -e
echo "$(($(date +%s) - start))" > "$out/wall_s"
if [ -n "$agent" ]; then
	# It leaves when the monitor closes; this is only for one stuck in a filesystem call.
	kill "$agent" 2>/dev/null || true
	wait "$agent" 2>/dev/null || true
fi

[ "$shell" = 1 ] && exit 0
reason=$("$here/check-guest.sh" "$out" "$qrc" "$timeout_s") && verdict=PASS || verdict=FAIL
if [ "$verdict" = FAIL ] && [ "$quiet" = 1 ]; then
	echo "---- last console lines ($out/console.log) ----"
	tail -n 40 "$out/console.log" | tr -d '\r'
	echo "----"
fi
echo "VM-RESULT $config $verdict $reason"
[ "$verdict" = PASS ]
