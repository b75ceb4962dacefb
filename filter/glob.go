package filter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// runGlob traces every kernel function a glob matches (kprobe:tcp_*), each
// with its own arguments from BTF, func naming which one. A program is
// compiled per function and functions whose programs come out the same
// share one: with kprobe_multi links (5.18+) one link per program, the
// function's index its cookie (attach and detach take one ftrace update
// each, whatever the number of functions); elsewhere a kprobe per
// function, func a constant of its program. A function the expression or
// the fields cannot be compiled for (it has no argument of that name) is
// left out, and the run says how many were.
func runGlob(ctx context.Context, s *run.Session, o *options, ev event, root compile.Node, act compile.Action, target compile.Target) error {
	if _, err := hook.Choose(o.Attach, ev.String(), hook.Offer{Hook: hook.Perf, Have: ev.haveKprobes}); err != nil {
		return err
	}
	regs, err := asm.HostPtRegs()
	if err != nil {
		return fmt.Errorf("%s: %w", ev, err)
	}
	spec, err := kernelBTF("kprobe arguments")
	if err != nil {
		return err
	}
	funcs, direct, err := ev.functions(spec)
	if err != nil {
		return err
	}
	call := compile.IsCall(root, act)
	if call && act.Kind == compile.Keep {
		// Each function's arguments differ: its name, ret and duration.
		act = compile.Action{Kind: compile.Emit, Columns: []compile.Operand{{Base: "func", Text: "func"}, {Base: "ret", Text: "ret"}, {Base: "duration", Text: "duration"}}}
	}
	act = namedRecords(act, "func")
	names := map[uint64]string{}
	for i, fn := range funcs {
		names[uint64(i)] = fn
	}
	multi := perfevent.KprobeMulti()
	attachType := ebpf.AttachNone
	if multi {
		attachType = ebpf.AttachTraceKprobeMulti
	}
	// The functions and their cookies of each program (a call's: each
	// pair of programs, progName(i) at the entry and its return's).
	type set struct {
		funcs   []string
		cookies []uint64
	}
	var sets []*set
	specs := map[string]*ebpf.ProgramSpec{}
	index := map[string]int{}
	var prog *compile.Program // the one that acts: a call's return
	var stash *compile.Call
	var left []string
	var firstErr error
	leave := func(fn string, err error) {
		left = append(left, fn)
		if firstErr == nil {
			firstErr = err
		}
	}
	for i, fn := range funcs {
		t := target
		t.BTF = spec
		t.Func = &compile.Func{Index: uint64(i), Cookie: multi && !direct[fn], Names: names}
		t.Event = &compile.Registers{Width: regs.Width} // no prototype in BTF: no arguments
		_, proto, protoErr := funcProto(spec, fn)
		if protoErr == nil {
			k, _, _ := kprobeTarget(event{kind: "kprobe", symbol: fn}, proto, regs, false)
			t.Event = k.Event
		}
		var halves []bpf.Instructions
		var p *compile.Program
		var c *compile.Call
		if call {
			if protoErr != nil {
				leave(fn, fmt.Errorf("%s: no prototype in BTF, so no type for its return value", fn))
				continue
			}
			c, err = compile.CompileCall(o.Where, root, t, compile.Arg{Name: "ret", Type: proto.Return, RegOff: regs.Ret}, act)
			if err == nil {
				p, halves = c.Return, []bpf.Instructions{c.Entry.Insns, c.Return.Insns}
			}
		} else if p, err = compile.Compile(o.Where, root, t, act); err == nil {
			halves = []bpf.Instructions{p.Insns}
		}
		if err != nil {
			var ee *compile.ExprError
			if !errors.As(err, &ee) {
				return err
			}
			leave(fn, fmt.Errorf("%s: %w", fn, usageOr(err)))
			continue
		}
		switch {
		case prog != nil && p.Size != prog.Size:
			// Its columns lay out otherwise (a string of another room).
			leave(fn, fmt.Errorf("%s: its fields take %d bytes, where the others' take %d", fn, p.Size, prog.Size))
			continue
		case stash != nil && (c.StashSize != stash.StashSize || c.DumpBuffer != stash.DumpBuffer):
			// One stash map: a record the size of its values.
			leave(fn, fmt.Errorf("%s: its entry stashes %d bytes, where the others' stash %d", fn, c.StashSize, stash.StashSize))
			continue
		}
		prog, stash = p, c
		var key strings.Builder
		for _, h := range halves {
			key.WriteString(insnsKey(h))
			key.WriteString("\x00")
		}
		k, ok := index[key.String()]
		if !ok {
			k = len(sets)
			index[key.String()] = k
			sets = append(sets, &set{})
			for h, insns := range halves {
				specs[globProg(k, h == 1)] = &ebpf.ProgramSpec{Name: "filter", Type: ebpf.Kprobe, AttachType: attachType, License: "GPL", Instructions: insns}
			}
		}
		sets[k].funcs = append(sets[k].funcs, fn)
		sets[k].cookies = append(sets[k].cookies, uint64(i))
	}
	if prog == nil {
		return firstErr
	}
	cs := &ebpf.CollectionSpec{Maps: compile.Maps(act.Kind, prog), Programs: specs}
	if call {
		maps.Copy(cs.Maps, compile.CallMaps(stash))
	}
	coll, err := loadFollowing(s, cs, target.Tree, target.NS, o.MaxTree)
	if err != nil {
		return err
	}
	if call {
		s.OnClose("", func() error {
			if n := inProgress(coll.Maps[compile.StashMap], compile.CallsInFlight); n > 0 {
				fmt.Fprintf(s.Stderr, "%s: %d call(s) of %s had begun and not returned when tracing stopped: not in the output\n", s.Tool, n, ev)
			}
			return nil
		})
	}
	start := time.Now()
	attached, failed := 0, 0
	var failErr error
	named := map[string]bool{} // a list's own names, not a glob's matches
	for _, f := range ev.funcs {
		named[f] = !tracefs.IsGlob(f)
	}
	// A call's returns first: a call whose entry is stashed finds its
	// return armed.
	halves := []bool{false}
	if call {
		halves = []bool{true, false}
	}
	for i, st := range sets {
		ok := map[string]bool{}
		for _, ret := range halves {
			p := coll.Programs[globProg(i, ret)]
			var many []string
			var cookies []uint64
			for k, fn := range st.funcs {
				if multi && !direct[fn] {
					many, cookies = append(many, fn), append(cookies, st.cookies[k])
					continue
				}
				if !ret && call && !ok[fn] {
					continue // its return could not be probed
				}
				// One that cannot be probed (the kprobe blacklist) is left
				// out, unless the list names it.
				if err := s.AttachProbe(p, tracefs.Probe{Type: tracefs.Kprobe, Symbol: fn, Ret: ret}, false); err != nil {
					if named[fn] {
						return err
					}
					if !ret || !call {
						failed++
					}
					if failErr == nil {
						failErr = err
					}
					continue
				}
				ok[fn] = true
				if !ret {
					attached++
				}
			}
			if len(many) > 0 {
				l, err := perfevent.AttachKprobeMulti(p, many, cookies, ret)
				if err != nil {
					return fmt.Errorf("%s: %w", ev, err)
				}
				s.OnDetach("", l.Close)
				if !ret {
					attached += len(many)
				}
			}
		}
	}
	if attached == 0 {
		return fmt.Errorf("%s: no function could be probed: %w", ev, failErr)
	}
	how := "a kprobe each"
	if multi {
		how = fmt.Sprintf("%d kprobe_multi link(s)", len(sets))
	}
	if call {
		how += ", and at the returns the same"
	}
	fmt.Fprintf(s.Stderr, "%s: %s: %d functions attached in %v (%s)\n", s.Tool, ev, attached, time.Since(start).Round(time.Millisecond), how)
	if len(left) > 0 {
		fmt.Fprintf(s.Stderr, "%s: %d matching functions left out: %s (%v)\n", s.Tool, len(left), firstFew(left), firstLine(firstErr))
	}
	if failed > 0 {
		fmt.Fprintf(s.Stderr, "%s: %d matching functions could not be probed: %v\n", s.Tool, failed, failErr)
	}
	return report(ctx, s, o, ev, coll, prog, act)
}

