#!/usr/bin/env bash
# Builds the debug kernel the `debug` VM configuration boots (KASAN, lockdep, DMA-API debug,
# kmemleak, UBSAN, fault injection) from Debian's linux-source-6.1: the same source and
# Debian patches as the production kernel, so edu_accel builds against it unchanged.
#
# The tree is allnoconfig with the fragment as its input, so it holds what the fragment names
# and what that selects: ~10-11 minutes on 2 cores (616-680 s measured; defconfig took ~21 minutes,
# mostly drivers the VM never loads). The build is cached outside the clone, keyed by the
# fragment, the recipe number below and the source package's version, so every clone on one
# machine shares it and a change to the fragment builds a new one.
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
recipe=2
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
# The scheduler, the shmem helper and MMU notifiers have no prompt: only drivers select them,
# none that the VM needs on x86. Give them one so the fragment can build them in.
sed -i -e '/^config DRM_GEM_SHMEM_HELPER$/,/^\ttristate$/s/^\ttristate$/\ttristate "GEM shmem helper"/' \
	-e '/^config DRM_SCHED$/,/^\ttristate$/s/^\ttristate$/\ttristate "GPU scheduler"/' \
	drivers/gpu/drm/Kconfig
sed -i -e '/^config MMU_NOTIFIER$/,/^\tbool$/s/^\tbool$/\tbool "MMU notifiers"/' mm/Kconfig
# 9p's filesystem needs no IP (only its TCP transport does, which the guest does not use), and
# IP is ~90 objects of the build.
sed -i -e 's/^\tdepends on INET && NET_9P$/\tdepends on NET_9P/' fs/9p/Kconfig
# allnoconfig with the fragment as its input: what the fragment enables is on, and so are the
# defaults of options without a prompt, but not the defaults of the prompted options below
# them (ACPI's fan and battery drivers, cpufreq...), as merging onto allnoconfig would leave.
make -s KCONFIG_ALLCONFIG="$frag" allnoconfig > /dev/null
missing=0
while IFS= read -r line; do
	case "$line" in
	CONFIG_*=*)
		grep -qxF "$line" .config || { log "fragment line not in the final config: $line"; missing=1; } ;;
	"# CONFIG_"*" is not set")
		sym=${line#\# }
		sym=${sym%% *}
		! grep -q "^$sym=" .config || { log "fragment says unset, final config sets: $sym"; missing=1; } ;;
	esac
done < "$frag"
[ $missing = 0 ] || exit 1
log "building (nice; about 10 minutes on 2 cores)"
nice -n 10 make -j"$(nproc)" -s bzImage modules > "$dir/build.log" 2>&1 ||
	{ tail -n 40 "$dir/build.log" >&2; exit 1; }
cp arch/x86/boot/bzImage "$dir/vmlinuz"
# The build wrote it; `make kernelrelease` under an outer make (make check) put that make's
# "Entering directory" lines around it.
cp include/config/kernel.release "$dir/release"
grep -qx '[0-9][^[:space:]]*' "$dir/release" || { log "bad kernel release: $(cat "$dir/release")"; exit 1; }
echo $(($(date +%s) - start)) > "$dir/build_s"
touch "$dir/.complete"
log "$(cat "$dir/release") built in $(cat "$dir/build_s") s"
echo "$dir"
