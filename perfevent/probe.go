package perfevent

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/tracefs"
)

// LegacyProbesEnv=1 forces the tracefs path (kprobe_events,
// uprobe_events) even where the probe PMUs exist, so that both paths stay
// tested. LegacyKprobeEnv is its older name and still works.
const (
	LegacyProbesEnv = "TRACEKIT_LEGACY_PROBES"
	LegacyKprobeEnv = "TRACEKIT_LEGACY_KPROBES"
)

// ErrNoKprobes is returned on kernels built without kprobes.
var ErrNoKprobes = tracefs.ErrNoKprobes

// KprobesAvailable reports whether the kernel has kprobes at all.
func KprobesAvailable() bool { return tracefs.KprobesAvailable() }

func legacyForced() bool {
	return os.Getenv(LegacyProbesEnv) == "1" || os.Getenv(LegacyKprobeEnv) == "1"
}

var probeSeq atomic.Uint64

// ProbeEvent is a dynamic probe registered in tracefs (kprobe_events or
// uprobe_events) for this process: an event with an id and a format, like
// a tracepoint, that perf events on every CPU can open. Close removes it.
type ProbeEvent struct {
	probe        tracefs.Probe
	group, event string
	id           uint64
}

// ownGroup is this process's probe group for tool.
func ownGroup(tool string) (string, error) {
	ns, err := tracefs.PidNamespace()
	if err != nil {
		return "", err
	}
	if tool == "" {
		tool = "tool"
	}
	return tracefs.Group(tool, ns, os.Getpid()), nil
}

// NewProbeEvent registers p in its tracefs file under this process's group
// for tool ("tk_<tool>_<pidns>_<pid>"), which a later run of any tool
// sweeps if this process dies without removing it.
func NewProbeEvent(tool string, p tracefs.Probe) (*ProbeEvent, error) {
	if err := checkProbe(p); err != nil {
		return nil, err
	}
	return newProbeEvent(tool, p)
}

// checkProbe validates p and says whether the kernel has its kind.
func checkProbe(p tracefs.Probe) error {
	if err := p.Validate(); err != nil {
		return err
	}
	if !p.Type.Available() {
		return fmt.Errorf("%s: %w", p, p.Type.ErrMissing())
	}
	return nil
}

// newProbeEvent is NewProbeEvent for a probe checkProbe passed.
func newProbeEvent(tool string, p tracefs.Probe) (*ProbeEvent, error) {
	group, err := ownGroup(tool)
	if err != nil {
		return nil, err
	}
	event := fmt.Sprintf("p%d", probeSeq.Add(1))
	id, err := tracefs.AddProbe(group, event, p)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p, err)
	}
	return &ProbeEvent{probe: p, group: group, event: event, id: id}, nil
}

// ID is the event id, the config of a PERF_TYPE_TRACEPOINT perf event.
func (e *ProbeEvent) ID() uint64 { return e.id }

// Format reads the event's format file (its fetch arguments are fields).
func (e *ProbeEvent) Format() (*tracefs.Format, error) { return tracefs.ReadFormat(e.group, e.event) }

// Name is group/event, as the probe file lists it.
func (e *ProbeEvent) Name() string { return e.group + "/" + e.event }

func (e *ProbeEvent) String() string { return e.probe.String() }

// Close removes the probe event; twice is harmless.
func (e *ProbeEvent) Close() error {
	if e == nil || e.group == "" {
		return nil
	}
	err := tracefs.RemoveProbe(e.probe.Type, e.group, e.event)
	e.group = ""
	return err
}

// AttachProbe attaches a Kprobe program to p: through the probe's PMU
// (4.17+), where the probe lives exactly as long as the perf event and
// nothing is left in tracefs even after SIGKILL; else, or with legacy (or
// LegacyProbesEnv=1), through a probe event in tracefs, the way every
// kernel since 4.1 (uprobes: 4.3) accepts. p is validated before anything
// is written to the kernel. Closing the attachment detaches the program and
// removes any probe event it registered.
func AttachProbe(prog *ebpf.Program, p tracefs.Probe, tool string, legacy bool) (*Attachment, error) {
	if err := checkProbe(p); err != nil {
		return nil, fmt.Errorf("attach %w", err)
	}
	if !legacy && !legacyForced() {
		if typ, err := readUint(p.Type.PMU() + "/type"); err == nil {
			return attachPMU(prog, p, uint32(typ))
		}
	}
	if err := checkRefCtr(p, tracefs.RefCtrSupported); err != nil {
		return nil, err
	}
	e, err := newProbeEvent(tool, p)
	if err != nil {
		return nil, fmt.Errorf("attach %w", err)
	}
	a, err := attachPerfEvent(prog, p.String(), unix.PERF_TYPE_TRACEPOINT, e.ID())
	if err != nil {
		return nil, errors.Join(err, e.Close())
	}
	a.cleanup = e.Close
	return a, nil
}

