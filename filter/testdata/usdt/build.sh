#!/usr/bin/env bash
# Builds the USDT and uprobe fixtures into $1: the same program as a PIE at
# -O0 and -O2 and as a non-PIE at -O2 (between them every argument form
# sys/sdt.h writes: register, constant, off(reg), (base,index,scale),
# sym(%rip), sym(,index,scale)), and a PIE that calls into a shared library
# (libtk.so, found through its rpath), fx-calls (calls.c) at -O0, and
# fx-chain (chain.c) at -O2 without frame pointers. Needs gcc and sys/sdt.h
# (systemtap-sdt-dev); CC=aarch64-linux-gnu-gcc builds them for arm64.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
out=$1
mkdir -p "$out"
# sys/sdt.h is the same for every architecture, but Debian installs it
# under the host's triplet only: a cross compiler gets a copy.
if ! echo '#include <sys/sdt.h>' | "${CC:-gcc}" -E -x c - >/dev/null 2>&1; then
  mkdir -p "$out/include/sys"
  cp "$(dirname "$(ls /usr/include/*/sys/sdt.h /usr/include/sys/sdt.h 2>/dev/null | head -1)")"/sdt*.h "$out/include/sys/"
  export CPATH=$out/include
fi
"${CC:-gcc}" -O0 -fPIE -pie -o "$out/fx-pie-O0" "$src/fixture.c" "$src/guarded.c"
"${CC:-gcc}" -O2 -fPIE -pie -o "$out/fx-pie-O2" "$src/fixture.c" "$src/guarded.c"
"${CC:-gcc}" -O2 -fno-pie -no-pie -o "$out/fx-nopie-O2" "$src/fixture.c" "$src/guarded.c"
"${CC:-gcc}" -O2 -fPIC -shared -o "$out/libtk.so" "$src/lib.c"
"${CC:-gcc}" -O2 -fPIE -pie -DTK_LIB -o "$out/fx-lib" "$src/fixture.c" "$src/guarded.c" -L"$out" -ltk -Wl,-rpath,'$ORIGIN'
"${CC:-gcc}" -O0 -o "$out/fx-calls" "$src/calls.c"
# (gcc 12 writes riscv64's .eh_frame only when asked: the unwinder's rows.
# Not on 32-bit ARM, where the tables are .ARM.exidx and need libgcc_s.)
tables=
case "$("${CC:-gcc}" -dumpmachine)" in riscv64*) tables=-fasynchronous-unwind-tables ;; esac
"${CC:-gcc}" -O2 -fomit-frame-pointer -fno-optimize-sibling-calls $tables -fPIE -pie -o "$out/fx-chain" "$src/chain.c"
