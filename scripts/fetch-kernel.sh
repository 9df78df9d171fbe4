#!/usr/bin/env bash
# Fetches Debian's kernel image for the release whose headers are installed, without
# installing it on the host, and keeps only what the VM boots with: vmlinuz and the modules
# the guest loads (DRM, the scheduler, vgem as a PRIME peer, 9p over virtio, VFIO for the
# registration benchmark's baseline), with a fresh modules.dep.
#
# usage: scripts/fetch-kernel.sh KVER OUTDIR
# Result: OUTDIR/vmlinuz and OUTDIR/lib/modules/KVER/. Reruns are no-ops.
set -euo pipefail
kver=$1
out=$2
# The stamp holds the module list's revision: a list that grows fetches again.
rev=3
stamp="$out/.complete"
[ "$(cat "$stamp" 2>/dev/null)" = "rev $rev" ] && exit 0

rm -rf "$out"
mkdir -p "$out/deb"
(
	cd "$out/deb"
	# _apt cannot write into a root-owned build tree; apt then downloads as root, which is fine.
	apt-get download "linux-image-$kver" 2>&1 | grep -v 'Download is performed unsandboxed' || true
)
deb=$(ls "$out"/deb/linux-image-"$kver"_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || { echo "fetch-kernel: apt-get download linux-image-$kver failed" >&2; exit 1; }

m="./lib/modules/$kver"
dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$out" --wildcards \
	"./boot/vmlinuz-$kver" \
	"$m/modules.builtin" "$m/modules.builtin.modinfo" "$m/modules.order" \
	"$m/kernel/drivers/gpu/drm/drm.ko" \
	"$m/kernel/drivers/gpu/drm/drm_shmem_helper.ko" \
	"$m/kernel/drivers/gpu/drm/scheduler/gpu-sched.ko" \
	"$m/kernel/drivers/gpu/drm/vgem/vgem.ko" \
	"$m/kernel/drivers/virtio/virtio.ko" \
	"$m/kernel/drivers/virtio/virtio_ring.ko" \
	"$m/kernel/drivers/virtio/virtio_pci.ko" \
	"$m/kernel/drivers/virtio/virtio_pci_legacy_dev.ko" \
	"$m/kernel/drivers/virtio/virtio_pci_modern_dev.ko" \
	"$m/kernel/fs/9p/9p.ko" \
	"$m/kernel/fs/fscache/fscache.ko" \
	"$m/kernel/fs/netfs/netfs.ko" \
	"$m/kernel/net/9p/9pnet.ko" \
	"$m/kernel/net/9p/9pnet_virtio.ko" \
	"$m/kernel/drivers/vfio/vfio.ko" \
	"$m/kernel/drivers/vfio/vfio_iommu_type1.ko" \
	"$m/kernel/drivers/vfio/vfio_virqfd.ko" \
	"$m/kernel/drivers/vfio/pci/vfio-pci-core.ko" \
	"$m/kernel/drivers/vfio/pci/vfio-pci.ko" \
	"$m/kernel/virt/lib/irqbypass.ko"
mv "$out/boot/vmlinuz-$kver" "$out/vmlinuz"
rmdir "$out/boot"
rm -rf "$out/deb"
depmod -b "$out" "$kver"
echo "rev $rev" > "$stamp"
echo "fetch-kernel: $kver ready in $out ($(du -sh "$out" | cut -f1))"
