package loader

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"

	"golang.org/x/sys/unix"
)

// RemoveMemlock raises RLIMIT_MEMLOCK to unlimited where the kernel still
// charges BPF memory to it (before 5.11, when memory cgroups took over),
// once per run; elsewhere it leaves the limit, which a -c command
// inherits, as it was. cilium/ebpf's rlimit package decides the same by
// creating a map with the limit lowered to zero, in its package init: a
// BPF syscall at the start of every tool, whichever tool and whether it
// loads anything or not. The release number answers the same question.
var RemoveMemlock = sync.OnceValue(func() error {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return err
	}
	if !memlockCharged(string(u.Release[:bytes.IndexByte(u.Release[:], 0)])) {
		return nil
	}
	unlimited := unix.Rlimit{Cur: unix.RLIM_INFINITY, Max: unix.RLIM_INFINITY}
	if err := unix.Prlimit(0, unix.RLIMIT_MEMLOCK, &unlimited, nil); err != nil {
		return fmt.Errorf("raise RLIMIT_MEMLOCK for BPF maps (this kernel charges them to it): %w", err)
	}
	return nil
})

// memlockCharged says whether a kernel of this release charges BPF maps
// and programs to RLIMIT_MEMLOCK: before 5.11. A release it cannot read
// counts as charged (raising the limit is harmless there).
func memlockCharged(release string) bool {
	var v [2]int
	rest := release
	for i := range v {
		end := 0
		for end < len(rest) && rest[end] >= '0' && rest[end] <= '9' {
			end++
		}
		n, err := strconv.Atoi(rest[:end])
		if err != nil {
			return true
		}
		v[i] = n
		if i == 0 {
			if end >= len(rest) || rest[end] != '.' {
				return true
			}
			rest = rest[end+1:]
		}
	}
	return v[0] < 5 || v[0] == 5 && v[1] < 11
}
