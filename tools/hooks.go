package tools

import (
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/tracekit/tracekit/asm"
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
	HookPerf   Hook = "perf"
	HookRaw    Hook = "raw"
	HookBTF    Hook = "btf"
	HookFentry Hook = "fentry"
)

// AttachEnv sets --attach's default for every tool that has it.
const AttachEnv = "TRACEKIT_ATTACH"

// PickHook resolves an --attach choice (auto, perf, raw or btf; "" is
// TRACEKIT_ATTACH, else auto) for the tracepoint named event (its own
// name, kfree_skb): auto is the cheapest the kernel has for a program
// that reads through the arguments' pointers (deref: btf, then raw, then
// perf) or only the arguments themselves (raw, whose start parses no
// BTF, then perf); a forced one the kernel lacks is an error that says so.
func PickHook(choice, event string, deref bool) (Hook, error) {
	if choice == "" {
		choice = os.Getenv(AttachEnv)
		if Hook(choice) == HookFentry {
			choice = "auto" // TRACEKIT_ATTACH=fentry: for the tools that trace functions
		}
	}
	switch Hook(choice) {
	case HookFentry:
		return "", Usagef("--attach=fentry reaches kernel functions, and this tool reads the tracepoint %s: use btf, raw or perf", event)
	case "", "auto":
		switch {
		case deref && HaveBTFTracepoint(event):
			return HookBTF, nil
		case HaveRawTracepoints():
			return HookRaw, nil
		}
		return HookPerf, nil
	case HookPerf:
		return HookPerf, nil
	case HookRaw:
		if !HaveRawTracepoints() {
			return "", fmt.Errorf("--attach=raw: this kernel has no raw tracepoints (4.17+); use --attach=perf")
		}
		return HookRaw, nil
	case HookBTF:
		if !HaveBTFTracepoint(event) {
			return "", fmt.Errorf("--attach=btf: this kernel has no BTF tracepoint %s (5.5+, with /sys/kernel/btf/vmlinux); use --attach=raw or perf", event)
		}
		return HookBTF, nil
	}
	return "", Usagef("invalid --attach %q: want auto, perf, raw or btf", choice)
}

// ValidateAttach checks an --attach value before anything is loaded.
func ValidateAttach(choice string) error {
	switch choice {
	case "", "auto", string(HookPerf), string(HookRaw), string(HookBTF), string(HookFentry):
		return nil
	}
	return Usagef("invalid --attach %q: want auto, perf, raw, btf or fentry", choice)
}

var fentries sync.Map // function name -> bool

// HaveFentrySyscall reports whether a program attaches at the entry of the
// syscall name's wrapper on this architecture (__x64_sys_write for
// "write"): see HaveFentry.
func HaveFentrySyscall(name string) bool {
	regs, err := asm.HostPtRegs()
	return err == nil && HaveFentry(regs.SyscallPrefix+name)
}

