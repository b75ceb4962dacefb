package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/tools"
	"github.com/tracekit/tracekit/tracefs"
)

// event is a parsed EVENT argument.
type event struct {
	kind        string // "tracepoint", "kprobe", "kretprobe"
	group, name string // tracepoint
	symbol      string // kprobe
}

func (e event) String() string {
	if e.kind == "tracepoint" {
		return e.group + ":" + e.name
	}
	return e.kind + ":" + e.symbol
}

func parseEvent(s string) (event, error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return event{}, fmt.Errorf("invalid event %q: want GROUP:NAME, kprobe:FUNCTION or kretprobe:FUNCTION", s)
	}
	switch a {
	case "kprobe", "kretprobe":
		if err := tracefs.ValidateSymbol(b); err != nil {
			return event{}, err
		}
		return event{kind: a, symbol: b}, nil
	}
	if err := tracefs.ValidateName("event group", a); err != nil {
		return event{}, err
	}
	if err := tracefs.ValidateName("event", b); err != nil {
		return event{}, err
	}
	return event{kind: "tracepoint", group: a, name: b}, nil
}

func validate(o *options) error {
	if _, err := parseEvent(o.Lead()); err != nil {
		return tools.Usagef("%v", err)
	}
	if o.Where != "" {
		if _, err := Parse(o.Where); err != nil {
			return tools.Usagef("--where: %v", err)
		}
	}
	if o.Info && (o.Where != "" || o.Count) {
		return tools.Usagef("--info prints the event's description: it takes no --where or --count")
	}
	return nil
}

// funcArgs returns a kernel function's BTF prototype.
func funcProto(spec *btf.Spec, symbol string) (*btf.Func, *btf.FuncProto, error) {
	name, off := tracefs.SplitSymbol(symbol)
	var fn *btf.Func
	if err := spec.TypeByName(name, &fn); err != nil {
		return nil, nil, fmt.Errorf("no function %s in the kernel's BTF: %w", name, err)
	}
	if off != 0 {
		return nil, nil, fmt.Errorf("%s: arguments are only known at the function's entry, not at +%d", symbol, off)
	}
	proto, ok := fn.Type.(*btf.FuncProto)
	if !ok {
		return nil, nil, fmt.Errorf("%s has no prototype in BTF", name)
	}
	return fn, proto, nil
}

// signature prints a prototype the C way, as ksnoop info does.
func signature(fn *btf.Func, proto *btf.FuncProto) string {
	var params []string
	for _, p := range proto.Params {
		params = append(params, cDecl(p.Type, p.Name))
	}
	return fmt.Sprintf("%s(%s);", cDecl(proto.Return, fn.Name), strings.Join(params, ", "))
}

func cDecl(t btf.Type, name string) string {
	tn := typeName(t)
	if strings.HasSuffix(tn, "*") {
		return tn + name
	}
	return tn + " " + name
}

// fetchType is the kprobe_events type of a value of t, "" if it has none.
func fetchType(t btf.Type) string {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Pointer:
		return "x64"
	case *btf.Int:
		s := "u"
		if u.Encoding&btf.Signed != 0 {
			s = "s"
		}
		if u.Size == 1 || u.Size == 2 || u.Size == 4 || u.Size == 8 {
			return fmt.Sprintf("%s%d", s, u.Size*8)
		}
	case *btf.Enum:
		if u.Size == 4 || u.Size == 8 {
			return fmt.Sprintf("u%d", u.Size*8)
		}
	}
	return ""
}

