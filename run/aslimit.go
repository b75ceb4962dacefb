package run

import (
	"fmt"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

// The address space a run needs, measured on x86-64 (6.18): the Go runtime
// reserves about 750 MiB before main (below that it cannot start at all,
// and exits 2 with its own "fatal error"); the heap, the BPF maps' and the
// perf rings' mappings take the rest. With a limit of 760 to 780 MiB,
// profile died of "out of memory" in 1 run of 2.
const (
	runtimeReserve = 800 << 20
	leastAddrSpace = 1 << 30
)

// checkAddressSpace refuses a run under an address-space limit (ulimit -v)
// it would die under, in one line, and under a larger one tells the
// garbage collector to keep the heap within what the limit leaves: a soft
// bound, so that the heap's growth is collected before it is refused.
func checkAddressSpace() error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_AS, &lim); err != nil || lim.Cur == unix.RLIM_INFINITY {
		return nil
	}
	return limitAddressSpace(lim.Cur, debug.SetMemoryLimit)
}

func limitAddressSpace(limit uint64, setMemoryLimit func(int64) int64) error {
	if limit < leastAddrSpace {
		return fmt.Errorf("the address-space limit (ulimit -v) is %d MiB: a run needs %d MiB (the Go runtime alone reserves about 750 MiB at start): raise it, or lift it with 'ulimit -v unlimited'", limit>>20, leastAddrSpace>>20)
	}
	setMemoryLimit(int64(min(limit-runtimeReserve, 1<<62)))
	return nil
}
