package filter

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/hook"
	"github.com/tracekit/tracekit/internal/usage"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/tracefs"
)

// runTracepoints traces every tracepoint a glob matches
// (syscalls:sys_enter_*), each with its own fields from its format file,
// probe (or func) naming which one. As for a kernel function glob, a
// program is compiled per tracepoint and those that come out the same
// share one, probe a constant of each; a tracepoint the expression or the
// fields cannot be compiled for (it has no field of that name) is left
// out, and the run says how many were. The records are filter's own (the
// kernel's differ from one tracepoint to the next): printed, a line shows
// the tracepoint and --fields, which every matched tracepoint must have.
func runTracepoints(ctx context.Context, s *run.Session, o *options, ev event, root compile.Node, act compile.Action, target compile.Target) error {
	if _, err := hook.Choose(o.Attach, ev.String(), hook.Offer{Hook: hook.Perf}); err != nil {
		return err
	}
	tps, err := tracefs.Tracepoints(ev.group, ev.name)
	if err != nil {
		return usage.Errorf("%v", err)
	}
	if len(tps) == 0 {
		return usage.Errorf("%s: no tracepoint matches (filter --info GROUP:NAME describes one)", ev)
	}
	if compile.NeedsBTF(root) || compile.ColumnsNeedBTF(act) {
		if target.BTF, err = kernelBTF("casts"); err != nil {
			return err
		}
	}
	act = namedRecords(act, "probe")
	names := map[uint64]string{}
	for i, tp := range tps {
		names[uint64(i)] = tp
	}
	progs := sharedPrograms{specs: map[string]*ebpf.ProgramSpec{}, progType: ebpf.TracePoint}
	var sets [][]string // the tracepoints of each program
	var prog *compile.Program
	var left []string
	var firstErr error
	leave := func(tp string, err error) {
		left = append(left, tp)
		if firstErr == nil {
			firstErr = err
		}
	}
	for i, tp := range tps {
		group, name, _ := strings.Cut(tp, ":")
		f, err := tracefs.ReadFormat(group, name)
		if err != nil {
			leave(tp, err)
			continue
		}
		t := target
		t.Event = &compile.Record{Format: f, UserSpace: group == "syscalls"}
		t.Func = &compile.Func{Index: uint64(i), Names: names}
		p, err := compile.Compile(o.Where, root, t, act)
		if err != nil {
			var ee *compile.ExprError
			if !errors.As(err, &ee) {
				return err
			}
			leave(tp, fmt.Errorf("%s: %w", tp, usageOr(err)))
			continue
		}
		if prog != nil && p.Size != prog.Size {
			leave(tp, fmt.Errorf("%s: its fields take %d bytes, where the others' take %d", tp, p.Size, prog.Size))
			continue
		}
		prog = p
		k := progs.add(p)
		if k == len(sets) {
			sets = append(sets, nil)
		}
		sets[k] = append(sets[k], tp)
	}
	if prog == nil {
		return firstErr
	}
	coll, err := loadFollowing(s, &ebpf.CollectionSpec{Maps: compile.Maps(act.Kind, prog), Programs: progs.specs}, target.Tree, target.NS, o.MaxTree)
	if err != nil {
		return err
	}
	start := time.Now()
	attached := 0
	attach := s.TracepointBatch()
	for i, set := range sets {
		for _, tp := range set {
			group, name, _ := strings.Cut(tp, ":")
			if err := attach(coll.Programs[progName(i)], group, name); err != nil {
				leave(tp, err)
				continue
			}
			attached++
		}
	}
	if attached == 0 {
		return fmt.Errorf("%s: no tracepoint could be attached: %w", ev, firstErr)
	}
	fmt.Fprintf(s.Stderr, "%s: %s: %d tracepoints attached in %v\n", s.Tool, ev, attached, time.Since(start).Round(time.Millisecond))
	if len(left) > 0 {
		fmt.Fprintf(s.Stderr, "%s: %d matching tracepoints left out: %s (%v)\n", s.Tool, len(left), firstFew(left), firstLine(firstErr))
	}
	return report(ctx, s, o, ev, coll, prog, act)
}
