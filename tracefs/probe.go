package tracefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf/btf"
	"github.com/tracekit/tracekit/internal/lazy"
)

// ProbeType is the kind of a dynamic probe: a kprobe on a kernel function
// or a uprobe on an offset of a user-space file. Both are created the same
// two ways, through their PMU (4.17+) or a line in their tracefs file.
type ProbeType int

const (
	Kprobe ProbeType = iota
	Uprobe
)

func (t ProbeType) String() string {
	if t == Uprobe {
		return "uprobe"
	}
	return "kprobe"
}

// PMU is the probe type's perf PMU directory in sysfs (4.17+).
func (t ProbeType) PMU() string { return "/sys/bus/event_source/devices/" + t.String() }

// eventsFile is the tracefs file that takes the probe definitions.
func (t ProbeType) eventsFile() string { return t.String() + "_events" }

// ErrNoKprobes and ErrNoUprobes mean the kernel was built without them.
var (
	ErrNoKprobes = errors.New("this kernel has no kprobes (CONFIG_KPROBES is not set)")
	ErrNoUprobes = errors.New("this kernel has no uprobes (CONFIG_UPROBE_EVENTS is not set)")
)

// ErrMissing is ErrNoKprobes or ErrNoUprobes, as t is.
func (t ProbeType) ErrMissing() error {
	if t == Uprobe {
		return ErrNoUprobes
	}
	return ErrNoKprobes
}

// Available reports whether the kernel has this kind of probe: its PMU, or
// its tracefs file.
func (t ProbeType) Available() bool {
	if _, err := os.Stat(t.PMU()); err == nil {
		return true
	}
	_, err := t.eventsPath()
	return err == nil
}

// KprobesAvailable reports whether the kernel has kprobes at all.
func KprobesAvailable() bool { return Kprobe.Available() }

func (t ProbeType) eventsPath() (string, error) {
	root, err := Root()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, t.eventsFile())
	if _, err := os.Stat(p); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return "", t.ErrMissing()
		}
		return "", err
	}
	return p, nil
}

// NotFoundHint explains the ENOENT or EINVAL with which the kernel refuses
// a probe it cannot place, by either path (PMU or tracefs); "" for other
// errors.
func (t ProbeType) NotFoundHint(err error) string {
	if !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EINVAL) {
		return ""
	}
	if t == Uprobe {
		return " (no such file, an offset outside it, or a semaphore the kernel refuses: see dmesg or tracefs error_log)"
	}
	return " (no such function, or one that cannot be probed: see available_filter_functions)"
}

// Probe says where a dynamic probe goes and what its records carry.
type Probe struct {
	Type ProbeType
	// Ret probes the return (kretprobe, uretprobe) instead of the entry.
	Ret bool
	// Symbol is a kprobe's kernel function, with an optional +offset.
	Symbol string
	// Path and Offset place a uprobe: an absolute file path and a file
	// offset (not a virtual address). RefCtrOffset is the file offset of a
	// USDT semaphore the kernel raises while the probe is on (4.20+), 0 for
	// none.
	Path                 string
	Offset, RefCtrOffset uint64
	// Args are fetch arguments for the tracefs path ("skb=%di:x64"); the
	// records of the event then carry them.
	Args []string
}

// String names the probe as a user would: "kretprobe ksys_write",
// "uprobe /usr/bin/python3.11:0x1a2b".
func (p Probe) String() string {
	kind := p.Type.String()
	if p.Ret {
		kind = strings.Replace(kind, "probe", "retprobe", 1)
	}
	if p.Type == Uprobe {
		return fmt.Sprintf("%s %s:0x%x", kind, p.Path, p.Offset)
	}
	return kind + " " + p.Symbol
}

