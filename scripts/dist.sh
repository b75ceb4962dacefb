#!/usr/bin/env bash
# make dist: dist/tracekit-VERSION-linux-ARCH.tar.gz for amd64, arm64, riscv64 and
# armv7 (32-bit ARM, GOARM=7: hard float, as Debian's armhf), each
# with the one static binary, a link per tool, the man pages (man/man8/,
# for man -M or MANPATH) and the README, and
# dist/SHA256SUMS. The archives are reproducible: names sorted, owner root,
# times those of the commit.
set -euo pipefail
cd "$(dirname "$0")/.."
export VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
version=$VERSION tools=${TOOLS:?}
out=${DIST:-dist}
mtime=$(git log -1 --format=%cI 2>/dev/null || date -u +%FT%TZ)
rm -rf "$out" && mkdir -p "$out"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
for arch in amd64 arm64 riscv64 armv7; do
  name=tracekit-$version-linux-$arch
  mkdir -p "$stage/$name"
  goarch=$arch
  [ "$arch" = armv7 ] && goarch=arm
  bash scripts/build.sh "$stage/$name/tracekit" "$goarch" 7
  for t in $tools; do ln -s tracekit "$stage/$name/$t"; done
  cp README.md "$stage/$name/"
  mkdir -p "$stage/$name/man/man8"
  for t in $tools; do cp "man/$t.8" "$stage/$name/man/man8/"; done
  tar -C "$stage" --sort=name --owner=0 --group=0 --numeric-owner --mtime="$mtime" -cf - "$name" | gzip -n -9 > "$out/$name.tar.gz"
done
(cd "$out" && sha256sum -- *.tar.gz > SHA256SUMS)
ls -l "$out"
cat "$out/SHA256SUMS"
