#!/usr/bin/env bash
# make bench: install the peers when missing, then one interleaved run.
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v bpftrace >/dev/null; then
  echo "bench: installing bpftrace from Debian's packages" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bpftrace >/dev/null
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
exec go run ./bench "$@"
