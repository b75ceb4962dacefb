package filter

import (
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// maxChain bounds a stack mode's list: ksnoop's own stack holds 16
// functions; 8 outer ones keep a thread's record at 128 bytes.
const maxChain = 9

// chain is stack mode's outer functions (-s): a program at the entry and
// one at the return of each keep the thread's calls of it in progress
// (asm.StackEntry, asm.StackReturn), which the last function's program
// checks (compile.Target.Inside). A kernel function is reached through
// fentry and fexit where trampolines attach and --attach allows, else its
// kprobe and kretprobe; a user-space one through its uprobe and
// uretprobe.
type chain struct {
	items      []event
	trampoline []bool
	probes     []tracefs.Probe // each function's entry
}

// newChain chooses each outer function's hooks, and finds the user-space
// ones in their files.
func newChain(o *options, items []event) (*chain, error) {
	c := &chain{items: items}
	for _, ev := range items {
		if ev.kind == "uprobe" {
			if !tracefs.Uprobe.Available() {
				return nil, fmt.Errorf("%s: %w", ev, tracefs.ErrNoUprobes)
			}
			sites, err := userSites(&ev, int(o.Pid))
			if err != nil {
				return nil, userErr(err)
			}
			c.trampoline = append(c.trampoline, false)
			c.probes = append(c.probes, sites[0].probe)
			continue
		}
		h, err := hook.Choose(o.Attach, ev.String(),
			hook.Offer{Hook: hook.Fentry, Have: func() error {
				// A trampoline takes the function's arguments, read or not.
				if spec, err := kbtf.Kernel(); err == nil {
					if _, proto, err := funcProto(spec, ev.symbol); err == nil {
						if err := slotsFit(proto); err != nil {
							return fmt.Errorf("%s %v", ev.symbol, err)
						}
					}
				}
				return hook.HasFentry(ev.symbol)()
			}},
			hook.Offer{Hook: hook.Perf, Have: ev.haveKprobes})
		if err != nil {
			return nil, err
		}
		c.trampoline = append(c.trampoline, h == hook.Fentry)
		c.probes = append(c.probes, ev.probe())
	}
	return c, nil
}

// add puts the chain's programs and map in spec.
func (c *chain) add(spec *ebpf.CollectionSpec) {
	if c == nil {
		return
	}
	n := len(c.items)
	spec.Maps[compile.ChainMap] = compile.ChainMapSpec(n)
	for i, ev := range c.items {
		entry := &ebpf.ProgramSpec{Name: "filter_outer", Type: ebpf.Kprobe, License: "GPL", Instructions: asm.StackEntry(compile.ChainMap, i, n)}
		exit := &ebpf.ProgramSpec{Name: "filter_outer", Type: ebpf.Kprobe, License: "GPL", Instructions: asm.StackReturn(compile.ChainMap, i)}
		if c.trampoline[i] {
			entry.Type, entry.AttachType, entry.AttachTo = ebpf.Tracing, ebpf.AttachTraceFEntry, ev.symbol
			exit.Type, exit.AttachType, exit.AttachTo = ebpf.Tracing, ebpf.AttachTraceFExit, ev.symbol
		}
		spec.Programs[chainProg(i, false)] = entry
		spec.Programs[chainProg(i, true)] = exit
	}
}

func chainProg(i int, ret bool) string {
	if ret {
		return fmt.Sprintf("outer%d_return", i)
	}
	return fmt.Sprintf("outer%d_entry", i)
}

// attach attaches the chain's programs, each function's return before
// its entry (a call seen entering is seen returning).
func (c *chain) attach(s *run.Session, coll *ebpf.Collection) error {
	if c == nil {
		return nil
	}
	for i, ev := range c.items {
		for _, ret := range []bool{true, false} {
			p := coll.Programs[chainProg(i, ret)]
			probe := c.probes[i]
			probe.Ret = ret
			var err error
			switch {
			case c.trampoline[i]:
				err = s.AttachHook(p, hook.Fentry, "", ev.symbol)
			case ev.kind == "uprobe":
				if err = s.AttachUprobes([]run.ProbeSet{{Prog: p, Probes: []tracefs.Probe{probe}}}, false); err != nil {
					err = fmt.Errorf("%s: %w", ev, err)
				}
			default:
				err = s.AttachProbe(p, probe, false)
			}
			if err != nil {
				return err
			}
		}
	}
	return nil
}
