#!/usr/bin/env bash
# Prints the kernel release the project builds for: the newest installed Debian
# linux-headers-*-amd64 (the guest boots the image of exactly this release).
set -euo pipefail
dir=$(ls -d /usr/src/linux-headers-*-amd64 2>/dev/null | sort -V | tail -n 1)
[ -n "$dir" ] || { echo "kver: no /usr/src/linux-headers-*-amd64; run scripts/deps.sh" >&2; exit 1; }
basename "$dir" | sed 's/^linux-headers-//'
