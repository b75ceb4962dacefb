package tools

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

// LegacyKprobeEnv forces the tracefs (kprobe_events) path even where the
// kprobe PMU exists, so that both paths stay tested.
const LegacyKprobeEnv = "TRACEKIT_LEGACY_KPROBES"

const kprobePMU = tracefs.KprobePMU

// KprobeOptions choose how a kprobe is attached. The zero value is right
// for most uses.
type KprobeOptions struct {
	// Legacy registers the probe in kprobe_events (4.1+) even where the
	// kprobe PMU (4.17+) exists. The environment variable LegacyKprobeEnv=1
	// does the same.
	Legacy bool
	// Tool names the probe group "tk_<tool>_<pid>".
	Tool string
}

// ErrNoKprobes is returned on kernels built without kprobes.
var ErrNoKprobes = tracefs.ErrNoKprobes

// KprobesAvailable reports whether the kernel has kprobes at all.
func KprobesAvailable() bool { return tracefs.KprobesAvailable() }

var probeSeq atomic.Uint64

// AttachKprobe attaches a Kprobe program to the entry of symbol, or to its
// return when ret is set. The symbol is validated before anything is written
// to the kernel. Closing the attachment detaches the program and removes any
// probe event it registered.
func AttachKprobe(prog *ebpf.Program, symbol string, ret bool, opts KprobeOptions) (*Attachment, error) {
	if err := tracefs.ValidateSymbol(symbol); err != nil {
		return nil, err
	}
	kind := "kprobe"
	if ret {
		kind = "kretprobe"
	}
	what := fmt.Sprintf("%s %s", kind, symbol)
	if !KprobesAvailable() {
		return nil, fmt.Errorf("attach %s: %w; the tracepoint modes work instead", what, ErrNoKprobes)
	}
	if !opts.Legacy && os.Getenv(LegacyKprobeEnv) != "1" {
		if typ, err := readUint(kprobePMU + "/type"); err == nil {
			return attachKprobePMU(prog, what, uint32(typ), symbol, ret)
		}
	}
	return attachKprobeLegacy(prog, what, symbol, ret, opts.Tool)
}

// attachKprobePMU uses the kprobe PMU (4.17+): the probe lives exactly as
// long as the perf event, nothing is left in tracefs even after SIGKILL.
func attachKprobePMU(prog *ebpf.Program, what string, typ uint32, symbol string, ret bool) (*Attachment, error) {
	var config uint64
	if ret {
		// The retprobe bit, e.g. "config:0", from the PMU's format.
		b, err := os.ReadFile(kprobePMU + "/format/retprobe")
		if err != nil {
			return nil, fmt.Errorf("attach %s: read the kprobe PMU's retprobe bit: %w", what, err)
		}
		bit, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(string(b)), "config:"))
		if err != nil {
			return nil, fmt.Errorf("attach %s: parse retprobe bit %q: %w", what, b, err)
		}
		config = 1 << bit
	}
	name, off := tracefs.SplitSymbol(symbol)
	cname, err := unix.BytePtrFromString(name)
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", what, err)
	}
	attr := perfAttr(typ, config)
	attr.Ext1 = uint64(uintptr(unsafe.Pointer(cname))) // kprobe_func
	attr.Ext2 = off                                    // probe_offset
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	runtime.KeepAlive(cname)
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("attach %s: %w (no such function, or one that cannot be probed: see available_filter_functions)", what, err)
		}
		return nil, fmt.Errorf("attach %s: perf_event_open: %w%s", what, err, privilegeHint(err))
	}
	return setBPF(prog, what, fd)
}

// attachKprobeLegacy registers the probe in kprobe_events and attaches to
// its event id like a tracepoint: the way every kernel since 4.1 accepts.
func attachKprobeLegacy(prog *ebpf.Program, what, symbol string, ret bool, tool string) (*Attachment, error) {
	if tool == "" {
		tool = "tool"
	}
	group := tracefs.Group(tool, os.Getpid())
	event := fmt.Sprintf("p%d", probeSeq.Add(1))
	id, err := tracefs.AddKprobe(group, event, symbol, ret)
	if err != nil {
		return nil, fmt.Errorf("attach %s: %w", what, err)
	}
	a, err := attachPerfEvent(prog, what, unix.PERF_TYPE_TRACEPOINT, id)
	if err != nil {
		return nil, errors.Join(err, tracefs.RemoveKprobe(group, event))
	}
	a.cleanup = func() error { return tracefs.RemoveKprobe(group, event) }
	return a, nil
}

// RegisterKprobe registers a probe event in kprobe_events (with fetch
// arguments, which its records then carry) and returns its id, for
// OpenRings: unlike a PMU kprobe, such an event is one shared tracepoint
// that a perf event on every CPU can open. remove unregisters it.
func RegisterKprobe(tool, symbol string, ret bool, args []string) (group, event string, id uint64, remove func() error, err error) {
	if !KprobesAvailable() {
		return "", "", 0, nil, ErrNoKprobes
	}
	group = tracefs.Group(tool, os.Getpid())
	event = fmt.Sprintf("p%d", probeSeq.Add(1))
	id, err = tracefs.AddKprobe(group, event, symbol, ret, args...)
	if err != nil {
		return "", "", 0, nil, err
	}
	return group, event, id, func() error { return tracefs.RemoveKprobe(group, event) }, nil
}

func readUint(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
}

// SweepStaleProbes removes probe groups left by toolkit processes that are
// gone (killed with SIGKILL). Kernels without kprobes have nothing to sweep.
func SweepStaleProbes() error {
	if !KprobesAvailable() {
		return nil
	}
	err := tracefs.SweepStale(func(pid int) bool {
		return unix.Kill(pid, 0) == nil || errors.Is(unix.Kill(pid, 0), unix.EPERM)
	})
	if errors.Is(err, tracefs.ErrNoKprobes) {
		return nil
	}
	return err
}
