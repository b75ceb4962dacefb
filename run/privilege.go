package run

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A --serve run lives for months on a network port: once everything is
// attached, it keeps only the capabilities it still needs, as
// ebpf_exporter does. What it does from then on is read and clear maps
// through the descriptors it holds, read its rings, serve HTTP on the
// socket it bound, and at the end close descriptors and remove its probe
// events. None of that needs a capability, with two exceptions:
//
//   - CAP_BPF, on kernels that check it on every bpf() call, maps read
//     by descriptor included, when kernel.unprivileged_bpf_disabled is set
//     (before 6.4; newer ones check only loads and map creation). Whether
//     this kernel does is asked of it, on a thread of its own with an
//     empty effective set, before anything is dropped.
//   - CAP_DAC_OVERRIDE, for a run not by root that registered probe events
//     in tracefs, whose files are root's: removing them at the end needs
//     it.
//
// Kernel symbols are read through descriptors opened before the drop: the
// kernel checks /proc/kallsyms' reader when it is opened.

// dropCapabilities leaves the process with the capabilities keepCaps
// chooses in its effective, permitted and bounding sets, on every thread,
// and none inheritable or ambient; it returns what it kept.
func (s *Session) dropCapabilities() ([]string, error) {
	keep, names := s.keepCaps()
	last := unix.CAP_LAST_CAP
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 && n < 64 {
			last = n
		}
	}
	// Capabilities are a thread's: every thread of the runtime gets the
	// same sets (AllThreadsSyscall needs a binary without cgo, as make
	// builds it). The bounding set first: dropping from it needs
	// CAP_SETPCAP, which goes last.
	all := func(trap, a1, a2, a3 uintptr) error {
		if _, _, errno := syscall.AllThreadsSyscall(trap, a1, a2, a3); errno != 0 {
			return errno
		}
		return nil
	}
	for c := 0; c <= last; c++ {
		if keep&(1<<c) == 0 {
			if err := all(unix.SYS_PRCTL, unix.PR_CAPBSET_DROP, uintptr(c), 0); err != nil && !errors.Is(err, unix.EINVAL) {
				return nil, fmt.Errorf("drop capabilities: bounding set: %w", err)
			}
		}
	}
	if err := all(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return nil, fmt.Errorf("drop capabilities: ambient set: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	data[0].Effective, data[0].Permitted = uint32(keep), uint32(keep)
	data[1].Effective, data[1].Permitted = uint32(keep>>32), uint32(keep>>32)
	if err := all(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&data[0])), 0); err != nil {
		return nil, fmt.Errorf("drop capabilities: %w", err)
	}
	return names, nil
}

// keepCaps is the set a --serve run keeps (see above), as a mask and by
// name.
func (s *Session) keepCaps() (uint64, []string) {
	var keep uint64
	var names []string
	if bpfNeedsCap() {
		keep |= 1 << unix.CAP_BPF
		names = append(names, "cap_bpf")
	}
	if os.Geteuid() != 0 && s.tracefsEvents {
		keep |= 1 << unix.CAP_DAC_OVERRIDE
		names = append(names, "cap_dac_override")
	}
	return keep, names
}

// bpfNeedsCap reports whether this kernel refuses bpf() calls on existing
// descriptors to a thread with no effective capability: it asks, from a
// thread of its own that empties its effective set (its permitted set
// stays), with a call that can only fail: BPF_MAP_GET_NEXT_KEY on
// descriptor -1 is EBADF when the call got past the check, EPERM when it
// did not. The thread then restores its set, and ends with the goroutine;
// bpfNeedsCap returns once it is gone. It must be: AllThreadsSyscall runs
// the drop on every thread, and the Go runtime dies ("results differ
// between threads") when one thread, lacking CAP_SETPCAP, fails it.
func bpfNeedsCap() bool {
	type answer struct {
		needs bool
		tid   int
	}
	ch := make(chan answer)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		tid := unix.Gettid()
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data, empty [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			ch <- answer{true, tid}
			return
		}
		empty = data
		empty[0].Effective, empty[1].Effective = 0, 0
		if err := unix.Capset(&hdr, &empty[0]); err != nil {
			ch <- answer{true, tid}
			return
		}
		attr := struct {
			fd                  uint32
			_                   uint32
			key, value, flags64 uint64
		}{fd: ^uint32(0)}
		_, _, errno := unix.Syscall(unix.SYS_BPF, 4 /* BPF_MAP_GET_NEXT_KEY */, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		unix.Capset(&hdr, &data[0]) // as the other threads, should it linger
		ch <- answer{errno == unix.EPERM, tid}
	}()
	a := <-ch
	task := "/proc/self/task/" + strconv.Itoa(a.tid)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if _, err := os.Stat(task); err != nil {
			break
		}
	}
	return a.needs
}
