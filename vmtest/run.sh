#!/usr/bin/env bash
# make test-vm: the kernel matrix. Boots Debian's 5.10, 6.1, 6.12 and 7.x cloud kernels
# for x86-64, 6.1 for arm64 and 32-bit ARM (armv7) and 7.x for riscv64
# (which have kprobes, unlike our host's) under qemu TCG with an initramfs of busybox, the tools and the test binaries
# (built for the guest's architecture), runs the privileged tests inside,
# and checks each guest's verdict lines.
#
# Phases, so that make test can prepare the guests while the host's tests
# run: `run.sh install` installs what the matrix needs; `run.sh prepare`
# also downloads the kernels and builds each architecture's stage (in
# $cache/stages, the kernels listed in $cache/kernels); `run.sh boot`
# boots the prepared guests and checks them; `run.sh` alone does all.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.cache/vm
mkdir -p "$cache"
phase=${1:-all}
case "$phase" in
  install|prepare|boot|all) ;;
  *) echo "usage: vmtest/run.sh [install|prepare|boot]" >&2; exit 2 ;;
esac
start=$(date +%s)
stages=$(pwd)/$cache/stages

if [ "$phase" != boot ]; then

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
command -v qemu-system-aarch64 >/dev/null || need+=(qemu-system-arm)
command -v aarch64-linux-gnu-gcc >/dev/null || need+=(gcc-aarch64-linux-gnu)
[ -f /usr/aarch64-linux-gnu/lib/libc.so.6 ] || need+=(libc6-dev-arm64-cross)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
command -v gcc >/dev/null || need+=(gcc)
if [ -n "${TK_VM_ARMV7_SERIES-x}" ]; then
  command -v qemu-system-arm >/dev/null || need+=(qemu-system-arm)
  command -v arm-linux-gnueabihf-gcc >/dev/null || need+=(gcc-arm-linux-gnueabihf)
  [ -f /usr/arm-linux-gnueabihf/lib/libc.so.6 ] || need+=(libc6-dev-armhf-cross)
fi
if [ -n "${TK_VM_RISCV64_SERIES-x}" ]; then
  command -v qemu-system-riscv64 >/dev/null || need+=(qemu-system-misc)
  command -v riscv64-linux-gnu-gcc >/dev/null || need+=(gcc-riscv64-linux-gnu)
  [ -f /usr/riscv64-linux-gnu/lib/libc.so.6 ] || need+=(libc6-dev-riscv64-cross)
