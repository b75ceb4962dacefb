package filter

import (
	"fmt"
	"math"
	"sort"
	"strings"

	bpf "github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"

	"github.com/tracekit/tracekit/asm"
	"github.com/tracekit/tracekit/kbtf"
	"github.com/tracekit/tracekit/proctree"
	"github.com/tracekit/tracekit/tracefs"
	"github.com/tracekit/tracekit/uprobe"
)

// Arg is a kprobe argument (or "ret" of a kretprobe): its BTF type and
// the pt_regs offset of the register that holds it at the probe, or, with
// Target.Slots, the offset of its u64 slot in a BPF trampoline's context.
type Arg struct {
	Name   string
	Type   btf.Type
	RegOff int16
}

// Target is what an expression is compiled against.
type Target struct {
	Format *tracefs.Format // a tracepoint's fields
	Args   []Arg           // a kprobe's arguments
	BTF    *kbtf.Spec      // struct layouts, for casts and walks
	Read   asm.Readers     // the kernel's reading helpers
	// UserSpace: the event's pointers are user addresses (a syscall
	// tracepoint's arguments). Otherwise a string pointer without a __user
	// tag in BTF is read as a user string first, as a kernel one if that
	// fails: on x86-64 and arm64 the two address ranges never overlap.
	UserSpace bool
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
	// USDT are a USDT call site's arguments, arg0 onwards; Site is the
	// site's link-time address (a rip-relative argument is found from the
	// instruction pointer, which a uprobe sets to the site) and Regs the
	// register layout the specs name registers in.
	USDT []uprobe.Arg
	Site uint64
	Regs *asm.Regs
	// Slots: Args are the u64 slots of a BPF trampoline's context (fentry,
	// fexit), not registers. The kernel types them from BTF: a struct
	// pointer is a pointer to the verifier, which a program may compare,
	// store and walk but not take bits of, and a pointer to anything but
	// a number, void or a struct cannot be read at all (see slotReadable).
	Slots bool
	// Entry, with the Format of a syscalls:sys_enter_* event, reads the
	// event's fields at the entry of the syscall's wrapper (fentry)
	// instead of from the tracepoint's record: the wrapper's one argument
	// is the user's pt_regs, which holds the syscall's arguments
	// (Entry.SyscallArgs, in the format's order) and its number
	// (__syscall_nr).
	Entry *asm.Regs
}

