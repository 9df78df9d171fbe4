#!/usr/bin/env bash
# Where a `make check` went: the phases the Makefile timed (build/check-times/*.s) and every
# CTest entry of the last run (LastTest.log), slowest first, with the share of the total.
#
# usage: scripts/check-times.sh BUILD_DIR
set -uo pipefail
build=$1
log=$build/cmake/Testing/Temporary/LastTest.log
phases=$build/check-times
{
	for f in "$phases"/*.s; do
		[ -f "$f" ] && printf 'phase %s %s\n' "$(basename "$f" .s)" "$(cat "$f")"
	done
	[ -f "$log" ] && awk '
		/^[0-9]+\/[0-9]+ Test: / { name = $3 }
		/^Test time = / { printf "entry %s %.0f\n", name, $4 }' "$log"
} | sort -k3,3nr | awk '
	{ kind[NR] = $1; name[NR] = $2; t[NR] = $3; total += $3 }
	END {
		printf "%-40s %7s %6s\n", "make check: phase or CTest entry", "seconds", "share"
		for (i = 1; i <= NR; i++)
			printf "%-40s %7d %5.1f%%\n", (kind[i] == "phase" ? "[" name[i] "]" : name[i]), t[i], 100 * t[i] / total
		printf "%-40s %7d (%.1f min)\n", "total", total, total / 60
	}'
