#!/usr/bin/env bash
# Lays out the debug kernel like scripts/fetch-kernel.sh lays out Debian's: OUTDIR/vmlinuz and
# OUTDIR/lib/modules/RELEASE with a modules.dep. Everything the guest needs is built in, so
# modules.builtin is what lets /init's modprobe calls succeed.
#
# usage: scripts/stage-debug-kernel.sh DEBUG_KERNEL_DIR OUTDIR
set -euo pipefail
dbg=$1
out=$2
stamp="$out/.complete"
[ -f "$stamp" ] && [ ! "$dbg/.complete" -nt "$stamp" ] && exit 0
rel=$(cat "$dbg/release")
rm -rf "$out"
m="$out/lib/modules/$rel"
mkdir -p "$m"
cp "$dbg/vmlinuz" "$out/vmlinuz"
for f in modules.builtin modules.builtin.modinfo modules.order; do
	[ -f "$dbg/linux/$f" ] && cp "$dbg/linux/$f" "$m/"
done
depmod -b "$out" "$rel"
touch "$stamp"
