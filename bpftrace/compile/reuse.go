package compile

import (
	"fmt"
	"strings"

	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
)

// What a probe computes twice, computed once: each instruction runs for
// every event on every CPU.
//
//   - pid and tid: one bpf_get_current_pid_tgid for the program, kept in
//     a slot, where the probe names them more than once (a key, a
//     predicate, a delete).
//   - A map's element read by the predicate and read again by the body
//     with the same key (/@start[tid]/ { ... nsecs - @start[tid] ... },
//     the latency idiom of bpftrace's tools): one lookup, its value kept
//     in a slot until a statement writes the map.

// hidden is the prefix of the slots gen keeps among the variables (so
// that their room is never given back), which no $name can have.
const hidden = "\x00"

// prepare emits the pid and tid helper call, where the probe would call
// it more than once, and marks the predicate's map reads whose values
// the body can reuse.
func (g *gen) prepare(pr *parse.Probe) error {
	uses := pidUses(pr.Pred, 1) + pidUses(pr.Body, 1)
	if g.c.opt.Pid != 0 {
		uses++
	}
	if uses >= 2 {
		off, err := g.hiddenSlot("pid_tgid", pr.Pos)
		if err != nil {
			return err
		}
		g.emit(asm.Note(bpf.Instructions{bpf.FnGetCurrentPidTgid.Call()}, "pid and tid, once for the program")...)
		g.emit(bpf.StoreMem(bpf.RFP, off, bpf.R0, bpf.DWord))
		g.pidTgid = off
	}
	if pr.Pred == nil || writesMaps(pr.Pred) {
		return nil
	}
	g.reusable = map[*parse.Map]string{}
	g.known = map[string]int16{}
	g.markReusable(pr.Pred)
	return nil
}

// hiddenSlot is 8 bytes of stack kept for the whole program.
func (g *gen) hiddenSlot(name string, at parse.Pos) (int16, error) {
	off, err := g.alloc(8, at)
	if err != nil {
		return 0, err
	}
	g.vars[hidden+name] = slot{off: off, t: intT}
	return off, nil
}

// pidUses counts pid and tid in n, a loop's body as many times as it is
// unrolled.
func pidUses(n any, times int) int {
	count := 0
	parse.Inspect(n, func(x any) bool {
		switch x := x.(type) {
		case *parse.Ident:
			if x.Name == "pid" || x.Name == "tid" {
				count += times
			}
		case *parse.Unroll:
			k := 100
			if n, ok := x.N.(*parse.Int); ok {
				k = int(min(n.Value, 100))
			}
			count += pidUses(x.Body, times*k)
			return false
		}
		return true
	})
	return count
}

// markReusable marks the integer maps' reads of the predicate that
// run whenever the body does (the predicate held): what a short circuit
// or a ternary may skip is not reused, whose slot would be unset.
func (g *gen) markReusable(pred parse.Expr) {
	var always func(e parse.Expr)
	// always marks the reads e makes whenever it is evaluated.
	always = func(e parse.Expr) {
		switch x := e.(type) {
		case *parse.Map:
			if m := g.c.maps["@"+x.Name]; m != nil && m.Kind == output.Int {
				if text, ok := keyText(x); ok {
					g.reusable[x] = text
				}
			}
		case *parse.Binary:
			always(x.L)
			if x.Op != "&&" && x.Op != "||" {
				always(x.R)
			}
		case *parse.Unary:
			always(x.X)
		case *parse.Cast:
			always(x.X)
		case *parse.Ternary:
			always(x.Cond)
		}
	}
	// whenTrue marks the reads e makes whenever it is evaluated and
	// holds: both sides of &&, the left of ||.
	var whenTrue func(e parse.Expr)
	whenTrue = func(e parse.Expr) {
		if x, ok := e.(*parse.Binary); ok && x.Op == "&&" {
			whenTrue(x.L)
			whenTrue(x.R)
			return
		}
		always(e)
	}
	whenTrue(pred)
}

// keyText is a map element's key as text, where the key is the same
// whenever the probe computes it in one event: builtins of the task,
// literals, parameters, the tracepoint's fields.
func keyText(x *parse.Map) (string, bool) {
	var b strings.Builder
	b.WriteString("@" + x.Name + "[")
	for i, k := range x.Keys {
		if i > 0 {
			b.WriteByte(',')
		}
		switch k := k.(type) {
		case *parse.Ident:
			switch k.Name {
			case "pid", "tid", "uid", "gid", "cpu", "comm", "cgroup":
				b.WriteString(k.Name)
			default:
				return "", false
			}
		case *parse.Int:
			fmt.Fprintf(&b, "%d", k.Value)
		case *parse.Str:
			fmt.Fprintf(&b, "%q", k.Value)
		case *parse.Param:
			fmt.Fprintf(&b, "$%d", k.N)
		case *parse.Field:
			a, ok := k.X.(*parse.Ident)
			if !ok || a.Name != "args" {
				return "", false
			}
			b.WriteString("args." + k.Name)
		default:
			return "", false
		}
	}
	b.WriteByte(']')
	return b.String(), true
}

// written is the map node x writes (an assignment, ++ or --, delete,
// clear, zero), nil if none.
func written(x any) *parse.Map {
	switch x := x.(type) {
	case *parse.Assign:
		m, _ := x.Target.(*parse.Map)
		return m
	case *parse.IncDec:
		m, _ := x.X.(*parse.Map)
		return m
	case *parse.Call:
		if x.Name == "delete" || x.Name == "clear" || x.Name == "zero" {
			for _, a := range x.Args {
				if m, ok := a.(*parse.Map); ok {
					return m
				}
			}
		}
	}
	return nil
}

// writesMaps says whether n writes a map.
func writesMaps(n any) bool {
	w := false
	parse.Inspect(n, func(x any) bool {
		w = w || written(x) != nil
		return !w
	})
	return w
}

// forget drops the values kept of the maps statement s writes, before
// it is compiled: what it reads of them is read again.
func (g *gen) forget(s parse.Stmt) {
	if len(g.known) == 0 {
		return
	}
	parse.Inspect(s, func(x any) bool {
		if m := written(x); m != nil {
			for text := range g.known {
				if strings.HasPrefix(text, "@"+m.Name+"[") {
					delete(g.known, text)
				}
			}
		}
		return true
	})
}
