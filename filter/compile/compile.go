// Package compile is filter's compiler: it parses --where expressions and
// operand lists (expr.go), resolves each operand on the kind of event at
// hand (event.go: a record, a syscall's entry, registers, a trampoline's
// slots, a USDT site; operand.go: types, walks, fields), and emits the
// BPF program: conditions (compile.go), reads of integers and USDT
// arguments (fetch.go), strings (strings.go), and the action that counts,
// histograms or emits what passes (action.go).
package compile

import (
	"fmt"
	"math"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/proctree"
)

// Arg is a kprobe argument (or "ret" of a kretprobe): its BTF type and
// the pt_regs offset of the register that holds it at the probe, or, with
// Slots, the offset of its u64 slot in a BPF trampoline's context.
type Arg struct {
	Name   string
	Type   btf.Type
	RegOff int16
}

// Target is what an expression is compiled against: the event, and what
// every kind of event shares.
type Target struct {
	Event Event
	BTF   *kbtf.Spec  // struct layouts, for casts and walks
	Read  asm.Readers // the kernel's reading helpers
	// SelfPid, if not 0, is filter's own process id: its events are
	// dropped first (its writes to stdout would feed the stream).
	SelfPid uint32
	// Pid, if not 0, keeps only that process's events (-p); Tree keeps
	// only those of the processes in the map proctree.PidsMap (-c's tree).
	Pid  uint32
	Tree bool
	// NS: filter runs in a pid namespace of its own, whose pids SelfPid,
	// Pid and the pid and tid builtins are (see procfs.PidNamespace).
	NS *asm.PidNS
	// Func, in a run over several functions (kprobe:GLOB), is what the
	// func operand names: this program's function.
	Func *Func
	// CPid is the pid of the -c command (0: none), the cpid builtin: the
	// namespace's, as pid is, with NS.
	CPid uint32
	// Inside, in stack mode (-s), is how many outer functions must be
	// open in the thread, in their order, for an event to pass (ChainMap,
	// asm.StackInside).
	Inside int
}

// Func is the function a program of a run over several runs at: its index
// in Names, a constant of the program, or, with Cookie, the attach cookie
// its link gave it (kprobe_multi: one program for many functions).
type Func struct {
	Index  uint64
	Cookie bool
	Names  map[uint64]string
}

// Stack layout of the filter program.
const (
	scratchOff = -8   // probe-read target of integers and pointers
	strOff     = -144 // probe-read target of strings (up to maxString+2 bytes)
	maxString  = 127
	countKey   = -148 // a u32 array key
	callTid    = -152 // a call's tid, the key of its depth
	valOff     = -160 // a u64 value to insert
	// The key (--count-by) or record (--fields) sits below, up to the
	// 512 bytes of stack a program has.
	maxRecord = 512 + valOff
)

// maxInsns is the instruction limit of kernels before 5.2; an expression
// that compiles to more is refused rather than left to fail at load.
const maxInsns = 4096

// Builtins are the names every event has (an event's own field or argument
// of the same name wins).
var builtins = []string{"pid", "tid", "comm", "cpu", "uid", "gid", "cpid", "kstack", "ustack"}

type compiler struct {
	t       Target
	option  string // the option expr came from ("" is --where)
	expr    string
	orig    string // the --where expression (expr is the text being compiled)
	insns   bpf.Instructions
	n       int               // label counter
	pending string            // a label waiting for the next instruction
	alias   map[string]string // labels that ended up at the same instruction
	// keepTid: the pid filter's helper call also stores the tid at
	// callTid (a call's entry), and tidKept says it did.
	keepTid, tidKept bool
	// call: a call's programs (CompileCall), where ret and duration are
	// names too.
	call bool
	// stacks: the program calls bpf_get_stackid on StacksMap (kstack).
	stacks bool
	// spills: left sides of arithmetic waiting on the stack (evalArith).
	spills int
}