// Stack layout of the filter program.
const (
	scratchOff = -8   // probe-read target of integers and pointers
	strOff     = -144 // probe-read target of strings (up to maxString+2 bytes)
	maxString  = 127
	countKey   = -148 // a u32 array key
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
var builtins = []string{"pid", "tid", "comm", "cpu", "uid", "gid"}

type compiler struct {
	t       Target
	option  string // the option expr came from ("" is --where)
	expr    string
	insns   bpf.Instructions
	n       int               // label counter
	pending string            // a label waiting for the next instruction
	alias   map[string]string // labels that ended up at the same instruction
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
	c := &compiler{t: t, expr: expr, alias: map[string]string{}}
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
	if root != nil {
		var always *bool
		root, always = c.fold(root)
		if always != nil && !*always {
			return nil, c.errAt(0, "the expression never holds: no event would pass")
		}
	}
	if root != nil {
		if err := c.branch(root, "reject", false); err != nil {
			return nil, err
		}
	}
	prog, err := c.action(act)
	if err != nil {
		return nil, err
	}
	for i, ins := range c.insns {
		if a, ok := c.alias[ins.Reference()]; ok {
			c.insns[i] = ins.WithReference(a)
		}
	}
	// Only where something jumps to it: the verifier refuses unreachable
	// instructions (no --where; a != that always holds).
	for _, ins := range c.insns {
		if ins.Reference() == "reject" {
			c.emit(asm.Return("reject", 0)...)
			break
		}
	}
	if n := slotCount(c.insns); n > maxInsns {
		c.option, c.expr = "", expr
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

type valueKind int

const (
	kInt valueKind = iota
	kString
)

// source is where a value is.
type source int

const (
	srcCtx     source = iota // a tracepoint field at ctxOff
	srcDataLoc               // a __data_loc string of the record
	srcArg                   // a probe's argument, in the register at regOff
	srcWalk                  // at the address resolve left in R1
	srcBuiltin               // from a helper
	srcUSDT                  // a USDT argument, as its spec says
	srcEntry                 // a syscall's argument or number, in the user's pt_regs at regOff (Target.Entry)
)

// space is the address space a string pointer points into.
type space int

const (
	spaceKernel space = iota
	spaceUser
	spaceEither // user first, kernel if that read fails
)

// value is a resolved operand, ready to fetch.
type value struct {
	name    string
	kind    valueKind
	signed  bool
	size    int
	src     source
	ctxOff  int
	regOff  int16
	builtin string
	pointer bool              // an address (printed in hex)
	strLen  int               // a char array's room
	ptr     *value            // a NUL-terminated string at the address this value holds
	space   space             // where ptr points
	symbols map[uint64]string // __print_symbolic names of an int field
	usdt    *uprobe.Arg       // srcUSDT
	typed   bool              // a struct pointer in a trampoline's slot: no bit operations on it (Target.Slots)
}

// resolve finds what an operand denotes. For a walked path it emits the
// code that leaves the address in R1; fetch it right after.
func (c *compiler) resolve(o Operand) (value, error) {
	if o.CharPtr {
		inner := o
		inner.CharPtr = false
		v, err := c.resolve(inner)
		if err != nil {
			return v, err
		}
		if v.ptr != nil {
			return v, nil // already a string pointer: str() is harmless
		}
		if v.kind != kInt || v.size != 8 {
			return value{}, c.errAt(o.Pos, "%s is %s: only an 8-byte address can be read as a string", v.name, v.describe())
		}
		return c.stringAt(v, nil), nil
	}
	if c.t.Format != nil {
		if _, ok := c.t.Format.Field(o.Base); !ok && o.Base == "args" && len(o.Steps) > 0 {
			// bpftrace's args->NAME (or args.NAME) for a field.
			o = Operand{Pos: o.Steps[0].Pos, Base: o.Steps[0].Member, Steps: o.Steps[1:]}
			return c.resolveField(o)
		}
		if _, ok := c.t.Format.Field(o.Base); ok || !isBuiltin(o.Base) {
			return c.resolveField(o)
		}
		return c.builtin(o)
	}
	if c.t.USDT != nil {
		return c.usdtArg(o)
	}
	for i, a := range c.t.Args {
		if a.Name != o.Base {
			continue
		}
		arg := value{name: a.Name, src: srcArg, regOff: a.RegOff}
		if c.t.Slots {
			if err := slotReadable(a); err != nil {
				return value{}, c.errAt(o.Pos, "%v", err)
			}
			arg.typed = isStructPointer(a.Type)
		}
		if len(o.Steps) == 0 {
			v, err := scalar(arg, a.Type)
			if err != nil {
				return value{}, c.errAt(o.Pos, "%v", err)
			}
			if v.kind == kInt && isCharPointer(a.Type) {
				v = c.stringAt(v, a.Type)
			}
			return v, nil
		}
		c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, a.RegOff, bpf.DWord).
			WithSource(bpf.Comment(fmt.Sprintf("r1 = %s (argument %d)", a.Name, i+1))))
		return c.walk(o, a.Type)
	}
	if isBuiltin(o.Base) {
		return c.builtin(o)
	}
	var names []string
	for _, a := range c.t.Args {
		names = append(names, a.Name)
	}
	return value{}, c.errAt(o.Pos, "no argument or builtin %q (arguments: %s; builtins: %s)", o.Base, strings.Join(names, ", "), strings.Join(builtins, ", "))
}

// usdtArg resolves arg0..argN of a USDT probe, or a builtin.
func (c *compiler) usdtArg(o Operand) (value, error) {
	var i int
	if n, err := fmt.Sscanf(o.Base, "arg%d", &i); n != 1 || err != nil || o.Base != fmt.Sprintf("arg%d", i) {
		if isBuiltin(o.Base) {
			return c.builtin(o)
		}
		return value{}, c.errAt(o.Pos, "no argument or builtin %q (a USDT probe has arg0..arg%d; builtins: %s)", o.Base, len(c.t.USDT)-1, strings.Join(builtins, ", "))
	}
	if i >= len(c.t.USDT) {
		return value{}, c.errAt(o.Pos, "%s: this probe has %d argument(s), arg0..arg%d", o.Base, len(c.t.USDT), len(c.t.USDT)-1)
	}
	if len(o.Steps) > 0 || o.Cast != "" {
		return value{}, c.errAt(o.Pos, "%s is a number: it has no members (no BTF describes user space)", o.Base)
	}
	a := c.t.USDT[i]
	return value{name: o.Base, kind: kInt, size: a.Size, signed: a.Signed, src: srcUSDT, usdt: &a}, nil
}

// slotReadable reports whether a program may load the argument a from a
// trampoline's context on every kernel with trampolines: a number, or a
// pointer to a number, to void, or to a struct or union (which the
// verifier then types); btf_ctx_access refuses the rest ("is not a
// struct": char **, a function pointer).
func slotReadable(a Arg) error {
	p, ok := btf.UnderlyingType(a.Type).(*btf.Pointer)
	if !ok {
		return nil
	}
	switch btf.UnderlyingType(p.Target).(type) {
	case nil, *btf.Void, *btf.Int, *btf.Struct, *btf.Union:
		return nil
	default:
		return fmt.Errorf("argument %s (%s) cannot be read at a BPF trampoline: use --attach=perf (a kprobe)", a.Name, typeName(a.Type))
	}
}

// isStructPointer reports a pointer to a struct or union.
func isStructPointer(t btf.Type) bool {
	p, ok := btf.UnderlyingType(t).(*btf.Pointer)
	if !ok {
		return false
	}
	switch btf.UnderlyingType(p.Target).(type) {
	case *btf.Struct, *btf.Union:
		return true
	}
	return false
}

func isBuiltin(name string) bool {
	for _, b := range builtins {
		if b == name {
			return true
		}
	}
	return false
}

func (c *compiler) builtin(o Operand) (value, error) {
	if len(o.Steps) > 0 || o.Cast != "" {
		return value{}, c.errAt(o.Pos, "%s is a builtin: it has no members", o.Base)
	}
	v := value{name: o.Base, src: srcBuiltin, builtin: o.Base, size: 4}
	if o.Base == "comm" {
		v.kind, v.strLen = kString, 16 // TASK_COMM_LEN
	}
	return v, nil
}

// stringAt is the NUL-terminated string at the address p holds; t is the
// pointer's BTF type, for its __user tag (nil: none known).
func (c *compiler) stringAt(p value, t btf.Type) value {
	sp := spaceEither
	switch {
	case c.t.UserSpace || hasUserTag(t):
		sp = spaceUser
	case p.src == srcCtx && c.t.Format != nil:
		sp = spaceKernel // a tracepoint's own char * points at kernel memory
	}
	p.pointer = true
	return value{name: p.name, kind: kString, ptr: &p, space: sp}
}

// hasUserTag reports a btf_type_tag("user") on the pointer's target (kernels
// built with clang and pahole 1.23+; Debian's gcc-built BTF has none).
func hasUserTag(t btf.Type) bool {
	p, ok := t.(*btf.Pointer)
	if !ok {
		return false
	}
	for t := p.Target; t != nil; {
		switch u := t.(type) {
		case *btf.TypeTag:
			if u.Value == "user" {
				return true
			}
			t = u.Type
		case *btf.Const:
			t = u.Type
		case *btf.Volatile:
			t = u.Type
		default:
			return false
		}
	}
	return false
}

// isCharPointer reports whether t is a pointer to char (const or not).
func isCharPointer(t btf.Type) bool {
	p, ok := btf.UnderlyingType(t).(*btf.Pointer)
	if !ok {
		return false
	}
	i, ok := btf.UnderlyingType(p.Target).(*btf.Int)
	return ok && i.Size == 1
}

func (c *compiler) resolveField(o Operand) (value, error) {
	f, ok := c.t.Format.Field(o.Base)
	if !ok {
		return value{}, c.errAt(o.Pos, "event %s has no field %q (fields: %s; builtins: %s)", c.t.Format.Name, o.Base, strings.Join(c.t.Format.FieldNames(), ", "), strings.Join(builtins, ", "))
	}
	if f.Common {
		// The kernel refuses tracepoint programs that read the record's
		// first 8 bytes, where the common fields are.
		if f.Name == "common_pid" && len(o.Steps) == 0 && o.Cast == "" {
			return c.builtin(Operand{Pos: o.Pos, Base: "tid"}) // the task's pid: the thread's id
		}
		return value{}, c.errAt(o.Pos, "%s is in the record's first 8 bytes, which a BPF program may not read (common_pid reads as the tid builtin; pid is the process)", f.Name)
	}
	if f.DataLoc && c.t.UserSpace {
		return value{}, c.errAt(o.Pos, "%v", syscallCopyErr(f))
	}
	if o.Cast != "" {
		if f.Size != 8 || f.DataLoc || f.ArrayLen > 0 {
			return value{}, c.errAt(o.Pos, "field %s (%s) is not a pointer: it cannot be cast to struct %s *", f.Name, f.Type, o.Cast)
		}
		if c.t.BTF == nil {
			return value{}, c.errAt(o.Pos, "casts need the kernel's BTF (/sys/kernel/btf/vmlinux)")
		}
		st, err := c.structByName(o.Cast)
		if err != nil {
			return value{}, c.errAt(o.Pos, "%v", err)
		}
		if c.t.Entry != nil {
			v, err := c.entryField(f)
			if err != nil {
				return value{}, c.errAt(o.Pos, "%v", err)
			}
			c.emitEntryLoad(bpf.R1, v)
		} else {
			ld, _ := asm.LoadField(bpf.R1, f.Name, f.Offset, 8, false)
			c.emit(ld...)
		}
		if len(o.Steps) == 0 {
			return value{}, c.errAt(o.Pos, "a cast pointer must be walked: ((struct %s *)%s)->member", o.Cast, f.Name)
		}
		return c.walk(o, &btf.Pointer{Target: st})
	}
	if len(o.Steps) > 0 {
		return value{}, c.errAt(o.Steps[0].Pos-2, "field %s is not a struct pointer that can be walked: cast it, as in ((struct sk_buff *)%s)->len", f.Name, f.Name)
	}
	v, err := fieldVal(f, c.t.Format, c.t.UserSpace)
	if err != nil || c.t.Entry == nil {
		return v, err
	}
	// At the syscall's entry: the same value, from the user's registers.
	in := &v
	if v.ptr != nil {
		in = v.ptr // a string: its address is the register
	}
	e, err := c.entryField(f)
	if err != nil {
		return value{}, c.errAt(o.Pos, "%v", err)
	}
	in.src, in.regOff, in.ctxOff = srcEntry, e.regOff, 0
	return v, nil
}

// syscallCopyErr refuses a syscall event's __data_loc field (6.19+): the
// kernel's copy of the user memory an argument points to (__buf_val for
// buf). It is in the record the kernel stores, but a BPF program on the
// event gets only the syscall's number and arguments (perf_call_bpf_enter
// builds that context apart), so a read of the field reads past them.
// filter reads the argument's memory itself.
func syscallCopyErr(f tracefs.Field) error {
	err := fmt.Errorf("%s is the kernel's copy of user memory in the stored record; a BPF program on a syscall event is handed only the syscall's number and arguments", f.Name)
	if arg, ok := strings.CutSuffix(strings.TrimPrefix(f.Name, "__"), "_val"); ok && arg != "" {
		err = fmt.Errorf("%w: compare the argument %s, whose string filter reads from user memory", err, arg)
	}
	return err
}

// entryField is where a syscalls:sys_enter_* field is in the user's
// pt_regs: __syscall_nr in the number's register, the others in the
// argument registers in the format's order.
func (c *compiler) entryField(f tracefs.Field) (value, error) {
	if f.Name == "__syscall_nr" {
		return value{name: f.Name, regOff: c.t.Entry.SyscallNr}, nil
	}
	i := 0
	for _, g := range c.t.Format.Fields {
		switch {
		case g.Common || g.Name == "__syscall_nr" || g.DataLoc: // 6.19+ adds __data_loc copies (__buf_val) after the arguments
			continue
		case g.Name == f.Name:
			if i >= len(c.t.Entry.SyscallArgs) {
				return value{}, fmt.Errorf("%s is a syscall's argument %d: a syscall has %d", f.Name, i+1, len(c.t.Entry.SyscallArgs))
			}
			return value{name: f.Name, regOff: c.t.Entry.SyscallArgs[i]}, nil
		}
		i++
	}
	return value{}, fmt.Errorf("%s is not a syscall's argument", f.Name)
}

// emitEntryLoad loads a srcEntry value's register into dst: all 64 bits
// of an argument, the low 32 of the number (an int in the record; arm64's
// syscallno is an s32, x86-64's orig_ax a long).
func (c *compiler) emitEntryLoad(dst bpf.Register, v value) {
	size, what := bpf.DWord, "argument"
	if v.regOff == c.t.Entry.SyscallNr {
		size, what = bpf.Word, "number"
	}
	c.emit(
		bpf.LoadMem(dst, asm.RegCtx, 0, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("%s = %s: the syscall's %s, at pt_regs+%d of the wrapper's argument", dst, v.name, what, v.regOff))),
		bpf.LoadMem(dst, dst, v.regOff, size),
	)
}