// kprobeTarget builds the compile target and the probe's fetch arguments.
func kprobeTarget(ev event, spec *btf.Spec, regs *asm.Regs) (Target, []string, map[string]bool, error) {
	_, proto, err := funcProto(spec, ev.symbol)
	if err != nil {
		return Target{}, nil, nil, err
	}
	t := Target{BTF: spec}
	var fetch []string
	pointers := map[string]bool{}
	if ev.kind == "kretprobe" {
		t.Args = []Arg{{Name: "ret", Type: proto.Return, RegOff: regs.Ret}}
		if ft := fetchType(proto.Return); ft != "" {
			fetch = append(fetch, "ret=$retval:"+ft)
			pointers["ret"] = ft == "x64"
		}
		return t, fetch, pointers, nil
	}
	for i, p := range proto.Params {
		if i >= len(regs.Args) {
			break // on the stack: not reachable from the registers
		}
		t.Args = append(t.Args, Arg{Name: p.Name, Type: p.Type, RegOff: regs.Args[i]})
		if ft := fetchType(p.Type); ft != "" && tracefs.ValidateName("argument", p.Name) == nil {
			fetch = append(fetch, fmt.Sprintf("%s=%%%s:%s", p.Name, regs.ArgNames[i], ft))
			pointers[p.Name] = ft == "x64"
		}
	}
	return t, fetch, pointers, nil
}

func info(s *tools.Session, ev event) error {
	if ev.kind == "tracepoint" {
		f, err := tracefs.ReadFormat(ev.group, ev.name)
		if err != nil {
			return err
		}
		fmt.Fprintf(s.Stdout, "%s\n", ev)
		for _, fl := range f.Fields {
			if fl.Common {
				continue
			}
			kind := "integer"
			switch {
			case fl.DataLoc:
				kind = "string"
			case fl.ArrayLen > 0 && strings.HasPrefix(fl.Type, "char"):
				kind = "string"
			case strings.Contains(fl.Type, "*"):
				kind = "pointer: cast it to walk it"
			case len(f.Symbolic[fl.Name]) > 0:
				names := f.Symbolic[fl.Name]
				kind = fmt.Sprintf("integer, or one of %d names", len(names))
				for _, v := range []uint64{3, 2, 1} {
					if n, ok := names[v]; ok {
						kind += fmt.Sprintf(" (%d is %q)", v, n)
						break
					}
				}
			}
			fmt.Fprintf(s.Stdout, "    %-28s %-10s offset %3d, size %2d, %s\n", fl.Type, fl.Name, fl.Offset, fl.Size, kind)
		}
		return nil
	}
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("read the kernel's BTF: %w (needs CONFIG_DEBUG_INFO_BTF)", err)
	}
	fn, proto, err := funcProto(spec, ev.symbol)
	if err != nil {
		return err
	}
	fmt.Fprintln(s.Stdout, signature(fn, proto))
	return nil
}

