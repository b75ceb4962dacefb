package filter

import (
	"bufio"
	"context"
	"fmt"
	"slices"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks"
	"github.com/tracekit/tracekit/tracefs"
)

// stackRun is what a run through the stack pipeline's sampler does with an event:
// count it by its stacks (ustack, and kstack if named), or (emit) print
// it with record's columns and its stacks in their order.
type stackRun struct {
	stacks []string
	emit   bool
	record compile.Action
}

// runUstack counts or prints the passing events with their user stacks
// (--count-by ustack, --fields ustack; kstack too or not). The stack is
// unwound in the kernel by the stack pipeline's unwinder (profile's), from the files' .eh_frame
// tables where they have them and by frame pointers elsewhere: filter's
// --where (and the record of the other --fields) becomes the gate of
// the stack pipeline's sampler, which runs at the event instead of the CPU clock,
// and its user space loads the tables and names the frames. A user
// address means something in its process only: counted, the stacks are
// per process, and the report names each one's comm and pid.
func runUstack(ctx context.Context, s *run.Session, o *options, ev event, root compile.Node, base compile.Target, sr stackRun) error {
	if _, err := hook.Choose(o.Attach, ev.String(), hook.Offer{Hook: hook.Perf}); err != nil {
		return err // the unwinder is tail-called: a program of the event's perf type
	}
	// the stack pipeline's sampler keeps to -p and to the -c tree itself, with the
	// kernel's pids: the gate drops filter's own events, tests --where and
	// builds the record.
	var record *compile.Program
	var first string
	gate := func(t compile.Target) (bpf.Instructions, int16, error) {
		t.Read, t.SelfPid, t.NS, t.CPid = base.Read, base.SelfPid, base.NS, base.CPid
		if (compile.NeedsBTF(root) || compile.ColumnsNeedBTF(sr.record)) && t.BTF == nil {
			spec, err := kernelBTF("casts")
			if err != nil {
				return nil, 0, err
			}
			t.BTF = spec
		}
		g, p, at, err := compile.GateRecord(o.Where, root, t, sr.record, "exit")
		if err != nil {
			return nil, 0, usageOr(err)
		}
		// One program for every site: their gates must come out the same
		// (a USDT probe's sites read their arguments each its own way).
		if record == nil {
			record, first = p, insnsKey(g)
		} else if insnsKey(g) != first {
			return nil, 0, usageOr(fmt.Errorf("%s: its sites read the arguments of --where or --fields differently: ustack takes one program for all, so name no argument or probe one site (uprobe:PATH:0xADDRESS)", ev))
		}
		return g, at, nil
	}
	pe := stacks.StackEvent{Name: ev.String(), Kernel: slices.Contains(sr.stacks, "kstack"), All: o.All}
	pe.Type, pe.Regs = ebpf.Kprobe, true
	switch {
	case ev.kind == "tracepoint":
		f, err := tracefs.ReadFormat(ev.group, ev.name)
		if err != nil {
			return eventErr(err)
		}
		if pe.Gate, pe.RecordAt, err = gate(compile.Target{Event: &compile.Record{Format: f, UserSpace: ev.group == "syscalls"}}); err != nil {
			return err
		}
		pe.Type, pe.Regs = ebpf.TracePoint, false
		pe.Attach = func(p *ebpf.Program) error { return s.AttachTracepoint(p, ev.group, ev.name) }
	case ev.user():
		regs, sites, err := userProbe(&ev, int(o.Pid))
		if err != nil {
			return err
		}
		set := run.ProbeSet{}
		for _, st := range sites {
			if pe.Gate, pe.RecordAt, err = gate(userTarget(ev, st, regs)); err != nil {
				return err
			}
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
		t, _, _ := kprobeTarget(ev, proto, regs, false)
		t.BTF = spec
		if pe.Gate, pe.RecordAt, err = gate(t); err != nil {
			return err
		}
		pe.Attach = func(p *ebpf.Program) error { return s.AttachProbe(p, ev.probe(), false) }
	}
	if sr.emit {
		pe.Emit, pe.Record = true, record.Size
		pe.Print = stackPrinter(s, ev, record, sr.stacks)
	}
	return stacks.CountEvent(ctx, s, o.Common, o.TreeOption, int(o.Pid), o.Folded, pe)
}

// stackPrinter prints an event of --fields with ustack: its line, then
// its stacks in the order --fields names them, innermost frame first, a
// user stack that ended early with its marker, as profile prints one.
func stackPrinter(s *run.Session, ev event, record *compile.Program, order []string) func(perfevent.Sample, stacks.Stack) {
	p := &printer{s: s, ev: ev, format: recordFormat(ev, record), comms: map[uint32]string{}, out: bufio.NewWriterSize(s.Stdout, 64<<10)}
	return func(smp perfevent.Sample, st stacks.Stack) {
		if st.Comm != "" {
			p.remember(smp.Pid, st.Comm)
		}
		p.stacks = p.stacks[:0]
		for _, name := range order {
			var frames []string
			if name == "ustack" {
				frames = st.User
				if st.End != "" {
					frames = append(frames, st.End)
				}
			} else if frames = kernelFrames(st.Kernel); len(frames) == 0 {
				frames = []string{"[no kernel stack]"}
			}
			p.stacks = append(p.stacks, namedStack{name, frames})
		}
		p.print(smp)
		p.flush()
		if p.err != nil {
			s.Stop(p.err) // a closed stdout ("filter ... | head") ends the run
		}
	}
}
