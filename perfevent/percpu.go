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

// ParseCPUList reads a list of CPUs as the kernel writes one and perf's
// -C takes it: "0-3,8,10-11".
func ParseCPUList(s string) ([]int, error) { return parseCPUList(s) }

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
	return OpenOn(cpus, what, attr, prog, shared, prepare)
}

// OpenFirstCPU is OpenPerCPU on the first online CPU alone: a timer that
// fires once a period for the whole machine (bpftrace's interval probes,
// on CPU 0).
func OpenFirstCPU(what string, attr unix.PerfEventAttr, prog *ebpf.Program) (*PerCPU, error) {
	cpus, err := OnlineCPUs()
	if err != nil {
		return nil, err
	}
	return OpenOn(cpus[:1], what, attr, prog, AttachEach, nil)
}

// OpenThread opens attr for one thread, on whichever CPU it runs (pid
// tid, CPU -1): BCC's profile -L. Its CPUs holds -1.
func OpenThread(what string, attr unix.PerfEventAttr, prog *ebpf.Program, tid int) (*PerCPU, error) {
	return open([]int{-1}, tid, what, attr, prog, AttachEach, nil)
}

// OpenOn is OpenPerCPU on these CPUs (BCC's profile -C).
func OpenOn(cpus []int, what string, attr unix.PerfEventAttr, prog *ebpf.Program, shared Shared, prepare func(cpu, fd int) error) (*PerCPU, error) {
	return open(cpus, -1, what, attr, prog, shared, prepare)
}

// onCPU names a CPU in a message ("": a thread's event, on any CPU).
func onCPU(cpu int) string {
	if cpu < 0 {
		return ""
	}
	return fmt.Sprintf(" on CPU %d", cpu)
}

// open opens attr on each of cpus, for every process (pid -1) or one
// thread.
func open(cpus []int, pid int, what string, attr unix.PerfEventAttr, prog *ebpf.Program, shared Shared, prepare func(cpu, fd int) error) (*PerCPU, error) {
	p := &PerCPU{what: what}
	attr.Bits |= unix.PerfBitDisabled
	for i, cpu := range cpus {
		fd, err := unix.PerfEventOpen(&attr, pid, cpu, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("open %s%s: %w%s", what, onCPU(cpu), err, privilegeHint(err)), p.Close())
		}
		p.CPUs, p.FDs = append(p.CPUs, cpu), append(p.FDs, fd)
		if prepare != nil {
			if err := prepare(cpu, fd); err != nil {
				return nil, errors.Join(err, p.Close())
			}
		}
		if prog != nil && (i == 0 || shared == AttachEach) {
			if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
				return nil, errors.Join(fmt.Errorf("attach %s%s: PERF_EVENT_IOC_SET_BPF: %w%s", what, onCPU(cpu), err, privilegeHint(err)), p.Close())
			}
		}
	}
	for i, fd := range p.FDs {
		if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
			return nil, errors.Join(fmt.Errorf("enable %s%s: %w", what, onCPU(p.CPUs[i]), err), p.Close())
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
