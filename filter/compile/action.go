package compile

import (
	"fmt"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/internal/slots"
)

// ActionKind is what a program does with an event that passed.
type ActionKind int

const (
	Keep    ActionKind = iota // return 1: the kernel stores the event's record
	Count                     // count[0]++, per CPU
	CountBy                   // counts[columns]++ in a hash; a full map counts in lost[0]
	Hist                      // hist[log2 slot of Hist]++, per CPU; below zero in neg[0]
	Emit                      // a record of the columns, through bpf_perf_event_output
	Stats                     // stats[columns] = {count, sum, min, max} of Hist, per CPU; a full map counts in lost[0]
)

// Action is what to do with a passing event, and with what: the columns of
// a key (CountBy, Stats) or a record (Emit), the value of a histogram
// (Hist) or of statistics (Stats).
type Action struct {
	Kind    ActionKind
	Columns []Operand
	Hist    Operand
	// Lhist: Hist's slots are linear, bpftrace's lhist(EXPR, MIN, MAX,
	// STEP): slot 0 below Min, then one per Step, the last at Max and above.
	Lhist *Lhist
	// Stat is the statistic Stats reports: sum, min, max or avg (the
	// kernel keeps all four's parts); StatSource the value's text (Option
	// and Source are the key's, --count-by).
	Stat, StatSource string
	// Option and Source are where the operands were written, for errors.
	Option, Source string
	// CountBy: MaxKeys is the hash's room (0: CountsEntries); with Swap
	// the keys are counted in two hashes, one drained while the other
	// counts (asm.SwappedHashIncrement), so that each interval has all the
	// room.
	MaxKeys uint32
	Swap    bool
}

// Lhist is a linear histogram's range: [Min, Max) in slots of Step.
type Lhist struct{ Min, Max, Step int64 }

// Slots is the histogram's slot count: below, the steps, and Max and above.
func (l Lhist) Slots() int { return int((l.Max-l.Min+l.Step-1)/l.Step) + 2 }

// Column is one value of a key or record, as user space decodes it:
// integers take 8 bytes (extended by their sign), strings a fixed room.
type Column struct {
	Name            string
	String          bool
	Offset, Size    int
	Signed, Pointer bool
	Symbols         map[uint64]string
	Ksym            bool // a kernel code address, named by symbol (ksym())
	// Usym: a user code address (usym()), then the pid of the process it
	// is in (8 bytes each): named by that process's symbols.
	Usym  bool
	Stack bool // kstack as a key: an id of StacksMap
	// Frames: kstack in a record, Size/8 return addresses innermost first,
	// 0 after the last (bpf_get_stack), in the per-CPU buffer as a
	// structure's text is.
	Frames bool
	// A structure's text (String too), written by bpf_snprintf_btf; at a
	// call's return, copied from the stash at stashed (else -1).
	dump    bool
	dumpID  btf.TypeID
	stashed int
}

// big reports a column built in the per-CPU buffer: a structure's text, a
// stack's frames.
func (c Column) big() bool { return c.dump || c.Frames }

// Program is a compiled filter and the layout of what it produces.
type Program struct {
	Insns   bpf.Instructions
	Columns []Column // the key or record
	Size    int      // its bytes
	Signed  bool     // Hist: negative values are counted apart
	// CountBy: the hashes' room, and whether there are two (Action).
	MaxKeys uint32
	Swap    bool
	// Dumps: Emit builds the record in a per-CPU buffer (DumpMap).
	Dumps bool
	// Stacks: a key holds kstack, an id of StacksMap.
	Stacks bool
	// Stats: the value's sign (min and max compare so), and whether a
	// 16-byte key has the fast path of StatsCacheMap.
	StatsSigned bool
	StatsCache  bool
	// LhistSlots: a linear histogram's slots (Hist with Action.Lhist).
	LhistSlots int
}

