#!/usr/bin/env bash
# Makes a copy of Debian's jemalloc PIC archive whose public symbols (malloc, free, mallocx,
# operator new ...) are renamed hostrt_bench_je_*, so pool_bench can call jemalloc without it
# replacing the process's malloc. Internal je_* symbols keep their names (nothing else uses them).
# usage: pool_bench_jemalloc.sh INPUT.a OUTPUT.a
set -euo pipefail
in=$1 out=$2
map="$out.redefine"
nm --defined-only -g "$in" 2>/dev/null |
	awk 'NF == 3 && $3 !~ /^(je_|DW\.ref)/ { print $3 " hostrt_bench_je_" $3 }' | sort -u > "$map"
objcopy --redefine-syms="$map" "$in" "$out"