func (c *compiler) errAt(pos int, format string, args ...any) error {
	return &ExprError{Option: c.option, Expr: c.expr, Pos: pos, Msg: fmt.Sprintf(format, args...)}
}

func (c *compiler) label(s string) string {
	c.n++
	return fmt.Sprintf("%s%d", s, c.n)
}

// mark puts label on the next instruction emitted.
func (c *compiler) mark(label string) {
	if c.pending != "" {
		c.alias[label] = c.pending
		return
	}
	c.pending = label
}

func (c *compiler) emit(insns ...bpf.Instruction) {
	if c.pending != "" && len(insns) > 0 {
		if s := insns[0].Symbol(); s != "" {
			c.alias[c.pending] = s
		} else {
			insns[0] = insns[0].WithSymbol(c.pending)
		}
		c.pending = ""
	}
	c.insns = append(c.insns, insns...)
}

// Compile turns a parsed expression (nil: none) and an action into a
// filter program. Conditions short-circuit: the right side of && and ||
// runs only when the left side does not decide. Every action but Keep
// returns 0, so the kernel stores nothing.
func Compile(expr string, root Node, t Target, act Action) (*Program, error) {
	c := newCompiler(t, expr)
	c.filters()
	if err := c.where(root); err != nil {
		return nil, err
	}
	prog, err := c.action(act)
	if err != nil {
		return nil, err
	}
	return c.finish(prog, asm.Return("reject", 0))
}

func newCompiler(t Target, expr string) *compiler {
	return &compiler{t: t, expr: expr, orig: expr, alias: map[string]string{}}
}

// filters emits the prologue and the pid filters, which jump to "reject".
func (c *compiler) filters() {
	t := c.t
	c.emit(asm.Prologue()...)
	if t.NS != nil && t.Tree {
		// The tree holds the kernel's pids; SelfPid and Pid are the
		// namespace's.
		c.emit(asm.CurrentPid()...)
		c.emit(asm.PidInSet(proctree.PidsMap, countKey, "reject")...)
	}
	if t.NS != nil && (t.SelfPid != 0 || t.Pid != 0) {
		c.emit(asm.CurrentNsPid(*t.NS, scratchOff)...)
	} else if t.NS == nil && (t.SelfPid != 0 || t.Pid != 0 || t.Tree) {
		c.emit(asm.CurrentPid()...)
		if c.keepTid {
			c.emit(asm.StoreKey(callTid, bpf.R0, bpf.Word).WithSource(bpf.Comment("and the tid, for the call's depth")))
			c.tidKept = true
		}
	}
	if t.SelfPid != 0 {
		c.emit(bpf.JEq.Imm(asm.RegPid, int32(t.SelfPid), "reject").WithSource(bpf.Comment("not filter's own events (--self includes them)")))
	}
	if t.Pid != 0 {
		c.emit(asm.PidFilter(t.Pid, "reject")...)
	}
	if t.NS == nil && t.Tree {
		c.emit(asm.PidInSet(proctree.PidsMap, countKey, "reject")...)
	}
	if t.Inside > 0 {
		c.emit(asm.StackInside(ChainMap, t.Inside, countKey, "reject")...)
	}
}

// where emits the expression (nil: none), jumping to "reject" when it
// does not hold.
func (c *compiler) where(root Node) error {
	if root == nil {
		return nil
	}
	root, always := c.fold(root)
	if always != nil && !*always {
		return c.errAt(0, "the expression never holds: no event would pass")
	}
	if root == nil {
		return nil
	}
	return c.branch(root, "reject", false)
}

