package filter

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/filter/compile"
	"github.com/tracekit/tracekit/perfevent"
	"github.com/tracekit/tracekit/procfs"
	"github.com/tracekit/tracekit/run"
	"github.com/tracekit/tracekit/stacks"
	"github.com/tracekit/tracekit/terminal"
	"github.com/tracekit/tracekit/tracefs"
)

// streamKept prints the records the kernel keeps when the program returns
// 1. format is a tracepoint's, read already; a probe's comes from its
// event.
func streamKept(ctx context.Context, s *run.Session, ev event, coll *ebpf.Collection, format *tracefs.Format, fetch []string, pointers map[string]bool, pages int) error {
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
	rings, err := s.OpenRings(coll.Programs["filter"], ev.String(), id, pages, perfevent.WakeBatch)
	if err != nil {
		return err
	}
	return stream(ctx, s, ev, rings, format, pointers, nil)
}

// recordFormat describes the records a program emits as a format file
// would: integers as 8-byte longs (pointers as void *), strings as char
// arrays.
func recordFormat(ev event, prog *compile.Program) *tracefs.Format {
	f := &tracefs.Format{Name: ev.String(), Symbolic: map[string]map[uint64]string{}}
	for _, c := range prog.Columns {
		if len(c.Symbols) > 0 && c.Name != "func" && c.Name != "probe" {
			f.Symbolic[c.Name] = c.Symbols // an enum's names
		}
		fl := tracefs.Field{Name: c.Name, Offset: c.Offset, Size: c.Size, Signed: c.Signed, Type: "unsigned long"}
		switch {
		case c.Frames:
			fl.Type, fl.ArrayLen = stackType, c.Size/8
		case c.Usym:
			fl.Type = usymType
		case c.String:
			fl.Type, fl.ArrayLen = "char", c.Size
		case c.Pointer:
			fl.Type = "void *"
		case c.Signed:
			fl.Type = "long"
		}
		f.Fields = append(f.Fields, fl)
	}
	return f
}

// stackType is the type of a record's kstack field (compile.Column.Frames).
const stackType = "kstack"

// usymType is the type of a record's usym() field: an address, then the
// pid of its process (compile.Column.Usym).
const usymType = "usym"

// userName is a usym() value's text: its function's name, else the
// address in hex.
func userName(raw []byte) string { return stacks.UsymText(raw) }

// recordFrames are the frames of a kstack field, innermost first.
func recordFrames(f tracefs.Field, raw []byte) []string {
	if f.Offset+f.Size > len(raw) {
		return nil
	}
	pcs := make([]uint64, f.ArrayLen)
	for i := range pcs {
		pcs[i] = binary.LittleEndian.Uint64(raw[f.Offset+8*i:])
	}
	if frames := kernelFrames(pcs); len(frames) > 0 {
		return frames
	}
	// bpf_get_stack zeroes the whole room when it fails: a syscall's
	// tracepoint through perf on 5.10 has the user's registers.
	return []string{"[no kernel stack]"}
}

// stream prints every record of the rings as format lays it out, and
// reports lost ones.
//
// funcs, for a run over several functions (kprobe:GLOB), names the
// function of a record's func field: it names the line, as a single
// event's name does.
func stream(ctx context.Context, s *run.Session, ev event, rings *perfevent.Rings, format *tracefs.Format, pointers map[string]bool, funcs map[uint64]string) error {
	// One write per batch of records, not per record.
	p := &printer{s: s, ev: ev, format: format, pointers: pointers, funcs: funcs, comms: map[uint32]string{}, out: bufio.NewWriterSize(s.Stdout, 64<<10)}
	if err := rings.FollowNames(p.remember); err != nil {
		return err
	}
	var mu sync.Mutex
	// The rings wake us a quarter full; the tick shows a trickle of
	// records within 100 ms. A closed stdout ends the run at once.
	stop, err := rings.Drain(100*time.Millisecond, func() error {
		mu.Lock()
		defer mu.Unlock()
		rings.ReadInOrder(p.print)
		p.flush()
		return p.err
	}, s.Stop)
	if err != nil {
		return err
	}
	err = s.Loop(ctx, "events of "+ev.String(), func(final bool) error {
		mu.Lock()
		defer mu.Unlock()
		rings.ReadInOrder(p.print)
		p.flush()
		if lost, exact := rings.LostEvents(); final && lost > 0 {
			atLeast := ""
			if !exact {
				// Before 6.0 a loss is reported with the next event that
				// fits a ring: the last moments' may not be yet.
				atLeast = "at least "
			}
			fmt.Fprintf(s.Stderr, "filter: %s%d events lost: a ring buffer was full (a stricter --where, --count or a larger --ring-pages keeps up)\n", atLeast, lost)
		}
		return p.err
	})
	stop()
	return err
}

