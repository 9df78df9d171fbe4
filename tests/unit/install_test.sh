#!/usr/bin/env bash
# Installs hostrt into a scratch prefix and builds two consumers against it: a CMake project
# with find_package(hostrt) and a C program with pkg-config. Both run on the emulated backend.
# usage: install_test.sh BUILD_DIR SCRATCH_DIR
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd -P)
build=$1 scratch=$2
rm -rf "$scratch" && mkdir -p "$scratch" && scratch=$(cd "$scratch" && pwd -P)
cmake --install "$build" --prefix "$scratch/prefix" --component Unspecified >/dev/null
cmake -S "$here/install_consumer" -B "$scratch/cxx" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/cxx" >/dev/null
"$scratch/cxx/consumer_cxx"
export PKG_CONFIG_PATH="$scratch/prefix/lib/pkgconfig:$scratch/prefix/lib/x86_64-linux-gnu/pkgconfig"
# shellcheck disable=SC2046
cc -std=c11 -Wall -Werror -o "$scratch/consumer_c" "$here/install_consumer/consumer.c" $(pkg-config --cflags --libs hostrt)
HOSTRT_BACKEND=emulated "$scratch/consumer_c"
echo "install test: find_package and pkg-config consumers PASS"