// finish resolves the labels, puts the epilogue (whose first instruction
// is "reject") where something jumps to it, and checks the size.
func (c *compiler) finish(prog *Program, epilogue bpf.Instructions) (*Program, error) {
	for i, ins := range c.insns {
		if a, ok := c.alias[ins.Reference()]; ok {
			c.insns[i] = ins.WithReference(a)
		}
	}
	// Only where something jumps to it: the verifier refuses unreachable
	// instructions (no --where; a != that always holds).
	for _, ins := range c.insns {
		if ins.Reference() == "reject" {
			c.emit(epilogue...)
			break
		}
	}
	if n := slotCount(c.insns); n > maxInsns {
		c.option, c.expr = "", c.orig
		return nil, c.errAt(0, "the expression compiles to %d instructions, more than the %d a program may have on kernels before 5.2: shorten it", n, maxInsns)
	}
	prog.Insns = c.insns
	return prog, nil
}

// slotCount counts instruction slots (a 64-bit immediate load takes two).
func slotCount(insns bpf.Instructions) int {
	n := 0
	for _, ins := range insns {
		n += int(ins.Size() / bpf.InstructionSize)
	}
	return n
}

// fold replaces the comparisons whose outcome the types decide (a string
// ~ "*", a literal longer than the array it is compared with by !=) by
// their value, and simplifies around them: code after an unconditional
// jump would be unreachable, and the verifier refuses that. A nil node
// comes with the value it always has.
func (c *compiler) fold(n Node) (Node, *bool) {
	known := func(b bool) (Node, *bool) { return nil, &b }
	switch n := n.(type) {
	case *Not:
		x, k := c.fold(n.X)
		if k != nil {
			return known(!*k)
		}
		return &Not{X: x, Pos: n.Pos}, nil
	case *And, *Or:
		var l, r Node
		isAnd := false
		if a, ok := n.(*And); ok {
			l, r, isAnd = a.L, a.R, true
		} else {
			o := n.(*Or)
			l, r = o.L, o.R
		}
		l, kl := c.fold(l)
		r, kr := c.fold(r)
		if kl == nil && kr == nil && c.cost(r) < c.cost(l) {
			// The cheaper side first: it decides alone as often as the
			// other, and the expression has no side effects.
			l, r = r, l
		}
		// For &&, false decides and true drops out; for ||, the reverse.
		switch {
		case kl != nil && *kl != isAnd, kr != nil && *kr != isAnd:
			return known(!isAnd)
		case kl != nil:
			return r, kr
		case kr != nil:
			return l, nil
		case isAnd:
			return &And{L: l, R: r}, nil
		}
		return &Or{L: l, R: r}, nil
	case *Cmp:
		if v, ok := c.constCmp(n); ok {
			return known(v)
		}
	}
	return n, nil
}

// cost estimates what evaluating n costs, in rough instruction counts: a
// string read from memory is a helper call and a copy; a field of the
// record is one load.
func (c *compiler) cost(n Node) int {
	switch n := n.(type) {
	case *Not:
		return c.cost(n.X)
	case *And:
		return c.cost(n.L) + c.cost(n.R)
	case *Or:
		return c.cost(n.L) + c.cost(n.R)
	case *Cmp:
		return c.operandCost(n.Left) + c.operandCost(n.Right)
	}
	return 0
}

// typeOf resolves an operand without keeping the code resolve emits (a
// pointer walk): what it is, and how many instructions the walk takes.
func (c *compiler) typeOf(o Operand) (value, int, error) {
	start, pending := len(c.insns), c.pending
	v, err := c.resolve(o)
	walk := len(c.insns) - start
	c.insns, c.pending = c.insns[:start], pending
	return v, walk, err
}

func (c *compiler) operandCost(o Operand) int {
	if o.IsConst() {
		return 0
	}
	if a := o.Arith; a != nil {
		return 1 + c.operandCost(a.L) + c.operandCost(a.R)
	}
	v, walk, err := c.typeOf(o)
	cost := 2 + walk
	switch {
	case err != nil:
	case v.ptr != nil, v.src == srcDataLoc, v.src == srcWalk:
		cost += 20 // a helper call that copies memory
	case v.src == srcBuiltin:
		cost += 5 // a helper call
	}
	return cost
}