// globProg names the program of a glob's set i: a call's entry, or with
// ret its return.
func globProg(i int, ret bool) string {
	if ret {
		return progName(i) + "_return"
	}
	return progName(i)
}

// functions lists the kernel functions of a glob or a list: each item
// must name a function or match one. A name that ftrace cannot reach
// (not in available_filter_functions: the kernel kprobes it with a
// breakpoint) is kept when BTF knows it, and is one of direct: a kprobe
// of its own, never a kprobe_multi link's.
func (e event) functions(spec *kbtf.Spec) (funcs []string, direct map[string]bool, err error) {
	if funcs, err = tracefs.Functions(e.funcs...); err != nil {
		return nil, nil, usage.Errorf("%v", err)
	}
	direct = map[string]bool{}
	for _, f := range e.funcs {
		found := false
		for _, name := range funcs {
			if ok, _ := filepath.Match(f, name); ok {
				found = true
				break
			}
		}
		switch {
		case found:
		case tracefs.IsGlob(f):
			return nil, nil, usage.Errorf("kprobe:%s matches no traceable kernel function (available_filter_functions)", f)
		case spec == nil:
			return nil, nil, usage.Errorf("kprobe:%s is not in available_filter_functions", f)
		default:
			if _, _, err := funcProto(spec, f); err != nil {
				return nil, nil, usage.Errorf("kprobe:%s is not a traceable kernel function (not in available_filter_functions, nor in BTF)", f)
			}
			if !direct[f] {
				direct[f] = true
				funcs = append(funcs, f)
			}
		}
	}
	return funcs, direct, nil
}

// namedRecords is the action of a run over several events: printed
// records are filter's own (a kprobe_multi link makes none of the
// kernel's, and tracepoints' differ), each holding the event's name
// (name: func or probe), which names the printed line.
func namedRecords(act compile.Action, name string) compile.Action {
	switch act.Kind {
	case compile.Keep:
		return compile.Action{Kind: compile.Emit, Columns: []compile.Operand{{Base: name, Text: name}}}
	case compile.Emit:
		for _, c := range act.Columns {
			if !c.IsConst() && (c.Base == "func" || c.Base == "probe") && len(c.Steps) == 0 {
				return act
			}
		}
		act.Columns = append([]compile.Operand{{Base: name, Text: name}}, act.Columns...)
	}
	return act
}

// firstLine is an error's first line: an expression's error points at its
// text on the lines below, which a summary leaves out.
func firstLine(err error) string {
	line, _, _ := strings.Cut(err.Error(), "\n")
	return line
}

// firstFew names the first few of a list.
func firstFew(names []string) string {
	if len(names) > 5 {
		return strings.Join(names[:5], ", ") + ", ..."
	}
	return strings.Join(names, ", ")
}
