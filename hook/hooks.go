package hook

import (
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/loader"
	"github.com/tracekit/tracekit/perfevent"
)

// Hook is how a program reaches a tracepoint:
//   - perf: a perf event on the tracepoint (4.7+); the program reads the
//     record the tracepoint builds, at the offsets of its format file;
//   - raw: a raw tracepoint (4.17+); no record is built, the program reads
//     the tracepoint's arguments (u64 args[]) and what they point to with
//     bpf_probe_read_kernel;
//   - btf: a BTF tracepoint (tp_btf, 5.5+, with kernel BTF); arguments as
//     raw, and the kernel structures they point to are read directly;
//   - fentry: a BPF trampoline at a kernel function's entry (x86-64 5.5+,
//     arm64 where ftrace has direct calls, which 6.1 lacks), for tools that trace a
//     function rather than a tracepoint; typed arguments, as btf.
type Hook string

const (
	Perf   Hook = "perf"
	Raw    Hook = "raw"
	BTF    Hook = "btf"
	Fentry Hook = "fentry"
)

// HasRaw is an Offer's Have for a raw tracepoint (4.17+).
func HasRaw() error {
	if !HaveRawTracepoints() {
		return errors.New("this kernel has no raw tracepoints (4.17+)")
	}
	return nil
}

// HasBTF is an Offer's Have for the BTF tracepoint event (5.5+).
func HasBTF(event string) func() error {
	return func() error {
		if !HaveBTFTracepoint(event) {
			return fmt.Errorf("this kernel has no BTF tracepoint %s (5.5+, with /sys/kernel/btf/vmlinux)", event)
		}
		return nil
	}
}

// HasFentry is an Offer's Have for a BPF trampoline at the kernel
// function fn.
func HasFentry(fn string) func() error {
	return func() error {
		if !HaveFentry(fn) {
			return fmt.Errorf("this kernel cannot attach a BPF trampoline to %s (x86-64 5.5+, arm64 with ftrace direct calls (not 6.1), with kernel BTF; and not a notrace or inlined function)", fn)
		}
		return nil
	}
}

// HasFentrySyscall is HasFentry at the wrapper of the syscall name on
// this architecture (__x64_sys_write for "write").
func HasFentrySyscall(name string) func() error {
	return func() error {
		regs, err := asm.HostPtRegs()
		if err != nil {
			return err
		}
		if regs.SyscallPrefix == "" {
			return fmt.Errorf("%s's syscalls have no wrappers taking the user's registers, which fentry at a syscall reads", regs.Arch)
		}
		return HasFentry(regs.SyscallPrefix + name)()
	}
}

var fentries sync.Map // function name -> bool

// HaveFentrySyscall reports whether a program attaches at the entry of the
// syscall name's wrapper on this architecture (__x64_sys_write for
// "write"): see HaveFentry.
func HaveFentrySyscall(name string) bool {
	regs, err := asm.HostPtRegs()
	return err == nil && regs.SyscallPrefix != "" && HaveFentry(regs.SyscallPrefix+name)
}

// HaveFentry reports whether a program attaches at the entry of the kernel
// function fn: kernel BTF with the function, and BPF trampolines, which
// only attaching proves (a kernel without them loads the program and
// refuses the link).
func HaveFentry(fn string) bool {
	if v, ok := fentries.Load(fn); ok {
		return v.(bool)
	}
	_ = loader.RemoveMemlock()
	prog, err := loader.Tracing(&ebpf.ProgramSpec{
		Name: "probe", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: fn, License: "GPL",
		Instructions: bpf.Instructions{bpf.Mov.Imm(bpf.R0, 0), bpf.Return()},
	}, nil, false)
	ok := err == nil
	if ok {
		l, err := link.AttachTracing(link.TracingOptions{Program: prog})
		if ok = err == nil; ok {
			l.Close()
		}
		prog.Close()
	}
	fentries.Store(fn, ok)
	return ok
}

// HaveRawTracepoints reports whether raw tracepoint programs load (4.17+).
var HaveRawTracepoints = sync.OnceValue(func() bool {
	_ = loader.RemoveMemlock()
	return features.HaveProgramType(ebpf.RawTracepoint) == nil
})

var btfTracepoints sync.Map // event name -> bool

// HaveBTFTracepoint reports whether a BTF tracepoint program for event
// loads: kernel BTF and the tracepoint's btf_trace_ type (5.5+).
func HaveBTFTracepoint(event string) bool {
	if v, ok := btfTracepoints.Load(event); ok {
		return v.(bool)
	}
	_ = loader.RemoveMemlock()
	prog, err := loader.Tracing(&ebpf.ProgramSpec{
		Name: "probe", Type: ebpf.Tracing, AttachType: ebpf.AttachTraceRawTp, AttachTo: event, License: "GPL",
		Instructions: bpf.Instructions{bpf.Mov.Imm(bpf.R0, 0), bpf.Return()},
	}, nil, false)
	ok := err == nil
	if ok {
		prog.Close()
	}
	btfTracepoints.Store(event, ok)
	return ok
}

// Attach attaches prog to the tracepoint group:name (for fentry, the
// function the program was loaded for) by h. Close detaches it.
func Attach(prog *ebpf.Program, h Hook, group, name string) (io.Closer, error) {
	var l link.Link
	var err error
	switch h {
	case Perf:
		return perfevent.AttachTracepoint(prog, group, name)
	case Raw:
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
	case BTF, Fentry:
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	default:
		return nil, fmt.Errorf("unknown hook %q", h)
	}
	what := fmt.Sprintf("%s tracepoint %s", h, name)
	if h == Fentry {
		what = "fentry " + name
	}
	if err != nil {
		return nil, fmt.Errorf("attach to %s: %w", what, err)
	}
	return closer{what, l}, nil
}

// closer names a link in the error of its Close.
type closer struct {
	what string
	l    link.Link
}

func (c closer) Close() error {
	if err := c.l.Close(); err != nil {
		return fmt.Errorf("detach %s: %w", c.what, err)
	}
	return nil
}

// RawTracepointArgs is how many arguments the raw tracepoint event passes
// (up to max), found without BTF: the kernel refuses to attach a program
// that reads past the last one. block_rq_issue passes 2 on 5.10 (queue,
// request) and 1 from 5.11.
func RawTracepointArgs(event string, max int) (int, error) {
	_ = loader.RemoveMemlock()
	for n := max; n > 0; n-- {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.RawTracepoint, License: "GPL", Instructions: bpf.Instructions{
			bpf.LoadMem(bpf.R0, bpf.R1, int16(8*(n-1)), bpf.DWord),
			bpf.Mov.Imm(bpf.R0, 0),
			bpf.Return(),
		}})
		if err != nil {
			return 0, fmt.Errorf("raw tracepoint probe: %w", err)
		}
		l, err := link.AttachRawTracepoint(link.RawTracepointOptions{Name: event, Program: p})
		p.Close()
		if err == nil {
			l.Close()
			return n, nil
		}
	}
	return 0, fmt.Errorf("raw tracepoint %s takes no program", event)
}