// StacksMap holds the stacks kstack keys name (a stack trace map of
// StackEntries stacks of up to StackDepth frames: 127, the kernel's
// default perf_event_max_stack).
const (
	StatsMap = "stats" // Stats: key -> {count, sum, min, max} per CPU
	// StatsCacheMap is its fast path for a 16-byte key (asm.StatsCache):
	// StatsCacheSlots direct-mapped slots per CPU.
	StatsCacheMap   = "stats_cache"
	StatsCacheSlots = 256
	StacksMap       = "stacks"
	StackEntries    = 4096
	StackDepth      = 127
)

// keyString is the room of a string that is not a char array of its own
// size: a pointer's string, a __data_loc one.
const keyString = 64

// Map names and sizes of the actions.
const (
	CountsEntries = 10240 // --count-by keys, as BCC's default hash
	// CountsSwap is the second hash of a swapped CountBy, GenMap the
	// array whose first u32 says which of the two counts.
	CountsSwap = "counts1"
	GenMap     = "gen"
)

func (c *compiler) action(act Action) (*Program, error) {
	prog := &Program{}
	switch act.Kind {
	case Keep:
		c.emit(bpf.Mov.Imm(bpf.R0, 1).WithSource(bpf.Comment("the event passed: keep it")), bpf.Return())
		return prog, nil
	case Count:
		c.emit(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment("the event passed: count it")),
			asm.StoreKey(countKey, bpf.R1, bpf.Word))
		c.emit(asm.PerCPUArrayIncrement("count", "count", countKey)...)
		c.emit(bpf.Ja.Label("reject"))
		return prog, nil
	case Hist:
		if act.Lhist != nil {
			return prog, c.lhist(act, prog)
		}
		return prog, c.hist(act, prog)
	}
	c.option, c.expr = act.Option, act.Source
	start := len(c.insns)
	keyed := act.Kind == CountBy || act.Kind == Stats
	l, err := c.layColumns(act.Columns, prog, keyed, false)
	if err != nil {
		return nil, err
	}
	if act.Kind == Stats && prog.Size == 0 {
		// No key: one, 0.
		prog.Size = 8
		c.emit(bpf.Mov.Imm(bpf.R1, 0), bpf.StoreMem(bpf.RFP, valOff-8, bpf.R1, bpf.DWord))
	}
	off := int16(valOff - prog.Size)
	prog.Stacks = c.stacks
	switch act.Kind {
	case CountBy:
		prog.MaxKeys, prog.Swap = act.MaxKeys, act.Swap
		if prog.MaxKeys == 0 {
			prog.MaxKeys = CountsEntries
		}
		if act.Swap {
			c.emit(asm.SwappedHashIncrement("counts", [2]string{"counts", CountsSwap}, GenMap, off, valOff, "lost", nil)...)
		} else {
			c.emit(asm.HashIncrement("counts", "counts", off, valOff, "lost", nil)...)
		}
	case Stats:
		prog.MaxKeys = act.MaxKeys
		if prog.MaxKeys == 0 {
			prog.MaxKeys = CountsEntries
		}
		initOff := off - asm.StatsSize
		if initOff < -512 {
			return nil, c.errAt(0, "the key takes %d bytes, more than the stack leaves beside the statistics: drop a string", prog.Size)
		}
		c.option, c.expr = "--"+act.Stat, act.StatSource
		v, err := c.resolve(act.Hist)
		if err != nil {
			return nil, err
		}
		if v.kind != kInt || v.typed {
			return nil, c.errAt(act.Hist.Pos, "%s is %s: --%s needs a number", v.name, v.describe(), act.Stat)
		}
		if err := c.fetchInt(v, bpf.R1); err != nil {
			return nil, c.errAt(act.Hist.Pos, "%v", err)
		}
		prog.StatsSigned = v.signed
		c.emit(bpf.StoreMem(bpf.RFP, valOff, bpf.R1, bpf.DWord))
		if prog.Size == 16 {
			// A key of 16 bytes (comm): a direct-mapped slot first.
			prog.StatsCache = true
			c.emit(asm.StatsCache("stats", StatsCacheMap, off, countKey, StatsCacheSlots-1)...)
		}
		c.emit(asm.StatsUpdate("stats", StatsMap, off, valOff, initOff, v.signed, "lost")...)
	case Emit:
		record := bpf.Instructions{bpf.Mov.Reg(bpf.R4, bpf.RFP), bpf.Add.Imm(bpf.R4, int32(off))}
		if len(l.ptrs) > 0 {
			prog.Dumps = true
			c.emitDumps(prog, l, 0)
			record = bpf.Instructions{bpf.Mov.Reg(bpf.R4, regDump)}
		}
		c.emit(
			bpf.Mov.Reg(bpf.R1, asm.RegCtx).WithSource(bpf.Comment(fmt.Sprintf("bpf_perf_event_output(ctx, events, BPF_F_CURRENT_CPU, record, %d)", prog.Size))),
			bpf.LoadMapPtr(bpf.R2, 0).WithReference("events"),
			bpf.LoadImm(bpf.R3, 0xffffffff, bpf.DWord),
		)
		c.emit(record...)
		c.emit(
			bpf.Mov.Imm(bpf.R5, int32(prog.Size)),
			bpf.FnPerfEventOutput.Call(),
		)
	}
	c.emit(bpf.Ja.Label("reject"))
	if start < len(c.insns) {
		note := map[ActionKind]string{CountBy: "the event passed: count it by its key", Emit: "the event passed: build its record", Stats: "the event passed: its key"}[act.Kind]
		if src := c.insns[start].Source(); src != nil {
			note += "; " + src.String()
		}
		c.insns[start] = c.insns[start].WithSource(bpf.Comment(note))
	}
	return prog, nil
}