// printer decodes and prints records.
type printer struct {
	s        *run.Session
	ev       event
	format   *tracefs.Format
	funcs    map[uint64]string // the func field's names (kprobe:GLOB)
	pointers map[string]bool
	comms    map[uint32]string
	syms     *procfs.Symbols // the kernel's, read at the first textFields value
	symsRead bool
	out      *bufio.Writer
	line     []byte // the text line being built, reused
	err      error
	// stacks: the stacks printed with the next record (--fields ustack),
	// each under its line as a kstack field's, and in --json a list.
	stacks []namedStack
}

// namedStack is a stack printed beside a record's fields.
type namedStack struct {
	name   string
	frames []string
}

// flush writes out what the last batch printed.
func (p *printer) flush() {
	if p.err == nil {
		p.err = p.out.Flush()
	}
}

// maxComms bounds the names the printer remembers: a run that sees
// millions of short-lived processes starts over, and reads /proc again.
const maxComms = 1 << 15

func (p *printer) comm(pid uint32) string {
	if pid == 0 {
		return "<idle>" // as trace_pipe names the idle task
	}
	if c, ok := p.comms[pid]; ok {
		return c
	}
	c := procfs.Comm(pid)
	if c == "" {
		c = "<...>"
	}
	p.remember(pid, c)
	return c
}

// remember notes pid's name, within maxComms.
func (p *printer) remember(pid uint32, comm string) {
	if len(p.comms) >= maxComms {
		clear(p.comms)
	}
	p.comms[pid] = comm
}

// gone is the pid and tid the kernel gives a sample of a task it has
// already released (a thread's last events as it exits): -1.
const gone = ^uint32(0)

// ids are a sample's process and thread, as the sample gives them; for a
// released thread, the record's common_pid, as trace_pipe shows it. A
// process the kernel no longer knows is unknown (ok false): the thread's
// id stands in for it where a name is looked up.
func (p *printer) ids(smp perfevent.Sample) (pid, tid uint32, ok bool) {
	pid, tid = smp.Pid, smp.Tid
	if tid == gone {
		if f, found := p.format.Field("common_pid"); found && f.Offset+4 <= len(smp.Raw) {
			tid = binary.LittleEndian.Uint32(smp.Raw[f.Offset:])
		}
	}
	if pid == gone {
		return tid, tid, false
	}
	return pid, tid, true
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
		str := unix.ByteSliceToString(raw[off : off+n])
		return str, str
	case f.ArrayLen > 0 && strings.HasPrefix(f.Type, "char"):
		str := unix.ByteSliceToString(b)
		return str, str
	case f.ArrayLen > 0 || f.Size > 8:
		return nil, ""
	}
	u, size, signed := intField(f, b)
	if pointer || strings.Contains(f.Type, "*") {
		return fmt.Sprintf("0x%x", u), fmt.Sprintf("0x%x", u)
	}
	if signed {
		v := signExtend(u, size)
		return v, strconv.FormatInt(v, 10)
	}
	return u, strconv.FormatUint(u, 10)
}

