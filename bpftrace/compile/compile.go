// Package compile turns a checked bpftrace program into BPF programs
// built with our assembler: one program per tracepoint a probe names,
// sharing the maps. Statements run in order with C's rules; each
// expression is evaluated into R0 (integers) or into a stack buffer
// (strings), with what a helper call would clobber spilled to the stack.
// BEGIN and END run in user space, where bpftrace's async actions
// (printf, print, clear, zero, time, exit) land anyway.
//
// What it does not take yet it refuses with the node's place, before
// anything loads (see docs/design/bpftrace.md for the list).
package compile

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/bpftrace/output"
	"github.com/tracekit/tracekit/bpftrace/parse"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

// Target is one place a probe's program runs: a tracepoint with its
// record's layout, or a kernel or user function's entry or return.
type Target struct {
	Provider string // tracepoint, kprobe, kretprobe, uprobe, uretprobe
	// A tracepoint's group and name, and its record's layout.
	Group, Name string
	Format      *tracefs.Format
	// A kprobe's or uprobe's function (func's value) and where the probe
	// goes (its Path is a uprobe's file).
	Func  string
	Probe tracefs.Probe
	// A perf event's type and config (profile's CPU clock, software's and
	// hardware's events) and its sample period, on every CPU; Raw is the
	// attach point as written, the probe builtin's value.
	PerfType, PerfConfig uint32
	Period               uint64
	Raw                  string
	// USDT is a usdt probe's site (Func is its provider:name).
	USDT *USDTSite
}

// USDTSite is one site of a USDT probe: its link-time address and its
// arguments' specs.
type USDTSite struct {
	Addr uint64
	Args []uprobe.Arg
}

// ProbeName is the probe builtin's value: "tracepoint:sched:sched_switch",
// "kprobe:vfs_read", "uprobe:/bin/bash:readline".
func (t *Target) ProbeName() string {
	switch t.Provider {
	case "tracepoint":
		return "tracepoint:" + t.Group + ":" + t.Name
	case "uprobe", "uretprobe", "usdt":
		return t.Provider + ":" + t.Probe.Path + ":" + t.Func
	case "profile", "software", "hardware", "interval":
		return t.Raw
	}
	return t.Provider + ":" + t.Func
}

// user says whether the target's pointers are user addresses: a
// syscall's arguments, a user function's.
func (t *Target) user() bool {
	return t.Group == userEventGroup || t.Provider == "uprobe" || t.Provider == "uretprobe" || t.Provider == "usdt"
}

// Options are what the compiler needs from the kernel and the command
// line.
type Options struct {
	File string // for messages
	// Resolve lists the targets an attach point names (its globs
	// expanded): tracepoints with their formats, functions.
	Resolve func(ap *parse.AttachPoint) ([]Target, error)
	// Readers are the kernel's reading helpers, asked for at the first
	// read compiled (kernel.Readers probes the kernel for them: a
	// program without a read does not pay it).
	Readers func() asm.Readers
	// Regs locates the arguments and the return value in the registers a
	// kprobe or uprobe program gets.
	Regs   *asm.Regs
	Pid    uint32   // -p: only this process's events (0: all)
	CPid   uint32   // -c's process, the cpid builtin (0: no -c)
	Params []string // $1, $2, ...
	// Start is when the run began on the kernel's monotonic clock (what
	// nsecs reads), for elapsed.
	Start uint64
	// Const is an enumerator of the kernel's (from its BTF), for a bare
	// name that is no builtin and no header's macro (Macros); nil: none.
	Const func(name string) (int64, bool)
	// Types are the kernel's, for casts and -> walks (nil: none).
	Types Types
	// Kaddr is a kernel symbol's address, for kaddr("name") (nil: none).
	Kaddr func(name string) (uint64, bool)
}

// Attach is one program and where it goes.
type Attach struct {
	Program string
	Target  Target
}

// Key is one element of a map's key, or one printf argument: an integer
// (8 bytes) or a string of Size bytes; an integer that is a kernel
// stack's id in Stack (kstack: its frames, printed), or a kernel address
// printed as its symbol (ksym).
type Key struct {
	Str   bool
	Size  int
	Stack string // the STACK_TRACE map of a kstack's id
	Ksym  bool
	Inet  bool // ntop's: the family in 8 bytes, then 16 of address
	Usym  bool // usym()'s: the address, then the process's id (8 bytes each)
	// Ustack is ustack's, of at most Frames frames: no bytes in a
	// record, the stack pipeline's frames (see ustack.go).
	Ustack bool
	Frames int
	Buf    bool // buf()'s: its length in a byte, then from byte 8 its bytes
	// Strftime is strftime()'s format: the 8 bytes are nanoseconds
	// since boot, printed as the wall-clock time they were.
	Strftime string
}