// columns lays out the key or record and emits the code that fills it. In
// a key, a string read through a pointer is cleared first: the kernel
// copies it up to its NUL and leaves the stack's old bytes after it, and
// two keys of one string would differ there (each taking a slot of the
// hash: on the 1-CPU guests, 100 slots held 53 files).
func (c *compiler) columns(ops []Operand, prog *Program, key bool) error {
	_, err := c.layColumns(ops, prog, key, false)
	return err
}

// laid is where layColumns put a record's structures: the stack holds
// the record's other columns (stackSize bytes from base), then each
// structure's pointer (ptrs), and emitDumps builds the record.
type laid struct {
	base      int16
	stackSize int
	ptrs      []int16
}

// A key's strings are cleared first (see columns), and it takes no
// structure; stash (a call's entry) clears strings too, and takes them.
func (c *compiler) layColumns(ops []Operand, prog *Program, key, stash bool) (laid, error) {
	type planned struct {
		v   value
		col Column
	}
	// Lay out first (sizes), then fill: the record's place on the stack
	// depends on its size. Structures go last in the record.
	var plan []planned
	size, dumps := 0, 0
	for _, o := range ops {
		col := Column{Name: o.Text, Offset: size, Size: 8, Ksym: o.Ksym, Usym: o.Usym}
		if o.Usym {
			col.Size = 16
		}
		// The walk, if any, is emitted below, where it is used.
		v, _, err := c.typeOf(o)
		if err != nil {
			return laid{}, err
		}
		col.Stack = v.builtin == "kstack" && v.kind == kInt
		switch {
		case v.kind == kFrames:
			col.Frames, col.Size, col.stashed = true, StackDepth*8, -1
			dumps++
		case v.kind == kDump && key && !stash:
			return laid{}, c.errAt(o.Pos, "%s: a structure is printed (--fields), not counted by", o.Text)
		case v.kind == kDump:
			col.String, col.Size, col.dump, col.dumpID, col.stashed = true, DumpSize, true, v.dumpID, -1
			if v.src == srcStash {
				col.stashed = v.ctxOff
			}
			dumps++
		case v.kind == kString:
			col.String, col.Size = true, keyString
			if v.strLen > 0 && v.ptr == nil {
				col.Size = min((v.strLen+7)&^7, keyString)
			}
		default:
			col.Signed, col.Pointer, col.Symbols = v.signed, v.pointer, v.symbols
		}
		if !col.big() {
			size += col.Size
		}
		plan = append(plan, planned{v, col})
	}
	stackSize := size + 8*dumps
	if stackSize > maxRecord {
		return laid{}, c.errAt(0, "the columns take %d bytes, more than the %d of stack a program has left for them: drop a string", stackSize, maxRecord)
	}
	l := laid{base: int16(valOff - stackSize), stackSize: size}
	extra := 0
	for i := range plan {
		if plan[i].col.big() {
			plan[i].col.Offset = size + extra
			extra += plan[i].col.Size
			l.ptrs = append(l.ptrs, l.base+int16(size+8*len(l.ptrs)))
		}
	}
	prog.Size = size + extra
	k := 0
	for i, o := range ops {
		col := plan[i].col
		off := l.base + int16(col.Offset)
		v, err := c.resolve(o) // emits the walk, if any, right before the fetch
		if err != nil {
			return laid{}, err
		}
		first := len(c.insns)
		if col.big() {
			// Its pointer, for emitDumps.
			off = l.ptrs[k]
			k++
			if col.stashed >= 0 || col.Frames {
				prog.Columns = append(prog.Columns, col)
				continue
			}
			if err := c.fetchInt(*v.ptr, bpf.R1); err != nil {
				return laid{}, c.errAt(o.Pos, "%v", err)
			}
			c.emit(bpf.StoreMem(bpf.RFP, off, bpf.R1, bpf.DWord))
			c.insns[first] = c.insns[first].WithSource(bpf.Comment(fmt.Sprintf("column %s: the structure's address at fp%d", col.Name, off)))
			prog.Columns = append(prog.Columns, col)
			continue
		}
		// comm too: 6.1's bpf_get_current_comm copies up to the NUL
		// (strscpy) and leaves the stack's bytes after it.
		if (key || stash) && (v.ptr != nil || v.src == srcDataLoc || v.builtin == "comm") {
			c.emit(bpf.Mov.Imm(bpf.R1, 0).WithSource(bpf.Comment(fmt.Sprintf("column %s at fp%d, cleared first: a string leaves old bytes after its NUL", col.Name, off))))
			for i := 0; i < col.Size; i += 8 {
				c.emit(bpf.StoreMem(bpf.RFP, off+int16(i), bpf.R1, bpf.DWord))
			}
		}
		if col.Usym {
			// The address, then its process (the pid builtin's).
			if err := c.store(v, off, 8); err != nil {
				return laid{}, c.errAt(o.Pos, "%v", err)
			}
			pid, err := c.builtin(Operand{Base: "pid", Pos: o.Pos})
			if err == nil {
				err = c.fetchInt(pid, bpf.R1)
			}
			if err != nil {
				return laid{}, c.errAt(o.Pos, "%v", err)
			}
			c.emit(bpf.StoreMem(bpf.RFP, off+8, bpf.R1, bpf.DWord))
		} else if err := c.store(v, off, col.Size); err != nil {
			return laid{}, c.errAt(o.Pos, "%v", err)
		}
		if first < len(c.insns) && c.insns[first].Source() == nil {
			c.insns[first] = c.insns[first].WithSource(bpf.Comment(fmt.Sprintf("column %s at fp%d", col.Name, off)))
		}
		prog.Columns = append(prog.Columns, col)
	}
	return l, nil
}

