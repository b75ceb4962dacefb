package compile

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	bpf "github.com/cilium/ebpf/asm"

	"github.com/tracekit/tracekit/asm"
)

// A call seen whole (ksnoop's entry judged by its return): on a
// function's entry, an expression or an action that names ret or duration
// makes two programs. The entry's evaluates what needs only the entry (the
// conjuncts of --where that name neither) and stashes, per thread, the
// values the return needs and the time; the return's finds them again
// (asm.CallPush, asm.CallPop), judges the rest of --where and acts, and
// marks the stash read (asm.CallDone).

// Maps and sizes of a call.
const (
	StashMap = "stash" // {u32 tid; u32 depth} → the entry's record (asm.CallPush)
	// MaxDepth is how deeply a thread's calls of the function nest and
	// still pair: deeper calls are counted (so that the returns stay
	// paired) but not stashed, and their returns pass nothing. It is the
	// kernel's own limit for uretprobes (MAX_URETPROBE_DEPTH).
	MaxDepth = 64
	// CallsInFlight is the room of the stash, an LRU hash: calls in
	// progress at once, over every thread.
	CallsInFlight = 10240
)

// regStash holds the return's stash record (a map value) while the
// expression and the action run: helpers keep R6-R9, and filter's
// programs use R6 (the context), R7 and R8.
const regStash = bpf.R9

// stash record: the key, the entry's time, the thread's calls in
// progress, then the columns.
const (
	stashTime    = asm.CallTime
	stashColumns = asm.CallRecord
)

// StashTime is the offset of a stash record's entry time: 0 once its
// return has read it.
const StashTime = stashTime

// Call is what CompileCall builds.
type Call struct {
	Entry, Return *Program
	// StashSize is the bytes of a stash record; DumpBuffer, of the
	// per-CPU buffer records with structures are built in (0: none).
	StashSize, DumpBuffer int
}

// Return is a function's return, paired with its entry: ret is the return
// value (Ret, a register), duration the nanoseconds since the entry, and
// every other operand the value it had at the entry, read from the stash.
// A builtin the entry does not have as an argument is the return's own.
type Return struct {
	Ret     Arg
	Entry   Event
	stashed map[string]value
}

// callName reports an operand only a call has.
func callName(o Operand) bool {
	return o.anyLeaf(func(o Operand) bool { return !o.IsConst() && (o.Base == "ret" || o.Base == "duration") })
}

// IsCall reports whether an expression or an action names ret or
// duration, which on a function's entry make it a call (CompileCall).
func IsCall(root Node, act Action) bool {
	if mentionsCall(root) {
		return true
	}
	for _, o := range act.operands() {
		if callName(o) {
			return true
		}
	}
	return false
}

func mentionsCall(n Node) bool {
	return anyCmp(n, func(c *Cmp) bool { return callName(c.Left) || callName(c.Right) })
}

// operands are the action's operands: its columns, or its histogram's.
func (act Action) operands() []Operand {
	switch act.Kind {
	case Hist:
		return []Operand{act.Hist}
	case Stats:
		return append(append([]Operand{}, act.Columns...), act.Hist)
	}
	return act.Columns
}

// conjuncts are the sides of n's top-level &&s.
func conjuncts(n Node) []Node {
	if a, ok := n.(*And); ok {
		return append(conjuncts(a.L), conjuncts(a.R)...)
	}
	if n == nil {
		return nil
	}
	return []Node{n}
}

func joinAnd(ns []Node) Node {
	if len(ns) == 0 {
		return nil
	}
	n := ns[0]
	for _, r := range ns[1:] {
		n = &And{L: n, R: r}
	}
	return n
}

// key names what an operand reads, however it was written.
func (o Operand) key() string {
	var b strings.Builder
	if o.CharPtr {
		b.WriteString("str ")
	}
	if o.Dump {
		b.WriteString("*")
	}
	if o.Cast != "" {
		fmt.Fprintf(&b, "(struct %s *)", o.Cast)
	}
	b.WriteString(o.Base)
	for _, s := range o.Steps {
		if s.Deref {
			b.WriteString("->")
		} else {
			b.WriteString(".")
		}
		b.WriteString(s.Member)
	}
	return b.String()
}

