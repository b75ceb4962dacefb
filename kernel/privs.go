package kernel

import (
	"fmt"
	"os"
	"strings"

	"github.com/tracekit/tracekit/internal/caps"
)

// PrivilegeError is a missing privilege: the tools exit 1 with its message.
type PrivilegeError struct{ msg string }

func (e *PrivilegeError) Error() string { return e.msg }

// InitialUserNS tells from /proc/self/uid_map whether the process is in
// the initial user namespace, whose map is the identity over every uid:
// "0 0 4294967295". A nested namespace maps a range, or nothing yet.
func InitialUserNS(uidMap []byte) bool {
	f := strings.Fields(string(uidMap))
	return len(f) == 3 && f[0] == "0" && f[1] == "0" && f[2] == "4294967295"
}

// CheckPrivileges fails with a one-line explanation unless the process may
// load tracing programs: CAP_SYS_ADMIN, or CAP_BPF with CAP_PERFMON (5.8+).
func CheckPrivileges(tool string) error {
	if b, err := os.ReadFile("/proc/self/uid_map"); err == nil && !InitialUserNS(b) {
		return &PrivilegeError{fmt.Sprintf("this process is in a user namespace of its own (a rootless container, unshare -U), and the kernel does not count capabilities held there for BPF and perf events: run %s as root in the host's user namespace", tool)}
	}
	has, err := caps.Effective()
	if err != nil {
		return fmt.Errorf("read capabilities: %w", err)
	}
	if has(caps.SysAdmin) || (has(caps.BPF) && has(caps.Perfmon)) {
		return nil
	}
	var missing string
	switch {
	case !has(caps.BPF) && !has(caps.Perfmon):
		missing = "CAP_BPF and CAP_PERFMON"
	case !has(caps.BPF):
		missing = "CAP_BPF"
	default:
		missing = "CAP_PERFMON"
	}
	// The tool's name starts the line already ("writesize: ..."): not twice.
	return &PrivilegeError{fmt.Sprintf("this needs root, or %s (CAP_SYS_ADMIN on kernels before 5.8): run it with sudo %s", missing, tool)}
}
