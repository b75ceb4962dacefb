package filter

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// isCall reports whether a run sees each call of the event's function
// whole: a function's entry (kprobe:, uprobe:) whose --where or action
// names ret or duration.
func isCall(ev event, root compile.Node, act compile.Action) bool {
	return (ev.kind == "kprobe" || ev.kind == "uprobe") && compile.IsCall(root, act)
}

// checkReturnOnly refuses duration on a return probe: the entry's time is
// not there.
func checkReturnOnly(ev event, root compile.Node, act compile.Action) error {
	if ev.kind != "kretprobe" && ev.kind != "uretprobe" || !compile.IsCall(root, act) {
		return nil
	}
	if _, ok := compile.Names(root, act, "duration"); ok {
		entry := strings.Replace(ev.String(), "ret", "", 1)
		return usage.Errorf("duration needs the call's entry too: trace %s, where ret is the return value and every argument is the entry's", entry)
	}
	return nil
}

// runCall traces each call of a function as one event: a program at its
// entry stashes what the return needs, a program at its return judges
// and acts (compile.CompileCall). A kernel function through BPF
// trampolines (fentry and fexit) where they attach, else its kprobe and
// kretprobe; a user-space one through its uprobe and uretprobe.
func runCall(ctx context.Context, s *run.Session, o *options, ev event, root compile.Node, act compile.Action, target compile.Target, ch *chain) error {
	name, off := tracefs.SplitSymbol(ev.symbol)
	if off != 0 {
		return usage.Errorf("%s: ret and duration are a call's: probe the function's entry, %s, not an offset in it", ev, name)
	}
	regs, err := asm.HostPtRegs()
	if err != nil {
		return fmt.Errorf("%s: %w", ev, err)
	}
	var call *compile.Call
	var trampoline bool
	build := func(t compile.Target, ret compile.Arg, fentry bool) func() error {
		return func() error {
			a := act
			if a.Kind == compile.Keep {
				a = compile.Action{Kind: compile.Emit, Columns: compile.CallColumns(t.Event)}
			}
			c, err := compile.CompileCall(o.Where, root, t, ret, a)
			if err != nil {
				return usageOr(err)
			}
			call, trampoline, act = c, fentry, a
			return nil
		}
	}
	var entry, exit tracefs.Probe
	var offers []hook.Offer
	tree := target.Tree
	if ev.kind == "kprobe" {
		spec, err := kernelBTF("kprobe arguments")
		if err != nil {
			return err
		}
		_, proto, err := funcProto(spec, ev.symbol)
		if err != nil {
			return err
		}
		at := func(slots bool) compile.Target {
			t, _, _ := kprobeTarget(ev, proto, regs, slots)
			u := target
			u.Event, u.BTF = t.Event, spec
			return u
		}
		offers = []hook.Offer{
			{Hook: hook.Fentry,
				Have: func() error {
					if err := slotsFit(proto); err != nil {
						return fmt.Errorf("%s %v", name, err)
					}
					return hook.HasFentry(name)()
				},
				// fexit: the return value follows the arguments.
				Build: build(at(true), compile.Arg{Name: "ret", Type: proto.Return, RegOff: int16(8 * len(proto.Params))}, true),
			},
			{Hook: hook.Perf,
				Have:  ev.haveKprobes,
				Build: build(at(false), compile.Arg{Name: "ret", Type: proto.Return, RegOff: regs.Ret}, false),
			},
		}
		entry = ev.probe()
	} else {
		if !tracefs.Uprobe.Available() {
			return fmt.Errorf("%s: %w", ev, tracefs.ErrNoUprobes)
		}
		sites, err := userSites(&ev, int(o.Pid))
		if err != nil {
			return userErr(err)
		}
		t := target
		t.Event = userTarget(ev, sites[0], regs).Event
		offers = []hook.Offer{{Hook: hook.Perf, Build: build(t, compile.UretprobeArgs(regs)[0], false)}}
		entry = sites[0].probe
	}
	exit = entry
	exit.Ret = true
	if _, err := hook.Choose(o.Attach, ev.String(), offers...); err != nil {
		return err
	}
	progs := map[string]*ebpf.ProgramSpec{
		"entry":  {Name: "filter_entry", Type: ebpf.Kprobe, License: "GPL", Instructions: call.Entry.Insns},
		"return": {Name: "filter_return", Type: ebpf.Kprobe, License: "GPL", Instructions: call.Return.Insns},
	}
	multi := ev.kind == "uprobe" && perfevent.UprobeMulti()
	switch {
	case trampoline:
		progs["entry"].Type, progs["entry"].AttachType, progs["entry"].AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, name
		progs["return"].Type, progs["return"].AttachType, progs["return"].AttachTo = ebpf.Tracing, ebpf.AttachTraceFExit, name
	case multi:
		progs["entry"].AttachType, progs["return"].AttachType = ebpf.AttachTraceUprobeMulti, ebpf.AttachTraceUprobeMulti
	}
	spec := &ebpf.CollectionSpec{Maps: compile.Maps(act.Kind, call.Return), Programs: progs}
	maps.Copy(spec.Maps, compile.CallMaps(call))
	ch.add(spec)
	coll, err := loadFollowing(s, spec, tree, target.NS, o.MaxTree)
	if err != nil {
		return err
	}
	if err := ch.attach(s, coll); err != nil {
		return err
	}
	s.OnClose("", func() error {
		// Once detached: calls whose entries were stashed and whose returns
		// did not come (still running, or their threads exited in them).
		if n := inProgress(coll.Maps[compile.StashMap], compile.CallsInFlight); n > 0 {
			calls := "calls"
			if n == 1 {
				calls = "call"
			}
			fmt.Fprintf(s.Stderr, "%s: %d %s of %s had begun and not returned when tracing stopped: not in the output\n", s.Tool, n, calls, name)
		}
		return nil
	})
	// The return first: a call whose entry is stashed then always finds
	// its return armed (one that began before finds no stash, and passes
	// nothing).
	for _, half := range []struct {
		prog  *ebpf.Program
		probe tracefs.Probe
	}{{coll.Programs["return"], exit}, {coll.Programs["entry"], entry}} {
		var err error
		switch {
		case trampoline:
			err = s.AttachHook(half.prog, hook.Fentry, "", name)
		case ev.kind == "kprobe":
			err = s.AttachProbe(half.prog, half.probe, false)
		default:
			if err = s.AttachUprobes([]run.ProbeSet{{Prog: half.prog, Probes: []tracefs.Probe{half.probe}}}, multi); err != nil {
				err = fmt.Errorf("%s: %w", ev, err)
			}
		}
		if err != nil {
			return err
		}
	}
	return report(ctx, s, o, ev, coll, call.Return, act)
}

// inProgress counts the stash records whose time is set (calls whose
// returns have not read them), over at most limit records (the map's
// room).
func inProgress(m *ebpf.Map, limit int) int {
	n, seen := 0, 0
	var k, v []byte
	it := m.Iterate()
	for seen < limit && it.Next(&k, &v) {
		seen++
		if len(v) >= compile.StashTime+8 && binary.NativeEndian.Uint64(v[compile.StashTime:]) != 0 {
			n++
		}
	}
	return n
}