// intField reads an integer field's bytes as its C type lays them out:
// the value zero-extended, its size, and whether the type is signed.
func intField(f tracefs.Field, b []byte) (u uint64, size int, signed bool) {
	size, signed = f.Value()
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
	return u, size, signed
}

// signExtend is the signed value of size bytes held zero-extended in u.
func signExtend(u uint64, size int) int64 {
	shift := 64 - 8*size
	return int64(u<<shift) >> shift
}

func (p *printer) print(smp perfevent.Sample) {
	if p.err != nil {
		return
	}
	name, event := p.ev.shortName(), p.ev.String()
	if p.funcs != nil {
		f, ok := p.format.Field("func")
		if !ok {
			f, ok = p.format.Field("probe")
		}
		if ok && f.Offset+8 <= len(smp.Raw) {
			name = p.funcs[binary.LittleEndian.Uint64(smp.Raw[f.Offset:])]
			event = name
			if p.ev.kind == "kprobe" {
				event = "kprobe:" + name
			}
		}
	}
	secs := float64(smp.Time) / 1e9
	if p.s.Opts.JSON {
		fields := map[string]any{}
		for _, f := range p.format.Fields {
			if f.Common || strings.HasPrefix(f.Name, "__probe") {
				continue
			}
			if p.funcs != nil && (f.Name == "func" || f.Name == "probe") {
				fields[f.Name] = name
				continue
			}
			if f.Type == stackType {
				fields[f.Name] = recordFrames(f, smp.Raw)
				continue
			}
			if f.Type == usymType && f.Offset+16 <= len(smp.Raw) {
				fields[f.Name] = userName(smp.Raw[f.Offset:])
				continue
			}
			if f.ArrayLen == 0 && f.Size <= 8 && f.Offset+f.Size <= len(smp.Raw) {
				if name := p.named(f, smp.Raw[f.Offset:f.Offset+f.Size]); name != "" {
					fields[f.Name] = name
					continue
				}
			}
			if v, _ := fieldValue(f, smp.Raw, p.pointers[f.Name]); v != nil {
				fields[f.Name] = v
			}
		}
		for _, st := range p.stacks {
			fields[st.name] = st.frames
		}
		pid, tid, known := p.ids(smp)
		var jpid any = pid
		if !known {
			jpid = nil // released: its process is no longer known
		}
		b, err := json.Marshal(map[string]any{"tool": "filter", "event": event, "comm": p.comm(pid),
			"pid": jpid, "tid": tid, "cpu": smp.CPU, "ts": secs, "fields": fields})
		if err != nil {
			p.err = fmt.Errorf("encode event: %w", err)
			return
		}
		p.out.Write(b)
		p.out.WriteByte('\n')
		return
	}
	// The line is built in one reused buffer, without fmt: at a hundred
	// thousand events a second, the reader's allocations were what fell
	// behind. Names and strings come from processes: escaped, they cannot
	// forge lines or drive the terminal.
	pid, tid, _ := p.ids(smp)
	b := p.line[:0]
	b = padLeft(b, terminal.Printable(p.comm(pid)), 16) // "%16s-%-7d [%03d] %.6f: %s:"
	b = append(b, '-')
	start := len(b)
	b = strconv.AppendUint(b, uint64(tid), 10)
	for len(b)-start < 7 {
		b = append(b, ' ')
	}
	b = append(b, " ["...)
	for w := uint32(100); w > 1 && smp.CPU < w; w /= 10 {
		b = append(b, '0')
	}
	b = strconv.AppendUint(b, uint64(smp.CPU), 10)
	b = append(b, "] "...)
	b = strconv.AppendFloat(b, secs, 'f', 6, 64)
	b = append(b, ": "...)
	b = append(b, name...)
	b = append(b, ':')
	for _, f := range p.format.Fields {
		if f.Common || strings.HasPrefix(f.Name, "__probe") || (p.funcs != nil && (f.Name == "func" || f.Name == "probe")) {
			continue
		}
		b = p.appendField(b, f, smp.Raw)
	}
	b = append(b, '\n')
	frames := func(fs []string) {
		// Under the line, as bpftrace prints a stack: innermost first.
		for _, fr := range fs {
			b = append(append(append(b, "    "...), terminal.Printable(fr)...), '\n')
		}
	}
	for _, f := range p.format.Fields {
		if f.Type == stackType {
			frames(recordFrames(f, smp.Raw))
		}
	}
	for i, st := range p.stacks {
		if i > 0 {
			b = append(b, "    --\n"...) // between two stacks, as profile parts them
		}
		frames(st.frames)
	}
	p.line = b
	p.out.Write(b)
}

