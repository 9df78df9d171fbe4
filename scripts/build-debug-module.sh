#!/usr/bin/env bash
# Builds edu_accel.ko against the debug kernel's tree (scripts/build-debug-kernel.sh) in
# BUILD/kernel-debug: the sources are linked there, so the production build in kernel/ and
# this one never share an object file.
#
# usage: scripts/build-debug-module.sh BUILD_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd -P)
out=$1/kernel-debug
dbg=$("$src/scripts/build-debug-kernel.sh")
mkdir -p "$out/compat"
# The driver's own sources only: kernel/edu_accel.mod.c is the production build's modpost
# output, and a link to it would have this build's modpost (no symbol versions: the tree has
# no Module.symvers) write through into kernel/, whose next make then relinked the production
# module without them, which the kernel taints as forced and denies its tracepoints.
rm -f "$out/edu_accel.mod.c"
for f in "$src"/kernel/edu_accel_*.[ch] "$src"/kernel/Kbuild; do
	ln -sfn "$f" "$out/$(basename "$f")"
done
for f in "$src"/kernel/compat/*; do
	ln -sfn "$f" "$out/compat/$(basename "$f")"
done
gen="$out/compat/generated/edu_accel_compat.h"
if [ ! -f "$gen" ] || [ -n "$(find "$src/kernel/compat" -newer "$gen")" ]; then
	mkdir -p "$(dirname "$gen")"
	"$src/kernel/compat/probe.sh" "$dbg/linux" "$gen"
fi
# modpost cannot see the tree's exports without Module.symvers; the module still loads.
# Instrumented for gcov (the debug kernel exports its counters in debugfs): every debug VM
# run leaves the driver's line and branch counts in its output (scripts/coverage-report.sh).
make -C "$dbg/linux" M="$out" EDU_SRC="$src" EDU_GCOV=y EDU_FAULT_INJECTION=y W=1 modules
