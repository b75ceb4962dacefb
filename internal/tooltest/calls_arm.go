package tooltest

import "golang.org/x/sys/unix"

// 32-bit Arm's setuid, setresuid and setfsuid take 16-bit ids, and their
// tracepoints are sys_enter_setuid16 and so on: the 32-bit calls are the
// ones the kernel's sys_enter_setuid is.
const (
	sysSetuid    = unix.SYS_SETUID32
	sysSetresuid = unix.SYS_SETRESUID32
	sysSetfsuid  = unix.SYS_SETFSUID32
)
