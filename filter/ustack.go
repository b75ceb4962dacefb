package filter

import (
	"context"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/profile/prog"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// CountStacks counts an event's occurrences by user stack, as profile's
// sampler does: profile.CountStacks, which the binary (cmd/tracekit) sets
// here, since no tool imports another.
var CountStacks func(ctx context.Context, s *run.Session, c run.Common, tree run.TreeOption, pid int, folded bool, ev prog.StackEvent) error

// runUstack counts the passing events by user stack (--count-by ustack,
// with kstack or not). The stack is unwound in the kernel by profile's
// unwinder, from the files' .eh_frame tables where they have them and by
// frame pointers elsewhere: filter's --where becomes the gate of
// profile's sampler, which runs at the event instead of the CPU clock,
// and profile's user space loads the tables, names the frames and prints
// the report. A user address means something in its process only: the
// stacks are counted per process, and the report names each one's comm
// and pid.
func runUstack(ctx context.Context, s *run.Session, o *options, ev event, root compile.Node, base compile.Target, kernelStack bool) error {
	if _, err := hook.Choose(o.Attach, ev.String(), hook.Offer{Hook: hook.Perf}); err != nil {
		return err // the unwinder is tail-called: a program of the event's perf type
	}
	// profile's sampler keeps to -p and to the -c tree itself, with the
	// kernel's pids: the gate drops filter's own events and tests --where.
	gateTarget := func(t compile.Target) compile.Target {
		t.Read, t.SelfPid, t.NS, t.CPid = base.Read, base.SelfPid, base.NS, base.CPid
		return t
	}
	gate := func(t compile.Target) (compile.Target, error) {
		if compile.NeedsBTF(root) && t.BTF == nil {
			spec, err := kernelBTF("casts")
			if err != nil {
				return t, err
			}
			t.BTF = spec
		}
		return t, nil
	}
	if CountStacks == nil {
		return fmt.Errorf("--count-by ustack: this build of filter has no stack counter (profile's): run it as part of tracekit")
	}
	pe := prog.StackEvent{Name: ev.String(), Kernel: kernelStack, All: o.All}
	pe.Type, pe.Regs = ebpf.Kprobe, true
	var t compile.Target
	switch {
	case ev.kind == "tracepoint":
		f, err := tracefs.ReadFormat(ev.group, ev.name)
		if err != nil {
			return err
		}
		t = gateTarget(compile.Target{Event: &compile.Record{Format: f, UserSpace: ev.group == "syscalls"}})
		pe.Type, pe.Regs = ebpf.TracePoint, false
		pe.Attach = func(p *ebpf.Program) error { return s.AttachTracepoint(p, ev.group, ev.name) }
	case ev.user():
		regs, sites, err := userProbe(&ev, o.Pid)
		if err != nil {
			return err
		}
		// One program for every site: their gates must come out the same
		// (a USDT probe's sites read their arguments each its own way).
		var first string
		for i, st := range sites {
			ut, err := gate(gateTarget(userTarget(ev, st, regs)))
			if err != nil {
				return err
			}
			g, err := compile.Gate(o.Where, root, ut, "exit")
			if err != nil {
				return usageOr(err)
			}
			if i == 0 {
				t, first = ut, insnsKey(g)
			} else if insnsKey(g) != first {
				return usageOr(fmt.Errorf("%s: its %d sites read the arguments of --where differently: --count-by ustack takes one program for all, so filter this probe without its arguments or probe one site (uprobe:PATH:0xADDRESS)", ev, len(sites)))
			}
		}
		set := run.ProbeSet{}
		for _, st := range sites {
			set.Probes = append(set.Probes, st.probe)
		}
		pe.Attach = func(p *ebpf.Program) error {
			set.Prog = p
			if err := s.AttachUprobes([]run.ProbeSet{set}, false); err != nil {
				return fmt.Errorf("%s: %w", ev, err)
			}
			return nil
		}
	default:
		if err := ev.haveKprobes(); err != nil {
			return err
		}
		regs, spec, proto, err := kernelFunc(ev)
		if err != nil {
			return err
		}
		kt, _, _ := kprobeTarget(ev, proto, regs, false)
		kt.BTF = spec
		t = gateTarget(kt)
		pe.Attach = func(p *ebpf.Program) error { return s.AttachProbe(p, ev.probe(), false) }
	}
	t, err := gate(t)
	if err != nil {
		return err
	}
	if pe.Gate, err = compile.Gate(o.Where, root, t, "exit"); err != nil {
		return usageOr(err)
	}
	return CountStacks(ctx, s, o.Common, o.TreeOption, o.Pid, o.Folded, pe)
}
