#!/usr/bin/env bash
# Turns gcov counters (.gcda) written somewhere else (a VM run's /out, a snapshot) into an
# lcov tracefile, with the notes files (.gcno) of the build that made them.
#
# usage: scripts/coverage-capture.sh GCNO_DIR GCDA_DIR OUT.info
# A .gcda at GCDA_DIR/REL is matched with GCNO_DIR/REL's .gcno, or with GCNO_DIR/NAME.gcno
# (the kernel's counters come flat, named after their object). Source paths in the notes are
# relative to GCNO_DIR (the module) or absolute (CMake builds).
set -euo pipefail
gcno=$(cd "$1" && pwd -P) gcda=$(cd "$2" && pwd -P) out=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/coverage.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
n=0
while IFS= read -r -d '' f; do
	rel=${f#"$gcda"/}
	note=$gcno/${rel%.gcda}.gcno
	[ -f "$note" ] || note=$gcno/$(basename "${rel%.gcda}").gcno
	[ -f "$note" ] || { echo "coverage-capture: no notes file for $f" >&2; exit 1; }
	mkdir -p "$tmp/$(dirname "$rel")"
	cp "$f" "$tmp/$rel"
	ln -s "$note" "$tmp/${rel%.gcda}.gcno"
	n=$((n + 1))
done < <(find "$gcda" -name '*.gcda' -print0)
[ "$n" -gt 0 ] || { echo "coverage-capture: no .gcda under $gcda" >&2; exit 1; }
# geninfo warns about every kernel header it cannot open from the module's directory; those
# files are dropped later (coverage.py merge --keep), so the warnings are noise.
# Branches include C++'s exception edges (every call that may throw): lcov 1.16 drops them
# (geninfo_no_exception_branch) only from gcov's text format, which gcc 12's notes break.
lcov --quiet --rc lcov_branch_coverage=1 --capture --directory "$tmp" --base-directory "$gcno" \
	--output-file "$out" 2> >(grep -v -e "WARNING: could not open" -e "exclusion markers" -e "redefined at" >&2)