func run(ctx context.Context, s *tools.Session, o *options) error {
	ev, _ := parseEvent(o.Lead())
	if o.Info {
		return info(s, ev)
	}
	var root Node
	if o.Where != "" {
		root, _ = Parse(o.Where)
	}
	target := Target{Read: tools.Readers(), UserSpace: ev.group == "syscalls"}
	var fetch []string
	pointers := map[string]bool{}
	progType := ebpf.TracePoint
	if ev.kind == "tracepoint" {
		f, err := tracefs.ReadFormat(ev.group, ev.name)
		if err != nil {
			return err
		}
		target.Format = f
		if needsBTF(root) {
			if target.BTF, err = btf.LoadKernelSpec(); err != nil {
				return fmt.Errorf("read the kernel's BTF: %w (casts need CONFIG_DEBUG_INFO_BTF)", err)
			}
		}
	} else {
		if !tools.KprobesAvailable() {
			return fmt.Errorf("%s: %w; tracepoints (GROUP:NAME) work instead", ev, tools.ErrNoKprobes)
		}
		regs, err := asm.HostPtRegs()
		if err != nil {
			return fmt.Errorf("%s: %w", ev, err)
		}
		spec, err := btf.LoadKernelSpec()
		if err != nil {
			return fmt.Errorf("read the kernel's BTF: %w (kprobe arguments need CONFIG_DEBUG_INFO_BTF)", err)
		}
		t, f, ptrs, err := kprobeTarget(ev, spec, regs)
		if err != nil {
			return err
		}
		t.Read = target.Read
		target, fetch, pointers, progType = t, f, ptrs, ebpf.Kprobe
	}
	insns, err := Compile(o.Where, root, target, o.Count)
	if err != nil {
		var ee *ExprError
		if errors.As(err, &ee) {
			return tools.Usagef("--where: %v", err)
		}
		return err
	}
	spec := &ebpf.CollectionSpec{
		Maps: map[string]*ebpf.MapSpec{},
		Programs: map[string]*ebpf.ProgramSpec{
			"filter": {Name: "filter", Type: progType, License: "GPL", Instructions: insns},
		},
	}
	if o.Count {
		spec.Maps["count"] = &ebpf.MapSpec{Name: "filter_count", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	}
	coll, err := s.Load(spec)
	if err != nil {
		return err
	}
	if o.Count {
		return count(ctx, s, ev, coll)
	}
	return stream(ctx, s, ev, coll, target.Format, fetch, pointers)
}

// needsBTF reports whether an expression casts a field to a struct.
func needsBTF(n Node) bool {
	switch n := n.(type) {
	case *Or:
		return needsBTF(n.L) || needsBTF(n.R)
	case *And:
		return needsBTF(n.L) || needsBTF(n.R)
	case *Not:
		return needsBTF(n.X)
	case *Cmp:
		return n.Left.Cast != "" || n.Right.Cast != ""
	}
	return false
}

// probe is the kprobe or kretprobe of ev.
func (e event) probe() tracefs.Probe {
	return tracefs.Probe{Type: tracefs.Kprobe, Symbol: e.symbol, Ret: e.kind == "kretprobe"}
}

// count attaches the counting program and reports per interval.
func count(ctx context.Context, s *tools.Session, ev event, coll *ebpf.Collection) error {
	var err error
	if ev.kind == "tracepoint" {
		err = s.AttachTracepoint(coll.Programs["filter"], ev.group, ev.name)
	} else {
		err = s.AttachProbe(coll.Programs["filter"], ev.probe(), false)
	}
	if err != nil {
		return err
	}
	var d tools.Deltas
	d.Cumulative = s.Opts.Cumulative
	return s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		n, err := tools.ReadPerCPUCounter(coll.Maps["count"])
		if err != nil {
			return err
		}
		n = d.Counter(n)
		now := time.Now()
		if s.Opts.JSON {
			return s.WriteJSON(map[string]any{"tool": "filter", "time": tools.JSONTime(now), "event": ev.String(), "count": n})
		}
		var b strings.Builder
		s.BeginText(&b, now)
		fmt.Fprintf(&b, "%d events of %s passed\n", n, ev)
		_, err = fmt.Fprint(s.Stdout, b.String())
		return err
	})
}

// stream opens the rings, prints every passing event, and reports lost ones.
// format is a tracepoint's, read already; a probe's comes from its event.
func stream(ctx context.Context, s *tools.Session, ev event, coll *ebpf.Collection, format *tracefs.Format, fetch []string, pointers map[string]bool) error {
	var id uint64
	var err error
	if ev.kind == "tracepoint" {
		if id, err = tracefs.EventID(ev.group, ev.name); err != nil {
			return err
		}
	} else {
		// A probe event in tracefs, not the PMU: its records carry the
		// fetch arguments, and perf events on every CPU can share it.
		p := ev.probe()
		p.Args = fetch
		pe, err := s.ProbeEvent(p)
		if err != nil {
			return err
		}
		id = pe.ID()
		if format, err = pe.Format(); err != nil {
			return err
		}
	}
	rings, err := s.OpenRings(coll.Programs["filter"], ev.String(), id)
	if err != nil {
		return err
	}
	p := &printer{s: s, ev: ev, format: format, pointers: pointers, comms: map[uint32]string{}}
	rings.OnComm = func(pid uint32, comm string) { p.comms[pid] = comm }
	var mu sync.Mutex
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if ok, _ := rings.Poll(100); ok {
				mu.Lock()
				rings.Read(p.print)
				err := p.err
				mu.Unlock()
				if err != nil {
					s.Stop(err) // a closed stdout, at once
					return
				}
			}
		}
	}()
	err = s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		mu.Lock()
		defer mu.Unlock()
		rings.Read(p.print)
		if final && rings.Lost > 0 {
			fmt.Fprintf(s.Stderr, "filter: %d events lost: a ring buffer was full (a stricter --where, or --count, keeps up)\n", rings.Lost)
		}
		return p.err
	})
	close(done)
	wg.Wait()
	return err
}

