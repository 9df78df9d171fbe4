#!/usr/bin/env bash
# Builds the test VM's initramfs: static busybox, our /init, and the kernel modules fetched
# by scripts/fetch-kernel.sh. The edu_accel module itself is not inside: the guest loads it
# from the build tree through 9p, so rebuilding the driver never rebuilds this image.
#
# usage: qemu/mkinitramfs.sh KERNEL_DIR OUTPUT
set -euo pipefail
kdir=$1
out=$2
here=$(cd "$(dirname "$0")" && pwd)
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

mkdir -p "$stage"/{bin,sbin,dev,proc,sys,tmp,lib,host,out}
cp /bin/busybox "$stage/bin/busybox"
install -m 0755 "$here/init.sh" "$stage/init"
install -m 0755 "$here/hostrun.sh" "$stage/bin/hostrun"
cp -a "$kdir/lib/modules" "$stage/lib/"
(cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 > "$out.tmp"
mv "$out.tmp" "$out"
