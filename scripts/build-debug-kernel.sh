#!/usr/bin/env bash
# Builds the debug kernel the `debug` VM configuration boots (KASAN, lockdep, DMA-API debug,
# kmemleak, UBSAN, fault injection) from Debian's linux-source-6.1: the same source and
# Debian patches as the production kernel, so edu_accel builds against it unchanged.
#
# The build (~20 minutes on 2 cores) is cached outside the clone, keyed by the config
# fragment, this script and the source package's version, so every clone on one machine
# shares it and a change to the fragment builds a new one.
#
# usage: scripts/build-debug-kernel.sh          builds if needed, prints the tree's path
# Result: DIR/linux (built tree: KDIR for the module), DIR/vmlinuz, DIR/release, DIR/.complete
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
frag=$here/debug-kernel.config
tarball=/usr/src/linux-source-6.1.tar.xz
[ -f "$tarball" ] || { echo "build-debug-kernel: $tarball missing (scripts/deps.sh)" >&2; exit 1; }
srcver=$(dpkg-query -W -f='${Version}' linux-source-6.1)
# Bump when the way the tree is built changes (not for comments).
recipe=1
key=$( { echo "$srcver recipe $recipe"; cat "$frag"; } | sha256sum | cut -c1-16)
cache=${EDU_DEBUG_KERNEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/edu-accel}
dir=$cache/debug-kernel-$key
if [ -f "$dir/.complete" ]; then
	echo "$dir"
	exit 0
fi

mkdir -p "$cache"
exec 9> "$cache/.lock"
flock 9
[ -f "$dir/.complete" ] && { echo "$dir"; exit 0; }

log() { echo "build-debug-kernel: $*" >&2; }
start=$(date +%s)
rm -rf "$dir"
mkdir -p "$dir"
log "extracting linux-source-6.1 $srcver into $dir"
tar -xf "$tarball" -C "$dir"
mv "$dir/linux-source-6.1" "$dir/linux"
cd "$dir/linux"
# The scheduler and the shmem helper have no prompt: only drivers select them, none on
# x86 without COMPILE_TEST. Give them one so the fragment can build them in.
sed -i -e '/^config DRM_GEM_SHMEM_HELPER$/,/^\ttristate$/s/^\ttristate$/\ttristate "GEM shmem helper"/' \
	-e '/^config DRM_SCHED$/,/^\ttristate$/s/^\ttristate$/\ttristate "GPU scheduler"/' \
	drivers/gpu/drm/Kconfig
make -s x86_64_defconfig > /dev/null
scripts/kconfig/merge_config.sh -m .config kernel/configs/kvm_guest.config "$frag" > /dev/null
make -s olddefconfig > /dev/null
missing=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=*)
		grep -qxF "$line" .config || { log "fragment line not in the final config: $line"; missing=1; } ;;
	esac
done < "$frag"
[ $missing = 0 ] || exit 1
log "building (nice; about 20 minutes on 2 cores)"
nice -n 10 make -j"$(nproc)" -s bzImage modules > "$dir/build.log" 2>&1 ||
	{ tail -n 40 "$dir/build.log" >&2; exit 1; }
cp arch/x86/boot/bzImage "$dir/vmlinuz"
make -s kernelrelease > "$dir/release"
echo $(($(date +%s) - start)) > "$dir/build_s"
touch "$dir/.complete"
log "$(cat "$dir/release") built in $(cat "$dir/build_s") s"
echo "$dir"
