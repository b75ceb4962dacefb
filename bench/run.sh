#!/usr/bin/env bash
# make bench: install the peers when missing, then one interleaved run.
# A whole run (no arguments) writes docs/performance.md; a run of some
# suites (arguments for ./bench, e.g. -only write) writes
# .cache/performance.md, leaving the committed one as it is.
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
bash stacks/testdata/build.sh .cache/bench-fx
command -v perf >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq linux-perf >/dev/null; }
mkdir -p .cache
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown) # what make bench built
git diff --quiet HEAD -- 2>/dev/null || commit="$commit (with uncommitted changes)"
out=.cache/bench.out       # the tables, as printed
results=.cache/bench.txt   # every measurement, in Go's benchmark format
go run ./bench -results "$results" "$@" | tee "$out"
# The kernel functions' rows (a call timed from kprobe to kretprobe, a glob
# of hundreds of functions attached): the host has no kprobes, so they run
# in the matrix's 6.12 guest, one CPU under TCG, where the figures rank the
# tracers and do not time the machine. BENCH_VM=0 leaves them out.
if [ "${BENCH_VM:-1}" != 0 ] && [ $# -eq 0 ]; then
  {
    echo
    echo "in the 6.12 guest (qemu TCG, 1 CPU: ratios only):"
  } | tee -a "$out"
  TK_VM_SERIES='6\.12\.[0-9]+\+deb12' TK_VM_ARM64_SERIES=' ' TK_VM_BENCH=1 \
    TK_VM_RUN='/tk/bench -bin /tk/bin -only kcall -rounds 7; /tk/bench -bin /tk/bin -only glob -rounds 3' \
    bash vmtest/run.sh > .cache/bench-vm.out 2>&1 || { tail -20 .cache/bench-vm.out; exit 1; }
  grep -a '^TK-OUT run: ' .cache/vm/linux-image-6.12*.log.txt | sed 's/^TK-OUT run: //' | tee -a "$out"
elif [ $# -eq 0 ]; then
  printf '\n(BENCH_VM=0: the kernel functions'"'"' rows, measured in the 6.12 guest, left out.)\n' | tee -a "$out"
fi
{
  echo
  echo "heatmap frame, 200 rows x 100 slots (go test -bench):"
} | tee -a "$out"
go test -run XXX -bench HeatFrame ./terminal | grep ^Benchmark | tee -a "$out" >> "$results"
doc=docs/performance.md
[ $# -eq 0 ] || doc=.cache/performance.md
bash bench/doc.sh "$out" "$results" "$*" "$commit" > "$doc.tmp" && mv "$doc.tmp" "$doc"
echo "bench: written to $doc" >&2
