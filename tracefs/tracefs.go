// Package tracefs finds (and if needed mounts) the kernel's tracing file
// system, looks up event ids and parses event format files.
package tracefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/lazy"
)

// Candidate mount points, newest first: /sys/kernel/tracing exists since 4.1,
// older kernels only have debugfs' tracing directory.
const (
	mountPoint      = "/sys/kernel/tracing"
	debugMountPoint = "/sys/kernel/debug/tracing"
)

var (
	rootOnce sync.Once
	rootPath string
	rootErr  error
)

// Root returns the path of tracefs, mounting it at /sys/kernel/tracing when
// it is nowhere to be found (a fresh boot of our VMs leaves it unmounted).
func Root() (string, error) {
	rootOnce.Do(func() { rootPath, rootErr = findOrMount() })
	return rootPath, rootErr
}

func findOrMount() (string, error) {
	if p := fromMountinfo("/proc/self/mountinfo"); p != "" {
		return p, nil
	}
	for _, p := range []string{mountPoint, debugMountPoint} {
		if isTracefs(p) {
			return p, nil
		}
	}
	if err := unix.Mount("nodev", mountPoint, "tracefs", 0, ""); err != nil {
		if errors.Is(err, unix.EPERM) {
			return "", fmt.Errorf("mount tracefs at %s: %w (needs CAP_SYS_ADMIN: run as root)", mountPoint, err)
		}
		return "", fmt.Errorf("tracefs is not mounted and mounting it at %s failed: %w (is CONFIG_TRACING set?)", mountPoint, err)
	}
	return mountPoint, nil
}

// fromMountinfo returns the first tracefs mount point listed in a
// /proc/PID/mountinfo file, or "".
func fromMountinfo(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	return parseMountinfo(bufio.NewScanner(f))
}

func parseMountinfo(s *bufio.Scanner) string {
	var debugfs string
	for s.Scan() {
		// 42 23 0:13 / /sys/kernel/tracing rw,relatime - tracefs nodev rw
		pre, post, ok := strings.Cut(s.Text(), " - ")
		if !ok {
			continue
		}
		fields, fstype := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(fstype) < 1 {
			continue
		}
		switch fstype[0] {
		case "tracefs":
			return unescapeMount(fields[4])
		case "debugfs":
			if debugfs == "" {
				debugfs = unescapeMount(fields[4]) + "/tracing"
			}
		}
	}
	if debugfs != "" && isTracefs(debugfs) {
		return debugfs
	}
	return ""
}

// unescapeMount undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isTracefs(p string) bool {
	_, err := os.Stat(filepath.Join(p, "events"))
	return err == nil
}

// namePattern is what the kernel accepts for event groups and names
// (kernel/trace/trace_probe.c: is_good_name), and all this package lets
// become part of a path or a probe definition.
var namePattern = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*$`)

// ValidateName checks an event group or event name: a C identifier, so that
// "../x", "a/b" or a name with a newline can never become a path or a line
// written to a control file.
func ValidateName(kind, name string) error {
	if !namePattern().MatchString(name) {
		return fmt.Errorf("invalid %s name %q: want letters, digits and '_', not starting with a digit", kind, name)
	}
	return nil
}

// ErrEventNotFound is returned when an event does not exist in tracefs.
var ErrEventNotFound = errors.New("event not found")

// ErrNoAccess is returned when tracefs is there but closed to this
// process: it is root's (mode 0700), and CAP_BPF with CAP_PERFMON load and
// attach programs but do not open it.
var ErrNoAccess = errors.New("tracefs is open to root only: with CAP_BPF and CAP_PERFMON, add CAP_DAC_READ_SEARCH (or run as root)")

// EventDir returns the directory of an event, after validating its names.
func EventDir(group, name string) (string, error) {
	if err := ValidateName("event group", group); err != nil {
		return "", err
	}
	if err := ValidateName("event", name); err != nil {
		return "", err
	}
	root, err := Root()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "events", group, name)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if near := nearEvents(root, group, name); len(near) > 0 {
				return "", fmt.Errorf("tracepoint %s:%s: %w (near: %s)", group, name, ErrEventNotFound, strings.Join(near, ", "))
			}
			return "", fmt.Errorf("tracepoint %s:%s: %w (see %s/available_events)", group, name, ErrEventNotFound, root)
		}
		if errors.Is(err, os.ErrPermission) {
			return "", fmt.Errorf("tracepoint %s:%s: %w", group, name, ErrNoAccess)
		}
		return "", fmt.Errorf("tracepoint %s:%s: %w", group, name, err)
	}
	return dir, nil
}

// EventID returns the id of a tracepoint, the config of a
// PERF_TYPE_TRACEPOINT perf event.
func EventID(group, name string) (uint64, error) {
	dir, err := EventDir(group, name)
	if err != nil {
		return 0, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "id"))
	if err != nil {
		return 0, fmt.Errorf("read id of %s:%s: %w", group, name, err)
	}
	id, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("parse id of %s:%s: %w", group, name, err)
	}
	return id, nil
}

// ReadFormat reads and parses the format file of a tracepoint.
func ReadFormat(group, name string) (*Format, error) {
	dir, err := EventDir(group, name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dir, "format"))
	if err != nil {
		return nil, fmt.Errorf("read format of %s:%s: %w", group, name, err)
	}
	f, err := ParseFormat(string(b))
	if err != nil {
		return nil, fmt.Errorf("format of %s:%s: %w", group, name, err)
	}
	return f, nil
}
