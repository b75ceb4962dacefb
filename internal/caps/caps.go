// Package caps reads the process's effective capabilities.
package caps

import "golang.org/x/sys/unix"

// Capability numbers (linux/capability.h); BPF and Perfmon are 5.8+.
const (
	SysAdmin = 21
	Perfmon  = 38
	BPF      = 39
)

// Effective returns a test for a capability in the effective set.
func Effective() (func(c uint) bool, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil, err
	}
	return func(c uint) bool { return c < 64 && data[c/32].Effective&(1<<(c%32)) != 0 }, nil
}

// LeastTracer tells whether the process traces with CAP_BPF and
// CAP_PERFMON but not CAP_SYS_ADMIN: a refusal then is not for want of
// those two, and advice to get them would be false.
func LeastTracer() bool {
	has, err := Effective()
	return err == nil && !has(SysAdmin) && has(BPF) && has(Perfmon)
}
