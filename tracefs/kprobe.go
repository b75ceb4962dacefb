package tracefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
)

// KprobePMU is the kprobe PMU's sysfs directory (4.17+).
const KprobePMU = "/sys/bus/event_source/devices/kprobe"

// KprobesAvailable reports whether the kernel has kprobes: the PMU, or
// kprobe_events in tracefs.
func KprobesAvailable() bool {
	if _, err := os.Stat(KprobePMU); err == nil {
		return true
	}
	_, err := kprobeEvents()
	return err == nil
}

// ErrNoKprobes means the kernel was built without kprobes.
var ErrNoKprobes = errors.New("this kernel has no kprobes (CONFIG_KPROBES is not set)")

// symbolPattern is what a probed symbol may be: an identifier (GCC's clones
// add dots: "foo.isra.0", "bar.cold") with an optional +offset, decimal or
// hex. Nothing else reaches kprobe_events: a space would add arguments, a
// newline another probe definition, a ':' or '/' a group.
var symbolPattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*(\+(0x[0-9a-fA-F]+|[0-9]+))?$`)

// ValidateSymbol checks a kprobe target before anything is written.
func ValidateSymbol(sym string) error {
	if len(sym) > 256 || !symbolPattern.MatchString(sym) {
		return fmt.Errorf("invalid kernel symbol %q: want a function name with an optional +offset (e.g. ksys_write, tcp_v4_rcv+0x10)", sym)
	}
	return nil
}

// SplitSymbol splits "name+off" into its parts (ValidateSymbol first).
func SplitSymbol(sym string) (string, uint64) {
	name, off, ok := strings.Cut(sym, "+")
	if !ok {
		return sym, 0
	}
	n, _ := strconv.ParseUint(off, 0, 64)
	return name, n
}

// fetchArg is a probe argument this toolkit writes: a name, a register or
// the return value, and a fixed-size type ("skb=%di:x64", "ret=$retval:s32").
var fetchArg = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=(%(di|si|dx|cx|r8|r9|ax)|\$retval):[usx](8|16|32|64)$`)

// ProbeLine is the kprobe_events line that defines a probe:
// "p:group/event symbol [args]", or "r:..." for a kretprobe. Each argument
// must match fetchArg.
func ProbeLine(group, event, symbol string, ret bool, args ...string) (string, error) {
	if err := ValidateName("probe group", group); err != nil {
		return "", err
	}
	if err := ValidateName("probe event", event); err != nil {
		return "", err
	}
	if err := ValidateSymbol(symbol); err != nil {
		return "", err
	}
	kind := "p"
	if ret {
		kind = "r"
	}
	line := fmt.Sprintf("%s:%s/%s %s", kind, group, event, symbol)
	for _, a := range args {
		if !fetchArg.MatchString(a) {
			return "", fmt.Errorf("invalid probe argument %q", a)
		}
		line += " " + a
	}
	return line, nil
}

func kprobeEvents() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, "kprobe_events")
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", ErrNoKprobes
		}
		return "", err
	}
	return p, nil
}

// appendLine writes one command to kprobe_events. O_APPEND matters: without
// it the write truncates the file, which removes every probe of every tool.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(line + "\n")
	return errors.Join(werr, f.Close())
}

// AddKprobe registers a kprobe (or kretprobe) event and returns its id. On
// any failure after the write, the event is removed again.
func AddKprobe(group, event, symbol string, ret bool, args ...string) (uint64, error) {
	line, err := ProbeLine(group, event, symbol, ret, args...)
	if err != nil {
		return 0, err
	}
	path, err := kprobeEvents()
	if err != nil {
		return 0, err
	}
	if err := appendLine(path, line); err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.EINVAL) {
			return 0, fmt.Errorf("register %q: %w (no such function, or one that cannot be probed: see available_filter_functions)", line, err)
		}
		return 0, fmt.Errorf("register %q: %w", line, err)
	}
	id, err := EventID(group, event)
	if err != nil {
		return 0, errors.Join(err, RemoveKprobe(group, event))
	}
	return id, nil
}

// RemoveKprobe removes a probe event registered by AddKprobe.
func RemoveKprobe(group, event string) error {
	if err := ValidateName("probe group", group); err != nil {
		return err
	}
	if err := ValidateName("probe event", event); err != nil {
		return err
	}
	path, err := kprobeEvents()
	if err != nil {
		return err
	}
	if err := appendLine(path, fmt.Sprintf("-:%s/%s", group, event)); err != nil {
		return fmt.Errorf("remove kprobe %s/%s: %w", group, event, err)
	}
	return nil
}

// GroupPrefix starts the name of every probe group this toolkit creates:
// "tk_<tool>_<pid>", so that a stale group names its dead owner.
const GroupPrefix = "tk_"

var ownedGroup = regexp.MustCompile(`^` + GroupPrefix + `[A-Za-z0-9]+_([0-9]+)$`)

// Group returns the probe group of a tool process.
func Group(tool string, pid int) string { return fmt.Sprintf("%s%s_%d", GroupPrefix, tool, pid) }

// ProbeEvent is one line of kprobe_events.
type ProbeEvent struct{ Group, Event string }

// ListKprobes parses kprobe_events ("p:group/event sym ...").
func ListKprobes() ([]ProbeEvent, error) {
	path, err := kprobeEvents()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProbeList(bufio.NewScanner(f)), nil
}

func parseProbeList(s *bufio.Scanner) []ProbeEvent {
	var out []ProbeEvent
	for s.Scan() {
		def, _, _ := strings.Cut(s.Text(), " ")
		_, name, ok := strings.Cut(def, ":")
		if !ok {
			continue
		}
		group, event, ok := strings.Cut(name, "/")
		if ok {
			out = append(out, ProbeEvent{group, event})
		}
	}
	return out
}

// SweepStale removes the probe events of groups this toolkit created for a
// process that no longer exists (one killed with SIGKILL, which no cleanup
// can catch). Other tools' probes are never touched.
func SweepStale(alive func(pid int) bool) error {
	events, err := ListKprobes()
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range events {
		m := ownedGroup.FindStringSubmatch(e.Group)
		if m == nil {
			continue
		}
		pid, _ := strconv.Atoi(m[1])
		if alive(pid) {
			continue
		}
		errs = append(errs, RemoveKprobe(e.Group, e.Event))
	}
	return errors.Join(errs...)
}
