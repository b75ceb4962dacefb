#!/usr/bin/env bash
# bench/doc.sh OUT RESULTS ARGS COMMIT: docs/performance.md from a make bench
# run: what it measures, the tables it printed (OUT), and every
# measurement in Go's benchmark format (RESULTS), which benchstat reads
# from the page itself.
set -euo pipefail
out=$1 results=$2 args=$3 commit=$4 # the commit the tools were built from, with " (with uncommitted changes)"
cat <<DOC
# Performance: make bench

Written by \`make bench\`${args:+ (\`bench $args\`)} at $commit on $(date -u +%F),
kernel $(uname -r), $(nproc) CPUs; do not edit by hand. Earlier runs, and
what they taught, are in this file's history (\`git log -p docs/performance.md\`).

\`make bench\` (as root; it installs Debian's bpftrace, libbpf-tools, gcc,
systemtap-sdt-dev and linux-perf when missing) measures the cost per traced
event of each tool beside an empty program on the same event (the floor)
and beside the peers (bpftrace, libbpf-tools, perf), in interleaved rounds
so that the machine's drift falls on every configuration alike, and prints
medians. The workload runs on one thread and is timed by that thread's CPU
clock (the tracepoint and the BPF program run in its context); the BPF
columns are the kernel's own run time of the programs loaded
(\`BPF_STATS_RUN_TIME\`). The VM's speed moves between runs: compare rows
within one run, as ratios, not across runs.

The tables:
DOC
echo
grep -v '^Benchmark' "$out" # the heatmap's lines: below, with the rest
cat <<DOC

## Every measurement

One line for each configuration in each round, in Go's benchmark format:
\`benchstat docs/performance.md\` summarizes this page, and \`benchstat
old.md docs/performance.md\` compares two runs (from \`git show
REV:docs/performance.md > old.md\`).

\`\`\`
DOC
cat "$results"
echo '```'
