#!/usr/bin/env bash
# Builds the profile fixtures into $1 (the tls and signal ones also on
# musl, see MUSL_CC below), all gcc -O2 -fomit-frame-pointer (a
# chain main -> a -> b -> c whose functions keep no frame pointer): a PIE,
# a non-PIE, and a PIE whose a, b and c are in a shared library
# (libchain.so, found through its rpath). Needs gcc; CC=aarch64-linux-gnu-gcc
# builds them for arm64, CC=riscv64-linux-gnu-gcc for riscv64.
set -euo pipefail
src=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$1"
out=$(cd "$1" && pwd) # absolute: some steps build from another directory
cflags="-O2 -fomit-frame-pointer -fno-optimize-sibling-calls"
# CHAIN_FP=1: with frame pointers instead (arm64, where profile unwinds by
# frame pointers only).
[ "${CHAIN_FP:-}" = 1 ] && cflags="-O2 -fno-omit-frame-pointer -fno-optimize-sibling-calls"
# gcc 12 writes no .eh_frame for C on riscv64 unless asked (13 does by
# default there): the unwinder's tables.
case "$("${CC:-gcc}" -dumpmachine)" in riscv64*) cflags="$cflags -fasynchronous-unwind-tables" ;; esac
"${CC:-gcc}" $cflags -fPIE -pie -o "$out/chain-pie" "$src/chain.c"
# chain-fp: the chain with frame pointers, for --unwind=fp on every
# architecture (riscv64's and 32-bit ARM's only way). 32-bit ARM's kernel
# walks APCS frames (the caller's fp, sp and lr just below fp), which gcc
# lays out with -mapcs-frame only (and in ARM code, as the uprobes need).
fpflags="-O2 -fno-omit-frame-pointer -fno-optimize-sibling-calls"
case "$("${CC:-gcc}" -dumpmachine)" in arm*) fpflags="$fpflags -mapcs-frame" ;; esac
"${CC:-gcc}" $fpflags -fPIE -pie -o "$out/chain-fp" "$src/chain.c"
# deep: stacks of a chosen depth, with frame pointers (make bench,
# TestDeepStacks), and unwind tables where gcc 12 writes none unasked.
deepflags=$fpflags
case "$("${CC:-gcc}" -dumpmachine)" in riscv64*) deepflags="$deepflags -fasynchronous-unwind-tables" ;; esac
"${CC:-gcc}" $deepflags -fPIE -pie -o "$out/deep" "$src/deep.c"
"${CC:-gcc}" $cflags -fno-pie -no-pie -o "$out/chain-nopie" "$src/chain.c"
"${CC:-gcc}" $cflags -fPIC -shared -DCHAIN_LIB -DCHAIN_SO -o "$out/libchain.so" "$src/chain.c"
"${CC:-gcc}" $cflags -fPIE -pie -DCHAIN_LIB -o "$out/chain-lib" "$src/chain.c" -L"$out" -lchain -Wl,-rpath,'$ORIGIN'
# overload: C++ overloads and a template instance under their mangled names.
"${CC:-gcc}" $cflags -fPIE -pie -o "$out/overload" "$src/overload.c"
# signal: time spent in signal handlers (timers, and a fault in a PLT stub).
"${CC:-gcc}" $cflags -fPIE -pie -o "$out/signal" "$src/signal.c"
# realign: a frame realigned through a DRAP (CFA = *(rbp - 8)).
"${CC:-gcc}" $cflags -fPIE -pie -o "$out/realign" "$src/realign.c"
# noreturn: a call of a noreturn function as a function's last
# instruction, the next function right after it.
"${CC:-gcc}" $cflags -falign-functions=1 -fno-reorder-functions -fno-toplevel-reorder -fPIE -pie -o "$out/noreturn" "$src/noreturn.c"
# forms: the chain in a thread, and in a vfork child.
"${CC:-gcc}" $cflags -fPIE -pie -pthread -o "$out/forms" "$src/forms.c"
# offcpu: waits in known proportions under two chains (--off-cpu).
"${CC:-gcc}" $cflags -fPIE -pie -o "$out/offcpu" "$src/offcpu.c"
# gospin: a Go program, stripped, for the CC's architecture.
case $("${CC:-gcc}" -dumpmachine) in
aarch64*) goarch=arm64 ;;
riscv64*) goarch=riscv64 ;;
arm*) goarch=arm ;;
*) goarch=amd64 ;;
esac
(cd "$src/gospin" && CGO_ENABLED=0 GOARCH=$goarch GOARM=7 GOFLAGS= go build -trimpath -ldflags='-s -w' -o "$out/gospin" .)
# tls: thread-locals and a global in phases, for --label (a PIE, its TLS
# local-exec; pthreads), and its libraries' thread-locals, one library per
# access model: libtkgd.so general- and local-dynamic (the traditional
# dialect), libtkie.so initial-exec, libtkdesc.so TLSDESC, and libtkdl.so
# (general-dynamic) opened by dlopen.
case $("${CC:-gcc}" -dumpmachine) in
aarch64*) trad=-mtls-dialect=trad desc=-mtls-dialect=desc ;;
# gcc 12 has no TLSDESC for riscv64 (14 has): its libtkdesc.so is
# general-dynamic too.
riscv64*) trad= desc= ;;
*) trad=-mtls-dialect=gnu desc=-mtls-dialect=gnu2 ;;
esac
tls() { # tls CC DIR: the libraries and the executable into DIR
  local cc=$1 dir=$2
  mkdir -p "$dir"
  lib() { "$cc" -O2 -fPIC -shared -DLIB=tk_$1 -o "$dir/libtk$1.so" "${@:2}" "$src/tlslib.c"; }
  lib gd $trad
  lib ie -ftls-model=initial-exec
  lib desc $desc
  lib dl $trad
  "$cc" -O2 -fPIE -pie -pthread -o "$dir/tls" "$src/tls.c" -L"$dir" -ltkgd -ltkie -ltkdesc -Wl,-rpath,'$ORIGIN'
}
tls "${CC:-gcc}" "$out"
# The same on musl, in musl/, and a static executable without the
# libraries, tls-static: with MUSL_CC (vmtest's for arm64 runs the cross
# compiler with a specs file over Debian's arm64 musl), else
# with musl-gcc (Debian's musl-tools) where CC builds for this x86-64.
musl=${MUSL_CC:-}
if [ -z "$musl" ] && [ "$(uname -m)" = x86_64 ] && [[ $("${CC:-gcc}" -dumpmachine) == x86_64* ]]; then
  musl=musl-gcc