// fieldVal is the value of a tracepoint field.
func fieldVal(f tracefs.Field, format *tracefs.Format, userSpace bool) (value, error) {
	switch {
	case f.DataLoc:
		return value{name: f.Name, kind: kString, src: srcDataLoc, ctxOff: f.Offset}, nil
	case f.ArrayLen > 0 && strings.HasPrefix(f.Type, "char"):
		return value{name: f.Name, kind: kString, src: srcCtx, ctxOff: f.Offset, strLen: f.ArrayLen}, nil
	case f.ArrayLen > 0 || f.Size > 8 || f.Size == 0:
		return value{}, fmt.Errorf("field %s (%s) is neither a number nor a string", f.Name, f.Type)
	}
	size, signed := f.Value()
	v := value{name: f.Name, kind: kInt, signed: signed, size: size, src: srcCtx, ctxOff: f.Offset, pointer: f.IsPointer(), symbols: format.Symbolic[f.Name]}
	if f.IsCharPointer() && f.Size == 8 {
		sp := spaceKernel
		if userSpace {
			sp = spaceUser
		}
		return value{name: f.Name, kind: kString, ptr: &v, space: sp}, nil
	}
	return v, nil
}

func (c *compiler) structByName(name string) (btf.Type, error) {
	var st *btf.Struct
	if err := c.t.BTF.TypeByName(name, &st); err != nil {
		return nil, fmt.Errorf("no struct %s in the kernel's BTF", name)
	}
	return st, nil
}

