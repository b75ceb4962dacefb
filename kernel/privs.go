package kernel

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Capability numbers (linux/capability.h); CAP_BPF and CAP_PERFMON are 5.8+.
const (
	capSysAdmin = 21
	capPerfmon  = 38
	capBPF      = 39
)

// PrivilegeError is a missing privilege: the tools exit 1 with its message.
type PrivilegeError struct{ msg string }

func (e *PrivilegeError) Error() string { return e.msg }

// CheckPrivileges fails with a one-line explanation unless the process may
// load tracing programs: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON (5.8+).
func CheckPrivileges(tool string) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	has := func(c uint) bool { return data[c/32].Effective&(1<<(c%32)) != 0 }
	if has(capSysAdmin) || (has(capBPF) && has(capPerfmon)) {
		return nil
	}
	var missing string
	switch {
	case !has(capBPF) && !has(capPerfmon):
		missing = "CAP_BPF and CAP_PERFMON"
	case !has(capBPF):
		missing = "CAP_BPF"
	default:
		missing = "CAP_PERFMON"
	}
	return &PrivilegeError{fmt.Sprintf("%s needs root, or %s (CAP_SYS_ADMIN on kernels before 5.8): run it with sudo", tool, missing)}
}
