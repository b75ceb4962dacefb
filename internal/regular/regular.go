// Package regular opens files that a traced process or a user names
// (a mapped path, a probe's binary, a debug file) only if they are
// regular files: a FIFO or a device in their place must never block the
// tool or be opened at all.
package regular

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path for reading if it is a regular file, following
// symbolic links. The file is first opened O_PATH, which opens nothing
// behind it (a FIFO waits for no writer, a device's open runs no driver
// code), and checked; only then is that same inode opened for reading,
// through /proc/self/fd, so a file swapped in meanwhile is not read.
func Open(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	rfd, err := unix.Open(fmt.Sprintf("/proc/self/fd/%d", fd), unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOCTTY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	return os.NewFile(uintptr(rfd), path), nil
}