fi
command -v musl-gcc >/dev/null || need+=(musl-tools)
[ -f /usr/include/x86_64-linux-gnu/sys/sdt.h ] || [ -f /usr/include/sys/sdt.h ] || need+=(systemtap-sdt-dev)
# The man pages' test renders each page (cmd/tracekit TestManPages).
command -v groff >/dev/null || need+=(groff-base)
command -v man >/dev/null || need+=(man-db)
# bpftrace's tools (/usr/sbin/*.bt), which bpftrace/parse reads (TestTools).
# (Debian's bpftrace is /usr/bin/bpftrace: a test of /usr/sbin's
# reinstalled it at every run.)
command -v bpftrace >/dev/null && compgen -G '/usr/sbin/*.bt' >/dev/null || need+=(bpftrace)
# The peers filter's calls are checked against in the x86-64 guests.
[ -x /usr/sbin/ksnoop ] && [ -x /usr/sbin/funclatency ] || need+=(libbpf-tools)
if [ ${#need[@]} -gt 0 ]; then
  echo "test-vm: installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
fi
[ "$phase" != install ] || exit 0

if [ "$phase" != boot ]; then

# The newest Debian cloud kernel of each series, downloaded once: 6.1 and
# 6.12 from the machine's own sources; 5.10 (bullseye) and 7.x (sid)
# through a private apt configuration under $cache/apt, which never touches
# the machine's sources. TK_VM_SERIES narrows the matrix (e.g. '6\.1\.0-[0-9]+')
# while debugging.
apt_dir=$(pwd)/$cache/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
cat > "$apt_dir/sources.list" <<'SOURCES'
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian sid main
SOURCES
private=(-o Dir::Etc::sourcelist="$apt_dir/sources.list" -o Dir::Etc::sourceparts=- -o Dir::State::Lists="$apt_dir/lists" -o Dir::Cache="$apt_dir/cache")
private_updated=
newest() { # newest PKG-REGEX [apt options...]: the highest version of the packages named so
  local re=$1
  shift
  apt-cache "$@" search --names-only "$re" | awk '{print $1}' | sort -V | tail -1
}
kernels=()
for series in ${TK_VM_SERIES-'5\.10\.0-[0-9]+' '6\.1\.0-[0-9]+' '6\.12\.[0-9]+\+deb12' '7\.[0-9]+\.[0-9]+\+deb[0-9]+'}; do
  opts=()
  case "$series" in
    5*|7*)
      opts=("${private[@]}")
      if [ -z "$private_updated" ] && { [ -z "$(ls "$apt_dir/lists" 2>/dev/null | grep -v partial)" ] || [ -z "$(newest "^linux-image-${series}-cloud-amd64(-unsigned)?\$" "${opts[@]}")" ]; }; then
        apt-get "${opts[@]}" update -qq
        private_updated=1
      fi
      ;;
  esac
  # sid's linux-image-VERSION is a meta package: its kernel is in
  # linux-binary-VERSION and its modules in linux-modules-VERSION.
  case "$series" in
    7*) pkg=$(newest "^linux-binary-${series}-cloud-amd64\$" "${opts[@]}"); extra=${pkg/linux-binary-/linux-modules-} ;;
    *) pkg=$(newest "^linux-image-${series}-cloud-amd64-unsigned\$" "${opts[@]}"); extra= ;;
  esac
  if [ -z "$pkg" ] && [ ${#opts[@]} -eq 0 ]; then
    apt-get update -qq
    pkg=$(newest "^linux-image-${series}-cloud-amd64-unsigned\$")
  fi
  [ -n "$pkg" ] || { echo "test-vm: no Debian kernel package matches the series ${series}" >&2; exit 1; }
  dir="$cache/$pkg"
  if [ -z "$(find "$dir" -name 'vmlinuz*' -type f 2>/dev/null | head -1)" ]; then
    for p in $pkg $extra; do
      (cd "$cache" && rm -f "$p"_*.deb && apt-get "${opts[@]}" download -qq "$p" 2>/dev/null)
      mkdir -p "$dir" && dpkg -x "$cache/$p"_*.deb "$dir"
    done
  fi
  kernels+=("amd64:$dir")
done

# The kernels of the other architectures and their busybox, each through a
# private apt configuration of its own (APT::Architecture=DEBARCH, in
# $cache/apt-DEBARCH), which never touches the machine's sources:
#   arm64: bookworm's cloud kernel;
#   riscv64: sid's (linux-binary-VERSION-riscv64 holds vmlinuz,
#     linux-modules-VERSION-riscv64 loop.ko); TCG boots it with QEMU's
#     OpenSBI (-M virt, no -cpu max in bookworm's QEMU 7.2);
#   armv7 (32-bit ARM, GOARCH=arm): bookworm's armmp kernel (no BTF).
apt_arch() { # apt_arch DEBARCH ARGS...: apt-get or apt-cache's options for DEBARCH's configuration
  local d=$(pwd)/$cache/apt-$1
  printf '%s\n' -o "APT::Architecture=$1" -o "APT::Architectures=$1" -o "Dir::Etc::sourcelist=$d/sources.list" -o Dir::Etc::sourceparts=- \
    -o "Dir::State::Lists=$d/lists" -o "Dir::Cache=$d/cache" -o Dir::State::status=/dev/null
}
foreign() { # foreign GOARCH DEBARCH SUITE PACKAGE-PATTERN SERIES...: @ in the pattern is the series
  local goarch=$1 debarch=$2 suite=$3 pattern=$4 d=$(pwd)/$cache/apt-$2 updated= series re pkg dir p opts
  shift 4
  mapfile -t opts < <(apt_arch "$debarch")
  mkdir -p "$d/lists/partial" "$d/cache/archives/partial"
  echo "deb [arch=$debarch signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" > "$d/sources.list"
  for series in "$@"; do
    re="^${pattern//@/$series}\$"
    pkg=$(newest "$re" "${opts[@]}")
    if [ -z "$pkg" ] && [ -z "$updated" ]; then
      apt-get "${opts[@]}" update -qq
      updated=1
      pkg=$(newest "$re" "${opts[@]}")
    fi
    [ -n "$pkg" ] || { echo "test-vm: no Debian $debarch kernel package matches the series ${series}" >&2; exit 1; }
    dir="$cache/$pkg"
    if [ -z "$(find "$dir" -name 'vmlinuz*' -type f 2>/dev/null | head -1)" ]; then
      for p in $pkg $([[ $pkg == linux-binary-* ]] && echo "${pkg/linux-binary-/linux-modules-}"); do
        (cd "$cache" && rm -f "$p"_*.deb && apt-get "${opts[@]}" download -qq "$p" 2>/dev/null)
        mkdir -p "$dir" && dpkg -x "$cache/$p"_*.deb "$dir" && rm -f "$cache/$p"_*.deb
      done
    fi
    if [ -z "$(busybox_of "$debarch")" ]; then
      [ -n "$updated" ] || [ -n "$(ls "$d/lists" | grep -v partial)" ] || apt-get "${opts[@]}" update -qq
      (cd "$cache" && rm -f busybox-static_*_"$debarch".deb && apt-get "${opts[@]}" download -qq "busybox-static:$debarch" 2>/dev/null)
      dpkg -x "$cache"/busybox-static_*_"$debarch".deb "$cache/busybox-$debarch" && rm -f "$cache"/busybox-static_*_"$debarch".deb
    fi
    kernels+=("$goarch:$dir")
  done
}
busybox_of() { # busybox_of DEBARCH: its static busybox (sid's is in /usr/bin)
  find "$cache/busybox-$1/bin/busybox" "$cache/busybox-$1/usr/bin/busybox" -type f 2>/dev/null | head -1
}
# shellcheck disable=SC2086 # each series is one word
foreign arm64 arm64 bookworm 'linux-image-@-cloud-arm64-unsigned' ${TK_VM_ARM64_SERIES-'6\.1\.0-[0-9]+'}
# shellcheck disable=SC2086
foreign riscv64 riscv64 sid 'linux-binary-@-riscv64' ${TK_VM_RISCV64_SERIES-'7\.[0-9]+\.[0-9]+\+deb[0-9]+'}
# shellcheck disable=SC2086
foreign arm armhf bookworm 'linux-image-@-armmp' ${TK_VM_ARMV7_SERIES-'6\.1\.0-[0-9]+'}
# musl for arm64 (Debian's musl and musl-dev of that architecture,
# unpacked under $cache/musl-DEBARCH), built with the cross compiler
# through musl's specs file rewritten to point there: profile's musl
# fixtures. Not riscv64's: bookworm's riscv64 ld (binutils 2.40) dies of
# SIGSEGV linking anything against sid's musl 1.2.6.
cross_musl() { # cross_musl DEBARCH TRIPLE: $cache/musl-DEBARCH/musl-gcc, made once
  local debarch=$1 triple=$2 d=$(pwd)/$cache/musl-$1 opts
  [ -x "$d/musl-gcc" ] && return
  mapfile -t opts < <(apt_arch "$debarch")
  [ -n "$(ls "$cache/apt-$debarch/lists" | grep -v partial)" ] || apt-get "${opts[@]}" update -qq
  rm -rf "$d" && mkdir -p "$d"
  (cd "$d" && apt-get "${opts[@]}" download -qq "musl:$debarch" "musl-dev:$debarch" 2>/dev/null)
  for deb in "$d"/*.deb; do dpkg -x "$deb" "$d"; done
  # Debian's /lib is /usr/lib: the linker finds libc.so (from musl, in
  # /lib) beside the rest (musl-dev's, in /usr/lib). Without it the link
  # takes libc.a, and dlopen says "Dynamic loading not supported".
  [ -e "$d/usr/lib/$triple-linux-musl/libc.so" ] || ln -s "../../../lib/$triple-linux-musl/libc.so" "$d/usr/lib/$triple-linux-musl/libc.so"
  sed -e "s#/usr/include/$triple-linux-musl#$d/usr/include/$triple-linux-musl#g" \
    -e "s#/usr/lib/$triple-linux-musl#$d/usr/lib/$triple-linux-musl#g" \
    "$d/usr/lib/$triple-linux-musl/musl-gcc.specs" > "$d/musl.specs"
  printf '#!/bin/sh\nexec %s-linux-gnu-gcc -specs=%s "$@"\n' "$triple" "$d/musl.specs" > "$d/musl-gcc.tmp"
  chmod +x "$d/musl-gcc.tmp" && mv "$d/musl-gcc.tmp" "$d/musl-gcc"
}
musl_arm64=$(pwd)/$cache/musl-arm64
[[ " ${kernels[*]} " != *" arm64:"* ]] || cross_musl arm64 aarch64

# Per architecture: static tools and test binaries, the fixtures (built
# here: the guests have no compiler), the C library they run on at the
# paths the dynamic linker looks in, busybox and /init.
rm -rf "$stages" && mkdir -p "$stages"
pkgs=(asm tracefs terminal kbtf loader kernel perfevent hook counts procfs run uprobe unwind ldso
  writesize writesize/prog dropmon dropmon/prog iolat iolat/prog filter filter/compile profile stacks stacks/prog symbols
  bpftrace bpftrace/compile)
make_stage() { # make_stage ARCH
  local arch=$1 stage=$stages/$1 cc=gcc
  [ "$arch" = arm64 ] && cc=aarch64-linux-gnu-gcc
  [ "$arch" = riscv64 ] && cc=riscv64-linux-gnu-gcc
  if [ "$arch" = arm ]; then
    # ARM code, not gcc's default Thumb-2: 32-bit ARM's uprobes probe
    # ARM instructions only (the tools refuse Thumb code in one line).
    cc=$stages/arm-gcc
    printf '#!/bin/sh\nexec arm-linux-gnueabihf-gcc -marm "$@"\n' > "$cc"
    chmod +x "$cc"
  fi
  mkdir -p "$stage"/{bin,tk/bin,tk/t,tk/src,lib,proc,sys,dev,tmp}
  chmod 755 "$stage" # the guest's /: an unprivileged test runs a tool as nobody
  bash scripts/build.sh "$stage/tk/bin/tracekit" "$arch" 7
  for t in writesize dropmon iolat filter profile bpftrace; do ln -s tracekit "$stage/tk/bin/$t"; done
  for p in "${pkgs[@]}"; do
    # dropmon/prog's binary is dropmon-prog.test (the guest maps it back).
    CGO_ENABLED=0 GOARCH=$arch GOARM=7 go test -c -trimpath -o "$stage/tk/t/${p//\//-}.test" "./$p"
    mkdir -p "$stage/tk/src/$p"
    [ -d "$p/testdata" ] && cp -r "$p/testdata" "$stage/tk/src/$p/"
  done
  # Debian's bpftrace tools, where the host has them (TestDebianTools).
  mkdir -p "$stage/usr/sbin"
  cp /usr/sbin/*.bt "$stage/usr/sbin/"
  local fx="$stage/tk/src/filter/testdata/usdt/build"
  CC=$cc bash filter/testdata/usdt/build.sh "$fx"
  # Without frame pointers (but chain-fp): the in-kernel unwinder does
  # the work (riscv64's with unwind tables asked of its gcc 12).
  local musl=
  [ "$arch" = arm64 ] && musl=$musl_arm64/musl-gcc
  CC=$cc MUSL_CC=$musl bash stacks/testdata/build.sh "$stage/tk/src/stacks/testdata/build"
  if [ "$arch" = arm64 ]; then
    mkdir -p "$stage/lib/aarch64-linux-gnu"
    cp -L /usr/aarch64-linux-gnu/lib/ld-linux-aarch64.so.1 "$stage/lib/"
    cp -L /usr/aarch64-linux-gnu/lib/libc.so.6 "$stage/lib/aarch64-linux-gnu/"
    cp "$(busybox_of arm64)" "$stage/bin/busybox"
    cp -L "$musl_arm64/lib/ld-musl-aarch64.so.1" "$stage/lib/"
  elif [ "$arch" = arm ]; then
    mkdir -p "$stage/lib/arm-linux-gnueabihf"
    cp -L /usr/arm-linux-gnueabihf/lib/ld-linux-armhf.so.3 "$stage/lib/"
    cp -L /usr/arm-linux-gnueabihf/lib/libc.so.6 "$stage/lib/arm-linux-gnueabihf/"
    cp "$(busybox_of armhf)" "$stage/bin/busybox"
  elif [ "$arch" = riscv64 ]; then
    mkdir -p "$stage/lib/riscv64-linux-gnu"
    cp -L /usr/riscv64-linux-gnu/lib/ld-linux-riscv64-lp64d.so.1 "$stage/lib/"
    cp -L /usr/riscv64-linux-gnu/lib/libc.so.6 "$stage/lib/riscv64-linux-gnu/"
    cp "$(busybox_of riscv64)" "$stage/bin/busybox"
  else
    for lib in $(ldd "$fx/fx-pie-O2" | grep -o '/[^ ]*'); do
      mkdir -p "$stage$(dirname "$lib")"
      cp -L "$lib" "$stage$lib"
    done
    # musl's loader (and C library), for profile's musl fixtures.
    cp -L /lib/ld-musl-x86_64.so.1 "$stage/lib/"
    cp /bin/busybox "$stage/bin/busybox"
    # Debian's ksnoop and funclatency (libbpf-tools), the peers of
    # filter's calls (TestCallPeers), with stdbuf to read their stdout as
    # it comes; the test fails rather than skips where this file is.
    local peer
    for peer in /usr/sbin/ksnoop /usr/sbin/funclatency /usr/bin/stdbuf /usr/libexec/coreutils/libstdbuf.so; do
      for lib in $peer $(ldd "$peer" | grep -o '/[^ ]*'); do
        mkdir -p "$stage$(dirname "$lib")"
        cp -L "$lib" "$stage$lib"
      done
    done
    touch "$stage/tk/require-peers"
  fi
  # TK_VM_BENCH: the bench too (make bench's kernel-function rows).
  if [ -n "${TK_VM_BENCH:-}" ]; then
    CGO_ENABLED=0 GOARCH=$arch go build -trimpath -o "$stage/tk/bench" ./bench
  fi
  cp vmtest/init.sh "$stage/init"
  # TK_VM_RUN: a shell command the guests run instead of the tests (debugging).
  if [ -n "${TK_VM_RUN:-}" ]; then
    printf '%s\n' "$TK_VM_RUN" > "$stage/tk/run.sh"
  fi
  chmod 755 "$stage/init"
}
for arch in $(printf '%s\n' "${kernels[@]}" | cut -d: -f1 | sort -u); do make_stage "$arch"; done
printf '%s\n' "${kernels[@]}" > "$cache/kernels"
fi
[ "$phase" != prepare ] || exit 0

[ -s "$cache/kernels" ] && [ -d "$stages" ] || { echo "test-vm: nothing prepared: run vmtest/run.sh prepare first" >&2; exit 1; }
mapfile -t kernels < "$cache/kernels"
trap 'rm -rf "$stages" "$cache/kernels"' EXIT

status=0
all_passed=0 all_failed=0 all_skipped=0 recap=
# One guest per kernel, three at a time (each guest has one CPU; the host
# has two: see the boot order below); the results are read in the
# matrix's order afterwards.
boot() { # boot ARCH:DIR: run the tests in a guest of that kernel, log in $cache/NAME.log.txt
  local arch=${1%%:*} dir=${1#*:} name vmlinuz loop initrd t0 stage
  stage=$stages/$arch
  name=$(basename "$dir")
  vmlinuz=$(find "$dir" -name 'vmlinuz*' -type f | head -1)
  loop=$(find "$dir" -name 'loop.ko*' | head -1)
  initrd="$cache/initramfs-$name.cpio"
  local lib
  lib=$(mktemp -d)
  mkdir -p "$lib/lib"
  case "$loop" in
    *.xz) xz -dc "$loop" > "$lib/lib/loop.ko" ;;
    *) cp "$loop" "$lib/lib/loop.ko" ;;
  esac
  { (cd "$stage" && find . -path ./lib -prune -o -print | cpio -o -H newc --quiet; find ./lib | cpio -o -H newc --quiet)
    (cd "$lib" && find ./lib/loop.ko | cpio -o -H newc --quiet); } > "$initrd"
  rm -rf "$lib"
  # A kernel built without BTF (32-bit ARM's armmp), by its own config:
  # the guest's tests that need BTF may skip there (privtest.NeedBTF).
  local extra=
  if grep -qs '^# CONFIG_DEBUG_INFO_BTF is not set' "$(find "$dir" -name 'config-*' | head -1)"; then
    extra=" tk.nobtf=1"
  fi
  t0=$(date +%s)
  # One CPU: with two, 6.12 hits an "Oops: int3" in syscall_trace_enter
  # when a syscall tracepoint is enabled (text_poke_bp under TCG).
  local qemu=(qemu-system-x86_64 -accel tcg -cpu max) console=ttyS0
  if [ "$arch" = arm64 ]; then
    # pauth-impdef: pointer authentication with QEMU's own cheap hash,
    # much faster under TCG than the architected one.
    qemu=(qemu-system-aarch64 -M virt -cpu max,pauth-impdef=on) console=ttyAMA0
  elif [ "$arch" = riscv64 ]; then
    qemu=(qemu-system-riscv64 -M virt)
  elif [ "$arch" = arm ]; then
    qemu=(qemu-system-arm -M virt -cpu max) console=ttyAMA0
  fi
  # 2000 s: a guest took 805 s on a slow day of the host, two at a time;
  # three at a time each runs up to a quarter slower (riscv64's 927 s of
  # the CI of 0a1e668 would be some 1150 s).
  # transparent_hugepage=never: khugepaged (nice 19), preempted inside an
  # RCU read-side section on the one CPU beside the tests' spinners, got
  # too little of it to leave for 20 s and more ("rcu_preempt detected
  # stalls ... P35", khugepaged, in the 7.2 guest); every tracepoint
  # event's close waits for a grace period (tracepoint_synchronize_
  # unregister), so profile's ending outlasted its 30 s watchdog.
  timeout 2000 "${qemu[@]}" -smp 1 -m 2048 -nographic -no-reboot \
    -kernel "$vmlinuz" -initrd "$initrd" \
    -append "console=$console quiet panic=-1 transparent_hugepage=never$extra" > "$cache/$name.log" 2>&1 || true
  tr -d '\r' < "$cache/$name.log" > "$cache/$name.log.txt"
  echo $(( $(date +%s) - t0 )) > "$cache/$name.secs"
  rm -f "$initrd"
}
# Three guests at a time, each starting when a slot frees. A guest keeps
# its one CPU busy 81% of the time (qemu's CPU time over its wall time,
# sampled through the CI run of 0a1e668: the tests wait on rings, timers
# and sleeps), so two guests left 0.4 of the host's two cores idle; three
# ask for 2.4 and keep both busy. In this order (6.1, 7.x and arm64 first;
# 6.12, riscv64, armv7 and 5.10 as slots free), by a simulation of the
# CI's guest times (riscv64 927 s, armv7 720, arm64 672, 6.1 602, 7.2
# 571, 6.12 533, 5.10 464 two at a time) each varied by -15% to +20%, the
# matrix takes 1950 s on average, against 2290 s two at a time.
order=()
for pat in '^amd64:.*/linux-image-6\.1\.0' '^amd64:.*/linux-binary-7' '^arm64:' '^amd64:.*/linux-image-6\.12' '^riscv64:' '^arm:' '^amd64:.*/linux-image-5' '.'; do
  for k in "${kernels[@]}"; do
    if [[ "$k" =~ $pat ]] && [[ ! " ${order[*]} " =~ " $k " ]]; then order+=("$k"); fi
  done
done
# TRACEKIT_KERNEL_TESTS (make test): the host's run of every test listed
# the ones that touch the kernel (privtest records them). The guests of
# the host's own architecture run only those: the rest, pure Go, ran on
# the host a moment ago, and differs by architecture, not by kernel.
host_arch=$(go env GOARCH)
rm -f "$stages/$host_arch/tk/kernel-tests"
if [ -n "${TRACEKIT_KERNEL_TESTS:-}" ] && [ -d "$stages/$host_arch" ]; then
  [ -s "$TRACEKIT_KERNEL_TESTS" ] || { echo "test-vm: $TRACEKIT_KERNEL_TESTS lists no test: did the host's tests run as root?" >&2; exit 1; }
  cp "$TRACEKIT_KERNEL_TESTS" "$stages/$host_arch/tk/kernel-tests"
  echo "test-vm: the $host_arch guests run the $(sort -u "$TRACEKIT_KERNEL_TESTS" | wc -l) tests that touched the host's kernel"
fi
running=0
for k in "${order[@]}"; do
  if [ $running -ge 3 ]; then
    wait -n || true
    running=$((running - 1))
  fi
  boot "$k" &
  running=$((running + 1))
done
wait
for k in "${kernels[@]}"; do
  name=$(basename "${k#*:}")
  log="$cache/$name.log.txt"
  kver=$(grep -o -m1 'TK-KERNEL .*' "$log" | cut -d' ' -f2 || true)
  echo "== $name (${k%%:*}, kernel ${kver:-?}), $(cat "$cache/$name.secs") s"
  if ! grep -q 'TK-DONE' "$log"; then
    echo "test-vm: the guest did not finish; last lines of $log:"; tail -20 "$log"; status=1; continue
  fi
  grep '^TK-OUT' "$log" | grep -E -e '--- (FAIL|SKIP)' -e '_test\.go:' | sed 's/^TK-OUT /   /' || true
  while read -r _ pkg rc; do
    passed=$(grep -c "^TK-OUT $pkg: --- PASS" "$log" || true)
    skipped=$(grep -c "^TK-OUT $pkg: --- SKIP" "$log" || true)
    failed=$(grep -c "^TK-OUT $pkg: --- FAIL" "$log" || true)
    printf '   %-16s %3d passed, %d failed, %d skipped\n' "$pkg" "$passed" "$failed" "$skipped"
    all_passed=$((all_passed + passed)) all_failed=$((all_failed + failed)) all_skipped=$((all_skipped + skipped))
    [ "$rc" = 0 ] || status=1
  done < <(grep '^TK-RESULT' "$log")
  # A recap for the end of the output, where CI's excerpt looks: each
  # failure with the test lines logged before it in its package, and their
  # continuation lines (a tool's stderr quoted by t.Fatalf): those that
  # say what was wanted (up to 3), then the last 6.
  recap+=$(awk -v k="$kver" '
    /^TK-OUT / { split($2, p, ":"); if (p[1] != pkg) { pkg = p[1]; n = 0; w = 0 } }
    /^TK-OUT [^ ]+ +[^ ]+_test\.go:[0-9]+:/ { keep(); cont = 1; next }
    /^TK-OUT [^ ]+         / { if (cont) keep(); next }
    /^TK-OUT / { cont = 0 }
    /^TK-OUT [^ ]+ --- (PASS|SKIP)/ { n = 0; w = 0 }
    /^TK-OUT [^ ]+ --- FAIL/ {
      printf "test-vm: kernel %s: %s\n", k, substr($0, 8)
      for (i = 0; i < w; i++) printf "test-vm:   %s\n", substr(wants[i], 8)
      if (n > 6) printf "test-vm:   ... the last 6 of %d lines:\n", n
      for (i = (n > 6 ? n - 6 : 0); i < n; i++) printf "test-vm:   %s\n", substr(last[i % 6], 8)
      n = 0; w = 0
    }
    function keep() { line = substr($0, 1, 400); if (w < 3 && line ~ /want/) wants[w++] = line; last[n % 6] = line; n++ }' "$log")$'\n'
done
echo "test-vm: $(( $(date +%s) - start )) s for ${#kernels[@]} kernels"
[ $status = 0 ] || [ $all_failed -gt 0 ] || all_failed=1 # a guest that died counts
printf '%s' "${recap//$'\n\n'/$'\n'}" | grep . || true
echo "test-vm: $all_passed passed, $all_failed failed, $all_skipped skipped"
exit $status
