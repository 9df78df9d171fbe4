#!/usr/bin/env bash
# The C++ and C of userspace/ and tests/ follow .clang-format (Google, 110 columns).
set -uo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd -P)
cd "$src" || exit 1
mapfile -t files < <(git ls-files 'userspace/*.cpp' 'userspace/*.hpp' 'userspace/*.h' 'tests/*.cpp' 'tests/*.hpp')
bad=$(clang-format --dry-run "${files[@]}" 2>&1 | grep 'warning: code should be clang-formatted' | cut -d: -f1 | sort -u)
if [ -n "$bad" ]; then
	echo "$bad"
	echo "0 passed, 1 failed: not clang-formatted (run clang-format -i on the files above)"
	exit 1
fi
echo "1 passed, 0 failed: ${#files[@]} files clang-formatted"
