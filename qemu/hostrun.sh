#!/bin/sh
# Runs a binary built on the host with the host's own loader and libraries, seen through the
# read-only 9p share at /host, so the initramfs needs no copy of glibc, libstdc++ or libdrm.
exec /host/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
	--library-path /host/lib/x86_64-linux-gnu:/host/usr/lib/x86_64-linux-gnu "$@"