// constCmp reports the value of a comparison the types decide.
func (c *compiler) constCmp(cmp *Cmp) (value bool, ok bool) {
	l, r, op := cmp.Left, cmp.Right, cmp.Op
	if l.IsConst() {
		l, r = r, l
	}
	if !r.IsString || l.IsConst() || (op != "~" && op != "!=") {
		return false, false
	}
	v, _, err := c.typeOf(l)
	if err != nil || v.kind != kString {
		return false, false
	}
	switch {
	case op == "~" && r.Str == "*":
		return true, true
	case op == "!=" && v.strLen > 0 && len(r.Str) > v.strLen:
		return true, true
	}
	return false, false
}

// branch emits code that jumps to target when n evaluates to when, and
// falls through otherwise.
func (c *compiler) branch(n Node, target string, when bool) error {
	switch n := n.(type) {
	case *Not:
		return c.branch(n.X, target, !when)
	case *And:
		if !when { // either side failing fails the whole
			if err := c.branch(n.L, target, false); err != nil {
				return err
			}
			return c.branch(n.R, target, false)
		}
		skip := c.label("and")
		if err := c.branch(n.L, skip, false); err != nil {
			return err
		}
		if err := c.branch(n.R, target, true); err != nil {
			return err
		}
		c.mark(skip)
		return nil
	case *Or:
		if when { // either side holding holds the whole
			if err := c.branch(n.L, target, true); err != nil {
				return err
			}
			return c.branch(n.R, target, true)
		}
		skip := c.label("or")
		if err := c.branch(n.L, skip, true); err != nil {
			return err
		}
		if err := c.branch(n.R, target, false); err != nil {
			return err
		}
		c.mark(skip)
		return nil
	case *Cmp:
		start := len(c.insns)
		err := c.cmp(n, target, when)
		if start < len(c.insns) {
			// The comparison's text rides on its first instruction.
			from, to := n.span()
			note := "where " + c.expr[from:to]
			if src := c.insns[start].Source(); src != nil {
				note += "; " + src.String()
			}
			c.insns[start] = c.insns[start].WithSource(bpf.Comment(note))
		}
		return err
	}
	return fmt.Errorf("unknown expression node %T", n)
}