// scalar describes v, an argument or walked member, as its type t says.
func scalar(v value, t btf.Type) (value, error) {
	switch u := btf.UnderlyingType(t).(type) {
	case *btf.Int:
		v.kind, v.signed, v.size = kInt, u.Encoding&btf.Signed != 0, int(u.Size)
		return v, nil
	case *btf.Enum:
		v.kind, v.signed, v.size = kInt, u.Signed, int(u.Size)
		return v, nil
	case *btf.Pointer:
		v.kind, v.size, v.pointer = kInt, 8, true
		return v, nil
	case *btf.Array:
		if i, ok := btf.UnderlyingType(u.Type).(*btf.Int); ok && i.Size == 1 && v.src == srcWalk {
			v.kind, v.strLen = kString, int(u.Nelems)
			return v, nil
		}
	}
	return value{}, fmt.Errorf("%s has type %s, neither a number nor a char array", v.name, typeName(t))
}

func (v value) describe() string {
	switch {
	case v.kind == kString:
		return "a string"
	case v.pointer:
		return "a pointer"
	}
	return fmt.Sprintf("a %d-byte number", v.size)
}

func typeName(t btf.Type) string {
	switch u := t.(type) {
	case *btf.Pointer:
		return typeName(u.Target) + " *"
	case *btf.Struct:
		return "struct " + u.Name
	case *btf.Union:
		return "union " + u.Name
	case *btf.Const:
		return "const " + typeName(u.Type)
	case *btf.Volatile:
		return typeName(u.Type)
	case *btf.TypeTag:
		return typeName(u.Type)
	case *btf.Array:
		return fmt.Sprintf("%s[%d]", typeName(u.Type), u.Nelems)
	case nil:
		return "void"
	}
	if n := t.TypeName(); n != "" {
		return n
	}
	return fmt.Sprintf("%T", t)
}