// checkRefCtr refuses a probe guarded by a semaphore where uprobe_events
// cannot raise it (supported is asked only then): the semaphore would
// stay 0 and the probe never fire, and raising it by hand means writing
// into other processes' memory: never.
func checkRefCtr(p tracefs.Probe, supported func() bool) error {
	if p.RefCtrOffset == 0 || supported() {
		return nil
	}
	return fmt.Errorf("attach %s: the probe is guarded by a semaphore, and this kernel's uprobe_events takes no semaphore offset (4.20+; tracefs README lists no \"(ref_ctr_offset)\"): refused rather than written into the processes' memory", p)
}

// pmuBits reads a PMU format file ("config:0", "config:32-63") and
// returns the field's first bit and width in config.
func pmuBits(path string) (shift, width uint, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, 0, err
	}
	s := strings.TrimSpace(string(b))
	bits, ok := strings.CutPrefix(s, "config:")
	if !ok {
		return 0, 0, fmt.Errorf("%s: unexpected format %q", path, s)
	}
	lo, hi, isRange := strings.Cut(bits, "-")
	a, err := strconv.ParseUint(lo, 10, 6)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: unexpected format %q", path, s)
	}
	z := a
	if isRange {
		if z, err = strconv.ParseUint(hi, 10, 6); err != nil || z < a {
			return 0, 0, fmt.Errorf("%s: unexpected format %q", path, s)
		}
	}
	return uint(a), uint(z - a + 1), nil
}

// attachPMU opens the probe as a perf event of the kprobe or uprobe PMU:
// config1 points at the function name or the file path, config2 is the
// offset; the format files say which config bits mark a return probe and
// carry a semaphore's offset.
func attachPMU(prog *ebpf.Program, p tracefs.Probe, typ uint32) (*Attachment, error) {
	what := p.String()
	var config uint64
	if p.Ret {
		shift, _, err := pmuBits(p.Type.PMU() + "/format/retprobe")
		if err != nil {
			return nil, fmt.Errorf("attach %s: the %s PMU's retprobe bit: %w", what, p.Type, err)
		}
		config |= 1 << shift
	}
	if p.RefCtrOffset != 0 {
		// 4.20+; on 4.17-4.19 the PMU ignores bits it does not list.
		shift, width, err := pmuBits(p.Type.PMU() + "/format/ref_ctr_offset")
		if err != nil {
			return nil, fmt.Errorf("attach %s: this kernel's uprobe PMU takes no semaphore offset (4.20+): %w", what, err)
		}
		if width < 64 && p.RefCtrOffset>>width != 0 {
			return nil, fmt.Errorf("attach %s: semaphore offset 0x%x does not fit in %d bits", what, p.RefCtrOffset, width)
		}
		config |= p.RefCtrOffset << shift
	}
	target, off := p.Path, p.Offset
	if p.Type == tracefs.Kprobe {
		target, off = tracefs.SplitSymbol(p.Symbol)
	}
	ctarget, err := unix.BytePtrFromString(target)
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", what, err)
	}
	attr := perfAttr(typ, config)
	attr.Ext1 = uint64(uintptr(unsafe.Pointer(ctarget))) // kprobe_func, uprobe_path
	attr.Ext2 = off                                      // probe_offset
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(ctarget)
	if err != nil {
		return nil, fmt.Errorf("attach %s: perf_event_open: %w%s%s", what, err, p.Type.NotFoundHint(err), privilegeHint(err))
	}
	return setBPF(prog, what, fd)
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// SweepStaleProbes removes the kprobe and uprobe events of this toolkit's
// processes in our pid namespace that are gone (killed with SIGKILL).
func SweepStaleProbes() error {
	ns, err := tracefs.PidNamespace()
	if err != nil {
		return err
	}
	return tracefs.SweepStale(ns, func(pid int) bool {
		err := unix.Kill(pid, 0)
		return err == nil || errors.Is(err, unix.EPERM)
	})
}
