package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
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
// path", fields apart by spaces); malformed lines are an error.
func ParseMaps(r io.Reader) ([]Mapping, error) {
	b, err := readMapsText(r)
	if err != nil {
		return nil, err
	}
	return parseMaps(b)
}

func parseMaps(b []byte) ([]Mapping, error) {
	var out []Mapping
	for len(b) > 0 {
		nl := bytes.IndexByte(b, '\n')
		if nl < 0 {
			nl = len(b)
		}
		line := string(b[:nl])
		b = b[min(nl+1, len(b)):]
		var f [5]string
		rest := line
		for i := range f {
			rest = strings.TrimLeft(rest, " ")
			f[i], rest, _ = strings.Cut(rest, " ")
		}
		lo, hi, ok := strings.Cut(f[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(f[2], 16, 64)
		inode, err4 := strconv.ParseUint(f[4], 10, 64)
		if !ok || f[1] == "" || f[3] == "" || errors.Join(err1, err2, err3, err4) != nil || end <= start {
			return nil, fmt.Errorf("maps line %q", line)
		}
		// The path is the rest of the line (it may hold spaces).
		out = append(out, Mapping{Start: start, End: end, Off: off, Perms: f[1], Dev: f[3], Inode: inode, Path: strings.TrimLeft(rest, " ")})
	}
	return out, nil
}

// maxMaps bounds the maps file ReadMaps reads: some 80 bytes a mapping,
// the kernel's default limit of 65,530 mappings is 5 MiB.
const maxMaps = 64 << 20

// ReadMaps reads a process's mappings. A process the tool may not read
// gives a *DeniedError.
func ReadMaps(pid int) ([]Mapping, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, Denied(pid, err)
	}
	defer f.Close()
	b, err := readMapsText(f)
	if err != nil {
		return nil, Denied(pid, err)
	}
	return parseMaps(b)
}

// readMapsText reads a maps file whole, up to maxMaps, in as few calls as
// the text takes (each makes the kernel find its place among the
// mappings again), not io.ReadAll's 512 bytes and up.
func readMapsText(r io.Reader) ([]byte, error) {
	b := make([]byte, 0, 16<<10)
	for {
		if len(b) == cap(b) {
			if len(b) >= maxMaps {
				return nil, fmt.Errorf("maps: more than %d MiB", maxMaps>>20)
			}
			b = slices.Grow(b, len(b))
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return nil, err
		}
	}
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
