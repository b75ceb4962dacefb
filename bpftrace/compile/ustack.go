package compile

import (
	"fmt"
	"math/bits"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
)

// ustack: the user stack, whole, as the stack pipeline's unwinder walks
// it (stacks: .eh_frame tables where the files have them, frame
// pointers elsewhere), not bpf_get_stack's frame pointers alone, which
// stop at the first function built without them (most of a
// distribution's libraries).
//
// The probe that names ustack is no program of its own: it is the gate
// of the pipeline's sampler (stacks.StackEvent), which runs at its
// targets. Its statements run in the kernel as any probe's do, up to its
// last one, the one with the stacks: a map's aggregation keyed by them,
// or a printf of them. That one leaves a record on the stack (the other
// keys or arguments, and the aggregation's value) and falls through; the
// sampler walks the stacks and sends them with the record to user space,
// which aggregates the map (held in user space: Map.User) or prints the
// printf. So each event is a record in a ring, as a printf's is, where
// bpftrace counts a stack's id in the kernel: the price of whole stacks.

// Ustack is the probe whose last statement keeps user stacks.
type Ustack struct {
	Targets []Target
	// Type is the program type of the targets' hook (the unwinder the
	// gate tail-calls is of that type too); Regs says the context is a
	// pt_regs (a kprobe's, uprobe's or perf event's), else a tracepoint's
	// record.
	Type ebpf.ProgramType
	Regs bool
	// Gate is the probe's code up to its last statement, which leaves
	// Record bytes at RecordAt and falls through; "exit" drops the event.
	Gate     bpf.Instructions
	Record   int
	RecordAt int16
	// Kernel: the statement names kstack too, the sampler's kernel stack.
	Kernel bool
	// Map is the map the statement aggregates into (held in user space),
	// Call its aggregation; nil for a printf (Printf, its id).
	Map    *Map
	Call   string
	Printf int
	// Layout is the record: the keys (a map's) or the arguments (a
	// printf's, after its 8-byte id) in order, a stack's of no bytes
	// (Key.Ustack, or Key.Stack for kstack); then, for an aggregation
	// that takes a value, its 8 bytes.
	Layout []Key
	Value  bool
}

// GateMap is the name the gate gives map name of the script's
// collection: apart from the sampler's own ("lost" is in both).
func GateMap(name string) string { return "bpftrace_" + name }

// gateStack is the stack the gate leaves to the sampler, whose slots
// are above it (prog's fp-8 to fp-200): the gate's own start below.
const gateStack = 200

// isStack says whether x is ustack or kstack (with or without
// arguments).
func isStack(x parse.Expr, name string) bool {
	switch x := x.(type) {
	case *parse.Ident:
		return x.Name == name
	case *parse.Call:
		return x.Name == name
	}
	return false
}