// HaveFentry reports whether a program attaches at the entry of the kernel
// function fn: kernel BTF with the function, and BPF trampolines, which
// only attaching proves (a kernel without them loads the program and
// refuses the link).
func HaveFentry(fn string) bool {
	if v, ok := fentries.Load(fn); ok {
		return v.(bool)
	}
	_ = removeMemlock()
	prog, err := loadTracing(&ebpf.ProgramSpec{
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
	_ = removeMemlock()
	return features.HaveProgramType(ebpf.RawTracepoint) == nil
})

var btfTracepoints sync.Map // event name -> bool

// HaveBTFTracepoint reports whether a BTF tracepoint program for event
// loads: kernel BTF and the tracepoint's btf_trace_ type (5.5+).
func HaveBTFTracepoint(event string) bool {
	if v, ok := btfTracepoints.Load(event); ok {
		return v.(bool)
	}
	_ = removeMemlock()
	prog, err := loadTracing(&ebpf.ProgramSpec{
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

// AttachHook attaches prog to the tracepoint group:name by hook for the
// rest of the run.
func (s *Session) AttachHook(prog *ebpf.Program, hook Hook, group, name string) error {
	var l link.Link
	var err error
	switch hook {
	case HookPerf:
		return s.AttachTracepoint(prog, group, name)
	case HookRaw:
		l, err = link.AttachRawTracepoint(link.RawTracepointOptions{Name: name, Program: prog})
	case HookBTF, HookFentry:
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	default:
		return fmt.Errorf("unknown hook %q", hook)
	}
	what := fmt.Sprintf("%s tracepoint %s", hook, name)
	if hook == HookFentry {
		what = "fentry " + name
	}
	if err != nil {
		return fmt.Errorf("attach to %s: %w", what, err)
	}
	s.OnClose("detach "+what, l.Close)
	return nil
}

// MemberOffset is the byte offset of a member of a kernel struct, from the
// running kernel's BTF, looking through anonymous structs and unions
// (sk_buff's protocol sits in one from 5.17 on).
func MemberOffset(structName, member string) (int, error) {
	spec, err := KernelBTF()
	if err != nil {
		return 0, fmt.Errorf("read kernel BTF: %w", err)
	}
	var st *btf.Struct
	if err := spec.TypeByName(structName, &st); err != nil {
		return 0, fmt.Errorf("kernel BTF: struct %s: %w", structName, err)
	}
	if off, ok := findMember(st.Members, member, 0); ok {
		return off, nil
	}
	return 0, fmt.Errorf("kernel BTF: struct %s has no member %s", structName, member)
}

func findMember(members []btf.Member, name string, base int) (int, bool) {
	for _, m := range members {
		off := base + int(m.Offset.Bytes())
		if m.Name == name {
			return off, true
		}
		if m.Name != "" {
			continue
		}
		var inner []btf.Member
		switch t := btf.UnderlyingType(m.Type).(type) {
		case *btf.Struct:
			inner = t.Members
		case *btf.Union:
			inner = t.Members
		}
		if o, ok := findMember(inner, name, off); ok {
			return o, true
		}
	}
	return 0, false
}

// TracepointArg is the index, among the arguments a raw or BTF tracepoint
// program gets, of the tracepoint's pointer to struct structName, from the
// kernel's BTF (btf_trace_EVENT: the proto's first parameter is the
// tracepoint's own data, not passed on): block_rq_issue's request is
// args[1] on 5.10 (the queue comes first), args[0] from 5.11.
func TracepointArg(event, structName string) (int, error) {
	spec, err := KernelBTF()
	if err != nil {
		return 0, fmt.Errorf("read kernel BTF: %w", err)
	}
	var td *btf.Typedef
	if err := spec.TypeByName("btf_trace_"+event, &td); err != nil {
		return 0, fmt.Errorf("kernel BTF: tracepoint %s: %w", event, err)
	}
	ptr, ok := btf.UnderlyingType(td.Type).(*btf.Pointer)
	if !ok {
		return 0, fmt.Errorf("kernel BTF: btf_trace_%s is no function pointer", event)
	}
	proto, ok := ptr.Target.(*btf.FuncProto)
	if !ok || len(proto.Params) == 0 {
		return 0, fmt.Errorf("kernel BTF: btf_trace_%s is no function pointer", event)
	}
	for i, p := range proto.Params[1:] {
		if pp, ok := btf.UnderlyingType(p.Type).(*btf.Pointer); ok {
			if st, ok := btf.UnderlyingType(pp.Target).(*btf.Struct); ok && st.Name == structName {
				return i, nil
			}
		}
	}
	return 0, fmt.Errorf("kernel BTF: tracepoint %s has no struct %s * argument", event, structName)
}

// HaveMember reports whether a kernel struct has a member (through
// anonymous ones).
func HaveMember(structName, member string) bool {
	_, err := MemberOffset(structName, member)
	return err == nil
}

// AttachForced reports whether an --attach choice (or, without one,
// TRACEKIT_ATTACH) names a hook rather than auto: a tool that cannot use
// a forced hook says so instead of falling back.
func AttachForced(choice string) bool {
	if choice == "" {
		choice = os.Getenv(AttachEnv)
	}
	return choice != "" && choice != "auto"
}

// RawTracepointArgs is how many arguments the raw tracepoint event passes
// (up to max), found without BTF: the kernel refuses to attach a program
// that reads past the last one. block_rq_issue passes 2 on 5.10 (queue,
// request) and 1 from 5.11.
func RawTracepointArgs(event string, max int) (int, error) {
	_ = removeMemlock()
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
