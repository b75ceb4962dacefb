package bpftrace

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"

	"github.com/tracekit/tracekit/bpftrace/compile"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/stacks"
)

// readMap reads a script's map: from the kernel, or as user space holds
// it (a map with ustack keys).
func (p *printer) readMap(m *compile.Map) (*output.Map, error) {
	if m.User {
		p.ev.Lock()
		defer p.ev.Unlock()
		return p.heldOutput(m), nil
	}
	return readMap(p.coll.Maps[m.BPFName], m, p.names)
}

// readMap reads a script's map from the kernel: per-CPU values summed
// (minima and maxima taken), a histogram's buckets gathered under their
// keys.
func readMap(km *ebpf.Map, m *compile.Map, names *kernelNames) (*output.Map, error) {
	om := &output.Map{Name: m.Name, Kind: m.Kind, Unsigned: m.Unsigned, Min: m.Min, Max: m.Max, Step: m.Step}
	hist := m.Kind == output.Hist || m.Kind == output.Lhist
	byKey := map[string]int{} // a histogram's keys, to its element
	key := make([]byte, m.KeySize())
	var values [][]byte
	var value []byte
	it := km.Iterate()
	for {
		var ok bool
		if m.PerCPU {
			ok = it.Next(&key, &values)
		} else {
			ok = it.Next(&key, &value)
			values = [][]byte{value}
		}
		if !ok {
			break
		}
		keys := names.keys(key, m.Keys)
		v := combine(m, values)
		if !hist {
			om.Elems = append(om.Elems, output.Elem{Keys: keys, Value: v})
			continue
		}
		id := string(key[:len(key)-8])
		bucket := binary.LittleEndian.Uint64(key[len(key)-8:])
		i, seen := byKey[id]
		if !seen {
			i = len(om.Elems)
			byKey[id] = i
			om.Elems = append(om.Elems, output.Elem{Keys: keys, Value: output.Value{Buckets: make([]uint64, m.Buckets())}})
		}
		if bucket < uint64(m.Buckets()) {
			om.Elems[i].Value.Buckets[bucket] += uint64(v.Count)
		}
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", m.Name, err)
	}
	if err := names.name(om); err != nil {
		return nil, err
	}
	if m.Kind == output.Count && len(m.Keys) == 0 && len(om.Elems) == 0 {
		// bpftrace keeps a count() without keys in an array, whose one
		// element is there from the start: it prints as 0.
		om.Elems = []output.Elem{{}}
	}
	return om, nil
}

// kernelNames names the kernel addresses in maps' keys and printf's
// arguments: kstack's frames as bpftrace prints them ("vfs_read+5", one a
// line), ksym's symbols. A map's keys are read first and named in one pass
// over /proc/kallsyms (Resolve), not one a key.
type kernelNames struct {
	coll    *ebpf.Collection
	syms    *procfs.Symbols
	pending []pendingName
	indent  string // of the stacks keys finds
}

// keyIndent and argIndent are a stack's frames' indents as bpftrace
// prints them in a map's key and in printf.
const (
	keyIndent = "    "
	argIndent = "        "
)

// pendingName is a key value to be named: a stack's frames, or an
// address (frames of one).
type pendingName struct {
	v      *output.Value
	frames []uint64
	stack  bool
	indent string // a stack's frames': four spaces in a map's key, eight in printf's
}

// keys splits a kernel key into the script's key values.
func (k *kernelNames) keys(key []byte, layout []compile.Key) []output.Value {
	vals := make([]output.Value, len(layout))
	at := 0
	for i, l := range layout {
		b := key[at : at+l.Size]
		at += l.Size
		v := &vals[i]
		switch {
		case l.Str:
			*v = output.Value{Str: cString(b), IsStr: true}
		case l.Stack != "":
			v.IsStr = true
			k.pending = append(k.pending, pendingName{v: v, frames: k.stack(l.Stack, int64(binary.LittleEndian.Uint64(b))), stack: true, indent: k.indent})
		case l.Inet:
			*v = output.Value{Str: inetText(b), IsStr: true}
		case l.Usym:
			*v = output.Value{Str: usymText(b), IsStr: true}
		case l.Ksym:
			v.IsStr = true
			k.pending = append(k.pending, pendingName{v: v, frames: []uint64{binary.LittleEndian.Uint64(b)}})
		default:
			*v = output.Value{Int: int64(binary.LittleEndian.Uint64(b))}
		}
	}
	return vals
}

