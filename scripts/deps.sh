#!/usr/bin/env bash
# Installs the Debian packages the project needs. Idempotent: when every package is already
# installed it only asks dpkg and exits, so the Makefile may call it on every build.
set -euo pipefail

PKGS=(
	make cmake g++ pkg-config git
	qemu-system-x86 busybox-static cpio kmod
	linux-headers-amd64 sparse
	libdrm-dev
	libgtest-dev libgmock-dev googletest libbenchmark-dev
	libmimalloc-dev libjemalloc-dev
	clang-format python3 lcov python3-matplotlib
	linux-source-6.1 flex bison bc libelf-dev libssl-dev xz-utils
)

missing=()
for p in "${PKGS[@]}"; do
	if ! dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null | grep -q '^ii'; then
		missing+=("$p")
	fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

SUDO=
if [ "$(id -u)" -ne 0 ]; then
	command -v sudo >/dev/null || { echo "deps: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
	SUDO=sudo
fi
echo "deps: installing ${missing[*]}"
$SUDO apt-get update -qq
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
