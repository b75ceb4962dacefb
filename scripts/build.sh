#!/usr/bin/env bash
# The one build of tracekit. make build, make dist, the tests' own build
# (internal/tooltest), the kernel matrix's guests and make bench all come
# here, so the binary the tests run is the binary that ships.
#
#   scripts/build.sh OUT [GOARCH [GOARM]]
#
# Static (no cgo: a --serve run drops capabilities on every thread, which
# cgo's threads would forbid), stripped, paths trimmed; no HTTP/2 in
# net/http (--serve speaks plain HTTP/1.1 to Prometheus, and h2 needs
# TLS). VERSION and COMMIT come from git unless set.
set -euo pipefail
out=${1:?usage: scripts/build.sh OUT [GOARCH [GOARM]]}
arch=${2:-$(go env GOARCH)}
goarm=${3:-7}
case $out in /*) ;; *) out=$PWD/$out ;; esac
top=$(cd "$(dirname "$0")/.." && pwd)
version=${VERSION:-$(git -C "$top" describe --tags --always --dirty 2>/dev/null || echo dev)}
if [ -z "${COMMIT:-}" ]; then
  COMMIT=$(git -C "$top" rev-parse --short=12 HEAD 2>/dev/null || true)
  git -C "$top" diff --quiet HEAD 2>/dev/null || COMMIT=$COMMIT-dirty
fi
pkg=github.com/tracekit/tracekit
cd "$top"
CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOARM=$goarm go build -trimpath -tags=nethttpomithttp2 \
  -ldflags="-s -w -X $pkg/run.Version=$version -X $pkg/run.Commit=$COMMIT" \
  -o "$out" ./cmd/tracekit
