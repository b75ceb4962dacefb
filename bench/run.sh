#!/usr/bin/env bash
# make bench: install the peers when missing, then one interleaved run.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v bpftrace >/dev/null || need+=(bpftrace)
command -v biolatency >/dev/null || need+=(libbpf-tools)
command -v gcc >/dev/null || need+=(gcc)
[ -f /usr/include/x86_64-linux-gnu/sys/sdt.h ] || [ -f /usr/include/sys/sdt.h ] || need+=(systemtap-sdt-dev)
if [ ${#need[@]} -gt 0 ]; then
  echo "bench: installing ${need[*]} from Debian's packages" >&2
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
bash filter/testdata/usdt/build.sh .cache/bench-fx
bash profile/testdata/build.sh .cache/bench-fx
command -v perf >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null; }
go run ./bench "$@"
echo
echo "heatmap frame, 200 rows x 100 slots (go test -bench):"
go test -run XXX -bench HeatFrame ./terminal | grep ^Benchmark