// symbolPattern is what a probed symbol may be: an identifier (GCC's clones
// add dots: "foo.isra.0", "bar.cold") with an optional +offset, decimal or
// hex. Nothing else reaches kprobe_events: a space would add arguments, a
// newline another probe definition, a ':' or '/' a group.
var symbolPattern = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_.]*(\+(0x[0-9a-fA-F]+|[0-9]+))?$`)

// ValidateSymbol checks a kprobe target before anything is written.
func ValidateSymbol(sym string) error {
	if len(sym) > 256 || !symbolPattern().MatchString(sym) {
		return fmt.Errorf("invalid kernel symbol %q: want a function name with an optional +offset (e.g. ksys_write, tcp_v4_rcv+0x10)", sym)
	}
	return nil
}

// pathPattern is what a uprobe's file may be: an absolute path of
// printable characters without white space (which would split the line into
// arguments), ':' (which separates the offset), '(' or ')' (the semaphore),
// '%' or '\'. A path with those characters is probed through the PMU only.
var pathPattern = lazy.Regexp(`^/[^\x00-\x20\x7f:()%\\]*$`)

// ValidatePath checks a uprobe's file before anything is written.
func ValidatePath(path string) error {
	if len(path) > 4095 || !pathPattern().MatchString(path) {
		return fmt.Errorf("invalid file path %q for a uprobe: want an absolute path without spaces, control characters, ':', '(', ')', '%%' or '\\'", path)
	}
	return nil
}

// Validate checks everything of the probe that reaches the kernel.
func (p Probe) Validate() error {
	switch p.Type {
	case Kprobe:
		if p.Path != "" || p.Offset != 0 || p.RefCtrOffset != 0 {
			return errors.New("a kprobe takes a symbol, not a path and offset")
		}
		return ValidateSymbol(p.Symbol)
	case Uprobe:
		if p.Symbol != "" {
			return errors.New("a uprobe takes a path and a file offset, not a symbol")
		}
		return ValidatePath(p.Path)
	}
	return fmt.Errorf("unknown probe type %d", p.Type)
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

// fetchArg is a probe argument this toolkit writes: a name, an argument
// register of x86-64, arm64 (x0-x7), riscv64 (a0-a7) or 32-bit ARM
// (r0-r3), or the return value, and a fixed-size type ("skb=%di:x64",
// "skb=%x1:x64", "skb=%a1:x64", "skb=%r1:x32", "ret=$retval:s32").
var fetchArg = lazy.Regexp(`^[A-Za-z_][A-Za-z0-9_]*=(%(di|si|dx|cx|r8|r9|ax|x[0-7]|a[0-7]|r[0-3])|\$retval):[usx](8|16|32|64)$`)

// Line is the line of kprobe_events or uprobe_events that defines the
// probe as group/event: "p:group/event ksys_write skb=%di:x64",
// "r:group/event /bin/bash:0x4f2a0", "p:group/event /x:0x10(0x2040)".
func (p Probe) Line(group, event string) (string, error) {
	if err := ValidateName("probe group", group); err != nil {
		return "", err
	}
	if err := ValidateName("probe event", event); err != nil {
		return "", err
	}
	if err := p.Validate(); err != nil {
		return "", err
	}
	kind := "p"
	if p.Ret {
		kind = "r"
	}
	place := p.Symbol
	if p.Type == Uprobe {
		place = fmt.Sprintf("%s:0x%x", p.Path, p.Offset)
		if p.RefCtrOffset != 0 {
			place += fmt.Sprintf("(0x%x)", p.RefCtrOffset)
		}
	}
	line := fmt.Sprintf("%s:%s/%s %s", kind, group, event, place)
	for _, a := range p.Args {
		if !fetchArg().MatchString(a) {
			return "", fmt.Errorf("invalid probe argument %q", a)
		}
		line += " " + a
	}
	return line, nil
}

// appendLine writes one command to a probe events file. O_APPEND matters:
// without it the write truncates the file, which removes every probe of
// every tool.
func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(line + "\n")
	return errors.Join(werr, f.Close())
}

// AddProbe registers the probe as group/event in its tracefs file and
// returns the event's id. On any failure after the write, the event is
// removed again.
func AddProbe(group, event string, p Probe) (uint64, error) {
	line, err := p.Line(group, event)
	if err != nil {
		return 0, err
	}
	path, err := p.Type.eventsPath()
	if err != nil {
		return 0, err
	}
	if err := appendLine(path, line); err != nil {
		return 0, fmt.Errorf("register %q: %w%s", line, err, p.Type.NotFoundHint(err))
	}
	id, err := EventID(group, event)
	if err != nil {
		return 0, errors.Join(err, RemoveProbe(p.Type, group, event))
	}
	return id, nil
}

// RemoveProbe removes a probe event registered by AddProbe.
func RemoveProbe(t ProbeType, group, event string) error {
	if err := ValidateName("probe group", group); err != nil {
		return err
	}
	if err := ValidateName("probe event", event); err != nil {
		return err
	}
	path, err := t.eventsPath()
	if err != nil {
		return err
	}
	if err := appendLine(path, fmt.Sprintf("-:%s/%s", group, event)); err != nil {
		return fmt.Errorf("remove %s %s/%s: %w", t, group, event, err)
	}
	return nil
}

// GroupPrefix starts the name of every probe group this toolkit creates:
// "tk_<tool>_<pidns>_<pid>", so that a stale group names its owner and the
// pid namespace in which that pid means something.
const GroupPrefix = "tk_"

var ownedGroup = lazy.Regexp(`^` + GroupPrefix + `[A-Za-z0-9]+_([0-9]+)_([0-9]+)$`)

// Group returns the probe group of a tool process: its tool name (letters
// and digits), the inode of its pid namespace and its pid there.
func Group(tool string, pidNS uint64, pid int) string {
	return fmt.Sprintf("%s%s_%d_%d", GroupPrefix, tool, pidNS, pid)
}

// PidNamespace returns the inode of this process's pid namespace, what
// /proc/self/ns/pid links to ("pid:[4026531836]").
func PidNamespace() (uint64, error) {
	link, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return 0, fmt.Errorf("read the pid namespace: %w", err)
	}
	var ino uint64
	if _, err := fmt.Sscanf(link, "pid:[%d]", &ino); err != nil {
		return 0, fmt.Errorf("read the pid namespace: unexpected link %q", link)
	}
	return ino, nil
}

// ProbeEvent is one probe of a tracefs probe file.
type ProbeEvent struct {
	Type         ProbeType
	Group, Event string
}

// ListProbes parses the tracefs file of probes of type t
// ("p:group/event place ...").
func ListProbes(t ProbeType) ([]ProbeEvent, error) {
	path, err := t.eventsPath()
	if err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseProbeList(t, bufio.NewScanner(f)), nil
}

func parseProbeList(t ProbeType, s *bufio.Scanner) []ProbeEvent {
	var out []ProbeEvent
	for s.Scan() {
		def, _, _ := strings.Cut(s.Text(), " ")
		_, name, ok := strings.Cut(def, ":")
		if !ok {
			continue
		}
		group, event, ok := strings.Cut(name, "/")
		if ok {
			out = append(out, ProbeEvent{t, group, event})
		}
	}
	return out
}

// stale reports whether a group is this toolkit's and can be judged dead:
// named for the pid namespace ns, with a pid that alive says is gone. A
// group of another namespace (a tool in a container that shares the host's
// tracefs) cannot be judged from here and is never stale.
func stale(group string, ns uint64, alive func(pid int) bool) bool {
	m := ownedGroup().FindStringSubmatch(group)
	if m == nil {
		return false
	}
	gns, err1 := strconv.ParseUint(m[1], 10, 64)
	pid, err2 := strconv.Atoi(m[2])
	if err1 != nil || err2 != nil || gns != ns {
		return false
	}
	return !alive(pid)
}

// SweepStale removes, from both probe files, the probe events of groups
// this toolkit created in the pid namespace ns for processes that no longer
// exist (killed with SIGKILL, which no cleanup can catch). Other tools'
// probes, and ours in other namespaces, are never touched. A kernel without
// a probe type has nothing of it to sweep.
func SweepStale(ns uint64, alive func(pid int) bool) error {
	var errs []error
	for _, t := range []ProbeType{Kprobe, Uprobe} {
		events, err := ListProbes(t)
		if errors.Is(err, t.ErrMissing()) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, e := range events {
			if stale(e.Group, ns, alive) {
				errs = append(errs, RemoveProbe(t, e.Group, e.Event))
			}
		}
	}
	return errors.Join(errs...)
}

// RefCtrSupported reports whether uprobe_events takes a semaphore offset,
// "PATH:0xOFF(0xREFCTR)" (4.20+): see RefCtrIn.
func RefCtrSupported() bool {
	root, err := Root()
	if err != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join(root, "README"))
	return err == nil && RefCtrIn(string(b))
}

// RefCtrIn reports whether a tracefs README lists the semaphore offset in
// uprobe_events' syntax, "<path>:<offset>[%return][(ref_ctr_offset)]".
func RefCtrIn(readme string) bool {
	return strings.Contains(readme, "(ref_ctr_offset)")
}

// FetchType is the kprobe_events fetch type of a value of BTF type t
// (u8..u64, s8..s64), "" if it has none: a pointer's is the hexadecimal
// of a register's width, regWidth bytes (x64; x32 on 32-bit ARM).
func FetchType(t btf.Type, regWidth int) string {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Pointer:
		return fmt.Sprintf("x%d", regWidth*8)
	case *btf.Int:
		s := "u"
		if u.Encoding&btf.Signed != 0 {
			s = "s"
		}
		if u.Size == 1 || u.Size == 2 || u.Size == 4 || u.Size == 8 {
			return fmt.Sprintf("%s%d", s, u.Size*8)
		}
	case *btf.Enum:
		if u.Size == 4 || u.Size == 8 {
			return fmt.Sprintf("u%d", u.Size*8)
		}
	}
	return ""
}