// appendField appends " NAME=TEXT" for a field with a value: every number,
// a string unless empty (a __data_loc string even then).
func (p *printer) appendField(b []byte, f tracefs.Field, raw []byte) []byte {
	if f.Offset+f.Size > len(raw) {
		return b
	}
	v := raw[f.Offset : f.Offset+f.Size]
	var str string
	switch {
	case f.Type == usymType:
		return append(append(append(append(b, ' '), f.Name...), '='), terminal.Printable(userName(v))...)
	case f.DataLoc:
		loc := binary.LittleEndian.Uint32(v)
		if off, n := int(loc&0xffff), int(loc>>16); off+n <= len(raw) {
			str = unix.ByteSliceToString(raw[off : off+n])
		}
	case f.ArrayLen > 0 && strings.HasPrefix(f.Type, "char"):
		str = unix.ByteSliceToString(v)
	case f.ArrayLen > 0 || f.Size > 8:
		return b
	default:
		b = append(append(append(b, ' '), f.Name...), '=')
		if name := p.named(f, v); name != "" {
			return append(b, terminal.Printable(name)...)
		}
		u, size, signed := intField(f, v)
		switch {
		case p.pointers[f.Name] || strings.Contains(f.Type, "*"):
			return strconv.AppendUint(append(b, "0x"...), u, 16)
		case signed:
			return strconv.AppendInt(b, signExtend(u, size), 10)
		}
		return strconv.AppendUint(b, u, 10)
	}
	b = append(append(append(b, ' '), f.Name...), '=')
	if str == "" {
		return append(b, `""`...) // empty, not missing
	}
	return append(b, terminal.Printable(str)...)
}

// named is an integer field's name for its value, "" when it has none: an
// enum's (the format's __print_symbolic table, or BTF's for a column of
// filter's own), or a kernel code address's symbol+0xoff for the fields
// that hold one (textFields) and the columns ksym() names.
func (p *printer) named(f tracefs.Field, v []byte) string {
	u, _, _ := intField(f, v)
	if names := p.format.Symbolic[f.Name]; names != nil {
		return names[u]
	}
	// A kernel address: in the top half on a 64-bit kernel; 32-bit ARM's
	// (4 bytes) are named if kallsyms has a symbol below them.
	kernel := f.Size == 8 && u >= 1<<63 || f.Size == 4
	if !textFields[f.Name] && !strings.HasPrefix(f.Name, "ksym(") || !kernel {
		return ""
	}
	if !p.symsRead {
		p.symsRead = true
		p.syms = kernelSyms() // without it (hidden, unreadable) the number stays
	}
	return p.syms.Symbolize(u)
}

// textFields are the tracepoint fields that hold an address in the
// kernel's code, printed by symbol: where a packet was dropped or freed
// (skb:kfree_skb, skb:consume_skb's location), what allocated or freed
// memory (kmem's call_site).
var textFields = map[string]bool{"location": true, "call_site": true}

// padLeft appends s right-aligned in width runes, as fmt's %Ns does.
func padLeft(b []byte, s string, width int) []byte {
	for n := utf8.RuneCountInString(s); n < width; n++ {
		b = append(b, ' ')
	}
	return append(b, s...)
}