// walk follows the steps of a path from the pointer in R1 of type t. At
// every step R1 holds an address; a "->" through a pointer member reads it
// with the probe-read helper.
func (c *compiler) walk(o Operand, t btf.Type) (value, error) {
	name := o.Base
	if o.Cast != "" {
		name = fmt.Sprintf("((struct %s *)%s)", o.Cast, o.Base)
	}
	inReg := true // R1 holds a pointer of type t, not the address of a t
	for _, s := range o.Steps {
		if s.Deref {
			if !inReg {
				// The member is itself a pointer: read it.
				if _, ok := btf.UnderlyingType(t).(*btf.Pointer); !ok {
					return value{}, c.errAt(s.Pos-2, "%s is %s, not a pointer: use '.' instead of '->'", name, typeName(t))
				}
				c.read(8, scratchOff)
				c.emit(bpf.LoadMem(bpf.R1, bpf.RFP, scratchOff, bpf.DWord))
			}
			p, ok := btf.UnderlyingType(t).(*btf.Pointer)
			if !ok {
				return value{}, c.errAt(s.Pos-2, "%s is %s, not a pointer: '->' cannot walk through it", name, typeName(t))
			}
			t = p.Target
			if c.t.BTF != nil {
				// The struct behind a pointer is decoded when walked into.
				var err error
				if t, err = c.t.BTF.Complete(t); err != nil {
					return value{}, c.errAt(s.Pos, "%s: %v", name, err)
				}
			}
		} else if inReg {
			return value{}, c.errAt(s.Pos-1, "%s is a pointer: use '->'", name)
		}
		off, mt, err := member(t, s.Member)
		if err != nil {
			return value{}, c.errAt(s.Pos, "%s: %v", name, err)
		}
		sep := map[bool]string{true: "->", false: "."}[s.Deref]
		if off != 0 {
			c.emit(bpf.Add.Imm(bpf.R1, int32(off)).WithSource(bpf.Comment(fmt.Sprintf("r1 = &%s%s%s (offset %d, from BTF)", name, sep, s.Member, off))))
		}
		name += sep + s.Member
		t, inReg = mt, false
	}
	v, err := scalar(value{name: name, src: srcWalk}, t)
	if err != nil {
		return value{}, c.errAt(o.Steps[len(o.Steps)-1].Pos, "%v", err)
	}
	if v.kind == kInt && isCharPointer(t) {
		v = c.stringAt(v, t)
	}
	return v, nil
}

// member finds a struct or union member by name, looking into anonymous
// members, and returns its byte offset and type.
func member(t btf.Type, name string) (int, btf.Type, error) {
	members, ok := kbtf.Members(t)
	if !ok {
		return 0, nil, fmt.Errorf("%s is not a struct: it has no member %q", typeName(t), name)
	}
	if off, m, ok := kbtf.Member(t, name); ok {
		if m.BitfieldSize != 0 {
			return 0, nil, fmt.Errorf("member %s is a bitfield: not supported", name)
		}
		return off, m.Type, nil
	}
	var names []string
	for _, m := range members {
		if m.Name != "" {
			names = append(names, m.Name)
		}
	}
	sort.Strings(names)
	if len(names) > 12 {
		names = append(names[:12], "...")
	}
	return 0, nil, fmt.Errorf("%s has no member %q (members: %s)", typeName(t), name, strings.Join(names, ", "))
}

// read probe-reads size bytes of kernel memory at the address in R1 to the
// stack at off.
func (c *compiler) read(size int, off int16) {
	c.emit(
		bpf.Mov.Reg(bpf.R3, bpf.R1).WithSource(bpf.Comment(fmt.Sprintf("read %d bytes at r1 with %v", size, c.t.Read.Kernel))),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, int32(off)),
		bpf.Mov.Imm(bpf.R2, int32(size)),
		c.t.Read.Kernel.Call(),
	)
}

func sizeOf(n int) bpf.Size {
	switch n {
	case 1:
		return bpf.Byte
	case 2:
		return bpf.Half
	case 4:
		return bpf.Word
	}
	return bpf.DWord
}

