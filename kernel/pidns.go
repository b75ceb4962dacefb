package kernel

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
)

// initPidNSIno is the inode of the initial pid namespace (PROC_PID_INIT_INO).
const initPidNSIno = 0xEFFFFFFC

// PidNamespace says which pid namespace this process runs in: nil for the
// initial one, where the kernel's pids are the user's. In another (a
// container, `unshare -fp`), the pids the user gives and reads are that
// namespace's, and programs translate with asm.CurrentNsPid, which needs
// bpf_get_ns_current_pid_tgid (5.7+); without it, the error says so.
func PidNamespace() (*asm.PidNS, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/pid", &st); err != nil {
		return nil, fmt.Errorf("find this process's pid namespace: %w", err)
	}
	if st.Ino == initPidNSIno {
		return nil, nil
	}
	if err := features.HaveProgramHelper(ebpf.TracePoint, bpf.FnGetNsCurrentPidTgid); err != nil {
		return nil, errors.New("this runs in a pid namespace of its own, and pids there differ from the kernel's: -p, -P and -c need bpf_get_ns_current_pid_tgid (Linux 5.7+); run in the host's pid namespace")
	}
	return &asm.PidNS{Dev: uint64(unix.Major(st.Dev))<<20 | uint64(unix.Minor(st.Dev)), Ino: st.Ino}, nil
}