// store emits code that writes a value to the stack at off: an integer as
// 8 bytes, a string into size bytes.
func (c *compiler) store(v value, off int16, size int) error {
	if v.kind == kInt {
		if err := c.fetchInt(v, bpf.R1); err != nil {
			return err
		}
		c.emit(bpf.StoreMem(bpf.RFP, off, bpf.R1, bpf.DWord))
		return nil
	}
	switch {
	case v.ptr != nil:
		if err := c.fetchInt(*v.ptr, bpf.R1); err != nil {
			return err
		}
		c.readStr(v, off, size)
	case v.src == srcDataLoc:
		c.dataLocAddr(v)
		v.space = spaceKernel
		c.readStr(v, off, size)
	case v.src == srcWalk:
		n := min(v.strLen, size)
		c.read(n, off)
		c.zero(off+int16(n), size-n)
	case v.src == srcCtx, v.src == srcStash:
		from := asm.RegCtx
		if v.src == srcStash {
			from = regStash
		}
		n := min(v.strLen, size)
		for i := 0; i < n; {
			w := 8
			for w > 1 && ((v.ctxOff+i)%w != 0 || i%w != 0 || i+w > n) {
				w /= 2
			}
			c.emit(
				bpf.LoadMem(bpf.R1, from, int16(v.ctxOff+i), sizeOf(w)),
				bpf.StoreMem(bpf.RFP, off+int16(i), bpf.R1, sizeOf(w)),
			)
			i += w
		}
		c.zero(off+int16(n), size-n)
	case v.builtin == "comm":
		c.emit(
			bpf.Mov.Reg(bpf.R1, bpf.RFP).WithSource(bpf.Comment("comm = bpf_get_current_comm()")),
			bpf.Add.Imm(bpf.R1, int32(off)),
			bpf.Mov.Imm(bpf.R2, int32(size)),
			bpf.FnGetCurrentComm.Call(),
		)
	default:
		return fmt.Errorf("%s cannot be stored", v.name)
	}
	return nil
}

