#!/usr/bin/env bash
# The driver must stay sparse-clean (make C=2) and build without W=1 warnings.
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
make -s -C "$src/kernel" sparse > "$log" 2>&1
rc=$?
if [ $rc -ne 0 ] || grep -qE 'warning|error' "$log"; then
	cat "$log"
	echo "0 passed, 1 failed: sparse/W=1 found problems in kernel/"
	exit 1
fi
echo "1 passed, 0 failed: kernel/ is sparse and W=1 clean"