// Map is a map of the script as the kernel holds it.
type Map struct {
	Name string // "@x", "@"
	Kind output.Kind
	// Unsigned: an integer's or a sum's value prints as unsigned, as
	// bpftrace prints a value of an unsigned type (the sum of a uprobe's
	// arguments, @start = nsecs): the type of its first assignment.
	Unsigned       bool
	Keys           []Key
	Min, Max, Step int64 // lhist's
	BPFName        string
	PerCPU         bool
	StrSize        int // a string value's size
	// User: the map has ustack keys and is held in user space, which
	// aggregates the records the stack pipeline sends (see ustack.go);
	// it has no kernel map.
	User bool
}

// KeySize is the bytes of the kernel map's key: the keys, 8 for a map
// without, and hist's and lhist's bucket after them.
func (m *Map) KeySize() int {
	n := 0
	for _, k := range m.Keys {
		n += k.Size
	}
	if n == 0 {
		n = 8
	}
	if m.Kind == output.Hist || m.Kind == output.Lhist {
		n += 8
	}
	return n
}

// ValueSize is the bytes of the kernel map's value.
func (m *Map) ValueSize() int {
	switch m.Kind {
	case output.Min, output.Max, output.Avg, output.Stats:
		return 16 // {value, set} or {count, total}
	case output.Str:
		return m.StrSize
	}
	return 8
}

// Buckets is how many buckets a hist or lhist has.
func (m *Map) Buckets() int {
	if m.Kind == output.Lhist {
		return int((m.Max-m.Min)/m.Step) + 2
	}
	return 66 // negative, zero, then [2^k, 2^(k+1)) for k in 0..63
}

// Printf is one printf (or exit, or time) of the programs: its format
// and the layout of the record after the 8-byte id.
type Printf struct {
	Format string
	Args   []Key
	Exit   bool
	Time   bool // time(Format): the time it arrives, by strftime
	// Join is join(array, Format): JoinArgs strings of JoinArgSize bytes
	// each, from the JoinMap's buffer, up to the first empty one.
	Join bool
	// Cat is cat(Format, args...): the file Format and args name, read
	// and printed as it is when the record comes (at most CatBytes).
	Cat bool
	// System is system(Format, args...): the command, run by /bin/sh
	// when the record comes, its output printed (--unsafe).
	System bool
	// MapOp is print, clear or zero of the whole map Map in a kernel
	// probe, which user space does when the record comes, as bpftrace
	// does it (print's Top and Div: 0, none).
	MapOp    string
	Map      string
	Top, Div uint64
}

// CatBytes is the most cat() prints of a file, as bpftrace's
// BPFTRACE_CAT_BYTES_MAX default.
const CatBytes = 10240

// Interval is an interval probe run in user space, every Every, Body:
// one that only prints, clears and zeroes maps and exits. The others are
// programs on one CPU's clock (a Target of Provider "interval").
type Interval struct {
	Every time.Duration
	Body  []parse.Stmt
}

// Result is the compiled program.
type Result struct {
	Spec    *ebpf.CollectionSpec
	Attach  []Attach
	Maps    []*Map // by name
	Printfs []Printf
	// Begin and End are BEGIN's and END's statements, for user space.
	Begin, End [][]parse.Stmt
	Intervals  []Interval
	// Ustack is the probe with user stacks, the stack pipeline's gate
	// (nil: none).
	Ustack *Ustack
}