// ustackUse finds where a probe names ustack: nil if nowhere; else its
// last statement, which must hold it as a map's key beside an
// aggregation, or as a printf's argument, and nowhere else.
func ustackUse(file string, pr *parse.Probe) (parse.Stmt, error) {
	var at *parse.Pos
	parse.Inspect(pr.Pred, func(x any) bool {
		if e, ok := x.(parse.Expr); ok && isStack(e, "ustack") && at == nil {
			p := e.ExprPos()
			at = &p
		}
		return true
	})
	if at != nil {
		return nil, errAt(file, *at, "ustack in a predicate: it is a map's key or printf's argument")
	}
	last := -1
	for i, s := range pr.Body {
		parse.Inspect(s, func(x any) bool {
			if e, ok := x.(parse.Expr); ok && isStack(e, "ustack") {
				if last != i && last != -1 || i != len(pr.Body)-1 {
					p := e.ExprPos()
					at = &p
				}
				last = i
			}
			return true
		})
	}
	if at != nil {
		return nil, errAt(file, *at, "ustack is taken in one statement of a probe, its last, as a map's key or printf's argument")
	}
	if last == -1 {
		return nil, nil
	}
	s := pr.Body[last]
	var places []parse.Expr // where ustack may be
	switch s := s.(type) {
	case *parse.Assign:
		m, ok := s.Target.(*parse.Map)
		call, isCall := s.Value.(*parse.Call)
		if ok && isCall && isAgg(call.Name) && s.Op == "=" {
			places = m.Keys
			for _, a := range call.Args {
				if err := noUstack(file, a); err != nil {
					return nil, err
				}
			}
		}
	case *parse.ExprStmt:
		if call, ok := s.X.(*parse.Call); ok && call.Name == "printf" && len(call.Args) > 0 {
			places = call.Args[1:]
		}
	}
	if places == nil {
		return nil, errAt(file, s.StmtPos(), "ustack is a key of a map an aggregation is assigned (@[ustack] = count()) or printf's argument here")
	}
	for _, x := range places {
		if isStack(x, "ustack") || isStack(x, "kstack") {
			continue
		}
		if err := noUstack(file, x); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func isAgg(name string) bool {
	_, ok := aggs[name]
	return ok
}

// noUstack refuses ustack inside x.
func noUstack(file string, x parse.Expr) error {
	var err error
	parse.Inspect(x, func(n any) bool {
		if e, ok := n.(parse.Expr); ok && isStack(e, "ustack") && err == nil {
			err = errAt(file, e.ExprPos(), "ustack is a map's key or printf's argument as it is, not part of an expression")
		}
		return err == nil
	})
	return err
}

// ustackType is ustack's and ustack(N)'s type: no bytes of its own (the
// sampler's frames), N of them at most.
func (c *compiler) ustackType(call *parse.Call) (typ, error) {
	t := typ{ustack: true, frames: UstackFrames}
	if call != nil {
		for _, a := range call.Args {
			n, ok := a.(*parse.Int)
			if !ok {
				return typ{}, errAt(c.opt.File, a.ExprPos(), "ustack(%s): bpftrace's format and a number of frames are taken", exprText(a))
			}
			if n.Value < 1 || n.Value > UstackFrames {
				return typ{}, errAt(c.opt.File, a.ExprPos(), "ustack's frames: 1 to %d", UstackFrames)
			}
			t.frames = int(n.Value)
		}
	}
	return t, nil
}

// UstackFrames is the most frames a ustack keeps (bpftrace's 127; the
// pipeline's walk stops at 256).
const UstackFrames = 127

// exprText names an argument in a message.
func exprText(x parse.Expr) string {
	if id, ok := x.(*parse.Ident); ok {
		return id.Name
	}
	return "..."
}

// gate compiles the ustack probe for one target: its statements but the
// last, then the last one's record, falling through; its labels prefixed
// "gate_", its ends jumping to the sampler's "exit".
func (c *compiler) gate(pr *parse.Probe, last parse.Stmt, tp *Target, vars map[string]typ) (bpf.Instructions, *Ustack, error) {
	g := &gen{c: c, tp: tp, vars: map[string]slot{}, varTypes: vars, sp: gateStack}
	if err := g.head(pr); err != nil {
		return nil, nil, err
	}
	body := pr.Body[:len(pr.Body)-1]
	if err := g.stmts(body); err != nil {
		return nil, nil, err
	}
	if returns(body) {
		return nil, nil, errAt(c.opt.File, last.StmtPos(), "the statement after return never runs")
	}
	g.forget(last)
	u, err := g.record(last)
	if err != nil {
		return nil, nil, err
	}
	g.clearVars()
	if len(g.insns) > 2048 {
		return nil, nil, errAt(c.opt.File, pr.Pos, "the probe compiles to %d instructions, more than the 2048 left beside the stack walk", len(g.insns))
	}
	g.emit(asm.Nop().WithSource(bpf.Comment("the record is made: the sampler walks the stacks")))
	for i, ins := range g.insns {
		if sym := ins.Symbol(); sym != "" {
			ins = ins.WithSymbol("gate_" + sym)
		}
		if ref := ins.Reference(); ref != "" && ins.IsLoadFromMap() {
			ins = ins.WithReference(GateMap(ref))
		}
		if ref := ins.Reference(); ref != "" && ins.OpCode.JumpOp() != bpf.InvalidJumpOp && !ins.IsFunctionCall() {
			if ref == "out" {
				ins = ins.WithReference("exit")
			} else {
				ins = ins.WithReference("gate_" + ref)
			}
		}
		g.insns[i] = ins
	}
	return g.insns, u, nil
}

// record packs the ustack statement's record: a map's other keys and
// its aggregation's value, or a printf's id and other arguments.
func (g *gen) record(s parse.Stmt) (*Ustack, error) {
	u := &Ustack{}
	var xs []parse.Expr
	var value parse.Expr
	size := 0
	switch s := s.(type) {
	case *parse.Assign:
		x := s.Target.(*parse.Map)
		call := s.Value.(*parse.Call)
		u.Map, u.Call, xs = g.c.maps["@"+x.Name], call.Name, x.Keys
		if len(call.Args) > 0 {
			value, u.Value = call.Args[0], true
		}
	case *parse.ExprStmt:
		call := s.X.(*parse.Call)
		f, ok := call.Args[0].(*parse.Str)
		if !ok {
			return nil, errAt(g.file(), call.Pos, "printf's format is a string literal")
		}
		xs = call.Args[1:]
		u.Printf = len(g.c.printfs)
		size = 8 // the id
		p := Printf{Format: f.Value}
		defer func() { g.c.printfs = append(g.c.printfs, p) }()
		ty := g.typer()
		for _, a := range xs {
			t, err := ty.expr(a)
			if err != nil {
				return nil, err
			}
			p.Args = append(p.Args, t.key())
		}
	}
	ty := g.typer()
	var packed []parse.Expr
	var layout []Key
	for _, x := range xs {
		t, err := ty.expr(x)
		if err != nil {
			return nil, err
		}
		k := t.key()
		switch {
		case k.Ustack:
		case isStack(x, "kstack"):
			u.Kernel, k.Size = true, 0
		default:
			packed, layout = append(packed, x), append(layout, k)
			size += k.Size
		}
		u.Layout = append(u.Layout, k)
	}
	if u.Value {
		size += 8
	}
	u.Record = size
	if size == 0 {
		return u, nil
	}
	rec, err := g.alloc(size, s.StmtPos())
	if err != nil {
		return nil, err
	}
	u.RecordAt = rec
	at := rec
	if u.Map == nil {
		g.emit(asm.Note(storeU32(bpf.RFP, rec, int64(u.Printf)), fmt.Sprintf("printf %d: its record goes with the stacks", u.Printf))...)
		at += 8
	}
	if err := g.pack(at, packed, layout, "the key"); err != nil {
		return nil, err
	}
	if value != nil {
		t, err := g.expr(value)
		if err != nil {
			return nil, err
		}
		if t.str {
			return nil, errAt(g.file(), value.ExprPos(), "%s() counts integers, not strings", u.Call)
		}
		g.emit(asm.Note(bpf.Instructions{bpf.StoreMem(bpf.RFP, rec+int16(size-8), bpf.R0, bpf.DWord)}, u.Call+"()'s value, for user space")...)
	}
	return u, nil
}

// ustackProbe compiles the probe with the stacks into the gate of its
// targets (one gate for all: they must come out the same), and holds
// the map its statement aggregates into in user space.
func (c *compiler) ustackProbe(pr *parse.Probe, last parse.Stmt, tps []Target, vars []map[string]typ) error {
	var first string
	u := &Ustack{}
	printfs := len(c.printfs)
	for i := range tps {
		tp := &tps[i]
		// One program for every target: the same printf ids in each.
		c.printfs = c.printfs[:printfs]
		gate, got, err := c.gate(pr, last, tp, vars[i])
		if err != nil {
			return err
		}
		text := fmt.Sprint(gate)
		if i > 0 {
			if text != first {
				return errAt(c.opt.File, pr.Pos, "%s and %s compile differently (their fields, their arguments' places): ustack takes one program for a probe's targets, so give it one", tps[0].ProbeName(), tp.ProbeName())
			}
			continue
		}
		first, u = text, got
		u.Gate = gate
	}
	u.Targets = tps
	switch tps[0].Provider {
	case "tracepoint":
		u.Type = ebpf.TracePoint
	case "kprobe", "kretprobe", "uprobe", "uretprobe", "usdt":
		u.Type, u.Regs = ebpf.Kprobe, true
	case "profile", "software", "hardware":
		u.Type, u.Regs = ebpf.PerfEvent, true
	default:
		return errAt(c.opt.File, pr.Pos, "ustack in %s probes is not taken yet", tps[0].Provider)
	}
	if u.Map != nil {
		u.Map.User = true
	}
	c.res.Ustack = u
	return nil
}

// userHeld refuses a map held in user space (the ustack statement's)
// anywhere else in a probe: it has no kernel map to read or write.
func (c *compiler) userHeld(file string, probes []*parse.Probe, skip parse.Stmt) error {
	var err error
	for _, pr := range probes {
		parse.Inspect(pr.Pred, func(x any) bool {
			if m, ok := x.(*parse.Map); ok && err == nil && c.maps["@"+m.Name] != nil && c.maps["@"+m.Name].User {
				err = errAt(file, m.Pos, "@%s holds ustack keys, in user space: it is not read in a probe", m.Name)
			}
			return err == nil
		})
		for _, s := range pr.Body {
			if s == skip {
				continue
			}
			parse.Inspect(s, func(x any) bool {
				if m, ok := x.(*parse.Map); ok && err == nil && c.maps["@"+m.Name] != nil && c.maps["@"+m.Name].User {
					err = errAt(file, m.Pos, "@%s holds ustack keys, in user space: it is assigned and read there only (print, clear and zero in BEGIN, END and interval probes)", m.Name)
				}
				return err == nil
			})
		}
	}
	return err
}

// AggregateUser is an aggregation's work on a map held in user space: v
// is the element's value, x the aggregation's argument.
func AggregateUser(m *Map, v *output.Value, x int64) {
	switch m.Kind {
	case output.Count:
		v.Count++
	case output.Sum:
		v.Int += x
	case output.Avg, output.Stats:
		v.Count++
		v.Total += x
	case output.Min, output.Max:
		if v.Count == 0 || m.Kind == output.Min && x < v.Int || m.Kind == output.Max && x > v.Int {
			v.Int = x
		}
		v.Count = 1 // set
	case output.Hist, output.Lhist:
		if v.Buckets == nil {
			v.Buckets = make([]uint64, m.Buckets())
		}
		v.Buckets[m.Bucket(x)]++
	}
}

// Bucket is x's bucket in a hist or lhist, as the programs compute it
// (see bucket).
func (m *Map) Bucket(x int64) int {
	if m.Kind == output.Lhist {
		switch {
		case x < m.Min:
			return 0
		case x >= m.Max:
			return m.Buckets() - 1
		}
		return int((x-m.Min)/m.Step) + 1
	}
	switch {
	case x < 0:
		return 0
	case x == 0:
		return 1
	}
	return bits.Len64(uint64(x)) + 1
}
