#!/usr/bin/env bash
# Where a `make check` went: the phases the Makefile timed (build/check-times/*.s; their sum is
# the wall time) and every CTest entry of the last run (LastTest.log), slowest first. CTest runs
# two entries at a time, so the entries add up to about twice the [ctest] phase.
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
} | sort -k1,1r -k3,3nr | awk '
	{ kind[NR] = $1; name[NR] = $2; t[NR] = $3; if ($1 == "phase") wall += $3; else busy += $3 }
	END {
		printf "%-40s %7s\n", "make check: phase, then CTest entry", "seconds"
		for (i = 1; i <= NR; i++) {
			if (kind[i] == "entry" && kind[i - 1] == "phase")
				printf "%-40s %7d (%.1f min)\n%s\n", "total (wall)", wall, wall / 60, "-- CTest entries, two at a time:"
			printf "%-40s %7d\n", (kind[i] == "phase" ? "[" name[i] "]" : name[i]), t[i]
		}
		printf "%-40s %7d (%.1fx the [ctest] phase)\n", "sum of entries", busy, busy / (wall_ctest > 0 ? wall_ctest : 1)
	}' wall_ctest="$(cat "$phases/ctest.s" 2>/dev/null || echo 0)"