// printer decodes and prints records.
type printer struct {
	s        *tools.Session
	ev       event
	format   *tracefs.Format
	pointers map[string]bool
	comms    map[uint32]string
	err      error
}

func (p *printer) comm(pid uint32) string {
	if c, ok := p.comms[pid]; ok {
		return c
	}
	c := tools.Comm(pid)
	if c == "" {
		c = "<...>"
	}
	p.comms[pid] = c
	return c
}

// fieldValue decodes a field of a raw record: a number, a string or "".
func fieldValue(f tracefs.Field, raw []byte, pointer bool) (any, string) {
	if f.Offset+f.Size > len(raw) {
		return nil, ""
	}
	b := raw[f.Offset : f.Offset+f.Size]
	switch {
	case f.DataLoc:
		loc := binary.LittleEndian.Uint32(b)
		off, n := int(loc&0xffff), int(loc>>16)
		if off+n > len(raw) {
			return nil, ""
		}
		str := strings.TrimRight(string(raw[off:off+n]), "\x00")
		return str, str
	case f.ArrayLen > 0 && strings.HasPrefix(f.Type, "char"):
		str := string(b)
		if i := strings.IndexByte(str, 0); i >= 0 {
			str = str[:i]
		}
		return str, str
	case f.ArrayLen > 0 || f.Size > 8:
		return nil, ""
	}
	size, signed := f.Value()
	var u uint64
	switch size {
	case 1:
		u = uint64(b[0])
	case 2:
		u = uint64(binary.LittleEndian.Uint16(b))
	case 4:
		u = uint64(binary.LittleEndian.Uint32(b))
	case 8:
		u = binary.LittleEndian.Uint64(b)
	}
	if pointer || strings.Contains(f.Type, "*") {
		return fmt.Sprintf("0x%x", u), fmt.Sprintf("0x%x", u)
	}
	if signed {
		shift := 64 - 8*size
		v := int64(u<<shift) >> shift
		return v, strconv.FormatInt(v, 10)
	}
	return u, strconv.FormatUint(u, 10)
}

func (p *printer) print(smp tools.Sample) {
	if p.err != nil {
		return
	}
	name := p.ev.name
	if p.ev.kind != "tracepoint" {
		name = p.ev.symbol
	}
	secs := float64(smp.Time) / 1e9
	if p.s.Opts.JSON {
		fields := map[string]any{}
		for _, f := range p.format.Fields {
			if f.Common || strings.HasPrefix(f.Name, "__probe") {
				continue
			}
			if v, _ := fieldValue(f, smp.Raw, p.pointers[f.Name]); v != nil {
				fields[f.Name] = v
			}
		}
		p.err = p.s.WriteJSON(map[string]any{"tool": "filter", "event": p.ev.String(), "comm": p.comm(smp.Pid),
			"pid": smp.Pid, "tid": smp.Tid, "cpu": smp.CPU, "ts": secs, "fields": fields})
		return
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%16s-%-7d [%03d] %.6f: %s:", p.comm(smp.Pid), smp.Tid, smp.CPU, secs, name)
	for _, f := range p.format.Fields {
		if f.Common || strings.HasPrefix(f.Name, "__probe") {
			continue
		}
		if _, text := fieldValue(f, smp.Raw, p.pointers[f.Name]); text != "" || f.DataLoc {
			fmt.Fprintf(&b, " %s=%s", f.Name, text)
		}
	}
	b.WriteByte('\n')
	_, p.err = fmt.Fprint(p.s.Stdout, b.String())
}