// zero clears n bytes of stack at off (the padding of a copied array, so
// that two equal keys are equal bytes).
func (c *compiler) zero(off int16, n int) {
	for i := 0; i < n; {
		w := 4 // BPF_ST with a DWord is refused by cilium/ebpf's encoder
		for w > 1 && ((int(off)+i)%w != 0 || i+w > n) {
			w /= 2
		}
		c.emit(bpf.StoreImm(bpf.RFP, off+int16(i), 0, sizeOf(w)))
		i += w
	}
}

// hist emits the log2 histogram of an integer operand.
func (c *compiler) hist(act Action, prog *Program) error {
	c.option, c.expr = act.Option, act.Source
	v, err := c.resolve(act.Hist)
	if err != nil {
		return err
	}
	if v.kind == kString {
		return c.errAt(act.Hist.Pos, "%s is a string: a histogram needs a number", v.name)
	}
	if v.kind == kDump {
		return c.errAt(act.Hist.Pos, "%s is a structure: a histogram needs a number", v.name)
	}
	if v.typed {
		return c.errAt(act.Hist.Pos, "%s is a struct pointer, which the verifier types at a BPF trampoline: a histogram cannot take its bits; use --attach=perf (a kprobe)", v.name)
	}
	if err := c.fetchInt(v, bpf.R1); err != nil {
		return c.errAt(act.Hist.Pos, "%v", err)
	}
	if v.signed {
		prog.Signed = true
		c.emit(bpf.JSGE.Imm(bpf.R1, 0, "hist_slot").WithSource(bpf.Comment("below zero: no log2 slot, counted apart")))
		c.emit(bpf.Mov.Imm(bpf.R1, 0), asm.StoreKey(countKey, bpf.R1, bpf.Word))
		c.emit(asm.PerCPUArrayIncrement("neg", "neg", countKey)...)
		c.emit(bpf.Ja.Label("reject"))
		c.mark("hist_slot")
	}
	c.emit(asm.Log2Slot("hist", bpf.R1, bpf.R2, bpf.R3)...)
	c.emit(asm.StoreKey(countKey, bpf.R3, bpf.Word))
	c.emit(asm.PerCPUArrayIncrement("hist", "hist", countKey)...)
	c.emit(bpf.Ja.Label("reject"))
	return nil
}

