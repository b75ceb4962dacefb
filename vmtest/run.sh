#!/usr/bin/env bash
# make test-vm: the kernel matrix. Boots Debian's 6.1 and 6.12 cloud kernels
# (which have kprobes, unlike our host's) under qemu TCG with an initramfs
# of busybox, the tools and the test binaries, runs the privileged tests
# inside, and checks each guest's verdict lines.
set -euo pipefail
cd "$(dirname "$0")/.."
cache=.cache/vm
mkdir -p "$cache"
start=$(date +%s)

need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v xz >/dev/null || need+=(xz-utils)
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/include/x86_64-linux-gnu/sys/sdt.h ] || [ -f /usr/include/sys/sdt.h ] || need+=(systemtap-sdt-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "test-vm: installing ${need[*]}" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# The newest Debian cloud kernel of each series, downloaded once.
# TK_VM_SERIES narrows the matrix (e.g. '6\.1\.0-[0-9]+') while debugging.
kernels=()
for series in ${TK_VM_SERIES:-'6\.1\.0-[0-9]+' '6\.12\.[0-9]+\+deb12'}; do
  pkg=$(apt-cache search --names-only "^linux-image-${series}-cloud-amd64-unsigned\$" | awk '{print $1}' | sort -V | tail -1)
  if [ -z "$pkg" ]; then
    apt-get update -qq
    pkg=$(apt-cache search --names-only "^linux-image-${series}-cloud-amd64-unsigned\$" | awk '{print $1}' | sort -V | tail -1)
  fi
  [ -n "$pkg" ] || { echo "test-vm: no Debian package matches linux-image-${series}-cloud-amd64-unsigned" >&2; exit 1; }
  dir="$cache/$pkg"
  if [ ! -d "$dir/boot" ]; then
    (cd "$cache" && rm -f "$pkg"_*.deb && apt-get download -qq "$pkg" 2>/dev/null)
    mkdir -p "$dir" && dpkg -x "$cache/$pkg"_*.deb "$dir"
  fi
  kernels+=("$dir")
done

# Static tools and test binaries.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,tk/bin,tk/t,tk/src,lib,proc,sys,dev,tmp}
chmod 755 "$stage" # the guest's /: an unprivileged test runs a tool as nobody
export CGO_ENABLED=0
for t in writesize dropmon iolat filter profile; do go build -trimpath -o "$stage/tk/bin/$t" "./$t"; done
pkgs=(asm tracefs terminal tools uprobe unwind writesize dropmon iolat filter profile)
for p in "${pkgs[@]}"; do
  go test -c -trimpath -o "$stage/tk/t/$p.test" "./$p"
  mkdir -p "$stage/tk/src/$p"
  [ -d "$p/testdata" ] && cp -r "$p/testdata" "$stage/tk/src/$p/"
done
# The USDT fixtures, built here (the guests have no compiler), and the C
# library they run on, at the paths the dynamic linker looks in.
fx="$stage/tk/src/filter/testdata/usdt/build"
bash filter/testdata/usdt/build.sh "$fx"
bash profile/testdata/build.sh "$stage/tk/src/profile/testdata/build"
for lib in $(ldd "$fx/fx-pie-O2" | grep -o '/[^ ]*'); do
  mkdir -p "$stage$(dirname "$lib")"
  cp -L "$lib" "$stage$lib"
done
cp /bin/busybox "$stage/bin/busybox"
cp vmtest/init.sh "$stage/init"
# TK_VM_RUN: a shell command the guests run instead of the tests (debugging).
if [ -n "${TK_VM_RUN:-}" ]; then
  printf '%s\n' "$TK_VM_RUN" > "$stage/tk/run.sh"
fi
chmod 755 "$stage/init"

status=0
all_passed=0 all_failed=0 all_skipped=0
for dir in "${kernels[@]}"; do
  name=$(basename "$dir")
  vmlinuz=$(ls "$dir"/boot/vmlinuz-*)
  loop=$(find "$dir/lib/modules" -name 'loop.ko*' | head -1)
  case "$loop" in
    *.xz) xz -dc "$loop" > "$stage/lib/loop.ko" ;;
    *) cp "$loop" "$stage/lib/loop.ko" ;;
  esac
  (cd "$stage" && find . -path ./lib -prune -o -print | cpio -o -H newc --quiet; find ./lib | cpio -o -H newc --quiet) > "$cache/initramfs.cpio"
  log="$cache/$name.log"
  t0=$(date +%s)
  # One CPU: with two, 6.12 hits an "Oops: int3" in syscall_trace_enter
  # when a syscall tracepoint is enabled (text_poke_bp under TCG).
  timeout 600 qemu-system-x86_64 -accel tcg -cpu max -smp 1 -m 2048 -nographic -no-reboot \
    -kernel "$vmlinuz" -initrd "$cache/initramfs.cpio" \
    -append "console=ttyS0 quiet panic=-1" > "$log" 2>&1 || true
  tr -d '\r' < "$log" > "$log.txt"
  kver=$(grep -o -m1 'TK-KERNEL .*' "$log.txt" | cut -d' ' -f2 || true)
  echo "== $name (kernel ${kver:-?}), $(( $(date +%s) - t0 )) s"
  if ! grep -q 'TK-DONE' "$log.txt"; then
    echo "test-vm: the guest did not finish; last lines of $log:"; tail -20 "$log.txt"; status=1; continue
  fi
  grep '^TK-OUT' "$log.txt" | grep -E -e '--- (FAIL|SKIP)' -e '_test\.go:' | sed 's/^TK-OUT /   /' || true
  while read -r _ pkg rc; do
    passed=$(grep -c "^TK-OUT $pkg: --- PASS" "$log.txt" || true)
    skipped=$(grep -c "^TK-OUT $pkg: --- SKIP" "$log.txt" || true)
    failed=$(grep -c "^TK-OUT $pkg: --- FAIL" "$log.txt" || true)
    printf '   %-10s %3d passed, %d failed, %d skipped\n' "$pkg" "$passed" "$failed" "$skipped"
    all_passed=$((all_passed + passed)) all_failed=$((all_failed + failed)) all_skipped=$((all_skipped + skipped))
    [ "$rc" = 0 ] || status=1
  done < <(grep '^TK-RESULT' "$log.txt")
done
echo "test-vm: $(( $(date +%s) - start )) s for ${#kernels[@]} kernels"
[ $status = 0 ] || [ $all_failed -gt 0 ] || all_failed=1 # a guest that died counts
echo "test-vm: $all_passed passed, $all_failed failed, $all_skipped skipped"
exit $status