// fetchInt emits code that leaves an integer value in dst, extended to 64
// bits by its sign. It may call helpers: R1-R5 are clobbered.
func (c *compiler) fetchInt(v value, dst bpf.Register) error {
	if v.size != 1 && v.size != 2 && v.size != 4 && v.size != 8 {
		return fmt.Errorf("%s has an unsupported size %d", v.name, v.size)
	}
	narrow := v.size < 8 // a register's upper bits need clearing or extending
	switch v.src {
	case srcCtx:
		ld, err := asm.LoadField(dst, v.name, v.ctxOff, v.size, v.signed)
		if err != nil {
			return err
		}
		c.emit(ld...)
		return nil // LoadField extends
	case srcArg:
		where := fmt.Sprintf("register at pt_regs+%d", v.regOff)
		if c.t.Slots {
			where = fmt.Sprintf("the trampoline's slot %d", v.regOff/8)
		}
		c.emit(bpf.LoadMem(dst, asm.RegCtx, v.regOff, bpf.DWord).WithSource(bpf.Comment(fmt.Sprintf("%s = %s (%s)", dst, v.name, where))))
	case srcEntry:
		c.emitEntryLoad(dst, v)
		narrow = v.size < 8 && (v.regOff != c.t.Entry.SyscallNr || v.signed)
	case srcWalk:
		c.read(v.size, scratchOff)
		c.emit(bpf.LoadMem(dst, bpf.RFP, scratchOff, sizeOf(v.size)))
		narrow = v.signed && v.size < 8 // loaded at its size: zero-extended already
	case srcUSDT:
		return c.fetchUSDT(v, dst)
	case srcBuiltin:
		switch v.builtin {
		case "pid", "tid":
			if c.t.NS != nil {
				// {u32 pid; u32 tgid;}: the thread's id, then the process's.
				field := int16(0)
				if v.builtin == "pid" {
					field = 4
				}
				c.emit(asm.NsPidTgid(*c.t.NS, scratchOff)...)
				c.emit(bpf.LoadMem(dst, bpf.RFP, scratchOff+field, bpf.Word).WithSource(bpf.Comment(v.builtin + " in this pid namespace, 0 outside it")))
				return nil
			}
			c.emit(bpf.FnGetCurrentPidTgid.Call().WithSource(bpf.Comment(v.builtin + " from bpf_get_current_pid_tgid()")))
		case "uid", "gid":
			c.emit(bpf.FnGetCurrentUidGid.Call().WithSource(bpf.Comment(v.builtin + " from bpf_get_current_uid_gid()")))
		case "cpu":
			c.emit(bpf.FnGetSmpProcessorId.Call().WithSource(bpf.Comment("cpu = bpf_get_smp_processor_id()")))
		default:
			return fmt.Errorf("%s is not a number", v.name)
		}
		c.emit(bpf.Mov.Reg(dst, bpf.R0))
		switch v.builtin {
		case "pid", "gid": // the upper half
			c.emit(bpf.RSh.Imm(dst, 32))
			return nil
		case "cpu":
			return nil
		}
		narrow = true
	default:
		return fmt.Errorf("%s is not a number", v.name)
	}
	if narrow {
		return c.extend(dst, v.size, v.signed)
	}
	return nil
}

