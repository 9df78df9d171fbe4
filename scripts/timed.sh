#!/usr/bin/env bash
# Runs a command and keeps its wall time in DIR/NAME.s (read by scripts/check-times.sh).
# usage: scripts/timed.sh DIR NAME COMMAND...
set -uo pipefail
dir=$1 name=$2
shift 2
mkdir -p "$dir"
start=$(date +%s)
"$@"
rc=$?
echo $(($(date +%s) - start)) > "$dir/$name.s"
exit $rc
