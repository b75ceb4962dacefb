package perfevent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"
)

// OnlineCPUs lists the online CPUs (/sys/devices/system/cpu/online, "0-3,5").
func OnlineCPUs() ([]int, error) {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return nil, fmt.Errorf("list CPUs: %w", err)
	}
	return parseCPUList(strings.TrimSpace(string(b)))
}

func parseCPUList(s string) ([]int, error) {
	var cpus []int
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil || a < 0 {
			return nil, fmt.Errorf("list CPUs: %q", s)
		}
		z := a
		if isRange {
			if z, err = strconv.Atoi(hi); err != nil || z < a || z-a > 1<<16 {
				return nil, fmt.Errorf("list CPUs: %q", s)
			}
		}
		for c := a; c <= z; c++ {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// PerCPU is one perf event opened on every online CPU with a program
// attached: the tracepoint side of a per-CPU ring buffer, or a sampling
// event (a CPU clock) that runs a perf_event program on each CPU.
type PerCPU struct {
	what string
	CPUs []int
	FDs  []int
}

// Shared says how the program is attached to the per-CPU events.
type Shared bool

const (
	// AttachOnce is for a tracepoint or probe event: its programs live in
	// one array shared by all its perf events, and every SET_BPF adds
	// another copy, so the program is attached to the first CPU's event and
	// then runs for the event on every CPU.
	AttachOnce Shared = true
	// AttachEach is for a sampling event: each perf event runs its own
	// program.
	AttachEach Shared = false
)

// OpenPerCPU opens attr on every online CPU (any process), attaches prog
// (if not nil) as shared says and enables the events. Nothing stays open on failure.
// prepare, if set, runs on each event before it is enabled (e.g. to map its
// ring buffer).
func OpenPerCPU(what string, attr unix.PerfEventAttr, prog *ebpf.Program, shared Shared, prepare func(cpu, fd int) error) (*PerCPU, error) {
	cpus, err := OnlineCPUs()
	if err != nil {
		return nil, err
	}
	return openOn(cpus, what, attr, prog, shared, prepare)
}

// OpenFirstCPU is OpenPerCPU on the first online CPU alone: a timer that
// fires once a period for the whole machine (bpftrace's interval probes,
// on CPU 0).
func OpenFirstCPU(what string, attr unix.PerfEventAttr, prog *ebpf.Program) (*PerCPU, error) {
	cpus, err := OnlineCPUs()
	if err != nil {
		return nil, err
	}
	return openOn(cpus[:1], what, attr, prog, AttachEach, nil)
}

func openOn(cpus []int, what string, attr unix.PerfEventAttr, prog *ebpf.Program, shared Shared, prepare func(cpu, fd int) error) (*PerCPU, error) {
	p := &PerCPU{what: what}
	attr.Bits |= unix.PerfBitDisabled
	for i, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&attr, -1, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open %s on CPU %d: %w%s", what, cpu, err, privilegeHint(err)), p.Close())
		}
		p.CPUs, p.FDs = append(p.CPUs, cpu), append(p.FDs, fd)
		if prepare != nil {
			if err := prepare(cpu, fd); err != nil {
				return nil, errors.Join(err, p.Close())
			}
		}
		if prog != nil && (i == 0 || shared == AttachEach) {
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
				return nil, errors.Join(fmt.Errorf("attach %s on CPU %d: PERF_EVENT_IOC_SET_BPF: %w%s", what, cpu, err, privilegeHint(err)), p.Close())
			}
		}
	}
	for i, fd := range p.FDs {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return nil, errors.Join(fmt.Errorf("enable %s on CPU %d: %w", what, p.CPUs[i], err), p.Close())
		}
	}
	return p, nil
}

// Close disables and closes every CPU's event, which detaches the program;
// every step is tried. Twice is harmless.
func (p *PerCPU) Close() error {
	var errs []error
	for _, fd := range p.FDs {
		errs = append(errs, unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_DISABLE, 0))
	}
	for _, fd := range p.FDs {
		errs = append(errs, unix.Close(fd))
	}
	p.FDs, p.CPUs = nil, nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("close %s: %w", p.what, err)
	}
	return nil
}