// stack is a kstack's frames, from its map, by its id.
func (k *kernelNames) stack(mapName string, id int64) []uint64 {
	if id < 0 || k.coll == nil {
		return nil // the map was full, or the walk failed
	}
	m := k.coll.Maps[mapName]
	buf := make([]byte, m.ValueSize())
	if err := m.Lookup(uint32(id), buf); err != nil {
		return nil
	}
	var frames []uint64
	for i := 0; i+8 <= len(buf); i += 8 {
		pc := binary.LittleEndian.Uint64(buf[i:])
		if pc == 0 {
			break
		}
		frames = append(frames, pc)
	}
	return frames
}

// name names the values keys left pending, the elements of om's keys
// among them: one pass over /proc/kallsyms for them all.
// (The values are in each key's own array, which om's elements share:
// they stay where they are as om grows.)
func (k *kernelNames) name(*output.Map) error {
	if len(k.pending) == 0 {
		return nil
	}
	defer func() { k.pending = k.pending[:0] }()
	var all []uint64
	for _, p := range k.pending {
		all = append(all, p.frames...)
	}
	if k.syms == nil {
		syms, err := procfs.LazyKallsyms()
		if err != nil {
			return err
		}
		k.syms = syms
	}
	if err := k.syms.Resolve(all); err != nil {
		return err
	}
	for _, p := range k.pending {
		if !p.stack {
			name, _ := k.symbol(p.frames[0])
			p.v.Str = name
			continue
		}
		var b strings.Builder
		b.WriteByte('\n')
		for _, pc := range p.frames {
			name, off := k.symbol(pc)
			if off >= 0 {
				name += "+" + strconv.FormatInt(off, 10)
			}
			b.WriteString(p.indent + name + "\n")
		}
		p.v.Str = b.String()
	}
	return nil
}

// symbol is pc's function and offset in it as bpftrace prints them
// ("vfs_read", 5), or its address in hex and -1 where no symbol is known
// (or the kernel hides its addresses).
func (k *kernelNames) symbol(pc uint64) (string, int64) {
	unknown := "0x" + strconv.FormatUint(pc, 16)
	f := strings.Fields(k.syms.Symbolize(pc)) // "name+0xoff [module]"
	if len(f) == 0 {
		return unknown, -1
	}
	name, off, ok := strings.Cut(f[0], "+0x")
	n, err := strconv.ParseInt(off, 16, 64)
	if !ok || err != nil {
		return unknown, -1
	}
	return name, n
}

// close closes the kallsyms file, if it was opened.
func (k *kernelNames) close() error { return k.syms.Close() }

// combine folds one element's per-CPU values (one for a shared map).
func combine(m *compile.Map, values [][]byte) output.Value {
	var v output.Value
	set := false
	for _, b := range values {
		if len(b) < m.ValueSize() {
			continue
		}
		first := int64(binary.LittleEndian.Uint64(b))
		switch m.Kind {
		case output.Str:
			v.Str = cString(b)
		case output.Int, output.Sum:
			v.Int += first
		case output.Count, output.Hist, output.Lhist:
			v.Count += uint64(first)
		case output.Avg, output.Stats:
			v.Count += uint64(first)
			v.Total += int64(binary.LittleEndian.Uint64(b[8:]))
		case output.Min, output.Max:
			if binary.LittleEndian.Uint64(b[8:]) == 0 {
				continue // no value on this CPU
			}
			if !set || (m.Kind == output.Min && first < v.Int) || (m.Kind == output.Max && first > v.Int) {
				v.Int = first
			}
			set = true
		}
	}
	return v
}

