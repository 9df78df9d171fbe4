#!/usr/bin/env bash
# Reads a GoogleTest XML report and prints "<N> passed, <F> failed" plus the failed tests.
# Exit 0 only when the report exists, at least one test ran and passed, and nothing failed: a
# suite whose every test skipped (no device bound, say) has shown nothing.
#
# usage: tests/vm/gtest-summary.sh REPORT.xml
set -uo pipefail
xml=$1
[ -s "$xml" ] || { echo "no GoogleTest report at $xml (the suite did not run or crashed)"; exit 1; }
root=$(grep -m1 '<testsuites ' "$xml")
attr() { sed -n "s/.* $1=\"\([0-9]*\)\".*/\1/p" <<<"$root"; }
tests=$(attr tests) failures=$(attr failures) errors=$(attr errors) disabled=$(attr disabled)
[ -n "$tests" ] || { echo "malformed GoogleTest report $xml"; exit 1; }
# gtest counts skipped tests inside "tests"; they neither pass nor fail.
skipped=$(grep -c 'result="skipped"' "$xml")
bad=$((failures + errors))
echo "$((tests - disabled - skipped - bad)) passed, $bad failed, $skipped skipped"
awk '/<testcase /{ match($0, /name="[^"]*"/); n = substr($0, RSTART + 6, RLENGTH - 7);
                   match($0, /classname="[^"]*"/); c = substr($0, RSTART + 11, RLENGTH - 12) }
     /<failure /{ print "  FAILED " c "." n }' "$xml" | sort -u
ran=$((tests - disabled - skipped))
[ "$tests" -gt 0 ] || { echo "the suite ran no test"; exit 1; }
[ "$ran" -gt 0 ] || { echo "every test was skipped"; exit 1; }
[ "$bad" -eq 0 ]
