package procfs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Mapping is one line of /proc/PID/maps.
type Mapping struct {
	Start, End, Off uint64
	Perms           string
	Dev             string
	Inode           uint64
	Path            string
}

// Exec reports whether the mapping holds code.
func (m Mapping) Exec() bool { return strings.Contains(m.Perms, "x") }

// ParseMaps reads /proc/PID/maps lines ("start-end perms offset dev inode
// path"); malformed lines are an error.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	var out []Mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 5 {
			return nil, fmt.Errorf("maps line %q", line)
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		inode, err4 := strconv.ParseUint(f[4], 10, 64)
		if !ok || errors.Join(err1, err2, err3, err4) != nil || end <= start {
			return nil, fmt.Errorf("maps line %q", line)
		}
		m := Mapping{Start: start, End: end, Off: off, Perms: f[1], Dev: f[3], Inode: inode}
		if len(f) > 5 {
			// The path is the rest of the line after the fifth field (it may hold spaces).
			rest := line
			for i := 0; i < 5; i++ {
				rest = strings.TrimLeft(rest, " ")
				rest = rest[strings.IndexByte(rest, ' ')+1:]
			}
			m.Path = strings.TrimLeft(rest, " ")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// ReadMaps reads a process's mappings. A process the tool may not read
// gives a *DeniedError.
func ReadMaps(pid int) ([]Mapping, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, Denied(pid, err)
	}
	return ParseMaps(bytes.NewReader(b))
}

// DeniedError is a process whose files in /proc (maps, root, map_files)
// the tool may not read: the kernel's ptrace access check, which
// CAP_BPF and CAP_PERFMON do not pass.
type DeniedError struct {
	Pid int
	Err error
}

func (e *DeniedError) Error() string {
	return fmt.Sprintf("cannot read process %d's memory maps and files: %v (it is another user's, or holds capabilities this tool lacks: reading it needs CAP_SYS_PTRACE, or root; CAP_BPF and CAP_PERFMON do not give it)", e.Pid, e.Err)
}

func (e *DeniedError) Unwrap() error { return e.Err }

// Denied turns a permission error reading pid's files in /proc into a
// *DeniedError, and returns any other error as it is.
func Denied(pid int, err error) error {
	if errors.Is(err, fs.ErrPermission) {
		return &DeniedError{Pid: pid, Err: fs.ErrPermission}
	}
	return err
}

// MapsDev is a device number (stat's st_dev) as /proc/PID/maps prints
// it: "major:minor" in hex, two digits at least.
func MapsDev(dev uint64) string {
	return fmt.Sprintf("%02x:%02x", unix.Major(dev), unix.Minor(dev))
}