// fetchUSDT emits the load of a USDT argument into dst: a register, a
// constant, or |size| bytes of user memory at an address computed from
// registers, the spec's displacement and symbol.
func (c *compiler) fetchUSDT(v value, dst bpf.Register) error {
	a := v.usdt
	regOff := func(name string) (int16, error) {
		off, ok := c.t.Regs.Named[name]
		if !ok {
			return 0, fmt.Errorf("%s: register %s is not in this architecture's pt_regs", a.Text, name)
		}
		return off, nil
	}
	note := fmt.Sprintf("%s = %s (USDT spec %s)", dst, v.name, a.Text)
	switch a.Kind {
	case uprobe.ArgConst:
		// Truncated and extended here, as the load would be.
		v := a.Off
		if shift := 64 - 8*a.Size; shift > 0 && a.Signed {
			v = v << shift >> shift
		} else if shift > 0 {
			v = int64(uint64(v) << shift >> shift)
		}
		if v >= math.MinInt32 && v <= math.MaxInt32 {
			c.emit(bpf.Mov.Imm(dst, int32(v)).WithSource(bpf.Comment(note)))
		} else {
			c.emit(bpf.LoadImm(dst, v, bpf.DWord).WithSource(bpf.Comment(note)))
		}
		return nil
	case uprobe.ArgReg:
		off, err := regOff(a.Reg)
		if err != nil {
			return err
		}
		c.emit(bpf.LoadMem(dst, asm.RegCtx, off, bpf.DWord).WithSource(bpf.Comment(note)))
		return c.extend(dst, a.Size, a.Signed)
	}
	// An address in R1, then a read of user memory.
	disp := a.Off + int64(a.SymAddr)
	first := len(c.insns)
	switch a.Kind {
	case uprobe.ArgMem:
		off, err := regOff(a.Reg)
		if err != nil {
			return err
		}
		c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, off, bpf.DWord))
	case uprobe.ArgIndex:
		idx, err := regOff(a.Index)
		if err != nil {
			return err
		}
		c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, idx, bpf.DWord))
		if shift := map[int]int32{2: 1, 4: 2, 8: 3}[a.Scale]; shift != 0 {
			c.emit(bpf.LSh.Imm(bpf.R1, shift))
		}
		if a.Reg != "" {
			base, err := regOff(a.Reg)
			if err != nil {
				return err
			}
			c.emit(bpf.LoadMem(bpf.R2, asm.RegCtx, base, bpf.DWord), bpf.Add.Reg(bpf.R1, bpf.R2))
		}
	case uprobe.ArgGlobal:
		// The uprobe sets ip to the site: the global is as far from it as
		// their link-time addresses are.
		c.emit(bpf.LoadMem(bpf.R1, asm.RegCtx, c.t.Regs.IP, bpf.DWord))
		disp = int64(a.SymAddr) + a.Off - int64(c.t.Site)
	default:
		return fmt.Errorf("%s: unknown argument form", a.Text)
	}
	c.insns[first] = c.insns[first].WithSource(bpf.Comment(note))
	switch {
	case disp == 0:
	case disp >= math.MinInt32 && disp <= math.MaxInt32:
		c.emit(bpf.Add.Imm(bpf.R1, int32(disp)))
	default:
		c.emit(bpf.LoadImm(bpf.R2, disp, bpf.DWord), bpf.Add.Reg(bpf.R1, bpf.R2))
	}
	c.emit(
		bpf.Mov.Reg(bpf.R3, bpf.R1),
		bpf.Mov.Reg(bpf.R1, bpf.RFP),
		bpf.Add.Imm(bpf.R1, scratchOff),
		bpf.Mov.Imm(bpf.R2, int32(a.Size)),
		c.t.Read.User.Call(),
		bpf.LoadMem(dst, bpf.RFP, scratchOff, sizeOf(a.Size)),
	)
	if a.Signed && a.Size < 8 {
		return c.extend(dst, a.Size, true)
	}
	return nil
}

// extend clears or sign-extends the bits of dst above its size bytes.
func (c *compiler) extend(dst bpf.Register, size int, signed bool) error {
	if size >= 8 {
		return nil
	}
	shift := int32(64 - 8*size)
	c.emit(bpf.LSh.Imm(dst, shift))
	if signed {
		c.emit(bpf.ArSh.Imm(dst, shift))
	} else {
		c.emit(bpf.RSh.Imm(dst, shift))
	}
	return nil
}

// fetchStr emits code that makes the first n bytes of a string readable,
// and returns where: the record (RegCtx) or the stack (RFP), at off.
func (c *compiler) fetchStr(v value, n int) (bpf.Register, int16, error) {
	switch {
	case v.ptr != nil:
		if err := c.fetchInt(*v.ptr, bpf.R1); err != nil {
			return 0, 0, err
		}
		c.readStr(v, strOff, n)
	case v.src == srcCtx:
		return asm.RegCtx, int16(v.ctxOff), nil
	case v.src == srcDataLoc:
		c.dataLocAddr(v)
		c.read(n, strOff)
	case v.src == srcWalk:
		c.read(n, strOff)
	case v.builtin == "comm":
		c.emit(
			bpf.Mov.Reg(bpf.R1, bpf.RFP).WithSource(bpf.Comment("comm = bpf_get_current_comm()")),
			bpf.Add.Imm(bpf.R1, strOff),
			bpf.Mov.Imm(bpf.R2, 16),
			bpf.FnGetCurrentComm.Call(),
		)
	default:
		return 0, 0, fmt.Errorf("%s is not a string", v.name)
	}
	return bpf.RFP, strOff, nil
}

// dataLocAddr puts the address of a __data_loc string in R1: the record
// holds a u32 whose low 16 bits are the string's offset in the record.
func (c *compiler) dataLocAddr(v value) {
	c.emit(
		bpf.LoadMem(bpf.R1, asm.RegCtx, int16(v.ctxOff), bpf.Word).WithSource(bpf.Comment(fmt.Sprintf("%s: __data_loc, offset in the low 16 bits", v.name))),
		bpf.And.Imm(bpf.R1, 0xffff),
		bpf.Add.Reg(bpf.R1, asm.RegCtx),
	)
}