// lhist emits a linear histogram's slot of the value and its count: slot
// 0 below Min, 1 + (v - Min) / Step inside, the last at Max and above. The
// bounds are 64-bit constants compared in registers, as the value's type
// says (signed or not), with JGE and JSGE only.
func (c *compiler) lhist(act Action, prog *Program) error {
	c.option, c.expr = act.Option, act.Source
	l := *act.Lhist
	v, err := c.resolve(act.Hist)
	if err != nil {
		return err
	}
	if v.kind != kInt || v.typed {
		return c.errAt(act.Hist.Pos, "%s is %s: a histogram needs a number", v.name, v.describe())
	}
	if err := c.fetchInt(v, bpf.R1); err != nil {
		return c.errAt(act.Hist.Pos, "%v", err)
	}
	prog.LhistSlots = l.Slots()
	ge := bpf.JGE
	if v.signed {
		ge = bpf.JSGE
	}
	c.emit(
		bpf.LoadImm(bpf.R2, l.Min, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("lhist slot of %s: [%d, %d) in steps of %d", v.name, l.Min, l.Max, l.Step))),
		bpf.Mov.Imm(bpf.R3, 0),
		ge.Reg(bpf.R1, bpf.R2, "lhist_in"),
		bpf.Ja.Label("lhist_count"),
		bpf.LoadImm(bpf.R3, l.Max, bpf.DWord).WithSymbol("lhist_in"),
		ge.Reg(bpf.R1, bpf.R3, "lhist_above"),
		bpf.Sub.Reg(bpf.R1, bpf.R2),
		bpf.Div.Imm(bpf.R1, int32(l.Step)),
		bpf.Add.Imm(bpf.R1, 1),
		bpf.Mov.Reg(bpf.R3, bpf.R1),
		bpf.Ja.Label("lhist_count"),
		bpf.Mov.Imm(bpf.R3, int32(prog.LhistSlots-1)).WithSymbol("lhist_above"),
		asm.StoreKey(countKey, bpf.R3, bpf.Word).WithSymbol("lhist_count"),
	)
	c.emit(asm.PerCPUArrayIncrement("lhist", "lhist", countKey)...)
	c.emit(bpf.Ja.Label("reject"))
	return nil
}

// Maps are the maps an action's program uses.
func Maps(kind ActionKind, prog *Program) map[string]*ebpf.MapSpec {
	perCPU := func(name string, n uint32) *ebpf.MapSpec {
		return &ebpf.MapSpec{Name: "filter_" + name, Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: n}
	}
	switch kind {
	case Count:
		return map[string]*ebpf.MapSpec{"count": perCPU("count", 1)}
	case CountBy:
		counts := func(name string) *ebpf.MapSpec {
			return &ebpf.MapSpec{Name: "filter_" + name, Type: ebpf.Hash, KeySize: uint32(prog.Size), ValueSize: 8, MaxEntries: prog.MaxKeys}
		}
		m := map[string]*ebpf.MapSpec{"counts": counts("counts"), "lost": perCPU("lost", 1)}
		if prog.Stacks {
			m[StacksMap] = &ebpf.MapSpec{Name: "filter_stacks", Type: ebpf.StackTrace, KeySize: 4, ValueSize: 8 * StackDepth, MaxEntries: StackEntries}
		}
		if prog.Swap {
			m[CountsSwap] = counts(CountsSwap)
			m[GenMap] = &ebpf.MapSpec{Name: "filter_gen", Type: ebpf.Array, KeySize: 4, ValueSize: 4, MaxEntries: 1}
		}
		return m
	case Stats:
		m := map[string]*ebpf.MapSpec{
			StatsMap: {Name: "filter_stats", Type: ebpf.PerCPUHash, KeySize: uint32(prog.Size), ValueSize: asm.StatsSize, MaxEntries: prog.MaxKeys},
			"lost":   perCPU("lost", 1),
		}
		if prog.StatsCache {
			m[StatsCacheMap] = &ebpf.MapSpec{Name: "filter_stats_c", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: asm.StatsCacheSize, MaxEntries: StatsCacheSlots}
		}
		return m
	case Hist:
		if prog.LhistSlots > 0 {
			return map[string]*ebpf.MapSpec{"lhist": perCPU("lhist", uint32(prog.LhistSlots))}
		}
		m := map[string]*ebpf.MapSpec{"hist": perCPU("hist", slots.Log2)}
		if prog.Signed {
			m["neg"] = perCPU("neg", 1)
		}
		return m
	case Emit:
		// Sized by the kernel: one entry per possible CPU.
		m := map[string]*ebpf.MapSpec{"events": {Name: "filter_events", Type: ebpf.PerfEventArray}}
		if prog.Dumps {
			m[DumpMap] = dumpMap(prog.Size)
		}
		return m
	}
	return map[string]*ebpf.MapSpec{}
}