fi
if [ -n "$musl" ]; then
  tls "$musl" "$out/musl"
  "$musl" -O2 -static -pthread -DNOLIB -o "$out/musl/tls-static" "$src/tls.c"
  "$musl" $cflags -o "$out/musl/signal" "$src/signal.c"
  "$musl" $cflags -static -o "$out/musl/signal-static" "$src/signal.c"
fi
# The context processes publish for profilers, written by the public
# layouts: otelctx (the OpenTelemetry thread context, exported by the
# executable), customlabels (custom labels ABI v1 in a TLSDESC library)
# and customlabels-v0 (ABI v0 in the executable).
"${CC:-gcc}" -O2 -fPIE -pie -pthread -rdynamic -o "$out/otelctx" "$src/otelctx.c"
"${CC:-gcc}" -O2 -fPIC -shared -DLIBRARY $desc -o "$out/libcustomlabels.so" "$src/customlabels.c"
"${CC:-gcc}" -O2 -fPIE -pie -pthread -o "$out/customlabels" "$src/customlabels.c" -L"$out" -lcustomlabels -Wl,-rpath,'$ORIGIN'
"${CC:-gcc}" -O2 -fPIE -pie -pthread -rdynamic -DV0 -o "$out/customlabels-v0" "$src/customlabels.c"
