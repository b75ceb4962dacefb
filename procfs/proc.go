package procfs

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/lazy"
	"github.com/tracekit/tracekit/internal/usage"
)

// MkDev is a kernel dev_t as the block tracepoints record it:
// major << 20 | minor.
func MkDev(major, minor uint32) uint32 { return major<<20 | minor }

// DevString prints a kernel dev_t as "major:minor".
func DevString(dev uint32) string { return fmt.Sprintf("%d:%d", dev>>20, dev&(1<<20-1)) }

var diskName = lazy.Regexp(`^[A-Za-z0-9][A-Za-z0-9_.:-]*$`)

// DevOf finds a disk by name ("loop0", "vda", "nvme0n1p2") through
// /sys/class/block. The name becomes part of a path: it is checked first.
func DevOf(name string) (uint32, error) {
	if !diskName().MatchString(name) || name == "." || name == ".." {
		return 0, fmt.Errorf("invalid disk name %q", name)
	}
	b, err := os.ReadFile(filepath.Join("/sys/class/block", name, "dev"))
	if err != nil {
		return 0, fmt.Errorf("no disk named %q (see /sys/class/block or lsblk)", name)
	}
	var major, minor uint32
	if _, err := fmt.Sscanf(strings.TrimSpace(string(b)), "%d:%d", &major, &minor); err != nil {
		return 0, fmt.Errorf("disk %q: bad dev %q", name, b)
	}
	return MkDev(major, minor), nil
}

// Disks names devices, caching what it found.
type Disks map[uint32]string

// Name returns the disk name of dev from /sys/dev/block/MAJ:MIN, else
// /proc/partitions, else "MAJ:MIN".
func (d Disks) Name(dev uint32) string {
	if n, ok := d[dev]; ok {
		return n
	}
	n := DevString(dev)
	if link, err := os.Readlink("/sys/dev/block/" + n); err == nil {
		n = filepath.Base(link)
	} else if p := fromPartitions(dev); p != "" {
		n = p
	}
	d[dev] = n
	return n
}

func fromPartitions(dev uint32) string {
	f, err := os.Open("/proc/partitions")
	if err != nil {
		return ""
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		var major, minor uint32
		var blocks uint64
		var name string
		if n, _ := fmt.Sscanf(s.Text(), "%d %d %d %s", &major, &minor, &blocks, &name); n == 4 && MkDev(major, minor) == dev {
			return name
		}
	}
	return ""
}

// Comm is the name of process pid from /proc/PID/comm, "" when it is gone.
// The kernel's own record, taken while the process ran, is better where a
// program can keep it: a short-lived process is often gone by report time.
func Comm(pid uint32) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// CheckPid checks a -p option: 0 (none) or a process that exists. Its
// errors are usage errors. The option is an int64, so that a number past
// a 32-bit int (32-bit ARM's) gets this error too, not the flag parser's.
func CheckPid(p int64) error {
	if p < 0 || p > int64(pidMax()) {
		return usage.Errorf("invalid pid %d: pids run from 1 to %d (kernel.pid_max)", p, pidMax())
	}
	pid := int(p)
	if pid > 0 {
		if err := unix.Kill(pid, 0); errors.Is(err, unix.ESRCH) {
			return usage.Errorf("no process with pid %d", pid)
		}
	}
	return nil
}

// ThreadGroup is the process (tgid) thread tid belongs to, from
// /proc/TID/status; a usage error where there is no such thread.
func ThreadGroup(tid int64) (int64, error) {
	if tid <= 0 || tid > int64(pidMax()) {
		return 0, usage.Errorf("invalid thread id %d: ids run from 1 to %d (kernel.pid_max)", tid, pidMax())
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, usage.Errorf("no thread with id %d", tid)
	}
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Tgid:"); ok {
			if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && n > 0 {
				return n, nil
			}
		}
	}
	return 0, fmt.Errorf("/proc/%d/status: no Tgid line", tid)
}

// pidMax is the kernel's largest pid (/proc/sys/kernel/pid_max); 4194304,
// the largest it can be set to, if it cannot be read.
func pidMax() int {
	b, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		return 1 << 22
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 1 << 22
	}
	return n
}