// CompileCall compiles a call: entry is the function's entry (its
// arguments; the pid filters apply there), ret its return value at the
// return. act may not be Keep: a call's record is always built.
func CompileCall(expr string, root Node, entry Target, ret Arg, act Action) (*Call, error) {
	var atEntry, atReturn []Node
	for _, n := range conjuncts(root) {
		if mentionsCall(n) {
			atReturn = append(atReturn, n)
		} else {
			atEntry = append(atEntry, n)
		}
	}
	if act.Kind == Keep {
		return nil, fmt.Errorf("a call has no record of the kernel's to keep: build one (Emit)")
	}
	ec := newCompiler(entry, expr)
	ec.call = true
	var need []Operand // what the return reads from the stash
	seen := map[string]bool{}
	var add func(o Operand, option, source string) error
	add = func(o Operand, option, source string) error {
		if a := o.Arith; a != nil {
			if err := add(a.L, option, source); err != nil {
				return err
			}
			return add(a.R, option, source)
		}
		if o.IsConst() || callName(o) || seen[o.key()] {
			return nil
		}
		ec.option, ec.expr = option, source
		if _, ok, err := ec.eventOperand(o); err != nil {
			return err
		} else if !ok && isBuiltin(o.Base) && !o.CharPtr {
			return nil // the return's own: the same thread
		}
		if _, _, err := ec.typeOf(o); err != nil {
			return err
		}
		seen[o.key()] = true
		need = append(need, o)
		return nil
	}
	for _, n := range atReturn {
		if err := eachCmp(n, func(c *Cmp) error {
			if err := add(c.Left, "", expr); err != nil {
				return err
			}
			return add(c.Right, "", expr)
		}); err != nil {
			return nil, err
		}
	}
	for _, o := range act.operands() {
		if err := add(o, act.Option, act.Source); err != nil {
			return nil, err
		}
	}
	ec.option, ec.expr = "", expr

	// The entry: its filters, its part of --where, then the stash.
	ec.keepTid = true
	ec.filters()
	if err := ec.where(joinAnd(atEntry)); err != nil {
		return nil, err
	}
	stash := &Program{}
	l, err := ec.layColumns(need, stash, false, true)
	if err != nil {
		return nil, err
	}
	size := stashColumns + stash.Size
	rec := l.base - stashColumns
	if int(rec) < -512 {
		return nil, ec.errAt(0, "the values the return needs take %d bytes of stack, more than the %d a program has left: drop a string", int(valOff-rec), maxRecord)
	}
	ec.emit(
		bpf.FnKtimeGetNs.Call().WithSource(bpf.Comment("the entry's time")),
		bpf.StoreMem(bpf.RFP, rec+stashTime, bpf.R0, bpf.DWord),
	)
	if !ec.tidKept {
		ec.emit(
			bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment("the tid")),
			asm.StoreKey(callTid, bpf.R0, bpf.Word),
		)
	}
	src, srcOff := bpf.RFP, rec
	if len(l.ptrs) > 0 {
		// Structures: the record is built in the per-CPU buffer, its head
		// copied from the stack (the key and count, set there by
		// CallPush, cleared first: the verifier refuses a read of stack
		// never written).
		ec.emit(bpf.Mov.Imm(bpf.R1, 0), bpf.StoreMem(bpf.RFP, rec, bpf.R1, bpf.DWord), bpf.StoreMem(bpf.RFP, rec+asm.CallDepth, bpf.R1, bpf.DWord))
		ec.emitDumps(stash, l, stashColumns)
		src, srcOff = regDump, 0
	}
	ec.emit(asm.CallPush("call", StashMap, callTid, src, srcOff, size, MaxDepth, "reject")...)
	entryProg, err := ec.finish(stash, asm.Return("reject", 0))
	if err != nil {
		return nil, err
	}

	// The return: the stash, the rest of --where, the action.
	r := &Return{Ret: ret, Entry: entry.Event, stashed: map[string]value{}}
	for i, col := range stash.Columns {
		v := value{name: col.Name, kind: kInt, size: 8, src: srcStash, ctxOff: stashColumns + col.Offset,
			signed: col.Signed, pointer: col.Pointer, symbols: col.Symbols}
		switch {
		case col.dump:
			v.kind, v.size, v.dumpID = kDump, 0, col.dumpID
		case col.String:
			v.kind, v.size, v.strLen = kString, 0, col.Size
		}
		r.stashed[need[i].key()] = v
	}
	rt := Target{Event: r, BTF: entry.BTF, Read: entry.Read, NS: entry.NS}
	rc := newCompiler(rt, expr)
	rc.call = true
	rc.emit(asm.Prologue()...)
	rc.emit(asm.CallPop("call", StashMap, callTid, scratchOff, MaxDepth, regStash, "out")...)
	if err := rc.where(joinAnd(atReturn)); err != nil {
		return nil, err
	}
	retProg, err := rc.action(act)
	if err != nil {
		return nil, err
	}
	epilogue := asm.CallDone(regStash)
	epilogue[0] = epilogue[0].WithSymbol("reject")
	epilogue = append(epilogue, asm.Return("out", 0)...)
	if retProg, err = rc.finish(retProg, epilogue); err != nil {
		return nil, err
	}
	buf := 0
	if stash.Dumps = len(l.ptrs) > 0; stash.Dumps {
		buf = size
	}
	if retProg.Dumps {
		buf = max(buf, retProg.Size)
	}
	return &Call{Entry: entryProg, Return: retProg, StashSize: size, DumpBuffer: buf}, nil
}