// readStr reads at most n-1 bytes and a NUL of the string at the address in
// R1 to the stack at dst. The _str helpers, not a plain read of n bytes:
// strncpy_from_user copies a word at a time, and measured here (make bench,
// openat suite) a 25-byte filename took 111 ns of BPF time that way against
// 147 ns through copy_from_user_nofault. A string that cannot be read (a
// fault, a page not yet touched) reads as empty: the helpers clear the
// buffer.
func (c *compiler) readStr(v value, dst int16, n int) {
	kernel, user := c.t.Read.KernelStr, c.t.Read.UserStr
	helper := kernel
	if v.space != spaceKernel {
		helper = user
	}
	either := v.space == spaceEither && c.t.Read.Split()
	from := bpf.R1
	if either {
		from = bpf.R8 // kept for the second read
		c.emit(bpf.Mov.Reg(bpf.R8, bpf.R1))
	}
	call := func(h bpf.BuiltinFunc, note string) {
		c.emit(
			bpf.Mov.Reg(bpf.R3, from).WithSource(bpf.Comment(note)),
			bpf.Mov.Reg(bpf.R1, bpf.RFP),
			bpf.Add.Imm(bpf.R1, int32(dst)),
			bpf.Mov.Imm(bpf.R2, int32(n)),
			h.Call(),
		)
	}
	call(helper, fmt.Sprintf("read up to %d bytes of the string at %s with %v", n, v.name, helper))
	if either {
		done := c.label("read")
		c.emit(bpf.JSGE.Imm(bpf.R0, 0, done))
		call(kernel, "not a user address: a kernel one")
		c.mark(done)
	}
}

// stringCmp compares a string with a literal: ==, != and the prefix match
// ~ "PREFIX*".
func (c *compiler) stringCmp(v value, lit Operand, op string, opPos int, target string, when bool) error {
	s := lit.Str
	prefix := false
	switch op {
	case "==", "!=":
	case "~":
		if strings.IndexByte(s, '*') != len(s)-1 {
			return c.errAt(lit.Pos, "~ takes a prefix ending in a single '*', as in \"/etc/*\" (use == for an exact match)")
		}
		s, prefix = s[:len(s)-1], true
	default:
		return c.errAt(opPos, "strings compare only with ==, != and ~ (prefix)")
	}
	if len(s) > maxString {
		return c.errAt(lit.Pos, "string literals are limited to %d bytes", maxString)
	}
	if strings.IndexByte(s, 0) >= 0 {
		return c.errAt(lit.Pos, "string literal contains a NUL byte")
	}
	n := len(s) + 1 // with the terminator
	if prefix {
		n = len(s)
	}
	if v.strLen > 0 && n > v.strLen {
		if len(s) > v.strLen {
			// Longer than the field: never equal.
			if op != "!=" {
				return c.errAt(lit.Pos, "%q is longer than %s (%d bytes): it never matches", s, v.name, v.strLen)
			}
			if when { // != always holds
				c.emit(bpf.Ja.Label(target))
			}
			return nil
		}
		n = v.strLen // exactly as long: no terminator to check
	}
	if n == 0 { // ~ "*": every string
		if when {
			c.emit(bpf.Ja.Label(target))
		}
		return nil
	}
	readLen := n
	if v.ptr != nil {
		// A string read ends in a NUL where it stops: one byte more, so
		// that a longer string shows its next character there, not a NUL
		// that would make "/etc/passwd" equal "/etc/pa".
		readLen = n + 1
	}
	base, off, err := c.fetchStr(v, readLen)
	if err != nil {
		return err
	}
	jumpIfEqual := (op == "!=") != when
	c.equalBranch(base, off, []byte(s), n, target, jumpIfEqual)
	return nil
}

// equalBranch compares n bytes at base+off with want (NUL-padded to n) in
// the widest aligned loads, and jumps to target when they are equal
// (ifEqual) or when they differ.
func (c *compiler) equalBranch(base bpf.Register, off int16, want []byte, n int, target string, ifEqual bool) {
	differ := target
	if ifEqual {
		differ = c.label("differ")
	}
	for i := 0; i < n; {
		size := 8
		for size > 1 && ((int(off)+i)%size != 0 || i+size > n) {
			size /= 2
		}
		var val uint64
		for k := size - 1; k >= 0; k-- { // little-endian
			val <<= 8
			if i+k < len(want) {
				val |= uint64(want[i+k])
			}
		}
		chunk := make([]byte, size)
		copy(chunk, want[min(i, len(want)):])
		c.emit(bpf.LoadMem(bpf.R1, base, off+int16(i), sizeOf(size)).WithSource(bpf.Comment(fmt.Sprintf("bytes %d..%d: %q?", i, i+size-1, chunk))))
		if val <= math.MaxInt32 {
			c.emit(bpf.JNE.Imm(bpf.R1, int32(val), differ))
		} else {
			c.emit(bpf.LoadImm(bpf.R2, int64(val), bpf.DWord), bpf.JNE.Reg(bpf.R1, bpf.R2, differ))
		}
		i += size
	}
	if ifEqual {
		c.emit(bpf.Ja.Label(target))
		c.mark(differ)
	}
}

// symbolic maps a name of a field's __print_symbolic table to its value,
// so that reason == "NO_SOCKET" works on every kernel.
func symbolic(v value, name string) (uint64, bool) {
	for val, n := range v.symbols {
		if n == name {
			return val, true
		}
	}
	return 0, false
}

func symbolicHint(v value) string {
	if len(v.symbols) == 0 {
		return ""
	}
	var names []string
	for _, n := range v.symbols {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(names) > 6 {
		names = append(names[:6], "...")
	}
	return fmt.Sprintf(", or one of its names: %s", strings.Join(names, ", "))
}