// Map is the map named name ("@x"), or nil.
func (r *Result) Map(name string) *Map {
	for _, m := range r.Maps {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// Names of the kernel maps besides the script's.
const (
	EventsMap = "events" // printf and exit records, a PERF_EVENT_ARRAY
	JoinMap   = "join"   // join()'s record, too big for the stack: a per-CPU array
	// join() reads the first JoinArgs strings of an array (bpftrace's
	// 16), each up to JoinArgSize bytes with its NUL.
	JoinArgs    = 16
	JoinArgSize = 256
	LostMap     = "lost" // slot 0: map updates a full map refused
	// MapEntries is each map's bound, bpftrace's default
	// (BPFTRACE_MAP_KEYS_MAX); a hist's buckets are entries of their own.
	MapEntries     = 4096
	HistEntries    = 65536
	StrSize        = 64 // str()'s buffer, bpftrace's default strlen
	BufSize        = 64 // the most buf() reads, bpftrace's default strlen
	maxStack       = 512
	stackAlign     = 8
	userEventGroup = "syscalls" // whose pointers are user addresses
)

// Error is a refusal at a place of the script.
func errAt(file string, at parse.Pos, format string, args ...any) error {
	return &parse.Error{File: file, Pos: at, Msg: fmt.Sprintf(format, args...)}
}

type compiler struct {
	opt       Options
	stackMaps map[string]int // kstack's STACK_TRACE maps, by name, with their depth
	maps      map[string]*Map
	printfs   []Printf
	res       *Result
}

// Compile compiles prog, already checked (check.Check).
func Compile(prog *parse.Program, opt Options) (*Result, error) {
	c := &compiler{opt: opt, maps: map[string]*Map{}, res: &Result{}, stackMaps: map[string]int{}}
	type probeTargets struct {
		probe *parse.Probe
		tps   []Target
		vars  []map[string]typ // per target: its variables' types
		// ustack is the statement that keeps user stacks (nil: none):
		// the probe is the stack pipeline's gate, not a program.
		ustack parse.Stmt
	}
	var probes []probeTargets
	var user [][]parse.Stmt // what user space runs, for the typer
	for _, pr := range prog.Probes {
		var tps []Target
		begin, end := false, false
		var every time.Duration
		for _, ap := range pr.Points {
			switch ap.Provider {
			case "BEGIN":
				begin = true
			case "END":
				end = true
			case "interval":
				n, _ := strconv.ParseUint(ap.Parts[1], 10, 32) // check took it
				unit := map[string]time.Duration{"s": time.Second, "ms": time.Millisecond, "us": time.Microsecond}[ap.Parts[0]]
				if unit == 0 || time.Duration(n)*unit < time.Millisecond {
					return nil, errAt(opt.File, ap.Pos, "interval probes run every 1 ms or more here (interval:s:N, interval:ms:N)")
				}
				every = time.Duration(n) * unit
			case "tracepoint", "kprobe", "kretprobe", "uprobe", "uretprobe", "usdt", "profile", "software", "hardware":
				got, err := opt.Resolve(ap)
				if err != nil {
					return nil, err
				}
				tps = append(tps, got...)
			default:
				return nil, errAt(opt.File, ap.Pos, "%s probes are not taken yet: BEGIN, END, interval, tracepoint, kprobe, kretprobe, uprobe, uretprobe, usdt, profile, software and hardware are", ap.Provider)
			}
		}
		if every > 0 && len(pr.Points) == 1 && (pr.Pred != nil || userStmts(opt.File, pr.Body, false) != nil) {
			// An interval that reads the kernel or keeps state: a program
			// on one CPU's clock, as bpftrace runs every interval.
			ap := pr.Points[0]
			tps = append(tps, Target{Provider: "interval", Raw: ap.Raw, PerfType: unix.PERF_TYPE_SOFTWARE, PerfConfig: unix.PERF_COUNT_SW_CPU_CLOCK, Period: uint64(every)})
			every = 0
		}
		if begin || end || every > 0 {
			if len(pr.Points) > 1 {
				return nil, errAt(opt.File, pr.Pos, "BEGIN, END and interval go alone on a probe here")
			}
			if pr.Pred != nil {
				return nil, errAt(opt.File, pr.Pred.ExprPos(), "a predicate on BEGIN, END or interval is not taken yet")
			}
			if err := userStmts(opt.File, pr.Body, begin); err != nil {
				return nil, err
			}
			switch {
			case begin:
				c.res.Begin = append(c.res.Begin, pr.Body)
			case end:
				c.res.End = append(c.res.End, pr.Body)
			default:
				c.res.Intervals = append(c.res.Intervals, Interval{every, pr.Body})
			}
			user = append(user, pr.Body)
			continue
		}
		last, err := ustackUse(opt.File, pr)
		if err != nil {
			return nil, err
		}
		probes = append(probes, probeTargets{probe: pr, tps: tps, ustack: last})
	}
	// The maps' kinds and keys first: a map read in one probe may be
	// assigned in a later one, or in BEGIN.
	for _, body := range user {
		if err := (&typer{c: c}).stmts(body); err != nil {
			return nil, err
		}
	}
	// Each target of a probe: its fields may differ (a glob), and a
	// variable's slot holds the longest value any assignment gives it.
	for i := range probes {
		p := &probes[i]
		tps := p.tps
		if len(tps) == 0 {
			// Every attach point skipped (a uprobe's function missing):
			// its maps are typed all the same, for the probes that read
			// them.
			tps = []Target{{Provider: p.probe.Points[0].Provider}}
		}
		for j := range tps {
			ty := &typer{c: c, tp: &tps[j]}
			if err := ty.stmts(p.probe.Body); err != nil {
				return nil, err
			}
			if p.probe.Pred != nil {
				if _, err := ty.expr(p.probe.Pred); err != nil {
					return nil, err
				}
			}
			p.vars = append(p.vars, ty.vars)
		}
	}
	// Maps only read, never assigned in a probe (assigned in BEGIN is
	// refused above), are refused by check; those assigned are typed.
	spec := &ebpf.CollectionSpec{Maps: map[string]*ebpf.MapSpec{}, Programs: map[string]*ebpf.ProgramSpec{}}
	names := make([]string, 0, len(c.maps))
	for name := range c.maps {
		names = append(names, name)
	}
	sort.Strings(names)
	// perf_event programs (profile, software, hardware, interval) take only
	// preallocated hashes before 5.11 or so (5.10's verifier: "perf_event
	// programs can only use preallocated hash map"): then every map is.
	flags := uint32(1) // BPF_F_NO_PREALLOC
	for _, p := range probes {
		for _, t := range p.tps {
			if slices.Contains([]string{"profile", "software", "hardware", "interval"}, t.Provider) {
				flags = 0
			}
		}
	}
	// The ustack statement's map is held in user space.
	var all []*parse.Probe
	var with *probeTargets
	for i, p := range probes {
		all = append(all, p.probe)
		if p.ustack == nil {
			continue
		}
		if with != nil {
			return nil, errAt(opt.File, p.probe.Pos, "ustack is taken in one probe of a program here")
		}
		with = &probes[i]
	}
	if with != nil {
		if a, ok := with.ustack.(*parse.Assign); ok {
			c.maps["@"+a.Target.(*parse.Map).Name].User = true
		}
		if err := c.userHeld(opt.File, all, with.ustack); err != nil {
			return nil, err
		}
	}
	for i, name := range names {
		m := c.maps[name]
		m.BPFName = fmt.Sprintf("m%d", i)
		if m.User {
			c.res.Maps = append(c.res.Maps, m)
			continue
		}
		typ, entries := ebpf.Hash, uint32(MapEntries)
		if m.PerCPU {
			typ = ebpf.PerCPUHash
		}
		if m.Kind == output.Hist || m.Kind == output.Lhist {
			entries = HistEntries
		}
		spec.Maps[m.BPFName] = &ebpf.MapSpec{Name: m.BPFName, Type: typ, KeySize: uint32(m.KeySize()), ValueSize: uint32(m.ValueSize()), MaxEntries: entries, Flags: flags}
		c.res.Maps = append(c.res.Maps, m)
	}
	spec.Maps[LostMap] = &ebpf.MapSpec{Name: LostMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: 1}
	spec.Maps[EventsMap] = &ebpf.MapSpec{Name: EventsMap, Type: ebpf.PerfEventArray}
	for name, depth := range c.stackMaps {
		spec.Maps[name] = &ebpf.MapSpec{Name: name, Type: ebpf.StackTrace, KeySize: 4, ValueSize: uint32(8 * depth), MaxEntries: MapEntries}
	}
	spec.Maps[JoinMap] = &ebpf.MapSpec{Name: JoinMap, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8 + JoinArgs*JoinArgSize, MaxEntries: 1}
	n := 0
	for _, p := range probes {
		if p.ustack != nil {
			if len(p.tps) == 0 {
				continue // every attach point skipped
			}
			if err := c.ustackProbe(p.probe, p.ustack, p.tps, p.vars); err != nil {
				return nil, err
			}
			continue
		}
		for i := range p.tps {
			tp := &p.tps[i]
			name := fmt.Sprintf("p%d", n)
			n++
			insns, err := c.program(p.probe, tp, p.vars[i])
			if err != nil {
				return nil, err
			}
			typ := ebpf.Kprobe // and uprobes
			switch tp.Provider {
			case "tracepoint":
				typ = ebpf.TracePoint
			case "profile", "software", "hardware", "interval":
				typ = ebpf.PerfEvent
			}
			spec.Programs[name] = &ebpf.ProgramSpec{Name: name, Type: typ, License: "GPL", Instructions: insns}
			c.res.Attach = append(c.res.Attach, Attach{Program: name, Target: *tp})
		}
	}
	// A kstack in the ustack statement is the stack pipeline's: its
	// STACK_TRACE map (megabytes of kernel memory) is made only where a
	// program reads a stack into it.
	for name := range c.stackMaps {
		if !references(spec, name) {
			delete(spec.Maps, name)
		}
	}
	c.res.Spec = spec
	c.res.Printfs = c.printfs
	return c.res, nil
}

// userStmts refuses in BEGIN, END and interval probes what user space
// does not run. BEGIN may also assign constants to maps' elements (a
// table of names, as capable.bt's).
func userStmts(file string, ss []parse.Stmt, begin bool) error {
	constant := func(x parse.Expr) bool {
		switch x.(type) {
		case *parse.Int, *parse.Str, *parse.Param:
			return true
		}
		return false
	}
	for _, s := range ss {
		if a, ok := s.(*parse.Assign); ok && begin {
			m, isMap := a.Target.(*parse.Map)
			if !isMap || a.Op != "=" || !constant(a.Value) {
				return errAt(file, a.Pos, "BEGIN assigns constants to maps' elements here, nothing else yet")
			}
			for _, k := range m.Keys {
				if !constant(k) {
					return errAt(file, k.ExprPos(), "BEGIN assigns constants to maps' elements here, nothing else yet")
				}
			}
			continue
		}
		e, ok := s.(*parse.ExprStmt)
		call, isCall := func() (*parse.Call, bool) {
			if !ok {
				return nil, false
			}
			c, ok := e.X.(*parse.Call)
			return c, ok
		}()
		if !isCall || !slices.Contains([]string{"printf", "cat", "system", "print", "clear", "zero", "time", "exit"}, call.Name) {
			return errAt(file, s.StmtPos(), "BEGIN and END take printf, cat, system, print, clear, zero, time and exit here, nothing else yet")
		}
		for _, a := range call.Args {
			switch a.(type) {
			case *parse.Int, *parse.Str, *parse.Map, *parse.Param:
			default:
				return errAt(file, a.ExprPos(), "in BEGIN and END the arguments are constants and maps here")
			}
		}
	}
	return nil
}

// program is one probe's program on one tracepoint.
func (c *compiler) program(pr *parse.Probe, tp *Target, vars map[string]typ) (bpf.Instructions, error) {
	// fp-8 is scratch: the lost map's key.
	g := &gen{c: c, tp: tp, vars: map[string]slot{}, varTypes: vars, sp: 8}
	if err := g.head(pr); err != nil {
		return nil, err
	}
	if err := g.stmts(pr.Body); err != nil {
		return nil, err
	}
	g.mark("out")
	g.emit(bpf.Mov.Imm(bpf.R0, 0), bpf.Return())
	g.clearVars()
	if len(g.insns) > 4096 {
		return nil, errAt(c.opt.File, pr.Pos, "the probe compiles to %d instructions, more than the 4096 old kernels take", len(g.insns))
	}
	return g.insns, nil
}

// head compiles what a probe runs before its statements: the context
// kept, pid and tid read once where they are read more (prepare), -p's
// filter, the predicate; an event that does not pass goes to "out".
func (g *gen) head(pr *parse.Probe) error {
	g.emit(asm.Prologue()...)
	if err := g.prepare(pr); err != nil {
		return err
	}
	if pid := g.c.opt.Pid; pid != 0 {
		g.emit(asm.Note(g.pidTgidCall(), fmt.Sprintf("-p %d: other processes' events end here", pid))...)
		g.emit(bpf.RSh.Imm(bpf.R0, 32), bpf.JNE.Imm(bpf.R0, int32(pid), "out"))
	}
	if pr.Pred != nil {
		t, err := g.expr(pr.Pred)
		if err != nil {
			return err
		}
		if t.str {
			return errAt(g.file(), pr.Pred.ExprPos(), "a predicate is an integer, not a string")
		}
		g.emit(bpf.JEq.Imm(bpf.R0, 0, "out"))
	}
	return nil
}

// clearVars sets the variables to 0 (or "") at the program's start, after
// the context is kept: a branch may read one it did not set.
func (g *gen) clearVars() {
	var clear bpf.Instructions
	for _, v := range g.varOffs {
		for i := 0; i < v.t.size; i += 8 {
			clear = append(clear, storeU32(bpf.RFP, v.off+int16(i), 0)...)
		}
	}
	if len(clear) > 0 {
		clear[0] = clear[0].WithSource(bpf.Comment("the variables start as zero"))
		g.insns = slices.Concat(g.insns[:1], clear, g.insns[1:])
	}
}

// references says whether a program of spec loads map name.
func references(spec *ebpf.CollectionSpec, name string) bool {
	for _, p := range spec.Programs {
		for _, ins := range p.Instructions {
			if ins.IsLoadFromMap() && ins.Reference() == name {
				return true
			}
		}
	}
	return false
}

// joinNames lists names, for messages.
func joinNames(names []string) string { return strings.Join(names, ", ") }