// eventOperand resolves o on the event alone (no builtin), keeping no
// code: whether the event has it.
func (c *compiler) eventOperand(o Operand) (value, bool, error) {
	start, pending := len(c.insns), c.pending
	inner := o
	inner.CharPtr = false
	v, ok, err := c.t.Event.operand(c, inner)
	c.insns, c.pending = c.insns[:start], pending
	return v, ok, err
}

// eachCmp calls f on every comparison of n.
func eachCmp(n Node, f func(*Cmp) error) error {
	switch n := n.(type) {
	case *Or:
		if err := eachCmp(n.L, f); err != nil {
			return err
		}
		return eachCmp(n.R, f)
	case *And:
		if err := eachCmp(n.L, f); err != nil {
			return err
		}
		return eachCmp(n.R, f)
	case *Not:
		return eachCmp(n.X, f)
	case *Cmp:
		return f(n)
	}
	return nil
}

// anyCmp reports whether pred holds for a comparison of n.
func anyCmp(n Node, pred func(*Cmp) bool) bool {
	errFound := errors.New("found")
	return eachCmp(n, func(c *Cmp) error {
		if pred(c) {
			return errFound
		}
		return nil
	}) != nil
}

func (e *Return) operand(c *compiler, o Operand) (value, bool, error) {
	switch o.Base {
	case "ret":
		_, slots := e.Entry.(*Slots) // fexit: ret is the slot after the arguments
		return argOperand(c, []Arg{e.Ret}, slots, o)
	case "duration":
		if len(o.Steps) > 0 || o.Cast != "" {
			return value{}, true, c.errAt(o.Pos, "duration is a number of nanoseconds: it has no members")
		}
		return value{name: "duration", kind: kInt, size: 8, src: srcDuration}, true, nil
	}
	if v, ok := e.stashed[o.key()]; ok {
		return v, true, nil
	}
	return value{}, false, nil
}

func (e *Return) unknown(c *compiler, o Operand) error { return e.Entry.unknown(c, o) }
func (e *Return) userSpace() bool                      { return e.Entry.userSpace() }

// Columns are the entry's, then ret and duration.
func (e *Return) Columns() []Operand {
	return append(e.Entry.Columns(), Operand{Base: "ret", Text: "ret"}, Operand{Base: "duration", Text: "duration"})
}

func (e *Return) HasStringPointer() bool { return false }

// CallColumns are what a call prints by default: the entry's arguments,
// then ret and duration.
func CallColumns(entry Event) []Operand {
	return (&Return{Entry: entry}).Columns()
}

// ChainMap is stack mode's: a thread's calls of the outer functions in
// progress (asm.StackEntry), for at most ChainThreads threads at once.
const (
	ChainMap     = "chain"
	ChainThreads = 10240
)

// ChainMapSpec is the map of a stack mode of outer functions.
func ChainMapSpec(outer int) *ebpf.MapSpec {
	return &ebpf.MapSpec{Name: "filter_chain", Type: ebpf.LRUHash, KeySize: 4, ValueSize: uint32(asm.StackValueSize(outer)), MaxEntries: ChainThreads}
}

// CallMaps are the map a call's two programs share, besides the action's.
func CallMaps(c *Call) map[string]*ebpf.MapSpec {
	m := map[string]*ebpf.MapSpec{
		StashMap: {Name: "filter_stash", Type: ebpf.LRUHash, KeySize: 8, ValueSize: uint32(c.StashSize), MaxEntries: CallsInFlight},
	}
	if c.DumpBuffer > 0 {
		m[DumpMap] = dumpMap(c.DumpBuffer)
	}
	return m
}

// Names finds an operand named name in an expression or an action.
func Names(root Node, act Action, name string) (Operand, bool) {
	var found *Operand
	_ = eachCmp(root, func(c *Cmp) error {
		for _, o := range []Operand{c.Left, c.Right} {
			o.anyLeaf(func(o Operand) bool {
				if found == nil && !o.IsConst() && o.Base == name {
					found = &o
				}
				return false
			})
		}
		return nil
	})
	for _, o := range act.operands() {
		o.anyLeaf(func(o Operand) bool {
			if found == nil && o.Base == name {
				found = &o
			}
			return false
		})
	}
	if found == nil {
		return Operand{}, false
	}
	return *found, true
}
