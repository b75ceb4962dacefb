//go:build !arm

package tooltest

import "golang.org/x/sys/unix"

const (
	sysSetuid    = unix.SYS_SETUID
	sysSetresuid = unix.SYS_SETRESUID
	sysSetfsuid  = unix.SYS_SETFSUID
)