// user runs BEGIN's and END's statements, in user space.
type user struct {
	p      *printer
	params []string
	err    error
}

// run runs body and reports whether it called exit(). The first fault
// is kept in u.err.
func (u *user) run(body []parse.Stmt) (exit bool) {
	for _, s := range body {
		if a, ok := s.(*parse.Assign); ok { // BEGIN's constants (compile.userStmts checked)
			if err := u.assign(a); err != nil && u.err == nil {
				u.err = err
			}
			continue
		}
		call := s.(*parse.ExprStmt).X.(*parse.Call)
		switch call.Name {
		case "printf", "cat", "system":
			var args []output.Arg
			for _, a := range call.Args[1:] {
				args = append(args, u.constant(a))
			}
			text := output.Printf(call.Args[0].(*parse.Str).Value, args)
			switch call.Name {
			case "cat":
				u.p.cat(text)
			case "system":
				u.p.system(text)
			default:
				u.p.printf(text)
			}
		case "time":
			format := "%H:%M:%S\n"
			if len(call.Args) > 0 {
				format = u.constant(call.Args[0]).Str
			}
			u.p.printf(strftime(format, time.Now()))
		case "exit":
			return true
		case "print", "clear", "zero":
			if err := u.mapCall(call); err != nil && u.err == nil {
				u.err = err
			}
		}
	}
	return false
}

// assign stores a constant in a map's element, from user space.
func (u *user) assign(a *parse.Assign) error {
	pm := a.Target.(*parse.Map)
	m := u.p.res.Map("@" + pm.Name)
	if m.PerCPU {
		return fmt.Errorf("%s: an aggregation is not assigned in BEGIN here", m.Name)
	}
	key := make([]byte, m.KeySize())
	at := 0
	for i, k := range pm.Keys {
		encode(key[at:at+m.Keys[i].Size], u.constant(k))
		at += m.Keys[i].Size
	}
	value := make([]byte, m.ValueSize())
	encode(value, u.constant(a.Value))
	if err := u.p.coll.Maps[m.BPFName].Update(key, value, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("BEGIN: store %s's element: %w", m.Name, err)
	}
	return nil
}

// encode writes v into b as the kernel lays it: an integer in 8 bytes, a
// string cut to leave a NUL.
func encode(b []byte, v output.Arg) {
	if !v.IsStr {
		binary.LittleEndian.PutUint64(b, v.Int)
		return
	}
	copy(b[:len(b)-1], v.Str)
}

// constant is a literal's or a parameter's value.
func (u *user) constant(x parse.Expr) output.Arg {
	switch x := x.(type) {
	case *parse.Int:
		return output.Arg{Int: x.Value}
	case *parse.Str:
		return output.Arg{Str: x.Value, IsStr: true}
	case *parse.Param:
		if x.N == 0 {
			return output.Arg{Int: uint64(len(u.params))}
		}
		v := ""
		if x.N <= len(u.params) {
			v = u.params[x.N-1]
		}
		if n, err := strconv.ParseInt(v, 0, 64); err == nil {
			return output.Arg{Int: uint64(n)}
		}
		return output.Arg{Str: v, IsStr: true}
	}
	return output.Arg{}
}

// mapCall is print, clear or zero of a whole map, in BEGIN, END or an
// interval probe run in user space.
func (u *user) mapCall(call *parse.Call) error {
	pm, ok := call.Args[0].(*parse.Map)
	if !ok {
		return nil
	}
	var top, div uint64
	if len(call.Args) > 1 {
		top = u.constant(call.Args[1]).Int
	}
	if len(call.Args) > 2 {
		div = u.constant(call.Args[2]).Int
	}
	return u.p.mapOp(call.Name, "@"+pm.Name, top, div)
}

