#!/usr/bin/env bash
# Builds the profile fixtures into $1, all gcc -O2 -fomit-frame-pointer (a
# chain main -> a -> b -> c whose functions keep no frame pointer): a PIE,
# a non-PIE, and a PIE whose a, b and c are in a shared library
# (libchain.so, found through its rpath). Needs gcc; CC=aarch64-linux-gnu-gcc
# builds them for arm64.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out"
cflags="-O2 -fomit-frame-pointer -fno-optimize-sibling-calls"
# CHAIN_FP=1: with frame pointers instead (arm64, where profile unwinds by
# frame pointers only).
[ "${CHAIN_FP:-}" = 1 ] && cflags="-O2 -fno-omit-frame-pointer -fno-optimize-sibling-calls"
"${CC:-gcc}" $cflags -fPIE -pie -o "$out/chain-pie" "$src/chain.c"
"${CC:-gcc}" $cflags -fno-pie -no-pie -o "$out/chain-nopie" "$src/chain.c"
"${CC:-gcc}" $cflags -fPIC -shared -DCHAIN_LIB -DCHAIN_SO -o "$out/libchain.so" "$src/chain.c"
"${CC:-gcc}" $cflags -fPIE -pie -DCHAIN_LIB -o "$out/chain-lib" "$src/chain.c" -L"$out" -lchain -Wl,-rpath,'$ORIGIN'
# tls: thread-locals and a global in phases, for --label (a PIE, its TLS
# local-exec; pthreads).
"${CC:-gcc}" -O2 -fPIE -pie -pthread -o "$out/tls" "$src/tls.c"
