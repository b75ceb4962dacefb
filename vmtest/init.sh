#!/bin/busybox sh
# /init of the kernel matrix's guests: run every test binary as root on
# this kernel, print a machine-readable line per binary, power off.
/bin/busybox --install -s /bin
export PATH=/bin HOME=/tmp
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
insmod /lib/loop.ko 2>/dev/null
ip link set lo up
export TRACEKIT_BIN=/tk/bin REQUIRE_PRIVILEGED=1 TRACEKIT_REQUIRE_KPROBES=1
# The host read the kernel's config: built without BTF (privtest.NeedBTF).
grep -q 'tk.nobtf=1' /proc/cmdline && export TRACEKIT_NO_BTF=1
[ -f /tk/require-peers ] && export TRACEKIT_REQUIRE_PEERS=1 PATH=/bin:/usr/sbin:/usr/bin
echo "TK-KERNEL $(uname -r) $(uname -m)"
# riscv64's kernel leaves the BPF JIT off (no ARCH_WANT_DEFAULT_BPF_JIT):
# turned on as the tools' message says, since the interpreter runs no
# program that calls another. With it, bpf_jit_kallsyms (which defaults to
# the JIT's default): the programs' own frames are then named in kernel
# stacks, and left out. Not on 32-bit ARM, whose JIT refuses more of the
# tools' programs ("operation not supported") than its interpreter.
if [ "$(uname -m)" = riscv64 ] && [ "$(cat /proc/sys/net/core/bpf_jit_enable 2>/dev/null)" = 0 ]; then
  echo 1 > /proc/sys/net/core/bpf_jit_enable && echo 1 > /proc/sys/net/core/bpf_jit_kallsyms &&
    echo "TK-OUT init: bpf_jit_enable and bpf_jit_kallsyms were 0, now 1"
fi
if [ -f /tk/run.sh ]; then
  cd /tmp && sh /tk/run.sh 2>&1 | sed 's/^/TK-OUT run: /'
  echo "TK-DONE"
  poweroff -f
fi
for t in /tk/t/*.test; do
  pkg=$(basename "$t" .test | tr - /) # dropmon-prog.test: dropmon/prog
  cd "/tk/src/$pkg"
  # /tk/kernel-tests (the host's architecture, from make test): only the
  # tests that touched the host's kernel; the host ran the rest.
  only=
  if [ -f /tk/kernel-tests ]; then
    only=$(awk -v p="$pkg" '$1 == p && !seen[$2]++ { printf "%s%s", (n++ ? "|" : ""), $2 }' /tk/kernel-tests)
    if [ -z "$only" ]; then
      echo "TK-OUT $pkg: no test here touches the kernel: the host ran them"
      echo "TK-RESULT $pkg 0"
      continue
    fi
    only="-test.run=^($only)\$"
  fi
  # 900 s: profile's tests took 237 s in a 7.2 guest on a slow day of the
  # host, and 240 s was the bound; 594 s on 2026-11-26, beside another
  # guest (TestHostileFrames 162 s of it). The guest's own bound is 2000 s.
  "$t" -test.count=1 -test.v -test.timeout=900s $only > /tmp/out 2>&1
  rc=$?
  # Every test's verdict line, and the failures' output with its
  # continuation lines (a tool's stderr quoted in a message), for the host.
  grep -E '^(--- |=== RUN|\s+\S+\.go:[0-9]+:|\s{8,}\S|FAIL|ok|PASS|panic:)' /tmp/out | grep -v '^=== RUN' | cut -c1-400 | sed "s|^|TK-OUT $pkg: |"
  echo "TK-RESULT $pkg $rc"
done
echo "TK-DONE"
poweroff -f
