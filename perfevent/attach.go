package perfevent

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"unsafe"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/internal/caps"
	"github.com/tracekit/tracekit/tracefs"
)

// Attachment is a program attached to a perf event. Close detaches it.
type Attachment struct {
	what string
	fd   int
	// cleanup runs after the perf event is closed: e.g. removing the
	// kprobe event it was opened on.
	cleanup func() error
}

// AttachTracepoint attaches prog to the tracepoint group:name the way every
// kernel since 4.7 (syscall tracepoints: 4.14) accepts: one perf event of
// PERF_TYPE_TRACEPOINT, PERF_EVENT_IOC_SET_BPF, PERF_EVENT_IOC_ENABLE. The
// program then runs for the tracepoint on every CPU, whatever the event's cpu.
func AttachTracepoint(prog *ebpf.Program, group, name string) (*Attachment, error) {
	id, err := tracefs.EventID(group, name)
	if err != nil {
		return nil, err
	}
	return attachPerfEvent(prog, fmt.Sprintf("tracepoint %s:%s", group, name), unix.PERF_TYPE_TRACEPOINT, id)
}

// perfAttr is the attribute of every perf event a program is attached to:
// the event of type typ and config, sampled raw, one record per event.
func perfAttr(typ uint32, config uint64) unix.PerfEventAttr {
	return unix.PerfEventAttr{
		Type:        typ,
		Config:      config,
		Size:        uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
		Sample_type: unix.PERF_SAMPLE_RAW,
		Sample:      1,
		Wakeup:      1,
	}
}

func attachPerfEvent(prog *ebpf.Program, what string, typ uint32, config uint64) (*Attachment, error) {
	attr := perfAttr(typ, config)
	fd, err := unix.PerfEventOpen(&attr, -1, 0, -1, unix.PERF_FLAG_FD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("attach %s: perf_event_open: %w%s", what, err, privilegeHint(err))
	}
	return setBPF(prog, what, fd)
}

// setBPF attaches prog to an open perf event and enables it; on failure the
// perf event is closed.
func setBPF(prog *ebpf.Program, what string, fd int) (*Attachment, error) {
	a := &Attachment{what: what, fd: fd}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_SET_BPF, prog.FD()); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach %s: PERF_EVENT_IOC_SET_BPF: %w%s", what, err, privilegeHint(err))
	}
	if err := unix.IoctlSetInt(fd, unix.PERF_EVENT_IOC_ENABLE, 0); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("attach %s: PERF_EVENT_IOC_ENABLE: %w", what, err)
	}
	return a, nil
}

func privilegeHint(err error) string {
	if !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) {
		return ""
	}
	// Debian's kernels add a level 3 (their default): perf events for
	// CAP_SYS_ADMIN only, CAP_PERFMON or not.
	if b, rerr := os.ReadFile("/proc/sys/kernel/perf_event_paranoid"); rerr == nil && os.Geteuid() != 0 {
		if level, perr := strconv.Atoi(strings.TrimSpace(string(b))); perr == nil && level > 2 {
			return fmt.Sprintf(" (kernel.perf_event_paranoid is %d: only root opens perf events here; at 2 or below, CAP_PERFMON and CAP_BPF do)", level)
		}
	}
	if caps.LeastTracer() {
		// A probe on a file under another process's /proc/PID/root
		// fails the ptrace check, for one.
		return " (CAP_BPF and CAP_PERFMON, which this process has, are not enough here: another process's files need CAP_SYS_PTRACE; else run as root)"
	}
	return " (needs root, or CAP_PERFMON and CAP_BPF)"
}

// Close disables the perf event and closes it, which detaches the program,
// then runs the cleanup (removing a probe event). Each step is attempted
// even when an earlier one failed; Close twice is harmless.
func (a *Attachment) Close() error {
	if a == nil || a.fd < 0 {
		return nil
	}
	errDisable := unix.IoctlSetInt(a.fd, unix.PERF_EVENT_IOC_DISABLE, 0)
	errClose := unix.Close(a.fd)
	a.fd = -1
	var errCleanup error
	if a.cleanup != nil {
		errCleanup = a.cleanup()
		a.cleanup = nil
	}
	if err := errors.Join(errDisable, errClose, errCleanup); err != nil {
		return fmt.Errorf("detach %s: %w", a.what, err)
	}
	return nil
}