// mapOp is print (top and div: 0, none), clear or zero of the whole map
// name: a kernel probe's when its record comes (never of a map user space
// holds: the compiler refuses those there), or user space's.
func (p *printer) mapOp(op, name string, top, div uint64) error {
	m := p.res.Map(name)
	if m == nil {
		return nil // never assigned in a probe: empty
	}
	if m.User && op != "print" {
		p.ev.Lock()
		defer p.ev.Unlock()
		p.clearHeld(m, op == "zero")
		return nil
	}
	km := p.coll.Maps[m.BPFName]
	switch op {
	case "print":
		om, err := p.readMap(m)
		if err != nil || len(om.Elems) == 0 {
			return err
		}
		om.Top, om.Div = top, div
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.json {
			return output.WriteMapJSON(p.w, om)
		}
		return output.WriteMap(p.w, om)
	case "clear", "zero":
		var keys [][]byte
		key := make([]byte, m.KeySize())
		it := km.Iterate()
		var discard []byte
		var discards [][]byte
		for {
			ok := false
			if m.PerCPU {
				ok = it.Next(&key, &discards)
			} else {
				ok = it.Next(&key, &discard)
			}
			if !ok {
				break
			}
			keys = append(keys, slices.Clone(key))
		}
		for _, k := range keys {
			if op == "clear" {
				if err := km.Delete(k); err != nil {
					return fmt.Errorf("clear %s: %w", m.Name, err)
				}
				continue
			}
			zero := make([]byte, m.ValueSize())
			var err error
			if m.PerCPU {
				n, _ := ebpf.PossibleCPU()
				zeros := make([][]byte, n)
				for i := range zeros {
					zeros[i] = zero
				}
				err = km.Update(k, zeros, ebpf.UpdateExist)
			} else {
				err = km.Update(k, zero, ebpf.UpdateExist)
			}
			if err != nil {
				return fmt.Errorf("zero %s: %w", m.Name, err)
			}
		}
	}
	return nil
}

// strftimeLayouts are strftime(3)'s conversions scripts use, as Go's
// time layouts write them in the C locale.
var strftimeLayouts = map[byte]string{
	'H': "15", 'M': "04", 'S': "05", 'Y': "2006", 'm': "01", 'd': "02", 'y': "06",
	'e': "_2", 'j': "002", 'I': "03", 'p': "PM", 'T': "15:04:05", 'F': "2006-01-02",
	'D': "01/02/06", 'R': "15:04", 'a': "Mon", 'A': "Monday", 'b': "Jan", 'h': "Jan",
	'B': "January", 'Z': "MST", 'z': "-0700",
}

// strftime formats t as C's strftime does for the conversions scripts
// use; others are written as they are.
func strftime(format string, t time.Time) string {
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		if format[i] != '%' || i+1 == len(format) {
			b.WriteByte(format[i])
			continue
		}
		i++
		if layout, ok := strftimeLayouts[format[i]]; ok {
			b.WriteString(t.Format(layout))
			continue
		}
		switch format[i] {
		case 's':
			fmt.Fprintf(&b, "%d", t.Unix())
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case '%':
			b.WriteByte('%')
		default:
			b.WriteByte('%')
			b.WriteByte(format[i])
		}
	}
	return b.String()
}

// usymText is a usym() value (the address, then the process's id): its
// function's name, else the address in hex, as bpftrace prints one it
// cannot name. The process may have gone: its addresses are then
// numbers.
func usymText(b []byte) string { return stacks.UsymText(b) }

// inetText is an address ntop() made (the family in 8 bytes, then the
// address), as inet_ntop writes it.
func inetText(b []byte) string {
	if len(b) < 24 {
		return ""
	}
	switch binary.LittleEndian.Uint64(b) {
	case 2: // AF_INET
		return netip.AddrFrom4([4]byte(b[8:12])).String()
	case 10: // AF_INET6
		return netip.AddrFrom16([16]byte(b[8:24])).String()
	}
	return ""
}