// flipped is the operator with its operands swapped (3 < x is x > 3).
var flipped = map[string]string{"==": "==", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<=", "~": "~"}

// negated is the operator that holds exactly when op does not.
var negated = map[string]string{"==": "!=", "!=": "==", "<": ">=", "<=": ">", ">": "<=", ">=": "<"}

func (c *compiler) cmp(cmp *Cmp, target string, when bool) error {
	l, r, op := cmp.Left, cmp.Right, cmp.Op
	if l.Dump || r.Dump {
		return c.errAt(cmp.OpPos, "a structure (*PATH) is printed with --fields, not compared")
	}
	if l.IsConst() && r.IsConst() {
		return c.errAt(l.Pos, "compare a field with a constant or another field: both sides are constants")
	}
	if l.IsConst() {
		l, r, op = r, l, flipped[op]
		if op == "~" {
			return c.errAt(cmp.OpPos, "the pattern goes on the right: FIELD ~ \"PREFIX*\"")
		}
	}
	v, err := c.resolve(l)
	if err != nil {
		return err
	}
	if !r.IsConst() {
		return c.fieldCmp(v, l, r, op, cmp.OpPos, target, when)
	}
	if op == "~" && v.kind != kString {
		return c.errAt(cmp.OpPos, "~ matches a string prefix: %s is a number", v.name)
	}
	switch {
	case v.kind == kString && r.IsInt && v.ptr != nil && op != "~":
		// A string pointer against a number: the address itself.
		v = *v.ptr
	case v.kind == kString:
		if !r.IsString {
			return c.errAt(r.Pos, "%s is a string: compare it with a string literal", v.name)
		}
		return c.stringCmp(v, r, op, cmp.OpPos, target, when)
	case r.IsString:
		val, ok := symbolic(v, r.Str)
		if !ok {
			return c.errAt(r.Pos, "%s is a number: compare it with a number%s", v.name, symbolicHint(v))
		}
		r = Operand{IsInt: true, Int: val, Pos: r.Pos}
	}
	lit, err := c.literal(v, r)
	if err != nil {
		return err
	}
	// An unsigned value is never below 0: "arg0 < 0" on a uprobe was
	// silently always false where "arg0 == -1" was refused (issue 62).
	if !v.signed && lit == 0 && (op == "<" || op == ">=") {
		holds := map[string]string{"<": "never holds", ">=": "always holds"}[op]
		return c.errAt(r.Pos, "%s is unsigned: %s %s 0 %s", v.name, v.name, op, holds)
	}
	if err := c.fetchInt(v, bpf.R1); err != nil {
		return err
	}
	if !when {
		op = negated[op]
	}
	c.jumpImm(op, v.signed, lit, target)
	return nil
}

// literal checks that a number fits the value it is compared with.
func (c *compiler) literal(v value, lit Operand) (int64, error) {
	if lit.Neg && !v.signed {
		return 0, c.errAt(lit.Pos, "%s is unsigned: it is never negative", v.name)
	}
	if lit.Neg {
		if lit.Int > 1<<63 {
			return 0, c.errAt(lit.Pos, "number out of range")
		}
		if v.size < 8 && lit.Int > 1<<(8*v.size-1) {
			return 0, c.errAt(lit.Pos, "%s does not fit in %s (%d bytes, signed)", lit.Text, v.name, v.size)
		}
		return -int64(lit.Int), nil
	}
	if v.size < 8 && lit.Int >= 1<<(8*v.size) {
		return 0, c.errAt(lit.Pos, "%d does not fit in %s (%d bytes)", lit.Int, v.name, v.size)
	}
	return int64(lit.Int), nil
}

// fieldCmp compares two integer values: the left one is kept in R7 while
// the right one is fetched.
func (c *compiler) fieldCmp(lv value, l, r Operand, op string, opPos int, target string, when bool) error {
	if lv.kind == kString {
		if lv.ptr == nil {
			return c.errAt(r.Pos, "%s is a string: compare it with a string literal", lv.name)
		}
		lv = *lv.ptr
	}
	if op == "~" {
		return c.errAt(opPos, "~ matches a string prefix: it takes a string literal on the right")
	}
	if err := c.fetchInt(lv, bpf.R7); err != nil {
		return err
	}
	rv, err := c.resolve(r)
	if err != nil {
		return err
	}
	if rv.kind == kString {
		if rv.ptr == nil {
			return c.errAt(r.Pos, "%s is a string: compare it with a string literal", rv.name)
		}
		rv = *rv.ptr
	}
	if err := c.fetchInt(rv, bpf.R1); err != nil {
		return err
	}
	if !when {
		op = negated[op]
	}
	// Both are 64-bit now, each extended by its own sign; the comparison
	// is signed only when both are (C's rule for operands of one rank).
	signed := lv.signed && rv.signed
	switch op {
	case "<": // r7 < r1: r1 > r7
		c.emit(jumpOp(">", signed).Reg(bpf.R1, bpf.R7, target))
	case "<=":
		c.emit(jumpOp(">=", signed).Reg(bpf.R1, bpf.R7, target))
	default:
		c.emit(jumpOp(op, signed).Reg(bpf.R7, bpf.R1, target))
	}
	return nil
}

// jumpOp is the jump taken when "a op b" holds, for == != > >=. (JLT and
// JLE are 4.14+: "<" and "<=" swap their operands instead.)
func jumpOp(op string, signed bool) bpf.JumpOp {
	switch op {
	case "==":
		return bpf.JEq
	case "!=":
		return bpf.JNE
	case ">":
		if signed {
			return bpf.JSGT
		}
		return bpf.JGT
	case ">=":
		if signed {
			return bpf.JSGE
		}
		return bpf.JGE
	}
	panic("jumpOp: " + op)
}

// jumpImm jumps to target when "R1 op lit" holds.
func (c *compiler) jumpImm(op string, signed bool, lit int64, target string) {
	fits := lit >= math.MinInt32 && lit <= math.MaxInt32
	if fits && op != "<" && op != "<=" {
		c.emit(jumpOp(op, signed).Imm(bpf.R1, int32(lit), target))
		return
	}
	if fits {
		c.emit(bpf.Mov.Imm(bpf.R2, int32(lit))) // sign-extended to 64 bits
	} else {
		c.emit(bpf.LoadImm(bpf.R2, lit, bpf.DWord))
	}
	switch op {
	case "<":
		c.emit(jumpOp(">", signed).Reg(bpf.R2, bpf.R1, target))
	case "<=":
		c.emit(jumpOp(">=", signed).Reg(bpf.R2, bpf.R1, target))
	default:
		c.emit(jumpOp(op, signed).Reg(bpf.R1, bpf.R2, target))
	}
}

// Gate compiles the pid filters and the expression (nil: none) alone, for
// a program that goes on after them (filter's --count-by ustack: profile's
// sampler): an event that does not pass jumps to reject, one that passes
// falls through past the last instruction. The gate's own labels are
// prefixed "gate_", apart from the program's.
func Gate(expr string, root Node, t Target, reject string) (bpf.Instructions, error) {
	insns, _, _, err := GateRecord(expr, root, t, Action{}, reject)
	return insns, err
}

// GateRecord is Gate, then the record of act's columns (--fields) built
// on the stack, for a sampler that sends it with the event's stacks: the
// record's layout, and where it is (a stack offset, -160 and down). Its
// columns are numbers and strings: a structure or a stack is the
// sampler's to read, or not printed.
func GateRecord(expr string, root Node, t Target, act Action, reject string) (bpf.Instructions, *Program, int16, error) {
	c := newCompiler(t, expr)
	c.filters()
	if err := c.where(root); err != nil {
		return nil, nil, 0, err
	}
	prog := &Program{}
	var at int16
	if len(act.Columns) > 0 {
		c.option, c.expr = act.Option, act.Source
		for _, o := range act.Columns {
			if o.Dump {
				return nil, nil, 0, c.errAt(o.Pos, "%s: a structure is not printed beside ustack: print it in a run of its own", o.Text)
			}
		}
		l, err := c.layColumns(act.Columns, prog, false, false)
		if err != nil {
			return nil, nil, 0, err
		}
		for _, col := range prog.Columns {
			if col.big() {
				return nil, nil, 0, c.errAt(0, "%s: a stack or a structure is the sampler's to read, not the record's", col.Name)
			}
		}
		at = l.base
	}
	c.emit(asm.Nop().WithSource(bpf.Comment("the event passed")))
	for i, ins := range c.insns {
		if a, ok := c.alias[ins.Reference()]; ok {
			ins = ins.WithReference(a)
		}
		if sym := ins.Symbol(); sym != "" {
			ins = ins.WithSymbol("gate_" + sym)
		}
		if ref := ins.Reference(); ref != "" && ins.OpCode.JumpOp() != bpf.InvalidJumpOp && !ins.IsFunctionCall() {
			if ref == "reject" {
				ins = ins.WithReference(reject)
			} else {
				ins = ins.WithReference("gate_" + ref)
			}
		}
		c.insns[i] = ins
	}
	if n := slotCount(c.insns); n > maxInsns/2 {
		c.option, c.expr = "", c.orig
		return nil, nil, 0, c.errAt(0, "the expression compiles to %d instructions, more than the %d left beside the stack walk: shorten it", n, maxInsns/2)
	}
	return c.insns, prog, at, nil
}
