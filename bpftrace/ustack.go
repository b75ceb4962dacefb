package bpftrace

import (
	"context"
	"encoding/binary"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/bpftrace/compile"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks"
	"github.com/tracekit/tracekit/stacks/prog"
)

// The probe with ustack runs as the stack pipeline's gate (see
// compile/ustack.go): each of its events comes with its stacks and the
// record its last statement made, and is aggregated here into the map
// it names (held in user space) or printed.

// startUstack starts the stack pipeline at the ustack probe's targets,
// its gate reading and writing the script's maps.
func startUstack(ctx context.Context, s *run.Session, o *options, coll *ebpf.Collection, p *printer) (*stacks.Hosted, error) {
	u := p.res.Ustack
	maps := map[string]*ebpf.Map{}
	for name, m := range coll.Maps {
		maps[compile.GateMap(name)] = m
	}
	ev := stacks.StackEvent{
		Event:  prog.Event{Type: u.Type, Regs: u.Regs, Gate: u.Gate, Record: u.Record, RecordAt: u.RecordAt},
		Name:   u.Targets[0].ProbeName(),
		Kernel: u.Kernel,
		Maps:   maps,
		Attach: func(prog *ebpf.Program) error {
			var at []attachment
			for _, t := range u.Targets {
				at = append(at, attachment{prog, t})
			}
			return attachAll(s, at)
		},
		Print: p.ustackEvent,
	}
	return stacks.StartEvent(ctx, s, o.Common, int(o.Pid), ev)
}

// ustackEvent aggregates or prints one event of the ustack probe.
func (p *printer) ustackEvent(smp perfevent.Sample, st stacks.Stack) {
	p.ev.Lock()
	defer p.ev.Unlock()
	p.stack = &st
	defer func() { p.stack = nil }()
	u := p.res.Ustack
	if u.Map == nil {
		p.record(smp.Raw) // the gate's own record: its id and layout are the program's
		return
	}
	h := p.held[u.Map.Name]
	if h == nil {
		h = &heldMap{m: u.Map, index: map[string]int{}}
		if p.held == nil {
			p.held = map[string]*heldMap{}
		}
		p.held[u.Map.Name] = h
	}
	var id strings.Builder
	keys := make([]output.Value, 0, len(u.Layout))
	at := 0
	for _, k := range u.Layout {
		var v output.Value
		switch {
		case k.Ustack:
			v = output.Value{Str: p.userStack(k, keyIndent), IsStr: true}
		case k.Stack != "" && k.Size == 0:
			text, err := p.kernelStack(keyIndent)
			if err != nil {
				return
			}
			v = output.Value{Str: text, IsStr: true}
		default:
			if at+k.Size > len(smp.Raw) {
				return
			}
			v = p.names.keys(smp.Raw[at:at+k.Size], []compile.Key{k})[0]
			if p.names.name(nil) != nil {
				return
			}
			at += k.Size
		}
		keys = append(keys, v)
		id.WriteString(v.Str)
		id.WriteByte(0)
		id.WriteString(string(binary.LittleEndian.AppendUint64(nil, uint64(v.Int))))
	}
	var x int64
	if u.Value {
		if at+8 > len(smp.Raw) {
			return
		}
		x = int64(binary.LittleEndian.Uint64(smp.Raw[at:]))
	}
	i, ok := h.index[id.String()]
	if !ok {
		i = len(h.elems)
		h.index[id.String()] = i
		h.elems = append(h.elems, output.Elem{Keys: keys})
	}
	compile.AggregateUser(u.Map, &h.elems[i].Value, x)
}

// userStack is the event's user stack as bpftrace prints one: a line a
// frame, innermost first, indented; a walk that ended early says why
// on a last line.
func (p *printer) userStack(k compile.Key, indent string) string {
	if p.stack == nil {
		return ""
	}
	frames := p.stack.User
	if k.Frames > 0 && len(frames) > k.Frames {
		frames = frames[:k.Frames]
	} else if p.stack.End != "" {
		frames = append(frames[:len(frames):len(frames)], p.stack.End)
	}
	var b strings.Builder
	b.WriteByte('\n')
	for _, f := range frames {
		b.WriteString(indent + f + "\n")
	}
	return b.String()
}

// kernelStack is the event's kernel stack, from the pipeline, named as
// kstack's frames are.
func (p *printer) kernelStack(indent string) (string, error) {
	if p.stack == nil {
		return "", nil
	}
	v := &output.Value{IsStr: true}
	p.names.pending = append(p.names.pending, pendingName{v: v, frames: p.stack.Kernel, stack: true, indent: indent})
	if err := p.names.name(nil); err != nil {
		return "", err
	}
	return v.Str, nil
}

// heldMap is a map with ustack keys, aggregated in user space.
type heldMap struct {
	m     *compile.Map
	elems []output.Elem
	index map[string]int // the elements by their keys' identity
}

// heldOutput is a held map as printed (an empty one if nothing came).
func (p *printer) heldOutput(m *compile.Map) *output.Map {
	om := &output.Map{Name: m.Name, Kind: m.Kind, Unsigned: m.Unsigned, Min: m.Min, Max: m.Max, Step: m.Step}
	if h := p.held[m.Name]; h != nil {
		for _, e := range h.elems {
			e.Value.Buckets = append([]uint64(nil), e.Value.Buckets...)
			om.Elems = append(om.Elems, e)
		}
	}
	return om
}

// clearHeld empties a held map (clear), or zeroes its values (zero).
func (p *printer) clearHeld(m *compile.Map, zero bool) {
	h := p.held[m.Name]
	if h == nil {
		return
	}
	if !zero {
		delete(p.held, m.Name)
		return
	}
	for i := range h.elems {
		h.elems[i].Value = output.Value{}
	}
}
